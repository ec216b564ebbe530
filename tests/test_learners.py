import dataclasses
import json
import math

import numpy as np
import pytest
from sklearn.base import clone

import mhalearn
from mhalearn import GradientLearner, MomentLearner, SculptLearner, SearchSettings
from mhalearn.attention import kernels
from mhalearn.evaluation import TeacherObserver, span_distance
from mhalearn.learners import moment_route
from mhalearn.learners.chen_li import BodySettings, SpanReading, body, fit, phase6_select
from mhalearn.learners.chen_li import phase5_net as net
from mhalearn.learners.chen_li.fit import choose_route
from mhalearn.learners.least_squares import solve_projections
from mhalearn.learners.report import Route


def _data(heads, dim, length, samples, seed, **teacher_args):
    teacher = mhalearn.sample_teacher(heads, dim, rng=seed, **teacher_args)
    X, Y = mhalearn.make_dataset(teacher, samples, length, rng=seed + 1)
    X_test = mhalearn.boolean_inputs(500, length, dim, rng=seed + 2)
    return teacher, X, Y, X_test


def test_gradient_learner_recovers_planted_teacher():
    teacher, X, Y, X_test = _data(1, 4, 5, 400, 11)
    learner = GradientLearner(1, random_state=0)
    observer = TeacherObserver(teacher)
    assert learner.fit(X, Y, callback=observer) is learner
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-8
    assert learner.score(X_test, teacher.predict(X_test)) > 1 - 1e-8
    assert observer.figure("restart", "parameter_error") < 1e-3


def test_only_the_span_search_learners_read_every_example_for_the_certificate(monkeypatch):
    # Phase 6's certificate assumes bounds on the label and token norms, read from every example: the
    # learners without phase 6 must not pay for that read.
    teacher, X, Y, _ = _data(1, 4, 5, 300, 3)

    def refuse(*args):
        raise AssertionError("read every example for the certificate's bounds")

    monkeypatch.setattr(phase6_select, "largest_norm", refuse)
    GradientLearner(1, max_iter=5, random_state=0).fit(X, Y)
    with pytest.raises(AssertionError, match="certificate's bounds"):
        MomentLearner(1, random_state=0).fit(X, Y)


def test_gradient_learner_adam_lowers_error():
    teacher, X, Y, X_test = _data(1, 4, 5, 300, 3)
    learner = GradientLearner(1, method="adam", max_iter=30, learning_rate=0.02, random_state=0).fit(X, Y)
    history = learner.report_.runs[0].val_history
    assert min(history) < 0.5 * history[0]


def test_sculpt_learner_recovers_by_the_body_route_and_reports_every_phase():
    teacher, X, Y, X_test = _data(1, 6, 3, 3000, 21)
    observer = TeacherObserver(teacher)
    learner = SculptLearner(1, random_state=0).fit(X, Y, callback=observer)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    report = learner.report_
    for phase, result in report.phases():
        assert result is None or result.seconds >= 0.0, phase
    # The moment route ran beside the body to check its span, and agreed: the body's span alone.
    assert report.moment is not None and report.route == "body" and report.fallback is None
    assert "within" in report.route_reason
    assert report.net.shape == "hull slab" and report.compared_net is None
    assert [body.rule for body in report.sculpt] == ["quantile", "absolute"]
    assert observer.figure("crude_sum", "w_sum_error") > 0.05  # crude is biased, as the design says
    assert observer.figure("refined_sum", "refined_w_sum_error") < 0.01
    assert observer.span_distance("body") < 0.01
    assert observer.figure("sculpt", "teacher_feasible_fraction") > 0.99
    certificate = report.selection.certificate
    assert certificate["bound"] >= certificate["empirical_error"]
    assert mhalearn.relative_error(learner.least_squares_model_, teacher, X_test) < 1e-2
    table = report.table()
    assert "alternating refit (ours)" in table and "certificate" in table and "span from the body route" in table
    assert [line.split()[0] for line in observer.table().splitlines()[1:-1]] == [
        "crude_sum", "sculpt", "refined_sum", "sculpt", "span", "moment", "net", "selection"]


