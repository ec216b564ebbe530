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
