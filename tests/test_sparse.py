"""Sparse variable creation (Edelman, Goel, Kakade & Zhang): task, students, kernels, experiment."""

import itertools
import json
import math

import numba
import numpy as np
import pytest
from sklearn.base import clone

from mhalearn._numba import dispatch_mode, kernel_threads
from mhalearn.experiments import get_experiment
from mhalearn.experiments import sparse_variables as experiment
from mhalearn.experiments.registry import Grid
from mhalearn.experiments.runner import grid_cells
from mhalearn.sparse_variables import (
    AttentionStudent,
    MLPStudent,
    SparseBooleanTask,
    SparseParitySearch,
    boolean_function,
    kernels,
    summary,
)
from mhalearn.sparse_variables.growth import bisect_samples, bootstrap_median, fit_growth_laws, law_curve

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


def test_head_kernels_are_identical_on_the_calling_thread_and_the_pool(rng):
    """Both paths of the dispatcher, at any thread count, compute the same chunks: the same bits."""
    X, query, positions, bit_embeddings = _head_problem(rng, n=8192)
    upstream = rng.standard_normal((X.shape[0], query.size))
    results = []
    for mode, threads in [("serial", 1)] + [("parallel", t) for t in sorted({1, numba.config.NUMBA_NUM_THREADS})]:
        with dispatch_mode(mode), kernel_threads(threads):
            pooled, weights = kernels.bit_attention_forward(X, query, positions, bit_embeddings)
            results.append((pooled, weights,
                            *kernels.bit_attention_backward(X, weights, query, positions, bit_embeddings, upstream)))
    for other in results[1:]:
        for first, again in zip(results[0], other):
            np.testing.assert_array_equal(first, again)


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
    np.testing.assert_array_equal(again.decision_function(X), student.decision_function(X))
    other_seed = clone(student).set_params(random_state=4).fit(X, y)
    assert not np.array_equal(other_seed.decision_function(X), student.decision_function(X))
    scores = student.decision_function(X)
    assert scores.shape == (64,) and scores.dtype == np.float64
    np.testing.assert_array_equal(student.predict(X), np.where(scores >= 0, 1.0, -1.0))
    assert student.score(X, y) == np.mean(np.where(scores >= 0, 1.0, -1.0) == y)
    mlp = MLPStudent(hidden=5, steps=30, random_state=0).fit(X, y)
    assert mlp.parameters_["hidden_weights"].shape == (5, 12)
    np.testing.assert_array_equal(clone(mlp).fit(X, y).decision_function(X), mlp.decision_function(X))


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
# Compact inputs and the parity search
# --------------------------------------------------------------------------

def test_int8_and_float_inputs_train_and_predict_alike():
    task = SparseBooleanTask(12, 3, "and", rng=0)
    X8, y = task.sample(64, rng=1, dtype=np.int8)
    X64, y64 = task.sample(64, rng=1)
    assert X8.dtype == np.int8 and X64.dtype == np.float64
    np.testing.assert_array_equal(X8, X64)  # same draws whatever the dtype
    np.testing.assert_array_equal(y, y64)
    for student in (AttentionStudent(steps=40, random_state=0), MLPStudent(steps=40, random_state=0)):
        first = clone(student).fit(X8, y)
        second = clone(student).fit(X64, y)
        np.testing.assert_array_equal(first.decision_function(X64), second.decision_function(X8))
    with pytest.raises(ValueError, match="^dtype: expected"):
        task.sample(4, dtype=np.float32)


def test_prediction_in_row_blocks_matches_one_block(monkeypatch):
    task = SparseBooleanTask(40, 3, "majority", rng=0)
    X, y = task.sample(300, rng=1)
    student = AttentionStudent(steps=30, random_state=0).fit(X, y)
    whole = student.decision_function(X)
    monkeypatch.setattr("mhalearn.sparse_variables.students._row_blocks",
                        lambda n, T: [(s, min(n, s + 7)) for s in range(0, n, 7)])
    np.testing.assert_allclose(student.decision_function(X), whole, rtol=1e-12, atol=1e-15)  # BLAS blocking differs
    weights = student.attention(X)
    assert student.support_attention(X, task.support) == pytest.approx(weights[:, task.support].sum(1).mean())


