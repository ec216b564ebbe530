"""The sculpting phases of Chen & Li's learner, each against an independent reference."""

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mhalearn
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.data.sources import ArraySource
from mhalearn.evaluation import (
    certification_precision,
    hull_direction_ranks,
    log_ratio_disagreement,
    span_distance,
    teacher_feasible_fraction,
    teacher_feasible_rows,
)
from mhalearn.learners.chen_li import (
    agreement_passes,
    agreement_rows,
    alternating_refit,
    body,
    decoder,
    phase1_crude_sum,
    phase4_span,
)
from mhalearn.learners.chen_li import phase3_refine_sum as projection_sum
from mhalearn.learners.chen_li.phase2_sculpt import sculpt_body
from mhalearn.learners.chen_li.settings import BodySettings
from mhalearn.learners.chen_li.slabs import (
    SlabSystem,
    distinct_token_weights,
    kstar_slab_rule,
    kstar_weight_threshold,
    slab_constraints,
)
from mhalearn.learners.moment_route import sine_distance

# The helpers take their settings from the caller: the tests that do not vary one pass the default.
TOL, CONSTRAINTS = BodySettings.simplex_tol, BodySettings.max_constraints
W_MIN, KAPPA, T_MIN = BodySettings.w_min, BodySettings.slab_width, BodySettings.slab_floor


def _constrained_least_squares(values, target):
    """argmin ‖aᵀV − y‖ s.t. Σa = 1 from the KKT system (NumPy, no elimination)."""
    k = values.shape[0]
    kkt = np.zeros((k + 1, k + 1))
    kkt[:k, :k] = values @ values.T
    kkt[:k, k] = kkt[k, :k] = 1.0
    rhs = np.concatenate([values @ target, [1.0]])
    return np.linalg.lstsq(kkt, rhs, rcond=None)[0][:k]


def test_decoded_patterns_match_kkt_solution(rng):
    teacher = mhalearn.sample_teacher(2, 7, rng=1)
    X, Y = mhalearn.make_dataset(teacher, 40, 4, rng=2)
    w_sum = teacher.projection_sum + 0.05 * rng.standard_normal((7, 7))
    patterns, residuals, violations, _ = decoder.decode_patterns(X, Y, w_sum)
    for s in range(5):
        values = X[s] @ w_sum
        for row in range(4):
            expected = _constrained_least_squares(values, Y[s, row])
            np.testing.assert_allclose(patterns[s, row], expected, atol=1e-9)
            fitted = expected @ values
            assert residuals[s, row] == pytest.approx(np.linalg.norm(fitted - Y[s, row]) / np.linalg.norm(Y[s, row]))
            assert violations[s, row] == pytest.approx(max(0.0, -expected.min(), expected.max() - 1.0), abs=1e-12)


@pytest.mark.parametrize("length", [4, 3])
def test_the_residual_pass_gives_each_rows_label_squares_summed_in_order(length):
    # ‖y‖² of every row with a finite residual, y the label divided by its scale: the sum of its squares from
    # 0 in the order e = 1..d, to the bit, from the batched kernel (Boolean tokens by their codes, k = 4) and
    # from the sequence-at-a-time one (k = 3, or tokens read as floats), with identical tokens among them.
    from mhalearn.data.sources import CodedTokens, ScaledLabels
    from mhalearn.data.token_codes import block_codes, code_groups

    teacher = mhalearn.sample_teacher(2, 7, rng=11)
    X, Y = mhalearn.make_dataset(teacher, 301, length, rng=12)
    X[:20, 2] = X[:20, 0]
    codes = np.empty((301, length, code_groups(7)), dtype=np.uint8)
    assert block_codes(X, codes)
    rows = np.sort(np.random.default_rng(1).choice(301, 250, replace=False))
    for scale in (1.0, 3.0):
        labels = Y if scale == 1.0 else ScaledLabels(Y, scale)
        want = np.zeros((250, length))
        for e in range(7):
            want += (Y[rows, :, e] / scale) ** 2
        for tokens in (X, CodedTokens(X, codes)):
            squares = np.full((250, length), np.nan)
            residuals, _ = decoder.decoding_residuals(tokens, labels, teacher.projection_sum, rows, squares=squares)
            finite = np.isfinite(residuals)
            assert finite.mean() > 0.9
            np.testing.assert_array_equal(squares[finite], want[finite])


def test_residual_pass_gives_the_full_decoding_bits_and_blocks_keep_the_full_patterns():
    # The acceptance pass decodes residuals only and the kept rows in full afterwards: both must be the
    # bits of one full decoding, including identical and opposite tokens and a singular Ŵ_Σ.
    teacher = mhalearn.sample_teacher(2, 7, rng=11)
    X, Y = mhalearn.make_dataset(teacher, 300, 4, rng=12)
    X[:20, 2] = X[:20, 0]
    X[20:40, 1] = -X[20:40, 3]
    w_sum = teacher.projection_sum + 0.05 * np.random.default_rng(13).standard_normal((7, 7))
    for matrix in (w_sum, np.outer(w_sum[0], w_sum[0])):
        patterns, residuals, violations, spreads = decoder.decode_patterns(X, Y, matrix)
        lean_residuals, lean_violations = decoder.decoding_residuals(X, Y, matrix)
        np.testing.assert_array_equal(lean_residuals, residuals)
        np.testing.assert_array_equal(lean_violations, violations)
    patterns, residuals, violations, spreads = decoder.decode_patterns(X, Y, w_sum)
    rule = agreement_passes.BlockRule(w_sum, quantile=0.3, residual_tol=None, simplex_tol=0.2, share=(50, 300), seed=7)
    block = agreement_passes._agreement_block(X, Y, None, rule, None, None, 0)
    assert 0 < len(block) <= 50 and block.found > len(block)
    for row in range(len(block)):
        s = next(s for s in range(300) if np.array_equal(X[s], block.tokens[row]))
        np.testing.assert_array_equal(block.pattern[row], patterns[s, block.query[row]])
        np.testing.assert_array_equal(block.spread[row], spreads[s, block.query[row]])
        assert block.residual[row] == residuals[s, block.query[row]]


