"""The results store, the resumable runner (local and Dask backends) and the learning experiments."""

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import numpy as np
import pytest
from toy_experiments import TESTS, stored_keys, toy_experiment, toy_run_cell

from mhalearn.evaluation import plant_instance, seeded_rng
from mhalearn.experiments import EXPERIMENTS, get_experiment
from mhalearn.experiments import registry as registry_module
from mhalearn.experiments.backends import execute_cell
from mhalearn.experiments.learning import (
    plot_error_vs_samples,
    plot_heads_dependence,
    run_learning_cell,
    samples_to_epsilon,
)
from mhalearn.experiments.runner import run_sweep
from mhalearn.experiments.store import SCHEMA_VERSION, ResultStore, cell_key
from mhalearn.learners import LEARNERS
from mhalearn.provenance import code_id

TOY = "toy-sweep"


@pytest.fixture
def toy_experiments():
    """Register the test experiments for the duration of one test."""
    added = {TOY: toy_experiment(TOY), "toy-failing": toy_experiment("toy-failing", "toy-failing"),
             "toy-sleepy": toy_experiment("toy-sleepy", "toy-sleepy")}
    EXPERIMENTS.update(added)
    yield added
    for name in added:
        EXPERIMENTS.pop(name, None)


def comparable_rows(path, experiment) -> list[tuple]:
    """(params, metrics, status) of every row, sorted: what must agree across backends."""
    with ResultStore(path, create=False) as store:
        return sorted((json.dumps(r["params"], sort_keys=True), json.dumps(r["metrics"], sort_keys=True),
                       r["status"]) for r in store.iter_records(experiment))


# -------------------------------------------------------------------- store

def test_cell_key_is_canonical():
    assert cell_key("e", {"a": 1, "b": "x"}) == cell_key("e", {"b": "x", "a": 1})
    assert cell_key("e", {"a": 1}) != cell_key("f", {"a": 1})
    assert cell_key("e", {"a": 1}) != cell_key("e", {"a": 1.5})
    with pytest.raises(ValueError, match="JSON scalar"):
        cell_key("e", {"a": [1, 2]})
    with pytest.raises(ValueError, match="finite"):
        cell_key("e", {"a": float("nan")})


def test_store_round_trip_unique_keys_and_wal(tmp_path):
    path = tmp_path / "results.db"
    with ResultStore(path) as store:
        assert store.record("e", {"a": 1, "b": "x"}, {"err": 0.5}, seconds=1.5)
        assert not store.record("e", {"b": "x", "a": 1}, {"err": 9.0})  # same cell: kept, not duplicated
        assert store.record("e", {"a": 2, "b": "x"}, {}, status="failed", error="boom")
        assert store.count("e") == 2 and store.count("e", status="failed") == 1
        assert store.rows("e") == [{"a": 1, "b": "x", "err": 0.5}]
        assert store.failures("e") == [{"params": {"a": 2, "b": "x"}, "error": "boom"}]
        assert store.finished_keys("e", include_failed=False) == {cell_key("e", {"a": 1, "b": "x"})}
        assert store.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with ResultStore(path) as store:  # reopening keeps everything
        assert store.count() == 2 and store.experiments() == ["e"]


