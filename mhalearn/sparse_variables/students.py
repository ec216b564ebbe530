"""The two gradient-trained students of the sparse-variables study ([design: sparse-variables]).

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022.

The teacher hides a support S ⊂ [T] of size s and labels x ∈ {±1}^T by
y = g(x_S) with g ∈ {AND, parity, majority}
(:class:`~mhalearn.sparse_variables.tasks.SparseBooleanTask`).  Edelman et al. show that a
bounded-norm self-attention head "creates" the sparse variable x_S: its
capacity (covering number) grows only like log T, so the samples needed to
learn g(x_S) grow like log T, whereas a network on the raw bits pays for
every coordinate.  Two students are compared under the same training loop:

* :class:`AttentionStudent` — one softmax head with a learned query over the
  token embeddings z_t = p_t + x_t r_t, pooled value into a small MLP;
* :class:`MLPStudent` — the same MLP on the raw bits x ∈ {±1}^T.

Both minimise the logistic loss (1/n) Σ log(1 + exp(−y f(x))) by mini-batch
Adam with decoupled weight decay (AdamW, Loshchilov & Hutter) — the weight
decay plays the role of the norm bound in Edelman et al.'s theory — with a
cosine learning-rate schedule.
"""

from __future__ import annotations

import numpy as np
from threadpoolctl import threadpool_limits

from .._estimator import store_parameters
from .._memory import check_memory
from .._validation import Integer, Real, Seed, as_generator
from ..optim import AdamW
from . import kernels
from .tasks import BooleanClassifier, check_examples


def _as_float_rows(X: np.ndarray) -> np.ndarray:
    """±1 bits (any dtype) as the float64 array the kernels take."""
    return np.ascontiguousarray(X, dtype=np.float64)


