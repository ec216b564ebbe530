"""How K*'s slab threshold was chosen: phase 4's span from development rows, for fixed and raised thresholds.

On a token of small decoded weight the heads' log-ratios can differ by
nats on a row that passes the agreement test, so its slab makes the hull
thicker than directions the rows hardly touch (runs/kstar-oracle/README.md, "Why K*
does not read the span at m = 4").  K* therefore raises the weight at and
above which a token gives a slab while it keeps at least ``kstar_slabs``
slabs, up to ``kstar_w_max``
(:func:`~mhalearn.learners.chen_li.slabs.kstar_weight_threshold`).  This
bench reads, on agreement rows of **development** teachers
(``sample_teacher(m, 12, rng=500 + seed)``, k = 4, never evaluated) decoded
with the true W_Σ (phase 4's tolerances; at most ``max_rows`` of them, as
K* keeps), the span that phase 4
(:func:`~mhalearn.learners.chen_li.phase4_span.read_span`, default settings
otherwise) reads

- at fixed thresholds (every token of weight ≥ w gives a slab), and
- under the rule, for a grid of (slabs wanted, highest threshold),

from all the rows and from the first half of them.  The defaults (8d² =
1 152 slabs wanted, at most 0.1) were chosen from these rows.

    python runs/kstar-threshold/kstar_threshold.py --cells 2:1e5:0,1,2 2:1e6:0,1 3:1e7:0,1,2 4:3e8:0,1,2 --cache DIR
    python runs/kstar-threshold/kstar_threshold.py --report     # the tables, from kstar_threshold.jsonl beside it

``--cache DIR`` keeps each teacher's decoded rows (a pickle per teacher and
n), so a rerun reads them again instead of labelling 3·10⁸ sequences (about
20 min a teacher at m = 4 on one core).  Each reading is appended to
``--out`` as JSON; a rerun skips those it holds.
"""

import argparse
import json
import os
import pickle
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.evaluation import span_distance
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.agreement_passes import find_agreement_rows
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import kstar_weight_threshold, slab_constraints

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl  # noqa: E402

#: Development teachers: sample_teacher(m, 12, rng=DEVELOPMENT + seed).
DEVELOPMENT = 500
FIXED = (0.02, 0.03, 0.04, 0.05, 0.07, 0.1)
WANTED = (576, 1152, 2304)
HIGHEST = (0.07, 0.1, 1.0)


def development_rows(heads, samples, seed, settings, cache):
    """The agreement rows of development teacher ``seed`` among ``samples`` sequences, decoded with its true
    W_Σ, and the teacher."""
    teacher = sample_teacher(heads, 12, rng=DEVELOPMENT + seed)
    path = cache and os.path.join(cache, f"dev_m{heads}_s{seed}_{samples:.0e}.pickle")
    if path and os.path.exists(path):
        with open(path, "rb") as handle:
            return pickle.load(handle)["rows"], teacher
    start = time.perf_counter()
    rows = find_agreement_rows(TeacherSource(teacher, samples, 4, seed=seed), teacher.projection_sum,
                               residual_tol=settings.residual_tol, simplex_tol=settings.simplex_tol,
                               max_rows=10**7)
    print(f"m = {heads}, seed {seed}, n = {samples:.0e}: {len(rows)} rows ({time.perf_counter() - start:.0f} s)",
          flush=True)
    if path:
        os.makedirs(cache, exist_ok=True)
        with open(path, "wb") as handle:
            pickle.dump({"rows": rows, "thetas": teacher.thetas}, handle)
    return rows, teacher


def reading(rows, teacher, settings, threshold):
    """Phase 4's span from ``rows`` with every token of weight ≥ ``threshold`` a slab."""
    chosen = replace(settings, w_min=threshold)
    slabs = slab_constraints(rows, **chosen.slab_rule())
    span = read_span(slabs, teacher.heads, chosen, np.random.default_rng(0))
    return {"threshold": threshold, "equalities": int(slabs.equalities),
            "span_distance": None if span.basis is None else span_distance(span.basis, teacher),
            "estimate": span.estimated_error, "refused": span.refused}


def readings(heads, samples, seed, rows, teacher, settings):
    """Every reading of one teacher's rows: all of them (up to ``max_rows``) and the first half."""
    rows = rows.subset(np.arange(min(len(rows), settings.max_rows)))
    for part, chosen in (("all", rows), ("first half", rows.subset(np.arange(len(rows) // 2)))):
        base = {"m": heads, "samples": samples, "seed": seed, "part": part, "rows": len(chosen)}
        for threshold in FIXED:
            yield {**base, "rule": "fixed", **reading(chosen, teacher, settings, threshold)}
        for wanted in WANTED:
            for highest in HIGHEST:
                threshold = kstar_weight_threshold(chosen, w_min=settings.w_min, slabs_wanted=wanted, w_max=highest)
                yield {**base, "rule": "raised", "wanted": wanted, "highest": highest,
                       **reading(chosen, teacher, settings, threshold)}


def report(records):
    """One line per set of rows, one column per rule: the span distance phase 4 reads."""
    def figure(record):
        if record["span_distance"] is None:
            return "—"
        return f"{record['span_distance']:.3f}" + ("*" if record["refused"] else "")

    rules = [("fixed", t) for t in FIXED] + [("raised", w, h) for w in WANTED for h in HIGHEST]
    header = ["m", "n", "seed", "rows read", "rows"] + [
        f"≥ {rule[1]}" if rule[0] == "fixed" else f"{rule[1]} wanted, ≤ {rule[2]}" for rule in rules]
    print("| " + " | ".join(header) + " |\n|" + " --- |" * len(header))
    for key in dict.fromkeys((r["m"], r["samples"], r["seed"], r["part"]) for r in records):
        chosen = {_rule(r): r for r in records if (r["m"], r["samples"], r["seed"], r["part"]) == key}
        first = next(iter(chosen.values()))
        cells = [figure(chosen[rule]) if rule in chosen else "" for rule in rules]
        print("| " + " | ".join([str(key[0]), f"{key[1]:.0e}", str(key[2]), key[3], str(first["rows"])] + cells)
              + " |")


def _rule(record):
    return ("fixed", record["threshold"]) if record["rule"] == "fixed" else ("raised", record["wanted"],
                                                                             record["highest"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cells", nargs="+", default=[],
                        help="m:n:seeds, e.g. 4:3e8:0,1,2 (development teachers, n sequences each)")
    parser.add_argument("--cache", help="a directory keeping each teacher's decoded rows")
    parser.add_argument("--out", default="runs/kstar-threshold/kstar_threshold.jsonl")
    parser.add_argument("--report", action="store_true", help="print the table from --out and stop")
    args = parser.parse_args()
    records = load_jsonl(args.out)
    if args.report:
        report(records)
        return
    done = {(r["m"], r["samples"], r["seed"]) for r in records}
    settings = BodySettings()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    for cell in args.cells:
        heads, samples, seeds = cell.split(":")
        for seed in map(int, seeds.split(",")):
            key = (int(heads), int(float(samples)), seed)
            if key in done:
                continue
            rows, teacher = development_rows(*key[:2], seed, settings, args.cache)
            with open(args.out, "a") as handle:
                for record in readings(*key, rows, teacher, settings):
                    handle.write(json.dumps(record) + "\n")
            print(f"  m = {key[0]}, n = {key[1]:.0e}, seed {seed}: read", flush=True)


if __name__ == "__main__":
    main()