def test_store_refuses_foreign_files_without_modifying_them(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("not a database\n")
    foreign = tmp_path / "foreign.db"
    connection = sqlite3.connect(foreign)
    connection.execute("CREATE TABLE results (x)")
    connection.execute("INSERT INTO results VALUES (1)")
    connection.commit()
    connection.close()
    old_version = tmp_path / "old.db"
    with ResultStore(old_version) as store:
        store.connection.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
        store.connection.commit()
    for path, message in ((text, "not an SQLite database"), (foreign, "without the mhalearn marker"),
                          (old_version, f"schema version {SCHEMA_VERSION}")):
        before = path.read_bytes()
        listing = sorted(os.listdir(tmp_path))
        with pytest.raises(ValueError, match=message):
            ResultStore(path)
        assert path.read_bytes() == before
        assert sorted(os.listdir(tmp_path)) == listing  # no -wal or -shm files left behind either
    with pytest.raises(ValueError, match="no results file"):
        ResultStore(tmp_path / "missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


# ------------------------------------------------------------------- runner

def test_sweep_resumes_computing_only_missing_cells(tmp_path, toy_experiments):
    path = tmp_path / "results.db"
    cells = EXPERIMENTS[TOY].cells(False)
    with ResultStore(path) as store:  # a sweep that stopped after five cells
        for cell in cells[:5]:
            outcome = execute_cell(toy_run_cell, cell)
            store.record(TOY, outcome.cell, outcome.metrics, seconds=outcome.seconds,
                         code_id=code_id(outcome.provenance), provenance=outcome.provenance)
    summary = run_sweep(TOY, path, workers=2, progress=False)
    assert (summary.total, summary.skipped, summary.computed, summary.failed) == (12, 5, 7, 0)
    keys = stored_keys(path)
    assert len(keys) == len(set(keys)) == 12
    again = run_sweep(TOY, path, workers=2, progress=False)
    assert (again.skipped, again.computed) == (12, 0)
    quick = run_sweep(TOY, path, quick=True, workers=1, progress=False)  # the quick grid is a subset
    assert (quick.total, quick.computed) == (9, 0)
    expected = {cell_key(TOY, cell): toy_run_cell(cell) for cell in cells}
    with ResultStore(path) as store:
        for record in store.iter_records(TOY):
            assert record["metrics"] == expected[record["cell_key"]]


def test_failed_cells_are_recorded_not_fatal(tmp_path, toy_experiments):
    path = tmp_path / "results.db"
    summary = run_sweep("toy-failing", path, workers=1, progress=False)
    assert (summary.computed, summary.failed) == (3, 1)
    assert "ArithmeticError: cell x cannot be computed" in summary.errors[0]
    with ResultStore(path) as store:
        (failure,) = store.failures("toy-failing")
        assert failure["params"] == {"a": -1, "b": "x"} and "Traceback" in failure["error"]
        assert len(store.rows("toy-failing")) == 2
    assert run_sweep("toy-failing", path, workers=1, progress=False).computed == 0
    retried = run_sweep("toy-failing", path, workers=1, progress=False, retry_failed=True)
    assert (retried.computed, retried.failed) == (1, 1)
    assert len(stored_keys(path)) == 3


def test_sweep_killed_with_sigkill_resumes_without_loss_or_duplicates(tmp_path, toy_experiments):
    path = tmp_path / "results.db"
    script = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import toy_experiments as t; "
              "from mhalearn.experiments import register_experiment; "
              "from mhalearn.experiments.runner import run_sweep; "
              "register_experiment(t.toy_experiment('toy-sleepy', 'toy-sleepy')); "
              f"run_sweep('toy-sleepy', {str(path)!r}, workers=2, progress=False)")
    process = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if path.exists() and (tmp_path / "results.db-wal").exists():
                try:
                    if len(stored_keys(path)) >= 4:
                        break
                except sqlite3.OperationalError:
                    pass
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGKILL)  # the coordinator and its workers
    finally:
        process.wait()
    assert process.returncode == -signal.SIGKILL
    before = stored_keys(path)
    assert 4 <= len(before) < 16
    summary = run_sweep("toy-sleepy", path, workers=2, progress=False)
    assert summary.skipped == len(before) and summary.computed == 16 - len(before)
    after = stored_keys(path)
    assert len(after) == len(set(after)) == 16 and set(before) <= set(after)


def test_dask_backend_writes_the_same_rows_as_local(tmp_path, toy_experiments):
    distributed = pytest.importorskip("dask.distributed")
    run_sweep(TOY, tmp_path / "local.db", workers=2, progress=False)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://",
                                  host="127.0.0.1", dashboard_address=None) as cluster:
        summary = run_sweep(TOY, tmp_path / "dask.db", backend="dask", scheduler=cluster.scheduler_address,
                            progress=False)
    assert (summary.computed, summary.failed) == (12, 0)
    assert comparable_rows(tmp_path / "dask.db", TOY) == comparable_rows(tmp_path / "local.db", TOY)
    assert len(comparable_rows(tmp_path / "dask.db", TOY)) == 12


