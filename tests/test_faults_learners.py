"""Faults a user meets with the attention learners (issue 12): units, degenerate data, bad hyper-parameters.

Each test failed on the learners as they were before issue 12.
"""

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

import mhalearn
from mhalearn import GradientLearner, MomentLearner, MultiHeadAttention, SculptLearner, SearchSettings, TeacherObserver

LEARNERS = [
    lambda: GradientLearner(2, random_state=0),
    lambda: MomentLearner(2, search=SearchSettings(max_candidates=20_000), random_state=0),
    lambda: SculptLearner(2, search=SearchSettings(max_candidates=20_000), random_state=0),
]


def _instance(heads=2, dim=5, length=4, samples=1200, seed=3):
    teacher = mhalearn.sample_teacher(heads, dim, rng=seed)
    X, Y = mhalearn.make_dataset(teacher, samples, length, rng=seed + 1)
    return teacher, X, Y, mhalearn.boolean_inputs(800, length, dim, rng=seed + 2)


@pytest.mark.parametrize("make", LEARNERS)
@pytest.mark.parametrize("scale", [1e-8, 1e8])
def test_learners_are_equivariant_under_label_units(make, scale):
    # F is linear in W: learning c·Y must give the teacher with c·W as well as
    # learning Y gives the teacher.
    teacher, X, Y, X_test = _instance()
    scaled = MultiHeadAttention(teacher.thetas, scale * teacher.ws)
    reference = mhalearn.relative_error(make().fit(X, Y).model_, teacher, X_test)
    error = mhalearn.relative_error(make().fit(X, scale * Y).model_, scaled, X_test)
    assert error <= max(10 * reference, 1e-12)


def test_gradient_learner_is_equivariant_under_input_units():
    # F(cX) with Θ/c² and W/c is F(X): Gaussian inputs of any variance.
    teacher = mhalearn.sample_teacher(1, 4, rng=5)
    X = mhalearn.gaussian_inputs(600, 4, 4, rng=6)
    X_test = mhalearn.gaussian_inputs(400, 4, 4, rng=7)
    for c in (1e-3, 1e3):
        scaled = MultiHeadAttention(teacher.thetas / c ** 2, teacher.ws / c)
        learner = GradientLearner(1, random_state=0).fit(c * X, teacher.predict(X))
        assert mhalearn.relative_error(learner.model_, scaled, c * X_test) < 1e-8


def test_inputs_whose_logits_would_overflow_are_learned_in_their_units():
    teacher = mhalearn.sample_teacher(1, 4, rng=8)
    X = mhalearn.boolean_inputs(400, 4, 4, rng=9)
    learner = GradientLearner(1, random_state=0).fit(X * 1e154, teacher.predict(X))
    assert np.all(np.isfinite(learner.model_.thetas)) and np.all(np.isfinite(learner.model_.ws))
    # Learned, not only finite: on unseen sequences in the same units it predicts the teacher's labels.
    X_test = mhalearn.boolean_inputs(400, 4, 4, rng=10)
    truth = teacher.predict(X_test)
    assert np.linalg.norm(learner.predict(X_test * 1e154) - truth) < 1e-6 * np.linalg.norm(truth)


@pytest.mark.parametrize("make", LEARNERS)
def test_all_zero_labels_give_the_zero_layer(make):
    teacher, X, Y, _ = _instance()
    learner = make().fit(X, np.zeros_like(Y), callback=TeacherObserver(teacher))
    assert isinstance(learner.model_, MultiHeadAttention)
    assert np.all(learner.model_.ws == 0) and learner.model_.heads == 2
    assert "zero layer" in learner.report_.zero_labels
    np.testing.assert_array_equal(learner.predict(X), np.zeros_like(X))


def test_score_refuses_constant_labels():
    teacher, X, Y, _ = _instance(heads=1)
    learner = GradientLearner(1, random_state=0).fit(X, Y)
    for constant in (np.zeros_like(Y), np.ones_like(Y)):
        with pytest.raises(ValueError, match="^Y: expected labels that are not all equal"):
            learner.score(X, constant)


