"""One HTML page of a stages folder: `python -m fusegrad.debug_view folder [-o page.html]`.

The folder is what `fusegrad.debug.stages(..., dump_dir=folder)` writes (`frontend/stages.py`:
`NNN_stage.txt` files and `stages.json`). The page is one self-contained file (its CSS and
its few lines of JavaScript inline, nothing fetched, no server) with:

- each graph stage as a table of its nodes, the nodes a stage added or changed against the
  stage before it highlighted and the ones it removed listed struck through, with a box
  to show the changes alone;
- each scheduling stage as its kernels, the rule's changes in words at the top and the
  kernels it touched highlighted;
- each kernel's user source lines beside its code: the loop IR after each lowering step
  (the lines a step changed highlighted), LLVM IR before and after LLVM's passes, and the
  assembly.

>>> html = render_html({"format": 1, "stages": [], "kernels": []}, {})
>>> html.startswith("<!DOCTYPE html>")
True
"""

from __future__ import annotations

import argparse
import difflib
import html as _html
import json
import os
import re
import sys

_KEY = re.compile(r"^(%\d+|kernel %\d+)")
_LAUNCH = re.compile(r" \[\d+\] [^\s:]+")  # the final schedule's "[k] name": not a change

CSS = """
body { font-family: system-ui, sans-serif; margin: 0; display: flex; color: #222; }
nav { width: 260px; height: 100vh; overflow-y: auto; position: sticky; top: 0;
      background: #f4f4f6; padding: 8px; font-size: 13px; flex: none; box-sizing: border-box; }
nav a { display: block; color: #124; text-decoration: none; padding: 1px 0;
        white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
nav a:hover { text-decoration: underline; }
nav h3 { margin: 10px 0 4px; font-size: 13px; }
main { padding: 8px 20px; flex: 1; min-width: 0; }
section { border-bottom: 1px solid #ccc; padding-bottom: 12px; }
h2 { font-size: 17px; margin: 18px 0 4px; }
.sub { color: #555; font-size: 13px; }
pre, td.code { font-family: ui-monospace, monospace; font-size: 12px; }
pre { background: #fafafa; border: 1px solid #ddd; padding: 6px; overflow-x: auto; margin: 4px 0; }
table.listing { border-collapse: collapse; width: 100%; }
table.listing td { padding: 0 6px; vertical-align: top; white-space: pre-wrap; }
table.listing td.site { color: #667; font-size: 12px; }
table.listing td.key { color: #666; width: 7em; font-family: ui-monospace, monospace;
                       font-size: 12px; }
tr.add { background: #d8f5d8; } tr.chg { background: #fff3c4; }
tr.del { background: #fbdada; text-decoration: line-through; color: #844; }
section.only-changes tr.same { display: none; }
.notes { background: #eef3fb; border-left: 3px solid #58c; padding: 4px 8px; margin: 6px 0;
         font-size: 12px; white-space: pre-wrap; font-family: ui-monospace, monospace; }
.kernel { display: grid; grid-template-columns: minmax(240px, 30%) 1fr; gap: 12px; }
.src div { font-family: ui-monospace, monospace; font-size: 12px; margin-bottom: 6px; }
.src .where { color: #555; }
.src .line { background: #fffbe6; border: 1px solid #eed; padding: 2px 4px; white-space: pre;
             overflow-x: auto; }
span.l { display: block; } span.l.chg { background: #fff3c4; }
details > summary { cursor: pointer; font-size: 13px; margin: 3px 0; }
.counts { font-size: 12px; color: #333; }
"""

SCRIPT = """
for (const box of document.querySelectorAll('input.only')) {
  box.addEventListener('change', () =>
    box.closest('section').classList.toggle('only-changes', box.checked));
}
"""


def read_folder(folder: str) -> tuple[dict, dict[str, str]]:
    """A stages folder's index (stages.json) and each stage file's text, by file name."""
    path = os.path.join(folder, "stages.json")
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{folder} has no stages.json: write one with "
            "fusegrad.debug.stages(..., dump_dir=folder)"
        )
    with open(path) as f:
        index = json.load(f)
    texts = {}
    for s in index["stages"]:
        with open(os.path.join(folder, s["file"])) as f:
            texts[s["file"]] = f.read()
    return index, texts


def _blocks(text: str) -> tuple[list[str], dict[str, str]]:
    """A listing's header lines (`#`) and its blocks by key: a node (`%12`) or a kernel
    (`kernel %45`, with its indented lines)."""
    notes: list[str] = []
    blocks: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        m = _KEY.match(line)
        if m:
            key = m.group(1)
            blocks[key] = line
        elif line[:1].isspace() and key is not None:
            blocks[key] += "\n" + line
        elif line.startswith("#"):
            notes.append(line[2:] if line.startswith("# ") else line[1:])
    return notes, blocks


def _listing_html(text: str, before: str | None) -> tuple[str, str]:
    """A graph or schedule stage as a table, its blocks marked against the stage before
    (`before`, None for the first): the table and a line counting the changes."""
    notes, blocks = _blocks(text)
    old = _blocks(before)[1] if before is not None else None
    rows, counts = [], {"add": 0, "chg": 0, "del": 0}
    for key, block in blocks.items():
        body = block[len(key) :]
        if old is None:
            kind = "same"
        elif key not in old:
            kind = "add"
        elif _LAUNCH.sub("", old[key][len(key) :]) != _LAUNCH.sub("", body):
            kind = "chg"
        else:
            kind = "same"
        counts[kind] = counts.get(kind, 0) + 1
        rows.append(_row(kind, key, body))
    for key, block in (old or {}).items():
        if key not in blocks:
            counts["del"] += 1
            rows.append(_row("del", key, block[len(key) :]))
    head = "".join(f"<div>{_html.escape(n)}</div>" for n in notes[1:] if n)  # (1: the title)
    counted = (
        f"{counts['add']} added, {counts['chg']} changed, {counts['del']} removed "
        "against the stage before"
        if old is not None
        else "the first stage of its kind"
    )
    table = f'<div class="notes">{head}</div><table class="listing">{"".join(rows)}</table>'
    return table, counted


