"""Ordinary PyTorch habits found wrong or missing by probing fusegrad against PyTorch 2.13:
writes through views, the function forms of tensor methods, Python protocols on tensors,
and the error types PyTorch raises. Expected values are PyTorch's."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

# ---------------------------------------------------------------- writes through views


def test_writing_into_an_index_of_an_index_lands_in_the_tensor():
    x = fg.zeros(2, 3)
    x[0][1] = 9.0
    assert x.tolist() == [[0.0, 9.0, 0.0], [0.0, 0.0, 0.0]]


def test_inplace_ops_on_views_land_in_the_base():
    x = fg.zeros(2, 3)
    x[:, 1].fill_(4.0)
    assert x.tolist() == [[0.0, 4.0, 0.0], [0.0, 4.0, 0.0]]
    x = fg.zeros(2, 3)
    x.view(6)[0] = 5.0
    assert x.tolist() == [[5.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
    x = fg.zeros(2, 3)
    x.t()[2].add_(1)  # a view of a view
    assert x.tolist() == [[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]
    t = fg.arange(6.0)
    t.reshape(2, 3)[0] = -1.0
    assert t.tolist() == [-1.0, -1.0, -1.0, 3.0, 4.0, 5.0]
    base = fg.arange(6.0)
    _, b = base.chunk(2)
    b.fill_(0)
    assert base.tolist() == [0.0, 1.0, 2.0, 0.0, 0.0, 0.0]
    x = fg.zeros(2, 2)
    x.unsqueeze(0).squeeze(0).permute(1, 0)[0].fill_(7)
    assert x.tolist() == [[7.0, 0.0], [7.0, 0.0]]


def test_a_view_written_after_its_base_changed_keeps_the_base_change():
    x = fg.zeros(2, 3)
    r = x[1]
    x.add_(1)
    r.zero_()
    assert x.tolist() == [[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]


def test_views_of_data_and_grad_write_through():
    x = fg.zeros(3)
    x.data[1:].fill_(2)
    assert x.tolist() == [0.0, 2.0, 2.0]
    w = fg.ones(2, requires_grad=True)
    (w * w).sum().backward()
    w.grad[0].zero_()
    assert w.grad.tolist() == [0.0, 2.0]


def test_a_view_of_a_leaf_that_requires_grad_refuses_inplace_outside_no_grad():
    w = fg.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError):
        w[0].fill_(1)
    m = nn.Linear(2, 2)
    with fg.no_grad():
        m.weight[0].zero_()
        w[0].fill_(3)
    assert m.weight[0].tolist() == [0.0, 0.0]
    assert w.tolist() == [3.0, 1.0] and w.is_leaf and w.requires_grad


def test_gradient_flows_through_a_write_into_a_view():
    x = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 1
    y[1:].mul_(2)
    y.sum().backward()
    assert y.tolist() == [1.0, 4.0, 6.0]
    assert x.grad.tolist() == [1.0, 2.0, 2.0]


def test_a_reshape_that_copies_is_not_a_view():
    x = fg.arange(6.0).reshape(2, 3)
    y = x.t().reshape(6)  # not expressible as a view: a copy, as in torch
    y.fill_(0)
    assert x.tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]


# ---------------------------------------------------------------- function forms


def test_function_forms_of_tensor_methods():
    a, b = fg.tensor([1.0, 5.0]), fg.tensor([3.0, 2.0])
    assert fg.max(a).item() == 5.0 and fg.min(a).item() == 1.0
    assert fg.max(a, b).tolist() == [3.0, 5.0] and fg.min(a, b).tolist() == [1.0, 2.0]
    values, indices = fg.max(fg.tensor([[1.0, 5.0], [7.0, 2.0]]), dim=1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]
    assert fg.mul(a, 3).tolist() == [3.0, 15.0]
    assert fg.add(a, 3, alpha=2).tolist() == [7.0, 11.0]
    assert fg.sub(a, 1).tolist() == [0.0, 4.0]
    assert fg.pow(a, 2).tolist() == [1.0, 25.0]
    assert fg.numel(fg.ones(2, 3)) == 6
    assert fg.narrow(fg.arange(5), 0, 1, 2).tolist() == [1, 2]
    assert fg.dot(fg.tensor([1.0, 2.0]), fg.tensor([3.0, 4.0])).item() == 11.0
    with pytest.raises(AttributeError):
        fg.no_such_function  # noqa: B018
    with pytest.raises(TypeError):
        fg.mul(2, a)


def test_concat_hstack_vstack():
    assert fg.concat([fg.ones(1), fg.zeros(1)]).tolist() == [1.0, 0.0]
    assert fg.hstack([fg.ones(2), fg.zeros(2)]).tolist() == [1.0, 1.0, 0.0, 0.0]
    assert fg.vstack([fg.ones(2), fg.zeros(2)]).tolist() == [[1.0, 1.0], [0.0, 0.0]]
    assert fg.hstack([fg.ones(2, 1), fg.zeros(2, 2)]).shape == (2, 3)


def test_set_grad_enabled_and_is_grad_enabled():
    x = fg.tensor([1.0], requires_grad=True)
    with fg.set_grad_enabled(False):
        assert not (x * 2).requires_grad and not fg.is_grad_enabled()
    assert (x * 2).requires_grad and fg.is_grad_enabled()

    @fg.set_grad_enabled(False)
    def f(t):
        return t * 2

    assert fg.is_grad_enabled() and not f(x).requires_grad


def test_small_tensor_methods():
    t = fg.zeros(2, 3)
    assert t.element_size() == 4 and fg.zeros(1, dtype=fg.float64).element_size() == 8
    assert t.nelement() == 6
    assert t.is_floating_point() and not fg.tensor([1]).is_floating_point()
    assert fg.arange(4).view_as(fg.zeros(2, 2)).tolist() == [[0, 1], [2, 3]]
    assert fg.arange(4).reshape_as(fg.zeros(2, 2)).shape == (2, 2)
    assert fg.ones(2, 2).ravel().shape == (4,)
    assert fg.ones(2, 3).mm(fg.ones(3, 1)).tolist() == [[3.0], [3.0]]
    assert fg.mm(fg.ones(2, 3), fg.ones(3, 1)).shape == (2, 1)
    assert fg.get_default_dtype() == fg.float32


def test_randint_with_high_and_size_only():
    r = fg.randint(5, (3,))
    assert r.shape == (3,) and r.dtype == fg.int64
    assert all(0 <= v < 5 for v in r.tolist())


# ---------------------------------------------------------------- Python protocols


def test_integer_tensors_are_indices():
    assert [10, 20, 30][fg.tensor(1)] == 20
    assert list(range(fg.tensor(3))) == [0, 1, 2]
    with pytest.raises(TypeError):
        [10, 20][fg.tensor(1.0)]
    with pytest.raises(TypeError):
        [10, 20][fg.tensor([0, 1])]


def test_format_of_a_0d_tensor_is_its_values():
    assert f"{fg.tensor(2.5):.2f}" == "2.50"
    assert f"{fg.tensor(3):>3}" == "  3"
    with pytest.raises(TypeError):
        f"{fg.tensor([1.0, 2.0]):.2f}"


def test_iteration():
    assert [r.tolist() for r in fg.tensor([[1, 2], [3, 4]])] == [[1, 2], [3, 4]]
    with pytest.raises(TypeError, match="0-d"):
        list(fg.tensor(1.0))


# ---------------------------------------------------------------- error types


@pytest.mark.parametrize(
    "misuse",
    [
        lambda: fg.ones(2, 3) + fg.ones(2),  # broadcasting
        lambda: fg.ones(2, 3) @ fg.ones(2, 3),  # matmul
        lambda: fg.arange(24.0).view(5, 5),
        lambda: fg.cat([fg.ones(2, 2), fg.zeros(2, 3)]),
        lambda: fg.stack([fg.ones(2), fg.zeros(3)]),
        lambda: fg.tensor([1.0, 2.0]).item(),
        lambda: bool(fg.tensor([1.0, 2.0])),
        lambda: fg.tensor([1.0, 2.0]).expand(3),
        lambda: fg.tensor([1, 2]).mean(),  # an int mean: torch's RuntimeError
        lambda: fg.tensor([1, 2], requires_grad=True),
        lambda: fg.tensor([1, 2]).add_(1.5),
        lambda: fg.ones(2, 3) @ fg.ones(3, 2, dtype=fg.int64),
        lambda: nn.Linear(3, 2)(fg.ones(4, 2)),
        lambda: nn.Embedding(5, 2)(fg.tensor([1.0])),
        lambda: nn.functional.cross_entropy(fg.ones(3, 3), fg.tensor([0.0, 2.0, 1.0])),
        lambda: fg.ones(2, 2).gather(1, fg.tensor([[0], [2]])),
        lambda: fg.ones(3).index_select(0, fg.tensor([0.0])),
        lambda: nn.functional.one_hot(fg.tensor([1.0]), 3),
    ],
)
def test_common_misuse_raises_runtime_error_as_torch(misuse):
    with pytest.raises(RuntimeError):
        misuse()


def test_errors_keep_their_older_types_too():
    with pytest.raises(ValueError):  # a loss's batch-size mismatch is torch's ValueError
        fg.ones(2, 3) + fg.ones(2)
    with pytest.raises(TypeError):
        fg.tensor([1, 2]).mean()


def test_unsqueeze_out_of_range_is_an_index_error():
    with pytest.raises(IndexError):
        fg.zeros(3).unsqueeze(3)


# ---------------------------------------------------------------- printing, as torch prints


@pytest.mark.cpu_device  # torch prints device='cuda:0' too
@pytest.mark.parametrize(
    "make, text",
    [
        (lambda: fg.tensor([1.0, 2.5]), "tensor([1.0000, 2.5000])"),
        (lambda: fg.tensor([[1.0, -2.0], [3.0, 4.0]]), "tensor([[ 1., -2.],\n        [ 3.,  4.]])"),
        (lambda: fg.tensor([1e-5, 1.0]), "tensor([1.0000e-05, 1.0000e+00])"),
        (lambda: fg.tensor([float("nan"), 1.5]), "tensor([   nan, 1.5000])"),
        (lambda: fg.tensor([float("nan"), 1.0]), "tensor([nan, 1.])"),
        (lambda: fg.tensor([123456.0, 1.0]), "tensor([1.2346e+05, 1.0000e+00])"),
        (lambda: fg.tensor(0.0), "tensor(0.)"),
        (lambda: fg.tensor(1.5), "tensor(1.5000)"),
        (lambda: fg.tensor([-0.0, 0.0]), "tensor([-0., 0.])"),
        (lambda: fg.tensor([float("inf"), -float("inf")]), "tensor([inf, -inf])"),
        (lambda: fg.tensor([[True, False]]), "tensor([[ True, False]])"),
        (lambda: fg.tensor([1, -100]), "tensor([   1, -100])"),
        (lambda: fg.tensor([]), "tensor([])"),
        (lambda: fg.zeros(0, 3), "tensor([], size=(0, 3))"),
        (lambda: fg.zeros(0, dtype=fg.int64), "tensor([], dtype=fusegrad.int64)"),
        (lambda: fg.tensor([1.5], dtype=fg.float64), "tensor([1.5000], dtype=fusegrad.float64)"),
        (lambda: fg.tensor([1.5], requires_grad=True), "tensor([1.5000], requires_grad=True)"),
        (lambda: fg.ones(2, requires_grad=True) * 2, "tensor([2., 2.], grad_fn=<MulBackward0>)"),
        (
            lambda: fg.arange(30.0),
            "tensor([ 0.,  1.,  2.,  3.,  4.,  5.,  6.,  7.,  8.,  9., 10., 11., 12., 13.,\n"
            "        14., 15., 16., 17., 18., 19., 20., 21., 22., 23., 24., 25., 26., 27.,\n"
            "        28., 29.])",
        ),
        (
            lambda: fg.arange(2000.0),
            "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., 1.9970e+03, 1.9980e+03,\n"
            "        1.9990e+03])",
        ),
        (
            lambda: fg.arange(24).reshape(2, 3, 4),
            "tensor([[[ 0,  1,  2,  3],\n         [ 4,  5,  6,  7],\n"
            "         [ 8,  9, 10, 11]],\n\n"
            "        [[12, 13, 14, 15],\n         [16, 17, 18, 19],\n"
            "         [20, 21, 22, 23]]])",
        ),
    ],
)
def test_tensors_print_as_torch_prints_them(make, text):
    assert repr(make()) == text
    assert str(make()) == text


@pytest.mark.cpu_device  # torch prints device='cuda:0' too
def test_a_summarized_matrix_prints_its_corners():
    text = repr(fg.arange(5000).reshape(50, 100))
    assert text.startswith("tensor([[   0,    1,    2,  ...,   97,   98,   99],\n")
    assert "        ...,\n" in text
    assert text.endswith("[4900, 4901, 4902,  ..., 4997, 4998, 4999]])")


@pytest.mark.cpu_device  # torch prints device='cuda:0' too
@pytest.mark.parametrize(
    "name", ["printing", "linalg", "nn.adaptive", "nn.functional", "autograd_state"]
)
def test_docstring_examples_of_the_new_modules(name):
    import doctest
    import importlib

    result = doctest.testmod(
        importlib.import_module(f"fusegrad.{name}"), optionflags=doctest.ELLIPSIS
    )
    assert result.attempted > 0 and result.failed == 0


def test_grad_fn():
    x = fg.tensor([1.0], requires_grad=True)
    assert x.grad_fn is None and fg.tensor([1.0]).grad_fn is None
    assert x.detach().grad_fn is None
    y = x * 2
    assert y.grad_fn is not None and y.grad_fn.name() == "MulBackward0"
    assert (x + 1).grad_fn.name() == "AddBackward0"
    with fg.no_grad():
        assert (x * 2).grad_fn is None


def test_randperm_is_a_seeded_permutation():
    fg.manual_seed(0)
    a = fg.randperm(6)
    fg.manual_seed(0)
    assert a.tolist() == fg.randperm(6).tolist()
    assert a.dtype == fg.int64 and sorted(a.tolist()) == [0, 1, 2, 3, 4, 5]
    assert sorted(fg.randperm(10000).tolist()) == list(range(10000))  # no O(n^2) sort
    assert fg.randperm(3, dtype=fg.int32).dtype == fg.int32


def test_legacy_constructors():
    assert fg.Tensor([1, 2]).tolist() == [1.0, 2.0] and fg.Tensor([1, 2]).dtype == fg.float32
    assert fg.Tensor(2, 3).shape == (2, 3) and fg.Tensor(2, 3).dtype == fg.float32
    assert fg.Tensor().shape == (0,)
    assert fg.FloatTensor([1, 2]).dtype == fg.float32
    assert fg.LongTensor([1.7, 2]).tolist() == [1, 2] and fg.LongTensor([1]).dtype == fg.int64
    assert fg.DoubleTensor(3).dtype == fg.float64
    assert fg.tensor([1.0]).type() == "fusegrad.FloatTensor"
    assert fg.tensor([1]).type() == "fusegrad.LongTensor"
    assert fg.tensor([1]).type(fg.float64).dtype == fg.float64


def test_size_and_comparing_with_none():
    assert fg.zeros(2, 3).size() == fg.Size([2, 3]) and fg.Size([2, 3]) == (2, 3)
    assert repr(fg.Size([2, 3])) == "fusegrad.Size([2, 3])"
    assert (fg.zeros(1) == None) is False  # noqa: E711  (the habit being tested)
    assert (fg.zeros(1) != None) is True  # noqa: E711


def test_unique_and_count_nonzero():
    x = fg.tensor([[3, 1], [3, 2]])
    values, inverse, counts = fg.unique(x, return_inverse=True, return_counts=True)
    assert values.tolist() == [1, 2, 3] and values.dtype == fg.int64
    assert inverse.tolist() == [[2, 0], [2, 1]] and counts.tolist() == [1, 1, 2]
    assert fg.tensor([3.5, 1.0, 3.5]).unique().tolist() == [1.0, 3.5]
    assert fg.count_nonzero(fg.tensor([0, 1, 2])).item() == 2
    assert fg.tensor([[0, 1], [2, 3]]).count_nonzero(dim=0).tolist() == [1, 2]
    assert fg.argwhere(fg.tensor([[0, 1], [1, 0]])).tolist() == [[0, 1], [1, 0]]


def test_bernoulli_normal_multinomial():
    fg.manual_seed(0)
    assert fg.bernoulli(fg.full((5,), 1.0)).tolist() == [1.0] * 5
    assert fg.bernoulli(fg.zeros(3, dtype=fg.float64)).dtype == fg.float64
    assert abs(fg.bernoulli(fg.full((20000,), 0.3)).mean().item() - 0.3) < 0.02
    z = fg.normal(3.0, 2.0, size=(50000,))
    assert (
        z.shape == (50000,) and abs(z.mean().item() - 3) < 0.05 and abs(z.std().item() - 2) < 0.05
    )
    assert fg.normal(fg.ones(3), fg.zeros(3)).tolist() == [1.0, 1.0, 1.0]
    assert fg.normal(2.0, fg.zeros(4)).tolist() == [2.0] * 4
    assert fg.multinomial(fg.tensor([0.0, 1.0, 0.0]), 4, replacement=True).tolist() == [1] * 4
    assert sorted(fg.multinomial(fg.tensor([1.0, 1.0, 1.0]), 3).tolist()) == [0, 1, 2]
    assert fg.multinomial(fg.tensor([[0.0, 1.0], [1.0, 0.0]]), 1).tolist() == [[1], [0]]
    with pytest.raises(RuntimeError):
        fg.multinomial(fg.tensor([1.0, 1.0]), 3)


def test_rng_state_and_initial_seed():
    fg.manual_seed(5)
    assert fg.initial_seed() == 5
    state = fg.get_rng_state()
    a = fg.rand(3).tolist()
    fg.set_rng_state(state)
    assert fg.rand(3).tolist() == a


def test_linalg_norms():
    assert fg.linalg.norm(fg.tensor([3.0, 4.0])).item() == 5.0
    assert fg.linalg.norm(fg.tensor([[3.0, 4.0], [1.0, 2.0]]), dim=1).tolist() == pytest.approx(
        [5.0, 5**0.5]
    )
    assert fg.linalg.norm(fg.tensor([[3.0, -4.0], [1.0, 2.0]]), ord=1, dim=1).tolist() == [7.0, 3.0]
    assert fg.linalg.norm(fg.tensor([3.0, -4.0]), ord=float("inf")).item() == 4.0
    assert fg.linalg.vector_norm(fg.tensor([[3.0, -4.0]]), ord=1, dim=1).tolist() == [7.0]
    assert fg.linalg.matrix_norm(fg.ones(2, 2, 2)).tolist() == [2.0, 2.0]
    # the spectral norm: the largest singular value (LAPACK's, on the host)
    assert fg.linalg.norm(fg.tensor([[3.0, 0.0], [0.0, -4.0]]), ord=2).item() == 4.0


def test_grad_fn_type_is_named_as_torch():
    y = fg.ones(1, requires_grad=True) * 2
    assert type(y.grad_fn).__name__ == "MulBackward0"
    from fusegrad.tensor import GradFn

    assert isinstance(y.grad_fn, GradFn) and y.grad_fn.name() == "MulBackward0"


def test_cat_of_a_non_tensor_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="element 1 in argument 0, but got ndarray"):
        fg.cat([fg.ones(2), np.ones(2)])
    with pytest.raises(IndexError):  # still an IndexError for `except IndexError`
        fg.ones(2, 2).gather(1, fg.tensor([[0], [2]]))


def test_no_grad_as_a_decorator_without_the_call():
    @fg.no_grad
    def double(t):
        return t * 2

    x = fg.ones(1, requires_grad=True)
    assert not double(x).requires_grad and fg.is_grad_enabled()
    with fg.no_grad():
        with fg.enable_grad():
            assert (x * 2).requires_grad
        assert not (x * 2).requires_grad
    try:
        with fg.no_grad():
            raise KeyError
    except KeyError:
        pass
    assert fg.is_grad_enabled()
