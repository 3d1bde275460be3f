"""Macro nodes (ir/macro.py): one node for a library op, its expansion on demand.

Oracles: the composed form's nodes (hash-consing makes equal graphs one object),
the reference evaluator, and a graph too deep for recursion."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from _special_rows import special_rows

import fusegrad as fg
from fusegrad.ir import node as N
from fusegrad.ir.autodiff import gradients
from fusegrad.ir.dtypes import float64
from fusegrad.ir.macro import expand_all, expansion, macro, register
from fusegrad.ir.node import toposort
from fusegrad.ir.ops import Ops
from fusegrad.ir.reference import evaluate
from fusegrad.nn import functional as F
from fusegrad.runtime.buffer import Buffer


def _scaled_sum(srcs, params):
    (x,) = srcs
    (scale,) = params
    return N.add(N.mul(x, N.const(scale, x.shape, x.dtype)), x)


register("test_scaled_sum", _scaled_sum)


def leaf(a):
    a = np.asarray(a, dtype=np.float64)
    return N.buffer(Buffer.from_numpy(a, float64), a.shape, float64)


def scaled(x, scale=2.0):
    return macro("test_scaled_sum", (x,), (scale,), x.shape, x.dtype)


def test_a_graph_without_macros_is_returned_as_it_is():
    x = leaf([1.0, 2.0])
    roots = [N.add(x, x)]
    assert expand_all(roots) is roots


def test_a_macro_is_one_node_and_expands_to_its_rule_on_its_sources():
    x = leaf([1.0, 2.0])
    m = scaled(x)
    assert m.op is Ops.MACRO and m.srcs == (x,) and m is scaled(x)  # hash-consed
    assert scaled(x, 3.0) is not m  # the params are part of the node
    assert expansion(m) is _scaled_sum((x,), (2.0,))
    assert expansion(m) is expansion(m)  # built once per node
    np.testing.assert_array_equal(evaluate(m), [3.0, 6.0])


def test_nodes_above_a_macro_are_rebuilt_on_its_expansion():
    x = leaf([1.0, -2.0])
    top = N.unary(Ops.NEG, N.add(scaled(x), x))
    (low,) = expand_all([top])
    assert Ops.MACRO not in {n.op for n in toposort([low])}
    assert low is N.unary(Ops.NEG, N.add(_scaled_sum((x,), (2.0,)), x))


def test_nodes_with_values_are_kept_with_what_is_under_them():
    x = leaf([1.0])
    m = scaled(x)
    top = N.add(m, m)
    (low,) = expand_all([top], stop=lambda n: n is m or n.op is Ops.BUFFER)
    assert low is top


def test_a_chain_of_five_thousand_macros_expands_and_differentiates():
    x = leaf([0.5])
    y = x
    for _ in range(5_000):  # far past the recursion limit
        y = scaled(y, 1.0)  # y + y each time: 2 ** 5000 overflows, so scale the other way
        y = N.mul(y, N.const(0.5, y.shape, y.dtype))
    (low,) = expand_all([y])
    assert low.op is not Ops.MACRO
    (g,) = gradients(y, N.const(1.0, (1,), float64), [x])
    np.testing.assert_allclose(evaluate(g), [1.0])
    np.testing.assert_allclose(evaluate(y), [0.5])


def test_a_training_steps_forward_graph_is_a_few_nodes():
    """What a cached step builds and keys each time: an MLP's loss is 3 linear macros,
    2 relu macros and a cross_entropy macro over its leaves, not 78 primitives."""
    fg.manual_seed(0)
    model = fg.nn.Sequential(
        fg.nn.Linear(784, 128), fg.nn.ReLU(), fg.nn.Linear(128, 64), fg.nn.ReLU(),
        fg.nn.Linear(64, 10),
    )  # fmt: skip
    x, y = fg.randn(64, 784).realize(), fg.tensor(np.arange(64) % 10)
    loss = F.cross_entropy(model(x), y)
    nodes = toposort([loss.node])
    kinds = sorted(n.arg[0] for n in nodes if n.op is Ops.MACRO)
    assert kinds == ["cross_entropy", "linear", "linear", "linear", "relu", "relu"]
    assert len(nodes) <= 20, [n.op.name for n in nodes]
    (low,) = expand_all([loss.node])
    assert len(toposort([low])) > 60


def test_kernels_inside_a_macro_are_named_after_the_users_line():
    from fusegrad.runtime.engine import engine

    x = fg.randn(8, 5).realize()
    w = fg.randn(3, 5, requires_grad=True).realize()
    out = F.linear(x, w).realize()
    records = engine.value(out.node).kernels
    assert records
    for r in records:
        assert r.user_ops and all(op.startswith("linear (test_macro.py:") for op in r.user_ops)


def test_second_order_gradients_through_a_macro_match_the_composed_form():
    fg.manual_seed(1)
    x = fg.randn(4, 5, requires_grad=True)
    w = fg.randn(3, 5, requires_grad=True)
    b = fg.randn(3, requires_grad=True)
    results = []
    for f in (lambda: F.linear(x, w, b), lambda: x @ w.T + b):
        (gw,) = fg.grad((f().tanh() ** 2).sum(), [w], create_graph=True)
        results.append([g.numpy() for g in fg.grad((gw * gw).sum(), [x, b])])
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_relu_is_one_macro_with_torchs_values_and_gradients():
    """relu of a float tensor is one `relu` macro; its value keeps -0.0 and NaN, its
    gradient is torch's (0 at and below 0, 1 above and at NaN), first and second order."""
    x = fg.tensor([-1.0, -0.0, 0.0, 2.0, float("nan")], requires_grad=True)
    y = x.relu()
    assert y.node.op is Ops.MACRO and y.node.arg[0] == "relu"
    got = y.numpy()
    assert got.tolist()[:4] == [0.0, -0.0, 0.0, 2.0] and np.isnan(got[4])
    assert np.signbit(got[1]) and not np.signbit(got[2])
    (g,) = fg.autograd.grad((y * fg.tensor([1.0, 2, 3, 4, 5])).sum(), x, create_graph=True)
    assert g.tolist() == [0.0, 0.0, 0.0, 4.0, 5.0]
    (gg,) = fg.autograd.grad(g.sum(), x, allow_unused=True)
    assert gg is None or gg.tolist() == [0.0] * 5
    # a constant or an integer tensor is not a macro (constants fold, as before)
    assert fg.tensor([-2, 3]).relu().tolist() == [0, 3]
    assert fg.full((2,), -1.5).relu().node.op is Ops.CONST


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_is_one_macro_node_expanding_to_the_composed_nodes(dtype, dim):
    """A row softmax builds one node (8 before: most of its host time on the GPU), whose
    expansion is the graph `e / e.sum(dim)` builds: same kernels, bits and gradients."""
    x = fg.tensor(np.random.default_rng(2).standard_normal((5, 7)), requires_grad=True)
    x = x.to(getattr(fg, dtype))
    y = x.softmax(dim)
    assert y.node.op is Ops.MACRO
    e = (x - x.amax(dim, keepdim=True).detach()).exp()
    want = e / e.sum(dim, keepdim=True)
    assert expand_all([y.node])[0] is want.node
    g = fg.ones_like(y) * fg.arange(7).to(y.dtype)
    (got,), (exp,) = fg.grad(y, [x], grad_outputs=g), fg.grad(want, [x], grad_outputs=g)
    np.testing.assert_array_equal(got.float().numpy(), exp.float().numpy())
    np.testing.assert_array_equal(y.float().numpy(), want.float().numpy())


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape, dim", [((2048, 1024), 1), ((2048, 1024), 0), ((2, 1 << 21), 1)])
def test_a_large_row_softmax_builds_its_nodes_at_once_unless_its_sums_are_split(op, shape, dim):
    """Above 2^21 elements a softmax whose rows are sums of one reduce is still built at
    once (one macro node for softmax, log_softmax's nodes without tensors): the composed
    form's very nodes; where `Tensor.sum` would split the row (2 rows of 2^21: its sums
    in parts), the composed form itself is built."""
    x = fg.randn(*shape)
    y = getattr(x, op)(dim)
    shifted = x - x.amax(dim, keepdim=True).detach()
    if op == "softmax":
        e = shifted.exp()
        want = e / e.sum(dim, keepdim=True)
    else:
        want = shifted - shifted.exp().sum(dim, keepdim=True).log()
    split = shape[dim] == 1 << 21
    assert (y.node.op is Ops.MACRO) == (op == "softmax" and not split)
    # (the split form holds the sums' own macro: both sides expanded)
    assert expand_all([y.node])[0] is expand_all([want.node])[0]
    np.testing.assert_array_equal(y.numpy(), want.numpy())


