"""Does the sparse-variables log-T claim hold on held-out seeds?  Samples-to-95 % at T = 64, 256, 2048.

The attention student of the ``sparse-variables`` experiment (frozen AdamW
hyper-parameters) on 3-sparse majority and AND, and the parity search on
3-sparse parity, at seeds the sweep's grid (0–9), the tuning (100–101) and
issue 37 (101–102) never used.  Per (g, T, seed), the smallest n on the
doubling grid …, 16, 32, 64, … at which the kept student reaches 95 % test
accuracy (``bisect_samples`` with ``per_octave = 1``: a factor 2 of
resolution; the parity search, seconds a fit, to a factor 2^(1/4)), starting
near the expected answer and halving while it passes.
With ``--restarts R`` each n fits R students (own initialisation and batch
order) and keeps the one with the smallest training loss
(``best_restart``): the test set never chooses.  A seed that does not reach
95 % by the cap counts as "> cap" (infinite), never dropped: medians sort it
above every number, and a bootstrap ratio whose numerator median is > cap is
infinite.

Rows, one per fit (every restart, every n probed), are appended to a
JSON-lines file as they finish, so an interrupted run resumes where it
stopped; ``--report`` prints the tables from the rows without fitting.

    python runs/sparse-heldout/sparse_heldout.py [--seeds 201:211] [--restarts 1]
        [--out runs/sparse-heldout/sparse_heldout.jsonl]
    python runs/sparse-heldout/sparse_heldout.py --report [--out runs/sparse-heldout/sparse_heldout.jsonl]
"""

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn.experiments import sparse_variables as experiment
from mhalearn.sparse_variables.growth import bisect_samples, bootstrap_median, bootstrap_median_ratio

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl  # noqa: E402

LENGTHS = (64, 256, 2048)
#: (g, student) series, in the order they run; the parity search first (seconds a seed).
SERIES = (("parity", "parity-search"), ("majority", "attention"), ("and", "attention"))
MAX_SAMPLES = 1024
FUNCTIONS = tuple(function for function, _ in SERIES)


def search_range(student: str, length: int) -> tuple[int, int, int]:
    """(start, min_samples, per_octave) of the search: near the grid's medians (docs/sparse_variables.md).

    The parity search takes seconds a fit and is bisected to a factor 2^(1/4);
    a fit of the attention student at T = 2048 takes over a minute, so it
    stays on the doubling grid (a factor 2).
    """
    if student == "parity-search":
        return 8, 4, 4
    return (32, 8, 1) if length < 1024 else (64, 16, 1)


def base_cell(function: str, student: str, length: int, seed: int) -> dict:
    cell = dict(function=function, student=student, sparsity=3, length=length, seed=seed)
    return {**cell, **experiment.FROZEN_HYPERPARAMETERS.get(student, {})}


def fit_row(cell: dict, samples: int, restart: int, data) -> dict:
    """Fit one student (one restart) on the first ``samples`` examples; the row records its losses and accuracies."""
    task, cache, (X_test, y_test) = data
    X, y = experiment.training_set(task, cell["seed"], samples, cache)
    student = experiment.make_student(cell, restart)
    start = time.perf_counter()
    student.fit(X, y)
    seconds = time.perf_counter() - start
    loss = experiment.training_loss(student, X, y) if hasattr(student, "loss_curve_") else None
    return dict(function=cell["function"], student=cell["student"], length=cell["length"], seed=cell["seed"],
                samples=samples, restart=restart, train_loss=loss, train_accuracy=student.score(X, y),
                test_accuracy=student.score(X_test, y_test), fit_seconds=round(seconds, 3))


def _key(row: dict) -> tuple:
    return row["function"], row["student"], row["length"], row["seed"], row["samples"], row["restart"]