@pytest.mark.parametrize("sparsity", [1, 2, 3])
@pytest.mark.parametrize("samples", [6, 11, 80])
def test_parity_search_counts_exactly_the_consistent_parities(sparsity, samples):
    """Against brute force over every subset; 80 examples spans several packed bytes."""
    task = SparseBooleanTask(11, sparsity, "parity", rng=samples)
    X, y = task.sample(samples, rng=1)
    consistent = [subset for subset in itertools.combinations(range(11), sparsity)
                  if np.all(np.prod(X[:, subset], axis=1) == y)]
    search = SparseParitySearch(sparsity, random_state=0).fit(X, y)
    assert search.consistent_count_ == len(consistent)
    assert tuple(search.support_) in consistent
    np.testing.assert_array_equal(search.predict(X), y)


def test_parity_search_chooses_uniformly_among_consistent_parities():
    task = SparseBooleanTask(12, 3, "parity", rng=3)
    X, y = task.sample(5, rng=4)
    count = SparseParitySearch(random_state=0).fit(X, y).consistent_count_
    assert count >= 4
    chosen = [tuple(SparseParitySearch(random_state=seed).fit(X, y).support_) for seed in range(60 * count)]
    frequencies = np.array([chosen.count(subset) for subset in set(chosen)]) / len(chosen)
    assert len(set(chosen)) == count
    assert np.all(np.abs(frequencies - 1 / count) < 4 * np.sqrt(1 / count / len(chosen)))


def test_parity_search_identifies_the_support_from_logarithmically_many_samples():
    """With n = log2 C(T, 3) + 12 examples a wrong parity survives with probability < 2^-12."""
    task = SparseBooleanTask(512, 3, "parity", rng=5)
    samples = int(math.log2(math.comb(512, 3))) + 12
    X, y = task.sample(samples, rng=6, dtype=np.int8)
    search = SparseParitySearch(random_state=0).fit(X, y)
    assert search.consistent_count_ == 1
    np.testing.assert_array_equal(search.support_, task.support)
    X_test, y_test = task.sample(500, rng=7)
    assert search.score(X_test, y_test) == 1.0


def test_parity_search_without_a_consistent_parity_predicts_the_majority_label():
    X = np.array([[1, 1, 1], [1, 1, 1], [-1, 1, 1]])
    search = SparseParitySearch(3).fit(X, np.array([1.0, -1.0, 1.0]))  # two identical rows, two labels
    assert search.consistent_count_ == 0 and search.support_ is None
    np.testing.assert_array_equal(search.predict(X), [1.0, 1.0, 1.0])


@pytest.mark.parametrize("call, name", [
    (lambda X, y: SparseParitySearch(4).fit(X, y), "sparsity"),
    (lambda X, y: SparseParitySearch(3).fit(X[:, :2], y), "sparsity"),
    (lambda X, y: SparseParitySearch(3, random_state="a").fit(X, y), "random_state"),
    (lambda X, y: SparseParitySearch(3).fit(X, y[:-1]), "y"),
])
def test_parity_search_bad_input_names_the_argument(call, name):
    X, y = _small_problem(function="majority")
    with pytest.raises(ValueError, match=rf"^{name}: expected"):
        call(X, y)


def test_a_long_cell_fits_in_two_gibibytes():
    """T = 4096, n = 16 384 (the largest cell of the sweep): data, training and scoring within 2 GiB.

    tracemalloc sees every NumPy buffer; the training steps do not change the
    footprint (a few of them stand for the 1500 of the sweep).
    """
    import tracemalloc

    task = experiment.make_task("majority", sparsity=3, length=4096, seed=0)
    tracemalloc.start()
    try:
        X, y = experiment.training_set(task, 0, 16384)
        X_test, y_test = experiment.held_out_set(task, 0)
        for student in (AttentionStudent(steps=5, random_state=0), MLPStudent(steps=5, random_state=0)):
            student.fit(X, y).score(X, y)
            student.score(X_test, y_test)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert X.nbytes == 16384 * 4096  # one byte per bit
    assert peak < 2 * 2 ** 30 / 4, f"peak {peak / 2 ** 20:.0f} MiB"  # a quarter of the 2 GiB budget


# --------------------------------------------------------------------------
# Samples-to-target statistics
# --------------------------------------------------------------------------

