"""The body's estimated span error against its true span error across shapes (d, k) and m.

For each shape (d, k, n), m and seed, plants a random teacher with
``evaluation.plant_instance``, fits ``SculptLearner(m, search=SearchSettings(refine="none"))``
(its defaults otherwise) watched by a :class:`mhalearn.TeacherObserver` and
records the body's true span error (``body_distance``, sin of the largest
principal angle), its estimate (``estimated_error``, phase 4), whether phase
4 refused and why, and the route the fit used.  Every fit is a row, refusals
included.  Rows are appended to ``--out`` (JSON lines) as they finish; a
rerun skips the cells already there.  ``--dump DIR`` also keeps each fit's
slab system and kept rows (``.npz``) for reading the estimate again offline.
``estimate_at_second_level`` is the same estimate at level
``SECOND_LEVEL`` (0.5, the median), read beside the fit from its kept
rows.  ``--from-dumps DIR`` reads the estimate again, with this code and the
learner's defaults, from the slabs kept by ``--dump`` (no fit), beside
the estimate each fit recorded: how the estimate was chosen on the
development fits.  ``--report`` prints the table of the rows in ``--out`` and fits nothing
(``--summary``: the per-shape summary only).

    python runs/span-shapes/span_shapes.py --shapes 14,5,60000 16,6,150000 --heads 2 --seeds 40 41 42 43 44 --out FILE
    python runs/span-shapes/span_shapes.py --out runs/span-shapes/heldout.jsonl --report
    python runs/span-shapes/span_shapes.py --out runs/span-shapes/dev.jsonl --from-dumps runs/span-shapes/dev-slabs
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn import SculptLearner, SearchSettings
from mhalearn.evaluation import TeacherObserver, plant_instance
from mhalearn.learners.chen_li.phase4_span import bootstrap_span_error
from mhalearn.learners.chen_li.settings import BodySettings
from mhalearn.learners.chen_li.slabs import SlabSystem
from mhalearn.learners.moment_route import sine_distance
from mhalearn.learners.report import Phase, Route

# the helpers the benchmarks share (bench/_common.py) and the calibration's ratio (runs/span-refusal/)
_ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(_ROOT / "bench"), str(_ROOT / "runs" / "span-refusal")]
from _common import load_jsonl, markdown_table, with_progress  # noqa: E402
from span_calibration import within  # noqa: E402

#: A second level of the estimate, read beside the fit from its kept rows (the fit uses its own level).
SECOND_LEVEL = 0.5


KEY = ("heads", "dim", "length", "samples", "seed")


def shape(text: str) -> tuple[int, int, int]:
    """``d,k,n`` as integers (n may be written 6e4)."""
    dim, length, samples = text.split(",")
    return int(dim), int(length), int(float(samples))


class SpanKeeper:
    """Passes every phase result to ``observer`` and keeps phase 4's reading (it observes; it changes nothing)."""

    def __init__(self, observer):
        self.observer, self.span = observer, None

    def __call__(self, phase, result):
        if phase == Phase.SPAN:
            self.span = result
        self.observer(phase, result)


def fit_row(heads, dim, length, samples, seed, dump=None) -> dict:
    teacher, X, Y, _ = plant_instance(heads=heads, dim=dim, length=length, samples=samples, seed=seed)
    keeper = SpanKeeper(TeacherObserver(teacher))
    start = time.perf_counter()
    learner = SculptLearner(heads, search=SearchSettings(refine="none"), random_state=seed).fit(X, Y, callback=keeper)
    seconds = time.perf_counter() - start
    report, observer, span = learner.report_, keeper.observer, keeper.span
    if dump is not None and span.slabs is not None:
        slabs = span.slabs
        np.savez_compressed(os.path.join(dump, dump_name(heads, dim, length, samples, seed)),
                            E=slabs.E, b=slabs.b, t=slabs.t, slab_row=slabs.slab_row,
                            kept=np.array([] if span.kept is None else span.kept),
                            basis=np.array([] if span.basis is None else span.basis),
                            thetas=teacher.thetas.reshape(heads, -1))
    second = None
    if span.basis is not None:  # the same estimate at SECOND_LEVEL, on its own generator: the fit is untouched
        second = bootstrap_span_error(span.slabs, span.kept, span.basis, heads, resamples=24, level=SECOND_LEVEL,
                                      rng=np.random.default_rng(seed))
    return {"heads": heads, "dim": dim, "length": length, "samples": samples, "seed": seed,
            "body_distance": observer.span_distance(Route.BODY), "estimated_error": span.estimated_error,
            "median_error": span.median_error, "refused_by": span.refused_by,
            "estimate_at_second_level": second, "refused": span.refused, "route": report.route,
            "route_reason": report.route_reason,
            "equalities": span.equalities, "rows": span.rows, "kept_rows": span.kept_rows,
            "kept_precision": observer.figure(Phase.SPAN, "kept_precision"),
            "noise_estimate": report.sculpt[-1].noise if report.sculpt else None,
            "fit_seconds": seconds}


def dump_name(heads, dim, length, samples, seed) -> str:
    return f"m{heads}-d{dim}-k{length}-n{samples}-s{seed}.npz"


def estimate_again(row, directory: str) -> tuple[float, float]:
    """(true span error, estimate) read again from the slabs a fit kept, with this code's estimate."""
    kept = np.load(os.path.join(directory, dump_name(*(row[k] for k in KEY))))
    count = len(kept["b"])
    slabs = SlabSystem(kept["E"], kept["b"], kept["t"], np.zeros((0, kept["E"].shape[1])), np.zeros(0),
                       kept["slab_row"], np.zeros(0, int))
    settings = BodySettings()
    estimate = bootstrap_span_error(slabs, kept["kept"].astype(int), kept["basis"], row["heads"],
                                    resamples=settings.bootstrap_resamples, level=settings.bootstrap_level,
                                    rng=np.random.default_rng(row["seed"]))
    assert count == row["equalities"]
    return sine_distance(kept["basis"], kept["thetas"]), estimate


