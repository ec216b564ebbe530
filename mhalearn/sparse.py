"""Sparse variable creation: a sparse Boolean task and two students (docs/design.md §4.4).

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022.

The teacher hides a support S ⊂ [T] of size s and labels x ∈ {±1}^T by
y = g(x_S) with g ∈ {AND, parity, majority}.  Edelman et al. show that a
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

import math

import numpy as np
from sklearn.base import ClassifierMixin
from threadpoolctl import threadpool_limits

from . import kernels
from ._estimator import Estimator, check_fitted
from ._validation import (
    Integer,
    Real,
    Seed,
    as_float_array,
    as_generator,
    check_boolean,
    check_choice,
    check_dense,
    check_positive_int,
)
from .optim import AdamW

#: The sparse functions g: {±1}^s → {±1} (+1 plays the role of "true").
FUNCTIONS = ("and", "parity", "majority")


def boolean_function(function: str, bits: np.ndarray) -> np.ndarray:
    """Evaluate g row-wise on ``bits`` of shape (n, s) with entries ±1.

    AND(b) = +1 iff every b_j = +1; parity(b) = Π_j b_j; majority(b) = sign(Σ_j b_j)
    (s odd, so there are no ties).
    """
    if function == "and":
        return np.where(np.all(bits > 0, axis=1), 1.0, -1.0)
    if function == "parity":
        return np.prod(bits, axis=1)
    return np.sign(bits.sum(axis=1))


def _check_bits(X, name: str = "X") -> np.ndarray:
    """Validate a (n, T) array with n, T >= 1 and entries ±1; return it as int8.

    Bits are kept as int8 (one byte per bit instead of eight): at T = 4096 and
    n = 16 384 the training set is 64 MiB instead of 512 MiB.  The check
    reads the array in its own dtype, so no float64 copy is made.
    """
    check_dense(X, name)
    try:
        array = np.asarray(X)
    except Exception as error:  # pragma: no cover - exotic inputs
        raise ValueError(f"{name}: expected an array, received {type(X).__name__} ({error})") from None
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_) \
            or np.iscomplexobj(array):
        raise ValueError(f"{name}: expected a real numeric array, received dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(f"{name}: expected an array of rank 2, received shape {array.shape}")
    if array.shape[0] < 1 or array.shape[1] < 1:
        raise ValueError(f"{name}: expected shape (samples, length) with both sizes >= 1, received {array.shape}")
    check_boolean(array, name, opt_in=None)
    return array.astype(np.int8, copy=False)


def _as_float_rows(X: np.ndarray) -> np.ndarray:
    """±1 bits (any dtype) as the float64 array the kernels take."""
    return np.ascontiguousarray(X, dtype=np.float64)


def _row_blocks(samples: int, length: int):
    """Row ranges of about 2^20 entries: bounds the float64 work arrays of prediction to a few MiB."""
    size = max(1, (1 << 20) // max(length, 1))
    return [(start, min(samples, start + size)) for start in range(0, samples, size)]


def _check_examples(X, y) -> tuple[np.ndarray, np.ndarray]:
    """Validate Boolean inputs (n, T) and labels (n,) in {±1}; X comes back as int8."""
    X = _check_bits(X)
    y = as_float_array(y, "y", 1)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y: expected {X.shape[0]} labels to match X, received {y.shape[0]}")
    if not np.all(np.abs(y) == 1.0):
        raise ValueError(f"y: expected labels in {{-1, +1}}, received values such as {y[np.abs(y) != 1.0][:3].tolist()}")
    return X, y


class SparseBooleanTask:
    """Random x ∈ {±1}^T labelled by y = g(x_S) for a hidden support S of size s.

    Parameters
    ----------
    length : int
        T, the number of bits per sequence.
    sparsity : int
        s = size of S, 1 <= s <= T (odd for ``"majority"``).
    function : {"and", "parity", "majority"}
        g.  AND is +1 iff all of x_S are +1; parity is Π_{i∈S} x_i;
        majority is sign(Σ_{i∈S} x_i).
    rng : None, int or numpy.random.Generator
        Draws the support S, and later samples when :meth:`sample` gets no rng.

    Attributes
    ----------
    support : ndarray of int, shape (s,)
        S, sorted.

    Notes
    -----
    The three functions are the ones studied by Edelman, Goel, Kakade & Zhang
    (ICML 2022).  Under the uniform law, each bit of S correlates with y for
    AND (E[y x_i] = 2^{1−s}) and majority, but parity is uncorrelated with
    every set of fewer than s bits, which makes it hard for gradient methods.
    """

    def __init__(self, length: int, sparsity: int, function: str = "majority", rng=None):
        self.length = check_positive_int(length, "length")
        self.sparsity = check_positive_int(sparsity, "sparsity")
        if self.sparsity > self.length:
            raise ValueError(f"sparsity: expected an integer <= length = {self.length}, received {self.sparsity}")
        self.function = check_choice(function, "function", FUNCTIONS)
        if function == "majority" and self.sparsity % 2 == 0:
            raise ValueError(f"sparsity: expected an odd integer for majority (no ties), received {self.sparsity}")
        self._rng = as_generator(rng)
        self.support = np.sort(self._rng.choice(self.length, size=self.sparsity, replace=False))

    def labels(self, X) -> np.ndarray:
        """y = g(x_S) for each row of ``X`` (shape (n, T), entries ±1)."""
        X = _check_bits(X)
        if X.shape[1] != self.length:
            raise ValueError(f"X: expected {self.length} columns (length), received shape {X.shape}")
        return boolean_function(self.function, X[:, self.support])

    def sample(self, n: int, rng=None, dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``n`` uniform examples: X of shape (n, T) in {±1}, y of shape (n,) in {±1}.

        ``dtype`` is that of X (float64, or int8 to store long sequences
        compactly); the draws are the same whatever the dtype.  y is float64.
        """
        n = check_positive_int(n, "n")
        generator = self._rng if rng is None else as_generator(rng)
        dtype = np.dtype(dtype)
        if dtype not in (np.dtype(np.float64), np.dtype(np.int8)):
            raise ValueError(f"dtype: expected float64 or int8, received {dtype}")
        X = generator.choice(np.array([-1, 1], dtype=dtype), size=(n, self.length))
        return X, boolean_function(self.function, X[:, self.support].astype(np.float64))

    def __repr__(self) -> str:
        return (f"SparseBooleanTask(length={self.length}, sparsity={self.sparsity}, "
                f"function={self.function!r}, support={self.support.tolist()})")


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

