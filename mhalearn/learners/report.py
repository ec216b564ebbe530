"""What a fit did: typed phase results, the learners' ``report_``, and how observers are told.

Every phase of a learner returns a frozen :class:`PhaseResult`: its wall time
``seconds``, the figures it computed *from the data alone*, and the arrays a
later phase or an observer needs (Ŵ_Σ, the agreement rows, the span basis,
the candidate layers), which are marked ``data`` and left out of tables and
of :meth:`PhaseResult.as_dict`.  A learner's ``report_`` is the tuple of its
phase results with the fit's total time and units:
:class:`~mhalearn.learners.chen_li.fit.SpanSearchReport` for :class:`~mhalearn.SculptLearner` and
:class:`~mhalearn.MomentLearner`, :class:`~mhalearn.learners.gradient.GradientReport` for
:class:`~mhalearn.GradientLearner`.  Each has ``table()`` (for people) and
``as_dict()`` (nested plain dicts, for JSON or a results row).

Observers (tensorly's ``callback``): a learner's ``fit(X, Y,
callback=...)`` calls ``callback(phase, result)`` once per phase result, in
the order the phases run (:class:`Notifier`).  That call is all a learner
knows of its observers: they never change what it computes, and their time
is kept out of the learner's ``total_seconds``.  The teacher's view of a fit
is one such observer, :class:`mhalearn.evaluation.TeacherObserver`.

The names a fit tells and stores are named here once: :class:`Phase` (the
``phase`` of ``callback(phase, result)``; :class:`Notifier` refuses any
other), :class:`Route` (where a span came from) and :class:`Rule` (how
phase 2 accepted rows).  They are ``str`` enumerations: each member *is*
its string (``Phase.SPAN == "span"``), so reports, results rows and JSON
hold plain strings, and a stored one reads back equal to its member.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..attention.model import MultiHeadAttention
from ..data.phase_files import register_kept
from ..data.units import Units


class Phase(enum.StrEnum):
    """The phase results a learner's fit tells its observers, in the order they can come.

    ``START`` comes first in every fit (:class:`FitStart`); then Chen & Li's
    phases (:mod:`mhalearn.learners.chen_li`: ``SCULPT`` twice, under the
    crude and the refined Ŵ_Σ), ``MOMENT`` for our moment route
    (:mod:`mhalearn.learners.moment_route`), and ``RESTART`` once per run of
    :class:`~mhalearn.GradientLearner`.  An observer decides, for each, what
    it measures (:class:`~mhalearn.evaluation.TeacherObserver` lists the
    phases it leaves alone).

    ``PASS`` is not a phase result but where a long pass over a stream
    stands (:class:`PassPosition`), told after every wave of it: a pass
    over 10⁸–10⁹ sequences takes from minutes to hours, and a progress
    display (:class:`mhalearn.StreamProgress`) is one more observer.
    Observers that measure results let it by.  ``COMPARED_NET`` is never
    told either: it names the other route's net in a report, when phase 6
    chose between both routes' candidates (observers see the chosen net).
    """

    START = "start"
    CRUDE_SUM = "crude_sum"
    SCULPT = "sculpt"
    REFINED_SUM = "refined_sum"
    SPAN = "span"
    MOMENT = "moment"
    NET = "net"
    SELECTION = "selection"
    COMPARED_NET = "compared_net"
    RESTART = "restart"
    PASS = "pass"


class PhaseFile(enum.StrEnum):
    """The names a checkpoint keeps phase results under (:mod:`mhalearn.data.checkpoint`), derived from :class:`Phase`.

    Chen & Li's phases 1–4 by the paper's number and their :class:`Phase`
    (``SCULPT`` twice: phase 2 under the crude Ŵ_Σ, and again in phase 4 for
    the rows of K*), the refit over a stream longer than phases 1–3's prefix
    as a part of phase 3, and our moment route by its :class:`Phase`.  The
    strings are the files' names (``1_crude_sum.npz``), so a checkpoint
    written by any version that kept these names resumes.
    """

    CRUDE_SUM = f"1_{Phase.CRUDE_SUM}"
    SCULPT = f"2_{Phase.SCULPT}"
    REFINED_SUM = f"3_{Phase.REFINED_SUM}"
    STREAM_REFIT = "3_stream_refit"
    KSTAR = f"4_{Phase.SCULPT}"
    SPAN = f"4_{Phase.SPAN}"
    MOMENT = f"{Phase.MOMENT}"


@dataclass(frozen=True)
class PassPosition:
    """Where a pass over a stream stands (``callback(Phase.PASS, position)``, after each of its waves).

    ``phase`` is the phase the pass belongs to and ``number`` its pass
    within the phase (from 1); ``blocks_done`` of the stream's ``blocks``
    are read, ``resumed_at`` of them by an earlier run whose saved place the
    pass took up (:mod:`mhalearn.data.checkpoint`); ``seconds`` is the
    pass's time so far, that earlier run's included.
    """

    phase: Phase
    number: int
    blocks_done: int
    blocks: int
    resumed_at: int
    seconds: float

    @property
    def name(self) -> str:
        """The pass as a display names it: ``phase 3, pass 1``."""
        return f"phase {_PHASE_NUMBERS[self.phase]}, pass {self.number}"

    def summary(self) -> str:
        """One line, as every result a callback is told has: the pass, its blocks read and its seconds."""
        resumed = f", taken up at block {self.resumed_at}" if self.resumed_at else ""
        return f"{self.name}: {self.blocks_done}/{self.blocks} blocks{resumed}, {self.seconds:.1f} s"


class Route(enum.StrEnum):
    """Where the span that phases 5–6 search comes from (``report_.route``, ``span_route``).

    ``BODY``: Chen & Li's sculpted body (phases 1–4); ``MOMENT``: our moment
    route.  ``AUTO`` is a request only (``SculptLearner(span_route=...)``:
    the body, and the moment route when it is the better bet), and ``BOTH``
    a choice of :func:`~mhalearn.learners.chen_li.fit.choose_route` only
    (phase 6 chooses between both routes' candidates); a report's route is
    ``BODY`` or ``MOMENT``.
    """

    AUTO = "auto"
    BODY = "body"
    MOMENT = "moment"
    BOTH = "both"


class Rule(enum.StrEnum):
    """How phase 2 accepts agreement rows (``SculptedBody.rule``).

    ``QUANTILE``: the best share of every block, while Ŵ_Σ is crude;
    ``ABSOLUTE``: every row whose relative residual is small enough, once
    Ŵ_Σ is refined (the rows of K*).
    """

    QUANTILE = "quantile"
    ABSOLUTE = "absolute"


def data_field(default=None):
    """A field holding arrays or objects for later phases and observers, not a reported figure."""
    return field(default=default, repr=False, compare=False, metadata={"data": True})


def plain(value):
    """``value`` as nested plain dicts, lists and scalars (NumPy scalars become Python numbers, names
    such as a :class:`Route` their strings)."""
    if isinstance(value, PhaseResult):
        return value.as_dict()
    if isinstance(value, enum.StrEnum):
        return str(value)
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def format_value(value) -> str:
    """A figure for a table: three significant digits for floats, also inside lists."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_value(item) for item in value) + "]"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def figures_text(figures: dict, keys) -> str:
    """``key=value`` for the ``keys`` that ``figures`` holds and that are not None."""
    return " ".join(f"{key}={format_value(figures[key])}" for key in keys if figures.get(key) is not None)


