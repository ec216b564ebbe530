"""Where a two-thread candidate pass loses per core: the two cores, or Dask?

The candidate pass at m = 4, d = 12, k = 4 (``bench/generated_pass.py``'s teacher, 16 blocks of 65 536, the
body's default tolerances around Ŵ_Σ = Σ W_i) timed in CPU seconds a sequence, best of 3:

1. one process, the blocks one after the other on this thread (``TeacherSource``), alone;
2. two such processes at once, each on its own stream (no Dask, no shared interpreter);
3. one process on Dask's threaded scheduler with 2 threads (``TeacherSource.as_dask()``).

If (2) costs what (3) does per core, the loss is the two cores sharing the machine (caches, memory,
clock), not the scheduler or the interpreter's lock.

    python runs/generated-pass/contention.py > runs/generated-pass/contention-<commit>.txt
"""

import subprocess
import sys
import time
from pathlib import Path

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import candidate_pass  # noqa: E402

BLOCK, BLOCKS = 1 << 16, 16


def candidate_pass_cpu(seed: int, dask_threads: int, start_at: float | None) -> float:
    """Best of 3 CPU seconds a sequence of the candidate pass over stream ``seed``."""
    import dask
    import numba

    from mhalearn.attention.teacher_source import TeacherSource
    from mhalearn.attention.teachers import sample_teacher
    from mhalearn.seeding import seeded_rng

    numba.set_num_threads(1)
    teacher = sample_teacher(4, 12, rng=seeded_rng(20_251, 4, 0))
    source = TeacherSource(teacher, BLOCKS * BLOCK, 4, seed=seed)
    if dask_threads:
        source = source.as_dask()
    w_sum = teacher.ws.sum(axis=0)

    def run(stream):
        candidate_pass(stream, w_sum)

    with dask.config.set(scheduler="threads", num_workers=max(dask_threads, 1)):
        run(source.prefix(2 * BLOCK))  # load the kernels
        if start_at is not None:
            time.sleep(max(0.0, start_at - time.time()))
        best = float("inf")
        for _ in range(3):
            cpu = time.process_time()
            run(source)
            best = min(best, time.process_time() - cpu)
    return best / (BLOCKS * BLOCK)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        seed, start_at = int(sys.argv[2]), float(sys.argv[3])
        print(candidate_pass_cpu(seed, 0, start_at))
        return
    print(f"candidate pass, m = 4, d = 12, k = 4, {BLOCKS} blocks of 65,536; CPU µs a sequence, best of 3")
    alone = candidate_pass_cpu(1, 0, None)
    print(f"one process alone, this thread:        {alone * 1e6:.3f}", flush=True)
    start_at = time.time() + 15.0  # both children past their kernels' loading before either times
    children = [subprocess.Popen([sys.executable, __file__, "--child", str(seed), str(start_at)],
                                 stdout=subprocess.PIPE, text=True) for seed in (1, 2)]
    pair = [float(child.communicate()[0]) for child in children]
    print(f"two processes at once, each:           {pair[0] * 1e6:.3f}, {pair[1] * 1e6:.3f}", flush=True)
    threads = candidate_pass_cpu(1, 2, None)
    print(f"one process, Dask's threads, 2:        {threads * 1e6:.3f}")
    print(f"per core against alone: two processes {pair[0] / alone:.2f}x, {pair[1] / alone:.2f}x; "
          f"Dask's 2 threads {threads / alone:.2f}x")


if __name__ == "__main__":
    main()
