"""Random-feature attention and its random-feature MLP baseline (DESIGN.md §4.3).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

Both models are linear in their trainable weights over frozen random
features φ(X) ∈ R^p, so fitting is ridge regression:

    (v̂, b̂) = argmin_{v, b}  Σ_i (y_i − b − ⟨v, φ(X_i)⟩)² + λ ‖v‖²,
    λ = α · (1/n) Σ_i ‖φ(X_i) − φ̄‖²,

i.e. scikit-learn's ``Ridge(alpha=α)`` after scaling the centred features to
unit mean squared norm (in kernel form: kernel ridge regression with penalty α
on a Gram matrix whose diagonal averages 1).  The intercept b is not
penalised; ``fit_intercept=False`` drops it (and the centring).

The solver never holds more than a block of the n × p feature matrix when
n > p: it accumulates the p × p Gram matrix ΦᵀΦ and Φᵀy block by block
(shifted by the first block's means for accuracy) and solves the normal
equations by Cholesky (``scipy.linalg.solve``, ``assume_a="pos"``).  When
n ≤ p it solves the n × n dual system (ΦΦᵀ + λI)c = y, v = Φᵀc instead.
"""

from __future__ import annotations

import time

import numpy as np
import scipy.linalg
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.exceptions import NotFittedError

from .. import kernels
from .._validation import (
    as_float_array,
    as_generator,
    check_choice,
    check_inputs,
    check_positive_int,
    check_real,
)

QK_MEANS = ("zero", "identity")
ACTIVATIONS = kernels.RANDOM_FEATURE_ACTIVATIONS

# Rows of the feature matrix built at once: bounds the memory of fit and
# predict to about 32 MB of features plus the p × p Gram matrix.
_BLOCK_ENTRIES = 1 << 22


def _random_state(value) -> np.random.Generator:
    try:
        return as_generator(value)
    except ValueError:
        raise ValueError(f"random_state: expected None, an integer seed or a numpy.random.Generator, "
                         f"received {value!r}") from None


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


def _row_blocks(samples: int, features: int):
    size = max(1, _BLOCK_ENTRIES // max(features, 1))
    return [(start, min(samples, start + size)) for start in range(0, samples, size)]


def _solve_positive(matrix: np.ndarray, rhs: np.ndarray, report: dict) -> np.ndarray:
    """Solve matrix · x = rhs for a symmetric positive (semi)definite matrix.

    Cholesky first; if LAPACK reports the matrix numerically singular, fall
    back to a least-squares solve and record the fallback in ``report``.
    """
    try:
        solution = scipy.linalg.solve(matrix, rhs, assume_a="pos", check_finite=False)
        report["solver"] = "cholesky"
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError) as error:
        solution = scipy.linalg.lstsq(matrix, rhs, check_finite=False)[0]
        report["solver"] = "lstsq"
        report["solver_warning"] = f"Cholesky failed ({error}); used least squares"
    return solution


def fit_ridge(features_of, samples: int, width: int, y: np.ndarray, alpha: float,
              fit_intercept: bool = True) -> tuple[np.ndarray, float, dict]:
    """Ridge regression on features produced block by block.

    Parameters
    ----------
    features_of : callable ``(start, stop) -> array (stop − start, width)``,
        the features of samples ``start..stop``.
    samples, width : n and p.
    y : targets, shape (n,).
    alpha : penalty α > 0 in units of the mean squared norm of the centred
        features (see the module docstring).
    fit_intercept : fit an unpenalised intercept by centring.

    Returns
    -------
    coef : shape (p,).
    intercept : float (0 when ``fit_intercept`` is false).
    report : dict with the route (``"primal"`` or ``"dual"``), the penalty λ
        and the solver used.
    """
    report: dict = {}
    if samples <= width:
        # Dual: (ΦcΦcᵀ + λI) c = yc, v = Φcᵀ c.  Φ has n·p <= p² entries.
        Phi = features_of(0, samples)
        feature_mean = Phi.mean(axis=0) if fit_intercept else np.zeros(width)
        target_mean = float(y.mean()) if fit_intercept else 0.0
        Phi = Phi - feature_mean
        gram = Phi @ Phi.T
        penalty = alpha * max(np.trace(gram) / samples, np.finfo(float).tiny)
        gram[np.diag_indices_from(gram)] += penalty
        coef = Phi.T @ _solve_positive(gram, y - target_mean, report)
        report["route"] = "dual"
    else:
        # Primal: accumulate the centred p × p Gram matrix block by block.
        gram = np.zeros((width, width))
        moment = np.zeros(width)
        feature_shift = target_shift = None
        feature_sum = np.zeros(width)
        target_sum = 0.0
        for start, stop in _row_blocks(samples, width):
            block = features_of(start, stop)
            if feature_shift is None:
                feature_shift = block.mean(axis=0) if fit_intercept else np.zeros(width)
                target_shift = float(y[start:stop].mean()) if fit_intercept else 0.0
            block -= feature_shift
            targets = y[start:stop] - target_shift
            gram += block.T @ block
            moment += block.T @ targets
            feature_sum += block.sum(axis=0)
            target_sum += targets.sum()
        if fit_intercept:
            feature_delta, target_delta = feature_sum / samples, target_sum / samples
            gram -= samples * np.outer(feature_delta, feature_delta)
            moment -= samples * target_delta * feature_delta
            feature_mean = feature_shift + feature_delta
            target_mean = target_shift + target_delta
        else:
            feature_mean, target_mean = np.zeros(width), 0.0
        penalty = alpha * max(np.trace(gram) / samples, np.finfo(float).tiny)
        gram[np.diag_indices_from(gram)] += penalty
        coef = _solve_positive(gram, moment, report)
        report["route"] = "primal"
    report["penalty"] = float(penalty)
    intercept = float(target_mean - feature_mean @ coef) if fit_intercept else 0.0
    return coef, intercept, report


