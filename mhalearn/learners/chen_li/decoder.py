"""The pattern decoder of Chen & Li's learner: each labelled row's attention pattern under Ŵ_Σ.

A query row ℓ of a sequence X is an *agreement row* when every head gives it
the same attention pattern a (of any shape).  Then its label is

    y_ℓ = Σ_i a_iᵀ X W_i = aᵀ X W_Σ,        W_Σ = Σ_i W_i,

so y_ℓ lies on the affine hull of the k points x_j W_Σ.  With an estimate
Ŵ_Σ every row is *decoded* by least squares under Σ_j â_j = 1,

    â = argmin ‖âᵀ X Ŵ_Σ − y_ℓ‖   subject to  1ᵀâ = 1,

in closed form (one (k−1)×(k−1) Cholesky factorisation per sequence, shared
by its k rows; :func:`decode_patterns`, a Numba kernel run by the dispatcher of
:mod:`mhalearn._numba`).  A small relative residual
and an â close to the simplex flag an agreement row
(:mod:`~mhalearn.learners.chen_li.agreement_rows`).  The test needs d > k:
at d ≤ k the k points x_j Ŵ_Σ span an affine set of dimension k − 1 ≥ d − 1
and residuals carry almost no information ([decision: agreement-rows]).

The kernel decodes a sequence in the steps of its worker: the labels read,
the distinct tokens multiplied by Ŵ_Σ (from their codes, given or coded
here, or multiplied out when a token is not Boolean), the Gram matrix of the
points' differences factored (unrolled at three free weights, k = 4 distinct
tokens), the labels projected onto the differences, then for every row its
weights, residual and distance from the simplex, and — only when asked — its
pattern and spreads.
"""

from __future__ import annotations

import numpy as np
from numba import njit, types

from ..._numba import DISPATCH, chunk_count, new_counter, next_chunk, slp_vectorised, thread_driver
from ...attention.forward_kernel import _as_lanes, _store_lanes
from ...data.sources import kernel_labels, kernel_tokens, stream_rows
from ...data.token_codes import block_codes, code_groups
from .cholesky import solve_three
from .decoder_kernel import _CHOLESKY_FLOOR, _EXPLICIT_BELOW, _decode_patterns_parallel, _decode_patterns_worker
from .sign_tables import sign_tables

#: Sequences the batched decoder (:func:`_decode_residuals_batched_worker`) decodes side by side: two AVX2
#: vectors, one AVX-512 vector of float64.
LANES = 8
_ZERO_LANES = (0.0,) * LANES


@njit(inline="always", cache=True)
def _product_sum_lanes(total, u, v):
    """total + u ⊙ v, lane by lane: a product, then a sum (no fused multiply-add: the scalar loop's bits)."""
    return (total[0] + u[0] * v[0], total[1] + u[1] * v[1], total[2] + u[2] * v[2], total[3] + u[3] * v[3],
            total[4] + u[4] * v[4], total[5] + u[5] * v[5], total[6] + u[6] * v[6], total[7] + u[7] * v[7])


@njit(inline="always", cache=True)
def _difference_lanes(u, v):
    return (u[0] - v[0], u[1] - v[1], u[2] - v[2], u[3] - v[3], u[4] - v[4], u[5] - v[5], u[6] - v[6], u[7] - v[7])


#: Rows of the batched worker's scratch of LANES columns: the Gram matrix (g00, g10, g11, g20, g21, g22), its
#: factor (l10, l20, l21 and 1 / the diagonal) and whether it is healthy; a row's sums (‖y − v_0‖², ‖y‖², the
#: three entries of D(y − v_0)); its weights â, squared residual, relative residual and distance from the
#: simplex.  One array, so that its loops over the lanes read and write rows LLVM can tell apart.
_GRAM, _FACTOR, _FACTORED, _SUMS, _WEIGHTS, _SQUARED, _RESIDUAL, _VIOLATION = 0, 6, 12, 13, 18, 22, 23, 24
_SCRATCH_ROWS = 25


