"""`fusegrad.backends`: backend switches under PyTorch's names (`torch.backends`).

`fg.backends.cuda.matmul.allow_tf32` (default False, as in PyTorch) lets fp32 matmuls
and other sums of products on the cuda device run on tensor cores with TF32 inputs
(10-bit mantissas, fp32 accumulation): faster, with about 1e-3 relative error.

>>> import fusegrad as fg
>>> fg.backends.cuda.matmul.allow_tf32
False
>>> fg.backends.cuda.matmul.allow_tf32 = True
>>> fg.config.allow_tf32
True
>>> fg.backends.cuda.matmul.allow_tf32 = False
"""

from __future__ import annotations

from .runtime.config import config


class _Matmul:
    """`fg.backends.cuda.matmul`: kept in `fg.config.allow_tf32` (so `fg.config.override`
    scopes it too); kernels already compiled keep the setting they were built with, and
    plans are cached per setting."""

    @property
    def allow_tf32(self) -> bool:
        """Whether fp32 contractions on the cuda device may use TF32 tensor cores."""
        return config.allow_tf32

    @allow_tf32.setter
    def allow_tf32(self, value: bool) -> None:
        config.allow_tf32 = bool(value)


class _Cuda:
    matmul = _Matmul()


cuda = _Cuda()


class _Cudnn:
    """`fg.backends.cudnn`: the switches torch's set-up code sets (`deterministic`,
    `benchmark`, `enabled`, `allow_tf32`), accepted so that code runs; fusegrad uses no
    cuDNN, and its convolutions are its own kernels, whatever these say: `allow_tf32` is
    True as in PyTorch, but fusegrad's float32 convolutions take TF32 only under
    `fg.backends.cuda.matmul.allow_tf32` (docs/API.md, the cuda device)."""

    def __init__(self):
        self.deterministic = False
        self.benchmark = False
        self.enabled = True
        self.allow_tf32 = True

    def is_available(self) -> bool:
        return False


cudnn = _Cudnn()


class _Mps:
    """`fg.backends.mps` (torch.backends.mps): fusegrad has no Apple GPU device, so
    device checks such as `torch.backends.mps.is_available()` say False."""

    def is_available(self) -> bool:
        return False

    def is_built(self) -> bool:
        return False


mps = _Mps()