class _RandomFeatureRidge(RegressorMixin, BaseEstimator):
    """Shared fit/predict of a ridge regression over frozen random features.

    Subclasses implement ``_check_params()``, ``_check_X(X, fitted)``,
    ``_draw(X, rng)`` (sample and store the frozen parameters, return the
    feature count p) and ``_features(X)`` (the n × p feature matrix).
    """

    def transform(self, X) -> np.ndarray:
        """The random features φ(X), shape (n, p) (held in memory: use on moderate n)."""
        self._check_fitted()
        return self._features(self._check_X(X, fitted=True))

    def fit(self, X, y):
        """Fit the trainable weights by ridge regression.

        Parameters
        ----------
        X : array of shape (n, N+1, d); row 0 of each sequence is the query.
        y : array of shape (n,).

        Returns
        -------
        self
        """
        self._check_params()
        alpha = check_real(self.alpha, "alpha", low=0.0, low_open=True)
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise ValueError(f"fit_intercept: expected True or False, received {self.fit_intercept!r}")
        X = self._check_X(X, fitted=False)
        y = _check_targets(y, X.shape[0])
        start_time = time.perf_counter()
        width = self._draw(X, _random_state(self.random_state))
        self.coef_, self.intercept_, report = fit_ridge(
            lambda start, stop: self._features(X[start:stop]), X.shape[0], width, y, alpha,
            bool(self.fit_intercept))
        report.update(samples=X.shape[0], features=width, seconds=time.perf_counter() - start_time)
        self.report_ = report
        return self

    def predict(self, X) -> np.ndarray:
        """Predictions ⟨v̂, φ(X_i)⟩ + b̂, shape (n,), computed in blocks of samples."""
        self._check_fitted()
        X = self._check_X(X, fitted=True)
        out = np.empty(X.shape[0])
        for start, stop in _row_blocks(X.shape[0], self.coef_.shape[0]):
            out[start:stop] = self._features(X[start:stop]) @ self.coef_
        return out + self.intercept_

    def _check_fitted(self) -> None:
        if not hasattr(self, "coef_"):
            raise NotFittedError(f"{type(self).__name__}: call fit before predict or transform")


