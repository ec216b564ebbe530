"""The examples of a fit, prepared once: checked, measured, split and standardised ([design: learners]).

:meth:`AttentionLearner.fit <mhalearn.learners.base.AttentionLearner.fit>`
hands X, Y to this package twice, around what only it decides (the
learner's shape checks, the zero-labels exit, the ``"start"``
notification):

1. :func:`check_examples` — shapes, dtypes and values, without computing
   a Dask array (:func:`check_dask_pair`);
2. :func:`prepare_fit_data` — the root mean squares the learners divide by
   (:class:`~mhalearn.data.units.Units`; on Dask arrays one pass over the
   blocks, which also checks the values and measures the largest norms),
   then the held-out split in the fit's units: :class:`FitData`, what the
   learner's ``_fit`` receives.

The three data paths are decided here only: Dask arrays (split per block,
phases 1–4 stream the training blocks, the rest reads an in-memory sample:
:func:`~mhalearn.data.dask_data.prepare_dask_data`), NumPy arrays for a
learner that streams (the same split, held in place by an
:class:`~mhalearn.data.sources.ArraySource`:
:func:`~mhalearn.data.sources.split_in_place`) and NumPy arrays for the
others (a permutation of n, copied in the fit's units).  The units are
those of :mod:`mhalearn.data.units`.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from .._validation import check_pair
from ..seeding import draw_seed
from .dask_data import SAMPLE_TRAINING, SAMPLE_VALIDATION, DaskSource, DaskStatistics, prepare_dask_data
from .sources import BLOCK_SIZE, MIN_BLOCK_SEQUENCES, Source, held_out_counts, split_in_place, warn_small_blocks
from .units import Units, check_representable_units


@dataclass(frozen=True)
class Examples:
    """Every example of a fit as given, checked, and the units the fit works in.

    ``X``, ``Y``: the examples in the data's units (NumPy arrays, or Dask
    arrays chunked along n); ``units``: their shape and root mean squares;
    ``boolean``: X's entries were checked to be ±1; ``statistics``: on Dask
    arrays, what the pass that measured the units found (the largest token
    and label norms among them), else None.
    """

    X: object
    Y: object
    units: Units
    boolean: bool
    statistics: DaskStatistics | None = None


@dataclass(frozen=True)
class FitData:
    """The examples as a learner's ``_fit`` receives them: split, in the fit's units (X / s_X, Y / s_Y).

    ``X_train``, ``Y_train`` and ``X_val``, ``Y_val``: training and held-out
    sequences in memory.  ``source``: every training sequence as a stream
    (:class:`~mhalearn.data.sources.Source`) when the learner streams its
    examples (``streams_dask``); ``X_train``, ``Y_train`` and ``X_val``,
    ``Y_val`` are then the first :data:`~mhalearn.data.dask_data.SAMPLE_TRAINING` and
    :data:`~mhalearn.data.dask_data.SAMPLE_VALIDATION` sequences of the split.  Otherwise ``source``
    is None and they hold every sequence.  ``examples``: all of them as
    given, and the units (:class:`Examples`).  Labels all zero
    (``units.y_scale == 0``) are not split: the four arrays then hold no sequence.
    """

    X_train: np.ndarray
    Y_train: np.ndarray
    X_val: np.ndarray
    Y_val: np.ndarray
    examples: Examples
    source: Source | None = None
    #: What the examples were read as, for the fit's report.
    read_as: str = ""

    @property
    def units(self) -> Units:
        """The examples' shape and the root mean squares the fit divides them by."""
        return self.examples.units


def check_examples(X, Y, *, boolean: bool, streams_dask: bool, learner: str):
    """X, Y checked as the examples of a fit: NumPy arrays, or Dask arrays when the learner streams them.

    Raises ValueError naming X or Y before any work: a Dask array for a
    learner that fits NumPy arrays (``learner`` names it), a shape, dtype or
    non-finite value that cannot be fitted, and, when ``boolean``, an entry
    of X other than ±1.  Dask arrays are checked without computing anything
    (their values by :func:`prepare_fit_data`).
    """
    if is_dask_array(X) or is_dask_array(Y):
        if not streams_dask:
            raise ValueError(f"X: {learner} fits NumPy arrays, received a Dask array; compute it "
                             f"(X.compute(), Y.compute()) or use SculptLearner, which streams Dask arrays")
        return check_dask_pair(X, Y)
    return check_pair(X, Y, boolean=boolean)


