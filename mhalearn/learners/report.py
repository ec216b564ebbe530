"""The typed ``report_`` of the attention learners (docs/design.md §4.1 and §4.2).

A fitted :class:`~mhalearn.SculptLearner`, :class:`~mhalearn.MomentLearner`
or :class:`~mhalearn.GradientLearner` keeps what its fit did in
``report_``: one dataclass per phase of Chen & Li's learner (each with its
wall time ``seconds`` and its figures), or one line per restart of gradient
descent.  Every report has

- ``table()``: the plain-text phase table (``mhalearn learn`` prints it);
- ``as_dict()``: nested plain dicts and lists, ready for JSON or a results row;
- mapping access with the keys the reports have always had, so
  ``report_["span"]["chosen"]``, ``report_["net"]["candidates"]`` and
  ``report_.get("certificate")`` keep working.  A figure that was not
  measured (a teacher figure without a teacher, a phase that did not run) is
  absent from the mapping, as it was from the dicts.

Figures a phase reports beyond its declared fields (solver details, the
net's radius, ...) are kept in its ``figures`` dict and read the same way.

Reference: Chen, S. & Li, Y., *Provably learning a multi-head attention layer*.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

#: The six phases of Chen & Li's learner, in the order they run.
PHASES = ("crude_sum", "sculpt", "min_norm", "span", "net", "refine")


class Entry(MutableMapping):
    """Mapping access to a dataclass: declared fields that are set, then the free ``figures``.

    Subclasses are dataclasses with a ``figures`` dict; ``_derived`` names
    read-only properties that the mapping shows as keys too.
    """

    _derived: tuple[str, ...] = ()

    def _fields(self) -> list[str]:
        return [item.name for item in dataclasses.fields(self) if item.name != "figures"]

    def __getitem__(self, key):
        if key in self._fields() or key in self._derived:
            value = getattr(self, key)
            if value is None:
                raise KeyError(key)
            return value
        return self.figures[key]

    def __setitem__(self, key, value) -> None:
        if key in self._derived:
            raise KeyError(f"{key!r} is computed from the other figures and cannot be set")
        if key in self._fields():
            setattr(self, key, value)
        else:
            self.figures[key] = value

    def __delitem__(self, key) -> None:
        if key in self._fields():
            if getattr(self, key) is None:
                raise KeyError(key)
            setattr(self, key, None)
        else:
            del self.figures[key]

    def __iter__(self):
        for name in (*self._fields(), *self._derived):
            if getattr(self, name) is not None:
                yield name
        yield from self.figures

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.as_dict()!r})"

    def as_dict(self) -> dict:
        """The entry as nested plain dicts and lists (what the old dict reports held)."""
        return {key: _plain(value) for key, value in self.items()}


def _plain(value):
    if isinstance(value, Entry):
        return value.as_dict()
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _format(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _figures(entry: Mapping, keys) -> str:
    """``key=value`` for the ``keys`` the entry holds."""
    return " ".join(f"{key}={_format(entry[key])}" for key in keys if key in entry)


def _detail(name, text: str) -> str:
    """An indented line under a phase of the table."""
    return f"{'':<10} {'':>8}    {name}: {text}"


# ------------------------------------------------------------------ phases

@dataclass(eq=False, repr=False)
class Phase(Entry):
    """A timed phase: ``seconds`` is None until the phase runs (then the table shows its figures)."""

    seconds: float | None = None
    figures: dict = field(default_factory=dict)

    #: The figures the phase table shows on the phase's line.
    columns = ()

    def detail_lines(self) -> list[str]:
        """Lines the table prints under the phase's own."""
        return []


@dataclass(eq=False, repr=False)
class CrudeSum(Phase):
    """Phase 1: Ŵ_Σ from the input–label correlation (its error only with a teacher)."""

    w_sum_error: float | None = None

    columns = ("w_sum_error",)


#: The figures of one sculpting round (and of the phase, which are its last round's).
ROUND_COLUMNS = ("accepted_rows", "precision", "equalities", "teacher_feasible_fraction")


