r"""Summaries of `samples-to-eps` rows: n\* per curve and m, growth laws and their held-out checks.

A curve is n\*(m) for one (family, d, k, σ, learner, output, ε); a teacher's
n\* is a number, or infinite when its search was censored at the budget.
The laws n\* = a·m^b, a·e^{bm} and a·2md/k are fitted by least squares on
log n\* over every uncensored teacher, with bootstrap intervals over
teachers; :func:`held_out_table` checks each on an m it did not see, and
:func:`family_comparison` compares a family's growth with random teachers'.
"""

from __future__ import annotations

import json
import math
import zlib

import numpy as np

from ..plotting import group_rows
from ..sparse_variables.growth import bootstrap_median, bootstrap_median_ratio

#: Level of the bootstrap intervals over teachers.
LEVEL = 0.9

# ----------------------------------------------------------------- summaries

#: Keys of one curve n*(m): everything but m and the teacher.
CURVE_KEYS = ("family", "dim", "length", "noise", "learner", "output", "eps")


def teacher_value(row: dict) -> float:
    """One teacher's n*: a number, or inf when censored ("> budget")."""
    return math.inf if row["censored"] else float(row["samples_needed"])


def probe_rows(rows: list[dict]) -> list[dict]:
    """One row per probe of every search: the search's keys, n, errors, route, fit seconds, success."""
    out = []
    for row in rows:
        for probe in json.loads(row["probe_log"]):
            error = probe[f"{row['output']}_error"]
            out.append({**{key: row[key] for key in (*CURVE_KEYS, "heads", "seed")}, **probe,
                        "success": error is not None and error <= row["eps"]})
    return out


def samples_needed_table(rows: list[dict], level: float = LEVEL) -> list[dict]:
    """Per curve and m: teachers, censored, median n* over teachers and its bootstrap interval."""
    summary = []
    for group, cells in group_rows(rows, [*CURVE_KEYS, "heads"]).items():
        values = [teacher_value(row) for row in cells]
        median, low, high = bootstrap_median(values, level=level)
        ratios = [row["ratio"] for row in cells if row.get("ratio") is not None]
        summary.append({**dict(zip([*CURVE_KEYS, "heads"], group)), "teachers": len(cells),
                        "censored": sum(map(math.isinf, values)), "budget": max(row["budget"] for row in cells),
                        "median": median, "low": low, "high": high,
                        "resolved_1_5": sum(ratio <= 1.5 for ratio in ratios),
                        "non_monotone": sum(bool(row["non_monotone"]) for row in cells)})
    return summary


#: The growth laws fitted: n* = a·m^b, n* = a·e^{bm}, and n* = a·(2·m·d²)/(k·d) — a scalar labels per
#: unknown (n·k·d labels, 2·m·d² unknowns), b fixed at 1.
LAW_FORMS = ("power", "exponential", "labels-per-unknown")


def _law_x(heads: np.ndarray, form: str, dim: int, length: int) -> np.ndarray:
    if form == "power":
        return np.log(heads)
    if form == "exponential":
        return heads.astype(float)
    return np.log(2.0 * heads * dim / length)


def _law_fit(heads: np.ndarray, values: np.ndarray, form: str, dim: int = 1, length: int = 1) -> tuple[float, float]:
    """(a, b) of log n* = log a + b·x by least squares (x: :func:`_law_x`; b = 1 for labels-per-unknown)."""
    x = _law_x(heads, form, dim, length)
    if form == "labels-per-unknown":
        return float(math.exp(np.mean(np.log(values) - x))), 1.0
    b, log_a = np.polyfit(x, np.log(values), 1)
    return float(math.exp(log_a)), float(b)


def _finite_by_m(cells: list[dict]) -> dict[int, np.ndarray]:
    """Per m, the uncensored teachers' n* (an m whose every teacher is censored is left out)."""
    by_m = {heads: np.array([teacher_value(row) for row in mine])
            for (heads,), mine in group_rows(cells, ["heads"]).items()}
    finite = {heads: values[np.isfinite(values)] for heads, values in by_m.items()}
    return {heads: values for heads, values in finite.items() if len(values)}


def bounded_text(value: float, bound: float = 0) -> str:
    """A median or ratio as text: the value, or "> bound" when it is censored (infinite); "not reached"
    when a censored value has no bound."""
    if not math.isinf(value):
        return f"{value:.4g}"
    return f"> {bound:{'.4g' if bound % 1 else 'g'}}" if bound else "not reached"


def _curve_generator(rng, *key) -> np.random.Generator:
    """A generator of one curve's own: seeded by ``rng`` and the curve's key, so that adding rows to
    one curve leaves every other curve's bootstrap intervals as they were."""
    return np.random.default_rng([int(rng), zlib.crc32("|".join(map(str, key)).encode())])


