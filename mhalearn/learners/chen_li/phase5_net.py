"""Phase 5 of Chen & Li's learner: search a net over m-tuples of heads in the span.

Given an orthonormal basis B_1..B_r of the estimated span{Θ_i}, every head
is Θ_i = Σ_r C_ir B_r.  The net enumerates unordered m-tuples of coefficient
rows from a grid in a ball, solves W by least squares for each (variable
projection: F is linear in W), and keeps the best few.  Its cost grows like
(net size)^m — the exponential-in-m part of the algorithm, measured in
``report_.net.candidates``, not hidden.

:func:`search_net` is the phase; :func:`score_candidates` is its Numba
kernel, run by the dispatcher of :mod:`mhalearn._numba`.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
from numba import njit
from scipy.optimize import minimize

from ..._memory import check_memory, get_memory_budget
from ..._numba import DISPATCH, chunk_count, new_counter, next_chunk, thread_driver
from ...attention import kernels
from ..least_squares import solve_projections
from ..report import PhaseResult, data_field
from .cholesky import cholesky_in_place
from .settings import SearchSettings


@njit(inline="always", cache=True)
def _cholesky_reduction(matrix, rhs, size, cols):
    """trace(rhsᵀ matrix⁻¹ rhs) by an in-place Cholesky factorisation (−1 if not PD)."""
    if not cholesky_in_place(matrix, size, 0.0):
        return -1.0
    total = 0.0
    for c in range(cols):  # forward substitution L z = rhs[:, c]; reduction = ‖z‖²
        for j in range(size):
            value = rhs[j, c]
            for t in range(j):
                value -= matrix[j, t] * rhs[t, c]
            value /= matrix[j, j]
            rhs[j, c] = value
            total += value * value
    return total


@njit(cache=True, nogil=True)
def _score_candidates_worker(gram, cross, candidates, ridge, chunks, counter, reductions):
    points, d, _, _ = gram.shape
    count, m = candidates.shape
    size = m * d
    matrix = np.empty((size, size))  # every entry is written for each candidate
    rhs = np.empty((size, d))
    chunk = next_chunk(counter)
    while chunk < chunks:
        for c in range(chunk * count // chunks, (chunk + 1) * count // chunks):
            for i in range(m):
                p = candidates[c, i]
                for a in range(d):
                    for j in range(m):
                        q = candidates[c, j]
                        for b in range(d):
                            matrix[i * d + a, j * d + b] = gram[p, a, q, b]
                    matrix[i * d + a, i * d + a] += ridge
                    for e in range(d):
                        rhs[i * d + a, e] = cross[p, a, e]
            reductions[c] = _cholesky_reduction(matrix, rhs, size, d)
        chunk = next_chunk(counter)


_score_candidates_parallel = thread_driver(_score_candidates_worker)


def score_candidates(gram: np.ndarray, cross: np.ndarray, candidates: np.ndarray,
                     ridge: float = 1e-9) -> np.ndarray:
    """Least-squares fit reduction of every candidate tuple of heads.

    For net points p with features Φ_p (rows × d), ``gram[p, :, q, :]`` =
    Φ_pᵀ Φ_q and ``cross[p]`` = Φ_pᵀ Y.  A candidate (p_1, …, p_m) explains
    ‖Y‖² − trace(Bᵀ H⁻¹ B) of the labels' energy with H, B its blocks: the
    residual of W solved by least squares (variable projection), without
    forming W.  Returns the reductions (−1 where H is not positive definite).
    """
    candidates = np.ascontiguousarray(candidates, dtype=np.int64)
    count, m = candidates.shape
    d = gram.shape[1]
    reductions = np.empty(count)
    chunks = chunk_count(count)
    DISPATCH.run("score_candidates", count * (m * d) ** 2 * (m * d + 3 * d) // 3, _score_candidates_worker,
                 _score_candidates_parallel, gram, cross, candidates, ridge, chunks, new_counter(),
                 reductions)
    return reductions


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


def net_memory(points: int, candidates: int, heads: int, score_rows: int, dim: int) -> int:
    """Bytes phase 5 holds at once for ``candidates`` m-tuples of ``points`` net points.

    The tuples (and the random draws they are taken from), one score each,
    and for the points the tuples use (at most m per tuple): their features
    on ``score_rows`` output rows (twice: the kernel's output and its
    reshaped copy), their Gram blocks (P·d)² and their cross-products.
    """
    used = min(points, heads * candidates)
    return 8 * (3 * candidates * heads + candidates + 2 * score_rows * used * dim + (used * dim) ** 2
                + 2 * used * dim * dim)


def choose_resolution(dimension: int, heads: int, radius: float, max_candidates: int,
                      fits=lambda points: True) -> tuple[float, str]:
    """Finest resolution (in steps of radius/2^(j/2)) whose m-tuples fit the budgets.

    Returns the resolution and what stopped the refinement: ``"max_candidates"``
    (the next step would score more tuples), ``"memory budget"`` (``fits(points)``
    said the next step's net would not fit in memory), ``"grid"`` (the grid
    would exceed :data:`MAX_GRID_POINTS`) or ``"finest"`` (radius/64 reached).
    """
    resolution = radius
    best = radius
    while True:
        if grid_size(dimension, radius, resolution) > MAX_GRID_POINTS:
            return best, "grid"
        count = len(net_points(dimension, radius, resolution))
        if math.comb(count, heads) > max_candidates:
            return best, "max_candidates"
        if not fits(count):
            return best, "memory budget"
        best = resolution
        if resolution < radius / 64:
            return best, "finest"
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
    the points the candidates use (every point when every tuple is scored)
    are computed once, their pairwise Gram blocks with one BLAS product, and
    each candidate's normal equations are solved in Numba.
    """
    n, k, d = X.shape
    used, inverse = np.unique(candidates.ravel(), return_inverse=True)
    candidates = inverse.reshape(candidates.shape)
    heads_points = heads_points[used]
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
        ws = solve_projections(X, Y, thetas, ridge=1e-10)
        loss, d_thetas, _ = kernels.loss_and_grad(X, Y, thetas, ws)
        return loss, np.einsum("iab,rab->ir", d_thetas, B).ravel()

    result = minimize(objective, coefficients.ravel(), jac=True, method="L-BFGS-B",
                      options={"maxiter": max_iter})
    return result.x.reshape(heads, dim2), float(result.fun)


