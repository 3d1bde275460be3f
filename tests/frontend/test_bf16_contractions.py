"""bfloat16 contractions (issue 30): matmul, batched matmul, linear and their gradients
against float64 on the same bfloat16 inputs, with a bound derived from bfloat16's epsilon
and the reduction length; then the special points (zeros, -0, ones, inf, NaN, subnormals,
odd K, K = 1, K = 0, 0-d and 1-d results) as a literal table, and beside it PyTorch's
bfloat16 on the same inputs where torch is installed.

The CPU computes a bfloat16 contraction in float32 (exact products, float32 sums) and
rounds each output once (docs/NUMERICS.md, "float16 and bfloat16").
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

BF16_EPS = 2.0**-7  # bfloat16's spacing at 1 (8 significant bits): a rounding is off by half
# of a spacing, at most BF16_EPS / 2 of the value
F32_UNIT = 2.0**-24  # float32's unit roundoff


def bf16(values) -> fg.Tensor:
    return fg.tensor(np.asarray(values, np.float32)).bfloat16()


def host(t: fg.Tensor) -> np.ndarray:
    """A bfloat16 tensor's values, exactly, as float64."""
    return t.float().numpy().astype(np.float64)


def check_close(got: fg.Tensor, a: np.ndarray, b: np.ndarray) -> None:
    """`got` (bfloat16) is a @ b of the float64 arrays within one bfloat16 rounding of the
    exact value plus float32's accumulation bound over K products (K * u * sum |a||b|,
    twice, for the sum's tree order)."""
    assert got.dtype is fg.bfloat16
    exact, size = a @ b, np.abs(a) @ np.abs(b)
    k = a.shape[-1]
    bound = BF16_EPS / 2 * np.abs(exact) + 2 * k * F32_UNIT * size * (1 + BF16_EPS)
    err = np.abs(host(got) - exact)
    assert (err <= bound).all(), f"K={k}: worst excess {np.max(err - bound):.3g}"


SHAPES = [  # (M, K, N): K odd and even, 1, long; N below, at and past a tile's width
    (5, 1, 7),
    (6, 2, 16),
    (9, 3, 33),
    (17, 17, 32),
    (8, 64, 48),
    (33, 255, 40),
    (4, 1000, 64),
    (64, 1024, 1024),  # a right operand of 2 MiB: packed in panels (frontend/reduce.py)
]


@pytest.mark.parametrize("m, k, n", SHAPES, ids=str)
def test_matmul_is_within_one_rounding_of_float64(m, k, n):
    rng = np.random.default_rng(k)
    a, b = bf16(rng.standard_normal((m, k))), bf16(rng.standard_normal((k, n)))
    check_close(a @ b, host(a), host(b))


def test_batched_matmul_and_linear():
    rng = np.random.default_rng(1)
    a, b = bf16(rng.standard_normal((3, 7, 19))), bf16(rng.standard_normal((3, 19, 24)))
    check_close(a @ b, host(a), host(b))
    x, w, bias = (bf16(rng.standard_normal(s)) for s in ((6, 19), (10, 19), (10,)))
    y = fg.nn.functional.linear(x, w)
    check_close(y, host(x), host(w).T)
    y = fg.nn.functional.linear(x, w, bias)
    exact = host(x) @ host(w).T + host(bias)
    bound = BF16_EPS * np.abs(exact) + 4 * 19 * F32_UNIT * (np.abs(host(x)) @ np.abs(host(w)).T)
    assert (np.abs(host(y) - exact) <= bound + BF16_EPS * np.abs(host(bias))).all()


@pytest.mark.parametrize(
    "m, k, n", [(5, 3, 7), (16, 33, 32), (9, 64, 40), (32, 32, 32), (64, 96, 128)], ids=str
)
def test_both_gradients_are_contractions_within_one_rounding(m, k, n):
    # y = a @ b, loss = sum(g * y): the gradients are g @ b.T and a.T @ g, each a bfloat16
    # contraction rounded once (the loss's own sum does not enter them)
    rng = np.random.default_rng(m)
    a, b, g = (bf16(rng.standard_normal(s)) for s in ((m, k), (k, n), (m, n)))
    a.requires_grad_()
    b.requires_grad_()
    ((a @ b) * g).sum().backward()
    assert a.grad.dtype is fg.bfloat16 and b.grad.dtype is fg.bfloat16
    check_close(a.grad, host(g), host(b).T)
    check_close(b.grad, host(a).T, host(g))


def test_linear_gradients_within_one_rounding():
    rng = np.random.default_rng(5)
    x, w, g = (bf16(rng.standard_normal(s)) for s in ((64, 96), (32, 96), (64, 32)))
    x.requires_grad_()
    w.requires_grad_()
    (fg.nn.functional.linear(x, w) * g).sum().backward()
    check_close(x.grad, host(g), host(w))
    check_close(w.grad, host(g).T, host(x))


