"""The ``mhalearn`` command ([design: experiments]).

Subcommands::

    mhalearn demo                     plant an m = 2 teacher, learn it with SculptLearner, draw a figure
    mhalearn learn --learner NAME     one learner on one planted instance; the model is saved to a file
    mhalearn sweep NAME --db PATH     run (or resume) a named experiment into a SQLite results file
    mhalearn sweep --status --db PATH what a results file holds, by experiment and code version
    mhalearn plot NAME --db PATH --out DIR   render an experiment's figures from its results
    mhalearn export NAME --db PATH --format csv|parquet --out FILE   the stored rows as a table
    mhalearn bench [SCRIPT ...]       run the benchmark scripts in bench/

``mhalearn learn --learner NAME --help`` lists that learner's hyper-parameters
as flags, ``--help-settings GROUP`` its grouped settings (``body``, ``search``),
which ``--set GROUP.NAME=VALUE`` sets.  Every subcommand takes ``--quiet`` (no progress bars, only the
results).  Bad input (unknown experiment, learner or family names, sizes,
seeds or hyper-parameters out of range, a file that is not a results file
or a damaged one, an output path that cannot be written, a missing optional
dependency such as pandas and pyarrow for ``export --format parquet``) is
the only output: one line with exit status 2, before any work starts; a sweep
that had to stop (results file unwritable, workers gone) exits with 1 and
keeps every stored row.

This module holds the entry point :func:`main` and the exit statuses;
:mod:`mhalearn.cli.parser` the options and a learner's hyper-parameter flags,
:mod:`mhalearn.cli.commands` what each subcommand does.
"""

from __future__ import annotations

import sys
import warnings
from typing import Sequence

from .._validation import MissingDependencyError
from .commands import COMMANDS, EXIT_FAILURE
from .parser import build_parser, check_required_options, learner_requested

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


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
        parser = build_parser(learner_requested(argv))
        args = parser.parse_args(argv)
        if args.command is None:
            parser.error("the following arguments are required: COMMAND")
        check_required_options(parser, args)
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
