"""The small measurements of runs/fit-speed/README.md, one subcommand each.

    python runs/fit-speed/micro.py touch huge nohuge huge nohuge   # first touch of 0.94 GiB of labels
    python runs/fit-speed/micro.py keep 100 60                     # a pass over 100 blocks keeping 60 of them
    NUMBA_NUM_THREADS=1 python runs/fit-speed/micro.py candidate 3 # a candidate block against a labelling one

``touch``: 40 blocks of labels (65 536 × 4 × 12 float64) allocated and written, with NumPy's huge-page advice
(``huge``, NumPy's default) or without (``nohuge``); CPU seconds a GiB, the kernel's part apart.  ``keep``: on
Dask's threads, a labelling pass over N blocks of a ``DaskTeacherSource`` (m = 3, d = 12, k = 4), keeping the
labels of none and of K blocks.  ``candidate``: per block of 65 536 sequences (run it on one thread), a labelling
pass, the candidate pass (``reachable_rows``) on kept labels (the codes drawn, every row decoded) and on fresh
blocks (labelled too), at m = HEADS.
"""

import resource
import sys
import time

import dask
import numpy as np

from mhalearn.attention.teacher_source import TeacherSource
from mhalearn.attention.teachers import sample_teacher
from mhalearn.learners.chen_li.agreement_passes import reachable_rows
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
        TeacherSource(teacher, 4 * BLOCK, 4, seed=1).as_dask().map_blocks(label_sum)
        for keeping in (0, kept):
            source = TeacherSource(teacher, blocks * BLOCK, 4, seed=2).as_dask()
            if keeping:
                source = source.keeping_labels(keeping * BLOCK)
            start, wall = cpu(), time.perf_counter()
            source.map_blocks(label_sum)
            wall, end = time.perf_counter() - wall, cpu()
            print(f"labelling pass, labels of {keeping}/{blocks} blocks kept: {wall:.2f} s wall, CPU "
                  f"{end[0] - start[0]:.2f} s (kernel {end[1] - start[1]:.2f} s)", flush=True)


def candidate(heads: int, blocks: int = 12):
    teacher = sample_teacher(heads, 12, rng=seeded_rng(20_251, heads, 0))
    w_sum = teacher.projection_sum * 1.001
    options = {"threshold": 0.02, "radius": 0.02 * np.linalg.norm(w_sum, 2), "simplex_tol": 1e-3,
               "max_rows": 2_000_000}

    def per_block(source, candidates: bool) -> float:
        start = time.perf_counter()
        if candidates:
            reachable_rows(source, w_sum, **options)
        else:
            source.map_blocks(label_sum)
        return (time.perf_counter() - start) / blocks

    reachable_rows(TeacherSource(teacher, BLOCK, 4, seed=4), w_sum, **options)  # compiled and loaded first
    kept = TeacherSource(teacher, blocks * BLOCK, 4, seed=3).keeping_labels(blocks * BLOCK)
    kept.map_blocks(label_sum)
    labelling = per_block(TeacherSource(teacher, blocks * BLOCK, 4, seed=3), False)
    decoding = per_block(kept, True)
    both = per_block(TeacherSource(teacher, blocks * BLOCK, 4, seed=3), True)
    print(f"m = {heads}, a block of 65 536: labelling {labelling * 1e3:.1f} ms; candidate pass on kept labels "
          f"{decoding * 1e3:.1f} ms ({decoding / labelling:.2f} of labelling); labelled too {both * 1e3:.1f} ms "
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
