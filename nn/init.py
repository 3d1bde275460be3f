"""`fusegrad.nn.init`: fill tensors in place with PyTorch's initialisation schemes.

Values are drawn on the host by a numpy `Generator` seeded from fusegrad's
generator state (`fg.manual_seed`), so a model built after `fg.manual_seed(s)`
is the same every run, and initialising costs no kernel compilation.
Each function returns its tensor, as torch's do.

>>> import fusegrad as fg
>>> from fusegrad.nn import init
>>> w = fg.zeros(3, 4)
>>> _ = init.kaiming_uniform_(w, a=5 ** 0.5)     # torch's default for Linear
>>> bool((w.numpy() ** 2).max() <= 1 / 4)       # bound = 1 / sqrt(fan_in)
True
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from ..nnapi import (
    Tensor,
    from_numpy,
    host_rng,
)


def _rng(generator: np.random.Generator | None) -> np.random.Generator:
    # a numpy Generator is used as it is; an fg.Generator or None (the fg.manual_seed
    # stream) seeds one, advancing that stream
    return host_rng(generator)


def _fill(tensor: Tensor, values: np.ndarray) -> Tensor:
    tensor.assign_(from_numpy(np.ascontiguousarray(values, dtype=tensor.dtype.np)))
    return tensor


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (torch.nn.init.calculate_gain).

    linear, conv and sigmoid: 1; tanh: 5/3; relu: sqrt(2);
    leaky_relu: sqrt(2 / (1 + slope^2)) with slope `param` (default 0.01); selu: 3/4.
    """
    linear_fns = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d")
    linear_fns += ("conv_transpose2d", "conv_transpose3d")
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif isinstance(param, (int, float)) and not isinstance(param, bool):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    """fan_in = shape[1] * receptive field, fan_out = shape[0] * receptive field."""
    if tensor.ndim < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _fan(tensor: Tensor, mode: str) -> int:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    """Fill with U(a, b)."""
    return _fill(tensor, _rng(generator).uniform(a, b, tensor.shape))


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    """Fill with N(mean, std^2)."""
    return _fill(tensor, _rng(generator).normal(mean, std, tensor.shape))


def constant_(tensor: Tensor, val: float) -> Tensor:
    return _fill(tensor, np.full(tensor.shape, val))


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def eye_(tensor: Tensor) -> Tensor:
    """The identity matrix in a 2-D tensor (ones on the diagonal of a rectangular one), as
    torch.nn.init.eye_."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    return _fill(tensor, np.eye(*tensor.shape))


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """A 3-, 4- or 5-D convolution weight that passes its input through: in each of
    `groups` groups, output channel i reads input channel i at the kernel's centre (as
    torch.nn.init.dirac_; channels past the smaller count stay zero)."""
    dims = tensor.ndim
    if dims not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    sizes = tensor.shape
    if sizes[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = sizes[0] // groups
    values = np.zeros(sizes)
    centre = tuple(k // 2 for k in sizes[2:])
    for g in range(groups):
        for d in range(min(out_per_group, sizes[1])):
            values[(g * out_per_group + d, d, *centre)] = 1.0
    return _fill(tensor, values)


def torch_default_(weight: Tensor, bias: Tensor | None, fan_in: int) -> None:
    """PyTorch's default for Linear and Conv layers: kaiming_uniform(a=sqrt(5)) weights,
    i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and a bias from the same range."""
    kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        uniform_(bias, -bound, bound)


def kaiming_uniform_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator=None,
) -> Tensor:
    """He uniform: U(-bound, bound), bound = gain * sqrt(3 / fan)."""
    if 0 in tensor.shape:
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    bound = math.sqrt(3.0) * std
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    generator=None,
) -> Tensor:
    """He normal: N(0, std^2), std = gain / sqrt(fan)."""
    if 0 in tensor.shape:
        return tensor
    std = calculate_gain(nonlinearity, a) / math.sqrt(_fan(tensor, mode))
    return normal_(tensor, 0.0, std, generator)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot uniform: U(-a, a), a = gain * sqrt(6 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    a = math.sqrt(3.0) * gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Glorot normal: N(0, std^2), std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator=None,
) -> Tensor:
    """Normal(mean, std) values redrawn until inside [a, b] (absolute bounds, as torch's)."""
    rng = _rng(generator)
    out = rng.normal(mean, std, tensor.shape)
    bad = (out < a) | (out > b)
    while bad.any():  # each round keeps a fixed share: a few rounds for any sane bounds
        out[bad] = rng.normal(mean, std, int(bad.sum()))
        bad = (out < a) | (out > b)
    return _fill(tensor, out)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """A (semi-)orthogonal matrix from the QR decomposition of a normal one (rows or
    columns orthonormal, times `gain`); more than 2 dims are flattened after the first."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    rows = tensor.shape[0]
    cols = tensor.numel() // rows if rows else 0
    flat = _rng(generator).normal(0.0, 1.0, (rows, cols))
    q, r = np.linalg.qr(flat.T if rows < cols else flat)
    q = q * np.sign(np.diag(r))  # a unique, uniformly distributed Q
    q = q.T if rows < cols else q
    return _fill(tensor, (gain * q).reshape(tensor.shape))


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """A 2-D tensor of N(0, std^2) values with ceil(sparsity * rows) of each column's rows,
    drawn at random, zero (torch.nn.init.sparse_, after Martens 2010)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    rng = _rng(generator)
    values = rng.normal(0.0, std, (rows, cols))
    zeros = int(math.ceil(sparsity * rows))
    for c in range(cols):
        values[rng.permutation(rows)[:zeros], c] = 0.0
    return _fill(tensor, values)


def _deprecated(method):
    """torch's old name (no trailing underscore) of `method`, with torch's FutureWarning."""
    new_name = method.__name__
    old_name = new_name[:-1]

    def deprecated_init(*args, **kwargs):
        warnings.warn(
            f"`nn.init.{old_name}` is now deprecated in favor of `nn.init.{new_name}`.",
            FutureWarning,
            stacklevel=2,
        )
        return method(*args, **kwargs)

    deprecated_init.__name__ = deprecated_init.__qualname__ = old_name
    deprecated_init.__doc__ = f"`{new_name}` under its old name, deprecated in torch."
    return deprecated_init


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
orthogonal = _deprecated(orthogonal_)
sparse = _deprecated(sparse_)
