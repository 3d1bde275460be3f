"""float16 and bfloat16 (issue 30): dtypes, promotion, creation, conversions at their
special points, ops and gradients against float32 with tolerances from each type's epsilon.

Expected values are PyTorch 2.13's (checked against torch by hand; torch is not needed
here). Each 16-bit result is compared with float32 computed from the same 16-bit inputs.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest

import fusegrad as fg

HALVES = [fg.float16, fg.bfloat16]
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7}


def host(t) -> np.ndarray:
    """A tensor's values as float32 (bfloat16's `.numpy()` raises, as torch's)."""
    return np.asarray(t._host(), dtype=np.float32)


def bits(t) -> list[int]:
    return t._host().view(np.uint16).tolist()


# ---------------------------------------------------------------- the dtypes


def test_names_sizes_and_methods():
    assert fg.half is fg.float16 and fg.float16 is not fg.bfloat16
    assert (fg.float16.itemsize, fg.bfloat16.itemsize) == (2, 2)
    assert fg.float16.is_floating_point and fg.bfloat16.is_floating_point
    x = fg.tensor([1.0, 2.5])
    assert x.half().dtype is fg.float16 and x.bfloat16().dtype is fg.bfloat16
    assert x.to(fg.bfloat16).dtype is fg.bfloat16 and x.to("float16").dtype is fg.float16
    assert x.half().element_size() == 2 and x.half().float().dtype is fg.float32
    assert x.half().type() == "fusegrad.HalfTensor"
    assert x.bfloat16().type() == "fusegrad.BFloat16Tensor"


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_dtype_on_creation_ops(dt):
    made = [
        fg.zeros(2, dtype=dt),
        fg.ones(2, dtype=dt),
        fg.full((2,), 1.5, dtype=dt),
        fg.empty(2, dtype=dt),
        fg.arange(0, 2, dtype=dt),
        fg.linspace(0, 1, 3, dtype=dt),
        fg.eye(2, dtype=dt),
        fg.rand(3, dtype=dt),
        fg.randn(3, dtype=dt),
        fg.tensor([1.0, 2.0], dtype=dt),
        fg.zeros_like(fg.ones(2), dtype=dt),
    ]
    assert [t.dtype for t in made] == [dt] * len(made)
    np.testing.assert_array_equal(host(made[4]), [0, 1])
    np.testing.assert_array_equal(host(made[5]), [0, 0.5, 1])


def test_promotion_table_is_torchs():
    ints = [fg.bool, fg.uint8, fg.int8, fg.int16, fg.int32, fg.int64]
    floats = [fg.float16, fg.bfloat16, fg.float32, fg.float64]
    # torch.promote_types(row, column) for column in ints + floats
    want = {
        fg.float16: [fg.float16] * 7 + [fg.float32, fg.float32, fg.float64],
        fg.bfloat16: [fg.bfloat16] * 6 + [fg.float32, fg.bfloat16, fg.float32, fg.float64],
    }
    for row, expected in want.items():
        for col, w in zip(ints + floats, expected):
            a, b = fg.ones(2, dtype=row), fg.ones(2, dtype=col)
            assert (a + b).dtype is w, (row, col)
            assert (b * a).dtype is w, (col, row)


def test_scalars_and_zero_dim_tensors_promote_as_torch():
    h = fg.ones(2, dtype=fg.float16)
    assert (h + 1.5).dtype is fg.float16 and (
        fg.ones(2, dtype=fg.bfloat16) + 1
    ).dtype is fg.bfloat16
    assert (fg.tensor([1]) + 1.5).dtype is fg.float32
    assert (fg.tensor([1]) + fg.tensor(1.0, dtype=fg.float16)).dtype is fg.float16
    assert (h + fg.tensor(1.0)).dtype is fg.float16  # a 0-d float32 does not widen it
    assert (fg.ones(2) + fg.tensor(1.0, dtype=fg.float16)).dtype is fg.float32


