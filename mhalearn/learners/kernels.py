"""Numba kernels of Chen & Li's sculpting learner: in-place Cholesky and the net's candidate scorer.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*
(docs/design.md §4.1, steps 2 and 5).

:func:`cholesky_in_place` is shared by the pattern decoder of phase 2
(:func:`mhalearn.learners.agreement.decode_patterns`) and the scorer of
phase 5, :func:`score_candidates`, which rates every m-tuple of net points by
how much of the labels' energy least squares in W explains
(:mod:`mhalearn.learners.net`).  The scorer runs through the shared
dispatcher of :mod:`mhalearn._numba`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .._numba import DISPATCH, chunk_count, new_counter, next_chunk

@njit(inline="always", cache=True)
def cholesky_in_place(matrix, size, floor):
    """Lower Cholesky factor of matrix[:size, :size], in place.

    Returns False when a pivot is ≤ ``floor`` times the largest diagonal
    entry (not positive definite, or numerically singular for floor > 0).
    Shared by the net's candidate scores and the sculpting decoder.
    """
    scale = 0.0
    for a in range(size):
        scale = max(scale, matrix[a, a])
    for j in range(size):
        diagonal = matrix[j, j]
        for t in range(j):
            diagonal -= matrix[j, t] * matrix[j, t]
        if diagonal <= floor * scale:
            return False
        diagonal = np.sqrt(diagonal)
        matrix[j, j] = diagonal
        for r in range(j + 1, size):
            value = matrix[r, j]
            for t in range(j):
                value -= matrix[r, t] * matrix[j, t]
            matrix[r, j] = value / diagonal
    return True


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


@njit(cache=True)
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


@njit(parallel=True, cache=True)
def _score_candidates_parallel(threads, gram, cross, candidates, ridge, chunks, counter, reductions):
    for _ in prange(threads):
        _score_candidates_worker(gram, cross, candidates, ridge, chunks, counter, reductions)


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
