"""Side-by-side learner benchmark (issue 4): sculpt vs gradient vs moment.

For every registered teacher family and m ∈ {1, 2, 3}: each learner's
success rate (relative test error ≤ 1e-6), median test error and median wall
time, printed as one table with a row per (family, m, learner); the last two
columns are medians over the failed seeds of the largest cosine between two
learned heads and of max‖Ŵ_i‖/max‖W_i‖ (merged heads: cosine near 1, W
inflated).  The cells are those of the ``teacher-families`` experiment
(d = 6, k = 7, n = 2000 unless the family sets n).  Rows are appended to a
JSON-lines file as they finish, so an interrupted run resumes; ``--report``
prints the table of the rows already there and fits nothing.

    python bench/learners.py [--quick] [--seeds 10] [--families random,dominant-head] [--out runs/learners.jsonl]
                             [--report]
"""

import argparse
import json
import math

from _common import load_jsonl, markdown_table, with_progress

import mhalearn
from mhalearn.experiments import get_experiment
from mhalearn.experiments.families import (
    SUCCESS_ERROR,
    run_family_cell,
    summarize_families,
)

CELL_KEYS = ("learner", "family", "heads", "dim", "length", "samples", "noise", "seed")


def identity(row):
    """The cell a row (or cell) stands for, hashable."""
    return tuple(row[key] for key in CELL_KEYS)


def failure_figure(value: float, spec: str) -> str:
    """A median over the failed seeds, or a dash where every seed succeeded (the median of none is nan)."""
    return "—" if math.isnan(value) else format(value, spec)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="families 'random' and 'dominant-head', m <= 2, 2 seeds (< 5 min)")
    parser.add_argument("--seeds", type=int, default=None, help="first N seeds of the grid (default: all 10)")
    parser.add_argument("--families", default=None, help="comma-separated (default: all registered)")
    parser.add_argument("--out", default=None, help="JSON-lines file of rows (resumable; default runs/learners.jsonl)")
    parser.add_argument("--report", action="store_true", help="print the table of the rows in --out and fit nothing")
    args = parser.parse_args()
    cells = get_experiment("teacher-families").cells(args.quick)
    if args.families:
        wanted = args.families.split(",")
        for family in wanted:
            mhalearn.get_family(family)  # unknown names list the valid ones
        cells = [cell for cell in cells if cell["family"] in wanted]
    if args.seeds is not None:
        cells = [cell for cell in cells if cell["seed"] < args.seeds]
    out = args.out or ("bench/learners_quick.jsonl" if args.quick else "runs/learners.jsonl")
    rows = load_jsonl(out)
    done = {identity(row) for row in rows}
    todo = [] if args.report else [cell for cell in cells if identity(cell) not in done]
    for cell in with_progress(todo, "learners"):
        row = {**cell, **run_family_cell(cell)}
        with open(out, "a") as handle:
            handle.write(json.dumps(row) + "\n")
        rows.append(row)
    wanted = {identity(cell) for cell in cells}
    rows = [row for row in rows if identity(row) in wanted]
    first = cells[0]
    print(f"\nd = {first['dim']}, k = {first['length']}, n = {first['samples']} unless the family sets n; "
          f"noiseless; success = relative test error <= {SUCCESS_ERROR:g}")
    summary = summarize_families(rows)
    print(markdown_table(("family", "m", "learner", "success", "median error", "median s", "failed: head cosine",
                          "failed: W inflation"),
                         ([entry["family"], entry["heads"], entry["learner"], f"{entry['successes']}/{entry['seeds']}",
                           f"{entry['median_error']:.2e}", f"{entry['median_seconds']:.1f}",
                           failure_figure(entry["failed_head_cosine"], ".3f"),
                           failure_figure(entry["failed_w_inflation"], ".1f")]
                          for entry in summary)))
    learners = sorted({entry["learner"] for entry in summary})
    for family in dict.fromkeys(entry["family"] for entry in summary):
        cells = {(entry["heads"], entry["learner"]): entry for entry in summary if entry["family"] == family}
        print(f"\nsuccesses on {family}:\n")
        print(markdown_table(["m", *learners], (
            [heads] + [f"{cells[heads, learner]['successes']}/{cells[heads, learner]['seeds']}"
                       if (heads, learner) in cells else "—" for learner in learners]
            for heads in sorted({heads for heads, _ in cells}))))


if __name__ == "__main__":
    main()
