"""Phase 5 of Chen & Li's learner: search a net over m-tuples of heads in the span.

Given an orthonormal basis B_1..B_r of the estimated span{Θ_i}, every head
is Θ_i = Σ_r C_ir B_r.  The net enumerates unordered m-tuples of coefficient
rows from a grid in a ball, solves W by least squares for each (variable
projection: F is linear in W), and keeps the best few.  Its cost grows like
(net size)^m — the exponential-in-m part of the algorithm, measured in
``report_.net.candidates``, not hidden; its memory does not, since the
tuples are enumerated and scored a block at a time (:func:`best_of_net`).

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
from .cholesky import cholesky_in_place, extend_cholesky, forward_substitute
from .settings import SearchSettings


@njit(inline="always", cache=True)
def _fill_block_rows(matrix, rhs, gram, cross, candidates, c, i, ridge):
    """Block row i of a candidate's normal equations (columns of heads 0..i) and of its right-hand side."""
    d = gram.shape[1]
    p = candidates[c, i]
    for a in range(d):
        for j in range(i + 1):
            q = candidates[c, j]
            for b in range(d):
                matrix[i * d + a, j * d + b] = gram[p, a, q, b]
        matrix[i * d + a, i * d + a] += ridge
        for e in range(d):
            rhs[i * d + a, e] = cross[p, a, e]