@pytest.mark.parametrize("params, name", [
    (dict(span_route="moment", body__max_constraints="banana"), "max_constraints"),
    (dict(search__net_radius=-1.0), "net_radius"),
    (dict(search__net_radius=float("nan")), "net_radius"),
    (dict(search__net_resolution=0.0), "net_resolution"),
    (dict(norm_bound=0.0), "norm_bound"),
    (dict(search__refine="bfgs"), "refine"),
    (dict(body__quantile=0.0), "quantile"),
    (dict(body={"quantile": 0.02}), "body"),
    (dict(search=None), "search"),
    (dict(random_state="seed"), "random_state"),
    (dict(allow_non_boolean=1), "allow_non_boolean"),
])
def test_every_hyperparameter_is_checked_before_any_work(params, name, monkeypatch):
    teacher, X, Y, _ = _instance(heads=1, samples=300)
    monkeypatch.setattr(SculptLearner, "_fit", lambda *args: pytest.fail("_fit ran with a bad hyper-parameter"))
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        SculptLearner(1).set_params(**params).fit(X, Y)


def test_gradient_learner_checks_its_hyperparameters():
    teacher, X, Y, _ = _instance(heads=1, samples=300)
    with pytest.raises(ValueError, match="^restarts: expected an integer >= 1, received 0"):
        GradientLearner(1, restarts=0).fit(X, Y)
    with pytest.raises(ValueError, match="^method: expected one of 'lbfgs', 'adam', received 'sgd'"):
        GradientLearner(1, method="sgd").fit(X, Y)


def test_a_fine_net_resolution_respects_the_candidate_budget():
    # A user-given spacing is scored on at most max_candidates random tuples.
    teacher, X, Y, _ = _instance(heads=2, samples=600)
    learner = MomentLearner(2, search=SearchSettings(net_resolution=0.05, max_candidates=500), random_state=0).fit(X, Y)
    net = learner.report_.net
    assert net.net_points > 500 and net.candidates == 500
    with pytest.raises(ValueError, match="net_resolution"):
        MomentLearner(2, search=SearchSettings(net_resolution=1e-4), random_state=0).fit(X, Y)


def test_shapes_the_maths_cannot_serve_are_refused_or_learned():
    layer = MultiHeadAttention(np.array([[[1.5]]]), np.array([[[0.7]]]))
    X, Y = mhalearn.make_dataset(layer, 400, 4, rng=1)
    for learner in (MomentLearner(1, random_state=0), SculptLearner(1, random_state=0)):
        assert mhalearn.relative_error(learner.fit(X, Y).model_, layer, X) < 1e-12  # d = 1 is learned
    with pytest.raises(ValueError, match="d² >= heads = 2"):
        MomentLearner(2).fit(X, Y)
    teacher, X, Y, _ = _instance(heads=1, samples=300)
    with pytest.raises(ValueError, match="at least 2 sequences"):
        GradientLearner(1).fit(X[:1], Y[:1])
    with pytest.raises(ValueError, match="length k >= 2"):
        SculptLearner(1).fit(X[:, :1], Y[:, :1])


def test_wrong_teacher_type_names_the_argument():
    teacher, X, Y, _ = _instance(heads=1, samples=300)
    with pytest.raises(TypeError, match="^teacher: expected a MultiHeadAttention"):
        TeacherObserver(teacher.thetas)
    with pytest.raises(TypeError, match="^callback: expected a callable"):
        GradientLearner(1).fit(X, Y, callback=teacher)


def test_unfitted_learners_raise_not_fitted_error():
    teacher, X, Y, _ = _instance(heads=1, samples=300)
    for learner in (GradientLearner(1), MomentLearner(1), SculptLearner(1)):
        with pytest.raises(NotFittedError):
            learner.predict(X)


ESTIMATORS = [mhalearn.GradientLearner, mhalearn.MomentLearner, mhalearn.SculptLearner,
              mhalearn.RandomFeatureAttention, mhalearn.RandomFeatureMLP,
              mhalearn.AttentionStudent, mhalearn.MLPStudent, mhalearn.SparseParitySearch]


@pytest.mark.parametrize("estimator", ESTIMATORS, ids=lambda cls: cls.__name__)
def test_every_estimator_declares_a_constraint_for_every_parameter(estimator):
    import inspect

    parameters = [name for name in inspect.signature(estimator.__init__).parameters if name != "self"]
    assert sorted(estimator._parameter_constraints) == sorted(parameters)


def _sequences(samples=40):
    rng = np.random.default_rng(0)
    return rng.standard_normal((samples, 5, 3)), rng.standard_normal(samples)


def _bits(samples=40):
    rng = np.random.default_rng(0)
    X = rng.choice(np.array([-1, 1], dtype=np.int8), size=(samples, 8))
    return X, np.where(X[:, 0] > 0, 1, -1)