# ---------------------------------------------------------------- special points

INF, NAN = np.inf, np.nan
SUB = 2.0**-130  # a bfloat16 subnormal (its smallest normal is 2^-126), exact in bfloat16

# a (1, K) row times a (K, 1) column, and the float32 value of the bfloat16 answer
SPECIAL_DOTS = [
    ("zeros", [0.0, 0.0, 0.0], [0.0, 0.0, 0.0], 0.0),
    ("negative zeros", [-0.0, -0.0, 0.0], [1.0, 1.0, -0.0], 0.0),  # +0.0, as torch's sum
    ("ones, odd K", [1.0] * 5, [1.0] * 5, 5.0),
    ("K = 1", [3.0], [-0.5], -1.5),
    ("cancellation", [1.0, 1.0, -1.0], [256.0, 1.0, 256.0], 1.0),  # exact in float32
    ("inf", [INF, 1.0], [1.0, 1.0], INF),
    ("inf times zero", [INF, 1.0], [0.0, 1.0], NAN),
    ("inf minus inf", [INF, INF], [1.0, -1.0], NAN),
    ("NaN", [1.0, NAN, 1.0], [1.0, 1.0, 1.0], NAN),
    ("NaN times zero", [NAN], [0.0], NAN),
    # subnormal inputs are not flushed: 2^-130 * 2^100 = 2^-30, exactly
    ("subnormal input", [SUB, 0.0], [2.0**100, 1.0], 2.0**-30),
    ("subnormal result", [2.0**-70, 2.0**-70], [2.0**-60, 0.0], 2.0**-130),
    ("overflow to inf", [2.0**127, 2.0**127], [2.0, 2.0], INF),
    ("a tie rounds to even", [1.0, 1.0], [1.0, 2.0**-8], 1.0),  # 1 + 2^-8: halfway to 1 + 2^-7
]


def _same(got: float, want: float) -> bool:
    if np.isnan(want):
        return bool(np.isnan(got))
    return got == want and np.signbit(got) == np.signbit(want)


@pytest.mark.parametrize(
    "a, b, want", [c[1:] for c in SPECIAL_DOTS], ids=[c[0] for c in SPECIAL_DOTS]
)
def test_special_points(a, b, want):
    k = len(a)
    row, col = bf16(a).reshape(1, k), bf16(b).reshape(k, 1)
    got = (row @ col).float().item()
    assert _same(got, want), f"{a} . {b} = {got}, expected {want}"
    # the same product in a wider matmul, where it is one lane of a register tile
    wide_a = fg.cat([row] * 8, 0)
    wide_b = fg.cat([col] * 40, 1)
    got = host(wide_a @ wide_b)
    assert all(_same(v, want) for v in got.ravel())


def test_empty_reduction_gives_zeros_and_empty_shapes_pass():
    a, b = bf16(np.zeros((3, 0))), bf16(np.zeros((0, 4)))
    out = a @ b
    assert out.dtype is fg.bfloat16 and out.shape == (3, 4)
    assert (host(out) == 0).all() and not np.signbit(host(out)).any()
    assert (bf16(np.zeros((0, 5))) @ bf16(np.ones((5, 2)))).shape == (0, 2)


def test_one_dimensional_operands_give_torchs_shapes():
    v, m = bf16([1.0, 2.0, 3.0]), bf16(np.arange(6).reshape(3, 2))
    dot = v @ v
    assert dot.shape == () and dot.dtype is fg.bfloat16 and dot.item() == 14.0
    assert (v @ m).shape == (2,) and host(v @ m).tolist() == [16.0, 22.0]
    assert (m.T @ v).shape == (2,) and host(m.T @ v).tolist() == [16.0, 22.0]
    batch = bf16(np.ones((2, 4, 3)))
    assert (batch @ v).shape == (2, 4) and (host(batch @ v) == 6.0).all()


def test_pytorch_bfloat16_matmul_agrees_at_the_special_points():
    torch = pytest.importorskip("torch")
    for name, a, b, want in SPECIAL_DOTS:
        ta = torch.tensor(a, dtype=torch.float32).bfloat16().reshape(1, -1)
        tb = torch.tensor(b, dtype=torch.float32).bfloat16().reshape(-1, 1)
        theirs = (ta @ tb).float().item()
        assert _same(theirs, want), f"{name}: torch gives {theirs}, the table {want}"
        if name.startswith("subnormal"):
            # a matmul big enough for oneDNN's kernel flushes them (docs/NUMERICS.md)
            wide = (torch.cat([ta] * 64, 0) @ torch.cat([tb] * 64, 1)).float()
            assert set(wide.ravel().tolist()) <= {want, 0.0}
