"""Evaluation observes, it never steers: a fit is bitwise the same with or without an observer.

The cases: a noisy fit with a small net, where any draw an observer took
from the learner's generator would change the net's subsample (m = 1,
d = 8, k = 4, label noise 0.05, four seeds), a d ≤ k fit on the
moment route, and an m = 2 fit on the body; each with the teacher observer
and its K* minimum-norm comparison switched on, which solves a convex
problem of its own between phases.
"""

import ast
from pathlib import Path

import numpy as np
import pytest

import mhalearn
from mhalearn import (
    BodySettings,
    GradientLearner,
    MomentLearner,
    MultiHeadAttention,
    SculptLearner,
    SearchSettings,
    TeacherObserver,
)
from mhalearn.evaluation import compare_moment_route, fit_timed
from mhalearn.learners.report import Phase


def _noisy_data(heads, dim, length, samples, seed, noise=0.0):
    teacher = mhalearn.sample_teacher(heads, dim, rng=seed)
    X, Y = mhalearn.make_dataset(teacher, samples, length, noise=noise, rng=seed + 1)
    return teacher, X, Y


def _assert_same_layers(first, second):
    for name in ("model_", "least_squares_model_"):
        if hasattr(first, name):
            np.testing.assert_array_equal(getattr(first, name).thetas, getattr(second, name).thetas)
            np.testing.assert_array_equal(getattr(first, name).ws, getattr(second, name).ws)


CASES = [
    # (learner factory, heads, d, k, n, noise, seed)
    pytest.param(lambda: SculptLearner(1, search=SearchSettings(refine="none", max_candidates=5000, score_samples=64,
                                                                kept_candidates=1), random_state=0),
                 1, 8, 4, 4000, 0.05, seed, id=f"noisy-m1-seed{seed}")
    for seed in range(4)
] + [
    pytest.param(lambda: SculptLearner(1, search=SearchSettings(max_candidates=2000, refine_iter=50), random_state=1),
                 1, 4, 5, 600, 0.0, 8,
                 id="d<=k-moment-fallback"),
    pytest.param(lambda: SculptLearner(2, body=BodySettings(quantile=0.05),
                                       search=SearchSettings(max_candidates=3000, refine_iter=50), random_state=2),
                 2, 6, 3, 6000, 0.0, 3, id="m2-body"),
    pytest.param(lambda: MomentLearner(2, search=SearchSettings(max_candidates=3000, refine_iter=50), random_state=0),
                 2, 4, 5, 800, 0.0, 5,
                 id="moment-learner"),
    pytest.param(lambda: GradientLearner(1, restarts=2, max_iter=50, random_state=0), 1, 4, 5, 300, 0.0, 11,
                 id="gradient-learner"),
]


@pytest.mark.parametrize("make, heads, dim, length, samples, noise, seed", CASES)
def test_a_fit_is_bitwise_the_same_with_or_without_an_observer(make, heads, dim, length, samples, noise, seed):
    teacher, X, Y = _noisy_data(heads, dim, length, samples, seed, noise)
    observer = TeacherObserver(teacher, compare_min_norm=True)
    watched, alone = make().fit(X, Y, callback=observer), make().fit(X, Y)
    _assert_same_layers(watched, alone)
    assert watched.report_.as_dict().keys() == alone.report_.as_dict().keys()
    assert observer.records and observer.seconds > 0.0
    # Every figure the observer gives is a number it measured, not a placeholder.
    assert all(isinstance(value, float) for _, figures, _ in observer.records for value in figures.values())


def test_observer_figures_match_an_independent_computation():
    teacher, X, Y = _noisy_data(1, 6, 3, 2000, 21)
    observer = TeacherObserver(teacher)
    learner = SculptLearner(1, search=SearchSettings(refine="none"), random_state=0).fit(X, Y, callback=observer)
    # The paper's output is off by ~1e-3, so the unit conversion's rounding is far below the tolerance.
    expected = mhalearn.parameter_error(learner.model_, teacher)["total"]
    assert expected > 1e-6
    assert observer.figure("selection", "parameter_error") == pytest.approx(expected, rel=1e-6)
    # Ŵ_Σ is in the learner's units (Y / s_Y): its error against the standardised truth is unit-free.
    crude = learner.report_.crude_sum.w_sum * learner.report_.y_scale
    truth = teacher.projection_sum
    assert observer.figure("crude_sum", "w_sum_error") == pytest.approx(
        np.linalg.norm(crude - truth) / np.linalg.norm(truth), rel=1e-9)


