"""SculptLearner: Chen & Li's learner of a multi-head attention layer (DESIGN.md §4.1).

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

``report_`` holds each phase's time and figures, says which route produced
the span (``report_["span"]["chosen"]``: ``"body"`` is the paper's,
``"moment"`` ours) and which refit moved Ŵ_Σ; with ``fit(X, Y, teacher=...)``
it also holds each phase's error against the truth.
"""

from __future__ import annotations

import math
import time
import warnings

import numpy as np

from .._validation import Integer, Options, Real, Seed
from . import register_learner
from ._common import AttentionLearner
from .agreement import find_agreement_rows, slab_constraints
from .body import ConvexBody, read_affine_hull, span_basis
from .moment_route import moment_span
from .net import net_search
from .projection_sum import (
    alternating_projection_sum,
    draw_pool,
    certification_margin,
    certified_projection_sum,
    certify_rows,
    crude_projection_sum,
    margin_rows,
)
from .selection import CHECK_EVERY, least_squares_candidates, polish, selection_certificate
from .streams import ArraySource

PHASES = ("crude_sum", "sculpt", "min_norm", "span", "net", "refine")


class _PhaseTimer:
    """Context manager adding a phase's wall time to its report entry."""

    def __init__(self, entry: dict, key: str = "seconds"):
        self.entry, self.key = entry, key

    def __enter__(self):
        self.start = time.perf_counter()
        return self.entry

    def __exit__(self, *exc):
        self.entry[self.key] = self.entry.get(self.key, 0.0) + time.perf_counter() - self.start
        return False


# The hyper-parameters of phases 5 and 6, shared by the sculpting and moment learners.
_SEARCH_CONSTRAINTS = {
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
    "allow_non_boolean": [Options(True, False)],
    "random_state": [Seed()],
}


class _SpanSearchLearner(AttentionLearner):
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
        with _PhaseTimer(entry):
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
        net = report["net"]
        with _PhaseTimer(net):
            candidates, info = net_search(
                X, Y, basis, self.heads, radius=radius, resolution=self.net_resolution,
                max_candidates=self.max_candidates, score_samples=self.score_samples, keep=self.keep,
                search=self.search, rng=rng)
            net.update(info)
        refine = report["refine"]
        with _PhaseTimer(refine):
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
        report["certificate"] = selection_certificate(model, X_val, Y_val, hypotheses=hypotheses, **certify)
        return {"model": model, "least_squares_model": paper_model}


