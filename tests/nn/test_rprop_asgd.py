"""Rprop and ASGD against torch 2.14.1: parameters and state after the problem
of tests/_optim_problem.py (torch's values as literals), torch's defaults, param_groups
keys and argument errors, checkpoints, skipped parameters and the cached step."""

from __future__ import annotations

import pytest
from _optim_problem import (
    LRS,
    assert_float64_matches_torch,
    assert_jit_replays_equal_eager_steps,
    assert_matches_torch,
    assert_none_gradients_are_skipped,
    assert_state_dict_continues_identically,
    assert_steps_after_the_first_compile_nothing,
)

import fusegrad as fg
from fusegrad import nn, optim

# torch 2.14.1's results (each case: kwargs, the lrs written before each step or None,
# the three parameters flattened, the second parameter's state_dict entry)
# ---- Rprop
RPROP_DEFAULTS = {
    "lr": 0.01,
    "etas": (0.5, 1.2),
    "step_sizes": (1e-06, 50),
    "foreach": None,
    "maximize": False,
    "differentiable": False,
    "capturable": False,
}
RPROP_CASES = [
    (
        {"lr": 0.1},
        None,
        [
            [0.00639997795, 0.0415905714, 0.350091189],
            [-0.149908811, -0.256399959, -1.39990878, -0.350091189],
            [0, 1.35009134, 0.36857608, -0.649908781],
        ],
        {
            "step": 8,
            "prev": [[1.29097533, -0.0192453265], [0.963257313, -2.86583018]],
            "step_size": [[0.35831818, 0.0432000048], [0.35831818, 0.35831818]],
        },
    ),
    (
        {"lr": 0.05, "etas": (0.3, 1.5), "step_sizes": (0.01, 0.2)},
        None,
        [
            [0.0437499881, -0.0437500775, 0.793749928],
            [0.293750048, -0.293749988, -0.956249952, -0.793749928],
            [0, 1.79374981, 0.246250033, -0.206249997],
        ],
        {
            "step": 8,
            "prev": [[1.62118673, 0.0765022039], [1.47116446, -3.93569875]],
            "step_size": [[0.200000003, 0.0900000036], [0.200000003, 0.200000003]],
        },
    ),
    (
        {"lr": 0.1, "maximize": True},
        None,
        [
            [2.14990878, -2.89990878, 3.64990854],
            [3.14990878, -2.39990878, 1.8999089, -3.64990854],
            [0, 4.64990854, -2.14990878, 2.64990878],
        ],
        {
            "step": 8,
            "prev": [[-3.24801397, 2.73478746], [-3.0707922, 12.3635426]],
            "step_size": [[0.35831818, 0.35831818], [0.35831818, 0.35831818]],
        },
    ),
    (
        {"lr": 0.05, "etas": (0.3, 1.5), "step_sizes": (0.01, 0.2)},
        LRS,
        [
            [0, -2.98023224e-08, 0.549999893],
            [0.0499999821, -0.384999961, -1.20000005, -0.549999893],
            [0, 1.54999971, 0.200000018, -0.449999988],
        ],
        {
            "step": 8,
            "prev": [[1.34391236, 0.0314124227], [1.04030228, -3.01831055]],
            "step_size": [[0.200000003, 0.135000005], [0.200000003, 0.200000003]],
        },
    ),
]
RPROP_FLOAT64 = [
    [0.04374999999999993, -0.04375000000000001, 0.7937500000000002],
    [0.29375000000000007, -0.29374999999999996, -0.95625, -0.7937500000000002],
    [0.0, 1.7937499999999997, 0.24625000000000008, -0.20625000000000004],
]
# ---- ASGD
ASGD_DEFAULTS = {
    "lr": 0.01,
    "lambd": 0.0001,
    "alpha": 0.75,
    "t0": 1000000.0,
    "weight_decay": 0,
    "foreach": None,
    "maximize": False,
    "differentiable": False,
    "capturable": False,
}
ASGD_CASES = [
    (
        {"lr": 0.1},
        None,
        [
            [0.25400728, -0.158762738, 0.976601064],
            [0.0454080999, -0.454112977, -1.16968632, 0.0690189973],
            [0, 0.343059629, 0.129959002, -0.0656662881],
        ],
        {
            "step": 8,
            "eta": 0.0999940038,
            "mu": 1,
            "ax": [[0.0454080999, -0.454112977], [-1.16968632, 0.0690189973]],
        },
    ),
    (
        {"lr": 0.1, "lambd": 0.01, "alpha": 0.5, "t0": 2, "weight_decay": 0.1},
        None,
        [
            [0.229641378, -0.143320933, 0.819849908],
            [0.00766528025, -0.422879368, -1.13550997, 0.0743475705],
            [0, 0.226962894, 0.131169945, -0.0931065008],
        ],
        {
            "step": 8,
            "eta": 0.0996023864,
            "mu": 0.166666672,
            "ax": [[0.285828322, -0.476521701], [-0.927287757, -0.0480989181]],
        },
    ),
    (
        {"lr": 0.1, "t0": 3, "maximize": True},
        None,
        [
            [0.852096081, -7.30614471, 2.79096627],
            [3.92722559, -1.56235671, 2.65329504, -20.7046928],
            [0, 8.91443443, -4.04030275, 2.25527596],
        ],
        {
            "step": 8,
            "eta": 0.0999940038,
            "mu": 0.200000003,
            "ax": [[3.33820772, -1.3409555], [2.18641496, -14.3951874]],
        },
    ),
    (
        {"lr": 0.1, "lambd": 0.01, "alpha": 0.5, "t0": 2, "weight_decay": 0.1},
        LRS,
        [
            [0.166100398, -0.0465288498, 0.401531011],
            [-0.282894224, -0.364127785, -1.33284831, 0.157565266],
            [0, -0.465634316, 0.201985523, -0.342622191],
        ],
        {
            "step": 8,
            "eta": 0.0996023864,
            "mu": 0.166666672,
            "ax": [[0.110083468, -0.440389752], [-1.07103872, 0.0631908625]],
        },
    ),
]
ASGD_FLOAT64 = [
    [0.22964135283167633, -0.14332093041752758, 0.8198501492416116],
    [0.007665308541243373, -0.4228794011167146, -1.1355098896017761, 0.07434757411784729],
    [0.0, 0.2269628367897554, 0.13116994607843785, -0.09310649746990382],
]


