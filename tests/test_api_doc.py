"""docs/API.md documents every public function and class of fusegrad, fusegrad.nn,
nn.functional and fusegrad.optim, and names no `fg.` / `F.` / `nn.` attribute that
does not exist.

A name counts as documented where the page writes it in backticks, alone or in a list;
the page's short forms count for what they stand for: `Conv1d/2d/3d` for `Conv1d`,
`Conv2d` and `Conv3d`, and a `*` before or after an underscore (`*_like`, `bitwise_*`)
for every name it matches.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import fusegrad as fg
import fusegrad.nn as nn
import fusegrad.nn.functional as F

DOC = Path(__file__).resolve().parents[1] / "docs" / "API.md"
WORD = r"[A-Za-z_][A-Za-z0-9_]*"


def quoted(text: str) -> list[str]:
    """What the page writes in backticks, outside its fenced code blocks."""
    return re.findall(r"`([^`]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


def documented(text: str) -> tuple[set[str], list[re.Pattern]]:
    """(the names the page writes in backticks, the patterns of its `*` short forms)."""
    names: set[str] = set()
    patterns: list[re.Pattern] = []
    for quoted_text in quoted(text):
        for word in re.findall(r"[A-Za-z_*][A-Za-z0-9_*./]*", quoted_text):
            for part in re.split(r"[./]", word):
                names.add(part)
            # Conv1d/2d/3d, ZeroPad1d/2d: the stem with each suffix
            stem = re.fullmatch(r"(.*?)(\d+d)((?:/\d+d)+)", word.rsplit(".", 1)[-1])
            if stem:
                names |= {stem.group(1) + s for s in [stem.group(2)] + stem.group(3).split("/")[1:]}
            star = word.rsplit(".", 1)[-1]
            if re.fullmatch(r"\*_\w+|\w+_\*", star):  # not `**` nor `*sizes`
                patterns.append(re.compile(re.escape(star).replace(r"\*", WORD)))
    return names, patterns


def undocumented(text: str, names: list[str]) -> list[str]:
    known, patterns = documented(text)
    return sorted(n for n in names if n not in known and not any(p.fullmatch(n) for p in patterns))


def public(module, keep) -> list[str]:
    """The public names of `module` that `keep` accepts, leaving out what it imports from
    outside fusegrad (lr_scheduler's `Counter`)."""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    objs = {n: getattr(module, n, None) for n in names if not n.startswith("_")}
    ours = {
        n for n, o in objs.items() if getattr(o, "__module__", "fusegrad").startswith("fusegrad")
    }
    return [n for n in ours if keep(objs[n])]


def is_api(obj) -> bool:
    """A function or class a user calls (not a submodule, not a `__future__` feature)."""
    return callable(obj) and not inspect.ismodule(obj)


SURFACES = {
    "fusegrad": (fg, is_api),
    "fusegrad.nn": (nn, inspect.isclass),
    "fusegrad.nn.functional": (F, is_api),
    "fusegrad.optim": (fg.optim, inspect.isclass),
    "fusegrad.optim.lr_scheduler": (fg.optim.lr_scheduler, inspect.isclass),
    "fusegrad.optim.swa_utils": (fg.optim.swa_utils, is_api),
}


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_every_public_name_is_documented(surface):
    module, keep = SURFACES[surface]
    names = public(module, keep)
    assert names, f"{surface} exports nothing"
    missing = undocumented(DOC.read_text(), names)
    assert not missing, f"{surface}: not in docs/API.md: {missing}"


def dotted_names(text: str) -> set[str]:
    """The `fg.x.y`, `F.x` and `nn.x` names written in the page's backticks."""
    found = set()
    for quoted_text in quoted(text):
        found |= set(re.findall(rf"\b(?:fg|F|nn)(?:\.{WORD})+", quoted_text))
    return found


def resolves(name: str) -> bool:
    root, *attrs = name.split(".")
    obj = {"fg": fg, "F": F, "nn": nn}[root]
    for attr in attrs:
        if not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


def test_every_dotted_name_exists():
    names = dotted_names(DOC.read_text())
    assert len(names) > 50
    wrong = sorted(n for n in names if not resolves(n))
    assert not wrong, f"docs/API.md names what fusegrad does not have: {wrong}"


def test_a_name_left_out_is_named():
    text = DOC.read_text()
    assert "`GRUCell`" in text
    assert undocumented(text.replace("`GRUCell`", "GRU cells"), ["GRUCell", "GRU"]) == ["GRUCell"]


def test_short_forms_stand_for_their_names():
    names, patterns = documented("`Conv1d/2d/3d`, `fg.zeros` and `*_like`")
    assert {"Conv1d", "Conv2d", "Conv3d", "zeros"} <= names
    assert undocumented("`Conv1d/2d`, `*_like`", ["Conv2d", "ones_like", "Conv3d"]) == ["Conv3d"]
    assert undocumented("`a ** b`, `fg.Tensor(*sizes)`", ["zeros"]) == ["zeros"]
    found = dotted_names("`fg.linalg.norm(x)` and `F.pad`, not fg.zeros")
    assert found == {"fg.linalg.norm", "F.pad"}
    assert documented("```\nx = 1\n```\n`fg.zeros`")[0] == {"fg", "zeros"}
    assert not resolves("fg.linalg.no_such_norm")
