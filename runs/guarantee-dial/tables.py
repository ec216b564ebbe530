"""Every table and figure of runs/guarantee-dial/ from its committed rows.

    python runs/guarantee-dial/tables.py [--out docs/figures]

Prints the Markdown tables of docs/learners_vs_m.md's "Where the guarantee matters" and of this
directory's README (n* along the dial for every learner, the body along the dial, the hard-teacher
search, where gradient descent's fits land), and writes ``samples-to-eps-dial.png`` and ``.txt`` into
``--out`` from the n* rows of every results file here (one per code version and sweep; the rows'
provenance columns name the code).
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from mhalearn.experiments.growth_laws import bounded_text
from mhalearn.experiments.hardness_dial import dial_table, markdown_dial_table, plot_dial
from mhalearn.experiments.sculpt_vs_m import span_or_one
from mhalearn.experiments.store import ResultStore

HERE = Path(__file__).resolve().parent


#: Cells another file holds again, computed at one code version: (file, learner) -> that file.  m2.db's moment
#: route (three cells of teacher 7100, its grid stopped for time) by moment-m2.db (the grid whole);
#: gradient.db's m = 3 cells at h = 0.9 and 1 (censored teachers probed to 10⁴) by gradient-1e5.db (to 10⁵).
RERUN = {("m2.db", "moment"): "moment-m2.db", ("gradient.db", "gradient"): "gradient-1e5.db"}


def _search_cell(row: dict) -> tuple:
    return (row["family"], row["learner"], row["dim"], row["length"], row["heads"], row["hardness"], row["seed"])


def search_rows() -> list[dict]:
    """The samples-to-eps rows of every .db here, a cell held again by its RERUN file taken from that file."""
    held_again = {key: {_search_cell(row) for row in rows(again, "samples-to-eps")} for key, again in RERUN.items()}
    return [row for path in sorted(HERE.glob("*.db")) for row in rows(path.name, "samples-to-eps")
            if _search_cell(row) not in held_again.get((path.name, row["learner"]), set())]


def rows(name: str, experiment: str) -> list[dict]:
    path = HERE / name
    if not path.is_file():
        return []
    with ResultStore(path, readonly=True) as store:
        return store.rows(experiment)


def body_table(body: list[dict], title: str = "The body (sculpt-vs-m) along the dial") -> None:
    print(f"\n{title}: per teacher, span distance (1 when refused), K*'s spectral gap, the paper's "
          "test error (no polish), agreement rows, whether the teacher is inside the conditions\n")
    print("| family | m | hardness | n | seed | inside | Gram ratio | span distance | refused | gap | test error |"
          " agreement rows | body seconds |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for row in sorted(body, key=lambda r: (r["family"], r["heads"], r["hardness"], r["samples"], r["seed"])):
        span = span_or_one(row)
        error = "–" if row.get("test_error") is None else f"{row['test_error']:.3g}"
        gap = "–" if row.get("spectral_gap") is None else f"{row['spectral_gap']:.2f}"
        print(f"| {row['family']} | {row['heads']} | {row['hardness']:g} | {row['samples']:.0e} | {row['seed']} | "
              f"{row['inside_conditions']} | {row['gram_ratio']:.3f} | {span:.3f} | {row.get('refused') or ''} | "
              f"{gap} | {error} | {row['agreement_rows']} | {row['body_seconds']:.0f} |")
    print("\nmedian span distance over teachers (a refusal counts as 1)\n")
    print("| family | m | hardness | n | teachers | inside | median span distance |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    groups: dict = {}
    for row in body:
        groups.setdefault((row["family"], row["heads"], row["hardness"], row["samples"]), []).append(row)
    for (family, heads, hardness, samples), mine in sorted(groups.items()):
        spans = [span_or_one(r) for r in mine]
        inside = sum(r["inside_conditions"] for r in mine)
        print(f"| {family} | {heads} | {hardness:g} | {samples:.0e} | {len(mine)} | {inside} "
              f"| {statistics.median(spans):.3f} |")


def _body_cell(row: dict) -> tuple:
    return row["family"], row["hardness"], row["heads"], row["samples"], row["seed"]


GUIDE_COLUMNS = tuple((learner, heads) for learner in ("gradient", "moment", "sculpt") for heads in (2, 3, 4))
GUIDE_BODY = ((2, 100_000), (3, 30_000_000), (3, 100_000_000))


def guide_table(searches: list[dict], body: list[dict]) -> None:
    """docs/learners_vs_m.md's table: per family and dial point, each learner's median n* and the body's span."""
    table = dial_table(searches)
    points = sorted({(e["family"], e["hardness"]) for e in table})
    print("| family | h | inside | " + " | ".join(f"{learner} m = {heads}" for learner, heads in GUIDE_COLUMNS)
          + " | " + " | ".join(f"body m = {heads}, n = {samples:.0e}" for heads, samples in GUIDE_BODY) + " |")
    print("|" + " --- |" * (3 + len(GUIDE_COLUMNS) + len(GUIDE_BODY)))
    for family, hardness in points:
        mine = [e for e in table if (e["family"], e["hardness"]) == (family, hardness)]
        inside = f"{sum(e['inside'] for e in mine)}/{sum(e['teachers'] for e in mine)}"
        cells = []
        for learner, heads in GUIDE_COLUMNS:
            entry = next((e for e in mine if (e["learner"], e["heads"]) == (learner, heads)), None)
            cells.append("–" if entry is None else bounded_text(entry["median"], entry["budget"])
                         + (f" ({entry['censored']}/{entry['teachers']} cens.)" if entry["censored"] else ""))
        for heads, samples in GUIDE_BODY:
            spans = [span_or_one(r) for r in body if (r["family"], r["hardness"], r["heads"], r["samples"])
                     == (family, hardness, heads, samples)]
            cells.append(f"{statistics.median(spans):.3f} ({len(spans)})" if spans else "–")
        print(f"| {family} | {hardness:g} | {inside} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("docs/figures"))
    args = parser.parse_args()
    searches = search_rows()
    # Body files hold sculpt-vs-m rows only; the glob reads each file for samples-to-eps rows and finds none there.
    if searches:
        print("n* along the dials (the samples-to-eps rows of every .db here)\n")
        print(markdown_dial_table(searches))
        for path in plot_dial(searches, args.out):
            print(f"\nwrote {path}", file=sys.stderr)
    body = [row for path in sorted(HERE.glob("body*.db")) for row in rows(path.name, "sculpt-vs-m")]
    recheck = rows("recheck-body.db", "sculpt-vs-m")
    rechecked = {_body_cell(row) for row in recheck}
    print("\nWhere the guarantee matters (docs/learners_vs_m.md): median n* per learner and m ('cens.': censored "
          "teachers of all), inside = teachers inside the conditions over all searches at the point, the body's "
          "median span distance (a refusal counts as 1; teachers), the body as it is now where it was run again\n")
    guide_table(searches, [row for row in body if _body_cell(row) not in rechecked] + recheck)
    if body:
        body_table(body)
    if recheck:
        body_table(recheck, "The body as it is now (K* on all its rows, the spectral-gap refusal) on the cells "
                   "where an earlier body accepted a span more than 0.15 off")
    for found in sorted(HERE.glob("hard-search-*.jsonl")):
        rescored = HERE / found.name.replace("hard-search", "hard-rescored")
        print(f"\nThe search for hard teachers inside the conditions, {found.name} (hard_search.py report)\n",
              flush=True)
        subprocess.run([sys.executable, str(HERE / "hard_search.py"), "report", "--out", str(found)]
                       + (["--rescored", str(rescored)] if rescored.is_file() else []), check=True)
    basins = HERE / "dial-basins.jsonl"
    if basins.is_file():
        print("\nWhere gradient descent's fits land along the dial (cancelling_basins.py --report)\n", flush=True)
        subprocess.run([sys.executable, str(HERE.parent / "samples-to-eps" / "cancelling_basins.py"), "--report",
                        "--out", str(basins)], check=True)
        for row in map(json.loads, basins.read_text().splitlines()):
            kinds = [fit["kind"] for fit in row["fits"]]
            print(f"  h = {row.get('hardness')}, seed {row['seed']}, n = {row['samples']}: {kinds}")


if __name__ == "__main__":
    main()
