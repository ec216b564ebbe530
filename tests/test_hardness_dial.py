"""Teacher families' dials, the conditions in every row, and the n*-along-the-dial table."""

import json
import math

import numpy as np
import pytest

import mhalearn
from mhalearn.experiments import samples_to_eps
from mhalearn.experiments.hardness_dial import dial_table, labelled_by_dial
from mhalearn.experiments.samples_to_eps import run_samples_to_eps_cell, samples_to_eps_cells
from mhalearn.experiments.store import cell_key


@pytest.mark.parametrize("family", ["cancelling", "near-identical"])
@pytest.mark.parametrize("heads", [2, 3, 4])
def test_the_dials_far_end_is_the_family_as_registered_to_the_bit(family, heads):
    default = mhalearn.make_teacher(family, heads, 8, rng=11)
    dialled = mhalearn.make_teacher(family, heads, 8, rng=11, hardness=1.0)
    assert np.array_equal(default.thetas, dialled.thetas) and np.array_equal(default.ws, dialled.ws)


def test_the_cancelling_dial_removes_that_share_of_the_alternating_sum():
    signs = np.array([1.0, -1.0, 1.0])
    draws = np.random.default_rng(5).standard_normal((3, 8, 8))  # the family's first draws from the seed
    alternating = np.einsum("i,ide->de", signs, draws)
    for hardness in (0.0, 0.3, 0.7, 1.0):
        teacher = mhalearn.make_teacher("cancelling", 3, 8, rng=np.random.default_rng(5), hardness=hardness)
        expected = draws - hardness * signs[:, None, None] * alternating[None] / 3
        expected *= 2.0 / np.mean(np.linalg.norm(expected.reshape(3, -1), axis=1))
        np.testing.assert_allclose(teacher.thetas, expected, rtol=1e-12, atol=1e-12)
        left = np.linalg.norm(np.einsum("i,ide->de", signs, teacher.thetas))
        assert (left < 1e-12) == (hardness == 1.0)


def test_conditioned_cancelling_teachers_keep_the_w_conditions_and_lose_the_gram_ratio_along_the_dial():
    ratios = []
    for hardness in (0.0, 0.5, 0.9, 1.0):
        report = mhalearn.nondegeneracy(mhalearn.make_teacher("cancelling-conditioned", 3, 12, rng=2,
                                                              hardness=hardness))
        assert report.sum_well_conditioned and report.every_head_matters
        ratios.append(report.gram_ratio)
    assert ratios == sorted(ratios, reverse=True) and ratios[0] > 0.2 and ratios[-1] < 1e-12


def test_dial_parameters_are_checked_before_any_draw():
    with pytest.raises(ValueError, match="hardness"):
        mhalearn.make_teacher("cancelling", 3, 8, rng=0, hardness=1.5)
    with pytest.raises(ValueError, match="no dial"):
        mhalearn.make_teacher("random", 3, 8, rng=0, hardness=0.5)
    with pytest.raises(ValueError, match="sharpness"):
        mhalearn.make_teacher("cancelling", 3, 8, rng=0, sharpness=0.5)


def test_the_condition_columns_say_what_nondegeneracy_says():
    teacher = mhalearn.make_teacher("cancelling", 3, 8, rng=0)
    report = mhalearn.nondegeneracy(teacher)
    columns = report.columns()
    assert columns["inside_conditions"] is report.ok is False
    assert columns["gram_ratio"] == report.gram_ratio and columns["w_sum_condition"] == report.w_sum_condition
    assert columns["theta_norm_min"] <= columns["theta_norm_max"]


TABLE = {"family": "cancelling-conditioned", "noise": 0.0, "seed": [1, 2], "shapes": [{"dim": 6, "length": 2}],
         "learners": [{"learner": "gradient", "heads": 2, "output": "polished", "eps": 1e-6, "budget": 40,
                       "start": 4}]}


def test_a_hardness_axis_multiplies_the_cells_and_a_grid_without_one_keeps_its_keys():
    plain = samples_to_eps_cells(TABLE)
    assert all("hardness" not in cell for cell in plain)
    dialled = samples_to_eps_cells({**TABLE, "hardness": [0.0, 0.5, 1.0]})
    assert len(dialled) == 3 * len(plain)
    assert mhalearn.experiments.get_experiment("samples-to-eps").count({**TABLE, "hardness": [0.0, 0.5, 1.0]}) == 6
    assert {cell_key("samples-to-eps", {k: v for k, v in cell.items() if k != "hardness"}) for cell in dialled} == {
        cell_key("samples-to-eps", cell) for cell in plain}
    with pytest.raises(ValueError, match="hardness"):
        samples_to_eps_cells({**TABLE, "hardness": 2.0})
    with pytest.raises(ValueError, match="no dial"):
        samples_to_eps_cells({**TABLE, "family": "random", "hardness": 0.5})


