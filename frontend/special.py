"""`fusegrad.special`: torch.special's names for fusegrad's functions, and three of its own
written as torch writes them (`ndtr`, `entr`, `xlog1py`).

>>> import fusegrad as fg
>>> fg.special.expit(fg.tensor([0.0])).tolist(), fg.special.ndtr(fg.tensor([0.0])).tolist()
([0.5], [0.5])
"""

from __future__ import annotations

import math

from .extend import custom_gradient
from .mathops import erfcx as erfcx  # (these five written in mathops, beside erf and i0)
from .mathops import i0e as i0e
from .mathops import i1 as i1
from .mathops import i1e as i1e
from .mathops import isnan
from .mathops import log_ndtr as log_ndtr
from .mathops import ndtri as ndtri
from .mathops import polygamma as polygamma  # torch.special.polygamma is torch.polygamma
from .mathops import xlog1py as xlog1py  # (written beside xlogy, which it shares)
from .mathops import xlogy as xlogy  # torch.special.xlogy is torch.xlogy
from .tensor import Tensor, where

__all__ = [
    "digamma",
    "entr",
    "erf",
    "erfc",
    "erfcx",
    "erfinv",
    "gammaln",
    "i0",
    "i0e",
    "i1",
    "i1e",
    "log_ndtr",
    "multigammaln",
    "exp2",
    "expit",
    "expm1",
    "log1p",
    "log_softmax",
    "logit",
    "logsumexp",
    "ndtr",
    "ndtri",
    "polygamma",
    "psi",
    "round",
    "sinc",
    "softmax",
    "xlog1py",
    "xlogy",
]


def expit(input: Tensor) -> Tensor:
    """1 / (1 + exp(-x)): `Tensor.sigmoid`."""
    return input.sigmoid()


def logit(input: Tensor, eps: float | None = None) -> Tensor:
    """log(p / (1 - p)), p clamped to [eps, 1 - eps] when eps is given: `Tensor.logit`."""
    return input.logit(eps)


def erf(input: Tensor) -> Tensor:
    """The error function: `Tensor.erf`."""
    return input.erf()


def erfinv(input: Tensor) -> Tensor:
    """The inverse of erf on [-1, 1]: `Tensor.erfinv`."""
    return input.erfinv()


def i0(input: Tensor) -> Tensor:
    """The modified Bessel function of the first kind of order 0: `Tensor.i0`."""
    return input.i0()


def multigammaln(input: Tensor, p: int) -> Tensor:
    """The multivariate log-gamma function: `Tensor.mvlgamma`."""
    return input.mvlgamma(p)


def gammaln(input: Tensor) -> Tensor:
    """log |Gamma(x)|: `Tensor.lgamma`."""
    return input.lgamma()


def digamma(input: Tensor) -> Tensor:
    """d/dx log Gamma(x): `Tensor.digamma`."""
    return input.digamma()


def psi(input: Tensor) -> Tensor:
    """torch.special.psi, digamma's other name: `Tensor.digamma`."""
    return input.digamma()


def erfc(input: Tensor) -> Tensor:
    """1 - erf(x), without its cancellation: `Tensor.erfc`."""
    return input.erfc()


def exp2(input: Tensor) -> Tensor:
    """2 ** x: `Tensor.exp2`."""
    return input.exp2()


def expm1(input: Tensor) -> Tensor:
    """exp(x) - 1, accurate near 0: `Tensor.expm1`."""
    return input.expm1()


def log1p(input: Tensor) -> Tensor:
    """log(1 + x), accurate near 0: `Tensor.log1p`."""
    return input.log1p()


def sinc(input: Tensor) -> Tensor:
    """sin(pi x) / (pi x), 1 at 0: `Tensor.sinc`."""
    return input.sinc()


def round(input: Tensor, decimals: int = 0) -> Tensor:  # noqa: A001  (torch's name)
    """Round half to even (at `decimals` places): `Tensor.round`."""
    return input.round(decimals=decimals)


def softmax(input: Tensor, dim: int, dtype=None) -> Tensor:
    """`Tensor.softmax`."""
    return input.softmax(dim, dtype=dtype)


def log_softmax(input: Tensor, dim: int, dtype=None) -> Tensor:
    """`Tensor.log_softmax`."""
    return input.log_softmax(dim, dtype=dtype)


def logsumexp(input: Tensor, dim, keepdim: bool = False) -> Tensor:
    """`Tensor.logsumexp`."""
    return input.logsumexp(dim, keepdim)


def ndtr(input: Tensor) -> Tensor:
    """The standard normal's cumulative distribution, as torch's: 0.5 + 0.5 erf(x / sqrt 2)
    near 0, 0.5 erfc(|x| / sqrt 2) (or one minus it) in the tails, accurate there.

    >>> import fusegrad as fg
    >>> fg.special.ndtr(fg.tensor([-40.0, 0.0, 1.0])).tolist()[0] == 0.0
    True
    """
    x = input if input.dtype.is_float else input.float()
    t = x * math.sqrt(0.5)
    tail = 0.5 * t.abs().erfc()
    return where(t.abs() < math.sqrt(0.5), 0.5 + 0.5 * t.erf(), where(t > 0, 1.0 - tail, tail))


def entr(input: Tensor) -> Tensor:
    """-x log x elementwise, as torch.special.entr: 0 at 0, -inf below 0, NaN at NaN.

    >>> import fusegrad as fg
    >>> fg.special.entr(fg.tensor([0.0, 1.0, -1.0])).tolist()
    [0.0, -0.0, -inf]
    """
    x = input if input.dtype.is_float else input.float()
    inner = where(x > 0, x, 1.0)  # (no log of 0 or of a negative on the branches not taken)
    value = where(x > 0, -x * inner.log(), where(x == 0, 0.0, -math.inf))
    out = where(isnan(x), x, value)
    if not x.requires_grad:
        return out
    # torch's rule: g * -(1 + log x), so NaN below 0 and inf at 0, as its backward gives
    return custom_gradient(out, [x], lambda g, x: [g * -(1 + x.log())], own_node=True)