def _one_macro_activation(kind: str, points, dtype: str, slope_at_0: float, tensor_ops):
    """`x.<kind>()` (a float activation) is one macro node whose expansion is the composed
    form's very nodes (`_<kind>_node` in frontend/tensor.py, built on nodes) with its
    gradient rule, node for node what `tensor_ops(x)`, the same formula in tensor
    operations, builds: the same values and first and second derivatives at `points`,
    with gradients on or off when it was built, constants folded as before. Returns the
    values and first derivatives."""
    composed = getattr(sys.modules[fg.Tensor.__module__], f"_{kind}_node")
    x = fg.tensor(points, dtype=getattr(fg, dtype), requires_grad=True)
    y = getattr(x, kind)()
    assert y.node.op is Ops.MACRO and y.node.arg[0] == kind
    want = x._make(composed(x.node))
    assert expand_all([y.node])[0] is want.node
    assert tensor_ops(x).node is want.node
    results = []
    for out in (y, want):
        (g,) = fg.grad(out.sum(), [x], create_graph=True)
        (gg,) = fg.grad(g.sum(), [x])
        results.append([t.float().numpy() for t in (out, g, gg)])
    for got, exp in zip(*results):
        np.testing.assert_array_equal(got, exp)
    with fg.no_grad():  # its expansion, built now, still carries the gradient rule
        z = getattr(fg.tensor([0.0, 3.0]), kind)()
    assert z.node.op is Ops.MACRO
    leaf = fg.tensor([0.0, 3.0], requires_grad=True)
    (g,) = fg.grad((getattr(leaf, kind)() * 1.0).sum(), [leaf])
    assert g.tolist()[0] == slope_at_0
    assert getattr(fg.full((2,), 0.0), kind)().node.op is Ops.CONST
    return results[0][0], results[0][1]


