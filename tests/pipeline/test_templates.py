"""Kernels the same up to their sizes run one generic kernel (pipeline/templates.py): a
plan of a graph compiled before with other sizes compiles only what differs in more than
its literals, and computes the same bits as kernels compiled for its own sizes."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import compiler, templates
from fusegrad.runtime.engine import engine

# the CPU's generic kernels, of LLVM IR (the cuda device's, of CUDA C:
# tests/pipeline/test_cuda_templates.py)
pytestmark = pytest.mark.cpu_device

# out[i] = in[i] * scale for i < n: a loop bound and a float constant, both literals
BODY = (
    "define void @{symbol}(i64 %start, i64 %end, ptr noalias %out0, ptr noalias readonly %in0)"
    + """ {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%i.1, %loop]
  %at = getelementptr inbounds float, ptr %in0, i64 %i
  %v = load float, ptr %at
  %w = fmul float %v, {scale}
  %to = getelementptr inbounds float, ptr %out0, i64 %i
  store float %w, ptr %to
  %i.1 = add nsw i64 %i, 1
  %more = icmp slt i64 %i.1, {n}
  br i1 %more, label %loop, label %done
done:
  ret void
}}
"""
)


def _hex(value: float, dtype=np.float32) -> str:
    """LLVM's literal of a float: the hexadecimal digits of the double of the same value."""
    bits = np.float64(dtype(value)).view(np.uint64).item()
    return "0x" + bits.to_bytes(8, "big").hex().upper()


def _source(n: int, scale: float) -> tuple[str, str]:
    symbol = f"k_{uuid.uuid4().hex[:12]}"
    return BODY.format(symbol=symbol, n=n, scale=_hex(scale)), symbol


def test_a_kernel_is_cut_into_its_shape_and_the_literals_that_could_be_values():
    a, sa = _source(14, 0.5)
    b, sb = _source(20, 2.0)
    shape_a = templates.shape_of(compiler.code_of(a, sa, 3)[0])
    shape_b = templates.shape_of(compiler.code_of(b, sb, 3)[0])
    assert shape_a.text == shape_b.text  # the names differ too: cut out
    # the phi's 0, the add's 1, the bound and the scale; not the types, names or labels
    assert shape_a.literals == ("0", "0x3FE0000000000000", "1", "14")
    assert shape_b.literals == ("0", "0x4000000000000000", "1", "20")
    assert shape_a.types == ("i64", "float", "i64", "i64")


def test_literals_that_are_not_values_stay_in_the_shape():
    # a vector's lanes, an alignment, a call's argument, a two-index address, a type's size
    code = (
        "define void @k(i64 %start, i64 %end, ptr noalias %out0) {\n"
        "entry:\n"
        "  %a = alloca [8 x float], align 64\n"
        "  %p = getelementptr inbounds [8 x float], ptr %a, i64 0, i64 3\n"
        "  %v = add <4 x i64> <i64 1, i64 2, i64 3, i64 4>, <i64 5, i64 6, i64 7, i64 8>\n"
        "  %e = extractelement <4 x i64> %v, i32 2\n"
        "  call void @llvm.prefetch.p0(ptr %out0, i32 0, i32 3, i32 1)\n"
        "  ret void\n"
        "}"
    )
    assert templates.shape_of(code).literals == ()


def _kernels(fn, sizes):
    """fn(x) realized for an x of each size, under a fresh cache; its result values, and the
    kernels each plan ran."""
    out, ran = [], []
    for n in sizes:
        x = fg.tensor(np.linspace(-3, 3, n * 24, dtype=np.float32).reshape(n, 24))
        y = fn(x)
        ran.append([r.compiled for r in engine.realize([y.node])])
        out.append(y.numpy())
    return out, ran


def _chain(x):
    return (x.relu() * 3 + x.exp()).sum(dim=1) / x.shape[0]


@pytest.fixture
def fresh(tmp_path):
    templates.registry.clear()
    engine.forget_plans(lambda key: True)  # (another test's plan of these sizes: not used)
    with fg.config.override(cache=str(tmp_path), size_templates=True):
        yield
    templates.registry.clear()


