"""The shared Numba pieces of every kernel in mhalearn ([design: kernels]).

What the attention layer's kernels (:mod:`mhalearn.attention.kernels`), the
sparse-variables bit attention (:mod:`mhalearn.sparse_variables.kernels`),
the random-feature attention (:mod:`mhalearn.random_features.kernels`) and the
sculpting learner's decoder and candidate scorer
(:mod:`mhalearn.learners.chen_li.decoder`, :mod:`mhalearn.learners.chen_li.phase5_net`) have in common:

* :data:`FASTMATH`, the floating-point contract every kernel is compiled with;
* (beside it, in :mod:`mhalearn._exp`: ``exp_nonpositive``, a branch-free
  exp for softmax logits, which vectorises where libm's exp does not);
* the small dense products :func:`mm`, :func:`mm_t` (and their inlined body
  ``mm_body``) and ``transpose_into``, for the k×d, d×d and k×k
  matrices of one sequence;
* the parallel scheme: a batch is cut into a fixed number of chunks that
  workers claim from an atomic counter (``next_chunk``), and ONE
  dispatcher, :data:`DISPATCH`, runs every parallel kernel either on the
  calling thread or on an explicit number of threads, whichever it
  measures to be faster.  Both paths compute the same chunks in the same
  order, so results do not depend on the path nor on the thread count;
  :func:`dispatch_mode` forces a path and :func:`kernel_threads` sets the
  thread count for the body of a ``with`` block.

All kernels take C-contiguous float64 arrays and are compiled with ``cache=True``.

Compile time is most of a first run after an install (``mhalearn demo``),
so each kernel is compiled once: the pool runs the same
compiled worker as the calling thread (:func:`thread_driver`), and the
helpers called from several kernels with constant and variable offsets
(:func:`mm`, :func:`mm_t`) have one explicit signature rather than one
specialisation per pattern of literal arguments.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import numba
import numpy as np
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._scoped import ScopedSetting

# Contraction lets LLVM fuse multiply-adds.  Reassociation is deliberately
# off: it would undo the rounding trick in ``exp_nonpositive`` (mhalearn/_exp.py) and the
# Cody–Waite split of ln 2.  Loops are written so that the inner loop is an
# axpy over a contiguous axis, which vectorises without reassociation.
#: The floating-point contract every kernel is compiled with.
FASTMATH = {"contract", "arcp", "nsz"}

# Entries of the per-block intermediates that batched kernels may hold at
# once (bounds their memory for large n).
BLOCK_ENTRIES = 1 << 22


# --------------------------------------------------------------------------
# Small dense products
# --------------------------------------------------------------------------
# Everything below works one sequence at a time on k×d, d×d and k×k matrices
# (k, d ~ 16) held in per-thread scratch, so each product is a few thousand
# multiply-adds out of L1.  BLAS is no help at that size (and its threads
# would fight Numba's for the cores); what matters is that the innermost
# loop is a long contiguous axpy that LLVM vectorises, and that each load and
# store of the output carries several multiply-adds.  Operands are addressed
# through explicit column offsets so that all heads can share one row-major
# buffer without taking non-contiguous slices.

@njit(inline="always", cache=True)
def _alpha(A, offset, transposed, r, c):
    if transposed:
        return A[c, offset + r]
    return A[r, offset + c]


@njit(inline="always", fastmath=FASTMATH, cache=True)
def mm_body(A, a0, a_t, B, b0, C, c0, rows, inner, cols):
    """C[r, c0+j] += Σ_c α(r, c) · B[c, b0+j] for r < rows, c < inner, j < cols.

    α(r, c) is A[r, a0+c], or A[c, a0+r] when ``a_t``.  Two rows of C and
    four terms of the sum per pass over j: the j loop is a contiguous axpy
    that vectorises, and each load/store of C carries four multiply-adds.
    The column indices are unsigned: a signed b0 + j would get Numba's
    negative-index wrap-around, which stops the vectorisation.
    """
    b0 = np.uint64(b0)
    c0 = np.uint64(c0)
    cols = np.uint64(cols)
    rows2 = rows - rows % 2
    inner4 = inner - inner % 4
    for r in range(0, rows2, 2):
        for c in range(0, inner4, 4):
            p0 = _alpha(A, a0, a_t, r, c)
            p1 = _alpha(A, a0, a_t, r, c + 1)
            p2 = _alpha(A, a0, a_t, r, c + 2)
            p3 = _alpha(A, a0, a_t, r, c + 3)
            q0 = _alpha(A, a0, a_t, r + 1, c)
            q1 = _alpha(A, a0, a_t, r + 1, c + 1)
            q2 = _alpha(A, a0, a_t, r + 1, c + 2)
            q3 = _alpha(A, a0, a_t, r + 1, c + 3)
            for j in range(cols):
                x0 = B[c, b0 + j]
                x1 = B[c + 1, b0 + j]
                x2 = B[c + 2, b0 + j]
                x3 = B[c + 3, b0 + j]
                C[r, c0 + j] = (((C[r, c0 + j] + p0 * x0) + p1 * x1) + p2 * x2) + p3 * x3
                C[r + 1, c0 + j] = (((C[r + 1, c0 + j] + q0 * x0) + q1 * x1) + q2 * x2) + q3 * x3
        for c in range(inner4, inner):
            p = _alpha(A, a0, a_t, r, c)
            q = _alpha(A, a0, a_t, r + 1, c)
            for j in range(cols):
                x = B[c, b0 + j]
                C[r, c0 + j] += p * x
                C[r + 1, c0 + j] += q * x
    for r in range(rows2, rows):
        for c in range(0, inner4, 4):
            p0 = _alpha(A, a0, a_t, r, c)
            p1 = _alpha(A, a0, a_t, r, c + 1)
            p2 = _alpha(A, a0, a_t, r, c + 2)
            p3 = _alpha(A, a0, a_t, r, c + 3)
            for j in range(cols):
                C[r, c0 + j] = ((((C[r, c0 + j] + p0 * B[c, b0 + j]) + p1 * B[c + 1, b0 + j])
                                 + p2 * B[c + 2, b0 + j]) + p3 * B[c + 3, b0 + j])
        for c in range(inner4, inner):
            p = _alpha(A, a0, a_t, r, c)
            for j in range(cols):
                C[r, c0 + j] += p * B[c, b0 + j]


def slp_vectorised(signature, **options):
    """``njit(signature, **options)``, compiled (or loaded from the cache) at once with LLVM's SLP vectoriser on.

    Numba runs LLVM's loop vectoriser only; its SLP vectoriser, which packs
    independent scalar operations (the lanes of a tuple of running sums) into
    vector instructions, is off unless ``NUMBA_SLP_VECTORIZE`` is set.  A
    kernel that keeps its sums in registers needs it: compiled here with
    an explicit signature, eagerly, so that the setting holds while it is
    compiled and no later call compiles another specialisation without it.
    SLP packs the lanes' operations unchanged, so the bits are those of the
    scalar code.
    """
    def decorate(function):
        previous = numba.config.SLP_VECTORIZE
        numba.config.SLP_VECTORIZE = 1
        try:
            return njit(signature, **options)(function)
        finally:
            numba.config.SLP_VECTORIZE = previous
    return decorate


# Called entry points for the less hot call sites: Numba inlines
# ``inline="always"`` functions at every call site, which costs compile time;
# the forward path (also used by the other kernels) inlines ``mm_body``.
# Their signature is explicit: without it a call with a constant offset
# (``mm(x, 0, …)``) types the 0 as a literal and compiles a specialisation of
# its own, ~1.7 s each, six of them for the loss and gradient kernel.
_MATRIX = types.float64[:, ::1]
_MM_SIGNATURE = types.void(_MATRIX, types.int64, _MATRIX, types.int64, _MATRIX, types.int64,
                           types.int64, types.int64, types.int64)


@njit(_MM_SIGNATURE, fastmath=FASTMATH, cache=True)
def mm(A, a0, B, b0, C, c0, rows, inner, cols):
    """C[r, c0+j] += Σ_c A[r, a0+c] · B[c, b0+j] for r < rows, c < inner, j < cols."""
    mm_body(A, a0, False, B, b0, C, c0, rows, inner, cols)


@njit(_MM_SIGNATURE, fastmath=FASTMATH, cache=True)
def mm_t(A, a0, B, b0, C, c0, rows, inner, cols):
    """C[r, c0+j] += Σ_c A[c, a0+r] · B[c, b0+j]: as :func:`mm` with A transposed."""
    mm_body(A, a0, True, B, b0, C, c0, rows, inner, cols)


@njit(inline="always", fastmath=FASTMATH, cache=True)
def transpose_into(x, out):
    rows, cols = x.shape
    for r in range(rows):
        for c in range(cols):
            out[c, r] = x[r, c]


# --------------------------------------------------------------------------
# Chunks and the dispatcher
# --------------------------------------------------------------------------
# The batch is cut into ``chunks`` contiguous ranges of samples.  Each worker
# allocates its scratch once, then takes the next unprocessed chunk from a
# shared atomic counter until none is left: threads that the OS schedules
# less (the machine is shared) simply process fewer chunks.  Per-chunk
# results (losses, gradients) are summed afterwards in chunk order, so the
# result does not depend on which thread ran which chunk.  Called directly
# with a fresh counter, a worker runs every chunk on the calling thread.
# Each parallel kernel is such a worker, compiled with ``nogil=True``, plus
# its driver ``thread_driver(worker)``, which runs the worker on the calling
# thread and on threads − 1 Python threads at once: they release the GIL, so
# they run side by side.  The pool path thus runs the very function the
# calling-thread path runs.  (A ``prange(threads)`` driver compiled with
# ``parallel=True`` also works with :data:`DISPATCH`, but Numba links the
# worker's code into it and optimises and compiles it again, twice: 3.5 to
# 9.6 s per kernel on a first run, against nothing for a thread driver.)
# :data:`DISPATCH` chooses between the two paths for every call.

@intrinsic
def next_chunk(typingctx, counter):
    """Atomically increment counter[0] (int64) and return its previous value."""
    if not (isinstance(counter, types.Array) and counter.ndim == 1
            and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        array = context.make_array(array_type)(context, builder, args[0])
        pointer = cgutils.get_item_pointer(context, builder, array_type, array,
                                           [context.get_constant(types.intp, 0)])
        return builder.atomic_rmw("add", pointer, context.get_constant(types.int64, 1), "monotonic")
    return types.int64(counter), codegen


# The batch is cut into this many chunks (fewer for small n), whatever the
# thread count: enough for load balancing, few enough that the per-chunk
# gradients stay small, and fixed so that results do not depend on the
# number of threads or on the serial/parallel choice.
CHUNKS = 32


class WorkerThreads:
    """The pool of :func:`thread_driver`: Python threads that run a nogil worker beside the calling thread.

    Threads start on first use and stay.  A forked child gets a pool of its
    own (the parent's threads do not exist in it).
    """

    def __init__(self):
        self._executor = None
        self._pid = None
        self._lock = threading.Lock()

    def _helpers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._executor is None or self._pid != os.getpid():
                self._executor = ThreadPoolExecutor(max_workers=max(1, numba.config.NUMBA_NUM_THREADS - 1),
                                                    thread_name_prefix="mhalearn-worker")
                self._pid = os.getpid()
            return self._executor

    def run(self, worker, threads: int, args: tuple) -> None:
        """Run ``worker(*args)`` on the calling thread and on ``threads − 1`` helpers; return when all are done."""
        helpers = self._helpers() if threads > 1 else None
        futures = [helpers.submit(worker, *args) for _ in range(threads - 1)]
        try:
            worker(*args)
        finally:
            wait(futures)
        for future in futures:
            future.result()  # raises a helper's exception


WORKER_THREADS = WorkerThreads()


def thread_driver(worker):
    """The pool path of a kernel for :meth:`Dispatcher.run`: ``worker`` on several threads at once.

    Parameters
    ----------
    worker : Numba function compiled with ``nogil=True``
        Claims chunks from the counter among its arguments until none is left.

    Returns
    -------
    callable
        ``driver(threads, *args)``, which returns when every thread is done.
    """
    if not worker.targetoptions.get("nogil"):
        raise ValueError(f"worker: expected a Numba function compiled with nogil=True (threads holding the GIL "
                         f"run one at a time), received {worker.py_func.__name__} without it")

    def driver(threads: int, *args) -> None:
        WORKER_THREADS.run(worker, threads, args)

    driver.__name__ = driver.__qualname__ = f"{worker.py_func.__name__}_on_threads"
    return driver


class Dispatcher:
    """Runs each call on the calling thread or on a pool of threads, whichever is faster.

    Starting and joining the pool costs ~10–50 µs on an idle machine, but
    when other jobs occupy every core the join waits until the OS schedules
    each worker: 10–25 ms per call on the shared 2-core machine this was
    tuned on, far more than a small batch takes on one thread.  So the
    dispatcher keeps running estimates, timed on the calls themselves, of
    each kernel's single-thread seconds per multiply-add and of the fixed
    cost of a parallel call, and uses the pool when
    ``cost + work·rate/threads < work·rate``.  While the pool looks slower it
    is re-tried at most every ``retry_seconds``, so the choice follows the
    machine's load.  :meth:`forced` forces a path for the body of a
    ``with`` block (tests, benchmarks; :func:`dispatch_mode` for
    :data:`DISPATCH`).  Either path computes the same chunks in the same
    order: the results are identical.
    """

    MODES = ("serial", "parallel")

    default_rate = 1.2e-10   # s per multiply-add on one core (measured: ~1e-10)
    min_parallel = 2e-4      # s: below this predicted serial time, never use the pool
    retry_seconds = 1.0
    smoothing = 0.3

    def __init__(self):
        self._mode = ScopedSetting(None)
        self.rates = {}
        self.pool_cost = 5e-5
        self.retry_at = 0.0

    @property
    def mode(self) -> str | None:
        """The forced path, ``"serial"`` or ``"parallel"``; None: the faster one, as measured."""
        return self._mode.get()

    def forced(self, mode: str | None):
        """Run every call on ``mode``'s path (None: the faster) while inside the ``with`` block.

        ``"parallel"`` runs on Numba's current thread count
        (:func:`kernel_threads`), the calling thread alone when that is 1.
        The mode is the process's: calls from every thread follow it.
        """
        if mode is not None and mode not in self.MODES:
            raise ValueError(f"mode: expected one of {self.MODES} or None, received {mode!r}")
        return self._mode.scoped(mode)

    def run(self, kernel, work, worker, parallel, *args):
        """Run ``worker(*args)`` on the calling thread or ``parallel(threads, *args)`` on the pool, and time it.

        ``kernel`` names the kernel (its rate estimate) and ``work`` is its
        multiply-add count for this call.  ``worker`` claims chunks from the
        counter among ``args`` (a :func:`new_counter`) until none is left;
        ``parallel`` is its driver (:func:`thread_driver`, or a
        ``prange(threads)`` function), which runs the same worker on exactly
        ``threads`` threads sharing that counter, ``threads`` being Numba's
        current thread count (``numba.set_num_threads``, ``NUMBA_NUM_THREADS``).
        """
        threads = numba.get_num_threads()
        rate = self.rates.get(kernel, self.default_rate)
        gain = rate * work * (1.0 - 1.0 / threads)
        mode = self._mode.get()
        if mode is not None or threads == 1:
            use_pool = mode == "parallel" and threads > 1
        elif rate * work < self.min_parallel:
            use_pool = False
        else:
            use_pool = self.pool_cost < gain or time.perf_counter() >= self.retry_at
        start = time.perf_counter()
        if use_pool:
            parallel(threads, *args)
        else:
            worker(*args)
        elapsed = time.perf_counter() - start
        if use_pool:
            cost = max(elapsed - rate * work / threads, 0.0)
            # Quick to believe a cheap pool (the machine got quiet), smoothed
            # when it is dearer (one unlucky call should not switch paths).
            self.pool_cost = min(cost, self.pool_cost + self.smoothing * (cost - self.pool_cost))
            if self.pool_cost >= gain:
                self.retry_at = start + elapsed + self.retry_seconds
        elif work > 0:
            # At most ×4 per call: a first call that compiles (or loads from
            # the cache) must not make the pool look worth it forever, as
            # serial calls, the only ones that measure the rate, would stop.
            measured = min(elapsed / work, 4.0 * rate)
            self.rates[kernel] = (measured if kernel not in self.rates
                                  else rate + self.smoothing * (measured - rate))


#: The one dispatcher every parallel kernel runs through.
DISPATCH = Dispatcher()


def dispatch_mode(mode: str | None):
    """Every parallel kernel on ``mode``'s path (``"serial"``, ``"parallel"``; None: the faster) inside a ``with``.

    The results are the same bits on either path; what changes is where the
    work runs, and so its time.  Use it with :func:`kernel_threads` to run
    the pool on a given number of threads::

        with dispatch_mode("parallel"), kernel_threads(2):
            forward(X, thetas, ws)
    """
    return DISPATCH.forced(mode)


def chunk_count(n: int, limit: int = CHUNKS) -> int:
    """How many chunks a batch of ``n`` items is cut into: ``limit``, fewer for small n, at least 1."""
    return max(1, min(n, limit))


def new_counter() -> np.ndarray:
    """A fresh chunk counter; a worker called directly with it runs every chunk on the calling thread."""
    return np.zeros(1, np.int64)


@contextlib.contextmanager
def kernel_threads(threads: int):
    """Numba's kernels on ``threads`` threads (the calling one and ``threads − 1`` of the pool) while inside.

    Numba keeps the count per thread, so this sets it for the calling thread
    only; ``threads`` is at most ``NUMBA_NUM_THREADS``.  The results do not
    depend on it (:data:`DISPATCH`), only the time.
    """
    limit = numba.config.NUMBA_NUM_THREADS
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or not 1 <= threads <= limit:
        raise ValueError(f"threads: expected an integer from 1 to NUMBA_NUM_THREADS = {limit}, received {threads!r}")
    previous = numba.get_num_threads()
    numba.set_num_threads(int(threads))
    try:
        yield
    finally:
        numba.set_num_threads(previous)


@contextlib.contextmanager
def one_thread():
    """Numba's kernels (for the calling thread) and BLAS on one thread while inside.

    A Dask worker runs as many tasks at once as it has threads, one per core
    it was given; a kernel that started a thread per core in each task would
    oversubscribe them.  The kernels' results do not depend on the thread
    count (:data:`mhalearn._numba.DISPATCH`), so this changes the time only.
    """
    with kernel_threads(1), _blas_controller().limit(limits=1, user_api="blas"):
        yield


_BLAS = {}


def _blas_controller():
    """threadpoolctl's controller of the process's thread pools, made once per process.

    Making one scans the loaded libraries (~10 ms, what ``threadpool_limits``
    pays on every call: twice a block in a pass over generated data); BLAS
    is loaded with NumPy, before any kernel runs, so one scan sees it.
    """
    controller = _BLAS.get(os.getpid())
    if controller is None:
        from threadpoolctl import ThreadpoolController

        controller = _BLAS[os.getpid()] = ThreadpoolController()
    return controller


# ------------------------------------------------------------ input checks

@njit(cache=True, nogil=True)
def all_finite(flat: np.ndarray) -> bool:
    """Whether every entry of the flat array is finite (:func:`mhalearn._validation.as_float_array`)."""
    # As all_plus_minus_one: one read, no temporary the size of the array (np.isfinite writes one).
    for start in range(0, flat.size, 4096):
        bad = 0
        for value in flat[start:start + 4096]:
            bad += not np.isfinite(value)
        if bad:
            return False
    return True


@njit(cache=True, nogil=True)
def all_plus_minus_one(flat: np.ndarray) -> bool:
    """Whether every entry of the flat array is +1 or -1 (:func:`mhalearn._validation.check_boolean`)."""
    # One read of the data and no temporary the size of X (np.abs(X) == 1 writes two); the count
    # over a stretch vectorises where a test per entry with an early return would not.
    for start in range(0, flat.size, 4096):
        bad = 0
        for value in flat[start:start + 4096]:
            bad += abs(value) != 1.0
        if bad:
            return False
    return True
