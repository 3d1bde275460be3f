"""`copy.deepcopy`, `copy.copy` and `pickle` of tensors, parameters, modules and optimizers,
with PyTorch's semantics (frontend/copying.py): an EMA model, a target network or the
best checkpoint kept in memory is a deep copy of a model that has trained."""

from __future__ import annotations

import copy
import pickle
import sys

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.runtime import buffer as runtime_buffer

X = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


def _trained(momentum: float = 0.9):
    """A model and its optimizer after two training steps (the case of the issue: a
    step leaves compiled plans and runtime buffers behind)."""
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=momentum)
    for _ in range(2):
        _step(model, opt)
    return model, opt


def _step(model, opt):
    opt.zero_grad()
    (model(fg.tensor(X)) ** 2).sum().backward()
    opt.step()


def _values(model):
    return [p.numpy().copy() for p in model.parameters()]


@pytest.fixture
def no_unraisable(monkeypatch):
    """Fail on any "Exception ignored in ..." (a __del__ that raised)."""
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    yield seen
    assert not seen, [f"{u.exc_type.__name__}: {u.exc_value} in {u.object}" for u in seen]


def test_deepcopy_of_a_trained_model_is_independent(no_unraisable):
    model, opt = _trained()
    before = _values(model)
    twin = copy.deepcopy(model)
    for p, q, v in zip(model.parameters(), twin.parameters(), before):
        assert type(q) is nn.Parameter and q.requires_grad and q.is_leaf and q is not p
        np.testing.assert_array_equal(q.numpy(), v)
        # as torch.nn.Parameter.__deepcopy__: the value and requires_grad, not the .grad
        assert p.grad is not None and q.grad is None
    # training the copy leaves the original alone, and the other way round
    _step(twin, optim.SGD(twin.parameters(), lr=0.5))
    for p, v in zip(model.parameters(), before):
        np.testing.assert_array_equal(p.numpy(), v)
    copied = _values(twin)
    _step(model, opt)
    for q, v in zip(twin.parameters(), copied):
        np.testing.assert_array_equal(q.numpy(), v)
    assert not np.array_equal(copied[0], before[0])
    assert not np.array_equal(_values(model)[0], before[0])


def test_deepcopy_keeps_tied_parameters_tied():
    lin = nn.Linear(2, 2)
    model = nn.Sequential(lin, nn.Tanh(), lin)
    twin = copy.deepcopy(model)
    assert twin[0].weight is twin[2].weight and twin[0].weight is not lin.weight
    assert len(list(twin.parameters())) == 2


def test_deepcopy_of_a_state_dict(no_unraisable):
    model, _ = _trained()
    state = model.state_dict()
    saved = copy.deepcopy(state)
    assert list(saved) == list(state)
    for k, v in saved.items():
        assert type(v) is fg.Tensor and not v.requires_grad
        np.testing.assert_array_equal(v.numpy(), state[k].numpy())
    first = {k: v.numpy().copy() for k, v in saved.items()}
    _step(*_trained())  # more training elsewhere changes nothing in the copy
    model2, opt2 = model, optim.SGD(model.parameters(), lr=1.0)
    _step(model2, opt2)
    for k, v in saved.items():
        np.testing.assert_array_equal(v.numpy(), first[k])
    model.load_state_dict(saved)  # the best-checkpoint pattern
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), first[k])


def test_pickle_round_trip_of_a_trained_model(no_unraisable):
    model, _ = _trained()
    back = pickle.loads(pickle.dumps(model))
    assert type(back) is nn.Sequential and type(back[0]) is nn.Linear
    for p, q in zip(model.parameters(), back.parameters()):
        assert type(q) is nn.Parameter and q.requires_grad and q.grad is None
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    x = fg.tensor(X)
    np.testing.assert_array_equal(back(x).numpy(), model(x).numpy())
    _step(back, optim.SGD(back.parameters(), lr=0.1))  # it trains
    assert back[0].weight.grad is not None


