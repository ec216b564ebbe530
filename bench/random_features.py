"""Acceptance figures of random-feature attention (Fu, Guo, Bai & Mei; [design: random-features]).

Prints, from one run over several seeds (median):

1. correlation-relu target at n = 1024: test error of the identity-mean
   sampler over that of the zero-mean sampler (criterion: ≤ 1/2);
2. mean-linear target at n = 256: test error of random-feature attention
   over that of the random-feature MLP with the same number of trainable
   weights (criterion: ≤ 1/2);
3. a table of the median relative test error per model and target at a few n.

Settings are those of the full ``random-features`` experiment (d = 16,
N = 16 keys, M = 128 heads, inputs on the sphere, α by GCV), and every number
is one of its cells, computed here from scratch.

    python bench/random_features.py            # 5 seeds for the ratios, 3 for the table
    python bench/random_features.py --quick    # 3 seeds, table at n = 256 and 1024 only
"""

import argparse
import time

import numpy as np

from mhalearn.experiments import get_experiment
from mhalearn.experiments.random_features import MODEL_NAMES, run_random_features_cell
from mhalearn.random_features.targets import RANDOM_FEATURE_TARGETS

SETTING = dict({key: get_experiment("random-features").grid().table[key] for key in ("law", "dim", "keys", "heads")},
               kind="fit")


def errors(target: str, model: str, samples: int, seeds) -> np.ndarray:
    """Relative test errors of one (target, model, n) over ``seeds``."""
    return np.array([run_random_features_cell(dict(SETTING, target=target, model=model, samples=samples,
                                                   seed=seed))["test_error"] for seed in seeds])


def ratio_line(title: str, numerator: np.ndarray, denominator: np.ndarray, names: tuple[str, str]) -> str:
    ratio = np.median(numerator) / np.median(denominator)
    per_seed = np.median(numerator / denominator)
    verdict = "PASS" if ratio <= 0.5 else "FAIL"
    return (f"{title}\n"
            f"    {names[0]:>20}: median error {np.median(numerator):.4f}  (seeds: "
            f"{', '.join(f'{value:.4f}' for value in numerator)})\n"
            f"    {names[1]:>20}: median error {np.median(denominator):.4f}  (seeds: "
            f"{', '.join(f'{value:.4f}' for value in denominator)})\n"
            f"    ratio of medians {ratio:.3f}, median of per-seed ratios {per_seed:.3f}  "
            f"[criterion <= 0.5: {verdict}]")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 seeds, smaller table")
    args = parser.parse_args()
    ratio_seeds = range(3) if args.quick else range(5)
    table_seeds = range(2) if args.quick else range(3)
    table_samples = (256, 1024) if args.quick else (256, 1024, 4096)
    start = time.perf_counter()
    print(f"setting: {SETTING}, trainable weights per model = {SETTING['heads'] * (SETTING['dim'] + 1)}, "
          f"alpha by GCV; relative test error = sum (yhat - y)^2 / sum (y - mean y)^2 on 2000 fresh inputs")
    print()
    print(ratio_line("[1] correlation-relu, n = 1024: identity-mean / zero-mean attention",
                     errors("correlation-relu", "attention-identity", 1024, ratio_seeds),
                     errors("correlation-relu", "attention-zero", 1024, ratio_seeds),
                     ("attention-identity", "attention-zero")))
    mlp = errors("mean-linear", "mlp", 256, ratio_seeds)
    print(ratio_line("[2] mean-linear, n = 256: zero-mean attention / MLP (same parameter count)",
                     errors("mean-linear", "attention-zero", 256, ratio_seeds), mlp, ("attention-zero", "mlp")))
    print(ratio_line("    (the same with identity-mean attention)",
                     errors("mean-linear", "attention-identity", 256, ratio_seeds), mlp,
                     ("attention-identity", "mlp")))
    print()
    print(f"median relative test error over {len(table_seeds)} seeds")
    header = f"{'target':>17} {'n':>5} " + " ".join(f"{name:>19}" for name in MODEL_NAMES) + "  best"
    print(header)
    for target in RANDOM_FEATURE_TARGETS:
        for samples in table_samples:
            medians = [float(np.median(errors(target, name, samples, table_seeds))) for name in MODEL_NAMES]
            best = MODEL_NAMES[int(np.argmin(medians))]
            print(f"{target:>17} {samples:>5} " + " ".join(f"{value:>19.4f}" for value in medians) + f"  {best}",
                  flush=True)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
