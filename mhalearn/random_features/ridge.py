"""Ridge regression on frozen features produced block by block: the solver of the random-feature models.

:class:`~mhalearn.random_features.models.RandomFeatureAttention` and
:class:`~mhalearn.random_features.models.RandomFeatureMLP` are linear in their
trainable weights over frozen random features φ(X) ∈ R^p, so fitting is
:func:`fit_ridge`:

    (v̂, b̂) = argmin_{v, b}  Σ_i (y_i − b − ⟨v, φ(X_i)⟩)² + λ ‖v‖²,
    λ = α · (1/n) Σ_i ‖φ(X_i) − φ̄‖²,

i.e. scikit-learn's ``Ridge(alpha=α)`` after scaling the centred features to
unit mean squared norm (in kernel form: kernel ridge regression with penalty α
on a Gram matrix whose diagonal averages 1), so α means the same for every
model, n, M and d.  The intercept b is not penalised; ``fit_intercept=False``
drops it (and the centring).

Given several candidate α, the one minimising generalised cross-validation
(Golub, Heath & Wahba 1979),

    GCV(λ) = (RSS(λ)/n) / (1 − (tr H(λ) + [intercept])/n)²,   H = Φ(ΦᵀΦ + λI)⁻¹Φᵀ,

is kept; one symmetric eigendecomposition gives every candidate's fit.

Memory: when n > p the n × p feature matrix is never held, only a block of
it: the solver accumulates the p × p Gram matrix ΦᵀΦ and Φᵀy block by block
(shifted by the first block's means, for accuracy) and solves the normal
equations by Cholesky (``scipy.linalg.solve``, ``assume_a="pos"``) or, for
several α, by ``scipy.linalg.eigh``.  When n ≤ p it solves the n × n dual
system (ΦΦᵀ + λI)c = y, v = Φᵀc instead.
"""

from __future__ import annotations

import numbers

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from .._validation import Real, RealSequence, check_real

# Rows of the feature matrix built at once: bounds the memory of fit and
# predict to about 32 MB of features plus the p × p Gram matrix.
BLOCK_ENTRIES = 1 << 22


#: The ridge penalty α: one positive number, or candidates for generalised cross-validation.
ALPHA_CONSTRAINTS = [Real(0.0, low_open=True), RealSequence(Real(0.0, low_open=True))]


def check_alphas(alpha) -> tuple[float, ...]:
    """α as a non-empty tuple of positive floats (a scalar gives a 1-tuple)."""
    if isinstance(alpha, numbers.Real) and not isinstance(alpha, (bool, np.bool_)):
        return (check_real(alpha, "alpha", low=0.0, low_open=True),)
    if isinstance(alpha, (str, bytes)):
        raise ValueError(f"alpha: expected a positive number or a non-empty sequence of them, received {alpha!r}")
    try:
        candidates = list(alpha)
    except TypeError:
        raise ValueError(f"alpha: expected a positive number or a non-empty sequence of them, "
                         f"received {alpha!r}") from None
    if not candidates:
        raise ValueError("alpha: expected a positive number or a non-empty sequence of them, received []")
    return tuple(check_real(value, "alpha", low=0.0, low_open=True) for value in candidates)


def row_blocks(samples: int, features: int):
    size = max(1, BLOCK_ENTRIES // max(features, 1))
    return [(start, min(samples, start + size)) for start in range(0, samples, size)]


def ridge_entries(samples: int, width: int) -> int:
    """Float64 entries :func:`fit_ridge` holds at once for n = ``samples`` and p = ``width``.

    Dual route: the n × p features, the n × n system and its factor or
    eigenvectors, and the coefficients.  Primal route: the p × p Gram
    matrix, the product of a block added to it, the factor or eigenvectors,
    and a block of features with the intermediates that make it.
    """
    if samples <= width:
        return samples * width + 2 * samples * samples + width
    return 3 * width * width + 2 * max(BLOCK_ENTRIES, width)


def _centred_system(features_of, samples: int, width: int, y: np.ndarray, fit_intercept: bool) -> dict:
    """The centred normal system of the ridge problem, primal (p × p) or dual (n × n).

    Returns a dict with ``route``, ``matrix`` (ΦcᵀΦc or ΦcΦcᵀ), ``rhs``
    (Φcᵀyc or yc), ``features`` (Φc, dual only), ``feature_mean``,
    ``target_mean`` and ``target_ss`` = ‖yc‖².
    """
    if samples <= width:
        Phi = features_of(0, samples)
        feature_mean = Phi.mean(axis=0) if fit_intercept else np.zeros(width)
        target_mean = float(y.mean()) if fit_intercept else 0.0
        Phi -= feature_mean
        targets = y - target_mean
        return dict(route="dual", matrix=Phi @ Phi.T, rhs=targets, features=Phi,
                    feature_mean=feature_mean, target_mean=target_mean, target_ss=float(targets @ targets))
    return centred_moments(features_of, samples, width, y, fit_intercept)


def centred_moments(features_of, samples: int, width: int, y: np.ndarray, fit_intercept: bool = True) -> dict:
    """The primal system of :func:`_centred_system`, accumulated block by block; ``y`` may be (n,) or (n, t).

    With t targets, ``rhs`` is (p, t) and ``target_mean``, ``target_ss`` have
    shape (t,).  Each block is shifted by the first block's means before its
    products are summed, so the centring loses no accuracy to large means.
    """
    gram = np.zeros((width, width))
    moment = np.zeros((width,) + y.shape[1:])
    feature_sum = np.zeros(width)
    target_sum = np.zeros(y.shape[1:])
    target_ss = np.zeros(y.shape[1:])
    feature_shift = target_shift = None
    for start, stop in row_blocks(samples, width):
        block = features_of(start, stop)
        if feature_shift is None:
            feature_shift = block.mean(axis=0) if fit_intercept else np.zeros(width)
            target_shift = y[start:stop].mean(axis=0) if fit_intercept else np.zeros(y.shape[1:])
        block -= feature_shift
        targets = y[start:stop] - target_shift
        gram += block.T @ block
        moment += block.T @ targets
        feature_sum += block.sum(axis=0)
        target_sum += targets.sum(axis=0)
        target_ss += np.sum(targets * targets, axis=0)
    feature_mean, target_mean = feature_shift, target_shift
    if fit_intercept:
        feature_delta, target_delta = feature_sum / samples, target_sum / samples
        gram -= samples * np.outer(feature_delta, feature_delta)
        moment -= samples * np.multiply.outer(feature_delta, target_delta)
        target_ss -= samples * target_delta ** 2
        feature_mean, target_mean = feature_shift + feature_delta, target_shift + target_delta
    if y.ndim == 1:
        target_mean, target_ss = float(target_mean), float(target_ss)
    return dict(route="primal", matrix=gram, rhs=moment, features=None, feature_mean=feature_mean,
                target_mean=target_mean, target_ss=target_ss)


def _solve_cholesky(matrix: np.ndarray, penalty: float, rhs: np.ndarray, report: dict) -> np.ndarray:
    """(matrix + penalty·I)⁻¹ rhs by Cholesky; least squares if LAPACK finds it singular."""
    shifted = matrix.copy()
    shifted[np.diag_indices_from(shifted)] += penalty
    try:
        solution = scipy.linalg.solve(shifted, rhs, assume_a="pos", check_finite=False)
        report["solver"] = "cholesky"
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError) as error:
        solution = scipy.linalg.lstsq(shifted, rhs, check_finite=False)[0]
        report["solver"] = "lstsq"
        report["solver_warning"] = f"Cholesky failed ({error}); used least squares"
    return solution


