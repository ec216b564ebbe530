"""The ``mhalearn`` command: subcommands, clean errors for bad input, exit codes."""

import io
import math
import subprocess
import sys

import numpy as np
import pytest
from toy_experiments import toy_cli
from toy_experiments import toy_experiment as make_toy_experiment

from mhalearn import MultiHeadAttention, cli
from mhalearn._progress import ProgressLines, StepProgress
from mhalearn.cli import commands, main
from mhalearn.cli.parser import _parameter_help, build_parser
from mhalearn.cli.settings import learner_hyperparameters
from mhalearn.experiments import EXPERIMENTS
from mhalearn.experiments.store import ResultStore
from mhalearn.learners import LEARNERS


@pytest.fixture
def toy_experiment():
    EXPERIMENTS["toy-cli"] = make_toy_experiment("toy-cli")
    yield "toy-cli"
    EXPERIMENTS.pop("toy-cli", None)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_unknown_experiment_lists_the_valid_ones_without_traceback(capsys, tmp_path):
    for command in (["sweep", "no-such", "--db", str(tmp_path / "r.db")],
                    ["plot", "no-such", "--db", str(tmp_path / "r.db"), "--out", str(tmp_path)]):
        code, out, err = run(capsys, *command)
        assert code == 2
        assert err.startswith("mhalearn: error: experiment: expected one of [")
        assert "'error-vs-samples'" in err and "'heads-dependence'" in err and "Traceback" not in err
    assert not (tmp_path / "r.db").exists()


def test_unknown_learner_lists_the_valid_ones(capsys):
    code, _, err = run(capsys, "learn", "--learner", "no-such")
    assert code == 2 and "learner: expected one of [" in err
    for name in LEARNERS:
        assert repr(name) in err


def test_unknown_family_is_reported_cleanly(capsys, tmp_path):
    if "gradient" not in LEARNERS:
        pytest.skip("needs the gradient learner")
    code, _, err = run(capsys, "learn", "--learner", "gradient", "--family", "no-such", "--quiet",
                       "--out", str(tmp_path / "m.npz"))
    assert code == 2 and "family: expected one of [" in err and "'random'" in err


def test_sweep_refuses_a_file_that_is_not_a_results_file(capsys, tmp_path, toy_experiment):
    path = tmp_path / "thesis.db"
    path.write_bytes(b"precious data \x00\x01\x02" * 100)
    before = path.read_bytes()
    code, _, err = run(capsys, "sweep", toy_experiment, "--db", str(path), "--quiet")
    assert code == 2 and "not an SQLite database" in err
    assert path.read_bytes() == before


def test_plot_needs_an_existing_results_file(capsys, tmp_path, toy_experiment):
    code, _, err = run(capsys, "plot", toy_experiment, "--db", str(tmp_path / "none.db"), "--out", str(tmp_path))
    assert code == 2 and "no results file" in err
    assert not (tmp_path / "none.db").exists()


def test_sweep_then_plot_through_the_command(capsys, tmp_path, toy_experiment):
    db = tmp_path / "results.db"
    code, out, _ = run(capsys, "sweep", toy_experiment, "--quick", "--db", str(db), "--workers", "1", "--quiet")
    assert code == 0 and "9 cells, 0 already stored, 9 computed (0 failed)" in out
    code, out, _ = run(capsys, "sweep", toy_experiment, "--quick", "--db", str(db), "--quiet")
    assert code == 0 and "9 already stored, 0 computed" in out
    code, out, _ = run(capsys, "plot", toy_experiment, "--db", str(db), "--out", str(tmp_path / "figs"))
    assert code == 0 and "9 rows" in out
    assert (tmp_path / "figs" / "toy.txt").read_text() == "9 rows\n"
    with ResultStore(db, create=False) as store:
        assert store.count(toy_experiment) == 9


def test_dask_backend_needs_a_scheduler(capsys, tmp_path, toy_experiment):
    code, _, err = run(capsys, "sweep", toy_experiment, "--db", str(tmp_path / "r.db"), "--backend", "dask")
    assert code == 2 and "scheduler" in err


