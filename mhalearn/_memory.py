"""The memory budget: one rule for sizes that cannot fit (docs/install.rst, "Memory budget").

Sizes are the user's to choose (samples, random features, hidden units,
candidate heads), and a size that cannot fit should fail at once with a
message naming it, not as a bare ``MemoryError`` deep inside NumPy or as a
process the kernel kills after minutes of swapping.  So every entry point
that allocates arrays whose size follows from its arguments first adds up
the bytes of the arrays it holds at once and calls :func:`check_memory`,
which raises :class:`MemoryBudgetError` when they exceed the budget:

* the budget is, in order, what :func:`set_memory_budget` set (or
  :func:`memory_budget` for the body of a ``with`` block), else the
  environment variable ``MHALEARN_MEMORY_BUDGET``, else half of the memory
  this process may use (the machine's physical memory, or the address-space
  limit ``ulimit -v`` where that is lower): half, because the arrays of one
  call are not all the memory a process holds (the interpreter, the
  libraries, the caller's own data) and others share the machine;
* a budget is a number of bytes, as an int or a string with a binary unit
  (``"12GiB"``, ``"12G"``, ``"512MiB"``; K, M, G and T are powers of 1024,
  with or without ``iB`` or ``B`` after them);
* the check is a guard against sizes that cannot work, not an accounting:
  the estimate counts the large arrays of a call (each entry point says
  which) and leaves out what is small next to them.

Using it in new code::

    from mhalearn._memory import check_memory

    check_memory(8 * n * p, "features", f"{p} random features of {n} samples")
    Phi = np.empty((n, p))

The error is both a ``MemoryError`` (what a failed allocation raises) and a
``ValueError`` (the argument's value is what is wrong; the command line
reports it as bad input, exit status 2).
"""

from __future__ import annotations

import numbers
import os
import re

from ._scoped import ScopedSetting

#: The environment variable read when :func:`set_memory_budget` has not been called.
ENVIRONMENT_VARIABLE = "MHALEARN_MEMORY_BUDGET"

_BINARY_UNITS = ("KiB", "MiB", "GiB", "TiB", "PiB")
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)

# (bytes, who set them) from set_memory_budget or memory_budget; None: the environment variable or the default.
_BUDGET = ScopedSetting(None)


class MemoryBudgetError(MemoryError, ValueError):
    """A requested size needs more memory than the budget (raised before anything is allocated)."""


def format_bytes(nbytes: float) -> str:
    """``nbytes`` in the largest binary unit that keeps the number at least 1, e.g. ``"89.4 GiB"``."""
    for power in range(len(_BINARY_UNITS), 0, -1):
        value = nbytes / (1 << (10 * power))
        if value >= 1:
            digits = f"{value:.3g}" if value < 100 else f"{value:.0f}"
            return f"{digits} {_BINARY_UNITS[power - 1]}"
    return f"{int(nbytes)} B"


def parse_bytes(value, name: str) -> int:
    """``value`` (an int, or a string such as ``"12GiB"``) as a positive number of bytes.

    Raises ``ValueError`` naming ``name`` otherwise.
    """
    if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1:
        return int(value)
    match = _SIZE.match(value) if isinstance(value, str) else None
    if match is None or float(match.group(1)) * _UNITS[match.group(2).upper()] < 1:
        raise ValueError(f"{name}: expected a number of bytes >= 1, as an integer or a string with a binary "
                         f"unit such as '12GiB' or '512M', received {value!r}")
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def usable_memory() -> int | None:
    """Bytes this process may use: physical memory, or the address-space limit if lower (None if unknown)."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        return None
    try:
        import resource
    except ImportError:  # pragma: no cover - POSIX without resource
        return physical
    limit = resource.getrlimit(resource.RLIMIT_AS)[0]
    return physical if limit == resource.RLIM_INFINITY else min(physical, limit)


def _budget_and_source() -> tuple[int | None, str]:
    chosen = _BUDGET.get()
    if chosen is not None:
        return chosen
    setting = os.environ.get(ENVIRONMENT_VARIABLE, "").strip()
    if setting:
        return parse_bytes(setting, ENVIRONMENT_VARIABLE), f"set by {ENVIRONMENT_VARIABLE}"
    usable = usable_memory()
    if usable is None:
        return None, "no limit: the machine's memory is unknown"
    return usable // 2, f"half of the {format_bytes(usable)} this process may use"


def get_memory_budget() -> int | None:
    """The memory budget in bytes (see the module docstring); None where the machine's memory is unknown."""
    return _budget_and_source()[0]