def _sigmoid_by_tensor_ops(x):
    z = (-x.abs()).exp()
    return fg.where(x >= 0, 1, z) / (1 + z)


def _tanh_by_tensor_ops(x):
    e = (-2 * x.abs()).exp()
    big = fg.where(x < 0, -1, 1) * (1 - e) / (1 + e)
    x2 = x * x
    small = x * (1 + x2 * (-1 / 3 + x2 * (2 / 15 + x2 * (-17 / 315 + x2 * (62 / 2835)))))
    return fg.where(x.abs() < (0.25 if x.dtype.itemsize == 4 else 0.02), small, big)


SIGMOID_POINTS = [-100.0, -2.0, -0.0, 0.0, 1e-8, 1.0, 20.0, 100.0, float("nan"), float("inf")]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_sigmoid_is_one_macro_node_expanding_to_the_composed_nodes(dtype):
    """sigmoid builds one node (14 composed); sigmoid'(0) = 1/4, not the 0 of the chain rule
    through |x|."""
    _, grad = _one_macro_activation("sigmoid", SIGMOID_POINTS, dtype, 0.25, _sigmoid_by_tensor_ops)
    assert grad[2:4].tolist() == [0.25, 0.25]


TANH_POINTS = [-100.0, -1.0, -0.25, -1e-8, -0.0, 0.0, 1e-30, 0.02, 0.2499, 0.25, 0.5, 20.0]
TANH_POINTS += [float("nan"), float("inf"), float("-inf")]


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_tanh_is_one_macro_node_expanding_to_the_composed_nodes(dtype):
    """tanh builds one node (30-odd composed: an LSTM step's plain-loop graph was mostly
    its two tanh); at the series' edge 0.25, -0.0, +-inf and NaN."""
    value, grad = _one_macro_activation("tanh", TANH_POINTS, dtype, 1.0, _tanh_by_tensor_ops)
    assert np.signbit(value[4]) and not np.signbit(value[5])  # tanh(-0.0) = -0.0
    assert grad[4] == grad[5] == 1.0 and grad[0] == grad[-2] == 0.0
    np.testing.assert_array_equal(value[-3:], [np.nan, 1.0, -1.0])


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("weighted", [False, True])
def test_binary_cross_entropy_is_one_macro_node_expanding_to_the_composed_nodes(
    reduction, weighted
):
    """binary_cross_entropy (reduced) builds one node, whose expansion is the composed
    form's very nodes and gradient rules: torch's values and gradients at the clamps (x
    at 0 and 1, -0.0 at x = y = 1), for the input and the target."""
    from fusegrad.nn import loss_functions

    x = fg.tensor([0.0, 1e-30, 0.3, 0.5, 1.0, 0.999999], requires_grad=True)
    y = fg.tensor([0.0, 1.0, 0.0, 1.0, 1.0, 0.0], requires_grad=True)
    w = fg.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) if weighted else None
    loss = F.binary_cross_entropy(x, y, w, reduction=reduction)
    assert loss.node.op is Ops.MACRO and loss.node.arg[0] == "binary_cross_entropy"
    tensors = [x, y] + ([w] if weighted else [])
    want = loss_functions._bce(tensors, (reduction, weighted))
    assert expand_all([loss.node])[0] is expand_all([want.node])[0]  # (log1p: a macro too)
    results = []
    for out in (loss, want):
        results.append([out.numpy()] + [g.numpy() for g in fg.grad(out, [x, y])])
    for got, exp in zip(*results):
        np.testing.assert_array_equal(got, exp)
    assert results[0][1][0] == 0.0 and np.isfinite(results[0][1]).all()
    # reduction="none" and mixed dtypes take the composed form
    assert F.binary_cross_entropy(x, y, reduction="none").node.op is not Ops.MACRO
    assert F.binary_cross_entropy(x.double(), y).node.op is not Ops.MACRO


