"""Run a named experiment's grid, resumably, on local processes or a Dask cluster ([design: experiments]).

:func:`run_sweep` asks the results store which cells of the experiment's grid
are already stored, submits only the others, and writes each result from the
coordinating process as soon as it arrives (one committed transaction per
row).  Killing a sweep (even with ``kill -9``) therefore loses only the cells
that were still running; starting it again computes exactly the missing
cells, and a finished sweep started again computes nothing.

Every row carries its provenance (:mod:`mhalearn.provenance`): which code,
on which libraries, computed it.  A sweep resumed on a file whose rows of the
experiment came from other code stops before computing, unless
``allow_mixed=True`` (``--allow-mixed``).  The grid swept is recorded in the
file too.

Failures: a cell whose ``run_cell`` raises is stored as a row with status
``"failed"`` and the traceback, and the sweep goes on.  Cells are
deterministic functions of their parameters, so a failed cell counts as
finished and is not recomputed on resume unless ``retry_failed=True``
(``mhalearn sweep --retry-failed``).  The summary returned (and printed by
the CLI) counts the failures and shows the first error.

Faults, each stopping with a clear ``ValueError`` (before any work) or
``RuntimeError`` (during it) and keeping every row already written:

- the results file or its directory is read-only, or another coordinator is
  writing to it (:class:`~mhalearn.experiments.writer_lock.WriterLock`): refused
  before anything is computed;
- the file cannot be written during the sweep (disk full, a write lock held
  by another program): each write is retried for ``write_timeout`` seconds,
  then the sweep stops; a file found damaged stops it at once;
- a local worker process dies (e.g. out of memory);
- the Dask scheduler is unreachable (checked in seconds, before submitting),
  or has had no worker for ``worker_timeout`` seconds (e.g. the last worker
  died).
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from .._progress import progress_bar
from .._validation import check_choice, check_output_directory, check_positive_int, check_real
from ..provenance import code_id, code_provenance, describe
from .backends import CellOutcome, available_cores, check_scheduler_address, run_dask, run_local
from .registry import MAX_CELLS, Grid, get_experiment, load_experiments
from .store import STATUS_FAILED, ResultStore, cell_key
from .writer_lock import WriterLock, describe_write_error

BACKENDS = ("local", "dask")
#: Seconds a sweep retries writing one row (disk full, file locked) before it stops.
WRITE_TIMEOUT = 120.0
#: Seconds a Dask sweep waits for a worker to (re)appear before it stops.
WORKER_TIMEOUT = 120.0


class SweepWarning(UserWarning):
    """Something a sweep did differently from what was asked (capped workers, mixed code)."""


@dataclass
class SweepSummary:
    """What a call of :func:`run_sweep` did.

    Attributes
    ----------
    experiment : experiment name.
    total : cells in the grid.
    skipped : cells already stored before this call.
    computed : cells computed and stored by this call.
    failed : of ``computed``, cells whose ``run_cell`` raised.
    seconds : wall time of the call.
    errors : the first few error messages of failed cells.
    workers : local worker processes used (None for Dask or when nothing was computed).
    code_id : the code that computed this call's rows.
    """

    experiment: str
    total: int
    skipped: int
    computed: int
    failed: int
    seconds: float
    errors: list = field(default_factory=list)
    workers: int | None = None
    code_id: str | None = None

    def __str__(self) -> str:
        text = (f"{self.experiment}: {self.total} cells, {self.skipped} already stored, "
                f"{self.computed} computed ({self.failed} failed) in {self.seconds:.1f} s")
        if self.errors:
            text += "\nfirst failure:\n" + self.errors[0]
        return text


def grid_cells(experiment_name: str, grid: Grid, max_cells: int = MAX_CELLS) -> list[dict]:
    """The cells of ``grid`` for the experiment; ``ValueError`` when the grid has a bad value, more than
    ``max_cells`` cells (counted before expanding) or a repeated cell."""
    cells = get_experiment(experiment_name).expand_table(grid, max_cells)
    keys = [cell_key(experiment_name, cell) for cell in cells]
    if len(set(keys)) != len(keys):
        raise ValueError(f"grid: {grid.source} [{grid.name}] repeats cells of {experiment_name!r}; "
                         "every cell must be unique")
    return cells


def pending_cells(experiment_name: str, store: ResultStore, cells: list[dict], *,
                  retry_failed: bool = False) -> list[dict]:
    """The cells the store lacks (and, with ``retry_failed``, those stored as failures)."""
    stored = store.finished_keys(experiment_name, include_failed=not retry_failed)
    return [cell for cell in cells if cell_key(experiment_name, cell) not in stored]


def check_code_versions(store: ResultStore, experiment_name: str, current: str, *, allow_mixed: bool) -> None:
    """Refuse (``ValueError``) to add rows to an experiment whose stored rows came from other code.

    With ``allow_mixed`` it warns (:class:`SweepWarning`) instead.
    """
    others = [entry for entry in store.code_versions(experiment_name) if entry["code_id"] != current]
    if not others:
        return
    listing = "; ".join(f"{entry['ok'] + entry['failed']} rows by {describe(entry['provenance'])}"
                        for entry in others)
    message = (f"{str(store.path)!r} holds rows of {experiment_name!r} computed by other code ({listing}); "
               f"this code is {describe(code_provenance())}")
    if not allow_mixed:
        raise ValueError(f"db: {message}. Refusing to mix rows of different code in one sweep: pass "
                         "--allow-mixed (allow_mixed=True) to add rows of this code anyway, or use another --db. "
                         "`mhalearn sweep --status --db FILE` lists the stored code versions")
    warnings.warn(f"{message}; mixing them as asked (--allow-mixed)", SweepWarning, stacklevel=3)


def cell_checkpoint(root, experiment_name: str, cell: dict) -> str | None:
    """The directory where ``cell`` keeps its phases under the sweep's ``root`` (None: no checkpoints).

    Named by a hash of the cell's key, so a resumed sweep finds it again.
    """
    if root is None:
        return None
    return str(Path(root) / hashlib.sha256(cell_key(experiment_name, cell).encode()).hexdigest()[:16])


def _store_outcome(store: ResultStore, experiment_name: str, outcome: CellOutcome, *, replace: bool,
                   write_timeout: float) -> None:
    """Write one outcome, retrying for ``write_timeout`` seconds while the file cannot be written."""
    deadline = time.monotonic() + write_timeout
    delay = 0.05
    while True:
        try:
            store.record(experiment_name, outcome.cell, outcome.metrics, status=outcome.status,
                         error=outcome.error, seconds=outcome.seconds, host=outcome.host, replace=replace,
                         code_id=code_id(outcome.provenance), provenance=outcome.provenance)
            return
        except sqlite3.OperationalError as error:
            if time.monotonic() + delay > deadline:
                raise _StoreUnavailable(describe_write_error(error, write_timeout)) from None
            time.sleep(delay)
            delay = min(2 * delay, 2.0)
        except sqlite3.DatabaseError as error:  # a damaged file: retrying cannot help
            raise _StoreUnavailable(describe_write_error(error, write_timeout)) from None


class _StoreUnavailable(Exception):
    """The results file could not be written for the whole write timeout."""


def run_sweep(experiment_name: str, db_path, *, quick: bool = False, grid=None, workers: int | None = None,
              backend: str = "local", scheduler: str | None = None, progress: bool = True,
              retry_failed: bool = False, allow_mixed: bool = False, write_timeout: float = WRITE_TIMEOUT,
              worker_timeout: float = WORKER_TIMEOUT, checkpoints=None, keep_checkpoints: bool = False,
              max_cells: int = MAX_CELLS) -> SweepSummary:
    """Compute the cells of a named experiment that ``db_path`` lacks, storing each as it finishes.

    Parameters
    ----------
    experiment_name : str
        A registered experiment (unknown names raise ``ValueError`` listing
        the valid ones).
    db_path : str or os.PathLike
        The results file (created if missing; a file that is not a results
        file raises ``ValueError`` and is left untouched).
    quick : bool
        Sweep the grid's ``[quick]`` table (about a minute) instead of ``[full]``.
    grid : str or os.PathLike, optional
        A TOML grid file to sweep instead of the experiment's own
        (``mhalearn/experiments/grids/NAME.toml``); see ``docs/grids.rst``.
    workers : int, optional
        Local worker processes (default: the number of CPU cores).  Capped
        at the cores and at the pending cells, with a :class:`SweepWarning`
        when that lowers the number asked for.  Ignored by the Dask backend.
    backend : {"local", "dask"}
        Where cells run: local worker processes, or the Dask cluster whose
        scheduler listens at ``scheduler``.  Both store the same rows.
    scheduler : str, optional
        Address of the Dask scheduler (``backend="dask"`` only).
    progress : bool
        Show progress with elapsed time and ETA on stderr: a bar on a
        terminal, a line at most every 30 s and at the end on any other
        stream (a log, CI, SLURM).
    retry_failed : bool
        Recompute cells stored as failures (their rows are replaced).
    allow_mixed : bool
        Add rows to an experiment whose stored rows came from other code
        (with a warning) instead of refusing.
    write_timeout : float
        Seconds to retry writing a row (disk full, file locked) before stopping.
    worker_timeout : float
        Seconds a Dask sweep waits with no worker before stopping.
    checkpoints : str or os.PathLike, optional
        A directory where each running cell of an experiment that keeps
        checkpoints (``sculpt-vs-m``) saves its long phases as they end, in a
        subdirectory named by the cell; a cell interrupted mid-way resumes
        after them on the next sweep, and its subdirectory is removed once
        its row is stored.  With the Dask backend it must be a path the
        workers can write.
    keep_checkpoints : bool
        Keep a stored cell's checkpoint instead of removing it, so that its
        phases can be read again (a diagnostic resuming them gets the cell's
        results without computing them).  Needs ``checkpoints``.
    max_cells : int
        The most cells the grid may have (:data:`~mhalearn.experiments.registry.MAX_CELLS`
        by default), counted before the grid is expanded.

    Returns
    -------
    SweepSummary
        Counts of stored, computed and failed cells.

    Raises
    ------
    ValueError
        Bad arguments, a grid with bad values (every one named in one
        message) or more than ``max_cells`` cells, a file that is not a results file, a read-only or
        locked file, a second coordinator, rows of other code, an
        unreachable scheduler: all before any cell is computed.
    RuntimeError
        The sweep could not go on (file unwritable for ``write_timeout``,
        a worker died, no Dask worker for ``worker_timeout``); the rows
        already written are kept and the same call resumes.

    Notes
    -----
    Local workers are started with the ``spawn`` method (``fork`` is unsafe
    once Numba's thread pool runs), so a script calling this function must
    guard its entry point with ``if __name__ == "__main__":``.  Ctrl-C stops
    the running cells at once; finished rows stay stored.
    """
    start = time.perf_counter()
    check_choice(backend, "backend", BACKENDS)
    if backend == "local" and scheduler is not None:
        raise ValueError("scheduler: only the dask backend takes a scheduler address (use --backend dask)")
    if backend == "dask" and not scheduler:
        raise ValueError("scheduler: the dask backend needs a scheduler address (e.g. tcp://127.0.0.1:8786)")
    if workers is not None:
        workers = check_positive_int(workers, "workers")
    write_timeout = check_real(write_timeout, "write_timeout", low=0.0)
    worker_timeout = check_real(worker_timeout, "worker_timeout", low=0.0)
    max_cells = check_positive_int(max_cells, "max_cells")
    if not isinstance(keep_checkpoints, bool):
        raise ValueError(f"keep_checkpoints: expected True or False, received {keep_checkpoints!r}")
    if keep_checkpoints and checkpoints is None:
        raise ValueError("keep_checkpoints: there are no checkpoints to keep; give a checkpoints directory")
    experiment = get_experiment(experiment_name)  # unknown names fail before the store is touched
    if checkpoints is not None:
        if not experiment.checkpoints:
            keeping = ", ".join(name for name, other in load_experiments().items() if other.checkpoints)
            raise ValueError(f"checkpoints: experiment {experiment_name!r} keeps no checkpoints (its cells have no "
                             f"long phases to keep; those that do: {keeping})")
        checkpoints = check_output_directory(checkpoints, "checkpoints")
    chosen_grid = experiment.grid(quick, grid)
    cells = grid_cells(experiment_name, chosen_grid, max_cells)
    if backend == "dask":
        check_scheduler_address(scheduler)
    current = code_id()
    summary = SweepSummary(experiment_name, len(cells), 0, 0, 0, 0.0, code_id=current)
    with WriterLock(db_path, purpose=f"sweep {experiment_name}"), \
            ResultStore(db_path, timeout=min(write_timeout, 5.0)) as store:
        todo = pending_cells(experiment_name, store, cells, retry_failed=retry_failed)
        summary.skipped = len(cells) - len(todo)
        if todo:
            check_code_versions(store, experiment_name, current, allow_mixed=allow_mixed)
        try:
            store.record_grid(chosen_grid, current)
        except sqlite3.OperationalError as error:
            raise ValueError(f"db: cannot write to {str(db_path)!r}: "
                             f"{describe_write_error(error, min(write_timeout, 5.0))}; nothing was computed") from None
        if todo:
            kept = [cell_checkpoint(checkpoints, experiment_name, cell) for cell in todo]
            if backend == "local":
                summary.workers = _worker_count(workers, len(todo))
                outcomes = run_local(experiment.run_cell, todo, summary.workers, kept)
            else:
                outcomes = run_dask(experiment.run_cell, todo, scheduler, worker_timeout, kept)
            _collect(outcomes, store, summary, replace=retry_failed, allow_mixed=allow_mixed,
                     write_timeout=write_timeout, progress=progress,
                     removed_checkpoints=None if keep_checkpoints else checkpoints)
    summary.seconds = time.perf_counter() - start
    return summary


def _worker_count(requested: int | None, pending: int) -> int:
    """Worker processes for ``pending`` cells: the request, capped at the cores and the cells."""
    cores = available_cores()
    count = min(requested or cores, cores, pending)
    if requested is not None and count < requested:
        warnings.warn(f"workers: using {count} worker processes instead of {requested} "
                      f"({pending} cells to compute, {cores} cores: more processes would only share them)",
                      SweepWarning, stacklevel=3)
    return count


def _collect(outcomes, store: ResultStore, summary: SweepSummary, *, replace: bool, allow_mixed: bool,
             write_timeout: float, progress: bool, removed_checkpoints=None) -> None:
    """Store outcomes as they arrive, under a progress bar; stop cleanly when the file stays unwritable.

    A stored cell's checkpoint under ``removed_checkpoints`` (None: none) is removed: its row is what a
    resumed sweep reads.
    """
    bar = progress_bar(summary.total, initial=summary.skipped, desc=summary.experiment, unit="cell",
                       enabled=progress)
    try:
        for outcome in outcomes:
            worker_code = code_id(outcome.provenance)
            if worker_code != summary.code_id and not allow_mixed:
                raise RuntimeError(
                    f"a worker on {outcome.host} runs other code ({describe(outcome.provenance)}) than this "
                    f"coordinator ({summary.code_id}); its rows would mix code versions. Update the workers, or "
                    "pass --allow-mixed; the rows written so far are kept")
            try:
                _store_outcome(store, summary.experiment, outcome, replace=replace, write_timeout=write_timeout)
            except _StoreUnavailable as error:
                raise RuntimeError(
                    f"could not store results in {str(store.path)!r}: {error}; the sweep stopped after storing "
                    f"{summary.computed} cells (every row written is kept). Fix that and run the same command "
                    "to resume") from None
            summary.computed += 1
            if removed_checkpoints is not None:
                shutil.rmtree(cell_checkpoint(removed_checkpoints, summary.experiment, outcome.cell),
                              ignore_errors=True)
            if outcome.status == STATUS_FAILED:
                summary.failed += 1
                if len(summary.errors) < 3:
                    summary.errors.append(f"cell {outcome.cell}: {outcome.error}")
            bar.set_postfix(failed=summary.failed, refresh=False)
            bar.update(1)
    finally:
        bar.close()
        outcomes.close()
