"""The scikit-learn estimator contract of every estimator in mhalearn (issue 15, item 5).

Two suites:

* scikit-learn's own ``check_estimator`` checks, through
  ``parametrize_with_checks``, on the estimators of 2-D inputs (the
  sparse-variables students and the parity search, inputs (n, T) of ±1
  bits).  scikit-learn's checks draw their own data — real-valued X, labels
  such as 0/1/2 or strings — which these estimators refuse by design, so the
  checks that fit on such data are listed in ``_EXPECTED_FAILURES`` with the
  reason; the checks that need no fit, or only an unfitted estimator, run.
* A contract suite of our own on every estimator, with data each can take
  (the attention learners and the random-feature models take batches of
  sequences (n, k, d)): NotFittedError before ``fit``, clone and
  get/set_params round trips, refit determinism under a fixed
  ``random_state``, pickling that keeps the predictions, ``n_features_in_``,
  and a ``score`` equal to the metric its docstring names, computed here
  independently.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import scipy.sparse
from sklearn.base import clone, is_classifier, is_regressor
from sklearn.exceptions import NotFittedError
from sklearn.metrics import r2_score
from sklearn.utils.estimator_checks import (
    check_estimator_cloneable,
    check_estimator_repr,
    check_get_params_invariance,
    check_mixin_order,
    check_no_attributes_set_in_init,
    check_set_params,
    parametrize_with_checks,
)

import mhalearn
from mhalearn._estimator import pooled_r2
from mhalearn._validation import check_boolean

# ----------------------------------------------------------------- the data


def _teacher_sequences():
    """Boolean sequences (60, 3, 3) labelled by a planted one-head layer (the learners' data)."""
    teacher = mhalearn.sample_teacher(1, 3, rng=0)
    return mhalearn.make_dataset(teacher, 60, 3, rng=1)


def _scalar_sequences():
    """Gaussian sequences (50, 4, 3) (a query and three keys) with one real target each."""
    rng = np.random.default_rng(2)
    X = rng.standard_normal((50, 4, 3))
    return X, np.sin(X[:, 0, 0]) + np.sum(X[:, 0] * X[:, 1], axis=1) / 3


def _bits():
    """±1 bits (64, 10) labelled by the majority of three of them."""
    task = mhalearn.SparseBooleanTask(10, 3, "majority", rng=3)
    return task.sample(64, rng=4)


#: (estimator with small budgets, its data) — every estimator the package exports.
CASES = [
    (mhalearn.GradientLearner(1, max_iter=20, random_state=0), _teacher_sequences),
    (mhalearn.GradientLearner(1, method="adam", max_iter=3, batch_size=16, random_state=0), _teacher_sequences),
    (mhalearn.MomentLearner(1, search=mhalearn.SearchSettings(max_candidates=50, refine_iter=20), random_state=0),
     _teacher_sequences),
    (mhalearn.SculptLearner(1, search=mhalearn.SearchSettings(max_candidates=50, refine_iter=20), random_state=0),
     _teacher_sequences),
    (mhalearn.RandomFeatureAttention(heads=4, random_state=0), _scalar_sequences),
    (mhalearn.RandomFeatureMLP(features=16, random_state=0), _scalar_sequences),
    (mhalearn.AttentionStudent(embedding_dim=4, hidden=4, steps=20, random_state=0), _bits),
    (mhalearn.MLPStudent(hidden=4, steps=20, random_state=0), _bits),
    (mhalearn.SparseParitySearch(1, random_state=0), _bits),
]
_IDS = [f"{type(estimator).__name__}-{index}" for index, (estimator, _) in enumerate(CASES)]


def test_every_exported_estimator_is_covered():
    # QueryLearner is fitted on an oracle, not on (X, Y): tests/test_queries.py holds its contract.
    exported = [getattr(mhalearn, name) for name in mhalearn.__all__ if name != "QueryLearner"]
    estimators = {cls for cls in exported if isinstance(cls, type) and hasattr(cls, "fit")}
    assert estimators == {type(estimator) for estimator, _ in CASES}


def _methods(estimator):
    return [name for name in ("predict", "decision_function", "transform") if hasattr(estimator, name)]


# ------------------------------------------------------- the contract suite

@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_unfitted_estimator_raises_not_fitted_error(estimator, data):
    X, y = data()
    estimator = clone(estimator)
    for method in _methods(estimator):
        with pytest.raises(NotFittedError):
            getattr(estimator, method)(X)
    with pytest.raises(NotFittedError):
        estimator.score(X, y)


@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_constructor_stores_parameters_and_clone_round_trips(estimator, data):
    name = type(estimator).__name__
    # scikit-learn's own checks that need no data: they apply to any input shape.
    for check in (check_no_attributes_set_in_init, check_get_params_invariance, check_set_params,
                  check_estimator_repr, check_estimator_cloneable, check_mixin_order):
        check(name, clone(estimator))
    params = estimator.get_params()
    twin = clone(estimator)
    assert twin is not estimator and twin.get_params() == params
    assert twin.set_params(**params) is twin and twin.get_params() == params
    fitted = clone(estimator).fit(*data())
    refreshed = clone(fitted)
    assert refreshed.get_params() == params
    assert not [key for key in vars(refreshed) if key.endswith("_") and not key.startswith("_")]


@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_fit_returns_self_and_refits_identically_with_a_fixed_seed(estimator, data):
    X, y = data()
    first = clone(estimator)
    assert first.fit(X, y) is first
    second = clone(estimator).fit(X, y)
    again = first.fit(X, y)  # refitting the same object starts afresh
    for method in _methods(estimator):
        np.testing.assert_array_equal(getattr(second, method)(X), getattr(first, method)(X))
        np.testing.assert_array_equal(getattr(again, method)(X), getattr(first, method)(X))
    # n_features_in_: the token dimension of sequences, the number of bits of a row of bits.
    assert first.n_features_in_ == X.shape[-1]


@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_pickling_keeps_the_predictions(estimator, data):
    X, y = data()
    fitted = clone(estimator).fit(X, y)
    restored = pickle.loads(pickle.dumps(fitted))
    assert restored.get_params() == fitted.get_params()
    for method in _methods(fitted):
        np.testing.assert_array_equal(getattr(restored, method)(X), getattr(fitted, method)(X))
    assert restored.score(X, y) == fitted.score(X, y)


@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_score_is_the_metric_the_estimator_type_promises(estimator, data):
    X, y = data()
    fitted = clone(estimator).fit(X, y)
    prediction = fitted.predict(X)
    if is_classifier(fitted):  # accuracy of the predicted labels, which are the classes
        assert set(np.unique(prediction)) <= set(fitted.classes_)
        assert fitted.score(X, y) == np.mean(prediction == y)
    else:  # R², pooled over every output entry: 1 − Σ residual² / Σ (y − mean output)²
        assert is_regressor(fitted)
        outputs = y.reshape(-1, y.shape[-1]) if y.ndim == 3 else y[:, None]
        residual = prediction.reshape(outputs.shape) - outputs
        expected = 1.0 - np.sum(residual ** 2) / np.sum((outputs - outputs.mean(axis=0)) ** 2)
        assert fitted.score(X, y) == pytest.approx(expected, rel=1e-12, abs=1e-12)


_REGRESSION_CASES = [(estimator, data) for estimator, data in CASES if is_regressor(estimator)]


@pytest.mark.parametrize("scale", [1e300, 1e-300])
@pytest.mark.parametrize("estimator, data", _REGRESSION_CASES,
                         ids=[f"{type(estimator).__name__}-{index}" for index, (estimator, _) in
                              enumerate(_REGRESSION_CASES)])
def test_r2_does_not_depend_on_the_units_of_the_labels(estimator, data, scale):
    # Labels near the largest (smallest) float: their squares overflow (underflow) in the sums of R².
    X, y = data()
    expected = clone(estimator).fit(X, y).score(X, y)
    assert 0.1 < expected <= 1.0
    assert clone(estimator).fit(X, scale * y).score(X, scale * y) == pytest.approx(expected, rel=1e-6)


def test_pooled_r2_weighs_samples_and_pools_outputs():
    rng = np.random.default_rng(0)
    Y_true, Y_pred = rng.standard_normal((30, 4)), rng.standard_normal((30, 4))
    weights = rng.uniform(0.5, 2.0, 30)
    mean = weights @ Y_true / weights.sum()
    expected = 1.0 - weights @ np.sum((Y_pred - Y_true) ** 2, axis=1) / (weights @ np.sum((Y_true - mean) ** 2, axis=1))
    assert pooled_r2(Y_true, Y_pred, weights) == pytest.approx(expected, rel=1e-12)
    assert pooled_r2(1e300 * Y_true, 1e300 * Y_pred, weights) == pytest.approx(expected, rel=1e-12)
    assert pooled_r2(Y_true[:, 0], Y_pred[:, 0]) == pytest.approx(r2_score(Y_true[:, 0], Y_pred[:, 0]), rel=1e-12)
    assert pooled_r2(Y_true, Y_true) == 1.0


@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_sparse_input_is_refused_naming_the_argument(estimator, data):
    X, y = data()
    with pytest.raises(ValueError, match="^X: expected a dense array, received a sparse csr_matrix"):
        clone(estimator).fit(scipy.sparse.csr_matrix(X.reshape(len(X), -1)), y)


def test_students_refuse_real_inputs_without_naming_an_option_they_lack():
    X, y = _bits()
    for student in (mhalearn.AttentionStudent(steps=2), mhalearn.MLPStudent(steps=2), mhalearn.SparseParitySearch(1)):
        with pytest.raises(ValueError, match=r"^X: expected Boolean entries in \{-1, \+1\}, received values such as "
                                             r"\[0\.5, 0\.5, 0\.5\]$"):
            student.fit(np.where(X > 0, 0.5, -1.0), y)


def test_classifier_accuracy_weighs_examples():
    X, y = _bits()
    student = mhalearn.MLPStudent(hidden=4, steps=20, random_state=0).fit(X, y)
    correct = student.predict(X) == y
    assert 0 < correct.mean() < 1  # some wrong: the weights matter
    weights = np.arange(len(y), dtype=float)
    assert student.score(X, y, sample_weight=weights) == pytest.approx(weights @ correct / weights.sum(), rel=1e-12)


def test_pooled_r2_weighs_sequences():
    X, Y = _teacher_sequences()
    learner = mhalearn.GradientLearner(1, max_iter=5, random_state=0).fit(X, Y)
    weights = np.zeros(len(X))
    weights[:20] = 1.0
    assert learner.score(X, Y, sample_weight=weights) == pytest.approx(learner.score(X[:20], Y[:20]), rel=1e-12)
    assert learner.score(X, Y, sample_weight=2 * np.ones(len(X))) == pytest.approx(learner.score(X, Y), rel=1e-12)


# ------------------------------------------- scikit-learn's checks (2-D inputs)

_REAL_X = ("fits on real-valued X (and labels 0/1/2 or strings); the estimator takes ±1 bits and "
           "±1 labels only (Edelman et al.'s Boolean task)")
_WORDING = ("asks for scikit-learn's own error wording; the estimator refuses this input with a "
            "ValueError in its own words, naming the argument (the package-wide convention)")

#: Every check of check_estimator that cannot apply to an estimator of ±1 bits, with the reason.
_EXPECTED_FAILURES = {
    "check_fit_score_takes_y": _REAL_X,
    "check_estimators_overwrite_params": _REAL_X,
    "check_dont_overwrite_parameters": _REAL_X,
    "check_estimators_fit_returns_self": _REAL_X,
    "check_readonly_memmap_input": _REAL_X,
    "check_n_features_in_after_fitting": _REAL_X,
    "check_positive_only_tag_during_fit": _REAL_X,
    "check_estimators_dtypes": _REAL_X,
    "check_pipeline_consistency": _REAL_X,
    "check_estimators_nan_inf": _REAL_X + " (X with NaN is refused, as not ±1)",
    "check_estimators_pickle": _REAL_X,
    "check_f_contiguous_array_estimator": _REAL_X,
    "check_classifier_data_not_an_array": _REAL_X,
    "check_classifiers_one_label": _REAL_X,
    "check_classifier_not_supporting_multiclass": _REAL_X + " (three labels are refused too, as not ±1, "
                                                            "in the package's words)",
    "check_classifiers_classes": _REAL_X,
    "check_classifiers_train": _REAL_X,
    "check_supervised_y_2d": _REAL_X,
    "check_methods_sample_order_invariance": _REAL_X,
    "check_methods_subset_invariance": _REAL_X,
    "check_dict_unchanged": _REAL_X,
    "check_fit_idempotent": _REAL_X,
    "check_fit_check_is_fitted": _REAL_X,
    "check_n_features_in": _REAL_X,
    "check_fit2d_predict1d": _REAL_X,
    "check_dtype_object": "fits on an object array of real numbers; the estimator refuses object arrays "
                          "and takes ±1 bits only",
    "check_complex_data": _WORDING,
    "check_estimators_empty_data_messages": _WORDING,
    "check_fit2d_1sample": _WORDING,
    "check_fit2d_1feature": _WORDING,
    "check_requires_y_none": _WORDING,
    "check_classifiers_regression_target": _WORDING,
}


@parametrize_with_checks([estimator for estimator, data in CASES if data is _bits],
                         expected_failed_checks=lambda estimator: _EXPECTED_FAILURES)
def test_sklearn_check_estimator_on_the_estimators_of_bits(estimator, check):
    check(estimator)


@pytest.mark.parametrize("estimator, data", CASES, ids=_IDS)
def test_boolean_flags_take_numpy_booleans_but_not_integers(estimator, data):
    from mhalearn._validation import Boolean

    flags = [name for name, constraints in type(estimator)._parameter_constraints.items()
             if any(isinstance(constraint, Boolean) for constraint in constraints)]
    for name in flags:
        value = estimator.get_params()[name]
        clone(estimator).set_params(**{name: np.bool_(value)})._check_params()
        with pytest.raises(ValueError, match=f"^{name}: expected True or False"):
            clone(estimator).set_params(**{name: int(value)})._check_params()


@pytest.mark.parametrize("bad", [0.5, 0.0, np.nan, np.inf, -1.0000000000000002])
@pytest.mark.parametrize("where", [0, 4095, 4096, 3 * 4 * 1000 - 1])
def test_boolean_check_finds_one_bad_entry_anywhere(bad, where):
    X = np.where(np.arange(3 * 4 * 1000) % 3 == 0, 1.0, -1.0).reshape(1000, 3, 4)
    check_boolean(X)
    bits = X.astype(np.int8)  # bits are checked in their own dtype (no float64 copy)
    check_boolean(bits)
    bits.reshape(-1)[where] = 0
    with pytest.raises(ValueError, match=r"^X: expected Boolean entries"):
        check_boolean(bits)
    X.reshape(-1)[where] = bad
    # NaN and ±inf are damaged inputs, named as such: allow_non_boolean would not make them acceptable.
    message = r"^X: expected Boolean entries" if np.isfinite(bad) else r"^X: expected finite values, received 1 "
    with pytest.raises(ValueError, match=message):
        check_boolean(X)