def test_best_rows_under_a_new_estimate_are_those_of_a_full_redecoding():
    teacher = mhalearn.sample_teacher(2, 7, rng=14)
    source = ArraySource(*mhalearn.make_dataset(teacher, 400, 4, rng=15))
    crude = teacher.projection_sum + 0.1 * np.random.default_rng(16).standard_normal((7, 7))
    pool = agreement_passes.find_agreement_rows(source, crude, quantile=0.5, simplex_tol=0.2)
    refined = teacher.projection_sum + 0.01 * np.random.default_rng(17).standard_normal((7, 7))
    expected = pool.redecode(refined).best(60, simplex_tol=0.2)
    chosen = pool.best_under(refined, 60, simplex_tol=0.2)
    assert len(chosen) == 60 and not np.array_equal(chosen.query, pool.best(60, simplex_tol=0.2).query)
    for name in ("tokens", "query", "label", "pattern", "spread", "residual", "violation"):
        np.testing.assert_array_equal(getattr(chosen, name), getattr(expected, name))


def test_a_residual_falls_by_at_most_the_bound_of_a_move_of_the_estimate(rng):
    # The bound that lets best_under skip rows: within τ of the simplex under Ŵ', a row's relative residual
    # is at least its residual under Ŵ less (1 + 2kτ)·max_j ‖x_j‖·‖Ŵ − Ŵ'‖₂ / ‖y‖.
    teacher = mhalearn.sample_teacher(2, 7, rng=21)
    X, Y = mhalearn.make_dataset(teacher, 3000, 4, rng=22)
    X[:100] *= rng.uniform(0.5, 2.0, size=(100, 1, 1))  # tokens of other norms than √d
    tol = 0.05
    slack = (1 + 2 * 4 * tol) * np.linalg.norm(X, axis=2).max(axis=1)[:, None] / np.linalg.norm(Y, axis=2)
    for scale in (0.3, 0.03, 0.003):
        w_old = teacher.projection_sum + scale * rng.standard_normal((7, 7))
        w_new = teacher.projection_sum + scale * rng.standard_normal((7, 7))
        old, _ = decoder.decoding_residuals(X, Y, w_old)
        new, violation = decoder.decoding_residuals(X, Y, w_new)
        usable = (violation <= tol) & np.isfinite(old)
        # The share of its bound by which each usable row's residual fell: at most 1, and near it on some
        # row (a bound ten times too small would fail here).
        fall = ((old - new) / (slack * np.linalg.norm(w_new - w_old, 2)))[usable]
        assert usable.sum() > 1000 and 0.1 < fall.max() <= 1.0


def test_best_rows_along_a_converging_refit_are_those_of_a_full_redecoding(rng):
    # best_under decodes only the rows its bound cannot rule out: every call must still give the bits of a
    # full redecoding, on a pool with identical and opposite tokens, a zero label and non-Boolean tokens,
    # and later calls, under estimates that move less, decode fewer rows.
    teacher = mhalearn.sample_teacher(2, 7, rng=23)
    X, Y = mhalearn.make_dataset(teacher, 3000, 4, rng=24)
    X[:30, 2] = X[:30, 0]
    X[30:60, 1] = -X[30:60, 3]
    X[60:70] *= 1.5
    Y[70:75] = 0.0
    start = teacher.projection_sum + 0.1 * rng.standard_normal((7, 7))
    pool = agreement_passes.find_agreement_rows(ArraySource(X, Y), start, quantile=0.5, simplex_tol=0.2)
    path = [teacher.projection_sum + 0.05 * 0.5 ** step * rng.standard_normal((7, 7)) for step in range(8)]
    decoded = []
    for w_sum in path:
        expected = pool.redecode(w_sum).best(150, simplex_tol=0.02)
        chosen = pool.best_under(w_sum, 150, simplex_tol=0.02)
        for name in ("tokens", "query", "label", "pattern", "spread", "residual", "violation"):
            np.testing.assert_array_equal(getattr(chosen, name), getattr(expected, name))
        decoded.append(pool._redecoding.decoded)
    assert decoded[0] == len(pool) and decoded[-1] < len(pool) // 2


def test_decoding_is_exact_on_agreement_rows_and_splits_copies():
    # One head: every row is an agreement row, so the exact W_Σ decodes the
    # teacher's pattern with zero residual, and identical tokens share weight.
    teacher = mhalearn.sample_teacher(1, 8, rng=3)
    X = mhalearn.boolean_inputs(30, 4, 8, rng=4)
    X[:, 2] = X[:, 0]
    patterns, residuals, _, _ = decoder.decode_patterns(X, teacher.predict(X), teacher.projection_sum)
    np.testing.assert_allclose(patterns, teacher.attention(X)[:, 0], atol=1e-9)
    assert np.max(residuals) < 1e-9
    np.testing.assert_allclose(patterns[:, :, 0], patterns[:, :, 2], atol=1e-12)


def test_opposite_tokens_are_decoded():
    # x_j = −x_{j'} makes the points x_j W_Σ linearly but not affinely dependent.
    teacher = mhalearn.sample_teacher(1, 6, rng=5)
    X = mhalearn.boolean_inputs(10, 3, 6, rng=6)
    X[:, 1] = -X[:, 0]
    patterns, residuals, _, _ = decoder.decode_patterns(X, teacher.predict(X), teacher.projection_sum)
    assert np.all(np.isfinite(residuals)) and np.max(residuals) < 1e-9


def test_slabs_hold_for_one_head_and_pin_it_down():
    teacher = mhalearn.sample_teacher(1, 6, rng=7)
    source = ArraySource(*mhalearn.make_dataset(teacher, 2000, 3, rng=8))
    rows = agreement_passes.find_agreement_rows(source, teacher.projection_sum, residual_tol=1e-6, simplex_tol=TOL)
    assert rows.fraction == pytest.approx(1.0, abs=0.01)
    slabs = slab_constraints(rows, kappa=0.0, t_min=1e-6, w_min=W_MIN)
    assert teacher_feasible_fraction(slabs, teacher) == 1.0
    centre, long_directions, info = phase4_span.read_affine_hull(slabs, 1)
    assert long_directions.shape == (0, 36)
    np.testing.assert_allclose(centre, teacher.thetas.ravel(), atol=1e-6)