@pytest.fixture
def clean():
    templates.registry.clear()
    yield
    templates.registry.clear()


def _call(kernel, *ptrs: int, cancel: int | None = None) -> None:
    """Run `kernel` once over [0, 1) on these buffers: a kernel run through a generic kernel
    is given its literals after them, then the cancel word's address where it takes one."""
    lits = () if kernel.lits is None else (kernel.lits_address,)
    kernel.fn(0, 1, *ptrs, *lits, *(() if cancel is None else (cancel,)))


def _one_by_one(text: str, fills: list[dict], nparams: int) -> list:
    """`text` filled with each of `fills` (and a symbol of its own) and compiled in turn, in
    a plan whose sizes vary."""
    kernels = []
    with templates.varying([]):
        for fill in fills:
            symbol = f"k_{uuid.uuid4().hex[:12]}"
            job = (text.format(symbol=symbol, **fill), symbol, nparams, 3)
            kernels.append(compiler.compile_kernels([job])[0])
    return kernels


def test_sizes_that_vary_run_one_generic_kernel_with_the_same_bits(fresh):
    sizes = [5 + 7 * k for k in range(6)]
    before = compiler.stats["compiled"]
    got, ran = _kernels(_chain, sizes)
    compiled = compiler.stats["compiled"] - before
    with fg.config.override(size_templates=False):
        want, _ = _kernels(_chain, sizes)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)  # bit for bit
    # the first plan's kernels are its own; later plans' run a generic kernel
    assert not any(k.generic for k in ran[0])
    assert all(k.generic for plan in ran[2:] for k in plan)
    assert all("%fg.lits" in k.generic and k.literals for plan in ran[2:] for k in plan)
    # the sizes: fewer compiles than kernels (kernels of other sizes would each compile)
    assert compiled < sum(len(p) for p in ran)
    assert len({k.code_symbol for plan in ran[2:] for k in plan}) <= len(ran[1])


def test_the_values_agree_with_numpy_at_every_size(fresh):
    sizes = [1, 2, 3, 17, 64, 65]
    got, _ = _kernels(_chain, sizes)
    for n, g in zip(sizes, got):
        x = np.linspace(-3, 3, n * 24, dtype=np.float32).reshape(n, 24).astype(np.float64)
        want = (np.maximum(x, 0) * 3 + np.exp(x)).sum(axis=1) / n
        np.testing.assert_allclose(g, want, rtol=2e-6)


def _rows_and_columns(x):
    """Three kernels: a sum over each row, one over each column, and their product's."""
    return ((x.exp() / x.exp().sum(dim=1, keepdim=True)).sum(dim=0) * x.relu().sum()).sum()


def test_a_size_met_anew_lowers_its_few_items_here_without_a_fork(fresh, monkeypatch):
    """Once a graph's sizes vary, a new size's plan of a few kernels is lowered by this
    process, not by a forked copy (`cpu_backend.VARYING_FORK_MIN_ITEMS`): its kernels run
    the generic kernels compiled already (or code that names no size), nothing forks and
    nothing compiles, and the value is numpy's."""
    _kernels(_rows_and_columns, [40, 57, 83])
    forks = []
    real_fork = compiler._fork
    monkeypatch.setattr(compiler, "_fork", lambda body: forks.append(1) or real_fork(body))
    before = compiler.stats["compiled"]
    got, ran = _kernels(_rows_and_columns, [101])
    assert len(ran[0]) >= 2 and any(k.generic for k in ran[0])
    assert forks == [] and compiler.stats["compiled"] == before
    x = np.linspace(-3, 3, 101 * 24, dtype=np.float32).reshape(101, 24).astype(np.float64)
    want = ((np.exp(x) / np.exp(x).sum(1, keepdims=True)).sum(0) * np.maximum(x, 0).sum()).sum()
    np.testing.assert_allclose(got[0], want, rtol=1e-5)


