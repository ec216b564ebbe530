"""Bad input refused before any work, in a message that names what is wrong.

Each test reproduces a fault a user met: a grid whose cells are all dropped
(exit 0, "0 cells"), samples = 2⁶³ − 1 run to a failure row, a hard-linked
results file that bypassed the lock, and messages that named the wrong cause.
"""

import os
from pathlib import Path

import numpy as np
import pytest

import mhalearn
from mhalearn.cli import main


def _grid(tmp_path, text):
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


def test_a_grid_whose_cells_are_all_dropped_is_refused(tmp_path, capsys):
    grid = _grid(tmp_path, '[full]\nlearner = "gradient"\nfamily = "random"\nheads = 1\ndim = 4\nlength = 4\n'
                           'samples = [1]\nnoise = 0.0\nseed = 0\n')
    code = main(["sweep", "error-vs-samples", "--db", str(tmp_path / "rows.db"), "--grid", str(grid), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "16 labels for 32 unknowns" in err and "raise samples" in err, err
    assert not (tmp_path / "rows.db").exists()


@pytest.mark.parametrize("experiment, table", [
    ("sculpt-vs-m", "heads = 1\ndim = 8\nlength = 3\nseed = 0\n"),
    ("error-vs-samples", 'learner = "gradient"\nfamily = "random"\nheads = 1\ndim = 4\nlength = 2\nnoise = 0.0\n'
                         'seed = 0\n'),
])
def test_samples_beyond_64_bit_counts_are_refused_up_front(tmp_path, capsys, experiment, table):
    grid = _grid(tmp_path, f"[full]\n{table}samples = [{2**63 - 1}]\n")
    code = main(["sweep", experiment, "--db", str(tmp_path / "rows.db"), "--grid", str(grid), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"samples = {2**63 - 1}" in err and "64-bit" in err, err
    assert not (tmp_path / "rows.db").exists()


def test_a_hard_linked_results_file_is_refused(tmp_path, capsys):
    from mhalearn.experiments.store import ResultStore

    first = tmp_path / "a.db"
    with ResultStore(first):
        pass
    os.link(first, tmp_path / "b.db")
    grid = _grid(tmp_path, "[full]\nheads = 1\ndim = 8\nlength = 3\nsamples = 500\nseed = 0\n")
    code = main(["sweep", "sculpt-vs-m", "--db", str(tmp_path / "b.db"), "--grid", str(grid), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "2 hard links" in err and "nothing was computed" in err, err


def test_too_many_heads_are_named_as_the_cause():
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(1, 12, rng=0), 1000, 4, rng=0)
    with pytest.raises(ValueError, match=r"^heads: 1000000000 heads of 12 × 12 matrices have 288,000,000,000 "
                                         r"unknowns"):
        mhalearn.SculptLearner(10**9).fit(X, Y)


@pytest.mark.parametrize("value", [np.nan, np.inf])
@pytest.mark.parametrize("learner", ["SculptLearner", "MomentLearner"])
def test_non_finite_entries_on_a_boolean_learner_are_called_non_finite(learner, value):
    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(1, 6, rng=0), 200, 3, rng=0)
    X[3, 1, 2] = value
    with pytest.raises(ValueError, match=r"^X: expected finite values, received 1 non-finite entries$"):
        getattr(mhalearn, learner)(1).fit(X, Y)


@pytest.mark.parametrize("kind", ["a FIFO", "a directory"])
def test_a_grid_that_is_not_a_file_is_named_as_what_it_is(tmp_path, capsys, kind):
    grid = tmp_path / "grid.toml"
    os.mkfifo(grid) if kind == "a FIFO" else grid.mkdir()
    code = main(["sweep", "sculpt-vs-m", "--db", str(tmp_path / "rows.db"), "--grid", str(grid), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and f"{str(grid)!r} is {kind}" in err and "does not exist" not in err, err


def test_an_unknown_option_is_reported_before_a_missing_one(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["sweep", "--bogus"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "unrecognized arguments: --bogus" in err and "--db" not in err, err


def test_a_writable_file_in_an_unwritable_folder_names_the_folder(tmp_path, monkeypatch):
    # Root passes every permission bit, so the folder's refusal is simulated where the check asks.
    from mhalearn import _files

    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "model.npz").write_bytes(b"")
    access = os.access
    monkeypatch.setattr(_files.os, "access", lambda path, mode: Path(path) != folder and access(path, mode))
    with pytest.raises(ValueError, match=r"its folder .*folder' is not writable") as refused:
        _files.output_target(folder / "model.npz", "out")
    assert f"{str(folder / 'model.npz')!r} is not writable" not in str(refused.value)


def test_dask_arrays_of_unknown_chunk_sizes_are_named_as_such():
    # Issue 74, row 7: a boolean mask leaves NaN sizes, and "expected shape (nan, 4, 12) to match X,
    # received (nan, 4, 12)" named neither the cause nor the cure.
    import dask.array as da

    X, Y = mhalearn.make_dataset(mhalearn.sample_teacher(2, 12, rng=0), 2000, 4, rng=0)
    mask = da.from_array(np.arange(2000) % 3 != 0, chunks=500)  # a lazy mask: its rows are unknown until computed
    lazy = [da.from_array(array, chunks=(500, -1, -1))[mask] for array in (X, Y)]
    with pytest.raises(ValueError, match=r"^X: expected a Dask array of known chunk sizes, received shape "
                                         r"\(nan, 4, 12\) .* call X = X.compute_chunk_sizes\(\) first$"):
        mhalearn.SculptLearner(2).fit(*lazy)
    with pytest.raises(ValueError, match=r"^Y: .* call Y = Y.compute_chunk_sizes\(\) first$"):
        mhalearn.SculptLearner(2).fit(lazy[0].compute_chunk_sizes(), lazy[1])
