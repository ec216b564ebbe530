"""Do random restarts rescue gradient descent on the ``dominant-head`` family?

GradientLearner with 1 and with 5 restarts on the teachers of the
``teacher-families`` cells (d = 6, k = 7, n = 2000, noiseless), seeds 10–29:
not the seeds 0–9 the README's first claim about restarts was written from.
Success = relative test error ≤ 1e-6.  Rows are appended to a JSON-lines
file as they finish, so an interrupted run resumes.

    python runs/restarts/restarts.py [--heads 2] [--seeds 10:30] [--out runs/restarts/restarts_rows.jsonl]
"""

import argparse
import json
import sys
from pathlib import Path

from mhalearn.evaluation import learn_planted
from mhalearn.experiments.families import SUCCESS_ERROR

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl, with_progress  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--seeds", default="10:30", help="first:last seed (last excluded)")
    parser.add_argument("--out", default="runs/restarts/restarts_rows.jsonl")
    args = parser.parse_args()
    first, last = (int(part) for part in args.seeds.split(":"))
    cells = [(restarts, seed) for seed in range(first, last) for restarts in (1, 5)]
    rows = load_jsonl(args.out)
    done = {(row["restarts"], row["seed"]) for row in rows if row["heads"] == args.heads}
    with open(args.out, "a") as handle:
        for restarts, seed in with_progress([cell for cell in cells if cell not in done], "restarts"):
            _, _, metrics = learn_planted("gradient", heads=args.heads, dim=6, length=7, samples=2000,
                                          family="dominant-head", seed=seed,
                                          hyperparams={"restarts": restarts})
            row = {"heads": args.heads, "restarts": restarts, "seed": seed, **metrics}
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            rows.append(row)
    print(f"\ndominant-head, m = {args.heads}, d = 6, k = 7, n = 2000, seeds {first}–{last - 1}: "
          f"success = test error <= {SUCCESS_ERROR:g}")
    for restarts in (1, 5):
        mine = [row for row in rows if row["heads"] == args.heads and row["restarts"] == restarts
                and first <= row["seed"] < last]
        wins = sorted(row["seed"] for row in mine if row["test_error"] <= SUCCESS_ERROR)
        print(f"restarts = {restarts}: {len(wins)}/{len(mine)} recovered (seeds {wins})")


if __name__ == "__main__":
    main()
