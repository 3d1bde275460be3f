"""Values stored inside the reduction that sums them (pipeline/schedule.py, rule 8): a layer's
output gradient `g`, stored for the weight and input gradients, is computed and stored
by the loops of its bias gradient's sum, not by a kernel of its own.

Kernel counts are pinned; every value is checked against the reference evaluator
(`ir/reference.py`) and against the schedule without rule 8: bit for bit where the sum is
an ordered cascade and the stored value has no multiply and add that LLVM may fuse into an
FMA in one kernel and not in the other (`contract`, pipeline/llvm.py); within a few units
in the last place otherwise (a short sum's adds are LLVM's to vectorize and reassociate).
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import movement
from fusegrad.ir.reference import evaluate_many
from fusegrad.pipeline import schedule as schedule_module
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.cpu_backend import CpuBackend
from fusegrad.runtime.cuda_backend import CudaBackend
from fusegrad.runtime.engine import engine

RNG = np.random.default_rng(8)
RULE_8 = "from inside its loops"  # the words of a kernel that stores its source (rule 8)


def f32(*shape) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def costly(t: fg.Tensor) -> fg.Tensor:
    """Five exps: over the recompute limit, so a value read by two kernels is stored."""
    for _ in range(5):
        t = t.exp() * 0.5
    return t


def items_of(*tensors: fg.Tensor):
    return schedule([t.node for t in tensors], engine.has_value_predicate())


def stored_inside(*tensors: fg.Tensor) -> list[tuple]:
    """The shapes each kernel stores from inside its reduction's loops."""
    return [tuple(v.shape for v in item.at_source) for item in items_of(*tensors)]


def without_rule_8(monkeypatch, build):
    """`build()`'s values as the schedule without rule 8 computes them (its own plans)."""
    with monkeypatch.context() as m:
        m.setattr(schedule_module, "_stored_in_reductions", lambda *args: {})
        engine.plans.clear()
        try:
            return [t.numpy() for t in build()]
        finally:
            engine.plans.clear()


def assert_same_bits(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g.view(np.uint8), w.view(np.uint8))


def assert_nearly_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """Equal but for the last bits of finite values: the same NaN, infinities and zeros."""
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=4e-6, atol=1e-6, equal_nan=True)
        np.testing.assert_array_equal(np.isnan(g), np.isnan(w))
        np.testing.assert_array_equal(np.signbit(g) & (g == 0), np.signbit(w) & (w == 0))


def assert_reference(tensors: list[fg.Tensor], rtol=1e-4, atol=1e-4) -> None:
    for t, ref in zip(tensors, evaluate_many([t.node for t in tensors])):
        np.testing.assert_allclose(t.numpy(), ref, rtol=rtol, atol=atol, equal_nan=True)


# ---------------------------------------------------------------- where it applies


def linear_gradients(x, w, b, c):
    """A linear layer's weight and bias gradients under `sum(tanh(y) * c)`, its output
    realized first: g = c * (1 - tanh(y)^2), read 32 times by the weight gradient."""
    x, c = fg.from_numpy(x), fg.from_numpy(c)
    w, b = fg.tensor(w, requires_grad=True), fg.tensor(b, requires_grad=True)
    y = F.linear(x, w, b).realize()
    return fg.grad((y.tanh() * c).sum(), [w, b])


def test_a_linear_layers_bias_gradient_stores_its_output_gradient(monkeypatch):
    arrays = f32(64, 32), f32(16, 32), f32(16), f32(64, 16)
    gw, gb = linear_gradients(*arrays)
    assert stored_inside(gw, gb) == [((64, 16),), ()]
    ks = fg.kernels(gw, gb)
    # g, the weight gradient and the bias gradient were 3 kernels: g is stored by the sum
    assert len(ks) == 2, [(k.name, k.reason) for k in ks]
    assert RULE_8 in ks[0].reason and ks[0].shape == (16,), ks[0].reason
    assert_reference([gw, gb])
    old = without_rule_8(monkeypatch, lambda: linear_gradients(*arrays))
    assert_nearly_same([gw.numpy(), gb.numpy()], old)


