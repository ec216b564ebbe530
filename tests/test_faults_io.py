"""Faults in files and results: nothing lost, errors before the work.

One test per case; each checks that the fault gives one clear line, not a
raw traceback, lost work, a refused file, a hang, or double work.  File permissions do not
bind root, so the read-only cases run their command in a child process
that has given up the capabilities that let root ignore them.
"""

import csv
import ctypes
import dataclasses
import errno
import io
import json
import os
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest
from toy_experiments import TESTS, stored_keys, toy_cli, toy_experiment

import mhalearn
from mhalearn.cli import main
from mhalearn.experiments import EXPERIMENTS
from mhalearn.experiments.runner import run_sweep
from mhalearn.experiments.store import ResultStore
from mhalearn.provenance import code_provenance

TOY = "toy-faults"
#: Where the mhalearn under test is imported from, for child processes.
REPOSITORY = Path(mhalearn.__file__).resolve().parent.parent


@pytest.fixture
def toy():
    """Toy experiments: TOY (12 cells), TOY-sleepy (16 cells of 0.25 s)."""
    added = {TOY: toy_experiment(TOY), f"{TOY}-sleepy": toy_experiment(f"{TOY}-sleepy", "toy-sleepy")}
    EXPERIMENTS.update(added)
    yield TOY
    for name in added:
        EXPERIMENTS.pop(name, None)


def integrity(path) -> str:
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return connection.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        connection.close()


# ------------------------------------------------------------ model files

def test_save_is_atomic_an_interrupted_save_keeps_the_old_model(tmp_path, monkeypatch):
    path = tmp_path / "model.npz"
    old = mhalearn.sample_teacher(1, 3, rng=0)
    old.save(path)
    before = path.read_bytes()

    def savez_then_crash(handle, **arrays):
        handle.write(b"PK\x03\x04 half a zip file")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("mhalearn.attention.model.np.savez", savez_then_crash)
    with pytest.raises(OSError, match="No space left"):
        mhalearn.sample_teacher(1, 3, rng=1).save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["model.npz"]  # no temporary file left behind


