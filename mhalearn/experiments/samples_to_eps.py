"""The ``samples-to-eps`` experiment: per teacher, the smallest n at which a learner reaches error ε.

For each (learner, family, d, k, m, σ, seed, output, ε) a cell searches n*,
the smallest number of training sequences at which the learner's relative
test error is ≤ ε (:func:`search_samples_needed`):

- every probe fits the learner on a *prefix* of one stream of ``budget``
  sequences drawn from the teacher (:func:`~mhalearn.evaluation.plant_instance`
  at n = ``budget``), so a larger n always holds the data of a smaller one,
  and every probe is scored on the same fresh test inputs;
- the first probe is at ``start × m`` (a guess that moves where the bracket
  starts, not the answer); the search halves or doubles until one n fails
  and one succeeds, then bisects on log n until they are within
  ``resolution`` (1.25×), or within 2× once one probe took more than
  ``coarse_seconds``;
- a search that fails at ``budget`` is censored: n* > budget, never a number;
- a probe the learner refuses (too few labels for its unknowns, a moment
  route beyond the memory budget) counts as a failure, with the reason;
- a search ends with a probe at ``confirm`` × n* (2×, unless a probe at or
  above it was made): a larger n that fails after a smaller one succeeded
  sets ``non_monotone``, and n* stays the bracket's answer.

``output`` says which error is compared with ε: ``"polished"`` — the fitted
``model_`` (gradient descent's only output) — or ``"unpolished"`` — the span
learners' ``least_squares_model_`` before the polish.

Each row keeps ``samples_needed`` (n*, None when censored), ``samples_lower``
(the largest n below n* that failed; 0 when the smallest n tried succeeded),
``censored``, ``probes``, ``ratio`` (n*/samples_lower, the resolution
reached), ``non_monotone``, ``route`` (what produced the output at n*, or at
the last probe when censored: ``"body"``, ``"moment"`` or ``"gradient"``),
``fit_seconds`` (the learner's fit at n*, or at the last probe) and
``search_seconds`` (all its probes), and ``probe_log``: every probe as JSON
(n, both errors, route, fit seconds, why refused).  :func:`probe_rows`
turns the log into one row per probe; the figure's tables list them.

A grid may give a ``hardness`` axis (the point of the family's dial,
:func:`~mhalearn.make_teacher`; one seed is one teacher moved along it) and a
learner entry ``censored_probes``: a censored teacher is then also fitted at
each n of :data:`CENSORED_LADDER` up to it, on a fresh stream, and its row
keeps ``<output>_error_at_<n>`` and the fits in ``censored_log``.  Every row
keeps ``family_params`` (JSON) and its teacher's non-degeneracy figures
(``gram_ratio``, ``w_sum_condition``, ``w_norm_min``, ``theta_norm_min``,
``theta_norm_max``, ``inside_conditions``).

With ``mhalearn sweep --checkpoints DIR`` every probe is also appended to
the cell's checkpoint as it ends, and an interrupted search resumes from its
stored probes (the search is a deterministic function of the probes' outcomes,
so it retraces its path without refitting).

The figure draws n*(m) per family, one line per (learner, output, ε): the
median over teachers and its 90 % percentile-bootstrap band, a censored
teacher counting as "> budget"; the body's ``sculpt-vs-m`` curve (the n at
which its median span distance reaches 0.1, from the rows in
:data:`BODY_ROWS`) is drawn on the same axes.  The tables give the searches,
the probes, and the growth laws n* = a·m^b and n* = a·e^{bm}
and n* = a·2md/k (a scalar labels per unknown) (:func:`fit_growth_laws`,
bootstrap over teachers), whether a hard family's n*(m) grows faster than
random teachers' (:func:`family_comparison`), and the body's curve.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from .._validation import Integer, Options, Real
from ..attention.model import relative_error
from ..attention.teachers import check_family_params, dial_params, nondegeneracy
from ..evaluation import fit_timed, plant_instance
from ..learners import get_learner
from ..plotting import save_figure, set_grid_ticks, style_for, write_tables
from ..sample_search import RESOLUTION, search_samples_needed
from .growth_laws import (
    LEVEL,
    bounded_text,
    family_comparison,
    family_ratios,
    fit_growth_laws,
    held_out_table,
    probe_rows,
    samples_needed_table,
)
from .hardness_dial import dial_rows, labelled_by_dial, plot_dial
from .learners_vs_m import HYPERPARAMETERS, LEARNER_ORDER, SHARED_FIELDS, _check_table_list, learners_vs_m_count
from .learning import learning_constraints
from .registry import Experiment, check_drawn_memory, expand_grid, refuse_problems, register_experiment

#: The closing probe of a search is at this factor × n* (a failure there flags a non-monotone curve).
CONFIRM = 2.0
#: Which error is compared with ε.
OUTPUTS = ("polished", "unpolished")
#: The body's sculpt-vs-m rows drawn beside the searches (in a source checkout).
BODY_ROWS = Path(__file__).resolve().parents[2] / "runs" / "sculpt-vs-m" / "sculpt-vs-m.db"

#: Keys of a learner's entry beyond the shared ones.
LEARNER_FIELDS = ("learner", "heads", "output", "eps", "budget", "start")
LEARNER_OPTIONAL = ("resolution", "coarse_seconds", "confirm")
#: The fields of a cell, in the order the axes nest (the last varies fastest).
CELL_FIELDS = ("learner", "family", "dim", "length", "noise", "heads", "output", "eps", "budget", "start",
               "resolution", "coarse_seconds", "confirm", "seed")
#: Optional fields, held by a cell only when its grid names them (so the cells of older grids keep their
#: keys): ``hardness``, the point of the family's dial (:func:`~mhalearn.make_teacher`), a shared axis or a
#: learner entry's; ``censored_probes``, a learner entry's largest n of :data:`CENSORED_LADDER` to fit a
#: censored teacher at (0: none).
OPTIONAL_FIELDS = ("hardness", "censored_probes")
#: The n a censored search's teacher is also fitted at, on a fresh stream of the largest of them: whether
#: it needs more samples or fails at any n.
CENSORED_LADDER = (2_000, 10_000, 100_000)
#: The columns of an export that a user reads first (``family_params``, the teacher's non-degeneracy
#: figures and ``inside_conditions`` are in the rows stored since the dial was added).
EXPORT_COLUMNS = ("learner", "family", "family_params", "dim", "length", "heads", "noise", "seed", "eps",
                  "samples_needed", "samples_lower", "censored", "probes", "route", "fit_seconds",
                  "inside_conditions", "gram_ratio", "w_sum_condition", "w_norm_min")


# --------------------------------------------------------------------- cells

def samples_to_eps_cells(table: dict) -> list[dict]:
    """The cells of a grid table: learner entries × shapes × shared axes (family, noise, seed)."""
    extra = sorted(set(table) - set(SHARED_FIELDS) - {"shapes", "learners", "hardness"})
    if extra:
        raise ValueError(f"grid: expected the keys {[*SHARED_FIELDS, 'hardness', 'shapes', 'learners']} of "
                         f"'samples-to-eps', received unknown keys {extra}")
    shapes = _check_table_list(table, "shapes", ("dim", "length"), experiment="samples-to-eps")
    learners = _check_table_list(table, "learners", LEARNER_FIELDS,
                                 (*LEARNER_OPTIONAL, *OPTIONAL_FIELDS, *SHARED_FIELDS), experiment="samples-to-eps")
    shared = {key: table[key] for key in (*SHARED_FIELDS, "hardness") if key in table}
    constraints = {**learning_constraints(), "output": [Options(*OUTPUTS)], "eps": [Real(0.0, low_open=True)],
                   "budget": [Integer(1)], "start": [Integer(1)], "resolution": [Real(1.0, low_open=True)],
                   "coarse_seconds": [Real(0.0)], "confirm": [Real(0.0)], "hardness": [Real(0.0, 1.0)],
                   "censored_probes": [Integer(0)]}
    cells = []
    for entry in learners:
        get_learner(entry["learner"])
        for shape in shapes:
            grid = {"resolution": RESOLUTION, "coarse_seconds": 600.0, "confirm": CONFIRM, **shared, **entry, **shape}
            fields = CELL_FIELDS + tuple(key for key in OPTIONAL_FIELDS if key in grid)
            cells += expand_grid(grid, fields, experiment="samples-to-eps", constraints=constraints)
    for cell in cells:
        check_family_params(cell["family"], _family_params(cell))
    # A censored teacher's fits beyond the search draw a stream of their own, up to censored_probes.
    check_drawn_memory([{**cell, "budget": max([cell["budget"], *_censored_ladder(cell)])} for cell in cells],
                       "samples-to-eps", key="budget")
    return _check_first_probes(cells)


def _check_first_probes(cells: list[dict]) -> list[dict]:
    """``cells``, refused (one line) where the first probe, start × m, lies above the budget: such a search
    could probe only the budget, and its row would say nothing of n*."""
    problems = sorted({f"budget = {cell['budget']} is below the first probe start × heads = {cell['start']} × "
                       f"{cell['heads']} = {cell['start'] * cell['heads']}" for cell in cells
                       if cell["start"] * cell["heads"] > cell["budget"]})
    refuse_problems([*problems, "raise budget or lower start"] if problems else [], "samples-to-eps")
    return cells


def _family_params(cell: dict) -> dict:
    """The point of the family's dial a cell names ({} for the family as registered)."""
    return dial_params(cell["family"], cell.get("hardness"))