@pytest.mark.parametrize("needed", [1, 8, 9, 37, 100, 1000, 5000])
@pytest.mark.parametrize("per_octave", [1, 2, 4])
def test_bisection_brackets_the_threshold_to_the_resolution(needed, per_octave):
    found, probes = bisect_samples(lambda n: float(n >= needed), target=0.95, start=8, max_samples=4096,
                                   per_octave=per_octave)
    if needed > 4096:
        assert found == math.inf and probes[-1] == (4096, 0.0)
        return
    assert found >= needed
    assert found == 8 or any(n < needed and n * 2 ** (1 / per_octave) * 1.0001 >= found - 1 for n, _ in probes)
    assert found / max(needed, 8) <= 2 ** (1 / per_octave) + 1 / needed
    assert len(probes) == len({n for n, _ in probes})  # no n evaluated twice


def test_bootstrap_median_and_not_reached():
    median, low, high = bootstrap_median([10, 12, 14, 16, 18, 20, 22, 24, 26, 28])
    assert median == 19 and low < 19 < high and 12 <= low and high <= 26
    assert bootstrap_median([5, math.inf, math.inf])[0] == math.inf
    assert bootstrap_median([5, 6, math.inf])[0] == 6


@pytest.mark.parametrize("seed", range(4))
def test_growth_fits_recover_the_law_that_made_the_data(seed):
    """10 seeds with 3 % noise per seed: n = 12·ln T is told from a power law, n = 3·√T from a log law.

    (With a large intercept, a + b·ln T bends too little over 16 <= T <= 4096
    to be told from T^α at this noise: the fits only discriminate curvature.)
    """
    rng = np.random.default_rng(seed)
    lengths = [16, 64, 256, 1024, 4096]
    logarithmic = {T: list(12 * math.log(T) * np.exp(0.03 * rng.standard_normal(10))) for T in lengths}
    power = {T: list(3 * T ** 0.5 * np.exp(0.03 * rng.standard_normal(10))) for T in lengths}
    fit = fit_growth_laws(logarithmic, resamples=200)
    assert fit.better == "log" and fit.delta_aic < -2
    assert fit.b_interval[0] <= fit.log_params[1] <= fit.b_interval[1]
    assert 12 * 0.85 < fit.b_interval[0] and fit.b_interval[1] < 12 * 1.15
    fit = fit_growth_laws(power, resamples=200)
    assert fit.better == "power" and fit.delta_aic > 2
    assert fit.alpha_interval[0] <= fit.power_params[1] <= fit.alpha_interval[1]
    assert 0.45 < fit.alpha_interval[0] and fit.alpha_interval[1] < 0.55
    np.testing.assert_allclose(law_curve("power", fit.power_params, [256]), 48, rtol=0.1)
    assert fit_growth_laws({16: [1.0], 32: [math.inf]}) is None


# --------------------------------------------------------------------------
# The experiment
# --------------------------------------------------------------------------

def test_experiment_grids_are_registered_and_unique():
    for name in ("sparse-variables", "sparse-variables-tuning"):
        for quick in (True, False):
            cells = get_experiment(name).cells(quick)
            keys = {tuple(sorted(cell.items())) for cell in cells}
            assert len(keys) == len(cells)
            assert all(isinstance(value, (str, int, float)) for cell in cells for value in cell.values())
    full = get_experiment("sparse-variables").cells(False)
    assert max(cell["length"] for cell in full) >= 4096
    for function, student in (("and", "attention"), ("and", "mlp"), ("majority", "attention"), ("majority", "mlp"),
                              ("parity", "parity-search")):
        assert len({cell["seed"] for cell in full if (cell["function"], cell["student"]) == (function, student)}) >= 10
    assert {(cell["function"], cell["student"]) for cell in full} == {
        ("and", "attention"), ("and", "mlp"), ("majority", "attention"), ("majority", "mlp"),
        ("parity", "attention"), ("parity", "mlp"), ("parity", "parity-search")}
    assert all(2 ** (1 / cell["per_octave"]) < 2 ** 0.5 for cell in full)
    tuning = get_experiment("sparse-variables-tuning").cells(False)
    assert {cell["sparsity"] for cell in tuning} == {2} and {cell["sparsity"] for cell in full} == {3}
    assert not {cell["seed"] for cell in tuning} & {cell["seed"] for cell in full}


