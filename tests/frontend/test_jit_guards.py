"""fusegrad.jit never replays a stale Python value (issue 26).

A Python number a jitted function reads is a constant of its recorded kernels.
Read through a container (`state["scale"]`, `cfg.lr`, `vals[0]`), as an
argument, or as an optimizer's or scheduler's learning rate, a changed value
must record the function again (or reach the replay through a hook), never
replay the old one.
"""

from __future__ import annotations

import dataclasses
import doctest
import types

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import jitguards, nn
from fusegrad.nn import functional as F


def _calls(f, *args, n: int = 4):
    """Call `f` n times (the last calls are replays) and return the last result as a list."""
    for _ in range(n):
        out = f(*args)
    return out.tolist()


# module-level containers: the function reads them as globals
STATE = {"scale": 2.0, "nested": {"k": 3.0}}
VALS = [1.0, 5.0, 7.0]


class PlainConfig:
    def __init__(self):
        self.lr = 2.0


@dataclasses.dataclass
class DataConfig:
    lr: float = 2.0


CONFIGS = {
    "plain": PlainConfig,
    "dataclass": DataConfig,
    "namespace": lambda: types.SimpleNamespace(lr=2.0),
}


def test_a_dict_item_of_a_global_is_guarded():
    @fg.jit
    def f(x):
        return x * STATE["scale"]

    try:
        assert _calls(f, fg.ones(2)) == [2.0, 2.0]
        assert f.replays == 1
        STATE["scale"] = 5.0
        assert _calls(f, fg.ones(2)) == [5.0, 5.0]
        assert f.replays == 3  # recorded again (twice), then replayed with the new value
    finally:
        STATE["scale"] = 2.0


def test_debug_says_which_read_changed(capsys):
    @fg.jit
    def f(x):
        return x * STATE["scale"]

    try:
        _calls(f, fg.ones(1))
        STATE["scale"] = 3.0
        with fg.config.override(debug=1):
            f(fg.ones(1))
        assert "STATE['scale'] changed" in capsys.readouterr().err
    finally:
        STATE["scale"] = 2.0


def test_a_nested_dict_item_is_guarded():
    @fg.jit
    def f(x):
        return x + STATE["nested"]["k"]

    try:
        assert _calls(f, fg.zeros(2)) == [3.0, 3.0]
        STATE["nested"]["k"] = -1.5
        assert _calls(f, fg.zeros(2)) == [-1.5, -1.5]
        STATE["nested"] = {"k": 4.0}  # a new inner dict: read through the outer one again
        assert _calls(f, fg.zeros(2)) == [4.0, 4.0]
    finally:
        STATE["nested"] = {"k": 3.0}


@pytest.mark.parametrize("kind", sorted(CONFIGS))
def test_an_attribute_of_a_closure_object_is_guarded(kind):
    cfg = CONFIGS[kind]()

    @fg.jit
    def f(x):
        return x * cfg.lr

    assert _calls(f, fg.ones(2)) == [2.0, 2.0]
    cfg.lr = 0.5
    assert _calls(f, fg.ones(2)) == [0.5, 0.5]
    assert f.replays >= 2


def test_list_items_are_guarded_by_constant_and_by_computed_index():
    @fg.jit
    def first(x):
        return x * VALS[0]

    @fg.jit
    def by_shape(x):
        i = x.shape[0]  # a computed index: the whole list is guarded
        return x * VALS[i]

    try:
        assert _calls(first, fg.ones(1)) == [1.0]
        assert _calls(by_shape, fg.ones(1)) == [5.0]
        VALS[0], VALS[1] = 3.0, 6.0
        assert _calls(first, fg.ones(1)) == [3.0]
        assert _calls(by_shape, fg.ones(1)) == [6.0]
    finally:
        VALS[:] = [1.0, 5.0, 7.0]


def test_a_closure_dict_read_with_get_is_guarded():
    opts = {"shift": 1.0}

    @fg.jit
    def f(x):
        return x + opts.get("shift", 0.0)

    assert _calls(f, fg.zeros(1)) == [1.0]
    opts["shift"] = 9.0
    assert _calls(f, fg.zeros(1)) == [9.0]


