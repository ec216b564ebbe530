"""Issue 13: provenance in every row, mixed-code refusal, schema migration, grid files, tables out."""

import json
import os
import re
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest
from toy_experiments import GRIDS, TESTS, stored_keys, toy_cli, toy_experiment

import mhalearn
from mhalearn.cli import main
from mhalearn.experiments import EXPERIMENTS
from mhalearn.experiments.registry import expand_grid, parse_grid_file
from mhalearn.experiments.runner import run_sweep
from mhalearn.experiments.store import SCHEMA_VERSION, ResultStore, flatten_record
from mhalearn.provenance import code_id, code_provenance, source_hash

TOY = "toy-provenance"
PACKAGE = Path(mhalearn.__file__).resolve().parent


@pytest.fixture
def toy():
    EXPERIMENTS[TOY] = toy_experiment(TOY)
    yield TOY
    EXPERIMENTS.pop(TOY, None)


# --------------------------------------------------------------- provenance

def test_every_row_carries_its_provenance(tmp_path, toy):
    path = tmp_path / "results.db"
    run_sweep(TOY, path, quick=True, workers=1, progress=False)
    with ResultStore(path, readonly=True) as store:
        records = list(store.iter_records(TOY))
    assert len(records) == 9
    expected = code_provenance()
    for record in records:
        assert record["code_id"] == code_id() == f"{mhalearn.__version__}+src.{expected['source_hash']}"
        assert set(record["provenance"]) == {"mhalearn", "source_hash", "git_commit", "git_dirty", "python",
                                             "numpy", "numba", "platform"}
        assert record["provenance"] == expected
        assert record["seconds"] > 0 and record["finished_at"]


