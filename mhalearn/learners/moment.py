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

    Parameters are those of :class:`~mhalearn.SculptLearner` that concern phases 5–6:
    ``search``, ``net_radius``, ``net_resolution``, ``max_candidates``,
    ``score_samples``, ``keep``, ``refine``, ``refine_iter``, ``delta``,
    ``norm_bound``, ``validation_fraction``, ``allow_non_boolean``,
    ``random_state``.

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer* (phases 5–6).
    """

    _parameter_constraints = dict(SEARCH_CONSTRAINTS)
    # The moment route reads no hull, so the net has no slab around one.
    _unused_search_settings = ("net_slab",)

    # The defaults are the settings' (SEARCH): scikit-learn reads them off this signature.
    def __init__(self, heads: int, *, search: str = SEARCH.search, net_radius: float | None = SEARCH.net_radius,
                 net_resolution: float | None = SEARCH.net_resolution,
                 max_candidates: int = SEARCH.max_candidates, score_samples: int = SEARCH.score_samples,
                 keep: int = SEARCH.keep, refine: str = SEARCH.refine, refine_iter: int = SEARCH.refine_iter,
                 delta: float = SEARCH.delta, norm_bound: float = SEARCH.norm_bound,
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
