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


# ==== Sparse variable creation (Edelman, Goel, Kakade & Zhang) ====
# One softmax attention head over T Boolean tokens (DESIGN.md §4.4).  Token t
# of a sequence x ∈ {±1}^T is embedded as z_t = x_t u + p_t (a bit embedding
# u ∈ R^e shared by all positions plus a learned positional embedding
# p_t ∈ R^e); a learned query q ∈ R^e scores the tokens,
#
#     s_t = ⟨q, z_t⟩ = α x_t + c_t,   α = ⟨q, u⟩,   c = P q,
#     a = softmax(s),   z̄ = Σ_t a_t z_t = (Σ_t a_t x_t) u + Σ_t a_t p_t,
#
# and the pooled value z̄ feeds the student's MLP (mhalearn.sparse).  α and c
# are one dot product and one matrix–vector product, so the kernels do O(T e)
# work per sequence.  Backward, for an upstream gradient g = ∂L/∂z̄:
#
#     ∂L/∂a_t = x_t ⟨g, u⟩ + ⟨g, p_t⟩,   ∂L/∂s_t = a_t (∂L/∂a_t − Σ_r a_r ∂L/∂a_r),
#     ∂L/∂α = Σ_t x_t ∂L/∂s_t,   ∂L/∂c_t = ∂L/∂s_t,
#     ∂L/∂u ∋ (Σ_t a_t x_t) g,   ∂L/∂p_t ∋ a_t g   (value path),
#
# summed over the batch; the wrapper adds the query path
# ∂L/∂q = ∂L/∂α u + Pᵀ ∂L/∂c, ∂L/∂u += ∂L/∂α q, ∂L/∂P += ∂L/∂c qᵀ.

# The batch is split into this many chunks, each with its own gradient
# accumulators (no races); a fixed count keeps sums identical whatever the
# number of threads, so fits are reproducible across machines' thread counts.
_BIT_ATTENTION_CHUNKS = 8


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _bit_attention_forward_kernel(X, alpha, position_logits, positions, bit_embedding, weights, pooled):
    """weights[s] = softmax(α x_s + c); pooled[s] = (Σ_t a_t x_st) u + Σ_t a_t p_t."""
    n, length = X.shape
    dim = positions.shape[1]
    for s in prange(n):
        x = X[s]
        a = weights[s]
        row_max = alpha * x[0] + position_logits[0]
        for t in range(length):
            a[t] = alpha * x[t] + position_logits[t]
            row_max = max(row_max, a[t])
        total = 0.0
        for t in range(length):
            a[t] = exp_nonpositive(a[t] - row_max)
            total += a[t]
        inv = 1.0 / total
        out = pooled[s]
        out[:] = 0.0
        bit_mean = 0.0
        for t in range(length):
            w = a[t] * inv
            a[t] = w
            bit_mean += w * x[t]
            for e in range(dim):
                out[e] += w * positions[t, e]
        for e in range(dim):
            out[e] += bit_mean * bit_embedding[e]


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _bit_attention_backward_kernel(X, weights, positions, bit_embedding, d_pooled,
                                   d_positions, d_bit_embedding, d_alpha, d_position_logits):
    """Per-chunk sums of the value-path gradients and of ∂L/∂α, ∂L/∂c (see the section header)."""
    n, length = X.shape
    dim = positions.shape[1]
    chunks = d_positions.shape[0]
    for chunk in prange(chunks):
        dp = d_positions[chunk]
        du = d_bit_embedding[chunk]
        dc = d_position_logits[chunk]
        dp[:, :] = 0.0
        du[:] = 0.0
        dc[:] = 0.0
        d_alpha_sum = 0.0
        d_weights = np.empty(length)
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            a = weights[s]
            g = d_pooled[s]
            g_dot_u = 0.0
            for e in range(dim):
                g_dot_u += g[e] * bit_embedding[e]
            bit_mean = 0.0
            weighted_sum = 0.0
            for t in range(length):
                w = a[t]
                g_dot_p = 0.0
                for e in range(dim):
                    g_dot_p += g[e] * positions[t, e]
                    dp[t, e] += w * g[e]
                d_weights[t] = x[t] * g_dot_u + g_dot_p
                weighted_sum += w * d_weights[t]
                bit_mean += w * x[t]
            for e in range(dim):
                du[e] += bit_mean * g[e]
            for t in range(length):
                d_logit = a[t] * (d_weights[t] - weighted_sum)
                d_alpha_sum += d_logit * x[t]
                dc[t] += d_logit
        d_alpha[chunk] = d_alpha_sum


