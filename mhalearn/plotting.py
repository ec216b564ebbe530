"""Figures: the helpers shared by the experiments' figures, and the demo's figure (matplotlib, Agg, PNG).

The experiments ([design: experiments]) summarise seeds by the median and the
interquartile band; these helpers group stored rows, compute those
summaries, draw them, and write PNG files with the plain-text tables of the
numbers they show.  :func:`demo_figure` is ``mhalearn demo``'s picture of a
learned layer against its teacher.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Sequence

import matplotlib

matplotlib.use("Agg")  # headless: experiments render files, never windows
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from ._files import written_atomically  # noqa: E402

#: Colours, markers and line styles of the learners and models, stable across figures.
_PALETTE = plt.get_cmap("tab10").colors
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")
_LINESTYLES = ("-", "--", "-.", ":")


def style_for(name: str, names: Sequence[str]) -> dict:
    """Colour, marker and line style for ``name``, the same in every figure given the same ``names``.

    Markers and line styles differ as well as colours so that curves which
    coincide (learners converging to the same solution) stay distinguishable.
    """
    index = list(names).index(name)
    return {"color": _PALETTE[index % len(_PALETTE)], "marker": _MARKERS[index % len(_MARKERS)],
            "linestyle": _LINESTYLES[index % len(_LINESTYLES)]}


def dodge(name: str, names: Sequence[str], width: float = 0.06) -> float:
    """A small offset per name, to draw coinciding points side by side."""
    return (list(names).index(name) - (len(names) - 1) / 2) * width


def set_grid_ticks(ax, values: Sequence[float], axis: str = "x") -> None:
    """Ticks at the grid's values, labelled as plain numbers (also on log axes)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(FixedLocator(sorted(values)))
    target.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    target.set_minor_locator(NullLocator())


def heads_panel(ax, heads: Sequence[float], title: str) -> None:
    """One panel of a quantity against m: log–log axes, ticks at the grid's m, the title, a light grid."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    set_grid_ticks(ax, sorted(heads))
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("heads m")
    ax.grid(True, which="major", alpha=0.3)


def group_rows(rows: Iterable[dict], keys: Sequence[str]) -> dict[tuple, list[dict]]:
    """Rows grouped by the values of ``keys``, groups in sorted key order."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[tuple(row[key] for key in keys)].append(row)
    return dict(sorted(groups.items(), key=lambda item: tuple(map(_sort_key, item[0]))))


def _sort_key(value):
    return (0, value, "") if isinstance(value, (int, float)) else (1, 0, str(value))


