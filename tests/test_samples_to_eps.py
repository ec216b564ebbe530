"""The samples-to-eps experiment: the n* search against a brute-force scan, and the sweep end to end."""

import csv
import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mhalearn.cli import main
from mhalearn.experiments import get_experiment
from mhalearn.experiments.growth_laws import family_comparison, family_ratios, fit_growth_laws, predict
from mhalearn.experiments.samples_to_eps import EXPORT_COLUMNS, run_samples_to_eps_cell, samples_to_eps_cells
from mhalearn.sample_search import search_samples_needed


def brute_force(curve, epsilon, budget, minimum=1):
    """The smallest n in [minimum, budget] with curve(n) <= ε, by scanning every n (None: none)."""
    return next((n for n in range(minimum, budget + 1) if curve(n) <= epsilon), None)


def counted(curve, seconds=0.0):
    calls = []

    def error_at(n):
        calls.append(n)
        return curve(n), seconds
    return error_at, calls


@settings(max_examples=200, deadline=None)
@given(threshold=st.integers(1, 6000), start=st.integers(1, 5000), budget=st.integers(1, 5000),
       resolution=st.sampled_from([1.1, 1.25, 1.5, 2.0]))
def test_on_a_monotone_curve_the_search_brackets_the_scanned_answer_within_its_resolution(
        threshold, start, budget, resolution):
    def curve(n):
        return 1e-9 if n >= threshold else 0.5
    error_at, calls = counted(curve)
    search = search_samples_needed(error_at, 1e-6, start=start, budget=budget, resolution=resolution, confirm=2.0)
    truth = brute_force(curve, 1e-6, budget)
    assert len(calls) == len(set(calls)) == len(search.probes)  # no n is probed twice
    assert max(calls) <= budget and min(calls) >= 1
    assert not search.non_monotone
    if truth is None:
        assert search.censored and search.samples_needed is None and search.samples_lower == budget
    else:
        assert not search.censored
        assert search.samples_lower < truth <= search.samples_needed
        if search.samples_lower == 0:
            assert search.samples_needed == truth == 1
        else:
            # Within the resolution, or the two are adjacent integers (no n between them to probe).
            assert (search.samples_needed / search.samples_lower <= resolution
                    or search.samples_needed - search.samples_lower == 1)
    # Doubling and halving from start, then bisecting on log n: logarithmically many probes.
    assert len(calls) <= 2 * math.log2(max(budget, start) + 1) + 6


def test_a_failure_above_a_success_is_flagged_and_n_star_stays_the_brackets_answer():
    def curve(n):  # succeeds on [20, 40) and from 100 on: a larger n fails after a smaller one succeeded
        return 0.0 if 20 <= n < 40 or n >= 100 else 1.0
    error_at, calls = counted(curve)
    search = search_samples_needed(error_at, 0.1, start=20, budget=1000, confirm=2.0)
    assert search.samples_needed == brute_force(curve, 0.1, 1000) == 20
    assert 40 in calls and search.non_monotone
    # Without the closing probe the same search sees no failure above a success.
    assert not search_samples_needed(counted(curve)[0], 0.1, start=20, budget=1000).non_monotone


def test_refused_probes_count_as_failures_and_a_resumed_search_refits_nothing():
    def curve(n):
        return math.nan if n < 30 else (1e-3 if n >= 77 else 0.4)
    error_at, calls = counted(curve)
    first = search_samples_needed(error_at, 1e-2, start=10, budget=10_000, confirm=2.0)
    assert first.samples_lower < 77 <= first.samples_needed and first.samples_needed / first.samples_lower <= 1.25
    known = {n: (error, seconds) for n, error, seconds in first.probes}
    again, recalls = counted(curve)
    resumed = search_samples_needed(again, 1e-2, start=10, budget=10_000, confirm=2.0, known=known)
    assert recalls == [] and resumed == first
    # A search cut after its first three probes makes exactly the remaining ones.
    partial = dict(list(known.items())[:3])
    rest, recalls = counted(curve)
    assert search_samples_needed(rest, 1e-2, start=10, budget=10_000, confirm=2.0, known=partial) == first
    assert recalls == calls[3:]


def test_slow_probes_stop_the_bisection_at_twice():
    def curve(n):
        return 0.0 if n >= 1000 else 1.0
    slow = search_samples_needed(counted(curve, seconds=700.0)[0], 0.1, start=100, budget=10**5,
                                 coarse_seconds=600.0)
    fast = search_samples_needed(counted(curve)[0], 0.1, start=100, budget=10**5, coarse_seconds=600.0)
    assert slow.samples_needed / slow.samples_lower <= 2.0 and len(slow.probes) < len(fast.probes)
    assert fast.samples_needed / fast.samples_lower <= 1.25


def test_bad_search_settings_are_refused_before_probing():
    error_at, calls = counted(lambda n: 0.0)
    with pytest.raises(ValueError, match="resolution"):
        search_samples_needed(error_at, 0.1, start=1, budget=10, resolution=1.0)
    assert calls == []


