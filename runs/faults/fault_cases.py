"""The checkpoint, full-disk and bad-input families of fault cases, run as a user would, on one code tree.

    python3 runs/faults/fault_cases.py --code /path/to/tree --label after --rows runs/faults/rows.jsonl

Each case runs in a fresh temporary folder, in a subprocess with
``PYTHONPATH`` set to ``--code`` (the CLI through ``python3 -m
mhalearn.cli``), and is judged by what a user sees: ``clean`` when the
outcome is the one stated beside the case (a clear one-line refusal, a
resumed or recomputed fit equal to the fresh fit, a model kept), ``defect``
otherwise (a raw traceback, a silently different model, a lost model, a
timeout).  One JSON row per case is appended to ``--rows`` as it ends.
The full-disk cases mount a 256 KiB tmpfs (root only) and use
``ulimit -f``; they are skipped, as rows saying so, without root.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

CLI = f"{sys.executable} -m mhalearn.cli"
PY = f"{sys.executable} -c"

# Shared by the checkpoint cases: a small fit, run with and without a checkpoint.
FIT = textwrap.dedent("""
    import glob, os, pickle, sys, warnings
    import numpy as np, mhalearn
    SMALL = dict(body=mhalearn.BodySettings(refit_iterations=10, compare_routes_above=0.0),
                 search=mhalearn.SearchSettings(max_candidates=3000, refine_iter=50), random_state=3)
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(2, 8, rng=4), 12000, 3, rng=5)
    def fit(directory="kept", data=None):
        with warnings.catch_warnings(record=True) as told:
            warnings.simplefilter("always")
            fitted = mhalearn.SculptLearner(2, checkpoint=directory, **SMALL).fit(*(data or (X, Y)))
        return fitted, [w for w in told if "Checkpoint" in w.category.__name__]
    def same(a, b):
        return np.array_equal(a.model_.thetas, b.model_.thetas) and np.array_equal(a.model_.ws, b.model_.ws)
    def phase_file(phase):
        [f] = [f for f in glob.glob("kept/*/*") if os.path.basename(f).split(".")[0] == phase]
        return f
    def rewrite(phase, change):
        f = phase_file(phase)
        if f.endswith(".pickle"):
            kept = pickle.load(open(f, "rb")); change(kept)
            with open(f, "wb") as handle: pickle.dump(kept, handle)
        else:
            from mhalearn.data.phase_files import read_kept, write_kept
            old = dict(np.load(f))["checksum"]
            kept = read_kept(f); change(kept)
            with open(f, "wb") as handle: write_kept(handle, kept)
            np.savez(f, **{**dict(np.load(f)), "checksum": old})
    fresh = mhalearn.SculptLearner(2, **SMALL).fit(X, Y)
    fit()
""")

# A verdict for the edited-file cases: recomputed with one warning, and the fresh fit's model.
RECOMPUTED = textwrap.dedent("""
    try:
        again, told = fit()
    except Exception as error:
        print(f"defect: raw {type(error).__name__}: {error}"); sys.exit()
    if not same(again, fresh):
        print("defect: a model other than the fresh fit's, silently" if not told else "defect: another model")
    elif len(told) != 1:
        print(f"defect: {len(told)} checkpoint warnings, expected 1")
    else:
        print("clean")
