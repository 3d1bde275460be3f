"""The CUDA C renderer's output compiles with nvcc, for every kind of kernel fusegrad makes.

Kernels from many expressions (elementwise in every dtype, casts, where,
reductions, softmax, matmul, padding and strided slices with validity masks,
counter-based random numbers, comparisons, transcendentals) are rendered to
CUDA C and compiled to PTX in one nvcc run per architecture (sm_80 and sm_90;
the shared `__device__` prelude is kept once), so the renderer is checked even
where there is no GPU. Each launch of each kernel must appear in the PTX as an
`.entry` taking the buffers the launcher passes: `(out0, ..., in0, ..., scratch...)`.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.nn import functional as F
from fusegrad.pipeline.cuda import cuda_kernel
from fusegrad.pipeline.lower import base_name, lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine

NVCC = shutil.which("nvcc") or (
    "/usr/local/bin/nvcc" if shutil.which("/usr/local/bin/nvcc") else None
)
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")

RNG = np.random.default_rng(5)


def f32(*shape):
    return fg.from_numpy(RNG.standard_normal(shape).astype(np.float32))


def f64(*shape):
    return fg.from_numpy(RNG.standard_normal(shape))


def i64(*shape):
    return fg.from_numpy(RNG.integers(-50, 50, shape))


def i32(*shape):
    return fg.from_numpy(RNG.integers(-50, 50, shape).astype(np.int32))


def boolean(*shape):
    return fg.from_numpy(RNG.random(shape) > 0.5)


def chain(x):
    return (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)


# name -> the tensors whose kernels are rendered; all float32-only unless the name says otherwise
CASES = {
    "elementwise_float32": lambda: [chain(f32(32, 48))],
    "elementwise_float64": lambda: [chain(f64(32, 48))],
    "elementwise_int64": lambda: [(lambda a: a * 3 - a.maximum(a * 2) + (-a))(i64(32, 48))],
    "elementwise_int32": lambda: [(lambda a: a * 3 + a.maximum(-a))(i32(32, 48))],
    "elementwise_bool": lambda: [(lambda b: (b & ~b) | (f32(32, 48) > 0))(boolean(32, 48))],
    "casts": lambda: [
        f32(8, 8).int() + i64(8, 8).float().long(),
        boolean(8, 8).float() + f64(8, 8).float(),
        f32(8, 8).double() * 2,
        f32(8, 8).bool(),
        i64(8, 8).bool(),
        f64(8, 8).int(),
        i32(8, 8).long() + boolean(8, 8).long(),
    ],
    # a 16-bit value only inside a float32 kernel (an explicit cast's rounding): the kernel
    # needs the 16-bit helpers though no parameter is 16-bit (nvcc refused it on an H100)
    "half_cast_inside": lambda: [f32(8, 8).half().float() * 2, f32(8, 8).bfloat16().float() + 1],
    "where": lambda: [
        fg.where(f32(16, 16) > 0, f32(16, 16), 0.0),
        fg.where(boolean(16, 16), i64(16, 16), 7),
        fg.where(boolean(16), boolean(16), ~boolean(16)),
    ],
    "reduce_sum": lambda: [
        f32(32, 48).sum(1),
        i64(32, 48).sum(0),
        boolean(32, 48).sum(),
        f64(9).sum(),
    ],
    "reduce_max": lambda: [f32(32, 48).amax(1), i64(32, 48).amax(0), boolean(32, 48).amax(1)],
    "reduce_max_float64": lambda: [f64(32, 48).amax()],
    "mean_var_std": lambda: [f32(32, 48).mean(1), f32(32, 48).var(0), f32(32, 48).std()],
    "softmax": lambda: [f32(32, 48).softmax(1)],
    "log_softmax_float64": lambda: [f64(32, 48).log_softmax(0)],
    "argmax": lambda: [f32(32, 48).argmax(1), f32(32, 48).argmin(0)],
    "matmul": lambda: [f32(32, 48) @ f32(48, 64)],
    "matmul_float64": lambda: [f64(48, 32).T @ f64(48, 16)],
    "matmul_vector": lambda: [f32(16, 24) @ f32(24), f32(24) @ f32(24)],
    # values both sides read (w[k], v[k]; a batch's bias): each side computes its own
    "matmul_shared_terms": lambda: [
        (f32(16, 32) + f32(32)) @ (f32(32, 24) + f32(32, 1)),
        (f32(4, 16, 32) + f32(4, 1, 32)) @ (f32(4, 32, 24) + f32(4, 32, 1)),
    ],
    # tiles with a masked last vector: outputs 28 wide, a sum over 28 lanes
    "ragged_tiles": lambda: [f32(6, 20) @ f32(20, 28), f32(8, 28) @ f32(4, 28).T],
    # rows picked by data, and their transpose (columns owned by threads: no atomics)
    "gather_scatter": lambda: _gather_scatter(),
    # kernels that store several outputs (an optimizer's parameter and state)
    "multi_output": lambda: _optimizer_step(),
    "pad_and_slices": lambda: [
        f32(16, 24).pad((1, 2, 3, 4)) + 1,
        f32(16, 24)[2:10:3, 1::2] * 2,
        f32(16, 24)[:, 5:9].pad((2, 2)) * 3,
        fg.cat([f32(4, 6), f32(4, 3)], 1) + 0.5,
        fg.stack([i64(5), i64(5)], 0) * 2,
    ],
    "transpose_and_broadcast": lambda: [
        f32(16, 24).T.contiguous() + 1,
        f32(16, 1) * f32(1, 24),
        f32(2, 3, 4).permute(2, 0, 1) - f32(4, 1, 1),
    ],
    "random": lambda: [
        fg.rand(64, 3) * 2,
        fg.randn(128, dtype=fg.float64),
        fg.randint(0, 10, (16,)),
    ],
    "comparisons": lambda: [
        f32(8, 8) < f32(8, 8),
        f32(8, 8) == f32(8, 8),
        i64(8, 8) >= 3,
        i64(8, 8) != i32(8, 8).long(),
        f64(8, 8) <= 0.5,
        boolean(8, 8) == boolean(8, 8),
    ],
    "unary_float32": lambda: [
        f32(64).sqrt(),
        f32(64).abs().log(),
        f32(64).sin(),
        f32(64).cos(),
        f32(64).reciprocal(),
        f32(64).sigmoid(),
        f32(64).tanh(),
        f32(64) ** 2,
    ],
    # split over blocks and finished by a second launch
    "long_reductions": lambda: [f32(2**17).sum(), f64(3, 2**16).amax(1), boolean(2**17).sum()],
    "conv2d": lambda: _conv_backward(),
    "softmax_backward": lambda: _softmax_backward(),
    "unary_float64": lambda: [f64(64).exp(), f64(64).abs().sqrt(), f64(64).sin(), f64(64).tanh()],
}


def _gather_scatter():
    from fusegrad.nn import functional as F

    w = fg.tensor(RNG.standard_normal((30, 7)).astype(np.float32), requires_grad=True)
    out = F.embedding(fg.from_numpy(RNG.integers(0, 30, (4, 5)).astype(np.int32)), w)
    (out * f32(4, 5, 7)).sum().backward()
    return [out, w.grad]


def _conv_backward():
    x = fg.tensor(RNG.standard_normal((2, 3, 9, 9)).astype(np.float32), requires_grad=True)
    w = fg.tensor(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32), requires_grad=True)
    y = F.conv2d(x, w, padding=1)
    (y * y).sum().backward()
    return [y, x.grad, w.grad]


def _softmax_backward():
    x = fg.tensor(RNG.standard_normal((16, 300)).astype(np.float32), requires_grad=True)
    (x.softmax(1) * f32(16, 300)).sum().backward()
    return [x.grad]


def _optimizer_step():
    w = fg.nn.Parameter(f32(6, 5))
    opt = fg.optim.Adam([w], lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        (f32(4, 6) @ w).relu().sum().backward()
        opt.step()
    return [w]


# cases whose kernels touch no double: a float32 kernel computing in double is a missing `f`
FLOAT32_ONLY = {
    "elementwise_float32",
    "softmax",
    "matmul",
    "reduce_max",
    "mean_var_std",
    "conv2d",
    "softmax_backward",
}


def _split(source: str) -> tuple[str, str]:
    """(the helpers before the kernel, the kernel itself) of one rendered source."""
    at = source.index('extern "C"')
    helpers = "\n".join(line for line in source[:at].splitlines() if not line.startswith("//"))
    return helpers, source[at:]


ARCHS = ("sm_80", "sm_90")


def _nvcc(source: str, path, arch: str) -> tuple[int, str, str]:
    cu, ptx = path.with_suffix(f".{arch}.cu"), path.with_suffix(f".{arch}.ptx")
    cu.write_text(source)
    r = subprocess.run(
        [NVCC, "--ptx", f"-arch={arch}", "-o", str(ptx), str(cu)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return r.returncode, r.stderr, ptx.read_text() if r.returncode == 0 else ""


@pytest.fixture(scope="module", params=ARCHS)
def compiled(request, tmp_path_factory):
    """Render every case's kernels and compile them together for one architecture;
    per-symbol PTX and errors."""
    arch = request.param
    tmp = tmp_path_factory.mktemp("cuda")
    kernels: dict[str, list] = {}
    sources: dict[str, str] = {}
    for name, build in CASES.items():
        kernels[name] = _render_both(build())
        for k in kernels[name]:
            sources[k.gpu.symbol] = k.gpu.source
    # one translation unit per distinct prelude (today there is one)
    groups: dict[str, list[str]] = {}
    for symbol, src in sources.items():
        groups.setdefault(_split(src)[0], []).append(symbol)
    jobs = [
        (helpers + "\n" + "\n".join(_split(sources[s])[1] for s in symbols), tmp / f"group{i}")
        for i, (helpers, symbols) in enumerate(groups.items())
    ]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda job: _nvcc(*job, arch), jobs))
    errors: dict[str, str] = {}
    failed = [s for (rc, _, _), symbols in zip(results, groups.values()) if rc for s in symbols]
    ptx = "".join(text for _, _, text in results)
    if failed:  # compile the failing group's kernels one by one to say which is broken
        with ThreadPoolExecutor(max_workers=4) as pool:
            singles = list(pool.map(lambda s: _nvcc(sources[s], tmp / s, arch), failed))
        for symbol, (rc, err, text) in zip(failed, singles):
            ptx += text
            if rc:
                errors[symbol] = err
    return kernels, sources, _entries(ptx), errors


@dataclass
class Rendered:
    name: str
    loop: object  # the loop IR it was rendered from
    gpu: object  # its CudaKernel


def _render_both(tensors) -> list[Rendered]:
    """Each kernel computing `tensors`, rendered from the CPU's loop nest (the plan's, with
    register tiles) and from the GPU's (`lower(item, tile=False)`: shared-memory tiles)."""
    items = schedule([t.node for t in tensors], engine.has_value_predicate())
    records = fg.kernels(*tensors)
    if not items:  # realized while built (an optimizer step): only the plan's loop nests
        items = [None] * len(records)
    names = [lower(item).name if item else base_name(r.name) for r, item in zip(records, items)]
    assert [base_name(r.name) for r in records] == names  # the plan's kernels, in its order
    out = []
    for rec, item in zip(records, items):
        symbol = rec.compiled.symbol
        out.append(Rendered(rec.name, rec.loop, cuda_kernel(rec.loop, symbol)))
        if item is None:
            continue
        plain = lower(item, tile=False)
        out.append(Rendered(f"{rec.name} (GPU lowering)", plain, cuda_kernel(plain, symbol + "_g")))
    return out


