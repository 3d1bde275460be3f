"""Tensors in memory shared between processes (frontend/shared_memory.py): Hogwild
training lands every process's optimizer steps in the one copy, writes in place reach it,
and a computation reads the shared values as it starts."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.multiprocessing as mp
from fusegrad import nn, shared_memory
from fusegrad.shared_memory import optimizer_step


def _sgd_steps(model: nn.Module, steps: int, seed: int) -> None:
    """`steps` SGD steps with momentum on a batch drawn from `seed`."""
    rng = np.random.default_rng(seed)
    x = fg.tensor(rng.standard_normal((8, 4)).astype(np.float32))
    y = fg.tensor(rng.standard_normal((8, 2)).astype(np.float32))
    opt = fg.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    for _ in range(steps):
        loss = ((model(x) - y) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _run_in_child(target, *args) -> None:
    p = mp.Process(target=target, args=args)
    p.start()
    p.join(120)
    assert p.exitcode == 0


def test_share_memory_keeps_values_and_is_reported():
    t = (fg.arange(6).float() * 2).reshape(2, 3)  # lazy: computed first
    assert not t.is_shared()
    assert t.share_memory_() is t and t.is_shared()
    np.testing.assert_array_equal(t.numpy(), np.arange(6).reshape(2, 3) * 2)
    assert t.share_memory_() is t  # (once)
    assert not fg.zeros(3).is_shared()
    model = nn.Linear(3, 2)
    assert model.share_memory() is model
    assert all(p.is_shared() for p in model.parameters())


def test_optimizer_steps_in_forked_processes_land_in_the_parents_model():
    """Two children in turn, 5 steps each, train the parent's shared model exactly as 10
    steps in one process train an unshared copy (each child's optimizer starts anew, so
    the reference restarts its momentum after 5 steps too)."""
    fg.manual_seed(0)
    shared, alone = nn.Linear(4, 2), nn.Linear(4, 2)
    alone.load_state_dict(shared.state_dict())
    shared.share_memory()
    for _ in range(2):
        _run_in_child(_sgd_steps, shared, 5, 1)
        _sgd_steps(alone, 5, 1)
    for a, b in zip(shared.parameters(), alone.parameters()):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6, atol=1e-7)
    assert not np.allclose(shared.weight.numpy(), nn.Linear(4, 2).weight.numpy())


def _write(t) -> None:
    t.add_(1.0)
    t[0] = 7.0


def test_writes_in_place_in_a_child_reach_the_parent():
    t = fg.zeros(3).share_memory_()
    _run_in_child(_write, t)
    np.testing.assert_array_equal(t.numpy(), [7.0, 1.0, 1.0])
    p = nn.Parameter(fg.ones(2))
    p.share_memory_()
    with fg.no_grad():
        p.mul_(3)  # (a parameter's in-place write, in this process)
    assert p.is_shared()
    np.testing.assert_array_equal(p.numpy(), [3.0, 3.0])


def test_a_step_adds_its_change_to_what_another_process_wrote_meanwhile():
    """Hogwild's in-place update: the step reads the shared values as it starts, and its
    change (new value less the value it read) is added to them, so another process's
    update made during the step stays, counted once (stood in for by a write into the
    memory inside the step)."""
    p = nn.Parameter(fg.zeros(2))
    p.share_memory_()
    memory = shared_memory._shared[id(p)].memory
    with optimizer_step([p]):
        memory += 5.0  # (another process's step)
        with fg.no_grad():
            p.assign_(p + 1.0)  # (this step's: read 0, wrote 1)
    np.testing.assert_array_equal(p.numpy(), [6.0, 6.0])


def test_a_computation_reads_the_shared_values_as_it_starts():
    """Another process's write (stood in for by one into the memory) is what the next
    computation reads."""
    t = fg.zeros(2).share_memory_()
    shared_memory._shared[id(t)].memory[...] = 4.0
    assert float((t * 2).sum().item()) == 16.0
    np.testing.assert_array_equal(t.numpy(), [4.0, 4.0])


def test_a_jitted_step_over_shared_parameters_is_refused_naming_why():
    model = nn.Linear(2, 1)
    model.share_memory()
    opt = fg.optim.SGD(model.parameters(), lr=0.1)

    @fg.jit
    def step(x):
        loss = model(x).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step(fg.ones(3, 2))  # (the first call runs as written; the second records)
    with pytest.raises(fg.JitError, match="shared memory"):
        step(fg.ones(3, 2))


def _write_scalar(t, e) -> None:
    t.fill_(5.0)
    e.add_(1.0)  # (nothing to write: empty)


def test_zero_d_and_empty_tensors_share_too():
    t = fg.tensor(-0.0).share_memory_()
    e = fg.zeros(0).share_memory_()
    assert t.is_shared() and e.is_shared() and e.shape == (0,)
    assert np.signbit(t.numpy())  # (-0.0 kept)
    _run_in_child(_write_scalar, t, e)
    assert t.item() == 5.0 and e.numpy().size == 0
