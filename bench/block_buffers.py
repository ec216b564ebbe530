"""The candidate pass with its blocks drawn into lent arrays (``BlockBuffers``) against new arrays per block.

The candidate pass of the body's phase 3 (:func:`~mhalearn.learners.chen_li.agreement_passes.reachable_rows`
around Ŵ_Σ = Σ_i W_i, the body's default tolerances) over ``--blocks`` blocks of 65 536 Boolean sequences
labelled by the m = 4, d = 12, k = 4 teacher of ``bench/generated_pass.py``, on three schedulers: a
``TeacherSource`` in this thread, a ``DaskTeacherSource`` on Dask's threaded scheduler with 2 threads, and
on a ``LocalCluster`` of 2 single-threaded worker processes.  Each is run with the pass's arrays lent and
reused (the package's code) and with a new pair of arrays for every block (``BlockBuffers.lent`` replaced,
in the workers too), rounds interleaved in one process; printed: the best round's microseconds a sequence
(wall; CPU time of this process where the blocks run in it) and new / lent.

    python bench/block_buffers.py [--blocks 16] [--rounds 4]
"""

import argparse
import contextlib
import time

import numpy as np
from _common import candidate_pass


def new_arrays(fresh: bool) -> None:
    """Make every BlockBuffers of this process hand out new arrays (``fresh``) or lend its own (the package's)."""
    from mhalearn.attention import teacher_source

    if not hasattr(teacher_source, "_lent"):
        teacher_source._lent = teacher_source.BlockBuffers.lent

        @contextlib.contextmanager
        def fresh_lent(self, size):
            yield np.empty((2, size, *self.shape[1:])), np.empty((size, self.shape[1], self.groups), np.uint8)

        teacher_source._fresh_lent = fresh_lent
    teacher_source.BlockBuffers.lent = teacher_source._fresh_lent if fresh else teacher_source._lent


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=4)
    options = parser.parse_args()

    import dask
    import numba
    from distributed import Client, LocalCluster

    from mhalearn.attention.teacher_source import TeacherSource
    from mhalearn.attention.teachers import sample_teacher
    from mhalearn.seeding import seeded_rng

    block = 1 << 16
    teacher = sample_teacher(4, 12, rng=seeded_rng(20_251, 4, 0))
    stream = TeacherSource(teacher, options.blocks * block, 4, seed=12_345)
    w_sum = teacher.ws.sum(axis=0)
    samples = options.blocks * block

    def compare(name, source, switch, cpu_time=True):
        candidate_pass(source, w_sum)  # warm up
        best = {"lent": [np.inf, np.inf], "new": [np.inf, np.inf]}
        for _ in range(options.rounds):
            for kind in best:
                switch(kind == "new")
                wall, cpu = time.perf_counter(), time.process_time()
                candidate_pass(source, w_sum)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                best[kind] = [min(best[kind][0], wall), min(best[kind][1], cpu)]
        switch(False)
        lent, new = best["lent"], best["new"]
        cpu = "" if not cpu_time else \
            f"  CPU {new[1] / samples * 1e6:.3f} / {lent[1] / samples * 1e6:.3f} µs = {new[1] / lent[1]:.3f}x"
        print(f"{name:34s} wall {new[0] / samples * 1e6:.3f} / {lent[0] / samples * 1e6:.3f} µs = "
              f"{new[0] / lent[0]:.3f}x{cpu}", flush=True)

    print(f"candidate pass, m = 4, d = 12, k = 4, {options.blocks} blocks of 65,536; best of {options.rounds} "
          f"interleaved rounds; new arrays a block / lent arrays, a sequence")
    numba.set_num_threads(1)
    compare("TeacherSource, this thread", stream, new_arrays)
    with dask.config.set(scheduler="threads", num_workers=2):
        compare("Dask threaded scheduler, 2 threads", stream.as_dask(), new_arrays)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        compare("LocalCluster, 2 worker processes", stream.as_dask(), lambda fresh: client.run(new_arrays, fresh),
                cpu_time=False)  # the blocks run in the workers: this process's CPU time is not theirs


if __name__ == "__main__":
    main()
