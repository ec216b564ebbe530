"""A process-wide setting that ``with`` blocks override for a while: the way in to mhalearn's global state.

mhalearn keeps a few settings for the whole process — the memory budget
(:func:`mhalearn.memory_budget`) and the kernels' dispatch path
(:func:`mhalearn._numba.dispatch_mode`) — because the code that reads them
sits many calls below whoever wants to choose them.  A :class:`ScopedSetting`
holds one: :meth:`~ScopedSetting.get` reads it, :meth:`~ScopedSetting.set`
sets it, and :meth:`~ScopedSetting.scoped` sets it for the body of a
``with`` block and puts back, on leaving, what was in force before.

Each block keeps its own entry on a stack guarded by a lock, and leaving
removes that entry whichever block entered last: blocks entered by two
threads and left out of order still end with the value set outside both.
While blocks are open, :meth:`~ScopedSetting.set` changes the innermost
block's value (its effect ends with that block).  The setting is the
process's, not the thread's: a value set in one thread is the one every
thread reads (Dask's worker threads, the kernels' helper threads).
"""

from __future__ import annotations

import contextlib
import threading


class ScopedSetting:
    """One process-wide value, set for good with :meth:`set` or for a ``with`` block with :meth:`scoped`.

    Parameters
    ----------
    value
        The value in force until something sets another.
    """

    def __init__(self, value):
        self._value = value
        self._blocks: list[list] = []  # [token, value] of each open block, innermost last
        self._lock = threading.Lock()

    def get(self):
        """The value in force: the innermost open block's, else the one last set."""
        with self._lock:
            return self._blocks[-1][1] if self._blocks else self._value

    def set(self, value) -> None:
        """Set the value: for good, or, inside a block, until that block ends."""
        with self._lock:
            if self._blocks:
                self._blocks[-1][1] = value
            else:
                self._value = value

    @contextlib.contextmanager
    def scoped(self, value):
        """Hold ``value`` while inside the ``with`` block; on leaving, what was in force before it."""
        token = object()
        with self._lock:
            self._blocks.append([token, value])
        try:
            yield value
        finally:
            with self._lock:
                self._blocks[:] = [block for block in self._blocks if block[0] is not token]