def test_training_sets_are_nested_and_shared_by_the_students():
    task = experiment.make_task("and", sparsity=3, length=20, seed=4)
    small = experiment.training_set(task, 4, 700)
    large = experiment.training_set(task, 4, 2500)
    np.testing.assert_array_equal(large[0][:700], small[0])
    np.testing.assert_array_equal(large[1][:700], small[1])
    np.testing.assert_array_equal(large[1], task.labels(large[0]))
    X_test, _ = experiment.held_out_set(task, 4)
    assert not any((X_test[:50, None, :] == large[0][None]).all(-1).any(1))  # no test row among training rows


def test_run_cell_is_deterministic_and_reports_the_bisection():
    cell = dict(function="and", student="attention", sparsity=3, length=16, seed=0, target=0.95, start=8,
                max_samples=256, per_octave=2, steps=300, learning_rate=0.01, weight_decay=0.5)
    first, second = experiment.run_sparse_variables_cell(cell), experiment.run_sparse_variables_cell(cell)
    assert first == {**second, "fit_seconds": first["fit_seconds"]}
    probes = json.loads(first["probes"])
    assert first["fits"] == len(probes) and 0.0 <= first["support_attention"] <= 1.0
    if first["samples_to_target"] is not None:
        assert dict(map(tuple, probes))[first["samples_to_target"]] >= 0.95
        assert all(accuracy < 0.95 for n, accuracy in probes if n < first["samples_to_target"])
    assert len(json.loads(first["loss_curve"])) == 40
    search = experiment.run_sparse_variables_cell(dict(function="parity", student="parity-search", sparsity=3,
                                                       length=64, seed=0, target=0.95, start=8, max_samples=256,
                                                       per_octave=4))
    assert search["loss_curve"] is None and 8 < search["samples_to_target"] <= 40
    with pytest.raises(ValueError, match="^student: expected"):
        experiment.run_sparse_variables_cell(dict(cell, student="cnn"))
    with pytest.raises(ValueError, match="^student: 'parity-search'"):
        experiment.run_sparse_variables_cell(dict(cell, student="parity-search"))


def _synthetic_rows():
    """Rows of a sweep: attention needs 6·ln T samples, the MLP 2·T (not reached above 512),
    parity search log2 C(T, 3)."""
    rows = []
    rng = np.random.default_rng(0)
    base = dict(sparsity=3, target=0.95, start=8, max_samples=512, per_octave=4, steps=100)
    laws = {("and", "attention"): lambda T: 6 * math.log(T), ("and", "mlp"): lambda T: 2 * T,
            ("parity", "parity-search"): lambda T: math.log2(math.comb(T, 3))}
    for (function, student), law in laws.items():
        for length in (16, 64, 256, 1024):
            for seed in range(5):
                needed = law(length) * math.exp(0.1 * rng.standard_normal())
                reached = needed <= 512
                largest = int(min(needed, 512))
                rows.append(dict(base, function=function, student=student, length=length, seed=seed,
                                 samples_to_target=int(needed) if reached else None,
                                 probes=json.dumps([[8, 0.6], [largest, 0.97 if reached else 0.8]]),
                                 largest_samples=largest, train_accuracy=1.0, test_accuracy=0.97 if reached else 0.8,
                                 final_loss=0.01 if student != "parity-search" else None,
                                 loss_curve=json.dumps([0.69, 0.3, 0.01]) if student != "parity-search" else None))
    return rows


def test_summary_tables_fit_the_right_laws():
    tables = {title.split(":")[0].split(" (")[0]: lines for title, _, lines in
              summary.summary_tables(_synthetic_rows())}
    fits = {tuple(line[:2]): line for line in tables["growth laws fitted to the medians"]}
    assert fits[("and", "attention")][8] == "log"
    assert fits[("parity", "parity-search")][8] == "log"
    assert fits[("and", "mlp")][8] == "power"
    alpha = float(fits[("and", "mlp")][2].split()[0])
    assert alpha == pytest.approx(1.0, abs=0.1)


def test_plot_writes_the_figures_and_table(tmp_path):
    paths = get_experiment("sparse-variables").plot(_synthetic_rows(), tmp_path)
    assert sorted(path.name for path in paths) == ["sparse-variables-accuracy.png", "sparse-variables-loss.png",
                                                   "sparse-variables.png", "sparse-variables.txt"]
    for path in paths[:3]:
        assert path.stat().st_size > 10_000
    text = (tmp_path / "sparse-variables.txt").read_text()
    assert "not reached" in text and "parity-search" in text and "alpha" in text
    with pytest.raises(ValueError, match="^rows: expected"):
        get_experiment("sparse-variables").plot([], tmp_path)


