"""fusegrad.autograd as torch.autograd (frontend/autograd_api.py, autograd.py's public
backward/grad): its public names (torch 2.14.1's, written here), the grad modes being the
top level's objects, Variable, anomaly mode's NaN check, forward AD's tangents (against
derivatives by hand), the saved-tensor hooks refused, and the torch shim's view of them."""

from __future__ import annotations

import doctest
import importlib

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import autograd_api
from fusegrad.autograd import forward_ad as fwAD

# torch.autograd's public names (dir() in torch 2.14.1) that scripts use; torch's profiler
# and its internal helpers (handle_torch_function, ...) are left out
TORCH_NAMES = (
    "Function NestedIOFunction Variable anomaly_mode backward detect_anomaly enable_grad "
    "forward_ad function functional grad grad_mode gradcheck gradgradcheck graph "
    "inference_mode no_grad set_detect_anomaly set_grad_enabled variable"
).split()
NOT_HERE = {"NestedIOFunction"}  # (torch's legacy; not in fusegrad)


def test_torch_autograd_names():
    missing = [n for n in TORCH_NAMES if n not in NOT_HERE and not hasattr(fg.autograd, n)]
    assert missing == []


@pytest.mark.parametrize(
    "name", ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode", "is_grad_enabled"]
)
def test_grad_modes_are_the_top_levels(name):
    assert getattr(fg.autograd, name) is getattr(fg, name)
    if name != "is_grad_enabled":
        assert getattr(fg.autograd.grad_mode, name) is getattr(fg, name)


def test_submodules_import_by_path():
    for name in ("grad_mode", "functional", "forward_ad", "graph", "anomaly_mode", "variable"):
        module = importlib.import_module(f"fusegrad.autograd.{name}")
        assert getattr(fg.autograd, name) is module
    from fusegrad.autograd.gradcheck import GradcheckError

    assert GradcheckError is fg.autograd.GradcheckError


def test_no_grad_from_autograd():
    w = fg.ones(2, requires_grad=True)
    with fg.autograd.no_grad():
        assert not (w * 2).requires_grad
    with fg.autograd.grad_mode.set_grad_enabled(False):
        assert not fg.is_grad_enabled()
    assert (w * 2).requires_grad


def test_variable_is_torchs_legacy_constructor():
    t = fg.tensor([1.0, 2.0])
    v = fg.autograd.Variable(t, requires_grad=True)
    assert type(v) is fg.Tensor and v.requires_grad and v.is_leaf and v is not t
    assert isinstance(t, fg.autograd.Variable) and not isinstance([1.0], fg.autograd.Variable)
    w = fg.autograd.Variable(v * 2)  # a detached alias, as torch's: no history
    assert not w.requires_grad and w.is_leaf and w.tolist() == [2.0, 4.0]
    (v * v).sum().backward()
    assert v.grad.tolist() == [2.0, 4.0]
    with pytest.raises(TypeError, match="Variable data has to be a tensor, but got int"):
        fg.autograd.Variable(3)


def test_public_backward_takes_torchs_arguments():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    fg.autograd.backward([(x * x).sum(), x * 3], [None, fg.tensor([1.0, 0.0])])
    assert x.grad.tolist() == [2 * 1.0 + 3, 2 * 2.0]
    y = fg.tensor([1.0, 2.0], requires_grad=True)
    z = y * 2
    fg.autograd.backward((z * z).sum(), inputs=[y])
    assert y.grad.tolist() == [8.0, 16.0]  # d/dy (2y)^2 = 8y
    with pytest.raises(RuntimeError, match="both passed"):
        fg.autograd.backward(z.sum(), grad_tensors=fg.tensor(1.0), grad_variables=fg.tensor(1.0))


def test_grad_keywords():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    (g,) = fg.autograd.grad((x * x).sum(), x, only_inputs=True)
    assert g.tolist() == [2.0, 4.0]
    with pytest.raises(NotImplementedError, match="is_grads_batched"):
        fg.autograd.grad(x * x, x, fg.ones(2, 2), is_grads_batched=True)