def _law_replicates(finite: dict[int, np.ndarray], form: str, shape: dict, resamples: int,
                    generator: np.random.Generator) -> np.ndarray:
    """(a, b) of the law refitted on ``resamples`` bootstrap samples of the teachers within each m."""
    replicates = []
    for _ in range(resamples):
        sample = {m: v[generator.integers(len(v), size=len(v))] for m, v in finite.items()}
        replicates.append(_law_fit(np.concatenate([np.full(len(v), m) for m, v in sample.items()]),
                                   np.concatenate(list(sample.values())), form, **shape))
    return np.array(replicates)


def fit_growth_laws(rows: list[dict], *, resamples: int = 1000, level: float = LEVEL, rng=0) -> list[dict]:
    """Per curve: the :data:`LAW_FORMS` fitted to the uncensored teachers, with bootstrap intervals.

    Least squares on log n* over every uncensored (m, teacher) point; the
    interval resamples teachers within each m.  A curve with a censored
    teacher says so (``censored``): its law rests on the others and is a
    lower bound there.  Also the residual spread (RMS of log₁₀ n*) of each form.
    """
    laws = []
    for group, cells in group_rows(rows, list(CURVE_KEYS)).items():
        generator = _curve_generator(rng, *group)
        finite = _finite_by_m(cells)
        if len(finite) < 2:
            continue
        heads = np.concatenate([np.full(len(values), heads) for heads, values in finite.items()])
        values = np.concatenate(list(finite.values()))
        shape = {"dim": cells[0]["dim"], "length": cells[0]["length"]}
        for form in LAW_FORMS:
            a, b = _law_fit(heads, values, form, **shape)
            replicates = _law_replicates(finite, form, shape, resamples, generator)
            tail = (1 - level) / 2
            lows, highs = np.quantile(replicates, [tail, 1 - tail], axis=0)
            residual = np.log10(values) - np.log10(a) - b * _law_x(heads, form, **shape) / math.log(10)
            laws.append({**dict(zip(CURVE_KEYS, group)), "form": form, "a": a, "b": b,
                         "a_low": float(lows[0]), "a_high": float(highs[0]), "b_low": float(lows[1]),
                         "b_high": float(highs[1]), "rms_log10": float(np.sqrt(np.mean(residual ** 2))),
                         "heads": ",".join(str(m) for m in sorted(finite)), "points": int(len(values)),
                         "censored": sum(math.isinf(teacher_value(row)) for row in cells)})
    return laws


#: The forms whose exponent b two families are compared on (labels-per-unknown has b fixed at 1).
COMPARED_FORMS = ("power", "exponential")


def _family_pairs(rows: list[dict], reference: str):
    """(curve keys, their values, family, rows by family, the m both share) for each curve of a family
    other than ``reference`` that has a ``reference`` curve with the same learner, output, ε, shape and noise."""
    keys = [key for key in CURVE_KEYS if key != "family"]
    for group, cells in group_rows(rows, keys).items():
        by_family = {family: mine for (family,), mine in group_rows(cells, ["family"]).items()}
        if reference not in by_family:
            continue
        for family, mine in sorted(by_family.items()):
            if family != reference:
                shared = sorted({row["heads"] for row in mine} & {row["heads"] for row in by_family[reference]})
                yield keys, group, family, by_family, shared


