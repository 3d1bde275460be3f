"""Differential tests: random programs built twice, with fusegrad and with numpy.

Each test draws a small random program: leaves of random shapes (1-4 dims,
sizes 1-7) and dtypes, then a sequence of ops, each picked among those valid
for the values at hand (elementwise math, comparisons, `where`, casts,
broadcasting with Python scalars on either side, reductions, every view,
`cat`/`stack` and `matmul`). The program runs twice: as fusegrad tensors, and
as numpy arrays written directly (`np.tanh`, `np.pad`, `np.matmul`, ...) with
PyTorch's dtype rules. Every op checks the shape and dtype at once; at the end
the compiled values must match numpy, and must match the reference evaluator
run on the same IR before anything was realized.

Floating point: the two sides round alike except where fusegrad composes
(`tanh` through `sigmoid`, `cos` through `sin`), approximates (polynomial
`exp`, `log`, `sin`) or reorders (sums). So each value carries a bound on its
absolute error, propagated op by op to first order: a long chain gets the
slack it needs and no more. Ops whose result jumps (comparisons, float-to-int
casts, `argmax`) are drawn only where the values are further apart than that
bound, and a value whose bound grows past a thousandth of its size is not used.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.ir.reference import evaluate_many

DTYPES = ("float32", "float64", "int32", "int64", "bool")
PRIORITY = {"bool": 0, "int32": 1, "int64": 2, "float32": 3, "float64": 4}
KIND = {"bool": "b", "int32": "i", "int64": "i", "float32": "f", "float64": "f"}
UNIT_ROUNDOFF = {"float32": 2.0**-24, "float64": 2.0**-53}
ATOL = {"float32": 1e-5, "float64": 1e-12}
RTOL = {"float32": 1e-4, "float64": 1e-10}
BASIC_ULPS = 2  # + - * / and casts: correctly rounded, maybe contracted to an fma
TRANSCENDENTAL_ULPS = 16  # fusegrad's polynomial exp/log/sin/sqrt and its tanh/sigmoid compositions
MAX_NUMEL = 4096
MAX_FLOAT = 1e6
MAX_INT = 2**24  # exactly representable in float32, and no int32 overflow in a product of two

SETTINGS = dict(
    deadline=None,
    derandomize=True,  # the same programs on every run, so CI is reproducible
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    report_multiple_bugs=False,
    # no "explain" phase: re-running a failing program under a tracer costs minutes
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)


# ---------------------------------------------------------------- PyTorch's dtype rules


def promote(a: str, b: str) -> str:
    """Two tensors: the later of bool < int32 < int64 < float32 < float64."""
    return a if PRIORITY[a] >= PRIORITY[b] else b


def promote_scalar(dtype: str, value) -> str:
    """A tensor and a Python scalar: the scalar lifts the kind only (int32 + 2.5 -> float32)."""
    kind = "b" if isinstance(value, bool) else "i" if isinstance(value, int) else "f"
    if "bif".index(kind) > "bif".index(KIND[dtype]):
        return {"f": "float32", "i": "int64"}[kind]
    return dtype


def float_of(dtype: str) -> str:
    """exp, log, / ... turn ints and bools into the default float."""
    return dtype if KIND[dtype] == "f" else "float32"


def rounding(dtype: str, magnitude: float, ulps: int = BASIC_ULPS) -> float:
    return ulps * UNIT_ROUNDOFF.get(dtype, 0.0) * magnitude


def as_np(a: np.ndarray, dtype: str) -> np.ndarray:
    return (a != 0) if dtype == "bool" else np.asarray(a).astype(dtype)


# ---------------------------------------------------------------- one value, built twice


class Val:
    """A fusegrad tensor, the numpy array it must equal, and a bound on their float difference."""

    __slots__ = ("t", "a", "err", "name")

    def __init__(self, t: fg.Tensor, a: np.ndarray, err: float, name: str):
        self.t, self.a, self.err, self.name = t, a, err, name

    def __repr__(self) -> str:  # hypothesis prints drawn values; a tensor's repr would realize it
        return f"<{self.name} {self.a.shape} {self.dtype}>"

    @property
    def dtype(self) -> str:
        return self.a.dtype.name

    @property
    def kind(self) -> str:
        return KIND[self.dtype]

    @property
    def mag(self) -> float:
        return float(np.max(np.abs(self.a.astype(np.float64)))) if self.a.size else 0.0


Operand = Val | int | float | bool


def a_of(x: Operand, dtype: str) -> np.ndarray:
    return as_np(x.a if isinstance(x, Val) else np.asarray(x), dtype)


def t_of(x: Operand):
    return x.t if isinstance(x, Val) else x


def err_of(x: Operand) -> float:
    return x.err if isinstance(x, Val) else 0.0


def mag_of(x: Operand) -> float:
    return x.mag if isinstance(x, Val) else abs(float(x))


def dtype_of(x: Operand, other: Operand) -> str:
    if isinstance(x, Val) and isinstance(other, Val):
        return promote(x.dtype, other.dtype)
    if isinstance(x, Val):
        return promote_scalar(x.dtype, other)
    return promote_scalar(other.dtype, x)


def label(x: Operand) -> str:
    """How an operand appears in the program listing."""
    return x.name if isinstance(x, Val) else repr(x)


class Program:
    """Draws a random program op by op, building the fusegrad and the numpy side together."""

    def __init__(self, data, max_numel: int = MAX_NUMEL):
        self.data = data
        self.max_numel = max_numel
        self.pool: list[Val] = []
        self.log: list[str] = []

    def draw(self, strategy):
        return self.data.draw(strategy)

    def add(self, t, a, err: float, text: str) -> Val | None:
        """Record a new value after checking its shape and dtype, or None if it is out of range."""
        a = np.asarray(a)
        name = f"v{len(self.pool)}"
        self.log.append(f"{name} = {text}  # {a.shape} {a.dtype.name} err<={err:.2g}")
        assert tuple(t.shape) == a.shape, self.report(f"shape {t.shape}, numpy says {a.shape}")
        assert t.dtype.name == a.dtype.name, self.report(
            f"dtype {t.dtype.name}, PyTorch's rule says {a.dtype.name}"
        )
        v = Val(t, a, err, name)
        limit = MAX_FLOAT if v.kind == "f" else MAX_INT
        if a.size > self.max_numel or v.mag > limit or err > 1e-3 * max(1.0, v.mag):
            self.log[-1] += "  (out of range: not used)"
            return None
        self.pool.append(v)
        return v

    def report(self, message: str) -> str:
        return message + "\nprogram:\n  " + "\n  ".join(self.log)

    # ---------------------------------------------------------------- leaves and shapes
    def shape(self, max_dims: int = 4) -> tuple[int, ...]:
        return tuple(self.draw(st.lists(st.integers(1, 7), min_size=1, max_size=max_dims)))

    def leaf(self, shape, dtype: str | None = None) -> Val:
        shape = tuple(shape)
        dtype = dtype or self.draw(st.sampled_from(DTYPES))
        rng = np.random.default_rng(self.draw(st.integers(0, 2**32 - 1)))
        if dtype == "bool":
            a = rng.random(shape) < 0.5
        elif KIND[dtype] == "i":
            a = rng.integers(-5, 6, shape).astype(dtype)
        else:
            style = self.draw(st.sampled_from(["uniform", "integral", "positive"]))
            if style == "uniform":
                a = rng.uniform(-3, 3, shape)
            elif style == "integral":  # ties and exact zeros
                a = rng.integers(-4, 5, shape).astype(np.float64)
            else:
                a = rng.uniform(0.5, 3, shape)
            a = a.astype(dtype)
        how = self.draw(st.sampled_from(["from_numpy", "from_numpy", "tensor", "full", "arange"]))
        if how == "tensor":
            t = fg.tensor(a.tolist(), dtype=dtype)
        elif how == "full":
            value = a.reshape(-1)[0].item()
            a = np.full(shape, value, dtype=dtype)
            t = fg.full(shape, value, dtype=dtype)
        elif how == "arange" and dtype != "bool":
            n = math.prod(shape)
            a = np.arange(-(n // 2), n - n // 2).astype(dtype).reshape(shape)
            t = fg.arange(-(n // 2), n - n // 2, dtype=dtype).reshape(shape)
        else:
            how = "from_numpy"
            t = fg.from_numpy(a)
        v = self.add(t, a, 0.0, f"{how}({dtype}, {shape})")
        assert v is not None
        return v

    def broadcastable_shape(self, shape, max_dims: int = 4) -> tuple[int, ...]:
        """A shape that broadcasts with `shape`: some axes 1, some dropped or added in front."""
        out = []
        for s in shape:
            choice = self.draw(st.sampled_from(["same", "same", "one", "grow"]))
            if choice == "one":
                out.append(1)
            elif choice == "grow" and s == 1:
                out.append(self.draw(st.integers(1, 5)))
            else:
                out.append(s)
        if math.prod(out) > self.max_numel:
            out = [min(o, s) for o, s in zip(out, shape)]
        drop = self.draw(st.integers(0, len(out) - 1)) if out else 0
        if drop:
            return tuple(out[drop:])
        add = self.draw(st.integers(0, max(0, max_dims - len(shape))))
        lead = tuple(self.draw(st.integers(1, 4)) for _ in range(add))
        return (lead if math.prod(lead + tuple(out)) <= self.max_numel else ()) + tuple(out)

    def pick(self, pred=lambda v: True) -> Val | None:
        """The newest value most of the time (a chain), an older one sometimes (a DAG)."""
        choices = [v for v in self.pool if pred(v)]
        if not choices:
            return None
        if pred(self.pool[-1]) and self.draw(st.integers(0, 3)) > 0:
            return self.pool[-1]
        return self.draw(st.sampled_from(choices))

    def partner(self, shape) -> Operand:
        """The other operand of an op on `shape`: a Python scalar, an older value or a new leaf."""
        how = self.draw(st.sampled_from(["leaf", "pool", "scalar", "scalar"]))
        if how == "scalar":
            return self.draw(st.sampled_from([0, 1, 2, -3, 0.5, -1.25, 2.5, True, False]))
        if how == "pool":
            fits = [v for v in self.pool if broadcasts(v.a.shape, shape)]
            if fits:
                return self.draw(st.sampled_from(fits))
        return self.leaf(self.broadcastable_shape(shape))

    # ---------------------------------------------------------------- elementwise
    def op_arith(self) -> Val | None:
        x = self.pick()
        y = self.partner(x.a.shape)
        name = self.draw(st.sampled_from(["add", "sub", "mul", "div", "maximum", "minimum"]))
        reverse = not isinstance(y, Val) and self.draw(st.booleans())
        lhs, rhs = (y, x) if reverse else (x, y)
        if isinstance(lhs, Val) and isinstance(rhs, Val) and (lhs.a.ndim == 0) != (rhs.a.ndim == 0):
            if lhs.dtype != rhs.dtype:
                return None  # PyTorch lets a 0-d tensor promote like a scalar; not drawn here
        dtype = dtype_of(lhs, rhs)
        la, ra = a_of(lhs, dtype), a_of(rhs, dtype)
        el, er = err_of(lhs), err_of(rhs)
        ml, mr = mag_of(lhs), mag_of(rhs)
        if name in ("maximum", "minimum"):
            if not isinstance(lhs, Val):
                return None
            t = getattr(lhs.t, name)(t_of(rhs))
            if isinstance(rhs, Val) and self.draw(st.booleans()):
                t = getattr(fg, name)(lhs.t, rhs.t)
            a = getattr(np, name)(la, ra)
            return self.add(t, a, max(el, er), f"{name}({label(lhs)}, {label(rhs)})")
        if name == "sub" and any(isinstance(v, Val) and v.dtype == "bool" for v in (lhs, rhs)):
            return None  # PyTorch refuses bool subtraction
        if name == "sub" and any(isinstance(v, bool) for v in (lhs, rhs)):
            return None
        symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}[name]
        if name == "div":
            dtype = float_of(dtype)
            la, ra = la.astype(dtype), ra.astype(dtype)
            bmin = float(np.min(np.abs(ra.astype(np.float64)))) if ra.size else 1.0
            if bmin < 0.5 or er > bmin / 4:
                return None
            a = la / ra
            err = (el + ml / bmin * er) / (bmin - er)
        elif name == "mul":
            a = la * ra
            err = el * mr + er * ml + el * er
        else:
            a = la + ra if name == "add" else la - ra
            err = el + er
        fn = {"add": operator.add, "sub": operator.sub, "mul": operator.mul}.get(
            name, operator.truediv
        )
        t = fn(t_of(lhs), t_of(rhs))
        a = np.asarray(a, dtype=dtype)
        err += rounding(dtype, float(np.max(np.abs(a), initial=0.0)))
        return self.add(t, a, err, f"{label(lhs)} {symbol} {label(rhs)}")

    def op_pow(self) -> Val | None:
        x = self.pick(lambda v: v.dtype != "bool")
        if x is None:
            return None
        n = self.draw(st.sampled_from([2, 3]))
        a = x.a**n
        err = n * x.mag ** (n - 1) * x.err * 1.01 + n * rounding(x.dtype, x.mag**n)
        return self.add(x.t**n, a, err, f"{x.name} ** {n}")

    def op_unary_math(self) -> Val | None:
        x = self.pick()
        name = self.draw(
            st.sampled_from(["exp", "log", "sin", "cos", "sqrt", "tanh", "sigmoid", "rsqrt"])
        )
        dtype = float_of(x.dtype)
        xa, ex, mx = x.a.astype(dtype), x.err, x.mag
        r = TRANSCENDENTAL_ULPS * UNIT_ROUNDOFF[dtype]
        use_fn = self.draw(st.booleans())  # fg.exp(x) or x.exp()
        if name in ("log", "sqrt", "rsqrt"):
            lo = float(np.min(xa.astype(np.float64))) if xa.size else 1.0
            floor = 0.0 if name == "sqrt" else 0.25
            if lo < floor or (name != "sqrt" and ex > lo / 4):
                # the argument is made positive first: log(|x| + 1), sqrt(|x|)
                if x.dtype == "bool":
                    return None
                shift = 0 if name == "sqrt" else 1
                xt = x.t.abs() + shift
                xa = (np.abs(x.a) + shift).astype(dtype)
                lo = float(np.min(np.abs(x.a.astype(np.float64)))) + shift
                text = f"(|{x.name}| + {shift})"
            else:
                xt, text = x.t, x.name
            if name != "sqrt" and ex > lo / 4:
                return None
            if name == "sqrt":
                a = np.sqrt(xa)
                err = math.sqrt(ex) + r * float(np.max(a, initial=0.0))
            elif name == "rsqrt":
                a = 1 / np.sqrt(xa)
                err = ex / (2 * (lo - ex) ** 1.5) + r * float(np.max(a, initial=0.0))
            else:
                a = np.log(xa)
                err = ex / (lo - ex) + r * max(1.0, float(np.max(np.abs(a), initial=0.0)))
            t = getattr(fg, name)(xt) if use_fn and name != "rsqrt" else getattr(xt, name)()
            return self.add(t, a, err, f"{name}({text})")
        if name == "exp":
            if mx > 20:
                return None
            a = np.exp(xa)
            ma = float(np.max(a, initial=0.0))
            err = ma * math.expm1(ex) + r * ma
        elif name in ("sin", "cos"):
            if mx > 100:
                return None
            a = np.sin(xa) if name == "sin" else np.cos(xa)
            err = ex + r * (1 + mx)
        elif name == "tanh":
            a = np.tanh(xa)
            err = ex + r
        else:
            with np.errstate(over="ignore"):
                a = (1 / (1 + np.exp(-xa.astype(np.float64)))).astype(dtype)
            err = ex / 4 + r
        t = getattr(fg, name)(x.t) if use_fn else getattr(x.t, name)()
        return self.add(t, a, err, f"{name}({x.name})")

    def op_api_math(self) -> Val | None:
        """Functions of the wider tensor API (frontend/mathops.py), each Lipschitz on the range
        drawn, so an input error ex becomes at most L * ex. (erf, with its 100-term series, is
        left to test_unary_functions_match_numpy: compiling it in every program costs minutes.)"""
        x = self.pick()
        name = self.draw(st.sampled_from(["atan", "asinh", "log1p", "expm1", "sinh"]))
        dtype = float_of(x.dtype)
        xa, ex, mx = x.a.astype(dtype), x.err, x.mag
        r = TRANSCENDENTAL_ULPS * UNIT_ROUNDOFF[dtype]
        x64 = xa.astype(np.float64)
        if name == "log1p":  # of |x|, where the slope is at most 1
            if x.dtype == "bool":
                return None
            t, a, lip, text = x.t.abs().log1p(), np.log1p(np.abs(x64)), 1.0, f"log1p(|{x.name}|)"
        elif name in ("expm1", "sinh"):
            if mx > 20:
                return None
            a = np.expm1(x64) if name == "expm1" else np.sinh(x64)
            lip, t, text = math.exp(mx + ex), getattr(x.t, name)(), f"{name}({x.name})"
        else:
            a = {"atan": np.arctan, "asinh": np.arcsinh}[name](x64)
            lip = 1.0
            t = getattr(fg, name)(x.t) if self.draw(st.booleans()) else getattr(x.t, name)()
            text = f"{name}({x.name})"
        a = a.astype(dtype)
        err = lip * ex * 1.01 + r * max(1.0, float(np.max(np.abs(a), initial=0.0)))
        return self.add(t, a, err, text)

    def op_unary_exact(self) -> Val | None:
        x = self.pick(lambda v: v.dtype != "bool")
        if x is None:
            return None
        name = self.draw(st.sampled_from(["relu", "abs", "neg", "clamp"]))
        if name == "relu":
            t, a = (fg.relu(x.t) if self.draw(st.booleans()) else x.t.relu()), np.maximum(x.a, 0)
        elif name == "abs":
            t, a = (fg.abs(x.t) if self.draw(st.booleans()) else x.t.abs()), np.abs(x.a)
        elif name == "neg":
            t, a = -x.t, -x.a
        else:
            lo, hi = (-1, 2) if x.kind == "i" else (-1.5, 0.75)
            t, a = x.t.clamp(lo, hi), np.clip(x.a, lo, hi)
        return self.add(t, np.asarray(a, dtype=x.dtype), x.err, f"{name}({x.name})")

    def op_compare(self) -> Val | None:
        x = self.pick()
        y = self.partner(x.a.shape)
        name = self.draw(st.sampled_from(["lt", "gt", "le", "ge", "eq", "ne"]))
        if isinstance(y, Val) and (x.a.ndim == 0) != (y.a.ndim == 0) and x.dtype != y.dtype:
            return None
        slack = x.err + err_of(y)
        if slack > 0:
            dtype = dtype_of(x, y)
            gap = np.abs(x.a.astype(np.float64) - a_of(y, dtype).astype(np.float64))
            if gap.size and float(np.min(gap)) <= 2 * slack:
                # a near tie, which rounding may decide either way: compare with a threshold
                # halfway between two values far enough apart instead
                y = self.threshold(x)
                if y is None:
                    return None
        reverse = not isinstance(y, Val) and self.draw(st.booleans())
        lhs, rhs = (y, x) if reverse else (x, y)
        dtype = dtype_of(lhs, rhs)
        la, ra = a_of(lhs, dtype), a_of(rhs, dtype)
        fn = getattr(operator, name)
        text = f"{label(lhs)} {name} {label(rhs)}"
        return self.add(fn(t_of(lhs), t_of(rhs)), fn(la, ra), 0.0, text)

    def threshold(self, x: Val) -> float | None:
        """A Python float further than 2 * x.err from every element of x, in the compared dtype."""
        values = np.unique(x.a.astype(np.float64))
        mids = [float(lo + hi) / 2 for lo, hi in zip(values[:-1], values[1:])]
        if not mids:
            return None
        t = self.draw(st.sampled_from(mids))
        # a short literal for the program listing, if one is close enough
        t = next((round(t, k) for k in range(1, 9) if abs(round(t, k) - t) < 1e-3 * abs(t)), t)
        dtype = promote_scalar(x.dtype, t)
        gap = np.abs(as_np(x.a, dtype).astype(np.float64) - float(as_np(np.asarray(t), dtype)))
        return t if float(np.min(gap)) > 2 * x.err else None

    def op_where(self) -> Val | None:
        cond = self.pick(lambda v: v.dtype == "bool")
        if cond is None:
            return None
        a = self.partner(cond.a.shape)
        a_shape = a.a.shape if isinstance(a, Val) else ()
        b = self.partner(np.broadcast_shapes(cond.a.shape, a_shape))
        if not isinstance(a, Val) and not isinstance(b, Val):
            return None
        if isinstance(a, Val) and isinstance(b, Val) and (a.a.ndim == 0) != (b.a.ndim == 0):
            if a.dtype != b.dtype:
                return None  # PyTorch lets a 0-d tensor promote like a scalar; not drawn here
        dtype = dtype_of(a, b)
        out = np.where(cond.a, a_of(a, dtype), a_of(b, dtype))
        how = self.draw(st.sampled_from(["fg.where", "method"]))
        if how == "method" and isinstance(a, Val):
            t = a.t.where(cond.t, t_of(b))
        else:
            t = fg.where(cond.t, t_of(a), t_of(b))
        text = f"where({cond.name}, {label(a)}, {label(b)})"
        return self.add(t, out, max(err_of(a), err_of(b)), text)

    def op_cast(self) -> Val | None:
        x = self.pick()
        dtype = self.draw(st.sampled_from([d for d in DTYPES if d != x.dtype]))
        if x.kind == "f" and dtype != "float64" and x.err > 0:
            xa = x.a.astype(np.float64)
            if dtype == "bool" and x.a.size and float(np.min(np.abs(xa))) <= 2 * x.err:
                return None
            if KIND[dtype] == "i" and x.a.size:
                if float(np.min(np.abs(xa - np.round(xa)))) <= 2 * x.err:
                    return None  # truncation jumps at integers
        a = as_np(x.a, dtype)
        err = x.err + (rounding(dtype, x.mag) if x.dtype == "float64" and dtype == "float32" else 0)
        if KIND[dtype] != "f":
            err = 0.0
        how = self.draw(st.sampled_from(["cast", "to", "type", "method"]))
        method = {
            "float32": "float",
            "float64": "double",
            "int32": "int",
            "int64": "long",
            "bool": "bool",
        }
        if how == "method":
            t = getattr(x.t, method[dtype])()
        else:
            t = getattr(x.t, how)(getattr(fg, method[dtype]) if how == "to" else dtype)
        return self.add(t, a, err, f"{x.name}.{how}({dtype})")

    # ---------------------------------------------------------------- views
    def op_reshape(self) -> Val | None:
        x = self.pick()
        n = x.a.size
        shape = []
        rest = n
        for _ in range(self.draw(st.integers(0, 3))):
            divisors = [d for d in range(1, min(rest, 7) + 1) if rest % d == 0] or [0, 1, 2]
            d = self.draw(st.sampled_from(divisors))
            shape.append(d)
            rest = rest // d if d else rest
        shape.append(rest)
        shape = self.draw(st.permutations(shape))
        how = self.draw(st.sampled_from(["tuple", "args", "minus_one", "view"]))
        arg = list(shape)
        if how == "minus_one" and n > 0 and 0 not in shape:
            arg[self.draw(st.integers(0, len(arg) - 1))] = -1
        if how == "view":
            if not x.t.is_contiguous():
                return None
            t = x.t.view(*arg)
        else:
            t = x.t.reshape(*arg) if how == "args" else x.t.reshape(tuple(arg))
        return self.add(t, x.a.reshape(shape), x.err, f"{x.name}.reshape{tuple(arg)}")

    def op_permute(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        nd = x.a.ndim
        how = self.draw(st.sampled_from(["permute", "transpose", "T", "mT", "t"]))
        if how == "permute":
            order = self.draw(st.permutations(range(nd)))
            dims = [d - nd if self.draw(st.booleans()) else d for d in order]
            a = x.a.transpose(order)
            return self.add(x.t.permute(*dims), a, x.err, f"{x.name}.permute{tuple(dims)}")
        if how == "transpose":
            d0, d1 = self.draw(st.integers(-nd, nd - 1)), self.draw(st.integers(-nd, nd - 1))
            a = np.swapaxes(x.a, d0, d1)
            return self.add(x.t.transpose(d0, d1), a, x.err, f"{x.name}.transpose({d0}, {d1})")
        if how == "T":
            return self.add(x.t.T, x.a.T, x.err, f"{x.name}.T")
        if how == "t" and nd <= 2:
            return self.add(x.t.t(), x.a.T, x.err, f"{x.name}.t()")
        if nd < 2:
            return None
        return self.add(x.t.mT, np.swapaxes(x.a, -2, -1), x.err, f"{x.name}.mT")

    def op_expand(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim <= 4)
        if x is None:
            return None
        lead = self.draw(st.integers(0, 4 - x.a.ndim))
        shape = [self.draw(st.integers(1, 4)) for _ in range(lead)]
        arg = list(shape)
        for s in x.a.shape:
            if s == 1:
                new = self.draw(st.integers(1, 5))
                shape.append(new)
                arg.append(new)
            else:
                shape.append(s)
                arg.append(self.draw(st.sampled_from([s, -1])))
        if self.draw(st.booleans()):
            t = x.t.expand(*arg)
        else:
            t = x.t.expand(tuple(arg)) if self.draw(st.booleans()) else x.t.broadcast_to(shape)
        a = np.broadcast_to(x.a, tuple(shape))
        return self.add(t, a, x.err, f"{x.name}.expand{tuple(arg)}")

    def op_flatten(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        nd = x.a.ndim
        start = self.draw(st.integers(0, nd - 1))
        end = self.draw(st.integers(start, nd - 1))
        shape = x.a.shape[:start] + (math.prod(x.a.shape[start : end + 1]),) + x.a.shape[end + 1 :]
        s_arg = start - nd if self.draw(st.booleans()) else start
        e_arg = end - nd if self.draw(st.booleans()) else end
        t = x.t.flatten(s_arg, e_arg) if self.draw(st.booleans()) else fg.flatten(x.t, s_arg, e_arg)
        return self.add(t, x.a.reshape(shape), x.err, f"{x.name}.flatten({s_arg}, {e_arg})")

    def op_squeeze(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        nd = x.a.ndim
        how = self.draw(st.sampled_from(["none", "int", "tuple", "unsqueeze", "unsqueeze"]))
        if how == "unsqueeze":
            if nd >= 4:
                return None
            d = self.draw(st.integers(-nd - 1, nd))
            a = np.expand_dims(x.a, d)
            return self.add(x.t.unsqueeze(d), a, x.err, f"{x.name}.unsqueeze({d})")
        if how == "none":
            return self.add(
                x.t.squeeze(),
                x.a.reshape(tuple(s for s in x.a.shape if s != 1)),
                x.err,
                f"{x.name}.squeeze()",
            )
        dims = self.distinct_axes(nd)
        if how == "int":
            dims = dims[:1]
        arg = dims[0] if how == "int" else tuple(dims)
        axes = {d % nd for d in dims if x.a.shape[d] == 1}
        a = x.a.reshape(tuple(s for i, s in enumerate(x.a.shape) if i not in axes))
        return self.add(x.t.squeeze(arg), a, x.err, f"{x.name}.squeeze({arg})")

    def op_index(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        index: list = []
        for size in x.a.shape:
            kind = self.draw(st.sampled_from(["slice", "slice", "int", "full"]))
            if kind == "int":
                index.append(self.draw(st.integers(-size, size - 1)))
            elif kind == "full":
                index.append(slice(None))
            else:
                bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
                step = self.draw(st.sampled_from([None, 1, 2, 3]))
                sl = slice(self.draw(bound), self.draw(bound), step)
                if len(range(*sl.indices(size))) == 0:  # empty views: test_empty_views
                    sl = slice(sl.start, None, step)
                    if len(range(*sl.indices(size))) == 0:
                        sl = slice(None, None, step)
                index.append(sl)
        if self.draw(st.booleans()):  # None axes
            for _ in range(self.draw(st.integers(1, 2))):
                index.insert(self.draw(st.integers(0, len(index))), None)
        if self.draw(st.booleans()):  # an ellipsis standing for a run of full slices (maybe none)
            k = self.draw(st.integers(0, len(index)))
            j = k
            while j < len(index) and index[j] == slice(None) and self.draw(st.booleans()):
                j += 1
            index[k:j] = [Ellipsis]
        elif self.draw(st.booleans()):  # or trailing full slices left out
            while index and index[-1] == slice(None):
                index.pop()
        key = tuple(index) if len(index) != 1 or self.draw(st.booleans()) else index[0]
        a = x.a[key]
        return self.add(x.t[key], np.asarray(a), x.err, f"{x.name}[{key!r}]")

    def op_empty_index(self) -> Val | None:
        """A slice that selects nothing along one axis (the random graphs keep views non-empty)."""
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        axis = self.draw(st.integers(0, x.a.ndim - 1))
        size = x.a.shape[axis]
        empty = [slice(size, None), slice(1, 1), slice(-1, 0), slice(3, 1, 2)]
        sl = self.draw(st.sampled_from(empty))
        key = (slice(None),) * axis + (sl,)
        return self.add(x.t[key], x.a[key], x.err, f"{x.name}[{key!r}]")

    def op_pad(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        nd = x.a.ndim
        k = self.draw(st.integers(1, nd))
        pad = []
        for axis in range(nd - 1, nd - 1 - k, -1):
            size = x.a.shape[axis]
            lo = self.draw(st.integers(-(size - 1), 3))
            hi = self.draw(st.integers(-(size - 1 + min(lo, 0)), 3))
            pad += [lo, hi]
        if x.dtype == "bool":
            value = self.draw(st.sampled_from([False, True]))
        elif x.kind == "i":
            value = self.draw(st.sampled_from([0, 0, 1, -7]))
        else:
            value = self.draw(st.sampled_from([0.0, 0.0, 1.5, -2.0]))
        a = x.a
        widths = [(0, 0)] * nd
        for j in range(k):
            axis = nd - 1 - j
            lo, hi = pad[2 * j], pad[2 * j + 1]
            a = a[(slice(None),) * axis + (slice(max(-lo, 0), a.shape[axis] - max(-hi, 0)),)]
            widths[axis] = (max(lo, 0), max(hi, 0))
        a = np.pad(a, widths, constant_values=value)
        if value == 0 and self.draw(st.booleans()):
            t = x.t.pad(pad) if self.draw(st.booleans()) else fg.pad(x.t, pad)
        else:
            t = x.t.pad(pad, value) if self.draw(st.booleans()) else fg.pad(x.t, pad, value=value)
        return self.add(t, a, x.err, f"{x.name}.pad({pad}, value={value})")

    def op_cat(self) -> Val | None:
        x = self.pick(lambda v: v.a.ndim >= 1)
        if x is None:
            return None
        nd = x.a.ndim
        stack = nd < 4 and self.draw(st.booleans())
        d = self.draw(st.integers(-nd - 1, nd) if stack else st.integers(-nd, nd - 1))
        parts = [x]
        for _ in range(self.draw(st.integers(1, 2))):
            how = self.draw(st.sampled_from(["self", "leaf"]))
            if how == "self":
                parts.append(x)
                continue
            shape = list(x.a.shape)
            if not stack:
                shape[d] = self.draw(st.integers(1, 4))
            # PyTorch promotes across cat; a 0-d-free list, so no scalar rule applies
            if math.prod(shape) > self.max_numel:
                return None
            parts.append(self.leaf(shape))
        dtype = parts[0].dtype
        for p in parts:
            dtype = promote(dtype, p.dtype)
        arrays = [as_np(p.a, dtype) for p in parts]
        a = np.stack(arrays, d) if stack else np.concatenate(arrays, d)
        fn = fg.stack if stack else fg.cat
        tensors = [p.t for p in parts]
        t = fn(tensors, d) if self.draw(st.booleans()) else fn(tuple(tensors), dim=d)
        names = ", ".join(p.name for p in parts)
        return self.add(t, a, max(p.err for p in parts), f"{fn.__name__}([{names}], {d})")

    def op_contiguous(self) -> Val | None:
        x = self.pick()
        return self.add(x.t.contiguous(), x.a, x.err, f"{x.name}.contiguous()")

    # ---------------------------------------------------------------- reductions
    def dims(self, nd: int, allow_tuple: bool = True):
        """None, an int or a non-empty tuple of distinct axes, negative or not."""
        kinds = ["none", "int"] + (["tuple"] if allow_tuple else [])
        kind = self.draw(st.sampled_from(kinds))
        if kind == "none" or nd == 0:
            return None, None
        if kind == "int":
            d = self.draw(st.integers(-nd, nd - 1))
            return d, (d % nd,)
        dims = self.distinct_axes(nd)
        return tuple(dims), tuple(sorted(d % nd for d in dims))

    def distinct_axes(self, nd: int) -> list[int]:
        """1 to nd distinct axes of an nd-dim tensor in any order, each maybe negative."""
        order = self.draw(st.permutations(range(nd)))[: self.draw(st.integers(1, nd))]
        return [d - nd if self.draw(st.booleans()) else d for d in order]

    def op_sum_mean(self) -> Val | None:
        x = self.pick()
        name = self.draw(st.sampled_from(["sum", "mean"]))
        if name == "mean" and (x.kind != "f" or x.a.size == 0):
            return None
        dim, axes = self.dims(x.a.ndim)
        keepdim = self.draw(st.booleans())
        axes_np = axes if axes is not None else tuple(range(x.a.ndim))
        n = math.prod(x.a.shape[i] for i in axes_np)
        dtype = x.dtype if x.kind == "f" else "int64"
        total = np.sum(np.abs(x.a.astype(np.float64)), axis=axes_np, keepdims=keepdim)
        if name == "sum":
            a = np.sum(x.a, axis=axes_np, keepdims=keepdim, dtype=dtype)
            err = n * x.err + rounding(dtype, float(np.max(total, initial=0.0)), n + 1)
        else:
            a = np.mean(x.a, axis=axes_np, keepdims=keepdim, dtype=dtype)
            err = x.err + rounding(dtype, float(np.max(total, initial=0.0)) / n, n + 3)
        how = self.draw(st.sampled_from(["method", "function"]))
        if how == "function":
            t = getattr(fg, name)(x.t, dim, keepdim)
        elif keepdim or self.draw(st.booleans()):
            t = getattr(x.t, name)(dim=dim, keepdim=keepdim)
        else:
            t = getattr(x.t, name)(dim) if dim is not None else getattr(x.t, name)()
        return self.add(t, a, err, f"{x.name}.{name}(dim={dim}, keepdim={keepdim})")

    def argmax_ok(self, x: Val, axis: int | None, largest: bool) -> bool:
        """The winner along `axis` is certain: exact values, or a lead larger than the error."""
        if x.err == 0:
            return True
        a = x.a.astype(np.float64) * (1 if largest else -1)
        a = a.reshape(-1) if axis is None else np.moveaxis(a, axis, -1)
        if a.shape[-1] < 2:
            return True
        top2 = np.sort(a, axis=-1)[..., -2:]
        return bool(np.all(top2[..., 1] - top2[..., 0] > 2 * x.err))

    def op_max_min(self) -> Val | None:
        x = self.pick(lambda v: v.a.size > 0)
        if x is None:
            return None
        largest = self.draw(st.booleans())
        name = "max" if largest else "min"
        npf = np.max if largest else np.min
        how = self.draw(st.sampled_from(["amax", "max_all", "max_dim", "argmax"]))
        keepdim = self.draw(st.booleans())
        nd = x.a.ndim
        if how == "amax":
            dim, axes = self.dims(nd)
            fn = getattr(x.t, "a" + name)
            t = fn(dim, keepdim) if dim is not None else fn(keepdim=keepdim)
            a = npf(x.a, axis=axes, keepdims=keepdim)
            return self.add(t, a, x.err, f"{x.name}.a{name}({dim}, keepdim={keepdim})")
        if how == "max_all":
            return self.add(getattr(x.t, name)(), npf(x.a), x.err, f"{x.name}.{name}()")
        if nd == 0:
            return None
        d = self.draw(st.integers(-nd, nd - 1))
        npa = np.argmax if largest else np.argmin
        if how == "argmax":
            if x.dtype == "bool":
                return None  # PyTorch refuses argmax and argmin of bool
            if self.draw(st.booleans()):
                if not self.argmax_ok(x, None, largest):
                    return None
                fn = getattr(x.t, "arg" + name)
                t = fg.argmax(x.t) if largest and self.draw(st.booleans()) else fn()
                return self.add(t, np.asarray(npa(x.a)), 0.0, f"{x.name}.arg{name}()")
            if not self.argmax_ok(x, d % nd, largest):
                return None
            t = getattr(x.t, "arg" + name)(d, keepdim)
            a = npa(x.a, axis=d, keepdims=keepdim)
            return self.add(t, a, 0.0, f"{x.name}.arg{name}({d}, keepdim={keepdim})")
        result = getattr(x.t, name)(d, keepdim)
        values, indices = result
        assert values is result.values and indices is result.indices
        a = npf(x.a, axis=d, keepdims=keepdim)
        v = self.add(values, a, x.err, f"{x.name}.{name}({d}, keepdim={keepdim}).values")
        if not self.argmax_ok(x, d % nd, largest):
            return v
        a = npa(x.a, axis=d, keepdims=keepdim)
        return self.add(indices, a, 0.0, f"{x.name}.{name}({d}, keepdim={keepdim}).indices")

    # ---------------------------------------------------------------- matmul
    def op_matmul(self) -> Val | None:
        x = self.pick(lambda v: v.dtype != "bool" and v.a.ndim >= 1)
        if x is None:
            return None
        on_left = self.draw(st.booleans())
        nd = x.a.ndim
        k = x.a.shape[-1] if on_left else x.a.shape[0] if nd == 1 else x.a.shape[-2]
        batch = x.a.shape[:-2]
        form = self.draw(st.sampled_from(["vector", "matrix", "batched"]))
        n = self.draw(st.integers(1, 6))
        if form == "vector":
            shape = (k,)
        elif form == "matrix":
            shape = (k, n) if on_left else (n, k)
        else:
            bshape = self.broadcastable_shape(batch, max_dims=2) if batch else self.shape(2)
            shape = bshape + ((k, n) if on_left else (n, k))
        if math.prod(shape) > self.max_numel:
            return None
        y = self.leaf(shape, x.dtype)
        lhs, rhs = (x, y) if on_left else (y, x)
        a = np.matmul(lhs.a, rhs.a)
        la, ra = np.abs(lhs.a.astype(np.float64)), np.abs(rhs.a.astype(np.float64))
        bound = float(np.max(np.matmul(la, ra), initial=0.0))
        err = k * (lhs.err * rhs.mag + rhs.err * lhs.mag) + rounding(x.dtype, bound, k + 1)
        how = self.draw(st.sampled_from(["@", "fg.matmul", "method", "dot"]))
        if how == "dot" and lhs.a.ndim == 1 and rhs.a.ndim == 1:
            t = lhs.t.dot(rhs.t)
        elif how == "fg.matmul":
            t = fg.matmul(lhs.t, rhs.t)
        elif how == "method":
            t = lhs.t.matmul(rhs.t)
        else:
            t = lhs.t @ rhs.t
        return self.add(t, a, err, f"{lhs.name} @ {rhs.name}")

    # ---------------------------------------------------------------- running it
    def op_realize(self) -> Val | None:
        """Realize a value in the middle of the program; later ops read its buffer."""
        x = self.pick()
        (ref,) = evaluate_many([x.t.node])
        x.t.realize()
        self.check_value(x, ref)
        return None

    def step(self, ops: list[str]) -> None:
        """Apply one op drawn from `ops`; ops that do not apply to the values drawn are redrawn."""
        for _ in range(20):
            name = self.draw(st.sampled_from(ops))
            if getattr(self, "op_" + name)() is not None or name == "realize":
                return

    def check_value(self, v: Val, ref: np.ndarray) -> None:
        got = v.t.numpy()
        assert got.shape == v.a.shape, self.report(f"{v.name}: shape {got.shape}")
        assert got.dtype == v.a.dtype, self.report(f"{v.name}: dtype {got.dtype}")
        assert ref.shape == v.a.shape and ref.dtype == v.a.dtype, self.report(
            f"{v.name}: the reference evaluator gives {ref.shape} {ref.dtype}"
        )
        for want, who in ((v.a, "numpy"), (ref, "the reference evaluator")):
            if v.kind != "f":
                bad = got != want
            else:
                w64, g64 = want.astype(np.float64), got.astype(np.float64)
                tol = ATOL[v.dtype] + RTOL[v.dtype] * np.abs(w64) + 4 * v.err
                bad = ~(np.abs(g64 - w64) <= tol)
            if np.any(bad):
                i = tuple(int(j) for j in np.argwhere(bad)[0])
                raise AssertionError(
                    self.report(
                        f"{v.name} differs from {who} at {np.count_nonzero(bad)} of {got.size} "
                        f"elements; first at {i}: got {got[i]!r}, want {want[i]!r} "
                        f"(error bound {v.err:.3g})"
                    )
                )

    def check(self, outputs: list[Val]) -> None:
        """Compare compiled values with numpy and with the reference run before realizing."""
        refs = evaluate_many([v.t.node for v in outputs])
        if self.draw(st.booleans()):
            fg.realize(*(v.t for v in outputs))
        for v, ref in zip(outputs, refs):
            self.check_value(v, ref)


def broadcasts(a, b) -> bool:
    """numpy's rule, for at most 4 dims."""
    fits = all(x == y or x == 1 or y == 1 for x, y in zip(reversed(a), reversed(b)))
    return fits and len(a) <= 4 and len(b) <= 4