def test_default_dtype():
    assert fg.get_default_dtype() is fg.float32
    fg.set_default_dtype(fg.float16)
    try:
        assert fg.get_default_dtype() is fg.float16
        assert fg.tensor([1.5]).dtype is fg.float16 and fg.zeros(2).dtype is fg.float16
        assert (fg.tensor([1]) + 1.5).dtype is fg.float16
        assert fg.arange(0.0, 3).dtype is fg.float16 and fg.full((1,), 0.5).dtype is fg.float16
        assert (fg.arange(3) / 2).dtype is fg.float16
        assert fg.nn.Linear(2, 2).weight.dtype is fg.float16  # parameters too, as torch's
        assert fg.nn.LayerNorm(2).weight.dtype is fg.float16
        assert "dtype" not in repr(fg.tensor([1.5]))  # the default is not shown, as torch
        assert "dtype=fusegrad.float32" in repr(fg.tensor([1.5], dtype=fg.float32))
    finally:
        fg.set_default_dtype(fg.float32)
    with pytest.raises(TypeError, match="only floating-point types"):
        fg.set_default_dtype(fg.int32)
    assert fg.get_default_dtype() is fg.float32


def test_finfo_is_torchs():
    h, b = fg.finfo(fg.float16), fg.finfo(fg.bfloat16)
    assert (h.bits, h.eps, h.max, h.tiny, h.resolution) == (16, 2.0**-10, 65504.0, 2.0**-14, 0.001)
    assert (b.bits, b.eps, b.max, b.tiny, b.resolution) == (
        16,
        2.0**-7,
        3.3895313892515355e38,
        2.0**-126,
        0.01,
    )
    assert (h.dtype, b.dtype) == ("float16", "bfloat16")


@pytest.mark.cpu_device  # torch prints device='cuda:0' too
def test_numpy_in_and_out_and_printing():
    a = np.array([1.5, -2.0, 0.1], np.float16)
    t = fg.tensor(a)
    assert t.dtype is fg.float16 and t.numpy().dtype == np.float16
    np.testing.assert_array_equal(t.numpy(), a)
    assert t.tolist() == [1.5, -2.0, 0.0999755859375] and isinstance(t[0].item(), float)
    b = t.bfloat16()
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):
        b.numpy()
    assert b.tolist() == [1.5, -2.0, 0.10009765625]  # 0.0999755859375 rounded to 8 bits
    assert repr(t) == "tensor([ 1.5000, -2.0000,  0.1000], dtype=fusegrad.float16)"
    assert repr(b) == "tensor([ 1.5000, -2.0000,  0.1001], dtype=fusegrad.bfloat16)"


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_save_and_load_keep_the_bits(dt):
    x = fg.tensor([0.1, -3.0, 65504.0, 1e-6], dtype=dt, requires_grad=True)
    f = io.BytesIO()
    fg.save({"x": x}, f)
    f.seek(0)
    y = fg.load(f)["x"]
    assert y.dtype is dt and y.requires_grad and bits(y) == bits(x)


def test_module_half_bfloat16_and_to():
    m = fg.nn.Linear(3, 2)
    assert m.half().weight.dtype is fg.float16 and m(fg.ones(1, 3, dtype=fg.half)).dtype is fg.half
    assert m.bfloat16().bias.dtype is fg.bfloat16
    assert m.to(fg.float32).weight.dtype is fg.float32


# ---------------------------------------------------------------- conversions

# float32 values at the special points, and torch's bits for them in float16 and bfloat16:
# zeros, 1, float16's max and the overflow past it (65520 is the tie that rounds to inf),
# subnormals (6e-8 is float16's smallest; 2.9e-8 is below its half), float32 subnormals,
# infinities, and ties (1 + 2^-11 and 1 + 3 * 2^-11 for float16, 1 + 2^-8 and 1 + 3 * 2^-8
# for bfloat16: to even), bfloat16's max and what overflows it
SPECIAL = [0.0, -0.0, 1.0, 65504.0, 65520.0, 1e5, -1e5, 6e-8, 2.9e-8, 3.0e-8, 1e-40]
SPECIAL += [np.inf, -np.inf, 1.00048828125, 1.00146484375, 1.00390625, 1.01171875]
SPECIAL += [3.3895314e38, 3.4e38, 1.0000001, 1.00390637]
F16_BITS = [0x0, 0x8000, 0x3C00, 0x7BFF, 0x7C00, 0x7C00, 0xFC00, 0x1, 0x0, 0x1, 0x0]
F16_BITS += [0x7C00, 0xFC00, 0x3C00, 0x3C02, 0x3C04, 0x3C0C, 0x7C00, 0x7C00, 0x3C00, 0x3C04]
BF16_BITS = [0x0, 0x8000, 0x3F80, 0x4780, 0x4780, 0x47C3, 0xC7C3, 0x3381, 0x32F9, 0x3301, 0x1]
BF16_BITS += [0x7F80, 0xFF80, 0x3F80, 0x3F80, 0x3F80, 0x3F82, 0x7F7F, 0x7F80, 0x3F80, 0x3F81]


