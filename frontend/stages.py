"""Pass by pass: the IR of some tensors, or of a step function, after each compiler stage.

`fg.debug.stages(*tensors)` compiles what computing `tensors` takes (it runs nothing);
`fg.debug.stages(step, *args)` calls `step(*args)` once (a `fg.jit` function's Python, not
a replay) and shows every schedule it computes. Either returns a `Stages`, an ordered
list of (stage name, text):

- `graph`: your graph, library ops (`linear`, `cross_entropy`) as one macro node each; the
  gradients `backward()` builds appear as placeholders;
- `autodiff`: the same graph with the gradients in it (autodiff runs when `backward()`'s
  gradients are first read, on the graph with macros, so it comes before expansion);
- `expanded`: every macro replaced by its expansion (`ir/macro.py`), what the scheduler cuts;
- `rules_none`, then `rule_<name>` per scheduling rule (`pipeline/schedule.py`): the graph
  scheduled with every optional rule off, then with the rules turned on one by one in the
  order the scheduler applies them, each stage saying which values it stopped or started
  storing and which kernels it merged. A rule's effect is shown given the rules before it:
  the later rules (extra outputs, siblings, stored in reductions, stored by readers) work
  on the kernels the earlier ones made, so in another order they would do other things;
- `schedule`: the kernels in launch order, named as they run;
- per kernel (`kNN.`): its loop IR after each lowering step (`pipeline/lower.py`: the loop
  nest with its loops merged, its register tile, peeled edges, unrolling, where taken), the
  loop IR compiled, LLVM IR before and after LLVM's passes and the assembly (a cuda
  kernel: its CUDA C and PTX).

Graph listings number nodes `%0, %1, ...` in the order the stages first show them, so one
node has one number in every stage of a schedule, and two runs write identical text:

    %12 = MUL(%3, %11) 64x6 float32  # relu @ train.py:9 (forward)

`Stages.write(folder)` writes one `NNN_stage.txt` per stage and a `stages.json` index;
`python -m fusegrad.debug_view folder` (`frontend/debug_view.py`) makes one HTML page of
them, to open in a browser.

>>> import fusegrad as fg
>>> x = fg.randn(8, 4).realize()
>>> st = fg.debug.stages(x.softmax(1))
>>> st.names()[:4]
['graph', 'autodiff', 'expanded', 'rules_none']
>>> st.names()[-1].startswith("k00.")
True
"""

from __future__ import annotations

import json
import linecache
import os
import re
from dataclasses import asdict, dataclass, field

from .ir.node import Node, toposort
from .ir.ops import Ops
from .ir.sites import site_of
from .jit import jit
from .pipeline.schedule import RULES, ScheduleItem, schedule
from .runtime.backend import get_backend
from .runtime.config import config
from .runtime.engine import engine, expand_for, lowering_steps
from .tensor import Tensor

# The optional rules in the order `schedule` applies them: 2, 4 and 6 node by node in one
# walk, then the passes over the kernels that walk made (tests/frontend/test_stages.py holds
# this to `RULES`).
APPLIED_ORDER = (
    "reduction_epilogues",
    "store_for_reuse",
    "row_fusion",
    "extra_outputs",
    "sibling_reductions",
    "stored_in_reductions",
    "stored_by_readers",
)
FORMAT = 1  # the layout of stages.json (frontend/debug_view.py reads it)


@dataclass
class Stage:
    """One stage: `name` (file-safe, `graph`, `k03.llvm`), a `title` saying what it is, its
    `text`, its `kind` ("graph", "schedule" or "code"), and for code, the index of its
    kernel in `Stages.kernels` and its `language` ("loop", "llvm", "asm", "cuda")."""

    name: str
    title: str
    text: str
    kind: str
    kernel: int | None = None
    language: str = ""
    realize: int = 0  # which schedule of a step function's (0: the first)


@dataclass
class KernelInfo:
    """A kernel of the final schedule: its name, why it is a kernel, its user-level ops and
    the user's source lines they were written on (`sources`: [file:line, label, text])."""

    name: str
    reason: str
    root: str  # the node it stores, as the graph listings number it: "%45"
    user_ops: list[str] = field(default_factory=list)
    sources: list[list[str]] = field(default_factory=list)
    realize: int = 0