@pytest.mark.parametrize("realized", [False, True])
@pytest.mark.parametrize("how", ["deepcopy", "copy", "pickle"])
def test_copies_of_a_computed_tensor(how, realized, no_unraisable):
    a = fg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype=fg.float64)
    t = (a * 2).t()  # lazy, a transposed view
    if realized:
        t.realize()
    c = {"deepcopy": copy.deepcopy, "copy": copy.copy, "pickle": _pickled}[how](t)
    assert type(c) is fg.Tensor and c.dtype is fg.float64 and c.shape == (3, 2)
    assert c.stride() == t.stride() == (1, 3)  # as torch keeps them
    np.testing.assert_array_equal(c.numpy(), [[2.0, 8.0], [4.0, 10.0], [6.0, 12.0]])
    assert not c.requires_grad


def _pickled(t):
    return pickle.loads(pickle.dumps(t))


@pytest.mark.parametrize("how", [copy.deepcopy, copy.copy, _pickled])
def test_copies_of_int_and_bool_tensors(how):
    for t in (fg.arange(5) * 3, fg.tensor([True, False]) & fg.tensor([True, True])):
        c = how(t)
        assert c.dtype is t.dtype
        assert c.tolist() == t.tolist()


def test_deepcopy_of_a_leaf_copies_its_grad():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    c = copy.deepcopy(w)
    assert c.requires_grad and c.is_leaf and c is not w
    assert c.grad is not None and c.grad is not w.grad
    assert c.grad.tolist() == [2.0, 4.0] and not c.grad.requires_grad
    (c * c * c).sum().backward()  # its own leaf: the original's grad is untouched
    assert c.grad.tolist() == [5.0, 16.0] and w.grad.tolist() == [2.0, 4.0]
    # copy.copy and pickle do not carry .grad (as torch)
    assert copy.copy(w).grad is None and _pickled(w).grad is None
    assert copy.copy(w).requires_grad and _pickled(w).requires_grad


def test_deepcopy_of_a_non_leaf_raises_as_torch():
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    y = w * 2
    with pytest.raises(RuntimeError, match="Only Tensors created explicitly by the user"):
        copy.deepcopy(y)
    with fg.no_grad():
        z = w * 2
    assert copy.deepcopy(z).tolist() == [2.0, 4.0]
    # torch 2.x: copy.copy and pickle make it a leaf that requires grad
    for c in (copy.copy(y), _pickled(y)):
        assert c.requires_grad and c.is_leaf and c.tolist() == [2.0, 4.0]
        c.sum().backward()
        assert c.grad.tolist() == [1.0, 1.0]
    assert w.grad is None


def test_copy_copy_keeps_the_value_at_the_copy():
    t = fg.tensor([1.0, 2.0])
    c = copy.copy(t)
    t.add_(1)  # fusegrad rebinds t (docs/NUMERICS.md): the copy keeps the value it had
    assert c.tolist() == [1.0, 2.0] and t.tolist() == [2.0, 3.0]


def test_lazy_gradient_copies_as_a_plain_tensor():
    w = nn.Parameter(fg.tensor([1.0, 3.0]))
    (w * w).sum().backward()
    for c in (copy.deepcopy(w.grad), copy.copy(w.grad), _pickled(w.grad)):
        assert type(c) is fg.Tensor and c.tolist() == [2.0, 6.0]


def test_optimizer_deepcopy_alone_and_with_its_model():
    model, opt = _trained()
    alone = copy.deepcopy(opt)  # as torch: its parameters are copies of its own
    assert all(
        q is not p and np.array_equal(q.numpy(), p.numpy())
        for q, p in zip(alone.param_groups[0]["params"], model.parameters())
    )
    twin, twin_opt = copy.deepcopy((model, opt))  # one call: the copied model's parameters
    assert all(q is p for q, p in zip(twin_opt.param_groups[0]["params"], twin.parameters()))
    assert all(p in twin_opt.state for p in twin.parameters())
    # the momentum buffers came along: one more step of each gives the same values
    _step(model, opt)
    _step(twin, twin_opt)
    for p, q in zip(model.parameters(), twin.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy())


