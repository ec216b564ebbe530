"""The forward kernel of the attention layer: F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i, LANES sequences side by side.

:func:`~mhalearn.attention.kernels.forward` and
:func:`~mhalearn.attention.kernels.forward_into` run :func:`forward_worker`
([design: kernels]).  Each sequence is one lane of every scratch array (their
last axis).  Each step holds LANES running sums as a tuple, in registers,
that LLVM's SLP vectoriser packs into the host's vectors (two AVX2 registers
or one AVX-512 register), even at the k = 4, d = 12 of the body's passes,
where a sequence's own axes are too short to fill a vector and a loop over
LANES entries in memory would spend more on loads, stores and loop set-up
than on arithmetic.  Every lane runs the operations of
:func:`~mhalearn.attention.kernels.attention` for a lone sequence in the same
order (fused multiply-adds in the order of the sums, no reassociation), so a
sequence's output depends neither on its lane nor on its group or chunk: the
same bits on any thread count.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types
from numba.extending import overload

from .._exp import exp_nonpositive
from .._numba import FASTMATH, next_chunk, slp_vectorised

#: Sequences a forward step computes side by side.
LANES = 8
_ZERO_LANES = (0.0,) * LANES


def _as_lanes(value):
    """A lane tuple: the LANES entries of a row, or a scalar in every lane."""


@overload(_as_lanes, inline="always")
def _as_lanes_overload(value):
    if isinstance(value, types.Float):
        return lambda value: (value, value, value, value, value, value, value, value)
    return lambda value: (value[0], value[1], value[2], value[3], value[4], value[5], value[6], value[7])


@njit(inline="always", cache=True)
def _store_lanes(row, v):
    row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7] = v


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _fma_lanes(acc, u, v):
    """acc + u ⊙ v, lane by lane (a fused multiply-add each)."""
    return (acc[0] + u[0] * v[0], acc[1] + u[1] * v[1], acc[2] + u[2] * v[2], acc[3] + u[3] * v[3],
            acc[4] + u[4] * v[4], acc[5] + u[5] * v[5], acc[6] + u[6] * v[6], acc[7] + u[7] * v[7])


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _max_lanes(u, v):
    return (v[0] if v[0] > u[0] else u[0], v[1] if v[1] > u[1] else u[1], v[2] if v[2] > u[2] else u[2],
            v[3] if v[3] > u[3] else u[3], v[4] if v[4] > u[4] else u[4], v[5] if v[5] > u[5] else u[5],
            v[6] if v[6] > u[6] else u[6], v[7] if v[7] > u[7] else u[7])


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _exp_shifted_lanes(u, shift):
    return (exp_nonpositive(u[0] - shift[0]), exp_nonpositive(u[1] - shift[1]), exp_nonpositive(u[2] - shift[2]),
            exp_nonpositive(u[3] - shift[3]), exp_nonpositive(u[4] - shift[4]), exp_nonpositive(u[5] - shift[5]),
            exp_nonpositive(u[6] - shift[6]), exp_nonpositive(u[7] - shift[7]))


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _add_lanes(u, v):
    return (u[0] + v[0], u[1] + v[1], u[2] + v[2], u[3] + v[3], u[4] + v[4], u[5] + v[5], u[6] + v[6], u[7] + v[7])


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _scale_lanes(u, v):
    return (u[0] * v[0], u[1] * v[1], u[2] * v[2], u[3] * v[3], u[4] * v[4], u[5] * v[5], u[6] * v[6], u[7] * v[7])


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _reciprocal_lanes(u):
    return (1.0 / u[0], 1.0 / u[1], 1.0 / u[2], 1.0 / u[3], 1.0 / u[4], 1.0 / u[5], 1.0 / u[6], 1.0 / u[7])


def _fma_block_row(sums, u, v):
    """sums[t] + u ⊙ v[t] for each column t of a block's row (four or two)."""


