"""How K* reads the span from rows of which many are not agreement rows: the ways of weighing its rows.

The rows are either those a ``sculpt-vs-m``-style cell's K* reads (``--decode
learned``: phases 1–3 and phase 2's K* round of
:func:`~mhalearn.learners.chen_li.sculpt_span` on the cell's stream,
SculptLearner's defaults, the learned Ŵ_Σ) or every row the teacher's W_Σ
accepts (``--decode true``) at a tolerance ``--residual-tol``, where a looser
test mixes in rows that are not agreement rows; cached once per cell in
``--rows`` and capped, as K* caps them, at the first ``max_rows``.  Phase 4
then reads the span from them under each rule of :data:`RULES`
(:func:`~mhalearn.learners.chen_li.phase4_span.read_span` with
``hull_core`` and ``hull_trim``), and, as the oracle no rule can match, from
their clean rows alone (every head within ℓ1 0.1 of â; chosen by the
teacher).  Per reading: rows, their precision, the rows the hull kept and
theirs, the span distance and the estimate.

    python runs/kstar-weighing/kstar_weighing.py --heads 3 --seed 10 11 --samples 1e7   # development, learned Ŵ_Σ
    python runs/kstar-weighing/kstar_weighing.py --heads 2 --seed 10 11 12 --samples 1e6 --decode true \
        --residual-tol 0.1
    python runs/kstar-weighing/kstar_weighing.py --report   # the table, from kstar_weighing.jsonl beside it

(runs/kstar-weighing/README.md lists every command behind the committed rows.)
The teacher is used only to measure (precision, span distance, the clean
set).  Each line is appended to ``--out`` as JSON; a rerun skips what it holds.
"""

import argparse
import csv
import dataclasses
import json
import os
import pickle
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.evaluation import agreeing_rows, span_distance, w_sum_error
from mhalearn.learners.chen_li import BodySettings, sculpt_span
from mhalearn.learners.chen_li.agreement_passes import find_agreement_rows
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import kstar_slab_rule, slab_constraints
from mhalearn.seeding import seeded_rng

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl  # noqa: E402

COLUMNS = ("m", "teacher", "sequences", "Ŵ_Σ error", "rule", "rows", "precision", "kept rows", "kept precision",
           "span distance", "estimate", "refused")


def teacher_of(heads: int, seed: int, theta_norm: float):
    """The ``sculpt-vs-m`` teacher of (m, seed), with ‖Θ_i‖_F = ``theta_norm`` (2 in ``sculpt-vs-m``)."""
    return sample_teacher(heads, 12, theta_norm=theta_norm, rng=seeded_rng(20_251, heads, seed))


def cell_rows(heads: int, seed: int, samples: int, theta_norm: float, decode: str, cache: str,
              residual_tol: float | None = None):
    """The rows K* reads and the Ŵ_Σ they were decoded under (cached in ``cache``): with ``decode="learned"``
    the cell's own (phases 1–3 and K*'s round of :func:`sculpt_span`), with ``"true"`` every row the
    teacher's W_Σ accepts (phase 4's tolerances)."""
    tol = "" if residual_tol is None else f"-tol{residual_tol:g}"
    path = os.path.join(cache, f"m{heads}-seed{seed}-n{samples:.0e}-norm{theta_norm:g}-{decode}{tol}.pickle")
    if os.path.exists(path):
        with open(path, "rb") as handle:
            return pickle.load(handle)
    teacher = teacher_of(heads, seed, theta_norm)
    source = TeacherSource(teacher, samples, 4, seed=seed)
    start = time.perf_counter()
    settings = BodySettings()
    if decode == "true":
        w_sum = teacher.projection_sum
        rows = find_agreement_rows(source, w_sum, residual_tol=residual_tol or settings.residual_tol,
                                   simplex_tol=settings.simplex_tol, max_rows=10**7)
    else:
        phases = sculpt_span(source, heads, settings, seeded_rng(seed, heads, samples))
        rows, w_sum = phases.sculpt[-1].rows, phases.refined_sum.w_sum
    kept = {"rows": rows, "w_sum": w_sum, "seconds": time.perf_counter() - start}
    with open(path, "wb") as handle:
        pickle.dump(kept, handle)
    return kept