@dataclass(frozen=True, kw_only=True)
class NetSearch(PhaseResult):
    """Phase 5's result: the net searched and the best candidates kept.

    ``candidates`` m-tuples were scored on ``score_samples`` sequences (the
    cost exponential in m); ``best_scores`` are the kept candidates'
    relative residuals.  ``limited_by`` says what set the spacing:
    ``"max_candidates"``, ``"memory budget"`` (:mod:`mhalearn._memory`),
    ``"grid"``, ``"finest"``, the user's ``"net_resolution"``, or
    ``"multistart"`` (radius/8).  Data: the kept candidates' Θ, shape (m, d, d) each,
    best first.
    """

    search: str
    radius: float
    resolution: float
    limited_by: str
    net_points: int
    candidates: int
    score_samples: int
    best_scores: list
    kept: tuple = data_field(())

    columns = ("candidates", "net_points", "resolution", "limited_by", "radius", "best_scores")


def search_net(X, Y, basis: np.ndarray, heads: int, radius: float, settings: SearchSettings,
               rng: np.random.Generator) -> NetSearch:
    """Phase 5: search the net of coefficient rows in the span, keep the best few.

    Every head is Θ_i = Σ_r C_ir B_r in the orthonormal ``basis`` (r, d²).
    ``settings.search="net"`` scores every unordered m-tuple of grid points
    of spacing ``net_resolution`` in the ball of ``radius`` (the finest
    spacing within ``max_candidates`` when None; cost ~ (net size)^m);
    ``"multistart"`` scores ``max_candidates`` random tuples and runs local
    descent inside the span from the best ``keep``.  A resolution whose
    tuples exceed ``max_candidates`` is scored on ``max_candidates`` random
    tuples: the budget always holds.  Candidates are scored on
    ``score_samples`` sequences drawn with ``rng``.  The net's memory
    (:func:`net_memory`) is checked against the memory budget before it is
    built: an automatic spacing stops refining where the next step would not
    fit, and a net that cannot fit is refused naming ``net_resolution`` or
    ``max_candidates``.
    """
    start = time.perf_counter()
    dim2 = basis.shape[0]
    d = int(round(math.sqrt(basis.shape[1])))
    B = basis.reshape(dim2, d, d)
    score_rows = min(settings.score_samples, X.shape[0]) * X.shape[1]
    budget = get_memory_budget()

    def memory(points: int) -> int:
        return net_memory(points, min(math.comb(points, heads), settings.max_candidates), heads, score_rows, d)

    resolution, limited_by = settings.net_resolution, "net_resolution"
    if resolution is None and settings.search == "net":
        resolution, limited_by = choose_resolution(dim2, heads, radius, settings.max_candidates,
                                                   fits=lambda points: budget is None or memory(points) <= budget)
    elif resolution is None:
        resolution, limited_by = radius / 8, "multistart"
    coefficients = net_points(dim2, radius, resolution)
    coefficients = coefficients[np.linalg.norm(coefficients, axis=1) > 0]  # Θ = 0 is uniform attention
    if len(coefficients) < heads:
        raise ValueError(f"net_resolution: expected a net of at least m = {heads} non-zero points, received "
                         f"{len(coefficients)} at spacing {resolution:.3g} in a ball of radius {radius:.3g}; "
                         f"use a finer net_resolution or a larger net_radius")
    name = "max_candidates" if settings.net_resolution is None else "net_resolution"
    check_memory(memory(len(coefficients)), name,
                 f"a net of {len(coefficients):,} points (spacing {resolution:.3g}) scored on "
                 f"{min(math.comb(len(coefficients), heads), settings.max_candidates):,} {heads}-tuples")
    points = np.einsum("pr,rab->pab", coefficients, B)
    candidates = candidate_tuples(len(points), heads, limit=settings.max_candidates, rng=rng)
    use = rng.permutation(X.shape[0])[:settings.score_samples]
    Xs, Ys = X[use], Y[use]
    scores = score_net(Xs, Ys, points, candidates)
    order = np.argsort(scores)[:settings.keep]
    kept = []
    for index in order:
        chosen = candidates[index]
        if settings.search == "multistart":
            refined, _ = descend_in_span(Xs, Ys, basis, coefficients[chosen])
            kept.append(np.einsum("ir,rab->iab", refined, B))
        else:
            kept.append(points[chosen])
    return NetSearch(seconds=time.perf_counter() - start, search=settings.search, radius=float(radius),
                     resolution=float(resolution), limited_by=limited_by, net_points=int(len(points)),
                     candidates=int(len(candidates)),
                     score_samples=int(len(use)), best_scores=[float(scores[i]) for i in order], kept=tuple(kept))
