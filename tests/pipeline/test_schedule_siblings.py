"""Sibling reductions (pipeline/schedule.py, rule 7): reductions over the same input, axes and
output shape share one kernel, one loop nest with an accumulator each.

Kernel counts are pinned, and every value and gradient is checked against float64 numpy,
so a merge that reads the wrong accumulator, or orders kernels wrongly, fails here.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad.pipeline.reductions import cascade_min
from fusegrad.pipeline.schedule import MAX_SIBLINGS, schedule

RNG = np.random.default_rng(32)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def realized(a: np.ndarray) -> fg.Tensor:
    return fg.from_numpy(np.ascontiguousarray(a))


def assert_close(got, want, rtol=2e-5, atol=2e-6) -> None:
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rtol, atol=atol)


# ---------------------------------------------------------------- which reductions merge


@pytest.mark.cpu_device  # the CPU lowering's loops and tiles
def test_sums_over_the_same_input_and_axes_are_one_kernel():
    a = f32(64, 96)
    x = realized(a)
    outs = [x.sum(0), (x * x).sum(0), (x.exp() - 1).sum(0)]
    (k,) = fg.kernels(*outs)
    assert "2 sibling reductions" in k.reason, k.reason
    a64 = a.astype(np.float64)
    for got, want in zip(outs, [a64.sum(0), (a64 * a64).sum(0), (np.exp(a64) - 1).sum(0)]):
        assert_close(got.numpy(), want, rtol=1e-5, atol=1e-4)
    # one reduction loop with three accumulators, not three loops
    assert k.loop_ir.count("for r0 in") == 1, k.loop_ir


def test_long_column_sums_cascade_together():
    # 4096 rows: each sum is a cascade (a tree of accumulators); the siblings share its loops
    a = f32(4096, 48)
    x = realized(a)
    s, q = x.sum(0), (x * 3 + 1).sum(0)
    (k,) = fg.kernels(s, q)
    assert_close(s.numpy(), a.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)
    assert_close(q.numpy(), (a.astype(np.float64) * 3 + 1).sum(0), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("shape", [(2048, 64), (3000, 5), (64, 96)])
def test_a_sibling_sums_as_it_does_alone(shape):
    # the same loops and the same tree of accumulators. A cascaded sum's adds are ordered
    # (at least `cascade_min()` rows): no bit changes. A short one's are LLVM's to vectorize and
    # contract (a multiply and an add into one FMA), which may differ in the last bits.
    arr = f32(*shape)
    x, y = realized(arr), realized(arr)  # `alone` on its own buffer: no value remembered for x
    alone = [y.sum(0).numpy(), (y * y - 1).sum(0).numpy()]
    s, q = x.sum(0), (x * x - 1).sum(0)
    assert len(fg.kernels(s, q)) == 1
    for got, want in zip([s.numpy(), q.numpy()], alone):
        if shape[0] >= cascade_min():
            np.testing.assert_array_equal(got, want)
        else:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("shape", [(6, 4096), (64, 300), (3, 20)])
def test_row_sums_and_row_maxima(shape):
    # sums along the contiguous axis: a cascade each (long rows: the same bits as alone),
    # or one loop with two accumulators (short: LLVM vectorizes it its own way, so the last
    # bits may differ from the sum alone); maxima in vector lanes, exact either way
    arr = f32(*shape)
    x, y = realized(arr), realized(arr)  # `alone` on its own buffer: no value remembered for x
    alone = [t.numpy() for t in (y.sum(1), (y * y).sum(1), y.amax(1), (-y).amax(1))]
    s, q, hi, lo = x.sum(1), (x * x).sum(1), x.amax(1), (-x).amax(1)
    assert len(fg.kernels(s, q, hi, lo)) == 2
    for got, want in zip([s, q], alone):
        if shape[1] >= cascade_min():
            np.testing.assert_array_equal(got.numpy(), want)
        else:
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert_close(s.numpy(), arr.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(hi.numpy(), arr.max(1))
    np.testing.assert_array_equal(lo.numpy(), (-arr).max(1))
    assert_close(q.numpy(), (arr.astype(np.float64) ** 2).sum(1), rtol=1e-5, atol=1e-4)


def test_maxima_merge_and_integer_accumulators_keep_their_identity():
    z = RNG.integers(-50, 50, (40, 3))
    t = realized(z)
    hi, hi3 = t.amax(0), (t * 3).amax(0)
    assert len(fg.kernels(hi, hi3)) == 1
    np.testing.assert_array_equal(hi.numpy(), z.max(0))
    np.testing.assert_array_equal(hi3.numpy(), (z * 3).max(0))


@pytest.mark.parametrize(
    "build, numpy_twin, kernels",
    [
        # different axes, or no common input: nothing is shared
        (lambda x, y: [x.sum(0), x.sum(1)], lambda x, y: [x.sum(0), x.sum(1)], 2),
        (lambda x, y: [x.sum(0), y.sum(0)], lambda x, y: [x.sum(0), y.sum(0)], 2),
        # a sum and a max do not share accumulators
        (lambda x, y: [x.sum(0), x.amax(0)], lambda x, y: [x.sum(0), x.max(0)], 2),
        # the second reads the first (broadcast back): it must come after it
        (
            lambda x, y: [x.sum(0), (x * x.sum(0)).sum(0)],
            lambda x, y: [x.sum(0), (x * x.sum(0)).sum(0)],
            3,  # (x.sum(0) is a reshape of a kept-dims sum, stored for both readers)
        ),
    ],
    ids=["other_axes", "other_input", "sum_and_max", "dependent"],
)
def test_what_does_not_merge(build, numpy_twin, kernels):
    a, b = f32(24, 40), f32(24, 40)
    outs = build(realized(a), realized(b))
    assert len(fg.kernels(*outs)) == kernels
    for got, want in zip(outs, numpy_twin(a.astype(np.float64), b.astype(np.float64))):
        assert_close(got.numpy(), want, rtol=1e-4, atol=1e-3)


@pytest.mark.cpu_device  # the CPU lowering's loops and tiles
def test_contractions_keep_their_kernels_and_tiles():
    # two linear layers on one input: their weight gradients g1^T x and g2^T x share x, but
    # each reuses every loaded value across a register tile; merged, neither tile would fit
    xs, g1, g2 = f32(64, 48), f32(64, 32), f32(64, 32)
    x = realized(xs)
    d1, d2 = realized(g1).T @ x, realized(g2).T @ x
    ks = fg.kernels(d1, d2)
    assert len(ks) == 2 and all("register tile" in k.loop.tile_note for k in ks)
    assert_close(d1.numpy(), g1.T.astype(np.float64) @ xs, rtol=1e-4, atol=1e-4)
    assert_close(d2.numpy(), g2.T.astype(np.float64) @ xs, rtol=1e-4, atol=1e-4)


@pytest.mark.cpu_device  # the CPU lowering's loops and tiles
def test_a_tile_too_big_for_two_sums_keeps_one_row_of_lanes():
    # a sum over the middle axis: alone, a tile of rows along the batch and lanes along the
    # channels; with a sibling its accumulators would not fit, so one row of lanes each
    arr = f32(16, 64, 64)
    x = realized(arr)
    s, q = x.sum(1), (x * x).sum(1)
    (k,) = fg.kernels(s, q)
    assert "register tile" in k.loop.tile_note, k.loop_ir
    a64 = arr.astype(np.float64)
    assert_close(s.numpy(), a64.sum(1), atol=1e-4)
    assert_close(q.numpy(), (a64 * a64).sum(1), rtol=1e-5, atol=1e-4)


def test_a_merge_that_would_read_its_own_output_through_another_kernel_is_refused():
    # a = sum(x, 0); c = sum(x + a, 1) (its own kernel, reads a); b = sum(x * c, 0) reads c:
    # a and b have one key and share x, but b depends on a through c
    arr = f32(16, 24)
    x = realized(arr)
    a = x.sum(0, keepdim=True)
    c = (x + a).sum(1, keepdim=True)
    b = (x * c).sum(0, keepdim=True)
    ks = fg.kernels(a, b, c)
    assert len(ks) == 3 and not any("sibling" in k.reason for k in ks)
    a64 = arr.astype(np.float64)
    c64 = (a64 + a64.sum(0)).sum(1, keepdims=True)
    assert_close(c.numpy(), c64, rtol=1e-4, atol=1e-4)
    assert_close(b.numpy(), (a64 * c64).sum(0, keepdims=True), rtol=1e-4, atol=1e-3)


def test_at_most_max_siblings_per_kernel():
    arr = f32(32, 16)
    x = realized(arr)
    outs = [(x * (k + 1)).sum(0) for k in range(MAX_SIBLINGS + 2)]
    assert len(fg.kernels(*outs)) == 2
    for k, got in enumerate(outs):
        assert_close(got.numpy(), (arr.astype(np.float64) * (k + 1)).sum(0), atol=1e-4)


def test_kernels_come_in_dependency_order():
    # the merged kernel stores an output another kernel reads: that kernel comes after it
    x = realized(f32(8, 12))
    s, q = x.sum(0), (x * x).sum(0)
    after = (x - s / 8).abs().sum(1) + q.sum()
    items = schedule([s.node, q.node, after.node], lambda n: n.op.name == "BUFFER")
    made = {}
    for k, item in enumerate(items):
        for n in item.inputs:
            assert id(n) not in made or made[id(n)] < k
        for n in item.outputs:
            made[id(n)] = k


@pytest.mark.parametrize("shape", [(1, 7), (7, 1), (0, 5), (5, 0), (1, 1)])
def test_special_shapes(shape):
    arr = f32(*shape)
    x = realized(arr)
    s, q = x.sum(0), (x * x).sum(0)
    fg.kernels(s, q)
    a64 = arr.astype(np.float64)
    assert_close(s.numpy(), a64.sum(0))
    assert_close(q.numpy(), (a64 * a64).sum(0))


def test_zero_dim():
    x = realized(np.array(-0.0, np.float32))
    s, q = x.sum(), (x * x).sum()
    assert s.numpy().shape == () and q.numpy().shape == ()
    # torch: a sum starts from +0.0, so the sum of one -0.0 is +0.0
    assert not np.signbit(s.numpy()) and q.numpy() == 0


# ---------------------------------------------------------------- layer and batch norm


def _layer_norm_reference(x, w, g, eps=1e-5):
    """(y without affine, dx, dw, db) of layer norm over the last axis, float64."""
    mu = x.mean(-1, keepdims=True)
    rstd = 1 / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + eps)
    xhat = (x - mu) * rstd
    dxhat = g * w
    dx = rstd * (
        dxhat - dxhat.mean(-1, keepdims=True) - xhat * (dxhat * xhat).mean(-1, keepdims=True)
    )
    return xhat, dx, (g * xhat).sum(0), g.sum(0)


def _batch_norm_reference(x, w, g, eps=1e-5):
    """The same over the batch axis (2-D input, training mode)."""
    xhat, dx, _, _ = _layer_norm_reference(x.T, w[:, None], g.T, eps)
    return xhat.T, dx.T, (g * xhat.T).sum(0), g.sum(0)


@pytest.mark.parametrize("shape", [(32, 512), (1, 64), (6, 1), (3, 5), (0, 8)])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm_values_and_gradients(shape, affine):
    n, d = shape
    xs, ws, bs, gs = f32(n, d), f32(d), f32(d), f32(n, d)
    if n and d > 1:
        xs[0, :2] = [0.0, -0.0]  # signed zeros and a tie inside a row
        xs[-1, -1] = xs[-1, 0]
    x = realized(xs).requires_grad_()
    w = realized(ws).requires_grad_() if affine else None
    b = realized(bs).requires_grad_() if affine else None
    y = F.layer_norm(x, (d,), w, b)
    (y * realized(gs)).sum().backward()
    wants = _layer_norm_reference(xs.astype(np.float64), ws if affine else 1.0, gs)
    xhat, dx, dw, db = wants
    assert_close(y.numpy(), xhat * ws + bs if affine else xhat, rtol=1e-4, atol=1e-4)
    got = [x.grad] + ([w.grad, b.grad] if affine else [])
    for t, want in zip(got, [dx, dw, db]):
        assert_close(t.numpy(), want, rtol=1e-3, atol=2e-3)


def test_layer_norm_step_kernel_count():
    # 7 with row fusion; 6 now: the weight and bias gradients, sum(g * xhat, 0) and
    # sum(g, 0), are one kernel that reads g once
    x = realized(f32(32, 512)).requires_grad_()
    w, b = realized(f32(512)).requires_grad_(), realized(f32(512)).requires_grad_()
    loss = (F.layer_norm(x, (512,), w, b) * realized(f32(32, 512))).sum()
    loss.backward()
    ks = fg.kernels(loss, x.grad, w.grad, b.grad)
    assert len(ks) == 6, [k.name for k in ks]
    assert sum("sibling" in k.reason for k in ks) == 1


@pytest.mark.parametrize("shape", [(64, 128), (2, 3), (300, 5)])
def test_batch_norm_values_gradients_and_kernels(shape):
    n, c = shape
    xs, ws, bs, gs = f32(n, c), f32(c), f32(c), f32(n, c)
    x = realized(xs).requires_grad_()
    w, b = realized(ws).requires_grad_(), realized(bs).requires_grad_()
    y = F.batch_norm(x, None, None, w, b, training=True)
    loss = (y * realized(gs)).sum()
    loss.backward()
    ks = fg.kernels(loss, x.grad, w.grad, b.grad)
    # 11 before rule 7: the weight and bias gradients are one kernel now
    assert sum("sibling" in k.reason for k in ks) == 1, [k.reason for k in ks]
    xhat, dx, dw, db = _batch_norm_reference(xs.astype(np.float64), ws.astype(np.float64), gs)
    assert_close(y.numpy(), xhat * ws + bs, rtol=1e-4, atol=1e-4)
    for t, want in zip([x.grad, w.grad, b.grad], [dx, dw, db]):
        assert_close(t.numpy(), want, rtol=1e-3, atol=2e-3)


def test_layer_norm_bfloat16():
    xs, ws, bs, gs = f32(16, 64), f32(64), f32(64), f32(16, 64)
    x = realized(xs).bfloat16().detach().requires_grad_()
    w = realized(ws).bfloat16().detach().requires_grad_()
    b = realized(bs).bfloat16().detach().requires_grad_()
    g = realized(gs).bfloat16()
    (F.layer_norm(x, (64,), w, b).float() * g.float()).sum().backward()
    as64 = [t.float().numpy().astype(np.float64) for t in (x, w, g)]
    _, dx, dw, db = _layer_norm_reference(as64[0], as64[1], as64[2])
    for t, want in zip([x.grad, w.grad, b.grad], [dx, dw, db]):
        assert t.dtype == fg.bfloat16
        scale = max(np.abs(want).max(), 1.0)
        assert_close(t.float().numpy(), want, rtol=2e-2, atol=2e-2 * scale)


# ---------------------------------------------------------------- softmax and cross-entropy


@pytest.mark.parametrize("shape", [(32, 512), (1, 10), (7, 1), (0, 4)])
def test_softmax_log_softmax_and_cross_entropy_gradients(shape):
    n, d = shape
    xs, gs = f32(n, d), f32(n, d)
    if n and d > 1:
        xs[0, 1] = xs[0, 0]  # a tie
    x64, g64 = xs.astype(np.float64), gs.astype(np.float64)
    e = np.exp(x64 - (x64.max(-1, keepdims=True) if n else 0))
    p = e / e.sum(-1, keepdims=True)
    x = realized(xs).requires_grad_()
    (dsm,) = fg.grad((x.softmax(-1) * realized(gs)).sum(), [x])
    assert_close(dsm.numpy(), p * (g64 - (g64 * p).sum(-1, keepdims=True)), atol=1e-5)
    (dls,) = fg.grad((x.log_softmax(-1) * realized(gs)).sum(), [x])
    assert_close(dls.numpy(), g64 - p * g64.sum(-1, keepdims=True), rtol=1e-4, atol=1e-5)
    if n:
        target = RNG.integers(0, d, n)
        (dce,) = fg.grad(F.cross_entropy(x, realized(target)), [x])
        onehot = np.eye(d)[target]
        assert_close(dce.numpy(), (p - onehot) / n, atol=1e-6)