@pytest.mark.parametrize(
    "dt, want", [(fg.float16, F16_BITS), (fg.bfloat16, BF16_BITS)], ids=["float16", "bfloat16"]
)
def test_conversions_at_special_points(dt, want):
    # three copies: the vectorized loop and its scalar tail both convert
    values = np.array(SPECIAL * 3, np.float32)
    x = fg.tensor(values)
    in_kernel = x.to(dt).realize()  # a compiled kernel rounds
    on_host = fg.tensor(values, dtype=dt)  # numpy's conversion (ml_dtypes for bfloat16)
    assert bits(in_kernel) == want * 3
    assert bits(on_host) == want * 3
    back = in_kernel.float()  # and widening is exact
    np.testing.assert_array_equal(host(back), in_kernel._host().astype(np.float32))


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_nan_stays_a_nan_with_its_sign(dt):
    # quiet and signaling NaNs of both signs; bfloat16's rounding add must not carry a NaN
    # whose payload is all ones into the exponent (0x7fffffff would round up to inf)
    raw = np.array([0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FFFFFFF] * 5, np.uint32)
    x = fg.tensor(raw.view(np.float32)).to(dt)
    got = np.array(bits(x), np.uint16)
    back = host(x)
    assert np.isnan(back).all()
    assert ((got >> 15) == (raw >> 31)).all()  # the sign is kept


# ---------------------------------------------------------------- ops and gradients


def _inputs(dt, *shapes, seed=0):
    """Random 16-bit tensors and the float32 tensors of exactly their values."""
    rng = np.random.default_rng(seed)
    halves = [fg.tensor(rng.standard_normal(s).astype(np.float32), dtype=dt) for s in shapes]
    return halves, [fg.tensor(host(h)) for h in halves]


def close(got, want, dt, k=4.0):
    """Within k of dt's epsilon, relative to the magnitude of the values."""
    assert got.dtype is dt, got.dtype
    want = want if isinstance(want, np.ndarray) else host(want)
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(
        host(got), want, rtol=k * EPS[dt.name], atol=k * EPS[dt.name] * scale
    )


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_elementwise_reductions_matmul_softmax(dt):
    # float32 references by numpy, from the same 16-bit values
    (a, b, m), _ = _inputs(dt, (5, 24), (5, 24), (24, 7))
    a32, b32, m32 = host(a), host(b), host(m)
    chain = ((a * 0.5 + 1.0).exp() * b - 3.0).relu() / (1 + a * a)
    close(chain, np.maximum(np.exp(a32 * 0.5 + 1) * b32 - 3, 0) / (1 + a32 * a32), dt)
    close(a.sum(1), a32.sum(1), dt, k=8)
    close(a.amax(0), a32.max(0), dt, k=0)  # exact: a max picks one of the values
    close(a @ m, a32 @ m32, dt, k=8)
    e = np.exp(a32 - a32.max(-1, keepdims=True))
    close(a.softmax(-1), e / e.sum(-1, keepdims=True), dt)


