"""Phases 5 and 6 of Chen & Li's learner on a given span, shared by the sculpting and moment learners
(docs/design.md §4.1).

:class:`SpanSearchLearner` is the base of :class:`~mhalearn.SculptLearner` and
:class:`~mhalearn.MomentLearner`: our moment route to span{Θ_i}
(:mod:`~mhalearn.learners.moment_route`), then phase 5, a net of m-tuples of
heads in the span (:mod:`~mhalearn.learners.net`), and phase 6, W by least
squares, the held-out choice, its certificate and our L-BFGS polish
(:mod:`~mhalearn.learners.selection`).  :data:`SEARCH_CONSTRAINTS` are the
hyper-parameters of phases 5 and 6.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import numpy as np

from .._validation import Boolean, Integer, Options, Real, Seed
from ._common import AttentionLearner, PhaseTimer
from .moment_route import moment_span
from .net import net_search
from .selection import CHECK_EVERY, least_squares_candidates, polish, selection_certificate


# The hyper-parameters of phases 5 and 6, shared by the sculpting and moment learners.
SEARCH_CONSTRAINTS = {
    "heads": [Integer(1)],
    "search": [Options("net", "multistart")],
    "net_radius": [None, Real(0.0, low_open=True)],
    "net_resolution": [None, Real(0.0, low_open=True)],
    "max_candidates": [Integer(1)],
    "score_samples": [Integer(1)],
    "keep": [Integer(1)],
    "refine": [Options("lbfgs", "none")],
    "refine_iter": [Integer(1)],
    "delta": [Real(0.0, 1.0, low_open=True, high_open=True)],
    "norm_bound": [Real(0.0, low_open=True)],
    "validation_fraction": [Real(0.0, 0.9, low_open=True)],
    "allow_non_boolean": [Boolean()],
    "random_state": [Seed()],
}


class SpanSearchLearner(AttentionLearner):
    """Phases 5 and 6 and the moment route, shared by the sculpting and moment learners."""

    requires_boolean = True
    _layers = ("model", "least_squares_model")

    def _check_shape(self, samples: int, length: int, dim: int) -> None:
        if length < 2:
            raise ValueError(f"X: expected sequences of length k >= 2 (with one token every attention "
                             f"pattern is 1 and Θ is not identifiable), received k = {length}")
        if dim * dim < self.heads:
            raise ValueError(f"X: expected token dimension d with d² >= heads = {self.heads} (the span of "
                             f"{self.heads} distinct heads lives in R^(d²)), received d = {dim}")

    def _moment_route(self, X, Y, rng, entry: dict, diagnostics):
        """Our moment route to the span: (basis, head-norm scale), figures in ``entry``."""
        with PhaseTimer(entry):
            basis, estimates, info = moment_span(X, Y, self.heads, rng=rng)
        entry.update(info)
        diagnostics.put(entry, distance=diagnostics.span_distance(basis))
        scale = float(np.max(np.linalg.norm(estimates.reshape(self.heads, -1), axis=1)))
        return basis, scale

    def _search_and_select(self, X, Y, X_val, Y_val, basis, radius, rng, report, diagnostics):
        """Phases 5 and 6 on one span: the net, W by least squares, the certified choice, the polish.

        Returns the fitted layers: ``model`` (polished with ``refine="lbfgs"``)
        and ``least_squares_model``, the paper's own output.
        """
        net = report.net
        with PhaseTimer(net):
            candidates, info = net_search(
                X, Y, basis, self.heads, radius=radius, resolution=self.net_resolution,
                max_candidates=self.max_candidates, score_samples=self.score_samples, keep=self.keep,
                search=self.search, rng=rng)
            # The timer measures the phase; the search's own clock would count it twice.
            net.update({key: value for key, value in info.items() if key != "seconds"})
        refine = report.refine
        with PhaseTimer(refine):
            scored = least_squares_candidates(X, Y, X_val, Y_val, [thetas for thetas, _ in candidates])
            paper_val, paper_model = scored[0]
            refine.update(mode=self.refine, val_least_squares=paper_val)
            diagnostics.put(refine, parameter_error_least_squares=diagnostics.parameter_error(paper_model))
            certify = {"delta": self.delta, "label_bound": self.label_bound_, "token_norm": self.token_norm_}
            refine["certificate_least_squares"] = selection_certificate(
                paper_model, X_val, Y_val, hypotheses=len(scored), **certify)
            model, hypotheses = paper_model, len(scored)
            if self.refine == "lbfgs":
                model, val_after, runs = polish(X, Y, X_val, Y_val, scored, max_iter=self.refine_iter)
                # Every validation check of every polish run is a model compared on the held-out set.
                hypotheses = len(scored) * (self.refine_iter // CHECK_EVERY + 2)
                refine.update(val_polished=val_after, runs=runs)
                diagnostics.put(refine, parameter_error=diagnostics.parameter_error(model))
        report.certificate = selection_certificate(model, X_val, Y_val, hypotheses=hypotheses, **certify)
        return {"model": model, "least_squares_model": paper_model}


__all__ = ["SEARCH_CONSTRAINTS", "SpanSearchLearner"]
