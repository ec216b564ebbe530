"""Random-feature attention and its random-feature MLP baseline ([design: random-features]).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

Both models are linear in their trainable weights over frozen random
features φ(X) ∈ R^p, so fitting is ridge regression on those features,
:func:`~mhalearn.random_features.ridge.fit_ridge` (its module gives the
penalty's units, the GCV choice of α and the memory the solver holds).
"""

from __future__ import annotations

import time

import numpy as np

from .._estimator import Estimator, SequenceRegressorMixin, check_fitted, pooled_r2
from .._memory import check_memory
from .._validation import (
    Boolean,
    Integer,
    Options,
    Seed,
    as_float_array,
    as_generator,
    check_inputs,
    check_sample_weight,
)
from . import kernels
from .ridge import ALPHA_CONSTRAINTS, fit_ridge, ridge_entries, row_blocks

QK_MEANS = ("zero", "identity")
ACTIVATIONS = kernels.RANDOM_FEATURE_ACTIVATIONS


def _check_sequences(X, name: str = "X") -> np.ndarray:
    X = check_inputs(X, name=name)
    if X.shape[1] < 2:
        raise ValueError(f"{name}: expected a query and at least one key, shape (samples, N+1, dim) with "
                         f"N >= 1, received shape {X.shape}")
    return X


def _check_targets(y, samples: int) -> np.ndarray:
    y = as_float_array(y, "y", 1)
    if y.shape[0] != samples:
        raise ValueError(f"y: expected shape ({samples},) to match the {samples} sequences of X, "
                         f"received shape {y.shape}")
    return y


def _overflow_message(X: np.ndarray) -> str:
    """Why finite inputs gave non-finite features: their scale (the logits and ReLUs grow like |x|²)."""
    return (f"X: expected inputs whose random features stay finite, received entries up to "
            f"{float(np.max(np.abs(X))):.3g}, whose features overflow; rescale the inputs "
            "(the models expect tokens of norm about √d)")


class _RandomFeatureRidge(SequenceRegressorMixin, Estimator):
    """Shared fit/predict of a ridge regression over frozen random features.

    A regressor of one number per sequence: ``score`` is R² (scikit-learn's,
    for labels of any size) and ``n_features_in_`` the token dimension d (set
    once ``fit`` has succeeded).

    Subclasses declare ``_parameter_constraints`` (checked once, at the start
    of ``fit``) and ``_size_parameter`` (the hyper-parameter that sets the
    feature count, named when ``fit`` would exceed the memory budget), and
    implement ``_check_X(X, fitted)``, ``_feature_count(X)`` (p),
    ``_frozen_entries(X)`` (float64 entries of the frozen parameters),
    ``_draw(X, rng)`` (sample and store the frozen parameters, return p),
    ``_features(X)`` (the n × p feature matrix) and may name the fitted
    weights in ``_store_weights()``.
    """

    _size_parameter: str

    def fit(self, X, y):
        """Fit the trainable weights by ridge regression.

        Parameters
        ----------
        X : array of shape (n, N+1, d); row 0 of each sequence is the query
            x_0, rows 1..N the keys.
        y : array of shape (n,).

        Returns
        -------
        self

        Raises ``MemoryError`` naming the size hyper-parameter, before
        drawing anything, when the frozen parameters and the ridge system
        exceed the memory budget (:func:`mhalearn.set_memory_budget`).
        """
        self._check_params()
        X = self._check_X(X, fitted=False)
        y = _check_targets(y, X.shape[0])
        samples, width = X.shape[0], self._feature_count(X)
        check_memory(8 * (self._frozen_entries(X) + ridge_entries(samples, width)), self._size_parameter,
                     f"{width} random features of {samples} sequences")
        start_time = time.perf_counter()
        self._draw(X, as_generator(self.random_state))
        self.coef_, self.intercept_, self.alpha_, report = fit_ridge(
            lambda start, stop: self._features(X[start:stop]), X.shape[0], width, y, self.alpha,
            bool(self.fit_intercept))
        if not (np.all(np.isfinite(self.coef_)) and np.isfinite(self.intercept_)):
            raise ValueError(_overflow_message(X))
        report.update(samples=X.shape[0], features=width, seconds=time.perf_counter() - start_time)
        self.report_ = report
        self._store_weights()
        self.n_features_in_ = X.shape[2]
        return self

    def _store_weights(self) -> None:
        """Store ``coef_`` under the model's own names too (subclasses; nothing by default)."""

    def predict(self, X) -> np.ndarray:
        """Predictions ⟨v̂, φ(X_i)⟩ + b̂, shape (n,), computed in blocks of samples."""
        check_fitted(self)
        X = self._check_X(X, fitted=True)
        out = np.empty(X.shape[0])
        for start, stop in row_blocks(X.shape[0], self.coef_.shape[0]):
            out[start:stop] = self._features(X[start:stop]) @ self.coef_
        out += self.intercept_
        if not np.all(np.isfinite(out)):
            raise ValueError(_overflow_message(X))
        return out

    def score(self, X, y, sample_weight=None) -> float:
        """R² = 1 − Σ w_i (ŷ_i − y_i)² / Σ w_i (y_i − ȳ)² of the predictions on ``X`` (see :func:`pooled_r2`).

        Parameters
        ----------
        X : array of shape (n, N+1, d)
        y : array of shape (n,)
        sample_weight : array of shape (n,), optional

        Returns
        -------
        float
        """
        check_fitted(self)
        X = self._check_X(X, fitted=True)
        y = _check_targets(y, X.shape[0])
        return pooled_r2(y, self.predict(X), check_sample_weight(sample_weight, X.shape[0]))

    def transform(self, X) -> np.ndarray:
        """The random features φ(X), shape (n, p), held in memory at once."""
        check_fitted(self)
        return self._features(self._check_X(X, fitted=True))


