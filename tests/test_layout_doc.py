"""docs/LAYOUT.md, the walk of one call through the folders: every file it names exists,
and it crosses between packages at most five times."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "LAYOUT.md"
# a repository path the page writes: a top-level folder, then a file with an extension
FOLDERS = "frontend|ir|pipeline|runtime|nn|datasets|docs|tests|scripts|benchmarks|examples"
PATH = re.compile(rf"\b(?:{FOLDERS})/[\w/.-]*\w\.(?:py|md|ll|h|cpp|sh)\b")
PACKAGES = ("frontend", "ir", "pipeline", "runtime", "nn")


def named_paths(text: str) -> set[str]:
    """The repository paths `folder/.../file.ext` named in `text`."""
    return set(PATH.findall(text))


def test_the_path_pattern_finds_paths_and_nothing_else():
    text = "`pipeline/driver.py`, runtime/engine.py's, (docs/pipeline/3-schedule.md) x/y.py"
    assert named_paths(text) == {
        "pipeline/driver.py",
        "runtime/engine.py",
        "docs/pipeline/3-schedule.md",
    }


def test_every_file_the_layout_page_names_exists():
    named = named_paths(PAGE.read_text())
    assert len(named) >= 20, sorted(named)
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"docs/LAYOUT.md names files that do not exist: {missing}"


def test_the_walk_crosses_packages_at_most_five_times():
    """The page's numbered sections are the walk: one package each, in order."""
    sections = re.findall(r"^## \d+\. (\w+):", PAGE.read_text(), re.M)
    assert sections and all(s in PACKAGES for s in sections), sections
    crossings = sum(a != b for a, b in zip(sections, sections[1:]))
    assert 1 <= crossings <= 5, sections
