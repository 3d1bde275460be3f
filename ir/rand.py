"""The counter-based random number generator behind the RAND primitive.

Element `i` of `rand(key, shape)` is a pure function of `(key, i)`, so a
kernel can regenerate a dropout mask instead of reading it from memory, and the
forward and backward kernels agree on it. The function is a MurmurHash3
finalizer over 32-bit integers, then the top 24 bits as a float in [0, 1).
Renderers emit exactly these steps; `uniform` is the numpy specification.
"""

from __future__ import annotations

import numpy as np

MIX1 = 0x85EBCA6B
MIX2 = 0xC2B2AE35
GOLDEN = 0x9E3779B9
MASK32 = 0xFFFFFFFF


def fmix32(x: int) -> int:
    x &= MASK32
    x ^= x >> 16
    x = (x * MIX1) & MASK32
    x ^= x >> 13
    x = (x * MIX2) & MASK32
    x ^= x >> 16
    return x


def seed_key(seed: int) -> int:
    """The 32-bit key a seed contributes; renderers fold it in as a constant."""
    return fmix32((seed * GOLDEN + (seed >> 32)) & MASK32)


def key_as_int32(key: int) -> int:
    """The 32-bit key as the signed value an int32 buffer holds."""
    key &= MASK32
    return key - (1 << 32) if key >= 1 << 31 else key


def uniform(seed: int, index: np.ndarray) -> np.ndarray:
    """Reference values for linear indices `index` (any integer array), as float64 in [0, 1)."""
    return uniform_from_key(seed_key(seed), index)


# significant bits of a uniform number by dtype: as many as the type holds below 1, so
# every value is exact and none rounds up to 1.0 (torch's rule for its 16-bit floats)
UNIFORM_BITS = {"float16": 11, "bfloat16": 8}


def uniform_bits(dtype) -> int:
    """How many of the hash's top bits a uniform number of `dtype` takes (24, or fewer)."""
    return UNIFORM_BITS.get(dtype.name, 24)


def uniform_from_key(key: int, index: np.ndarray, bits: int = 24) -> np.ndarray:
    """The same, from the 32-bit key the RAND node reads (`bits`: `uniform_bits`)."""
    x = (index.astype(np.uint64) & MASK32).astype(np.uint32) ^ np.uint32(key & MASK32)
    x = x.astype(np.uint32)
    x ^= x >> np.uint32(16)
    x *= np.uint32(MIX1)
    x ^= x >> np.uint32(13)
    x *= np.uint32(MIX2)
    x ^= x >> np.uint32(16)
    return (x >> np.uint32(32 - bits)).astype(np.float64) * (1.0 / (1 << bits))
