"""How often a draw of the random family passes its non-degeneracy conditions, per m, at d = 12.

    python runs/samples-to-eps/teacher_draws.py [--heads 8 16 24 32] [--draws 2000] [--seeds 5000 ... 5009]

The random family (``sample_teacher``) rejects draws until the heads' Gram ratio is ≥ 0.2, κ(W_Σ) ≤ 20 and every
head matters, and refuses after 1000 tries.  For each m this prints, over ``--draws`` raw draws (the same law
as the sampler's, drawn with every condition switched off, seed 0): the median and 90th percentile of the Gram
ratio, the share of draws at or above its floor, the share passing every condition; then, for each of
``--seeds``, whether the family returns a teacher (as ``plant_instance`` draws it) or refuses.
"""
import argparse

import numpy as np

from mhalearn.attention import nondegeneracy, sample_teacher
from mhalearn.attention.teachers import DEFAULT_GRAM_FLOOR
from mhalearn.evaluation import plant_instance

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--heads", type=int, nargs="+", default=[8, 16, 24, 32])
parser.add_argument("--dim", type=int, default=12)
parser.add_argument("--draws", type=int, default=2000)
parser.add_argument("--seeds", type=int, nargs="+", default=list(range(5000, 5010)))
args = parser.parse_args()

print("| m | d | draws | Gram ratio: median | 90th percentile | draws with Gram ratio ≥ floor | draws passing every "
      "condition | seeds the family refuses |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for heads in args.heads:
    rng = np.random.default_rng(0)
    reports = [nondegeneracy(sample_teacher(heads, args.dim, rng=rng, max_tries=1, gram_floor=0.0,
                                            condition_ceiling=np.inf, w_floor=0.0))
               for _ in range(args.draws)]
    gram = np.array([report.gram_ratio for report in reports])
    refused = []
    for seed in args.seeds:
        try:
            plant_instance(heads=heads, dim=args.dim, length=4, samples=1, family="random", noise=0.0, seed=seed)
        except ValueError:
            refused.append(seed)
    print(f"| {heads} | {args.dim} | {args.draws} | {np.median(gram):.3f} | {np.quantile(gram, 0.9):.3f} | "
          f"{np.mean(gram >= DEFAULT_GRAM_FLOOR):.2%} | {np.mean([report.ok for report in reports]):.2%} | "
          f"{', '.join(map(str, refused)) or 'none'} of {len(args.seeds)} |")
