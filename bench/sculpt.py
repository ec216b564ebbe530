"""Acceptance figures of SculptLearner (issue 3), on teachers the tests do not use.

For m = 1, 2, 3 (d = k = 8, n = 2000, noiseless Boolean data, default
teachers): success rate (relative test error ≤ 1e-6), median fit time, and
each phase's figures (crude and refined W_Σ error, certified rows, span
distance of the body and moment routes, validation error entering and
leaving refinement, candidates scored and net time).  Then, with label noise
σ = 0.01, the test error against noiseless labels as n grows.

Rows are appended to a JSON-lines file as they finish, so an interrupted run
resumes where it stopped.

    python bench/sculpt.py [--quick] [--seeds 20] [--out bench/sculpt_rows.jsonl]
"""

import argparse
import json
import time

import numpy as np
from tqdm import tqdm

import mhalearn
from _common import load_jsonl, median_of

SEED_OFFSET = 10_000  # teachers the tests never use


def run_one(heads, seed, samples, noise, dim=8, length=8):
    teacher = mhalearn.sample_teacher(heads, dim, rng=SEED_OFFSET + seed)
    rng = np.random.default_rng(SEED_OFFSET + 7919 * seed + samples)
    X, Y = mhalearn.make_dataset(teacher, samples, length, noise=noise, rng=rng)
    X_test = mhalearn.boolean_inputs(4000, length, dim, rng=rng)
    start = time.perf_counter()
    learner = mhalearn.SculptLearner(heads, random_state=seed).fit(X, Y, teacher=teacher)
    seconds = time.perf_counter() - start
    r = learner.report_
    rounds = r["sculpt"].get("rounds") or [{}]
    return {
        "heads": heads, "seed": seed, "samples": samples, "noise": noise, "seconds": seconds,
        "test_error": mhalearn.relative_error(learner.model_, teacher, X_test),
        "crude_w_sum_error": r["crude_sum"].get("w_sum_error"),
        "refined_w_sum_error": rounds[-1].get("w_sum_error"),
        "certified_rows": r["sculpt"].get("certified_rows", 0),
        "certification_precision": r["sculpt"].get("certification_precision"),
        "teacher_feasible_fraction": r["sculpt"].get("teacher_feasible_fraction"),
        "body_distance": r["span"].get("body", {}).get("distance"),
        "moment_distance": r["span"].get("moment", {}).get("distance"),
        "chosen_route": r["net"].get("chosen_route"),
        "val_entering": r["refine"]["val_entering"], "val_leaving": r["refine"]["val_leaving"],
        "candidates": r["net"]["candidates"], "net_seconds": r["net"]["seconds"],
        "refine_seconds": r["refine"]["seconds"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, m <= 2, small noise grid")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", default="bench/sculpt_rows.jsonl")
    args = parser.parse_args()
    seeds = 3 if args.quick else args.seeds
    heads_grid = (1, 2) if args.quick else (1, 2, 3)
    noise_grid = (500, 2000) if args.quick else (500, 1000, 2000, 4000, 8000)
    noise_seeds = 2 if args.quick else 3
    cells = [(m, s, 2000, 0.0) for m in heads_grid for s in range(seeds)]
    cells += [(1, s, n, 0.01) for n in noise_grid for s in range(noise_seeds)]
    rows = load_jsonl(args.out)
    done = {(r["heads"], r["seed"], r["samples"], r["noise"]) for r in rows}
    todo = [cell for cell in cells if cell not in done]
    with open(args.out, "a") as handle:
        for cell in tqdm(todo, desc="sculpt bench", unit="fit"):
            row = run_one(*cell)
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            rows.append(row)

    print(f"\nNoiseless, d = k = 8, n = 2000: success = relative test error <= 1e-6 ({seeds} seeds)")
    header = ("m", "success", "median s", "crude WΣ", "refined WΣ", "certified", "body dist",
              "moment dist", "route body/moment", "val in", "val out", "candidates", "net s", "refine s")
    print(" | ".join(header))
    for m in heads_grid:
        sel = [r for r in rows if r["heads"] == m and r["noise"] == 0.0 and r["seed"] < seeds]
        ok = sum(r["test_error"] <= 1e-6 for r in sel)
        routes = f"{sum(r['chosen_route'] == 'body' for r in sel)}/{sum(r['chosen_route'] == 'moment' for r in sel)}"
        print(" | ".join([str(m), f"{ok}/{len(sel)}", f"{median_of(sel, 'seconds'):.1f}",
                          f"{median_of(sel, 'crude_w_sum_error'):.3f}", f"{median_of(sel, 'refined_w_sum_error'):.3f}",
                          f"{median_of(sel, 'certified_rows'):.0f}", f"{median_of(sel, 'body_distance'):.3f}",
                          f"{median_of(sel, 'moment_distance'):.3f}", routes, f"{median_of(sel, 'val_entering'):.2e}",
                          f"{median_of(sel, 'val_leaving'):.2e}", f"{median_of(sel, 'candidates'):.0f}",
                          f"{median_of(sel, 'net_seconds'):.2f}", f"{median_of(sel, 'refine_seconds'):.2f}"]))
    print("\nLabel noise σ = 0.01, m = 1: test error against noiseless labels (median over seeds)")
    for n in noise_grid:
        sel = [r for r in rows if r["noise"] == 0.01 and r["samples"] == n and r["seed"] < noise_seeds]
        print(f"n = {n:5d}: {median_of(sel, 'test_error'):.3e}  ({len(sel)} seeds)")


if __name__ == "__main__":
    main()
