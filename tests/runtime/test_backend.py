"""The backend registry (`runtime/backend.py`): devices found by name, and a device added
as one backend class and its registration, with nothing else changed."""

from __future__ import annotations

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (the fixture)

import fusegrad as fg
from fusegrad.profiler import machine_limits
from fusegrad.runtime import backend_registry as registry
from fusegrad.runtime.buffer import Buffer
from fusegrad.runtime.cpu_backend import CpuBackend
from fusegrad.runtime.engine import engine


def test_the_registered_backends_and_their_lookup_by_device_name():
    assert registry.backend_names()[:2] == ["cpu", "cuda"]
    cpu, cuda = registry.get_backend("cpu"), registry.get_backend("cuda:0")
    assert registry.get_backend("cuda") is cuda and registry.get_backend("cuda:1") is cuda
    assert (cpu.name, cuda.name) == ("cpu", "cuda")
    assert cpu.is_host and cpu.is_host_memory and not cpu.indexed
    assert not cuda.is_host and cuda.indexed
    with pytest.raises(KeyError, match="no backend for device 'tpu:0'"):
        registry.get_backend("tpu:0")


def test_the_cpu_backend_reports_measured_limits():
    cpu = registry.get_backend("cpu")
    assert cpu.bandwidth > 0.1 and cpu.peak > 0.1  # GB/s, GFLOP/s
    assert machine_limits() == {"GB/s": cpu.bandwidth, "GFLOP/s": cpu.peak}


@pytest.mark.usefixtures("emulated")
def test_the_emulated_cuda_backend_says_what_it_runs_on():
    cuda = registry.get_backend("cuda")
    assert cuda.why_unavailable() is None and cuda.device_count() == 1
    assert "emulator" in cuda.description and cuda.is_host_memory and cuda.supports_fork
    assert cuda.bandwidth == registry.get_backend("cpu").bandwidth  # the host's memory


class _TaggedBuffer(Buffer):
    __slots__ = ()
    device = "tagged"


class _Tagged(CpuBackend):
    """A third device: the CPU's kernels, its own buffers, always run kernel by kernel."""

    name = "tagged"
    is_host = False
    compiled = 0
    launched = 0

    def plan_key(self, device, key):
        return (device, key)

    def alloc(self, size, dtype, device):
        return _TaggedBuffer(size, dtype)

    def from_host(self, array, dtype, device):
        return _TaggedBuffer.from_numpy(array, dtype)

    def compile_many(self, loops):  # what the engine calls for a new plan's kernels
        type(self).compiled += len(loops)
        return super().compile_many(loops)

    def prepare(self, plan):
        pass

    def run(self, plan, leaves):
        return None

    def launch(self, step, outs, inputs, timed):
        type(self).launched += 1
        super().launch(step, outs, inputs, timed)


@pytest.fixture
def tagged(monkeypatch, tmp_path):
    """`_Tagged` registered as device "tagged" for one test, with an empty disk cache (a
    warm one would give the CPU's kernels without `compile_many`)."""
    monkeypatch.setattr(fg.config, "cache", str(tmp_path))
    for table in ("_factories", "_instances", "_by_device"):
        monkeypatch.setattr(registry, table, dict(getattr(registry, table)))
    registry.register_backend("tagged", _Tagged)
    _Tagged.compiled = _Tagged.launched = 0
    return registry.get_backend("tagged")


def test_a_third_backend_is_one_class_and_its_registration(tagged):
    assert "tagged" in registry.backend_names()
    assert fg.device("tagged") == "tagged" and fg.device("tagged").index is None
    x = fg.tensor(np.array([0.5, 1.0, 2.0], np.float32), device="tagged", requires_grad=True)
    y = (x.exp() * 3).sum()
    y.backward()
    assert y.device == fg.device("tagged") and not y.is_cuda
    assert isinstance(engine.value(x.node), _TaggedBuffer)  # made by its from_host
    np.testing.assert_allclose(y.cpu().item(), 3 * np.exp([0.5, 1.0, 2.0]).sum(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.cpu().numpy(), 3 * np.exp([0.5, 1.0, 2.0]), rtol=1e-6)
    assert _Tagged.compiled > 0 and _Tagged.launched > 0  # its kernels ran through it
    with pytest.raises(TypeError, match="can't convert tagged device type tensor to numpy"):
        y.numpy()
    with pytest.raises(fg.DeviceError, match="the tagged device has no index 1"):
        fg.device("tagged:1")


@pytest.mark.backend_slice
def test_the_backend_fixture_runs_the_test_on_its_device(backend):
    y = fg.ones(4) * 2
    assert y.device.type == backend.name
    assert engine.plan_for([y.node])[0].backend is backend
    assert y.numpy().tolist() == [2.0, 2.0, 2.0, 2.0]
