"""Vector loads whose index moves by 2, 3 or 4 per lane (pipeline/llvm.py, `shuffled_load`).

Lane k of such a load reads base + step * k: one masked load of step x W contiguous elements,
whose mask lets through exactly the lanes picked, then a shuffle. A strided convolution reads
its windows this way in place (no im2col copy). Checked here on hand-built loop-IR kernels,
against numpy: every step, both vector widths, float32, float64 and 16-bit storage, lanes
masked past a ragged edge, a lane-uniform condition (all lanes off, then on), and a load
whose last lane reads the last element of its buffer, with an unreadable page right after it
(a load reaching one element further would fault). The IR has no gather left.
"""

from __future__ import annotations

import ctypes
import mmap
import platform
import re
import sys

import numpy as np
import pytest

from fusegrad.ir.dtypes import bfloat16, float16, float32, float64
from fusegrad.ir.symbolic import Var, lin
from fusegrad.pipeline.compiler import compile_kernel
from fusegrad.pipeline.llvm import render_llvm
from fusegrad.pipeline.loopir import Kernel, Load, Loop, Param, Store

STEPS = (2, 3, 4)
DTYPES = {"float32": float32, "float64": float64, "bfloat16": bfloat16, "float16": float16}
RNG = np.random.default_rng(3232)


def _storage(name: str):
    """numpy's dtype for a buffer of `name` (bfloat16 as its 16 bits)."""
    return np.uint16 if name == "bfloat16" else np.dtype(name)


def _kernel(dt, width: int, step: int, base: int, size: int, limit: int | None, rows: int = 1):
    """out[r * width + t] = in[base + step * t] for t < width (lanes past `limit` masked: 0),
    where r = 0 reads nothing (a lane-uniform condition r - 1 >= 0, when rows == 2)."""
    t = Var("t", 0, width - 1)
    r = Var("r", 0, rows - 1)
    out = Param("out0", dt, rows * width, True)
    src = Param("in0", dt, size, False)
    valid = []
    if limit is not None:
        valid.append(lin(limit) - lin(t))  # lane t reads where t <= limit
    if rows > 1:
        valid.append(lin(r) - 1)  # the same in every lane
    body = [
        Load("v", dt, src, lin(base) + lin(t) * step, tuple(valid)),
        Store(out, (lin(r) * width if rows > 1 else lin(0)) + t, "v"),
    ]
    loop = Loop(t, width, body, "vector")
    if rows > 1:
        loop = Loop(r, rows, [loop], "serial")
    return Kernel(f"shuffled_{dt.name}_{width}_{step}", [out, src], [loop], 1)


def _run(kernel: Kernel, source: np.ndarray, out: np.ndarray) -> str:
    symbol = f"{kernel.name}_{abs(hash(render_llvm(kernel, 'k'))) % 10**8}"
    ir = render_llvm(kernel, symbol)
    compiled = compile_kernel(ir, symbol, 2)
    compiled.fn(0, 1, out.ctypes.data, source.ctypes.data)
    return ir


def _want(source, width, step, base, limit):
    lanes = np.arange(width)
    got = np.zeros(width, source.dtype)
    on = lanes <= limit if limit is not None else np.ones(width, bool)
    got[on] = source[base + step * lanes[on]]
    return got


