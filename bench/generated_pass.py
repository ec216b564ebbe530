"""A pass over a lazily generated dataset, this checkout against another one, side by side in one run.

An m = 4, d = 12, k = 4 teacher (``sample_teacher(4, 12, rng=seeded_rng(20_251,
4, 0))``, the ``sculpt-vs-m`` teacher 0 at m = 4) labels ``--blocks`` blocks of
65 536 Boolean sequences, drawn where Dask computes them, on Dask's threaded
scheduler with ``--threads`` threads.  Two passes are timed:

- the *labelling pass*: every block drawn and labelled, its labels summed
  (``make_dataset(..., chunks=65 536)`` read through a ``DaskSource``);
- the *candidate pass* of the body's phase 3
  (:func:`~mhalearn.learners.chen_li.agreement_passes.reachable_rows`) around
  Ŵ_Σ = Σ_i W_i, with the body's default tolerances, on the same dataset
  (``--source array-tasks``) or with each block one task that draws, labels
  and decodes it (``TeacherSource(...).as_dask()``, ``--source block-tasks``,
  the default: what the body's long cells run).

Each checkout runs in a process of its own (``PYTHONPATH`` set to it), both
started at once; the parent asks them for one round at a time, in turn, so
that the load of the machine falls on both alike.  A round is one pass of
each kind after a warm-up pass of two blocks.  Printed per pass: the best
round's sequences per second of wall time and per CPU second of the process
(sequences per second per core: what other jobs on the machine change
least), for each checkout and their ratio.  The two checkouts draw different
data when their generators differ; the figures are rates, not results.

    python bench/generated_pass.py --against /path/to/other/checkout [--blocks 16] [--rounds 3] [--threads 2]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from _common import candidate_pass, label_sum

HEADS, DIM, LENGTH, BLOCK = 4, 12, 4, 1 << 16


def child(blocks: int, threads: int, kind: str):
    """Serve rounds: read a line, time one round, print its figures as one JSON line."""
    import dask

    import mhalearn
    from mhalearn.attention.teachers import sample_teacher
    try:
        from mhalearn.attention.teacher_source import TeacherSource
        from mhalearn.data.dask_data import DaskSource
    except ImportError:  # a checkout before the data layer's modules (8f40801)
        from mhalearn.learners.streams import DaskSource, TeacherSource
    from mhalearn.seeding import seeded_rng

    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, 0))
    samples = blocks * BLOCK
    labelling = DaskSource(*mhalearn.make_dataset(teacher, samples, LENGTH, rng=seeded_rng(0, "passes"),
                                                  chunks=BLOCK))
    candidates = (labelling if kind == "array-tasks" else
                  TeacherSource(teacher, samples, LENGTH, seed=12_345).as_dask())
    w_sum = teacher.ws.sum(axis=0)

    def candidate_pass_over(source, blocks_=None):
        return candidate_pass(source if blocks_ is None else source.prefix(blocks_ * BLOCK), w_sum)

    def timed(run):
        wall, cpu = time.perf_counter(), time.process_time()
        run()
        return time.perf_counter() - wall, time.process_time() - cpu

    with dask.config.set(scheduler="threads", num_workers=threads):
        labelling.map_blocks(label_sum, blocks=range(2))  # warm up: load or compile the kernels
        candidate_pass_over(candidates, 2)
        print(json.dumps({"ready": True}), flush=True)
        for _ in sys.stdin:
            row = {"samples": samples}
            row["labelling_wall"], row["labelling_cpu"] = timed(lambda: labelling.map_blocks(label_sum))
            row["candidate_wall"], row["candidate_cpu"] = timed(lambda: candidate_pass_over(candidates))
            print(json.dumps(row), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the other checkout (a directory holding mhalearn/)")
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="Dask's threads (default 2)")
    parser.add_argument("--source", choices=("block-tasks", "array-tasks"), default="block-tasks",
                        help="the candidate pass's blocks: one task a block, or make_dataset's array tasks")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args.blocks, args.threads, args.source)
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = {"this checkout": here, "against": os.path.abspath(args.against)}
    if not os.path.isdir(os.path.join(trees["against"], "mhalearn")):
        parser.error(f"--against: expected a checkout holding mhalearn/, received {args.against}")
    command = [sys.executable, os.path.abspath(__file__), "--child", "--blocks", str(args.blocks),
               "--threads", str(args.threads), "--source", args.source, "--against", "-"]
    children = {name: subprocess.Popen(command, env=dict(os.environ, PYTHONPATH=tree), stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
                for name, tree in trees.items()}
    for name, process in children.items():  # both warm up before any round is timed
        json.loads(process.stdout.readline())
        print(f"{name} ({trees[name]}) ready", file=sys.stderr, flush=True)
    rounds = {name: [] for name in children}
    for number in range(args.rounds):
        for name, process in children.items():
            process.stdin.write("round\n")
            process.stdin.flush()
            rounds[name].append(json.loads(process.stdout.readline()))
        print(f"round {number + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    for process in children.values():
        process.stdin.close()
        process.wait()
    samples = rounds["this checkout"][0]["samples"]
    print(f"m = {HEADS}, d = {DIM}, k = {LENGTH}: {args.blocks} blocks of {BLOCK:,} sequences, Dask threaded "
          f"scheduler on {args.threads} threads, candidate pass on {args.source}; best of {args.rounds} "
          f"interleaved rounds; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"{'pass':<12} {'checkout':<14} {'seq/s (wall)':>13} {'seq/s/core (CPU)':>17}")
    for kind in ("labelling", "candidate"):
        rates = {}
        for name in children:
            wall = samples / min(row[f"{kind}_wall"] for row in rounds[name])
            cpu = samples / min(row[f"{kind}_cpu"] for row in rounds[name])
            rates[name] = (wall, cpu)
            print(f"{kind:<12} {name:<14} {wall:13,.0f} {cpu:17,.0f}")
        ours, theirs = rates["this checkout"], rates["against"]
        print(f"{kind:<12} {'ratio':<14} {ours[0] / theirs[0]:12.2f}x {ours[1] / theirs[1]:16.2f}x")


if __name__ == "__main__":
    main()
