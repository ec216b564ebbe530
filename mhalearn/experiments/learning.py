"""The learning experiments ``error-vs-samples`` and ``heads-dependence`` ([design: experiments]).

Both plant a teacher from a registered family, draw ``samples`` noisy
examples from it, fit a registered learner, and measure the relative error
Σ‖F̂(X) − F(X)‖²/Σ‖F(X)‖² on fresh test inputs against the noiseless teacher.

``error-vs-samples``
    learners × m ∈ {1, 2, 3} × n on a log grid × seeds, d = k = 8.  Figure:
    test error vs n per learner on log–log axes (median and interquartile
    band over seeds), one panel per m.
``heads-dependence``
    learners × m ∈ {1, …, 5} × n on a log grid × seeds, d = k = 6.  Figure:
    fit time vs m, candidates scored by the net search vs m, and samples to
    reach ε vs m, where samples-to-ε is the smallest n whose median test
    error over seeds is ≤ ε (:func:`samples_to_epsilon`).

A cell is :func:`mhalearn.evaluation.learn_planted` on its parameters, so
a deterministic function of them: the teacher depends
on (family, m, d, k, seed) only, so every learner and every n of a seed
faces the same teacher; the training set depends on the cell's n as well,
and the learner gets ``random_state=seed``.  Grids leave out the (m, n)
whose n·k·d labels are fewer than twice the 2·m·d² unknowns.  A grid naming
a learner or a family that is not registered, or a value no cell could run
(m, d, n < 1, k < 2, noise < 0, seed < 0, a string or boolean for a number),
is refused before any cell runs, every bad value named
(:func:`learning_constraints`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .. import learners as learner_registry
from .._validation import Integer, Options, Real
from ..attention.teachers import TEACHER_FAMILIES
from ..evaluation import learn_planted
from ..plotting import (
    dodge,
    group_rows,
    new_figure,
    plot_band,
    save_figure,
    set_grid_ticks,
    style_for,
    summarize_curve,
    write_tables,
)
from .registry import Experiment, check_drawn_memory, check_label_counts, expand_grid, register_experiment

#: Learners compared by the experiments, in plotting order.
LEARNER_NAMES = ("gradient", "moment", "sculpt")
#: Test error that counts as "learned" for samples-to-ε.
EPSILON = 1e-2

#: Fields of a cell of either learning experiment, in the order the grid's axes nest.
#: The grids are in ``grids/error-vs-samples.toml`` and ``grids/heads-dependence.toml``.
CELL_FIELDS = ("learner", "family", "heads", "dim", "length", "samples", "noise", "seed")
#: A cell is in a grid only if its n·k·d scalar labels are at least this many times the
#: 2·m·d² unknowns (with fewer, the learners' validation split leaves too few to fit).
LABELS_PER_UNKNOWN = 2


def learning_constraints() -> dict:
    """What each field of a learning cell accepts: the learners and families registered now, and the
    ranges :func:`~mhalearn.evaluation.plant_instance` and the learners' ``fit`` accept (k >= 2: with
    one token Θ is not identifiable)."""
    return {"learner": [Options(*learner_registry.LEARNERS)], "family": [Options(*TEACHER_FAMILIES)],
            "heads": [Integer(1)], "dim": [Integer(1)], "length": [Integer(2)], "samples": [Integer(1)],
            "noise": [Real(0.0)], "seed": [Integer(0)]}


def learning_cells(grid: dict, experiment: str = "learning") -> list[dict]:
    """The cells of a learning grid table: every combination of its axes, less the (m, n) whose n·k·d
    scalar labels are fewer than :data:`LABELS_PER_UNKNOWN` times the 2·m·d² unknowns.

    Every value is checked first against :func:`learning_constraints`.
    """
    cells = check_label_counts(expand_grid(grid, CELL_FIELDS, experiment=experiment,
                                           constraints=learning_constraints()), experiment)
    check_drawn_memory(cells, experiment)
    kept = [cell for cell in cells
            if cell["samples"] * cell["length"] * cell["dim"]
            >= LABELS_PER_UNKNOWN * 2 * cell["heads"] * cell["dim"] * cell["dim"]]
    if cells and not kept:
        first = cells[0]
        raise ValueError(f"grid: every cell of this {experiment} table has fewer than {LABELS_PER_UNKNOWN} "
                         f"scalar labels n·k·d per unknown of 2·m·d², so none can be fitted (e.g. m = "
                         f"{first['heads']}, d = {first['dim']}, k = {first['length']}, n = {first['samples']}: "
                         f"{first['samples'] * first['length'] * first['dim']} labels for "
                         f"{2 * first['heads'] * first['dim'] ** 2} unknowns); raise samples")
    return kept


def error_vs_samples_cells(grid: dict) -> list[dict]:
    """The cells of an ``error-vs-samples`` grid table (see :func:`learning_cells`)."""
    return learning_cells(grid, "error-vs-samples")


def heads_dependence_cells(grid: dict) -> list[dict]:
    """The cells of a ``heads-dependence`` grid table (see :func:`learning_cells`)."""
    return learning_cells(grid, "heads-dependence")


# ---------------------------------------------------------------------- cells

def run_learning_cell(cell: dict) -> dict:
    """Compute one cell of either learning experiment (see :func:`mhalearn.evaluation.learn_planted`)."""
    _, _, metrics = learn_planted(
        cell["learner"], heads=cell["heads"], dim=cell["dim"], length=cell["length"],
        samples=cell["samples"], family=cell["family"], noise=cell["noise"], seed=cell["seed"])
    return metrics


# -------------------------------------------------------------------- figures

def samples_to_epsilon(rows: list[dict], epsilon: float = EPSILON) -> dict[tuple, float]:
    """Smallest n whose median test error over seeds is ≤ ``epsilon``, per (learner, heads).

    Returns ``math.inf`` for a (learner, heads) that never reaches ε on the grid.
    """
    result = {}
    for key, group in group_rows(rows, ["learner", "heads"]).items():
        reached = [point["x"] for point in summarize_curve(group, "samples", "test_error")
                   if point["median"] <= epsilon]
        result[key] = float(min(reached)) if reached else math.inf
    return result


def _learners_in(rows: list[dict]) -> list[str]:
    names = sorted({row["learner"] for row in rows})
    return [name for name in LEARNER_NAMES if name in names] + [name for name in names
                                                                  if name not in LEARNER_NAMES]


def _grid_axes(rows: list[dict], experiment: str) -> tuple[list[str], list[int], list[int]]:
    """The learners (plotting order), m values and n values of an experiment's stored rows."""
    if not rows:
        raise ValueError(f"rows: expected stored results of {experiment}, received none (run the sweep first)")
    return (_learners_in(rows), sorted({row["heads"] for row in rows}),
            sorted({row["samples"] for row in rows}))


