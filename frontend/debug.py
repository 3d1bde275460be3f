"""Seeing what fusegrad compiled: `kernels()` returns every kernel behind some tensors.

>>> import fusegrad as fg
>>> x = fg.randn(1000)
>>> ks = fg.kernels((x * 2).exp())
>>> len(ks), ks[0].ops[-1]
(1, 'EXP')

Each record has `name`, `ops` (the fused ops), `lines` (your file:lines they
came from), `reason` (why the kernel's output is materialized), `loop_ir`,
`llvm_ir`, `llvm_ir_optimized`, `asm` and `cuda_c`, plus `seconds` (None for a kernel that
ran inside a native program, timed as a whole; FUSEGRAD_DEBUG=1 times each), `bytes`,
`flops` and `cache` ("compiled", "disk" or "memory").
"""

from __future__ import annotations

from .ir import phases
from .runtime.engine import engine
from .tensor import Tensor, realize


def compile_times(reset: bool = False) -> dict[str, float]:
    """Seconds spent so far in each compile phase (see `fusegrad.ir.phases`): autodiff,
    key (schedule lookup), schedule, lower (loop IR), render (LLVM IR), llvm (machine
    code, or loading it from the disk cache) and program; `reset=True` zeroes them after.

    >>> import fusegrad as fg
    >>> sorted(fg.compile_times())[:3]
    ['autodiff', 'key', 'llvm']
    """
    out = phases.snapshot()
    if reset:
        phases.reset()
    return out


def kernels(*tensors: Tensor) -> list:
    """Realize `tensors` and return the kernels that computed them, in launch order."""
    fresh = realize(*tensors)
    if fresh:
        return fresh
    out: list = []
    for t in tensors:
        for rec in getattr(engine.value(t.node), "kernels", []):
            if all(rec is not r for r in out):
                out.append(rec)
    return out


def graph_dot(*tensors: Tensor) -> str:
    """The graph behind `tensors` in Graphviz DOT, without running it: one cluster per kernel
    the scheduler would cut, labelled with its reason; realized inputs are boxes. A value
    that several kernels recompute is drawn once, in the first of them.

    >>> import fusegrad as fg
    >>> x = fg.randn(4, 3).realize()
    >>> "cluster_0" in fg.graph_dot(x.softmax(1))
    True

    Render it with Graphviz: `dot -Tsvg graph.dot -o graph.svg`.
    """
    from .ir.node import toposort
    from .ir.ops import Ops
    from .ir.schedule import schedule

    has_value = engine.has_value_predicate()
    roots = [t.node for t in tensors if not has_value(t.node)]
    items = schedule(roots, has_value) if roots else []
    lines = ["digraph fusegrad {", "  rankdir=BT;", '  node [fontname="monospace", fontsize=10];']
    names: dict[int, str] = {}

    def name(n) -> str:
        if id(n) not in names:
            names[id(n)] = f"n{len(names)}"
        return names[id(n)]

    def label(n) -> str:
        shape = "x".join(map(str, n.shape)) or "scalar"
        extra = f" {n.arg}" if n.op is Ops.CONST else ""
        return f"{n.op.name}{extra}\\n{shape} {n.dtype.name}"

    placed: set[int] = set()
    for k, item in enumerate(items):
        reason = item.reason.replace('"', "'")
        lines.append(f"  subgraph cluster_{k} {{")
        lines.append(f'    label="kernel {k}: {reason}"; style=rounded; color=blue;')
        for n in item.nodes:
            if id(n) not in placed:
                placed.add(id(n))
                lines.append(f'    {name(n)} [label="{label(n)}"];')
        lines.append("  }")
    every = toposort([t.node for t in tensors], stop=has_value)
    for n in every:
        if id(n) not in placed:
            shape = "box" if has_value(n) else "ellipse"
            lines.append(f'  {name(n)} [label="{label(n)}", shape={shape}];')
        if not has_value(n):
            for s in n.srcs:
                lines.append(f"  {name(s)} -> {name(n)};")
    lines.append("}")
    return "\n".join(lines)
