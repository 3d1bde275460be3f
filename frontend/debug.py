"""Seeing what fusegrad compiled: `kernels()` returns every kernel behind some tensors.

>>> import fusegrad as fg
>>> x = fg.randn(1000)
>>> ks = fg.kernels((x * 2).exp())
>>> len(ks), ks[0].ops[-1]
(1, 'EXP')

Each record has `name` (the one name the listing, launch line, dump, profile and
graph use), `ops` (the fused primitives), `lines` (your file:lines they came
from), `user_ops` (the user-level ops: "linear (train.py:9)"), `op_groups` (each
user-level op with its primitives), `roles` (forward, backward, optimizer),
`reason` (why the kernel's output is materialized), `loop_ir`,
`llvm_ir`, `llvm_ir_optimized`, `asm` and `cuda_c`, plus `seconds` (None for a kernel that
ran inside a native program, timed as a whole; FUSEGRAD_DEBUG=1 times each), `bytes`,
`flops` and `cache` ("compiled", "disk" or "memory").

Steering the scheduler (`frontend/steering.py`): `cut(t)`, `fuse(t)`, `with
no_fusion():`, `with disable_rule(name):` and `schedule_rules()`; running one dumped
kernel alone: `replay(path)` (`frontend/replay.py`, `python -m fusegrad.replay`). The IR
after each compiler stage, as text and as one HTML page: `stages(*tensors)` or
`stages(step, *args)` (`frontend/stages.py`, `python -m fusegrad.debug_view`).
"""

from __future__ import annotations

from .ir.node import toposort
from .ir.ops import Ops
from .ir.sites import site_of
from .pipeline.schedule import schedule
from .runtime import phases
from .runtime.backend import get_backend
from .runtime.config import config
from .runtime.engine import engine, expand_for, kernel_names
from .stages import stages as stages  # (fg.debug.stages: frontend/stages.py)
from .steering import cut as cut  # (fg.debug's steering names: frontend/steering.py)
from .steering import disable_rule as disable_rule
from .steering import fuse as fuse
from .steering import no_fusion as no_fusion
from .steering import schedule_rules as schedule_rules
from .tensor import Tensor, realize


def replay(
    path: str,
    ll: str | None = None,
    runs: int = 10,
    cu: str | bool | None = None,
    emulate: bool = False,
):
    """Run the dumped kernel `path` alone, checked and timed: its `.ll` (or `ll`), or with
    `cu=True` its CUDA C (`cu="edited.cu"`: another file) on the GPU, else (or with
    `emulate`) on the CPU emulator (`frontend/replay.py`'s `replay`, imported here when
    called: `python -m fusegrad.replay` runs that module as `__main__`, which a copy
    imported with the package would shadow)."""
    # deferred: `python -m fusegrad.replay` runs frontend/replay.py as __main__
    from .replay import replay as run

    return run(path, ll, runs, cu, emulate)