def test_affine_hull_of_two_heads_from_agreement_rows():
    # Rows on which the heads' patterns agree (ℓ1 < 0.05), chosen with the
    # teacher's help: the long direction of their slabs is Θ_1 − Θ_2 and the
    # centre lies on the line through them.
    teacher = mhalearn.sample_teacher(2, 6, rng=9)
    X = mhalearn.boolean_inputs(30000, 3, 6, rng=10)
    weights = teacher.attention(X)
    samples, rows = np.nonzero(np.abs(weights[:, 0] - weights[:, 1]).sum(axis=-1) < 0.05)
    assert len(samples) > 1000
    patterns = weights[samples, :, rows].mean(axis=1)
    labels = teacher.predict(X[samples])[np.arange(len(rows)), rows]
    chosen = agreement_rows.AgreementRows(X[samples], rows, labels, patterns, np.zeros_like(patterns),
                                          np.zeros(len(rows)), np.zeros(len(rows)), X.shape[0] * 3)
    slabs = slab_constraints(chosen, w_min=0.05, kappa=0.0, t_min=0.1)
    centre, long_directions, info = phase4_span.read_affine_hull(slabs, 2)
    difference = (teacher.thetas[0] - teacher.thetas[1]).ravel()
    cosine = abs(long_directions[0] @ difference) / np.linalg.norm(difference)
    assert cosine > 0.99
    assert span_distance(phase4_span.span_basis(centre, long_directions, 2), teacher) < 0.1
    assert info["spectral_gap"] > 5


def _two_head_agreement_rows(samples=30000):
    teacher = mhalearn.sample_teacher(2, 6, rng=9)
    X = mhalearn.boolean_inputs(samples, 3, 6, rng=10)
    weights = teacher.attention(X)
    chosen, rows = np.nonzero(np.abs(weights[:, 0] - weights[:, 1]).sum(axis=-1) < 0.05)
    patterns = weights[chosen, :, rows].mean(axis=1)
    labels = teacher.predict(X[chosen])[np.arange(len(rows)), rows]
    return agreement_rows.AgreementRows(X[chosen], rows, labels, patterns, np.zeros_like(patterns),
                                        np.zeros(len(rows)), np.zeros(len(rows)), X.shape[0] * 3)


def test_kstar_threshold_keeps_the_slabs_wanted_of_largest_weight():
    rows = _two_head_agreement_rows()
    weights = np.sort(distinct_token_weights(rows))[::-1]
    eligible = int(np.count_nonzero(weights >= 0.02))
    assert eligible > 600
    for wanted in (100, 300, 600):
        threshold = kstar_weight_threshold(rows, w_min=0.02, slabs_wanted=wanted, w_max=0.99)
        assert threshold == weights[wanted - 1]  # the wanted-th largest weight, counted independently
        assert slab_constraints(rows, w_min=threshold, kappa=KAPPA, t_min=T_MIN).equalities >= wanted
        assert np.count_nonzero(weights > threshold) < wanted
    # Too few slabs to spare any: w_min; a low ceiling caps it.
    assert kstar_weight_threshold(rows, w_min=0.02, slabs_wanted=eligible, w_max=0.99) == 0.02
    assert kstar_weight_threshold(rows, w_min=0.02, slabs_wanted=100, w_max=0.03) == 0.03
    rule = kstar_slab_rule(rows, BodySettings(kstar_slabs=300, kstar_w_max=0.99))
    assert rule == {**BodySettings().slab_rule(), "w_min": weights[299]}


def test_kstar_keeps_the_slabs_of_every_row_and_the_half_spaces_of_the_first():
    rows = _two_head_agreement_rows()
    whole = slab_constraints(rows, w_min=0.05, kappa=KAPPA, t_min=T_MIN)
    first = 40
    capped = slab_constraints(rows, w_min=0.05, kappa=KAPPA, t_min=T_MIN, halfspace_rows=first)
    for name in ("E", "b", "t", "slab_row"):
        np.testing.assert_array_equal(getattr(capped, name), getattr(whole, name))
    # The half-spaces are exactly those of the first rows, as the uncapped system gives them.
    of_first = whole.halfspace_row < first
    assert 0 < of_first.sum() < len(whole.g)
    np.testing.assert_array_equal(capped.halfspace_row, whole.halfspace_row[of_first])
    np.testing.assert_array_equal(capped.H, whole.H[of_first])
    np.testing.assert_array_equal(capped.g, whole.g[of_first])


def test_kstar_reads_every_candidate_row_found_up_to_its_slabs_within_the_memory_budget():
    rows = _two_head_agreement_rows()
    eye = np.eye(rows.tokens.shape[-1])
    settings = BodySettings(max_rows=25, estimate_noise=False, residual_tol=1.0, simplex_tol=1.0)
    body = sculpt_body(None, eye, 2, settings, np.random.default_rng(0), rule="absolute", candidates=rows)
    # Every candidate within the tolerance is read, far more than max_rows; only the first max_rows give
    # half-spaces.
    accepted = rows.accepted_under(eye, residual_tol=1.0, simplex_tol=1.0, max_rows=len(rows))
    assert body.accepted_rows == body.found_rows == len(accepted) > 4 * settings.max_rows
    assert body.slabs.halfspace_row.max() < settings.max_rows <= body.slabs.slab_row.max()
    # A cap on the slabs: the longest prefix of the rows whose slabs fit, counted row by row here.
    cap = body.equalities // 3
    capped = sculpt_body(None, eye, 2, dataclasses.replace(settings, kstar_max_slabs=cap), np.random.default_rng(0),
                         rule="absolute", candidates=rows)
    per_row = np.bincount(body.slabs.slab_row, minlength=len(accepted))
    prefix = next(count for count in range(len(accepted) + 1) if per_row[:count + 1].sum() > cap)
    assert capped.accepted_rows == prefix and capped.found_rows == len(accepted)
    assert capped.slab_threshold == body.slab_threshold and cap - per_row.max() < capped.equalities <= cap
    # A memory budget whose quarter holds fewer slabs caps them there, never below the slabs K*'s rule wants.
    wanted = settings.kstar_slabs_for(eye.shape[0])
    assert wanted < cap
    budget = 4 * 24 * eye.shape[0] ** 2 * (wanted + 10)
    with mhalearn.memory_budget(budget):
        tight = sculpt_body(None, eye, 2, settings, np.random.default_rng(0), rule="absolute", candidates=rows)
    assert tight.accepted_rows < capped.accepted_rows and wanted < tight.equalities <= wanted + 10
    with mhalearn.memory_budget(1):
        floor = sculpt_body(None, eye, 2, settings, np.random.default_rng(0), rule="absolute", candidates=rows)
    assert wanted - per_row.max() < floor.equalities <= wanted


