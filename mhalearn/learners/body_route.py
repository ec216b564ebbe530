"""Phases 1–4 of Chen & Li's learner as one function: examples in, span{Θ_i} (or a refusal) out.

:func:`sculpt_span` runs the crude projection sum, the sculpting of the
affine-hull body from agreement rows, the refinement of Ŵ_Σ (the paper's
certified refit, then our alternating refit) and the reading of the span
from the re-sculpted body K*.  It works on a stream of examples, so an
experiment can run it on 10⁶ sequences in bounded memory;
:class:`~mhalearn.SculptLearner` wraps it with the net search and the
certified selection.  :class:`BodySettings` holds its hyper-parameters
(documented on :class:`~mhalearn.SculptLearner`).

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ._common import PhaseTimer
from .agreement import find_agreement_rows, slab_constraints
from .body import ConvexBody, read_affine_hull, span_basis
from .diagnostics import TeacherDiagnostics
from .projection_sum import (
    alternating_projection_sum,
    certification_margin,
    certified_projection_sum,
    certify_rows,
    crude_projection_sum,
    draw_pool,
    margin_rows,
)
from .report import Route


@dataclass(frozen=True)
class BodySettings:
    """Hyper-parameters of phases 1–4 (see :class:`~mhalearn.SculptLearner` for each)."""

    quantile: float | None = None
    residual_tol: float = 0.02
    simplex_tol: float = 0.02
    w_min: float = 0.02
    slab_width: float = 20.0
    slab_floor: float = 0.02
    max_rows: int = 20_000
    max_constraints: int = 1500
    eta: float = 0.05
    refit_iterations: int = 40
    pool_fraction: float = 0.1
    min_equalities: int | None = None
    min_gap: float = 2.0
    span_point: str = "centre"
    norm_bound: float = 12.0

    def quantile_for(self, heads: int) -> float:
        """The quantile, by default 1 at m = 1 (every row agrees) and 0.01 otherwise."""
        if self.quantile is not None:
            return self.quantile
        return 1.0 if heads == 1 else 0.01

    def pool_fraction_for(self, heads: int) -> float:
        return max(self.pool_fraction, self.quantile_for(heads))

    def max_pool_for(self, heads: int) -> int:
        """Pool rows such that each alternating iteration accepts about ``max_rows`` of them."""
        return int(self.max_rows * self.pool_fraction_for(heads) / self.quantile_for(heads))


def sculpt_span(source, heads: int, settings: BodySettings, rng: np.random.Generator, report: dict,
                diagnostics: TeacherDiagnostics):
    """Phases 1–4 of Chen & Li's learner: from examples to span{Θ_i}, or a refusal.

    Parameters
    ----------
    source : a stream of examples (:mod:`mhalearn.learners.streams`).
    heads : m.
    settings : the phases' hyper-parameters.
    rng : random generator (subsamples of rows and constraints).
    report : :class:`~mhalearn.learners.report.SpanSearchReport` with (empty)
        phases ``crude_sum``, ``sculpt``, ``min_norm``; each phase writes its
        time and figures there, and phase 4 its route as ``span.body``.
    diagnostics : the diagnostics hook (errors against a planted teacher, when there is one).

    Returns
    -------
    (basis, scale) — an orthonormal basis (m, d²) of the span and the norm of
    the point that completes it — or None when the body refuses (the reason
    is in ``report.span.body.refused``).
    """
    if source.dim <= source.length:
        # The k points x_j Ŵ_Σ span an affine set of dimension k − 1 ≥ d − 1, so
        # every row is fitted with (almost) zero residual: agreement rows
        # cannot be told apart (docs/design.md §4.1, step 2).
        report.span.body = Route(refused=f"d = {source.dim} <= k = {source.length}: the decoding "
                                         f"residual cannot detect agreement rows (needs d > k)")
        return None
    with PhaseTimer(report.crude_sum) as entry:
        w_sum = crude_projection_sum(source)
        diagnostics.put(entry, w_sum_error=diagnostics.w_sum_error(w_sum))
    sculpt = report.sculpt
    with PhaseTimer(sculpt):
        # One pass gives the crude round's rows and the pool our alternating refit starts from.
        quantile, pool_fraction = settings.quantile_for(heads), settings.pool_fraction_for(heads)
        pool = draw_pool(source, w_sum, pool_fraction=pool_fraction, simplex_tol=settings.simplex_tol,
                         max_pool=settings.max_pool_for(heads), rng=rng)
        rows = pool.accept(quantile=quantile / pool_fraction, simplex_tol=settings.simplex_tol)
        sculpt.quantile = quantile
        slabs = _slabs(rows, settings)
        sculpt.rounds = [_round_figures("crude Ŵ_Σ, quantile", rows, slabs, diagnostics)]
    with PhaseTimer(report.min_norm):
        w_sum = _refine_projection_sum(source, heads, w_sum, pool, slabs, settings, rng, report.min_norm,
                                       diagnostics)
    with PhaseTimer(sculpt):
        rows = find_agreement_rows(source, w_sum, residual_tol=settings.residual_tol,
                                   simplex_tol=settings.simplex_tol, max_rows=settings.max_rows, rng=rng)
        slabs = _slabs(rows, settings)
        final = _round_figures("refined Ŵ_Σ, absolute", rows, slabs, diagnostics)
        sculpt.rounds.append(final)
        sculpt.update({key: final[key] for key in final if key != "round"})
    report.span.body = Route()
    with PhaseTimer(report.span.body):
        return _read_span(source, heads, slabs, settings, rng, report.span.body, diagnostics)


def _slabs(rows, settings):
    return slab_constraints(rows, w_min=settings.w_min, kappa=settings.slab_width, t_min=settings.slab_floor)


def _round_figures(name, rows, slabs, diagnostics) -> dict:
    entry = {"round": name, "accepted_rows": len(rows), "found_rows": rows.found, "accepted_fraction": rows.fraction,
             "equalities": slabs.equalities, "halfspaces": len(slabs.g)}
    diagnostics.put(entry, precision=diagnostics.agreement_precision(rows),
                    teacher_feasible_fraction=diagnostics.feasible_fraction(slabs))
    return entry


def _refine_projection_sum(source, heads, w_sum, pool, slabs, settings, rng, entry, diagnostics):
    """Phase 3: Θ̄ of the crude body, the paper's certified refit, then our alternating refit."""
    steps = [{"step": "crude", "w_sum_error": diagnostics.w_sum_error(w_sum)}]
    certified_sum, theta_bar = None, None
    dim2 = source.dim ** 2
    if slabs.equalities < dim2:
        entry["failure"] = (f"too few equalities for a body ({slabs.equalities} < d² = {dim2}): "
                            f"no certified refit")
    else:
        body = ConvexBody(slabs, settings.norm_bound, max_constraints=settings.max_constraints, rng=rng)
        theta_bar, info = body.min_norm_point()
        entry.update(info)
        if theta_bar is None:
            entry["failure"] = f"minimum-norm problem {info['solver_status']}: no certified refit"
    if theta_bar is not None:
        entry["theta_bar_norm"] = float(np.linalg.norm(theta_bar))
        diagnostics.put(entry, theta_bar_distance=diagnostics.span_distance(theta_bar))
        candidates = margin_rows(source, theta_bar, settings.eta, settings.max_rows)
        certified = certify_rows(body, candidates, certification_margin(settings.eta, source.length))
        certified_sum = certified_projection_sum(candidates, certified)
        step = {"step": "certified rows (Chen & Li)", "candidates": len(candidates),
                "certified": int(certified.sum()), "refitted": certified_sum is not None}
        diagnostics.put(step, certification_precision=diagnostics.certification_precision(
            candidates, certified, settings.eta), w_sum_error=diagnostics.w_sum_error(certified_sum))
        steps.append(step)
    crude = w_sum
    if certified_sum is not None:
        w_sum = certified_sum
    if settings.refit_iterations > 0:
        start = "certified" if certified_sum is not None else "crude"
        w_sum, history = alternating_projection_sum(
            source, w_sum, quantile=settings.quantile_for(heads), iterations=settings.refit_iterations,
            pool_fraction=settings.pool_fraction_for(heads), simplex_tol=settings.simplex_tol,
            max_pool=settings.max_pool_for(heads), pool=None if certified_sum is not None else pool, rng=rng)
        step = {"step": "alternating refit (ours)", "start": start, "iterations": len(history),
                "agreement_fit": history[-1]["agreement_fit"] if history else math.nan}
        diagnostics.put(step, w_sum_error=diagnostics.w_sum_error(w_sum))
        steps.append(step)
    entry["w_sum_steps"] = steps
    entry["moved_by"] = _mover(steps, crude, w_sum)
    diagnostics.put(entry, refined_w_sum_error=diagnostics.w_sum_error(w_sum))
    return w_sum