@dataclass(frozen=True, kw_only=True)
class PhaseResult:
    """The result of one phase: ``seconds``, its figures, and data fields (see :func:`data_field`).

    Every subclass may be kept in a checkpoint's phase files: defining one registers it
    (:func:`~mhalearn.data.phase_files.register_kept`).
    """

    seconds: float

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        register_kept(cls)

    #: The figures the phase table shows on the phase's line (all figures when empty).
    columns = ()

    def figures(self) -> dict:
        """The reported fields (not the data fields), by name."""
        return {item.name: getattr(self, item.name) for item in dataclasses.fields(self)
                if not item.metadata.get("data")}

    def as_dict(self) -> dict:
        """The reported fields as nested plain dicts and lists."""
        return {key: plain(value) for key, value in self.figures().items()}

    def summary(self) -> str:
        """The figures on the phase's line of the table."""
        figures = self.figures()
        keys = self.columns or [key for key in figures if key != "seconds"]
        return figures_text(figures, keys)

    def detail_lines(self) -> list[str]:
        """Lines the table prints under the phase's own."""
        return []


def detail_line(name: str, text: str) -> str:
    """An indented line under a phase of a table."""
    return f"{'':<12} {'':>8}    {name}: {text}"


def phase_table(rows, footer: list[str] = ()) -> str:
    """A plain-text table of ``(name, result or None)`` rows: seconds, figures, detail lines."""
    lines = [f"{'phase':<12} {'seconds':>8}  figures"]
    for name, result in rows:
        if result is None:
            lines.append(f"{name:<12} {'-':>8}  (not run)")
            continue
        lines.append(f"{name:<12} {result.seconds:8.2f}  {result.summary()}")
        lines += result.detail_lines()
    return "\n".join([*lines, *footer])