def test_a_plan_whose_sizes_never_varied_compiles_its_own_kernels(fresh):
    # two kernels of one shape and other sizes in one plan: no plan of other sizes came
    # before, so each is compiled for its own sizes (sums are not shared inside a plan
    # either: tests/pipeline/test_shared_forms.py)
    a = fg.tensor(np.ones((3, 40), np.float32))
    b = fg.tensor(np.ones((5, 40), np.float32))
    ya, yb = (a.relu() * 2).sum(dim=1), (b.relu() * 2).sum(dim=1)
    records = engine.realize([ya.node, yb.node])
    assert len(records) == 2 and not any(r.compiled.generic for r in records)
    np.testing.assert_array_equal(yb.numpy(), np.full(5, 80, np.float32))


def test_switched_off_every_size_compiles_its_own_kernels(fresh):
    with fg.config.override(size_templates=False):
        _, ran = _kernels(_chain, [4, 9, 13])
    assert not any(k.generic for plan in ran for k in plan)


def test_a_literal_that_differs_later_makes_a_wider_generic_kernel(clean):
    fills = [{"n": 14, "scale": _hex(0.5)}, {"n": 20, "scale": _hex(0.5)}]
    fills.append({"n": 30, "scale": _hex(4.0)})  # the scale differs only now
    ka, kb, kc = _one_by_one(BODY, fills, 2)
    assert not ka.generic
    assert kb.literals == ("20",) and kc.literals == ("0x4010000000000000", "30")
    for k, n, scale in ((ka, 14, 0.5), (kb, 20, 0.5), (kc, 30, 4.0)):
        x = np.arange(1, 41, dtype=np.float32)
        y = np.zeros(40, np.float32)
        _call(k, y.ctypes.data, x.ctypes.data)
        np.testing.assert_array_equal(y[:n], x[:n] * np.float32(scale))
        assert not y[n:].any()  # the bound is each kernel's own


def test_a_plan_read_from_disk_runs_its_generic_kernels_again(tmp_path):
    # a new process (here: the memory caches emptied) reads the plan of a size it met and
    # runs each kernel as that plan did, through the generic kernel, compiling nothing
    templates.registry.clear()
    sizes = [6, 11, 23]
    with fg.config.override(cache=str(tmp_path), size_templates=True, disk_plans=True):
        want, ran = _kernels(_chain, sizes)
        assert all(k.generic for k in ran[-1])
        engine.plans.clear()
        engine._held.clear()
        engine._families.clear()
        templates.registry.clear()
        compiler._memory.clear()
        from_disk = engine.stats["plans_from_disk"]
        got, again = _kernels(_chain, sizes[-1:])
    templates.registry.clear()
    assert engine.stats["plans_from_disk"] == from_disk + 1
    assert all(k.generic and k.cache != "compiled" for k in again[0])
    np.testing.assert_array_equal(got[0], want[-1])


def test_a_plan_read_from_disk_parses_no_kernel_code_and_serves_new_sizes(tmp_path, monkeypatch):
    # the plan keeps each generic kernel's code and its literals' words: a load reads
    # them, and the generic kernels are made known only when a plan of new sizes is
    # compiled, which then runs them too, compiling nothing
    templates.registry.clear()
    with fg.config.override(cache=str(tmp_path), size_templates=True, disk_plans=True):
        want, _ = _kernels(_chain, [17, 27, 41, 47])  # (sizes no other test here runs)
        engine.plans.clear()
        engine._held.clear()
        engine._families.clear()
        templates.registry.clear()
        compiler._memory.clear()
        parse = templates._shape_of
        parsed = []
        monkeypatch.setattr(templates, "_shape_of", lambda code: parsed.append(1) or parse(code))
        got, again = _kernels(_chain, [41])
        assert not parsed and any(k.generic for k in again[0])
        assert all((k.lits is not None) == bool(k.generic) for k in again[0])
        assert templates.registry.pending  # (made known at the next look-up)
        before = compiler.stats["compiled"]
        later, ran = _kernels(_chain, [47])
    templates.registry.clear()
    assert compiler.stats["compiled"] == before and all(k.generic for k in ran[0])
    np.testing.assert_array_equal(got[0], want[2])
    np.testing.assert_array_equal(later[0], want[3])


