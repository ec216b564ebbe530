"""Numba kernels: every hot loop of mhalearn (DESIGN.md §3).

All kernels take C-contiguous float64 arrays, are compiled with
``cache=True`` and run in parallel over the batch.  The thin Python wrappers
at the bottom of each section are what the rest of the package calls; they
assume validated inputs (validation happens once, in the public API).

Conventions: a batch ``X`` has shape ``(n, k, d)``; ``thetas`` and ``ws`` have
shape ``(m, d, d)``; head ``i`` computes ``softmax(X Θ_i Xᵀ) X W_i`` with a
row-wise softmax made stable by subtracting the row maximum.

The pure-NumPy statement of the same maths lives in ``tests/reference.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.extending import intrinsic

# Contraction lets LLVM fuse multiply-adds.  Reassociation is deliberately
# off: it would undo the rounding trick in ``exp_nonpositive`` and the
# Cody–Waite split of ln 2.  Loops are written so that the inner loop is an
# axpy over a contiguous axis, which vectorises without reassociation.
FASTMATH = {"contract", "arcp", "nsz"}

# Token projections X Θ_i and X W_i are done for all heads and a block of
# samples as one BLAS matrix product (the bulk of the FLOPs); the Numba
# kernels do the per-sequence k×k attention work.  Blocks bound the memory
# of the (samples, k, m, d) intermediates.
_BLOCK_ENTRIES = 1 << 22


# --------------------------------------------------------------------------
# A vectorisable exp for the softmax
# --------------------------------------------------------------------------
# LLVM here has no vector math library (Numba's SVML is off), so np.exp stays
# a scalar libm call and dominates the softmax.  This exp only ever sees
# shifted logits x <= 0, which makes a branch-free version easy:
# exp(x) = 2^n · exp(r), |r| <= ln2/2, exp(r) by a degree-13 Taylor polynomial
# (relative error ~2e-16), 2^n assembled in the exponent bits.

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


@njit(inline="always", fastmath=FASTMATH, cache=True)
def exp_nonpositive(x):
    """exp(x) for x <= 0, branch-free so that loops over it vectorise."""
    clamped = max(x, _EXP_FLOOR)
    n_float = np.rint(clamped * _LOG2E)
    r = clamped - n_float * _LN2_HI - n_float * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    n = _float_to_bits(n_float + _INTEGER_SHIFT) - _INTEGER_SHIFT_BITS
    return p * _bits_to_float((n + 1023) << 52) * (x >= _EXP_FLOOR)


# --------------------------------------------------------------------------
# Per-sequence attention rows
# --------------------------------------------------------------------------

@njit(inline="always", fastmath=FASTMATH, cache=True)
def _transpose_into(x, out):
    rows, cols = x.shape
    for r in range(rows):
        for c in range(cols):
            out[c, r] = x[r, c]


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _softmax_row(query_row, x_t, weights_row):
    """weights_row = softmax over b of ⟨query_row, x_b⟩ (query_row = x_a Θ_i, x_t = xᵀ)."""
    d, k = x_t.shape
    for b in range(k):
        weights_row[b] = 0.0
    for e in range(d):
        q = query_row[e]
        for b in range(k):
            weights_row[b] += q * x_t[e, b]
    row_max = weights_row[0]
    for b in range(1, k):
        row_max = max(row_max, weights_row[b])
    for b in range(k):
        weights_row[b] = exp_nonpositive(weights_row[b] - row_max)
    total = 0.0
    for b in range(k):
        total += weights_row[b]
    inv = 1.0 / total
    for b in range(k):
        weights_row[b] *= inv


@njit(inline="always", fastmath=FASTMATH, cache=True)
def _add_weighted_rows(weights_row, rows, out_row):
    """out_row += Σ_b weights_row[b] · rows[b]."""
    k, d = rows.shape
    for b in range(k):
        w = weights_row[b]
        for e in range(d):
            out_row[e] += w * rows[b, e]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _forward_kernel(X, queries, values, out):
    """out[s] = Σ_i softmax(queries[s, :, i] x_sᵀ) values[s, :, i]."""
    n, k, d = X.shape
    m = queries.shape[2]
    for s in prange(n):
        x_t = np.empty((d, k))
        _transpose_into(X[s], x_t)
        weights = np.empty(k)
        out_s = out[s]
        out_s[:, :] = 0.0
        for i in range(m):
            values_i = values[s, :, i, :]
            for a in range(k):
                _softmax_row(queries[s, a, i], x_t, weights)
                _add_weighted_rows(weights, values_i, out_s[a])


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _attention_kernel(X, queries, out):
    n, k, d = X.shape
    m = queries.shape[2]
    for s in prange(n):
        x_t = np.empty((d, k))
        _transpose_into(X[s], x_t)
        for i in range(m):
            for a in range(k):
                _softmax_row(queries[s, a, i], x_t, out[s, i, a])


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _head_features_kernel(X, queries, out):
    n, k, d = X.shape
    m = queries.shape[2]
    for s in prange(n):
        x_t = np.empty((d, k))
        _transpose_into(X[s], x_t)
        weights = np.empty(k)
        for i in range(m):
            features = out[s, i]
            features[:, :] = 0.0
            for a in range(k):
                _softmax_row(queries[s, a, i], x_t, weights)
                _add_weighted_rows(weights, X[s], features[a])


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _loss_and_grad_kernel(X, Y, queries, values, losses, d_values, d_queries_x):
    """Per-sequence backward pass.

    Writes the squared residual of each sequence into ``losses``, the
    gradient with respect to the values X W_i into ``d_values`` (A_iᵀ R) and
    dZ_i x into ``d_queries_x``, where dZ_i = A ⊙ (dA − rowsum(dA ⊙ A)) and
    dA = R V_iᵀ; the caller contracts both with Xᵀ in one BLAS product.
    """
    n, k, d = X.shape
    m = queries.shape[2]
    for s in prange(n):
        x = X[s]
        x_t = np.empty((d, k))
        _transpose_into(x, x_t)
        values_t = np.empty((d, k))
        weights = np.empty((m, k, k))
        residual = np.empty((k, d))
        d_logits = np.empty(k)
        for a in range(k):
            for e in range(d):
                residual[a, e] = -Y[s, a, e]
        for i in range(m):
            values_i = values[s, :, i, :]
            for a in range(k):
                _softmax_row(queries[s, a, i], x_t, weights[i, a])
                _add_weighted_rows(weights[i, a], values_i, residual[a])
        loss = 0.0
        for a in range(k):
            for e in range(d):
                loss += residual[a, e] * residual[a, e]
        losses[s] = loss
        for i in range(m):
            A = weights[i]
            _transpose_into(values[s, :, i, :], values_t)
            dv = d_values[s, :, i, :]
            dqx = d_queries_x[s, :, i, :]
            dv[:, :] = 0.0
            dqx[:, :] = 0.0
            for a in range(k):
                # dV_i += A[a]ᵀ ⊗ R[a]
                for b in range(k):
                    w = A[a, b]
                    for e in range(d):
                        dv[b, e] += w * residual[a, e]
                # dA[a] = R[a] V_iᵀ ; dZ[a] = A[a] ⊙ (dA[a] − ⟨dA[a], A[a]⟩)
                for b in range(k):
                    d_logits[b] = 0.0
                for e in range(d):
                    r = residual[a, e]
                    for b in range(k):
                        d_logits[b] += r * values_t[e, b]
                row_sum = 0.0
                for b in range(k):
                    row_sum += d_logits[b] * A[a, b]
                for b in range(k):
                    d_logits[b] = A[a, b] * (d_logits[b] - row_sum)
                _add_weighted_rows(d_logits, x, dqx[a])


# --------------------------------------------------------------------------
# Python wrappers (inputs already validated)
# --------------------------------------------------------------------------

def _stacked(matrices):
    """(m, d, d) → (d, m·d) so that X @ result gives every head's X M_i at once."""
    m, d, _ = matrices.shape
    return np.ascontiguousarray(matrices.transpose(1, 0, 2).reshape(d, m * d))


