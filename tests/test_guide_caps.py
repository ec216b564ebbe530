"""The guide stays a guide (issue 73): each capped page within its lines, and no page names a commit.

Measured figures, per-teacher tables, reruns, provenance and investigation notes belong in
``runs/<study>/README.md`` beside their rows; a guide page gives the result and links there.  The
rows' provenance columns and the runs READMEs name the commits that computed them, never the guide.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# Lines each page may hold (issue 73).  A page that needs more moves its detail to runs/.
CAPS = {"README.md": 200, "docs/chen_li.md": 400, "docs/design.md": 600, "docs/learners_vs_m.md": 400,
        "docs/benchmarks.md": 250}


def guide_pages(root: Path = ROOT) -> list[Path]:
    """README.md, CHANGELOG.md and the sources of the documentation site (not its build or gallery output)."""
    docs = root / "docs"
    skipped = (docs / "_build", docs / "auto_examples")
    sources = [path for suffix in ("*.md", "*.rst") for path in docs.rglob(suffix)
               if not any(path.is_relative_to(folder) for folder in skipped)]
    return [root / "README.md", root / "CHANGELOG.md", *sorted(sources)]


# A short or full commit hash as text: 7-40 lowercase hex digits, word-bounded, with at least one letter
# and one digit (so no decimal number and no English word is taken for one).
HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")
HEX_WORD = re.compile(r"\b[0-9a-f]{7,40}\b")


def known_commits(root: Path = ROOT) -> list[str]:
    """Every commit git knows in ``root`` (empty outside a git checkout)."""
    try:
        result = subprocess.run(["git", "rev-list", "--all"], cwd=root, capture_output=True, text=True, timeout=60)
    except OSError:
        return []
    return result.stdout.split() if result.returncode == 0 else []


def named_commits(text: str, commits: list[str]) -> list[str]:
    """The commit hashes ``text`` names: hash-shaped words, and any hex word that begins a known commit
    (a hash of digits alone, or of letters alone, which the shape cannot tell from a number or a word)."""
    found = {match.start(): match.group() for match in HASH.finditer(text)}
    for match in HEX_WORD.finditer(text):
        if match.start() not in found and any(commit.startswith(match.group()) for commit in commits):
            found[match.start()] = match.group()
    return [found[start] for start in sorted(found)]


@pytest.mark.parametrize("page", sorted(CAPS))
def test_each_capped_page_is_within_its_lines(page):
    lines = len((ROOT / page).read_text(encoding="utf-8").splitlines())
    assert lines <= CAPS[page], (f"{page} has {lines} lines, over its cap of {CAPS[page]}: put per-teacher tables, "
                                 "reruns, provenance and notes in runs/<study>/README.md and link to it")


def test_no_guide_page_names_a_commit():
    commits = known_commits()
    pages = guide_pages()
    assert len(pages) >= 20 and all(ROOT / page in pages for page in CAPS)
    named = {page.relative_to(ROOT).as_posix(): hashes for page in pages
             if (hashes := named_commits(page.read_text(encoding="utf-8"), commits))}
    assert named == {}, f"commit hashes in the guide (they belong in runs/<study>/README.md): {named}"


def test_every_commit_of_the_history_is_caught_and_numbers_are_not():
    commits = known_commits()
    if not commits:
        pytest.skip("not a git checkout")
    short = subprocess.run(["git", "log", "--format=%h"], cwd=ROOT, capture_output=True, text=True).stdout.split()
    assert len(short) >= 100
    for name in (*short, *commits[:50]):
        assert named_commits(f"Measured on {name} (clean tree), {name}.", commits) == [name, name], name
    # The shape alone catches a hash git does not know (a commit of another clone, a rewritten one).
    assert named_commits("rows by 2e8acc7 and 9cdbae9f", []) == ["2e8acc7", "9cdbae9f"]
    prose = ("n* = 17.2·m^1.04 at 10⁸ and 3·10⁷; ε = 1e-6, 1e+05, 2e-17; 974535 rows, 1000000 sequences, "
             "0.0379 off; a deadbeef or facade; `noise_body_047cf27.jsonl`; 2,000,000; #1234; 0x7f")
    assert named_commits(prose, commits) == []