def _two(x):
    return (x.softmax(dim=1) * x.sum(dim=0)).sum(dim=1) + x.max(dim=1).values


@pytest.mark.parametrize("program", [True, False])
def test_a_plans_generic_kernels_get_their_literals_in_its_program_and_alone(fresh, program):
    # a plan of several kernels runs as one native program, which passes a generic
    # kernel's literals from its table of buffers; kernel by kernel, the launcher does
    # (sizes of its own: the kernels compiled for their sizes below stay at hand, and a
    # kernel at hand runs as it is)
    sizes = [5, 9, 14, 22] if program else [6, 10, 15, 23]
    with fg.config.override(program=program):
        got, ran = _kernels(_two, sizes)
        engine.forget_plans(lambda key: True)
        with fg.config.override(size_templates=False):
            want, _ = _kernels(_two, sizes)
    assert len(ran[-1]) > 1 and any(k.generic for k in ran[-1])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_a_generic_kernels_listing_says_what_runs(fresh):
    _, ran = _kernels(_chain, [3, 8, 12])
    k = ran[-1][0]
    assert k.optimized_ir.startswith("; runs the generic kernel below with %fg.lits = [")
    assert k.asm.startswith("# runs the generic kernel below")
    assert "fg.lits" in k.optimized_ir
    assert "%fg.lits" not in k.source  # its own source, as rendered for its sizes


def test_plans_of_one_graph_at_other_sizes_share_a_size_free_key():
    from fusegrad.pipeline.schedule import structural_key
    from fusegrad.runtime.engine import _size_free

    def key(n: int, op):
        x = fg.tensor(np.ones((n, 7), np.float32))
        return _size_free(structural_key([op(x).node], engine.has_value_predicate())[0])

    def scaled(x):
        return (x * 2).sum(dim=1) / x.shape[0]

    assert key(3, scaled) == key(40, scaled)
    assert key(3, scaled) != key(3, lambda x: (x * 2).amax(dim=1))


POLLING = """define void @{symbol}(i64 %start, i64 %end, ptr noalias %out0, ptr %cancel.word) {{
entry:
  %w = load atomic i64, ptr %cancel.word monotonic, align 8
  %v = add i64 %w, {n}
  store i64 %v, ptr %out0
  ret void
}}
"""


def test_a_kernel_reading_the_cancel_word_gets_its_literals_before_it(clean):
    # the array of literals comes after the buffers and before the cancel word's address,
    # which the launcher passes last
    first, second = _one_by_one(POLLING, [{"n": 5}, {"n": 9}], 2)
    assert not first.generic and second.generic.count("ptr noalias readonly %fg.lits, ptr")
    word = np.array([100], np.int64)
    for kernel, n in ((first, 5), (second, 9)):
        out = np.zeros(1, np.int64)
        _call(kernel, out.ctypes.data, cancel=word.ctypes.data)
        assert out[0] == 100 + n


def test_each_kind_of_value_literal_is_cut_out():
    code = "\n".join(
        [
            "define void @k(i64 %start, i64 %end, ptr noalias %out0) {",
            "entry:",
            "  %a = fneg float 0x3FF0000000000000",
            "  %b = select i1 true, i64 7, i64 %start",
            "  %c = phi i64 [3, %entry], [%start, %x]",
            "  %d = insertelement <8 x i64> poison, i64 12, i64 0",
            "  %e = getelementptr inbounds float, ptr %out0, i64 40",
            "  store double 0x4000000000000000, ptr %out0",
            "  %f = icmp slt i32 %start, -3",
            "  ret void",
            "}",
        ]
    )
    shape = templates.shape_of(code)
    assert shape.literals == (
        "0x3FF0000000000000",
        "7",
        "3",
        "12",
        "40",
        "0x4000000000000000",
        "-3",
    )
    assert shape.types == ("float", "i64", "i64", "i64", "i64", "double", "i32")