def test_runner_rejects_bad_arguments_before_touching_the_store(tmp_path, toy_experiments):
    path = tmp_path / "results.db"
    with pytest.raises(ValueError, match=r"experiment: expected one of .*'error-vs-samples'"):
        run_sweep("no-such-experiment", path, progress=False)
    with pytest.raises(ValueError, match="backend"):
        run_sweep(TOY, path, backend="spark", progress=False)
    with pytest.raises(ValueError, match="scheduler"):
        run_sweep(TOY, path, backend="dask", progress=False)
    with pytest.raises(ValueError, match="workers"):
        run_sweep(TOY, path, workers=0, progress=False)
    assert not path.exists()


_REGISTRATIONS = """
import json, sys
import mhalearn.experiments.registry as registry
registered_by = {}
def recording(experiment):
    registered_by[experiment.name] = sys._getframe(1).f_globals["__name__"]
    return original(experiment)
original, registry.register_experiment = registry.register_experiment, recording
def modules():
    return sorted(name for name in sys.modules if name.startswith("mhalearn.experiments.")
                  and name.rsplit(".", 1)[1] in registry.PACKAGED.values())
before = modules()
registry.get_experiment("random-features")
after_one = modules()
try:  # before its module is imported
    registry.register_experiment(registry.Experiment("sculpt-vs-m", "a user's", list, dict, list))
    refused = ""
except ValueError as error:
    refused = str(error)
every = sorted(registry.load_experiments())
print(json.dumps([before, after_one, refused, every, registered_by]))
"""


