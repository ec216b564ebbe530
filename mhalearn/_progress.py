"""Progress display: a tqdm bar where it redraws in place, plain lines anywhere else.

A tqdm bar redraws itself with carriage returns.  A terminal (or a notebook
widget) shows them in place; a log file, a CI log or a SLURM output file
keeps every one of them, hundreds of updates on one line.  So on a stream
that is not a terminal the same figures are written as lines instead
(:class:`ProgressLines`), and :func:`progress_bar` picks one of the two.
:class:`StepProgress` shows a command's named steps on either.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from contextlib import contextmanager
from typing import Iterator, Sequence

from tqdm.auto import tqdm
from tqdm.autonotebook import tqdm as notebook_or_terminal_tqdm
from tqdm.std import tqdm as terminal_tqdm


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal (False for files, pipes, closed or replaced streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def bar_redraws_in_place() -> bool:
    """Whether a tqdm bar on stderr is shown in place: stderr is a terminal, or tqdm draws a notebook widget."""
    return is_terminal(sys.stderr) or notebook_or_terminal_tqdm is not terminal_tqdm


class ProgressLines:
    """The figures of a tqdm bar as plain lines on a stream that is not a terminal.

    A line (``DESC [N/TOTAL UNITs, ELAPSED elapsed, ETA REMAINING, POSTFIX]``)
    is written when :meth:`set_description_str` starts a new stage, when
    :meth:`update` finds ``interval`` seconds passed since the last line,
    and at :meth:`close` if anything changed since the last line.  Offers the
    part of tqdm's interface mhalearn uses.

    Parameters
    ----------
    total : int
        Units of work in all.
    initial : int
        Units already done (a resumed sweep's stored cells); the ETA counts
        only the units done since.
    desc : str
        What is in progress.
    unit : str
        Name of one unit (``"cell"``, ``"step"``).
    interval : float
        Least seconds between two lines written by :meth:`update`
        (``math.inf``: lines only for new stages and at the end).
    stream : file, optional
        Where lines go (default: ``sys.stderr`` when the object is made).
    """

    def __init__(self, total: int, *, initial: int = 0, desc: str = "", unit: str = "it", interval: float = 30.0,
                 stream=None):
        self.total, self.n, self.desc, self.unit, self.interval = total, initial, desc, unit, interval
        self._initial = initial
        self._stream = sys.stderr if stream is None else stream
        self._start = self._last_line = time.monotonic()
        self._postfix = ""
        self._pending = False
        self._closed = False

    def line(self) -> str:
        """The current figures as one line (without the newline)."""
        elapsed = time.monotonic() - self._start
        parts = [f"{self.n}/{self.total} {self.unit}s", f"{tqdm.format_interval(elapsed)} elapsed"]
        done = self.n - self._initial
        if 0 < done and self.n < self.total:
            parts.append(f"ETA {tqdm.format_interval(elapsed / done * (self.total - self.n))}")
        if self._postfix:
            parts.append(self._postfix)
        return f"{self.desc} [{', '.join(parts)}]"

    def _write(self) -> None:
        print(self.line(), file=self._stream, flush=True)
        self._last_line = time.monotonic()
        self._pending = False

    def update(self, n: int = 1) -> None:
        """Count ``n`` more units done; write a line if ``interval`` seconds passed since the last one."""
        self.n += n
        self._pending = True
        if time.monotonic() - self._last_line >= self.interval:
            self._write()

    def set_postfix(self, refresh: bool = True, **values) -> None:
        """Show ``name=value`` figures at the end of the next lines (``refresh`` is ignored)."""
        self._postfix = ", ".join(f"{name}={value}" for name, value in values.items())
        self._pending = True

    def set_description_str(self, desc: str, refresh: bool = True) -> None:
        """Name the stage now in progress; with ``refresh`` write its line now."""
        self.desc = desc
        self._pending = True
        if refresh:
            self._write()

    def refresh(self) -> None:
        """Nothing: redrawing is what a bar does on a terminal, a line is written only when figures change."""

    def close(self) -> None:
        """Write the last figures, unless the last line shows them already (idempotent)."""
        if not self._closed and self._pending:
            self._write()
        self._closed = True


def progress_bar(total: int, *, desc: str, unit: str, enabled: bool = True, initial: int = 0,
                 interval: float = 30.0, lines: bool = False, **bar_options):
    """A progress display on stderr: a tqdm bar where it redraws in place, :class:`ProgressLines` elsewhere.

    Parameters
    ----------
    total, initial, desc, unit :
        As for tqdm (and :class:`ProgressLines`).
    enabled : bool
        False shows nothing (a disabled tqdm bar).
    interval : float
        For :class:`ProgressLines`: least seconds between two lines of
        progress (``math.inf``: only new stages and the end).
    lines : bool
        :class:`ProgressLines` even where a bar would redraw in place (a
        display in a worker process, beside the parent's bar).
    **bar_options
        Further options of the tqdm bar (e.g. ``bar_format``).
    """
    if enabled and (lines or not bar_redraws_in_place()):
        return ProgressLines(total, initial=initial, desc=desc, unit=unit, interval=interval)
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled, dynamic_ncols=True,
                **bar_options)


class StepProgress:
    """Progress over named steps: a bar whose elapsed time keeps ticking during a long step on a
    terminal, a line per step on any other stream (a log, CI, SLURM).

    Parameters
    ----------
    steps : sequence of str
        Names of the steps, in order.
    enabled : bool
        Show progress (False for ``--quiet``).
    """

    def __init__(self, steps: Sequence[str], *, enabled: bool = True, desc: str = "mhalearn"):
        self._desc = desc
        self._bar = progress_bar(len(steps), desc=desc, unit="step", enabled=enabled, interval=math.inf,
                                 bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} steps "
                                            "[{elapsed} elapsed, ETA {remaining}]")
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        if enabled and not isinstance(self._bar, ProgressLines):
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._bar.refresh()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Show ``name`` as the current step; advance the bar when the block ends."""
        self._bar.set_description_str(f"{self._desc}: {name}", refresh=True)
        yield
        self._bar.update(1)

    def close(self) -> None:
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join()
        self._bar.set_description_str(f"{self._desc}: done", refresh=False)
        self._bar.close()

    def __enter__(self) -> "StepProgress":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


__all__ = ["ProgressLines", "StepProgress", "bar_redraws_in_place", "is_terminal", "progress_bar"]
