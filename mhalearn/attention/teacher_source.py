"""A stream of examples drawn from a planted teacher on every pass: phases 1–4 on 10⁶–10⁹ sequences, one block held.

:class:`TeacherSource` is a source of examples
(:class:`~mhalearn.data.sources.Source`) whose block b is
:func:`~mhalearn.attention.data.labelled_block` b, drawn from one seed and
b: every pass sees the same examples without storing them.
:class:`DaskTeacherSource` is the same stream, each block of a pass a task
of the active Dask scheduler.  They live with the teachers because they
know one; the learners read them as any other source.
"""

from __future__ import annotations

import numpy as np

from .._numba import one_thread
from .._validation import check_positive_int
from ..data.sources import BLOCK_SIZE, WAVE_BLOCKS, BlockSource, CodedTokens, run_block
from ..data.token_codes import code_groups
from .data import labelled_block


class TeacherSource(BlockSource):
    """Boolean sequences labelled by a teacher, drawn afresh on every pass.

    Block ``b`` is :func:`~mhalearn.attention.data.labelled_block` ``b``,
    drawn from ``seed`` and ``b``, so every pass sees
    the same examples without storing them; labels may carry Gaussian noise
    of standard deviation ``noise`` (drawn from the same stream).  The
    blocks are those of ``make_dataset(teacher, samples, length, noise=noise,
    chunks=block_size)`` with that seed; X comes with its tokens' codes
    (:class:`~mhalearn.data.sources.CodedTokens`), coded once where the block is drawn.
    """

    def __init__(self, teacher, samples: int, length: int, *, seed: int = 0, noise: float = 0.0,
                 block_size: int = BLOCK_SIZE):
        self.teacher = teacher
        self.samples = check_positive_int(samples, "samples")
        self.length = check_positive_int(length, "length")
        self.dim = teacher.dim
        self.seed = check_positive_int(seed, "seed", minimum=0)
        self.noise = float(noise)
        self.block_size = check_positive_int(block_size, "block_size")
        self.block_count = -(-self.samples // self.block_size)

    def fingerprint(self) -> str:
        """A hash of what the blocks are drawn from: the teacher, the sizes, the seed and the noise."""
        from dask.base import tokenize

        return tokenize(self.teacher.thetas, self.teacher.ws, self.samples, self.length, self.seed, self.noise,
                        self.block_size)

    def block_samples(self, index: int) -> int:
        return min(self.block_size, self.samples - index * self.block_size)

    def _block(self, index: int) -> tuple[CodedTokens, np.ndarray, None]:
        size = self.block_samples(index)
        # Coded where the block is drawn, from its sign words, as ArraySource codes its blocks: the passes'
        # kernels read the codes (a pass of the decoder then takes half the time at m = 4, d = 12, k = 4).
        codes = np.empty((size, self.length, code_groups(self.dim)), dtype=np.uint8)
        X, Y = labelled_block(self.teacher, self.length, "boolean", self.noise, self.seed, index, size, codes)
        return CodedTokens(X, codes), Y, None

    def __dask_tokenize__(self):
        return self.fingerprint()

    def as_dask(self) -> "DaskTeacherSource":
        """The same stream, each block of a pass one task of the active Dask scheduler
        (:class:`DaskTeacherSource`): a pass's blocks spread over a cluster's workers."""
        return DaskTeacherSource(self.teacher, self.samples, self.length, seed=self.seed, noise=self.noise,
                                 block_size=self.block_size)


class DaskTeacherSource(TeacherSource):
    """A :class:`TeacherSource` whose passes run as tasks of the active Dask scheduler, one per block.

    Each task draws its block, labels it and applies the pass's function
    where it runs, returning only the function's result: the block itself is
    never a task's output, so no worker stores, measures or ships it.  (A
    :class:`~mhalearn.data.dask_data.DaskSource` over ``make_dataset(..., chunks=...)`` computes the
    same blocks as array tasks, and a pass that sums the labels costs it
    1.6× as much a block on one worker of a local cluster and 1.2× on two:
    0.184 against 0.117 s and 0.093 against 0.076 s at m = 3, d = 12, k = 4,
    ``python bench/block_tasks.py``.)  The blocks, their order and the reductions are the
    :class:`TeacherSource`'s, so a fit computes the same bits, and the
    fingerprint, which names a checkpoint, is the same too.
    """

    wave_blocks = WAVE_BLOCKS

    def map_blocks(self, func, *args, indexed: bool = False, blocks=None) -> list:
        """As :meth:`~mhalearn.data.sources.BlockSource.map_blocks`, every block drawn and mapped in a task of the
        active Dask scheduler."""
        import dask

        selected = range(self.block_count) if blocks is None else blocks
        tasks = [dask.delayed(_draw_and_run_block, pure=True)(self, func, args, index, indexed)
                 for index in selected]
        return list(dask.compute(*tasks))


def _draw_and_run_block(source: TeacherSource, func, args: tuple, index: int, indexed: bool):
    """Block ``index`` of ``source`` drawn, labelled and passed to ``func`` inside a Dask task, on one thread."""
    with one_thread():
        return run_block(func, *source._block(index), args, index if indexed else None)

__all__ = ["DaskTeacherSource", "TeacherSource"]
