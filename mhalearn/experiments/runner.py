"""Run a named experiment's grid, resumably, on local processes or a Dask cluster (DESIGN.md §5).

:func:`run_sweep` asks the results store which cells of the experiment are
already stored, submits only the others, and writes each result from the
coordinating process as soon as it arrives (one committed transaction per
row).  Killing a sweep (even with ``kill -9``) therefore loses only the cells
that were still running; starting it again computes exactly the missing
cells, and a finished sweep started again computes nothing.

Failures: a cell whose ``run_cell`` raises is stored as a row with status
``"failed"`` and the traceback, and the sweep goes on.  Cells are
deterministic functions of their parameters, so a failed cell counts as
finished and is not recomputed on resume unless ``retry_failed=True``
(``mhalearn sweep --retry-failed``).  The summary returned (and printed by
the CLI) counts the failures and shows the first error.  A worker process
that dies (e.g. out of memory) is not a cell failure: the sweep stops with a
``RuntimeError`` saying so, and the rows already written are kept.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import threading
import time
import traceback
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Callable

from tqdm.auto import tqdm

from .._validation import check_choice, check_positive_int
from .registry import get_experiment
from .store import STATUS_FAILED, STATUS_OK, ResultStore, cell_key

BACKENDS = ("local", "dask")


@dataclass
class CellOutcome:
    """What a worker sends back for one cell."""

    cell: dict
    status: str
    metrics: dict
    error: str | None
    seconds: float
    host: str


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
    """

    experiment: str
    total: int
    skipped: int
    computed: int
    failed: int
    seconds: float
    errors: list = field(default_factory=list)

    def __str__(self) -> str:
        text = (f"{self.experiment}: {self.total} cells, {self.skipped} already stored, "
                f"{self.computed} computed ({self.failed} failed) in {self.seconds:.1f} s")
        if self.errors:
            text += "\nfirst failure:\n" + self.errors[0]
        return text


def execute_cell(run_cell: Callable[[dict], dict], cell: dict, threads: int | None = None) -> CellOutcome:
    """Run one cell in a worker and capture its metrics or its error.

    Module-level so it pickles to worker processes and Dask workers, as does
    ``run_cell`` (the experiment's module-level function, pickled by
    reference).  With ``threads``, the cell's Numba and BLAS thread pools are
    limited to that many threads first (Dask runs one cell per worker
    thread, so it passes 1).
    """
    if threads is not None:
        limit_threads(threads)
    start = time.perf_counter()
    host = socket.gethostname()
    try:
        metrics = run_cell(dict(cell))
        return CellOutcome(cell, STATUS_OK, dict(metrics), None, time.perf_counter() - start, host)
    except Exception as error:  # a failing cell is recorded, not fatal to the sweep
        message = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        return CellOutcome(cell, STATUS_FAILED, {}, message, time.perf_counter() - start, host)


def limit_threads(threads: int) -> None:
    """Limit Numba (for the calling thread) and BLAS/OpenMP (process-wide) to ``threads`` threads.

    Cells run side by side, one per core: letting each also start a thread
    per core oversubscribes the machine, which slows the small kernels of
    the learners by an order of magnitude.
    """
    try:
        import numba

        numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    except ImportError:  # pragma: no cover - numba is a dependency
        pass
    try:
        from threadpoolctl import threadpool_limits

        threadpool_limits(threads)
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        pass


def _init_worker(threads: int, coordinator: int) -> None:
    """Initializer of local worker processes.

    Shares the cores instead of oversubscribing them (``threads`` Numba and
    BLAS threads per worker), and exits the worker if the coordinating
    process disappears (e.g. ``kill -9``), so no orphan keeps computing.
    """
    limit_threads(threads)

    def exit_when_orphaned() -> None:
        while os.getppid() == coordinator:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=exit_when_orphaned, daemon=True, name="mhalearn-orphan-watch").start()


def pending_cells(experiment_name: str, store: ResultStore, *, quick: bool = False,
                  retry_failed: bool = False) -> tuple[list[dict], int]:
    """Cells of the experiment's grid that the store lacks, and the grid size.

    Raises ``ValueError`` when the grid repeats a cell.
    """
    experiment = get_experiment(experiment_name)
    cells = experiment.cells(quick)
    keys = [cell_key(experiment_name, cell) for cell in cells]
    if len(set(keys)) != len(keys):
        raise ValueError(f"experiment {experiment_name!r}: its grid repeats cells; every cell must be unique")
    stored = store.finished_keys(experiment_name, include_failed=not retry_failed)
    return [cell for key, cell in zip(keys, cells) if key not in stored], len(cells)


