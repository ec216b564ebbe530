"""SculptLearner: the convex-body sculpting learner of Chen & Li (DESIGN.md §4.1).

Chen & Li, *Provably learning a multi-head attention layer*, learn
F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i from random Boolean examples in time
(dk)^{O(m³)}: sculpt a convex body that contains the unknown Θ_i, read
their span off it, search a net inside the span, solve W by least squares.
This module runs those steps as six observable phases whose diagnostics
land in ``report_``.
"""

from __future__ import annotations

import math
import time

import numpy as np

from .._validation import check_choice, check_positive_int, check_real
from . import register_learner
from ..model import MultiHeadAttention, parameter_error
from ._common import AttentionLearner, solve_projections, span_distance
from .phases import (
    ConvexBody,
    body_span,
    certification_precision,
    certified_fit_residual,
    certify_rows,
    crude_projection_sum,
    margin_constraints,
    moment_span,
    net_search,
    refine_candidates,
    refit_projection_sum,
    trimmed_projection_sum,
    teacher_phase_errors,
)

PHASES = ("crude_sum", "sculpt", "min_norm", "span", "net", "refine")


class _PhaseTimer:
    """Context manager writing a phase's wall time into its report entry."""

    def __init__(self, entry: dict):
        self.entry = entry

    def __enter__(self):
        self.start = time.perf_counter()
        return self.entry

    def __exit__(self, *exc):
        self.entry["seconds"] = time.perf_counter() - self.start
        return False


class _SpanSearchLearner(AttentionLearner):
    """Phases 4 (moment route), 5 and 6, shared by the sculpting and moment learners."""

    requires_boolean = True

    def _moment_route(self, X, Y, rng, report, teacher):
        basis, estimates, info = moment_span(X, Y, self.heads, rng=rng)
        report["span"]["moment"] = info
        if teacher is not None:
            info["distance"] = span_distance(basis, teacher)
        scale = float(np.max(np.linalg.norm(estimates.reshape(self.heads, -1), axis=1)))
        return basis, scale

    def _search_and_refine(self, X, Y, X_val, Y_val, bases, rng, report, teacher):
        """Run the net on every candidate basis, keep the best, refine."""
        net = report["net"]
        with _PhaseTimer(net):
            search = check_choice(self.search, "search", ("net", "multistart"))
            kept, routes = [], {}
            for route, (basis, scale) in bases.items():
                radius = self.net_radius or float(np.clip(1.5 * scale, 1.0, self.norm_bound))
                candidates, info = net_search(
                    X, Y, basis, self.heads, radius=radius, resolution=self.net_resolution,
                    max_candidates=check_positive_int(self.max_candidates, "max_candidates"),
                    score_samples=check_positive_int(self.score_samples, "score_samples"),
                    keep=check_positive_int(self.keep, "keep"), search=search, rng=rng)
                routes[route] = info
                kept.extend((thetas, score, route) for thetas, score in candidates)
            kept.sort(key=lambda item: item[1])
            kept = kept[: self.keep]
            chosen_route = kept[0][2]
            net.update(routes=routes, candidates=sum(info["candidates"] for info in routes.values()),
                       chosen_route=chosen_route, best_score=kept[0][1])
            report["span"]["chosen"] = chosen_route
            if teacher is not None:
                thetas = kept[0][0]
                ws, _ = solve_projections(X, Y, thetas)
                net["parameter_error"] = parameter_error(MultiHeadAttention(thetas, ws), teacher)["total"]
                report["span"]["chosen_distance"] = report["span"][chosen_route].get("distance")
        refine = report["refine"]
        with _PhaseTimer(refine):
            model, info = refine_candidates(X, Y, X_val, Y_val, [(t, s) for t, s, _ in kept],
                                            max_iter=check_positive_int(self.refine_iter, "refine_iter"))
            refine.update(info)
            teacher_phase_errors(refine, teacher, model=model)
        return model


