"""The small Cholesky factorisations and solves of the Numba kernels of phases 2 and 5.

The pattern decoder
(:func:`~mhalearn.learners.chen_li.decoder.decode_patterns`) and the
candidate scorer of phase 5
(:func:`~mhalearn.learners.chen_li.phase5_net.score_candidates`) factor many
small positive-definite matrices, one per sequence or per candidate:

- :func:`cholesky_in_place` factors one, refusing a numerically singular one;
  :func:`extend_cholesky` adds rows to a factor, to the bit of a
  factorisation from row 0 (the scorer shares a prefix among candidates);
- :func:`cholesky_solve` solves with a factor and its inverse diagonal, and
  :func:`forward_substitute` is the forward half for many right-hand sides;
- :func:`cholesky_three` and :func:`solve_three` are the first and the
  third unrolled at size 3 (the decoder's common case, k = 4 distinct tokens),
  with the loops' operations in their order, hence their bits.

Every function here is inlined into the kernels that call it: after editing
one, delete the ``*.nbi``/``*.nbc`` files under ``mhalearn/`` (Numba's cache
keys a kernel on its own file).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(inline="always", cache=True)
def cholesky_in_place(matrix, size, floor):
    """Lower Cholesky factor of matrix[:size, :size], in place.

    Returns False when a pivot is ≤ ``floor`` times the largest diagonal
    entry (not positive definite, or numerically singular for floor > 0).
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
def extend_cholesky(matrix, start, size):
    """Rows ``start`` to ``size`` of the lower Cholesky factor of matrix[:size, :size], in place.

    Rows before ``start`` must hold the factor of matrix[:start, :start]
    (:func:`cholesky_in_place`); only the lower triangle of the new rows is
    read.  The sums run in the order of a factorisation from row 0, so the
    factor is the same to the bit.  Returns False if the matrix is not
    positive definite.
    """
    for j in range(size):
        if j >= start:
            diagonal = matrix[j, j]
            for t in range(j):
                diagonal -= matrix[j, t] * matrix[j, t]
            if diagonal <= 0.0:
                return False
            matrix[j, j] = np.sqrt(diagonal)
        for r in range(max(j + 1, start), size):
            value = matrix[r, j]
            for t in range(j):
                value -= matrix[r, t] * matrix[j, t]
            matrix[r, j] = value / matrix[j, j]
    return True


@njit(inline="always", cache=True)
def forward_substitute(matrix, rhs, start, size, cols):
    """Rows ``start`` to ``size`` of z = L⁻¹ rhs in place (rows before ``start`` hold z); returns their ‖z‖²."""
    total = 0.0
    for j in range(start, size):  # all columns at once: the innermost loop is contiguous
        for t in range(j):
            factor = matrix[j, t]
            for c in range(cols):
                rhs[j, c] -= factor * rhs[t, c]
        for c in range(cols):
            value = rhs[j, c] / matrix[j, j]
            rhs[j, c] = value
            total += value * value
    return total


@njit(inline="always", cache=True)
def cholesky_solve(L, inverse, size, rhs, out):
    """Solve (L Lᵀ) out = rhs for the leading ``size`` entries; ``inverse`` holds 1 / L[j, j].

    Multiplying by the reciprocals keeps the divisions, whose latency the
    substitutions would chain, out of the per-row loop.
    """
    for j in range(size):
        value = rhs[j]
        for t in range(j):
            value -= L[j, t] * out[t]
        out[j] = value * inverse[j]
    for j in range(size - 1, -1, -1):
        value = out[j]
        for t in range(j + 1, size):
            value -= L[t, j] * out[t]
        out[j] = value * inverse[j]


@njit(inline="always", cache=True)
def cholesky_three(g00, g10, g11, g20, g21, g22, floor, factor, inverse):
    """:func:`cholesky_in_place` (with ``floor``) of the 3 × 3 Gram matrix [[g00, g10, g20], [g10, g11, g21],
    [g20, g21, g22]] into ``factor``'s lower triangle, and 1 / its diagonal into ``inverse``; whether it succeeded.

    Its operations in its order, hence its bits, unrolled: the decoder's common case (k = 4 distinct
    tokens), whose loops over three entries cost more than their arithmetic.
    """
    bound = floor * max(max(max(0.0, g00), g11), g22)
    if g00 <= bound:
        return False
    l00 = np.sqrt(g00)
    l10, l20 = g10 / l00, g20 / l00
    pivot = g11 - l10 * l10
    if pivot <= bound:
        return False
    l11 = np.sqrt(pivot)
    l21 = (g21 - l20 * l10) / l11
    pivot = g22 - l20 * l20 - l21 * l21
    if pivot <= bound:
        return False
    l22 = np.sqrt(pivot)
    factor[0, 0], factor[1, 1], factor[2, 2] = l00, l11, l22
    factor[1, 0], factor[2, 0], factor[2, 1] = l10, l20, l21
    inverse[0], inverse[1], inverse[2] = 1.0 / l00, 1.0 / l11, 1.0 / l22
    return True


@njit(inline="always", cache=True)
def solve_three(l10, l20, l21, i0, i1, i2, p0, p1, p2):
    """:func:`cholesky_solve` of size 3, unrolled: (L Lᵀ) c = p for L = [[·, 0, 0], [l10, ·, 0], [l20, l21, ·]]
    with 1 / its diagonal (i0, i1, i2); its operations in its order, hence its bits."""
    forward0 = p0 * i0
    forward1 = (p1 - l10 * forward0) * i1
    forward2 = (p2 - l20 * forward0 - l21 * forward1) * i2
    c2 = forward2 * i2
    c1 = (forward1 - l21 * c2) * i1
    c0 = (forward0 - l10 * c1 - l20 * c2) * i0
    return c0, c1, c2