def conv_gradients(x, w, b, c):
    x, c = fg.from_numpy(x), fg.from_numpy(c)
    w, b = fg.tensor(w, requires_grad=True), fg.tensor(b, requires_grad=True)
    y = F.conv2d(x, w, b).realize()
    return fg.grad((y.tanh() * c).sum(), [w, b])


def test_a_convolutions_bias_gradient_stores_its_output_gradient(monkeypatch):
    arrays = f32(8, 3, 12, 12), f32(5, 3, 3, 3), f32(5), f32(8, 5, 10, 10)
    gw, gb = conv_gradients(*arrays)
    assert stored_inside(gw, gb) == [((8, 5, 10, 10),), ()]
    ks = fg.kernels(gw, gb)
    assert len(ks) == 2, [(k.name, k.reason) for k in ks]
    assert_reference([gw, gb])
    old = without_rule_8(monkeypatch, lambda: conv_gradients(*arrays))
    assert_nearly_same([gw.numpy(), gb.numpy()], old)


@pytest.mark.parametrize(
    "shape, axes", [((64, 128), 0), ((37, 5), 0), ((6, 300), 1), ((5, 3000), 1), ((3000, 40), 0)]
)
def test_a_stored_value_is_kept_by_the_sum_over_it(monkeypatch, shape, axes):
    # column sums (register tiles, cascades) and row sums (a plain loop, cascaded lanes
    # with a ragged end); exp * 0.5 has no add to fuse: the same bits but in a plain loop
    a = f32(*shape) * 0.1

    def build():
        v = costly(fg.from_numpy(a))
        return [v.sum(axes), v.amax(1 - axes)]

    s, m = build()
    assert stored_inside(s, m) == [(shape,), ()]
    assert len(fg.kernels(s, m)) == 2
    assert_reference([s, m], rtol=1e-5)
    old = without_rule_8(monkeypatch, build)
    plain_loop = shape == (6, 300)  # LLVM vectorizes and reassociates its sum
    (assert_nearly_same if plain_loop else assert_same_bits)([s.numpy(), m.numpy()], old)


def test_a_requested_value_is_stored_by_the_sum_over_it():
    a = f32(32, 48)
    v = fg.from_numpy(a) * 3 - 1
    s = v.sum(0)
    assert stored_inside(v, s) == [((32, 48),)]
    (k,) = fg.kernels(v, s)
    assert k.shape == (48,) and RULE_8 in k.reason
    assert_reference([v, s], rtol=1e-6, atol=1e-6)


def test_special_values_in_the_gradient(monkeypatch):
    # 0, -0, inf and NaN in g: stored as they are, summed as the kernel alone sums them
    arrays = f32(64, 32), f32(16, 32), f32(16), f32(64, 16)
    c = arrays[3]
    c[0, 0], c[1, 1], c[2, 2], c[3, 3], c[4, 4] = 0.0, -0.0, np.inf, np.nan, -np.inf
    c[5, :] = -0.0  # a bias gradient of -0 + -0 + ... where g's column is all -0
    gw, gb = linear_gradients(*arrays)
    assert stored_inside(gw, gb) == [((64, 16),), ()]
    assert np.isnan(gb.numpy()).any() and np.isnan(gw.numpy()).any()
    assert_reference([gw, gb])
    old = without_rule_8(monkeypatch, lambda: linear_gradients(*arrays))
    assert_nearly_same([gw.numpy(), gb.numpy()], old)


# ---------------------------------------------------------------- where it must not apply


@pytest.mark.parametrize(
    "shape, stored",
    [
        ((5, 3276), True),  # few outputs, 16380 elements: small enough to compute there
        ((4, 4096), False),  # 16384 elements into 4 outputs: the value's own kernel
        ((15, 8192), False),
        ((16, 8192), True),  # 16 outputs share the threads
    ],
)
def test_not_a_large_value_into_a_sum_of_few_outputs(shape, stored):
    # a kernel is parallel over its outputs: a sum into fewer than AT_SOURCE_MIN_OUTPUTS
    # runs on about one thread, and a value of AT_SOURCE_SHARED_ELEMENTS or more moved into
    # it would be computed there too (LeNet's first bias gradient: 1.6-2.3 ms on one thread)
    assert schedule_module.AT_SOURCE_MIN_OUTPUTS == 16
    assert schedule_module.AT_SOURCE_SHARED_ELEMENTS == 1 << 14
    a = f32(*shape) * 0.1
    v = costly(fg.from_numpy(a))
    s, m = v.sum(1), v.amax(0)
    assert stored_inside(s, m) == ([(shape,), ()] if stored else [(), (), ()])
    assert len(fg.kernels(s, m)) == (2 if stored else 3)
    assert_reference([s, m], rtol=1e-5)


