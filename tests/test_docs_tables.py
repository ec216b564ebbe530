"""Every table a bench or a runs/ script prints from committed rows is the one its page shows (issue 34).

Each ``python bench/NAME.py ... --report`` (or ``--curve``) command in a code block of the
page is run (it reads the rows under ``runs/`` and fits nothing), and every
table row it prints must appear verbatim on the page: a table edited by
hand, or left behind when its rows were rerun, fails.  No section is exempt.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "chen_li.md"
#: Pages whose tables are checked, the first one against its bench commands too.
PAGES = (PAGE, ROOT / "docs" / "learners_vs_m.md")


def report_commands(text: str) -> list[tuple[str, str, str]]:
    """(section heading, command, section text) for every bench ``--report`` or ``--curve`` command in a code
    block, and every script under ``runs/`` beside its rows: all print tables from the committed rows."""
    commands = []
    for section in re.split(r"^(?=##+ )", text, flags=re.MULTILINE):
        heading = section.splitlines()[0] if section else ""
        for block in re.findall(r"^```\n(.*?)^```", section, flags=re.MULTILINE | re.DOTALL):
            for line in block.replace("\\\n", " ").splitlines():  # a command may go on after a backslash
                command = line.split("#")[0].strip()
                if (command.startswith("python bench/") and {"--report", "--curve"} & set(shlex.split(command))
                        or command.startswith("python runs/")):  # a script beside its rows reads them only
                    commands.append((heading, command, section))
    return commands


def table_rows(output: str) -> list[str]:
    """The lines of Markdown tables in ``output``, but for their rule lines."""
    return [line.strip() for line in output.splitlines()
            if line.startswith("| ") and not re.fullmatch(r"\|( --- \|)+", line.strip())]


COMMANDS = [(page, *command) for page in PAGES for command in report_commands(page.read_text())]


def test_the_pages_have_report_commands():
    assert all(sum(page == each for each, *_ in COMMANDS) >= (5 if page == PAGE else 1) for page in PAGES), COMMANDS


@pytest.mark.slow
@pytest.mark.parametrize("page, heading, command, section", COMMANDS,
                         ids=[f"{page.name}: {command}" for page, _, command, _ in COMMANDS])
def test_report_tables_are_on_the_page(page, heading, command, section):
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, *shlex.split(command)[1:]], cwd=ROOT, capture_output=True, text=True,
                            env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    printed = table_rows(result.stdout)
    assert printed, f"{command} printed no table"
    lines = {line.strip() for line in page.read_text().splitlines()}
    missing = [line for line in printed if line not in lines]
    assert not missing, f"{command}: rows not on the page:\n" + "\n".join(missing)
