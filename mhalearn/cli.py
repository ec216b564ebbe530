"""The ``mhalearn`` command (docs/design.md §5).

Subcommands::

    mhalearn demo                     plant an m = 2 teacher, learn it with SculptLearner, draw a figure
    mhalearn learn --learner NAME     one learner on one planted instance; the model is saved to a file
    mhalearn sweep NAME --db PATH     run (or resume) a named experiment into a SQLite results file
    mhalearn sweep --status --db PATH what a results file holds, by experiment and code version
    mhalearn plot NAME --db PATH --out DIR   render an experiment's figures from its results
    mhalearn export NAME --db PATH --format csv|parquet --out FILE   the stored rows as a table
    mhalearn bench [SCRIPT ...]       run the benchmark scripts in bench/

``mhalearn learn --learner NAME --help`` lists that learner's hyper-parameters
as flags.  Every subcommand takes ``--quiet`` (no progress bars, only the
results).  Bad input (unknown experiment, learner or family names, sizes,
seeds or hyper-parameters out of range, a file that is not a results file
or a damaged one, an output path that cannot be written, a missing optional
dependency such as pandas and pyarrow for ``export --format parquet``) is
the only output: one line with exit status 2, before any work starts; a sweep
that had to stop (results file unwritable, workers gone) exits with 1 and
keeps every stored row.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import math
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ._validation import (
    Integer,
    MissingDependencyError,
    Real,
    check_allowed,
    check_choice,
    check_optional_dependencies,
    check_output_directory,
    check_output_file,
)

EXIT_BAD_INPUT = 2
EXIT_FAILURE = 1
EXIT_INTERRUPTED = 130

#: Shapes and seed of the demo instance: m = 2 in a regime where Chen & Li's body
#: carries the span (d > k, enough sequences for agreement rows; bench/sculpt.py).
DEMO_SETTING = dict(learner="sculpt", heads=2, dim=12, length=4, samples=30_000, family="random", noise=0.0,
                    seed=0, test_samples=2000)
#: What each number of a ``demo`` or ``learn`` setting may be, checked before any work or output.
SETTING_CONSTRAINTS = {"heads": Integer(1), "dim": Integer(1), "length": Integer(1), "samples": Integer(1),
                       "test_samples": Integer(1), "noise": Real(0.0), "seed": Integer(0)}


# ------------------------------------------------------------------ progress

class StepProgress:
    """Progress over named steps: a bar whose elapsed time keeps ticking during a long step on a
    terminal, a line per step on any other stream (a log, CI, SLURM).

    Parameters
    ----------
    steps : sequence of str
        Names of the steps, in order.
    enabled : bool
        Show progress (False for ``--quiet``).
    """

    def __init__(self, steps: Sequence[str], *, enabled: bool = True, desc: str = "mhalearn"):
        from ._progress import ProgressLines, progress_bar

        self._desc = desc
        self._bar = progress_bar(len(steps), desc=desc, unit="step", enabled=enabled, interval=math.inf,
                                 bar_format="{desc} |{bar}| {n_fmt}/{total_fmt} steps "
                                            "[{elapsed} elapsed, ETA {remaining}]")
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        if enabled and not isinstance(self._bar, ProgressLines):
            self._ticker.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self._bar.refresh()

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Show ``name`` as the current step; advance the bar when the block ends."""
        self._bar.set_description_str(f"{self._desc}: {name}", refresh=True)
        yield
        self._bar.update(1)

    def close(self) -> None:
        self._stop.set()
        if self._ticker.is_alive():
            self._ticker.join()
        self._bar.set_description_str(f"{self._desc}: done", refresh=False)
        self._bar.close()

    def __enter__(self) -> "StepProgress":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


def _say(args, *lines: str) -> None:
    """Print unless ``--quiet``."""
    if not args.quiet:
        for line in lines:
            print(line)


# ------------------------------------------------------------ learner flags

