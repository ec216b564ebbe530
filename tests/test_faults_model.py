"""Faults of issue 12 outside the learners: wrong answers without a word, wrong types, overflow.

Each test drives one case of the fault matrix and fails on the code before
the fix (it raised AttributeError/ZeroDivisionError, or returned inf/NaN or a
model that cannot be used).
"""

import warnings

import numpy as np
import pytest

import mhalearn
from mhalearn.attention import kernels
from mhalearn.attention.model import MultiHeadAttention, head_collapse, match_heads, parameter_error, relative_error


@pytest.fixture
def teacher():
    return mhalearn.sample_teacher(2, 4, rng=0)


def test_layer_of_dimension_zero_is_refused():
    with pytest.raises(ValueError, match=r"thetas: expected dim >= 1"):
        MultiHeadAttention(np.zeros((1, 0, 0)), np.zeros((1, 0, 0)))


def test_overflowing_logits_are_refused_at_predict(teacher):
    X = mhalearn.boolean_inputs(5, 4, 4, rng=0) * 1e154  # finite, but x·Θ·x overflows
    with pytest.raises(ValueError, match=r"X: expected inputs whose attention logits .* stay finite"):
        teacher.predict(X)
    with pytest.raises(ValueError, match="attention logits"):
        teacher.attention(X)


def test_overflowing_logits_are_refused_by_the_public_kernels(teacher):
    X = mhalearn.boolean_inputs(5, 4, 4, rng=0) * 1e154
    for call in (lambda: kernels.forward(X, teacher.thetas, teacher.ws), lambda: kernels.attention(X, teacher.thetas)):
        with pytest.raises(ValueError, match="attention logits"):
            call()


def test_large_but_safe_inputs_still_give_finite_outputs(teacher):
    X = mhalearn.boolean_inputs(5, 4, 4, rng=0) * 1e100  # logits ≈ 1e200: one-hot attention, finite
    out = teacher.predict(X)
    assert np.all(np.isfinite(out))
    # one-hot rows: every output row is the chosen token times W_i, so |F| ≤ Σ_i ‖W_i‖_1 · 1e100
    assert np.max(np.abs(out)) <= 1e100 * np.abs(teacher.ws).sum()


def test_relative_error_with_a_zero_reference_is_refused(teacher):
    zero = MultiHeadAttention(teacher.thetas, np.zeros_like(teacher.ws))
    X = mhalearn.boolean_inputs(10, 3, 4, rng=1)
    with pytest.raises(ValueError, match="reference: expected outputs that are not all zero"):
        relative_error(teacher, zero, X)
    assert relative_error(zero, teacher, X) == pytest.approx(1.0)  # the other way round is defined


@pytest.mark.parametrize("call, argument", [
    (lambda t, X: relative_error(None, t, X), "model"),
    (lambda t, X: relative_error(t, "teacher", X), "reference"),
    (lambda t, X: match_heads(None, t), "model"),
    (lambda t, X: parameter_error(t, np.zeros((2, 4, 4))), "reference"),
    (lambda t, X: head_collapse(t, None), "reference"),
])
def test_wrong_types_name_the_argument(teacher, call, argument):
    X = mhalearn.boolean_inputs(3, 3, 4, rng=1)
    with pytest.raises(TypeError, match=rf"^{argument}: expected"):
        call(teacher, X)


def test_register_family_refuses_what_is_not_a_family():
    with pytest.raises(TypeError, match=r"^family: expected a TeacherFamily"):
        mhalearn.register_family("str")
    with pytest.raises(TypeError, match=r"^family.build: expected a callable"):
        mhalearn.register_family(mhalearn.TeacherFamily("not-callable", "", build=3))
    assert "not-callable" not in mhalearn.TEACHER_FAMILIES


def test_label_noise_on_nan_labels_is_refused():
    Y = np.zeros((2, 3, 4))
    Y[0, 1, 2] = np.nan
    with pytest.raises(ValueError, match=r"Y: expected finite values"):
        mhalearn.add_label_noise(Y, 0.1, rng=0)
    with pytest.raises(ValueError, match=r"Y: expected finite values"):
        mhalearn.add_label_noise(Y, 0.0)


def test_random_feature_fit_on_overflowing_inputs_is_refused():
    target = mhalearn.make_random_feature_target("correlation-relu", 4, rng=0)
    X, y = mhalearn.make_sequence_dataset(target, 40, 3, rng=0)
    model = mhalearn.RandomFeatureAttention(8, random_state=0)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # numpy/scipy may warn about the overflow before the check
        with pytest.raises(ValueError, match="X: expected inputs whose random features stay finite"):
            model.fit(X * 1e200, y)
        model.fit(X, y)  # the same data at its own scale fits; predicting on huge inputs is refused too
        with pytest.raises(ValueError, match="random features stay finite"):
            model.predict(X * 1e200)


