"""A name-only stand-in for the package a peer op test suite imports, over fusegrad.

It renames: every name here points at the fusegrad (PyTorch-spelled) op with the
same semantics. It implements no op. See scripts/peer_ops/README.md.
"""

from tinygrad.device import Device
from tinygrad.dtype import dtypes
from tinygrad.tensor import Tensor

__all__ = ["Device", "Tensor", "dtypes"]
