"""Where torch gives a hook or a backward None and where zeros (issue 31): torch 2.13's
answers written out, and the same cases run against live torch where it is installed."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn


def _lists(gs):
    return [None if g is None else g.tolist() for g in gs]


def _cases(lib, libnn):
    """Each case's log and gradients, computed with `lib` (fusegrad or torch)."""
    out = {}
    log: list = []

    class Pair(libnn.Module):
        def forward(self, a):
            return a * 2, a * 3

    class Prod(libnn.Module):
        def forward(self, a, b, i):
            return a * b + i

    m = Pair()
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("full", _lists(gi), _lists(go))))
    m.register_full_backward_pre_hook(lambda mod, go: log.append(("pre", _lists(go))))
    a = lib.tensor([1.0, 2.0], requires_grad=True)
    p, _ = m(a)
    p.sum().backward()
    out["unused output"] = list(log)
    log.clear()

    m = Prod()
    m.register_full_backward_hook(lambda mod, gi, go: log.append(("full", _lists(gi), _lists(go))))
    m(a, lib.tensor([3.0, 4.0]), lib.tensor([1, 1])).sum().backward()
    out["inputs without grad"] = list(log)
    log.clear()

    m = Prod()
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], None, None))
    a.grad = None
    b = lib.tensor([3.0, 4.0], requires_grad=True)
    w = lib.tensor([1.0, 1.0], requires_grad=True)
    m(a, b, w * 2).sum().backward()
    out["hook's None"] = [_lists([a.grad, b.grad, w.grad])]

    m = Pair()
    m.register_full_backward_pre_hook(lambda mod, go: (None, None))
    a.grad = None
    p, q = m(a)
    (p.sum() + q.sum()).backward()
    out["pre hook's None"] = [_lists([a.grad])]

    class Two(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, materialize):
            ctx.set_materialize_grads(materialize)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            log.append(_lists([g1, g2]))
            return g1 * 2, None

    for flag in (True, False):
        Two.apply(a, flag)[0].sum().backward()
    out["materialize"] = list(log)
    log.clear()

    class Half(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x, y):
            return x * y

        @staticmethod
        def backward(ctx, g):
            return g, None

    class Pair2(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            log.append(("backward", _lists([g1, g2])))
            return g1 * 2 + g2 * 3

    u, v = Pair2.apply(a)
    v.register_hook(lambda g: log.append(("v hook", _lists([g]))))
    u.sum().backward()
    out["hook on an unused output"] = list(log)
    log.clear()

    y = lib.tensor([1.0, 2.0], requires_grad=True)
    y.register_hook(lambda g: log.append(("y hook", _lists([g]))))
    Half.apply(a, y).sum().backward()
    out["leaf left None"] = [*log, _lists([y.grad])]
    log.clear()
    return out


TORCH_2_13 = {  # torch 2.13.0's answers to `_cases`
    "unused output": [
        ("pre", [[1.0, 1.0], None]),
        ("full", [[2.0, 2.0]], [[1.0, 1.0], None]),
    ],
    "inputs without grad": [("full", [[3.0, 4.0], [0.0, 0.0], [0, 0]], [[1.0, 1.0]])],
    "hook's None": [[[3.0, 4.0], None, None]],
    "pre hook's None": [[[0.0, 0.0]]],
    "materialize": [[[1.0, 1.0], [0.0, 0.0]], [[1.0, 1.0], None]],
    "leaf left None": [("y hook", [None]), [None]],
    "hook on an unused output": [("v hook", [None]), ("backward", [[1.0, 1.0], [0.0, 0.0]])],
}


@pytest.mark.parametrize("case", sorted(TORCH_2_13))
def test_none_and_zeros_as_torch(case):
    assert _cases(fg, nn)[case] == TORCH_2_13[case]


def test_the_table_is_torchs():
    torch = pytest.importorskip("torch")
    assert _cases(torch, torch.nn) == TORCH_2_13


def test_a_hook_does_not_see_an_equal_expression_built_after_it():
    """torch's hook on y1 sees y1's gradient alone: y2 = x * 2, built after the hook was
    registered, gets a node of its own (a view of y1 still passes through y1)."""
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    seen = []
    y1 = x * 2
    y1.register_hook(lambda g: seen.append(g.tolist()))
    y2 = x * 2
    z = y1.reshape(2, 1).reshape(2)
    ((y1 * 3).sum() + (y2 * 5).sum() + (z * 7).sum()).backward()
    assert seen == [[10.0, 10.0]] and x.grad.tolist() == [30.0, 30.0]


def test_a_hook_on_an_equal_expression_built_before_it_warns():
    """y2 = x * 2 built *before* y1's hook is one node with y1: the hook would see both
    gradients (torch's sees y1's alone), so register_hook says so instead of summing
    silently; with no such tensor alive it says nothing."""
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y1 = x * 2
    y2 = x * 2
    with pytest.warns(UserWarning, match=r"shape \(2,\) is the same expression"):
        y1.register_hook(lambda g: g)
    del y2
    y3 = x * 4
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y3.register_hook(lambda g: g)
    assert y1 is not None


class AddOne(fg.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.add_(1)
        ctx.mark_dirty(x)
        return x

    @staticmethod
    def backward(ctx, g):
        return g * 3


def test_mark_dirty_as_torch():
    """torch 2.13: the same object, version 0 -> 2 (add_ and the Function), value [3, 5],
    a.grad [36, 60] for sum(c * c) (backward's 3 times 2c)."""
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    b = a * 2
    c = AddOne.apply(b)
    assert c is b and b._version == 2 and c.tolist() == [3.0, 5.0]
    (c * c).sum().backward()
    assert a.grad.tolist() == [36.0, 60.0]


def test_mark_dirty_refusals():
    class NotReturned(fg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.add_(1)
            ctx.mark_dirty(x)
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g

    a = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="not returned as output"):
        NotReturned.apply(a * 2)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        AddOne.apply(a)
    with pytest.raises(NotImplementedError, match=r"mark_dirty on a view .*clone\(\)"):
        AddOne.apply((a * 1)[:1])


def test_mixed_dtype_outputs_as_torch():
    """torch 2.13: backward gets float32, float64 and bool zeros; a.grad [5, 5]."""
    seen = []

    class Mixed(fg.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, (x * 3).double(), x > 0

        @staticmethod
        def backward(ctx, g1, g2, g3):
            seen.append((g1.dtype, g2.dtype, g3.dtype, g3.tolist()))
            return g1 * 2 + g2.float() * 3

    a = fg.tensor([1.0, 2.0], requires_grad=True)
    p, q, r = Mixed.apply(a)
    assert (p.dtype, q.dtype, r.dtype, r.requires_grad) == (fg.float32, fg.float64, fg.bool, False)
    assert q.tolist() == [3.0, 6.0]
    (p.sum() + q.sum()).backward()
    assert seen == [(fg.float32, fg.float64, fg.bool, [False, False])]
    np.testing.assert_array_equal(a.grad.numpy(), [5.0, 5.0])


def test_module_backward_hook_on_inputs_of_two_dtypes_as_torch():
    """torch 2.13: grad_input float32 [2, 2] and float64 [3, 3] (it raised here before)."""

    class Scale(nn.Module):
        def forward(self, a, b):
            return a * 2, b * 3

    m, seen = Scale(), []
    m.register_full_backward_hook(
        lambda mod, gi, go: seen.append([(g.dtype, g.tolist()) for g in gi])
    )
    a = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([1.0, 2.0], dtype=fg.float64, requires_grad=True)
    p, q = m(a, b)
    (p.sum() + q.sum()).backward()
    assert seen == [[(fg.float32, [2.0, 2.0]), (fg.float64, [3.0, 3.0])]]
    assert b.grad.dtype == fg.float64 and b.grad.tolist() == [3.0, 3.0]