@njit(cache=True, nogil=True)
def _score_candidates_worker(gram, cross, candidates, ridge, chunks, counter, reductions):
    points, d, _, _ = gram.shape
    count, m = candidates.shape
    size, prefix = m * d, (m - 1) * d
    matrix = np.empty((size, size))  # the lower triangle of every row used is written for each candidate
    rhs = np.empty((size, d))
    chunk = next_chunk(counter)
    while chunk < chunks:
        # Tuples in lexicographic order share their first m − 1 points with their predecessor
        # most of the time: that block's factor is kept and only the last point's rows are added.
        prefix_total = -1.0
        for c in range(chunk * count // chunks, (chunk + 1) * count // chunks):
            same = c > chunk * count // chunks
            for i in range(m - 1):
                same = same and candidates[c, i] == candidates[c - 1, i]
            if not same:
                for i in range(m - 1):
                    _fill_block_rows(matrix, rhs, gram, cross, candidates, c, i, ridge)
                prefix_total = (forward_substitute(matrix, rhs, 0, prefix, d)
                                if cholesky_in_place(matrix, prefix, 0.0) else -1.0)
            if prefix_total < 0.0:
                reductions[c] = -1.0
                continue
            _fill_block_rows(matrix, rhs, gram, cross, candidates, c, m - 1, ridge)
            if extend_cholesky(matrix, prefix, size):
                reductions[c] = prefix_total + forward_substitute(matrix, rhs, prefix, size, d)
            else:
                reductions[c] = -1.0
        chunk = next_chunk(counter)


_score_candidates_parallel = thread_driver(_score_candidates_worker)


def score_candidates(gram: np.ndarray, cross: np.ndarray, candidates: np.ndarray,
                     ridge: float = 1e-9) -> np.ndarray:
    """Least-squares fit reduction of every candidate tuple of heads.

    For net points p with features Φ_p (rows × d), ``gram[p, :, q, :]`` =
    Φ_pᵀ Φ_q and ``cross[p]`` = Φ_pᵀ Y.  A candidate (p_1, …, p_m) explains
    ‖Y‖² − trace(Bᵀ H⁻¹ B) of the labels' energy with H, B its blocks: the
    residual of W solved by least squares (variable projection), without
    forming W.  Consecutive candidates that share their first m − 1 points
    (as tuples in lexicographic order mostly do) share the factor of that
    block of H: only the last point's rows are factored again.  Returns the
    reductions (−1 where H is not positive definite).
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


def grid_size(dimension: int, radius: float, resolution: float, slab: tuple | None = None) -> int:
    """Points of the cubic grid that :func:`net_points` builds before cutting it to the ball (and slab)."""
    steps = 2 * int(math.floor(radius / resolution)) + 1
    if slab is None:
        return steps ** dimension
    return (2 * int(math.floor(slab[1] / resolution)) + 1) * steps ** (dimension - 1)


#: The multistart search's spacing, a share of the net's radius (the net it starts from).
MULTISTART_SPACING = 1 / 8


def check_net(heads: int, dim: int, score_rows: int, settings: SearchSettings) -> None:
    """Refuse, before any phase runs, settings under which phase 5 cannot build a net for m heads.

    The span has m dimensions whatever the data, and the net's radius is at
    least ``net_radius``, or 1 (``norm_bound`` if lower) by
    :meth:`~mhalearn.learners.chen_li.settings.SearchSettings.radius`, so
    the smallest grid phase 5 could build is known from the settings alone:
    3^m points at the coarsest spacing (the radius), which the automatic
    spacing tries first; 17^m for ``"multistart"`` (radius/8); that of
    ``net_resolution`` at the smallest radius.  The ball is the bound on
    every route: the moment route, which any fit may end on, reads no hull.
    The memory of the coarsest net (2m points, ``score_rows`` output rows)
    is a lower bound of every net's, so a budget it exceeds refuses too.
    Raises ``ValueError`` naming what to change (``heads`` when no setting
    can help) or :class:`~mhalearn._memory.MemoryBudgetError`.
    """
    coarsest = grid_size(heads, 1.0, 1.0)
    if coarsest > MAX_GRID_POINTS:
        allowed = max(m for m in range(1, heads) if grid_size(m, 1.0, 1.0) <= MAX_GRID_POINTS)
        raise ValueError(f"heads: phase 5's net over the {heads}-dimensional span of {heads} heads needs at least "
                         f"3^{heads} = {coarsest:.2g} grid points even at its coarsest spacing (its radius), more "
                         f"than the {MAX_GRID_POINTS:,} a net may hold, whatever the data: the net searches at "
                         f"most {allowed} heads; lower heads to {allowed} or fewer")
    smallest_radius = settings.net_radius if settings.net_radius is not None else min(1.0, settings.norm_bound)
    if settings.net_resolution is not None:
        points = grid_size(heads, smallest_radius, settings.net_resolution)
        if points > MAX_GRID_POINTS:
            raise ValueError(f"net_resolution: a spacing of {settings.net_resolution:g} in a ball of radius at "
                             f"least {smallest_radius:g} in {heads} dimensions needs at least {points:,} grid "
                             f"points, more than the {MAX_GRID_POINTS:,} a net may hold; leave net_resolution "
                             f"None (the finest spacing that fits, at most {coarsest:,} points) or use a coarser "
                             f"one")
    elif settings.method == "multistart":
        points = grid_size(heads, 1.0, MULTISTART_SPACING)
        if points > MAX_GRID_POINTS:
            allowed = max((m for m in range(1, heads) if grid_size(m, 1.0, MULTISTART_SPACING) <= MAX_GRID_POINTS),
                          default=0)
            raise ValueError(f"method: 'multistart' starts from a net of spacing radius/8, {points:.2g} grid "
                             f"points in {heads} dimensions, more than the {MAX_GRID_POINTS:,} a net may hold; "
                             f"use method='net', or give net_resolution, or at most {allowed} heads")
    candidates = min(math.comb(2 * heads, heads), settings.max_candidates)
    check_memory(net_memory(2 * heads, candidates, heads, score_rows, dim), "max_candidates",
                 f"phase 5's coarsest net (2m = {2 * heads} points) scored on {candidates:,} {heads}-tuples")


def net_points(dimension: int, radius: float, resolution: float, slab: tuple | None = None) -> np.ndarray:
    """Grid points of spacing ``resolution`` inside the ball of ``radius`` in R^dimension.

    With ``slab = (offset, half_width)`` only the points within
    ``half_width`` of the hyperplane {p : p_0 = offset} are kept, on a grid
    that has a point on that hyperplane (:func:`hull_frame` gives the frame
    in which the body's affine hull is such a hyperplane).
    """
    if grid_size(dimension, radius, resolution, slab) > MAX_GRID_POINTS:
        raise ValueError(
            f"net_resolution: a spacing of {resolution:.3g} in a ball of radius {radius:.3g} in "
            f"{dimension} dimensions needs {grid_size(dimension, radius, resolution, slab):,} grid points, "
            f"more than the {MAX_GRID_POINTS:,} a net may hold; use a coarser net_resolution or leave it "
            f"None to fit the max_candidates budget")
    steps = int(math.floor(radius / resolution))
    axes = [resolution * np.arange(-steps, steps + 1)] * dimension
    if slab is not None:
        offset, half_width = slab
        across = int(math.floor(half_width / resolution))
        axes[0] = offset + resolution * np.arange(-across, across + 1)
    grid = np.stack(np.meshgrid(*axes, indexing="ij"), axis=-1).reshape(-1, dimension)
    return grid[np.linalg.norm(grid, axis=1) <= radius + 1e-12]


def hull_frame(basis: np.ndarray, point: np.ndarray, long_directions: np.ndarray) -> tuple[np.ndarray, float]:
    """An orthonormal frame of the span in which the body's affine hull is the hyperplane {p : p_0 = offset}.

    The hull is ``point`` + span(``long_directions``) (vectors of R^(d²)),
    read in the span's coordinates (``basis``, (m, d²)).  Returns the frame
    (m, m), rows in span coordinates: first the unit normal of the hull
    within the span, then its m − 1 long directions; and ``offset``, the
    hull's distance from the origin (≥ 0).  A point with frame coordinates
    q is ``q @ frame`` in span coordinates.
    """
    heads = basis.shape[0]
    along = (long_directions @ basis.T).reshape(heads - 1, heads)
    frame = np.linalg.qr(np.vstack([along, np.eye(heads)]).T)[0].T  # long directions first, then a normal
    frame = np.roll(frame, 1, axis=0)
    offset = float(frame[0] @ (basis @ point))
    if offset < 0:
        frame[0], offset = -frame[0], -offset
    return frame, offset


#: Tuples a full net scores at once: it enumerates them block by block and keeps the best few.
TUPLE_BLOCK = 1 << 20


def net_memory(points: int, candidates: int, heads: int, score_rows: int, dim: int) -> int:
    """Bytes phase 5 holds at once for ``candidates`` m-tuples of ``points`` net points.

    When ``candidates`` covers every tuple, they are enumerated and scored
    :data:`TUPLE_BLOCK` at a time (one block of tuples and its scores);
    otherwise the random tuples (and the draws they are taken from) and one
    score each are held together.  Either way, for the points the tuples use
    (at most m per tuple): their features on ``score_rows`` output rows
    (twice: the kernel's output and its reshaped copy), their Gram blocks
    (P·d)² and their cross-products.
    """
    used = min(points, heads * candidates)
    if candidates >= math.comb(points, heads):
        tuples = 2 * min(candidates, TUPLE_BLOCK) * (heads + 1)  # a block, its scores, the running best
    else:
        tuples = 3 * candidates * heads + candidates
    return 8 * (tuples + 2 * score_rows * used * dim + (used * dim) ** 2 + 2 * used * dim * dim)


def choose_resolution(dimension: int, heads: int, radius: float, max_candidates: int,
                      fits=lambda points: True, slab: tuple | None = None) -> tuple[float, str]:
    """Finest resolution (in steps of radius/2^(j/2)) whose m-tuples fit the budgets.

    ``slab`` cuts the net as in :func:`net_points`.

    Returns the resolution and what stopped the refinement: ``"max_candidates"``
    (the next step would score more tuples), ``"memory budget"`` (``fits(points)``
    said the next step's net would not fit in memory), ``"grid"`` (the grid
    would exceed :data:`MAX_GRID_POINTS`) or ``"finest"`` (radius/64 reached).
    """
    resolution = radius
    best = radius
    while True:
        if grid_size(dimension, radius, resolution, slab) > MAX_GRID_POINTS:
            return best, "grid"
        count = len(net_points(dimension, radius, resolution, slab))
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
        return next(tuple_blocks(points, heads, max(total, 1)), np.empty((0, heads), dtype=np.int64))
    draws = np.sort(rng.integers(0, points, size=(2 * limit, heads)), axis=1)
    distinct = np.all(np.diff(draws, axis=1) > 0, axis=1)
    return np.unique(draws[distinct], axis=0)[:limit]


def tuple_blocks(points: int, heads: int, block: int | None = None):
    """Every unordered m-tuple of distinct net points, in lexicographic order, ``block`` rows at a time
    (default :data:`TUPLE_BLOCK`)."""
    block = TUPLE_BLOCK if block is None else block
    flat = itertools.chain.from_iterable(itertools.combinations(range(points), heads))
    while True:
        rows = np.fromiter(itertools.islice(flat, block * heads), dtype=np.int64).reshape(-1, heads)
        if not len(rows):
            return
        yield rows


def net_gram(X: np.ndarray, Y: np.ndarray, heads_points: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Gram blocks Φ_pᵀΦ_q (P, d, P, d), cross-products Φ_pᵀY (P, d, d) and ‖Y‖² of the net's points.

    Φ_p are the features of point p (head p's attention times X, one row
    per output token): a candidate's least-squares fit needs only these.
    """
    n, k, d = X.shape
    P = heads_points.shape[0]
    features = kernels.head_features(X, heads_points).transpose(0, 2, 1, 3).reshape(n * k, P * d)
    targets = Y.reshape(n * k, d)
    gram = (features.T @ features).reshape(P, d, P, d)
    cross = (features.T @ targets).reshape(P, d, d)
    return gram, cross, float(np.sum(targets ** 2))


def relative_residuals(gram: np.ndarray, cross: np.ndarray, energy: float, candidates: np.ndarray,
                       ridge: float) -> np.ndarray:
    """Relative residual of each candidate from :func:`net_gram`'s blocks (inf where not positive definite)."""
    reductions = score_candidates(gram, cross, candidates, ridge)
    return np.maximum(np.where(reductions >= 0, (energy - reductions) / energy, np.inf), 0.0)


def score_net(X: np.ndarray, Y: np.ndarray, heads_points: np.ndarray, candidates: np.ndarray,
              ridge: float = 1e-8) -> np.ndarray:
    """Relative residual of every candidate tuple, W solved by least squares.

    ``heads_points`` (P, d, d) are the net's attention matrices; features of
    the points the candidates use (every point when every tuple is scored)
    are computed once, their pairwise Gram blocks with one BLAS product, and
    each candidate's normal equations are solved in Numba.
    """
    n, k, _ = X.shape
    used, inverse = np.unique(candidates.ravel(), return_inverse=True)
    gram, cross, energy = net_gram(X, Y, heads_points[used])
    return relative_residuals(gram, cross, energy, inverse.reshape(candidates.shape), ridge * n * k)


def best_of_net(X: np.ndarray, Y: np.ndarray, heads_points: np.ndarray, heads: int, keep: int,
                ridge: float = 1e-8) -> tuple[np.ndarray, np.ndarray]:
    """The ``keep`` best of every m-tuple of the net's points: (tuples, relative residuals), best first.

    The tuples are enumerated and scored :data:`TUPLE_BLOCK` at a time
    against one Gram matrix of all points, keeping the best so far, so
    memory does not grow with the number of tuples; the scores are those
    of :func:`score_net`.
    """
    n, k, _ = X.shape
    gram, cross, energy = net_gram(X, Y, heads_points)
    best_tuples, best_scores = np.empty((0, heads), dtype=np.int64), np.empty(0)
    for block in tuple_blocks(len(heads_points), heads):
        scores = relative_residuals(gram, cross, energy, block, ridge * n * k)
        if len(scores) > keep:  # only the block's best few can enter the best so far
            few = np.sort(np.argpartition(scores, keep)[:keep])
            block, scores = block[few], scores[few]
        best_tuples = np.concatenate([best_tuples, block])
        best_scores = np.concatenate([best_scores, scores])
        order = np.argsort(best_scores, kind="stable")[:keep]
        best_tuples, best_scores = best_tuples[order], best_scores[order]
    return best_tuples, best_scores


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
    ``"multistart"`` (radius/8).  ``shape`` is ``"ball"`` (the whole ball
    of ``radius``) or ``"hull slab"`` (its points near the body's affine
    hull, :func:`search_net`).  Data: the kept candidates' Θ, shape (m, d, d)
    each, best first.
    """

    search: str
    shape: str
    radius: float
    resolution: float
    limited_by: str
    net_points: int
    candidates: int
    score_samples: int
    best_scores: list
    kept: tuple = data_field(())

    columns = ("candidates", "net_points", "shape", "resolution", "limited_by", "radius", "best_scores")


def search_net(X, Y, basis: np.ndarray, heads: int, radius: float, settings: SearchSettings,
               rng: np.random.Generator, hull: tuple | None = None) -> NetSearch:
    """Phase 5: search the net of coefficient rows in the span, keep the best few.

    Every head is Θ_i = Σ_r C_ir B_r in the orthonormal ``basis`` (r, d²).
    ``settings.method="net"`` scores every unordered m-tuple of grid points
    of spacing ``net_resolution`` in the ball of ``radius`` (the finest
    spacing within ``max_candidates`` when None; cost ~ (net size)^m), a
    block of tuples at a time (:func:`best_of_net`);
    ``"multistart"`` scores ``max_candidates`` random tuples and runs local
    descent inside the span from the best ``kept_candidates``.  A resolution whose
    tuples exceed ``max_candidates`` is scored on ``max_candidates`` random
    tuples: the budget always holds.  Candidates are scored on
    ``score_samples`` sequences drawn with ``rng``.  The net's memory
    (:func:`net_memory`) is checked against the memory budget before it is
    built: an automatic spacing stops refining where the next step would not
    fit, and a net that cannot fit is refused naming ``net_resolution`` or
    ``max_candidates``.

    ``hull = (point, long_directions)`` is the body's affine hull in R^(d²)
    (phase 4's reading of aff{Θ_i}); with ``settings.net_slab`` set, the net
    keeps only its points within ``net_slab``·radius of that hull, on a grid
    aligned with it (:func:`hull_frame`).  Every Θ_i lies on aff{Θ_i} and K*
    is thin across it, so the same budget buys a finer spacing where the
    heads can be: the slab holds a share ≈ 1.5·``net_slab`` of the ball's
    volume at m = 3.  Without a hull (our moment route) the net fills the ball.
    """
    start = time.perf_counter()
    dim2 = basis.shape[0]
    d = int(round(math.sqrt(basis.shape[1])))
    B = basis.reshape(dim2, d, d)
    score_rows = min(settings.score_samples, X.shape[0]) * X.shape[1]
    budget = get_memory_budget()
    frame, slab, shape = np.eye(dim2), None, "ball"
    if hull is not None and settings.net_slab is not None:
        frame, offset = hull_frame(basis, *hull)
        slab, shape = (offset, settings.net_slab * radius), "hull slab"

    def memory(points: int) -> int:
        return net_memory(points, min(math.comb(points, heads), settings.max_candidates), heads, score_rows, d)

    resolution, limited_by = settings.net_resolution, "net_resolution"
    if resolution is None and settings.method == "net":
        resolution, limited_by = choose_resolution(dim2, heads, radius, settings.max_candidates,
                                                   fits=lambda points: budget is None or memory(points) <= budget,
                                                   slab=slab)
    elif resolution is None:
        resolution, limited_by = radius * MULTISTART_SPACING, "multistart"
    coefficients = net_points(dim2, radius, resolution, slab) @ frame
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
    total = math.comb(len(points), heads)
    sampled = total > settings.max_candidates
    # Two tests of ``sampled``: the random tuples must be drawn before the scoring sequences (that
    # order of rng's draws fixes what a random_state gives), and the full net is scored after both.
    if sampled:
        candidates = candidate_tuples(len(points), heads, limit=settings.max_candidates, rng=rng)
    use = rng.permutation(X.shape[0])[:settings.score_samples]
    Xs, Ys = X[use], Y[use]
    if not sampled:
        best, best_scores = best_of_net(Xs, Ys, points, heads, settings.kept_candidates)
        scored = total
    else:
        scores = score_net(Xs, Ys, points, candidates)
        order = np.argsort(scores, kind="stable")[:settings.kept_candidates]
        best, best_scores, scored = candidates[order], scores[order], len(candidates)
    kept = []
    for chosen in best:
        if settings.method == "multistart":
            refined, _ = descend_in_span(Xs, Ys, basis, coefficients[chosen])
            kept.append(np.einsum("ir,rab->iab", refined, B))
        else:
            kept.append(points[chosen])
    return NetSearch(seconds=time.perf_counter() - start, search=settings.method, shape=shape,
                     radius=float(radius), resolution=float(resolution), limited_by=limited_by,
                     net_points=int(len(points)), candidates=int(scored), score_samples=int(len(use)),
                     best_scores=[float(score) for score in best_scores], kept=tuple(kept))
