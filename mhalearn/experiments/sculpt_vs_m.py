"""The ``sculpt-vs-m`` experiment: what Chen & Li's body needs as the number of heads grows.

The sculpted body is built from *agreement rows* — rows on which every head
has the same attention pattern — and those become exponentially rarer as m
grows: the price in m that Chen & Li prove unavoidable in the worst case,
here measured.  For m = 1–4, d = 12, k = 4, ‖Θ_i‖_F = 2 and n on a log grid
up to 10⁶ sequences (drawn block by block from the teacher, so memory stays
bounded), each cell runs phases 1–4 of Chen & Li's learner
(:func:`~mhalearn.learners.chen_li.sculpt_span`) with
:class:`~mhalearn.SculptLearner`'s default hyper-parameters, watched by a
:class:`~mhalearn.evaluation.TeacherObserver`, and records: agreement rows found for K*
(before the cap of ``max_rows`` kept for the slabs) and the precision of
those kept against the teacher, the Ŵ_Σ error before and after
refinement, the body's span distance (or why it refused), then phases 5–6
(:func:`~mhalearn.learners.chen_li.search_and_select` with ``refine="none"``)
on the body's span: net candidates, net time, and the relative test error of
the paper's output — the held-out best candidate with W by least squares,
no polish — and the worker's peak memory.  A cell resumed from its
checkpoint (``--checkpoints``) names the phases it loaded in ``resumed``
("" when it ran whole; rows stored before the field lack it) and their
seconds, counted in ``body_seconds`` as they were when computed, in
``kept_seconds``.  ``workers`` is how many threads the cell's passes ran
on: 1 on a local worker, the cluster's threads for a cell sent to a Dask
cluster, which spreads its passes over every worker (docs/cluster.rst).

The figure shows span distance, agreement rows and the paper's test error
against n per m, and the samples the body needs to reach span distance
≤ :data:`SPAN_TARGET` against m.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from .._memory import peak_memory_mb
from .._validation import Integer, Options, Real
from ..attention.data import boolean_inputs
from ..attention.model import relative_error
from ..attention.teacher_source import TeacherSource
from ..attention.teachers import (
    TEACHER_FAMILIES,
    check_family_params,
    dial_params,
    make_teacher,
    nondegeneracy,
    sample_teacher,
)
from ..data.checkpoint import open_checkpoint
from ..evaluation import TeacherObserver
from ..learners.chen_li import (
    BodySettings,
    SearchSettings,
    StreamRefit,
    certificate_bounds,
    route_net,
    sculpt_span,
    search_and_select,
)
from ..learners.report import Notifier, Observers, Phase, Route, StreamProgress
from ..plotting import (
    group_rows,
    median_quartiles,
    new_figure,
    plot_band,
    save_figure,
    set_grid_ticks,
    style_for,
    summarize_curve,
    write_tables,
)
from ..seeding import seeded_rng
from .backends import cluster_of_task
from .registry import Experiment, check_label_counts, expand_grid, register_experiment

#: Span distance (sin of the largest principal angle) the body must reach.
SPAN_TARGET = 0.1
#: Sequences used for the net search and the least-squares W, and for testing.
SELECTION_SAMPLES = 20_000
TEST_SAMPLES = 4000

#: The fields of a cell, in the order the grid's axes are nested.
FIELDS = ("heads", "dim", "length", "samples", "seed")
#: Optional fields: a teacher family other than the default's random teachers, and a point of its dial
#: (:func:`~mhalearn.make_teacher`).  A cell holds them only when its grid names them, so the cells of
#: random teachers keep their keys.
TEACHER_FIELDS = ("family", "hardness")
#: A diagnostic's field: ``estimate_noise = false`` runs the body with K*'s tolerance at ``residual_tol``
#: (labels taken as noiseless, :class:`~mhalearn.learners.chen_li.BodySettings`).  A cell holds it only
#: when false, so the cells of the body's defaults keep their keys.
DIAGNOSTIC = "estimate_noise"


def sculpt_vs_m_cells(table: dict) -> list[dict]:
    """The cells of a grid table (``grids/sculpt-vs-m.toml``): m × n × seeds.

    Refuses values no cell could run, and d ≤ k, where the body cannot detect agreement rows.
    ``estimate_noise`` (optional, a single boolean): false adds it to every cell (:data:`DIAGNOSTIC`).
    ``family`` and ``hardness`` (optional axes, :data:`TEACHER_FIELDS`): another teacher family and a
    point of its dial; every row keeps its teacher's non-degeneracy figures either way.
    """
    table = dict(table)
    estimate_noise = table.pop(DIAGNOSTIC, True)
    if not isinstance(estimate_noise, bool):
        raise ValueError(f"grid: sculpt-vs-m's {DIAGNOSTIC} must be true or false (one value for the grid), "
                         f"received {estimate_noise!r}")
    constraints = {"heads": [Integer(1)], "dim": [Integer(1)], "length": [Integer(2)], "samples": [Integer(1)],
                   "seed": [Integer(0)], "family": [Options(*TEACHER_FAMILIES)], "hardness": [Real(0.0, 1.0)]}
    fields = FIELDS + tuple(key for key in TEACHER_FIELDS if key in table)
    cells = check_label_counts(expand_grid(table, fields, experiment="sculpt-vs-m", constraints=constraints),
                               "sculpt-vs-m")
    for cell in cells:
        family = cell.get("family", "random")
        check_family_params(family, dial_params(family, cell.get("hardness")))
    if not estimate_noise:
        cells = [{**cell, DIAGNOSTIC: False} for cell in cells]
    for cell in cells:
        if cell["dim"] <= cell["length"]:
            raise ValueError(f"grid: sculpt-vs-m needs dim > length (the body detects agreement rows only "
                             f"for d > k), received dim = {cell['dim']}, length = {cell['length']}")
    return cells


def run_sculpt_vs_m_cell(cell: dict, checkpoint_dir=None) -> dict:
    """One cell, with BLAS on one thread as inside the learners' fits (:func:`_run_cell`).

    With ``checkpoint_dir``, phases 1–4 keep their results there as they end
    and a rerun of the cell resumes after the last one kept
    (:mod:`mhalearn.data.checkpoint`; at m = 3 and n = 10⁸ they take
    about a quarter of an hour on one core).

    The Numba kernels own the cores, and OpenBLAS threads spinning after the
    phases' small products (phase 4 reads its hull ~30 times) would steal
    them: without this limit an m = 1 cell at n = 3000 took 80–160 s beside
    another sweep.
    """
    with threadpool_limits(limits=1, user_api="blas"), cluster_of_task() as cluster:
        workers = 1 if cluster is None else sum(cluster.nthreads().values())
        return _run_cell(cell, checkpoint_dir, workers)


def _run_cell(cell: dict, checkpoint_dir=None, workers: int = 1) -> dict:
    """Phases 1–4 on a stream of ``samples`` sequences, then phases 5–6 with the least-squares choice.

    The teacher depends on (m, seed) only and the stream on the seed, so the
    cells of one (m, seed) see nested datasets as n grows.  The data are
    Boolean and the labels the teacher's, so the learner's units are the
    teacher's own (no standardisation).  A cell run as a task of a Dask
    cluster (``mhalearn sweep --backend dask``) reads the same stream as a
    :class:`~mhalearn.attention.teacher_source.DaskTeacherSource`, each pass's blocks
    drawn and read in tasks spread over the cluster's ``workers`` threads;
    elsewhere it reads the blocks one after the other (``workers`` = 1).
    """
    heads, dim, length, samples, seed = (cell[key] for key in ("heads", "dim", "length", "samples", "seed"))
    teacher = _cell_teacher(cell)
    source = TeacherSource(teacher, samples, length, seed=seed)
    if workers > 1:
        source = source.as_dask()
    rng = seeded_rng(seed, heads, samples)
    observer = TeacherObserver(teacher)
    body_settings = BodySettings(estimate_noise=cell.get(DIAGNOSTIC, True))
    diagnostic = "" if body_settings.estimate_noise else " (noise estimate off)"
    # A cell runs beside the sweep's own display, in a worker: its long passes show as a line every 10 minutes.
    passes = StreamProgress(interval=600.0, lines=True,
                            desc=f"sculpt-vs-m m = {heads}, seed {seed}, n = {samples:.0e}{diagnostic}: ")
    notify = Notifier(Observers(observer, passes))
    search_settings = SearchSettings(refine="none")
    checkpoint = open_checkpoint(checkpoint_dir, source, heads, body_settings, rng)
    phases = sculpt_span(source, heads, body_settings, rng, notify, checkpoint)
    span, final = phases.span, phases.sculpt[-1]
    stream = None if phases.refined_sum is None else next(
        (step for step in phases.refined_sum.steps if isinstance(step, StreamRefit)), None)
    metrics = {
        "agreement_rows": final.found_rows,
        "agreement_rows_kept": final.accepted_rows,
        "agreement_fraction": final.accepted_fraction,
        "precision": observer.figure(Phase.SCULPT, "precision"),
        # The rows K*'s hull kept, their precision, and why the others left (phase 4's trimmed hull).
        "kept_rows": span.kept_rows,
        "kept_precision": observer.figure(Phase.SPAN, "kept_precision"),
        "discarded": None if span.discarded is None else json.dumps(span.discarded),
        # The tolerance K*'s rows were accepted with, and the label noise it follows (estimated).
        "kstar_residual_tol": final.residual_tol,
        "noise_estimate": final.noise,
        "noise_samples": final.noise_samples,
        "feasible": observer.figure(Phase.SCULPT, "teacher_feasible_fraction"),
        "crude_w_sum_error": observer.figure(Phase.CRUDE_SUM, "w_sum_error"),
        "refined_w_sum_error": observer.figure(Phase.REFINED_SUM, "refined_w_sum_error"),
        # The stream beyond phases 1–3's prefix: candidate passes read, and whether K* is the whole stream's.
        "candidate_passes": stream.passes if stream is not None else 0,
        "stream_exact": stream.exact if stream is not None else None,
        "span_distance": observer.span_distance(Route.BODY),
        "estimated_error": span.estimated_error,
        "median_error": span.median_error,
        "refused": span.refused,
        "refused_by": span.refused_by,
        "spectral_gap": span.spectral_gap,
        # A resumed cell's phases loaded from its checkpoint count with the seconds they took when computed.
        "body_seconds": phases.seconds,
        # Each phase's seconds, the whole-stream refit apart from phase 3's prefix part (JSON).
        "phase_seconds": json.dumps(_phase_seconds(phases)),
        "resumed": ", ".join(checkpoint.resumed),
        "kept_seconds": checkpoint.kept_seconds,
        "candidates": None, "net_seconds": None, "test_error": None,
        # The threads a pass's blocks ran on: 1, or a Dask cluster's (its body_seconds is that wall time).
        "workers": workers,
        **nondegeneracy(teacher).columns(),
    }
    if span.refused is None:
        X, Y = source.head(min(samples, SELECTION_SAMPLES))
        n_val = max(1, len(X) // 5)
        basis, radius, hull = route_net(Route.BODY, span, None, heads, search_settings)
        net, selection = search_and_select(X[n_val:], Y[n_val:], X[:n_val], Y[:n_val], basis, radius, heads,
                                           search_settings, rng, hull=hull, **certificate_bounds(X, Y))
        X_test = boolean_inputs(TEST_SAMPLES, length, dim, rng=seeded_rng(seed, heads, 7))
        metrics.update(candidates=net.candidates, net_seconds=net.seconds,
                       test_error=relative_error(selection.least_squares_model, teacher, X_test))
    # The process's peak so far: an upper bound on the cell's own.
    metrics["peak_memory_mb"] = peak_memory_mb()
    # Undefined figures (no agreement row, no long direction at m = 1) are stored as None.
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in metrics.items()}


def _phase_seconds(phases) -> dict:
    """Phases 1–4's seconds by name, phase 3 split into its prefix part and the whole-stream refit."""
    seconds = {"crude_sum": None if phases.crude_sum is None else phases.crude_sum.seconds,
               "sculpt": [body.seconds for body in phases.sculpt], "span": phases.span.seconds}
    if phases.refined_sum is not None:
        stream = sum(step.seconds for step in phases.refined_sum.steps if isinstance(step, StreamRefit))
        seconds.update(refined_sum=phases.refined_sum.seconds - stream, stream_refit=stream)
    return seconds


