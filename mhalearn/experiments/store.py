"""The SQLite results store of the experiment runner (docs/design.md §5).

A results file holds one row per finished cell of a sweep in the table
``results``.  A row is keyed by ``cell_key``, the canonical JSON of the
experiment name and the cell's parameters, which is ``UNIQUE``: a resumed
sweep asks the store which keys are finished and computes only the others,
and writing a key twice is impossible.  Parameters, metrics and the row's
provenance (which code computed it, see :mod:`mhalearn.provenance`) are
stored as JSON text; ``code_id`` is kept in its own column so a resumed sweep
can tell rows of other code.  The table ``grids`` records every grid swept
into the file (its TOML text and where it came from).  The table ``meta``
marks the file as an mhalearn results file and records the schema version.

Only the coordinating process of a sweep writes, one committed transaction
per row, in WAL mode, so a sweep killed with ``kill -9`` loses at most the
cells that were still being computed.  :class:`WriterLock` makes a second
coordinator on the same file stop with a clear message instead of
recomputing every cell.

Files and faults:

- Creation is atomic: a new file is built under a temporary name in the same
  directory and linked into place complete, so a kill at any moment leaves
  either no file or a valid one.  An existing 0-byte file, or an SQLite file
  without any table (what older versions left when killed while creating
  one), is taken as new.
- Opening a file that exists and is not an mhalearn results file raises
  ``ValueError`` before anything is written to it (the check reads the file
  through a read-only connection).
- Opening for writing checks first that the file and its directory are
  writable and that a write transaction can start, and migrates a file of an
  older schema forward (in one transaction, keeping every row).
- ``readonly=True`` (plots, status, exports) opens the file read-only: it
  works on read-only files and directories and never migrates or writes.
"""

from __future__ import annotations

import errno
import json
import math
import os
import socket
import sqlite3
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

#: Value of ``meta.format`` in every results file.
FORMAT_TAG = "mhalearn-results"
#: Schema version written into new files; older versions are migrated forward when opened for writing.
SCHEMA_VERSION = 2
#: Row statuses: the cell returned metrics, or it raised.
STATUS_OK = "ok"
STATUS_FAILED = "failed"

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

