"""Numba kernels: every hot loop of mhalearn (docs/design.md §3).

All kernels take C-contiguous float64 arrays, are compiled with
``cache=True`` and run in parallel over the batch (small batches on the
calling thread, see ``_SERIAL_WORK``).  The thin Python wrappers
at the bottom of each section are what the rest of the package calls; they
assume validated inputs (validation happens once, in the public API).

Conventions: a batch ``X`` has shape ``(n, k, d)``; ``thetas`` and ``ws`` have
shape ``(m, d, d)``; head ``i`` computes ``softmax(X Θ_i Xᵀ) X W_i`` with a
row-wise softmax made stable by subtracting the row maximum.

The pure-NumPy statement of the same maths lives in ``tests/reference.py``.
"""

from __future__ import annotations

import time

import numba
import numpy as np
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._validation import check_logit_range

# Contraction lets LLVM fuse multiply-adds.  Reassociation is deliberately
# off: it would undo the rounding trick in ``exp_nonpositive`` and the
# Cody–Waite split of ln 2.  Loops are written so that the inner loop is an
# axpy over a contiguous axis, which vectorises without reassociation.
FASTMATH = {"contract", "arcp", "nsz"}

# Entries of the per-block intermediates that batched kernels may hold at
# once (bounds their memory for large n).
_BLOCK_ENTRIES = 1 << 22


# --------------------------------------------------------------------------
# A vectorisable exp for the softmax
# --------------------------------------------------------------------------
# LLVM here has no vector math library (Numba's SVML is off), so np.exp stays
# a scalar libm call and dominates the softmax.  This exp only ever sees
# shifted logits x <= 0, which makes a branch-free version easy:
# exp(x) = 2^n · exp(r), |r| <= ln2/2, 2^n assembled in the exponent bits and
# exp(r) = 1 + r + r²·g(r) with g a degree-9 polynomial fitted in Chebyshev
# nodes (fit error 1e-17 relative; with 1 + r exact the result stays within
# 1 ulp of exp, as with the degree-13 Taylor polynomial it replaces, for two
# multiply-adds fewer).  Comparisons are written as selects, which vectorise.