def test_a_fused_kernel_rounds_once():
    # (1 + 2^-11) - 1 is 2^-11 in float32 registers; rounded after the add, as torch's
    # one op at a time, it would be 0 (docs/NUMERICS.md)
    x = fg.tensor([1.0], dtype=fg.float16)
    assert ((x + 2.0**-11) - 1).item() == 2.0**-11
    assert (((x + 2.0**-11).realize()) - 1).item() == 0.0  # a kernel boundary rounds
    assert ((x.float() + 2.0**-11).half() - 1).item() == 0.0  # and so does an explicit cast


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_gradients_are_16_bit_and_close_to_float32(dt):
    (x, w), (x32, w32) = _inputs(dt, (4, 6), (6, 3), seed=1)
    grads = []
    for a, b in ((x, w), (x32, w32)):
        a.requires_grad_()
        b.requires_grad_()
        y = (a @ b).softmax(-1)
        ((y * y).sum() + a.exp().mean()).backward()
        grads.append((a.grad, b.grad))
    (gx, gw), (gx32, gw32) = grads
    assert gx.dtype is dt and gw.dtype is dt
    close(gx, gx32, dt, k=8)
    close(gw, gw32, dt, k=8)


def test_the_reference_evaluator_rounds_as_one_kernel():
    # it computes in float32 and rounds at the roots: what one fused kernel does (a graph
    # the scheduler cuts rounds at each cut too, so there the two may differ by an ulp)
    from fusegrad.ir.reference import evaluate

    (a, b), _ = _inputs(fg.float16, (3, 40), (3, 40), seed=2)
    y = ((a * b + 1.0) * (a - b)).tanh() * 3
    want = evaluate(y.node)
    assert want.dtype == np.float16
    np.testing.assert_array_equal(y.numpy(), want)


def test_a_fill_beyond_the_largest_finite_value_raises_as_torch():
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half"):
        fg.full((2,), 65505.0, dtype=fg.float16)
    with pytest.raises(RuntimeError, match="cannot be converted to type c10::BFloat16"):
        fg.zeros(2, dtype=fg.bfloat16).fill_(3.39e38)
    assert fg.full((2,), 65504.0, dtype=fg.half).tolist() == [65504.0, 65504.0]
    assert fg.full((2,), float("inf"), dtype=fg.bfloat16).tolist() == [math.inf, math.inf]


@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_a_filled_tensor_holds_16_bit_values_even_unrealized(dt):
    # full's constant is rounded where it is made: fused into the next op (no store in
    # between) it is the same value a realized tensor holds, as torch's
    lazy = fg.full((2,), 0.1, dtype=dt)
    stored = fg.full((2,), 0.1, dtype=dt).realize()
    assert (lazy * 3).tolist() == (stored * 3).tolist()
    assert (lazy * 3).float().tolist() == (stored.float() * 3).tolist()


@pytest.mark.parametrize("dt, bits", [(fg.float16, 11), (fg.bfloat16, 8)], ids=["f16", "bf16"])
def test_rand_draws_exact_16_bit_values_below_one(dt, bits):
    # as torch: `bits` random bits times 2^-bits, so none rounds up to 1.0 and a random
    # tensor fused into its consumer is the value it would be stored as
    from fusegrad.ir.reference import evaluate

    fg.manual_seed(0)
    r = fg.rand(4096, dtype=dt)
    got = host(r)
    scaled = got * 2**bits
    assert (scaled == np.round(scaled)).all() and 0 <= got.min() and got.max() < 1
    assert 0.45 < got.mean() < 0.55
    np.testing.assert_array_equal(got, evaluate(r.node).astype(np.float32))
    n = fg.randn(4096, dtype=dt)  # from float32 uniforms: tails beyond 3.9 sigma stay
    assert n.dtype is dt and np.isfinite(host(n)).all() and 0.9 < host(n).std() < 1.1


