"""Side-by-side learner benchmark (issue 4): sculpt vs gradient vs moment.

For every registered teacher family and m ∈ {1, 2, 3}: each learner's
success rate (relative test error ≤ 1e-6), median test error and median wall
time, printed as one table with a row per (family, m, learner).  Rows are
appended to a JSON-lines file as they finish, so an interrupted run resumes.

    python bench/learners.py [--quick] [--seeds 4] [--families random,peaked]
"""

import argparse
import json
import time

import numpy as np
from tqdm import tqdm

import mhalearn
from _common import load_jsonl, median_of

LEARNER_NAMES = ("sculpt", "gradient", "moment")
SEED_OFFSET = 20_000  # teachers the tests never use


def run_cell(family, heads, seed, learner, dim, length, samples):
    fam = mhalearn.get_family(family)
    teacher = fam.build(heads, dim, np.random.default_rng(SEED_OFFSET + seed))
    n = fam.samples(heads, dim, length) if fam.samples else samples
    rng = np.random.default_rng(SEED_OFFSET + 31 * seed + heads)
    X, Y = mhalearn.make_dataset(teacher, n, length, law=fam.law, rng=rng)
    X_test = mhalearn.draw_inputs(fam.law, 2000, length, dim, rng=rng)
    start = time.perf_counter()
    model = mhalearn.make_learner(learner, heads, random_state=seed).fit(X, Y).model_
    return {"family": family, "heads": heads, "seed": seed, "learner": learner, "samples": n,
            "seconds": time.perf_counter() - start,
            "test_error": mhalearn.relative_error(model, teacher, X_test)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="family 'random', m <= 2, 2 seeds (< 5 min)")
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--families", default=None, help="comma-separated (default: all registered)")
    parser.add_argument("--dim", type=int, default=6)
    parser.add_argument("--length", type=int, default=7)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--out", default=None, help="JSON-lines file of rows (resumable)")
    args = parser.parse_args()
    families = ["random"] if args.quick else (args.families.split(",") if args.families
                                              else list(mhalearn.TEACHER_FAMILIES))
    heads_grid = (1, 2) if args.quick else (1, 2, 3)
    seeds = 2 if args.quick else args.seeds
    out = args.out or ("bench/learners_quick.jsonl" if args.quick else "bench/learners_rows.jsonl")
    for family in families:
        mhalearn.get_family(family)  # unknown names list the valid ones
    cells = [(f, m, s, name) for f in families for m in heads_grid for s in range(seeds) for name in LEARNER_NAMES]
    rows = load_jsonl(out)
    done = {(r["family"], r["heads"], r["seed"], r["learner"]) for r in rows}
    with open(out, "a") as handle:
        for cell in tqdm([c for c in cells if c not in done], desc="learners", unit="fit"):
            row = run_cell(*cell, args.dim, args.length, args.samples)
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            rows.append(row)
    print(f"\nd = {args.dim}, k = {args.length}, n = {args.samples} unless the family sets n; "
          f"success = relative test error <= 1e-6; {seeds} seeds")
    print(f"{'family':<12} {'m':>2} {'learner':<9} {'success':>8} {'median error':>13} {'median s':>9}")
    for family in families:
        for m in heads_grid:
            for name in LEARNER_NAMES:
                sel = [r for r in rows if (r["family"], r["heads"], r["learner"]) == (family, m, name)
                       and r["seed"] < seeds]
                if not sel:
                    continue
                ok = sum(r["test_error"] <= 1e-6 for r in sel)
                print(f"{family:<12} {m:>2} {name:<9} {f'{ok}/{len(sel)}':>8} "
                      f"{median_of(sel, 'test_error'):13.2e} {median_of(sel, 'seconds'):9.1f}")


if __name__ == "__main__":
    main()
