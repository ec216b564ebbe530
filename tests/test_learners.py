import json

import numpy as np
import pytest
from sklearn.base import clone

import mhalearn
from mhalearn import GradientLearner, MomentLearner, SculptLearner
from mhalearn.learners import body, moment_route, net
from mhalearn.learners._common import solve_projections
from mhalearn.learners.diagnostics import TeacherDiagnostics, span_distance


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


def test_sculpt_learner_recovers_by_the_body_route_and_reports_every_phase():
    teacher, X, Y, X_test = _data(1, 6, 3, 3000, 21)
    learner = SculptLearner(1, random_state=0).fit(X, Y, teacher=teacher)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    report = learner.report_
    for phase in ("crude_sum", "sculpt", "min_norm", "span", "net", "refine"):
        assert report[phase]["seconds"] >= 0.0, phase
    assert report["crude_sum"]["w_sum_error"] > 0.05  # crude is biased, as the design says
    assert report["min_norm"]["refined_w_sum_error"] < 0.01
    assert report["span"]["chosen"] == "body"
    assert report["span"]["body"]["distance"] < 0.01
    assert report["sculpt"]["teacher_feasible_fraction"] > 0.99
    assert [r["round"] for r in report["sculpt"]["rounds"]] == ["crude Ŵ_Σ, quantile", "refined Ŵ_Σ, absolute"]
    certificate = report["certificate"]
    assert certificate["bound"] >= certificate["empirical_error"]
    assert mhalearn.relative_error(learner.least_squares_model_, teacher, X_test) < 1e-2
    table = mhalearn.format_phase_table(report)
    assert "alternating refit (ours)" in table and "certificate" in table


def test_refine_none_returns_the_least_squares_candidate():
    teacher, X, Y, _ = _data(1, 6, 3, 2000, 21)
    learner = SculptLearner(1, refine="none", random_state=0).fit(X, Y)
    np.testing.assert_array_equal(learner.model_.ws, learner.least_squares_model_.ws)
    assert "val_polished" not in learner.report_["refine"]
    assert learner.report_["certificate"]["hypotheses"] == learner.keep


def test_moment_learner_recovers_two_heads():
    teacher, X, Y, X_test = _data(2, 4, 5, 1000, 5)
    learner = MomentLearner(2, max_candidates=20000, random_state=1).fit(X, Y, teacher=teacher)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    assert set(learner.report_) == {"span", "net", "refine", "certificate", "total_seconds", "units"}
    assert learner.report_["span"]["chosen"] == "moment"


def test_body_refuses_when_d_is_not_above_k():
    teacher, X, Y, X_test = _data(1, 4, 5, 600, 8)
    learner = SculptLearner(1, random_state=0).fit(X, Y, teacher=teacher)
    assert "d = 4 <= k = 5" in learner.report_["span"]["body"]["refused"]
    assert learner.report_["span"]["chosen"] == "moment"
    assert "used the moment route" in learner.report_["span"]["fallback"]
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6


def test_solver_failure_falls_back_to_moment_route(monkeypatch):
    teacher, X, Y, X_test = _data(1, 6, 3, 2000, 8)
    monkeypatch.setattr(body.ConvexBody, "min_norm_point", lambda self: (None, {"solver_status": "infeasible"}))
    learner = SculptLearner(1, span_point="min_norm", random_state=0).fit(X, Y, teacher=teacher)
    assert "infeasible" in learner.report_["min_norm"]["failure"]
    assert "infeasible" in learner.report_["span"]["body"]["refused"]
    assert learner.report_["span"]["chosen"] == "moment"
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    with pytest.warns(RuntimeWarning, match="refused"):
        SculptLearner(1, span_point="min_norm", span_route="body", random_state=0).fit(X, Y)


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


def test_moment_route_finds_span_in_linear_regime():
    teacher = mhalearn.sample_teacher(2, 4, theta_norm=0.3, rng=9)
    X, Y = mhalearn.make_dataset(teacher, 3000, 6, rng=10)
    basis, _, _ = moment_route.moment_span(X, Y, 2)
    assert span_distance(basis, teacher) < 0.1
    random_basis = np.linalg.qr(np.random.default_rng(0).standard_normal((16, 2)))[0].T
    assert span_distance(random_basis, teacher) > 0.5


