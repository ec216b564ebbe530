"""SculptLearner's acceptance figures (issue 11), on teachers the tests and the tuning never used.

Part A — the regime where the body works (d = 12, k = 4, ‖Θ_i‖_F = 2,
noiseless, n = 100 000, m = 1 and 2): per seed, the route chosen, the body's
and the moment route's span distance, the share of K*'s constraints the true
heads satisfy, Ŵ_Σ before and after refinement and which refit moved it, the
relative test error of the paper's output (``least_squares_model_``,
``refine="none"``) and after our L-BFGS polish, and the time of the body
phases (1–4) against the moment route on the same data.  The teacher's
figures come from a :class:`mhalearn.TeacherObserver`; the moment route and
K*'s minimum-norm point are comparison runs beside the fit, with their own
generators and times (the fit is the same without them).

Part B — d = k = 8, n = 2000, m = 1, 2, 3: success (test error ≤ 1e-6) and
the route that won (the body refuses at d ≤ k: agreement rows cannot be
detected).

Part C — the held-out certificate of phase 6 over every fit of A and B: the
share of fits whose true test error exceeds ε̂ (must be ≤ δ = 0.05) and the
median ratio ε̂ / true error.

Hyper-parameters are SculptLearner's defaults, chosen on development
teachers (seeds 500–505 of ``sample_teacher``), but for ``--net-slab``
(the net's slab around the body's hull; ``none``: the whole ball); the
teachers here are seeded 10 000 + seed.  Rows are appended to a JSON-lines file as they finish, so an
interrupted run resumes where it stopped; ``--report`` prints the tables of
the rows already there (for the seeds, parts and ``--net-slab`` asked for)
and fits nothing.

    python bench/sculpt.py [--quick] [--seeds 10] [--parts AB] [--net-slab 0.05] [--out runs/sculpt.jsonl] [--report]
"""

import argparse
import json
import time

import numpy as np
from _common import load_jsonl, markdown_table, median_of, with_progress

import mhalearn
from mhalearn.evaluation import compare_moment_route
from mhalearn.learners.chen_li import CertifiedRefit
from mhalearn.learners.report import Phase, Route

SEED_OFFSET = 10_000  # teachers the tests and the tuning never use
TEST_SAMPLES = 4000


def run_one(part, heads, seed, samples, dim, length, offset=SEED_OFFSET, net_slab=0.05):
    teacher = mhalearn.sample_teacher(heads, dim, rng=offset + seed)
    rng = np.random.default_rng(offset + 7919 * seed + samples)
    X, Y = mhalearn.make_dataset(teacher, samples, length, rng=rng)
    X_test = mhalearn.boolean_inputs(TEST_SAMPLES, length, dim, rng=rng)
    # The teacher watches from outside; K*'s minimum-norm point and the moment route are comparisons
    # with their own generators and times, never the learner's.
    observer = mhalearn.TeacherObserver(teacher, compare_min_norm=True)
    start = time.perf_counter()
    learner = mhalearn.SculptLearner(heads, search=mhalearn.SearchSettings(net_slab=net_slab), random_state=seed)
    learner.fit(X, Y, callback=observer)
    seconds = time.perf_counter() - start
    moment = compare_moment_route(X, Y, heads, teacher, np.random.default_rng([offset, seed, 1]))
    report = learner.report_
    certified = next((step for step in (report.refined_sum.steps if report.refined_sum else ())
                      if isinstance(step, CertifiedRefit)), None)
    final_body = report.sculpt[-1] if report.sculpt else None
    return {
        "part": part, "heads": heads, "seed": seed, "samples": samples, "dim": dim, "length": length,
        "seconds": seconds, "learner_seconds": report.total_seconds, "observer_seconds": observer.seconds,
        "test_error": mhalearn.relative_error(learner.model_, teacher, X_test),
        "test_error_least_squares": mhalearn.relative_error(learner.least_squares_model_, teacher, X_test),
        "bound": report.selection.certificate["bound"],
        "bound_least_squares": report.selection.certificate_least_squares["bound"],
        "route": report.route, "refused": None if report.span is None else report.span.refused,
        "body_distance": observer.span_distance(Route.BODY), "moment_distance": moment["moment_distance"],
        "min_norm_distance": observer.figure(Phase.SPAN, "min_norm_distance"),
        "spectral_gap": None if report.span is None else report.span.spectral_gap,
        "feasible": observer.figure(Phase.SCULPT, "teacher_feasible_fraction"),
        "precision": observer.figure(Phase.SCULPT, "precision"),
        "agreement_rows": None if final_body is None else final_body.accepted_rows,
        "crude_w_sum_error": observer.figure(Phase.CRUDE_SUM, "w_sum_error"),
        "refined_w_sum_error": observer.figure(Phase.REFINED_SUM, "refined_w_sum_error"),
        "moved_by": None if report.refined_sum is None else report.refined_sum.moved_by,
        "certified_rows": None if certified is None else certified.certified,
        "body_seconds": report.body_phases().seconds if report.route == Route.BODY else None,
        "moment_seconds": moment["moment_seconds"],
        "candidates": report.net.candidates, "net_slab": net_slab, "net_shape": report.net.shape,
        "net_resolution": report.net.resolution,
    }


