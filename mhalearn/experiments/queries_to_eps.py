"""The ``queries-to-eps`` experiment: per teacher, the fewest queried sequences at which the query learner reaches ε.

The ``samples-to-eps`` protocol with queries for samples.  For each
(family, d, k, σ, m, t, ε, seed) a cell plants the teacher that
``samples-to-eps`` plants for the same (family, m, d, k, seed)
(:func:`~mhalearn.evaluation.plant_instance`: the teacher does not depend on
n), answers :class:`~mhalearn.QueryLearner`'s queries through a
:class:`~mhalearn.QueryOracle` with noise σ, and searches q*, the smallest
number of queries at which the learner's relative error on the fresh test
inputs of that teacher is ≤ ε (``mhalearn.sample_search.search_samples_needed``:
bracket, bisection on log q to 1.25×, censored at ``budget``, a closing probe
at 2× q*).  A probe at q queries fits the learner with the largest
``oversample`` whose :meth:`~mhalearn.QueryLearner.planned_queries` is ≤ q;
the smallest q probed is the learner's design at ``oversample`` = 1, below
which its solves lack rank.  A probe the learner refuses (2m > d) is a
failure with its reason, so a search beyond the learner's reach is censored.

Each row keeps ``queries_needed`` (q*, None when censored),
``queries_lower``, ``censored``, ``probes``, ``non_monotone``,
``separable`` (the learner's verdict at q*, or at the last probe),
``queries_by_step`` at q*, ``fit_seconds``, ``search_seconds`` and
``probe_log`` (every probe as JSON: the budget q, the oversampling, the
queries asked, the error, the verdict, the seconds, why refused).

The figure draws q*(m) per (family, d, k) — median over teachers and its
90 % bootstrap band, as ``samples-to-eps`` draws n*(m) — and, on the same
axes, the example learners' n*(m) from the ``samples-to-eps`` rows in
:data:`EXAMPLE_ROWS` (the same teachers when the seeds agree): queried
sequences against random sequences, on one m-axis.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .._validation import Integer, Options, Real
from ..attention.model import relative_error
from ..attention.teachers import TEACHER_FAMILIES
from ..evaluation import plant_instance
from ..plotting import heads_panel, save_figure, style_for, write_tables
from ..queries import QueryLearner, QueryOracle
from ..sample_search import RESOLUTION, search_samples_needed
from .growth_laws import LEVEL, bounded_text, samples_needed_table
from .registry import Experiment, expand_grid, register_experiment

#: The fields of a cell, in the order the axes nest (the last varies fastest).
CELL_FIELDS = ("family", "dim", "length", "noise", "heads", "distinct", "eps", "budget", "seed")
#: The closing probe of a search is at this factor × q*.
CONFIRM = 2.0
#: The ``samples-to-eps`` rows drawn beside the searches (in a source checkout).
EXAMPLE_ROWS = Path(__file__).resolve().parents[2] / "runs" / "samples-to-eps" / "samples-to-eps.db"


def queries_to_eps_cells(table: dict) -> list[dict]:
    """The cells of a grid table: every combination of its axes (values checked first)."""
    constraints = {"family": [Options(*TEACHER_FAMILIES)], "dim": [Integer(1)], "length": [Integer(2)],
                   "noise": [Real(0.0)], "heads": [Integer(1)], "distinct": [Integer(2)],
                   "eps": [Real(0.0, low_open=True)], "budget": [Integer(1)], "seed": [Integer(0)]}
    return expand_grid(table, CELL_FIELDS, defaults={"distinct": 2}, experiment="queries-to-eps",
                       constraints=constraints)


def cell_learner(cell: dict, oversample: float) -> QueryLearner:
    return QueryLearner(cell["heads"], length=cell["length"], distinct=cell["distinct"], oversample=oversample,
                        random_state=cell["seed"])


def oversample_for(cell: dict, queries: int) -> float | None:
    """The largest oversampling whose planned queries are ≤ ``queries`` (None below the design at 1)."""
    if cell_learner(cell, 1.0).planned_queries(cell["dim"]) > queries:
        return None
    low, high = 1.0, max(2.0, float(queries))
    for _ in range(60):  # planned_queries is non-decreasing in the oversampling: bisect
        middle = 0.5 * (low + high)
        fits = cell_learner(cell, middle).planned_queries(cell["dim"]) <= queries
        low, high = (middle, high) if fits else (low, middle)
    return low


def run_queries_to_eps_cell(cell: dict) -> dict:
    """Search one teacher's q* for the query learner at the cell's noise and ε."""
    teacher, _, _, X_test = plant_instance(heads=cell["heads"], dim=cell["dim"], length=cell["length"], samples=1,
                                           family=cell["family"], seed=cell["seed"])
    minimum = cell_learner(cell, 1.0).planned_queries(cell["dim"])
    details = {}

    def error_at(queries: int) -> tuple[float, float]:
        oversample = oversample_for(cell, queries)
        learner = cell_learner(cell, oversample or 1.0)
        probe = {"budget": queries, "oversample": oversample, "queries": 0, "error": None, "separable": None,
                 "queries_by_step": None, "fit_seconds": 0.0, "refused": None}
        oracle = QueryOracle(teacher, noise=cell["noise"], rng=cell["seed"])
        try:
            learner.fit(oracle)
        except ValueError as error:
            probe["refused"] = str(error)
        else:
            report = learner.report_
            probe.update(queries=report.queries, error=relative_error(learner.model_, teacher, X_test),
                         separable=report.separable, queries_by_step=report.queries_by_step(),
                         fit_seconds=report.total_seconds)
        details[queries] = probe
        return (math.nan if probe["error"] is None else probe["error"]), probe["fit_seconds"]

    search = search_samples_needed(error_at, cell["eps"], start=minimum, budget=max(cell["budget"], minimum),
                                   minimum=minimum, resolution=RESOLUTION, confirm=CONFIRM)
    at = details[search.samples_needed if search.samples_needed is not None else search.probes[-1][0]]
    log = [details[queries] for queries, *_ in search.probes]
    return {
        "queries_needed": None if search.samples_needed is None else at["queries"],
        "queries_lower": search.samples_lower,
        "censored": search.censored,
        "probes": len(search.probes),
        "non_monotone": search.non_monotone,
        "separable": at["separable"],
        "refused": at["refused"],
        "queries_by_step": at["queries_by_step"] or {},
        "fit_seconds": at["fit_seconds"],
        "search_seconds": float(sum(probe["fit_seconds"] for probe in log)),
        "probe_log": json.dumps(log),
    }


# -------------------------------------------------------------------- figure

def as_search_rows(rows: list[dict]) -> list[dict]:
    """The query searches in the layout of ``samples-to-eps`` rows (learner "query", output "t=…" for the
    distinct tokens of a Θ-query: one curve per design), for its summaries."""
    return [{**row, "learner": "query", "output": f"t={row['distinct']}", "samples_needed": row["queries_needed"],
             "ratio": None} for row in rows]


def _example_rows(path: Path = EXAMPLE_ROWS) -> list[dict]:
    """The ``samples-to-eps`` rows (empty when the file is absent)."""
    if not path.is_file():
        return []
    from .store import ResultStore

    with ResultStore(path, readonly=True) as store:
        return store.rows("samples-to-eps")


def plot_queries_to_eps(rows: list[dict], out_dir: Path, examples: list[dict] | None = None) -> list[Path]:
    """q*(m) beside the example learners' n*(m): one panel per (family, d, k), 90 % bands over teachers.

    A censored median or band end is drawn at 2× the budget with a ">".
    Writes ``queries-to-eps.png`` and ``queries-to-eps.txt``.
    """
    if not rows:
        raise ValueError("rows: expected stored results of queries-to-eps, received none (run the sweep first)")
    examples = _example_rows() if examples is None else examples
    queried = samples_needed_table(as_search_rows(rows))
    panels = sorted({(row["family"], row["dim"], row["length"]) for row in rows},
                    key=lambda panel: (panel[0] != "random", panel))
    beside = [entry for entry in samples_needed_table(examples)
              if (entry["family"], entry["dim"], entry["length"]) in panels and entry["noise"] == 0]
    table = queried + beside
    curves = sorted({(entry["learner"], entry["output"], entry["eps"], entry["noise"]) for entry in table},
                    key=lambda curve: (curve[0] != "query", curve))
    names = [f"{learner} {output} ε={eps:g}" + (f" σ={noise:g}" if noise else "")
             for learner, output, eps, noise in curves]
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False, sharey=True,
                             layout="constrained")
    for (family, dim, length), ax in zip(panels, axes[0]):
        for curve, name in zip(curves, names):
            mine = sorted((entry for entry in table if (entry["family"], entry["dim"], entry["length"]) == (
                family, dim, length) and (entry["learner"], entry["output"], entry["eps"], entry["noise"]) == curve),
                key=lambda entry: entry["heads"])
            if not mine:
                continue
            style = style_for(name, names)
            x = np.array([entry["heads"] for entry in mine], dtype=float)
            ceiling = np.array([2.0 * entry["budget"] for entry in mine])
            median, low, high = (np.minimum([entry[end] for entry in mine], ceiling)
                                 for end in ("median", "low", "high"))
            label = ("queries, QueryLearner" if curve[0] == "query" else "examples, " + curve[0]) + name[len(curve[0]):]
            ax.plot(x, median, color=style["color"], marker=style["marker"], ms=4,
                    linestyle="-" if curve[0] == "query" else "--", label=label)
            ax.fill_between(x, low, high, color=style["color"], alpha=0.18, lw=0)
            for at, value, top in zip(x, median, ceiling):
                if value >= top:
                    ax.scatter([at], [value], marker="$>$", s=60, color=style["color"], zorder=3)
        heads_panel(ax, {entry["heads"] for entry in table}, f"{family}, d = {dim}, k = {length}")
    axes[0][0].set_ylabel("sequences to error ≤ ε (queried q*, or random n*)")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"queries-to-eps beside samples-to-eps: median over teachers, {LEVEL:.0%} bootstrap band; "
                 "> = censored at the budget", fontsize=9)
    probes = [(row["family"], row["dim"], row["length"], row["noise"], row["heads"], row["eps"], row["seed"],
               probe["budget"], probe["queries"], probe["oversample"], probe["error"], probe["separable"],
               round(probe["fit_seconds"], 3), probe["refused"] or "")
              for row in rows for probe in json.loads(row["probe_log"])]
    text_tables = [
        (f"q* or n* = smallest number of sequences with relative test error <= eps: median over teachers "
         f"[{LEVEL:.0%} bootstrap interval]; censored teachers count as > budget",
         ["family", "d", "k", "noise", "learner", "output", "eps", "m", "teachers", "censored", "median", "interval"],
         [(e["family"], e["dim"], e["length"], e["noise"], e["learner"], e["output"], e["eps"], e["heads"],
           e["teachers"], e["censored"], bounded_text(e["median"], e["budget"]),
           f"[{bounded_text(e['low'], e['budget'])}, {bounded_text(e['high'], e['budget'])}]") for e in table]),
        ("every probe of the query searches (budget q, oversampling, queries asked)",
         ["family", "d", "k", "noise", "m", "eps", "seed", "budget", "queries", "oversample", "error", "separable",
          "fit_seconds", "refused"], probes),
    ]
    return [save_figure(fig, Path(out_dir) / "queries-to-eps.png"),
            write_tables(Path(out_dir) / "queries-to-eps.txt", text_tables)]


register_experiment(Experiment(
    "queries-to-eps",
    "per teacher, the fewest queried sequences at which QueryLearner reaches error ε, vs m (beside samples-to-eps)",
    queries_to_eps_cells, run_queries_to_eps_cell, plot_queries_to_eps))
