r"""Numba kernels of the sparse-variables attention student: one softmax head over Boolean tokens.

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022
([design: sparse-variables]).

One softmax attention head over T Boolean tokens.  Token t of a sequence
x ∈ {±1}^T is embedded as z_t = p_t + x_t r_t: a learned positional embedding
p_t ∈ R^e and a learned bit embedding r_t ∈ R^e of the position (so that the
token "bit x_t at position t" has its own vector, p_t ± r_t).  A learned
query q ∈ R^e scores the tokens:

    s_t = ⟨q, z_t⟩ = c_t + x_t α_t,   c = P q,   α = R q,
    a = softmax(s),   z̄ = Σ_t a_t z_t = A P + (A ⊙ X) R,

and the pooled value z̄ feeds the student's MLP
(:class:`~mhalearn.sparse_variables.students.AttentionStudent`).  Backward,
for an upstream gradient g_s = ∂L/∂z̄_s of each sequence:

    ∂L/∂a_t = ⟨g, p_t⟩ + x_t ⟨g, r_t⟩,   ∂L/∂s_t = a_t (∂L/∂a_t − Σ_r a_r ∂L/∂a_r),
    ∂L/∂c_t = Σ_s ∂L/∂s_st,   ∂L/∂α_t = Σ_s x_st ∂L/∂s_st,
    ∂L/∂P = Aᵀ G + ∂L/∂c qᵀ,   ∂L/∂R = (A ⊙ X)ᵀ G + ∂L/∂α qᵀ,
    ∂L/∂q = Pᵀ ∂L/∂c + Rᵀ ∂L/∂α.

The products with P, R and G are BLAS matrix products in the wrappers; the
Numba kernels do the per-sequence softmax work, O(T) per sequence, through
the shared dispatcher of :mod:`mhalearn._numba` (same chunks, same bits on
one thread or many).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._exp import exp_nonpositive
from .._numba import DISPATCH, FASTMATH, chunk_count, new_counter, next_chunk, thread_driver

# The backward pass splits the batch into this many chunks, each with its own
# gradient accumulators (no races); a fixed count keeps sums identical
# whatever the number of threads, so fits are reproducible across machines'
# thread counts.
_BIT_ATTENTION_CHUNKS = 8


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _bit_attention_forward_worker(X, position_logits, bit_logits, chunks, counter, weights):
    """weights[s] = softmax(c + x_s ⊙ α)."""
    n, length = X.shape
    chunk = next_chunk(counter)
    while chunk < chunks:
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
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
        chunk = next_chunk(counter)


_bit_attention_forward_parallel = thread_driver(_bit_attention_forward_worker)


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _bit_attention_backward_worker(X, weights, g_dot_p, g_dot_r, chunks, counter, d_position_logits,
                                   d_bit_logits):
    """Per-chunk sums of ∂L/∂c and ∂L/∂α given ⟨g_s, p_t⟩ and ⟨g_s, r_t⟩, both (n, T)."""
    n, length = X.shape
    d_weights = np.empty(length)
    chunk = next_chunk(counter)
    while chunk < chunks:
        dc = d_position_logits[chunk]
        d_alpha = d_bit_logits[chunk]
        dc[:] = 0.0
        d_alpha[:] = 0.0
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
        chunk = next_chunk(counter)


_bit_attention_backward_parallel = thread_driver(_bit_attention_backward_worker)


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
    position_logits = np.ascontiguousarray(positions @ query)
    bit_logits = np.ascontiguousarray(bit_embeddings @ query)
    chunks = chunk_count(n)
    DISPATCH.run("bit_attention_forward", 8 * X.size, _bit_attention_forward_worker,
                 _bit_attention_forward_parallel, X, position_logits, bit_logits, chunks, new_counter(),
                 weights)
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
    chunks = chunk_count(n, _BIT_ATTENTION_CHUNKS)
    d_position_logits = np.empty((chunks, length))
    d_bit_logits = np.empty((chunks, length))
    g_dot_p = d_pooled @ positions.T
    g_dot_r = d_pooled @ bit_embeddings.T
    DISPATCH.run("bit_attention_backward", 6 * X.size, _bit_attention_backward_worker,
                 _bit_attention_backward_parallel, X, weights, g_dot_p, g_dot_r, chunks, new_counter(),
                 d_position_logits, d_bit_logits)
    dc = d_position_logits.sum(axis=0)
    d_alpha = d_bit_logits.sum(axis=0)
    d_query = positions.T @ dc + bit_embeddings.T @ d_alpha
    d_positions = weights.T @ d_pooled + np.outer(dc, query)
    d_bit_embeddings = (weights * X).T @ d_pooled + np.outer(d_alpha, query)
    return d_query, d_positions, d_bit_embeddings