def samples_to_eps_count(table: dict) -> int:
    """The cells of a grid table, counted without expanding it (the dial is one more shared axis)."""
    axis = table.get("hardness")
    return learners_vs_m_count(table) * (len(axis) if isinstance(axis, list) and axis else 1)


def _refusal(cell: dict, samples: int) -> str:
    """Why the learner refuses to fit ``samples`` sequences of the cell's shape ("" when it fits them)."""
    try:
        get_learner(cell["learner"])(cell["heads"], **HYPERPARAMETERS.get(cell["learner"], {}))._check_shape(
            samples, cell["length"], cell["dim"])
    except ValueError as error:
        return str(error)
    return ""


def _probe_file(checkpoint_dir) -> Path | None:
    if checkpoint_dir is None:
        return None
    Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
    return Path(checkpoint_dir) / "probes.jsonl"


def _stored_probes(path: Path | None) -> dict[int, dict]:
    """The probes a checkpoint holds (a last line cut by a kill is ignored)."""
    probes = {}
    if path is not None and path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                probe = json.loads(line)
            except json.JSONDecodeError:
                continue
            probes[probe["samples"]] = probe
    return probes


def run_samples_to_eps_cell(cell: dict, checkpoint_dir=None) -> dict:
    """Search one teacher's n* for the cell's learner, output and ε (probes resumed from ``checkpoint_dir``)."""
    instance = dict(heads=cell["heads"], dim=cell["dim"], length=cell["length"], family=cell["family"],
                    noise=cell["noise"], seed=cell["seed"], family_params=_family_params(cell))
    teacher, X, Y, X_test = plant_instance(samples=cell["budget"], **instance)
    path = _probe_file(checkpoint_dir)
    details = _stored_probes(path)
    key = f"{cell['output']}_error"

    def error_at(samples: int) -> tuple[float, float]:
        probe = _probe(cell, teacher, X[:samples], Y[:samples], X_test)
        details[samples] = probe
        if path is not None:
            with path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(probe) + "\n")
        return _error_or_nan(probe[key]), probe["fit_seconds"]

    known = {samples: (_error_or_nan(probe[key]), probe["fit_seconds"]) for samples, probe in details.items()}
    search = search_samples_needed(error_at, cell["eps"], start=cell["start"] * cell["heads"],
                                   budget=cell["budget"], resolution=cell["resolution"],
                                   coarse_seconds=cell["coarse_seconds"], confirm=cell["confirm"],
                                   known=known)
    at = search.samples_needed if search.samples_needed is not None else search.probes[-1][0]
    log = [details[samples] for samples, *_ in search.probes]
    beyond = _censored_errors(cell, teacher, instance, X_test) if search.censored else None
    return {
        "samples_needed": search.samples_needed,
        "samples_lower": search.samples_lower,
        "censored": search.censored,
        "probes": len(search.probes),
        "ratio": None if math.isinf(search.ratio) else search.ratio,
        "non_monotone": search.non_monotone,
        "route": details[at]["route"] or "refused",
        "fit_seconds": details[at]["fit_seconds"],
        "search_seconds": float(sum(probe["fit_seconds"] for probe in log)),
        "resumed_probes": sum(samples in known for samples, *_ in search.probes),
        "probe_log": json.dumps(log),
        "family_params": json.dumps(_family_params(cell), sort_keys=True),
        # A censored teacher's fits beyond the search, on a fresh stream: more samples, or no n at all?
        "censored_log": None if beyond is None else json.dumps(beyond),
        **{f"{cell['output']}_error_at_{samples}": probe[f"{cell['output']}_error"] for samples, probe in
           (beyond or {}).items()},
        **nondegeneracy(teacher).columns(),
    }


