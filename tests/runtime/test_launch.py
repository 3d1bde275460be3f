"""Launching kernels over threads, and what a user sees of them (FUSEGRAD_DUMP, FUSEGRAD_DEBUG).

The parallel loop of every kernel is claimed in chunks by the pool's threads
(tests/runtime/test_pool.py checks that they cover the loop exactly once). A
kernel's answer must not depend on how many threads ran it,
including more threads than the machine has cores. The dump and debug outputs
are checked in a child process, with the environment variables a user sets.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import fusegrad as fg
import fusegrad.runtime.launch as launch_module
from fusegrad.runtime.launch import PARALLEL_MIN_WORK

RNG = np.random.default_rng(7)

# ---------------------------------------------------------------- thread counts

ROWS, COLS = 257, 301  # odd sizes, so no thread count divides the loop evenly
assert ROWS * COLS >= PARALLEL_MIN_WORK  # big enough that the launcher splits it


def chain(x):
    if isinstance(x, np.ndarray):
        return np.maximum(np.exp(x * 0.5 + 1.0) * x - 3.0, 0.0) / (1 + x * x)
    return (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)


def softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CASES = {
    "elementwise chain": (chain, chain),
    "row sum": (lambda t: t.sum(1), lambda a: a.sum(axis=1)),
    "column sum": (lambda t: t.sum(0), lambda a: a.sum(axis=0)),
    "row max": (lambda t: t.amax(1), lambda a: a.max(axis=1)),
    "row argmax": (lambda t: t.argmax(1), lambda a: a.argmax(axis=1)),
    "row softmax": (lambda t: t.softmax(dim=1), softmax_np),
}


@pytest.mark.parametrize("case", list(CASES))
def test_results_do_not_depend_on_the_thread_count(case, monkeypatch):
    build, oracle = CASES[case]
    a = RNG.standard_normal((ROWS, COLS)).astype(np.float32)
    runs_seen: list[int] = []
    real_run = launch_module._Pool.run

    def recording_run(self, address, threads, extent, ptrs, *least):
        runs_seen.append(threads)
        return real_run(self, address, threads, extent, ptrs, *least)

    monkeypatch.setattr(launch_module._Pool, "run", recording_run)
    results = {}
    for threads in (1, 2, 3):  # 3 is more threads than this machine's cores
        runs_seen.clear()
        with fg.config.override(threads=threads, program=False):  # kernel by kernel
            # a fresh input buffer each time, so the kernels really run again
            y = build(fg.from_numpy(a))
            records = fg.kernels(y)
        results[threads] = np.array(y.numpy())
        assert records, "nothing ran"
        if threads > 1:
            # every kernel of the expression ran on all the threads
            assert runs_seen == [threads] * len(records), (case, threads, runs_seen)
        with fg.config.override(threads=threads):  # the cached schedule as one native program
            again = np.array(build(fg.from_numpy(a)).numpy())
        assert np.array_equal(again, results[threads]), (case, threads)
    want = oracle(a.astype(np.float64))
    np.testing.assert_allclose(results[1], want, rtol=2e-5, atol=2e-5)
    for threads in (2, 3):
        # bit for bit: each output element is computed by one thread with the same code
        assert np.array_equal(results[threads], results[1]), (case, threads)


def test_a_kernel_too_small_to_split_runs_on_the_calling_thread(monkeypatch):
    calls = []
    real_run = launch_module._Pool.run
    monkeypatch.setattr(
        launch_module._Pool, "run", lambda self, *a: calls.append(a) or real_run(self, *a)
    )
    a = RNG.standard_normal((16, 16)).astype(np.float32)
    with fg.config.override(threads=4):
        y = (fg.from_numpy(a) * 3.0).realize()
    assert calls == []
    np.testing.assert_allclose(y.numpy(), a * 3.0, rtol=1e-6)


# ---------------------------------------------------------------- child processes


def run_child(script: str, tmp_path: Path, env: dict[str, str], name: str = "user_script.py"):
    """Run `script` in a fresh Python with `env` added; returns (stdout, stderr, script lines)."""
    path = tmp_path / name
    text = textwrap.dedent(script)
    path.write_text(text)
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGRAD_")}
    child_env.update({"FUSEGRAD_CACHE": "off", **env})
    proc = subprocess.run(
        [sys.executable, str(path)],
        env=child_env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc.stdout, proc.stderr, text.splitlines()


def line_of(lines: list[str], marker: str) -> int:
    """The 1-based number of the script line carrying `# marker`."""
    (number,) = [i + 1 for i, line in enumerate(lines) if line.rstrip().endswith(f"# {marker}")]
    return number


USER_SCRIPT = """\
    import json
    import numpy as np
    import fusegrad as fg

    x = fg.from_numpy(np.linspace(-2, 2, 3 * 4096, dtype=np.float32).reshape(3, 4096))
    y = (x * 0.5).exp()  # ELEMENTWISE
    s = x.softmax(dim=1)  # SOFTMAX
    records = fg.kernels(y, s)
    print(json.dumps([
        {"name": r.name, "ops": r.ops, "lines": r.lines, "shape": list(r.shape),
         "input_shapes": [list(i) for i in r.input_shapes], "bytes": r.bytes,
         "flops": r.flops, "cache": r.cache}
        for r in records
    ]))
