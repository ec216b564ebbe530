"""Where a sweep's cells run: local worker processes or a Dask cluster (:func:`~mhalearn.experiments.runner.run_sweep`).

:func:`execute_cell` runs one cell in a worker and captures its metrics or
its error, and the worker's provenance, as a :class:`CellOutcome`;
:func:`run_local` and :func:`run_dask` yield the outcomes as the workers
finish them.  Workers share the cores rather than oversubscribe them
(:func:`limit_threads`); a local worker exits when the coordinating process
disappears, and a Dask sweep stops when the cluster has had no worker for
its timeout.
"""

from __future__ import annotations

import contextlib
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
from urllib.parse import urlsplit

from ..provenance import code_provenance
from .store import STATUS_FAILED, STATUS_OK


@dataclass
class CellOutcome:
    """What a worker sends back for one cell."""

    cell: dict
    status: str
    metrics: dict
    error: str | None
    seconds: float
    host: str
    provenance: dict = field(default_factory=dict)


def execute_cell(run_cell: Callable[[dict], dict], cell: dict, threads: int | None = None,
                 checkpoint_dir: str | None = None) -> CellOutcome:
    """Run one cell in a worker and capture its metrics or its error, and the worker's provenance.

    Module-level so it pickles to worker processes and Dask workers, as does
    ``run_cell`` (the experiment's module-level function, pickled by
    reference).  With ``threads``, the cell's Numba and BLAS thread pools are
    limited to that many threads first (Dask runs one cell per worker
    thread, so it passes 1).  With ``checkpoint_dir`` (an experiment whose
    ``checkpoints`` is True) the cell keeps its long phases there.
    """
    if threads is not None:
        limit_threads(threads)
    provenance = code_provenance()
    start = time.perf_counter()
    host = socket.gethostname()
    try:
        keep = {} if checkpoint_dir is None else {"checkpoint_dir": checkpoint_dir}
        metrics = run_cell(dict(cell), **keep)
        return CellOutcome(cell, STATUS_OK, dict(metrics), None, time.perf_counter() - start, host, provenance)
    except Exception as error:  # a failing cell is recorded, not fatal to the sweep
        message = f"{type(error).__name__}: {error}\n{traceback.format_exc()}"
        return CellOutcome(cell, STATUS_FAILED, {}, message, time.perf_counter() - start, host, provenance)


@contextlib.contextmanager
def cluster_of_task():
    """Inside a task of a Dask cluster: a client of that cluster, so that the task's passes spread over its
    workers; elsewhere None.

    The task leaves its worker's thread pool while the context is open
    (``distributed.worker_client``), so a cluster of single-threaded workers
    runs the task's blocks on every worker, its own included; ``dask.compute``
    inside the context uses that client.
    """
    try:
        from distributed import get_worker, worker_client
    except ImportError:  # pragma: no cover - dask[distributed] is a dependency
        yield None
        return
    try:
        get_worker()
    except ValueError:  # not in a Dask worker
        yield None
        return
    with worker_client() as client:
        yield client


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
    code_provenance()  # hash the sources the worker imported now, not when a cell ends

    def exit_when_orphaned() -> None:
        while os.getppid() == coordinator:
            time.sleep(0.5)
        os._exit(1)

    threading.Thread(target=exit_when_orphaned, daemon=True, name="mhalearn-orphan-watch").start()