# op groups; an op listed twice is drawn twice as often
ELEMENTWISE = ["arith"] * 3 + ["pow", "unary_math", "unary_math", "unary_exact", "compare"]
ELEMENTWISE += ["api_math"]
ELEMENTWISE += ["where", "cast"]
VIEWS = ["reshape", "permute", "expand", "flatten", "squeeze", "index", "index", "pad", "cat"]
VIEWS += ["contiguous"]
REDUCTIONS = ["sum_mean", "sum_mean", "max_min", "max_min"]


def run_program(
    data,
    ops: list[str],
    n_ops: int,
    *,
    start: list[str] | None = None,
    end: list[str] | None = None,
    n_outputs: int = 1,
    dtypes=DTYPES,
    shape=None,
    max_numel: int = MAX_NUMEL,
) -> None:
    """One random program: a leaf, an op from `start`, `n_ops` from `ops`, one from `end`."""
    prog = Program(data, max_numel)
    try:
        prog.leaf(shape or prog.shape(), prog.draw(st.sampled_from(dtypes)))
        for group in [start] + [ops] * n_ops + [end]:
            if group:
                prog.step(group)
        outputs = [prog.pool[-1]]
        for _ in range(n_outputs - 1):
            extra = prog.draw(st.sampled_from(prog.pool))
            if all(extra is not o for o in outputs):
                outputs.append(extra)
        prog.check(outputs)
    except Exception as e:
        if "program:" not in str(e):
            last = prog.log[-1].split(" ")[0] if prog.log else "the first leaf"
            e.add_note(prog.report(f"while building or running {last}"))
        raise


