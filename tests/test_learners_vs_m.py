"""The learners-vs-m experiment and the hard teacher families."""

import itertools
import math

import numpy as np
import pytest

import mhalearn
from mhalearn.cli import main
from mhalearn.experiments import get_experiment
from mhalearn.experiments.learners_vs_m import (
    TEACHER_KEYS,
    learners_vs_m_cells,
    run_rows,
    samples_to_epsilon_table,
    teacher_samples_to_epsilon,
)
from mhalearn.experiments.store import ResultStore, cell_key

GRID = {"family": "random", "noise": [0.0, 0.1], "seed": [0, 1], "shapes": [{"dim": 6, "length": 3}],
        "learners": [{"learner": "sculpt", "heads": [1, 2], "samples": [500, 5000], "max_samples": 1000},
                     {"learner": "gradient", "heads": [1, 3], "samples": [5, 100]}]}


def test_every_cell_of_the_grid_is_kept_and_the_unaffordable_ones_say_why():
    cells = learners_vs_m_cells(GRID)
    keys = [cell_key("learners-vs-m", cell) for cell in cells]
    assert len(set(keys)) == len(cells) == 2 * 2 * 2 * 2 + 2 * 2 * 2 * 2
    capped = [cell for cell in cells if cell["learner"] == "sculpt" and cell["samples"] == 5000]
    assert capped and all("max_samples = 1000" in cell["not_run"] for cell in capped)
    # 5 sequences of 3 tokens of d = 6 hold too few labels for m = 3's 216 unknowns: refused by the learner.
    refused = [cell for cell in cells if cell["learner"] == "gradient" and cell["samples"] == 5]
    assert {cell["heads"] for cell in refused if cell["not_run"]} == {3}
    assert all(not cell["not_run"] for cell in cells if cell["samples"] in (100, 500))


def test_the_cell_count_before_expanding_is_the_number_of_cells():
    experiment = get_experiment("learners-vs-m")
    assert experiment.count(GRID) == len(learners_vs_m_cells(GRID))
    full = experiment.grid().table
    assert experiment.count(full) == len(learners_vs_m_cells(full))


def test_the_grid_refuses_d_at_most_k_and_unknown_keys():
    with pytest.raises(ValueError, match="d > k"):
        learners_vs_m_cells({**GRID, "shapes": [{"dim": 4, "length": 4}]})
    with pytest.raises(ValueError, match="unknown keys"):
        learners_vs_m_cells({**GRID, "dims": 3})
    with pytest.raises(ValueError, match="learners"):
        learners_vs_m_cells({**GRID, "learners": [{"learner": "gradient", "heads": 1}]})
    with pytest.raises(ValueError, match="heads"):
        learners_vs_m_cells({**GRID, "learners": [{"learner": "gradient", "heads": 0, "samples": 100}]})


def _row(samples, error, *, ran=True, seed=0, **extra):
    return {"family": "random", "dim": 6, "length": 3, "noise": 0.0, "learner": "gradient", "heads": 2,
            "seed": seed, "samples": samples, "ran": ran, "polished_error": error, **extra}


def test_samples_to_epsilon_is_the_n_from_which_every_larger_n_reaches_it():
    rows = [_row(10, 0.5), _row(30, 1e-3), _row(100, 0.2), _row(300, 1e-3), _row(1000, 1e-4),
            _row(3000, None, ran=False)]
    assert teacher_samples_to_epsilon(rows, "polished_error", 1e-2) == (300.0, 1000)
    never = [_row(10, 0.5), _row(30, 0.3)]
    assert teacher_samples_to_epsilon(never, "polished_error", 1e-2) == (math.inf, 30)
    assert math.isnan(teacher_samples_to_epsilon([_row(10, None, ran=False)], "polished_error", 1e-2)[0])


def test_censored_teachers_count_and_a_raised_cap_supersedes_not_run_rows():
    rows = [_row(n, 1e-3 if seed < 2 else 0.5, seed=seed) for seed in range(5) for n in (10, 100)]
    rows += [_row(1000, None, ran=False, seed=seed) for seed in range(5)]
    rows.append(_row(1000, 1e-3, seed=4))  # the same cell, run once the cap was raised
    assert len(run_rows(rows)) == len(rows) - 1
    (entry,) = samples_to_epsilon_table(rows, "polished_error", 1e-2)
    assert (entry["teachers"], entry["counted"], entry["censored"], entry["not_run"]) == (5, 5, 2, 0)
    # Teachers 0–1 need 10, teacher 4 needs 1000, teachers 2–3 never get there: the median is 1000.
    assert entry["median"] == 1000
    assert entry["high"] == math.inf and entry["largest_run"] == 1000


def test_cancelling_family_cancels_the_alternating_sum_with_distinct_heads():
    for heads in (3, 4, 6):
        teacher = mhalearn.make_teacher("cancelling", heads, 8, rng=heads)
        signs = (-1.0) ** np.arange(heads)
        np.testing.assert_allclose(np.einsum("i,ide->de", signs, teacher.thetas), 0.0, atol=1e-12)
        norms = np.linalg.norm(teacher.thetas.reshape(heads, -1), axis=1)
        assert np.mean(norms) == pytest.approx(2.0)
        gaps = [np.linalg.norm(teacher.thetas[i] - teacher.thetas[j])
                for i, j in itertools.combinations(range(heads), 2)]
        assert min(gaps) > 0.5
        w0 = np.linalg.norm(teacher.ws[0])
        assert np.linalg.norm(teacher.projection_sum) < (0.5 if heads % 2 == 0 else 1.5) * w0
    pair = mhalearn.make_teacher("cancelling", 2, 8, rng=0)
    np.testing.assert_allclose(pair.thetas[1], -pair.thetas[0])


