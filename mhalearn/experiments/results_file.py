"""The results file on disk: its schema, atomic creation, inspection and write checks ([design: experiments]).

:class:`~mhalearn.experiments.store.ResultStore` reads and writes rows; this
module is what it does before: a new file is built under a temporary name and
linked into place complete (a kill leaves no file or a valid one), an
existing file is inspected read-only before anything is written to it, and
a file opened for writing is checked for write access first.  ``_SCHEMA``
and ``_MIGRATIONS`` define the tables of each schema version.
"""

from __future__ import annotations

import errno
import os
import sqlite3
import tempfile
from datetime import datetime, timezone
from pathlib import Path

#: Value of ``meta.format`` in every results file.
FORMAT_TAG = "mhalearn-results"
#: Schema version written into new files; older versions are migrated forward when opened for writing.
SCHEMA_VERSION = 2
_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE results (
    id          INTEGER PRIMARY KEY,
    experiment  TEXT NOT NULL,
    cell_key    TEXT NOT NULL UNIQUE,
    params      TEXT NOT NULL,
    metrics     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error       TEXT,
    seconds     REAL NOT NULL,
    host        TEXT NOT NULL,
    finished_at TEXT NOT NULL,
    code_id     TEXT,
    provenance  TEXT
);
CREATE INDEX results_by_experiment ON results (experiment);
"""
#: Schema 2 over schema 1: provenance columns and the grids table.
_GRIDS_TABLE = """
CREATE TABLE grids (
    id          INTEGER PRIMARY KEY,
    experiment  TEXT NOT NULL,
    name        TEXT NOT NULL,
    source      TEXT NOT NULL,
    grid        TEXT NOT NULL,
    toml        TEXT NOT NULL,
    code_id     TEXT,
    recorded_at TEXT NOT NULL
);
"""
_MIGRATIONS = {
    1: ["ALTER TABLE results ADD COLUMN code_id TEXT", "ALTER TABLE results ADD COLUMN provenance TEXT",
        _GRIDS_TABLE],
}
#: The tables a results file of each schema version has.
_TABLES = {1: {"meta", "results"}, 2: {"meta", "results", "grids"}}


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection that writes nothing, not even -wal/-shm files, when it can.

    Without a write-ahead log beside it the main file holds everything: read it
    as immutable, which creates no -wal/-shm files and works in read-only
    directories.  With a log, a read-only connection reads the log too.
    """
    wal_pending = Path(f"{path}-wal").exists()
    options = "mode=ro" if wal_pending else "mode=ro&immutable=1"
    return sqlite3.connect(f"{path.resolve().as_uri()}?{options}", uri=True)


def damaged_file(path: Path, reason: str) -> ValueError:
    """The ``ValueError`` for a results file that cannot be read as one: what is wrong, and that it was kept."""
    return ValueError(f"db: {str(path)!r} is damaged: {reason}; nothing was written to it (restore it from a "
                      "copy, or give another --db)")


def read_error(path: Path, error: Exception) -> ValueError:
    """The ``ValueError`` for an SQLite or JSON error met while reading the results file at ``path``."""
    if isinstance(error, sqlite3.OperationalError) and any(word in str(error) for word in ("locked", "busy")):
        return ValueError(f"db: could not read {str(path)!r}: {error}")
    if isinstance(error, sqlite3.Error):
        return damaged_file(path, f"SQLite reports {error!s:.200}")
    return damaged_file(path, f"a stored row is not valid JSON ({error!s:.200})")


