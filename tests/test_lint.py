"""The project's ruff configuration (pyproject.toml) holds on every tracked Python file."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_ruff_check_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed: it comes with the dev extra (python3 -m pip install -e '.[dev]')")
    result = subprocess.run([ruff, "check", "--no-cache", str(ROOT)], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, f"ruff check found problems:\n{result.stdout}{result.stderr}"


def test_ruff_sees_a_fault():
    """The check can fail: an unused import in a scratch file under the project's configuration is reported."""
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed")
    result = subprocess.run([ruff, "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"),
                             "--stdin-filename", "scratch.py", "-"], input="import os\n", capture_output=True,
                            text=True, cwd=ROOT)
    assert result.returncode == 1 and "F401" in result.stdout, (result.stdout, sys.executable)