def compile_times(reset: bool = False) -> dict[str, float]:
    """Seconds spent so far in each compile phase (see `fusegrad.runtime.phases`): autodiff,
    key (schedule lookup), schedule, lower (loop IR), render (LLVM IR), llvm (machine
    code, or loading it from the disk cache) and program; `reset=True` zeroes them after.

    >>> import fusegrad as fg
    >>> {"autodiff", "key", "schedule", "lower", "render", "llvm"} <= set(fg.compile_times())
    True
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


def graph_dot(*tensors: Tensor, params=None, collapse: bool | None = None) -> str:
    """The graph behind `tensors` in Graphviz DOT, without running it.

    Each kernel the scheduler would cut is a cluster named as it will run (the name
    the launch line, the dump and the profile use) with the reason it is a kernel;
    each op shows its primitive, shape and dtype, and the user-level op and line it
    came from (`linear @ train.py:9`). Realized inputs are boxes, named from `params`:
    a module (its `named_parameters()` and `named_buffers()`) or a dict of name ->
    tensor. A graph of more than `COLLAPSE_OVER` nodes is drawn collapsed, one box per
    kernel listing its user-level ops (`collapse=True` / `False` to choose).

    >>> import fusegrad as fg
    >>> x = fg.randn(4, 3).realize()
    >>> "cluster_0" in fg.graph_dot(x.softmax(1))
    True

    Render it with Graphviz: `dot -Tsvg graph.dot -o graph.svg`.
    """
    has_value = engine.has_value_predicate()
    # drawn as scheduled: macros (one node for a linear, a loss) as their expansions for
    # the tensors' device (its layout's copies: a CPU matmul's packed operand)
    device = (tensors[0].node.device if tensors else None) or engine.default_device
    nodes = expand_for([t.node for t in tensors], has_value, device)
    roots = [n for n in nodes if not has_value(n)]
    options = get_backend(device).schedule_options
    off = config.disable_rules
    items = schedule(roots, has_value, expanded=True, disabled=off, **options) if roots else []
    kernel_name = kernel_names(items, device)
    every = toposort(nodes, stop=has_value)
    if collapse is None:
        collapse = len(every) > COLLAPSE_OVER
    param_names = _param_names(params)
    lines = ["digraph fusegrad {", "  rankdir=BT;", '  node [fontname="monospace", fontsize=10];']
    names: dict[int, str] = {}

    def name(n) -> str:
        if id(n) not in names:
            names[id(n)] = f"n{len(names)}"
        return names[id(n)]

    def shape_of(n) -> str:
        return f"{'x'.join(map(str, n.shape)) or 'scalar'} {n.dtype.name}"

    def leaf_label(n) -> str:
        return f"{param_names.get(id(n)) or 'input'}\\n{shape_of(n)}"

    def draw_leaf(n) -> None:
        if id(n) not in names:
            lines.append(f'  {name(n)} [label="{_quote(leaf_label(n))}", shape=box];')

    if collapse:
        made_by = {id(out): k for k, item in enumerate(items) for out in item.outputs}
        for k, item in enumerate(items):
            ops = [f"{s.label} @ {s}" if s else "(no user line)" for s, _ in item.op_groups()]
            text = "\\n".join([kernel_name[k], *ops[:8]] + (["..."] if len(ops) > 8 else []))
            text += f"\\n-> {shape_of(item.root)}"
            lines.append(f'  k{k} [label="{_quote(text)}", shape=box, style=rounded, color=blue];')
            for n in item.inputs:
                if id(n) in made_by:
                    lines.append(f"  k{made_by[id(n)]} -> k{k};")
                else:
                    draw_leaf(n)
                    lines.append(f"  {name(n)} -> k{k};")
        lines.append("}")
        return "\n".join(lines)

    def label(n, site) -> str:
        extra = f" {n.arg}" if n.op is Ops.CONST else ""
        text = f"{n.op.name}{extra}\\n{shape_of(n)}"
        return text + (f"\\n{site.label} @ {site}" if site is not None else "")

    placed: set[int] = set()
    for k, item in enumerate(items):
        where = item.node_sites()
        lines.append(f"  subgraph cluster_{k} {{")
        title = _quote(f"{kernel_name[k]}\\n{item.reason}")
        lines.append(f'    label="{title}"; style=rounded; color=blue;')
        for n in item.nodes:
            if id(n) not in placed:
                placed.add(id(n))
                lines.append(f'    {name(n)} [label="{_quote(label(n, where.get(id(n))))}"];')
        lines.append("  }")
    for n in every:
        if id(n) not in placed:
            if has_value(n):
                draw_leaf(n)
            else:
                lines.append(f'  {name(n)} [label="{_quote(label(n, site_of(n)))}"];')
        if not has_value(n):
            for s in n.srcs:
                lines.append(f"  {name(s)} -> {name(n)};")
    lines.append("}")
    return "\n".join(lines)


COLLAPSE_OVER = 48  # graph_dot draws larger graphs one box per kernel


def _quote(text: str) -> str:
    return text.replace('"', "'")


def _param_names(params) -> dict[int, str]:
    """id(node) -> name of each named tensor (a module's parameters and buffers, or a dict)."""
    if params is None:
        return {}
    if hasattr(params, "named_parameters"):
        named = list(params.named_parameters())
        named += list(getattr(params, "named_buffers", lambda: [])())
    else:
        named = list(dict(params).items())
    return {id(t.node): n for n, t in named if isinstance(t, Tensor)}
