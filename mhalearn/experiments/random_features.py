"""The ``random-features`` experiment ([design: random-features], [design: experiments]).

Reference: H. Fu, T. Guo, Y. Bai and S. Mei, "What can a single attention
layer learn? A study through the random features lens", NeurIPS 2023.

Three models with the same number of trainable weights, M·(d+1):

``attention-zero``      :class:`~mhalearn.RandomFeatureAttention`, ``qk_mean="zero"``
``attention-identity``  :class:`~mhalearn.RandomFeatureAttention`, ``qk_mean="identity"``
``mlp``                 :class:`~mhalearn.RandomFeatureMLP` with M·(d+1) features

are fitted to every target of :data:`~mhalearn.random_features.targets.RANDOM_FEATURE_TARGETS`
(noiseless labels; inputs uniform on the sphere of radius √d) for n on a
log grid and several seeds.  Each model picks its ridge penalty α from
:data:`ALPHAS` by generalised cross-validation on its own training set, so
every model is compared at its own best regularisation.  The metric is the
relative test error Σ(ŷ − y)²/Σ(y − ȳ)² (= 1 − R²) on fresh inputs: 1 is the
error of predicting the mean.

Two kinds of cells:

- ``kind="fit"``: one model, one target, one n and seed: test error, train error, α;
- ``kind="floor"``: one model at width M and one seed: the best relative error
  each target can reach with those M frozen features at any n
  (:func:`~mhalearn.random_features.bounds.width_floor`), at several M — the
  representational limit of each width.

A fit cell is a deterministic function of its parameters: the target's β and
the training and test sets depend on (target, law, d, N, n, seed) and not on
the model, so the three models of a seed see the same data; the frozen
random features depend on the seed.

Figure: one panel per target, relative test error vs n (log–log; median and
90 % bootstrap confidence band over seeds) for the three models, with what the
bound of :mod:`mhalearn.random_features.bounds` predicts: its rate
min_λ [r(λ) + √(B(λ)/n)] (constants 1) for the two models with an exact
spectrum, and the floors (parts of the target no width reaches).
"""

from __future__ import annotations

import math
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

from .._validation import Integer, Options
from ..plotting import dodge, group_rows, plt, save_figure, set_grid_ticks, style_for, write_tables
from ..random_features import bounds
from ..random_features.models import RandomFeatureAttention, RandomFeatureMLP
from ..random_features.targets import (
    RANDOM_FEATURE_TARGETS,
    SEQUENCE_LAWS,
    make_random_feature_target,
    make_sequence_dataset,
)
from ..seeding import seeded_rng
from ..sparse_variables.growth import bootstrap_median
from .registry import Experiment, axes_count, expand_grid, refuse_problems, register_experiment, value_problems

#: Models compared, in plotting order.
MODEL_NAMES = ("attention-zero", "attention-identity", "mlp")
#: Candidate ridge penalties (units: mean squared norm of the centred features), chosen by GCV.
ALPHAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
#: Fresh test inputs per cell.
TEST_SAMPLES = 2000

#: Keys of a grid table (``grids/random-features.toml``).  d = token dimension, keys = N,
#: heads = M (the MLP gets M·(d+1) features); floor cells measure the best error of each
#: ``floor_heads`` width on ``floor_factor`` × (number of features) samples.
GRID_KEYS = ("target", "model", "law", "dim", "keys", "heads", "samples", "seed",
             "floor_heads", "floor_seed", "floor_factor")
#: Level of the confidence bands over seeds.
LEVEL = 0.9


#: The keys of a fit cell and of a floor cell.
FIT_KEYS = ("target", "model", "law", "dim", "keys", "heads", "samples", "seed")
FLOOR_KEYS = ("model", "law", "dim", "keys", "floor_heads", "floor_seed", "floor_factor")


def _with_defaults(grid: dict) -> dict:
    """The table with ``target`` and ``model`` every target and model when it leaves them out."""
    return {"target": list(RANDOM_FEATURE_TARGETS), "model": list(MODEL_NAMES), **grid}


def random_features_count(grid: dict) -> int:
    """The fit cells and floor cells of a table, counted without expanding it."""
    grid = _with_defaults(grid)
    return sum(axes_count({key: grid[key] for key in keys if key in grid}) for keys in (FIT_KEYS, FLOOR_KEYS))