def _parameter_help(cls: type) -> dict[str, str]:
    """One-line help per hyper-parameter, read from the class's NumPy docstring."""
    doc = inspect.getdoc(cls) or ""
    # The section ends at the next heading: one line, then a line of dashes ([^\n], not ".": re.S).
    section = re.search(r"Parameters\n-+\n(.*?)(?:\n\S[^\n]*\n-+\n|\Z)", doc, re.S)
    helps: dict[str, str] = {}
    if not section:
        return helps
    lines = section.group(1).splitlines()
    for index, line in enumerate(lines):
        match = re.match(r"^([A-Za-z_][\w, ]*?)\s*:\s*(.*)$", line)
        if not match:
            continue
        description = []
        for following in lines[index + 1:]:
            if not following.startswith(" "):
                break
            description.append(following.strip())
        kind = match.group(2).strip()
        text = " ".join(description)
        text = f"{text} [{kind}]" if text and kind else (text or kind)
        for name in match.group(1).split(","):
            helps[name.strip()] = text
    return helps


def _literal(text: str):
    """Parse a flag value as a Python literal (number, None, tuple …), else keep the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def learner_hyperparameters(cls: type) -> list[inspect.Parameter]:
    """Keyword hyper-parameters of a learner class (everything but ``heads`` and ``random_state``)."""
    return [parameter for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name not in ("self", "heads", "random_state")
            and parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)]


def _add_hyperparameter_flags(parser: argparse.ArgumentParser, learner: str) -> None:
    from .learners import LEARNERS, get_learner

    cls = get_learner(learner)
    helps = _parameter_help(cls)
    # A learner whose docstring refers to another's parameters (MomentLearner: SculptLearner's phases
    # 5–6) takes their text from there: the learners share those parameters (SEARCH_CONSTRAINTS).
    for other in LEARNERS.values():
        helps = {**_parameter_help(other), **helps}
    group = parser.add_argument_group(f"hyper-parameters of the {learner!r} learner ({cls.__name__})")
    for parameter in learner_hyperparameters(cls):
        flag = "--" + parameter.name.replace("_", "-")
        default = parameter.default
        description = helps.get(parameter.name, "").replace("%", "%%")  # argparse formats help with %
        if isinstance(default, bool):
            group.add_argument(flag, dest=f"hp_{parameter.name}", action=argparse.BooleanOptionalAction,
                               default=default, help=f"{description} (default: {default})")
        else:
            # A parameter that may be None (net_slab: float | None) takes "None" as well as its type.
            optional = "None" in str(parameter.annotation)
            kind = type(default) if isinstance(default, (int, float, str)) and not optional else _literal
            group.add_argument(flag, dest=f"hp_{parameter.name}", type=kind, default=default,
                               metavar=parameter.name.upper(), help=f"{description} (default: {default!r})")


# ------------------------------------------------------------------- parser

def build_parser(learner: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with ``learner`` the ``learn`` subcommand also gets its hyper-parameter flags."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress bars or commentary, only results")

    parser = argparse.ArgumentParser(
        prog="mhalearn", description="Learn a single multi-head attention layer from examples.",
        epilog="Run `mhalearn COMMAND --help` for a command's options.")
    from . import __version__

    parser.add_argument("--version", action="version", version=f"mhalearn {__version__}")
    # Not required here: an unknown option before the command is then reported as such (main asks for
    # the missing command once everything else has parsed).
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser("demo", parents=[common], help="learn a planted m = 2 teacher with SculptLearner",
                               description="Plant an m = 2 teacher (d = 12, k = 4), learn it with SculptLearner, "
                                           "print the phase table (which route gave the span) and the test "
                                           "error, and write a figure.")
    demo.add_argument("--samples", type=int, default=DEMO_SETTING["samples"], help="training examples n")
    demo.add_argument("--seed", type=int, default=DEMO_SETTING["seed"], help="seeds teacher, data and learner")
    demo.add_argument("--out", type=Path, default=Path("."), help="directory of the figure mhalearn-demo.png")

    learn = commands.add_parser("learn", parents=[common], help="one learner on one planted instance",
                                description="Plant a teacher, draw examples, fit one learner, report its errors "
                                            "and save the learned model (.npz).  `--learner NAME --help` lists "
                                            "that learner's hyper-parameters.")
    learn.add_argument("--learner", default="sculpt", help="registered learner name (default: sculpt)")
    learn.add_argument("--heads", "-m", type=int, default=2, help="heads m of teacher and learner")
    learn.add_argument("--dim", "-d", type=int, default=12, help="token dimension d (the body needs d > k)")
    learn.add_argument("--length", "-k", type=int, default=4, help="tokens per sequence k")
    learn.add_argument("--samples", "-n", type=int, default=30_000, help="training examples n")
    learn.add_argument("--family", default="random", help="teacher family (default: random)")
    learn.add_argument("--noise", type=float, default=0.0, help="std of Gaussian label noise")
    learn.add_argument("--seed", type=int, default=0, help="seeds teacher, data and learner")
    learn.add_argument("--test-samples", type=int, default=2000, help="fresh inputs for the test error")
    learn.add_argument("--out", type=Path, default=Path("model.npz"), help="file for the learned model")
    learn.add_argument("--teacher-out", type=Path, default=None, help="also save the planted teacher here")
    if learner is not None:
        _add_hyperparameter_flags(learn, learner)

    sweep = commands.add_parser("sweep", parents=[common], help="run or resume a named experiment",
                                description="Compute the cells of a named experiment missing from the results "
                                            "file; a killed sweep resumes where it stopped.")
    sweep.add_argument("experiment", metavar="NAME", nargs="?", help="experiment name")
    sweep.add_argument("--db", type=Path, required=True, help="SQLite results file (created if missing)")
    sweep.add_argument("--status", action="store_true",
                       help="list what the results file holds, by experiment and code version, and exit")
    sweep.add_argument("--grid", type=Path, default=None, metavar="FILE",
                       help="TOML grid file to sweep instead of the experiment's own (its [full] table, "
                            "or [quick] with --quick)")
    sweep.add_argument("--quick", action="store_true", help="the grid's [quick] table (about a minute)")
    sweep.add_argument("--max-cells", type=int, default=None, metavar="N",
                       help="the most cells the grid may have, counted before it is expanded (default 1000000)")
    sweep.add_argument("--workers", type=int, default=None,
                       help="local worker processes (default and at most: CPU cores)")
    sweep.add_argument("--backend", choices=("local", "dask"), default="local", help="where cells run")
    sweep.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="Dask scheduler address, e.g. tcp://127.0.0.1:8786 (with --backend dask)")
    sweep.add_argument("--retry-failed", action="store_true", help="recompute cells stored as failures")
    sweep.add_argument("--allow-mixed", action="store_true",
                       help="add rows to an experiment whose stored rows came from other code")
    sweep.add_argument("--write-timeout", type=float, default=None, metavar="SECONDS",
                       help="retry writing a row this long (disk full, file locked) before stopping "
                            "(default 120)")
    sweep.add_argument("--worker-timeout", type=float, default=None, metavar="SECONDS",
                       help="with --backend dask: stop after this long without any worker (default 120)")
    sweep.add_argument("--checkpoints", type=Path, default=None, metavar="DIR",
                       help="keep each running cell's long phases here, so that a cell interrupted mid-way "
                            "resumes after them (sculpt-vs-m; a stored cell's are removed)")

    plot = commands.add_parser("plot", parents=[common], help="figures of an experiment from its results",
                               description="Render an experiment's PNG figures (and a table of the numbers "
                                           "they show) from the rows stored in the results file.")
    plot.add_argument("experiment", metavar="NAME", help="experiment name")
    plot.add_argument("--db", type=Path, required=True, help="SQLite results file written by `mhalearn sweep`")
    plot.add_argument("--out", type=Path, required=True, help="output directory")

    export = commands.add_parser("export", parents=[common], help="the stored rows of an experiment as a table",
                                 description="Write the rows of an experiment stored in a results file as a CSV "
                                             "or Parquet table: grid keys and metrics as columns (nested metrics "
                                             "with dotted names), then status, timing and provenance.  Parquet "
                                             "needs the tables extra: python3 -m pip install -e '.[tables]'.")
    export.add_argument("experiment", metavar="NAME", help="experiment name (as stored)")
    export.add_argument("--db", type=Path, required=True, help="SQLite results file written by `mhalearn sweep`")
    export.add_argument("--format", choices=("csv", "parquet"), default=None,
                        help="table format (default: from the extension of --out)")
    export.add_argument("--out", type=Path, required=True, help="output file")

    bench = commands.add_parser("bench", parents=[common], help="run the benchmark scripts in bench/",
                                description="Run the scripts in the repository's bench/ directory "
                                            "(all of them, or those named).")
    bench.add_argument("scripts", nargs="*", metavar="SCRIPT", help="script names, e.g. kernels (default: all)")
    bench.add_argument("--list", action="store_true", help="list the scripts and exit")
    bench.add_argument("--quick", action="store_true", help="pass --quick to each script")

    commands.add_parser("experiments", parents=[common], help="list the named experiments")
    return parser


def _learner_requested(argv: Sequence[str]) -> str | None:
    """The ``--learner`` of a ``learn`` command line, so its hyper-parameter flags can be added."""
    if "learn" not in argv:
        return None
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--learner", default="sculpt")
    known, _ = peek.parse_known_args(argv[list(argv).index("learn") + 1:])
    return known.learner


# ----------------------------------------------------------------- commands

def _format_metrics(metrics: dict) -> str:
    parts = [f"test error {metrics['test_error']:.3e}", f"train error {metrics['train_error']:.3e}",
             f"Θ error {metrics['theta_error']:.3g}", f"W error {metrics['w_error']:.3g}",
             f"fit {metrics['fit_seconds']:.1f} s"]
    if metrics.get("candidates") is not None:
        parts.append(f"{metrics['candidates']} candidates scored")
    return ", ".join(parts)


def checked_learner(setting: dict, hyperparams: dict):
    """The unfitted learner of a ``demo`` or ``learn`` setting, once every argument is checked.

    Checks the numbers of the setting (:data:`SETTING_CONSTRAINTS`), the
    teacher family, the learner's hyper-parameters and the shapes the
    learner can serve, so that bad input is reported before a teacher is
    planted or anything is printed.
    """
    from .attention.data import _check_sequences_memory
    from .attention.teachers import get_family
    from .learners import get_learner

    for name, constraint in SETTING_CONSTRAINTS.items():
        check_allowed(setting[name], name, [constraint])
    for name in ("samples", "test_samples"):  # each draw named by its own flag (9 bytes per Boolean entry)
        _check_sequences_memory(9, setting[name], setting["length"], setting["dim"], "Boolean sequences",
                                name.replace("_", "-"))
    get_family(setting["family"])
    estimator = get_learner(setting["learner"])(setting["heads"], random_state=setting["seed"], **hyperparams)
    estimator._check_params()
    estimator._check_shape(setting["samples"], setting["length"], setting["dim"])
    return estimator


def _learn_and_report(args, setting: dict, estimator, *, description: str):
    """Shared by ``demo`` and ``learn``: plant, fit ``estimator`` (from :func:`checked_learner`) and measure
    under a step progress bar, then report; returns the planted teacher and the metrics."""
    from . import evaluation

    shape = {key: setting[key] for key in ("heads", "dim", "length", "samples", "family", "noise", "seed")}
    with StepProgress(["plant", "fit", "measure"], enabled=not args.quiet, desc=description) as progress:
        with progress.step(f"planting a {setting['family']} teacher, drawing n = {setting['samples']}"):
            teacher, X, Y, X_test = evaluation.plant_instance(**shape, test_samples=setting["test_samples"])
        with progress.step(f"fitting {setting['learner']}"):
            fit_seconds, observer = evaluation.fit_timed(estimator, X, Y, teacher)
        with progress.step("measuring"):
            metrics = evaluation.measure(estimator, teacher, X, Y, X_test, fit_seconds, observer)
    _say(args, estimator.report_.table())
    _say(args, "against the teacher:\n" + observer.table())
    print(f"{setting['learner']} on {setting['family']} teacher (m = {setting['heads']}, d = {setting['dim']}, "
          f"k = {setting['length']}, n = {setting['samples']}, noise = {setting['noise']}): "
          + _format_metrics(metrics))
    return teacher, metrics


def _model_bytes(heads: int, dim: int) -> int:
    """About the size of a saved model: Θ and W as float64, and the zip's headers."""
    return 2 * heads * dim * dim * 8 + 2048


