"""Phases 5–6 at m = 3 on a given span: does the net's spacing or the span's error limit the paper's output?

For each teacher seed, ``sample_teacher(3, 12, rng=seeded_rng(20_251, 3, seed))``
(‖Θ_i‖_F = 2, the teachers of runs/sculpt-m3/sculpt_m3.py) labels 1.2·10⁵ Boolean
sequences: the first 10⁵ train and the last 2·10⁴ validate, the sizes
SculptLearner's phases 5–6 use (mhalearn/data/dask_data.py).  The span
is the teacher's own, built as phase 4 builds it (the minimum-norm point of
aff{Θ_i} and the affine hull's directions, :func:`span_basis`), then tilted
by a random rotation out of it so that every principal angle has sine
``distance`` (the span distance of :func:`mhalearn.evaluation.span_distance`).
The net's radius is ``SearchSettings.radius`` of that point's norm, as
``sculpt_fit`` computes it; the hull (that point and the long directions)
is tilted with the span, by the same rotation.  For each budget and
``net_slab`` (``--net-slabs``; ``none`` is the whole ball)
``search_and_select`` runs with ``SearchSettings(refine="none",
max_candidates=budget, net_slab=...)`` on that hull and the row gives
the net (resolution, points, tuples scored, what set the spacing, seconds)
and the relative test error on 4000 fresh sequences of

- ``paper_output_error``: the least-squares model phase 6 selects (the paper's output);
- ``nearest_error``: the tuple of net points nearest to the true heads' projections;
- ``best_corner_error``: the best tuple of corners of the net cells holding those
  projections (ranked by residual on 2·10⁴ training sequences); this and
  ``nearest_error`` are of the whole ball's grid, so only its rows have them;
- ``projection_error``: the true heads' projections onto the span (a net of spacing 0);
- ``span_floor_error``: local descent inside the span from those projections (the
  best the span allows; ours, not the paper's);
- ``ladder``: ``best_corner_error`` at each spacing radius/2^(j/2), j = 3..8, that
  the net may take, with its points and tuples C(P, 3) (finer nets than any budget
  here can score);

every one with W by least squares on the 10⁵ training sequences.  The net
limits the output when ``paper_output_error`` is far above
``span_floor_error``; the span does when they agree.  A budget whose net
would exceed the memory budget is refused by the net (``refused`` holds
the message).  One JSON line per (seed, distance, budget) in ``--out``; a
rerun skips the rows it holds; the rows of the seeds, distances and
budgets asked for are printed at the end as Markdown tables (``--report``:
only those tables, from the rows already in ``--out``, running nothing).

    python runs/net-m3/net_m3.py [--seeds 0 1 2] [--distances 0 0.05 0.1 0.15] [--budgets 2e5 4e6 8e7]
                           [--net-slabs none 0.15] [--memory-budget 6GiB] [--out runs/net-m3/net_m3.jsonl]
                           [--quick] [--report]
"""

import argparse
import itertools
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

import mhalearn
from mhalearn import MemoryBudgetError, peak_memory_mb, set_memory_budget
from mhalearn.attention.data import boolean_inputs
from mhalearn.attention.model import MultiHeadAttention, relative_error
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.dask_data import SAMPLE_TRAINING, SAMPLE_VALIDATION
from mhalearn.evaluation.observer import span_distance
from mhalearn.learners.chen_li.fit import search_and_select
from mhalearn.learners.chen_li.phase4_span import span_basis
from mhalearn.learners.chen_li.phase5_net import descend_in_span, net_points, score_net
from mhalearn.learners.chen_li.phase6_select import certificate_bounds
from mhalearn.learners.chen_li.settings import SearchSettings
from mhalearn.learners.least_squares import solve_projections
from mhalearn.seeding import seeded_rng

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl, markdown_table, power_of_ten  # noqa: E402

HEADS, DIM, LENGTH = 3, 12, 4
TEST_SAMPLES = 4000
#: Training sequences that rank the cell corners and run the descent in the span (a fixed cost per row).
RANKING_SAMPLES = 20_000


