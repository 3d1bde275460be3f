"""Render a loop-IR kernel as LLVM IR text.

The function takes the parallel loop's range and one pointer per buffer:

    define void @SYMBOL(i64 %start, i64 %end, ptr noalias %out0, ptr noalias readonly %in0, ...)

so a thread pool can give each thread a slice of the outermost loop. Loop
counters and accumulators live in allocas that LLVM's O3 pipeline promotes to
registers; floating-point reductions carry `reassoc nsz` so the loop
vectorizer may reorder them, elementwise math stays exact IEEE.
"""

from __future__ import annotations

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var
from .llvm_math import INTRINSICS, fconst, math_functions
from .loopir import AccInit, AccUpdate, Alu, Const, Kernel, Load, Loop, Rand, Select, Store


def mem_type(dt: DType) -> str:
    """How a dtype is stored in memory (bools are bytes)."""
    return "i8" if dt.is_bool else dt.llvm


def literal(value, dt: DType) -> str:
    if dt.is_float:
        return fconst(float(value), dt.llvm)
    if dt.is_bool:
        return "true" if value else "false"
    return str(int(value))


class _Renderer:
    def __init__(self, kernel: Kernel, symbol: str):
        self.k, self.symbol = kernel, symbol
        self.lines: list[str] = []
        self.allocas: list[str] = []
        self.math: set[tuple[str, str]] = set()
        self.n = 0
        self.types: dict[str, DType] = {}

    def tmp(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def emit(self, text: str) -> str:
        name = self.tmp()
        self.lines.append(f"  {name} = {text}")
        return name

    def label(self, name: str) -> None:
        self.lines.append(f"{name}:")

    # ---------------------------------------------------------------- indices
    def index(self, e: Lin) -> str:
        acc = str(e.const)
        for atom, coef in e.terms:
            a = self.atom(atom)
            term = a if coef == 1 else self.emit(f"mul nsw i64 {a}, {coef}")
            acc = term if acc == "0" else self.emit(f"add nsw i64 {acc}, {term}")
        return acc

    def atom(self, a) -> str:
        if isinstance(a, Var):
            return f"%{a.name}"
        if isinstance(a, FloorDiv):
            return self.emit(f"sdiv i64 {self.index(a.x)}, {a.c}")
        if isinstance(a, Mod):
            return self.emit(f"srem i64 {self.index(a.x)}, {a.c}")
        raise TypeError(a)

    def valid(self, conds) -> str:
        ok = "true"
        for c in conds:
            v = self.emit(f"icmp sge i64 {self.index(c)}, 0")
            ok = v if ok == "true" else self.emit(f"and i1 {ok}, {v}")
        return ok

    # ---------------------------------------------------------------- statements
    def block(self, body) -> None:
        for s in body:
            getattr(self, "stmt_" + type(s).__name__)(s)

    def stmt_Loop(self, s: Loop) -> None:
        v = s.var.name
        self.allocas.append(f"  %{v}.addr = alloca i64")
        start = "%start" if s.kind == "parallel" else "0"
        end = "%end" if s.kind == "parallel" else str(s.extent)
        self.lines.append(f"  store i64 {start}, ptr %{v}.addr")
        self.lines.append(f"  br label %{v}.cond")
        self.label(f"{v}.cond")
        self.lines.append(f"  %{v} = load i64, ptr %{v}.addr")
        c = self.emit(f"icmp slt i64 %{v}, {end}")
        self.lines.append(f"  br i1 {c}, label %{v}.body, label %{v}.exit")
        self.label(f"{v}.body")
        self.block(s.body)
        nxt = self.emit(f"add nsw i64 %{v}, 1")
        self.lines.append(f"  store i64 {nxt}, ptr %{v}.addr")
        self.lines.append(f"  br label %{v}.cond")
        self.label(f"{v}.exit")

    def stmt_Load(self, s: Load) -> None:
        p, mt = s.param, mem_type(s.dtype)
        idx = self.index(s.index)
        ok = self.valid(s.valid) if s.valid else None
        if ok:
            idx = self.emit(f"select i1 {ok}, i64 {idx}, i64 0")
        ptr = self.emit(f"getelementptr inbounds {mt}, ptr %{p.name}, i64 {idx}")
        v = self.emit(f"load {mt}, ptr {ptr}")
        if s.dtype.is_bool:
            v = self.emit(f"icmp ne i8 {v}, 0")
        if ok:
            v = self.emit(
                f"select i1 {ok}, {s.dtype.llvm} {v}, {s.dtype.llvm} {literal(0, s.dtype)}"
            )
        self.bind(s.dst, v, s.dtype)

    def stmt_Const(self, s: Const) -> None:
        self.bind(s.dst, literal(s.value, s.dtype), s.dtype)

    def stmt_Select(self, s: Select) -> None:
        ok = self.valid(s.valid)
        t = s.dtype.llvm
        v = self.emit(f"select i1 {ok}, {t} {self.ref(s.value)}, {t} {literal(0, s.dtype)}")
        self.bind(s.dst, v, s.dtype)

    def stmt_Rand(self, s: Rand) -> None:
        from ..ir import rand

        idx = self.emit(f"trunc i64 {self.index(s.index)} to i32")
        x = self.emit(f"xor i32 {idx}, {_i32(rand.seed_key(s.seed))}")
        for shift, mul in ((16, rand.MIX1), (13, rand.MIX2), (16, None)):
            sh = self.emit(f"lshr i32 {x}, {shift}")
            x = self.emit(f"xor i32 {x}, {sh}")
            if mul is not None:
                x = self.emit(f"mul i32 {x}, {_i32(mul)}")
        top = self.emit(f"lshr i32 {x}, 8")
        t = s.dtype.llvm
        f = self.emit(f"uitofp i32 {top} to {t}")
        v = self.emit(f"fmul {t} {f}, {fconst(1.0 / (1 << 24), t)}")
        self.bind(s.dst, v, s.dtype)

    def stmt_Alu(self, s: Alu) -> None:
        args = [self.ref(a) for a in s.args]
        src_dt = self.types[s.args[0]] if s.args else s.dtype
        if s.op is Ops.WHERE:
            t = s.dtype.llvm
            v = self.emit(f"select i1 {args[0]}, {t} {args[1]}, {t} {args[2]}")
        elif s.op is Ops.CAST:
            v = self.cast(args[0], src_dt, s.dtype)
        elif src_dt.is_float:
            v = self.float_op(s.op, args, src_dt)
        else:
            v = self.int_op(s.op, args, src_dt)
        self.bind(s.dst, v, s.dtype)

    def stmt_AccInit(self, s: AccInit) -> None:
        t = s.dtype.llvm
        self.allocas.append(f"  %{s.acc}.addr = alloca {t}")
        self.lines.append(f"  store {t} {literal(s.value, s.dtype)}, ptr %{s.acc}.addr")
        self.types[s.acc] = s.dtype

    def stmt_AccUpdate(self, s: AccUpdate) -> None:
        t, dt = s.dtype.llvm, s.dtype
        cur = self.emit(f"load {t}, ptr %{s.acc}.addr")
        val = self.ref(s.value)
        if dt.is_float:
            if s.op is Ops.ADD:
                new = self.emit(f"fadd reassoc nsz {t} {cur}, {val}")
            else:
                new = self.emit(
                    f"call reassoc nsz {t} @llvm.maximum.{_sfx(dt)}({t} {cur}, {t} {val})"
                )
        elif dt.is_bool:
            new = self.emit(f"or i1 {cur}, {val}")
        elif s.op is Ops.ADD:
            new = self.emit(f"add {t} {cur}, {val}")
        else:
            new = self.emit(f"call {t} @llvm.smax.{t}({t} {cur}, {t} {val})")
        self.lines.append(f"  store {t} {new}, ptr %{s.acc}.addr")

    def stmt_Store(self, s: Store) -> None:
        dt = s.param.dtype
        v = self.ref(s.value)
        if dt.is_bool:
            v = self.emit(f"zext i1 {v} to i8")
        idx = self.index(s.index)
        ptr = self.emit(f"getelementptr inbounds {mem_type(dt)}, ptr %{s.param.name}, i64 {idx}")
        self.lines.append(f"  store {mem_type(dt)} {v}, ptr {ptr}")

    # ---------------------------------------------------------------- values
    def bind(self, name: str, value: str, dt: DType) -> None:
        self.values[name] = value
        self.types[name] = dt

    def ref(self, name: str) -> str:
        if name.startswith("acc"):
            dt = self.types[name]
            return self.emit(f"load {dt.llvm}, ptr %{name}.addr")
        return self.values[name]

    def float_op(self, op: Ops, a: list[str], dt: DType) -> str:
        t = dt.llvm
        simple = {
            Ops.ADD: "fadd",
            Ops.MUL: "fmul",
            Ops.DIV: "fdiv",
        }
        if op in simple:
            return self.emit(f"{simple[op]} {t} {a[0]}, {a[1]}")
        if op is Ops.NEG:
            return self.emit(f"fneg {t} {a[0]}")
        if op is Ops.RECIP:
            return self.emit(f"fdiv {t} {fconst(1.0, t)}, {a[0]}")
        if op is Ops.CMPLT:
            return self.emit(f"fcmp olt {t} {a[0]}, {a[1]}")
        if op is Ops.CMPEQ:
            return self.emit(f"fcmp oeq {t} {a[0]}, {a[1]}")
        if op is Ops.MAX:
            return self.emit(f"call {t} @llvm.maximum.{_sfx(dt)}({t} {a[0]}, {t} {a[1]})")
        if op is Ops.SQRT:
            return self.emit(f"call {t} @llvm.sqrt.{_sfx(dt)}({t} {a[0]})")
        name = {Ops.EXP: "exp", Ops.LOG: "log", Ops.SIN: "sin"}[op]
        self.math.add((name, t))
        return self.emit(f"call {t} @fg_{name}_{t}({t} {a[0]})")

    def int_op(self, op: Ops, a: list[str], dt: DType) -> str:
        t = dt.llvm
        if dt.is_bool:
            table = {
                Ops.ADD: "or i1 {0}, {1}",
                Ops.MUL: "and i1 {0}, {1}",
                Ops.MAX: "or i1 {0}, {1}",
                Ops.NEG: "xor i1 {0}, true",
                Ops.CMPLT: "icmp ult i1 {0}, {1}",
                Ops.CMPEQ: "icmp eq i1 {0}, {1}",
            }
            return self.emit(table[op].format(*a))
        table = {
            Ops.ADD: "add {t} {0}, {1}",
            Ops.MUL: "mul {t} {0}, {1}",
            Ops.NEG: "sub {t} 0, {0}",
            Ops.CMPLT: "icmp slt {t} {0}, {1}",
            Ops.CMPEQ: "icmp eq {t} {0}, {1}",
            Ops.MAX: "call {t} @llvm.smax.{t}({t} {0}, {t} {1})",
        }
        if op in table:
            return self.emit(table[op].format(*a, t=t))
        if op is Ops.DIV:  # integer division by zero gives 0 instead of a crash
            zero = self.emit(f"icmp eq {t} {a[1]}, 0")
            safe = self.emit(f"select i1 {zero}, {t} 1, {t} {a[1]}")
            q = self.emit(f"sdiv {t} {a[0]}, {safe}")
            return self.emit(f"select i1 {zero}, {t} 0, {t} {q}")
        raise NotImplementedError(f"{op.name} on {dt.name}")

    def cast(self, v: str, src: DType, dst: DType) -> str:
        s, d = src.llvm, dst.llvm
        if src is dst:
            return v
        if dst.is_bool:
            if src.is_float:
                return self.emit(f"fcmp une {s} {v}, {fconst(0.0, s)}")
            return self.emit(f"icmp ne {s} {v}, 0")
        if dst.is_float:
            if src.is_float:
                op = "fpext" if src.itemsize < dst.itemsize else "fptrunc"
            else:
                op = "uitofp" if src.is_bool else "sitofp"
            return self.emit(f"{op} {s} {v} to {d}")
        if src.is_float:
            return self.emit(f"fptosi {s} {v} to {d}")
        if src.is_bool:
            return self.emit(f"zext i1 {v} to {d}")
        op = "sext" if src.itemsize < dst.itemsize else "trunc"
        return self.emit(f"{op} {s} {v} to {d}")

    # ---------------------------------------------------------------- module
    def render(self) -> str:
        self.values: dict[str, str] = {}
        self.block(self.k.body)
        params = ["i64 %start", "i64 %end"]
        for p in self.k.params:
            attrs = "noalias" if p.output else "noalias readonly"
            params.append(f"ptr {attrs} %{p.name}")
        head = f"define void @{self.symbol}({', '.join(params)}) nounwind {{"
        body = ["entry:"] + self.allocas + ["  br label %top", "top:"] + self.lines + ["  ret void"]
        return "\n".join(
            [
                f"; kernel {self.k.name}",
                INTRINSICS,
                math_functions(self.math),
                head,
                *body,
                "}",
                "",
            ]
        )


def _sfx(dt: DType) -> str:
    return "f32" if dt.llvm == "float" else "f64"


def _i32(v: int) -> str:
    v &= 0xFFFFFFFF
    return str(v - (1 << 32) if v >= 1 << 31 else v)


def render_llvm(kernel: Kernel, symbol: str) -> str:
    """LLVM IR text of `kernel` as a function named `symbol`."""
    return _Renderer(kernel, symbol).render()
