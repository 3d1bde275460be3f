"""exp, log, sin, cos and erfc as LLVM IR the loop vectorizer can widen.

A scalar libm call inside a loop stops vectorization, and activations are
where CPU time goes, so each function is written out as range reduction plus
a polynomial (Horner's rule with fused multiply-adds), with the special cases
(NaN, infinities, zero, denormals, overflow) handled by selects. Each is an
`internal alwaysinline` function per float type, emitted only into modules
that use it. Accuracy against numpy: a few ulp over the normal range
(tested in tests/pipeline/test_math.py); sin and cos reduce their argument in
double precision, within 3 ulps for |x| below 2^50, and leave larger arguments to the
C library's (`_rare_lanes`).
"""

from __future__ import annotations

import functools
import math
import struct
from collections.abc import Callable

from ..ir.ops import MATH


def fconst(value: float, ty: str) -> str:
    """An LLVM float literal: hex of the double, rounded to float first for `float` (past
    float's range, to an infinity of its sign, as IEEE rounding and numpy's cast make it:
    `x < 1e300` of a float32 x compares with inf, as torch's).

    >>> fconst(1e300, "float") == fconst(math.inf, "float"), fconst(-1e300, "float")
    (True, '0xFFF0000000000000')
    """
    if ty == "float":
        value = float32_rounded(value)
    return "0x" + struct.pack(">d", value).hex().upper()


FLOAT_MAX = 3.4028234663852886e38  # float32's largest finite value


def float32_rounded(value: float) -> float:
    """`value` rounded to the nearest float32 (IEEE: past the largest, an infinity)."""
    try:
        return struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:  # (struct refuses what rounds past float's largest value)
        return math.copysign(math.inf, value)