def _setting(rows: list[dict]) -> str:
    first = rows[0]
    return f"{first['family']} teacher, d = {first['dim']}, k = {first['length']}, noise σ = {first['noise']}"


def plot_error_vs_samples(rows: list[dict], out_dir: Path) -> list[Path]:
    """Test error vs n per learner (log–log, median and quartile band), one panel per m.

    Writes ``error-vs-samples.png`` and ``error-vs-samples.txt`` (the plotted
    numbers and samples-to-ε) in ``out_dir``.
    """
    names, heads_values, samples_values = _grid_axes(rows, "error-vs-samples")
    out_dir = Path(out_dir)
    fig, axes = new_figure(len(heads_values), sharey=True)
    curves = []
    for ax, heads in zip(axes, heads_values):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for name in names:
            group = [row for row in rows if row["heads"] == heads and row["learner"] == name]
            curve = summarize_curve(group, "samples", "test_error")
            plot_band(ax, curve, label=name, style=style_for(name, names), x_offset=dodge(name, names))
            curves += [(name, heads, p["x"], p["count"], p["q1"], p["median"], p["q3"]) for p in curve]
        ax.axhline(EPSILON, color="0.5", ls=":", lw=1)
        set_grid_ticks(ax, samples_values)
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_title(f"m = {heads}")
        ax.set_xlabel("training samples n")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel("relative test error")
    axes[0].legend(title="learner", fontsize=8)
    fig.suptitle(f"test error vs samples — {_setting(rows)}; median and quartiles over seeds; "
                 f"dotted: ε = {EPSILON}", fontsize=9)
    reach = [(name, heads, value) for (name, heads), value in samples_to_epsilon(rows).items()]
    return [
        save_figure(fig, out_dir / "error-vs-samples.png"),
        write_tables(out_dir / "error-vs-samples.txt", [
            ("relative test error over seeds", ["learner", "m", "n", "seeds", "q1", "median", "q3"], curves),
            (f"samples to reach median test error ≤ {EPSILON}", ["learner", "m", "n_to_eps"], reach),
        ]),
    ]