def _rows(law, heads_values, teachers=5):
    return [{"family": "random", "dim": 12, "length": 4, "noise": 0.0, "learner": "gradient",
             "output": "polished", "eps": 1e-6, "heads": m, "seed": seed, "censored": False,
             "samples_needed": law(m) * (1.0 + 0.01 * seed)} for m in heads_values for seed in range(teachers)]


def test_the_growth_laws_recover_a_planted_power_and_exponential_law():
    laws = {law["form"]: law for law in fit_growth_laws(_rows(lambda m: 20.0 * m ** 1.5, [1, 2, 4, 8]))}
    assert laws["power"]["b"] == pytest.approx(1.5, abs=1e-6)
    assert laws["power"]["b_low"] <= 1.5 <= laws["power"]["b_high"]
    assert predict(laws["power"], 16) == pytest.approx(20.0 * 16 ** 1.5 * 1.02, rel=0.02)
    assert laws["power"]["rms_log10"] < laws["exponential"]["rms_log10"]
    lpu = next(law for law in fit_growth_laws(_rows(lambda m: 3.0 * 2 * m * 12 / 4, [1, 2, 4, 8]))
               if law["form"] == "labels-per-unknown")
    assert lpu["a"] == pytest.approx(3.0 * 1.02, rel=0.02)
    assert predict(lpu, 20) == pytest.approx(3.0 * 120 * 1.02, rel=0.02)
    laws = {law["form"]: law for law in fit_growth_laws(_rows(lambda m: 5.0 * math.exp(0.7 * m), [1, 2, 3, 4]))}
    assert laws["exponential"]["b"] == pytest.approx(0.7, abs=1e-6)



def test_rows_added_to_one_curve_leave_every_other_curves_intervals_as_they_were():
    # The rows' spread over seeds must be uneven for the bootstrap to draw different intervals.
    spread = lambda law: lambda m: law(m) * (1.0 + 0.3 * math.sin(7 * m))  # noqa: E731
    moment = [{**row, "learner": "moment", "samples_needed": row["samples_needed"] * (1 + 0.1 * (row["seed"] % 3))}
              for row in _rows(spread(lambda m: 20.0 * m), [1, 2, 4, 8])]
    gradient = _rows(spread(lambda m: 15.0 * m), [1, 2, 4])
    more = _rows(spread(lambda m: 15.0 * m), [8, 16])

    def moment_laws(rows):
        return [law for law in fit_growth_laws(rows, resamples=200) if law["learner"] == "moment"]

    assert moment_laws(gradient + moment) == moment_laws(gradient + more + moment)
    gradient_laws = [law for law in fit_growth_laws(gradient + moment, resamples=200) if law["learner"] == "gradient"]
    grown = [law for law in fit_growth_laws(gradient + more + moment, resamples=200) if law["learner"] == "gradient"]
    assert [law["b_low"] for law in gradient_laws] != [law["b_low"] for law in grown]

def _family(rows, family):
    return [{**row, "family": family} for row in rows]


def test_the_family_comparison_tells_a_faster_growth_from_the_same_growth():
    random = _rows(lambda m: 20.0 * m, [1, 2, 4, 8])
    steeper = _family(_rows(lambda m: 20.0 * m ** 2, [1, 2, 4, 8]), "cancelling")
    # A censored teacher at the largest m is left out of the fit and counted.
    steeper[-1] = {**steeper[-1], "censored": True, "samples_needed": None}
    entry = next(e for e in family_comparison(random + steeper) if e["form"] == "power")
    assert entry["difference"] == pytest.approx(1.0, abs=0.02) and entry["low"] > 0.5
    assert entry["verdict"] == "faster" and entry["censored"] == 1 and entry["top_ratio"] == pytest.approx(8.0)
    # The same law on other teachers (another spread over seeds): the interval holds 0.
    alike = _family(_rows(lambda m: 20.0 * m, [1, 2, 4, 8, 16], teachers=7), "sharp")
    entry = next(e for e in family_comparison(random + alike) if e["form"] == "power")
    assert entry["heads"] == "1,2,4,8" and entry["low"] < 0 < entry["high"] and entry["verdict"] == "not resolved"
    assert entry["top_ratio"] == pytest.approx(1.0, rel=0.05)


def test_the_family_ratios_keep_censored_teachers_as_above_the_budget():
    random = [{**row, "budget": 1000} for row in _rows(lambda m: 20.0 * m, [1, 2, 4])]
    steeper = [{**row, "budget": 1000} for row in _family(_rows(lambda m: 20.0 * m ** 2, [1, 2, 4]), "cancelling")]
    # Three of five teachers censored at m = 4: the median is "> budget", a number would be wrong.
    for index in (-1, -2, -3):
        steeper[index] = {**steeper[index], "censored": True, "samples_needed": None}
    entries = {e["heads"]: e for e in family_ratios(random + steeper)}
    assert sorted(entries) == [1, 2, 4] and entries[4]["censored"] == 3 and entries[4]["teachers_reference"] == 5
    # Teacher s of both families carries the same factor 1 + 0.01·s, so the medians' ratio is m exactly.
    assert entries[1]["ratio"] == pytest.approx(1.0) and entries[2]["ratio"] == pytest.approx(2.0)
    assert entries[2]["low"] < 2.0 < entries[2]["high"] < entries[4]["floor"]
    assert math.isinf(entries[4]["ratio"]) and entries[4]["floor"] == pytest.approx(1000 / (80 * 1.02))
    # Two of five censored: the median is still a number, the interval's top end is not.
    steeper[-3] = {**steeper[-3], "censored": False, "samples_needed": 320.0 * 1.02}
    entry = next(e for e in family_ratios(random + steeper) if e["heads"] == 4)
    assert entry["ratio"] == pytest.approx(4.0) and math.isinf(entry["high"])


