"""The disk cache of scheduled kernels (`pipeline/item_cache.py`): a warm start skips
lowering and rendering, and never loads a kernel made for anything else.

Keys are checked on real schedule items: two items get one key exactly when they lower
to the same kernel, and every part of the key (the item, the code generator's version,
the host) changes it. Entries are checked for damage and swaps as the object files are
(`test_cache.py`), and a second process is checked to lower and render nothing and to
compute the same bits.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from _files import run_in_child

import fusegrad as fg
from fusegrad.pipeline import compiler, item_cache
from fusegrad.pipeline.llvm import render_llvm
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine


def items_of(*tensors):
    return schedule([t.node for t in tensors], engine.has_value_predicate())


def key_of(t) -> str:
    (item,) = items_of(t)
    key = item_cache.item_key(item)
    assert key is not None, item_cache.describe(item)
    return key


def x_of(n=8, dtype="float32"):
    return fg.tensor(np.linspace(-1, 1, n).astype(dtype))


# ---------------------------------------------------------------- keys


def test_the_same_kernel_on_other_buffers_has_one_key():
    a, b = x_of(), x_of()
    assert key_of((a * 2.0).exp()) == key_of((b * 2.0).exp())
    assert key_of(fg.tensor(np.ones((4, 6), np.float32)).sum(1)) == key_of(
        fg.tensor(np.zeros((4, 6), np.float32)).sum(1)
    )


@pytest.mark.parametrize(
    "make_a, make_b",
    [
        (lambda: x_of() * 2.0, lambda: x_of() * 3.0),  # a constant's value
        (lambda: x_of() * 0.0, lambda: x_of() * -0.0),  # its sign
        (lambda: x_of() + 1, lambda: x_of() + 1.0000001),  # the last bit of a float
        (lambda: x_of(8) * 2.0, lambda: x_of(9) * 2.0),  # a shape
        (lambda: x_of() * 2.0, lambda: x_of(dtype="float64") * 2.0),  # a dtype
        (lambda: x_of().exp(), lambda: x_of().log()),  # an op
        (lambda: x_of().reshape(2, 4).sum(0), lambda: x_of().reshape(2, 4).sum(1)),  # an axis
        (lambda: x_of().reshape(2, 4).T + 0, lambda: x_of().reshape(4, 2) + 0),  # a view
        (lambda: x_of().reshape(2, 4).amax(1), lambda: x_of().reshape(2, 4).sum(1)),
    ],
)
def test_items_that_differ_in_anything_their_code_reads_have_other_keys(make_a, make_b):
    assert key_of(make_a()) != key_of(make_b())


def test_which_input_is_which_is_in_the_key():
    a, b = x_of(), x_of(dtype="float64")
    assert key_of(a - b) != key_of(b - a)
    c, d = x_of(), x_of()
    # the same subtraction with its inputs in the other parameter order
    (left,), (right,) = items_of(c - d), items_of(d - c)
    assert left.inputs == [c.node, d.node] and right.inputs == [d.node, c.node]
    assert item_cache.item_key(left) == item_cache.item_key(right)  # in0 - in1 both


def test_a_value_stored_inside_the_sum_is_in_the_key():
    # rule 8 (pipeline/schedule.py): the same nodes, with and without the store of the requested
    # value v from inside the sum's loops, are two kernels
    v = fg.tensor(np.ones((4, 6), np.float32)) * 3 - 1
    (item,) = items_of(v.sum(0), v)
    assert item.at_source == [v.node]
    without = dataclasses.replace(item, at_source=[])
    assert item_cache.item_key(item) != item_cache.item_key(without)


def test_another_code_generator_or_host_is_another_key(monkeypatch):
    t = (x_of() * 2.0).exp()
    before = key_of(t)
    monkeypatch.setattr(item_cache, "code_version", lambda: "an edited pipeline/lower.py")
    edited = key_of(t)
    monkeypatch.undo()
    monkeypatch.setattr(compiler, "host_description", lambda: "llvmlite|19|znver4|+avx512f")
    other_host = key_of(t)
    assert len({before, edited, other_host}) == 3


def test_a_bfloat16_matmul_with_and_without_amx_has_two_keys(tmp_path):
    """FUSEGRAD_AMX=0 lowers a bfloat16 matmul onto the FMA tiles: it must not load the
    AMX kernel an earlier run cached, nor the other way round."""
    a = fg.ones(64, 64, dtype=fg.bfloat16)
    with fg.config.override(amx=True):
        item = items_of(a @ a)[-1]  # after the packing of the right operand
    keys = {item_cache.item_key(item, f"amx={on}") for on in (True, False)}
    assert len(keys) == 2
    with fg.config.override(cache=str(tmp_path), amx=False):
        got = (a @ a).float().numpy()
    assert np.array_equal(got, np.full((64, 64), 64.0, dtype=np.float32))


def test_the_code_version_covers_every_file_of_pipeline_and_ir(tmp_path, monkeypatch):
    """Editing any file the kernels come from (here in a copy of the packages) changes it."""
    folders = item_cache._source_folders()
    assert [Path(f).name for f in folders] == ["pipeline", "ir"]
    before = item_cache.code_version()
    copies = [tmp_path / Path(f).name for f in folders]
    for folder, copy in zip(folders, copies):
        shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(item_cache, "_source_folders", lambda: [str(c) for c in copies])
    versions = []
    try:
        for copy, name in [(None, None), (copies[0], "schedule.py"), (copies[1], "ops.py")]:
            if copy is not None:
                (copy / name).write_text((copy / name).read_text() + "\n# edited\n")
            item_cache.code_version.cache_clear()
            versions.append(item_cache.code_version())
    finally:
        monkeypatch.undo()
        item_cache.code_version.cache_clear()
    assert versions[0] == before  # the copies as they were: the same version
    assert len(set(versions)) == 3
    assert item_cache.code_version() == before


def test_an_item_that_cannot_be_spelled_exactly_gets_no_key():
    (item,) = items_of((x_of() * 2.0).exp())
    assert item_cache.describe(item) is not None
    # (nodes are immutable and their arguments plain: spell foreign arguments directly)
    with pytest.raises(item_cache._Unspellable):
        item_cache._spell(np.float32(2.0))
    with pytest.raises(item_cache._Unspellable):
        item_cache._spell((1, object()))
    assert item_cache._spell((1, -0.0, (float("nan"), "a"), None, True)) == (
        "(1,-0.0,(nan,'a'),None,True)"
    )


# ---------------------------------------------------------------- entries


@pytest.fixture
def cache(tmp_path):
    with fg.config.override(cache=str(tmp_path / "cache")):
        yield tmp_path / "cache"


def test_a_kernel_whose_item_gets_no_key_is_made_and_kept_nowhere(cache, monkeypatch):
    # (its key is None: it was once handed to `store`, which cut a folder name from it)
    monkeypatch.setattr(item_cache, "describe", lambda item: None)
    x = x_of(40)
    got = (x * 3.0 + 0.25).sin().numpy()
    want = np.sin(np.linspace(-1, 1, 40).astype(np.float32) * 3 + 0.25)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert not (cache / "items").exists()


def test_an_entry_holds_the_loop_ir_and_source_a_fresh_lowering_makes(cache):
    tensors = [
        (x_of(64) * 0.5 + 1.0).exp(),
        fg.tensor(np.ones((16, 32), np.float32)).softmax(1),
        fg.tensor(np.ones((16, 32), np.float32)) @ fg.tensor(np.ones((32, 8), np.float32)),
    ]
    for item in items_of(*tensors):
        key = item_cache.item_key(item)
        loop = lower(item)
        source = render_llvm(loop, "KERNEL")
        item_cache.store(key, loop, source)
        got_loop, got_source = item_cache.load(key)
        assert got_source == source
        assert render_llvm(got_loop, "KERNEL") == source
        assert (got_loop.flops, got_loop.parallel_extent) == (loop.flops, loop.parallel_extent)


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "items").rglob("*.pkl"))


def test_a_damaged_or_swapped_entry_is_a_miss(cache):
    (a,), (b,) = items_of(x_of() * 2.0), items_of(x_of(9).exp())
    ka, kb = item_cache.item_key(a), item_cache.item_key(b)
    for key, item in ((ka, a), (kb, b)):
        loop = lower(item)
        item_cache.store(key, loop, render_llvm(loop, "KERNEL"))
    pa, pb = Path(item_cache._entry_path(ka)), Path(item_cache._entry_path(kb))
    assert sorted([pa, pb]) == entries(cache)
    da, db = pa.read_bytes(), pb.read_bytes()
    pa.write_bytes(db)  # another kernel's whole, checksummed entry
    pb.write_bytes(db[: len(db) // 2])  # cut short
    assert item_cache.load(ka) is None and item_cache.load(kb) is None
    pa.write_bytes(da)
    assert item_cache.load(ka) is not None


# ---------------------------------------------------------------- a second process

SCRIPT = """\
import json, sys
import numpy as np
import fusegrad as fg
from fusegrad.pipeline import compiler
from fusegrad.runtime import phases