def samples_to_target(fits: dict, cell: dict, restarts: int, fit=None) -> tuple[float, list]:
    """Samples-to-95 % of the best-of-``restarts`` student (by training loss), from ``fits`` or by ``fit``.

    ``fits`` maps a row's key to the row; ``fit(samples, restart)`` computes a
    missing row (None: a missing row raises KeyError, for reports).
    """
    start, low, per_octave = search_range(cell["student"], cell["length"])

    def accuracy(samples: int) -> float:
        rows = []
        for restart in range(restarts):
            key = (cell["function"], cell["student"], cell["length"], cell["seed"], samples, restart)
            if key not in fits:
                if fit is None:
                    raise KeyError(key)
                fits[key] = fit(samples, restart)
            rows.append(fits[key])
        chosen = experiment.best_restart([row["train_loss"] or 0.0 for row in rows]) if restarts > 1 else 0
        return rows[chosen]["test_accuracy"]

    return bisect_samples(accuracy, target=experiment.TARGET_ACCURACY, start=start, min_samples=low,
                          max_samples=MAX_SAMPLES, per_octave=per_octave)


def run(seeds, restarts: int, out: str, parity_attention: bool, functions=FUNCTIONS) -> None:
    fits = {_key(row): row for row in load_jsonl(out)}
    series = [(function, student) for function, student in SERIES if function in functions]
    cheap = [(function, student) for function, student in series if student == "parity-search"]
    plan = [(function, student, length, seed) for function, student in cheap for seed in seeds for length in LENGTHS]
    plan += [(function, student, length, seed) for seed in seeds for function, student in series
             if (function, student) not in cheap for length in LENGTHS]
    if parity_attention:
        plan += [("parity", "attention", LENGTHS[0], seed) for seed in seeds]
    with open(out, "a") as handle:
        for index, (function, student, length, seed) in enumerate(plan):
            cell = base_cell(function, student, length, seed)
            task = experiment.make_task(function, sparsity=3, length=length, seed=seed)
            data = (task, {}, experiment.held_out_set(task, seed))

            def fit(samples, restart):
                row = fit_row(cell, samples, restart, data)
                handle.write(json.dumps(row) + "\n")
                handle.flush()
                return row

            found, probes = samples_to_target(fits, cell, restarts if student != "parity-search" else 1, fit)
            print(f"[{index + 1}/{len(plan)}] {function:>8} {student:>13} T={length:<5} seed {seed}: "
                  f"samples-to-95% {found:g}  probes {[(n, round(a, 3)) for n, a in probes]}", flush=True)


def _show(value, low=None) -> str:
    if not math.isfinite(value):
        return f"> {MAX_SAMPLES}"
    return f"≤ {value:g}" if low is not None and value <= low else f"{value:g}"


