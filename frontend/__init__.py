"""fusegrad: lazy tensors compiled into fused kernels (LLVM on the CPU, CUDA C rendered).

>>> import fusegrad as fg
>>> x = fg.randn(1 << 10)
>>> y = ((x * 0.5 + 1.0).exp() * x - 3.0).relu() / (1 + x * x)
>>> len(fg.kernels(y))        # the whole expression is one kernel
1
"""

from __future__ import annotations

import os as _os

from .errors import (
    DeviceError,
    DTypeError,
    FusegradError,
    IndexingError,
    ShapeError,
)
from .errors import (
    register_package_dirs as _register_package_dirs,
)
from .ir import node as _node
from .ir.dtypes import DType, bool_, float32, float64, int8, int16, int32, int64, uint8


def _package_dirs(name: str) -> list[str]:
    """The folders of subpackage `name`, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(f"{__name__}.{name}")
    return [_os.path.abspath(d) for d in (spec.submodule_search_locations or [])] if spec else []


# frames in these folders are fusegrad's; errors and kernels name the first frame outside
_register_package_dirs(
    [_os.path.dirname(_os.path.abspath(__file__))]
    + [d for name in ("ir", "codegen", "runtime", "nn") for d in _package_dirs(name)]
)


def _mixed_devices(op, a: str, b: str):
    from .errors import fail as _fail

    _fail(
        DeviceError,
        op.name.lower(),
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}!",
    )


_node.MIXED_DEVICES_HOOK = _mixed_devices
from . import backends, cuda, testing  # noqa: E402
from . import indexing as _indexing  # noqa: E402
from .autograd import GradError, grad  # noqa: E402
from .autograd_state import (  # noqa: E402
    enable_grad,
    inference_mode,
    is_inference_mode_enabled,
    no_grad,
)
from .creation import (  # noqa: E402
    arange,
    as_tensor,
    empty,
    empty_like,
    eye,
    from_numpy,
    full,
    full_like,
    linspace,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randn,
    randn_like,
    tensor,
    zeros,
    zeros_like,
)
from .debug import compile_times, graph_dot, kernels  # noqa: E402
from .devices import device, get_default_device, set_default_device  # noqa: E402
from .indexing import (  # noqa: E402
    flip,
    gather,
    index_add,
    index_copy,
    index_fill,
    index_put,
    index_select,
    masked_fill,
    masked_select,
    nonzero,
    scatter,
    scatter_add,
    scatter_reduce,
    take,
    take_along_dim,
    where,
)
from .jit import JitError, jit  # noqa: E402
from .movement import cat, stack  # noqa: E402
from .profiler import profile  # noqa: E402
from .reduce import matmul  # noqa: E402
from .runtime.config import config  # noqa: E402
from .serialization import SerializationError, load, save  # noqa: E402
from .tensor import Tensor, realize  # noqa: E402

_indexing.install(Tensor)
from . import mathops as _mathops  # noqa: E402
from . import shapeops as _shapeops  # noqa: E402

_mathops.install(Tensor)
_shapeops.install(Tensor)
from . import inplace_methods as _inplace_methods  # noqa: E402

_inplace_methods.install(Tensor)  # after the others: it generates t.op_() from t.op()
from .creation import NEW_METHODS as _new_methods  # noqa: E402

for _name, _fn in _new_methods.items():  # t.new_zeros(...), t.new_tensor(...), ...
    setattr(Tensor, _name, _fn)
import builtins as _builtins  # noqa: E402

from .mathops import (  # noqa: E402
    acos,
    acosh,
    allclose,
    asin,
    asinh,
    atan,
    atan2,
    atanh,
    bitwise_and,
    bitwise_left_shift,
    bitwise_not,
    bitwise_or,
    bitwise_right_shift,
    bitwise_xor,
    ceil,
    clone,
    copysign,
    cosh,
    div,
    equal,
    erf,
    erfc,
    exp2,
    expm1,
    floor,
    floor_divide,
    fmod,
    frac,
    isclose,
    isfinite,
    isinf,
    isnan,
    lerp,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_or,
    logical_xor,
    nan_to_num,
    remainder,
    sign,
    signbit,
    sinh,
    tan,
    trunc,
)
from .mathops import round_ as round  # noqa: E402, A004
from .shapeops import all_ as all  # noqa: E402, A004
from .shapeops import any_ as any  # noqa: E402, A004
from .shapeops import (  # noqa: E402
    argsort,
    bmm,
    chunk,
    cummax,
    cummin,
    cumprod,
    cumsum,
    diag,
    diagonal,
    einsum,
    kthvalue,
    logcumsumexp,
    median,
    meshgrid,
    movedim,
    norm,
    outer,
    prod,
    repeat_interleave,
    roll,
    sort,
    split,
    std_mean,
    topk,
    tril,
    triu,
    unbind,
    unflatten,
    var_mean,
)
from .tensor import broadcast_shapes as _broadcast_shapes  # noqa: E402


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """The shape that tensors of these shapes broadcast to (torch.broadcast_shapes).

    >>> import fusegrad as fg
    >>> fg.broadcast_shapes((3, 1), (4,), ())
    (3, 4)
    """
    out: tuple[int, ...] = ()
    for s in shapes:
        s = (s,) if isinstance(s, _builtins.int) else tuple(s)
        out = _broadcast_shapes(out, s, "broadcast_shapes")
    return out


bool = bool_  # noqa: A001  (torch.bool)
float = float32  # noqa: A001
double = float64
long = int64
int = int32  # noqa: A001
short = int16


def exp(x):
    return x.exp()


def log(x):
    return x.log()


def sin(x):
    return x.sin()


def cos(x):
    return x.cos()


def sqrt(x):
    return x.sqrt()


def tanh(x):
    return x.tanh()


def sigmoid(x):
    return x.sigmoid()


def relu(x):
    return x.relu()


def abs(x):  # noqa: A001
    return x.abs()


def maximum(a, b):
    return a.maximum(b)


def minimum(a, b):
    return a.minimum(b)


def clamp(x, min=None, max=None):  # noqa: A002
    return x.clamp(min, max)


def sum(x, dim=None, keepdim=False):  # noqa: A001
    return x.sum(dim, keepdim)


def mean(x, dim=None, keepdim=False):
    return x.mean(dim, keepdim)


def softmax(x, dim):
    return x.softmax(dim)


def log_softmax(x, dim):
    return x.log_softmax(dim)


def argmax(x, dim=None, keepdim=False):
    return x.argmax(dim, keepdim)


def reshape(x, shape):
    return x.reshape(shape)


def transpose(x, dim0, dim1):
    return x.transpose(dim0, dim1)


def permute(x, dims):
    return x.permute(dims)


def flatten(x, start_dim=0, end_dim=-1):
    return x.flatten(start_dim, end_dim)


def squeeze(x, dim=None):
    return x.squeeze(dim)


def unsqueeze(x, dim):
    return x.unsqueeze(dim)


def pad(x, pad, value=0.0):  # noqa: A002
    return x.pad(pad, value)


def is_tensor(x) -> bool:
    return isinstance(x, Tensor)


__all__ = [n for n in dir() if not n.startswith("_")]

# torch-style homes for the optimizers and data loading of nn/ (fusegrad.optim, fusegrad.data)
import sys as _sys  # noqa: E402

from . import distributed  # noqa: E402  (mpi4py is imported by init_process_group only)
from .nn import data, optim  # noqa: E402

_sys.modules[__name__ + ".optim"] = optim
_sys.modules[__name__ + ".optim.lr_scheduler"] = optim.lr_scheduler
_sys.modules[__name__ + ".data"] = data
