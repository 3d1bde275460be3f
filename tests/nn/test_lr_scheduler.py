"""PolynomialLR, MultiplicativeLR and ChainedScheduler against torch 2.14.1 (their lr
sequences as literals, compared exactly), their errors and state_dicts, and the module's
names against torch.optim.lr_scheduler's (the other schedules are tested in
tests/nn/test_training_utils.py, CyclicLR in tests/nn/test_lr_cyclic.py)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from _optim_problem import STEPS, flat, loss_of, make_params

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.optim import lr_scheduler as L

# torch 2.14.1: the lr after the constructor and after each of 15 steps (one row per step
# where there are two parameter groups); POLYNOMIAL_CLOSED: step(3), step(7), step(1)
POLYNOMIAL_POWER2 = [
    0.5,
    0.34722222222222227,
    0.2222222222222223,
    0.12500000000000003,
    0.05555555555555558,
    0.013888888888888886,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
]
POLYNOMIAL_DEFAULT = [
    0.5,
    0.4,
    0.3,
    0.2,
    0.09999999999999998,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
]
MULTIPLICATIVE = [
    [0.5, 0.5],
    [0.45, 0.49],
    [0.405, 0.4704],
    [0.36450000000000005, 0.44217599999999996],
    [0.32805000000000006, 0.40680192],
    [0.2952450000000001, 0.366121728],
    [0.2657205000000001, 0.32218712064],
    [0.23914845000000007, 0.2770809237504],
    [0.21523360500000008, 0.232747975950336],
    [0.19371024450000007, 0.19085334027927553],
    [0.17433922005000008, 0.15268267222342044],
    [0.15690529804500009, 0.11909248433426795],
    [0.14121476824050008, 0.09051028809404364],
    [0.12709329141645007, 0.06697761318959229],
    [0.11438396227480506, 0.04822388149650645],
    [0.10294556604732455, 0.033756717047554514],
]
CHAINED = [
    0.25,
    0.2134537420613656,
    0.181121506177483,
    0.30496257967167056,
    0.2541064373446687,
    0.2087697416114223,
    0.16805640019975443,
    0.1309870006573964,
    0.09625539436446776,
    0.061256557872810494,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
    0.0,
]
CHAINED_LINEAR_EXPONENTIAL = [
    0.125,
    0.20781249999999998,
    0.28203125,
    0.34830859375000006,
    0.4072531250000001,
    0.3868904687500001,
    0.36754594531250007,
    0.34916864804687503,
    0.33171021564453124,
    0.31512470486230465,
    0.2993684696191894,
    0.2844000461382299,
    0.2701800438313184,
    0.25667104163975246,
    0.24383748955776482,
    0.23164561507987658,
]
# SequentialLR(opt, [ChainedScheduler([LinearLR(opt, 0.25, total_iters=4), ExponentialLR(opt,
# 0.95)]), ConstantLR(opt, factor=0.5)], milestones=[4]) over 8 steps
SEQUENTIAL_CHAIN = [
    0.11875,
    0.19742187499999997,
    0.26792968749999996,
    0.3308931640624999,
    0.25,
    0.25,
    0.25,
    0.25,
    0.25,
]
POLYNOMIAL_CLOSED = [0.125, 0.0, 0.34722222222222227]
# the problem of tests/_optim_problem.py: NAdam(lr=0.1) under
# ChainedScheduler([LinearLR(o, 0.5, total_iters=3), PolynomialLR(o, total_iters=10)])
NADAM_CHAINED = [
    [0.198328301, -0.930192292, 1.65384114],
    [1.16575062, -0.465609848, -0.0822930187, -1.67129695],
    [0, 2.66614032, -0.193168402, 0.664368749],
]
# torch 2.14.1's torch.optim.lr_scheduler.__all__
TORCH_NAMES = [
    "LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
    "ExponentialLR", "SequentialLR", "CosineAnnealingLR", "ChainedScheduler",
    "ReduceLROnPlateau", "CyclicLR", "CosineAnnealingWarmRestarts", "OneCycleLR",
    "PolynomialLR", "LRScheduler",
]  # fmt: skip
N = 15


def make_opt(groups=1, lr=0.5, cls=optim.SGD):
    return cls([{"params": [nn.Parameter(fg.zeros(1))]} for _ in range(groups)], lr=lr)


def run(sched, steps=N):
    """The lrs as the torch side recorded them: after the constructor, then after each
    optimizer step and scheduler step (a list per step with several groups)."""
    opt = sched.optimizer
    lrs = [list(sched.get_last_lr())]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(list(sched.get_last_lr()))
    return [v for (v,) in lrs] if len(opt.param_groups) == 1 else lrs


def test_every_torch_scheduler_name_is_here():
    assert [n for n in TORCH_NAMES if not hasattr(L, n)] == []
    assert issubclass(L.CyclicLR, L.LRScheduler) and issubclass(L.PolynomialLR, L.LRScheduler)


def test_polynomial_decays_to_zero_as_torchs():
    assert run(L.PolynomialLR(make_opt(), total_iters=6, power=2.0)) == POLYNOMIAL_POWER2
    assert run(L.PolynomialLR(make_opt())) == POLYNOMIAL_DEFAULT


def test_polynomial_closed_form_through_step_epoch():
    sched = L.PolynomialLR(make_opt(), total_iters=6, power=2.0)
    sched.optimizer.step()
    got = []
    for epoch in (3, 7, 1):
        sched.step(epoch)
        got.append(sched.get_last_lr()[0])
    assert got == POLYNOMIAL_CLOSED


def test_multiplicative_multiplies_each_group_by_its_function():
    opt = make_opt(groups=2)
    assert run(L.MultiplicativeLR(opt, [lambda e: 0.9, lambda e: 1.0 - 0.02 * e])) == MULTIPLICATIVE


def test_multiplicative_refuses_what_torch_refuses():
    with pytest.raises(ValueError, match="^Expected 2 lr_lambdas, but got 1$"):
        L.MultiplicativeLR(make_opt(groups=2), [lambda e: 0.9])
    with pytest.raises(TypeError, match="^lr_lambda should be a function, but got float$"):
        L.MultiplicativeLR(make_opt(), 0.9)


class Decay:
    def __init__(self, rate):
        self.rate = rate

    def __call__(self, epoch):
        return self.rate


def test_multiplicative_state_dict_keeps_callable_objects_state():
    fn = Decay(0.5)
    sched = L.MultiplicativeLR(make_opt(), fn)
    run(sched, 2)
    fn.rate = 0.25
    saved = sched.state_dict()
    assert saved["lr_lambdas"] == [{"rate": 0.25}] and saved["last_epoch"] == 2
    other = Decay(0.5)
    fresh = L.MultiplicativeLR(make_opt(), other)
    fresh.load_state_dict(saved)
    assert other.rate == 0.25 and fresh.last_epoch == 2
    plain = L.MultiplicativeLR(make_opt(), lambda e: 0.5).state_dict()
    assert plain["lr_lambdas"] == [None]


def chain(opt):
    return L.ChainedScheduler(
        [
            L.ConstantLR(opt, factor=0.5, total_iters=3),
            L.ExponentialLR(opt, gamma=0.9),
            L.PolynomialLR(opt, total_iters=10, power=0.5),
        ]
    )


def test_chained_schedules_multiply_as_torchs():
    assert run(chain(make_opt())) == CHAINED
    opt = make_opt()
    sched = L.ChainedScheduler(
        [L.LinearLR(opt, start_factor=0.25, total_iters=4), L.ExponentialLR(opt, gamma=0.95)]
    )
    assert run(sched) == CHAINED_LINEAR_EXPONENTIAL


def test_chained_state_dict_round_trip_continues_identically():
    sched = chain(make_opt())
    run(sched, 5)
    saved = sched.state_dict()
    assert sorted(saved) == ["_last_lr", "_schedulers"] and len(saved["_schedulers"]) == 3
    opt = make_opt()
    fresh = chain(opt)
    fresh.load_state_dict(saved)
    opt.param_groups[0]["lr"] = fresh.get_last_lr()[0]
    assert run(fresh, N - 5)[1:] == CHAINED[6:]


def test_chained_refuses_what_torch_refuses():
    opt, other = make_opt(), make_opt()
    with pytest.raises(ValueError, match="expects at least one scheduler to be chained"):
        L.ChainedScheduler([])
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`.* at index 1"):
        L.ChainedScheduler([L.ExponentialLR(opt, 0.9), L.ReduceLROnPlateau(opt)])
    with pytest.raises(ValueError, match="expects all schedulers to belong to the same optimizer"):
        L.ChainedScheduler([L.ExponentialLR(opt, 0.9), L.ExponentialLR(other, 0.9)])
    with pytest.raises(TypeError, match="at index 1 should have `optimizer` as its attribute"):
        L.ChainedScheduler([L.ExponentialLR(opt, 0.9), object()])


def test_a_chain_inside_sequential_lr_is_undone_and_restarted():
    """SequentialLR takes back each chained schedule's first step (torch's recursive undo)
    and restarts the chain with an ordinary step of each (ExponentialLR multiplies at
    epoch 0 then, as torch 2.14's); at the milestone the next schedule takes over."""
    opt = make_opt()
    inner = L.ChainedScheduler(
        [L.LinearLR(opt, start_factor=0.25, total_iters=4), L.ExponentialLR(opt, gamma=0.95)]
    )
    sched = L.SequentialLR(opt, [inner, L.ConstantLR(opt, factor=0.5)], milestones=[4])
    assert run(sched, 8) == SEQUENTIAL_CHAIN


@pytest.mark.parametrize(
    "make, want",
    [
        (lambda o: L.ExponentialLR(o, 0.5, last_epoch=3), [0.2, 0.1, 0.05, 0.025]),
        (
            lambda o: L.CosineAnnealingLR(o, 10, last_epoch=3),
            [0.2, 0.15278640450004208, 0.10557280900008414, 0.062980809184125],
        ),
        (
            lambda o: L.LinearLR(o, 0.5, total_iters=6, last_epoch=3),
            [0.2, 0.22000000000000003, 0.24000000000000002, 0.24000000000000002],
        ),
        (lambda o: L.PolynomialLR(o, 6, 2.0, last_epoch=3), [0.2, 0.04999999999999997, 0, 0]),
        (lambda o: L.MultiplicativeLR(o, lambda e: 0.5, last_epoch=3), [0.2, 0.1, 0.05, 0.025]),
        (
            lambda o: L.CyclicLR(o, 0.1, 1.0, step_size_up=3, last_epoch=3),
            [1.0, 0.3999999999999998, 0.1, 0.4000000000000006],
        ),
    ],
    ids=["exponential", "cosine", "linear", "polynomial", "multiplicative", "cyclic"],
)
def test_resuming_at_last_epoch_leaves_the_lr_to_the_first_step_as_torchs(make, want):
    """Built with last_epoch=3 over a group at lr 0.2 (initial_lr 1.0): torch 2.14's
    constructor step keeps the recursive schedules' lr (CyclicLR's is closed-form)."""
    opt = optim.SGD([{"params": [nn.Parameter(fg.zeros(1))], "initial_lr": 1.0}], lr=0.2)
    assert run(make(opt), 3) == want


def test_training_under_a_chain_is_torchs():
    params = make_params()
    opt = optim.NAdam(params, lr=0.1)
    sched = L.ChainedScheduler([L.LinearLR(opt, 0.5, total_iters=3), L.PolynomialLR(opt, 10)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # optimizer.step() comes first: no order warning
        for _ in range(STEPS):
            opt.zero_grad()
            loss_of(params).backward()
            opt.step()
            sched.step()
    for got, want in zip(flat(params), NADAM_CHAINED):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)
