"""Why the span-error estimate read high: the subsamples' factor, by the equations' count or by the rows' design.

For each fit kept by ``span_shapes.py --dump`` (the slabs of K*, the kept rows,
the span read and the teacher), draws the estimate's 24 subsamples
(:func:`~mhalearn.learners.chen_li.phase4_span.subsample_span_distances`) and
prints, beside the true span error (and its parts: the point's angle to the
true span and the long direction's), the median factor on squared distances
that each scaling gives — the Gaussian-design shortcut (N_h − p)/(N − N_h)
and the design's own T_N/(T_h − T_N) — and the median and 90th percentile of
the scaled distances over the true error under each.  Reads only the dumps;
fits nothing.

    python runs/span-shapes/why_high.py runs/span-shapes/dev-slabs runs/span-shapes/dev2-slabs
"""

import argparse
import glob
import os
import sys
from pathlib import Path

import numpy as np

from mhalearn.learners.chen_li.phase4_span import read_affine_hull, subsample_span_distances
from mhalearn.learners.chen_li.slabs import SlabSystem
from mhalearn.learners.moment_route import sine_distance

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "bench")]
from _common import markdown_table  # noqa: E402


def off_span(vector: np.ndarray, basis: np.ndarray) -> float:
    """sin of the angle between ``vector`` and the span of ``basis``'s rows (orthonormal)."""
    return float(np.linalg.norm(vector - basis.T @ (basis @ vector)) / np.linalg.norm(vector))


def fit_line(path: str, resamples: int) -> list:
    kept = np.load(path)
    slabs = SlabSystem(kept["E"], kept["b"], kept["t"], np.zeros((0, kept["E"].shape[1])), np.zeros(0),
                       kept["slab_row"], np.zeros(0, int))
    rows, basis, thetas = kept["kept"].astype(int), kept["basis"], kept["thetas"]
    heads, unknowns = len(thetas), slabs.E.shape[1]
    truth_basis = np.linalg.svd(thetas, full_matrices=False)[2][:heads]
    truth = sine_distance(basis, thetas)
    centre, long_directions, _ = read_affine_hull(slabs, heads, slabs.row_weights(rows))
    long_part = max((off_span(direction, truth_basis) for direction in long_directions), default=0.0)
    total = float(np.sum(np.bincount(slabs.slab_row, minlength=slabs.row_count())[rows]))
    seed = int(Path(path).stem.rsplit("-s", 1)[1])
    distances, design, drawn = subsample_span_distances(slabs, rows, basis, heads, resamples=resamples,
                                                        rng=np.random.default_rng(seed))
    shortcut = np.maximum(drawn - unknowns, 0.0) / np.maximum(total - drawn, 1.0)
    counted = design > 0
    by_shortcut, by_design = distances * np.sqrt(shortcut), distances[counted] * np.sqrt(design[counted])
    return [Path(path).stem, f"{total / unknowns:.1f}", f"{truth:.3f}", f"{off_span(centre, truth_basis):.3f}",
            f"{long_part:.3f}", f"{np.median(shortcut):.2f}", f"{np.median(design):.2f}",
            f"{np.median(by_shortcut) / truth:.2f}", f"{np.quantile(by_shortcut, 0.9) / truth:.2f}",
            f"{np.median(by_design) / truth:.2f}", f"{np.quantile(by_design, 0.9) / truth:.2f}"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", help="directories of span_shapes.py --dump files")
    parser.add_argument("--resamples", type=int, default=24)
    args = parser.parse_args()
    paths = [path for directory in args.directories for path in sorted(glob.glob(os.path.join(directory, "*.npz")))]
    lines = [fit_line(path, args.resamples) for path in paths]
    print(markdown_table(("fit", "N / p", "true error", "point's part", "long direction's part",
                          "shortcut factor", "design factor", "shortcut: median / true", "shortcut: q90 / true",
                          "design: median / true", "design: q90 / true"), lines))
    for column, name in ((7, "shortcut median"), (8, "shortcut q90"), (9, "design median"), (10, "design q90")):
        values = [float(line[column]) for line in lines]
        print(f"{name} / true: {min(values):.2f}–{max(values):.2f} (median {np.median(values):.2f})")


if __name__ == "__main__":
    main()
