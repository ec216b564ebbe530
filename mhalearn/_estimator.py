"""The scikit-learn estimator contract shared by every estimator of mhalearn ([design: learners]).

* :func:`check_fitted` — the one not-fitted check: scikit-learn's
  ``check_is_fitted``, so every estimator raises ``NotFittedError`` (a
  ``ValueError`` and ``AttributeError``) when used before ``fit``.
* :class:`Estimator` — the base of every estimator: hyper-parameters are
  declared once in ``_parameter_constraints`` and checked at the start of
  ``fit`` (:meth:`Estimator._check_params`); an estimator is fitted once
  ``fit`` has set ``n_features_in_``, which every ``fit`` sets last.
* :class:`Settings` — the base of the frozen settings objects that carry a
  learner's rarely turned knobs as one parameter (``SculptLearner(body=...)``),
  reached by scikit-learn's nested names (``body__quantile``).
* :class:`SequenceRegressorMixin` — regressors whose inputs are batches of
  sequences, shape (n, k, d): ``n_features_in_`` is the token dimension d and
  the tags say the input is a 3-D array.
* :func:`pooled_r2` — the R² of every regressor's ``score``, computed in
  units of the largest label so that it holds for labels of any size.

The learners of a multi-head attention layer predict sequences (n, k, d) and
their ``score`` is R² pooled over every output entry; the random-feature
models predict one number per sequence and score R² as every scikit-learn
regressor.  The sparse-variables students are classifiers of ±1 bits
(their ``score`` is accuracy).
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import check_is_fitted

from ._validation import check_hyperparameters

#: The attribute every ``fit`` sets last: its presence means the estimator is fitted.
FITTED_ATTRIBUTE = "n_features_in_"


def check_fitted(estimator) -> None:
    """Raise ``sklearn.exceptions.NotFittedError`` unless ``estimator.fit`` has completed."""
    check_is_fitted(estimator, FITTED_ATTRIBUTE)


def store_parameters(estimator, parameters: dict) -> None:
    """Store a constructor's arguments (its ``locals()``) as attributes of the same names, unchanged.

    scikit-learn's rule: ``__init__`` stores its parameters and does nothing
    else, so ``get_params``, ``clone`` and ``set_params`` see exactly what
    the user passed; validation waits for ``fit``.
    """
    for name, value in parameters.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


class Settings:
    """Base of a frozen dataclass of settings that an estimator takes as one parameter.

    scikit-learn's nested-parameter convention reaches each setting:
    ``get_params(deep=True)`` of the estimator lists ``body__quantile`` for
    the ``quantile`` of its ``body`` parameter, and
    ``set_params(body__quantile=0.02)`` replaces ``body`` with a copy that
    holds the new value (the object itself is frozen: a default shared by
    every estimator is never changed).  ``clone`` keeps the object, which
    no one can change.  Subclasses check their values in ``__post_init__``.
    """

    def get_params(self, deep: bool = True) -> dict:
        """Every setting by name (``deep`` is scikit-learn's and changes nothing: settings hold no estimator)."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def replace(self, **changes) -> Settings:
        """A copy with ``changes`` (checked as when made); ``ValueError`` naming a setting that does not exist."""
        unknown = sorted(set(changes) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"{type(self).__name__}: expected settings among "
                             f"{[field.name for field in dataclasses.fields(self)]}, received {unknown}")
        return dataclasses.replace(self, **changes)

    def __sklearn_clone__(self) -> Settings:
        return self

    def __repr__(self) -> str:
        # Only the settings that differ from their defaults, as scikit-learn prints an estimator.
        changed = ", ".join(f"{field.name}={getattr(self, field.name)!r}" for field in dataclasses.fields(self)
                            if getattr(self, field.name) != field.default)
        return f"{type(self).__name__}({changed})"


class Estimator(BaseEstimator):
    """Base of every mhalearn estimator (see the module docstring).

    Subclasses declare ``_parameter_constraints`` (name → list of allowed
    constraints from :mod:`mhalearn._validation`) for every constructor
    argument, call :meth:`_check_params` first thing in ``fit`` and set
    ``n_features_in_`` last.  A parameter holding :class:`Settings` is set
    by nested names, ``set_params(body__quantile=0.02)``.
    """

    _parameter_constraints: dict = {}

    def set_params(self, **params) -> Estimator:
        """Set parameters as scikit-learn does; ``NAME__SETTING`` replaces the :class:`Settings` held by
        ``NAME`` with a copy holding the new value (plain names are set first)."""
        nested, plain = defaultdict(dict), {}
        for key, value in params.items():
            name, nesting, setting = key.partition("__")
            if nesting:
                nested[name][setting] = value
            else:
                plain[key] = value
        super().set_params(**plain)
        parameters = self.get_params(deep=False)
        for name, changes in nested.items():
            if isinstance(parameters.get(name), Settings):
                setattr(self, name, parameters[name].replace(**changes))
            else:
                super().set_params(**{f"{name}__{setting}": value for setting, value in changes.items()})
        return self

    def _check_params(self) -> None:
        """Check every hyper-parameter against ``_parameter_constraints`` (``ValueError`` naming it)."""
        check_hyperparameters(self)

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, FITTED_ATTRIBUTE)


def pooled_r2(Y_true, Y_pred, sample_weight=None) -> float:
    """R², the coefficient of determination, pooled over every output.

    R² = 1 − Σ_i w_i ‖ŷ_i − y_i‖² / Σ_i w_i ‖y_i − ȳ‖², with ȳ the weighted
    mean row: scikit-learn's ``r2_score(..., multioutput="variance_weighted")``.
    Both arrays are divided by the largest absolute label first, so the sums
    of squares neither overflow (labels near 1e300) nor underflow (near 1e-300);
    R² does not depend on the units of the labels.

    Parameters
    ----------
    Y_true, Y_pred : array of shape (samples,) or (samples, outputs)
        Labels and predictions.
    sample_weight : array of shape (samples,), optional
        Weight of each sample (row); equal weights by default.

    Returns
    -------
    float
        1 for a perfect fit, 0 for the weighted mean row; as in scikit-learn,
        constant labels give 1 when predicted exactly and 0 otherwise.
    """
    Y_true = np.asarray(Y_true, dtype=float).reshape(len(Y_true), -1)
    Y_pred = np.asarray(Y_pred, dtype=float).reshape(Y_true.shape)
    peak = float(np.max(np.abs(Y_true), initial=0.0)) or 1.0
    Y_true, Y_pred = Y_true / peak, Y_pred / peak
    weights = np.ones(len(Y_true)) if sample_weight is None else np.asarray(sample_weight, dtype=float)
    mean = weights @ Y_true / np.sum(weights)
    residual = float(weights @ np.sum((Y_pred - Y_true) ** 2, axis=1))
    total = float(weights @ np.sum((Y_true - mean) ** 2, axis=1))
    if total == 0.0:
        return 1.0 if residual == 0.0 else 0.0
    return 1.0 - residual / total


class SequenceRegressorMixin(RegressorMixin):
    """Regressor on batches of sequences X of shape (n, k, d); ``n_features_in_`` is d."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.two_d_array = False
        tags.input_tags.three_d_array = True
        return tags


__all__ = ["FITTED_ATTRIBUTE", "Estimator", "SequenceRegressorMixin", "Settings", "check_fitted", "pooled_r2",
           "store_parameters"]