class _Builder:
    """Straight-line IR for one float type, scalar or a vector of `width` lanes."""

    def __init__(self, elem: str, width: int | None):
        self.elem, self.width = elem, width
        self.lines: list[str] = []
        self.n = 0
        ielem = "i64" if elem == "double" else "i32"
        self.ty = vector_type(elem, width)
        self.ity = vector_type(ielem, width)
        self.bty = vector_type("i1", width)
        self.ielem = ielem
        self.decls: set[str] = set()

    def __call__(self, text: str) -> str:
        self.n += 1
        name = f"%t{self.n}"
        self.lines.append(f"  {name} = {text}")
        return name

    def c(self, v: float, elem: str | None = None) -> str:
        elem = elem or self.elem
        lit = fconst(v, elem)
        return f"splat ({elem} {lit})" if self.width else lit

    def i(self, v: int) -> str:
        return f"splat ({self.ielem} {v})" if self.width else str(v)

    def intrinsic(self, name: str, nargs: int = 1) -> str:
        """The name of llvm.NAME for this type, declared as taking `nargs` of it."""
        fn = f"@llvm.{name}.{intrinsic_suffix(self.ty)}"
        self.decls.add(f"declare {self.ty} {fn}({', '.join([self.ty] * nargs)})")
        return fn

    def fma(self, a: str, b: str, c: str) -> str:
        t = self.ty
        return self(f"call {t} {self.intrinsic('fma', 3)}({t} {a}, {t} {b}, {t} {c})")

    def horner(self, x: str, coefs: list[float]) -> str:
        """coefs[0] + x*(coefs[1] + x*(...)), highest degree innermost."""
        acc = self.c(coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = self.fma(acc, x, self.c(c))
        return acc


def vector_type(elem: str, width: int | None) -> str:
    return f"<{width} x {elem}>" if width else elem


def intrinsic_suffix(ty: str) -> str:
    """LLVM's overload suffix: float -> f32, <16 x float> -> v16f32, <8 x i64> -> v8i64."""
    names = {
        "half": "f16",
        "float": "f32",
        "double": "f64",
        "i1": "i1",
        "i8": "i8",
        "i16": "i16",
        "i32": "i32",
        "i64": "i64",
    }
    if ty.startswith("<"):
        width, _, elem = ty[1:-1].split(" ")
        return f"v{width}{names[elem]}"
    return names[ty]


# name -> generator(elem, width) of the function's IR text: ir/ops.py's MATH rows without
# an LLVM intrinsic, each spelled `@fg_<name>_...` by the renderer
_GENERATORS: dict[str, Callable[[str, int | None], tuple[str, set[str]]]] = {}


def _polynomial(gen):
    """Register `_<name>` as the generator of `name`."""
    _GENERATORS[gen.__name__.removeprefix("_")] = gen
    return gen


@functools.cache
def host_has(feature: str) -> bool:
    """Whether LLVM reports CPU feature `feature` (its name without the sign: "avx512f")
    for the host, the machine kernels are compiled for."""
    import llvmlite.binding as llvm

    return f"+{feature}" in llvm.get_host_cpu_features().flatten().split(",")


def host_scales_in_one_instruction() -> bool:
    """Whether the host has AVX-512 (`vscalefps`/`vscalefpd`): LLVM lowers `llvm.ldexp` to
    one instruction there, elsewhere to a library call, which a kernel must not make."""
    return host_has("avx512f")


def host_converts_bf16() -> bool:
    """Whether the host has AVX512-BF16 (`vcvtne2ps2bf16`: 32 float32 to bfloat16 in one
    instruction, flushing subnormal inputs)."""
    return host_has("avx512bf16")


def _exp_reduced(b: _Builder, x: str) -> tuple[str, str]:
    """(n, p(r)) of exp's reduction, both paths': n = rint(x / ln 2), r = x - n ln 2 with
    ln 2 in two parts (the second corrects the first's rounding), p Taylor's polynomial of
    degree 7 (13 in double), so exp(x) = p(r) * 2^n."""
    f64 = b.elem == "double"
    ln2_hi, ln2_lo = (
        (6.93147180369123816490e-01, 1.90821492927058770002e-10)
        if f64
        else (0.693359375, -2.12194440e-4)
    )
    degree = 13 if f64 else 7
    t = b(f"fmul {b.ty} {x}, {b.c(1 / math.log(2))}")
    n = b(f"call {b.ty} {b.intrinsic('rint')}({b.ty} {t})")
    negn = b(f"fneg {b.ty} {n}")
    r = b.fma(negn, b.c(ln2_hi), x)
    r = b.fma(negn, b.c(ln2_lo), r)
    return n, b.horner(r, [1 / math.factorial(k) for k in range(degree + 1)])


@_polynomial
def _exp(elem: str, width: int | None) -> str:
    if host_scales_in_one_instruction():
        return _exp_scalef(elem, width)
    b = _Builder(elem, width)
    ty, it = b.ty, b.ity
    f64 = elem == "double"
    bits, bias = (52, 1023) if f64 else (23, 127)
    # below lo the result rounds to zero; subnormal results come out of the two-step scale
    lo, hi = (-745.2, 709.782712893384) if f64 else (-104.0, 88.72283935546875)
    # lanes below lo compute exp(0), replaced by 0 below: scales that underflow take a
    # microcode assist on Intel cores (see `_exp_scalef`)
    small = b(f"fcmp olt {ty} %x, {b.c(lo)}")
    x = b(f"select {b.bty} {small}, {ty} {b.c(0.0)}, {ty} %x")
    n, p = _exp_reduced(b, x)
    # scale by 2^n as 2^(n>>1) * 2^(n - (n>>1)): both factors are normal numbers for every n
    # in range, so large results stay finite and tiny ones round gradually into subnormals
    ni = b(f"fptosi {ty} {n} to {it}")
    n1 = b(f"ashr {it} {ni}, {b.i(1)}")
    n2 = b(f"sub {it} {ni}, {n1}")
    y = p
    for part in (n1, n2):
        e = b(f"add {it} {part}, {b.i(bias)}")
        e = b(f"shl {it} {e}, {b.i(bits)}")
        scale = b(f"bitcast {it} {e} to {ty}")
        y = b(f"fmul {ty} {y}, {scale}")
    y = b(f"select {b.bty} {small}, {ty} {b.c(0.0)}, {ty} {y}")
    big = b(f"fcmp ogt {ty} %x, {b.c(hi)}")
    y = b(f"select {b.bty} {big}, {ty} {b.c(math.inf)}, {ty} {y}")
    nan = b(f"fcmp uno {ty} %x, %x")
    y = b(f"select {b.bty} {nan}, {ty} %x, {ty} {y}")
    return _function("exp", b, y)


def _exp_scalef(elem: str, width: int | None) -> str:
    """exp where the host scales by 2^n in one instruction (AVX-512's `vscalefps`, which
    rounds a subnormal result once and overflows to inf): the argument is clamped to hi
    first, above which the result is inf anyway, and below lo (where it is +0) replaced by
    0 and its result by 0, so that no lane's scale underflows; NaN keeps a select of its
    own where the integer exponent is used (it would be poison). Same polynomial and
    reduction as `_exp`, so the same values, in about half its vector instructions.

        x' = min(x < lo ? 0 : x, hi); n = rint(x' / ln 2); r = x' - n ln 2 (two parts)
        exp(x) = x < lo ? 0 : ldexp(p(r), n), p Taylor's polynomial of degree 7 (13 in double)
    """
    b = _Builder(elem, width)
    ty, it = b.ty, b.ity
    f64 = elem == "double"
    # exp(lo) is below half the smallest subnormal (it rounds to 0, n = -150 / -1075),
    # exp(hi) overflows (n = 128 / 1024)
    lo, hi = (-745.2, 710.0) if f64 else (-104.0, 89.0)
    # below lo the result is +0: those lanes compute exp(0) and are replaced by 0 at the
    # end, since a scale that underflows (to zero or a subnormal) takes a microcode assist
    # on Intel cores: a causal mask's -inf lanes made a masked softmax 4 times slower
    below = b(f"fcmp olt {ty} %x, {b.c(lo)}")  # false for NaN: a NaN stays
    x = b(f"select {b.bty} {below}, {ty} {b.c(0.0)}, {ty} %x")
    above = b(f"fcmp ogt {ty} {x}, {b.c(hi)}")
    x = b(f"select {b.bty} {above}, {ty} {b.c(hi)}, {ty} {x}")
    n, p = _exp_reduced(b, x)
    chunk = 8 if f64 else 16  # lanes of one 512-bit register
    if width and width % chunk == 0:
        # whole registers: AVX-512's own scalef takes n as a float, so there is no integer
        # conversion, and a NaN argument comes out NaN (no select)
        y = _scalef_registers(b, p, n, chunk)
        return _function("exp", b, b(f"select {b.bty} {below}, {ty} {b.c(0.0)}, {ty} {y}"))
    ni = b(f"fptosi {ty} {n} to {it}")  # poison for a NaN: that lane is replaced below
    fn = f"@llvm.ldexp.{intrinsic_suffix(ty)}.{intrinsic_suffix(it)}"
    b.decls.add(f"declare {ty} {fn}({ty}, {it})")
    y = b(f"call {ty} {fn}({ty} {p}, {it} {ni})")
    y = b(f"select {b.bty} {below}, {ty} {b.c(0.0)}, {ty} {y}")
    nan = b(f"fcmp uno {ty} %x, %x")
    y = b(f"select {b.bty} {nan}, {ty} %x, {ty} {y}")
    return _function("exp", b, y)


def _scalef_registers(b: _Builder, p: str, n: str, chunk: int) -> str:
    """p * 2^n (n integral-valued floats) with `vscalefps`/`vscalefpd`, `chunk` lanes (one
    512-bit register) at a time: the vector is cut into registers and put back together."""
    ct = vector_type(b.elem, chunk)
    suffix, mask = ("pd", "i8") if b.elem == "double" else ("ps", "i16")
    fn = f"@llvm.x86.avx512.mask.scalef.{suffix}.512"
    b.decls.add(f"declare {ct} {fn}({ct}, {ct}, {ct}, {mask}, i32)")
    parts = []  # (register, its lanes)
    for k in range(b.width // chunk):
        lanes = ", ".join(f"i32 {k * chunk + j}" for j in range(chunk))
        pk, nk = (
            b(f"shufflevector {b.ty} {v}, {b.ty} poison, <{chunk} x i32> <{lanes}>") for v in (p, n)
        )
        # mask all ones; rounding 4: the current mode (to nearest)
        parts.append(
            (b(f"call {ct} {fn}({ct} {pk}, {ct} {nk}, {ct} {pk}, {mask} -1, i32 4)"), chunk)
        )
    while len(parts) > 1:  # concatenate pairwise, in lane order
        joined = []
        for (lo, w), (hi, _) in zip(parts[::2], parts[1::2]):
            vt = vector_type(b.elem, w)
            lanes = ", ".join(f"i32 {j}" for j in range(2 * w))
            joined.append(
                (b(f"shufflevector {vt} {lo}, {vt} {hi}, <{2 * w} x i32> <{lanes}>"), 2 * w)
            )
        parts = joined
    return parts[0][0]


@_polynomial
def _log(elem: str, width: int | None) -> str:
    b = _Builder(elem, width)
    ty, it, bt = b.ty, b.ity, b.bty
    f64 = elem == "double"
    bits, bias = (52, 1023) if f64 else (23, 127)
    mant_mask = (1 << bits) - 1
    one_bits = bias << bits
    tiny = 2.2250738585072014e-308 if f64 else 1.1754943508222875e-38
    terms = 10 if f64 else 5
    # denormals: scale up first
    sub = b(f"fcmp olt {ty} %x, {b.c(tiny)}")
    xs = b(f"fmul {ty} %x, {b.c(2.0**bits)}")
    x = b(f"select {bt} {sub}, {ty} {xs}, {ty} %x")
    eadj = b(f"select {bt} {sub}, {it} {b.i(bits)}, {it} {b.i(0)}")
    xb = b(f"bitcast {ty} {x} to {it}")
    e = b(f"lshr {it} {xb}, {b.i(bits)}")
    e = b(f"sub {it} {e}, {b.i(bias)}")
    e = b(f"sub {it} {e}, {eadj}")
    m = b(f"and {it} {xb}, {b.i(mant_mask)}")
    m = b(f"or {it} {m}, {b.i(one_bits)}")
    m = b(f"bitcast {it} {m} to {ty}")
    big = b(f"fcmp ogt {ty} {m}, {b.c(math.sqrt(2.0))}")
    mh = b(f"fmul {ty} {m}, {b.c(0.5)}")
    m = b(f"select {bt} {big}, {ty} {mh}, {ty} {m}")
    e1 = b(f"add {it} {e}, {b.i(1)}")
    e = b(f"select {bt} {big}, {it} {e1}, {it} {e}")
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
    y = b(f"select {bt} {inf}, {ty} %x, {ty} {y}")
    zero = b(f"fcmp oeq {ty} %x, {b.c(0.0)}")
    y = b(f"select {bt} {zero}, {ty} {b.c(-math.inf)}, {ty} {y}")
    neg = b(f"fcmp ult {ty} %x, {b.c(0.0)}")  # true for negatives and NaN
    y = b(f"select {bt} {neg}, {ty} {b.c(math.nan)}, {ty} {y}")
    return _function("log", b, y)


@_polynomial
def _sin(elem: str, width: int | None) -> str:
    return _sin_or_cos(elem, width, cos=False)


@_polynomial
def _cos(elem: str, width: int | None) -> str:
    return _sin_or_cos(elem, width, cos=True)


def _sin_or_cos(elem: str, width: int | None, cos: bool) -> str:
    """sin or cos via quadrant reduction by pi/2, computed in double, then sin/cos
    polynomials of the remainder r: cos(x) is sin's table one quadrant on (q + 1), so
    both keep the reduction's accuracy (cos is not sin(x + pi/2), which rounds x + pi/2)."""
    f64 = elem == "double"
    b = _Builder("double", width)
    b.arg_ty = vector_type(elem, width)
    d, bt = b.ty, b.bty
    q_ty = vector_type("i64", width)
    x = "%x" if f64 else b(f"fpext {b.arg_ty} %x to {d}")
    n = b(f"fmul {d} {x}, {b.c(2 / math.pi)}")
    n = b(f"call {d} {b.intrinsic('rint')}({d} {n})")
    negn = b(f"fneg {d} {n}")
    # pi/2 in three parts (Cody-Waite) so that r = x - n*pi/2 keeps its low bits
    p1, p2, p3 = 1.5707963267341256e00, 6.077100506303966e-11, 2.0222662487959506e-21
    r = b.fma(negn, b.c(p1), x)
    r = b.fma(negn, b.c(p2), r)
    r = b.fma(negn, b.c(p3), r)
    r2 = b(f"fmul {d} {r}, {r}")
    deg = 11 if f64 else 6
    sin_c = [(-1) ** k / math.factorial(2 * k + 1) for k in range(deg)]
    cos_c = [(-1) ** k / math.factorial(2 * k) for k in range(deg + 1)]
    sp = b.horner(r2, sin_c)
    sp = b(f"fmul {d} {sp}, {r}")
    cp = b.horner(r2, cos_c)
    q = b(f"fptosi {d} {n} to {q_ty}")
    if cos:
        q = b(f"add {q_ty} {q}, {b.i(1)}")
    q = b(f"and {q_ty} {q}, {b.i(3)}")
    odd = b(f"trunc {q_ty} {q} to {bt}")
    v = b(f"select {bt} {odd}, {d} {cp}, {d} {sp}")
    hi = b(f"icmp uge {q_ty} {q}, {b.i(2)}")
    nv = b(f"fneg {d} {v}")
    v = b(f"select {bt} {hi}, {d} {nv}, {d} {v}")
    diff = b(f"fsub {d} {x}, {x}")
    finite = b(f"fcmp ord {d} {diff}, {b.c(0.0)}")
    v = b(f"select {bt} {finite}, {d} {v}, {d} {b.c(math.nan)}")
    # (a polynomial just past a quadrant's edge: keep the result a sine's)
    lo = b(f"fcmp olt {d} {v}, {b.c(-1.0)}")
    v = b(f"select {bt} {lo}, {d} {b.c(-1.0)}, {d} {v}")
    hi1 = b(f"fcmp ogt {d} {v}, {b.c(1.0)}")
    v = b(f"select {bt} {hi1}, {d} {b.c(1.0)}, {d} {v}")
    if not cos:
        zero = b(f"fcmp oeq {d} {x}, {b.c(0.0)}")  # sin(-0.0) is -0.0
        v = b(f"select {bt} {zero}, {d} {x}, {d} {v}")
    if not f64:
        v = b(f"fptrunc {d} {v} to {b.arg_ty}")
    # from 2^50 on the reduction above loses bits (tens of ulps at 2^51; from 2^63 its
    # quadrant overflows): those lanes take the C library's, with its exact reduction
    ax = b(f"call {d} {b.intrinsic('fabs')}({d} {x})")
    need = b(f"fcmp oge {d} {ax}, {b.c(TRIG_EXACT_BELOW)}")
    b.ty = b.arg_ty
    name = "cos" if cos else "sin"
    return _rare_lanes(name, b, v, need, f"@llvm.{name}")


TRIG_EXACT_BELOW = 2.0**50  # |x| below which sin's and cos's reduction is within 3 ulps


# the functions a generated function calls, in double precision (emitted alongside it)
_CALLS = {"erfc": ("exp",)}
# (split, terms, series terms) per type: erf's series below split, the continued fraction
# from it on, to that many terms: 1 ulp in double from 1 on; float32 rounds the double
# result (the series' 40 terms keep erfc just below 2 correctly rounded where it lies within
# 1e-5 ulp of a tie), and takes the fraction as one convergent (a is at most 30, so its
# terms stay finite: 30^30 is 2e44), one division where double takes 200
_ERFC_TERMS = {"double": (1.0, 200, 40), "float": (2.0, 30, 40)}


@_polynomial
def _erfc(elem: str, width: int | None) -> str:
    """erfc in double (float32 rounds once at the end), for a = |x| clamped to 30 (past
    which erfc is 0 even in double) and g = e^-a^2:
    below the split, 1 - erf(a) with erf's series 2/sqrt(pi) a g sum (2a^2)^n / (1*3*...
    *(2n+1)) (positive terms; 1 - erf loses at most 3 bits below 1, 8 below 2);
    from it on, g / (sqrt(pi) (a + (1/2)/(a + 1/(a + (3/2)/(a + ...))))), never 1 - erf,
    which is 0 in double from a = 6 on where erfc is still 2e-17. In double, g is
    e^-h^2 e^-(a-h)(a+h) with h = a to 26 bits, so that the square is exact (a^2 rounded
    would cost up to 400 ulps far out). erfc(-a) = 2 - erfc(a)."""
    f64 = elem == "double"
    split, terms, series_terms = _ERFC_TERMS[elem]
    b = _Builder("double", width)
    b.arg_ty = vector_type(elem, width)
    d, bt, it = b.ty, b.bty, b.ity
    exp = function_name("exp", "double", width)
    x = "%x" if f64 else b(f"fpext {b.arg_ty} %x to {d}")
    a = b(f"call {d} {b.intrinsic('fabs')}({d} {x})")
    a = b(f"call {d} {b.intrinsic('minnum', 2)}({d} {a}, {d} {b.c(30.0)})")
    a2 = b(f"fmul {d} {a}, {a}")
    if f64:
        h = b(f"and {it} {b(f'bitcast {d} {a} to {it}')}, {b.i(-(1 << 27))}")
        h = b(f"bitcast {it} {h} to {d}")
        h2 = b(f"fmul {d} {h}, {h}")
        low = b(f"fmul {d} {b(f'fsub {d} {a}, {h}')}, {b(f'fadd {d} {a}, {h}')}")
        g_hi = b(f"call {d} {exp}({d} {b(f'fneg {d} {h2}')})")
        g_lo = b(f"call {d} {exp}({d} {b(f'fneg {d} {low}')})")
        g = b(f"fmul {d} {g_hi}, {g_lo}")
    else:
        g = b(f"call {d} {exp}({d} {b(f'fneg {d} {a2}')})")
    series = b.c(1.0)
    for n in range(series_terms, 0, -1):
        term = b(f"fmul {d} {a2}, {b.c(2 / (2 * n + 1))}")
        series = b.fma(series, term, b.c(1.0))
    erf = b(f"fmul {d} {b(f'fmul {d} {a}, {b.c(2 / math.sqrt(math.pi))}')}, {g}")
    near = b(f"fsub {d} {b.c(1.0)}, {b(f'fmul {d} {erf}, {series}')}")
    t = b(f"call {d} {b.intrinsic('maxnum', 2)}({d} {a}, {d} {b.c(split)})")
    if f64:
        frac = t
        for k in range(terms, 0, -1):
            frac = b(f"fadd {d} {t}, {b(f'fdiv {d} {b.c(k / 2)}, {frac}')}")
    else:  # the convergent A / B: A_k = t A_(k-1) + (k/2) A_(k-2), B likewise
        a_prev, a_now, b_prev, b_now = b.c(1.0), t, b.c(0.0), b.c(1.0)
        for k in range(1, terms + 1):
            a_prev, a_now = a_now, b.fma(t, a_now, b(f"fmul {d} {b.c(k / 2)}, {a_prev}"))
            b_prev, b_now = b_now, b.fma(t, b_now, b(f"fmul {d} {b.c(k / 2)}, {b_prev}"))
        frac = b(f"fdiv {d} {a_now}, {b_now}")
    far = b(f"fdiv {d} {g}, {b(f'fmul {d} {frac}, {b.c(math.sqrt(math.pi))}')}")
    below = b(f"fcmp olt {d} {a}, {b.c(split)}")
    v = b(f"select {bt} {below}, {d} {near}, {d} {far}")
    neg = b(f"fcmp olt {d} {x}, {b.c(0.0)}")
    v = b(f"select {bt} {neg}, {d} {b(f'fsub {d} {b.c(2.0)}, {v}')}, {d} {v}")
    nan = b(f"fcmp uno {d} {x}, {x}")
    v = b(f"select {bt} {nan}, {d} {x}, {d} {v}")
    if not f64:
        v = b(f"fptrunc {d} {v} to {b.arg_ty}")
    b.ty = b.arg_ty
    return _function("erfc", b, v)


def function_name(name: str, elem: str, width: int | None) -> str:
    return f"@fg_{name}_{'v' + str(width) if width else ''}{elem}"


def _function(name: str, b: _Builder, result: str) -> tuple[str, set[str]]:
    body = "\n".join(b.lines)
    ty = b.ty
    elem = ty.split(" ")[-1].rstrip(">")
    fn = function_name(name, elem, b.width)
    text = (
        f"define internal {ty} {fn}({ty} %x) alwaysinline nounwind {{\n"
        f"{body}\n  ret {ty} {result}\n}}\n"
    )
    return text, b.decls


FMOD_EXACT_BELOW = 2.0**52  # quotients |a / b| the fast path of `_fmod` is exact for


@_polynomial
def _fmod(elem: str, width: int | None) -> tuple[str, set[str]]:
    """C's fmod(x, y) (the `FMOD` primitive): exact at every ratio of x to y.

    Vectorized in double: q = trunc(x / y), and x - q y carried exactly (the product as
    two doubles, its error by an FMA), then the one-off quotient (x / y rounded across an
    integer) corrected; exact while |x / y| < FMOD_EXACT_BELOW and y is finite. Lanes
    beyond that (a huge ratio, an infinity, a zero divisor, a NaN) take `frem`, the C
    library's fmod lane by lane: only in a vector that has one. The result's zero has
    x's sign; float32 is computed in double and rounded back, exactly (fmod's result is
    a float32)."""
    ty, dty = vector_type(elem, width), vector_type("double", width)
    ity, bty = vector_type("i64", width), vector_type("i1", width)
    f64 = intrinsic_suffix(dty)
    splat = (
        (lambda v: f"splat (double {fconst(v, 'double')})")
        if width
        else (lambda v: fconst(v, "double"))
    )
    decls = {
        f"declare {dty} @llvm.{name}.{f64}({', '.join([dty] * n)})"
        for name, n in (("trunc", 1), ("fabs", 1), ("copysign", 2), ("fma", 3))
    }
    widen = (lambda v, n: f"  %{n} = fpext {ty} {v} to {dty}") if elem != "double" else None
    lines = []
    if widen:
        lines += [widen("%x", "X"), widen("%y", "Y")]
    X, Y = ("%X", "%Y") if widen else ("%x", "%y")
    lines += [
        f"  %d = fdiv {dty} {X}, {Y}",
        f"  %q = call {dty} @llvm.trunc.{f64}({dty} %d)",
        f"  %p = fmul {dty} %q, {Y}",
        f"  %np = fneg {dty} %p",
        f"  %e = call {dty} @llvm.fma.{f64}({dty} %q, {dty} {Y}, {dty} %np)",
        f"  %xp = fsub {dty} {X}, %p",
        f"  %r0 = fsub {dty} %xp, %e",
        f"  %ay = call {dty} @llvm.fabs.{f64}({dty} {Y})",
        f"  %sy = call {dty} @llvm.copysign.{f64}({dty} %ay, {dty} {X})",
        # the quotient one too far: r's sign is not x's
        f"  %ri = bitcast {dty} %r0 to {ity}",
        f"  %xi = bitcast {dty} {X} to {ity}",
        f"  %rx = xor {ity} %ri, %xi",
        f"  %flip = icmp slt {ity} %rx, {'zeroinitializer' if width else '0'}",
        f"  %nz = fcmp one {dty} %r0, {'zeroinitializer' if width else '0.0'}",
        f"  %over = and {bty} %flip, %nz",
        f"  %r0a = fadd {dty} %r0, %sy",
        f"  %r1 = select {bty} %over, {dty} %r0a, {dty} %r0",
        # ... or one short: |r| still >= |y|
        f"  %ar1 = call {dty} @llvm.fabs.{f64}({dty} %r1)",
        f"  %under = fcmp oge {dty} %ar1, %ay",
        f"  %r1s = fsub {dty} %r1, %sy",
        f"  %r2 = select {bty} %under, {dty} %r1s, {dty} %r1",
        # a zero takes x's sign
        f"  %z = fcmp oeq {dty} %r2, {'zeroinitializer' if width else '0.0'}",
        f"  %zs = call {dty} @llvm.copysign.{f64}({dty} %r2, {dty} {X})",
        f"  %r3 = select {bty} %z, {dty} %zs, {dty} %r2",
        # (float32: rounded back exactly; double: the same value, + -0.0 keeps a zero's sign)
        f"  %fast = fptrunc {dty} %r3 to {ty}"
        if widen
        else f"  %fast = fadd {dty} %r3, {splat(-0.0)}",
        # lanes the fast path is exact for: |q| below the bound (not NaN), y finite
        f"  %aq = call {dty} @llvm.fabs.{f64}({dty} %q)",
        f"  %qok = fcmp olt {dty} %aq, {splat(FMOD_EXACT_BELOW)}",
        f"  %yok = fcmp olt {dty} %ay, {splat(math.inf)}",
        f"  %ok = and {bty} %qok, %yok",
        f"  %need = xor {bty} %ok, {'splat (i1 true)' if width else 'true'}",
    ]
    b = _Builder(elem, width)
    b.lines = lines
    b.decls = decls
    return _rare_lanes("fmod", b, "%fast", "%need", "frem", ("%x", "%y"))


def _rare_lanes(name, b: _Builder, fast: str, need: str, rare: str, args=("%x",)):
    """The function `name` of `args` (of type `b.ty`): `fast` computed for every lane by
    `b.lines`, and where a lane of `need` is set, `rare` for those lanes: an LLVM
    instruction ("frem") or intrinsic ("@llvm.sin") that lowers to the C library's function,
    lane by lane, in a function of its own, never inlined (it cannot trap, so LLVM would
    otherwise run it on every lane, always). The scalar form is called, not inlined
    (`MathFn.branches`: a branch inlined into a kernel's scalar loop keeps LLVM from
    vectorizing it); the vector forms are inlined where called."""
    ty, bty, width = b.ty, b.bty, b.width
    fn = function_name(name, ty.split(" ")[-1].rstrip(">"), width)
    rare_fn = fn.replace(f"@fg_{name}_", f"@fg_{name}_rare_")
    params = ", ".join(f"{ty} {a}" for a in args)
    if rare.startswith("@llvm."):
        intrinsic = f"{rare}.{intrinsic_suffix(ty)}"
        b.decls.add(f"declare {ty} {intrinsic}({', '.join([ty] * len(args))})")
        body = f"  %r = call {ty} {intrinsic}({params})"
    else:
        body = f"  %r = {rare} {ty} {', '.join(args)}"
    if width:
        reduce = f"@llvm.vector.reduce.or.{intrinsic_suffix(bty)}"
        b.decls.add(f"declare i1 {reduce}({bty})")
        b.lines.append(f"  %any = call i1 {reduce}({bty} {need})")
    else:
        b.lines.append(f"  %any = or i1 {need}, false")
    inline = "alwaysinline" if width else "noinline"
    text = (
        f"define internal {ty} {rare_fn}({params}) noinline nounwind {{\n"
        f"{body}\n  ret {ty} %r\n}}\n"
        f"define internal {ty} {fn}({params}) {inline} nounwind {{\n"
        "entry:\n" + "\n".join(b.lines) + "\n"
        f"  br i1 %any, label %rare, label %done, {_RARE}\n"
        "rare:\n"
        f"  %s = call {ty} {rare_fn}({params})\n"
        f"  %mixed = select {bty} {need}, {ty} %s, {ty} {fast}\n"
        "  br label %done\n"
        "done:\n"
        f"  %res = phi {ty} [{fast}, %entry], [%mixed, %rare]\n"
        f"  ret {ty} %res\n}}\n"
    )
    return text, b.decls


_RARE = '!prof !{!"branch_weights", i32 1, i32 1000000}'  # a branch almost never taken
# lanes of the vector forms a branching function has for LLVM's loop vectorizer, per type
_VARIANT_LANES = {"float": (4, 8, 16), "double": (2, 4, 8)}


def vector_variants(name: str, elem: str, nargs: int) -> list[tuple[int, str]]:
    """(lanes, mangled name) of each vector form of the scalar function `name` on `elem`,
    in the vector-function ABI's spelling, by which a call of the scalar form names them
    (`"vector-function-abi-variant"`): LLVM's loop vectorizer then calls the form of its
    width instead of calling the scalar one lane by lane.

    >>> vector_variants("fmod", "double", 2)[0]
    (2, '_ZGV_LLVM_N2vv_fg_fmod_double(fg_fmod_v2double)')
    """
    scalar = function_name(name, elem, None)[1:]
    return [
        (w, f"_ZGV_LLVM_N{w}{'v' * nargs}_{scalar}({function_name(name, elem, w)[1:]})")
        for w in _VARIANT_LANES[elem]
    ]


# the functions `vector_variants` names forms of
_BRANCHING = {"fmod"} | {m.name for m in MATH.values() if m.branches}


def math_functions(used: set[tuple[str, str, int | None]]) -> tuple[str, set[str]]:
    """IR text for the (function, element type, width) triples a module calls, and the
    declarations of the intrinsics they use."""
    texts, decls = [], set()
    used = used | {(f, "double", w) for name, _, w in used for f in _CALLS.get(name, ())}
    for name, elem, width in sorted(used, key=str):
        text, d = _GENERATORS[name](elem, width)
        texts.append(text)
        decls |= d
    # the vector forms only LLVM's vectorizer calls, kept until it has run; and the scalar
    # form, whose arguments interprocedural passes must leave as they are (a constant
    # divisor propagated into it would leave no call that its vector forms match)
    kept = sorted(
        function_name(name, elem, width) for name, elem, width in used if name in _BRANCHING
    )
    if kept:
        texts.append(
            f"@llvm.compiler.used = appending global [{len(kept)} x ptr] "
            f'[{", ".join(f"ptr {f}" for f in kept)}], section "llvm.metadata"'
        )
    return "\n".join(texts), decls
