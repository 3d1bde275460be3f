"""The disk cache of whole plans (`pipeline/plan_store.py`): a warm start reads a step's
plan instead of expanding, scheduling and describing its graph, computes the same bits,
and never loads a plan made for anything else.

Keys are checked on real graphs' structural keys (every part changes the key: the graph,
the code's version, a setting; what cannot be spelled exactly gets none); entries for
damage and swaps; a second process for doing no scheduling and computing the same bits.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _files import run_in_child

import fusegrad as fg
from fusegrad.ir import dtypes
from fusegrad.ir.ops import Ops
from fusegrad.pipeline import plan_store
from fusegrad.pipeline.schedule import structural_key
from fusegrad.runtime.engine import engine


@pytest.fixture
def cache(tmp_path):
    with fg.config.override(cache=str(tmp_path / "cache"), disk_plans=True):
        yield tmp_path / "cache"


def key_of(*tensors) -> tuple:
    key, _ = structural_key([t.node for t in tensors], engine.has_value_predicate())
    return key


def disk_key(*tensors, device="cpu", options="o") -> str | None:
    return plan_store.plan_key(key_of(*tensors), device, options)


def x_of(n=8, dtype="float32"):
    return fg.tensor(np.linspace(-1, 1, n).astype(dtype))


def test_dtypes_unpickle_as_the_one_object_of_their_name():
    for dt in dtypes.ALL_DTYPES:
        assert pickle.loads(pickle.dumps(dt)) is dt
        assert pickle.loads(pickle.dumps([dt], protocol=0))[0] is dt


def test_the_same_graph_on_other_buffers_has_one_key(cache):
    a, b = x_of(), x_of()
    assert disk_key((a * 2.0).exp()) == disk_key((b * 2.0).exp()) is not None


@pytest.mark.parametrize(
    "make_a, make_b",
    [
        (lambda: x_of() * 2.0, lambda: x_of() * 3.0),  # a constant's value
        (lambda: x_of() * 0.0, lambda: x_of() * -0.0),  # its sign
        (lambda: x_of(8) * 2.0, lambda: x_of(9) * 2.0),  # a shape
        (lambda: x_of() * 2.0, lambda: x_of(dtype="float64") * 2.0),  # a dtype
        (lambda: x_of().exp(), lambda: x_of().log()),  # an op
        (lambda: x_of().reshape(2, 4).sum(0), lambda: x_of().reshape(2, 4).sum(1)),  # an axis
    ],
)
def test_graphs_that_differ_have_other_keys(cache, make_a, make_b):
    assert disk_key(make_a()) != disk_key(make_b())


def test_the_device_options_settings_and_code_are_in_the_key(cache, monkeypatch):
    t = x_of().exp()
    first = disk_key(t)
    assert disk_key(t, device="cuda") != first
    assert disk_key(t, options="other") != first
    with fg.config.override(program=False):
        assert disk_key(t) != first
    with fg.config.override(debug=1, recompile_warning=3):  # report only: the same plan
        assert disk_key(t) == first
    monkeypatch.setattr(plan_store, "package_version", lambda: "another version")
    assert disk_key(t) != first


def test_no_key_without_a_cache_folder_or_for_what_cannot_be_spelled(cache):
    """...and requests to cut or fuse are part of the key, as in memory."""
    t = x_of().exp()
    assert plan_store.plan_key(key_of(t), "cpu", "") is not None
    with fg.config.override(cache=None):
        assert plan_store.plan_key(key_of(t), "cpu", "") is None
    with fg.config.override(disk_plans=False):  # FUSEGRAD_DISK_PLANS=0
        assert plan_store.plan_key(key_of(t), "cpu", "") is None
    assert plan_store.plan_key((object(),), "cpu", "") is None
    assert plan_store.plan_key(((1, 2.0, "a", None, (True,)), len), "cpu", "") is None
    assert plan_store.plan_key(((1, 2.0), np.zeros(2)), "cpu", "") is None
    y = x_of() * 3.0
    fused = disk_key(y.exp())
    fg.debug.cut(y)  # steering requests are in the key
    assert None is not disk_key(y.exp()) != fused is not None


def test_spellings_keep_types_and_nesting_apart(cache):
    # equal-comparing values of other types, and other nestings, never share a key; nor
    # do -0.0 and 0.0, or nans of other payloads
    keys = [
        ((1, 2),),
        ((True, 2),),
        ((1.0, 2),),
        (1, 2),
        (((1,), 2),),
        ((1, (2,)),),
        ((),),
        ((None,),),
        (("1", 2),),
        ((0.0,),),
        ((-0.0,),),
        ((float("nan"),),),
        ((np.frombuffer(np.uint64(0x7FF8000000000001).tobytes(), np.float64)[0].item(),),),
    ]
    spelled = {plan_store.plan_key(k, "cpu", "") for k in keys}
    assert None not in spelled and len(spelled) == len(keys)


def test_ops_dtypes_and_types_are_spelled_apart_from_plain_values(cache):
    # an op, a dtype or a type is written as bytes of its own (`_plain`): a key holding
    # bytes, or the names as strings, is another key, never the same one
    keys = [
        ((Ops.ADD,),),
        ((Ops.MUL,),),
        (("ADD",),),
        ((b"op:ADD",),),
        ((dtypes.float32,),),
        ((dtypes.float64,),),
        (("float32",),),
        ((b"dtype:float32",),),
        ((int,),),
        ((float,),),
        ((b"type:builtins.int",),),
    ]
    spelled = {plan_store.plan_key(k, "cpu", "") for k in keys}
    assert None not in spelled and len(spelled) == len(keys)


def test_equal_keys_are_spelled_alike_however_their_parts_are_shared(cache):
    shape = (16, 32)
    shared = ((Ops.ADD, shape, dtypes.float32, shape, shape),)
    copies = ((Ops.ADD, (16, 32), dtypes.float32, tuple([16, 32]), tuple([16, 32])),)
    assert plan_store.plan_key(shared, "cpu", "") == plan_store.plan_key(copies, "cpu", "")
    real = key_of((x_of() * 2.0).exp())
    assert plan_store.plan_key(real, "cpu", "") == plan_store.plan_key(
        pickle.loads(pickle.dumps(real)), "cpu", ""
    )


def plan_files(cache: Path) -> list[Path]:
    return sorted((cache / "plans").rglob("*.pkl"))


def test_a_stored_plan_loads_and_runs_to_the_same_bits(cache):
    x = fg.tensor(np.linspace(-3, 3, 64 * 48, dtype=np.float32).reshape(64, 48))
    want = (x.softmax(1) * 2 - x.amax(1, keepdim=True)).numpy()
    (path,) = plan_files(cache)
    engine.forget_plans(lambda key: True)  # a new process's plans: none
    before = engine.stats["plans_from_disk"]
    got = (x.softmax(1) * 2 - x.amax(1, keepdim=True)).numpy()
    assert engine.stats["plans_from_disk"] == before + 1
    assert got.tobytes() == want.tobytes()
    assert plan_files(cache) == [path]
    xs = np.linspace(-3, 3, 64 * 48).reshape(64, 48)
    e = np.exp(xs - xs.max(1, keepdims=True))
    np.testing.assert_allclose(
        got, 2 * e / e.sum(1, keepdims=True) - xs.max(1, keepdims=True), rtol=1e-5, atol=1e-5
    )


def test_a_plan_read_ahead_is_the_one_the_engine_then_runs(cache, monkeypatch):
    """`CpuBackend.load_ahead` (a warm start's thread, at import) reads a plan the last run
    used; the engine's `load_plan` then takes that very plan, reading nothing again, and
    notes it among the plans used (what the next run reads ahead)."""
    from fusegrad.runtime import cpu_backend
    from fusegrad.runtime.backend import get_backend

    monkeypatch.setattr(cpu_backend, "_ahead", {})
    monkeypatch.setattr(cpu_backend, "_used", {})
    x = fg.tensor(np.linspace(-3, 3, 32 * 24, dtype=np.float32).reshape(32, 24))
    want = ((x * 3).tanh().sum(1) - 1).numpy()
    (path,) = plan_files(cache)
    backend = get_backend("cpu")
    assert backend.plans_used() == [path.stem]  # (kept)
    cpu_backend._used.clear()
    assert backend.load_ahead([path.stem, "0" * 64]) == 1  # (one on disk, one not)
    ahead = cpu_backend._ahead[path.stem]
    reads = []
    monkeypatch.setattr(cpu_backend, "_read_plan", lambda key: reads.append(key))
    assert backend.load_plan(path.stem) is ahead and not cpu_backend._ahead and not reads
    assert backend.plans_used() == [path.stem]
    engine.forget_plans(lambda key: True)  # a new process's plans: none
    monkeypatch.undo()  # (read from disk as it was)
    assert ((x * 3).tanh().sum(1) - 1).numpy().tobytes() == want.tobytes()


def test_a_plan_read_back_has_the_records_and_scratch_layout_it_was_stored_with(cache):
    from fusegrad.runtime.cpu_backend import _scratch_layout

    x = fg.tensor(np.linspace(-3, 3, 64 * 40, dtype=np.float32).reshape(64, 40))
    a = (x * 2).exp()
    b = (a - a.amax(1, keepdim=True)).sum(1)  # a value that dies inside: scratch
    engine.realize([b.node])
    (path,) = plan_files(cache)
    made = next(p for p in engine.plans.values() if p.steps and p.scratch_layout)
    read = plan_store.load(path.stem, lambda loop, src: len(loop.params))
    assert read.scratch_layout == made.scratch_layout == _scratch_layout(made)
    assert len(read.steps) == len(made.steps) >= 2
    for r, m in zip(read.steps, made.steps):
        assert (r.record.name, r.record.ops, r.record.shape) == (
            m.record.name,
            m.record.ops,
            m.record.shape,
        )
        assert (r.outs, r.inputs, r.frees) == (m.outs, m.inputs, m.frees)


def test_a_damaged_or_swapped_entry_is_a_miss(cache):
    a, b = x_of(64), x_of(96)
    (a * 2.0).exp().numpy()
    (b.tanh() + 1).numpy()
    pa, pb = plan_files(cache)
    da, db = pa.read_bytes(), pb.read_bytes()
    ka, kb = pa.stem, pb.stem
    pa.write_bytes(db)  # another plan's whole, checksummed entry
    pb.write_bytes(db[: len(db) // 2])  # cut short
    assert plan_store.load(ka, lambda loop, src: 0) is None
    assert plan_store.load(kb, lambda loop, src: 0) is None
    pa.write_bytes(da)
    assert plan_store.load(ka, lambda loop, src: len(loop.params)) is not None
    # and a damaged entry costs a compile, never a wrong answer
    pb.write_bytes(b"\0" * len(db))
    engine.forget_plans(lambda key: True)
    got = (b.tanh() + 1).numpy()
    np.testing.assert_allclose(got, np.tanh(np.linspace(-1, 1, 96)) + 1, rtol=1e-6)


# ---------------------------------------------------------------- a second process

SCRIPT = """\
import json, sys
import numpy as np
import fusegrad as fg
from fusegrad import nn
from fusegrad.pipeline import compiler
from fusegrad.runtime import engine, phases

fg.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.LayerNorm(64), nn.Linear(64, 10))
opt = fg.optim.Adam(model.parameters(), lr=1e-2)
x = fg.tensor(np.linspace(-2, 2, 16 * 32, dtype=np.float32).reshape(16, 32))
y = fg.tensor(np.arange(16) % 10)
losses = []
for _ in range(3):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
weights = [p.numpy() for p in model.parameters()]
np.savez(sys.argv[1], losses=np.array(losses), *weights)
print(json.dumps({**compiler.stats, **phases.snapshot(), **engine.stats}))
"""


def run_child(tmp_path: Path, cache: Path, tag: str) -> tuple[dict, dict]:
    return run_in_child(SCRIPT, tmp_path, cache, tag)


def test_a_warm_start_schedules_nothing_and_computes_the_same_bits(tmp_path):
    cache = tmp_path / "cache"
    cold, first = run_child(tmp_path, cache, "cold")
    assert cold["plans_from_disk"] == 0 and cold["scheduled"] > 0 and cold["compiled"] > 0
    assert plan_files(cache)
    warm, second = run_child(tmp_path, cache, "warm")
    assert warm["plans_from_disk"] == warm["scheduled"] == cold["scheduled"]
    assert warm["schedule"] == 0.0 and warm["render"] == 0.0 and warm["compiled"] == 0
    for k in first:
        assert first[k].tobytes() == second[k].tobytes(), k
    assert np.all(np.isfinite(first["losses"])) and first["losses"][2] < first["losses"][0]


def test_the_sources_are_hashed_on_a_thread_of_fusegrads_own(cache, monkeypatch):
    """At import the package's and the code generator's sources are hashed on a thread
    of fusegrad's own (which a fork may run beside), so a warm first step does not read
    them; the hashes are those read on the calling thread."""
    from fusegrad.pipeline import item_cache
    from fusegrad.runtime import forksafe

    want = (plan_store.package_version(), item_cache.code_version())
    plan_store.package_version.cache_clear()
    item_cache.code_version.cache_clear()
    monkeypatch.setattr(plan_store, "_prefetch", None)
    plan_store.prefetch_versions()
    thread = plan_store._prefetch
    assert thread is not None and thread in forksafe._threads
    thread.join()
    assert plan_store.package_version.cache_info().currsize == 1
    assert (plan_store.package_version(), item_cache.code_version()) == want
    with fg.config.override(cache=None):  # no plans on disk: nothing to hash ahead
        monkeypatch.setattr(plan_store, "_prefetch", None)
        plan_store.prefetch_versions()
        assert plan_store._prefetch is None


PREFILL_SCRIPT = """\
import json, sys, threading
import numpy as np
import fusegrad as fg
from fusegrad import nn
from fusegrad.runtime import buffer

