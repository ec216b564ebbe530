"""Where gradient descent's fits land on a teacher at a given n: a diagnostic of n* on hard families.

    python runs/samples-to-eps/cancelling_basins.py --heads 3 4 --seeds 6000 6001 --samples 120 240 \
        --out runs/samples-to-eps/cancelling-basins.jsonl          # computes (appends rows, skips stored ones)
    python runs/samples-to-eps/cancelling_basins.py --report --out runs/samples-to-eps/cancelling-basins.jsonl

For each (family, m, teacher seed, n) on the samples-to-eps stream of that teacher (the first n of the
``budget`` sequences the search draws, so the same data as the search's probe at n), L-BFGS on the first
n − validation_size(n, 0.2) sequences (what GradientLearner trains on; no early stopping, its default
3000 iterations) from

- ``restarts`` random starts drawn as GradientLearner draws them (Θ random of norm 1, W by least squares);
- the teacher perturbed: each Θ_i moved by ``delta``·‖Θ_i‖ in a random direction, W by least squares,

and, for every fit, its final relative training error and its relative test error against the teacher
(1000 fresh sequences), the cosine of each teacher head's Θ_j with the student head matched to it
(:func:`~mhalearn.attention.model.match_heads`) and the student's largest cosine between two of its own
heads (:func:`~mhalearn.attention.model.head_collapse`), and its heads' ‖Θ_i‖_F (a head near Θ = 0
attends uniformly: it computes the linear term x̄W). A fit is ``exact`` (test error ≤ 1e-6),
``interpolates`` (training error ≤ 1e-8 but not exact: the data are fitted by a layer that is not the
teacher) or ``stuck`` (training error above 1e-8 when L-BFGS stops: a stationary point, or the
iterations ran out, without fitting the data). Also per teacher the share of the labels a linear
predictor from [x_ℓ, x̄] explains (test R²), κ(W_Σ) and the Jacobian of the training outputs in (Θ, W)
at the teacher: its smallest singular value over its largest (0 when the n labels do not determine the
teacher even locally). Nothing here changes a learner: it observes the loss landscape at the teacher's
data.
Rows are appended as each (m, seed, n) ends.
"""
import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from mhalearn.attention import kernels
from mhalearn.attention.model import MultiHeadAttention, head_collapse, match_heads, relative_error
from mhalearn.data.fit_data import validation_size
from mhalearn.evaluation import plant_instance
from mhalearn.learners.least_squares import lbfgs_refine, random_parameters, solve_projections

EXACT = 1e-6
INTERPOLATES = 1e-8
KINDS = ("exact", "interpolates", "stuck")
#: A student head counts as saturated (its softmax near an arg-max) when ‖Θ_i‖_F is above this × the teacher's mean.
SATURATED = 10.0


def kind(train_error: float, test_error: float) -> str:
    return "exact" if test_error <= EXACT else "interpolates" if train_error <= INTERPOLATES else "stuck"


def jacobian_ratio(X: np.ndarray, teacher: MultiHeadAttention, step: float = 1e-6) -> float:
    """σ_min / σ_max of d F(X) / d(Θ, W) at the teacher (central differences)."""
    thetas, ws = teacher.thetas, teacher.ws
    flat = np.concatenate([thetas.ravel(), ws.ravel()])
    split = thetas.size

    def outputs(vector):
        return kernels.forward(X, vector[:split].reshape(thetas.shape), vector[split:].reshape(ws.shape)).ravel()

    columns = []
    for index in range(flat.size):
        up, down = flat.copy(), flat.copy()
        up[index] += step
        down[index] -= step
        columns.append((outputs(up) - outputs(down)) / (2 * step))
    singular = np.linalg.svd(np.array(columns), compute_uv=False)
    return float(singular[-1] / singular[0])


