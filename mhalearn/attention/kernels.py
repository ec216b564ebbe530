"""Numba kernels of the attention layer F(X) = Σ_i softmax(X Θ_i Xᵀ) X W_i ([design: kernels]).

The forward pass (:func:`forward`, with the attention weights on request),
the attention weights alone (:func:`attention`), the per-head features
A_i X that make W given Θ one least-squares problem (:func:`head_features`),
and the loss ½‖F(X) − Y‖²/n with its gradients (:func:`loss_and_grad`).
Every learner of the layer (:mod:`mhalearn.learners`) and
:class:`~mhalearn.MultiHeadAttention` call these.

Each kernel is a *worker* that processes chunks of the batch claimed from a
shared counter, plus its thread driver; the shared dispatcher of
:mod:`mhalearn._numba` runs the worker on the calling thread or, through the
driver, on an explicit number of threads (same chunks, same order, same bits
either way).  The wrappers at the bottom are what the rest of the package calls;
they assume validated inputs (validation happens once, in the public API).

Conventions: a batch ``X`` has shape ``(n, k, d)``; ``thetas`` and ``ws`` have
shape ``(m, d, d)``; head ``i`` computes ``softmax(X Θ_i Xᵀ) X W_i`` with a
row-wise softmax made stable by subtracting the row maximum.

The pure-NumPy statement of the same maths lives in :mod:`mhalearn.attention.reference`.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._exp import exp_nonpositive
from .._numba import (
    BLOCK_ENTRIES,
    DISPATCH,
    FASTMATH,
    chunk_count,
    mm,
    mm_body,
    mm_t,
    new_counter,
    next_chunk,
    thread_driver,
    transpose_into,
)
from .._validation import check_logit_range
from .forward_kernel import LANES, forward_worker, stacked_projections

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
    transpose_into(x, x_t)
    queries_t[:, :] = 0.0
    for i in range(m):
        mm_body(theta_t[i], 0, False, x_t, 0, queries_t, i * k, d, d, k)
    weights_t[:, :] = 0.0
    mm_body(x, 0, False, queries_t, 0, weights_t, 0, k, d, m * k)
    _softmax_columns(weights_t, col_max, col_sum)


# --------------------------------------------------------------------------
# Workers and their thread drivers
# --------------------------------------------------------------------------

@njit(inline="always", cache=True)
def _attention_scratch(X, theta_t):
    """A worker's scratch for :func:`_attention_t`: ``x_t, queries_t, weights_t, col_max, col_sum``."""
    _, k, d = X.shape
    m = theta_t.shape[0]
    return np.empty((d, k)), np.empty((d, m * k)), np.empty((k, m * k)), np.empty(m * k), np.empty(m * k)


