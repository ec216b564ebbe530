"""A search for teachers inside Chen & Li's conditions on which gradient descent fails.

    python runs/guarantee-dial/hard_search.py search --heads 3 --candidates 160 \
        --out runs/guarantee-dial/hard-search-m3.jsonl         # appends a row per candidate, resumes
    python runs/guarantee-dial/hard_search.py rescore --heads 3 --top 6 \
        --out runs/guarantee-dial/hard-search-m3.jsonl --rescored runs/guarantee-dial/hard-rescored-m3.jsonl
    python runs/guarantee-dial/hard_search.py report --out runs/guarantee-dial/hard-search-m3.jsonl \
        --rescored runs/guarantee-dial/hard-rescored-m3.jsonl
    python runs/guarantee-dial/hard_search.py search --heads 3 --candidates 200 --max-theta-norm 8 \
        --out runs/guarantee-dial/hard-search-m3-norm8.jsonl      # Θ norms bounded by 8 ("peaked")

**Search.** Candidate teachers (m heads, d = 12, k = 4) are proposed, kept only when
:func:`mhalearn.nondegeneracy` passes with its default thresholds (Gram ratio ≥ 0.2, κ(W_Σ) ≤ 20,
every ‖W_i‖_F/√d ≥ 0.5: the conditions every results row reports as ``inside_conditions``), and
scored by gradient descent's relative test error at a fixed n = 2 × the random teachers' median n* at
that m (``samples-to-eps``: 48 at m = 3, 76 at m = 4, so n = 96 and 152): ``GradientLearner(m,
restarts=2)`` on n fresh Boolean sequences, tested on 1000 more. The first half of the budget is
random proposals from five generators that move away from the random family in the ways the hard
families do while staying inside (``random`` with ‖Θ_i‖_F drawn in [1, 8]; ``shared`` with ρ in
[0, 0.6]; ``cancelling`` on the ``cancelling-conditioned`` dial at hardness in [0, 0.55]; ``scaled``
with per-head W scales in [0.5, 3]; ``sharp-shared`` with ‖Θ_i‖_F in [6, 16] and ρ in [0, 0.5]); the
second half is local moves from the five hardest so far (by the sum of log errors at n and at n/2, the
random teachers' median n*, where about half of random teachers fail: a graded signal where every
candidate passes at n) (each Θ_i and W_i moved by a random direction of
relative size s ∈ [0.05, 0.5], ‖Θ‖ rescaled by e^{N(0, 0.3²)}), redrawn until inside. Every candidate
is a row with its parameters, its conditions and its score; nothing is dropped.

``--max-theta-norm B`` keeps only candidates whose every ‖Θ_i‖_F ≤ B: the conditions as
:func:`mhalearn.nondegeneracy` checks them bound no norm, and without a bound the local moves climb
to near-hard attention (‖Θ_i‖_F of tens to a hundred; the random family's is 2).

**Rescore.** The ``--top`` hardest candidates are fitted again on fresh data (another seed) with the
samples-to-eps settings (``GradientLearner(m, restarts=5)``), at the same n and at 4× it, and their n*
is searched on one fresh stream of 2000 sequences (ε = 1e-6, first probe 16·m, resolution 1.25×, closing
probe at 2·n*, the
package's :func:`mhalearn.sample_search.search_samples_needed`), with the same search for random
teachers of the same seeds beside them.

Nothing here changes a learner; the teacher is only read to draw labels and to score.
"""
import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

import mhalearn
from mhalearn.sample_search import search_samples_needed

DIM, LENGTH, TEST = 12, 4, 1000
#: Random teachers' median n* (samples-to-eps, gradient descent, d = 12, k = 4, runs/samples-to-eps/).
RANDOM_NSTAR = {2: 32, 3: 48, 4: 76}
GENERATORS = ("random", "shared", "cancelling", "scaled", "sharp-shared")
EPS = 1e-6


def propose(kind: str, heads: int, rng: np.random.Generator,
            cap: float = math.inf) -> tuple[mhalearn.MultiHeadAttention, dict]:
    """One draw of a generator (its knobs recorded), not yet checked against the conditions.

    ``cap`` bounds the Θ norms a generator draws (the ``sharp-shared`` range [6, 16] is cut to it).
    """
    if kind == "random":
        knobs = {"theta_norm": float(rng.uniform(1.0, min(8.0, cap)))}
        return mhalearn.sample_teacher(heads, DIM, rng=rng, **knobs), knobs
    if kind == "shared":
        knobs = {"theta_norm": float(rng.uniform(1.0, 4.0)), "shared": float(rng.uniform(0.0, 0.6))}
        return mhalearn.sample_teacher(heads, DIM, rng=rng, max_tries=50, **knobs), knobs
    if kind == "cancelling":
        knobs = {"hardness": float(rng.uniform(0.0, 0.55))}
        return mhalearn.make_teacher("cancelling-conditioned", heads, DIM, rng=rng, **knobs), knobs
    if kind == "scaled":
        knobs = {"w_scales": rng.uniform(0.5, 3.0, heads).tolist(), "theta_norm": float(rng.uniform(1.0, 4.0))}
        return mhalearn.sample_teacher(heads, DIM, rng=rng, **knobs), knobs
    knobs = {"theta_norm": float(rng.uniform(min(6.0, cap / 2), min(16.0, cap))),
             "shared": float(rng.uniform(0.0, 0.5))}
    return mhalearn.sample_teacher(heads, DIM, rng=rng, max_tries=50, **knobs), knobs


