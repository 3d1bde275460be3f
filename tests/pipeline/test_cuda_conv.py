"""Convolutions on the cuda device: implicit GEMMs on the contraction tiles.

A convolution (and its input and weight gradients) is a contraction (`pipeline/gpu.py`):
its windows are index expressions the block evaluates while staging a tile in shared
memory, so no im2col buffer exists. On the cuda device the padding is no copy either
(`nn/correlate.py`): the staging loads check the bounds, and a padded convolution with
its bias and activation is one kernel. Values and gradients on the emulator against the
CPU's (strided, padded, dilated, grouped; a bfloat16 one and its gradients on the tensor
cores), and nvcc's PTX for sm_80: no local memory, no spills, and a float16 convolution on
tensor cores (`mma.sync` fed by `ldmatrix`; nvcc takes about 6 s a kernel here, so the
gradients' kernels and sm_90 are left to `--nvcc-all`, which compiles every kernel the tests
make for both, unoptimized).
"""

from __future__ import annotations

import shutil

import ml_dtypes
import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)
from test_cuda_memory import NVCC, _nvcc
from test_cuda_sgemm import _entries

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad.pipeline.cuda import HALF_PRELUDE, PRELUDE, cuda_kernel
from fusegrad.pipeline.gpu import map_to_gpu
from fusegrad.pipeline.lower import lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine

RNG = np.random.default_rng(2830)


def _conv(device, data, dtype=np.float32, **geometry):
    x, w, b = (fg.tensor(d.astype(dtype), device=device, requires_grad=True) for d in data)
    return (x, w, b), F.conv2d(x, w, b, **geometry).relu()


