"""Phases 1–4 of the body against one labelling pass of the same lazily generated dataset, on 1 and 2 workers.

An m = 3, d = 12, k = 4 teacher (``sample_teacher(3, 12,
rng=seeded_rng(20_251, 3, seed))``, the ``sculpt-vs-m`` teachers) labels
``--samples`` Boolean sequences drawn block by block where Dask computes them
(nothing of size n is held): with ``--source block-tasks`` (the default) as
``TeacherSource(...).as_dask()``, each block of a pass one task that draws,
labels and reads it; with ``--source array-tasks`` as ``make_dataset(...,
chunks=65 536)`` read through a ``DaskSource``, the blocks the outputs of
array tasks.  Both draw the same blocks (one seed drawn from
``seeded_rng(seed, "passes")``).  For each
``--workers`` count, one after the other in this process, on a
``LocalCluster`` of that many single-threaded workers (``--scheduler
threads``: on Dask's threaded scheduler with that many threads, in this process):

1. a *labelling pass*: every block drawn and labelled, its labels summed (what
   any pass over a generated dataset costs at least);
2. phases 1–4 (:func:`mhalearn.learners.chen_li.sculpt_span`, default
   settings, ``random_state = seed``) on the same dataset,

both after phases 1–4 on a small dataset, so that neither times a worker
loading its kernels.  On Dask's threads both are also timed in CPU seconds of
this process (``getrusage``), and in the kernel's share of it: the ratio in
CPU time says what the fit did apart from the wall clock's idle cores, and the
kernel's seconds hold the page faults of new memory, which on a VM whose host
takes back freed pages cost up to 2.3 CPU seconds a GiB
(runs/generated-pass/README.md).

Printed per worker count: both wall times and their ratio (phases 1–4 in
labelling passes), the candidate pass's figures, the span distance to the
teacher, each worker's peak memory; the labelling pass's and the candidate
passes' sequences per second per core (per worker) and their fraction of the
flop limit: the time labelling the stream would take at one core's dgemm
rate per worker (2m(2kd² + 2k²d) flops a sequence), the dgemm rate measured
on one thread of this process in the same run, before the passes; then the wall time of every worker
count against the first's, and the largest difference between their spans
(the passes reduce in block order, so any scheduler gives the same bits).
One JSON line per (samples, seed, workers) in ``--out``, span included; a
rerun skips the lines it holds and still prints the comparison;
``--report`` prints them and measures nothing.

    python bench/passes.py [--samples 1e8] [--seed 0] [--workers 1 2] [--prefix-samples N]
                           [--source block-tasks|array-tasks] [--scheduler cluster|threads]
                           [--out runs/passes.jsonl] [--report]
"""

import argparse
import contextlib
import json
import os
import resource
import sys
import time

import dask
import numpy as np
from _common import label_sum, load_jsonl, markdown_table
from distributed import Client, LocalCluster

import mhalearn
from mhalearn._memory import peak_memory_mb
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.dask_data import DaskSource
from mhalearn.data.sources import BLOCK_SIZE
from mhalearn.evaluation import span_distance
from mhalearn.learners.chen_li import BodySettings, StreamRefit, sculpt_span
from mhalearn.learners.moment_route import sine_distance
from mhalearn.learners.report import Notifier, Observers, Phase, StreamProgress
from mhalearn.provenance import code_provenance
from mhalearn.seeding import draw_seed, seeded_rng

HEADS, DIM, LENGTH = 3, 12, 4


#: What a pass maps: one task a block that draws and reads it, or array tasks whose outputs are the blocks.
SOURCES = ("block-tasks", "array-tasks")
#: Where the tasks run: a LocalCluster of single-threaded worker processes, or Dask's threads in this process.
SCHEDULERS = ("cluster", "threads")


def generated(teacher, samples: int, rng, kind: str):
    """``samples`` sequences labelled by ``teacher`` in blocks of 65 536, drawn where Dask computes them."""
    if kind == "block-tasks":
        return TeacherSource(teacher, samples, LENGTH, seed=draw_seed(rng)).as_dask()
    return DaskSource(*mhalearn.make_dataset(teacher, samples, LENGTH, rng=rng, chunks=BLOCK_SIZE))


def warm_up(teacher, kind: str):
    """Phases 1–4 on a small dataset first, so that no timed pass loads or compiles a kernel on a worker."""
    sculpt_span(generated(teacher, 3 * BLOCK_SIZE, seeded_rng("warm-up"), kind), HEADS,
                BodySettings(prefix_samples=BLOCK_SIZE), np.random.default_rng(0))


def labelling_flops(samples: int) -> float:
    """Flops of labelling ``samples`` sequences: per head, x Θ_i and x W_i (2kd² multiply-adds), the
    logits and A_i V_i (2k²d)."""
    return 2.0 * samples * HEADS * (2 * LENGTH * DIM * DIM + 2 * LENGTH * LENGTH * DIM)


