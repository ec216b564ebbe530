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

:func:`agreement_law` fits a law of log₁₀(rate per row) in (m, k)
(:data:`LAWS`: a + b·(m − 1)(k − 1), or (m − 1)·(c + b·(k − 1))) over the
cells of one τ and ‖Θ‖_F by Poisson likelihood, with 90 % bootstrap
intervals over teachers; :func:`held_out_prediction` refits it without one
(m, k) cell and compares its prediction with that cell's measured rate.  These use the
teacher and are diagnostics, not learners.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from .._validation import Integer, Real
from ..attention.data import boolean_inputs
from ..attention.teacher_source import TeacherSource
from ..attention.teachers import nondegeneracy, sample_teacher
from ..evaluation import agreement_precision, span_distance
from ..learners.chen_li import BodySettings
from ..learners.chen_li.agreement_passes import find_agreement_rows
from ..learners.chen_li.phase4_span import read_affine_hull, span_basis
from ..learners.chen_li.slabs import slab_constraints
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
    constraints = {"heads": [Integer(1)], "dim": [Integer(1)], "length": [Integer(2)],
                   "theta_norm": [Real(0.0, low_open=True)], "seed": [Integer(0)], "max_samples": [Integer(1)],
                   "target_rows": [Integer(1)], "decode_samples": [Integer(0)], "span_samples": [Integer(0)]}
    cells = expand_grid(table, FIELDS, defaults=_DEFAULTS, experiment="agreement-rate", constraints=constraints)
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
        slabs = slab_constraints(rows.subset(np.arange(count)), **settings.slab_rule())
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
        **nondegeneracy(teacher).columns(),
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


#: The laws fitted: log₁₀(rate per row) as a linear form in these features of (m, k).
#: ``"slope"``: a + b·(m − 1)(k − 1).  ``"per-head"``: (m − 1)·(c + b·(k − 1)), which is 0 at m = 1
#: (every row agrees) and says that each head past the first multiplies the rate by 10^(c + b(k − 1)).
LAWS = {
    "slope": (("a", lambda u, v: np.ones_like(u)), ("b", lambda u, v: u * v)),
    "per-head": (("c", lambda u, v: u), ("b", lambda u, v: u * v)),
}


def _law_points(rows: list[dict], tolerance: float, theta_norm: float) -> list[tuple]:
    """(seed, m − 1, k − 1, rows found, rows drawn) of every rate cell with m ≥ 2 at ‖Θ‖_F = ``theta_norm``."""
    points = {}
    for row in rows:
        if row["heads"] >= 2 and math.isclose(row["theta_norm"], theta_norm) and row.get("sequences"):
            # A teacher's count does not depend on the decoder's fields: cells that differ only there
            # (grids/agreement-rate-rows.toml) drew the same rows, and count once.
            key = (row["seed"], row["heads"], row["dim"], row["length"], row["max_samples"], row["target_rows"])
            points.setdefault(key, (row["seed"], row["heads"] - 1, row["length"] - 1,
                                    row["teacher_rows"][f"{tolerance:g}"], row["sequences"] * row["length"]))
    return list(points.values())


def _poisson_fit(points, law: str) -> np.ndarray:
    """Maximum-likelihood coefficients of log₁₀ rate = features · β, counts Poisson with their rows as exposure.

    The likelihood uses every cell, those with few or no agreement rows
    included: leaving them out would keep, at large (m, k), only the
    teachers whose rate happened to be high, and flatten the law.
    """
    from scipy.optimize import minimize

    u, v, count, drawn = (np.array([p[i] for p in points], dtype=float) for i in (1, 2, 3, 4))
    features = np.stack([feature(u, v) for _, feature in LAWS[law]], axis=1) * math.log(10.0)
    log_drawn = np.log(drawn)

    def negative_log_likelihood(beta):
        log_mean = log_drawn + features @ beta
        mean = np.exp(log_mean)
        return float((mean - count * log_mean).sum()), features.T @ (mean - count)

    start = np.full(features.shape[1], -0.3)
    return minimize(negative_log_likelihood, start, jac=True, method="BFGS", options={"gtol": 1e-10}).x