"""


def test_dump_writes_every_kernel_and_a_manifest(tmp_path):
    dump = tmp_path / "dump"
    out, _, lines = run_child(USER_SCRIPT, tmp_path, {"FUSEGRAD_DUMP": str(dump)})
    records = json.loads(out)
    assert len(records) >= 2  # the exp, and at least the softmax's last kernel

    manifest = json.loads((dump / "manifest.json").read_text())
    assert len(manifest) == len(records)
    expected_files = {"manifest.json", "schedules.json"}
    for i, (rec, entry) in enumerate(zip(records, manifest)):
        stem = f"{i:03d}_{rec['name']}"
        expected_files |= {stem + ext for ext in (".loop", ".ll", ".raw.ll", ".s", ".cu", ".json")}
        assert f"kernel {rec['name']}(" in (dump / f"{stem}.loop").read_text()
        optimized, raw = (dump / f"{stem}.ll").read_text(), (dump / f"{stem}.raw.ll").read_text()
        assert f"define void @{rec['name']}(" in optimized and "alloca" not in optimized
        assert "alloca" in raw  # the renderer's stack slots, before LLVM's passes
        assert f"{rec['name']}:" in (dump / f"{stem}.s").read_text()  # the symbol's label
        assert f"void {rec['name']}(" in (dump / f"{stem}.cu").read_text()
        for ext, comment in ((".loop", "//"), (".ll", ";"), (".s", "#"), (".cu", "//")):
            head = (dump / f"{stem}{ext}").read_text().split("\n\n", 1)[0].splitlines()
            assert head[0] == f"{comment} kernel {rec['name']}", (ext, head)
            assert all(line.startswith(comment) for line in head), (ext, head)
            assert any(line in " ".join(head) for line in rec["lines"]), (ext, head)
        for key in ("ops", "lines", "shape", "input_shapes", "bytes", "flops"):
            assert entry[key] == rec[key], (stem, key, entry[key], rec[key])
        assert entry["this_run"]["cache"] == "compiled"  # FUSEGRAD_CACHE=off: none from disk
        assert entry["this_run"]["compile_ms"] > 0
        assert entry["this_run"]["ms"] > 0  # a new schedule's first run times each kernel
        assert entry["bytes"] > 0 and entry["flops"] > 0
    assert set(os.listdir(dump)) == expected_files
    # schedules.json: each schedule's kernels in launch order, with bytes and times
    launched = [k for s in json.loads((dump / "schedules.json").read_text()) for k in s["kernels"]]
    assert [k["name"] for k in launched] == [r["name"] for r in records]
    assert [k["bytes"] for k in launched] == [r["bytes"] for r in records]
    assert all(k["this_run"]["ms"] > 0 for k in launched)

    user_lines = [line for entry in manifest for line in entry["lines"]]
    assert f"user_script.py:{line_of(lines, 'ELEMENTWISE')}" in user_lines
    assert f"user_script.py:{line_of(lines, 'SOFTMAX')}" in user_lines


def test_each_dump_folder_has_a_manifest_of_its_own_files(tmp_path):
    """Dumping two runs into two folders (to diff them): each manifest names its folder's files."""
    script = """\
        import numpy as np
        import fusegrad as fg

        x = fg.from_numpy(np.arange(12, dtype=np.float32).reshape(3, 4))
        with fg.config.override(dump="first"):
            (x * 2).exp().realize()
        with fg.config.override(dump="second"):
            x.softmax(dim=1).realize()
    """
    run_child(script, tmp_path, {})
    for folder in ("first", "second"):
        files = set(os.listdir(tmp_path / folder)) - {"manifest.json", "schedules.json"}
        manifest = json.loads((tmp_path / folder / "manifest.json").read_text())
        exts = (".loop", ".ll", ".raw.ll", ".s", ".cu", ".json")  # (.json: for replay)
        named = {entry["file"] + ext for entry in manifest for ext in exts}
        assert named == files, f"{folder}/manifest.json names {sorted(named)}; has {sorted(files)}"