class Stages:
    """What `fusegrad.debug.stages` returns: `stages` (a list of `Stage`) and `kernels`
    (`KernelInfo`, in launch order). Iterating gives (name, text) pairs in order;
    `st["expanded"]` is one stage's text."""

    def __init__(self):
        self.stages: list[Stage] = []
        self.kernels: list[KernelInfo] = []

    def __iter__(self):
        return iter([(s.name, s.text) for s in self.stages])

    def __len__(self) -> int:
        return len(self.stages)

    def __getitem__(self, name: str) -> str:
        for s in self.stages:
            if s.name == name:
                return s.text
        raise KeyError(f"no stage {name!r}; the stages are {', '.join(self.names())}")

    def names(self) -> list[str]:
        """The stages' names, in order."""
        return [s.name for s in self.stages]

    def index(self) -> dict:
        """What `write` puts in stages.json: each stage's file and fields but its text, and
        the kernels."""
        return {
            "format": FORMAT,
            "stages": [
                {
                    "file": file_name(k, s.name),
                    **{f: v for f, v in asdict(s).items() if f != "text"},
                }
                for k, s in enumerate(self.stages)
            ],
            "kernels": [asdict(k) for k in self.kernels],
        }

    def write(self, folder: str) -> list[str]:
        """Write each stage as `NNN_name.txt` and the index as `stages.json` into `folder`
        (made if missing; stale stage files of an earlier write are removed); returns the
        paths written."""
        os.makedirs(folder, exist_ok=True)
        for old in os.listdir(folder):
            if _STAGE_FILE.match(old):
                os.remove(os.path.join(folder, old))
        paths = []
        for k, s in enumerate(self.stages):
            path = os.path.join(folder, file_name(k, s.name))
            with open(path, "w") as f:
                f.write(s.text if s.text.endswith("\n") else s.text + "\n")
            paths.append(path)
        path = os.path.join(folder, "stages.json")
        with open(path, "w") as f:
            json.dump(self.index(), f, indent=1)
        return [*paths, path]

    def html(self) -> str:
        """The stages as one self-contained HTML page (`frontend/debug_view.py`)."""
        # (not imported with fusegrad: `python -m fusegrad.debug_view` runs it as __main__)
        from .debug_view import render_html

        return render_html(
            self.index(), {file_name(k, s.name): s.text for k, s in enumerate(self.stages)}
        )


_STAGE_FILE = re.compile(r"^\d{3}_.*\.txt$")


def file_name(k: int, name: str) -> str:
    """The file of the k-th stage: `007_rule_row_fusion.txt`."""
    return f"{k:03d}_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}.txt"


def stages(*args, dump_dir: str | None = None) -> Stages:
    """The IR after each compiler stage, for `tensors` or for one call of a step function.

    `stages(t1, t2)`: compiles what computing the tensors takes, as realizing them would
    (from the cache if it was compiled before), and runs nothing. `stages(step, *args)`:
    calls `step(*args)` once, as an ordinary call (a `fg.jit` function runs its Python),
    and shows each schedule the call computes; an optimizer's cached step is built again
    while it runs, so its graph is seen. With `dump_dir`, the stages are also written there
    (`Stages.write`). See the module's docstring for the stages.

    >>> import fusegrad as fg
    >>> x = fg.randn(4, 3).realize()
    >>> "EXP" in fg.debug.stages((x * 2).exp())["expanded"]
    True
    """
    if not args:
        raise TypeError("fusegrad.debug.stages() takes tensors, or a function and its arguments")
    if callable(args[0]) and not isinstance(args[0], Tensor):
        fn = args[0].fn if isinstance(args[0], jit) else args[0]
        captured = _watch(fn, args[1:])
    else:
        captured = [_plan_of(args)]
    out = Stages()
    for r, (todo, leaves, plan) in enumerate(captured):
        _add_schedule(out, r, f"r{r}." if len(captured) > 1 else "", todo, leaves, plan)
    if dump_dir is not None:
        out.write(dump_dir)
    return out


