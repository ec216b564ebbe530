"""The tables of docs/learners_vs_m.md, printed from the committed samples-to-eps rows (nothing is fitted to data
anew but the growth laws, which are deterministic in the rows).

    python runs/samples-to-eps/tables.py [DB]      (default: runs/samples-to-eps/samples-to-eps.db)

Prints, as Markdown tables: n* per curve and m; the growth laws per curve; whether each family's n*(m) grows
faster than random teachers' (the laws' exponents on the m both share); every committed held-out prediction
(PREDICTIONS.md), recomputed from the rows of the m it was fitted on, against the measured median; the d = 12
labels-per-unknown laws against d = 16, k = 6 (a held-out shape); the
unpolished error at the budget (the moment route's floor); which code computed the rows, from their own
provenance columns.  tests/test_docs_tables.py checks that every row printed is on the page.
"""
import json
import math
import sys
from collections import Counter
from pathlib import Path

import numpy as np

from mhalearn.experiments.growth_laws import (
    CURVE_KEYS,
    bounded_text,
    family_comparison,
    family_ratios,
    fit_growth_laws,
    predict,
    samples_needed_table,
    teacher_value,
)
from mhalearn.experiments.learners_vs_m import provenance_statement
from mhalearn.experiments.store import ResultStore

PATH = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/samples-to-eps/samples-to-eps.db")
#: The predictions committed in PREDICTIONS.md before their m ran: (block, learner, output, fitted on m,
#: held-out m, pass factor).
COMMITTED = [
    (1, "gradient", "polished", (1, 2, 4), (8, 16, 24), 1.5),
    (2, "gradient", "polished", (1, 2, 4, 8), (16, 24), 1.5),
    (3, "gradient", "polished", (1, 2, 4, 8, 16, 24), (3, 6, 12), 1.5),
    (4, "moment", "polished", (1, 2, 3, 4, 5, 6), (7,), 2.0),
    (5, "moment", "polished", (1, 2, 3, 4, 5, 6, 7), (12,), 2.0),
    (6, "sculpt", "polished", (1, 2, 3, 4, 5, 6), (7,), 2.0),
    (7, "gradient", "polished", (1, 2, 3, 4, 6, 8, 16, 24), (32,), 1.5),
    (9, "gradient", "polished", (1, 2, 3, 4, 6, 8, 12, 16, 24, 32), (20,), 1.5),
]
FORM_NAMES = {"power": "a·m^b", "exponential": "a·e^{bm}", "labels-per-unknown": "a·2md/k"}


def table(header: list[str], rows: list[tuple]) -> None:
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for row in rows:
        print("| " + " | ".join(str(cell) for cell in row) + " |")
    print()


with ResultStore(PATH, readonly=True) as store:
    rows = store.rows("samples-to-eps")
random = [row for row in rows if row["family"] == "random"]


def curve_of(row: dict) -> tuple:
    return tuple(row[key] for key in CURVE_KEYS)


def routes(cells: list[dict]) -> str:
    counts = Counter(row["route"] for row in cells)
    return ", ".join(f"{route} {count}" for route, count in sorted(counts.items()))


print("n* per curve and m: median over teachers [90 % bootstrap interval]; censored teachers count as > budget")
entries = samples_needed_table(rows)
table(["family", "d", "k", "learner", "output", "ε", "m", "teachers", "censored", "resolved ≤ 1.5×",
       "n* median [90 %]", "route at n*"],
      [(e["family"], e["dim"], e["length"], e["learner"], e["output"], f"{e['eps']:g}", e["heads"], e["teachers"],
        e["censored"], e["resolved_1_5"],
        f"{bounded_text(e['median'], e['budget'])} [{bounded_text(e['low'], e['budget'])}, "
        f"{bounded_text(e['high'], e['budget'])}]",
        routes([row for row in rows if curve_of(row) == tuple(e[key] for key in CURVE_KEYS)
                and row["heads"] == e["heads"]]))
       for e in entries])

