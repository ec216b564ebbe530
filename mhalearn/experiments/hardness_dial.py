"""n* along a teacher family's dial: where the heuristics fail, and whether Chen & Li's conditions hold there.

A ``samples-to-eps`` grid with a ``hardness`` axis searches n* at points of a
family's dial (:func:`~mhalearn.make_teacher`: 0 is random teachers, 1 the
family as described), and every row stores its teacher's non-degeneracy
figures (:meth:`~mhalearn.NondegeneracyReport.columns`).  This module reads
those rows: per (family, shape, learner, m, dial point) the median n* over
teachers with its bootstrap interval, how many teachers are censored and how
many lie inside the conditions, and for censored teachers their errors at the
larger n of :data:`~mhalearn.experiments.samples_to_eps.CENSORED_LADDER`
("needs more samples" or "fails at any n tried").  The figure draws n*
against the dial, one panel per m, and shades the dial points where fewer
than half of the teachers are inside the conditions.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..plotting import group_rows, save_figure, style_for, write_tables
from ..sparse_variables.growth import bootstrap_median
from .growth_laws import LEVEL, bounded_text, teacher_value

#: The keys of one dial curve's point (a row's hardness is its dial point).
POINT_KEYS = ("family", "dim", "length", "noise", "learner", "output", "eps", "heads", "hardness")


def dial_rows(rows: list[dict]) -> list[dict]:
    """The rows that sit on a dial (they have a ``hardness``)."""
    return [row for row in rows if row.get("hardness") is not None]


def labelled_by_dial(rows: list[dict]) -> list[dict]:
    """Rows whose family names their dial point ("cancelling h=0.5"), so per-family tables keep points apart."""
    return [{**row, "family": f"{row['family']} h={row['hardness']:g}"} if row.get("hardness") is not None else row
            for row in rows]


def _censored_error(cells: list[dict], samples: int) -> str:
    """The censored teachers' median error at ``samples`` (and their range), from the rows' censored probes."""
    errors = [row.get(f"{row['output']}_error_at_{samples}") for row in cells if row["censored"]]
    errors = [error for error in errors if error is not None]
    if not errors:
        return "–"
    return f"{np.median(errors):.3g} [{min(errors):.3g}, {max(errors):.3g}]"


def dial_table(rows: list[dict], level: float = LEVEL) -> list[dict]:
    """Per dial point: teachers, inside the conditions, censored, median n* [interval], censored errors."""
    table = []
    for key, cells in sorted(group_rows(dial_rows(rows), list(POINT_KEYS)).items()):
        values = [teacher_value(row) for row in cells]
        median, low, high = bootstrap_median(values, level=level)
        inside = [row.get("inside_conditions") for row in cells]
        table.append({**dict(zip(POINT_KEYS, key)), "teachers": len(cells),
                      "inside": sum(bool(flag) for flag in inside),
                      "unknown_conditions": sum(flag is None for flag in inside),
                      "gram_ratio": float(np.median([row["gram_ratio"] for row in cells if "gram_ratio" in row]
                                                    or [math.nan])),
                      "censored": sum(map(math.isinf, values)), "budget": max(row["budget"] for row in cells),
                      "median": median, "low": low, "high": high,
                      "error_at_2000": _censored_error(cells, 2_000),
                      "error_at_10000": _censored_error(cells, 10_000),
                      "error_at_100000": _censored_error(cells, 100_000)})
    return table


def _table_lines(table: list[dict]) -> list[tuple]:
    return [(e["family"], e["dim"], e["length"], e["learner"], e["output"], e["eps"], e["heads"], e["hardness"],
             f"{e['inside']}/{e['teachers']}", f"{e['gram_ratio']:.3g}", e["censored"],
             bounded_text(e["median"], e["budget"]),
             f"[{bounded_text(e['low'], e['budget'])}, {bounded_text(e['high'], e['budget'])}]",
             e["error_at_2000"], e["error_at_10000"], e["error_at_100000"]) for e in table]


DIAL_HEADER = ["family", "d", "k", "learner", "output", "eps", "m", "hardness", "inside", "gram_ratio",
               "censored", "median_n*", "interval", "censored_error_2000", "censored_error_10000",
               "censored_error_100000"]


def plot_dial(rows: list[dict], out_dir: Path) -> list[Path]:
    """n* against the dial, one panel per (family, shape, m); writes ``samples-to-eps-dial.png`` and ``.txt``.

    A censored median or band end is drawn at 2× the budget with a ">";
    grey marks the dial points where fewer than half of the teachers are
    inside Chen & Li's conditions.
    """
    table = dial_table(rows)
    if not table:
        raise ValueError("rows: expected samples-to-eps rows with a hardness (a grid with a dial axis), received none")
    panels = sorted({(e["family"], e["dim"], e["length"], e["heads"]) for e in table})
    curves = sorted({(e["learner"], e["output"], e["eps"]) for e in table})
    names = [f"{learner} {output} ε={eps:g}" for learner, output, eps in curves]
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False, sharey=True,
                             layout="constrained")
    for (family, dim, length, heads), ax in zip(panels, axes[0]):
        mine = [e for e in table if (e["family"], e["dim"], e["length"], e["heads"]) == (family, dim, length, heads)]
        points = sorted({e["hardness"] for e in mine})
        edges = [points[0] - 0.03, *((a + b) / 2 for a, b in zip(points, points[1:])), points[-1] + 0.03]
        for index, point in enumerate(points):
            at = [e for e in mine if e["hardness"] == point]
            if sum(e["inside"] for e in at) < 0.5 * sum(e["teachers"] for e in at):
                ax.axvspan(edges[index], edges[index + 1], color="0.88", lw=0, zorder=0)
        for curve, name in zip(curves, names):
            entries = sorted((e for e in mine if (e["learner"], e["output"], e["eps"]) == curve),
                             key=lambda e: e["hardness"])
            if not entries:
                continue
            style = style_for(name, names)
            x = np.array([e["hardness"] for e in entries])
            ceiling = np.array([2.0 * e["budget"] for e in entries])
            median, low, high = (np.minimum([e[end] for e in entries], ceiling) for end in ("median", "low", "high"))
            ax.plot(x, median, color=style["color"], marker=style["marker"], ms=4, label=name)
            ax.fill_between(x, low, high, color=style["color"], alpha=0.18, lw=0)
            for point, value, top in zip(x, median, ceiling):
                if value >= top:
                    ax.scatter([point], [value], marker="$>$", s=60, color=style["color"], zorder=3)
        ax.set_yscale("log")
        ax.set_title(f"{family}, m = {heads}, d = {dim}, k = {length}", fontsize=9)
        ax.set_xlabel("hardness (0: random teachers, 1: the family)")
        ax.grid(True, alpha=0.3)
    axes[0][0].set_ylabel("n* (sequences) to error ≤ ε")
    axes[0][0].legend(fontsize=6)
    fig.suptitle(f"n* along the dial: median over teachers, {LEVEL:.0%} bootstrap band;\n> = censored at the "
                 "budget; grey = most teachers outside\nChen & Li's conditions", fontsize=9)
    text = [(f"n* per dial point: median over teachers [{LEVEL:.0%} bootstrap interval], censored teachers count as "
             "> budget; inside = teachers inside Chen & Li's conditions (Gram ratio >= 0.2, kappa(W_sum) <= 20, "
             "min |W_i|/sqrt(d) >= 0.5), gram_ratio its median; censored_error_n = the censored teachers' error at n "
             "on a fresh stream (median [range])", DIAL_HEADER, _table_lines(table))]
    out_dir = Path(out_dir)
    return [save_figure(fig, out_dir / "samples-to-eps-dial.png"),
            write_tables(out_dir / "samples-to-eps-dial.txt", text)]


def markdown_dial_table(rows: list[dict]) -> str:
    """The dial table as Markdown (docs/learners_vs_m.md prints it from the committed rows)."""
    lines = ["| " + " | ".join(DIAL_HEADER) + " |", "|" + " --- |" * len(DIAL_HEADER)]
    lines += ["| " + " | ".join(str(value) for value in line) + " |" for line in _table_lines(dial_table(rows))]
    return "\n".join(lines)
