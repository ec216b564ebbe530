"""The teacher's view of a fit: an observer that measures each phase result against the planted layer.

A learner's ``fit(X, Y, callback=observer)`` hands every phase result to
``observer(phase, result)`` (:mod:`mhalearn.learners.report`);
:class:`TeacherObserver` computes what only a teacher can tell — the error
of Ŵ_Σ, the precision of the agreement rows, the share of the body's
constraints the true heads satisfy, the precision of the paper's LP
certificates, the span distance and where the heads' hull falls in K*'s
spectrum, the parameter error — and keeps them with
its own time.  It never hands anything back to the learner: the fit is
bitwise the same with or without it (tests/test_observers.py), and its time
is not the learner's.

The learner works in standardised units and tells them first, with its
``"start"`` result; the observer expresses the teacher in them.  Span
distances and relative errors of Ŵ_Σ do not depend on the units; parameter
errors (which mix Θ and W) are measured in the data's units, as for the
returned layer.
"""

from __future__ import annotations

import time

import numpy as np

from ..attention.model import MultiHeadAttention, parameter_error
from ..learners.chen_li.body import ConvexBody
from ..learners.chen_li.phase3_refine_sum import CertifiedRefit
from ..learners.chen_li.phase4_span import span_basis
from ..learners.chen_li.settings import NORM_BOUND, BodySettings
from ..learners.moment_route import sine_distance
from ..learners.report import Phase, Route, figures_text, phase_table

#: ℓ1 distance within which a head's pattern counts as the decoded one (agreement-row precision).
PATTERN_TOLERANCE = 0.1


# ------------------------------------------------------------ figures against a teacher

def span_distance(basis: np.ndarray, teacher: MultiHeadAttention) -> float:
    """sin of the largest principal angle between span(basis) and span{vec Θ_i}.

    ``basis`` has shape (r, d, d) or (r, d²); 0 means the spans agree, 1 that
    some teacher direction is orthogonal to the estimate.
    """
    return sine_distance(np.asarray(basis).reshape(len(basis), -1), teacher.thetas.reshape(teacher.heads, -1))


def w_sum_error(w_sum: np.ndarray, teacher: MultiHeadAttention) -> float:
    """‖Ŵ_Σ − W_Σ‖_F / ‖W_Σ‖_F."""
    truth = teacher.projection_sum
    return float(np.linalg.norm(w_sum - truth) / np.linalg.norm(truth))


def agreeing_rows(rows, teacher: MultiHeadAttention, tolerance: float = PATTERN_TOLERANCE) -> np.ndarray:
    """Mask of the rows on which every teacher head's pattern is within ``tolerance`` of â in ℓ1."""
    if len(rows) == 0:
        return np.zeros(0, dtype=bool)
    attention = teacher.attention(rows.tokens)  # (c, m, k, k)
    heads_rows = attention[np.arange(len(rows)), :, rows.query, :]  # (c, m, k)
    distance = np.abs(heads_rows - rows.pattern[:, None, :]).sum(axis=-1)
    return np.all(distance <= tolerance, axis=1)


def agreement_precision(rows, teacher: MultiHeadAttention, tolerance: float = PATTERN_TOLERANCE) -> float:
    """Share of accepted rows on which every teacher head's pattern is within ``tolerance`` of â in ℓ1
    (NaN when no row was accepted)."""
    return float(np.mean(agreeing_rows(rows, teacher, tolerance))) if len(rows) else float("nan")


def teacher_feasible_fraction(slabs, teacher: MultiHeadAttention) -> float:
    """Share of the body's constraints (slabs and half-spaces) that every true Θ_i satisfies."""
    slab_ok, half_ok = _constraints_held(slabs, teacher)
    total = len(slab_ok) + len(half_ok)
    return float((slab_ok.sum() + half_ok.sum()) / total) if total else float("nan")


def teacher_feasible_rows(slabs, teacher: MultiHeadAttention) -> np.ndarray:
    """Mask of the accepted rows (``slabs.row_count()``) all of whose constraints every true Θ_i satisfies."""
    slab_ok, half_ok = _constraints_held(slabs, teacher)
    broken = np.zeros(slabs.row_count(), dtype=bool)
    np.logical_or.at(broken, slabs.slab_row, ~slab_ok)
    np.logical_or.at(broken, slabs.halfspace_row, ~half_ok)
    return ~broken