class RandomFeatureAttention(_RandomFeatureRidge):
    r"""Random-feature attention layer with frozen query–key matrices (Fu, Guo, Bai & Mei 2023).

    For a query x_0 and keys x_1..x_N in R^d (row 0 and rows 1..N of each
    input sequence),

        f(x_{0:N}) = Σ_{h=1}^{M} (1/N) Σ_{j=1}^{N} σ(x_0ᵀ Q_h x_j) (⟨v_h, x_j⟩ + c_h),

    with frozen Q_h = G_h/d + b·I/√d, G_h having i.i.d. standard Gaussian
    entries, b = 0 for ``qk_mean="zero"`` and b = 1 for ``qk_mean="identity"``
    (the biased sampler of the paper, which favours targets that depend on
    ⟨x_0, x_j⟩).  With ‖x‖ = √d the logit x_0ᵀ Q_h x_j has a random part of
    unit variance and, for ``identity``, the part ⟨x_0, x_j⟩/√d.

    The value vectors v_h ∈ R^d and value biases c_h (the paper's constant
    coordinate x̃_j = [x_j; 1] in the values) are trainable; ``value_bias=False``
    drops c_h.  Without it every term σ(z)⟨v, x_j⟩ is odd in exactly one of
    x_0 and x_j (z is bilinear), so no such model, whatever M and n, fits any
    part of a target odd in both (⟨x_0, x_j⟩, ⟨x_0, x_j⟩³) or even in both
    (⟨x_0, x_j⟩²).  The model is linear in (v, c), so fitting is ridge
    regression on the M·(d+1) (or M·d) features
    φ_h = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) [x_j; 1] (see :func:`fit_ridge`).

    Parameters
    ----------
    heads : int
        Number of heads M.
    qk_mean : {"zero", "identity"}
        Mean of the query–key matrices.
    activation : {"relu", "tanh"}
        σ.  The paper uses ReLU.
    alpha : float > 0 or sequence of them
        Ridge penalty in units of the mean squared norm of the centred
        features; several values are chosen from by GCV.
    value_bias : bool
        Give every head a trainable value bias c_h.
    fit_intercept : bool
        Fit an unpenalised intercept.
    random_state : None, int or numpy.random.Generator
        Seed of the frozen query–key matrices.

    Attributes
    ----------
    query_keys_ : array (M, d, d), the frozen Q_h.
    values_ : array (M, d), the fitted value vectors v_h.
    value_biases_ : array (M,), the fitted c_h (zeros without ``value_bias``).
    coef_ : array (M·(d+1),) or (M·d,), the weights in feature order
        (head by head, v_h then c_h).
    intercept_ : float.
    alpha_ : float, the α used.
    dim_ : int, the token dimension d.
    n_features_in_ : int, the token dimension d.
    report_ : dict, the solver route, penalty λ, sizes and time.
    """

    _size_parameter = "heads"
    _parameter_constraints = {
        "heads": [Integer(1)],
        "qk_mean": [Options(*QK_MEANS)],
        "activation": [Options(*ACTIVATIONS)],
        "alpha": ALPHA_CONSTRAINTS,
        "value_bias": [Boolean()],
        "fit_intercept": [Boolean()],
        "random_state": [Seed()],
    }

    def __init__(self, heads=64, *, qk_mean="zero", activation="relu", alpha=1.0, value_bias=True,
                 fit_intercept=True, random_state=None):
        self.heads = heads
        self.qk_mean = qk_mean
        self.activation = activation
        self.alpha = alpha
        self.value_bias = value_bias
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def _store_weights(self) -> None:
        weights = self.coef_.reshape(self.query_keys_.shape[0], -1)
        self.values_ = weights[:, :self.dim_].copy()
        self.value_biases_ = weights[:, self.dim_].copy() if self.value_bias else np.zeros(len(weights))

    def _check_X(self, X, fitted: bool) -> np.ndarray:
        X = _check_sequences(X)
        if fitted and X.shape[2] != self.dim_:
            raise ValueError(f"X: expected token dimension {self.dim_} as in fit, received shape {X.shape}")
        return X

    def _feature_count(self, X) -> int:
        return int(self.heads) * (X.shape[2] + bool(self.value_bias))

    def _frozen_entries(self, X) -> int:
        # Q_h, and the copy padded for the value bias that _features makes.
        return 2 * int(self.heads) * (X.shape[2] + 1) ** 2

    def _draw(self, X, rng) -> int:
        dim = X.shape[2]
        heads = int(self.heads)
        mean = 1.0 / np.sqrt(dim) if self.qk_mean == "identity" else 0.0
        self.query_keys_ = rng.standard_normal((heads, dim, dim)) / dim + mean * np.eye(dim)
        self.dim_ = dim
        return self._feature_count(X)

    def _features(self, X) -> np.ndarray:
        if not self.value_bias:
            return kernels.attention_random_features(X, self.query_keys_, self.activation)
        # Tokens [x; 1] with Q_h padded by a zero row and column: the logits are
        # unchanged and the last coordinate of φ_h is (1/N) Σ_j σ(x_0ᵀ Q_h x_j).
        n, length, dim = X.shape
        tokens = np.ones((n, length, dim + 1))
        tokens[:, :, :dim] = X
        padded = np.zeros((self.query_keys_.shape[0], dim + 1, dim + 1))
        padded[:, :dim, :dim] = self.query_keys_
        return kernels.attention_random_features(tokens, padded, self.activation)