@register_learner("sculpt")
class SculptLearner(_SpanSearchLearner):
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
        K* must hold at least this many slabs to be read (default 2d²);
        with fewer the body refuses and the moment route is used.
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
    report_ : dict
        One entry per phase (see :func:`format_phase_table`), ``certificate``
        and ``total_seconds``.

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
    """

    _parameter_constraints = {
        **_SEARCH_CONSTRAINTS,
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

    def _fit(self, X, Y, X_val, Y_val, rng, diagnostics):
        report = {phase: {} for phase in PHASES}
        span = report["span"]
        body = None
        if self.span_route != "moment":
            body = self._sculpt(ArraySource(X, Y), rng, report, diagnostics)
        if body is None or diagnostics:
            # The moment route is the fallback; with a teacher it also runs for
            # comparison, and its time is then diagnostic, not the learner's.
            span["moment"] = {}
            moment_basis, moment_scale = self._moment_route(X, Y, rng, span["moment"], diagnostics)
        if body is not None:
            span["chosen"] = "body"
            basis, scale = body
        else:
            span["chosen"] = "moment"
            basis, scale = moment_basis, moment_scale
            if self.span_route != "moment":
                span["fallback"] = f"the body refused ({span['body'].get('refused', 'no span')}); used the moment route"
                if self.span_route == "body":
                    warnings.warn(f"SculptLearner(span_route='body'): {span['fallback']}", RuntimeWarning,
                                  stacklevel=3)
        routes = [span[route] for route in ("body", "moment") if route in span]
        span["seconds"] = span[span["chosen"]]["seconds"]
        report["diagnostic_seconds"] = sum(entry.get("diagnostic_seconds", 0.0) for entry in routes) + (
            span["moment"]["seconds"] if "moment" in span and span["chosen"] == "body" else 0.0)
        diagnostics.put(span, chosen_distance=span[span["chosen"]].get("distance"))
        radius = self.net_radius or float(np.clip(1.5 * math.sqrt(self.heads) * scale, 1.0, self.norm_bound))
        return self._search_and_select(X, Y, X_val, Y_val, basis, radius, rng, report, diagnostics), report

    # ------------------------------------------------------------ phases 1–4

    def _sculpt(self, source, rng, report, diagnostics):
        """Phases 1–4 on the body route; (basis, scale) or None when the body refuses."""
        if source.dim <= source.length:
            # The k points x_j Ŵ_Σ span an affine set of dimension k − 1 ≥ d − 1, so
            # every row is fitted with (almost) zero residual: agreement rows
            # cannot be told apart (DESIGN.md §4.1, step 2).
            report["span"]["body"] = {"refused": f"d = {source.dim} <= k = {source.length}: the decoding "
                                                 f"residual cannot detect agreement rows (needs d > k)"}
            return None
        with _PhaseTimer(report["crude_sum"]) as entry:
            w_sum = crude_projection_sum(source)
            diagnostics.put(entry, w_sum_error=diagnostics.w_sum_error(w_sum))
        with _PhaseTimer(report["sculpt"]):
            # One pass gives the crude round's rows and the pool our alternating refit starts from.
            pool = draw_pool(source, w_sum, pool_fraction=self._pool_fraction, simplex_tol=self.simplex_tol,
                             max_pool=self._max_pool, rng=rng)
            rows = pool.accept(quantile=self._quantile / self._pool_fraction, simplex_tol=self.simplex_tol)
            report["sculpt"]["quantile"] = self._quantile
            slabs = self._slabs(rows)
            report["sculpt"]["rounds"] = [self._round_figures("crude Ŵ_Σ, quantile", rows, slabs, diagnostics)]
        with _PhaseTimer(report["min_norm"]):
            w_sum = self._refine_projection_sum(source, w_sum, pool, slabs, rng, report["min_norm"], diagnostics)
        with _PhaseTimer(report["sculpt"]):
            rows = find_agreement_rows(source, w_sum, residual_tol=self.residual_tol,
                                       simplex_tol=self.simplex_tol, max_rows=self.max_rows, rng=rng)
            slabs = self._slabs(rows)
            final = self._round_figures("refined Ŵ_Σ, absolute", rows, slabs, diagnostics)
            report["sculpt"]["rounds"].append(final)
            report["sculpt"].update({key: final[key] for key in final if key != "round"})
        span = report["span"]
        span["body"] = {}
        with _PhaseTimer(span["body"]):
            return self._read_span(source, slabs, rng, span["body"], diagnostics)

    def _slabs(self, rows):
        return slab_constraints(rows, w_min=self.w_min, kappa=self.slab_width, t_min=self.slab_floor)

    @staticmethod
    def _round_figures(name, rows, slabs, diagnostics) -> dict:
        entry = {"round": name, "accepted_rows": len(rows), "accepted_fraction": rows.fraction,
                 "equalities": slabs.equalities, "halfspaces": len(slabs.g)}
        diagnostics.put(entry, precision=diagnostics.agreement_precision(rows),
                        teacher_feasible_fraction=diagnostics.feasible_fraction(slabs))
        return entry

    @property
    def _quantile(self) -> float:
        if self.quantile is not None:
            return self.quantile
        return 1.0 if self.heads == 1 else 0.01

    @property
    def _pool_fraction(self) -> float:
        return max(self.pool_fraction, self._quantile)

    @property
    def _max_pool(self) -> int:
        """Pool rows such that each alternating iteration accepts about ``max_rows`` of them."""
        return int(self.max_rows * self._pool_fraction / self._quantile)

    def _refine_projection_sum(self, source, w_sum, pool, slabs, rng, entry, diagnostics):
        """Phase 3: Θ̄ of the crude body, the paper's certified refit, then our alternating refit."""
        steps = [{"step": "crude", "w_sum_error": diagnostics.w_sum_error(w_sum)}]
        certified_sum, theta_bar = None, None
        dim2 = source.dim ** 2
        if slabs.equalities < dim2:
            entry["failure"] = (f"too few equalities for a body ({slabs.equalities} < d² = {dim2}): "
                                f"no certified refit")
        else:
            body = ConvexBody(slabs, self.norm_bound, max_constraints=self.max_constraints, rng=rng)
            theta_bar, info = body.min_norm_point()
            entry.update(info)
            if theta_bar is None:
                entry["failure"] = f"minimum-norm problem {info['solver_status']}: no certified refit"
        if theta_bar is not None:
            entry["theta_bar_norm"] = float(np.linalg.norm(theta_bar))
            diagnostics.put(entry, theta_bar_distance=diagnostics.span_distance(theta_bar))
            candidates = margin_rows(source, theta_bar, self.eta, self.max_rows)
            certified = certify_rows(body, candidates, certification_margin(self.eta, source.length))
            certified_sum = certified_projection_sum(candidates, certified)
            step = {"step": "certified rows (Chen & Li)", "candidates": len(candidates),
                    "certified": int(certified.sum()), "refitted": certified_sum is not None}
            diagnostics.put(step, certification_precision=diagnostics.certification_precision(
                candidates, certified, self.eta), w_sum_error=diagnostics.w_sum_error(certified_sum))
            steps.append(step)
        crude = w_sum
        if certified_sum is not None:
            w_sum = certified_sum
        if self.refit_iterations > 0:
            start = "certified" if certified_sum is not None else "crude"
            w_sum, history = alternating_projection_sum(
                source, w_sum, quantile=self._quantile, iterations=self.refit_iterations,
                pool_fraction=self._pool_fraction, simplex_tol=self.simplex_tol, max_pool=self._max_pool,
                pool=None if certified_sum is not None else pool, rng=rng)
            step = {"step": "alternating refit (ours)", "start": start, "iterations": len(history),
                    "agreement_fit": history[-1]["agreement_fit"] if history else math.nan}
            diagnostics.put(step, w_sum_error=diagnostics.w_sum_error(w_sum))
            steps.append(step)
        entry["w_sum_steps"] = steps
        entry["moved_by"] = self._mover(steps, crude, w_sum)
        diagnostics.put(entry, refined_w_sum_error=diagnostics.w_sum_error(w_sum))
        return w_sum

    @staticmethod
    def _mover(steps, crude, refined) -> str:
        """Which refit the final Ŵ_Σ comes from: the paper's certified one, ours, both or neither."""
        if refined is crude:
            return "none"
        certified = any(step.get("refitted") for step in steps)
        alternating = any(step["step"].startswith("alternating") for step in steps)
        if certified and alternating:
            return "certified rows (Chen & Li), then alternating refit (ours)"
        return "certified rows (Chen & Li)" if certified else "alternating refit (ours)"

    def _read_span(self, source, slabs, rng, entry, diagnostics):
        """Phase 4: K*, its centre and minimum-norm point, the span — or a refusal."""
        heads, dim = self.heads, source.dim
        needed = self.min_equalities or 2 * dim * dim
        entry.update(equalities=slabs.equalities, needed=needed)
        if slabs.equalities < needed:
            entry["refused"] = f"too few equalities ({slabs.equalities} < {needed})"
            return None
        centre, long_directions, info = read_affine_hull(slabs, heads)
        entry.update(info)
        theta_bar = None
        if self.span_point == "min_norm" or diagnostics:
            # K*'s minimum-norm point (the paper's Θ̄*); with span_point="centre" it
            # is computed only to report how far its span is, as diagnostic time.
            started = time.perf_counter()
            body = ConvexBody(slabs, self.norm_bound, max_constraints=self.max_constraints, rng=rng)
            theta_bar, solve = body.min_norm_point()
            entry.update({f"min_norm_{key}": value for key, value in solve.items()})
            if self.span_point == "centre":
                entry["diagnostic_seconds"] = time.perf_counter() - started
        if heads > 1 and info["spectral_gap"] < self.min_gap:
            entry["refused"] = (f"no clear long directions (gap {info['spectral_gap']:.2f} < {self.min_gap})")
            return None
        if self.span_point == "min_norm" and theta_bar is None:
            entry["refused"] = f"minimum-norm problem of K* {entry['min_norm_solver_status']}"
            return None
        point = centre if self.span_point == "centre" else theta_bar
        basis = span_basis(point, long_directions, heads)
        diagnostics.put(entry, distance=diagnostics.span_distance(basis),
                        centre_distance=diagnostics.span_distance(span_basis(centre, long_directions, heads)),
                        min_norm_distance=None if theta_bar is None else diagnostics.span_distance(
                            span_basis(theta_bar, long_directions, heads)))
        entry["span_point"] = self.span_point
        return basis, max(float(np.linalg.norm(point)), 1e-3)


