"""SculptLearner: Chen & Li's learner of a multi-head attention layer (docs/design.md §4.1).

Chen & Li, *Provably learning a multi-head attention layer*, learn
F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i from uniform Boolean examples: sculpt a convex
body that approximates the affine hull of the unknown Θ_i, read their span
off it, search a net inside the span, solve the projections by least squares
and certify the selection on held-out data.  The six phases, one module each:

1. ``crude_sum`` — Ŵ_Σ from the input–label correlation
   (:func:`~mhalearn.learners.projection_sum.crude_projection_sum`);
2. ``sculpt`` — decode every row's pattern with Ŵ_Σ, accept the agreement
   rows (every head has the same pattern) and turn each into slabs on the
   log-ratios (:mod:`~mhalearn.learners.agreement`);
3. ``min_norm`` — the body's minimum-norm point Θ̄, LP certification of the
   rows Θ̄ gives a clear margin, the refit of Ŵ_Σ on them (the paper's), then
   our alternating refit on the agreement rows
   (:mod:`~mhalearn.learners.body`, :mod:`~mhalearn.learners.projection_sum`);
4. ``span`` — re-sculpt with the refined Ŵ_Σ and an absolute tolerance to get
   K*, read span{Θ_i} = span{centre of K*} + its m − 1 long directions, or
   refuse and fall back to our moment route (:mod:`~mhalearn.learners.moment_route`);
5. ``net`` — a net over m-tuples of heads in the span, W by least squares
   (:mod:`~mhalearn.learners.net`);
6. ``refine`` — W of the best candidates by least squares, the held-out
   choice and its certificate (the paper's output), then our L-BFGS polish
   (:mod:`~mhalearn.learners.selection`).

``report_`` (:class:`~mhalearn.learners.report.SpanSearchReport`) holds each
phase's time and figures, says which route produced the span
(``report_["span"]["chosen"]``: ``"body"`` is the paper's, ``"moment"``
ours) and which refit moved Ŵ_Σ; with ``fit(X, Y, teacher=...)`` (a
:class:`~mhalearn.learners.diagnostics.TeacherDiagnostics` hook) it also
holds each phase's error against the truth.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from .._validation import Integer, Options, Real
from . import register_learner
from .body_route import BodySettings, sculpt_span
from .report import Route, SpanSearchReport
from .span_search import SEARCH_CONSTRAINTS, SpanSearchLearner
from .streams import ArraySource


@register_learner("sculpt")
class SculptLearner(SpanSearchLearner):
    """Learn a multi-head attention layer by sculpting a convex body (Chen & Li).

    See the module docstring for the six phases; each reports its wall time
    and figures in ``report_[phase]``, and ``report_["certificate"]`` holds
    the held-out bound of phase 6.

    Parameters
    ----------
    heads : int
        Number of heads m.
    quantile : float or None
        While Ŵ_Σ is crude, the share of rows (per block of sequences) with
        the smallest decoding residual accepted as agreement rows.  Default:
        1 at m = 1 (with one head every row is an agreement row), 0.01 at
        m ≥ 2 (agreement rows are 1–4 % of all rows at m = 2, d = 12,
        k = 4, ‖Θ_i‖_F = 2, on development teachers).
    residual_tol : float
        Absolute tolerance on the relative decoding residual ‖âᵀXŴ_Σ − y‖/‖y‖
        for the agreement rows of K* (phase 4), once Ŵ_Σ is refined.
    simplex_tol : float
        Accepted patterns are within this of the simplex.
    w_min : float
        Tokens with decoded weight ≥ w_min give slabs, the others half-spaces.
    slab_width : float
        κ: slab half-widths are κ(σ_j/â_j + σ_{j₀}/â_{j₀}) + ``slab_floor``,
        σ the decoding's standard deviations.  Chosen so that the true heads
        satisfy ≥ 99 % of the constraints on development teachers.
    slab_floor : float
        t_min, the smallest half-width.
    max_rows : int
        Agreement rows kept per sculpting round (a random share per block).
    max_constraints : int
        Constraints passed to the convex solver (a random subset: fewer
        constraints give a superset of K, so certificates stay valid).
    eta : float
        Certification: a certified row has ≥ 1 − η of every head's weight on
        one token; candidates are the rows to which Θ̄ gives that much.
    refit_iterations : int
        Iterations of our alternating refit of Ŵ_Σ (0: the paper's refit only).
    pool_fraction : float
        Share of rows (per block) kept as candidates during the alternating refit.
    min_equalities : int or None
        K* must hold at least this many slabs to be read (default 2d², never
        fewer than d²); with fewer the body refuses and the moment route is used.
    min_gap : float
        At m ≥ 2 the m − 1 long directions must be separated from the thin
        ones by this ratio of singular values, or the body refuses.
    span_point : {"centre", "min_norm"}
        The point of K* whose direction completes the span: the centre of
        the slab system (default), or K*'s minimum-norm point (the paper's
        Θ̄*, which the slabs' half-widths pull towards the origin).
    norm_bound : float
        An upper bound on every ‖Θ_i‖_F: the radius of the body's norm ball
        and of the net.
    span_route : {"auto", "body", "moment"}
        ``"auto"`` and ``"body"`` read the span from the body and fall back to
        our moment route only when the body refuses (``"body"`` warns when it
        does); ``"moment"`` skips the sculpting phases.
    search : {"net", "multistart"}
        Full net of m-tuples, or random tuples plus local descent in the span.
    net_radius, net_resolution : float or None
        Net over coefficient vectors in a ball of this radius (default:
        1.5·√m times the span point's norm, the norm of m orthogonal heads of
        equal norm whose centroid it is, capped by ``norm_bound``) at this
        spacing (default: the finest within ``max_candidates``).
    max_candidates : int
        Budget of candidate tuples scored.
    score_samples : int
        Sequences used to score candidates.
    keep : int
        Candidates passed on to phase 6.
    refine : {"lbfgs", "none"}
        ``"none"`` returns the paper's output (W by least squares of the
        held-out best candidate); ``"lbfgs"`` (ours) polishes all parameters.
    refine_iter : int
        L-BFGS iterations per polished candidate.
    delta : float
        Failure probability δ of the certificate.
    validation_fraction : float
        Share of examples held out for the selection and its certificate.
    allow_non_boolean : bool
        The phases assume Boolean tokens; set True to run on other inputs anyway.
    random_state : None, int or Generator

    Attributes
    ----------
    model_ : MultiHeadAttention
        The learned layer (polished when ``refine="lbfgs"``).
    least_squares_model_ : MultiHeadAttention
        The paper's own output: the held-out best net candidate with W by
        least squares, before any polish.
    n_features_in_ : int
        The token dimension d seen in ``fit``.
    report_ : SpanSearchReport
        One typed entry per phase with its ``seconds`` and figures, the
        ``certificate`` and ``total_seconds``; ``report_.table()`` prints it
        (:mod:`mhalearn.learners.report`), ``report_["span"]["chosen"]``
        reads it as a mapping.

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
    """

    _parameter_constraints = {
        **SEARCH_CONSTRAINTS,
        "quantile": [None, Real(0.0, 1.0, low_open=True)],
        "residual_tol": [Real(0.0, low_open=True)],
        "simplex_tol": [Real(0.0)],
        "w_min": [Real(0.0, 1.0, low_open=True, high_open=True)],
        "slab_width": [Real(0.0)],
        "slab_floor": [Real(0.0)],
        "max_rows": [Integer(1)],
        "max_constraints": [Integer(1)],
        "eta": [Real(0.0, 0.5, low_open=True, high_open=True)],
        "refit_iterations": [Integer(0)],
        "pool_fraction": [Real(0.0, 1.0, low_open=True)],
        "min_equalities": [None, Integer(1)],
        "min_gap": [Real(1.0)],
        "span_point": [Options("centre", "min_norm")],
        "span_route": [Options("auto", "body", "moment")],
    }

    def __init__(self, heads: int, *, quantile: float | None = None, residual_tol: float = 0.02,
                 simplex_tol: float = 0.02, w_min: float = 0.02, slab_width: float = 20.0,
                 slab_floor: float = 0.02, max_rows: int = 20_000, max_constraints: int = 1500,
                 eta: float = 0.05, refit_iterations: int = 40, pool_fraction: float = 0.1,
                 min_equalities: int | None = None, min_gap: float = 2.0, span_point: str = "centre",
                 norm_bound: float = 12.0, span_route: str = "auto", search: str = "net",
                 net_radius: float | None = None, net_resolution: float | None = None,
                 max_candidates: int = 200_000, score_samples: int = 256, keep: int = 4,
                 refine: str = "lbfgs", refine_iter: int = 2000, delta: float = 0.05,
                 validation_fraction: float = 0.2, allow_non_boolean: bool = False, random_state=None):
        self.heads = heads
        self.quantile = quantile
        self.residual_tol = residual_tol
        self.simplex_tol = simplex_tol
        self.w_min = w_min
        self.slab_width = slab_width
        self.slab_floor = slab_floor
        self.max_rows = max_rows
        self.max_constraints = max_constraints
        self.eta = eta
        self.refit_iterations = refit_iterations
        self.pool_fraction = pool_fraction
        self.min_equalities = min_equalities
        self.min_gap = min_gap
        self.span_point = span_point
        self.norm_bound = norm_bound
        self.span_route = span_route
        self.search = search
        self.net_radius = net_radius
        self.net_resolution = net_resolution
        self.max_candidates = max_candidates
        self.score_samples = score_samples
        self.keep = keep
        self.refine = refine
        self.refine_iter = refine_iter
        self.delta = delta
        self.validation_fraction = validation_fraction
        self.allow_non_boolean = allow_non_boolean
        self.random_state = random_state

    def _body_settings(self) -> BodySettings:
        return BodySettings(**{name: getattr(self, name) for name in BodySettings.__dataclass_fields__})

    def _fit(self, X, Y, X_val, Y_val, rng, diagnostics):
        report = SpanSearchReport.for_sculpting()
        span = report.span
        body = None
        if self.span_route != "moment":
            body = sculpt_span(ArraySource(X, Y), self.heads, self._body_settings(), rng, report, diagnostics)
        if body is None or diagnostics:
            # The moment route is the fallback; with diagnostics it also runs for
            # comparison, and its time is then diagnostic, not the learner's.
            span.moment = Route()
            moment_basis, moment_scale = self._moment_route(X, Y, rng, span.moment, diagnostics)
        if body is not None:
            span.chosen = "body"
            basis, scale = body
        else:
            span.chosen = "moment"
            basis, scale = moment_basis, moment_scale
            if self.span_route != "moment":
                span.fallback = f"the body refused ({span.body.get('refused', 'no span')}); used the moment route"
                if self.span_route == "body":
                    warnings.warn(f"SculptLearner(span_route='body'): {span.fallback}", RuntimeWarning,
                                  stacklevel=3)
        compared = span.moment.seconds if span.moment is not None and span.chosen == "body" else 0.0
        report.diagnostic_seconds = compared + sum(route.diagnostic_seconds or 0.0
                                                   for route in span.routes().values())
        diagnostics.put(span, chosen_distance=span.routes()[span.chosen].distance)
        radius = self.net_radius or float(np.clip(1.5 * math.sqrt(self.heads) * scale, 1.0, self.norm_bound))
        return self._search_and_select(X, Y, X_val, Y_val, basis, radius, rng, report, diagnostics), report