@pytest.mark.skipif("gradient" not in LEARNERS, reason="needs the gradient learner")
def test_learn_takes_the_learners_hyperparameters_as_flags_and_saves_the_model(capsys, tmp_path):
    names = {parameter.name for parameter in learner_hyperparameters(LEARNERS["gradient"])}
    assert "max_iter" in names and "heads" not in names and "random_state" not in names
    args = build_parser("gradient").parse_args(["learn", "--learner", "gradient", "--max-iter", "40"])
    assert args.hp_max_iter == 40
    out_file = tmp_path / "model.npz"
    code, out, _ = run(capsys, "learn", "--learner", "gradient", "-m", "1", "-d", "3", "-k", "3", "-n", "100",
                       "--max-iter", "200", "--out", str(out_file), "--teacher-out", str(tmp_path / "t.npz"),
                       "--quiet")
    assert code == 0 and "test error" in out and f"model saved to {out_file}" in out
    model = MultiHeadAttention.load(out_file)
    assert (model.heads, model.dim) == (1, 3)
    assert MultiHeadAttention.load(tmp_path / "t.npz").heads == 1


@pytest.mark.parametrize("learner", ["moment", "gradient"])
def test_learn_prints_the_learners_phase_table(capsys, tmp_path, learner):
    flags = {"moment": ["--set", "search.max_candidates=2000", "--set", "search.refine_iter=50"],
             "gradient": ["--max-iter", "50"]}[learner]
    code, out, _ = run(capsys, "learn", "--learner", learner, "-m", "1", "-d", "4", "-k", "3", "-n", "300",
                       *flags, "--out", str(tmp_path / "model.npz"))
    assert code == 0 and "phase         seconds  figures" in out
    assert ("span from the moment route" in out) if learner == "moment" else ("lbfgs: kept restart 0" in out)
    assert "against the teacher:" in out and "observer total" in out


def test_bench_lists_the_scripts(capsys):
    code, out, _ = run(capsys, "bench", "--list")
    assert code == 0 and "kernels" in out and "_common" not in out
    code, _, err = run(capsys, "bench", "no-such-script")
    assert code == 2 and "bench script: expected one of [" in err


def test_bench_finds_the_scripts_of_the_current_checkout_from_an_installed_package(monkeypatch, tmp_path):
    installed = tmp_path / "site-packages" / "mhalearn"
    monkeypatch.setattr(commands, "__file__", str(installed / "cli" / "commands.py"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="^bench: no bench/ directory"):
        commands.bench_scripts()
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "_common.py").write_text("")
    (tmp_path / "bench" / "kernels.py").write_text("")
    assert commands.bench_scripts() == {"kernels": tmp_path / "bench" / "kernels.py"}


