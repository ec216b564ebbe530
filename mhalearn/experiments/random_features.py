"""The ``random-features`` experiment (docs/design.md §4.3, §5).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

Three models with the same number of trainable weights, M·(d+1):

``attention-zero``      :class:`~mhalearn.RandomFeatureAttention`, ``qk_mean="zero"``
``attention-identity``  :class:`~mhalearn.RandomFeatureAttention`, ``qk_mean="identity"``
``mlp``                 :class:`~mhalearn.RandomFeatureMLP` with M·(d+1) features

are fitted to every target of :data:`~mhalearn.random_feature_targets.RANDOM_FEATURE_TARGETS`
(noiseless labels; inputs uniform on the sphere of radius √d) for n on a
log grid and several seeds.  Each model picks its ridge penalty α from
:data:`ALPHAS` by generalised cross-validation on its own training set, so
every model is compared at its own best regularisation.  The metric is the
relative test error Σ(ŷ − y)²/Σ(y − ȳ)² (= 1 − R²) on fresh inputs: 1 is the
error of predicting the mean.

A cell is a deterministic function of its parameters: the target's β and
the training and test sets depend on (target, law, d, N, n, seed) and not on
the model, so the three models of a seed see the same data; the frozen
random features depend on the seed.

Figure: one panel per target, relative test error vs n (log–log; median and
interquartile band over seeds) for the three models.
"""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import numpy as np

from ..learners.random_features import RandomFeatureAttention, RandomFeatureMLP
from ..random_feature_targets import RANDOM_FEATURE_TARGETS, make_random_feature_target, make_sequence_dataset
from .figures import (dodge, plt, plot_band, save_figure, set_grid_ticks, style_for,
                      summarize_curve, write_tables)
from .registry import Experiment, expand_grid, register_experiment

#: Models compared, in plotting order.
MODEL_NAMES = ("attention-zero", "attention-identity", "mlp")
#: Candidate ridge penalties (units: mean squared norm of the centred features), chosen by GCV.
ALPHAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: Fresh test inputs per cell.
TEST_SAMPLES = 2000

#: Fields of a cell, in the order the grid's axes nest (grids in ``grids/random-features.toml``).
#: d = token dimension, keys = N, heads = M (the MLP gets M·(d+1) features).
CELL_FIELDS = ("target", "model", "law", "dim", "keys", "heads", "samples", "seed")


def random_features_cells(grid: dict) -> list[dict]:
    """Every (target, model, n, seed) of a grid table as a flat dict."""
    return expand_grid(grid, CELL_FIELDS, experiment="random-features")


def make_model(name: str, heads: int, dim: int, seed: int, alpha=ALPHAS):
    """The named model with M = ``heads`` (attention) or M·(d+1) features (MLP)."""
    if name == "mlp":
        return RandomFeatureMLP(heads * (dim + 1), alpha=alpha, random_state=seed)
    qk_mean = {"attention-zero": "zero", "attention-identity": "identity"}.get(name)
    if qk_mean is None:
        raise ValueError(f"model: expected one of {list(MODEL_NAMES)}, received {name!r}")
    return RandomFeatureAttention(heads, qk_mean=qk_mean, alpha=alpha, random_state=seed)


def make_problem(target: str, *, law: str, dim: int, keys: int, samples: int, seed: int,
                 test_samples: int = TEST_SAMPLES):
    """The target and its training and test sets ``(target, X, y, X_test, y_test)``.

    β depends on (target, d, seed); the data on (target, law, d, N, n, seed).
    """
    tag = zlib.crc32(f"{target}/{law}".encode())
    target_fn = make_random_feature_target(target, dim, rng=np.random.default_rng([tag, dim, seed]))
    rng = np.random.default_rng([tag, dim, keys, samples, seed, 1])
    X, y = make_sequence_dataset(target_fn, samples, keys, law=law, rng=rng)
    X_test, y_test = make_sequence_dataset(target_fn, test_samples, keys, law=law, rng=rng)
    return target_fn, X, y, X_test, y_test