WIDTHS = """define void @{symbol}(i64 %start, i64 %end, ptr noalias %out0) {{
entry:
  %a = add i32 0, {k}
  %f = sitofp i32 %a to double
  %g = fmul double %f, {d}
  store double %g, ptr %out0
  ret void
}}
"""


def test_a_generic_kernel_reads_i32_and_double_literals(clean):
    fills = [{"k": 3, "d": _hex(0.5, np.float64)}, {"k": -7, "d": _hex(1.25, np.float64)}]
    kernels = _one_by_one(WIDTHS, fills, 1)
    assert not kernels[0].generic and kernels[1].generic
    for kernel, want in zip(kernels, (1.5, -8.75)):
        out = np.zeros(1, np.float64)
        _call(kernel, out.ctypes.data)
        assert out[0] == want


def test_the_debug_log_says_when_a_graphs_sizes_start_to_vary(fresh, capfd):
    with fg.config.override(debug=1):
        _kernels(_chain, [4, 9, 13])
    err = capfd.readouterr().err
    assert err.count("compiled before with other sizes") == 1  # said once, at the second


def test_literals_equal_in_every_kernel_seen_read_one_slot(clean):
    # the bound appears twice: both places read one slot, so LLVM sees one value
    twice = "%more = icmp slt i64 %i.1, {n}\n  %x = mul i64 %i, {n}"
    body = BODY.replace("%more = icmp slt i64 %i.1, {n}", twice)
    fills = [{"n": 14, "scale": _hex(0.5)}, {"n": 20, "scale": _hex(0.5)}]
    _, second = _one_by_one(body, fills, 2)
    assert second.literals == ("20",) and len(second.groups) == 1
    assert len(second.groups[0]) == 2 and second.generic.count("%fg.lit.0.w =") == 1


def test_a_wider_generic_kernel_reads_each_literal_from_a_slot_of_its_own(clean):
    """The bound appears twice and is equal at 14 and 20 (one slot); the scale differs
    only at 30, so a wider generic kernel is made: it reads the bound's two places and the
    scale each from a slot of its own, so a kernel whose two places differ (40 and 24)
    runs it too, compiling nothing, with its own values."""
    twice = "%more = icmp slt i64 %i.1, {n}\n  %x = mul i64 %i, {m}"
    body = BODY.replace("%more = icmp slt i64 %i.1, {n}", twice)
    fills = [{"n": 14, "m": 14, "scale": _hex(0.5)}, {"n": 20, "m": 20, "scale": _hex(0.5)}]
    fills += [{"n": 30, "m": 30, "scale": _hex(4.0)}, {"n": 40, "m": 24, "scale": _hex(2.0)}]
    ka, kb, kc, kd = _one_by_one(body, fills, 2)
    assert not ka.generic and len(kb.groups) == 1 and len(kb.groups[0]) == 2
    assert kc.generic != kb.generic and [len(g) for g in kc.groups] == [1, 1, 1]
    assert kd.generic == kc.generic and kd.literals == ("0x4000000000000000", "40", "24")
    for k, n, scale in ((ka, 14, 0.5), (kb, 20, 0.5), (kc, 30, 4.0), (kd, 40, 2.0)):
        x = np.arange(1, 41, dtype=np.float32)
        y = np.zeros(40, np.float32)
        _call(k, y.ctypes.data, x.ctypes.data)
        np.testing.assert_array_equal(y[:n], x[:n] * np.float32(scale))
        assert not y[n:].any()


def test_a_ragged_vectors_lane_mask_keeps_its_bound_a_literal(fresh):
    """The mean of 1180, then 1231 and 1282 values: the last vector's lanes past the end
    are masked by a comparison with a bound that is a scalar literal in the text (not a
    constant vector of 64 lanes' offsets, which differs with the size), so the later sizes
    run the generic kernel, with numpy's values."""
    sizes = [1180, 1231, 1282]
    got, ran = _kernels(lambda x: x.reshape(-1)[: x.shape[0]].mean(), sizes)
    means = [k for plan in ran for k in plan if k.symbol.startswith("r_sum_scalar")]
    assert len(means) == 3 and not means[0].generic and means[2].generic
    for n, g in zip(sizes, got):
        x = np.linspace(-3, 3, n * 24, dtype=np.float32)[:n]
        np.testing.assert_allclose(g, x.astype(np.float64).mean(), rtol=1e-5, atol=1e-6)