print("growth laws: least squares on log n* over every uncensored teacher, 90 % bootstrap over teachers")
table(["family", "d", "k", "learner", "output", "ε", "n* =", "a [90 %]", "b [90 %]", "rms log₁₀", "fitted on m",
       "teachers (censored)"],
      [(law["family"], law["dim"], law["length"], law["learner"], law["output"], f"{law['eps']:g}",
        FORM_NAMES[law["form"]], f"{law['a']:.3g} [{law['a_low']:.3g}, {law['a_high']:.3g}]",
        "1 (fixed)" if law["form"] == "labels-per-unknown" else
        f"{law['b']:.3g} [{law['b_low']:.3g}, {law['b_high']:.3g}]", f"{law['rms_log10']:.3f}",
        law["heads"].replace(",", ", "), f"{law['points'] + law['censored']} ({law['censored']})")
       for law in fit_growth_laws(rows)])

print("faster than random teachers? each law fitted to both families on the m they share; Δb = b(family) − "
      "b(random), 90 % interval from independent bootstraps of each family's teachers; censored teachers are left "
      "out of the fit (a lower bound on the family's growth where it is censored)")
table(["family", "learner", "output", "ε", "n* =", "m", "b (family)", "b (random)", "Δb [90 %]", "verdict",
       "censored (family, random)", "median ratio at largest m"],
      [(e["family"], e["learner"], e["output"], f"{e['eps']:g}", FORM_NAMES[e["form"]], e["heads"].replace(",", ", "),
        f"{e['b']:.3g}", f"{e['b_reference']:.3g}", f"{e['difference']:.3g} [{e['low']:.3g}, {e['high']:.3g}]",
        e["verdict"], f"{e['censored']}, {e['censored_reference']}",
        f"{bounded_text(e['top_ratio'])} (m = {e['top_heads']})") for e in family_comparison(rows)])

print("how many times random teachers' n* the family needs, per m: median n* (family) / median n* (random), 90 % "
      "interval from independent bootstraps of each family's teachers; censored teachers count as > budget, a censored "
      "ratio as > budget / random teachers' median")
table(["family", "learner", "output", "ε", "m", "teachers (censored)", "random teachers (censored)",
       "median ratio [90 %]"],
      [(e["family"], e["learner"], e["output"], f"{e['eps']:g}", e["heads"], f"{e['teachers']} ({e['censored']})",
        f"{e['teachers_reference']} ({e['censored_reference']})",
        f"{bounded_text(e['ratio'], e['floor'])} [{bounded_text(e['low'], e['floor'])}, "
        f"{bounded_text(e['high'], e['floor'])}]")
       for e in family_ratios(rows)])

print("held-out m: each prediction committed in PREDICTIONS.md before its m ran, recomputed from the rows of the "
      "m it was fitted on, against the measured median n*")
held = []
for block, learner, output, fitted_on, held_out, factor in COMMITTED:
    mine = [row for row in random if (row["learner"], row["output"], row["dim"], row["length"]) == (
        learner, output, 12, 4)]
    laws = fit_growth_laws([row for row in mine if row["heads"] in fitted_on], resamples=10)
    for heads in held_out:
        measured = [teacher_value(row) for row in mine if row["heads"] == heads]
        if not measured:
            continue
        median = float(np.median(measured))
        for law in laws:
            ratio = predict(law, heads) / median if math.isfinite(median) else math.nan
            verdict = "censored" if math.isnan(ratio) else (
                "within" if 1 / factor <= ratio <= factor else "missed")
            held.append((block, learner, output, ", ".join(map(str, fitted_on)), FORM_NAMES[law["form"]], heads,
                         f"{predict(law, heads):.0f}", f"{bounded_text(median)} ({len(measured)})",
                         f"{ratio:.2f}×", f"{verdict} {factor:g}×"))
table(["block", "learner", "output", "fitted on m", "n* =", "held-out m", "predicted", "measured median (teachers)",
       "predicted / measured", "verdict"], held)

print("held-out shape (PREDICTIONS.md, block 8): the d = 12, k = 4 labels-per-unknown law of each learner, fitted on "
      "the d = 12 rows that existed when it was committed, predicts n* = a·2md/k at d = 16, k = 6; entries whose rows "
      "existed when the prediction was committed are marked")
