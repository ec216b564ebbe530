"""The agreement-rate experiment: the teacher-alone count, the Poisson law and the quick sweep."""

import math

import numpy as np
import pytest

import mhalearn
from mhalearn.attention.model import MultiHeadAttention
from mhalearn.experiments.agreement_rate import (
    agreement_law,
    held_out_prediction,
    predicted_rate,
    teacher_agreement_counts,
)
from mhalearn.experiments.runner import run_sweep
from mhalearn.experiments.store import ResultStore


def _counts_by_hand(teacher, X, tolerances):
    """Every row, every head, in plain loops: the definition the experiment counts."""
    counts = np.zeros(len(tolerances), dtype=int)
    for x in X:
        heads = []
        for theta in teacher.thetas:
            logits = x @ theta @ x.T
            weights = np.exp(logits - logits.max(axis=1, keepdims=True))
            heads.append(weights / weights.sum(axis=1, keepdims=True))
        heads = np.array(heads)  # (m, k, k)
        spread = np.abs(heads - heads.mean(axis=0)).sum(axis=-1).max(axis=0)  # (k,)
        counts += [(spread <= tau).sum() for tau in tolerances]
    return counts


def test_teacher_count_matches_the_definition_row_by_row():
    teacher = mhalearn.sample_teacher(heads=2, dim=5, theta_norm=1.0, rng=0)
    tolerances = (0.05, 0.1, 0.2, 0.4)
    counts, drawn = teacher_agreement_counts(teacher, 3, max_samples=400, target_rows=10 ** 9,
                                             rng=np.random.default_rng(1), tolerances=tolerances)
    X = mhalearn.boolean_inputs(400, 3, 5, rng=np.random.default_rng(1))
    assert drawn == 400
    np.testing.assert_array_equal(counts, _counts_by_hand(teacher, X, tolerances))
    assert (np.diff(counts) > 0).all() and counts[-1] < 400 * 3  # every tolerance matters on this teacher


def test_identical_heads_agree_on_every_row():
    one = mhalearn.sample_teacher(heads=1, dim=6, rng=3)
    twins = MultiHeadAttention(np.concatenate([one.thetas, one.thetas]), np.concatenate([one.ws, one.ws]))
    counts, drawn = teacher_agreement_counts(twins, 4, max_samples=300, target_rows=10 ** 9,
                                             rng=np.random.default_rng(0))
    assert (counts == drawn * 4).all()


def test_drawing_stops_once_the_target_is_reached():
    teacher = mhalearn.sample_teacher(heads=2, dim=6, rng=0)
    counts, drawn = teacher_agreement_counts(teacher, 3, max_samples=10 ** 6, target_rows=5,
                                             rng=np.random.default_rng(0))
    assert counts[1] >= 5 and drawn < 10 ** 6


def _synthetic_rows(law_exponent, heads_values, lengths, teachers, drawn, seed):
    """Counts drawn from a known law, as stored rows."""
    generator = np.random.default_rng(seed)
    rows = []
    for seed_ in range(teachers):
        for heads in heads_values:
            for length in lengths:
                rate = 10.0 ** law_exponent(heads, length)
                found = int(generator.poisson(rate * drawn * length))
                rows.append({"heads": heads, "length": length, "theta_norm": 2.0, "seed": seed_, "dim": 12,
                             "max_samples": drawn, "target_rows": 200,
                             "sequences": drawn, "teacher_rows": {"0.05": found, "0.1": found, "0.2": found}})
    return rows


@pytest.mark.parametrize("law, truth", [("slope", {"a": -0.3, "b": -0.45}), ("per-head", {"c": -0.6, "b": -0.33})])
def test_the_poisson_fit_recovers_a_planted_law_with_cells_that_found_nothing(law, truth):
    def exponent(heads, length):
        u, v = heads - 1, length - 1
        return (truth["a"] + truth["b"] * u * v) if law == "slope" else u * (truth["c"] + truth["b"] * v)

    rows = _synthetic_rows(exponent, [2, 3, 4, 5], [3, 4, 5, 6, 7, 8], teachers=3, drawn=10 ** 6, seed=0)
    assert any(row["teacher_rows"]["0.1"] == 0 for row in rows)  # the censored cells are in the fit
    fit = agreement_law(rows, law=law, resamples=50)
    for name, value in truth.items():
        assert fit["coefficients"][name] == pytest.approx(value, abs=0.02)
        low, high = fit["intervals"][name]
        assert low <= fit["coefficients"][name] <= high
    check = held_out_prediction(rows, cell=(3, 6), law=law, resamples=20)
    assert check["predicted"] == pytest.approx(10.0 ** exponent(3, 6), rel=0.1)
    assert predicted_rate(fit, 1, 5) == pytest.approx(10.0 ** fit["coefficients"].get("a", 0.0))


def test_quick_sweep_stores_every_cell_and_plots(tmp_path):
    summary = run_sweep("agreement-rate", tmp_path / "rows.db", quick=True, workers=1, progress=False)
    assert summary.failed == 0 and summary.computed == summary.total == 12
    rows = ResultStore(tmp_path / "rows.db").rows("agreement-rate")
    by_cell = {(row["heads"], row["length"], row["seed"]): row for row in rows}
    assert len(by_cell) == 12
    for (heads, length, _), row in by_cell.items():
        if heads == 1:  # one head agrees with itself on every row
            assert row["teacher_rate_per_row"] == 1.0 and row["decoder_rate_per_sequence"] == length
        else:
            assert 0 < row["teacher_rate_per_row"] < 1
            assert row["teacher_rows"]["0.05"] <= row["teacher_rows"]["0.1"] <= row["teacher_rows"]["0.2"]
    paths = mhalearn.experiments.get_experiment("agreement-rate").plot(rows, tmp_path / "figures")
    assert all(path.exists() for path in paths)
    assert math.isfinite(agreement_law(rows, resamples=10)["coefficients"]["b"])


def test_a_bad_grid_is_refused_whole_before_any_work(tmp_path):
    grid = tmp_path / "bad.toml"
    grid.write_text("[full]\nheads = [0, 2]\ndim = 12\nlength = 4\ntheta_norm = -1.0\nseed = 0\nmax_samples = 100\n")
    with pytest.raises(ValueError, match=r"heads: .*received 0.*theta_norm: .*received -1.0"):
        run_sweep("agreement-rate", tmp_path / "rows.db", grid=grid, workers=1, progress=False)
    assert not (tmp_path / "rows.db").exists()
