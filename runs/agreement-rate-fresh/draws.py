"""The per-head and slope laws against three independent draws of three fresh teachers each.

    python runs/agreement-rate-fresh/draws.py        (from the repository root)

Draw 1 is agreement-rate-fresh.db (teachers 5000–5002, check.py's table); draws 2 and 3 are draws.db
(teachers 5003–5005 and 5006–5008, the same grids with other seeds: m2-draw*.toml, k3-draw*.toml). The
laws are fitted on runs/agreement-rate/agreement-rate.db (teachers 0–2) as in check.py. Printed per law
and cell: predicted / measured median for each draw, and their range across draws.
"""
import warnings

from mhalearn.experiments.agreement_rate import fresh_teacher_check
from mhalearn.experiments.store import ResultStore

DRAWS = {1: (5000, 5001, 5002), 2: (5003, 5004, 5005), 3: (5006, 5007, 5008)}


def rows(path: str) -> list[dict]:
    with ResultStore(path, readonly=True) as store:
        return store.rows("agreement-rate")


# The laws' maximum-likelihood fits overflow exp() on some line-search steps (scipy retries them): noise here.
warnings.filterwarnings("ignore", category=RuntimeWarning)
fitted = rows("runs/agreement-rate/agreement-rate.db")
fresh = rows("runs/agreement-rate-fresh/agreement-rate-fresh.db") + rows("runs/agreement-rate-fresh/draws.db")
ratios: dict = {}
for draw, seeds in DRAWS.items():
    for check in fresh_teacher_check(fitted, [row for row in fresh if row["seed"] in seeds]):
        ratios.setdefault((check["law"], check["cell"]), {})[draw] = check["ratio"]
print("| law | (m, k) | " + " | ".join(f"draw {draw} ({seeds[0]}–{seeds[-1]})" for draw, seeds in DRAWS.items())
      + " | range across draws |")
print("| --- | --- |" + " --- |" * (len(DRAWS) + 1))
for (law, cell), by_draw in ratios.items():
    values = [by_draw[draw] for draw in DRAWS if draw in by_draw]
    print(f"| {law} | {cell} | " + " | ".join(f"{by_draw[d]:.3g}" if d in by_draw else "–" for d in DRAWS)
          + f" | {min(values):.3g}–{max(values):.3g} |")