def test_cancelling_heads_leave_little_to_the_first_order_term():
    """The linearised layer x̄W_Σ + Σ_i x_ℓᵀΘ_i S W_i explains far less of a cancelling teacher than of a random one."""
    X = mhalearn.boolean_inputs(400, 4, 8, rng=1)
    mean = X.mean(axis=1)
    S = np.einsum("nkd,nke->nde", X, X) / 4 - mean[:, :, None] * mean[:, None, :]

    def first_order_share(teacher):
        linear = (mean @ teacher.projection_sum)[:, None, :] + np.einsum(
            "nkd,mde,nef,mfg->nkg", X, teacher.thetas, S, teacher.ws)
        return float(np.sum(linear ** 2) / np.sum(teacher.predict(X) ** 2))

    assert first_order_share(mhalearn.make_teacher("cancelling", 4, 8, rng=2)) < 0.2 * first_order_share(
        mhalearn.make_teacher("random", 4, 8, rng=2))


def test_near_identical_and_small_margin_heads_are_nearly_parallel():
    for family, cosine in (("near-identical", 0.97), ("small-margin", 0.9)):
        teacher = mhalearn.make_teacher(family, 4, 10, rng=3)
        unit = teacher.thetas.reshape(4, -1) / np.linalg.norm(teacher.thetas.reshape(4, -1), axis=1)[:, None]
        off_diagonal = (unit @ unit.T)[~np.eye(4, dtype=bool)]
        assert off_diagonal.min() > cosine and off_diagonal.max() < 1 - 1e-3


@pytest.mark.slow
def test_quick_sweep_keeps_a_row_per_cell_with_routes_and_both_errors(tmp_path):
    db = tmp_path / "results.db"
    assert main(["sweep", "learners-vs-m", "--quick", "--db", str(db), "--quiet", "--workers", "1"]) == 0
    cells = get_experiment("learners-vs-m").cells(quick=True)
    with ResultStore(db, readonly=True) as store:
        rows = store.rows("learners-vs-m")
    assert sorted(cell_key("learners-vs-m", {key: row[key] for key in cells[0]}) for row in rows) == sorted(
        cell_key("learners-vs-m", cell) for cell in cells)
    not_run = [row for row in rows if row["not_run"]]
    assert not_run and all(row["ran"] is False and "polished_error" not in row for row in not_run)
    ran = [row for row in rows if row["ran"]]
    assert {row["route"] for row in ran if row["learner"] == "moment"} == {"moment"}
    assert {row["route"] for row in ran if row["learner"] == "gradient"} == {"gradient"}
    assert {row["route"] for row in ran if row["learner"] == "sculpt"} <= {"body", "moment"}
    for row in ran:
        assert row["fit_seconds"] > 0 and row["unpolished_error"] >= 0 and row["polished_error"] >= 0
        if row["learner"] == "gradient":
            assert row["unpolished_error"] == row["polished_error"]
    # Each (learner, teacher) of the grid gives a line of the samples-to-ε table.
    teachers = {tuple(row[key] for key in TEACHER_KEYS if key != "seed") for row in rows}
    assert len(samples_to_epsilon_table(rows, "unpolished_error", 1e-2)) == len(teachers)
    paths = get_experiment("learners-vs-m").plot(rows, tmp_path / "figures")
    assert {path.name for path in paths} == {"learners-vs-m.png", "learners-vs-m.txt"}
    assert "routes that produced the unpolished output" in (tmp_path / "figures" / "learners-vs-m.txt").read_text()


def test_the_runs_readme_states_the_provenance_its_rows_hold():
    """runs/learners-vs-m/README.md quotes, for every committed results file, what the rows' own provenance says."""
    from pathlib import Path

    from mhalearn.experiments.learners_vs_m import provenance_statement

    root = Path(__file__).resolve().parents[1]
    page = (root / "runs" / "learners-vs-m" / "README.md").read_text(encoding="utf-8")
    files = sorted((root / "runs" / "learners-vs-m").glob("*.db"))
    assert files
    for path in files:
        statement = provenance_statement(path, others=files)
        assert statement in " ".join(page.split()), statement
    assert "9cdbae9 (their" not in page  # the one-commit claim the rows contradict


def test_provenance_statement_names_dirty_trees_and_matches_their_source_to_clean_rows(tmp_path):
    from mhalearn.experiments.learners_vs_m import provenance_statement

    def provenance(commit, dirty, source):
        return {"mhalearn": "0.1.0", "source_hash": source, "git_commit": commit, "git_dirty": dirty}

    first, second = tmp_path / "a.db", tmp_path / "b.db"
    with ResultStore(first) as store:
        for seed, prov in enumerate([provenance("1" * 40, False, "s1"), provenance("1" * 40, False, "s1"),
                                     provenance("2" * 40, True, "s1"), provenance("3" * 40, True, "s9")]):
            store.record("learners-vs-m", {"seed": seed}, {}, provenance=prov)
    with ResultStore(second) as store:
        store.record("learners-vs-m", {"seed": 0}, {}, provenance=provenance("4" * 40, True, "s9"))
        store.record("learners-vs-m", {"seed": 1}, {}, provenance=provenance("5" * 40, False, "s9"))
    assert provenance_statement(first) == (
        "`a.db`: 2 by 1111111; 1 by 2222222 with uncommitted changes, package source identical to 1111111's; "
        "1 by 3333333 with uncommitted changes to a package source no clean commit's rows share (src.s9)")
    assert "1 by 3333333 with uncommitted changes, package source identical to 5555555's" in provenance_statement(
        first, others=[second])