def test_a_censored_teacher_is_fitted_on_the_ladder_and_its_row_keeps_the_conditions(monkeypatch):
    monkeypatch.setattr(samples_to_eps, "CENSORED_LADDER", (30, 60, 10**9))
    cell = {**samples_to_eps_cells({**TABLE, "hardness": 1.0})[0], "eps": 1e-300, "censored_probes": 60}
    row = run_samples_to_eps_cell(cell)
    assert row["censored"] and json.loads(row["family_params"]) == {"hardness": 1.0}
    beyond = json.loads(row["censored_log"])
    assert sorted(int(n) for n in beyond) == [30, 60]
    assert row["polished_error_at_60"] == beyond["60"]["polished_error"] > 0
    teacher = mhalearn.make_teacher("cancelling-conditioned", 2, 6, hardness=1.0,
                                    rng=mhalearn.evaluation.planted.instance_streams("cancelling-conditioned", 2, 6, 2,
                                                                             40, cell["seed"])[0])
    assert row["gram_ratio"] == mhalearn.nondegeneracy(teacher).gram_ratio
    assert row["inside_conditions"] == mhalearn.nondegeneracy(teacher).ok


def _row(hardness, seed, needed, inside, error=None):
    return {"family": "f", "dim": 12, "length": 4, "noise": 0.0, "learner": "gradient", "output": "polished",
            "eps": 1e-6, "heads": 3, "hardness": hardness, "seed": seed, "budget": 2000,
            "censored": needed is None, "samples_needed": needed, "inside_conditions": inside, "gram_ratio": 0.5,
            "polished_error_at_2000": error}


def test_the_dial_table_counts_inside_and_censored_teachers_and_keeps_points_apart():
    rows = [_row(0.0, 1, 40, True), _row(0.0, 2, 60, True), _row(0.0, 3, 50, False),
            _row(1.0, 1, None, False, 0.2), _row(1.0, 2, None, False, 0.1), _row(1.0, 3, 900, False)]
    low, high = dial_table(rows)
    assert (low["hardness"], low["teachers"], low["inside"], low["censored"], low["median"]) == (0.0, 3, 2, 0, 50)
    assert (high["inside"], high["censored"]) == (0, 2) and math.isinf(high["median"])
    assert high["error_at_2000"] == "0.15 [0.1, 0.2]"
    assert {row["family"] for row in labelled_by_dial(rows)} == {"f h=0", "f h=1"}


def test_sculpt_vs_m_cells_name_a_family_only_when_the_grid_does():
    from mhalearn.experiments.sculpt_vs_m import _cell_teacher, sculpt_vs_m_cells

    table = {"heads": 2, "dim": 6, "length": 2, "samples": 100, "seed": 0}
    plain = sculpt_vs_m_cells(table)
    assert all(set(cell) == {"heads", "dim", "length", "samples", "seed"} for cell in plain)
    dialled = sculpt_vs_m_cells({**table, "family": "cancelling-conditioned", "hardness": [0.0, 1.0]})
    assert [cell["hardness"] for cell in dialled] == [0.0, 1.0]
    random_teacher = _cell_teacher(plain[0])
    assert np.array_equal(random_teacher.thetas, mhalearn.sample_teacher(
        2, 6, rng=mhalearn.evaluation.planted.seeded_rng(20_251, 2, 0)).thetas)
    far, near = (_cell_teacher(cell) for cell in reversed(dialled))
    assert mhalearn.nondegeneracy(far).gram_ratio < 1e-12 < mhalearn.nondegeneracy(near).gram_ratio
    with pytest.raises(ValueError, match="no dial"):
        sculpt_vs_m_cells({**table, "family": "random", "hardness": 0.5})


def test_the_saturated_dial_scales_one_teachers_attention_from_the_random_familys_norm():
    for hardness, norm in ((0.0, 2.0), (0.5, 2.0 * 20 ** 0.5), (1.0, 40.0)):
        teacher = mhalearn.make_teacher("saturated", 3, 8, rng=4, hardness=hardness)
        np.testing.assert_allclose(np.linalg.norm(teacher.thetas, axis=(1, 2)), norm, rtol=1e-12)
        np.testing.assert_allclose(teacher.thetas / norm, mhalearn.sample_teacher(3, 8, rng=4).thetas / 2.0,
                                   rtol=1e-12, atol=1e-15)
        assert mhalearn.nondegeneracy(teacher).ok