def test_without_ml_dtypes_bfloat16_is_refused_and_the_rest_works():
    # a machine without the package (a GPU box that reaches no registry): fusegrad imports,
    # float16 works, bfloat16 raises with the way out
    import subprocess
    import sys

    code = (
        "import sys; sys.modules['ml_dtypes'] = None\n"
        "import fusegrad as fg\n"
        "assert fg.tensor([1.5], dtype=fg.float16).tolist() == [1.5]\n"
        "assert fg.finfo(fg.float16).eps == 2.0 ** -10\n"
        "for make in (lambda: fg.zeros(2, dtype=fg.bfloat16), lambda: fg.ones(2).to('bfloat16')):\n"
        "    try:\n"
        "        make()\n"
        "    except (TypeError, RuntimeError) as e:\n"
        "        assert 'pip install ml_dtypes' in str(e), e\n"
        "    else:\n"
        "        raise AssertionError('bfloat16 without ml_dtypes')\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]


@pytest.mark.backend_slice
@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_a_comparison_sees_its_operands_as_their_type_holds_them(backend, dt):
    # 1 + 2^-12 rounds to 1 in both types: torch, rounding each op, says they are equal;
    # a kernel that kept the sum in float32 registers would say they are not
    one, tiny = fg.tensor([1.0], dtype=dt), fg.tensor([2.0**-12], dtype=dt)
    assert ((one + tiny) == one).tolist() == [True]
    assert ((one + tiny) > one).tolist() == [False]
    # amax's gradient finds its ties by comparing the recomputed input with the stored
    # maximum: unrounded, they were never equal, and the gradient was 0 / 0 = NaN
    rng = np.random.default_rng(3)
    values = [rng.uniform(-2, 2, (3, 4)).astype(np.float32) for _ in range(2)]
    grads = []
    for t in (dt, fg.float32):
        a, b = (fg.tensor(v, dtype=dt).to(t).requires_grad_() for v in values)
        x = a + b
        m = x.unsqueeze(0).expand(2, 3, 4).amax(0).log_softmax(-1)
        grads.append(host(fg.grad((m * m).sum(), [a])[0]))
    assert not np.isnan(grads[0]).any()
    np.testing.assert_allclose(grads[0], grads[1], rtol=8 * EPS[dt.name], atol=8 * EPS[dt.name])


def _unary_table():
    import test_differential  # noqa: E402  (tests/frontend is on sys.path)

    return test_differential.UNARY


@pytest.mark.backend_slice
@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_unary_functions_in_16_bits(backend, dt):
    """Every function of test_differential's table on a grid of its domain in `dt`: within
    one ulp of the 16-bit type of the exact value (computed in float32, rounded once), and
    inf where the exact value is past the type's range, as PyTorch's."""
    table = _unary_table()
    grids, outs = {}, {}
    for name, (_, (lo, hi)) in table.items():
        x = fg.tensor(np.linspace(lo, hi, 1031), dtype=dt)  # rounded once, here
        grids[name], outs[name] = x, getattr(x, name)()
    fg.realize(*outs.values())
    for name, (fn, _) in table.items():
        x = host(grids[name]).astype(np.float64)
        with np.errstate(all="ignore"):
            exact = fn(x)
        want = host(fg.tensor(exact, dtype=dt)).astype(np.float64)  # as the type holds it
        got = host(outs[name]).astype(np.float64)
        assert outs[name].dtype is dt
        same = (got == want) | (np.isnan(got) & np.isnan(want))
        finite = np.isfinite(want) & ~same
        with np.errstate(invalid="ignore"):  # inf - inf where both overflowed
            err = np.abs(got - want)
        tol = EPS[dt.name] * np.abs(want) + float(fg.finfo(dt).smallest_normal)
        bad = np.flatnonzero(~same & (~finite | (err > tol)))
        assert bad.size == 0, (
            f"{name}({x[bad[0]]!r}) in {dt}: {got[bad[0]]!r}, exactly {exact[bad[0]]!r} "
            f"(as {dt} {want[bad[0]]!r})"
        )


@pytest.mark.backend_slice
@pytest.mark.parametrize("dt", HALVES, ids=str)
def test_a_cast_reads_a_16_bit_value_as_its_type_holds_it(backend, dt):
    # a value computed in a kernel and cast in the same kernel is still a 16-bit value:
    # `.float()` of it is the rounded value, as torch's (which rounds every op)
    one, tiny = fg.tensor([1.0], dtype=dt), fg.tensor([2.0**-12], dtype=dt)
    for wide in (fg.float32, fg.float64):
        assert (one + tiny).to(wide).tolist() == [1.0]
    rng = np.random.default_rng(5)
    a, b = (
        fg.tensor(rng.standard_normal(s).astype(np.float32), dtype=dt) for s in [(9, 33), (33, 5)]
    )
    product = a @ b
    assert host(product.float()).tolist() == host(product).tolist()
