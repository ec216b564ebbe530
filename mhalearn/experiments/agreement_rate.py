"""The ``agreement-rate`` experiment: how rare agreement rows are, as m and k grow.

Chen & Li's body is sculpted from *agreement rows*: rows of a sequence on
which every head has the same attention pattern.  How often they occur sets
how many sequences the body needs, so their rate is what decides the body's
sample cost on a family of teachers.  Each cell plants a teacher (m heads,
dimension d, ‖Θ_i‖_F = ``theta_norm``) and measures, on uniform Boolean
sequences of length k:

- **from the teacher alone**: the share of rows on which every head's
  attention row lies within ℓ1 distance τ of the heads' mean, for each τ of
  :data:`TOLERANCES`, drawn until :data:`LAW_TOLERANCE` has ``target_rows``
  rows or ``max_samples`` sequences were drawn (a cell with fewer than
  ``target_rows`` is censored: its count is still exact, the rate's
  relative error is larger);
- **through our decoder with the true W_Σ** (when ``decode_samples`` > 0):
  the rows that phase 2 accepts with SculptLearner's residual and simplex
  tolerances on ``decode_samples`` sequences, uncapped, and their precision
  against the teacher (d > k only: the decoder needs it);
- **the rows K\\* needs** (when ``span_samples`` > 0): the decoder's rows
  with the true W_Σ on ``span_samples`` sequences, in stream order, turned
  into slabs and the body's affine hull read off growing prefixes of them
  (no ``max_rows`` cap): the fewest rows whose span distance is ≤
  :data:`SPAN_TARGET`.

:func:`agreement_law` fits log₁₀(rate per row) = a + b·(m − 1)(k − 1) over
the cells of one τ and ‖Θ‖_F, with a 90 % bootstrap interval over
teachers; :func:`held_out_prediction` refits it without one (m, k) cell and
compares its prediction with that cell's measured rate.  These use the
teacher and are diagnostics, not learners.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from ..attention.data import boolean_inputs
from ..attention.teachers import sample_teacher
from ..evaluation import agreement_precision, span_distance
from ..learners.chen_li import BodySettings
from ..learners.chen_li.phase2_sculpt import find_agreement_rows, slab_constraints
from ..learners.chen_li.phase4_span import read_affine_hull, span_basis
from ..learners.streams import TeacherSource
from ..plotting import new_figure, save_figure, style_for, write_tables
from ..seeding import seeded_rng
from .registry import Experiment, expand_grid, register_experiment

#: ℓ1 distances of every head's attention row to the heads' mean that count as agreement.
TOLERANCES = (0.05, 0.1, 0.2)
#: The tolerance the law is fitted at and the drawing stops on.
LAW_TOLERANCE = 0.1
#: Span distance (sin of the largest principal angle) K* must reach.
SPAN_TARGET = 0.1
#: Sequences a block of the teacher-alone count draws (bounded memory: m·k² floats each).
BLOCK_SEQUENCES = 20_000
#: The (m, k) cell left out of the law's fit and predicted, fixed before any cell was measured.
HELD_OUT = (3, 6)

FIELDS = ("heads", "dim", "length", "theta_norm", "seed", "max_samples", "target_rows", "decode_samples",
          "span_samples")
_DEFAULTS = {"theta_norm": 2.0, "target_rows": 200, "decode_samples": 0, "span_samples": 0}


def agreement_rate_cells(table: dict) -> list[dict]:
    """The cells of a grid table (``grids/agreement-rate.toml``): m × k × ‖Θ‖_F × teachers."""
    cells = expand_grid(table, FIELDS, defaults=_DEFAULTS, experiment="agreement-rate")
    for cell in cells:
        if (cell["decode_samples"] or cell["span_samples"]) and cell["dim"] <= cell["length"]:
            raise ValueError(f"grid: agreement-rate decodes rows only for dim > length, received dim = "
                             f"{cell['dim']}, length = {cell['length']} with decode_samples or span_samples > 0")
    return cells


def teacher_of(cell: dict):
    """The cell's teacher: it depends on (m, d, ‖Θ‖_F, seed) only, so every k sees the same teachers."""
    return sample_teacher(cell["heads"], cell["dim"], theta_norm=float(cell["theta_norm"]),
                          rng=seeded_rng(20_261, cell["heads"], cell["dim"], round(1000 * cell["theta_norm"]),
                                         cell["seed"]))


