"""Random-feature attention and its random-feature MLP baseline (docs/design.md §4.3).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

Both models are linear in their trainable weights over frozen random
features φ(X) ∈ R^p, so fitting is ridge regression:

    (v̂, b̂) = argmin_{v, b}  Σ_i (y_i − b − ⟨v, φ(X_i)⟩)² + λ ‖v‖²,
    λ = α · (1/n) Σ_i ‖φ(X_i) − φ̄‖²,

i.e. scikit-learn's ``Ridge(alpha=α)`` after scaling the centred features to
unit mean squared norm (in kernel form: kernel ridge regression with penalty α
on a Gram matrix whose diagonal averages 1), so α means the same for every
model, n, M and d.  The intercept b is not penalised; ``fit_intercept=False``
drops it (and the centring).

Given several candidate α, the one minimising generalised cross-validation
(Golub, Heath & Wahba 1979),

    GCV(λ) = (RSS(λ)/n) / (1 − (tr H(λ) + [intercept])/n)²,   H = Φ(ΦᵀΦ + λI)⁻¹Φᵀ,

is kept; one symmetric eigendecomposition gives every candidate's fit.

Memory: when n > p the n × p feature matrix is never held, only a block of
it: the solver accumulates the p × p Gram matrix ΦᵀΦ and Φᵀy block by block
(shifted by the first block's means, for accuracy) and solves the normal
equations by Cholesky (``scipy.linalg.solve``, ``assume_a="pos"``) or, for
several α, by ``scipy.linalg.eigh``.  When n ≤ p it solves the n × n dual
system (ΦΦᵀ + λI)c = y, v = Φᵀc instead.
"""

from __future__ import annotations

import numbers
import time

import numpy as np
import scipy.linalg
from threadpoolctl import threadpool_limits

from .._estimator import Estimator, SequenceRegressorMixin, check_fitted, pooled_r2
from .._memory import check_memory
from .._validation import (
    Boolean,
    Integer,
    Options,
    Real,
    RealSequence,
    Seed,
    as_float_array,
    as_generator,
    check_inputs,
    check_real,
    check_sample_weight,
)
from . import kernels

QK_MEANS = ("zero", "identity")
ACTIVATIONS = kernels.RANDOM_FEATURE_ACTIVATIONS

# Rows of the feature matrix built at once: bounds the memory of fit and
# predict to about 32 MB of features plus the p × p Gram matrix.
_BLOCK_ENTRIES = 1 << 22


#: The ridge penalty α: one positive number, or candidates for generalised cross-validation.
_ALPHA_CONSTRAINTS = [Real(0.0, low_open=True), RealSequence(Real(0.0, low_open=True))]


def _check_alphas(alpha) -> tuple[float, ...]:
    """α as a non-empty tuple of positive floats (a scalar gives a 1-tuple)."""
    if isinstance(alpha, numbers.Real) and not isinstance(alpha, (bool, np.bool_)):
        return (check_real(alpha, "alpha", low=0.0, low_open=True),)
    if isinstance(alpha, (str, bytes)):
        raise ValueError(f"alpha: expected a positive number or a non-empty sequence of them, received {alpha!r}")
    try:
        candidates = list(alpha)
    except TypeError:
        raise ValueError(f"alpha: expected a positive number or a non-empty sequence of them, "
                         f"received {alpha!r}") from None
    if not candidates:
        raise ValueError("alpha: expected a positive number or a non-empty sequence of them, received []")
    return tuple(check_real(value, "alpha", low=0.0, low_open=True) for value in candidates)


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


def _ridge_entries(samples: int, width: int) -> int:
    """Float64 entries :func:`fit_ridge` holds at once for n = ``samples`` and p = ``width``.

    Dual route: the n × p features, the n × n system and its factor or
    eigenvectors, and the coefficients.  Primal route: the p × p Gram
    matrix, the product of a block added to it, the factor or eigenvectors,
    and a block of features with the intermediates that make it.
    """
    if samples <= width:
        return samples * width + 2 * samples * samples + width
    return 3 * width * width + 2 * max(_BLOCK_ENTRIES, width)


