"""Sizes marked to vary ahead of time (frontend/dynamo.py): `fg.mark_dynamic(t, dim)`
plans every graph reading t, and what those compute, for varying sizes from its first
plan, so the second size runs generic kernels where an unmarked graph compiles a set of
its own; values stay numpy's; the debug log says which input's dimension was marked or
changed; bad dims raise at the user's line; torch's spellings resolve under the shim."""

from __future__ import annotations

import numpy as np
import pytest
from _files import run_in_child

import fusegrad as fg
from fusegrad.pipeline import templates
from fusegrad.runtime.engine import engine


@pytest.fixture
def fresh(tmp_path):
    templates.registry.clear()
    engine.forget_plans(lambda key: True)
    engine.forget_sizes()
    with fg.config.override(cache=str(tmp_path), size_templates=True):
        yield
    templates.registry.clear()
    engine.forget_sizes()


def _input(n: int) -> fg.Tensor:
    return fg.tensor(np.linspace(-2, 2, n * 40, dtype=np.float32).reshape(n, 40))


def _f(x):
    # a long sum down the rows: cascaded, in a form that changes with the row count
    return (x.relu() * 3 + x.exp()).sum(dim=0)


def _want(n: int) -> np.ndarray:
    x = np.linspace(-2, 2, n * 40, dtype=np.float32).reshape(n, 40).astype(np.float64)
    return (np.maximum(x, 0) * 3 + np.exp(x)).sum(axis=0)


CHILD = """
import json, sys
import numpy as np
import fusegrad as fg
from fusegrad.pipeline import compiler
mark = MARK
compiles, values = [], {}
for n in (1100, 1270, 1077):
    x = fg.tensor(np.linspace(-2, 2, n * 40, dtype=np.float32).reshape(n, 40))
    if mark:
        fg.mark_dynamic(x, 0)
    before = compiler.stats["compiled"]
    values[str(n)] = (x.relu() * 3 + x.exp()).sum(dim=0).numpy()
    compiles.append(compiler.stats["compiled"] - before)
np.savez(sys.argv[1], **values)
print(json.dumps(compiles))
"""


def test_a_marked_first_size_lets_later_sizes_compile_less(tmp_path):
    # each in a process of its own: no kernel either compiled is in the other's memory
    plain, got = run_in_child(CHILD.replace("MARK", "False"), tmp_path, tmp_path / "a", "a")
    marked, _ = run_in_child(CHILD.replace("MARK", "True"), tmp_path, tmp_path / "b", "b")
    # unmarked, the second size lowers to the forms that serve every size and compiles
    # them, the third their generic kernel; marked, the first plan had those forms, so the
    # second compiles the generic kernel and the third nothing
    assert sum(marked[1:]) < sum(plain[1:])
    assert marked[2] == 0
    for n, value in got.items():
        np.testing.assert_allclose(value, _want(int(n)), rtol=2e-6)


def test_values_are_numpys_at_every_marked_size(fresh):
    for n in (1, 2, 5, 63, 64, 65, 257):
        x = _input(n)
        fg.mark_dynamic(x, 0)
        np.testing.assert_allclose(_f(x).numpy(), _want(n), rtol=2e-6)


def test_what_a_marked_graph_computes_is_planned_for_varying_sizes_too(fresh, capfd):
    with fg.config.override(debug=1):
        x = _input(300)
        fg.mark_dynamic(x, 0)
        h = (x * 2).relu()
        h.realize()  # a plan reading the marked input
        (h.exp() + 1).sum(dim=1).realize()  # a plan reading only what it computed
    err = capfd.readouterr().err
    assert "has dim 0 marked dynamic (shape (300, 40))" in err
    assert "was computed from sizes that vary" in err
    assert "test_dynamo.py:" in err  # the input named by the line that made it


def test_the_log_names_the_dimension_that_changed(fresh, capfd):
    with fg.config.override(debug=1):
        for n in (30, 31):
            (_input(n) * 2).sum(dim=1).realize()
    err = capfd.readouterr().err
    assert "dim 0 of the input made at" in err and "is 31, was 30" in err


@pytest.mark.cpu_device  # (generic kernels are the CPU's: cuda compiles each size)
def test_an_unmarked_graph_is_planned_for_its_own_sizes(fresh):
    x = _input(12)
    records = engine.realize([(x * 2).sum(dim=1).node])
    assert not any(r.compiled.generic for r in records)
    fg.mark_dynamic(x, 0)
    fg.dynamo.mark_static(x)  # the mark removed: its next graphs plan for their sizes again
    assert engine._marked([x.node]) is None


def test_dims_are_checked_at_the_users_line():
    x = fg.ones(3, 4)
    fg.mark_dynamic(x, [0, -1])
    assert engine._marked([x.node]).endswith("has dim 0, 1 marked dynamic (shape (3, 4))")
    with pytest.raises(IndexError, match=r"dim 2 is out of range for a tensor of shape \(3, 4\)"):
        fg.mark_dynamic(x, 2)
    with pytest.raises(TypeError, match="expected a Tensor, got ndarray"):
        fg.mark_dynamic(np.ones(3), 0)
    with pytest.raises(IndexError):
        fg.dynamo.mark_static(x, 5)


def test_torchs_spellings_resolve_under_the_shim():
    from fusegrad.torch_shim import TorchShim

    dynamo = TorchShim().module("torch._dynamo")
    assert dynamo.mark_dynamic is fg.dynamo.mark_dynamic
    assert dynamo.maybe_mark_dynamic is fg.dynamo.maybe_mark_dynamic
    x = fg.ones(2, 5)
    dynamo.maybe_mark_dynamic(x, 1)
    dynamo.mark_dynamic(x, 0, min=2, max=64)  # torch's range: accepted
    assert "has dim 0, 1 marked dynamic" in engine._marked([x.node])
    dynamo.reset()


@pytest.mark.cpu_device  # (generic kernels are the CPU's: cuda compiles each size)
def test_a_marked_first_plan_makes_its_kernels_generic_so_the_next_size_compiles_nothing(
    fresh,
):
    """The first plan of a graph reading a marked input probes its kernels at other sizes
    of the marked dimension (pipeline/templates.py, `probes`), the labels' unmarked
    dimension of the same size moving with it: the next size of the same form compiles
    nothing, with numpy's values."""
    from fusegrad.pipeline import compiler

    compiled = []
    for n in (1100, 1270):
        x = _input(n)
        fg.mark_dynamic(x, 0)
        labels = np.arange(n) % 3
        before = compiler.stats["compiled"]
        got = ((x.relu() * 3 + x.exp()) * fg.tensor(labels)[:, None]).sum(dim=0).numpy()
        compiled.append(compiler.stats["compiled"] - before)
        x64 = np.linspace(-2, 2, n * 40, dtype=np.float32).reshape(n, 40).astype(np.float64)
        want = ((np.maximum(x64, 0) * 3 + np.exp(x64)) * labels[:, None]).sum(axis=0)
        np.testing.assert_allclose(got, want, rtol=2e-6)
    assert compiled[0] > 0 and compiled[1] == 0