def test_a_products_rows_take_one_tile_at_every_row_count(fresh):
    """x @ w for 16 rows, then 27, 35 and 29: in a plan whose sizes vary the register
    tile's rows no longer divide the row count (3, 7 and 1 rows would each be a kernel of
    its own shape); the last tile is shifted back to end at the last row, so the three
    later products are one kernel but for their literals, and the last two run generic
    kernels, with numpy's values and gradients."""
    w_np = np.linspace(-1, 1, 24 * 40, dtype=np.float32).reshape(24, 40)
    sizes = [16, 27, 35, 29]
    out, ran = [], []
    for n in sizes:
        x_np = np.linspace(-3, 3, n * 24, dtype=np.float32).reshape(n, 24)
        x, w = fg.tensor(x_np, requires_grad=True), fg.tensor(w_np, requires_grad=True)
        y = (x @ w).tanh()
        ran.append([r.compiled for r in engine.realize([y.node])])
        y.sum().backward()
        t = np.tanh(x_np.astype(np.float64) @ w_np)
        np.testing.assert_allclose(y.numpy(), t, rtol=1e-5, atol=2e-5)
        g = 1 - t * t
        np.testing.assert_allclose(x.grad.numpy(), g @ w_np.T, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(w.grad.numpy(), x_np.T @ g, rtol=1e-5, atol=1e-4)
        out.append(y.numpy())
    products = [[k for k in plan if k.symbol.startswith("r_")] for plan in ran]
    assert all(len(p) == 1 for p in products)
    later = [p[0] for p in products[1:]]
    shapes = {templates.shape_of(compiler.code_of(k.source, k.symbol, k.opt)[0]) for k in later}
    shapes = {shape.text for shape in shapes}
    assert len(shapes) == 1
    assert all(k.generic for k in later[1:])


def test_a_long_sums_cascade_takes_one_form_at_every_length(fresh):
    """Column sums over 1100 rows, then 1026, 1077 and 1270: in a plan whose sizes vary
    the cascade's levels are loops even where one runs once or never (1026 rows are 4
    blocks of 256 and 2 rows, no block of 16 or of 4096), so every length from 257 to
    65536 is one kernel but for its literals: the last two run a generic kernel, bit for
    bit what each length's own kernel computes (the same additions in the same order)."""
    sizes = [1100, 1026, 1077, 1270]
    got, ran = _kernels(lambda x: x.sum(0), sizes)
    with fg.config.override(size_templates=False):
        want, _ = _kernels(lambda x: x.sum(0), sizes)
    sums = [[k for k in plan if k.symbol.startswith("r_")] for plan in ran]
    assert all(len(p) == 1 for p in sums)
    assert len({_shape_text(k) for [k] in sums[1:]}) == 1
    assert all(k.generic for [k] in sums[2:])
    for n, g, w in zip(sizes, got, want):
        np.testing.assert_array_equal(g, w)
        x = np.linspace(-3, 3, n * 24, dtype=np.float32).reshape(n, 24).astype(np.float64)
        np.testing.assert_allclose(g, x.sum(0), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("divided", [18, 24, 36])
def test_rows_a_tile_divides_end_in_a_shifted_tile_in_a_plan_whose_sizes_vary(fresh, divided):
    """A product's register tile over the rows of a plan whose sizes vary: a row count the
    tile's rows divide (6, 3 and 2 divide 18, 24 and 36, and 4 and 8 divide 24) ends in a
    last tile shifted back, a whole tile, as a count they do not divide (29, 31) does, so
    its kernel differs from theirs only in its literals (on AVX2 a batch of 206 compiled a
    form of its own in an MLP's step), with numpy's values."""
    w = np.linspace(-1, 1, 24 * 40, dtype=np.float32).reshape(24, 40)
    sizes = [17, 29, divided, 31]
    got, ran = _kernels(lambda x: x @ fg.tensor(w), sizes)
    products = [[k for k in plan if k.symbol.startswith("r_")] for plan in ran]
    assert all(len(p) == 1 for p in products)
    assert len({_shape_text(k) for [k] in products[1:]}) == 1
    assert products[3][0].generic  # (29 and the divided count seen: 31 compiles nothing)
    for n, g in zip(sizes, got):
        x = np.linspace(-3, 3, n * 24, dtype=np.float32).reshape(n, 24).astype(np.float64)
        np.testing.assert_allclose(g, x @ w, rtol=1e-5, atol=1e-4)


def test_an_mlps_step_at_new_batch_sizes_runs_generic_kernels(fresh):
    """A 784-256-10 MLP's cross entropy and gradients at batches of 52, 103, 157 and 211:
    from 103 on each sum takes one tile at every batch (the rows of a tile of lanes along
    a sum and of its grid 4 whatever divides the batch, the last tile shifted back), so
    the kernels of 157 and 211 all run generic kernels, with numpy's values. (The later
    batches are primes: a count that a tile's rows divide has no shifted last tile, a form
    of its own, and which counts those are depends on the host's tiles: 2 rows on AVX2,
    where 206 made one.)"""
    rng = np.random.default_rng(0)
    w1 = rng.standard_normal((256, 784)).astype(np.float32) / 28
    w2 = rng.standard_normal((10, 256)).astype(np.float32) / 16
    sums = []
    for n in [52, 103, 157, 211]:
        x_np = rng.standard_normal((n, 784)).astype(np.float32)
        y_np = rng.integers(0, 10, size=n)
        a, b = fg.tensor(w1, requires_grad=True), fg.tensor(w2, requires_grad=True)
        loss = fg.nn.functional.cross_entropy((fg.tensor(x_np) @ a.T).relu() @ b.T, fg.tensor(y_np))
        loss.backward()
        ran = [r.compiled for r in engine.realize([a.grad.node, b.grad.node])]
        sums.append([k for k in ran if k.symbol.startswith("r_")])
        x = x_np.astype(np.float64)
        h = np.maximum(x @ w1.T, 0)
        z = h @ w2.T
        p = np.exp(z - z.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        np.testing.assert_allclose(loss.item(), -np.log(p[np.arange(n), y_np]).mean(), rtol=1e-5)
        p[np.arange(n), y_np] -= 1
        dz = p / n
        np.testing.assert_allclose(b.grad.numpy(), dz.T @ h, rtol=1e-4, atol=1e-6)
        dh = (dz @ w2) * (h > 0)
        np.testing.assert_allclose(a.grad.numpy(), dh.T @ x, rtol=1e-4, atol=1e-6)
    assert len({len(s) for s in sums}) == 1 and sums[0]
    for kernels in zip(*sums[1:]):  # (each kernel of the step, at 103, 157 and 211)
        assert len({_shape_text(k) for k in kernels}) == 1, kernels[0].symbol
    assert all(k.generic for plan in sums[2:] for k in plan)


def _shape_text(kernel) -> str:
    """The shape of a kernel's code (`templates.shape_of`): equal for kernels that differ
    only in their literals."""
    return templates.shape_of(compiler.code_of(kernel.source, kernel.symbol, kernel.opt)[0]).text


def test_a_polled_loops_blocks_do_not_follow_its_lengths_divisors():
    """A long loop reads the cancel word every block of iterations: blocks that divide its
    length where one does (LLVM then sees a constant trip count), but in a plan whose
    sizes vary blocks of one length (the last one clamped) or the whole loop, so that its
    kernel does not change form with the divisors of a size."""
    from fusegrad.pipeline.llvm import _poll_block

    assert _poll_block(62500000, 512) == 500 and _poll_block(1000003, 512) == 512
    with templates.varying([]):
        assert _poll_block(62500000, 512) == 512 and _poll_block(300, 512) == 300


def test_a_kernel_first_met_in_a_plan_whose_sizes_vary_runs_a_generic_kernel_at_once(fresh):
    """Column sums over 1100 rows, then 1270, 1077, 1500, 300 and 5000: from 1270 on the
    cascade takes the form that serves every length of its class, a shape the first plan
    did not have. Its kernel is lowered at two other lengths too (`templates.probes`),
    the literals that move are read from the array from the start, and the lengths after
    compile nothing, where waiting for a second kernel of that shape compiled one at 1077
    and a wider one at 1500. 300 and 5000 take forms of their own, each generic at once.
    Bit for bit what each length's own kernel computes, and numpy's sums."""
    sizes = [1100, 1270, 1077, 1500, 300, 5000]
    compiled = []
    got, ran = [], []
    for n in sizes:
        before = compiler.stats["compiled"]
        g, r = _kernels(lambda x: x.sum(0), [n])
        compiled.append(compiler.stats["compiled"] - before)
        got += g
        ran += r
    with fg.config.override(size_templates=False):
        want, _ = _kernels(lambda x: x.sum(0), sizes)
    sums = [[k for k in plan if k.symbol.startswith("r_")] for plan in ran]
    assert not any(k.generic for k in sums[0])
    assert all(k.generic for plan in sums[1:] for k in plan)
    assert compiled[2:4] == [0, 0]
    for n, g, w in zip(sizes, got, want):
        np.testing.assert_array_equal(g, w)
        x = np.linspace(-3, 3, n * 24, dtype=np.float32).reshape(n, 24).astype(np.float64)
        np.testing.assert_allclose(g, x.sum(0), rtol=1e-5, atol=1e-3)


def test_a_probe_that_cannot_be_lowered_leaves_the_kernel_its_own(fresh, monkeypatch):
    """A copy of a kernel at other sizes that its lowering refuses (the copy is not a graph
    anything checked) is no probe: the kernel compiles for its own sizes, as it would
    without probes, with the same values."""
    from fusegrad.runtime import cpu_backend

    def refused(item, sizes=None):
        raise ValueError("a copy whose sizes do not fit")

    _kernels(lambda x: x.sum(0), [1100])
    monkeypatch.setattr(cpu_backend, "without_values", refused)
    got, ran = _kernels(lambda x: x.sum(0), [1270])
    assert not any(k.generic for k in ran[0])
    x = np.linspace(-3, 3, 1270 * 24, dtype=np.float32).reshape(1270, 24).astype(np.float64)
    np.testing.assert_allclose(got[0], x.sum(0), rtol=1e-5, atol=1e-3)


def test_probes_move_each_varying_size_and_its_products_with_the_sizes_kept():
    ups, far = templates.probes(frozenset({40}), frozenset({16, 64}))
    assert ups == {40: 41, 640: 656, 2560: 2624}
    assert far == {40: 70, 640: 1120, 2560: 4480}
    # a product that is a kept size stays
    assert templates.probes(frozenset({4}), frozenset({16})) == [
        {4: 5, 64: 80},
        {4: 22, 64: 352},
    ]
    assert 16 not in templates.probes(frozenset({4}), frozenset({4 * 4, 16}))[0]


def test_the_literals_that_move_in_a_probe_are_the_ones_read():
    def code(n: int, scale: float) -> str:
        return compiler.code_of(*_source(n, scale), 3)[0]

    shape = templates.shape_of(code(14, 0.5))
    # the bound moves; the scale does not; a probe of another shape is left out
    other_shape = code(15, 0.5).replace("fmul float", "fadd float")
    assert templates.moved(shape, [code(15, 0.5), code(31, 0.5), other_shape]) == ((3,),)
    assert templates.moved(shape, [code(14, 0.5)]) is None  # nothing moved
    assert templates.moved(shape, [other_shape]) is None


def test_the_debug_log_says_when_a_form_met_first_is_made_generic_at_once(fresh, capfd):
    _kernels(lambda x: x.sum(0), [1100])
    with fg.config.override(debug=2):
        _kernels(lambda x: x.sum(0), [1270])
    err = capfd.readouterr().err
    assert "a form met first at these sizes, lowered at two others too" in err
    assert "so the next sizes of its form compile nothing" in err