def bit_attention_forward(X: np.ndarray, query: np.ndarray, bit_embedding: np.ndarray,
                          positions: np.ndarray):
    """Pooled value of one softmax head over Boolean tokens z_t = x_t u + p_t.

    Parameters
    ----------
    X : (n, T) array with entries ±1
    query, bit_embedding : (e,) arrays q and u
    positions : (T, e) array P, row t the positional embedding p_t

    Returns
    -------
    pooled : (n, e) array, z̄ = Σ_t a_t z_t
    weights : (n, T) array, a = softmax(⟨q, z_t⟩)_t
    """
    n, length = X.shape
    alpha = float(query @ bit_embedding)
    position_logits = np.ascontiguousarray(positions @ query)
    weights = np.empty((n, length))
    pooled = np.empty((n, positions.shape[1]))
    _bit_attention_forward_kernel(X, alpha, position_logits, positions, bit_embedding, weights, pooled)
    return pooled, weights


def bit_attention_backward(X: np.ndarray, weights: np.ndarray, query: np.ndarray,
                           bit_embedding: np.ndarray, positions: np.ndarray, d_pooled: np.ndarray):
    """Gradients of a loss L with respect to (q, u, P) given g = ∂L/∂z̄ of shape (n, e).

    ``weights`` are the attention weights returned by :func:`bit_attention_forward`.
    Returns ``(d_query, d_bit_embedding, d_positions)`` summed over the batch.
    """
    n, length = X.shape
    dim = positions.shape[1]
    chunks = max(1, min(n, _BIT_ATTENTION_CHUNKS))
    d_positions = np.empty((chunks, length, dim))
    d_bit_embedding = np.empty((chunks, dim))
    d_alpha = np.empty(chunks)
    d_position_logits = np.empty((chunks, length))
    _bit_attention_backward_kernel(X, weights, positions, bit_embedding, np.ascontiguousarray(d_pooled),
                                   d_positions, d_bit_embedding, d_alpha, d_position_logits)
    d_alpha_total = d_alpha.sum()
    d_logits_total = d_position_logits.sum(axis=0)
    d_query = d_alpha_total * bit_embedding + positions.T @ d_logits_total
    d_u = d_bit_embedding.sum(axis=0) + d_alpha_total * query
    d_p = d_positions.sum(axis=0) + np.outer(d_logits_total, query)
    return d_query, d_u, d_p


# ==== Random-feature attention (Fu, Guo, Bai & Mei) ====
# Features of the random-feature attention layer
#     φ_h(x_{0:N}) = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) x̃_j,   h = 1..M,
# with x̃_j = x_j, or [x_j; 1] when the values carry a bias, so that
# f(x_{0:N}) = Σ_h ⟨v_h, φ_h⟩ is linear in the value vectors v_h.
# The query projections x_0ᵀ Q_h for all heads and a block of samples are one
# BLAS product; the kernel does the per-sequence M×N logits and the weighted
# key sums.  The layout (samples, d, M) makes the logit loop an axpy over the
# contiguous head axis.

RANDOM_FEATURE_ACTIVATIONS = ("relu", "tanh")


@njit(parallel=True, fastmath=FASTMATH, cache=True)
def _attention_random_features_kernel(queries_t, keys, activation_code, out):
    """out[s, h, :d] = (1/N) Σ_j σ(Σ_e queries_t[s, e, h] keys[s, j, e]) keys[s, j].

    ``queries_t`` has shape (n, d, M), ``keys`` (n, N, d) and ``out``
    (n, M, d) or (n, M, d + 1); in the latter case ``out[s, h, d]`` receives
    (1/N) Σ_j σ(·), the feature of a value bias.  ``activation_code`` indexes
    :data:`RANDOM_FEATURE_ACTIVATIONS`.
    """
    n, d, m = queries_t.shape
    keys_per_query = keys.shape[1]
    inv_keys = 1.0 / keys_per_query
    value_bias = out.shape[2] > d
    for s in prange(n):
        logits = np.empty(m)
        out_s = out[s]
        out_s[:, :] = 0.0
        for j in range(keys_per_query):
            key = keys[s, j]
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
                    if value_bias:
                        row[d] += weight


def _query_key_stack(query_keys):
    """(M, d, d) → (d, d·M) with column e·M + h holding Q_h[:, e], so x_0 @ result = (x_0ᵀQ_h)_{e,h}."""
    m, d, _ = query_keys.shape
    return np.ascontiguousarray(query_keys.transpose(1, 2, 0).reshape(d, d * m))