@dataclass(frozen=True, kw_only=True)
class FitStart(PhaseResult, Units):
    """The first thing a fit tells its observers: the data's shape and the units it works in.

    The learners work on X / x_scale and Y / y_scale (see
    :class:`~mhalearn.learners.base.AttentionLearner` and
    :class:`~mhalearn.data.units.Units`, whose maps between the units it
    has); every later result is in those units.
    """

    heads: int

    columns = ("heads", "samples", "length", "dim", "x_scale", "y_scale")


class Notifier:
    """Calls the fit's ``callback(phase, result)`` and keeps the time spent in it out of the fit's.

    ``phase`` must be a :class:`Phase`: a name an observer could not know
    is an error of the learner, raised whether or not anyone observes.
    """

    def __init__(self, callback: Callable | None):
        if isinstance(callback, MultiHeadAttention):
            raise TypeError("callback: expected a callable (phase, result) or None, received a MultiHeadAttention; "
                            "to measure a fit against a teacher pass callback=mhalearn.TeacherObserver(teacher)")
        if callback is not None and not callable(callback):
            raise TypeError(f"callback: expected a callable (phase, result) or None, received "
                            f"{type(callback).__name__}")
        self.callback = callback
        self.seconds = 0.0

    def __call__(self, phase: Phase, result) -> None:
        if phase not in _PHASES:
            raise ValueError(f"phase: expected a mhalearn.learners.report.Phase, received {phase!r}")
        if self.callback is None:
            return
        start = time.perf_counter()
        self.callback(phase, result)
        self.seconds += time.perf_counter() - start


_PHASES = frozenset(Phase)


class StreamProgress:
    """An observer showing where a fit's passes over a long stream stand: pass it as ``callback``.

    Each pass (:class:`PassPosition`, told as ``Phase.PASS`` after every
    wave) gets a display of its blocks on stderr (``progress_bar`` of
    ``mhalearn._progress``): a tqdm bar where one redraws
    in place (a terminal), and elsewhere (a log, a batch job's output, a
    worker process beside another display) a line every ``interval``
    seconds with the time to the end of the pass, and one at its end.  A
    pass taken up from a checkpoint starts at the block it was saved at,
    and its time to the end counts only the blocks read since.  Every
    other phase result is let by, so it sits beside any other observer
    (:class:`Observers`).  A fit whose stream is no longer than the prefix
    phases 1–3 read makes no such pass.

    Parameters
    ----------
    interval : float
        Seconds between two lines.
    desc : str
        Put before each pass's name (e.g. which fit of a sweep it is).
    lines : bool
        Lines even on a terminal.
    enabled : bool
        False shows nothing.

    Examples
    --------
    >>> SculptLearner(3, checkpoint="ckpt").fit(X, Y, callback=StreamProgress())   # doctest: +SKIP
    """

    def __init__(self, *, interval: float = 60.0, desc: str = "", lines: bool = False, enabled: bool = True):
        self.interval, self.desc, self.lines, self.enabled = float(interval), desc, bool(lines), bool(enabled)
        self._pass = self._bar = None

    def __call__(self, phase: Phase, result) -> None:
        if phase != Phase.PASS:
            return
        if (result.phase, result.number) != self._pass:
            from .._progress import progress_bar

            self.close()
            self._pass = (result.phase, result.number)
            self._bar = progress_bar(result.blocks, initial=result.resumed_at, unit="block", interval=self.interval,
                                     desc=f"{self.desc}{result.name}",
                                     enabled=self.enabled, lines=self.lines)
        self._bar.update(result.blocks_done - self._bar.n)
        if result.blocks_done >= result.blocks:
            self.close()

    def close(self) -> None:
        """End the display of the pass in progress (a fit interrupted mid-pass leaves one open)."""
        if self._bar is not None:
            self._bar.close()
        self._pass = self._bar = None