@intrinsic
def _bits_to_float(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


@intrinsic
def _float_to_bits(typingctx, value):
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_INTEGER_SHIFT = 6755399441055744.0  # 1.5·2^52: n + shift holds the integer n in its low mantissa bits
_INTEGER_SHIFT_BITS = 0x4338000000000000
_EXP_FLOOR = -708.0  # below this exp underflows to subnormals; we return 0
# g(r) = (exp(r) − 1 − r)/r² ≈ Σ_j _EXP_Gj · r^j on |r| <= ln2/2
# (mpmath.chebyfit at 50 digits, degree 9, then rounded to doubles).
_EXP_G0 = 0.5000000000000001
_EXP_G1 = 0.16666666666666669
_EXP_G2 = 0.041666666666624164
_EXP_G3 = 0.008333333333330065
_EXP_G4 = 0.0013888888917196719
_EXP_G5 = 0.00019841269863040545
_EXP_G6 = 2.4801521322368692e-05
_EXP_G7 = 2.7557268480310024e-06
_EXP_G8 = 2.7620075879983367e-07
_EXP_G9 = 2.5100375832561234e-08


@njit(inline="always", fastmath=FASTMATH, cache=True)
def exp_nonpositive(x):
    """exp(x) for x <= 0, branch-free so that loops over it vectorise."""
    clamped = x if x > _EXP_FLOOR else _EXP_FLOOR
    n_float = np.rint(clamped * _LOG2E)
    r = clamped - n_float * _LN2_HI - n_float * _LN2_LO
    g = _EXP_G9
    g = g * r + _EXP_G8
    g = g * r + _EXP_G7
    g = g * r + _EXP_G6
    g = g * r + _EXP_G5
    g = g * r + _EXP_G4
    g = g * r + _EXP_G3
    g = g * r + _EXP_G2
    g = g * r + _EXP_G1
    g = g * r + _EXP_G0
    p = (g * r + 1.0) * r + 1.0
    n = _float_to_bits(n_float + _INTEGER_SHIFT) - _INTEGER_SHIFT_BITS
    value = p * _bits_to_float((n + 1023) << 52)
    return value if x >= _EXP_FLOOR else 0.0


# --------------------------------------------------------------------------
# Small dense products
# --------------------------------------------------------------------------
# Everything below works one sequence at a time on k×d, d×d and k×k matrices
# (k, d ~ 16) held in per-thread scratch, so each product is a few thousand
# multiply-adds out of L1.  BLAS is no help at that size (and its threads
# would fight Numba's for the cores); what matters is that the innermost
# loop is a long contiguous axpy that LLVM vectorises, and that each load and
# store of the output carries several multiply-adds.  Operands are addressed
# through explicit column offsets so that all heads can share one row-major
# buffer without taking non-contiguous slices.

@njit(inline="always", cache=True)
def _alpha(A, offset, transposed, r, c):
    if transposed:
        return A[c, offset + r]
    return A[r, offset + c]


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _mm_body(A, a0, a_t, B, b0, C, c0, rows, inner, cols):
    """C[r, c0+j] += Σ_c α(r, c) · B[c, b0+j] for r < rows, c < inner, j < cols.

    α(r, c) is A[r, a0+c], or A[c, a0+r] when ``a_t``.  Two rows of C and
    four terms of the sum per pass over j: the j loop is a contiguous axpy
    that vectorises, and each load/store of C carries four multiply-adds.
    The column indices are unsigned: a signed b0 + j would get Numba's
    negative-index wrap-around, which stops the vectorisation.
    """
    b0 = np.uint64(b0)
    c0 = np.uint64(c0)
    cols = np.uint64(cols)
    rows2 = rows - rows % 2
    inner4 = inner - inner % 4
    for r in range(0, rows2, 2):
        for c in range(0, inner4, 4):
            p0 = _alpha(A, a0, a_t, r, c)
            p1 = _alpha(A, a0, a_t, r, c + 1)
            p2 = _alpha(A, a0, a_t, r, c + 2)
            p3 = _alpha(A, a0, a_t, r, c + 3)
            q0 = _alpha(A, a0, a_t, r + 1, c)
            q1 = _alpha(A, a0, a_t, r + 1, c + 1)
            q2 = _alpha(A, a0, a_t, r + 1, c + 2)
            q3 = _alpha(A, a0, a_t, r + 1, c + 3)
            for j in range(cols):
                x0 = B[c, b0 + j]
                x1 = B[c + 1, b0 + j]
                x2 = B[c + 2, b0 + j]
                x3 = B[c + 3, b0 + j]
                C[r, c0 + j] = (((C[r, c0 + j] + p0 * x0) + p1 * x1) + p2 * x2) + p3 * x3
                C[r + 1, c0 + j] = (((C[r + 1, c0 + j] + q0 * x0) + q1 * x1) + q2 * x2) + q3 * x3
        for c in range(inner4, inner):
            p = _alpha(A, a0, a_t, r, c)
            q = _alpha(A, a0, a_t, r + 1, c)
            for j in range(cols):
                x = B[c, b0 + j]
                C[r, c0 + j] += p * x
                C[r + 1, c0 + j] += q * x
    for r in range(rows2, rows):
        for c in range(0, inner4, 4):
            p0 = _alpha(A, a0, a_t, r, c)
            p1 = _alpha(A, a0, a_t, r, c + 1)
            p2 = _alpha(A, a0, a_t, r, c + 2)
            p3 = _alpha(A, a0, a_t, r, c + 3)
            for j in range(cols):
                C[r, c0 + j] = ((((C[r, c0 + j] + p0 * B[c, b0 + j]) + p1 * B[c + 1, b0 + j])
                                 + p2 * B[c + 2, b0 + j]) + p3 * B[c + 3, b0 + j])
        for c in range(inner4, inner):
            p = _alpha(A, a0, a_t, r, c)
            for j in range(cols):
                C[r, c0 + j] += p * B[c, b0 + j]


# Called entry points for the less hot call sites: Numba inlines
# ``inline="always"`` functions at every call site, which costs compile time;
# the forward path (also used by the other kernels) inlines ``_mm_body``.

@njit(fastmath=FASTMATH, cache=True)
def _mm(A, a0, B, b0, C, c0, rows, inner, cols):
    """C[r, c0+j] += Σ_c A[r, a0+c] · B[c, b0+j] for r < rows, c < inner, j < cols."""
    _mm_body(A, a0, False, B, b0, C, c0, rows, inner, cols)


@njit(fastmath=FASTMATH, cache=True)
def _mm_t(A, a0, B, b0, C, c0, rows, inner, cols):
    """C[r, c0+j] += Σ_c A[c, a0+r] · B[c, b0+j]: as :func:`_mm` with A transposed."""
    _mm_body(A, a0, True, B, b0, C, c0, rows, inner, cols)


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _transpose_into(x, out):
    rows, cols = x.shape
    for r in range(rows):
        for c in range(cols):
            out[c, r] = x[r, c]


# --------------------------------------------------------------------------
# Per-sequence attention
# --------------------------------------------------------------------------
# Layout for one sequence x (k×d) and m heads, all heads side by side:
#   queries_t (d, m·k): columns i·k … i·k+k−1 hold (x Θ_i)ᵀ;
#   weights_t (k, m·k): weights_t[b, i·k + a] = A_i[a, b], the attention
#                       matrices transposed, so the row softmax of A_i is a
#                       softmax down columns: every pass of it is a
#                       vectorised sweep over m·k contiguous entries;
#   values    (k, m·d): columns i·d … i·d+d−1 hold x W_i.

@njit(inline="always", fastmath=FASTMATH, cache=True)
def _softmax_columns(S, col_max, col_sum):
    """Stable softmax down each column of S, in place.

    The max and exp passes take two rows at a time, which halves the loads
    and stores of the running column max and sum.
    """
    k, width = S.shape
    for a in range(width):
        col_max[a] = S[0, a]
    b = 1
    while b + 1 < k:
        for a in range(width):
            v0 = S[b, a]
            v1 = S[b + 1, a]
            v = v1 if v1 > v0 else v0
            col_max[a] = v if v > col_max[a] else col_max[a]
        b += 2
    if b < k:
        for a in range(width):
            v = S[b, a]
            col_max[a] = v if v > col_max[a] else col_max[a]
    for a in range(width):
        col_sum[a] = 0.0
    b = 0
    while b + 1 < k:
        for a in range(width):
            w0 = exp_nonpositive(S[b, a] - col_max[a])
            w1 = exp_nonpositive(S[b + 1, a] - col_max[a])
            S[b, a] = w0
            S[b + 1, a] = w1
            col_sum[a] = (col_sum[a] + w0) + w1
        b += 2
    if b < k:
        for a in range(width):
            w = exp_nonpositive(S[b, a] - col_max[a])
            S[b, a] = w
            col_sum[a] += w
    for a in range(width):
        col_sum[a] = 1.0 / col_sum[a]
    for b in range(k):
        for a in range(width):
            S[b, a] *= col_sum[a]


@njit(fastmath=FASTMATH, cache=True)
def _attention_t(x, x_t, theta_t, queries_t, weights_t, col_max, col_sum):
    """weights_t[b, i k + a] = A_i[a, b] = softmax_b(x_a Θ_i x_bᵀ) for one sequence x.

    ``theta_t`` holds the transposes Θ_iᵀ, shape (m, d, d).
    """
    k, d = x.shape
    m = theta_t.shape[0]
    _transpose_into(x, x_t)
    queries_t[:, :] = 0.0
    for i in range(m):
        _mm_body(theta_t[i], 0, False, x_t, 0, queries_t, i * k, d, d, k)
    weights_t[:, :] = 0.0
    _mm_body(x, 0, False, queries_t, 0, weights_t, 0, k, d, m * k)
    _softmax_columns(weights_t, col_max, col_sum)


# --------------------------------------------------------------------------
# Workers and parallel drivers
# --------------------------------------------------------------------------
# The batch is cut into ``chunks`` contiguous ranges of samples.  Each worker
# allocates its scratch once, then takes the next unprocessed chunk from a
# shared atomic counter until none is left: threads that the OS schedules
# less (the machine is shared) simply process fewer chunks.  Per-chunk
# results (losses, gradients) are summed afterwards in chunk order, so the
# result does not depend on which thread ran which chunk.  Called directly
# with a fresh counter, a worker runs every chunk on the calling thread.

@intrinsic
def _next_chunk(typingctx, counter):
    """Atomically increment counter[0] (int64) and return its previous value."""
    if not (isinstance(counter, types.Array) and counter.ndim == 1
            and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, array,
                                           [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", pointer, context.get_constant(types.int64, 1), "monotonic")
    return types.int64(counter), codegen


@njit(inline="always", cache=True)
def _untranspose_weights(weights_t, out):
    """out[i, a, b] = weights_t[b, i·k + a]: the heads' weights, from the transposed layout."""
    m, k, _ = out.shape
    for i in range(m):
        for a in range(k):
            for b in range(k):
                out[i, a, b] = weights_t[b, i * k + a]


@njit(fastmath=FASTMATH, cache=True)
def _forward_worker(X, theta_t, w_cols, chunks, counter, out, weights_out, store_weights):
    """out[s] = Σ_i A_i (x_s W_i); with ``store_weights`` also weights_out[s] = A."""
    n, k, d = X.shape
    m = theta_t.shape[0]
    x_t = np.empty((d, k))
    queries_t = np.empty((d, m * k))
    weights_t = np.empty((k, m * k))
    values = np.empty((k, m * d))
    col_max = np.empty(m * k)
    col_sum = np.empty(m * k)
    while True:
        chunk = _next_chunk(counter)
        if chunk >= chunks:
            break
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            _attention_t(x, x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            values[:, :] = 0.0
            _mm_body(x, 0, False, w_cols, 0, values, 0, k, d, m * d)
            out_s = out[s]
            out_s[:, :] = 0.0
            for i in range(m):
                _mm_body(weights_t, i * k, True, values, i * d, out_s, 0, k, k, d)
            if store_weights:
                _untranspose_weights(weights_t, weights_out[s])


@njit(fastmath=FASTMATH, cache=True)
def _attention_worker(X, theta_t, chunks, counter, out):
    n, k, d = X.shape
    m = theta_t.shape[0]
    x_t = np.empty((d, k))
    queries_t = np.empty((d, m * k))
    weights_t = np.empty((k, m * k))
    col_max = np.empty(m * k)
    col_sum = np.empty(m * k)
    while True:
        chunk = _next_chunk(counter)
        if chunk >= chunks:
            break
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            _attention_t(X[s], x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            _untranspose_weights(weights_t, out[s])


@njit(fastmath=FASTMATH, cache=True)
def _head_features_worker(X, theta_t, chunks, counter, out):
    n, k, d = X.shape
    m = theta_t.shape[0]
    x_t = np.empty((d, k))
    queries_t = np.empty((d, m * k))
    weights_t = np.empty((k, m * k))
    col_max = np.empty(m * k)
    col_sum = np.empty(m * k)
    while True:
        chunk = _next_chunk(counter)
        if chunk >= chunks:
            break
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            _attention_t(x, x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            for i in range(m):
                features = out[s, i]
                features[:, :] = 0.0
                _mm_t(weights_t, i * k, x, 0, features, 0, k, k, d)


@njit(fastmath=FASTMATH, cache=True)
def _loss_and_grad_worker(X, Y, theta_t, w_cols, chunks, counter, losses, grads):
    """Per chunk c: losses[c] = Σ_s ‖R_s‖², grads[c] = Σ_s x_sᵀ [A_iᵀ R_s | dZ_i x_s]_i.

    R_s = F(x_s) − y_s; dZ_i = A_i ⊙ (dA_i − rowsum(dA_i ⊙ A_i)), dA_i = R_s V_iᵀ.
    grads[c] has shape (d, 2·m·d): columns i·d… accumulate xᵀ A_iᵀ R (→ dW_i),
    columns m·d + i·d… accumulate xᵀ dZ_i x (→ dΘ_i).
    """
    n, k, d = X.shape
    m = theta_t.shape[0]
    md = m * d
    mk = m * k
    x_t = np.empty((d, k))
    queries_t = np.empty((d, mk))
    weights_t = np.empty((k, mk))
    d_logits_t = np.empty((k, mk))
    values = np.empty((k, md))
    residual = np.empty((k, d))
    residual_t = np.empty((d, k))
    features = np.empty((k, 2 * md))
    col_max = np.empty(mk)
    col_sum = np.empty(mk)
    while True:
        chunk = _next_chunk(counter)
        if chunk >= chunks:
            break
        grad = grads[chunk]
        grad[:, :] = 0.0
        loss = 0.0
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            _attention_t(x, x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            values[:, :] = 0.0
            _mm(x, 0, w_cols, 0, values, 0, k, d, md)
            y = Y[s]
            for a in range(k):
                for e in range(d):
                    residual[a, e] = -y[a, e]
            for i in range(m):
                _mm_t(weights_t, i * k, values, i * d, residual, 0, k, k, d)
            for a in range(k):
                for e in range(d):
                    loss += residual[a, e] * residual[a, e]
            _transpose_into(residual, residual_t)
            d_logits_t[:, :] = 0.0
            features[:, :] = 0.0
            for i in range(m):
                # A_iᵀ R → features[:, i d:(i+1) d]
                _mm(weights_t, i * k, residual, 0, features, i * d, k, k, d)
                # dA_iᵀ[b, a] = ⟨V_i[b], R[a]⟩
                _mm(values, i * d, residual_t, 0, d_logits_t, i * k, k, d, k)
            # dZ = A ⊙ (dA − rowsum(dA ⊙ A)); rows of A_i are columns of weights_t
            for a in range(mk):
                col_sum[a] = 0.0
            for b in range(k):
                for a in range(mk):
                    col_sum[a] += d_logits_t[b, a] * weights_t[b, a]
            for b in range(k):
                for a in range(mk):
                    d_logits_t[b, a] = weights_t[b, a] * (d_logits_t[b, a] - col_sum[a])
            for i in range(m):
                # dZ_i x → features[:, m d + i d:…]
                _mm_t(d_logits_t, i * k, x, 0, features, md + i * d, k, k, d)
            _mm_t(x, 0, features, 0, grad, 0, d, k, 2 * md)
        losses[chunk] = loss


@njit(parallel=True, cache=True)
def _forward_parallel(X, theta_t, w_cols, threads, chunks, out, weights_out, store_weights):
    counter = np.zeros(1, np.int64)
    for _ in prange(threads):
        _forward_worker(X, theta_t, w_cols, chunks, counter, out, weights_out, store_weights)


@njit(parallel=True, cache=True)
def _attention_parallel(X, theta_t, threads, chunks, out):
    counter = np.zeros(1, np.int64)
    for _ in prange(threads):
        _attention_worker(X, theta_t, chunks, counter, out)


@njit(parallel=True, cache=True)
def _head_features_parallel(X, theta_t, threads, chunks, out):
    counter = np.zeros(1, np.int64)
    for _ in prange(threads):
        _head_features_worker(X, theta_t, chunks, counter, out)


@njit(parallel=True, cache=True)
def _loss_and_grad_parallel(X, Y, theta_t, w_cols, threads, chunks, losses, grads):
    counter = np.zeros(1, np.int64)
    for _ in prange(threads):
        _loss_and_grad_worker(X, Y, theta_t, w_cols, chunks, counter, losses, grads)


# --------------------------------------------------------------------------
# Python wrappers (inputs already validated)
# --------------------------------------------------------------------------

# The batch is cut into this many chunks (fewer for small n), whatever the
# thread count: enough for load balancing, few enough that the per-chunk
# gradients stay small, and fixed so that results do not depend on the
# number of threads or on the serial/parallel choice.
_CHUNKS = 32


class _Dispatcher:
    """Runs each call on the calling thread or on Numba's thread pool, whichever is faster.

    Starting and joining the pool costs ~10–50 µs on an idle machine, but
    when other jobs occupy every core the join waits until the OS schedules
    each worker: 10–25 ms per call on the shared 2-core machine this was
    tuned on, far more than a small batch takes on one thread.  So the
    dispatcher keeps running estimates, timed on the calls themselves, of
    each kernel's single-thread seconds per multiply-add and of the fixed
    cost of a parallel call, and uses the pool when
    ``cost + work·rate/threads < work·rate``.  While the pool looks slower it
    is re-tried at most every ``retry_seconds``, so the choice follows the
    machine's load.  ``mode`` = "serial" or "parallel" forces a path (tests).
    Either path computes the same chunks in the same order: the results are
    identical.
    """

    default_rate = 1.2e-10   # s per multiply-add on one core (measured: ~1e-10)
    min_parallel = 2e-4      # s: below this predicted serial time, never use the pool
    retry_seconds = 1.0
    smoothing = 0.3

    def __init__(self):
        self.mode = None
        self.rates = {}
        self.pool_cost = 5e-5
        self.retry_at = 0.0

    def run(self, kernel, work, serial, parallel):
        """Call ``serial()`` or ``parallel(threads)`` and time it."""
        threads = numba.get_num_threads()
        rate = self.rates.get(kernel, self.default_rate)
        gain = rate * work * (1.0 - 1.0 / threads)
        if self.mode is not None or threads == 1:
            use_pool = self.mode == "parallel" and threads > 1
        elif rate * work < self.min_parallel:
            use_pool = False
        else:
            use_pool = self.pool_cost < gain or time.perf_counter() >= self.retry_at
        start = time.perf_counter()
        if use_pool:
            parallel(threads)
        else:
            serial()
        elapsed = time.perf_counter() - start
        if use_pool:
            cost = max(elapsed - rate * work / threads, 0.0)
            # Quick to believe a cheap pool (the machine got quiet), smoothed
            # when it is dearer (one unlucky call should not switch paths).
            self.pool_cost = min(cost, self.pool_cost + self.smoothing * (cost - self.pool_cost))
            if self.pool_cost >= gain:
                self.retry_at = start + elapsed + self.retry_seconds
        elif work > 0:
            # At most ×4 per call: a first call that compiles (or loads from
            # the cache) must not make the pool look worth it forever, as
            # serial calls, the only ones that measure the rate, would stop.
            measured = min(elapsed / work, 4.0 * rate)
            self.rates[kernel] = (measured if kernel not in self.rates
                                  else rate + self.smoothing * (measured - rate))


_DISPATCH = _Dispatcher()


def _chunks(n):
    return max(1, min(n, _CHUNKS))


def _counter():
    return np.zeros(1, np.int64)


def _transposed(thetas):
    """(m, d, d) → Θ_iᵀ, C-contiguous."""
    return np.ascontiguousarray(thetas.transpose(0, 2, 1))


def _side_by_side(ws):
    """(m, d, d) → (d, m·d) with column block i = W_i, so that x @ result = [x W_i]_i."""
    m, d, _ = ws.shape
    return np.ascontiguousarray(ws.transpose(1, 0, 2)).reshape(d, m * d)


def _per_head(stacked, m):
    """(d, m·d) → (m, d, d), the inverse of :func:`_side_by_side`."""
    d = stacked.shape[0]
    return np.ascontiguousarray(stacked.reshape(d, m, d).transpose(1, 0, 2))


def forward(X: np.ndarray, thetas: np.ndarray, ws: np.ndarray,
            return_attention: bool = False):
    """F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i for a batch ``X`` of shape (n, k, d).

    With ``return_attention=True`` also returns the weights, shape (n, m, k, k).
    Finite inputs whose logits could overflow raise ``ValueError``
    (:func:`~mhalearn._validation.check_logit_range`).
    """
    check_logit_range(X, thetas)
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty(X.shape)
    weights = np.empty((n, m, k, k) if return_attention else (0, 0, 0, 0))
    theta_t, w_cols = _transposed(thetas), _side_by_side(ws)
    chunks = _chunks(n)
    _DISPATCH.run(
        "forward", 2 * n * m * k * d * (k + d),
        lambda: _forward_worker(X, theta_t, w_cols, chunks, _counter(), out, weights,
                                return_attention),
        lambda threads: _forward_parallel(X, theta_t, w_cols, threads, chunks, out, weights,
                                          return_attention))
    if return_attention:
        return out, weights
    return out


def attention(X: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Attention weights softmax(X Θ_i Xᵀ), shape (n, m, k, k); overflowing logits raise ``ValueError``."""
    check_logit_range(X, thetas)
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty((n, m, k, k))
    theta_t = _transposed(thetas)
    chunks = _chunks(n)
    _DISPATCH.run(
        "attention", n * m * k * d * (k + d),
        lambda: _attention_worker(X, theta_t, chunks, _counter(), out),
        lambda threads: _attention_parallel(X, theta_t, threads, chunks, out))
    return out


def head_features(X: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Per-head features A_i X, shape (n, m, k, d), so that F(X) = Σ_i (A_i X) W_i.

    Given the attention matrices, the projections solve one linear least
    squares problem in these features (variable projection).
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty((n, m, k, d))
    theta_t = _transposed(thetas)
    chunks = _chunks(n)
    _DISPATCH.run(
        "head_features", n * m * k * d * (d + 2 * k),
        lambda: _head_features_worker(X, theta_t, chunks, _counter(), out),
        lambda threads: _head_features_parallel(X, theta_t, threads, chunks, out))
    return out


def loss_and_grad(X: np.ndarray, Y: np.ndarray, thetas: np.ndarray, ws: np.ndarray):
    """Loss ½‖F(X) − Y‖²/n and its gradients with respect to Θ and W.

    Returns ``(loss, dthetas, dws)`` with gradient arrays of shape (m, d, d):
    dW_i = Σ_s x_sᵀ A_iᵀ R_s / n and dΘ_i = Σ_s x_sᵀ dZ_i x_s / n with
    dZ_i = A_i ⊙ (dA − rowsum(dA ⊙ A_i)), dA = R_s (x_s W_i)ᵀ.
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    theta_t, w_cols = _transposed(thetas), _side_by_side(ws)
    chunks = min(_chunks(n), max(1, _BLOCK_ENTRIES // (2 * m * d * d)))
    losses = np.empty(chunks)
    grads = np.empty((chunks, d, 2 * m * d))
    _DISPATCH.run(
        "loss_and_grad", 5 * n * m * k * d * (k + d),
        lambda: _loss_and_grad_worker(X, Y, theta_t, w_cols, chunks, _counter(), losses, grads),
        lambda threads: _loss_and_grad_parallel(X, Y, theta_t, w_cols, threads, chunks, losses,
                                                grads))
    grad = grads.sum(axis=0) / n
    loss = 0.5 * losses.sum() / n
    return loss, _per_head(grad[:, m * d:], m), _per_head(grad[:, :m * d], m)


# ==== Sparse variable creation (Edelman, Goel, Kakade & Zhang) ====
# One softmax attention head over T Boolean tokens (docs/design.md §4.4).  Token t
# of a sequence x ∈ {±1}^T is embedded as z_t = p_t + x_t r_t: a learned
# positional embedding p_t ∈ R^e and a learned bit embedding r_t ∈ R^e of the
# position (so that the token "bit x_t at position t" has its own vector,
# p_t ± r_t).  A learned query q ∈ R^e scores the tokens:
#
#     s_t = ⟨q, z_t⟩ = c_t + x_t α_t,   c = P q,   α = R q,
#     a = softmax(s),   z̄ = Σ_t a_t z_t = A P + (A ⊙ X) R,
#
# and the pooled value z̄ feeds the student's MLP (mhalearn.sparse).  Backward,
# for an upstream gradient g_s = ∂L/∂z̄_s of each sequence:
#
#     ∂L/∂a_t = ⟨g, p_t⟩ + x_t ⟨g, r_t⟩,   ∂L/∂s_t = a_t (∂L/∂a_t − Σ_r a_r ∂L/∂a_r),
#     ∂L/∂c_t = Σ_s ∂L/∂s_st,   ∂L/∂α_t = Σ_s x_st ∂L/∂s_st,
#     ∂L/∂P = Aᵀ G + ∂L/∂c qᵀ,   ∂L/∂R = (A ⊙ X)ᵀ G + ∂L/∂α qᵀ,
#     ∂L/∂q = Pᵀ ∂L/∂c + Rᵀ ∂L/∂α.
#
# As for the layer above, the products with P, R and G are BLAS matrix
# products in the wrappers; the Numba kernels do the per-sequence softmax
# work, O(T) per sequence.

from numba import get_num_threads, set_num_threads  # noqa: E402

# The batch is split into this many chunks, each with its own gradient
# accumulators (no races); a fixed count keeps sums identical whatever the
# number of threads, so fits are reproducible across machines' thread counts.
_BIT_ATTENTION_CHUNKS = 8
# Calls on fewer tokens (n·T) than this run on one thread: a training step on
# a mini-batch takes tens of microseconds, less than waking the pool costs,
# and far less than waiting at its barrier for a descheduled thread when the
# cores are shared.
_BIT_ATTENTION_PARALLEL_TOKENS = 1 << 16


def _launch_bit_attention(kernel, tokens, *args):
    """Run ``kernel(*args)`` on the thread pool, or on one thread when ``tokens`` is small."""
    if tokens >= _BIT_ATTENTION_PARALLEL_TOKENS:
        kernel(*args)
        return
    previous = get_num_threads()
    set_num_threads(1)
    try:
        kernel(*args)
    finally:
        set_num_threads(previous)


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _bit_attention_forward_kernel(X, position_logits, bit_logits, weights):
    """weights[s] = softmax(c + x_s ⊙ α)."""
    n, length = X.shape
    for s in prange(n):
        x = X[s]
        a = weights[s]
        for t in range(length):
            a[t] = position_logits[t] + x[t] * bit_logits[t]
        row_max = a[0]
        for t in range(1, length):
            row_max = max(row_max, a[t])
        for t in range(length):
            a[t] = exp_nonpositive(a[t] - row_max)
        total = 0.0
        for t in range(length):
            total += a[t]
        inv = 1.0 / total
        for t in range(length):
            a[t] *= inv


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _bit_attention_backward_kernel(X, weights, g_dot_p, g_dot_r, d_position_logits, d_bit_logits):
    """Per-chunk sums of ∂L/∂c and ∂L/∂α given ⟨g_s, p_t⟩ and ⟨g_s, r_t⟩, both (n, T)."""
    n, length = X.shape
    chunks = d_position_logits.shape[0]
    for chunk in prange(chunks):
        dc = d_position_logits[chunk]
        d_alpha = d_bit_logits[chunk]
        dc[:] = 0.0
        d_alpha[:] = 0.0
        d_weights = np.empty(length)
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            a = weights[s]
            for t in range(length):
                d_weights[t] = g_dot_p[s, t] + x[t] * g_dot_r[s, t]
            weighted_sum = 0.0
            for t in range(length):
                weighted_sum += a[t] * d_weights[t]
            for t in range(length):
                d_logit = a[t] * (d_weights[t] - weighted_sum)
                dc[t] += d_logit
                d_alpha[t] += d_logit * x[t]


def bit_attention_forward(X: np.ndarray, query: np.ndarray, positions: np.ndarray, bit_embeddings: np.ndarray):
    """Pooled value of one softmax head over Boolean tokens z_t = p_t + x_t r_t.

    Parameters
    ----------
    X : (n, T) array with entries ±1
    query : (e,) array q
    positions, bit_embeddings : (T, e) arrays P and R, rows p_t and r_t

    Returns
    -------
    pooled : (n, e) array, z̄ = Σ_t a_t z_t = A P + (A ⊙ X) R
    weights : (n, T) array A, a = softmax(⟨q, z_t⟩)_t
    """
    n, length = X.shape
    weights = np.empty((n, length))
    _launch_bit_attention(_bit_attention_forward_kernel, X.size, X, np.ascontiguousarray(positions @ query),
                          np.ascontiguousarray(bit_embeddings @ query), weights)
    pooled = weights @ positions
    pooled += (weights * X) @ bit_embeddings
    return pooled, weights


def bit_attention_backward(X: np.ndarray, weights: np.ndarray, query: np.ndarray, positions: np.ndarray,
                           bit_embeddings: np.ndarray, d_pooled: np.ndarray):
    """Gradients of a loss L with respect to (q, P, R) given G = ∂L/∂z̄ of shape (n, e).

    ``weights`` are the attention weights returned by :func:`bit_attention_forward`.
    Returns ``(d_query, d_positions, d_bit_embeddings)`` summed over the batch.
    """
    n, length = X.shape
    chunks = max(1, min(n, _BIT_ATTENTION_CHUNKS))
    d_position_logits = np.empty((chunks, length))
    d_bit_logits = np.empty((chunks, length))
    _launch_bit_attention(_bit_attention_backward_kernel, X.size, X, weights, d_pooled @ positions.T,
                          d_pooled @ bit_embeddings.T, d_position_logits, d_bit_logits)
    dc = d_position_logits.sum(axis=0)
    d_alpha = d_bit_logits.sum(axis=0)
    d_query = positions.T @ dc + bit_embeddings.T @ d_alpha
    d_positions = weights.T @ d_pooled + np.outer(dc, query)
    d_bit_embeddings = (weights * X).T @ d_pooled + np.outer(d_alpha, query)
    return d_query, d_positions, d_bit_embeddings


# ==== Random-feature attention (Fu, Guo, Bai & Mei) ====
# Features of the random-feature attention layer
#     φ_h(x_{0:N}) = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) x_j ∈ R^d,   h = 1..M,
# so that f(x_{0:N}) = Σ_h ⟨v_h, φ_h⟩ is linear in the value vectors v_h.
# (Tokens augmented with a constant coordinate are just tokens of dim d+1.)
# The query projections x_0ᵀ Q_h for all heads and a block of samples are one
# BLAS product; the kernel does the per-sequence M×N logits and the weighted
# key sums.  The layout (samples, d, M) makes the logit loop an axpy over the
# contiguous head axis.

RANDOM_FEATURE_ACTIVATIONS = ("relu", "tanh")


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _attention_random_features_kernel(queries_t, X, activation_code, out):
    """out[s, h] = (1/N) Σ_{j=1..N} σ(Σ_e queries_t[s, e, h] X[s, j, e]) X[s, j].

    ``queries_t`` has shape (n, d, M), ``X`` (n, N+1, d) (row 0, the query,
    is not read), ``out`` (n, M, d); ``activation_code`` indexes
    :data:`RANDOM_FEATURE_ACTIVATIONS`.
    """
    n, d, m = queries_t.shape
    keys_per_query = X.shape[1] - 1
    inv_keys = 1.0 / keys_per_query
    for s in prange(n):
        logits = np.empty(m)
        out_s = out[s]
        out_s[:, :] = 0.0
        for j in range(1, keys_per_query + 1):
            key = X[s, j]
            for h in range(m):
                logits[h] = 0.0
            for e in range(d):
                key_e = key[e]
                query_e = queries_t[s, e]
                for h in range(m):
                    logits[h] += query_e[h] * key_e
            if activation_code == 0:
                for h in range(m):
                    logits[h] = max(logits[h], 0.0) * inv_keys
            else:
                for h in range(m):
                    logits[h] = np.tanh(logits[h]) * inv_keys
            for h in range(m):
                weight = logits[h]
                if weight != 0.0:  # ReLU zeroes about half the heads
                    row = out_s[h]
                    for e in range(d):
                        row[e] += weight * key[e]


def _query_key_stack(query_keys):
    """(M, d, d) → (d, d·M) with column e·M + h holding Q_h[:, e], so x_0 @ result = (x_0ᵀQ_h)_{e,h}."""
    m, d, _ = query_keys.shape
    return np.ascontiguousarray(query_keys.transpose(1, 2, 0).reshape(d, d * m))


def attention_random_features(X: np.ndarray, query_keys: np.ndarray,
                              activation: str = "relu") -> np.ndarray:
    """Random-feature attention features, shape (n, M·d).

    ``X`` has shape (n, N+1, d): row 0 of each sequence is the query x_0 and
    rows 1..N the keys.  ``query_keys`` holds the frozen matrices Q_h, shape
    (M, d, d).  Column block h of the result is
    φ_h = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) x_j.  Memory beyond the result is bounded
    by processing the query projections in blocks of samples.
    """
    n, length, d = X.shape
    m = query_keys.shape[0]
    code = RANDOM_FEATURE_ACTIVATIONS.index(activation)
    out = np.empty((n, m, d))
    stack = _query_key_stack(query_keys)
    block = max(1, _BLOCK_ENTRIES // (m * d))
    for start in range(0, n, block):
        stop = min(n, start + block)
        queries_t = (X[start:stop, 0, :] @ stack).reshape(stop - start, d, m)
        _attention_random_features_kernel(queries_t, X[start:stop], code, out[start:stop])
    return out.reshape(n, m * d)


def mlp_random_features(X: np.ndarray, weights: np.ndarray, offsets: np.ndarray | None = None) -> np.ndarray:
    """Random ReLU features of the flattened input: max(vec(X) W + offsets, 0), shape (n, p).

    ``X`` has shape (n, k, d), ``weights`` shape (k·d, p) and ``offsets``
    (optional) shape (p,).  One BLAS product and an in-place ReLU; no
    per-sequence loop is needed.
    """
    n = X.shape[0]
    out = X.reshape(n, -1) @ weights
    if offsets is not None:
        out += offsets
    np.maximum(out, 0.0, out=out)
    return out


# ==== Sculpting learner (Chen & Li), phase 5: scoring the net's candidate tuples ====

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


@njit(parallel=True, cache=True)
def _score_candidates_kernel(gram, cross, candidates, ridge, reductions):
    points, d, _, _ = gram.shape
    count, m = candidates.shape
    size = m * d
    for c in prange(count):
        matrix = np.empty((size, size))
        rhs = np.empty((size, d))
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


def score_candidates(gram: np.ndarray, cross: np.ndarray, candidates: np.ndarray,
                     ridge: float = 1e-9) -> np.ndarray:
    """Least-squares fit reduction of every candidate tuple of heads.

    For net points p with features Φ_p (rows × d), ``gram[p, :, q, :]`` =
    Φ_pᵀ Φ_q and ``cross[p]`` = Φ_pᵀ Y.  A candidate (p_1, …, p_m) explains
    ‖Y‖² − trace(Bᵀ H⁻¹ B) of the labels' energy with H, B its blocks: the
    residual of W solved by least squares (variable projection), without
    forming W.  Returns the reductions (−1 where H is not positive definite).
    """
    reductions = np.empty(candidates.shape[0])
    _score_candidates_kernel(gram, cross, np.ascontiguousarray(candidates, dtype=np.int64),
                             ridge, reductions)
    return reductions
