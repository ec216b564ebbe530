"""Sparse variable creation (Edelman, Goel, Kakade & Zhang): task, students, kernels, experiment."""

import itertools
import math

import numba
import numpy as np
import pytest
from sklearn.base import clone

from mhalearn import kernels
from mhalearn.experiments import get_experiment
from mhalearn.experiments.sparse_variables import (growth_exponents, growth_ratios, run_sparse_variables_cell,
                                                   samples_to_accuracy)
from mhalearn.sparse import AttentionStudent, MLPStudent, SparseBooleanTask, boolean_function


# --------------------------------------------------------------------------
# NumPy reference of the attention head
# --------------------------------------------------------------------------

def reference_head(X, query, positions, bit_embeddings):
    """z_t = p_t + x_t r_t, a = softmax(⟨q, z_t⟩), pooled = Σ_t a_t z_t, all in plain NumPy."""
    tokens = positions[None] + X[:, :, None] * bit_embeddings[None]
    logits = tokens @ query
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return np.einsum("nt,nte->ne", weights, tokens), weights


def _head_problem(rng, n=13, length=9, dim=4):
    X = rng.choice([-1.0, 1.0], size=(n, length))
    return X, rng.standard_normal(dim), rng.standard_normal((length, dim)), rng.standard_normal((length, dim))


def _central_differences(function, arrays, step=1e-6):
    """Central differences of the scalar ``function()`` with respect to each array of ``arrays``."""
    numeric = []
    for array in arrays:
        grad = np.empty_like(array)
        for index in np.ndindex(array.shape):
            saved = array[index]
            array[index] = saved + step
            plus = function()
            array[index] = saved - step
            minus = function()
            array[index] = saved
            grad[index] = (plus - minus) / (2 * step)
        numeric.append(grad)
    return numeric


def test_head_forward_matches_reference(rng):
    X, query, positions, bit_embeddings = _head_problem(rng)
    pooled, weights = kernels.bit_attention_forward(X, query, positions, bit_embeddings)
    ref_pooled, ref_weights = reference_head(X, query, positions, bit_embeddings)
    np.testing.assert_allclose(weights, ref_weights, rtol=0, atol=1e-13)
    np.testing.assert_allclose(pooled, ref_pooled, rtol=0, atol=1e-12)
    np.testing.assert_allclose(weights.sum(axis=1), 1.0, atol=1e-13)


def test_head_forward_is_stable_for_large_logits(rng):
    X, query, positions, bit_embeddings = _head_problem(rng)
    pooled, weights = kernels.bit_attention_forward(X, 400.0 * query, positions, bit_embeddings)
    assert np.all(np.isfinite(pooled))
    np.testing.assert_allclose(weights, reference_head(X, 400.0 * query, positions, bit_embeddings)[1], atol=1e-12)


def test_head_backward_matches_central_differences(rng):
    X, query, positions, bit_embeddings = _head_problem(rng)
    upstream = rng.standard_normal((X.shape[0], query.size))
    pooled, weights = kernels.bit_attention_forward(X, query, positions, bit_embeddings)
    grads = kernels.bit_attention_backward(X, weights, query, positions, bit_embeddings, upstream)
    numeric = _central_differences(
        lambda: np.sum(upstream * reference_head(X, query, positions, bit_embeddings)[0]),
        [query, positions, bit_embeddings])
    for analytic, expected in zip(grads, numeric):
        np.testing.assert_allclose(analytic, expected, rtol=1e-6, atol=1e-8)


def test_head_backward_is_identical_for_any_thread_count(rng):
    X, query, positions, bit_embeddings = _head_problem(rng, n=8192)  # n·T above the parallel threshold
    assert X.size >= kernels._BIT_ATTENTION_PARALLEL_TOKENS
    upstream = rng.standard_normal((X.shape[0], query.size))
    _, weights = kernels.bit_attention_forward(X, query, positions, bit_embeddings)
    previous = numba.get_num_threads()
    try:
        results = []
        for threads in sorted({1, numba.config.NUMBA_NUM_THREADS}):
            numba.set_num_threads(threads)
            results.append(kernels.bit_attention_backward(X, weights, query, positions, bit_embeddings, upstream))
    finally:
        numba.set_num_threads(previous)
    for first, other in zip(results[0], results[-1]):
        np.testing.assert_array_equal(first, other)