def check_dask_pair(X, Y):
    """Dask arrays X, Y of one shape (n, k, d), real and numeric, as float64 with Y chunked like X along n.

    Computes nothing; raises ValueError naming X or Y otherwise (values are
    checked by :func:`~mhalearn.data.dask_data.dask_statistics`).  Warns when X's blocks average fewer than
    :data:`~mhalearn.data.sources.MIN_BLOCK_SEQUENCES` sequences
    (:func:`~mhalearn.data.sources.warn_small_blocks`).
    """
    import dask.array as da

    arrays = {}
    for name, array in (("X", X), ("Y", Y)):
        if not isinstance(array, da.Array):
            raise ValueError(f"{name}: expected a Dask array like the other of X, Y, received "
                             f"{type(array).__name__}")
        if not (np.issubdtype(array.dtype, np.number) or np.issubdtype(array.dtype, np.bool_)) \
                or np.issubdtype(array.dtype, np.complexfloating):
            raise ValueError(f"{name}: expected a real numeric array, received dtype {array.dtype}")
        if any(math.isnan(size) for size in array.shape):
            # Dask marks the sizes it cannot know without computing (a boolean mask's rows) as NaN.
            raise ValueError(f"{name}: expected a Dask array of known chunk sizes, received shape {array.shape} "
                             f"(chunks of unknown size, as indexing with a boolean mask leaves); call "
                             f"{name} = {name}.compute_chunk_sizes() first")
        if array.ndim != 3 or min(array.shape) < 1:
            raise ValueError(f"{name}: expected shape (samples, length, dim) with all sizes >= 1, received "
                             f"{array.shape}")
        arrays[name] = array.astype(np.float64)
    if Y.shape != X.shape:
        raise ValueError(f"Y: expected shape {X.shape} to match X, received {Y.shape}")
    warn_small_blocks(X.shape[0], len(X.chunks[0]), "X", f"rechunk X and Y to blocks of at least "
                      f"{MIN_BLOCK_SEQUENCES} sequences, e.g. X.rechunk({{0: {MIN_BLOCK_SEQUENCES}}})")
    return arrays["X"], arrays["Y"].rechunk({0: X.chunks[0]})


def prepare_fit_data(X, Y, *, boolean: bool, rng: np.random.Generator, validation_fraction: float,
                     stream: bool, kept_samples: int | None = None, digest: bool = False) -> FitData:
    """The checked examples (:func:`check_examples`) measured and split: what a learner's ``_fit`` receives.

    Measures the units, refused when float64 cannot carry them
    (:func:`~mhalearn.data.units.check_representable_units`), then holds out
    ``validation_fraction`` of the examples (:func:`validation_size`) and
    standardises them.  Dask arrays are split per block, each holding out
    its share in proportion to its size
    (:func:`~mhalearn.data.sources.held_out_counts`, one seed from ``rng``;
    :func:`~mhalearn.data.dask_data.prepare_dask_data`, whose one pass over
    the blocks also checks the values and measures the largest norms);
    NumPy arrays the same way, in place, when the learner streams
    (``stream``: :func:`~mhalearn.data.sources.split_in_place`), and
    otherwise by ``rng.permutation(n)``, the first sequences of which are
    held out.  Labels all zero are not split (see :class:`FitData`).
    On Dask arrays, ``digest`` hashes every block in the same pass (what a
    checkpoint's key reads; otherwise it takes a pass of its own when asked),
    ``kept_samples`` how many training sequences the learner reads again (a
    generated stream, read instead of the arrays it draws, keeps their
    labels: :func:`~mhalearn.data.dask_data.prepare_dask_data`).
    """
    samples, length, dim = X.shape
    held_out = validation_size(samples, validation_fraction)
    if is_dask_array(X):
        statistics, split = prepare_dask_data(X, Y, boolean=boolean, held_out=held_out_counts(X.chunks[0], held_out),
                                              rng=rng, kept_samples=kept_samples, digest=digest)
        units = Units(samples=samples, length=length, dim=dim, x_scale=statistics.x_scale,
                      y_scale=statistics.y_scale)
        examples = Examples(X, Y, units, boolean, statistics)
        if split is None:
            return _unsplit(examples)
        X_train, Y_train, X_val, Y_val, source = split
        read_as = ("Dask arrays, measured in one pass over their blocks" if isinstance(source, DaskSource) else
                   "the generated stream that drew the Dask arrays, measured in one pass over it"
                   + ("" if source.kept_labels is None else f" ({source.kept_labels})"))
        return FitData(X_train, Y_train, X_val, Y_val, examples, source=source, read_as=read_as)
    # Entries ±1 (checked) have a root mean square of exactly 1: no pass needed.
    y_scale, x_scale = root_mean_square(Y), 1.0 if boolean else root_mean_square(X)
    check_representable_units(x_scale, y_scale)
    examples = Examples(X, Y, Units(samples=samples, length=length, dim=dim, x_scale=x_scale, y_scale=y_scale),
                        boolean)
    if y_scale == 0.0:
        return _unsplit(examples)
    if stream:
        # The split a Dask dataset gets, held in place: phases 1–4 read the training rows of
        # every block where they lie (no copy of the training set), and phases 5–6 see the first
        # training and held-out sequences of the split, as on a Dask dataset.
        X_train, Y_train, X_val, Y_val, source = split_in_place(
            X, Y, scales=(x_scale, y_scale), held_out=held_out_counts(block_sizes(samples), held_out),
            seed=draw_seed(rng), boolean=boolean, training=SAMPLE_TRAINING, validation=SAMPLE_VALIDATION)
        return FitData(X_train, Y_train, X_val, Y_val, examples, source=source, read_as="NumPy arrays, split in place")
    order = rng.permutation(samples)
    val, train = order[:held_out], order[held_out:]
    return FitData(standardised_rows(X, train, x_scale), standardised_rows(Y, train, y_scale),
                   standardised_rows(X, val, x_scale), standardised_rows(Y, val, y_scale), examples,
                   read_as="NumPy arrays, permuted and copied")