def test_hull_direction_ranks_place_the_heads_in_the_spectrum(rng):
    # Equalities orthogonal to every Θ_i − Θ_1 (exact agreement rows) leave the hull directions at the bottom
    # of K*'s spectrum; equalities along them put the hull at the top.
    teacher = mhalearn.sample_teacher(3, 4, rng=13)
    thetas = teacher.thetas.reshape(3, -1)
    hull = np.linalg.qr((thetas[1:] - thetas[0]).T)[0]  # (16, 2)
    count = 200
    E = rng.standard_normal((count, 16))
    agreeing = E - (E @ hull) @ hull.T
    nearly = agreeing + 0.01 * (E @ hull) @ hull.T  # rows whose heads nearly agree

    def system(matrix):
        return SlabSystem(matrix, np.zeros(len(matrix)), np.full(len(matrix), 0.5), np.zeros((0, 16)),
                          np.zeros(0), np.arange(len(matrix)), np.zeros(0, int))

    assert hull_direction_ranks(system(nearly), teacher) == [1, 2]
    np.testing.assert_allclose(log_ratio_disagreement(system(agreeing), teacher), 0.0, atol=1e-10)
    along = np.vstack([agreeing * 0.01, 10.0 * rng.standard_normal((count, 2)) @ hull.T])
    assert min(hull_direction_ranks(system(along), teacher)) >= 14
    values = E @ thetas.T
    np.testing.assert_allclose(log_ratio_disagreement(system(E), teacher), values.max(1) - values.min(1))


def test_teacher_feasible_rows_flag_the_row_of_a_broken_slab(rng):
    teacher = mhalearn.sample_teacher(2, 3, rng=14)
    thetas = teacher.thetas.reshape(2, -1)
    E = rng.standard_normal((6, 9))
    values = E @ thetas.T
    b, t = values.mean(axis=1), (values.max(axis=1) - values.min(axis=1)) / 2 + 0.01  # every head inside
    H = rng.standard_normal((2, 9))
    g = (H @ thetas.T).max(axis=1) + 0.01
    rows = np.array([0, 0, 1, 1, 2, 2])
    slabs = SlabSystem(E, b, t, H, g, rows, np.array([2, 3]))
    assert teacher_feasible_rows(slabs, teacher).tolist() == [True, True, True, True]
    b[3] += 2 * t[3]  # row 1 loses a slab, row 3 its half-space
    g[1] -= 1.0
    assert teacher_feasible_rows(slabs, teacher).tolist() == [True, False, True, False]
    assert teacher_feasible_fraction(slabs, teacher) == pytest.approx(6 / 8)


def test_dual_certificate_never_exceeds_the_lp_value(rng):
    # Weak duality: the batched bound is a lower bound on min over K of ⟨c, Θ⟩.
    dim2, count = 9, 60
    truth = rng.standard_normal(dim2)
    E = rng.choice([-2.0, 0.0, 2.0], size=(count, dim2))
    t = rng.uniform(0.1, 0.5, count)
    b = E @ truth + rng.uniform(-0.05, 0.05, count)
    slabs = SlabSystem(E, b, t, np.zeros((0, dim2)), np.zeros(0), np.arange(count), np.zeros(0, int))
    convex = body.ConvexBody(slabs, radius=10.0, max_constraints=CONSTRAINTS)
    directions = rng.standard_normal((8, dim2))
    bounds = convex.certify(directions)
    for direction, bound in zip(directions, bounds):
        value, status = convex.support(direction)
        assert status == "optimal"
        assert bound <= value + 1e-6
        assert value <= direction @ truth + 1e-6  # the truth lies in K
    assert np.all(bounds > directions @ truth - 10.0)  # and the bound is not vacuous


def test_certified_rows_are_peaked_for_one_sharp_head():
    teacher = mhalearn.sample_teacher(1, 6, theta_norm=8.0, rng=11)
    source = ArraySource(*mhalearn.make_dataset(teacher, 3000, 3, rng=12))
    rows = agreement_passes.find_agreement_rows(source, teacher.projection_sum, residual_tol=1e-3, simplex_tol=TOL)
    convex = body.ConvexBody(slab_constraints(rows, w_min=W_MIN, kappa=KAPPA, t_min=T_MIN), radius=12.0,
                             max_constraints=CONSTRAINTS)
    theta_bar, info = convex.min_norm_point()
    assert info["inconsistent"] == 0
    candidates = projection_sum.margin_rows(source, theta_bar, 0.05, 5000)
    certified = projection_sum.certify_rows(convex, candidates, projection_sum.certification_margin(0.05, 3))
    assert certified.sum() > 50
    assert certification_precision(candidates, certified, 0.05, teacher) == 1.0


