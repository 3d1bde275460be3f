"""fusegrad.autograd.Function against torch.autograd.Function's semantics (torch 2.13's
behaviour written here as literals and messages), with numpy and float64 central
differences as the oracle for the gradients."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import function, nn
from fusegrad.autograd import Function


class Softplus(Function):
    """A true derivative by hand, checked against central differences."""

    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x)
        ctx.beta = beta
        return (1 + (x * beta).exp()).log() / beta

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x * ctx.beta).sigmoid(), None


class StraightThrough(Function):
    """round() forward, identity backward: what the derived gradient (0) is not."""

    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad


class ScaleAndSin(Function):
    """Three outputs, one an integer; backward sees zeros for the ones not used."""

    @staticmethod
    def forward(ctx, x, k):
        ctx.save_for_backward(x)
        ctx.k = k
        ctx.seen = None
        return x * k, (x > 0).to(fg.int64), x.sin()

    @staticmethod
    def backward(ctx, g_scaled, g_sign, g_sin):
        ctx.seen = (g_sign.dtype, g_sign.tolist(), g_sin.tolist())
        (x,) = ctx.saved_tensors
        return g_scaled * ctx.k + g_sin * x.cos(), None


X = [1.0, -2.0, 3.0]


def test_gradient_matches_float64_central_differences():
    x0 = np.array([0.3, -1.2, 2.0])
    x = fg.tensor(x0, requires_grad=True)
    assert x.dtype == fg.float64
    w = np.array([1.0, -2.0, 0.5])
    (Softplus.apply(x, 2.0) * fg.tensor(w)).sum().backward()

    def f(v):
        return float((np.log1p(np.exp(2.0 * v)) / 2.0 * w).sum())

    eps = 1e-6
    numeric = [(f(x0 + eps * e) - f(x0 - eps * e)) / (2 * eps) for e in np.eye(3)]
    np.testing.assert_allclose(x.grad.numpy(), numeric, rtol=1e-7)


def test_backward_is_used_instead_of_the_derived_gradient():
    x = fg.tensor([0.4, 1.6, -2.7], requires_grad=True)
    y = StraightThrough.apply(x)
    assert y.tolist() == [0.0, 2.0, -3.0] and y.requires_grad and not y.is_leaf
    (y * fg.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [1.0, 2.0, 3.0]  # the derived gradient of round() is 0


def test_tuple_outputs_and_zero_grads_for_the_unused():
    """torch: a, b, c = ScaleAndSin.apply(x, 2.5); a.sum().backward() gives x.grad
    [2.5, 2.5, 2.5] and backward sees int64 zeros for b, float zeros for c."""
    x = fg.tensor(X, requires_grad=True)
    a, b, c = ScaleAndSin.apply(x, 2.5)
    assert a.requires_grad and c.requires_grad and not b.requires_grad
    assert b.tolist() == [1, 0, 1]
    a.sum().backward()
    assert x.grad.tolist() == [2.5, 2.5, 2.5]
    x.grad = None
    a, b, c = ScaleAndSin.apply(x, 2.5)
    (a.sum() + c.sum()).backward()
    np.testing.assert_allclose(x.grad.numpy(), 2.5 + np.cos(X), rtol=1e-6)


def test_ctx_flags():
    seen = {}

    class Mul(Function):
        @staticmethod
        def forward(ctx, x, y, k):
            seen["needs"] = ctx.needs_input_grad
            ctx.set_materialize_grads(False)  # accepted
            ctx.save_for_backward(x, None, y)
            return x * y * k

        @staticmethod
        def backward(ctx, grad):
            x, none, y = ctx.saved_tensors
            seen["none"] = none
            return grad * y * 3, grad * x * 3, None

    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = fg.tensor([3.0, 4.0])  # needs no gradient: backward's is dropped
    Mul.apply(x, y, 3).sum().backward()
    assert seen == {"needs": (True, False, False), "none": None}
    assert x.grad.tolist() == [9.0, 12.0] and y.grad is None


def test_mark_non_differentiable_and_setup_context():
    class SortedWithIndex(Function):
        @staticmethod
        def forward(x):
            return x * 2, x * 0

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.mark_non_differentiable(output[1])

        @staticmethod
        def backward(ctx, g, g_index):
            assert g_index.tolist() == [0.0, 0.0]
            return g * 2

    class Scaled(Function):  # torch binds forward's defaults: backward returns 2 here
        @staticmethod
        def forward(x, k=3.0):
            return x * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k

    x = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match=r"incorrect number of gradients \(expected 2, got 1"):
        Scaled.apply(x).sum().backward()
    y, i = SortedWithIndex.apply(x)
    assert y.requires_grad and not i.requires_grad
    (y.sum() + i.sum()).backward()
    assert x.grad.tolist() == [2.0, 2.0]


def test_no_grad_and_inputs_without_grad_give_plain_outputs():
    x = fg.tensor(X, requires_grad=True)
    with fg.no_grad():
        assert not StraightThrough.apply(x).requires_grad
    assert not StraightThrough.apply(x.detach()).requires_grad


def test_returning_an_input_and_broadcast_gradients():
    class Ident(Function):
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    x = fg.tensor(X, requires_grad=True)
    y = Ident.apply(x)
    assert y is not x and not y.is_leaf  # as torch
    (y * 1).sum().backward()
    assert x.grad.tolist() == [5.0, 5.0, 5.0]

    class Expanded(Function):  # torch sums a gradient of a broadcast shape down
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g.expand(2, 3)

    x.grad = None
    Expanded.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def _bad(backward_result):
    class Bad(Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

        @staticmethod
        def backward(ctx, g):
            return backward_result(g)

    return Bad


@pytest.mark.parametrize(
    "result, message",
    [
        (lambda g: g, r"function BadBackward returned an incorrect number of gradients "
         r"\(expected 2, got 1\)"),
        (lambda g: (g, g), "function BadBackward returned a gradient different than None at "
         "position 2, but the corresponding forward input was not a Variable"),
        (lambda g: (g[:2], None), r"Function BadBackward returned an invalid gradient at "
         r"index 0 - got \[2\] but expected shape compatible with \[3\]"),
    ],
)  # fmt: skip
def test_wrong_gradients_raise_as_torch_inside_backward(result, message):
    x = fg.tensor(X, requires_grad=True)
    y = _bad(result).apply(x, 2.0).sum()
    with pytest.raises(RuntimeError, match=message):
        y.backward()


def test_a_removed_tensor_hook_leaves_the_check_inside_backward():
    x = fg.tensor(X, requires_grad=True)
    y = _bad(lambda g: g).apply(x, 2.0)
    y.register_hook(lambda g: g).remove()
    with pytest.raises(RuntimeError, match="incorrect number of gradients"):
        y.sum().backward()


def test_extra_trailing_none_gradients_are_dropped():
    x = fg.tensor(X, requires_grad=True)
    _bad(lambda g: (g, None, None)).apply(x, 2.0).sum().backward()
    assert x.grad.tolist() == [1.0, 1.0, 1.0]


def test_a_forward_computed_through_numpy_gets_its_gradient():
    """torch's "extending with numpy" pattern: no graph path from the input to the output,
    and backward still runs (values: torch's, for this forward and backward)."""

    class NumpyCube(Function):
        @staticmethod
        def forward(ctx, x, y):
            ctx.save_for_backward(x)
            return fg.tensor(x.detach().numpy() ** 3) + y

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x**2, g

    x = fg.tensor(X, requires_grad=True)
    y = fg.tensor([0.5, 0.5, 0.5], requires_grad=True)
    out = NumpyCube.apply(x, y)
    assert out.tolist() == [1.5, -7.5, 27.5]
    (out * fg.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert x.grad.tolist() == [3.0, 24.0, 81.0] and y.grad.tolist() == [1.0, 2.0, 3.0]
    # the first read computes both gradients of the backward (a kernel each); the link to x
    # computes nothing
    assert len(fg.kernels(x.grad)) == 2 and fg.kernels(y.grad) == fg.kernels(x.grad)


def test_backward_is_graph_it_fuses_and_differentiates_again():
    x = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (g,) = fg.grad(Softplus.apply(x, 1.0).sum(), x, create_graph=True)
    # forward and the hand-written backward in one kernel, as the built-in ops would be
    assert len(fg.kernels(g)) == 1
    (h,) = fg.grad(g.sum(), x)  # d/dx sigmoid(x): differentiating backward's graph
    s = 1 / (1 + np.exp(-np.array([1.0, 2.0, 3.0])))
    np.testing.assert_allclose(h.numpy(), s * (1 - s), rtol=1e-6)


def test_same_op_on_the_same_input_twice_keeps_both_calls():
    calls = []

    class Counted(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            calls.append(1)
            return g * 2

    x = fg.tensor(X, requires_grad=True)
    a, b = Counted.apply(x), Counted.apply(x)  # equal forward graphs: one node each apart
    (a.sum() + 3 * b.sum()).backward()
    assert x.grad.tolist() == [8.0, 8.0, 8.0] and len(calls) == 2


def test_once_differentiable_and_the_module_path_are_accepted():
    class Double(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        @fg.autograd.function.once_differentiable
        def backward(ctx, g):
            return g * 2

    assert fg.autograd.function.Function is Function
    x = fg.tensor(X, requires_grad=True)
    Double.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]


def test_a_dead_output_takes_its_rule_with_it():
    import gc

    from fusegrad.ir.autodiff import CUSTOM_VJP, GRAD_HOOKS

    x = fg.tensor(X, requires_grad=True)
    gc.collect()
    before = len(CUSTOM_VJP), len(GRAD_HOOKS)
    for _ in range(3):
        a, b, c = ScaleAndSin.apply(x, 2.0)
        (a.sum() + c.sum()).backward()
    del a, b, c
    x.grad = None  # (an unbuilt gradient holds the graphs it will be built from)
    gc.collect()
    assert (len(CUSTOM_VJP), len(GRAD_HOOKS)) == before


def test_under_jit_replays_equal_eager_steps():
    class Linear(Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return x @ w.t()

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g @ w, g.t() @ x

    def run(jitted):
        fg.manual_seed(0)
        w = nn.Parameter(fg.randn(3, 4))
        opt = fg.optim.SGD([w], lr=0.1)

        def step(x, y):
            loss = ((Linear.apply(x, w) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        if jitted:
            step = fg.jit(step)
        x, y = fg.ones(2, 4), fg.zeros(2, 3)
        losses = [step(x, y).item() for _ in range(5)]
        return losses, w.numpy(), getattr(step, "replays", 0)

    eager, w_eager, _ = run(False)
    jitted, w_jit, replays = run(True)
    assert replays == 2
    np.testing.assert_allclose(jitted, eager, rtol=1e-6)
    np.testing.assert_allclose(w_jit, w_eager, rtol=1e-6)


def test_docstring_examples():
    result = doctest.testmod(function)
    assert result.attempted > 0 and result.failed == 0