@settings(max_examples=160, **SETTINGS)
@given(st.data(), st.integers(1, 6))
def test_elementwise_graphs(data, n_ops):
    """Chains and DAGs of elementwise ops with broadcasting, scalars on either side and casts."""
    run_program(data, ELEMENTWISE, n_ops)


@settings(max_examples=160, **SETTINGS)
@given(st.data(), st.integers(1, 6))
def test_view_graphs(data, n_ops):
    """Every view op, composed with each other and with elementwise work read through them."""
    run_program(data, VIEWS * 2 + ELEMENTWISE, n_ops)


@settings(max_examples=140, **SETTINGS)
@given(st.data(), st.integers(0, 5))
def test_reduction_graphs(data, n_ops):
    """Reductions over int and tuple dims, keepdim both, fed and followed by views and math."""
    run_program(data, REDUCTIONS + ELEMENTWISE + VIEWS, n_ops, end=REDUCTIONS)


@settings(max_examples=100, **SETTINGS)
@given(st.data(), st.integers(0, 3))
def test_matmul_graphs(data, n_ops):
    """matmul of 1-D, 2-D and batched operands, with work before and after it."""
    ops = ELEMENTWISE + VIEWS + ["matmul"]
    run_program(data, ops, n_ops, end=["matmul"], dtypes=("float32", "float64", "int32", "int64"))