def test_tuning_picks_the_setting_with_the_fewest_samples(tmp_path):
    rows = []
    for steps, decay, needed in ((100, 0.1, 30), (100, 0.5, 20), (200, 0.5, None)):
        for seed in range(2):
            rows.append(dict(function="and", student="attention", sparsity=2, length=64, seed=seed, target=0.95,
                             start=8, max_samples=64, per_octave=2, steps=steps, learning_rate=0.01,
                             weight_decay=decay, samples_to_target=needed))
    assert experiment.best_hyperparameters(rows) == {"attention": dict(steps=100, learning_rate=0.01,
                                                                        weight_decay=0.5)}
    ranking = experiment.tuning_scores(rows)["attention"]
    assert ranking[-1][0] == pytest.approx(128) and ranking[-1][3] == 2  # not reached counts as twice the cap
    path, = get_experiment("sparse-variables-tuning").plot(rows, tmp_path)
    assert "weight_decay" in path.read_text()


def test_students_defaults_are_the_frozen_hyperparameters():
    for name, student in (("attention", AttentionStudent()), ("mlp", MLPStudent())):
        parameters = student.get_params()
        assert {key: parameters[key] for key in experiment.FROZEN_HYPERPARAMETERS[name]} == \
            experiment.FROZEN_HYPERPARAMETERS[name]
    assert all(cell[key] == experiment.FROZEN_HYPERPARAMETERS[cell["student"]][key]
               for cell in get_experiment("sparse-variables").cells(False) if cell["student"] in ("attention", "mlp")
               for key in ("steps", "learning_rate", "weight_decay"))


def test_a_grid_file_with_a_bad_series_is_refused_naming_the_key():
    expand = get_experiment("sparse-variables").expand
    good = get_experiment("sparse-variables").grid(quick=True).table
    with pytest.raises(ValueError, match="series"):
        expand(dict(good, series=[{"function": "and", "student": "attention"}]))
    with pytest.raises(ValueError, match="student"):
        expand(dict(good, series=[{"function": "and", "student": "cnn", "seeds": 1}]))
    with pytest.raises(ValueError, match="all of"):
        expand(dict(good, steps=[100]))
    with pytest.raises(ValueError, match="unknown \\['samples'\\]"):
        expand(dict(good, samples=[8]))
    # listing the AdamW axes runs every combination for the gradient students only
    cells = expand(dict(good, steps=[100, 200], learning_rate=0.01, weight_decay=[0.1, 0.5]))
    gradient = [cell for cell in cells if cell["student"] != "parity-search"]
    assert ({(cell["steps"], cell["weight_decay"]) for cell in gradient}
            == {(100, 0.1), (100, 0.5), (200, 0.1), (200, 0.5)})
    assert all("steps" not in cell for cell in cells if cell["student"] == "parity-search")


def test_a_series_may_give_its_own_lengths_but_not_repeat_a_cell():
    expand = get_experiment("sparse-variables").expand
    good = get_experiment("sparse-variables").grid(quick=True).table
    series = [{"function": "parity", "student": "mlp", "seeds": 2, "lengths": [16, 64]},
              {"function": "parity", "student": "mlp", "seeds": 1, "lengths": [256]}]
    cells = expand(dict(good, series=series))
    assert sorted((cell["length"], cell["seed"]) for cell in cells) == [(16, 0), (16, 1), (64, 0), (64, 1), (256, 0)]
    repeated = dict(good, series=series + [{"function": "parity", "student": "mlp", "seeds": 1, "lengths": [64]}])
    with pytest.raises(ValueError, match="repeats cells of 'sparse-variables'"):
        grid_cells("sparse-variables", Grid("sparse-variables", "full", repeated, "<test>", ""))
    with pytest.raises(ValueError, match="lengths"):
        expand(dict(good, series=[dict(series[0], lengths=[])]))
    with pytest.raises(ValueError, match="lengths"):
        expand(dict(good, series=[dict(series[0], lengths=[16, -4])]))


