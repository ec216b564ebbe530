"""The estimator base of the learners that search a span: Chen & Li's and the moment route's ([design: sculpt]).

:class:`SpanSearchLearner` is the base of :class:`~mhalearn.SculptLearner`
and :class:`~mhalearn.MomentLearner`: both end with Chen & Li's phases 5–6
(:func:`~mhalearn.learners.chen_li.search_and_select`).
:data:`SEARCH_CONSTRAINTS` are the hyper-parameters both learners share, and
:func:`certificate_assumptions` the bounds phase 6's certificate assumes, read
from every example: only these learners pay for that read.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import time

import numpy as np

from .._memory import check_memory
from .._validation import Boolean, Instance, Integer, Real, Seed
from ..data.dask_data import SAMPLE_TRAINING
from ..data.fit_data import Examples, FitData
from .base import AttentionLearner, FitResult
from .chen_li.fit import SpanSearchFit, SpanSearchReport
from .chen_li.phase5_net import check_net
from .chen_li.phase6_select import certificate_bounds
from .chen_li.settings import NORM_BOUND, SearchSettings
from .least_squares import projections_memory
from .report import FitStep, Notifier

#: Phases 5–6's default settings, the span-search learners' default ``search``.
SEARCH = SearchSettings()
#: The share of examples the span-search learners hold out for phase 6's selection and its certificate.
VALIDATION_FRACTION = 0.2

#: The hyper-parameters shared by the sculpting and moment learners: phases 5–6's settings among them.
SEARCH_CONSTRAINTS = {
    "heads": [Integer(1)],
    "search": [Instance(SearchSettings)],
    "norm_bound": [Real(0.0, low_open=True)],
    "validation_fraction": [Real(0.0, 0.9, low_open=True)],
    "allow_non_boolean": [Boolean()],
    "random_state": [Seed()],
}


class SpanSearchLearner(AttentionLearner):
    """A span, then Chen & Li's phases 5–6: what the sculpting and moment learners share."""

    requires_boolean = True
    _layers = ("model", "least_squares_model")
    _report_class = SpanSearchReport

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        super()._check_shape(samples, length, dim)
        if dim * dim < self.heads:
            raise ValueError(f"X: expected token dimension d with d² >= heads = {self.heads} (the span of "
                             f"{self.heads} distinct heads lives in R^(d²)), received d = {dim}")
        # Phases 5–6 run on at most SAMPLE_TRAINING training sequences when the examples are streamed; their
        # sizes follow from the shape and the settings, so a net or a selection that cannot be built is
        # refused here, not after the span has been read (phases 1–4 run for hours at n = 10⁸).
        training = samples - self._validation_size(samples)
        if self.streams_dask:
            training = min(training, SAMPLE_TRAINING)
        search = self._search_settings()
        check_net(self.heads, dim, min(search.score_samples, training) * length, search)
        check_memory(projections_memory(training, length, self.heads, dim), "X",
                     f"phase 6's least squares for W on {training:,} training sequences of {length} × {dim} "
                     f"entries and {self.heads} heads", lower="the number of sequences")

    def _check_params(self) -> None:
        super()._check_params()
        check_norm_bound(self, "search")
        net_radius = self.search.net_radius
        if net_radius is not None and net_radius > self.norm_bound:
            raise ValueError(f"search.net_radius: expected at most norm_bound = {self.norm_bound:g} (every head "
                             f"has ‖Θ_i‖_F ≤ norm_bound, so the net need not reach further), received "
                             f"{net_radius:g}")

    def _search_settings(self) -> SearchSettings:
        """The ``search`` settings with the learner's ``norm_bound``."""
        return self.search.replace(norm_bound=self.norm_bound)

    def _fit(self, data: FitData, rng: np.random.Generator, notify: Notifier) -> FitResult:
        start = time.perf_counter()
        bounds = certificate_assumptions(data.examples)
        step = FitStep(seconds=time.perf_counter() - start, name="bounds",
                       read_as="the certificate's largest label and token norms")
        fit = self._span_and_select(data, rng, notify, **bounds)
        return FitResult({"model": fit.selection.model, "least_squares_model": fit.selection.least_squares_model},
                         {**fit.report_fields(), "steps": (step,)})

    def _span_and_select(self, data: FitData, rng: np.random.Generator, notify: Notifier, *, label_bound: float,
                         token_norm: float) -> SpanSearchFit:
        """A span, then phases 5–6 with the certificate's assumptions ``label_bound`` and
        ``token_norm``, as a :class:`~mhalearn.learners.chen_li.fit.SpanSearchFit`; every subclass
        implements it."""
        raise NotImplementedError


def check_norm_bound(learner, name: str) -> None:
    """Refuse settings ``name`` of ``learner`` whose ``norm_bound`` is neither the default nor the learner's:
    the learner's ``norm_bound`` sets every settings' bound, so another value there would be ignored."""
    bound = getattr(learner, name).norm_bound
    if bound not in (NORM_BOUND, learner.norm_bound):
        raise ValueError(f"{name}.norm_bound: expected the learner's norm_bound = {learner.norm_bound:g}, which "
                         f"sets it, received {bound:g}; set norm_bound on the learner instead")


def certificate_assumptions(examples: Examples) -> dict:
    """Phase 6's certificate's assumptions over every example, training and held-out, in the fit's units.

    ``label_bound``, the largest label norm ‖Y‖_F of a sequence, and
    ``token_norm``, the largest token norm ‖x_j‖
    (:func:`~mhalearn.learners.chen_li.phase6_select.certificate_bounds`: one
    read of Y, and of X unless it is Boolean); on Dask arrays the pass that
    measured the units found them.
    """
    units, statistics = examples.units, examples.statistics
    if statistics is not None:
        return {"label_bound": statistics.label_norm / units.y_scale,
                "token_norm": statistics.token_norm / units.x_scale}
    return certificate_bounds(examples.X, examples.Y, units.x_scale, units.y_scale, boolean=examples.boolean)


__all__ = ["SEARCH", "SEARCH_CONSTRAINTS", "VALIDATION_FRACTION", "SpanSearchLearner", "certificate_assumptions",
           "check_norm_bound"]