def fraction(rows, test) -> str:
    return f"{sum(1 for r in rows if test(r))}/{len(rows)}"


def report_part_a(rows, seeds):
    print(f"\nA. d = 12, k = 4, ‖Θ_i‖_F = 2, noiseless, n = 100 000 ({seeds} seeds); medians over the seeds\n")
    header = ("m", "span from the body", "body's span distance", "moment route's",
              "true heads satisfy ≥ 99 % of K\\*'s constraints", "agreement-row precision", "Ŵ_Σ crude → refined",
              "Ŵ_Σ moved by; rows the paper's refit certified", "K\\*'s minimum-norm point's span distance",
              "paper's output ≤ 1e-2 (median)", "polished ≤ 1e-6",
              "time of body phases 1–4 / moment route (median ratio per fit)")
    table = []
    for m in (1, 2):
        sel = [r for r in rows if r["part"] == "A" and r["heads"] == m and r["seed"] < seeds]
        if not sel:
            continue
        body = median_of(sel, "body_distance")
        movers = "; ".join(sorted({r["moved_by"] for r in sel if r["moved_by"]}))
        certified = sorted({r["certified_rows"] for r in sel if r["certified_rows"] is not None})
        ratios = [r["body_seconds"] / r["moment_seconds"] for r in sel if r["body_seconds"] and r["moment_seconds"]]
        table.append([m, fraction(sel, lambda r: r["route"] == Route.BODY),
                      "< 0.001" if body < 0.001 else f"{body:.3f}", f"{median_of(sel, 'moment_distance'):.3f}",
                      fraction(sel, lambda r: (r["feasible"] or 0) >= 0.99), f"{median_of(sel, 'precision'):.2f}",
                      f"{100 * median_of(sel, 'crude_w_sum_error'):.0f} % → "
                      f"{100 * median_of(sel, 'refined_w_sum_error'):.2f} %",
                      f"{movers}; {', '.join(map(str, certified)) or '—'} certified",
                      f"{median_of(sel, 'min_norm_distance'):.2f}",
                      f"{fraction(sel, lambda r: r['test_error_least_squares'] <= 1e-2)} "
                      f"({median_of(sel, 'test_error_least_squares'):.1e})",
                      fraction(sel, lambda r: r["test_error"] <= 1e-6),
                      f"{median_of(sel, 'body_seconds'):.1f} s / {median_of(sel, 'moment_seconds'):.1f} s "
                      f"({np.median(ratios) if ratios else float('nan'):.2f})"])
    print(markdown_table(header, table))


