"""SculptLearner at m = 3 from a lazily generated Dask dataset: route, span, the paper's output, the polish.

For each teacher seed, ``sample_teacher(3, 12, rng=seeded_rng(20_251, 3, seed))``
(‖Θ_i‖_F = 2, the ``sculpt-vs-m`` teachers) labels ``--samples`` Boolean
sequences drawn block by block (``make_dataset(..., chunks=...)``; nothing of
size n is held), and ``SculptLearner(3, random_state=seed)`` fits them under
the active Dask scheduler (threads by default; with ``--workers N``, a
``LocalCluster`` of N single-threaded worker processes), watched by a
:class:`mhalearn.TeacherObserver`.  One JSON line per fit in ``--out``
(a rerun skips the fits it holds): the route and why, the body's span
distance and its bootstrap estimate, the moment route's and its estimate
(``python runs/span-refusal/span_calibration.py FILE`` tables the body's), the refined
Ŵ_Σ error, the kept rows' precision, the
relative test error of the paper's output (``least_squares_model_``, no
polish) and of the polished model on 4000 fresh sequences, the wall time and
the peak memory of the process (and of each worker), and K*'s slab rule
(``kstar_w_max``, null for a fit whose K* made every token of weight ≥
w_min a slab, and the threshold it used).

With ``--checkpoint DIR`` phases 1–4 are kept, so a rerun with another
``--max-candidates`` (the net's budget) or ``--net-slab`` resumes after
them.  ``heads_off_hull`` is how far the true heads' projections onto the
body's span lie from its hull, in shares of the net's radius: the
half-width ``net_slab`` needs.  ``--report`` prints every fit of ``--out``
as one Markdown table and fits nothing.

    python runs/sculpt-m3/sculpt_m3.py [--samples 1e7] [--seeds 0 1 2] [--workers N] [--max-candidates 2e5]
                              [--net-slab 0.05] [--span-route auto] [--checkpoint DIR]
                              [--out runs/sculpt-m3/sculpt_m3.jsonl] [--quick] [--report]
"""

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path

from distributed import Client, LocalCluster

import mhalearn
from mhalearn import peak_memory_mb
from mhalearn.attention.data import boolean_inputs
from mhalearn.attention.model import relative_error
from mhalearn.attention.teachers import sample_teacher
from mhalearn.evaluation import TeacherObserver
from mhalearn.learners.chen_li import StreamRefit
from mhalearn.learners.chen_li.phase5_net import hull_frame
from mhalearn.learners.chen_li.settings import BodySettings, SearchSettings
from mhalearn.learners.report import Phase, Route
from mhalearn.provenance import git_state
from mhalearn.seeding import seeded_rng

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl, markdown_table, power_of_ten  # noqa: E402

HEADS, DIM, LENGTH = 3, 12, 4


def heads_off_hull(report, teacher) -> float | None:
    """The largest distance of the true heads' projections onto the body's span from its hull, over the net's radius.

    The half-width ``net_slab`` needs to hold them; read whichever route was
    chosen (None when the body read no span).
    """
    span = report.span
    if span is None or span.basis is None:
        return None
    frame, offset = hull_frame(span.basis, *span.hull)
    across = (teacher.thetas.reshape(HEADS, -1) @ span.basis.T) @ frame[0]
    return float(max(abs(across - offset)) / SearchSettings().radius(span.head_norm, HEADS))


def _stream_passes(report) -> int | None:
    """The candidate passes phase 3 read beyond its prefix (0: none; None: phases 1–3 did not run)."""
    if report.refined_sum is None:
        return None
    return next((step.passes for step in report.refined_sum.steps if isinstance(step, StreamRefit)), 0)


def fit_row(samples: int, seed: int, workers: int | None = None, max_candidates: int = 200_000,
            checkpoint: str | None = None, net_slab: float | None = 0.05, span_route: str = "auto") -> dict:
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, seed))
    X, Y = mhalearn.make_dataset(teacher, samples, LENGTH, rng=seeded_rng(seed, "sculpt-m3"), chunks=1 << 16)
    observer = TeacherObserver(teacher)
    cluster = nullcontext() if workers is None else LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None)
    with cluster, (nullcontext() if workers is None else Client(cluster)) as client:
        start = time.perf_counter()
        learner = mhalearn.SculptLearner(HEADS, search=mhalearn.SearchSettings(max_candidates=max_candidates,
                                                                               net_slab=net_slab),
                                         random_state=seed, span_route=span_route, checkpoint=checkpoint)
        learner.fit(X, Y, callback=observer)
        seconds = time.perf_counter() - start
        worker_memory = None if client is None else sorted(client.run(peak_memory_mb).values())
    X_test = boolean_inputs(4000, LENGTH, DIM, rng=seeded_rng(seed, "sculpt-m3-test"))
    report = learner.report_
    return {"samples": samples, "seed": seed, "max_candidates": max_candidates, "net_slab": net_slab,
            "span_route": span_route,
            "resumed": list(report.resumed), "net_shape": report.net.shape,
            "heads_off_hull": heads_off_hull(report, teacher),
            "candidates": report.net.candidates, "net_resolution": report.net.resolution,
            "route": report.route, "fallback": report.fallback, "route_reason": report.route_reason,
            "body_distance": observer.span_distance(Route.BODY), "estimated_error": report.span.estimated_error,
            "moment_distance": observer.span_distance(Route.MOMENT),
            "moment_estimate": None if report.moment is None else report.moment.estimated_error,
            "refined_w_sum_error": observer.figure(Phase.REFINED_SUM, "refined_w_sum_error"),
            "kept_precision": observer.figure(Phase.SPAN, "kept_precision"), "kept_rows": report.span.kept_rows,
            "agreement_rows": report.sculpt[-1].found_rows,
            "paper_output_error": relative_error(learner.least_squares_model_, teacher, X_test),
            "polished_error": relative_error(learner.model_, teacher, X_test),
            "seconds": seconds, "learner_seconds": report.total_seconds,
            "candidate_passes": _stream_passes(report), "kstar_w_max": learner.body.kstar_w_max,
            "kstar_threshold": report.sculpt[-1].slab_threshold, "git_commit": git_state()[0],
            "peak_memory_mb": peak_memory_mb(), "workers": workers, "worker_peak_memory_mb": worker_memory}


