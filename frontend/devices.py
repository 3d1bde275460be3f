"""Devices, with PyTorch's names: `fg.device`, `device=` on creation ops, the default device.

A tensor's device is its graph node's (`Node.device`: "cpu" or "cuda:N"). Values live
where their buffers do; ops check that their inputs share one device when they are
written. The device types are the registered backends' (`runtime/backend.py`); this
module parses a user's device string and asks the device's backend what it can do
(`is_host`, `indexed`, `why_unavailable`), never testing a name itself. `"cuda"` runs
through PyCUDA on a GPU, or on the CPU emulator of the generated CUDA C when
`FUSEGRAD_CUDA=emulate` (see `runtime/cuda_backend.py`).

>>> import fusegrad as fg
>>> fg.device("cpu") == "cpu"
True
>>> fg.device("cuda:0")
device(type='cuda', index=0)
>>> fg.zeros(2).device
device(type='cpu')
"""

from __future__ import annotations

from .errors import DeviceError, fail
from .ir.dtypes import to_dtype
from .runtime.backend import HOST, backend_names, get_backend
from .runtime.engine import engine


class device:
    """A device: `device("cpu")`, `device("cuda")`, `device("cuda:1")`, `device("cuda", 0)`.

    Compares equal to another device or a string naming the same device; "cuda"
    without an index means the current CUDA device (cuda:0), as a tensor reports it.
    """

    __slots__ = ("type", "index")

    def __init__(self, spec, index: int | None = None):
        if isinstance(spec, device):
            spec, index = spec.type, spec.index if index is None else index
        kind, idx = _parse(spec)
        if index is not None:
            if idx is not None:
                fail(DeviceError, "device", f"type (string) must not include an index: {spec!r}")
            idx = int(index)
        indexed = get_backend(kind).indexed
        if not indexed and idx not in (None, 0):
            fail(DeviceError, "device", f"the {kind} device has no index {idx}")
        self.type, self.index = kind, (idx if indexed else None)

    def canonical(self) -> str:
        """The name nodes and buffers carry: "cpu" or "cuda:N"."""
        return f"{self.type}:{self.index or 0}" if get_backend(self.type).indexed else self.type

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        if self.index is None:
            return f"device(type={self.type!r})"
        return f"device(type={self.type!r}, index={self.index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except DeviceError:
                return False
        if not isinstance(other, device):
            return NotImplemented
        return self.canonical() == other.canonical()

    def __hash__(self) -> int:
        return hash(self.canonical())


def _parse(spec) -> tuple[str, int | None]:
    if isinstance(spec, int) and not isinstance(spec, bool):
        return "cuda", spec  # torch: a bare ordinal is a CUDA device
    if not isinstance(spec, str):
        fail(DeviceError, "device", f"expected a device name such as 'cpu' or 'cuda', got {spec!r}")
    kind, _, idx = spec.strip().partition(":")
    types = backend_names()
    if kind not in types:
        fail(
            DeviceError,
            "device",
            f"Expected one of {', '.join(types)} device type at start of device string: {spec}",
        )
    if not _:
        return kind, None
    if not idx.isdigit():
        fail(DeviceError, "device", f"invalid device string: {spec!r}")
    return kind, int(idx)


_objects: dict[str, device] = {}  # canonical name -> the device object tensors report
_canonical: dict[str, str] = {}  # a device string a user wrote -> its canonical name


def of(name: str | None) -> device:
    """The device object for a node's device name (None, a constant: the default device)."""
    name = name or _default
    d = _objects.get(name)
    if d is None:
        d = _objects[name] = device(name)
    return d


def resolve(spec, op: str = "device") -> str:
    """The canonical name of the device `spec` asks for (None: the default device),
    checked usable here: a CUDA device that cannot run says why, at the user's line."""
    if spec is None:
        return _default
    if isinstance(spec, str):
        name = _canonical.get(spec)
        if name is None:
            name = _canonical[spec] = device(spec).canonical()
    else:
        name = spec.canonical() if isinstance(spec, device) else device(spec).canonical()
    require(name, op)
    return name


def require(name: str, op: str) -> None:
    """Raise `DeviceError` naming why device `name` cannot be used here (the host always can)."""
    b = get_backend(name)
    if b.is_host:
        return
    why = b.why_unavailable()
    if why is not None:
        fail(DeviceError, op, f"{name} is not available: {why}")
    count = b.device_count()
    index = int(name.partition(":")[2] or 0)
    if index >= count:
        kind = b.name
        fail(
            DeviceError,
            op,
            f"{name} does not exist: {count} {kind.upper()} device(s) here (valid: {kind}:0"
            + (f" to {kind}:{count - 1})" if count > 1 else ")"),
        )


def is_host(name: str | None) -> bool:
    """Whether a node's device name is the host's (None, a constant's, counts as the host):
    a value there is a numpy array."""
    return name is None or get_backend(name).is_host


def names_host(spec) -> bool:
    """Whether `spec` (a device object or string) names the host device."""
    return is_device(spec) and is_host(device(spec).canonical())


def is_device(spec) -> bool:
    """Whether `spec` names a device (not a dtype): a device object, or 'cpu'/'cuda[:N]'."""
    if isinstance(spec, device):
        return True
    return isinstance(spec, str) and spec.strip().partition(":")[0] in backend_names()


def to_arguments(args, device, dtype, tensor_type):
    """`(device, dtype)` from `.to(*args, device=, dtype=)`'s arguments, as torch reads
    them: a tensor gives both; a device object, a device name or an index is the device;
    a dtype (or a dtype's name) is the dtype; another string is refused naming both."""
    for a in args:
        if isinstance(a, tensor_type):
            device, dtype = a.device, a.dtype
        elif is_device(a) or (isinstance(a, int) and not isinstance(a, bool)):
            device = a
        elif isinstance(a, str):
            try:
                dtype = to_dtype(a)
            except (TypeError, ValueError) as e:
                fail(
                    DeviceError,
                    "to",
                    f"{a!r} is neither a device (expected one of "
                    f"{', '.join(backend_names())} device type at start of device string: {a}) "
                    f"nor a dtype ({e})",
                )
        else:
            dtype = a
    return device, dtype


_default = HOST


def set_default_device(spec) -> None:
    """The device creation ops use when given none (`fg.set_default_device("cuda")`),
    as torch.set_default_device. None goes back to the CPU."""
    global _default
    _default = HOST if spec is None else resolve(spec, "set_default_device")
    engine.default_device = _default  # where fusegrad's own constants are computed


def get_default_device() -> device:
    """The device creation ops use when given none."""
    return of(_default)


def default_name() -> str:
    return _default


# Tensor.numpy() of a device tensor raises TypeError, as in PyTorch; a test suite run on
# "cuda" (tests/conftest.py, FUSEGRAD_TEST_DEVICE=cuda) reads values with .numpy() instead.
numpy_reads_devices = False
