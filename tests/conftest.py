"""Run the suite on another device: FUSEGRAD_TEST_DEVICE=cuda (with FUSEGRAD_CUDA=emulate
where there is no GPU) makes "cuda" the default device for the whole session, so the op,
autodiff and nn tests build and run their graphs there. Values are read back with
`.numpy()` as on the CPU (PyTorch refuses that for device tensors; the tests of that
refusal turn the refusal back on)."""

from __future__ import annotations

import os

TEST_DEVICE = os.environ.get("FUSEGRAD_TEST_DEVICE", "cpu").strip() or "cpu"


def pytest_configure(config):
    if TEST_DEVICE == "cpu":
        return
    import fusegrad as fg
    from fusegrad import devices

    fg.set_default_device(TEST_DEVICE)
    devices.numpy_reads_devices = True


def pytest_report_header(config):
    return f"fusegrad test device: {TEST_DEVICE} (FUSEGRAD_TEST_DEVICE)"
