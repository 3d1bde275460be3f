"""Activation functions (`F.gelu`, `F.silu`, ...) and their modules, as torch.nn.

Each is a composition of frontend ops, so it fuses into its neighbours and
its gradients (of any order) come from the primitives' rules. Branches are
written with `where` on the same condition PyTorch's backward formula tests,
so the gradient at a kink is PyTorch's (leaky_relu at 0: the slope; hardtanh
at its limits: 0; hardswish at -3: 0), and the branch not taken is fed a
safe argument so that no inf or NaN leaks into the gradient through it.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> x = fg.tensor([-1.0, 0.0, 2.0])
>>> [round(v, 4) for v in F.gelu(x).tolist()]
[-0.1587, 0.0, 1.9545]
>>> F.hardtanh(x * 2).tolist()
[-1.0, 0.0, 1.0]
"""

from __future__ import annotations

import math
import warnings

from ..nnapi import (
    ShapeError,
    Tensor,
    autocast_op,
    composite,
    fail,
    full,
    hardtanh_values,
    register_composite,
    where,
)
from ..nnapi import with_grad as _with_grad
from .module import Module, Parameter, place

# ---------------------------------------------------------------- private numerics


def _one_node(kind: str, x: Tensor, params: tuple = ()) -> Tensor:
    """Activation `kind` of float `x` as one macro node, its expansion the composed form
    registered below (`_<kind>(x, *params)`): 20 to 60 tensor ops, which were built on
    every call (softplus 0.3 ms), are built once, when a plan is compiled."""
    return composite(kind, [x], params, x.shape, x.dtype)


def _in_place(input: Tensor, result: Tensor, inplace: bool, op: str) -> Tensor:
    """torch's `inplace=True`: `result` is written into `input` (whose other users see it,
    as in torch), and `input` returned; a leaf that requires grad refuses, as in torch."""
    return input._inplace(result, op) if inplace else result


def _log1p(u: Tensor) -> Tensor:
    """log(1 + u) accurate for tiny u (Goldberg's trick: log(w) * u / (w - 1), w = 1 + u).

    The factor u / (w - 1) is 1 up to rounding, so it carries no gradient; where w
    rounds to 1 the answer is u itself.
    """
    w = 1.0 + u
    exact = w == 1.0
    factor = (u / where(exact, 1.0, w - 1.0)).detach()
    return where(exact, u, where(exact, 1.0, w).log() * factor)


def _expm1(x: Tensor) -> Tensor:
    """exp(x) - 1 without cancellation near 0 (a Taylor polynomial for |x| < 0.1)."""
    small = x.abs() < 0.1
    s = where(small, x, 0.0)
    series = s * (1.0 + s * (1 / 2 + s * (1 / 6 + s * (1 / 24 + s * (1 / 120 + s / 720)))))
    return where(small, series, where(small, 0.0, x).exp() - 1.0)


