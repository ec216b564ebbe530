"""Is it the agreement rows or Ŵ_Σ that starves the body at m ≥ 3?  An oracle check.

Decodes n = 10⁶ sequences of the ``sculpt-vs-m`` teachers (m = 3 and 4,
seeds 0–2) with the *true* W_Σ and SculptLearner's absolute tolerance,
builds K*'s slabs as phase 2 does (:func:`kstar_slab_rule`: the weight
threshold raised from w_min while K* keeps ``kstar_slabs_for(d)`` slabs)
and reads the affine hull: agreement rows,
their precision, equalities, the share of constraints the heads satisfy,
and — with at least d² equalities — the span distance and the gap between
long and thin directions.  The teacher is used to compute the estimate here,
so this is a diagnostic, not a learner.

    python runs/kstar-oracle/agreement_oracle.py [--samples 1000000] [--heads 3,4]
        [--out runs/kstar-oracle/agreement_oracle.jsonl]

Each line is also appended to ``--out`` as JSON (a rerun skips the lines it holds
and prints them again), so ``rate`` — agreement rows per sequence under the
true W_Σ — stands beside the learned rate of the ``sculpt-vs-m`` cell of the
same stream (its ``agreement_rows`` / n).
"""

import argparse
import json
import os

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.evaluation import agreement_precision, span_distance, teacher_feasible_fraction
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.agreement_passes import find_agreement_rows
from mhalearn.learners.chen_li.phase4_span import read_affine_hull, span_basis
from mhalearn.learners.chen_li.slabs import kstar_slab_rule, slab_constraints
from mhalearn.seeding import seeded_rng


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--heads", default="3,4")
    parser.add_argument("--out", default="runs/kstar-oracle/agreement_oracle.jsonl")
    args = parser.parse_args()
    settings = BodySettings()
    done = {}
    if os.path.exists(args.out):
        with open(args.out) as handle:
            done = {(row["heads"], row["seed"], row["samples"]): row for row in map(json.loads, handle) if row}
    for heads in (int(m) for m in args.heads.split(",")):
        for seed in (0, 1, 2):
            if (heads, seed, args.samples) in done:
                print(done[heads, seed, args.samples]["line"], flush=True)
                continue
            # The teachers and streams of the sculpt-vs-m cells (mhalearn/experiments/sculpt_vs_m.py).
            teacher = sample_teacher(heads, 12, rng=seeded_rng(20_251, heads, seed))
            source = TeacherSource(teacher, args.samples, 4, seed=seed)
            rows = find_agreement_rows(source, teacher.projection_sum, residual_tol=settings.residual_tol,
                                       simplex_tol=settings.simplex_tol, max_rows=settings.max_rows)
            rule = kstar_slab_rule(rows, settings)
            slabs = slab_constraints(rows, **rule)
            line = (f"m = {heads}, seed {seed}, n = {args.samples}, true W_Σ: {rows.found} agreement rows "
                    f"(precision {agreement_precision(rows, teacher):.2f}), {slabs.equalities} equalities "
                    f"(K*'s weight threshold {rule['w_min']:.3f}), "
                    f"heads satisfy {teacher_feasible_fraction(slabs, teacher):.3f} of the constraints")
            if slabs.equalities >= teacher.dim ** 2:
                centre, long_directions, info = read_affine_hull(slabs, heads)
                distance = span_distance(span_basis(centre, long_directions, heads), teacher)
                line += f"; span distance {distance:.3f}, gap {info['spectral_gap']:.2f}"
            print(line, flush=True)
            row = {"heads": heads, "seed": seed, "samples": args.samples, "found": int(rows.found),
                   "rate": rows.found / args.samples, "equalities": int(slabs.equalities),
                   "threshold": rule["w_min"], "line": line}
            os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
            with open(args.out, "a") as handle:
                handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
