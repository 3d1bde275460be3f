"""A 16-bit row kernel's float32 scratch row (issue 30; `pipeline/lower.py`, `stash_buffer`).

A float16 or bfloat16 softmax (log-softmax, layer norm) keeps the value its sum's pass and
its output pass share (`exp(x - max)`, `x - max`, `x - mean`) in a float32 row of the
thread's own instead of recomputing it: `exp` runs once per element and the output is
rounded once. Oracles: numpy in float64 on the rounded inputs, and fusegrad's own float32
kernel on the same inputs, rounded once (`.to(dtype)`): the two agree within one ulp, bit
for bit but at a few rounding ties (the two kernels may add a row in different orders:
`assert_rounded_float32`).
Row lengths straddle the vector widths; many rows spread over the threads; special values
sit in every row.
"""

from __future__ import annotations

import numpy as np
import pytest
from _softmax64 import log_softmax64, softmax64

import fusegrad as fg
from fusegrad.nn import functional as F
from fusegrad.pipeline.reductions import cascade_min
from fusegrad.pipeline.tile_choice import wide_registers

RNG = np.random.default_rng(3030)
INF, NAN = np.inf, np.nan
LENGTHS = [2, 7, 15, 16, 17, 33, 63, 64, 65, 100, 1023, 1024, 1025, 2053, 4099]
DTYPES = ["bfloat16", "float16"]
EPS = {"bfloat16": 2.0**-8, "float16": 2.0**-11}  # half an ulp, relative


