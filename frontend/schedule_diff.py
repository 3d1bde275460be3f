"""`python -m fusegrad.schedule_diff A B`: two runs' schedules side by side, from the
folders `FUSEGRAD_DUMP=A` and `FUSEGRAD_DUMP=B` wrote (`runtime/dump.py`).

Kernels are keyed by their names, which name the code (the same kernel in two runs has
one name). Each row is one of:

- `same`: a kernel both runs have (listed with `--all`; counted otherwise);
- `merged`: a kernel only B has whose user ops cover two or more kernels only A has
  (each of A's user ops is one of B's): B fused what A ran apart;
- `split`: the other way round, one kernel of A covering two or more of B's;
- `added` / `removed`: a kernel only B has / only A has, covering nothing.

Each side shows the kernel's runs per step (`x2`: launched twice by the schedules),
bytes read and written, and its time on the run that dumped it (`this_run`: a new
schedule's first run, each kernel timed; absent from dumps made before times were
recorded).

>>> import fusegrad as fg, tempfile
>>> a, b = tempfile.mkdtemp(), tempfile.mkdtemp()
>>> x = fg.ones(64, 8).realize()
>>> with fg.config.override(dump=a):
...     _ = (x.sum(0) + 1).realize()
>>> with fg.config.override(dump=b):
...     _ = ((x * 2).sum(0) + 1).realize()
>>> d = diff_dumps(a, b)
>>> [row.kind for row in d.rows]
['added', 'removed']
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, field


@dataclass
class DumpedKernel:
    """One kernel of a dump folder's manifest.json (and schedules.json)."""

    name: str
    user_ops: list[str]
    ops: list[str]
    bytes: int
    runs: int  # launches in the dumped schedules (1 where schedules.json is absent)
    ms: float | None  # the time of those launches on the dumping run, None if not recorded


@dataclass
class DiffRow:
    """One line of a schedule diff: A's kernels and B's kernels, and how they relate."""

    kind: str  # "same", "merged", "split", "added" or "removed"
    a: list[DumpedKernel] = field(default_factory=list)
    b: list[DumpedKernel] = field(default_factory=list)


@dataclass
class ScheduleDiff:
    """Two dump folders' kernels, compared (`diff_dumps`)."""

    a: dict[str, DumpedKernel]
    b: dict[str, DumpedKernel]
    rows: list[DiffRow]

    def format(self, show_same: bool = False, a_name: str = "A", b_name: str = "B") -> str:
        """The diff as text: totals, then one row per difference (`show_same`: every row)."""

        def total(ks) -> str:
            nbytes = sum(k.bytes * k.runs for k in ks)
            times = [k.ms for k in ks if k.ms is not None]
            ms = f", {sum(times):.3f} ms" if times else ""
            return f"{sum(k.runs for k in ks)} launches, {_size(nbytes)}{ms}"

        shown = [r for r in self.rows if show_same or r.kind != "same"]
        width = max([len(_name(k)) for r in shown for k in r.a + r.b] + [len("A kernel")])
        counts = {kind: sum(r.kind == kind for r in self.rows) for kind in KINDS}
        lines = [
            f"A: {a_name}: {len(self.a)} kernels ({total(self.a.values())})",
            f"B: {b_name}: {len(self.b)} kernels ({total(self.b.values())})",
            ", ".join(f"{n} {kind}" for kind, n in counts.items()),
            "",
            f"{'':<8} {'A kernel':<{width}} {'bytes':>10} {'ms':>8}   "
            f"{'B kernel':<{width}} {'bytes':>10} {'ms':>8}  user ops",
        ]
        for row in shown:
            for i in range(max(len(row.a), len(row.b))):
                left = _side(row.a[i] if i < len(row.a) else None, width)
                right = _side(row.b[i] if i < len(row.b) else None, width)
                mark = row.kind if i == 0 else ""
                lines.append(f"{mark:<8} {left}   {right}  {_ops(row, i)}".rstrip())
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


KINDS = ("merged", "split", "added", "removed", "same")


def _name(k: DumpedKernel) -> str:
    return k.name if k.runs == 1 else f"{k.name} x{k.runs}"


