"""Which code computed a result: the provenance stored with every row of a sweep ([design: experiments]).

:func:`code_provenance` describes the running code once per process:

``mhalearn``
    the package version (``mhalearn.__version__``);
``source_hash``
    SHA-256 (first 16 hex digits) of every ``.py`` file of the package, by
    relative path and content.  It identifies the code exactly, from a
    checkout or from an installed copy alike, and is what :func:`code_id` is
    built from.  Grid files are left out: editing a grid changes which cells
    a sweep computes, not how a cell is computed (the grid of every sweep is
    recorded in the results file);
``git_commit``, ``git_dirty``
    the commit of the checkout the package is imported from and whether
    tracked files differ from it (None when it is not imported from a git
    checkout, e.g. an installed wheel);
``python``, ``numpy``, ``numba``, ``platform``
    versions of the interpreter, the numerical libraries and the OS.

A resumed sweep compares :func:`code_id` of the stored rows with the
running code's and refuses to mix them unless told to (``--allow-mixed``):
two rows of one figure should come from the same code.  Library versions are
recorded but not compared (they change the last digits, not the method).
"""

from __future__ import annotations

import functools
import hashlib
import platform
import subprocess
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_HASHED_SUFFIXES = (".py",)


def source_hash(package_dir: Path = _PACKAGE_DIR) -> str:
    """SHA-256 (16 hex digits) of the package's source files, by relative path and content."""
    digest = hashlib.sha256()
    for path in sorted(p for p in package_dir.rglob("*") if p.suffix in _HASHED_SUFFIXES and p.is_file()):
        relative = path.relative_to(package_dir).as_posix()
        if "__pycache__" in relative:
            continue
        digest.update(relative.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(["git", "-C", str(_PACKAGE_DIR.parent), *args], capture_output=True, text=True,
                                timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def git_state() -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the git checkout holding the package, or ``(None, None)`` outside one."""
    toplevel = _git("rev-parse", "--show-toplevel")
    if toplevel is None or not (Path(toplevel) / "pyproject.toml").is_file() \
            or Path(toplevel).resolve() != _PACKAGE_DIR.parent:
        return None, None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return commit, (None if status is None else bool(status))


@functools.lru_cache(maxsize=1)
def code_provenance() -> dict:
    """What the running process computes with (see the module docstring); cached per process."""
    import numba
    import numpy

    from ._version import __version__

    commit, dirty = git_state()
    return {
        "mhalearn": __version__,
        "source_hash": source_hash(),
        "git_commit": commit,
        "git_dirty": dirty,
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "numba": numba.__version__,
        "platform": f"{sys.platform}-{platform.machine()}",
    }


def code_id(provenance: dict | None = None) -> str:
    """Short identity of the code in ``provenance`` (default: the running code), e.g. ``0.1.0+src.3f2a…``.

    Two rows with equal code ids were computed by byte-identical package
    sources.
    """
    provenance = code_provenance() if provenance is None else provenance
    return f"{provenance['mhalearn']}+src.{provenance['source_hash']}"


def describe(provenance: dict | None) -> str:
    """One line for humans: code id, git commit and dirty flag."""
    if not provenance:
        return "unknown code (row stored before provenance was recorded)"
    text = code_id(provenance)
    if provenance.get("git_commit"):
        text += f" (git {provenance['git_commit'][:10]}{', dirty' if provenance.get('git_dirty') else ''})"
    else:
        text += " (installed, no git checkout)"
    return text
