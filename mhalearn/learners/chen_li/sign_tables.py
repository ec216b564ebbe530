"""Products of Boolean tokens with a d × d matrix by table look-ups: the decoder's and phase 3's kernels.

The pattern decoder (:func:`~mhalearn.learners.chen_li.decoder.decode_patterns`,
x_j Ŵ_Σ for every token) and the margin pass of phase 3
(:func:`~mhalearn.learners.chen_li.phase3_refine_sum.margin_mass`, the
logits x_ℓ Θ x_jᵀ of every row) multiply every token of every sequence by
one d × d matrix M: d² multiply-adds a token, the largest share of a pass.
On the Boolean inputs the paper learns from, a token is named by its
*codes*, one per group of :data:`~mhalearn.data.token_codes.BITS` entries
(:func:`~mhalearn.data.token_codes.token_codes`: bit b
set where the entry is +1), and

- x M is a signed sum of M's rows: each group's 2^BITS signed sums of its
  rows are tabled once per call (:func:`sign_tables`), and x M is
  ⌈d / BITS⌉ table rows added (:func:`table_times`), a sixth of the work at
  d = 12;
- x M zᵀ is a signed sum of M's entries: each pair of groups' 2^BITS × 2^BITS
  signed sums of its block of M are tabled once per call
  (:func:`bilinear_tables`), and x M zᵀ is ⌈d / BITS⌉² table entries added
  (:func:`bilinear_form`) instead of d² + d multiply-adds.  The tables take
  32 KB per pair of groups, so they serve d ≤ 18 (:data:`BILINEAR_GROUPS`),
  where they stay in a core's cache.

Two Boolean tokens are equal exactly when their codes are.  A token with an
entry other than ±1 has no codes and is multiplied out instead
(:func:`matrix_times`), so the kernels serve any input (the margin kernel
multiplies out every token of a sequence that holds one).  What a kernel
computes for a sequence depends only on the sequence and M, whether its
codes were kept or coded anew, so a pass and a later decoding of the rows
it kept give the same bits.

Identical tokens get identical logits under every Θ, so the kernels number
a sequence's distinct tokens (:func:`group_identical_tokens`) and multiply
out the first of each class only (:func:`coded_token_products` from the
codes, :func:`distinct_token_products` from the tokens).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...data.token_codes import BITS, token_codes

#: The most groups (⌈d / BITS⌉) for which the kernels use :func:`bilinear_tables`: 9 tables of 32 KB at
#: d = 13–18.  Timed on one block of random ±1 sequences and random Θ (k = 4 and 8, the margin kernel with its
#: floor): the look-ups took 0.64–0.73× the time of the products at d = 10–12, 0.73–0.85× at d = 14–18,
#: 0.86–1.03× at d = 24 and longer beyond.
BILINEAR_GROUPS = 3


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


@njit(cache=True)
def bilinear_tables(matrix):
    """B[g, h, a, c] = s_aᵀ M[group g, group h] s_c, the signs s from codes a and c (as :func:`sign_tables`),
    shape (⌈d / BITS⌉, ⌈d / BITS⌉, 2^BITS, 2^BITS): x M zᵀ = Σ_{g,h} B[g, h, code_g(x), code_h(z)]."""
    d = matrix.shape[0]
    groups = (d + BITS - 1) // BITS
    rows = sign_tables(matrix)  # rows[g, a] = s_aᵀ M[group g, :]
    tables = np.zeros((groups, groups, 1 << BITS, 1 << BITS))
    for g in range(groups):
        for a in range(1 << BITS):
            for h in range(groups):
                for c in range(1 << BITS):
                    total = 0.0
                    for b in range(min(BITS, d - BITS * h)):
                        sign = 1.0 if (c >> b) & 1 else -1.0
                        total += sign * rows[g, a, BITS * h + b]
                    tables[g, h, a, c] = total
    return tables


@njit(inline="always", cache=True)
def table_times(tables, codes, out):
    """out[:] = x M for the Boolean token x of these ``codes``, from ``tables`` = :func:`sign_tables` (M)."""
    code = codes[0]
    for e in range(out.shape[0]):
        out[e] = tables[0, code, e]
    for g in range(1, tables.shape[0]):
        code = codes[g]
        for e in range(out.shape[0]):
            out[e] += tables[g, code, e]


@njit(inline="always", cache=True)
def bilinear_form(tables, codes_x, codes_z):
    """x M zᵀ for the Boolean tokens of these codes, from ``tables`` = :func:`bilinear_tables` (M)."""
    total = 0.0
    for g in range(tables.shape[0]):
        for h in range(tables.shape[1]):
            total += tables[g, h, codes_x[g], codes_z[h]]
    return total


@njit(inline="always", cache=True)
def matrix_times(x, matrix, out):
    """out[:] = x M by multiply-adds (a token that is not Boolean)."""
    out[:] = 0.0
    for a in range(x.shape[0]):
        for e in range(out.shape[0]):
            out[e] += x[a] * matrix[a, e]


@njit(inline="always", cache=True)
def token_times(x, codes, tables, matrix, out):
    """out[:] = x M for one token ``x``: table rows (``tables`` = :func:`sign_tables` (M)) when x is Boolean,
    multiply-adds otherwise; ``codes`` is scratch for its codes."""
    if token_codes(x, codes):
        table_times(tables, codes, out)
    else:
        matrix_times(x, matrix, out)


@njit(inline="always", cache=True)
def group_identical_tokens(x, group, first):
    """Number the distinct tokens of one sequence ``x`` (k, d) in order of first appearance.

    Writes group[j] = the number of token j's class and first[u] = the first
    token of class u; returns the number of classes.  Identical tokens get
    identical logits under every Θ, so the kernels treat each class as one token.
    ``x`` may also be the codes of Boolean tokens (k, groups): equal tokens have equal codes.
    """
    k, d = x.shape
    unique = 0
    for j in range(k):
        group[j] = -1
        for u in range(unique):
            # Count every mismatch rather than stop at the first: random tokens differ early and
            # unpredictably, and the branch mispredictions cost more than the comparisons.
            mismatches = 0
            for e in range(d):
                mismatches += x[first[u], e] != x[j, e]
            if mismatches == 0:
                group[j] = u
                break
        if group[j] < 0:
            group[j] = unique
            first[unique] = j
            unique += 1
    return unique


@njit(inline="always", cache=True)
def coded_token_products(codes, tables, group, first, values):
    """:func:`group_identical_tokens` of Boolean tokens given by their ``codes`` (k, groups), and x_u M for
    the first token of every class into ``values`` from ``tables`` = sign_tables(M); returns the classes."""
    unique = group_identical_tokens(codes, group, first)
    for u in range(unique):
        table_times(tables, codes[first[u]], values[u])
    return unique


@njit(cache=True, nogil=True)
def distinct_token_products(x, codes, tables, matrix, group, first, values):
    """The classes of identical tokens of ``x`` (k, d) (:func:`group_identical_tokens`) and x_u M for the
    first token of every class into ``values``; returns the number of classes.

    The kernels' path for a sequence with a token that is not Boolean, and not inlined: its code,
    in the loop of the Boolean path, would cost that path a tenth of its time.
    """
    unique = group_identical_tokens(x, group, first)
    for u in range(unique):
        token_times(x[first[u]], codes[first[u]], tables, matrix, values[u])
    return unique
