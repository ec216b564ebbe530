"""Features of the random-feature attention and random-feature MLP models.

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023
([design: random-features]).

Features of the random-feature attention layer

    φ_h(x_{0:N}) = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) x_j ∈ R^d,   h = 1..M,

so that f(x_{0:N}) = Σ_h ⟨v_h, φ_h⟩ is linear in the value vectors v_h
(:class:`~mhalearn.random_features.models.RandomFeatureAttention`).  Tokens
augmented with a constant coordinate are just tokens of dim d+1.  The query
projections x_0ᵀ Q_h for all heads and a block of samples are one BLAS
product; the Numba kernel does the per-sequence M×N logits and the weighted
key sums, through the shared dispatcher of :mod:`mhalearn._numba`.  The
layout (samples, d, M) makes the logit loop an axpy over the contiguous head
axis.  The random-feature MLP's features, max(vec(X) W + b, 0), are one BLAS
product (:func:`mlp_random_features`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._numba import BLOCK_ENTRIES, DISPATCH, FASTMATH, chunk_count, new_counter, next_chunk, thread_driver

RANDOM_FEATURE_ACTIVATIONS = ("relu", "tanh")


@njit(fastmath=FASTMATH, cache=True, nogil=True)
def _attention_random_features_worker(queries_t, X, activation_code, chunks, counter, out):
    """out[s, h] = (1/N) Σ_{j=1..N} σ(Σ_e queries_t[s, e, h] X[s, j, e]) X[s, j].

    ``queries_t`` has shape (n, d, M), ``X`` (n, N+1, d) (row 0, the query,
    is not read), ``out`` (n, M, d); ``activation_code`` indexes
    :data:`RANDOM_FEATURE_ACTIVATIONS`.
    """
    n, d, m = queries_t.shape
    keys_per_query = X.shape[1] - 1
    inv_keys = 1.0 / keys_per_query
    logits = np.empty(m)
    chunk = next_chunk(counter)
    while chunk < chunks:
        for s in range(chunk * n // chunks, (chunk + 1) * n // chunks):
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
        chunk = next_chunk(counter)


_attention_random_features_parallel = thread_driver(_attention_random_features_worker)


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
    block = max(1, BLOCK_ENTRIES // (m * d))
    for start in range(0, n, block):
        stop = min(n, start + block)
        queries_t = (X[start:stop, 0, :] @ stack).reshape(stop - start, d, m)
        DISPATCH.run("attention_random_features", (stop - start) * (length - 1) * m * d * 2,
                     _attention_random_features_worker, _attention_random_features_parallel, queries_t,
                     X[start:stop], code, chunk_count(stop - start), new_counter(), out[start:stop])
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
