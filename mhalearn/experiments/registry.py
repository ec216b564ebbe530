"""The registry of named experiments (DESIGN.md §5).

An experiment is a named grid of independent cells.  Each experiment module
builds an :class:`Experiment` and calls :func:`register_experiment` at import;
the runner (``mhalearn.experiments.runner``) stores one row per finished cell
and the CLI finds experiments here by name.

Contract for the three callables:

``cells(quick: bool) -> list[dict]``
    The grid.  Each cell is a flat dict of JSON scalars (str, int, float,
    bool) that identifies the cell uniquely, e.g.
    ``{"learner": "sculpt", "heads": 2, "samples": 1000, "seed": 3}``.
``run_cell(cell: dict) -> dict``
    Computes one cell from scratch, deterministically from the cell's own
    parameters (seed included), and returns a flat dict of JSON scalars
    (metrics such as ``test_error``, ``seconds``).  It must be a module-level
    function so it pickles to worker processes and Dask workers.
``plot(rows: list[dict], out_dir: pathlib.Path) -> list[pathlib.Path]``
    Renders PNG figures from the stored rows (each row is the cell merged
    with its metrics) and returns the files written.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from .._validation import check_choice


@dataclass(frozen=True)
class Experiment:
    name: str
    description: str
    cells: Callable[[bool], list[dict]]
    run_cell: Callable[[dict], dict]
    plot: Callable[[list[dict], Path], list[Path]]


EXPERIMENTS: dict[str, Experiment] = {}


def register_experiment(experiment: Experiment) -> Experiment:
    """Add ``experiment`` under its name (names are unique)."""
    if experiment.name in EXPERIMENTS:
        raise ValueError(f"experiment: name {experiment.name!r} is already registered")
    EXPERIMENTS[experiment.name] = experiment
    return experiment


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``; unknown names list the valid ones."""
    check_choice(name, "experiment", EXPERIMENTS)
    return EXPERIMENTS[name]
