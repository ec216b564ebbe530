"""Why K* does not read the span at m = 4: where the heads' hull falls in K*'s spectrum.  An oracle check.

Phase 4 reads aff{Θ_i} as the m − 1 thinnest directions of K*'s scaled
equalities (E/t)θ ≈ b/t.  That works when, on the rows accepted, the heads'
log-ratios agree to within the slabs' widths.  For agreement rows of the
``sculpt-vs-m`` teachers (d = 12, k = 4) this prints, per set of rows:
their precision (every head within ℓ1 0.1 of â), the heads' log-ratio
disagreement on the slabs (nats, median;
:func:`~mhalearn.evaluation.observer.log_ratio_disagreement`), where the hull
directions rank in K*'s spectrum from the bottom (ideal: 1, …, m − 1;
:func:`~mhalearn.evaluation.observer.hull_direction_ranks`), and what phase 4
(:func:`~mhalearn.learners.chen_li.phase4_span.read_span`, default
settings) reads: the span distance and the body's estimate.  The sets are
every accepted row, the clean ones (precision 1, chosen by the teacher), the
feasible ones (every Θ_i satisfies all their slabs and half-spaces), the
first eighth, quarter and half of the rows in stream order, and the second
half: how the ranks fall as rows are added, and how much two disjoint
halves agree.

The rows come from either

- ``--samples N``: N fresh sequences of the cell's stream decoded with the
  **true** W_Σ (phase 4's tolerances), or
- ``--progress FILE``: a cell's last candidate pass
  (``3_stream_refit.pass2.progress.npz``, complete), decoded with the true
  W_Σ — every row the true W_Σ accepts is among the candidates only when it
  lies in the radius the pass covered, which is printed — and, with
  ``--refit`` (the cell's ``3_stream_refit.npz``, or ``centre``: the
  pass's own centre, which is the learned Ŵ_Σ to within the radius covered
  when the pass was the cell's last and exact), with the learned Ŵ_Σ: the
  first ``max_rows`` rows it accepts, those the cell's own K* read.

The teacher is used throughout, so this is a diagnostic, not a learner.

    python runs/kstar-oracle/kstar_rows.py --heads 3 --seed 0 1 2 --samples 10000000
    python runs/kstar-oracle/kstar_rows.py --heads 4 --seed 0 --progress PASS_FILE --refit REFIT_FILE
    python runs/kstar-oracle/kstar_rows.py --heads 4 --seed 2 --progress PASS_FILE --sequences 2e9 --draws 3
    python runs/kstar-oracle/kstar_rows.py --report       # the table, from runs/kstar-oracle/kstar_rows.jsonl
    python runs/kstar-oracle/kstar_rows.py --curve        # span against rows, and the rows a span of 0.1 would need

``--draws D`` also reads D random eighths, quarters and halves of the rows,
and of the clean rows (how K* would fare on rows of precision 1);
``--curve`` fits span ∝ rows^b, for every row and for the clean ones, to the medians of the three largest sizes
(a quarter, a half, every row) and prints the rows and sequences (at the cell's rate
of rows per sequence) at which that law reaches 0.1 — a projection beyond
the rows measured — and, as a check of such a law, every row's span
predicted from the three smaller sizes.

Each line is appended to ``--out`` as JSON (a rerun skips what it holds).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn.attention.data import make_dataset
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.phase_files import read_kept
from mhalearn.evaluation import (
    agreeing_rows,
    hull_direction_ranks,
    log_ratio_disagreement,
    span_distance,
    teacher_feasible_rows,
    w_sum_error,
)
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.agreement_passes import find_agreement_rows, joined_rows
from mhalearn.learners.chen_li.fit import choose_route
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import kstar_slab_rule, slab_constraints
from mhalearn.learners.moment_route import moment_span, sine_distance
from mhalearn.seeding import seeded_rng

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl  # noqa: E402

COLUMNS = ("m", "teacher", "sequences", "rows decoded with", "set", "rows", "slab threshold", "precision",
           "equalities", "disagreement (nats)", "hull ranks", "span distance", "estimate")
ROUTE_COLUMNS = ("m", "teacher", "sequences", "rows", "slab threshold", "body's span", "its estimate",
                 "moment route's sequences", "its span", "its estimate", "spans apart", "SculptLearner's route")


def candidates_of(path):
    """The candidate rows of a pass's progress file, the pass's centre Ŵ_Σ and the radius covered (‖·‖₂)."""
    kept = read_kept(path)
    state, inputs = kept["state"], kept["inputs"]
    if state["next_block"] != inputs["blocks"]:  # complete only once the pass has read every block
        raise SystemExit(f"{path}: the pass stopped at block {state['next_block']} of {inputs['blocks']}")
    return joined_rows(state["parts"], 0, state["found"]), inputs["w_sum"], state["covered"]


def learned_sum(path):
    """The learned Ŵ_Σ of a cell's ``3_stream_refit.npz`` (phase 3's result)."""
    return read_kept(path)["result"].w_sum


FRACTIONS = (("eighth", 8), ("quarter", 4), ("half", 2))


def random_subsets(rows, draws: int, prefix: str = ""):
    """``draws`` random subsets (without replacement, seeded by the draw) of each size of ``FRACTIONS``, named
    ``"<prefix>random <size> <draw>"``."""
    return {f"{prefix}random {name} {draw}": rows.subset(np.sort(np.random.default_rng(draw).choice(
        len(rows), len(rows) // parts, replace=False))) for name, parts in FRACTIONS for draw in range(draws)}


def row_sets(rows, teacher, settings, draws: int = 0):
    """Every row, the clean ones, the feasible ones, the first eighth, quarter and half in stream order, the
    second half, and ``draws`` random subsets of each of those sizes, of every row and of the clean ones."""
    half = len(rows) // 2
    feasible = np.ones(len(rows), dtype=bool)  # a row with no constraint (identical tokens) holds trivially
    held = teacher_feasible_rows(slab_constraints(rows, **settings.slab_rule()), teacher)
    feasible[:len(held)] = held
    clean = rows.subset(agreeing_rows(rows, teacher))
    return {"all": rows, "clean": clean, **random_subsets(clean, draws, prefix="clean "),
            "feasible": rows.subset(feasible),
            **{f"first {name}": rows.subset(np.arange(len(rows) // parts))
               for name, parts in FRACTIONS},
            "second half": rows.subset(np.arange(half, len(rows))), **random_subsets(rows, draws)}


def slab_rule(rows, settings, rule):
    """K*'s slab rule on ``rows``: phase 4's (``"kstar"``, the threshold raised while K* keeps the slabs it
    wants) or every token of weight ≥ w_min (``"w_min"``)."""
    return kstar_slab_rule(rows, settings) if rule == "kstar" else settings.slab_rule()


def reading(rows, teacher, settings, rule):
    """The figures of one set of rows."""
    chosen_rule = slab_rule(rows, settings, rule)
    slabs = slab_constraints(rows, **chosen_rule)
    span = read_span(slabs, teacher.heads, settings, np.random.default_rng(0))
    return {"rows": len(rows), "slab_rule": rule, "threshold": chosen_rule["w_min"],
            "precision": float(agreeing_rows(rows, teacher).mean()) if len(rows) else None,
            "equalities": int(slabs.equalities),
            "disagreement": float(np.median(log_ratio_disagreement(slabs, teacher))) if slabs.equalities else None,
            "hull_ranks": hull_direction_ranks(slabs, teacher) if slabs.equalities else None,
            "span_distance": None if span.basis is None else span_distance(span.basis, teacher),
            "estimate": span.estimated_error, "refused": span.refused}


def measure(args, seed, settings, out, done):
    teacher = sample_teacher(args.heads, 12, rng=seeded_rng(20_251, args.heads, seed))
    truth = teacher.projection_sum
    start = time.perf_counter()
    if args.progress:
        candidates, centre, covered = candidates_of(args.progress)
        offset = np.linalg.norm(truth - centre, 2) / np.linalg.norm(centre, 2)
        radius = covered / np.linalg.norm(centre, 2)
        print(f"m = {args.heads}, teacher {seed}: {len(candidates)} candidate rows; the true W_Σ is {offset:.4f} "
              f"of ‖centre‖₂ from the pass's centre, which covered {radius:.4f}: "
              f"{'every' if offset <= radius else 'not every'} row it accepts is among them", flush=True)
        sources = {"true W_Σ": truth}
        if args.refit:
            learned = centre if args.refit == "centre" else learned_sum(args.refit)
            sources[f"learned Ŵ_Σ ({w_sum_error(learned, teacher):.2%} off)"] = learned
        # Every row the true W_Σ accepts; of the learned Ŵ_Σ's, the first max_rows, as the cell's K* kept.
        decoded = {name: candidates.accepted_under(
            w_sum, residual_tol=settings.residual_tol, simplex_tol=settings.simplex_tol,
            max_rows=len(candidates) if name == "true W_Σ" else settings.max_rows) for name, w_sum in sources.items()}
        sequences, extra = args.sequences, {"true_in_radius": bool(offset <= radius), "offset": offset,
                                            "radius": radius}
    else:
        source = TeacherSource(teacher, args.samples, 4, seed=seed)
        decoded = {"true W_Σ": find_agreement_rows(source, truth, residual_tol=settings.residual_tol,
                                                   simplex_tol=settings.simplex_tol, max_rows=10**7)}
        sequences, extra = args.samples, {}
    if args.moment:
        check_routes(args, seed, teacher, decoded["true W_Σ"], sequences, settings, out, done)
    for name, rows in decoded.items():
        for label, chosen in row_sets(rows, teacher, settings, args.draws).items():
            key = (args.heads, seed, sequences, name.split(" (")[0], label, args.slab_rule)
            if key in done:
                continue
            record = {"m": args.heads, "teacher": seed, "sequences": sequences, "decoded_with": name,
                      "set": label, **reading(chosen, teacher, settings, args.slab_rule), **extra}
            print(line(record), flush=True)
            with open(out, "a") as handle:
                handle.write(json.dumps(record) + "\n")
    print(f"  ({time.perf_counter() - start:.0f} s)", flush=True)


def check_routes(args, seed, teacher, rows, sequences, settings, out, done):
    """What SculptLearner's check would make of the body's span from every row: the moment route's span on
    ``args.moment`` fresh sequences of the teacher, and the route :func:`choose_route` takes."""
    key = (args.heads, seed, sequences, "route", args.moment, args.slab_rule)
    if key in done:
        return
    rule = slab_rule(rows, settings, args.slab_rule)
    span = read_span(slab_constraints(rows, **rule), teacher.heads, settings, np.random.default_rng(0))
    X, Y = make_dataset(teacher, args.moment, 4, rng=seeded_rng(20_252, args.heads, seed))
    moment = moment_span(np.asarray(X), np.asarray(Y), teacher.heads, rng=np.random.default_rng(seed))
    route, _ = choose_route(span, moment, settings)
    record = {"kind": "route", "m": args.heads, "teacher": seed, "sequences": sequences, "rows": len(rows),
              "slab_rule": args.slab_rule, "threshold": rule["w_min"],
              "span_distance": span_distance(span.basis, teacher), "estimate": span.estimated_error,
              "moment_sequences": args.moment, "moment_distance": span_distance(moment.basis, teacher),
              "moment_estimate": moment.estimated_error, "apart": sine_distance(span.basis, moment.basis),
              "route": str(route.value), "refused": span.refused}
    print(route_line(record), flush=True)
    with open(out, "a") as handle:
        handle.write(json.dumps(record) + "\n")


def route_line(record):
    return (f"| {record['m']} | {record['teacher']} | {record['sequences']:.0e} | {record['rows']} | "
            f"{record['threshold']:.3f} | {record['span_distance']:.3f} | {record['estimate']:.3f} | "
            f"{record['moment_sequences']:.0e} | "
            f"{record['moment_distance']:.3f} | {record['moment_estimate']:.3f} | {record['apart']:.3f} | "
            f"{record['route']} |")


def line(record):
    def figure(value, form):
        return "—" if value is None else format(value, form)
    return (f"| {record['m']} | {record['teacher']} | {record['sequences']:.0e} | {record['decoded_with']} | "
            f"{record['set']} | {record['rows']} | {record['threshold']:.3f} | "
            f"{figure(record['precision'], '.2f')} | {record['equalities']} | "
            f"{figure(record['disagreement'], '.2f')} | {record['hull_ranks']} | "
            f"{figure(record['span_distance'], '.3f')} | {figure(record['estimate'], '.3f')} |")


def power_law(points):
    """Least squares of log span on log rows over ``points`` [(rows, span)]: (log intercept, slope)."""
    rows, spans = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    slope, intercept = np.polyfit(rows, spans, 1)
    return intercept, slope


def rows_for(target: float, law) -> float:
    """The rows at which ``law`` reaches ``target`` (inf when it does not fall)."""
    intercept, slope = law
    return float(np.exp((np.log(target) - intercept) / slope)) if slope < 0 else float("inf")


def curve(records, target: float = 0.1) -> str:
    """Per cell, decoding and set of rows (every row, or the clean ones): the median span distance of the random
    subsets of each size and of every row, a power law fitted to the three largest sizes, the rows it needs for
    ``target`` and the n they take at the cell's rate (rows found per sequence) — a projection — and, as a check
    of the law, every row's span predicted from the three smaller sizes."""
    groups = {}
    for r in records:
        if "kind" in r:
            continue
        # every row and its random subsets, or the clean rows ("clean") and theirs ("clean random ...")
        clean = r["set"] == "clean" or r["set"].startswith("clean random ")
        label = "all" if r["set"] == "clean" else r["set"].removeprefix("clean ")
        if label == "all" or label.startswith("random "):
            size = "all" if label == "all" else label.split()[1]
            decoded = r["decoded_with"] + (", clean rows only" if clean else "")
            key = (r["m"], r["teacher"], r["sequences"], decoded, r["slab_rule"])
            # a set too small for K* to read a span counts as distance 1, as a refusal does
            span = 1.0 if r["span_distance"] is None else r["span_distance"]
            groups.setdefault(key, {}).setdefault(size, []).append((r["rows"], span))
    lines = ["| m | teacher | sequences | rows decoded with | span by rows (median of the draws [range]) | "
             "every row's span predicted from the smaller sizes | law: span ∝ rows^b | rows for "
             f"{target:g} (projection) | sequences for {target:g} (projection) |", "|" + " --- |" * 9]
    for key, sizes in groups.items():
        if "all" not in sizes or len(sizes) < 4:
            continue
        order = [name for name, _ in FRACTIONS] + ["all"]
        medians = [(sizes[name][0][0], float(np.median([span for _, span in sizes[name]]))) for name in order]
        shown = ", ".join(f"{rows}: {span:.3f}" + (f" [{min(s for _, s in sizes[name]):.3f}–"
                                                    f"{max(s for _, s in sizes[name]):.3f}]"
                                                    if len(sizes[name]) > 1 else "")
                          for (rows, span), name in zip(medians, order))
        check = power_law(medians[:3])
        predicted = float(np.exp(check[0] + check[1] * np.log(medians[3][0])))
        law = power_law(medians[1:])
        needed = rows_for(target, law)
        rate = medians[3][0] / key[2]
        lines.append(f"| {key[0]} | {key[1]} | {key[2]:.0e} | {key[3]} | {shown} | {predicted:.3f} (measured "
                     f"{medians[3][1]:.3f}) | b = {law[1]:.2f} | {needed:.3g} | {needed / rate:.3g} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--seed", type=int, nargs="+", default=[0])
    parser.add_argument("--samples", type=float, help="fresh sequences decoded with the true W_Σ")
    parser.add_argument("--progress", help="a cell's complete candidate-pass progress file")
    parser.add_argument("--sequences", type=float, help="the stream length of --progress's cell")
    parser.add_argument("--refit", help="the cell's 3_stream_refit.npz, for its learned Ŵ_Σ, or 'centre': the "
                        "pass's centre")
    parser.add_argument("--moment", type=float, help="also fit the moment route on this many fresh sequences "
                        "and say which route SculptLearner's check takes for the body's span from every row")
    parser.add_argument("--slab-rule", choices=("kstar", "w_min"), default="kstar",
                        help="K*'s slabs: phase 4's rule (kstar, the default) or every token of weight ≥ w_min")
    parser.add_argument("--draws", type=int, default=0, help="also read this many random eighths, quarters and "
                        "halves of the rows (the learning curve of --curve)")
    parser.add_argument("--curve", action="store_true", help="print the span distance against K*'s rows from "
                        "--out (random subsets and every row) and the projected rows for 0.1, and stop")
    parser.add_argument("--out", default="runs/kstar-oracle/kstar_rows.jsonl")
    parser.add_argument("--report", action="store_true", help="print the table from --out and stop")
    args = parser.parse_args()
    rows = load_jsonl(args.out)
    if args.curve:
        print(curve(rows))
        return
    if args.report:
        print("| " + " | ".join(COLUMNS) + " |\n|" + " --- |" * len(COLUMNS))
        for record in rows:
            if "kind" not in record and "random " not in record["set"]:  # random subsets: --curve
                print(line(record))
        checks = [record for record in rows if record.get("kind") == "route"]
        if checks:
            print("\n| " + " | ".join(ROUTE_COLUMNS) + " |\n|" + " --- |" * len(ROUTE_COLUMNS))
            for record in checks:
                print(route_line(record))
        return
    if (args.samples is None) == (args.progress is None):
        parser.error("give exactly one of --samples and --progress")
    if args.progress and (args.sequences is None or len(args.seed) != 1):
        parser.error("--progress needs --sequences and one --seed (the cell's)")
    if args.samples is not None:
        args.samples = int(args.samples)
    if args.sequences is not None:
        args.sequences = int(args.sequences)
    if args.moment is not None:
        args.moment = int(args.moment)
    done = {(r["m"], r["teacher"], r["sequences"], "route", r["moment_sequences"], r["slab_rule"])
            if r.get("kind") == "route"
            else (r["m"], r["teacher"], r["sequences"], r["decoded_with"].split(" (")[0], r["set"], r["slab_rule"])
            for r in rows}
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    settings = BodySettings()
    for seed in args.seed:
        measure(args, seed, settings, args.out, done)


if __name__ == "__main__":
    main()