def test_stored_fit_time_excludes_the_observer(monkeypatch):
    # The clock jumps 1000 s inside every observer call: a fit, or any of its phases, that counted the
    # observer's time would read ≥ 1000 s, however busy the machine is.
    import time

    teacher, X, Y = _noisy_data(1, 6, 3, 1500, 21)
    jump, offset, real_clock = 1000.0, [0.0], time.perf_counter
    monkeypatch.setattr(time, "perf_counter", lambda: real_clock() + offset[0])
    watch = TeacherObserver.__call__

    def slow_observer(self, phase, result):
        watch(self, phase, result)
        offset[0] += jump
        self.seconds += jump

    monkeypatch.setattr(TeacherObserver, "__call__", slow_observer)
    learner = SculptLearner(1, search=SearchSettings(refine_iter=50), random_state=0)
    seconds, observer = fit_timed(learner, X, Y, teacher)
    assert observer.seconds >= jump * len(observer.records) and offset[0] >= jump * 3
    assert 0 < seconds < jump and 0 < learner.report_.total_seconds < jump
    timed = [(name, result.seconds) for name, result in learner.report_.phases()
             if result is not None and hasattr(result, "seconds")]
    assert len(timed) >= 3 and all(0 <= phase_seconds < jump for _, phase_seconds in timed), timed


def test_compare_moment_route_is_the_moment_route_on_standardised_data_with_its_own_generator():
    from mhalearn.evaluation import span_distance
    from mhalearn.learners.moment_route import moment_span

    teacher, X, Y = _noisy_data(2, 4, 5, 800, 5)
    comparison = compare_moment_route(X, 3.0 * Y, 2, teacher, np.random.default_rng(0))
    direct = moment_span(X, Y / np.sqrt(np.mean(Y ** 2)), 2, rng=np.random.default_rng(0))
    assert comparison["moment_distance"] == pytest.approx(span_distance(direct.basis, teacher), rel=1e-6)
    assert comparison["moment_seconds"] > 0.0


# ------------------------------------------------------------ the phase names, one decision each

def _notify_calls():
    """(file, line, first argument) of every ``notify(...)`` call in the package."""
    root = Path(mhalearn.__file__).parent
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "notify":
                yield path.relative_to(root), node.lineno, node.args[0] if node.args else None


def test_every_phase_is_observed_or_deliberately_not():
    """The observer decides, for each phase a learner can tell, to measure it or not; a new phase needs a decision."""
    observed, unobserved = set(TeacherObserver.OBSERVED), set(TeacherObserver.UNOBSERVED)
    assert not observed & unobserved
    assert observed | unobserved == set(Phase)
    assert all(callable(method) for method in TeacherObserver.OBSERVED.values())


def test_learners_tell_phases_only_by_their_names():
    # A literal ("span") would pass the Notifier's check as long as it is spelt right; named, a renamed or
    # removed phase fails at import and a new one fails the test above.
    calls = list(_notify_calls())
    assert len(calls) >= 10  # base, gradient, moment and chen_li.fit all tell their phases
    for path, line, argument in calls:
        named = (isinstance(argument, ast.Attribute) and isinstance(argument.value, ast.Name)
                 and argument.value.id == "Phase")
        assert named, f"{path}:{line}: notify's phase is not a Phase member"


def test_a_phase_outside_the_names_is_refused_by_the_notifier_and_the_observer():
    from mhalearn.learners.report import Notifier

    seen = []
    notify = Notifier(lambda phase, result: seen.append(phase))
    with pytest.raises(ValueError, match=r"^phase: expected a mhalearn.learners.report.Phase, received 'spam'"):
        notify("spam", None)
    with pytest.raises(ValueError, match=r"^phase: expected a mhalearn.learners.report.Phase"):
        Notifier(None)("spam", None)  # refused even with nobody watching: the learner's mistake shows in any fit
    assert seen == []
    teacher = mhalearn.sample_teacher(1, 4, rng=0)
    with pytest.raises(ValueError, match=r"^phase: expected a mhalearn.learners.report.Phase, received 'spam'"):
        TeacherObserver(teacher)("spam", None)


SMALL_SEARCH = SearchSettings(max_candidates=2000, refine_iter=20)


@pytest.mark.parametrize("make, heads, dim, length, samples", [
    (lambda: SculptLearner(1, search=SMALL_SEARCH, random_state=1), 1, 6, 3, 1500),
    (lambda: SculptLearner(1, search=SMALL_SEARCH, random_state=1), 1, 4, 5, 600),
    (lambda: MomentLearner(1, search=SMALL_SEARCH, random_state=0), 1, 4, 5, 600),
    (lambda: GradientLearner(1, restarts=2, max_iter=20, random_state=0), 1, 4, 5, 300),
], ids=["sculpt-body", "sculpt-d<=k", "moment", "gradient"])
def test_what_a_fit_tells_is_recorded_under_its_phase(make, heads, dim, length, samples):
    teacher, X, Y = _noisy_data(heads, dim, length, samples, 3)
    observer = TeacherObserver(teacher)
    learner = make().fit(X, Y, callback=observer)
    phases = [phase for phase, _, _ in observer.records]
    assert phases[0] is Phase.START and all(type(phase) is Phase for phase in phases)
    # Every phase the report shows ran was told to the observer (the report's names are the phases').
    ran = {name for name, result in learner.report_.phases() if result is not None and name != "compared_net"}
    assert ran <= set(phases)
    assert [record["phase"] for record in observer.as_dict()] == [str(phase) for phase in phases]