def test_source_hash_changes_with_any_source_file_and_only_then(tmp_path):
    copy = tmp_path / "mhalearn"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert source_hash(copy) == source_hash(PACKAGE)
    (copy / "__pycache__").mkdir(exist_ok=True)
    (copy / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    assert source_hash(copy) == source_hash(PACKAGE)
    grid = copy / "experiments" / "grids" / "error-vs-samples.toml"
    grid.write_text(grid.read_text() + "\nseed = [9]\n")  # a grid is not code: same hash
    assert source_hash(copy) == source_hash(PACKAGE)
    kernels = copy / "attention" / "kernels.py"
    kernels.write_text(kernels.read_text() + "\n# a comment\n")
    assert source_hash(copy) != source_hash(PACKAGE)


def test_resuming_a_sweep_after_changing_the_code_refuses_without_allow_mixed(tmp_path, toy):
    path = tmp_path / "results.db"
    assert run_sweep(TOY, path, quick=True, workers=1, progress=False).computed == 9  # this code: 9 of 12 cells
    changed = tmp_path / "changed" / "mhalearn"
    shutil.copytree(PACKAGE, changed, ignore=shutil.ignore_patterns("__pycache__"))
    model = changed / "attention" / "model.py"
    model.write_text(model.read_text() + "\n# an edit: this copy is other code\n")
    environment = {"PYTHONPATH": f"{changed.parent}:{TESTS}", "NUMBA_CACHE_DIR": str(tmp_path / "numba")}

    def sweep(*extra):
        return subprocess.run(toy_cli(TOY, "toy", "sweep", TOY, "--db", str(path), "--quiet", "--workers", "1",
                                      *extra),
                              capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={**os.environ, **environment})

    refused = sweep()
    assert refused.returncode == 2, refused.stderr
    assert "holds rows of 'toy-provenance' computed by other code" in refused.stderr
    assert "--allow-mixed" in refused.stderr and "Traceback" not in refused.stderr
    assert len(stored_keys(path)) == 9
    mixed = sweep("--allow-mixed")
    assert mixed.returncode == 0, mixed.stderr
    assert "mhalearn: warning:" in mixed.stderr and "mixing them as asked" in mixed.stderr
    with ResultStore(path, readonly=True) as store:
        versions = store.code_versions(TOY)
    assert [(entry["ok"], entry["code_id"] == code_id()) for entry in versions] == [(9, True), (3, False)]


# ---------------------------------------------------------------- migration

def test_a_results_file_of_schema_1_is_migrated_forward_without_losing_rows(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(TESTS / "data" / "results_v1.db", path)  # written by mhalearn 0.1.0 (schema 1)
    with ResultStore(path, readonly=True) as store:  # readers need no migration
        assert store.schema_version == 1
        before = [(r["experiment"], r["cell_key"], r["metrics"], r["status"], r["error"], r["finished_at"])
                  for r in store.iter_records()]
    assert len(before) == 11
    with ResultStore(path) as store:
        assert store.schema_version == SCHEMA_VERSION
        after = [(r["experiment"], r["cell_key"], r["metrics"], r["status"], r["error"], r["finished_at"])
                 for r in store.iter_records()]
        assert after == before
        assert {r["code_id"] for r in store.iter_records()} == {None}
        meta = dict(store.connection.execute("SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(SCHEMA_VERSION) and "migrated_from_1" in meta
    connection = sqlite3.connect(path)
    assert connection.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    connection.close()


def test_rows_of_unknown_code_count_as_other_code(tmp_path):
    path = tmp_path / "old.db"
    shutil.copy(TESTS / "data" / "results_v1.db", path)
    EXPERIMENTS["toy-sweep"] = toy_experiment("toy-sweep")
    try:
        with pytest.raises(ValueError, match=r"10 rows by unknown code .*Refusing to mix"):
            run_sweep("toy-sweep", path, workers=1, progress=False)
    finally:
        EXPERIMENTS.pop("toy-sweep")


def test_sweep_status_lists_rows_by_experiment_and_code_version(tmp_path, toy, capsys):
    path = tmp_path / "results.db"
    shutil.copy(TESTS / "data" / "results_v1.db", path)
    run_sweep(TOY, path, quick=True, workers=1, progress=False)
    assert main(["sweep", "--status", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].startswith(f"{path}: results schema {SCHEMA_VERSION}; this code is {code_id()}")
    assert any(line.startswith(TOY) and "9 ok" in line and "(this code)" in line for line in lines)
    assert any(line.startswith("toy-sweep") and "9 ok" in line and "1 failed" in line and "unknown code" in line
               for line in lines)
    assert any(f"[quick] of {GRIDS / 'toy.toml'}" in line for line in lines)


# --------------------------------------------------------------------- grids

def test_every_named_experiment_ships_a_grid_file_with_full_and_quick_tables():
    for name, experiment in EXPERIMENTS.items():
        if name.startswith("toy"):
            continue
        packaged = PACKAGE / "experiments" / "grids" / f"{name}.toml"
        tables = parse_grid_file(packaged.read_text(), str(packaged))
        assert set(tables) == {"full", "quick"}, name
        for quick in (False, True):
            cells = experiment.cells(quick)
            assert cells and len({json.dumps(cell, sort_keys=True) for cell in cells}) == len(cells)


def test_a_sweep_records_its_grid_and_runs_a_users_grid_file(tmp_path, toy, capsys):
    path = tmp_path / "results.db"
    mine = tmp_path / "mine.toml"
    mine.write_text('# a single grid: keys at the top level\na = [7, 8]\nb = "q"\n')
    assert main(["sweep", TOY, "--db", str(path), "--grid", str(mine), "--quiet", "--workers", "1"]) == 0
    assert "2 cells, 0 already stored, 2 computed" in capsys.readouterr().out
    run_sweep(TOY, path, quick=True, workers=1, progress=False)
    run_sweep(TOY, path, quick=True, workers=1, progress=False)  # the same grid again: recorded once
    with ResultStore(path, readonly=True) as store:
        grids = store.grids(TOY)
        assert {tuple(sorted(row["params"].items())) for row in store.iter_records(TOY)} >= {
            (("a", 7), ("b", "q")), (("a", 8), ("b", "q"))}
    assert [(grid["name"], grid["source"]) for grid in grids] == [("full", str(mine)),
                                                                   ("quick", str(GRIDS / "toy.toml"))]
    assert grids[0]["grid"] == {"a": [7, 8], "b": "q"} and grids[0]["toml"] == mine.read_text()


@pytest.mark.parametrize("text, message", [
    ("a = [1]\nc = 2\nb = 'x'\n", r"received unknown keys \['c'\]"),
    ("a = []\nb = 'x'\n", "key 'a' of 'toy' is an empty list"),
    ("[full]\na = 1\nb = 'x'\n[other]\nz = 1\n", r"keys \['other'\] outside its tables"),
    ("a = [1\n", "is not valid TOML"),
])
def test_a_bad_grid_file_is_refused_before_the_store_is_touched(tmp_path, toy, capsys, text, message):
    mine = tmp_path / "bad.toml"
    mine.write_text(text)
    code = main(["sweep", TOY, "--db", str(tmp_path / "results.db"), "--grid", str(mine), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and re.search(message, err), err
    assert not (tmp_path / "results.db").exists()


def test_expand_grid_nests_axes_in_field_order():
    cells = expand_grid({"b": ["x", "y"], "a": [1, 2], "c": 0.5}, ("a", "b", "c"))
    assert cells == [{"a": 1, "b": "x", "c": 0.5}, {"a": 1, "b": "y", "c": 0.5},
                     {"a": 2, "b": "x", "c": 0.5}, {"a": 2, "b": "y", "c": 0.5}]


# -------------------------------------------------------------------- tables

def test_records_flatten_to_dotted_columns_with_collisions_prefixed():
    record = {"experiment": "e", "params": {"heads": 2, "seed": 0},
              "metrics": {"heads": 3, "net": {"candidates": 5, "best": {"error": 0.1}}, "test_error": 0.2},
              "status": "ok", "error": None, "seconds": 1.5, "host": "h", "finished_at": "t", "code_id": "c",
              "provenance": {"numpy": "2.0"}}
    assert flatten_record(record) == {
        "experiment": "e", "heads": 2, "seed": 0, "metrics.heads": 3, "net.candidates": 5, "net.best.error": 0.1,
        "test_error": 0.2, "status": "ok", "error": None, "seconds": 1.5, "host": "h", "finished_at": "t",
        "code_id": "c", "provenance.numpy": "2.0"}


def test_to_dataframe_and_export_round_trip(tmp_path, toy, capsys):
    pandas = pytest.importorskip("pandas", reason="tables need the 'tables' extra (pandas)")
    path = tmp_path / "results.db"
    run_sweep(TOY, path, workers=1, progress=False)
    with ResultStore(path) as store:
        store.record(TOY, {"a": 9, "b": "n"}, {"value": 1.0, "phase": {"rows": 3, "span": 0.25}})
        frame = store.to_dataframe(TOY)
        everything = store.to_dataframe()
    assert len(frame) == 13 and len(everything) == 13
    assert list(frame.columns[:5]) == ["experiment", "a", "b", "square", "value"]  # metrics stored sorted
    assert {"phase.rows", "phase.span", "status", "seconds", "code_id", "provenance.numpy"} <= set(frame.columns)
    assert frame.loc[frame["a"] == 9, "phase.span"].item() == 0.25
    assert (frame["provenance.mhalearn"].dropna() == mhalearn.__version__).all()
    csv = tmp_path / "rows.csv"
    assert main(["export", TOY, "--db", str(path), "--format", "csv", "--out", str(csv)]) == 0
    assert "13 rows" in capsys.readouterr().out
    back = pandas.read_csv(csv)
    assert list(back.columns) == list(frame.columns) and len(back) == 13
    pytest.importorskip("pyarrow", reason="Parquet needs the 'tables' extra (pyarrow)")
    parquet = tmp_path / "rows.parquet"
    assert main(["export", TOY, "--db", str(path), "--format", "parquet", "--out", str(parquet)]) == 0
    pandas.testing.assert_frame_equal(pandas.read_parquet(parquet), frame)


def test_export_refuses_an_experiment_that_is_not_stored(tmp_path, toy, capsys):
    path = tmp_path / "results.db"
    ResultStore(path).close()
    code = main(["export", "nothing", "--db", str(path), "--out", str(tmp_path / "x.csv")])
    assert code == 2 and "expected one of the experiments stored" in capsys.readouterr().err
