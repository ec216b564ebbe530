"""Every table a script prints from committed rows is the one its page shows (issue 34).

The pages are docs/chen_li.md (the user's guide), docs/baselines.md,
docs/benchmarks.md, docs/learners_vs_m.md, docs/queries.md and every runs/<study>/README.md (the notes beside the
rows).  Each ``python bench/NAME.py ... --report`` (or ``--curve``) command
in a code block of a page, each ``python runs/STUDY/NAME.py ... --report``
(or ``--curve``) of a script kept beside its rows, and each ``python
runs/STUDY/check.py`` or ``tables.py`` (scripts that only read) is run (it reads the rows
under ``runs/`` and fits nothing), and every table row it prints must
appear verbatim on that page: a table edited by hand, or left behind when
its rows were rerun, fails.  No section is exempt.

A guide page may show a selection of a command's rows instead (the runs README beside the rows shows
them all): the command's comment in the code block then begins ``selection``, and every table row of
that section of the page must be among the rows the command prints.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GUIDE = ROOT / "docs" / "chen_li.md"
PAGES = [GUIDE, ROOT / "docs" / "baselines.md", ROOT / "docs" / "benchmarks.md", ROOT / "docs" / "learners_vs_m.md",
         ROOT / "docs" / "queries.md", *sorted((ROOT / "runs").rglob("README.md"))]


def reads_rows_only(command: str) -> bool:
    """Whether ``command`` prints tables from committed rows and fits nothing."""
    if not command.startswith(("python bench/", "python runs/")):
        return False
    words = shlex.split(command)
    return bool({"--report", "--curve"} & set(words)) or (words[1].startswith("runs/") and
                                                         words[1].endswith(("/check.py", "/tables.py")))


def report_commands(text: str) -> list[tuple[str, str, str, bool]]:
    """(section heading, command, section text, whether the section shows a selection of its rows) for every
    command in a code block that prints tables from the committed rows (:func:`reads_rows_only`)."""
    commands = []
    for section in re.split(r"^(?=##+ )", text, flags=re.MULTILINE):
        heading = section.splitlines()[0] if section else ""
        for block in re.findall(r"^```\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():  # a command may go on after a backslash
                command, _, comment = (part.strip() for part in line.partition("#"))
                if reads_rows_only(command):
                    commands.append((heading, command, section, comment.startswith("selection")))
    return commands


def table_rows(output: str) -> list[str]:
    """The lines of Markdown tables in ``output``, but for their rule lines."""
    return [line.strip() for line in output.splitlines()
            if line.startswith("| ") and not re.fullmatch(r"\|( --- \|)+", line.strip())]


COMMANDS = [(page, heading, command, selection) for page in PAGES
            for heading, command, _, selection in report_commands(page.read_text())]


def test_the_pages_have_report_commands():
    # The regex finds the commands: the guide keeps its three measured sections' (m = 1, 2; m = 3; the
    # span calibration), the notes beside the rows hold the rest.
    assert len([page for page, *_ in COMMANDS if page == GUIDE]) >= 3, COMMANDS
    assert len(COMMANDS) >= 20, COMMANDS


def test_a_fitting_command_is_not_taken_for_a_report():
    assert reads_rows_only("python runs/net-m3/net_m3.py --report --seeds 0 1")
    assert reads_rows_only("python runs/agreement-rate-fresh/check.py")
    assert reads_rows_only("python runs/samples-to-eps/tables.py")
    assert not reads_rows_only("python runs/net-m3/net_m3.py --seeds 0 1")
    assert not reads_rows_only("python bench/sculpt.py --seeds 4")
    assert not reads_rows_only("mhalearn plot sculpt-vs-m --report")


def test_a_selection_is_marked_in_the_command_comment():
    page = ("## A\n\n```\npython runs/x/tables.py   # selection: the laws\n```\n\n| a |\n\n"
            "## B\n\n```\npython runs/x/tables.py\n```\n")
    assert [(heading, command, selection) for heading, command, _, selection in report_commands(page)] == [
        ("## A", "python runs/x/tables.py", True), ("## B", "python runs/x/tables.py", False)]


@pytest.mark.slow
@pytest.mark.parametrize("page, heading, command, selection", COMMANDS,
                         ids=[f"{page.relative_to(ROOT)}: {command}" for page, _, command, _ in COMMANDS])
def test_report_tables_are_on_the_page(page, heading, command, selection):
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True, text=True,
                            env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    printed = table_rows(result.stdout)
    assert printed, f"{command} printed no table"
    if selection:  # every table row of the section is one the command prints
        section = next(text for found, line, text, _ in report_commands(page.read_text())
                       if (found, line) == (heading, command))
        shown = table_rows(section)
        assert shown, f"{page.relative_to(ROOT)}: {heading}: no table rows under {command}"
        invented = [line for line in shown if line not in set(printed)]
        assert not invented, f"{page.relative_to(ROOT)}: {command}: rows it does not print:\n" + "\n".join(invented)
        return
    lines = {line.strip() for line in page.read_text().splitlines()}
    missing = [line for line in printed if line not in lines]
    assert not missing, f"{page.relative_to(ROOT)}: {command}: rows not on the page:\n" + "\n".join(missing)