def _write_npz(path, members: dict) -> None:
    """An .npz with exactly ``members`` (name → array or raw bytes), stored deflated."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, value in members.items():
            if isinstance(value, bytes):
                archive.writestr(name, value)
            else:
                buffer = io.BytesIO()
                np.lib.format.write_array(buffer, np.asarray(value), allow_pickle=False)
                archive.writestr(name, buffer.getvalue())


def _model_members(version=1) -> dict:
    teacher = mhalearn.sample_teacher(1, 3, rng=0)
    return {"format.npy": np.array("mhalearn.MultiHeadAttention"), "version.npy": np.array(version),
            "thetas.npy": teacher.thetas, "ws.npy": teacher.ws}


@pytest.mark.parametrize("version", [1.9, True, "1"])
def test_load_refuses_a_version_that_is_not_the_integer_1(tmp_path, version):
    path = tmp_path / "model.npz"
    _write_npz(path, _model_members(version))
    with pytest.raises(ValueError, match="path: expected model format version 1|path: member version.npy"):
        mhalearn.MultiHeadAttention.load(path)
    _write_npz(path, _model_members(1))
    assert mhalearn.MultiHeadAttention.load(path).heads == 1


def test_load_refuses_an_extra_member_without_decompressing_it(tmp_path):
    path = tmp_path / "bomb.npz"
    members = _model_members()
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.zeros(64 << 20, dtype=np.uint8))  # 64 MiB of zeros: 64 KiB deflated
    members["padding.npy"] = buffer.getvalue()
    del buffer
    _write_npz(path, members)
    assert path.stat().st_size < 1 << 20
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"path: expected an mhalearn model with members"):
            mhalearn.MultiHeadAttention.load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20


def test_load_refuses_a_member_larger_than_its_array_header_declares(tmp_path):
    path = tmp_path / "padded.npz"
    members = _model_members()
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, members.pop("ws.npy"))
    members["ws.npy"] = buffer.getvalue() + bytes(1 << 16)  # trailing padding after the array
    _write_npz(path, members)
    with pytest.raises(ValueError, match=r"member ws.npy .* declares \d+ bytes but its array header needs"):
        mhalearn.MultiHeadAttention.load(path)


# ----------------------------------------------------------- results files

def test_a_blank_sqlite_file_left_by_a_killed_creation_is_taken_as_new(tmp_path):
    path = tmp_path / "results.db"
    connection = sqlite3.connect(path)  # what a kill in the first milliseconds of creation left: no tables
    connection.execute("PRAGMA journal_mode = WAL")
    connection.close()
    assert path.stat().st_size > 0
    with ResultStore(path) as store:
        assert store.count() == 0
        assert store.record(TOY, {"a": 0, "b": "x"}, {"value": 1.0})
    assert len(stored_keys(path)) == 1


def test_a_failed_creation_leaves_no_results_file_behind(tmp_path, monkeypatch):
    path = tmp_path / "results.db"
    import mhalearn.experiments.results_file as results_file

    monkeypatch.setattr(results_file, "_SCHEMA", results_file._SCHEMA + "CREATE TABLE interrupted (;")
    with pytest.raises(sqlite3.Error):
        ResultStore(path)
    monkeypatch.undo()
    with ResultStore(path) as store:  # the next sweep creates the file as if nothing had happened
        assert store.count() == 0
    assert sorted(name for name in os.listdir(tmp_path) if ".creating" in name) == []


def _damaged_results(path: Path, damage: str) -> bytes:
    """A results file of 200 rows damaged as ``damage`` says; returns its bytes.

    ``"pages"``: every page after the schema's root pages overwritten with
    noise (the rows are gone, the marker still reads); ``"no-results-table"``:
    a valid marker over a file whose ``results`` table was dropped.
    """
    with ResultStore(path) as store:
        for index in range(200):
            store.record(TOY, {"a": index, "b": "x"}, {"value": float(index), "note": "y" * 200})
    connection = sqlite3.connect(path)
    try:
        if damage == "no-results-table":
            connection.execute("DROP TABLE results")
            connection.commit()
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        last_root = connection.execute("SELECT MAX(rootpage) FROM sqlite_master").fetchone()[0]
    finally:
        connection.close()
    if damage == "pages":
        data = bytearray(path.read_bytes())
        start = last_root * page_size
        assert len(data) > start + page_size  # there are row pages to damage
        data[start:] = np.random.default_rng(0).integers(0, 256, len(data) - start, dtype=np.uint8).tobytes()
        path.write_bytes(bytes(data))
    return path.read_bytes()


@pytest.mark.parametrize("damage", ["pages", "no-results-table"])
@pytest.mark.parametrize("command", ["sweep", "status", "plot", "export"])
def test_a_damaged_results_file_is_reported_in_one_line_and_left_untouched(tmp_path, toy, capsys, damage, command):
    path = tmp_path / "results.db"
    before = _damaged_results(path, damage)
    arguments = {"sweep": ["sweep", TOY, "--workers", "1", "--quiet"], "status": ["sweep", "--status"],
                 "plot": ["plot", TOY, "--out", str(tmp_path / "figures")],
                 "export": ["export", TOY, "--out", str(tmp_path / "rows.csv")]}[command]
    code = main(arguments + ["--db", str(path)])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert err.startswith(f"mhalearn: error: db: {str(path)!r} is damaged") and err.count("\n") == 1, err
    assert ("no table 'results'" if damage == "no-results-table" else "malformed") in err
    assert out == ""
    assert path.read_bytes() == before
    assert not (tmp_path / "rows.csv").exists() and not (tmp_path / "figures").exists()


@pytest.mark.parametrize("command", ["plot", "export"])
def test_a_row_that_is_not_json_is_reported_as_damage_naming_the_file(tmp_path, toy, capsys, command):
    path = tmp_path / "results.db"
    _partial_results(path, 3)
    connection = sqlite3.connect(path)
    connection.execute("UPDATE results SET metrics = '{\"value\": 0.' WHERE id = 2")  # bytes overwritten in a row
    connection.commit()
    connection.close()
    before = path.read_bytes()
    out_flag = {"plot": str(tmp_path / "figures"), "export": str(tmp_path / "rows.csv")}[command]
    code = main([command, TOY, "--db", str(path), "--out", out_flag])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"mhalearn: error: db: {str(path)!r} is damaged: a stored row is not valid "
                                        "JSON") and err.count("\n") == 1, err
    assert path.read_bytes() == before and not Path(out_flag).exists()


def test_a_results_file_damaged_during_a_sweep_stops_it_at_once_with_one_line(tmp_path, toy, monkeypatch):
    path = tmp_path / "results.db"
    original = ResultStore.record
    written = []

    def record_until_damaged(self, *args, **kwargs):
        if len(written) == 2:
            raise sqlite3.DatabaseError("database disk image is malformed")
        written.append(original(self, *args, **kwargs))

    monkeypatch.setattr(ResultStore, "record", record_until_damaged)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=rf"could not store results in {str(path)!r}: the file is damaged "
                                           r"\(database disk image is malformed\)"):
        run_sweep(TOY, path, workers=1, progress=False, write_timeout=30.0)
    assert time.monotonic() - start < 20  # not retried for the write timeout: a damaged file does not heal
    assert len(stored_keys(path)) == 2


def _drop_file_privileges() -> None:
    """In the child before exec: give up root's right to ignore file permissions (CAP_DAC_*, CAP_FOWNER)."""
    if os.geteuid() != 0:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2, 3):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER
        if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP: gone from the program exec'd next
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def run_unprivileged(command: list[str], directory: Path, **env) -> subprocess.CompletedProcess:
    """Run ``command`` bound by file permissions (as root: without the capabilities that bypass them)."""
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(TESTS)]), **env}
    try:
        return subprocess.run(command, cwd=directory, env=environment, preexec_fn=_drop_file_privileges,
                              capture_output=True, text=True, timeout=120)
    except subprocess.SubprocessError as error:  # the child could not drop them: permissions cannot be tested
        pytest.skip(f"cannot run a process bound by file permissions here ({error})")


