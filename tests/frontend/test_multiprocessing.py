"""fusegrad.multiprocessing (torch.multiprocessing's stand-in): processes started by fork
whatever start method is asked for (a warning says so), `spawn` running `fn(i, *args)` in
each and raising a child's exception with its traceback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.multiprocessing as mp


def _square_into(i: int, out) -> None:
    out[i] = float(i * i)


def _fail(i: int) -> None:
    if i == 1:
        raise ValueError("process one failed")


def test_spawn_runs_fn_in_each_process_and_raises_a_childs_error():
    out = fg.zeros(3).share_memory_()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mp.spawn(_square_into, args=(out,), nprocs=3)
    np.testing.assert_array_equal(out.numpy(), [0.0, 1.0, 4.0])
    assert any("runs as 'fork'" in str(w.message) for w in caught) or mp._warned
    with pytest.raises(mp.ProcessRaisedException, match="process one failed"):
        mp.spawn(_fail, nprocs=2)
    context = mp.spawn(_square_into, args=(out,), nprocs=1, join=False)
    assert context.join() and len(context.pids()) == 1


def test_start_methods_are_fork():
    assert mp.get_start_method() == "fork" and mp.get_all_start_methods() == ["fork"]
    assert mp.get_context() is mp.get_context("fork")
    with pytest.raises(ValueError, match="cannot find context"):
        mp.get_context("no-such-method")
