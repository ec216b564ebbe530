"""The refusal on K*'s spectral gap: each reading's gap and true span error, and the cost of each ``min_gap``.

Readings: phase 4 (``read_span``, the body's defaults but ``min_gap`` off) on the committed slab dumps of
``runs/span-shapes/*-slabs/`` (m = 2), and on test bed stores (``testbed.py``): K* from the first
``max_rows`` rows found (the body before this change) and from all of them.  Cost of a rule, as
runs/span-shapes/refusal_rule.py counts it: a refused span ≤ 0.15 costs 1, an accepted span > 0.2 costs 3
(``--strict``: an accepted span > 0.15 costs 3, the line issue 75 draws); a rule refuses when the median rule
(``max_span_error``) or the bound (``max_span_bound``) does, or when the gap is below ``min_gap``.
``--bodies`` reads the committed ``sculpt-vs-m`` rows of result databases as readings (their stored gap,
span, median and bound, the median and bound rules applied with the body's defaults); ``--report`` with
several files reads them as one set and prints the interval of ``min_gap`` of least cost and its geometric
midpoint.

    python runs/body-m4-testbed/gap_rule.py --dumps 'runs/span-shapes/dev*-slabs/*.npz' \\
        --stores /work/testbed/m4-seed2-1e9.npz --out runs/body-m4-testbed/gap-dev.jsonl
    python runs/body-m4-testbed/gap_rule.py --report runs/body-m4-testbed/gap-dev.jsonl
    python runs/body-m4-testbed/gap_rule.py --bodies runs/sculpt-vs-m/*.db --out FILE
    python runs/body-m4-testbed/gap_rule.py --strict --report FILE ...
    python runs/body-m4-testbed/gap_rule.py --excess 0.066 --report FILE ...
"""

import argparse
import glob
import json
import math
import sys
from pathlib import Path

import numpy as np

from mhalearn.experiments.store import ResultStore
from mhalearn.learners.chen_li import BodySettings
from mhalearn.learners.chen_li.phase4_span import read_span
from mhalearn.learners.chen_li.slabs import SlabSystem, kstar_slab_rule, slab_constraints
from mhalearn.learners.moment_route import sine_distance

sys.path.insert(0, str(Path(__file__).parent))
from stored_rows import load, reading_cells  # noqa: E402

#: ``min_gap`` off: the readings' own gaps are recorded, the rule applied by ``--report``.
NO_GAP = BodySettings(min_gap=1.0)
GAPS = (1.0, 1.5, 1.75, 1.96, 2.0, 2.25, 2.5)


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
    name = stored.label
    subsets = {"first max_rows": np.arange(min(len(stored.rows), settings.max_rows)),
               "all": np.arange(len(stored.rows))}
    for label, index in subsets.items():
        rows = stored.rows.subset(index)
        slabs = slab_constraints(rows, **kstar_slab_rule(rows, settings), halfspace_rows=0)
        yield reading_row(f"{name} {label}", slabs, thetas, len(rows))


def body_rows(path: str, settings=BodySettings()):
    """The committed ``sculpt-vs-m`` bodies of m ≥ 2 with a span and a gap read, as readings.

    A body is refused without the gap when its row says a rule other than the gap refused it (rows that
    predate ``refused_by`` name no rule: their refusal is kept), or when its stored median or bound is past
    the body's thresholds today.
    """
    with ResultStore(path, readonly=True) as store:
        rows = [row for row in store.rows("sculpt-vs-m")
                if row["heads"] >= 2 and row.get("span_distance") is not None and row.get("spectral_gap")]
    for row in rows:
        by_other_rule = bool(row["refused"]) and row.get("refused_by") != "gap"
        past = [f"{name} {row[field]:.3f} > {limit}" for name, field, limit in (
            ("median", "median_error", settings.max_span_error), ("bound", "estimated_error", settings.max_span_bound))
            if row.get(field) is not None and row[field] > limit]
        refused = (row["refused"] if by_other_rule else None) or ("; ".join(past) or None)
        name = (f"{Path(path).name} m{row['heads']} ({row['dim']}, {row['length']}) seed {row['seed']} "
                f"n {row['samples']:.0e}")
        yield {"reading": name, "heads": row["heads"], "rows": row.get("agreement_rows"),
               "equalities": None, "span_distance": row["span_distance"], "median_error": row.get("median_error"),
               "estimated_error": row.get("estimated_error"), "spectral_gap": row["spectral_gap"],
               "refused_without_gap": refused}


def refused_at(reading: dict, gap: float) -> bool:
    return bool(reading["refused_without_gap"]) or (reading["heads"] > 1 and reading["spectral_gap"] < gap)


def cost(readings: list[dict], gap: float, far: float) -> tuple[int, int, int]:
    """False refusals (span ≤ 0.15), false acceptances (span > ``far``) and the rule's cost at ``gap``."""
    false_refusals = sum(refused_at(r, gap) and r["span_distance"] <= 0.15 for r in readings)
    false_acceptances = sum(not refused_at(r, gap) and r["span_distance"] > far for r in readings)
    return false_refusals, false_acceptances, false_refusals + 3 * false_acceptances