def kstar_rule(row) -> str:
    """K*'s slab rule of a row: every token of weight ≥ w_min (rows without ``kstar_w_max``), or raised."""
    if row.get("kstar_w_max") is None:
        return "every token ≥ 0.02"
    return f"raised to {row['kstar_threshold']:.3f}"


def memory(row) -> str:
    """The peak memory of a row: per worker on a cluster, else of the process."""
    if row.get("worker_peak_memory_mb"):
        low, high = min(row["worker_peak_memory_mb"]) / 1024, max(row["worker_peak_memory_mb"]) / 1024
        return f"{low:.2f}–{high:.2f} GB per worker" if f"{low:.2f}" != f"{high:.2f}" else f"{low:.2f} GB per worker"
    return f"{row['peak_memory_mb'] / 1024:.2f} GB"


def report(rows) -> str:
    """The fits as one Markdown table, by n, teacher and net."""
    def fmt(value, spec):
        return "—" if value is None else format(value, spec)

    def net(row):
        return f"{power_of_ten(row['max_candidates'])}, " + (
            "whole ball" if row["net_slab"] is None else f"hull slab {row['net_slab']:g}")

    rows = sorted(rows, key=lambda row: (row["samples"], row["seed"], row.get("kstar_w_max") is not None,
                                         row["max_candidates"], row["net_slab"] or 0.0, row["span_route"]))
    return markdown_table(
        ("n", "teacher", "K\\*'s slabs", "net budget, slab", "agreement rows of K\\*", "kept rows' precision",
         "Ŵ_Σ error",
         "body's span distance", "its estimate", "route", "moment route's distance", "its estimate",
         "heads off the hull", "paper's output, test error", "polished", "wall time", "peak memory"),
        ([power_of_ten(row["samples"]), row["seed"], kstar_rule(row), net(row),
          f"{row['agreement_rows']:,}".replace(",", " "),
          fmt(row["kept_precision"], ".2f"), f"{100 * row['refined_w_sum_error']:.2f} %",
          fmt(row["body_distance"], ".3f"), fmt(row["estimated_error"], ".3f"),
          row["route"] + (f" ({row['span_route']})" if row["span_route"] != "auto" else ""),
          fmt(row["moment_distance"], ".3f"), fmt(row["moment_estimate"], ".3f"), fmt(row["heads_off_hull"], ".3f"),
          f"{100 * row['paper_output_error']:.2f} %", f"{row['polished_error']:.1e}", f"{row['seconds']:,.0f} s"
          .replace(",", " "), memory(row)] for row in rows))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=float, default=1e7)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=None,
                        help="fit on a LocalCluster of this many single-threaded workers")
    parser.add_argument("--quick", action="store_true", help="n = 3·10⁵, teacher 0 (a smoke run: the body refuses)")
    parser.add_argument("--max-candidates", type=float, default=200_000, help="the net's budget of tuples")
    parser.add_argument("--net-slab", type=lambda text: None if text == "none" else float(text), default=0.05,
                        help="SculptLearner's net_slab ('none': the whole ball)")
    parser.add_argument("--span-route", default="auto", choices=["auto", "body", "moment"],
                        help="SculptLearner's span_route ('body': the body's span unless it refuses)")
    parser.add_argument("--checkpoint", default=None, metavar="DIR",
                        help="keep phases 1–4 here; a rerun (e.g. with another --max-candidates) resumes after them")
    parser.add_argument("--out", default="runs/sculpt-m3/sculpt_m3.jsonl")
    parser.add_argument("--report", action="store_true",
                        help="print the table of every fit in --out and fit nothing")
    args = parser.parse_args()
    if args.report:
        print(report(load_jsonl(args.out)))
        return
    samples, seeds = (300_000, [0]) if args.quick else (int(args.samples), args.seeds)
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    done = set()
    if os.path.exists(args.out):
        with open(args.out) as handle:
            done = {(row["samples"], row["seed"], row.get("max_candidates", 200_000), row.get("net_slab"),
                     row.get("span_route", "auto"), row.get("kstar_w_max")) for row in map(json.loads, handle) if row}
    budget = int(args.max_candidates)
    for seed in seeds:
        if (samples, seed, budget, args.net_slab, args.span_route, BodySettings.kstar_w_max) in done:
            continue
        row = fit_row(samples, seed, args.workers, budget, args.checkpoint, args.net_slab, args.span_route)
        print(json.dumps(row), flush=True)
        with open(args.out, "a") as handle:
            handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