def test_elastic_body_drops_inconsistent_constraints():
    dim2 = 4
    E = np.vstack([np.eye(dim2), np.eye(dim2)[:1]])
    b = np.array([1.0, 1.0, 1.0, 1.0, -5.0])  # the last slab contradicts the first
    slabs = SlabSystem(E, b, np.full(5, 0.1), np.zeros((0, dim2)), np.zeros(0), np.arange(5), np.zeros(0, int))
    point, info = body.ConvexBody(slabs, radius=10.0, max_constraints=CONSTRAINTS).min_norm_point()
    assert info["solver_status"] == "optimal" and info["inconsistent"] in (1, 2)
    # The consistent slabs hold, at their minimum-norm point; the contradicted coordinate stays between the
    # two slabs that fight over it (no value outside both is invented).
    np.testing.assert_allclose(point[1:], 0.9, atol=1e-6)
    assert -4.9 - 1e-6 <= point[0] <= 0.9 + 1e-6


def test_crude_sum_exact_under_uniform_attention():
    layer = mhalearn.MultiHeadAttention(np.zeros((2, 4, 4)), np.random.default_rng(0).standard_normal((2, 4, 4)))
    X = mhalearn.boolean_inputs(200, 5, 4, rng=1)
    estimate = phase1_crude_sum.crude_projection_sum(ArraySource(X, layer.predict(X), block_size=64)).w_sum
    np.testing.assert_allclose(estimate, layer.projection_sum, atol=1e-10)


@pytest.mark.parametrize("label_scale", [1.0, 2.5])
def test_token_sums_are_the_sums_of_the_rows_tokens_in_order(label_scale):
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((300, 5, 7)), 1e3 * rng.standard_normal((300, 5, 7))
    rows = np.sort(rng.choice(300, 120, replace=False))
    mean, label_sum = phase1_crude_sum.token_sums(X, Y, rows, label_scale)
    # Each sum from 0, its k terms in order: a loop in NumPy, the same operations.
    want_mean, want_labels = np.zeros((120, 7)), np.zeros((120, 7))
    for j in range(5):
        want_mean += X[rows, j]
        want_labels += Y[rows, j] / label_scale
    np.testing.assert_array_equal(mean, want_mean / 5)
    np.testing.assert_array_equal(label_sum, want_labels)


def test_alternating_refit_recovers_projection_sum():
    teacher = mhalearn.sample_teacher(1, 8, rng=13)
    source = ArraySource(*mhalearn.make_dataset(teacher, 3000, 3, rng=14))
    crude = phase1_crude_sum.crude_projection_sum(source).w_sum
    defaults = BodySettings()
    refined, history = alternating_refit.alternating_projection_sum(
        source, crude, quantile=1.0, iterations=40, refit_rows=defaults.refit_rows, rounds=defaults.refit_rounds,
        pool_fraction=1.0, simplex_tol=defaults.simplex_tol)
    error = np.linalg.norm(refined - teacher.projection_sum) / np.linalg.norm(teacher.projection_sum)
    crude_error = np.linalg.norm(crude - teacher.projection_sum) / np.linalg.norm(teacher.projection_sum)
    assert crude_error > 0.1 and error < 0.01
    assert history[-1]["agreement_fit"] < history[0]["agreement_fit"]


def test_teacher_source_repeats_its_blocks():
    teacher = mhalearn.sample_teacher(2, 5, rng=15)
    source = TeacherSource(teacher, 300, 4, seed=3, block_size=128)
    first = [X.copy() for X, _ in source.blocks()]
    second = [X for X, _ in source.blocks()]
    assert [len(X) for X in first] == [128, 128, 44]
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    X, Y = source.head(200)
    np.testing.assert_allclose(Y, teacher.predict(X))


def test_certificate_covers_the_true_error_and_tightens_with_samples():
    from mhalearn.learners.chen_li.phase6_select import selection_certificate

    teacher = mhalearn.sample_teacher(2, 5, rng=16)
    model = mhalearn.MultiHeadAttention(teacher.thetas * 1.05, teacher.ws)  # a near miss
    X_big = mhalearn.boolean_inputs(200_000, 3, 5, rng=17)
    truth = mhalearn.relative_error(model, teacher, X_big)
    assert 1e-4 < truth < 1e-1
    labels_bound = float(np.sqrt(np.max(np.sum(teacher.predict(X_big) ** 2, axis=(1, 2)))))
    bounds = {}
    for samples in (500, 20_000):
        for draw in range(5 if samples > 500 else 30):
            X = mhalearn.boolean_inputs(samples, 3, 5, rng=100 + draw)
            certificate = selection_certificate(model, X, teacher.predict(X), delta=0.05, hypotheses=4,
                                                label_bound=labels_bound, token_norm=np.sqrt(5))
            assert certificate["bound"] >= truth  # δ = 0.05: a miss would be rare, several impossible
            assert certificate["empirical_error"] == pytest.approx(truth, rel=0.5 if samples == 500 else 0.1)
            bounds.setdefault(samples, []).append(certificate["bound"])
    assert np.median(bounds[20_000]) < 0.2 * np.median(bounds[500])


def test_best_rows_are_the_smallest_residuals_within_the_simplex(rng):
    count = 200
    residual = rng.uniform(0, 1, count)
    violation = np.where(rng.uniform(size=count) < 0.3, 0.5, 0.0)
    rows = agreement_rows.AgreementRows(np.zeros((count, 3, 2)), np.zeros(count, int), np.zeros((count, 2)),
                                        np.zeros((count, 3)), np.zeros((count, 3)), residual, violation, count)
    best = rows.best(25, simplex_tol=0.02)
    usable = np.flatnonzero(violation == 0.0)
    expected = np.sort(usable[np.argsort(residual[usable])[:25]])
    np.testing.assert_array_equal(np.sort(np.flatnonzero(np.isin(residual, best.residual))), expected)
    assert len(rows.best(10_000, simplex_tol=TOL)) == len(usable)


