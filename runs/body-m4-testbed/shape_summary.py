"""The body at m = 4 by token dimension d: its span and how far its own estimate falls short, per shape.

Reads the test bed's store summaries (``testbed.py --summary``), one row per teacher: the span K* read from all
the rows it found (phases 1–4 as frozen) and the median subsample estimate the refusal reads.  Per (m, d): the
teachers, the span's median with a distribution-free interval for it (order statistics, coverage ≥ 0.9 where
the teachers allow, else the range and its coverage), the range, and the ratio estimate / span (1: the
estimate sees the error; well below 1: a bias every subsample shares, which no resampling refusal can see).

    python runs/body-m4-testbed/shape_summary.py --report FILE.jsonl [...]
"""

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).parent))
from testbed import LENGTH  # noqa: E402

COVERAGE = 0.9


def median_interval(values: np.ndarray) -> tuple[float, float, float]:
    """The narrowest order-statistic interval (x_(r), x_(n+1−r)) for the median with coverage ≥ 0.9
    (Binomial(n, 1/2)), or the range when none is; (low, high, its coverage)."""
    x, n = np.sort(values), len(values)
    best = (x[0], x[-1], 1.0 - 2.0 * 0.5**n)
    for r in range(2, n // 2 + 1):
        coverage = stats.binom.cdf(n - r, n, 0.5) - stats.binom.cdf(r - 1, n, 0.5)
        if coverage < COVERAGE:
            break
        best = (x[r - 1], x[n - r], coverage)
    return best


def report(paths: list[str]) -> None:
    shapes = defaultdict(list)
    for path in paths:
        for line in open(path):
            row = json.loads(line)
            shapes[(row["heads"], row.get("dim", 12))].append(row)
    print("| m | d | map | teachers | span: median | interval (coverage) | range | estimate / span: median | range |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for (heads, dim), rows in sorted(shapes.items()):
        span = np.array([r["body_span_distance"] for r in rows])
        ratio = np.array([r["body_median"] / r["body_span_distance"] for r in rows])
        low, high, coverage = median_interval(span)
        residual = f"{(heads - 1) * (LENGTH - 1)} → {dim - LENGTH + 1}"
        teachers = ", ".join(str(seed) for seed in sorted(r["seed"] for r in rows))
        print(f"| {heads} | {dim} | {residual} | {teachers} | {np.median(span):.3f} | "
              f"[{low:.3f}, {high:.3f}] ({coverage:.2f}) | {span.min():.3f}–{span.max():.3f} | "
              f"{np.median(ratio):.2f} | {ratio.min():.2f}–{ratio.max():.2f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--report", nargs="+", required=True, help="store summaries (testbed.py --summary)")
    report(parser.parse_args().report)


if __name__ == "__main__":
    main()
