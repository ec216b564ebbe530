"""A refusal on halves, measured: does the span move when K* reads only its better-decoded half, beyond
what random halves move it?

The half of K*'s kept rows (after the trimmed hull) with the smallest decoding residual (on a test bed
store) or the narrowest slabs (on span-shapes' slab dumps, which keep no residual), of the size of the
estimate's subsamples, read alone; its span's distance from all kept rows' span, beside the distances of
the estimate's 24 random subsamples (``rank``: the share of them nearer).

    python runs/body-m4-testbed/halves.py /work/testbed/m4-seed2-1e9.npz
    python runs/body-m4-testbed/halves.py dumps 'runs/span-shapes/*-slabs/*.npz'
"""
import glob
import sys
from pathlib import Path

import numpy as np

from mhalearn.evaluation.observer import span_distance
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.phase4_span import (
    read_affine_hull,
    span_basis,
    subsample_rows,
    subsample_span_distances,
    trimmed_affine_hull,
)
from mhalearn.learners.chen_li.slabs import SlabSystem, kstar_slab_rule, slab_constraints
from mhalearn.learners.moment_route import sine_distance

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load  # noqa: E402


def tight_half_check(slabs, heads, row_score, settings, rng):
    centre, long, info, kept, _ = trimmed_affine_hull(slabs, heads, trim=settings.hull_trim, core=settings.hull_core)
    basis = span_basis(centre, long, heads)
    equations = np.bincount(slabs.slab_row, minlength=slabs.row_count()).astype(float)
    size = subsample_rows(kept, equations, slabs.E.shape[1])
    tight = np.sort(kept[np.argsort(row_score[kept], kind="stable")[:size]])
    c2, l2, i2 = read_affine_hull(slabs, heads, slabs.row_weights(tight))
    d = sine_distance(span_basis(c2, l2, heads), basis)
    spread = i2["inverse_trace"] - info["inverse_trace"]
    factor = info["inverse_trace"] / spread if spread > 0 and i2["rank"] == info["rank"] else np.inf
    dist, factors, _ = subsample_span_distances(slabs, kept, basis, heads, resamples=24, rng=rng, full=info)
    counted = factors > 0
    scaled = dist[counted] * np.sqrt(factors[counted])
    return basis, d, d * np.sqrt(factor), dist, np.median(scaled)


def testbed(path):
    stored, oracle = load(path)
    rows, settings = stored.rows, BodySettings()
    rule = kstar_slab_rule(rows, settings)
    slabs = slab_constraints(rows, **rule, halfspace_rows=0)
    basis, d, sd, dist, med = tight_half_check(slabs, stored.heads, rows.residual, settings, np.random.default_rng(0))
    print(f"{path}: true {span_distance(basis, oracle.teacher):.3f} median {med:.3f} tight-half d {d:.3f} "
          f"scaled {sd:.3f} random q50 {np.median(dist):.3f} q90 {np.quantile(dist, 0.9):.3f} "
          f"rank {np.mean(dist < d):.2f}")


def dumps(patterns):
    for path in sorted(p for pattern in patterns for p in glob.glob(pattern)):
        z = np.load(path)
        slabs = SlabSystem(E=z["E"], b=z["b"], t=z["t"], H=np.zeros((0, z["E"].shape[1])), g=np.zeros(0),
                           slab_row=z["slab_row"], halfspace_row=np.zeros(0, dtype=np.int64))
        width = np.zeros(slabs.row_count())
        np.maximum.at(width, slabs.slab_row, slabs.t)
        thetas = z["thetas"]
        basis, d, sd, dist, med = tight_half_check(slabs, len(thetas), width, BodySettings(), np.random.default_rng(0))
        print(f"{path.split('/')[-1]:34s} true {sine_distance(basis, thetas):.3f} median {med:.3f} "
              f"tight-half d {d:.3f} scaled {sd:.3f} random q50 {np.median(dist):.3f} "
              f"q90 {np.quantile(dist, 0.9):.3f} rank {np.mean(dist < d):.2f}")


if __name__ == "__main__":
    if sys.argv[1] == "dumps":
        dumps(sys.argv[2:])
    else:
        for p in sys.argv[1:]:
            testbed(p)