@overload(_fma_block_row, inline="always", fastmath=FASTMATH)
def _fma_block_row_overload(sums, u, v):
    if len(sums) == 4:
        return lambda sums, u, v: (_fma_lanes(sums[0], u, v[0]), _fma_lanes(sums[1], u, v[1]),
                                   _fma_lanes(sums[2], u, v[2]), _fma_lanes(sums[3], u, v[3]))
    return lambda sums, u, v: (_fma_lanes(sums[0], u, v[0]), _fma_lanes(sums[1], u, v[1]))


def _block_row(rows, i, at, js):
    """The lane tuples rows[i, at + j] for the columns j of ``js`` (four or two)."""


@overload(_block_row, inline="always")
def _block_row_overload(rows, i, at, js):
    if len(js) == 4:
        return lambda rows, i, at, js: (_as_lanes(rows[i, at + js[0]]), _as_lanes(rows[i, at + js[1]]),
                                        _as_lanes(rows[i, at + js[2]]), _as_lanes(rows[i, at + js[3]]))
    return lambda rows, i, at, js: (_as_lanes(rows[i, at + js[0]]), _as_lanes(rows[i, at + js[1]]))


def _block_column(right, c, js):
    """The lane rows right[c, j] for the columns j of ``js`` (four or two)."""


@overload(_block_column, inline="always")
def _block_column_overload(right, c, js):
    if len(js) == 4:
        return lambda right, c, js: (right[c, js[0]], right[c, js[1]], right[c, js[2]], right[c, js[3]])
    return lambda right, c, js: (right[c, js[0]], right[c, js[1]])


def _block_column_of_rows(right, c, js):
    """The lane rows right[j, c] for the columns j of ``js`` (four or two): ``right`` transposed."""


@overload(_block_column_of_rows, inline="always")
def _block_column_of_rows_overload(right, c, js):
    if len(js) == 4:
        return lambda right, c, js: (right[js[0], c], right[js[1], c], right[js[2], c], right[js[3], c])
    return lambda right, c, js: (right[js[0], c], right[js[1], c])


def _zero_row(js):
    """A block row of zero lane tuples, one for each column of ``js`` (four or two)."""


@overload(_zero_row, inline="always")
def _zero_row_overload(js):
    if len(js) == 4:
        return lambda js: (_ZERO_LANES, _ZERO_LANES, _ZERO_LANES, _ZERO_LANES)
    return lambda js: (_ZERO_LANES, _ZERO_LANES)


def _store_block_row(out, i, at, js, sums):
    """out[i, at + j] = the lane tuples ``sums``, for the columns j of ``js`` (four or two)."""


@overload(_store_block_row, inline="always")
def _store_block_row_overload(out, i, at, js, sums):
    if len(js) == 4:
        def store(out, i, at, js, sums):
            _store_lanes(out[i, at + js[0]], sums[0])
            _store_lanes(out[i, at + js[1]], sums[1])
            _store_lanes(out[i, at + js[2]], sums[2])
            _store_lanes(out[i, at + js[3]], sums[3])
        return store

    def store_two(out, i, at, js, sums):
        _store_lanes(out[i, at + js[0]], sums[0])
        _store_lanes(out[i, at + js[1]], sums[1])
    return store_two


@njit(inline="always", cache=True)
def _block_indices(first, size):
    """The four indices of a block from ``first``; past ``size`` the last one repeats."""
    last = size - 1
    return (first, min(first + 1, last), min(first + 2, last), min(first + 3, last))