@register_learner("sculpt")
class SculptLearner(_SpanSearchLearner):
    """Learn a multi-head attention layer by sculpting a convex body (Chen & Li).

    Phases (each reports its wall time and figures in ``report_[phase]``):

    1. ``crude_sum`` — Ŵ_Σ by least squares of output rows on the mean token.
    2. ``sculpt`` — decode the proxy attention of every row with Ŵ_Σ (batched
       simplex least squares) after sharpening Ŵ_Σ by trimmed least squares,
       certify rows peaked on one token j*, refit Ŵ_Σ
       on them and repeat; the certified rows give the linear constraints
       x_ℓᵀ Θ (x_{j*} − x_j) ≥ γ that every Θ_i satisfies.
    3. ``min_norm`` — Θ̄ = argmin ‖Θ‖_F over the body K (cvxpy QP).
    4. ``span`` — maximise random functionals over K ∩ {‖Θ‖ ≤ ρ} and take
       the top singular directions (body route), and the moment route.
    5. ``net`` — search a net of coefficient rows in each span (unordered
       m-tuples), W by least squares for each, scored on a subsample; the
       route whose best candidate fits held-out data best wins.
    6. ``refine`` — L-BFGS on all parameters from the best candidates.

    Parameters
    ----------
    heads : int
        Number of heads m.
    eta : float
        Certification threshold η: a row is certified when ≥ 1 − η of its
        proxy attention sits on one token.  Smaller η: fewer but cleaner rows.
    margin : float or None
        γ in the constraints; default ½·log((1 − η)/η), half the logit gap
        that a head with ≥ 1 − η on j* must have (slack for imperfect
        certification).
    residual_tol : float
        Certified rows must be fitted by x_{j*}Ŵ_Σ to this relative residual
        (in the last sculpting round; earlier rounds are 2× looser each).
    sculpt_rounds : int
        Decode–certify–refit rounds (stops early when the fit stops improving).
    max_constraints : int
        Random subsample of constraints passed to the solver (cost vs. sharpness of K).
    norm_bound : float
        Absolute cap on the radius ρ of the norm ball intersected with K and
        on the net radius.
    body_radius : float
        ρ = ``body_radius``·‖Θ̄‖ (capped by ``norm_bound``): far beyond the
        minimum norm the margin stops binding and K widens into a cone, so a
        tighter ball makes the span sharper, while a ball smaller than the
        heads' norms would cut them out of K.
    ball : {"fro", "inf"}
        Norm of that ball: Frobenius (SOCP, Clarabel) or max-entry (LP, HiGHS, faster).
    directions : int or None
        Random functionals maximised over K (default 3m + 3).
    span_route : {"auto", "body", "moment"}
        Which span estimates the net searches; ``auto`` tries both and keeps
        the one whose best candidate has the lower held-out residual.
    search : {"net", "multistart"}
        Full net of m-tuples, or random tuples plus local descent in the span.
    net_radius, net_resolution : float or None
        Net over coefficient vectors in the ball of this radius (default:
        1.5× the route's estimated head norm) at this spacing (default: the
        finest that keeps the tuple count within ``max_candidates``).
    max_candidates : int
        Budget of candidate tuples scored per route.
    score_samples : int
        Sequences used to score candidates (the rest certify the best few).
    keep : int
        Candidates passed on to refinement.
    refine_iter : int
        L-BFGS iterations per refined candidate.
    validation_fraction : float
        Share of examples held out to choose routes and candidates.
    allow_non_boolean : bool
        The phases assume Boolean tokens; set True to run on other inputs anyway.
    random_state : None, int or Generator

    References
    ----------
    Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
    """

    def __init__(self, heads: int, *, eta: float = 0.05, margin: float | None = None,
                 residual_tol: float = 0.1, sculpt_rounds: int = 3, max_constraints: int = 4000,
                 norm_bound: float = 12.0, body_radius: float = 2.0, ball: str = "fro",
                 directions: int | None = None,
                 span_route: str = "auto", search: str = "net", net_radius: float | None = None,
                 net_resolution: float | None = None, max_candidates: int = 200_000,
                 score_samples: int = 256, keep: int = 4, refine_iter: int = 2000,
                 validation_fraction: float = 0.2, allow_non_boolean: bool = False,
                 random_state=None):
        self.heads = heads
        self.eta = eta
        self.margin = margin
        self.residual_tol = residual_tol
        self.sculpt_rounds = sculpt_rounds
        self.max_constraints = max_constraints
        self.norm_bound = norm_bound
        self.body_radius = body_radius
        self.ball = ball
        self.directions = directions
        self.span_route = span_route
        self.search = search
        self.net_radius = net_radius
        self.net_resolution = net_resolution
        self.max_candidates = max_candidates
        self.score_samples = score_samples
        self.keep = keep
        self.refine_iter = refine_iter
        self.validation_fraction = validation_fraction
        self.allow_non_boolean = allow_non_boolean
        self.random_state = random_state

    def _fit(self, X, Y, X_val, Y_val, rng, teacher):
        eta = check_real(self.eta, "eta", 0.0, 0.5, low_open=True, high_open=True)
        margin = 0.5 * math.log((1 - eta) / eta) if self.margin is None else check_real(self.margin, "margin", 0.0, low_open=True)
        route = check_choice(self.span_route, "span_route", ("auto", "body", "moment"))
        check_choice(self.ball, "ball", ("fro", "inf"))
        report = {phase: {} for phase in PHASES}

        with _PhaseTimer(report["crude_sum"]) as entry:
            w_sum = crude_projection_sum(X, Y)
            teacher_phase_errors(entry, teacher, w_sum=w_sum)

        body_basis = None
        if route in ("auto", "body"):
            body_basis, body_scale = self._sculpt_body(X, Y, w_sum, eta, margin, rng, report, teacher)
        bases = {}
        if body_basis is not None:
            bases["body"] = (body_basis, body_scale)
        elif route == "body":
            report["span"]["fallback"] = "body route failed; using the moment route"
        with _PhaseTimer(report["span"]):
            if route in ("auto", "moment") or body_basis is None:
                bases["moment"] = self._moment_route(X, Y, rng, report, teacher)
        model = self._search_and_refine(X, Y, X_val, Y_val, bases, rng, report, teacher)
        return model, report

    def _sculpt_body(self, X, Y, w_sum, eta, margin, rng, report, teacher):
        """Phases 2–3 and the body route of phase 4; returns (basis, scale) or (None, None)."""
        sculpt = report["sculpt"]
        with _PhaseTimer(sculpt):
            rounds = check_positive_int(self.sculpt_rounds, "sculpt_rounds")
            tol = check_real(self.residual_tol, "residual_tol", 0.0, low_open=True)
            history, certified = [], None
            previous_fit = np.inf
            w_sum = trimmed_projection_sum(X, Y, w_sum)
            teacher_phase_errors(sculpt, teacher, trimmed_w_sum=w_sum)
            for r in range(rounds):
                samples, rows, tops = certify_rows(X, Y, w_sum, eta=eta,
                                                   residual_tol=tol * 2.0 ** (rounds - 1 - r))
                entry = {"certified_rows": int(len(samples))}
                refit = refit_projection_sum(X, Y, samples, rows, tops)
                if refit is not None:
                    fit = certified_fit_residual(X, Y, refit, samples, rows, tops)
                    entry["certified_fit"] = fit
                    teacher_phase_errors(entry, teacher, w_sum=refit)
                    if fit < previous_fit or r < rounds - 1:
                        w_sum, certified, previous_fit = refit, (samples, rows, tops), fit
                history.append(entry)
                if refit is None:
                    break
            sculpt.update(rounds=history, rows_total=int(X.shape[0] * X.shape[1]))
            if certified is None:
                sculpt["failure"] = "too few certified rows to refit W_Σ"
                return None, None
            samples, rows, tops = certified
            sculpt["certified_rows"] = int(len(samples))
            sculpt["certified_fraction"] = len(samples) / (X.shape[0] * X.shape[1])
            if teacher is not None:
                sculpt["certification_precision"] = certification_precision(teacher, X, samples, rows, tops, eta)
            constraints = margin_constraints(X, samples, rows, tops)
            limit = check_positive_int(self.max_constraints, "max_constraints")
            if len(constraints) > limit:
                constraints = constraints[rng.choice(len(constraints), limit, replace=False)]
            sculpt.update(constraints=int(len(constraints)), margin=margin)
            if teacher is not None:
                # Share of constraints every true Θ_i satisfies: K contains the heads iff 1.
                values = constraints @ teacher.thetas.reshape(teacher.heads, -1).T
                sculpt["teacher_feasible_fraction"] = float(np.mean(np.all(values >= margin, axis=1)))
            if len(constraints) < X.shape[2]:
                sculpt["failure"] = "too few constraints to shape a body"
                return None, None

        min_norm = report["min_norm"]
        with _PhaseTimer(min_norm):
            teacher_phase_errors(min_norm, teacher, refined_w_sum=w_sum)
            norm_bound = check_real(self.norm_bound, "norm_bound", 0.0, low_open=True)
            theta_bar, status = ConvexBody(constraints, margin, norm_bound, ball=self.ball).min_norm_point()
            min_norm["solver_status"] = status
            if theta_bar is None:
                min_norm["failure"] = f"minimum-norm problem {status}; falling back to the moment route"
                return None, None
            min_norm["theta_bar_norm"] = float(np.linalg.norm(theta_bar))
            teacher_phase_errors(min_norm, teacher, theta_bar=theta_bar)
            # Far from the origin the constraints' margin γ no longer binds and K
            # widens to a cone; cut it at a few times the minimum norm.
            radius = min(norm_bound, check_real(self.body_radius, "body_radius", 1.0, low_open=True)
                         * float(np.linalg.norm(theta_bar)))
            body = ConvexBody(constraints, margin, radius, ball=self.ball)
            min_norm["body_radius"] = radius

        span = report["span"]
        with _PhaseTimer(span):
            directions = self.directions or 3 * self.heads + 3
            basis, info = body_span(body, theta_bar, self.heads, check_positive_int(directions, "directions"), rng)
            span["body"] = info
            if basis is None:
                span["body"]["fallback"] = "falling back to the moment route"
                return None, None
            if teacher is not None:
                info["distance"] = span_distance(basis, teacher)
        body_seconds = span.pop("seconds")
        span["body_seconds"] = body_seconds
        scale = max(float(np.linalg.norm(theta_bar)), 1.0)
        return basis, scale


