"""Issue 76's acceptance figures for the query learner, on fresh teachers; every fit a row.

    python runs/queries-to-eps/acceptance.py --out runs/queries-to-eps/acceptance.jsonl        # computes
    python runs/queries-to-eps/acceptance.py --report --out runs/queries-to-eps/acceptance.jsonl

Parts (``--parts``; rows already stored are skipped, so a run resumes):

- ``exact``: one head, d = 8, 12, 16, k = 4, seeds 7000–7009 (random teachers), an exact oracle,
  QueryLearner's defaults (two-token queries); and the same with four distinct tokens a query.
- ``noisy``: one head, d = 12, seeds 7100–7109, Gaussian noise σ = 1e-4 and 1e-2 on every output entry;
  per teacher, the oversampling factor climbs by 1.25× from 1 until the relative error is ≤ 1e-6 or the
  factor passes 64 (every probe a row), so the queries to ε = 1e-4 and 1e-6 are read off the probes.
- ``heads``: m = 2 … 6 (2m ≤ d), d = 12, k = 4, seeds 7200–7209, exact oracle, the ``random`` family and
  the ``cancelling`` one (where gradient descent fails at odd m), QueryLearner's defaults.
- ``families``: the hard families `peaked`, `sharp`, `small-margin` and `near-identical` at m = 1, 2, 3,
  d = 12, k = 4, seeds 7400–7409, exact oracle, QueryLearner's defaults: where the learner's assumptions
  (readable shares, separable poles) stop holding.
- ``lowrank``: one head whose Θ = G₁G₂ (d × r and r × d standard Gaussian, rescaled to ‖Θ‖_F = 2; W with
  i.i.d. N(0, 1/d) entries), (d, r) = (16, 1), (16, 2), (24, 2), (32, 2), (32, 4), seeds
  7300–7309, exact oracle, ``QueryLearner(1, rank=r)``: the compressed-sensing regime.

The error is :func:`mhalearn.relative_error` on 2000 fresh Boolean sequences (k = 4, seeded seed + 10⁶),
the parameter error :func:`mhalearn.parameter_error`'s ``total`` (head-matched).
"""
import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import mhalearn

EXACT_DIMS = (8, 12, 16)
EXACT_SEEDS = range(7000, 7010)
NOISY_SEEDS = range(7100, 7110)
NOISES = (1e-4, 1e-2)
EPSILONS = (1e-4, 1e-6)
MAX_OVERSAMPLE = 64.0
HEAD_COUNTS = (2, 3, 4, 5, 6)
HEAD_SEEDS = range(7200, 7210)
HEAD_FAMILIES = ("random", "cancelling")
HARD_FAMILIES = ("peaked", "sharp", "small-margin", "near-identical")
HARD_HEADS = (1, 2, 3)
HARD_SEEDS = range(7400, 7410)
LOW_RANKS = ((16, 1), (16, 2), (24, 2), (32, 2), (32, 4))
LOW_RANK_SEEDS = range(7300, 7310)
LENGTH = 4
TEST_SEQUENCES = 2000


def fit_row(teacher, learner, oracle=None, **key) -> dict:
    """Fit ``learner`` on ``oracle`` (an exact one of ``teacher`` by default) and measure it: one row."""
    oracle = mhalearn.QueryOracle(teacher) if oracle is None else oracle
    started = time.perf_counter()
    learner.fit(oracle)
    seconds = time.perf_counter() - started
    X = mhalearn.boolean_inputs(TEST_SEQUENCES, LENGTH, teacher.dim, rng=key["seed"] + 10**6)
    report = learner.report_
    return {**key, "queries": report.queries, "queries_by_step": report.queries_by_step(),
            "relative_error": mhalearn.relative_error(learner.model_, teacher, X),
            "parameter_error": mhalearn.parameter_error(learner.model_, teacher)["total"],
            "separable": report.separable, "notes": list(report.notes)[:3], "seconds": round(seconds, 3)}


def exact_rows():
    for distinct in (2, 4):
        for dim in EXACT_DIMS:
            for seed in EXACT_SEEDS:
                key = {"part": "exact", "family": "random", "heads": 1, "d": dim, "distinct": distinct, "seed": seed}
                yield key, lambda key=key: fit_row(
                    mhalearn.sample_teacher(1, key["d"], rng=key["seed"]),
                    mhalearn.QueryLearner(1, length=LENGTH, distinct=key["distinct"], random_state=key["seed"]),
                    None, **key)