@dataclass(eq=False, repr=False)
class Sculpt(Phase):
    """Phase 2: the agreement rows and their slabs, per round (crude Ŵ_Σ, then refined Ŵ_Σ).

    The phase's figures are those of its last round; ``rounds`` holds one
    dict per round (``round``, ``accepted_rows``, ``found_rows``,
    ``accepted_fraction``, ``equalities``, ``halfspaces`` and, with a
    teacher, ``precision`` and ``teacher_feasible_fraction``).
    """

    quantile: float | None = None
    accepted_rows: int | None = None
    found_rows: int | None = None
    accepted_fraction: float | None = None
    equalities: int | None = None
    halfspaces: int | None = None
    precision: float | None = None
    teacher_feasible_fraction: float | None = None
    rounds: list | None = None

    columns = ROUND_COLUMNS

    def detail_lines(self) -> list[str]:
        return [_detail(entry["round"], _figures(entry, ROUND_COLUMNS)) for entry in self.rounds or ()]


@dataclass(eq=False, repr=False)
class MinNorm(Phase):
    """Phase 3: the body's minimum-norm point Θ̄ and the refits of Ŵ_Σ (one dict per step in ``w_sum_steps``)."""

    solver_status: str | None = None
    inconsistent: int | None = None
    theta_bar_norm: float | None = None
    theta_bar_distance: float | None = None
    failure: str | None = None
    w_sum_steps: list | None = None
    moved_by: str | None = None
    refined_w_sum_error: float | None = None

    columns = ("solver_status", "inconsistent", "theta_bar_distance", "moved_by", "refined_w_sum_error", "failure")

    def detail_lines(self) -> list[str]:
        keys = ("candidates", "certified", "certification_precision", "start", "iterations", "agreement_fit",
                "w_sum_error")
        return [_detail(step["step"], _figures(step, keys)) for step in self.w_sum_steps or ()]


@dataclass(eq=False, repr=False)
class Route(Phase):
    """One route to the span: the body K* (Chen & Li's) or the moment route (ours).

    ``refused`` says why a route gave no span; ``distance`` (with a teacher)
    is sin of the largest principal angle to span{Θ_i}; ``diagnostic_seconds``
    is time spent only to report, not to learn.
    """

    refused: str | None = None
    spectral_gap: float | None = None
    distance: float | None = None
    diagnostic_seconds: float | None = None


@dataclass(eq=False, repr=False)
class Span(Entry):
    """Phase 4: span{Θ_i}, read from the body or from the moment route.

    ``chosen`` names the route whose span the later phases use; the phase's
    ``seconds`` are that route's (a route run only for comparison is
    diagnostic time, see :attr:`SpanSearchReport.diagnostic_seconds`).
    """

    body: Route | None = None
    moment: Route | None = None
    chosen: str | None = None
    fallback: str | None = None
    chosen_distance: float | None = None
    figures: dict = field(default_factory=dict)

    _derived = ("seconds",)
    columns = ("chosen", "chosen_distance", "fallback")

    @property
    def seconds(self) -> float | None:
        """The chosen route's wall time."""
        route = self.routes().get(self.chosen)
        return None if route is None else route.seconds

    def routes(self) -> dict[str, Route]:
        return {name: route for name, route in (("body", self.body), ("moment", self.moment)) if route is not None}

    def detail_lines(self) -> list[str]:
        keys = ("distance", "spectral_gap", "refused", "seconds")
        return [_detail(name, _figures(route, keys)) for name, route in self.routes().items()]


@dataclass(eq=False, repr=False)
class Net(Phase):
    """Phase 5: the net of m-tuples in the span (``candidates`` scored, kept ``best_scores``)."""

    candidates: int | None = None
    resolution: float | None = None
    best_scores: list | None = None

    columns = ("candidates", "resolution", "best_scores")


@dataclass(eq=False, repr=False)
class Refine(Phase):
    """Phase 6: W by least squares, the held-out choice and its certificate, then our polish.

    ``*_least_squares`` figures are the paper's output, before the polish;
    ``runs`` holds one dict per polished candidate.
    """

    mode: str | None = None
    val_least_squares: float | None = None
    parameter_error_least_squares: float | None = None
    certificate_least_squares: dict | None = None
    val_polished: float | None = None
    parameter_error: float | None = None
    runs: list | None = None

    columns = ("mode", "val_least_squares", "parameter_error_least_squares", "val_polished", "parameter_error")


# ----------------------------------------------------------------- reports

