"""The ``sparse-variables`` experiments ([design: sparse-variables], [design: experiments]).

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022.

**Claim tested.**  A bounded-norm attention head learns an s-sparse function
g(x_S) of x ∈ {±1}^T from a number of samples growing like log T (its
covering number grows like log T), whereas a network on the raw bits pays
for every coordinate.  Here s = 3, g ∈ {AND, majority, parity} and
T = 16 … 4096: log growth predicts a factor ln 4096/ln 16 = 3 between the
ends, √T growth a factor 16, linear growth 256.

**Cell.**  One cell is (g, student, T, seed): the student is trained on
nested training sets (the first n examples of one stream per seed) and
:func:`~mhalearn.sparse_variables.growth.bisect_samples` finds the smallest n at
which its test accuracy on 4000 fresh examples reaches 95 %, doubling n from
8 and then bisecting on log n to a factor 2^(1/4) ≈ 1.19 (better than the √2
of a √2-spaced grid), up to n = 16 384.  The cell stores that n (None when
not reached), every probe (n, accuracy) and, at the largest n probed, the
training accuracy and the loss curve.  The support S and the data depend on
(g, s, T, seed) and not on the student, so all students of a seed see the
same examples.

**Students.**  The attention head and the MLP on raw bits of
:mod:`mhalearn.sparse_variables.students`, both trained by AdamW with the hyper-parameters in
:data:`FROZEN_HYPERPARAMETERS`, which were chosen by the
``sparse-variables-tuning`` experiment on tasks that are not evaluated
(s = 2 AND and s = 2 parity, other seeds) and then frozen.  For parity a third
learner, :class:`~mhalearn.sparse_variables.parity_search.SparseParitySearch`, minimises the empirical
risk over all parities of 3 bits without gradients: it isolates the
statistical claim (log₂ C(T, 3) ≈ 3 log₂ T samples) from the computational
barrier that gradient methods face on parity (steps growing like T^{s−1}).

**Summaries** (``mhalearn plot sparse-variables``,
:mod:`~mhalearn.sparse_variables.summary`): the median over seeds of
the per-seed samples-to-95 % with a 90 % bootstrap interval, and for each
(g, student) the fits n = a + b·ln T and n = c·T^α with α's and b's 90 %
intervals, which law fits better (AIC on ln n and prediction of the largest
T from the others), and the growth from T = 16 to T = 4096.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from pathlib import Path

import numpy as np

from .._validation import Integer, Options, Real
from ..plotting import write_tables
from ..seeding import seeded_rng
from ..sparse_variables import (
    FUNCTIONS,
    GRADIENT_STUDENTS,
    STUDENTS,
    SparseBooleanTask,
    SparseParitySearch,
    logistic_loss,
)
from ..sparse_variables.growth import bisect_samples
from ..sparse_variables.summary import plot_sparse_variables
from .registry import Experiment, expand_grid, refuse_problems, register_experiment, value_problems

#: Target test accuracy of the samples-to-accuracy statistic.
TARGET_ACCURACY = 0.95
#: Fresh test examples per cell (the standard error of an accuracy near 95 % is ≈ 0.35 %).
TEST_SAMPLES = 4000
#: Rows per block of the training stream: the training set of n examples is the first n rows.
STREAM_BLOCK = 1024

#: AdamW hyper-parameters of each gradient-trained student, frozen after the
#: ``sparse-variables-tuning`` sweep (2-sparse AND and parity at T = 64 and 512, seeds 100-101;
#: ``mhalearn sweep sparse-variables-tuning`` then ``mhalearn plot sparse-variables-tuning``):
#: for each student, the setting with the smallest geometric mean of samples-to-95 % over
#: those 8 cells (:func:`best_hyperparameters`; scores 162 and 664, next best 170 and 724).
#: They are also the students' defaults.
FROZEN_HYPERPARAMETERS = {
    "attention": dict(steps=4000, learning_rate=0.01, weight_decay=0.1),
    "mlp": dict(steps=4000, learning_rate=0.03, weight_decay=0.5),
}

#: Keys of a grid table (``grids/sparse-variables.toml``): required, then optional with defaults.
GRID_KEYS = ("series", "sparsity", "lengths", "target", "start", "max_samples", "per_octave")
GRID_DEFAULTS = dict(first_seed=0)
#: Optional grid keys copied into every cell only when the grid gives them (so cells without them keep their keys).
GRID_OPTIONAL_KEYS = ("restarts",)
#: AdamW keys a grid may give as lists (every combination runs), instead of the frozen settings.
HYPERPARAMETER_KEYS = ("steps", "learning_rate", "weight_decay")
SERIES_KEYS = ("function", "student", "seeds")
#: A series may give its own T values instead of the grid's.
SERIES_OPTIONAL_KEYS = ("lengths",)


def _hyperparameter_settings(grid: dict) -> list[dict] | None:
    """The AdamW settings a grid lists (their product), or None when it leaves them to the frozen ones."""
    given = [key for key in HYPERPARAMETER_KEYS if key in grid]
    if not given:
        return None
    if len(given) != len(HYPERPARAMETER_KEYS):
        raise ValueError(f"grid: 'sparse-variables' expected all of {list(HYPERPARAMETER_KEYS)} or none, "
                         f"received only {given}")
    return expand_grid({key: grid[key] for key in HYPERPARAMETER_KEYS}, HYPERPARAMETER_KEYS,
                       experiment="sparse-variables")


#: What each scalar key of a grid table accepts (``lengths`` and the AdamW keys: each of their values).
SCALAR_CONSTRAINTS = {"sparsity": [Integer(1)], "target": [Real(0.0, 1.0, low_open=True)], "start": [Integer(1)],
                      "max_samples": [Integer(1)], "per_octave": [Integer(1)], "first_seed": [Integer(0)],
                      "restarts": [Integer(1)]}
LIST_CONSTRAINTS = {"lengths": [Integer(1)], "steps": [Integer(1)], "learning_rate": [Real(0.0, low_open=True)],
                    "weight_decay": [Real(0.0)]}
SERIES_CONSTRAINTS = {"function": [Options(*FUNCTIONS)], "student": [Options(*STUDENTS)], "seeds": [Integer(1)],
                      "lengths": [Integer(1)]}


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _grid_problems(grid: dict) -> list[str]:
    """Every bad value of a table (its scalar keys, lists and series entries), as messages."""
    problems = [problem for key, rules in SCALAR_CONSTRAINTS.items() if key in grid
                for problem in value_problems(key, [grid[key]], rules)]
    problems += [problem for key, rules in LIST_CONSTRAINTS.items() if key in grid
                 for problem in value_problems(key, _as_list(grid[key]), rules)]
    problems += [f"{key}: expected a non-empty list, received []" for key in LIST_CONSTRAINTS
                 if grid.get(key) == []]
    if all(isinstance(grid.get(key), int) and not isinstance(grid.get(key), bool) and grid[key] >= 1
           for key in ("start", "max_samples")) and grid["start"] > grid["max_samples"]:
        # The search's first probe is start: above max_samples it could probe nothing but the cap.
        problems.append(f"start = {grid['start']} is above max_samples = {grid['max_samples']}, the largest n probed; "
                        f"lower start or raise max_samples")
    series = grid.get("series")
    if not isinstance(series, list) or not series:
        return problems + ["series: expected a non-empty array of tables {function, student, seeds[, lengths]}, "
                           f"received {series!r}"]
    for number, entry in enumerate(series):
        if (not isinstance(entry, dict) or not set(SERIES_KEYS) <= set(entry)
                or not set(entry) <= set(SERIES_KEYS + SERIES_OPTIONAL_KEYS)):
            problems.append(f"series[{number}]: expected the keys {list(SERIES_KEYS)} (optionally "
                            f"{list(SERIES_OPTIONAL_KEYS)}), received {entry!r}")
            continue
        if entry.get("lengths", None) == [] or not isinstance(entry.get("lengths", []), list):
            problems.append(f"series[{number}] lengths: expected a non-empty list of T, received {entry['lengths']!r}")
        problems += [f"series[{number}] {problem}" for key, rules in SERIES_CONSTRAINTS.items() if key in entry
                     for problem in value_problems(key, _as_list(entry[key]), rules)]
    return problems


def sparse_variables_count(grid: dict) -> int:
    """The cells of a table, counted without expanding it (0 for a table too malformed to count)."""
    try:
        settings = math.prod(len(_as_list(grid[key])) for key in HYPERPARAMETER_KEYS) \
            if all(key in grid for key in HYPERPARAMETER_KEYS) else 1
        return sum(len(_as_list(entry.get("lengths", grid.get("lengths", []))))
                   * (entry["seeds"] if isinstance(entry["seeds"], int) else 1)
                   * (settings if entry.get("student") in GRADIENT_STUDENTS else 1)
                   for entry in grid["series"])
    except (KeyError, TypeError, AttributeError):
        return 0  # the expansion names what is wrong


def sparse_variables_cells(grid: dict) -> list[dict]:
    """The (g, student, T, seed) cells of a grid table, with their AdamW settings, as flat dicts.

    Each ``series`` entry runs at every T of ``lengths`` (its own, when it
    gives them) for ``seeds`` seeds counted from ``first_seed``.  Two entries
    naming the same cell make a grid the runner refuses
    (:func:`~mhalearn.experiments.runner.grid_cells`).  The gradient students take the settings the
    grid lists (``steps``, ``learning_rate``, ``weight_decay``: every
    combination) or else :data:`FROZEN_HYPERPARAMETERS`.
    """
    unknown = sorted(set(grid) - set(GRID_KEYS) - set(GRID_DEFAULTS) - set(GRID_OPTIONAL_KEYS)
                     - set(HYPERPARAMETER_KEYS))
    missing = [key for key in GRID_KEYS if key not in grid]
    if unknown or missing:
        raise ValueError(f"grid: 'sparse-variables' expected the keys {list(GRID_KEYS)} (optionally "
                         f"{list(GRID_DEFAULTS) + list(GRID_OPTIONAL_KEYS) + list(HYPERPARAMETER_KEYS)}); "
                         f"unknown {unknown}, missing {missing}")
    grid = {**GRID_DEFAULTS, **grid}
    refuse_problems(_grid_problems(grid), "sparse-variables")
    settings = _hyperparameter_settings(grid)
    cells = []
    for series in grid["series"]:
        function, student = series["function"], series["student"]
        seeds = range(grid["first_seed"], grid["first_seed"] + series["seeds"])
        for length, seed in itertools.product(series.get("lengths", grid["lengths"]), seeds):
            base = dict(function=function, student=student, sparsity=grid["sparsity"], length=length,
                        seed=seed, target=grid["target"], start=grid["start"],
                        max_samples=grid["max_samples"], per_octave=grid["per_octave"])
            if student in GRADIENT_STUDENTS:
                base.update({key: grid[key] for key in GRID_OPTIONAL_KEYS if key in grid})
                cells += [{**base, **setting} for setting in settings or [FROZEN_HYPERPARAMETERS[student]]]
            else:
                cells.append(base)
    return cells


# --------------------------------------------------------------------------
# Data and one cell
# --------------------------------------------------------------------------

def make_task(function: str, *, sparsity: int, length: int, seed: int) -> SparseBooleanTask:
    """The task of (g, s, T, seed): S depends on these and on nothing else."""
    return SparseBooleanTask(length, sparsity, function,
                             rng=seeded_rng(FUNCTIONS.index(function), sparsity, length, seed))


def _stream_key(task: SparseBooleanTask, seed: int) -> list[int]:
    return [FUNCTIONS.index(task.function), task.sparsity, task.length, seed]


def training_set(task: SparseBooleanTask, seed: int, samples: int, cache: dict | None = None):
    """The first ``samples`` examples of the seed's training stream: X int8 (n, T), y (n,).

    The stream is drawn in blocks of :data:`STREAM_BLOCK` rows, block b from
    its own generator, so the set of n examples contains the set of any
    smaller n (nested training sets) however many blocks are drawn.
    ``cache`` (a dict) keeps drawn blocks between calls.
    """
    cache = {} if cache is None else cache
    blocks = -(-samples // STREAM_BLOCK)
    for block in range(blocks):
        if block not in cache:
            generator = seeded_rng(*_stream_key(task, seed), 0, block)
            cache[block] = task.sample(STREAM_BLOCK, rng=generator, dtype=np.int8)
    X = np.concatenate([cache[block][0] for block in range(blocks)])[:samples]
    y = np.concatenate([cache[block][1] for block in range(blocks)])[:samples]
    return X, y


def held_out_set(task: SparseBooleanTask, seed: int, samples: int = TEST_SAMPLES):
    """Fresh test examples of the seed (independent of every training stream): X int8, y."""
    return task.sample(samples, rng=seeded_rng(*_stream_key(task, seed), 1), dtype=np.int8)


def make_student(cell: dict, restart: int = 0):
    """The learner of a cell: a gradient-trained student with the cell's hyper-parameters, or the parity search.

    ``restart`` r > 0 gives a gradient-trained student its own initialisation
    and mini-batch order (seeded by the cell's seed and r); restart 0 is seeded
    by the cell's seed alone, so a cell without restarts is unchanged.
    """
    name = cell["student"]
    if name not in STUDENTS:
        raise ValueError(f"student: expected one of {sorted(STUDENTS)}, received {name!r}")
    if name == "parity-search":
        if cell["function"] != "parity":
            raise ValueError(f"student: 'parity-search' learns parities only, received function {cell['function']!r}")
        if restart:
            raise ValueError(f"restarts: 'parity-search' has no initialisation to restart, received restart {restart}")
        return SparseParitySearch(cell["sparsity"], random_state=cell["seed"])
    seed = cell["seed"] if restart == 0 else seeded_rng(cell["seed"], "restart", restart)
    return STUDENTS[name](random_state=seed, steps=cell["steps"], learning_rate=cell["learning_rate"],
                          weight_decay=cell["weight_decay"])


def training_loss(student, X, y) -> float:
    """Logistic loss of a fitted gradient-trained student on its whole training set (X, y)."""
    return float(logistic_loss(student.decision_function(X), y)[0])


def best_restart(training_losses) -> int:
    """Index of the restart to keep: the smallest training loss (the first of equals).

    Only the training set decides: choosing by test accuracy would make the
    test set part of training and the reported accuracy optimistic.
    """
    losses = np.asarray(training_losses, dtype=float)
    if losses.ndim != 1 or not len(losses) or np.isnan(losses).any():
        raise ValueError(f"training_losses: expected a non-empty list of numbers, received {training_losses!r}")
    return int(np.argmin(losses))


def _downsample(curve: np.ndarray, points: int = 40) -> list[float]:
    """Means of ``points`` equal windows of a loss curve (the curve itself when shorter)."""
    windows = np.array_split(np.asarray(curve, dtype=float), min(points, len(curve)))
    return [round(float(window.mean()), 5) for window in windows]


def run_sparse_variables_cell(cell: dict) -> dict:
    """Samples-to-target of one learner on one task and seed, by bisection on nested training sets.

    Returns ``samples_to_target`` (None when ``max_samples`` does not reach
    the target), ``probes`` (JSON list of [n, test accuracy]), ``fits``,
    ``fit_seconds``; ``support_attention`` (attention student: mean attention
    weight on S at the passing n, or at the largest n when not reached);
    and at the largest n probed ``largest_samples``, ``train_accuracy``,
    ``test_accuracy``, ``final_loss`` (mean of the last 5 % of the loss
    curve) and ``loss_curve`` (JSON, 40 window means).

    A cell with ``restarts`` R (gradient students only) fits R students at
    every n and keeps the one with the smallest training loss
    (:func:`best_restart`); the probes are that student's test accuracy, and
    ``restart_fits`` (JSON list of [n, restart, training loss, test accuracy])
    records every restart, observed after the choice.
    """
    task = make_task(cell["function"], sparsity=cell["sparsity"], length=cell["length"], seed=cell["seed"])
    restarts = cell.get("restarts", 1)
    make_student(cell, restarts - 1)  # bad names and restarts fail before any data is drawn
    X_test, y_test = held_out_set(task, cell["seed"])
    cache: dict = {}
    fitted: dict[int, object] = {}
    restart_fits: list[list] = []
    seconds = 0.0

    def evaluate(samples: int) -> float:
        nonlocal seconds
        X, y = training_set(task, cell["seed"], samples, cache)
        students, losses = [], []
        for restart in range(restarts):
            student = make_student(cell, restart)
            start = time.perf_counter()
            student.fit(X, y)
            seconds += time.perf_counter() - start
            students.append(student)
            losses.append(training_loss(student, X, y) if restarts > 1 else 0.0)
        student = students[best_restart(losses)]
        fitted[samples] = student
        if restarts > 1:
            restart_fits.extend([samples, restart, round(loss, 8), round(other.score(X_test, y_test), 5)]
                                for restart, (loss, other) in enumerate(zip(losses, students)))
        return student.score(X_test, y_test)

    samples, probes = bisect_samples(evaluate, target=cell["target"], start=cell["start"],
                                     max_samples=cell["max_samples"], per_octave=cell["per_octave"])
    largest = max(n for n, _ in probes)
    student = fitted[largest]
    X, y = training_set(task, cell["seed"], largest, cache)
    metrics = {
        "samples_to_target": int(samples) if math.isfinite(samples) else None,
        "probes": json.dumps([[n, round(accuracy, 5)] for n, accuracy in probes]),
        "fits": len(probes), "fit_seconds": seconds,
        "largest_samples": largest, "train_accuracy": student.score(X, y),
        "test_accuracy": dict(probes)[largest],
        "support_attention": None, "final_loss": None, "loss_curve": None,
    }
    if "restarts" in cell:
        metrics["restart_fits"] = json.dumps(restart_fits)
    if cell["student"] == "attention":
        chosen = fitted[int(samples)] if math.isfinite(samples) else student
        metrics["support_attention"] = chosen.support_attention(X_test, task.support)
    if hasattr(student, "loss_curve_"):
        curve = student.loss_curve_
        metrics["final_loss"] = float(curve[-max(1, len(curve) // 20):].mean())
        metrics["loss_curve"] = json.dumps(_downsample(curve))
    return metrics


# --------------------------------------------------------------------------
# Tuning
# --------------------------------------------------------------------------

def _setting_of(row: dict) -> tuple:
    return row["steps"], row["learning_rate"], row["weight_decay"]


def tuning_scores(rows: list[dict]) -> dict[str, list[tuple]]:
    """Per student, the AdamW settings ranked by the geometric mean of samples-to-target over the tuning cells.

    A cell that does not reach the target counts as 2 × its cap.  Returns
    {student: [(score, (steps, learning_rate, weight_decay), cells, not reached), ...]}
    sorted best first.
    """
    ranking: dict[str, list[tuple]] = {}
    for student in sorted({row["student"] for row in rows}):
        groups: dict[tuple, list[float]] = {}
        for row in rows:
            if row["student"] == student:
                value = row["samples_to_target"]
                groups.setdefault(_setting_of(row), []).append(
                    2.0 * row["max_samples"] if value is None else float(value))
        ranking[student] = sorted(
            (float(np.exp(np.mean(np.log(values)))), setting, len(values),
             sum(row["samples_to_target"] is None for row in rows
                 if row["student"] == student and _setting_of(row) == setting))
            for setting, values in groups.items())
    return ranking


def best_hyperparameters(rows: list[dict]) -> dict[str, dict]:
    """The best AdamW setting of each student on the tuning rows (the rule that set :data:`FROZEN_HYPERPARAMETERS`)."""
    return {student: dict(zip(("steps", "learning_rate", "weight_decay"), ranked[0][1]))
            for student, ranked in tuning_scores(rows).items()}


def plot_tuning(rows: list[dict], out_dir: Path) -> list[Path]:
    """Writes ``sparse-variables-tuning.txt``: every setting's score per student, best first, and the frozen ones."""
    if not rows:
        raise ValueError("rows: expected stored results of sparse-variables-tuning, received none "
                         "(run the sweep first)")
    tables = []
    for student, ranked in tuning_scores(rows).items():
        lines = [[steps, rate, decay, score, cells, missed] for score, (steps, rate, decay), cells, missed in ranked]
        tables.append((f"{student}: geometric mean of samples-to-{rows[0]['target']:.0%} over the tuning cells "
                       f"(not reached = 2 × cap), best first; frozen: {FROZEN_HYPERPARAMETERS.get(student)}",
                       ["steps", "learning_rate", "weight_decay", "score", "cells", "not reached"], lines))
    return [write_tables(Path(out_dir) / "sparse-variables-tuning.txt", tables)]


SPARSE_VARIABLES = register_experiment(Experiment(
    name="sparse-variables",
    description="Sparse Boolean functions (AND, majority, parity of 3 of T = 16-4096 bits): samples to 95 % test "
                "accuracy by bisection per seed, attention head vs MLP on raw bits vs parity search, log-T and "
                "power-law fits (Edelman et al. 2022)",
    expand=sparse_variables_cells,
    count=sparse_variables_count,
    run_cell=run_sparse_variables_cell,
    plot=plot_sparse_variables,
))

SPARSE_VARIABLES_TUNING = register_experiment(Experiment(
    name="sparse-variables-tuning",
    description="Choose the AdamW steps, learning rate and weight decay of the sparse-variables students on "
                "tasks that are not evaluated (2-sparse AND and parity, other seeds)",
    expand=sparse_variables_cells,
    count=sparse_variables_count,
    run_cell=run_sparse_variables_cell,
    plot=plot_tuning,
))
