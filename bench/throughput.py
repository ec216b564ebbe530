"""What one more sequence costs SculptLearner, against a plain NumPy forward pass labelling it (issue 21).

Setting: m = 2, d = 12, k = 4, the teacher ``sample_teacher(2, 12,
rng=seeded_rng(20_251, 2, seed))``, Boolean X, noiseless labels, arrays in
memory, ``SculptLearner(2, refine="none", random_state=0)``.  The learner is
fitted on the first n₁ and on the first n₂ sequences of one data set; its
marginal cost per sequence is (wall time of ``fit`` at n₂ − at n₁)/(n₂ − n₁)
(wall time: it includes the input checks and the standardisation that
``report_.total_seconds`` leaves out).  NumPy labelling is a plain forward
pass written here, independent of the package (logits by einsum, a stable
softmax, matmuls), timed on the n₂ − n₁ extra sequences.  Everything runs on
``--threads`` cores (Numba's threads and BLAS's; default 1, so the figures
are per core).

Rounds interleave fit(n₁), fit(n₂) and the labelling, so machine load falls
on all three; each figure is the best over ``--repeats`` rounds.  The script
prints both costs in µs per sequence, their ratio, and the marginal cost of
every phase (from the phase results' ``seconds``, best per phase; "outside
the phases" is the fit's wall time minus the phases').

``--kernels`` also times, on one block of 65 536 sequences of the data, a
pass of each kernel the passes run (the decoder's residuals under
Ŵ_Σ = Σ_i W_i, on the tokens and on their codes as the learner's source
keeps them, and of one row per sequence, as our refit decodes its pool:
what a sequence costs whatever its rows, and what a row adds; the margin
kernel under Θ̄ = the heads' mean, for every row's mass, for the mass
above the margin pass's floor 1 − η, and from the codes; coding the
tokens; phase 1's token sums), in µs per sequence and against the
blockwise labelling of the block.

    python bench/throughput.py [--quick] [--small 100000] [--large 400000] [--repeats 3] [--seed 0] [--kernels]
"""

import argparse
import time

import numba
import numpy as np
from _common import with_progress
from threadpoolctl import threadpool_limits

from mhalearn import SculptLearner, SearchSettings
from mhalearn.attention.teachers import sample_teacher
from mhalearn.data.sources import CodedTokens
from mhalearn.data.token_codes import block_codes, code_groups
from mhalearn.learners.chen_li import AlternatingRefit
from mhalearn.learners.chen_li.decoder import decoding_residuals
from mhalearn.learners.chen_li.phase1_crude_sum import token_sums
from mhalearn.learners.chen_li.phase3_refine_sum import margin_mass
from mhalearn.seeding import seeded_rng

HEADS, DIM, LENGTH = 2, 12, 4
LABEL_BLOCK = 1 << 16


def numpy_label(X, thetas, ws):
    """F(X) = Σ_i softmax(XΘ_iXᵀ)XW_i by NumPy alone (the baseline every cost is compared with)."""
    n, k, d = X.shape
    tokens = X.reshape(n * k, d)
    out = np.zeros_like(X)
    for theta, w in zip(thetas, ws):
        logits = np.einsum("nkd,nld->nkl", (tokens @ theta).reshape(n, k, d), X)
        weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
        weights /= weights.sum(axis=-1, keepdims=True)
        out += weights @ (tokens @ w).reshape(n, k, d)
    return out


def numpy_label_blocks(X, thetas, ws, out):
    """:func:`numpy_label` a block of 65 536 sequences at a time, into ``out`` (the steady-state cost)."""
    for start in range(0, len(X), LABEL_BLOCK):
        out[start:start + LABEL_BLOCK] = numpy_label(X[start:start + LABEL_BLOCK], thetas, ws)


