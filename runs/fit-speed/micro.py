"""The small measurements of runs/fit-speed/README.md, one subcommand each.

    python runs/fit-speed/micro.py touch huge nohuge huge nohuge   # first touch of 0.94 GiB of labels
    python runs/fit-speed/micro.py keep 100 60                     # a pass over 100 blocks keeping 60 of them
    NUMBA_NUM_THREADS=1 python runs/fit-speed/micro.py candidate 3 # a candidate block against a labelling one

``touch``: 40 blocks of labels (65 536 × 4 × 12 float64) allocated and written, with NumPy's huge-page advice
(``huge``, NumPy's default) or without (``nohuge``); CPU seconds a GiB, the kernel's part apart.  ``keep``: on
Dask's threads, a labelling pass and the units pass of a fit (``_stream_statistics_block``) over N blocks of a
``DaskTeacherSource`` (m = 3, d = 12, k = 4), keeping the labels of none and of K blocks.  ``candidate``: on one
thread, per block of 65 536 sequences, a labelling pass, the candidate pass's block function on kept labels (the
codes drawn, every row decoded) and on fresh blocks (labelled too), at m = HEADS.
"""

import resource
import sys
import time

import dask
import numpy as np

from mhalearn._numba import one_thread
from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.dask_data import _stream_statistics_block
from mhalearn.data.scratch import ScratchArrays
from mhalearn.learners.chen_li.agreement_passes import _reachable_block
from mhalearn.seeding import seeded_rng

BLOCK, SHAPE = 65_536, (65_536, 4, 12)


def cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, usage.ru_stime


def label_sum(X, Y, rows):
    return float(np.asarray(Y).sum())


def touch(modes):
    from numpy._core.multiarray import _set_madvise_hugepage

    for mode in modes:
        _set_madvise_hugepage(mode == "huge")
        kept, start = [], cpu()
        for _ in range(40):
            array = np.empty(SHAPE)
            array.fill(1.0)
            kept.append(array)
        end, gib = cpu(), 40 * np.prod(SHAPE) * 8 / 2 ** 30
        print(f"{mode}: {gib:.2f} GiB first touched: {(end[0] - start[0]) / gib:.2f} CPU s/GiB "
              f"(kernel {(end[1] - start[1]) / gib:.2f})")


def keep(blocks: int, kept: int):
    teacher = sample_teacher(3, 12, rng=seeded_rng(20_251, 3, 7))
    with dask.config.set(scheduler="threads"):
        TeacherSource(teacher, 4 * BLOCK, 4, seed=1).as_dask().map_blocks(_stream_statistics_block, ScratchArrays())
        for func, args in ((label_sum, ()), (_stream_statistics_block, (ScratchArrays(),))):
            for keeping in (0, kept):
                source = TeacherSource(teacher, blocks * BLOCK, 4, seed=2).as_dask()
                if keeping:
                    source = source.keeping_labels(keeping * BLOCK)
                start, wall = cpu(), time.perf_counter()
                source.map_blocks(func, *args)
                wall, end = time.perf_counter() - wall, cpu()
                print(f"{func.__name__}, labels of {keeping}/{blocks} blocks kept: {wall:.2f} s wall, CPU "
                      f"{end[0] - start[0]:.2f} s (kernel {end[1] - start[1]:.2f} s)", flush=True)


def candidate(heads: int, blocks: int = 12):
    teacher = sample_teacher(heads, 12, rng=seeded_rng(20_251, heads, 0))
    w_sum = teacher.projection_sum * 1.001
    radius = 0.02 * np.linalg.norm(w_sum, 2)
    args = (w_sum, 0.02, radius, radius, 1e-3)

    def per_block(source, func, *func_args) -> float:
        source.map_blocks(func, *func_args, blocks=[0])
        start = time.perf_counter()
        source.map_blocks(func, *func_args)
        return (time.perf_counter() - start) / blocks

    with one_thread():
        kept = TeacherSource(teacher, blocks * BLOCK, 4, seed=3).keeping_labels(blocks * BLOCK)
        kept.map_blocks(label_sum)
        labelling = per_block(TeacherSource(teacher, blocks * BLOCK, 4, seed=3), label_sum)
        decoding = per_block(kept, _reachable_block, *args)
        both = per_block(TeacherSource(teacher, blocks * BLOCK, 4, seed=3), _reachable_block, *args)
    print(f"m = {heads}, a block of 65 536 on one thread: labelling {labelling * 1e3:.1f} ms; candidate block on kept "
          f"labels {decoding * 1e3:.1f} ms ({decoding / labelling:.2f} of labelling); labelled too {both * 1e3:.1f} ms "
          f"({both / labelling:.2f}); a row (4 a sequence): decoded {decoding / BLOCK / 4 * 1e9:.0f} ns, labelled "
          f"{labelling / BLOCK / 4 * 1e9:.0f} ns")


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "touch":
        touch(rest)
    elif command == "keep":
        keep(int(rest[0]), int(rest[1]))
    else:
        candidate(int(rest[0]))