def _unsplit(examples: Examples) -> FitData:
    """Labels all zero: nothing to fit, nothing split (every array of no sequence)."""
    empty = np.zeros((0, examples.units.length, examples.units.dim))
    return FitData(empty, empty, empty, empty, examples)


def is_dask_array(value) -> bool:
    """Whether ``value`` is a Dask array (without importing Dask when it is not loaded)."""
    dask_array = sys.modules.get("dask.array")
    return dask_array is not None and isinstance(value, dask_array.Array)


def validation_size(samples: int, validation_fraction: float) -> int:
    """Sequences held out for validation: ``validation_fraction`` of them, at least one."""
    return max(1, int(round(validation_fraction * samples)))


def block_sizes(samples: int, block_size: int = BLOCK_SIZE) -> list[int]:
    """The sizes of the blocks of ``block_size`` sequences that ``samples`` sequences make, in order."""
    return [min(block_size, samples - start) for start in range(0, samples, block_size)]


def standardised_rows(array: np.ndarray, rows: np.ndarray, scale: float) -> np.ndarray:
    """``(array / scale)[rows]``, gathered first and divided in place: one new array, the same values."""
    part = np.take(array, rows, axis=0)
    if scale != 1.0:  # dividing by 1 changes no bit: skip the pass
        part /= scale
    return part


#: Peak |entry| within which squares neither overflow nor underflow to zero, so the sum of squares
#: can be taken directly (one pass, no scaled copy).
_DIRECT_SQUARES = (1e-140, 1e140)


@functools.cache
def numpy_blas() -> ThreadpoolController:
    """threadpoolctl's controller of the libraries loaded with NumPy's BLAS: taken once, as listing
    them costs ~16 ms (limiting through it ~0.1 ms)."""
    return ThreadpoolController()


def root_mean_square(array: np.ndarray) -> float:
    """Root mean square of the entries, computed without overflow or underflow (0 for an all-zero array)."""
    peak = max(float(np.max(array)), -float(np.min(array)))
    if peak == 0.0:
        return 0.0
    flat = array.reshape(-1)
    if _DIRECT_SQUARES[0] <= peak <= _DIRECT_SQUARES[1]:
        # On one BLAS thread, as the fit's own BLAS calls: a threaded dot sums one part per thread, so
        # the scale's last bits, and with them every bit of the fit, would follow the thread count.
        with numpy_blas().limit(limits=1, user_api="blas"):
            return math.sqrt(float(np.dot(flat, flat)) / flat.size)
    return peak * float(np.sqrt(np.mean((array / peak) ** 2)))


__all__ = ["Examples", "FitData", "block_sizes", "check_dask_pair", "check_examples", "is_dask_array",
           "prepare_fit_data", "root_mean_square", "standardised_rows", "validation_size"]