def reading(rows, teacher, settings):
    """Phase 4 on ``rows`` under ``settings``: its figures against the teacher."""
    slabs = slab_constraints(rows, **kstar_slab_rule(rows, settings))
    span = read_span(slabs, teacher.heads, settings, np.random.default_rng(0))
    clean = agreeing_rows(rows, teacher)
    kept = span.kept if span.kept is not None else np.arange(0)
    return {"rows": len(rows), "precision": float(clean.mean()) if len(rows) else None,
            "kept_rows": int(len(kept)), "kept_precision": float(clean[kept].mean()) if len(kept) else None,
            "span_distance": None if span.basis is None else span_distance(span.basis, teacher),
            "estimate": span.estimated_error, "refused": span.refused,
            "discarded": span.discarded}


RULES = {"every row, trimmed 3x (hull_core 1, the default)": {"hull_core": 1.0},
         "trimmed 2x": {"hull_core": 1.0, "hull_trim": 2.0},
         "core 0.8, trimmed 3x": {"hull_core": 0.8},
         "core 0.6, trimmed 3x": {"hull_core": 0.6},
         "core 0.6, trimmed 2x": {"hull_core": 0.6, "hull_trim": 2.0}}


def key_of(record) -> tuple:
    return tuple(record.get(name) for name in ("m", "teacher", "sequences", "theta_norm", "decoded_with",
                                               "residual_tol", "rule"))


def report(records) -> str:
    """The table: one line per set of rows, the span distance under each rule (* refused)."""
    groups = {}
    for record in records:
        key = (record["m"], record["teacher"], record["sequences"], record["decoded_with"],
               record.get("residual_tol") or BodySettings().residual_tol, record["w_sum_error"])
        groups.setdefault(key, {})[record["rule"]] = record
    order = ["clean rows only (oracle)", *RULES]
    lines = ["| m | teacher | rows decoded with, test | rows (precision) | clean rows alone | "
             + " | ".join(order[1:]) + " |", "|" + " --- |" * (4 + len(order))]
    for key in sorted(groups, key=lambda key: (-key[0], key[3] != "learned", key[4], key[1])):
        heads, teacher, _, decoded, tolerance, error = key
        readings = groups[key]
        every = readings[order[1]]
        source = f"learned Ŵ_Σ ({error:.2%} off)" if decoded == "learned" else "true W_Σ"
        spans = [f"{readings[rule]['span_distance']:.3f}{'*' if readings[rule]['refused'] else ''}"
                 if rule in readings else "—" for rule in order]
        lines.append(f"| {heads} | {teacher} | {source}, {tolerance:g} | {every['rows']} "
                     f"({every['precision']:.2f}) | " + " | ".join(spans) + " |")
    return "\n".join(lines)