class _BooleanClassifier(ClassifierMixin, Estimator):
    """scikit-learn classifier of x ∈ {±1}^T by the sign of a real-valued score f(x).

    The labels are −1 and +1 (``classes_``); ``decision_function`` is f,
    ``predict`` is sign(f) (+1 at f = 0) and ``score`` the accuracy.
    Subclasses set their fitted state in ``fit``, then ``n_features_in_``
    last (it marks the estimator fitted), and provide ``_scores(X)`` (float64
    scores of int8 bits, any number of rows).
    """

    #: The labels, fixed: the logistic loss and the parities are defined on y ∈ {−1, +1}.
    classes_ = np.array([-1.0, 1.0])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # two labels, −1 and +1
        return tags

    def _checked_inputs(self, X) -> np.ndarray:
        check_fitted(self)
        X = _check_bits(X)
        if X.shape[1] != self.n_features_in_:
            raise ValueError(f"X: expected {self.n_features_in_} columns as in fit, received shape {X.shape}")
        return X

    def decision_function(self, X) -> np.ndarray:
        """Real scores f(x) of shape (n,); sign(f) is the predicted label."""
        return self._scores(self._checked_inputs(X))

    def predict(self, X) -> np.ndarray:
        """Predicted labels sign(f(x)) in {−1, +1} (+1 where f = 0), shape (n,)."""
        return np.where(self.decision_function(X) >= 0.0, 1.0, -1.0)

    def score(self, X, y, sample_weight=None) -> float:
        """Accuracy of ``predict(X)`` against labels ``y`` in {±1}, weighted by ``sample_weight`` if given."""
        X, y = _check_examples(self._checked_inputs(X), y)
        return float(np.average(np.where(self._scores(X) >= 0.0, 1.0, -1.0) == y, weights=sample_weight))