def true_span(teacher: MultiHeadAttention) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The teacher's span as phase 4 reads it: (orthonormal basis (m, d²), minimum-norm point of aff{Θ_i},
    the hull's long directions (m − 1, d²))."""
    vectors = teacher.thetas.reshape(teacher.heads, -1)
    differences = vectors[1:] - vectors[0]
    step = np.linalg.lstsq(differences.T, -vectors[0], rcond=None)[0]
    centre = vectors[0] + step @ differences
    long_directions = np.linalg.svd(differences, full_matrices=False)[2] if len(differences) else differences
    return span_basis(centre, long_directions, teacher.heads), centre, long_directions


def tilted(basis: np.ndarray, distance: float, rng: np.random.Generator) -> np.ndarray:
    """An orthonormal basis whose span makes every principal angle with span(basis) of sine ``distance``."""
    if distance == 0:
        return basis
    directions = rng.standard_normal(basis.shape)
    directions -= (directions @ basis.T) @ basis
    directions = np.linalg.qr(directions.T)[0].T  # orthonormal, orthogonal to span(basis)
    return math.sqrt(1.0 - distance ** 2) * basis + distance * directions


def least_squares_error(X, Y, thetas: np.ndarray, teacher, X_test) -> float:
    """Relative test error of Θ with W by least squares on (X, Y)."""
    model = MultiHeadAttention(thetas, solve_projections(X, Y, thetas, ridge=1e-10))
    return relative_error(model, teacher, X_test)


def theta_error(thetas: np.ndarray, teacher: MultiHeadAttention) -> float:
    """max_i ‖Θ̂_π(i) − Θ_i‖_F / ‖Θ_i‖_F under the best matching π of the heads."""
    truth = teacher.thetas
    norms = np.linalg.norm(truth.reshape(len(truth), -1), axis=1)
    return float(min(max(np.linalg.norm(thetas[p] - truth[i]) / norms[i] for i, p in enumerate(order))
                     for order in itertools.permutations(range(len(truth)))))


def cell_corners(coefficients: np.ndarray, resolution: float, radius: float) -> list[np.ndarray]:
    """For each row of ``coefficients``, the non-zero corners inside the ball of the net cell holding it."""
    corners = []
    for row in coefficients:
        low = np.floor(row / resolution)
        cell = np.array([low + np.array(offset) for offset in itertools.product((0, 1), repeat=len(row))])
        cell *= resolution
        norms = np.linalg.norm(cell, axis=1)
        corners.append(cell[(norms > 0) & (norms <= radius + 1e-12)])
    return corners


def net_reference(X, Y, teacher, X_test, basis, coefficients, resolution, radius) -> dict:
    """Errors of the net points nearest the true heads' projections and of the best tuple of cell corners."""
    B = basis.reshape(len(basis), DIM, DIM)
    nearest = np.round(coefficients / resolution) * resolution
    figures = {"nearest_error": least_squares_error(X, Y, np.einsum("ir,rab->iab", nearest, B), teacher, X_test),
               "nearest_theta_error": theta_error(np.einsum("ir,rab->iab", nearest, B), teacher)}
    corners = cell_corners(coefficients, resolution, radius)
    points = np.vstack(corners)
    offsets = np.cumsum([0] + [len(c) for c in corners])
    tuples = np.array([combo for combo in itertools.product(*(range(offsets[i], offsets[i + 1])
                                                              for i in range(len(corners))))
                       if len({tuple(points[j]) for j in combo}) == len(combo)], dtype=np.int64)
    thetas = np.einsum("pr,rab->pab", points, B)
    residuals = score_net(X[:RANKING_SAMPLES], Y[:RANKING_SAMPLES], thetas, tuples)
    best = thetas[tuples[int(np.argmin(residuals))]]
    figures.update(best_corner_error=least_squares_error(X, Y, best, teacher, X_test),
                   best_corner_theta_error=theta_error(best, teacher))
    return figures