class RandomFeatureMLP(_RandomFeatureRidge):
    r"""Random-feature ReLU network on the flattened sequence: the baseline of Fu, Guo, Bai & Mei (2023).

    With x = vec(x_{0:N}) ∈ R^D, D = (N+1)·d,

        f(x) = Σ_{k=1}^{p} a_k · ReLU(⟨w_k, x⟩ + b_k),   w_k ~ N(0, I_D / D),  b_k ~ N(0, 1) frozen,

    (b_k = 0 with ``bias=False``), so ⟨w_k, x⟩ has unit variance when
    ‖x‖² = D; the biases are the first layer acting on the constant
    coordinate of [x; √D].  Without them ReLU features of an input of fixed
    norm span no odd polynomial of degree ≥ 3.  The output weights a_k are
    fitted by ridge regression (see :func:`fit_ridge`).  For the same number
    of trainable weights as :class:`RandomFeatureAttention` with M heads use
    ``features = M·(d+1)`` (``M·d`` without value biases).  The model ignores
    the query/key structure: it is not invariant to permuting the keys.

    Parameters
    ----------
    features : int
        Number of random features p (= trainable weights).
    alpha : float > 0 or sequence of them
        Ridge penalty in units of the mean squared norm of the centred
        features; several values are chosen from by GCV.
    bias : bool
        Give every random feature a frozen Gaussian bias b_k.
    fit_intercept : bool
        Fit an unpenalised intercept.
    random_state : None, int or numpy.random.Generator
        Seed of the frozen first layer.

    Attributes
    ----------
    weights_ : array (D, p), the frozen first layer (columns w_k).
    offsets_ : array (p,), the frozen biases b_k (zeros without ``bias``).
    coef_ : array (p,), the fitted output weights a_k.
    intercept_ : float.
    alpha_ : float, the α used.
    input_shape_ : tuple (N+1, d).
    n_features_in_ : int, the token dimension d.
    report_ : dict, the solver route, penalty λ, sizes and time.
    """

    _size_parameter = "features"
    _parameter_constraints = {
        "features": [Integer(1)],
        "alpha": ALPHA_CONSTRAINTS,
        "bias": [Boolean()],
        "fit_intercept": [Boolean()],
        "random_state": [Seed()],
    }

    def __init__(self, features=1024, *, alpha=1.0, bias=True, fit_intercept=True, random_state=None):
        self.features = features
        self.alpha = alpha
        self.bias = bias
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def _check_X(self, X, fitted: bool) -> np.ndarray:
        X = check_inputs(X)
        if fitted and X.shape[1:] != self.input_shape_:
            raise ValueError(f"X: expected sequences of shape {self.input_shape_} as in fit, "
                             f"received shape {X.shape}")
        return X

    def _feature_count(self, X) -> int:
        return int(self.features)

    def _frozen_entries(self, X) -> int:
        return (X.shape[1] * X.shape[2] + 1) * int(self.features)  # the first layer and its biases

    def _draw(self, X, rng) -> int:
        _, length, dim = X.shape
        width, features = length * dim, int(self.features)
        self.weights_ = rng.standard_normal((width, features)) / np.sqrt(width)
        self.offsets_ = rng.standard_normal(features) if self.bias else np.zeros(features)
        self.input_shape_ = (length, dim)
        return features

    def _features(self, X) -> np.ndarray:
        return kernels.mlp_random_features(X, self.weights_, self.offsets_)


__all__ = ["ACTIVATIONS", "QK_MEANS", "RandomFeatureAttention", "RandomFeatureMLP"]
