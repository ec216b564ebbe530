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