def format_phase_table(report: dict) -> str:
    """A plain-text table of the phases in a ``report_``: seconds and key figures."""
    def fmt(value):
        if isinstance(value, float):
            return f"{value:.3g}"
        return str(value)

    lines = [f"{'phase':<10} {'seconds':>8}  figures"]
    figure_keys = {
        "crude_sum": ["w_sum_error"],
        "sculpt": ["trimmed_w_sum_error", "certified_rows", "certified_fraction", "certification_precision", "constraints",
                   "teacher_feasible_fraction", "failure"],
        "min_norm": ["solver_status", "refined_w_sum_error", "theta_bar_distance", "failure"],
        "span": ["chosen", "chosen_distance", "fallback"],
        "net": ["candidates", "chosen_route", "best_score", "parameter_error"],
        "refine": ["val_entering", "val_leaving", "parameter_error"],
    }
    for phase in PHASES:
        entry = report.get(phase, {})
        if not entry:
            lines.append(f"{phase:<10} {'-':>8}  (skipped)")
            continue
        figures = [f"{key}={fmt(entry[key])}" for key in figure_keys[phase] if key in entry]
        if phase == "span":
            for route in ("body", "moment"):
                if route in entry and "distance" in entry[route]:
                    figures.append(f"{route}_distance={fmt(entry[route]['distance'])}")
        seconds = entry.get("seconds", 0.0) + entry.get("body_seconds", 0.0)
        lines.append(f"{phase:<10} {seconds:8.2f}  " + " ".join(figures))
    return "\n".join(lines)
