"""Scratch arrays a pass lends to its block function, one set per block at a time.

A block function whose temporaries are as large as its block (phase 1's
mean tokens and label sums, 12.6 MB a block at k = 4, d = 12) would
allocate them anew for every block: fresh pages, which the kernel faults
in and zeroes before the function writes them.  NumPy asks for huge pages
on every allocation of 4 MiB or more, and where the kernel then compacts
memory to find them (``transparent_hugepage/defrag`` = ``madvise``, a
common default) a fault stalls (numpy/numpy#31590).  On the Zen 4 VM of
``runs/generated-pass/README.md`` phase 1's block summary took 16–19 ms a
block on new arrays and 8–9 ms on lent ones, the same bits.

So a pass makes a :class:`ScratchArrays`, hands it to ``map_blocks`` as
an argument, and drops it when it ends, as a generated stream's pass lends
the blocks themselves (``BlockBuffers``, [decision: lent-block-arrays]): it
holds as many sets as blocks run at once.  A block function must return no
view of a lent array.
"""

from __future__ import annotations

import mmap
import threading
from contextlib import contextmanager

import numpy as np


def kept_array(shape: tuple[int, ...]) -> np.ndarray:
    """A new float64 array of ``shape`` on small pages: memory kept for long (a stream's kept labels).

    NumPy asks for huge pages on allocations of 4 MiB or more; on the VM of
    ``runs/fit-speed/README.md`` first touching them cost 0.27–2.96 CPU s a
    GiB (compaction), small pages 0.52–0.61, and the labels are written once
    and read in order.  Anonymous memory with ``MADV_NOHUGEPAGE`` where the
    platform has it; a NumPy array elsewhere.
    """
    size = int(np.prod(shape)) * 8
    advice = getattr(mmap, "MADV_NOHUGEPAGE", None)
    if size == 0 or advice is None:
        return np.empty(shape)
    memory = mmap.mmap(-1, size)
    memory.madvise(advice)
    return np.frombuffer(memory, dtype=np.float64).reshape(shape)


class ScratchArrays:
    """Arrays lent to one block at a time and taken back, a free list per set of shapes and dtypes.

    Pickled, as a task shipped to another process is, it arrives empty:
    the blocks there allocate their own, as they did before.
    """

    def __init__(self):
        self._free: dict[tuple, list[tuple[np.ndarray, ...]]] = {}
        self._lock = threading.Lock()
        self.allocated = 0  # sets made: at most the blocks run at once, per set of shapes

    @contextmanager
    def lent(self, *shapes: tuple[int, ...], dtypes: tuple | None = None):
        """A free set of arrays of these ``shapes`` and ``dtypes`` (one per shape; None: float64), new ones when
        none is free, taken back after use."""
        dtypes = (np.float64,) * len(shapes) if dtypes is None else dtypes
        if len(dtypes) != len(shapes):
            raise ValueError(f"dtypes: expected one per shape ({len(shapes)}), received {len(dtypes)}")
        key = tuple((tuple(int(size) for size in shape), np.dtype(dtype)) for shape, dtype in zip(shapes, dtypes))
        with self._lock:
            free = self._free.get(key)
            arrays = free.pop() if free else None
            self.allocated += arrays is None
        if arrays is None:
            arrays = tuple(np.empty(shape, dtype=dtype) for shape, dtype in key)
        try:
            yield arrays
        finally:
            with self._lock:
                self._free.setdefault(key, []).append(arrays)

    def clear(self) -> None:
        """Drop the free sets (a pass has ended); a set lent now joins the free list when it comes back."""
        with self._lock:
            self._free.clear()

    def __reduce__(self):
        return ScratchArrays, ()

    def __dask_tokenize__(self):
        return "ScratchArrays"  # what a task computes does not depend on the arrays it is lent