def test_the_gpu_splits_a_sum_of_few_outputs_so_it_takes_a_large_value():
    # the GPU shares a long sum of few outputs among blocks (`splits_reductions`)
    assert CudaBackend.splits_reductions and not CpuBackend.splits_reductions
    v = costly(fg.from_numpy(f32(4, 4096) * 0.1))
    s, m = v.sum(1), v.amax(0)
    roots = [s.node, m.node]
    items = schedule(roots, engine.has_value_predicate(), splits_reductions=True)
    assert [tuple(x.shape for x in item.at_source) for item in items] == [((4, 4096),), ()]


def test_a_convolution_with_few_channels_keeps_its_large_gradients_kernel():
    # 5 output channels over 8x5x48x48 values: the output gradient is its own (parallel)
    # kernel, which the bias gradient's sum reads
    arrays = f32(8, 3, 50, 50), f32(5, 3, 3, 3), f32(5), f32(8, 5, 48, 48)
    gw, gb = conv_gradients(*arrays)
    assert not any(stored_inside(gw, gb))
    assert not any(RULE_8 in k.reason for k in fg.kernels(gw, gb))
    assert_reference([gw, gb])


def test_not_where_the_sum_broadcasts_the_value():
    a, z = f32(64, 16) * 0.1, f32(64, 16, 8)
    v = costly(fg.from_numpy(a))
    s = (v.reshape(64, 16, 1).expand(64, 16, 8) * fg.from_numpy(z)).sum((0, 1))
    m = v.amax(1)
    assert stored_inside(s, m) == [(), (), ()]
    assert_reference([s, m], rtol=1e-5)


def test_not_into_a_contraction():
    a, w = f32(64, 32) * 0.1, f32(32, 16)
    v = costly(fg.from_numpy(a))
    p, m = v @ fg.from_numpy(w), v.amax(1)
    assert stored_inside(p, m) == [(), (), ()]
    assert_reference([p, m], rtol=1e-5)


def test_not_through_a_permute():
    a = f32(64, 32) * 0.1
    v = costly(fg.from_numpy(a))
    s, m = v.permute(1, 0).sum(1), v.amax(1)
    assert stored_inside(s, m) == [(), (), ()]
    assert_reference([s, m], rtol=1e-5)


def test_not_a_requested_value_the_sum_reads_a_slice_of():
    a = f32(32, 48)
    v = fg.from_numpy(a) * 3 - 1
    s = v[:, :20].sum(0)
    assert stored_inside(v, s) == [(), ()]
    assert len(fg.kernels(v, s)) == 2
    assert_reference([v, s])


@pytest.mark.parametrize("shape", [(), (0, 5)])
def test_not_a_scalar_or_an_empty_value(shape):
    a = f32(*shape) * 0.1
    v = costly(fg.from_numpy(a))
    outs = [v.sum(), v * 2]
    assert all(not s for s in stored_inside(*outs))
    assert_reference(outs, rtol=1e-5)


def test_not_a_half_precision_value():
    # a float16 value computed in a register is float32 until it is stored: the sum would
    # add unrounded values where its own kernel's readers load rounded ones
    a = f32(64, 32) * 0.1
    v = costly(fg.from_numpy(a).half())
    s, m = v.sum(0), v.amax(1)
    assert stored_inside(s, m) == [(), (), ()]


def test_not_where_the_sum_reads_a_kernel_that_reads_the_value():
    # s = sum(v * (v @ w), 0): the product reads v, so v must exist before s's kernel
    a, w = f32(64, 16) * 0.1, f32(16, 16)
    v = costly(fg.from_numpy(a))
    p = v @ fg.from_numpy(w)
    s = (v * p).sum(0)
    items = items_of(s, p)
    assert len(items) == 3 and all(not item.at_source for item in items)
    assert_reference([s, p], rtol=1e-5)


