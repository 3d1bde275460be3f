"""Layout choices made when a plan is compiled (ir/layout.py, pipeline/layout.py): the
frontend and nn build one graph for every device; `compile_plan` expands its macros under
the backend's options, so the CPU's plan holds the packed and padded copies and the GPU's
does not; gradients are derived under the same options ("layout_grad", ir/autodiff.py).
Values against numpy, gradients at a relu's tie too."""

from __future__ import annotations

import os

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.ir.layout import NEUTRAL, Layout
from fusegrad.ir.macro import expand_all
from fusegrad.ir.node import toposort
from fusegrad.ir.ops import Ops
from fusegrad.ir.reference import evaluate
from fusegrad.nn import functional as F
from fusegrad.pipeline.layout import layout_for
from fusegrad.runtime.backend_registry import get_backend

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CPU = layout_for(get_backend("cpu"))
GPU = layout_for(get_backend("cuda"))


def structure(roots) -> list:
    """The graph under `roots` with devices and buffers' identities left out: (op, arg,
    shape, dtype, source positions) per node in topological order."""
    order = toposort([r.node for r in roots])
    at = {id(n): i for i, n in enumerate(order)}
    out = []
    for n in order:
        arg = None if n.op is Ops.BUFFER else n.arg
        out.append((n.op, repr(arg), n.shape, n.dtype.name, tuple(at[id(s)] for s in n.srcs)))
    return out


def contiguous_reasons(roots, layout: Layout) -> list[str]:
    """The reasons of the copies in the graph under `roots` expanded under `layout`."""
    nodes = expand_all([r.node for r in roots], layout=layout)
    return [str(n.arg) for n in toposort(nodes) if n.op is Ops.CONTIGUOUS]


def training_graph(device: str, seed: int = 0):
    """A product whose right operand is read along K by 256 rows (packed in panels on the
    CPU, its gradients products) and a stride-2 convolution, with their gradients."""
    rng = np.random.default_rng(seed)

    def leaf(*shape):
        data = rng.standard_normal(shape).astype(np.float32)
        return fg.tensor(data, device=device, requires_grad=True)

    x, w = leaf(256, 64), leaf(128, 64)
    images, kernel = leaf(2, 3, 9, 9), leaf(4, 3, 3, 3)
    y = (x @ w.T).relu()
    c = F.conv2d(images, kernel, stride=2, padding=1)
    loss = (y * y).sum() + (c * c).sum()
    grads = fg.grad(loss, [x, w, images, kernel])
    return [y, c, *grads]


@pytest.mark.usefixtures("emulated")
def test_the_graph_is_the_same_for_every_device():
    cpu, gpu = training_graph("cpu"), training_graph("cuda")
    assert structure(cpu) == structure(gpu)
    assert {n.device for n in toposort([t.node for t in gpu])} >= {"cuda:0"}


def test_the_cpus_options_copy_the_operands_and_the_gpus_do_not():
    assert CPU.pack_panels and CPU.copy_padding and not (GPU.pack_panels or GPU.copy_padding)
    assert not GPU.pack_bf16_pairs
    graph = training_graph("cpu")
    on_cpu, on_gpu = contiguous_reasons(graph, CPU), contiguous_reasons(graph, GPU)
    assert any("packed in panels" in r for r in on_cpu)
    assert any("padded input" in r for r in on_cpu)
    assert not any("packed in panels" in r or "padded" in r for r in on_gpu)
    assert contiguous_reasons(graph, NEUTRAL) == on_gpu  # (the GPU's is the neutral form)


def test_gradients_are_derived_under_the_plans_layout():
    # the gradients of a macro whose expansion depends on the layout are macros of their
    # own, expanded when the plan is compiled: the CPU's are products of packed operands
    graph = training_graph("cpu")
    kinds = {n.arg[0] for n in toposort([t.node for t in graph]) if n.op is Ops.MACRO}
    assert {"matmul", "conv", "layout_grad"} <= kinds
    x_grad = graph[2]
    assert any("packed in panels" in r for r in contiguous_reasons([x_grad], CPU))
    assert not contiguous_reasons([x_grad], GPU)


def test_values_and_gradients_against_numpy_with_a_relu_tie_at_zero():
    # integer-valued operands: every product exact, and a quarter of x @ w.T exactly 0,
    # where relu's gradient is 0 (torch's)
    rng = np.random.default_rng(3)
    xs = rng.integers(-2, 3, (256, 64)).astype(np.float32)
    ws = rng.integers(-2, 3, (128, 64)).astype(np.float32)
    xs[:64] = 0  # rows of ties
    x, w = fg.tensor(xs, requires_grad=True), fg.tensor(ws, requires_grad=True)
    y = (x @ w.T).relu()
    (y * 3).sum().backward()
    want = np.maximum(xs @ ws.T, 0)
    g = 3 * (xs @ ws.T > 0).astype(np.float32)
    assert (want == 0).any()
    np.testing.assert_array_equal(y.numpy(), want)
    np.testing.assert_array_equal(x.grad.numpy(), g @ ws)
    np.testing.assert_array_equal(w.grad.numpy(), g.T @ xs)
    assert any(k.shape == (128 // 32, 64, 32) for k in fg.kernels(y))  # w's panels
    # the neutral form's values (the reference evaluator's, numpy op by op): the same
    for t in (y, x.grad, w.grad):
        np.testing.assert_array_equal(evaluate(t.node), t.numpy())


def test_a_strided_convolution_and_its_transpose_against_numpy():
    rng = np.random.default_rng(4)
    xs = rng.integers(-2, 3, (2, 3, 9, 9)).astype(np.float32)
    ks = rng.integers(-2, 3, (4, 3, 3, 3)).astype(np.float32)
    x, k = fg.tensor(xs, requires_grad=True), fg.tensor(ks, requires_grad=True)
    y = F.conv2d(x, k, stride=2, padding=1)
    want = _conv2d(xs, ks, 2, 1)
    np.testing.assert_array_equal(y.numpy(), want)
    t = F.conv_transpose2d(y, k, stride=2, padding=1)
    (t.relu() * 2).sum().backward()
    # conv_transpose2d is the input gradient of conv2d: its adjoint, checked by <t, u>
    u = rng.integers(-2, 3, t.shape).astype(np.float32)
    assert np.sum(t.numpy() * u) == np.sum(want * _conv2d(u, ks, 2, 1))
    # the gradients (through the CPU's phases and padded copies) against the neutral
    # form's, which the reference evaluator computes op by op in numpy: integers, exact
    for t in (x.grad, k.grad):
        np.testing.assert_array_equal(t.numpy(), evaluate(t.node))


def _conv2d(x: np.ndarray, k: np.ndarray, stride: int, pad: int) -> np.ndarray:
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, _, h, w = xp.shape
    co, _, kh, kw = k.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, co, oh, ow), np.float32)
    for i in range(oh):
        for j in range(ow):
            win = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nchw,ochw->no", win, k)
    return out


