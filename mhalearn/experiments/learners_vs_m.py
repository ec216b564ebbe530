"""The ``learners-vs-m`` experiment: every learner on the same teachers as the number of heads m grows.

:class:`~mhalearn.SculptLearner`, :class:`~mhalearn.MomentLearner` and
:class:`~mhalearn.GradientLearner` (:data:`GRADIENT_RESTARTS` random starts)
face the same planted teachers — the teacher depends on (family, m, d, k,
seed) only (:func:`~mhalearn.evaluation.plant_instance`) — at d > k, where
Chen & Li's body can detect agreement rows, each on its own log grid of n.

A grid (``grids/learners-vs-m.toml``) gives the axes shared by every learner
(``family``, ``noise``, ``seed``), the ``shapes`` (d, k) and one entry of
``learners`` per learner: its ``heads`` and ``samples`` and, optionally,
``max_samples``, the largest n this grid lets it run, and its own ``family``,
``noise`` or ``seed`` in place of the shared ones.  Every combination is a
cell.  A cell the learner cannot afford (n above ``max_samples``) or cannot
serve (too few labels for its unknowns, a moment route beyond the memory
budget) is kept as a row with ``not_run`` saying why, and no metrics: it is
never dropped, and a figure counts its teacher as censored where it matters.
``not_run`` is part of the cell, so raising ``max_samples`` makes new cells
that run, and their rows supersede the "not run" ones (:func:`run_rows`).

Each row that ran keeps:

``unpolished_error``
    Relative test error of the pipeline's output before any polish: for the
    span learners ``least_squares_model_`` (the held-out best net candidate,
    W by least squares), for gradient descent its model (it has no polish).
``route``
    What produced that output: ``"body"`` (Chen & Li's sculpted body gave
    the span), ``"moment"`` (our moment route gave it: always for
    :class:`~mhalearn.MomentLearner`, for :class:`~mhalearn.SculptLearner`
    when the body refused or lost to it, see ``report_.route``) or
    ``"gradient"``.
``polished_error``
    Relative test error of ``model_`` (after the L-BFGS polish of the span
    learners; the same model for gradient descent).
``fit_seconds``
    The learner's own fit time (observers excluded), and ``samples`` n.

Figures: samples to reach ε against m, one line per learner, per family and
shape, for the unpolished error (ε = :data:`UNPOLISHED_EPSILON`) and the
polished one (ε = :data:`POLISHED_EPSILON`): the median over teachers of each
teacher's samples-to-ε (:func:`teacher_samples_to_epsilon`) with a 90 %
percentile-bootstrap interval over teachers; a teacher that never reaches ε
counts as "> the largest n run" (censored), and a median or interval end that
is censored is drawn as such.  A second table gives the success rate —
polished error ≤ :data:`SUCCESS_ERROR` — per (family, m, n), the measure of
the hard-teacher families (:mod:`mhalearn.attention.hard_teachers`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..attention.model import relative_error
from ..evaluation import fit_timed, measure, plant_instance
from ..learners import get_learner
from ..plotting import group_rows, save_figure, style_for, write_tables
from ..sparse_variables.growth import bootstrap_median
from .learning import learning_constraints
from .registry import Experiment, axes_count, check_drawn_memory, expand_grid, register_experiment

#: The learners, in plotting order.
LEARNER_ORDER = ("sculpt", "moment", "gradient")
#: Random starts of gradient descent (the hard-teacher criterion of issue 34 is stated for 5).
GRADIENT_RESTARTS = 5
#: Samples-to-ε targets: the unpolished output and the polished model.
UNPOLISHED_EPSILON = 1e-2
POLISHED_EPSILON = 1e-6
#: A fit counts as a recovery when its polished relative test error is at most this.
SUCCESS_ERROR = 1e-6
#: Level of the bootstrap intervals over teachers.
LEVEL = 0.9

#: Keys of a grid table shared by every learner; ``shapes`` and ``learners`` are lists of tables.
SHARED_FIELDS = ("family", "noise", "seed")
#: The fields of a cell, in the order the axes nest (the last varies fastest).
CELL_FIELDS = ("learner", "family", "dim", "length", "noise", "heads", "seed", "samples", "not_run")
#: The hyper-parameters each learner gets beyond ``heads`` and ``random_state``.
HYPERPARAMETERS = {"gradient": {"restarts": GRADIENT_RESTARTS}}


def _check_table_list(table: dict, key: str, fields: tuple, optional: tuple = (), *, experiment: str) -> list[dict]:
    """The list of tables ``table[key]`` (each with ``fields`` and optionally ``optional``), else a
    ValueError naming ``experiment``, the experiment whose grid it is."""
    entries = table.get(key)
    if not isinstance(entries, list) or not entries or not all(isinstance(entry, dict) for entry in entries):
        raise ValueError(f"grid: {experiment} needs {key!r}, a non-empty list of tables with the keys "
                         f"{list(fields)}, received {entries!r}")
    for entry in entries:
        unknown = sorted(set(entry) - set(fields) - set(optional))
        missing = [name for name in fields if name not in entry]
        if unknown or missing:
            raise ValueError(f"grid: an entry of {key!r} of {experiment} has unknown keys {unknown} or lacks "
                             f"{missing} (expected {list(fields)}, optionally {list(optional)}): {entry!r}")
    return entries


def learners_vs_m_cells(table: dict) -> list[dict]:
    """The cells of a grid table: learners × their m and n × families × shapes × noise × seeds.

    Refuses d ≤ k (the body cannot run there) and unknown learners.  A
    learner's cells above its ``max_samples``, or with a shape or size it
    refuses (:meth:`_check_shape`), get ``not_run`` = the reason; the others
    ``not_run`` = "".
    """
    extra = sorted(set(table) - set(SHARED_FIELDS) - {"shapes", "learners"})
    if extra:
        raise ValueError(f"grid: expected the keys {[*SHARED_FIELDS, 'shapes', 'learners']} of 'learners-vs-m', "
                         f"received unknown keys {extra}")
    shapes = _check_table_list(table, "shapes", ("dim", "length"), experiment="learners-vs-m")
    learners = _check_table_list(table, "learners", ("learner", "heads", "samples"), ("max_samples", *SHARED_FIELDS),
                                 experiment="learners-vs-m")
    shared = {key: table[key] for key in SHARED_FIELDS if key in table}
    cells = []
    for entry in learners:
        learner_class = get_learner(entry["learner"])
        cap = entry.get("max_samples")
        for shape in shapes:
            if shape["dim"] <= shape["length"]:
                raise ValueError(f"grid: learners-vs-m compares the learners where Chen & Li's body can run, "
                                 f"d > k; received dim = {shape['dim']}, length = {shape['length']}")
            grid = {**shared, **{key: entry[key] for key in SHARED_FIELDS if key in entry}, **shape,
                    "learner": entry["learner"], "heads": entry["heads"], "samples": entry["samples"],
                    "not_run": ""}
            for cell in expand_grid(grid, CELL_FIELDS, experiment="learners-vs-m",
                                    constraints=learning_constraints()):
                cell["not_run"] = _why_not_run(learner_class, cell, cap)
                cells.append(cell)
    return check_drawn_memory(cells, "learners-vs-m")


def learners_vs_m_count(table: dict) -> int:
    """The cells of a grid table, counted without expanding it: per learner entry and shape, its axes."""
    shared = {key: table[key] for key in SHARED_FIELDS if key in table}
    shapes, learners = table.get("shapes"), table.get("learners")
    if not isinstance(shapes, list) or not isinstance(learners, list):
        return axes_count(table)
    return len(shapes) * sum(axes_count({**shared, **entry}) for entry in learners if isinstance(entry, dict))


def _why_not_run(learner_class, cell: dict, cap: int | None) -> str:
    """Why the cell is not run ("" when it is): above the grid's cap, or refused by the learner's checks."""
    if cap is not None and cell["samples"] > cap:
        return f"n above this grid's cap for {cell['learner']}, max_samples = {cap}"
    try:
        learner_class(cell["heads"], **HYPERPARAMETERS.get(cell["learner"], {}))._check_shape(
            cell["samples"], cell["length"], cell["dim"])
    except ValueError as error:
        return str(error)
    return ""


def run_learners_vs_m_cell(cell: dict) -> dict:
    """Plant the cell's teacher, fit its learner with a teacher observer, measure both outputs.

    A cell with ``not_run`` computes nothing and returns ``{"ran": False}``.
    """
    if cell["not_run"]:
        return {"ran": False}
    teacher, X, Y, X_test = plant_instance(heads=cell["heads"], dim=cell["dim"], length=cell["length"],
                                           samples=cell["samples"], family=cell["family"], noise=cell["noise"],
                                           seed=cell["seed"])
    estimator = get_learner(cell["learner"])(cell["heads"], random_state=cell["seed"],
                                             **HYPERPARAMETERS.get(cell["learner"], {}))
    fit_seconds, observer = fit_timed(estimator, X, Y, teacher)
    metrics = measure(estimator, teacher, X, Y, X_test, fit_seconds, observer)
    unpolished = getattr(estimator, "least_squares_model_", estimator.model_)
    report = estimator.report_
    return {
        "ran": True,
        "unpolished_error": relative_error(unpolished, teacher, X_test),
        "polished_error": metrics.pop("test_error"),
        "route": str(getattr(report, "route", "gradient")),
        "route_reason": getattr(report, "fallback", None) or getattr(report, "route_reason", None),
        **metrics,
    }


# -------------------------------------------------------------------- summaries

#: Keys of one teacher's series of cells (everything but n).
TEACHER_KEYS = ("family", "dim", "length", "noise", "learner", "heads", "seed")


def run_rows(rows: list[dict]) -> list[dict]:
    """The rows to count: a "not run" row is dropped only where a row of the same cell ran (a raised cap)."""
    ran = {tuple(row[key] for key in (*TEACHER_KEYS, "samples")) for row in rows if row.get("ran")}
    return [row for row in rows if row.get("ran")
            or tuple(row[key] for key in (*TEACHER_KEYS, "samples")) not in ran]


def teacher_samples_to_epsilon(cells: list[dict], key: str, epsilon: float) -> tuple[float, int | None]:
    """One teacher's samples to reach ε, and the largest n it ran at.

    The smallest n at which ``key`` ≤ ε and stays so at every larger n that
    ran (a later failure undoes an earlier success); ``math.inf`` when the
    largest n run misses ε (censored: "> largest n"); NaN when no cell ran.
    """
    ran = sorted((row["samples"], row[key]) for row in cells if row.get("ran"))
    if not ran:
        return math.nan, None
    needed = math.inf
    for samples, error in reversed(ran):
        if error is None or not error <= epsilon:
            break
        needed = samples
    return float(needed), ran[-1][0]


def samples_to_epsilon_table(rows: list[dict], key: str, epsilon: float, level: float = LEVEL) -> list[dict]:
    """Per (family, d, k, noise, learner, m): the median over teachers of samples-to-ε and its bootstrap interval.

    Every teacher with a run cell counts; ``censored`` counts those that
    never reached ε, ``not_run`` those with no run cell at all (left out of
    the median, stated beside it).
    """
    rows = run_rows(rows)
    summary = []
    group_keys = ["family", "dim", "length", "noise", "learner", "heads"]
    for group, cells in group_rows(rows, group_keys).items():
        per_teacher = [teacher_samples_to_epsilon(mine, key, epsilon)
                       for mine in group_rows(cells, ["seed"]).values()]
        values = [needed for needed, _ in per_teacher if not math.isnan(needed)]
        largest = max((top for _, top in per_teacher if top is not None), default=None)
        entry = dict(zip(group_keys, group))
        entry.update(teachers=len(per_teacher), counted=len(values), censored=sum(map(math.isinf, values)),
                     not_run=len(per_teacher) - len(values), largest_run=largest)
        if values:
            entry["median"], entry["low"], entry["high"] = bootstrap_median(values, level=level)
        else:
            entry["median"] = entry["low"] = entry["high"] = math.nan
        summary.append(entry)
    return summary


def success_table(rows: list[dict], threshold: float = SUCCESS_ERROR) -> list[dict]:
    """Per (family, d, k, noise, learner, m, n) that ran: fits with polished error ≤ ``threshold``, of how many."""
    summary = []
    group_keys = ["family", "dim", "length", "noise", "learner", "heads", "samples"]
    for group, cells in group_rows([row for row in run_rows(rows) if row.get("ran")], group_keys).items():
        errors = [row["polished_error"] for row in cells]
        summary.append({**dict(zip(group_keys, group)), "teachers": len(cells),
                        "successes": sum(error <= threshold for error in errors),
                        "median_error": float(np.median(errors))})
    return summary


def _format_samples(value: float, largest: int | None) -> str:
    if math.isnan(value):
        return "not run"
    if math.isinf(value):
        return f"> {largest:g}" if largest is not None else "> max n"
    return f"{value:g}"


def format_interval(entry: dict) -> str:
    """``median [low, high]``, censored ends as ``> largest n run``."""
    largest = entry["largest_run"]
    return (f"{_format_samples(entry['median'], largest)} "
            f"[{_format_samples(entry['low'], largest)}, {_format_samples(entry['high'], largest)}]")


# ---------------------------------------------------------------------- figure

def _learners_in(rows: list[dict]) -> list[str]:
    present = {row["learner"] for row in rows}
    return [name for name in LEARNER_ORDER if name in present] + sorted(present - set(LEARNER_ORDER))


def plot_learners_vs_m(rows: list[dict], out_dir: Path) -> list[Path]:
    """Samples to reach ε against m per learner; rows of panels: shape × (unpolished, polished), columns: families.

    Solid lines are noiseless, dashed ones label noise 0.1 (any nonzero σ);
    a ">" labelled "> n" marks a censored median (most teachers never
    reached ε by the largest n run, drawn at 2n), and a censored interval end
    is drawn at 2n too.  Writes ``learners-vs-m.png`` and
    ``learners-vs-m.txt`` (the tables of the docs page) in ``out_dir``.
    """
    if not rows:
        raise ValueError("rows: expected stored results of learners-vs-m, received none (run the sweep first)")
    out_dir = Path(out_dir)
    learners = _learners_in(rows)
    families = sorted({row["family"] for row in rows}, key=lambda name: (name != "random", name))
    shapes = sorted({(row["dim"], row["length"]) for row in rows})
    noises = sorted({row["noise"] for row in rows})
    criteria = [("unpolished_error", UNPOLISHED_EPSILON, "unpolished"),
                ("polished_error", POLISHED_EPSILON, "polished")]
    tables = {name: samples_to_epsilon_table(rows, key, epsilon) for key, epsilon, name in criteria}
    heads_values = sorted({row["heads"] for row in rows})
    import matplotlib.pyplot as plt

    panel_rows = [(shape, criterion) for shape in shapes for criterion in criteria]
    fig, axes = plt.subplots(len(panel_rows), len(families), figsize=(4.2 * len(families), 3.4 * len(panel_rows)),
                             squeeze=False, sharex=True, sharey=True, layout="constrained")
    for (shape, (key, epsilon, name)), axes_row in zip(panel_rows, axes):
        for family, ax in zip(families, axes_row):
            for learner in learners:
                style = style_for(learner, learners)
                for noise in noises:
                    entries = [entry for entry in tables[name] if entry["family"] == family
                               and (entry["dim"], entry["length"]) == shape and entry["learner"] == learner
                               and entry["noise"] == noise and entry["counted"]]
                    if not entries:
                        continue
                    x = np.array([entry["heads"] for entry in entries], dtype=float)
                    x += (learners.index(learner) - 1) * 0.1 + (0.03 if noise else 0.0)
                    # A censored value ("> largest n run") is drawn at twice that n, marked and labelled.
                    ceilings = np.array([2.0 * entry["largest_run"] for entry in entries])
                    median, low, high = (np.minimum([entry[end] for entry in entries], ceilings)
                                         for end in ("median", "low", "high"))
                    ax.errorbar(x, median, yerr=[median - low, high - median], color=style["color"],
                                marker=style["marker"], ms=4, lw=1.4, capsize=2,
                                linestyle="-" if noise == 0 else "--",
                                label=f"{learner}, σ = {noise:g}")
                    labelled = set()
                    for at, value, ceiling, entry in zip(x, median, ceilings, entries):
                        if value >= ceiling:
                            ax.scatter([at], [value], marker="$>$", s=60, color=style["color"], zorder=3)
                            if entry["largest_run"] not in labelled:  # once per line and n, not per point
                                labelled.add(entry["largest_run"])
                                ax.annotate(f"> {entry['largest_run']:g}", (at, value), textcoords="offset points",
                                            xytext=(3, 4), fontsize=6, color=style["color"])
            ax.set_yscale("log")
            ax.set_title(f"{family}, d = {shape[0]}, k = {shape[1]}", fontsize=9)
            ax.set_ylabel(f"n to {name} error ≤ {epsilon:g}", fontsize=8)
            ax.set_xticks(heads_values)
            ax.grid(True, which="major", alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("heads m")
    axes[0][0].legend(fontsize=6)
    # Two lines, so that a figure of one family (one column of panels) holds the whole title.
    fig.suptitle(f"learners-vs-m: median over teachers of the samples to reach ε,\n{LEVEL:.0%} bootstrap interval; "
                 f"gradient descent with {GRADIENT_RESTARTS} restarts", fontsize=9)
    text_tables = [
        (f"samples to {name} relative test error <= {epsilon:g}: median over teachers [{LEVEL:.0%} bootstrap "
         "interval]; censored = teachers that never reached it at the largest n run (counted as > that n)",
         ["family", "d", "k", "noise", "learner", "m", "teachers", "censored", "not_run", "largest_n_run",
          "samples_to_eps"],
         [(entry["family"], entry["dim"], entry["length"], entry["noise"], entry["learner"], entry["heads"],
           entry["teachers"], entry["censored"], entry["not_run"], entry["largest_run"], format_interval(entry))
          for entry in tables[name]])
        for key, epsilon, name in criteria]
    text_tables.append((f"success = polished relative test error <= {SUCCESS_ERROR:g}",
                        ["family", "d", "k", "noise", "learner", "m", "n", "successes", "teachers", "median_error"],
                        [(entry["family"], entry["dim"], entry["length"], entry["noise"], entry["learner"],
                          entry["heads"], entry["samples"], entry["successes"], entry["teachers"],
                          entry["median_error"]) for entry in success_table(rows)]))
    routes = [(learner, route, count) for (learner, route), group in
              group_rows([row for row in rows if row.get("ran")], ["learner", "route"]).items()
              for count in [len(group)]]
    text_tables.append(("routes that produced the unpolished output (cells that ran)", ["learner", "route", "cells"],
                        routes))
    return [save_figure(fig, out_dir / "learners-vs-m.png"),
            write_tables(out_dir / "learners-vs-m.txt", text_tables)]


register_experiment(Experiment(
    "learners-vs-m",
    "sculpt, moment and gradient on the same teachers at d > k: samples to reach ε (unpolished and polished) vs m",
    learners_vs_m_cells, run_learners_vs_m_cell, plot_learners_vs_m, count=learners_vs_m_count))


def provenance_statement(path, experiment: str = "learners-vs-m", others=()) -> str:
    """Which code computed the rows of ``experiment`` in the results file ``path``, in one sentence.

    Derived from the rows' own provenance columns (git commit, dirty flag,
    hash of the package source): rows from a tree with uncommitted changes
    say so, and whether their package source is byte-identical to the one
    of rows computed from a clean commit (the same ``source_hash``), so that
    the page quoting it cannot claim a cleaner provenance than the rows hold.
    Clean commits are looked for in the rows of ``path`` and of the results
    files ``others`` too.
    """
    from collections import Counter

    from .store import ResultStore

    def provenances(file) -> list[dict]:
        with ResultStore(file, readonly=True) as store:
            return [record["provenance"] or {} for record in store.iter_records(experiment)]

    def key(provenance: dict) -> tuple:
        return provenance.get("git_commit"), bool(provenance.get("git_dirty")), provenance.get("source_hash")

    groups = Counter(map(key, provenances(path)))
    clean = {source: commit for file in (path, *others) for commit, dirty, source in map(key, provenances(file))
             if not dirty and commit}
    parts = []
    for (commit, dirty, source), count in groups.items():
        name = (commit or "unknown")[:7]
        if not dirty:
            parts.append(f"{count} by {name}")
        elif source in clean:
            parts.append(f"{count} by {name} with uncommitted changes, package source identical to "
                         f"{clean[source][:7]}'s")
        else:
            parts.append(f"{count} by {name} with uncommitted changes to a package source no clean commit's "
                         f"rows share (src.{source})")
    return f"`{Path(path).name}`: " + "; ".join(parts)