def _entries(ptx: str) -> dict[str, tuple[int, str]]:
    """symbol -> (number of parameters, body) of every `.entry` in the PTX."""
    out = {}
    pattern = r"(?ms)^\.visible \.entry (\w+)\((.*?)\)\s*^\{(.*?)^\}"
    for m in re.finditer(pattern, ptx):
        out[m.group(1)] = (m.group(2).count(".param"), m.group(3))
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_kernels_compile_to_ptx_entries(compiled, case):
    kernels, sources, entries, errors = compiled
    assert kernels[case], f"{case} made no kernels"
    for k in kernels[case]:
        symbol = k.gpu.symbol
        assert symbol not in errors, (
            f"{k.name} does not compile:\n{errors[symbol]}\n{sources[symbol]}"
        )
        assert k.gpu.params == k.loop.params  # the CPU kernel's buffers, in its order
        for launch in k.gpu.launches:
            assert launch.symbol in entries, f"no .entry {launch.symbol} in the PTX"
            nparams, _ = entries[launch.symbol]
            assert nparams == len(k.loop.params) + len(k.gpu.scratch), (
                f"{k.name}: .entry {launch.symbol} takes {nparams} parameters, the launcher "
                f"passes {len(k.loop.params)} buffers and {len(k.gpu.scratch)} scratch buffers"
            )