@njit(inline="always", cache=True)
def _untranspose_weights(weights_t, out):
    """out[i, a, b] = weights_t[b, i·k + a]: the heads' weights, from the transposed layout."""
    m, k, _ = out.shape
    for i in range(m):
        for a in range(k):
            for b in range(k):
                out[i, a, b] = weights_t[b, i * k + a]


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _attention_worker(X, theta_t, chunks, counter, out):
    n = X.shape[0]
    x_t, queries_t, weights_t, col_max, col_sum = _attention_scratch(X, theta_t)
    chunk = next_chunk(counter)
    while chunk < chunks:
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            _attention_t(X[s], x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            _untranspose_weights(weights_t, out[s])
        chunk = next_chunk(counter)


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _head_features_worker(X, theta_t, chunks, counter, out):
    n, k, d = X.shape
    m = theta_t.shape[0]
    x_t, queries_t, weights_t, col_max, col_sum = _attention_scratch(X, theta_t)
    chunk = next_chunk(counter)
    while chunk < chunks:
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            _attention_t(x, x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            features = out[s]  # (k, m·d): head i in columns i·d…
            features[:, :] = 0.0
            for i in range(m):
                mm_t(weights_t, i * k, x, 0, features, i * d, k, k, d)
        chunk = next_chunk(counter)


@njit(fastmath=FASTMATH, cache=True, nogil=True)
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
    x_t, queries_t, weights_t, col_max, col_sum = _attention_scratch(X, theta_t)
    d_logits_t = np.empty((k, mk))
    values = np.empty((k, md))
    residual = np.empty((k, d))
    residual_t = np.empty((d, k))
    features = np.empty((k, 2 * md))
    chunk = next_chunk(counter)
    while chunk < chunks:
        grad = grads[chunk]
        grad[:, :] = 0.0
        loss = 0.0
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
            x = X[s]
            _attention_t(x, x_t, theta_t, queries_t, weights_t, col_max, col_sum)
            values[:, :] = 0.0
            mm(x, 0, w_cols, 0, values, 0, k, d, md)
            y = Y[s]
            for a in range(k):
                for e in range(d):
                    residual[a, e] = -y[a, e]
            for i in range(m):
                mm_t(weights_t, i * k, values, i * d, residual, 0, k, k, d)
            for a in range(k):
                for e in range(d):
                    loss += residual[a, e] * residual[a, e]
            transpose_into(residual, residual_t)
            d_logits_t[:, :] = 0.0
            features[:, :] = 0.0
            for i in range(m):
                # A_iᵀ R → features[:, i d:(i+1) d]
                mm(weights_t, i * k, residual, 0, features, i * d, k, k, d)
                # dA_iᵀ[b, a] = ⟨V_i[b], R[a]⟩
                mm(values, i * d, residual_t, 0, d_logits_t, i * k, k, d, k)
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
                mm_t(d_logits_t, i * k, x, 0, features, md + i * d, k, k, d)
            mm_t(x, 0, features, 0, grad, 0, d, k, 2 * md)
        losses[chunk] = loss
        chunk = next_chunk(counter)


_forward_parallel = thread_driver(forward_worker)
_attention_parallel = thread_driver(_attention_worker)
_head_features_parallel = thread_driver(_head_features_worker)
_loss_and_grad_parallel = thread_driver(_loss_and_grad_worker)


# --------------------------------------------------------------------------
# Python wrappers (inputs already validated)
# --------------------------------------------------------------------------

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
    n, k, _ = X.shape
    out = np.empty(X.shape)
    weights = np.empty((n, thetas.shape[0], k, k)) if return_attention else None
    forward_into(np.ascontiguousarray(X, dtype=np.float64), thetas, ws, out, weights)
    if return_attention:
        return out, weights
    return out


def forward_into(X: np.ndarray, thetas: np.ndarray, ws: np.ndarray, out: np.ndarray,
                 weights: np.ndarray | None = None) -> None:
    """:func:`forward` into ``out`` (and the attention weights into ``weights``, shape (n, m, k, k), when given).

    For callers that hold the arrays already: ``X`` and ``out`` C-contiguous
    float64 of one shape (n, k, d), and logits known to stay finite (the
    check :func:`forward` makes is the caller's).
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    store_weights = weights is not None
    weights = np.empty((0, 0, 0, 0)) if weights is None else weights
    # Chunks of at least LANES sequences: a shorter chunk would fill most of a step's lanes with padding.
    DISPATCH.run("forward", 2 * n * m * k * d * (k + d), forward_worker, _forward_parallel, X,
                 stacked_projections(thetas, ws), chunk_count(-(-n // LANES)), new_counter(), out, weights,
                 store_weights)


def attention(X: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Attention weights softmax(X Θ_i Xᵀ), shape (n, m, k, k); overflowing logits raise ``ValueError``."""
    check_logit_range(X, thetas)
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty((n, m, k, k))
    theta_t = _transposed(thetas)
    chunks = chunk_count(n)
    DISPATCH.run("attention", n * m * k * d * (k + d), _attention_worker, _attention_parallel, X, theta_t,
                 chunks, new_counter(), out)
    return out


def head_features(X: np.ndarray, thetas: np.ndarray) -> np.ndarray:
    """Per-head features A_i X, shape (n, m, k, d), so that F(X) = Σ_i (A_i X) W_i.

    Given the attention matrices, the projections solve one linear least
    squares problem in these features (variable projection).  The result is
    a view of a C-contiguous (n, k, m, d) array: the least-squares design
    ``features.transpose(0, 2, 1, 3).reshape(n * k, m * d)`` is then a view
    too, not a copy.
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.empty((n, k, m * d))
    theta_t = _transposed(thetas)
    chunks = chunk_count(n)
    DISPATCH.run("head_features", n * m * k * d * (d + 2 * k), _head_features_worker, _head_features_parallel,
                 X, theta_t, chunks, new_counter(), out)
    return out.reshape(n, k, m, d).transpose(0, 2, 1, 3)


def loss_and_grad(X: np.ndarray, Y: np.ndarray, thetas: np.ndarray, ws: np.ndarray):
    """Loss ½‖F(X) − Y‖²/n and its gradients with respect to Θ and W.

    Returns ``(loss, dthetas, dws)`` with gradient arrays of shape (m, d, d):
    dW_i = Σ_s x_sᵀ A_iᵀ R_s / n and dΘ_i = Σ_s x_sᵀ dZ_i x_s / n with
    dZ_i = A_i ⊙ (dA − rowsum(dA ⊙ A_i)), dA = R_s (x_s W_i)ᵀ.
    """
    n, k, d = X.shape
    m = thetas.shape[0]
    theta_t, w_cols = _transposed(thetas), _side_by_side(ws)
    chunks = min(chunk_count(n), max(1, BLOCK_ENTRIES // (2 * m * d * d)))
    losses = np.empty(chunks)
    grads = np.empty((chunks, d, 2 * m * d))
    DISPATCH.run("loss_and_grad", 5 * n * m * k * d * (k + d), _loss_and_grad_worker, _loss_and_grad_parallel,
                 X, Y, theta_t, w_cols, chunks, new_counter(), losses, grads)
    grad = grads.sum(axis=0) / n
    loss = 0.5 * losses.sum() / n
    return loss, _per_head(grad[:, m * d:], m), _per_head(grad[:, :m * d], m)