def _lane_sums(transposed: bool, accumulate: bool):
    """The kernel out[i, q + j] (+)= Σ_c left[c, p + i] ⊙ right[c, j] (``transposed``: Σ_c left[i, p + c] ⊙
    right[j, c]) over c < ``inner``, for i < out's rows and j < right's columns (its rows when
    ``transposed``), p, q the offsets ``left_at``, ``out_at``; lane by lane, the sum in order of c,
    added to what out holds when ``accumulate``; both flags are constants of the kernel, so its loops hold
    no test of them.

    ``left`` holds lanes (a 3-d array) or one scalar for every lane (2-d); ``right`` holds lanes.  The sums
    are computed in blocks of four rows by four columns, then two for the last one or two columns:
    sixteen (eight) independent sums that the core overlaps (one sum alone waits on each multiply-add's
    latency), each load serving four (two) of them.  Past the last row or column a block repeats it,
    which computes the same sum again and stores it again; so k = 2 or 5 tokens cost no more sums than
    with blocks of two columns throughout.
    """
    @njit(inline="always", fastmath=FASTMATH, cache=True)
    def block(left, left_at, right, out, out_at, inner, i0, i1, i2, i3, js):
        if accumulate:
            s0, s1 = _block_row(out, i0, out_at, js), _block_row(out, i1, out_at, js)
            s2, s3 = _block_row(out, i2, out_at, js), _block_row(out, i3, out_at, js)
        else:
            zero = _zero_row(js)
            s0, s1, s2, s3 = zero, zero, zero, zero
        for c in range(inner):
            if transposed:
                u0, u1 = _as_lanes(left[i0, left_at + c]), _as_lanes(left[i1, left_at + c])
                u2, u3 = _as_lanes(left[i2, left_at + c]), _as_lanes(left[i3, left_at + c])
            else:
                u0, u1 = _as_lanes(left[c, left_at + i0]), _as_lanes(left[c, left_at + i1])
                u2, u3 = _as_lanes(left[c, left_at + i2]), _as_lanes(left[c, left_at + i3])
            v = _block_column_of_rows(right, c, js) if transposed else _block_column(right, c, js)
            s0 = _fma_block_row(s0, u0, v)
            s1 = _fma_block_row(s1, u1, v)
            s2 = _fma_block_row(s2, u2, v)
            s3 = _fma_block_row(s3, u3, v)
        _store_block_row(out, i0, out_at, js, s0)
        _store_block_row(out, i1, out_at, js, s1)
        _store_block_row(out, i2, out_at, js, s2)
        _store_block_row(out, i3, out_at, js, s3)

    @njit(inline="always", fastmath=FASTMATH, cache=True)
    def sums(left, left_at, right, out, out_at, inner):
        rows = out.shape[0]
        cols = right.shape[0] if transposed else right.shape[1]
        for i in range(0, rows, 4):
            i0, i1, i2, i3 = _block_indices(i, rows)
            j = 0
            while j + 3 <= cols:  # three columns left go in a block of four, the last one repeated
                block(left, left_at, right, out, out_at, inner, i0, i1, i2, i3, _block_indices(j, cols))
                j += 4
            while j < cols:
                block(left, left_at, right, out, out_at, inner, i0, i1, i2, i3, (j, min(j + 1, cols - 1)))
                j += 2
    return sums


_sums_lanes = _lane_sums(transposed=False, accumulate=False)
_added_sums_lanes = _lane_sums(transposed=True, accumulate=True)

#: Entries (float64) of the scratch a group of heads fills before its output product (:func:`forward_worker`):
#: 16 KB, half a core's L1 data cache on the CPUs measured (AVX2 Zen 3 and AVX-512 hosts alike have 32 KB or
#: more), so that the group's projections and weights are read back from L1.
HEAD_GROUP_ENTRIES = 2048


