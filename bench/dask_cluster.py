"""SculptLearner on a lazily generated Dask dataset: one worker against two, and one process (issue 21).

An m = 3, d = 12, k = 4 teacher (``sample_teacher(3, 12,
rng=seeded_rng(20_251, 3, seed))``, ‖Θ_i‖_F = 2, as ``sculpt-vs-m``
uses) labels ``--samples`` Boolean sequences drawn block by block on the
workers (``make_dataset(..., chunks=--chunk)``).  The same fit runs on a
``LocalCluster(n_workers=1, threads_per_worker=1)``, then on
``LocalCluster(n_workers=2, threads_per_worker=1)``, then in this process
(Dask's synchronous scheduler).  Printed: each wall time, the ratio of two
workers' to one worker's, the largest difference between the spans, the
refined Ŵ_Σ and the learned Θ of the runs (0: the block passes give the same
bits on any scheduler), and each worker's peak resident memory.

Phases 1–4 stream over the blocks on the workers; phases 5–6 run in this
process on an in-memory sample (mhalearn.learners.dask_data), so the speed-up
is that of the block passes diluted by the rest.

    python bench/dask_cluster.py [--samples 200000] [--chunk 65536] [--seed 0]
"""

import argparse
import os
import sys
import time

# bench/sparse.py would shadow the package ``sparse`` that dask.array imports when it is installed:
# leave this script's folder off the path (this process's and, through spawn, the workers').
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or ".") != os.path.dirname(os.path.abspath(__file__))]

import dask  # noqa: E402  (after the path is set)
import numpy as np  # noqa: E402
from distributed import Client, LocalCluster  # noqa: E402

import mhalearn  # noqa: E402
from mhalearn._memory import peak_memory_mb  # noqa: E402
from mhalearn._progress import progress_bar  # noqa: E402
from mhalearn.attention.teachers import sample_teacher  # noqa: E402
from mhalearn.learners.streams import BLOCK_SIZE  # noqa: E402
from mhalearn.seeding import seeded_rng  # noqa: E402

HEADS, DIM, LENGTH = 3, 12, 4
#: What a fit tells its callback: the start, phases 1, 2, 3, 2 again, 4, the moment route when the body
#: refuses, 5 and 6.
FIT_PHASES = 9


def fit(X, Y, seed: int, label: str) -> tuple[dict, float]:
    """One fit, with a progress display of its phases; its figures and wall time."""
    bar = progress_bar(FIT_PHASES, desc=label, unit="phase")

    def show(phase, result):
        bar.set_postfix(phase=phase)
        bar.update(1)

    start = time.perf_counter()
    try:
        learner = mhalearn.SculptLearner(HEADS, random_state=seed).fit(X, Y, callback=show)
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    report = learner.report_
    figures = {"route": report.route, "w_sum": report.refined_sum.w_sum, "thetas": learner.model_.thetas,
               "basis": None if report.span is None or report.span.basis is None else report.span.basis}
    return figures, seconds


def difference(first: dict, second: dict) -> dict:
    """Largest absolute entrywise difference of each array the two fits share (None where one has none)."""
    return {name: None if first[name] is None or second[name] is None
            else float(np.max(np.abs(first[name] - second[name]))) for name in ("basis", "w_sum", "thetas")}


def on_cluster(X, Y, seed: int, workers: int) -> tuple[dict, float, dict]:
    """The fit on a local cluster of ``workers`` single-threaded worker processes, and their peak memory."""
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        figures, seconds = fit(X, Y, seed, f"{workers} worker{'s' * (workers > 1)}")
        memory = client.run(peak_memory_mb)
    return figures, seconds, memory


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=BLOCK_SIZE, help="sequences per block")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, args.seed))
    X, Y = mhalearn.make_dataset(teacher, args.samples, LENGTH, rng=seeded_rng(args.seed, "dask-cluster"),
                                 chunks=args.chunk)
    print(f"m = {HEADS}, d = {DIM}, k = {LENGTH}, n = {args.samples:,} in {X.numblocks[0]} blocks of "
          f"{args.chunk:,}, seed {args.seed}")
    one, one_seconds, one_memory = on_cluster(X, Y, args.seed, 1)
    two, two_seconds, two_memory = on_cluster(X, Y, args.seed, 2)
    with dask.config.set(scheduler="sync"):
        local, local_seconds = fit(X, Y, args.seed, "one process")
    print(f"route: {one['route']} (1 worker), {two['route']} (2 workers), {local['route']} (one process)")
    print(f"wall time: 1 worker {one_seconds:.1f} s, 2 workers {two_seconds:.1f} s (2 workers / 1 worker = "
          f"{two_seconds / one_seconds:.2f}); one process {local_seconds:.1f} s")
    print(f"max |difference|, 2 workers vs 1: {difference(two, one)}")
    print(f"max |difference|, one process vs 1 worker: {difference(local, one)}")
    for label, memory in (("1 worker", one_memory), ("2 workers", two_memory)):
        print(f"peak memory per worker ({label}): "
              + ", ".join(f"{value:.0f} MB" for value in memory.values()))


if __name__ == "__main__":
    main()
