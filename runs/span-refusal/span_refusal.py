"""Which span route a fit chooses at m = 2, against the true span errors of both routes.

For each shape (d, k, n) and seed, plants a random teacher with
``evaluation.plant_instance`` (m = 2), fits
``SculptLearner(2, search=SearchSettings(refine="none"))`` (its default net: when both routes are
compared, phase 6 chooses between their candidates) watched by a
:class:`mhalearn.TeacherObserver`.  The
moment route's span comes from the fit, which runs it beside the body in
every fit (``span_route="auto"``); were it not run, from
:func:`~mhalearn.learners.moment_route.moment_span` on the same standardised
data.  Prints per fit the body's span distance and its bootstrap estimate,
the moment route's distance and its estimate, the route chosen, whether the
chosen route's span is the closer one and whether a body span ≤ 0.1 was not
used; then the two shares the issue asks for.  Each row also records
``spans_apart``, the distance between the two routes' spans (the route
rule's contradiction check).  Rows are appended to
``--out`` (JSON lines) as they finish; a rerun skips them.

    python runs/span-refusal/span_refusal.py [--seeds 0 1 2 3 4] [--out runs/span-refusal/span_refusal.jsonl] [--quick]
        [--compare-above C] [--nets]

``--compare-above 0`` lets phase 6 choose between both routes' candidates
in every fit the spans do not contradict (for choosing
``compare_routes_above`` on development seeds).  ``runs/span-refusal/span_calibration.py``
reads the rows' estimated against true span errors.  ``--report`` prints
the table of the rows already in ``--out`` (for the seeds asked for) and
fits nothing.

``--nets`` also runs phases 5–6 (``refine="none"``, the default budget) on
each route's span — the body's whenever it read one, refused or not, in
the slab around its hull — with the last fifth of the data held out, and
records each route's held-out error of the least-squares choice
(``body_val_error``, ``moment_val_error``); the summary then also says how
a rule that keeps the route with the lower held-out error would have
chosen.  An evaluation beside the fit: it changes nothing the fit computes.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from mhalearn import BodySettings, SculptLearner
from mhalearn.evaluation import TeacherObserver, plant_instance
from mhalearn.evaluation.observer import span_distance
from mhalearn.learners.chen_li import SearchSettings, certificate_bounds, route_net, search_and_select
from mhalearn.learners.moment_route import moment_span, sine_distance
from mhalearn.learners.report import Phase, Route

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl, markdown_table, with_progress  # noqa: E402

SHAPES = ((14, 5, 60_000), (10, 6, 100_000), (12, 4, 100_000))
TARGET = 0.1


def held_out_errors(X, Y, span, moment, seed) -> dict:
    """Each route's held-out least-squares error after phases 5–6 on its span (``refine="none"``)."""
    X, Y = X / np.sqrt(np.mean(X ** 2)), Y / np.sqrt(np.mean(Y ** 2))  # the learners' units
    held = len(X) // 5
    settings = SearchSettings(refine="none")
    errors = {}
    for route in (Route.BODY, Route.MOMENT):
        if route == Route.BODY and span.basis is None:  # too few equalities: the body read no span
            continue
        basis, radius, hull = route_net(route, span, moment, 2, settings)
        _, selection = search_and_select(X[:-held], Y[:-held], X[-held:], Y[-held:], basis, radius, 2, settings,
                                         np.random.default_rng(seed), hull=hull, **certificate_bounds(X, Y))
        errors[f"{route}_val_error"] = selection.val_least_squares
    return errors


def fit_row(dim, length, samples, seed, compare_above, nets=False):
    teacher, X, Y, _ = plant_instance(heads=2, dim=dim, length=length, samples=samples, seed=seed)
    observer = TeacherObserver(teacher)
    body = BodySettings() if compare_above is None else BodySettings(compare_routes_above=compare_above)
    learner = SculptLearner(2, body=body, search=SearchSettings(refine="none"), random_state=seed).fit(
        X, Y, callback=observer)
    report = learner.report_
    moment = report.moment
    if moment is not None:
        moment_distance = observer.span_distance(Route.MOMENT)
    else:  # the fit did not need it: the same route on the same data, in the learners' units
        with threadpool_limits(limits=1, user_api="blas"):
            moment = moment_span(X / np.sqrt(np.mean(X ** 2)), Y / np.sqrt(np.mean(Y ** 2)), 2,
                                 rng=np.random.default_rng(seed))
        moment_distance = span_distance(moment.basis, teacher)
    span = report.span
    return {"dim": dim, "length": length, "samples": samples, "seed": seed, "route": report.route,
            "route_reason": report.route_reason, "moment_in_fit": report.moment is not None,
            "body_distance": observer.span_distance(Route.BODY), "estimated_error": span.estimated_error,
            "moment_distance": moment_distance, "moment_estimate": moment.estimated_error,
            "spans_apart": None if span.basis is None else sine_distance(span.basis, moment.basis),
            "moment_seconds": moment.seconds, "fit_seconds": report.total_seconds,
            "refused": span.refused, "kept_rows": span.kept_rows, "rows": span.rows,
            "kept_precision": observer.figure(Phase.SPAN, "kept_precision"),
            "refined_w_sum_error": observer.figure(Phase.REFINED_SUM, "refined_w_sum_error"),
            **(held_out_errors(X, Y, span, moment, seed) if nets else {})}


