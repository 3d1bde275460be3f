"""The device API on any machine: `fg.device`, `Tensor.to`, and the errors that say why
"cuda" cannot run here. The device itself is tested in tests/runtime/test_cuda_device.py
(on the CPU emulator of the generated CUDA C)."""

from __future__ import annotations

import os
import subprocess
import sys
import types

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.runtime import cuda as runtime_cuda
from fusegrad.runtime.config import Config, ConfigError

HERE = os.path.basename(__file__)


@pytest.fixture
def cpu_default():
    """The CPU as the default device (the suite may run with FUSEGRAD_TEST_DEVICE=cuda),
    and the cuda backend started afresh (these tests fake what it finds). A test that fakes
    with `monkeypatch` names this fixture first, so the fakes are undone before the default
    device (maybe a real GPU) is restored."""
    before = fg.get_default_device()
    fg.set_default_device("cpu")
    runtime_cuda.reset()
    yield
    runtime_cuda.reset()
    fg.set_default_device(before)


def test_device_objects_compare_as_torch_devices():
    assert fg.device("cpu") == "cpu" and fg.device("cpu") != "cuda"
    assert fg.device("cuda:0") == "cuda:0" and fg.device("cuda:0") == "cuda"
    assert fg.device("cuda", 1) == "cuda:1" and fg.device("cuda:1") != "cuda"
    assert fg.device("cuda").index is None and fg.device("cuda:2").index == 2
    assert fg.device(fg.device("cuda:0")) == fg.device("cuda")
    assert hash(fg.device("cuda")) == hash(fg.device("cuda:0"))
    assert repr(fg.device("cuda:0")) == "device(type='cuda', index=0)"
    assert repr(fg.device("cpu")) == "device(type='cpu')" and str(fg.device("cuda:3")) == "cuda:3"
    assert fg.device("cpu") != 3 and fg.device("cpu") != "gpu"


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "cpu:1", 1.5])
def test_bad_device_names_raise_at_the_users_line(bad):
    with pytest.raises(fg.DeviceError, match=rf"device.*{HERE}:\d+"):
        fg.device(bad)
    with pytest.raises(fg.DeviceError, match=HERE):
        fg.zeros(2, device=bad)


def test_cpu_tensors_move_and_cast_with_to(cpu_default):
    t = fg.tensor([1.5, 2.5])
    assert t.device == "cpu" and t.device == fg.device("cpu") and not t.is_cuda
    assert t.to("cpu") is t and t.cpu() is t and t.to(fg.device("cpu")) is t
    assert t.to(fg.float64).dtype is fg.float64 and t.to("float64").dtype is fg.float64
    assert t.to(dtype=fg.int64).tolist() == [1, 2]
    both = t.to("cpu", fg.float64)
    assert both.device == "cpu" and both.dtype is fg.float64
    other = fg.tensor([1, 2], dtype=fg.int32)
    assert t.to(other).dtype is fg.int32
    copied = t.to("cpu", copy=True)
    assert copied is not t and copied.tolist() == t.tolist()
    with pytest.raises(fg.DeviceError, match=r"'complex512' is neither a device .* nor a dtype"):
        t.to("complex512")


def test_creation_ops_and_likes_report_their_device(cpu_default):
    x = fg.ones(2, 3)
    made = [
        fg.zeros(2),
        fg.ones(2, device="cpu"),
        fg.full((2,), 3.0, device=fg.device("cpu")),
        fg.empty(2),
        fg.arange(4),
        fg.rand(3),
        fg.randn(3),
        fg.eye(2),
        fg.linspace(0, 1, 3),
        fg.tensor([1, 2]),
        fg.from_numpy(np.zeros(2)),
        fg.zeros_like(x),
        fg.ones_like(x),
        fg.full_like(x, 2),
        fg.empty_like(x),
        fg.rand_like(x),
        fg.randn_like(x),
        x * 2,
        x.sum(),
    ]
    assert all(t.device == "cpu" for t in made)
    assert fg.get_default_device() == "cpu"


def test_cuda_turned_off_says_so_at_the_users_line(cpu_default):
    with fg.config.override(cuda="off"):
        assert not fg.cuda.is_available() and fg.cuda.device_count() == 0
        assert "FUSEGRAD_CUDA=off" in fg.cuda.why_unavailable()
        for make in (
            lambda: fg.zeros(2, device="cuda"),
            lambda: fg.tensor([1.0], device="cuda:0"),
            lambda: fg.ones(2).to("cuda"),
            lambda: fg.ones(2).cuda(),
            lambda: fg.set_default_device("cuda"),
            lambda: fg.nn.Linear(2, 2).to("cuda"),
        ):
            with pytest.raises(fg.DeviceError, match=rf"cuda:0 is not available: .*off.*{HERE}"):
                make()
    assert fg.get_default_device() == "cpu"