def test_pool_keeps_the_best_rows_of_each_block_within_its_budget():
    teacher = mhalearn.sample_teacher(2, 7, rng=21)
    X, Y = mhalearn.make_dataset(teacher, 4000, 4, rng=22)
    source = ArraySource(X, Y, block_size=1000)
    w_sum = teacher.projection_sum
    pool = agreement_passes.draw_pool(source, w_sum, pool_fraction=0.5, simplex_tol=0.02, max_pool=800)
    # The budget binds (0.5 of 16 000 rows > 800): each block keeps its best 5 % (of the rows within
    # the loose simplex test), not a random subsample of its best half.
    expected = []
    for start in range(0, 4000, 1000):
        _, residuals, violations, _ = decoder.decode_patterns(X[start:start + 1000], Y[start:start + 1000], w_sum)
        usable = violations <= 0.2
        expected.append(np.sort(residuals[usable & (residuals <= np.quantile(residuals[usable], 800 / 16_000))]))
    np.testing.assert_array_equal(np.sort(pool.residual), np.sort(np.concatenate(expected)))
    assert 600 <= len(pool) <= 800


def test_first_pool_is_a_random_cap_of_the_least_selective_share():
    teacher = mhalearn.sample_teacher(2, 7, rng=21)
    X, Y = mhalearn.make_dataset(teacher, 4000, 4, rng=22)
    source = ArraySource(X, Y, block_size=1000)
    w_sum = teacher.projection_sum * 1.2  # a crude Ŵ_Σ
    pool = agreement_passes.draw_pool(source, w_sum, pool_fraction=0.5, simplex_tol=0.02, max_pool=800,
                                      min_share=0.2, rng=np.random.default_rng(3))
    # The budget (5 % of the rows) is finer than min_share: every block keeps a random 200 of its best 20 %.
    within_share, beyond_budget = [], 0
    for index, start in enumerate(range(0, 4000, 1000)):
        _, residuals, violations, _ = decoder.decode_patterns(X[start:start + 1000], Y[start:start + 1000], w_sum)
        usable = residuals[violations <= 0.2]
        block = pool.residual[np.isin(pool.residual, residuals)]
        assert len(block) == 200
        within_share.append(block.max() <= np.quantile(usable, 0.2))
        beyond_budget += int(np.sum(block > np.quantile(usable, 0.05)))
    assert all(within_share) and beyond_budget > 400


def test_rows_of_a_slab_system_repeat_their_constraints(rng):
    E, H = rng.standard_normal((6, 4)), rng.standard_normal((3, 4))
    slabs = SlabSystem(E, np.arange(6.0), np.ones(6), H, np.arange(3.0), np.array([0, 0, 1, 2, 2, 3]),
                       np.array([1, 3, 3]))
    picked = slabs.of_rows(np.array([3, 0, 3]))
    np.testing.assert_array_equal(picked.slab_row, [0, 0, 3, 3])
    np.testing.assert_array_equal(picked.b, [0.0, 1.0, 5.0, 5.0])
    np.testing.assert_array_equal(picked.halfspace_row, [3, 3, 3, 3])


def _planted_hull_slabs(rng, dim2=16, rows=400, outliers=40, noise=0.0):
    """Slabs of rows consistent with the line through two points, plus rows that are not."""
    heads = rng.standard_normal((2, dim2))
    normal_rows = rng.standard_normal((rows, dim2))
    normal_rows -= np.outer(normal_rows @ (heads[0] - heads[1]), heads[0] - heads[1]) / np.sum(
        (heads[0] - heads[1]) ** 2)  # flat along the hull
    b = normal_rows @ heads[0] + noise * rng.standard_normal(rows)
    bad = rng.standard_normal((outliers, dim2))
    E = np.vstack([normal_rows, bad])
    b = np.concatenate([b, bad @ heads[0] + 3.0 * rng.standard_normal(outliers) + bad @ (heads[1] - heads[0])])
    count = rows + outliers
    slabs = SlabSystem(E, b, np.ones(count), np.zeros((0, dim2)), np.zeros(0), np.arange(count), np.zeros(0, int))
    return slabs, heads


def test_trimmed_hull_drops_rows_that_disagree_and_recovers_the_span(rng):
    slabs, heads = _planted_hull_slabs(rng, noise=0.01)
    truth = mhalearn.MultiHeadAttention(heads.reshape(2, 4, 4), np.zeros((2, 4, 4)))
    centre, long_directions, _ = phase4_span.read_affine_hull(slabs, 2)
    plain = span_distance(phase4_span.span_basis(centre, long_directions, 2), truth)
    centre, long_directions, _, kept, discarded = phase4_span.trimmed_affine_hull(slabs, 2, trim=3.0)
    trimmed = span_distance(phase4_span.span_basis(centre, long_directions, 2), truth)
    assert plain > 0.05 and trimmed < plain / 10
    assert np.all(kept < 400) and len(kept) >= 360  # every row off the hull dropped, few on it
    assert sum(discarded.values()) == 440 - len(kept)  # every row left out is counted, under one reason


def test_a_core_of_consistent_rows_reads_the_hull_where_a_third_of_rows_disagree(rng):
    slabs, heads = _planted_hull_slabs(rng, rows=400, outliers=200, noise=0.01)
    truth = mhalearn.MultiHeadAttention(heads.reshape(2, 4, 4), np.zeros((2, 4, 4)))
    readings = {}
    for core in (1.0, 0.6):
        centre, long_directions, _, kept, discarded = phase4_span.trimmed_affine_hull(slabs, 2, trim=3.0, core=core)
        readings[core] = (span_distance(phase4_span.span_basis(centre, long_directions, 2), truth), kept, discarded)
    distance, kept, discarded = readings[0.6]
    assert distance < 0.01 and np.all(kept < 400) and len(kept) >= 360
    assert discarded["outside the core, and its hull's residual above the cut"] >= 200
    assert sum(discarded.values()) == 600 - len(kept)


def test_bootstrap_error_grows_with_the_noise_of_the_slabs(rng):
    estimates = []
    for noise in (0.0, 0.01, 0.1):
        slabs, _ = _planted_hull_slabs(np.random.default_rng(5), outliers=0, noise=noise)
        centre, long_directions, _ = phase4_span.read_affine_hull(slabs, 2)
        basis = phase4_span.span_basis(centre, long_directions, 2)
        estimates.append(phase4_span.bootstrap_span_error(slabs, np.arange(400), basis, 2, resamples=16, level=0.9,
                                                          rng=np.random.default_rng(6)))
    assert estimates[0] < 1e-8 < estimates[1] < estimates[2]