def test_refine_none_returns_the_least_squares_candidate():
    teacher, X, Y, _ = _data(1, 6, 3, 2000, 21)
    learner = SculptLearner(1, search=SearchSettings(refine="none"), random_state=0).fit(X, Y)
    np.testing.assert_array_equal(learner.model_.ws, learner.least_squares_model_.ws)
    assert learner.report_.selection.val_polished is None
    assert learner.report_.selection.certificate["hypotheses"] == learner.search.kept_candidates


def test_moment_learner_recovers_two_heads():
    teacher, X, Y, X_test = _data(2, 4, 5, 1000, 5)
    learner = MomentLearner(2, search=SearchSettings(max_candidates=20000), random_state=1).fit(X, Y)
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    ran = [name for name, result in learner.report_.phases() if result is not None]
    assert ran == ["moment", "net", "selection"] and learner.report_.route == "moment"
    assert learner.report_.net.shape == "ball"  # the moment route reads no hull


def test_body_refuses_when_d_is_not_above_k():
    teacher, X, Y, X_test = _data(1, 4, 5, 600, 8)
    learner = SculptLearner(1, random_state=0).fit(X, Y)
    assert "d = 4 <= k = 5" in learner.report_.span.refused and learner.report_.span.refused_by == "shape"
    assert learner.report_.route == "moment"
    assert "used the moment route" in learner.report_.fallback
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6


def test_solver_failure_falls_back_to_moment_route(monkeypatch):
    teacher, X, Y, X_test = _data(1, 6, 3, 2000, 8)
    monkeypatch.setattr(body.ConvexBody, "min_norm_point", lambda self: (None, {"solver_status": "infeasible"}))
    learner = SculptLearner(1, body=BodySettings(span_point="min_norm"), random_state=0).fit(X, Y)
    assert "infeasible" in learner.report_.refined_sum.failure
    assert "infeasible" in learner.report_.span.refused
    assert learner.report_.route == "moment"
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    with pytest.warns(RuntimeWarning, match="refused") as warned:
        SculptLearner(1, body=BodySettings(span_point="min_norm"), span_route="body", random_state=0).fit(X, Y)
    assert [record.filename for record in warned if "refused" in str(record.message)] == [__file__]


def test_estimator_contract_and_reproducibility():
    learner = SculptLearner(2, body=BodySettings(certify_slack=0.1), random_state=3)
    assert learner.get_params()["body__certify_slack"] == 0.1
    assert clone(learner).set_params(body__certify_slack=0.2).body.certify_slack == 0.2
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
    basis = moment_route.moment_span(X, Y, 2).basis
    assert span_distance(basis, teacher) < 0.1
    random_basis = np.linalg.qr(np.random.default_rng(0).standard_normal((16, 2)))[0].T
    assert span_distance(random_basis, teacher) > 0.5


def test_moment_route_estimates_its_own_span_error():
    # Beyond the linear regime the route's error is mostly the linearisation's bias, which a
    # resampling bootstrap cannot see; the parametric replicate through the softmax does.
    teacher = mhalearn.sample_teacher(2, 4, theta_norm=1.0, rng=9)
    X, Y = mhalearn.make_dataset(teacher, 3000, 6, rng=10)
    moment = moment_route.moment_span(X, Y, 2)
    true_error = span_distance(moment.basis, teacher)
    assert true_error > 0.1
    assert abs(moment.estimated_error - true_error) < 0.05
    unestimated = moment_route.moment_span(X, Y, 2, estimate_error=False)
    assert unestimated.estimated_error is None
    np.testing.assert_array_equal(unestimated.basis, moment.basis)


_SPAN = np.eye(9)[:2]  # span{e_0, e_1} of a 9-dimensional space (m = 2, d = 3)


def _span_reading(estimate, refused=None, basis=_SPAN):
    return SpanReading(seconds=0.0, refused=refused, estimated_error=estimate, basis=basis)


def _moment_result(estimate, basis=_SPAN):
    return moment_route.MomentSpan(seconds=0.0, rows=1, features=1, singular_values=[], spectral_gap=1.0,
                                   linearised_fit=0.0, polish_iterations=0, head_norm=1.0, estimated_error=estimate,
                                   basis=basis)