def fit_from(X, Y, thetas, X_test, teacher, max_iter):
    ws = solve_projections(X, Y, thetas)
    model, history = lbfgs_refine(X, Y, thetas, ws, max_iter=max_iter)
    train = float(np.sum((kernels.forward(X, model.thetas, model.ws) - Y) ** 2) / np.sum(Y ** 2))
    test = relative_error(model, teacher, X_test)
    matched = model.thetas[match_heads(model, teacher)]
    cosines = [float(np.sum(a * b) / (np.linalg.norm(a) * np.linalg.norm(b))) for a, b in zip(matched, teacher.thetas)]
    return {"train_error": train, "test_error": test, "kind": kind(train, test), "iterations": history["iterations"],
            "teacher_head_cosines": cosines, "theta_norms": np.linalg.norm(model.thetas, axis=(1, 2)).tolist(),
            **head_collapse(model, teacher)}


def linear_share(X, Y, X_test, teacher) -> float:
    """R² on the test inputs of the best linear predictor from the token and the sequence mean, [x_ℓ, x̄]."""
    def features(inputs):
        mean = np.broadcast_to(inputs.mean(axis=1, keepdims=True), inputs.shape)
        stacked = np.concatenate([inputs, mean, np.ones(inputs.shape[:2] + (1,))], axis=2)
        return stacked.reshape(-1, stacked.shape[2])

    coefficients = np.linalg.lstsq(features(X), Y.reshape(-1, Y.shape[2]), rcond=None)[0]
    target = kernels.forward(X_test, teacher.thetas, teacher.ws).reshape(-1, Y.shape[2])
    residual = target - features(X_test) @ coefficients
    return float(1 - np.sum(residual ** 2) / np.sum((target - target.mean(axis=0)) ** 2))


def measure(family, heads, seed, samples, *, budget, restarts, deltas, max_iter, dim=12, length=4, hardness=None):
    params = {} if hardness is None else {"hardness": hardness}
    teacher, X, Y, X_test = plant_instance(heads=heads, dim=dim, length=length, samples=budget, family=family,
                                           seed=seed, family_params=params)
    train = samples - validation_size(samples, 0.2)
    X, Y = X[:train], Y[:train]
    rng = np.random.default_rng([seed, heads, samples])
    fits = []
    for restart in range(restarts):
        fits.append({"start": "random", "restart": restart,
                     **fit_from(X, Y, random_parameters(heads, dim, rng, 1.0), X_test, teacher, max_iter)})
    for delta in deltas:
        direction = rng.standard_normal(teacher.thetas.shape)
        scale = np.linalg.norm(teacher.thetas, axis=(1, 2)) / np.linalg.norm(direction, axis=(1, 2))
        direction *= scale[:, None, None]
        fits.append({"start": f"teacher+{delta:g}",
                     **fit_from(X, Y, teacher.thetas + delta * direction, X_test, teacher, max_iter)})
    w_sum = np.linalg.svd(teacher.ws.sum(axis=0), compute_uv=False)
    return {"family": family, **params, "heads": heads, "seed": seed, "samples": samples, "train_samples": train,
            "w_sum_condition": float(w_sum[0] / w_sum[-1]), "jacobian_ratio": jacobian_ratio(X, teacher),
            "linear_r2": linear_share(X, Y, X_test, teacher),
            "teacher_theta_norms": np.linalg.norm(teacher.thetas, axis=(1, 2)).tolist(),
            "fits": fits}


def _spread(values: list[float], digits: str = ".2g") -> str:
    return f"{statistics.median(values):{digits}} [{min(values):{digits}}, {max(values):{digits}}]" if values else "–"


def _family(row: dict) -> str:
    """The family, with its dial point when the row has one."""
    return row["family"] + (f" h = {row['hardness']:g}" if "hardness" in row else "")