def _plan_of(tensors) -> tuple[list[Node], list[Node], object]:
    """(todo, leaves, plan) of computing `tensors` again (values in memory already count as
    to compute: their graph is what is shown), compiled but not run."""
    bad = [type(t).__name__ for t in tensors if not isinstance(t, Tensor)]
    if bad:
        raise TypeError(
            f"fusegrad.debug.stages() takes tensors, or a function first, got {', '.join(bad)}"
        )
    nodes = [t.node for t in tensors]
    todo = list({id(n): n for n in nodes if n.op is not Ops.BUFFER and 0 not in n.shape}.values())
    if not todo:
        raise ValueError(
            "fusegrad.debug.stages(): nothing to compile: every tensor given is data in "
            "memory (a leaf such as a parameter or an input) or empty"
        )
    devices = sorted({n.device or engine.default_device for n in todo})
    if len(devices) > 1:
        raise ValueError(
            f"fusegrad.debug.stages(): the tensors are on {' and '.join(devices)}; a schedule "
            "is one device's: ask for each device's tensors apart"
        )
    computed, asked = engine.has_value_predicate(), {id(n) for n in todo}

    def has_value(n: Node) -> bool:
        return id(n) not in asked and computed(n)

    plan, leaves, _ = engine.plan_for(todo, has_value)
    return todo, leaves, plan


def _watch(fn, args) -> list[tuple[list[Node], list[Node], object]]:
    """Call fn(*args), keeping (todo, leaves, plan) of each schedule it computes."""
    if engine.plan_observer is not None:
        raise RuntimeError("fusegrad.debug.stages(): another stages() call is watching")
    captured: list = []
    engine.plan_observer = lambda todo, leaves, plan: captured.append(
        (list(todo), list(leaves), plan)
    )
    try:
        fn(*args)
    finally:
        engine.plan_observer = None
    if not captured:
        name = getattr(fn, "__qualname__", repr(fn))
        raise ValueError(
            f"fusegrad.debug.stages(): {name} computed nothing (no tensor was realized in the "
            "call): pass the tensors it returns instead, fg.debug.stages(*out)"
        )
    return captured


class _Numbers:
    """Each node's `%k`, in the order the stages first show it."""

    def __init__(self):
        self.ids: dict[int, int] = {}
        self.keep: list[Node] = []  # (alive while numbered: ids stay unique)

    def alias(self, new: Node, old: Node) -> None:
        """Give `new` (a node rebuilt for `old`, or a macro's expansion) `old`'s number."""
        if id(new) not in self.ids and id(old) in self.ids:
            self.ids[id(new)] = self.ids[id(old)]
            self.keep.append(new)

    def __call__(self, n: Node) -> str:
        k = self.ids.get(id(n))
        if k is None:
            k = self.ids[id(n)] = len(self.ids)
            self.keep.append(n)
        return f"%{k}"


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+|0x[0-9a-fA-F]{8,}")


def _arg_text(n: Node) -> str:
    """The node's arg as stable text (no object addresses), at most 120 characters."""
    if n.op is Ops.BUFFER or n.arg is None:
        return ""
    arg = n.arg
    text = f"{arg[0]} {arg[1]!r}" if n.op is Ops.MACRO else repr(arg)
    text = _ADDRESS.sub("", text)
    return text if len(text) <= 120 else text[:117] + "..."


def _shape(n: Node) -> str:
    return f"{'x'.join(map(str, n.shape)) or 'scalar'} {n.dtype.name}"


def _site_text(n: Node) -> str:
    s = site_of(n)
    return f"  # {s.label} @ {s} ({s.role})" if s is not None else ""


def _role(n: Node) -> str | None:
    s = site_of(n)
    return getattr(s, "role", None) if s is not None else None


