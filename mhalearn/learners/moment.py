"""MomentLearner: the moment route to the span, then net search and refinement (DESIGN.md §4.2)."""

from __future__ import annotations

from . import register_learner
from .sculpt import PHASES, _PhaseTimer, _SpanSearchLearner


@register_learner("moment")
class MomentLearner(_SpanSearchLearner):
    """Phases 4 (moment route only), 5 and 6 of :class:`SculptLearner`.

    To first order in the logits, y_ℓ − x̄W_Σ is linear in the cubic features
    x_ℓ ⊗ (Σ_j x_j x_jᵀ/k − x̄x̄ᵀ) with a coefficient tensor of rank m whose
    left factor spans {Θ_i}; the span is read off it, a net of m-tuples in
    the span is searched with W by least squares, and the best candidates are
    polished by L-BFGS.  Exposed on its own so that the sculpting phases
    (crude sum, certified rows, convex body) can be ablated.

    Parameters are those of :class:`SculptLearner` that concern phases 4–6:
    ``search``, ``net_radius``, ``net_resolution``, ``max_candidates``,
    ``score_samples``, ``keep``, ``refine_iter``, ``norm_bound``,
    ``validation_fraction``, ``allow_non_boolean``, ``random_state``.

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
    """

    def __init__(self, heads: int, *, search: str = "net", net_radius: float | None = None,
                 net_resolution: float | None = None, max_candidates: int = 200_000,
                 score_samples: int = 256, keep: int = 4, refine_iter: int = 2000,
                 norm_bound: float = 12.0, validation_fraction: float = 0.2,
                 allow_non_boolean: bool = False, random_state=None):
        self.heads = heads
        self.search = search
        self.net_radius = net_radius
        self.net_resolution = net_resolution
        self.max_candidates = max_candidates
        self.score_samples = score_samples
        self.keep = keep
        self.refine_iter = refine_iter
        self.norm_bound = norm_bound
        self.validation_fraction = validation_fraction
        self.allow_non_boolean = allow_non_boolean
        self.random_state = random_state

    def _fit(self, X, Y, X_val, Y_val, rng, teacher):
        report = {phase: {} for phase in PHASES if phase in ("span", "net", "refine")}
        with _PhaseTimer(report["span"]):
            bases = {"moment": self._moment_route(X, Y, rng, report, teacher)}
        model = self._search_and_refine(X, Y, X_val, Y_val, bases, rng, report, teacher)
        return model, report
