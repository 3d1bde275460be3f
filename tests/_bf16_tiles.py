"""What the bfloat16 matmul kernels' tests share (tests/pipeline/test_amx.py, test_dpbf16.py):
operands, the bound their answers keep, and whether a kernel ran on an instruction."""

from __future__ import annotations

import numpy as np

import fusegrad as fg

F32_UNIT = 2.0**-24
HALF_ULP = 2.0**-8  # bfloat16: a rounding is off by at most 2^-8 of the value


def bf16(values) -> fg.Tensor:
    return fg.tensor(np.asarray(values, np.float32)).bfloat16().realize()


def host(t: fg.Tensor) -> np.ndarray:
    return t.float().numpy().astype(np.float64)


def ran_on(t: fg.Tensor, instruction: str) -> bool:
    """Whether a kernel computing `t` holds `instruction` in its assembly."""
    return any(instruction in (k.asm or "") for k in fg.kernels(t))


def check_close(got, a, b) -> None:
    """`got` is a @ b (float64 arrays of bfloat16 values) rounded once to bfloat16, after
    float32 sums of exact products in any order."""
    exact, size, k = a @ b, np.abs(a) @ np.abs(b), a.shape[-1]
    bound = HALF_ULP * np.abs(exact) + 2 * k * F32_UNIT * size * (1 + HALF_ULP)
    assert (np.abs(host(got) - exact) <= bound).all()
