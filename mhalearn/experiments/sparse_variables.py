"""The ``sparse-variables`` experiment (docs/design.md §4.4, §5).

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022.

For each sparse function g ∈ {AND, parity, majority} of s = 3 hidden bits
among T ∈ {16, 32, 64, 128, 256}, both students of :mod:`mhalearn.sparse`
(the attention head and the MLP on raw bits) are trained on n examples for
n on a √2-spaced grid and several seeds; a cell is
(function, student, T, n, seed) → test accuracy on fresh examples.

The summary statistic is the **samples-to-95 %**: the smallest n of the grid
at which the median test accuracy over seeds reaches 95 %.  Edelman et al.
bound the sample complexity of a bounded-norm attention head by O(log T)
(its covering number grows like log T), while a rotation-invariant learner on
the raw bits needs Ω(T) (Ng, ICML 2004), so the growth from T = 16 to
T = 256 is ≈ log 256 / log 16 = 2 under log growth and 16 under linear growth.

A cell is a deterministic function of its parameters: the support S and
the training and test sets depend on (function, s, T, n, seed) and not on
the student, so the two students of a seed see the same data.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from ..sparse import FUNCTIONS, STUDENTS, SparseBooleanTask
from .figures import (dodge, group_rows, new_figure, plot_band, plt, save_figure, set_grid_ticks, style_for,
                      summarize_curve, write_tables)
from .registry import Experiment, expand_grid, register_experiment

#: Students compared, in plotting order.
STUDENT_NAMES = tuple(STUDENTS)
#: Size of the hidden support.
SPARSITY = 3
#: Target test accuracy of the samples-to-accuracy statistic.
TARGET_ACCURACY = 0.95
#: Fresh test examples per cell (the standard error of an accuracy near 95 % is ≈ 0.35 %).
TEST_SAMPLES = 4000
#: n from 8 to 4096 in steps of √2 (the samples axis of the full grid, and bench/sparse.py's ladder).
SAMPLE_GRID = tuple(int(round(8 * 2 ** (k / 2))) for k in range(19))

#: Fields of a cell, in the order the grid's axes nest (grids in ``grids/sparse-variables.toml``).
CELL_FIELDS = ("function", "student", "sparsity", "length", "samples", "seed")


def sparse_variables_cells(grid: dict) -> list[dict]:
    """Every (function, student, T, n, seed) of a grid table as a flat dict."""
    return expand_grid(grid, CELL_FIELDS, experiment="sparse-variables")


def make_problem(function: str, *, sparsity: int, length: int, samples: int, seed: int,
                 test_samples: int = TEST_SAMPLES):
    """The task and its training and test sets ``(task, X, y, X_test, y_test)``.

    S depends on (function, s, T, seed); the data also on n.
    """
    tag = FUNCTIONS.index(function)
    task = SparseBooleanTask(length, sparsity, function, rng=np.random.default_rng([tag, sparsity, length, seed]))
    rng = np.random.default_rng([tag, sparsity, length, samples, seed, 1])
    X, y = task.sample(samples, rng=rng)
    X_test, y_test = task.sample(test_samples, rng=rng)
    return task, X, y, X_test, y_test


def run_sparse_variables_cell(cell: dict) -> dict:
    """Train one student on one task at one n and seed; return its accuracies and cost.

    For the attention student, ``support_attention`` is the mean attention
    weight the head puts on the hidden support S on test inputs (1 means it
    found S exactly); it is ``None`` for the MLP.
    """
    task, X, y, X_test, y_test = make_problem(cell["function"], sparsity=cell["sparsity"], length=cell["length"],
                                              samples=cell["samples"], seed=cell["seed"])
    if cell["student"] not in STUDENTS:
        raise ValueError(f"student: expected one of {sorted(STUDENTS)}, received {cell['student']!r}")
    student = STUDENTS[cell["student"]](random_state=cell["seed"])
    start = time.perf_counter()
    student.fit(X, y)
    fit_seconds = time.perf_counter() - start
    support_attention = None
    if cell["student"] == "attention":
        support_attention = float(student.attention(X_test)[:, task.support].sum(axis=1).mean())
    return {"test_accuracy": student.score(X_test, y_test), "train_accuracy": student.score(X, y),
            "support_attention": support_attention, "fit_seconds": fit_seconds}


def samples_to_accuracy(rows: list[dict], target: float = TARGET_ACCURACY) -> dict[tuple, float]:
    """Smallest n of the grid whose median test accuracy over seeds is at least ``target``.

    Returns a dict keyed by (function, student, T) whose values are n, or
    ``math.inf`` when no n of the grid reaches the target.
    """
    result = {}
    for key, group in group_rows(rows, ["function", "student", "length"]).items():
        curve = summarize_curve(group, "samples", "test_accuracy")
        reached = [point["x"] for point in curve if point["median"] >= target]
        result[key] = float(min(reached)) if reached else math.inf
    return result


def growth_ratios(thresholds: dict[tuple, float]) -> dict[tuple, float]:
    """Samples-to-accuracy at the largest T over that at the smallest T, per (function, student).

    ``math.inf`` when the largest T never reaches the target, ``nan`` when the smallest T does not.
    """
    ratios = {}
    for function, student in sorted({key[:2] for key in thresholds}):
        lengths = sorted(key[2] for key in thresholds if key[:2] == (function, student))
        low, high = thresholds[(function, student, lengths[0])], thresholds[(function, student, lengths[-1])]
        ratios[(function, student)] = math.nan if math.isinf(low) else high / low
    return ratios


def _as_count(value: float):
    """A finite number of samples as an int (printed exactly); inf and nan unchanged."""
    return int(value) if math.isfinite(value) else value


def growth_exponents(thresholds: dict[tuple, float]) -> dict[tuple, float]:
    """Least-squares slope of log n against log T per (function, student); ``nan`` if a T is not reached.

    Over T from 16 to 256, n ∝ T has slope 1 and n ∝ log T has slope
    log(log 256/log 16)/log 16 = 0.25.
    """
    exponents = {}
    for function, student in sorted({key[:2] for key in thresholds}):
        points = sorted((key[2], value) for key, value in thresholds.items() if key[:2] == (function, student))
        lengths, samples = np.array(points).T
        exponents[(function, student)] = (float(np.polyfit(np.log(lengths), np.log(samples), 1)[0])
                                          if len(points) > 1 and np.all(np.isfinite(samples)) else math.nan)
    return exponents


def _as_count(value: float):
    """A finite number of samples as an int (printed exactly); inf and nan unchanged."""
    return int(value) if math.isfinite(value) else value


def summary_tables(rows: list[dict], target: float = TARGET_ACCURACY) -> list[tuple]:
    """The samples-to-accuracy table and the reference growths, as ``(title, header, lines)`` triples."""
    thresholds = samples_to_accuracy(rows, target)
    lengths = sorted({key[2] for key in thresholds})
    pairs = sorted({key[:2] for key in thresholds}, key=lambda pair: (pair[0], STUDENT_NAMES.index(pair[1])))
    ratios = growth_ratios(thresholds)
    exponents = growth_exponents(thresholds)
    seeds = len({row["seed"] for row in rows})
    first, last = lengths[0], lengths[-1]
    table = (f"samples to {target:.0%} median test accuracy over {seeds} seed{'s' * (seeds > 1)} "
             f"(smallest n of the grid; 'not reached' = above n = {max(row['samples'] for row in rows)}); "
             f"growth T={last}/T={first} and fitted exponent of n ∝ T^k",
             ["function", "student"] + [f"T={length}" for length in lengths] + [f"T={last}/T={first}", "k"],
             [[function, student] + [_as_count(thresholds.get((function, student, length), math.nan))
                                     for length in lengths]
              + [ratios[(function, student)], exponents[(function, student)]] for function, student in pairs])
    log_exponent = math.log(math.log(last) / math.log(first)) / math.log(last / first) if last > first else math.nan
    reference = (f"reference laws over T = {first}..{last}", ["law", f"T={last}/T={first}", "k"],
                 [["n ∝ log T", math.log(last) / math.log(first), log_exponent], ["n ∝ T", last / first, 1.0]])
    return [table, reference]


def _growth_guide(lengths: np.ndarray, anchor_length: float, anchor_samples: float, law: str) -> np.ndarray:
    """The curve through (anchor_length, anchor_samples) that grows like log T or like T."""
    if law == "log":
        return anchor_samples * np.log(lengths) / math.log(anchor_length)
    return anchor_samples * lengths / anchor_length


def plot_sparse_variables(rows: list[dict], out_dir: Path) -> list[Path]:
    """Samples-to-95 % vs T (log–log, one panel per function) and accuracy vs n curves.

    Writes ``sparse-variables.png`` (samples-to-accuracy against T, with
    guides ∝ log T and ∝ T through each student's first point; targets not
    reached are drawn as open markers at the top of the grid),
    ``sparse-variables-accuracy.png`` (median test accuracy and quartiles vs
    n, one panel per function and student, a curve per T) and
    ``sparse-variables.txt`` (the numbers of the first figure).
    """
    if not rows:
        raise ValueError("rows: expected stored results of sparse-variables, received none (run the sweep first)")
    out_dir = Path(out_dir)
    thresholds = samples_to_accuracy(rows)
    functions = [name for name in FUNCTIONS if any(row["function"] == name for row in rows)]
    students = [name for name in STUDENT_NAMES if any(row["student"] == name for row in rows)]
    lengths = sorted({row["length"] for row in rows})
    samples_values = sorted({row["samples"] for row in rows})
    ceiling = max(samples_values) * 2 ** 0.5
    fine = np.geomspace(lengths[0], lengths[-1], 50)

    fig, axes = new_figure(len(functions), sharey=True)
    for ax, function in zip(axes, functions):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        for name in students:
            style = {**style_for(name, students), "linestyle": "-"}  # dashes are for the guides
            values = np.array([thresholds.get((function, name, length), math.nan) for length in lengths])
            reached = np.isfinite(values)
            ax.plot(np.array(lengths)[reached], values[reached], label=name, lw=1.6, ms=6, **style)
            shifted = np.array(lengths, dtype=float) * 2.0 ** dodge(name, students, 0.12)  # keep markers apart
            ax.plot(shifted[~reached], np.full((~reached).sum(), ceiling), ls="none",
                    marker=style["marker"], mfc="none", mec=style["color"], ms=7)
            if reached.any():
                first = int(np.argmax(reached))
                for law, dash in (("log", (0, (4, 2))), ("linear", (0, (1, 2)))):
                    ax.plot(fine[fine >= lengths[first]], _growth_guide(fine[fine >= lengths[first]], lengths[first],
                                                                    values[first], law),
                            color=style["color"], lw=0.9, alpha=0.6, linestyle=dash)
        ax.axhline(ceiling, color="0.6", lw=0.8, ls=":")
        set_grid_ticks(ax, lengths, "x")
        set_grid_ticks(ax, [value for value in samples_values if math.log2(value).is_integer()], "y")
        ax.set_ylim(min(samples_values) / 1.5, ceiling * 1.6)
        ax.set_title(f"{function} of s = {rows[0]['sparsity']} bits")
        ax.set_xlabel("sequence length T")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(f"samples to {TARGET_ACCURACY:.0%} test accuracy\n(median over seeds)")
    axes[0].plot([], [], color="0.4", lw=0.9, linestyle=(0, (4, 2)), label="∝ log T (guide)")
    axes[0].plot([], [], color="0.4", lw=0.9, linestyle=(0, (1, 2)), label="∝ T (guide)")
    axes[0].plot([], [], ls="none", marker="o", mfc="none", mec="0.4", label="not reached")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=5 if len(functions) > 1 else 3,
               fontsize=8)
    fig.suptitle("Sparse variable creation (Edelman et al. 2022)", fontsize=10)
    paths = [save_figure(fig, out_dir / "sparse-variables.png")]

    fig, grid = plt.subplots(len(students), len(functions), figsize=(4.2 * len(functions), 3.4 * len(students)),
                             squeeze=False, sharex=True, sharey=True, layout="constrained")
    names = [f"T={length}" for length in lengths]
    for column, function in enumerate(functions):
        for line, student in enumerate(students):
            ax = grid[line][column]
            ax.set_xscale("log", base=2)
            for length, label in zip(lengths, names):
                group = [row for row in rows if row["function"] == function and row["student"] == student
                         and row["length"] == length]
                curve = summarize_curve(group, "samples", "test_accuracy")
                plot_band(ax, curve, label=label, style=style_for(label, names), x_offset=dodge(label, names))
            ax.axhline(TARGET_ACCURACY, color="0.5", ls=":", lw=1)
            set_grid_ticks(ax, [value for value in samples_values if math.log2(value).is_integer()], "x")
            ax.set_title(f"{function}, {student} student")
            ax.grid(True, which="major", alpha=0.3)
            if line == len(students) - 1:
                ax.set_xlabel("training samples n")
            if column == 0:
                ax.set_ylabel("test accuracy")
    grid[0][0].legend(fontsize=8, loc="lower right")
    paths.append(save_figure(fig, out_dir / "sparse-variables-accuracy.png"))
    paths.append(write_tables(out_dir / "sparse-variables.txt", summary_tables(rows)))
    return paths


SPARSE_VARIABLES = register_experiment(Experiment(
    name="sparse-variables",
    description="Sparse Boolean functions (AND, parity, majority of 3 of T bits): samples to 95 % test "
                "accuracy vs T for a softmax-attention student and an MLP on raw bits (Edelman et al. 2022)",
    expand=sparse_variables_cells,
    run_cell=run_sparse_variables_cell,
    plot=plot_sparse_variables,
))
