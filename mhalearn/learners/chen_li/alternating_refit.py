"""Ours, not in the paper: phase 3's alternating refit of Ŵ_Σ, and its steps' results.

On a true agreement row y_ℓ = (âᵀX)W_Σ is linear in W_Σ, so decoding and
refitting on the accepted rows alternate until Ŵ_Σ stops moving
(:func:`alternating_projection_sum`).  Phase 3
(:func:`~mhalearn.learners.chen_li.phase3_refine_sum.refine_projection_sum`)
runs it after the paper's certified refit (:class:`AlternatingRefit`), and
on a stream longer than the prefix phases 1–3 read it goes on over the
rows of one candidate pass
(:func:`~mhalearn.learners.chen_li.phase3_refine_sum.refit_on_stream`:
:class:`StreamRefit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..least_squares import least_squares
from ..report import PhaseResult, data_field
from .agreement_passes import draw_pool
from .agreement_rows import AgreementRows


def agreement_refit(rows: AgreementRows) -> np.ndarray | None:
    """Least squares y_ℓ ≈ (âᵀX)W_Σ over the agreement rows (None if rank-deficient)."""
    mixed = rows.mixed_tokens()
    return least_squares(mixed, rows.label, 2 * mixed.shape[1])


def alternating_projection_sum(source, w_sum: np.ndarray, *, quantile: float, iterations: int, refit_rows: int,
                               rounds: int, pool_fraction: float, simplex_tol: float, redraw_tol: float = 5e-3,
                               tolerance: float = 1e-3, max_pool: int | None = None, pool: AgreementRows | None = None,
                               rng: np.random.Generator | None = None, callback=None):
    """Ours, not Chen & Li: alternate decoding and refitting Ŵ_Σ on the agreement rows.

    A *pool* of candidate rows — the best rows of every block by relative
    residual under the current Ŵ_Σ, about ``max_pool`` in all
    (:func:`draw_pool`; ``pool`` if given, drawn under the starting Ŵ_Σ) —
    is kept.  Each iteration re-decodes the pool with the current Ŵ_Σ, keeps
    its best rows — min(⌈``quantile`` · rows scanned⌉, ``refit_rows``) of
    them, within ``simplex_tol`` of the simplex — and refits Ŵ_Σ by least
    squares of y_ℓ on âᵀX over them.  Keeping only the best-explained rows is
    a trimmed fit: a non-agreement row is explained worse by a better Ŵ_Σ,
    so it drops out as Ŵ_Σ improves.  A *round* ends when Ŵ_Σ moves by less
    than ``tolerance`` or the pool's agreement fit — the median relative
    residual of the kept rows, a gauge of Ŵ_Σ from the data alone — gets
    worse; the pool is then drawn again from the whole stream under the new
    Ŵ_Σ if Ŵ_Σ moved by more than ``redraw_tol`` since the pool was drawn
    (the rows a crude Ŵ_Σ ranks best hold few of the agreement rows), for at
    most ``rounds`` draws and ``iterations`` iterations in all.
    ``callback(iteration, w_sum, kept)`` sees every iteration.

    Returns the final Ŵ_Σ and one dict per iteration (round, agreement fit,
    rows kept, the largest residual among them, relative change, why the last one stopped).
    """
    history, drawn = [], 0
    while len(history) < iterations:
        if pool is None or drawn > 0:
            pool = draw_pool(source, w_sum, pool_fraction=pool_fraction, simplex_tol=simplex_tol,
                             max_pool=max_pool, rng=rng)
        drawn += 1
        drawn_at, previous_fit = w_sum, math.inf
        count = min(math.ceil(quantile * pool.scanned), refit_rows)
        while len(history) < iterations:
            if len(history) and history[-1]["round"] == drawn:  # the pool was decoded under an older Ŵ_Σ
                kept = pool.best_under(w_sum, count, simplex_tol=simplex_tol)
            else:
                kept = pool.best(count, simplex_tol=simplex_tol)
            fit = float(np.median(kept.residual)) if len(kept) else math.inf
            if callback is not None:
                callback(len(history), w_sum, kept)
            entry = {"round": drawn, "agreement_fit": fit, "rows": len(kept),
                     "kept_residual": float(kept.residual.max()) if len(kept) else math.inf}
            history.append(entry)
            if fit > previous_fit:
                entry["stopped"] = "worse"
                break
            previous_fit = fit
            refit = agreement_refit(kept)
            if refit is None:
                entry["stopped"] = "too few rows"
                break
            entry["change"] = float(np.linalg.norm(refit - w_sum) / np.linalg.norm(w_sum))
            w_sum = refit
            if entry["change"] < tolerance:
                entry["stopped"] = "converged"
                break
        else:
            history[-1]["stopped"] = "out of iterations"
        if history[-1]["stopped"] == "too few rows" or drawn >= rounds or (
                np.linalg.norm(w_sum - drawn_at) <= redraw_tol * np.linalg.norm(drawn_at)):
            break
    return w_sum, history


@dataclass(frozen=True, kw_only=True)
class AlternatingRefit(PhaseResult):
    """Our step: ``iterations`` of decoding and refitting from the ``start`` estimate, on ``rounds`` pools.

    ``agreement_fit`` is the median relative residual of the last kept
    rows (a gauge of Ŵ_Σ from the data alone), ``kept_residual`` the largest;
    ``stopped`` why the last round ended.
    """

    start: str
    iterations: int
    rounds: int
    agreement_fit: float
    kept_residual: float
    stopped: str
    w_sum: np.ndarray = data_field()

    name = "alternating refit (ours)"


@dataclass(frozen=True, kw_only=True)
class StreamRefit(PhaseResult):
    """Ours: the candidate pass over the whole stream, then our refit going on on its rows, in memory.

    ``passes`` candidate passes read the stream (a second one around the
    refit's Ŵ_Σ when the first did not cover it); ``candidates`` rows were
    kept, every row whose residual can reach ``threshold`` within ``radius``
    (relative to ‖Ŵ_Σ‖₂) of the last pass's Ŵ_Σ, from which the refit
    ``moved``.  ``exact`` says that every selection the refit made, and
    phase 4's rows of K*, are those a pass over the whole stream would
    make: Ŵ_Σ stayed inside the radius covered and every selection's residuals
    below ``threshold``.  Data: Ŵ_Σ and the candidate rows (phase 4 reads K* from them).
    """

    passes: int
    candidates: int
    threshold: float
    radius: float
    moved: float
    exact: bool
    iterations: int
    agreement_fit: float
    stopped: str
    w_sum: np.ndarray = data_field()
    rows: AgreementRows = data_field()

    name = "whole-stream refit (ours)"


__all__ = ["AlternatingRefit", "StreamRefit", "agreement_refit", "alternating_projection_sum"]
