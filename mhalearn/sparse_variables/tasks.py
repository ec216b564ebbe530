"""The sparse Boolean task of the sparse-variables study: y = g(x_S) for a hidden support S.

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022
([design: sparse-variables]).

The teacher hides a support S ⊂ [T] of size s and labels x ∈ {±1}^T by
y = g(x_S) with g ∈ {AND, parity, majority} (:class:`SparseBooleanTask`,
:func:`boolean_function`).  This module also holds the checks of Boolean
inputs and labels and :class:`BooleanClassifier`, the scikit-learn base that
every learner of the task shares (the gradient-trained students of
:mod:`~mhalearn.sparse_variables.students` and the parity search of
:mod:`~mhalearn.sparse_variables.parity_search`).
"""

from __future__ import annotations

import numpy as np
from sklearn.base import ClassifierMixin

from .._estimator import Estimator, check_fitted
from .._validation import (
    as_float_array,
    as_generator,
    check_boolean,
    check_choice,
    check_dense,
    check_positive_int,
    check_sample_weight,
)

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


def check_bits(X, name: str = "X") -> np.ndarray:
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


def check_examples(X, y) -> tuple[np.ndarray, np.ndarray]:
    """Validate Boolean inputs (n, T) and labels (n,) in {±1}; X comes back as int8."""
    X = check_bits(X)
    y = as_float_array(y, "y", 1)
    if y.shape[0] != X.shape[0]:
        raise ValueError(f"y: expected {X.shape[0]} labels to match X, received {y.shape[0]}")
    if not np.all(np.abs(y) == 1.0):
        others = y[np.abs(y) != 1.0][:3].tolist()
        raise ValueError(f"y: expected labels in {{-1, +1}}, received values such as {others}")
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
        X = check_bits(X)
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


class BooleanClassifier(ClassifierMixin, Estimator):
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
        X = check_bits(X)
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
        X, y = check_examples(self._checked_inputs(X), y)
        weights = check_sample_weight(sample_weight, X.shape[0])
        return float(np.average(np.where(self._scores(X) >= 0.0, 1.0, -1.0) == y, weights=weights))


__all__ = ["BooleanClassifier", "FUNCTIONS", "SparseBooleanTask", "boolean_function", "check_bits", "check_examples"]
