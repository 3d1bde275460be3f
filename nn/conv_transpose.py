"""Transposed convolutions: the gradient of a convolution with respect to its input, as a layer.

conv_transpose(x, w) spreads every input element over a kernel-sized patch of
the output, `stride` apart. At stride 1 (and on the GPU) it is computed as a
plain correlation: insert stride - 1 zeros between the input's elements, pad by
dilation * (k - 1) - padding on each side (plus `output_padding` after), and
correlate with the weight flipped and with its in/out channel axes swapped. A
strided one on the CPU runs phase by phase instead (`_strided`), with no zeros, and
one whose input is a single pixel (a generator's first layer) as a matrix product of
the input's channels with the weight's taps (`_one_pixel_product`).

>>> import fusegrad as fg
>>> from fusegrad.nn.conv_transpose import conv_transpose1d
>>> conv_transpose1d(fg.ones(1, 1, 3), fg.ones(1, 1, 2), stride=2).tolist()
[[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0]]]
"""

from __future__ import annotations

import math

from ..nnapi import (
    DTypeError,
    ShapeError,
    Tensor,
    autocast_op,
    composite,
    expansion_layout,
    fail,
    register_composite,
)
from . import init
from .conv import conv_vjp, convnd, gather_pays
from .correlate import correlate, dilate, int_tuple, transposed_by_phases
from .module import Module, place, placeholder_parameter


def conv_transposend(
    x: Tensor, weight, bias, stride, padding, output_padding, groups, dilation, n: int, op: str
) -> Tensor:
    if x.ndim not in (n + 1, n + 2):
        fail(ShapeError, op, f"expected a {n + 2}-D (batched) or {n + 1}-D input, got {x.shape}")
    if x.ndim == n + 1:
        out = conv_transposend(
            x.unsqueeze(0), weight, bias, stride, padding, output_padding, groups, dilation, n, op
        )
        return out[0]
    if weight.ndim != n + 2:
        fail(
            ShapeError,
            op,
            f"weight must be {n + 2}-D (in, out/groups, *kernel), got {weight.shape}",
        )
    if x.dtype is not weight.dtype:
        fail(DTypeError, op, f"input is {x.dtype.name} but weight is {weight.dtype.name}")
    cin, cout_g = weight.shape[:2]
    kernel = weight.shape[2:]
    if groups < 1 or cin % groups:
        fail(ShapeError, op, f"groups={groups} must divide the weight's in_channels {cin}")
    if x.shape[1] != cin:
        fail(
            ShapeError,
            op,
            f"input has {x.shape[1]} channels but weight {weight.shape} expects {cin}",
        )
    stride = int_tuple(stride, n, "stride", op)
    pads = int_tuple(padding, n, "padding", op)
    out_pads = int_tuple(output_padding, n, "output_padding", op)
    dilation = int_tuple(dilation, n, "dilation", op)
    for o, s, d in zip(out_pads, stride, dilation):
        if o >= s and o >= d:
            fail(
                ShapeError,
                op,
                f"output padding must be smaller than either stride or dilation, but got "
                f"output_padding={out_pads}, stride={stride}, dilation={dilation}",
            )
    if any(p < 0 for p in pads) or any(s < 1 for s in stride):
        fail(ShapeError, op, f"negative padding {pads} or non-positive stride {stride}")
    cout = cout_g * groups
    sizes = [
        (i - 1) * s - 2 * p + d * (k - 1) + o + 1
        for i, s, p, d, k, o in zip(x.shape[2:], stride, pads, dilation, kernel, out_pads)
    ]
    if any(v <= 0 for v in sizes):
        fail(ShapeError, op, f"output size {tuple(sizes)} is too small (input {x.shape})")
    params = (pads, out_pads, stride, dilation, groups, n, op)
    out = composite("conv_transpose", [x, weight], params, (x.shape[0], cout, *sizes), x.dtype)
    if bias is not None:
        if bias.shape != (cout,):
            fail(ShapeError, op, f"bias must have shape ({cout},), got {bias.shape}")
        out = out + bias.reshape(1, cout, *([1] * n))
    return out


