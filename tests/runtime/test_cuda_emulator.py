"""The CUDA emulator runs CUDA C as a GPU would, for what fusegrad's kernels rely on.

Each test launches a small hand-written kernel whose answer depends on the
feature under test (a missing barrier, a wrong shuffle lane, a swapped index
gives a wrong number), and compares with numpy.
"""

from __future__ import annotations

import doctest
import os

import numpy as np
import pytest

from fusegrad.runtime import cuda_emulator
from fusegrad.runtime.cuda_emulator import EmulatedModule, EmulatorError

SOURCE = r"""
extern "C" __global__ void indices(int* out) {
  // every thread writes its own coordinates: x, y, z of the thread and of the block
  unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  int* o = out + 6 * (b * blockDim.x * blockDim.y * blockDim.z + t);
  o[0] = threadIdx.x; o[1] = threadIdx.y; o[2] = threadIdx.z;
  o[3] = blockIdx.x; o[4] = blockIdx.y; o[5] = blockIdx.z;
}

extern "C" __global__ void tree_sum(double* out, const double* x, int n) {
  // a shared-memory tree: wrong without a real barrier between the steps
  __shared__ double buf[256];
  double v = 0;
  for (int i = threadIdx.x; i < n; i += blockDim.x) v += x[(long long)blockIdx.x * n + i];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = buf[0];
}

extern "C" __global__ void shuffles(int* down, int* xr, int* bcast, float* fdown) {
  int lane = threadIdx.x;
  down[lane] = __shfl_down_sync(0xffffffffu, lane * 10, 3);
  xr[lane] = __shfl_xor_sync(0xffffffffu, lane, 5);
  bcast[lane] = __shfl_sync(0xffffffffu, lane + 1000, 7);
  fdown[lane] = __shfl_down_sync(0xffffffffu, 0.5f * lane, 16);
}

extern "C" __global__ void early_return(int* out, long long n) {
  // threads that returned no longer count at the barrier, as on the GPU
  long long i = threadIdx.x;
  if (i >= n) return;
  out[i] = 1;
  __syncthreads();
  int next = out[(i + 1) % n];
  __syncthreads();
  out[i] += next;
}

extern "C" __global__ void dynamic_reverse(float* out, const float* x, int n) {
  // a block's values through dynamic shared memory (as pipeline/cuda_prelude.py's FG_DYNAMIC_SHARED
  // carves it), read back reversed; first what the launch left in it
  unsigned char* const smem = fg_emu_dynamic_shared();
  float* const buf = reinterpret_cast<float*>(smem);
  if (threadIdx.x == 0) out[2 * n] = (float)((uintptr_t)smem % 128);
  out[n + threadIdx.x] = buf[threadIdx.x];
  __syncthreads();
  buf[threadIdx.x] = x[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = buf[n - 1 - threadIdx.x];
}

extern "C" __global__ void scalars(double* out, float a, long long b, int c, unsigned char d) {
  out[0] = a; out[1] = (double)b; out[2] = c; out[3] = d;
  out[4] = __int_as_float(0x3f800000); out[5] = expf(1.0f); out[6] = __longlong_as_double(0);
}
"""


@pytest.fixture(scope="module")
def module():
    return EmulatedModule(SOURCE)