def _write_or_keep(write, path: Path, name: str, what: str) -> str | None:
    """Write a finished result with ``write(path)``; when that fails (a full disk, a file-size limit),
    keep it in a file of the temporary directory instead.  Returns None, or the line that says what
    failed and where the result is."""
    try:
        write(path)
        return None
    except OSError as error:
        reason = error.strerror or str(error)
    descriptor, fallback = tempfile.mkstemp(prefix=f"mhalearn-{what}-", suffix=Path(path).suffix)
    os.close(descriptor)
    try:
        write(fallback)
    except OSError as error:
        os.unlink(fallback)
        return (f"{name}: could not write {str(path)!r} ({reason}) nor keep the {what} in "
                f"{tempfile.gettempdir()!r} ({error.strerror or error}); it is lost")
    return f"{name}: could not write {str(path)!r} ({reason}); the {what} is kept in {fallback}"


def _remove_if_empty(directory: Path, existed: bool) -> None:
    """Remove ``directory`` when this command created it and a failed write left it empty."""
    if not existed:
        try:
            directory.rmdir()
        except OSError:
            pass


def command_demo(args) -> int:
    """``mhalearn demo``: the package's main job on one planted m = 2 instance."""
    from .learners import LEARNERS
    from .plotting import demo_figure, save_figure

    if "sculpt" not in LEARNERS:
        raise ValueError(f"learner: the demo needs 'sculpt', which is not registered (registered: "
                         f"{sorted(LEARNERS) or 'none'})")
    setting = {**DEMO_SETTING, "samples": args.samples, "seed": args.seed}
    check_output_directory(args.out, "out")
    estimator = checked_learner(setting, {})
    _say(args, f"Planting an m = {setting['heads']} teacher (d = {setting['dim']}, k = {setting['length']}), drawing "
               f"n = {setting['samples']} Boolean examples and learning it with SculptLearner.")
    teacher, metrics = _learn_and_report(args, setting, estimator, description="demo")
    figure = demo_figure(estimator.model_, teacher, metrics, length=setting["length"], seed=setting["seed"])
    path, existed = Path(args.out) / "mhalearn-demo.png", Path(args.out).exists()
    failure = _write_or_keep(lambda target: save_figure(figure, target), path, "out", "figure")
    if failure:
        _remove_if_empty(Path(args.out), existed)
        raise RuntimeError(f"final test error {metrics['test_error']:.3e}; {failure}")
    print(f"final test error {metrics['test_error']:.3e}; figure written to {path}")
    return 0