class _Report(Entry):
    """What every learner's report offers besides the mapping: ``table()``."""

    def table(self) -> str:
        raise NotImplementedError


def _certificate_line(certificate: Mapping) -> str:
    return (f"certificate: with probability ≥ {1 - certificate['delta']:.2f} the relative test error "
            f"is ≤ {certificate['bound']:.3g} (held-out error {certificate['empirical_error']:.3g}, "
            f"{certificate['hypotheses']} models compared)")


@dataclass(eq=False, repr=False)
class SpanSearchReport(_Report):
    """The report of :class:`~mhalearn.SculptLearner` and :class:`~mhalearn.MomentLearner`.

    One :class:`Phase` per phase of :data:`PHASES` (the moment learner runs
    only ``span``, ``net`` and ``refine``; the others are None), the
    held-out ``certificate`` of the returned model (see
    :func:`~mhalearn.learners.selection.selection_certificate`), the fit's
    ``total_seconds``, the data's ``units`` and the time spent only on
    diagnostics (sculpting learner only).
    """

    crude_sum: CrudeSum | None = None
    sculpt: Sculpt | None = None
    min_norm: MinNorm | None = None
    span: Span = field(default_factory=Span)
    net: Net = field(default_factory=Net)
    refine: Refine = field(default_factory=Refine)
    certificate: dict | None = None
    total_seconds: float | None = None
    units: dict | None = None
    diagnostic_seconds: float | None = None
    figures: dict = field(default_factory=dict)

    @classmethod
    def for_sculpting(cls) -> "SpanSearchReport":
        """An empty report with all six phases (the sculpting learner's)."""
        return cls(crude_sum=CrudeSum(), sculpt=Sculpt(), min_norm=MinNorm())

    def phases(self) -> dict[str, Entry | None]:
        return {name: getattr(self, name) for name in PHASES}

    def table(self) -> str:
        """Each phase's seconds and key figures, one line per round of Ŵ_Σ refinement, the route and the
        certificate."""
        lines = [f"{'phase':<10} {'seconds':>8}  figures"]
        for name, phase in self.phases().items():
            if not phase:
                lines.append(f"{name:<10} {'-':>8}  (skipped)")
                continue
            lines.append(f"{name:<10} {phase.get('seconds', 0.0):8.2f}  {_figures(phase, phase.columns)}")
            lines += phase.detail_lines()
        if self.certificate:
            lines.append(_certificate_line(self.certificate))
        return "\n".join(lines)


@dataclass(eq=False, repr=False)
class Restart(Phase):
    """One run of gradient descent from a random start."""

    restart: int | None = None
    val_error: float | None = None
    iterations: int | None = None
    val_history: list | None = None
    parameter_error: float | None = None

    columns = ("val_error", "iterations", "parameter_error")


@dataclass(eq=False, repr=False)
class GradientReport(_Report):
    """The report of :class:`~mhalearn.GradientLearner`: one :class:`Restart` per random start."""

    method: str | None = None
    runs: list = field(default_factory=list)
    val_error: float | None = None
    parameter_error: float | None = None
    total_seconds: float | None = None
    units: dict | None = None
    figures: dict = field(default_factory=dict)

    def table(self) -> str:
        """One line per restart (seconds, validation error, iterations), then the one kept."""
        lines = [f"{'restart':<10} {'seconds':>8}  figures"]
        for run in self.runs:
            lines.append(f"{run['restart']:<10} {run.get('seconds', 0.0):8.2f}  {_figures(run, run.columns)}")
        lines.append(f"{self.method}: kept the restart of validation error {_format(self.val_error)}"
                     + (f", parameter error {_format(self.parameter_error)}" if self.parameter_error is not None
                        else ""))
        return "\n".join(lines)


@dataclass(eq=False, repr=False)
class ZeroLabelsReport(_Report):
    """Every label was 0: the zero layer was returned without fitting."""

    zero_labels: str = ("every label is 0: the zero layer (W = 0) is the exact answer, returned without "
                        "fitting")
    total_seconds: float | None = None
    figures: dict = field(default_factory=dict)

    def table(self) -> str:
        return self.zero_labels


def format_phase_table(report: _Report) -> str:
    """The plain-text table of a learner's ``report_`` (the same as ``report_.table()``)."""
    return report.table()