_ERFC_COEFFS = (  # Numerical Recipes' erfcc: relative error below 1.2e-7 everywhere
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


def _erf(x: Tensor) -> Tensor:
    """erf(x): its Taylor series below |x| = 0.5, else 1 - erfc(|x|) with the sign restored.

    (A private helper for gelu; absolute error below 1.2e-7.) Its gradient is the exact
    2/sqrt(pi) e^-x^2, not the derivative of the polynomial: autodiff through the ~60 ops
    above built a backward of hundreds, which stored and re-read each Horner stage (gelu's
    forward and backward moved ~600 MB of a char transformer step's 877).
    """
    small = x.abs() < 0.5
    s = where(small, x, 0.0)
    s2 = s * s
    series = (2 / math.sqrt(math.pi)) * s
    series = series * (
        1.0
        + s2
        * (-1 / 3 + s2 * (1 / 10 + s2 * (-1 / 42 + s2 * (1 / 216 + s2 * (-1 / 1320 + s2 / 9360)))))
    )
    z = where(small, 1.0, x.abs())
    t = 1.0 / (1.0 + 0.5 * z)
    poly = _ERFC_COEFFS[-1]
    for c in reversed(_ERFC_COEFFS[:-1]):
        poly = c + t * poly
    erfc = t * (poly - z * z).exp()
    big = where(x < 0, erfc - 1.0, 1.0 - erfc)
    slope = (2 / math.sqrt(math.pi)) * (-x * x).exp()
    return _with_grad(where(small, series, big), [(x, slope)])


def _softplus_unit(z: Tensor) -> Tensor:
    """log(1 + exp(z)), stable on both sides (gradient sigmoid(z), 1/2 at 0): z +
    log1p(e^-z) from 0 up, log1p(e^z) below, one exponential and one log1p for both (of
    -|z| written as each side's, whose gradient is that side's: -1 at 0)."""
    pos = z >= 0
    tail = _log1p(where(pos, -z, z).exp())
    return where(pos, z + tail, tail)


# ---------------------------------------------------------------- functions


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """max(x, 0); with `inplace=True` written into `input` too, as torch's."""
    return input.relu_() if inplace else input.relu()


def sigmoid(input: Tensor) -> Tensor:
    """1 / (1 + exp(-x)) (`Tensor.sigmoid`: its gradient y (1 - y) is computed as
    z / (1 + z)^2 with z = e^-|x|, finite everywhere and accurate where y is near 1)."""
    return input.sigmoid()


def tanh(input: Tensor) -> Tensor:
    """tanh(x) (`Tensor.tanh`, whose gradient is torch's 1 - y^2)."""
    return input.tanh()


def _softmax_dim(ndim: int) -> int:
    # torch's legacy rule for softmax(dim=None), with its warning
    warnings.warn(
        "Implicit dimension choice for softmax has been deprecated. "
        "Change the call to include dim=X as an argument.",
        stacklevel=3,
    )
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """exp(x) / sum(exp(x)) along `dim`, computed stably (the max is subtracted first);
    `dtype`: the input is cast to it first (an integer input needs one, as in PyTorch)."""
    return input.softmax(_softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """x - log(sum(exp(x))) along `dim`, computed stably; `dtype` as softmax's."""
    return input.log_softmax(_softmax_dim(input.ndim) if dim is None else dim, dtype=dtype)


@autocast_op("gelu")
def gelu(input: Tensor, approximate: str = "none") -> Tensor:
    """x * Phi(x) (approximate='none'), or PyTorch's tanh approximation (approximate='tanh')."""
    x = input._float()
    if approximate == "tanh":
        return _one_node("gelu_tanh", x)
    if approximate != "none":
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    if x.dtype.itemsize < 8:  # one node a call: its ~60 primitives built when compiled
        return composite("gelu", [x], (), x.shape, x.dtype)
    return _gelu(x, Tensor.erf)


def _gelu_tanh(x: Tensor) -> Tensor:
    """PyTorch's tanh approximation of gelu."""
    inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)
    # beyond +-20 tanh is +-1 in float32 and float64 alike; the clamp keeps its gradient finite
    return 0.5 * x * (1.0 + inner.clamp(-20.0, 20.0).tanh())


def _gelu(x: Tensor, erf) -> Tensor:
    """x Phi(x) = x (1 + erf(x / sqrt 2)) / 2 with `erf`: float32 (and 16 bits) the short
    `_erf` (1.2e-7, about an ulp of 1), float64 the full-precision `Tensor.erf`."""
    return 0.5 * x * (1.0 + erf(x * (1 / math.sqrt(2))))


# gelu of 4-byte (and 2-byte) floats as one macro node (ir/macro.py): a transformer's plain
# step built its erf's ~60 nodes a block, forward (ViT: 1.7 ms of Python a call under a
# profiler); its gradient, a macro too, is derived when a plan is compiled
register_composite("gelu", lambda tensors, params: _gelu(tensors[0], _erf), deferred_grad=True)
# activations of 20 to 60 ops as one node each (`_one_node`)
for _kind, _composed in {
    "gelu_tanh": lambda x: _gelu_tanh(x),
    "mish": lambda x: _mish(x),
    "elu": lambda x, alpha: _elu(x, alpha),
    "celu": lambda x, alpha: _celu(x, alpha),
    "softplus": lambda x, beta, threshold: _softplus(x, beta, threshold),
    "logsigmoid": lambda x: _logsigmoid(x),
}.items():
    register_composite(_kind, lambda tensors, params, f=_composed: f(tensors[0], *params))


@autocast_op("silu")
def silu(input: Tensor, inplace: bool = False) -> Tensor:
    """x * sigmoid(x) (also called swish)."""
    x = input._float()
    return _in_place(input, x * x.sigmoid(), inplace, "silu_")


@autocast_op("mish")
def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * tanh(softplus(x))."""
    x = input._float()
    return _in_place(input, _one_node("mish", x), inplace, "mish_")


def _mish(x: Tensor) -> Tensor:
    return x * _softplus_unit(x).tanh()


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """x for x > 0, else negative_slope * x (the gradient at 0 is the slope, as PyTorch)."""
    return _in_place(input, where(input > 0, input, input * negative_slope), inplace, "leaky_relu_")


@autocast_op("elu")
def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x for x > 0, else alpha * (exp(x) - 1) (NaN takes the first branch: gradient 1)."""
    x = input._float()
    return _in_place(input, _one_node("elu", x, (float(alpha),)), inplace, "elu_")


def _elu(x: Tensor, alpha: float) -> Tensor:
    neg = x <= 0
    return where(neg, alpha * _expm1(where(neg, x, 0.0)), x)


_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


@autocast_op("selu")
def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """scale * elu(x, alpha) with the self-normalizing constants of Klambauer et al."""
    return _in_place(input, _SELU_SCALE * elu(input, _SELU_ALPHA), inplace, "selu_")


@autocast_op("celu")
def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """x for x > 0, else alpha * (exp(x / alpha) - 1)."""
    if alpha == 0:
        raise ZeroDivisionError("ZeroDivisionError: celu with alpha=0")
    x = input._float()
    return _in_place(input, _one_node("celu", x, (float(alpha),)), inplace, "celu_")


def _celu(x: Tensor, alpha: float) -> Tensor:
    neg = x <= 0
    return where(neg, alpha * _expm1(where(neg, x, 0.0) * (1.0 / alpha)), x)


@autocast_op("softplus")
def softplus(input: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    """log(1 + exp(beta * x)) / beta, and x itself where beta * x > threshold."""
    return _one_node("softplus", input._float(), (float(beta), float(threshold)))


def _softplus(x: Tensor, beta: float, threshold: float) -> Tensor:
    bx = x * beta
    linear = bx > threshold
    return where(linear, x, _softplus_unit(where(linear, 0.0, bx)) * (1.0 / beta))


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """x clamped to [min_val, max_val]; the gradient is 0 at and beyond the limits."""
    if max_val < min_val:
        raise ValueError("max_val must be greater than or equal to min_val")
    return _in_place(input, hardtanh_values(input, min_val, max_val), inplace, "hardtanh_")


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x outside [-lambd, lambd], else 0 (NaN passes), as torch's; the gradient is 0 at and
    inside the limits."""
    inside = (input >= -lambd) & (input <= lambd)
    return where(inside, 0.0, input)


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """x - lambd above lambd, x + lambd below -lambd, else +0.0 (NaN passes, with gradient
    1), as torch's; the gradient is 0 at and inside the limits. (torch's own zero there is
    +0.0 in its vectorized loop and x * 0, signed, in the scalar tail of a short row.)"""
    if lambd < 0:
        raise ValueError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    inside = (input >= -lambd) & (input <= lambd)
    return where(inside, 0.0, where(input > lambd, input - lambd, input + lambd))


def tanhshrink(input: Tensor) -> Tensor:
    """x - tanh(x), as torch's."""
    return input - input.tanh()


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """`value` where x <= threshold, else x (NaN passes), as torch's; the gradient is 0 where
    x <= threshold."""
    return _in_place(input, where(input <= threshold, value, input), inplace, "threshold_")


_threshold = threshold  # (for threshold_, whose argument `threshold` hides the function)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """min(max(x, 0), 6) (hardtanh(x, 0, 6), with its gradients)."""
    return hardtanh(input, 0.0, 6.0, inplace)


_ONE_SIXTH_F32 = 0.1666666716337204  # 1/6 rounded to float32: torch's hardsigmoid slope


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """0 below -3, 1 above 3, (x + 3) / 6 between (gradient 0 at +-3 and at NaN).

    The gradient between is torch's constant, 1/6 rounded to float32 also in float64."""

    x = input._float()
    outside = where(x <= -3.0, 0.0, where(x >= 3.0, 1.0, x.detach()))
    mid = (x > -3.0) & (x < 3.0)
    out = where(mid, (x + 3.0) / 6.0, outside)
    slope = where(mid, _ONE_SIXTH_F32, 0.0).cast(x.dtype)
    return _in_place(input, _with_grad(out, [(x, slope)]), inplace, "hardsigmoid_")


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """x * hardsigmoid(x): 0 below -3, x above 3, x (x + 3) / 6 between (gradient 0 at -3,
    1 at 3, as PyTorch's backward)."""
    x = input._float()
    # x * 0 below -3, as torch's x * relu6(x + 3) / 6: -0.0, and NaN at -inf
    mid = (x > -3.0) & (x < 3.0)
    xm = where(mid, x, 0.0)  # (an inf in the branch not taken would give inf * 0 = NaN)
    out = where(x <= -3.0, x * 0.0, where(mid, xm * (xm + 3.0) * (1 / 6), x))
    return _in_place(input, out, inplace, "hardswish_")


@autocast_op("logsigmoid")
def logsigmoid(input: Tensor) -> Tensor:
    """log(sigmoid(x)) = -softplus(-x), stable for large |x|."""
    return _one_node("logsigmoid", input._float())


def _logsigmoid(x: Tensor) -> Tensor:
    return 0.0 - _softplus_unit(-x)  # (0 - y: +0.0 at +inf, as torch)


def softsign(input: Tensor) -> Tensor:
    """x / (1 + |x|)."""
    x = input._float()
    return x / (1.0 + x.abs())


def softmin(input: Tensor, dim: int | None = None) -> Tensor:
    """softmax(-x) along `dim`."""
    return softmax(-input._float(), dim)


@autocast_op("glu")
def glu(input: Tensor, dim: int = -1) -> Tensor:
    """a * sigmoid(b), where a and b are the two halves of `input` along `dim`."""
    if input.ndim == 0:
        fail(ShapeError, "glu", "glu does not support scalars because halving size must be even")
    d = input._dim(dim, "glu")
    size = input.shape[d]
    if size % 2:
        fail(ShapeError, "glu", f"Halving dimension must be even, but dimension {d} is size {size}")
    half = size // 2
    lo = [slice(None)] * input.ndim
    hi = [slice(None)] * input.ndim
    lo[d], hi[d] = slice(0, half), slice(half, size)
    return input[tuple(lo)] * input[tuple(hi)].sigmoid()


# ---------------------------------------------------------------- in-place forms
# torch's F.relu_, F.elu_, ...: each is its function with inplace=True (the result written
# into `input`, which is returned; a leaf that requires grad refuses, as in torch).
# torch's in-place backward reads the result, so it refuses a negative slope or alpha
# (leaky_relu_, elu_, celu_) when a gradient flows; fusegrad's reads the input, and gives
# the gradient the out-of-place function would.


def relu_(input: Tensor) -> Tensor:
    """`relu` written into `input`, which is returned (torch.nn.functional.relu_).

    >>> import fusegrad as fg
    >>> x = fg.tensor([-1.0, 2.0])
    >>> relu_(x) is x, x.tolist()
    (True, [0.0, 2.0])
    """
    return relu(input, inplace=True)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """`elu` written into `input`, which is returned (torch.nn.functional.elu_)."""
    return elu(input, alpha, inplace=True)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    """`leaky_relu` written into `input`, which is returned (torch.nn.functional.leaky_relu_)."""
    return leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    """`hardtanh` written into `input`, which is returned (torch.nn.functional.hardtanh_).
    Where torch's clamps to max_val when max_val < min_val, this raises hardtanh's
    ValueError."""
    return hardtanh(input, min_val, max_val, inplace=True)


def selu_(input: Tensor) -> Tensor:
    """`selu` written into `input`, which is returned (torch.nn.functional.selu_)."""
    return selu(input, inplace=True)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    """`celu` written into `input`, which is returned (torch.nn.functional.celu_)."""
    return celu(input, alpha, inplace=True)


def threshold_(input: Tensor, threshold: float, value: float) -> Tensor:
    """`threshold` written into `input`, which is returned (torch.nn.functional.threshold_)."""
    return _threshold(input, threshold, value, inplace=True)


# ---------------------------------------------------------------- modules


class GELU(Module):
    """Gaussian error linear unit, as torch.nn.GELU (approximate='none' or 'tanh')."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, input):
        return gelu(input, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class _InplaceOption(Module):
    """An activation module with torch's `inplace` option (shown in its repr when set)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class SiLU(_InplaceOption):
    def forward(self, input):
        return silu(input, self.inplace)


class Mish(_InplaceOption):
    def forward(self, input):
        return mish(input, self.inplace)


class LeakyReLU(_InplaceOption):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__(inplace)
        self.negative_slope = negative_slope

    def forward(self, input):
        return leaky_relu(input, self.negative_slope, self.inplace)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}" + (", inplace=True" if self.inplace else "")