_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_flat_scalars(mapping: dict, name: str, *, nested: bool = False) -> None:
    """Raise unless ``mapping`` is a dict of JSON scalars (with ``nested``: or of such dicts, recursively)."""
    if not isinstance(mapping, dict):
        raise ValueError(f"{name}: expected a dict of JSON scalars, received {type(mapping).__name__}")
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ValueError(f"{name}: expected string keys, received key {key!r}")
        if nested and isinstance(value, dict):
            _check_flat_scalars(value, f"{name}.{key}", nested=True)
            continue
        if not isinstance(value, _JSON_SCALARS):
            raise ValueError(
                f"{name}: expected JSON scalar values (str, int, float, bool, None), "
                f"received {type(value).__name__} for {key!r}"
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{name}: expected finite numbers, received {value!r} for {key!r}")


def cell_key(experiment: str, cell: dict) -> str:
    """Canonical JSON identifying ``cell`` of ``experiment`` (sorted keys, no spaces).

    Parameters
    ----------
    experiment : str
        Name of the experiment the cell belongs to.
    cell : dict
        Flat dict of JSON scalars (the cell's parameters).

    Returns
    -------
    str
        The same string for equal cells whatever the key order.
    """
    _check_flat_scalars(cell, "cell")
    return json.dumps({"experiment": experiment, "params": cell}, sort_keys=True,
                      separators=(",", ":"), allow_nan=False)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ------------------------------------------------------------ opening files

def _connect_readonly(path: Path) -> sqlite3.Connection:
    """A read-only connection that writes nothing, not even -wal/-shm files, when it can.

    Without a write-ahead log beside it the main file holds everything: read it
    as immutable, which creates no -wal/-shm files and works in read-only
    directories.  With a log, a read-only connection reads the log too.
    """
    wal_pending = Path(f"{path}-wal").exists()
    options = "mode=ro" if wal_pending else "mode=ro&immutable=1"
    return sqlite3.connect(f"{path.resolve().as_uri()}?{options}", uri=True)


def _inspect_existing(path: Path) -> int | None:
    """Schema version of the existing results file at ``path``, or None for a blank SQLite file.

    A blank file (an SQLite database without any table) is what a process
    killed while creating a file with an older version left; it holds no data
    and is taken as new.  Anything else that is not a results file raises
    ``ValueError``.  Reads only.
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
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master")}
        if not tables:
            return None
        if "meta" not in tables:
            raise ValueError(
                f"db: expected an mhalearn results file, {str(path)!r} is an SQLite database "
                f"without the mhalearn marker (tables: {sorted(tables)}); refusing to modify it"
            )
        meta = dict(connection.execute("SELECT key, value FROM meta"))
    except sqlite3.Error as error:
        raise ValueError(f"db: could not read {str(path)!r} as a results file: {error}") from None
    finally:
        connection.close()
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


class ResultStore:
    """One SQLite results file: finished cells of any number of experiments.

    Parameters
    ----------
    path : str or os.PathLike
        The results file.  It is created when missing (or blank); an
        existing file that is not an mhalearn results file raises
        ``ValueError`` and is left untouched.
    create : bool
        Create the file when it is missing; with False a missing file raises
        ``ValueError`` (for readers such as ``mhalearn plot``).
    readonly : bool
        Open read-only (implies ``create=False``): nothing is written, no
        migration, and read-only files and directories work.
    timeout : float
        Seconds to wait for another connection's write lock before a write
        (or opening for writing) fails.

    Notes
    -----
    Use as a context manager, or call :meth:`close`.  Only one process
    should write to a store at a time (the sweep's coordinator, see
    :class:`WriterLock`).
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = True, readonly: bool = False,
                 timeout: float = 30.0):
        self.path = Path(path)
        self.readonly = bool(readonly)
        self._connection = None
        if self.path.is_dir():
            raise ValueError(f"db: expected a results file, {str(self.path)!r} is a directory")
        present = self.path.exists() and self.path.stat().st_size > 0
        version = _inspect_existing(self.path) if present else None
        if version is None and (self.readonly or not create):
            if present:
                raise ValueError(f"db: {str(self.path)!r} is an empty SQLite file with no results yet")
            raise ValueError(f"db: no results file at {str(self.path)!r} (run `mhalearn sweep` to create one)")
        if self.readonly:
            self._connection = _connect_readonly(self.path)
            self.schema_version = version
            return
        if not self.path.parent.is_dir():
            raise ValueError(f"db: directory {str(self.path.parent)!r} of the results file does not exist")
        _check_writable(self.path)
        if version is None:
            _remove_stale_temporaries(self.path.parent)
            _create_atomically(self.path, replace=self.path.exists())
            version = _inspect_existing(self.path)
        self._connection = sqlite3.connect(self.path, timeout=timeout)
        try:
            self._connection.execute("PRAGMA journal_mode = WAL")
            self._connection.execute("PRAGMA synchronous = NORMAL")
            self._start_writing(version, timeout)
        except BaseException:
            self.close()
            raise
        self.schema_version = SCHEMA_VERSION

    def _start_writing(self, version: int, timeout: float) -> None:
        """Take the write lock once (proving the file writable now) and migrate an older schema."""
        try:
            self._connection.execute("BEGIN IMMEDIATE")
            for old in range(version, SCHEMA_VERSION):
                for statement in _MIGRATIONS[old]:
                    self._connection.execute(statement)
            if version != SCHEMA_VERSION:
                self._connection.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                                         (str(SCHEMA_VERSION),))
                self._connection.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                                         (f"migrated_from_{version}", _now()))
            self._connection.commit()
        except sqlite3.OperationalError as error:
            self._connection.rollback()
            raise ValueError(f"db: cannot write to {str(self.path)!r}: {describe_write_error(error, timeout)}; "
                             "nothing was computed") from None

    # ---------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Close the connection (idempotent)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    @property
    def connection(self) -> sqlite3.Connection:
        if self._connection is None:
            raise ValueError(f"db: the results store {str(self.path)!r} is closed")
        return self._connection

    def _has_provenance(self) -> bool:
        return self.schema_version >= 2

    # -------------------------------------------------------------------- write
    def record(self, experiment: str, cell: dict, metrics: dict, *, status: str = STATUS_OK,
               error: str | None = None, seconds: float = 0.0, host: str | None = None,
               replace: bool = False, code_id: str | None = None, provenance: dict | None = None) -> bool:
        """Store the result of one cell and commit.

        Parameters
        ----------
        experiment : str
            Experiment name.
        cell : dict
            The cell's parameters (flat JSON scalars).
        metrics : dict
            What the cell returned (JSON scalars, or dicts of them; empty for a failure).
        status : {"ok", "failed"}
            Whether the cell returned or raised.
        error : str, optional
            The error message and traceback of a failed cell.
        seconds : float
            Wall time of the cell on its worker.
        host : str, optional
            Where the cell ran (defaults to this machine's name).
        replace : bool
            Overwrite an existing row with the same key (used to retry
            failed cells); otherwise an existing row is kept.
        code_id : str, optional
            :func:`mhalearn.provenance.code_id` of the code that computed the cell.
        provenance : dict, optional
            :func:`mhalearn.provenance.code_provenance` of that code.

        Returns
        -------
        bool
            True when a row was written, False when the key was already
            stored and ``replace`` is False.

        Raises
        ------
        sqlite3.OperationalError
            When the file cannot be written (locked, disk full); the runner
            retries and then stops cleanly.
        """
        if self.readonly:
            raise ValueError(f"db: {str(self.path)!r} was opened read-only")
        if status not in (STATUS_OK, STATUS_FAILED):
            raise ValueError(f"status: expected 'ok' or 'failed', received {status!r}")
        key = cell_key(experiment, cell)
        _check_flat_scalars(metrics, "metrics", nested=True)
        if provenance is not None:
            _check_flat_scalars(provenance, "provenance")
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self.connection:
            cursor = self.connection.execute(
                f"{verb} INTO results (experiment, cell_key, params, metrics, status, error, seconds, host, "
                "finished_at, code_id, provenance) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (experiment, key, json.dumps(cell, sort_keys=True), json.dumps(metrics, sort_keys=True),
                 status, error, float(seconds), host or socket.gethostname(), _now(), code_id,
                 None if provenance is None else json.dumps(provenance, sort_keys=True)),
            )
        return cursor.rowcount > 0

    def record_grid(self, grid, code_id: str | None = None) -> bool:
        """Record the grid a sweep runs (a :class:`~mhalearn.experiments.registry.Grid`), unless already recorded.

        Returns True when a new entry was written.
        """
        if self.readonly:
            raise ValueError(f"db: {str(self.path)!r} was opened read-only")
        table = json.dumps(grid.table, sort_keys=True)
        with self.connection:
            latest = self.connection.execute(
                "SELECT grid, source, name FROM grids WHERE experiment = ? ORDER BY id DESC LIMIT 1",
                (grid.experiment,)).fetchone()
            if latest == (table, grid.source, grid.name):
                return False
            self.connection.execute(
                "INSERT INTO grids (experiment, name, source, grid, toml, code_id, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (grid.experiment, grid.name, grid.source, table, grid.text, code_id, _now()))
        return True

    # --------------------------------------------------------------------- read
    def finished_keys(self, experiment: str, *, include_failed: bool = True) -> set[str]:
        """Keys of the stored cells of ``experiment`` (failed ones too, unless told otherwise)."""
        query = "SELECT cell_key FROM results WHERE experiment = ?"
        if not include_failed:
            query += " AND status = 'ok'"
        return {key for (key,) in self.connection.execute(query, (experiment,))}

    def count(self, experiment: str | None = None, status: str | None = None) -> int:
        """Number of stored rows, optionally of one experiment and one status."""
        query, args = "SELECT COUNT(*) FROM results WHERE 1 = 1", []
        if experiment is not None:
            query, args = query + " AND experiment = ?", args + [experiment]
        if status is not None:
            query, args = query + " AND status = ?", args + [status]
        return int(self.connection.execute(query, args).fetchone()[0])

    def experiments(self) -> list[str]:
        """Names of the experiments with stored rows."""
        return [name for (name,) in self.connection.execute(
            "SELECT DISTINCT experiment FROM results ORDER BY experiment")]

    def iter_records(self, experiment: str | None = None) -> Iterator[dict]:
        """Every stored row (of ``experiment``, or all) with its bookkeeping, in insertion order.

        Each item has ``experiment``, ``params`` and ``metrics`` (dicts),
        ``status``, ``error``, ``seconds``, ``host``, ``finished_at``,
        ``cell_key``, ``code_id`` and ``provenance`` (a dict, or None for rows
        stored before provenance was recorded).
        """
        extra = "code_id, provenance" if self._has_provenance() else "NULL, NULL"
        query = (f"SELECT experiment, cell_key, params, metrics, status, error, seconds, host, finished_at, {extra} "
                 "FROM results")
        args: tuple = ()
        if experiment is not None:
            query, args = query + " WHERE experiment = ?", (experiment,)
        for (name, key, params, metrics, status, error, seconds, host, finished_at, code,
             provenance) in self.connection.execute(query + " ORDER BY id", args):
            yield {"experiment": name, "cell_key": key, "params": json.loads(params), "metrics": json.loads(metrics),
                   "status": status, "error": error, "seconds": seconds, "host": host,
                   "finished_at": finished_at, "code_id": code,
                   "provenance": None if provenance is None else json.loads(provenance)}

    def rows(self, experiment: str) -> list[dict]:
        """Successful rows of ``experiment``, each the cell merged with its metrics.

        This is the form the experiments' ``plot`` functions take.
        """
        return [{**record["params"], **record["metrics"]}
                for record in self.iter_records(experiment) if record["status"] == STATUS_OK]

    def failures(self, experiment: str) -> list[dict]:
        """Failed rows of ``experiment``: ``params`` and ``error`` of each."""
        return [{"params": record["params"], "error": record["error"]}
                for record in self.iter_records(experiment) if record["status"] == STATUS_FAILED]

    def code_versions(self, experiment: str | None = None) -> list[dict]:
        """Stored rows grouped by experiment and code: counts, time span and one provenance each.

        Each item has ``experiment``, ``code_id`` (None for rows stored
        before provenance was recorded), ``provenance``, ``ok``, ``failed``,
        ``first`` and ``last`` (finish times).
        """
        code, provenance = ("code_id", "MAX(provenance)") if self._has_provenance() else ("NULL", "NULL")
        query = (f"SELECT experiment, {code}, {provenance}, SUM(status = 'ok'), SUM(status = 'failed'), "
                 "MIN(finished_at), MAX(finished_at) FROM results")
        args: tuple = ()
        if experiment is not None:
            query, args = query + " WHERE experiment = ?", (experiment,)
        query += f" GROUP BY experiment, {code} ORDER BY experiment, MIN(id)"
        return [{"experiment": name, "code_id": code_id, "provenance": None if prov is None else json.loads(prov),
                 "ok": int(ok), "failed": int(failed), "first": first, "last": last}
                for name, code_id, prov, ok, failed, first, last in self.connection.execute(query, args)]

    def grids(self, experiment: str | None = None) -> list[dict]:
        """The grids recorded by sweeps (oldest first): ``experiment``, ``name``, ``source``, ``grid``, ``toml``…"""
        if not self._has_provenance():
            return []
        query = "SELECT experiment, name, source, grid, toml, code_id, recorded_at FROM grids"
        args: tuple = ()
        if experiment is not None:
            query, args = query + " WHERE experiment = ?", (experiment,)
        return [{"experiment": name, "name": grid_name, "source": source, "grid": json.loads(grid), "toml": toml,
                 "code_id": code_id, "recorded_at": recorded_at}
                for name, grid_name, source, grid, toml, code_id, recorded_at
                in self.connection.execute(query + " ORDER BY id", args)]

    def to_dataframe(self, experiment: str | None = None):
        """The stored rows as a :class:`pandas.DataFrame` (needs ``pip install 'mhalearn[tables]'``).

        One row per stored cell (of ``experiment``, or of every experiment),
        in insertion order.  Columns: ``experiment``, the grid keys, the
        metrics (nested ones flattened to dotted names, e.g. ``net.candidates``),
        then ``status``, ``error``, ``seconds`` (the cell's wall time),
        ``host``, ``finished_at``, ``code_id`` and the provenance as
        ``provenance.mhalearn``, ``provenance.git_commit``… A metric whose
        name is also a grid key is named ``metrics.NAME``.  Columns have
        pandas' nullable dtypes (``Int64``, ``Float64``, ``boolean``,
        ``string``), so missing values (e.g. a metric one learner does not
        report) do not change a column's type.
        """
        try:
            import pandas
        except ImportError as error:
            raise ImportError("to_dataframe needs pandas: pip install 'mhalearn[tables]'") from error
        records = [flatten_record(record) for record in self.iter_records(experiment)]
        # Nullable dtypes (Int64, Float64, boolean, string): a column with missing values keeps its
        # type, and the table reads back from Parquet unchanged.
        return pandas.DataFrame.from_records(records, columns=_column_order(records)).convert_dtypes()


_BOOKKEEPING = ("status", "error", "seconds", "host", "finished_at", "code_id")


def _flatten(mapping: dict, prefix: str = "") -> dict:
    flat = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def flatten_record(record: dict) -> dict:
    """One table row of a stored record (see :meth:`ResultStore.to_dataframe`)."""
    row = {"experiment": record["experiment"], **record["params"]}
    for name, value in _flatten(record["metrics"]).items():
        row[f"metrics.{name}" if name in row or name in _BOOKKEEPING else name] = value
    row.update({name: record[name] for name in _BOOKKEEPING})
    row.update(_flatten(record["provenance"] or {}, "provenance."))
    return row


def _column_order(records: list[dict]) -> list[str]:
    """Columns in first-seen order, provenance last."""
    columns: dict[str, None] = {}
    for record in records:
        columns.update(dict.fromkeys(record))
    names = list(columns) or ["experiment", *_BOOKKEEPING]
    return ([name for name in names if not name.startswith("provenance.")]
            + [name for name in names if name.startswith("provenance.")])


def describe_write_error(error: Exception, timeout: float) -> str:
    """A sentence for an SQLite write failure: locked, full, read-only or I/O."""
    text = str(error).lower()
    if "locked" in text or "busy" in text:
        return f"another process has held the file's write lock for more than {timeout:g} s ({error})"
    if "full" in text:
        return f"the disk is full ({error})"
    if "readonly" in text or "read-only" in text:
        return f"the file or its directory is read-only ({error})"
    return f"{type(error).__name__}: {error}"


# ------------------------------------------------------------------ writers

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


# ------------------------------------------------------------------- status

def format_status(path: str | os.PathLike, experiment: str | None = None) -> str:
    """What a results file holds, by experiment and code version (``mhalearn sweep --status``)."""
    from ..provenance import code_id, describe

    with ResultStore(path, readonly=True) as store:
        versions = store.code_versions(experiment)
        grids = store.grids(experiment)
        version = store.schema_version
    current = code_id()
    lines = [f"{path}: results schema {version}"
             + ("" if version == SCHEMA_VERSION else f" (migrated to {SCHEMA_VERSION} by the next sweep)")
             + f"; this code is {current}"]
    if not versions:
        lines.append("no rows stored" + (f" for {experiment!r}" if experiment else ""))
    width = max([len(entry["experiment"]) for entry in versions] + [10])
    for entry in versions:
        marker = "  (this code)" if entry["code_id"] == current else ""
        lines.append(f"{entry['experiment']:<{width}}  {entry['ok']:>6} ok {entry['failed']:>5} failed  "
                     f"{entry['first']} … {entry['last']}  {describe(entry['provenance'])}{marker}")
    if grids:
        lines.append("grids swept:")
        for grid in grids:
            lines.append(f"  {grid['experiment']:<{width}}  [{grid['name']}] of {grid['source']}, "
                         f"recorded {grid['recorded_at']}")
    return "\n".join(lines)
