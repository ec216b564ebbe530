"""MomentLearner: our moment route to the span, then Chen & Li's net and selection ([design: baselines]).

Not Chen & Li: the span comes from the first-order expansion of softmax
(:mod:`~mhalearn.learners.moment_route`); phases 5 and 6 — the net of
m-tuples in the span, W by least squares, the certified held-out choice and
our L-BFGS polish — are the sculpting learner's.  Exposed on its own so that
the sculpting phases can be ablated.
"""

from __future__ import annotations

import numpy as np

from .._estimator import store_parameters
from ..data.fit_data import FitData
from .chen_li.fit import SpanSearchFit, search_and_select
from .chen_li.settings import NORM_BOUND, SearchSettings
from .moment_route import check_moment_memory, moment_span
from .registry import register_learner
from .report import Notifier, Phase, Route
from .span_search import SEARCH, SEARCH_CONSTRAINTS, VALIDATION_FRACTION, SpanSearchLearner


@register_learner("moment")
class MomentLearner(SpanSearchLearner):
    """The moment route to span{Θ_i}, then the net, the selection and the polish.

    To first order in the logits, y_ℓ − x̄W_Σ is linear in the cubic features
    x_ℓ ⊗ (Σ_j x_j x_jᵀ/k − x̄x̄ᵀ) with a coefficient tensor of rank m whose
    left factor spans {Θ_i}; the span is read off it, a net of m-tuples in
    the span is searched with W by least squares, the held-out best is
    certified and, with ``refine="lbfgs"``, polished.

    Parameters
    ----------
    heads : int
        Number of heads m.
    search : SearchSettings
        The settings of phases 5–6, as :class:`~mhalearn.SculptLearner`'s
        (:class:`~mhalearn.learners.chen_li.SearchSettings`); ``net_slab``
        is not read, since the moment route reads no hull.
    norm_bound : float
        An upper bound on every ‖Θ_i‖_F: the radius of the net.
    validation_fraction : float
        Share of examples held out for the selection and its certificate.
    allow_non_boolean : bool
        The phases assume Boolean tokens; set True to run on other inputs anyway.
    random_state : None, int or Generator

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer* (phases 5–6).
    """

    _parameter_constraints = dict(SEARCH_CONSTRAINTS)

    def __init__(self, heads: int, *, search: SearchSettings = SEARCH, norm_bound: float = NORM_BOUND,
                 validation_fraction: float = VALIDATION_FRACTION, allow_non_boolean: bool = False,
                 random_state=None):
        store_parameters(self, locals())

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        super()._check_shape(samples, length, dim)
        check_moment_memory(length, dim)

    def _span_and_select(self, data: FitData, rng: np.random.Generator, notify: Notifier, *, label_bound: float,
                         token_norm: float) -> SpanSearchFit:
        moment = moment_span(data.X_train, data.Y_train, self.heads, rng=rng)
        notify(Phase.MOMENT, moment)
        search = self._search_settings()
        # The moment route estimates each head, so one head's norm sets the net's radius.
        net, selection = search_and_select(data.X_train, data.Y_train, data.X_val, data.Y_val, moment.basis,
                                           search.radius(moment.head_norm, 1), self.heads, search, rng,
                                           label_bound=label_bound, token_norm=token_norm, notify=notify)
        return SpanSearchFit(route=Route.MOMENT, moment=moment, net=net, selection=selection)