def test_net_scores_match_direct_least_squares():
    rng = np.random.default_rng(1)
    X = mhalearn.boolean_inputs(50, 4, 3, rng=2)
    Y = rng.standard_normal(X.shape)
    points = rng.standard_normal((6, 3, 3))
    candidates = net.candidate_tuples(6, 2)
    assert len(candidates) == 15
    scores = net.score_net(X, Y, points, candidates, ridge=0.0)
    for candidate, score in zip(candidates[:4], scores[:4]):
        _, loss = solve_projections(X, Y, points[candidate])
        assert score == pytest.approx(2 * loss * X.shape[0] / np.sum(Y ** 2), rel=1e-8)


def test_net_points_fill_the_ball():
    points = net.net_points(2, 1.0, 0.5)
    assert len(points) == 13 and np.all(np.linalg.norm(points, axis=1) <= 1.0 + 1e-12)


# ------------------------------------------------------------ the typed report_

def test_report_is_typed_and_reads_as_the_mapping_it_was():
    teacher, X, Y, _ = _data(1, 6, 3, 2000, 21)
    report = SculptLearner(1, random_state=0).fit(X, Y, teacher=teacher).report_
    assert report.span.chosen == report["span"]["chosen"] == "body"
    # The span's time is its chosen route's, not a copy that could drift from it.
    assert report["span"]["seconds"] == report.span.body.seconds > 0.0
    assert report["net"]["candidates"] == report.net.candidates
    plain = report.as_dict()
    text = json.dumps(plain)  # plain numbers, strings, lists and dicts only (a NaN figure included)
    assert json.dumps(json.loads(text)) == text
    assert list(plain) == list(report) and plain["span"]["body"]["distance"] == report.span.body.distance
    assert set(plain["min_norm"]) >= {"seconds", "solver_status", "w_sum_steps", "constraints"}
    with pytest.raises(KeyError):
        report["span"]["seconds"] = 1.0
    with pytest.raises(KeyError):
        report["crude_sum"]["no_such_figure"]
    # Net time is measured once, by the phase's timer.
    assert report.net.seconds < report.total_seconds


def test_every_attention_learner_prints_a_phase_table():
    teacher, X, Y, _ = _data(1, 4, 3, 300, 4)
    moment = MomentLearner(1, max_candidates=2000, refine_iter=50, random_state=0).fit(X, Y, teacher=teacher)
    table = moment.report_.table()
    assert "crude_sum         -  (skipped)" in table and "chosen=moment" in table and "certificate" in table
    assert mhalearn.format_phase_table(moment.report_) == table
    gradient = GradientLearner(1, restarts=2, max_iter=30, random_state=0).fit(X, Y)
    lines = gradient.report_.table().splitlines()
    assert lines[1].startswith("0 ") and lines[2].startswith("1 ") and "lbfgs: kept the restart" in lines[3]
    assert gradient.report_["runs"][1]["restart"] == 1 and gradient.report_["method"] == "lbfgs"
    zero = GradientLearner(1, random_state=0).fit(X, np.zeros_like(Y))
    assert zero.report_.table() == zero.report_["zero_labels"]


def test_teacher_is_short_for_the_diagnostics_hook():
    teacher, X, Y, _ = _data(1, 6, 3, 1500, 21)
    by_teacher = SculptLearner(1, refine_iter=100, random_state=0).fit(X, Y, teacher=teacher).report_
    by_hook = SculptLearner(1, refine_iter=100, random_state=0).fit(
        X, Y, diagnostics=TeacherDiagnostics(teacher)).report_
    without = SculptLearner(1, refine_iter=100, random_state=0).fit(X, Y).report_
    assert by_hook.crude_sum.w_sum_error == by_teacher.crude_sum.w_sum_error is not None
    assert by_hook.span.chosen_distance == by_teacher.span.chosen_distance is not None
    assert without.crude_sum.w_sum_error is None and "w_sum_error" not in without["crude_sum"]
    with pytest.raises(ValueError, match="^teacher: expected either teacher or diagnostics"):
        SculptLearner(1).fit(X, Y, teacher=teacher, diagnostics=TeacherDiagnostics(teacher))
    with pytest.raises(TypeError, match="^diagnostics: expected a TeacherDiagnostics"):
        SculptLearner(1).fit(X, Y, diagnostics=teacher)
