"""The registry of named experiments and their grid files ([design: experiments]).

An experiment is a named grid of independent cells.  Each experiment module
builds an :class:`Experiment` and calls :func:`register_experiment` at import;
the runner (``mhalearn.experiments.runner``) stores one row per finished cell
and the CLI finds experiments here by name.

Grids live in TOML files, one per experiment, shipped with the package as
``mhalearn/experiments/grids/NAME.toml``.  A grid file holds a table
``[full]`` (the experiment's grid) and a table ``[quick]`` (the small grid of
``--quick``); a user's file given with ``mhalearn sweep NAME --grid FILE``
has the same form, or is a single grid with its keys at the top level.
Every key of a grid table is a field of every cell: a list is an axis (one
cell per value; every combination of the axes is a cell, the last key
varying fastest), a single value is the same in every cell.  See
``docs/grids.rst``.

Contract for the three callables of an experiment:

``expand(grid: dict) -> list[dict]``
    The cells of a grid table.  Usually :func:`expand_grid` with the
    experiment's field names and the constraints on their values, plus the
    experiment's own rules (e.g. leave out under-determined cells).  Every
    bad value of a table is refused at once, in one ``ValueError`` naming
    each key, value and what was expected.  Each cell is a flat dict of JSON scalars
    (str, int, float, bool) that identifies it uniquely, e.g.
    ``{"learner": "sculpt", "heads": 2, "samples": 1000, "seed": 3}``.
``run_cell(cell: dict) -> dict``
    Computes one cell from scratch, deterministically from the cell's own
    parameters (seed included), and returns a dict of metrics (JSON scalars,
    or dicts of them, which tables flatten to dotted names).  It must be a
    module-level function so it pickles to worker processes and Dask workers.
``plot(rows: list[dict], out_dir: pathlib.Path) -> list[pathlib.Path]``
    Renders PNG figures from the stored rows (each row is the cell merged
    with its metrics) and returns the files written.
``count(grid: dict) -> int`` (optional)
    How many cells ``expand`` makes of a table at most, counted without
    expanding it (default :func:`axes_count`, the product of the axes'
    lengths).  A grid of more than ``max_cells`` cells (default
    :data:`MAX_CELLS`) is refused before it is expanded.
"""

from __future__ import annotations

import importlib
import itertools
import math
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from .._files import node_kind
from .._validation import add_unique, check_allowed, registered

#: The grid tables of a grid file: the experiment's grid and the one of ``--quick``.
GRID_NAMES = ("full", "quick")
_SCALARS = (str, int, float, bool)
#: Cells a sweep accepts in one grid unless told otherwise (``mhalearn sweep --max-cells``).  The
#: cells and their keys are held in memory (measured: 10⁶ learning cells and their keys took 0.5 GB
#: and two minutes to expand on a loaded two-core machine; 10⁷ ran out of memory), and cells take
#: seconds each, so 10⁶ are already days on a few cores: a larger count is almost always a list
#: written where a single value was meant.
MAX_CELLS = 1_000_000


@dataclass(frozen=True)
class Grid:
    """One grid table and where it came from (recorded with the sweep's rows)."""

    experiment: str
    name: str
    table: dict
    source: str
    text: str


@dataclass(frozen=True)
class Experiment:
    """A named experiment: how to expand a grid into cells, compute a cell and plot the rows.

    ``grid_file`` is the TOML file of its grids; None means the packaged
    ``mhalearn/experiments/grids/NAME.toml``.
    """

    name: str
    description: str
    expand: Callable[[dict], list[dict]]
    run_cell: Callable[[dict], dict]
    plot: Callable[[list[dict], Path], list[Path]]
    grid_file: str | Path | None = None
    #: Whether ``run_cell`` takes ``checkpoint_dir=``, where it keeps its long phases so that a cell
    #: interrupted mid-way resumes after them (``mhalearn sweep --checkpoints DIR``).
    checkpoints: bool = False
    #: The cells a table makes at most, counted without expanding it (None: :func:`axes_count`).
    count: Callable[[dict], int] | None = None

    def grid(self, quick: bool = False, path: str | Path | None = None) -> Grid:
        """The grid table to sweep: ``[quick]`` or ``[full]`` of ``path`` (default: the experiment's file)."""
        name = "quick" if quick else "full"
        if path is not None:
            source, text = str(path), _read_text(Path(path), "grid")
        elif self.grid_file is not None:
            source, text = str(self.grid_file), _read_text(Path(self.grid_file), "grid")
        else:
            packaged = resources.files(__package__).joinpath("grids", f"{self.name}.toml")
            if not packaged.is_file():
                raise ValueError(f"grid: experiment {self.name!r} ships no grid file grids/{self.name}.toml")
            source, text = f"mhalearn/experiments/grids/{self.name}.toml", packaged.read_text(encoding="utf-8")
        return Grid(self.name, name, grid_table(parse_grid_file(text, source), name, source), source, text)

    def cells(self, quick: bool = False, path: str | Path | None = None, max_cells: int = MAX_CELLS) -> list[dict]:
        """The cells of :meth:`grid` (``quick`` picks the ``[quick]`` table); see :meth:`expand_table`."""
        return self.expand_table(self.grid(quick, path), max_cells)

    def expand_table(self, grid: Grid, max_cells: int = MAX_CELLS) -> list[dict]:
        """The cells of ``grid``, refused (``ValueError``) before expanding it when it has more than
        ``max_cells``; errors name the grid's file and table."""
        count = (self.count or axes_count)(grid.table)
        where = f"{grid.source} [{grid.name}]"
        if not grid.table:
            raise ValueError(f"grid: {where} is an empty table: it sets none of the keys of {self.name!r}")
        if count > max_cells:
            raise ValueError(f"grid: {where} has {count:,} cells of {self.name!r}, more than the bound of "
                             f"{max_cells:,} (each cell is held in memory and 10⁶ take days on a few cores); "
                             "check for a list written where one value was meant, or raise the bound with "
                             "--max-cells (max_cells=)")
        try:
            return self.expand(grid.table)
        except ValueError as error:
            raise ValueError(f"{error} (in {where})") from None