def special_rows(rows: int, n: int) -> np.ndarray:
    """`rows` rows of length n: plain ones, and in every eighth from the second on a
    special row: NaN last, +inf first, -inf entries, all -inf, all equal, huge and tiny."""
    x = (3 * RNG.standard_normal((rows, n))).astype(np.float32)
    for r in range(1, rows, 8):
        kind = (r // 8) % 7
        if kind == 0:
            x[r, n - 1] = NAN
        elif kind == 1:
            x[r, 0] = INF
        elif kind == 2:
            x[r, 0] = x[r, n // 2] = -INF
        elif kind == 3:
            x[r, :] = -INF
        elif kind == 4:
            x[r, :] = 0.5
        elif kind == 5:
            x[r] *= np.float32(1e30)
        else:
            x[r] *= np.float32(1e-30)
    return x


def assert_close(got, want, rtol, atol) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol)


def sixteen_bits(v: np.ndarray, dtype: str) -> np.ndarray:
    """The 16-bit patterns of float32 values that are exactly float16 or bfloat16 values."""
    if dtype == "float16":
        return v.astype(np.float16).view(np.uint16).astype(np.int64)
    return (v.view(np.uint32) >> 16).astype(np.int64)


def ordered(bits: np.ndarray) -> np.ndarray:
    """16-bit float patterns as integers in the values' order (-0.0 and 0.0 alike), so
    that neighbouring values are one apart."""
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def assert_within_ulp(got: fg.Tensor, want: fg.Tensor, dtype: str) -> None:
    """16-bit values at most one ulp of their type apart."""
    a, b = got.float().numpy(), want.float().numpy()
    np.testing.assert_array_equal(np.isnan(a), np.isnan(b))
    ok = ~np.isnan(a)
    apart = np.abs(ordered(sixteen_bits(a[ok], dtype)) - ordered(sixteen_bits(b[ok], dtype)))
    assert apart.max(initial=0) <= 1, (apart.max(), a[ok][apart > 1][:5], b[ok][apart > 1][:5])


def assert_rounded_float32(got: fg.Tensor, want: fg.Tensor, dtype: str) -> None:
    """`got`, a 16-bit row kernel's result, is `want`, the float32 kernel's, rounded once:
    within one ulp everywhere, and the same bits in all but a few elements in 10,000. The
    two kernels need not add a row's values in one order (with AVX2 only LLVM may
    vectorize the float32 kernel's sum and leave the 16-bit kernel's, which also fills its
    scratch row, scalar; on AVX-512 a 1027-long row's sums were seen to differ too), and a
    quotient at a rounding tie then lands one ulp apart (docs/NUMERICS.md): which element
    does depends on the data, so bits alone made the test depend on the order tests drew
    their random rows in."""
    assert_within_ulp(got, want, dtype)
    a, b = got.float().numpy(), want.float().numpy()
    apart = ~(np.isnan(a) | (a.view(np.uint32) == b.view(np.uint32)))
    assert apart.sum() <= max(1, a.size // 2000), (np.argwhere(apart)[:5], a[apart][:5])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", LENGTHS)
def test_16bit_softmax_and_log_softmax_at_special_points(dtype, n):
    dt = getattr(fg, dtype)
    t = fg.tensor(special_rows(40, n)).to(dt).realize()
    x16 = t.float().numpy().astype(np.float64)  # the rounded input
    # the float32 kernel on the same values, rounded once: the same bits
    wide = t.float().realize()
    for name, ref in (("softmax", softmax64), ("log_softmax", log_softmax64)):
        y = getattr(t, name)(-1).realize()
        assert y.dtype == dt
        assert_rounded_float32(y, getattr(wide, name)(-1).realize().to(dt), dtype)
        # within half a 16-bit ulp of the exact value, plus float32's few ulps
        atol = 1e-7 if dtype == "float16" else 1e-30  # float16's subnormal step is 6e-8
        rtol = EPS[dtype] * 1.01
        want = ref(x16)
        if name == "log_softmax":  # an absolute error of the shift's rounding near 0
            atol = max(atol, 4e-7 * np.nanmax(np.abs(np.where(np.isfinite(x16), x16, 0))))
        assert_close(y.float().numpy(), want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
def test_many_rows_over_the_threads_and_odd_lengths(dtype):
    dt = getattr(fg, dtype)
    for rows, n in ((1000, 257), (333, 1027), (64, 4096)):
        x = special_rows(rows, n)
        t = fg.tensor(x).to(dt).realize()
        wide = t.float().realize()
        want = wide.softmax(-1).realize().to(dt)
        assert_rounded_float32(t.softmax(-1).realize(), want, dtype)
        want = wide.log_softmax(-1).realize().to(dt)
        assert_rounded_float32(t.log_softmax(-1).realize(), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_16bit_dims_other_than_the_last(dtype, dim):
    # along a leading dim the statistics are kernels of their own, stored (rounded) between
    # them: within a few 16-bit ulps of float64, not the float32 kernel's bits
    dt = getattr(fg, dtype)
    x = (3 * RNG.standard_normal((5, 70, 33))).astype(np.float32)
    x[1, 5, :] = -INF
    t = fg.tensor(x).to(dt).realize()
    x16 = t.float().numpy().astype(np.float64)
    tol = 4 * EPS[dtype]
    assert_close(t.softmax(dim).float().numpy(), softmax64(x16, dim), rtol=tol, atol=1e-6)
    got = t.log_softmax(dim).float().numpy()
    assert_close(got, log_softmax64(x16, dim), rtol=tol, atol=tol * 8)
    if dim == -1:
        wide = t.float().realize()
        want = wide.softmax(dim).realize().to(dt)
        assert_rounded_float32(t.softmax(dim).realize(), want, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_gradients_match_float64(dtype):
    dt = getattr(fg, dtype)
    x = special_rows(24, 1027)
    g = RNG.standard_normal(x.shape).astype(np.float32)
    t = fg.tensor(x).to(dt).realize().requires_grad_()
    x16 = t.detach().float().numpy().astype(np.float64)
    g16 = fg.tensor(g).to(dt).realize()
    g64 = g16.float().numpy().astype(np.float64)
    s = softmax64(x16)
    (dx,) = fg.grad((t.softmax(-1) * g16).sum(), [t])
    assert dx.dtype == dt
    # the forward's output is rounded before the backward reads it: a few 16-bit ulps
    with np.errstate(invalid="ignore"):
        want = s * (g64 - (g64 * s).sum(-1, keepdims=True))
    tol = 8 * EPS[dtype]
    assert_close(dx.float().numpy(), want, rtol=tol, atol=tol * np.nanmax(np.abs(g64)) / 100)


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_rows_of_one_and_empty_rows(dtype):
    dt = getattr(fg, dtype)
    x = fg.tensor(np.float32([[3.0], [-INF], [NAN]])).to(dt)
    got = x.softmax(-1).float().numpy()
    np.testing.assert_array_equal(np.isnan(got[:, 0]), [False, True, True])
    assert got[0, 0] == 1.0
    assert fg.zeros(3, 0, dtype=dt).softmax(-1).shape == (3, 0)
    assert fg.zeros(0, 5, dtype=dt).log_softmax(-1).shape == (0, 5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_layer_norm_rounds_once(dtype):
    dt = getattr(fg, dtype)
    x = fg.tensor((2 + 3 * RNG.standard_normal((37, 515))).astype(np.float32)).to(dt).realize()
    y = F.layer_norm(x, (515,))
    want = F.layer_norm(x.float().realize(), (515,)).realize().to(dt)
    assert_rounded_float32(y.realize(), want, dtype)


# ---------------------------------------------------------------- structure


@pytest.mark.parametrize("dtype", DTYPES)
def test_16bit_softmax_computes_exp_once_from_a_float32_scratch_row(dtype):
    x = fg.tensor(RNG.standard_normal((16, 1000)).astype(np.float32)).to(getattr(fg, dtype))
    (k,) = fg.kernels(x.realize().softmax(-1))
    ir = k.loop_ir
    assert "scratch scratch0: float32[1000]" in ir, ir
    lines = [s.strip() for s in ir.splitlines()]
    head = next(i for i, s in enumerate(lines) if s.startswith("for o1 in"))
    # exp in the sum's pass only (there twice where the row cascades: its loop and its
    # ragged tail), not in the output pass, which reads the scratch row
    twice = 1000 >= cascade_min()  # (a cascade's ragged tail repeats its loop's body)
    assert "\n".join(lines[:head]).count("exp(") == (2 if twice else 1), ir
    assert "exp(" not in "\n".join(lines[head:]), ir
    assert "load scratch0[o1]" in "\n".join(lines[head:]), ir


def test_float32_keeps_its_stash_in_the_output():
    x = fg.tensor(RNG.standard_normal((16, 1000)).astype(np.float32))
    (k,) = fg.kernels(x.softmax(-1))
    assert "scratch" not in k.loop_ir and "load out0" in k.loop_ir, k.loop_ir


def test_the_output_pass_asks_for_whole_avx512_registers():
    x = fg.tensor(RNG.standard_normal((16, 1000)).astype(np.float32)).bfloat16().realize()
    (k,) = fg.kernels(x.softmax(-1))
    hinted = "for o1 in 0..1000 (16 lanes):" in k.loop_ir
    assert hinted == wide_registers(), k.loop_ir


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_longest_fused_16bit_row_keeps_its_scratch_on_each_threads_stack(dtype):
    # rows are fused up to ROW_CACHE_BYTES / 8 elements of a 16-bit type: a 128 KB float32
    # scratch row, one per thread, on its stack; one longer is not a row kernel
    from fusegrad.pipeline.schedule import ROW_CACHE_BYTES

    dt = getattr(fg, dtype)
    n = ROW_CACHE_BYTES // 8
    for length, fused in ((n, True), (n + 16, False)):
        t = fg.tensor(special_rows(12, length)).to(dt).realize()
        (k, *rest) = fg.kernels(t.softmax(-1))
        assert (not rest and f"scratch0: float32[{length}]" in k.loop_ir) == fused
        wide = t.float().realize()
        if fused:
            # the float32 row of this length (128 KB) is past float32's row kernels: three
            # kernels, whose sum cascades in another order, so its last bit may differ and
            # round to the neighbouring 16-bit value (random rows: in 4 of 12 draws)
            assert_within_ulp(t.softmax(-1).realize(), wide.softmax(-1).realize().to(dt), dtype)
        x16 = t.float().numpy().astype(np.float64)
        assert_close(t.softmax(-1).float().numpy(), softmax64(x16), rtol=4 * EPS[dtype], atol=1e-7)