def test_the_grid_refuses_bad_values_and_keeps_every_cell():
    table = get_experiment("samples-to-eps").grid().table
    cells = samples_to_eps_cells(table)
    assert get_experiment("samples-to-eps").count(table) == len(cells)
    with pytest.raises(ValueError, match="output"):
        samples_to_eps_cells({**table, "learners": [{**table["learners"][0], "output": "final"}]})
    with pytest.raises(ValueError, match="resolution"):
        samples_to_eps_cells({**table, "learners": [{**table["learners"][0], "resolution": 1.0}]})


CELL = {"learner": "gradient", "family": "random", "dim": 4, "length": 2, "noise": 0.0, "heads": 1,
        "output": "polished", "eps": 1e-6, "budget": 64, "start": 4, "resolution": 1.25,
        "coarse_seconds": 600.0, "confirm": 2.0, "seed": 3}


def test_a_cell_resumes_from_its_stored_probes(tmp_path):
    first = run_samples_to_eps_cell(CELL, checkpoint_dir=tmp_path)
    log = json.loads(first["probe_log"])
    assert first["probes"] == len(log) == len((tmp_path / "probes.jsonl").read_text().splitlines())
    assert first["resumed_probes"] == 0 and not first["censored"]
    needed = first["samples_needed"]
    errors = {probe["samples"]: probe["polished_error"] for probe in log}
    assert errors[needed] <= 1e-6 and errors[first["samples_lower"]] > 1e-6
    again = run_samples_to_eps_cell(CELL, checkpoint_dir=tmp_path)
    assert again["resumed_probes"] == again["probes"]
    assert {key: again[key] for key in ("samples_needed", "samples_lower", "probe_log")} == {
        key: first[key] for key in ("samples_needed", "samples_lower", "probe_log")}


def test_quick_sweep_exports_the_search_columns_and_plots(tmp_path):
    db, out = tmp_path / "q.db", tmp_path / "q.csv"
    assert main(["sweep", "samples-to-eps", "--quick", "--db", str(db), "--workers", "1", "--quiet"]) == 0
    assert main(["export", "samples-to-eps", "--db", str(db), "--out", str(out), "--quiet"]) == 0
    with out.open() as handle:
        rows = list(csv.DictReader(handle))
    assert rows and set(EXPORT_COLUMNS) <= set(rows[0])
    assert all(row["censored"] == "False" and int(row["samples_needed"]) > int(row["samples_lower"]) for row in rows)
    assert main(["plot", "samples-to-eps", "--db", str(db), "--out", str(tmp_path / "fig"), "--quiet"]) == 0
    assert (tmp_path / "fig" / "samples-to-eps.png").is_file()
    assert "every probe" in (tmp_path / "fig" / "samples-to-eps.txt").read_text()


def test_a_law_fitted_without_an_m_predicts_it_and_a_censored_median_is_not_a_number():
    from mhalearn.experiments.growth_laws import held_out_table

    rows = _rows(lambda m: 20.0 * m ** 1.5, [1, 2, 4, 8, 16])
    check = next(entry for entry in held_out_table(rows) if entry["heads"] == 16 and entry["form"] == "power")
    assert check["fitted_on"] == "1,2,4,8" and check["ratio"] == pytest.approx(1.0, abs=0.02)
    exponential = next(entry for entry in held_out_table(rows) if entry["heads"] == 16
                       and entry["form"] == "exponential")
    assert exponential["ratio"] > 1.5  # the wrong form misses the held-out m
    for row in rows:
        if row["heads"] == 16:
            row.update(censored=True, samples_needed=None)
    check = next(entry for entry in held_out_table(rows) if entry["heads"] == 16 and entry["form"] == "power")
    assert check["ratio"] is None and math.isinf(check["measured"])


def test_the_runs_readme_quotes_the_committed_rows_provenance():
    """runs/samples-to-eps/README.md states which code computed its rows as their own columns say."""
    from pathlib import Path

    from mhalearn.experiments.learners_vs_m import provenance_statement

    root = Path(__file__).resolve().parents[1]
    path = root / "runs" / "samples-to-eps" / "samples-to-eps.db"
    statement = provenance_statement(path, "samples-to-eps").split(": ", 1)[1]
    page = " ".join((root / "runs" / "samples-to-eps" / "README.md").read_text(encoding="utf-8").split())
    assert f"| samples-to-eps.db | {statement} |" in page, statement