def test_every_thread_sees_its_own_coordinates(module):
    grid, block = (3, 2, 2), (4, 2, 3)
    threads, blocks = 4 * 2 * 3, 3 * 2 * 2
    out = np.full((blocks, threads, 6), -1, np.int32)
    module.get_function("indices")(out, grid=grid, block=block)
    b = np.arange(blocks)
    t = np.arange(threads)
    expect_t = np.stack([t % 4, t // 4 % 2, t // 8], 1)
    expect_b = np.stack([b % 3, b // 3 % 2, b // 6], 1)
    np.testing.assert_array_equal(out[:, :, :3], np.broadcast_to(expect_t, (blocks, threads, 3)))
    np.testing.assert_array_equal(out[:, :, 3:], np.repeat(expect_b[:, None], threads, 1))


@pytest.mark.parametrize("n", [1, 31, 256, 1000])
def test_syncthreads_is_a_barrier(module, n):
    x = np.random.default_rng(n).standard_normal((5, n))
    out = np.zeros(5)
    module.get_function("tree_sum")(out, x, np.int32(n), grid=(5,), block=(256,))
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-12)


def test_warp_shuffles(module):
    down, xr, bc = (np.zeros(64, np.int32) for _ in range(3))
    fdown = np.zeros(64, np.float32)
    module.get_function("shuffles")(down, xr, bc, fdown, block=(64,))
    lane = np.arange(64)
    # a lane past the warp's end keeps its own value
    np.testing.assert_array_equal(down, np.where(lane % 32 + 3 < 32, lane + 3, lane) * 10)
    np.testing.assert_array_equal(xr, lane ^ 5)
    np.testing.assert_array_equal(bc, lane // 32 * 32 + 7 + 1000)
    np.testing.assert_array_equal(fdown, np.where(lane % 32 + 16 < 32, lane + 16, lane) * 0.5)


def test_returned_threads_leave_the_barrier(module):
    out = np.zeros(64, np.int32)
    module.get_function("early_return")(out, 40, block=(64,))
    np.testing.assert_array_equal(out[:40], 2)
    np.testing.assert_array_equal(out[40:], 0)


def test_dynamic_shared_memory_is_the_launchs(module):
    n = 100
    x = np.arange(n, dtype=np.float32)
    out = np.zeros(2 * n + 1, np.float32)
    module.get_function("dynamic_reverse")(out, x, np.int32(n), block=(n,), shared=4 * n)
    np.testing.assert_array_equal(out[:n], x[::-1])
    # what no thread wrote reads as NaN (0xff bytes), not as a 0 that could pass for data
    assert np.isnan(out[n : 2 * n]).all() and out[2 * n] == 0  # 128-byte aligned
    with pytest.raises(EmulatorError, match="at most 232448 bytes of shared memory"):
        module.get_function("dynamic_reverse")(out, x, np.int32(n), block=(n,), shared=2**20)


def test_scalar_arguments_take_the_parameter_types(module):
    out = np.zeros(7)
    module.get_function("scalars")(out, np.float32(1.5), 2**40, np.int32(-3), 200)
    np.testing.assert_allclose(out, [1.5, 2.0**40, -3, 200, 1.0, np.exp(np.float32(1)), 0.0])


def test_launch_errors_are_named(module):
    f = module.get_function("scalars")
    with pytest.raises(EmulatorError, match="takes 5 arguments"):
        f(np.zeros(7))
    with pytest.raises(EmulatorError, match="long long, got the float"):
        f(np.zeros(7), 1.0, 2.5, 1, 1)
    with pytest.raises(EmulatorError, match="at most 1024 threads"):
        module.get_function("indices")(np.zeros(1, np.int32), block=(2048,))
    with pytest.raises(EmulatorError, match="no kernel 'nope'"):
        module.get_function("nope")
    with pytest.raises(EmulatorError, match="pointer"):
        module.get_function("indices")("not memory")


def test_compile_errors_show_the_numbered_source():
    with pytest.raises(EmulatorError, match=r"(?s)g\+\+ could not compile.*   2 "):
        EmulatedModule('extern "C" __global__ void broken(float* x) {\n  x[0] = undefined;\n}')


def test_the_compiled_library_is_cached(module):
    again = EmulatedModule(SOURCE)
    assert again.library._name == module.library._name


def test_docstring_example():
    assert doctest.testmod(cuda_emulator).failed == 0


def test_without_a_cache_the_library_lives_in_a_scratch_folder():
    from fusegrad.runtime.config import config

    with config.override(cache=None):
        mod = EmulatedModule(SOURCE.replace("tree_sum", "tree_sum_uncached"))
    assert "fusegrad_cuda_emu_" in mod.library._name
    out = np.zeros(1)
    mod.get_function("tree_sum_uncached")(out, np.ones(10), np.int32(10), block=(256,))
    assert out[0] == 10


def test_a_forked_child_launches_with_threads_of_its_own(module):
    # the parent's pool of block threads does not survive a fork: the child makes its own
    out = np.zeros(1)
    f = module.get_function("tree_sum")
    f(out, np.ones(10), np.int32(10), block=(256,))
    pid = os.fork()
    if pid == 0:  # the child: exit status 0 only if its launch ran and was right
        f(out, np.ones(20), np.int32(20), block=(256,))
        os._exit(0 if out[0] == 20 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_the_header_copy_cannot_collide_with_another_process(tmp_path, monkeypatch):
    """Processes sharing a cache folder copy the header at once: each through a temporary
    of its own. Another's temporary in the way (here a folder under the old fixed name
    `cuda_emu.h.tmp`) made the copy fail."""
    import hashlib
    import threading

    built = []

    def fake_compile(cmd, out, text=None):  # the copy is under test, not g++
        built.append(out)
        with open(out, "w") as f:
            f.write("built")

    monkeypatch.setattr(cuda_emulator, "_compile", fake_compile)
    monkeypatch.setattr(cuda_emulator, "_runtimes", {})
    monkeypatch.setattr(cuda_emulator, "_include_dirs", {})
    monkeypatch.setattr(cuda_emulator.ctypes, "CDLL", lambda path, mode=0: path)
    pch_dir = tmp_path / f"pch-{hashlib.sha256(b'fp').hexdigest()[:16]}"
    (pch_dir / "cuda_emu.h.tmp").mkdir(parents=True)
    includes = cuda_emulator._load_runtime(str(tmp_path), "fp")
    assert includes[:2] == ["-I", str(pch_dir)]
    with open(cuda_emulator.HEADER) as f:
        assert (pch_dir / "cuda_emu.h").read_text() == f.read()
    assert str(pch_dir / "cuda_emu.h.gch") in built

    errors = []

    def copy_many():  # concurrent copies to one place: each whole, none in another's way
        try:
            for _ in range(20):
                cuda_emulator._copy_atomic(cuda_emulator.HEADER, str(pch_dir / "cuda_emu.h"))
        except OSError as e:
            errors.append(e)

    threads = [threading.Thread(target=copy_many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(p.name for p in pch_dir.iterdir()) == [
        "cuda_emu.h",
        "cuda_emu.h.gch",
        "cuda_emu.h.tmp",
    ]


# ---------------------------------------------------------------- FUSEGRAD_EMU_GUARD

OUT_OF_BOUNDS = r"""
import numpy as np
from fusegrad.runtime.config import config
from fusegrad.runtime.cuda_emulator import EmulatedModule, guarded_array

mod = EmulatedModule('''
extern "C" __global__ void reads_past_the_end(float* out, const float* x, long long n) {
  long long i = threadIdx.x;
  if (i < n + %d) out[i %% n] = x[i];
}''')
x, out = guarded_array(40, np.dtype(np.float32)), guarded_array(40, np.dtype(np.float32))
x[:] = 1
with config.override(emu_guard=True):
    mod.get_function("reads_past_the_end")(out, x, np.int64(10), block=(32, 1, 1))
print("no fault", out.sum())
"""


@pytest.mark.parametrize("past", [0, 4])
def test_a_guarded_buffer_faults_at_an_out_of_bounds_read_and_names_the_kernel(past):
    """A kernel reading 16 bytes past a guarded buffer's end stops there (SIGSEGV), and the
    runtime names the kernel; one that stays inside runs as it always does."""
    _faults_or_runs(OUT_OF_BOUNDS % past, past > 0, "reads_past_the_end", "no fault 10.0")


def _faults_or_runs(script: str, faults: bool, kernel: str, clean: str) -> None:
    """Run `script` in a process of its own: it stops at a guard page naming `kernel`, or
    (not `faults`) ends well and prints `clean`."""
    import subprocess
    import sys

    argv = [sys.executable, "-c", script]
    run = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if not faults:
        assert run.returncode == 0 and clean in run.stdout, run.stderr
    else:
        assert run.returncode != 0
        assert f"out-of-bounds access (a guard page) in kernel {kernel}" in run.stderr


def test_a_guarded_array_ends_at_its_guard_page_and_is_16_byte_aligned(monkeypatch):
    import mmap

    for nbytes in (1, 4, 40, 4096, 5000):
        a = cuda_emulator.guarded_array(nbytes, np.dtype(np.uint8))
        end = a.ctypes.data + nbytes
        assert a.ctypes.data % 16 == 0 and a.nbytes == nbytes
        assert 0 <= -end % mmap.PAGESIZE < 16  # the guard page starts within 15 bytes

    # where the system refuses more mappings: None, counted (the caller allocates as usual)
    def refused(*args, **kwargs):
        raise OSError(12, "Cannot allocate memory")

    before = cuda_emulator.guard_refusals
    monkeypatch.setattr(cuda_emulator.mmap, "mmap", refused)
    assert cuda_emulator.guarded_array(64, np.dtype(np.float32)) is None
    assert cuda_emulator.guard_refusals == before + 1


def test_guarded_memory_is_private_to_a_process_and_never_pooled(monkeypatch):
    """A forked DataLoader worker writing into guarded memory the parent allocated must not
    change the parent's values (anonymous mmap is shared by default), and a guarded buffer
    that dies must not go to the CPU buffers' pool, which would hand it out again."""
    import gc

    from fusegrad.ir.dtypes import float32
    from fusegrad.runtime import buffer as buffer_module
    from fusegrad.runtime.buffer import Buffer

    a = cuda_emulator.guarded_array(64, np.dtype(np.float32))
    a[:] = 1.0
    pid = os.fork()
    if pid == 0:  # the child writes and leaves at once
        a[:] = 2.0
        os._exit(0)
    os.waitpid(pid, 0)
    assert a.tolist() == [1.0] * 16
    given = []
    monkeypatch.setattr(buffer_module, "_give", lambda *args: given.append(args))
    buf = Buffer(16, float32, cuda_emulator.guarded_array(64, np.dtype(np.float32)))
    address = buf.ptr
    del buf
    gc.collect()  # (other tests' garbage may die here too, and be pooled)
    assert all(entry[1] != address for _, entry in given)


BEFORE_THE_START = r"""
import numpy as np
from fusegrad.runtime.config import config
from fusegrad.runtime.cuda_emulator import EmulatedModule, guarded_array

mod = EmulatedModule('''
extern "C" __global__ void reads_before_the_start(float* out, const float* x, long long back) {
  long long i = threadIdx.x;
  out[i] = x[i - back];
}''')
x = guarded_array(64, np.dtype(np.float32), before=True)
out = guarded_array(64, np.dtype(np.float32), before=True)
x[:] = 1
with config.override(emu_guard=2):
    mod.get_function("reads_before_the_start")(out, x, np.int64(%d), block=(16, 1, 1))
print("no fault", out.sum())
"""


@pytest.mark.parametrize("back", [0, 1])
def test_a_buffer_guarded_before_faults_at_a_read_before_its_start(back):
    """FUSEGRAD_EMU_GUARD=2: the buffer starts where a guard page ends, so a read of the
    element before the first stops there."""
    _faults_or_runs(BEFORE_THE_START % back, back > 0, "reads_before_the_start", "no fault 16.0")