def _side(k: DumpedKernel | None, width: int) -> str:
    if k is None:
        return f"{'':<{width}} {'':>10} {'':>8}"
    ms = f"{k.ms:.3f}" if k.ms is not None else "-"
    return f"{_name(k):<{width}} {k.bytes:>10} {ms:>8}"


def _ops(row: DiffRow, i: int) -> str:
    """The user ops of the row's one kernel on its first line (a merged row's B kernel, a
    split row's A kernel)."""
    if i > 0:
        return ""
    kernel = (row.b if row.kind in ("merged", "added") else row.a)[0]
    text = ", ".join(kernel.user_ops)
    return text[:90] + ("..." if len(text) > 90 else "")


def _size(n: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def read_dump(folder: str) -> dict[str, DumpedKernel]:
    """The kernels of a `FUSEGRAD_DUMP` folder, by name, in the order they were dumped."""
    path = os.path.join(folder, "manifest.json")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no manifest.json: is {folder!r} a folder FUSEGRAD_DUMP wrote?"
        ) from None
    runs: dict[str, int] = {}
    times: dict[str, float] = {}
    launched = os.path.join(folder, "schedules.json")
    if os.path.exists(launched):  # (dumps made before it was written have none)
        with open(launched) as f:
            for schedule in json.load(f):
                for k in schedule["kernels"]:
                    runs[k["name"]] = runs.get(k["name"], 0) + 1
                    ms = k.get("this_run", {}).get("ms")
                    if ms is not None:
                        times[k["name"]] = times.get(k["name"], 0.0) + ms
    out: dict[str, DumpedKernel] = {}
    for e in manifest:
        ms = times.get(e["name"], e.get("this_run", {}).get("ms"))
        out[e["name"]] = DumpedKernel(
            e["name"], e.get("user_ops", []), e["ops"], e["bytes"], runs.get(e["name"], 1), ms
        )
    return out


def diff_dumps(a: str, b: str) -> ScheduleDiff:
    """Compare the kernels of dump folders `a` and `b` (see the module docstring): merged
    and split rows first, then added, removed and same, each in dump order."""
    ka, kb = read_dump(a), read_dump(b)
    only_a = [k for name, k in ka.items() if name not in kb]
    only_b = [k for name, k in kb.items() if name not in ka]
    rows: list[DiffRow] = []
    taken: set[str] = set()
    for kind, wide, narrow, flip in (
        ("merged", only_b, only_a, False),
        ("split", only_a, only_b, True),
    ):
        for big in wide:
            if big.name in taken:
                continue
            covered = [k for k in narrow if k.name not in taken and k.user_ops and _covers(big, k)]
            if len(covered) >= 2:
                taken |= {big.name} | {k.name for k in covered}
                rows.append(
                    DiffRow(kind, [big], covered) if flip else DiffRow(kind, covered, [big])
                )
    rows += [DiffRow("added", [], [k]) for k in only_b if k.name not in taken]
    rows += [DiffRow("removed", [k], []) for k in only_a if k.name not in taken]
    rows += [DiffRow("same", [ka[name]], [kb[name]]) for name in ka if name in kb]
    return ScheduleDiff(ka, kb, rows)


def _covers(big: DumpedKernel, small: DumpedKernel) -> bool:
    """Whether every user op of `small` is one of `big`'s, with no fewer primitives."""
    return set(small.user_ops) <= set(big.user_ops) and len(small.ops) <= len(big.ops)


USAGE = "usage: python -m fusegrad.schedule_diff [--all] DUMP_A DUMP_B"


def main(argv: list[str] | None = None) -> int:
    """Print the diff of two dump folders; the exit status is 0, or 2 for a bad command line."""
    argv = sys.argv[1:] if argv is None else argv
    show_same = "--all" in argv
    folders = [a for a in argv if a != "--all"]
    if len(folders) != 2 or any(a.startswith("-") for a in folders):
        print(USAGE + "\n\n" + __doc__.split("\n\n", 1)[1].split(">>>")[0].strip(), file=sys.stderr)
        return 2
    try:
        diff = diff_dumps(*folders)
    except (FileNotFoundError, json.JSONDecodeError, KeyError) as e:
        print(f"python -m fusegrad.schedule_diff: {e}", file=sys.stderr)
        return 2
    print(diff.format(show_same, *folders))
    return 0


if __name__ == "__main__":
    sys.exit(main())