x = fg.tensor(np.linspace(-3, 3, 4096, dtype=np.float32), requires_grad=True)
w = fg.tensor(np.linspace(-1, 1, 64 * 32, dtype=np.float32).reshape(64, 32), requires_grad=True)
h = (x.reshape(64, 64) @ w).relu()
loss = (h.softmax(1) * h).sum() + (x * -0.0).exp().sum()
loss.backward()
fg.realize(loss, x.grad, w.grad)
np.savez(sys.argv[1], loss=loss.numpy(), gx=x.grad.numpy(), gw=w.grad.numpy())
print(json.dumps({**compiler.stats, **phases.snapshot()}))
"""


def run_child(tmp_path: Path, cache: Path, tag: str) -> tuple[dict, dict]:
    return run_in_child(SCRIPT, tmp_path, cache, tag)


def test_a_warm_start_lowers_and_renders_nothing_and_computes_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    cold, first = run_child(tmp_path, cache, "cold")
    assert cold["compiled"] > 0 and cold["render"] > 0
    assert entries(cache)
    warm, second = run_child(tmp_path, cache, "warm")
    assert warm["compiled"] == 0 and warm["disk_hits"] >= cold["compiled"] - 1
    assert warm["render"] == 0.0  # every kernel's source came from the cache
    for k in first:
        assert first[k].tobytes() == second[k].tobytes(), k
    # and the cold answers are right: the gradient of sum(relu(x W)) parts by numpy
    x = np.linspace(-3, 3, 4096, dtype=np.float64).reshape(64, 64)
    w = np.linspace(-1, 1, 64 * 32, dtype=np.float64).reshape(64, 32)
    h = np.maximum(x @ w, 0)
    e = np.exp(h - h.max(1, keepdims=True))
    s = e / e.sum(1, keepdims=True)
    assert np.allclose(first["loss"], (s * h).sum() + 4096.0, rtol=1e-4)


def test_an_edited_code_generator_never_reads_the_old_entries(cache, monkeypatch):
    """Entries made under one code version are hits under it and misses under another."""
    from fusegrad.runtime import cpu_backend

    lowered = []
    real_lower = cpu_backend.lower
    monkeypatch.setattr(
        cpu_backend, "lower", lambda item, **kw: lowered.append(item) or real_lower(item, **kw)
    )

    def first_step_under(version: str) -> np.ndarray:
        monkeypatch.setattr(item_cache, "code_version", lambda: version)
        engine.forget_plans(lambda key: True)  # a new process's plans: none
        lowered.clear()
        x = fg.tensor(np.linspace(-2, 2, 96, dtype=np.float32).reshape(8, 12))
        return ((x * 1.5).tanh().sum(1) - x.amax(1)).numpy()

    made = first_step_under("version A")
    assert lowered and entries(cache)
    assert np.array_equal(first_step_under("version A"), made) and lowered == []
    assert np.array_equal(first_step_under("version B"), made) and lowered  # lowered anew
    x = np.linspace(-2, 2, 96, dtype=np.float32).reshape(8, 12).astype(np.float64)
    np.testing.assert_allclose(made, np.tanh(x * 1.5).sum(1) - x.max(1), rtol=1e-5, atol=1e-5)