def test_a_packaged_experiment_is_imported_alone_and_registered_by_the_module_named():
    # A sweep imports the module of its experiment only (all of them import the learners, SciPy,
    # scikit-learn and matplotlib: seconds in each sweep and in each of its worker processes), and a
    # packaged name is taken even before its module is imported.
    result = subprocess.run([sys.executable, "-c", _REGISTRATIONS], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    before, after_one, refused, every, registered_by = json.loads(result.stdout.splitlines()[-1])
    assert before == [] and after_one == ["mhalearn.experiments.random_features"]
    assert refused == "experiment: name 'sculpt-vs-m' is already registered"
    packaged = registry_module.PACKAGED
    assert every == sorted(packaged) == sorted(EXPERIMENTS.keys() & packaged.keys())
    assert registered_by == {name: f"mhalearn.experiments.{module}" for name, module in packaged.items()}


# ------------------------------------------------------ learning experiments

def test_learning_experiments_are_registered_with_the_stated_grids():
    assert {"error-vs-samples", "heads-dependence"} <= set(EXPERIMENTS)
    assert get_experiment("error-vs-samples").run_cell is run_learning_cell
    cells = get_experiment("error-vs-samples").cells(False)
    assert {cell["heads"] for cell in cells} == {1, 2, 3}
    assert {cell["learner"] for cell in cells} <= set(LEARNERS)
    samples = sorted({cell["samples"] for cell in cells})
    assert np.allclose(np.diff(np.log(samples)), np.log(2))  # a log grid
    assert len(get_experiment("error-vs-samples").cells(True)) < len(cells)
    heads_cells = get_experiment("heads-dependence").cells(False)
    assert max(cell["heads"] for cell in heads_cells) >= 4
    for grid in (cells, heads_cells):
        assert len({cell_key("e", cell) for cell in grid}) == len(grid)


@pytest.mark.skipif("gradient" not in LEARNERS, reason="needs the gradient learner")
def test_learning_cell_is_deterministic_and_learns_a_small_teacher():
    cell = {"learner": "gradient", "family": "random", "heads": 1, "dim": 3, "length": 3, "samples": 200,
            "noise": 0.0, "seed": 1}
    first, second = run_learning_cell(cell), run_learning_cell(dict(cell))
    assert set(first) == {"test_error", "train_error", "theta_error", "w_error", "fit_seconds", "observer_seconds",
                          "candidates", "agreement_rows", "span_route", "span_distance", "head_cosine", "w_inflation",
                          "gram_ratio", "w_sum_condition", "w_norm_min", "theta_norm_min", "theta_norm_max",
                          "inside_conditions"}
    for times in (first, second):
        times.pop("fit_seconds"), times.pop("observer_seconds")
    assert first == second
    assert first["test_error"] < 1e-6  # noiseless, 1200 labels for 18 unknowns: the teacher is recovered


def test_seeded_rng_names_streams_by_crc32_and_planted_teachers_do_not_depend_on_n():
    import zlib

    expected = np.random.default_rng([3, zlib.crc32(b"random"), 2]).standard_normal(4)
    np.testing.assert_array_equal(seeded_rng(3, "random", 2).standard_normal(4), expected)
    assert not np.array_equal(seeded_rng(3, "random", 2).random(4), seeded_rng(3, "planted", 2).random(4))
    for bad in (-1, 1.5, None, True):
        with pytest.raises(ValueError, match="^keys: expected non-negative integers or strings"):
            seeded_rng(1, bad)
    shape = dict(heads=2, dim=4, length=3, family="random", seed=5, test_samples=10)
    small, large = plant_instance(samples=20, **shape), plant_instance(samples=40, **shape)
    np.testing.assert_array_equal(small[0].thetas, large[0].thetas)  # one teacher per seed, for every n
    np.testing.assert_array_equal(small[3], large[3])  # and one test set
    assert not np.array_equal(small[1], large[1][:20])  # the training sets are drawn per n


def test_samples_to_epsilon_is_the_smallest_n_whose_median_reaches_epsilon():
    rows = [{"learner": "a", "heads": 1, "samples": n, "seed": s, "test_error": (1.0 / n) * (1 + 0.1 * s)}
            for n in (16, 32, 64, 128, 256) for s in range(3)]
    rows += [{"learner": "a", "heads": 2, "samples": n, "seed": 0, "test_error": 0.5} for n in (16, 256)]
    result = samples_to_epsilon(rows, 1e-2)
    assert result[("a", 1)] == 128.0  # medians 1.1/n: 1.1/128 = 0.0086 ≤ 0.01 < 1.1/64
    assert math.isinf(result[("a", 2)])


def _synthetic_rows():
    rows = []
    for learner, scale in (("gradient", 1.0), ("sculpt", 0.5)):
        for heads in (1, 2, 3):
            for samples in (16, 64, 256):
                for seed in range(3):
                    rows.append({"learner": learner, "family": "random", "heads": heads, "dim": 4, "length": 4,
                                 "samples": samples, "noise": 0.1, "seed": seed,
                                 "test_error": scale * heads / samples * (1 + 0.2 * seed),
                                 "fit_seconds": heads * (1 + seed), "candidates": 10 ** heads if scale < 1 else None})
    return rows


def test_figures_are_written_with_the_numbers_they_show(tmp_path):
    rows = _synthetic_rows()
    paths = plot_error_vs_samples(rows, tmp_path) + plot_heads_dependence(rows, tmp_path)
    names = sorted(path.name for path in paths)
    assert names == ["error-vs-samples.png", "error-vs-samples.txt", "heads-dependence.png",
                     "heads-dependence.txt"]
    for path in paths:
        assert path.stat().st_size > 0
        if path.suffix == ".png":
            assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (tmp_path / "error-vs-samples.txt").read_text().splitlines()
    # gradient, m = 2, n = 64: errors 2/64·(1, 1.2, 1.4) → median 0.0375
    assert any(line.split()[:3] == ["gradient", "2", "64"] and line.split()[5] == "0.0375" for line in table)
    heads_table = (tmp_path / "heads-dependence.txt").read_text().splitlines()
    assert any(line.split() == ["sculpt", "3", "6", "4.5", "7.5", "1e+03", "256"]
               for line in heads_table)
    with pytest.raises(ValueError, match="run the sweep first"):
        plot_error_vs_samples([], tmp_path)


def test_sculpt_vs_m_table_counts_resumed_cells_and_reads_rows_stored_before_the_field(tmp_path):
    from mhalearn.experiments.sculpt_vs_m import plot_sculpt_vs_m

    def cell(seed, **resumed):
        return {"heads": 2, "dim": 12, "length": 4, "samples": 3000, "seed": seed, "agreement_rows": 50,
                "precision": 1.0, "feasible": 1.0, "refined_w_sum_error": 0.01, "span_distance": 0.05,
                "refused": None, "candidates": 100, "test_error": 0.01, "body_seconds": 2.0,
                "peak_memory_mb": 300.0, **resumed}

    rows = [cell(0), cell(1, resumed="", kept_seconds=0.0), cell(2, resumed="1_crude_sum, 2_sculpt", kept_seconds=0.9)]
    plot_sculpt_vs_m(rows, tmp_path)
    lines = (tmp_path / "sculpt-vs-m.txt").read_text().splitlines()
    header = next(line.split() for line in lines if line.split()[:3] == ["m", "n", "seeds"])
    row = next(line.split() for line in lines if line.split()[:3] == ["2", "3000", "3"])
    assert row[header.index("resumed")] == "1"  # the row stored before the field counts as not resumed


def test_sculpt_vs_m_counts_every_teacher_and_labels_an_unreached_m_at_its_own_largest_n(tmp_path):
    from mhalearn.experiments.sculpt_vs_m import plot_sculpt_vs_m, samples_to_target

    def cell(heads, samples, seed, distance):
        return {"heads": heads, "dim": 12, "length": 4, "samples": samples, "seed": seed,
                "span_distance": distance, "refused": None if distance is not None else "refused",
                "agreement_rows": 10, "precision": 1.0, "feasible": 1.0, "refined_w_sum_error": 0.01,
                "candidates": None, "test_error": None, "body_seconds": 1.0, "peak_memory_mb": 100.0}

    rows = [cell(2, 10**4, seed, 0.05) for seed in range(3)]
    rows += [cell(3, 10**7, 0, 0.15), cell(3, 10**7, 1, None), cell(3, 10**7, 2, 0.06)]  # median 0.15
    rows += [cell(3, 10**8, 0, 0.05), cell(3, 10**8, 2, 0.04)]  # a cell run without teacher 1 ...
    assert samples_to_target(rows)[3] == 10**8  # ... reaches on the teachers it has,
    rows.append(cell(3, 10**8, 1, None))
    assert samples_to_target(rows)[3] == 10**8  # and with teacher 1 refused (distance 1) the median is 0.05;
    rows.append(cell(4, 10**7, 0, None))
    assert samples_to_target(rows)[4] == math.inf
    plot_sculpt_vs_m(rows, tmp_path)
    table = (tmp_path / "sculpt-vs-m.txt").read_text().splitlines()
    assert any(line.split() == ["4", ">", "1e+07"] for line in table)  # its own largest n, not 10⁸
    rows[-2] = cell(3, 10**8, 1, 0.96)
    rows.append(cell(3, 10**8, 3, 0.97))  # two of four off: the median is no longer within 0.1
    assert samples_to_target(rows)[3] == math.inf


def test_sculpt_vs_m_noise_estimate_off_is_a_diagnostic_with_keys_of_its_own(tmp_path):
    from mhalearn.experiments.sculpt_vs_m import plot_sculpt_vs_m, sculpt_vs_m_cells
    from mhalearn.experiments.store import cell_key

    grid = dict(heads=[1, 2], dim=12, length=4, samples=1000, seed=0)
    defaults = sculpt_vs_m_cells(grid)
    assert sculpt_vs_m_cells({**grid, "estimate_noise": True}) == defaults
    assert all("estimate_noise" not in cell for cell in defaults)  # the defaults' cells keep their keys
    diagnostic = sculpt_vs_m_cells({**grid, "estimate_noise": False})
    assert [cell["estimate_noise"] for cell in diagnostic] == [False, False]
    assert not {cell_key("sculpt-vs-m", cell) for cell in diagnostic} & {cell_key("sculpt-vs-m", cell)
                                                                          for cell in defaults}
    with pytest.raises(ValueError, match="estimate_noise must be true or false"):
        sculpt_vs_m_cells({**grid, "estimate_noise": [True, False]})

    def row(cell):
        return {**cell, "span_distance": 0.05, "refused": None, "agreement_rows": 10, "precision": 1.0,
                "feasible": 1.0, "refined_w_sum_error": 0.01, "candidates": None, "test_error": None,
                "body_seconds": 1.0, "peak_memory_mb": 100.0}

    with pytest.raises(ValueError, match="separate --db"):
        plot_sculpt_vs_m([row(cell) for cell in defaults + diagnostic], tmp_path)
    plot_sculpt_vs_m([row(cell) for cell in diagnostic], tmp_path)