def _read_text(path: Path, name: str) -> str:
    if not path.is_file():
        kind = node_kind(path)
        raise ValueError(f"{name}: expected a TOML grid file, {str(path)!r} "
                         f"{'does not exist' if kind is None else f'is {kind}'}")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:  # TOML is UTF-8
        raise ValueError(f"{name}: expected a TOML grid file in UTF-8, {str(path)!r} has byte "
                         f"{error.object[error.start]:#04x} at offset {error.start}, which is not UTF-8") from None


def parse_grid_file(text: str, source: str = "<grid>") -> dict:
    """The grid tables of a grid file's text: ``{"full": {...}, "quick": {...}}`` (those present).

    A file without ``[full]`` and ``[quick]`` tables is a single grid, taken
    as ``full``.  Syntax errors raise ``ValueError`` naming the file.
    """
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise ValueError(f"grid: {source} is not valid TOML: {error}") from None
    if not document:
        raise ValueError(f"grid: {source} is empty: it holds no [full] or [quick] table and no key")
    tables = {name: document[name] for name in GRID_NAMES if isinstance(document.get(name), dict)}
    if tables:
        extra = sorted(set(document) - set(tables))
        if extra:
            raise ValueError(f"grid: {source} has keys {extra} outside its tables {sorted(tables)}; "
                             "put every key inside [full] or [quick]")
        return tables
    return {"full": document}


def grid_table(tables: dict, name: str, source: str = "<grid>") -> dict:
    """The table ``name`` of parsed grid tables, or a ``ValueError`` saying which exist."""
    if name not in tables:
        raise ValueError(f"grid: {source} has no [{name}] table (it has {sorted(tables)})")
    return tables[name]


def axes_count(table: dict) -> int:
    """The cells of a table's axes: the product of its lists' lengths (a single value counts once)."""
    return math.prod(len(value) for value in table.values() if isinstance(value, list))


def value_problems(key: str, values, rules: list) -> list[str]:
    """What is wrong with each distinct value of ``values`` for ``key`` under the constraints ``rules``
    (:func:`mhalearn._validation.check_allowed`'s messages), in order; empty when all hold."""
    problems, seen = [], []
    for value in values:
        if any(value == other and type(value) is type(other) for other in seen):
            continue
        seen.append(value)
        try:
            check_allowed(value, key, rules)
        except ValueError as error:
            problems.append(str(error))
    return problems


def refuse_problems(problems: list[str], experiment: str) -> None:
    """Raise one ``ValueError`` listing every problem of a grid table, when there is any."""
    if problems:
        raise ValueError(f"grid: {experiment!r} cannot run this table: {'; '.join(problems)}")


#: The most scalar labels n·k·d a cell may ask for: the kernels count and index them in 64-bit integers.
MAX_LABELS = 2**62


def check_label_counts(cells: list[dict], experiment: str) -> list[dict]:
    """``cells``, refused (ValueError) when a cell's n·k·d scalar labels exceed :data:`MAX_LABELS`."""
    for cell in cells:
        labels = cell["samples"] * cell["length"] * cell["dim"]
        if labels > MAX_LABELS:
            raise ValueError(f"grid: {experiment}: samples = {cell['samples']} with length = {cell['length']} and "
                             f"dim = {cell['dim']} asks for {labels:.3g} scalar labels, more than the "
                             f"{MAX_LABELS:.3g} the kernels' 64-bit counts hold; lower samples")
    return cells