def set_memory_budget(nbytes) -> None:
    """Set the memory budget that sizes are checked against, for this process.

    Parameters
    ----------
    nbytes : int, str or None
        Bytes, as an int or a string with a binary unit (``"12GiB"``,
        ``"512M"``); None goes back to ``MHALEARN_MEMORY_BUDGET`` or, without
        it, half of the memory this process may use.  Inside a
        :func:`memory_budget` block it holds until the block ends.
    """
    _BUDGET.set(_chosen_budget(nbytes, "mhalearn.set_memory_budget"))


def memory_budget(nbytes):
    """The memory budget ``nbytes`` for the body of a ``with`` block, then the one in force before.

    ``nbytes`` is read as by :func:`set_memory_budget` (None: the
    environment variable, else half of the memory).  The budget is the
    process's: every thread checks against it while the block is open.
    Blocks nest, and leaving one puts back what was in force when it was
    entered, also when threads leave their blocks out of order.

    Examples
    --------
    >>> import mhalearn
    >>> with mhalearn.memory_budget("2GiB"):
    ...     mhalearn.get_memory_budget()
    2147483648
    """
    return _BUDGET.scoped(_chosen_budget(nbytes, "mhalearn.memory_budget"))


def _chosen_budget(nbytes, setter: str) -> tuple[int, str] | None:
    """What :data:`_BUDGET` holds for ``nbytes`` given to ``setter``: (bytes, source), or None."""
    return None if nbytes is None else (parse_bytes(nbytes, "nbytes"), f"set by {setter}")


def check_memory(nbytes: float, name: str, what: str, *, lower: str | None = None) -> None:
    """Raise :class:`MemoryBudgetError` if ``nbytes`` exceed the memory budget; call it before allocating.

    Parameters
    ----------
    nbytes : int or float
        Bytes the call is about to hold at once.
    name : str
        The argument whose value sets the size (the message starts with it).
    what : str
        What needs the memory, read after ``name:``, e.g. ``"1000000000
        random features of 20 samples"``.
    lower : str, optional
        What to lower, when that is not ``name`` itself (an array whose
        shape sets the size: ``"k, the sequence length"``).
    """
    budget, source = _budget_and_source()
    if budget is not None and nbytes > budget:
        raise MemoryBudgetError(
            f"{name}: {what} would take {format_bytes(nbytes)}, more than the memory budget of "
            f"{format_bytes(budget)} ({source}); lower {lower or name}, or raise the budget with "
            f"mhalearn.set_memory_budget(nbytes) or the environment variable {ENVIRONMENT_VARIABLE}")


def peak_memory_mb() -> float:
    """Peak resident memory of the calling process so far, in MB.

    Linux's high-water mark of the process's own memory (``VmHWM``): the
    ``ru_maxrss`` of ``getrusage`` survives ``exec``, so a worker process
    spawned by a large one would report its parent's peak.  Elsewhere
    ``ru_maxrss`` (kB on Linux, bytes on macOS).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource  # not on Windows: imported only where /proc is missing
    import sys

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2 ** 20 if sys.platform == "darwin" else peak / 1024.0


__all__ = ["ENVIRONMENT_VARIABLE", "MemoryBudgetError", "check_memory", "format_bytes", "get_memory_budget",
           "memory_budget", "parse_bytes", "set_memory_budget", "usable_memory"]
