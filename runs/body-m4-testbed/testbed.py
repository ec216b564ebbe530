"""Store the rows an m = 4 ``sculpt-vs-m`` cell finds for K*, once, with the oracle's flag beside them.

Runs phases 1–4 of the body (:func:`~mhalearn.learners.chen_li.sculpt_span`, the body's defaults) on the
``sculpt-vs-m`` teacher ``sample_teacher(m, d, rng=seeded_rng(20_251, m, seed))``, d = 12 (``--dim``), k = 4,
over a stream of ``--samples`` sequences, and writes (compressed npz):

- every candidate row K*'s tolerance accepts under the refined Ŵ_Σ (all of them, not the first
  ``max_rows``): ``tokens`` (±1 int8), ``query``, ``label``, ``pattern``, ``spread``, ``residual``,
  ``violation``, in stream (block) order; ``w_sum`` (Ŵ_Σ), ``tolerance`` (K*'s residual tolerance),
  ``noise`` (σ̂), ``scanned`` (rows of the stream);
- the body's own reading for comparison: ``body_span_distance``, ``body_estimate``, ``body_median``,
  ``body_refused`` (a string, "" when accepted);
- beside them, never read by a learner: ``oracle_agreement`` (every teacher head within the observer's
  tolerance of the decoded pattern), ``oracle_thetas`` and ``oracle_w_sum`` (the teacher).

Resumable: with ``--checkpoints DIR`` a rerun resumes after the last phase or pass wave kept
(:mod:`mhalearn.data.checkpoint`).  Run niced on one thread::

    NUMBA_NUM_THREADS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 nice -n 10 \\
        python runs/body-m4-testbed/testbed.py --seed 0 --samples 3e8 --checkpoints /work/testbed/ckpt \\
        --out /work/testbed/m4-seed0-3e8.npz
"""

import argparse
import json
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.checkpoint import open_checkpoint
from mhalearn.evaluation.observer import agreeing_rows, span_distance
from mhalearn.learners.chen_li import BodySettings, sculpt_span
from mhalearn.learners.chen_li.agreement_passes import first_agreement_rows
from mhalearn.learners.report import Notifier, StreamProgress
from mhalearn.seeding import seeded_rng

DIM, LENGTH = 12, 4


def testbed_teacher(heads: int, seed: int, dim: int = DIM):
    """The ``sculpt-vs-m`` random teacher of (m, seed) (at another d: the same draw at that dimension)."""
    return sample_teacher(heads, dim, rng=seeded_rng(20_251, heads, seed))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--dim", type=int, default=DIM, help="token dimension d (sculpt-vs-m's: 12)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--samples", type=float)
    parser.add_argument("--checkpoints", help="resumable checkpoint directory")
    parser.add_argument("--out", help="the npz to write")
    parser.add_argument("--summary", help="append the store's summary as a JSON line here")
    parser.add_argument("--report", help="print the table of a summary jsonl")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    if args.seed is None or args.samples is None or args.out is None:
        parser.error("--seed, --samples and --out are required to write a store")
    heads, samples = args.heads, int(args.samples)
    if args.dim <= LENGTH:
        parser.error(f"--dim must exceed the sequence length {LENGTH}: the agreement test needs d > k")
    teacher = testbed_teacher(heads, args.seed, args.dim)
    source = TeacherSource(teacher, samples, LENGTH, seed=args.seed)
    rng = seeded_rng(args.seed, heads, samples)
    settings = BodySettings()
    passes = StreamProgress(interval=300.0, lines=True,
                            desc=f"testbed m = {heads}, d = {args.dim}, seed {args.seed}, n = {samples:.0e}: ")
    start = time.perf_counter()
    with threadpool_limits(limits=1, user_api="blas"):
        checkpoint = open_checkpoint(args.checkpoints, source, heads, settings, rng)
        phases = sculpt_span(source, heads, settings, rng, Notifier(passes), checkpoint)
        final, span, refined = phases.sculpt[-1], phases.span, phases.refined_sum
        everything = np.iinfo(np.int64).max
        if refined.candidates is not None:
            rows = refined.candidates.accepted_under(refined.w_sum, residual_tol=final.residual_tol,
                                                     simplex_tol=settings.simplex_tol, max_rows=everything)
        else:  # a stream no longer than phases 1-3's prefix: K*'s rows are a pass over it
            rows = first_agreement_rows(source, refined.w_sum, residual_tol=final.residual_tol,
                                        simplex_tol=settings.simplex_tol, max_rows=source.samples * LENGTH,
                                        rng=np.random.default_rng(0))
        oracle = agreeing_rows(rows, teacher)
    seconds = time.perf_counter() - start
    distance = None if span.basis is None else span_distance(span.basis, teacher)
    np.savez_compressed(
        args.out, tokens=np.asarray(rows.tokens).astype(np.int8), query=rows.query, label=rows.label,
        pattern=rows.pattern, spread=rows.spread, residual=rows.residual, violation=rows.violation,
        w_sum=refined.w_sum, tolerance=final.residual_tol, noise=np.nan if final.noise is None else final.noise,
        scanned=rows.scanned, heads=heads, seed=args.seed, samples=samples,
        body_span_distance=np.nan if distance is None else distance,
        body_estimate=np.nan if span.estimated_error is None else span.estimated_error,
        body_median=np.nan if span.median_error is None else span.median_error,
        body_refused=span.refused or "", oracle_agreement=oracle,
        oracle_thetas=teacher.thetas, oracle_w_sum=teacher.projection_sum)
    summary = {"heads": heads, "dim": args.dim, "seed": args.seed, "samples": samples, "rows": len(rows),
               "oracle_agreement_rows": int(oracle.sum()), "precision": float(oracle.mean()) if len(rows) else None,
               "tolerance": final.residual_tol, "noise": final.noise, "kstar_rows": final.accepted_rows,
               "body_span_distance": distance, "body_estimate": span.estimated_error, "body_median": span.median_error,
               "body_refused": span.refused, "resumed": list(checkpoint.resumed), "seconds": seconds}
    print(json.dumps(summary), file=sys.stderr)
    if args.summary:
        with open(args.summary, "a") as handle:
            print(json.dumps({"store": args.out, **summary}), file=handle)


def report(path) -> None:
    """The stores' table: rows found, their precision, K*'s tolerance and σ̂, and the body's own reading."""
    print("| m | teacher | n | rows found | agreement rows | precision | K*'s tolerance (σ̂) | body: span | "
          "estimate (median) | refused | hours |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for line in open(path):
        r = json.loads(line)
        shape = "" if r.get("dim", DIM) == DIM else f" (d = {r['dim']})"
        print(f"| {r['heads']}{shape} | {r['seed']} | {r['samples']:.0e} | {r['rows']} | "
              f"{r['oracle_agreement_rows']} | "
              f"{r['precision']:.3f} | {r['tolerance']:.3f} ({r['noise']:.3f}) | {r['body_span_distance']:.3f} | "
              f"{r['body_estimate']:.3f} ({r['body_median']:.3f}) | {'yes' if r['body_refused'] else 'no'} | "
              f"{r['seconds'] / 3600:.2f} |")


if __name__ == "__main__":
    main()
