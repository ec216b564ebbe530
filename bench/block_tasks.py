"""What a pass over a generated stream costs a block, in this process and as Dask tasks, on 1 and 2 workers.

An m = 3, d = 12, k = 4 ``sculpt-vs-m`` teacher (``sample_teacher(3, 12,
rng=seeded_rng(20_251, 3, 0))``) and ``--blocks`` blocks of 65 536 Boolean
sequences.  A pass that only sums each block's labels (what every pass over
generated data costs at least) is timed, per block:

- in this process, one block after the other on one thread (``TeacherSource``);
- for each ``--workers`` count, on a ``LocalCluster`` of that many
  single-threaded worker processes: the blocks as array tasks of
  ``make_dataset(..., chunks=65 536)`` read through a ``DaskSource`` (X and
  Y a task's outputs, kept by the worker until the pass reads them), and
  as one task a block that draws, labels and reduces it in place
  (``TeacherSource.as_dask()``, a ``DaskTeacherSource``).

Each after one warm-up pass; the printed ratios are of times measured in
this one run.  One JSON line in ``--out``; ``--report`` prints the lines
there and measures nothing.

    python bench/block_tasks.py [--blocks 40] [--workers 1 2] [--out runs/block_tasks.jsonl] [--report]
"""

import argparse
import json
import time

from _common import label_sum, load_jsonl
from distributed import Client, LocalCluster

import mhalearn
from mhalearn._numba import one_thread
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.dask_data import DaskSource
from mhalearn.data.sources import BLOCK_SIZE
from mhalearn.seeding import seeded_rng

HEADS, DIM, LENGTH = 3, 12, 4


def per_block(source, blocks: int) -> float:
    """Seconds a block of one pass of ``label_sum`` over ``source``, after one warm-up pass of two blocks."""
    source.map_blocks(label_sum, blocks=range(2))
    start = time.perf_counter()
    source.map_blocks(label_sum)
    return (time.perf_counter() - start) / blocks


def describe(row: dict, only: int | None = None) -> str:
    """The figures of one stored run (of the ``only`` worker count when given), as lines."""
    lines = [] if only is not None else [f"{row['blocks']} blocks; in this process, one thread: "
                                         f"{row['in_process']:.3f} s a block"]
    for workers in sorted(int(key.rsplit("_", 1)[1]) for key in row if key.startswith("block_tasks_")):
        if only is None or workers == only:
            arrays, fused = row[f"array_tasks_{workers}"], row[f"block_tasks_{workers}"]
            lines.append(f"{workers} worker(s): array tasks (DaskSource) {arrays:.3f} s a block, one task a block "
                         f"(DaskTeacherSource) {fused:.3f}: {arrays / fused:.2f}x; against this process "
                         f"{fused / row['in_process']:.2f}x")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=40)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="runs/block_tasks.jsonl")
    parser.add_argument("--report", action="store_true", help="print the rows in --out and measure nothing")
    args = parser.parse_args()
    if args.report:
        for row in load_jsonl(args.out):
            print(describe(row))
        return
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, 0))
    stream = TeacherSource(teacher, args.blocks * BLOCK_SIZE, LENGTH, seed=0)
    with one_thread():
        row = {"blocks": args.blocks, "in_process": per_block(stream, args.blocks)}
    print(f"in this process, one thread: {row['in_process']:.3f} s a block", flush=True)
    X, Y = mhalearn.make_dataset(teacher, args.blocks * BLOCK_SIZE, LENGTH, rng=0, chunks=BLOCK_SIZE)
    for workers in args.workers:
        with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
                Client(cluster):
            arrays, fused = per_block(DaskSource(X, Y), args.blocks), per_block(stream.as_dask(), args.blocks)
        row[f"array_tasks_{workers}"], row[f"block_tasks_{workers}"] = arrays, fused
        print(describe(row, workers), flush=True)
    with open(args.out, "a") as handle:
        handle.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