# ---------------------------------------------------------------- whole models


def tiny_lenet(images, labels, weights):
    x = fg.from_numpy(images)
    params = [fg.tensor(w, requires_grad=True) for w in weights]
    w1, b1, w2, b2, w3, b3, w4, b4 = params
    h = F.max_pool2d(F.conv2d(x, w1, b1, padding=2).relu(), 2)
    h = F.max_pool2d(F.conv2d(h, w2, b2).relu(), 2)
    h = F.linear(h.reshape(h.shape[0], -1), w3, b3).relu()
    loss = F.cross_entropy(F.linear(h, w4, b4), fg.from_numpy(labels))
    return fg.grad(loss, params)


def test_lenet_gradients_are_the_same_bits(monkeypatch):
    weights = [f32(6, 1, 5, 5), f32(6), f32(16, 6, 5, 5), f32(16), f32(32, 400), f32(32)]
    weights += [f32(10, 32), f32(10)]
    weights = [w * np.float32(0.2) for w in weights]
    images, labels = f32(16, 1, 28, 28), RNG.integers(0, 10, 16)
    grads = tiny_lenet(images, labels, weights)
    # the second convolution's bias (16 outputs); the first's 6 outputs over 16x6x28x28
    # values leave its output gradient a kernel of its own (AT_SOURCE_MIN_OUTPUTS)
    assert sum(bool(s) for s in stored_inside(*grads)) == 1
    got = [g.numpy() for g in grads]
    want = without_rule_8(monkeypatch, lambda: tiny_lenet(images, labels, weights))
    assert_same_bits(got, want)
    assert_reference(grads, rtol=1e-3, atol=1e-4)


def batch_norm_gradients(x, w, b, c):
    x = fg.tensor(x, requires_grad=True)
    w, b = fg.tensor(w, requires_grad=True), fg.tensor(b, requires_grad=True)
    y = F.batch_norm(x, None, None, w, b, training=True)
    return fg.grad((y * fg.from_numpy(c)).sum(), [x, w, b])


def test_batch_norm_gradients_are_the_same_bits(monkeypatch):
    arrays = f32(64, 128), f32(128), f32(128), f32(64, 128)
    grads = batch_norm_gradients(*arrays)
    assert any(stored_inside(*grads))
    got = [g.numpy() for g in grads]
    # the weight and bias gradients are the same bits; the input gradient reads g, stored
    # by a column sum's register tile, where LLVM fuses a multiply and add the elementwise
    # kernel did not (within 2^-21 of each value)
    old = without_rule_8(monkeypatch, lambda: batch_norm_gradients(*arrays))
    assert_same_bits(got[1:], old[1:])
    assert_nearly_same(got[:1], old[:1])
    assert_reference(grads, rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("pieces", [3, 12])
def test_a_concatenation_of_many_pieces_keeps_its_own_kernel(pieces, monkeypatch):
    # a stack of computed pieces (an LSTM's steps' gate gradients), stored for its readers
    # and summed down its rows: up to AT_SOURCE_MAX_PIECES pieces the sum stores it (rule
    # 8); more, and it keeps a kernel of its own, where pipeline/pieces.py has each element
    # load its one piece (a sum's cascaded loops would load every piece, under guards)
    assert schedule_module.AT_SOURCE_MAX_PIECES == 4
    monkeypatch.setattr(movement, "HOST_JOIN_PIECES", float("inf"))  # a kernel's join, not
    monkeypatch.setattr(movement, "HOST_JOIN_BYTES", -1)  # numpy's (`_host_values`)
    rows = [f32(16, 64) * 0.1 for _ in range(pieces)]
    parts = [costly(fg.from_numpy(r)).realize() for r in rows]
    stacked = costly(fg.stack(parts).reshape(16 * pieces, 64))
    total, peak = stacked.sum(0), stacked.amax(1)
    inside = [shapes for shapes in stored_inside(total, peak) if shapes]
    assert inside == ([((16 * pieces, 64),)] if pieces <= 4 else []), inside
    want = costly(fg.from_numpy(np.concatenate([p.numpy() for p in parts]))).numpy()
    np.testing.assert_allclose(total.numpy(), want.sum(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(peak.numpy(), want.max(1), rtol=1e-6)
