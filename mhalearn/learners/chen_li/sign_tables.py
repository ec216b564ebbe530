"""x M for a token x in {−1, +1}^d by table look-ups: the kernels of phases 2 and 3 on Boolean inputs.

The decoder of phase 2 (:func:`~mhalearn.learners.chen_li.phase2_sculpt.decode_patterns`,
x_j Ŵ_Σ for every token) and the margin pass of phase 3
(:func:`~mhalearn.learners.chen_li.phase3_refine_sum.margin_mass`, x_ℓ Θ for
every row) multiply every token of every sequence by one d × d matrix M:
d² multiply-adds a token, the largest share of a pass.  On the Boolean
inputs the paper learns from, x M is a signed sum of M's rows, so the
entries of x are cut into groups of :data:`BITS` and each group's 2^BITS
signed sums of its rows of M are tabled once per call
(:func:`sign_tables`): x M is then ⌈d / BITS⌉ table rows added
(:func:`token_times`), a sixth of the work at d = 12.  A token with an entry
other than ±1 is multiplied out instead, so the kernels serve any input; a
token's product depends only on the token and M, so a pass and a later
decoding of the rows it kept give the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: Entries of a token per table: 2^6 rows of d entries a group (12 KB at d = 12, two groups).
BITS = 6


@njit(cache=True)
def sign_tables(matrix):
    """T[g, c] = Σ_b s_b M[BITS·g + b] with s_b = +1 where bit b of c is set, −1 otherwise, shape
    (⌈d / BITS⌉, 2^BITS, d)."""
    d = matrix.shape[0]
    groups = (d + BITS - 1) // BITS
    tables = np.zeros((groups, 1 << BITS, matrix.shape[1]))
    for g in range(groups):
        for code in range(1 << BITS):
            for b in range(min(BITS, d - BITS * g)):
                sign = 1.0 if (code >> b) & 1 else -1.0
                for e in range(matrix.shape[1]):
                    tables[g, code, e] += sign * matrix[BITS * g + b, e]
    return tables


@njit(inline="always", cache=True)
def token_times(x, tables, matrix, out):
    """out[:] = x M for one token ``x`` (d,): table rows when x is in {−1, +1}^d, multiply-adds otherwise."""
    d = x.shape[0]
    groups = tables.shape[0]
    boolean = True
    for a in range(d):
        boolean &= (x[a] == 1.0) | (x[a] == -1.0)
    if boolean:
        for g in range(groups):
            code = 0
            for b in range(min(BITS, d - BITS * g)):
                code |= np.int64(x[BITS * g + b] > 0.0) << b
            if g == 0:
                for e in range(out.shape[0]):
                    out[e] = tables[0, code, e]
            else:
                for e in range(out.shape[0]):
                    out[e] += tables[g, code, e]
    else:
        out[:] = 0.0
        for a in range(d):
            for e in range(out.shape[0]):
                out[e] += x[a] * matrix[a, e]
