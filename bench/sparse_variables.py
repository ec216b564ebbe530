"""Sparse variable creation (Edelman, Goel, Kakade & Zhang): the acceptance figures of issue 14.

1. For the attention student on 3-sparse AND and majority: samples-to-95 %
   at T = 16 and at T = 4096 (median over 10 seeds, 90 % bootstrap interval;
   per seed by bisection on nested training sets to a factor 2^(1/4)) and
   their ratio, against the acceptance "within 3.5×" (log T predicts 3,
   √T predicts 16).
2. Memory and time of the largest cell of the sweep: one fit and the scoring
   at T = 4096, n = 16 384, in a fresh process (peak resident set size), for
   both students, against the 2 GiB budget.

The cells are those of the ``sparse-variables`` experiment with its frozen
hyper-parameters, computed here from scratch; with ``--db`` the rows of a
finished sweep are read instead (``mhalearn sweep sparse-variables --db ...``).

    python bench/sparse_variables.py                       # computes 40 cells (about half an hour at one core)
    python bench/sparse_variables.py --db results/sparse.db
    python bench/sparse_variables.py --memory-only
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn.experiments import get_experiment
from mhalearn.experiments.sparse_variables import run_sparse_variables_cell
from mhalearn.sparse_variables.growth import bootstrap_median, bootstrap_median_ratio

ACCEPTANCE_RATIO = 3.5
FUNCTIONS = ("and", "majority")

_MEMORY_PROBE = """
import json, resource, sys, time
from mhalearn.experiments import sparse_variables as experiment
student_name = sys.argv[1]
cell = dict(function="majority", student=student_name, sparsity=3, length=4096, seed=0,
            **experiment.FROZEN_HYPERPARAMETERS[student_name])
task = experiment.make_task("majority", sparsity=3, length=4096, seed=0)
X, y = experiment.training_set(task, 0, 16384)
X_test, y_test = experiment.held_out_set(task, 0)
start = time.perf_counter()
student = experiment.make_student(cell).fit(X, y)
fit = time.perf_counter() - start
train, test = student.score(X, y), student.score(X_test, y_test)
print(json.dumps(dict(student=student_name, fit_seconds=fit, train=train, test=test,
                      peak_mib=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)))
"""


def acceptance_rows(db: Path | None) -> list[dict]:
    """Rows of the attention student on AND and majority at the smallest and largest T of the full grid."""
    experiment = get_experiment("sparse-variables")
    lengths = (min(experiment.grid().table["lengths"]), max(experiment.grid().table["lengths"]))
    wanted = [cell for cell in experiment.cells() if cell["student"] == "attention"
              and cell["function"] in FUNCTIONS and cell["length"] in lengths]
    if db is not None:
        from mhalearn.experiments.store import ResultStore, cell_key

        with ResultStore(db, readonly=True) as store:
            stored = {cell_key("sparse-variables", {k: row[k] for k in wanted[0]}): row
                      for row in store.rows("sparse-variables") if all(k in row for k in wanted[0])}
        rows = [stored[cell_key("sparse-variables", cell)] for cell in wanted
                if cell_key("sparse-variables", cell) in stored]
        print(f"{len(rows)} of {len(wanted)} cells read from {db}")
        return rows
    rows = []
    for index, cell in enumerate(wanted):
        rows.append({**cell, **run_sparse_variables_cell(cell)})
        print(f"\r{index + 1}/{len(wanted)} cells", end="", flush=True)
    print()
    return rows


def report_acceptance(rows: list[dict]) -> None:
    lengths = sorted({row["length"] for row in rows})
    low, high = lengths[0], lengths[-1]
    for function in FUNCTIONS:
        values = {length: [np.inf if row["samples_to_target"] is None else row["samples_to_target"]
                           for row in rows if row["function"] == function and row["length"] == length]
                  for length in (low, high)}
        if not all(values.values()):
            continue
        small, large = bootstrap_median(values[low]), bootstrap_median(values[high])
        ratio, lo, hi, _ = bootstrap_median_ratio(values[high], values[low])
        verdict = "within" if ratio <= ACCEPTANCE_RATIO else "NOT within"
        print(f"{function:>8}, attention: samples-to-95% T={low}: {small[0]:g} [{small[1]:g}, {small[2]:g}]  "
              f"T={high}: {large[0]:g} [{large[1]:g}, {large[2]:g}]  ratio {ratio:.2f} [{lo:.2f}, {hi:.2f}] "
              f"({len(values[low])} seeds) -> {verdict} {ACCEPTANCE_RATIO}x "
              f"(log T predicts {np.log(high) / np.log(low):.2f}x, sqrt T {np.sqrt(high / low):.0f}x)")
        seeds = sorted(zip([row["seed"] for row in rows if row["function"] == function and row["length"] == high],
                           values[high]))
        print(f"{'':>10}per seed at T={high}: {[int(v) if np.isfinite(v) else 'not reached' for _, v in seeds]}")


def report_memory() -> None:
    env = dict(os.environ, NUMBA_NUM_THREADS=os.environ.get("NUMBA_NUM_THREADS", "1"))
    for student in ("attention", "mlp"):
        start = time.perf_counter()
        output = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, student], capture_output=True, text=True,
                                env=env, check=True).stdout
        result = json.loads(output.strip().splitlines()[-1])
        verdict = "fits" if result["peak_mib"] < 2048 else "DOES NOT fit"
        print(f"T=4096, n=16384, {student:>9}: peak RSS {result['peak_mib']:.0f} MiB ({verdict} in 2 GiB), "
              f"fit {result['fit_seconds']:.1f} s, process {time.perf_counter() - start:.1f} s; "
              f"train acc {result['train']:.3f}, test acc {result['test']:.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, help="read the cells from a finished sparse-variables sweep")
    parser.add_argument("--memory-only", action="store_true", help="only the memory and time of the largest cell")
    args = parser.parse_args()
    print(f"load: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores")
    if not args.memory_only:
        start = time.perf_counter()
        report_acceptance(acceptance_rows(args.db))
        print(f"({time.perf_counter() - start:.0f} s)")
    report_memory()


if __name__ == "__main__":
    main()
