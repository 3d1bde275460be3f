"""The bounded autotuner of register tiles (runtime/autotune.py).

Its cache key (a file per CPU model, features, LLVM and thread count; another host's
file is never read), its switch (FUSEGRAD_AUTOTUNE), its budget (a tuner past it stops,
keeps the best timed so far and saves nothing), the values of every candidate tile
(the same sums: bit for bit where the epilogue has no multiply-add LLVM could fuse in
one tile's kernel and not another's, and against numpy's float64 at special points), and
the kernel dump's record of the choice.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

import numpy as np
import pytest
from _special_rows import special_values

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.pipeline import compiler, tile_choice, tile_tuning
from fusegrad.pipeline import lower as L
from fusegrad.pipeline.schedule import schedule
from fusegrad.pipeline.tile_choice import Tile
from fusegrad.pipeline.tile_tuning import TuningSpace, tuning_space
from fusegrad.runtime import autotune
from fusegrad.runtime.config import Config, ConfigError, config
from fusegrad.runtime.cpu_backend import CpuBackend
from fusegrad.runtime.dump import kernel_header

RNG = np.random.default_rng(32)


@pytest.fixture(autouse=True)
def small_kernels_are_tuned(monkeypatch):
    """The tests' products are small (a few million multiply-adds): let them be tuned.
    Their candidates are those of a host with 32 vector registers (AVX-512: rows 4 to 16
    of 32 lanes, grids), whatever the host (`test_a_narrow_hosts_candidates` has the
    others'), and no plan lowered before under the host's own tiles is reused."""
    from fusegrad.runtime.engine import engine

    monkeypatch.setattr(tile_tuning, "TUNE_MIN_WORK", 1 << 22)
    monkeypatch.setattr(tile_choice, "wide_registers", lambda: True)
    engine.forget_plans(lambda key: True)
    yield
    engine.forget_plans(lambda key: True)


def special(*shape) -> np.ndarray:
    """Random float32 values with the special points mixed in (`special_values`)."""
    return special_values(RNG, *shape)


def item_and_inputs(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None):
    """The one schedule item of relu(a @ b + bias) (or a @ b), and its inputs' values in
    the kernel's parameter order."""
    ta, tb = fg.tensor(a), fg.tensor(b)
    y = ta @ tb
    values = {id(ta.node): a, id(tb.node): b}
    if bias is not None:
        tbias = fg.tensor(bias)
        values[id(tbias.node)] = bias
        y = (y + tbias).relu()
    (item,) = schedule([y.node], lambda n: n.op is Ops.BUFFER)
    return item, [values[id(n)] for n in item.inputs]


def run_kernel(kernel, inputs: list[np.ndarray]) -> np.ndarray:
    compiled = CpuBackend().compile(kernel)
    out = np.full(kernel.params[0].size, np.nan, np.float32)
    arrays = [out] + [np.ascontiguousarray(x, np.float32).reshape(-1) for x in inputs]
    ptrs = [x.ctypes.data for x in arrays]
    word = np.zeros(1, np.int64)  # the cancel word, never set, for a kernel that reads it
    ptrs += [word.ctypes.data] * (compiled.nparams - len(ptrs))  # (pipeline/llvm.py)
    compiled.fn(0, kernel.parallel_extent, *ptrs)
    return out


def space_of(item) -> tuple[TuningSpace, callable]:
    """The tuning space `lower` hands a tuner for `item`, and its `lowered` function."""
    got = {}

    def tuner(space, lowered):
        got["space"], got["lowered"] = space, lowered
        return lowered(space.default)

    L.lower(item, tuner=tuner)
    return got["space"], got["lowered"]


@pytest.mark.parametrize(
    "m, k, n, bias",
    [
        (96, 384, 128, False),  # 32 lanes: 8, 4 and 12 rows where AVX-512 runs full width
        (192, 512, 48, True),  # 16 lanes: up to 16 rows, with a bias and relu epilogue
        (96, 1024, 48, False),  # a long sum: 4 x 16 would cascade, 8 x 16 does not
    ],
)
def test_every_candidate_tile_computes_the_same_values(m, k, n, bias):
    a, b = special(m, k), special(k, n)
    c = special(n) if bias else None
    item, inputs = item_and_inputs(a, b, c)
    space, lowered = space_of(item)
    assert len(space.candidates) >= 2, space
    assert space.candidates[0] == space.default
    want = a.astype(np.float64) @ b.astype(np.float64)
    if bias:
        want = np.maximum(want + c, 0.0)
    outputs = {}
    for tile in space.candidates:
        kernel = lowered(tile)
        assert f"unrolled for i in 0..{tile.rows}" in str(kernel)
        out = run_kernel(kernel, inputs).reshape(m, n)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
        outputs[tile.rows] = out
    first = outputs[space.default.rows]
    for rows, out in outputs.items():  # the same sums in the same order: the same bits
        assert np.array_equal(out.view(np.uint32), first.view(np.uint32)), rows
    if bias:  # relu's boundary: -0 and 0 both come out as +0 or as computed, never nan
        assert not np.isnan(first).any() and (first >= 0).all()


def test_only_float32_contractions_of_enough_work_are_tuned(monkeypatch):
    """A small product (too short to time) and a float64 one get no tuning space."""
    small, _ = item_and_inputs(special(8, 16), special(16, 32))
    assert tuning_space(Tile(1, 32, 0, 8), small, [(0,), (1,)], [(2,)]) is None
    mlp, _ = item_and_inputs(special(64, 784), special(784, 128))
    assert tuning_space(Tile(1, 32, 0, 8), mlp, [(0,), (1,)], [(2,)]) is not None
    monkeypatch.undo()  # the real threshold: an MLP's layers (64 x 784 x 128) are not tuned
    assert tuning_space(Tile(1, 32, 0, 8), mlp, [(0,), (1,)], [(2,)]) is None


def test_candidates_sum_as_the_fixed_choice_does():
    """A long sum (K = 1024) in 16-lane tiles: 8 rows (the fixed choice) sum in one plain
    loop, 4 rows (64 accumulators) would sum as a cascade, another order: not a candidate."""
    item, _ = item_and_inputs(special(96, 1024), special(1024, 48))
    space, _ = space_of(item)
    assert space.default.rows == 8 and space.default.cols == 16
    assert 4 not in {t.rows for t in space.candidates}
    assert {12, 16} <= {t.rows for t in space.candidates}
    ta, tb = fg.tensor(special(96, 384)).double(), fg.tensor(special(384, 128)).double()
    items = schedule([(ta @ tb).node], lambda n: n.op is Ops.BUFFER)
    assert tuning_space(Tile(1, 32, 0, 8), items[-1], [(0,), (1,)], [(2,)]) is None


def test_a_narrow_hosts_candidates(monkeypatch):
    """With 16 vector registers (AVX2) the fixed tile is 6 rows of 16 lanes and the one
    other candidate 4 rows: more would not fit the accumulators' share of the registers;
    each candidate computes numpy's values."""
    monkeypatch.setattr(tile_choice, "wide_registers", lambda: False)
    a, b = special(96, 384), special(384, 128)
    item, inputs = item_and_inputs(a, b)
    space, lowered = space_of(item)
    assert (space.default.rows, space.default.cols) == (6, 16)
    assert sorted(t.rows for t in space.candidates) == [4, 6]
    want = a.astype(np.float64) @ b
    for tile in space.candidates:
        got = run_kernel(lowered(tile), inputs).reshape(want.shape)
        finite = np.isfinite(want)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        np.testing.assert_allclose(got[finite], want[finite], rtol=1e-4, atol=1e-3)


def batched_item(batch: int, m: int, k: int, n: int):
    """The one schedule item of a @ b with a (m, k) shared by a batch of b (batch, k, n):
    a's values are broadcast to the rows and b's read as vectors, and b moves with the
    batch, a does not: the batch is a second axis for a grid of rows (`grid_axis`)."""
    a, b = special(m, k), special(batch, k, n)
    ta, tb = fg.tensor(a), fg.tensor(b)
    y = ta @ tb
    (item,) = schedule([y.node], lambda n: n.op is Ops.BUFFER)
    values = {id(ta.node): a, id(tb.node): b}
    return item, [values[id(x)] for x in item.inputs], np.matmul(a.astype(np.float64), b)


def test_grid_candidates_sum_as_the_fixed_choice_does():
    """16-lane columns with a batch beside them: grids of rows x images are candidates
    (`TUNE_GRIDS`), each computing every output as the same sum, bit for bit."""
    item, inputs, want = batched_item(4, 96, 384, 48)
    space, lowered = space_of(item)
    assert space.default.cols == 16 and space.default.row2 is None
    grids = [t for t in space.candidates if t.row2 is not None]
    assert {t.label for t in grids} >= {"8x2", "4x4"}, space.candidates
    assert len({t.label for t in space.candidates}) == len(space.candidates)
    first = run_kernel(lowered(space.default), inputs)
    np.testing.assert_allclose(first.reshape(want.shape), want, rtol=1e-4, atol=1e-4)
    for tile in grids:
        kernel = lowered(tile)
        assert f"unrolled for j in 0..{tile.rows2}" in str(kernel), tile
        assert f"{tile.rows} x {tile.rows2} rows x 16 lanes" in kernel.tile_note
        out = run_kernel(kernel, inputs)
        assert np.array_equal(out.view(np.uint32), first.view(np.uint32)), tile.label


def test_no_grid_where_every_load_moves_with_the_batch():
    """A batched matmul whose two operands both move with the batch has nothing to share
    across it: no grid axis, no grid candidate."""
    ta, tb = fg.tensor(special(4, 96, 384)), fg.tensor(special(4, 384, 48))
    (item,) = schedule([(ta @ tb).node], lambda n: n.op is Ops.BUFFER)
    space, _ = space_of(item)
    assert all(t.row2 is None for t in space.candidates), space.candidates


def test_a_grid_is_chosen_saved_and_read_back_by_its_label(tmp_path, monkeypatch):
    item, _, _ = batched_item(4, 96, 384, 48)
    space, lowered = space_of(item)
    if not any(t.row2 is not None for t in space.candidates):
        pytest.skip("no grid candidates without AVX-512")
    timing = FakeTiming(
        monkeypatch, {t.label if t.row2 is not None else t.rows: 3.0 for t in space.candidates}
    )
    timing.cost["8x2"] = 1.0
    kernel = tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    assert "unrolled for j in 0..2" in str(kernel) and "unrolled for i in 0..8" in str(kernel)
    (path,) = (tmp_path / "autotune").iterdir()
    assert json.loads(path.read_text())["choices"][space.shape_class]["tile"] == "8x2"
    before = timing.launches
    again = tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    assert timing.launches == before and again.tile_note == kernel.tile_note


class FakeTiming:
    """A clock that only `launch` advances, by a cost per tile (rows -> seconds), and a
    `compile` that hands the kernel itself to that launch."""

    def __init__(self, monkeypatch, cost: dict[int, float], wrong: int | None = None):
        self.now, self.cost, self.launches, self.wrong = 0.0, cost, 0, wrong
        monkeypatch.setattr(autotune, "launch", self.launch)
        monkeypatch.setattr(autotune, "TIMED_RUNS", 1)

    def clock(self) -> float:
        return self.now

    def compile(self, kernel):
        return kernel

    def launch(self, kernel, extent, work, ptrs):
        self.launches += 1
        rows = kernel.tile_note.split("register tile ")[1].split(" rows")[0]
        rows = int(rows) if rows.isdigit() else rows.replace(" x ", "x")  # a grid: "8x2"
        self.now += self.cost[rows]
        if rows == self.wrong:  # a miscompiled candidate: one output is off
            ctypes.c_float.from_address(ptrs[0]).value = 12345.0


def tuner_with(folder, budget, timing) -> autotune.Autotuner:
    return autotune.Autotuner(folder, budget, timing.compile, clock=timing.clock)


def test_the_fastest_candidate_is_chosen_saved_and_read_back(tmp_path, monkeypatch):
    item, _ = item_and_inputs(special(96, 384), special(384, 128))
    space, lowered = space_of(item)
    assert {t.rows for t in space.candidates} >= {4, 8}
    cost = {t.rows: 3.0 for t in space.candidates} | {4: 1.0}
    timing = FakeTiming(monkeypatch, cost)
    kernel = tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    assert "unrolled for i in 0..4" in str(kernel) and not kernel.tile_provisional
    assert kernel.tile_note.startswith("register tile 4 rows x 32 lanes: autotuned for")
    (path,) = (tmp_path / "autotune").iterdir()
    saved = json.loads(path.read_text())
    assert saved["choices"][space.shape_class]["tile"] == "4"
    assert set(saved["choices"][space.shape_class]["ms"]) == {t.label for t in space.candidates}
    # a new process (a new tuner) reads the choice and times nothing
    before = timing.launches
    again = tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    assert timing.launches == before and "unrolled for i in 0..4" in str(again)
    assert again.tile_note == kernel.tile_note  # two runs dump the same header


def test_a_clearly_slower_candidate_is_run_once(tmp_path, monkeypatch):
    item, _ = item_and_inputs(special(96, 384), special(384, 128))
    space, lowered = space_of(item)
    timing = FakeTiming(monkeypatch, {t.rows: 3.0 for t in space.candidates})
    monkeypatch.setattr(autotune, "TIMED_RUNS", 3)
    timing.cost[space.default.rows] = 1.0
    tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    # the fixed choice: a warm-up and 3 timed runs; every other: a warm-up and one run
    assert timing.launches == 4 + 2 * (len(space.candidates) - 1)


def _not_the_fixed_choice(space) -> int:
    """The rows of a candidate other than the fixed choice (which the others are checked
    against, and which raises where it fails: it would untuned). Which tile is fixed
    depends on the CPU (4 rows on an AMD Zen 5, not on the Intel Xeon)."""
    return next(t.rows for t in space.candidates if t != space.default)


def test_a_candidate_with_other_values_is_never_chosen(tmp_path, monkeypatch):
    item, _ = item_and_inputs(special(96, 384), special(384, 128))
    space, lowered = space_of(item)
    bad = _not_the_fixed_choice(space)
    cost = {t.rows: 3.0 for t in space.candidates} | {bad: 1.0}
    timing = FakeTiming(monkeypatch, cost, wrong=bad)  # the fastest, and wrong
    with pytest.warns(RuntimeWarning, match=f"{bad} x 32 gave other values"):
        kernel = tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    assert f"unrolled for i in 0..{bad}" not in str(kernel)


def test_a_candidate_that_fails_to_compile_is_skipped(tmp_path, monkeypatch):
    item, _ = item_and_inputs(special(96, 384), special(384, 128))
    space, lowered = space_of(item)
    bad = _not_the_fixed_choice(space)
    timing = FakeTiming(monkeypatch, {t.rows: 1.0 for t in space.candidates} | {bad: 0.5})
    fine = timing.compile

    def compile(kernel):
        if f"register tile {bad} rows" in kernel.tile_note:
            raise RuntimeError("LLVM refused it")
        return fine(kernel)

    timing.compile = compile
    with pytest.warns(RuntimeWarning, match="LLVM refused it"):
        kernel = tuner_with(str(tmp_path), 100.0, timing)(space, lowered)
    assert f"unrolled for i in 0..{bad}" not in str(kernel)


def test_a_tuner_past_its_budget_stops_and_keeps_the_best_so_far(tmp_path, monkeypatch):
    item, _ = item_and_inputs(special(96, 384), special(384, 128))
    space, lowered = space_of(item)
    first, second = space.candidates[0].rows, space.candidates[1].rows
    assert len(space.candidates) >= 3  # one is never timed
    cost = {t.rows: 5.0 for t in space.candidates} | {first: 2.0, second: 1.0}
    timing = FakeTiming(monkeypatch, cost)
    # the first candidate costs 4 s (a warm-up and a timed run), the second 2 s: over 5 s
    kernel = tuner_with(str(tmp_path), 5.0, timing)(space, lowered)
    assert timing.launches == 4, "the third candidate was timed past the budget"
    assert f"unrolled for i in 0..{second}" in str(kernel)
    assert kernel.tile_provisional and "budget ran out" in kernel.tile_note
    assert not (tmp_path / "autotune").exists(), "an unfinished tuning was saved"
    # with no budget at all: the fixed choice, untimed
    timing.launches = 0
    kernel = tuner_with(str(tmp_path), 0.0, timing)(space, lowered)
    assert timing.launches == 0 and kernel.tile_provisional
    assert f"unrolled for i in 0..{first}" in str(kernel)


def test_the_cache_key_names_the_cpu_its_features_and_the_threads(tmp_path, monkeypatch):
    here = autotune.host_key()
    assert autotune.cpu_model() in here and compiler.host_description() in here
    assert f"threads={fg.config.threads}" in here or "threads=" in here
    tuner = autotune.Autotuner(str(tmp_path), 1.0)
    monkeypatch.setattr(compiler, "host_description", lambda: "llvmlite|19|znver4|+avx512f")
    other = autotune.Autotuner(str(tmp_path), 1.0)
    assert other.key != tuner.key and other.path != tuner.path
    # a file at this host's path that says it is another host's is not read
    os.makedirs(os.path.dirname(tuner.path))
    with open(tuner.path, "w") as f:
        json.dump({"host": other.key, "choices": {"c": {"tile": "4", "ms": {}}}}, f)
    assert autotune.Autotuner(tuner.folder, 1.0).choice("c") is None
    monkeypatch.undo()
    assert autotune.Autotuner(str(tmp_path), 1.0).choice("c") is None
    with open(tuner.path, "w") as f:
        f.write("{not json")
    assert autotune.Autotuner(str(tmp_path), 1.0).choice("c") is None


def test_the_switch(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_AUTOTUNE", "0")
    assert Config.from_env().autotune is False
    monkeypatch.setenv("FUSEGRAD_AUTOTUNE", "1")
    monkeypatch.setenv("FUSEGRAD_AUTOTUNE_BUDGET", "3")
    got = Config.from_env()
    assert got.autotune is True and got.autotune_budget == 3.0
    monkeypatch.setenv("FUSEGRAD_AUTOTUNE", "yes")
    with pytest.raises(ConfigError, match="FUSEGRAD_AUTOTUNE"):
        Config.from_env()
    assert config.autotune is False, "the tests run with the fixed tiles (conftest.py)"
    assert autotune.tuner_for_config(None) is None
    with config.override(autotune=True, cache=None):
        assert autotune.tuner_for_config(None) is not None
        # an MPI rank never tunes: every rank keeps the same fixed tiles
        monkeypatch.setitem(sys.modules, "mpi4py.MPI", object())
        assert autotune.tuner_for_config(None) is None


def test_a_matmul_tuned_end_to_end_records_its_tile_in_the_dump(tmp_path):
    a, b = special(104, 384), special(384, 128)  # a size no other test builds: a new plan
    want = a.astype(np.float64) @ b.astype(np.float64)
    with tuned_after(0, tmp_path):
        y = fg.tensor(a) @ fg.tensor(b)
        np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)
        (rec,) = fg.kernels(y)
    assert "autotuned for float32 sum" in rec.loop.tile_note, rec.loop.tile_note
    assert rec.loop.tile_note in kernel_header(rec)
    assert list((tmp_path / "autotune").iterdir())
    z = fg.tensor(a[:96]) @ fg.tensor(b)  # autotune off: the fixed choice, said so
    (rec,) = fg.kernels(z)
    assert rec.loop.tile_note.endswith("the fixed choice for this CPU"), rec.loop.tile_note
    np.testing.assert_allclose(z.numpy(), want[:96], rtol=1e-4, atol=1e-4)


def test_the_choices_are_in_the_key_of_the_lowered_kernels_cache(tmp_path, monkeypatch):
    """A kernel lowered under one set of tuned choices is never loaded under another:
    the disk cache of lowered kernels keys on a digest of this host's choices."""
    from fusegrad.runtime import cpu_backend

    with config.override(autotune=False):
        off = cpu_backend._options_key()
    with config.override(autotune=True, cache=str(tmp_path)):
        before = cpu_backend._options_key()
        item, _ = item_and_inputs(special(96, 384), special(384, 128))
        space, lowered = space_of(item)
        timing = FakeTiming(monkeypatch, {t.rows: 1.0 for t in space.candidates})
        tuner = autotune.tuner_for_config(None)
        tuner.compile, tuner.clock = timing.compile, timing.clock
        tuner(space, lowered)
        after = cpu_backend._options_key()
    assert len({off, before, after}) == 3


def test_kernels_made_side_by_side_are_tuned_after_alone(tmp_path, monkeypatch):
    """A new plan's kernels are made in forked copies of the process side by side; a
    candidate timed there would time the copies' load too. The tuner times nothing while
    they run (the kernels get the fixed tile, marked `tune_later`) and this process makes
    the marked ones again once the copies are done, alone, tuned."""
    deferring_when_timed = []
    real = autotune.Autotuner._time

    def timed(self, *args, **kwargs):
        deferring_when_timed.append(self.deferring)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(autotune.Autotuner, "_time", timed)
    from fusegrad.runtime import cpu_backend

    workers = []
    real_side_by_side = cpu_backend.side_by_side

    def side_by_side(count, make, n, forked=None):
        workers.append((count, n))
        return real_side_by_side(count, make, n, forked)

    monkeypatch.setattr(cpu_backend, "side_by_side", side_by_side)
    # two kernels, of two shape classes (rows rounded up: 128 and 256), each tuned
    a, b, c = special(96, 384), special(384, 128), special(192, 384)
    want = [x.astype(np.float64) @ b.astype(np.float64) for x in (a, c)]
    with config.override(
        autotune=True,
        autotune_budget=30.0,
        cache=str(tmp_path),
        compile_workers=2,
        autotune_after=0,
    ):
        ys = [fg.tensor(x) @ fg.tensor(b) for x in (a, c)]
        fg.realize(*ys)
        records = [rec for y in ys for rec in fg.kernels(y)]
    for y, w in zip(ys, want):
        np.testing.assert_allclose(y.numpy(), w, rtol=1e-4, atol=1e-4)
    assert workers == [(2, 2)]  # made side by side, by this process and a forked copy
    assert deferring_when_timed and not any(deferring_when_timed)
    for rec in records:
        assert "autotuned for float32 sum" in rec.loop.tile_note, rec.loop.tile_note
        assert not rec.loop.tune_later and not rec.loop.tile_provisional


def test_a_deferring_tuner_gives_the_fixed_tile_marked_for_later(tmp_path, monkeypatch):
    item, _ = item_and_inputs(special(96, 384), special(384, 128))
    space, lowered = space_of(item)
    with config.override(autotune=True, cache=str(tmp_path)):
        tuner = autotune.tuner_for_config(None)
        with autotune.deferred(tuner):
            kernel = tuner(space, lowered)
        assert not tuner.deferring
    assert kernel.tune_later and kernel.tile_provisional
    assert kernel.tile_note.endswith("the fixed choice (to be autotuned)"), kernel.tile_note
    assert not list(tmp_path.glob("autotune/*"))  # nothing timed, nothing saved


def tuned_after(runs: int, cache):
    """The settings of the tests of tuning once hot: the autotuner on, with time enough,
    tuning a plan at its `runs`-th run, plans kept on disk in `cache`."""
    return config.override(
        autotune=True,
        autotune_budget=30.0,
        cache=str(cache),
        autotune_after=runs,
        disk_plans=True,
    )


def test_a_new_plan_waits_for_no_timing_and_is_tuned_once_it_has_run_enough(tmp_path):
    """FUSEGRAD_AUTOTUNE_AFTER=n: a new plan's untuned contraction runs with the fixed tile,
    provisional, so its first run times nothing; at its n-th run the engine tunes it and
    puts the tuned kernel in the plan, which gives the same bits (the candidates sum
    alike) and is then kept on disk."""
    from fusegrad.runtime.engine import engine

    a, b = special(112, 384), special(384, 128)  # a size no other test builds: a new plan
    bias = special(128)
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64) + bias, 0)
    with tuned_after(3, tmp_path):
        ta, tb, tc = fg.tensor(a), fg.tensor(b), fg.tensor(bias)
        runs = []
        for _ in range(4):
            y = (ta @ tb + tc).relu()
            runs.append((y.numpy(), fg.kernels(y)[0]))
        plan_files = list((tmp_path / "plans").rglob("*.pkl"))
    first, last = runs[0][1], runs[-1][1]
    assert first.loop.tile_provisional
    assert first.loop.tile_note.endswith("the fixed choice (to be autotuned)"), first.loop.tile_note
    assert not list(tmp_path.glob("autotune/*")) or runs  # (nothing timed before run 3)
    assert "autotuned for float32 sum" in last.loop.tile_note, last.loop.tile_note
    assert not last.loop.tile_provisional and list((tmp_path / "autotune").iterdir())
    assert runs[1][1].loop is first.loop and runs[3][1].loop is not first.loop
    for out, _ in runs:
        assert out.tobytes() == runs[0][0].tobytes()
    np.testing.assert_allclose(runs[0][0], want, rtol=1e-4, atol=1e-4)
    assert len(plan_files) == 1  # kept on disk once every kernel had its tuned tile
    assert engine.stats["scheduled"] >= 1