def _partial_results(path: Path, cells: int) -> None:
    with ResultStore(path) as store:
        for cell in EXPERIMENTS[TOY].cells(False)[:cells]:
            store.record(TOY, cell, {"value": 0.0})


def _unprivileged_sweep_refused(path: Path, directory: Path) -> None:
    """A sweep run bound by file permissions exits 2 with a clear message, and computes no cell."""
    marker = directory / "computed.txt"
    result = run_unprivileged(toy_cli(TOY, "toy", "sweep", TOY, "--db", str(path), "--quiet", "--workers", "1",
                                      marking=True), directory, MHALEARN_TEST_MARKER=str(marker))
    assert result.returncode == 2, result.stderr
    assert "read-only" in result.stderr and "Traceback" not in result.stderr
    assert not marker.exists()  # not a single cell was computed (and lost)
    assert len(stored_keys(path)) == 5


def test_sweep_on_a_read_only_results_file_refuses_before_computing(tmp_path, toy):
    path = tmp_path / "results.db"
    _partial_results(path, 5)
    path.chmod(0o444)
    _unprivileged_sweep_refused(path, tmp_path)


def _read_only_archive(tmp_path: Path, cells: int) -> Path:
    directory = tmp_path / "archive"
    directory.mkdir()
    path = directory / "results.db"
    _partial_results(path, cells)
    directory.chmod(0o555)
    return path


def test_plot_and_status_read_a_results_file_in_a_read_only_directory(tmp_path, toy):
    path = _read_only_archive(tmp_path, 12)
    out = tmp_path / "figures"
    result = run_unprivileged(toy_cli(TOY, "toy", "plot", TOY, "--db", str(path), "--out", str(out)),
                              tmp_path)
    assert result.returncode == 0, result.stderr
    assert "12 rows" in result.stdout and (out / "toy.txt").read_text() == "12 rows\n"
    status = run_unprivileged(toy_cli(TOY, "toy", "sweep", "--status", "--db", str(path)), tmp_path)
    assert status.returncode == 0, status.stderr
    assert TOY in status.stdout and "12 ok" in status.stdout
    assert sorted(os.listdir(path.parent)) == ["results.db"]


def test_sweep_in_a_read_only_directory_refuses_before_computing(tmp_path, toy):
    _unprivileged_sweep_refused(_read_only_archive(tmp_path, 5), tmp_path)


def _full_disk(monkeypatch):
    """Make every results file opened from now on full: SQLite may not grow it by a single page."""
    original = ResultStore.__init__

    def open_then_fill(self, *args, **kwargs):
        original(self, *args, **kwargs)
        pages = self._connection.execute("PRAGMA page_count").fetchone()[0]
        self._connection.execute(f"PRAGMA max_page_count = {pages}")

    monkeypatch.setattr(ResultStore, "__init__", open_then_fill)


