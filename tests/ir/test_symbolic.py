"""Index expressions (fusegrad.ir.symbolic) against plain integer arithmetic.

Random expressions over a few small-range variables are simplified as they are
built; evaluating the simplified form at every assignment of the variables must
give what Python's own `+ * // %` give, and every `.min`/`.max` must bound the
values the expression (and each atom inside it) actually takes.
"""

from __future__ import annotations

import itertools
import pickle

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.ir.symbolic import FloorDiv, Lin, Mod, Var, lin
from fusegrad.pipeline.loopir import Load, Loop, Store

# ---------------------------------------------------------------- an independent evaluator


def evaluate(e, env: dict[str, int]) -> int:
    """The integer value of an expression or atom, with Python's floor semantics."""
    if isinstance(e, int):
        return e
    if isinstance(e, Var):
        return env[e.name]
    if isinstance(e, FloorDiv):
        return evaluate(e.x, env) // e.c
    if isinstance(e, Mod):
        return evaluate(e.x, env) % e.c
    if isinstance(e, Lin):
        return e.const + sum(c * evaluate(a, env) for a, c in e.terms)
    raise TypeError(e)


def atoms_of(e: Lin) -> list:
    """Every atom at any depth, walked here rather than trusting Lin.atoms()."""
    out = []
    for a, _ in e.terms:
        out.append(a)
        if isinstance(a, (FloorDiv, Mod)):
            out += atoms_of(a.x)
    return out


def has_divmod(e: Lin) -> bool:
    return any(isinstance(a, (FloorDiv, Mod)) for a in atoms_of(e))


# ---------------------------------------------------------------- random expression trees

NAMES = ("a", "b", "c")

leaves = st.one_of(
    st.sampled_from(NAMES).map(lambda n: ("var", n)),
    st.integers(-9, 9).map(lambda k: ("const", k)),
)


def _extend(children):
    return st.one_of(
        st.tuples(st.just("add"), children, children),
        st.tuples(st.just("sub"), children, children),
        st.tuples(st.just("mul"), children, st.integers(-6, 6)),
        st.tuples(st.just("div"), children, st.integers(1, 12)),
        st.tuples(st.just("mod"), children, st.integers(1, 12)),
    )


trees = st.recursive(leaves, _extend, max_leaves=10)


def build(tree, variables: dict[str, Var]):
    """The tree through fusegrad's operators (simplifying as it goes)."""
    kind = tree[0]
    if kind == "var":
        return lin(variables[tree[1]])
    if kind == "const":
        return lin(tree[1])
    x = build(tree[1], variables)
    if kind == "add":
        return x + build(tree[2], variables)
    if kind == "sub":
        return x - build(tree[2], variables)
    if kind == "mul":
        return x * tree[2]
    if kind == "div":
        return x // tree[2]
    return x % tree[2]


def plain(tree, env: dict[str, int]) -> int:
    """The tree in Python integer arithmetic: the oracle."""
    kind = tree[0]
    if kind == "var":
        return env[tree[1]]
    if kind == "const":
        return tree[1]
    x = plain(tree[1], env)
    if kind == "add":
        return x + plain(tree[2], env)
    if kind == "sub":
        return x - plain(tree[2], env)
    if kind == "mul":
        return x * tree[2]
    if kind == "div":
        return x // tree[2]
    return x % tree[2]


def ranges(lo_min: int):
    """Inclusive (min, max) for each variable; at most 7 values each."""
    one = st.tuples(st.integers(lo_min, 4), st.integers(0, 6)).map(lambda t: (t[0], t[0] + t[1]))
    return st.tuples(one, one, one)


def check_against_brute_force(tree, bounds) -> None:
    variables = {n: Var(n, lo, hi) for n, (lo, hi) in zip(NAMES, bounds)}
    e = build(tree, variables)
    assert isinstance(e, Lin)
    values = []
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds)):
        env = dict(zip(NAMES, point))
        want = plain(tree, env)
        got = evaluate(e, env)
        assert got == want, f"{e} at {env}: simplified gives {got}, Python gives {want}"
        for a in atoms_of(e):
            v = evaluate(a, env)
            assert a.min <= v <= a.max, f"atom {a} = {v} at {env}, outside [{a.min}, {a.max}]"
            if isinstance(a, (FloorDiv, Mod)):
                # the renderers divide truncating (sdiv, srem, C's / and %), which is floor
                # division only for arguments >= 0
                assert evaluate(a.x, env) >= 0, f"atom {a} divides a negative value at {env}"
        values.append(got)
    assert e.min <= min(values) and max(values) <= e.max, (
        f"{e}: takes [{min(values)}, {max(values)}], bounds say [{e.min}, {e.max}]"
    )


@settings(max_examples=400, deadline=None)
@given(trees, ranges(lo_min=0))
def test_simplified_expression_matches_python_on_loop_ranges(tree, bounds):
    check_against_brute_force(tree, bounds)


@settings(max_examples=300, deadline=None)
@given(trees, ranges(lo_min=-4))
def test_simplified_expression_matches_python_with_negative_values(tree, bounds):
    # padding shifts coordinates below zero before a reshape divides them
    check_against_brute_force(tree, bounds)