def command_learn(args) -> int:
    """``mhalearn learn``: one learner, one planted instance, model saved."""
    hyperparams = {key[3:]: value for key, value in vars(args).items() if key.startswith("hp_")}
    setting = dict(learner=args.learner, heads=args.heads, dim=args.dim, length=args.length, samples=args.samples,
                   family=args.family, noise=args.noise, seed=args.seed, test_samples=args.test_samples)
    estimator = checked_learner(setting, hyperparams)
    outputs = {"out": (args.out, "model")}
    if args.teacher_out is not None:
        if Path(args.teacher_out).resolve() == Path(args.out).resolve():
            raise ValueError(f"teacher-out: expected a file other than --out, received {str(args.teacher_out)!r}")
        outputs["teacher-out"] = (args.teacher_out, "teacher")
    for name, (path, _) in outputs.items():
        check_output_file(path, name, size=_model_bytes(args.heads, args.dim))
    teacher, _ = _learn_and_report(args, setting, estimator, description="learn")
    models = {"model": estimator.model_, "teacher": teacher}
    failures = []
    for name, (path, what) in outputs.items():
        failure = _write_or_keep(models[what].save, path, name, what)
        if failure:
            failures.append(failure)
        else:
            print(f"{what} saved to {path}")
    if failures:
        raise RuntimeError("; ".join(failures))
    return 0


