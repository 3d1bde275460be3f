"""The minifier's output: a case written as a standalone script of fusegrad ops.

`emit(case, failure, path)` writes a script whose `build()` makes the case's graph and
whose `main()` checks it, compiled against the reference evaluator
(`frontend/minify_case.py` `check`), exiting 1 while it fails. Each node is spelled with
the public op that builds exactly it where there is one (`a * b`, `x.exp()`,
`x.sum(axes, keepdim=True)`: `_PUBLIC`) and otherwise with the IR node constructor
(`N.pad(...)`, `N.const(...)`: `_IR`) wrapped in a `Tensor`; inputs of at most `INLINE`
elements are written inline, larger ones to an `.npz` beside the script. `builds(path)`
runs a written script's `build()` and records the graph it makes, so the minifier can
check that the script builds the case exactly (and fall back to the constructors where
a public op builds otherwise).
"""

from __future__ import annotations

import math
import os
import runpy

import numpy as np

from .ir.node import toposort
from .ir.ops import BINARY, MATH, REDUCE, UNARY, Ops
from .minify_case import Built, Case, Entry, Failure
from .runtime.backend import get_backend

INLINE = 64  # inputs of at most this many elements are written into the script

# public ops that build exactly one primitive: `{0}`... the sources, `{arg}` the arg
_PUBLIC: dict[Ops, str] = {
    Ops.NEG: "-{0}",
    Ops.RECIP: "{0}.reciprocal()",
    **{op: f"{{0}}.{m.name}()" for op, m in MATH.items() if op is not Ops.ERFC},
    Ops.ADD: "{0} + {1}",
    Ops.MUL: "{0} * {1}",
    Ops.DIV: "{0} / {1}",
    Ops.MAX: "fg.maximum({0}, {1})",
    Ops.CMPLT: "{0} < {1}",
    Ops.CMPEQ: "{0} == {1}",
    Ops.WHERE: "fg.where({0}, {1}, {2})",
    Ops.SUM: "{0}.sum({arg}, keepdim=True)",
    Ops.REDUCE_MAX: "{0}.amax({arg}, keepdim=True)",
    Ops.RESHAPE: "{0}.reshape({arg})",
    Ops.PERMUTE: "{0}.permute({arg})",
    Ops.EXPAND: "{0}.expand({arg})",
    Ops.FLIP: "{0}.flip({arg})",
    Ops.CAST: "{0}.to({dtype})",
}

# the IR node constructors, for the rest (and wherever the public spelling built otherwise)
_IR: dict[Ops, str] = {
    Ops.CONST: "N.const({arg}, {shape}, {dtype})",
    Ops.INDEX: "N.index({shape}, {dtype})",
    Ops.RAND: "N.rand({0}, {shape}, {dtype})",
    Ops.CAST: "N.cast({0}, {dtype})",
    Ops.WHERE: "N.where({0}, {1}, {2})",
    **{op: f"N.{op.name.lower()}({{0}}, {{arg}})" for op in (Ops.RESHAPE, Ops.PERMUTE)},
    **{op: f"N.{op.name.lower()}({{0}}, {{arg}})" for op in (Ops.EXPAND, Ops.PAD, Ops.SHRINK)},
    Ops.FLIP: "N.flip({0}, {arg})",
    Ops.CONTIGUOUS: "N.contiguous({0}, {arg})",
    Ops.DETACH: "N.detach({0})",
    Ops.GATHER: "N.gather({0}, {1})",
    Ops.SCATTER_ADD: "N.scatter_add({0}, {1}, *{arg})",
    **{op: f"N.unary(Ops.{op.name}, {{0}})" for op in UNARY - {Ops.CAST}},
    **{op: f"N.binary(Ops.{op.name}, {{0}}, {{1}})" for op in BINARY},
    **{op: f"N.reduce(Ops.{op.name}, {{0}}, {{arg}})" for op in REDUCE},
}


def _literal(v) -> str:
    """Python source for a number or a tuple of them (non-finite floats spelled out)."""
    if isinstance(v, tuple):
        inner = ", ".join(_literal(x) for x in v)
        return f"({inner},)" if len(v) == 1 else f"({inner})"
    if isinstance(v, float) and not math.isfinite(v):
        return f'float("{v}")'
    return repr(v)


def _statement(k: int, e: Entry, public: bool) -> str:
    """The line of the repro that makes entry `k` (an input's value comes from `_input`)."""
    spelling = _PUBLIC.get(e.op) if public else None
    if spelling is not None and e.op in (Ops.DIV, Ops.SUM) and not e.dtype.is_float:
        spelling = None  # torch's integer division and sum change the dtype
    dtype = f"fg.{e.dtype.name}"
    if spelling is not None:
        srcs = [f"v{i}" for i in e.srcs]
        return f"v{k} = " + spelling.format(*srcs, arg=_literal(e.arg), dtype=dtype)
    srcs = [f"v{i}.node" for i in e.srcs]
    text = _IR[e.op].format(*srcs, arg=_literal(e.arg), shape=_literal(e.shape), dtype=dtype)
    return f"v{k} = fg.Tensor({text})"