for t in threading.enumerate():  # (made ahead while this builds its model: waited for here)
    if t.name == "fusegrad-prefill":
        t.join()
ahead = len(buffer._prefilled)
fg.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 10))
opt = fg.optim.SGD(model.parameters(), lr=1e-2)
x = fg.tensor(np.linspace(-2, 2, 128 * 256, dtype=np.float32).reshape(128, 256))
y = fg.tensor(np.arange(128) % 10)
for _ in range(3):
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    loss.item()
print(json.dumps({"ahead": ahead, "left": len(buffer._prefilled)}))
"""


def test_a_second_run_of_a_command_makes_its_first_step_s_buffers_ahead(tmp_path):
    """A run that read or kept plans on disk leaves the sizes it had to allocate in the
    cache (`<cache>/pool/`, by its command line); the next run of the same command makes
    them at import, pages faulted in, and its first step takes them (runtime/buffer.py's
    `prefill`). Another command finds none of them; a damaged file makes nothing."""
    script = tmp_path / "train.py"
    script.write_text(PREFILL_SCRIPT)
    cache = tmp_path / "cache"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    env["FUSEGRAD_CACHE"] = str(cache)

    def run(*args, debug: str = "0") -> dict:
        proc = subprocess.run(
            [sys.executable, str(script), *args],
            env={**env, "FUSEGRAD_DEBUG": debug},
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        run.stderr = proc.stderr
        return json.loads(proc.stdout.strip().splitlines()[-1])

    assert run() == {"ahead": 0, "left": 0}  # (nothing noted yet)
    (noted,) = (cache / "pool").glob("*.json")
    said = json.loads(noted.read_text())
    assert said["sizes"] and said["peak"] >= 128 * 512 * 4
    second = run(debug="1")
    assert second["ahead"] > 0 and second["left"] < second["ahead"]  # taken by its steps
    assert "MiB of buffers made ahead, as this command's last run used them" in run.stderr
    assert re.search(r"fusegrad: [1-9]\d* plan\(s\) read and", run.stderr)  # (read ahead)
    assert run("--another")["ahead"] == 0  # another command line: its own sizes
    noted.write_text("{not json")
    assert run()["ahead"] == 0
