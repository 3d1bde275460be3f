"""`tensor_map.ParamsLaunch`: a kernel that takes tensor maps launched by the driver's
`cuLaunchKernel` with `kernelParams` (one pointer per parameter into the packed bytes),
the way an H200 accepts such a kernel where PyCUDA's one-buffer launch is refused
(scripts/gpu_tma_probe.py). Checked here against a stand-in for libcuda that records each
call; on a Hopper GPU, tests/pipeline/test_cuda_wgmma.py runs the kernels through it."""

from __future__ import annotations

import struct
import types

import pytest

from fusegrad.runtime import tensor_map


def fake_libcuda(fail: str | None = None):
    """libcuda's entry points as plain functions (which take ctypes' argtypes and restype
    as attributes), recording their calls; `fail` names one that returns an error."""
    lib = types.SimpleNamespace(calls=[])

    def entry(name):
        def call(*args):
            lib.calls.append((name, args))
            if name in ("cuModuleLoadData", "cuModuleGetFunction"):
                args[0]._obj.value = 0x1000 if name == "cuModuleLoadData" else 0x2000
            if name == "cuLaunchKernel":  # the pointers, read while the call is made
                lib.params = [args[9][i] for i in range(lib.count)]
            return 700 if name == fail else 0

        return call

    for name in ("cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute",
                 "cuLaunchKernel", "cuModuleUnload"):  # fmt: skip
        setattr(lib, name, entry(name))
    return lib


def test_each_parameter_gets_a_pointer_to_its_place_in_the_packed_bytes():
    lib = fake_libcuda()
    lib.count = 5
    launch = tensor_map.ParamsLaunch(b"cubin", "k", 3, 2, 197632, library=lib)
    names = [name for name, _ in lib.calls]
    assert names == ["cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute"]
    assert lib.calls[0][1][1] == b"cubin" and lib.calls[1][1][2] == b"k"
    assert lib.calls[2][1][1:] == (8, 197632)  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES

    packed = tensor_map.pack([0x10, 0x20, 0x30], [types.SimpleNamespace(param=1),
                             types.SimpleNamespace(param=2)],
                             lambda spec, address: bytes([spec.param]) * 128)  # fmt: skip
    params = tensor_map.host_aligned(packed)
    launch((16, 32), (16, 16, 1), params, 197632, types.SimpleNamespace(handle=0x77))
    name, args = lib.calls[-1]
    assert name == "cuLaunchKernel"
    assert args[1:8] == (16, 32, 1, 16, 16, 1, 197632) and args[8] == 0x77 and args[10] is None
    base = params.ctypes.data
    assert lib.params == [base, base + 8, base + 16, base + 64, base + 192]
    # what each pointer points at: the three addresses, then each map
    raw = bytes(params)
    assert [struct.unpack_from("<Q", raw, p - base)[0] for p in lib.params[:3]] == [16, 32, 48]
    assert raw[64:192] == b"\1" * 128 and raw[192:320] == b"\2" * 128

    launch((1, 1, 1), (32, 1, 1), params, 0, None)  # the legacy default stream
    assert lib.calls[-1][1][8] is None
    del launch
    assert lib.calls[-1][0] == "cuModuleUnload"


def test_no_dynamic_shared_memory_asks_for_none():
    lib = fake_libcuda()
    tensor_map.ParamsLaunch(b"cubin", "k", 1, 1, 0, library=lib)
    assert "cuFuncSetAttribute" not in [name for name, _ in lib.calls]


@pytest.mark.parametrize("fail", ["cuModuleLoadData", "cuModuleGetFunction", "cuLaunchKernel"])
def test_a_driver_error_raises_with_the_call_and_its_code(fail):
    lib = fake_libcuda(fail)
    lib.count = 2
    with pytest.raises(tensor_map.LaunchFailed, match=f"{fail} returned CUresult 700"):
        launch = tensor_map.ParamsLaunch(b"cubin", "k", 1, 1, 0, library=lib)
        launch((1, 1, 1), (32, 1, 1), tensor_map.host_aligned(bytes(192)), 0, None)


def test_a_forked_child_does_not_unload_the_parents_module(monkeypatch):
    # (CUDA does not survive fork: a child that drops the launch must not call the driver)
    lib = fake_libcuda()
    launch = tensor_map.ParamsLaunch(b"cubin", "k", 1, 1, 0, library=lib)
    child = launch.pid + 1
    monkeypatch.setattr(tensor_map.os, "getpid", lambda: child)
    del launch
    assert "cuModuleUnload" not in [name for name, _ in lib.calls]
