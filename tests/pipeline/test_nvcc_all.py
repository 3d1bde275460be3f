"""`--nvcc-all`'s collector (tests/_nvcc_all.py) catches a kernel nvcc refuses, names it,
keeps nvcc's message, and compiles a form it has seen once (a text, its integers aside);
under pytest-xdist a worker's refusal fails the whole run (tests/conftest.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _nvcc_all import ARCHS, SYMBOL, NvccAll

from fusegrad.pipeline.cuda import PRELUDE

NVCC = shutil.which("nvcc")
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
TESTS = Path(__file__).resolve().parents[1]

GOOD = f'extern "C" __global__ void {SYMBOL}(float* __restrict__ out0) {{\n  out0[0] = 1.0f;\n}}'
# a typo the renderer could make: an undeclared name
# compiles, with a warning (an unused variable) that must not count as a failure
WARNS = GOOD.replace("{\n", "{\n  const float unused = 2.0f;\n", 1)
BAD = f'extern "C" __global__ void {SYMBOL}(float* __restrict__ out0) {{\n  out0[0] = in9[0];\n}}'


@needs_nvcc
def test_a_broken_kernel_is_named_with_nvccs_message():
    """Plain CUDA C is compiled for the first arch alone (the prelude for the others too,
    in a unit of its own); a kernel with inline PTX for each arch."""
    collector = NvccAll(NVCC, PRELUDE, unit_size=3)
    collector.add("E_good", GOOD)
    collector.add("E_warns", WARNS)
    collector.add("E_broken", BAD)  # fills the unit: compiled in the background from here
    collector.add("E_good_again", GOOD.replace("1.0f", "2.0f"))  # the last, partial unit
    failures = collector.finish()
    assert collector.units == 3  # two of kernels, the prelude on the other arch
    assert [f.arch for f in failures] == [ARCHS[0]]
    for f in failures:
        assert f.kernel == "E_broken"
        assert "in9" in f.message and "undefined" in f.message
    assert collector.folder.exists()  # kept for a look at the failing unit
    shutil.rmtree(collector.folder)


@needs_nvcc
def test_a_kernel_with_inline_ptx_is_compiled_for_each_arch():
    collector = NvccAll(NVCC, PRELUDE)
    collector.add(
        "E_ptx", BAD.replace("out0[0] = in9[0];", 'asm volatile("");\n  out0[0] = in9[0];')
    )
    failures = collector.finish()
    assert collector.units == 1
    assert sorted(f.arch for f in failures) == sorted(ARCHS)
    assert all(f.kernel == "E_ptx" for f in failures)
    shutil.rmtree(collector.folder)


@needs_nvcc
def test_identical_kernels_compile_once():
    collector = NvccAll(NVCC, PRELUDE)
    collector.add("E_one", GOOD)
    collector.add("E_two", GOOD)  # another symbol, the same text
    assert (collector.offered, collector.kernels) == (2, 1)
    assert collector.finish() == []
    assert collector.units == 2  # the kernel's, the prelude's on the other arch
    assert not collector.folder.exists()


@needs_nvcc
def test_kernels_that_differ_only_in_integer_values_compile_once():
    sized = GOOD.replace("out0[0] = 1.0f;", "out0[threadIdx.x * 16 + 3] = 1.0f;")
    collector = NvccAll(NVCC, PRELUDE)
    collector.add("E_16", sized)
    collector.add("E_32", sized.replace("16 + 3", "32 + 5ll"))  # another size: one form
    collector.add("E_zero", sized.replace("16", "0"))  # a zero stays a form of its own
    collector.add("E_wide", sized.replace("16", "4294967296"))  # as does a 64-bit value
    collector.add("E_float", sized.replace("1.0f", "2.0f"))  # floats are text
    collector.add("E_hex", sized.replace("16", "0x10"))  # and so are hexadecimal numbers
    assert (collector.offered, collector.kernels) == (6, 5)
    assert collector.finish() == []


@needs_nvcc
def test_an_error_outside_every_kernel_blames_the_unit():
    collector = NvccAll(NVCC, PRELUDE + "not C++;\n", archs=ARCHS[:1])
    collector.add("E_good", GOOD)
    (failure,) = collector.finish()
    assert failure.kernel.startswith("unit0 (1 kernels: E_good")
    assert "error" in failure.message
    shutil.rmtree(collector.folder)


@pytest.mark.slow
def test_a_kernel_refused_in_an_xdist_worker_fails_the_run(tmp_path):
    """scripts/test.sh runs the suite in pytest-xdist workers, each with its own
    collector; the controller names what each worker's nvcc refused and fails the run,
    though every test passed. The nvcc here is a stand-in that refuses every unit (each
    worker compiles at least the prelude)."""
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'error: refused by the test stand-in' >&2\nexit 1\n")
    nvcc.chmod(0o755)
    env = dict(os.environ, PATH=f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--nvcc-all", "-p", "no:cacheprovider"]
        + [str(TESTS / "ir" / "test_symbolic.py")],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 1, out
    assert re.search(r"^\d+ passed in ", out, re.MULTILINE), out  # every test passed
    for worker in ("gw0", "gw1"):
        assert re.search(rf"{worker}: unit\d+ \(\d+ kernels: .*\) does not compile for", out), out
    assert "refused by the test stand-in" in out
    for folder in re.findall(r"units in (\S+)\)", out):  # kept for a look, as failures are
        shutil.rmtree(folder)
