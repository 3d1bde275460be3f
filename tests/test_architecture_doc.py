"""docs/ARCHITECTURE.md's list of IR primitives is ir/ops.py's, group by group."""

from __future__ import annotations

import re
from pathlib import Path

from fusegrad.ir.ops import ELEMENTWISE, LEAF, MATH, MOVEMENT, REDUCE, Ops

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"

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
