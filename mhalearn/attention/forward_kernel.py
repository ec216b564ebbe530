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


def _lane_sums(transposed: bool, accumulate: bool):
    """The kernel out[i, j] (+)= Σ_c left[c, i] ⊙ right[c, j] (``transposed``: Σ_c left[i, c] ⊙ right[j, c])
    over the rows c of ``right`` (its columns when ``transposed``), lane by lane, the sum in order of c,
    added to out[i, j] when ``accumulate``; both flags are constants of the kernel, so its loops hold no
    test of them.

    ``left`` holds lanes (a 3-d array) or one scalar for every lane (2-d); ``right`` holds lanes.  The sums
    are computed in 2 × 2 blocks, four independent sums that the core overlaps (one sum alone waits on each
    multiply-add's latency), each load serving two of them; an odd last row or column repeats its
    neighbour's index, which computes the same sum twice and stores it twice.
    """
    @njit(inline="always", fastmath=FASTMATH, cache=True)
    def sums(left, right, out):
        rows, cols = out.shape[0], out.shape[1]
        inner = right.shape[1] if transposed else right.shape[0]
        for i in range(0, rows, 2):
            i1 = min(i + 1, rows - 1)
            for j in range(0, cols, 2):
                j1 = min(j + 1, cols - 1)
                s00, s01, s10, s11 = _ZERO_LANES, _ZERO_LANES, _ZERO_LANES, _ZERO_LANES
                if accumulate:
                    s00, s01 = _as_lanes(out[i, j]), _as_lanes(out[i, j1])
                    s10, s11 = _as_lanes(out[i1, j]), _as_lanes(out[i1, j1])
                for c in range(inner):
                    if transposed:
                        u0, u1, v0, v1 = _as_lanes(left[i, c]), _as_lanes(left[i1, c]), right[j, c], right[j1, c]
                    else:
                        u0, u1, v0, v1 = _as_lanes(left[c, i]), _as_lanes(left[c, i1]), right[c, j], right[c, j1]
                    s00 = _fma_lanes(s00, u0, v0)
                    s01 = _fma_lanes(s01, u0, v1)
                    s10 = _fma_lanes(s10, u1, v0)
                    s11 = _fma_lanes(s11, u1, v1)
                _store_lanes(out[i, j], s00)
                _store_lanes(out[i, j1], s01)
                _store_lanes(out[i1, j], s10)
                _store_lanes(out[i1, j1], s11)
    return sums


_sums_lanes = _lane_sums(transposed=False, accumulate=False)
_added_sums_lanes = _lane_sums(transposed=True, accumulate=True)


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
def _head_lanes(x_lanes, projections, weights, out_lanes):
    """One head on LANES sequences: weights[a, b] = A[a, b] and out_lanes[e, a] += Σ_b A[a, b] (x W)[b, e],
    lane by lane.

    ``projections`` (2d, k, LANES) holds (x Θ)ᵀ in rows 0…d−1 and (x W)ᵀ in rows d…2d−1.  The logits and
    the outputs are computed in 2 × 2 blocks, as :func:`_sums_lanes` computes its sums.
    """
    d, k, _ = x_lanes.shape
    _sums_lanes(projections, x_lanes, weights)  # weights[a, b] = Σ_e (x Θ)[a, e] x[b, e]
    for a in range(k):
        # The stable softmax of row a: max, exponentials of the shifted logits, their sum in order of b,
        # one reciprocal.
        peak = _as_lanes(weights[a, 0])
        for b in range(1, k):
            peak = _max_lanes(peak, _as_lanes(weights[a, b]))
        total = _ZERO_LANES
        for b in range(k):
            w = _exp_shifted_lanes(_as_lanes(weights[a, b]), peak)
            _store_lanes(weights[a, b], w)
            total = _add_lanes(total, w)
        inverse = _reciprocal_lanes(total)
        for b in range(k):
            _store_lanes(weights[a, b], _scale_lanes(_as_lanes(weights[a, b]), inverse))
    _added_sums_lanes(projections[d:], weights, out_lanes)  # out[e, a] += Σ_b (x W)[b, e] A[a, b]


_FORWARD_SIGNATURE = types.void(types.float64[:, :, ::1], types.float64[:, :, ::1], types.int64,
                                types.int64[::1], types.float64[:, :, ::1], types.float64[:, :, :, ::1],
                                types.boolean)


@slp_vectorised(_FORWARD_SIGNATURE, fastmath=FASTMATH, cache=True, nogil=True)
def forward_worker(X, projection, chunks, counter, out, weights_out, store_weights):
    """out[s] = Σ_i A_i (x_s W_i); with ``store_weights`` also weights_out[s] = A.

    ``projection`` (m, d, 2d) holds Θ_i in columns 0…d−1 and W_i in columns d…2d−1 of head i
    (:func:`stacked_projections`).
    """
    n, k, d = X.shape
    m = projection.shape[0]
    x_lanes = np.empty((d, k, LANES))
    projections = np.empty((2 * d, k, LANES))
    weights = np.empty((k, k, LANES))
    out_lanes = np.empty((d, k, LANES))
    chunk = next_chunk(counter)
    while chunk < chunks:
        stop = (chunk + 1) * n // chunks
        for first in range(chunk * n // chunks, stop, LANES):
            count = min(LANES, stop - first)
            _load_lanes(X, first, count, x_lanes)
            out_lanes[:, :, :] = 0.0
            for i in range(m):
                _sums_lanes(projection[i], x_lanes, projections)
                _head_lanes(x_lanes, projections, weights, out_lanes)
                if store_weights:
                    for lane in range(count):
                        head = weights_out[first + lane, i]
                        for a in range(k):
                            for b in range(k):
                                head[a, b] = weights[a, b, lane]
            for lane in range(count):
                out_s = out[first + lane]
                for a in range(k):
                    for e in range(d):
                        out_s[a, e] = out_lanes[e, a, lane]
        chunk = next_chunk(counter)


def stacked_projections(thetas: np.ndarray, ws: np.ndarray) -> np.ndarray:
    """(m, d, d) twice → (m, d, 2d): Θ_i beside W_i, C-contiguous (:func:`forward_worker`)."""
    return np.ascontiguousarray(np.concatenate([thetas, ws], axis=2))