def command_sweep(args) -> int:
    """``mhalearn sweep``: run or resume a named experiment, or show what a results file holds."""
    from .experiments import EXPERIMENTS
    from .experiments.runner import MAX_CELLS, WORKER_TIMEOUT, WRITE_TIMEOUT, run_sweep
    from .experiments.store import ResultStore, format_status

    if args.status:
        status = format_status(args.db, args.experiment)
        if args.experiment is not None and args.experiment not in EXPERIMENTS:
            with ResultStore(args.db, readonly=True) as store:
                if args.experiment not in store.experiments():
                    raise ValueError(f"experiment: expected a registered experiment or one stored in "
                                     f"{str(args.db)!r} {sorted(set(EXPERIMENTS) | set(store.experiments()))}, "
                                     f"received {args.experiment!r}")
        print(status)
        return 0
    if args.experiment is None:
        raise ValueError("experiment: expected an experiment name (or --status), received none; "
                         "`mhalearn experiments` lists them")
    summary = run_sweep(args.experiment, args.db, quick=args.quick, grid=args.grid, workers=args.workers,
                        backend=args.backend, scheduler=args.scheduler, progress=not args.quiet,
                        retry_failed=args.retry_failed, allow_mixed=args.allow_mixed,
                        write_timeout=WRITE_TIMEOUT if args.write_timeout is None else args.write_timeout,
                        worker_timeout=WORKER_TIMEOUT if args.worker_timeout is None else args.worker_timeout,
                        checkpoints=args.checkpoints,
                        max_cells=MAX_CELLS if args.max_cells is None else args.max_cells)
    print(summary)
    return EXIT_FAILURE if summary.failed else 0


