"""The refusal on K*'s spectral gap: each reading's gap and true span error, and the cost of each ``min_gap``.

Readings: phase 4 (``read_span``, the body's defaults but ``min_gap`` off) on the committed slab dumps of
``runs/span-shapes/*-slabs/`` (m = 2), and on test bed stores (``testbed.py``): K* from the first
``max_rows`` rows found (the body before this change) and from all of them.  Cost of a rule, as
runs/span-shapes/refusal_rule.py counts it: a refused span ≤ 0.15 costs 1, an accepted span > 0.2 costs 3;
a rule refuses when the median rule (``max_span_error``) or the bound (``max_span_bound``) does, or when the
gap is below ``min_gap``.

    python runs/body-m4-testbed/gap_rule.py --dumps 'runs/span-shapes/dev*-slabs/*.npz' \\
        --stores /work/testbed/m4-seed2-1e9.npz --out runs/body-m4-testbed/gap-dev.jsonl
    python runs/body-m4-testbed/gap_rule.py --report runs/body-m4-testbed/gap-dev.jsonl
"""

import argparse
import glob
import json
import sys
from pathlib import Path

import numpy as np

from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import SlabSystem, kstar_slab_rule, slab_constraints
from mhalearn.learners.moment_route import sine_distance

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load  # noqa: E402

#: ``min_gap`` off: the readings' own gaps are recorded, the rule applied by ``--report``.
NO_GAP = BodySettings(min_gap=1.0)
GAPS = (1.0, 1.5, 1.75, 2.0, 2.25, 2.5)


def reading_row(name: str, slabs: SlabSystem, thetas: np.ndarray, rows: int | None = None) -> dict:
    heads = len(thetas)
    reading = read_span(slabs, heads, NO_GAP, np.random.default_rng(0))
    truth = None if reading.basis is None else sine_distance(reading.basis, thetas.reshape(heads, -1))
    return {"reading": name, "heads": heads, "rows": rows, "equalities": int(slabs.equalities),
            "span_distance": truth, "median_error": reading.median_error,
            "estimated_error": reading.estimated_error, "spectral_gap": reading.spectral_gap,
            "refused_without_gap": reading.refused}


def dump_rows(pattern: str):
    for path in sorted(glob.glob(pattern)):
        z = np.load(path)
        slabs = SlabSystem(E=z["E"], b=z["b"], t=z["t"], H=np.zeros((0, z["E"].shape[1])), g=np.zeros(0),
                           slab_row=z["slab_row"], halfspace_row=np.zeros(0, dtype=np.int64))
        yield reading_row(f"{Path(path).parent.name}/{Path(path).name}", slabs, z["thetas"])


def store_rows(path: str, settings=BodySettings()):
    stored, oracle = load(path)
    thetas = oracle.teacher.thetas
    name = f"m{stored.heads}-seed{stored.seed}-n{stored.samples:.0e}"
    subsets = {"first max_rows": np.arange(min(len(stored.rows), settings.max_rows)),
               "all": np.arange(len(stored.rows))}
    for label, index in subsets.items():
        rows = stored.rows.subset(index)
        slabs = slab_constraints(rows, **kstar_slab_rule(rows, settings), halfspace_rows=0)
        yield reading_row(f"{name} {label}", slabs, thetas, len(rows))


def report(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    print("| reading | m | rows | span | median | gap | refused without the gap |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        span = "—" if r["span_distance"] is None else f"{r['span_distance']:.3f}"
        median = "—" if r["median_error"] is None else f"{r['median_error']:.3f}"
        gap = "—" if r["spectral_gap"] is None else f"{r['spectral_gap']:.2f}"
        print(f"| {r['reading']} | {r['heads']} | {r['rows'] or '—'} | {span} | {median} | {gap} | "
              f"{'yes' if r['refused_without_gap'] else 'no'} |")
    print("\n| min_gap | false refusals (≤ 0.15) | false acceptances (> 0.2) | accepted in (0.15, 0.2] | cost |\n"
          "| --- | --- | --- | --- | --- |")
    for gap in GAPS:
        false_refusals = false_acceptances = middle = 0
        for r in rows:
            if r["span_distance"] is None:
                continue
            refused = bool(r["refused_without_gap"]) or (r["heads"] > 1 and r["spectral_gap"] < gap)
            false_refusals += refused and r["span_distance"] <= 0.15
            false_acceptances += (not refused) and r["span_distance"] > 0.2
            middle += (not refused) and 0.15 < r["span_distance"] <= 0.2
        cost = false_refusals + 3 * false_acceptances
        print(f"| {gap} | {false_refusals} | {false_acceptances} | {middle} | {cost} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", nargs="*", default=[], help="glob patterns of span-shapes slab dumps")
    parser.add_argument("--stores", nargs="*", default=[], help="test bed stores (testbed.py)")
    parser.add_argument("--out", help="append one JSON line per reading here")
    parser.add_argument("--report", help="print the tables of a jsonl written with --out")
    args = parser.parse_args()
    if args.report:
        report(args.report)
        return
    with open(args.out, "a") as out:
        for row in [*(r for p in args.dumps for r in dump_rows(p)), *(r for p in args.stores for r in store_rows(p))]:
            print(json.dumps(row), file=out, flush=True)
            print(row["reading"], row["span_distance"], row["spectral_gap"], file=sys.stderr)


if __name__ == "__main__":
    main()