CASES = {"Rprop": RPROP_CASES, "ASGD": ASGD_CASES}
FLOAT64 = {"Rprop": RPROP_FLOAT64, "ASGD": ASGD_FLOAT64}
DEFAULTS = {"Rprop": RPROP_DEFAULTS, "ASGD": ASGD_DEFAULTS}
CASE_IDS = ["plain", "options", "maximize", "lr_schedule"]


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("case", range(4), ids=CASE_IDS)
def test_parameters_and_state_match_torch(name, case):
    kwargs, lrs, want_params, want_state = CASES[name][case]
    assert_matches_torch(getattr(optim, name), kwargs, lrs, want_params, want_state)


@pytest.mark.parametrize("name", list(CASES))
def test_float64_parameters_match_torch_closely(name):
    assert_float64_matches_torch(getattr(optim, name), CASES[name][1][0], FLOAT64[name])


@pytest.mark.parametrize("name", list(CASES))
def test_defaults_and_param_group_keys_are_torchs(name):
    opt = getattr(optim, name)([nn.Parameter(fg.zeros(2))])
    group = opt.param_groups[0]
    assert [k for k in group if k != "params"] == list(DEFAULTS[name])
    assert {k: v for k, v in group.items() if k != "params"} == DEFAULTS[name]


def test_rprop_steps_by_sign_and_adapts_each_step_size():
    """Per element, by hand: the first step moves by lr against the gradient's sign; a
    gradient of the same sign grows the step (x1.2), one of the other sign shrinks it
    (x0.5), skips the move and forgets the gradient (so the next step size stays)."""
    p = nn.Parameter(fg.tensor([1.0, 1.0, 1.0]))
    opt = optim.Rprop([p], lr=0.1)
    for g in ([1.0, 1.0, 0.0], [2.0, -3.0, 0.0], [1.0, 1.0, 1.0]):
        opt.zero_grad()
        (p * fg.tensor(g)).sum().backward()
        opt.step()
    # element 0: -0.1, -0.12, -0.144; element 1: -0.1, no move (size 0.05), -0.05;
    # element 2: no gradient twice (size 0.1 stays), then -0.1
    assert p.tolist() == pytest.approx([1 - 0.1 - 0.12 - 0.144, 1 - 0.1 - 0.05, 0.9])
    assert opt.state[p]["step_size"].tolist() == pytest.approx([0.144, 0.05, 0.1])
    assert opt.state[p]["prev"].tolist() == [1.0, 1.0, 1.0]


def test_rprop_clamps_step_sizes_and_ignores_a_later_lr():
    p = nn.Parameter(fg.tensor([0.0]))
    opt = optim.Rprop([p], lr=0.1, etas=(0.5, 3.0), step_sizes=(0.05, 0.2))
    for _ in range(3):
        opt.zero_grad()
        p.sum().backward()
        opt.step()
        opt.param_groups[0]["lr"] = 10.0  # step sizes start at lr and then are Rprop's own
    assert p.item() == pytest.approx(-0.1 - 0.2 - 0.2)