def relative_test_error(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Σ(ŷ − y)² / Σ(y − ȳ)²: 0 is perfect, 1 is the error of predicting the mean."""
    return float(np.sum((y_pred - y_true) ** 2) / np.sum((y_true - y_true.mean()) ** 2))


def run_random_features_cell(cell: dict) -> dict:
    """Fit one model to one target at one n and seed; return its test error and cost."""
    _, X, y, X_test, y_test = make_problem(cell["target"], law=cell["law"], dim=cell["dim"],
                                           keys=cell["keys"], samples=cell["samples"], seed=cell["seed"])
    model = make_model(cell["model"], cell["heads"], cell["dim"], cell["seed"])
    start = time.perf_counter()
    model.fit(X, y)
    fit_seconds = time.perf_counter() - start
    return {"test_error": relative_test_error(y_test, model.predict(X_test)),
            "train_error": relative_test_error(y, model.predict(X)),
            "alpha": float(model.alpha_), "parameters": int(model.coef_.shape[0]),
            "fit_seconds": fit_seconds}


def _setting(rows: list[dict]) -> str:
    first = rows[0]
    return (f"inputs on the {first['law']}, d = {first['dim']}, N = {first['keys']} keys, "
            f"M = {first['heads']} heads, {first['heads'] * (first['dim'] + 1)} trainable weights per model")


def plot_random_features(rows: list[dict], out_dir: Path) -> list[Path]:
    """Relative test error vs n per model, one panel per target (log–log, median and quartiles).

    Writes ``random-features.png`` and ``random-features.txt`` (the plotted
    numbers) in ``out_dir``.
    """
    if not rows:
        raise ValueError("rows: expected stored results of random-features, received none (run the sweep first)")
    out_dir = Path(out_dir)
    models = [name for name in MODEL_NAMES if any(row["model"] == name for row in rows)]
    targets = [name for name in RANDOM_FEATURE_TARGETS if any(row["target"] == name for row in rows)]
    samples_values = sorted({row["samples"] for row in rows})
    columns = 4
    lines = -(-len(targets) // columns)
    fig, grid = plt.subplots(lines, columns, figsize=(4.0 * columns, 3.5 * lines), squeeze=False,
                             sharey=True, layout="constrained")
    axes = list(grid.flat)
    table = []
    for ax, target in zip(axes, targets):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for name in models:
            group = [row for row in rows if row["target"] == target and row["model"] == name]
            curve = summarize_curve(group, "samples", "test_error")
            plot_band(ax, curve, label=name, style=style_for(name, models), x_offset=dodge(name, models))
            table += [(target, name, p["x"], p["count"], p["q1"], p["median"], p["q3"]) for p in curve]
        ax.axhline(1.0, color="0.5", ls=":", lw=1)
        set_grid_ticks(ax, samples_values)
        ax.set_title(target)
        ax.set_xlabel("training samples n")
        ax.grid(True, which="major", alpha=0.3)
    for ax in axes[::columns]:
        ax.set_ylabel("relative test error")
    for ax in axes[len(targets):]:
        ax.axis("off")
    legend_ax = axes[len(targets)] if len(targets) < len(axes) else axes[0]
    handles, labels = axes[0].get_legend_handles_labels()
    legend_ax.legend(handles, labels, title="model", loc="center")
    fig.suptitle(f"random-feature attention vs random-feature MLP — {_setting(rows)}; "
                 f"median and quartiles over seeds; dotted: predicting the mean", fontsize=9)
    return [
        save_figure(fig, out_dir / "random-features.png"),
        write_tables(out_dir / "random-features.txt", [
            ("relative test error over seeds", ["target", "model", "n", "seeds", "q1", "median", "q3"], table),
        ]),
    ]


RANDOM_FEATURES = register_experiment(Experiment(
    name="random-features",
    description="random-feature attention (zero / identity query-key mean) vs random-feature MLP: "
                "test error vs n on invariant and control targets (Fu, Guo, Bai & Mei)",
    expand=random_features_cells,
    run_cell=run_random_features_cell,
    plot=plot_random_features,
))