def noisy_probes(stored: set, write):
    """Per (σ, teacher), oversampling factors 1, 1.25, 1.25², … until the error is ≤ min(EPSILONS)."""
    for noise in NOISES:
        for seed in NOISY_SEEDS:
            teacher = mhalearn.sample_teacher(1, 12, rng=seed)
            step = 0
            while (oversample := round(1.25 ** step, 6)) <= MAX_OVERSAMPLE:
                key = {"part": "noisy", "family": "random", "heads": 1, "d": 12, "noise": noise, "seed": seed,
                       "oversample": oversample}
                row = stored.get(json.dumps(key, sort_keys=True))
                if row is None:
                    oracle = mhalearn.QueryOracle(teacher, noise=noise, rng=seed + 1)
                    learner = mhalearn.QueryLearner(1, length=LENGTH, oversample=oversample, random_state=seed)
                    row = fit_row(teacher, learner, oracle, **key)
                    write(row)
                if row["relative_error"] <= min(EPSILONS):
                    break
                step += 1


def head_rows(part: str = "heads", families=HEAD_FAMILIES, counts=HEAD_COUNTS, seeds=HEAD_SEEDS):
    """Exact fits of QueryLearner's defaults on the families' teachers, d = 12: the ``heads`` part, or another."""
    for family in families:
        for heads in counts:
            for seed in seeds:
                key = {"part": part, "family": family, "heads": heads, "d": 12, "seed": seed}
                yield key, lambda key=key: fit_row(
                    mhalearn.make_teacher(key["family"], key["heads"], key["d"], rng=key["seed"]),
                    mhalearn.QueryLearner(key["heads"], length=LENGTH, random_state=key["seed"]), **key)


def low_rank_teacher(dim: int, rank: int, seed: int) -> mhalearn.MultiHeadAttention:
    """One head with Θ of rank ``rank`` (‖Θ‖_F = 2) and W with i.i.d. N(0, 1/d) entries.

    W is drawn directly, not by ``sample_teacher``, whose non-degeneracy test (κ(W_Σ) ≤ 20) finds no
    single-head teacher at d = 32.
    """
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((dim, rank)) @ rng.standard_normal((rank, dim))
    projection = rng.standard_normal((dim, dim)) / np.sqrt(dim)
    return mhalearn.MultiHeadAttention((2.0 * theta / np.linalg.norm(theta))[None], projection[None])


def low_rank_rows():
    for dim, rank in LOW_RANKS:
        for seed in LOW_RANK_SEEDS:
            key = {"part": "lowrank", "family": "low-rank", "heads": 1, "d": dim, "rank": rank, "seed": seed}
            yield key, lambda key=key: {
                **fit_row(low_rank_teacher(key["d"], key["rank"], key["seed"]),
                          mhalearn.QueryLearner(1, length=LENGTH, rank=key["rank"], random_state=key["seed"]),
                          **key),
                "full_design_queries": mhalearn.QueryLearner(1, length=LENGTH).planned_queries(key["d"])}


def family_rows():
    return head_rows("families", HARD_FAMILIES, HARD_HEADS, HARD_SEEDS)


def key_of(row: dict) -> str:
    names = ("part", "family", "heads", "d", "rank", "distinct", "noise", "seed", "oversample")
    return json.dumps({name: row[name] for name in names if name in row}, sort_keys=True)


def compute(out: Path, parts) -> None:
    stored = {key_of(row): row for row in read_rows(out)}
    with out.open("a") as handle:
        def write(row):
            handle.write(json.dumps(row) + "\n")
            handle.flush()
            stored[key_of(row)] = row
            print(json.dumps({k: row[k] for k in row if k not in ("queries_by_step", "notes")}), flush=True)

        for part, rows in (("exact", exact_rows), ("heads", head_rows), ("lowrank", low_rank_rows),
                           ("families", family_rows)):
            if part not in parts:
                continue
            for key, run in rows():
                if json.dumps(key, sort_keys=True) in stored:
                    continue
                row = run()
                write(row)
        if "noisy" in parts:
            noisy_probes(stored, write)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()] if path.exists() else []


def table(title: str, header: list[str], body: list[list]) -> list[str]:
    """A titled Markdown table (empty when it has no rows)."""
    if not body:
        return []
    return ["", title, "", "| " + " | ".join(header) + " |", "|" + " --- |" * len(header),
            *("| " + " | ".join(str(cell) for cell in row) + " |" for row in body)]


def exact_body(rows: list[dict]) -> list[list]:
    body = []
    for distinct in (2, 4):
        fit = []
        for dim in EXACT_DIMS:
            cell = [row for row in rows if row["d"] == dim and row["distinct"] == distinct]
            if cell:
                queries = sorted(row["queries"] for row in cell)
                fit += [(dim, row["queries"]) for row in cell]
                body.append([distinct, dim, f"{queries[0]}–{queries[-1]}",
                             f"{statistics.median(queries) / dim ** 2:.3f}",
                             f"{max(row['relative_error'] for row in cell):.1e}",
                             f"{max(row['parameter_error'] for row in cell):.1e}"])
        if fit:
            dims, counts = np.array(fit, dtype=float).T
            c_only = float(counts @ dims ** 2 / (dims ** 2 @ dims ** 2))
            (c, b), *_ = np.linalg.lstsq(np.stack([dims ** 2, dims], axis=1), counts, rcond=None)
            worst = float(np.max(np.abs(counts - c_only * dims ** 2) / counts))
            body.append([distinct, "fit", f"q ≈ {c_only:.3f}·d² (worst {100 * worst:.0f} % off); "
                         f"q ≈ {c:.3f}·d² + {b:.2f}·d", "", "", ""])
    return body


