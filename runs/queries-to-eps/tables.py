"""q*(m) of the query learner beside n*(m) of the example learners, on the same teachers: one Markdown table.

    python runs/queries-to-eps/tables.py

Reads ``runs/queries-to-eps/queries-to-eps.db`` and ``runs/samples-to-eps/samples-to-eps.db`` (fits
nothing) and prints, per family and m (d = 12, k = 4, noiseless, ε = 1e-6 on the polished or only
output), the median over teachers of the queried sequences q* (t = 2 and t = 4 distinct tokens a
Θ-query) and of the random sequences n* of gradient descent and the moment route; "> budget" when more
than half the teachers were censored.
"""
from pathlib import Path

from mhalearn.experiments.growth_laws import bounded_text, samples_needed_table
from mhalearn.experiments.queries_to_eps import as_search_rows
from mhalearn.experiments.store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
COLUMNS = (("query", "t=2", "q*, t = 2"), ("query", "t=4", "q*, t = 4"),
           ("gradient", "polished", "n*, gradient descent"), ("moment", "polished", "n*, moment route"))


def rows(path: Path, experiment: str) -> list[dict]:
    with ResultStore(path, readonly=True) as store:
        return store.rows(experiment)


def main() -> None:
    queried = as_search_rows(rows(ROOT / "runs" / "queries-to-eps" / "queries-to-eps.db", "queries-to-eps"))
    examples = rows(ROOT / "runs" / "samples-to-eps" / "samples-to-eps.db", "samples-to-eps")
    table = [entry for entry in samples_needed_table(queried) + samples_needed_table(examples)
             if (entry["dim"], entry["length"], entry["noise"], entry["eps"]) == (12, 4, 0.0, 1e-6)]
    print("| family | m | " + " | ".join(title for *_, title in COLUMNS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in COLUMNS) + " |")
    for family in ("random", "cancelling"):
        for heads in sorted({entry["heads"] for entry in table if entry["family"] == family}):
            cells = []
            for learner, output, _ in COLUMNS:
                entry = next((entry for entry in table if (entry["family"], entry["heads"], entry["learner"],
                                                          entry["output"]) == (family, heads, learner, output)), None)
                cells.append("" if entry is None else bounded_text(entry["median"], entry["budget"]))
            print(f"| {family} | {heads} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
