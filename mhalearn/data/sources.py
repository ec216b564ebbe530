"""Examples as blocks, so the sculpting phases run in bounded memory, in one process or on a Dask cluster.

The phases of :class:`~mhalearn.SculptLearner` pass over the examples
several times (decode every row, keep the agreement rows, refit, decode
again).  They read the examples through a *source*: an object with
``samples``, ``length``, ``dim``, ``block_count`` and

- ``map_blocks(func, *args)``: ``func(X, Y, rows, *args)`` on every block
  ``(X, Y)`` (or on the blocks ``blocks`` names), the list of results in
  block order.  ``rows`` is None when every sequence of the block belongs to
  the stream, or the sorted indices of those that do: a training split held
  in place, which the kernels read where the rows lie rather than copy.
  ``X`` is an array or a :class:`CodedTokens` (Boolean tokens with their
  codes), ``Y`` an array or a :class:`ScaledLabels` (labels divided as they
  are read): ``np.asarray``, indexing and ``shape`` as for an array.
  Every pass is such a map followed by a reduction of the
  results, on the caller and in block order, so ``func`` returns a small
  summary (normal equations, the rows a block accepts), never a view of X
  or Y (a generated source draws its next block into the same arrays), and a
  pass gives the same bits whoever runs the blocks.  A pass that needs randomness draws one
  seed on the caller and passes ``indexed=True``: ``func`` then receives the
  block's index last and draws from ``numpy.random.default_rng([seed, index])``;
- ``blocks()``, the blocks' sequences in order, and ``head(samples)``, the
  first ``samples`` sequences in memory;
- ``block_samples(index)``, the stream's sequences in a block, and
  ``prefix(samples)``, the first blocks holding ``samples`` sequences as a
  source of their own (:class:`PrefixSource`);
- ``wave_blocks``, how many blocks a pass that may stop early maps at once
  (``map_until``);
- ``keeping_labels(samples)``, the same stream keeping the labels it computes
  for its first blocks holding ``samples`` sequences (a generated stream,
  within the memory budget), with ``kept_labels`` saying what it keeps;
- ``fingerprint()``, a hash of the examples' values (:mod:`mhalearn.data.checkpoint`).

:class:`Source` states that contract as a ``typing.Protocol``, and
:class:`BlockSource` implements what every source shares.
:class:`ArraySource` wraps arrays already in memory (optionally standardised
and split block by block, in place: :class:`~mhalearn.SculptLearner` on
NumPy arrays makes no copy of its training set) and runs the blocks one
after the other in the calling process;
:class:`~mhalearn.data.dask_data.DaskSource` wraps Dask arrays chunked
along n and runs each block as a task of whatever Dask scheduler is active
(threads, processes or a ``distributed.Client``).  A stream generated
anew on every pass is a source defined beside its generator, in
:mod:`mhalearn.attention`.
"""

from __future__ import annotations

import math
from typing import Callable, Iterator, Protocol

import numpy as np

from .._memory import get_memory_budget
from .._validation import check_positive_int
from .token_codes import block_codes, code_groups, signs_of_codes

#: Sequences per block: about 25 MB of float64 inputs and labels at d = 12, k = 4.
BLOCK_SIZE = 1 << 16
#: Blocks a :class:`~mhalearn.data.dask_data.DaskSource` maps at once in a pass that may stop early (enough to keep
#: workers busy).
WAVE_BLOCKS = 8
#: Sequences per block below which a fit on a Dask dataset spends more time scheduling than computing:
#: every pass runs one task per block, milliseconds each whatever its size (measured, SculptLearner(1)
#: on 3500 sequences, d = 6, k = 4, threaded scheduler: 4.6 s in blocks of 500, 9.3 s in blocks of
#: 100, 17 s in blocks of 50, 93 s in blocks of 7).
MIN_BLOCK_SEQUENCES = 100