@pytest.mark.parametrize("estimator, data, name", [
    (mhalearn.RandomFeatureAttention(heads=0), _sequences, "heads"),
    (mhalearn.RandomFeatureAttention(qk_mean="one"), _sequences, "qk_mean"),
    (mhalearn.RandomFeatureAttention(alpha=[1.0, -1.0]), _sequences, "alpha"),
    (mhalearn.RandomFeatureAttention(alpha="auto"), _sequences, "alpha"),
    (mhalearn.RandomFeatureAttention(value_bias=1), _sequences, "value_bias"),
    (mhalearn.RandomFeatureMLP(features=2.5), _sequences, "features"),
    (mhalearn.RandomFeatureMLP(fit_intercept="yes"), _sequences, "fit_intercept"),
    (mhalearn.RandomFeatureMLP(random_state=-1), _sequences, "random_state"),
    (mhalearn.AttentionStudent(embedding_dim=0), _bits, "embedding_dim"),
    (mhalearn.AttentionStudent(learning_rate=float("inf")), _bits, "learning_rate"),
    (mhalearn.MLPStudent(weight_decay=-0.1), _bits, "weight_decay"),
    (mhalearn.MLPStudent(random_state="seed"), _bits, "random_state"),
    (mhalearn.SparseParitySearch(sparsity=4), _bits, "sparsity"),
], ids=lambda value: getattr(value, "__name__", None) if callable(value) and not hasattr(value, "fit") else None)
def test_seed_paper_estimators_check_their_hyperparameters_at_fit(estimator, data, name):
    with pytest.raises(ValueError, match=f"^{name}: expected"):
        estimator.fit(*data())


# ------------------------------------------------------------ issue 22: silent answers and extreme units

@pytest.mark.parametrize("make", LEARNERS)
def test_one_token_sequences_are_refused_by_every_learner(make):
    # With k = 1 every attention pattern is 1: Θ never reaches the labels and cannot be learned.
    teacher, X, Y, _ = _instance()
    with pytest.raises(ValueError, match="^X: expected sequences of length k >= 2"):
        make().fit(X[:, :1], Y[:, :1])


@pytest.mark.parametrize("scale, name", [(1e160, "X"), (1e-160, "X"), (1e-310, "Y")])
def test_extreme_units_are_refused_up_front_naming_the_array(scale, name, monkeypatch):
    teacher = mhalearn.sample_teacher(1, 4, rng=8)
    X = mhalearn.gaussian_inputs(300, 4, 4, rng=9)
    Y = teacher.predict(X)
    X, Y = (X * scale, Y) if name == "X" else (X, Y * scale)
    monkeypatch.setattr(SculptLearner, "_fit", lambda *args: pytest.fail("_fit ran on unrepresentable units"))
    with pytest.raises(ValueError, match=f"^{name}: expected .*root mean square"):
        SculptLearner(1, allow_non_boolean=True, random_state=0).fit(X, Y)


# ------------------------------------------------------------ issue 22: memory the budget bounds

_UNDER_LIMIT = """
import resource, sys, time
resource.setrlimit(resource.RLIMIT_AS, (3_000_000_000, 3_000_000_000))
import numpy as np
import mhalearn
teacher = mhalearn.sample_teacher({heads}, {dim}, rng=0)
X, Y = mhalearn.make_dataset(teacher, {samples}, {length}, rng=1)
started = time.perf_counter()
try:
    learner = mhalearn.{learner}.fit(X, Y)
except Exception as error:
    print(type(error).__name__ + ": " + str(error))
else:
    net = learner.report_.net
    print(f"fitted: {{net.candidates}} candidates, {{net.net_points}} points, limited by {{net.limited_by}}")
print(f"seconds {{time.perf_counter() - started:.1f}}")
"""