@pytest.mark.parametrize("rows_per_unknown", [1.5, 2.0, 10.0])
def test_span_error_estimate_within_3x_of_the_truth_from_few_rows_to_many(rows_per_unknown):
    # Rows off the hull by a little (their slabs tilt along Θ_1 − Θ_2) and noisy log-ratios: the true
    # error grows as N/p falls, and a bootstrap with replacement overshoots it many-fold at N ≈ 1.5 p.
    unknowns = 36
    for seed in range(3):
        rng = np.random.default_rng(seed)
        heads = rng.standard_normal((2, unknowns))
        across = (heads[0] - heads[1]) / np.linalg.norm(heads[0] - heads[1])
        count = int(rows_per_unknown * unknowns)
        E = rng.standard_normal((count, unknowns))
        E += np.outer(0.02 * rng.standard_normal(count) - E @ across, across)
        b = E @ heads[0] + 0.01 * rng.standard_normal(count)
        slabs = SlabSystem(E, b, np.ones(count), np.zeros((0, unknowns)), np.zeros(0), np.arange(count),
                           np.zeros(0, int))
        centre, long_directions, _ = phase4_span.read_affine_hull(slabs, 2)
        basis = phase4_span.span_basis(centre, long_directions, 2)
        truth = span_distance(basis, mhalearn.MultiHeadAttention(heads.reshape(2, 6, 6), np.zeros((2, 6, 6))))
        estimate = phase4_span.bootstrap_span_error(slabs, np.arange(count), basis, 2, resamples=16, level=0.9,
                                                    rng=np.random.default_rng(seed))
        assert truth / 3 <= estimate <= 3 * truth, (seed, truth, estimate)


def test_span_error_estimate_follows_the_rows_design_where_few_rows_read_some_unknowns():
    # 25 of 300 rows read the last 12 of 36 unknowns: a half-sample reads them from about 14 rows, far
    # worse than half as well as all 25 do.  Scaled by the equations' count alone (a Gaussian design),
    # the subsamples' spread reads the error 5-28x high here; scaled by the design's own
    # tr A_h^-1 - tr A^-1 against tr A^-1 it is within 3x at level 0.9 and about right at the median.
    unknowns, rare, count, rare_rows = 36, 12, 300, 25
    upper, middle = [], []
    for seed in range(10):
        rng = np.random.default_rng(seed)
        theta = rng.standard_normal(unknowns)
        E = np.zeros((count, unknowns))
        E[:, :unknowns - rare] = rng.standard_normal((count, unknowns - rare))
        E[:rare_rows, unknowns - rare:] = rng.standard_normal((rare_rows, rare))
        b = E @ theta + 0.05 * rng.standard_normal(count)
        slabs = SlabSystem(E, b, np.ones(count), np.zeros((0, unknowns)), np.zeros(0), np.arange(count),
                           np.zeros(0, int))
        centre, long_directions, _ = phase4_span.read_affine_hull(slabs, 1)
        basis = phase4_span.span_basis(centre, long_directions, 1)
        truth = sine_distance(basis, theta[None])
        for level, ratios in ((0.9, upper), (0.5, middle)):
            estimate = phase4_span.bootstrap_span_error(slabs, np.arange(count), basis, 1, resamples=16, level=level,
                                                        rng=np.random.default_rng(seed))
            ratios.append(estimate / truth)
    assert all(1 / 3 <= ratio <= 3 for ratio in upper), upper
    assert 0.7 <= np.median(middle) <= 1.3, middle


def test_the_refusal_compares_the_median_with_max_span_error_and_the_upper_bound_with_max_span_bound():
    # Noisy rows: the level-0.9 bound lies above the median of the same subsamples, so a threshold between
    # the two separates the rules, and the reading names the one that refused.
    slabs, _ = _planted_hull_slabs(np.random.default_rng(5), outliers=0, noise=0.3)

    def reading(**settings):
        return phase4_span.read_span(slabs, 2, BodySettings(**settings), np.random.default_rng(7))

    free = reading(max_span_error=1.0, max_span_bound=1.0)
    assert free.refused is None and free.refused_by is None
    # The median is the level-0.5 quantile of the very subsamples the bound's quantile is read from.
    median = phase4_span.bootstrap_span_error(slabs, free.kept, free.basis, 2, resamples=24, level=0.5,
                                              rng=np.random.default_rng(7))
    assert free.median_error == pytest.approx(median, rel=1e-12)
    assert 0.0 < free.median_error < free.estimated_error < 1.0
    between = (free.median_error + free.estimated_error) / 2
    assert reading(max_span_error=between, max_span_bound=1.0).refused is None  # the bound alone is above it
    by_median = reading(max_span_error=free.median_error / 2, max_span_bound=1.0)
    assert by_median.refused_by == "median" and "(median)" in by_median.refused
    by_bound = reading(max_span_error=1.0, max_span_bound=between)
    assert by_bound.refused_by == "bound" and "upper bound" in by_bound.refused
    assert by_bound.basis is not None  # a refused span is kept for an observer to judge


def test_affine_hull_inverse_trace_is_the_trace_of_the_inverse_normal_matrix(rng):
    E = rng.standard_normal((50, 9))
    t = rng.uniform(0.5, 2.0, 50)
    slabs = SlabSystem(E, rng.standard_normal(50), t, np.zeros((0, 9)), np.zeros(0), np.arange(50), np.zeros(0, int))
    scaled = E / t[:, None]
    _, _, info = phase4_span.read_affine_hull(slabs, 1)
    assert info["rank"] == 9
    assert info["inverse_trace"] == pytest.approx(np.trace(np.linalg.inv(scaled.T @ scaled)), rel=1e-9)


def test_a_subsample_takes_about_half_way_from_the_unknowns_to_the_equations():
    equations = np.full(100, 2.0)
    assert phase4_span.subsample_rows(np.arange(100), equations, 2) in (50, 51)  # N ≫ p: half the rows
    assert phase4_span.subsample_rows(np.arange(100), equations, 150) == 88  # (200 + 150) / 2 equations
    assert phase4_span.subsample_rows(np.arange(2), equations, 4) == 1  # never every row


