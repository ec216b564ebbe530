"""Which of an m = 4 cell's K* rows carry its slabs, and the span those rows read.

An `m4-fixed` cell of `sculpt-vs-m` (m = 4, d = 12, k = 4, n = 5·10⁹) resumed from a copy of its
checkpoint, taken before the finished cell removed it (the phases load, none is recomputed when the
K* and span files were kept), run on the code the cell ran on (the checkpoint's key holds the code):

    PYTHONPATH=/path/to/047cf27 python runs/sculpt-vs-m/kstar_m4.py --seed 2 --checkpoints DIR \
        --out runs/sculpt-vs-m/kstar-m4-seed2.json

It prints, against the teacher (evaluation only: nothing here feeds the fit):

1. K*'s rows and their precision; the rows with slabs (a decoded weight ≥ the slab threshold on a
   token other than the top one) and theirs; the rows the trimmed hull kept and theirs;
2. the rows by their largest weight off the top token, agreement rows and others;
3. the span distance of the hull read from K*'s rows at K*'s threshold and at fixed ones, from all
   the rows and from the agreement rows alone (an oracle no learner has), with the body's estimate;
4. the same from the candidate rows K*'s tolerance accepts, capped as K* caps them (``max_rows``), at
   five times the cap and uncapped (``row_caps``);
5. K* read from the candidate rows within tighter tolerances than the one the noise estimate gave
   (the labels have no noise), capped and uncapped (``tolerances``).
"""

import argparse
import json
import sys

import numpy as np
from threadpoolctl import threadpool_limits

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.checkpoint import open_checkpoint
from mhalearn.evaluation.observer import agreeing_rows, span_distance
from mhalearn.learners.chen_li import BodySettings, sculpt_span
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import kstar_slab_rule, slab_constraints, top_differences
from mhalearn.seeding import seeded_rng

HEADS, DIM, LENGTH, SAMPLES = 4, 12, 4, 5_000_000_000
WEIGHT_EDGES = (0.0, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def largest_off_top(rows) -> np.ndarray:
    """Each row's largest decoded weight on a token that differs from its top token (0 if none does)."""
    top, _, distinct = top_differences(rows)
    weights = np.where(distinct, rows.pattern, 0.0)
    weights[np.arange(len(top)), top] = 0.0
    return weights.max(axis=1)


def hull_reading(rows, w_min: float, settings: BodySettings, teacher) -> dict:
    """The span phase 4 reads from ``rows`` with every token of weight ≥ ``w_min`` a slab."""
    slabs = slab_constraints(rows, w_min=w_min, kappa=settings.slab_width, t_min=settings.slab_floor)
    reading = read_span(slabs, HEADS, settings, np.random.default_rng(0))
    distance = None if reading.basis is None else span_distance(reading.basis, teacher)
    return {"rows": len(rows), "w_min": w_min, "slab_rows": int(len(np.unique(slabs.slab_row))),
            "equalities": int(slabs.equalities), "span_distance": distance,
            "estimated_error": reading.estimated_error, "median_error": reading.median_error,
            "refused": reading.refused}


def row_cap_reading(refined, tolerance: float, cap: int | None, settings: BodySettings, teacher,
                    oracle: bool = True) -> dict:
    """K* read as phase 4 reads it but from the first ``cap`` of the candidate rows within ``tolerance`` (None:
    all of them), at K*'s own threshold rule, and (``oracle``) its agreement rows alone at fixed thresholds."""
    rows = refined.candidates.accepted_under(refined.w_sum, residual_tol=tolerance,
                                             simplex_tol=settings.simplex_tol, max_rows=cap)
    agree = agreeing_rows(rows, teacher)
    threshold = kstar_slab_rule(rows, settings)["w_min"]
    reading = {"tolerance": tolerance, "cap": cap, "rows": len(rows), "found": int(rows.found),
               "precision": float(agree.mean()), "default_rule": hull_reading(rows, threshold, settings, teacher)}
    if oracle:
        reading["agreement_rows_only"] = [hull_reading(rows.subset(agree), w_min, settings, teacher)
                                          for w_min in (settings.kstar_w_max, 0.05)]
    return reading


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--checkpoints", required=True, help="the cell's checkpoint directory (its copy)")
    parser.add_argument("--samples", type=float, default=SAMPLES, help="the cell's n (default 5e9)")
    parser.add_argument("--out", help="write the figures as JSON here too")
    args = parser.parse_args()
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, args.seed))
    samples = int(args.samples)
    source = TeacherSource(teacher, samples, LENGTH, seed=args.seed)
    rng = seeded_rng(args.seed, HEADS, samples)
    settings = BodySettings()
    with threadpool_limits(limits=1, user_api="blas"):
        checkpoint = open_checkpoint(args.checkpoints, source, HEADS, settings, rng)
        phases = sculpt_span(source, HEADS, settings, rng, checkpoint=checkpoint)
        print(f"resumed: {', '.join(checkpoint.resumed)}", file=sys.stderr)
        final, span = phases.sculpt[-1], phases.span
        rows, slabs = final.rows, final.slabs
        agree = agreeing_rows(rows, teacher)
        slab_rows = np.unique(slabs.slab_row)
        kept = np.asarray(span.kept)
        figures = {
            "seed": args.seed, "resumed": list(checkpoint.resumed),
            "kstar_rows": len(rows), "kstar_precision": float(agree.mean()),
            "slab_threshold": final.slab_threshold, "equalities": int(slabs.equalities),
            "slab_rows": len(slab_rows), "slab_rows_precision": float(agree[slab_rows].mean()),
            "hull_rows": len(kept), "hull_rows_precision": float(agree[kept].mean()) if len(kept) else None,
            "span_distance": None if span.basis is None else span_distance(span.basis, teacher),
            "estimated_error": span.estimated_error,
            "median_error": span.median_error, "refused": span.refused,
        }
        off_top = largest_off_top(rows)
        bins = np.digitize(off_top, WEIGHT_EDGES[1:-1])
        figures["by_largest_off_top_weight"] = [
            {"from": WEIGHT_EDGES[b], "to": WEIGHT_EDGES[b + 1], "agreement_rows": int(np.sum(agree & (bins == b))),
             "other_rows": int(np.sum(~agree & (bins == b)))} for b in range(len(WEIGHT_EDGES) - 1)]
        subsets = (("all", rows), ("agreement rows only", rows.subset(agree)))
        figures["readings"] = [{"rows_used": name, **hull_reading(subset, w_min, settings, teacher)}
                               for w_min in sorted({final.slab_threshold, 0.05, settings.w_min}, reverse=True)
                               for name, subset in subsets]
        figures["row_caps"] = [row_cap_reading(phases.refined_sum, final.residual_tol, cap, settings, teacher)
                               for cap in (settings.max_rows, 5 * settings.max_rows, None)]
        # K*'s tolerance widened to the noise estimated from noise-free labels: the noise-free test's
        # tolerance and tighter ones instead, read from the same candidate rows.
        figures["tolerances"] = [row_cap_reading(phases.refined_sum, tolerance, cap, settings, teacher, oracle=False)
                                 for tolerance in (0.01, 0.015, settings.residual_tol)
                                 for cap in (settings.max_rows, None)]
    print(json.dumps(figures, indent=1))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(figures, handle, indent=1)


if __name__ == "__main__":
    main()