def agreement_law(rows: list[dict], *, law: str = "slope", tolerance: float = LAW_TOLERANCE,
                  theta_norm: float = 2.0, exclude=None, resamples: int = 200, seed: int = 0) -> dict:
    """One of :data:`LAWS` fitted to the cells with m ≥ 2, with 90 % bootstrap intervals over teachers.

    Poisson maximum likelihood on the agreement rows counted at
    ``tolerance`` (:func:`_poisson_fit`); ``exclude`` is an (m, k) pair left
    out (a held-out cell).  The bootstrap resamples teachers (seeds),
    keeping each teacher's cells together, since they share its Θ.
    """
    points = [p for p in _law_points(rows, tolerance, theta_norm)
              if exclude is None or (p[1] + 1, p[2] + 1) != tuple(exclude)]
    if len({p[1] * p[2] for p in points}) < 2 or not any(p[3] for p in points):
        raise ValueError(f"rows: the agreement law needs cells at two values of (m - 1)(k - 1) and some "
                         f"agreement rows at tolerance {tolerance}, received {len(points)} cells")
    beta = _poisson_fit(points, law)
    by_seed = {}
    for point in points:
        by_seed.setdefault(point[0], []).append(point)
    seeds = sorted(by_seed)
    generator = np.random.default_rng(seed)
    draws = np.array([_poisson_fit([p for s in generator.choice(seeds, len(seeds)) for p in by_seed[s]], law)
                      for _ in range(resamples)])
    names = [name for name, _ in LAWS[law]]
    return {"law": law, "tolerance": tolerance, "theta_norm": theta_norm,
            "coefficients": dict(zip(names, map(float, beta))),
            "intervals": {name: tuple(map(float, np.quantile(draws[:, i], [0.05, 0.95])))
                          for i, name in enumerate(names)},
            "cells": len({(p[1], p[2]) for p in points}), "teachers": len(seeds),
            "cells_without_rows": sum(p[3] == 0 for p in points)}


def predicted_rate(law: dict, heads: int, length: int) -> float:
    """The rate per row a fitted law predicts at (m, k)."""
    u, v = np.array([heads - 1.0]), np.array([length - 1.0])
    exponent = sum(law["coefficients"][name] * feature(u, v)[0] for name, feature in LAWS[law["law"]])
    return float(10.0 ** exponent)


def held_out_prediction(rows: list[dict], cell=HELD_OUT, **law_options) -> dict:
    """The law fitted without the (m, k) ``cell``, its predicted rate per row there, and the measured median."""
    law = agreement_law(rows, exclude=cell, **law_options)
    measured = [p[3] / p[4] for p in _law_points(rows, law["tolerance"], law["theta_norm"])
                if (p[1] + 1, p[2] + 1) == tuple(cell)]
    if not measured:
        raise ValueError(f"rows: no measured cell at (m, k) = {tuple(cell)} to compare the law's prediction with")
    predicted = predicted_rate(law, *cell)
    median = float(np.median(measured))
    return {"cell": tuple(cell), "predicted": predicted, "measured_median": median, "measured": measured,
            "ratio": predicted / median if median > 0 else math.inf, "law": law}


