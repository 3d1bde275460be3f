"""test_autodiff_random.py's random programs in float16 and bfloat16, against float64.

Each program is drawn once over float64 leaves (the reference) and replayed over 16-bit
leaves: the same hypothesis draws in the same order, and wherever the program looks at a
value to decide (a kink to stay away from, a value grown too large) the replay reads the
reference run's value, so both runs build the same program. The leaves hold the same
numbers in both runs (random values rounded to the 16-bit type), and so does the random
projection weight that turns the output into a scalar to differentiate.

fusegrad computes 16-bit values in float32 and rounds a kernel's outputs once, so each op
of the program adds a few units of roundoff u at most, relative to the magnitudes the
program handles: the 16-bit values and gradients must be the reference's within
K * u * depth, relative to each value and to the largest magnitude seen. Kinks are kept
GAP away, wide enough that 16-bit rounding cannot move a value across one (a comparison
flipped by rounding is a different function, not an error).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import test_autodiff_random as programs  # noqa: E402  (tests/frontend is on sys.path)
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import fusegrad as fg

UNIT_ROUNDOFF = {"float16": 2.0**-11, "bfloat16": 2.0**-9}
GAP = {"float16": 0.05, "bfloat16": 0.25}  # away from kinks, in units the values move by
MAX_ABS = 8.0  # 16-bit programs keep their values small, so the bounds stay informative
K = 8.0
# each program compiles kernels of its own: a few by default, more with every backend
WIDE = os.environ.get("FUSEGRAD_TEST_ALL_BACKENDS", "") not in ("", "0")
EXAMPLES, BACKEND_EXAMPLES = (80, 20) if WIDE else (15, 3)
# no shrinking: a 16-bit program's failure shrinks for minutes; its trace says what it was
SETTINGS = dict(programs.SETTINGS, phases=[Phase.explicit, Phase.reuse, Phase.generate])


def rounded(v: np.ndarray, dt: fg.dtype) -> np.ndarray:
    """v's values rounded to dt, as float64."""
    return fg.tensor(v, dtype=dt).float().numpy().astype(np.float64)


class Recording:
    """Hypothesis's draws and the program's value reads, kept for the replay."""

    def __init__(self, data):
        self.data, self.draws, self.values = data, [], []

    def draw(self, strategy, label=None):
        v = self.data.draw(strategy, label=label)
        self.draws.append(v)
        return v

    def value(self, t):
        v = programs.evaluate(t.node)
        self.values.append(v)
        return v


class Replay:
    """The recorded draws and values, returned in the order they were made."""

    def __init__(self, recording: Recording):
        self.draws, self.values = iter(recording.draws), iter(recording.values)

    def draw(self, strategy, label=None):
        return next(self.draws)

    def value(self, t):
        return next(self.values)


class HalfProgram(programs.Program):
    """A program whose leaves hold 16-bit values: as float64 (the reference) or as dt."""

    def __init__(self, source, values_dt: fg.dtype, dt: fg.dtype | None):
        super().__init__(source)
        self.values_dt, self.dt = values_dt, dt

    def constant(self, v: np.ndarray, requires_grad=False) -> fg.Tensor:
        v = rounded(v, self.values_dt)
        if self.dt is None:
            return fg.from_numpy(v, requires_grad=requires_grad)
        return fg.tensor(v, dtype=self.dt, requires_grad=requires_grad)

    def leaf(self, shape) -> fg.Tensor:
        t = self.constant(self.rng.uniform(-2, 2, size=tuple(shape)), requires_grad=True)
        self.leaves.append(t)
        return t


def build(source, dt_name: str, dt: fg.dtype | None):
    """The program drawn (or replayed) from `source`, its output and its leaves' gradients."""
    values_dt = getattr(fg, dt_name)
    p = HalfProgram(source, values_dt, dt)
    ndim = p.draw(st.integers(0, 3), label="ndim")
    shape = tuple(p.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    out = programs.grow(p, p.leaf(shape), p.draw(st.integers(1, 6), label="steps"))
    w = p.constant(p.rng.uniform(0.5, 1.5, size=out.shape))
    grads = fg.grad((out * w).sum(), p.leaves, allow_unused=True)
    return p, out, list(grads)


def check(data, dt_name: str):
    record = Recording(data)
    saved = programs.value, programs.GAP, programs.MAX_ABS
    programs.GAP, programs.MAX_ABS = GAP[dt_name], MAX_ABS
    try:
        programs.value = record.value
        ref, ref_out, ref_grads = build(record, dt_name, None)
        replay = Replay(record)
        programs.value = replay.value
        p, out, grads = build(replay, dt_name, getattr(fg, dt_name))
    finally:
        programs.value, programs.GAP, programs.MAX_ABS = saved
    assert p.trace == ref.trace, "the replay built another program"
    trace = " | ".join(p.trace)
    dt = getattr(fg, dt_name)
    assert out.dtype is dt, f"{out.dtype}: {trace}"
    bound = K * UNIT_ROUNDOFF[dt_name] * (len(p.trace) + 1)
    magnitude = max([1.0] + [float(np.abs(v).max()) for v in record.values if v.size])
    np.testing.assert_allclose(
        out.float().numpy(), ref_out.numpy(), rtol=bound, atol=bound * magnitude, err_msg=trace
    )
    for i, (g, r) in enumerate(zip(grads, ref_grads)):
        assert (g is None) == (r is None), f"leaf {i}: {trace}"
        if g is None:
            continue
        assert g.dtype is dt and g.shape == r.shape, f"leaf {i}: {g.dtype} {g.shape}: {trace}"
        want = r.numpy()
        scale = magnitude * max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(
            g.float().numpy(), want, rtol=2 * bound, atol=2 * bound * scale,
            err_msg=f"gradient of leaf {i}: {trace}",
        )  # fmt: skip


@pytest.mark.parametrize("dt_name", ["float16", "bfloat16"])
@settings(max_examples=EXAMPLES, **SETTINGS)
@given(data=st.data())
def test_random_programs_in_16_bits(dt_name, data):
    check(data, dt_name)


@pytest.mark.backend_slice
@pytest.mark.parametrize("dt_name", ["float16", "bfloat16"])
@settings(
    max_examples=BACKEND_EXAMPLES,
    **dict(SETTINGS, suppress_health_check=[*SETTINGS["suppress_health_check"],
                                            HealthCheck.function_scoped_fixture]),
)  # fmt: skip
@given(data=st.data())
def test_random_programs_in_16_bits_on_every_backend(backend, dt_name, data):
    check(data, dt_name)
