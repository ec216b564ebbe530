"""The body under label noise: K*'s tolerance follows the noise estimated from the data.

For m = 1, 2 (d = 12, k = 4, ‖Θ_i‖_F = 2) and label noise σ ∈ {0, 10⁻³,
10⁻², 0.1} (Y = teacher(X) + σ·N(0, I)), n sequences drawn from the teacher
(:class:`~mhalearn.attention.teacher_source.TeacherSource`), phases 1–4 of
SculptLearner's body (:func:`~mhalearn.learners.chen_li.sculpt_span`, the
defaults, so ``estimate_noise=True``; ``--fixed-tolerance`` reads with
``residual_tol`` alone) on fresh teachers, watched by a TeacherObserver.
Per fit: whether the body gives the span or refuses (and why), its span
distance and its estimate, the noise it estimated (never given σ), the
tolerance K*'s rows were accepted with, K*'s rows and the precision of those
its hull kept.  With ``--full`` the whole SculptLearner(m) fit runs
(span_route="auto": the moment route beside the body) and the route it took
is recorded too.

    python runs/noise-body/noise_body.py                         # fits; rows in runs/noise-body/noise_body.jsonl
    python runs/noise-body/noise_body.py --report                # the table, from those rows

The teachers are seeded seeded_rng(20_254, m, seed), seeds 0, 1, 2 by
default: none was used to choose a setting.  Each line is appended as it
ends; a rerun skips the fits the file holds.
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn import SculptLearner
from mhalearn.attention.data import make_dataset
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.evaluation import TeacherObserver
from mhalearn.learners.chen_li import BodySettings, sculpt_span
from mhalearn.learners.report import Notifier, Phase, Route
from mhalearn.seeding import seeded_rng

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl  # noqa: E402

KEY = ("m", "sigma", "samples", "seed", "estimate_noise", "full")


def fit(heads: int, sigma: float, samples: int, seed: int, estimate_noise: bool, full: bool) -> dict:
    teacher = sample_teacher(heads, 12, rng=seeded_rng(20_254, heads, seed))
    observer = TeacherObserver(teacher)
    start = time.perf_counter()
    if full:
        X, Y = make_dataset(teacher, samples, 4, noise=sigma, rng=seeded_rng(20_255, heads, seed))
        learner = SculptLearner(heads, body=BodySettings(estimate_noise=estimate_noise), random_state=seed)
        learner.fit(X, Y, callback=observer)
        report = learner.report_
        span, final, route = report.span, report.sculpt[-1], str(report.route.value)
    else:
        source = TeacherSource(teacher, samples, 4, seed=seed, noise=sigma)
        settings = BodySettings(estimate_noise=estimate_noise)
        phases = sculpt_span(source, heads, settings, seeded_rng(seed, heads, samples), Notifier(observer))
        span, final = phases.span, phases.sculpt[-1]
        route = "body" if span.refused is None else "refused"
    return {"m": heads, "sigma": sigma, "samples": samples, "seed": seed, "estimate_noise": estimate_noise,
            "full": full, "route": route, "refused": span.refused,
            "span_distance": observer.span_distance(Route.BODY), "estimated_error": span.estimated_error,
            "noise_estimate": final.noise, "kstar_residual_tol": final.residual_tol,
            "kstar_rows": final.accepted_rows, "kept_rows": span.kept_rows,
            "kept_precision": observer.figure(Phase.SPAN, "kept_precision"),
            "seconds": time.perf_counter() - start}


def table(records) -> str:
    def figure(value, form):
        return "—" if value is None or (isinstance(value, float) and not np.isfinite(value)) else format(value, form)
    lines = ["| m | σ | n | teacher | tolerance rule | route | body's span distance | its estimate | σ̂ | "
             "K*'s tolerance | K*'s rows | hull rows kept (precision) | s |", "|" + " --- |" * 13]
    for r in sorted(records, key=lambda r: (r["full"], r["estimate_noise"], r["m"], r["sigma"], r["samples"],
                                            r["seed"])):
        rule = "noise estimated" if r["estimate_noise"] else "residual_tol alone"
        lines.append(f"| {r['m']} | {r['sigma']:g} | {r['samples']:.0e} | {r['seed']} | {rule} | "
                     f"{r['route']}{' (whole fit)' if r['full'] else ''} | {figure(r['span_distance'], '.3f')} | "
                     f"{figure(r['estimated_error'], '.3f')} | {figure(r['noise_estimate'], '.3g')} | "
                     f"{figure(r['kstar_residual_tol'], '.3f')} | {r['kstar_rows']} | {r['kept_rows']} "
                     f"({figure(r['kept_precision'], '.2f')}) | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sigma", type=float, nargs="+", default=[0.0, 1e-3, 1e-2, 0.1])
    parser.add_argument("--samples", type=float, nargs="+", default=[1e5])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--fixed-tolerance", action="store_true", help="residual_tol alone (estimate_noise=False)")
    parser.add_argument("--full", action="store_true", help="the whole SculptLearner fit, with its route")
    parser.add_argument("--out", default="runs/noise-body/noise_body.jsonl")
    parser.add_argument("--report", action="store_true", help="print the table from --out and stop")
    args = parser.parse_args()
    if args.report:
        print(table(load_jsonl(args.out)))
        return
    done = {tuple(r[k] for k in KEY) for r in load_jsonl(args.out)} if os.path.exists(args.out) else set()
    for heads in args.heads:
        for sigma in args.sigma:
            for samples in (int(n) for n in args.samples):
                for seed in args.seeds:
                    key = (heads, sigma, samples, seed, not args.fixed_tolerance, args.full)
                    if key in done:
                        continue
                    record = fit(heads, sigma, samples, seed, not args.fixed_tolerance, args.full)
                    print(json.dumps(record), flush=True)
                    with open(args.out, "a") as handle:
                        handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
