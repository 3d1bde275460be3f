"""Render a loop-IR kernel as CUDA C.

One GPU thread runs one iteration of the kernel's parallel loop; the loops
inside it run serially in that thread. The signature mirrors the CPU one,

    extern "C" __global__ void SYMBOL(long long start, long long end, float* out0, ...)

so the launcher passes the same range and buffers. Transcendentals are CUDA's
own device functions (`expf`, `logf`, `sinf`, ...); `MAX` propagates NaN as
numpy's `maximum` does.
"""

from __future__ import annotations

from ..ir.dtypes import DType
from ..ir.ops import Ops
from ..ir.symbolic import FloorDiv, Lin, Mod, Var
from .loopir import (
    AccInit,
    AccRead,
    AccReduceLanes,
    AccUpdate,
    Alu,
    Const,
    Kernel,
    Load,
    LoadRow,
    Loop,
    Rand,
    ScatterAdd,
    Select,
    Store,
)

PRELUDE = """\
__device__ __forceinline__ float fg_max(float a, float b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ double fg_max(double a, double b) { return (a != a || a > b) ? a : b; }
__device__ __forceinline__ int fg_max(int a, int b) { return a > b ? a : b; }
__device__ __forceinline__ long long fg_max(long long a, long long b) { return a > b ? a : b; }
__device__ __forceinline__ bool fg_max(bool a, bool b) { return a || b; }
__device__ __forceinline__ unsigned int fg_fmix(unsigned int x) {
  x ^= x >> 16; x *= 0x85EBCA6Bu; x ^= x >> 13; x *= 0xC2B2AE35u; x ^= x >> 16; return x;
}
"""


def mem_type(dt: DType) -> str:
    return "unsigned char" if dt.is_bool else dt.cuda


def literal(value, dt: DType) -> str:
    if dt.is_bool:
        return "true" if value else "false"
    if dt.is_int:
        return f"{int(value)}LL" if dt.itemsize == 8 else str(int(value))
    v = float(value)
    if v != v:
        text = (
            "__int_as_float(0x7fc00000)"
            if dt.itemsize == 4
            else "__longlong_as_double(0x7ff8000000000000LL)"
        )
        return text
    if v in (float("inf"), float("-inf")):
        sign = "-" if v < 0 else ""
        return f"{sign}(1.0{'f' if dt.itemsize == 4 else ''}/0.0{'f' if dt.itemsize == 4 else ''})"
    return f"{v!r}f" if dt.itemsize == 4 else repr(v)


def index(e: Lin) -> str:
    parts = []
    for atom, coef in e.terms:
        a = _atom(atom)
        parts.append(a if coef == 1 else f"{a}*{coef}LL")
    if e.const or not parts:
        parts.append(f"{e.const}LL")
    return "(" + " + ".join(parts) + ")"


def _atom(a) -> str:
    if isinstance(a, Var):
        return a.name
    if isinstance(a, FloorDiv):
        return f"({index(a.x)}/{a.c}LL)"
    if isinstance(a, Mod):
        return f"({index(a.x)}%{a.c}LL)"
    raise TypeError(a)


def valid(conds) -> str:
    return " && ".join(f"{index(c)} >= 0" for c in conds) or "true"


_FLOAT_FN = {Ops.EXP: "exp", Ops.LOG: "log", Ops.SIN: "sin", Ops.COS: "cos", Ops.SQRT: "sqrt"}
_BINARY = {Ops.ADD: "+", Ops.MUL: "*", Ops.DIV: "/", Ops.CMPLT: "<", Ops.CMPEQ: "=="}


