"""What watching a fit costs the learner: stored fit time with and without a teacher observer.

``mhalearn.evaluation.fit_timed`` fits a learner with a
:class:`mhalearn.TeacherObserver` when it is given the teacher and stores the
learner's own time (the observer's is kept apart).  For SculptLearner at
m = 2, d = 12, k = 4, n = 100 000 (planted by ``evaluation.plant_instance``,
seeds 0..S−1), each seed is fitted R times with and R times without the
teacher, alternating, and the script prints per seed the best stored time of
each (the least disturbed by other load), their ratio, the observer's own
time and whether the fitted layers are bitwise equal.  One JSON line per
seed in ``--out`` (a rerun skips the seeds it holds; ``--report`` prints
their table and fits nothing).

    python runs/observer-cost/observer_cost.py [--seeds 3] [--repeats 2] [--samples 100000]
        [--out runs/observer-cost/observer_cost.jsonl]
                                  [--report]
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from mhalearn import SculptLearner
from mhalearn.evaluation import fit_timed, plant_instance

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl, markdown_table  # noqa: E402


def measure(seed: int, repeats: int, samples: int) -> dict:
    """``repeats`` fits with and ``repeats`` without the teacher, alternating; the figures of one seed."""
    teacher, X, Y, _ = plant_instance(heads=2, dim=12, length=4, samples=samples, seed=seed)
    times, observers, layers = {True: [], False: []}, [], []
    # Alternate with and without, so a drift in machine load falls on both.
    for watched in [True, False] * repeats:
        learner = SculptLearner(2, random_state=seed)
        seconds, observer = fit_timed(learner, X, Y, teacher if watched else None)
        times[watched].append(seconds)
        observers += [observer] if watched else []
        layers.append(learner.model_)
    same = all(np.array_equal(layer.thetas, layers[0].thetas) and np.array_equal(layer.ws, layers[0].ws)
               for layer in layers)
    return {"seed": seed, "repeats": repeats, "samples": samples, "with_seconds": min(times[True]),
            "without_seconds": min(times[False]), "observer_seconds": max(observer.seconds for observer in observers),
            "bitwise_equal": same}


def report(rows) -> str:
    """The seeds as one Markdown table, and the ratios' median and maximum."""
    ratios = [row["with_seconds"] / row["without_seconds"] for row in rows]
    table = markdown_table(
        ("seed", f"best stored fit time with the teacher observer (of {rows[0]['repeats']})", "without", "ratio",
         "the observer's own time", "fitted layers bitwise equal"),
        ([row["seed"], f"{row['with_seconds']:.2f} s", f"{row['without_seconds']:.2f} s", f"{ratio:.3f}",
          f"{row['observer_seconds']:.2f} s", "yes" if row["bitwise_equal"] else "NO"]
         for row, ratio in zip(rows, ratios)))
    return table + f"\n\nratio with / without: median {np.median(ratios):.3f}, max {np.max(ratios):.3f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--samples", type=int, default=100_000)
    parser.add_argument("--out", default="runs/observer-cost/observer_cost.jsonl",
                        help="JSON lines, one per seed (resumable)")
    parser.add_argument("--report", action="store_true", help="print the table of the rows in --out and fit nothing")
    args = parser.parse_args()
    wanted = [(seed, args.repeats, args.samples) for seed in range(args.seeds)]
    rows = {(row["seed"], row["repeats"], row["samples"]): row for row in load_jsonl(args.out)}
    for key in [] if args.report else [key for key in wanted if key not in rows]:
        rows[key] = measure(*key)
        with open(args.out, "a") as handle:
            handle.write(json.dumps(rows[key]) + "\n")
    print(report([rows[key] for key in wanted if key in rows]))


if __name__ == "__main__":
    main()
