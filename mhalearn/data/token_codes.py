"""Boolean tokens named by their codes: one byte per group of :data:`BITS` entries, bit b set where the entry is +1.

A source of Boolean examples (:class:`~mhalearn.data.sources.ArraySource`,
a generated stream) codes every token
of a block once (:func:`block_codes`), and the kernels of Chen & Li's passes
read the codes instead of the tokens
(``mhalearn.learners.chen_li.sign_tables``: x M as ⌈d / BITS⌉ table
rows added).  Two Boolean tokens are equal exactly when their codes are; a
token with an entry other than ±1 has no codes (:func:`token_codes` says
so).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._exp import _float_to_bits

#: Entries of a token per table: 2^6 rows of d entries a group (12 KB at d = 12, two groups).
BITS = 6
#: The bits of 1.0 shifted left by one: those of +1 and of −1 alike, their sign bit shifted out.
_ONE_SHIFTED = np.int64(0x3FF0000000000000 << 1)


@njit(cache=True)
def code_groups(dim):
    """⌈d / BITS⌉: the codes, and the tables of
    ``sign_tables``, of a token of dimension ``dim``."""
    return (dim + BITS - 1) // BITS


@njit(inline="always", cache=True)
def token_codes(x, codes):
    """codes[g] = the code of ``x``'s entries BITS·g, BITS·g + 1, … (bit b set where the entry is +1);
    returns whether x is in {−1, +1}^d, the case where the codes name x."""
    d = x.shape[0]
    # Read from the entries' bits: ±1 are the two doubles whose bits, the sign shifted out, are
    # _ONE_SHIFTED, and the sign bit is the code's bit.  A test and a conversion per entry cost
    # as much again as the table look-ups they serve.
    other = 0
    for g in range(codes.shape[0]):
        code = 0
        for b in range(min(BITS, d - BITS * g)):
            bits = _float_to_bits(x[BITS * g + b])
            other |= (bits << 1) ^ _ONE_SHIFTED
            code |= np.int64(bits >= 0) << b
        codes[g] = code
    return other == 0


@njit(inline="always", cache=True)
def sequence_codes(x, codes):
    """:func:`token_codes` of every token of ``x`` (k, d) into ``codes`` (k, groups); whether all are Boolean."""
    boolean = True
    for j in range(x.shape[0]):
        boolean &= token_codes(x[j], codes[j])
    return boolean


@njit(cache=True, nogil=True)
def block_codes(X, codes):
    """:func:`sequence_codes` of every sequence of X (n, k, d) into ``codes`` (n, k, groups) of one byte
    each (codes have BITS ≤ 8 bits); returns whether every token is Boolean (else ``codes`` is void: the
    sweep stops at the first sequence with an entry other than ±1)."""
    for s in range(X.shape[0]):
        if not sequence_codes(X[s], codes[s]):
            return False
    return True


@njit(cache=True, nogil=True)
def _signs_into(codes, out):
    # out[s, j, e] = +1 where bit e mod BITS of code e // BITS of token j is set, −1 where it is not: the
    # entries token_codes read the bits from, exactly (±1 are exact).
    d = out.shape[2]
    for s in range(out.shape[0]):
        for j in range(out.shape[1]):
            for e in range(d):
                out[s, j, e] = 2.0 * np.float64((codes[s, j, e // BITS] >> (e % BITS)) & 1) - 1.0


def signs_of_codes(codes: np.ndarray, dim: int) -> np.ndarray:
    """The Boolean tokens whose codes are ``codes`` (…, k, groups), as a new float64 array (…, k, ``dim``)."""
    codes = np.ascontiguousarray(codes, dtype=np.uint8)
    out = np.empty((*codes.shape[:-1], dim))
    _signs_into(codes.reshape(-1, *codes.shape[-2:]), out.reshape(-1, *out.shape[-2:]))
    return out


__all__ = ["BITS", "block_codes", "code_groups", "sequence_codes", "signs_of_codes", "token_codes"]
