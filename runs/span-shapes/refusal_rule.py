"""Which figure of the span-error estimate the body's refusal should compare with 0.15, on development fits.

For each fit kept by ``span_shapes.py --dump`` (K*'s slabs, the kept rows,
the span read and the teacher) — and, with ``--thin``, for the same fit
read again from a random share of its rows (the trimmed hull of
:func:`~mhalearn.learners.chen_li.phase4_span.trimmed_affine_hull` at the
learner's defaults, its span, its own error), which gives spans farther off
from the same teachers — draws the estimate's 24 subsamples ``--draws``
times (:func:`~mhalearn.learners.chen_li.phase4_span.subsample_span_distances`)
and reads, per draw, the median (level 0.5) and the 90th percentile (level
0.9) of the design-scaled distances.  Each candidate rule refuses or accepts
every draw; the table gives per rule the expected number of

- false refusals: spans ≤ ``--target`` (0.15) refused (the fit falls back to the moment route),
- false acceptances: spans > ``--far`` (0.2) accepted (the net is searched around a far span),
- grey acceptances: spans in (target, far] accepted,

and the criterion, fixed before any fit was read here or held out
(docs/decisions/span-refusal.md): the least cost, a false refusal counting 1
and a false acceptance 3 (a refused body costs the fit the moment route's
span, 0.05–0.1 at these shapes; an accepted far span costs a net around it,
and with ``span_route="body"`` the fit), ties broken by the fewest grey
acceptances.  Reads only the dumps; fits nothing.

    python runs/span-shapes/refusal_rule.py runs/span-shapes/dev-slabs runs/span-shapes/dev2-slabs \
        runs/span-shapes/dev3-slabs --thin 1 0.5 0.3 --draws 5
"""

import argparse
import glob
import math
import os
import sys
from pathlib import Path

import numpy as np

from mhalearn.learners.chen_li.phase4_span import (
    scaled_subsample_distances,
    span_basis,
    span_error_quantile,
    trimmed_affine_hull,
)
from mhalearn.learners.chen_li.settings import BodySettings
from mhalearn.learners.chen_li.slabs import SlabSystem
from mhalearn.learners.moment_route import sine_distance

sys.path[:0] = [str(Path(__file__).resolve().parents[2] / "bench")]
from _common import markdown_table  # noqa: E402

#: The candidate rules: name -> refuses(point = level-0.5 figure, bound = level-0.9 figure, target).
RULES = {
    "level 0.9 > 0.15 (main)": lambda point, bound, target: bound > target,
    "level 0.75 > 0.15": None,  # read from its own quantile below
    "level 0.5 > 0.15 (point)": lambda point, bound, target: point > target,
    "point > 0.15 or level 0.9 > 0.2": lambda point, bound, target: point > target or bound > 4 / 3 * target,
    "point > 0.15 or level 0.9 > 0.25": lambda point, bound, target: point > target or bound > 5 / 3 * target,
}


def load(path: str):
    kept = np.load(path)
    slabs = SlabSystem(kept["E"], kept["b"], kept["t"], np.zeros((0, kept["E"].shape[1])), np.zeros(0),
                       kept["slab_row"], np.zeros(0, int))
    return slabs, kept["kept"].astype(int), kept["basis"], kept["thetas"]


def variants(path: str, shares, rng):
    """(label, slabs, kept rows, basis, truth) for the fit and for each share of its rows read again."""
    slabs, rows, basis, thetas = load(path)
    heads, settings = len(thetas), BodySettings()
    for share in shares:
        if share >= 1.0:
            yield f"{Path(path).stem}", slabs, rows, basis, sine_distance(basis, thetas)
            continue
        candidates = np.unique(slabs.slab_row)
        drawn = np.sort(rng.choice(candidates, max(int(share * len(candidates)), 1), replace=False))
        part = slabs.of_rows(drawn)
        dim = int(round(math.sqrt(part.E.shape[1])))
        if part.equalities < settings.equalities_needed(dim):
            continue  # the body refuses it before any estimate ("too few equalities")
        centre, long_directions, _, kept, _ = trimmed_affine_hull(part, heads, trim=settings.hull_trim,
                                                                  core=settings.hull_core)
        reading = span_basis(centre, long_directions, heads)
        yield f"{Path(path).stem} ×{share:g}", part, kept, reading, sine_distance(reading, thetas)


def figures(slabs, rows, basis, heads, draws, rng) -> np.ndarray:
    """Per draw: the level-0.5, 0.75 and 0.9 figures of the design-scaled subsample distances."""
    out = []
    for _ in range(draws):
        scaled = scaled_subsample_distances(slabs, rows, basis, heads, resamples=24, rng=rng)
        out.append([span_error_quantile(scaled, level) for level in (0.5, 0.75, 0.9)])
    return np.array(out)


def refusals(rule: str, table: np.ndarray, target: float) -> np.ndarray:
    """Whether ``rule`` refuses each draw (rows of ``table``: level 0.5, 0.75, 0.9)."""
    if RULES[rule] is None:
        return table[:, 1] > target
    return np.array([RULES[rule](point, bound, target) for point, _, bound in table])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="+", help="directories of span_shapes.py --dump files (development)")
    parser.add_argument("--thin", type=float, nargs="+", default=[1.0], help="shares of each fit's rows to read")
    parser.add_argument("--draws", type=int, default=5, help="draws of the 24 subsamples per fit")
    parser.add_argument("--target", type=float, default=0.15)
    parser.add_argument("--far", type=float, default=0.2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    paths = [p for directory in args.directories for p in sorted(glob.glob(os.path.join(directory, "*.npz")))]
    lines, tallies = [], {rule: np.zeros(3) for rule in RULES}
    for path in paths:
        for label, slabs, rows, basis, truth in variants(path, args.thin, rng):
            table = figures(slabs, rows, basis, len(load(path)[3]), args.draws, rng)
            shares = {rule: float(np.mean(refusals(rule, table, args.target))) for rule in RULES}
            lines.append([label, len(rows), f"{truth:.3f}", *(f"{np.median(table[:, j]):.3f} "
                                                              f"({np.median(table[:, j]) / truth:.2f})"
                                                              for j in range(3)),
                          *(f"{shares[rule]:.1f}" for rule in RULES)])
            for rule, share in shares.items():
                if truth <= args.target:
                    tallies[rule][0] += share
                elif truth > args.far:
                    tallies[rule][1] += 1.0 - share
                else:
                    tallies[rule][2] += 1.0 - share
    print(markdown_table(("fit", "kept rows", "true error", "level 0.5 (/ true)", "level 0.75 (/ true)",
                          "level 0.9 (/ true)", *(f"refused: {rule}" for rule in RULES)), lines))
    truths = [float(line[2]) for line in lines]
    print(f"\nfits: {len(lines)}; spans ≤ {args.target}: {sum(t <= args.target for t in truths)}, "
          f"in ({args.target}, {args.far}]: {sum(args.target < t <= args.far for t in truths)}, "
          f"> {args.far}: {sum(t > args.far for t in truths)}; {args.draws} draws of 24 subsamples each\n")
    print(markdown_table(("rule", f"false refusals (≤ {args.target})", f"false acceptances (> {args.far})",
                          f"grey acceptances ({args.target}, {args.far}]", "cost (1 × refusals + 3 × acceptances)"),
                         [[rule, *(f"{value:.1f}" for value in tally), f"{tally[0] + 3 * tally[1]:.1f}"]
                          for rule, tally in tallies.items()]))


if __name__ == "__main__":
    main()