def command_export(args) -> int:
    """``mhalearn export``: the stored rows of an experiment as a CSV or Parquet table."""
    from .experiments.store import ResultStore
    from .tables import TABLE_FORMATS, write_table

    table_format = check_choice(args.format or args.out.suffix.lstrip(".").lower(), "format", TABLE_FORMATS)
    check_output_file(args.out, "out")
    with ResultStore(args.db, readonly=True) as store:
        if args.experiment not in store.experiments():
            raise ValueError(f"experiment: expected one of the experiments stored in {str(args.db)!r} "
                             f"{store.experiments()}, received {args.experiment!r}")
        # After the results file's checks: importing pandas and pyarrow takes seconds.
        if table_format == "parquet":
            check_optional_dependencies("export --format parquet", "tables", "pandas", "pyarrow")
        columns, rows = store.table(args.experiment)
    try:
        write_table(columns, rows, args.out, table_format)
    except OSError as error:
        raise RuntimeError(f"out: could not write {str(args.out)!r} ({error.strerror or error}); the results "
                           "file is unchanged: export again where there is room") from None
    print(f"{args.experiment}: {len(rows)} rows × {len(columns)} columns written to {args.out}")
    return 0


def command_plot(args) -> int:
    """``mhalearn plot``: figures and the numbers they show."""
    from .experiments import get_experiment
    from .experiments.store import ResultStore

    experiment = get_experiment(args.experiment)
    check_output_directory(args.out, "out")
    with ResultStore(args.db, readonly=True) as store:
        rows = store.rows(args.experiment)
        failed = store.count(args.experiment, status="failed")
    if not rows:
        raise ValueError(f"db: {str(args.db)!r} holds no finished rows of {args.experiment!r}; run "
                         f"`mhalearn sweep {args.experiment} --db {args.db}` first")
    existed = Path(args.out).exists()
    try:
        paths = experiment.plot(rows, Path(args.out))
    except OSError as error:
        _remove_if_empty(Path(args.out), existed)
        raise RuntimeError(f"out: could not write the figures in {str(args.out)!r} ({error.strerror or error}); "
                           "the results file is unchanged: plot again where there is room") from None
    _say(args, f"{args.experiment}: {len(rows)} rows" + (f" ({failed} failed cells left out)" if failed else ""))
    for path in paths:
        print(path)
        if path.suffix == ".txt" and not args.quiet:
            print(path.read_text())
    return 0