def _input(k: int, e: Entry, value: np.ndarray, npz: dict) -> str:
    """The line making input `k`: its value inline, or from the .npz (`npz` collects)."""
    on_host = e.device is None or get_backend(e.device).is_host
    device = "" if on_host else f", device={e.device!r}"
    if e.dtype.is_float and e.dtype.itemsize < 4:
        value = value.astype(np.float32)  # (float16 and bfloat16: exact in float32)
    if value.size <= INLINE:
        flat = ", ".join(_literal(x) for x in value.reshape(-1).tolist())
        data = f"np.array([{flat}]).reshape({_literal(value.shape)})"
    else:
        npz[f"v{k}"] = value
        data = f'DATA["v{k}"]'
    return f"v{k} = fg.tensor({data}, dtype=fg.{e.dtype.name}{device})"


def emit(
    case: Case, failure: Failure, path: str, source: str = "", needs_fusion=(), public=True
) -> str:
    """Write the repro script of `case` to `path` (and its large inputs to an .npz
    beside it); returns the script's text."""
    npz: dict[str, np.ndarray] = {}
    body = []
    for k, e in enumerate(case.entries):
        if e.op is Ops.BUFFER:
            body.append(_input(k, e, case.values[k], npz))
        else:
            body.append(_statement(k, e, public))
    outputs = ", ".join(f"v{k}" for k in case.roots)
    what = (
        "its compiled result differs from the reference evaluator (ir/reference.py)"
        if failure.kind == "mismatch"
        else f"compiling it raises {failure.error}"
    )
    fused = ""
    if needs_fusion:
        named = ", ".join(f"v{k} ({case.entries[k].op.name})" for k in needs_fusion)
        fused = _wrap(
            f"It fails only fused: cutting {named} into a kernel of its own (what "
            "fg.debug.cut asks) makes it pass."
        )
    name = os.path.basename(path)
    npz_name = os.path.splitext(name)[0] + ".npz"
    doc = [
        f'"""A failing graph of {len(case)} nodes, found by `python -m fusegrad.minify'
        f"{' ' + _wrap(source, width=10_000) if source else ''}`.",
        "",
        _wrap(f"`python {name}` exits 1 while {what}, 0 once that is fixed."),
        f"Seen: {_wrap(str(failure))}",
        *(["", *fused.strip().splitlines()] if fused else []),
        "",
        "Ops without a public fusegrad spelling are built with the IR node constructors",
        '(fusegrad.ir.node) and wrapped in a Tensor."""',
    ]
    imports = [
        *(["import os"] if npz else []),
        "import sys",
        "",
        "import numpy as np",
        "",
        "import fusegrad as fg",
        "from fusegrad.ir import node as N",
        "from fusegrad.ir.ops import Ops",
        "from fusegrad.minify import check",
    ]
    if npz:
        imports += ["", f'DATA = np.load(os.path.join(os.path.dirname(__file__), "{npz_name}"))']
    functions = [
        "def build() -> list:",
        '    """The graph; returns the outputs the check compares."""',
        *(f"    {line}" for line in body),
        f"    return [{outputs}]",
        "",
        "",
        "def main() -> int:",
        "    bad = check(build())  # compiled by fusegrad, against the reference evaluator",
        '    print("\\n".join(bad) if bad else "matches the reference evaluator")',
        "    return 1 if bad else 0",
        "",
        "",
        'if __name__ == "__main__":',
        "    sys.exit(main())",
    ]
    text = "\n".join([*doc, "", *imports, "", "", *functions]) + "\n"
    with open(path, "w") as f:
        f.write(text)
    if npz:
        np.savez(os.path.join(os.path.dirname(os.path.abspath(path)), npz_name), **npz)
    return text


def _wrap(text: str, width: int = 88) -> str:
    words, lines, line = text.split(), [], ""
    for w in words:
        if line and len(line) + 1 + len(w) > width:
            lines.append(line)
            line = w
        else:
            line = f"{line} {w}" if line else w
    text = "\n".join([*lines, line])
    return text.replace("\\", "\\\\").replace('"""', "'''")  # (for the repro's docstring)


def builds(path: str) -> Case:
    """The case the repro script at `path` builds (its `build()` run here)."""
    namespace = runpy.run_path(path, run_name="fusegrad_minify_repro")
    outputs = namespace["build"]()
    built = Built([t.node for t in outputs])
    for n in toposort(built.roots, stop=lambda n: n.op is Ops.BUFFER):
        if n.op is Ops.BUFFER:
            built.values[id(n)] = np.array(n.arg.numpy()).reshape(n.shape)
    return built.case()


def same_graph(a: Case, b: Case) -> bool:
    def key(c: Case):
        return [(e.op, e.srcs, repr(e.arg), e.shape, e.dtype) for e in c.entries], c.roots

    return key(a) == key(b)
