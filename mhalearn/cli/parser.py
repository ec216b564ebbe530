"""The ``mhalearn`` command line: its subcommands, their options, and a learner's hyper-parameters as flags.

``mhalearn learn --learner NAME`` gets one flag per keyword parameter of the
learner's class, its help read from the class's NumPy docstring.  A
parameter that holds settings (``SculptLearner``'s ``body`` and ``search``)
gets no flag: ``--set body.quantile=0.02`` sets one of its settings (by
scikit-learn's nested name, ``body__quantile``), and ``--help-settings body``
lists them, their help read from the settings class's docstring.
"""

from __future__ import annotations

import argparse
import inspect
import re
import textwrap
from pathlib import Path
from typing import Sequence

from .commands import DEMO_SETTING
from .settings import learner_hyperparameters, literal, settings_groups


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


def settings_help(group: str, defaults) -> str:
    """The settings of one group, a line each with its default and its help (``--help-settings``)."""
    helps = _parameter_help(type(defaults))
    lines = [f"settings of {group} ({type(defaults).__name__}); set one with --set {group}.NAME=VALUE:"]
    for name, default in defaults.get_params().items():
        lines.append(f"  {group}.{name} (default: {default!r})")
        lines.extend(f"      {line}" for line in textwrap.wrap(helps.get(name, ""), 74))
    return "\n".join(lines)


class _SettingsHelp(argparse.Action):
    """``--help-settings GROUP``: print the group's settings and exit, as ``--help`` does."""

    def __init__(self, option_strings, dest, groups: dict, **kwargs):
        self.groups = groups
        super().__init__(option_strings, dest, choices=sorted(groups), **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(settings_help(values, self.groups[values]))
        parser.exit()


def _add_hyperparameter_flags(parser: argparse.ArgumentParser, learner: str) -> None:
    from ..learners import LEARNERS, get_learner

    cls = get_learner(learner)
    helps = _parameter_help(cls)
    # A learner whose docstring refers to another's parameters (MomentLearner: SculptLearner's phases
    # 5–6) takes their text from there: the learners share those parameters (SEARCH_CONSTRAINTS).
    for other in LEARNERS.values():
        helps = {**_parameter_help(other), **helps}
    group = parser.add_argument_group(f"hyper-parameters of the {learner!r} learner ({cls.__name__})")
    groups = settings_groups(cls)
    for parameter in learner_hyperparameters(cls):
        if parameter.name in groups:
            continue
        flag = "--" + parameter.name.replace("_", "-")
        default = parameter.default
        description = helps.get(parameter.name, "").replace("%", "%%")  # argparse formats help with %
        if isinstance(default, bool):
            group.add_argument(flag, dest=f"hp_{parameter.name}", action=argparse.BooleanOptionalAction,
                               default=default, help=f"{description} (default: {default})")
        else:
            # A parameter that may be None (net_slab: float | None) takes "None" as well as its type.
            optional = "None" in str(parameter.annotation)
            kind = type(default) if isinstance(default, (int, float, str)) and not optional else literal
            group.add_argument(flag, dest=f"hp_{parameter.name}", type=kind, default=default,
                               metavar=parameter.name.upper(), help=f"{description} (default: {default!r})")
    if groups:
        names = ", ".join(groups)
        group.add_argument("--set", dest="settings", action="append", default=[], metavar="GROUP.NAME=VALUE",
                           help=f"one setting of the groups {names}, e.g. --set {next(iter(groups))}.NAME=0.5 "
                                f"(repeatable; the value is a Python literal, or true, false, a word)")
        group.add_argument("--help-settings", action=_SettingsHelp, groups=groups, metavar="GROUP",
                           help=f"list a group's settings ({names}), their defaults and help, and exit")


def build_parser(learner: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with ``learner`` the ``learn`` subcommand also gets its hyper-parameter flags."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--quiet", action="store_true", help="no progress bars or commentary, only results")

    parser = argparse.ArgumentParser(
        prog="mhalearn", description="Learn a single multi-head attention layer from examples.",
        epilog="Run `mhalearn COMMAND --help` for a command's options.")
    from .. import __version__

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
    sweep.add_argument("--keep-checkpoints", action="store_true",
                       help="with --checkpoints: keep a stored cell's checkpoint, to read its phases again")

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
    # Required options are asked for by main once everything else has parsed, as the command is: argparse
    # would otherwise report a missing --db before an unknown option, the more likely mistake.
    parser.required_options = {}
    for name, command in commands.choices.items():
        for action in command._actions:
            if action.required and action.option_strings:
                action.required = False
                parser.required_options.setdefault(name, []).append(action)
    parser.command_parsers = commands.choices
    return parser


def check_required_options(parser: argparse.ArgumentParser, args) -> None:
    """Exit through the command's parser, as argparse does, when a required option of ``args.command`` is
    missing (:func:`build_parser`)."""
    missing = [action.option_strings[0] for action in parser.required_options.get(args.command, ())
               if getattr(args, action.dest) is None]
    if missing:
        parser.command_parsers[args.command].error(f"the following arguments are required: {', '.join(missing)}")


def learner_requested(argv: Sequence[str]) -> str | None:
    """The ``--learner`` of a ``learn`` command line, so its hyper-parameter flags can be added."""
    if "learn" not in argv:
        return None
    peek = argparse.ArgumentParser(add_help=False)
    peek.add_argument("--learner", default="sculpt")
    known, _ = peek.parse_known_args(argv[list(argv).index("learn") + 1:])
    return known.learner
