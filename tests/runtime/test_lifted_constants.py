"""Constants whose values change between graphs of one structure are read from buffers
(`Engine.lift_constants`): the graph's second value compiles a plan that serves every later
value, with the bits of a plan compiled for each value."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.runtime.engine import engine

SPECIAL = [0.5, 0.25, -0.0, 0.0, 1.0, -1.0, 3.0, 1e-30, float("inf"), float("-inf"), float("nan")]


@pytest.fixture
def lifting():
    """Constants lifted (the default); each test's graphs have shapes of their own, so no
    other test's family of graphs is met."""
    before = fg.config.lift_constants
    fg.config.lift_constants = True
    yield
    fg.config.lift_constants = before


def _each_value_compiled(f, values):
    before = fg.config.lift_constants
    fg.config.lift_constants = False
    try:
        return [f(v) for v in values]
    finally:
        fg.config.lift_constants = before


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_changing_constant_compiles_twice_and_keeps_its_bits(lifting, dtype):
    data = np.array([[1.5, -2.0, 0.0, -0.0, 7.25], [np.inf, -np.inf, np.nan, 1e-40, 3.0]] * 3)
    x = fg.tensor(data, dtype=getattr(fg, dtype))

    def f(v):
        return ((x * v + 1.0) / (x - v)).numpy().copy()

    first = engine.stats["scheduled"]
    got = [f(v) for v in SPECIAL]
    assert engine.stats["scheduled"] - first == 2  # the first value, then the lifted plan
    want = _each_value_compiled(f, SPECIAL)
    for v, g, w in zip(SPECIAL, got, want):
        # the same bits, NaN's sign apart (x * -1.0 is a negation where -1.0 is in the code)
        same = (g == w) | (np.isnan(g) & np.isnan(w))
        assert same.all() and _bits(np.where(np.isnan(g), 0, g)) == _bits(
            np.where(np.isnan(w), 0, w)
        ), v
    d = data.astype(dtype)
    with np.errstate(all="ignore"):
        np.testing.assert_allclose(got[0], (d * 0.5 + 1.0) / (d - 0.5), rtol=1e-6)


def test_gradients_through_a_lifted_constant_keep_their_signs(lifting):
    w = fg.tensor(np.linspace(-1.0, 1.0, 11, dtype=np.float32), requires_grad=True)
    for v in [2.0, -3.0, -0.0, 0.0, 0.5]:
        w.grad = None
        (w * v).sum().backward()
        g = w.grad.numpy()
        assert (g == v).all() and np.signbit(g).all() == np.signbit(v), v


def test_only_the_constant_that_changed_is_lifted(lifting):
    x = fg.tensor(np.arange(13, dtype=np.float32))
    before = set(engine._const_families)
    for v in [0.5, 0.75, 1.25]:
        y = (x * v + 2.5).numpy()
        np.testing.assert_array_equal(y, np.arange(13, dtype=np.float32) * np.float32(v) + 2.5)
    (family,) = [f for f in engine._const_families if f not in before]
    _, lifted = engine._const_families[family]
    assert len(lifted) == 1  # 2.5 stays in the code


def test_integer_constants_lift_and_16_bit_float_ones_stay_in_the_code(lifting):
    n = fg.tensor(np.array([-7, 0, 5, 2**40], dtype=np.int64))
    first = engine.stats["scheduled"]
    assert [(n * k + k).tolist() for k in (3, -5, 0, 7)] == [
        [int(v) * k + k for v in n.numpy()] for k in (3, -5, 0, 7)
    ]
    assert engine.stats["scheduled"] - first == 2
    # bfloat16: a kernel multiplies by the float32 value (not rounded to bfloat16), which a
    # bfloat16 buffer could not hold: each value compiles, and the bits are PyTorch's rule's
    h = fg.tensor([1.0, 3.0, -2.0, 7.0, 0.0, 0.5, -0.0], dtype=fg.bfloat16)
    first = engine.stats["scheduled"]
    got = [(h * v + 1).float().numpy() for v in (0.1, 0.3, 0.7)]
    assert engine.stats["scheduled"] - first == 3
    want = _each_value_compiled(lambda v: (h * v + 1).float().numpy(), (0.1, 0.3, 0.7))
    for g, w in zip(got, want):
        assert _bits(g) == _bits(w)
    assert got[1][1] == np.float32(1.8984375)  # 3 * 0.3 + 1 = 1.9, rounded once, at the store


def test_a_constant_root_stays_a_constant(lifting):
    for v in [1.5, -0.0, 4.0]:
        t = fg.full((3, 17), v)
        t.realize()
        assert t.numpy().tolist() == [[v] * 17] * 3 and np.signbit(t.numpy()).all() == np.signbit(v)


def test_a_hand_written_update_with_an_annealed_rate_compiles_twice(lifting):
    def train(lrs):
        fg.manual_seed(0)
        model = fg.nn.Linear(9, 4)
        x = fg.tensor(np.random.default_rng(0).standard_normal((6, 9)).astype(np.float32))
        for lr in lrs:
            loss = model(x).pow(2).mean()
            model.zero_grad()
            loss.backward()
            with fg.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-lr)
        return [p.detach().numpy().copy() for p in model.parameters()]

    lrs = [0.1 / (1 + k) for k in range(8)]
    first = engine.stats["scheduled"]
    got = train(lrs)
    assert engine.stats["scheduled"] - first <= 4  # (a value each, without lifting: 8+)
    want = _each_value_compiled(lambda _: train(lrs), [None])[0]
    for g, w in zip(got, want):
        assert _bits(g) == _bits(w)


def test_switched_off_each_value_compiles():
    before = fg.config.lift_constants
    fg.config.lift_constants = False
    try:
        x = fg.tensor(np.ones(19, dtype=np.float32))
        first = engine.stats["scheduled"]
        assert [(x * v).sum().item() for v in (1.0, 2.0, 3.0)] == [19.0, 38.0, 57.0]
        assert engine.stats["scheduled"] - first == 3
    finally:
        fg.config.lift_constants = before


def test_a_lifted_plan_s_kernels_still_name_the_user_s_line(lifting):
    x = fg.tensor(np.arange(23, dtype=np.float32))
    records = [fg.kernels((x * v).exp()) for v in (0.5, 0.25, 0.125)]  # LIFTED LINE
    line = next(
        i for i, text in enumerate(open(__file__).read().splitlines(), 1) if "# LIFTED LINE" in text
    )
    for recs in records:
        assert any(f"test_lifted_constants.py:{line}" in " ".join(r.lines) for r in recs), recs


def test_empty_and_0d_inputs_with_changing_constants(lifting):
    empty = fg.tensor(np.zeros((0, 29), dtype=np.float32))
    scalar = fg.tensor(np.float32(-2.0))
    for v in [0.5, -0.0, 3.0, float("inf")]:
        assert (empty * v + 1.0).sum(0).tolist() == [0.0] * 29
        got = (scalar * v - v).item()
        want = float(np.float32(-2.0) * np.float32(v) - np.float32(v))
        assert got == want or (np.isnan(got) and np.isnan(want)), v
    x = fg.tensor(np.float32(3.0), requires_grad=True)
    for v in [2.0, -0.0, -1.0]:
        x.grad = None
        (x * v).backward()
        assert x.grad.item() == v and np.signbit(x.grad.item()) == np.signbit(v)