def test_debug_2_prints_the_schedule_with_the_users_lines(tmp_path):
    out, err, lines = run_child(USER_SCRIPT, tmp_path, {"FUSEGRAD_DEBUG": "2"})
    records = json.loads(out)
    log = [line for line in err.splitlines() if line.startswith("fusegrad:")]
    assert f"fusegrad: schedule: {len(records)} kernel(s)" in log
    for i, rec in enumerate(records):
        # the schedule entry: index, the kernel's name, fused ops, output shape
        entry = f"[{i}] {rec['name']}: {' '.join(rec['ops'])} -> {tuple(rec['shape'])}"
        assert any(entry in line for line in log), (entry, log)
        # and the one line per kernel launched (debug level 1 and up)
        assert any(line.split()[1:2] == [rec["name"]] and "[compiled" in line for line in log), (
            rec["name"],
            log,
        )
    froms = {line.split("from ", 1)[1].split(" (")[0] for line in log if " from " in line}
    assert f"user_script.py:{line_of(lines, 'ELEMENTWISE')}" in froms
    assert f"user_script.py:{line_of(lines, 'SOFTMAX')}" in froms


def test_debug_0_prints_nothing(tmp_path):
    _, err, _ = run_child(USER_SCRIPT, tmp_path, {"FUSEGRAD_DEBUG": "0"})
    assert "fusegrad:" not in err


@pytest.mark.skipif(
    not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs two CPUs this process may use",
)
def test_workers_stay_off_the_callers_cpu():
    """A worker sharing the caller's CPU would take turns with it at every barrier."""
    pool = launch_module._pool
    with fg.config.override(threads=2):
        x = fg.randn(1 << 20)
        (x * 2).realize()  # big enough to run on both threads
    # where the caller ran when the workers were placed
    caller_cpu = int(pool.words[launch_module.native.Layout.PLACED_CPU])
    assert caller_cpu >= 0 and pool.workers
    for t in pool.workers:
        assert caller_cpu not in os.sched_getaffinity(t.native_id)


def test_default_threads_are_the_cpus_this_process_may_use():
    from fusegrad.runtime.config import _usable_cpus

    if hasattr(os, "sched_getaffinity"):
        assert _usable_cpus() == len(os.sched_getaffinity(0))