def _centred_system(features_of, samples: int, width: int, y: np.ndarray, fit_intercept: bool) -> dict:
    """The centred normal system of the ridge problem, primal (p × p) or dual (n × n).

    Returns a dict with ``route``, ``matrix`` (ΦcᵀΦc or ΦcΦcᵀ), ``rhs``
    (Φcᵀyc or yc), ``features`` (Φc, dual only), ``feature_mean``,
    ``target_mean`` and ``target_ss`` = ‖yc‖².
    """
    if samples <= width:
        Phi = features_of(0, samples)
        feature_mean = Phi.mean(axis=0) if fit_intercept else np.zeros(width)
        target_mean = float(y.mean()) if fit_intercept else 0.0
        Phi -= feature_mean
        targets = y - target_mean
        return dict(route="dual", matrix=Phi @ Phi.T, rhs=targets, features=Phi,
                    feature_mean=feature_mean, target_mean=target_mean, target_ss=float(targets @ targets))
    return _centred_moments(features_of, samples, width, y, fit_intercept)


def _centred_moments(features_of, samples: int, width: int, y: np.ndarray, fit_intercept: bool = True) -> dict:
    """The primal system of :func:`_centred_system`, accumulated block by block; ``y`` may be (n,) or (n, t).

    With t targets, ``rhs`` is (p, t) and ``target_mean``, ``target_ss`` have
    shape (t,).  Each block is shifted by the first block's means before its
    products are summed, so the centring loses no accuracy to large means.
    """
    gram = np.zeros((width, width))
    moment = np.zeros((width,) + y.shape[1:])
    feature_sum = np.zeros(width)
    target_sum = np.zeros(y.shape[1:])
    target_ss = np.zeros(y.shape[1:])
    feature_shift = target_shift = None
    for start, stop in _row_blocks(samples, width):
        block = features_of(start, stop)
        if feature_shift is None:
            feature_shift = block.mean(axis=0) if fit_intercept else np.zeros(width)
            target_shift = y[start:stop].mean(axis=0) if fit_intercept else np.zeros(y.shape[1:])
        block -= feature_shift
        targets = y[start:stop] - target_shift
        gram += block.T @ block
        moment += block.T @ targets
        feature_sum += block.sum(axis=0)
        target_sum += targets.sum(axis=0)
        target_ss += np.sum(targets * targets, axis=0)
    feature_mean, target_mean = feature_shift, target_shift
    if fit_intercept:
        feature_delta, target_delta = feature_sum / samples, target_sum / samples
        gram -= samples * np.outer(feature_delta, feature_delta)
        moment -= samples * np.multiply.outer(feature_delta, target_delta)
        target_ss -= samples * target_delta ** 2
        feature_mean, target_mean = feature_shift + feature_delta, target_shift + target_delta
    if y.ndim == 1:
        target_mean, target_ss = float(target_mean), float(target_ss)
    return dict(route="primal", matrix=gram, rhs=moment, features=None, feature_mean=feature_mean,
                target_mean=target_mean, target_ss=target_ss)


def _solve_cholesky(matrix: np.ndarray, penalty: float, rhs: np.ndarray, report: dict) -> np.ndarray:
    """(matrix + penalty·I)⁻¹ rhs by Cholesky; least squares if LAPACK finds it singular."""
    shifted = matrix.copy()
    shifted[np.diag_indices_from(shifted)] += penalty
    try:
        solution = scipy.linalg.solve(shifted, rhs, assume_a="pos", check_finite=False)
        report["solver"] = "cholesky"
    except (np.linalg.LinAlgError, scipy.linalg.LinAlgError) as error:
        solution = scipy.linalg.lstsq(shifted, rhs, check_finite=False)[0]
        report["solver"] = "lstsq"
        report["solver_warning"] = f"Cholesky failed ({error}); used least squares"
    return solution


