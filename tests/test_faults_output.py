"""Nothing finished is lost: a model or figure that cannot be written where asked, a full disk under a sweep.

Each test reproduces a fault a user met: the output folder removed (or a
FIFO or a folder put at the output path) while the fit ran, a demo under a
file-size limit, a sweep on a full disk.
"""

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from test_faults_io import full_disk_lock
from toy_experiments import toy_experiment

import mhalearn
from mhalearn.cli import main
from mhalearn.experiments import EXPERIMENTS

TOY = "toy-output-faults"
LEARN = ["learn", "--learner", "gradient", "-m", "1", "-d", "3", "-k", "2", "-n", "60", "--quiet"]


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(EXPERIMENTS, TOY, toy_experiment(TOY))
    return TOY


def _after_the_fit(monkeypatch, fault):
    """Run ``fault()`` as the fit ends, before the model is written."""
    import mhalearn.evaluation as evaluation

    fit_timed = evaluation.fit_timed

    def fitted_then_fault(*args, **kwargs):
        result = fit_timed(*args, **kwargs)
        fault()
        return result

    monkeypatch.setattr(evaluation, "fit_timed", fitted_then_fault)


@pytest.mark.parametrize("fault", ["folder removed", "fifo at the path", "folder at the path"])
def test_a_model_whose_output_is_taken_away_during_the_fit_is_kept(tmp_path, monkeypatch, capsys, fault):
    out, spare = tmp_path / "sub", tmp_path / "spare"
    out.mkdir()
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))
    target = out / "m.npz"
    _after_the_fit(monkeypatch, {"folder removed": out.rmdir, "fifo at the path": lambda: os.mkfifo(target),
                                 "folder at the path": target.mkdir}[fault])
    code = main([*LEARN, "--out", str(target)])
    err = capsys.readouterr().err
    kept = sorted(spare.glob("mhalearn-model-*.npz"))
    assert code != 0 and err.count("\n") == 1, err
    assert len(kept) == 1 and f"the model is kept in {kept[0]}" in err, err
    assert mhalearn.MultiHeadAttention.load(kept[0]).heads == 1


def test_a_demo_under_a_file_size_limit_below_its_figure_is_refused_before_the_fit(tmp_path):
    # ulimit -f 8: the figure (≈ 70 kB) cannot be written; the demo says so before fitting, instead of
    # fitting for half a minute and then losing the figure.
    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (8192, 8192))

    done = subprocess.run([sys.executable, "-c", "import sys; from mhalearn.cli import main; "
                           "sys.exit(main(['demo', '--quiet', '--out', 'd']))"], cwd=tmp_path,
                          capture_output=True, text=True, preexec_fn=limited, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(Path(mhalearn.__file__).parents[1])})
    assert done.returncode == 2 and "file-size limit of 8192 bytes (ulimit -f)" in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and "test error" not in done.stdout


def test_a_sweep_on_a_full_disk_says_so_in_one_line(tmp_path, toy, monkeypatch, capsys):
    # On a full disk the lock file opens, and its first bytes fail at the flush and again at the close.
    full_disk_lock(monkeypatch)
    code = main(["sweep", TOY, "--db", str(tmp_path / "results.db"), "--quiet", "--workers", "1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "the disk is full" in err, err
