"""One-pass row statistics on the CPU (issues 32, 28; `pipeline/lower.py`).

A float max reduction runs in vector lanes, its ragged end read as an overlapping last
vector (`gen_lane_max`); a row kernel's value shared by a row sum's pass and the output
(softmax's `exp(x - max)`, log-softmax's `x - max`, layer norm's `x - mean`) is stored
into the output by that pass and loaded back by the output pass (`stashed_row_value`).

Oracles: numpy in float64, torch's values written out as literals (and checked against a
live torch where it is installed), and the reference evaluator of the same graph. Row
lengths straddle every vector width (8, 16, 32, 64 lanes) and the cascade's 1024, with
the special values placed in the overlapping last vector too.
"""

from __future__ import annotations

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)
from _softmax64 import log_softmax64, softmax64

import fusegrad as fg
from fusegrad.ir.reference import evaluate_many
from fusegrad.nn import functional as F
from fusegrad.pipeline.reductions import cascade_min

RNG = np.random.default_rng(2832)
INF, NAN = np.inf, np.nan
LENGTHS = [1, 2, 7, 8, 9, 17, 63, 64, 65, 100, 1000, 1024, 1027, 2053]


def special_rows(n: int) -> np.ndarray:
    """Rows of length n: plain, NaN last (in the overlapping vector), +inf first, -inf
    first, in the middle and last (a GPU thread's share starting at -inf), all -inf, +inf
    and -inf, huge (1e30) and tiny (1e-30) magnitudes."""
    x = (3 * RNG.standard_normal((8, n))).astype(np.float32)
    x[1, n - 1] = NAN
    x[2, 0] = INF
    x[3, 0] = x[3, n // 2] = x[3, n - 1] = -INF
    x[4, :] = -INF
    x[5, 0], x[5, n - 1] = INF, -INF
    x[6] *= np.float32(1e30)
    x[7] *= np.float32(1e-30)
    return x


def assert_same(got, want, rtol=2e-5, atol=1e-6) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.isinf(got), np.isinf(want))
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=rtol, atol=atol)


# ---------------------------------------------------------------- values


@pytest.mark.parametrize("n", LENGTHS)
def test_softmax_log_softmax_and_amax_at_special_points_across_vector_edges(n):
    x = special_rows(n)
    t = fg.tensor(x)
    x64 = x.astype(np.float64)
    assert_same(t.softmax(-1).numpy(), softmax64(x64))
    assert_same(t.log_softmax(-1).numpy(), log_softmax64(x64), atol=1e-5)
    assert_same(t.amax(-1).numpy(), x.max(-1))  # numpy's max propagates NaN, as torch's