def random_features_cells(grid: dict) -> list[dict]:
    """Every fit cell (target, model, n, seed) and floor cell (model, M, seed) of a grid table, as flat dicts."""
    unknown = sorted(set(grid) - set(GRID_KEYS))
    if unknown:
        raise ValueError(f"grid: expected the keys {list(GRID_KEYS)} of 'random-features', "
                         f"received unknown keys {unknown}")
    positive, seed = [Integer(1)], [Integer(0)]
    constraints = {"target": [Options(*RANDOM_FEATURE_TARGETS)], "model": [Options(*MODEL_NAMES)],
                   "law": [Options(*SEQUENCE_LAWS)], "dim": positive, "keys": positive, "heads": positive,
                   "samples": positive, "seed": seed, "floor_heads": positive, "floor_seed": seed,
                   "floor_factor": positive}
    # Checked here, over fit and floor keys together, so one message names every bad value.
    refuse_problems([problem for key, rules in constraints.items() if key in grid
                     for problem in value_problems(key, grid[key] if isinstance(grid[key], list) else [grid[key]],
                                                   rules)], "random-features")

    def expand(fields):
        return expand_grid({key: grid[key] for key in fields if key in grid}, fields,
                           defaults=_with_defaults({}), experiment="random-features")

    fits = [dict(kind="fit", **cell) for cell in expand(FIT_KEYS)]
    floors = [dict(kind="floor", model=cell["model"], law=cell["law"], dim=cell["dim"], keys=cell["keys"],
                   heads=cell["floor_heads"], seed=cell["floor_seed"],
                   samples=cell["floor_factor"] * cell["floor_heads"] * (cell["dim"] + 1))
              for cell in expand(FLOOR_KEYS)]
    return fits + floors


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
    tag = f"{target}/{law}"
    target_fn = make_random_feature_target(target, dim, rng=seeded_rng(tag, dim, seed))
    rng = seeded_rng(tag, dim, keys, samples, seed, 1)
    X, y = make_sequence_dataset(target_fn, samples, keys, law=law, rng=rng)
    X_test, y_test = make_sequence_dataset(target_fn, test_samples, keys, law=law, rng=rng)
    return target_fn, X, y, X_test, y_test