def _mover(steps, crude, refined) -> str:
    """Which refit the final Ŵ_Σ comes from: the paper's certified one, ours, both or neither."""
    if refined is crude:
        return "none"
    certified = any(step.get("refitted") for step in steps)
    alternating = any(step["step"].startswith("alternating") for step in steps)
    if certified and alternating:
        return "certified rows (Chen & Li), then alternating refit (ours)"
    return "certified rows (Chen & Li)" if certified else "alternating refit (ours)"


def _read_span(source, heads, slabs, settings, rng, entry, diagnostics):
    """Phase 4: K*, its centre and minimum-norm point, the span — or a refusal."""
    dim = source.dim
    # Fewer than d² equations cannot fix a hull in R^(d²), whatever min_equalities says.
    needed = max(settings.min_equalities or 2 * dim * dim, dim * dim)
    entry.update(equalities=slabs.equalities, needed=needed)
    if slabs.equalities < needed:
        entry["refused"] = f"too few equalities ({slabs.equalities} < {needed})"
        return None
    centre, long_directions, info = read_affine_hull(slabs, heads)
    entry.update(info)
    if heads > 1 and info["spectral_gap"] < settings.min_gap:
        entry["refused"] = (f"no clear long directions (gap {info['spectral_gap']:.2f} < {settings.min_gap})")
        return None
    theta_bar = None
    if settings.span_point == "min_norm" or diagnostics:
        # K*'s minimum-norm point (the paper's Θ̄*); with span_point="centre" it
        # is computed only to report how far its span is, as diagnostic time.
        started = time.perf_counter()
        body = ConvexBody(slabs, settings.norm_bound, max_constraints=settings.max_constraints, rng=rng)
        theta_bar, solve = body.min_norm_point()
        entry.update({f"min_norm_{key}": value for key, value in solve.items()})
        if settings.span_point == "centre":
            entry["diagnostic_seconds"] = time.perf_counter() - started
    if settings.span_point == "min_norm" and theta_bar is None:
        entry["refused"] = f"minimum-norm problem of K* {entry['min_norm_solver_status']}"
        return None
    point = centre if settings.span_point == "centre" else theta_bar
    basis = span_basis(point, long_directions, heads)
    diagnostics.put(entry, distance=diagnostics.span_distance(basis),
                    centre_distance=diagnostics.span_distance(span_basis(centre, long_directions, heads)),
                    min_norm_distance=None if theta_bar is None else diagnostics.span_distance(
                        span_basis(theta_bar, long_directions, heads)))
    entry["span_point"] = settings.span_point
    return basis, max(float(np.linalg.norm(point)), 1e-3)