def _row(kind: str, key: str, body: str) -> str:
    """One node (its op, then where it was written) or one kernel, as a table row."""
    op, _, site = body.lstrip(" =").partition("  # ")
    return (
        f'<tr class="{kind}"><td class="key">{_html.escape(key)}</td>'
        f'<td class="code">{_html.escape(op)}</td><td class="site">{_html.escape(site)}</td></tr>'
    )


def _code_html(text: str, before: str | None) -> str:
    """Code as a block, the lines changed against `before` (the step before) highlighted."""
    lines = text.splitlines()
    changed: set[int] = set()
    if before is not None:
        matcher = difflib.SequenceMatcher(None, before.splitlines(), lines, autojunk=False)
        for tag, _, _, j1, j2 in matcher.get_opcodes():
            if tag in ("replace", "insert"):
                changed.update(range(j1, j2))
    spans = (
        f'<span class="l{" chg" if k in changed else ""}">{_html.escape(line) or " "}</span>'
        for k, line in enumerate(lines)
    )
    return f"<pre>{''.join(spans)}</pre>"


def render_html(index: dict, texts: dict[str, str]) -> str:
    """The page for a stages index and its texts (by file name), as a string."""
    stages = index.get("stages", [])
    kernels = index.get("kernels", [])
    nav = ["<nav><h3>fusegrad stages</h3>"]
    body = []
    last: dict[tuple, str] = {}  # (realize, kind) -> the text of the last stage of that kind
    for s in stages:
        if s["kind"] == "code":
            continue
        anchor = f"s-{s['name']}"
        nav.append(f'<a href="#{anchor}">{_html.escape(s["name"])}</a>')
        text = texts[s["file"]]
        table, counted = _listing_html(text, last.get((s["realize"], s["kind"])))
        last[(s["realize"], s["kind"])] = text
        body.append(
            f'<section id="{anchor}"><h2>{_html.escape(s["name"])}: {_html.escape(s["title"])}'
            f'</h2><div class="counts">{counted} <label><input type="checkbox" class="only">'
            f' show the changes only</label> <span class="sub">{_html.escape(s["file"])}'
            f"</span></div>{table}</section>"
        )
    if kernels:
        nav.append("<h3>kernels</h3>")
    for k, info in enumerate(kernels):
        anchor = f"k-{k}"
        nav.append(f'<a href="#{anchor}">{k:02d} {_html.escape(info["name"])}</a>')
        sources = (
            "".join(
                f'<div><div class="where">{_html.escape(where)} {_html.escape(label)}</div>'
                f'<div class="line">{_html.escape(line) or "(source not found)"}</div></div>'
                for where, label, line in info["sources"]
            )
            or "<div>(no user line: fusegrad's own constants)</div>"
        )
        code, before = [], None
        for s in (s for s in stages if s["kind"] == "code" and s["kernel"] == k):
            text = texts[s["file"]]
            is_loop = s["language"] == "loop"
            opened = " open" if is_loop else ""
            what = _html.escape(s["title"].split(": ", 1)[-1])
            code.append(
                f'<details{opened}><summary>{what} <span class="sub">{s["file"]}</span>'
                f"</summary>{_code_html(text, before if is_loop else None)}</details>"
            )
            before = text if is_loop else before
        body.append(
            f'<section id="{anchor}"><h2>kernel {k:02d}: {_html.escape(info["name"])}</h2>'
            f'<div class="sub">stores {_html.escape(info["root"])}; why a kernel: '
            f"{_html.escape(info['reason'])}</div>"
            f'<div class="kernel"><div class="src">{sources}</div><div>{"".join(code)}</div>'
            "</div></section>"
        )
    nav.append("</nav>")
    count = f"{len(stages)} stages, {len(kernels)} kernels"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>fusegrad stages ({count})</title><style>{CSS}</style></head><body>"
        f'{"".join(nav)}<main><h1>fusegrad: pass by pass</h1><div class="sub">{count}; '
        "green: added by the stage, yellow: changed, red: removed (against the stage "
        "before of the same kind)</div>"
        f"{''.join(body)}</main><script>{SCRIPT}</script></body></html>\n"
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m fusegrad.debug_view folder [-o page.html]`: write the page (default
    `folder/index.html`) and print its path."""
    ap = argparse.ArgumentParser(
        prog="python -m fusegrad.debug_view",
        description="One HTML page of a fusegrad.debug.stages(..., dump_dir=folder) folder.",
    )
    ap.add_argument("folder")
    ap.add_argument("-o", "--output", help="the page to write (default: folder/index.html)")
    args = ap.parse_args(argv)
    try:
        index, texts = read_folder(args.folder)
    except (OSError, ValueError, KeyError) as e:
        print(f"fusegrad.debug_view: {e}", file=sys.stderr)
        return 1
    out = args.output or os.path.join(args.folder, "index.html")
    with open(out, "w") as f:
        f.write(render_html(index, texts))
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