def test_disk_full_during_a_sweep_stops_cleanly_and_the_sweep_resumes(tmp_path, toy, monkeypatch):
    path = tmp_path / "results.db"
    ResultStore(path).close()
    _full_disk(monkeypatch)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"could not store results .* the disk is full .* run the same command"):
        run_sweep(TOY, path, workers=1, progress=False, write_timeout=0.5)
    assert time.monotonic() - start < 30
    kept = stored_keys(path)
    assert len(kept) < 12 and integrity(path) == "ok"
    monkeypatch.undo()  # space freed
    summary = run_sweep(TOY, path, workers=1, progress=False)
    assert summary.skipped == len(kept) and summary.computed == 12 - len(kept)
    after = stored_keys(path)
    assert len(after) == len(set(after)) == 12 and set(kept) <= set(after)


def test_a_write_lock_held_at_the_start_is_reported_before_computing(tmp_path, toy):
    path = tmp_path / "results.db"
    ResultStore(path).close()
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        start = time.monotonic()
        with pytest.raises(ValueError, match=r"held the file's write lock for more than 1 s.*nothing was computed"):
            run_sweep(TOY, path, workers=1, progress=False, write_timeout=1.0)
        assert time.monotonic() - start < 10
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert run_sweep(TOY, path, workers=1, progress=False).computed == 12


def test_a_write_lock_held_during_a_sweep_stops_it_cleanly_and_it_resumes(tmp_path, toy):
    path = tmp_path / "results.db"
    ResultStore(path).close()
    locked, release = threading.Event(), threading.Event()

    def take_the_lock_after_two_rows():
        while not release.is_set():
            if len(stored_keys(path)) >= 2:
                holder = sqlite3.connect(path, isolation_level=None)
                holder.execute("BEGIN IMMEDIATE")
                locked.set()
                release.wait()
                holder.execute("ROLLBACK")
                holder.close()
                return
            time.sleep(0.02)

    thread = threading.Thread(target=take_the_lock_after_two_rows)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match=r"write lock for more than 1 s.*every row written is kept"):
            run_sweep(f"{TOY}-sleepy", path, workers=1, progress=False, write_timeout=1.0)
        assert locked.is_set()
    finally:
        release.set()
        thread.join()
    kept = stored_keys(path)
    assert 2 <= len(kept) < 16
    summary = run_sweep(f"{TOY}-sleepy", path, workers=1, progress=False)
    assert summary.computed == 16 - len(kept)
    assert len(set(stored_keys(path))) == len(stored_keys(path)) == 16