def dgemm_gflops(size: int = 1024, repeats: int = 5) -> float:
    """One core's dgemm rate: the best of ``repeats`` size × size products on one BLAS thread."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((size, size)), rng.standard_normal((size, size))
    best = np.inf
    with threadpool_limits(limits=1, user_api="blas"):
        for _ in range(repeats):
            start = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 / best / 1e9


def rate_cells(row: dict, seconds: float | None) -> tuple[str, str]:
    """A pass's sequences per second per core (worker) and its fraction of the flop limit."""
    if seconds is None or not seconds > 0:
        return "—", "—"
    per_core = row["samples"] / seconds / row["workers"]
    if row.get("dgemm_gflops") is None:
        return f"{per_core:,.0f}", "—"
    limit = labelling_flops(row["samples"]) / (row["dgemm_gflops"] * 1e9 * row["workers"])
    return f"{per_core:,.0f}", f"{limit / seconds:.1%}"


def cpu_seconds() -> tuple[float, float]:
    """CPU seconds this process has used, its threads' (Dask's threaded scheduler) included, and those of them
    spent in the kernel (the page faults of new memory among them)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


def cpu_since(start: tuple[float, float]) -> tuple[float, float]:
    """:func:`cpu_seconds` since ``start``, another of its values."""
    now = cpu_seconds()
    return now[0] - start[0], now[1] - start[1]


@contextlib.contextmanager
def scheduler_of(scheduler: str, workers: int):
    """The scheduler the passes run on while inside; yields a function giving each worker's peak memory (MB)."""
    if scheduler == "threads":
        with dask.config.set(scheduler="threads", num_workers=workers):
            yield lambda: [peak_memory_mb()]
        return
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield lambda: sorted(client.run(peak_memory_mb).values())


def measure(samples: int, seed: int, workers: int, prefix_samples: int | None, kind: str, scheduler: str) -> dict:
    dgemm = dgemm_gflops()
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, seed))
    settings = BodySettings(prefix_samples=prefix_samples)
    with scheduler_of(scheduler, workers) as worker_memory_mb:
        warm_up(teacher, kind)
        source = generated(teacher, samples, seeded_rng(seed, "passes"), kind)
        start, cpu_start = time.perf_counter(), cpu_seconds()
        source.map_blocks(label_sum)
        labelling, labelling_cpu = time.perf_counter() - start, cpu_since(cpu_start)
        print(f"  {workers} worker(s): labelling pass {labelling:.1f} s", file=sys.stderr, flush=True)
        start, cpu_start = time.perf_counter(), cpu_seconds()

        def show(phase, result):  # progress on stderr: a phase of a long run ends
            if phase != Phase.PASS:  # where a pass stands: StreamProgress's lines
                print(f"  {workers} worker(s), {time.perf_counter() - start:7.1f} s: {phase} {result.summary()}",
                      file=sys.stderr, flush=True)

        observers = Observers(show, StreamProgress(interval=60.0, lines=True, desc=f"  {workers} worker(s): "))
        phases = sculpt_span(source, HEADS, settings, np.random.default_rng(seed), Notifier(observers))
        body, body_cpu = time.perf_counter() - start, cpu_since(cpu_start)
        worker_memory = worker_memory_mb()
    stream = next((step for step in phases.refined_sum.steps if isinstance(step, StreamRefit)), None)
    span = phases.span
    return {"samples": samples, "seed": seed, "workers": workers, "prefix_samples": prefix_samples, "source": kind,
            "scheduler": scheduler,
            "labelling_seconds": labelling, "phases_seconds": body, "passes_worth": body / labelling,
            # A cluster's workers are other processes: this process's CPU time is not theirs.
            "labelling_cpu_seconds": labelling_cpu[0] if scheduler == "threads" else None,
            "phases_cpu_seconds": body_cpu[0] if scheduler == "threads" else None,
            "labelling_kernel_seconds": labelling_cpu[1] if scheduler == "threads" else None,
            "phases_kernel_seconds": body_cpu[1] if scheduler == "threads" else None,
            "stream_refit": None if stream is None else stream.as_dict(),
            "prefix_labels": phases.refined_sum.prefix_labels,
            "k_star_rows": phases.sculpt[-1].found_rows, "refused": span.refused,
            "estimated_error": span.estimated_error,
            "span_distance": None if span.basis is None else span_distance(span.basis, teacher),
            "basis": None if span.basis is None else span.basis.tolist(),
            "w_sum_error": float(np.linalg.norm(phases.refined_sum.w_sum - teacher.projection_sum)
                                 / np.linalg.norm(teacher.projection_sum)),
            "worker_peak_memory_mb": worker_memory, "client_peak_memory_mb": peak_memory_mb(),
            "dgemm_gflops": dgemm, **code_provenance()}