def median_quartiles(values: Iterable[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of the finite ``values``; NaNs when none."""
    array = np.asarray([value for value in values if value is not None and math.isfinite(value)], dtype=float)
    if array.size == 0:
        return (math.nan, math.nan, math.nan)
    low, median, high = np.percentile(array, [25, 50, 75])
    return float(low), float(median), float(high)


def summarize_curve(rows: Iterable[dict], x_key: str, y_key: str) -> list[dict]:
    """Per value of ``x_key``: ``x``, ``count``, ``q1``, ``median``, ``q3`` of ``y_key``, sorted by x."""
    curve = []
    for (x,), group in group_rows(rows, [x_key]).items():
        q1, median, q3 = median_quartiles(row.get(y_key) for row in group)
        curve.append({"x": x, "count": len(group), "q1": q1, "median": median, "q3": q3})
    return curve


def plot_band(ax, curve: list[dict], *, label: str, style: dict, x_offset: float = 0.0) -> None:
    """Draw the median line of ``curve`` with its interquartile band.

    ``x_offset`` shifts the points multiplicatively on a log x axis
    (x·2^offset) and additively otherwise.
    """
    if not curve:
        return
    x = np.array([point["x"] for point in curve], dtype=float)
    x = x * 2.0 ** x_offset if ax.get_xscale() == "log" else x + x_offset
    ax.plot(x, [point["median"] for point in curve], label=label, lw=1.6, ms=5, **style)
    ax.fill_between(x, [point["q1"] for point in curve], [point["q3"] for point in curve],
                    color=style["color"], alpha=0.18, lw=0)


def new_figure(panels: int, *, width: float = 4.2, height: float = 3.8, sharey: bool = False):
    """A figure with ``panels`` axes side by side (``axes`` always a list)."""
    fig, axes = plt.subplots(1, panels, figsize=(width * panels, height), sharey=sharey, squeeze=False,
                             layout="constrained")
    return fig, list(axes[0])


def save_figure(fig, path: Path) -> Path:
    """Write ``fig`` as a PNG at ``path`` (parents created; written whole, as every output) and close it."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        with written_atomically(path, "out") as temporary:
            fig.savefig(temporary, dpi=130, format="png")
    finally:
        plt.close(fig)
    return path


def show_files(paths: Sequence[Path]) -> None:
    """Print the text tables among ``paths`` and show the PNGs as matplotlib figures (for notebooks and galleries)."""
    for path in paths:
        if Path(path).suffix == ".txt":
            print(Path(path).read_text())
    for path in paths:
        if Path(path).suffix == ".png":
            image = plt.imread(path)
            fig = plt.figure(figsize=(image.shape[1] / 100, image.shape[0] / 100))
            fig.figimage(image)


def write_tables(path: Path, tables: Sequence[tuple[str, Sequence[str], Iterable[Sequence]]]) -> Path:
    """Write aligned plain-text tables (the numbers a figure shows) and return the path.

    ``tables`` holds ``(title, header, lines)`` triples, written one after the other.
    """
    blocks = []
    for title, header, lines in tables:
        rows = [[_format_cell(value) for value in line] for line in lines]
        widths = [max([len(str(name))] + [len(row[i]) for row in rows]) for i, name in enumerate(header)]
        text = [title, " ".join(str(name).rjust(width) for name, width in zip(header, widths))]
        text += [" ".join(value.rjust(width) for value, width in zip(row, widths)) for row in rows]
        blocks.append("\n".join(text))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with written_atomically(path, "out") as temporary:
        Path(temporary).write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def _format_cell(value) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if math.isinf(value):
            return "not reached" if value > 0 else "-inf"
        return f"{value:.3g}"
    return str(value)


def demo_figure(model, teacher, metrics: dict, *, length: int, seed: int = 0):
    """Teacher vs learned attention maps on one test sequence, and predicted vs true outputs.

    Parameters
    ----------
    model, teacher : MultiHeadAttention
        The learned layer and the planted one (same heads and dim).
    metrics : dict
        Metrics from :func:`mhalearn.evaluation.measure`.
    length : int
        Tokens per test sequence k.
    seed : int
        Seeds the test inputs drawn for the figure.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from .attention.data import boolean_inputs
    from .attention.model import match_heads

    X = boolean_inputs(500, length, teacher.dim, np.random.default_rng(seed + 1))
    order = match_heads(model, teacher)
    true_attention = teacher.attention(X[:1])[0]
    learned_attention = model.attention(X[:1])[0][order]
    heads = teacher.heads
    fig = plt.figure(figsize=(3.0 * heads + 5.0, 5.6), layout="constrained")
    grid = fig.add_gridspec(2, heads + 1, width_ratios=[1] * heads + [1.5])
    for head in range(heads):
        for row, (attention, who) in enumerate(((true_attention, "teacher"), (learned_attention, "learned"))):
            ax = fig.add_subplot(grid[row, head])
            image = ax.imshow(attention[head], vmin=0, vmax=1, cmap="viridis")
            ax.set_title(f"{who} head {head + 1}", fontsize=9)
            ax.set_xticks([])
            ax.set_yticks([])
            if head == 0:
                ax.set_ylabel("query token")
            if row == 1:
                ax.set_xlabel("key token")
    fig.colorbar(image, ax=fig.axes, location="left", shrink=0.7, label="attention weight")
    scatter = fig.add_subplot(grid[:, heads])
    truth, estimate = teacher.predict(X).ravel(), model.predict(X).ravel()
    scatter.scatter(truth, estimate, s=2, alpha=0.3)
    limits = [min(truth.min(), estimate.min()), max(truth.max(), estimate.max())]
    scatter.plot(limits, limits, color="0.4", lw=1, ls="--")
    scatter.set_xlabel("teacher output F(X)")
    scatter.set_ylabel("learned output F̂(X)")
    scatter.set_title(f"test outputs: relative error {metrics['test_error']:.2e}", fontsize=9)
    fig.suptitle("attention on one test sequence (heads matched to the teacher's)", fontsize=10)
    return fig