def report(out: str, restarts: int) -> None:
    fits = {_key(row): row for row in load_jsonl(out)}
    hours = sum(row['fit_seconds'] for row in fits.values()) / 3600
    print(f"{len(fits)} fits in {out}, {hours:.2f} h of fitting; "
          f"best of {restarts} restart(s) by training loss; attention on the doubling grid (factor 2); "
          f"'> {MAX_SAMPLES}' = not reached "
          f"(censored, sorts above every number), '≤ n' = passes at the smallest n probed")
    series = sorted({(row["function"], row["student"]) for row in fits.values()}, key=lambda s: SERIES.index(s)
                    if s in SERIES else len(SERIES))
    for function, student in series:
        seeds = sorted({row["seed"] for row in fits.values()
                        if (row["function"], row["student"]) == (function, student)})
        values, complete = {}, []
        for seed in seeds:
            per_length = {}
            for length in LENGTHS:
                try:
                    per_length[length] = samples_to_target(fits, base_cell(function, student, length, seed),
                                                           restarts if student != "parity-search" else 1)[0]
                except KeyError:
                    pass
            values[seed] = per_length
            if len(per_length) == len(LENGTHS):
                complete.append(seed)
        lengths = [length for length in LENGTHS if any(length in values[seed] for seed in seeds)]
        print(f"\n{function}, {student}: samples to 95 % test accuracy per seed ({len(complete)} seeds complete)")
        print("  seed " + "".join(f"{'T=' + str(length):>9}" for length in lengths))
        for seed in seeds:
            print(f"  {seed:>4} " + "".join(
                f"{_show(values[seed][length], search_range(student, length)[1]) if length in values[seed] else '—':>9}"
                for length in lengths))
        if not complete:
            continue
        columns = {length: [values[seed][length] for seed in complete] for length in lengths}
        medians = {length: bootstrap_median(columns[length]) for length in lengths}
        print("  median " + "".join(f"{_show(m[0]):>9}" for m in medians.values())
              + "   [90 % bootstrap: " + ", ".join(f"T={length} [{_show(m[1])}, {_show(m[2])}]"
                                                   for length, m in medians.items()) + "]")
        for length in lengths:
            reached = [n for n in (2 ** k for k in range(2, 11))]
            print(f"  T={length:<5} fraction of seeds reached by n: "
                  + "  ".join(f"{n}: {np.mean([v <= n for v in columns[length]]):.1f}" for n in reached))
        low, high = lengths[0], lengths[-1]
        ratio, lo, hi, left_out = bootstrap_median_ratio(columns[high], columns[low])

        def fmt(r):
            return "inf (not reached)" if math.isinf(r) else f"{r:.2f}"

        print(f"  growth T={low} → {high}: {fmt(ratio)} [90 % bootstrap {fmt(lo)}, {fmt(hi)}]"
              f"{f' ({left_out} replicates with both medians not reached left out)' if left_out else ''}; "
              f"log T predicts {math.log(high) / math.log(low):.2f}, √T {math.sqrt(high / low):.2f}")
    rows = list(fits.values())
    print("\nevery fit's success (test accuracy ≥ 95 %) by n, all seeds and restarts probed (the doubling search "
          "probes each seed only up to its first success, so these rates are of the n's it reached):")
    for function, student in series:
        for length in LENGTHS:
            subset = [row for row in rows
                      if (row["function"], row["student"], row["length"]) == (function, student, length)]
            if subset:
                ns = sorted({row["samples"] for row in subset})
                cells = []
                for n in ns:
                    at = [row["test_accuracy"] >= experiment.TARGET_ACCURACY for row in subset if row["samples"] == n]
                    cells.append(f"{n}: {sum(at)}/{len(at)}")
                print(f"  {function:>8} {student:>13} T={length:<5} " + "  ".join(cells))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="201:211", help="first:last seed (last excluded)")
    parser.add_argument("--restarts", type=int, default=1, help="students fitted per n, the best training loss kept")
    parser.add_argument("--out", default="runs/sparse-heldout/sparse_heldout.jsonl")
    parser.add_argument("--parity-attention", action="store_true",
                        help=f"also the attention student on parity at T = {LENGTHS[0]} (after the rest)")
    parser.add_argument("--functions", default=",".join(FUNCTIONS),
                        help="comma-separated functions g to fit (default all: %(default)s)")
    parser.add_argument("--report", action="store_true", help="only print the tables from the rows in --out")
    args = parser.parse_args()
    if args.restarts < 1:
        parser.error(f"--restarts: expected an integer >= 1, received {args.restarts}")
    if not args.report:
        first, last = (int(part) for part in args.seeds.split(":"))
        print(f"load: {os.getloadavg()[0]:.2f} (1-min average), {os.cpu_count()} cores", flush=True)
        functions = tuple(args.functions.split(","))
        if not set(functions) <= set(FUNCTIONS):
            parser.error(f"--functions: expected names among {list(FUNCTIONS)}, received {args.functions!r}")
        run(range(first, last), args.restarts, args.out, args.parity_attention, functions)
    report(args.out, args.restarts)


if __name__ == "__main__":
    main()
