"""One-element integer and bool graphs read by `item()` on the host (frontend/host_scalar.py).

Oracle: the same graph run as a plan's kernel (`realize()`, then its buffer's element);
both must give the same Python number, at the integer types' edges too.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad import host_scalar
from fusegrad.ir import reference
from fusegrad.ir.node import toposort
from fusegrad.ir.ops import Ops
from fusegrad.runtime.engine import engine

# on the CPU whatever the test device: numbers worked out in host memory, not a device's
pytestmark = pytest.mark.cpu_device

I64_MAX = np.iinfo(np.int64).max


def _row(values, dtype):
    """One element of a computed tensor, as iterating a batch of indices gives it."""
    return list(fg.tensor(np.array(values, dtype=dtype)))


CASES = [
    ("add", np.int64, [5, -3], lambda a, b: a + b + 64),
    ("wraps past int64's top", np.int64, [I64_MAX, 2], lambda a, b: a + b),
    ("negation of int64's least", np.int64, [-(2**63), 0], lambda a, b: -a),
    ("uint8 wraps", np.uint8, [250, 9], lambda a, b: a + b),
    ("int32 product wraps", np.int32, [70000, 70000], lambda a, b: a * b),
    ("int8 to int64", np.int8, [-128, 1], lambda a, b: (a - b).long()),
    ("int64 cast down to int32", np.int64, [2**40 + 5, 0], lambda a, b: a.int()),
    ("max", np.int64, [-7, -9], lambda a, b: fg.maximum(a, b)),
    ("comparison", np.int64, [3, 3], lambda a, b: a >= b),
    ("select", np.int64, [4, 11], lambda a, b: fg.where(a > b, a, b) * 2),
    ("bool and", np.bool_, [True, False], lambda a, b: a & b),
    ("bool or", np.bool_, [True, False], lambda a, b: a | ~b),
    ("bool to int", np.bool_, [True, True], lambda a, b: a.long() + b.long()),
    ("zero", np.int64, [0, 0], lambda a, b: a * b - b),
]


@pytest.mark.parametrize(("name", "dtype", "values", "expr"), CASES, ids=[c[0] for c in CASES])
def test_the_host_gives_the_kernels_number(name, dtype, values, expr):
    a, b = _row(values, dtype)
    on_host = expr(a, b)
    assert host_scalar.value(on_host.node) is not None, "not computed on the host"
    got = on_host.item()
    in_kernel = expr(a, b).realize().item()
    assert type(got) is type(in_kernel) and got == in_kernel, (got, in_kernel)


def test_indexing_with_tensor_arithmetic_runs_no_kernel():
    """nanoGPT's `data[i + 1 : i + 1 + n]` over a `randint` draw."""
    data = np.arange(1000, dtype=np.uint16)
    ix = fg.randint(900, (6,))
    ix.realize()
    before = dict(engine.stats)
    rows = [data[i + 1 : i + 1 + 64] for i in ix]
    assert [int(r[0]) for r in rows] == [int(i) + 1 for i in ix.tolist()]
    assert all(len(r) == 64 for r in rows)
    assert engine.stats["schedule_hits"] == before["schedule_hits"]
    assert engine.stats["scheduled"] == before["scheduled"]


@pytest.mark.parametrize(
    "expr",
    [
        lambda i: (i * 1.5).long(),  # a float inside
        lambda i: i // 2,  # a division: the kernel's path
        lambda i: i.float() + 1,  # a float result
        lambda i: (fg.arange(5) + i).sum(),  # a reduction
        lambda i: fg.randint(5, ()) + i,  # random numbers
    ],
)
def test_floats_divisions_reductions_and_random_numbers_run_as_plans(expr):
    (i,) = _row([7], np.int64)
    t = expr(i)
    assert host_scalar.value(t.node) is None
    assert isinstance(t.item(), (int, float))  # (its plan's)


def test_a_computed_value_inside_is_read_not_recomputed():
    (i,) = _row([7], np.int64)
    mid = (i + 1).realize()  # a value in host memory, not a buffer node's
    assert host_scalar.value((mid * 3).node) == 24
    big = (fg.arange(100_000) + 0).realize()
    column = big.reshape(1000, 100)[:, 5]  # (a strided view: its whole buffer is the leaf)
    assert host_scalar.value((column[3] + 1).node) is None  # (bigger than it reads)
    assert (column[3] + 1).item() == 306


def test_a_value_that_needs_its_gradient_is_left_alone():
    w = fg.tensor([2.0], requires_grad=True)
    assert host_scalar.value((w * 2).node) is None
    assert host_scalar.value((w.detach().long() + 1).node) is None  # (a float cast inside)


_DTYPES = [np.int8, np.uint8, np.int32, np.int64, np.bool_]


def _reference(node):
    """The reference evaluator's number for one-element `node` (`ir/reference.py`)."""
    return reference.evaluate(node).astype(node.dtype.np).reshape(()).item()


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(_DTYPES),
    seed=st.integers(0, 2**16),
    view=st.sampled_from(["row", "flip", "permute", "reshape", "expand"]),
    ops=st.lists(
        st.sampled_from(["add", "mul", "neg", "max", "lt", "eq", "where", "cast"]), max_size=4
    ),  # fmt: skip
)
def test_one_element_in_python_ints_is_the_reference_and_the_kernels_number(dtype, seed, view, ops):
    """The element worked out in Python ints against the reference evaluator's number and
    the kernel's: views
    of a host buffer (rows, flips, permutations, reshapes, broadcasts), then integer and
    bool ops, at the types' edges (values drawn over each type's whole range)."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype) if dtype is not np.bool_ else None
    values = (
        rng.integers(0, 2, (3, 4)).astype(np.bool_)
        if info is None
        else rng.integers(info.min, info.max, (3, 4), endpoint=True, dtype=dtype)
    )
    t = fg.tensor(values)
    i, j = int(rng.integers(0, 3)), int(rng.integers(0, 4))
    x = {
        "row": lambda: list(t)[i][j],
        "flip": lambda: t.flip(0)[i, j],
        "permute": lambda: t.permute(1, 0)[j, i],
        "reshape": lambda: t.reshape(12)[i * 4 + j],
        "expand": lambda: t[i : i + 1, j : j + 1].expand(2, 3)[1, 2],
    }[view]()
    other = fg.tensor(values[(i + 1) % 3, (j + 2) % 4])  # a 0-d buffer
    for op in ops:
        if op == "add":
            x = x + other
        elif op == "mul":
            x = x * other
        elif op == "neg":
            x = ~x if x.dtype == fg.bool else -x
        elif op == "max":
            x = fg.maximum(x, other.to(x.dtype))
        elif op == "lt":
            x = x < other.to(x.dtype)
        elif op == "eq":
            x = x == other.to(x.dtype)
        elif op == "where":
            x = fg.where(x > 0, x, other.to(x.dtype))
        elif op == "cast":
            x = x.to(fg.int16 if x.dtype != fg.int16 else fg.int64)
    if x.node.op is Ops.CONST:  # (folded to a literal: nothing to read)
        return
    got = host_scalar.value(x.node)
    want = _reference(x.node)
    in_kernel = (x + fg.zeros((), dtype=x.dtype)).realize().item()
    if got is None:  # refused: only past the host's bound (each node read at one element)
        assert len(toposort([x.node])) > host_scalar.MAX_NODES, "not computed on the host"
        got = want
    assert type(got) is type(want) and got == want == in_kernel, (got, want, in_kernel)