def plot_heads_dependence(rows: list[dict], out_dir: Path) -> list[Path]:
    """Fit time, candidates scored and samples-to-ε vs m, per learner.

    Fit time and candidates are taken at the largest n of the grid (median
    and quartile band over seeds).  Writes ``heads-dependence.png`` and
    ``heads-dependence.txt`` in ``out_dir``.
    """
    names, heads_values, samples_values = _grid_axes(rows, "heads-dependence")
    out_dir = Path(out_dir)
    largest = samples_values[-1]
    at_largest = [row for row in rows if row["samples"] == largest]
    to_epsilon = samples_to_epsilon(rows)
    fig, (time_ax, candidates_ax, epsilon_ax) = new_figure(3)
    unreached_level = largest * 2
    table = []
    for name in names:
        style = style_for(name, names)
        mine = [row for row in at_largest if row["learner"] == name]
        seconds = summarize_curve(mine, "heads", "fit_seconds")
        plot_band(time_ax, seconds, label=name, style=style, x_offset=dodge(name, names))
        candidates = summarize_curve([row for row in mine if row.get("candidates") is not None],
                                     "heads", "candidates")
        plot_band(candidates_ax, candidates, label=name, style=style, x_offset=dodge(name, names))
        reached = [(heads, to_epsilon[(name, heads)]) for heads in heads_values if (name, heads) in to_epsilon]
        x = np.array([heads for heads, _ in reached], dtype=float) + dodge(name, names, 0.1)
        needed = np.array([value for _, value in reached])
        epsilon_ax.plot(x, np.where(np.isfinite(needed), needed, np.nan), label=name, lw=1.6, ms=5, **style)
        epsilon_ax.scatter(x[~np.isfinite(needed)], [unreached_level] * int(np.sum(~np.isfinite(needed))),
                           marker="^", color=style["color"], s=45, zorder=3)
        by_heads = {point["x"]: point for point in candidates}
        table += [(name, point["x"], point["median"], point["q1"], point["q3"],
                   by_heads[point["x"]]["median"] if point["x"] in by_heads else math.nan,
                   to_epsilon.get((name, point["x"]), math.nan)) for point in seconds]
    time_ax.set_ylabel(f"fit time at n = {largest} (s)")
    candidates_ax.set_ylabel(f"candidates scored (net search) at n = {largest}")
    epsilon_ax.set_ylabel(f"n to reach median test error ≤ {EPSILON}")
    epsilon_ax.set_yscale("log")
    set_grid_ticks(epsilon_ax, samples_values + [unreached_level], axis="y")
    epsilon_ax.set_yticklabels([f"{value:g}" for value in samples_values] + ["not\nreached"])
    epsilon_ax.set_ylim(samples_values[0] / 1.5, unreached_level * 1.5)
    for ax in (time_ax, candidates_ax, epsilon_ax):
        if ax is not epsilon_ax:
            ax.set_yscale("log")
        ax.set_xlabel("heads m")
        ax.set_xticks(heads_values)
        ax.grid(True, which="major", alpha=0.3)
    time_ax.legend(title="learner", fontsize=8)
    if not any(row.get("candidates") is not None for row in at_largest):
        candidates_ax.text(0.5, 0.5, "no learner reported candidates", transform=candidates_ax.transAxes,
                           ha="center")
    fig.suptitle(f"dependence on the number of heads — {_setting(rows)}; median and quartiles over seeds",
                 fontsize=9)
    return [
        save_figure(fig, out_dir / "heads-dependence.png"),
        write_tables(out_dir / "heads-dependence.txt", [(
            f"fit seconds and candidates at n = {largest} (median, quartiles over seeds); samples to ε = {EPSILON}",
            ["learner", "m", "fit_s", "q1", "q3", "candidates", "n_to_eps"], table)]),
    ]


register_experiment(Experiment(
    "error-vs-samples",
    "test error vs number of samples per learner, m = 1, 2, 3 (log-log, median and quartiles over seeds)",
    error_vs_samples_cells, run_learning_cell, plot_error_vs_samples))
register_experiment(Experiment(
    "heads-dependence",
    "fit time, candidates scored and samples to reach ε as the number of heads m grows",
    heads_dependence_cells, run_learning_cell, plot_heads_dependence))
