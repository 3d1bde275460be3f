"""Elementwise math beyond the primitives: rounding, division modes, inverse trig, erf, ...

Each function is a composition of the IR's primitives (`exp log sin sqrt recip`,
`+ * / max`, comparisons, `where`, casts). Where the textbook formula loses
accuracy the composition says how it avoids that, and the accuracy reached is
tested against numpy over wide ranges (tests/frontend/test_mathops.py states
the tolerance for each). Functions whose derivation through the composition
would be poor (log1p, erf, atan, ...) carry their own gradient rule
(`ir.autodiff.with_vjp`).

Float32 inputs of the transcendental functions here are computed in float64
and rounded once, so they are within one float32 ulp of the exact value.

>>> import fusegrad as fg
>>> x = fg.tensor([-1.5, -0.5, 0.5, 2.5])
>>> x.floor().tolist(), x.round().tolist()
([-2.0, -1.0, 0.0, 2.0], [-2.0, -0.0, 0.0, 2.0])
>>> (fg.tensor([7, -7]) // 2).tolist(), (fg.tensor([7, -7]) % 3).tolist()
([3, -4], [1, 2])
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np

from .autocast import autocast_op, has_policy
from .errors import ArgumentError, DTypeError, DTypeNotImplementedError, ShapeError, fail
from .extend import custom_gradient
from .ir import node as N
from .ir.autodiff import own_node, with_vjp, without_derivative
from .ir.dtypes import bool_, float32, float64, int32, int64, promote_scalar
from .ir.ops import MATH, MOVEMENT, Ops
from .runtime.engine import engine
from .tensor_base import (
    TensorBase,
    as_macro,
    as_tensor_like,
    broadcast_shapes,
    promote_tensors,
    where,
)
from .versions import retire

LN2 = math.log(2.0)


def _where(c, a, b):
    return where(c, a, b)


def _tensor(x, op: str, *others):
    """`x` as a tensor: itself, or `fg.tensor(x)` of the class of a tensor among `others`
    (the op's other arguments)."""
    if isinstance(x, TensorBase):
        return x
    for t in others:
        if isinstance(t, TensorBase):
            return as_tensor_like(x, t, op)
    return as_tensor_like(x, None, op)


def _with_grad(res, pairs):
    """`res` as a function of the tensors in `pairs`, with the gradient rule
    out' = sum of d * x' over (x, d). `res` must be computed from those tensors (not
    detached copies): autodiff only visits nodes from which they can be reached."""
    xs = [x for x, _ in pairs]
    out = xs[0]._make(res.node, *xs[1:])
    if not out.requires_grad:
        return out
    node = out.node
    if node.op in MOVEMENT or node.op is Ops.CONST:
        node = N.contiguous(node, "an op with its own gradient rule")
        out = xs[0]._make(node, *xs[1:])
    # a zero gradient is zeros, as torch's: not 0 * g (NaN where g is inf), and not none
    # (torch's grad() of sign(x) is zeros, not "x was not used")
    # the nodes now, not at backward(): an in-place update (`x.acos_()`) rebinds x.node
    live = [(x.node, d.node, _is_zero(d)) for x, d in pairs if x.requires_grad]
    with_vjp(node, lambda g: [(xn, _times(g, dn, zero)) for xn, dn, zero in live])
    return out


def _times(g, d, zero: bool):
    return N.const(0, g.shape, g.dtype) if zero else N.mul(g, N.cast(d, g.dtype))


def _is_zero(d) -> bool:
    return d.node.op is Ops.CONST and d.node.arg == 0


def _zero(x):
    return x._make(N.const(0, x.shape, x.dtype))


def _flat(res, x):
    """A piecewise-constant result of x: its gradient is 0, as PyTorch's."""
    return _with_grad(res, [(x, _zero(x))])


def _f64(x):
    """Work dtype: float64 (float32 inputs are rounded once at the end)."""
    return x._float().cast(float64)


def _back(res, x):
    return res.cast(x._float().dtype)


def _odd_at_zero(res, w):
    """An odd function's value at +-0 is that zero, its sign kept (sinh(-0.0) is -0.0)."""
    return _where(w == 0, w, res)


# ---------------------------------------------------------------- classification


def isnan(x):
    """True where x is NaN (never for integers)."""
    if not x.dtype.is_float:
        return x._make(N.const(False, x.shape, bool_))
    return x != x


def isinf(x):
    if not x.dtype.is_float:
        return x._make(N.const(False, x.shape, bool_))
    return x.abs() == math.inf


def isposinf(x):
    return isinf(x) & (x > 0)


def isneginf(x):
    return isinf(x) & (x < 0)


def isfinite(x):
    if not x.dtype.is_float:
        return x._make(N.const(True, x.shape, bool_))
    return x.abs() < math.inf


def isreal(x):
    return x._make(N.const(True, x.shape, bool_))


def signbit(x):
    """True where x is negative, -0.0 included (its reciprocal is -inf)."""
    if not x.dtype.is_float:
        return x < 0
    return (x < 0) | ((x == 0) & (x.reciprocal() < 0))


def nan_to_num(x, nan: float = 0.0, posinf=None, neginf=None):
    """NaN, +inf and -inf replaced by finite numbers (by default 0, the largest, the smallest)."""
    if not x.dtype.is_float:
        return x.clone()  # (a new tensor, as torch's: a write into it leaves x)
    info = x.dtype.finfo
    posinf = float(info.max) if posinf is None else posinf
    neginf = float(info.min) if neginf is None else neginf
    out = _where(isnan(x), nan, x)
    out = _where(out == math.inf, posinf, out)
    return _where(out == -math.inf, neginf, out)


# ---------------------------------------------------------------- rounding


def _integral_limit(x) -> float:
    """Floats at or above this magnitude are integers already (2^52, 2^23)."""
    return 2.0 ** (x.dtype.finfo.nmant)


def _keep_zero_sign(out, x):
    """A zero result takes the sign of x, as numpy's floor/ceil/trunc/round do (-0.5 -> -0.0)."""
    return _where(out == 0, copysign(out, x), out)


# op -> its composed form (a function of float tensors): the expansion of the one macro node
# the op builds (`_one_node`; tensor.py registers them)
COMPOSED: dict = {}


def _one_node(kind: str, arity: int = 1):
    """Decorator: a float elementwise op written with tensor ops (30 to 300 of them, each a
    tensor to build: 0.1 to 3 ms on every call) builds one macro node instead (ir/macro.py),
    whose expansion is the function itself, built when a plan is compiled; its values and
    gradients are the function's. Of constants it folds, as before."""

    def wrap(fn):
        COMPOSED[kind] = fn

        @functools.wraps(fn)
        def one_node(*args):
            if arity == 1:
                tensors = (args[0]._float(),)
            else:
                a = _tensor(args[0], kind, args[1])
                tensors = tuple(t._float() for t in a._operands(args[1], kind))
            first = tensors[0]
            return as_macro(kind, tensors, (), first.shape, first.dtype, fn)

        return one_node

    return wrap


def _refuse_bool(x, op: str) -> None:
    if x.dtype.is_bool:
        fail(DTypeNotImplementedError, op, "not implemented for bool (as in PyTorch)")


def trunc(x):
    """Round toward zero: exact for every float (large ones, inf and NaN pass through)."""
    return _rounding("trunc", x)


def floor(x):
    """The largest integer <= x (exact; -0.0, inf and NaN pass through)."""
    return _rounding("floor", x)


def ceil(x):
    return _rounding("ceil", x)


def round_(x, decimals: int = 0):
    """Round half to even, as torch.round; `decimals` scales by 10^decimals first."""
    if decimals and not x.dtype.is_bool and x.dtype.is_float:
        scale = 10.0**decimals
        return round_(x * scale) / scale
    return _rounding("round", x)


def _rounding(kind: str, x):
    """trunc, floor, ceil or round of `x`: a new tensor of its values for an integer tensor
    (as torch's, a write into it leaves x); for a float one macro node whose expansion is
    its composed form (20 to 90 nodes, each a tensor to build on every call otherwise)."""
    _refuse_bool(x, kind)
    if not x.dtype.is_float:
        return x.clone()
    return as_macro(kind, (x,), (), x.shape, x.dtype, COMPOSED[kind])


def _trunc(x):
    big = x.abs() < _integral_limit(x)  # false for inf and NaN too
    safe = _where(big, x, 0)
    # (below 2^23 a float32's integer part fits an int32, whose conversions the CPU's vector
    # units have; float64's 2^52 needs int64, converted lane by lane without AVX-512)
    t = safe.cast(int32 if _integral_limit(x) < 2.0**31 else int64).cast(x.dtype)
    return _flat(_keep_zero_sign(_where(big, t, x), x), x)


def _floor(x):
    t, w = _trunc(x), x
    return _flat(_keep_zero_sign(t - (t > w).cast(x.dtype), w), x)


def _ceil(x):
    t, w = _trunc(x), x
    return _flat(_keep_zero_sign(t + (t < w).cast(x.dtype), w), x)


def _round(x):
    # half to even by the arithmetic's own rounding: below 2^23 (float32; 2^52 float64),
    # x + 2^23 lands where the spacing is 1, so it rounds x to the nearest integer, ties to
    # even, and taking 2^23 off again is exact (x - 2^23 + 2^23 for a negative x)
    # (a 16-bit x in float32, whose 2^23 its registers hold; the integer result is exact
    # back in its dtype)
    big = x.abs() < _integral_limit(x)  # false for inf and NaN too
    w = x if x.dtype.itemsize >= 4 else x.cast(float32)
    limit = _integral_limit(w)
    r = _where(w < 0, (w - limit) + limit, (w + limit) - limit)
    r = r if w is x else r.cast(x.dtype)
    return _flat(_keep_zero_sign(_where(big, r, x), x), x)


COMPOSED.update(trunc=_trunc, floor=_floor, ceil=_ceil, round=_round)


def frac(x):
    """x - trunc(x), with the sign of x."""
    if not x.dtype.is_float:
        fail(DTypeError, "frac", f"not implemented for {x.dtype.name}")
    return x - trunc(x)


def sign(x):
    """-1, 0 or 1; 0 at NaN, as torch.sign (numpy's is NaN); bools are their own sign (a new
    tensor of them)."""
    if x.dtype.is_bool:
        return x.clone()
    one = x._make(N.const(1, x.shape, x.dtype))
    w = x
    out = _where(w > 0, one, _where(w < 0, -one, _zero(x)))
    return _flat(out, x) if x.dtype.is_float else out


def sgn(x):
    return sign(x)


def copysign(a, b):
    """|a| with the sign of b (-0.0 counts as negative), as a float."""
    a = _tensor(a, "copysign", b)
    a, b = a._operands(b, "copysign")
    a, b = a._float(), b._float()
    xa, xb = a, b  # (not detached: _with_grad's rule must see them under the result)
    mag = _where(signbit(xa), -xa, xa)
    out = _where(signbit(xb), -mag, mag)
    # torch's gradient: out / a, and 0 where a is 0 (b: none)
    return _with_grad(out, [(a, _where(xa == 0, 0.0, out / xa)), (b, _zero(b))])


# ---------------------------------------------------------------- division and remainders


def _split(x):
    """Veltkamp's split: x = hi + lo with each half of the mantissa (for exact products)."""
    c = float(2 ** ((x.dtype.finfo.nmant + 2) // 2) + 1)
    p = x * c
    hi = p - (p - x)
    return hi, x - hi


def _two_product_error(a, b, p):
    """e with a*b = p + e exactly, where p = fl(a*b) (Dekker)."""
    ah, al = _split(a)
    bh, bl = _split(b)
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _widening_int_cast(n) -> bool:
    """Whether node `n` casts a bool or integer to an integer type at least as wide (a 0
    stays 0 and nothing else becomes one)."""
    if n.op is not Ops.CAST:
        return False
    src = n.srcs[0].dtype
    return (
        (src.is_bool or not src.is_float)
        and not n.dtype.is_float
        and not n.dtype.is_bool
        and src.itemsize <= n.dtype.itemsize
    )


def _refuse_integer_zero_divisor(b, op: str) -> None:
    """Raise where an integer division's divisor is known to hold a 0, as torch raises
    ("ZeroDivisionError"): a constant 0 (`x // 0`) or data already on the host. A divisor
    still to be computed is not read early (that would cost a kernel of its own): its
    zeros divide to 0, the IR's integer division by zero."""
    n = b.node
    while len(n.srcs) == 1 and (n.op in MOVEMENT or _widening_int_cast(n)):
        n = n.srcs[0]  # (a promotion keeps the zeros: uint8 // int8 reads int8 as int16)
    if n.op is Ops.CONST:
        zero = n.arg == 0
    elif n.op is Ops.BUFFER and isinstance(getattr(n.arg, "array", None), np.ndarray):
        zero = n.arg.array.size > 0 and not n.arg.array.all()
    else:
        return
    if zero:
        fail(
            ArgumentError,
            op,
            f"ZeroDivisionError: integer division by zero ({b.dtype.name} divisor holds a 0, "
            "as torch raises); divide floats, or mask the zeros first",
        )


def fmod(a, b):
    """The remainder of a / b with the sign of a (C's fmod).

    Integers: exact (a - trunc(a / b) * b; a divisor known to hold a 0 raises, as
    PyTorch's does; one still lazy gives 0 there, as the IR's integer division does).
    Floats: exact at every ratio of a to b, as C's fmod (the `FMOD` primitive: the CPU's
    `frem`, CUDA's `fmod`; 16-bit floats through float32, which holds their remainder).

    >>> import fusegrad as fg
    >>> x = fg.tensor([-7.0, 7.0])
    >>> fg.fmod(x, 3).tolist(), fg.remainder(x, 3).tolist()
    ([-1.0, 1.0], [2.0, 1.0])
    >>> fg.fmod(fg.tensor([1.0]), 1e-38).item() < 1e-38  # a ratio of 1e38: still exact
    True
    """
    a = _tensor(a, "fmod", b)
    a, b = a._operands(b, "fmod")
    if a.dtype.is_bool:
        fail(DTypeError, "fmod", "not supported on bool tensors")
    if not a.dtype.is_float:
        _refuse_integer_zero_divisor(b, "fmod")
        return a - a._binary(Ops.DIV, b, "fmod") * b
    return as_macro("fmod", (a, b), (), a.shape, a.dtype, _float_fmod)


def _float_fmod(a, b):
    """fmod of floats, the `FMOD` primitive; torch's gradients: 1 and -trunc(a / b)."""
    work = a.dtype if a.dtype.itemsize >= 4 else float32
    x, y = a.cast(work), b.cast(work)
    r = x._binary(Ops.FMOD, y, "fmod")
    one = a._make(N.const(1, a.shape, a.dtype))
    return _with_grad(_back(r, a), [(a, one), (b, -_back(_trunc(x / y), a))])


def remainder(a, b):
    """Python's %: the remainder of floor division, with the sign of b."""
    a = _tensor(a, "remainder", b)
    a, b = a._operands(b, "remainder")
    if not a.dtype.is_float:
        r = fmod(a, b)
        return _where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
    return as_macro("remainder", (a, b), (), a.shape, a.dtype, _float_remainder)


def _float_remainder(a, b):
    """Python's % of floats, composed; torch's gradients: 1 and -floor(a / b)."""
    xa, xb = a, b
    r = _float_fmod(xa, xb)
    r = _where((r != 0) & ((r < 0) != (xb < 0)), r + xb, r)
    one = a._make(N.const(1, a.shape, a.dtype))
    return _with_grad(r, [(a, one), (b, -_float_floor_divide(xa, xb))])


def floor_divide(a, b):
    """a // b: floor division (numpy's divmod rule for floats).

    As in PyTorch it has no derivative: backward() through it raises, at that line
    (`div(a, b, rounding_mode="floor")` is the same value with gradient 0).
    """
    return _no_derivative(
        _floor_divide(a, b),
        "floor_divide",
        "derivative for floor_divide is not implemented (as in PyTorch); for a gradient "
        "of 0 use div(a, b, rounding_mode='floor'), or detach() the operands",
    )


def _no_derivative(out, op: str, message: str):
    """`out` as is where nothing requires grad; else a node whose backward() raises
    `message` at the user's line, as PyTorch's ops without a derivative do."""
    if not out.requires_grad:
        return out

    def rule():
        fail(ArgumentError, op, message)

    return out._make(without_derivative(own_node(out.node), rule))


def _floor_divide(a, b):
    """floor_divide with gradient 0 (that of div(rounding_mode='floor'), as torch's)."""
    a = _tensor(a, "floor_divide", b)
    a, b = a._operands(b, "floor_divide")
    if a.dtype.is_bool:
        fail(DTypeError, "floor_divide", "not supported on bool tensors")
    if not a.dtype.is_float:
        _refuse_integer_zero_divisor(b, "floor_divide")
        q = a._binary(Ops.DIV, b, "floor_divide")
        fix = (q * b != a) & ((a < 0) != (b < 0))
        return _where(fix, q - 1, q)
    return as_macro("floor_divide", (a, b), (), a.shape, a.dtype, _float_floor_divide)


def _float_floor_divide(a, b):
    """Floating floor division as numpy's divmod rounds it, from fmod; gradient 0."""
    mod = fmod(a, b)
    div = (a - mod) / b
    div = _where((mod != 0) & ((b < 0) != (mod < 0)), div - 1, div)
    fd = _floor(div)
    fd = _where(div - fd > 0.5, fd + 1, fd)
    fd = _where(div == 0, copysign(fd * 0, a / b), fd)
    return _with_grad(_where(b == 0, a / b, fd), [(a, _zero(a)), (b, _zero(b))])


COMPOSED.update(floor_divide=_float_floor_divide, fmod=_float_fmod, remainder=_float_remainder)


def div(a, b, rounding_mode=None):
    """a / b; rounding_mode 'trunc' or 'floor' rounds the quotient (integers stay integers)."""
    a = _tensor(a, "div", b)
    if rounding_mode is None:
        return a / b
    if rounding_mode == "floor":
        return _floor_divide(a, b)
    if rounding_mode == "trunc":
        x, y = a._operands(b, "div")
        if not x.dtype.is_float:
            _refuse_integer_zero_divisor(y, "div")
            return x._binary(Ops.DIV, y, "div")
        # a step function of both: its gradient is 0 (not 0 * the quotient's: NaN at y = 0)
        return _with_grad(trunc(x / y), [(x, _zero(x)), (y, _zero(y))])
    fail(
        ShapeError,
        "div",
        f"rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}",
    )


# ---------------------------------------------------------------- exponentials and logarithms


@autocast_op("log1p")
@_one_node("log1p")
def log1p(x):
    """log(1 + x), accurate for tiny x: log(u) * x / (u - 1) with u = 1 + x (Goldberg).

    >>> import fusegrad as fg
    >>> f"{fg.tensor([1e-10], dtype=fg.float64).log1p().item():.12e}"  # log(1 + x): 1.00000008e-10
    '9.999999999500e-11'
    """
    xf = x._float()
    w = _f64(xf)
    u = 1 + w
    res = _where(u == 1, w, u.log() * w / (u - 1))
    # from 2^53 on u is x itself and log(u) the answer (log(u) * x / (u - 1) would overflow)
    res = _where(u >= 2.0**53, u.log(), res)
    out = _back(res, xf)
    return _with_grad(out, [(xf, 1 / (1 + xf))])


@autocast_op("expm1")
@_one_node("expm1")
def expm1(x):
    """e^x - 1, accurate for tiny x: (u - 1) * x / log(u) with u = e^x (Kahan). A float32
    (or 16-bit) x: its Taylor polynomial to x^7 below 1/32 (relative error 2e-17), e^x - 1
    in double above (at most 1e-14 of it): no logarithm, no division."""
    xf = x._float()
    w = _f64(xf)
    if xf.dtype is not float64:
        p = 1 / 5040
        for k in (720, 120, 24, 6, 2, 1):
            p = 1 / k + w * p
        res = _where(w.abs() < 1 / 32, w * p, w.exp() - 1)
        return _with_grad(_back(res, xf), [(xf, xf.exp())])
    u = w.exp()
    res = _where(u == 1, w, (u - 1) * w / u.log())
    res = _where(u - 1 == -1, -1.0, res)
    res = _where(u == math.inf, u, res)
    out = _back(res, xf)
    return _with_grad(out, [(xf, xf.exp())])


def logit(x, eps=None):
    """log(z / (1 - z)), z = x clamped to [eps, 1 - eps] (no clamp for eps None or negative),
    as torch.logit: -inf at 0, inf at 1, NaN outside [0, 1] unclamped. The gradient is
    torch's: 1 / (x (1 - x)), inf at 0 and 1, NaN outside [0, 1] without eps, 0 outside
    [eps, 1 - eps] with it (the bounds are eps and 1 - eps in x's dtype, as torch's).

    >>> import fusegrad as fg
    >>> fg.tensor([0.0, 0.5, 0.75, 1.0]).logit().tolist()
    [-inf, 0.0, 1.0986123085021973, inf]
    >>> fg.logit(fg.tensor([0.0, 0.5, 1.0]), eps=0.25).tolist()
    [-1.0986123085021973, 0.0, 1.0986123085021973]
    """
    xf = x._float()
    clamped = eps is not None and not eps < 0  # (a NaN eps clamps to NaN bounds: nothing)
    if clamped:
        lo = xf._make(N.const(eps, (), xf.dtype))
        hi = 1 - lo
        z = _where(xf < lo, lo, _where(xf > hi, hi, xf))
    else:
        z = xf
    w = _f64(z)
    res = _back((w / (1 - w)).log(), xf)
    if not xf.requires_grad:
        return res

    def rule(g, x):
        at_end = (x == 0) | (x == 1)
        inside = _where(at_end, g * math.inf, g / (x * (1 - x)))
        if clamped:
            return [_where((x < lo) | (x > hi), 0.0, inside)]
        return [_where((x < 0) | (x > 1), math.nan, inside)]

    return custom_gradient(res, [xf], rule, own_node=True)


# the Taylor series of d/du sin(u) / u = sum over n >= 1 of (-1)^n 2n u^(2n - 1) / (2n + 1)!
_SINC_SLOPE = [(-1) ** n * 2 * n / math.factorial(2 * n + 1) for n in range(1, 10)]


def _sinc_slope(u):
    """d/du sin(u) / u = (u cos u - sin u) / u^2: its series for |u| < 1/2, where that
    difference cancels (torch's formula gives rounding noise there: -2.1e-8 at x = 1e-8,
    where the slope is -3.3e-8)."""
    u2 = u * u
    series = 0.0
    for c in reversed(_SINC_SLOPE):
        series = series * u2 + c
    return _where(u.abs() < 0.5, series * u, (u * u.cos() - u.sin()) / u2)


def sinc(x):
    """sin(pi x) / (pi x), and 1 at x = 0, as torch.sinc (NaN at +-inf). The gradient is
    torch's, (pi x cos(pi x) - sin(pi x)) / (pi x^2), 0 at x = 0; near 0 it is computed
    from its series (torch's formula cancels there: docs/NUMERICS.md).

    >>> import fusegrad as fg
    >>> fg.tensor([0.0, 0.5, 1.5], dtype=fg.float64).sinc().tolist()
    [1.0, 0.6366197723675814, -0.2122065907891938]
    """
    xf = x._float()
    w = _f64(xf)
    u = w * math.pi
    out = _back(_where(w == 0, 1.0, u.sin() / u), xf)
    slope = _back(_where(w == 0, 0.0, _sinc_slope(u) * math.pi), xf)
    return _with_grad(out, [(xf, slope)])


@autocast_op("log2")
def log2(x):
    xf = x._float()
    out = _back(_f64(xf).log() * (1 / LN2), xf)
    return _with_grad(out, [(xf, 1 / (xf * LN2))])


@autocast_op("log10")
def log10(x):
    xf = x._float()
    out = _back(_f64(xf).log() * (1 / math.log(10.0)), xf)
    return _with_grad(out, [(xf, 1 / (xf * math.log(10.0)))])


def _pow2_int(n):
    """2^n exactly for integer-valued float64 n in [-1023, 1023]: a product of 2^(+-2^k)."""
    a = n.abs()
    out = None
    for k in range(10):
        bit = (floor(a * 2.0**-k) - 2 * floor(a * 2.0 ** -(k + 1))) == 1
        up = n._make(N.const(2.0 ** (2**k), (), n.dtype))
        factor = _where(n < 0, 2.0 ** -(2**k), up)
        term = _where(bit, factor, 1.0)
        out = term if out is None else out * term
    return out


@_one_node("exp2")
def exp2(x):
    """2^x = 2^n * e^(f ln 2) with n = round(x): 2^n is exact, so the error is e^'s alone
    (float64); a float32 x: e^(x ln 2) in float64, rounded once."""
    xf = x._float()
    w = _f64(xf)
    if xf.dtype is not float64:
        # a float32 (or 16-bit) result: e^(x ln 2) in float64 errs by at most |x| 2^-52 of
        # it (x ln 2 rounded) plus e^'s own, far inside the result's half ulp, so it rounds
        # as 2^x does (2^n exactly: the error stays under 2^-40 of it)
        out = _back((w * LN2).exp(), xf)
        return _with_grad(out, [(xf, out * LN2)])
    n = round_(w.clamp(-1100, 1100))
    f = w - n
    # e^(f ln2) first, so that 2^n * it underflows gradually rather than at 2^n
    small = (f * LN2).exp()
    half = floor(n * 0.5)  # two factors, so that neither overflows where 2^n is subnormal
    res = small * _pow2_int(half) * _pow2_int(n - half)
    res = _where(isnan(w), w, res)
    out = _back(res, xf)
    return _with_grad(out, [(xf, out * LN2)])


@autocast_op("logaddexp")
def logaddexp(a, b):
    """log(e^a + e^b) = max + log1p(e^-|a - b|), without overflow."""
    a = _tensor(a, "logaddexp", b)
    a, b = a._operands(b, "logaddexp")
    a, b = a._float(), b._float()
    xa, xb = a, b
    m = xa.maximum(xb)
    d = (xa - xb).abs()
    out = _where(xa == xb, xa + LN2, m + log1p((-d).exp()))
    # torch's 1 / (1 + e^(b - a)): 1/2 each at a tie
    return _with_grad(out, [(a, 1 / (1 + (xb - xa).exp())), (b, 1 / (1 + (xa - xb).exp()))])


@autocast_op("logaddexp2")
def logaddexp2(a, b):
    """log2(2^a + 2^b)."""
    a = _tensor(a, "logaddexp2", b)
    a, b = a._operands(b, "logaddexp2")
    a, b = a._float(), b._float()
    xa, xb = a, b
    out = logaddexp(xa * LN2, xb * LN2) / LN2
    return _with_grad(out, [(a, 1 / (1 + exp2(xb - xa))), (b, 1 / (1 + exp2(xa - xb)))])


def _erfc_fraction(t):
    """sqrt(pi) times the continued fraction t + (1/2) / (t + 1 / (t + (3/2) / ...)) (60
    terms), for t >= 2: erfc(t) = e^(-t^2) / it (`erf`, and erfcx = 1 / it)."""
    f = t
    for k in range(60, 0, -1):
        f = t + (k / 2) / f
    return math.sqrt(math.pi) * f


def _erfc_convergent(t, terms: int):
    """`_erfc_fraction(t)` to `terms` terms, as its convergent A / B (Wallis: A_k = t A_(k-1) +
    (k/2) A_(k-2), B likewise), one division where the fraction takes one a term; every
    term positive, so no cancellation, and finite for t <= 8 and a few dozen terms."""
    a_prev, a_now = 1.0, t
    b_prev, b_now = 0.0, 1.0
    for k in range(1, terms + 1):
        a_prev, a_now = a_now, t * a_now + (k / 2) * a_prev
        b_prev, b_now = b_now, t * b_now + (k / 2) * b_prev
    return math.sqrt(math.pi) * (a_now / b_now)


# erf of a float32 (or 16-bit) value, computed in float64 to within 1e-9 of it, enough for
# the result rounded to float32 (its ulp at least 6e-8 of it): 22 terms of the series to
# 2 (relative error 2.5e-11 at 2) and 12 of the continued fraction from 2 (absolute error
# 1.2e-9 at 2, less beyond), where float64 takes 40 and 60
ERF_SERIES_FLOAT32, ERF_FRACTION_FLOAT32 = 22, 12
# erfc's convergent to a relative 1e-9 from 2 on (erfinv's Newton steps on log erfc), and
# the steps a float32 erfinv takes from Giles's start (one: within 1 ulp of the float64
# path on 8.9M points, as two are)
ERFC_FRACTION_FLOAT32, ERFINV_STEPS_FLOAT32 = 20, 1


def _erf_series32(a):
    """2/sqrt(pi) a e^-a^2 times erf's series (`erf`), for float64 a in [0, 2], to float32's
    need: relative error 2.5e-11 (ERF_SERIES_FLOAT32 terms, each factor a product)."""
    x2 = a * a
    s = 1.0
    for n in range(ERF_SERIES_FLOAT32, 0, -1):
        s = 1 + s * (x2 * (2 / (2 * n + 1)))
    return (2 / math.sqrt(math.pi)) * a * (-x2).exp() * s


def _erfc_tail32(a, terms: int = ERF_FRACTION_FLOAT32):
    """erfc(t) for float64 t = a clamped to [2, 8] from its convergent (`_erfc_convergent`):
    absolute error 1.2e-9 at 2 with the 12 terms erf needs; erfc's own relative accuracy
    needs about 20 (5e-12 at 2)."""
    t = a.maximum(2.0).minimum(8.0)
    return (-t * t).exp() / _erfc_convergent(t, terms)


@_one_node("erf")
def erf(x):
    """The error function, within 5 float64 ulps (1 float32 ulp).

    |x| < 2: 2/sqrt(pi) x e^-x^2 sum (2x^2)^n / (1*3*...*(2n+1)), all terms positive (no
    cancellation); |x| >= 2: 1 - erfc with erfc from its continued fraction (60 terms). A
    float32 (or 16-bit) x takes the terms its rounded result needs (`_erf_series32`,
    `_erfc_tail32`), still in float64, the series' factors as products and the fraction as
    one convergent: one division, where float64 takes 101 (erf is 1 in float32 from 3.92
    on, so the fraction's argument stops at 8).

    >>> import fusegrad as fg
    >>> round(fg.tensor([0.5]).erf().item(), 6)
    0.5205
    """
    xf = x._float()
    w = _f64(xf)
    a = w.abs()
    if xf.dtype is float64:
        x2 = a * a
        s = 1.0
        for n in range(40, 0, -1):
            s = 1 + s * (2 * x2 / (2 * n + 1))
        small = (2 / math.sqrt(math.pi)) * a * (-x2).exp() * s
        t = a.maximum(2.0)
        big = 1 - (-t * t).exp() / _erfc_fraction(t)
    else:
        small, big = _erf_series32(a), 1 - _erfc_tail32(a)
    mag = _where(a < 2, small, _where(a == math.inf, 1.0, big))
    res = _where(w < 0, -mag, mag)
    res = _where(isnan(w), w, _odd_at_zero(res, w))
    out = _back(res, xf)
    return _with_grad(out, [(xf, (2 / math.sqrt(math.pi)) * (-xf * xf).exp())])


# ---------------------------------------------------------------- trigonometry


def _atan_reduced(t):
    """atan for 0 <= t <= 1 (float64): reduce past tan(pi/12) with atan(t) = pi/6 +
    atan((t sqrt3 - 1) / (sqrt3 + t)), then the Taylor series to t^41 (|t| <= 0.268)."""
    s3 = math.sqrt(3.0)
    far = t > 2 - s3
    r = _where(far, (t * s3 - 1) / (s3 + t), t)
    r2 = r * r
    p = 0.0
    for n in range(20, -1, -1):
        p = (-1) ** n / (2 * n + 1) + r2 * p
    return _where(far, math.pi / 6 + r * p, r * p)


def _atan64(w):
    a = w.abs()
    inv = a > 1
    t = _where(inv, 1 / a, a)
    base = _atan_reduced(t)
    mag = _where(inv, math.pi / 2 - base, base)
    res = _where(w < 0, -mag, mag)
    return _where(isnan(w), w, res)


@_one_node("atan")
def atan(x):
    """Arctangent, within 2 float64 ulps: 1/x reflection, then a pi/6 shift, then a series."""
    xf = x._float()
    w = _f64(xf)
    out = _back(_odd_at_zero(_atan64(w), w), xf)
    return _with_grad(out, [(xf, 1 / (1 + xf * xf))])


def _atan2_64(y, x):
    ay, ax = y.abs(), x.abs()
    swap = ay > ax
    t = _where(swap, ax / ay, ay / ax)
    t = _where((ax == math.inf) & (ay == math.inf), 1.0, t)
    t = _where((ax == 0) & (ay == 0), 0.0, t)
    base = _atan_reduced(t)
    a = _where(swap, math.pi / 2 - base, base)
    a = _where(signbit(x), math.pi - a, a)
    res = _where(signbit(y), -a, a)
    return _where(isnan(x) | isnan(y), x + y, res)


@autocast_op("atan2")
@_one_node("atan2", arity=2)
def atan2(y, x):
    """The angle of (x, y) in (-pi, pi], signed zeros and infinities as numpy's arctan2.
    >>> import fusegrad as fg
    >>> fg.atan2(fg.tensor([1.0, -1.0]), fg.tensor([-1.0, -1.0])).tolist()
    [2.356194496154785, -2.356194496154785]
    """
    y = _tensor(y, "atan2", x)
    y, x = y._operands(x, "atan2")
    y, x = y._float(), x._float()
    res = _back(_atan2_64(_f64(y), _f64(x)), y)
    r2 = x * x + y * y
    # torch's x / r2 and -y / r2, and 0 at the origin, where both are 0 / 0
    at_0 = r2 == 0
    return _with_grad(res, [(y, _where(at_0, 0.0, x / r2)), (x, _where(at_0, 0.0, -y / r2))])


arctan2 = atan2


@_one_node("hypot", arity=2)
def hypot(a, b):
    """sqrt(a^2 + b^2) without overflow or underflow: inf where either is inf (a NaN beside
    it too), as torch.hypot; the gradient is a / hypot and b / hypot (NaN at (0, 0), as
    torch's).

    >>> import fusegrad as fg
    >>> fg.hypot(fg.tensor([3.0, 1e30]), fg.tensor([4.0, 1e30])).tolist()
    [5.0, 1.4142135130433894e+30]
    """
    a = _tensor(a, "hypot", b)
    a, b = a._operands(b, "hypot")
    a, b = a._float(), b._float()
    xa, xb = _f64(a).abs(), _f64(b).abs()
    big, small = xa.maximum(xb), xa.minimum(xb)
    ratio = small / _where(big == 0, 1.0, big)
    res = _where((xa == math.inf) | (xb == math.inf), math.inf, big * (1 + ratio * ratio).sqrt())
    out = _back(res, a)
    return _with_grad(out, [(a, a / out), (b, b / out)])


def xlogy(x, y):
    """x * log(y), 0 where x is 0 (NaN where y is NaN), as torch.xlogy. The gradient is
    log(y) for x (0 where x is 0 and y <= 0) and x / y for y, torch's.

    >>> import fusegrad as fg
    >>> fg.xlogy(fg.tensor([0.0, 0.0, 2.0]), fg.tensor([0.0, float("nan"), 1.0])).tolist()
    [0.0, nan, 0.0]
    """
    return _x_log(x, y, "xlogy", shift=0)


def heaviside(input, values):
    """The Heaviside step, as torch.heaviside: 0 where `input` < 0 (and at NaN), `values`
    where it is 0 (-0.0 too), 1 where it is > 0; both of one dtype, as torch refuses
    others. As in PyTorch it has no derivative: backward() through it raises.

    >>> import fusegrad as fg
    >>> fg.heaviside(fg.tensor([-1.0, 0.0, 2.0]), fg.tensor([0.5])).tolist()
    [0.0, 0.5, 1.0]
    """
    x = _tensor(input, "heaviside", values)
    v = _tensor(values, "heaviside", x)
    if x.dtype is not v.dtype:
        fail(
            DTypeError,
            "heaviside",
            "heaviside is not yet implemented for tensors with different dtypes "
            f"({x.dtype.name} and {v.dtype.name}, as PyTorch refuses them)",
        )
    step = (x > 0).cast(x.dtype)
    out = x._make(_where(x == 0, v, step).node, v)  # (from x and values, as torch's)
    return _no_derivative(out, "heaviside", "the derivative for 'heaviside' is not implemented")


def float_power(input, exponent):
    """input ** exponent in float64, as torch.float_power: both taken as float64 (tensors
    or numbers), the result float64."""
    base = _tensor(input, "float_power", exponent)
    if isinstance(exponent, TensorBase):
        exponent = exponent.cast(float64)
    elif not isinstance(exponent, (int, float)) or isinstance(exponent, bool):
        exponent = _tensor(exponent, "float_power", base).cast(float64)
    else:
        exponent = float(exponent)
    return base.cast(float64) ** exponent


def _float_power_(self, exponent):
    """`float_power` in place, as torch's: only into a float64 tensor (its result's dtype)."""
    if self.dtype is not float64:
        fail(
            DTypeError,
            "float_power_",
            f"the base given to float_power_ has dtype {self.dtype.name} but the operation's "
            "result requires dtype float64",
        )
    return self._inplace(float_power(self, exponent), "float_power_")


def ldexp(input, other):
    """input * 2 ** other, as torch.ldexp: a float input keeps its dtype (an integer one
    becomes the default float); 2 ** other is exact for integral `other` (exp2's)."""
    x = _tensor(input, "ldexp", other)
    x = x if x.dtype.is_float else x._float()
    e = _tensor(other, "ldexp", x)
    return x * exp2(e.cast(x.dtype))


def xlog1py(x, y):
    """x * log1p(y), 0 where x is 0 (NaN where y is NaN), as torch.special.xlog1py; the
    gradient is torch's: log1p(y) for x (0 where x is 0 and y <= -1), x / (1 + y) for y.

    >>> import fusegrad as fg
    >>> fg.special.xlog1py(fg.tensor([0.0, 2.0]), fg.tensor([-1.0, 0.0])).tolist()
    [0.0, 0.0]
    """
    return _x_log(x, y, "xlog1py", shift=1)


def _x_log(x, y, op: str, shift: int):
    """x * log(shift + y) (log1p for shift 1), 0 where x is 0 and NaN where y is, with
    torch's gradient rule for xlogy and xlog1py."""
    x = _tensor(x, op, y)
    x, y = x._operands(y, op)
    x, y = x._float(), y._float()

    def value(a, b):
        return _where(isnan(b), b, _where(a == 0, 0.0, a * (b.log1p() if shift else b.log())))

    def rule(g, x, y):  # torch's: xlogy(g, y), not g * log(y), so a zero g gives 0 there
        below = y + shift if shift else y  # (y + 0 would turn -0.0 into +0.0)
        return [_where((x == 0) & (y <= -shift), 0.0, value(g, y)), g * x / below]

    res = value(x, y)
    if not (x.requires_grad or y.requires_grad):
        return res
    return custom_gradient(res, [x, y], rule, own_node=True)


@autocast_op("asin")
@_one_node("asin")
def asin(x):
    """atan2(x, sqrt((1 - x)(1 + x))); NaN outside [-1, 1]."""
    xf = x._float()
    w = _f64(xf)
    res = _atan2_64(w, ((1 - w) * (1 + w)).sqrt())
    out = _back(res, xf)
    return _with_grad(out, [(xf, ((1 - xf) * (1 + xf)).rsqrt())])


@autocast_op("acos")
@_one_node("acos")
def acos(x):
    xf = x._float()
    w = _f64(xf)
    res = _atan2_64(((1 - w) * (1 + w)).sqrt(), w)
    out = _back(res, xf)
    return _with_grad(out, [(xf, -((1 - xf) * (1 + xf)).rsqrt())])


@autocast_op("tan")
@_one_node("tan")
def tan(x):
    """sin(x) / cos(x) in float64 (float32 goes through float64): the `SIN` and `COS`
    primitives reduce x by pi/2 (exactly enough below 2^50, by the C library beyond), so
    the quotient keeps their few-ulp accuracy at every magnitude, near the poles too."""
    xf = x._float()
    w = _f64(xf)
    res = w.sin() / w.cos()
    res = _where(isfinite(w), _odd_at_zero(res, w), w - w)
    out = _back(res, xf)
    return _with_grad(out, [(xf, 1 + out * out)])


def _sinh64(w):
    a = w.abs()
    e = a.exp()
    big = (e - 1 / e) * 0.5
    x2 = a * a
    p = 0.0
    for n in range(12, 0, -1):
        p = 1 + x2 / ((2 * n) * (2 * n + 1)) * p
    mag = _where(a < 1, a * p, big)
    res = _where(w < 0, -mag, mag)
    return _where(isnan(w), w, _odd_at_zero(res, w))


def _cosh64(w):
    e = w.abs().exp()
    return (e + 1 / e) * 0.5


@autocast_op("sinh")
@_one_node("sinh")
def sinh(x):
    """(e^x - e^-x) / 2, with its Taylor series for |x| < 1 where that form cancels."""
    xf = x._float()
    w = _f64(xf)
    return _with_grad(_back(_sinh64(w), xf), [(xf, _back(_cosh64(w), xf))])


@autocast_op("cosh")
@_one_node("cosh")
def cosh(x):
    xf = x._float()
    w = _f64(xf)
    return _with_grad(_back(_cosh64(w), xf), [(xf, _back(_sinh64(w), xf))])


@_one_node("asinh")
def asinh(x):
    """sign(x) log1p(|x| + x^2 / (1 + sqrt(1 + x^2))); log(2|x|) where x^2 would overflow."""
    xf = x._float()
    w = _f64(xf)
    a = w.abs()
    huge = a > 1e150
    sa = _where(huge, 1.0, a)
    mid = log1p(sa + sa * sa / (1 + (1 + sa * sa).sqrt()))
    mag = _where(huge, a.log() + LN2, mid)
    res = _where(w < 0, -mag, mag)
    res = _where(isnan(w), w, _odd_at_zero(res, w))
    out = _back(res, xf)
    return _with_grad(out, [(xf, (1 + xf * xf).rsqrt())])


def acosh(x):
    """log1p(t + sqrt(2t + t^2)) with t = x - 1; log(2x) for huge x; NaN below 1."""
    xf = x._float()
    w = _f64(xf)
    huge = w > 1e150
    t = _where(huge, 1.0, w) - 1
    mid = log1p(t + (2 * t + t * t).sqrt())
    res = _where(huge, w.log() + LN2, mid)
    # below 1, NaN: t (t + 2) is positive again under -1, where the formula gives -inf
    res = _where(w < 1, math.nan, res)
    out = _back(res, xf)
    return _with_grad(out, [(xf, (xf * xf - 1).rsqrt())])  # torch's form: +inf at -1 too


def atanh(x):
    """sign(x) log1p(2|x| / (1 - |x|)) / 2: accurate near 0 and near +-1."""
    xf = x._float()
    w = _f64(xf)
    a = w.abs()
    mag = 0.5 * log1p(2 * a / (1 - a))
    res = _where(w < 0, -mag, mag)
    res = _where(isnan(w), w, _odd_at_zero(res, w))
    out = _back(res, xf)
    return _with_grad(out, [(xf, 1 / ((1 - xf) * (1 + xf)))])


# ---------------------------------------------------------------- two-argument helpers


def clamp_tensors(x, lo, hi):
    """x.clamp(lo, hi) where a bound is a tensor: torch's values (a NaN bound gives NaN;
    hi wins where lo > hi) and gradients (x's where lo <= x <= hi; lo's where x < lo < hi;
    hi's where x > hi or hi < lo).

    >>> import fusegrad as fg
    >>> fg.tensor([0.0, 5.0]).clamp(fg.tensor([1.0, 1.0]), fg.tensor([2.0, 0.0])).tolist()
    [1.0, 0.0]
    """
    ts = [x] + [_tensor(t, "clamp", x) for t in (lo, hi) if t is not None]
    shape, dtype = x.shape, x.dtype
    for t in ts[1:]:
        shape = broadcast_shapes(shape, t.shape, "clamp")
        dtype = promote_tensors(x, t) if t.dtype is not dtype else dtype
    x, *bounds = [t.cast(dtype).expand(shape) for t in ts]
    lo = bounds.pop(0) if lo is not None else None
    hi = bounds.pop(0) if hi is not None else None
    out, pairs = x, []
    if lo is not None:  # a tie of zeros gives the bound's, as torch's
        out = _where(out > lo, out, lo)
    if hi is not None:
        out = _where(out < hi, out, hi)
    for t in (x, lo, hi):
        out = out if t is None else _where(isnan(t), t, out)
    if not dtype.is_float:
        return out

    def mask(m):
        return m.cast(dtype)

    if lo is not None and hi is not None:
        pairs = [
            (x, mask((x >= lo) & (x <= hi))),
            (lo, mask((x < lo) & (lo < hi))),
            (hi, mask((x > hi) | (hi < lo))),
        ]
    elif lo is not None:
        pairs = [(x, mask(x >= lo)), (lo, mask(x < lo))]
    else:
        pairs = [(x, mask(x <= hi)), (hi, mask(x > hi))]
    return _with_grad(out, pairs)


def lerp(start, end, weight):
    """start + weight * (end - start), PyTorch's two-sided form (exact at weight 0 and 1)."""
    start = _tensor(start, "lerp", end, weight)
    for t in (start, end):
        if isinstance(t, TensorBase) and not t.dtype.is_float:
            fail(DTypeNotImplementedError, "lerp", f"not implemented for {t.dtype.name}")
    s, e = start._operands(end, "lerp")
    w = weight
    diff = e - s
    low = s + w * diff
    high = e - diff * (1 - w)
    if not isinstance(w, TensorBase):  # a number picks its side once
        return low if abs(w) < 0.5 else high
    return _where(w.abs() < 0.5, low, high)


def isclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False):
    """|a - b| <= atol + rtol |b|, elementwise (infinities equal only themselves).

    >>> import fusegrad as fg
    >>> fg.isclose(fg.tensor([1.0, 2.0]), fg.tensor([1.0 + 1e-7, 2.1])).tolist()
    [True, False]
    """
    a = _tensor(a, "isclose", b)
    x, y = a._operands(b, "isclose")
    if x.dtype.is_bool:
        return x == y
    x, y = x._float(), y._float()
    d, lim = (x - y).abs(), atol + rtol * y.abs()
    close = (x == y) | (d < lim) | (d == lim)  # (not <=: NaN must compare false)
    close = close & ~((isinf(x) | isinf(y)) & (x != y))
    if equal_nan:
        close = close | (isnan(x) & isnan(y))
    return close


def allclose(a, b, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
    """Whether every element is close (a Python bool: the values are computed)."""
    return bool(isclose(a, b, rtol, atol, equal_nan).all().item())


def equal(a, b) -> bool:
    """Same shape and the same elements (a Python bool)."""
    b = _tensor(b, "equal", a)
    if a.shape != b.shape:
        return False
    return bool((a == b).all().item())


# ---------------------------------------------------------------- bitwise


def _check_bits(a, b, op: str):
    a = _tensor(a, op, b)
    if a.dtype.is_float or (isinstance(b, TensorBase) and b.dtype.is_float) or isinstance(b, float):
        fail(DTypeError, op, "bitwise ops need integer or bool tensors")
    return a._operands(b, op)


def _bits(x, nbits):
    """Two's complement bits of an integer tensor, lowest first, as bools.

    For x < 0 the bits are those of ~x = -x - 1 >= 0, inverted; bit k of a value u >= 0 is
    u // 2^k - 2 (u // 2^(k+1)) with truncating (here exact) division by constants.
    """
    neg = x < 0
    u = _where(neg, -x - 1, x)
    out = []
    for k in range(nbits):
        # u < 2^(nbits - 1): the quotients by larger powers (not representable) are 0
        hi = u._binary(Ops.DIV, 2 ** (k + 1), "bits") if k + 1 < nbits - 1 else u * 0
        lo = u._binary(Ops.DIV, 2**k, "bits") if 0 < k < nbits - 1 else (u if k == 0 else u * 0)
        out.append((lo - hi * 2 == 1) != neg)
    return out


def _from_bits(bits, dtype):
    acc = None
    n = len(bits)
    for k, b in enumerate(bits):
        weight = -(2 ** (n - 1)) if k == n - 1 else 2**k
        term = b * weight
        acc = term if acc is None else acc + term
    return acc.cast(dtype)


def _bool_and(p, q):
    return p._binary(Ops.MUL, q, "and")


def _bool_or(p, q):
    return p._binary(Ops.ADD, q, "or")


def _bool_xor(p, q):
    return p != q


def _bitwise(a, b, op: str, combine):
    x, y = _check_bits(a, b, op)
    if x.dtype.is_bool:
        return combine(x, y)
    if x.dtype.unsigned:  # _bits reads two's complement: take uint8's 8 bits from an int16
        return _bitwise(x.short(), y.short(), op, combine).cast(x.dtype)
    n = x.dtype.itemsize * 8
    bx, by = _bits(x, n), _bits(y, n)
    return _from_bits([combine(p, q).cast(x.dtype) for p, q in zip(bx, by)], x.dtype)


def bitwise_and(a, b):
    """a & b. Integers are taken apart bit by bit (no bitwise primitive): one kernel, but
    with a few hundred operations per element for int64.

    >>> import fusegrad as fg
    >>> (fg.tensor([12, -1]) & fg.tensor([10, 6])).tolist()
    [8, 6]
    """
    return _bitwise(a, b, "bitwise_and", _bool_and)


def bitwise_or(a, b):
    return _bitwise(a, b, "bitwise_or", _bool_or)


def bitwise_xor(a, b):
    return _bitwise(a, b, "bitwise_xor", _bool_xor)


def bitwise_not(x):
    """~x: logical not for bools, -x - 1 for integers."""
    if x.dtype.is_bool:
        return x.logical_not()
    if x.dtype.is_float:
        fail(DTypeError, "invert", f"~ needs a bool or integer tensor, got {x.dtype.name}")
    return -x - 1


def bitwise_left_shift(a, b):
    """a << b = a * 2^b (wrapping as two's complement); 0 once b reaches the bit width,
    as torch's.

    >>> import fusegrad as fg
    >>> (fg.tensor([1, 3], dtype=fg.int8) << fg.tensor([7, 8], dtype=fg.int8)).tolist()
    [-128, 0]
    """
    x, y = _check_bits(a, b, "bitwise_left_shift")
    bits = 8 * x.dtype.itemsize
    # 2^(bits-1) wraps to the minimum, and x times it wraps to the right bits
    return _where(y >= bits, 0, x * _int_pow2(y.clamp(0, bits - 1))).cast(x.dtype)


def bitwise_right_shift(a, b):
    """a >> b = floor(a / 2^b) (arithmetic shift); once b reaches the bit width, the sign
    fill (0 or -1; 0 for unsigned), as torch's.

    >>> import fusegrad as fg
    >>> (fg.tensor([5, -5], dtype=fg.int32) >> 31).tolist()
    [0, -1]
    """
    x, y = _check_bits(a, b, "bitwise_right_shift")
    bits = 8 * x.dtype.itemsize
    # two halves: 2^(bits-1) itself does not fit (it wraps negative); floor(floor(x/p)/q)
    # is floor(x/(p q)) for p, q > 0
    shift = y.clamp(0, bits - 1)
    half = floor_divide(shift, 2)
    out = floor_divide(floor_divide(x, _int_pow2(half)), _int_pow2(shift - half))
    return _where(y >= bits, 0, out).cast(x.dtype) if x.dtype.unsigned else out


def _int_pow2(y):
    out = None
    for k in range(6):
        bit = floor_divide(y, 2**k) - 2 * floor_divide(y, 2 ** (k + 1))
        term = _where(bit == 1, 2 ** (2**k) if k < 6 else 1, 1).cast(y.dtype)
        out = term if out is None else out * term
    return out


def logical_and(a, b):
    return a.bool() & _tensor(b, "logical_and", a).bool()


def logical_or(a, b):
    return a.bool() | _tensor(b, "logical_or", a).bool()


def logical_xor(a, b):
    return a.bool() != _tensor(b, "logical_xor", a).bool()


@autocast_op("pow")
def _pow(a, b):
    return a**b


def _add(a, b, alpha=1):
    """a + alpha * b (also torch's deprecated `add(alpha, other)`, with its warning)."""
    b, alpha = deprecated_alpha(b, alpha, "add")
    return a + (b * alpha if alpha != 1 else b)


def _sub(a, b, alpha=1):
    b, alpha = deprecated_alpha(b, alpha, "sub")
    return a - (b * alpha if alpha != 1 else b)


_NUMBERS = (int, float, bool, np.number)


def deprecated_alpha(other, alpha, op: str):
    """`(other, alpha)`, read as torch reads `op(alpha, other)`, its deprecated overload with
    the number first (old training loops: `p.data.add_(-lr, p.grad.data)`), with torch's
    warning; as given otherwise."""
    if isinstance(other, _NUMBERS) and isinstance(alpha, TensorBase):
        warnings.warn(
            f"This overload of {op} is deprecated:\n\t{op}(Number alpha, Tensor other)\n"
            f"Consider using one of the following signatures instead:\n\t{op}(Tensor other, "
            "*, Number alpha = 1)",
            UserWarning,
            stacklevel=3,
        )
        return alpha, other
    return other, alpha


def clone(x, memory_format=None):
    """A new tensor with the same value (values are immutable here, so nothing is copied);
    gradients flow back to x, as PyTorch's clone."""
    return x._plain(
        x.node, requires_grad=x.requires_grad, strides=x._strides, leaf=not x.requires_grad
    )


def _get_data(x):
    """`x.data`: x's value without history; in-place updates through it land in x."""
    view = x._data_view
    return view(x.owner, x._moves) if type(x) is view else view(x)


def _set_data(x, value):
    """`x.data = value`: x takes value's value (any shape and dtype, as in torch), with no
    history; x stays the same leaf."""
    view = x._data_view
    if type(x) is view:
        x = x.owner
    if type(value) is view and value.owner is x and not value._moves:
        return  # `p.data -= u` ends with `p.data = <p's view>`: nothing to write (nor to read)
    value = as_tensor_like(value, x, "data").detach()
    if value.shape == x.shape and value.dtype is x.dtype and value.device == x.device:
        view(x)._inplace(value, "data")  # as a write through .data
        return

    old, new = x.node, value.realize().node
    x.node = N.buffer(engine.value(new), new.shape, new.dtype)  # x's own: never shared
    x._strides = None
    if x.requires_grad and x._is_leaf:
        retire(old, x, counted=False)


# ---------------------------------------------------------------- float function primitives


def _primitive(op: Ops):
    name = MATH[op].name

    def fn(x):
        return x._float()._unary(op)

    fn.__name__ = fn.__qualname__ = name
    # a code object of its own, named too: kernels label an op by its code's name, and
    # tell ops apart by their code objects (runtime/attribution.py)
    fn.__code__ = fn.__code__.replace(co_name=name, co_qualname=f"_primitive.<locals>.{name}")
    fn.__doc__ = f"{name}(x) elementwise, as torch.{name}: the primitive {op.name} (ir/ops.py)."
    return fn


# t.exp(), fg.exp(t), ...: one per row of ir/ops.py's MATH (integers compute in float32)
PRIMITIVES = {
    MATH[op].name: autocast_op(MATH[op].name)(_primitive(op))
    if has_policy(MATH[op].name)
    else _primitive(op)
    for op in MATH
}


def fmax(a, b):
    """The elementwise maximum where a NaN loses to a number (NaN only where both are),
    as torch.fmax; the gradient goes to the one chosen, to `a` at a tie (as torch's).

    >>> import fusegrad as fg, math
    >>> fg.fmax(fg.tensor([1.0, math.nan]), fg.tensor([math.nan, 2.0])).tolist()
    [1.0, 2.0]
    """
    return _where(isnan(b) | (a >= b), a, b)


def fmin(a, b):
    """The elementwise minimum where a NaN loses to a number, as torch.fmin (the gradient
    to `a` at a tie)."""
    return _where(isnan(b) | (a <= b), a, b)


# ---------------------------------------------------------------- gamma family, erfinv

# Lanczos's approximation of the gamma function, g = 7, 9 terms (within ~1e-15 relative)
_LANCZOS_G = 7.0
_LANCZOS = [
    0.99999999999980993, 676.5203681218851, -1259.1392167224028, 771.32342877765313,
    -176.61502916214059, 12.507343278686905, -0.13857109526572012, 9.9843695780195716e-6,
    1.5056327351493116e-7,
]  # fmt: skip
# Bernoulli numbers B2, B4, ..., B16 (the asymptotic series of the polygamma functions)
_BERNOULLI = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510]
_PSI_SHIFT = 10  # psi_n(y) from psi_n(y + shift + n), where the asymptotic series converges


def _lgamma_right(w):
    """log Gamma(w) for w >= 1/2 (Lanczos), in float64."""
    z = w - 1
    a = _LANCZOS[0]
    for i, c in enumerate(_LANCZOS[1:], start=1):
        a = a + c / (z + i)
    t = z + (_LANCZOS_G + 0.5)
    return 0.5 * math.log(2 * math.pi) + (z + 0.5) * t.log() - t + a.log()


def _zeta(k: int) -> float:
    """The Riemann zeta function at an integer k >= 2 (Euler-Maclaurin after 200 terms)."""
    n = 200
    head = math.fsum(m**-k for m in range(1, n))
    tail = n ** (1 - k) / (k - 1) + 0.5 * n**-k + k * n ** (-k - 1) / 12
    return head + tail - k * (k + 1) * (k + 2) * n ** (-k - 3) / 720


# log Gamma(1 + z) = -gamma z + sum over k >= 2 of (-1)^k zeta(k) z^k / k, for |z| <= 1/2
_LGAMMA_SERIES = [0.0, -0.5772156649015329] + [(-1) ** k * _zeta(k) / k for k in range(2, 60)]


def _lgamma_near_one_two(w):
    """log Gamma(w) for w in [1/2, 5/2], in float64, from the series about 1 (and log
    Gamma(2 + z) = log1p(z) + log Gamma(1 + z)): exact zeros at 1 and 2, and small values
    near them to float64's relative precision (Lanczos's is absolute there)."""
    above = w >= 1.5
    z = _where(above, w - 2, w - 1)
    res = 0.0
    for c in reversed(_LGAMMA_SERIES):
        res = res * z + c
    return _where(above, res + log1p(z), res)


def _frac_part(w):
    """w - round(w), in [-1/2, 1/2]: sin(pi w) and cot(pi w) up to sign from it exactly."""
    return w - round_(w)


def lgamma(x):
    """log |Gamma(x)|, as torch.lgamma: inf at 0 and the negative integers (the poles) and at
    +-inf. Lanczos's approximation for x >= 1/2, the reflection formula log(pi / |sin(pi x)|)
    - lgamma(1 - x) below (sin(pi x) from x - round(x), exact); float32 goes through
    float64. The gradient is `digamma(x)`, as torch's.

    >>> import fusegrad as fg
    >>> [round(v, 12) for v in fg.tensor([0.5, 1.0, 3.0, -0.5], dtype=fg.float64).lgamma().tolist()]
    [0.572364942925, 0.0, 0.69314718056, 1.265512123485]
    """
    xf = x._float()
    w = _f64(xf)
    # one Lanczos sum for both sides: at w itself from 1/2 up, at 1 - w (above 1/2) below
    above = w >= 0.5
    lanczos = _lgamma_right(_where(above, w, 1 - w))
    near = above & (w <= 2.5)
    right = _where(near, _lgamma_near_one_two(w.clamp(0.5, 2.5)), lanczos)
    r = _frac_part(w)
    left = math.log(math.pi) - (r * math.pi).sin().abs().log() - lanczos
    res = _where(above, right, left)
    # the poles: the negative integers (and 0) are inf, not inf - inf where lgamma(1 - w)
    # overflows too (from -2.5e305 on)
    res = _where((w.abs() == math.inf) | ((w < 0.5) & (r == 0)), math.inf, res)
    # the rule even where nothing requires grad now: a second derivative reaches this node
    # through the first's rule, and must not differentiate the branches of the formula
    out = _back(res, xf)
    return custom_gradient(out, [xf], lambda g, x: [g * digamma(x)], own_node=True)


def _cot_derivatives(n: int) -> list[float]:
    """The polynomial Q_n with d^n/dx^n cot(pi x) = pi^n Q_n(cot(pi x)), lowest power
    first: Q_0 = c, Q_(k+1) = -(1 + c^2) Q_k'(c)."""
    q = [0.0, 1.0]
    for _ in range(n):
        dq = [i * q[i] for i in range(1, len(q))] + [0.0]
        nxt = [0.0] * (len(dq) + 2)
        for i, v in enumerate(dq):
            nxt[i] -= v
            nxt[i + 2] -= v
        q = nxt
    return q


def _polygamma_right(n: int, y):
    """psi_n(y) for y >= 1/2, in float64: shifted up by the recurrence psi_n(y) =
    psi_n(y + 1) + (-1)^(n+1) n! / y^(n+1), then the asymptotic series."""
    shift = _PSI_SHIFT + n
    sign = -1.0 if n % 2 == 0 else 1.0  # (-1)^(n+1)
    fact = float(math.factorial(n))
    head = None
    for k in range(shift):
        term = 1 / (y + k) if n == 0 else (y + k) ** -(n + 1)
        head = term if head is None else head + term
    v = y + shift
    inv = 1 / v
    if n == 0:
        tail = v.log() - 0.5 * inv
        inv2, power = inv * inv, inv * inv
        for k, b in enumerate(_BERNOULLI, start=1):
            tail = tail - (b / (2 * k)) * power
            power = power * inv2
        return tail - head
    # (n-1)!/v^n + n!/(2 v^(n+1)) + sum B_2k (2k+n-1)!/(2k)! / v^(2k+n)
    vn = inv**n
    tail = math.factorial(n - 1) * vn + (fact / 2) * vn * inv
    power = vn * inv * inv
    for k, b in enumerate(_BERNOULLI, start=1):
        tail = tail + (b * math.factorial(2 * k + n - 1) / math.factorial(2 * k)) * power
        power = power * inv * inv
    return sign * (tail + fact * head)


def _polygamma(n: int, w):
    """psi_n(w) in float64 for every w: the reflection psi_n(w) = (-1)^n psi_n(1 - w) -
    pi^(n+1) Q_n(cot(pi w)) below 1/2; the poles and infinities as `polygamma` says."""
    # one series for both sides: at w itself from 1/2 up, at 1 - w (above 1/2) below
    right = reflected = _polygamma_right(n, _where(w >= 0.5, w, 1 - w))
    c = 1 / (_frac_part(w) * math.pi).tan()  # cot(pi w): period 1
    q = 0.0
    for coef in reversed(_cot_derivatives(n)):
        q = q * c + coef
    left = (reflected if n % 2 == 0 else -reflected) - math.pi ** (n + 1) * q
    res = _where(w >= 0.5, right, left)
    pole = (w <= 0) & (_frac_part(w) == 0)
    if n == 0:  # NaN at the poles below 0, -inf at +0, +inf at -0, as torch's
        res = _where(pole, _where(w == 0, _where(1 / w < 0, math.inf, -math.inf), math.nan), res)
    else:  # (-1)^(n+1) inf at every pole (the side of +0), as torch's
        res = _where(pole, math.inf if n % 2 else -math.inf, res)
    if n > 0:  # (digamma's is inf: its series gives that)
        res = _where(w == math.inf, 0.0, res)
    return _where((w == -math.inf) | isnan(w), math.nan, res)


def digamma(x):
    """d/dx log Gamma(x), as torch.digamma: -inf at +0, inf at -0, NaN at the negative
    integers and at -inf. Computed in float64 (float32 rounded once) from psi(x + 10)'s
    asymptotic series and the recurrence, with the reflection formula below 1/2. The
    gradient is `polygamma(1, x)` (inf at the poles, where torch's float32 formula gives a
    large finite number: docs/NUMERICS.md).

    >>> import fusegrad as fg
    >>> [round(v, 12) for v in fg.tensor([1.0, 0.5, -0.5], dtype=fg.float64).digamma().tolist()]
    [-0.577215664902, -1.963510026021, 0.036489973979]
    """
    return polygamma(0, x)


def polygamma(n: int, x):
    """The n-th derivative of digamma, as torch.polygamma(n, x) (n = 0 is digamma): the
    recurrence and asymptotic series above 1/2, the reflection formula with cot(pi x)'s
    n-th derivative below, in float64. For n >= 1, (-1)^(n+1) inf at 0 and the negative
    integers (the poles), 0 at inf and NaN at -inf (docs/NUMERICS.md: where torch's
    differs); see digamma for n = 0. The gradient is polygamma(n + 1, x).

    >>> import fusegrad as fg
    >>> round(fg.polygamma(1, fg.tensor([1.0])).item(), 6)  # pi^2 / 6
    1.644934
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        fail(ArgumentError, "polygamma", f"n must be a non-negative int, got {n!r}")
    xf = _tensor(x, "polygamma")._float()
    out = _back(_polygamma(n, _f64(xf)), xf)
    # (the rule builds polygamma(n + 1) only when a backward pass asks for it; it is there
    # even where nothing requires grad now, as lgamma's)
    return custom_gradient(out, [xf], lambda g, x: [g * polygamma(n + 1, x)], own_node=True)


def _polygamma_method(self, n: int):
    """`t.polygamma(n)`: polygamma(n, t), as torch's method."""
    return polygamma(n, self)


# Giles's approximation of erfinv for single precision ("Approximating the erfinv function",
# GPU Computing Gems, 2010): its coefficients in w = -log(1 - x^2), central and tail
_ERFINV_CENTRAL = [
    2.81022636e-08,
    3.43273939e-07,
    -3.5233877e-06,
    -4.39150654e-06,
    0.00021858087,
    -0.00125372503,
    -0.00417768164,
    0.246640727,
    1.50140941,
]
_ERFINV_TAIL = [-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                -0.0076224613, 0.00943887047, 1.00167406, 2.83297682]  # fmt: skip


@autocast_op("erfinv")
def erfinv(x):
    """The inverse of erf on [-1, 1], as torch.erfinv: +-inf at +-1, NaN outside, -0.0 at
    -0.0. Giles's single-precision approximation refined by Newton steps on fusegrad's
    erfc, in float64: four for a float64 x, ERFINV_STEPS_FLOAT32 with erf and erfc to
    float32's need for a float32 one (the start is within a few float32 ulps, and each
    step squares the error). The gradient is sqrt(pi)/2 exp(erfinv(x)^2), as torch's.

    >>> import fusegrad as fg
    >>> round(fg.tensor([0.5]).erfinv().item(), 6)
    0.476936
    """
    xf = x._float()
    w = _f64(xf)
    inside = w.abs() < 1
    a = _where(inside, w, 0.0)
    lw = -((1 - a) * (1 + a)).log()
    central, tail = lw - 2.5, lw.sqrt() - 3
    pc, pt = 0.0, 0.0
    for c in _ERFINV_CENTRAL:
        pc = pc * central + c
    for c in _ERFINV_TAIL:
        pt = pt * tail + c
    y = _where(lw < 5, pc, pt) * a
    # Newton on |y|: y - (erf(y) - |x|) / erf'(y) below 0.5; from 0.5 on, on the logarithm
    # of erfc: 1 - |x| is exact there, where erf(y) - x cancels near 1, and the log's curve
    # is one Newton follows from the single-precision start, far off in the tail
    ay, aa = y.abs(), a.abs()
    tail = aa >= 0.5
    lq = _where(tail, 1 - aa, 1.0).log()
    wide = xf.dtype is float64
    for _ in range(4 if wide else ERFINV_STEPS_FLOAT32):
        grow = (math.sqrt(math.pi) / 2) * (ay * ay).exp()
        if wide:
            c, e = ay.erfc(), erf(ay)
        else:  # (a float32 result: erf and erfc to its need, in float64; `erf`)
            head = _erf_series32(ay.minimum(2.0))
            near = ay < 2
            c = _where(near, 1 - head, _erfc_tail32(ay, ERFC_FRACTION_FLOAT32))
            e = _where(near, head, 1 - c)
        ay = _where(tail, ay + (c.log() - lq) * c * grow, ay - (e - aa) * grow)
    y = _where(a < 0, -ay, ay)
    res = _where(inside, y, _where(w == 1, math.inf, _where(w == -1, -math.inf, math.nan)))
    res = _odd_at_zero(res, w)
    out = _back(res, xf)
    return _with_grad(out, [(xf, (math.sqrt(math.pi) / 2) * (out * out).exp())])


# ---------------------------------------------------------------- Bessel functions I0, I1


def _bessel_ie(nu: int, a):
    """e^-a I_nu(a) for a >= 0 (nu 0 or 1), in float64: the power series up to 30 (all
    terms positive, 60 of them), the asymptotic series 1/sqrt(2 pi a) sum (-1)^k c_k / a^k
    (16 terms) above; 0 at inf."""
    small = a.minimum(30.0)
    half = small * 0.5
    q = half * half
    s = 0.0
    for k in range(60, 0, -1):  # sum q^k / (k! (k + nu)!), nested from the last term
        s = 1 + s * q / (k * (k + nu))
    series = s * (half if nu else 1.0) * (-small).exp()
    big = a.maximum(30.0)
    coef, total = 1.0, 1.0
    inv = 1 / big
    power = 1.0
    for k in range(1, 17):
        coef *= -(4 * nu * nu - (2 * k - 1) ** 2) / (k * 8)  # (-1)^k c_k
        power = power * inv
        total = total + coef * power
    asym = total / math.sqrt(2 * math.pi) / big.sqrt()  # (2 pi a overflows past 2.9e307)
    return _where(a <= 30, series, _where(a == math.inf, 0.0, asym))


def i0(x):
    """The modified Bessel function of the first kind of order 0, as torch.i0: a power
    series, or an asymptotic one above 30, in float64; inf at +-inf (torch's is NaN:
    docs/NUMERICS.md). The gradient is `special.i1(x)`, as torch's.

    >>> import fusegrad as fg
    >>> round(fg.tensor([1.0]).i0().item(), 6)
    1.266066
    """
    xf = x._float()
    a = _f64(xf).abs()
    res = _bessel_ie(0, a) * a.exp()
    res = _where(a == math.inf, math.inf, res)
    out = _back(res, xf)
    return custom_gradient(out, [xf], lambda g, x: [g * i1(x)], own_node=True)


def i0e(x):
    """e^-|x| I0(x), as torch.special.i0e (1 at 0, 0 at +-inf). The gradient is torch's,
    i1e(x) - sign(x) i0e(x)."""
    xf = x._float()
    out = _back(_bessel_ie(0, _f64(xf).abs()), xf)
    return custom_gradient(out, [xf], lambda g, x: [g * (i1e(x) - x.sign() * i0e(x))],
                           own_node=True)  # fmt: skip


def i1(x):
    """The modified Bessel function of the first kind of order 1, as torch.special.i1 (odd;
    +0.0 at -0.0 as torch's; +-inf at +-inf, where torch's is NaN). The gradient is torch's,
    i0(x) - i1(x) / x, 1/2 at 0 (and at NaN)."""
    xf = x._float()
    w = _f64(xf)
    a = w.abs()
    mag = _where(a == math.inf, math.inf, _bessel_ie(1, a) * a.exp())
    res = _where(w < 0, -mag, mag)  # (+0.0 at -0.0, as torch's)
    out = _back(res, xf)

    def rule(g, x):  # (1/2 at a NaN too, as torch's)
        return [g * _where((x == 0) | isnan(x), 0.5, i0(x) - i1(x) / x)]

    return custom_gradient(out, [xf], rule, own_node=True)


def i1e(x):
    """e^-|x| I1(x), as torch.special.i1e (odd; +0.0 at -0.0, +-0 at +-inf, as torch's). The
    gradient is torch's, i0e(x) - i1e(x) (sign(x) + 1/x), 1/2 at 0 (and at NaN)."""
    xf = x._float()
    w = _f64(xf)
    mag = _bessel_ie(1, w.abs())
    res = _where(w < 0, -mag, mag)  # (+0.0 at -0.0, as torch's)
    out = _back(res, xf)

    def rule(g, x):  # (1/2 at a NaN too, as torch's)
        return [g * _where((x == 0) | isnan(x), 0.5, i0e(x) - i1e(x) * (x.sign() + 1 / x))]

    return custom_gradient(out, [xf], rule, own_node=True)


# ---------------------------------------------------------------- scaled erfc, log Phi


def _erfcx64(w):
    """e^(w^2) erfc(w) in float64: erf's continued fraction from 2 up (`_erfc_fraction`),
    e^(w^2) (1 - erf(w)) on [0, 2), and 2 e^(w^2) - erfcx(-w) below 0 (inf past about
    -26.6)."""
    a = w.abs()
    far = 1 / _erfc_fraction(a.maximum(2.0))
    near = (a * a).exp() * (1 - erf(a.minimum(2.0)))
    pos = _where(a >= 2, _where(a == math.inf, 0.0, far), near)
    return _where(w < 0, 2 * (w * w).exp() - pos, pos)


def erfcx(x):
    """The scaled complementary error function e^(x^2) erfc(x), as torch.special.erfcx,
    without erfc's underflow (0 at inf, inf at -inf). The gradient is torch's,
    2 x erfcx(x) - 2/sqrt(pi)."""
    xf = x._float()
    out = _back(_erfcx64(_f64(xf)), xf)

    def rule(g, x):
        return [g * (2 * x * erfcx(x) - 2 / math.sqrt(math.pi))]

    return custom_gradient(out, [xf], rule, own_node=True)


def log_ndtr(x):
    """log of the standard normal CDF, as torch.special.log_ndtr, accurate in both tails:
    log(erfcx(z) / 2) - z^2 with z = -x/sqrt(2) below -1, log1p(-erfc(x/sqrt(2)) / 2) above.
    The gradient is torch's, exp(-x^2/2 - log_ndtr(x)) / sqrt(2 pi)."""
    xf = x._float()
    w = _f64(xf)
    z = -w * (1 / math.sqrt(2))
    low = (_erfcx64(z.maximum(0.5)) * 0.5).log() - z * z
    high = log1p(-0.5 * _erfcx64((-z).maximum(-1.0)) * (-(z * z)).exp())
    res = _where(w < -1, low, high)
    out = _back(res, xf)

    def rule(g, x):
        return [g * (-(x * x) * 0.5 - log_ndtr(x)).exp() * (1 / math.sqrt(2 * math.pi))]

    return custom_gradient(out, [xf], rule, own_node=True)


def ndtri(x):
    """The inverse of the standard normal CDF, as torch.special.ndtri: -inf at 0, inf at 1,
    NaN outside [0, 1]. sqrt(2) erfinv(2p - 1) on [0.02, 0.98]; in the tails, Newton's
    method on log_ndtr(y) = log(min(p, 1 - p)) from -sqrt(-2 log), so the lower tail keeps
    its precision to the smallest subnormal (erfinv(2p - 1) would round 2p - 1 to -1). The
    gradient is torch's, sqrt(2 pi) exp(ndtri(p)^2 / 2)."""
    xf = x._float()
    w = _f64(xf)
    inside = (w > 0) & (w < 1)
    p = _where(inside, w, 0.5)
    middle = erfinv(2 * p - 1) * math.sqrt(2)
    q = p.minimum(1 - p)  # the tail's side
    target = q.log()
    y = -(-2 * target).sqrt()
    for _ in range(6):  # Newton on log_ndtr(y) - log q, from below: it rises to the root
        f = log_ndtr(y) - target
        slope = (-(y * y) * 0.5 - log_ndtr(y)).exp() * (1 / math.sqrt(2 * math.pi))
        y = y - f / slope
    tail = _where(p < 0.5, y, -y)
    res = _where((p >= 0.02) & (p <= 0.98), middle, tail)
    res = _where(inside, res, _where(w == 0, -math.inf, _where(w == 1, math.inf, math.nan)))
    out = _back(res, xf)

    def rule(g, x):
        return [g * math.sqrt(2 * math.pi) * (ndtri(x) ** 2 * 0.5).exp()]

    return custom_gradient(out, [xf], rule, own_node=True)


def mvlgamma(x, p: int):
    """The multivariate log-gamma function of dimension p, as torch.mvlgamma:
    sum over j < p of lgamma(x - j/2), plus p (p - 1)/4 log(pi)."""
    if not isinstance(p, int) or isinstance(p, bool) or p < 1:
        fail(ArgumentError, "mvlgamma", f"p has to be greater than or equal to 1, got {p!r}")
    xf = x._float()
    out = lgamma(xf + 0.0)  # (x + 0.0: -0.0 is +0.0 there, whose digamma is torch's -inf)
    for j in range(1, p):
        out = out + lgamma(xf - j / 2)
    return out + p * (p - 1) / 4 * math.log(math.pi)


METHODS = {
    "fmax": fmax,
    "fmin": fmin,
    "isnan": isnan,
    "isinf": isinf,
    "isposinf": isposinf,
    "isneginf": isneginf,
    "isfinite": isfinite,
    "isreal": isreal,
    "signbit": signbit,
    "nan_to_num": nan_to_num,
    "trunc": trunc,
    "fix": trunc,
    "floor": floor,
    "ceil": ceil,
    "round": round_,
    "frac": frac,
    "sign": sign,
    "sgn": sgn,
    "copysign": copysign,
    "fmod": fmod,
    "remainder": remainder,
    "floor_divide": floor_divide,
    "div": div,
    "divide": div,
    "true_divide": lambda a, b: a / b,
    "add": _add,
    "sub": _sub,
    "subtract": _sub,
    "mul": lambda a, b: a * b,
    "multiply": lambda a, b: a * b,
    "pow": _pow,
    "log1p": log1p,
    "expm1": expm1,
    "log2": log2,
    "log10": log10,
    "logit": logit,
    "sinc": sinc,
    "lgamma": lgamma,
    "digamma": digamma,
    "polygamma": _polygamma_method,
    "erfinv": erfinv,
    "i0": i0,
    "mvlgamma": mvlgamma,
    "exp2": exp2,
    "logaddexp": logaddexp,
    "logaddexp2": logaddexp2,
    "erf": erf,
    "atan": atan,
    "arctan": atan,
    "atan2": atan2,
    "hypot": hypot,
    "xlogy": xlogy,
    "heaviside": heaviside,
    "float_power": float_power,
    "float_power_": _float_power_,
    "ldexp": ldexp,
    "arctan2": atan2,
    "asin": asin,
    "arcsin": asin,
    "acos": acos,
    "arccos": acos,
    "tan": tan,
    "sinh": sinh,
    "cosh": cosh,
    "asinh": asinh,
    "arcsinh": asinh,
    "acosh": acosh,
    "arccosh": acosh,
    "atanh": atanh,
    "arctanh": atanh,
    "lerp": lerp,
    "isclose": isclose,
    "allclose": allclose,
    "equal": equal,
    "bitwise_and": bitwise_and,
    "bitwise_or": bitwise_or,
    "bitwise_xor": bitwise_xor,
    "bitwise_not": bitwise_not,
    "bitwise_left_shift": bitwise_left_shift,
    "bitwise_right_shift": bitwise_right_shift,
    "logical_and": logical_and,
    "logical_or": logical_or,
    "logical_xor": logical_xor,
    "clone": clone,
    **PRIMITIVES,  # last: a primitive replaces a composite of its name
}


class MathMixin:
    """Tensor's methods of this module (`METHODS`), its `.data`, and the operators
    % // ^ << >> & | ~."""

    __slots__ = ()
    locals().update(METHODS)  # t.sinh(), t.remainder(), ...: the functions above
    data = property(_get_data, _set_data)

    def __mod__(self, o):
        return remainder(self, o)

    def __rmod__(self, o):
        return remainder(_reverse(self, o, "remainder"), self)

    def __floordiv__(self, o):
        return floor_divide(self, o)

    def __rfloordiv__(self, o):
        return floor_divide(_reverse(self, o, "floor_divide"), self)

    def __and__(self, o):
        return bitwise_and(self, o)

    def __rand__(self, o):
        return bitwise_and(self, o)

    def __or__(self, o):
        return bitwise_or(self, o)

    def __ror__(self, o):
        return bitwise_or(self, o)

    def __xor__(self, o):
        return bitwise_xor(self, o)

    def __rxor__(self, o):
        return bitwise_xor(self, o)

    def __invert__(self):
        return bitwise_not(self)

    def __lshift__(self, o):
        return bitwise_left_shift(self, o)

    def __rshift__(self, o):
        return bitwise_right_shift(self, o)

    def __rlshift__(self, o):
        return bitwise_left_shift(_reverse(self, o, "lshift"), self)

    def __rrshift__(self, o):
        return bitwise_right_shift(_reverse(self, o, "rshift"), self)


def _reverse(t, value, op: str):
    """A Python number on the left of an operator, as a 0-d tensor of the result's kind."""
    return t._make(N.const(value, (), promote_scalar(t.dtype, value)))
