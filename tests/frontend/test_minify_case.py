"""The minifier's cases: recorded from nodes, rebuilt on fresh buffers, checked against the
reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir import node as N
from fusegrad.ir.ops import Ops
from fusegrad.minify_case import Entry, build, check, failure_of, mismatch, record


def test_check_names_the_outputs_that_differ():
    x = fg.tensor([1.0, 2.0, 3.0])
    assert check([x * 2, (x * 2).exp()]) == []
    assert mismatch(0, np.array([1.0, 2.0]), np.array([1.0, 2.5])).startswith(
        "output 0: 1 of 2 elements differ"
    )
    assert mismatch(0, np.array([1.0, np.nan]), np.array([1.0, np.nan])) is None


def test_a_case_rebuilds_on_fresh_buffers_and_drops_what_no_output_reads():
    x = fg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3)).node
    unread = N.unary(Ops.EXP, x)
    case = record(
        [N.reduce(Ops.SUM, N.mul(x, x), (1,)), unread],
        lambda n: n.op is Ops.BUFFER,
        lambda n: n.arg.numpy(),
    )
    assert case.ops() == ["MUL", "SUM", "EXP"]
    case.roots = case.roots[:1]
    built = build(case)
    (x2,) = [n for n in N.toposort(built.roots) if n.op is Ops.BUFFER]
    assert x2 is not x and built.case().ops() == ["MUL", "SUM"]
    np.testing.assert_array_equal(built.values[id(x2)], x.arg.numpy().reshape(2, 3))
    assert failure_of(case) is None  # nothing is wrong with it here


def test_a_graph_the_constructors_refuse_does_not_build():
    x = fg.tensor(np.ones((2, 3), dtype=np.float32)).node
    case = record([N.reshape(x, (3, 2))], lambda n: n.op is Ops.BUFFER, lambda n: n.arg.numpy())
    case.entries[0] = Entry(Ops.BUFFER, (), None, (2, 2), x.dtype, "cpu")
    case.values[0] = np.ones((2, 2), dtype=np.float32)
    with pytest.raises(AssertionError, match="reshape"):
        build(case)  # 4 elements cannot be reshaped to (3, 2)
    assert failure_of(case) is None  # so it is no candidate
