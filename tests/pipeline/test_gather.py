"""GATHER and SCATTER_ADD, compiled, against the numpy reference evaluator.

Rows picked by data: any table shape, any index shape, int32 or int64
indices, repeated and out-of-range indices (a zero row; an add that is
dropped), tables and indices computed in the graph, one thread or several.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.ir import node as N
from fusegrad.ir.reference import evaluate
from fusegrad.nn import functional as F
from fusegrad.tensor import Tensor


def as_tensor(node) -> Tensor:
    return Tensor(node)


@st.composite
def gather_case(draw):
    rows = draw(st.integers(1, 9))
    rest = tuple(draw(st.lists(st.integers(1, 20), max_size=2)))
    index_shape = tuple(draw(st.lists(st.integers(1, 6), min_size=0, max_size=2)))
    seed = draw(st.integers(0, 2**31 - 1))
    dtype = draw(st.sampled_from([np.int32, np.int64]))
    computed = draw(st.booleans())
    return rows, rest, index_shape, seed, dtype, computed


@settings(max_examples=40, deadline=None)
@given(gather_case(), st.sampled_from([1, 2]))
def test_gather_and_scatter_add_match_the_reference(case, threads):
    rows, rest, index_shape, seed, dtype, computed = case
    rng = np.random.default_rng(seed)
    table = rng.standard_normal((rows,) + rest).astype(np.float32)
    index = rng.integers(-2, rows + 2, index_shape).astype(dtype)  # some outside the table
    values = rng.standard_normal(index_shape + rest).astype(np.float32)
    t, i, v = fg.tensor(table), fg.tensor(index), fg.tensor(values)
    if computed:  # a table and an index computed in the graph, not loaded
        t, i = t * 2.0 + 1.0, i + 1
    with fg.config.override(threads=threads):
        g = as_tensor(N.gather(t.node, i.node))
        s = as_tensor(N.scatter_add((v * 3.0).node, i.node, rows))
        got_g, got_s = g.numpy(), s.numpy()
    np.testing.assert_allclose(got_g, evaluate(g.node), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got_s, evaluate(s.node), rtol=1e-5, atol=1e-5)


def test_out_of_range_rows_read_zero_and_add_nothing():
    table = fg.tensor(np.arange(6, dtype=np.float32).reshape(3, 2))
    index = fg.tensor(np.array([2, -1, 3, 0]))
    assert as_tensor(N.gather(table.node, index.node)).tolist() == [
        [4.0, 5.0],
        [0.0, 0.0],
        [0.0, 0.0],
        [0.0, 1.0],
    ]
    values = fg.ones(4, 2)
    added = as_tensor(N.scatter_add(values.node, index.node, 3)).tolist()
    assert added == [[1.0, 1.0], [0.0, 0.0], [1.0, 1.0]]


def test_embedding_is_one_gather_kernel_and_its_gradient_a_scatter():
    rng = np.random.default_rng(0)
    weight = fg.tensor(rng.standard_normal((1000, 50)).astype(np.float32), requires_grad=True)
    ids = rng.integers(0, 1000, (8, 12))
    out = F.embedding(fg.tensor(ids), weight)
    (kernel,) = fg.kernels(out)
    assert kernel.name.startswith("e_gather") and kernel.flops == 0
    g = rng.standard_normal((8, 12, 50)).astype(np.float32)
    (out * fg.tensor(g)).sum().backward()
    names = [k.name for k in fg.kernels(weight.grad)]
    assert any(n.startswith("e_scatter_add") for n in names), names
    want = np.zeros((1000, 50), np.float32)
    np.add.at(want, ids.reshape(-1), g.reshape(-1, 50))
    np.testing.assert_allclose(weight.grad.numpy(), want, rtol=1e-5, atol=1e-5)


def test_embedding_padding_row_gets_no_gradient():
    weight = fg.tensor(np.ones((4, 3), np.float32), requires_grad=True)
    ids = fg.tensor(np.array([[0, 1, 1, 3]]))
    F.embedding(ids, weight, padding_idx=1).sum().backward()
    assert weight.grad.tolist() == [[1.0] * 3, [0.0] * 3, [0.0] * 3, [1.0] * 3]


def test_embedding_rejects_known_bad_indices():
    weight = fg.ones(4, 3)
    with pytest.raises(IndexError, match="index 4 is out of range"):
        F.embedding(fg.tensor(np.array([0, 4])), weight)
    with pytest.raises(TypeError, match="integer index"):
        F.embedding(fg.tensor([0.0, 1.0]), weight)
