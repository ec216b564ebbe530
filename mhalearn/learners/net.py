"""Phase 5 of Chen & Li's learner: a net over m-tuples of heads in the span.

Given an orthonormal basis B_1..B_r of the estimated span{Θ_i}, every head
is Θ_i = Σ_r C_ir B_r.  The net enumerates unordered m-tuples of coefficient
rows from a grid in a ball, solves W by least squares for each (variable
projection: F is linear in W), and keeps the best few.  Its cost grows like
(net size)^m — the exponential-in-m part of the algorithm, measured in
``report_["net"]["candidates"]``, not hidden.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
from scipy.optimize import minimize

from ..attention import kernels
from ._common import solve_projections
from .kernels import score_candidates


#: Grid points a net may hold before it is refused (each costs d² floats of Θ).
MAX_GRID_POINTS = 2_000_000


def grid_size(dimension: int, radius: float, resolution: float) -> int:
    """Points of the cubic grid that :func:`net_points` builds before cutting it to the ball."""
    return (2 * int(math.floor(radius / resolution)) + 1) ** dimension


def net_points(dimension: int, radius: float, resolution: float) -> np.ndarray:
    """Grid points of spacing ``resolution`` inside the ball of ``radius`` in R^dimension."""
    if grid_size(dimension, radius, resolution) > MAX_GRID_POINTS:
        raise ValueError(
            f"net_resolution: a spacing of {resolution:.3g} in a ball of radius {radius:.3g} in "
            f"{dimension} dimensions needs {grid_size(dimension, radius, resolution):,} grid points, "
            f"more than the {MAX_GRID_POINTS:,} a net may hold; use a coarser net_resolution or leave it "
            f"None to fit the max_candidates budget")
    steps = int(math.floor(radius / resolution))
    axis = resolution * np.arange(-steps, steps + 1)
    grid = np.stack(np.meshgrid(*([axis] * dimension), indexing="ij"), axis=-1).reshape(-1, dimension)
    return grid[np.linalg.norm(grid, axis=1) <= radius + 1e-12]


def choose_resolution(dimension: int, heads: int, radius: float, max_candidates: int) -> float:
    """Finest resolution (in steps of radius/2^(j/2)) whose m-tuples fit the budget."""
    resolution = radius
    best = radius
    while True:
        if grid_size(dimension, radius, resolution) > MAX_GRID_POINTS:
            return best
        count = len(net_points(dimension, radius, resolution))
        if math.comb(count, heads) > max_candidates:
            return best
        best = resolution
        if resolution < radius / 64:
            return best
        resolution /= math.sqrt(2.0)


def candidate_tuples(points: int, heads: int, *, limit: int | None = None,
                     rng: np.random.Generator | None = None) -> np.ndarray:
    """Unordered m-tuples of distinct net points (all, or ``limit`` random ones)."""
    total = math.comb(points, heads)
    if limit is None or total <= limit:
        return np.array(list(itertools.combinations(range(points), heads)), dtype=np.int64).reshape(-1, heads)
    draws = np.sort(rng.integers(0, points, size=(2 * limit, heads)), axis=1)
    distinct = np.all(np.diff(draws, axis=1) > 0, axis=1)
    return np.unique(draws[distinct], axis=0)[:limit]


def score_net(X: np.ndarray, Y: np.ndarray, heads_points: np.ndarray, candidates: np.ndarray,
              ridge: float = 1e-8) -> np.ndarray:
    """Relative residual of every candidate tuple, W solved by least squares.

    ``heads_points`` (P, d, d) are the net's attention matrices; features of
    all points are computed once, their pairwise Gram blocks with one BLAS
    product, and each candidate's normal equations are solved in Numba.
    """
    n, k, d = X.shape
    P = heads_points.shape[0]
    features = kernels.head_features(X, heads_points).transpose(0, 2, 1, 3).reshape(n * k, P * d)
    targets = Y.reshape(n * k, d)
    gram = (features.T @ features).reshape(P, d, P, d)
    cross = (features.T @ targets).reshape(P, d, d)
    energy = float(np.sum(targets ** 2))
    reductions = score_candidates(gram, cross, candidates, ridge * n * k)
    residual = np.where(reductions >= 0, (energy - reductions) / energy, np.inf)
    return np.maximum(residual, 0.0)


def descend_in_span(X, Y, basis: np.ndarray, coefficients: np.ndarray, max_iter: int = 100):
    """Local descent on the span coefficients C (Θ_i = Σ_r C_ir B_r), W by variable projection.

    At the least-squares W the gradient of min_W loss with respect to Θ is
    the partial gradient (envelope theorem), projected onto the basis.
    """
    heads, dim2 = coefficients.shape[0], basis.shape[0]
    d = int(round(math.sqrt(basis.shape[1])))
    B = basis.reshape(dim2, d, d)

    def objective(flat):
        thetas = np.einsum("ir,rab->iab", flat.reshape(heads, dim2), B)
        ws, _ = solve_projections(X, Y, thetas, ridge=1e-10)
        loss, d_thetas, _ = kernels.loss_and_grad(X, Y, thetas, ws)
        return loss, np.einsum("iab,rab->ir", d_thetas, B).ravel()

    result = minimize(objective, coefficients.ravel(), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iter})
    return result.x.reshape(heads, dim2), float(result.fun)


def net_search(X, Y, basis: np.ndarray, heads: int, *, radius: float, resolution: float | None,
               max_candidates: int, score_samples: int, keep: int, search: str,
               rng: np.random.Generator):
    """Phase 5: search the net of coefficient rows in the span, keep the best few.

    Returns a list of (thetas, score) and diagnostics.  ``search="net"``
    scores every unordered m-tuple of net points (cost ~ (net size)^m);
    ``search="multistart"`` scores ``max_candidates`` random tuples and runs
    local descent inside the span from the best ``keep``.  A user-given
    ``resolution`` whose tuples exceed ``max_candidates`` is scored on
    ``max_candidates`` random tuples: the budget always holds.
    """
    start = time.perf_counter()
    dim2 = basis.shape[0]
    d = int(round(math.sqrt(basis.shape[1])))
    B = basis.reshape(dim2, d, d)
    if resolution is None:
        resolution = choose_resolution(dim2, heads, radius, max_candidates) if search == "net" else radius / 8
    coefficients = net_points(dim2, radius, resolution)
    coefficients = coefficients[np.linalg.norm(coefficients, axis=1) > 0]  # Θ = 0 is uniform attention
    points = np.einsum("pr,rab->pab", coefficients, B)
    candidates = candidate_tuples(len(points), heads, limit=max_candidates, rng=rng)
    use = rng.permutation(X.shape[0])[:score_samples]
    Xs, Ys = X[use], Y[use]
    scores = score_net(Xs, Ys, points, candidates)
    order = np.argsort(scores)[:keep]
    kept = []
    for index in order:
        chosen = candidates[index]
        if search == "multistart":
            refined, _ = descend_in_span(Xs, Ys, basis, coefficients[chosen])
            thetas = np.einsum("ir,rab->iab", refined, B)
        else:
            thetas = points[chosen]
        kept.append((thetas, float(scores[index])))
    info = {"search": search, "resolution": float(resolution), "radius": float(radius),
            "net_points": int(len(points)), "candidates": int(len(candidates)),
            "score_samples": int(len(use)), "best_scores": [float(scores[i]) for i in order],
            "seconds": time.perf_counter() - start}
    return kept, info