def noisy_body(rows: list[dict]) -> list[list]:
    body = []
    for noise in NOISES:
        for eps in EPSILONS:
            firsts = []
            for seed in NOISY_SEEDS:
                probes = sorted((row for row in rows if row["noise"] == noise and row["seed"] == seed),
                                key=lambda row: row["oversample"])
                firsts += [row for row in probes if row["relative_error"] <= eps][:1]
            queries = [row["queries"] for row in firsts] or [None]
            body.append([f"{noise:g}", f"{eps:g}", f"{len(firsts)} / {len(NOISY_SEEDS)}",
                         "—" if not firsts else f"{statistics.median(queries):.0f}",
                         "—" if not firsts else max(queries),
                         "—" if not firsts else f"{statistics.median(row['oversample'] for row in firsts):.2f}"])
    return body if rows else []


def heads_body(rows: list[dict], families=HEAD_FAMILIES, counts=HEAD_COUNTS) -> list[list]:
    body = []
    for family in families:
        for m in counts:
            cell = [row for row in rows if row["family"] == family and row["heads"] == m]
            errors = [row["relative_error"] for row in cell]
            queries = sorted(row["queries"] for row in cell)
            body += [[family, m, f"{sum(e <= 1e-6 for e in errors)} / {len(cell)}",
                      "—" if m == 1 else f"{sum(bool(row['separable']) for row in cell)} / {len(cell)}",
                      f"{queries[0]}–{queries[-1]}",
                      f"{statistics.median(errors):.1e}", f"{max(errors):.1e}"]] if cell else []
    return body


def low_rank_body(rows: list[dict]) -> list[list]:
    body = []
    for dim, rank in LOW_RANKS:
        cell = [row for row in rows if row["d"] == dim and row["rank"] == rank]
        queries = sorted(row["queries"] for row in cell)
        body += [[dim, rank, f"{queries[0]}–{queries[-1]}", cell[0]["full_design_queries"],
                  rank * (2 * dim - rank), f"{sum(row['relative_error'] <= 1e-10 for row in cell)} / {len(cell)}",
                  f"{max(row['relative_error'] for row in cell):.1e}"]] if cell else []
    return body


def report(out: Path) -> str:
    rows = read_rows(out)
    part = {name: [row for row in rows if row["part"] == name]
            for name in ("exact", "noisy", "heads", "lowrank", "families")}
    lines = table("One head, exact oracle, k = 4, 10 fresh random teachers per d (seeds 7000–7009):",
                  ["tokens a query", "d", "queries (W + Θ)", "queries / d²", "max relative error",
                   "max parameter error"], exact_body(part["exact"]))
    lines += table("One head, d = 12, Gaussian noise σ on every output entry, 10 fresh teachers "
                   "(seeds 7100–7109): the fewest queries of the probes (oversampling 1.25^j) reaching ε:",
                   ["σ", "ε", "teachers reaching ε", "median queries", "max queries", "median oversampling"],
                   noisy_body(part["noisy"]))
    lines += table("Several heads, d = 12, k = 4, exact oracle, 10 fresh teachers per (family, m) "
                   "(seeds 7200–7209), QueryLearner's defaults:",
                   ["family", "m", "relative error ≤ 1e-6", "separable", "queries", "median relative error",
                    "max relative error"], heads_body(part["heads"]))
    lines += table("One head of rank r, exact oracle, k = 4, 10 teachers per (d, r) (seeds 7300–7309), "
                   "QueryLearner(1, rank=r):",
                   ["d", "r", "queries (W + Θ)", "full-rank design", "r(2d − r)", "relative error ≤ 1e-10",
                    "max relative error"], low_rank_body(part["lowrank"]))
    lines += table("Hard families, d = 12, k = 4, exact oracle, 10 teachers per (family, m) (seeds 7400–7409), "
                   "QueryLearner's defaults:",
                   ["family", "m", "relative error ≤ 1e-6", "separable", "queries", "median relative error",
                    "max relative error"], heads_body(part["families"], HARD_FAMILIES, HARD_HEADS))
    return "\n".join(lines[1:])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("acceptance.jsonl"))
    parser.add_argument("--parts", nargs="+", default=["exact", "noisy", "heads", "lowrank", "families"],
                        choices=["exact", "noisy", "heads", "lowrank", "families"])
    parser.add_argument("--report", action="store_true", help="print the tables from the stored rows")
    args = parser.parse_args(argv)
    if args.report:
        sys.stdout.write(report(args.out) + "\n")
        return
    compute(args.out, set(args.parts))


if __name__ == "__main__":
    main()