def test_anomaly_mode_names_the_op_whose_gradient_is_nan():
    a = fg.tensor([0.0, 1.0], requires_grad=True)
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = fg.autograd.detect_anomaly()
    with mode:
        assert fg.is_anomaly_enabled()
        with pytest.raises(RuntimeError, match=r"Function 'sqrt backward' \(test_autograd_api"):
            (a.sqrt() * 0).sum().backward()  # 0 * inf = nan, in sqrt's backward
        b = fg.tensor([4.0, 1.0], requires_grad=True)
        b.sqrt().sum().backward()  # no NaN: no error
        np.testing.assert_allclose(b.grad.numpy(), [0.25, 0.5])
    assert not fg.is_anomaly_enabled()
    c = fg.tensor([0.0, 1.0], requires_grad=True)
    (c.sqrt() * 0).sum().backward()  # off: the NaN gradient is kept, as torch's
    assert np.isnan(c.grad.numpy()[0])
    with fg.autograd.set_detect_anomaly(True, check_nan=False):
        (fg.tensor([0.0], requires_grad=True).sqrt() * 0).sum().backward()


def test_forward_ad_tangent_is_the_jacobian_vector_product():
    x, t = np.array([1.0, 2.0]), np.array([1.0, 0.5])
    with fwAD.dual_level():
        d = fwAD.make_dual(fg.tensor(x, dtype=fg.float64), fg.tensor(t, dtype=fg.float64))
        y = (d.sin() * d).sum()
        primal, tangent = fwAD.unpack_dual(y)
        np.testing.assert_allclose(primal.item(), (np.sin(x) * x).sum())
        np.testing.assert_allclose(tangent.item(), ((np.cos(x) * x + np.sin(x)) * t).sum())
        assert fwAD.unpack_dual(fg.ones(2)).tangent is None
        assert fwAD.unpack_dual(d).tangent.tolist() == t.tolist()
        with pytest.raises(RuntimeError, match="Nested forward mode AD"):
            fwAD.enter_dual_level()
    assert fwAD.unpack_dual(y).tangent is None
    with pytest.raises(RuntimeError, match="no level exists"):
        fwAD.make_dual(fg.ones(2), fg.ones(2))


def test_saved_tensors_hooks_are_refused_and_save_on_cpu_changes_nothing():
    with pytest.raises(NotImplementedError, match="saved_tensors_hooks"):
        fg.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    with fg.autograd.graph.disable_saved_tensors_hooks("no hooks here"):
        with pytest.raises(RuntimeError, match="no hooks here"):
            fg.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    x = fg.tensor([1.0, 3.0], requires_grad=True)
    with fg.autograd.graph.save_on_cpu(pin_memory=True):
        (x * x).sum().backward()
    assert x.grad.tolist() == [2.0, 6.0]


def test_torch_shim_reads_the_submodules():
    from fusegrad.torch_shim import TorchShim

    shim = TorchShim()
    autograd = shim.module("torch.autograd")
    assert autograd.no_grad is fg.no_grad
    assert shim.module("torch.autograd.grad_mode").no_grad is fg.no_grad
    assert shim.module("torch.autograd.functional").jacobian is fg.autograd.functional.jacobian
    assert shim.module("torch.autograd.forward_ad").make_dual is fwAD.make_dual
    assert autograd.Variable is fg.autograd.Variable
    assert shim.missing == []


def test_doctests():
    assert doctest.testmod(autograd_api).failed == 0


def test_tensor_backward_with_inputs_accumulates_into_those_alone():
    """`loss.backward(inputs=...)`, as torch's: only the named tensors' `.grad` grows
    (torch's values for this graph: w 3b + 2w, b 3w)."""
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    b = fg.tensor([0.5, -1.0], requires_grad=True)
    loss = (w * 3 * b).sum() + (w * w).sum()
    loss.backward(inputs=[w], retain_graph=True)
    assert w.grad.tolist() == [3.5, 1.0] and b.grad is None
    loss.backward(inputs=b)
    assert w.grad.tolist() == [3.5, 1.0] and b.grad.tolist() == [3.0, 6.0]
