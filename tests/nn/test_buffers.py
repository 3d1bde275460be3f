"""nn.Buffer against torch 2.14's: registration on assignment, persistence in state_dict,
copies, and torch's errors."""

from __future__ import annotations

import copy
import pickle

import pytest

import fusegrad as fg
from fusegrad import nn

# ---------------------------------------------------------------- Buffer


def test_buffer_is_a_detached_tensor_marked_persistent():
    b = nn.Buffer(fg.ones(2))
    assert isinstance(b, nn.Buffer) and isinstance(b, fg.Tensor)
    assert b.persistent and not b.requires_grad and b.tolist() == [1.0, 1.0]
    assert not isinstance(fg.ones(2), nn.Buffer)
    assert not isinstance(b * 2, nn.Buffer) and not isinstance(b.detach(), nn.Buffer)
    empty = nn.Buffer()
    assert empty.shape == (0,) and empty.dtype == fg.float32
    assert nn.Buffer(fg.arange(3)).dtype == fg.int64
    assert not nn.Buffer(fg.ones(1), persistent=False).persistent
    # torch keeps requires_grad, on a leaf of its own
    x = fg.ones(2, requires_grad=True)
    bx = nn.Buffer(x * 2)
    assert bx.requires_grad and bx.is_leaf and bx.grad_fn is None


class _Buffered(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Buffer(fg.zeros(2))
        self.b = nn.Buffer(fg.ones(3), persistent=False)
        self.w = nn.Parameter(fg.zeros(1))


def test_buffer_assigned_to_a_module_registers_a_buffer():
    m = _Buffered()
    assert [n for n, _ in m.named_buffers()] == ["a", "b"]
    assert list(m.state_dict()) == ["w", "a"]
    assert [n for n, _ in m.named_parameters()] == ["w"]
    m.a = fg.full((2,), 5.0)  # a plain tensor into a buffer's name stays a buffer
    assert list(m.state_dict()) == ["w", "a"] and m.state_dict()["a"].tolist() == [5.0, 5.0]
    m.b = nn.Buffer(fg.ones(3), persistent=True)
    assert list(m.state_dict()) == ["w", "a", "b"]
    m.b = nn.Buffer(fg.ones(3), persistent=False)
    assert list(m.state_dict()) == ["w", "a"]
    # register_buffer's own persistent argument wins over the Buffer's, as torch's
    m.register_buffer("c", nn.Buffer(fg.ones(1), persistent=False))
    assert list(m.state_dict()) == ["w", "a", "c"]
    del m.c
    assert list(m.state_dict()) == ["w", "a"]
    m.z = nn.Buffer(fg.ones(1))
    m.z = None
    assert m.z is None and list(m.state_dict()) == ["w", "a"]


def test_buffer_loads_moves_and_copies_with_its_module():
    m = _Buffered()
    m.load_state_dict({"w": fg.zeros(1), "a": fg.tensor([1.0, 2.0])})
    assert m.a.tolist() == [1.0, 2.0]
    m.to(fg.float64)
    assert m.a.dtype == fg.float64 and m.b.dtype == fg.float64
    twin = copy.deepcopy(m)
    assert isinstance(twin.b, nn.Buffer) and not twin.b.persistent
    assert list(twin.state_dict()) == ["w", "a"] and twin.a.tolist() == [1.0, 2.0]
    again = pickle.loads(pickle.dumps(m))
    assert isinstance(again.b, nn.Buffer) and list(again.state_dict()) == ["w", "a"]


def test_buffer_assignment_errors_as_torch():
    m = _Buffered()
    m.q = 1
    with pytest.raises(KeyError, match="attribute 'q' already exists"):
        m.q = nn.Buffer(fg.ones(1))
    with pytest.raises(KeyError, match="attribute 'forward' already exists"):
        m.forward = nn.Buffer(fg.ones(1))
    with pytest.raises(TypeError, match="as parameter 'w'"):
        m.w = nn.Buffer(fg.ones(1))

    class Early(nn.Module):
        def __init__(self):
            self.a = nn.Buffer(fg.zeros(2))

    with pytest.raises(AttributeError, match="cannot assign buffer before Module.__init__"):
        Early()
    with pytest.raises(AttributeError, match="'list' object has no attribute 'detach'"):
        nn.Buffer([1.0, 2.0])