def fit_ridge(features_of, samples: int, width: int, y: np.ndarray, alpha=1.0,
              fit_intercept: bool = True) -> tuple[np.ndarray, float, float, dict]:
    """Ridge regression on features produced block by block.

    Parameters
    ----------
    features_of : callable ``(start, stop) -> array (stop − start, width)``,
        the features of samples ``start..stop`` (a fresh array).
    samples, width : n and p.
    y : targets, shape (n,).
    alpha : positive float, or a sequence of them to choose from by GCV; the
        penalty in units of the mean squared norm of the centred features,
        λ = α·tr(ΦcᵀΦc)/n (see the module docstring).
    fit_intercept : fit an unpenalised intercept by centring.

    Returns
    -------
    coef : shape (p,).
    intercept : float (0 when ``fit_intercept`` is false).
    alpha : the α used.
    report : dict with the route (``"primal"`` or ``"dual"``), the penalty λ,
        the solver and, for several α, their GCV scores.
    """
    alphas = _check_alphas(alpha)
    system = _centred_system(features_of, samples, width, y, fit_intercept)
    # One BLAS thread for the factorisations: their level-2 phases (the
    # tridiagonal reduction of eigh) with spinning OpenBLAS threads ran 30×
    # slower on a loaded 2-core machine (22 s vs 0.7 s for n = 1024).
    with threadpool_limits(limits=1, user_api="blas"):
        coef_or_dual, chosen, report = _solve_system(system, samples, alphas, fit_intercept)
    coef = system["features"].T @ coef_or_dual if system["route"] == "dual" else coef_or_dual
    intercept = float(system["target_mean"] - system["feature_mean"] @ coef) if fit_intercept else 0.0
    return coef, intercept, chosen, report


def _solve_system(system: dict, samples: int, alphas: tuple, fit_intercept: bool):
    """(matrix + λI)⁻¹ rhs for the given α, or for the GCV-best of several; see :func:`fit_ridge`."""
    matrix, rhs = system["matrix"], system["rhs"]
    scale = max(np.trace(matrix) / samples, np.finfo(float).tiny)
    report: dict = {"route": system["route"]}
    if len(alphas) == 1:
        chosen = alphas[0]
        solution = _solve_cholesky(matrix, chosen * scale, rhs, report)
    else:
        eigenvalues, eigenvectors = scipy.linalg.eigh(matrix, check_finite=False)
        eigenvalues = np.maximum(eigenvalues, 0.0)
        projected = eigenvectors.T @ rhs
        scores = []
        for candidate in alphas:
            penalty = candidate * scale
            if system["route"] == "dual":  # residual = U diag(λ/(s+λ)) Uᵀ yc
                rss = float(np.sum((penalty / (eigenvalues + penalty) * projected) ** 2))
            else:  # ‖yc‖² − Σ_k w_k² (s_k + 2λ)/(s_k + λ)², w = Vᵀ Φcᵀ yc
                rss = max(system["target_ss"] - float(np.sum(
                    projected ** 2 * (eigenvalues + 2 * penalty) / (eigenvalues + penalty) ** 2)), 0.0)
            dof = float(np.sum(eigenvalues / (eigenvalues + penalty))) + fit_intercept
            scores.append((rss / samples) / max(1.0 - dof / samples, np.finfo(float).eps) ** 2)
        chosen = alphas[int(np.argmin(scores))]
        penalty = chosen * scale
        solution = eigenvectors @ (projected / (eigenvalues + penalty))
        report.update(solver="eigh", gcv=dict(zip(alphas, scores)))
    report["penalty"] = float(chosen * scale)
    return solution, chosen, report


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
        check_memory(8 * (self._frozen_entries(X) + _ridge_entries(samples, width)), self._size_parameter,
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
        for start, stop in _row_blocks(X.shape[0], self.coef_.shape[0]):
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
        "alpha": _ALPHA_CONSTRAINTS,
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
        "alpha": _ALPHA_CONSTRAINTS,
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


__all__ = ["ACTIVATIONS", "QK_MEANS", "RandomFeatureAttention", "RandomFeatureMLP", "fit_ridge"]