def chosen_closer(row) -> bool:
    """Whether the chosen route's span is at least as close to the truth as the other route's."""
    body, moment = row["body_distance"], row["moment_distance"]
    chosen, other = (body, moment) if row["route"] == Route.BODY else (moment, body)
    return other is None or chosen <= other


def body_unused(row) -> bool:
    """Whether a body span within ``TARGET`` of the truth was not used."""
    return row["route"] != Route.BODY and row["body_distance"] is not None and row["body_distance"] <= TARGET


def how_chosen(row) -> str:
    """The route rule's branch that chose the route, from the row's reason."""
    if row["refused"]:
        return "refused" + (": too few equalities" if row["body_distance"] is None else "")
    if "held-out" in row["route_reason"]:
        return "agreed; held-out error"
    return "agreed; alone" if row["route"] == Route.BODY else "contradicted"


def table_row(row) -> list:
    """One fit as a row of the route table."""
    def fmt(value):
        return "—" if value is None else f"{value:.3f}"

    apart = fmt(row["spans_apart"])
    if row["spans_apart"] is not None and not row["refused"]:
        apart += f" ({row['estimated_error'] + 2 * row['moment_estimate']:.3f})"
    return [f"({row['dim']}, {row['length']}, {row['samples']:,})", row["seed"], fmt(row["body_distance"]),
            fmt(row["estimated_error"]), fmt(row["moment_distance"]), fmt(row["moment_estimate"]), apart,
            f"{row['route']} ({how_chosen(row)})", "yes" if chosen_closer(row) else "no"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--out", default="runs/span-refusal/span_refusal.jsonl")
    parser.add_argument("--quick", action="store_true", help="seed 0 only")
    parser.add_argument("--nets", action="store_true",
                        help="also run phases 5–6 on each route's span and compare their held-out errors")
    parser.add_argument("--compare-above", type=float, default=None,
                        help="SculptLearner's compare_routes_above (default: the learner's)")
    parser.add_argument("--report", action="store_true", help="print the table of the rows in --out and fit nothing")
    args = parser.parse_args()
    if args.quick:
        args.seeds = [0]
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    done = {(r["dim"], r["length"], r["samples"], r["seed"]): r for r in load_jsonl(args.out)}
    cells = [(d, k, n, s) for d, k, n in SHAPES for s in args.seeds]
    for cell in with_progress([] if args.report else [c for c in cells if c not in done], "span refusal"):
        row = fit_row(*cell, args.compare_above, args.nets)
        done[cell] = row
        with open(args.out, "a") as handle:
            handle.write(json.dumps(row) + "\n")
    rows = [done[c] for c in cells if c in done]
    print(markdown_table(("(d, k, n)", "seed", "body's span distance", "its estimate", "moment route's distance",
                          "its estimate", "spans apart (allowed)", "route chosen", "chosen span the closer one"),
                         map(table_row, rows)))
    closer = sum(chosen_closer(r) for r in rows)
    unrefused = [r for r in rows if r["refused"] is None]
    kept = [r for r in unrefused if r["route"] == Route.BODY]
    misses = [abs(r["moment_estimate"] - r["moment_distance"]) for r in rows]
    print(f"\nchosen route's span ≤ the other's: {closer}/{len(rows)}; body spans ≤ {TARGET} not used: "
          f"{sum(body_unused(r) for r in rows)}; route body in {len(kept)}; of the {len(unrefused)} fits the body did "
          f"not refuse, phase 6 chose between both routes in {sum('held-out' in r['route_reason'] for r in unrefused)}")
    if kept:
        print(f"kept bodies: spans apart {min(r['spans_apart'] for r in kept):.3f}–"
              f"{max(r['spans_apart'] for r in kept):.3f}, allowed "
              f"{min(r['estimated_error'] + 2 * r['moment_estimate'] for r in kept):.3f}–"
              f"{max(r['estimated_error'] + 2 * r['moment_estimate'] for r in kept):.3f}")
    if rows:
        print(f"moment route's |estimate − distance|: max {max(misses):.3f}, mean {np.mean(misses):.3f}")
    for shape in dict.fromkeys((r["dim"], r["length"], r["samples"]) for r in rows):
        mine = [r for r in rows if (r["dim"], r["length"], r["samples"]) == shape]
        print(f"(d, k, n) = {shape}: the moment route's time {min(r['moment_seconds'] for r in mine):.1f}–"
              f"{max(r['moment_seconds'] for r in mine):.1f} s of fits of {min(r['fit_seconds'] for r in mine):.1f}–"
              f"{max(r['fit_seconds'] for r in mine):.1f} s")
    if args.nets:
        by_error = [r for r in rows if "moment_val_error" in r]
        closer = not_used = 0
        for r in by_error:
            body_wins = r.get("body_val_error", np.inf) < r["moment_val_error"]
            body, moment = r["body_distance"], r["moment_distance"]
            chosen, other = (body, moment) if body_wins else (moment, body)
            closer += other is None or chosen <= other
            not_used += not body_wins and body is not None and body <= TARGET
        print(f"the route with the lower held-out error (phases 5–6 on both spans): chosen span ≤ the other's in "
              f"{closer}/{len(by_error)}; body spans ≤ {TARGET} not used: {not_used}")


if __name__ == "__main__":
    main()