def _listing(title: str, order: list[Node], num, has_value, placeholder=frozenset()) -> str:
    """A graph stage's text: a header, then one line per node, sources first."""
    lines = [f"# {title}", f"# {len(order)} nodes", ""]
    for n in order:
        if has_value(n):
            what = "input" if n.op is Ops.BUFFER else f"input (an earlier {n.op.name}'s value)"
            lines.append(f"{num(n)} = {what} {_shape(n)}")
        elif id(n) in placeholder:
            lines.append(f"{num(n)} = gradient {_shape(n)}{_site_text(n)}, built by autodiff")
        else:
            arg = _arg_text(n)
            srcs = ", ".join(num(s) for s in n.srcs)
            op = f"{n.op.name}{' ' + arg if arg else ''}({srcs})"
            lines.append(f"{num(n)} = {op} {_shape(n)}{_site_text(n)}")
    return "\n".join(lines) + "\n"


def _kernel_block(item: ScheduleItem, num, head: str) -> list[str]:
    outs = ", ".join(f"{num(o)} {_shape(o)}" for o in item.outputs)
    loaded = {id(n) for n in item.inputs}
    ops = [n for n in item.nodes if n.op not in (Ops.BUFFER, Ops.CONST) and id(n) not in loaded]
    lines = [f"kernel {num(item.root)}{head}: stores {outs}", f"  why: {item.reason}"]
    if item.reduce is not None:
        lines.append(f"  sums: {num(item.reduce)} {item.reduce.op.name} over {item.reduce.arg}")
    lines.append(f"  reads: {' '.join(num(n) for n in item.inputs) or 'nothing'}")
    lines.append(f"  computes ({len(ops)}): {' '.join(num(n) for n in ops)}")
    return lines


def _changes(before: list[ScheduleItem], after: list[ScheduleItem], num) -> list[str]:
    """What a rule changed between two schedules: values it stopped or started storing, and
    values now stored by another kernel (kernels merged)."""
    root_before = {id(o): it.root for it in before for o in it.outputs}
    item_after = {id(o): it for it in after for o in it.outputs}
    out = []
    for it in before:
        for o in it.outputs:
            if id(o) not in item_after:
                inside = [num(x.root) for x in after if any(m is o for m in x.nodes)]
                where = f"computed inside kernel {', '.join(inside)}" if inside else "gone"
                out.append(f"#   {num(o)} no longer stored: {where}")
            elif item_after[id(o)].root is not root_before[id(o)]:
                was, now = num(root_before[id(o)]), num(item_after[id(o)].root)
                out.append(f"#   {num(o)} now stored by kernel {now} (merged; was kernel {was})")
    for it in after:
        for o in it.outputs:
            if id(o) not in root_before:
                out.append(f"#   {num(o)} now stored (kernel {num(it.root)}): {it.reason}")
    return out or ["#   no change"]


def _schedule_text(title: str, notes: list[str], items, num, names=None) -> str:
    lines = [f"# {title}", f"# {len(items)} kernels", *notes, ""]
    for k, item in enumerate(items):
        head = f" [{k}] {names[k]}" if names is not None and k < len(names) else ""
        lines += _kernel_block(item, num, head)
    return "\n".join(lines) + "\n"