def spacing_ladder(X, Y, teacher, X_test, basis, coefficients, radius) -> list[dict]:
    """The best tuple of cell corners at each spacing radius/2^(j/2) the net may take, j = 3..8.

    What a net of that spacing would find near the truth without scoring its
    C(P, m) tuples (the search found that tuple wherever both were run).
    """
    ladder = []
    for step in range(3, 9):
        resolution = radius / 2 ** (step / 2)
        points = len(net_points(len(basis), radius, resolution)) - 1  # the origin is left out
        figures = net_reference(X, Y, teacher, X_test, basis, coefficients, resolution, radius)
        ladder.append({"resolution": resolution, "net_points": points, "tuples": math.comb(points, HEADS),
                       "best_corner_error": figures["best_corner_error"]})
    return ladder


def span_reference(X, Y, teacher, X_test, basis) -> dict:
    """Errors of the true heads' projections onto span(basis) and of a local descent in the span from them."""
    coefficients = teacher.thetas.reshape(HEADS, -1) @ basis.T
    B = basis.reshape(len(basis), DIM, DIM)
    projected = np.einsum("ir,rab->iab", coefficients, B)
    descended, _ = descend_in_span(X[:RANKING_SAMPLES], Y[:RANKING_SAMPLES], basis, coefficients, max_iter=300)
    floor = np.einsum("ir,rab->iab", descended, B)
    return {"projection_error": least_squares_error(X, Y, projected, teacher, X_test),
            "span_floor_error": least_squares_error(X, Y, floor, teacher, X_test),
            "projection_theta_error": theta_error(projected, teacher)}


def rows_for(seed: int, distances, budgets, slabs, done):
    """One row per (distance, budget, net_slab) not in ``done`` for teacher ``seed``, yielded as measured."""
    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, seed))
    X_all, Y_all = mhalearn.make_dataset(teacher, SAMPLE_TRAINING + SAMPLE_VALIDATION, LENGTH,
                                         rng=seeded_rng(seed, "net-m3"))
    X, Y = X_all[:SAMPLE_TRAINING], Y_all[:SAMPLE_TRAINING]
    X_val, Y_val = X_all[SAMPLE_TRAINING:], Y_all[SAMPLE_TRAINING:]
    X_test = boolean_inputs(TEST_SAMPLES, LENGTH, DIM, rng=seeded_rng(seed, "net-m3-test"))
    bounds = certificate_bounds(X, Y)
    basis, centre, long_directions = true_span(teacher)
    for distance in distances:
        if all((seed, distance, budget, slab) in done for budget in budgets for slab in slabs):
            continue
        estimate = tilted(basis, distance, seeded_rng(seed, "net-m3-tilt", int(round(1e4 * distance))))
        head_norm = float(np.linalg.norm(estimate @ centre))  # the norm of the centre read in this span
        # The hull tilted with its span: the rotation taking basis to estimate, applied to the hull's vectors.
        hull = ((basis @ centre) @ estimate, (long_directions @ basis.T) @ estimate)
        settings = SearchSettings(refine="none")
        radius = settings.radius(head_norm, HEADS)
        span_figures = span_reference(X, Y, teacher, X_test, estimate)
        coefficients = teacher.thetas.reshape(HEADS, -1) @ estimate.T
        span_figures["ladder"] = spacing_ladder(X, Y, teacher, X_test, estimate, coefficients, radius)
        for budget, slab in itertools.product(budgets, slabs):
            if (seed, distance, budget, slab) in done:
                continue
            row = {"seed": seed, "distance": distance, "budget": budget, "net_slab": slab,
                   "measured_distance": span_distance(estimate, teacher), "radius": radius, **span_figures}
            settings = SearchSettings(refine="none", max_candidates=budget, net_slab=slab)
            start = time.perf_counter()
            try:
                net, selection = search_and_select(X, Y, X_val, Y_val, estimate, radius, HEADS, settings,
                                                   seeded_rng(seed, "net-m3-search", budget),
                                                   label_bound=bounds["label_bound"], token_norm=bounds["token_norm"],
                                                   hull=hull)
            except MemoryBudgetError as error:
                row["refused"] = str(error)
            else:
                model = selection.least_squares_model
                row.update(resolution=net.resolution, limited_by=net.limited_by, net_points=net.net_points,
                           candidates=net.candidates, net_seconds=net.seconds, select_seconds=selection.seconds,
                           seconds=time.perf_counter() - start, best_score=net.best_scores[0],
                           val_least_squares=selection.val_least_squares,
                           paper_output_error=relative_error(model, teacher, X_test),
                           paper_theta_error=theta_error(model.thetas, teacher))
                if slab is None:  # the corners and nearest points are the whole ball's grid's
                    row.update(net_reference(X, Y, teacher, X_test, estimate, coefficients, net.resolution, radius))
            row["peak_memory_mb"] = peak_memory_mb()
            yield row


