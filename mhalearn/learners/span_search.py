"""The estimator base of the learners that search a span: Chen & Li's and the moment route's (docs/design.md §4.1).

:class:`SpanSearchLearner` is the base of :class:`~mhalearn.SculptLearner`
and :class:`~mhalearn.MomentLearner`: both end with Chen & Li's phases 5–6
(:func:`~mhalearn.learners.chen_li.search_and_select`).
:data:`SEARCH_CONSTRAINTS` are the hyper-parameters of those phases.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

from .._validation import Boolean, Integer, Options, Real, Seed
from .base import AttentionLearner
from .chen_li.fit import SpanSearchReport
from .chen_li.settings import SearchSettings, settings_from


#: Phases 5–6's default settings, whose values are the span-search learners' defaults.
SEARCH = SearchSettings()
#: The share of examples the span-search learners hold out for phase 6's selection and its certificate.
VALIDATION_FRACTION = 0.2

# The hyper-parameters of phases 5 and 6, shared by the sculpting and moment learners.
SEARCH_CONSTRAINTS = {
    "heads": [Integer(1)],
    "search": [Options("net", "multistart")],
    "net_radius": [None, Real(0.0, low_open=True)],
    "net_resolution": [None, Real(0.0, low_open=True)],
    "max_candidates": [Integer(1)],
    "score_samples": [Integer(1)],
    # Phase 6 solves least squares on every training sequence for each kept candidate, then polishes it.
    "keep": [Integer(1, 1000)],
    "refine": [Options("lbfgs", "none")],
    "refine_iter": [Integer(1)],
    "delta": [Real(0.0, 1.0, low_open=True, high_open=True)],
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
    #: Search settings the learner has no parameter for: they keep their defaults
    #: (:func:`~mhalearn.learners.chen_li.settings.settings_from`).
    _unused_search_settings = ()

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        super()._check_shape(samples, length, dim)
        if dim * dim < self.heads:
            raise ValueError(f"X: expected token dimension d with d² >= heads = {self.heads} (the span of "
                             f"{self.heads} distinct heads lives in R^(d²)), received d = {dim}")

    def _check_params(self) -> None:
        super()._check_params()
        if self.net_radius is not None and self.net_radius > self.norm_bound:
            raise ValueError(f"net_radius: expected at most norm_bound = {self.norm_bound:g} (every head has "
                             f"‖Θ_i‖_F ≤ norm_bound, so the net need not reach further), received "
                             f"{self.net_radius:g}")

    def _search_settings(self) -> SearchSettings:
        return settings_from(SearchSettings, self, unused=self._unused_search_settings)

    def _certificate_bounds(self) -> dict:
        """The certificate's assumptions: the largest label norm and token norm seen (standardised)."""
        return {"label_bound": self.label_bound_, "token_norm": self.token_norm_}

    @staticmethod
    def _layers_of(fields: dict) -> dict:
        selection = fields["selection"]
        return {"model": selection.model, "least_squares_model": selection.least_squares_model}


__all__ = ["SEARCH", "SEARCH_CONSTRAINTS", "VALIDATION_FRACTION", "SpanSearchLearner"]