def _fake_pycuda(monkeypatch, driver):
    package = types.ModuleType("pycuda")
    package.driver = driver
    monkeypatch.setitem(sys.modules, "pycuda", package)
    monkeypatch.setitem(sys.modules, "pycuda.driver", driver)


def test_cuda_without_pycuda_says_how_to_install_it(cpu_default, monkeypatch):
    monkeypatch.setitem(sys.modules, "pycuda", None)  # `import pycuda` raises ImportError
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)
    with fg.config.override(cuda="pycuda"):
        why = fg.cuda.why_unavailable()
        assert "PyCUDA is not installed" in why and "fusegrad[cuda]" in why
        assert "FUSEGRAD_CUDA=emulate" in why
        with pytest.raises(fg.DeviceError, match=rf"PyCUDA is not installed.*{HERE}"):
            fg.randn(3, device="cuda")


def test_cuda_without_a_driver_or_a_device_says_which(cpu_default, monkeypatch):
    def no_driver():
        raise RuntimeError("cuInit failed: no CUDA-capable device is detected")

    driver = types.SimpleNamespace(init=no_driver)
    _fake_pycuda(monkeypatch, driver)
    with fg.config.override(cuda="pycuda"):
        assert "CUDA driver could not be initialised (cuInit failed" in fg.cuda.why_unavailable()
    monkeypatch.setitem(sys.modules, "pycuda.driver", None)  # pycuda without libcuda
    runtime_cuda.reset()
    with fg.config.override(cuda="pycuda"):
        assert "CUDA driver could not be initialised" in fg.cuda.why_unavailable()
    driver = types.SimpleNamespace(init=lambda: None, Device=types.SimpleNamespace(count=lambda: 0))
    _fake_pycuda(monkeypatch, driver)
    runtime_cuda.reset()
    with fg.config.override(cuda="pycuda"):
        assert "found no CUDA device" in fg.cuda.why_unavailable()
        with pytest.raises(fg.DeviceError, match="found no CUDA device"):
            fg.zeros(1, device="cuda")


def test_importing_and_running_fusegrad_never_imports_pycuda():
    code = (
        "import sys, fusegrad as fg\n"
        "x = fg.ones(3) * 2\n"
        "assert x.tolist() == [2.0, 2.0, 2.0] and x.device == 'cpu'\n"
        "fg.cuda.is_available.__doc__\n"
        "assert 'pycuda' not in sys.modules, 'imported pycuda'\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "FUSEGRAD_TEST_DEVICE"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_fusegrad_cuda_setting_is_checked(monkeypatch):
    monkeypatch.setenv("FUSEGRAD_CUDA", "gpu")
    with pytest.raises(ConfigError, match="FUSEGRAD_CUDA='gpu' is not valid"):
        Config.from_env()
    monkeypatch.setenv("FUSEGRAD_CUDA", "Emulate")
    assert Config.from_env().cuda == "emulate"
    monkeypatch.delenv("FUSEGRAD_CUDA")
    assert Config.from_env().cuda == "pycuda"


def test_runtime_cuda_reports_the_same_reason_as_fg_cuda(cpu_default):
    with fg.config.override(cuda="off"):
        assert runtime_cuda.why_unavailable() == fg.cuda.why_unavailable()
        with pytest.raises(runtime_cuda.CudaUnavailable, match="turned off"):
            runtime_cuda.backend()


def test_to_and_module_to_refuse_bad_arguments_at_the_users_line(cpu_default):
    t = fg.ones(2)
    with pytest.raises(fg.FusegradError, match=rf"at most 2 positional arguments.*{HERE}"):
        t.to("cpu", fg.float64, "cpu")
    with pytest.raises(
        fg.DeviceError, match=rf"device type at start of device string: tpu.*{HERE}"
    ):
        t.to(device="tpu")
    model = fg.nn.Linear(2, 2)
    with pytest.raises(fg.DeviceError, match=rf"'tpu:0' is neither a device.*{HERE}"):
        model.to("tpu:0")
    with pytest.raises(fg.FusegradError, match=HERE):
        model.to("cpu", fg.float64, 3)
    with pytest.raises(fg.DTypeError, match=HERE):
        model.to(dtype="complex512")
    assert all(p.device == "cpu" and p.dtype is fg.float32 for p in model.parameters())
    assert model.to("cpu") is model and model.cpu() is model


def test_docstring_examples_of_the_device_modules(cpu_default):
    import doctest

    from fusegrad import cuda, devices

    for module in (devices, cuda, runtime_cuda):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module.__name__