def _probe(cell: dict, teacher, X: np.ndarray, Y: np.ndarray, X_test: np.ndarray) -> dict:
    """One fit of the cell's learner on (X, Y): both errors on ``X_test``, the route, its seconds, or why refused."""
    refused = _refusal(cell, len(X))
    probe = {"samples": len(X), "polished_error": None, "unpolished_error": None, "route": None,
             "fit_seconds": 0.0, "refused": refused or None}
    if not refused:
        estimator = get_learner(cell["learner"])(cell["heads"], random_state=cell["seed"],
                                                 **HYPERPARAMETERS.get(cell["learner"], {}))
        seconds, _ = fit_timed(estimator, X, Y)
        unpolished = getattr(estimator, "least_squares_model_", estimator.model_)
        probe.update(polished_error=relative_error(estimator.model_, teacher, X_test),
                     unpolished_error=relative_error(unpolished, teacher, X_test),
                     route=str(getattr(estimator.report_, "route", "gradient")), fit_seconds=float(seconds))
    return probe


def _censored_ladder(cell: dict) -> list[int]:
    """The n of :data:`CENSORED_LADDER` a censored teacher of the cell is fitted at."""
    return [samples for samples in CENSORED_LADDER if samples <= cell.get("censored_probes", 0)]


def _censored_errors(cell: dict, teacher, instance: dict, X_test: np.ndarray) -> dict[int, dict] | None:
    """The censored teacher fitted at each n of :data:`CENSORED_LADDER` up to ``censored_probes``.

    The fits read prefixes of a fresh stream of the largest such n (the
    search's stream holds only ``budget``); the teacher and the test inputs
    are the search's own.
    """
    ladder = _censored_ladder(cell)
    if not ladder:
        return None
    planted, X, Y, _ = plant_instance(samples=ladder[-1], **instance)
    if not (np.array_equal(planted.thetas, teacher.thetas) and np.array_equal(planted.ws, teacher.ws)):
        raise RuntimeError("samples-to-eps: the censored probes' stream planted another teacher")
    return {samples: _probe(cell, teacher, X[:samples], Y[:samples], X_test) for samples in ladder}


