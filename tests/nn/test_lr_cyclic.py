"""CyclicLR against torch 2.14.1: its lr and momentum (or beta1) sequences in every mode
(torch's values as literals, compared exactly: the same float arithmetic in the same
order), argument errors, state_dict, and training with it (momentum cycled as data, so
the cached step compiles nothing new)."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from _optim_problem import STEPS, flat, loss_of, make_params

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.optim import lr_scheduler as L
from fusegrad.pipeline import compiler
from fusegrad.runtime.engine import stats

# torch 2.14.1: (lr, momentum or beta1) after the constructor and after each of 15 steps
CYCLIC_TRIANGULAR = (
    [
        0.1,
        0.3999999999999999,
        0.6999999999999998,
        0.9999999999999998,
        0.5499999999999999,
        0.1,
        0.40000000000000024,
        0.6999999999999998,
        0.9999999999999998,
        0.5500000000000004,
        0.1,
        0.40000000000000024,
        0.6999999999999998,
        0.9999999999999998,
        0.5500000000000004,
        0.1,
    ],
    [
        0.9,
        0.8666666666666667,
        0.8333333333333334,
        0.8,
        0.8500000000000001,
        0.9,
        0.8666666666666667,
        0.8333333333333334,
        0.8,
        0.85,
        0.9,
        0.8666666666666667,
        0.8333333333333334,
        0.8,
        0.85,
        0.9,
    ],
)
CYCLIC_TRIANGULAR2 = (
    [
        0.1,
        0.55,
        1.0,
        0.55,
        0.1,
        0.325,
        0.55,
        0.325,
        0.1,
        0.21250000000000002,
        0.325,
        0.21250000000000002,
        0.1,
        0.15625,
        0.21250000000000002,
        0.15625,
    ],
    [
        0.95,
        0.825,
        0.7,
        0.825,
        0.95,
        0.8875,
        0.825,
        0.8875,
        0.95,
        0.91875,
        0.8875,
        0.91875,
        0.95,
        0.934375,
        0.91875,
        0.934375,
    ],
)
CYCLIC_EXP_RANGE = (
    [
        0.01,
        0.030249999999999992,
        0.04644999999999999,
        0.059207500000000024,
        0.06904900000000001,
        0.045429399999999995,
        0.025943229999999998,
        0.01,
        0.019685512225,
        0.027433922005,
        0.03353579470675002,
        0.038242953648099993,
        0.026945772188859997,
        0.017625597484987002,
        0.01,
        0.014632550472129604,
    ],
    [
        0.9,
        0.8775000000000001,
        0.8595,
        0.845325,
        0.8343900000000001,
        0.860634,
        0.8822853,
        0.9,
        0.88923831975,
        0.8806289755500001,
        0.8738491169925,
        0.8686189403910001,
        0.8811713642346001,
        0.89152711390557,
        0.9,
        0.8948527216976337,
    ],
)
CYCLIC_SCALE_FN = (
    [
        [0.1, 0.2],
        [0.2500000000000001, 0.23333333333333336],
        [0.24999999999999997, 0.23333333333333334],
        [0.21250000000000002, 0.225],
        [0.1375, 0.20833333333333334],
        [0.109375, 0.20208333333333334],
        [0.1, 0.2],
        [0.10234375000000001, 0.20052083333333334],
        [0.10234375, 0.20052083333333334],
        [0.1017578125, 0.20039062500000002],
        [0.1005859375, 0.20013020833333334],
        [0.10014648437500001, 0.20003255208333334],
        [0.1, 0.2],
        [0.10003662109375, 0.20000813802083334],
        [0.10003662109375, 0.20000813802083334],
        [0.10002746582031251, 0.200006103515625],
    ],
    [
        [0.9, 0.8],
        [0.85, 0.7833333333333333],
        [0.85, 0.7833333333333333],
        [0.8625, 0.7875000000000001],
        [0.8875000000000001, 0.7958333333333334],
        [0.896875, 0.7989583333333333],
        [0.9, 0.8],
        [0.8992187500000001, 0.7997395833333334],
        [0.8992187500000001, 0.7997395833333334],
        [0.8994140625, 0.7998046875],
        [0.8998046875, 0.7999348958333333],
        [0.8999511718750001, 0.7999837239583334],
        [0.9, 0.8],
        [0.89998779296875, 0.7999959309895833],
        [0.89998779296875, 0.7999959309895833],
        [0.8999908447265625, 0.7999969482421876],
    ],
)
CYCLIC_NO_MOMENTUM = (
    [0.1, 0.2, 0.3, 0.2, 0.1, 0.2, 0.3, 0.2, 0.1, 0.2, 0.3, 0.2, 0.1, 0.2, 0.3, 0.2],
    [
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
        None,
    ],
)
CYCLIC_STATE_KEYS = [
    "_last_lr",
    "_scale_fn_custom",
    "_step_count",
    "base_lrs",
    "base_momentums",
    "cycle_momentum",
    "gamma",
    "last_epoch",
    "max_lrs",
    "max_momentums",
    "mode",
    "scale_mode",
    "step_ratio",
    "total_size",
    "use_beta1",
]
# the problem of tests/_optim_problem.py trained 8 steps, the schedule stepped after each
SGD_CYCLIC = [
    [0.044828143, 0.663177609, 0.128703892],
    [-1.0647558, -0.201193482, -2.17838264, 1.33247435],
    [0, -1.88534832, 0.621383786, -0.913484752],
]
ADAM_CYCLIC = [
    [0.187498808, -0.933850586, 1.67928267],
    [1.18103361, -0.443713993, -0.0686997473, -1.68203223],
    [0, 2.68117881, -0.186985821, 0.680719137],
]

N = 15


def make_opt(cls=optim.SGD, groups=1, **kwargs):
    return cls([{"params": [nn.Parameter(fg.zeros(1))]} for _ in range(groups)], **kwargs)


def momentum_of(opt) -> list:
    return [g["betas"][0] if "betas" in g else g.get("momentum") for g in opt.param_groups]


def run(opt, sched, steps=N):
    """(lrs, momenta) as the torch side recorded them: after the constructor, then after
    each optimizer step and scheduler step."""
    lrs, momenta = [list(sched.get_last_lr())], [momentum_of(opt)]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(list(sched.get_last_lr()))
        momenta.append(momentum_of(opt))
    if len(opt.param_groups) == 1:
        return [v for (v,) in lrs], [v for (v,) in momenta]
    return lrs, momenta


@pytest.mark.parametrize(
    "make, want",
    [
        (
            lambda o: L.CyclicLR(o, 0.1, 1.0, step_size_up=3, step_size_down=2),
            CYCLIC_TRIANGULAR,
        ),
        (
            lambda o: L.CyclicLR(
                o, 0.1, 1.0, 2, mode="triangular2", base_momentum=0.7, max_momentum=0.95
            ),
            CYCLIC_TRIANGULAR2,
        ),
    ],
    ids=["triangular", "triangular2"],
)
def test_sgd_momentum_cycles_as_torchs(make, want):
    opt = make_opt(lr=0.5, momentum=0.9)
    assert run(opt, make(opt)) == want


def test_exp_range_cycles_adams_beta1():
    opt = make_opt(optim.Adam, lr=0.5)
    sched = L.CyclicLR(
        opt, 0.01, 0.1, step_size_up=4, step_size_down=3, mode="exp_range", gamma=0.9
    )
    assert run(opt, sched) == CYCLIC_EXP_RANGE
    assert opt.param_groups[0]["betas"][1] == 0.999  # beta2 left alone


def test_a_scale_fn_per_iteration_and_values_per_group():
    opt = make_opt(groups=2, lr=0.5, momentum=0.5)
    sched = L.CyclicLR(
        opt,
        [0.1, 0.2],
        [1.0, 0.4],
        step_size_up=3,
        scale_fn=lambda x: 0.5**x,
        scale_mode="iterations",
        base_momentum=[0.6, 0.7],
        max_momentum=[0.9, 0.8],
    )
    assert run(opt, sched) == CYCLIC_SCALE_FN
    assert [g["max_momentum"] for g in opt.param_groups] == [0.9, 0.8]
    assert [g["base_momentum"] for g in opt.param_groups] == [0.6, 0.7]


def test_without_cycle_momentum_any_optimizer_will_do():
    opt = make_opt(optim.Adagrad, lr=0.5)
    lrs, _ = run(opt, L.CyclicLR(opt, 0.1, 0.3, step_size_up=2, cycle_momentum=False))
    assert lrs == CYCLIC_NO_MOMENTUM[0]
    assert "max_momentum" not in opt.param_groups[0]


def test_bad_arguments_raise_torchs_errors():
    with pytest.raises(ValueError, match="^mode is invalid and scale_fn is None$"):
        L.CyclicLR(make_opt(momentum=0.9), 0.1, 1.0, mode="sawtooth")
    with pytest.raises(ValueError, match="must support momentum or beta1"):
        L.CyclicLR(make_opt(optim.Adagrad), 0.1, 1.0)
    with pytest.raises(
        ValueError,
        match=r"^max_lr must have the same length as optimizer.param_groups. max_lr has 3 "
        r"values, param_groups has 2.$",
    ):
        L.CyclicLR(make_opt(groups=2, momentum=0.9), 0.1, [1.0, 1.0, 1.0])
    with pytest.raises(TypeError, match="is not an Optimizer"):
        L.CyclicLR(object(), 0.1, 1.0)


class Halving:
    """A callable scale function with state (its __dict__ is saved, as torch saves it)."""

    def __init__(self):
        self.base = 0.5

    def __call__(self, x):
        return self.base**x


def test_state_dict_keys_and_resuming_continues_the_cycle():
    opt = make_opt(lr=0.5, momentum=0.9)
    sched = L.CyclicLR(opt, 0.1, 1.0, step_size_up=3, step_size_down=2)
    run(opt, sched, steps=7)
    saved = sched.state_dict()
    assert sorted(saved) == CYCLIC_STATE_KEYS and saved["_scale_fn_custom"] is None
    fresh_opt = make_opt(lr=0.5, momentum=0.9)
    fresh = L.CyclicLR(fresh_opt, 0.1, 1.0, step_size_up=3, step_size_down=2)
    fresh.load_state_dict(saved)
    rest = run(fresh_opt, fresh, steps=N - 7)
    assert rest[0][1:] == CYCLIC_TRIANGULAR[0][8:] and rest[1][1:] == CYCLIC_TRIANGULAR[1][8:]
    # a callable object's state travels; a function's does not (torch's rule)
    fn = Halving()
    sched = L.CyclicLR(make_opt(momentum=0.9), 0.1, 1.0, scale_fn=fn)
    fn.base = 0.25
    saved = sched.state_dict()
    assert saved["_scale_fn_custom"] == {"base": 0.25}
    other = Halving()
    L.CyclicLR(make_opt(momentum=0.9), 0.1, 1.0, scale_fn=other).load_state_dict(saved)
    assert other.base == 0.25


@pytest.mark.parametrize(
    "cls, kwargs, sched_kwargs, want",
    [
        (optim.SGD, dict(lr=0.1, momentum=0.9), dict(step_size_down=3), SGD_CYCLIC),
        (
            optim.Adam,
            dict(lr=0.1),
            dict(mode="triangular2", base_momentum=0.8, max_momentum=0.95),
            ADAM_CYCLIC,
        ),
    ],
    ids=["sgd_momentum", "adam_beta1"],
)
def test_training_with_cycled_lr_and_momentum_is_torchs_and_compiles_once(
    cls, kwargs, sched_kwargs, want
):
    # a lazy tensor an earlier test left in a reference cycle (a caught error's traceback)
    # is alive until collected, and the first step computes it with the step (carried.py):
    # that step's plan would then differ from the next one's
    gc.collect()
    params = make_params()
    opt = cls(params, **kwargs)
    sched = L.CyclicLR(opt, 0.01, 0.1, step_size_up=2, **sched_kwargs)
    for step in range(STEPS):
        before = stats["scheduled"], compiler.stats["compiled"]
        opt.zero_grad()
        loss_of(params).backward()
        opt.step()
        sched.step()
        if step >= 1:
            assert (stats["scheduled"], compiler.stats["compiled"]) == before, f"step {step}"
    for got, expected in zip(flat(params), want):
        np.testing.assert_allclose(got, expected, rtol=2e-6, atol=1e-7)