def test_a_plan_waiting_to_be_tuned_keeps_no_value_alive_and_its_tuned_kernel_its_lines(
    tmp_path,
):
    """What a plan keeps to lower a kernel again at its n-th run (`Plan.tune_items`) is a
    copy of the schedule item without values: a batch of a size seen once is freed with its
    tensor, though its plan stays cached (a sweep over batch sizes held every batch and
    every old parameter before); tuned later, the kernel still names the user's line."""
    import weakref

    a, b = special(120, 448), special(448, 136)  # a size no other test builds: a new plan
    with tuned_after(3, tmp_path):
        ta, tb = fg.tensor(a), fg.tensor(b)
        gone = weakref.ref(ta.node.arg)  # the buffer holding a's values
        y = ta @ tb  # (the line the kernel names)
        first = fg.kernels(y)[0]
        assert first.loop.tile_provisional
        y.numpy()
        del ta, y
        assert gone() is None  # the cached plan keeps no input
        tc = fg.tensor(a)
        for _ in range(3):
            y = tc @ tb  # (the line the kernel names)
            y.numpy()
        tuned = fg.kernels(y)[0]
    assert not tuned.loop.tile_provisional
    assert any("test_autotune.py" in line for line in tuned.lines), tuned.lines
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_a_step_under_jit_is_tuned_in_place_too(tmp_path):
    """A jitted step replays its plans through the engine: they are counted and tuned as
    in the plain loop, and the replay picks the tuned kernels up."""
    a, b = special(120, 384), special(384, 128)
    with tuned_after(2, tmp_path):
        tb = fg.tensor(b)

        @fg.jit
        def step(x):
            return (x @ tb).relu()

        ta = fg.tensor(a)
        outs = [step(ta) for _ in range(5)]
        notes = [[r.loop.tile_note for r in fg.kernels(o) if r.loop.tile_note] for o in outs]
    notes = [n[0] for n in notes if n]  # (a call's records: those of its last plan run)
    assert notes[0].endswith("(to be autotuned)"), notes[0]
    assert "autotuned for float32 sum" in notes[-1], notes[-1]
    for o in outs:
        assert o.numpy().tobytes() == outs[0].numpy().tobytes()
    want = np.maximum(a.astype(np.float64) @ b.astype(np.float64), 0)
    np.testing.assert_allclose(outs[-1].numpy(), want, rtol=1e-4, atol=1e-4)