def markdown_tables(rows) -> str:
    """The rows as two Markdown tables: the searches, and the spacing ladder of each (seed, distance)."""

    def percent(row, key):
        return f"{100 * row[key]:.2f} %" if key in row else "—"

    def search(row):
        head = [row["seed"], f"{row['distance']:g}", power_of_ten(row["budget"]), row.get("net_slab")]
        if "refused" in row:
            return head + ["refused: " + row["refused"].split(":")[0]] + [""] * 6
        return head + [f"{row['resolution']:.2f}", power_of_ten(row["candidates"]), f"{row['net_seconds']:.0f}",
                       percent(row, "paper_output_error"), percent(row, "best_corner_error"),
                       percent(row, "nearest_error"), percent(row, "span_floor_error")]

    rows = sorted(rows, key=lambda row: (row["seed"], row["distance"], row["budget"], row.get("net_slab") or 0.0))
    tables = [markdown_table(("teacher", "span distance", "max_candidates", "net_slab", "spacing", "triples scored",
                              "net s", "paper's output", "best corner", "nearest point", "span floor"),
                             map(search, rows))]
    ladders = {(row["seed"], row["distance"]): row for row in rows}
    if ladders:
        first = next(iter(ladders.values()))
        header = ["teacher", "span distance", "span floor"] + [
            f"spacing radius/2^{(3 + index) / 2:g} ({power_of_ten(step['tuples'])} triples)"
            for index, step in enumerate(first["ladder"])]
        tables.append(markdown_table(header, (
            [seed, f"{distance:g}", f"{100 * row['span_floor_error']:.2f} %"]
            + [f"{100 * step['best_corner_error']:.2f} %" for step in row["ladder"]]
            for (seed, distance), row in sorted(ladders.items()))))
    return "\n\n".join(tables)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--distances", type=float, nargs="+", default=[0.0, 0.05, 0.1, 0.15])
    parser.add_argument("--budgets", type=float, nargs="+", default=[2e5, 4e6, 8e7])
    parser.add_argument("--net-slabs", type=lambda text: None if text == "none" else float(text), nargs="+",
                        default=[None], help="SearchSettings.net_slab values ('none': the whole ball)")
    parser.add_argument("--memory-budget", default="6GiB", help="the net's memory budget (set_memory_budget)")
    parser.add_argument("--quick", action="store_true", help="teacher 10, distances 0 and 0.1, budget 2·10⁵")
    parser.add_argument("--out", default="runs/net-m3/net_m3.jsonl")
    parser.add_argument("--report", action="store_true",
                        help="print the tables of the rows in --out for the seeds, distances, budgets and slabs "
                             "asked for, and run nothing")
    args = parser.parse_args()
    seeds, distances, budgets = ([10], [0.0, 0.1], [200_000]) if args.quick else (
        args.seeds, args.distances, [int(budget) for budget in args.budgets])
    if not args.report:
        set_memory_budget(args.memory_budget)
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        done = {(row["seed"], row["distance"], row["budget"], row.get("net_slab")) for row in load_jsonl(args.out)}
        for seed in seeds:
            for row in rows_for(seed, distances, budgets, args.net_slabs, done):
                print(json.dumps(row), flush=True)
                with open(args.out, "a") as handle:
                    handle.write(json.dumps(row) + "\n")
    rows = [row for row in load_jsonl(args.out)
            if row["seed"] in seeds and row["distance"] in distances and row["budget"] in budgets
            and row.get("net_slab") in args.net_slabs]
    print(markdown_tables(rows))


if __name__ == "__main__":
    main()
