"""Kernels of one plan that are the same up to their sizes compile once
(`compiler.shared_forms`, `templates.shared`): a network's elementwise kernels at each
stage's sizes run one generic kernel, with the same bits as their own compiles; sums and
register-tiled kernels keep their own."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import compiler, templates
from fusegrad.runtime.engine import engine

# the CPU's kernels of LLVM IR
pytestmark = pytest.mark.cpu_device


def _forget():
    """No plan, nor first plan of a graph (a plan of a graph met before at other sizes
    would compile as one whose sizes vary), nor generic kernel known."""
    engine.forget_plans(lambda key: True)
    engine._families.clear()
    templates.registry.clear()


@pytest.fixture
def fresh(tmp_path):
    _forget()
    with fg.config.override(cache=str(tmp_path), size_templates=True, share_forms=True):
        yield
    templates.registry.clear()


def _layers(widths, rows=3):
    """For each width, relu(x * 2 + bias) over a (rows, width) x: one elementwise kernel
    each, of one form, whose index of the bias (`i % width`) differs."""
    xs, ys = [], []
    for k, w in enumerate(widths):
        x = np.linspace(-2, 2, rows * w, dtype=np.float32).reshape(rows, w) + k
        b = np.linspace(-1, 1, w, dtype=np.float32)
        xs.append((x, b))
        ys.append((fg.tensor(x) * 2 + fg.tensor(b)).relu())
    return xs, ys


def _realized(ys):
    records = engine.realize([y.node for y in ys])
    return [y.numpy() for y in ys], [r.compiled for r in records]


def test_elementwise_kernels_of_one_form_in_a_plan_run_one_generic_kernel(fresh):
    xs, ys = _layers([40, 24, 56])
    got, kernels = _realized(ys)
    assert len(kernels) == 3
    assert all(k.generic and "%fg.lits" in k.generic for k in kernels)
    assert len({k.code_symbol for k in kernels}) == 1
    assert [k.cache for k in kernels] == ["compiled", "memory", "memory"]  # compiled once
    assert [k.literals for k in kernels] == [("40",), ("24",), ("56",)]
    for (x, b), g in zip(xs, got):
        np.testing.assert_array_equal(g, np.maximum(x * np.float32(2) + b, 0))


def test_shared_kernels_compute_the_bits_of_their_own_compiles(fresh):
    widths = [40, 24, 56, 17]
    got, kernels = _realized(_layers(widths)[1])
    assert all(k.generic for k in kernels)
    _forget()
    with fg.config.override(share_forms=False):
        want, own = _realized(_layers(widths)[1])
    assert not any(k.generic for k in own)
    assert len({k.code_symbol for k in own}) == len(widths)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_form_met_once_in_a_plan_keeps_its_own_kernel(fresh):
    _, kernels = _realized(_layers([40])[1])
    assert not kernels[0].generic


def test_register_tiled_products_keep_their_own_kernels(fresh):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in ((48, 64), (64, 32))]
    arrays += [rng.standard_normal(s).astype(np.float32) for s in ((80, 96), (96, 48))]
    a, b, c, d = map(fg.tensor, arrays)
    records = engine.realize([(a @ b).node, (c @ d).node])
    tiled = [r.compiled for r in records if r.loop is not None and r.loop.tile_note]
    assert tiled and not any(k.generic for k in tiled)


@pytest.mark.parametrize("program", [True, False])
def test_shared_kernels_get_their_literals_in_a_program_and_alone(fresh, program):
    widths = [40, 24, 56] if program else [41, 25, 57]
    with fg.config.override(program=program):
        xs, ys = _layers(widths)
        got, kernels = _realized(ys)
        again = [y.numpy() for y in _layers(widths)[1]]  # (a cached plan's run)
    assert all(k.generic for k in kernels)
    for (x, b), g, h in zip(xs, got, again):
        np.testing.assert_array_equal(g, np.maximum(x * np.float32(2) + b, 0))
        np.testing.assert_array_equal(h, g)


@pytest.mark.parametrize("disk_plans", [True, False])
def test_a_plan_made_again_from_the_caches_shares_as_it_did(tmp_path, disk_plans):
    # a new process (here: the memory caches emptied) reads the plan from disk and runs
    # its kernels as they ran; without the plan on disk, its items come from the item
    # cache and share the same generic kernel, not their own compiles
    _forget()
    widths = [40, 24, 56]
    options = dict(cache=str(tmp_path), disk_plans=disk_plans, share_forms=True)
    with fg.config.override(**options):
        want, made = _realized(_layers(widths)[1])
        _forget()
        compiler._memory.clear()
        from_disk = engine.stats["plans_from_disk"]
        got, again = _realized(_layers(widths)[1])
    templates.registry.clear()
    assert engine.stats["plans_from_disk"] == from_disk + disk_plans
    assert [k.code_symbol for k in again] == [k.code_symbol for k in made]
    assert all(k.generic and k.cache != "compiled" for k in again)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_plan_is_made_in_two_rounds_only_where_kernels_may_share(fresh, monkeypatch):
    # lowering and compiling each kernel in one claim overlaps the two; a plan whose
    # kernels may share needs every source before it compiles
    from fusegrad.runtime import cpu_backend

    compiled_with_lowering = []
    real = cpu_backend.CpuBackend._lowered

    def lowered(self, items, compiled):
        compiled_with_lowering.append(compiled)
        return real(self, items, compiled)

    monkeypatch.setattr(cpu_backend.CpuBackend, "_lowered", lowered)
    _, kernels = _realized(_layers([40, 24])[1])
    assert compiled_with_lowering == [False] and all(k.generic for k in kernels)
    a = fg.tensor(np.ones((3, 40), np.float32))
    b = fg.tensor(np.ones((5, 24), np.float32))
    records = engine.realize([(a.exp() * 2).node, (b.relu() * 2).sum(dim=1).node])
    assert compiled_with_lowering == [False, True]
    assert not any(r.compiled.generic for r in records)


def test_shared_reads_the_literals_that_differ_and_keeps_the_others():
    def candidate(i, a, b, c, opt=3):
        code = (
            "define void @k(i64 %start, i64 %end) {\nentry:\n"
            f"  %t = mul i64 %start, {a}\n  %u = add i64 %t, {b}\n  %v = add i64 %u, {c}\n"
            "  ret void\n}"
        )
        return i, code, templates.shape_of(code), opt

    one = [candidate(0, 14, 3, 7), candidate(1, 20, 3, 20), candidate(2, 30, 3, 30)]
    out = templates.shared([*one, candidate(3, 14, 3, 8, opt=2)])  # (another level: alone)
    assert sorted(out) == [0, 1, 2]
    g = out[0][1]
    assert all(out[i][1] is g for i in (0, 1, 2))
    # the 3 never differs: a constant still; the first and third literals differ, and are
    # equal in two of the kernels only, so each reads a slot of its own
    assert g.kept == ("3",)
    assert g.groups == ((0,), (2,))
    assert all(g.serves(out[i][0]) for i in (0, 1, 2))


def test_shared_leaves_kernels_whose_literals_are_all_equal():
    code = (
        "define void @k(i64 %start, i64 %end) {\nentry:\n  %t = mul i64 %start, 14\n  ret void\n}"
    )
    shape = templates.shape_of(code)
    assert templates.shared([(0, code, shape, 3), (1, code, shape, 3)]) == {}