def report_part_b(rows, seeds):
    print(f"\nB. d = k = 8, n = 2000, noiseless ({seeds} seeds): success = relative test error ≤ 1e-6\n")
    table = []
    for m in (1, 2, 3):
        sel = [r for r in rows if r["part"] == "B" and r["heads"] == m and r["seed"] < seeds]
        if not sel:
            continue
        refusals = sorted({(r["refused"] or "").split("(")[0].strip() for r in sel if r["refused"]})
        table.append([m, fraction(sel, lambda r: r["test_error"] <= 1e-6),
                      f"{sum(r['route'] == Route.BODY for r in sel)}/{sum(r['route'] == Route.MOMENT for r in sel)}",
                      f"{median_of(sel, 'learner_seconds'):.1f}", "; ".join(refusals)])
    print(markdown_table(("m", "success", "route body / moment", "median fit s", "the body's refusals"), table))


def report_certificates(rows):
    print("\nC. Certificate of phase 6 (δ = 0.05): fits whose true test error exceeds ε̂, "
          "median ε̂ / true error, median ε̂\n")
    table = []
    for label, error_key, bound_key in (("paper's output (refine='none')", "test_error_least_squares",
                                         "bound_least_squares"), ("polished (refine='lbfgs')", "test_error", "bound")):
        parts = [(name, [r for r in rows if r["part"] == name]) for name in ("A", "B")]
        parts = [(name, sel) for name, sel in parts if sel]
        for name, sel in parts + ([("A and B", rows)] if len(parts) == 2 else []):
            if sel:
                table.append([label, name, f"{sum(r[error_key] > r[bound_key] for r in sel)}/{len(sel)}",
                              f"{np.median([r[bound_key] / max(r[error_key], 1e-300) for r in sel]):.3g}",
                              f"{np.median([r[bound_key] for r in sel]):.3g}"])
    print(markdown_table(("output", "part", "true error > ε̂", "median ε̂ / true error", "median ε̂"), table))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds in A, 3 in B")
    parser.add_argument("--seeds", type=int, default=10, help="seeds in A (B uses twice as many)")
    parser.add_argument("--parts", default="AB", help="which parts to run (A, B or AB)")
    parser.add_argument("--seed-offset", type=int, default=SEED_OFFSET,
                        help="teachers are seeded offset + seed (500: the development teachers)")
    parser.add_argument("--net-slab", type=lambda text: None if text == "none" else float(text), default=0.05,
                        help="SculptLearner's net_slab ('none': the whole ball)")
    parser.add_argument("--out", default="runs/sculpt.jsonl")
    parser.add_argument("--report", action="store_true", help="print the tables of the rows in --out and fit nothing")
    args = parser.parse_args()
    seeds_a = 2 if args.quick else args.seeds
    seeds_b = 3 if args.quick else 2 * args.seeds
    cells = [("A", m, s, 100_000, 12, 4) for m in (1, 2) for s in range(seeds_a)] if "A" in args.parts else []
    cells += [("B", m, s, 2000, 8, 8) for m in (1, 2, 3) for s in range(seeds_b)] if "B" in args.parts else []
    rows = [r for r in load_jsonl(args.out)
            if r.get("offset", SEED_OFFSET) == args.seed_offset and r.get("net_slab") == args.net_slab]
    done = {(r["part"], r["heads"], r["seed"]) for r in rows}
    todo = [] if args.report else [cell for cell in cells if cell[:3] not in done]
    with open(args.out, "a") as handle:
        for cell in with_progress(todo, "sculpt bench"):
            row = {**run_one(*cell, offset=args.seed_offset, net_slab=args.net_slab), "offset": args.seed_offset}
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            rows.append(row)
    rows = [r for r in rows if r["part"] in args.parts
            and r["seed"] < {"A": seeds_a, "B": seeds_b}[r["part"]]]
    if "A" in args.parts:
        report_part_a(rows, seeds_a)
    if "B" in args.parts:
        report_part_b(rows, seeds_b)
    report_certificates(rows)


if __name__ == "__main__":
    main()