CONVS = [  # (input shape, weight shape, keyword arguments)
    ((2, 3, 9), (4, 3, 3), {}),
    ((2, 4, 11), (4, 2, 3), dict(stride=2, padding=2, dilation=2, groups=2)),
    ((2, 4, 9, 8), (6, 2, 3, 3), dict(stride=2, padding=1, groups=2)),
    ((1, 3, 10, 10), (2, 3, 3, 3), dict(dilation=2, padding="same")),
    ((3, 2, 7, 6), (5, 2, 2, 3), dict(stride=(2, 1), padding=(1, 0))),
]


@pytest.mark.cpu_device  # (the CPU's layout: the cuda device expands it for its own)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("x_grad", [True, False])
@pytest.mark.parametrize("case", range(len(CONVS)))
def test_a_convolution_is_one_macro_node_expanding_to_the_composed_nodes(case, x_grad, bias):
    """conv1d / conv2d build one node (17-29 composed), whose expansion is the composed form's
    very nodes, its gradient rule included (whether the input's gradient is wanted decides
    the backward's shape, as before): same values and gradients. (Both under the CPU's
    layout, which `compile_plan` expands it for here: ir/layout.py.)"""
    from fusegrad.ir.layout import NEUTRAL, using
    from fusegrad.nn import conv as C
    from fusegrad.pipeline.layout import layout_for
    from fusegrad.runtime.backend_registry import get_backend

    cpu = layout_for(get_backend("cpu"))

    xs, ws, kw = CONVS[case]
    rng = np.random.default_rng(case)
    x = fg.tensor(rng.standard_normal(xs).astype(np.float32), requires_grad=x_grad)
    w = fg.tensor(rng.standard_normal(ws).astype(np.float32), requires_grad=True)
    b = fg.tensor(rng.standard_normal(ws[0]).astype(np.float32), requires_grad=True)
    conv = F.conv1d if len(xs) == 3 else F.conv2d
    y = conv(x, w, b if bias else None, **kw)
    assert y.node.op is Ops.MACRO and y.node.arg[0] == "conv"
    tensors, params = [x, w] + ([b] if bias else []), y.node.arg[1]
    with using(cpu):
        want = C._conv(tensors, params)
    assert params[-1] is x_grad and expand_all([y.node], layout=cpu)[0] is want.node
    assert y.shape == want.shape
    leaves = [t for t in tensors if t.requires_grad]
    results = []
    for out in (y, want):
        with using(cpu if out is want else NEUTRAL):  # (the rule the composed form holds)
            grads = fg.grad((out * out).sum(), leaves)
        results.append([out.numpy()] + [g.numpy() for g in grads])
    for got, exp in zip(*results):
        np.testing.assert_array_equal(got, exp)


