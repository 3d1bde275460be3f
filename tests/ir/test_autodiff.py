"""Every primitive's vector-Jacobian rule, checked at the IR level against central differences.

Each case builds a small graph from `fusegrad.ir.node` constructors over
float64 buffer leaves, differentiates `sum(out * w)` for a random weight `w`
with `fusegrad.ir.autodiff.gradients`, evaluates the gradient graph with the
numpy reference evaluator, and compares it with central differences of the
same graph, also evaluated by the reference. No compiler is involved: this is
the rule table alone. The gradient graphs are differentiated a second time
(Hessian-vector products), since higher-order derivatives run the rules on
graphs the rules built.

Ties: `MAX` and `REDUCE_MAX` split the gradient evenly between equal
candidates, as `torch.maximum` and `torch.amax` do. A central difference sees
one half at a two-way tie, so it is an oracle there; at a three-way tie it
still sees one half, so the even split (1/3 each) is checked by its closed form.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from fusegrad.ir import node as N
from fusegrad.ir.autodiff import VJP, gradients
from fusegrad.ir.dtypes import bool_, float32, float64, int64
from fusegrad.ir.macro import macro, register
from fusegrad.ir.node import toposort
from fusegrad.ir.ops import LEAF, Ops
from fusegrad.ir.reference import evaluate
from fusegrad.runtime.buffer import Buffer

EPS = 1e-6
ATOL = 1e-7
RTOL = 1e-6


def leaf(a, dtype=float64) -> N.Node:
    """A realized leaf holding a copy of `a`: what the frontend builds for a tensor's data."""
    a = np.asarray(a, dtype=dtype.np)
    return N.buffer(Buffer.from_numpy(a, dtype), a.shape, dtype)


def rng_for(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


# ---------------------------------------------------------------- the checks


def weight_for(out: N.Node, rng) -> np.ndarray:
    return rng.uniform(0.5, 1.5, size=out.shape)


def analytic(build, arrays, w) -> list[np.ndarray | None]:
    leaves = [leaf(a) for a in arrays]
    out = build(*leaves)
    grads = gradients(out, leaf(w), leaves)
    for g, x in zip(grads, leaves):
        assert g is None or (g.shape == x.shape and g.dtype is x.dtype), (g, x)
    return [None if g is None else evaluate(g) for g in grads]


def numeric(value, arrays, eps: float = EPS) -> list[np.ndarray]:
    """Central differences of the scalar `value(*arrays)`, one element at a time."""
    out = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a, dtype=np.float64)
        for idx in np.ndindex(a.shape):
            up = [x.copy() for x in arrays]
            down = [x.copy() for x in arrays]
            up[i][idx] += eps
            down[i][idx] -= eps
            g[idx] = (value(*up) - value(*down)) / (2 * eps)
        out.append(g)
    return out


def projected(build, w):
    """sum(build(*leaves) * w), evaluated by the reference: the function the rules differentiate."""
    return lambda *arrays: float((evaluate(build(*[leaf(a) for a in arrays])) * w).sum())


def assert_close(got, want, names="", atol=ATOL, rtol=RTOL):
    for i, (g, n) in enumerate(zip(got, want)):
        g = np.zeros_like(n) if g is None else g
        np.testing.assert_allclose(g, n, atol=atol, rtol=rtol, err_msg=f"{names} input {i}")


def ops_in(node: N.Node) -> set[Ops]:
    return {n.op for n in toposort([node])}


# ---------------------------------------------------------------- one case per primitive


def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, size=shape)


