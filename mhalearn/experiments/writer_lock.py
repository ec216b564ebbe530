"""The one-writer rule of a results file: :class:`WriterLock`, and what a failed write means ([design: experiments]).

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

from .._files import check_regular_or_absent
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
    if "i/o" in text:  # what SQLite reports for ENOSPC, EFBIG and a failing device alike
        return f"the disk refused a write: full, over a file-size limit (ulimit -f) or failing ({error})"
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
        # Beside the file the results file's links lead to: every link to one file takes the same lock.
        self.path = Path(f"{os.path.realpath(path)}.lock")
        self._results = Path(path)
        self.purpose = purpose
        self._handle = None

    def acquire(self) -> "WriterLock":
        try:
            import fcntl
        except ImportError:  # pragma: no cover - not on POSIX
            return self
        if not self.path.parent.is_dir():
            raise ValueError(f"db: directory {str(self.path.parent)!r} of the results file does not exist")
        # A results file that cannot be one leaves no lock behind; a lock that is a FIFO would block the
        # open, one that is a directory fail it: each is named as what it is.
        check_regular_or_absent(self._results, "db", "a results file or a new path")
        links = os.stat(self._results).st_nlink if self._results.exists() else 1
        if links > 1:  # the lock is named by the path: another hard link's sweep would take another lock
            raise ValueError(f"db: {str(self._results)!r} has {links} hard links, and a sweep's lock is named by "
                             "the results file's path: sweeps through two links would compute the same cells "
                             "twice. Use one path for it (remove the other links), or copy it; nothing was "
                             "computed")
        check_regular_or_absent(self.path, "db", "a regular file (or none) as the results file's lock")
        created = not self.path.exists()
        try:
            handle = open(self.path, "a+", encoding="utf-8")
        except OSError as error:
            raise ValueError(f"db: cannot open the lock file {str(self.path)!r}: {self._why(error)}; a sweep "
                             "writes its lock and journal beside the results file: fix that, or use another "
                             "--db; nothing was computed") from None
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
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{self.purpose}, pid {os.getpid()} on {socket.gethostname()}, since {_now()}\n")
            handle.flush()
        except OSError as error:  # a full disk, a file-size limit: no empty lock is left behind
            if created:
                self.path.unlink(missing_ok=True)
            try:
                handle.close()  # flushes the buffer the write left again, and fails as it did
            except OSError:
                pass
            raise ValueError(f"db: cannot write the lock file {str(self.path)!r}: {self._why(error)}; "
                             "nothing was computed") from None
        self._handle = handle
        return self

    def _why(self, error: OSError) -> str:
        """Why the lock file could not be opened or written, in words that point at the cause."""
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            return f"the disk is full ({error.strerror})"
        if error.errno == errno.EFBIG:
            return f"the file-size limit is reached ({error.strerror}; see ulimit -f)"
        if error.errno == errno.EPERM:
            return f"{error.strerror} (is it immutable or append-only? lsattr shows it)"
        if error.errno in (errno.EACCES, errno.EROFS):
            if self.path.exists() and not os.access(self.path, os.W_OK):
                return f"the lock file is read-only ({error.strerror})"
            return f"its directory {str(self.path.parent)!r} is read-only ({error.strerror})"
        return error.strerror or str(error)

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing the descriptor releases the flock
            self._handle = None

    def __enter__(self) -> "WriterLock":
        return self.acquire()

    def __exit__(self, *exc_info) -> None:
        self.release()