def _unstacked(stacked, m):
    """(d, m·d) → (m, d, d), the inverse of :func:`_stacked`."""
    d = stacked.shape[0]
    return stacked.reshape(d, m, d).transpose(1, 0, 2)


def _blocks(n, k, m, d):
    size = max(1, _BLOCK_ENTRIES // (k * m * d))
    return [(start, min(n, start + size)) for start in range(0, n, size)]


def _project(X_block, stacked, m):
    """(s, k, d) @ (d, m·d) → (s, k, m, d): every head's projection of every token."""
    s, k, d = X_block.shape
    return (X_block.reshape(s * k, d) @ stacked).reshape(s, k, m, d)


def forward(X: np.ndarray, thetas: np.ndarray, ws: np.ndarray,
            return_attention: bool = False):
    """F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i for a batch ``X`` of shape (n, k, d).

    With ``return_attention=True`` also returns the weights, shape (n, m, k, k).
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty(X.shape)
    theta_stack, w_stack = _stacked(thetas), _stacked(ws)
    for start, stop in _blocks(n, k, m, d):
        block = X[start:stop]
        _forward_kernel(block, _project(block, theta_stack, m), _project(block, w_stack, m),
                        out[start:stop])
    if return_attention:
        return out, attention(X, thetas)
    return out


def attention(X: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Attention weights softmax(X Θ_i Xᵀ), shape (n, m, k, k)."""
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty((n, m, k, k))
    theta_stack = _stacked(thetas)
    for start, stop in _blocks(n, k, m, d):
        block = X[start:stop]
        _attention_kernel(block, _project(block, theta_stack, m), out[start:stop])
    return out


def head_features(X: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Per-head features A_i X, shape (n, m, k, d), so that F(X) = Σ_i (A_i X) W_i.

    Given the attention matrices, the projections solve one linear least
    squares problem in these features (variable projection).
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty((n, m, k, d))
    theta_stack = _stacked(thetas)
    for start, stop in _blocks(n, k, m, d):
        block = X[start:stop]
        _head_features_kernel(block, _project(block, theta_stack, m), out[start:stop])
    return out


def loss_and_grad(X: np.ndarray, Y: np.ndarray, thetas: np.ndarray, ws: np.ndarray):
    """Loss ½‖F(X) − Y‖²/n and its gradients with respect to Θ and W.

    Returns ``(loss, dthetas, dws)`` with gradient arrays of shape (m, d, d):
    dW_i = Σ_s x_sᵀ A_iᵀ R_s / n and dΘ_i = Σ_s x_sᵀ dZ_i x_s / n with
    dZ_i = A_i ⊙ (dA − rowsum(dA ⊙ A_i)), dA = R_s (x_s W_i)ᵀ.
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    theta_stack, w_stack = _stacked(thetas), _stacked(ws)
    loss = 0.0
    d_theta_stack = np.zeros((d, m * d))
    d_w_stack = np.zeros((d, m * d))
    for start, stop in _blocks(n, k, m, d):
        block = X[start:stop]
        size = stop - start
        losses = np.empty(size)
        d_values = np.empty((size, k, m, d))
        d_queries_x = np.empty((size, k, m, d))
        _loss_and_grad_kernel(block, Y[start:stop], _project(block, theta_stack, m),
                              _project(block, w_stack, m), losses, d_values, d_queries_x)
        flat_T = block.reshape(size * k, d).T
        d_w_stack += flat_T @ d_values.reshape(size * k, m * d)
        d_theta_stack += flat_T @ d_queries_x.reshape(size * k, m * d)
        loss += losses.sum()
    return 0.5 * loss / n, _unstacked(d_theta_stack, m) / n, _unstacked(d_w_stack, m) / n