def test_route_rule_distrusts_a_body_whose_span_the_moment_route_contradicts():
    # Tilt e_1 towards e_2 by an angle of sine 0.5: the spans are 0.5 apart.
    tilted = np.array([np.eye(9)[0], np.sqrt(0.75) * np.eye(9)[1] + 0.5 * np.eye(9)[2]])
    assert moment_route.sine_distance(_SPAN, tilted) == pytest.approx(0.5)
    settings = BodySettings(compare_routes_above=0.07)
    route, reason = choose_route(_span_reading(0.1), _moment_result(0.15, basis=tilted), settings)
    assert route == "moment" and "0.500 apart, more than the body's estimated error 0.100 plus twice" in reason
    # Within the body's estimate plus twice the moment route's, phase 6 decides between both.
    assert choose_route(_span_reading(0.1), _moment_result(0.25, basis=tilted), settings)[0] == "both"
    # Unchecked (span_route="body": the moment route did not run), nothing contradicts the body.
    assert choose_route(_span_reading(0.05), None, settings)[0] == "body"


def test_route_rule_rejects_a_contradicted_body_however_low_its_estimate():
    # A bias every bootstrap resample shares leaves the body's estimate tiny while its span is far off
    # (m = 3, n = 10⁸: 0.96 off, estimated 0.089); the moment route's span is what can contradict it, so
    # the check must not wait for the body's estimate to exceed compare_routes_above.
    far = np.array([np.eye(9)[0], np.sqrt(1 - 0.96 ** 2) * np.eye(9)[1] + 0.96 * np.eye(9)[2]])
    settings = BodySettings(compare_routes_above=0.07)
    for body_estimate in (0.001, 0.03, 0.07):
        route, reason = choose_route(_span_reading(body_estimate), _moment_result(0.1, basis=far), settings)
        assert route == "moment" and "0.960 apart" in reason and "not trusted" in reason
    # Two spans that agree within the estimates keep the body's, alone below compare_routes_above.
    near = np.array([np.eye(9)[0], np.sqrt(1 - 0.1 ** 2) * np.eye(9)[1] + 0.1 * np.eye(9)[2]])
    route, reason = choose_route(_span_reading(0.03), _moment_result(0.1, basis=near), settings)
    assert route == "body" and "0.100 apart, within" in reason


def test_auto_route_runs_the_moment_route_beside_a_confident_body(monkeypatch):
    # The body's estimate is far below compare_routes_above, but its span is wrong with a bias the bootstrap
    # cannot see: the moment route, run in every "auto" fit, contradicts it and reads the span instead.
    teacher, X, Y, X_test = _data(1, 6, 3, 2000, 21)
    real = fit.read_span
    wrong = np.linalg.qr(np.random.default_rng(3).standard_normal((36, 1)))[0].T

    def confident_wrong_span(*args, **kwargs):
        span = real(*args, **kwargs)
        return dataclasses.replace(span, basis=wrong, estimated_error=1e-4, centre=wrong[0] * span.head_norm,
                                   point=wrong[0] * span.head_norm, long_directions=np.empty((0, 36)))
    monkeypatch.setattr(fit, "read_span", confident_wrong_span)
    report = SculptLearner(1, search=SearchSettings(refine="none"), random_state=0).fit(X, Y).report_
    assert report.moment is not None and report.compared_net is None
    assert report.route == "moment" and "not trusted" in report.fallback
    # span_route="body" skips the check: the wrong span is taken.
    unchecked = SculptLearner(1, search=SearchSettings(refine="none"), span_route="body", random_state=0).fit(X, Y)
    assert unchecked.report_.route == "body"


def test_span_route_takes_the_routes_a_request_can_name():
    # SculptLearner checks span_route against plain strings; they must be Route's, or a route renamed in one
    # place would be refused (or never taken) in the other.
    options = SculptLearner._parameter_constraints["span_route"][0].values
    assert options == (Route.AUTO, Route.BODY, Route.MOMENT) and set(Route) - set(options) == {Route.BOTH}


def test_route_rule_prefers_the_body_unless_refused_or_uncertain():
    settings = BodySettings(compare_routes_above=0.07)
    route, reason = choose_route(_span_reading(0.05), None, settings)
    assert route == "body" and "not run" in reason
    route, reason = choose_route(_span_reading(0.05), _moment_result(0.09), settings)
    assert route == "body" and "within" in reason and "<= 0.07" in reason
    # Not contradicted but uncertain, the estimates do not decide: phase 6 does, on held-out data.
    for moment_estimate in (0.09, 0.14):
        route, reason = choose_route(_span_reading(0.13), _moment_result(moment_estimate), settings)
        assert route == "both" and "held-out" in reason
    route, reason = choose_route(_span_reading(0.9, refused="estimated span error 0.9 > 0.15"), _moment_result(0.3),
                                 settings)
    assert route == "moment" and "refused" in reason