def teacher_agreement_counts(teacher, length: int, *, max_samples: int, target_rows: int, rng,
                             tolerances=TOLERANCES, stop_tolerance: float = LAW_TOLERANCE) -> tuple[np.ndarray, int]:
    """Rows on which every head's attention row is within τ (ℓ1) of the heads' mean, per τ, and the sequences drawn.

    Draws blocks of uniform Boolean sequences until the count at
    ``stop_tolerance`` reaches ``target_rows`` or ``max_samples`` sequences
    were drawn.
    """
    tolerances = np.asarray(tolerances, dtype=float)
    stop = int(np.flatnonzero(np.isclose(tolerances, stop_tolerance))[0])
    counts = np.zeros(len(tolerances), dtype=np.int64)
    drawn = 0
    while drawn < max_samples and counts[stop] < target_rows:
        size = min(BLOCK_SEQUENCES, max_samples - drawn)
        weights = teacher.attention(boolean_inputs(size, length, teacher.dim, rng=rng))  # (n, m, k, k)
        spread = np.abs(weights - weights.mean(axis=1, keepdims=True)).sum(axis=-1).max(axis=1)  # (n, k)
        counts += (spread.reshape(-1, 1) <= tolerances).sum(axis=0)
        drawn += size
    return counts, drawn


def rows_for_span(rows, teacher, settings: BodySettings, target: float = SPAN_TARGET) -> dict:
    """The fewest leading agreement rows whose slabs give K\\* a span within ``target``, on a doubling grid.

    Returns the rows tried last, their span distance, and the rows needed
    (None when every prefix up to all of ``rows`` misses the target or has
    fewer than d² equalities).
    """
    tried = distance = None
    count = min(len(rows), 64)
    while True:
        slabs = slab_constraints(rows.subset(np.arange(count)), w_min=settings.w_min, kappa=settings.slab_width,
                                 t_min=settings.slab_floor)
        if slabs.equalities >= teacher.dim ** 2:
            centre, long_directions, _ = read_affine_hull(slabs, teacher.heads)
            tried, distance = count, span_distance(span_basis(centre, long_directions, teacher.heads), teacher)
            if distance <= target:
                return {"rows_needed": count, "span_rows_tried": tried, "span_distance": distance}
        if count == len(rows):
            return {"rows_needed": None, "span_rows_tried": tried, "span_distance": distance}
        count = min(2 * count, len(rows))


def run_agreement_rate_cell(cell: dict) -> dict:
    """One cell (BLAS on one thread, as in the learners' fits)."""
    with threadpool_limits(limits=1, user_api="blas"):
        return _run_cell(cell)


def _run_cell(cell: dict) -> dict:
    teacher = teacher_of(cell)
    length = cell["length"]
    started = time.perf_counter()
    counts, drawn = teacher_agreement_counts(teacher, length, max_samples=cell["max_samples"],
                                             target_rows=cell["target_rows"],
                                             rng=seeded_rng(20_262, cell["seed"], length, cell["heads"]))
    law = TOLERANCES.index(LAW_TOLERANCE)
    metrics = {
        "sequences": drawn,
        "teacher_rows": {f"{tau:g}": int(count) for tau, count in zip(TOLERANCES, counts)},
        "teacher_rate_per_row": float(counts[law]) / (drawn * length),
        "teacher_rate_per_sequence": float(counts[law]) / drawn,
        "censored": bool(counts[law] < cell["target_rows"]),
        "teacher_seconds": time.perf_counter() - started,
        "decoder_rows": None, "decoder_rate_per_sequence": None, "decoder_precision": None,
        "rows_needed": None, "span_rows_tried": None, "span_distance": None,
    }
    settings = BodySettings()
    decode = max(cell["decode_samples"], cell["span_samples"])
    if decode:
        source = TeacherSource(teacher, decode, length, seed=cell["seed"])
        rows = find_agreement_rows(source, teacher.projection_sum, residual_tol=settings.residual_tol,
                                   simplex_tol=settings.simplex_tol)
        metrics.update(decoder_rows=rows.found, decoder_rate_per_sequence=rows.found / decode,
                       decoder_precision=agreement_precision(rows, teacher) if len(rows) else None)
        if cell["span_samples"]:
            metrics.update(rows_for_span(rows, teacher, settings))
    metrics["seconds"] = time.perf_counter() - started
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in metrics.items()}


