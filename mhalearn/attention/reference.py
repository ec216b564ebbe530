"""Pure-NumPy reference of the attention layer's maths: F(X), its loss and gradients ([design: kernels]).

Written with batched matmuls only, independently of the Numba kernels
(:mod:`mhalearn.attention.kernels`), so the tests can compare the two and
``bench/kernels.py`` can time the kernels against it from an installed
package.  Slow and simple on purpose: it is the check, not the tool.
"""

import numpy as np


def softmax_rows(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


def attention(X, thetas):
    """(n, m, k, k) weights softmax(X Θ_i Xᵀ)."""
    logits = np.einsum("nkd,mde,nle->nmkl", X, thetas, X, optimize=True)
    return softmax_rows(logits)


def forward(X, thetas, ws):
    """F(X) with matmuls: Σ_i A_i (X W_i)."""
    n, k, d = X.shape
    m = thetas.shape[0]
    out = np.zeros_like(X)
    flat = X.reshape(n * k, d)
    for i in range(m):
        query = (flat @ thetas[i]).reshape(n, k, d)
        weights = softmax_rows(query @ X.transpose(0, 2, 1))
        out += weights @ (flat @ ws[i]).reshape(n, k, d)
    return out


def loss_and_grad(X, Y, thetas, ws):
    """½‖F(X) − Y‖²/n and its gradients, by reverse-mode written out in matmuls."""
    n, k, d = X.shape
    m = thetas.shape[0]
    flat = X.reshape(n * k, d)
    Xt = X.transpose(0, 2, 1)
    weights, values = [], []
    residual = -Y.copy()
    for i in range(m):
        A = softmax_rows((flat @ thetas[i]).reshape(n, k, d) @ Xt)
        V = (flat @ ws[i]).reshape(n, k, d)
        residual += A @ V
        weights.append(A)
        values.append(V)
    loss = 0.5 * np.sum(residual ** 2) / n
    dthetas = np.empty_like(thetas)
    dws = np.empty_like(ws)
    for i in range(m):
        A, V = weights[i], values[i]
        dV = A.transpose(0, 2, 1) @ residual
        dws[i] = flat.T @ dV.reshape(n * k, d) / n
        dA = residual @ V.transpose(0, 2, 1)
        dZ = A * (dA - np.sum(dA * A, axis=-1, keepdims=True))
        dthetas[i] = flat.T @ (dZ @ X).reshape(n * k, d) / n
    return loss, dthetas, dws


def head_features(X, thetas):
    """(n, m, k, d) features A_i X."""
    return attention(X, thetas) @ X[:, None]