def test_the_observer_places_the_heads_hull_in_k_stars_spectrum():
    # At m ≥ 2 phase 4's figures include where the hull falls among K*'s d² directions (1 at best, at m = 2).
    teacher, X, Y = _noisy_data(2, 6, 3, 6000, 3, 0.0)
    observer = TeacherObserver(teacher)
    SculptLearner(2, body=BodySettings(quantile=0.05), search=SearchSettings(max_candidates=3000, refine_iter=50),
                  random_state=2).fit(X, Y, callback=observer)
    rank = observer.figure("span", "hull_rank")
    assert rank == int(rank) and 0 <= rank < 36  # a count of K*'s d² = 36 eigenvalues (checked exactly below)
    one_head, X, Y = _noisy_data(1, 6, 3, 1500, 21)
    observer = TeacherObserver(one_head)
    SculptLearner(1, search=SearchSettings(refine_iter=50), random_state=0).fit(X, Y, callback=observer)
    assert observer.figure("span", "hull_rank") is None  # no hull direction at m = 1


def test_hull_direction_ranks_count_the_eigenvalues_below_the_hull():
    # An independent reference: slabs E = diag(s) of half-width 2 give K*'s normal matrix diag(s²/4), whose
    # eigenvectors are the coordinates.  A teacher with Θ_2 − Θ_1 along coordinate j has its hull at
    # eigenvalue s_j²/4, so its rank is the number of s_i < s_j.
    from mhalearn.evaluation.observer import hull_direction_ranks
    from mhalearn.learners.chen_li.slabs import SlabSystem

    scales = np.array([3.0, 1.0, 4.0, 2.0])
    slabs = SlabSystem(np.diag(scales), np.zeros(4), np.full(4, 2.0), np.zeros((0, 4)), np.zeros(0),
                       np.arange(4), np.zeros(0, int))
    for j, expected in enumerate([2, 0, 3, 1]):
        thetas = np.zeros((2, 2, 2))
        thetas[1].flat[j] = 1.5
        teacher = MultiHeadAttention(thetas, np.ones((2, 2, 2)))
        assert hull_direction_ranks(slabs, teacher) == [expected]


@pytest.mark.parametrize("chunks", [None, 1000])
def test_the_steps_and_phases_of_a_fit_add_up_to_its_wall_time(monkeypatch, chunks):
    # Every second of a fit is in a named step or phase, the observers' apart: their seconds add up to the wall
    # time measured around fit().  What no step or phase times is the Python between them (the route's choice,
    # the report's assembly): 0.4–0.8 % of 3 s fits on a loaded 2-core machine; 2 % (the tolerance of issue 72)
    # of a fit of ≥ 1 s is ≥ 20 ms, far above it.  A sleep inside each step outside the phases (the data's
    # preparation, the certificate's bounds) and inside the observer makes every boundary count: 0.3 s, ≥ 10 %
    # of the fit, would break the tolerance wherever a step went unattributed or an observer was counted.
    import time

    import dask

    from mhalearn.learners import base, span_search

    pause = 0.3
    for module, name in ((base, "prepare_fit_data"), (span_search, "certificate_assumptions")):
        original = getattr(module, name)

        def slowed(*args, original=original, **kwargs):
            time.sleep(pause)
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, slowed)
    calls = []

    def slow_observer(phase, result):
        calls.append(phase)
        time.sleep(0.05)

    teacher = mhalearn.sample_teacher(1, 6, rng=21)
    X, Y = mhalearn.make_dataset(teacher, 4000, 3, rng=22, chunks=chunks)
    learner = SculptLearner(1, search=SearchSettings(refine="none", max_candidates=2000), random_state=0)
    with dask.config.set(scheduler="threads"):
        start = time.perf_counter()
        learner.fit(X, Y, callback=slow_observer)
        wall = time.perf_counter() - start
    report = learner.report_
    steps = {step.name: step.seconds for step in report.steps}
    assert steps["data"] >= pause and steps["bounds"] >= pause, steps
    assert report.observer_seconds >= 0.05 * len(calls) and len(calls) >= 6
    assert report.total_seconds + report.observer_seconds == pytest.approx(wall, rel=0.005)
    attributed = report.attributed_seconds()
    assert abs(wall - report.observer_seconds - attributed) <= 0.02 * wall, (wall, attributed, report.table())
    assert f"{attributed:.2f} s in the steps and phases above" in report.table()
