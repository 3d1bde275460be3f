"""The `emulated` fixture: the cuda device on the CPU emulator of the generated CUDA C (or
on the GPU the suite runs on), for tests/runtime/test_cuda_device.py (all its tests) and
tests/frontend/test_copying.py, with the CPU as the default device and `.numpy()` refused
for device tensors, as PyTorch does."""

from __future__ import annotations

import os

import pytest

import fusegrad as fg
from fusegrad import devices
from fusegrad.runtime import cuda as runtime_cuda

# the emulator, unless the whole suite runs on a real GPU (then the tests run there)
ON_GPU = os.environ.get("FUSEGRAD_TEST_DEVICE", "cpu") != "cpu" and fg.config.cuda == "pycuda"
BACKEND = "pycuda" if ON_GPU else "emulate"


@pytest.fixture
def emulated():
    before, strict = fg.get_default_device(), devices.numpy_reads_devices
    with fg.config.override(cuda=BACKEND):
        runtime_cuda.reset()
        fg.set_default_device("cpu")
        devices.numpy_reads_devices = False
        try:
            yield
        finally:
            devices.numpy_reads_devices = strict
            fg.set_default_device(before)
    runtime_cuda.reset()