@settings(max_examples=120, **SETTINGS)
@given(st.data(), st.integers(2, 8), st.integers(1, 3))
def test_mixed_graphs(data, n_ops, n_outputs):
    """Everything at once, some values realized midway, several outputs realized together."""
    ops = ELEMENTWISE + VIEWS + REDUCTIONS + ["matmul", "realize"]
    run_program(data, ops, n_ops, n_outputs=n_outputs)


@settings(max_examples=40, **SETTINGS)
@given(st.data(), st.integers(0, 3))
def test_empty_views(data, n_ops):
    """A slice that selects nothing is an empty tensor that computes like numpy's (sums are 0)."""
    ops = ["arith", "unary_exact", "unary_math", "cast", "sum_mean", "reshape", "permute"]
    ops += ["expand", "squeeze", "pad", "cat", "contiguous"]
    run_program(data, ops, n_ops, start=["empty_index"])


@settings(max_examples=30, **SETTINGS)
@given(st.data(), st.integers(1, 4))
def test_large_graphs(data, n_ops):
    """Tensors large enough that kernels are split over the thread pool."""
    shape = data.draw(st.sampled_from([(64, 48), (8, 96, 50), (200, 3, 60), (40000,), (3, 33000)]))
    ops = ELEMENTWISE + VIEWS + REDUCTIONS + ["matmul"]
    run_program(data, ops, n_ops, shape=shape, max_numel=1 << 18)