def test_a_second_coordinator_on_the_same_file_is_refused(tmp_path, toy):
    path = tmp_path / "results.db"
    first = subprocess.Popen(toy_cli(f"{TOY}-sleepy", "toy-sleepy", "sweep", f"{TOY}-sleepy", "--db", str(path),
                                     "--quiet", "--workers", "1"), start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (path.exists() and len(stored_keys(path)) >= 1):
            time.sleep(0.05)
        with pytest.raises(ValueError, match=r"another sweep is writing to .*pid \d+"):
            run_sweep(f"{TOY}-sleepy", path, workers=1, progress=False)
        os.killpg(first.pid, signal.SIGKILL)  # the lock dies with its holder, even on kill -9
    finally:
        first.wait()
    kept = stored_keys(path)
    summary = run_sweep(f"{TOY}-sleepy", path, workers=1, progress=False)
    assert summary.computed == 16 - len(kept)
    assert len(set(stored_keys(path))) == 16


def test_workers_are_capped_at_the_cores_and_cells_with_a_message(tmp_path, toy, capsys):
    code = main(["sweep", TOY, "--db", str(tmp_path / "results.db"), "--workers", "64", "--quiet"])
    out, err = capsys.readouterr()
    expected = min(len(os.sched_getaffinity(0)), 12)
    assert code == 0 and "12 computed" in out
    assert f"mhalearn: warning: workers: using {expected} worker processes instead of 64" in err


# ------------------------------------------------------------ output paths

@pytest.mark.parametrize("flag", ["--out", "--teacher-out"])
def test_learn_checks_output_paths_before_fitting(tmp_path, monkeypatch, capsys, flag):
    fits = []
    monkeypatch.setattr("mhalearn.evaluation.fit_timed", lambda *args: fits.append(args) or 0.0)
    arguments = ["learn", "--learner", "gradient", "-m", "1", "-d", "2", "-k", "2", "-n", "40", "--quiet",
                 "--out", str(tmp_path / "model.npz")]
    arguments += [flag, "/nonexistent/directory/m.npz"]
    code = main(arguments)
    err = capsys.readouterr().err
    assert code == 2 and f"{flag.lstrip('-')}: directory '/nonexistent/directory' of" in err
    assert fits == []


def test_plot_onto_an_existing_file_is_refused_before_rendering(tmp_path, toy, capsys):
    db = tmp_path / "results.db"
    _partial_results(db, 3)
    target = tmp_path / "figures"
    target.write_text("not a directory")
    code = main(["plot", TOY, "--db", str(db), "--out", str(target)])
    assert code == 2 and "out: expected a directory" in capsys.readouterr().err
    assert target.read_text() == "not a directory"


# --------------------------------------------------------------------- Dask

@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1", "tcp://127.0.0.1:99999"])
def test_an_invalid_scheduler_address_is_refused_before_the_results_file(tmp_path, toy, address):
    with pytest.raises(ValueError, match="scheduler: "):
        run_sweep(TOY, tmp_path / "results.db", backend="dask", scheduler=address, progress=False)
    assert not (tmp_path / "results.db").exists()


@pytest.mark.slow
@pytest.mark.parametrize("address", ["tcp://127.0.0.1:1", "tcp://127.0.0.1:99999"])
def test_an_invalid_scheduler_address_fails_fast(tmp_path, toy, address):
    start = time.monotonic()
    with pytest.raises(ValueError, match="scheduler: "):
        run_sweep(TOY, tmp_path / "results.db", backend="dask", scheduler=address, progress=False)
    assert time.monotonic() - start < 8


def _dask_process(kind: str, scheduler_file: Path, *extra: str) -> subprocess.Popen:
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPOSITORY), str(TESTS)])}
    module = {"scheduler": "distributed.cli.dask_scheduler", "worker": "distributed.cli.dask_worker"}[kind]
    arguments = (["--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)]
                 if kind == "scheduler" else
                 ["--scheduler-file", str(scheduler_file), "--nthreads", "1", "--no-nanny", "--no-dashboard",
                  "--host", "127.0.0.1"])
    return subprocess.Popen([sys.executable, "-m", module, *arguments, *extra], env=environment,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_dask_sweep_whose_last_worker_dies_stops_with_no_workers_and_resumes(tmp_path, toy):
    pytest.importorskip("distributed")
    scheduler_file, path = tmp_path / "scheduler.json", tmp_path / "results.db"
    scheduler = _dask_process("scheduler", scheduler_file)
    processes = [scheduler]
    try:
        _wait_for(scheduler_file.exists, 60, "the scheduler")
        address = json.loads(scheduler_file.read_text())["address"]
        processes.append(_dask_process("worker", scheduler_file))
        sweep = subprocess.Popen(toy_cli(f"{TOY}-sleepy", "toy-sleepy", "sweep", f"{TOY}-sleepy", "--db", str(path),
                                         "--quiet", "--backend", "dask", "--scheduler", address,
                                         "--worker-timeout", "2"),
                                 stderr=subprocess.PIPE, text=True, start_new_session=True)
        processes.append(sweep)
        _wait_for(lambda: path.exists() and len(stored_keys(path)) >= 2, 90, "two stored rows")
        _stop(processes[1])  # the only worker dies
        start = time.monotonic()
        _, err = sweep.communicate(timeout=60)
        assert sweep.returncode == 1 and "no workers" in err and "Traceback" not in err
        assert time.monotonic() - start < 30
        kept = stored_keys(path)
        assert 2 <= len(kept) < 16
        processes.append(_dask_process("worker", scheduler_file))
        summary = run_sweep(f"{TOY}-sleepy", path, backend="dask", scheduler=address, progress=False)
        assert summary.computed == 16 - len(kept)
        assert len(set(stored_keys(path))) == len(stored_keys(path)) == 16
    finally:
        for process in reversed(processes):
            _stop(process)


# ---------------------------------------------------- optional dependencies

def _without(monkeypatch, *modules: str) -> None:
    """Make ``import MODULE`` fail from now on, whether or not the module is installed."""
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def test_export_csv_needs_no_pandas(tmp_path, toy, capsys, monkeypatch):
    path = tmp_path / "results.db"
    run_sweep(TOY, path, workers=1, progress=False)
    with ResultStore(path) as store:
        store.record(TOY, {"a": 9, "b": "n"}, {"value": None, "phase": {"rows": 3, "span": 0.25}, "kept": True})
    _without(monkeypatch, "pandas", "pyarrow")
    out_file = tmp_path / "rows.csv"
    code = main(["export", TOY, "--db", str(path), "--format", "csv", "--out", str(out_file)])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert out == f"{TOY}: 13 rows × 22 columns written to {out_file}\n"
    with open(out_file, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 13
    assert list(rows[0])[:14] == ["experiment", "a", "b", "square", "value", "status", "error", "seconds", "host",
                                  "finished_at", "code_id", "kept", "phase.rows", "phase.span"]  # first seen first
    assert sorted(list(rows[0])[14:]) == sorted(f"provenance.{key}" for key in code_provenance())
    with ResultStore(path, readonly=True) as store:
        stored = list(store.iter_records(TOY))
    for row, record in zip(rows, stored):
        assert (int(row["a"]), row["b"], row["status"]) == (record["params"]["a"], record["params"]["b"], "ok")
        assert row["value"] == ("" if record["metrics"]["value"] is None else repr(record["metrics"]["value"]))
    assert [row["provenance.mhalearn"] for row in rows] == [mhalearn.__version__] * 12 + [""]  # the last: no sweep
    assert (rows[-1]["phase.rows"], rows[-1]["phase.span"], rows[-1]["kept"]) == ("3", "0.25", "True")
    assert rows[0]["phase.span"] == "" and rows[0]["error"] == ""


@pytest.mark.parametrize("missing", [("pandas", "pyarrow"), ("pyarrow",)])
def test_export_parquet_without_its_extra_says_how_to_install_it(tmp_path, toy, capsys, monkeypatch, missing):
    path = tmp_path / "results.db"
    _partial_results(path, 3)
    if "pandas" not in missing:  # importable, whether or not it is installed: the check stops before using it
        monkeypatch.setitem(sys.modules, "pandas", types.ModuleType("pandas"))
    _without(monkeypatch, *missing)
    out_file = tmp_path / "rows.parquet"
    code = main(["export", TOY, "--db", str(path), "--out", str(out_file)])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and not out_file.exists()
    which = "" if len(missing) == 2 else " (pyarrow not installed)"
    assert err == (f"mhalearn: error: export --format parquet needs pandas and pyarrow{which}: "
                   "python3 -m pip install -e '.[tables]'\n")


@pytest.mark.parametrize("module, call, extra, purpose", [
    ("pandas", lambda path, teacher: ResultStore(path, readonly=True).to_dataframe(), "tables",
     "ResultStore.to_dataframe needs pandas"),
    ("torch", lambda path, teacher: teacher.to_torch(), "torch", "MultiHeadAttention.to_torch needs torch"),
    ("torch", lambda path, teacher: mhalearn.MultiHeadAttention.from_torch(object()), "torch",
     "MultiHeadAttention.from_torch needs torch"),
    ("jax", lambda path, teacher: teacher.to_jax(), "jax", "MultiHeadAttention.to_jax needs jax"),
])
def test_a_missing_optional_dependency_names_its_extra_in_one_line(tmp_path, monkeypatch, module, call, extra,
                                                                   purpose):
    path = tmp_path / "results.db"
    ResultStore(path).close()
    _without(monkeypatch, module)
    with pytest.raises(ImportError) as raised:
        call(path, mhalearn.sample_teacher(1, 3, rng=0))
    assert str(raised.value) == f"{purpose}: python3 -m pip install -e '.[{extra}]'"


# ------------------------------------------------- what an output path is

def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _is_fifo(path: Path) -> bool:
    return stat.S_ISFIFO(os.lstat(path).st_mode)


@pytest.mark.parametrize("through_link", [False, True])
@pytest.mark.parametrize("flag", ["--out", "--teacher-out"])
def test_learn_refuses_a_fifo_before_fitting_and_leaves_it(tmp_path, monkeypatch, capsys, flag, through_link):
    fifo = _fifo(tmp_path / "pipe")
    given = fifo
    if through_link:
        given = tmp_path / "link"
        given.symlink_to(fifo)
    fits = []
    monkeypatch.setattr("mhalearn.evaluation.fit_timed", lambda *args: fits.append(args) or 0.0)
    arguments = ["learn", "--learner", "gradient", "-m", "1", "-d", "2", "-k", "2", "-n", "40", "--quiet",
                 "--out", str(tmp_path / "model.npz"), flag, str(given)]
    code = main(arguments)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "is a FIFO" in err and flag.lstrip("-") + ":" in err, err
    assert fits == [] and _is_fifo(fifo) and (not through_link or given.is_symlink())


def test_a_character_device_is_refused_by_looking_only(tmp_path):
    from mhalearn._files import check_regular_or_absent, node_kind

    assert node_kind("/dev/null") == "a character device"  # stat only: /dev/null is never opened
    with pytest.raises(ValueError, match=r"^out: expected .*'/dev/null' is a character device"):
        check_regular_or_absent("/dev/null", "out")
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    with pytest.raises(ValueError, match=r"leads to, '/dev/null'\) is a character device"):
        check_regular_or_absent(link, "out")


def test_save_through_a_symbolic_link_writes_its_target_and_keeps_the_link(tmp_path):
    model = mhalearn.sample_teacher(1, 3, rng=0)
    target = tmp_path / "models" / "kept.npz"
    target.parent.mkdir()
    target.write_bytes(b"an older model")
    link, dangling = tmp_path / "link.npz", tmp_path / "dangling.npz"
    link.symlink_to(target)
    dangling.symlink_to(tmp_path / "models" / "new.npz")
    for path in (link, dangling):
        model.save(path)
        assert path.is_symlink()
        np.testing.assert_array_equal(mhalearn.MultiHeadAttention.load(path).thetas, model.thetas)
    assert sorted(os.listdir(tmp_path / "models")) == ["kept.npz", "new.npz"]


def test_export_and_sweep_refuse_a_fifo_and_leave_it(tmp_path, toy, capsys):
    db = tmp_path / "results.db"
    _partial_results(db, 3)
    fifo = _fifo(tmp_path / "pipe")
    assert main(["export", TOY, "--db", str(db), "--out", str(fifo), "--format", "csv"]) == 2
    assert "out: expected a regular file or a new path" in capsys.readouterr().err
    for arguments in (["sweep", TOY, "--db", str(fifo), "--quiet", "--workers", "1"],
                      ["sweep", "--status", "--db", str(fifo)]):  # reading a FIFO would block: stat only
        assert main(arguments) == 2
        assert "db: expected a results file or a new path, " in capsys.readouterr().err
    assert _is_fifo(fifo) and not (tmp_path / "pipe.lock").exists()


def test_sweep_through_a_dangling_link_creates_the_file_it_names(tmp_path, toy):
    link = tmp_path / "results.db"
    link.symlink_to(tmp_path / "kept.db")
    run_sweep(TOY, link, workers=1, progress=False)
    assert link.is_symlink() and len(stored_keys(tmp_path / "kept.db")) == 12
    assert (tmp_path / "kept.db.lock").exists() and not (tmp_path / "results.db.lock").exists()


# ------------------------------------------------------------ a full disk

def test_a_model_that_cannot_be_written_after_the_fit_is_kept_in_the_temp_directory(tmp_path, monkeypatch,
                                                                                     capsys):
    out, spare = tmp_path / "out", tmp_path / "spare"
    out.mkdir()
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    savez = np.savez

    def full_disk_in_out(handle, **arrays):
        if Path(handle.name).parent == out:
            raise OSError(errno.ENOSPC, "No space left on device")
        savez(handle, **arrays)

    monkeypatch.setattr("mhalearn.attention.model.np.savez", full_disk_in_out)
    code = main(["learn", "--learner", "gradient", "-m", "1", "-d", "3", "-k", "2", "-n", "60", "--quiet",
                 "--out", str(out / "model.npz")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1, err
    kept = sorted(spare.glob("mhalearn-model-*.npz"))
    assert len(kept) == 1 and f"could not write {str(out / 'model.npz')!r} (No space left on device); the " \
                               f"model is kept in {kept[0]}" in err
    assert mhalearn.MultiHeadAttention.load(kept[0]).heads == 1 and os.listdir(out) == []


def test_a_file_size_limit_below_the_model_is_refused_before_fitting(tmp_path, monkeypatch, capsys):
    import resource

    fits = []
    monkeypatch.setattr("mhalearn.evaluation.fit_timed", lambda *args: fits.append(args) or 0.0)
    limits = resource.getrlimit
    monkeypatch.setattr(resource, "getrlimit",
                        lambda which: (1000, 1000) if which == resource.RLIMIT_FSIZE else limits(which))
    code = main(["learn", "--learner", "gradient", "-m", "2", "-d", "8", "-k", "2", "-n", "60", "--quiet",
                 "--out", str(tmp_path / "model.npz")])
    err = capsys.readouterr().err
    assert code == 2 and "file-size limit of 1000 bytes (ulimit -f)" in err and fits == []


def test_demo_into_a_directory_that_cannot_be_created_is_refused_before_fitting(monkeypatch, capsys):
    fits = []
    monkeypatch.setattr("mhalearn.evaluation.fit_timed", lambda *args: fits.append(args) or 0.0)
    code = main(["demo", "--quiet", "--out", "/proc/mhalearn-nope"])  # /proc's permission bits allow it
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("mhalearn: error: out: cannot write '/proc/mhalearn-nope'") and fits == []


def test_plot_on_a_full_disk_says_so_in_one_line_and_leaves_no_empty_folder(tmp_path, toy, monkeypatch, capsys):
    db = tmp_path / "results.db"
    _partial_results(db, 3)

    def full_disk(rows, out):
        out.mkdir(parents=True, exist_ok=True)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setitem(EXPERIMENTS, TOY, dataclasses.replace(EXPERIMENTS[TOY], plot=full_disk))
    code = main(["plot", TOY, "--db", str(db), "--out", str(tmp_path / "figures")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1 and "(No space left on device)" in err, err
    assert not (tmp_path / "figures").exists()


class FullDiskFile:
    """A file created (as on a full disk) but refusing its first bytes: at the flush, and again at the close,
    which flushes what the failed flush left in the buffer."""

    def __init__(self, handle):
        self._handle = handle

    def __getattr__(self, name):
        return getattr(self._handle, name)

    def flush(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    def close(self):
        self._handle.close()
        raise OSError(errno.ENOSPC, "No space left on device")


def full_disk_lock(monkeypatch):
    """The writer lock's files opened as :class:`FullDiskFile`."""
    import mhalearn.experiments.writer_lock as writer_lock

    real_open = open
    monkeypatch.setattr(writer_lock, "open", lambda path, *args, **kwargs: FullDiskFile(
        real_open(path, *args, **kwargs)), raising=False)
    return writer_lock


def test_a_lock_that_cannot_be_written_is_not_left_behind(tmp_path, monkeypatch):
    writer_lock = full_disk_lock(monkeypatch)
    with pytest.raises(ValueError, match=r"cannot write the lock file .*the disk is full.*nothing was computed"):
        writer_lock.WriterLock(tmp_path / "results.db").acquire()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("fault", ["directory", "fifo"])
def test_a_lock_that_is_not_a_file_is_named_as_what_it_is(tmp_path, toy, capsys, fault):
    lock = tmp_path / "results.db.lock"
    lock.mkdir() if fault == "directory" else os.mkfifo(lock)
    code = main(["sweep", TOY, "--db", str(tmp_path / "results.db"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    kind = "a directory" if fault == "directory" else "a FIFO"
    assert code == 2 and f"{str(lock)!r} is {kind}" in err and "read-only" not in err, err
    assert not (tmp_path / "results.db").exists()


def test_a_results_file_that_cannot_be_created_on_a_full_disk_stops_the_sweep_in_one_line(tmp_path, toy, capsys,
                                                                                         monkeypatch):
    def full_disk(path, *, replace):
        raise sqlite3.OperationalError("disk I/O error")  # what SQLite says for ENOSPC and EFBIG

    monkeypatch.setattr("mhalearn.experiments.store._create_atomically", full_disk)
    code = main(["sweep", TOY, "--db", str(tmp_path / "results.db"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"mhalearn: error: db: cannot create {str(tmp_path / 'results.db')!r}: the disk refused")
    assert not (tmp_path / "results.db").exists()
