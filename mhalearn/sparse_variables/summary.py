"""Tables and figures of the ``sparse-variables`` sweep ([design: sparse-variables], [design: experiments]).

Reference: B. L. Edelman, S. Goel, S. Kakade and C. Zhang, "Inductive biases
and variable creation in self-attention mechanisms", ICML 2022.

From the stored rows of :mod:`~mhalearn.experiments.sparse_variables`: the
median over seeds of the per-seed samples-to-target with a bootstrap
interval, the growth-law fits n = a + b·ln T and n = c·T^α per (g, student)
(:mod:`~mhalearn.sparse_variables.growth`), the growth from the smallest to
the largest T, and the figures of ``mhalearn plot sparse-variables``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..plotting import new_figure, plt, save_figure, set_grid_ticks, style_for, write_tables
from . import FUNCTIONS, GRADIENT_STUDENTS, STUDENT_NAMES
from .growth import LAWS, bootstrap_median, fit_growth_laws, law_curve

# --------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------

def _threshold(row: dict) -> float:
    value = row.get("samples_to_target")
    return math.inf if value is None else float(value)


def per_seed_thresholds(rows: list[dict]) -> dict[tuple, dict[int, list[float]]]:
    """{(g, student): {T: [samples-to-target of each seed]}} (``math.inf`` = not reached)."""
    result: dict[tuple, dict[int, list[float]]] = {}
    for row in rows:
        result.setdefault((row["function"], row["student"]), {}).setdefault(row["length"], []).append(
            _threshold(row))
    return result


def _ordered_series(keys) -> list[tuple]:
    return sorted(keys, key=lambda key: (FUNCTIONS.index(key[0]), STUDENT_NAMES.index(key[1])))


def _parity_search_reference(length: float, sparsity: int) -> float:
    """log₂ C(T, s): the sample size at which one wrong parity of s bits is expected to stay consistent.

    Through the Gamma function, so T may be any real >= s (for drawing the curve).
    """
    return (math.lgamma(length + 1) - math.lgamma(sparsity + 1) - math.lgamma(length - sparsity + 1)) / math.log(2)


def summary_tables(rows: list[dict], *, level: float = 0.9) -> list[tuple]:
    """The tables of ``sparse-variables.txt`` as ``(title, header, lines)`` triples.

    1. samples-to-target per (g, student, T): median over seeds [bootstrap interval];
    2. the growth-law fits per (g, student);
    3. growth from the smallest to the largest T with its interval;
    4. the learners at the largest n they tried (train vs test accuracy, final loss).
    """
    thresholds = per_seed_thresholds(rows)
    series = _ordered_series(thresholds)
    lengths = sorted({row["length"] for row in rows})
    seeds = len({row["seed"] for row in rows})
    first = rows[0]
    target, cap = first["target"], max(row["max_samples"] for row in rows)
    tables = []

    def cell_text(values):
        median, low, high = bootstrap_median(values, level=level)
        return "not reached" if math.isinf(median) else f"{median:g} [{low:g}, {high:g}]"

    lines = [[function, student] + [cell_text(thresholds[(function, student)][length])
                                    if length in thresholds[(function, student)] else "-" for length in lengths]
             for function, student in series]
    if any(student == "parity-search" for _, student in series):
        lines.append(["(log2 C(T,s))", ""] + [f"{_parity_search_reference(length, first['sparsity']):.1f}"
                                              for length in lengths])
    tables.append((f"samples to {target:.0%} test accuracy: median over {seeds} seeds "
                   f"[{level:.0%} bootstrap interval]; per seed the smallest n found by bisection to a factor "
                   f"2^(1/{first['per_octave']}); 'not reached' = above n = {cap} for most seeds",
                   ["function", "student"] + [f"T={length}" for length in lengths], lines))

    fit_lines = []
    for function, student in series:
        fit = fit_growth_laws(thresholds[(function, student)], level=level)
        if fit is None:
            fit_lines.append([function, student] + ["fewer than 3 T reached"] + ["-"] * 7)
            continue
        (a, b), (c, alpha) = fit.log_params, fit.power_params
        fit_lines.append([
            function, student, f"{alpha:.3f} [{fit.alpha_interval[0]:.3f}, {fit.alpha_interval[1]:.3f}]",
            f"{b:.2f} [{fit.b_interval[0]:.2f}, {fit.b_interval[1]:.2f}]", f"{a:.2f}", f"{c:.3g}",
            f"{fit.delta_aic:+.2f}",
            f"{fit.held_out_prediction['log']:.3g} / {fit.held_out_prediction['power']:.3g} "
            f"(measured {fit.medians[-1]:g})",
            fit.better, f"{int(fit.lengths[0])}-{int(fit.lengths[-1])}"])
    tables.append((f"growth laws fitted to the medians (least squares on ln n): n = a + b·ln T and n = c·T^α, "
                   f"{level:.0%} bootstrap intervals over seeds; ΔAIC = AIC(log) − AIC(power) (negative favours "
                   f"log T); held-out: each law fitted without the largest T, predicting it",
                   ["function", "student", "alpha", "b", "a", "c", "dAIC", "held-out T=max: log / power",
                    "better", "T range"], fit_lines))

    growth_lines = []
    for function, student in series:
        per_length = thresholds[(function, student)]
        low_length, high_length = min(per_length), max(per_length)
        # A series not yet swept at every T is compared over the range it has, and says so.
        growth_lines.append([function, student, f"{low_length}-{high_length}",
                             _growth_text(per_length[low_length], per_length[high_length], level)])
    log_ratio = math.log(lengths[-1]) / math.log(lengths[0]) if lengths[0] > 1 else math.nan
    tables.append((f"growth of samples-to-{target:.0%} from T = {lengths[0]} to T = {lengths[-1]} (ratio of "
                   f"medians [{level:.0%} bootstrap interval]); log T predicts {log_ratio:.3g}, "
                   f"√T {math.sqrt(lengths[-1] / lengths[0]):.3g}, T {lengths[-1] / lengths[0]:.3g}",
                   ["function", "student", "T range", "ratio"], growth_lines))

    state_lines = []
    for function, student in series:
        for length in lengths:
            group = [row for row in rows if row["function"] == function and row["student"] == student
                     and row["length"] == length]
            if not group:
                continue
            losses = [row["final_loss"] for row in group if row.get("final_loss") is not None]
            state_lines.append([function, student, length, int(np.median([row["largest_samples"] for row in group])),
                                float(np.median([row["train_accuracy"] for row in group])),
                                float(np.median([row["test_accuracy"] for row in group])),
                                float(np.median(losses)) if losses else math.nan])
    tables.append(("at the largest n each seed tried (the passing n, or the cap when not reached): medians over "
                   "seeds of train and test accuracy and of the final training loss (log 2 = 0.693 is chance)",
                   ["function", "student", "T", "n", "train acc", "test acc", "final loss"], state_lines))
    return tables


def _growth_text(low_values, high_values, level: float, resamples: int = 2000) -> str:
    """Ratio of the medians at two T with a percentile-bootstrap interval (seeds resampled at each T)."""
    low_values, high_values = np.asarray(low_values, float), np.asarray(high_values, float)
    low_median, high_median = np.median(low_values), np.median(high_values)
    if math.isinf(low_median):
        return "-"
    if math.isinf(high_median):
        return "not reached at the largest T"
    generator = np.random.default_rng(1)
    ratios = (np.median(high_values[generator.integers(len(high_values), size=(resamples, len(high_values)))], 1)
              / np.median(low_values[generator.integers(len(low_values), size=(resamples, len(low_values)))], 1))
    tail = (1 - level) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail], method="inverted_cdf")
    return f"{high_median / low_median:.3g} [{low:.3g}, {high:.3g}]"


# --------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------

def _panel_row(series: list[tuple], draw, ylabel: str, legend: str, path: Path) -> Path:
    """One panel per (g, learner) side by side, each filled by ``draw(ax, g, learner)``; saved at ``path``."""
    fig, grid = plt.subplots(1, len(series), figsize=(3.0 * len(series), 3.2), squeeze=False, sharey=True,
                             layout="constrained")
    for ax, (function, student) in zip(grid[0], series):
        draw(ax, function, student)
        ax.set_title(f"{function}, {student}", fontsize=9)
        ax.grid(True, alpha=0.3)
    grid[0][0].set_ylabel(ylabel)
    grid[0][0].legend(fontsize=7, loc=legend)
    return save_figure(fig, path)


def plot_sparse_variables(rows: list[dict], out_dir: Path) -> list[Path]:
    """Samples-to-95 % vs T with both growth fits, the probes, the parity loss curves, and the tables.

    Writes in ``out_dir``:

    ``sparse-variables.png``
        one panel per function: the median over seeds of samples-to-95 %
        with its 90 % bootstrap interval per learner (log–log), the fitted
        n = a + b·ln T (dashed) and n = c·T^α (dotted); open markers at the
        top for T not reached; for parity, log₂ C(T, 3) as a grey line.
    ``sparse-variables-accuracy.png``
        every probe (n, test accuracy) of the bisections, per function and
        learner, coloured by T.
    ``sparse-variables-loss.png``
        training-loss curves (median over seeds) at the largest n each
        gradient-trained student tried, per function and T.
    ``sparse-variables.txt``
        the numbers (see :func:`summary_tables`).
    """
    if not rows:
        raise ValueError("rows: expected stored results of sparse-variables, received none (run the sweep first)")
    out_dir = Path(out_dir)
    thresholds = per_seed_thresholds(rows)
    functions = [name for name in FUNCTIONS if any(key[0] == name for key in thresholds)]
    students = [name for name in STUDENT_NAMES if any(key[1] == name for key in thresholds)]
    lengths = sorted({row["length"] for row in rows})
    cap = max(row["max_samples"] for row in rows)
    ceiling = cap * 2 ** 0.5
    floor = min(row["start"] for row in rows) / 1.5
    fine = np.geomspace(lengths[0], lengths[-1], 60)

    fig, axes = new_figure(len(functions), sharey=True, height=4.2)
    for ax, function in zip(axes, functions):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log", base=2)
        for name in students:
            if (function, name) not in thresholds:
                continue
            style = style_for(name, students)
            per_length = thresholds[(function, name)]
            summary = np.array([bootstrap_median(per_length[length]) if length in per_length
                                else (math.nan,) * 3 for length in lengths])
            reached = np.isfinite(summary[:, 0])
            x = np.array(lengths, float)
            fit = fit_growth_laws(per_length)
            label = name if fit is None else (f"{name}: α = {fit.power_params[1]:.2f} "
                                              f"[{fit.alpha_interval[0]:.2f}, {fit.alpha_interval[1]:.2f}]")
            high = np.where(np.isfinite(summary[:, 2]), summary[:, 2], ceiling)
            ax.errorbar(x[reached], summary[reached, 0],
                        yerr=[summary[reached, 0] - summary[reached, 1], high[reached] - summary[reached, 0]],
                        color=style["color"], marker=style["marker"], ls="none", ms=5, capsize=2, label=label)
            ax.plot(x[~reached & ~np.isnan(summary[:, 0])], np.full((~reached & ~np.isnan(summary[:, 0])).sum(),
                                                                    ceiling),
                    ls="none", marker=style["marker"], mfc="none", mec=style["color"], ms=7)
            if fit is not None:
                span = fine[(fine >= fit.lengths[0]) & (fine <= fit.lengths[-1])]
                for law, dash in zip(LAWS, ((0, (5, 2)), (0, (1, 1.5)))):
                    params = fit.log_params if law == "log" else fit.power_params
                    ax.plot(span, law_curve(law, params, span), color=style["color"], lw=1.1, linestyle=dash)
        if function == "parity" and "parity-search" in students:
            ax.plot(fine, [_parity_search_reference(length, rows[0]["sparsity"]) for length in fine], color="0.55",
                    lw=0.9, label="log₂ C(T, 3)")
        ax.axhline(ceiling, color="0.6", lw=0.8, ls=":")
        set_grid_ticks(ax, lengths, "x")
        set_grid_ticks(ax, [2 ** k for k in range(int(math.log2(floor * 1.5)), int(math.log2(cap)) + 1, 2)], "y")
        ax.set_ylim(floor, ceiling * 1.5)
        ax.set_title(f"{function} of s = {rows[0]['sparsity']} bits")
        ax.set_xlabel("sequence length T")
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    axes[0].set_ylabel(f"samples to {rows[0]['target']:.0%} test accuracy\n(median over seeds, 90 % bootstrap)")
    axes[-1].plot([], [], color="0.3", lw=1.1, linestyle=(0, (5, 2)), label="fit a + b·ln T")
    axes[-1].plot([], [], color="0.3", lw=1.1, linestyle=(0, (1, 1.5)), label="fit c·T^α")
    axes[-1].plot([], [], ls="none", marker="o", mfc="none", mec="0.3", label=f"not reached (n > {cap})")
    axes[-1].legend(fontsize=7, loc="upper left")
    fig.suptitle("Sparse variable creation (Edelman et al. 2022): samples needed vs sequence length", fontsize=10)
    paths = [save_figure(fig, out_dir / "sparse-variables.png")]

    series = _ordered_series(thresholds)
    names = [f"T={length}" for length in lengths]

    def group(function, student, length):
        return [row for row in rows if row["function"] == function and row["student"] == student
                and row["length"] == length]

    def draw_probes(ax, function, student):
        ax.set_xscale("log", base=2)
        for length, label in zip(lengths, names):
            probes = [probe for row in group(function, student, length) for probe in json.loads(row["probes"])]
            if probes:
                n, accuracy = np.array(probes).T
                ax.plot(n, accuracy, ls="none", marker="o", ms=3, alpha=0.5, color=style_for(label, names)["color"],
                        label=label)
        ax.axhline(rows[0]["target"], color="0.5", ls=":", lw=1)
        ax.set_xlabel("training samples n")

    def draw_losses(ax, function, student):
        for length, label in zip(lengths, names):
            members = [row for row in group(function, student, length) if row.get("loss_curve")]
            if members:
                curves = [json.loads(row["loss_curve"]) for row in members]
                width = min(len(curve) for curve in curves)
                ax.plot(np.linspace(0, members[0]["steps"], width), np.median([c[:width] for c in curves], axis=0),
                        color=style_for(label, names)["color"], label=label, lw=1.3)
        ax.axhline(math.log(2), color="0.5", ls=":", lw=1)
        ax.set_yscale("log")
        ax.set_xlabel("Adam step")

    paths.append(_panel_row(series, draw_probes, "test accuracy (every probe)", "lower right",
                            out_dir / "sparse-variables-accuracy.png"))
    trained = [key for key in series if key[1] in GRADIENT_STUDENTS]
    if trained:
        paths.append(_panel_row(trained, draw_losses, "training loss at the largest n tried\n(median over seeds; "
                                "dotted: log 2)", "lower left", out_dir / "sparse-variables-loss.png"))
    paths.append(write_tables(out_dir / "sparse-variables.txt", summary_tables(rows)))
    return paths