def test_compile_time_is_accounted_per_phase(capfd, tmp_path):
    fg.compile_times(reset=True)
    x = fg.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), requires_grad=True)
    # an empty disk cache: a warm one would skip lowering and rendering (pipeline/item_cache.py)
    with fg.config.override(debug=1, cache=str(tmp_path)):
        ((x * 3.25).sin() + 0.125).sum().backward()  # a graph no other test builds
        x.grad.realize()
    first = fg.compile_times()
    assert first["schedule"] > 0 and first["lower"] > 0 and first["render"] > 0
    assert first["llvm"] > 0 and first["autodiff"] > 0 and first["key"] > 0
    assert "new schedule, " in capfd.readouterr().err
    x.grad = None
    ((x * 3.25).sin() + 0.125).sum().backward()  # the same structure: a cache hit
    x.grad.realize()
    again = fg.compile_times(reset=True)
    for phase in ("schedule", "lower", "render", "llvm", "program"):
        assert again[phase] == first[phase], phase  # nothing compiled the second time
    assert again["key"] > first["key"]
    assert fg.compile_times() == dict.fromkeys(again, 0.0)


def test_kernels_run_inside_a_program_are_not_given_a_made_up_time():
    x = fg.tensor(np.arange(64, dtype=np.float32).reshape(8, 8))
    with fg.config.override(debug=0, program=True):
        for _ in range(2):  # the second run is a cached schedule: one native program
            recs = fg.kernels(x.softmax(0) * 0.375)
    assert len(recs) > 1
    assert all(r.seconds is None for r in recs)
    assert "not timed alone" in recs[0].summary()
    with fg.config.override(debug=1):
        timed = fg.kernels(x.softmax(0) * 0.375)  # launched one by one, each timed
    assert all(r.seconds is not None and r.seconds >= 0 for r in timed)


def test_a_cached_single_kernel_is_timed_only_inside_a_profile():
    """A cached plan of one kernel runs without the step-by-step machinery (the engine's
    `_run_one`). As a program's run, it is timed only where a profile asks
    (`kernel_times`): then its record is a copy, so the plan's own stays untimed;
    otherwise it reports the plan's records, untimed."""
    from fusegrad.runtime.engine import engine

    x = fg.tensor(np.arange(48, dtype=np.float32).reshape(6, 8))
    with fg.config.override(debug=0):
        first = fg.kernels(x.sum(1) * 0.625)
        out = (x.sum(1) * 0.625).realize()  # the same structure: a cache hit
        again = fg.kernels(out)
        with fg.config.override(kernel_times=True):
            timed = fg.kernels((x.sum(1) * 0.625).realize())
    assert len(first) == len(again) == len(timed) == 1
    assert again[0].seconds is None and "not timed alone" in again[0].summary()
    assert timed[0].seconds is not None and timed[0].seconds >= 0
    assert again[0].cache == timed[0].cache == "memory" and again[0].name == first[0].name
    np.testing.assert_allclose(out.numpy(), x.numpy().sum(1) * 0.625, rtol=1e-6)
    plan = next(
        p for p in engine.plans.values() if p.records and p.records[0].name == first[0].name
    )
    assert plan.records[0].seconds is None and plan.records[0] is not timed[0]


TRAINING_SCRIPT = """\
    import json
    import os
    import numpy as np
    import fusegrad as fg
    import fusegrad.nn as nn
    import fusegrad.nn.functional as F

    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = fg.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = fg.from_numpy(np.linspace(-1, 1, 5 * 12, dtype=np.float32).reshape(5, 12))
    y = fg.tensor([0, 1, 2, 1, 0])
    counts = []
    for step in range(6):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        counts.append(len(os.listdir(os.environ["FUSEGRAD_DUMP"])))
    print(json.dumps(counts))
"""