def fit_ridge(features_of, samples: int, width: int, y: np.ndarray, alpha=1.0,
              fit_intercept: bool = True) -> tuple[np.ndarray, float, float, dict]:
    """Ridge regression on features produced block by block.

    Parameters
    ----------
    features_of : callable ``(start, stop) -> array (stop − start, width)``,
        the features of samples ``start..stop`` (a fresh array).
    samples, width : n and p.
    y : targets, shape (n,).
    alpha : positive float, or a sequence of them to choose from by GCV; the
        penalty in units of the mean squared norm of the centred features,
        λ = α·tr(ΦcᵀΦc)/n (see the module docstring).
    fit_intercept : fit an unpenalised intercept by centring.

    Returns
    -------
    coef : shape (p,).
    intercept : float (0 when ``fit_intercept`` is false).
    alpha : the α used.
    report : dict with the route (``"primal"`` or ``"dual"``), the penalty λ,
        the solver and, for several α, their GCV scores.
    """
    alphas = check_alphas(alpha)
    system = _centred_system(features_of, samples, width, y, fit_intercept)
    # One BLAS thread for the factorisations: their level-2 phases (the
    # tridiagonal reduction of eigh) with spinning OpenBLAS threads ran 30×
    # slower on a loaded 2-core machine (22 s vs 0.7 s for n = 1024).
    with threadpool_limits(limits=1, user_api="blas"):
        coef_or_dual, chosen, report = _solve_system(system, samples, alphas, fit_intercept)
    coef = system["features"].T @ coef_or_dual if system["route"] == "dual" else coef_or_dual
    intercept = float(system["target_mean"] - system["feature_mean"] @ coef) if fit_intercept else 0.0
    return coef, intercept, chosen, report


def _solve_system(system: dict, samples: int, alphas: tuple, fit_intercept: bool):
    """(matrix + λI)⁻¹ rhs for the given α, or for the GCV-best of several; see :func:`fit_ridge`."""
    matrix, rhs = system["matrix"], system["rhs"]
    scale = max(np.trace(matrix) / samples, np.finfo(float).tiny)
    report: dict = {"route": system["route"]}
    if len(alphas) == 1:
        chosen = alphas[0]
        solution = _solve_cholesky(matrix, chosen * scale, rhs, report)
    else:
        eigenvalues, eigenvectors = scipy.linalg.eigh(matrix, check_finite=False)
        eigenvalues = np.maximum(eigenvalues, 0.0)
        projected = eigenvectors.T @ rhs
        scores = []
        for candidate in alphas:
            penalty = candidate * scale
            if system["route"] == "dual":  # residual = U diag(λ/(s+λ)) Uᵀ yc
                rss = float(np.sum((penalty / (eigenvalues + penalty) * projected) ** 2))
            else:  # ‖yc‖² − Σ_k w_k² (s_k + 2λ)/(s_k + λ)², w = Vᵀ Φcᵀ yc
                rss = max(system["target_ss"] - float(np.sum(
                    projected ** 2 * (eigenvalues + 2 * penalty) / (eigenvalues + penalty) ** 2)), 0.0)
            dof = float(np.sum(eigenvalues / (eigenvalues + penalty))) + fit_intercept
            scores.append((rss / samples) / max(1.0 - dof / samples, np.finfo(float).eps) ** 2)
        chosen = alphas[int(np.argmin(scores))]
        penalty = chosen * scale
        solution = eigenvectors @ (projected / (eigenvalues + penalty))
        report.update(solver="eigh", gcv=dict(zip(alphas, scores)))
    report["penalty"] = float(chosen * scale)
    return solution, chosen, report


__all__ = ["fit_ridge"]
