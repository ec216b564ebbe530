"""Would a check of the body's predictions refuse the bodies the gap lets through?  Read off the committed rows.

Every accepted body of m >= 2 in runs/*/*.db (sculpt-vs-m rows, the gap rule of tests/test_refusal_replay.py
applied) with its span distance and the relative test error of the paper's least-squares model on that span
(the row's ``test_error``, on fresh sequences; a learner would see the same figure on its held-out split).
Printed: per m and per band of span distance, how many bodies and the range of their test errors.  Nothing is
fitted.

    python runs/body-m4-testbed/prediction_check.py
"""
import glob
from pathlib import Path

from mhalearn.experiments.store import ResultStore
from mhalearn.learners.chen_li.settings import BodySettings

RUNS = Path(__file__).resolve().parent.parent
SETTINGS = BodySettings()
BANDS = ((0.0, 0.15, "≤ 0.15"), (0.15, 0.5, "(0.15, 0.5]"), (0.5, 1.01, "> 0.5"))


def accepted_bodies() -> list[dict]:
    bodies = {}
    for database in sorted(glob.glob(str(RUNS / "*" / "*.db"))):
        with ResultStore(database, readonly=True) as store:
            for row in store.rows("sculpt-vs-m"):
                # An infinite gap (the long directions' singular values at 0) is stored as null and passes.
                gap = row.get("spectral_gap")
                if (row["heads"] < 2 or row.get("span_distance") is None or row["refused"]
                        or (gap is not None and gap < SETTINGS.min_gap) or row.get("test_error") is None):
                    continue
                # The same cell computed again to the bit (a rerun, a copy of the rows) counts once.
                key = (row["heads"], row["dim"], row["length"], row["samples"], row["seed"],
                       round(row["span_distance"], 12))
                bodies[key] = row
    return list(bodies.values())


def main() -> None:
    bodies = accepted_bodies()
    print("| m | span distance | accepted bodies | test error: min | max |")
    print("| --- | --- | --- | --- | --- |")
    for heads in sorted({body["heads"] for body in bodies}):
        for low, high, label in BANDS:
            errors = sorted(body["test_error"] for body in bodies
                            if body["heads"] == heads and low < body["span_distance"] <= high)
            if errors:
                print(f"| {heads} | {label} | {len(errors)} | {errors[0]:.3g} | {errors[-1]:.3g} |")


if __name__ == "__main__":
    main()
