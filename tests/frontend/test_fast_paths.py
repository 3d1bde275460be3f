"""Ops that every training step calls are built straight on IR nodes, skipping the
tensor-level checks and intermediate tensors of their composed form. Nodes are
hash-consed, so the fast form must give the very same node as the composed one (for
`linear` and `cross_entropy`, one macro node whose expansion is): the same graph,
kernels, values and gradients."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.layout import NEUTRAL
from fusegrad.ir.macro import expand_all
from fusegrad.ir.ops import Ops
from fusegrad.nn import functional as F
from fusegrad.pipeline.layout import layout_for
from fusegrad.runtime.backend_registry import get_backend


@pytest.mark.parametrize(
    ("shape", "dim"), [((64, 10), 1), ((3, 1, 5), 1), ((4, 6), 0), ((2, 3, 4), -1)]
)
def test_log_softmax_builds_the_composed_graph(shape, dim):
    x = fg.randn(*shape, requires_grad=True) * 1.0
    d = dim % len(shape)
    shifted = x - x.amax(d, keepdim=True).detach()
    assert x.log_softmax(dim).node is (shifted - shifted.exp().sum(d, keepdim=True).log()).node


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize(("k", "n"), [(5, 3), (512, 1024)])  # 2 MiB: packed in panels
def test_linear_builds_the_composed_graph(bias, k, n):
    x = fg.randn(8, k, requires_grad=True)
    w = fg.randn(n, k, requires_grad=True)
    b = fg.randn(n, requires_grad=True) if bias else None
    composed = x @ w.T if b is None else x @ w.T + b
    out = F.linear(x, w, b)
    # one macro node, whose expansion is the composed form's very nodes (a "matmul" macro
    # and the bias), under every layout (the CPU's packs the big weight in panels)
    assert out.node.op is Ops.MACRO and out.node.arg[0] == "linear"
    for layout in (NEUTRAL, layout_for(get_backend("cpu"))):
        assert expand_all([out.node], layout=layout) == expand_all([composed.node], layout=layout)
    assert out.requires_grad
    # the macro's gradient is its expansion's: bit for bit the composed form's
    leaves = [x, w] + ([b] if b is not None else [])
    out.sum().backward()
    got = [t.grad.numpy() for t in leaves]
    for t in leaves:
        t.grad = None
    composed.sum().backward()
    for g, t in zip(got, leaves):
        np.testing.assert_array_equal(g, t.grad.numpy())


def test_linear_under_no_grad_and_other_shapes_match_the_composed_form():
    x3 = fg.randn(2, 4, 5)  # a batch of sequences: the general form
    w, b = fg.randn(3, 5, requires_grad=True), fg.randn(3)
    np.testing.assert_allclose(
        F.linear(x3, w, b).numpy(), x3.numpy() @ w.numpy().T + b.numpy(), rtol=1e-5, atol=1e-5
    )
    with fg.no_grad():
        assert not F.linear(fg.randn(4, 5), w, b).requires_grad
    with pytest.raises(fg.ShapeError):
        F.linear(fg.randn(4, 6), w, b)


@pytest.mark.parametrize("bias", [False, True])
def test_a_linear_over_more_dims_is_one_macro_over_its_rows(bias):
    # (8, 40, 64) is 320 rows of one 2-D linear, viewed back; values and gradients are
    # numpy's (float64), at 0, -0, +-1 and large inputs too
    rng = np.random.default_rng(2)
    x0 = rng.standard_normal((8, 40, 64))
    x0[0, 0, :4] = [0.0, -0.0, 1.0, -1.0]
    x0[1, 2, 0] = 1e30
    w0, b0, g0 = rng.standard_normal((96, 64)), rng.standard_normal(96), rng.standard_normal(96)
    x, w = fg.tensor(x0, requires_grad=True), fg.tensor(w0, requires_grad=True)
    b = fg.tensor(b0, requires_grad=True) if bias else None
    out = F.linear(x, w, b)
    assert out.shape == (8, 40, 96)
    base = out.node
    while base.op is not Ops.MACRO:
        base = base.srcs[0]
    assert base.arg[0] == "linear" and base.shape == (320, 96)
    want = x0 @ w0.T + (b0 if bias else 0)
    # (sums of 64 or 320 terms of about 1 in float64: an absolute bound too, for the
    # outputs that cancel to near 0 and a device that sums in its own order)
    close = dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.numpy(), want, **close)
    (out * fg.tensor(g0)).sum().backward()
    g = np.broadcast_to(g0, want.shape)
    np.testing.assert_allclose(x.grad.numpy(), g @ w0, **close)
    np.testing.assert_allclose(w.grad.numpy(), g.reshape(-1, 96).T @ x0.reshape(-1, 64), **close)
    if bias:
        np.testing.assert_allclose(b.grad.numpy(), g.reshape(-1, 96).sum(0), **close)
    # an empty batch axis keeps the general form: an empty output, zero weight gradient
    empty = F.linear(fg.zeros(0, 3, 64, dtype=fg.float64), w, b)
    assert empty.shape == (0, 3, 96)


@pytest.mark.parametrize("rows", [64, 320])
def test_a_transposed_weight_is_packed_and_differentiated_as_products_from_256_rows(rows):
    # x @ W.T reads W along K: from PACK_FROM_ROWS rows its copy is packed in panels and
    # the gradients are products of their own (G @ W, G.T @ X); fewer rows keep the fused
    # forms. Values and gradients are numpy's either way (float32 rounding).
    from fusegrad import reduce as R

    rng = np.random.default_rng(3)
    x0 = rng.standard_normal((rows, 96)).astype(np.float32)
    w0 = rng.standard_normal((128, 96)).astype(np.float32)
    g0 = rng.standard_normal((rows, 128)).astype(np.float32)
    x, w = fg.tensor(x0, requires_grad=True), fg.tensor(w0, requires_grad=True)
    out = F.linear(x, w)
    reasons = [k.reason for k in fg.kernels(out)]
    packed = any("packed in panels" in r for r in reasons)
    if out.device.type == "cpu":  # (the CPU's layout packs: the cuda device's does not)
        assert packed == (rows >= R.PACK_FROM_ROWS)
    gx, gw = fg.grad((out * fg.tensor(g0)).sum(), [x, w])
    np.testing.assert_allclose(out.numpy(), x0 @ w0.T, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gx.numpy(), g0 @ w0, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gw.numpy(), g0.T @ x0, rtol=1e-4, atol=1e-3)
    # the same through the generic rule (no gradient products below 256 rows)
    x2 = fg.tensor(x0, requires_grad=True)
    (gw2,) = fg.grad((F.linear(x2, w) * fg.tensor(g0)).sum(), [w])
    np.testing.assert_allclose(gw.numpy(), gw2.numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    ("rows", "inputs", "outputs"), [(256, 264, 40), (256, 256, 512), (320, 512, 256)]
)
def test_a_weight_gradient_packs_its_transposed_left_operand_in_row_panels(rows, inputs, outputs):
    # W's gradient G^T @ X (or (X^T @ G)^T when W has more rows than columns: the wider
    # operand on the right) reads its left operand down K a row apart: from 256 rows and
    # 256 steps along K it is copied into panels of 8 rows first. Values against numpy
    # with ties and zeros in X (the copy moves values, it computes none); -0.0 and 0.0
    # products sum to +0.0 as numpy's.
    from fusegrad import reduce as R

    rng = np.random.default_rng(5)
    x0 = rng.integers(-2, 3, size=(rows, inputs)).astype(np.float32)
    x0[0] = -0.0
    w0 = rng.standard_normal((outputs, inputs)).astype(np.float32)
    g0 = rng.standard_normal((rows, outputs)).astype(np.float32)
    x, w = fg.tensor(x0, requires_grad=True), fg.tensor(w0, requires_grad=True)
    gx, gw = fg.grad((F.linear(x, w) * fg.tensor(g0)).sum(), [x, w])
    reasons = [k.reason for k in fg.kernels(gw)]
    left = f"a transposed left operand packed in panels of {R.LEFT_PANEL} rows"
    narrow = min(inputs, outputs)
    if gw.device.type == "cpu":  # (the CPU's layout packs: the cuda device's does not)
        assert any(left in r for r in reasons) == (narrow >= R.PACK_FROM_ROWS and narrow % 8 == 0)
    np.testing.assert_allclose(gw.numpy(), g0.T @ x0, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gx.numpy(), g0 @ w0, rtol=1e-4, atol=1e-3)
    assert gw.shape == (outputs, inputs) and gx.shape == (rows, inputs)


@pytest.mark.parametrize("bias", [False, True])
def test_columns_no_multiple_of_a_panel_are_padded_into_panels(bias):
    # 600 output columns, from PAD_PANELS_FROM on: the weight is packed in panels of 32 with
    # the last one padded with zeros, the product computed over 608 columns (the bias
    # too) and cut to 600. Values as numpy's, an infinity in x included (its row's
    # products with the padding are NaN, and cut off); gradients too.
    from fusegrad import reduce as R

    assert R.PAD_PANELS_FROM <= 600 and 600 % R.PANEL
    rng = np.random.default_rng(7)
    x0 = rng.integers(-2, 3, size=(300, 96)).astype(np.float32)
    x0[3, 5] = np.inf
    w0 = rng.standard_normal((600, 96)).astype(np.float32)
    b0 = rng.standard_normal(600).astype(np.float32)
    g0 = rng.standard_normal((300, 600)).astype(np.float32)
    x = fg.tensor(x0, requires_grad=True)
    w = fg.tensor(w0, requires_grad=True)
    b = fg.tensor(b0, requires_grad=True) if bias else None
    out = F.linear(x, w, b)
    if out.device.type == "cpu":  # (the CPU's layout packs: the cuda device's does not)
        assert any(k.shape == (300, 608, 1) for k in fg.kernels(out)), [
            k.shape for k in fg.kernels(out)
        ]
    with np.errstate(invalid="ignore"):
        want = x0 @ w0.T + (b0 if bias else 0)
    got = out.numpy()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4)
    x0[3, 5] = 0.0
    x = fg.tensor(x0, requires_grad=True)
    grads = fg.grad((F.linear(x, w, b) * fg.tensor(g0)).sum(), [x, w] + ([b] if bias else []))
    np.testing.assert_allclose(grads[0].numpy(), g0 @ w0, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(grads[1].numpy(), g0.T @ x0, rtol=1e-4, atol=1e-3)
    if bias:
        np.testing.assert_allclose(grads[2].numpy(), g0.sum(0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("rows", [0, 1, 300])
def test_padded_panels_with_empty_and_single_rows_and_a_vector(rows):
    # a big weight (5000 x 256, 5 MB: packed whatever the rows) whose 5000 columns are
    # padded to whole panels: no rows, one row and many, values and all three gradients;
    # a vector times the same matrix
    rng = np.random.default_rng(9)
    w0 = rng.standard_normal((5000, 256)).astype(np.float32)
    b0 = rng.standard_normal(5000).astype(np.float32)
    x0 = rng.standard_normal((rows, 256)).astype(np.float32)
    x, w, b = (fg.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    out = F.linear(x, w, b)
    assert out.shape == (rows, 5000)
    gx, gw, gb = fg.grad(out.sum(), [x, w, b])
    np.testing.assert_allclose(out.numpy(), x0 @ w0.T + b0, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gx.numpy(), np.tile(w0.sum(0), (rows, 1)), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gw.numpy(), np.tile(x0.sum(0), (5000, 1)), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(gb.numpy(), np.full(5000, rows, np.float32))
    if rows == 1:
        v = fg.tensor(x0[0], requires_grad=True)
        o = v @ fg.tensor(w0.T.copy())
        (gv,) = fg.grad(o.sum(), [v])
        np.testing.assert_allclose(o.numpy(), x0[0] @ w0.T, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(gv.numpy(), w0.sum(0), rtol=1e-4, atol=1e-3)


def test_a_transposed_left_operand_of_any_product_is_packed_in_row_panels():
    # a user's X.T @ Y (not only a gradient) of 256 x 512 by 512 x 64
    from fusegrad import reduce as R

    rng = np.random.default_rng(6)
    x0 = rng.standard_normal((512, 256)).astype(np.float32)
    y0 = rng.standard_normal((512, 64)).astype(np.float32)
    out = fg.tensor(x0).T @ fg.tensor(y0)
    assert any(f"panels of {R.LEFT_PANEL} rows" in k.reason for k in fg.kernels(out))
    np.testing.assert_allclose(out.numpy(), x0.T @ y0, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("target_dtype", ["int64", "int32"])
def test_cross_entropy_builds_the_composed_graph(reduction, target_dtype):
    """Every target a class, no weight: the nodes of log_softmax then nll_loss. The class
    table (`arange`) is a new leaf node each call on one shared buffer, so the graphs are
    compared by structure and leaf buffers rather than by identity."""
    from fusegrad.pipeline.schedule import structural_key

    x = fg.randn(8, 5, requires_grad=True) * 1.0
    y = fg.tensor(np.array([0, 1, 2, 3, 4, 0, 1, 2]), dtype=target_dtype)
    fast = F.cross_entropy(x, y, reduction=reduction)
    assert fast.node.op is Ops.MACRO and fast.node.arg == ("cross_entropy", (reduction,))
    composed = F.nll_loss(x.log_softmax(1), y, reduction=reduction)
    (fast_key, fast_leaves), (key, leaves) = (
        structural_key(expand_all([t.node]), lambda n: False) for t in (fast, composed)
    )
    assert fast_key == key
    assert [n.arg for n in fast_leaves] == [n.arg for n in leaves]
    assert fast.requires_grad
    np.testing.assert_allclose(fast.numpy(), composed.numpy(), rtol=1e-6)


def test_cross_entropy_with_an_ignored_or_bad_target_takes_the_general_form():
    x = fg.randn(4, 3, requires_grad=True)
    with_ignored = F.cross_entropy(x, fg.tensor([0, -100, 2, 1]))
    want = -x.log_softmax(1).numpy()[[0, 2, 3], [0, 2, 1]].mean()
    np.testing.assert_allclose(with_ignored.item(), want, rtol=1e-6)
    with pytest.raises(IndexError, match="Target 3 is out of bounds"):
        F.cross_entropy(x, fg.tensor([0, 3, 2, 1]))