def test_pickle_of_a_model_and_its_optimizer():
    model, opt = _trained()
    back, back_opt = pickle.loads(pickle.dumps((model, opt)))
    assert all(q is p for q, p in zip(back_opt.param_groups[0]["params"], back.parameters()))
    _step(model, opt)
    _step(back, back_opt)
    for p, q in zip(model.parameters(), back.parameters()):
        np.testing.assert_array_equal(q.numpy(), p.numpy())


def test_a_failed_allocation_leaves_no_broken_buffer(no_unraisable):
    import gc

    gc.collect()  # earlier tests' garbage is freed now, not in the middle of the count
    live = runtime_buffer.live_buffers
    with pytest.raises(MemoryError):
        runtime_buffer.Buffer(1 << 60, fg.float32)  # 4 EiB
    with pytest.raises(MemoryError):
        fg.empty(1 << 58, device="cpu").realize()  # 1 EiB, as a user meets it
    gc.collect()
    assert runtime_buffer.live_buffers == live


@pytest.mark.parametrize("how", [copy.deepcopy, copy.copy, _pickled])
@pytest.mark.parametrize("which", ["data", "grad.data"])
def test_copies_of_a_tensors_data_are_plain_tensors_of_their_own(how, which):
    """`copy.deepcopy(w.data)` (and pickle, copy.copy) gives a plain tensor with the value
    it had: not a `.data` view (which has no value of its own to copy), never an error."""
    w = fg.tensor([1.0, -0.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    view = w.data if which == "data" else w.grad.data
    before = view.tolist()
    c = how(view)
    assert type(c) is fg.Tensor and not c.requires_grad and c.is_leaf
    with fg.no_grad():
        w.mul_(2)
        w.grad.zero_()
    assert c.tolist() == before and str(c.numpy()[1]) == ("-0.0" if which == "data" else "3.0")


# ---------------------------------------------------------------- on the cuda device


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("how", [copy.deepcopy, copy.copy, _pickled])
def test_copies_of_a_cuda_tensor_stay_on_the_device(how):
    t = fg.tensor([[1.0, 2.0], [3.0, 4.0]], device="cuda", requires_grad=True)
    c = how(t)
    assert c.device == "cuda:0" and c.requires_grad and c.is_leaf
    assert c.cpu().tolist() == [[1.0, 2.0], [3.0, 4.0]]


@pytest.mark.usefixtures("emulated")
def test_deepcopy_of_a_cuda_model():
    model = nn.Linear(2, 2).to("cuda")
    twin = copy.deepcopy(model)
    assert twin.weight.device == "cuda:0" and type(twin.weight) is nn.Parameter
    np.testing.assert_array_equal(twin.weight.cpu().numpy(), model.weight.cpu().numpy())


@pytest.mark.usefixtures("emulated")
def test_a_failed_device_allocation_leaves_no_broken_buffer(no_unraisable):
    from fusegrad.runtime import cuda as runtime_cuda

    with pytest.raises(Exception, match="(?i)memory|allocate"):  # the emulator's or the driver's
        runtime_cuda.DeviceBuffer(1 << 60, fg.float32)  # 4 EiB
    import gc

    gc.collect()


def test_a_0d_tensor_and_parameter_pickle_as_0d():
    # np.ascontiguousarray turned a 0-d value into shape (1,): a pickled scalar tensor came
    # back 1-d
    for t in (fg.tensor(-0.0), nn.Parameter(fg.tensor(2.5)), fg.tensor(3, dtype=fg.int32)):
        back = pickle.loads(pickle.dumps(t))
        assert back.shape == () and back.dtype == t.dtype and type(back) is type(t)
        assert back.numpy().tobytes() == t.numpy().tobytes()
