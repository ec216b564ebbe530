"""Phase 6 of Chen & Li's learner: select a candidate — W by least squares, a certified choice, our polish.

Each candidate tuple of attention matrices from the net gets its projections
W by least squares (F is linear in W); the candidate with the smallest error
on held-out data is the paper's output, and a generalisation bound on the
held-out set certifies it: with probability ≥ 1 − δ its relative test error
is ≤ ε̂ (:func:`selection_certificate`).  The L-BFGS polish of all
parameters that may follow is ours, not the paper's; the report keeps the
error before and after it.  :func:`select_candidate` is the phase.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*;
Maurer, A. & Pontil, M. (2009), *Empirical Bernstein bounds and sample
variance penalization*, Theorem 4.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit

from ...attention import kernels
from ...attention.model import MultiHeadAttention
from ..least_squares import lbfgs_refine, solve_projections, validation_error
from ..report import PhaseResult, data_field
from .settings import SearchSettings

#: :func:`largest_norm`'s floating-point contract: sums may be reassociated (no assumption of finite values).
_BOUND_FASTMATH = {"reassoc", "contract", "nsz", "arcp"}

#: Validation checks between which L-BFGS runs (see :func:`lbfgs_refine`).
CHECK_EVERY = 20


def least_squares_candidates(X, Y, X_val, Y_val, candidates) -> list[tuple[float, MultiHeadAttention]]:
    """W by least squares for every candidate's Θ; (validation error, model), best first."""
    scored = []
    for thetas in candidates:
        ws = solve_projections(X, Y, thetas, ridge=1e-10)
        model = MultiHeadAttention(thetas, ws)
        scored.append((validation_error(model, X_val, Y_val), model))
    scored.sort(key=lambda item: item[0])
    return scored


def polish(X, Y, X_val, Y_val, scored, *, max_iter: int, tolerance: float = 1e-12):
    """Ours: L-BFGS on all parameters from each least-squares candidate, best by validation.

    Candidates are polished in order of their validation error and the loop
    stops once one reaches ``tolerance``.  Returns the best model, its
    validation error and one dict per polished candidate.
    """
    best_model, best_val, runs = None, math.inf, []
    for val_before, model in scored:
        polished, history = lbfgs_refine(X, Y, model.thetas, model.ws, max_iter=max_iter,
                                         X_val=X_val, Y_val=Y_val, patience=10, check_every=CHECK_EVERY)
        val_after = validation_error(polished, X_val, Y_val)
        runs.append({"val_before": val_before, "val_after": val_after, "iterations": history["iterations"]})
        if val_after < best_val:
            best_model, best_val = polished, val_after
        if best_val <= tolerance:
            break
    return best_model, best_val, runs


def certificate_bounds(X: np.ndarray, Y: np.ndarray, x_scale: float = 1.0, y_scale: float = 1.0, *,
                       boolean: bool = False) -> dict:
    """The certificate's assumptions from the examples seen, in the units of X / ``x_scale`` and
    Y / ``y_scale``: ``label_bound``, the largest label norm ‖Y‖_F of a sequence, and ``token_norm``,
    the largest token norm ‖x_j‖ (keywords of :func:`select_candidate`).  One read of each array,
    no scaled copy; none of X when ``boolean`` (its entries checked to be ±1: every token has norm √d)."""
    n, k, d = X.shape
    token_norm = math.sqrt(d) / x_scale if boolean else largest_norm(X.reshape(n * k, d), x_scale)
    return {"label_bound": largest_norm(Y.reshape(n, k * d), y_scale), "token_norm": token_norm}


@njit(cache=True, nogil=True, fastmath=_BOUND_FASTMATH)
def largest_norm(rows, scale):
    """max_i ‖rows[i] / scale‖ over the rows of a 2-D array (0 for none).

    A bound, not a statistic: reassociating the sums (so that they vectorise) and multiplying by
    1 / scale move it by an ulp or two.
    """
    inverse = 1.0 / scale
    largest = 0.0
    for i in range(rows.shape[0]):
        total = 0.0
        for j in range(rows.shape[1]):
            value = rows[i, j] * inverse
            total += value * value
        largest = max(largest, total)
    return math.sqrt(largest)


def _output_bound(model: MultiHeadAttention, token_norm: float, length: int) -> float:
    """A bound on ‖F̂(X)‖_F over inputs whose tokens have norm ≤ ``token_norm``.

    Every output row of head i is a convex combination of the rows x_j W_i,
    so ‖A_i X W_i‖_F ≤ √k · max_j ‖x_j‖ · ‖W_i‖₂.
    """
    spectral = np.linalg.norm(model.ws, ord=2, axis=(1, 2))
    return math.sqrt(length) * token_norm * float(spectral.sum())


def _bernstein_interval(values: np.ndarray, value_range: float, delta: float) -> tuple[float, float]:
    """(lower, upper) confidence bounds on E[Z] for i.i.d. Z in [0, range], each holding with
    probability ≥ 1 − δ (empirical Bernstein, Maurer & Pontil Theorem 4)."""
    n = len(values)
    log_term = math.log(2.0 / delta)
    variance = float(np.var(values, ddof=1)) if n > 1 else value_range ** 2
    deviation = math.sqrt(2.0 * variance * log_term / n) + 7.0 * value_range * log_term / (3.0 * max(n - 1, 1))
    mean = float(np.mean(values))
    return mean - deviation, mean + deviation


