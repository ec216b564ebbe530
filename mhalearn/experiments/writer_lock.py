"""The one-writer rule of a results file: :class:`WriterLock`, and what a failed write means (docs/design.md §5).

Only the coordinating process of a sweep writes rows.  A second sweep on the
same file stops with a clear message instead of recomputing every cell, and
a write that fails (locked, full disk, read-only, damaged file, I/O) is
described in one sentence.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

from .results_file import _now

def describe_write_error(error: Exception, timeout: float) -> str:
    """A sentence for an SQLite write failure: locked, full, read-only, damaged or I/O."""
    text = str(error).lower()
    if "locked" in text or "busy" in text:
        return f"another process has held the file's write lock for more than {timeout:g} s ({error})"
    if "full" in text:
        return f"the disk is full ({error})"
    if "readonly" in text or "read-only" in text:
        return f"the file or its directory is read-only ({error})"
    if "malformed" in text or "not a database" in text or "corrupt" in text:
        return f"the file is damaged ({error})"
    return f"{type(error).__name__}: {error}"


class WriterLock:
    """Exclusive right to run a sweep into one results file, held by the coordinator.

    An advisory ``flock`` on ``PATH.lock`` beside the results file: the
    operating system releases it when the holder exits, even on ``kill -9``,
    so a resumed sweep never waits for a dead coordinator.  A second
    coordinator gets a ``ValueError`` naming the holder (pid, host, start
    time) instead of recomputing every cell.  The small ``.lock`` file stays
    beside the results file.  Where ``fcntl`` is missing (Windows) the lock
    is a no-op.

    Parameters
    ----------
    path : str or os.PathLike
        The results file.
    purpose : str
        What the holder does (shown to a second coordinator).
    """

    def __init__(self, path: str | os.PathLike, purpose: str = "sweep"):
        self.path = Path(f"{os.fspath(path)}.lock")
        self.purpose = purpose
        self._handle = None

    def acquire(self) -> "WriterLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            return self
        if not self.path.parent.is_dir():
            raise ValueError(f"db: directory {str(self.path.parent)!r} of the results file does not exist")
        try:
            handle = open(self.path, "a+", encoding="utf-8")
        except OSError as error:
            raise ValueError(f"db: the directory {str(self.path.parent)!r} of the results file is read-only "
                             f"({error.strerror}); a sweep writes its lock and journal beside the file: copy the "
                             "file to a writable place or use another --db; nothing was computed") from None
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            handle.seek(0)
            holder = handle.read().strip() or "an unknown process"
            handle.close()
            if error.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise
            raise ValueError(
                f"db: another sweep is writing to {str(self.path)[:-5]!r} ({holder}); running a second "
                "coordinator on the same file would compute the same cells twice. Wait for it to finish "
                "(or stop it), or give this sweep another --db") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.purpose}, pid {os.getpid()} on {socket.gethostname()}, since {_now()}\n")
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the descriptor releases the flock
            self._handle = None

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()