@njit(cache=True)
def head_group(k, d, m):
    """Heads :func:`forward_worker` takes together: as many as fit their (x W)ᵀ and weights, k(d + k)
    LANES entries a head, in :data:`HEAD_GROUP_ENTRIES`; one at least, m at most."""
    return max(1, min(m, HEAD_GROUP_ENTRIES // (k * (d + k) * LANES)))


@njit(inline="always", cache=True)
def _load_lanes(X, first, count, x_lanes):
    """x_lanes[c, a, lane] = X[first + lane, a, c] for lane < count, 0 for the lanes past the batch."""
    _, k, d = X.shape
    for lane in range(count):
        x = X[first + lane]
        for a in range(k):
            for c in range(d):
                x_lanes[c, a, lane] = x[a, c]
    for lane in range(count, LANES):
        for a in range(k):
            for c in range(d):
                x_lanes[c, a, lane] = 0.0


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _softmax_lanes(logits, weights, at):
    """weights[a, at + b] = softmax of logits row a, lane by lane: the stable softmax (max, exponentials of
    the shifted logits, their sum in order of b, one reciprocal); ``logits`` is overwritten."""
    k = logits.shape[0]
    for a in range(k):
        peak = _as_lanes(logits[a, 0])
        for b in range(1, k):
            peak = _max_lanes(peak, _as_lanes(logits[a, b]))
        total = _ZERO_LANES
        for b in range(k):
            w = _exp_shifted_lanes(_as_lanes(logits[a, b]), peak)
            _store_lanes(logits[a, b], w)
            total = _add_lanes(total, w)
        inverse = _reciprocal_lanes(total)
        for b in range(k):
            _store_lanes(weights[a, at + b], _scale_lanes(_as_lanes(logits[a, b]), inverse))


_FORWARD_SIGNATURE = types.void(types.float64[:, :, ::1], types.float64[:, :, ::1], types.int64,
                                types.int64[::1], types.float64[:, :, ::1], types.float64[:, :, :, ::1],
                                types.boolean)


@slp_vectorised(_FORWARD_SIGNATURE, fastmath=FASTMATH, cache=True, nogil=True)
def forward_worker(X, projection, chunks, counter, out, weights_out, store_weights):
    """out[s] = Σ_i A_i (x_s W_i); with ``store_weights`` also weights_out[s] = A.

    ``projection`` (m, d, 2d) holds Θ_i in columns 0…d−1 and W_i in columns d…2d−1 of head i
    (:func:`stacked_projections`).  The heads go in groups (:func:`head_group`): each head of a group
    leaves (x W_i)ᵀ and its weights side by side in ``values`` and ``weights``, and one product adds
    Σ_(i, b) (x W_i)[b, e] A_i[a, b] of the group to out[e, a], in order of head, then b: the sums of a
    head at a time, so the same bits for any group size.  A group that fits in L1 reads back its values
    from there, and its product has m·k terms to a load of out where a head alone has k.
    """
    n, k, d = X.shape
    m = projection.shape[0]
    group = head_group(k, d, m)
    x_lanes = np.empty((d, k, LANES))
    theta_products = np.empty((d, k, LANES))  # (x Θ_i)ᵀ
    logits = np.empty((k, k, LANES))
    values = np.empty((d, group * k, LANES))  # (x W_i)ᵀ of the group's heads, side by side
    weights = np.empty((k, group * k, LANES))  # A_i of the group's heads, side by side
    out_lanes = np.empty((d, k, LANES))
    chunk = next_chunk(counter)
    while chunk < chunks:
        stop = (chunk + 1) * n // chunks
        for first in range(chunk * n // chunks, stop, LANES):
            count = min(LANES, stop - first)
            _load_lanes(X, first, count, x_lanes)
            out_lanes[:, :, :] = 0.0
            for start in range(0, m, group):
                heads = min(group, m - start)
                for h in range(heads):
                    _sums_lanes(projection[start + h], 0, x_lanes, theta_products, 0, d)
                    _sums_lanes(projection[start + h], d, x_lanes, values, h * k, d)
                    _sums_lanes(theta_products, 0, x_lanes, logits, 0, d)  # logits[a, b] = (x Θ)[a] · x[b]
                    _softmax_lanes(logits, weights, h * k)
                    if store_weights:
                        for lane in range(count):
                            head = weights_out[first + lane, start + h]
                            for a in range(k):
                                for b in range(k):
                                    head[a, b] = weights[a, h * k + b, lane]
                _added_sums_lanes(values, 0, weights, out_lanes, 0, heads * k)
            for lane in range(count):
                out_s = out[first + lane]
                for a in range(k):
                    for e in range(d):
                        out_s[a, e] = out_lanes[e, a, lane]
        chunk = next_chunk(counter)


def stacked_projections(thetas: np.ndarray, ws: np.ndarray) -> np.ndarray:
    """(m, d, d) twice → (m, d, 2d): Θ_i beside W_i, C-contiguous (:func:`forward_worker`)."""
    return np.ascontiguousarray(np.concatenate([thetas, ws], axis=2))