def test_dumps_are_written_once_per_schedule_and_identical_across_runs(tmp_path):
    """Two runs of one script dump byte-identical kernel files and manifests that differ
    only in their `this_run` fields; steps that reuse a schedule write nothing."""
    folders = []
    for run in ("one", "two"):
        out, _, _ = run_child(TRAINING_SCRIPT, tmp_path, {"FUSEGRAD_DUMP": run})
        counts = json.loads(out)
        assert counts[1] > 0 and counts[-1] == counts[2], counts  # nothing new after step 3
        folders.append(tmp_path / run)
    first, second = (sorted(os.listdir(f)) for f in folders)
    assert first == second
    for name in first:
        a, b = ((f / name).read_text() for f in folders)
        if name == "manifest.json":
            a, b = json.loads(a), json.loads(b)
            assert all(isinstance(e["this_run"]["compile_ms"], float) for e in a)
            for entry in a + b:
                del entry["this_run"]
        if name == "schedules.json":
            a, b = json.loads(a), json.loads(b)
            for entry in (k for s in a + b for k in s["kernels"]):
                del entry["this_run"]
        assert a == b, name
    manifest = json.loads((folders[0] / "manifest.json").read_text())
    assert len(first) == 6 * len(manifest) + 2  # .loop .ll .raw.ll .s .cu .json per kernel
    roles = {role for entry in manifest for role in entry["roles"]}
    assert roles == {"forward", "backward", "optimizer"}


def test_threads_leave_a_program_once_only_thread_0_has_work():
    """A parallel kernel then a tiny one (a full sum's parts, then their sum): the other
    threads arrive at the barrier between them and return; no barrier follows the last
    kernel (the caller joins the threads). Every kernel parallel: one barrier between
    each pair, none after the last."""
    from fusegrad.runtime.program import program_words, render_program

    big = PARALLEL_MIN_WORK
    tail = [(64, big, [0, 1]), (1, 64, [2, 0]), (1, 1, [3, 2])]
    # (`program_words`: the number of steps, then the first that thread 0 runs alone)
    # no full barrier (none before step 1), the others leave after step 0, the last ends
    assert list(program_words(tail, [0, 0, 0], 0)[2:4]) == [3, 1]
    code = render_program(tail, "P")
    assert "%meet = icmp ult i64 %j.1, %alone" in code and "%fin = icmp eq i64 %j.1, %count" in code
    assert "%leave = icmp eq i64 %j.1, %alone" in code
    assert "br i1 %is0, label %wait.l, label %end" in code
    every = [(64, big, [0, 1]), (64, big, [2, 0])]
    # a barrier after step 0, none after step 1 (the last: the program ends)
    assert list(program_words(every, [0, 0], 0)[2:4]) == [2, 2]
    x = np.random.default_rng(0).random(1 << 21).astype(np.float32)
    for threads in (1, 2, 3):
        with fg.config.override(threads=threads):
            for _ in range(2):  # the second run is the cached schedule, one native program
                got = fg.from_numpy(x).sum().item()
        assert got == pytest.approx(x.astype(np.float64).sum(), rel=1e-7)


def test_a_programs_code_does_not_grow_with_its_kernels():
    """The steps are a table the program's one loop walks, given with the kernels' addresses
    at run time: 400 kernels are the same code as 4, and as 4 of other sizes, so a plan
    whose kernels take the same counts of parameters compiles no program of its own."""
    from fusegrad.runtime.program import compile_program, program_words, render_program

    big = PARALLEL_MIN_WORK

    def steps(n, extent=64):  # parallel and small kernels, of 2 to 3 slots
        return [(extent, big if i % 3 else 1, [i, i + 1, i + 2][: 2 + i % 2]) for i in range(n)]

    few, many = render_program(steps(4), "P"), render_program(steps(400, 37), "P")
    assert few == many
    assert compile_program(steps(4)).address == compile_program(steps(400, 37)).address
    words = program_words(steps(400), list(range(400)), 0)
    assert len(words) == 4 + 400 + sum(6 + len(slots) for _, _, slots in steps(400))