def _law_points(rows: list[dict], tolerance: float, theta_norm: float) -> list[tuple]:
    """(seed, x = (m − 1)(k − 1), rows found, rate per row, m, k) of every rate cell with m ≥ 2 at ‖Θ‖_F."""
    points = []
    for row in rows:
        if row["heads"] < 2 or not math.isclose(row["theta_norm"], theta_norm) or not row.get("sequences"):
            continue
        count = row["teacher_rows"][f"{tolerance:g}"]
        points.append((row["seed"], (row["heads"] - 1) * (row["length"] - 1), count,
                       count / (row["sequences"] * row["length"]), row["heads"], row["length"]))
    return points


def _line(points) -> tuple[float, float]:
    """Least-squares intercept and slope of log₁₀ rate against x."""
    slope, intercept = np.polyfit([p[1] for p in points], [math.log10(p[3]) for p in points], 1)
    return float(intercept), float(slope)


def agreement_law(rows: list[dict], *, tolerance: float = LAW_TOLERANCE, theta_norm: float = 2.0,
                  min_rows: int = 10, exclude=None, resamples: int = 2000, seed: int = 0) -> dict:
    """log₁₀(rate per row) = a + b·(m − 1)(k − 1), fitted over cells with m ≥ 2, with 90 % bootstrap intervals.

    Cells with fewer than ``min_rows`` agreement rows are left out of the
    fit (their rates are too noisy to take a logarithm of) and counted in
    ``censored``; ``exclude`` is an (m, k) pair to leave out (a held-out
    cell).  The bootstrap resamples teachers (seeds), keeping each
    teacher's cells together, since one teacher's cells share its Θ.
    """
    points = [p for p in _law_points(rows, tolerance, theta_norm) if exclude is None or p[4:] != tuple(exclude)]
    kept = [p for p in points if p[2] >= min_rows]
    if len({p[1] for p in kept}) < 2:
        raise ValueError(f"rows: the agreement law needs cells at two values of (m - 1)(k - 1) with at least "
                         f"{min_rows} rows at tolerance {tolerance}, received {len(kept)} such cells")
    intercept, slope = _line(kept)
    by_seed = {}
    for p in kept:
        by_seed.setdefault(p[0], []).append(p)
    seeds = sorted(by_seed)
    generator = np.random.default_rng(seed)
    slopes, intercepts = [], []
    for _ in range(resamples):
        sample = [p for s in generator.choice(seeds, len(seeds), replace=True) for p in by_seed[s]]
        if len({p[1] for p in sample}) >= 2:
            a, b = _line(sample)
            intercepts.append(a)
            slopes.append(b)
    return {"tolerance": tolerance, "theta_norm": theta_norm, "intercept": intercept, "slope": slope,
            "slope_interval": tuple(float(v) for v in np.quantile(slopes, [0.05, 0.95])),
            "intercept_interval": tuple(float(v) for v in np.quantile(intercepts, [0.05, 0.95])),
            "cells": len({p[4:] for p in kept}), "teachers": len(seeds), "points": len(kept),
            "censored": len(points) - len(kept)}


def held_out_prediction(rows: list[dict], cell=HELD_OUT, **law_options) -> dict:
    """The law fitted without the (m, k) ``cell``, its predicted rate per row there, and the measured median."""
    law = agreement_law(rows, exclude=cell, **law_options)
    heads, length = cell
    measured = [p[3] for p in _law_points(rows, law["tolerance"], law["theta_norm"]) if p[4:] == tuple(cell)]
    if not measured:
        raise ValueError(f"rows: no measured cell at (m, k) = {cell} to compare the law's prediction with")
    predicted = 10 ** (law["intercept"] + law["slope"] * (heads - 1) * (length - 1))
    median = float(np.median(measured))
    return {"cell": tuple(cell), "predicted": predicted, "measured_median": median,
            "measured": measured, "ratio": predicted / median if median > 0 else math.inf, "law": law}