def verdict(row, factor: float, target: float) -> str:
    """How the refusal judged the fit: right when it accepts a span ≤ ``target`` or refuses one above it."""
    truth, refused = row["body_distance"], row["refused"] is not None
    if truth is None:
        return "no span (refused)"
    if refused:
        return "refused, right" if truth > target else "refused, wrong"
    return "accepted, right" if truth <= target else "accepted, wrong"


def report(rows, factor: float, target: float, summary_only: bool = False) -> str:
    """The per-fit table and the per-shape summary of ``rows`` (the summary alone with ``summary_only``)."""
    lines = []
    for row in rows:
        truth, estimate, median = row["body_distance"], row["estimated_error"], row.get("median_error")
        ratio = "—" if truth is None or estimate is None else f"{estimate / truth:.2f}"
        inside = "—" if ratio == "—" else ("yes" if within(estimate, truth, factor) else "NO")
        by_median = "—" if truth is None or median is None else (
            f"{median:.3f} ({median / truth:.2f}, {'yes' if within(median, truth, factor) else 'NO'})")
        lines.append([row["heads"], f"({row['dim']}, {row['length']}, {row['samples']:,})", row["seed"],
                      "—" if truth is None else f"{truth:.3f}", by_median,
                      "—" if estimate is None else f"{estimate:.3f}", ratio, inside, row["refused"] or "accepted",
                      verdict(row, factor, target)])
    table = markdown_table(("m", "(d, k, n)", "seed", "true span error", f"median (/ true, within {factor:g}×)",
                            "upper bound", "bound / true", f"within {factor:g}×", "phase 4",
                            f"refusal at {target}"), lines)
    summary = []
    for key in dict.fromkeys((r["heads"], r["dim"], r["length"], r["samples"]) for r in rows):
        mine = [r for r in rows if (r["heads"], r["dim"], r["length"], r["samples"]) == key]
        read = [r for r in mine if r["body_distance"] is not None and r["estimated_error"] is not None]
        inside = sum(within(r["estimated_error"], r["body_distance"], factor) for r in read)
        verdicts = [verdict(r, factor, target) for r in mine]
        summary.append([key[0], f"({key[1]}, {key[2]}, {key[3]:,})", len(mine), f"{inside}/{len(read)}",
                        sum(v == "accepted, right" for v in verdicts), sum(v == "refused, right" for v in verdicts),
                        sum(v == "refused, wrong" for v in verdicts), sum(v == "accepted, wrong" for v in verdicts),
                        sum(v == "no span (refused)" for v in verdicts)])
    read = [r for r in rows if r["body_distance"] is not None and r["estimated_error"] is not None]
    inside = sum(within(r["estimated_error"], r["body_distance"], factor) for r in read)
    summary.append(["all", "", len(rows), f"{inside}/{len(read)}", *[""] * 5])
    table2 = markdown_table(("m", "(d, k, n)", "fits", f"estimate within {factor:g}×",
                             f"accepted ≤ {target}", f"refused > {target}", f"refused ≤ {target}",
                             f"accepted > {target}", "too few slabs"), summary)
    return table2 if summary_only else table + "\n\n" + table2


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=shape, nargs="+", default=[(14, 5, 60_000)], help="d,k,n")
    parser.add_argument("--heads", type=int, nargs="+", default=[2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[40, 41, 42, 43, 44])
    parser.add_argument("--out", default="runs/span-shapes/heldout.jsonl")
    parser.add_argument("--dump", default=None, help="directory for each fit's slabs (.npz)")
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--target", type=float, default=0.15, help="the span error the refusal should hold")
    parser.add_argument("--report", action="store_true", help="print the table of the rows in --out, fit nothing")
    parser.add_argument("--summary", action="store_true", help="with --report: the per-shape summary only")
    parser.add_argument("--quick", action="store_true", help="teacher 40 only (stored in the default --out)")
    parser.add_argument("--from-dumps", default=None, help="read the estimate again from these kept slabs, fit nothing")
    args = parser.parse_args()
    if args.quick:
        args.seeds = [40]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    if args.dump:
        os.makedirs(args.dump, exist_ok=True)
    key = KEY
    done = {tuple(r[k] for k in key): r for r in load_jsonl(args.out)}
    if args.from_dumps:
        lines = []
        for row in done.values():
            if row["body_distance"] is None:
                continue
            truth, estimate = estimate_again(row, args.from_dumps)
            lines.append([row["heads"], f"({row['dim']}, {row['length']}, {row['samples']:,})", row["seed"],
                          f"{truth:.3f}", f"{row['estimated_error']:.3f} ({row['estimated_error'] / truth:.2f})",
                          f"{estimate:.3f} ({estimate / truth:.2f})"])
        print(markdown_table(("m", "(d, k, n)", "seed", "true span error", "fit's estimate (/ true)",
                              "this code's estimate (/ true)"), lines))
        return
    if not args.report:
        cells = [(m, *s, seed) for m in args.heads for s in args.shapes for seed in args.seeds]
        for cell in with_progress([c for c in cells if c not in done], "span shapes"):
            row = fit_row(*cell, dump=args.dump)
            done[cell] = row
            with open(args.out, "a") as handle:
                handle.write(json.dumps(row) + "\n")
            print(json.dumps({k: row[k] for k in (*key, "body_distance", "estimated_error", "refused")}), flush=True)
    print(report(list(done.values()), args.factor, args.target, summary_only=args.summary))


if __name__ == "__main__":
    main()