shape_held = []
#: The d = 12, k = 4 m whose rows the committed prediction was fitted on, per learner, and the d = 16 points
#: some of whose rows had finished when it was committed (16:21:34 UTC: gradient descent's m = 1, and six of m = 2).
SHAPE_FITTED_ON = {"gradient": (1, 2, 3, 4, 6, 8, 12, 16, 24, 32), "moment": (1, 2, 3, 4, 5, 6, 7, 12)}
SHAPE_SEEN_BEFORE = {("gradient", 1), ("gradient", 2)}
for learner, fitted_on in SHAPE_FITTED_ON.items():
    mine = [row for row in random if (row["learner"], row["output"]) == (learner, "polished")]
    law = next(law for law in fit_growth_laws([row for row in mine if (row["dim"], row["length"]) == (12, 4)
                                               and row["heads"] in fitted_on], resamples=10)
               if law["form"] == "labels-per-unknown")
    for heads in sorted({row["heads"] for row in mine if (row["dim"], row["length"]) == (16, 6)}):
        measured = [teacher_value(row) for row in mine if (row["dim"], row["length"], row["heads"]) == (16, 6, heads)]
        median, predicted = float(np.median(measured)), predict({**law, "dim": 16, "length": 6}, heads)
        ratio = predicted / median if math.isfinite(median) else math.nan
        verdict = "censored" if math.isnan(ratio) else "within 1.5×" if 1 / 1.5 <= ratio <= 1.5 else "missed 1.5×"
        held_out = (learner, heads) not in SHAPE_SEEN_BEFORE
        shape_held.append((learner, f"{law['a']:.3g}", heads, f"{predicted:.1f}",
                           f"{bounded_text(median)} ({len(measured)})", f"{ratio:.2f}×",
                           verdict if held_out else f"{verdict} (not held out: rows existed)"))
table(["learner", "a (d = 12)", "m", "predicted at d = 16, k = 6", "measured median (teachers)",
       "predicted / measured", "verdict"], shape_held)

print("where the failures end: each search's relative test error at its largest failing n (samples_lower; the "
      "budget when censored), ε's output, polished searches: median [min, max] over teachers")
last_failure: dict = {}
for row in rows:
    failed = [probe for probe in json.loads(row["probe_log"]) if probe["samples"] == row["samples_lower"]]
    if row["output"] == "polished" and failed and failed[0]["polished_error"] is not None:
        last_failure.setdefault((row["family"], row["dim"], row["length"], row["learner"], row["heads"]), []).append(
            failed[0]["polished_error"])
table(["family", "d", "k", "learner", "m", "searches", "error at the largest failing n"],
      [(*key, len(values), f"{np.median(values):.3g} [{min(values):.3g}, {max(values):.3g}]")
       for key, values in sorted(last_failure.items())])

print("unpolished relative test error at the budget (n = 2000), every teacher searched there: median [min, max]")
floor = []
for row in rows:
    for probe in json.loads(row["probe_log"]):
        if probe["samples"] == row["budget"] and probe["unpolished_error"] is not None and row["learner"] != "gradient":
            floor.append(((row["family"], row["dim"], row["length"], row["learner"], row["heads"]),
                          probe["unpolished_error"], probe["route"]))
groups: dict = {}
for key, error, route in floor:
    groups.setdefault(key, []).append((error, route))
table(["family", "d", "k", "learner", "m", "teachers", "unpolished error at n = 2000", "route"],
      [(*key, len(values), f"{np.median([e for e, _ in values]):.3g} [{min(e for e, _ in values):.3g}, "
        f"{max(e for e, _ in values):.3g}]", ", ".join(f"{r} {c}" for r, c in sorted(Counter(
            r for _, r in values).items())))
       for key, values in sorted(groups.items())])

print("which code computed the rows (from the rows' own provenance columns)")
table(["results file", "rows by code"], [(PATH.name, provenance_statement(PATH, "samples-to-eps").split(": ", 1)[1])])