@njit(inline="always", cache=True)
def _factor_lanes(scratch):
    """cholesky_three's operations on every lane's Gram matrix, in its order (hence its bits), its failures
    marked in row _FACTORED (1.0 where healthy) instead of returned; a loop without a branch, which LLVM's
    loop vectoriser takes LANES lanes at a time."""
    for lane in range(LANES):
        g00, g10, g11 = scratch[_GRAM, lane], scratch[_GRAM + 1, lane], scratch[_GRAM + 2, lane]
        g20, g21, g22 = scratch[_GRAM + 3, lane], scratch[_GRAM + 4, lane], scratch[_GRAM + 5, lane]
        l00 = np.sqrt(g00)
        bound = _CHOLESKY_FLOOR * max(max(max(0.0, g00), g11), g22)
        l10, l20 = g10 / l00, g20 / l00
        pivot = g11 - l10 * l10
        l11 = np.sqrt(pivot)
        l21 = (g21 - l20 * l10) / l11
        last = g22 - l20 * l20 - l21 * l21
        scratch[_FACTOR, lane], scratch[_FACTOR + 1, lane], scratch[_FACTOR + 2, lane] = l10, l20, l21
        scratch[_FACTOR + 3, lane] = 1.0 / l00
        scratch[_FACTOR + 4, lane] = 1.0 / l11
        scratch[_FACTOR + 5, lane] = 1.0 / np.sqrt(last)
        healthy = not (g00 <= bound) and not (pivot <= bound) and not (last <= bound)
        scratch[_FACTORED, lane] = 1.0 if healthy else 0.0


@njit(inline="always", cache=True)
def _relative_residual(squared, label_squares):
    """√(squared / ‖y‖²), inf where ‖y‖² = 0: the root taken before the test, so that a choice replaces the
    branch (the quotient of a zero ‖y‖² is only discarded: error_model="numpy", no exception)."""
    root = np.sqrt(squared / label_squares)
    return root if label_squares > 0.0 else np.inf


@njit(inline="always", cache=True)
def _solve_lanes(scratch):
    """Every lane's row: solve_three's weights â, the squared residual by subtraction, the relative residual
    and the distance from the simplex, as _decode_patterns_worker computes them; a loop without a branch."""
    for lane in range(LANES):
        p0, p1, p2 = scratch[_SUMS + 2, lane], scratch[_SUMS + 3, lane], scratch[_SUMS + 4, lane]
        c0, c1, c2 = solve_three(scratch[_FACTOR, lane], scratch[_FACTOR + 1, lane], scratch[_FACTOR + 2, lane],
                                 scratch[_FACTOR + 3, lane], scratch[_FACTOR + 4, lane], scratch[_FACTOR + 5, lane],
                                 p0, p1, p2)
        w0 = 1.0 - c0 - c1 - c2
        scratch[_WEIGHTS, lane], scratch[_WEIGHTS + 1, lane] = w0, c0
        scratch[_WEIGHTS + 2, lane], scratch[_WEIGHTS + 3, lane] = c1, c2
        squared = scratch[_SUMS, lane] - (0.0 + c0 * p0 + c1 * p1 + c2 * p2)
        scratch[_SQUARED, lane] = squared
        scratch[_RESIDUAL, lane] = _relative_residual(squared, scratch[_SUMS + 1, lane])
        violation = max(0.0, -w0, w0 - 1.0)
        violation = max(violation, -c0, c0 - 1.0)
        violation = max(violation, -c1, c1 - 1.0)
        scratch[_VIOLATION, lane] = max(violation, -c2, c2 - 1.0)


_BATCHED_SIGNATURE = types.void(types.float64[:, :, ::1], types.uint8[:, :, ::1], types.float64[:, :, ::1],
                                types.float64, types.int64[::1], types.float64[:, ::1], types.float64[:, :, ::1],
                                types.int64, types.int64[::1], types.float64[:, ::1], types.float64[:, ::1],
                                types.float64[:, ::1])