def test_sculpt_learner_chooses_between_both_routes_on_held_out_data(monkeypatch):
    teacher, X, Y, X_test = _data(1, 6, 3, 2000, 21)
    report = SculptLearner(1, body=BodySettings(compare_routes_above=0.0), search=SearchSettings(refine="none"),
                           random_state=0).fit(X, Y).report_
    # The body's span is exact here (m = 1): its candidate fits the held-out data better.
    assert report.moment is not None and report.compared_net is not None
    assert report.route == "body" and report.fallback is None and "held-out" in report.route_reason
    assert report.net.shape == "hull slab" and report.compared_net.shape == "ball"
    assert report.selection.certificate["hypotheses"] == len(report.net.kept) + len(report.compared_net.kept)
    # A body whose span is wrong loses to the moment route's on held-out data, whatever its estimate.
    real = fit.read_span
    wrong = np.linalg.qr(np.random.default_rng(3).standard_normal((36, 1)))[0].T

    def wrong_span(*args, **kwargs):
        span = real(*args, **kwargs)
        return dataclasses.replace(span, basis=wrong, centre=wrong[0] * span.head_norm, point=wrong[0] * span.head_norm,
                                   long_directions=np.empty((0, 36)))
    monkeypatch.setattr(fit, "read_span", wrong_span)
    monkeypatch.setattr(fit, "sine_distance", lambda *args: 0.0)  # no contradiction: phase 6 must decide
    learner = SculptLearner(1, body=BodySettings(compare_routes_above=0.0), random_state=0).fit(X, Y)
    assert learner.report_.route == "moment" and "held-out" in learner.report_.fallback
    assert "span from the moment route" in learner.report_.table()
    assert mhalearn.relative_error(learner.model_, teacher, X_test) < 1e-6
    # The default runs the moment route to check the body but, agreeing and confident, searches the body's span alone.
    default = SculptLearner(1, random_state=0).fit(X, Y).report_
    assert default.moment is not None and default.compared_net is None and default.route == "body"


def test_net_scores_match_direct_least_squares():
    rng = np.random.default_rng(1)
    X = mhalearn.boolean_inputs(50, 4, 3, rng=2)
    Y = rng.standard_normal(X.shape)
    points = rng.standard_normal((6, 3, 3))
    candidates = net.candidate_tuples(6, 2)
    assert len(candidates) == 15
    scores = net.score_net(X, Y, points, candidates, ridge=0.0)
    for candidate, score in zip(candidates[:4], scores[:4]):
        loss = kernels.loss_and_grad(X, Y, points[candidate], solve_projections(X, Y, points[candidate]))[0]
        assert score == pytest.approx(2 * loss * X.shape[0] / np.sum(Y ** 2), rel=1e-8)


def test_net_scores_of_a_few_candidates_use_only_their_points(monkeypatch):
    rng = np.random.default_rng(1)
    X = mhalearn.boolean_inputs(50, 4, 3, rng=2)
    Y = rng.standard_normal(X.shape)
    points = rng.standard_normal((30, 3, 3))
    candidates = np.array([[2, 7], [7, 29], [5, 11]])  # 5 of the 30 points, out of order
    calls, original = [], net.kernels.head_features
    monkeypatch.setattr(net.kernels, "head_features",
                        lambda X, thetas: calls.append(len(thetas)) or original(X, thetas))
    scores = net.score_net(X, Y, points, candidates, ridge=0.0)
    assert calls == [5]
    for candidate, score in zip(candidates, scores):
        loss = kernels.loss_and_grad(X, Y, points[candidate], solve_projections(X, Y, points[candidate]))[0]
        assert score == pytest.approx(2 * loss * X.shape[0] / np.sum(Y ** 2), rel=1e-8)


def test_net_points_fill_the_ball():
    points = net.net_points(2, 1.0, 0.5)
    assert len(points) == 13 and np.all(np.linalg.norm(points, axis=1) <= 1.0 + 1e-12)


