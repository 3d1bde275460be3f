"""CUDA graphs for PyCUDA, which has none: stream capture through the driver API (ctypes).

PyCUDA 2026.1 offers no stream capture and no graph calls, so `runtime/cuda.py` would
launch a cached plan's kernels one by one. libcuda exports them, and PyCUDA gives each
stream's `CUstream` handle (`stream.handle`): `driver_capture` finds the five entry
points in the library PyCUDA already loaded and returns a `DriverCapture` for a stream,
the interface `runtime/cuda.py` replays CUDA graphs through (`begin_capture`,
`end_capture() -> graph`, `graph.instantiate() -> executable`, `executable.launch(stream)`).

    begin   cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
    launch  ... the launches, on the stream: recorded, not run ...
    end     cuStreamEndCapture(stream, &graph)
    make    cuGraphInstantiateWithFlags(&exec, graph, 0); cuGraphDestroy(graph)
    replay  cuGraphLaunch(exec, stream)             (per run: one call, not one per kernel)
    drop    cuGraphExecDestroy(exec)                (when the bound launch set goes)

Every call's result is checked; any failure raises `CaptureFailed`, on which
`runtime/cuda.py` stops capturing for good and launches plainly (a capture that fails
leaves nothing behind: the graph is destroyed and the stream leaves capture mode). A
missing library or symbol means no graphs at all (`driver_capture` returns None).

Not run on a GPU yet (none where it was written): the logic is tested through
`runtime/cuda_stub.py`'s `StubLibcuda`, which imitates these entry points.

>>> from fusegrad.runtime.cuda_graphs import driver_capture
>>> driver_capture(None, library=None) is None  # no libcuda: no graphs
True
"""

from __future__ import annotations

import ctypes

CU_STREAM_CAPTURE_MODE_THREAD_LOCAL = 1  # other threads' CUDA calls may go on meanwhile
LIBRARY_NAMES = ("libcuda.so.1", "libcuda.so", "nvcuda.dll")

_P = ctypes.c_void_p
_PP = ctypes.POINTER(ctypes.c_void_p)
_SIGNATURES = {  # entry point: argument types (each returns a CUresult, 0 for success)
    "cuStreamBeginCapture_v2": [_P, ctypes.c_int],
    "cuStreamEndCapture": [_P, _PP],
    "cuGraphInstantiateWithFlags": [_PP, _P, ctypes.c_ulonglong],
    "cuGraphLaunch": [_P, _P],
    "cuGraphExecDestroy": [_P],
    "cuGraphDestroy": [_P],
}


class CaptureFailed(RuntimeError):
    """A stream-capture or graph call of the driver returned an error."""


def load_libcuda():
    """The CUDA driver library (the one PyCUDA loaded, if it did), or None."""
    for name in LIBRARY_NAMES:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


class DriverGraphs:
    """libcuda's capture and graph entry points, typed; `ValueError` if one is missing."""

    def __init__(self, library):
        self.calls = {}
        for name, argtypes in _SIGNATURES.items():
            fn = getattr(library, name, None)
            if fn is None:
                raise ValueError(f"the CUDA driver library has no {name}")
            fn.argtypes, fn.restype = argtypes, ctypes.c_int
            self.calls[name] = fn

    def check(self, name: str, *args) -> None:
        result = self.calls[name](*args)
        if result != 0:
            raise CaptureFailed(f"{name} returned CUresult {result}")


def driver_capture(stream, library) -> DriverCapture | None:
    """Stream capture of `stream` (a PyCUDA stream: its `handle`) through the driver
    library `library` (`load_libcuda()`'s), or None where the library (None) or an entry
    point is missing. None never means "find one": a stand-in driver's stream handle
    given to the real library would crash the process."""
    if library is None:
        return None
    try:
        api = DriverGraphs(library)
    except (ValueError, AttributeError):
        return None
    return DriverCapture(stream, api)


class DriverCapture:
    """Captures what is launched on one stream into a CUDA graph."""

    def __init__(self, stream, api: DriverGraphs):
        self.stream, self.api = stream, api

    def begin_capture(self) -> None:
        self.api.check(
            "cuStreamBeginCapture_v2", self.stream.handle, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        )

    def end_capture(self) -> _Graph:
        """The captured graph; raises (the stream left capture mode) if the capture broke."""
        graph = ctypes.c_void_p()
        self.api.check("cuStreamEndCapture", self.stream.handle, ctypes.byref(graph))
        if not graph.value:
            raise CaptureFailed("cuStreamEndCapture gave no graph")
        return _Graph(self.api, graph)


class _Graph:
    def __init__(self, api: DriverGraphs, graph: ctypes.c_void_p):
        self.api, self.graph = api, graph

    def discard(self) -> None:
        """Destroy the graph without instantiating it (a capture that failed after all)."""
        self.api.calls["cuGraphDestroy"](self.graph)

    def instantiate(self) -> GraphExec:
        """The executable graph; the graph itself is destroyed either way."""
        exe = ctypes.c_void_p()
        try:
            self.api.check("cuGraphInstantiateWithFlags", ctypes.byref(exe), self.graph, 0)
        finally:
            self.api.calls["cuGraphDestroy"](self.graph)
        if not exe.value:
            raise CaptureFailed("cuGraphInstantiateWithFlags gave no executable graph")
        return GraphExec(self.api, exe)


class GraphExec:
    """An instantiated graph: `launch(stream)` runs it. Dropped (its bound launch set gone),
    it is queued for `destroy_released`, which the backend calls with its context current
    (a finalizer may run on any thread, with no context; the driver frees an executable
    graph still running once it completes)."""

    def __init__(self, api: DriverGraphs, exe: ctypes.c_void_p):
        self.api, self.exe = api, exe

    def launch(self, stream) -> None:
        self.api.check("cuGraphLaunch", self.exe, stream.handle)

    def __del__(self):
        if getattr(self, "exe", None) is not None:
            _released.append((self.api, self.exe))  # (list.append: atomic, any thread)


_released: list[tuple[DriverGraphs, ctypes.c_void_p]] = []


def destroy_released() -> int:
    """Destroy the executable graphs dropped so far (call with the context current); how
    many."""
    done = 0
    while _released:
        api, exe = _released.pop()
        api.calls["cuGraphExecDestroy"](exe)
        done += 1
    return done