""")


def edited(change: str) -> str:
    """The fit, ``change`` made to its kept files, the fit again, judged by :data:`RECOMPUTED`."""
    return f"{FIT}{change}\n{RECOMPUTED}"


DASK_CHANGED = textwrap.dedent("""
    import sys, numpy as np, dask.array as da, mhalearn
    from mhalearn.data import dask_data
    dask_data.in_memory_sample.__defaults__ = (2000, 1000)
    SMALL = dict(body=mhalearn.BodySettings(refit_iterations=10, compare_routes_above=0.0),
                 search=mhalearn.SearchSettings(max_candidates=3000, refine_iter=50), random_state=3)
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(2, 8, rng=4), 8000, 3, rng=5)
    if STORE:
        import zarr
        for name, array in (("X", X), ("Y", Y)):
            zarr.create_array("d.zarr", name=name, data=array, chunks=(1000, 3, 8))
        lazy = lambda: mhalearn.load_dataset("d.zarr")
    else:
        lazy = lambda: (da.from_array(X, chunks=(1000, -1, -1), name="x"),
                        da.from_array(Y, chunks=(1000, -1, -1), name="y"))
    mhalearn.SculptLearner(2, checkpoint="kept", **SMALL).fit(*lazy())
    for first, last in BLOCKS:
        if STORE:
            for name, array in (("X", X), ("Y", Y)):
                zarr.open_array("d.zarr", path=name)[first * 1000:last * 1000] = -array[first * 1000:last * 1000]
        else:
            X[first * 1000:last * 1000] *= -1; Y[first * 1000:last * 1000] *= -1
    again = mhalearn.SculptLearner(2, checkpoint="kept", **SMALL).fit(*lazy())
    fresh = mhalearn.SculptLearner(2, **SMALL).fit(*lazy())
    same = np.array_equal(again.model_.thetas, fresh.model_.thetas)
    print("clean" if same and not again.report_.resumed else
          f"defect: resumed {len(again.report_.resumed)} phases of the old data; same model as fresh: {same}")
""")

SHARDS = textwrap.dedent("""
    import numpy as np, mhalearn, os
    SMALL = dict(body=mhalearn.BodySettings(refit_iterations=10, compare_routes_above=0.0),
                 search=mhalearn.SearchSettings(max_candidates=3000, refine_iter=50), random_state=3)
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(2, 8, rng=4), 6000, 3, rng=5)
    os.mkdir("shards")
    for s in range(3):
        np.save(f"shards/X_{s}.npy", X[s * 2000:(s + 1) * 2000])
        np.save(f"shards/Y_{s}.npy", Y[s * 2000:(s + 1) * 2000])
    first = mhalearn.SculptLearner(2, checkpoint="kept", **SMALL).fit(*mhalearn.load_dataset("shards"))
    again = mhalearn.SculptLearner(2, checkpoint="kept", **SMALL).fit(*mhalearn.load_dataset("shards"))
    same = np.array_equal(again.model_.thetas, first.model_.thetas)
    print("clean" if len(again.report_.resumed) == 6 and same else
          f"defect: resumed {again.report_.resumed}, {len(os.listdir('kept'))} checkpoint directories")
""")


def one_line_refusal(code: int = 2, *needles: str):
    """Clean: exit ``code`` and one line on stderr holding every needle (after argparse's usage line, which
    its errors print first)."""
    def check(rc, out, err):
        lines = [line for line in err.strip().splitlines() if not line.startswith("usage: ")]
        if rc == code and len(lines) == 1 and all(needle in err for needle in needles):
            return "clean"
        return f"defect: exit {rc}, {len(lines)} stderr lines: {(lines or [''])[-1][:200]}"
    return check


def printed(rc, out, err):
    last = (out.strip().splitlines() or [""])[-1]
    if last == "clean" or last.startswith("defect"):
        return last
    return f"defect: exit {rc}: {(err.strip().splitlines() or [''])[-1][:200]}"


def raises(kind: str, *needles: str) -> str:
    return (f"\n    print('clean' if isinstance(error, {kind}) and all(n in str(error) for n in {list(needles)!r}) "
            f"else f'defect: {{type(error).__name__}}: {{str(error)[:200]}}')")


def python_raises(body: str, kind: str, *needles: str) -> str:
    return (f"import numpy as np, mhalearn\nfrom mhalearn._memory import MemoryBudgetError\ntry:\n    {body}\n"
            f"    print('defect: no error')\nexcept BaseException as error:{raises(kind, *needles)}")


LEARN = f"{CLI} learn --learner gradient -m 1 -d 3 -k 2 -n 60 --quiet"
# The model's folder taken away (or a FIFO or folder put at its path) as the fit ends, as a user did
# during the fit: the CLI's fit is wrapped to do it then.
TAKEN_AWAY = textwrap.dedent("""
    import os, shutil, sys, tempfile
    tempfile.tempdir = os.path.abspath("spare"); os.mkdir("spare"); os.mkdir("sub")
    import mhalearn.evaluation as evaluation
    from mhalearn.cli import main
    fit_timed = evaluation.fit_timed
    def fitted_then(*a, **k):
        result = fit_timed(*a, **k); FAULT; return result
    evaluation.fit_timed = fitted_then
    code = main(["learn", "--learner", "sculpt", "-m", "1", "-d", "6", "-n", "3000", "--quiet", "--out", "sub/m.npz"])
    kept = os.listdir("spare")
    print("clean" if code != 0 and len(kept) == 1 else f"defect: exit {code}, model kept: {kept}")