def selection_certificate(model: MultiHeadAttention, X_val: np.ndarray, Y_val: np.ndarray, *,
                          delta: float, hypotheses: int, label_bound: float, token_norm: float) -> dict:
    """With probability ≥ 1 − δ, E‖F̂(X) − Y‖² / E‖Y‖² ≤ ε̂ (``bound``).

    The held-out sequences were not used to fit any of the ``hypotheses``
    models compared on them, so a union bound over those models covers the
    one selected.  With per-sequence losses L = ‖F̂(X) − Y‖_F² ∈ [0, (B_F̂ + B_Y)²]
    and label energies E = ‖Y‖_F² ∈ [0, B_Y²], the empirical Bernstein bound
    gives E[L] ≤ U with probability 1 − δ/(2N) for each of the N models and
    E[E] ≥ V with probability 1 − δ/2, so ε̂ = U / V.  B_F̂ is a bound on the
    model's output (:func:`_output_bound`); B_Y = ``label_bound`` must bound
    every label norm — an assumption (the learner passes the largest norm
    it observed).  On noiseless data the ratio is the relative test error
    against the noiseless labels; with label noise it bounds E‖F̂ − Y‖²/E‖Y‖².
    """
    predictions = kernels.forward(X_val, model.thetas, model.ws)
    losses = np.sum((predictions - Y_val) ** 2, axis=(1, 2))
    energies = np.sum(Y_val ** 2, axis=(1, 2))
    output_bound = _output_bound(model, token_norm, X_val.shape[1])
    loss_range = (output_bound + label_bound) ** 2
    upper = _bernstein_interval(losses, loss_range, delta / (2 * hypotheses))[1]
    lower = _bernstein_interval(energies, label_bound ** 2, delta / 2)[0]
    empirical = float(losses.sum() / energies.sum())
    return {"delta": delta, "bound": upper / lower if lower > 0 else math.inf, "empirical_error": empirical,
            "hypotheses": int(hypotheses), "validation_samples": int(len(losses)),
            "label_bound": float(label_bound), "output_bound": float(output_bound),
            "assumption": "every label norm ‖Y‖_F is at most the largest one observed"}


@dataclass(frozen=True, kw_only=True)
class Selection(PhaseResult):
    """Phase 6's result: the paper's output, its certificate and, with ``mode="lbfgs"``, our polish.

    ``val_least_squares`` is the held-out relative error of the paper's
    output (the best candidate with W by least squares) and
    ``certificate_least_squares`` its certificate; ``val_polished``,
    ``runs`` (one dict per polished candidate) and ``certificate`` describe
    the returned model (the paper's output itself when ``mode="none"``).
    Data: ``model`` and ``least_squares_model``.
    """

    mode: str
    val_least_squares: float
    certificate_least_squares: dict
    val_polished: float | None
    runs: list | None
    certificate: dict
    model: MultiHeadAttention = data_field()
    least_squares_model: MultiHeadAttention = data_field()

    columns = ("mode", "val_least_squares", "val_polished")


def select_candidate(X, Y, X_val, Y_val, candidates, settings: SearchSettings, *, label_bound: float,
                     token_norm: float) -> Selection:
    """Phase 6: W by least squares for every candidate Θ, the held-out choice, its certificate, the polish.

    Parameters
    ----------
    X, Y : training sequences; X_val, Y_val : held-out sequences (never fitted on).
    candidates : Θ of each candidate (phase 5's ``kept``).
    settings : ``refine`` ("none": the paper's output; "lbfgs": ours),
        ``refine_iter`` and ``delta``.
    label_bound, token_norm : the largest label norm and token norm seen,
        the assumptions of the certificate (:func:`selection_certificate`;
        :func:`certificate_bounds` computes them from the examples).
    """
    start = time.perf_counter()
    scored = least_squares_candidates(X, Y, X_val, Y_val, candidates)
    paper_val, paper_model = scored[0]
    certify = {"delta": settings.delta, "label_bound": label_bound, "token_norm": token_norm}
    paper_certificate = selection_certificate(paper_model, X_val, Y_val, hypotheses=len(scored), **certify)
    model, certificate, val_polished, runs = paper_model, paper_certificate, None, None
    if settings.refine == "lbfgs":
        model, val_polished, runs = polish(X, Y, X_val, Y_val, scored, max_iter=settings.refine_iter)
        # Every validation check of every polish run is a model compared on the held-out set.
        hypotheses = len(scored) * (settings.refine_iter // CHECK_EVERY + 2)
        certificate = selection_certificate(model, X_val, Y_val, hypotheses=hypotheses, **certify)
    return Selection(seconds=time.perf_counter() - start, mode=settings.refine, val_least_squares=paper_val,
                     certificate_least_squares=paper_certificate, val_polished=val_polished, runs=runs,
                     certificate=certificate, model=model, least_squares_model=paper_model)