def plot_agreement_rate(rows: list[dict], out_dir: Path) -> list[Path]:
    """Writes ``agreement-rate.png`` and ``agreement-rate.txt`` (the law, its held-out check, every cell)."""
    if not rows:
        raise ValueError("rows: expected stored results of agreement-rate, received none (run the sweep first)")
    out_dir = Path(out_dir)
    rate_rows = [row for row in rows if row.get("sequences")]
    norms = sorted({row["theta_norm"] for row in rate_rows})
    names = [f"‖Θ‖_F = {norm:g}" for norm in norms]
    fig, (rate_ax, tol_ax) = new_figure(2)
    laws = []
    for norm, name in zip(norms, names):
        group = [row for row in rate_rows if math.isclose(row["theta_norm"], norm) and row["heads"] >= 2]
        x = [(row["heads"] - 1) * (row["length"] - 1) for row in group]
        y = [max(row["teacher_rate_per_row"], 0.5 / (row["sequences"] * row["length"])) for row in group]
        style = style_for(name, names)
        rate_ax.scatter(x, y, s=12, color=style["color"], label=name,
                        marker="o" if norm == 2.0 else "s", alpha=0.7)
        try:
            law = agreement_law(rows, theta_norm=norm)
        except ValueError:
            continue
        laws.append(law)
        grid = np.linspace(0, max(x), 50)
        rate_ax.plot(grid, 10 ** (law["intercept"] + law["slope"] * grid), color=style["color"], lw=1)
    for tau in TOLERANCES:
        try:
            law = agreement_law(rows, tolerance=tau)
        except ValueError:
            continue
        if tau != LAW_TOLERANCE:
            laws.append(law)
        tol_ax.errorbar([tau], [law["slope"]], yerr=[[law["slope"] - law["slope_interval"][0]],
                                                     [law["slope_interval"][1] - law["slope"]]], fmt="o", color="0.2")
    rate_ax.set_yscale("log")
    rate_ax.set_xlabel("(m − 1)(k − 1)")
    rate_ax.set_ylabel(f"agreement rows per row (τ = {LAW_TOLERANCE}); censored at 0.5/rows")
    rate_ax.legend(fontsize=8)
    tol_ax.set_xscale("log")
    tol_ax.set_xlabel("tolerance τ (ℓ1)")
    tol_ax.set_ylabel("slope of log₁₀ rate per unit of (m − 1)(k − 1), 90 % interval")
    first = rate_rows[0]
    fig.suptitle(f"Agreement rows from the teacher alone — d = {first['dim']}, Boolean inputs", fontsize=9)
    try:
        check = held_out_prediction(rows)
        checks = [(f"m = {check['cell'][0]}, k = {check['cell'][1]}", check["predicted"], check["measured_median"],
                   check["ratio"], check["law"]["slope"])]
    except ValueError:
        checks = []
    cells = sorted(rows, key=lambda row: (row["theta_norm"], row["heads"], row["length"], row["seed"]))
    return [
        save_figure(fig, out_dir / "agreement-rate.png"),
        write_tables(out_dir / "agreement-rate.txt", [
            ("law: log10 rate per row = a + b (m - 1)(k - 1), 90 % bootstrap intervals over teachers",
             ["tolerance", "theta_norm", "a", "a_lo", "a_hi", "b", "b_lo", "b_hi", "cells", "teachers",
              "censored"],
             [(law["tolerance"], law["theta_norm"], law["intercept"], *law["intercept_interval"], law["slope"],
               *law["slope_interval"], law["cells"], law["teachers"], law["censored"]) for law in laws]),
            (f"held-out cell (fit without it, tolerance {LAW_TOLERANCE}, theta_norm 2)",
             ["cell", "predicted_rate", "measured_median", "ratio", "slope_without"], checks),
            ("every cell", ["m", "d", "k", "theta_norm", "seed", "sequences", "rows_0.05", "rows_0.1", "rows_0.2",
                            "rate_per_row", "decoder_rows", "decoder_rate_per_seq", "decoder_precision",
                            "rows_needed", "span_distance"],
             [(row["heads"], row["dim"], row["length"], row["theta_norm"], row["seed"], row["sequences"],
               *(row["teacher_rows"][f"{tau:g}"] for tau in TOLERANCES), row["teacher_rate_per_row"],
               row["decoder_rows"], row["decoder_rate_per_sequence"], row["decoder_precision"],
               row["rows_needed"], row["span_distance"]) for row in cells]),
        ]),
    ]


register_experiment(Experiment(
    "agreement-rate",
    "Agreement rows per row from the teacher alone and through the decoder with the true W_sum, over m, k, "
    "tolerance and ||Theta||_F, and the law log rate ~ (m - 1)(k - 1)",
    agreement_rate_cells, run_agreement_rate_cell, plot_agreement_rate))