class _BooleanStudent(_BooleanClassifier):
    """A score f(x) trained by :func:`adamw_descent` on the logistic loss.

    Subclasses provide ``_initial_parameters(length, rng)``,
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

    def fit(self, X, y):
        """Train on Boolean inputs ``X`` (n, T) with labels ``y`` (n,) in {±1}; returns ``self``.

        Sets ``parameters_`` (dict of arrays), ``loss_curve_`` (mini-batch
        loss per step) and ``n_features_in_`` (= T).  ``X`` is held as int8
        and each mini-batch converted to float64 when it is used.
        """
        self._check_params()
        X, y = _check_examples(X, y)
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
        for start, stop in _row_blocks(*X.shape):
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
    :func:`mhalearn.kernels.bit_attention_forward` / ``bit_attention_backward``.

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
        self.embedding_dim = embedding_dim
        self.hidden = hidden
        self.steps = steps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.random_state = random_state

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
    still grows about linearly in T (bench/sparse.py).

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
        self.hidden = hidden
        self.steps = steps
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.random_state = random_state

    def _initial_parameters(self, length: int, rng: np.random.Generator) -> dict:
        return _mlp_parameters(length, self.hidden, rng)

    def _forward(self, parameters: dict, X: np.ndarray):
        return _mlp_forward(parameters, X)

    def _backward(self, parameters: dict, cache, d_scores: np.ndarray) -> dict:
        return _mlp_backward(parameters, cache, d_scores)[0]


def _as_signatures(packed: np.ndarray) -> np.ndarray:
    """Rows of packed bits (k, bytes) as exact, sortable signatures: one void scalar per row."""
    packed = np.ascontiguousarray(packed)
    return packed.view(np.dtype((np.void, packed.shape[1]))).ravel()


class SparseParitySearch(_BooleanClassifier):
    """Empirical risk minimisation over the parities of s bits — a learner that is not gradient-based.

    The class H_s = {χ_S(x) = Π_{i∈S} x_i : S ⊂ [T] of size s} has C(T, s)
    members, so a learner that returns any parity consistent with the
    sample is wrong with probability at most (C(T, s) − 1)·2^{−n} (a wrong
    χ_{S'} agrees with χ_S on a uniform example with probability 1/2,
    independently across examples): n ≈ log₂ C(T, s) ≈ s·log₂ T samples
    suffice.  This is the statistical side of Edelman et al.'s claim for
    sparse parity — the information needed grows like log T — free of the
    computational barrier that makes gradient methods need a number of
    steps growing like T^{s−1} (a parity of s bits is uncorrelated with every
    function of fewer of them).

    **Algorithm** (meet in the middle).  With bits b = (1 − x)/2 and label
    bit c = (1 − y)/2, χ_S is consistent iff ⊕_{i∈S} b_i = c on every
    example.  Split S = A ∪ B with A of size ⌊s/2⌋: the n-bit signature
    ⊕_{i∈B} b_i ⊕ c of every B is looked up, exactly, among the sorted
    signatures ⊕_{i∈A} b_i of the A's.  Time O(T^{⌈s/2⌉}·(n/64 + log T))
    and memory O(T·n) bits: C(4096, 2) ≈ 8.4 million lookups for s = 3.
    Each consistent S is found C(s, ⌊s/2⌋) times (once per split), and one
    is returned uniformly at random among them (``random_state``), so the
    learner is a uniform consistent learner: with W wrong consistent parities
    it is right with probability 1/(W + 1).

    The data must be realisable (noiseless parity labels); when no parity of
    s bits is consistent, the learner predicts the majority label and
    ``support_`` is None.

    Parameters
    ----------
    sparsity : int
        s, 1 <= s <= 3 (the search is over T^{⌈s/2⌉} subsets).
    random_state : None, int or Generator
        Chooses among consistent parities.

    Attributes
    ----------
    support_ : ndarray of int (s,) or None
        The chosen S.
    consistent_count_ : int
        The number of parities of s bits consistent with the sample (1 once
        the sample identifies S).
    n_features_in_ : int
    """

    #: The search enumerates T^ceil(s/2) subsets: s <= 3 keeps it at T² signatures.
    _parameter_constraints = {"sparsity": [Integer(1, 3)], "random_state": [Seed()]}

    def __init__(self, sparsity: int = 3, *, random_state=None):
        self.sparsity = sparsity
        self.random_state = random_state

    def fit(self, X, y):
        """Search the parities of ``sparsity`` bits for those consistent with (X, y); returns ``self``."""
        self._check_params()
        sparsity = self.sparsity
        X, y = _check_examples(X, y)
        length = X.shape[1]
        if sparsity > length:
            raise ValueError(f"sparsity: expected an integer <= the {length} columns of X, received {sparsity}")
        rng = as_generator(self.random_state)
        packed = np.packbits(X.T < 0, axis=1)  # (T, ⌈n/8⌉): the bits b_i of every example, packed
        label = np.packbits(y < 0)
        halves = sparsity // 2, sparsity - sparsity // 2
        columns = _as_signatures(packed)
        left = columns if halves[0] == 1 else _as_signatures(np.zeros((1, packed.shape[1]), dtype=np.uint8))
        order = np.argsort(left, kind="stable")
        left_sorted = left[order]
        zero_left = halves[0] == 0

        def block(first: int):
            """Subsets B (as index rows) starting at ``first``, and their lookup signatures ⊕_B b ⊕ c."""
            if halves[1] == 1:
                rows = np.arange(length)[:, None]
                targets = _as_signatures(packed ^ label)
            else:
                rows = np.column_stack([np.full(length - first - 1, first), np.arange(first + 1, length)])
                targets = _as_signatures(packed[first + 1:] ^ packed[first] ^ label)
            low = np.searchsorted(left_sorted, targets, side="left")
            high = np.searchsorted(left_sorted, targets, side="right")
            counts = high - low
            if not zero_left:  # A must not meet B: drop the matches A = {i} with i ∈ B
                for column in rows.T:
                    counts -= columns[column] == targets
            return rows, low, high, counts

        firsts = [0] if halves[1] == 1 else list(range(length - 1))
        totals = np.array([block(first)[3].sum() for first in firsts])
        repeats = math.comb(sparsity, halves[0])
        self.consistent_count_ = int(totals.sum()) // repeats
        if self.consistent_count_ == 0:
            self.support_ = None
            self.constant_ = 1.0 if np.mean(y) >= 0 else -1.0
            self.n_features_in_ = length
            return self
        pick = int(rng.integers(totals.sum()))
        index = int(np.searchsorted(np.cumsum(totals), pick, side="right"))
        pick -= int(totals[:index].sum())
        rows, low, high, counts = block(firsts[index])
        row = int(np.searchsorted(np.cumsum(counts), pick, side="right"))
        pick -= int(counts[:row].sum())
        subset = set(rows[row].tolist())
        matches = [] if zero_left else [int(order[k]) for k in range(low[row], high[row])
                                        if int(order[k]) not in subset]
        chosen = subset | ({matches[pick]} if matches else set())
        self.support_ = np.array(sorted(chosen))
        self.n_features_in_ = length
        return self

    def _scores(self, X: np.ndarray) -> np.ndarray:
        if self.support_ is None:
            return np.full(X.shape[0], self.constant_)
        return np.prod(X[:, self.support_].astype(np.float64), axis=1)


#: Student classes by the names experiments use.
STUDENTS = {"attention": AttentionStudent, "mlp": MLPStudent, "parity-search": SparseParitySearch}

__all__ = ["AttentionStudent", "FUNCTIONS", "MLPStudent", "STUDENTS", "SparseBooleanTask", "SparseParitySearch",
           "adamw_descent", "boolean_function", "logistic_loss"]