""")

GRID_DROPPED = ('[full]\nlearner = "gradient"\nfamily = "random"\nheads = 1\ndim = 4\nlength = 4\n'
                'samples = [1]\nnoise = 0.0\nseed = 0\n')
GRID_SMALL = "[full]\nheads = 1\ndim = 8\nlength = 3\nsamples = 500\nseed = 0\n"
GRID_HUGE = f"[full]\nheads = 1\ndim = 8\nlength = 3\nsamples = [{2**63 - 1}]\nseed = 0\n"
FULL = ("mkdir -p full && mount -t tmpfs -o size=256k tmpfs full && "
        "(dd if=/dev/zero of=full/fill bs=4k 2>/dev/null; true) && ")
PLANTED = ('import pathlib\nP = type("P", (), {"__reduce__": lambda s: (pathlib.Path("ran").touch, ())})\n'
           'open(phase_file("1_crude_sum"), "wb").write(pickle.dumps({"result": P(), "rng_state": 0, "seconds": 0, '
           '"data": 0}))')
CHANGED_FLOAT = ('w = fresh.report_.crude_sum.w_sum; c = w.copy(); c[0, 0] *= 2; f = phase_file("1_crude_sum")\n'
                 'b = open(f, "rb").read(); open(f, "wb").write(b.replace(w.tobytes(), c.tobytes()))')


def dask_changed(store: bool, blocks) -> str:
    return DASK_CHANGED.replace("STORE", str(store)).replace("BLOCKS", repr(blocks))


def new_field(phase: str, field: str, value: str) -> str:
    return edited(f'rewrite("{phase}", lambda k: k.__setitem__("{field}", {value}))')


def cases(root: bool) -> list[tuple]:
    """(family, name, "py" or "sh", Python code or shell command, timeout seconds, judge) of every case."""
    broadcast = "X = np.broadcast_to(np.ones((1, 4, 12)), (10**9, 4, 12)); mhalearn.SculptLearner(2).fit(X, X)"
    dataset = "X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(1, 6, rng=0), 200, 3, rng=0); "
    listed = [
        # ---- checkpoint
        ("checkpoint", "named Dask arrays, blocks 5-6 of 8 changed", "py", dask_changed(False, [(5, 7)]), 300, printed),
        ("checkpoint", "zarr store edited in place, blocks 5-6 of 8", "py", dask_changed(True, [(5, 7)]), 300, printed),
        ("checkpoint", "named Dask arrays, blocks 1-2 and 4-6 changed", "py", dask_changed(False, [(1, 3), (4, 7)]),
         300, printed),
        ("checkpoint", ".npy shards loaded twice resume", "py", SHARDS, 300, printed),
        ("checkpoint", "rng_state a dict of wrong content", "py",
         new_field("1_crude_sum", "rng_state", '{"bit_generator": "PCG64", "state": "x"}'), 300, printed),
        ("checkpoint", "rng_state an int", "py", new_field("2_sculpt", "rng_state", "3"), 300, printed),
        ("checkpoint", "seconds text", "py", new_field("3_refined_sum", "seconds", '"soon"'), 300, printed),
        ("checkpoint", "seconds NaN", "py", new_field("3_refined_sum", "seconds", 'float("nan")'), 300, printed),
        ("checkpoint", "seconds negative", "py", new_field("4_sculpt", "seconds", "-1.0"), 300, printed),
        ("checkpoint", "result replaced by text", "py", new_field("4_sculpt", "result", '"x"'), 300, printed),
        ("checkpoint", "None for the span basis", "py", edited(
            'import dataclasses\nrewrite("4_span", lambda k: k.__setitem__("result", '
            'dataclasses.replace(k["result"], basis=None)))'), 300, printed),
        ("checkpoint", "a float of phase 1 changed in the file", "py", edited(CHANGED_FLOAT), 300, printed),
        ("checkpoint", "a truncated phase file", "py", edited(
            'f = phase_file("4_span"); b = open(f, "rb").read(); open(f, "wb").write(b[:len(b) // 2])'), 300, printed),
        ("checkpoint", "a planted pickle runs no code", "py", edited(PLANTED).replace(
            'print("clean")', 'print("defect: the planted code ran" if os.path.exists("ran") else "clean")'),
         300, printed),
        # ---- full disk, file-size limits, outputs taken away
        ("full-disk", "sweep on a full disk", "sh",
         FULL + f"{CLI} sweep sculpt-vs-m --quick --db full/a.db --quiet", 120,
         one_line_refusal(2, "the disk is full")),
        ("full-disk", "learn: model onto a full disk", "sh", FULL + f"{LEARN} --out full/m.npz", 120,
         one_line_refusal(2, "full/m.npz")),
        ("full-disk", "demo under ulimit -f 8", "sh", f"ulimit -f 8; {CLI} demo --quiet --out d", 300,
         one_line_refusal(2, "file-size limit")),
        ("full-disk", "output folder removed during the fit", "py",
         TAKEN_AWAY.replace("FAULT", 'shutil.rmtree("sub")'), 300, printed),
        ("full-disk", "FIFO created at the output during the fit", "py",
         TAKEN_AWAY.replace("FAULT", 'os.mkfifo("sub/m.npz")'), 300, printed),
        ("full-disk", "folder created at the output during the fit", "py",
         TAKEN_AWAY.replace("FAULT", 'os.mkdir("sub/m.npz")'), 300, printed),
        # ---- bad input
        ("bad-input", "sample_teacher(10**9, 12)", "py",
         python_raises("mhalearn.sample_teacher(10**9, 12)", "MemoryBudgetError", "heads"), 60, printed),
        ("bad-input", "sample_teacher(1, 10**6)", "py",
         python_raises("mhalearn.sample_teacher(1, 10**6)", "MemoryBudgetError", "dim"), 60, printed),
        ("bad-input", "k x k scratch: learn -k 100000", "sh",
         f"{CLI} learn --learner gradient -m 1 -d 4 -k 100000 -n 1000 --quiet", 120,
         one_line_refusal(2, "memory budget")),
        ("bad-input", "fit on a broadcast 10^9-sequence array", "py",
         python_raises(broadcast, "MemoryBudgetError", "X:"), 60, printed),
        ("bad-input", "grid whose cells are all dropped", "sh",
         f"printf '{GRID_DROPPED}' > g.toml && {CLI} sweep error-vs-samples --db a.db --grid g.toml --quiet", 60,
         one_line_refusal(2, "raise samples")),
        ("bad-input", "samples = [2**63 - 1]", "sh",
         f"printf '{GRID_HUGE}' > g.toml && {CLI} sweep sculpt-vs-m --db a.db --grid g.toml --quiet", 120,
         one_line_refusal(2, "samples")),
        ("bad-input", "hard-linked results file", "sh",
         f"{PY} 'from mhalearn.experiments.store import ResultStore; ResultStore(\"a.db\").__enter__()' && "
         f"ln a.db b.db && printf '{GRID_SMALL}' > g.toml && "
         f"{CLI} sweep sculpt-vs-m --db b.db --grid g.toml --quiet", 120, one_line_refusal(2, "hard links")),
        ("bad-input", "heads = 10**9", "sh", f"{CLI} learn --learner sculpt -m 1000000000 -n 1000 --quiet", 60,
         one_line_refusal(2, "heads:")),
        ("bad-input", "NaN in X on SculptLearner", "py", python_raises(
            dataset + "X[3, 1, 2] = np.nan; mhalearn.SculptLearner(1).fit(X, Y)", "ValueError", "finite"), 60, printed),
        ("bad-input", "inf in X on MomentLearner", "py", python_raises(
            dataset + "X[3, 1, 2] = np.inf; mhalearn.MomentLearner(1).fit(X, Y)", "ValueError", "finite"), 60, printed),
        ("bad-input", "--grid naming a FIFO", "sh",
         f"mkfifo g.toml && {CLI} sweep sculpt-vs-m --db a.db --grid g.toml --quiet", 60, one_line_refusal(2, "FIFO")),
        ("bad-input", "--grid naming a folder", "sh",
         f"mkdir g.toml && {CLI} sweep sculpt-vs-m --db a.db --grid g.toml --quiet", 60,
         one_line_refusal(2, "is a directory")),
        ("bad-input", "sweep --bogus", "sh", f"{CLI} sweep --bogus", 60, one_line_refusal(2, "--bogus")),
        ("bad-input", "learn -k 1 (refused before too)", "sh", f"{CLI} learn -k 1 --quiet", 60,
         one_line_refusal(2, "k >= 2")),
        ("bad-input", "learn -m 0 (refused before too)", "sh", f"{CLI} learn -m 0 --quiet", 60,
         one_line_refusal(2, "heads")),
    ]
    return [case for case in listed if root or not case[3].startswith(FULL)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", required=True, help="the code tree to run (its PYTHONPATH)")
    parser.add_argument("--label", required=True, help="the name of this run in the rows, e.g. before, after")
    parser.add_argument("--rows", type=Path, default=Path(__file__).with_name("rows.jsonl"))
    parser.add_argument("--only", action="append", default=None,
                        help="run the cases whose name holds this text (repeatable)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "-C", args.code, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    env = {**os.environ, "PYTHONPATH": str(Path(args.code).resolve()), "NUMBA_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    counts: dict = {}
    for family, name, kind, payload, timeout, judge in cases(os.geteuid() == 0):
        if args.only and not any(text in name for text in args.only):
            continue
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            if kind == "py":
                Path(folder, "case.py").write_text(payload, encoding="utf-8")
            command = f"{sys.executable} case.py" if kind == "py" else payload
            try:
                done = subprocess.run(["bash", "-c", command], cwd=folder, env=env, capture_output=True, text=True,
                                      timeout=timeout)
                verdict = judge(done.returncode, done.stdout, done.stderr)
            except subprocess.TimeoutExpired:
                verdict = f"defect: still running after {timeout} s (no refusal up front)"
            finally:
                subprocess.run(["umount", os.path.join(folder, "full")], capture_output=True)
        row = {"label": args.label, "commit": commit, "family": family, "case": name,
               "outcome": "clean" if verdict == "clean" else "defect", "detail": verdict,
               "seconds": round(time.perf_counter() - start, 1)}
        with open(args.rows, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
        counts.setdefault(family, [0, 0])[verdict != "clean"] += 1
        print(f"{family:<10} {row['outcome']:<7} {name}: {verdict[:160]}", flush=True)
    for family, (clean, defects) in counts.items():
        print(f"{args.label} ({commit}) {family}: {clean} clean, {defects} defects")


if __name__ == "__main__":
    main()
