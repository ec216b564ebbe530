"""A stream of examples drawn from a planted teacher on every pass: phases 1–4 on 10⁶–10⁹ sequences, one block held.

:class:`TeacherSource` is a source of examples
(:class:`~mhalearn.data.sources.Source`) whose block b is
:func:`~mhalearn.attention.data.labelled_block` b, drawn from one seed and
b: every pass sees the same examples without storing them.
:class:`DaskTeacherSource` is the same stream, each block of a pass a task
of the active Dask scheduler.  They live with the teachers because they
know one; the learners read them as any other source.

A stream read several times over its first blocks (phases 1–3 of the body
read a prefix of 10⁷ sequences about six times) keeps those blocks' labels
once computed (:meth:`TeacherSource.keeping_labels`), as far as
``KEPT_LABELS_SHARE`` of the memory budget allows: a later read draws
the codes of the block's tokens again (about a fortieth of labelling it; the
tokens a pass keeps are decoded from them) and reads the labels kept, the
same bits.
"""

from __future__ import annotations

import threading
import uuid
from contextlib import contextmanager

import numpy as np

from .._memory import format_bytes, get_memory_budget
from .._numba import one_thread
from .._validation import check_positive_int
from ..data.dask_data import register_stream_kind
from ..data.scratch import ScratchArrays, kept_array
from ..data.sources import (
    BLOCK_SIZE,
    WAVE_BLOCKS,
    BlockSource,
    CodedTokens,
    PrefixSource,
    ScaledLabels,
    first_sequences,
    held_out_mask,
    run_block,
)
from ..data.token_codes import code_groups
from .data import boolean_codes, labelled_block

#: Share of the memory budget (:func:`mhalearn.set_memory_budget`) that the labels a stream keeps may take:
#: the rest is the fit's (pools, candidate rows, the net) and the interpreter's.
KEPT_LABELS_SHARE = 0.5