@pytest.mark.parametrize("student", [AttentionStudent(embedding_dim=3, hidden=5), MLPStudent(hidden=4)],
                         ids=["attention", "mlp"])
def test_student_loss_gradient_matches_central_differences(student, rng):
    task = SparseBooleanTask(7, 3, "majority", rng=1)
    X, y = task.sample(19, rng=2)
    parameters = student._initial_parameters(7, rng)
    for value in parameters.values():  # move off the special initial point (query = 0, biases = 0)
        value += 0.5 * rng.standard_normal(value.shape)
    _, grads = student.loss_and_grad(parameters, X, y)
    names = sorted(parameters)
    numeric = _central_differences(lambda: student.loss_and_grad(parameters, X, y)[0],
                                   [parameters[name] for name in names])
    for name, expected in zip(names, numeric):
        np.testing.assert_allclose(grads[name], expected, rtol=1e-6, atol=1e-9, err_msg=name)


# --------------------------------------------------------------------------
# The task
# --------------------------------------------------------------------------

def test_boolean_functions_truth_tables():
    bits = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))
    plus_count = (bits > 0).sum(axis=1)
    np.testing.assert_array_equal(boolean_function("and", bits), np.where(plus_count == 3, 1.0, -1.0))
    np.testing.assert_array_equal(boolean_function("parity", bits), (-1.0) ** (3 - plus_count))
    np.testing.assert_array_equal(boolean_function("majority", bits), np.where(plus_count >= 2, 1.0, -1.0))


@pytest.mark.parametrize("function", ["and", "parity", "majority"])
def test_task_labels_are_g_of_the_support_bits(function):
    task = SparseBooleanTask(20, 3, function, rng=4)
    assert task.support.shape == (3,) and len(set(task.support.tolist())) == 3
    assert np.all(np.diff(task.support) > 0) and 0 <= task.support.min() and task.support.max() < 20
    X, y = task.sample(500, rng=5)
    assert X.shape == (500, 20) and y.shape == (500,)
    assert set(np.unique(X)) == {-1.0, 1.0} and set(np.unique(y)) <= {-1.0, 1.0}
    np.testing.assert_array_equal(y, boolean_function(function, X[:, task.support]))
    np.testing.assert_array_equal(task.labels(X), y)
    # flipping a bit outside S never changes the label; flipping one inside does for parity
    outside = np.setdiff1d(np.arange(20), task.support)[0]
    flipped = X.copy()
    flipped[:, outside] *= -1
    np.testing.assert_array_equal(task.labels(flipped), y)
    if function == "parity":
        flipped = X.copy()
        flipped[:, task.support[0]] *= -1
        np.testing.assert_array_equal(task.labels(flipped), -y)


def test_task_is_reproducible_and_uniform():
    first, second = SparseBooleanTask(64, 3, "and", rng=7), SparseBooleanTask(64, 3, "and", rng=7)
    np.testing.assert_array_equal(first.support, second.support)
    X1, y1 = first.sample(4000, rng=8)
    X2, y2 = second.sample(4000, rng=8)
    np.testing.assert_array_equal(X1, X2)
    np.testing.assert_array_equal(y1, y2)
    # AND of 3 uniform bits is true with probability 1/8
    assert abs(np.mean(y1 > 0) - 0.125) < 0.02
    assert abs(X1.mean()) < 0.01


@pytest.mark.parametrize("call, name", [
    (lambda: SparseBooleanTask(0, 1), "length"),
    (lambda: SparseBooleanTask(8, 0), "sparsity"),
    (lambda: SparseBooleanTask(8, 9, "and"), "sparsity"),
    (lambda: SparseBooleanTask(8, 2, "majority"), "sparsity"),
    (lambda: SparseBooleanTask(8, 3, "xor"), "function"),
    (lambda: SparseBooleanTask(8, 3, rng="seed"), "rng"),
    (lambda: SparseBooleanTask(8, 3).sample(0), "n"),
    (lambda: SparseBooleanTask(8, 3).labels(np.zeros((2, 8))), "X"),
    (lambda: SparseBooleanTask(8, 3).labels(np.ones((2, 7))), "X"),
])
def test_task_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        call()


# --------------------------------------------------------------------------
# The students
# --------------------------------------------------------------------------

def _small_problem(length=12, samples=64, function="majority"):
    task = SparseBooleanTask(length, 3, function, rng=0)
    return task.sample(samples, rng=1)