def _inspect_existing(path: Path) -> int | None:
    """Schema version of the existing results file at ``path``, or None for a blank SQLite file.

    A blank file (an SQLite database without any table) is what a process
    killed while creating a file with an older version left; it holds no data
    and is taken as new.  Anything else that is not a results file, or a
    results file that lacks a table of its schema or fails SQLite's
    ``quick_check`` (overwritten pages), raises ``ValueError``.  Reads only.
    """
    with open(path, "rb") as handle:
        header = handle.read(100)
    if header[:len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise ValueError(f"db: expected an mhalearn results file (SQLite), {str(path)!r} is not an SQLite database")
    try:
        connection = _connect_readonly(path)
    except sqlite3.Error as error:
        raise ValueError(f"db: could not open {str(path)!r} read-only to check it: {error}") from None
    try:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            return None
        if "meta" not in tables:
            raise ValueError(
                f"db: expected an mhalearn results file, {str(path)!r} is an SQLite database "
                f"without the mhalearn marker (tables: {sorted(tables)}); refusing to modify it"
            )
        version = _marked_version(path, dict(connection.execute("SELECT key, value FROM meta")))
        missing = sorted(_TABLES[version] - tables)
        if missing:
            raise damaged_file(path, f"it is marked as a results file of schema {version} but has no table "
                                     f"{missing[0]!r}")
        # Reads every page once (milliseconds per megabyte): overwritten pages are found here, before a
        # sweep writes into them or a reader fails half-way.
        problems = [problem for (problem,) in connection.execute("PRAGMA quick_check")]
        if problems != ["ok"]:
            raise damaged_file(path, f"SQLite's check reports {problems[0]!s:.200}")
    except sqlite3.Error as error:
        raise read_error(path, error) from None
    finally:
        connection.close()
    return version


def _marked_version(path: Path, meta: dict) -> int:
    """The schema version the ``meta`` table of the file at ``path`` declares; ``ValueError`` for another format."""
    if meta.get("format") != FORMAT_TAG:
        raise ValueError(
            f"db: expected an mhalearn results file, {str(path)!r} has format {meta.get('format')!r}; "
            "refusing to modify it"
        )
    version = meta.get("schema_version")
    if version not in {str(number) for number in range(1, SCHEMA_VERSION + 1)}:
        raise ValueError(
            f"db: expected results schema version {SCHEMA_VERSION} (or an older one, which is migrated), "
            f"{str(path)!r} has version {version!r}"
            + (" (written by a newer mhalearn: upgrade)" if str(version).isdigit() else "")
        )
    return int(version)


def _check_writable(path: Path) -> None:
    """Raise ``ValueError`` unless results can be written at ``path`` (file and directory)."""
    directory = path.parent
    if not os.access(directory, os.W_OK | os.X_OK):
        raise ValueError(f"db: the directory {str(directory)!r} of the results file is read-only; SQLite needs "
                         "to write its journal beside the file: copy the file to a writable place or use another --db")
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"db: the results file {str(path)!r} is read-only; nothing was computed. Make it writable "
                         "(chmod u+w) or copy it; `mhalearn plot` and `sweep --status` read it as it is")


def _create_atomically(path: Path, *, replace: bool) -> None:
    """Build a new results file under a temporary name and move it into place complete.

    ``replace`` is for a blank file (0 bytes or no tables) already at
    ``path``; otherwise the file is linked in only if ``path`` is still free,
    so a file that another process created meanwhile is kept.
    """
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".creating")
    os.close(descriptor)
    try:
        connection = sqlite3.connect(temporary)
        try:
            connection.execute("PRAGMA journal_mode = WAL")
            connection.execute("PRAGMA synchronous = FULL")
            connection.executescript("BEGIN;" + _SCHEMA + _GRIDS_TABLE + "COMMIT;")
            with connection:
                connection.executemany("INSERT INTO meta (key, value) VALUES (?, ?)",
                                       [("format", FORMAT_TAG), ("schema_version", str(SCHEMA_VERSION)),
                                        ("created_at", _now())])
        finally:
            connection.close()  # checkpoints and removes the temporary -wal and -shm
        for stale in (f"{path}-wal", f"{path}-shm", f"{path}-journal"):
            # Logs of a blank or deleted file: SQLite would replay them into the new one.
            if (replace or not path.exists()) and os.path.exists(stale):
                os.unlink(stale)
        if replace:
            os.replace(temporary, path)
        else:
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another process created it first: use theirs
            except OSError as error:
                if error.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
                    raise
                os.replace(temporary, path)  # a file system without hard links
        _fsync_directory(path.parent)
    finally:
        for leftover in (temporary, f"{temporary}-wal", f"{temporary}-shm"):
            if os.path.exists(leftover):
                os.unlink(leftover)


def _fsync_directory(directory: Path) -> None:
    try:
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _remove_stale_temporaries(directory: Path) -> None:
    """Delete temporary files of creations in ``directory`` that were killed (older than a minute)."""
    import time

    for leftover in directory.glob(".*.creating*"):
        try:
            if time.time() - leftover.stat().st_mtime > 60:
                leftover.unlink()
        except OSError:
            pass