def test_an_attribute_of_an_object_argument_is_guarded():
    cfg = PlainConfig()

    @fg.jit
    def f(x, c):
        return x * c.lr

    assert _calls(f, fg.ones(1), cfg) == [2.0]
    cfg.lr = 4.0
    assert _calls(f, fg.ones(1), cfg) == [4.0]


def test_python_number_arguments_are_part_of_the_recording():
    @fg.jit
    def f(x, a):
        return x * a

    ints = fg.tensor([3, 4])
    assert _calls(f, fg.ones(2), 2.0) == [2.0, 2.0]
    assert _calls(f, fg.ones(2), 3.0) == [3.0, 3.0]
    assert _calls(f, fg.ones(2), 2.0) == [2.0, 2.0]
    # equal Python values of other types make other graphs: int stays int, float does not
    assert f(ints, 1).dtype == fg.int64 and _calls(f, ints, 1) == [3, 4]
    assert _calls(f, ints, 1.0) == [3.0, 4.0]
    assert f(ints, 1.0).dtype == fg.float32
    # and the sign of a zero is a different constant
    assert np.signbit(np.array(_calls(f, fg.ones(1), -0.0))).all()
    assert not np.signbit(np.array(_calls(f, fg.ones(1), 0.0))).any()


def test_a_mutating_method_call_does_not_stop_replays():
    """`log.append(...)` is not a read: the list it changes each call is not guarded (an
    appended value is a Python side effect, made on the recorded calls only)."""
    log = []

    @fg.jit
    def f(x):
        log.append(1)
        return x * 2

    _calls(f, fg.ones(1), n=6)
    assert f.replays == 3
    assert len(log) == 3


def test_reads_found_in_the_bytecode():
    cfg = types.SimpleNamespace(lr=0.1, lrs=[0.1, 0.2])

    def f(x, o, i):
        y = x * STATE["nested"]["k"] * cfg.lr * o.w * cfg.lrs[i]
        cfg.history.append(y)
        return [v * VALS[0] for v in y]

    found = {str(r) for r in jitguards.reads_of(f)}
    assert {"STATE['nested']['k']", "cfg.lr", "o.w", "cfg.lrs", "VALS[0]"} <= found
    assert "cfg.history" not in found  # its append is no read


def test_module_doc_example():
    assert doctest.testmod(jitguards).failed == 0


# ---------------------------------------------------------------- optimizers and schedules


def _train(jitted: bool, change, steps: int = 9):
    """Adam on a small model; `change(i, opt, sched)` runs before step i, outside the step."""
    rng = np.random.default_rng(3)
    model = nn.Linear(4, 3)
    with fg.no_grad():
        for p in model.parameters():
            p.copy_(fg.tensor(rng.standard_normal(p.shape).astype(np.float32)))
    opt = fg.optim.Adam(model.parameters(), lr=0.05)
    sched = fg.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    x = fg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    y = fg.tensor(rng.integers(0, 3, 5))
    inside = change is None

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if inside:
            sched.step()
        return loss

    f = fg.jit(step) if jitted else step
    losses = []
    for i in range(steps):
        if change is not None:
            change(i, opt, sched)
        losses.append(f(x, y).item())
    return losses, opt.param_groups[0]["lr"], getattr(f, "replays", None)


def _set_lr(i, opt, sched):
    opt.param_groups[0]["lr"] = 0.05 / (1 + i)


def _schedule(i, opt, sched):
    if i:
        sched.step()


@pytest.mark.parametrize(
    "change", [_set_lr, _schedule, None], ids=["param_groups", "scheduler", "scheduler_inside"]
)
def test_learning_rates_reach_replays(change):
    eager_losses, eager_lr, _ = _train(False, change)
    jit_losses, jit_lr, replays = _train(True, change)
    assert replays == 6
    assert jit_lr == eager_lr
    assert jit_losses == eager_losses