def _run_local(run_cell: Callable[[dict], dict], cells: list[dict], workers: int):
    """Yield outcomes as local worker processes finish them."""
    threads = max(1, (os.cpu_count() or 1) // workers)
    context = multiprocessing.get_context("spawn")  # fork is unsafe with Numba's thread pools
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                               initargs=(threads, os.getpid()))
    finished = False
    try:
        futures = {pool.submit(execute_cell, run_cell, cell) for cell in cells}
        while futures:
            done, futures = wait(futures, return_when=FIRST_COMPLETED)
            for future in done:
                try:
                    outcome = future.result()
                except BrokenProcessPool:
                    raise RuntimeError("a worker process died (out of memory or killed); the rows written so "
                                       "far are kept, run the sweep again to resume") from None
                yield outcome
        finished = True
    finally:
        if not finished:
            # Interrupted (Ctrl-C, an error while storing): stop the running cells too, rather than
            # waiting for them.  ProcessPoolExecutor has no public way to do so before Python 3.14.
            for process in list(getattr(pool, "_processes", {}).values()):
                process.terminate()
        pool.shutdown(wait=finished, cancel_futures=True)


def _run_dask(run_cell: Callable[[dict], dict], cells: list[dict], scheduler: str):
    """Yield outcomes as the Dask cluster at ``scheduler`` finishes them."""
    try:
        from dask.distributed import Client, as_completed
    except ImportError as error:  # pragma: no cover - dask[distributed] is a dependency
        raise ValueError(f"backend: 'dask' needs dask.distributed installed ({error})") from None
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as error:
        raise ValueError(f"scheduler: could not connect to a Dask scheduler at {scheduler!r}: {error}") from None
    try:
        futures = [client.submit(execute_cell, run_cell, cell, 1, pure=False) for cell in cells]
        try:
            for future in as_completed(futures):
                try:
                    outcome = future.result()
                except Exception as error:  # the task itself never raises: execute_cell catches cell errors
                    raise RuntimeError(f"the Dask cluster could not run a cell ({type(error).__name__}: {error}); "
                                       "the rows written so far are kept, run the sweep again to resume") from None
                yield outcome
        finally:
            client.cancel([future for future in futures if not future.done()])
    finally:
        client.close()


def run_sweep(experiment_name: str, db_path, *, quick: bool = False, workers: int | None = None,
              backend: str = "local", scheduler: str | None = None, progress: bool = True,
              retry_failed: bool = False) -> SweepSummary:
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
        Run the experiment's small grid (about a minute) instead of the full one.
    workers : int, optional
        Local worker processes (default: the number of CPU cores, at most
        the number of pending cells).  Ignored by the Dask backend.
    backend : {"local", "dask"}
        Where cells run: local worker processes, or the Dask cluster whose
        scheduler listens at ``scheduler``.  Both store the same rows.
    scheduler : str, optional
        Address of the Dask scheduler (``backend="dask"`` only).
    progress : bool
        Show a progress bar with elapsed time and ETA.
    retry_failed : bool
        Recompute cells stored as failures (their rows are replaced).

    Returns
    -------
    SweepSummary
        Counts of stored, computed and failed cells.

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
    run_cell = get_experiment(experiment_name).run_cell  # unknown names fail before the store is touched
    with ResultStore(db_path) as store:
        cells, total = pending_cells(experiment_name, store, quick=quick, retry_failed=retry_failed)
        summary = SweepSummary(experiment_name, total, total - len(cells), 0, 0, 0.0)
        if cells:
            if backend == "local":
                workers = min(workers or os.cpu_count() or 1, len(cells))
                outcomes = _run_local(run_cell, cells, workers)
            else:
                outcomes = _run_dask(run_cell, cells, scheduler)
            bar = tqdm(total=total, initial=summary.skipped, desc=experiment_name, unit="cell",
                       disable=not progress, dynamic_ncols=True)
            try:
                for outcome in outcomes:
                    store.record(experiment_name, outcome.cell, outcome.metrics, status=outcome.status,
                                 error=outcome.error, seconds=outcome.seconds, host=outcome.host,
                                 replace=retry_failed)
                    summary.computed += 1
                    if outcome.status == STATUS_FAILED:
                        summary.failed += 1
                        if len(summary.errors) < 3:
                            summary.errors.append(f"cell {outcome.cell}: {outcome.error}")
                    bar.set_postfix(failed=summary.failed, refresh=False)
                    bar.update(1)
            finally:
                bar.close()
                outcomes.close()
    summary.seconds = time.perf_counter() - start
    return summary
