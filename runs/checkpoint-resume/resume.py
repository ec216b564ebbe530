"""An interrupted m = 3 fit, resumed from its checkpoint: what it saves, and the bits it gives.

The ``sculpt-vs-m`` teacher ``seed`` (m = 3, d = 12, k = 4) labels ``--samples``
Boolean sequences drawn block by block (``make_dataset(..., chunks=...)``),
and ``SculptLearner(3, random_state=seed)`` fits them three times under the
threaded scheduler of this process:

1. without a checkpoint, uninterrupted (the reference);
2. with ``checkpoint=DIR``, interrupted (``KeyboardInterrupt``, as Ctrl-C)
   once the phase ``--stop-after`` has ended;
3. the same call again, which resumes after the last phase kept.

It prints the wall time of each, the phases the third loaded (and the
seconds they took when computed, which its report adds to its own), the seconds
the interruption lost (run 2 + run 3 − run 1) and the largest difference
between run 3's parameters and run 1's (0: the same bits).

    python runs/checkpoint-resume/resume.py [--samples 1e7] [--seed 0] [--stop-after refined_sum]
        [--dir DIR]
"""

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

import mhalearn
from mhalearn.attention.teachers import sample_teacher
from mhalearn.seeding import seeded_rng

HEADS, DIM, LENGTH = 3, 12, 4


class StopAfter:
    """Interrupts the fit once ``phase`` has ended."""

    def __init__(self, phase: str):
        self.phase = phase

    def __call__(self, phase, result):
        if phase == self.phase:
            raise KeyboardInterrupt


def _parameters(layer):
    """Θ and W of a learned layer."""
    return layer.thetas, layer.ws


def timed_fit(X, Y, seed: int, **options):
    start = time.perf_counter()
    learner = mhalearn.SculptLearner(HEADS, random_state=seed, **options).fit(X, Y)
    return learner, time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=float, default=1e7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stop-after", default="refined_sum",
                        choices=["crude_sum", "sculpt", "refined_sum", "span"])
    parser.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "mhalearn-resume"),
                        help="checkpoint directory (emptied first; default: one under the temporary directory)")
    args = parser.parse_args()
    samples, seed = int(args.samples), args.seed
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, seed))
    X, Y = mhalearn.make_dataset(teacher, samples, LENGTH, rng=seeded_rng(seed, "sculpt-m3"), chunks=1 << 16)
    shutil.rmtree(args.dir, ignore_errors=True)
    print(f"m = {HEADS}, d = {DIM}, k = {LENGTH}, n = {samples:,}, teacher {seed}, interrupted after "
          f"{args.stop_after}", flush=True)

    reference, reference_seconds = timed_fit(X, Y, seed)
    print(f"1. uninterrupted: {reference_seconds:.1f} s, route {reference.report_.route}", flush=True)

    start = time.perf_counter()
    try:
        mhalearn.SculptLearner(HEADS, random_state=seed, checkpoint=args.dir).fit(
            X, Y, callback=StopAfter(args.stop_after))
    except KeyboardInterrupt:
        pass
    interrupted_seconds = time.perf_counter() - start
    print(f"2. interrupted after {args.stop_after}: {interrupted_seconds:.1f} s", flush=True)

    resumed, resumed_seconds = timed_fit(X, Y, seed, checkpoint=args.dir)
    report = resumed.report_
    print(f"3. resumed: {resumed_seconds:.1f} s, loaded {', '.join(report.resumed)} ({report.kept_seconds:.1f} s "
          f"when computed; report: {report.total_seconds:.1f} s run + {report.kept_seconds:.1f} s kept = "
          f"{report.total_seconds + report.kept_seconds:.1f} s, run 1's {reference.report_.total_seconds:.1f} s)",
          flush=True)

    difference = max(float(np.max(np.abs(mine - theirs))) for model in ("model_", "least_squares_model_")
                     for mine, theirs in zip(_parameters(getattr(resumed, model)),
                                             _parameters(getattr(reference, model))))
    lost = interrupted_seconds + resumed_seconds - reference_seconds
    print(f"seconds the interruption cost: {lost:.1f} (run 2 + run 3 − run 1; "
          f"{lost / reference_seconds:.1%} of a fit)")
    print(f"largest |difference| of the resumed fit's Θ, W (paper's output and polished) from run 1: {difference:g}")
    print(f"route: {resumed.report_.route} (run 1: {reference.report_.route})")


if __name__ == "__main__":
    main()
