"""docs/ARCHITECTURE.md's list of IR primitives is ir/ops.py's, group by group; it links a
page for each pipeline stage (docs/pipeline/), and every page it links exists, as does every
source file the architecture pages name."""

from __future__ import annotations

import re
from pathlib import Path

from fusegrad.ir.ops import ELEMENTWISE, LEAF, MATH, MOVEMENT, REDUCE, Ops

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "ARCHITECTURE.md"
STAGES = ROOT / "docs" / "pipeline"

# the doc's bullet label -> the ops its bullet must name
GROUPS = {
    "leaves": {op.name for op in LEAF} | {"RAND"},
    "elementwise": {op.name for op in ELEMENTWISE},
    "reductions": {op.name for op in REDUCE},
    "movement (zero-copy views)": {op.name for op in MOVEMENT},
    "rows by index": {"GATHER", "SCATTER_ADD"},
    "markers": {"CONTIGUOUS", "DETACH"},
}


def documented_groups(text: str) -> dict[str, set[str]]:
    """label -> the upper-case names in backticks of each bullet of the IR's primitive list
    (the bullets after 'hash-consed', up to the line that names this test)."""
    lines = text[text.index("hash-consed") :].splitlines()[1:]
    groups: dict[str, set[str]] = {}
    label = None
    for line in lines:
        if "tests/test_architecture_doc.py" in line:
            break
        if line.lstrip().startswith("- "):
            label, _, line = line.lstrip()[2:].partition(":")
            groups[label] = set()
        for quoted in re.findall(r"`([^`]*)`", line):
            groups[label] |= {w for w in quoted.split() if re.fullmatch(r"[A-Z][A-Z_]*", w)}
    return groups


def test_the_primitive_list_names_every_primitive_and_no_other():
    named = set().union(*documented_groups(DOC.read_text()).values())
    primitives = {op.name for op in Ops} - {"MACRO"}  # described apart, not a primitive
    assert named == primitives, (
        f"missing from the doc: {sorted(primitives - named)}, "
        f"not primitives: {sorted(named - primitives)}"
    )


def test_each_group_is_ir_ops_group():
    assert documented_groups(DOC.read_text()) == GROUPS


def test_the_float_functions_are_the_math_rows():
    text = DOC.read_text()
    (listed,) = re.findall(r"the float functions `([A-Z_ ]+)`", text)
    assert set(listed.split()) == {op.name for op in MATH}


def test_a_primitive_left_out_is_named():
    text = DOC.read_text().replace(" ERFC`", "`", 1)
    named = set().union(*documented_groups(text).values())
    assert {op.name for op in Ops} - {"MACRO"} - named == {"ERFC"}


def linked_pages(path: Path) -> set[Path]:
    """The local .md files `path` links to (anchors dropped), resolved from its folder."""
    links = re.findall(r"\]\(([^)#\s]+\.md)(?:#[^)]*)?\)", path.read_text())
    return {(path.parent / link).resolve() for link in links if "://" not in link}


def test_each_pipeline_stage_page_is_linked_and_links_back():
    pages = sorted(STAGES.glob("*.md"))
    assert len(pages) >= 7, "graph, autodiff, schedule, lowering, rendering, compiling, runtime"
    assert set(pages) <= linked_pages(DOC), "ARCHITECTURE.md must link each stage page"
    for page in pages:
        assert DOC.resolve() in linked_pages(page), f"{page.name} must link ARCHITECTURE.md"


def test_every_linked_page_exists():
    for page in [DOC, *STAGES.glob("*.md")]:
        missing = sorted(str(p) for p in linked_pages(page) if not p.exists())
        assert not missing, f"{page.name} links pages that do not exist: {missing}"


def named_sources(text: str) -> set[str]:
    """The repository paths `folder/file.py` (or .h, .c) the text writes in backticks."""
    folders = "frontend|ir|pipeline|runtime|nn|datasets|benchmarks|tests|scripts|examples"
    names = set()
    for quoted in re.findall(r"`([^`]+)`", text):
        names |= set(re.findall(rf"\b(?:{folders})/[\w/]+\.(?:py|h|c)\b", quoted))
    return names


def test_every_named_source_file_exists():
    pages = [DOC, *STAGES.glob("*.md")]
    named = set().union(*(named_sources(p.read_text()) for p in pages))
    assert len(named) > 20
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"the architecture pages name files that do not exist: {missing}"


def test_a_wrong_link_or_file_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("[a](no_such.md) and [b](page.md#x), `pipeline/no_such.py` and `ir/ops.py`")
    assert {p.name for p in linked_pages(page)} == {"no_such.md", "page.md"}
    assert named_sources(page.read_text()) == {"pipeline/no_such.py", "ir/ops.py"}
