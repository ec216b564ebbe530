"""The estimator base class of every learner of a multi-head attention layer (docs/design.md §4)."""

from __future__ import annotations

import functools
import math
import time

import numpy as np
from threadpoolctl import ThreadpoolController, threadpool_limits

from .._estimator import Estimator, SequenceRegressorMixin, check_fitted, pooled_r2
from .._validation import (
    as_generator,
    check_boolean,
    check_enough_samples,
    check_pair,
    check_sample_weight,
)
from ..attention.model import MultiHeadAttention
from ..seeding import draw_seed
from .dask_data import (
    SAMPLE_TRAINING,
    SAMPLE_VALIDATION,
    check_dask_pair,
    dask_statistics,
    in_memory_sample,
    split_blocks,
)
from .streams import BLOCK_SIZE, ArraySource, DaskSource, held_out_counts, is_dask_array
from .chen_li.phase6_select import certificate_bounds
from .report import FitStart, Notifier, Phase, ZeroLabelsReport


class AttentionLearner(SequenceRegressorMixin, Estimator):
    """Base class: scikit-learn contract for learners of a multi-head attention layer.

    A regressor of sequences: ``predict`` maps X (n, k, d) to F̂(X) (n, k, d),
    ``score`` is R² pooled over every output entry and ``n_features_in_`` is
    the token dimension d (set last in ``fit``: it marks the learner fitted).

    Subclasses declare ``_parameter_constraints`` (checked once, at the start
    of ``fit``), ``_report_class`` (the type of ``report_``) and implement
    ``_fit(X_train, Y_train, X_val, Y_val, rng, notify)`` returning
    ``(layers, fields)``: ``layers`` a dict of fitted
    :class:`MultiHeadAttention` by name (``"model"`` at least), ``fields``
    the report's phase results by name.  ``fit`` validates the data,
    standardises the units, splits off a validation set and stores each
    layer as ``<name>_`` (``model_``) and the report as ``report_``.

    Units: F(cX) with Θ/c² and W/c equals F(X) with Θ and W, and F is linear
    in W, so the learners work on X / s_X and Y / s_Y (s the root mean
    square of the entries) and map the layer back: every tolerance, ridge and
    stopping rule inside is then free of the data's units, and learning c·Y
    gives c times the W.  Boolean inputs have s_X = 1.
    """

    #: Whether the learner needs Boolean inputs unless the user opts out.
    requires_boolean = False
    #: Whether ``fit`` takes Dask arrays (``_fit`` then receives ``source=``, a DaskSource of the training blocks).
    streams_dask = False
    #: Names of the fitted layers ``_fit`` returns (stored as ``<name>_``).
    _layers = ("model",)
    #: The dataclass of ``report_`` (a :class:`~mhalearn.learners.report.LearnerReport`).
    _report_class = None

    def fit(self, X, Y, callback=None):
        """Learn the layer from examples ``X`` → ``Y`` (both of shape (n, k, d)).

        Parameters
        ----------
        X, Y : arrays of shape (n, k, d)
            NumPy arrays, or, for the learners that stream their examples
            (``streams_dask = True``: :class:`~mhalearn.SculptLearner`),
            Dask arrays chunked along n: checked and measured by block
            passes, split per block, phases 1–4 run on the blocks wherever
            Dask runs them and phases 5–6 on a bounded in-memory sample
            (:mod:`mhalearn.learners.dask_data`).
        callback : callable, optional
            ``callback(phase, result)`` is called with every phase result as
            the fit goes (first ``("start", FitStart)`` with the data's
            shape and units; see :mod:`mhalearn.learners.report`).  It only
            observes: the fit is the same with or without it, and its time
            is not in ``report_.total_seconds``.  The teacher's view of a
            fit is :class:`mhalearn.evaluation.TeacherObserver`.

        Returns
        -------
        self
        """
        self._check_params()
        notify = Notifier(callback)
        lazy = is_dask_array(X) or is_dask_array(Y)
        boolean = self.requires_boolean and not getattr(self, "allow_non_boolean", False)
        if lazy:
            if not self.streams_dask:
                raise ValueError(f"X: {type(self).__name__} fits NumPy arrays, received a Dask array; compute "
                                 f"it (X.compute(), Y.compute()) or use SculptLearner, which streams Dask arrays")
            X, Y = check_dask_pair(X, Y)
        else:
            # Entries ±1 leave no room for NaN or ±inf: a Boolean X is read once, by check_boolean.
            X, Y = check_pair(X, Y, finite_x=not boolean)
            if boolean:
                check_boolean(X)
        n, k, d = X.shape
        heads = self.heads
        self._check_shape(n, k, d)
        start = time.perf_counter()
        if lazy:
            statistics = dask_statistics(X, Y, boolean=boolean)
            x_scale, y_scale = statistics.x_scale, statistics.y_scale
        else:
            # Entries ±1 (checked above) have a root mean square of exactly 1: no pass needed.
            y_scale, x_scale = root_mean_square(Y), 1.0 if boolean else root_mean_square(X)
        check_representable_units(x_scale, y_scale)
        if y_scale == 0.0:
            for name in self._layers:
                setattr(self, f"{name}_", MultiHeadAttention(np.zeros((heads, d, d)), np.zeros((heads, d, d))))
            self.report_ = ZeroLabelsReport(total_seconds=time.perf_counter() - start, x_scale=x_scale,
                                            y_scale=y_scale)
            self.n_features_in_ = d
            return self
        units = FitStart(seconds=0.0, heads=heads, samples=n, length=k, dim=d, x_scale=x_scale, y_scale=y_scale)
        notify(Phase.START, units)
        rng = as_generator(self.random_state)
        # The held-out certificate's assumptions (phase 6), in standardised units, over every example.
        if lazy:
            self.label_bound_, self.token_norm_ = statistics.label_norm / y_scale, statistics.token_norm / x_scale
        else:
            bounds = certificate_bounds(X, Y, x_scale, y_scale, boolean=boolean)
            self.label_bound_, self.token_norm_ = bounds["label_bound"], bounds["token_norm"]
        if lazy:
            held_out = held_out_counts(X.chunks[0], self._validation_size(n))
            X_train, Y_train, X_val, Y_val = split_blocks(X / x_scale, Y / y_scale, held_out, draw_seed(rng))
            data = (*in_memory_sample(X_train, Y_train, X_val, Y_val), rng, notify)
            extra = {"source": DaskSource(X_train, Y_train)}
        elif self.streams_dask:
            # The split a Dask dataset gets, held in place: phases 1–4 read the training rows of
            # every block where they lie (no copy of the training set), and phases 5–6 see the first
            # training and held-out sequences of the split, as on a Dask dataset.
            held_out = held_out_counts(block_sizes(n), self._validation_size(n))
            source = ArraySource(X, Y, scales=(x_scale, y_scale), held_out=held_out, seed=draw_seed(rng),
                                 boolean=boolean)
            data = (*source.head(SAMPLE_TRAINING), *source.held_out_head(SAMPLE_VALIDATION), rng, notify)
            extra = {"source": source}
        else:
            n_val = self._validation_size(n)
            order = rng.permutation(n)
            val, train = order[:n_val], order[n_val:]
            X_train, X_val = standardised_rows(X, train, x_scale), standardised_rows(X, val, x_scale)
            Y_train, Y_val = standardised_rows(Y, train, y_scale), standardised_rows(Y, val, y_scale)
            data, extra = (X_train, Y_train, X_val, Y_val, rng, notify), {}
        # The Numba kernels own the cores.  OpenBLAS threads spin after each
        # small BLAS call and steal them (measured: loss_and_grad 14× slower
        # on a loaded 2-core machine), and the learners' BLAS calls are small.
        with threadpool_limits(limits=1, user_api="blas"):
            layers, fields = self._fit(*data, **extra)
        for name, layer in layers.items():
            setattr(self, f"{name}_", units.to_data_units(layer))
        self.report_ = self._report_class(total_seconds=time.perf_counter() - start - notify.seconds,
                                          x_scale=x_scale, y_scale=y_scale, **fields)
        self.n_features_in_ = d
        return self

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        """Refuse shapes and sizes the learner cannot serve, before any work (subclasses add theirs).

        ``fit`` calls it on the data's (n, k, d); the command line calls it on
        the requested shape before planting a teacher.

        Every attention learner needs k ≥ 2: with one token every attention
        pattern is 1, so Θ never touches the labels and cannot be learned (a
        fit would return an arbitrary Θ that predicts longer sequences wrongly).
        """
        if length < 2:
            raise ValueError(f"X: expected sequences of length k >= 2 (with one token every attention "
                             f"pattern is 1 and Θ is not identifiable), received k = {length}")
        n_val = self._validation_size(samples)
        if samples - n_val < 1:
            raise ValueError(f"X: expected at least 2 sequences (one to fit, one to validate), received {samples}")
        check_enough_samples((samples - n_val) * length * dim, 2 * self.heads * dim * dim)

    def _validation_size(self, samples: int) -> int:
        """Sequences held out for validation: ``validation_fraction`` of them, at least one."""
        return max(1, int(round(self.validation_fraction * samples)))

    def predict(self, X) -> np.ndarray:
        """Outputs of the learned layer, shape (n, k, d)."""
        check_fitted(self)
        return self.model_.predict(X)

    def score(self, X, Y, sample_weight=None) -> float:
        """R², the coefficient of determination, pooled over every output entry.

        R² = 1 − Σ‖F̂(X) − Y‖² / Σ‖Y − Ȳ‖², the sums over every token of every
        sequence and Ȳ the mean output token (:func:`mhalearn._estimator.pooled_r2`
        on the (n·k, d) output tokens, which is scikit-learn's ``r2_score``
        with ``multioutput="variance_weighted"`` for labels of any size);
        ``sample_weight`` (n,) weighs the sequences.  1 is a perfect fit, 0
        the mean token's.  For the relative error Σ‖F̂(X) − Y‖²/Σ‖Y‖² of the
        paper use :func:`mhalearn.relative_error`.
        """
        check_fitted(self)
        X, Y = check_pair(X, Y, self.model_.dim)
        n, k, d = Y.shape
        sample_weight = check_sample_weight(sample_weight, n)
        tokens = Y.reshape(n * k, d)
        if not np.any(tokens != tokens[0]):
            raise ValueError("Y: expected labels that are not all equal (R² is undefined for constant labels), "
                             "received constant labels")
        weights = None if sample_weight is None else np.repeat(sample_weight, k)
        return pooled_r2(tokens, self.model_.predict(X).reshape(n * k, d), weights)


#: The root mean square of X the learners accept: Θ is returned as Θ / rms(X)², which must stay finite
#: (Θ in the fit's units is O(1–10)) and rms(X)² must not overflow.
X_SCALE_RANGE = (1e-150, 1e154)
#: The largest factor rms(Y) / rms(X) (or its inverse) by which the returned W may differ from the fit's.
W_FACTOR_LIMIT = 1e305


def check_representable_units(x_scale: float, y_scale: float) -> None:
    """Refuse data whose units the returned layer could not carry in float64, before any work.

    The learners fit X / s_X and Y / s_Y and return Θ / s_X² and
    W · s_Y / s_X (see :class:`AttentionLearner`): s_X outside
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
