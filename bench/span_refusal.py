"""When the body refuses: its estimated span error against the true one, and the route chosen, at m = 2.

For each shape (d, k, n) and seed, plants a random teacher with
``evaluation.plant_instance`` (m = 2), fits
``SculptLearner(2, refine="none")`` (phases 5–6 on a small net: the route is
chosen in phase 4, before them) watched by a :class:`mhalearn.TeacherObserver`,
and computes our moment route's span on the same data when the body was used
(``evaluation.compare_moment_route``).  Prints per fit the body's span
distance, its bootstrap estimate, the moment route's distance, the route
chosen, whether the chosen route's span is the closer one and whether a body
span ≤ 0.1 was refused; then the two shares the issue asks for.  Rows are
appended to ``--out`` (JSON lines) as they finish; a rerun skips them.

    python bench/span_refusal.py [--seeds 0 1 2 3 4] [--out runs/span_refusal.jsonl] [--quick]
"""

import argparse
import json
import os

import numpy as np

from _common import load_jsonl, with_progress
from mhalearn import SculptLearner
from mhalearn.evaluation import TeacherObserver, plant_instance
from mhalearn.evaluation.comparisons import compare_moment_route

SHAPES = ((14, 5, 60_000), (10, 6, 100_000), (12, 4, 100_000))
TARGET = 0.1


def fit_row(dim, length, samples, seed):
    teacher, X, Y, _ = plant_instance(heads=2, dim=dim, length=length, samples=samples, seed=seed)
    observer = TeacherObserver(teacher)
    learner = SculptLearner(2, refine="none", max_candidates=2000, random_state=seed).fit(X, Y, callback=observer)
    span = learner.report_.span
    moment = observer.span_distance("moment")
    if moment is None:
        moment = compare_moment_route(X, Y, 2, teacher, np.random.default_rng(seed))["moment_distance"]
    return {"dim": dim, "length": length, "samples": samples, "seed": seed, "route": learner.report_.route,
            "body_distance": observer.span_distance("body"), "estimated_error": span.estimated_error,
            "moment_distance": moment, "refused": span.refused, "kept_rows": span.kept_rows, "rows": span.rows,
            "kept_precision": observer.figure("span", "kept_precision"),
            "refined_w_sum_error": observer.figure("refined_sum", "refined_w_sum_error")}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default="runs/span_refusal.jsonl")
    parser.add_argument("--quick", action="store_true", help="seed 0 only")
    args = parser.parse_args()
    if args.quick:
        args.seeds = [0]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    done = {(r["dim"], r["length"], r["samples"], r["seed"]): r for r in load_jsonl(args.out)}
    cells = [(d, k, n, s) for d, k, n in SHAPES for s in args.seeds]
    for cell in with_progress([c for c in cells if c not in done], "span refusal"):
        row = fit_row(*cell)
        done[cell] = row
        with open(args.out, "a") as handle:
            handle.write(json.dumps(row) + "\n")
    rows = [done[c] for c in cells]
    print("d  k  n       seed | body dist | estimate | moment dist | route  | chosen closer | body ≤ 0.1 refused")
    closer = wrongly_refused = 0
    for r in rows:
        body, moment = r["body_distance"], r["moment_distance"]
        chosen, other = (body, moment) if r["route"] == "body" else (moment, body)
        ok = other is None or chosen <= other
        bad = r["route"] != "body" and body is not None and body <= TARGET
        closer += ok
        wrongly_refused += bad
        fmt = lambda x: "   -  " if x is None else f"{x:.3f}"
        print(f"{r['dim']:<2} {r['length']:<2} {r['samples']:<7} {r['seed']:>4} |   {fmt(body)}   |  "
              f"{fmt(r['estimated_error'])}   |    {fmt(moment)}    | {r['route']:<6} | {'yes' if ok else 'NO':>13} | "
              f"{'YES' if bad else 'no':>5}")
    print(f"chosen route's span ≤ the other's: {closer}/{len(rows)} ({closer / len(rows):.0%}); "
          f"body spans ≤ {TARGET} refused: {wrongly_refused}")


if __name__ == "__main__":
    main()