def available_cores() -> int:
    """Cores this process may run on (its CPU affinity where the OS tells it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


def run_local(run_cell: Callable[[dict], dict], cells: list[dict], workers: int, checkpoints: list):
    """Yield outcomes as local worker processes finish them."""
    threads = max(1, available_cores() // workers)
    context = multiprocessing.get_context("spawn")  # fork is unsafe with Numba's thread pools
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=_init_worker,
                               initargs=(threads, os.getpid()))
    finished = False
    try:
        futures = {pool.submit(execute_cell, run_cell, cell, None, checkpoint)
                   for cell, checkpoint in zip(cells, checkpoints)}
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


#: Address schemes of Dask's communication layer besides tcp:// and tls://, which are checked here.
DASK_SCHEMES = ("inproc", "ucx", "ws", "wss")


def check_scheduler_address(scheduler: str, timeout: float = 5.0) -> None:
    """Fail fast (``ValueError``) on a malformed Dask scheduler address or a TCP port nobody listens on."""
    if not isinstance(scheduler, str) or not scheduler:
        raise ValueError(f"scheduler: expected an address such as tcp://127.0.0.1:8786, received {scheduler!r}")
    parts = urlsplit(scheduler if "://" in scheduler else f"tcp://{scheduler}")
    if parts.scheme not in ("tcp", "tls"):
        if parts.scheme not in DASK_SCHEMES:
            raise ValueError(f"scheduler: expected an address such as tcp://127.0.0.1:8786 (schemes "
                             f"{', '.join(f'{scheme}://' for scheme in ('tcp', 'tls') + DASK_SCHEMES)}), received "
                             f"{scheduler!r}")
        return  # inproc://, ucx://…: leave them to Dask
    try:
        port = parts.port
    except ValueError:
        port = -1
    if not parts.hostname or port is None or not 0 < port < 65536:
        raise ValueError(f"scheduler: expected an address such as tcp://127.0.0.1:8786 with a port in 1–65535, "
                         f"received {scheduler!r}")
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout):
            pass
    except OSError as error:
        raise ValueError(f"scheduler: no Dask scheduler answers at {scheduler!r} ({error}); start one "
                         "(`dask scheduler`) or check the address") from None


def run_dask(run_cell: Callable[[dict], dict], cells: list[dict], scheduler: str, worker_timeout: float,
              checkpoints: list):
    """Yield outcomes as the Dask cluster at ``scheduler`` finishes them.

    Stops with ``RuntimeError`` when the cluster has had no worker for
    ``worker_timeout`` seconds (Dask itself would wait for one forever).
    """
    try:
        from dask.distributed import Client
        from dask.distributed import wait as dask_wait
    except ImportError as error:  # pragma: no cover - dask[distributed] is a dependency
        raise ValueError(f"backend: 'dask' needs dask.distributed installed ({error})") from None
    try:
        client = Client(scheduler, timeout="20s")
    except (OSError, TimeoutError) as error:
        raise ValueError(f"scheduler: could not connect to a Dask scheduler at {scheduler!r}: {error}") from None
    futures = []
    try:
        futures = [client.submit(execute_cell, run_cell, cell, 1, checkpoint, pure=False)
                   for cell, checkpoint in zip(cells, checkpoints)]
        pending = set(futures)
        workerless_since = None
        while pending:
            try:
                done, pending = dask_wait(pending, timeout=1.0, return_when="FIRST_COMPLETED")
            except TimeoutError:
                done = set()
            for future in done:
                try:
                    outcome = future.result()
                except Exception as error:  # the task itself never raises: execute_cell catches cell errors
                    raise RuntimeError(f"the Dask cluster could not run a cell ({type(error).__name__}: {error}); "
                                       "the rows written so far are kept, run the sweep again to resume") from None
                yield outcome
            if done or not pending:
                workerless_since = None
                continue
            if client.nthreads():
                workerless_since = None
            elif workerless_since is None:
                workerless_since = time.monotonic()
            elif time.monotonic() - workerless_since > worker_timeout:
                raise RuntimeError(f"no workers: the Dask scheduler at {scheduler!r} has had no worker for "
                                   f"{worker_timeout:g} s with {len(pending)} cells left; the rows written so far "
                                   "are kept, start workers and run the sweep again to resume")
    finally:
        client.cancel([future for future in futures if not future.done()])
        client.close()


__all__ = ["DASK_SCHEMES", "CellOutcome", "available_cores", "check_scheduler_address", "cluster_of_task",
           "execute_cell", "limit_threads", "run_dask", "run_local"]