def format_phase_table(report: dict) -> str:
    """A plain-text table of a ``report_``: each phase's seconds and key figures,
    one line per round of Ŵ_Σ refinement, the route and the certificate."""
    def fmt(value):
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    def figures(entry, keys):
        return " ".join(f"{key}={fmt(entry[key])}" for key in keys if key in entry)

    lines = [f"{'phase':<10} {'seconds':>8}  figures"]
    columns = {
        "crude_sum": ["w_sum_error"],
        "sculpt": ["accepted_rows", "precision", "equalities", "teacher_feasible_fraction"],
        "min_norm": ["solver_status", "inconsistent", "theta_bar_distance", "moved_by", "refined_w_sum_error",
                     "failure"],
        "span": ["chosen", "chosen_distance", "fallback"],
        "net": ["candidates", "resolution", "best_scores"],
        "refine": ["mode", "val_least_squares", "parameter_error_least_squares", "val_polished",
                   "parameter_error"],
    }
    for phase in PHASES:
        entry = report.get(phase, {})
        if not entry:
            lines.append(f"{phase:<10} {'-':>8}  (skipped)")
            continue
        lines.append(f"{phase:<10} {entry.get('seconds', 0.0):8.2f}  {figures(entry, columns[phase])}")
        if phase == "sculpt":
            for round_entry in entry.get("rounds", []):
                lines.append(f"{'':<10} {'':>8}    {round_entry['round']}: "
                             + figures(round_entry, ["accepted_rows", "precision", "equalities",
                                                     "teacher_feasible_fraction"]))
        if phase == "min_norm":
            for step in entry.get("w_sum_steps", []):
                lines.append(f"{'':<10} {'':>8}    {step['step']}: "
                             + figures(step, ["candidates", "certified", "certification_precision", "start",
                                              "iterations", "agreement_fit", "w_sum_error"]))
        if phase == "span":
            for route in ("body", "moment"):
                if route in entry:
                    lines.append(f"{'':<10} {'':>8}    {route}: "
                                 + figures(entry[route], ["distance", "spectral_gap", "refused", "seconds"]))
    certificate = report.get("certificate")
    if certificate:
        lines.append(f"certificate: with probability ≥ {1 - certificate['delta']:.2f} the relative test error "
                     f"is ≤ {certificate['bound']:.3g} (held-out error {certificate['empirical_error']:.3g}, "
                     f"{certificate['hypotheses']} models compared)")
    return "\n".join(lines)
