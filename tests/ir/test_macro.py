"""Macro nodes (ir/macro.py): one node for a library op, its expansion on demand.

Oracles: the composed form's nodes (hash-consing makes equal graphs one object),
the reference evaluator, and a graph too deep for recursion."""

from __future__ import annotations

import numpy as np
import pytest

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
