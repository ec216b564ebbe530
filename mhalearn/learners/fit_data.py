"""The examples of a fit, prepared once: checked, measured, split and standardised ([design: learners]).

:meth:`AttentionLearner.fit <mhalearn.learners.base.AttentionLearner.fit>`
takes X, Y through three steps, around what only it decides (the learner's
shape checks, the zero-labels exit, the ``"start"`` notification):

1. :func:`check_examples` — shapes, dtypes and values, without computing
   a Dask array (:func:`~mhalearn.learners.dask_data.check_dask_pair`);
2. :func:`measure_examples` — the root mean squares the learners divide by
   (on Dask arrays one pass over the blocks, which also checks the values and
   measures the largest norms): :class:`Examples`;
3. :func:`split_examples` — the held-out split in the fit's units:
   :class:`FitData`, what the learner's ``_fit`` receives.

The three data paths are decided here only: Dask arrays (split per block,
phases 1–4 stream the training blocks, the rest reads an in-memory sample),
NumPy arrays for a learner that streams (the same split, held in place by an
:class:`~mhalearn.learners.streams.ArraySource`) and NumPy arrays for the
others (a permutation of n, copied in the fit's units).

Units: F(cX) with Θ/c² and W/c equals F(X) with Θ and W, and F is linear
in W, so the learners work on X / s_X and Y / s_Y (s the root mean square
of the entries) and map the layer back
(:meth:`~mhalearn.learners.report.FitStart.to_data_units`): every tolerance,
ridge and stopping rule inside is then free of the data's units, and
learning c·Y gives c times the W.  Boolean inputs have s_X = 1.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from threadpoolctl import ThreadpoolController

from .._validation import check_boolean, check_pair
from ..seeding import draw_seed
from .dask_data import (
    SAMPLE_TRAINING,
    SAMPLE_VALIDATION,
    DaskStatistics,
    check_dask_pair,
    dask_statistics,
    in_memory_sample,
    split_blocks,
)
from .report import FitStart
from .streams import BLOCK_SIZE, ArraySource, DaskSource, held_out_counts, is_dask_array


@dataclass(frozen=True)
class Examples:
    """Every example of a fit as given, checked, and the units the fit works in.

    ``X``, ``Y``: the examples in the data's units (NumPy arrays, or Dask
    arrays chunked along n); ``units``: their shape and root mean squares
    (the fit's first notification); ``boolean``: X's entries were checked
    to be ±1; ``statistics``: on Dask arrays, what the pass that measured
    the units found (the largest token and label norms among them), else None.
    """

    X: object
    Y: object
    units: FitStart
    boolean: bool
    statistics: DaskStatistics | None = None


@dataclass(frozen=True)
class FitData:
    """The examples as a learner's ``_fit`` receives them: split, in the fit's units (X / s_X, Y / s_Y).

    ``X_train``, ``Y_train`` and ``X_val``, ``Y_val``: training and held-out
    sequences in memory.  ``source``: every training sequence as a stream
    (:mod:`mhalearn.learners.streams`) when the learner streams its
    examples (``streams_dask``); ``X_train``, ``Y_train`` and ``X_val``,
    ``Y_val`` are then the first :data:`~mhalearn.learners.dask_data.SAMPLE_TRAINING` and
    :data:`~mhalearn.learners.dask_data.SAMPLE_VALIDATION` sequences of the split.  Otherwise ``source``
    is None and they hold every sequence.  ``examples``: all of them as
    given, and the units (:class:`Examples`).
    """

    X_train: np.ndarray
    Y_train: np.ndarray
    X_val: np.ndarray
    Y_val: np.ndarray
    examples: Examples
    source: ArraySource | DaskSource | None = None

    @property
    def units(self) -> FitStart:
        """The examples' shape and the root mean squares the fit divides them by."""
        return self.examples.units


def check_examples(X, Y, *, boolean: bool, streams_dask: bool, learner: str):
    """X, Y checked as the examples of a fit: NumPy arrays, or Dask arrays when the learner streams them.

    Raises ValueError naming X or Y before any work: a Dask array for a
    learner that fits NumPy arrays (``learner`` names it), a shape, dtype or
    non-finite value that cannot be fitted, and, when ``boolean``, an entry
    of X other than ±1.  Dask arrays are checked without computing anything
    (their values by :func:`measure_examples`).
    """
    if is_dask_array(X) or is_dask_array(Y):
        if not streams_dask:
            raise ValueError(f"X: {learner} fits NumPy arrays, received a Dask array; compute it "
                             f"(X.compute(), Y.compute()) or use SculptLearner, which streams Dask arrays")
        return check_dask_pair(X, Y)
    # Entries ±1 leave no room for NaN or ±inf: a Boolean X is read once, by check_boolean.
    X, Y = check_pair(X, Y, finite_x=not boolean)
    if boolean:
        check_boolean(X)
    return X, Y


def measure_examples(X, Y, *, heads: int, boolean: bool) -> Examples:
    """The checked examples (:func:`check_examples`) with their units, refused when float64 cannot carry them.

    On Dask arrays one pass over the blocks checks the values and measures
    the units and the largest norms (:func:`~mhalearn.learners.dask_data.dask_statistics`).
    """
    samples, length, dim = X.shape
    statistics = None
    if is_dask_array(X):
        statistics = dask_statistics(X, Y, boolean=boolean)
        x_scale, y_scale = statistics.x_scale, statistics.y_scale
    else:
        # Entries ±1 (checked) have a root mean square of exactly 1: no pass needed.
        y_scale, x_scale = root_mean_square(Y), 1.0 if boolean else root_mean_square(X)
    check_representable_units(x_scale, y_scale)
    units = FitStart(seconds=0.0, heads=heads, samples=samples, length=length, dim=dim, x_scale=x_scale,
                     y_scale=y_scale)
    return Examples(X, Y, units, boolean, statistics)


def split_examples(examples: Examples, rng: np.random.Generator, *, validation_fraction: float,
                   stream: bool) -> FitData:
    """Hold out ``validation_fraction`` of the examples (:func:`validation_size`) and standardise them.

    Dask arrays are split per block, each holding out its share in
    proportion to its size (:func:`~mhalearn.learners.streams.held_out_counts`,
    :func:`~mhalearn.learners.dask_data.split_blocks`, one seed from
    ``rng``); NumPy arrays the same way, in place, when the
    learner streams (``stream``), and otherwise by ``rng.permutation(n)``,
    the first sequences of which are held out.
    """
    X, Y, units = examples.X, examples.Y, examples.units
    x_scale, y_scale = units.x_scale, units.y_scale
    if is_dask_array(X):
        from dask.base import tokenize

        held_out = held_out_counts(X.chunks[0], validation_size(units.samples, validation_fraction))
        seed = draw_seed(rng)
        X_train, Y_train, X_val, Y_val = split_blocks(X / x_scale, Y / y_scale, held_out, seed)
        # The training stream's values follow from the data's (hashed in the statistics pass) and the split.
        content = tokenize(examples.statistics.content, x_scale, y_scale, held_out, seed)
        return FitData(*in_memory_sample(X_train, Y_train, X_val, Y_val), examples,
                       source=DaskSource(X_train, Y_train, content=content))
    if stream:
        # The split a Dask dataset gets, held in place: phases 1–4 read the training rows of
        # every block where they lie (no copy of the training set), and phases 5–6 see the first
        # training and held-out sequences of the split, as on a Dask dataset.
        held_out = held_out_counts(block_sizes(units.samples), validation_size(units.samples, validation_fraction))
        source = ArraySource(X, Y, scales=(x_scale, y_scale), held_out=held_out, seed=draw_seed(rng),
                             boolean=examples.boolean)
        return FitData(*source.head(SAMPLE_TRAINING), *source.held_out_head(SAMPLE_VALIDATION), examples,
                       source=source)
    held_out = validation_size(units.samples, validation_fraction)
    order = rng.permutation(units.samples)
    val, train = order[:held_out], order[held_out:]
    return FitData(standardised_rows(X, train, x_scale), standardised_rows(Y, train, y_scale),
                   standardised_rows(X, val, x_scale), standardised_rows(Y, val, y_scale), examples)


def validation_size(samples: int, validation_fraction: float) -> int:
    """Sequences held out for validation: ``validation_fraction`` of them, at least one."""
    return max(1, int(round(validation_fraction * samples)))


#: The root mean square of X the learners accept: Θ is returned as Θ / rms(X)², which must stay finite
#: (Θ in the fit's units is O(1–10)) and rms(X)² must not overflow.
X_SCALE_RANGE = (1e-150, 1e154)
#: The largest factor rms(Y) / rms(X) (or its inverse) by which the returned W may differ from the fit's.
W_FACTOR_LIMIT = 1e305


def check_representable_units(x_scale: float, y_scale: float) -> None:
    """Refuse data whose units the returned layer could not carry in float64, before any work.

    The learners fit X / s_X and Y / s_Y and return Θ / s_X² and
    W · s_Y / s_X (see the module docstring): s_X outside
    :data:`X_SCALE_RANGE`, or s_Y / s_X beyond 10^±305, would make those
    overflow or vanish.  The message names X or Y and its root mean square.
    """
    low, high = X_SCALE_RANGE
    if not low <= x_scale <= high:
        raise ValueError(f"X: expected entries with a root mean square in [{low:g}, {high:g}] (the returned Θ "
                         f"scales as 1/rms(X)², which float64 cannot carry beyond), received {x_scale:.3g}; "
                         f"rescale X")
    if y_scale > 0.0 and abs(math.log10(y_scale) - math.log10(x_scale)) > math.log10(W_FACTOR_LIMIT):
        raise ValueError(f"Y: expected a root mean square within {W_FACTOR_LIMIT:g}× of X's (the returned W "
                         f"scales as rms(Y)/rms(X)), received {y_scale:.3g} against {x_scale:.3g}; rescale Y")


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


__all__ = ["Examples", "FitData", "W_FACTOR_LIMIT", "X_SCALE_RANGE", "block_sizes", "check_examples",
           "check_representable_units", "measure_examples", "root_mean_square", "split_examples",
           "standardised_rows", "validation_size"]
