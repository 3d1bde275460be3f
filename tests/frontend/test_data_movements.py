"""Movements in place through `.data` (`p.data.t_()`, `transpose_`, `swapaxes_`, `swapdims_`,
`squeeze_`, `unsqueeze_`), as in PyTorch 2.13: the tensor `.data` gave changes its shape,
the parameter does not, and reads and writes through it see the parameter moved. The
expected values are torch's (issue 26)."""

from __future__ import annotations

import fusegrad as fg


def arange(n: int):
    return fg.arange(float(n))


def test_t_changes_the_data_tensor_not_the_parameter():
    w = fg.zeros(2, 3)
    d = w.data.t_()
    assert (d.shape, w.shape, d.stride(), d.is_contiguous()) == ((3, 2), (2, 3), (1, 3), False)
    d[0] = 1.0
    assert w.tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert w.data.shape == (2, 3)  # a new .data: unmoved


def test_transpose_swapaxes_swapdims_of_a_parameters_data():
    w = arange(24).reshape(2, 3, 4).requires_grad_()
    d = w.data.transpose_(0, 2)
    assert d.shape == (4, 3, 2)
    assert d[1].tolist() == [[1.0, 13.0], [5.0, 17.0], [9.0, 21.0]]
    d.mul_(2)  # lands in w, moved back
    assert w[0].tolist() == [
        [0.0, 2.0, 4.0, 6.0],
        [8.0, 10.0, 12.0, 14.0],
        [16.0, 18.0, 20.0, 22.0],
    ]
    assert w.data.swapaxes_(1, 2).shape == (2, 4, 3)
    assert w.data.swapdims_(0, 1).shape == (3, 2, 4)
    assert w.shape == (2, 3, 4) and w.requires_grad and w.is_leaf


def test_squeeze_and_unsqueeze_of_data():
    v = fg.ones(2, 1, 3, requires_grad=True)
    s = v.data.squeeze_()
    assert (s.shape, v.shape) == ((2, 3), (2, 1, 3))
    s.add_(arange(6).reshape(2, 3))
    assert v.tolist() == [[[1.0, 2.0, 3.0]], [[4.0, 5.0, 6.0]]]
    s2 = v.data.squeeze_(1).unsqueeze_(0)
    assert s2.shape == (1, 2, 3) and s2.stride() == (6, 3, 1)
    s2.zero_()
    assert v.sum().item() == 0.0


def test_a_moved_data_view_follows_later_updates_and_gradients_stay_right():
    p = fg.ones(2, 3, requires_grad=True)
    d = p.data.t_()
    with fg.no_grad():
        p -= arange(6).reshape(2, 3)
    assert d.tolist() == [[1.0, -2.0], [0.0, -3.0], [-1.0, -4.0]]
    (p * p).sum().backward()
    assert p.grad.tolist() == [[2.0, 0.0, -2.0], [-4.0, -6.0, -8.0]]


def test_a_bad_dim_raises_at_the_users_line():
    import pytest

    with pytest.raises(IndexError, match="test_data_movements.py"):
        fg.zeros(2, 3).data.transpose_(0, 5)