def kernel_costs(X, Y, teacher, repeats: int = 5) -> dict:
    """µs per sequence of one pass of each kernel over the block X, Y, and of labelling it (best of ``repeats``)."""
    rows = np.arange(len(X))
    w_sum, theta_bar = teacher.ws.sum(axis=0), teacher.thetas.mean(axis=0)
    out = np.zeros_like(X)
    codes = np.empty((*X.shape[:2], code_groups(X.shape[2])), dtype=np.uint8)
    block_codes(X, codes)
    coded = CodedTokens(X, codes)  # a block as SculptLearner's source hands it over, with its tokens' codes
    floor = 1.0 - SculptLearner(HEADS).body.certify_slack  # the margin pass's
    first_labels = np.ascontiguousarray(Y[:, :1])  # one row per sequence, as our refit's pool decodes them
    passes = {"decoder (residuals, one pass)": lambda: decoding_residuals(X, Y, w_sum, rows),
              "  from the tokens' codes": lambda: decoding_residuals(coded, Y, w_sum, rows),
              "  one row per sequence": lambda: decoding_residuals(coded, first_labels, w_sum, rows),
              "margin kernel (one pass)": lambda: margin_mass(X, theta_bar, rows),
              "  mass only above 1 − η": lambda: margin_mass(X, theta_bar, rows, floor=floor),
              "  and from the codes": lambda: margin_mass(coded, theta_bar, rows, floor=floor),
              "coding the tokens": lambda: block_codes(X, codes),
              "phase 1 token sums": lambda: token_sums(X, Y, rows),
              "NumPy labelling of the block": lambda: numpy_label_blocks(X, teacher.thetas, teacher.ws, out)}
    costs = {}
    for name, run in passes.items():
        run()  # compile or load
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            best = min(best, time.perf_counter() - start)
        costs[name] = 1e6 * best / len(X)
    return costs


def phase_seconds(report) -> dict:
    """Seconds of every phase of a SculptLearner report, and of the two steps of phase 3, by name."""
    seconds = {"crude_sum": report.crude_sum.seconds}
    for body in report.sculpt:
        seconds[f"sculpt ({body.rule})"] = body.seconds
    seconds["refined_sum"] = report.refined_sum.seconds
    for step in report.refined_sum.steps:
        seconds[f"  {step.name}"] = step.seconds
    for name in ("span", "net", "selection"):
        seconds[name] = getattr(report, name).seconds
    return seconds