def check_drawn_memory(cells: list[dict], experiment: str, key: str = "samples") -> list[dict]:
    """``cells``, refused (ValueError, one line) when the data a cell draws in memory exceed the memory budget.

    A cell plants its teacher and draws ``cell[key]`` labelled sequences of
    length × dim at once (:func:`~mhalearn.make_dataset`); a size that
    cannot fit is named with the grid, before any cell runs, not as a
    failed row per cell.  Cells with a ``not_run`` reason are not drawn.
    """
    from .._memory import MemoryBudgetError
    from ..attention.data import check_dataset_memory

    problems = []
    for samples, length, dim in sorted({(cell[key], cell["length"], cell["dim"]) for cell in cells
                                        if not cell.get("not_run")}):
        try:
            check_dataset_memory(samples, length, dim, key)
        except MemoryBudgetError as error:
            problems.append(str(error))
    refuse_problems(problems, experiment)
    return cells


def expand_grid(table: dict, fields, *, defaults: dict | None = None, experiment: str = "experiment",
                constraints: dict | None = None) -> list[dict]:
    """Every combination of a grid table's axes, as cells with the keys ``fields``.

    Parameters
    ----------
    table : dict
        Keys → a scalar (the same in every cell) or a non-empty list of
        scalars (an axis).
    fields : sequence of str
        The keys a cell of this experiment has, in the order the axes are
        nested (the last varies fastest).
    defaults : dict, optional
        Values of keys the table may leave out.
    experiment : str
        Name used in error messages.
    constraints : dict, optional
        Key → the constraints one of which each of its values must satisfy
        (:class:`~mhalearn._validation.Integer`, :class:`~mhalearn._validation.Real`,
        :class:`~mhalearn._validation.Options`…, as ``check_allowed`` takes them).

    Returns
    -------
    list of dict

    Raises
    ------
    ValueError
        Unknown or missing keys, nested tables, empty lists, non-finite
        numbers, values outside ``constraints``: all of them in one message.
    """
    defaults, constraints = defaults or {}, constraints or {}
    problems = []
    unknown = sorted(set(table) - set(fields))
    if unknown:
        problems.append(f"expected the keys {list(fields)}, received unknown keys {unknown}")
    values = {**defaults, **table}
    missing = [key for key in fields if key not in values]
    if missing:
        problems.append(f"needs the keys {missing} (expected {list(fields)})")
    axes = []
    for key in fields:
        value = values.get(key)
        options = value if isinstance(value, list) else [value]
        if key in missing:
            continue
        if not options:
            problems.append(f"key {key!r} of {experiment!r} is an empty list")
        scalars = [option for option in options
                   if isinstance(option, _SCALARS) and not (isinstance(option, float) and not math.isfinite(option))]
        problems += [f"{key}: expected a string, number or boolean (or a list of them), received {option!r}"
                     for option in options if not any(option is scalar for scalar in scalars)]
        problems += value_problems(key, scalars, constraints[key]) if key in constraints else []
        axes.append(options)
    refuse_problems(problems, experiment)
    return [dict(zip(fields, combination)) for combination in itertools.product(*axes)]


#: The experiments registered so far, by name.  A packaged experiment is here once its module is imported
#: (:func:`get_experiment` and :func:`load_experiments` import it); a user's is here once registered.
EXPERIMENTS: dict[str, Experiment] = {}

#: The packaged experiments and the module of ``mhalearn.experiments`` that registers each.  A module is
#: imported when one of its experiments is first asked for: together they import the learners, SciPy,
#: scikit-learn and matplotlib (seconds), which a sweep of one experiment, and each of its worker
#: processes, would otherwise pay for all of them.
PACKAGED = {
    "agreement-rate": "agreement_rate",
    "error-vs-samples": "learning",
    "heads-dependence": "learning",
    "learners-vs-m": "learners_vs_m",
    "queries-to-eps": "queries_to_eps",
    "random-features": "random_features",
    "samples-to-eps": "samples_to_eps",
    "sculpt-vs-m": "sculpt_vs_m",
    "sparse-variables": "sparse_variables",
    "sparse-variables-tuning": "sparse_variables",
    "teacher-families": "families",
}


def register_experiment(experiment: Experiment) -> Experiment:
    """Add ``experiment`` under its name (names are unique, packaged ones included)."""
    if experiment.name in PACKAGED:  # its module registers it; a module being imported is not imported again
        importlib.import_module(f"{__package__}.{PACKAGED[experiment.name]}")
    return add_unique(EXPERIMENTS, experiment.name, experiment, "experiment")


def load_experiments() -> dict[str, Experiment]:
    """:data:`EXPERIMENTS` with every packaged experiment in it (importing the modules not yet imported)."""
    for module in sorted(set(PACKAGED.values())):
        importlib.import_module(f"{__package__}.{module}")
    return EXPERIMENTS


def get_experiment(name: str) -> Experiment:
    """The experiment called ``name``, importing its module if it is packaged; unknown names list the valid ones."""
    if name in PACKAGED and name not in EXPERIMENTS:
        importlib.import_module(f"{__package__}.{PACKAGED[name]}")
    return registered(EXPERIMENTS if name in EXPERIMENTS else load_experiments(), name, "experiment")