def test_reduce_lr_on_plateau_inside_a_jitted_step_is_refused():
    w = nn.Parameter(fg.ones(2))
    opt = fg.optim.SGD([w], lr=0.1)
    sched = fg.optim.lr_scheduler.ReduceLROnPlateau(opt)

    @fg.jit
    def f(x):
        loss = (w * x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step(0.5)
        return loss

    f(fg.ones(2))
    with pytest.raises(fg.JitError, match="ReduceLROnPlateau"):
        f(fg.ones(2))


class Mode(__import__("enum").Enum):
    SUM = "sum"
    MEAN = "mean"


SETTINGS = {"mode": Mode.SUM}


def test_an_enum_a_partial_and_a_method_are_guarded():
    import functools

    def reduce(x, cfg):
        return x.sum() if SETTINGS["mode"] is Mode.SUM else x.mean() * cfg.lr

    class Model:
        def __init__(self):
            self.scale = 2.0

        def step(self, x):
            return x * self.scale

    cfg = PlainConfig()
    f = fg.jit(functools.partial(reduce, cfg=cfg))
    m = Model()
    g = fg.jit(m.step)
    try:
        assert _calls(f, fg.ones(4)) == 4.0
        assert _calls(g, fg.ones(1)) == [2.0]
        SETTINGS["mode"] = Mode.MEAN
        m.scale = 3.0
        assert _calls(f, fg.ones(4)) == 2.0
        assert _calls(g, fg.ones(1)) == [3.0]
    finally:
        SETTINGS["mode"] = Mode.SUM


def test_the_python_values_guard_sees_every_kind_of_change():
    """`jit._unchanged` checks a module's attributes as one tuple in C: every change the
    exact check saw must still be seen (a deleted name, a type, NaN, a property, cells)."""
    from fusegrad.jit import _unchanged

    class Holder:
        pass

    class WithProperty:
        def __init__(self):
            self.__dict__["p"] = 1.0  # shadowed by the property below

        @property
        def p(self):
            return self.value

    h, w, g = Holder(), WithProperty(), {"k": 2}
    h.a, h.b, h.c, h.n, w.value = 1.0, None, "s", float("nan"), 5.0
    cell = (lambda: h).__closure__[0]
    holds = _unchanged(
        [(h, "a", 1.0), (h, "b", None), (h, "c", "s"), (h, "n", float("nan"))]
        + [(w, "p", 5.0), (g, "k", 2), (cell, "h", h)]
    )
    assert holds()
    h.n = float("nan")  # another NaN object: still the same value
    assert holds()
    for change, undo in [
        (lambda: setattr(h, "a", 1), lambda: setattr(h, "a", 1.0)),  # same value, new type
        (lambda: setattr(h, "a", 1.5), lambda: setattr(h, "a", 1.0)),
        (lambda: delattr(h, "b"), lambda: setattr(h, "b", None)),  # recorded None, now gone
        (lambda: setattr(h, "c", "t"), lambda: setattr(h, "c", "s")),
        (lambda: setattr(w, "value", 6.0), lambda: setattr(w, "value", 5.0)),  # via property
        (lambda: g.update(k=3), lambda: g.update(k=2)),
        (lambda: g.pop("k"), lambda: g.update(k=2)),
    ]:
        change()
        assert not holds()
        undo()
        assert holds()


def test_a_module_attribute_change_records_again():
    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 1)
            self.scale = 2.0

        def forward(self, x):
            return self.lin(x) * self.scale

    m = Scaled()

    @fg.jit
    def f(x):
        return m(x)

    x = fg.tensor([[1.0, 2.0]])
    for _ in range(4):
        base = f(x).item()
    assert f.replays >= 1
    m.scale = 3.0
    assert f(x).item() == pytest.approx(base * 1.5, rel=1e-6)
    m.scale = 3  # the same value as an int: recorded again, the same answer
    assert f(x).item() == pytest.approx(base * 1.5, rel=1e-6)