def test_rprop_step_size_bounds_the_wrong_way_round_give_the_upper_one():
    """torch's clamp_(min, max) with min > max is max."""
    p = nn.Parameter(fg.tensor([1.0]))
    opt = optim.Rprop([p], lr=0.1, step_sizes=(0.3, 0.2))
    p.sum().backward()
    opt.step()
    assert p.item() == pytest.approx(0.8) and opt.state[p]["step_size"].item() == pytest.approx(0.2)


def test_asgd_copies_the_parameter_into_the_average_while_mu_is_1():
    """Copied, not moved by mu = 1 (ax + (p - ax) * 1 would round: 1.0231815e-12 here)."""
    p = nn.Parameter(fg.tensor([1.0]))
    opt = optim.ASGD([p], lr=1.0, lambd=1 - 1e-6, alpha=0.0)
    for _ in range(2):
        opt.zero_grad()
        (p * 0.0).sum().backward()
        opt.step()
    assert p.item() == 9.999999960041972e-13  # torch 2.14.1's
    assert opt.state[p]["ax"].item() == p.item()


def test_asgd_averages_from_t0_on():
    """t0 = 2: step t averages with mu = 1 / max(1, t - 1 - t0), made by the step before;
    so the average is the parameter itself for four steps, then the running mean of the
    parameters from step four on."""
    p = nn.Parameter(fg.tensor([4.0]))
    opt = optim.ASGD([p], lr=0.25, lambd=0.0, t0=2)
    seen = []
    for _ in range(6):
        opt.zero_grad()
        (p * p / 2).sum().backward()  # gradient p: p *= 1 - eta, eta = lr (lambd = 0)
        opt.step()
        seen.append(p.item())
    assert seen == pytest.approx([4.0 * 0.75**k for k in range(1, 7)])
    assert opt.state[p]["ax"].item() == pytest.approx(sum(seen[3:]) / 3)
    assert opt.state[p]["mu"] == 0.25 and opt.state[p]["eta"] == 0.25


def test_bad_arguments_raise_torchs_errors():
    p = nn.Parameter(fg.zeros(2))
    for cls in (optim.Rprop, optim.ASGD):
        with pytest.raises(ValueError, match=r"^Invalid learning rate: -0.1$"):
            cls([p], lr=-0.1)
        with pytest.raises(ValueError, match="Tensor lr must be 1-element"):
            cls([p], lr=fg.tensor([0.1, 0.2]))
        with pytest.raises(NotImplementedError, match=f"{cls.__name__}: differentiable=True"):
            cls([p], differentiable=True)
        cls([p], foreach=True, capturable=True)  # accepted: they change no result here
    for etas in [(1.0, 1.2), (0.0, 1.2), (0.5, 1.0)]:
        with pytest.raises(ValueError, match=rf"^Invalid eta values: {etas[0]}, {etas[1]}$"):
            optim.Rprop([p], etas=etas)
    with pytest.raises(ValueError, match=r"^Invalid weight_decay value: -0.5$"):
        optim.ASGD([p], weight_decay=-0.5)


@pytest.mark.parametrize(
    "name, kwargs",
    [("Rprop", dict(lr=0.05, etas=(0.3, 1.5))), ("ASGD", dict(lr=0.1, t0=2, weight_decay=0.1))],
)
def test_state_dict_round_trip_continues_identically(name, kwargs):
    assert_state_dict_continues_identically(getattr(optim, name), **kwargs)


@pytest.mark.parametrize("name", list(CASES))
def test_parameters_without_gradients_are_skipped(name):
    assert_none_gradients_are_skipped(getattr(optim, name), lr=0.1)


@pytest.mark.parametrize(
    "name, kwargs",
    [("Rprop", dict(lr=0.01)), ("ASGD", dict(lr=0.05, t0=3, weight_decay=1e-3))],
)
def test_steps_after_the_first_compile_nothing(name, kwargs):
    assert_steps_after_the_first_compile_nothing(getattr(optim, name), **kwargs)


@pytest.mark.parametrize(
    "name, kwargs", [("Rprop", dict(lr=0.05)), ("ASGD", dict(lr=0.1, t0=2, lambd=0.01))]
)
def test_jit_replays_equal_eager_steps(name, kwargs):
    assert_jit_replays_equal_eager_steps(getattr(optim, name), **kwargs)
