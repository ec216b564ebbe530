"""The estimator base class of every learner of a multi-head attention layer ([design: learners])."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from .._estimator import Estimator, SequenceRegressorMixin, check_fitted, pooled_r2
from .._validation import as_generator, check_enough_samples, check_pair, check_sample_weight
from ..attention.model import MultiHeadAttention, check_attention_memory
from ..data.fit_data import FitData, check_examples, prepare_fit_data, validation_size
from .report import FitStart, FitStep, Notifier, Phase, ZeroLabelsReport


@dataclass(frozen=True)
class FitResult:
    """What a learner's ``_fit`` returns, in the fit's units (X / s_X, Y / s_Y).

    ``layers``: the fitted layers by name, exactly the learner's ``_layers``
    (``"model"`` at least), which ``fit`` stores in the data's units as
    ``<name>_``; ``report``: the fields of the learner's ``_report_class``
    other than the time and the units, which ``fit`` adds.
    """

    layers: Mapping[str, MultiHeadAttention]
    report: Mapping[str, object]


class AttentionLearner(SequenceRegressorMixin, Estimator):
    """Base class: scikit-learn contract for learners of a multi-head attention layer.

    A regressor of sequences: ``predict`` maps X (n, k, d) to F̂(X) (n, k, d),
    ``score`` is R² pooled over every output entry and ``n_features_in_`` is
    the token dimension d (set last in ``fit``: it marks the learner fitted).

    Subclasses declare ``_parameter_constraints`` (checked once, at the start
    of ``fit``), ``_layers`` and ``_report_class`` (the type of ``report_``)
    and implement ``_fit``.  ``fit`` checks and measures the examples,
    standardises the units and splits off a validation set
    (:mod:`mhalearn.data.fit_data`: the examples enter the data layer to
    be checked, then to be measured and split), hands them to ``_fit`` as a
    :class:`~mhalearn.data.fit_data.FitData` and stores what it returns
    (a :class:`FitResult`): each layer as ``<name>_`` (``model_``) in the
    data's units, and the report as ``report_``.  The learners work in the
    fit's units, X / s_X and Y / s_Y (s the root mean square of the entries;
    see :mod:`mhalearn.data.units`), so every tolerance, ridge and
    stopping rule inside is free of the data's units.
    """

    #: Whether the learner needs Boolean inputs unless the user opts out.
    requires_boolean = False
    #: Whether ``fit`` takes Dask arrays; NumPy arrays are then split in place and streamed too
    #: (``FitData.source``).
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
            (:mod:`mhalearn.data.dask_data`).
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
        start = time.perf_counter()
        self._check_params()
        notify = Notifier(callback)
        boolean = self.requires_boolean and not getattr(self, "allow_non_boolean", False)
        X, Y = check_examples(X, Y, boolean=boolean, streams_dask=self.streams_dask, learner=type(self).__name__)
        self._check_shape(*X.shape)
        rng = as_generator(self.random_state)
        data = prepare_fit_data(X, Y, boolean=boolean, rng=rng, validation_fraction=self.validation_fraction,
                                stream=self.streams_dask, **self._data_options(X.shape[0]))
        units = data.examples.units
        prepared = FitStep(seconds=time.perf_counter() - start, name="data", read_as=data.read_as)
        if units.y_scale == 0.0:
            zero = {name: MultiHeadAttention(np.zeros((self.heads, units.dim, units.dim)),
                                             np.zeros((self.heads, units.dim, units.dim))) for name in self._layers}
            self._store(zero, ZeroLabelsReport(total_seconds=time.perf_counter() - start, x_scale=units.x_scale,
                                               y_scale=units.y_scale, steps=(prepared,)), units.dim)
            return self
        notify(Phase.START, FitStart(seconds=0.0, heads=self.heads, **dataclasses.asdict(units)))
        # The Numba kernels own the cores.  OpenBLAS threads spin after each
        # small BLAS call and steal them (measured: loss_and_grad 14× slower
        # on a loaded 2-core machine), and the learners' BLAS calls are small.
        with threadpool_limits(limits=1, user_api="blas"):
            fitted = self._fit(data, rng, notify)
        # The examples go now, timed: a stream's kept labels (GiBs at 10⁷ sequences) take a second to unmap.
        released = time.perf_counter()
        del data
        release = FitStep(seconds=time.perf_counter() - released, name="release",
                          read_as="the examples' stream and what it kept, freed", after_phases=True)
        if set(fitted.layers) != set(self._layers):
            raise TypeError(f"{type(self).__name__}._fit returned the layers {sorted(fitted.layers)}, expected "
                            f"{sorted(self._layers)}")
        fields = dict(fitted.report)
        steps = (prepared, *fields.pop("steps", ()), release)
        report = self._report_class(total_seconds=time.perf_counter() - start - notify.seconds,
                                    x_scale=units.x_scale, y_scale=units.y_scale, steps=steps,
                                    observer_seconds=notify.seconds, **fields)
        self._store({name: units.to_data_units(layer) for name, layer in fitted.layers.items()}, report, units.dim)
        return self

    def _data_options(self, samples: int) -> dict:
        """What :func:`~mhalearn.data.fit_data.prepare_fit_data` is told of the passes to come over ``samples``
        sequences (its ``kept_samples`` and ``digest``): nothing, unless the learner streams its examples."""
        return {}

    def _fit(self, data: FitData, rng: np.random.Generator, notify: Notifier) -> FitResult:
        """Fit the layer to ``data`` (in the fit's units), drawing from ``rng`` and telling ``notify``
        ``(phase, result)`` after every phase; every subclass implements it."""
        raise NotImplementedError

    def _store(self, layers: dict, report, dim: int) -> None:
        """The fitted state: each layer as ``<name>_``, ``report_``, then ``n_features_in_`` (fitted)."""
        for name, layer in layers.items():
            setattr(self, f"{name}_", layer)
        self.report_ = report
        self.n_features_in_ = dim

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
        check_enough_samples((samples - n_val) * length * dim, 2 * self.heads * dim * dim, heads=self.heads,
                             dim=dim)
        check_attention_memory(self.heads, length, dim)

    def _validation_size(self, samples: int) -> int:
        """Sequences held out for validation: ``validation_fraction`` of them, at least one."""
        return validation_size(samples, self.validation_fraction)

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
