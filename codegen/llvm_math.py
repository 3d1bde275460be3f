"""exp, log and sin as LLVM IR the loop vectorizer can widen.

A scalar libm call inside a loop stops vectorization, and activations are
where CPU time goes, so each function is written out as range reduction plus
a polynomial (Horner's rule with fused multiply-adds), with the special cases
(NaN, infinities, zero, denormals, overflow) handled by selects. Each is an
`internal alwaysinline` function per float type, emitted only into modules
that use it. Accuracy against numpy: a few ulp over the normal range
(tested in tests/codegen/test_math.py); sin reduces its argument in double
precision, accurate for |x| below about 1e9.
"""

from __future__ import annotations

import math
import struct


def fconst(value: float, ty: str) -> str:
    """An LLVM float literal: hex of the double, rounded to float first for `float`."""
    if ty == "float":
        value = struct.unpack("<f", struct.pack("<f", value))[0]
    return "0x" + struct.pack(">d", value).hex().upper()


class _Builder:
    def __init__(self, ty: str):
        self.ty, self.lines, self.n = ty, [], 0

    def __call__(self, text: str) -> str:
        self.n += 1
        name = f"%t{self.n}"
        self.lines.append(f"  {name} = {text}")
        return name

    def c(self, v: float) -> str:
        return fconst(v, self.ty)

    def fma(self, a: str, b: str, c: str) -> str:
        t = self.ty
        sfx = "f32" if t == "float" else "f64"
        return self(f"call {t} @llvm.fma.{sfx}({t} {a}, {t} {b}, {t} {c})")

    def horner(self, x: str, coefs: list[float]) -> str:
        """coefs[0] + x*(coefs[1] + x*(...)), highest degree innermost."""
        acc = self.c(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = self.fma(acc, x, self.c(c))
        return acc


def _exp(ty: str) -> str:
    b = _Builder(ty)
    f64 = ty == "double"
    it, bits, bias = ("i64", 52, 1022) if f64 else ("i32", 23, 126)
    lo, hi = (-708.0, 709.782712893384) if f64 else (-87.0, 88.72283935546875)
    ln2_hi, ln2_lo = (
        (6.93147180369123816490e-01, 1.90821492927058770002e-10)
        if f64
        else (0.693359375, -2.12194440e-4)
    )
    degree = 13 if f64 else 7
    sfx = "f64" if f64 else "f32"
    t = b(f"fmul {ty} %x, {b.c(1 / math.log(2))}")
    n = b(f"call {ty} @llvm.rint.{sfx}({ty} {t})")
    negn = b(f"fneg {ty} {n}")
    r = b.fma(negn, b.c(ln2_hi), "%x")
    r = b.fma(negn, b.c(ln2_lo), r)
    p = b.horner(r, [1 / math.factorial(k) for k in range(degree + 1)])
    # 2^(n-1) then *2, so that n = max exponent + 1 still builds a finite scale
    ni = b(f"fptosi {ty} {n} to {it}")
    e = b(f"add {it} {ni}, {bias}")
    e = b(f"shl {it} {e}, {bits}")
    scale = b(f"bitcast {it} {e} to {ty}")
    y = b(f"fmul {ty} {p}, {scale}")
    y = b(f"fmul {ty} {y}, {b.c(2.0)}")
    small = b(f"fcmp olt {ty} %x, {b.c(lo)}")
    y = b(f"select i1 {small}, {ty} {b.c(0.0)}, {ty} {y}")
    big = b(f"fcmp ogt {ty} %x, {b.c(hi)}")
    y = b(f"select i1 {big}, {ty} {b.c(math.inf)}, {ty} {y}")
    nan = b(f"fcmp uno {ty} %x, %x")
    y = b(f"select i1 {nan}, {ty} %x, {ty} {y}")
    return _function("exp", ty, b, y)


def _log(ty: str) -> str:
    b = _Builder(ty)
    f64 = ty == "double"
    it, bits, bias = ("i64", 52, 1023) if f64 else ("i32", 23, 127)
    mant_mask = (1 << bits) - 1
    one_bits = bias << bits
    tiny = 2.2250738585072014e-308 if f64 else 1.1754943508222875e-38
    terms = 10 if f64 else 5
    # denormals: scale up first
    sub = b(f"fcmp olt {ty} %x, {b.c(tiny)}")
    xs = b(f"fmul {ty} %x, {b.c(2.0**bits)}")
    x = b(f"select i1 {sub}, {ty} {xs}, {ty} %x")
    eadj = b(f"select i1 {sub}, {it} {bits}, {it} 0")
    xb = b(f"bitcast {ty} {x} to {it}")
    e = b(f"lshr {it} {xb}, {bits}")
    e = b(f"sub {it} {e}, {bias}")
    e = b(f"sub {it} {e}, {eadj}")
    m = b(f"and {it} {xb}, {mant_mask}")
    m = b(f"or {it} {m}, {one_bits}")
    m = b(f"bitcast {it} {m} to {ty}")
    big = b(f"fcmp ogt {ty} {m}, {b.c(math.sqrt(2.0))}")
    mh = b(f"fmul {ty} {m}, {b.c(0.5)}")
    m = b(f"select i1 {big}, {ty} {mh}, {ty} {m}")
    e1 = b(f"add {it} {e}, 1")
    e = b(f"select i1 {big}, {it} {e1}, {it} {e}")
    f = b(f"fsub {ty} {m}, {b.c(1.0)}")
    den = b(f"fadd {ty} {f}, {b.c(2.0)}")
    s = b(f"fdiv {ty} {f}, {den}")
    s2 = b(f"fmul {ty} {s}, {s}")
    # log1p(f) = 2 atanh(s) = 2 s (1 + s^2/3 + s^4/5 + ...)
    p = b.horner(s2, [1.0 / (2 * k + 1) for k in range(terms)])
    p = b(f"fmul {ty} {p}, {s}")
    p = b(f"fmul {ty} {p}, {b.c(2.0)}")
    ef = b(f"sitofp {it} {e} to {ty}")
    y = b.fma(ef, b.c(math.log(2.0)), p)
    inf = b(f"fcmp oeq {ty} %x, {b.c(math.inf)}")
    y = b(f"select i1 {inf}, {ty} %x, {ty} {y}")
    zero = b(f"fcmp oeq {ty} %x, {b.c(0.0)}")
    y = b(f"select i1 {zero}, {ty} {b.c(-math.inf)}, {ty} {y}")
    neg = b(f"fcmp ult {ty} %x, {b.c(0.0)}")  # true for negatives and NaN
    y = b(f"select i1 {neg}, {ty} {b.c(math.nan)}, {ty} {y}")
    return _function("log", ty, b, y)


def _sin(ty: str) -> str:
    """sin via quadrant reduction by pi/2, computed in double, then sin/cos polynomials."""
    b = _Builder("double")
    f64 = ty == "double"
    x = "%x" if f64 else b("fpext float %x to double")
    n = b(f"fmul double {x}, {b.c(2 / math.pi)}")
    n = b("call double @llvm.rint.f64(double " + n + ")")
    negn = b(f"fneg double {n}")
    # pi/2 in three parts (Cody-Waite) so that r = x - n*pi/2 keeps its low bits
    p1, p2, p3 = 1.5707963267341256e00, 6.077100506303966e-11, 2.0222662487959506e-21
    r = b.fma(negn, b.c(p1), x)
    r = b.fma(negn, b.c(p2), r)
    r = b.fma(negn, b.c(p3), r)
    r2 = b(f"fmul double {r}, {r}")
    deg = 11 if f64 else 6
    sin_c = [(-1) ** k / math.factorial(2 * k + 1) for k in range(deg)]
    cos_c = [(-1) ** k / math.factorial(2 * k) for k in range(deg + 1)]
    sp = b.horner(r2, sin_c)
    sp = b(f"fmul double {sp}, {r}")
    cp = b.horner(r2, cos_c)
    q = b(f"fptosi double {n} to i64")
    q = b(f"and i64 {q}, 3")
    odd = b(f"trunc i64 {q} to i1")
    v = b(f"select i1 {odd}, double {cp}, double {sp}")
    hi = b(f"icmp uge i64 {q}, 2")
    nv = b(f"fneg double {v}")
    v = b(f"select i1 {hi}, double {nv}, double {v}")
    diff = b(f"fsub double {x}, {x}")
    finite = b(f"fcmp ord double {diff}, {b.c(0.0)}")
    v = b(f"select i1 {finite}, double {v}, double {b.c(math.nan)}")
    if not f64:
        v = b(f"fptrunc double {v} to float")
    return _function("sin", ty, b, v)


def _function(name: str, ty: str, b: _Builder, result: str) -> str:
    body = "\n".join(b.lines)
    return (
        f"define internal {ty} @fg_{name}_{ty}({ty} %x) alwaysinline nounwind {{\n"
        f"{body}\n  ret {ty} {result}\n}}\n"
    )


_GENERATORS = {"exp": _exp, "log": _log, "sin": _sin}

INTRINSICS = """\
declare float @llvm.fma.f32(float, float, float)
declare double @llvm.fma.f64(double, double, double)
declare float @llvm.rint.f32(float)
declare double @llvm.rint.f64(double)
declare float @llvm.sqrt.f32(float)
declare double @llvm.sqrt.f64(double)
declare float @llvm.maximum.f32(float, float)
declare double @llvm.maximum.f64(double, double)
declare i32 @llvm.smax.i32(i32, i32)
declare i64 @llvm.smax.i64(i64, i64)
"""


def math_functions(used: set[tuple[str, str]]) -> str:
    """IR text for the (function, type) pairs a module calls, e.g. {("exp", "float")}."""
    return "\n".join(_GENERATORS[name](ty) for name, ty in sorted(used))