@pytest.mark.parametrize("call, name", [
    (lambda X, y: AttentionStudent().fit(X * 0.5, y), "X"),
    (lambda X, y: AttentionStudent().fit(X[:, :, None], y), "X"),
    (lambda X, y: AttentionStudent().fit(X, y[:-1]), "y"),
    (lambda X, y: AttentionStudent().fit(X, 2 * y), "y"),
    (lambda X, y: MLPStudent().fit(np.where(X > 0, np.nan, -1.0), y), "X"),
    (lambda X, y: AttentionStudent(embedding_dim=0).fit(X, y), "embedding_dim"),
    (lambda X, y: MLPStudent(hidden=2.5).fit(X, y), "hidden"),
    (lambda X, y: MLPStudent(learning_rate=0.0).fit(X, y), "learning_rate"),
    (lambda X, y: AttentionStudent(weight_decay=-1.0).fit(X, y), "weight_decay"),
    (lambda X, y: AttentionStudent(steps=0).fit(X, y), "steps"),
    (lambda X, y: MLPStudent(batch_size=0).fit(X, y), "batch_size"),
    (lambda X, y: AttentionStudent(random_state="a").fit(X, y), "random_state"),
    (lambda X, y: AttentionStudent(steps=2).fit(X, y).predict(X[:, :-1]), "X"),
    (lambda X, y: MLPStudent(steps=2).fit(X, y).score(X, y[:3]), "y"),
    (lambda X, y: MLPStudent().predict(X), "MLPStudent"),
])
def test_student_bad_input_names_the_argument(call, name):
    X, y = _small_problem()
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        call(X, y)


def test_students_follow_the_estimator_contract():
    X, y = _small_problem()
    student = AttentionStudent(embedding_dim=4, steps=50, random_state=3)
    assert student.get_params()["embedding_dim"] == 4
    assert student.set_params(hidden=6) is student and student.hidden == 6
    assert not hasattr(student, "parameters_")
    assert student.fit(X, y) is student
    assert student.parameters_["positions"].shape == (12, 4)
    assert student.parameters_["hidden_weights"].shape == (6, 4)
    assert student.loss_curve_.shape == (50,) and student.n_features_in_ == 12
    again = clone(student).fit(X, y)
    np.testing.assert_array_equal(again.predict(X), student.predict(X))
    other_seed = clone(student).set_params(random_state=4).fit(X, y)
    assert not np.array_equal(other_seed.predict(X), student.predict(X))
    scores = student.predict(X)
    assert scores.shape == (64,) and scores.dtype == np.float64
    assert student.score(X, y) == np.mean(np.where(scores >= 0, 1.0, -1.0) == y)
    mlp = MLPStudent(hidden=5, steps=30, random_state=0).fit(X, y)
    assert mlp.parameters_["hidden_weights"].shape == (5, 12)
    np.testing.assert_array_equal(clone(mlp).fit(X, y).predict(X), mlp.predict(X))


def test_training_lowers_the_loss():
    X, y = _small_problem(samples=128)
    for student in (AttentionStudent(steps=300, random_state=0), MLPStudent(steps=300, random_state=0)):
        curve = student.fit(X, y).loss_curve_
        assert curve[-20:].mean() < 0.5 * curve[:20].mean()


def test_attention_student_finds_the_support_and_generalises():
    """3-sparse majority of T = 32 bits from 160 examples: the head must attend to S to generalise.

    An MLP on raw bits is far from 95 % at this n (its samples-to-95 % grows
    ≈ linearly in T), so high accuracy here is evidence of variable creation.
    """
    task = SparseBooleanTask(32, 3, "majority", rng=11)
    X, y = task.sample(160, rng=12)
    X_test, y_test = task.sample(3000, rng=13)
    student = AttentionStudent(random_state=0).fit(X, y)
    assert student.score(X_test, y_test) >= 0.97
    mean_weights = student.attention(X_test).mean(axis=0)
    np.testing.assert_array_equal(np.sort(np.argsort(mean_weights)[-3:]), task.support)
    assert mean_weights[task.support].min() > 4 * np.delete(mean_weights, task.support).max()
    assert mean_weights[task.support].sum() > 0.3  # a uniform head puts 3/T ≈ 0.09 on S


