"""The body's estimated span error against its true span error, over fits already run.

Reads JSON lines of fits against a planted teacher — by default those of
``runs/span-refusal/span_refusal.py`` (``runs/span-refusal/span_refusal.jsonl``, the m = 2 route
table), plus any files given (e.g. ``runs/sculpt-m3/sculpt_m3*.jsonl`` of
``runs/sculpt-m3/sculpt_m3.py``) — each with ``body_distance`` (the body's true span
error, sin of the largest principal angle), ``estimated_error`` (its
bootstrap estimate, phase 4) and ``route`` (the route whose span phases 5–6
used).  A fit *accepted* the body's span when ``route`` is ``"body"``:
taken alone, or chosen by phase 6 over the moment route's candidates (the
route rule, [decision: route-rule]).  A ``.csv`` file is read as the export
of the ``sculpt-vs-m`` experiment (``mhalearn export sculpt-vs-m``), whose
cells run the body alone: ``span_distance`` is its true span error and a
cell accepted the span when ``refused`` is empty.  Prints one line per fit with a body
span — the estimate, the truth, their ratio, whether the estimate is within
``--factor`` (3) of the truth either way, the route — then, over the
accepted fits, the share within that factor and the largest true error;
``--report`` prints only a table of those figures per set of fits (file,
m, K*'s slab rule).
Only reads: it runs no fit.

    python runs/span-refusal/span_calibration.py [FILE ...] [--no-default] [--factor 3] [--quick]
    python runs/span-refusal/span_calibration.py runs/sculpt-m3/sculpt_m3.jsonl runs/sculpt-vs-m/sculpt-vs-m.csv \
        --report   # per set
"""

import argparse
import csv
import os
import sys
from pathlib import Path

# the helpers the benchmarks share (bench/_common.py)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _common import load_jsonl, markdown_table  # noqa: E402

DEFAULT = "runs/span-refusal/span_refusal.jsonl"
#: Fields that name a fit's cell, printed when a row has them.
CELL = ("heads", "dim", "length", "samples", "seed")


def within(estimate: float, truth: float, factor: float) -> bool:
    """Whether ``estimate`` lies within ``factor`` of ``truth`` either way (truth/factor ≤ estimate ≤ truth·factor)."""
    return truth / factor <= estimate <= truth * factor


def body_cells(path):
    """The ok cells of a ``sculpt-vs-m`` export as fit rows: the body's span, its estimate, accepted or refused."""
    with open(path, newline="") as handle:
        for cell in csv.DictReader(handle):
            if cell["status"] != "ok" or not cell["estimated_error"]:
                continue
            yield {**{key: int(cell[key]) for key in CELL}, "body_distance": float(cell["span_distance"]),
                   "estimated_error": float(cell["estimated_error"]),
                   "route": "refused" if cell["refused"] else "body", "refused": cell["refused"] or None}


def fits_with_body_span(paths):
    """(file, row) for every row whose body read a span and an estimate (refused or not)."""
    for path in paths:
        for row in body_cells(path) if path.endswith(".csv") else load_jsonl(path):
            if row.get("body_distance") is not None and row.get("estimated_error") is not None:
                yield os.path.basename(path), row


def slab_rule(row) -> str:
    """K*'s slab rule where a row records it (``runs/sculpt-m3/sculpt_m3.py``: ``kstar_w_max``), else nothing."""
    if "kstar_w_max" in row:
        return ", K\\* raised" if row["kstar_w_max"] is not None else ", K\\* every token ≥ 0.02"
    return ""


def summary(rows, factor: float) -> dict:
    """Over the accepted fits: their count, how many estimates lie within ``factor``, the largest true error;
    and how many estimates lie within ``factor`` over every fit with a body span."""
    accepted = [row for _, row in rows if row["route"] == "body"]
    return {"accepted": len(accepted),
            "within": sum(within(row["estimated_error"], row["body_distance"], factor) for row in accepted),
            "largest_true_error": max((row["body_distance"] for row in accepted), default=None),
            "within_all": sum(within(row["estimated_error"], row["body_distance"], factor) for _, row in rows)}


def error_text(value: float) -> str:
    """A span error in three decimals, or in scientific notation below 0.01."""
    return f"{value:.3f}" if value >= 0.01 else f"{value:.1e}"


def set_table(rows, factor: float) -> str:
    """One Markdown line per set of fits (file, m where rows give it, K*'s slab rule where they record it)."""
    groups = {}
    for name, row in rows:
        groups.setdefault((name, row.get("heads"), slab_rule(row)), []).append((name, row))
    lines = []
    for (name, heads, rule), group in groups.items():
        part = summary(group, factor)
        ratios = [row["estimated_error"] / row["body_distance"] for _, row in group if row["route"] == "body"]
        lines.append([f"`{name}`{'' if heads is None else f', m = {heads}'}{rule}", len(group), part["accepted"],
                      f"{part['within']}/{part['accepted']}",
                      f"{min(ratios):.2f}–{max(ratios):.2f}" if ratios else "—",
                      "—" if part["largest_true_error"] is None else error_text(part["largest_true_error"]),
                      f"{part['within_all']}/{len(group)}"])
    return markdown_table(("fits", "with a body span", "accepted", f"estimate within {factor:g}× (accepted)",
                           "estimated / true (accepted)", "largest true error accepted",
                           f"estimate within {factor:g}× (all)"), lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help=f"JSON lines files of fits, read after {DEFAULT}")
    parser.add_argument("--no-default", action="store_true", help=f"do not read {DEFAULT}")
    parser.add_argument("--factor", type=float, default=3.0, help="the estimate counts as right within this factor")
    parser.add_argument("--quick", action="store_true", help="accepted for `mhalearn bench --quick`: it only reads")
    parser.add_argument("--report", action="store_true", help="print only the table of each set of fits")
    args = parser.parse_args()
    paths = ([] if args.no_default else [DEFAULT]) + args.files
    rows = list(fits_with_body_span(paths))
    if args.report:
        print(set_table(rows, args.factor))
        return
    print("file | cell | true span error | estimated | estimated / true | within | route | accepted")
    for name, row in rows:
        cell = " ".join(f"{key}={row[key]}" for key in CELL if key in row)
        truth, estimate = row["body_distance"], row["estimated_error"]
        print(f"{name}{slab_rule(row)} | {cell} | {truth:.3f} | {estimate:.3f} | {estimate / truth:.2f} | "
              f"{'yes' if within(estimate, truth, args.factor) else 'NO'} | {row['route']}"
              f"{' (refused)' if row.get('refused') else ''} | {'yes' if row['route'] == 'body' else 'no'}")
    figures = summary(rows, args.factor)
    share = f"{figures['within'] / figures['accepted']:.0%}" if figures["accepted"] else "-"
    largest = "-" if figures["largest_true_error"] is None else f"{figures['largest_true_error']:.3f}"
    print(f"{len(rows)} fits with a body span, {figures['accepted']} accepted (route body); estimate within "
          f"{args.factor:g}x of the truth in {figures['within']}/{figures['accepted']} accepted ({share}); "
          f"largest true error of an accepted body span: {largest}; over all {len(rows)}: within "
          f"{args.factor:g}x in {figures['within_all']}")
    for label, chosen in (("accepted", [row for _, row in rows if row["route"] == "body"]),
                          ("all", [row for _, row in rows])):
        ratios = [row["estimated_error"] / row["body_distance"] for row in chosen]
        if ratios:
            print(f"estimated / true, {label}: {min(ratios):.2f}–{max(ratios):.2f}")


if __name__ == "__main__":
    main()