def _add_schedule(out: Stages, r: int, prefix: str, todo, leaves, plan) -> None:
    """The stages of one schedule (`prefix` tells a step function's schedules apart)."""
    leaf_ids = {id(n) for n in leaves}

    def has_value(n: Node) -> bool:  # (as compile_plan sees the graph: leaves only)
        return n.op is Ops.BUFFER or id(n) in leaf_ids

    def add(name: str, title: str, text: str, kind: str, **more) -> None:
        out.stages.append(Stage(prefix + name, title, text, kind, realize=r, **more))

    num = _Numbers()
    every = toposort(todo, stop=has_value)
    grads = {id(n) for n in every if not has_value(n) and _role(n) == "backward"}
    user = toposort(todo, stop=lambda n: has_value(n) or id(n) in grads)
    held = {id(n) for n in user if id(n) in grads}
    title = "your graph: macros as one node each, gradients as placeholders"
    add("graph", title, _listing(title, user, num, has_value, held), "graph")
    title = (
        "after autodiff: the gradients backward() built (none here)"
        if not grads
        else (
            f"after autodiff: {len(grads)} gradient nodes, built when backward()'s gradients "
            "were first read (on the graph with macros)"
        )
    )
    add("autodiff", title, _listing(title, every, num, has_value), "graph")
    replaced: dict[int, Node] = {}
    expanded = expand_for(todo, has_value, plan.device, replaced)
    for (
        n
    ) in every:  # a rebuilt node, or a macro's expansion, keeps the number of what it stands for
        if id(n) in replaced:
            num.alias(replaced[id(n)], n)
    title = "after macro expansion: the primitives the scheduler cuts"
    add(
        "expanded",
        title,
        _listing(title, toposort(expanded, stop=has_value), num, has_value),
        "graph",
    )

    device = plan.device
    options = get_backend(device).schedule_options
    off = config.disable_rules
    items: list[ScheduleItem] = []
    for k in range(len(APPLIED_ORDER) + 1):
        disabled = (frozenset(RULES) - set(APPLIED_ORDER[:k])) | off
        new = schedule(expanded, has_value, expanded=True, disabled=disabled, **options)
        if k == 0:
            title = "scheduled with every optional rule off (rules 1, 3, 5: what a kernel is)"
            add("rules_none", title, _schedule_text(title, [], new, num), "schedule")
        else:
            rule = APPLIED_ORDER[k - 1]
            title = f"+ {rule}: {RULES[rule]}"
            if rule in off:
                notes = ["#   (turned off: FUSEGRAD_DISABLE_RULES or fg.debug.disable_rule)"]
            else:
                notes = [
                    f"# changes ({len(items)} -> {len(new)} kernels):",
                    *_changes(items, new, num),
                ]
            add(f"rule_{rule}", title, _schedule_text(title, notes, new, num), "schedule")
        items = new
    records = [s.record for s in plan.steps]
    names = [rec.name for rec in records]
    notes = []
    if len(records) != len(items):  # (a plan compiled under other settings)
        notes = [f"# the plan that ran has {len(records)} kernels: the code below is its"]
    title = f"the schedule on {device}: kernels in launch order, named as they run"
    add("schedule", title, _schedule_text(title, notes, items, num, names), "schedule")

    for item, rec in zip(items, records):
        kernel = len(out.kernels)
        out.kernels.append(
            KernelInfo(rec.name, rec.reason, num(item.root), list(rec.user_ops), _sources(item), r)
        )
        stem = f"k{kernel:02d}."
        steps = lowering_steps(item, device)
        for j, (what, text) in enumerate(steps):
            add(
                f"{stem}loop{j}",
                f"{rec.name}: {what}",
                text,
                "code",
                kernel=kernel,
                language="loop",
            )
        if not steps or _body(steps[-1][1]) != _body(rec.loop_ir):  # (the name has a hash)
            title = f"{rec.name}: loop IR as compiled"
            add(f"{stem}loop", title, rec.loop_ir, "code", kernel=kernel, language="loop")
        if rec.compiled.language == "LLVM IR":
            code = [
                ("ll_raw", "LLVM IR before LLVM's passes", rec.llvm_ir, "llvm"),
                ("ll", "LLVM IR after LLVM's passes", rec.llvm_ir_optimized, "llvm"),
                ("s", "assembly", rec.asm, "asm"),
            ]
        else:
            code = [
                ("cu", "CUDA C", rec.cuda_c, "cuda"),
                ("s", "PTX (and SASS where found)", rec.asm, "asm"),
            ]
        for suffix, what, text, language in code:
            add(
                stem + suffix, f"{rec.name}: {what}", text, "code", kernel=kernel, language=language
            )


def _body(loop_ir: str) -> str:
    return loop_ir.split("(", 1)[-1]


def _sources(item: ScheduleItem) -> list[list[str]]:
    """[file:line, user-level op, the line's text] of each user line inside the kernel."""
    out, seen = [], set()
    for s in item.sites:
        key = (str(s), s.label)
        if key in seen:
            continue
        seen.add(key)
        text = linecache.getline(s.path, s.line).rstrip() if s.path else ""
        out.append([str(s), f"{s.label} ({s.role})", text])
    return out