@pytest.mark.slow
def test_attention_beats_mlp_on_long_sparse_majority():
    """At T = 128, n = 128: the attention student generalises, the MLP does not (Edelman et al.)."""
    accuracies = {"attention": [], "mlp": []}
    for seed in range(3):
        task = SparseBooleanTask(128, 3, "majority", rng=seed)
        X, y = task.sample(128, rng=100 + seed)
        X_test, y_test = task.sample(3000, rng=200 + seed)
        accuracies["attention"].append(AttentionStudent(random_state=seed).fit(X, y).score(X_test, y_test))
        accuracies["mlp"].append(MLPStudent(random_state=seed).fit(X, y).score(X_test, y_test))
    assert np.median(accuracies["attention"]) >= 0.95
    assert np.median(accuracies["mlp"]) <= 0.85


# --------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------

def test_experiment_grid_is_registered_and_unique():
    experiment = get_experiment("sparse-variables")
    for quick in (True, False):
        cells = experiment.cells(quick)
        keys = {tuple(sorted(cell.items())) for cell in cells}
        assert len(keys) == len(cells)
        assert all(isinstance(value, (str, int)) for cell in cells for value in cell.values())
    full = experiment.cells(False)
    assert {cell["length"] for cell in full} == {16, 32, 64, 128, 256}
    assert {cell["function"] for cell in full} == {"and", "parity", "majority"}
    assert {cell["student"] for cell in full} == {"attention", "mlp"}


def test_run_cell_is_deterministic_and_shares_data_across_students():
    cell = dict(function="and", student="attention", sparsity=3, length=16, samples=32, seed=0)
    first, second = run_sparse_variables_cell(cell), run_sparse_variables_cell(cell)
    assert first["test_accuracy"] == second["test_accuracy"]
    assert 0.0 <= first["test_accuracy"] <= 1.0 and 0.0 <= first["support_attention"] <= 1.0
    mlp = run_sparse_variables_cell(dict(cell, student="mlp"))
    assert mlp["support_attention"] is None and 0.0 <= mlp["train_accuracy"] <= 1.0
    with pytest.raises(ValueError, match="^student: expected"):
        run_sparse_variables_cell(dict(cell, student="cnn"))


def _synthetic_rows():
    """Rows whose samples-to-95 % is known: attention reaches it at 16·log2(T)/4, mlp at 4·T (above 512: never)."""
    rows = []
    for student, needed in (("attention", lambda T: 16 * math.log2(T) / 4), ("mlp", lambda T: 4 * T)):
        for length in (16, 64, 256):
            for samples in (8, 16, 32, 64, 128, 256, 512):
                for seed, noise in enumerate((-0.01, 0.0, 0.3)):
                    accuracy = (0.97 if samples >= needed(length) else 0.9) + noise
                    rows.append(dict(function="majority", student=student, sparsity=3, length=length,
                                     samples=samples, seed=seed, test_accuracy=accuracy))
    return rows


def test_samples_to_accuracy_uses_the_median_over_seeds():
    thresholds = samples_to_accuracy(_synthetic_rows())
    assert thresholds[("majority", "attention", 16)] == 16
    assert thresholds[("majority", "attention", 64)] == 32
    assert thresholds[("majority", "attention", 256)] == 32
    assert thresholds[("majority", "mlp", 16)] == 64
    assert thresholds[("majority", "mlp", 64)] == 256
    assert thresholds[("majority", "mlp", 256)] == math.inf
    ratios = growth_ratios(thresholds)
    assert ratios[("majority", "attention")] == 2.0
    assert ratios[("majority", "mlp")] == math.inf
    exponents = growth_exponents(thresholds)  # log2 T = 4, 6, 8 against log2 n = 4, 5, 5
    assert exponents[("majority", "attention")] == pytest.approx(0.25)
    assert math.isnan(exponents[("majority", "mlp")])


def test_plot_writes_the_figures_and_table(tmp_path):
    paths = get_experiment("sparse-variables").plot(_synthetic_rows(), tmp_path)
    assert sorted(path.name for path in paths) == ["sparse-variables-accuracy.png", "sparse-variables.png",
                                                   "sparse-variables.txt"]
    for path in paths[:2]:
        assert path.stat().st_size > 10_000
    text = (tmp_path / "sparse-variables.txt").read_text()
    assert "not reached" in text and "majority" in text
    with pytest.raises(ValueError, match="^rows: expected"):
        get_experiment("sparse-variables").plot([], tmp_path)
