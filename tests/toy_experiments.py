"""Toy experiments for the runner, store and CLI tests.

Module-level so the local backend's worker processes and Dask workers can
unpickle ``run_cell`` (they import this module by name; the tests directory
is on their ``sys.path``).  Grids are the TOML files in ``tests/grids/``.

"""

import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

from mhalearn.experiments import Experiment
from mhalearn.experiments.registry import expand_grid

TESTS = Path(__file__).resolve().parent
GRIDS = TESTS / "grids"


def toy_cells(grid: dict) -> list[dict]:
    """Every combination of ``a``, ``b`` (and ``pause``) of a grid table."""
    fields = ("a", "b", "pause") if "pause" in grid else ("a", "b")
    return expand_grid(grid, fields, experiment="toy")


def toy_run_cell(cell: dict) -> dict:
    """Deterministic metrics from the cell; ``a == -1`` raises; ``pause`` sleeps first."""
    if cell["a"] == -1:
        raise ArithmeticError(f"cell {cell['b']} cannot be computed")
    time.sleep(cell.get("pause", 0.0))
    rng = np.random.default_rng([cell["a"], ord(cell["b"])])
    return {"value": float(rng.standard_normal()), "square": cell["a"] ** 2}


def marking_run_cell(cell: dict) -> dict:
    """:func:`toy_run_cell` that first appends the cell to the file named by ``MHALEARN_TEST_MARKER``."""
    with open(os.environ["MHALEARN_TEST_MARKER"], "a") as marker:
        marker.write(json.dumps(cell) + "\n")
    return toy_run_cell(cell)


def toy_plot(rows: list[dict], out_dir: Path) -> list[Path]:
    path = Path(out_dir) / "toy.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{len(rows)} rows\n")
    return [path]


def toy_experiment(name: str, grid: str = "toy", run_cell=toy_run_cell) -> Experiment:
    """A test experiment whose grid is ``tests/grids/GRID.toml``."""
    return Experiment(name, f"test grid {grid}", toy_cells, run_cell, toy_plot, grid_file=GRIDS / f"{grid}.toml")


def toy_cli(experiment: str, grid: str, *arguments: str, marking: bool = False) -> list[str]:
    """``mhalearn ARGUMENTS`` in a fresh interpreter with the toy ``experiment`` (grid ``GRID``) registered."""
    run_cell = "t.marking_run_cell" if marking else "t.toy_run_cell"
    script = (f"import sys; sys.path.insert(0, {str(TESTS)!r}); import toy_experiments as t; "
              "from mhalearn.experiments import register_experiment; from mhalearn.cli import main; "
              f"register_experiment(t.toy_experiment({experiment!r}, {grid!r}, {run_cell})); "
              f"sys.exit(main({list(arguments)!r}))")
    return [sys.executable, "-c", script]


def stored_keys(path) -> list[str]:
    """Cell keys stored in the results file at ``path`` (read-only)."""
    connection = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return [key for (key,) in connection.execute("SELECT cell_key FROM results")]
    finally:
        connection.close()