@pytest.mark.parametrize("case", sorted(FLOAT32_ONLY))
def test_float32_kernels_do_not_compute_in_double(compiled, case):
    kernels, sources, entries, _ = compiled
    for k in kernels[case]:
        for launch in k.gpu.launches:
            _, body = entries.get(launch.symbol, (0, ""))
            assert body, f"{k.name} did not compile"
            doubles = sorted(set(re.findall(r"\b[a-z]+(?:\.[a-z0-9]+)*\.f64\b", body)))
            assert not doubles, f"{k.name} uses {doubles}:\n{sources[k.gpu.symbol]}"


def test_every_case_is_covered_by_a_distinct_kernel(compiled):
    kernels, sources, _, _ = compiled
    # a renderer that gave every kernel the same name would pass the checks above vacuously
    symbols = [k.gpu.symbol for ks in kernels.values() for k in ks]
    assert len(set(symbols)) == len(sources) >= 80
    for ks in kernels.values():
        for k in ks:
            for launch in k.gpu.launches:
                assert f"void {launch.symbol}(" in k.gpu.source


def test_contractions_are_tiled_through_shared_memory(compiled):
    kernels, _, entries, _ = compiled
    for case in ("matmul", "conv2d"):
        tiled = [k for k in kernels[case] if k.gpu.block == (16, 16, 1)]
        assert tiled, f"no kernel of {case} is tiled"
        for k in tiled:
            _, body = entries[k.gpu.symbol]
            assert "st.shared" in body and "ld.shared" in body and "bar.sync" in body
            assert ".local" not in body, f"{k.name}: the register tile went to local memory"
