"""Stored results as tables: CSV and Parquet files of a results file's rows.

CSV needs nothing beyond the standard library; Parquet (and
:meth:`~mhalearn.experiments.store.ResultStore.to_dataframe`) needs the
``tables`` extra, pandas and pyarrow: ``python3 -m pip install -e '.[tables]'``.
Files are written under a temporary name and renamed into place, so an
interrupted export never leaves half a table.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Sequence

from ._files import written_atomically
from ._validation import check_choice, check_optional_dependencies

TABLE_FORMATS = ("csv", "parquet")


def dataframe(columns: Sequence[str], rows: Sequence[dict]):
    """The ``rows`` (dicts of column → value) as a :class:`pandas.DataFrame` with nullable dtypes.

    Columns have pandas' nullable dtypes (``Int64``, ``Float64``,
    ``boolean``, ``string``), so a column with missing values keeps its type
    and the table reads back from Parquet unchanged.  Needs pandas (the
    ``tables`` extra).
    """
    check_optional_dependencies("tables.dataframe", "tables", "pandas")
    import pandas

    return pandas.DataFrame.from_records(list(rows), columns=list(columns)).convert_dtypes()


def write_table(columns: Sequence[str], rows: Sequence[dict], path, table_format: str) -> Path:
    """Write ``rows`` (dicts of column → value) to ``path`` as a table, atomically.

    Parameters
    ----------
    columns : sequence of str
        Column names, in order; a row without a column leaves its cell empty.
    rows : sequence of dict
        The table's rows, e.g. from
        :meth:`~mhalearn.experiments.store.ResultStore.table`.
    path : str or os.PathLike
        The file written (replaced whole if it exists; a symbolic link is followed; a FIFO, device or
        directory raises ``ValueError``).
    table_format : {"csv", "parquet"}
        CSV (standard library; ``None`` is an empty cell) or Parquet (needs
        pandas and pyarrow, the ``tables`` extra).

    Returns
    -------
    Path
        The path written.
    """
    check_choice(table_format, "format", TABLE_FORMATS)
    path = Path(path)
    if table_format == "parquet":
        check_optional_dependencies("Parquet tables", "tables", "pandas", "pyarrow")
    with written_atomically(path, "out") as temporary:
        if table_format == "csv":
            with open(temporary, "w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=list(columns))
                writer.writeheader()
                writer.writerows(rows)
        else:
            dataframe(columns, rows).to_parquet(temporary, index=False, engine="pyarrow")
    return path


def read_table(path, table_format: str | None = None):
    """Read a table written by :func:`write_table` back into a :class:`pandas.DataFrame` (needs pandas)."""
    table_format = check_choice(table_format or Path(path).suffix.lstrip(".").lower(), "format", TABLE_FORMATS)
    check_optional_dependencies(f"read_table of {table_format}", "tables",
                                *(("pandas",) if table_format == "csv" else ("pandas", "pyarrow")))
    import pandas

    return pandas.read_csv(path) if table_format == "csv" else pandas.read_parquet(path, engine="pyarrow")
