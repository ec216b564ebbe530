"""Stored results as tables: CSV and Parquet files of :meth:`ResultStore.to_dataframe` (optional extra ``tables``).

``pip install 'mhalearn[tables]'`` brings pandas and pyarrow (Parquet).
Files are written under a temporary name and renamed into place, so an
interrupted export never leaves half a table.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

TABLE_FORMATS = ("csv", "parquet")


def write_table(frame, path, table_format: str) -> Path:
    """Write a DataFrame to ``path`` as ``"csv"`` (no index) or ``"parquet"`` (pyarrow), atomically.

    Returns the path written.
    """
    if table_format not in TABLE_FORMATS:
        raise ValueError(f"format: expected one of {list(TABLE_FORMATS)}, received {table_format!r}")
    if table_format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError as error:
            raise ImportError("Parquet export needs pyarrow: pip install 'mhalearn[tables]'") from error
    path = Path(path)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
    os.close(descriptor)
    try:
        if table_format == "csv":
            frame.to_csv(temporary, index=False)
        else:
            frame.to_parquet(temporary, index=False, engine="pyarrow")
        os.replace(temporary, path)
    finally:
        if os.path.exists(temporary):
            os.unlink(temporary)
    return path


def read_table(path, table_format: str | None = None):
    """Read a table written by :func:`write_table` back into a DataFrame."""
    import pandas

    table_format = table_format or Path(path).suffix.lstrip(".").lower()
    if table_format not in TABLE_FORMATS:
        raise ValueError(f"format: expected one of {list(TABLE_FORMATS)}, received {table_format!r}")
    return pandas.read_csv(path) if table_format == "csv" else pandas.read_parquet(path, engine="pyarrow")