class ELU(_InplaceOption):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = alpha

    def forward(self, input):
        return elu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class SELU(_InplaceOption):
    def forward(self, input):
        return selu(input, self.inplace)


class CELU(_InplaceOption):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        self.alpha = alpha

    def forward(self, input):
        return celu(input, self.alpha, self.inplace)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}" + (", inplace=True" if self.inplace else "")


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, input):
        return softplus(input, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Hardtanh(_InplaceOption):
    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__(inplace)
        if max_val < min_val:
            raise ValueError("max_val must be greater than or equal to min_val")
        self.min_val, self.max_val = min_val, max_val

    def forward(self, input):
        return hardtanh(input, self.min_val, self.max_val, self.inplace)

    def extra_repr(self) -> str:
        return f"min_val={self.min_val}, max_val={self.max_val}"


class Hardshrink(Module):
    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def forward(self, input):
        return hardshrink(input, self.lambd)

    def extra_repr(self) -> str:
        return f"{self.lambd}"


class Softshrink(Hardshrink):
    def forward(self, input):
        return softshrink(input, self.lambd)


class Tanhshrink(Module):
    def forward(self, input):
        return tanhshrink(input)


class Threshold(_InplaceOption):
    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__(inplace)
        self.threshold, self.value = threshold, value

    def forward(self, input):
        return threshold(input, self.threshold, self.value, self.inplace)

    def extra_repr(self) -> str:
        return f"threshold={self.threshold}, value={self.value}" + (
            ", inplace=True" if self.inplace else ""
        )


class ReLU6(Hardtanh):
    def __init__(self, inplace: bool = False):
        super().__init__(0.0, 6.0, inplace)

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Hardsigmoid(_InplaceOption):
    def forward(self, input):
        return hardsigmoid(input, self.inplace)


class Hardswish(_InplaceOption):
    def forward(self, input):
        return hardswish(input, self.inplace)


class PReLU(Module):
    """x for x > 0, else a * x with a learned slope `a` (one, or one per channel of axis 1),
    initialised to `init`, as torch's."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        self.weight = Parameter(full((num_parameters,), float(init)))
        place(self, device, dtype)

    def forward(self, input):
        return prelu(input, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"


@autocast_op("prelu")
def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """x for x > 0, else weight * x; `weight` has one slope, or one per channel (axis 1)."""
    if weight.numel() != 1:
        channels = input.shape[1] if input.ndim >= 2 else input.shape[0]
        if weight.numel() != channels:
            fail(
                ShapeError,
                "prelu",
                f"{weight.numel()} slopes for an input of shape {input.shape} "
                f"({channels} channels)",
            )
        if input.ndim >= 2:
            weight = weight.reshape((channels,) + (1,) * (input.ndim - 2))
    else:
        weight = weight.reshape(())
    return where(input > 0, input, weight * input)


class LogSigmoid(Module):
    def forward(self, input):
        return logsigmoid(input)


class Softsign(Module):
    def forward(self, input):
        return softsign(input)


class Softmin(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return softmin(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class GLU(Module):
    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return glu(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Softmax2d(Module):
    """softmax over the channels (dim -3) at each position of a (C, H, W) or (N, C, H, W)
    input, as torch.nn.Softmax2d.

    >>> import fusegrad as fg
    >>> Softmax2d()(fg.zeros(1, 4, 2, 2))[0, :, 0, 0].tolist()
    [0.25, 0.25, 0.25, 0.25]
    """

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected input to be 3D or 4D, got {input.ndim}D instead")
        return softmax(input, -3)
