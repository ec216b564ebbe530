"""Learning from queries (issue 76): the oracle, the single-head learner, the non-identifiable pair."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError

import mhalearn
from mhalearn.queries import designs

# ------------------------------------------------------------------ the oracle


def test_the_oracle_answers_the_teacher_and_counts_sequences():
    teacher = mhalearn.sample_teacher(2, 5, rng=0)
    oracle = mhalearn.QueryOracle(teacher)
    X = mhalearn.boolean_inputs(7, 3, 5, rng=1)
    np.testing.assert_array_equal(oracle(X), teacher.predict(X))
    oracle(X[:2])
    assert (oracle.queries, oracle.real_queries) == (9, 0)


def test_the_oracle_noise_is_gaussian_with_the_given_sigma_and_fresh_each_time():
    teacher = mhalearn.sample_teacher(1, 4, rng=0)
    oracle = mhalearn.QueryOracle(teacher, noise=0.1, rng=2)
    X = mhalearn.boolean_inputs(2000, 4, 4, rng=3)
    first, second = oracle(X) - teacher.predict(X), oracle(X) - teacher.predict(X)
    # 32,000 draws: the mean within 4 standard errors of 0, the standard deviation within 2 %.
    assert abs(first.mean()) < 4 * 0.1 / math.sqrt(first.size)
    assert first.std() == pytest.approx(0.1, rel=0.02)
    assert abs(np.corrcoef(first.ravel(), second.ravel())[0, 1]) < 0.03
    assert oracle.queries == 4000


def test_the_oracle_rounds_to_its_tolerance():
    teacher = mhalearn.sample_teacher(1, 4, rng=0)
    oracle = mhalearn.QueryOracle(teacher, tolerance=0.05)
    X = mhalearn.boolean_inputs(50, 4, 4, rng=3)
    answers = oracle(X)
    np.testing.assert_allclose(answers / 0.05, np.round(answers / 0.05), atol=1e-9)
    assert np.max(np.abs(answers - teacher.predict(X))) <= 0.025 + 1e-12
    assert np.max(np.abs(answers - teacher.predict(X))) > 0.005


@pytest.mark.parametrize("bad, message", [
    (np.full((2, 3, 4), 0.5), r"^X: expected Boolean entries .* allow_real=True"),
    (np.ones((2, 3, 5)), r"^X: expected token dimension 4"),
    (np.ones((3, 4)), r"^X: expected an array of rank 3"),
    (np.where(np.arange(24).reshape(2, 3, 4) == 5, np.nan, 1.0), r"^X: expected finite values"),
    (np.ones((0, 3, 4)), r"^X: expected shape \(samples, length, dim\) with all sizes >= 1"),
])
def test_the_oracle_refuses_bad_input_before_answering_or_counting(bad, message):
    oracle = mhalearn.QueryOracle(mhalearn.sample_teacher(1, 4, rng=0))
    with pytest.raises(ValueError, match=message):
        oracle(bad)
    assert oracle.queries == 0


def test_real_tokens_are_answered_only_when_allowed_and_counted_apart():
    teacher = mhalearn.sample_teacher(1, 4, rng=0)
    oracle = mhalearn.QueryOracle(teacher, allow_real=True)
    X = mhalearn.boolean_inputs(5, 3, 4, rng=1)
    X[1, 0, 2] = 0.5
    X[3] *= 2.0
    np.testing.assert_array_equal(oracle(X), teacher.predict(X))
    assert (oracle.queries, oracle.real_queries) == (5, 2)


@pytest.mark.parametrize("keywords, message", [
    ({"noise": -1.0}, r"^noise: expected a value >= 0"),
    ({"tolerance": 0.0}, r"^tolerance: expected a value > 0"),
    ({"allow_real": 1}, r"^allow_real: expected bool"),
])
def test_the_oracle_checks_its_settings(keywords, message):
    with pytest.raises((ValueError, TypeError), match=message):
        mhalearn.QueryOracle(mhalearn.sample_teacher(1, 3, rng=0), **keywords)
    with pytest.raises(TypeError, match="^teacher: expected MultiHeadAttention"):
        mhalearn.QueryOracle(np.zeros((1, 3, 3)))


def test_the_oracle_exposes_no_public_attribute_holding_the_teacher():
    teacher = mhalearn.sample_teacher(1, 3, rng=0)
    oracle = mhalearn.QueryOracle(teacher)
    public = {name: getattr(oracle, name) for name in dir(oracle) if not name.startswith("_")}
    assert not [name for name, value in public.items()
                if isinstance(value, (mhalearn.MultiHeadAttention, np.ndarray))]


# --------------------------------------------------------- the single head

@pytest.mark.parametrize("dim, distinct", [(6, 2), (8, 2), (8, 4)])
def test_one_head_is_recovered_exactly_from_order_d_squared_queries(dim, distinct):
    teacher = mhalearn.sample_teacher(1, dim, rng=100 + dim)
    oracle = mhalearn.QueryOracle(teacher)
    learner = mhalearn.QueryLearner(1, distinct=distinct, random_state=1).fit(oracle)
    X = mhalearn.boolean_inputs(500, 4, dim, rng=2)
    assert mhalearn.relative_error(learner.model_, teacher, X) <= 1e-20
    assert mhalearn.parameter_error(learner.model_, teacher)["total"] <= 1e-10
    # d for W, ⌈d²/(t(t − 1))⌉ for Θ, and at most one extra round of an eighth when the design lacked rank.
    needed = math.ceil(dim * dim / (distinct * (distinct - 1)))
    report = learner.report_
    assert report.queries == oracle.queries == sum(report.queries_by_step().values())
    assert report.queries_by_step()["projection"] == dim
    assert needed <= report.queries_by_step()["theta"] <= needed + max(1, needed // 8)
    assert report.real_queries == 0 and report.residual < 1e-20
    assert [step.rank for step in report.steps] == [dim, dim * dim]
    # An exact oracle's answers, all explained, need no polish.
    assert [step.name for step in report.steps] == ["projection", "theta"]


def test_a_noisy_oracle_is_learned_to_its_noise_level():
    teacher = mhalearn.sample_teacher(1, 6, rng=7)
    X = mhalearn.boolean_inputs(500, 4, 6, rng=2)
    errors = {}
    for oversample, refine in ((2.0, "none"), (8.0, "none"), (8.0, "auto")):
        oracle = mhalearn.QueryOracle(teacher, noise=1e-3, rng=3)
        learner = mhalearn.QueryLearner(1, oversample=oversample, refine=refine, random_state=1).fit(oracle)
        errors[oversample, refine] = mhalearn.relative_error(learner.model_, teacher, X)
        assert learner.report_.queries == oracle.queries == math.ceil(oversample * 6) + math.ceil(oversample * 18)
        assert (learner.report_.steps[-1].name == "polish") == (refine == "auto")
    # σ = 1e-3: each two-token query tells two noisy logits about Θ, so the error sits near σ²·d²/queries
    # (a few 1e-5 at 36 Θ-queries); four times the queries divide it by about four, and the polish on every
    # answer lowers it further.
    assert errors[8.0, "none"] < errors[2.0, "none"] / 3
    assert errors[8.0, "auto"] < errors[8.0, "none"] < 1e-6


def test_the_exact_solves_read_the_attention_the_teacher_pays():
    teacher = mhalearn.sample_teacher(1, 5, rng=4)
    sets = designs.draw_token_sets(6, 3, 5, np.random.default_rng(0))
    sequences, counts = designs.spread_sequences(sets, 5)
    shares = designs.attention_shares(sets, teacher.predict(sequences), teacher.ws)[:, :, 0, :]
    weights = teacher.attention(sequences)[:, 0]  # (n, k, k)
    slots = np.arange(5) % 3
    for row in range(3):
        expected = np.stack([weights[:, row, slots == s].sum(axis=1) for s in range(3)], axis=1)
        np.testing.assert_allclose(shares[:, row], expected, atol=1e-13)
    np.testing.assert_array_equal(counts, [2, 2, 1])


def test_the_basis_tokens_are_independent_signs_for_every_dimension():
    for dim in range(1, 20):
        tokens = designs.basis_tokens(dim)
        assert set(np.unique(tokens)) <= {-1.0, 1.0}
        assert np.linalg.matrix_rank(tokens) == dim


# ------------------------------------------------------ the learner's contract

def test_the_query_learner_follows_the_estimator_contract():
    learner = mhalearn.QueryLearner(1, oversample=1.5, random_state=0)
    assert clone(learner).get_params() == learner.get_params()
    X = mhalearn.boolean_inputs(20, 4, 4, rng=0)
    with pytest.raises(NotFittedError):
        learner.predict(X)
    teacher = mhalearn.sample_teacher(1, 4, rng=0)
    first = clone(learner).fit(mhalearn.QueryOracle(teacher))
    second = clone(learner).fit(mhalearn.QueryOracle(teacher))
    np.testing.assert_array_equal(first.predict(X), second.predict(X))
    assert first.n_features_in_ == 4
    restored = pickle.loads(pickle.dumps(first))
    np.testing.assert_array_equal(restored.predict(X), first.predict(X))
    assert first.score(X, teacher.predict(X)) == pytest.approx(1.0, abs=1e-12)
    assert not [key for key in vars(clone(first)) if key.endswith("_")]


@pytest.mark.parametrize("keywords, message", [
    ({"length": 1}, r"^length: expected an integer >= 2"),
    ({"distinct": 5}, r"^distinct: expected at most min\(length, d \+ 1\) = 4"),
    ({"oversample": 0.5}, r"^oversample: expected a real number in \[1, inf\)"),
    ({"refine": "adam"}, r"^refine: expected one of 'auto', 'lbfgs', 'none'"),
])
def test_the_query_learner_checks_its_parameters_at_fit(keywords, message):
    learner = mhalearn.QueryLearner(1, **keywords)  # stored unchecked, as scikit-learn asks
    oracle = mhalearn.QueryOracle(mhalearn.sample_teacher(1, 4, rng=0))
    with pytest.raises(ValueError, match=message):
        learner.fit(oracle)
    assert oracle.queries == 0


def test_the_query_learner_takes_an_oracle_only():
    with pytest.raises(TypeError, match="^oracle: expected a QueryOracle"):
        mhalearn.QueryLearner(1).fit(mhalearn.sample_teacher(1, 3, rng=0))


# ------------------------------------------------------- non-identifiability

def test_the_non_identifiable_pair_has_one_map_and_two_parameterisations():
    first, second = mhalearn.non_identifiable_pair(3, 5, rng=0)
    assert first.heads == second.heads == 3
    for X in (mhalearn.boolean_inputs(200, 4, 5, rng=1), mhalearn.gaussian_inputs(200, 4, 5, rng=2)):
        np.testing.assert_allclose(first.predict(X), second.predict(X), atol=1e-12)
    # No permutation of heads relates them: the head-matched parameters differ.
    assert mhalearn.parameter_error(first, second)["w"] > 0.1
    # Each is a split of a two-head layer whose map it keeps.
    merged = mhalearn.MultiHeadAttention(first.thetas[:2], np.stack([first.ws[0] + first.ws[2], first.ws[1]]))
    X = mhalearn.boolean_inputs(50, 3, 5, rng=3)
    np.testing.assert_allclose(merged.predict(X), first.predict(X), atol=1e-12)


def test_splitting_a_head_keeps_the_map_for_any_part():
    layer = mhalearn.sample_teacher(2, 4, rng=5)
    part = np.random.default_rng(6).standard_normal((4, 4))
    split = mhalearn.split_head(layer, 1, part)
    X = mhalearn.boolean_inputs(100, 4, 4, rng=7)
    assert split.heads == 3
    np.testing.assert_allclose(split.predict(X), layer.predict(X), atol=1e-12)
    np.testing.assert_array_equal(split.ws[1], part)
    with pytest.raises(ValueError, match="^head: expected an index below the layer's 2 heads"):
        mhalearn.split_head(layer, 2, part)


# -------------------------------------------------------------- several heads

@pytest.mark.parametrize("heads", [2, 3])
def test_several_generic_heads_are_learned_from_scans_and_pairs(heads):
    teacher = mhalearn.sample_teacher(heads, 8, rng=200 + heads)
    oracle = mhalearn.QueryOracle(teacher)
    learner = mhalearn.QueryLearner(heads, random_state=1).fit(oracle)
    X = mhalearn.boolean_inputs(500, 4, 8, rng=2)
    assert mhalearn.relative_error(learner.model_, teacher, X) <= 1e-10
    assert mhalearn.parameter_error(learner.model_, teacher)["total"] <= 1e-4
    report = learner.report_
    assert report.separable and report.notes == () and report.sum_mismatch < 1e-10 and report.residual < 1e-12
    # d + d for W_Σ (oversampled twice), d scans of 2m + 3 sequences, 2(d − 1) to align, 2·d²/2 (and
    # perhaps an eighth more) for the Θ_i.
    by_step = report.queries_by_step()
    assert [by_step[name] for name in ("projection", "rows", "align")] == [16, 8 * (2 * heads + 3), 14]
    assert 64 <= by_step["theta"] <= 72
    assert report.queries == oracle.queries


def test_heads_sharing_their_attention_are_reported_inseparable():
    first, _ = mhalearn.non_identifiable_pair(3, 8, rng=0)
    learner = mhalearn.QueryLearner(3, tries=2, random_state=1).fit(mhalearn.QueryOracle(first))
    assert learner.report_.separable is False
    assert len(learner.report_.notes) == 8
    assert "two heads attend alike" in learner.report_.notes[0]


def test_the_scan_separates_the_rows_and_gaps_of_every_head():
    from mhalearn.queries import heads as heads_module

    teacher = mhalearn.sample_teacher(3, 6, rng=9)
    base = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    sequences, fractions = heads_module.scan_sequences(base, 2, 10)
    values = heads_module.scan_values(base, teacher.predict(sequences), fractions, teacher.projection_sum)
    separation = heads_module.separate_heads(fractions, values, 3)
    assert separation.separable and separation.residual < 1e-12
    other = heads_module.flipped(base, 2)
    gaps = np.array([base @ theta @ (other - base) for theta in teacher.thetas])
    order = np.argsort(np.exp(-gaps) - 1.0)
    np.testing.assert_allclose(separation.poles, np.exp(-gaps[order]) - 1.0, rtol=1e-9)
    np.testing.assert_allclose(separation.vectors, -2.0 * base[2] * teacher.ws[order, 2, :], atol=1e-9)


def test_the_learner_refuses_more_heads_than_its_solves_can_hold():
    oracle = mhalearn.QueryOracle(mhalearn.sample_teacher(1, 6, rng=0))
    with pytest.raises(ValueError, match=r"^heads: aligning the rows of 4 heads .* expected 2·heads ≤ d"):
        mhalearn.QueryLearner(4).fit(oracle)
    with pytest.raises(ValueError, match=r"^scan_length: expected at least 2·heads \+ 2 = 6"):
        mhalearn.QueryLearner(2, scan_length=5).fit(oracle)
    assert oracle.queries == 0


# ------------------------------------------------------- the queries-to-eps experiment

def test_the_queries_to_eps_quick_sweep_runs_and_plots(tmp_path):
    import sqlite3

    from mhalearn.cli import main
    from mhalearn.experiments.queries_to_eps import plot_queries_to_eps

    db = tmp_path / "q.db"
    assert main(["sweep", "queries-to-eps", "--quick", "--db", str(db), "--workers", "1", "--quiet"]) == 0
    from mhalearn.experiments.store import ResultStore

    with ResultStore(db, readonly=True) as store:
        rows = store.rows("queries-to-eps")
    assert sorted(row["heads"] for row in rows) == [1, 2]
    for row in rows:
        learner = mhalearn.QueryLearner(row["heads"], length=3, oversample=1.0)
        # An exact oracle: the smallest design reaches ε, and no probe below it is possible.
        assert not row["censored"] and row["queries_lower"] == 0
        assert learner.planned_queries(6) <= row["queries_needed"] <= learner.planned_queries(6) + 4
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM results").fetchone()[0] == 2
    examples = [{"family": "random", "dim": 6, "length": 3, "noise": 0.0, "learner": "gradient", "output": "polished",
                 "eps": 1e-6, "heads": heads, "seed": 0, "budget": 200, "samples_needed": 50 * heads,
                 "censored": False, "ratio": 1.2, "non_monotone": False} for heads in (1, 2)]
    png, text = plot_queries_to_eps(rows, tmp_path / "fig", examples=examples)
    assert png.is_file()
    assert "gradient polished" in text.read_text() and "every probe" in text.read_text()


def test_a_search_the_learner_refuses_is_censored_with_the_reason():
    from mhalearn.experiments.queries_to_eps import oversample_for, run_queries_to_eps_cell

    cell = {"family": "random", "dim": 6, "length": 3, "noise": 0.0, "heads": 4, "distinct": 2, "eps": 1e-6,
            "budget": 500, "seed": 0}
    row = run_queries_to_eps_cell(cell)
    assert row["censored"] and row["queries_needed"] is None
    assert row["refused"].startswith("heads: aligning the rows of 4 heads")
    one = {**cell, "heads": 1}
    assert oversample_for(one, 10) is None  # below the design at oversampling 1 (6 + 18 = 24 queries)
    for queries in (24, 50, 333):
        oversample = oversample_for(one, queries)
        assert mhalearn.QueryLearner(1, length=3, oversample=oversample).planned_queries(6) <= queries
        assert mhalearn.QueryLearner(1, length=3, oversample=oversample * 1.05).planned_queries(6) > queries


def test_a_low_rank_head_is_recovered_exactly_from_order_r_d_queries():
    dim, rank = 16, 2
    rng = np.random.default_rng(11)
    theta = rng.standard_normal((dim, rank)) @ rng.standard_normal((rank, dim))
    teacher = mhalearn.MultiHeadAttention((2.0 * theta / np.linalg.norm(theta))[None],
                                          mhalearn.sample_teacher(1, dim, rng=12).ws)
    oracle = mhalearn.QueryOracle(teacher)
    learner = mhalearn.QueryLearner(1, rank=rank, random_state=3).fit(oracle)
    X = mhalearn.boolean_inputs(500, 4, dim, rng=2)
    assert mhalearn.relative_error(learner.model_, teacher, X) <= 1e-20
    # 2r(2d − r) = 120 measurements, two a query: 60 Θ-queries where a full Θ takes 128.
    assert learner.report_.queries_by_step() == {"projection": dim, "theta": 60}
    assert learner.planned_queries(dim) == oracle.queries == 76
    assert np.linalg.matrix_rank(learner.model_.thetas[0], tol=1e-9) == rank


def test_sharp_attention_is_read_by_asking_nearby_tokens():
    # ‖Θ‖_F = 8: some random pairs' smaller share falls below the answers' precision; those measurements are
    # left out and sets of tokens one or two flips apart are asked until the readable ones have rank d².
    teacher = mhalearn.make_teacher("peaked", 1, 12, rng=42)
    oracle = mhalearn.QueryOracle(teacher)
    learner = mhalearn.QueryLearner(1, random_state=0).fit(oracle)
    X = mhalearn.boolean_inputs(500, 4, 12, rng=2)
    assert mhalearn.relative_error(learner.model_, teacher, X) <= 1e-12
    theta = learner.report_.steps[-1]
    assert theta.name == "theta" and theta.rank == 144 and theta.queries > 72
    near = designs.draw_near_sets(20, 3, 12, 2, np.random.default_rng(0))
    assert np.all(np.sum(near[:, 1:] != near[:, :1], axis=2) == 2)