UNARY = {
    "exp": (np.exp, (-20, 20)),
    "log": (np.log, (1e-3, 100)),
    "sin": (np.sin, (-100, 100)),
    "cos": (np.cos, (-100, 100)),
    "sqrt": (np.sqrt, (0, 100)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), (1e-2, 100)),
    "reciprocal": (np.reciprocal, (0.1, 100)),
    "tanh": (np.tanh, (-8, 8)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-30, 30)),
    "relu": (lambda x: np.maximum(x, 0), (-5, 5)),
    "abs": (np.abs, (-5, 5)),
    "neg": (np.negative, (-5, 5)),
    "square": (np.square, (-100, 100)),
    # the wider tensor API (frontend/mathops.py; tests/frontend/test_mathops.py goes to ulps)
    "log1p": (np.log1p, (-0.999, 100)),
    "expm1": (np.expm1, (-20, 20)),
    "log2": (np.log2, (1e-3, 100)),
    "log10": (np.log10, (1e-3, 100)),
    "exp2": (np.exp2, (-30, 30)),
    "erf": (np.vectorize(math.erf, otypes=[np.float64]), (-6, 6)),
    "atan": (np.arctan, (-100, 100)),
    "asin": (np.arcsin, (-1, 1)),
    "acos": (np.arccos, (-1, 1)),
    "tan": (np.tan, (-1.5, 1.5)),
    "sinh": (np.sinh, (-20, 20)),
    "cosh": (np.cosh, (-20, 20)),
    "asinh": (np.arcsinh, (-100, 100)),
    "atanh": (np.arctanh, (-0.999, 0.999)),
    "floor": (np.floor, (-100, 100)),
    "ceil": (np.ceil, (-100, 100)),
    "trunc": (np.trunc, (-100, 100)),
    "round": (np.round, (-100, 100)),
    "sign": (np.sign, (-5, 5)),
}