def _hull_of(thetas):
    """aff{Θ_i} as phase 4 reads it from exact heads: its minimum-norm point and long directions."""
    vectors = thetas.reshape(len(thetas), -1)
    differences = vectors[1:] - vectors[0]
    centre = vectors[0] + np.linalg.lstsq(differences.T, -vectors[0], rcond=None)[0] @ differences
    return centre, np.linalg.svd(differences, full_matrices=False)[2]


def _distance_from_hull(vectors, point, long_directions):
    offsets = vectors - point
    return np.linalg.norm(offsets - (offsets @ long_directions.T) @ long_directions, axis=1)


def test_the_hull_frame_puts_the_hull_on_its_first_axis():
    thetas = np.random.default_rng(4).standard_normal((3, 16))
    point, long_directions = _hull_of(thetas)
    basis = np.linalg.qr(thetas.T)[0].T  # an orthonormal basis of the span
    frame, offset = net.hull_frame(basis, point, long_directions)
    np.testing.assert_allclose(frame @ frame.T, np.eye(3), atol=1e-12)
    # Every head, in frame coordinates, sits at first coordinate = offset: on the hyperplane the slab surrounds.
    np.testing.assert_allclose(((thetas @ basis.T) @ frame.T)[:, 0], offset, rtol=1e-10)
    assert offset == pytest.approx(np.linalg.norm(point), rel=1e-10)  # the minimum-norm point is the hull's foot


def test_a_hull_slab_net_holds_the_ball_points_near_the_hull_only():
    rng = np.random.default_rng(5)
    thetas = rng.standard_normal((3, 9))
    point, long_directions = _hull_of(thetas)
    basis = np.linalg.qr(thetas.T)[0].T
    X = mhalearn.boolean_inputs(300, 4, 3, rng=6)
    Y = rng.standard_normal(X.shape)
    radius = 1.5 * math.sqrt(3) * np.linalg.norm(point)
    settings = mhalearn.learners.chen_li.SearchSettings(max_candidates=5000, kept_candidates=2, net_slab=0.1)
    slab = net.search_net(X, Y, basis, 3, radius, settings, np.random.default_rng(0), hull=(point, long_directions))
    ball = net.search_net(X, Y, basis, 3, radius, settings, np.random.default_rng(0))
    assert slab.shape == "hull slab" and ball.shape == "ball"
    # The same budget buys the slab a finer spacing; its points are the grid's within 0.1·radius of aff{Θ_i}.
    assert slab.resolution < ball.resolution and slab.candidates <= 5000
    kept = np.concatenate([heads.reshape(3, -1) for heads in slab.kept])
    assert np.all(_distance_from_hull(kept, point, long_directions) <= 0.1 * radius + 1e-9)
    frame, offset = net.hull_frame(basis, point, long_directions)
    vectors = (net.net_points(3, radius, slab.resolution, (offset, 0.1 * radius)) @ frame) @ basis
    distances = _distance_from_hull(vectors, point, long_directions)
    assert len(vectors) == slab.net_points + np.sum(np.linalg.norm(vectors, axis=1) == 0)
    assert np.all(distances <= 0.1 * radius + 1e-9) and np.min(distances) < 1e-9  # a layer on the hull itself
    assert np.all(np.linalg.norm(vectors, axis=1) <= radius + 1e-9)


def test_candidates_sharing_their_first_points_score_as_if_alone():
    # Lexicographic triples share the factor of their first two points' block; scored one by one
    # they share nothing.  A point whose features vanish makes every tuple holding it singular.
    rng = np.random.default_rng(3)
    points, d = 7, 3
    features = rng.standard_normal((40, points * d))
    features[:, 4 * d:5 * d] = 0.0
    gram = (features.T @ features).reshape(points, d, points, d)
    cross = (features.T @ rng.standard_normal((40, d))).reshape(points, d, d)
    candidates = net.candidate_tuples(points, 3)
    together = net.score_candidates(gram, cross, candidates, ridge=0.0)
    alone = [net.score_candidates(gram, cross, candidate[None], ridge=0.0)[0] for candidate in candidates]
    assert np.array_equal(together, alone)
    singular = np.any(candidates == 4, axis=1)
    assert np.all(together[singular] == -1.0) and np.all(together[~singular] > 0)
    for candidate, reduction in zip(candidates[~singular][:5], together[~singular][:5]):
        H = np.block([[gram[p, :, q, :] for q in candidate] for p in candidate])
        B = np.vstack([cross[p] for p in candidate])
        assert reduction == pytest.approx(np.trace(B.T @ np.linalg.solve(H, B)), rel=1e-10)