def test_alternating_refit_redraws_its_pool_once_per_round(monkeypatch):
    teacher = mhalearn.sample_teacher(2, 8, rng=31)
    source = ArraySource(*mhalearn.make_dataset(teacher, 20_000, 3, rng=32), block_size=5000)
    crude = phase1_crude_sum.crude_projection_sum(source).w_sum
    draws = []
    original = alternating_refit.draw_pool
    monkeypatch.setattr(alternating_refit, "draw_pool", lambda *args, **kwargs: draws.append(1) or original(*args,
                                                                                                          **kwargs))
    errors = {}
    for rounds in (1, 3):
        draws.clear()
        refined, history = alternating_refit.alternating_projection_sum(
            source, crude, quantile=0.02, iterations=200, rounds=rounds, pool_fraction=0.2, refit_rows=600,
            simplex_tol=BodySettings().simplex_tol)
        assert len(draws) == history[-1]["round"] <= rounds
        assert [entry["round"] for entry in history] == sorted(entry["round"] for entry in history)
        assert all("stopped" in entry for entry in history if entry is history[-1] or entry["round"] <
                   history[history.index(entry) + 1]["round"])  # every round says why it ended
        errors[rounds] = np.linalg.norm(refined - teacher.projection_sum) / np.linalg.norm(teacher.projection_sum)
    assert errors[3] <= errors[1]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 2.0, np.inf]), st.floats(0.0, 0.04)), max_size=40),
       st.integers(0, 45))
def test_best_rows_are_the_first_of_a_stable_sort(rows, count):
    # Ties are common (exact residuals repeat): the selection must be the stable sort's, to the row.
    residual = np.array([row[0] for row in rows])
    violation = np.array([row[1] for row in rows])
    usable = np.flatnonzero((violation <= 0.02) & np.isfinite(residual))
    expected = np.sort(usable[np.argsort(residual[usable], kind="stable")[:count]])
    np.testing.assert_array_equal(agreement_rows.best_rows(residual, violation, count, 0.02), expected)


def test_first_agreement_rows_stop_at_the_block_that_completes_them():
    teacher = mhalearn.sample_teacher(2, 7, rng=21)
    X, Y = mhalearn.make_dataset(teacher, 4000, 4, rng=22)
    source = ArraySource(X, Y, block_size=500)
    w_sum = teacher.projection_sum * 1.01
    every = agreement_passes.find_agreement_rows(source, w_sum, residual_tol=0.02, simplex_tol=TOL)
    per_block = [agreement_passes.find_agreement_rows(ArraySource(X[start:start + 500], Y[start:start + 500]),
                                                      w_sum, residual_tol=0.02, simplex_tol=TOL).found
                 for start in range(0, 4000, 500)]
    assert every.found == sum(per_block) and min(per_block) > 0
    wanted = per_block[0] + per_block[1] // 2  # completed inside the second block
    first = agreement_passes.first_agreement_rows(source, w_sum, residual_tol=0.02, max_rows=wanted,
                                                  rng=np.random.default_rng(0), simplex_tol=TOL)
    assert len(first) == wanted and first.found == per_block[0] + per_block[1] and first.scanned == 2 * 500 * 4
    # Every row kept is an agreement row of the first two blocks; the second block's are a random
    # subset of its rows, not its first ones.
    reference = {(tuple(t.ravel()), q) for t, q in zip(every.tokens, every.query)}
    kept = [(tuple(t.ravel()), q) for t, q in zip(first.tokens, first.query)]
    assert set(kept) <= reference
    second_block = {tuple(x.ravel()) for x in X[500:1000]}
    from_second = [tokens in second_block for tokens, _ in kept]
    assert sum(from_second) == wanted - per_block[0]
    positions = sorted(next(s for s in range(500, 1000) if tuple(X[s].ravel()) == tokens)
                       for (tokens, _), second in zip(kept, from_second) if second)
    assert positions[-1] >= 750  # a prefix of the block would stop near its middle
    # Fewer agreement rows than max_rows: the whole stream is read and every row kept.
    every_row = agreement_passes.first_agreement_rows(source, w_sum, residual_tol=0.02, max_rows=10 ** 6,
                                                      rng=np.random.default_rng(0), simplex_tol=TOL)
    assert len(every_row) == every.found == every_row.found and every_row.scanned == 4000 * 4


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), size=st.integers(0, 300), quantile=st.sampled_from([None, 0.0, 0.05, 0.5, 1.0]),
       residual_tol=st.sampled_from([None, 0.0, 0.3, np.inf]))
def test_accepted_entries_are_those_of_numpys_masks(seed, size, quantile, residual_tol):
    # The acceptance rule against its definition in NumPy: usable entries (within the simplex test, a finite
    # residual), the quantile of their residuals capped by residual_tol; infinities and NaNs included.
    if quantile is None and residual_tol is None:
        return
    rng = np.random.default_rng(seed)
    # Rounded, so that residuals tie.
    residual = np.round(rng.choice([0.1, 0.2, 0.3, np.inf, np.nan], size=(size, 3)) * rng.random((size, 3)), 2)
    violation = np.where(rng.random((size, 3)) < 0.6, 0.0, rng.random((size, 3)))
    usable = (violation <= 0.2) & np.isfinite(residual)
    threshold = np.inf if residual_tol is None else residual_tol
    if quantile is not None:
        if not usable.any():
            assert all(len(axis) == 0 for axis in agreement_rows.accepted_entries(residual, violation, quantile,
                                                                                 residual_tol, 0.2))
            return
        threshold = min(threshold, np.quantile(residual[usable], quantile))
    expected = np.nonzero(usable & (residual <= threshold))
    found = agreement_rows.accepted_entries(residual, violation, quantile, residual_tol, 0.2)
    for axis_found, axis_expected in zip(found, expected, strict=True):
        np.testing.assert_array_equal(axis_found, axis_expected)