def test_a_convolution_that_cannot_be_one_node_raises_at_the_users_line_as_before():
    x, w = fg.randn(1, 2, 3), fg.randn(4, 2, 5)
    with pytest.raises(fg.ShapeError, match="larger than the input.s spatial size .3,. at "):
        F.conv1d(x, w)  # a kernel longer than the input: no output
    assert F.conv1d(fg.randn(1, 2, 8).double(), w.double()).node.op is Ops.MACRO


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_a_large_row_softmax_at_special_rows_values_and_gradients(op):
    """Over 2^21 elements, rows of ties (all equal: uniform), of -0.0, of +-1, with -inf
    entries (probability 0, log -inf), with an inf (NaN, as torch) and a NaN; values and
    the input's gradient against torch where it is installed, else the float64 formula."""
    rows, cols = 2048, 1024
    x, g = special_rows(rows, cols, 2.5, seed=7)
    x[3, :10] = -np.inf
    x[4, 3] = np.inf
    x[5, 9] = np.nan
    xt = fg.tensor(x, requires_grad=True)
    y = getattr(xt, op)(1)
    (dx,) = fg.grad(y, [xt], grad_outputs=fg.tensor(g))
    xd, gd = x.astype(np.float64), g.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shifted = xd - xd.max(1, keepdims=True)
        p = np.exp(shifted) / np.exp(shifted).sum(1, keepdims=True)
        if op == "softmax":
            want, want_dx = p, p * (gd - (gd * p).sum(1, keepdims=True))
        else:
            want = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
            want_dx = gd - p * gd.sum(1, keepdims=True)
    got, got_dx = y.numpy(), dx.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx, want_dx, rtol=1e-4, atol=1e-5)
    uniform = 1 / cols if op == "softmax" else -np.log(cols)
    np.testing.assert_allclose(got[0], uniform, rtol=1e-6)
    np.testing.assert_allclose(got[1], uniform, rtol=1e-6)
    assert (got[3, :10] == (0.0 if op == "softmax" else -np.inf)).all()
    assert np.isnan(got[4]).all() and np.isnan(got[5]).all()
    try:
        import torch
    except ImportError:
        return
    xt2 = torch.tensor(x, requires_grad=True)
    yt = getattr(torch, op)(xt2, 1)
    yt.backward(torch.tensor(g))
    np.testing.assert_allclose(got, yt.detach().numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_dx, xt2.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_a_composite_of_composites_expands_to_primitives_in_one_pass():
    """A composite whose composed form calls other macro ops (sigmoid, tanh, relu) builds
    their expansions in place while its own is built, so `expand_all`'s one pass leaves no
    macro for the scheduler (it raised at the lowering: a view over a MACRO node)."""
    T = sys.modules[fg.Tensor.__module__]

    def composed(tensors, params):
        (x,) = tensors
        return x.sigmoid() * x.tanh() + x.relu()

    T.register_composite("test_sigmoid_tanh_relu", composed)
    x = fg.tensor([-2.0, -0.0, 0.0, 0.5, 3.0], requires_grad=True)
    y = T.composite("test_sigmoid_tanh_relu", (x,), (), x.shape, x.dtype)
    assert y.node.op is Ops.MACRO
    (flat,) = expand_all([y.node])
    assert all(n.op is not Ops.MACRO for n in N.toposort([flat]))
    with fg.no_grad():
        want = (x.sigmoid() * x.tanh() + x.relu()).numpy()
    np.testing.assert_array_equal(y.detach().numpy(), want)
    (g,) = fg.grad(y.sum(), [x])
    (gw,) = fg.grad(composed((x,), ()).sum(), [x])
    np.testing.assert_array_equal(g.numpy(), gw.numpy())


def test_whether_an_expansion_asks_the_layout_is_found_once_per_kind_and_sources():
    """`depends_on_layout` builds a macro's expansion to find out, once for each kind,
    parameters and sources' ops, shapes and dtypes: a graph built again at every call (an
    L-BFGS closure over an unrolled LSTMCell) no longer expands every macro of it for
    the question. The answers are those the expansions give: a matmul large enough for
    packed operands asks, a small one and a tanh do not."""
    from fusegrad.ir import macro as M

    M._ASKS_LAYOUT.clear()

    def fresh(k, rows=256):
        x = fg.tensor(np.full((rows, 512), float(k), np.float32))
        w = fg.tensor(np.ones((512, 512), np.float32) * k)
        return F.linear(x, w).node, x[:4, :6].tanh().node

    (lin1, tanh1), (lin2, tanh2) = fresh(1), fresh(2)
    assert lin1.op is Ops.MACRO and tanh1.op is Ops.MACRO
    assert M.depends_on_layout(lin1) and not M.depends_on_layout(tanh1)
    assert M._EXPANSIONS.get(lin2) is None and M._EXPANSIONS.get(tanh2) is None
    assert M.depends_on_layout(lin2) and not M.depends_on_layout(tanh2)
    assert M._EXPANSIONS.get(lin2) is None and M._EXPANSIONS.get(tanh2) is None
    small = fresh(3, rows=4)[0]  # other shapes: asked again, and another answer
    assert not M.depends_on_layout(small) and M._EXPANSIONS.get(small) is not None


def test_an_expansion_that_detaches_a_source_reads_the_source_not_a_new_buffer():
    """A composite whose form detaches one of its sources (a clamp of a tensor that wants
    a gradient keeps NaN's gradient 0 through `x.detach()`) and holds another macro over
    it: inside an expansion, `detach()` is a DETACH node, never a second buffer node over
    the source's memory, which no plan has as an input (compile_plan's KeyError)."""
    from fusegrad.tensor import composite, register_composite

    register_composite("test_clamp_sigmoid", lambda ts, p: ts[0].clamp(-5, 5).sigmoid() + ts[0])
    for dtype in (fg.float32, fg.float64):
        x = fg.tensor([0.5, -7.0, 3.3, float("nan")], dtype=dtype, requires_grad=True)
        y = composite("test_clamp_sigmoid", (x,), (), x.shape, x.dtype)
        want = x.clamp(-5, 5).sigmoid() + x
        np.testing.assert_array_equal(y.numpy(), want.numpy())
        (g,) = fg.grad(y.sum(), [x])
        (h,) = fg.grad(want.sum(), [x])
        np.testing.assert_array_equal(g.numpy(), h.numpy())
        assert g.numpy()[1] == 1.0  # (-7 is clamped: the sigmoid's term has gradient 0)


def test_an_expansion_reading_a_buffer_of_its_own_is_named_not_a_key_error():
    """A composite whose form makes data of its own (not allowed: an expansion reads no
    buffer but its sources') fails at the plan's compile with what went wrong."""
    from fusegrad.tensor import composite, register_composite

    register_composite("test_own_data", lambda ts, p: ts[0] + fg.tensor([1.0, 2.0, 3.0]))
    x = fg.tensor([0.5, -1.5, 3.0])
    y = composite("test_own_data", (x,), (), x.shape, x.dtype)
    with pytest.raises(AssertionError, match="expansion may read no buffer but its sources"):
        y.numpy()