@pytest.mark.parametrize("name", DTYPES)
@pytest.mark.parametrize("width", (8, 16))
@pytest.mark.parametrize("step", STEPS)
def test_strided_lanes_load_every_step_th_element(name, width, step):
    dt = DTYPES[name]
    size = step * width + 5
    source = RNG.standard_normal(size).astype(np.float32)
    if name == "bfloat16":
        source = (source.view(np.uint32) >> 16).astype(np.uint16)
    else:
        source = source.astype(name)
    for base, limit in ((0, None), (3, None), (1, width - 4), (2, 0), (0, width // 2 - 1)):
        if base + step * (width - 1) >= size:
            continue
        out = np.full(width, 7, _storage(name))
        ir = _run(_kernel(dt, width, step, base, size, limit), source, out)
        assert "masked.gather" not in ir and "shufflevector" in ir
        np.testing.assert_array_equal(out, _want(source, width, step, base, limit))


@pytest.mark.parametrize("step", STEPS)
def test_a_lane_uniform_condition_masks_the_whole_load(step):
    width, size = 16, 4 * 16
    source = np.arange(size, dtype=np.float32) + 1
    out = np.full(2 * width, -1, np.float32)
    _run(_kernel(float32, width, step, 1, size, None, rows=2), source, out)
    np.testing.assert_array_equal(out[:width], 0)  # r = 0: nothing read
    np.testing.assert_array_equal(out[width:], source[1 + step * np.arange(width)])


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.machine().lower() not in ("x86_64", "amd64"),
    reason="a guard page through libc's mprotect",
)
@pytest.mark.parametrize("name", ("float32", "bfloat16"))
@pytest.mark.parametrize("step", STEPS)
def test_the_last_lane_at_the_end_of_a_buffer_reads_nothing_past_it(name, step):
    """The buffer's last element sits just before a page that cannot be read: a load of
    step x W elements unmasked at the tail would fault."""
    dt, width = DTYPES[name], 16
    page = mmap.PAGESIZE
    arena = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    start = ctypes.addressof(ctypes.c_char.from_buffer(arena))
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.mprotect(ctypes.c_void_p(start + page), page, 0) == 0  # PROT_NONE
    itemsize = np.dtype(_storage(name)).itemsize
    size = step * (width - 1) + 1  # lane W - 1 reads the buffer's last element
    offset = page - size * itemsize
    source = np.frombuffer(arena, _storage(name), count=size, offset=offset)
    values = (np.arange(size) % 251 + 1).astype(np.float32)
    source[:] = (values.view(np.uint32) >> 16) if name == "bfloat16" else values
    for limit in (None, width - 3):
        out = np.zeros(width, _storage(name))
        _run(_kernel(dt, width, step, 0, size, limit), source, out)
        np.testing.assert_array_equal(out, _want(source, width, step, 0, limit))
    del source
    libc.mprotect(ctypes.c_void_p(start + page), page, mmap.PROT_READ | mmap.PROT_WRITE)
    arena.close()


def test_a_strided_convolution_reads_its_windows_with_no_gather():
    """conv2d at stride 2, unpadded (so its input is read where it lies, no copy), forward
    and weight gradient: no im2col kernel, and the kernels' IR loads the windows as wide
    masked loads and shuffles, with no gather."""
    import fusegrad as fg
    from fusegrad.nn import functional as F

    x = fg.tensor(RNG.standard_normal((2, 8, 34, 34)).astype(np.float32))
    w = fg.tensor(RNG.standard_normal((16, 8, 3, 3)).astype(np.float32), requires_grad=True)
    y = F.conv2d(x, w, None, stride=2)
    (dw,) = fg.grad(y, [w], grad_outputs=fg.ones(*y.shape))
    kernels = fg.kernels(y, dw)
    assert not [k for k in kernels if "im2col" in k.reason or "copied" in k.reason]
    sums = [k for k in kernels if k.name.startswith("r_sum")]
    assert len(sums) == 2, [k.name for k in kernels]  # the forward, the weight gradient
    for k in sums:
        assert "masked.gather" not in k.llvm_ir, k.name
        every_other = (
            r"shufflevector <(\d+) x float> \S+, <\1 x float> poison, <\d+ x i32> <i32 0, i32 2,"
        )
        assert re.search(every_other, k.llvm_ir), k.name
    xn, wn = np.asarray(x.numpy(), np.float64), np.asarray(w.detach().numpy(), np.float64)
    win = np.lib.stride_tricks.sliding_window_view(xn, (3, 3), (2, 3))[:, :, ::2, ::2]
    np.testing.assert_allclose(
        y.detach().numpy(), np.einsum("ncijkl,ockl->noij", win, wn), 1e-4, 1e-4
    )
    np.testing.assert_allclose(dw.numpy(), win.sum((0, 2, 3))[None].repeat(16, 0), 1e-4, 1e-3)