def _data(n, c, h, o, k, groups):
    return (
        RNG.standard_normal((n, c, h, h)).astype(np.float32),
        RNG.standard_normal((o, c // groups, k, k)).astype(np.float32),
        RNG.standard_normal(o).astype(np.float32),
    )


def _kernels(roots) -> list:
    items = schedule([r.node for r in roots], engine.has_value_predicate())
    return [lower(item, tile=False) for item in items]


@pytest.mark.usefixtures("emulated")
def test_a_padded_convolution_is_one_kernel_on_cuda():
    data = _data(2, 16, 12, 32, 3, 1)
    _, y_cpu = _conv("cpu", data, padding=1)
    assert len(_kernels([y_cpu])) == 2  # the CPU stores the padded input first
    _, y = _conv("cuda", data, padding=1)
    (k,) = _kernels([y])  # the padding, the bias and the ReLU in the contraction's kernel
    gpu = map_to_gpu(k)
    c = gpu.contraction
    assert gpu.mode == "tile" and (c.na, c.nb) == (2 * 12 * 12, 32)
    assert any(getattr(s, "valid", ()) for s in c.a_stmts)  # the padding's bounds checks
    assert len(c.epilogue) > 1  # bias and ReLU after the sum
    # each input element, weight and output once: the im2col windows are cache hits
    moved = cuda_kernel(k, "k").traffic
    assert moved.bytes <= moved.min_bytes * 1.1, moved


@pytest.mark.usefixtures("emulated")
def test_a_convolutions_input_is_staged_along_its_pixels_in_32_bit_integers():
    """The input's window loads run 12 pixels in a row against 3 kernel taps, so each
    thread keeps one pixel of the tile and walks the reduction (its loads coalesced along
    the rows); the weights run along the reduction, so each thread keeps one step. The
    input is a `Gather` side: its pixel's part of the window's address and its window's
    bounds (a bit per kernel tap) are worked out once a tile, and a staged value reads its
    step's part and tap from a table the block fills once, so no value divides its step
    into channel and taps. The flat indices are split in 32-bit ints: a GPU divides 64-bit
    ones by a constant in many times the instructions."""
    from fusegrad.pipeline import cuda_simt

    data = _data(2, 16, 12, 32, 3, 1)
    _, y = _conv("cuda", data, padding=1)
    (k,) = _kernels([y])
    c = map_to_gpu(k).contraction
    assert (c.a_kk_fastest, c.b_kk_fastest) == (False, True)
    src = cuda_kernel(k, "k").source
    width_a, width_b = 16 * c.ra, 16 * c.rb
    assert f"for (int kk = tid / {width_a}, at = tid % {width_a}; kk < {c.kc};" in src
    assert f"for (int at = tid / {c.kc}, kk = tid % {c.kc}; at < {width_b};" in src
    pixel = c.a_loops[-1].var.name
    assert f"const int {pixel} = (int)fg_i % 12;" in src  # once a tile
    assert "(int)ia" not in src  # (the epilogue's stay 64-bit)
    assert f"int a_fg_tab[{c.red.length}][2];" in src  # the step's part, its tap's bit
    plan = cuda_simt.gather_plan(c, "a", True, cuda_simt.STATIC_SHARED)
    assert plan.bits == 9 and len(plan.columns) == 1 and len(plan.conds) == 1
    assert cuda_simt.gather_plan(c, "b", True, cuda_simt.STATIC_SHARED) is None  # [at][kk]
    assert cuda_simt.gather_plan(c, "a", False, cuda_simt.STATIC_SHARED) is None  # 64-bit
    assert cuda_simt.gather_plan(c, "a", True, 100) is None  # no room for the table


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize(
    "case",
    [
        dict(k=7, padding=3),  # 49 taps: a 64-bit mask
        dict(k=9, padding=4),  # 81 taps: past the mask, staged value by value
        dict(k=3, padding=1, channels=256),  # 2304 steps: past the table's bytes
        dict(k=3, padding=0),  # no bounds: a table of addresses alone
        dict(k=3, padding=(2, 0), dilation=(1, 2)),  # bounds along the rows alone
        dict(k=3, padding=1, stride=2),  # staged [at][kk] (strided rows): value by value
        dict(k=3, padding=1, channels=96, h=4),  # one tile: its reduction split in chunks
        dict(k=3, padding=1, gather=False),  # cuda_simt.GATHER off: value by value
        dict(k=3, padding=1, groups=2),  # a batch loop over the groups in each part
    ],
    ids=["7x7", "9x9", "long", "unpadded", "rows", "strided", "split", "off", "grouped"],
)
def test_gather_staging_at_its_limits_computes_the_cpus_convolution(case, monkeypatch):
    """Convolutions whose input is staged through the `Gather` tables, or past their
    limits value by value, and their gradients: the CPU's values, windows at every border."""
    from fusegrad.pipeline import cuda_simt

    case = dict(case)
    k, channels, h = case.pop("k"), case.pop("channels", 4), case.pop("h", 13)
    monkeypatch.setattr(cuda_simt, "GATHER", case.pop("gather", True))
    data = _data(2, channels, h, 8, k, case.get("groups", 1))
    (xc, wc, bc), want = _conv("cpu", data, **case)
    (x, w, b), got = _conv("cuda", data, **case)
    kern = next(k for k in _kernels([got]) if map_to_gpu(k).contraction)  # (the product's)
    c = map_to_gpu(kern).contraction
    plan = cuda_simt.gather_plan(c, "a", True, cuda_simt.STATIC_SHARED)
    src = cuda_kernel(kern, "k").source
    assert (plan is not None) == ("a_fg_tab" in src)
    if k == 7:
        assert plan.bits == 49 and "unsigned long long a_fg_m0" in src
    if k == 9 or channels == 256 or case.get("stride") or not cuda_simt.GATHER:
        assert plan is None
    if h == 4:
        assert plan is not None and c.split > 1 and "fg_k0 + " in src
    if case.get("groups"):
        assert plan is not None and c.c_loops
    if case.get("padding") == 0:
        assert plan is not None and not plan.conds
    np.testing.assert_allclose(got.detach().cpu().numpy(), want.detach().numpy(), rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    g = RNG.standard_normal(want.shape).astype(np.float32)
    (want * fg.tensor(g)).sum().backward()
    (got * fg.tensor(g, device="cuda")).sum().backward()
    for mine, theirs in ((x, xc), (w, wc), (b, bc)):
        np.testing.assert_allclose(mine.grad.cpu().numpy(), theirs.grad.numpy(), rtol=1e-3,
                                   atol=1e-3)  # fmt: skip


@pytest.mark.usefixtures("emulated")
def test_a_contraction_past_the_32_bit_limit_stages_in_64_bit_integers(monkeypatch):
    """Where an index may pass NARROW_LIMIT the staging divides in 64 bits (here the limit
    lowered to force it); both ways compute the CPU's values."""
    from fusegrad.pipeline import cuda_simt

    data = _data(2, 8, 7, 16, 3, 1)
    _, want = _conv("cpu", data, padding=1)
    monkeypatch.setattr(cuda_simt, "NARROW_LIMIT", 64)
    _, y = _conv("cuda", data, padding=1)
    (k,) = _kernels([y])
    src = cuda_kernel(k, "k").source
    assert "(int)ia" not in src and "% 7LL;" in src
    np.testing.assert_allclose(
        y.detach().cpu().numpy(), want.detach().numpy(), rtol=1e-5, atol=1e-5
    )


@pytest.mark.usefixtures("emulated")
def test_a_strided_dilated_grouped_convolution_and_its_gradients_on_the_emulator():
    data = _data(2, 8, 11, 16, 3, 2)
    geometry = dict(stride=2, padding=1, dilation=2, groups=2)
    results = []
    for device in ("cpu", "cuda"):
        leaves, y = _conv(device, data, **geometry)
        (y * y).sum().backward()
        results.append([t.detach().cpu().numpy() for t in (y, *(t.grad for t in leaves))])
    for got, want in zip(*reversed(results)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("prefetch", [True, False])
def test_the_next_steps_values_wait_in_registers_during_the_products(prefetch, monkeypatch):
    """`cuda_simt.PREFETCH`: on the fp32 SIMT path with two buffers, a thread loads the
    next step's window values and weights into registers before this step's products and
    stores them after, one barrier a step (off: staged before the step's barrier, two).
    The convolution's values and gradients are the CPU's either way."""
    from fusegrad.pipeline import cuda_simt

    monkeypatch.setattr(cuda_simt, "PREFETCH", prefetch)
    data = _data(2, 8, 10, 24, 3, 1)
    _, y = _conv("cuda", data, padding=1)
    (k,) = _kernels([y])
    src = cuda_kernel(k, "k").source
    loop = src[src.index("for (int kt = 0;") :]
    loop = loop[: loop.index("\n      }\n")]  # the steps' loop (its brace 6 spaces in)
    assert ("fg_next_a_" in loop and "fg_next_b_" in loop) == prefetch
    assert loop.count("__syncthreads()") == (1 if prefetch else 2)
    results = []
    for device in ("cpu", "cuda"):
        leaves, out = _conv(device, data, padding=1)
        (out * out).sum().backward()
        results.append([t.detach().cpu().numpy() for t in (out, *(t.grad for t in leaves))])
    for got, want in zip(*reversed(results)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * np.abs(want).max())


@pytest.mark.usefixtures("emulated")
def test_a_float16_convolution_on_the_tensor_cores_of_the_emulator():
    data = _data(1, 16, 9, 16, 3, 1)
    _, y = _conv("cuda", data, np.float16, padding=2)
    (k,) = _kernels([y])
    assert map_to_gpu(k).contraction.mma == "float16"  # the padded window is 16-bit too
    got = y.detach().cpu().float().numpy()
    x, w, b = (d.astype(np.float16).astype(np.float32) for d in data)
    _, want = _conv("cpu", (x, w, b), padding=2)  # fp32 from the same 16-bit values
    want = want.detach().numpy()
    eps = float(np.finfo(np.float16).eps)
    np.testing.assert_allclose(got, want, rtol=eps, atol=eps * np.abs(want).max() / 16)


@pytest.mark.usefixtures("emulated")
def test_a_bfloat16_convolution_and_its_gradients_on_the_tensor_cores_of_the_emulator():
    data = _data(2, 16, 10, 32, 3, 2)
    geometry = dict(stride=1, padding=1, groups=2)
    results = []
    for device in ("cpu", "cuda"):
        leaves, y = _conv(device, data, ml_dtypes.bfloat16, **geometry)
        y.float().sum().backward()
        results.append([t.detach().cpu().float().numpy() for t in (y, *(t.grad for t in leaves))])
        if device == "cuda":  # the forward and both gradients' contractions run on mma.sync
            for t in (y, leaves[0].grad, leaves[1].grad):
                assert any("fg_mma_16816<true>(" in r.cuda_c for r in fg.kernels(t))
    eps = float(ml_dtypes.finfo(ml_dtypes.bfloat16).eps)
    for got, want in zip(*reversed(results)):  # both fp32 sums of exact products, rounded
        np.testing.assert_allclose(got, want, rtol=2 * eps, atol=2 * eps * np.abs(want).max())


@pytest.fixture(scope="module")
def conv_ptx(tmp_path_factory):
    if NVCC is None or shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    with fg.config.override(cuda="emulate"):
        from fusegrad.runtime import cuda as runtime_cuda

        runtime_cuda.reset()
        _, y = _conv("cuda", _data(8, 32, 16, 64, 3, 1), padding=1)
        kernels = {"forward": _kernels([y])[0]}
        _, y16 = _conv("cuda", _data(8, 32, 16, 64, 3, 1), np.float16, padding=1)
        kernels["half"] = _kernels([y16])[0]
    runtime_cuda.reset()
    sources = []
    for name, k in kernels.items():
        src = cuda_kernel(k, "k").source
        sources.append(src[src.index('extern "C"') :].replace(" k(", f" conv_{name}("))
    text = PRELUDE + HALF_PRELUDE + "\n".join(sources)
    return _nvcc("sm_80", text, tmp_path_factory.mktemp("conv_ptx"))


def test_conv_ptx(conv_ptx):
    text, report = conv_ptx
    entries = _entries(text)
    assert {"conv_forward", "conv_half"} <= set(entries)
    for symbol, body in entries.items():
        assert ".local" not in body, f"{symbol} uses local memory"
    # float16 inputs, fp32 accumulators: warp-level mma.sync fed by ldmatrix
    half = entries["conv_half"]
    assert "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32" in half, "no float16 mma"
    assert "ldmatrix.sync.aligned.m8n8.x4" in half and "wmma" not in half
    assert "wmma" not in entries["conv_forward"]  # fp32 without allow_tf32
    spills = [line for line in report.splitlines() if "spill" in line]
    assert len(spills) >= len(entries), report
    assert all("0 bytes spill stores, 0 bytes spill loads" in line for line in spills), report


@pytest.mark.usefixtures("emulated")
def test_the_cpu_cache_rules_leave_the_cuda_convolution_alone(monkeypatch, request):
    """A strided convolution's padded input is not split into stride phases (its windows
    read at stride 1 on the CPU) and its weight gradient is one sum on the cuda device,
    even with a cache too small for an image (nn/conv.py's rules are the CPU's); values
    and gradients still equal the CPU's, which takes both rules there."""
    import fusegrad.nn.conv as C
    from fusegrad.runtime.engine import engine

    monkeypatch.setattr(C, "PANEL_CACHE_BYTES", 1)
    # (read when the plans are compiled: none cached from other tests, none kept after)
    engine.plans.clear()
    request.addfinalizer(engine.plans.clear)
    data = _data(3, 8, 9, 16, 3, 1)
    grads = {}
    for device in ("cpu", "cuda"):
        leaves, y = _conv(device, data, stride=2, padding=1)
        reasons = [k.reason for k in fg.kernels(y)]
        assert any("stride phases" in r for r in reasons) == (device == "cpu"), reasons
        y.sum().backward()
        grads[device] = [y.detach().cpu().numpy()] + [t.grad.cpu().numpy() for t in leaves]
        names = [k.name for k in fg.kernels(leaves[1].grad)]
        # the partial sums, one per image: (3 images, 1 group, ...; on the CPU the output
        # channels last, its lanes: nn/conv.py's `lanes_along_channels`)
        assert any(k.startswith("r_sum_3x1x1x") for k in names) == (device == "cpu"), names
    for a, b in zip(grads["cpu"], grads["cuda"]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("pad", [(0, 9), (3, 9), (5, 0)])
def test_gather_bounds_on_the_sides_own_loops_alone_are_one_bit(pad):
    """A padded matrix read transposed (`pad(x).T @ w`) is staged `[kk][at]` with its pad's
    bounds on its own loop alone: each thread's mask is one bit, tested without a shift
    (the table has no tap column to shift by)."""
    from fusegrad.pipeline import cuda_simt

    x = RNG.standard_normal((64, 70)).astype(np.float32)
    w = RNG.standard_normal((64, 40)).astype(np.float32)
    want = F.pad(fg.tensor(x), pad).T @ fg.tensor(w)
    got = F.pad(fg.tensor(x, device="cuda"), pad).T @ fg.tensor(w, device="cuda")
    kern = next(k for k in _kernels([got]) if map_to_gpu(k).contraction)
    plan = cuda_simt.gather_plan(map_to_gpu(kern).contraction, "a", True, cuda_simt.STATIC_SHARED)
    assert plan is not None and plan.conds and not plan.cond_loops and plan.width == 1
    assert "(int)(a_fg_m0) & 1)" in cuda_kernel(kern, "k").source
    np.testing.assert_allclose(got.cpu().numpy(), want.numpy(), rtol=1e-5, atol=1e-4)


@pytest.mark.usefixtures("emulated")
@pytest.mark.parametrize("seed", range(4))
def test_random_windows_and_pads_through_gather_are_the_cpus(seed):
    """Random geometries (kernel 1-5, padding 0-2 each way, dilation 1-2, groups 1-2, and a
    padded matrix read transposed): values and both gradients equal the CPU's."""
    rng = np.random.default_rng(seed)
    c, g = int(rng.choice([4, 8])), int(rng.choice([1, 2]))
    k, dil = int(rng.choice([1, 3, 5])), int(rng.choice([1, 2]))
    pad = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    x = rng.standard_normal((2, c, 11, 9)).astype(np.float32)
    w = rng.standard_normal((8, c // g, k, k)).astype(np.float32)
    m = rng.standard_normal((int(rng.integers(20, 60)), 33)).astype(np.float32)
    side = (int(rng.integers(0, 5)), int(rng.integers(0, 5)))
    got = {}
    for dev in ("cpu", "cuda"):
        xt, wt, mt = (fg.tensor(a, device=dev, requires_grad=True) for a in (x, w, m))
        y = F.conv2d(xt, wt, padding=pad, dilation=dil, groups=g)
        z = F.pad(mt, side).T @ mt[:, :8]
        gy = fg.tensor(np.random.default_rng(seed).standard_normal(y.shape).astype(np.float32),
                       device=dev)  # fmt: skip
        ((y * gy).sum() + z.square().sum()).backward()
        got[dev] = [t.detach().cpu().numpy() for t in (y, z, xt.grad, wt.grad, mt.grad)]
    for cpu, cuda in zip(got["cpu"], got["cuda"]):
        np.testing.assert_allclose(cuda, cpu, rtol=1e-5, atol=1e-5 * np.abs(cpu).max())
