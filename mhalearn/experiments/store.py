"""The SQLite results store of the experiment runner (DESIGN.md §5).

A results file holds one row per finished cell of a sweep in the table
``results``.  A row is keyed by ``cell_key``, the canonical JSON of the
experiment name and the cell's parameters, which is ``UNIQUE``: a resumed
sweep asks the store which keys are finished and computes only the others,
and writing a key twice is impossible.  Parameters and metrics are stored as
JSON text.  The table ``meta`` marks the file as an mhalearn results file and
records the schema version.

Only the coordinating process of a sweep writes, one committed transaction
per row, in WAL mode, so a sweep killed with ``kill -9`` loses at most the
cells that were still being computed.

Opening a file that exists and is not an mhalearn results file raises
``ValueError`` before anything is written to it (the check reads the file
through a read-only connection; the WAL pragma comes after).  An empty
(0-byte) file is treated as a new results file.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator

#: Value of ``meta.format`` in every results file.
FORMAT_TAG = "mhalearn-results"
#: Schema version written into new files; files of another version are refused.
SCHEMA_VERSION = 1
#: Row statuses: the cell returned metrics, or it raised.
STATUS_OK = "ok"
STATUS_FAILED = "failed"

_SQLITE_MAGIC = b"SQLite format 3\x00"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS results (
    id          INTEGER PRIMARY KEY,
    experiment  TEXT NOT NULL,
    cell_key    TEXT NOT NULL UNIQUE,
    params      TEXT NOT NULL,
    metrics     TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('ok', 'failed')),
    error       TEXT,
    seconds     REAL NOT NULL,
    host        TEXT NOT NULL,
    finished_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS results_by_experiment ON results (experiment);
"""

_JSON_SCALARS = (str, int, float, bool, type(None))


def _check_flat_scalars(mapping: dict, name: str) -> None:
    if not isinstance(mapping, dict):
        raise ValueError(f"{name}: expected a dict of JSON scalars, received {type(mapping).__name__}")
    for key, value in mapping.items():
        if not isinstance(key, str):
            raise ValueError(f"{name}: expected string keys, received key {key!r}")
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


def _inspect_existing(path: Path) -> None:
    """Raise ``ValueError`` unless the existing file at ``path`` is a results file.

    Reads only: the first bytes of the file, then a read-only SQLite
    connection (which never checkpoints or writes the main file).
    """
    with open(path, "rb") as handle:
        header = handle.read(100)
    if header[:len(_SQLITE_MAGIC)] != _SQLITE_MAGIC:
        raise ValueError(f"db: expected an mhalearn results file (SQLite), {str(path)!r} is not an SQLite database")
    # Without a write-ahead log beside it the main file holds everything: read it as immutable,
    # which creates no -wal/-shm files.  With a log, a read-only connection reads the log too.
    wal_pending = Path(f"{path}-wal").exists()
    options = "mode=ro" if wal_pending else "mode=ro&immutable=1"
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?{options}", uri=True)
    except sqlite3.Error as error:
        raise ValueError(f"db: could not open {str(path)!r} read-only to check it: {error}") from None
    try:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "meta" not in tables:
            raise ValueError(
                f"db: expected an mhalearn results file, {str(path)!r} is an SQLite database "
                f"without the mhalearn marker (tables: {sorted(tables) or 'none'}); refusing to modify it"
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
    if meta.get("schema_version") != str(SCHEMA_VERSION):
        raise ValueError(
            f"db: expected results schema version {SCHEMA_VERSION}, {str(path)!r} has version "
            f"{meta.get('schema_version')!r}"
        )


class ResultStore:
    """One SQLite results file: finished cells of any number of experiments.

    Parameters
    ----------
    path : str or os.PathLike
        The results file.  It is created when missing (or empty); an
        existing file that is not an mhalearn results file raises
        ``ValueError`` and is left untouched.
    create : bool
        Create the file when it is missing; with False a missing file raises
        ``ValueError`` (for readers such as ``mhalearn plot``).

    Notes
    -----
    Use as a context manager, or call :meth:`close`.  Only one process
    should write to a store at a time (the sweep's coordinator).
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = True):
        self.path = Path(path)
        self._connection = None
        if self.path.is_dir():
            raise ValueError(f"db: expected a results file, {str(self.path)!r} is a directory")
        existing = self.path.exists() and self.path.stat().st_size > 0
        if existing:
            _inspect_existing(self.path)
        elif not create:
            raise ValueError(f"db: no results file at {str(self.path)!r} (run `mhalearn sweep` to create one)")
        elif not self.path.parent.is_dir():
            raise ValueError(f"db: directory {str(self.path.parent)!r} of the results file does not exist")
        self._connection = sqlite3.connect(self.path, timeout=30.0)
        self._connection.execute("PRAGMA journal_mode = WAL")
        self._connection.execute("PRAGMA synchronous = NORMAL")
        if existing:
            return
        with self._connection:
            self._connection.executescript(_SCHEMA)
            self._connection.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('format', ?)", (FORMAT_TAG,))
            self._connection.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema_version', ?)",
                                     (str(SCHEMA_VERSION),))

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

    # -------------------------------------------------------------------- write
    def record(self, experiment: str, cell: dict, metrics: dict, *, status: str = STATUS_OK,
               error: str | None = None, seconds: float = 0.0, host: str | None = None,
               replace: bool = False) -> bool:
        """Store the result of one cell and commit.

        Parameters
        ----------
        experiment : str
            Experiment name.
        cell : dict
            The cell's parameters (flat JSON scalars).
        metrics : dict
            What the cell returned (flat JSON scalars; empty for a failure).
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

        Returns
        -------
        bool
            True when a row was written, False when the key was already
            stored and ``replace`` is False.
        """
        if status not in (STATUS_OK, STATUS_FAILED):
            raise ValueError(f"status: expected 'ok' or 'failed', received {status!r}")
        key = cell_key(experiment, cell)
        _check_flat_scalars(metrics, "metrics")
        verb = "INSERT OR REPLACE" if replace else "INSERT OR IGNORE"
        with self.connection:
            cursor = self.connection.execute(
                f"{verb} INTO results (experiment, cell_key, params, metrics, status, error, seconds, host, "
                "finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (experiment, key, json.dumps(cell, sort_keys=True), json.dumps(metrics, sort_keys=True),
                 status, error, float(seconds), host or socket.gethostname(),
                 datetime.now(timezone.utc).isoformat(timespec="seconds")),
            )
        return cursor.rowcount > 0

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

    def iter_records(self, experiment: str) -> Iterator[dict]:
        """Every stored row of ``experiment`` with its bookkeeping, in insertion order.

        Each item has ``params`` and ``metrics`` (dicts), ``status``,
        ``error``, ``seconds``, ``host``, ``finished_at`` and ``cell_key``.
        """
        cursor = self.connection.execute(
            "SELECT cell_key, params, metrics, status, error, seconds, host, finished_at FROM results "
            "WHERE experiment = ? ORDER BY id", (experiment,))
        for key, params, metrics, status, error, seconds, host, finished_at in cursor:
            yield {"cell_key": key, "params": json.loads(params), "metrics": json.loads(metrics),
                   "status": status, "error": error, "seconds": seconds, "host": host,
                   "finished_at": finished_at}

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