def attention_random_features(X: np.ndarray, query_keys: np.ndarray, activation: str = "relu",
                              value_bias: bool = False) -> np.ndarray:
    """Random-feature attention features, shape (n, M·d) or (n, M·(d+1)).

    ``X`` has shape (n, N+1, d): row 0 of each sequence is the query x_0 and
    rows 1..N the keys.  ``query_keys`` holds the frozen matrices Q_h, shape
    (M, d, d).  Column block h of the result is
    φ_h = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) x̃_j with x̃_j = x_j, or [x_j; 1] when
    ``value_bias``.  Memory beyond the result is bounded by processing the
    query projections in blocks of samples.
    """
    n, length, d = X.shape
    m = query_keys.shape[0]
    code = RANDOM_FEATURE_ACTIVATIONS.index(activation)
    width = d + 1 if value_bias else d
    out = np.empty((n, m, width))
    stack = _query_key_stack(query_keys)
    block = max(1, _BLOCK_ENTRIES // (m * d))
    for start in range(0, n, block):
        stop = min(n, start + block)
        queries_t = (X[start:stop, 0, :] @ stack).reshape(stop - start, d, m)
        keys = np.ascontiguousarray(X[start:stop, 1:, :])
        _attention_random_features_kernel(queries_t, keys, code, out[start:stop])
    return out.reshape(n, m * width)


def mlp_random_features(X: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Random ReLU features of the flattened input: max(vec(X) W, 0), shape (n, p).

    ``X`` has shape (n, k, d) and ``weights`` shape (k·d, p).  One BLAS
    product and an in-place ReLU; no per-sequence loop is needed.
    """
    n = X.shape[0]
    out = X.reshape(n, -1) @ weights
    np.maximum(out, 0.0, out=out)
    return out


# ==== Sculpting learner (Chen & Li): proxy-attention decoding, net scoring ====

@njit(inline="always", cache=True)
def _project_to_simplex(v, sorted_scratch, out):
    """Euclidean projection of v onto the probability simplex (Duchi et al., 2008)."""
    k = v.shape[0]
    for j in range(k):  # insertion sort, descending: k is a handful of tokens
        value = v[j]
        position = j
        while position > 0 and sorted_scratch[position - 1] < value:
            sorted_scratch[position] = sorted_scratch[position - 1]
            position -= 1
        sorted_scratch[position] = value
    cumulative = 0.0
    threshold = 0.0
    for j in range(k):
        cumulative += sorted_scratch[j]
        candidate = (cumulative - 1.0) / (j + 1)
        if sorted_scratch[j] - candidate > 0.0:
            threshold = candidate
    for j in range(k):
        out[j] = max(v[j] - threshold, 0.0)


@njit(parallel=True, cache=True)
def _decode_simplex_kernel(values, targets, iterations, weights, residuals):
    n, k, d = values.shape
    for s in prange(n):
        V = values[s]
        gram = V @ V.T
        lipschitz = 0.0
        for a in range(k):
            row = 0.0
            for b in range(k):
                row += abs(gram[a, b])
            lipschitz = max(lipschitz, row)
        step = 1.0 / max(lipschitz, 1e-300)
        linear = np.empty(k)
        current = np.empty(k)
        previous = np.empty(k)
        momentum_point = np.empty(k)
        trial = np.empty(k)
        scratch = np.empty(k)
        for row_index in range(k):
            y = targets[s, row_index]
            for a in range(k):
                total = 0.0
                for e in range(d):
                    total += V[a, e] * y[e]
                linear[a] = total
                current[a] = 1.0 / k
                momentum_point[a] = 1.0 / k
            t = 1.0
            for _ in range(iterations):
                for a in range(k):
                    grad = -linear[a]
                    for b in range(k):
                        grad += gram[a, b] * momentum_point[b]
                    trial[a] = momentum_point[a] - step * grad
                previous[:] = current
                _project_to_simplex(trial, scratch, current)
                t_next = 0.5 * (1.0 + np.sqrt(1.0 + 4.0 * t * t))
                factor = (t - 1.0) / t_next
                for a in range(k):
                    momentum_point[a] = current[a] + factor * (current[a] - previous[a])
                t = t_next
            squared = 0.0
            for e in range(d):
                fitted = 0.0
                for a in range(k):
                    fitted += current[a] * V[a, e]
                squared += (fitted - y[e]) ** 2
            residuals[s, row_index] = np.sqrt(squared)
            weights[s, row_index] = current


def decode_simplex(values: np.ndarray, targets: np.ndarray, iterations: int = 300):
    """Proxy attention rows: argmin over the simplex of ‖âᵀ V_s − y_{s,ℓ}‖.

    ``values`` (n, k, d) holds V_s = X_s Ŵ_Σ, ``targets`` (n, k, d) the output
    rows.  Solved by FISTA with exact simplex projections, every row of every
    sequence in parallel.  Returns weights (n, k, k) and residual norms (n, k).
    """
    n, k, _ = values.shape
    weights = np.empty((n, k, k))
    residuals = np.empty((n, k))
    _decode_simplex_kernel(values, targets, iterations, weights, residuals)
    return weights, residuals


@njit(inline="always", cache=True)
def _cholesky_reduction(matrix, rhs, size, cols):
    """trace(rhsᵀ matrix⁻¹ rhs) by an in-place Cholesky factorisation (−1 if not PD)."""
    for j in range(size):
        diagonal = matrix[j, j]
        for t in range(j):
            diagonal -= matrix[j, t] * matrix[j, t]
        if diagonal <= 0.0:
            return -1.0
        diagonal = np.sqrt(diagonal)
        matrix[j, j] = diagonal
        for r in range(j + 1, size):
            value = matrix[r, j]
            for t in range(j):
                value -= matrix[r, t] * matrix[j, t]
            matrix[r, j] = value / diagonal
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