def test_the_plans_waiting_beside_a_hot_one_are_tuned_with_it_and_kept(tmp_path):
    """A training step's first plan runs once (its graph differs from the later steps'):
    when the later plan is tuned, the first is tuned too and kept on disk, so a second
    process's first step reads both."""
    a, b = special(136, 384), special(384, 128)
    with tuned_after(3, tmp_path):
        ta, tb = fg.tensor(a), fg.tensor(b)
        once = (ta @ tb).tanh()
        first = once.numpy()
        (rec,) = [r for r in fg.kernels(once) if r.loop.tile_note]
        assert rec.loop.tile_provisional
        for _ in range(3):
            hot = (ta @ tb).relu().numpy()
        again = (ta @ tb).tanh()
        assert again.numpy().tobytes() == first.tobytes()
        (rec,) = [r for r in fg.kernels(again) if r.loop.tile_note]
        plans = list((tmp_path / "plans").rglob("*.pkl"))
    assert "autotuned for float32 sum" in rec.loop.tile_note, rec.loop.tile_note
    assert len(plans) == 2
    np.testing.assert_allclose(hot, np.maximum(a.astype(np.float64) @ b, 0), rtol=1e-4, atol=1e-4)


def test_two_threads_tuning_one_plan_tune_it_once(tmp_path, monkeypatch):
    """Two threads at a plan's tenth run both ask for its tuning: one tunes it, once (the
    other finds nothing left), and the plan computes the same bits after."""
    import threading

    from fusegrad.runtime.engine import engine

    a, b = special(152, 384), special(384, 128)
    with tuned_after(1000, tmp_path):
        ta, tb = fg.tensor(a), fg.tensor(b)
        y = ta @ tb
        plan, _, _ = engine.plan_for([y.node])  # (compiled, not run yet)
        first = y.numpy()
        assert plan.tune_items
        lowered = []
        real = type(plan.backend).lower
        monkeypatch.setattr(
            type(plan.backend), "lower", lambda self, item: lowered.append(item) or real(self, item)
        )
        barrier = threading.Barrier(2)
        inside, most = [0], [0]  # threads inside the tuning now, and at most
        entered = threading.Event()
        real_waiting = engine._tune_waiting

        def waiting(p):
            inside[0] += 1
            most[0] = max(most[0], inside[0])
            if inside[0] > 1:
                entered.set()
            entered.wait(0.5)  # without the lock the other thread comes in meanwhile
            real_waiting(p)
            inside[0] -= 1

        monkeypatch.setattr(engine, "_tune_waiting", waiting)

        def tune():
            barrier.wait()
            engine.tune(plan)

        threads = [threading.Thread(target=tune) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert most[0] == 1  # one at a time
        assert len(lowered) == 1 and not plan.tune_items
        again = (ta @ tb).numpy()
    assert again.tobytes() == first.tobytes()
    np.testing.assert_allclose(first, a.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)