def away_from_zero(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def distinct(*shape):
    """Values at least 0.1 apart, so max and comparisons have no ties within EPS."""
    return lambda rng: (
        rng.permutation(np.arange(math.prod(shape), dtype=np.float64)).reshape(shape) * 0.1
        + rng.uniform(0, 0.01, size=shape)
    )


def cast_round_trip(x):
    return N.cast(N.cast(x, float32), float64)


MASK = np.array([[True, False, True], [False, False, True]])

# name -> (the op whose rule is under test, graph builder, input generators, central-difference eps)
ROWS = np.array([[2, 0, 2], [5, 3, -1]])  # row 2 twice; 5 and -1 are outside a 4-row table


def _reshaped_product(srcs, params):
    """A macro's expansion that reads its first source through a view folded into the
    source's own (reshape of a reshape): its gradient must still reach that source."""
    a, b = srcs
    return N.mul(N.reshape(a, b.shape), N.unary(Ops.EXP, b))


register("test_reshaped_product", _reshaped_product)


def reshaped_product_macro(a, b):
    return macro("test_reshaped_product", (N.reshape(a, (3, 2)), b), (), b.shape, b.dtype)


CASES = {
    "NEG": (Ops.NEG, lambda x: N.unary(Ops.NEG, x), [normal(2, 3)], EPS),
    "MACRO": (Ops.MACRO, reshaped_product_macro, [normal(2, 3), normal(2, 3)], EPS),
    "EXP": (Ops.EXP, lambda x: N.unary(Ops.EXP, x), [normal(2, 3)], EPS),
    "LOG": (Ops.LOG, lambda x: N.unary(Ops.LOG, x), [positive(2, 3)], EPS),
    "SIN": (Ops.SIN, lambda x: N.unary(Ops.SIN, x), [normal(2, 3)], EPS),
    "COS": (Ops.COS, lambda x: N.unary(Ops.COS, x), [normal(2, 3)], EPS),
    "SQRT": (Ops.SQRT, lambda x: N.unary(Ops.SQRT, x), [positive(2, 3)], EPS),
    "ERFC": (Ops.ERFC, lambda x: N.unary(Ops.ERFC, x), [normal(2, 3)], EPS),
    "RECIP": (Ops.RECIP, lambda x: N.unary(Ops.RECIP, x), [away_from_zero(2, 3)], EPS),
    # linear, so a large step is exact up to float32 rounding of the values
    "CAST": (Ops.CAST, cast_round_trip, [normal(2, 3)], 0.25),
    "ADD": (Ops.ADD, N.add, [normal(2, 3), normal(2, 3)], EPS),
    "MUL": (Ops.MUL, N.mul, [normal(2, 3), normal(2, 3)], EPS),
    "DIV": (
        Ops.DIV,
        lambda a, b: N.binary(Ops.DIV, a, b),
        [normal(2, 3), away_from_zero(2, 3)],
        EPS,
    ),
    "MAX": (Ops.MAX, lambda a, b: N.binary(Ops.MAX, a, b), [distinct(2, 3), distinct(2, 3)], EPS),
    # (quotients of a few units: none within EPS of the integers where it jumps)
    "FMOD": (
        Ops.FMOD,
        lambda a, b: N.binary(Ops.FMOD, a, b),
        [normal(2, 3), away_from_zero(2, 3)],
        EPS,
    ),
    # min(a, b) written as a select on a comparison: gradient flows through the branches only
    "CMPLT": (
        Ops.CMPLT,
        lambda a, b: N.where(N.binary(Ops.CMPLT, a, b), a, b),
        [distinct(2, 3), distinct(2, 3)],
        EPS,
    ),
    "CMPEQ": (
        Ops.CMPEQ,
        lambda a, b: N.where(N.binary(Ops.CMPEQ, a, b), N.mul(a, a), N.mul(a, b)),
        [distinct(2, 3), distinct(2, 3)],
        EPS,
    ),
    "WHERE": (
        Ops.WHERE,
        lambda a, b: N.where(leaf(MASK, bool_), N.mul(a, b), N.unary(Ops.EXP, b)),
        [normal(2, 3), normal(2, 3)],
        EPS,
    ),
    "SUM": (Ops.SUM, lambda x: N.reduce(Ops.SUM, x, (0, 2)), [normal(2, 3, 4)], EPS),
    "SUM_ALL": (Ops.SUM, lambda x: N.reduce(Ops.SUM, x, (0, 1, 2)), [normal(2, 3, 4)], EPS),
    "REDUCE_MAX": (
        Ops.REDUCE_MAX,
        lambda x: N.reduce(Ops.REDUCE_MAX, x, (1,)),
        [distinct(2, 3, 4)],
        EPS,
    ),
    "REDUCE_MAX_2_AXES": (
        Ops.REDUCE_MAX,
        lambda x: N.reduce(Ops.REDUCE_MAX, x, (0, 2)),
        [distinct(2, 3, 4)],
        EPS,
    ),
    "RESHAPE": (Ops.RESHAPE, lambda x: N.reshape(x, (4, 3, 2)), [normal(2, 3, 4)], EPS),
    "PERMUTE": (Ops.PERMUTE, lambda x: N.permute(x, (2, 0, 1)), [normal(2, 3, 4)], EPS),
    "EXPAND": (Ops.EXPAND, lambda x: N.expand(x, (2, 3, 4)), [normal(1, 3, 1)], EPS),
    "PAD": (Ops.PAD, lambda x: N.pad(x, ((1, 2), (0, 0), (3, 1))), [normal(2, 3, 4)], EPS),
    "SHRINK": (Ops.SHRINK, lambda x: N.shrink(x, ((1, 2), (0, 3), (1, 3))), [normal(2, 3, 4)], EPS),
    "FLIP": (Ops.FLIP, lambda x: N.flip(x, (0, 2)), [normal(2, 3, 4)], EPS),
    "CONTIGUOUS": (
        Ops.CONTIGUOUS,
        lambda x: N.contiguous(N.unary(Ops.SIN, N.permute(x, (1, 0)))),
        [normal(2, 3)],
        EPS,
    ),
    # rows picked by data (repeated and out-of-range indices too), and their transpose
    "GATHER": (
        Ops.GATHER,
        lambda x: N.gather(x, leaf(ROWS, int64)),
        [normal(4, 3)],
        EPS,
    ),
    "SCATTER_ADD": (
        Ops.SCATTER_ADD,
        lambda x: N.scatter_add(x, leaf(ROWS, int64), 4),
        [normal(2, 3, 3)],
        EPS,
    ),
    # views composed: each rule must hand the next one a gradient of the right shape
    "VIEW_CHAIN": (
        Ops.SHRINK,
        lambda x: N.flip(
            N.shrink(
                N.pad(N.permute(N.reshape(x, (3, 4, 2)), (1, 2, 0)), ((1, 0), (0, 2), (0, 0))),
                ((0, 4), (1, 4), (0, 3)),
            ),
            (1,),
        ),
        [normal(2, 3, 4)],
        EPS,
    ),
    # a value used twice by one node and by two paths: gradients must accumulate
    "SQUARE": (Ops.MUL, lambda x: N.mul(x, x), [normal(2, 3)], EPS),
    "DIAMOND": (
        Ops.MUL,
        lambda x: N.mul(N.unary(Ops.SIN, x), N.unary(Ops.EXP, x)),
        [normal(2, 3)],
        EPS,
    ),
    "BROADCAST_MUL": (
        Ops.EXPAND,
        lambda a, b: N.mul(N.expand(a, (2, 3)), N.expand(b, (2, 3))),
        [normal(2, 1), normal(1, 3)],
        EPS,
    ),
}


def inputs_for(name: str):
    rng = rng_for(name)
    _, build, gens, eps = CASES[name]
    arrays = [gen(rng) for gen in gens]
    return build, arrays, rng, eps


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_central_differences(name):
    op = CASES[name][0]
    build, arrays, rng, eps = inputs_for(name)
    out = build(*[leaf(a) for a in arrays])
    assert op in ops_in(out), f"{name}: the graph {out} does not contain {op}"
    w = weight_for(out, rng)
    got = analytic(build, arrays, w)
    assert all(g is not None for g in got), f"{name}: no gradient for some input"
    want = numeric(projected(build, w), arrays, eps)
    rtol = 1e-5 if op is Ops.CAST else RTOL  # float32 rounding of the values
    assert_close(got, want, name, rtol=rtol)


@pytest.mark.parametrize("name", sorted(CASES))
def test_second_order_rule_matches_central_differences_of_the_gradient(name):
    """d/dx <grad(x), v>: the gradient graph, built by the rules, differentiated again."""
    build, arrays, rng, eps = inputs_for(name)
    if eps != EPS:  # CAST: the gradient does not depend on x; the first-order test covers it
        eps = EPS
    w = weight_for(build(*[leaf(a) for a in arrays]), rng)
    vs = [rng.uniform(-1, 1, size=a.shape) for a in arrays]

    def first(leaves):
        return gradients(build(*leaves), leaf(w), leaves)

    def inner(*arrs) -> float:
        gs = first([leaf(a) for a in arrs])
        return float(sum((evaluate(g) * v).sum() for g, v in zip(gs, vs) if g is not None))

    leaves = [leaf(a) for a in arrays]
    got = [np.zeros_like(a) for a in arrays]
    for g, v in zip(first(leaves), vs):
        if g is None:
            continue
        for i, h in enumerate(gradients(g, leaf(v), leaves)):
            if h is not None:
                assert h.shape == arrays[i].shape
                got[i] += evaluate(h)
    want = numeric(inner, arrays, eps)
    assert_close(got, want, name, atol=1e-6, rtol=1e-5)


def test_every_primitive_has_a_rule_and_a_case():
    non_leaf = {op for op in Ops if op not in LEAF}
    assert set(VJP) == non_leaf, f"missing rules: {non_leaf - set(VJP)}"
    # DETACH and RAND: their own tests below
    covered = {CASES[name][0] for name in CASES} | {Ops.DETACH, Ops.RAND}
    assert covered >= non_leaf, f"ops without a test case: {non_leaf - covered}"


# ---------------------------------------------------------------- rules with no central difference


def test_rand_passes_no_gradient_to_its_key_but_scales_its_user():
    from fusegrad.ir.dtypes import int32

    key = N.const(12345, (), int32)
    a = np.array([[0.5, -1.5, 2.0]])
    x = leaf(a)
    r = N.rand(key, a.shape, x.dtype)
    (g,) = gradients(N.mul(r, x), leaf(np.ones(a.shape)), [x])
    np.testing.assert_allclose(evaluate(g), evaluate(r))  # d(r * x)/dx = r
    assert VJP[Ops.RAND](r, leaf(np.ones(a.shape))) == (None,)


def test_detach_stops_the_gradient():
    a = np.array([[0.5, -1.5, 2.0]])
    x = leaf(a)
    out = N.mul(N.detach(x), x)
    (g,) = gradients(out, leaf(np.ones(a.shape)), [x])
    # d/dx [stop(x) * x] = stop(x), not 2x
    np.testing.assert_allclose(evaluate(g), a)
    assert gradients(N.detach(x), leaf(np.ones(a.shape)), [x]) == [None]
    assert VJP[Ops.DETACH](N.detach(x), leaf(np.ones(a.shape))) == (None,)


@pytest.mark.parametrize("op", [Ops.CMPLT, Ops.CMPEQ])
def test_comparisons_pass_no_gradient(op):
    a, b = leaf([1.0, 2.0, 3.0]), leaf([3.0, 2.0, 1.0])
    cmp = N.binary(op, a, b)
    assert gradients(cmp, N.const(1.0, cmp.shape, float64), [a, b]) == [None, None]


def test_where_passes_no_gradient_to_its_condition():
    x = leaf([1.0, -2.0, 3.0])
    cond = N.binary(Ops.CMPLT, x, N.const(0.0, (3,), float64))
    out = N.where(cond, N.const(1.0, (3,), float64), N.const(2.0, (3,), float64))
    assert gradients(out, leaf(np.ones(3)), [x]) == [None]


def test_cast_to_an_integer_passes_no_gradient():
    x = leaf([1.25, -2.5, 3.75])
    out = N.mul(N.cast(N.cast(x, int64), float64), leaf([1.0, 2.0, 3.0]))
    assert gradients(out, leaf(np.ones(3)), [x]) == [None]


def test_cast_gradient_has_the_sources_dtype():
    x = leaf([1.25, -2.5, 3.75])
    out = N.cast(x, float32)
    (g,) = gradients(out, N.const(2.0, (3,), float32), [x])
    assert g.dtype is float64
    np.testing.assert_array_equal(evaluate(g), [2.0, 2.0, 2.0])


def test_unreached_target_has_no_gradient():
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    assert gradients(N.unary(Ops.EXP, x), leaf(np.ones(2)), [x, y])[1] is None


def test_root_gradient_weights_the_result():
    x = leaf([1.0, 2.0, 3.0])
    (g,) = gradients(N.mul(x, x), leaf([1.0, 10.0, 100.0]), [x])
    np.testing.assert_allclose(evaluate(g), [2.0, 40.0, 600.0])


# ---------------------------------------------------------------- ties split evenly


def test_max_splits_ties_evenly():
    a = np.array([1.0, 2.0, 3.0, 2.0, -1.0])
    b = np.array([1.0, 0.0, 3.0, 5.0, -1.0])
    w = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    build = lambda x, y: N.binary(Ops.MAX, x, y)  # noqa: E731
    ga, gb = analytic(build, [a, b], w)
    np.testing.assert_allclose(ga, w * [0.5, 1.0, 0.5, 0.0, 0.5])
    np.testing.assert_allclose(gb, w * [0.5, 0.0, 0.5, 1.0, 0.5])
    # a two-way tie is where a central difference sees one half too
    assert_close([ga, gb], numeric(projected(build, w), [a, b]), "MAX ties")


def test_max_of_a_value_with_itself_passes_the_whole_gradient():
    a = np.array([1.0, -2.0, 3.0])
    x = leaf(a)
    out = N.binary(Ops.MAX, x, x)
    assert out.srcs[0] is out.srcs[1]
    (g,) = gradients(out, leaf([1.0, 2.0, 3.0]), [x])
    np.testing.assert_allclose(evaluate(g), [1.0, 2.0, 3.0])


def test_reduce_max_splits_ties_evenly():
    a = np.array([[3.0, 1.0, 3.0, 3.0], [2.0, 5.0, 0.0, 5.0], [7.0, 1.0, 2.0, 3.0]])
    w = np.array([[6.0], [4.0], [1.0]])
    build = lambda x: N.reduce(Ops.REDUCE_MAX, x, (1,))  # noqa: E731
    (g,) = analytic(build, [a], w)
    want = (
        np.array(
            [[1 / 3, 0, 1 / 3, 1 / 3], [0, 1 / 2, 0, 1 / 2], [1, 0, 0, 0]],
        )
        * w
    )
    np.testing.assert_allclose(g, want)
    # rows with at most two tied maxima are also where a central difference is an oracle
    (n,) = numeric(projected(build, w), [a])
    np.testing.assert_allclose(g[1:], n[1:], atol=ATOL)


def test_reduce_max_splits_ties_across_several_axes():
    # the maximum over axes 0 and 2 of each of the 3 columns a[:, j, :]
    a = np.zeros((2, 3, 2))
    a[1, 0, 0] = a[0, 0, 1] = 4.0  # column 0: two maxima
    a[0, 1, 0], a[1, 1, 1] = 4.0, 1.0  # column 1: one maximum
    a[1, 2, 1] = 4.0  # column 2: one maximum
    (g,) = analytic(lambda x: N.reduce(Ops.REDUCE_MAX, x, (0, 2)), [a], np.ones((1, 3, 1)))
    want = np.zeros_like(a)
    want[0, 0, 1] = want[1, 0, 0] = 0.5  # column 0: two maxima of 4
    want[0, 1, 0] = 1.0  # column 1: one maximum
    want[1, 2, 1] = 1.0  # column 2: one maximum
    np.testing.assert_allclose(g, want)


def test_reduce_max_gradient_sums_to_the_output_gradient_under_ties():
    """Raising every tied element together raises the max by as much: the shares sum to one."""
    a = np.array([[2.0, 2.0, 2.0, 2.0, 1.0]])
    build = lambda x: N.reduce(Ops.REDUCE_MAX, x, (1,))  # noqa: E731
    (g,) = analytic(build, [a], np.ones((1, 1)))
    np.testing.assert_allclose(g, [[0.25, 0.25, 0.25, 0.25, 0.0]])
    tied = (a == 2.0).astype(np.float64)

    def along(t: float) -> float:
        return float(evaluate(build(leaf(a + t * tied))).sum())

    directional = (along(EPS) - along(-EPS)) / (2 * EPS)
    np.testing.assert_allclose((g * tied).sum(), directional, rtol=1e-9)
