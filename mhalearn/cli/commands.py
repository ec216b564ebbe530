"""The ``mhalearn`` subcommands: each ``command_NAME(args)`` runs one and returns its exit status.

A command imports what it needs when it runs, so that ``mhalearn --version``
and ``--help`` import no numerical library.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .._files import check_room
from .._validation import (
    Integer,
    Real,
    check_allowed,
    check_choice,
    check_optional_dependencies,
    check_output_directory,
    check_output_file,
)

#: Exit status of a command that had to stop (a sweep whose results file became unwritable, a failed benchmark).
EXIT_FAILURE = 1

#: Shapes and seed of the demo instance: m = 2 in a regime where Chen & Li's body
#: carries the span (d > k, enough sequences for agreement rows; bench/sculpt.py).
DEMO_SETTING = dict(learner="sculpt", heads=2, dim=12, length=4, samples=30_000, family="random", noise=0.0,
                    seed=0, test_samples=2000)
#: What each number of a ``demo`` or ``learn`` setting may be, checked before any work or output.
SETTING_CONSTRAINTS = {"heads": Integer(1), "dim": Integer(1), "length": Integer(1), "samples": Integer(1),
                       "test_samples": Integer(1), "noise": Real(0.0), "seed": Integer(0)}


def _say(args, *lines: str) -> None:
    """Print unless ``--quiet``."""
    if not args.quiet:
        for line in lines:
            print(line)


def _format_metrics(metrics: dict) -> str:
    parts = [f"test error {metrics['test_error']:.3e}", f"train error {metrics['train_error']:.3e}",
             f"Θ error {metrics['theta_error']:.3g}", f"W error {metrics['w_error']:.3g}",
             f"fit {metrics['fit_seconds']:.1f} s"]
    if metrics.get("candidates") is not None:
        parts.append(f"{metrics['candidates']} candidates scored")
    return ", ".join(parts)


def checked_learner(setting: dict, hyperparams: dict, settings: dict | None = None):
    """The unfitted learner of a ``demo`` or ``learn`` setting, once every argument is checked.

    Checks the numbers of the setting (:data:`SETTING_CONSTRAINTS`), the
    teacher family, the learner's hyper-parameters, its grouped ``settings``
    (nested names, ``{"body__quantile": 0.02}``) and the shapes the learner
    can serve, so that bad input is reported before a teacher is planted or
    anything is printed.
    """
    from ..attention.data import _check_sequences_memory
    from ..attention.teachers import get_family
    from ..learners import get_learner

    for name, constraint in SETTING_CONSTRAINTS.items():
        check_allowed(setting[name], name, [constraint])
    for name in ("samples", "test_samples"):  # each draw named by its own flag (9 bytes per Boolean entry)
        _check_sequences_memory(9, setting[name], setting["length"], setting["dim"], "Boolean sequences",
                                name.replace("_", "-"))
    get_family(setting["family"])
    estimator = get_learner(setting["learner"])(setting["heads"], random_state=setting["seed"], **hyperparams)
    estimator.set_params(**(settings or {}))
    estimator._check_params()
    estimator._check_shape(setting["samples"], setting["length"], setting["dim"])
    return estimator


def _learn_and_report(args, setting: dict, estimator, *, description: str):
    """Shared by ``demo`` and ``learn``: plant, fit ``estimator`` (from :func:`checked_learner`) and measure
    under a step progress bar, then report; returns the planted teacher and the metrics."""
    from .. import evaluation
    from .._progress import StepProgress

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


#: About the size of the demo's figure (a PNG of 70 kB at the defaults), checked against the room before the fit.
DEMO_FIGURE_BYTES = 100_000


def _write_or_keep(write, path: Path, name: str, what: str) -> str | None:
    """Write a finished result with ``write(path)``; when that fails for any reason (a full disk, a
    file-size limit, its folder removed or a FIFO or folder put at ``path`` while the fit ran), keep it in
    a file of the temporary directory instead.  Returns None, or the line that says what failed and
    where the result is."""
    try:
        write(path)
        return None
    except Exception as error:  # whatever stops the write, the finished result is kept
        reason = getattr(error, "strerror", None) or str(error)
    descriptor, fallback = tempfile.mkstemp(prefix=f"mhalearn-{what}-", suffix=Path(path).suffix)
    os.close(descriptor)
    try:
        write(fallback)
    except Exception as error:
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
    from ..learners import LEARNERS
    from ..plotting import demo_figure, save_figure

    if "sculpt" not in LEARNERS:
        raise ValueError(f"learner: the demo needs 'sculpt', which is not registered (registered: "
                         f"{sorted(LEARNERS) or 'none'})")
    setting = {**DEMO_SETTING, "samples": args.samples, "seed": args.seed}
    out = check_output_directory(args.out, "out")
    # The figure must fit the disk and the file-size limit (ulimit -f): checked before the fit, not after it.
    check_room(next(folder for folder in (out, *out.parents) if folder.exists()), "out",
               out / "mhalearn-demo.png", DEMO_FIGURE_BYTES)
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
    from ..learners import get_learner
    from .settings import parse_setting, settings_groups

    hyperparams = {key[3:]: value for key, value in vars(args).items() if key.startswith("hp_")}
    groups = settings_groups(get_learner(args.learner))
    settings = dict(parse_setting(text, groups) for text in getattr(args, "settings", []))
    setting = dict(learner=args.learner, heads=args.heads, dim=args.dim, length=args.length, samples=args.samples,
                   family=args.family, noise=args.noise, seed=args.seed, test_samples=args.test_samples)
    estimator = checked_learner(setting, hyperparams, settings)
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
    from ..experiments import load_experiments
    from ..experiments.runner import MAX_CELLS, WORKER_TIMEOUT, WRITE_TIMEOUT, run_sweep
    from ..experiments.store import ResultStore, format_status

    if args.status:
        status = format_status(args.db, args.experiment)
        if args.experiment is not None and args.experiment not in load_experiments():
            with ResultStore(args.db, readonly=True) as store:
                if args.experiment not in store.experiments():
                    raise ValueError(f"experiment: expected a registered experiment or one stored in "
                                     f"{str(args.db)!r} {sorted(set(load_experiments()) | set(store.experiments()))}, "
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
                        checkpoints=args.checkpoints, keep_checkpoints=args.keep_checkpoints,
                        max_cells=MAX_CELLS if args.max_cells is None else args.max_cells)
    print(summary)
    return EXIT_FAILURE if summary.failed else 0


def command_export(args) -> int:
    """``mhalearn export``: the stored rows of an experiment as a CSV or Parquet table."""
    from ..experiments.store import ResultStore
    from ..tables import TABLE_FORMATS, write_table

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
    from ..experiments import get_experiment
    from ..experiments.store import ResultStore

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
    candidates = [Path(__file__).resolve().parents[2] / "bench", Path.cwd() / "bench"]
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
    from ..experiments import load_experiments

    for name, experiment in sorted(load_experiments().items()):
        print(f"{name:<20} {experiment.description}")
    return 0


COMMANDS = {"demo": command_demo, "learn": command_learn, "sweep": command_sweep, "plot": command_plot,
            "export": command_export, "bench": command_bench, "experiments": command_experiments}
