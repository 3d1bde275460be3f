"""The peer's `dtypes` namespace, each name one of fusegrad's dtypes."""

import fusegrad as fg


class dtypes:  # noqa: N801 -- the peer's spelling
    bool = fg.bool
    int8, int16, int32, int64 = fg.int8, fg.int16, fg.int32, fg.int64
    char, short = fg.int8, fg.int16
    uint8 = uchar = fg.uint8
    # dtypes fusegrad lacks: a name that fails where it is used (not a silent default)
    uint16 = getattr(fg, "uint16", "uint16")
    uint32 = getattr(fg, "uint32", "uint32")
    uint64 = getattr(fg, "uint64", "uint64")
    float16 = half = getattr(fg, "float16", "float16")
    bfloat16 = getattr(fg, "bfloat16", "bfloat16")
    float32 = float = fg.float32
    float64 = double = fg.float64
    int = fg.int32
    long = fg.int64
    # the peer's defaults (torch's float default is the same; its int default is int64)
    default_float = fg.float32
    default_int = fg.int32

    @staticmethod
    def max(dtype):
        """Largest value of `dtype` (torch.iinfo(dtype).max; +inf for floats, as the peer)."""
        if dtype.is_bool:
            return True
        return fg.iinfo(dtype).max if dtype.is_int else float("inf")

    @staticmethod
    def min(dtype):
        """Smallest value of `dtype` (torch.iinfo(dtype).min; -inf for floats, as the peer)."""
        if dtype.is_bool:
            return False
        return fg.iinfo(dtype).min if dtype.is_int else float("-inf")

    @staticmethod
    def is_float(dtype) -> bool:
        return dtype.is_float

    @staticmethod
    def is_int(dtype) -> bool:
        return dtype.is_int