@slp_vectorised(_BATCHED_SIGNATURE, cache=True, nogil=True, error_model="numpy")
def _decode_residuals_batched_worker(X, codes, Y, label_scale, sequences, w_sum, tables, chunks, counter, residuals,
                                     violations, squares):
    # The common case of a pass, k = 4 Boolean tokens given by their codes, residuals and violations only, LANES
    # sequences side by side: the Gram matrix's and every row's sums are tuples of LANES running sums, in registers,
    # that LLVM's SLP vectoriser packs into the host's vectors (as the forward kernel's,
    # mhalearn.attention.forward_kernel), and the factorisation and every row's solve are loops over the lanes without a
    # branch, on the rows of one scratch array, that its loop vectoriser takes a vector at a time (as tuples they took
    # twice as long to compile); only the reads of labels and table rows, and the stores of each row's two outputs, go
    # lane by lane.  Each lane performs _decode_patterns_worker's operations on its sequence in their order (no
    # reassociation, no fused multiply-add: compiled without fast-math), hence its bits.  A lane whose sequence repeats
    # a token, or whose Gram matrix is not positive definite, is decoded again by _decode_patterns_worker
    # (error_model="numpy": its divisions by 0 here give NaN, not an exception); so is a chunk's tail shorter than
    # LANES.  ``squares``, unless empty, gets each row's ‖y‖², a sum the rows' step forms anyway.
    squared_labels = squares.shape[0] > 0
    n = sequences.shape[0]
    k, d = X.shape[1], X.shape[2]
    labels = Y.shape[1]
    groups = tables.shape[0]
    label = np.empty((labels, d, LANES))  # every array ends in the lane axis
    values = np.empty((k, d, LANES))
    differences = np.empty((3, d, LANES))
    healthy = np.empty(LANES, dtype=np.bool_)
    scratch = np.empty((_SCRATCH_ROWS, LANES))
    keys = np.empty(k, dtype=np.uint64)
    one = np.zeros(1, dtype=np.int64)
    chunk = next_chunk(counter)
    while chunk < chunks:
        start, stop = chunk * n // chunks, (chunk + 1) * n // chunks
        for batch in range(start, stop - LANES + 1, LANES):
            for lane in range(LANES):
                sequence = sequences[batch + lane]
                for row in range(labels):
                    for e in range(d):
                        label[row, e, lane] = (Y[sequence, row, e] if label_scale == 1.0
                                               else Y[sequence, row, e] / label_scale)
                distinct = True
                for j in range(k):
                    # A token's codes as one integer, compared whole: a loop over the codes of every pair of
                    # tokens cost the decoder a tenth of its time.  Equal tokens have equal keys; past d = 48 a key
                    # loses its first codes, and distinct tokens whose keys collide send the lane to the scalar
                    # worker below, which decodes it to the same bits.
                    key = np.uint64(codes[sequence, j, 0])
                    for g in range(1, groups):
                        key = (key << np.uint64(8)) | np.uint64(codes[sequence, j, g])
                    keys[j] = key
                    for i in range(j):
                        distinct = distinct and keys[i] != key
                    # table_times's sums, in its order; at d = 7..12 (two codes) in one expression, each entry
                    # stored once rather than stored and read back.
                    first_code = codes[sequence, j, 0]
                    if groups == 2:
                        second_code = codes[sequence, j, 1]
                        for e in range(d):
                            values[j, e, lane] = tables[0, first_code, e] + tables[1, second_code, e]
                    else:
                        for e in range(d):
                            values[j, e, lane] = tables[0, first_code, e]
                        for g in range(1, groups):
                            for e in range(d):
                                values[j, e, lane] += tables[g, codes[sequence, j, g], e]
                healthy[lane] = distinct
            g00 = g10 = g11 = g20 = g21 = g22 = _ZERO_LANES
            for e in range(d):
                origin = _as_lanes(values[0, e])
                a = _difference_lanes(_as_lanes(values[1, e]), origin)
                b = _difference_lanes(_as_lanes(values[2, e]), origin)
                c = _difference_lanes(_as_lanes(values[3, e]), origin)
                _store_lanes(differences[0, e], a)
                _store_lanes(differences[1, e], b)
                _store_lanes(differences[2, e], c)
                g00 = _product_sum_lanes(g00, a, a)
                g10 = _product_sum_lanes(g10, b, a)
                g11 = _product_sum_lanes(g11, b, b)
                g20 = _product_sum_lanes(g20, c, a)
                g21 = _product_sum_lanes(g21, c, b)
                g22 = _product_sum_lanes(g22, c, c)
            _store_lanes(scratch[_GRAM], g00)
            _store_lanes(scratch[_GRAM + 1], g10)
            _store_lanes(scratch[_GRAM + 2], g11)
            _store_lanes(scratch[_GRAM + 3], g20)
            _store_lanes(scratch[_GRAM + 4], g21)
            _store_lanes(scratch[_GRAM + 5], g22)
            _factor_lanes(scratch)
            for lane in range(LANES):
                healthy[lane] = healthy[lane] and scratch[_FACTORED, lane] == 1.0
            for row in range(labels):
                offset_squares = label_squares = first = second = third = _ZERO_LANES
                for e in range(d):
                    y = _as_lanes(label[row, e])
                    offset = _difference_lanes(y, _as_lanes(values[0, e]))
                    offset_squares = _product_sum_lanes(offset_squares, offset, offset)
                    label_squares = _product_sum_lanes(label_squares, y, y)
                    first = _product_sum_lanes(first, _as_lanes(differences[0, e]), offset)
                    second = _product_sum_lanes(second, _as_lanes(differences[1, e]), offset)
                    third = _product_sum_lanes(third, _as_lanes(differences[2, e]), offset)
                _store_lanes(scratch[_SUMS], offset_squares)
                _store_lanes(scratch[_SUMS + 1], label_squares)
                if squared_labels:
                    for lane in range(LANES):
                        squares[batch + lane, row] = scratch[_SUMS + 1, lane]
                _store_lanes(scratch[_SUMS + 2], first)
                _store_lanes(scratch[_SUMS + 3], second)
                _store_lanes(scratch[_SUMS + 4], third)
                _solve_lanes(scratch)
                for lane in range(LANES):
                    if scratch[_SQUARED, lane] <= _EXPLICIT_BELOW * scratch[_SUMS, lane]:
                        # The residual formed from the fitted point, as _decode_patterns_worker forms it.
                        total = 0.0
                        for e in range(d):
                            fitted = 0.0
                            fitted += scratch[_WEIGHTS, lane] * values[0, e, lane]
                            fitted += scratch[_WEIGHTS + 1, lane] * values[1, e, lane]
                            fitted += scratch[_WEIGHTS + 2, lane] * values[2, e, lane]
                            fitted += scratch[_WEIGHTS + 3, lane] * values[3, e, lane]
                            total += (fitted - label[row, e, lane]) ** 2
                        scratch[_RESIDUAL, lane] = _relative_residual(total, scratch[_SUMS + 1, lane])
                    out = batch + lane
                    residuals[out, row] = scratch[_RESIDUAL, lane]
                    violations[out, row] = scratch[_VIOLATION, lane]
            for lane in range(LANES):
                if not healthy[lane]:
                    out = batch + lane
                    one[0] = 0
                    _decode_patterns_worker(X, codes, Y, label_scale, sequences[out:out + 1], w_sum, tables, 1, one,
                                            residuals[out:out + 1], violations[out:out + 1], None, None,
                                            squares[out:out + 1])
        tail = start + (stop - start) // LANES * LANES
        if tail < stop:
            one[0] = 0
            _decode_patterns_worker(X, codes, Y, label_scale, sequences[tail:stop], w_sum, tables, 1, one,
                                    residuals[tail:stop], violations[tail:stop], None, None, squares[tail:stop])
        chunk = next_chunk(counter)