def _row_blocks(samples: int, width: int):
    """Row ranges of about 2^20 entries for rows of ``width`` entries (the widest work array of a row).

    Bounds the float64 work arrays of prediction to a few MiB.
    """
    size = max(1, (1 << 20) // max(width, 1))
    return [(start, min(samples, start + size)) for start in range(0, samples, size)]


# --------------------------------------------------------------------------
# The shared MLP head and the training loop
# --------------------------------------------------------------------------

def _mlp_parameters(inputs: int, hidden: int, rng: np.random.Generator) -> dict:
    """One-hidden-layer ReLU network R^inputs → R: He-initialised hidden layer, zero output layer.

    The zero output layer starts every student at f ≡ 0 (loss log 2), so the
    first steps fit the read-out before the features move.
    """
    return {
        "hidden_weights": rng.standard_normal((hidden, inputs)) * np.sqrt(2.0 / inputs),
        "hidden_bias": np.zeros(hidden),
        "output_weights": np.zeros(hidden),
        "output_bias": np.zeros(1),
    }


def _mlp_parameter_entries(inputs: int, hidden: int) -> int:
    """How many numbers :func:`_mlp_parameters` holds."""
    return hidden * (inputs + 2) + 1


def _mlp_forward(parameters: dict, features: np.ndarray):
    """f = w₂ᵀ ReLU(W₁ h + b₁) + b₂ for each row h of ``features``; returns (f, cache)."""
    pre = features @ parameters["hidden_weights"].T + parameters["hidden_bias"]
    hidden = np.maximum(pre, 0.0)
    scores = hidden @ parameters["output_weights"] + parameters["output_bias"][0]
    return scores, (features, pre, hidden)


def _mlp_backward(parameters: dict, cache, d_scores: np.ndarray):
    """Gradients of the MLP parameters and ∂L/∂h given ∂L/∂f of shape (n,)."""
    features, pre, hidden = cache
    d_hidden = np.outer(d_scores, parameters["output_weights"]) * (pre > 0.0)
    grads = {
        "hidden_weights": d_hidden.T @ features,
        "hidden_bias": d_hidden.sum(axis=0),
        "output_weights": hidden.T @ d_scores,
        "output_bias": np.array([d_scores.sum()]),
    }
    return grads, d_hidden @ parameters["hidden_weights"]


def logistic_loss(scores: np.ndarray, y: np.ndarray):
    """(1/n) Σ log(1 + exp(−y f)) and its gradient −y σ(−y f)/n with respect to f."""
    margins = y * scores
    loss = np.logaddexp(0.0, -margins).mean()
    d_scores = -y * 0.5 * (1.0 - np.tanh(0.5 * margins)) / len(y)  # σ(−m) = (1 − tanh(m/2))/2, stable
    return loss, d_scores


def adamw_descent(parameters: dict, loss_and_grad, X: np.ndarray, y: np.ndarray,
                  rng: np.random.Generator, *, steps: int, batch_size: int, learning_rate: float,
                  weight_decay: float, decayed) -> np.ndarray:
    """Mini-batch Adam with decoupled weight decay, updating ``parameters`` in place.

    Each step draws the next ``batch_size`` examples of a fresh permutation
    per epoch and applies (Kingma & Ba; Loshchilov & Hutter)

        m ← β₁m + (1−β₁)g,  v ← β₂v + (1−β₂)g²,
        θ ← θ − η_t (m̂/(√v̂ + ε) + λ θ·[θ decayed]),

    with η_t = η (1 + cos(π t/steps))/2 (one :class:`mhalearn.optim.AdamW` step each, ε = 10⁻⁸).
    Returns the mini-batch loss of every step.
    """
    adam = AdamW(parameters, weight_decay=weight_decay, decayed=decayed)
    n = X.shape[0]
    batch = min(batch_size, n)
    losses = np.empty(steps)
    order, cursor = rng.permutation(n), 0
    for step in range(steps):
        if cursor + batch > n:
            order, cursor = rng.permutation(n), 0
        rows = order[cursor:cursor + batch]
        cursor += batch
        losses[step], grads = loss_and_grad(parameters, X[rows], y[rows])
        adam.step(grads, 0.5 * learning_rate * (1.0 + np.cos(np.pi * step / steps)))
    return losses


# --------------------------------------------------------------------------
# Students
# --------------------------------------------------------------------------

class _BooleanStudent(BooleanClassifier):
    """A score f(x) trained by :func:`adamw_descent` on the logistic loss.

    Subclasses provide ``_initial_parameters(length, rng)``,
    ``_parameter_entries(length)`` (how many numbers it holds),
    ``_forward(parameters, X) -> (scores, cache)`` on float64 bits,
    ``_backward(parameters, cache, d_scores) -> grads`` and the set
    ``_decayed`` of parameter names under weight decay (all but biases).
    """

    _decayed: frozenset = frozenset()

    #: AdamW's hyper-parameters, shared by the students (checked once, at the start of ``fit``).
    _parameter_constraints = {
        "hidden": [Integer(1)],
        "steps": [Integer(1)],
        "batch_size": [Integer(1)],
        "learning_rate": [Real(0.0, low_open=True)],
        "weight_decay": [Real(0.0)],
        "random_state": [Seed()],
    }

    def loss_and_grad(self, parameters: dict, X: np.ndarray, y: np.ndarray):
        """Logistic loss of ``parameters`` on (X, y) and its gradient (a dict like ``parameters``)."""
        scores, cache = self._forward(parameters, _as_float_rows(X))
        loss, d_scores = logistic_loss(scores, y)
        return loss, self._backward(parameters, cache, d_scores)

    def _size_parameter(self) -> str:
        """The hyper-parameter a memory budget error names: the size that dominates the training's memory."""
        return "hidden"

    def fit(self, X, y):
        """Train on Boolean inputs ``X`` (n, T) with labels ``y`` (n,) in {±1}; returns ``self``.

        Sets ``parameters_`` (dict of arrays), ``loss_curve_`` (mini-batch
        loss per step) and ``n_features_in_`` (= T).  ``X`` is held as int8
        and each mini-batch converted to float64 when it is used.

        Raises ``MemoryError`` naming ``hidden`` (or ``embedding_dim``, when
        it is the larger), before initialising, when training exceeds the
        memory budget (:func:`mhalearn.set_memory_budget`): it holds the
        parameters four times (with their gradient and Adam's two moments)
        and about four batch × hidden work arrays.
        """
        self._check_params()
        X, y = check_examples(X, y)
        parameters, batch = self._parameter_entries(X.shape[1]), min(self.batch_size, X.shape[0])
        name = self._size_parameter()
        check_memory(8 * (4 * parameters + 4 * batch * self.hidden), name,
                     f"{name} = {getattr(self, name)} ({parameters} parameters, {self.hidden} hidden units) "
                     f"trained in batches of {batch}")
        rng = as_generator(self.random_state)
        parameters = self._initial_parameters(X.shape[1], rng)
        # A step's matrix products are at most batch × T × hidden: one BLAS thread is fastest,
        # and threads woken for them only contend with other work on shared cores.
        with threadpool_limits(limits=1, user_api="blas"):
            self.loss_curve_ = adamw_descent(
                parameters, self.loss_and_grad, X, y, rng, steps=self.steps, batch_size=self.batch_size,
                learning_rate=self.learning_rate, weight_decay=self.weight_decay, decayed=self._decayed)
        self.parameters_ = parameters
        self.n_features_in_ = X.shape[1]
        return self

    def _scores(self, X: np.ndarray) -> np.ndarray:
        out = np.empty(X.shape[0])
        for start, stop in _row_blocks(X.shape[0], max(X.shape[1], self.hidden)):
            out[start:stop] = self._forward(self.parameters_, _as_float_rows(X[start:stop]))[0]
        return out


class AttentionStudent(_BooleanStudent):
    """One softmax attention head with a learned query, pooled value into a small MLP.

    Token t of x ∈ {±1}^T — "bit x_t at position t" — is embedded as
    z_t = p_t + x_t r_t, with a learned positional embedding p_t ∈ R^e and a
    learned bit embedding r_t ∈ R^e of that position (equivalently, one
    vector p_t ± r_t per (position, bit) pair).  A learned query q scores the
    tokens, the head pools them, and an MLP reads the pool:

        a = softmax_t(⟨q, z_t⟩),   z̄ = Σ_t a_t z_t,   f(x) = w₂ᵀ ReLU(W₁ z̄ + b₁) + b₂.

    The key and value maps are the identity on the embedding: a key matrix
    would only enter through W_Kᵀq (one vector) and a value matrix through
    W₁W_V (one matrix), so they add parameters but no functions.  The
    forward and backward passes of the head are the Numba kernels
    :func:`mhalearn.sparse_variables.kernels.bit_attention_forward` / ``bit_attention_backward``.

    **Why one head represents g(x_S)** (Edelman et al., §4).  The logit is
    ⟨q, z_t⟩ = c_t + x_t α_t with c = Pq and α = Rq.  With α = 0, c_t = γ on
    S and 0 elsewhere, the head puts weight ≥ 1 − ε on S, spread evenly,
    once γ ≳ log(T/ε) — a norm that grows only like log T — and the pooled
    value is z̄ ≈ p̄_S + (1/s) Σ_{i∈S} x_i r_i.  With r_i (i ∈ S) linearly
    independent, z̄ carries every selected bit in its own direction, so the
    MLP can compute any g(x_S), symmetric (AND, parity, majority) or not.
    A bit embedding shared by all positions (z_t = p_t + x_t u) would pass
    only the weighted mean Σ a_t x_t along u; that suffices for symmetric g
    but has a trap in training: if the MLP's slope along u starts negative,
    gradient descent lowers the logits of S (its bits correlate with y) to
    ≈ 0 attention and memorises the sample through noise positions.  A bit
    embedding per position lets each selected bit enter with its own sign.

    Parameters
    ----------
    embedding_dim : int
        e, the width of the token embedding (default 16).
    hidden : int
        Width of the MLP's hidden layer (default 32).
    steps, batch_size, learning_rate, weight_decay :
        AdamW budget, mini-batch size, peak step size (cosine schedule) and
        decoupled weight decay λ (applied to all but the biases).  Adam's
        steps have size ≈ η per coordinate whatever the gradient's size, so
        AdamW keeps each weight near ``|θ| ≲ 1/λ``: λ = 0.1 is a norm bound
        of ≈ 10 per coordinate, ample for the sparse construction (logit gap
        ⟨q, p_i⟩ ≈ log T) but a bound on the dense solutions that memorise
        the sample through many small attention weights and a large MLP
        gain.  The defaults (4000 steps, η = 0.01, λ = 0.1) are those the
        ``sparse-variables-tuning`` experiment chose on tasks that the
        ``sparse-variables`` experiment does not evaluate (2-sparse AND and
        parity at T = 64 and 512), out of steps ∈ {1500, 4000},
        η ∈ {0.003, 0.01, 0.03}, λ ∈ {0.01, 0.1, 0.5}.  λ = 0.5 slows the
        weak, higher-order signal of parity to a halt (the weights decay
        faster than it grows).
    random_state : None, int or Generator
        Initialisation and mini-batch order.

    Attributes
    ----------
    parameters_ : dict
        ``query`` (e,), ``positions`` (T, e), ``bit_embeddings`` (T, e) and
        the MLP's ``hidden_weights`` (hidden, e), ``hidden_bias``,
        ``output_weights``, ``output_bias``.
    loss_curve_ : ndarray
        Mini-batch logistic loss at every step.
    """

    _decayed = frozenset({"query", "positions", "bit_embeddings", "hidden_weights", "output_weights"})

    def __init__(self, embedding_dim: int = 16, hidden: int = 32, *, steps: int = 4000, batch_size: int = 64,
                 learning_rate: float = 0.01, weight_decay: float = 0.1, random_state=None):
        store_parameters(self, locals())

    _parameter_constraints = {**_BooleanStudent._parameter_constraints, "embedding_dim": [Integer(1)]}

    def _initial_parameters(self, length: int, rng: np.random.Generator) -> dict:
        dim = self.embedding_dim
        parameters = {
            "query": np.zeros(dim),  # uniform attention at the start
            "positions": rng.standard_normal((length, dim)) / np.sqrt(dim),
            "bit_embeddings": rng.standard_normal((length, dim)) / np.sqrt(dim),
        }
        parameters.update(_mlp_parameters(dim, self.hidden, rng))
        return parameters

    def _size_parameter(self) -> str:
        # The embedding's width multiplies every other size (positions, bits, the MLP's input).
        return "embedding_dim" if self.embedding_dim > self.hidden else "hidden"

    def _parameter_entries(self, length: int) -> int:
        dim = self.embedding_dim
        return dim * (1 + 2 * length) + _mlp_parameter_entries(dim, self.hidden)

    def _forward(self, parameters: dict, X: np.ndarray):
        pooled, weights = kernels.bit_attention_forward(
            X, parameters["query"], parameters["positions"], parameters["bit_embeddings"])
        scores, mlp_cache = _mlp_forward(parameters, pooled)
        return scores, (X, weights, mlp_cache)

    def _backward(self, parameters: dict, cache, d_scores: np.ndarray) -> dict:
        X, weights, mlp_cache = cache
        grads, d_pooled = _mlp_backward(parameters, mlp_cache, d_scores)
        grads["query"], grads["positions"], grads["bit_embeddings"] = kernels.bit_attention_backward(
            X, weights, parameters["query"], parameters["positions"], parameters["bit_embeddings"], d_pooled)
        return grads

    def attention(self, X) -> np.ndarray:
        """Attention weights a of the fitted head, shape (n, T)."""
        X = self._checked_inputs(X)
        p = self.parameters_
        return kernels.bit_attention_forward(_as_float_rows(X), p["query"], p["positions"],
                                             p["bit_embeddings"])[1]

    def support_attention(self, X, support) -> float:
        """Mean over the rows of ``X`` of the attention weight the head puts on the positions ``support``.

        1 means the head attends to exactly those positions; a uniform head
        gives ``len(support)/T``.  Computed in blocks of rows (bounded memory).
        """
        X = self._checked_inputs(X)
        p = self.parameters_
        total = 0.0
        for start, stop in _row_blocks(*X.shape):
            weights = kernels.bit_attention_forward(_as_float_rows(X[start:stop]), p["query"], p["positions"],
                                                    p["bit_embeddings"])[1]
            total += weights[:, np.asarray(support)].sum()
        return total / X.shape[0]


class MLPStudent(_BooleanStudent):
    """The baseline: a one-hidden-layer ReLU network on the raw bits.

        f(x) = w₂ᵀ ReLU(W₁ x + b₁) + b₂,   x ∈ {±1}^T,

    trained by the same AdamW loop as :class:`AttentionStudent`.  Nothing in
    its first layer singles out a few coordinates: trained by gradient
    descent with ℓ₂ weight decay from a Gaussian initialisation it would be
    rotation invariant, and rotation-invariant learners need Ω(T) samples
    for sparse targets (Ng, ICML 2004), against the O(log T) of the
    attention head (Edelman et al., ICML 2022).  Adam is coordinate-wise and
    so not exactly rotation invariant, but the measured samples-to-accuracy
    still grows about linearly in T (bench/sparse_variables.py).

    Parameters
    ----------
    hidden, steps, batch_size, learning_rate, weight_decay, random_state :
        as for :class:`AttentionStudent`; the defaults (4000 steps, η = 0.03,
        λ = 0.5) are the ones the ``sparse-variables-tuning`` experiment chose
        for this student.

    Attributes
    ----------
    parameters_ : dict
        ``hidden_weights`` (hidden, T), ``hidden_bias``, ``output_weights``, ``output_bias``.
    loss_curve_ : ndarray
    """

    _decayed = frozenset({"hidden_weights", "output_weights"})

    def __init__(self, hidden: int = 32, *, steps: int = 4000, batch_size: int = 64,
                 learning_rate: float = 0.03, weight_decay: float = 0.5, random_state=None):
        store_parameters(self, locals())

    def _initial_parameters(self, length: int, rng: np.random.Generator) -> dict:
        return _mlp_parameters(length, self.hidden, rng)

    def _parameter_entries(self, length: int) -> int:
        return _mlp_parameter_entries(length, self.hidden)

    def _forward(self, parameters: dict, X: np.ndarray):
        return _mlp_forward(parameters, X)

    def _backward(self, parameters: dict, cache, d_scores: np.ndarray) -> dict:
        return _mlp_backward(parameters, cache, d_scores)[0]


__all__ = ["AttentionStudent", "MLPStudent", "adamw_descent", "logistic_loss"]