def test_console_script_reports_errors_with_exit_status_2():
    result = subprocess.run([sys.executable, "-m", "mhalearn.cli", "sweep", "no-such", "--db", "x.db"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "experiment: expected one of" in result.stderr


@pytest.mark.slow
def test_quick_sweep_killed_with_sigkill_resumes_to_the_uninterrupted_rows(tmp_path):
    """The acceptance run: `mhalearn sweep error-vs-samples --quick`, kill -9, resume, compare."""
    import os
    import signal
    import sqlite3
    import time

    def rows(path):
        with ResultStore(path, create=False) as store:
            # Timings (every *_seconds) are measured afresh; every other field must be the same.
            return {record["cell_key"]: {key: value for key, value in record["metrics"].items()
                                         if not key.endswith("_seconds")}
                    for record in store.iter_records("error-vs-samples")}

    command = [sys.executable, "-m", "mhalearn.cli", "sweep", "error-vs-samples", "--quick", "--quiet", "--db"]
    killed = tmp_path / "killed.db"
    process = subprocess.Popen(command + [str(killed)], start_new_session=True)
    deadline = time.monotonic() + 600
    count = 0
    while time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.5)
        try:
            connection = sqlite3.connect(f"file:{killed}?mode=ro", uri=True)
            count = connection.execute("SELECT COUNT(*) FROM results").fetchone()[0]
            connection.close()
        except sqlite3.Error:
            continue
        if count >= 10:
            break
    os.kill(process.pid, signal.SIGKILL)  # the coordinator only, as `kill -9 PID` does
    process.wait()
    assert process.returncode == -signal.SIGKILL
    partial = rows(killed)
    assert 10 <= len(partial)
    assert subprocess.run(command + [str(killed)], capture_output=True, text=True).returncode == 0
    uninterrupted = tmp_path / "uninterrupted.db"
    assert subprocess.run(command + [str(uninterrupted)], capture_output=True, text=True).returncode == 0
    resumed, reference = rows(killed), rows(uninterrupted)
    with ResultStore(killed, create=False) as store:
        assert store.count("error-vs-samples") == len(reference) == len(resumed)  # no duplicates, none lost
    assert resumed == reference  # same cells, same metrics (timing aside), partial rows kept
    assert all(resumed[key] == value for key, value in partial.items())


@pytest.mark.parametrize("arguments, message", [
    (["learn", "-m", "0"], "heads: expected an integer >= 1, received 0"),
    (["learn", "-d", "0"], "dim: expected an integer >= 1, received 0"),
    (["learn", "-k", "0"], "length: expected an integer >= 1, received 0"),
    (["learn", "-n", "0"], "samples: expected an integer >= 1, received 0"),
    (["learn", "--test-samples", "0"], "test_samples: expected an integer >= 1, received 0"),
    (["learn", "--noise", "-1"], "noise: expected a real number in [0, inf), received -1.0"),
    (["learn", "--noise", "nan"], "noise: expected a real number in [0, inf), received nan"),
    (["learn", "--seed", "-1"], "seed: expected an integer >= 0, received -1"),
    (["learn", "--learner", "gradient", "--max-iter", "0"], "max_iter: expected an integer >= 1, received 0"),
    (["learn", "-k", "1"], "X: expected sequences of length k >= 2 (with one token every attention pattern is 1 "
                           "and Θ is not identifiable), received k = 1"),
    (["demo", "--samples", "0"], "samples: expected an integer >= 1, received 0"),
    (["demo", "--seed", "-1"], "seed: expected an integer >= 0, received -1"),
])
def test_bad_arguments_are_the_only_output_and_come_before_any_work(capsys, tmp_path, monkeypatch, arguments,
                                                                     message):
    planted = []

    def plant_instance(**setting):
        planted.append(setting)
        raise AssertionError("planted a teacher before checking the arguments")

    monkeypatch.setattr("mhalearn.evaluation.plant_instance", plant_instance)
    out_flag = ["--out", str(tmp_path / ("model.npz" if arguments[0] == "learn" else "figures"))]
    code, out, err = run(capsys, *arguments, *out_flag)
    assert (code, out, err) == (2, "", f"mhalearn: error: {message}\n")
    assert planted == [] and list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------- progress

def _run_piped(command: list[str], **options) -> tuple[int, str, str]:
    """Run ``command`` with stdout and stderr to pipes; the output decoded as is (text mode would turn \\r into \\n)."""
    result = subprocess.run(command, capture_output=True, timeout=300, **options)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def test_progress_on_a_stream_that_is_not_a_terminal_is_one_plain_line_per_step(tmp_path):
    code, out, err = _run_piped([sys.executable, "-m", "mhalearn.cli", "learn", "--learner", "gradient", "-m", "1",
                                 "-d", "3", "-k", "3", "-n", "100", "--max-iter", "20",
                                 "--out", str(tmp_path / "model.npz")], cwd=tmp_path)
    assert code == 0, err
    assert "\r" not in out and "\r" not in err
    lines = err.splitlines()
    assert [line.split(" [")[0] for line in lines] == [
        "learn: planting a random teacher, drawing n = 100", "learn: fitting gradient", "learn: measuring",
        "learn: done"]
    assert [line.split(" [")[1].split(",")[0] for line in lines] == ["0/3 steps", "1/3 steps", "2/3 steps",
                                                                     "3/3 steps"]


def test_a_sweep_on_a_stream_that_is_not_a_terminal_writes_lines_not_carriage_returns(tmp_path):
    name = "toy-progress"
    code, out, err = _run_piped(toy_cli(name, "toy", "sweep", name, "--quick", "--workers", "1", "--db",
                                        str(tmp_path / "results.db")))
    assert code == 0, err
    assert "\r" not in out and "\r" not in err
    assert err.splitlines()[-1].startswith(f"{name} [9/9 cells, ") and err.splitlines()[-1].endswith(", failed=0]")
    assert "9 cells, 0 already stored, 9 computed" in out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_on_a_terminal_is_a_tqdm_bar(monkeypatch):
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with StepProgress(["one", "two"], desc="test") as progress:
        for name in ("one", "two"):
            with progress.step(name):
                pass
    assert "\r" in terminal.getvalue() and "test: done |" in terminal.getvalue()
    assert "2/2 steps" in terminal.getvalue()


@pytest.mark.parametrize("interval, expected", [
    (0.0, ["x [2/4 cells, 00:00 elapsed, ETA 00:00, failed=0]", "x [3/4 cells, 00:00 elapsed, ETA 00:00, failed=1]",
           "x [4/4 cells, 00:00 elapsed, failed=1]"]),
    (math.inf, ["x [4/4 cells, 00:00 elapsed, failed=1]"]),
])
def test_progress_lines_come_at_most_every_interval_and_at_the_end(interval, expected):
    stream = io.StringIO()
    lines = ProgressLines(4, initial=1, desc="x", unit="cell", interval=interval, stream=stream)
    for failed in (0, 1, 1):
        lines.set_postfix(failed=failed, refresh=False)
        lines.update(1)
    lines.close()
    lines.close()
    assert stream.getvalue().splitlines() == expected


@pytest.mark.parametrize("checkpoint", [None, "kept"])
def test_an_interrupted_learn_says_what_it_kept(capsys, tmp_path, monkeypatch, checkpoint):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setitem(commands.COMMANDS, "learn", interrupted)
    extra = [] if checkpoint is None else ["--checkpoint", str(tmp_path / checkpoint)]
    assert cli.main(["learn", "--learner", "sculpt", *extra]) == cli.EXIT_INTERRUPTED
    message = capsys.readouterr().err
    if checkpoint is None:
        assert message == "mhalearn: interrupted (nothing was saved)\n"
    else:
        assert f"finished phases are kept in {tmp_path / checkpoint}; run the same command to resume" in message


def test_learn_help_describes_every_hyperparameter_of_the_sculpt_learner(capsys):
    from mhalearn import SculptLearner

    helps = _parameter_help(SculptLearner)
    names = [parameter.name for parameter in learner_hyperparameters(SculptLearner)]
    assert [name for name in names if not helps.get(name)] == []
    assert helps["checkpoint"].startswith("A directory where phases 1–4")


def test_learn_help_fits_two_screens_and_points_to_the_grouped_settings(capsys):
    # Help texts holding "%" (a share of rows) must reach argparse escaped.
    with pytest.raises(SystemExit) as stop:
        main(["learn", "--learner", "sculpt", "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) <= 80, len(out.splitlines())
    text = " ".join(out.split())
    assert "--set GROUP.NAME=VALUE one setting of the groups body, search" in text
    assert "--help-settings GROUP" in text and "--span-route SPAN_ROUTE" in text and "--quantile" not in text


@pytest.mark.parametrize("learner, group, fragments", [
    ("sculpt", "body", ["body.quantile (default: None)", "agreement rows are 1–4 % of all rows",
                        "body.hull_trim (default: 3.0)"]),
    ("sculpt", "search", ["search.net_slab (default: 0.05) On the body's route, the net keeps only its points"]),
    ("moment", "search", ["search.max_candidates (default: 200000) Budget of candidate tuples scored."]),
])
def test_help_settings_lists_a_groups_settings_with_their_defaults(capsys, learner, group, fragments):
    with pytest.raises(SystemExit) as stop:
        main(["learn", "--learner", learner, "--help-settings", group])
    assert stop.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for fragment in fragments:
        assert fragment in text


def test_set_takes_a_setting_as_a_python_literal_by_either_spelling():
    from mhalearn.cli.settings import parse_setting

    groups = ("body", "search")
    assert parse_setting("search.net_slab=None", groups) == ("search__net_slab", None)
    assert parse_setting("search__net_slab=0.1", groups) == ("search__net_slab", 0.1)
    assert parse_setting("body.estimate_noise=false", groups) == ("body__estimate_noise", False)
    assert parse_setting("body.span_point=min_norm", groups) == ("body__span_point", "min_norm")
    for bad in ("quantile=0.1", "body.quantile", "net.kept_candidates=2"):
        with pytest.raises(ValueError, match=r"^set: expected GROUP.NAME=VALUE with GROUP one of \['body', 'search'\]"):
            parse_setting(bad, groups)


def test_learn_reaches_a_grouped_setting_and_refuses_a_bad_one_before_work(capsys, tmp_path):
    common = ["learn", "--learner", "moment", "-m", "1", "-d", "4", "-k", "3", "-n", "300",
              "--set", "search.refine=none", "--out", str(tmp_path / "model.npz"), "--quiet"]
    scored = []
    for extra in ([], ["--set", "search.max_candidates=5"]):
        code, out, _ = run(capsys, *common, *extra)
        assert code == 0, out
        scored.append(int(out.split(" candidates scored")[0].rsplit(", ", 1)[1]))
    assert scored[1] <= 5 < scored[0]
    code, out, err = run(capsys, *common, "--set", "search.kept_candidates=0")
    assert code == 2 and out == ""
    assert err == "mhalearn: error: kept_candidates: expected an integer in [1, 1000], received 0\n"
    code, _, err = run(capsys, *common, "--set", "body.quantile=0.1")
    assert code == 2 and "set: expected GROUP.NAME=VALUE with GROUP one of ['search']" in err



# ------------------------------------------- messages that name the argument

def test_learn_names_test_samples_when_the_test_draw_is_too_large(capsys, tmp_path):
    code, out, err = run(capsys, "learn", "--learner", "gradient", "-m", "1", "-d", "4", "-k", "4", "-n", "200",
                         "--quiet", "--test-samples", "10000000000", "--out", str(tmp_path / "m.npz"))
    assert code == 2 and err.startswith("mhalearn: error: test-samples: 10000000000 Boolean sequences"), err
    assert "lower test-samples" in err and out == ""


def test_the_moment_routes_memory_names_the_sequence_length_when_it_dominates(capsys, tmp_path):
    code, out, err = run(capsys, "learn", "-m", "1", "-d", "4", "-k", "100000", "-n", "200", "--quiet",
                         "--out", str(tmp_path / "m.npz"))
    assert code == 2 and "k = 100,000 tokens" in err and "lower k, the sequence length" in err, err
    assert "Gram" not in err


def test_attention_student_memory_names_embedding_dim():
    from mhalearn import AttentionStudent

    X = np.where(np.random.default_rng(0).random((8, 6)) < 0.5, -1, 1)
    with pytest.raises(MemoryError, match=r"^embedding_dim: embedding_dim = 100000000 .*lower embedding_dim"):
        AttentionStudent(embedding_dim=10 ** 8).fit(X, X[:, 0])


def test_status_of_an_experiment_neither_registered_nor_stored_exits_2(capsys, tmp_path, toy_experiment):
    db = tmp_path / "r.db"
    with ResultStore(db) as store:
        store.record(toy_experiment, {"a": 1}, {"value": 0.0})
    code, out, err = run(capsys, "sweep", "nope", "--status", "--db", str(db))
    assert code == 2 and err.startswith("mhalearn: error: experiment: expected a registered experiment or one "
                                        "stored in") and "'nope'" in err and out == ""
    assert run(capsys, "sweep", toy_experiment, "--status", "--db", str(db))[0] == 0


def test_an_unknown_option_before_the_command_is_named(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["--bogus"])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and "unrecognized arguments: --bogus" in err and "required" not in err
    with pytest.raises(SystemExit):
        main([])
    assert "the following arguments are required: COMMAND" in capsys.readouterr().err


def test_a_grid_file_that_is_not_utf8_is_named(capsys, tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_bytes(b"[quick]\nheads = [1]\n# \xff\n")
    code, out, err = run(capsys, "sweep", "sculpt-vs-m", "--db", str(tmp_path / "r.db"), "--grid", str(grid),
                         "--quick")
    assert code == 2 and err.startswith(f"mhalearn: error: grid: expected a TOML grid file in UTF-8, {str(grid)!r} "
                                        "has byte 0xff at offset 22"), err


def test_a_scheduler_address_of_another_protocol_is_named(capsys, tmp_path):
    code, out, err = run(capsys, "sweep", "sculpt-vs-m", "--db", str(tmp_path / "r.db"), "--backend", "dask",
                         "--scheduler", "http://127.0.0.1:8786")
    assert code == 2 and err.startswith("mhalearn: error: scheduler: expected an address such as") and \
        "'http://127.0.0.1:8786'" in err, err


def test_a_checkpoint_directory_that_cannot_be_created_is_refused_once_at_fit(recwarn):
    from mhalearn import SculptLearner, boolean_inputs, sample_teacher

    X = boolean_inputs(50, 4, 6, rng=0)
    with pytest.raises(ValueError, match=r"^checkpoint: cannot write '/proc/mhalearn-nope'"):
        SculptLearner(1, checkpoint="/proc/mhalearn-nope").fit(X, sample_teacher(1, 6, rng=0).predict(X))
    assert [str(warning.message) for warning in recwarn] == []


def test_relative_error_of_outputs_near_1e_300_is_the_ratio_not_all_zero():
    from mhalearn import boolean_inputs, relative_error, sample_teacher

    teacher = sample_teacher(2, 4, rng=0)
    tiny = MultiHeadAttention(teacher.thetas, teacher.ws * 1e-300)
    half = MultiHeadAttention(teacher.thetas, teacher.ws * 1e-300 / 2)  # F/2 exactly: error 1/4
    huge = MultiHeadAttention(teacher.thetas, teacher.ws * 1e300)
    X = boolean_inputs(20, 3, 4, rng=1)
    assert relative_error(half, tiny, X) == pytest.approx(0.25, rel=1e-12)
    assert relative_error(MultiHeadAttention(teacher.thetas, teacher.ws * 1e300 / 2), huge, X) == \
        pytest.approx(0.25, rel=1e-12)


# ----------------------------------------------------------- light commands

def _modules_after(*argv: str) -> tuple[int, list[str]]:
    """Exit status and the heavy modules imported by ``mhalearn ARGV`` in a fresh interpreter."""
    script = ("import sys\nfrom mhalearn.cli import main\ntry:\n    code = main(sys.argv[1:])\n"
              "except SystemExit as exit:\n    code = exit.code\n"
              "print(code, *sorted(m for m in ('numba', 'scipy', 'sklearn', 'pandas', 'pyarrow', 'matplotlib') "
              "if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True, timeout=300)
    code, *modules = result.stdout.split("\n")[-2].split()
    return int(code), modules


def test_version_imports_no_numerical_library():
    assert _modules_after("--version") == (0, [])


def test_export_checks_the_results_file_before_its_optional_dependencies(capsys, tmp_path, monkeypatch):
    checked = []
    monkeypatch.setattr(commands, "check_optional_dependencies", lambda *args: checked.append(args))
    code, out, err = run(capsys, "export", "toy", "--db", str(tmp_path / "none.db"), "--out",
                         str(tmp_path / "rows.parquet"))
    assert code == 2 and err.startswith("mhalearn: error: db: no results file at") and checked == []
