"""A grid is checked whole before any work: every bad value named in one line, and a bound on its cells."""

import tracemalloc

import pytest
from toy_experiments import toy_experiment

from mhalearn.cli import main
from mhalearn.experiments.registry import (
    EXPERIMENTS,
    GRID_NAMES,
    MAX_CELLS,
    Grid,
    axes_count,
    get_experiment,
    load_experiments,
)
from mhalearn.experiments.runner import grid_cells, run_sweep

TOY = "toy-bounded"
LEARNING = """learner = ["moment", "bogus"]
family = "nope"
heads = ["two", 2.5, true, 1]
dim = 4
length = 4
samples = [-5, 200]
noise = -1.0
seed = [0]
"""


@pytest.fixture()
def toy():
    EXPERIMENTS[TOY] = toy_experiment(TOY)
    yield TOY
    EXPERIMENTS.pop(TOY, None)


def _grid(experiment: str, table: dict) -> Grid:
    return Grid(experiment, "full", table, "<test>", "")


def test_every_bad_value_of_a_grid_is_named_in_one_line_before_the_store_is_touched(tmp_path, capsys):
    path = tmp_path / "bad.toml"
    path.write_text(LEARNING)
    db = tmp_path / "results.db"
    assert main(["sweep", "error-vs-samples", "--grid", str(path), "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err, err
    for fragment in ("learner: expected one of", "'bogus'", "family: expected one of", "'nope'",
                     "heads: expected an integer >= 1, received 'two'", "received 2.5", "received True",
                     "samples: expected an integer >= 1, received -5", "noise: expected a real number in [0, inf), "
                     "received -1.0"):
        assert fragment in err, (fragment, err)
    assert "received 1;" not in err and "received 200" not in err  # good values are not named
    assert not db.exists()


@pytest.mark.parametrize("experiment, table, fragments", [
    ("sculpt-vs-m", dict(heads=[0, 1], dim=12, length=4, samples=[1000], seed=-1),
     ["heads: expected an integer >= 1, received 0", "seed: expected an integer >= 0, received -1"]),
    ("random-features", dict(law="cube", dim=4, keys=4, heads=2, samples=[64], seed=0, floor_heads=[0],
                             floor_seed=0, floor_factor=6, model=["mlp", "rnn"]),
     ["law: expected one of 'sphere', 'boolean', received 'cube'", "floor_heads: expected an integer >= 1",
      "model: expected one of", "'rnn'"]),
    ("sparse-variables", dict(sparsity=0, lengths=[16, -4], target=1.5, start=8, max_samples=64, per_octave=2,
                              series=[{"function": "xor", "student": "mlp", "seeds": 0}]),
     ["sparsity: expected an integer >= 1, received 0", "lengths: expected an integer >= 1, received -4",
      "target: expected a real number in (0, 1], received 1.5", "series[0] function: expected one of",
      "'xor'", "series[0] seeds: expected an integer >= 1, received 0"]),
    # Issue 74: a first probe above the cap, as samples-to-eps's budget below start × m, probed only the cap.
    ("sparse-variables", dict(sparsity=2, lengths=[16], target=0.9, start=128, max_samples=64, per_octave=2,
                              series=[{"function": "parity", "student": "mlp", "seeds": 1}]),
     ["start = 128 is above max_samples = 64, the largest n probed"]),
])
def test_each_experiment_names_every_bad_value_at_once(experiment, table, fragments):
    with pytest.raises(ValueError) as caught:
        grid_cells(experiment, _grid(experiment, table))
    message = str(caught.value)
    assert "\n" not in message and "(in <test> [full])" in message
    for fragment in fragments:
        assert fragment in message, (fragment, message)


def test_a_grid_of_too_many_cells_is_refused_before_it_is_expanded():
    # 10⁷ cells: expanding them took 45 s before a MemoryError; counting them is arithmetic.
    table = dict(learner=["moment"], family="random", heads=[1], dim=4, length=4, noise=0.1,
                 samples=list(range(1000, 11_000)), seed=list(range(1000)))
    grid = _grid("error-vs-samples", table)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError, match=r"has 10,000,000 cells of 'error-vs-samples', more than the bound of "
                                             r"1,000,000 .*--max-cells"):
            grid_cells("error-vs-samples", grid)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2 ** 20  # the cells were counted, not built: 10⁷ cell dicts would take gigabytes
    assert MAX_CELLS == 1_000_000


def test_the_cell_bound_can_be_raised_or_lowered(tmp_path, toy, capsys):
    grid = EXPERIMENTS[TOY].grid()  # 4 × 3 cells
    with pytest.raises(ValueError, match="has 12 cells of 'toy-bounded', more than the bound of 11"):
        grid_cells(TOY, grid, max_cells=11)
    assert len(grid_cells(TOY, grid, max_cells=12)) == 12
    db = tmp_path / "results.db"
    assert main(["sweep", TOY, "--db", str(db), "--quiet", "--max-cells", "11"]) == 2
    assert "more than the bound of 11" in capsys.readouterr().err and not db.exists()
    with pytest.raises(ValueError, match="max_cells: expected an integer >= 1"):
        run_sweep(TOY, db, max_cells=0, progress=False)


def test_every_experiment_counts_its_cells_without_expanding_them():
    # The count the bound is checked on is what the expansion makes (at most: learning grids leave
    # out under-determined cells).
    for name, experiment in load_experiments().items():
        for table_name in GRID_NAMES:
            try:
                grid = experiment.grid(table_name == "quick")
            except ValueError:
                continue
            count = (experiment.count or axes_count)(grid.table)
            cells = len(experiment.expand(grid.table))
            if name in ("error-vs-samples", "heads-dependence", "teacher-families"):
                assert cells <= count, (name, table_name)
            else:
                assert cells == count, (name, table_name)
    assert get_experiment("teacher-families").count is not None


# ---------------------------------------------------------------- grids checked whole, under their own name (issue 74)

SAMPLES_TO_EPS = """family = "random"
noise = 0.0
seed = 0
shapes = [{ dim = 6, length = 3 }]

[[learners]]
learner = "gradient"
heads = 1
output = "polished"
eps = 1e-6
budget = 200
start = 8
"""


def _sweep_refused(tmp_path, capsys, experiment, text, *options):
    """The one line ``mhalearn sweep`` refuses the grid ``text`` with (exit 2, the results file untouched)."""
    path, db = tmp_path / "grid.toml", tmp_path / "results.db"
    path.write_text(text)
    assert main(["sweep", experiment, "--grid", str(path), "--db", str(db), "--quiet", *options]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and not db.exists(), err
    return err


@pytest.mark.parametrize("change, fragment", [
    # Row 8: every probe up to the budget, then a censored row and exit 0.
    (("eps = 1e-6", "eps = 0.0"), "eps: expected a real number in (0, inf), received 0.0"),
    # Row 9: one probe at the budget, then a censored row.
    (("budget = 200", "budget = 5"), "budget = 5 is below the first probe start × heads = 8 × 1 = 8; raise budget"),
    # Row 10: each cell stored as a failed row (MemoryBudgetError), exit 1.
    (("budget = 200", "budget = 100000000000"), "budget: 100000000000 labelled sequences of 3 × 6 entries would "
                                                "take 39.3 TiB, more than the memory budget"),
    # Row 11: named learners-vs-m.
    (("shapes = [{ dim = 6, length = 3 }]", "shapes = []"), "grid: samples-to-eps needs 'shapes', a non-empty list"),
])
def test_a_samples_to_eps_grid_that_cannot_run_is_refused_in_one_line_before_work(tmp_path, capsys, change,
                                                                                 fragment):
    err = _sweep_refused(tmp_path, capsys, "samples-to-eps", SAMPLES_TO_EPS.replace(*change))
    assert fragment in err and "learners-vs-m" not in err, err


def test_an_empty_quick_table_or_grid_file_says_so_under_the_experiments_name(tmp_path, capsys):
    # Rows 12-13: "learners-vs-m needs 'shapes'" for an empty [quick], "has no [quick] table (it has ['full'])"
    # for an empty file.
    err = _sweep_refused(tmp_path, capsys, "samples-to-eps", "[full]\nseed = 0\n[quick]\n", "--quick")
    assert "[quick] is an empty table: it sets none of the keys of 'samples-to-eps'" in err, err
    for quick in ((), ("--quick",)):
        err = _sweep_refused(tmp_path, capsys, "samples-to-eps", "# nothing yet\n", *quick)
        assert "grid.toml is empty: it holds no [full] or [quick] table and no key" in err, err


@pytest.mark.parametrize("experiment, text", [
    ("error-vs-samples", 'learner = "gradient"\nfamily = "random"\nheads = 1\ndim = 6\nlength = 3\n'
                         'samples = [200, 100000000000]\nnoise = 0.0\nseed = 0\n'),
    ("learners-vs-m", 'family = "random"\nnoise = 0.0\nseed = 0\nshapes = [{ dim = 6, length = 3 }]\n'
                      '[[learners]]\nlearner = "gradient"\nheads = 1\nsamples = [200, 100000000000]\n'),
])
def test_data_no_cell_can_hold_are_refused_with_the_grid(tmp_path, capsys, experiment, text):
    err = _sweep_refused(tmp_path, capsys, experiment, text)
    assert f"grid: {experiment!r} cannot run this table: samples: 100000000000 labelled sequences" in err, err
    assert "samples: 200 " not in err