@pytest.mark.parametrize("n", [9, 65, 1027])
def test_gradients_match_the_reference_evaluator_at_special_points(n):
    x = fg.tensor(special_rows(n)).requires_grad_()
    g = fg.tensor(RNG.standard_normal((8, n)).astype(np.float32))
    outs = []
    for f in (lambda v: v.softmax(-1), lambda v: v.log_softmax(-1)):
        y = f(x)
        outs += [y, *fg.grad((y * g).sum(), [x])]
    want = evaluate_many([o.node for o in outs])
    for o, w in zip(outs, want):
        assert_same(o.numpy(), w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n", [24, 1027])
def test_finite_gradients_match_numpy_in_float64(n):
    x = (3 * RNG.standard_normal((6, n))).astype(np.float32)
    g = RNG.standard_normal((6, n)).astype(np.float32)
    xt = fg.tensor(x).requires_grad_()
    s = softmax64(x.astype(np.float64))
    g64 = g.astype(np.float64)
    (dx,) = fg.grad((xt.softmax(-1) * fg.tensor(g)).sum(), [xt])
    assert_same(dx.numpy(), s * (g64 - (g64 * s).sum(-1, keepdims=True)), atol=1e-6)
    (dx,) = fg.grad((xt.log_softmax(-1) * fg.tensor(g)).sum(), [xt])
    assert_same(dx.numpy(), g64 - s * g64.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)


# torch 2.x, float32, written out: softmax, log_softmax and amax of each row along -1
TORCH_ROWS = [
    ([-INF, 0.0], [0.0, 1.0], [-INF, 0.0], 0.0),
    ([-INF, -INF], [NAN, NAN], [NAN, NAN], -INF),
    ([INF, 0.0], [NAN, NAN], [NAN, NAN], INF),
    ([INF, INF], [NAN, NAN], [NAN, NAN], INF),
    ([NAN, 0.0], [NAN, NAN], [NAN, NAN], NAN),
    ([1e30, -1e30], [1.0, 0.0], [0.0, -2.0000000300949324e30], 1.0000000150474662e30),
    ([0.0, -30.0], [1.0, 9.357622912219837e-14], [0.0, -30.0], 0.0),
    ([0.0, -30.0, -30.0, -30.0], None, [0.0, -30.0, -30.0, -30.0], 0.0),
    ([3.0], [1.0], [0.0], 3.0),
]


@pytest.mark.parametrize("row, soft, log, top", TORCH_ROWS)
def test_torch_values_written_out(row, soft, log, top):
    x = fg.tensor([row])
    if soft is not None:
        np.testing.assert_array_equal(x.softmax(-1).numpy(), [soft])
    np.testing.assert_array_equal(x.log_softmax(-1).numpy(), np.float32([log]))
    np.testing.assert_array_equal(x.amax(-1).numpy(), np.float32([top]))


# torch's gradients of (f(x) * [1, 2, 3]).sum() at x = [-inf, 0, 1], written out
TORCH_GRADS = [
    ("softmax", [-0.0, -0.19661197, 0.19661188]),
    ("log_softmax", [1.0, 0.38635138, -1.3863516]),
]


@pytest.mark.parametrize("name, want", TORCH_GRADS)
def test_torch_gradients_written_out(name, want):
    x = fg.tensor([[-INF, 0.0, 1.0]]).requires_grad_()
    (dx,) = fg.grad((getattr(x, name)(-1) * fg.tensor([[1.0, 2.0, 3.0]])).sum(), [x])
    np.testing.assert_allclose(dx.numpy(), [want], rtol=1e-6, atol=1e-7)
    assert np.signbit(dx.numpy()[0, 0]) == np.signbit(want[0])


def test_against_live_torch_at_special_points():
    torch = pytest.importorskip("torch")
    for n in (9, 65, 1027):
        x = special_rows(n)
        g = RNG.standard_normal(x.shape).astype(np.float32)
        for name in ("softmax", "log_softmax"):
            xt = torch.tensor(x, requires_grad=True)
            y = getattr(torch, name)(xt, -1)
            (y * torch.tensor(g)).sum().backward()
            t = fg.tensor(x).requires_grad_()
            z = getattr(t, name)(-1)
            (dz,) = fg.grad((z * fg.tensor(g)).sum(), [t])
            assert_same(z.numpy(), y.detach().numpy(), atol=1e-5)
            assert_same(dz.numpy(), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
        assert_same(fg.tensor(x).amax(-1).numpy(), torch.tensor(x).amax(-1).numpy())


def test_log_softmax_near_zero_keeps_float32_precision():
    # the largest entry's log-probability is -log(1 + 999 e^-20) = -2.06e-6: float32's sum
    # holds 1 + 2.06e-6 to a unit or two of 1.0's last place, as the lanes LLVM sums in
    # for the host meet the 1 (torch's float32: -1.907e-6, 1.3 units off; ours -2.146e-6,
    # 0.7, on the Intel Xeon, and -1.788e-6, 2.3, on an AMD Zen 5)
    n = 1000
    x = np.full((2, n), -20.0, np.float32)
    x[:, 0] = 0.0
    got = fg.tensor(x).log_softmax(-1).numpy()
    want = log_softmax64(x.astype(np.float64))
    ulp_of_one = float(np.finfo(np.float32).eps)
    np.testing.assert_allclose(got[:, 0], want[:, 0], rtol=0, atol=3 * ulp_of_one)
    assert (got[:, 0] < 0).all()  # not rounded to 0
    np.testing.assert_allclose(got[:, 1:], want[:, 1:], rtol=1e-6)


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_any_dim_and_negative_dims(dim):
    x = (3 * RNG.standard_normal((4, 70, 33))).astype(np.float32)
    x[1, 5, :] = -INF
    x[2, :, 7] = -INF
    t = fg.tensor(x)
    assert_same(t.softmax(dim).numpy(), softmax64(x.astype(np.float64), dim))
    assert_same(t.log_softmax(dim).numpy(), log_softmax64(x.astype(np.float64), dim), atol=1e-5)
    assert_same(t.amax(dim).numpy(), x.max(dim))


def test_strided_views_and_float64():
    x = (3 * RNG.standard_normal((67, 130))).astype(np.float32)
    t = fg.tensor(x).transpose(0, 1)  # rows read with a stride
    assert_same(t.softmax(-1).numpy(), softmax64(x.T.astype(np.float64)))
    assert_same(t.amax(-1).numpy(), x.T.max(-1))
    x64 = 30 * RNG.standard_normal((5, 1027))
    t64 = fg.tensor(x64)
    assert_same(t64.softmax(-1).numpy(), softmax64(x64), rtol=1e-12, atol=1e-15)
    assert_same(t64.log_softmax(-1).numpy(), log_softmax64(x64), rtol=1e-12, atol=1e-12)


def test_layer_norm_over_two_trailing_axes():
    x = (2 + 3 * RNG.standard_normal((6, 8, 129))).astype(np.float32)
    w = (1 + RNG.standard_normal((8, 129))).astype(np.float32)
    b = RNG.standard_normal((8, 129)).astype(np.float32)
    y = F.layer_norm(fg.tensor(x), (8, 129), fg.tensor(w), fg.tensor(b))
    x64 = x.astype(np.float64)
    mean = x64.mean((1, 2), keepdims=True)
    want = (x64 - mean) / np.sqrt(x64.var((1, 2), keepdims=True) + 1e-5) * w + b
    assert_same(y.numpy(), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype, tol", [("float16", 2e-3), ("bfloat16", 1.6e-2)])
def test_16bit_inputs(dtype, tol):
    x = special_rows(65)[:6]
    t = fg.tensor(x).to(getattr(fg, dtype))
    x16 = t.float().numpy().astype(np.float64)  # the rounded input
    y = t.softmax(-1)
    assert y.dtype == getattr(fg, dtype)
    assert_same(y.float().numpy(), softmax64(x16), rtol=tol, atol=tol / 10)
    assert_same(t.log_softmax(-1).float().numpy(), log_softmax64(x16), rtol=tol, atol=tol)
    assert_same(t.amax(-1).float().numpy(), x16.max(-1))


def test_empty_rows_and_zero_size_dims():
    assert fg.zeros(3, 0).softmax(-1).shape == (3, 0)
    assert fg.zeros(0, 5).softmax(-1).shape == (0, 5)
    assert fg.zeros(0, 5).log_softmax(1).shape == (0, 5)
    assert fg.zeros(0, 5).amax(1).shape == (0,)
    assert fg.tensor(2.0).softmax(0).item() == 1.0
    assert fg.tensor(2.0).log_softmax(0).item() == 0.0


# ---------------------------------------------------------------- structure


def test_softmax_computes_exp_once_per_element_and_its_max_in_vectors():
    x = fg.tensor(RNG.standard_normal((16, 1000)).astype(np.float32))
    (k,) = fg.kernels(x.softmax(-1))
    ir = k.loop_ir
    lines = [s.strip() for s in ir.splitlines()]
    head = next(i for i, s in enumerate(lines) if s.startswith("for o1 in"))
    # exp in the sum's pass (its loop and, where the row cascades, its ragged tail's: 1000
    # elements cascade without AVX-512, `cascade_min`), not again in the output pass
    twice = 1000 >= cascade_min()  # (a cascade's ragged tail repeats its loop's body)
    assert "\n".join(lines[:head]).count("exp(") == (2 if twice else 1), ir
    assert "exp(" not in "\n".join(lines[head:]), ir
    assert "load out0" in "\n".join(lines[head:]), ir  # the output pass rescales in place
    first_max = next(i for i, s in enumerate(lines) if "= max(acc" in s)
    assert lines[first_max - 1].startswith("v") and "vector for t in 0..64" in ir, ir


def test_a_plain_row_max_kernel_runs_in_vector_lanes():
    x = fg.tensor(RNG.standard_normal((16, 1000)).astype(np.float32))
    (k,) = fg.kernels(x.amax(1))
    assert "vector for t in 0..64" in k.loop_ir and "max over acc" in k.loop_ir, k.loop_ir
    (col,) = fg.kernels(x.amax(0))  # a column max keeps its tile
    np.testing.assert_array_equal(x.amax(0).numpy(), x.numpy().max(0))
    assert col.name.startswith("r_max")


def test_one_row_per_kernel_stores_nothing_early():
    # a single row: the whole row is one thread's; the value is not stashed (several
    # threads would write the output while another still reads it)
    x = fg.tensor(RNG.standard_normal((1, 2000)).astype(np.float32))
    y = x.softmax(-1)
    assert_same(y.numpy(), softmax64(x.numpy().astype(np.float64)))


# ---------------------------------------------------------------- the GPU: online softmax


def _gpu_kernel(t: fg.Tensor):
    from fusegrad.pipeline.cuda import cuda_kernel
    from fusegrad.pipeline.gpu import map_to_gpu
    from fusegrad.pipeline.lower import lower
    from fusegrad.pipeline.schedule import schedule
    from fusegrad.runtime.engine import engine

    (item,) = schedule([t.node], engine.has_value_predicate())
    loop = lower(item, tile=False)
    return loop, map_to_gpu(loop), cuda_kernel(loop, "k")


@pytest.mark.parametrize("rows, n, mode", [(256, 1000, "warp"), (8, 4096, "block")])
def test_the_gpu_takes_max_and_sum_in_one_pass(rows, n, mode):
    x = fg.tensor(RNG.standard_normal((rows, n)).astype(np.float32))
    for y in (x.softmax(-1), x.log_softmax(-1)):
        loop, gpu, k = _gpu_kernel(y)
        text = str(loop)
        assert text.count("online_exp(") == 1 and text.count("for r0 in") == 1, text
        assert gpu.mode == mode and len(gpu.reductions) == 1, gpu.mode
        (red,) = gpu.reductions.values()
        assert red.online is not None and red.vector  # 16-byte loads in the one pass
        combine = "fg_warp_allreduce_online" if mode == "warp" else "fg_block_reduce_online"
        assert combine in k.source and "fg_online_exp<float>" in k.source
        assert gpu.split == 1 and k.traffic.ratio <= 1.1, k.traffic


def test_only_a_sum_of_exp_of_y_minus_the_max_of_the_same_y_is_online():
    from fusegrad.pipeline.row_patterns import online_exp_max

    x = fg.randn(4, 8)
    z = fg.randn(4, 8)
    assert online_exp_max((x - x.amax(1, keepdim=True)).exp().sum(1, keepdim=True).node)
    assert not online_exp_max((x - z.amax(1, keepdim=True)).exp().sum(1, keepdim=True).node)
    assert not online_exp_max((x - x.amax(0, keepdim=True)).exp().sum(1, keepdim=True).node)
    assert not online_exp_max((x - x.amax(1, keepdim=True)).sum(1, keepdim=True).node)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("shape", [(72, 64), (300, 7), (6, 1027), (6, 2053)])
def test_online_softmax_on_the_emulated_device_at_special_points(shape):
    rows, n = shape
    x = special_rows(n) if rows == 8 else np.concatenate([special_rows(n)] * (rows // 8 + 1))
    x = x[:rows]
    g = RNG.standard_normal(x.shape).astype(np.float32)
    x64 = x.astype(np.float64)
    for name, want in (("softmax", softmax64(x64)), ("log_softmax", log_softmax64(x64))):
        values = []
        for device in ("cuda", "cpu"):
            t = fg.tensor(x, device=device).requires_grad_()
            y = getattr(t, name)(-1)
            (dx,) = fg.grad((y * fg.tensor(g, device=device)).sum(), [t])
            values.append([y.detach().cpu().numpy(), dx.detach().cpu().numpy()])
        (y_gpu, dx_gpu), (y_cpu, dx_cpu) = values
        assert_same(y_gpu, want, rtol=1e-5, atol=1e-5)
        assert_same(y_gpu, y_cpu, rtol=1e-5, atol=1e-5)
        assert_same(dx_gpu, dx_cpu, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- the division by the sum


def test_softmax_multiplies_by_its_sums_reciprocal_as_torchs_cpu_kernel():
    # PyTorch's CPU softmax (`_vec_softmax_lastdim`) computes 1 / sum once per row and
    # multiplies; so does the CPU row kernel, for this pattern only
    x = fg.tensor(RNG.standard_normal((16, 1000)).astype(np.float32))
    (k,) = fg.kernels(x.softmax(-1))
    assert "recip(" in k.loop_ir and "div(" not in k.loop_ir, k.loop_ir
    e = (x - x.amax(-1, keepdim=True).detach()).exp()
    (k,) = fg.kernels(e / e.sum(-1, keepdim=True))  # written out: the same kernel
    assert "recip(" in k.loop_ir, k.loop_ir
    (k,) = fg.kernels(e / (2 * e.sum(-1, keepdim=True)))  # another divisor: divided
    assert "recip(" not in k.loop_ir and "div(" in k.loop_ir, k.loop_ir


@pytest.mark.parametrize("n", [7, 64, 1000, 4099])
def test_softmax_within_a_few_ulps_of_float64(n):
    # exp (1 ulp), the sum's rounding (a few ulps in a long row, for every output of it),
    # the reciprocal and the product (half an ulp each); measured: at most 6.3 ulps (6.0
    # dividing), against float64 on float32's x - max (that subtraction's rounding moves
    # exp by up to 20 ulps, in torch's float32 softmax as in ours: the argument's error).
    # Its own generator: the draws are the same whichever tests ran before (-k, -m, --quick)
    x = (4 * np.random.default_rng(n).standard_normal((64, n))).astype(np.float32)
    got = fg.tensor(x).softmax(-1).numpy().astype(np.float64)
    shifted = (x - x.max(-1, keepdims=True)).astype(np.float64)
    want = softmax64(shifted)
    ulps = np.abs(got - want) / np.spacing(want.astype(np.float32)).astype(np.float64)
    assert ulps.max() <= 8, ulps.max()


def test_other_divisions_in_a_row_kernel_stay_correctly_rounded():
    x = (3 * RNG.standard_normal((33, 1027))).astype(np.float32)
    x[3, 5] = 0.0
    x[4, 7] = -0.0
    t = fg.tensor(x)
    got = (t / t.abs().amax(-1, keepdim=True)).numpy()
    want = x / np.abs(x).max(-1, keepdims=True)  # numpy's float32 division: correctly rounded
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def test_the_exp_pass_prefetches_the_next_row_of_its_input():
    # while the exp pass computes, the next row's lines are fetched for the next max pass;
    # a hint: the values are the same with or without it (the tests above)
    x = fg.tensor(RNG.standard_normal((16, 2048)).astype(np.float32))
    (k,) = fg.kernels(x.softmax(-1))
    lines = [s.strip() for s in k.loop_ir.splitlines()]
    (fetch,) = [s for s in lines if s.startswith("prefetch")]
    (store,) = [s for s in lines if s.startswith("store out0") and "+ t]" in s]
    assert fetch.startswith("prefetch in0[") and fetch.endswith(" + 2048]"), k.loop_ir
    assert fetch.removeprefix("prefetch in0[").removesuffix(" + 2048]") in store, k.loop_ir
    (k,) = fg.kernels(fg.tensor(RNG.standard_normal((16, 100)).astype(np.float32)).softmax(-1))
    assert "prefetch" not in k.loop_ir  # a short row's plain loop is LLVM's to vectorize
