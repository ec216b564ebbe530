"""Output paths: what may be written where, and writing a file whole ([design: bad-input]).

Every file mhalearn writes (a model, a table, a results file, a figure, a
lock) is checked with :func:`check_output_file` before the work that produces
it, and written with :func:`written_atomically`: under a temporary name beside
it, renamed into place complete.  What a path may be:

- absent: the file is created (its directory must exist and be writable);
- a regular file: it is replaced whole, keeping its permission bits;
- a symbolic link, dangling or not: it is followed, and the file it leads to is
  written by the rules above; the link stays a link;
- anything else (a directory, a FIFO, a device, a socket): refused with one
  ``ValueError`` line, since the rename would replace the node itself (a
  FIFO, or ``/dev/null``) with a regular file.

Standard library only: the command line imports this before anything heavy.
"""

from __future__ import annotations

import os
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

#: What a path that is not a regular file is, by the file-type bits of its mode.
_NODE_KINDS = {stat.S_IFDIR: "a directory", stat.S_IFIFO: "a FIFO (named pipe)",
               stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket"}


def node_kind(path) -> str | None:
    """What ``path`` is when it exists and is not a regular file ("a FIFO (named pipe)" …), else None.

    Symbolic links are followed; ``path`` is only inspected (``stat``), never opened.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return None
    return _NODE_KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_regular_or_absent(path, name: str, expected: str = "a regular file or a new path") -> Path:
    """The file ``path`` leads to (its symbolic links followed), raising ``ValueError`` naming ``name``
    unless that is a regular file or absent.  Inspects only: a FIFO is never opened (that would block)."""
    path = Path(path)
    target = Path(os.path.realpath(path))
    through = "" if target == path.absolute() else f" (the file its link leads to, {str(target)!r})"
    try:
        kind = node_kind(target)
    except OSError as error:  # a loop of links, a component that is a file, no search permission
        raise ValueError(f"{name}: cannot use {str(path)!r}: {error.strerror}") from None
    if kind is not None:
        # A rename onto a FIFO or a device would replace the node itself with a regular file.
        why = "" if kind == "a directory" else "; mhalearn writes a file whole and renames it into place, which " \
                                                "would replace it"
        raise ValueError(f"{name}: expected {expected}, {str(path)!r}{through} is {kind}{why}")
    return target


def output_target(path, name: str) -> Path:
    """The regular file that writing ``path`` writes: ``path`` itself, or the end of its symbolic links.

    Raises ``ValueError`` naming ``name`` when that is not a regular file or
    absent, or when its directory is missing or not writable, so that the
    output is checked before the work that produces it.
    """
    target = check_regular_or_absent(path, name)
    parent = target.parent
    if not parent.is_dir():
        raise ValueError(f"{name}: directory {str(parent)!r} of {str(path)!r} does not exist")
    leads = "" if target == Path(path).absolute() else f" (it leads to {str(target)!r})"
    if target.exists() and not os.access(target, os.W_OK):
        raise ValueError(f"{name}: {str(path)!r} is not writable{leads}")
    if not os.access(parent, os.W_OK | os.X_OK):
        # The file is written to a temporary file beside it and renamed: its folder must be writable.
        raise ValueError(f"{name}: cannot write {str(path)!r}{leads}: its folder {str(parent)!r} is not writable "
                         f"(a new file is written beside it and renamed over it)")
    return target


def _probe(directory: Path, name: str, path) -> None:
    """Create and delete a file in ``directory``: what permission bits do not tell (a read-only or
    pseudo file system such as /proc, an immutable directory, root's bypass of the bits) shows here."""
    try:
        descriptor, probe = tempfile.mkstemp(dir=directory, prefix=".mhalearn-probe.")
    except OSError as error:
        raise ValueError(f"{name}: cannot write {str(path)!r}: creating a file in {str(directory)!r} fails "
                         f"({error.strerror})") from None
    os.close(descriptor)
    os.unlink(probe)


def check_output_file(path, name: str, size: int = 0) -> Path:
    """Return ``path`` as a ``Path`` a file can be written at, raising ``ValueError`` otherwise.

    Checked before long work starts, so a fit or sweep is not lost to a
    typo in an output path (:func:`output_target` says what is allowed); a
    file is created and deleted beside it to prove it, and with ``size``
    (bytes the file will have, roughly) the free space and the process's
    file-size limit are checked too.
    """
    target = output_target(path, name)
    _probe(target.parent, name, path)
    if size:
        check_room(target.parent, name, path, size)
    return Path(path)


def check_room(directory: Path, name: str, path, size: int) -> None:
    """Raise ``ValueError`` unless a file of ``size`` bytes fits on ``directory``'s disk and under the
    process's file-size limit (``ulimit -f``)."""
    import resource
    import shutil

    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and limit < size:
        raise ValueError(f"{name}: {str(path)!r} needs about {size} bytes, over this process's file-size limit "
                         f"of {limit} bytes (ulimit -f)")
    free = shutil.disk_usage(directory).free
    if free < size:
        raise ValueError(f"{name}: {str(path)!r} needs about {size} bytes, and its disk has {free} bytes free")


def check_output_directory(path, name: str) -> Path:
    """Return ``path`` as a ``Path`` of a directory that exists or can be created, and written to."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{name}: expected a directory, {str(path)!r} is {node_kind(path) or 'a file'}")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        raise ValueError(f"{name}: cannot create {str(path)!r}: {str(existing)!r} is {node_kind(existing) or 'a file'}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"{name}: {str(existing)!r} is not writable, so {str(path)!r} cannot be written")
    _probe(existing, name, path)
    return path


def _new_file_mode() -> int:
    """Permission bits a new file gets under the current umask (read without changing it for long)."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


@contextmanager
def written_atomically(path, name: str = "path", *, suffix: str = ".tmp") -> Iterator[str]:
    """A temporary file beside the file ``path`` leads to, renamed over it when the block succeeds.

    The block writes the temporary file (its name is yielded); when it
    raises, the temporary file is deleted and ``path`` is untouched, so a
    killed or failed write never leaves half a file.  The file written is
    :func:`output_target`'s (a symbolic link is followed and kept); it keeps
    the permission bits of the file it replaces, or gets the umask's.
    """
    target = output_target(path, name)
    descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    try:
        os.close(descriptor)
        yield temporary
        with open(temporary, "rb+") as handle:
            os.fsync(handle.fileno())
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            mode = _new_file_mode()
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