def _conv_transposed(tensors: list, params: tuple) -> Tensor:
    """The expansion of a "conv_transpose" macro, [x, weight] and (padding, output
    padding, stride, dilation, groups, n, the op's name): where the layout the plan is
    compiled for copies padding (ir/layout.py, the CPU's) and the stride is more than 1,
    phase by phase (`_strided`); else the correlation of the stride-dilated input, padded
    "full", with the flipped weight (the GPU's tiles guard the padding and the zeros)."""
    x, weight = tensors
    pads, out_pads, stride, dilation, groups, n, op = params
    if _one_pixel(x, params):
        return _one_pixel_product(x, weight, pads, n)
    cin, cout_g = weight.shape[:2]
    kernel = weight.shape[2:]
    cout, cin_g = cout_g * groups, cin // groups
    if any(s > 1 for s in stride) and expansion_layout().copy_padding:
        sizes = [
            (i - 1) * s - 2 * p + d * (k - 1) + o + 1
            for i, s, p, d, k, o in zip(x.shape[2:], stride, pads, dilation, kernel, out_pads)
        ]
        out_shape = (x.shape[0], cout, *sizes)
        return _strided(x, weight, out_shape, pads, stride, dilation, groups, op)
    # (in, out/g, *k) -> (out, in/g, *k), flipped: the weight of the equivalent correlation
    w = weight.reshape(groups, cin_g, cout_g, *kernel).transpose(1, 2)
    w = w.reshape(cout, cin_g, *kernel)
    w = w.flip(tuple(range(2, 2 + n)))
    xd = dilate(x, stride, n)
    full = [
        (d * (k - 1) - p, d * (k - 1) - p + o)
        for k, p, o, d in zip(kernel, pads, out_pads, dilation)
    ]
    return correlate(xd, w, full, (1,) * n, dilation, groups, op)


def _conv_transposed_gradients(tensors: list, params: tuple, g: Tensor):
    """The gradients of a "conv_transpose" macro where its expansion runs phase by phase
    (`_strided`): those of the convolution whose weight this is, the convolution itself for
    x and its weight gradient (output gradient x) for the weight. Derived through the
    phases' windows, the gradients were slower than the zero-filled correlation's. None
    (derived) for the zero-filled correlation."""
    x, weight = tensors
    pads, _, stride, dilation, groups, n, op = params
    if _one_pixel(x, params):
        return None  # (the product's)
    if not (any(s > 1 for s in stride) and expansion_layout().copy_padding):
        return None
    dx = convnd(g, weight, None, stride, pads, dilation, groups, n, op)
    cpads = [(p, p) for p in pads]
    geometry = (g.shape, weight.shape, cpads, stride, dilation, groups, False)
    gathered = gather_pays(g, weight, cpads, stride, dilation, groups)
    return [dx, conv_vjp(x, g, weight, geometry, op, gathered)[1]]


register_composite("conv_transpose", _conv_transposed, gradient=_conv_transposed_gradients)


def _one_pixel(x: Tensor, params: tuple) -> bool:
    """Whether a transposed convolution's input is one pixel (a DCGAN generator's first
    layer: the noise, N x nz x 1 x 1, to 4 x 4), one group, no dilation nor output
    padding: each output pixel is then one tap of the weight times the input's channels,
    a matrix product (`_one_pixel_product`), on every device. As a correlation of the
    input padded to 7 x 7, it made 16 times the multiply-adds, 15 of 16 with zeros (the
    GPU's tiles guard the padding's loads, not the multiply-adds)."""
    pads, out_pads, stride, dilation, groups, n, op = params
    return (
        all(s == 1 for s in x.shape[2:])
        and groups == 1
        and all(d == 1 for d in dilation)
        and not any(out_pads)
    )


def _one_pixel_product(x: Tensor, weight: Tensor, pads, n: int) -> Tensor:
    """out[b, o, *k] = sum_c x[b, c] * weight[c, o, *k], the padding cut from each side:
    (N, Cin) @ (Cin, Cout * taps), its gradients the product's."""
    cin, cout = weight.shape[:2]
    kernel = weight.shape[2:]
    out = x.reshape(x.shape[0], cin) @ weight.reshape(cin, cout * math.prod(kernel))
    out = out.reshape(x.shape[0], cout, *kernel)
    if any(pads):
        out = out[(slice(None), slice(None), *(slice(p, k - p) for p, k in zip(pads, kernel)))]
    return out


def _strided(x: Tensor, weight: Tensor, out_shape, pads, stride, dilation, groups, op: str):
    """A strided transposed convolution on the CPU: the input gradient of the convolution
    whose weight this is (`transposed_by_phases`: each output phase with only its own taps,
    no zeros inserted between x's elements, a quarter of the multiply-adds of the zero-filled
    correlation for a 2-D stride 2). Its gradients are that convolution's own
    (`_conv_transposed_gradients`)."""
    cpads = [(p, p) for p in pads]
    return transposed_by_phases(x, weight, out_shape, cpads, stride, dilation, groups, op)