def _fit_under_a_3_gb_address_space(learner: str, heads: int, dim: int, length: int, samples: int) -> str:
    import subprocess
    import sys

    code = _UNDER_LIMIT.format(learner=learner, heads=heads, dim=dim, length=length, samples=samples)
    environment = {key: value for key, value in __import__("os").environ.items() if key != "MHALEARN_MEMORY_BUDGET"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                            env={**environment, "NUMBA_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize("learner, heads, dim, name", [
    ("MomentLearner(2, search=mhalearn.SearchSettings(net_resolution=0.005), random_state=0)", 2, 4, "net_resolution"),
    ("MomentLearner(3, search=mhalearn.SearchSettings(net_resolution=0.003), random_state=0)", 3, 6, "net_resolution"),
])
def test_a_net_that_cannot_fit_is_refused_naming_its_parameter(learner, heads, dim, name):
    out = _fit_under_a_3_gb_address_space(learner, heads, dim, 5, 600)
    # Refused by the memory budget, or already by the grid's own bound; either way naming the parameter.
    refusals = (f"MemoryBudgetError: {name}: a net of ", f"ValueError: {name}: a spacing of ")
    assert out.startswith(refusals) and float(out.split("seconds ")[1]) < 30, out


def test_a_huge_candidate_budget_is_held_to_the_memory_budget():
    out = _fit_under_a_3_gb_address_space(
        "MomentLearner(2, search=mhalearn.SearchSettings(max_candidates=10**9, refine='none'), random_state=0)",
        2, 4, 5, 600)
    assert out.startswith("fitted: ") and "limited by memory budget" in out, out


def test_the_moment_route_refuses_a_gram_matrix_beyond_the_budget_naming_d():
    out = _fit_under_a_3_gb_address_space("MomentLearner(1, random_state=0)", 1, 32, 4, 300)
    assert out.startswith("MemoryBudgetError: X: the moment route at token dimension d = 32"), out
    assert float(out.split("seconds ")[1]) < 30


def test_kept_candidates_and_net_radius_are_bounded_before_any_work():
    teacher, X, Y, _ = _instance(heads=1, samples=300)
    with pytest.raises(ValueError, match=r"^kept_candidates: expected an integer in \[1, 1000\]"):
        MomentLearner(1, search=SearchSettings(kept_candidates=10**6)).fit(X, Y)
    with pytest.raises(ValueError, match=r"^search.net_radius: expected at most norm_bound = 12"):
        MomentLearner(1, search=SearchSettings(net_radius=1e300)).fit(X, Y)


@pytest.mark.parametrize("learner", [SculptLearner, MomentLearner])
def test_heads_no_net_can_search_are_refused_before_any_phase(learner):
    # Issue 74, rows 1-2: at m = 14 the coarsest net (3^14 grid points) exceeds what a net may hold, whatever
    # the data, so the fit must stop before phase 1 (or the moment route), naming heads and the m it allows.
    teacher, X, Y, _ = _instance(heads=2, dim=5, samples=600)

    def no_phase(phase, result):
        if phase != "start":
            pytest.fail(f"phase {phase} ran before the refusal")

    with pytest.raises(ValueError, match=r"^heads: phase 5's net .* 3\^14 .* at most 13 heads; lower heads"):
        learner(14, random_state=0).fit(X, Y, callback=no_phase)


@pytest.mark.parametrize("heads, params, message", [
    (6, dict(method="multistart"), r"^method: 'multistart' .* use method='net', or give net_resolution, or at most 5"),
    (6, dict(net_resolution=0.1), r"^net_resolution: a spacing of 0.1 .* leave net_resolution None"),
    (13, dict(max_candidates=10**9), r"^max_candidates: phase 5's coarsest net .* would take"),
])
def test_settings_no_net_can_serve_are_refused_before_any_phase(heads, params, message, monkeypatch):
    teacher, X, Y, _ = _instance(heads=2, dim=5, samples=600)
    monkeypatch.setattr(MomentLearner, "_fit", lambda *args: pytest.fail("_fit ran with a net that cannot be built"))
    with mhalearn.memory_budget("64MiB"), pytest.raises(ValueError, match=message):
        MomentLearner(heads, search=SearchSettings(**params), random_state=0).fit(X, Y)


def test_phase_6s_least_squares_beyond_the_budget_is_refused_before_any_phase(monkeypatch):
    # 16,000 training sequences of 4 × 5 entries at m = 2: phase 6's design is 5 MiB, the moment route 2.4 MiB.
    teacher, X, Y, _ = _instance(heads=2, dim=5, samples=20_000)
    monkeypatch.setattr(MomentLearner, "_fit", lambda *args: pytest.fail("_fit ran"))
    with mhalearn.memory_budget("4MiB"), pytest.raises(MemoryError, match=r"^X: phase 6's least squares for W on "
                                                                         r"16,000 training sequences"):
        MomentLearner(2, random_state=0).fit(X, Y)
