"""The SQLite results store of the experiment runner ([design: experiments]).

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
cells that were still being computed.  :class:`~mhalearn.experiments.writer_lock.WriterLock` makes a second
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
- A damaged results file (a table of its schema missing, pages SQLite's
  ``quick_check`` rejects, a row that is not valid JSON) raises
  ``ValueError`` naming the file and what is wrong, on opening or when the
  row is read, and nothing is written to it.
"""

from __future__ import annotations

import json
import math
import os
import socket
import sqlite3
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .._files import check_regular_or_absent
from .._validation import check_optional_dependencies
from .results_file import (
    _MIGRATIONS,
    SCHEMA_VERSION,
    _check_writable,
    _connect_readonly,
    _create_atomically,
    _inspect_existing,
    _now,
    _remove_stale_temporaries,
    read_error,
)
from .writer_lock import describe_write_error

#: Row statuses: the cell returned metrics, or it raised.
STATUS_OK = "ok"
STATUS_FAILED = "failed"

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
    :class:`~mhalearn.experiments.writer_lock.WriterLock`).
    """

    def __init__(self, path: str | os.PathLike, *, create: bool = True, readonly: bool = False,
                 timeout: float = 30.0):
        self.path = Path(path)
        self.readonly = bool(readonly)
        self._connection = None
        # A FIFO or a device is refused before it is opened (a read would block, a creation replace it).
        target = check_regular_or_absent(self.path, "db", "a results file or a new path")
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
        if not target.parent.is_dir():
            raise ValueError(f"db: directory {str(target.parent)!r} of the results file does not exist")
        _check_writable(target)
        if version is None:
            _remove_stale_temporaries(target.parent)
            try:
                _create_atomically(target, replace=target.exists())  # through a symbolic link: the link stays
            except (OSError, sqlite3.OperationalError) as error:
                # A full disk or a file-size limit, before any cell: one line, nothing computed.
                if isinstance(error, sqlite3.OperationalError) and not any(
                        word in str(error) for word in ("disk", "full", "I/O", "readonly")):
                    raise
                raise ValueError(f"db: cannot create {str(self.path)!r}: {describe_write_error(error, timeout)}; "
                                 "nothing was computed") from None
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

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """Report an SQLite or JSON error met while reading rows as a ``ValueError`` naming the file."""
        try:
            yield
        except (sqlite3.DatabaseError, json.JSONDecodeError) as error:
            raise read_error(self.path, error) from None

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
        with self._reading():
            return {key for (key,) in self.connection.execute(query, (experiment,))}

    def count(self, experiment: str | None = None, status: str | None = None) -> int:
        """Number of stored rows, optionally of one experiment and one status."""
        query, args = "SELECT COUNT(*) FROM results WHERE 1 = 1", []
        if experiment is not None:
            query, args = query + " AND experiment = ?", args + [experiment]
        if status is not None:
            query, args = query + " AND status = ?", args + [status]
        with self._reading():
            return int(self.connection.execute(query, args).fetchone()[0])

    def experiments(self) -> list[str]:
        """Names of the experiments with stored rows."""
        with self._reading():
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
        with self._reading():
            for (name, key, params, metrics, status, error, seconds, host, finished_at, code,
                 provenance) in self.connection.execute(query + " ORDER BY id", args):
                yield {"experiment": name, "cell_key": key, "params": json.loads(params),
                       "metrics": json.loads(metrics), "status": status, "error": error, "seconds": seconds,
                       "host": host, "finished_at": finished_at, "code_id": code,
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
        with self._reading():
            return [{"experiment": name, "code_id": code_id,
                     "provenance": None if prov is None else json.loads(prov),
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
        with self._reading():
            return [{"experiment": name, "name": grid_name, "source": source, "grid": json.loads(grid),
                     "toml": toml, "code_id": code_id, "recorded_at": recorded_at}
                    for name, grid_name, source, grid, toml, code_id, recorded_at
                    in self.connection.execute(query + " ORDER BY id", args)]

    def table(self, experiment: str | None = None) -> tuple[list[str], list[dict]]:
        """The stored rows as a table: ``(columns, rows)``, each row a dict of column → value.

        One row per stored cell (of ``experiment``, or of every experiment),
        in insertion order.  Columns: ``experiment``, the grid keys, the
        metrics (nested ones flattened to dotted names, e.g. ``net.candidates``),
        then ``status``, ``error``, ``seconds`` (the cell's wall time),
        ``host``, ``finished_at``, ``code_id`` and the provenance as
        ``provenance.mhalearn``, ``provenance.git_commit``… A metric whose
        name is also a grid key is named ``metrics.NAME``.  A row lacks the
        columns it has no value for (e.g. a metric one learner does not
        report).  Needs nothing beyond the standard library.
        """
        rows = [flatten_record(record) for record in self.iter_records(experiment)]
        return _column_order(rows), rows

    def to_dataframe(self, experiment: str | None = None):
        """The stored rows (:meth:`table`) as a :class:`pandas.DataFrame`; needs the ``tables`` extra (pandas).

        Columns have pandas' nullable dtypes (``Int64``, ``Float64``,
        ``boolean``, ``string``), so missing values (e.g. a metric one
        learner does not report) do not change a column's type.
        """
        from ..tables import dataframe

        check_optional_dependencies("ResultStore.to_dataframe", "tables", "pandas")  # before reading every row
        return dataframe(*self.table(experiment))


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