def plot_agreement_rate(rows: list[dict], out_dir: Path) -> list[Path]:
    """Writes ``agreement-rate.png`` and ``agreement-rate.txt``: every cell, both laws and the held-out check."""
    if not rows:
        raise ValueError("rows: expected stored results of agreement-rate, received none (run the sweep first)")
    out_dir = Path(out_dir)
    rate_rows = [row for row in rows if row.get("sequences")]
    fig, (rate_ax, law_ax) = new_figure(2)
    lengths = sorted({row["length"] for row in rate_rows})
    names = [f"k = {length}" for length in lengths]
    laws, checks = [], []
    for norm in sorted({row["theta_norm"] for row in rate_rows}):
        for tolerance in TOLERANCES:
            for law in LAWS:
                try:
                    laws.append(agreement_law(rows, law=law, tolerance=tolerance, theta_norm=norm))
                except ValueError:
                    continue
    for law in LAWS:
        try:
            checks.append(held_out_prediction(rows, law=law))
        except ValueError:
            continue
    main = [row for row in rate_rows if math.isclose(row["theta_norm"], 2.0)]
    per_head = next((fit for fit in laws if fit["law"] == "per-head" and fit["tolerance"] == LAW_TOLERANCE
                     and math.isclose(fit["theta_norm"], 2.0)), None)
    for length, name in zip(lengths, names):
        style = style_for(name, names)
        group = [row for row in main if row["length"] == length]
        heads = np.array([row["heads"] for row in group])
        # A cell without agreement rows is drawn at half a row: an upper bound, marked open.
        found = np.array([row["teacher_rows"][f"{LAW_TOLERANCE:g}"] for row in group])
        rate = np.maximum(found, 0.5) / np.array([row["sequences"] * row["length"] for row in group])
        rate_ax.scatter(heads[found > 0], rate[found > 0], s=14, color=style["color"], label=name)
        rate_ax.scatter(heads[found == 0], rate[found == 0], s=14, facecolors="none", edgecolors=style["color"])
        if per_head is not None and len(heads):
            grid = np.arange(1, heads.max() + 1)
            law_ax.plot(grid, [predicted_rate(per_head, m, length) for m in grid], color=style["color"], label=name)
            law_ax.scatter(heads[found > 0], rate[found > 0], s=10, color=style["color"])
    for ax in (rate_ax, law_ax):
        ax.set_yscale("log")
        ax.set_xlabel("heads m")
        ax.grid(True, alpha=0.3)
    rate_ax.set_ylabel(f"agreement rows per row (τ = {LAW_TOLERANCE}); open: none")
    law_ax.set_ylabel("the per-head law, fitted on every cell")
    rate_ax.legend(fontsize=7, ncol=2)
    first = rate_rows[0]
    fig.suptitle(f"Agreement rows from the teacher alone — d = {first['dim']}, ‖Θ_i‖_F = 2, Boolean inputs; "
                 f"three teachers per m", fontsize=9)
    cells = sorted(rows, key=lambda row: (row["theta_norm"], row["heads"], row["length"], row["seed"]))

    def coefficient(fit, name):
        value = fit["coefficients"].get(name)
        return ("", "", "") if value is None else (value, *fit["intervals"][name])

    return [
        save_figure(fig, out_dir / "agreement-rate.png"),
        write_tables(out_dir / "agreement-rate.txt", [
            ("laws of log10 rate per row, Poisson fits over every cell with m >= 2 (zero counts included), "
             "90 % bootstrap intervals over teachers: slope = a + b (m-1)(k-1); per-head = (m-1)(c + b (k-1))",
             ["law", "tolerance", "theta_norm", "a_or_c", "lo", "hi", "b", "b_lo", "b_hi", "cells", "teachers",
              "cells_without_rows"],
             [(fit["law"], fit["tolerance"], fit["theta_norm"],
               *coefficient(fit, "a" if fit["law"] == "slope" else "c"), *coefficient(fit, "b"), fit["cells"],
               fit["teachers"], fit["cells_without_rows"]) for fit in laws]),
            (f"held-out cell, fixed before the sweep ran (each law fitted without it; tolerance {LAW_TOLERANCE}, "
             f"theta_norm 2)", ["law", "m", "k", "predicted_rate", "measured_median", "ratio"],
             [(check["law"]["law"], *check["cell"], check["predicted"], check["measured_median"], check["ratio"])
              for check in checks]),
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


def fresh_teacher_check(rows: list[dict], fresh_rows: list[dict], **law_options) -> list[dict]:
    """Each law fitted on ``rows`` predicts the rate of fresh teachers' cells (``fresh_rows``, other seeds).

    The out-of-sample check of a law: the fit never saw these teachers
    (unlike :func:`held_out_prediction`, which leaves out an (m, k) cell of
    the same teachers).  One entry per law and fresh (m, k): the predicted
    rate per row, the fresh teachers' median and ``ratio`` = predicted /
    measured (inf when no fresh teacher found a row).
    """
    checks = []
    for law_name in LAWS:
        law = agreement_law(rows, law=law_name, **law_options)
        points = _law_points(fresh_rows, law["tolerance"], law["theta_norm"])
        for heads, length in sorted({(p[1] + 1, p[2] + 1) for p in points}):
            measured = [p[3] / p[4] for p in points if (p[1] + 1, p[2] + 1) == (heads, length)]
            median = float(np.median(measured))
            predicted = predicted_rate(law, heads, length)
            checks.append({"law": law_name, "cell": (heads, length), "teachers": len(measured),
                           "predicted": predicted, "measured_median": median, "measured": measured,
                           "ratio": predicted / median if median > 0 else math.inf})
    return checks
