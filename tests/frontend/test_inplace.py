"""In-place operators with PyTorch's rules: the SGD idiom trains, leaves are guarded,
graphs that outlived an update of a leaf raise at backward()."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg


def test_hand_written_sgd_trains():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    w = fg.zeros(3, requires_grad=True)
    xt, yt = fg.tensor(x), fg.tensor(y)
    ident = id(w)
    for _ in range(200):
        loss = ((xt @ w - yt) ** 2).mean()
        loss.backward()
        with fg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    assert id(w) == ident and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5], atol=1e-4)
    assert w._version == 200


@pytest.mark.parametrize(
    "update, want",
    [
        (lambda t: t.__iadd__(2), [3.0, 4.0]),
        (lambda t: t.__isub__(2), [-1.0, 0.0]),
        (lambda t: t.__imul__(fg.tensor([2.0, 3.0])), [2.0, 6.0]),
        (lambda t: t.__itruediv__(4), [0.25, 0.5]),
        (lambda t: t.add_(fg.tensor([1.0, 1.0]), alpha=3), [4.0, 5.0]),
        (lambda t: t.sub_(1), [0.0, 1.0]),
        (lambda t: t.mul_(-1), [-1.0, -2.0]),
        (lambda t: t.div_(fg.tensor([2.0, 8.0])), [0.5, 0.25]),
        (lambda t: t.zero_(), [0.0, 0.0]),
        (lambda t: t.fill_(7), [7.0, 7.0]),
        (lambda t: t.copy_(fg.tensor([5, 6])), [5.0, 6.0]),
        (lambda t: t.copy_(fg.tensor(9.0)), [9.0, 9.0]),
    ],
)
def test_inplace_ops_change_the_tensor_itself(update, want):
    t = fg.tensor([1.0, 2.0])
    out = update(t)
    assert out is t and t.tolist() == want and t._version == 1 and t.dtype == fg.float32


def test_augmented_assignment_keeps_the_object():
    t = fg.tensor([1.0, 2.0])
    alias = t
    t += 1
    t *= 2
    assert alias is t and alias.tolist() == [4.0, 6.0]


def test_leaf_requiring_grad_is_refused_outside_no_grad():
    w = fg.ones(2, requires_grad=True)
    for update in (lambda: w.__isub__(1), lambda: w.zero_(), lambda: w.copy_(fg.zeros(2))):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            update()
    assert w.tolist() == [1.0, 1.0] and w._version == 0
    with fg.no_grad():
        w.zero_()
        w += 2
    assert w.tolist() == [2.0, 2.0] and w.requires_grad and w.is_leaf


def test_backward_after_the_leaf_was_updated_raises():
    w = fg.ones(3, requires_grad=True)
    loss = (w * w).sum()
    with fg.no_grad():
        w -= 0.5
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*version 1"):
        loss.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fg.grad(loss, [w])
    loss = (w * w).sum()  # built after the update: fine
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0, 1.0])


def test_differentiable_update_of_a_non_leaf():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y += x * x  # y = 2x + x^2, still differentiable
    y *= 3
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * (2 + 2 * np.array([1.0, 2.0])))
    assert not y.is_leaf


def test_plain_tensor_plus_a_tensor_requiring_grad_becomes_differentiable():
    a = fg.zeros(2)
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    a += w * w
    assert a.requires_grad and not a.is_leaf
    a.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])


def test_dtype_and_shape_rules():
    i = fg.tensor([1, 2])
    with pytest.raises(TypeError, match="can't be cast"):
        i /= 2
    with pytest.raises(TypeError, match="can't be cast"):
        i += 0.5
    i += 3  # int stays int
    assert i.dtype == fg.int64 and i.tolist() == [4, 5]
    f = fg.ones(2)
    f += fg.tensor([1, 2])  # ints into a float tensor are fine
    assert f.tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="doesn't match the broadcast shape"):
        f += fg.ones(3, 2)
    with pytest.raises(ValueError):
        f.copy_(fg.ones(3))