def cells_table(main_csv: str, branch_csv: str, heads: int = 3, samples: int = 30_000_000) -> str:
    """The ``sculpt-vs-m`` cells of ``branch_csv`` beside the same cells of ``main_csv`` (``mhalearn export``
    tables): K*'s tolerance, rows, precision, the rows its hull discarded and why, span, estimate, test error."""
    def rows_of(path):
        with open(path) as handle:
            return {row["seed"]: row for row in csv.DictReader(handle)
                    if int(row["heads"]) == heads and int(row["samples"]) == samples}
    main_rows, branch_rows = rows_of(main_csv), rows_of(branch_csv)
    if not branch_rows:
        return "no cells"
    lines = ["| teacher | K* | test tolerance (σ̂) | rows found / kept | their precision | hull rows kept (precision) "
             "| rows discarded, by reason | Ŵ_Σ error | span distance | estimate | paper's output, test error | "
             "body phases' time |", "|" + " --- |" * 12]
    spans = {"main": [], "branch": []}
    for seed in sorted(branch_rows):
        for name, row in (("main", main_rows[seed]), ("branch", branch_rows[seed])):
            span = 1.0 if row["refused"] else float(row["span_distance"])  # a refusal counts as 1
            spans[name].append(span)
            branch = name == "branch"
            tolerance = (f"{float(row['kstar_residual_tol']):.4f} ({float(row['noise_estimate']):.4f})" if branch
                         else "0.02")
            kept = f"{row['kept_rows']} ({float(row['kept_precision']):.2f})" if branch else "—"
            discarded = ("; ".join(f"{count} {reason}" for reason, count in json.loads(row["discarded"]).items()
                                   if count) or "none") if branch else "—"
            code = row["provenance.git_commit"][:7] or "source " + row["provenance.source_hash"][:7]
            lines.append(f"| {seed} | {name} ({code}) | {tolerance} | "
                         f"{row['agreement_rows']} / {row['agreement_rows_kept']} | {float(row['precision']):.2f} | "
                         f"{kept} | {discarded} | {100 * float(row['refined_w_sum_error']):.2f} % | {span:.3f} | "
                         f"{float(row['estimated_error']):.3f} | {100 * float(row['test_error']):.2f} % | "
                         f"{float(row['body_seconds']):.0f} s |")
    lines.append("")
    lines += [f"median span distance, {name}: {np.median(values):.3f}" for name, values in spans.items()]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=3)
    parser.add_argument("--seed", type=int, nargs="+", default=[10, 11])
    parser.add_argument("--samples", type=float, default=1e7)
    parser.add_argument("--theta-norm", type=float, default=2.0)
    parser.add_argument("--decode", choices=("learned", "true"), default="learned",
                        help="the rows of the cell's learned Ŵ_Σ, or every row the true W_Σ accepts")
    parser.add_argument("--residual-tol", type=float, help="with --decode true: the agreement test's tolerance "
                        "(default phase 4's); a looser one mixes in rows that are not agreement rows")
    parser.add_argument("--rows", default=os.environ.get("KSTAR_ROWS_CACHE", "results/kstar_rows_cache"),
                        help="where each cell's rows are cached (not committed: the command regenerates them)")
    parser.add_argument("--rule", nargs="*", help="rules to read (default: the clean rows and every rule of RULES)")
    parser.add_argument("--out", default="runs/kstar-weighing/kstar_weighing.jsonl")
    parser.add_argument("--report", action="store_true", help="print the table from --out and stop")
    parser.add_argument("--cells", nargs=2, metavar=("MAIN_CSV", "BRANCH_CSV"),
                        help="print the m = 3 sculpt-vs-m cells of BRANCH_CSV (3·10⁷, 10⁸) beside MAIN_CSV's and stop")
    args = parser.parse_args()
    if args.cells:
        for samples in (30_000_000, 100_000_000):
            print(f"m = 3, n = {samples:.0e}:\n" + cells_table(*args.cells, samples=samples) + "\n")
        return
    if args.report:
        print(report(load_jsonl(args.out)))
        return
    os.makedirs(args.rows, exist_ok=True)
    done = {key_of(record) for record in load_jsonl(args.out)} if os.path.exists(args.out) else set()
    samples = int(args.samples)
    settings = BodySettings()
    for seed in args.seed:
        teacher = teacher_of(args.heads, seed, args.theta_norm)
        kept = cell_rows(args.heads, seed, samples, args.theta_norm, args.decode, args.rows, args.residual_tol)
        rows = kept["rows"]
        rows = rows.subset(np.arange(min(len(rows), settings.max_rows)))  # the first max_rows, as K* keeps them
        error = w_sum_error(kept["w_sum"], teacher)
        sets = {"clean rows only (oracle)": (rows.subset(agreeing_rows(rows, teacher)), {})}
        sets.update({name: (rows, rule) for name, rule in RULES.items()})
        for name, (chosen, rule) in sets.items():
            record = {"m": args.heads, "teacher": seed, "sequences": samples, "theta_norm": args.theta_norm,
                      "decoded_with": args.decode, "residual_tol": args.residual_tol, "w_sum_error": error,
                      "rule": name}
            if (args.rule and name not in args.rule) or key_of(record) in done:
                continue
            record.update(reading(chosen, teacher, dataclasses.replace(settings, **rule)))
            print(json.dumps(record), flush=True)
            with open(args.out, "a") as handle:
                handle.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