@settings(max_examples=200, deadline=None)
@given(trees, trees, ranges(lo_min=0))
def test_substitute_matches_evaluating_the_replacement(tree, replacement, bounds):
    variables = {n: Var(n, lo, hi) for n, (lo, hi) in zip(NAMES, bounds)}
    e = build(tree, variables)
    r = build(replacement, variables)
    # substituting b := r must equal evaluating e with b set to r's value; r's range
    # may differ from b's, so only compare at points where r lands inside b's range
    substituted = e.substitute({variables["b"]: r})
    for point in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds)):
        env = dict(zip(NAMES, point))
        rv = evaluate(r, env)
        if not bounds[1][0] <= rv <= bounds[1][1]:
            continue
        assert evaluate(substituted, env) == plain(tree, {**env, "b": rv})


@settings(max_examples=200, deadline=None)
@given(trees, ranges(lo_min=0))
def test_equal_expressions_compare_and_hash_equal(tree, bounds):
    variables = {n: Var(n, lo, hi) for n, (lo, hi) in zip(NAMES, bounds)}
    e1, e2 = build(tree, variables), build(tree, variables)
    assert e1 == e2 and hash(e1) == hash(e2)
    assert e1 + 0 == e1 and e1 * 1 == e1 and e1 - e1 == 0


@settings(max_examples=100, deadline=None)
@given(trees, ranges(lo_min=0))
def test_a_pickled_expression_keeps_no_hash_and_equals_a_fresh_one(tree, bounds):
    # an expression keeps its hash, bounds and text once computed; a copy read by another
    # process (the disk cache) must compute its own: string hashes differ per process
    variables = {n: Var(n, lo, hi) for n, (lo, hi) in zip(NAMES, bounds)}
    e = lin(build(tree, variables))
    hash(e), repr(e), e.min, e.max, [hash(a) for a, _ in e.terms]
    copy = pickle.loads(pickle.dumps(e))
    cached = ("_hash", "_repr", "_min", "_max")
    assert not any(k in vars(copy) for k in cached)
    assert all(k not in vars(a) for a, _ in copy.terms for k in cached)
    fresh = lin(build(tree, variables))
    assert copy == fresh and hash(copy) == hash(fresh) == hash(e) and repr(copy) == repr(e)
    assert (copy.min, copy.max) == (e.min, e.max)


# ---------------------------------------------------------------- specific identities


def test_merge_then_split_gives_back_the_variables():
    i, j = Var("i", 0, 3), Var("j", 0, 7)
    flat = i * 8 + j
    assert flat // 8 == lin(i)
    assert flat % 8 == lin(j)
    assert not has_divmod(flat // 8) and not has_divmod(flat % 8)


def test_split_then_merge_gives_back_the_variable():
    for lo in (0, -13):
        k = Var("k", lo, 63)
        e = (k // 4) * 4 + k % 4
        assert e == lin(k), e
        assert not has_divmod(e)


def test_splitting_by_a_stride_a_variable_cannot_reach_is_constant():
    i = Var("i", 0, 9)
    assert (i + 30) // 40 == 0
    assert (i + 30) % 40 == i + 30
    assert (i * 3) % 1 == 0


def test_floor_division_and_modulo_use_floor_semantics():
    k = Var("k", -8, -1)
    e = k // 4
    assert (e.min, e.max) == (-2, -1)
    assert [evaluate(k % 4, {"k": v}) for v in range(-8, 0)] == [v % 4 for v in range(-8, 0)]


def _split(flat: Lin, shape: tuple[int, ...]) -> list[Lin]:
    """Row-major coordinates of a flat index, as a RESHAPE's index map computes them."""
    out, stride = [], 1
    for s in reversed(shape):
        out.append(lin(0) if s == 1 else (flat // stride) % s)
        stride *= s
    return out[::-1]


def _flatten(coords: list[Lin], shape: tuple[int, ...]) -> Lin:
    flat, stride = lin(0), 1
    for c, s in reversed(list(zip(coords, shape))):
        flat = flat + c * stride
        stride *= s
    return flat


def test_split_into_two_levels_and_merge_folds():
    # (v // 2) % 2 and v % 2 are the two low digits of v: merged, they are v % 4
    v = Var("v", 0, 7)
    assert ((v // 2) % 2) * 2 + v % 2 == v % 4
    assert (v // 4) * 4 + ((v // 2) % 2) * 2 + v % 2 == lin(v)


def test_contiguous_reshape_chain_is_the_identity_index():
    """Flat index -> (2,3,4,5) -> flat -> (6,20) -> flat -> (4,30) -> flat is just v."""
    v = Var("v", 0, 119)
    flat = lin(v)
    for shape in [(2, 3, 4, 5), (6, 20), (4, 30), (120,), (2, 60)]:
        coords = _split(flat, shape)
        flat = _flatten(coords, shape)
        assert flat == lin(v), f"after reshape to {shape}: {flat}"
    assert not has_divmod(flat)


def _indices(body) -> list[Lin]:
    out = []
    for s in body:
        if isinstance(s, Loop):
            out += _indices(s.body)
        elif isinstance(s, (Load, Store)):
            out.append(s.index)
    return out


def test_contiguous_reshape_chain_loads_without_division():
    """A kernel reading a buffer through contiguous reshapes indexes it with no // or %."""
    a = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    x = fg.from_numpy(a)
    cases = [
        (x.reshape(6, 20) + 1, a.reshape(6, 20) + 1),
        (x.reshape(6, 20).reshape(4, 30).reshape(120) + 1, a.reshape(120) + 1),
        ((x.reshape(120) * 2).reshape(2, 60) + 1, (a.reshape(120) * 2).reshape(2, 60) + 1),
    ]
    for y, want in cases:
        (k,) = fg.kernels(y)
        np.testing.assert_array_equal(y.numpy(), want)
        for e in _indices(k.loop.body):
            assert not has_divmod(e), f"{k.name}: index {e} divides\n{k.loop_ir}"