def least_cost_interval(readings: list[dict], far: float) -> tuple[float, float, int]:
    """The interval (low, high] of ``min_gap`` whose cost is least: the cost only changes at a reading's gap."""
    gaps = sorted({r["spectral_gap"] for r in readings if r["heads"] > 1})
    edges = [0.0, *gaps, math.inf]
    # A threshold in (edges[i], edges[i + 1]] refuses exactly the readings with a gap ≤ edges[i].
    costs = [cost(readings, edges[i + 1], far)[2] for i in range(len(edges) - 1)]
    best = min(costs)
    first = costs.index(best)
    last = first
    while last + 1 < len(costs) and costs[last + 1] == best:
        last += 1
    return edges[first], edges[last + 1], best


def refused_by_excess(reading: dict, scale: float) -> bool:
    """The post-hoc lead of the m = 4 readings: refuse when median + ``scale``/(gap − 1) exceeds 0.15."""
    gap, median = reading["spectral_gap"], reading["median_error"]
    return bool(reading["refused_without_gap"]) or (reading["heads"] > 1 and (
        gap <= 1.0 or median + scale / (gap - 1.0) > 0.15))


def excess_report(readings: list[dict], scale: float, gap: float = BodySettings().min_gap) -> None:
    """Per m, the errors of the gap rule at ``gap`` beside those of the excess rule at ``scale``, over the
    readings with a median (the rule reads it)."""
    readings = [r for r in readings if r["median_error"] is not None]
    print(f"| m | readings with a median | gap rule ({gap}): false refusals (≤ 0.15) | false acceptances (> 0.15) | "
          f"median + {scale}/(gap − 1) > 0.15: false refusals | false acceptances |")
    print("| --- | --- | --- | --- | --- | --- |")
    for heads in sorted({r["heads"] for r in readings}):
        of_m = [r for r in readings if r["heads"] == heads]
        gap_errors = cost(of_m, gap, 0.15)[:2]
        excess = [refused_by_excess(r, scale) for r in of_m]
        near = [r["span_distance"] <= 0.15 for r in of_m]
        print(f"| {heads} | {len(of_m)} | {gap_errors[0]} | {gap_errors[1]} | "
              f"{sum(e and n for e, n in zip(excess, near))} | {sum(not e and not n for e, n in zip(excess, near))} |")


def report(paths: list[str], strict: bool = False, excess: float | None = None) -> None:
    rows = [json.loads(line) for path in paths for line in open(path)]
    read = [r for r in rows if r["span_distance"] is not None and r["spectral_gap"] is not None]
    if excess is not None:
        excess_report(read, excess)
        return
    print("| reading | m | rows | span | median | gap | refused without the gap |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['reading']} | {r['heads']} | {r['rows'] or '—'} | {reading_cells(r)} | "
              f"{'yes' if r['refused_without_gap'] else 'no'} |")
    far = 0.15 if strict else 0.2
    print(f"\n| min_gap | false refusals (≤ 0.15) | false acceptances (> {far}) | accepted in (0.15, 0.2] | cost |\n"
          "| --- | --- | --- | --- | --- |")
    for gap in GAPS:
        false_refusals, false_acceptances, total = cost(read, gap, far)
        middle = sum(not refused_at(r, gap) and 0.15 < r["span_distance"] <= 0.2 for r in read)
        print(f"| {gap} | {false_refusals} | {false_acceptances} | {middle} | {total} |")
    if strict:
        low, high, least = least_cost_interval(read, far)
        print(f"\nleast cost {least} for min_gap in ({low:.3f}, {high:.3f}]: geometric midpoint "
              f"{math.sqrt(low * high):.3f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", nargs="*", default=[], help="glob patterns of span-shapes slab dumps")
    parser.add_argument("--stores", nargs="*", default=[], help="test bed stores (testbed.py)")
    parser.add_argument("--bodies", nargs="*", default=[], help="result databases of sculpt-vs-m rows")
    parser.add_argument("--out", help="append one JSON line per reading here")
    parser.add_argument("--report", nargs="+", help="print the tables of the jsonl files written with --out")
    parser.add_argument("--strict", action="store_true", help="an accepted span > 0.15 costs 3 (not > 0.2)")
    parser.add_argument("--excess", type=float, help="with --report: the errors of the rule that refuses when "
                        "median + EXCESS/(gap − 1) > 0.15, per m, beside the gap rule's")
    args = parser.parse_args()
    if args.report:
        report(args.report, args.strict, args.excess)
        return
    with open(args.out, "a") as out:
        for row in [*(r for p in args.dumps for r in dump_rows(p)), *(r for p in args.stores for r in store_rows(p)),
                    *(r for p in args.bodies for r in body_rows(p))]:
            print(json.dumps(row), file=out, flush=True)
            print(row["reading"], row["span_distance"], row["spectral_gap"], file=sys.stderr)


if __name__ == "__main__":
    main()