@pytest.mark.parametrize("needed", [1, 5, 9, 37, 100, 1000])
@pytest.mark.parametrize("per_octave", [1, 2, 4])
def test_bisection_from_a_passing_start_halves_down_to_min_samples(needed, per_octave):
    found, probes = bisect_samples(lambda n: float(n >= needed), target=0.95, start=64, min_samples=4,
                                   max_samples=4096, per_octave=per_octave)
    assert found >= needed and found / max(needed, 4) <= 2 ** (1 / per_octave) + 1 / needed
    assert all(n >= 4 for n, _ in probes) and len(probes) == len({n for n, _ in probes})
    if per_octave == 1:  # on the doubling grid the answer is the one a search from min_samples finds
        assert found == bisect_samples(lambda n: float(n >= needed), target=0.95, start=4, max_samples=4096,
                                       per_octave=1)[0]
    with pytest.raises(ValueError, match="^min_samples: expected"):
        bisect_samples(lambda n: 1.0, target=0.95, start=8, min_samples=16, max_samples=64, per_octave=1)


def test_restarts_are_kept_by_training_loss_never_by_test_accuracy():
    cell = dict(function="majority", student="attention", sparsity=3, length=16, seed=0, target=0.95, start=8,
                max_samples=32, per_octave=1, steps=100, learning_rate=0.01, weight_decay=0.1)
    single = experiment.run_sparse_variables_cell(cell)
    assert experiment.run_sparse_variables_cell(dict(cell, restarts=1))["probes"] == single["probes"]
    result = experiment.run_sparse_variables_cell(dict(cell, restarts=3))
    fits = json.loads(result["restart_fits"])
    probes = dict(map(tuple, json.loads(result["probes"])))
    disagree = 0
    for n in probes:
        rows = [row for row in fits if row[0] == n]
        assert [row[1] for row in rows] == [0, 1, 2]
        kept = min(rows, key=lambda row: row[2])  # smallest training loss
        assert probes[n] == kept[3]
        disagree += kept[3] != max(row[3] for row in rows)
    assert disagree  # some n where the best test accuracy is not the kept restart's: the choice is seen
    restart_zero = {row[0]: row[3] for row in fits if row[1] == 0}
    assert all(restart_zero[n] == accuracy for n, accuracy in json.loads(single["probes"]) if n in restart_zero)
    assert experiment.best_restart([0.3, 0.1, 0.1]) == 1
    with pytest.raises(ValueError, match="^restarts: 'parity-search'"):
        experiment.run_sparse_variables_cell(dict(cell, function="parity", student="parity-search", restarts=2))


def test_a_grid_may_give_restarts_to_the_gradient_students_only():
    grid = dict(series=[dict(function="parity", student="attention", seeds=1),
                        dict(function="parity", student="parity-search", seeds=1)],
                sparsity=3, lengths=[16], target=0.95, start=8, max_samples=64, per_octave=1)
    assert all("restarts" not in cell for cell in experiment.sparse_variables_cells(grid))
    cells = experiment.sparse_variables_cells(dict(grid, restarts=2))
    assert [cell.get("restarts") for cell in cells] == [2, None]
    with pytest.raises(ValueError, match="restarts: expected an integer >= 1, received 0"):
        experiment.sparse_variables_cells(dict(grid, restarts=0))


def test_bootstrap_median_ratio_against_resampling_by_hand_and_with_unreached_seeds():
    from mhalearn.sparse_variables.growth import bootstrap_median_ratio

    high, low = [40.0, 80.0, 60.0, 100.0], [10.0, 20.0, 30.0]
    ratio, lo, hi, left_out = bootstrap_median_ratio(high, low, resamples=500, rng=3)
    generator = np.random.default_rng(3)
    tops = np.median(np.array(high)[generator.integers(4, size=(500, 4))], axis=1)
    bottoms = np.median(np.array(low)[generator.integers(3, size=(500, 3))], axis=1)
    assert ratio == 70.0 / 20.0 and left_out == 0
    assert (lo, hi) == tuple(np.quantile(tops / bottoms, [0.05, 0.95], method="inverted_cdf"))
    assert lo <= ratio <= hi
    # A seed set whose median is not reached: the ratio is infinite, and replicates with both medians
    # infinite are counted apart, never turned into numbers.
    ratio, lo, hi, left_out = bootstrap_median_ratio([np.inf, np.inf, 50.0], [np.inf, 10.0, 10.0], resamples=400)
    assert math.isinf(ratio) and left_out > 0 and math.isinf(hi)