def move(parent: mhalearn.MultiHeadAttention, rng: np.random.Generator) -> tuple[mhalearn.MultiHeadAttention, dict]:
    """A local move: every Θ_i and W_i moved by a random direction of relative size s, ‖Θ‖ rescaled."""
    size, stretch = float(rng.uniform(0.05, 0.5)), float(np.exp(0.3 * rng.standard_normal()))

    def moved(arrays):
        direction = rng.standard_normal(arrays.shape)
        norms = np.linalg.norm(arrays, axis=(1, 2), keepdims=True)
        return arrays + size * norms * direction / np.linalg.norm(direction, axis=(1, 2), keepdims=True)

    return mhalearn.MultiHeadAttention(stretch * moved(parent.thetas), moved(parent.ws)), {
        "size": size, "stretch": stretch}


def score(teacher, heads: int, samples: int, seed: int, restarts: int) -> dict:
    """Gradient descent's relative test error on ``samples`` fresh sequences of the teacher."""
    rng = np.random.default_rng([seed, heads, samples])
    X, Y = mhalearn.make_dataset(teacher, samples, LENGTH, rng=rng)
    X_test = mhalearn.boolean_inputs(TEST, LENGTH, DIM, rng=rng)
    start = time.perf_counter()
    learner = mhalearn.GradientLearner(heads, restarts=restarts, random_state=seed).fit(X, Y)
    seconds = time.perf_counter() - start
    train = float(np.sum((learner.model_.predict(X) - Y) ** 2) / np.sum(Y ** 2))
    return {"samples": samples, "test_error": mhalearn.relative_error(learner.model_, teacher, X_test),
            "train_error": train, "fit_seconds": seconds,
            **mhalearn.head_collapse(learner.model_, teacher)}


def layer(row: dict) -> mhalearn.MultiHeadAttention:
    return mhalearn.MultiHeadAttention(np.array(row["thetas"]), np.array(row["ws"]))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def _hardness(row: dict) -> float:
    """What the local moves climb: log error at 2·n* plus at n* (the latter separates teachers that both pass)."""
    return sum(math.log10(max(row[key]["test_error"], 1e-30)) for key in ("score", "guide"))