@pytest.mark.parametrize("folder", ["frontend", "nn"])
def test_no_capability_flag_is_read_in_the_frontend_or_nn(folder):
    flags = ("packs_panels", "packs_bf16_pairs", "guards_windows_in_tiles")
    for here, _, files in os.walk(os.path.join(ROOT, folder)):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(here, name)) as f:
                    text = f.read()
                assert not any(flag in text for flag in flags), os.path.join(here, name)


def test_gradients_through_views_folded_into_the_expansion():
    # x @ x.T reads x twice, once through a permute that the CPU's product gradients keep
    # and the neutral form folds away; a reshape of a reshape feeds a linear layer:
    # gradients that reach a view under a source are taken back to it, exactly
    rng = np.random.default_rng(5)
    xs = rng.integers(-2, 3, (256, 64)).astype(np.float32)
    x = fg.tensor(xs, requires_grad=True)
    (x @ x.T).sum().backward()
    ones = np.ones((256, 256), np.float32)
    want = ones @ xs + ones.T @ xs
    np.testing.assert_array_equal(evaluate(x.grad.node), want)  # the neutral form's
    np.testing.assert_array_equal(x.grad.numpy(), want)  # the CPU's
    ts = rng.integers(-2, 3, (4, 8, 8)).astype(np.float32)
    ws = rng.integers(-2, 3, (16, 64)).astype(np.float32)
    t, w = fg.tensor(ts, requires_grad=True), fg.tensor(ws, requires_grad=True)
    y = F.linear(t.reshape(4, 2, 32).reshape(4, 64), w)
    (y * y).sum().backward()
    g = 2 * ts.reshape(4, 64) @ ws.T
    np.testing.assert_array_equal(t.grad.numpy(), (g @ ws).reshape(4, 8, 8))
    np.testing.assert_array_equal(w.grad.numpy(), g.T @ ts.reshape(4, 64))


def test_a_derived_gradient_does_not_keep_its_graph_alive():
    """The gradients a plan derives under its layout live as long as the graph that asks
    for them: once a step's tensors are gone, so are its nodes (a convolution's derived
    gradients once kept their output gradient, and the graph under it, for good)."""
    import gc

    from fusegrad.ir.node import Node

    def live_nodes() -> int:
        gc.collect()
        return sum(1 for o in gc.get_objects() if type(o) is Node)

    before = live_nodes()
    fg.manual_seed(0)
    conv, head = fg.nn.Conv1d(8, 4, 3, padding=1), fg.nn.Linear(4, 1)
    for step in range(3):
        x = fg.tensor(np.random.default_rng(step).standard_normal((2, 8, 10), np.float32))
        h = conv(x).relu().amax(2)
        y = fg.tensor(np.array([1.0, 0.0], np.float32))
        F.binary_cross_entropy(F.sigmoid(head(h)).reshape(2), y).backward()
        assert np.isfinite(conv.weight.grad.numpy()).all()
        conv.zero_grad()
        head.zero_grad()
    del conv, head, x, h, y
    assert live_nodes() <= before + 4


@pytest.mark.parametrize("shape", [(4,), (3, 5)])
def test_sources_that_are_views_of_one_node_take_its_gradient_once(monkeypatch, shape):
    # x @ x of a vector is a "matmul" of x.reshape(1, K) and x.reshape(K, 1), which the
    # expansion reads through views folded down to x itself. Made layout-dependent (its
    # gradients "layout_grad" nodes), each source took x's whole gradient, and x got 1.5x
    # its gradient. Also a matrix times its transpose: views of one node.
    from fusegrad import reduce as R
    from fusegrad.ir import layout as L

    product = R._product

    def reads_the_layout(an, bn, batch, shared=False, bias=None):
        L.current()
        return product(an, bn, batch, shared, bias)

    monkeypatch.setattr(R, "_product", reads_the_layout)
    x0 = np.array([1.0, -3.0, 0.0, -0.0, 2.0, 0.5] * 3, dtype=np.float32)[: int(np.prod(shape))]
    x0 = x0.reshape(shape)
    x = fg.tensor(x0, requires_grad=True)
    y = x @ x if len(shape) == 1 else x @ x.T
    (g,) = fg.grad(y.sum(), [x])
    want = 2 * x0 if len(shape) == 1 else 2 * np.ones((3, 3), np.float32) @ x0
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6)