def test_the_best_of_a_net_scored_block_by_block_are_the_best_of_all_its_tuples(monkeypatch):
    rng = np.random.default_rng(1)
    X = mhalearn.boolean_inputs(50, 4, 3, rng=2)
    Y = rng.standard_normal(X.shape)
    points = rng.standard_normal((9, 3, 3))
    monkeypatch.setattr(net, "TUPLE_BLOCK", 10)  # 84 triples in 9 blocks
    best, scores = net.best_of_net(X, Y, points, 3, keep=4)
    every = net.candidate_tuples(9, 3)
    direct = net.score_net(X, Y, points, every)
    order = np.argsort(direct)[:4]
    assert np.array_equal(best, every[order]) and np.allclose(scores, direct[order], rtol=1e-12)


def test_a_full_net_holds_one_block_of_tuples_however_many_it_scores():
    for points in (300, 900):  # 4.5·10⁶ and 1.2·10⁸ triples
        of_points = 8 * (2 * 1024 * points * 12 + (points * 12) ** 2 + 2 * points * 12 * 12)
        full = net.net_memory(points, math.comb(points, 3), 3, 1024, 12)
        assert of_points < full < of_points + 100 * 2 ** 20
    # A random sample of the tuples is held whole.
    assert net.net_memory(900, 10 ** 7, 3, 1024, 12) > 8 * 4 * 10 ** 7


# ------------------------------------------------------------ the typed report_

def test_report_is_the_tuple_of_typed_phase_results():
    teacher, X, Y, _ = _data(1, 6, 3, 2000, 21)
    report = SculptLearner(1, random_state=0).fit(X, Y).report_
    assert report.route == "body" and report.span.refused is None
    assert report.net.seconds < report.total_seconds
    with pytest.raises(AttributeError):  # frozen
        report.span.refused = "no"
    plain = report.as_dict()
    text = json.dumps(plain)  # plain numbers, strings, lists and dicts only (a NaN figure included)
    assert json.dumps(json.loads(text)) == text
    assert plain["route"] == "body" and plain["net"]["candidates"] == report.net.candidates
    assert [body["rule"] for body in plain["sculpt"]] == ["quantile", "absolute"]
    steps = plain["refined_sum"]["steps"]
    assert steps[-1]["iterations"] == report.refined_sum.steps[-1].iterations
    assert "basis" not in plain["span"] and "w_sum" not in plain["crude_sum"]  # data, not figures


def test_every_attention_learner_prints_a_phase_table():
    teacher, X, Y, _ = _data(1, 4, 3, 300, 4)
    moment = MomentLearner(1, search=SearchSettings(max_candidates=2000, refine_iter=50), random_state=0).fit(X, Y)
    table = moment.report_.table()
    assert "crude_sum           -  (not run)" in table and "span from the moment route" in table
    assert "certificate" in table
    gradient = GradientLearner(1, restarts=2, max_iter=30, random_state=0).fit(X, Y)
    steps = [line for line in gradient.report_.table().splitlines() if line.startswith(("data ", "release "))]
    assert len(steps) == 2  # the data's preparation first, the examples' release last: the phases between
    lines = [line for line in gradient.report_.table().splitlines() if line not in steps]
    assert lines[1].startswith("restart") and "restart=0" in lines[1] and "restart=1" in lines[2]
    assert "lbfgs: kept restart" in lines[3]
    assert gradient.report_.runs[1].restart == 1 and gradient.report_.method == "lbfgs"
    zero = GradientLearner(1, random_state=0).fit(X, np.zeros_like(Y))
    assert zero.report_.table() == zero.report_.zero_labels


def test_observer_checks_the_teacher_and_callback_must_be_callable():
    teacher, X, Y, _ = _data(1, 6, 3, 300, 21)
    with pytest.raises(ValueError, match="^teacher: expected 2 heads of dim 6"):
        SculptLearner(2).fit(X, Y, callback=TeacherObserver(teacher))
    with pytest.raises(TypeError, match="^callback: expected a callable"):
        SculptLearner(1).fit(X, Y, callback=teacher)
    with pytest.raises(TypeError, match="^teacher: expected a MultiHeadAttention"):
        TeacherObserver(teacher.thetas)