def _error_or_nan(error) -> float:
    return math.nan if error is None else float(error)


# -------------------------------------------------------------------- figure

def _body_curve(path: Path = BODY_ROWS) -> dict[int, float]:
    """The body's n to median span distance ≤ 0.1 per m, from the sculpt-vs-m rows (empty when absent).

    An m that never reached it maps to minus the largest n run there ("> that n").
    """
    if not path.is_file():
        return {}
    from .sculpt_vs_m import samples_to_target
    from .store import ResultStore

    with ResultStore(path, readonly=True) as store:
        rows = store.rows("sculpt-vs-m")
    needed = samples_to_target(rows)
    # A censored m is "> the largest n run": returned as minus that n, drawn with a ">".
    return {heads: value if math.isfinite(value) else -max(row["samples"] for row in rows if row["heads"] == heads)
            for heads, value in needed.items()}


def plot_samples_to_eps(rows: list[dict], out_dir: Path, body: dict[int, float] | None = None) -> list[Path]:
    """n*(m): one panel per (family, shape), one line per (learner, output, ε), 90 % bands over teachers.

    A censored median or band end is drawn at 2× the budget with a ">".
    The body's ``sculpt-vs-m`` curve (``body``, default from
    :data:`BODY_ROWS`) is drawn in black on the random teachers' panels of
    its shape (d = 12, k = 4).  Writes ``samples-to-eps.png`` and
    ``samples-to-eps.txt`` (searches, laws, probes); a family's dial points
    are its panels there ("cancelling h=0.5"), and rows on a dial also give
    ``samples-to-eps-dial.png`` and ``.txt``
    (:func:`~mhalearn.experiments.hardness_dial.plot_dial`).
    """
    if not rows:
        raise ValueError("rows: expected stored results of samples-to-eps, received none (run the sweep first)")
    dial = plot_dial(rows, out_dir) if dial_rows(rows) else []
    rows = labelled_by_dial(rows)
    body = _body_curve() if body is None else body
    out_dir = Path(out_dir)
    table = samples_needed_table(rows)
    panels = sorted({(row["family"], row["dim"], row["length"]) for row in rows},
                    key=lambda panel: (panel[0] != "random", panel))
    curves = sorted({tuple(entry[key] for key in ("learner", "output", "eps")) for entry in table},
                    key=lambda curve: (LEARNER_ORDER.index(curve[0]) if curve[0] in LEARNER_ORDER else 9, curve))
    names = [f"{learner} {output} ε={eps:g}" for learner, output, eps in curves]
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False, sharey=True,
                             layout="constrained")
    for (family, dim, length), ax in zip(panels, axes[0]):
        for curve, name in zip(curves, names):
            entries = [entry for entry in table if (entry["family"], entry["dim"], entry["length"]) == (
                family, dim, length) and tuple(entry[key] for key in ("learner", "output", "eps")) == curve]
            for noise in sorted({entry["noise"] for entry in entries}):
                mine = [entry for entry in entries if entry["noise"] == noise]
                style = style_for(name, names)
                x = np.array([entry["heads"] for entry in mine], dtype=float)
                ceiling = np.array([2.0 * entry["budget"] for entry in mine])
                median, low, high = (np.minimum([entry[end] for entry in mine], ceiling)
                                     for end in ("median", "low", "high"))
                ax.plot(x, median, color=style["color"], marker=style["marker"], ms=4,
                        linestyle="-" if noise == 0 else "--", label=f"{name}" + (f", σ = {noise:g}" if noise else ""))
                ax.fill_between(x, low, high, color=style["color"], alpha=0.18, lw=0)
                for at, value, top in zip(x, median, ceiling):
                    if value >= top:
                        ax.scatter([at], [value], marker="$>$", s=60, color=style["color"], zorder=3)
        if family == "random" and (dim, length) == (12, 4) and body:
            reached = sorted((m, n) for m, n in body.items() if n > 0)
            ax.plot(*zip(*reached), color="black", marker="*", lw=1.2,
                    label="sculpt-vs-m: the body's n to span distance ≤ 0.1 (median over its teachers)")
            for m, n in body.items():
                if n < 0:
                    ax.scatter([m], [-n], marker="$>$", s=60, color="black", zorder=3)
                    ax.annotate(f"> {-n:.0e}, refused", (m, -n), textcoords="offset points", xytext=(4, -10),
                                fontsize=6)
        ax.set_xscale("log")
        ax.set_yscale("log")
        set_grid_ticks(ax, sorted({entry["heads"] for entry in table} | set(body)))
        ax.set_title(f"{family}, d = {dim}, k = {length}", fontsize=9)
        ax.set_xlabel("heads m")
        ax.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("n* (sequences) to error ≤ ε")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"samples-to-eps: median over teachers of n*,\n{LEVEL:.0%} bootstrap band; "
                 "> = censored at the budget", fontsize=9)
    laws = fit_growth_laws(rows)
    probes = probe_rows(rows)
    text_tables = [
        (f"n* = smallest n with relative test error <= eps: median over teachers [{LEVEL:.0%} bootstrap interval]; "
         "censored teachers count as > budget; resolved = searches with n*/samples_lower <= 1.5",
         ["family", "d", "k", "noise", "learner", "output", "eps", "m", "teachers", "censored", "resolved",
          "non_monotone", "median_n*", "interval"],
         [(e["family"], e["dim"], e["length"], e["noise"], e["learner"], e["output"], e["eps"], e["heads"],
           e["teachers"], e["censored"], e["resolved_1_5"], e["non_monotone"], bounded_text(e["median"], e["budget"]),
           f"[{bounded_text(e['low'], e['budget'])}, {bounded_text(e['high'], e['budget'])}]") for e in table]),
        (f"growth laws fitted to uncensored n* (least squares on log n*), {LEVEL:.0%} bootstrap over teachers",
         ["family", "d", "k", "noise", "learner", "output", "eps", "form", "a", "a_interval", "b", "b_interval",
          "rms_log10", "m", "points", "censored"],
         [(law["family"], law["dim"], law["length"], law["noise"], law["learner"], law["output"], law["eps"],
           law["form"], f"{law['a']:.4g}", f"[{law['a_low']:.4g}, {law['a_high']:.4g}]", f"{law['b']:.4g}",
           f"[{law['b_low']:.4g}, {law['b_high']:.4g}]", f"{law['rms_log10']:.3f}", law["heads"], law["points"],
           law["censored"]) for law in laws]),
        ("faster than random teachers? exponent b of each law fitted to both families on the m they share, "
         f"difference b - b_random with its {LEVEL:.0%} interval (independent bootstraps of each family's teachers)",
         ["family", "d", "k", "noise", "learner", "output", "eps", "form", "m", "b", "b_random", "difference",
          "interval", "verdict", "censored", "censored_random", "largest_m", "median_ratio_there"],
         [(e["family"], e["dim"], e["length"], e["noise"], e["learner"], e["output"], e["eps"], e["form"], e["heads"],
           f"{e['b']:.4g}", f"{e['b_reference']:.4g}", f"{e['difference']:.4g}", f"[{e['low']:.4g}, {e['high']:.4g}]",
           e["verdict"], e["censored"], e["censored_reference"], e["top_heads"], bounded_text(e["top_ratio"], 0))
          for e in family_comparison(rows)]),
        (f"median n* of the family over random teachers' per m, {LEVEL:.0%} interval from independent bootstraps "
         "of each family's teachers; censored teachers count as > budget, a censored ratio as > budget / random median",
         ["family", "d", "k", "noise", "learner", "output", "eps", "m", "teachers", "censored", "teachers_random",
          "censored_random", "median_ratio", "interval"],
         [(e["family"], e["dim"], e["length"], e["noise"], e["learner"], e["output"], e["eps"], e["heads"],
           e["teachers"], e["censored"], e["teachers_reference"], e["censored_reference"],
           bounded_text(e["ratio"], e["floor"]),
           f"[{bounded_text(e['low'], e['floor'])}, {bounded_text(e['high'], e['floor'])}]")
          for e in family_ratios(rows)]),
        ("each law fitted on the other m predicts the median n* at m (ratio = predicted / measured)",
         ["family", "d", "k", "noise", "learner", "output", "eps", "m", "form", "fitted_on_m", "predicted",
          "measured", "ratio"],
         [(e["family"], e["dim"], e["length"], e["noise"], e["learner"], e["output"], e["eps"], e["heads"], e["form"],
           e["fitted_on"], f"{e['predicted']:.4g}", bounded_text(e["measured"], 0),
           "censored" if e["ratio"] is None else f"{e['ratio']:.3g}") for e in held_out_table(rows)]),
        ("every probe (n on the teacher's stream prefix)",
         ["family", "d", "k", "learner", "output", "eps", "m", "seed", "n", "error", "success", "route",
          "fit_seconds", "refused"],
         [(p["family"], p["dim"], p["length"], p["learner"], p["output"], p["eps"], p["heads"], p["seed"],
           p["samples"], p[f"{p['output']}_error"], p["success"], p["route"], round(p["fit_seconds"], 2),
           p["refused"] or "") for p in probes]),
        ("sculpt-vs-m (drawn beside): the body's n to median span distance <= 0.1, random teachers, d = 12, k = 4",
         ["m", "n"], [(m, f"{n:g}" if n > 0 else f"> {-n:g} (not reached)") for m, n in sorted(body.items())]),
    ]
    return [save_figure(fig, out_dir / "samples-to-eps.png"), write_tables(out_dir / "samples-to-eps.txt", text_tables),
            *dial]


register_experiment(Experiment(
    "samples-to-eps",
    "per teacher, the smallest n (searched on nested data) at which each learner reaches error ε, vs m",
    samples_to_eps_cells, run_samples_to_eps_cell, plot_samples_to_eps, checkpoints=True,
    count=samples_to_eps_count))