def timed_fit(X, Y):
    """Wall seconds of one fit, the phases' seconds and the fit's figures (route, rows, the refit's iterations and
    pools: each pool after the first is one more pass over the data)."""
    learner = SculptLearner(HEADS, search=SearchSettings(refine="none"), random_state=0)
    start = time.perf_counter()
    learner.fit(X, Y)
    wall = time.perf_counter() - start
    report = learner.report_
    seconds = phase_seconds(report)
    phases = sum(value for name, value in seconds.items() if not name.startswith(" "))
    seconds["outside the phases"] = wall - phases
    alternating = next(step for step in report.refined_sum.steps if isinstance(step, AlternatingRefit))
    figures = {"route": str(report.route), "accepted rows": [body.accepted_rows for body in report.sculpt],
               "refit iterations": alternating.iterations, "refit pools drawn": alternating.rounds}
    return wall, seconds, figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n₁ = 50 000, n₂ = 150 000, 2 rounds")
    parser.add_argument("--small", type=int, default=None, help="n₁ (default 100 000)")
    parser.add_argument("--large", type=int, default=None, help="n₂ (default 400 000)")
    parser.add_argument("--repeats", type=int, default=None, help="rounds (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="the teacher's seed")
    parser.add_argument("--threads", type=int, default=1, help="Numba and BLAS threads (default 1: per core)")
    parser.add_argument("--kernels", action="store_true", help="also time each kernel's pass over one block")
    args = parser.parse_args()
    small = args.small or (50_000 if args.quick else 100_000)
    large = args.large or (150_000 if args.quick else 400_000)
    repeats = args.repeats or (2 if args.quick else 3)
    if not 0 < small < large:
        parser.error(f"expected 0 < --small < --large, received {small} and {large}")
    numba.set_num_threads(args.threads)

    teacher = sample_teacher(HEADS, DIM, rng=seeded_rng(20_251, HEADS, args.seed))
    data_rng = seeded_rng(20_251, HEADS, args.seed, "data")
    X = data_rng.choice(np.array([-1.0, 1.0]), size=(large, LENGTH, DIM))
    Y = teacher.predict(X)
    extra = X[small:]
    if not np.allclose(numpy_label(extra[:1000], teacher.thetas, teacher.ws), Y[small:small + 1000]):
        raise AssertionError("the NumPy labelling does not reproduce the teacher's labels")
    print(f"m = {HEADS}, d = {DIM}, k = {LENGTH}, n₁ = {small:,}, n₂ = {large:,}, {repeats} rounds, "
          f"{args.threads} thread(s); costs per sequence are marginal: (n₂ − n₁) = {large - small:,} sequences")

    walls = {small: [], large: []}
    phases = {small: {}, large: {}}
    figures = {}
    labelling, labelling_blocks = [], []
    out = np.zeros_like(extra)  # written once: the blockwise labelling's output is warm memory
    with threadpool_limits(limits=args.threads, user_api="blas"):
        timed_fit(X[:1000], Y[:1000])  # warm up: compile or load the kernels
        for _ in with_progress(range(repeats), "rounds", unit="round"):
            for n in (small, large):
                wall, seconds, figures[n] = timed_fit(X[:n], Y[:n])
                walls[n].append(wall)
                for name, value in seconds.items():
                    phases[n].setdefault(name, []).append(value)
            start = time.perf_counter()
            numpy_label(extra, teacher.thetas, teacher.ws)
            labelling.append(time.perf_counter() - start)
            start = time.perf_counter()
            numpy_label_blocks(extra, teacher.thetas, teacher.ws, out)
            labelling_blocks.append(time.perf_counter() - start)

    def per_sequence(large_seconds, small_seconds):
        return 1e6 * (large_seconds - small_seconds) / (large - small)

    learner_us = per_sequence(min(walls[large]), min(walls[small]))
    whole_us = 1e6 * min(labelling) / (large - small)
    label_us = 1e6 * min(labelling_blocks) / (large - small)
    print(f"fits at n₁: {figures[small]}; at n₂: {figures[large]}")
    print(f"best fit wall time: {min(walls[small]):.2f} s at n₁, {min(walls[large]):.2f} s at n₂")
    print()
    print(f"{'marginal cost per sequence':<30} {'µs':>8} {'× labelling':>12}")
    print(f"{'SculptLearner.fit (wall)':<30} {learner_us:8.2f} {learner_us / label_us:12.2f}")
    print(f"{'NumPy labelling, by block':<30} {label_us:8.2f} {1.0:12.2f}")
    print(f"{'NumPy labelling, whole array':<30} {whole_us:8.2f} {whole_us / label_us:12.2f}")
    print()
    print("per phase (best per phase over the rounds):")
    for name in phases[large]:
        phase_us = per_sequence(min(phases[large][name]), min(phases[small].get(name, [0.0])))
        print(f"{name:<30} {phase_us:8.2f} {phase_us / label_us:12.2f}")

    if args.kernels:
        with threadpool_limits(limits=args.threads, user_api="blas"):
            costs = kernel_costs(X[:LABEL_BLOCK], Y[:LABEL_BLOCK], teacher)
        label_block = costs["NumPy labelling of the block"]
        print()
        print(f"one block of {min(LABEL_BLOCK, large):,} sequences, best of 5:")
        for name, value in costs.items():
            print(f"{name:<30} {value:8.2f} {value / label_block:12.2f}")


if __name__ == "__main__":
    main()