def _cell_teacher(cell: dict):
    """The cell's teacher: it depends on (m, seed), and on the family and its dial point when the cell names them."""
    heads, dim, seed = cell["heads"], cell["dim"], cell["seed"]
    if not any(key in cell for key in TEACHER_FIELDS):
        return sample_teacher(heads, dim, rng=seeded_rng(20_251, heads, seed))
    family = cell.get("family", "random")
    return make_teacher(family, heads, dim, seeded_rng(20_251, family, heads, seed),
                        **dial_params(family, cell.get("hardness")))


def span_or_one(row: dict) -> float:
    """The body's span distance, 1 when it refused (no span used) or read none."""
    if row.get("refused") is not None or row.get("span_distance") is None:
        return 1.0
    return row["span_distance"]


def samples_to_target(rows: list[dict], target: float = SPAN_TARGET) -> dict[int, float]:
    """Per m, the smallest n whose median span distance over seeds is ≤ ``target`` (inf if none).

    A refusal counts as distance 1 (no span), whatever the refused span's distance.
    """
    needed = {}
    for (heads,), group in group_rows(rows, ["heads"]).items():
        needed[heads] = math.inf
        for (samples,), cells in group_rows(group, ["samples"]).items():
            distances = [span_or_one(row) for row in cells]
            if float(np.median(distances)) <= target:
                needed[heads] = samples
                break
    return needed