def report(rows: list[dict]) -> None:
    print("per (family, m, n): random starts by outcome (exact / interpolates / stuck, every restart of every "
          "teacher); starts from the perturbed teacher that are exact, per δ; over the random starts that are not "
          f"exact: training error, largest ‖Θ_i‖_F over the teacher's mean ‖Θ_i‖_F, and how many heads have "
          f"‖Θ_i‖_F above {SATURATED:g}× the teacher's mean (saturated softmax); per teacher, medians: linear R², "
          "κ(W_Σ), σ_min/σ_max of the Jacobian at the teacher")
    print()
    header = ["family", "m", "n", "teachers", "random starts: exact / interpolates / stuck",
              "perturbed-teacher starts exact", "training error, not exact", "largest ‖Θ_i‖ / teacher's, not exact",
              "saturated heads per start, not exact", "linear R²", "κ(W_Σ)", "Jacobian σ_min/σ_max"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    groups: dict = {}
    for row in rows:
        groups.setdefault((_family(row), row["heads"], row["samples"]), []).append(row)
    for (family, heads, samples), mine in sorted(groups.items()):
        random_fits = [(row, fit) for row in mine for fit in row["fits"] if fit["start"] == "random"]
        counts = " / ".join(str(sum(fit["kind"] == name for _, fit in random_fits)) for name in KINDS)
        failed = [(statistics.mean(row["teacher_theta_norms"]), fit) for row, fit in random_fits
                  if fit["kind"] != "exact"]
        saturated = Counter(sum(norm > SATURATED * scale for norm in fit["theta_norms"]) for scale, fit in failed)
        perturbed: dict = {}
        for row in mine:
            for fit in row["fits"]:
                if fit["start"] != "random":
                    perturbed.setdefault(fit["start"], []).append(fit["kind"] == "exact")
        near = ", ".join(f"δ = {start.split('+')[1]}: {sum(v)}/{len(v)}" for start, v in sorted(perturbed.items()))
        print(f"| {family} | {heads} | {samples} | {len(mine)} | {counts} | {near} | "
              f"{_spread([fit['train_error'] for _, fit in failed])} | "
              f"{_spread([max(fit['theta_norms']) / scale for scale, fit in failed], '.3g')} | "
              + (", ".join(f"{number}: {count}" for number, count in sorted(saturated.items())) or "–") + " | "
              f"{statistics.median(row['linear_r2'] for row in mine):.2f} | "
              f"{statistics.median(row['w_sum_condition'] for row in mine):.3g} | "
              f"{statistics.median(row['jacobian_ratio'] for row in mine):.2g} |")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--report", action="store_true", help="print the table from the rows and exit")
    parser.add_argument("--family", default="cancelling")
    parser.add_argument("--hardness", type=float, help="the family's dial point (make_teacher's hardness)")
    parser.add_argument("--heads", type=int, nargs="+", default=[3, 4])
    parser.add_argument("--seeds", type=int, nargs="+", default=[6000])
    parser.add_argument("--samples", type=int, nargs="+", default=[240])
    parser.add_argument("--budget", type=int, default=2000, help="the search's stream length (its budget)")
    parser.add_argument("--restarts", type=int, default=5)
    parser.add_argument("--deltas", type=float, nargs="*", default=[0.1, 0.5])
    parser.add_argument("--max-iter", type=int, default=3000)
    args = parser.parse_args(argv)
    rows = [json.loads(line) for line in args.out.read_text().splitlines()] if args.out.is_file() else []
    if args.report:
        report(rows)
        return
    if not (2 <= min(args.samples) and max(args.samples) <= args.budget and args.restarts >= 0
            and all(delta > 0 for delta in args.deltas)):
        sys.exit("expected 2 ≤ samples ≤ budget, restarts ≥ 0 and deltas > 0")
    done = {(row["family"], row.get("hardness"), row["heads"], row["seed"], row["samples"]) for row in rows}
    todo = [(heads, seed, samples) for heads in args.heads for samples in args.samples for seed in args.seeds
            if (args.family, args.hardness, heads, seed, samples) not in done]
    for index, (heads, seed, samples) in enumerate(todo, 1):
        start = time.perf_counter()
        row = measure(args.family, heads, seed, samples, budget=args.budget, restarts=args.restarts,
                      deltas=args.deltas, max_iter=args.max_iter, hardness=args.hardness)
        with args.out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        kinds = [fit["kind"] for fit in row["fits"]]
        print(f"[{index}/{len(todo)}] m={heads} seed={seed} n={samples}: {kinds} "
              f"κ={row['w_sum_condition']:.3g} J={row['jacobian_ratio']:.2g} {time.perf_counter() - start:.0f}s",
              flush=True)
    report([json.loads(line) for line in args.out.read_text().splitlines()])


if __name__ == "__main__":
    main()
