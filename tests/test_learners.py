import numpy as np
import pytest
from sklearn.base import clone

import mhalearn
from mhalearn import GradientLearner, MomentLearner, MultiHeadAttention, SculptLearner
from mhalearn.learners import phases
from mhalearn.learners._common import solve_projections, span_distance


def _data(heads, dim, length, samples, seed, **teacher_args):
    teacher = mhalearn.sample_teacher(heads, dim, rng=seed, **teacher_args)
    X, Y = mhalearn.make_dataset(teacher, samples, length, rng=seed + 1)
    X_test = mhalearn.boolean_inputs(500, length, dim, rng=seed + 2)
    return teacher, X, Y, X_test


def test_gradient_learner_recovers_planted_teacher():
    teacher, X, Y, X_test = _data(1, 4, 5, 400, 11)
    learner = GradientLearner(1, random_state=0)
    assert learner.fit(X, Y, teacher=teacher) is learner
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-8
    assert learner.score(X_test, teacher.predict(X_test)) > 1 - 1e-8
    assert learner.report_["runs"][0]["parameter_error"] < 1e-3


def test_gradient_learner_adam_lowers_error():
    teacher, X, Y, X_test = _data(1, 4, 5, 300, 3)
    learner = GradientLearner(1, method="adam", max_iter=30, learning_rate=0.02, random_state=0).fit(X, Y)
    history = learner.report_["runs"][0]["val_history"]
    assert min(history) < 0.5 * history[0]


def test_sculpt_learner_recovers_and_reports_every_phase():
    teacher, X, Y, X_test = _data(1, 5, 5, 800, 21)
    learner = SculptLearner(1, random_state=0).fit(X, Y, teacher=teacher)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    report = learner.report_
    for phase in ("crude_sum", "sculpt", "min_norm", "span", "net", "refine"):
        assert report[phase]["seconds"] >= 0.0, phase
    assert report["crude_sum"]["w_sum_error"] > 0.05  # crude is biased, as the design says
    assert report["sculpt"]["certified_rows"] > 0
    assert report["span"]["moment"]["distance"] < 0.5
    assert report["net"]["candidates"] > 0
    assert report["refine"]["val_leaving"] <= report["refine"]["val_entering"]
    assert "w_sum_error" in mhalearn.format_phase_table(report)


def test_moment_learner_recovers_two_heads():
    teacher, X, Y, X_test = _data(2, 4, 5, 1000, 5)
    learner = MomentLearner(2, max_candidates=20000, random_state=1).fit(X, Y, teacher=teacher)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    assert set(learner.report_) == {"span", "net", "refine", "total_seconds"}


def test_solver_failure_falls_back_to_moment_route(monkeypatch):
    teacher, X, Y, X_test = _data(1, 4, 5, 600, 8)
    monkeypatch.setattr(phases.ConvexBody, "min_norm_point", lambda self: (None, "infeasible"))
    learner = SculptLearner(1, random_state=0).fit(X, Y, teacher=teacher)
    assert "infeasible" in learner.report_["min_norm"]["failure"]
    assert learner.report_["net"]["chosen_route"] == "moment"
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6


def test_estimator_contract_and_reproducibility():
    learner = SculptLearner(2, eta=0.1, random_state=3)
    assert learner.get_params()["eta"] == 0.1
    assert clone(learner).set_params(eta=0.2).eta == 0.2
    teacher, X, Y, _ = _data(1, 4, 4, 300, 2)
    first = GradientLearner(1, random_state=7).fit(X, Y).model_
    second = GradientLearner(1, random_state=7).fit(X, Y).model_
    np.testing.assert_array_equal(first.thetas, second.thetas)


def test_learners_validate_input():
    teacher, X, Y, _ = _data(1, 4, 4, 300, 2)
    with pytest.raises(ValueError, match="Boolean"):
        SculptLearner(1).fit(X + 0.5, Y)
    with pytest.raises(ValueError, match="Y: expected shape"):
        GradientLearner(1).fit(X, Y[:-1])
    with pytest.raises(ValueError, match="heads"):
        GradientLearner(0).fit(X, Y)
    with pytest.raises(ValueError, match="unknowns"):
        GradientLearner(3).fit(X[:3], Y[:3])
    with pytest.raises(ValueError, match="search"):
        MomentLearner(1, search="grid").fit(X, Y)
    with pytest.raises(ValueError, match="fit"):
        GradientLearner(1).predict(X)
    with pytest.raises(ValueError, match="learner"):
        mhalearn.make_learner("sgd", 1)


def test_crude_sum_exact_under_uniform_attention():
    rng = np.random.default_rng(0)
    layer = MultiHeadAttention(np.zeros((2, 4, 4)), rng.standard_normal((2, 4, 4)))
    X = mhalearn.boolean_inputs(200, 5, 4, rng=1)
    np.testing.assert_allclose(phases.crude_projection_sum(X, layer.predict(X)), layer.projection_sum, atol=1e-10)


def test_certified_rows_and_constraints_hold_for_hard_attention():
    teacher = mhalearn.sample_teacher(1, 5, theta_norm=40.0, rng=4)
    X, Y = mhalearn.make_dataset(teacher, 300, 5, rng=5)
    samples, rows, tops = phases.certify_rows(X, Y, teacher.projection_sum, eta=0.05, residual_tol=0.05)
    assert len(samples) > 0.5 * 300 * 5
    assert phases.certification_precision(teacher, X, samples, rows, tops, 0.05) == 1.0
    constraints = phases.margin_constraints(X, samples, rows, tops)
    # A head with mass >= 1 - η on j* (shared by at most a few copies of the
    # token) has logit gaps >= log((1 - η)/(copies·η)); the default margin
    # ½·log((1 - η)/η) leaves room for two copies.
    assert np.all(constraints @ teacher.thetas.ravel() >= 0.5 * np.log(19.0))


def test_moment_route_finds_span_in_linear_regime():
    teacher = mhalearn.sample_teacher(2, 4, theta_norm=0.3, rng=9)
    X, Y = mhalearn.make_dataset(teacher, 3000, 6, rng=10)
    basis, _, _ = phases.moment_span(X, Y, 2)
    assert span_distance(basis, teacher) < 0.1
    random_basis = np.linalg.qr(np.random.default_rng(0).standard_normal((16, 2)))[0].T
    assert span_distance(random_basis, teacher) > 0.5


def test_net_scores_match_direct_least_squares():
    rng = np.random.default_rng(1)
    X = mhalearn.boolean_inputs(50, 4, 3, rng=2)
    Y = rng.standard_normal(X.shape)
    points = rng.standard_normal((6, 3, 3))
    candidates = phases.candidate_tuples(6, 2)
    assert len(candidates) == 15
    scores = phases.score_net(X, Y, points, candidates, ridge=0.0)
    for candidate, score in zip(candidates[:4], scores[:4]):
        _, loss = solve_projections(X, Y, points[candidate])
        assert score == pytest.approx(2 * loss * X.shape[0] / np.sum(Y ** 2), rel=1e-8)


def test_net_points_fill_the_ball():
    points = phases.net_points(2, 1.0, 0.5)
    assert len(points) == 13 and np.all(np.linalg.norm(points, axis=1) <= 1.0 + 1e-12)
