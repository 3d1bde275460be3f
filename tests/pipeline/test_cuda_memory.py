"""The memory-bound GPU kernels: reductions, softmax, log-softmax, layer norm, elementwise chains.

Each shape class picks a different mapping in `pipeline/gpu.py` (a warp per short
row, a block per long row, a split over blocks for few long rows, a thread per
very short row) and a different access width (16-byte vectors where the row
length, the offsets and the buffers' alignment allow, one element otherwise).
Every kernel is run in the CUDA emulator and checked against the CPU device and
the reference evaluator; the lowering's traffic report is pinned near the
minimum; and nvcc's PTX for sm_80 and sm_90 is read for vector loads and the
absence of local memory (spills).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)
from test_cuda_emulated import EMULATED, compare, compile_together, prepare, run

import fusegrad as fg
from fusegrad.ir.node import toposort
from fusegrad.ir.ops import Ops
from fusegrad.nn import functional as F
from fusegrad.pipeline.cuda import PRELUDE, cuda_kernel
from fusegrad.pipeline.gpu import VECTOR, WARP_ROW_MAX, map_to_gpu, traffic
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine

RNG = np.random.default_rng(28)


def f32(*shape):
    return fg.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def i32(*shape):
    return fg.from_numpy(RNG.integers(-1000, 1000, shape).astype(np.int32))


def special_rows(rows: int, n: int) -> fg.Tensor:
    """Rows of normal values, with NaN, +inf, -inf, all -inf and +-inf mixed in some."""
    x = RNG.standard_normal((rows, n)).astype(np.float32)
    x[1, 3] = np.nan
    x[2, 0] = np.inf
    x[3, n - 1] = -np.inf
    x[4, :] = -np.inf
    x[5, 1], x[5, 2] = np.inf, -np.inf
    return fg.from_numpy(x)


def softmax_family(x, dim=-1):
    return [x.softmax(dim), x.log_softmax(dim)]


def reductions(x, dim=-1):
    return [x.sum(dim), x.amax(dim), x.mean(dim)]


def layer_norm(x):
    n = x.shape[-1]
    w, b = f32(n), f32(n)
    return [F.layer_norm(x, (n,), w, b)]


# name -> (tensors to compute, the GPU mapping its reductions must take)
CASES = {
    "short rows: a warp each": (lambda: softmax_family(f32(256, 100)), "warp"),
    "short rows, odd length": (lambda: layer_norm(f32(96, 37)) + reductions(f32(96, 37)), "warp"),
    "long rows: a block each": (lambda: softmax_family(f32(8, 4096)), "block"),
    "few long rows: split": (lambda: reductions(f32(2, 2**16)), "block"),
    "very short rows: a thread each": (lambda: softmax_family(f32(300, 7)), "thread"),
    "layer norm, long rows": (lambda: layer_norm(f32(16, 2048)), "block"),
    "full reductions, odd length": (lambda: reductions(f32(2**17 + 3), 0), "block"),
    "columns (strided rows)": (lambda: softmax_family(f32(40, 64), 0), "warp"),
    "a slice at an odd offset": (lambda: softmax_family(f32(64, 129)[:, 1:]), "warp"),
    "a slice at an aligned offset": (lambda: reductions(f32(64, 132)[:, 4:]), "warp"),
    "NaN and inf in rows": (
        lambda: softmax_family(special_rows(72, 64)) + reductions(special_rows(72, 64)),
        "warp",
    ),
    "NaN and inf in long rows": (lambda: softmax_family(special_rows(8, 2048)), "block"),
    "an elementwise chain": (lambda: [((f32(33, 64) * 0.5 + 1.0).exp() - f32(64)).relu()], None),
    "an elementwise chain, odd length": (lambda: [(f32(3, 333) * 2.0).tanh()], None),
    "int32 and mixed dtypes": (
        lambda: [i32(16, 64) * 3 + 1, f32(16, 64) > 0.5, i32(16, 64).float() * 0.5],
        None,
    ),
}


@pytest.fixture(scope="module")
def cases():
    built = {name: build() for name, (build, _) in CASES.items()}
    prepared = {name: prepare(tensors) for name, tensors in built.items()}
    # each kernel's GPU mapping, read before anything runs (a computed node has no kernel)
    gpus = {
        name: [map_to_gpu(lower(item, tile=False)) for item in _items(tensors)]
        for name, tensors in built.items()
    }
    return built, prepared, compile_together(list(prepared.values())), gpus


@pytest.mark.parametrize("case", list(CASES))
def test_each_shape_class_is_right_in_the_emulator(cases, case):
    built, prepared, module, gpus = cases
    got = run(prepared[case], module)
    for g, t in zip(got, built[case]):
        np.testing.assert_array_equal(np.isnan(g), np.isnan(t.numpy()))
    compare([np.nan_to_num(g) for g in got], [fg.from_numpy(np.nan_to_num(t.numpy())) for t in
                                               built[case]], rtol=2e-4, atol=2e-4)  # fmt: skip
    mode = CASES[case][1]
    modes = {gpu.mode for gpu in gpus[case]}
    assert len(gpus[case]) == len(prepared[case][3])
    assert mode is None or mode in modes, f"{case}: the kernels' mappings are {modes}"


def test_vector_paths_are_taken_exactly_where_the_layout_allows(cases):
    _, prepared, _, gpus = cases

    def vectorized(case):
        return [bool(g.vector or any(r.vector for r in g.reductions.values())) for g in gpus[case]]

    assert all(vectorized("short rows: a warp each"))
    assert all(vectorized("long rows: a block each"))
    assert all(vectorized("an elementwise chain"))
    assert all(vectorized("a slice at an aligned offset"))
    assert all(vectorized("int32 and mixed dtypes"))  # int4; float4 loads next to bool stores
    assert not any(vectorized("short rows, odd length"))  # 37 is not a multiple of 4
    assert not any(vectorized("an elementwise chain, odd length"))
    # rows start at 129 * i + 1: no read of the slice is vectorized; softmax and log-softmax
    # are one row kernel each (pipeline/schedule.py, rule 6), which reads nothing else
    assert len(gpus["a slice at an odd offset"]) == 2
    for gpu in gpus["a slice at an odd offset"]:
        assert not any(r.vector for r in gpu.reductions.values())
        assert not gpu.vector
    for k in prepared["short rows: a warp each"][3]:
        assert "ld" in k.source and "__ldg((const float4*)" in k.source


def test_the_scalar_path_is_right_when_a_buffer_is_not_16_byte_aligned(cases):
    # the same kernels on buffers 4 bytes past an aligned address: the vector loads would
    # fault on a GPU, so the kernel must see it and take its scalar loop
    built, prepared, module, _ = cases
    for case in ("short rows: a warp each", "long rows: a block each", "an elementwise chain"):
        nodes, plan, leaves, kernels = prepared[case]
        slots: list = [None] * plan.slots
        leaf_arrays = [engine.value(n).numpy() for n in leaves]
        for step, k in zip(plan.steps, kernels):
            outs = [_misaligned(np.full(size, 7, dtype=dtype.np)) for _, size, dtype in step.outs]
            ins = [leaf_arrays[i] if kind == "leaf" else slots[i] for kind, i in step.inputs]
            ins = [_misaligned(a) for a in ins]
            assert all(a.ctypes.data % 16 == 4 for a in outs + ins)
            EMULATED.launch(EMULATED.functions(module, k, len(outs + ins)), k.launches, outs + ins)
            for (g, _, _), out in zip(step.outs, outs):
                slots[g] = out
        got = [slots[j].reshape(n.shape) for j, n in zip(plan.outputs, nodes)]
        compare(got, built[case])


def _misaligned(a: np.ndarray) -> np.ndarray:
    """A copy of `a` whose data starts 4 bytes past a 16-byte boundary."""
    raw = np.empty(a.nbytes + 32, np.uint8)
    start = (-raw.ctypes.data) % 16 + 4
    out = raw[start : start + a.nbytes].view(a.dtype)
    out[:] = a.reshape(-1)
    return out


def row_program(seed: int):
    """A random row-wise op (softmax, log-softmax, layer norm, sum, max, mean) after a random
    elementwise op, on rows of a random count and length (a multiple of 4 or not), and
    its gradient: the warp, block and vector mappings are all drawn."""
    rng = np.random.default_rng(1000 + seed)
    rows, n = int(rng.choice([64, 80, 130, 3])), int(rng.choice([32, 36, 37, 100, 129, 1200]))
    x = fg.tensor(rng.standard_normal((rows, n)).astype(np.float32), requires_grad=True)
    pre = [lambda t: t.exp(), lambda t: t * t + 1, lambda t: t.relu(), lambda t: t][seed % 4]
    op = [
        lambda t: t.softmax(-1),
        lambda t: t.log_softmax(-1),
        lambda t: F.layer_norm(t, (n,)),
        lambda t: t.sum(-1),
        lambda t: t.amax(-1),
        lambda t: t.mean(-1, keepdim=True),
    ][int(rng.integers(6))]
    y = op(pre(x)) * 0.5 - 1
    (y * y).sum().backward()
    return [y, x.grad]


ROW_SEEDS = range(16)


@pytest.fixture(scope="module")
def row_programs():
    built = {seed: row_program(seed) for seed in ROW_SEEDS}
    gpus = [map_to_gpu(lower(it, tile=False)) for ts in built.values() for it in _items(ts)]
    prepared = {seed: prepare(tensors) for seed, tensors in built.items()}
    return built, prepared, compile_together(list(prepared.values())), gpus


@pytest.mark.parametrize("seed", ROW_SEEDS)
def test_random_row_programs_and_their_gradients(row_programs, seed):
    built, prepared, module, _ = row_programs
    compare(run(prepared[seed], module), built[seed])


def test_random_row_programs_draw_every_mapping(row_programs):
    gpus = row_programs[3]
    vector = {g.mode for g in gpus if g.vector or any(r.vector for r in g.reductions.values())}
    assert {"warp", "block", "thread"} <= vector
    assert {"warp", "block"} <= {g.mode for g in gpus if g.reductions}


# ---------------------------------------------------------------- traffic


def zeros(*shape):
    return fg.from_numpy(np.zeros(shape, np.float32))  # big and cheap: no kernel runs here


def _items(tensors):
    return schedule([t.node for t in tensors], engine.has_value_predicate())


def _kernels(tensors, tag: str = "k"):
    items = _items(tensors)
    return [cuda_kernel(lower(item, tile=False), f"{tag}_{i}") for i, item in enumerate(items)]


TRAFFIC_CASES = {
    "softmax 4096x4096": lambda: [zeros(4096, 4096).softmax(-1)],
    "softmax 256x1000": lambda: [f32(256, 1000).softmax(-1)],
    "log_softmax 512x128": lambda: [f32(512, 128).log_softmax(-1)],
    "layer norm 1024x768": lambda: layer_norm(f32(1024, 768)),
    "row sum 4096x4096": lambda: [zeros(4096, 4096).sum(-1)],
    "row max 64x1000": lambda: [f32(64, 1000).amax(-1)],
    "mean 8x65536": lambda: [f32(8, 65536).mean(-1)],
    "full sum 2^24": lambda: [zeros(2**24).sum()],
    "full max 2^20": lambda: [f32(2**20).amax()],
}


@pytest.mark.parametrize("case", list(TRAFFIC_CASES))
def test_memory_bound_kernels_move_at_most_1_1x_their_minimum_bytes(case):
    tensors = TRAFFIC_CASES[case]()
    kernels = _kernels(tensors)
    reductions = [k for k in kernels if "r_" in k.name]
    assert reductions, f"{case}: no reduction kernel"
    for k in kernels:
        t = k.traffic
        assert t.bytes_read > 0 and t.bytes_written > 0 and t.flops > 0
        assert t.bytes <= 1.1 * t.min_bytes, f"{case}: {k.name} {t}"
        assert f"// {t}" in k.source  # the report heads the source (and the kernel dump)
    # the whole op, not only each kernel: its inputs read once and its outputs written once
    # (the row kernels of pipeline/schedule.py's rule 6; a full sum's partials are 1/2^10 more)
    leaves = {n for t in tensors for n in toposort([t.node]) if n.op is Ops.BUFFER}
    least = sum(n.numel * n.dtype.itemsize for n in leaves)
    least += sum(t.numel() * t.dtype.itemsize for t in tensors)
    assert sum(k.traffic.bytes for k in kernels) <= 1.1 * least, case


def test_traffic_counts_a_second_pass_and_the_split_partials():
    # x read twice through different index expressions (x[i] and x[n-1-i]): two passes
    x = f32(4096)
    (k,) = _kernels([x + x.flip(0)])
    assert k.traffic.bytes_read == 2 * 4096 * 4 and k.traffic.bytes_written == 4096 * 4
    assert k.traffic.min_bytes == 2 * 4096 * 4 and k.traffic.ratio == 1.5
    # a full sum split over blocks: the partials go out and come back
    total = f32(2**20).sum()
    (k,) = _kernels([total])
    assert len(k.launches) == 2
    partials = k.scratch[0][1] * 4
    assert k.traffic.bytes_read == 2**20 * 4 + partials
    assert k.traffic.bytes_written == 4 + partials
    assert k.traffic == traffic(map_to_gpu(lower(_items([total])[0], tile=False)))


def test_short_rows_take_a_warp_each_and_long_rows_a_block():
    def mode(rows, n):
        (item,) = schedule([f32(rows, n).sum(-1).node], engine.has_value_predicate())
        return map_to_gpu(lower(item, tile=False))

    short = mode(512, 256)
    assert short.mode == "warp" and short.rows_per_block == short.block // 32 == 8
    assert "fg_warp_allreduce" in cuda_kernel(short.kernel, "k").source
    assert mode(512, WARP_ROW_MAX + VECTOR).mode == "block"
    assert mode(8, 256).mode == "block"  # few rows: a whole block each
    # ... of as many threads as the row has steps: 4 elements each where it reads vectors
    assert mode(8, 512).block == 128 and mode(8, 513).block == 256
    assert mode(512, 8).mode == "thread"


# ---------------------------------------------------------------- the device, forward and backward


def _grads_on(device: str, data: dict[str, np.ndarray]):
    x = fg.tensor(data["x"], device=device, requires_grad=True)
    w = fg.tensor(data["w"], device=device, requires_grad=True)
    b = fg.tensor(data["b"], device=device, requires_grad=True)
    h = F.layer_norm(x, (x.shape[-1],), w, b)
    loss = (h.softmax(-1) * h.log_softmax(-1)).sum() + h.amax(-1).sum() + (h * h).mean()
    loss.backward()
    return [t.detach().cpu().numpy() for t in (loss, x.grad, w.grad, b.grad)]


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("shape", [(80, 64), (6, 1500)])
def test_forward_and_backward_on_the_emulated_device(shape):
    data = {
        "x": RNG.standard_normal(shape).astype(np.float32),
        "w": RNG.standard_normal(shape[-1]).astype(np.float32),
        "b": RNG.standard_normal(shape[-1]).astype(np.float32),
    }
    for got, want in zip(_grads_on("cuda", data), _grads_on("cpu", data)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.usefixtures("emulated")
def test_the_kernels_a_device_tensor_ran_carry_their_traffic():
    x = fg.tensor(RNG.standard_normal((96, 256)).astype(np.float32), device="cuda")
    records = fg.kernels(x.softmax(-1))
    assert len(records) == 1  # one row kernel (pipeline/schedule.py, rule 6)
    for rec in records:
        moved = rec.compiled.kernel.traffic
        assert moved.min_bytes == rec.bytes and moved.ratio <= 1.1
        assert f"// {moved}" in rec.cuda_c  # hence in the .cu file FUSEGRAD_DUMP writes


@pytest.mark.usefixtures("emulated")
def test_empty_rows_on_the_emulated_device():
    x = fg.zeros(12, 0, device="cuda")
    assert x.sum(-1).cpu().tolist() == [0.0] * 12
    assert x.softmax(-1).shape == (12, 0)
    y = fg.zeros(0, 40, device="cuda")
    assert y.softmax(-1).shape == (0, 40) and y.sum(-1).shape == (0,)


# ---------------------------------------------------------------- PTX

NVCC = shutil.which("nvcc")
ARCHS = ("sm_80", "sm_90")


def _representative_sources() -> dict[str, str]:
    tensors = (
        softmax_family(f32(256, 1000))
        + softmax_family(f32(8, 4096))
        + layer_norm(f32(64, 768))
        + reductions(f32(64, 512))
        + [f32(2**20).sum(), ((f32(64, 256) * 0.5).exp() + 1.0).sqrt()]
    )
    out = {}
    for j, t in enumerate(tensors):
        for k in _kernels([t], f"t{j}"):
            out[k.symbol] = k.source[k.source.index('extern "C"') :]
    return out


def _nvcc(arch: str, source: str, folder) -> tuple[str, str]:
    """(PTX, ptxas -v's report) of `source` for `arch`: nvcc's PTX, assembled by ptxas."""
    cu, ptx = folder / f"kernels_{arch}.cu", folder / f"kernels_{arch}.ptx"
    cu.write_text(source)
    subprocess.run([NVCC, "--ptx", f"-arch={arch}", "-o", str(ptx), str(cu)],
                   capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    ptxas = shutil.which("ptxas", path=os.path.dirname(NVCC)) or shutil.which("ptxas")
    report = subprocess.run([ptxas, "-v", f"-arch={arch}", "-o", os.devnull, str(ptx)],
                            capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    return ptx.read_text(), report.stderr + report.stdout


@pytest.fixture(scope="module")
def ptx(tmp_path_factory):
    if NVCC is None:
        pytest.skip("nvcc is not installed")
    sources = _representative_sources()
    text = PRELUDE + "\n".join(sources.values())
    folder = tmp_path_factory.mktemp("ptx")
    with ThreadPoolExecutor(len(ARCHS)) as pool:
        done = dict(zip(ARCHS, pool.map(lambda a: _nvcc(a, text, folder), ARCHS)))
    return sources, done


def _entries(ptx_text: str) -> dict[str, str]:
    pattern = r"(?ms)^\.visible \.entry (\w+)\(.*?\)\s*^\{(.*?)^\}"
    return {m.group(1): m.group(2) for m in re.finditer(pattern, ptx_text)}


@pytest.mark.parametrize("arch", ARCHS)
def test_ptx_has_16_byte_loads_and_no_local_memory(ptx, arch):
    sources, done = ptx
    text, report = done[arch]
    entries = _entries(text)
    assert set(sources) <= set(entries) and len(sources) >= 10
    for symbol, body in entries.items():
        assert ".local" not in body, f"{symbol} uses local memory"
        if "fg_aligned16" in sources.get(symbol, ""):
            assert re.search(r"ld\.global\.nc\.v4\.(f32|u32|b32|s32)", body), symbol
    stores = [s for s, b in entries.items() if re.search(r"st\.global(\.wb)?\.v4\.(f32|b32)", b)]
    # the elementwise loops (softmax's and layer norm's rows, the chain) store 16 bytes
    assert len(stores) >= 5, stores
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", report)
    assert len(spills) >= len(entries), report
    assert all(s == ("0", "0") for s in spills), report