def bench_directory() -> Path:
    """The repository's ``bench/`` directory: next to the package (a source checkout), else in the
    current directory (an installed package run from a checkout; the scripts import only the package)."""
    candidates = [Path(__file__).resolve().parent.parent / "bench", Path.cwd() / "bench"]
    for directory in candidates:
        if directory.is_dir():
            return directory
    raise ValueError(f"bench: no bench/ directory next to the package or in the current directory "
                     f"({', '.join(map(str, candidates))}); the benchmarks ship with the source checkout")


def bench_scripts() -> dict[str, Path]:
    """Benchmark scripts by name (``bench/NAME.py``, helpers starting with ``_`` left out)."""
    return {path.stem: path for path in sorted(bench_directory().glob("*.py")) if not path.name.startswith("_")}


def command_bench(args) -> int:
    """``mhalearn bench``: list or run the benchmark scripts."""
    scripts = bench_scripts()
    if args.list:
        for name, path in scripts.items():
            print(f"{name:<16} {path}")
        return 0
    chosen = [check_choice(name.removesuffix(".py"), "bench script", scripts) for name in args.scripts] or list(scripts)
    failures = []
    for index, name in enumerate(chosen, 1):
        command = [sys.executable, str(scripts[name])] + (["--quick"] if args.quick else [])
        _say(args, f"[{index}/{len(chosen)}] {' '.join(command[1:])}")
        start = time.perf_counter()
        result = subprocess.run(command, cwd=scripts[name].parent.parent)  # scripts write to bench/…
        _say(args, f"[{index}/{len(chosen)}] {name}: exit {result.returncode} after "
                   f"{time.perf_counter() - start:.1f} s")
        if result.returncode:
            failures.append(name)
    if failures:
        print(f"bench: {len(failures)} script(s) failed: {', '.join(failures)}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def command_experiments(args) -> int:
    """``mhalearn experiments``: the registered experiment names."""
    from .experiments import EXPERIMENTS

    for name, experiment in sorted(EXPERIMENTS.items()):
        print(f"{name:<20} {experiment.description}")
    return 0


COMMANDS = {"demo": command_demo, "learn": command_learn, "sweep": command_sweep, "plot": command_plot,
            "export": command_export, "bench": command_bench, "experiments": command_experiments}


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings of mhalearn's own as one line on stderr, others as Python shows them."""
    if category.__module__.startswith("mhalearn"):
        print(f"mhalearn: warning: {message}", file=sys.stderr)
    else:
        sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``mhalearn`` console script; returns the exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name (default: ``sys.argv[1:]``).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    args = None
    try:
        parser = build_parser(_learner_requested(argv))
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error("the following arguments are required: COMMAND")
        if args.command in ("sweep", "plot", "experiments"):
            import mhalearn.experiments  # noqa: F401  registers the named experiments
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return COMMANDS[args.command](args)
    except (ValueError, MissingDependencyError) as error:
        print(f"mhalearn: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RuntimeError as error:
        print(f"mhalearn: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        print(f"mhalearn: interrupted ({_what_was_kept(args)})", file=sys.stderr)
        return EXIT_INTERRUPTED


def _what_was_kept(args) -> str:
    """What an interrupted command leaves to resume from."""
    if args is None:
        return "nothing was saved"
    if args.command == "sweep":
        phases = "" if args.checkpoints is None else f", the running cells' finished phases in {args.checkpoints}"
        return f"finished sweep cells are saved{phases}; run the same command to resume"
    checkpoint = getattr(args, "hp_checkpoint", None)
    if args.command == "learn" and checkpoint is not None:
        return f"finished phases are kept in {checkpoint}; run the same command to resume"
    return "nothing was saved"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