def family_comparison(rows: list[dict], *, reference: str = "random", resamples: int = 1000,
                      level: float = LEVEL, rng=0) -> list[dict]:
    """Does n*(m) grow faster on a family than on ``reference`` teachers, per learner?

    For each curve of a family other than ``reference`` and the reference
    curve with the same learner, output, ε, shape and noise: both growth laws
    (:data:`COMPARED_FORMS`) fitted on the m the two share, the difference of
    their exponents Δb = b(family) − b(reference), and its interval from
    independent bootstraps of each family's teachers (different teachers,
    so the replicates pair at random).  ``verdict`` is ``"faster"`` when the
    interval lies above 0, ``"slower"`` below, else ``"not resolved"``.
    Censored teachers are left out of the fit (as in :func:`fit_growth_laws`)
    and counted in ``censored``: a family censored at its largest m grows at
    least as fast as its fit says, so a "faster" verdict stands and the
    others are lower bounds.  Also the ratio of the median n* at the largest
    shared m (censored teachers as "> budget", ``inf``).
    """
    tail = (1 - level) / 2
    out = []
    for keys, group, family, by_family, shared in _family_pairs(rows, reference):
        generator = _curve_generator(rng, *group, family, reference)
        cells = by_family[family]
        pair = {name: [row for row in by_family[name] if row["heads"] in shared] for name in (family, reference)}
        finite = {name: _finite_by_m(cells_) for name, cells_ in pair.items()}
        if len(shared) < 2 or any(len(values) < 2 for values in finite.values()):
            continue
        shape = {"dim": cells[0]["dim"], "length": cells[0]["length"]}
        top = max(shared)
        medians = {name: float(np.median([teacher_value(row) for row in pair[name] if row["heads"] == top]))
                   for name in pair}
        for form in COMPARED_FORMS:
            slopes = {}
            for name, values in finite.items():
                heads = np.concatenate([np.full(len(v), m) for m, v in values.items()])
                slopes[name] = (_law_fit(heads, np.concatenate(list(values.values())), form, **shape)[1],
                                _law_replicates(values, form, shape, resamples, generator)[:, 1])
            difference = slopes[family][1] - slopes[reference][1]
            low, high = np.quantile(difference, [tail, 1 - tail])
            out.append({**dict(zip(keys, group)), "family": family, "reference": reference, "form": form,
                        "heads": ",".join(map(str, shared)), "b": slopes[family][0],
                        "b_reference": slopes[reference][0], "difference": slopes[family][0] - slopes[reference][0],
                        "low": float(low), "high": float(high),
                        "verdict": "faster" if low > 0 else "slower" if high < 0 else "not resolved",
                        "censored": sum(math.isinf(teacher_value(row)) for row in pair[family]),
                        "censored_reference": sum(math.isinf(teacher_value(row)) for row in pair[reference]),
                        "top_heads": top, "top_ratio": medians[family] / medians[reference]})
    return out


def family_ratios(rows: list[dict], *, reference: str = "random", level: float = LEVEL) -> list[dict]:
    """Per learner curve and m both families share: median n* of a family over ``reference``'s.

    The ratio of the two medians over teachers (censored teachers count as
    infinite, "> budget") and its interval from independent bootstraps of
    each family's teachers (:func:`~mhalearn.sparse_variables.growth.bootstrap_median_ratio`).
    Unlike :func:`family_comparison` it needs no law and keeps censored
    teachers: a family grows faster than ``reference`` over m₁ < m₂ when the
    ratio's interval at m₂ lies above its interval at m₁.  ``undefined``
    counts the bootstrap replicates in which both medians were censored;
    ``floor`` is the family's budget over ``reference``'s median n*, the
    bound a censored ratio is known to exceed.
    """
    out = []
    for keys, group, family, by_family, shared in _family_pairs(rows, reference):
        mine = by_family[family]
        for heads in shared:
            values = {name: [teacher_value(row) for row in by_family[name] if row["heads"] == heads]
                      for name in (family, reference)}
            ratio, low, high, undefined = bootstrap_median_ratio(values[family], values[reference], level=level)
            out.append({**dict(zip(keys, group)), "family": family, "reference": reference, "heads": heads,
                        "teachers": len(values[family]), "teachers_reference": len(values[reference]),
                        "censored": sum(map(math.isinf, values[family])),
                        "censored_reference": sum(map(math.isinf, values[reference])),
                        "ratio": ratio, "low": low, "high": high, "undefined": undefined,
                        "floor": max(row["budget"] for row in mine) / float(np.median(values[reference]))})
    return out


def predict(law: dict, heads: float) -> float:
    """A fitted law's n* at ``heads``."""
    x = _law_x(np.array([heads], dtype=float), law["form"], law["dim"], law["length"])[0]
    return float(law["a"] * math.exp(law["b"] * x))


def held_out_table(rows: list[dict], level: float = LEVEL) -> list[dict]:
    """Per curve, law form and m: the law fitted on every *other* m predicts the median n* at m.

    The check of a law on an m it did not see: ``ratio`` is predicted over
    the measured median (None when that median is censored, "> budget").
    A prediction committed before an m was run is this table's entry for
    that m, computed on the rows that existed then.
    """
    out = []
    for group, cells in group_rows(rows, list(CURVE_KEYS)).items():
        heads_values = sorted({row["heads"] for row in cells})
        for heads in heads_values:
            fitted = {law["form"]: law for law in fit_growth_laws([row for row in cells if row["heads"] != heads],
                                                                  resamples=200, level=level)}
            measured = float(np.median([teacher_value(row) for row in cells if row["heads"] == heads]))
            for form, law in fitted.items():
                predicted = predict(law, heads)
                out.append({**dict(zip(CURVE_KEYS, group)), "heads": heads, "form": form, "fitted_on": law["heads"],
                            "predicted": predicted, "measured": measured,
                            "ratio": None if math.isinf(measured) else predicted / measured})
    return out
