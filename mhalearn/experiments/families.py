"""The ``teacher-families`` experiment: every learner on every registered teacher family.

Cells are learners × families × m ∈ {1, 2, 3} × seeds at one sample size
(d = 6, k = 7, n = 2000 noiseless examples, or the family's own n).  A cell
is a success when the relative test error is ≤ :data:`SUCCESS_ERROR`.  The
figure shows the success rate against m, one panel per family; the table
beside it adds the median error and fit time, and, over the failed cells,
the median :func:`~mhalearn.head_collapse` figures that tell merged
heads (cosine near 1, inflated W) from other failures.

``bench/learners.py`` prints the same comparison as a table without a sweep.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..attention.teachers import TEACHER_FAMILIES, get_family
from ..plotting import dodge, group_rows, median_quartiles, new_figure, save_figure, style_for, write_tables
from .learning import learning_cells, run_learning_cell
from .registry import Experiment, axes_count, register_experiment

#: Relative test error at or below which a fit counts as a recovery.
SUCCESS_ERROR = 1e-6

def family_samples(family: str, heads: int, dim: int, length: int, default: int) -> int:
    """The family's own sample count when it sets one, else ``default``."""
    rule = get_family(family).samples
    return rule(heads, dim, length) if rule else default


def teacher_families_cells(grid: dict) -> list[dict]:
    """The cells of a grid table: learners × families × m × seeds (``family`` left out: every registered one).

    A family that sets its own sample count overrides the grid's ``samples``.
    """
    cells = learning_cells(with_every_family(grid), "teacher-families")
    return [{**cell, "samples": family_samples(cell["family"], cell["heads"], cell["dim"], cell["length"],
                                               cell["samples"])} for cell in cells]


def with_every_family(grid: dict) -> dict:
    """The table with ``family`` every registered family when it leaves ``family`` out."""
    return {"family": list(TEACHER_FAMILIES), **grid}


def run_family_cell(cell: dict) -> dict:
    """Compute one cell as the learning experiments do, and mark it a success or not."""
    metrics = run_learning_cell(cell)
    return {**metrics, "success": bool(metrics["test_error"] <= SUCCESS_ERROR)}


def summarize_families(rows: list[dict]) -> list[dict]:
    """Per (family, m, learner): successes, median error and time, collapse figures of the failures."""
    summary = []
    for (family, heads, learner), group in group_rows(rows, ["family", "heads", "learner"]).items():
        errors = [row["test_error"] for row in group]
        failed = [row for row in group if row["test_error"] > SUCCESS_ERROR]
        summary.append({
            "family": family, "heads": heads, "learner": learner, "seeds": len(group),
            "successes": len(group) - len(failed),
            "median_error": median_quartiles(errors)[1],
            "median_seconds": median_quartiles([row["fit_seconds"] for row in group])[1],
            "failed_head_cosine": median_quartiles(row.get("head_cosine") for row in failed)[1],
            "failed_w_inflation": median_quartiles(row.get("w_inflation") for row in failed)[1],
        })
    return summary


def plot_teacher_families(rows: list[dict], out_dir: Path) -> list[Path]:
    """Success rate vs m per learner, one panel per family; writes a PNG and a table."""
    if not rows:
        raise ValueError("rows: expected stored results of teacher-families, received none (run the sweep first)")
    out_dir = Path(out_dir)
    summary = summarize_families(rows)
    families = [name for name in TEACHER_FAMILIES if any(row["family"] == name for row in rows)]
    families += sorted({row["family"] for row in rows} - set(families))
    learners = sorted({row["learner"] for row in rows})
    heads_values = sorted({row["heads"] for row in rows})
    fig, axes = new_figure(len(families), width=3.4, sharey=True)
    for ax, family in zip(axes, families):
        for learner in learners:
            mine = [entry for entry in summary if entry["family"] == family and entry["learner"] == learner]
            x = np.array([entry["heads"] for entry in mine], dtype=float) + dodge(learner, learners, 0.08)
            rate = [entry["successes"] / entry["seeds"] for entry in mine]
            ax.plot(x, rate, label=learner, lw=1.6, ms=6, **style_for(learner, learners))
        ax.set_title(family)
        ax.set_xticks(heads_values)
        ax.set_xlabel("heads m")
        ax.set_ylim(-0.05, 1.05)
        ax.grid(True, alpha=0.3)
    axes[0].set_ylabel(f"fraction of seeds with test error ≤ {SUCCESS_ERROR:g}")
    axes[0].legend(title="learner", fontsize=8)
    first = rows[0]
    fig.suptitle(f"recovery by teacher family — d = {first['dim']}, k = {first['length']}, noiseless", fontsize=9)
    table = [(entry["family"], entry["heads"], entry["learner"], f"{entry['successes']}/{entry['seeds']}",
              entry["median_error"], entry["median_seconds"], entry["failed_head_cosine"],
              entry["failed_w_inflation"]) for entry in summary]
    return [
        save_figure(fig, out_dir / "teacher-families.png"),
        write_tables(out_dir / "teacher-families.txt", [(
            f"success = relative test error ≤ {SUCCESS_ERROR:g}; last two columns: medians over the failed seeds",
            ["family", "m", "learner", "success", "median_error", "median_s", "failed_head_cos",
             "failed_W_inflation"], table)]),
    ]


register_experiment(Experiment(
    "teacher-families",
    "success rate of every learner on every registered teacher family, m = 1, 2, 3",
    teacher_families_cells, run_family_cell, plot_teacher_families,
    count=lambda grid: axes_count(with_every_family(grid))))
