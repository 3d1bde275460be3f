"""torch.autograd.gradcheck / gradgradcheck (frontend/autograd_gradcheck.py): a right
hand-written backward passes, a wrong one is caught with torch's message (numerical
Jacobians written here by hand), and torch's argument checks."""

from __future__ import annotations

import doctest

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import autograd_gradcheck
from fusegrad.autograd import Function, GradcheckError, gradcheck, gradgradcheck


class Square(Function):
    """x ** 2 with the right derivative, 2 x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 2 * g * x


class WrongSquare(Function):
    """x ** 2 with a wrong derivative, 3 x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x


class Shifted(Function):
    """A backward that returns 1 where the gradient output is 0 (torch's undefined-grad
    check catches it)."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return 2 * g + 1


def _x(values=(1.0, 2.0)):
    return fg.tensor(list(values), dtype=fg.float64, requires_grad=True)


def test_a_right_backward_passes():
    assert gradcheck(Square.apply, (_x(),)) is True
    assert gradcheck(Square.apply, _x()) is True  # a tensor for the tuple, as torch's


def test_a_wrong_backward_is_caught_with_torchs_message():
    with pytest.raises(GradcheckError) as err:
        gradcheck(WrongSquare.apply, (_x(),))
    text = str(err.value)
    assert text.startswith("Jacobian mismatch for output 0 with respect to input 0,\nnumerical:")
    # the Jacobians as torch prints them: numerical diag(2x) = diag(2, 4), analytical 3x
    numerical = text.split("numerical:")[1].split("analytical:")[0]
    analytical = text.split("analytical:")[1]
    assert "2.0000" in numerical and "4.0000" in numerical
    assert "3." in analytical and "6." in analytical
    assert isinstance(err.value, RuntimeError)  # torch's GradcheckError is one
    assert gradcheck(WrongSquare.apply, (_x(),), raise_exception=False) is False


def test_several_inputs_and_outputs_and_the_mismatched_pair_is_named():
    a = _x((0.5, -1.0, 2.0))
    b = _x((1.5, 0.25, -0.5))

    def f(u, v):
        return (u.sin() * v, (u * v).sum())

    assert gradcheck(f, (a, b))

    def g(u, v):
        return u * v, WrongSquare.apply(v)

    with pytest.raises(GradcheckError, match="output 1 with respect to input 1"):
        gradcheck(g, (a, b))


def test_an_input_that_does_not_require_grad_is_not_checked():
    a, b = _x(), fg.tensor([3.0, 4.0], dtype=fg.float64)
    assert gradcheck(lambda u, v: WrongSquare.apply(v) + u, (a, b))


def test_no_input_requiring_grad_is_torchs_value_error():
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda t: t * 2, (fg.tensor([1.0], dtype=fg.float64),))


def test_a_float32_input_warns_as_torch():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.warns(UserWarning, match="is not a double precision"):
        gradcheck(lambda t: t * 2, (x,), eps=1e-3, atol=1e-2)


def test_undefined_grad_check_catches_a_backward_that_ignores_a_zero_gradient():
    with pytest.raises(GradcheckError, match="undefined output grads"):
        gradcheck(Shifted.apply, (_x(),), atol=10.0)  # (tolerance: only the zero check fails)
    assert gradcheck(Shifted.apply, (_x(),), atol=10.0, check_undefined_grad=False)


def test_unsupported_checks_raise_naming_them():
    with pytest.raises(NotImplementedError, match="check_forward_ad"):
        gradcheck(Square.apply, (_x(),), check_forward_ad=True)


def test_gradgradcheck_of_a_twice_differentiable_function():
    x = fg.tensor([[1.0, 2.0], [0.5, -1.0]], dtype=fg.float64, requires_grad=True)
    assert gradgradcheck(lambda a: (a.sin() * a).exp(), (x,))
    go = fg.tensor([[1.0, -1.0], [0.5, 2.0]], dtype=fg.float64, requires_grad=True)
    assert gradgradcheck(lambda a: a.tanh() * a, (x,), (go,))


class SquareFlatBackward(Function):
    """x ** 2 whose backward is right in value but computed through numpy, so it has no
    derivative itself: its second derivative reads as 0, where it is 2."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**2

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return fg.tensor(2 * g.detach().numpy() * x.detach().numpy(), dtype=x.dtype)


def test_gradgradcheck_catches_a_backward_without_a_derivative():
    assert gradcheck(SquareFlatBackward.apply, (_x(),))
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(SquareFlatBackward.apply, (_x(),))


def test_the_torch_shim_name_and_the_testing_error():
    assert issubclass(GradcheckError, fg.testing.GradcheckError)
    assert fg.autograd.gradcheck is gradcheck
    np.testing.assert_equal(True, gradcheck(Square.apply, (_x((0.0, -3.0)),)))


def test_doctests():
    assert doctest.testmod(autograd_gradcheck).failed == 0


def test_outputs_without_grad_are_left_out_as_torchs():
    x = _x((1.0, -1.0))
    # a detached output changes with the input, but is not checked while another output
    # requires grad; the mismatched output is numbered among those that do
    assert gradcheck(lambda t: (t.detach() * 3, t * 2), (x,))
    with pytest.raises(GradcheckError, match="output 0 with respect to input 0"):
        gradcheck(lambda t: (t.detach() * 3, WrongSquare.apply(t)), (x,))
    # no output requires grad: every numerical gradient must be zero
    assert gradcheck(lambda t: t.detach() * 0, (x,))
    with pytest.raises(GradcheckError, match="expected to be zero"):
        gradcheck(lambda t: t.detach() * 3, (x,))