@pytest.mark.parametrize("scale", ["full", "small", "tiny"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_functions_match_numpy(name, dtype, scale):
    """Each elementwise function on a dense grid of its domain: float32 to rtol 1e-4, atol 1e-5,
    float64 to rtol 1e-10, atol 1e-12. `small` is |x| <= 0.3 (where tanh switches to a series),
    `tiny` is |x| <= 1e-3.
    """
    fn, (lo, hi) = UNARY[name]
    if scale != "full":
        lim = 0.3 if scale == "small" else 1e-3
        lo, hi = max(lo, -lim), min(hi, lim)
        lo = lo if lo < hi else hi / 2
    x = np.linspace(lo, hi, 4099).astype(dtype)
    t = getattr(fg.from_numpy(x), name)()
    (ref,) = evaluate_many([t.node])
    got = t.numpy()
    want = fn(x.astype(np.float64))
    assert got.dtype == np.dtype(dtype) and ref.dtype == np.dtype(dtype)
    for value, who in ((got, "compiled"), (ref, "reference")):
        err = np.abs(value.astype(np.float64) - want)
        tol = ATOL[dtype] + RTOL[dtype] * np.abs(want)
        i = int(np.argmax(err - tol))
        assert err[i] <= tol[i], (
            f"{name}({x[i]!r}) in {dtype}: {who} gives {value[i]!r}, numpy {want[i]!r} "
            f"(error {err[i]:.3g}, tolerance {tol[i]:.3g})"
        )