def _constraints_held(slabs, teacher: MultiHeadAttention) -> tuple[np.ndarray, np.ndarray]:
    """Which slabs, and which half-spaces, every true Θ_i satisfies."""
    thetas = teacher.thetas.reshape(teacher.heads, -1).T
    slab_ok = np.all(np.abs(slabs.E @ thetas - slabs.b[:, None]) <= slabs.t[:, None], axis=1)
    return slab_ok, np.all(slabs.H @ thetas <= slabs.g[:, None], axis=1)


def hull_direction_ranks(slabs, teacher: MultiHeadAttention) -> list[int]:
    """Where the teacher's hull directions fall in K*'s spectrum: for each of the m − 1 eigenvalues of the
    scaled normal matrix M = (E/t)ᵀ(E/t) restricted to span{Θ_i − Θ_1}, how many of M's d² eigenvalues lie
    below it.

    Phase 4 reads the hull as M's m − 1 smallest directions
    (:func:`~mhalearn.learners.chen_li.phase4_span.read_affine_hull`), so it
    can read it only when the ranks are about 1, …, m − 1 (the least they can
    be: by interlacing the j-th restricted eigenvalue is at least M's j-th,
    and equal only when the hull is exactly an eigenspace).  All the slabs
    count, before phase 4's trimming
    (:func:`~mhalearn.learners.chen_li.phase4_span.trimmed_affine_hull`).
    Followed as rows are added (runs/kstar-oracle/kstar_rows.py), a rank that stops
    falling above m − 1 is a bias of the rows that more rows of the same
    kind do not remove: at m = 4 it fell from 52 to 23 over 493–3 949 rows
    and then stalled at 15 by 26 187.
    """
    scaled_E, _ = slabs.weighted_equalities()
    normal = scaled_E.T @ scaled_E
    thetas = teacher.thetas.reshape(teacher.heads, -1)
    directions = np.linalg.qr((thetas[1:] - thetas[0]).T)[0]  # (d², m − 1), orthonormal
    restricted = np.linalg.eigvalsh(directions.T @ normal @ directions)
    spectrum = np.linalg.eigvalsh(normal)
    return [int(np.count_nonzero(spectrum < value)) for value in restricted]


def log_ratio_disagreement(slabs, teacher: MultiHeadAttention) -> np.ndarray:
    """For each slab, max_i − min_i of ⟨E, Θ_i⟩: how far apart the heads' log-ratios are (nats) on the
    token pair the slab fixes (0 on an exact agreement row)."""
    values = slabs.E @ teacher.thetas.reshape(teacher.heads, -1).T
    return values.max(axis=1) - values.min(axis=1)


def certification_precision(margin, certified: np.ndarray, eta: float, teacher: MultiHeadAttention) -> float:
    """Share of certified rows on which every teacher head puts ≥ 1 − η on j*'s copies (NaN if none)."""
    if not np.any(certified):
        return float("nan")
    tokens = margin.tokens[certified]
    query, top = margin.query[certified], margin.top[certified]
    index = np.arange(len(tokens))
    weights = teacher.attention(tokens)[index, :, query, :]  # (c, m, k)
    copies = np.all(tokens == tokens[index, top][:, None, :], axis=-1)  # (c, k)
    mass = np.sum(weights * copies[:, None, :], axis=-1)
    return float(np.mean(np.all(mass >= 1.0 - eta, axis=1)))


# ------------------------------------------------------------ the observer