def cpu_passes(row: dict) -> str:
    """Phases 1–4 in labelling passes of CPU time, with both CPU times and their seconds in the kernel: "—"
    where the row has none."""
    if row.get("phases_cpu_seconds") is None or not row.get("labelling_cpu_seconds"):
        return "—"
    return (f"{row['phases_cpu_seconds'] / row['labelling_cpu_seconds']:.2f} "
            f"({row['phases_cpu_seconds']:.1f} / {row['labelling_cpu_seconds']:.1f} s, in the kernel "
            f"{row['phases_kernel_seconds']:.1f} / {row['labelling_kernel_seconds']:.1f} s)")


def candidate_pass_seconds(row: dict) -> float | None:
    """Seconds a candidate pass took: the whole-stream refit's passes, per pass (the refit in memory after
    each is a small part), None without one."""
    stream = row.get("stream_refit") or {}
    if not stream.get("passes") or stream.get("seconds") is None:
        return None
    return stream["seconds"] / stream["passes"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=float, default=1e8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--prefix-samples", type=float, default=None,
                        help="BodySettings.prefix_samples (default: the setting's own)")
    parser.add_argument("--source", choices=SOURCES, default=SOURCES[0],
                        help="one task a block (TeacherSource.as_dask) or make_dataset's array tasks")
    parser.add_argument("--scheduler", choices=SCHEDULERS, default=SCHEDULERS[0],
                        help="a LocalCluster of worker processes, or Dask's threads in this process")
    parser.add_argument("--out", default="runs/passes.jsonl")
    parser.add_argument("--report", action="store_true", help="print the rows already in --out and measure nothing")
    args = parser.parse_args()
    samples = int(args.samples)
    prefix = None if args.prefix_samples is None else int(args.prefix_samples)
    # Rows stored before the options read array tasks on a cluster.
    rows = {(row["samples"], row["seed"], row["workers"], row["prefix_samples"], row.get("source", "array-tasks"),
             row.get("scheduler", "cluster")): row
            for row in load_jsonl(args.out)}
    keys = [(samples, args.seed, workers, prefix, args.source, args.scheduler) for workers in args.workers]
    missing = [key for key in keys if key not in rows]
    if args.report and missing:
        parser.error(f"{args.out} holds no row for (samples, seed, workers, prefix_samples, source, scheduler) = "
                     f"{missing}")
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
    for key in missing:
        rows[key] = measure(*key)
        with open(args.out, "a") as handle:
            handle.write(json.dumps(rows[key]) + "\n")
    print(markdown_table(
        ("workers", "labelling pass", "phases 1–4", "in labelling passes", "in CPU time", "candidate passes",
         "candidate rows",
         "K\\*'s rows", "span distance", "its estimate", "Ŵ_Σ error", "peak memory per worker", "client"),
        ([workers, f"{row['labelling_seconds']:.1f} s", f"{row['phases_seconds']:.1f} s", f"{row['passes_worth']:.2f}",
          cpu_passes(row),
          (row["stream_refit"] or {}).get("passes"), (row["stream_refit"] or {}).get("candidates"),
          row["k_star_rows"], "—" if row["span_distance"] is None else f"{row['span_distance']:.4f}",
          "—" if row["estimated_error"] is None else f"{row['estimated_error']:.3f}",
          f"{100 * row['w_sum_error']:.2f} %", " / ".join(f"{mb:.0f} MB" for mb in row["worker_peak_memory_mb"]),
          f"{row['client_peak_memory_mb']:.0f} MB"]
         for workers, row in ((key[2], rows[key]) for key in keys))))
    print()
    print(markdown_table(
        ("workers", "one core's dgemm", "labelling pass: seq/s/core", "of the flop limit",
         "candidate pass: seq/s/core", "of the flop limit"),
        ([workers, "—" if row.get("dgemm_gflops") is None else f"{row['dgemm_gflops']:.1f} GFLOP/s",
          *rate_cells(row, row["labelling_seconds"]), *rate_cells(row, candidate_pass_seconds(row))]
         for workers, row in ((key[2], rows[key]) for key in keys))))
    first = rows[keys[0]]
    for key in keys[1:]:
        workers, row = key[2], rows[key]
        apart = (None if row["basis"] is None or first["basis"] is None else
                 float(np.abs(np.array(row["basis"]) - np.array(first["basis"])).max()))
        angle = (None if apart is None else
                 sine_distance(np.array(row["basis"]), np.array(first["basis"])))
        print(f"{workers} workers against {args.workers[0]}: phases 1–4 wall time "
              f"{row['phases_seconds'] / first['phases_seconds']:.2f}×, labelling pass "
              f"{row['labelling_seconds'] / first['labelling_seconds']:.2f}×; spans differ by {apart} "
              f"(largest entry), {angle} (sine distance)")


if __name__ == "__main__":
    main()
