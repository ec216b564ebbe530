"""The README's path timed: ``make_dataset(..., chunks=65 536)``, then a ``SculptLearner`` fit (the paper's output).

A held-out m = 3, d = 12, k = 4 teacher (``sample_teacher(3, 12,
rng=seeded_rng(20_251, 3, --teacher))``; the sculpt-vs-m teachers are seeds
0–2, so the default 7 is none of them) labels ``--samples`` Boolean sequences
drawn lazily (``make_dataset(teacher, samples, 4, rng=--seed, chunks=65 536)``);
on Dask's default threaded scheduler, in this process, one after the other:

1. a *labelling pass*, ``dask.compute(X.sum(), Y.sum())``;
2. the fit, ``SculptLearner(3, search=SearchSettings(refine="none"),
   random_state=--seed).fit(X, Y)`` (``refine="none"`` a parameter of its own
   in a checkout before the settings were grouped), timed around the call
   (the fit's wall time);

after a fit on 3 blocks, so that neither loads a kernel.  Printed: the load
(``os.getloadavg``), both wall times, the fit in labelling passes,
``report_.table()``, the sum of its phases' seconds against the fit's wall
time, and the span and W_Σ figures (to compare runs bit for bit: the hash of
the span basis and of the least-squares model).  ``--profile FILE`` writes the
fit's ``cProfile`` (the calling thread's functions; Dask's threads wait in
``dask.compute``) and prints its 40 costliest functions by cumulative time.
``--json FILE`` appends one JSON line of the figures.

    python bench/readme_path.py [--samples 3e7] [--teacher 7] [--seed 0] [--profile FILE] [--json FILE]
"""

import argparse
import cProfile
import hashlib
import inspect
import json
import os
import pstats
import sys
import time

import dask
import numpy as np

import mhalearn
from mhalearn.attention.teachers import sample_teacher
from mhalearn.seeding import seeded_rng

HEADS, DIM, LENGTH, CHUNK = 3, 12, 4, 65_536


def digest(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def make_learner(random_state: int, prefix_samples: int | None = None):
    """SculptLearner(3) returning the paper's output, in this checkout's parameters (grouped settings or not)."""
    if "body" in inspect.signature(mhalearn.SculptLearner).parameters:
        return mhalearn.SculptLearner(HEADS, body=mhalearn.BodySettings(prefix_samples=prefix_samples),
                                      search=mhalearn.SearchSettings(refine="none"), random_state=random_state)
    return mhalearn.SculptLearner(HEADS, refine="none", prefix_samples=prefix_samples, random_state=random_state)


def phase_sum(report) -> float:
    """The seconds of every phase the report lists, and of its steps outside the phases where it has them."""
    if hasattr(report, "attributed_seconds"):
        return report.attributed_seconds()
    return sum(result.seconds for _, result in report.phases() if result is not None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=float, default=3e7)
    parser.add_argument("--teacher", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    samples = int(args.samples)
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, args.teacher))
    load = os.getloadavg()
    with dask.config.set(scheduler="threads"):
        X, Y = mhalearn.make_dataset(teacher, 3 * CHUNK, LENGTH, rng=1, chunks=CHUNK)
        make_learner(random_state=0, prefix_samples=CHUNK).fit(X, Y)
        X, Y = mhalearn.make_dataset(teacher, samples, LENGTH, rng=args.seed, chunks=CHUNK)
        start = time.perf_counter()
        dask.compute(X.sum(), Y.sum())
        labelling = time.perf_counter() - start
        print(f"labelling pass {labelling:.2f} s", file=sys.stderr, flush=True)
        learner = make_learner(random_state=args.seed)
        profile = cProfile.Profile() if args.profile else None
        start = time.perf_counter()
        if profile is not None:
            profile.enable()
        learner.fit(X, Y)
        if profile is not None:
            profile.disable()
        fit = time.perf_counter() - start
    report = learner.report_
    phases = phase_sum(report)
    print(f"load before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; after: "
          + " ".join(f"{value:.2f}" for value in os.getloadavg()))
    print(f"samples {samples:.0e}, teacher seeded_rng(20_251, 3, {args.teacher}), make_dataset rng {args.seed}")
    print(f"labelling pass {labelling:.2f} s; whole fit {fit:.2f} s = {fit / labelling:.2f} labelling passes")
    print(report.table())
    print(f"phase seconds {phases:.2f} s of the fit's wall time {fit:.2f} s ({phases / fit:.1%}); "
          f"report total {report.total_seconds:.2f} s")
    span = report.span
    print(f"route {report.route}; span basis {digest(span.basis) if span.basis is not None else None}; "
          f"refined W_sum {digest(report.refined_sum.w_sum)}; least-squares model "
          f"{digest(learner.least_squares_model_.ws)} {digest(learner.least_squares_model_.thetas)}")
    X_test = mhalearn.boolean_inputs(20_000, LENGTH, DIM, rng=seeded_rng(args.teacher, "test"))
    error = mhalearn.relative_error(learner.least_squares_model_, teacher, X_test)
    distance = None if span.basis is None else mhalearn.evaluation.span_distance(span.basis, teacher)
    print(f"test relative error {error:.6g}; span distance {distance}")
    if profile is not None:
        profile.dump_stats(args.profile)
        pstats.Stats(args.profile).sort_stats("cumulative").print_stats(40)
    if args.json:
        with open(args.json, "a") as handle:
            handle.write(json.dumps({"samples": samples, "teacher": args.teacher, "seed": args.seed,
                                     "labelling_seconds": labelling, "fit_seconds": fit, "phase_seconds": phases,
                                     "passes": fit / labelling, "load": load, "table": report.table(),
                                     "span": digest(span.basis) if span.basis is not None else None,
                                     "test_error": error}) + "\n")


if __name__ == "__main__":
    main()