def test_a_program_of_small_kernels_never_wakes_the_workers(monkeypatch):
    """Its kernels all run on thread 0, so the other threads would only arrive at the first
    barrier and leave: the program runs on the calling thread alone. A program with a
    large kernel still shares it among the threads."""
    pool = launch_module._pool
    calls = []
    real_run = type(pool).run

    def counting_run(self, address, threads, extent, ptrs, *least):
        calls.append(threads)
        return real_run(self, address, threads, extent, ptrs, *least)

    monkeypatch.setattr(type(pool), "run", counting_run)
    with fg.config.override(threads=2):
        x = fg.randn(8, 10).realize()
        small = x.softmax(1) * 2  # two small kernels: one native program
        for _ in range(3):  # the first run is timed; then the program untimed
            np.testing.assert_allclose(
                small.numpy(),
                2 * np.exp(x.numpy()) / np.exp(x.numpy()).sum(1, keepdims=True),
                rtol=1e-6,
            )
            small = x.softmax(1) * 2
        assert calls == []
        big = fg.randn(1024, 1024).realize()
        for _ in range(3):
            (big.softmax(1) * 2).realize()
        assert calls and all(n == 2 for n in calls)


@pytest.mark.parametrize("tail", ["a tiny kernel", "a parallel kernel"])
def test_a_program_s_chunk_counters_are_zero_after_every_run(tail):
    """The threads claim a parallel kernel's chunks from counters kept with the plan; the
    last thread out of each kernel zeroes them, so the next run claims the whole loop
    again (whether a barrier follows the kernel or it ends the program)."""
    from fusegrad.runtime.engine import engine

    x = np.random.default_rng(1).random((512, 256)).astype(np.float32)
    xt = fg.from_numpy(x)

    def build():
        y = (xt * 2.0).softmax(1)
        return y.sum() if tail == "a tiny kernel" else y * 3.0

    want = build().numpy()
    with fg.config.override(threads=2):
        for _ in range(30):
            got = build()
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    plans = [p for p in engine.plans.values() if p.program is not None and p.counters > 2]
    assert plans
    for plan in plans:
        # the counters end the table, but for the addresses of generic kernels' literals
        # (a plan of sizes that vary, left by an earlier test: `_program_arrays`)
        end = -len(plan.lits_words) or None
        for _, view, _, _ in plan.ready:
            assert (view[:end][-plan.counters + 2 :] == 0).all()


def test_a_small_kernel_runs_whole_on_this_thread_and_the_bounds_are_read_at_launch(
    monkeypatch,
):
    """A kernel under every bound (parallel, watched, long) runs whole here at once; the
    bounds are read at each launch, so lowering one sends the same kernel down the checked
    path again (the pool, the Ctrl-C watch)."""
    from fusegrad.runtime import launch

    x = fg.tensor(np.arange(64, dtype=np.float32))
    (x * 2 + 1).realize()  # compiled, cached
    whole, pooled = [], []
    real_whole = launch._run_whole
    monkeypatch.setattr(launch, "_run_whole", lambda *a: (whole.append(a[1]), real_whole(*a))[1])
    out = (x * 2 + 1).realize()
    assert len(whole) == 1
    np.testing.assert_array_equal(out.numpy(), np.arange(64) * 2 + 1)
    if not launch._POOL_OK:
        return
    monkeypatch.setattr(launch, "PARALLEL_MIN_WORK", 0)
    run = launch._pool.run
    monkeypatch.setattr(launch._pool, "run", lambda *a: (pooled.append(a), run(*a))[1])
    with fg.config.override(threads=2):
        out = (x * 3 + 1).realize()
        out2 = (x * 3 + 1 + 0 * x).realize()
    assert pooled  # the same small kernels, past the lowered bound: the pool's
    np.testing.assert_array_equal(out.numpy(), np.arange(64) * 3 + 1)
    np.testing.assert_array_equal(out2.numpy(), np.arange(64) * 3 + 1)