class TeacherObserver:
    """Measures every phase result of a fit against a planted teacher (pass it as ``callback``).

    What it measures is chosen phase by phase: :attr:`OBSERVED` maps each
    :class:`~mhalearn.learners.report.Phase` it measures to its method, and
    :attr:`UNOBSERVED` lists, with the reason, those it leaves alone; a test
    checks that every phase is in exactly one.

    For phase 4 it reports the body's span distance (``distance``, also for
    a span the body refused), the body's own estimates of it
    (``median_error``, the refusal's, and ``estimated_error``, its upper
    bound) and the precision of the K* rows the trimmed hull kept
    (``kept_precision``).

    Parameters
    ----------
    teacher : MultiHeadAttention
        The planted layer, in the units of the data given to ``fit``.
    compare_min_norm : bool
        Also compute K*'s minimum-norm point (the paper's Θ̄*) when the body
        gives a span and report the distance of the span it would give — a
        comparison with its own generator (seeded by ``random_state``) and its
        own time (``min_norm_seconds``), never the learner's.
    norm_bound : float
        The radius of K*'s norm ball in that comparison (the learners' default).
    random_state : int
        Seeds the comparison's subset of constraints.

    Attributes
    ----------
    OBSERVED : dict
        Class attribute: the method measuring each phase it measures.
    UNOBSERVED : frozenset
        Class attribute: the phases it records with no figure — phase 5's
        net, whose candidates the teacher judges through phase 6's choice
        (``selection``) — and ``PASS``, where a pass over a stream stands,
        which it does not record, and ``COMPARED_NET``, which is never told.
    records : list of (phase, figures dict, seconds)
        One per phase result seen, in order; cleared when a new fit starts.
    seconds : float
        Time spent observing this fit.

    Examples
    --------
    >>> observer = TeacherObserver(teacher)                      # doctest: +SKIP
    >>> SculptLearner(2).fit(X, Y, callback=observer)            # doctest: +SKIP
    >>> print(observer.table())                                  # doctest: +SKIP
    """

    def __init__(self, teacher: MultiHeadAttention, *, compare_min_norm: bool = False, norm_bound: float = NORM_BOUND,
                 random_state: int = 0):
        if not isinstance(teacher, MultiHeadAttention):
            raise TypeError(f"teacher: expected a MultiHeadAttention, received {type(teacher).__name__}")
        self.teacher = teacher
        self.compare_min_norm = bool(compare_min_norm)
        self.norm_bound = float(norm_bound)
        self.random_state = random_state
        self.records: list[tuple[Phase, dict, float]] = []
        self.seconds = 0.0
        self._truth, self._units, self._last_rows = teacher, None, None

    def __call__(self, phase: Phase, result) -> None:
        start = time.perf_counter()
        if phase not in self.OBSERVED and phase not in self.UNOBSERVED:
            raise ValueError(f"phase: expected a mhalearn.learners.report.Phase, received {phase!r}")
        if phase == Phase.PASS:
            return
        observe = self.OBSERVED.get(phase)
        figures = {} if observe is None else observe(self, result)
        elapsed = time.perf_counter() - start
        self.records.append((Phase(phase), figures, elapsed))
        self.seconds += elapsed

    def _parameter_error(self, model: MultiHeadAttention) -> float:
        """Head-matched parameter error of a layer in the fit's units, measured in the data's units
        (as the returned layer would be: the error mixes Θ and W, so it depends on the units)."""
        return parameter_error(self._units.to_data_units(model), self.teacher)["total"]

    def _observe_start(self, start) -> dict:
        """A new fit: check the teacher's shape and express it in the fit's units."""
        if (start.heads, start.dim) != (self.teacher.heads, self.teacher.dim):
            raise ValueError(f"teacher: expected {start.heads} heads of dim {start.dim} (the learner's and the "
                             f"data's), received {self.teacher.heads} heads of dim {self.teacher.dim}")
        self.records, self.seconds, self._last_rows = [], 0.0, None
        self._units, self._truth = start, start.to_fit_units(self.teacher)
        return {}

    def _observe_crude_sum(self, result) -> dict:
        return {"w_sum_error": w_sum_error(result.w_sum, self._truth)}

    def _observe_sculpt(self, result) -> dict:
        self._last_rows = result.rows
        return {"precision": agreement_precision(result.rows, self._truth),
                "teacher_feasible_fraction": teacher_feasible_fraction(result.slabs, self._truth)}

    def _observe_refined_sum(self, result) -> dict:
        figures = {"refined_w_sum_error": w_sum_error(result.w_sum, self._truth)}
        if result.theta_bar is not None:
            figures["theta_bar_distance"] = span_distance(result.theta_bar[None, :], self._truth)
        for step in result.steps:
            certified = isinstance(step, CertifiedRefit)
            if step.w_sum is not None:
                figures[f"{'certified' if certified else 'alternating'}_w_sum_error"] = w_sum_error(step.w_sum,
                                                                                                  self._truth)
            if certified:
                figures["certification_precision"] = certification_precision(step.margin, step.certified_mask,
                                                                             step.eta, self._truth)
        return figures

    def _observe_span(self, result) -> dict:
        if result.basis is None:
            return {}
        figures = {"distance": span_distance(result.basis, self._truth),
                   "centre_distance": span_distance(span_basis(result.centre, result.long_directions,
                                                               len(result.basis)), self._truth),
                   "estimated_error": result.estimated_error, "median_error": result.median_error}
        if self._truth.heads > 1 and result.slabs is not None and result.slabs.equalities:
            # m − 1 at best: phase 4 reads the hull only where it is K*'s thinnest (hull_direction_ranks).
            figures["hull_rank"] = float(max(hull_direction_ranks(result.slabs, self._truth)))
        if self._last_rows is not None and result.kept is not None:
            figures["kept_precision"] = agreement_precision(self._last_rows.subset(result.kept), self._truth)
        if self.compare_min_norm:
            figures.update(self._min_norm_comparison(result))
        return figures

    def _min_norm_comparison(self, result) -> dict:
        """The span K*'s minimum-norm point would give, with its own generator and time."""
        start = time.perf_counter()
        body = ConvexBody(result.slabs, self.norm_bound, max_constraints=BodySettings.max_constraints,
                          rng=np.random.default_rng(self.random_state))
        point, _ = body.min_norm_point()
        figures = {"min_norm_seconds": time.perf_counter() - start}
        if point is not None:
            figures["min_norm_distance"] = span_distance(
                span_basis(point, result.long_directions, len(result.basis)), self._truth)
        return figures

    def _observe_moment(self, result) -> dict:
        return {"distance": span_distance(result.basis, self._truth)}

    def _observe_selection(self, result) -> dict:
        return {"parameter_error_least_squares": self._parameter_error(result.least_squares_model),
                "parameter_error": self._parameter_error(result.model)}

    def _observe_restart(self, result) -> dict:
        return {"parameter_error": self._parameter_error(result.model)}

    #: The handler of each observed phase.
    OBSERVED = {Phase.START: _observe_start, Phase.CRUDE_SUM: _observe_crude_sum, Phase.SCULPT: _observe_sculpt,
                Phase.REFINED_SUM: _observe_refined_sum, Phase.SPAN: _observe_span, Phase.MOMENT: _observe_moment,
                Phase.SELECTION: _observe_selection, Phase.RESTART: _observe_restart}
    # Phase 5's candidates have no single span or layer to hold against the teacher; phase 6's choice among
    # them does (``selection``).  Where a pass stands is no result at all, and comes once a wave: not recorded.
    #: The phases deliberately not observed.
    UNOBSERVED = frozenset({Phase.NET, Phase.COMPARED_NET, Phase.PASS})

    # Reading the records.

    def figure(self, phase: Phase, name: str):
        """The last value of figure ``name`` recorded for ``phase`` (None when there is none)."""
        for recorded, figures, _ in reversed(self.records):
            if recorded == phase and name in figures:
                return figures[name]
        return None

    def span_distance(self, route: Route) -> float | None:
        """The span distance of ``route``'s span: ``Route.BODY`` (phase 4) or ``Route.MOMENT`` (ours)."""
        return self.figure(Phase.SPAN if route == Route.BODY else Phase.MOMENT, "distance")

    def as_dict(self) -> list[dict]:
        """One dict per record: ``phase``, ``seconds`` (the observer's) and the figures."""
        return [{"phase": str(phase), "seconds": seconds, **figures} for phase, figures, seconds in self.records]

    def table(self) -> str:
        """The figures against the teacher, one line per phase result (seconds: the observer's own)."""
        rows = [(phase, _Line(seconds, figures)) for phase, figures, seconds in self.records
                if phase != Phase.START]
        return phase_table(rows, [f"observer total {self.seconds:.2f} s (not the learner's)"])


class _Line:
    """A record as a line of :func:`~mhalearn.learners.report.phase_table`."""

    def __init__(self, seconds: float, figures: dict):
        self.seconds, self._figures = seconds, figures

    def summary(self) -> str:
        return figures_text(self._figures, list(self._figures))

    def detail_lines(self) -> list[str]:
        return []


__all__ = ["TeacherObserver", "agreeing_rows", "agreement_precision", "certification_precision",
           "hull_direction_ranks", "log_ratio_disagreement", "span_distance", "teacher_feasible_fraction",
           "teacher_feasible_rows", "w_sum_error"]
