"""Runtime of a finished sweep, from the per-cell seconds its results file stores.

Prints, for one experiment of a results file: the number of cells, the sum
of their seconds (each cell ran on one core: NUMBA_NUM_THREADS=1, one BLAS
thread), the longest cell, the wall time the cells would take on k cores
(greedy longest-first assignment of the measured cell times to k workers —
a projection, not a measurement) and the span between the first and the
last stored row (the measured wall time when the sweep ran in one go).

    python tools/sweep_runtime.py results/sparse.db sparse-variables
"""

import argparse
import heapq
from datetime import datetime
from pathlib import Path

from mhalearn.experiments.store import ResultStore


def projected_wall(seconds: list[float], workers: int) -> float:
    """Makespan of the longest-processing-time-first assignment of ``seconds`` to ``workers`` machines."""
    loads = [0.0] * workers
    heapq.heapify(loads)
    for value in sorted(seconds, reverse=True):
        heapq.heappush(loads, heapq.heappop(loads) + value)
    return max(loads)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("db", type=Path)
    parser.add_argument("experiment")
    args = parser.parse_args()
    with ResultStore(args.db, readonly=True) as store:
        records = list(store.iter_records(args.experiment))
    if not records:
        raise SystemExit(f"{args.db} holds no rows of {args.experiment!r}")
    seconds = [record["seconds"] for record in records]
    stamps = sorted(datetime.fromisoformat(record["finished_at"]) for record in records)
    hosts = sorted({record["host"] for record in records})
    print(f"{args.experiment}: {len(records)} cells on {', '.join(hosts)}; sum of cell times "
          f"{sum(seconds) / 3600:.2f} h, longest cell {max(seconds):.0f} s")
    for workers in (1, 2, 4):
        print(f"  projected wall time on {workers} core{'s' * (workers > 1)}: "
              f"{projected_wall(seconds, workers) / 3600:.2f} h")
    print(f"  first to last stored row: {(stamps[-1] - stamps[0]).total_seconds() / 3600:.2f} h")


if __name__ == "__main__":
    main()