_decode_residuals_batched_parallel = thread_driver(_decode_residuals_batched_worker)


def decode_patterns(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray):
    """Decode the attention pattern of labelled rows with Ŵ_Σ (affine least squares).

    Parameters
    ----------
    X : (n, k, d) sequences.
    Y : (n, r, d) output rows to decode against each sequence (r = k for
        every row of a sequence, r = 1 for one chosen row).
    w_sum : (d, d) the estimate Ŵ_Σ.

    Returns
    -------
    patterns : (n, r, k) — â of each row; identical tokens share their weight
        equally; NaN when the points x_j Ŵ_Σ of distinct tokens are affinely
        dependent.
    residuals : (n, r) — relative residual ‖âᵀ X Ŵ_Σ − y‖ / ‖y‖ (inf when
        affinely dependent or y = 0).
    violations : (n, r) — distance of â from the simplex, max(0, −min â_j, max â_j − 1).
    spreads : (n, r, k) — σ_j, the standard deviation of â_j if the residual
        were white noise of the same size: ‖residual‖/√(d − k + 1) times the
        square root of â_j's variance per unit noise.
    """
    return _decode(X, Y, w_sum, full=True)


def decoding_residuals(X: np.ndarray, Y: np.ndarray, w_sum: np.ndarray, sequences: np.ndarray | None = None,
                       out: tuple[np.ndarray, np.ndarray] | None = None,
                       squares: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The ``residuals`` and ``violations`` of :func:`decode_patterns`, bit for bit, without the patterns.

    What the acceptance test of every row needs: it skips the spreads'
    solves and the (n, r, k) outputs, so a pass over the data decodes in
    full only the rows it keeps.  ``sequences`` (sorted indices into X and Y)
    decodes those sequences only, where they lie, and indexes the outputs
    by position in ``sequences``: a block's training sequences without gathering them.
    ``out``: a pair of C-contiguous float64 arrays (n, r) to write them into (a pass's lent ones,
    ``mhalearn.data.scratch.ScratchArrays``).  ``squares``: a C-contiguous float64 array (n, r) to write
    each row's ‖y‖² into (y = Y / its scale), a sum the decoding forms anyway, in the order e = 1, …, d;
    defined where the row's residual is finite.
    """
    _, residuals, violations, _ = _decode(X, Y, w_sum, full=False, sequences=sequences, out=out, squares=squares)
    return residuals, violations


def _decode(X, Y, w_sum, *, full: bool, sequences: np.ndarray | None = None, out=None, squares=None):
    k = X.shape[1]
    sequences = stream_rows(sequences, X.shape[0])
    n = len(sequences)
    labels = Y.shape[1]
    patterns, spreads = (np.empty((n, labels, k)), np.empty((n, labels, k))) if full else (None, None)
    residuals, violations = (np.empty((n, labels)), np.empty((n, labels))) if out is None else out
    codes = getattr(X, "codes", None)  # a CodedTokens block (mhalearn.data.sources)
    Y, label_scale = kernel_labels(Y)
    X = kernel_tokens(X, codes_suffice=codes is not None)  # the workers read the codes when given, never X
    coded_here = codes is None and not full and k == 4 and n == X.shape[0] and X.dtype == np.float64
    w_sum = np.ascontiguousarray(w_sum, dtype=np.float64)
    d = X.shape[2]
    if coded_here:
        # A whole block without codes (a Dask array task's, an array's) is coded here when all its tokens are
        # Boolean, so that the batched worker decodes it: the same bits, at 0.21-0.24 µs a sequence, coding
        # included, against 0.38-0.40 one sequence at a time (m = 4, d = 12, one thread, a block of 65 536;
        # runs/generated-pass/plain_block_decoder.py).
        codes = np.empty((n, k, code_groups(d)), dtype=np.uint8)
        codes = codes if block_codes(X, codes) else None
    chunks = chunk_count(n)
    work = n * k * d * (d + k + labels)
    if codes is not None and not full and k == 4:
        DISPATCH.run("decode_patterns", work, _decode_residuals_batched_worker, _decode_residuals_batched_parallel,
                     X, np.ascontiguousarray(codes, dtype=np.uint8), Y, float(label_scale), sequences, w_sum,
                     sign_tables(w_sum), chunks, new_counter(), residuals, violations,
                     np.empty((0, labels)) if squares is None else squares)
    else:
        DISPATCH.run("decode_patterns", work, _decode_patterns_worker, _decode_patterns_parallel, X, codes, Y,
                     label_scale, sequences, w_sum, sign_tables(w_sum), chunks, new_counter(), residuals, violations,
                     patterns, spreads, squares)
    return patterns, residuals, violations, spreads
