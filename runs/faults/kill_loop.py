"""Kill -9 loop: nothing lost, nothing duplicated, no file refused (issue 12 acceptance).

Two phases, each a number of trials that kill a process with SIGKILL at a
random moment and then check the results file:

``creation``
    A child process opens a new results file (the first milliseconds of a
    sweep: file creation, schema, WAL; 10–50 ms) and is killed a random
    0–40 ms after it starts doing so; trials continue until ``--creation``
    kills have landed before the creation finished.  Then the file must be
    absent or open as a results file that a sweep can write into.
``sweep``
    A child runs ``run_sweep`` (2 local workers) over a toy grid of 200
    cells of 50 ms and is killed, with its workers, a random 0–20 s after
    it starts (a whole sweep takes about 15 s on two loaded cores: imports,
    worker start, cells); trials continue until ``--sweep`` kills have landed
    before the sweep ended by itself.  After each kill the file must
    open, every stored row must have the metrics its cell determines, no key
    may be stored twice, and no row seen after an earlier kill may be
    missing.  When a file is complete the next trials start a new file.

Finally every file is resumed to completion and compared with the grid.

    python runs/faults/kill_loop.py                    # 50 + 50 kills (≈ 15 min on 2 cores)
    python runs/faults/kill_loop.py --creation 5 --sweep 5 --out /tmp/kill.jsonl

Each trial is appended to ``--out`` (JSON lines) as it ends; the counts are
printed at the end.  Run it on a snapshot of the code (e.g. a ``git clone``):
editing the package while it runs changes the code id, and the children's
sweeps would then, rightly, refuse to mix rows.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
EXPERIMENT = "kill-loop"


# ------------------------------------------------------- the toy experiment

def kill_loop_cells(grid: dict) -> list[dict]:
    return [{"cell": index, "pause": grid["pause"]} for index in range(grid["cells"])]


def kill_loop_run_cell(cell: dict) -> dict:
    """Metrics determined by the cell (checked after every kill); sleeps ``pause`` seconds."""
    time.sleep(cell["pause"])
    return expected_metrics(cell)


def expected_metrics(cell: dict) -> dict:
    rng = np.random.default_rng(cell["cell"])
    return {"value": float(rng.standard_normal()), "index": cell["cell"]}


def kill_loop_plot(rows, out_dir):  # pragma: no cover - not plotted
    return []


def register(grid_file: Path) -> None:
    from mhalearn.experiments import EXPERIMENTS, Experiment

    EXPERIMENTS[EXPERIMENT] = Experiment(EXPERIMENT, "kill -9 loop", kill_loop_cells, kill_loop_run_cell,
                                         kill_loop_plot, grid_file=grid_file)


# ------------------------------------------------------------------ children

def child(mode: str, db: str, grid_file: str) -> None:
    """Run in the killed process: create the store (``creation``) or sweep (``sweep``)."""
    from mhalearn.experiments.runner import run_sweep
    from mhalearn.experiments.store import ResultStore

    register(Path(grid_file))
    print("ready", flush=True)
    if mode == "creation":
        ResultStore(db).close()
        print("created", flush=True)
    else:
        run_sweep(EXPERIMENT, db, workers=2, progress=False)
        print("finished", flush=True)


def start_child(mode: str, db: Path, grid_file: Path) -> subprocess.Popen:
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import kill_loop; "
            f"kill_loop.child({mode!r}, {str(db)!r}, {str(grid_file)!r})")
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the coordinator and its worker processes
    except ProcessLookupError:
        pass
    process.wait()


# ------------------------------------------------------------------- checks

def inspect(db: Path) -> dict:
    """Open the file as a sweep would and read its rows: refused?, keys, wrong rows, duplicates."""
    from mhalearn.experiments.store import ResultStore

    if not db.exists():
        return {"exists": False, "refused": None, "keys": [], "wrong": 0, "duplicates": 0}
    try:
        with ResultStore(db) as store:
            records = list(store.iter_records(EXPERIMENT))
    except (ValueError, sqlite3.Error) as error:
        return {"exists": True, "refused": str(error), "keys": [], "wrong": 0, "duplicates": 0}
    keys = [record["cell_key"] for record in records]
    wrong = sum(record["metrics"] != expected_metrics(record["params"]) for record in records)
    return {"exists": True, "refused": None, "keys": keys, "wrong": wrong, "duplicates": len(keys) - len(set(keys))}


def integrity(db: Path) -> str:
    connection = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return connection.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creation", type=int, default=50,
                        help="kills that land during file creation (trials whose kill comes after it are not counted)")
    parser.add_argument("--sweep", type=int, default=50, help="kills that land during sweeps")
    parser.add_argument("--creation-window", type=float, default=0.04,
                        help="kill a random 0..this many seconds after creation starts")
    parser.add_argument("--sweep-window", type=float, default=20.0,
                        help="kill a random 0..this many seconds after a sweep starts")
    parser.add_argument("--cells", type=int, default=200, help="cells of the toy grid")
    parser.add_argument("--pause", type=float, default=0.05, help="seconds per cell")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=HERE / "kill_loop.jsonl", help="JSON lines, one per trial")
    parser.add_argument("--dir", type=Path, default=None, help="where the results files go (default: a temp dir)")
    args = parser.parse_args()

    sys.path.insert(0, str(HERE))
    directory = args.dir or Path(tempfile.mkdtemp(prefix="mhalearn-kill-loop-"))
    directory.mkdir(parents=True, exist_ok=True)
    grid_file = directory / "grid.toml"
    grid_file.write_text(f"[full]\ncells = {args.cells}\npause = {args.pause}\n")
    register(grid_file)
    rng = random.Random(args.seed)
    totals = {"kills": 0, "refused": 0, "lost": 0, "duplicated": 0, "wrong": 0, "not_ok": 0, "child_errors": 0}
    seen: dict[Path, set] = {}
    out = args.out.open("a")

    def log(entry: dict) -> None:
        out.write(json.dumps(entry) + "\n")
        out.flush()

    def account(db: Path, state: dict, entry: dict) -> None:
        keys = set(state["keys"])
        entry.update(exists=state["exists"], refused=state["refused"], rows=len(keys),
                     lost=len(seen.get(db, set()) - keys), duplicated=state["duplicates"], wrong=state["wrong"])
        totals["refused"] += state["refused"] is not None
        totals["lost"] += entry["lost"]
        totals["duplicated"] += state["duplicates"]
        totals["wrong"] += state["wrong"]
        seen[db] = seen.get(db, set()) | keys

    # Phase 1: kills while a results file is being created.
    creation_kills, creation_trial = 0, 0
    while creation_kills < args.creation and creation_trial < 5 * args.creation:
        trial, creation_trial = creation_trial, creation_trial + 1
        db = directory / f"creation-{trial}.db"
        process = start_child("creation", db, grid_file)
        process.stdout.readline()  # "ready": imports done, creation starts now
        delay = rng.uniform(0.0, args.creation_window)
        time.sleep(delay)
        kill(process)
        created = "created" in process.stdout.read()
        creation_kills += not created
        entry = {"phase": "creation", "trial": trial, "delay_s": round(delay, 4), "created_before_kill": created}
        state = inspect(db)
        account(db, state, entry)
        if state["refused"] is None:  # accepted: a sweep can write into it
            from mhalearn.experiments.store import ResultStore

            with ResultStore(db) as store:
                entry["writable"] = store.record(EXPERIMENT, {"cell": 0, "pause": args.pause},
                                                 expected_metrics({"cell": 0}))
            totals["not_ok"] += not entry["writable"]
        log(entry)

    # Phase 2: kills during sweeps; a file that completes is replaced by a new one.
    sweep_files = [directory / "sweep-0.db"]
    sweep_kills, trial, horizon = 0, 0, args.sweep_window
    while sweep_kills < args.sweep and trial < 3 * args.sweep:
        db = sweep_files[-1]
        if len(set(inspect(db)["keys"])) == args.cells:
            db = directory / f"sweep-{trial}.db"
            sweep_files.append(db)
        start = time.monotonic()
        process = start_child("sweep", db, grid_file)
        delay = rng.uniform(0.0, horizon)
        try:
            process.wait(timeout=delay)
            finished = True
        except subprocess.TimeoutExpired:
            finished = False
        kill(process)
        sweep_kills += not finished
        entry = {"phase": "sweep", "trial": trial, "file": db.name, "delay_s": round(delay, 3),
                 "finished_before_kill": finished, "elapsed_s": round(time.monotonic() - start, 3)}
        if finished and process.returncode != 0:  # a sweep that ended by itself must have succeeded
            entry["child_error"] = process.stderr.read().strip().splitlines()[-1:]
            totals["child_errors"] += 1
        account(db, inspect(db), entry)
        log(entry)
        trial += 1

    # Resume every sweep file to completion and check it against the grid.
    from mhalearn.experiments.runner import run_sweep

    for db in sweep_files:
        run_sweep(EXPERIMENT, db, workers=2, progress=False)
        state = inspect(db)
        entry = {"phase": "resume", "file": db.name, "integrity": integrity(db)}
        account(db, state, entry)
        entry["complete"] = len(set(state["keys"])) == args.cells
        totals["not_ok"] += entry["integrity"] != "ok" or not entry["complete"]
        log(entry)
    totals["kills"] = creation_kills + sweep_kills
    files = [directory / f"creation-{number}.db" for number in range(creation_trial)] + sweep_files
    leftovers = sorted(path.name for path in directory.glob("*.creating*"))
    print(f"kills: {totals['kills']} ({creation_kills} during file creation in {creation_trial} trials, {sweep_kills} "
          f"during sweeps in {trial} sweep trials over {len(sweep_files)} files); files refused: "
          f"{totals['refused']}; rows lost: {totals['lost']}; rows duplicated: {totals['duplicated']}; rows with "
          f"wrong metrics: {totals['wrong']}; files not writable, complete or intact after resume: "
          f"{totals['not_ok']}; sweeps that ended by themselves with an error: {totals['child_errors']}; "
          f"temporary files left by killed creations: {len(leftovers)} "
          "(removed by a later creation in the directory after a minute)")
    log({"phase": "totals", **totals, "creation_kills": creation_kills, "sweep_kills": sweep_kills,
         "files": len(files), "leftover_temporaries": len(leftovers)})
    failures = ("refused", "lost", "duplicated", "wrong", "not_ok", "child_errors")
    return 0 if not any(totals[key] for key in failures) else 1


if __name__ == "__main__":
    sys.exit(main())