def warn_small_blocks(samples: int, blocks: int, name: str, remedy: str) -> None:
    """Warn (dask's ``PerformanceWarning``) when ``samples`` sequences in ``blocks`` blocks average fewer
    than :data:`MIN_BLOCK_SEQUENCES` a block; ``remedy`` says how to make them larger."""
    if blocks > 1 and samples < MIN_BLOCK_SEQUENCES * blocks:
        import warnings

        from dask.array.core import PerformanceWarning

        warnings.warn(f"{name}: {blocks} blocks of {samples / blocks:.3g} sequences on average; every pass of a "
                      f"fit runs a Dask task per block, milliseconds each whatever its size (measured: a fit of "
                      f"3500 sequences took 93 s in blocks of 7, 4.6 s in blocks of 500): {remedy}",
                      PerformanceWarning, stacklevel=3)


class Source(Protocol):
    """A stream of examples read block by block: what the phases of Chen & Li's learner read (module docstring).

    Implemented by :class:`BlockSource` and its subclasses
    (:class:`ArraySource`, :class:`PrefixSource`,
    :class:`~mhalearn.data.dask_data.DaskSource` and the generated streams
    of :mod:`mhalearn.attention`).
    """

    samples: int
    length: int
    dim: int
    block_count: int
    wave_blocks: int

    def map_blocks(self, func: Callable, *args, indexed: bool = False, blocks=None) -> list:
        """``func(X, Y, rows, *args)`` on every block (or those ``blocks`` names), in block order."""

    def map_until(self, needed: int, func: Callable, *args, indexed: bool = False) -> list[tuple]:
        """A pass that stops once ``needed`` items have come back: ``[(result, take)]`` in block order."""

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The blocks' sequences ``(X, Y)`` in order."""

    def block(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Block ``index`` as a pass hands it to ``map_blocks``' function: ``(X, Y, rows)``."""

    def head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` sequences, in memory."""

    def block_samples(self, index: int) -> int:
        """The stream's sequences in block ``index``."""

    def prefix(self, samples: int) -> Source:
        """The first blocks holding at least ``samples`` sequences, as a source."""

    def keeping_labels(self, samples: int) -> Source:
        """The same stream, keeping the labels it computes for its first blocks holding ``samples`` sequences."""

    def fingerprint(self) -> str:
        """A hash of the examples' values, which names a fit's checkpoint."""


class BlockSource:
    """What every source shares: the blocks by index, a sequential ``map_blocks``, ``head``.

    Subclasses set ``samples``, ``length``, ``dim`` and ``block_count`` and
    implement ``_block(index)`` → ``(X, Y, rows)`` (``rows`` as
    ``map_blocks`` gives it) and ``fingerprint()``, a hash of the examples
    that names a fit's checkpoint (:mod:`mhalearn.data.checkpoint`).
    """

    #: Blocks a pass that may stop early maps at once: one, in the calling process.
    wave_blocks = 1
    #: What the source keeps of the labels it computes (:meth:`keeping_labels`); None: nothing.
    kept_labels = None

    def _block(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        raise NotImplementedError

    def fingerprint(self) -> str:
        """A hash of what the blocks are drawn from, which names a checkpoint's key."""
        raise NotImplementedError

    def block(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Block ``index`` as ``map_blocks`` hands it to its function: ``(X, Y, rows)``, ``rows`` None: all."""
        if not 0 <= index < self.block_count:
            raise IndexError(f"block {index} of a source of {self.block_count} blocks")
        return self._block(index)

    def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The blocks' sequences ``(X, Y)`` in order, the same on every pass (gathered when ``rows`` is set)."""
        for index in range(self.block_count):
            X, Y, rows = self._block(index)
            yield (np.asarray(X), np.asarray(Y)) if rows is None else (X[rows], Y[rows])

    def map_blocks(self, func, *args, indexed: bool = False, blocks=None) -> list:
        """``[func(X, Y, rows, *args) for every block]`` in block order (``index`` last if ``indexed``).

        ``blocks`` (an iterable of block indices, default all) restricts the map to those blocks, in that order.
        """
        selected = range(self.block_count) if blocks is None else blocks
        return [run_block(func, *self._block(index), args, index if indexed else None) for index in selected]

    def map_until(self, needed: int, func, *args, indexed: bool = False) -> list[tuple]:
        """A pass that stops once ``needed`` items have come back: ``[(result, take)]`` in block order.

        ``func(X, Y, rows, *args, missing)`` (``index`` last if ``indexed``)
        returns a sized result whose first ``take`` items are the ones kept,
        given the items still ``missing`` when its wave started.  The blocks
        are mapped in waves of ``wave_blocks`` and the pass ends at the block
        that completes ``needed``, so the results do not depend on the wave
        size as long as a shorter ``missing`` keeps a prefix of the same items.
        """
        taken, kept = [], 0
        for first in range(0, self.block_count, self.wave_blocks):
            wave = range(first, min(first + self.wave_blocks, self.block_count))
            for result in self.map_blocks(func, *args, needed - kept, indexed=indexed, blocks=wave):
                take = min(len(result), needed - kept)
                taken.append((result, take))
                kept += take
                if kept >= needed:
                    return taken
        return taken

    def head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` sequences (fewer when the source is shorter), in memory."""
        return first_sequences(self.blocks(), samples)

    def block_samples(self, index: int) -> int:
        """The stream's sequences in block ``index``."""
        raise NotImplementedError

    def prefix(self, samples: int) -> "BlockSource":
        """The first blocks that hold at least ``samples`` sequences, as a source (:class:`PrefixSource`);
        the source itself when they are all of it."""
        prefix = PrefixSource(self, samples)
        return self if prefix.block_count == self.block_count else prefix

    def keeping_labels(self, samples: int) -> "BlockSource":
        """The same stream, keeping the labels it computes for its first blocks holding ``samples``
        sequences: the source itself, whose labels are read, not computed (a generated stream's own
        ``keeping_labels`` keeps them)."""
        return self


class PrefixSource(BlockSource):
    """The first blocks of ``source`` holding at least ``samples`` sequences, read as ``source`` reads them.

    Block b of the prefix is block b of the source, its index included, so a
    pass that draws from ``default_rng([seed, b])`` draws the same on both:
    a phase run on the prefix computes what it computes on a source that
    ends there.  Phases 1–3 of the body read one ([decision: candidate-pass]).
    """

    def __init__(self, source: BlockSource, samples: int):
        self.source = source
        self.length, self.dim, self.wave_blocks = source.length, source.dim, source.wave_blocks
        self.block_count, self.samples = 0, 0
        while self.samples < samples and self.block_count < source.block_count:
            self.samples += source.block_samples(self.block_count)
            self.block_count += 1

    def block_samples(self, index: int) -> int:
        return self.source.block_samples(index)

    def _block(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        return self.source._block(index)

    def fingerprint(self) -> str:
        return f"{self.source.fingerprint()}[:{self.block_count} blocks]"

    def map_blocks(self, func, *args, indexed: bool = False, blocks=None) -> list:
        """The source's ``map_blocks`` on the prefix's blocks (by default all of them)."""
        return self.source.map_blocks(func, *args, indexed=indexed,
                                      blocks=range(self.block_count) if blocks is None else blocks)


def first_sequences(parts: Iterator[tuple[np.ndarray, np.ndarray]], samples: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``samples`` sequences of the parts ``(X, Y)`` in order (fewer when they hold fewer),
    concatenated; parts past the one that completes them are not read."""
    taken, total = [], 0
    for X, Y in parts:
        taken.append((X, Y))
        total += X.shape[0]
        if total >= samples:
            break
    return (np.concatenate([part[0] for part in taken])[:samples],
            np.concatenate([part[1] for part in taken])[:samples])


def run_block(func, X: np.ndarray, Y: np.ndarray, rows: np.ndarray | None, args: tuple, index: int | None):
    """``func(X, Y, rows, *args)``, with the block's ``index`` last unless it is None."""
    return func(X, Y, rows, *args) if index is None else func(X, Y, rows, *args, index)


def stream_rows(rows: np.ndarray | None, samples: int) -> np.ndarray:
    """A kernel's ``rows``: the given indices as C-contiguous int64, or every one of ``samples`` when None."""
    return np.arange(samples) if rows is None else np.ascontiguousarray(rows, dtype=np.int64)


def held_out_counts(sizes, held_out: int) -> list[int]:
    """How many of ``held_out`` sequences each block of ``sizes`` sequences holds out: in proportion to its size.

    Block b, holding sequences [s_b, e_b) of n, holds out ⌊H·e_b/n⌋ − ⌊H·s_b/n⌋ of the H = ``held_out``:
    the counts add up to H whatever the blocks, so the split holds out the same fraction of the
    examples under any chunking.  (Rounding each block's own share up to at least one would hold
    out every sequence of blocks of one, and half of blocks of two.)
    """
    samples = sum(sizes)
    counts, start = [], 0
    for size in sizes:
        counts.append(held_out * (start + size) // samples - held_out * start // samples)
        start += size
    return counts


def held_out_mask(size: int, held_out: int, seed: int, index: int) -> np.ndarray:
    """Which of block ``index``'s ``size`` sequences are held out: ``held_out`` of them, drawn from
    ``default_rng([seed, index])`` (the same wherever and whenever the block is read)."""
    mask = np.zeros(size, dtype=bool)
    mask[np.random.default_rng([seed, index]).choice(size, held_out, replace=False)] = True
    return mask


class ArraySource(BlockSource):
    """Blocks of arrays ``X``, ``Y`` of shape (n, k, d) held in memory, optionally standardised and split.

    ``scales`` = (s_X, s_Y) divides each block as it is read (a block's
    copy, never the arrays').  ``held_out`` (one count per block of
    ``block_size``) and ``seed`` leave out, in block b, the ``held_out[b]``
    sequences of :func:`held_out_mask`: the stream is the rest, which passes
    read in place (``rows``), and :meth:`held_out_head` gives the first
    held-out ones.  This is the split a Dask dataset gets
    (:func:`~mhalearn.data.dask_data.split_blocks`), without a copy of
    the training set; each block's training rows are found on the first pass
    that reads it and kept (8 bytes a sequence) when X, Y and they fit the
    memory budget.  ``boolean`` (X's entries all ±1, unscaled) keeps the
    codes of X's tokens, one byte per token and group of six entries (8 bytes
    a sequence at d = 12, k = 4: 2 % of X and Y), coded on the first pass, so
    that the kernels of later passes read them instead of X
    (:class:`CodedTokens`) — when X, Y, the rows kept and the codes fit the
    memory budget (:func:`mhalearn.set_memory_budget`); otherwise every pass
    codes its blocks anew, to the same bits.
    """

    def __init__(self, X: np.ndarray, Y: np.ndarray, block_size: int = BLOCK_SIZE, *,
                 scales: tuple[float, float] = (1.0, 1.0), held_out: list[int] | None = None, seed: int = 0,
                 boolean: bool = False):
        self.X, self.Y = X, Y
        total, self.length, self.dim = X.shape
        self.block_size = check_positive_int(block_size, "block_size")
        self.block_count = -(-total // self.block_size)
        self.scales = tuple(float(scale) for scale in scales)
        if held_out is not None and len(held_out) != self.block_count:
            raise ValueError(f"held_out: expected one count per block ({self.block_count}), received "
                             f"{len(held_out)}")
        self.held_out, self.seed = held_out, seed
        self.samples = total - (0 if held_out is None else sum(held_out))
        budget, kept = get_memory_budget(), X.nbytes + Y.nbytes
        # Each block's training rows, found on the first pass that reads it and kept when they fit the
        # budget (8 bytes a sequence): drawing a block's split anew costs a pass 1–2 % of its time.
        self._rows = None
        if held_out is not None and (budget is None or kept + 8 * self.samples <= budget):
            self._rows, kept = [None] * self.block_count, kept + 8 * self.samples
        self._codes = None
        if boolean and self.scales[0] == 1.0:
            shape = (total, self.length, code_groups(self.dim))
            if budget is None or kept + math.prod(shape) <= budget:
                # Filled a block at a time, on the first pass that reads it (pages untouched until then).
                self._codes = np.empty(shape, dtype=np.uint8)
                self._coded = np.zeros(self.block_count, dtype=bool)

    def _sequences(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        """Block ``index`` of X, Y in the source's units: views, a scaled copy of X when its scale is not
        1, and Y's labels scaled as they are read (:class:`ScaledLabels`) when its scale is not 1; a
        Boolean source's X comes with its codes (:class:`CodedTokens`)."""
        start = index * self.block_size
        X, Y = self.X[start:start + self.block_size], self.Y[start:start + self.block_size]
        x_scale, y_scale = self.scales
        Y = Y if y_scale == 1.0 else ScaledLabels(Y, y_scale)
        if self._codes is not None:
            return CodedTokens(X, self._block_codes(index, X)), Y
        # Dividing by 1 changes no bit: the block is then a view.
        return (X if x_scale == 1.0 else X / x_scale), Y

    def _block_codes(self, index: int, X: np.ndarray) -> np.ndarray:
        """The codes of block ``index`` (its tokens X), coded on the first call."""
        codes = self._codes[index * self.block_size:index * self.block_size + len(X)]
        if not self._coded[index]:
            if not block_codes(X, codes):
                raise ValueError(f"X: expected Boolean entries in {{-1, +1}} (the source was built with "
                                 f"boolean=True), received others in block {index}")
            self._coded[index] = True
        return codes

    def block_samples(self, index: int) -> int:
        size = min(self.block_size, self.X.shape[0] - index * self.block_size)
        return size - (0 if self.held_out is None else self.held_out[index])

    def _held_out(self, index: int) -> np.ndarray:
        size = min(self.block_size, self.X.shape[0] - index * self.block_size)
        return held_out_mask(size, self.held_out[index], self.seed, index)

    def _block(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        X, Y = self._sequences(index)
        return X, Y, None if self.held_out is None else self._training_rows(index)

    def _training_rows(self, index: int) -> np.ndarray:
        """The sorted indices of block ``index``'s training sequences (those not held out)."""
        if self._rows is not None and self._rows[index] is not None:
            return self._rows[index]
        rows = np.flatnonzero(~self._held_out(index))
        if self._rows is not None:
            self._rows[index] = rows
        return rows

    def head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` sequences of the stream (fewer when it is shorter); views when the
        source neither scales nor splits."""
        if self.held_out is None and self.scales == (1.0, 1.0):
            return self.X[:samples], self.Y[:samples]
        return super().head(samples)

    def held_out_head(self, samples: int) -> tuple[np.ndarray, np.ndarray]:
        """The first ``samples`` held-out sequences (fewer when there are fewer), in block order, in memory."""
        if self.held_out is None:
            raise ValueError("held_out_head: this source holds nothing out")
        return first_sequences(self._held_out_parts(), samples)

    def _held_out_parts(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Every block's held-out sequences, in block order."""
        for index in range(self.block_count):
            X, Y = self._sequences(index)
            mask = self._held_out(index)
            yield X[mask], Y[mask]

    def fingerprint(self) -> str:
        """A hash of the examples, their blocks, units and split (reads every byte once: ~2 GB/s)."""
        from dask.base import tokenize

        return tokenize(self.X, self.Y, self.block_size, self.scales, self.held_out, self.seed)


def split_in_place(X: np.ndarray, Y: np.ndarray, *, scales: tuple[float, float], held_out: list[int], seed: int,
                   boolean: bool, training: int, validation: int):
    """Arrays X, Y split as a Dask dataset is, in place: ``(X_train, Y_train, X_val, Y_val, source)``.

    ``source`` is the :class:`ArraySource` of the training sequences (block
    b holding out ``held_out[b]`` of its sequences, drawn from ``seed``;
    ``scales`` and ``boolean`` as there); ``X_train``, ``Y_train`` are its
    first ``training`` sequences and ``X_val``, ``Y_val`` the first
    ``validation`` held-out ones, in memory.
    """
    source = ArraySource(X, Y, scales=scales, held_out=held_out, seed=seed, boolean=boolean)
    return (*source.head(training), *source.held_out_head(validation), source)


class _BlockView:
    """What :class:`ScaledLabels` and :class:`CodedTokens` share: the ``shape``, ``dtype``, ``ndim`` and
    length of the block they wrap, so that a block function reads them as an array."""

    def __init__(self, block: np.ndarray):
        self.shape, self.dtype, self.ndim = block.shape, block.dtype, block.ndim

    def __len__(self) -> int:
        return self.shape[0]


class ScaledLabels(_BlockView):
    """A block of labels Y / ``scale``, divided as it is read: ``np.asarray`` gives the whole block, and
    indexing the entries indexed (the bits of ``(Y / scale)[index]``).

    A pass that reads the labels of a few rows only (the margin pass keeps one row in hundreds)
    then divides those, not the block: dividing a block costs as much as a tenth of a decoding pass.
    """

    def __init__(self, labels: np.ndarray, scale: float):
        super().__init__(labels)
        self.labels, self.scale = labels, scale

    def __array__(self, dtype=None, copy=None):
        scaled = self.labels / self.scale
        return scaled if dtype is None else scaled.astype(dtype, copy=False)

    def __getitem__(self, index) -> np.ndarray:
        return self.labels[index] / self.scale


def kernel_labels(Y) -> tuple[np.ndarray, float]:
    """A block's labels as a kernel reads them: a C-contiguous array and the scale the kernel divides each
    label by as it reads it (a :class:`ScaledLabels` block's own labels and scale: no divided copy; 1 for
    an array)."""
    if isinstance(Y, ScaledLabels):
        return np.ascontiguousarray(Y.labels), float(Y.scale)
    return np.ascontiguousarray(Y), 1.0


class CodedTokens(_BlockView):
    """A block of Boolean sequences X with their tokens' codes
    (:func:`~mhalearn.data.token_codes.token_codes`), shape (n, k, ⌈d / 6⌉), one byte each.

    An array for everyone (``np.asarray``, indexing and ``shape`` read X); the kernels of phases 2
    and 3 read ``codes`` instead of coding every token again, and never touch X: a pass then reads
    8 bytes of a sequence's tokens instead of 384 (d = 12, k = 4).  A block known by its codes alone
    (``tokens`` None, its tokens' ``dim`` given: a stream's block whose labels were kept, read again) decodes
    its tokens from them where they are read: indexing decodes the sequences indexed, ``np.asarray``
    the whole block, once; :func:`kernel_tokens` lends a kernel that reads the codes no tokens at all.
    """

    def __init__(self, tokens: np.ndarray | None, codes: np.ndarray, dim: int | None = None):
        if tokens is None:
            self.shape, self.dtype, self.ndim = (*codes.shape[:2], dim), np.dtype(np.float64), 3
        else:
            super().__init__(tokens)
        self.tokens, self.codes = tokens, codes

    def __array__(self, dtype=None, copy=None):
        if self.tokens is None:
            self.tokens = signs_of_codes(self.codes, self.shape[2])
        tokens = self.tokens if dtype is None else self.tokens.astype(dtype, copy=False)
        return tokens.copy() if copy and tokens is self.tokens else tokens

    def __getitem__(self, index) -> np.ndarray:
        if self.tokens is None and not isinstance(index, tuple):
            return signs_of_codes(self.codes[index], self.shape[2])
        return np.asarray(self)[index]


def kernel_tokens(X, codes_suffice: bool, dtype=None) -> np.ndarray:
    """A block's tokens as a kernel takes them: a C-contiguous array (of ``dtype`` when given), or an empty
    (0, k, d) float64 one for a :class:`CodedTokens` block known by its codes alone when ``codes_suffice`` (the
    kernel, given the codes, reads nothing of X but its shape), rather than its tokens decoded for nothing."""
    if codes_suffice and isinstance(X, CodedTokens) and X.tokens is None:
        return np.empty((0, *X.shape[1:]))
    return np.ascontiguousarray(X, dtype=dtype)