class _Renderer:
    def __init__(self, kernel: Kernel, symbol: str):
        self.k, self.symbol = kernel, symbol
        self.lines: list[str] = []
        self.types: dict[str, DType] = {}

    def line(self, depth: int, text: str) -> None:
        self.lines.append("  " * depth + text)

    def block(self, body, depth: int) -> None:
        for s in body:
            if isinstance(s, Loop):
                if s.kind == "parallel":
                    v = s.var.name
                    self.line(
                        depth,
                        f"long long {v} = start + (long long)blockIdx.x * blockDim.x"
                        " + threadIdx.x;",
                    )
                    self.line(depth, f"if ({v} >= end) return;")
                    self.block(s.body, depth)
                else:
                    v = s.var.name
                    self.line(depth, f"for (long long {v} = 0; {v} < {s.extent}LL; ++{v}) {{")
                    self.block(s.body, depth + 1)
                    self.line(depth, "}")
            else:
                self.line(depth, self.stmt(s))

    def decl(self, name: str, dt: DType, expr: str) -> str:
        self.types[name] = dt
        return f"const {dt.cuda} {name} = {expr};"

    def stmt(self, s) -> str:
        if isinstance(s, Load):
            ref = f"{s.param.name}[{index(s.index)}]"
            if s.dtype.is_bool:
                ref = f"({ref} != 0)"
            if s.valid:
                ok = valid(s.valid)
                ref = f"(({ok}) ? {s.param.name}[({ok}) ? {index(s.index)} : 0LL] : 0)"
                if s.dtype.is_bool:
                    ref = f"({ref} != 0)"
            return self.decl(s.dst, s.dtype, ref)
        if isinstance(s, (LoadRow, ScatterAdd)):
            ok = f"{s.row} >= 0 && {s.row} < {s.rows}LL" + (
                f" && {valid(s.valid)}" if s.valid else ""
            )
            at = f"(long long){s.row} * {s.row_size}LL + {index(s.col)}"
            if isinstance(s, ScatterAdd):  # this thread owns these columns: no atomics needed
                return f"if ({ok}) {s.param.name}[{at}] += {s.value};"
            ref = f"(({ok}) ? {s.param.name}[({ok}) ? {at} : 0LL] : 0)"
            return self.decl(s.dst, s.dtype, f"({ref} != 0)" if s.dtype.is_bool else ref)
        if isinstance(s, Const):
            return self.decl(s.dst, s.dtype, literal(s.value, s.dtype))
        if isinstance(s, Select):
            return self.decl(s.dst, s.dtype, f"({valid(s.valid)}) ? {s.value} : ({s.dtype.cuda})0")
        if isinstance(s, Rand):
            h = f"fg_fmix((unsigned int){index(s.index)} ^ (unsigned int){s.key})"
            return self.decl(
                s.dst, s.dtype, f"({s.dtype.cuda})({h} >> 8) * ({s.dtype.cuda})(1.0 / 16777216.0)"
            )
        if isinstance(s, Alu):
            return self.decl(s.dst, s.dtype, self.alu(s))
        if isinstance(s, AccInit):
            self.types[s.acc] = s.dtype
            init = literal(s.value, s.dtype)
            if s.size == 1:
                return f"{s.dtype.cuda} {s.acc} = {init};"
            return (
                f"{s.dtype.cuda} {s.acc}[{s.size}]; "
                f"for (int k = 0; k < {s.size}; ++k) {s.acc}[k] = {init};"
            )
        if isinstance(s, AccRead):
            return self.decl(s.dst, s.dtype, f"{s.acc}[{index(s.index)}]")
        if isinstance(s, AccReduceLanes):
            self.types[s.dst] = s.dtype
            base = index(s.base)
            step = f"{s.dst} += {s.acc}[{base} + k];"
            if s.op is not Ops.ADD or s.dtype.is_bool:
                step = f"{s.dst} = fg_max({s.dst}, {s.acc}[{base} + k]);"
            return (
                f"{s.dtype.cuda} {s.dst} = {s.acc}[{base}]; "
                f"for (int k = 1; k < {s.lanes}; ++k) {step}"
            )
        if isinstance(s, AccUpdate):
            ref = s.acc if s.index is None else f"{s.acc}[{index(s.index)}]"
            if s.op is Ops.ADD and not s.dtype.is_bool:
                return f"{ref} += {s.value};"
            return f"{ref} = fg_max({ref}, {s.value});"
        if isinstance(s, Store):
            v = f"(unsigned char){s.value}" if s.param.dtype.is_bool else s.value
            store = f"{s.param.name}[{index(s.index)}] = {v};"
            return f"if ({valid(s.valid)}) {store}" if s.valid else store
        raise TypeError(s)

    def alu(self, s: Alu) -> str:
        a = s.args
        src = self.types.get(a[0], s.dtype) if a else s.dtype
        if s.op is Ops.WHERE:
            return f"{a[0]} ? {a[1]} : {a[2]}"
        if s.op is Ops.CAST:
            if s.dtype.is_bool:
                return f"({a[0]} != 0)"
            return f"({s.dtype.cuda}){a[0]}"
        if s.op is Ops.NEG:
            return f"!{a[0]}" if src.is_bool else f"-{a[0]}"
        if s.op is Ops.RECIP:
            return f"({src.cuda})1 / {a[0]}"
        if s.op is Ops.MAX:
            return f"fg_max({a[0]}, {a[1]})"
        if s.op in _FLOAT_FN:
            fn = _FLOAT_FN[s.op] + ("f" if src.itemsize == 4 else "")
            return f"{fn}({a[0]})"
        if src.is_bool and s.op in (Ops.ADD, Ops.MUL):
            return f"{a[0]} {'||' if s.op is Ops.ADD else '&&'} {a[1]}"
        if s.op is Ops.DIV and not src.is_float:
            return f"({a[1]} == 0 ? ({src.cuda})0 : {a[0]} / {a[1]})"
        return f"{a[0]} {_BINARY[s.op]} {a[1]}"

    def render(self) -> str:
        params = ["long long start", "long long end"]
        for p in self.k.params:
            const = "" if p.output else "const "
            params.append(f"{const}{mem_type(p.dtype)}* __restrict__ {p.name}")
        self.block(self.k.body, 1)
        if not any(isinstance(s, Loop) and s.kind == "parallel" for s in self.k.body):
            self.lines.insert(
                0, "  if (start + (long long)blockIdx.x * blockDim.x + threadIdx.x >= end) return;"
            )
        head = f'extern "C" __global__ void {self.symbol}({", ".join(params)}) {{'
        return "\n".join([f"// kernel {self.k.name}", PRELUDE, head, *self.lines, "}", ""])


def render_cuda(kernel: Kernel, symbol: str) -> str:
    """CUDA C text of `kernel` as a `__global__` function named `symbol`."""
    return _Renderer(kernel, symbol).render()