@autocast_op("conv_transpose1d")
def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
) -> Tensor:
    """1-D transposed convolution over (N, C, L); weight is (in, out/groups, k), as PyTorch."""
    return conv_transposend(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 1,
        "conv_transpose1d",
    )  # fmt: skip


@autocast_op("conv_transpose2d")
def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups: int = 1, dilation=1
) -> Tensor:
    """2-D transposed convolution over (N, C, H, W); weight is (in, out/groups, kh, kw).

    Output size per axis: (in - 1) * stride - 2 * padding + dilation * (k - 1) + output_padding + 1.
    """
    return conv_transposend(
        input, weight, bias, stride, padding, output_padding, groups, dilation, 2,
        "conv_transpose2d",
    )  # fmt: skip


class ConvTransposeNd(Module):
    n = 0
    function = None  # F's conv_transpose{n}d, which `forward` calls

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size,
        stride=1,
        padding=0,
        output_padding=0,
        groups: int = 1,
        bias: bool = True,
        dilation=1,
        padding_mode: str = "zeros",
        device=None,
        dtype=None,
    ):
        super().__init__()
        name = f"ConvTranspose{self.n}d"
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        self.padding_mode = padding_mode
        if in_channels % groups or out_channels % groups:
            fail(
                ShapeError,
                name,
                f"groups={groups} must divide in_channels={in_channels} "
                f"and out_channels={out_channels}",
            )
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = int_tuple(kernel_size, self.n, "kernel_size", name)
        self.stride = int_tuple(stride, self.n, "stride", name)
        self.padding = int_tuple(padding, self.n, "padding", name)
        self.output_padding = int_tuple(output_padding, self.n, "output_padding", name)
        self.dilation = int_tuple(dilation, self.n, "dilation", name)
        self.weight = placeholder_parameter(
            in_channels, out_channels // groups, *self.kernel_size, dtype=dtype
        )
        if bias:
            self.bias = placeholder_parameter(out_channels, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        place(self, device)

    def reset_parameters(self) -> None:
        """As torch: fan_in is weight.shape[1] * kernel size (out_channels / groups * k)."""
        fan_in = (self.out_channels // self.groups) * math.prod(self.kernel_size)
        init.torch_default_(self.weight, self.bias, fan_in)

    def forward(self, input, output_size=None):
        """The transposed convolution of `input`; `output_size` (the spatial sizes, or
        the whole shape) picks the output padding that gives those sizes, as torch's: a
        strided layer's output size is ambiguous by up to stride - 1."""
        return self.function(
            input,
            self.weight,
            self.bias,
            self.stride,
            self.padding,
            self._output_padding(input, output_size),
            self.groups,
            self.dilation,
        )

    def _output_padding(self, input, output_size) -> tuple[int, ...]:
        """`self.output_padding`, or the padding after that makes the output `output_size`
        (its last n sizes where it also names the batch and channels); a size outside
        the range the stride allows raises ValueError, as torch."""
        if output_size is None:
            return self.output_padding
        n = self.n
        leading = 2 if input.ndim == n + 2 else 1
        sizes = [int(v) for v in output_size]
        if len(sizes) == leading + n:
            sizes = sizes[leading:]
        if len(sizes) != n:
            raise ValueError(
                f"ConvTranspose{n}D: for {input.ndim}D input, output_size must have {n} or "
                f"{leading + n} elements (got {len(sizes)})"
            )
        least = [
            (input.shape[leading + d] - 1) * self.stride[d]
            - 2 * self.padding[d]
            + self.dilation[d] * (self.kernel_size[d] - 1)
            + 1
            for d in range(n)
        ]
        most = [lo + s - 1 for lo, s in zip(least, self.stride)]
        if any(not lo <= v <= hi for v, lo, hi in zip(sizes, least, most)):
            raise ValueError(
                f"requested an output size of {sizes}, but valid sizes range from {least} to "
                f"{most} (for an input of {list(input.shape[leading:])})"
            )
        return tuple(v - lo for v, lo in zip(sizes, least))

    def extra_repr(self) -> str:
        s = (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}"
        )
        if self.padding != (0,) * self.n:
            s += f", padding={self.padding}"
        if self.output_padding != (0,) * self.n:
            s += f", output_padding={self.output_padding}"
        if self.dilation != (1,) * self.n:
            s += f", dilation={self.dilation}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class ConvTranspose1d(ConvTransposeNd):
    """1-D transposed convolution layer, as torch.nn.ConvTranspose1d."""

    n = 1
    function = staticmethod(conv_transpose1d)


class ConvTranspose2d(ConvTransposeNd):
    """2-D transposed convolution layer, as torch.nn.ConvTranspose2d."""

    n = 2
    function = staticmethod(conv_transpose2d)
