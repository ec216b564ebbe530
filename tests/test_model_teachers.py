import numpy as np
import pytest

import mhalearn
from mhalearn import MultiHeadAttention
from mhalearn.attention import reference


def test_model_predict_and_attention_match_reference(rng):
    teacher = mhalearn.sample_teacher(3, 5, rng=rng)
    X = mhalearn.boolean_inputs(20, 6, 5, rng=rng)
    np.testing.assert_allclose(teacher.predict(X), reference.forward(X, teacher.thetas, teacher.ws), atol=1e-10)
    assert teacher.attention(X).shape == (20, 3, 6, 6)
    assert teacher.heads == 3 and teacher.dim == 5


def test_save_load_roundtrip(tmp_path, rng):
    teacher = mhalearn.sample_teacher(2, 4, rng=rng)
    path = tmp_path / "teacher.npz"
    teacher.save(path)
    loaded = MultiHeadAttention.load(path)
    np.testing.assert_array_equal(loaded.thetas, teacher.thetas)
    np.testing.assert_array_equal(loaded.ws, teacher.ws)


def test_load_refuses_garbage_and_wrong_version(tmp_path, rng):
    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"not a zip file at all")
    with pytest.raises(ValueError, match="path"):
        MultiHeadAttention.load(garbage)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, format=np.array("mhalearn.MultiHeadAttention"), version=np.array(99),
             thetas=np.zeros((1, 2, 2)), ws=np.zeros((1, 2, 2)))
    with pytest.raises(ValueError, match="version 99"):
        MultiHeadAttention.load(wrong)
    other = tmp_path / "other.npz"
    np.savez(other, a=np.zeros(3))
    with pytest.raises(ValueError, match="expected an mhalearn model with members"):
        MultiHeadAttention.load(other)


@pytest.mark.parametrize("thetas, ws, message", [
    (np.zeros((2, 3)), np.zeros((2, 3, 3)), "thetas: expected an array of rank 3"),
    (np.zeros((0, 3, 3)), np.zeros((0, 3, 3)), "heads >= 1"),
    (np.zeros((2, 3, 4)), np.zeros((2, 3, 4)), "thetas: expected shape"),
    (np.zeros((2, 3, 3)), np.zeros((1, 3, 3)), "ws: expected shape"),
    (np.full((1, 2, 2), np.nan), np.zeros((1, 2, 2)), "thetas: expected finite"),
])
def test_bad_parameters_raise_naming_argument(thetas, ws, message):
    with pytest.raises(ValueError, match=message):
        MultiHeadAttention(thetas, ws)


def test_bad_inputs_raise_naming_argument(rng):
    teacher = mhalearn.sample_teacher(1, 4, rng=rng)
    with pytest.raises(ValueError, match="X: expected an array of rank 3"):
        teacher.predict(np.zeros((4, 4)))
    with pytest.raises(ValueError, match="X: expected token dimension 4"):
        teacher.predict(np.zeros((2, 3, 5)))
    with pytest.raises(ValueError, match="X: expected finite"):
        teacher.predict(np.full((2, 3, 4), np.inf))
    with pytest.raises(ValueError, match="heads"):
        mhalearn.sample_teacher(0, 4)


def test_teacher_is_reproducible_and_nondegenerate():
    a = mhalearn.sample_teacher(3, 6, rng=7)
    b = mhalearn.sample_teacher(3, 6, rng=np.random.default_rng(7))
    np.testing.assert_array_equal(a.thetas, b.thetas)
    report = mhalearn.nondegeneracy(a)
    assert report.ok
    np.testing.assert_allclose(report.theta_norms, 2.0)
    assert report.gram_ratio >= 0.2 and report.w_sum_condition <= 20


def test_nondegeneracy_flags_repeated_heads(rng):
    teacher = mhalearn.sample_teacher(2, 4, rng=rng)
    repeated = MultiHeadAttention(np.stack([teacher.thetas[0]] * 2), teacher.ws)
    report = mhalearn.nondegeneracy(repeated)
    assert not report.heads_distinct and not report.ok
    assert report.gram_ratio < 1e-10


def test_impossible_conditions_raise_clear_error():
    with pytest.raises(ValueError, match="non-degeneracy"):
        mhalearn.sample_teacher(3, 3, rng=0, max_tries=5, condition_ceiling=1.0)


def test_relative_error_and_head_matching(rng):
    teacher = mhalearn.sample_teacher(3, 4, rng=rng)
    X = mhalearn.boolean_inputs(50, 5, 4, rng=rng)
    permuted = MultiHeadAttention(teacher.thetas[[2, 0, 1]], teacher.ws[[2, 0, 1]])
    assert mhalearn.relative_error(permuted, teacher, X) < 1e-24
    errors = mhalearn.parameter_error(permuted, teacher)
    assert errors["total"] == 0.0 and errors["matching"] == [1, 2, 0]
    perturbed = MultiHeadAttention(permuted.thetas, permuted.ws * 1.1)
    assert mhalearn.parameter_error(perturbed, teacher)["w"] == pytest.approx(0.1)
    assert mhalearn.relative_error(perturbed, teacher, X) == pytest.approx(0.01)


def test_inputs_and_noise(rng):
    X = mhalearn.boolean_inputs(100, 3, 2, rng=1)
    assert set(np.unique(X)) == {-1.0, 1.0}
    np.testing.assert_array_equal(X, mhalearn.boolean_inputs(100, 3, 2, rng=1))
    teacher = mhalearn.sample_teacher(1, 2, rng=rng)
    X, Y = mhalearn.make_dataset(teacher, 4000, 3, noise=0.1, rng=2)
    assert np.std(Y - teacher.predict(X)) == pytest.approx(0.1, rel=0.05)
    with pytest.raises(ValueError, match="law"):
        mhalearn.draw_inputs("uniform", 2, 2, 2)
    with pytest.raises(ValueError, match="samples"):
        mhalearn.boolean_inputs(0, 2, 2)


def test_families_registered():
    assert {"random", "peaked", "shared"} <= set(mhalearn.TEACHER_FAMILIES)
    peaked = mhalearn.make_teacher("peaked", 2, 4, rng=0)
    np.testing.assert_allclose(mhalearn.nondegeneracy(peaked).theta_norms, 8.0)
    with pytest.raises(ValueError, match="random"):
        mhalearn.make_teacher("nope", 2, 4)