# ------------------------------------------- arguments of the wrong kind (issue 22)

def test_make_dataset_without_a_teacher_names_the_argument():
    with pytest.raises(TypeError, match=r"^teacher: expected a MultiHeadAttention, received NoneType \(None\)$"):
        mhalearn.make_dataset(None, 10, 3)


@pytest.mark.parametrize("call, message", [
    (lambda path, teacher: MultiHeadAttention.load(None), r"^path: expected a file path \(str or os.PathLike\), "
                                                          r"received NoneType \(None\)$"),
    (lambda path, teacher: MultiHeadAttention.load(123), r"^path: expected a file path .*, received int \(123\)$"),
    (lambda path, teacher: teacher.save(None), r"^path: expected a file path .*, received NoneType \(None\)$"),
    (lambda path, teacher: MultiHeadAttention.load(path, max_bytes="a"),
     r"^max_bytes: expected an integer >= 1, received 'a'$"),
    (lambda path, teacher: mhalearn.boolean_inputs(2, 2, 2, rng=-1),
     r"^rng: expected None, an integer seed >= 0 or a numpy.random.Generator, received -1$"),
    (lambda path, teacher: mhalearn.sample_teacher(1, 3, w_scales=["a"]),
     r"^w_scales: expected a numeric array, received dtype <U1$"),
])
def test_arguments_of_the_wrong_kind_are_named(tmp_path, teacher, call, message):
    path = tmp_path / "model.npz"
    teacher.save(path)
    with pytest.raises((TypeError, ValueError), match=message):
        call(path, teacher)


def _patch_member_headers(path, **fields) -> None:
    """Set fields of every member's local and central zip header: ``flags`` (bit 0: encrypted) or ``method``."""
    data = bytearray(path.read_bytes())
    offsets = {b"PK\x03\x04": {"flags": 6, "method": 8}, b"PK\x01\x02": {"flags": 8, "method": 10}}
    for signature, places in offsets.items():
        start = data.find(signature)
        while start != -1:
            for name, value in fields.items():
                data[start + places[name]:start + places[name] + 2] = value.to_bytes(2, "little")
            start = data.find(signature, start + 4)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("fields, message", [
    ({"flags": 1}, r"^path: member \w+\.npy of '.*' is encrypted; an mhalearn model is not"),
    ({"method": 99}, r"^path: member \w+\.npy of '.*' is compressed with method 99, which zipfile cannot read"),
])
def test_a_model_file_with_an_encrypted_or_unknown_member_is_refused(tmp_path, teacher, fields, message):
    path = tmp_path / "model.npz"
    teacher.save(path)
    _patch_member_headers(path, **fields)
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention.load(path)


def _fitted_estimators(teacher):
    """One fitted estimator of each family, with its test inputs and labels (8 samples)."""
    X, Y = mhalearn.make_dataset(teacher, 60, 3, rng=1)
    learner = mhalearn.learners.get_learner("gradient")(2, max_iter=5, random_state=0).fit(X, Y)
    target = mhalearn.make_random_feature_target("correlation-relu", 4, rng=0)
    X_rf, y_rf = mhalearn.make_sequence_dataset(target, 40, 3, rng=0)
    random_features = mhalearn.RandomFeatureAttention(8, random_state=0).fit(X_rf, y_rf)
    X_bits, y_bits = mhalearn.SparseBooleanTask(8, 2, "parity", rng=0).sample(40, rng=1)
    search = mhalearn.SparseParitySearch(2, random_state=0).fit(X_bits, y_bits)
    return [(learner, X[:8], Y[:8]), (random_features, X_rf[:8], y_rf[:8]), (search, X_bits[:8], y_bits[:8])]


def test_score_checks_sample_weight_in_every_estimator(teacher):
    for estimator, X, y in _fitted_estimators(teacher):
        name = type(estimator).__name__
        for weights, message in [(np.ones(5), r"^sample_weight: expected shape \(8,\), one weight per sample, "
                                              r"received shape \(5,\)$"),
                                 (-np.ones(8), r"^sample_weight: expected weights >= 0 with a positive sum"),
                                 (np.zeros(8), r"^sample_weight: expected weights >= 0 with a positive sum"),
                                 ([1.0] * 7 + [np.nan], r"^sample_weight: expected finite values")]:
            with pytest.raises(ValueError, match=message):
                estimator.score(X, y, sample_weight=weights)
                pytest.fail(f"{name} accepted sample_weight {weights!r}")
        weights = np.arange(1.0, 9.0)
        assert estimator.score(X, y, sample_weight=weights) == pytest.approx(
            estimator.score(np.repeat(X, np.arange(1, 9), axis=0), np.repeat(y, np.arange(1, 9), axis=0))), name