def search(args) -> None:
    rows = _rows(args.out)
    samples = 2 * RANDOM_NSTAR[args.heads]
    for index in range(len(rows), args.candidates):
        rng = np.random.default_rng([args.seed, args.heads, index])
        local = index >= args.candidates // 2
        parents = sorted((row for row in rows if row["heads"] == args.heads), key=_hardness, reverse=True)[:5]
        for tries in range(1, 201):
            if local:
                parent = parents[int(rng.integers(len(parents)))]
                teacher, knobs = move(layer(parent), rng)
                kind, knobs = "move", {**knobs, "parent": parent["index"]}
            else:
                kind = GENERATORS[index % len(GENERATORS)]
                try:
                    teacher, knobs = propose(kind, args.heads, rng, args.max_theta_norm)
                except ValueError:  # a generator whose rejection sampling gave up: draw again
                    continue
            norms = np.linalg.norm(teacher.thetas, axis=(1, 2))
            if mhalearn.nondegeneracy(teacher).ok and norms.max() <= args.max_theta_norm:
                break
        else:
            sys.exit(f"candidate {index}: no proposal inside the conditions in 200 tries")
        row = {"index": index, "heads": args.heads, "kind": kind, "knobs": knobs, "tries": tries,
               "conditions": mhalearn.nondegeneracy(teacher).columns(),
               "score": score(teacher, args.heads, samples, seed=index, restarts=2),
               "guide": score(teacher, args.heads, samples // 2, seed=index, restarts=2),
               "thetas": teacher.thetas.tolist(), "ws": teacher.ws.tolist()}
        rows.append(row)
        with args.out.open("a") as handle:
            handle.write(json.dumps(row) + "\n")
        print(f"[{index + 1}/{args.candidates}] {kind}: error {row['score']['test_error']:.3g} at n = {samples} "
              f"({row['score']['fit_seconds']:.1f} s)", flush=True)


def samples_needed(teacher, heads: int, seed: int, budget: int = 2000) -> dict:
    """n* of GradientLearner(m, restarts=5) on prefixes of one fresh stream (the samples-to-eps protocol)."""
    rng = np.random.default_rng([seed, heads, 1])
    X, Y = mhalearn.make_dataset(teacher, budget, LENGTH, rng=rng)
    X_test = mhalearn.boolean_inputs(TEST, LENGTH, DIM, rng=rng)

    def error_at(samples: int):
        start = time.perf_counter()
        learner = mhalearn.GradientLearner(heads, restarts=5, random_state=seed).fit(X[:samples], Y[:samples])
        return mhalearn.relative_error(learner.model_, teacher, X_test), time.perf_counter() - start

    found = search_samples_needed(error_at, EPS, start=16 * heads, budget=budget, confirm=2.0)
    return {"samples_needed": found.samples_needed, "censored": found.censored,
            "probes": [[int(n), float(error)] for n, error, *_ in found.probes]}


def rescore(args) -> None:
    rows = [row for row in _rows(args.out) if row["heads"] == args.heads]
    done = {row["index"] for row in _rows(args.rescored)}
    samples = 2 * RANDOM_NSTAR[args.heads]
    for row in sorted(rows, key=_hardness, reverse=True)[:args.top]:
        if row["index"] in done:
            continue
        teacher = layer(row)
        fresh = 10_000 + row["index"]
        random_teacher = mhalearn.sample_teacher(args.heads, DIM, rng=fresh)
        out = {"index": row["index"], "heads": args.heads, "screened_error": row["score"]["test_error"],
               "fresh": [score(teacher, args.heads, n, seed=fresh, restarts=5) for n in (samples, 4 * samples)],
               "nstar": samples_needed(teacher, args.heads, fresh),
               "nstar_random": samples_needed(random_teacher, args.heads, fresh)}
        with args.rescored.open("a") as handle:
            handle.write(json.dumps(out) + "\n")
        print(f"candidate {row['index']}: fresh errors {[f['test_error'] for f in out['fresh']]}, "
              f"n* {out['nstar']['samples_needed']} (random teacher {out['nstar_random']['samples_needed']})",
              flush=True)


def _quantiles(values) -> str:
    low, mid, high = np.quantile(values, [0.1, 0.5, 0.9])
    return f"{mid:.3g} [{low:.3g}, {high:.3g}]"


def report(args) -> None:
    rows = _rows(args.out)
    for heads in sorted({row["heads"] for row in rows}):
        mine = [row for row in rows if row["heads"] == heads]
        n = mine[0]["score"]["samples"]
        print(f"\nm = {heads}: {len(mine)} candidates inside the conditions, gradient descent (2 restarts) at n = {n}; "
              "relative test error: median [10 %, 90 % quantiles]; fits above ε = 1e-6")
        print("\n| proposal | candidates | error | above ε | largest error | fit seconds, total |")
        print("| --- | --- | --- | --- | --- | --- |")
        for kind in (*GENERATORS, "move"):
            group = [row for row in mine if row["kind"] == kind]
            if group:
                errors = [row["score"]["test_error"] for row in group]
                print(f"| {kind} | {len(group)} | {_quantiles(errors)} | {sum(e > EPS for e in errors)} | "
                      f"{max(errors):.3g} | {sum(row['score']['fit_seconds'] for row in group):.0f} |")
        hardest = sorted(mine, key=_hardness, reverse=True)[:6]
        print("\nhardest: index, proposal, error, training error, Gram ratio, κ(W_Σ), min ‖W_i‖/√d, Θ norms")
        for row in hardest:
            c = row["conditions"]
            print(f"  {row['index']} {row['kind']} {row['score']['test_error']:.3g} {row['score']['train_error']:.3g} "
                  f"{c['gram_ratio']:.3f} {c['w_sum_condition']:.1f} {c['w_norm_min']:.2f} "
                  f"[{c['theta_norm_min']:.2f}, {c['theta_norm_max']:.2f}]")
    rescored = _rows(args.rescored) if args.rescored else []
    if rescored:
        print("\nrescored on fresh data, 5 restarts: errors at n and 4n; n* (ε = 1e-6, budget 2000) "
              "against a random teacher of the same seed")
        for row in rescored:
            print(f"  {row['index']} (m = {row['heads']}): screened {row['screened_error']:.3g}; fresh "
                  f"{[round(f['test_error'], 6) for f in row['fresh']]} at {[f['samples'] for f in row['fresh']]}; "
                  f"n* {row['nstar']['samples_needed'] or '> 2000'} vs random "
                  f"{row['nstar_random']['samples_needed'] or '> 2000'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("search", "rescore", "report"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rescored", type=Path)
    parser.add_argument("--heads", type=int, default=3, choices=sorted(RANDOM_NSTAR))
    parser.add_argument("--candidates", type=int, default=160)
    parser.add_argument("--top", type=int, default=6)
    parser.add_argument("--seed", type=int, default=8100)
    parser.add_argument("--max-theta-norm", type=float, default=math.inf,
                        help="keep only candidates whose every ‖Θ_i‖_F is at most this (default: no bound)")
    args = parser.parse_args(argv)
    if args.action == "rescore" and args.rescored is None:
        sys.exit("rescore needs --rescored FILE")
    {"search": search, "rescore": rescore, "report": report}[args.action](args)


if __name__ == "__main__":
    main()