def plot_sculpt_vs_m(rows: list[dict], out_dir: Path) -> list[Path]:
    """Writes ``sculpt-vs-m.png`` (four panels) and ``sculpt-vs-m.txt`` in ``out_dir``."""
    if not rows:
        raise ValueError("rows: expected stored results of sculpt-vs-m, received none (run the sweep first)")
    diagnostic = {row.get(DIAGNOSTIC, True) is False for row in rows}
    if len(diagnostic) > 1:
        raise ValueError(f"rows: the body's defaults and its {DIAGNOSTIC} = false diagnostic in one set of rows; "
                         f"plot them from separate --db files")
    out_dir = Path(out_dir)
    rows = [{**row, "span_or_one": span_or_one(row)} for row in rows]
    heads_values = sorted({row["heads"] for row in rows})
    samples_values = sorted({row["samples"] for row in rows})
    names = [f"m = {heads}" for heads in heads_values]
    fig, (span_ax, rows_ax, error_ax, need_ax) = new_figure(4)
    table = []
    for heads, name in zip(heads_values, names):
        group = [row for row in rows if row["heads"] == heads]
        style = style_for(name, names)
        plot_band(span_ax, summarize_curve(group, "samples", "span_or_one"), label=name, style=style)
        found = [row for row in group if row.get("agreement_rows")]
        plot_band(rows_ax, summarize_curve(found, "samples", "agreement_rows"), label=name, style=style)
        tested = [row for row in group if row.get("test_error") is not None]
        plot_band(error_ax, summarize_curve(tested, "samples", "test_error"), label=name, style=style)
        for (samples,), cells in group_rows(group, ["samples"]).items():
            def median(key):
                values = [row[key] for row in cells if row.get(key) is not None]
                return median_quartiles(values)[1] if values else math.nan
            table.append((heads, samples, len(cells), median("agreement_rows"), median("precision"),
                          median("feasible"), median("refined_w_sum_error"), median("span_or_one"),
                          sum(row.get("refused") is not None for row in cells), median("candidates"),
                          median("test_error"), median("body_seconds"),
                          sum(bool(row.get("resumed")) for row in cells),
                          max(row["peak_memory_mb"] for row in cells)))
    needed = samples_to_target(rows)
    # An m that did not reach the target is drawn as an open bar at the largest n run for it.
    largest = {heads: max(row["samples"] for row in rows if row["heads"] == heads) for heads in heads_values}
    for heads, name in zip(heads_values, names):
        color = style_for(name, names)["color"]
        if math.isfinite(needed[heads]):
            need_ax.bar([heads], [needed[heads]], color=color)
        else:
            need_ax.bar([heads], [largest[heads]], fill=False, edgecolor=color, hatch="//")
            need_ax.text(heads, largest[heads], f"> {largest[heads]:g}", ha="center", va="bottom", fontsize=8)
    for ax in (span_ax, rows_ax, error_ax):
        ax.set_xscale("log")
        ax.set_yscale("log")
        set_grid_ticks(ax, samples_values)
        ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("sequences n")
        ax.grid(True, which="major", alpha=0.3)
    span_ax.axhline(SPAN_TARGET, color="0.5", ls=":", lw=1)
    span_ax.set_ylabel("body's span distance (1 = refused)")
    rows_ax.set_ylabel("agreement rows found for K*")
    error_ax.set_ylabel("test error of the paper's output (no polish)")
    need_ax.set_yscale("log")
    need_ax.set_xticks(heads_values)
    need_ax.set_xlabel("heads m")
    need_ax.set_ylabel(f"n for median span distance ≤ {SPAN_TARGET}")
    span_ax.legend(fontsize=8)
    first = rows[0]
    fig.suptitle(f"Chen & Li's body as m grows — d = {first['dim']}, k = {first['length']}, ‖Θ_i‖_F = 2, "
                 f"noiseless{'; noise estimate off (diagnostic)' if diagnostic == {True} else ''}; "
                 f"median and quartiles over seeds", fontsize=9)
    return [
        save_figure(fig, out_dir / "sculpt-vs-m.png"),
        write_tables(out_dir / "sculpt-vs-m.txt", [
            ("medians over seeds", ["m", "n", "seeds", "agreement_rows", "precision", "feasible", "W_sum_error",
                                    "span_distance", "refused", "candidates", "test_error", "body_s",
                                    "resumed", "peak_MB"], table),
            (f"samples for median span distance ≤ {SPAN_TARGET} over every teacher (a refusal counts as 1; "
             f"not reached: > the largest n run)", ["m", "n"],
             [(heads, needed[heads] if math.isfinite(needed[heads]) else f"> {largest[heads]:g}")
              for heads in heads_values]),
        ]),
    ]


register_experiment(Experiment(
    "sculpt-vs-m",
    "Chen & Li's body as m grows: agreement rows, span distance and samples needed, n up to 10^6 (streamed)",
    sculpt_vs_m_cells, run_sculpt_vs_m_cell, plot_sculpt_vs_m, checkpoints=True))
