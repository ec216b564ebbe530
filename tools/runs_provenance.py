"""Which code computed the committed rows under runs/: one Markdown table, printed from the rows themselves.

Sweep rows (the SQLite results files ``mhalearn sweep`` writes) carry their
own provenance: the commit of the tree that computed each row and whether
that tree had uncommitted changes.  Bench rows (``*.jsonl``) carry
none, so for them the table lists the commits that added or changed the file,
from git.  runs/README.md shows this table; tests/test_layout.py checks that
it is the one this script prints.

    python tools/runs_provenance.py
"""

from __future__ import annotations

import collections
import csv
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "runs"


def sweep_provenance(path: Path) -> tuple[int, str]:
    """The rows of one results file and ``commit (rows)`` for every commit that computed some, ``dirty``
    where its tree had uncommitted changes (read-only: a sweep may be writing the file)."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as connection:
        provenances = [json.loads(text or "{}") for (text,) in connection.execute("SELECT provenance FROM results")]
    counts = collections.Counter(((provenance.get("git_commit") or "unknown")[:7], bool(provenance.get("git_dirty")))
                                 for provenance in provenances)
    return len(provenances), ", ".join(f"{commit}{' dirty' if dirty else ''} ({count})" for (commit, dirty), count
                                       in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def file_commits(path: Path) -> str:
    """The commits that added or changed ``path``, oldest first (git's view: the rows name no code)."""
    # --follow: rows moved beside the script that wrote them keep the commits that wrote them; the move
    # itself (a rename, not A or M) wrote none.
    # %H cut to 7: git's own abbreviation grows with the repository and differs between clones.
    command = ["git", "log", "--follow", "--diff-filter=AM", "--format=%H", "--", str(path.relative_to(ROOT))]
    log = [commit[:7] for commit in
           subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()]
    return ", ".join(reversed(log)) or "not committed"


def provenance_table() -> str:
    """The table: every results file, then every bench rows file, by path under runs/."""
    lines = ["| rows | count | computed by |", "| --- | --- | --- |"]
    for path in sorted(RUNS.rglob("*.db")):
        count, commits = sweep_provenance(path)
        lines.append(f"| `{path.relative_to(RUNS)}` | {count} | {commits} |")
    for path in sorted(RUNS.rglob("*.csv")):  # exports kept without their results file
        with path.open(newline="") as handle:
            rows = list(csv.DictReader(handle))
        if path.with_suffix(".db").exists() or not rows or "provenance.git_commit" not in rows[0]:
            continue
        counts = collections.Counter((row["provenance.git_commit"][:7], row.get("provenance.git_dirty") == "True")
                                     for row in rows)
        commits = ", ".join(f"{commit}{' dirty' if dirty else ''} ({count})" for (commit, dirty), count
                            in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
        lines.append(f"| `{path.relative_to(RUNS)}` | {len(rows)} | {commits} |")
    for path in sorted(RUNS.rglob("*.jsonl")):
        count = sum(1 for line in path.open() if line.strip())
        lines.append(f"| `{path.relative_to(RUNS)}` | {count} | commits {file_commits(path)} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(provenance_table() + "\n")
