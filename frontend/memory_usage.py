"""`fusegrad.memory_report`: how much memory a realize or a training step holds at once,
what is alive then and which of your lines made it, and what each kernel moves.

>>> import fusegrad as fg
>>> x = fg.randn(1024).realize()
>>> report = fg.memory_report((x * 2).exp().sum())
>>> report.peak_bytes >= sum(b.bytes for b in report.live_at_peak)
True

The peak is the plan's own buffers as its cached runs hold them (the plan's inputs, the
tensors it reads, exist already and are counted apart, in `input_bytes`): a CPU plan of
several kernels runs as one native program whose intermediates lie in one scratch arena
held for the whole run (a value's place taken by later ones once it is dead), so its
peak is the arena's size (each value rounded up to a 64-byte line) plus the outputs it
returns, and the buffers alive at the peak are those of the kernel at which the arena's
values add up to the most; a plan run kernel by kernel (one kernel,
FUSEGRAD_PROGRAM=0, inside `fg.profile()`) frees each intermediate after its last
reader, and its peak is the most alive during one kernel (`stepwise_peak_bytes`, given
for every plan: what the same plan would need with its values' space reused).
Bytes are the values' own; the buffer pool may round an allocation up.

For a step function, `fg.memory_report(step, *args)` calls `step(*args)` (a `fg.jit`
function or a plain one) and reports every realize of that call; `report.result` is
what the step returned.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from .runtime.engine import engine
from .runtime.memory_plan import KernelTraffic, PlanMemory, PlannedBuffer, plan_memory
from .tensor import Tensor, realize


@dataclass
class MemoryReport:
    """The memory of one realize or one step's realizes (see the module docstring).

    `plans` has one `PlanMemory` per realize (a step that calls `.item()` midway has two);
    the report's figures are those of the plan with the highest peak.
    """

    plans: list[PlanMemory]
    result: object = None  # what the step returned (`memory_report(step, *args)`)
    _peak: PlanMemory | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._peak = max(self.plans, key=lambda p: p.peak_bytes)

    @property
    def peak_bytes(self) -> int:
        """The most bytes the plans' own buffers hold at once."""
        return self._peak.peak_bytes

    @property
    def live_at_peak(self) -> list[PlannedBuffer]:
        """The buffers alive at the peak, the largest first: each with `bytes`, `shape`,
        `dtype`, the `kernel` that wrote it and that kernel's `user_ops` and `lines`."""
        return sorted(self._peak.live_at_peak, key=lambda b: -b.bytes)

    @property
    def mode(self) -> str:
        """How the peak's plan holds its values: "arena" or "kernel by kernel"."""
        return self._peak.mode

    @property
    def kernels(self) -> list[KernelTraffic]:
        """Every kernel of every plan, in launch order: `bytes_moved` next to `min_bytes`
        (its inputs read once and its outputs written once) and their `ratio`."""
        return [k for p in self.plans for k in p.kernels]

    def by_line(self) -> dict[str, int]:
        """Bytes alive at the peak per user line that made them ("train.py:9"), the most
        first; a buffer whose kernel fused several lines counts under each."""
        out: dict[str, int] = {}
        for b in self.live_at_peak:
            for line in b.lines or ["(no user line)"]:
                out[line] = out.get(line, 0) + b.bytes
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))

    def __str__(self) -> str:
        p = self._peak
        where = (
            f"arena of {_size(p.arena_bytes)} held for the whole run"
            if p.mode == "arena"
            else f"during kernel {p.peak_step}"
        )
        lines = [
            f"peak {_size(p.peak_bytes)} ({p.mode}: {where}); kernel by kernel "
            f"{_size(p.stepwise_peak_bytes)}; inputs {_size(p.input_bytes)}; "
            f"{len(self.plans)} plan(s)",
            "",
            f"{'alive at the peak':<40} {'bytes':>10} {'shape':>16} {'dtype':>9}  made by",
        ]
        live = self.live_at_peak
        for b in live[:ROWS]:
            shape = "x".join(map(str, b.shape)) or "scalar"
            dtype = getattr(b.dtype, "name", "-")
            ops = ", ".join(b.user_ops[:3]) + (" ..." if len(b.user_ops) > 3 else "")
            mark = " (returned)" if b.returned else ""
            lines.append(
                f"{b.kernel[:40]:<40} {b.bytes:>10} {shape:>16} {dtype:>9}  {ops or '-'}{mark}"
            )
        if len(live) > ROWS:
            rest = sum(b.bytes for b in live[ROWS:])
            lines.append(f"... and {len(live) - ROWS} more buffer(s): {rest} bytes")
        lines += ["", f"{'kernel':<40} {'bytes moved':>12} {'minimum':>12} {'ratio':>6}"]
        for k in self.kernels:
            lines.append(f"{k.name[:40]:<40} {k.bytes_moved:>12} {k.min_bytes:>12} {k.ratio:>6.2f}")
        return "\n".join(lines)


ROWS = 20  # buffers `str(report)` lists (all are in `live_at_peak`)


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def memory_report(*args) -> MemoryReport:
    """The memory of computing `tensors` (`fg.memory_report(loss)`: realizes them), or of
    one call of a step function (`fg.memory_report(step, x, y)`: calls `step(x, y)`).

    >>> import fusegrad as fg
    >>> a = fg.randn(64, 64).realize()
    >>> r = fg.memory_report(((a @ a).relu() @ a).sum())
    >>> r.peak_bytes >= 4 and all(k.min_bytes > 0 for k in r.kernels)
    True

    `str(report)` is a readable table; see `MemoryReport` for the fields.
    """
    if args and callable(args[0]) and not isinstance(args[0], Tensor):
        step, rest = args[0], args[1:]
        plans, result = _plans_while(lambda: step(*rest))
        what = f"{getattr(step, '__qualname__', 'the step')}(...) ran no kernel"
    else:
        bad = [a for a in args if not isinstance(a, Tensor)]
        if bad or not args:
            raise TypeError(
                "fusegrad.memory_report(*tensors) or memory_report(step, *args): expected "
                f"tensors, got {', '.join(type(a).__name__ for a in bad) or 'nothing'}"
            )
        plans, result = _plans_while(lambda: realize(*args))
        result = None
        what = (
            "these tensors are computed already: call fusegrad.memory_report before "
            ".item(), .numpy(), .realize() or printing them"
        )
    if not plans:
        raise ValueError(f"fusegrad.memory_report: {what}, so there is no plan to report")
    return MemoryReport([plan_memory(p) for p in plans], result)


def _plans_while(call) -> tuple[list, object]:
    """The plans this thread runs during `call()`, in order, and what it returned."""
    me, plans = threading.get_ident(), []

    def observe(plan, records) -> None:
        if threading.get_ident() == me:
            plans.append(plan)

    engine.observers.append(observe)
    try:
        result = call()
    finally:
        engine.observers.remove(observe)
    return plans, result
