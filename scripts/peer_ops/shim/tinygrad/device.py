"""Device names: fusegrad runs the suite on its CPU (LLVM) backend."""

import fusegrad as fg


class Device:
    DEFAULT = "CPU"


def is_dtype_supported(dtype, device=None) -> bool:
    """Whether fusegrad has the dtype (all of the peer's dtypes that it names)."""
    return isinstance(dtype, fg.DType)