class RandomFeatureAttention(_RandomFeatureRidge):
    r"""Random-feature attention layer with frozen query–key matrices (Fu, Guo, Bai & Mei 2023).

    For a query x_0 and keys x_1..x_N in R^d (row 0 and rows 1..N of each
    input sequence),

        f(x_{0:N}) = Σ_{h=1}^{M} (1/N) Σ_{j=1}^{N} σ(x_0ᵀ Q_h x_j) ⟨v_h, x_j⟩,

    with frozen Q_h = G_h/d + b·I/√d, G_h having i.i.d. standard Gaussian
    entries, b = 0 for ``qk_mean="zero"`` and b = 1 for ``qk_mean="identity"``
    (the biased sampler of the paper, which favours targets that depend on
    ⟨x_0, x_j⟩).  With ‖x‖ = √d the logit x_0ᵀ Q_h x_j has a random part of
    unit variance and, for ``identity``, the part ⟨x_0, x_j⟩/√d.  The value
    vectors v_h ∈ R^d are trainable; the model is linear in them, so fitting is
    ridge regression on the M·d features
    φ_h = (1/N) Σ_j σ(x_0ᵀ Q_h x_j) x_j (see :func:`fit_ridge`).

    Parameters
    ----------
    heads : int
        Number of heads M (the model has M·d trainable weights).
    qk_mean : {"zero", "identity"}
        Mean of the query–key matrices.
    activation : {"relu", "tanh"}
        σ.  The paper uses ReLU.
    alpha : float > 0
        Ridge penalty in units of the mean squared norm of the centred
        features.
    fit_intercept : bool
        Fit an unpenalised intercept.
    random_state : None, int or numpy.random.Generator
        Seed of the frozen query–key matrices.

    Attributes
    ----------
    query_keys_ : array (M, d, d), the frozen Q_h.
    values_ : array (M, d), the fitted value vectors v_h.
    coef_ : array (M·d,), the same weights flattened.
    intercept_ : float.
    dim_ : int, the token dimension d.
    report_ : dict, the solver route, penalty λ, sizes and time.
    """

    def __init__(self, heads=64, *, qk_mean="zero", activation="relu", alpha=1.0,
                 fit_intercept=True, random_state=None):
        self.heads = heads
        self.qk_mean = qk_mean
        self.activation = activation
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def fit(self, X, y):
        """Fit the value vectors by ridge regression.

        Parameters
        ----------
        X : array of shape (n, N+1, d); row 0 of each sequence is the query
            x_0, rows 1..N the keys.
        y : array of shape (n,).

        Returns
        -------
        self
        """
        super().fit(X, y)
        self.values_ = self.coef_.reshape(self.query_keys_.shape[0], self.dim_)
        return self

    def _check_params(self) -> None:
        check_positive_int(self.heads, "heads")
        check_choice(self.qk_mean, "qk_mean", QK_MEANS)
        check_choice(self.activation, "activation", ACTIVATIONS)

    def _check_X(self, X, fitted: bool) -> np.ndarray:
        X = _check_sequences(X)
        if fitted and X.shape[2] != self.dim_:
            raise ValueError(f"X: expected token dimension {self.dim_} as in fit, received shape {X.shape}")
        return X

    def _draw(self, X, rng) -> int:
        dim = X.shape[2]
        heads = int(self.heads)
        bias = 1.0 if self.qk_mean == "identity" else 0.0
        self.query_keys_ = rng.standard_normal((heads, dim, dim)) / dim + bias * np.eye(dim) / np.sqrt(dim)
        self.dim_ = dim
        return heads * dim

    def _features(self, X) -> np.ndarray:
        return kernels.attention_random_features(X, self.query_keys_, self.activation)


class RandomFeatureMLP(_RandomFeatureRidge):
    r"""Random-feature ReLU network on the flattened sequence: the baseline of Fu, Guo, Bai & Mei (2023).

    With x = vec(x_{0:N}) ∈ R^D, D = (N+1)·d,

        f(x) = Σ_{k=1}^{p} a_k · ReLU(⟨w_k, x⟩),   w_k ~ N(0, I_D / D) frozen,

    so ⟨w_k, x⟩ has unit variance when ‖x‖² = D.  The output weights a_k are
    fitted by ridge regression (see :func:`fit_ridge`).  For the same
    parameter count as :class:`RandomFeatureAttention` with M heads use
    ``features = M·d``.  The model ignores the query/key structure: it is not
    invariant to permuting the keys.

    Parameters
    ----------
    features : int
        Number of random features p (= trainable weights).
    alpha : float > 0
        Ridge penalty in units of the mean squared norm of the centred
        features.
    fit_intercept : bool
        Fit an unpenalised intercept.
    random_state : None, int or numpy.random.Generator
        Seed of the frozen first layer.

    Attributes
    ----------
    weights_ : array (D, p), the frozen first layer (columns w_k).
    coef_ : array (p,), the fitted output weights a_k.
    intercept_ : float.
    input_shape_ : tuple (N+1, d).
    report_ : dict, the solver route, penalty λ, sizes and time.
    """

    def __init__(self, features=1024, *, alpha=1.0, fit_intercept=True, random_state=None):
        self.features = features
        self.alpha = alpha
        self.fit_intercept = fit_intercept
        self.random_state = random_state

    def _check_params(self) -> None:
        check_positive_int(self.features, "features")

    def _check_X(self, X, fitted: bool) -> np.ndarray:
        X = check_inputs(X)
        if fitted and X.shape[1:] != self.input_shape_:
            raise ValueError(f"X: expected sequences of shape {self.input_shape_} as in fit, "
                             f"received shape {X.shape}")
        return X

    def _draw(self, X, rng) -> int:
        _, length, dim = X.shape
        width = length * dim
        self.weights_ = rng.standard_normal((width, int(self.features))) / np.sqrt(width)
        self.input_shape_ = (length, dim)
        return int(self.features)

    def _features(self, X) -> np.ndarray:
        return kernels.mlp_random_features(X, self.weights_)


__all__ = ["ACTIVATIONS", "QK_MEANS", "RandomFeatureAttention", "RandomFeatureMLP", "fit_ridge"]