def relative_test_error(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Σ(ŷ − y)² / Σ(y − ȳ)²: 0 is perfect, 1 is the error of predicting the mean."""
    return float(np.sum((y_pred - y_true) ** 2) / np.sum((y_true - y_true.mean()) ** 2))


def run_random_features_cell(cell: dict) -> dict:
    """A fit cell: one model on one target at one n and seed (test and train error, α, cost).

    A floor cell: the best relative error of every target with the model's M
    frozen features (metrics ``floor:<target>``), see
    :func:`~mhalearn.random_features.bounds.width_floor`.
    """
    if cell.get("kind", "fit") == "floor":
        targets = [make_random_feature_target(name, cell["dim"],
                                              rng=seeded_rng(name, cell["dim"], cell["seed"]))
                   for name in RANDOM_FEATURE_TARGETS]
        start = time.perf_counter()
        floors = bounds.width_floor(make_model(cell["model"], cell["heads"], cell["dim"], cell["seed"]), targets,
                                    keys=cell["keys"], samples=cell["samples"], law=cell["law"],
                                    rng=seeded_rng(cell["seed"], 2))
        return {**{f"floor:{name}": value for name, value in floors.items()},
                "fit_seconds": time.perf_counter() - start}
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


def _split(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """(fit rows, floor rows)."""
    fits = [row for row in rows if row.get("kind", "fit") == "fit"]
    return fits, [row for row in rows if row.get("kind") == "floor"]


def error_bands(rows: list[dict], level: float = LEVEL) -> dict[tuple, list[tuple]]:
    """{(target, model): [(n, seeds, median, low, high), ...]}: median test error and bootstrap interval over seeds."""
    bands: dict[tuple, list[tuple]] = {}
    for (target, model, samples), group in group_rows(rows, ["target", "model", "samples"]).items():
        median, low, high = bootstrap_median([row["test_error"] for row in group], level=level)
        bands.setdefault((target, model), []).append((samples, len(group), median, low, high))
    return bands


def _floors(floor_rows: list[dict]) -> dict[tuple, float]:
    """{(target, model, M): median over seeds of the best error at width M}."""
    result = {}
    for (model, heads), group in group_rows(floor_rows, ["model", "heads"]).items():
        for target in RANDOM_FEATURE_TARGETS:
            values = [row[f"floor:{target}"] for row in group if f"floor:{target}" in row]
            if values:
                result[(target, model, heads)] = float(np.median(values))
    return result


def theory(target: str, model: str, rows: list[dict]) -> dict:
    """What the bound says for one (target, model) in the rows' setting (see :mod:`mhalearn.random_features.bounds`).

    For zero-mean attention and the MLP: ``floor`` (the part no width reaches),
    ``complexity`` (B to reach 10 % relative error, or inf) and
    ``bound`` (a function n ↦ min_λ [r(λ) + √(B(λ)/n)]).  For identity-mean
    attention: ``tier_zero`` (the error of its cost-O(1) features).
    """
    first = rows[0]
    return _theory(target, model, first["dim"], first["keys"], first["law"])


@lru_cache(maxsize=None)
def _theory(target: str, model: str, dim: int, keys: int, law: str) -> dict:
    if model in bounds.SPECTRAL_MODELS:
        energies, eigenvalues, norm, unreachable = bounds.target_spectrum(target, model, dim, keys)
        _, errors, _ = bounds.tikhonov_path(energies, eigenvalues, norm, unreachable)
        return dict(floor=float(errors.min()), complexity=bounds.complexity_at(target, model, dim, keys, 0.1),
                    bound=lambda samples: bounds.bound_curve(target, model, dim, keys, samples))
    seed = seeded_rng(target, dim, 0)
    return dict(tier_zero=bounds.identity_tier_zero(make_random_feature_target(target, dim, rng=seed), keys=keys,
                                                    law=law, samples=40_000))


def _floor_factor(floor_rows: list[dict]) -> str:
    """Samples per feature of the floor cells (``floor_factor`` of their grid), as text."""
    factors = {row["samples"] // (row["heads"] * (row["dim"] + 1)) for row in floor_rows}
    return "/".join(str(factor) for factor in sorted(factors)) or "?"


def summary_tables(rows: list[dict], level: float = LEVEL) -> list[tuple]:
    """The tables of ``random-features.txt``: errors with intervals, the bound beside them, floors by width."""
    fits, floor_rows = _split(rows)
    bands = error_bands(fits, level)
    targets = [name for name in RANDOM_FEATURE_TARGETS if any(key[0] == name for key in bands)]
    models = [name for name in MODEL_NAMES if any(key[1] == name for key in bands)]
    samples = sorted({row["samples"] for row in fits})
    measured = [[target, model, n, count, median, low, high]
                for (target, model), band in bands.items() for n, count, median, low, high in band]
    tables = [(f"relative test error: median over seeds [{level:.0%} bootstrap interval]",
               ["target", "model", "n", "seeds", "median", "low", "high"], measured)]
    floors = _floors(floor_rows)
    widths = sorted({key[2] for key in floors})
    comparison = []
    for target in targets:
        medians = {model: {n: median for n, _, median, _, _ in bands.get((target, model), [])} for model in models}
        for model in models:
            info = theory(target, model, fits)
            line = [target, model]
            if "bound" in info:
                line += [info["floor"], info["complexity"]] + [float(info["bound"]([n])[0]) for n in
                                                                (samples[0], samples[-1])]
            else:
                line += [info["tier_zero"], "-", "-", "-"]
            line += [medians[model].get(samples[0], math.nan), medians[model].get(samples[-1], math.nan)]
            line += [floors.get((target, model, width), math.nan) for width in widths]
            best = min(models, key=lambda name: medians[name].get(samples[-1], math.inf))
            ratio = medians[model].get(samples[-1], math.nan) / medians[best].get(samples[-1], math.nan)
            line.append("best" if best == model else f"{ratio:.3g}x")
            comparison.append(line)
    tables.append((f"bound vs measurement ({_setting(fits)}): 'floor' = error no width or n goes below "
                   f"(exact spectrum; for attention-identity, the error of its cost-O(1) features c0(z)[x;1]); "
                   f"'B(10%)' = complexity to reach 10 % error; 'bound n' = min over λ of r(λ) + √(B(λ)/n), "
                   f"constants 1; measured = median test error; 'floor M' = best error of M heads at any n "
                   f"(measured, ridge on {_floor_factor(floor_rows)}·(d+1)·M samples); "
                   f"last column: error at n = {samples[-1]} over the best model's",
                   ["target", "model", "floor", "B(10%)", f"bound n={samples[0]}", f"bound n={samples[-1]}",
                    f"error n={samples[0]}", f"error n={samples[-1]}"] + [f"floor M={width}" for width in widths]
                   + [f"vs best n={samples[-1]}"], comparison))
    return tables


def plot_random_features(rows: list[dict], out_dir: Path) -> list[Path]:
    """Relative test error vs n per model with 90 % bootstrap bands and the bound, one panel per target.

    Writes ``random-features.png`` and ``random-features.txt`` (the plotted
    numbers, the bound beside the measurement and the floors per width).
    """
    if not rows:
        raise ValueError("rows: expected stored results of random-features, received none (run the sweep first)")
    out_dir = Path(out_dir)
    fits, _ = _split(rows)
    if not fits:
        raise ValueError("rows: expected fit rows of random-features, received only floor rows")
    bands = error_bands(fits)
    models = [name for name in MODEL_NAMES if any(key[1] == name for key in bands)]
    targets = [name for name in RANDOM_FEATURE_TARGETS if any(key[0] == name for key in bands)]
    samples_values = sorted({row["samples"] for row in fits})
    fine = np.geomspace(samples_values[0], samples_values[-1], 40)
    columns = 4
    lines = -(-len(targets) // columns)
    fig, grid = plt.subplots(lines, columns, figsize=(4.0 * columns, 3.6 * lines), squeeze=False,
                             sharey=True, layout="constrained")
    axes = list(grid.flat)
    for ax, target in zip(axes, targets):
        ax.set_xscale("log")
        ax.set_yscale("log")
        for name in models:
            band = bands.get((target, name))
            if not band:
                continue
            style = style_for(name, models)
            n, _, median, low, high = map(np.array, zip(*band))
            shifted = n * 2.0 ** dodge(name, models)
            ax.plot(shifted, median, label=name, lw=1.6, ms=5, **style)
            ax.fill_between(shifted, low, high, color=style["color"], alpha=0.2, lw=0)
            info = theory(target, name, fits)
            if "bound" in info:
                ax.plot(fine, info["bound"](fine), color=style["color"], lw=0.9, ls=(0, (4, 2)), alpha=0.8)
            floor = info.get("tier_zero", info.get("floor"))
            if floor is not None and floor > 1e-3:
                ax.axhline(floor, color=style["color"], lw=0.8, ls=":", alpha=0.9)
        ax.axhline(1.0, color="0.5", ls="-", lw=0.6)
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
    handles += [plt.Line2D([], [], color="0.3", lw=0.9, ls=(0, (4, 2))), plt.Line2D([], [], color="0.3", lw=0.8,
                                                                                      ls=":")]
    labels += ["bound: min_λ r(λ) + √(B(λ)/n)", "floor (identity: error of its cheap features)"]
    legend_ax.legend(handles, labels, title="model", loc="center", fontsize=8)
    fig.suptitle(f"random-feature attention vs random-feature MLP — {_setting(fits)}; median and "
                 f"{LEVEL:.0%} bootstrap band over seeds", fontsize=9)
    return [save_figure(fig, out_dir / "random-features.png"),
            write_tables(out_dir / "random-features.txt", summary_tables(rows))]


RANDOM_FEATURES = register_experiment(Experiment(
    name="random-features",
    description="random-feature attention (zero / identity query-key mean) vs random-feature MLP: "
                "test error vs n on invariant and control targets with the bound beside it, and the best "
                "error of each width (Fu, Guo, Bai & Mei)",
    expand=random_features_cells,
    run_cell=run_random_features_cell,
    plot=plot_random_features,
    count=random_features_count,
))