#: The number of Chen & Li's phase that a pass serves, as its display names it.
_PHASE_NUMBERS = {Phase.CRUDE_SUM: 1, Phase.SCULPT: 2, Phase.REFINED_SUM: 3, Phase.SPAN: 4}


class Observers:
    """Several observers as one ``callback``: each is told every phase result, in the order given."""

    def __init__(self, *observers: Callable):
        for observer in observers:
            if not callable(observer):
                raise TypeError(f"observers: expected callables (phase, result), received {type(observer).__name__}")
        self.observers = observers

    def __call__(self, phase: Phase, result) -> None:
        for observer in self.observers:
            observer(phase, result)


def certificate_line(certificate: dict) -> str:
    """The held-out certificate of phase 6 in one sentence."""
    return (f"certificate: with probability ≥ {1 - certificate['delta']:.2f} the relative test error "
            f"is ≤ {certificate['bound']:.3g} (held-out error {certificate['empirical_error']:.3g}, "
            f"{certificate['hypotheses']} models compared)")


@dataclass(frozen=True, kw_only=True)
class FitStep(PhaseResult):
    """A step of a fit outside its phases (the data's checks, units pass and split: ``"data"``), timed alike.

    ``read_as`` says what the step read or made, for the table.
    """

    name: str
    read_as: str | None = None
    #: Whether the step comes after the phases (the table lists it there).
    after_phases: bool = data_field(False)

    columns = ("read_as",)


@dataclass(frozen=True, kw_only=True)
class LearnerReport:
    """What every learner's ``report_`` has: the fit's time (observers excluded) and units.

    ``steps`` are the fit's steps outside its phases (:class:`FitStep`), so
    that the steps' and the phases' seconds add up to ``total_seconds``
    (:meth:`attributed_seconds`); ``observer_seconds`` is the time spent in
    the observers, apart: the fit's wall time is the sum of both totals.
    """

    total_seconds: float
    x_scale: float
    y_scale: float
    steps: tuple = ()
    observer_seconds: float = 0.0

    def phases(self) -> list[tuple[str, PhaseResult | None]]:
        """``(name, result)`` for every phase, in the order they ran (None: not run)."""
        return []

    def attributed_seconds(self) -> float:
        """The seconds of the steps and the phases that ran (each phase result's own)."""
        return sum(result.seconds for _, result in [*self._step_rows(), *self.phases()] if result is not None)

    def footer(self) -> list[str]:
        return []

    def _step_rows(self, after_phases: bool | None = None) -> list[tuple[str, PhaseResult]]:
        return [(step.name, step) for step in self.steps if after_phases in (None, step.after_phases)]

    def table(self) -> str:
        """Each step's and phase's seconds and figures, one line each (plus detail lines), then the total."""
        footer = [*self.footer(), f"total {self.total_seconds:.2f} s ({self.attributed_seconds():.2f} s in the steps "
                                  f"and phases above); observers {self.observer_seconds:.2f} s apart"]
        return phase_table([*self._step_rows(False), *self.phases(), *self._step_rows(True)], footer)

    def as_dict(self) -> dict:
        """The report's fields as nested plain dicts and lists (data fields left out)."""
        return {item.name: plain(getattr(self, item.name)) for item in dataclasses.fields(self)
                if not item.metadata.get("data")}


@dataclass(frozen=True, kw_only=True)
class ZeroLabelsReport(LearnerReport):
    """Every label was 0: the zero layer was returned without fitting."""

    zero_labels: str = ("every label is 0: the zero layer (W = 0) is the exact answer, returned without "
                        "fitting")

    def table(self) -> str:
        return self.zero_labels


__all__ = ["FitStart", "FitStep", "LearnerReport", "Notifier", "Observers", "PassPosition", "Phase", "PhaseFile",
           "PhaseResult", "Route", "Rule", "StreamProgress", "ZeroLabelsReport", "data_field", "phase_table"]
