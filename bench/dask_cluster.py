"""SculptLearner on a lazily generated Dask dataset: one worker against two, and one process (issue 21).

An m = 3, d = 12, k = 4 teacher (``sample_teacher(3, 12,
rng=seeded_rng(20_251, 3, seed))``, ‖Θ_i‖_F = 2, as ``sculpt-vs-m``
uses) labels ``--samples`` Boolean sequences drawn block by block on the
workers (``make_dataset(..., chunks=--chunk)``).  The same fit runs on a
``LocalCluster(n_workers=1, threads_per_worker=1)``, then on
``LocalCluster(n_workers=2, threads_per_worker=1)``, then in this process
(Dask's synchronous scheduler).  Each run's figures are saved in ``--out``
(one ``.npz`` per run, named by samples, chunk, seed and run), so an
interrupted comparison resumes where it stopped and ``--runs`` can run the
configurations one at a time on idle cores.  Printed: each wall time, the ratio of two
workers' to one worker's, the largest difference between the spans, the
refined Ŵ_Σ and the learned Θ of the runs (0: the block passes give the same
bits on any scheduler), each worker's peak resident memory and the body's
span distance to the teacher (read from the saved span after the fit).

Phases 1–4 stream over the blocks on the workers; phases 5–6 run in this
process on an in-memory sample (mhalearn.data.dask_data), so the speed-up
is that of the block passes diluted by the rest.

    python bench/dask_cluster.py [--samples 200000] [--chunk 65536] [--seed 0] [--runs 1 2 local] \
        [--out runs/dask_cluster]
"""

import argparse
import json
import os
import time

import dask
import numpy as np
from distributed import Client, LocalCluster

import mhalearn
from mhalearn._memory import peak_memory_mb
from mhalearn._progress import progress_bar
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.sources import BLOCK_SIZE
from mhalearn.evaluation import span_distance
from mhalearn.learners.report import Phase
from mhalearn.seeding import seeded_rng

HEADS, DIM, LENGTH = 3, 12, 4
#: The phase results a fit tells its callback: the start, phases 1, 2, 3, 2 again, 4, the moment route when the
#: body refuses, 5 and 6 (where a pass stands, ``Phase.PASS``, is not one).
FIT_PHASES = 9


def fit(X, Y, seed: int, label: str) -> tuple[dict, float]:
    """One fit, with a progress display of its phases; its figures and wall time."""
    bar = progress_bar(FIT_PHASES, desc=label, unit="phase")

    def show(phase, result):
        if phase == Phase.PASS:
            return
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


RUNS = ("1", "2", "local")
LABELS = {"1": "1 worker", "2": "2 workers", "local": "one process"}


def run(X, Y, seed: int, name: str) -> dict:
    """One configuration's fit: its figures, wall time and (on a cluster) each worker's peak memory."""
    if name == "local":
        with dask.config.set(scheduler="sync"):
            figures, seconds = fit(X, Y, seed, LABELS[name])
        memory = {}
    else:
        figures, seconds, memory = on_cluster(X, Y, seed, int(name))
    return {**figures, "seconds": seconds, "memory": memory}


def save(path: str, result: dict) -> None:
    """Write one run's figures atomically (a run interrupted while saving leaves no file)."""
    arrays = {name: result[name] for name in ("w_sum", "thetas", "basis") if result[name] is not None}
    meta = json.dumps({"route": result["route"], "seconds": result["seconds"],
                       "memory": {str(key): value for key, value in result["memory"].items()}})
    with open(path + ".partial", "wb") as handle:
        np.savez(handle, meta=np.array(meta), **arrays)
    os.replace(path + ".partial", path)


def load(path: str) -> dict:
    with np.load(path) as saved:
        result = json.loads(str(saved["meta"]))
        for name in ("w_sum", "thetas", "basis"):
            result[name] = saved[name] if name in saved.files else None
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=200_000)
    parser.add_argument("--chunk", type=int, default=BLOCK_SIZE, help="sequences per block")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--runs", nargs="+", choices=RUNS, default=list(RUNS),
                        help="configurations to run now (those already saved in --out are read, not rerun)")
    parser.add_argument("--out", default="runs/dask_cluster", help="folder of the saved runs")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, args.seed))
    X, Y = mhalearn.make_dataset(teacher, args.samples, LENGTH, rng=seeded_rng(args.seed, "dask-cluster"),
                                 chunks=args.chunk)
    print(f"m = {HEADS}, d = {DIM}, k = {LENGTH}, n = {args.samples:,} in {X.numblocks[0]} blocks of "
          f"{args.chunk:,}, seed {args.seed}")
    results = {}
    for name in RUNS:
        path = os.path.join(args.out, f"n{args.samples}_chunk{args.chunk}_seed{args.seed}_{name}.npz")
        if os.path.exists(path):
            results[name] = load(path)
        elif name in args.runs:
            results[name] = run(X, Y, args.seed, name)
            save(path, results[name])
    for name, result in results.items():
        memory = ", ".join(f"{value:.0f} MB" for value in result["memory"].values())
        # The teacher only observes: the distance is read from the saved span after the fit.
        distance = "" if result["basis"] is None else f", span distance {span_distance(result['basis'], teacher):.3f}"
        print(f"{LABELS[name]}: route {result['route']}{distance}, wall time {result['seconds']:.1f} s"
              + (f", peak memory per worker {memory}" if memory else ""))
    if "1" in results and "2" in results:
        print(f"2 workers / 1 worker = {results['2']['seconds'] / results['1']['seconds']:.2f}")
    reference = next((name for name in RUNS if name in results), None)
    for name in results:
        if name != reference:
            print(f"max |difference|, {LABELS[name]} vs {LABELS[reference]}: "
                  f"{difference(results[name], results[reference])}")


if __name__ == "__main__":
    main()