class TeacherSource(BlockSource):
    """Boolean sequences labelled by a teacher, drawn afresh on every pass.

    Block ``b`` is :func:`~mhalearn.attention.data.labelled_block` ``b``,
    drawn from ``seed`` and ``b``, so every pass sees
    the same examples without storing them; labels may carry Gaussian noise
    of standard deviation ``noise`` (drawn from the same stream).  The
    blocks are those of ``make_dataset(teacher, samples, length, noise=noise,
    chunks=block_size)`` with that seed; X comes with its tokens' codes
    (:class:`~mhalearn.data.sources.CodedTokens`), coded once where the block is drawn.
    The labels of the first ``kept_blocks`` blocks are kept once computed
    (:meth:`keeping_labels` chooses how many).

    ``scales`` and ``held_out`` (one count per block) with ``split_seed`` make
    the stream a fit's training split, as :class:`~mhalearn.data.sources.ArraySource`
    splits arrays in place (:meth:`split`): block b leaves out the rows of
    ``held_out_mask(size, held_out[b], split_seed, b)``, read where they lie
    (``rows``), its labels divided by s_Y as they are read.
    """

    #: Whether a pass's blocks run as tasks of the active Dask scheduler (:class:`DaskTeacherSource`).
    tasks = False

    def __init__(self, teacher, samples: int, length: int, *, seed: int = 0, noise: float = 0.0,
                 block_size: int = BLOCK_SIZE, kept_blocks: int = 0, scales: tuple[float, float] = (1.0, 1.0),
                 held_out: list[int] | None = None, split_seed: int = 0):
        self.teacher = teacher
        self.generated = check_positive_int(samples, "samples")
        self.length = check_positive_int(length, "length")
        self.dim = teacher.dim
        self.seed = check_positive_int(seed, "seed", minimum=0)
        self.noise = float(noise)
        self.block_size = check_positive_int(block_size, "block_size")
        self.block_count = -(-self.generated // self.block_size)
        if held_out is not None and len(held_out) != self.block_count:
            raise ValueError(f"held_out: expected one count per block ({self.block_count}), received "
                             f"{len(held_out)}")
        self.scales = tuple(float(scale) for scale in scales)
        self.held_out, self.split_seed = held_out, split_seed
        self.samples = self.generated - (0 if held_out is None else sum(held_out))
        self.kept_blocks = min(check_positive_int(kept_blocks, "kept_blocks", minimum=0), self.block_count)
        # Block b's labels once computed, b < kept_blocks (Dask's persisted tasks in a DaskTeacherSource).
        self._kept = [None] * self.kept_blocks
        # The training rows of the kept blocks, which passes read again (8 bytes a sequence).
        self._rows = [None] * self.kept_blocks
        self.kept_labels = None
        self._buffers = None  # the pass's (_pass_buffers)

    def _like(self, kept_blocks: int, cls=None, **split) -> "TeacherSource":
        """The same stream (as ``cls``, by default this class), keeping the labels of ``kept_blocks`` blocks and
        taking those this one holds; ``split`` replaces its ``scales``, ``held_out`` and ``split_seed``."""
        split = {"scales": self.scales, "held_out": self.held_out, "split_seed": self.split_seed, **split}
        stream = (cls or type(self))(self.teacher, self.generated, self.length, seed=self.seed, noise=self.noise,
                                     block_size=self.block_size, kept_blocks=kept_blocks, **split)
        shared = min(stream.kept_blocks, self.kept_blocks)
        stream._kept[:shared] = self._kept[:shared]
        stream.kept_labels = self.kept_labels if shared == stream.kept_blocks else None
        return stream

    def split(self, scales: tuple[float, float], held_out: list[int], seed: int) -> "TeacherSource":
        """The training split of this stream (the class docstring), its kept labels with it."""
        return self._like(self.kept_blocks, scales=scales, held_out=held_out, split_seed=seed)

    def keeping_labels(self, samples: int) -> "TeacherSource":
        """The same stream, keeping the labels of its first blocks that hold ``samples`` sequences once
        computed, as many of those blocks as ``KEPT_LABELS_SHARE`` of the memory budget holds (and those this
        stream keeps already).

        Reads of the blocks kept then cost drawing their signs (their codes with them) instead of
        labelling them: the same bits.  ``kept_labels`` says what was kept, for the fit's report.
        """
        wanted = PrefixSource(self, samples).block_count
        block_bytes = 8 * self.block_size * self.length * self.dim
        budget = get_memory_budget()
        kept = wanted if budget is None else min(wanted, int(KEPT_LABELS_SHARE * budget) // block_bytes)
        kept = max(kept, self.kept_blocks)  # labels already kept stay: they are paid for
        if kept == self.kept_blocks and self.kept_labels is not None:
            return self
        stream = self._like(kept)
        share = f"{KEPT_LABELS_SHARE:.0%} of the memory budget, {format_bytes(budget or 0)}"
        stream.kept_labels = (
            f"labels of the first {kept} blocks kept ({format_bytes(kept * block_bytes)}), computed once"
            + ("" if kept >= wanted else f"; {wanted - kept} more would pass {share}: computed on every read"))
        return stream

    def __getstate__(self) -> dict:
        # A task receives the labels it reads as an argument: the source it carries keeps none.
        return {**self.__dict__, "_kept": [], "_rows": [], "kept_blocks": 0, "_buffers": None}

    def fingerprint(self) -> str:
        """A hash of what the blocks are drawn from: the teacher, the sizes, the seed and the noise (and the
        split, for a split stream)."""
        from dask.base import tokenize

        split = () if self.held_out is None and self.scales == (1.0, 1.0) else (
            self.scales, self.held_out, self.split_seed)
        return tokenize(self.teacher.thetas, self.teacher.ws, self.generated, self.length, self.seed, self.noise,
                        self.block_size, *split)

    def _size(self, index: int) -> int:
        """The sequences drawn for block ``index`` (the stream's and those held out)."""
        return min(self.block_size, self.generated - index * self.block_size)

    def block_samples(self, index: int) -> int:
        return self._size(index) - (0 if self.held_out is None else self.held_out[index])

    def _held_out(self, index: int) -> np.ndarray:
        return held_out_mask(self._size(index), self.held_out[index], self.split_seed, index)

    def _training_rows(self, index: int) -> np.ndarray | None:
        """The sorted indices of block ``index``'s training sequences (None: every one), kept for kept blocks."""
        if self.held_out is None:
            return None
        rows = self._rows[index] if index < self.kept_blocks else None
        if rows is None:
            rows = np.flatnonzero(~self._held_out(index))
            if index < self.kept_blocks:
                self._rows[index] = rows
        return rows

    def _viewed(self, index: int, X: CodedTokens, Y: np.ndarray) -> tuple[CodedTokens, np.ndarray, np.ndarray | None]:
        """Block ``index`` as the stream reads it: its training ``rows``, its labels divided by s_Y as read."""
        y_scale = self.scales[1]
        return X, (Y if y_scale == 1.0 else ScaledLabels(Y, y_scale)), self._training_rows(index)

    def _block(self, index: int) -> tuple[CodedTokens, np.ndarray, np.ndarray | None]:
        kept = index < self.kept_blocks
        X, Y, _ = self._drawn_block(index, self._kept[index] if kept else None)
        if kept and self._kept[index] is None:
            self._kept[index] = Y  # new arrays hold the labels apart from the tokens: keeping them keeps no X
        return self._viewed(index, X, Y)

    def held_out_head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` held-out sequences of a split stream, in block order, in memory (as
        :meth:`~mhalearn.data.sources.ArraySource.held_out_head`)."""
        if self.held_out is None:
            raise ValueError("held_out_head: this stream holds nothing out")
        return first_sequences(self._held_out_parts(), samples)

    def _held_out_parts(self):
        for index in range(self.block_count):
            X, Y, _ = self._viewed(index, *self._drawn_block(index, None)[:2])
            mask = self._held_out(index)
            yield X[mask], Y[mask]

    def _drawn_block(self, index: int, labels: np.ndarray | None,
                     buffers: BlockBuffers | None = None) -> tuple[CodedTokens, np.ndarray, None]:
        """Block ``index`` drawn, labelled unless its ``labels`` are given (then its tokens' codes only), into
        ``buffers`` (:meth:`BlockBuffers.lent`) when given, else into new arrays, the tokens and the labels
        each in an array of its own."""
        size = self._size(index)
        if buffers is None:
            shape = (size, self.length, self.dim)
            pairs = None if labels is not None else (np.empty(shape), np.empty(shape))
            codes = np.empty((size, self.length, code_groups(self.dim)), dtype=np.uint8)
        else:
            pairs, codes = buffers
        # Coded where the block is drawn, from its sign words, as ArraySource codes its blocks: the passes'
        # kernels read the codes (a pass of the decoder then takes half the time at m = 4, d = 12, k = 4).
        if labels is not None:
            # Only the codes are drawn: the kernels of the later passes read them, and the few tokens a pass
            # keeps are decoded from them (CodedTokens), the same ±1.
            return CodedTokens(None, boolean_codes(self.seed, index, codes, self.dim), self.dim), labels, None
        X, Y = labelled_block(self.teacher, self.length, "boolean", self.noise, self.seed, index, size, codes,
                              out=pairs)
        return CodedTokens(X, codes), Y, None

    def map_blocks(self, func, *args, indexed: bool = False, blocks=None) -> list:
        """As :meth:`~mhalearn.data.sources.BlockSource.map_blocks`, every block drawn into the same arrays
        (``BlockBuffers`` of this module): ``func``'s result must hold no view of X or Y."""
        selected = range(self.block_count) if blocks is None else blocks
        with self._pass_buffers() as buffers:
            return [self._mapped_block(func, args, index, indexed, buffers) for index in selected]

    def map_until(self, needed: int, func, *args, indexed: bool = False) -> list[tuple]:
        """As :meth:`~mhalearn.data.sources.BlockSource.map_until`, its waves drawn into the same arrays."""
        with self._pass_buffers():
            return super().map_until(needed, func, *args, indexed=indexed)

    @contextmanager
    def _pass_buffers(self):
        """The :class:`BlockBuffers` of the pass under way, made by its outermost map and dropped when it ends."""
        outer = self._buffers is None
        if outer:
            self._buffers = BlockBuffers((self.block_size, self.length, self.dim), code_groups(self.dim))
        try:
            yield self._buffers
        finally:
            if outer:
                self._buffers.release(tasks=self.tasks)
                self._buffers = None

    def _mapped_block(self, func, args: tuple, index: int, indexed: bool, buffers: BlockBuffers,
                      labels: np.ndarray | None = None):
        """``func`` on block ``index`` drawn into arrays lent by ``buffers``, labelled unless its ``labels``
        are given or kept; a block whose labels are to be kept is labelled into a new array, kept."""
        if index < self.kept_blocks and labels is None:
            if self._kept[index] is None:
                self._kept[index], result = self._labelled_to_keep(func, args, index, indexed, buffers)
                return result
            labels = self._kept[index]
        with buffers.lent(self._size(index)) as lent:
            X, Y, _ = self._drawn_block(index, labels, lent)
            return run_block(func, *self._viewed(index, X, Y), args, index if indexed else None)

    def _labelled_to_keep(self, func, args: tuple, index: int, indexed: bool, buffers: BlockBuffers) -> tuple:
        """(the labels of block ``index``, ``func`` on the block): the tokens drawn into arrays lent by
        ``buffers``, the labels into an array of their own, to be kept (one array with the tokens would keep
        them alive too)."""
        with buffers.lent(self._size(index)) as lent:
            (tokens, _), codes = lent
            X, Y, _ = self._drawn_block(index, None, ((tokens, kept_array(tokens.shape)), codes))
            return Y, run_block(func, *self._viewed(index, X, Y), args, index if indexed else None)

    def __dask_tokenize__(self):
        return self.fingerprint()

    def as_dask(self) -> "DaskTeacherSource":
        """The same stream, each block of a pass one task of the active Dask scheduler
        (:class:`DaskTeacherSource`): a pass's blocks spread over a cluster's workers."""
        return self._like(self.kept_blocks, cls=DaskTeacherSource)


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
    fingerprint, which names a checkpoint, is the same too.  The labels of the
    first ``kept_blocks`` blocks are computed the first time a pass reads
    them, by the task that reads the block for that pass, and persisted
    with its result (``dask.persist``): in this process under the threaded
    scheduler, on the workers of a ``distributed.Client``, whose scheduler
    then runs a block's later tasks where its labels lie.
    """

    wave_blocks = WAVE_BLOCKS
    tasks = True

    def map_blocks(self, func, *args, indexed: bool = False, blocks=None) -> list:
        """As :meth:`~mhalearn.data.sources.BlockSource.map_blocks`, every block drawn and mapped in a task of the
        active Dask scheduler."""
        import dask

        selected = list(range(self.block_count) if blocks is None else blocks)
        labelling = [index for index in selected if index < self.kept_blocks and self._kept[index] is None]
        # Tasks named at random (pure=False), not by a hash of their arguments: a task draws into arrays the
        # pass lends, so it is no pure function of them, and hashing them takes half the build of a pass's
        # graph, while the workers wait (0.22 against 0.11 s over the 32 maps of an m = 3 fit of 3e7).
        with self._pass_buffers() as buffers:
            results = {}
            if labelling:
                # A block to keep is labelled and read by one task, whose (labels, result) Dask persists where
                # it ran: reading it again in a second task would draw its signs and run a task once more.
                pairs = dask.persist(*(dask.delayed(_label_to_keep_and_run, pure=False)(
                    self, func, args, index, indexed, buffers) for index in labelling))
                # The labels persisted alone: kept with their pair they would keep the pass's result alive too.
                kept = dask.persist(*(pair[0] for pair in pairs))
                for index, labels, pair in zip(labelling, kept, pairs):
                    self._kept[index], results[index] = labels, pair[1]
            tasks = [results[index] if index in results else dask.delayed(_draw_and_run_block, pure=False)(
                self, func, args, index, indexed, buffers, self._kept[index] if index < self.kept_blocks else None)
                for index in selected]
            return list(dask.compute(*tasks))

    def _block(self, index: int) -> tuple[CodedTokens, np.ndarray, np.ndarray | None]:
        # Read on the caller (a head of the stream): drawn and labelled there, what is kept left to the tasks.
        return self._viewed(index, *self._drawn_block(index, None)[:2])


def _label_to_keep_and_run(source: TeacherSource, func, args: tuple, index: int, indexed: bool,
                           buffers: BlockBuffers) -> tuple:
    """(the labels of block ``index`` of ``source``, ``func`` on the block), inside a Dask task on one thread:
    the labels computed into a new array, to be kept, the signs drawn into arrays lent by ``buffers``."""
    with one_thread():
        return source._labelled_to_keep(func, args, index, indexed, buffers)


def _draw_and_run_block(source: TeacherSource, func, args: tuple, index: int, indexed: bool,
                        buffers: BlockBuffers, labels: np.ndarray | None = None):
    """Block ``index`` of ``source`` drawn into arrays lent by ``buffers``, labelled unless its ``labels`` are
    given, and passed to ``func`` inside a Dask task, on one thread."""
    with one_thread():
        return source._mapped_block(func, args, index, indexed, buffers, labels)


class BlockBuffers:
    """The arrays a pass draws its blocks into, lent to one block at a time and taken back.

    A block of 65 536 sequences at k = 4, d = 12 is 50 MB of X and Y: new
    arrays for every block are new pages, which the kernel faults in and
    zeroes before the labelling writes them (about 8 % of the candidate pass
    typically, `runs/generated-pass/README.md`).  A pass lends each block task a
    free pair of arrays (``(2, block_size, k, d)`` float64 and the codes),
    allocated when none is free, so a pass holds as many as it runs blocks
    at once, as before, and drops them when it ends.  A function mapped over
    the blocks must not return a view of X or Y: the next block overwrites
    them.  Pickled, as a task shipped to another process is, it arrives as
    that process's set for the same pass (:func:`_process_buffers`)
    ([decision: lent-block-arrays]).
    """

    def __init__(self, shape: tuple, groups: int, key: str | None = None):
        self.shape, self.groups = shape, groups  # a block's (block_size, k, d) and its tokens' code groups
        self.key = uuid.uuid4().hex if key is None else key  # names the pass in other processes
        self._arrays = ScratchArrays()

    @property
    def allocated(self) -> int:
        """Arrays made: at most the blocks run at once."""
        return self._arrays.allocated

    @contextmanager
    def lent(self, size: int):
        """A free (X and Y, codes) pair, its first ``size`` sequences, returned to the free list after use."""
        with self._arrays.lent((2, *self.shape), (*self.shape[:2], self.groups),
                               dtypes=(np.float64, np.uint8)) as (pairs, codes):
            yield pairs[:, :size], codes[:size]

    def release(self, tasks: bool = False) -> None:
        """The pass has ended: its arrays go, and with ``tasks`` (its blocks ran as Dask tasks) those of the
        pass in the processes of the active ``distributed`` client."""
        self._arrays.clear()
        _drop_process_buffers(self.key)
        if tasks:
            from dask.base import get_scheduler

            client = getattr(get_scheduler(), "__self__", None)  # Client.get, when a distributed client is active
            if client is not None and hasattr(client, "run"):
                client.run(_drop_process_buffers, self.key)

    def __dask_tokenize__(self):
        return "BlockBuffers", self.shape  # what a task computes does not depend on the arrays it is lent

    def __reduce__(self):
        return _process_buffers, (self.key, self.shape, self.groups)


#: The BlockBuffers of the pass whose tasks this process runs (one pass: a new one drops the last one's).
_PROCESS_BUFFERS: dict[str, BlockBuffers] = {}
_PROCESS_LOCK = threading.Lock()


def _process_buffers(key: str, shape: tuple, groups: int) -> BlockBuffers:
    """This process's :class:`BlockBuffers` of the pass ``key``: every task of the pass run here shares them.

    A process keeps those of one pass, the last one a task came from: memory stays bounded by one pass's
    blocks at once even where no :meth:`BlockBuffers.release` reaches (a process pool).
    """
    with _PROCESS_LOCK:
        buffers = _PROCESS_BUFFERS.get(key)
        if buffers is None:
            _PROCESS_BUFFERS.clear()
            buffers = _PROCESS_BUFFERS[key] = BlockBuffers(shape, groups, key)
    return buffers


def _drop_process_buffers(key: str) -> None:
    with _PROCESS_LOCK:
        _PROCESS_BUFFERS.pop(key, None)


__all__ = ["DaskTeacherSource", "TeacherSource"]


# make_dataset's Dask arrays (Boolean law) are these streams' blocks: a fit reads the stream instead.
register_stream_kind("labelled-blocks", DaskTeacherSource)
