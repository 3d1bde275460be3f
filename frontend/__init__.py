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
    DTypeNotImplementedError,
    FusegradError,
    IndexingError,
    ShapeError,
)
from .errors import fail as _fail
from .errors import (
    register_package_dirs as _register_package_dirs,
)
from .ir.dtypes import (
    DType,
    bfloat16,
    bool_,
    float16,
    float32,
    float64,
    int8,
    int16,
    int32,
    int64,
    uint8,
)
from .ir.hooks import hooks as _ir_hooks


def _package_dirs(name: str) -> list[str]:
    """The folders of subpackage `name`, found without importing it."""
    import importlib.util

    spec = importlib.util.find_spec(f"{__name__}.{name}")
    return [_os.path.abspath(d) for d in (spec.submodule_search_locations or [])] if spec else []


# frames in these folders are fusegrad's; errors and kernels name the first frame outside
_register_package_dirs(
    [_os.path.dirname(_os.path.abspath(__file__))]
    + [d for name in ("ir", "pipeline", "runtime", "nn", "datasets") for d in _package_dirs(name)]
)


def _mixed_devices(op, a: str, b: str):
    _fail(
        DeviceError,
        op.name.lower(),
        f"Expected all tensors to be on the same device, but found at least two devices, "
        f"{a} and {b}!",
    )


_ir_hooks.mixed_devices = _mixed_devices
import builtins as _builtins  # noqa: E402
import math as _math  # noqa: E402

from . import accelerator, amp, backends, cuda, dynamo, linalg, special, testing  # noqa: E402
from . import autograd_api as _autograd_api  # noqa: E402, F401  (torch.autograd's other names)
from . import function as _function  # noqa: E402, F401  (puts Function into fg.autograd)
from . import tensor as _tensor  # noqa: E402  (the module before creation's fg.tensor())
from .autocast import autocast, get_autocast_dtype, is_autocast_enabled  # noqa: E402
from .autograd import GradError, grad  # noqa: E402
from .autograd_state import (  # noqa: E402
    enable_grad,
    inference_mode,
    is_anomaly_check_nan_enabled,
    is_anomaly_enabled,
    is_grad_enabled,
    is_inference_mode_enabled,
    no_grad,
    set_grad_enabled,
)
from .creation import (  # noqa: E402
    Generator,
    arange,
    as_tensor,
    asarray,
    bernoulli,
    empty,
    empty_like,
    empty_strided,
    eye,
    from_numpy,
    frombuffer,
    full,
    full_like,
    get_rng_state,
    initial_seed,
    linspace,
    logspace,
    manual_seed,
    multinomial,
    normal,
    ones,
    ones_like,
    rand,
    rand_like,
    randint,
    randint_like,
    randn,
    randn_like,
    randperm,
    scalar_tensor,
    seed,
    set_rng_state,
    tensor,
    tril_indices,
    triu_indices,
    zeros,
    zeros_like,
)
from .debug import compile_times, graph_dot, kernels  # noqa: E402
from .devices import device, get_default_device, set_default_device  # noqa: E402
from .dynamo import mark_dynamic  # noqa: E402  (torch._dynamo.mark_dynamic)
from .func_vmap import vmap  # noqa: E402  (torch.vmap: torch.func.vmap at the top level)
from .halfdtypes import get_default_dtype, set_default_dtype  # noqa: E402
from .host_draws import binomial, poisson  # noqa: E402
from .indexing import (  # noqa: E402
    argwhere,
    as_strided,
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
    unique,
)
from .jit import JitError, jit  # noqa: E402
from .mathops import PRIMITIVES as _PRIMITIVES  # noqa: E402
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
    exp2,
    expm1,
    float_power,
    floor,
    floor_divide,
    fmax,
    fmin,
    fmod,
    frac,
    heaviside,
    isclose,
    isfinite,
    isinf,
    isnan,
    ldexp,
    lerp,
    log1p,
    log2,
    log10,
    logaddexp,
    logical_and,
    logical_or,
    logical_xor,
    logit,
    nan_to_num,
    polygamma,
    remainder,
    sign,
    signbit,
    sinc,
    sinh,
    tan,
    trunc,
)
from .mathops import round_ as round  # noqa: E402, A004
from .memory_usage import memory_report  # noqa: E402
from .movement import cat, stack  # noqa: E402
from .printing import set_printoptions  # noqa: E402
from .profiler import profile  # noqa: E402
from .reduce import matmul  # noqa: E402
from .runtime.config import config  # noqa: E402
from .searching import bincount, bucketize, cdist, histc, mode, searchsorted  # noqa: E402
from .serialization import SerializationError, load, save  # noqa: E402
from .shapeops import (  # noqa: E402
    addbmm,
    addmm,
    addmv,
    argsort,
    atleast_1d,
    atleast_2d,
    atleast_3d,
    baddbmm,
    block_diag,
    bmm,
    broadcast_tensors,
    cartesian_prod,
    chunk,
    column_stack,
    combinations,
    corrcoef,
    count_nonzero,
    cov,
    cross,
    cummax,
    cummin,
    cumprod,
    cumsum,
    diag,
    diagonal,
    diff,
    dist,
    dstack,
    einsum,
    gradient,
    hsplit,
    inner,
    isin,
    kthvalue,
    logcumsumexp,
    median,
    meshgrid,
    movedim,
    mv,
    nanmean,
    nanmedian,
    nanquantile,
    nansum,
    norm,
    outer,
    prod,
    quantile,
    repeat_interleave,
    roll,
    rot90,
    select,
    sort,
    split,
    std_mean,
    tensordot,
    topk,
    trapezoid,
    trapz,
    tril,
    triu,
    unbind,
    unflatten,
    vander,
    var_mean,
    vsplit,
)
from .shapeops import all_ as all  # noqa: E402, A004
from .shapeops import any_ as any  # noqa: E402, A004
from .tensor import Tensor, realize, where  # noqa: E402
from .tensor import broadcast_shapes as _broadcast_shapes  # noqa: E402
from .tensor import legacy_constructor as _legacy_constructor  # noqa: E402
from .torch_functions import (  # noqa: E402
    addr,
    chain_matmul,
    cumulative_trapezoid,
    diagflat,
    frexp,
    gcd,
    histogram,
    index_reduce,
    lcm,
    nextafter,
    renorm,
    rsub,
    unique_consecutive,
    unravel_index,
    vdot,
)
from .torch_settings import (  # noqa: E402
    are_deterministic_algorithms_enabled,
    can_cast,
    channels_last,
    channels_last_3d,
    contiguous_format,
    e,
    get_float32_matmul_precision,
    get_num_interop_threads,
    inf,
    is_deterministic_algorithms_warn_only_enabled,
    is_warn_always_enabled,
    layout,
    memory_format,
    nan,
    newaxis,
    pi,
    preserve_format,
    promote_types,
    result_type,
    set_float32_matmul_precision,
    set_flush_denormal,
    set_num_interop_threads,
    set_warn_always,
    strided,
    typename,
    use_deterministic_algorithms,
)
from .typeinfo import finfo, iinfo  # noqa: E402
from .windows import (  # noqa: E402
    bartlett_window,
    blackman_window,
    hamming_window,
    hann_window,
    kaiser_window,
)

# fg.exp, fg.sqrt, ...: one per row of ir/ops.py's MATH (after the imports above: a
# primitive replaces a composite of its name)
globals().update(_PRIMITIVES)


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
half = float16
long = int64
int = int32  # noqa: A001
short = int16


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


def sum(x, dim=None, keepdim=False, *, axis=None, keepdims=None, dtype=None):  # noqa: A001
    """x.sum; numpy's axis=/keepdims= are accepted for dim/keepdim, as torch does."""
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    return x.sum(dim, keepdim, dtype=dtype)


def mean(x, dim=None, keepdim=False, *, axis=None, keepdims=None, dtype=None):
    """x.mean; numpy's axis=/keepdims= are accepted for dim/keepdim, as torch does."""
    dim, keepdim = (dim if axis is None else axis), (keepdim if keepdims is None else keepdims)
    return x.mean(dim, keepdim, dtype=dtype)


def softmax(x, dim, dtype=None):
    return x.softmax(dim, dtype=dtype)


def log_softmax(x, dim, dtype=None):
    return x.log_softmax(dim, dtype=dtype)


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


def max(x, dim=None, keepdim=False):  # noqa: A001
    """torch.max: the largest element, (values, indices) along `dim`, or with a tensor as
    the second argument the elementwise maximum."""
    if isinstance(dim, Tensor):
        return x.maximum(dim)
    return x.max(dim, keepdim)


def min(x, dim=None, keepdim=False):  # noqa: A001
    """torch.min: the smallest element, (values, indices) along `dim`, or with a tensor as
    the second argument the elementwise minimum."""
    if isinstance(dim, Tensor):
        return x.minimum(dim)
    return x.min(dim, keepdim)


def deg2rad(x):
    """Degrees to radians, x * pi / 180 (an integer tensor becomes the default float)."""
    return x.deg2rad()


def det(A):
    """torch.det: the determinants of A's square matrices (fg.linalg.det)."""
    return linalg.det(A)


def logdet(A):
    """torch.logdet: log det A (NaN for a negative determinant), fg.linalg's."""
    return linalg.logdet(A)


def slogdet(A):
    """torch.slogdet: (sign, log |det A|), fg.linalg's."""
    return linalg.slogdet(A)


def inverse(A):
    """torch.inverse: fg.linalg.inv."""
    return linalg.inv(A)


def cholesky(A, upper: bool = False):
    """torch.cholesky (older torch's API; torch 2.14 removed it and raises): the Cholesky
    factor, lower or `upper`, as fg.linalg.cholesky."""
    return A.cholesky(upper)


def qr(A, some: bool = True):
    """torch.qr (older torch's API; torch 2.14 removed it and raises): (Q, R), reduced when
    `some`, else complete, as fg.linalg.qr."""
    return A.qr(some)


def svd(A, some: bool = True, compute_uv: bool = True):
    """torch.svd: (U, S, V), V = Vh^T, reduced when `some`; see Tensor.svd."""
    return A.svd(some, compute_uv)


def pinverse(A, rcond: float = 1e-15):
    """torch.pinverse: fg.linalg.pinv(A, rtol=rcond)."""
    return A.pinverse(rcond)


def matrix_exp(A):
    """torch.matrix_exp: fg.linalg.matrix_exp."""
    return A.matrix_exp()


def angle(x):
    """The argument of each element as a complex number: pi for a negative real, else 0
    (NaN at NaN), as torch.angle of a real tensor."""
    return x.angle()


def rad2deg(x):
    """Radians to degrees, x * 180 / pi (an integer tensor becomes the default float)."""
    return x.rad2deg()


def concat(tensors, dim=0, *, axis=None):
    """torch.concat, another name of `cat` (numpy's `axis=` too)."""
    return cat(tensors, dim if axis is None else axis)


def concatenate(tensors, dim=0, *, axis=None):
    """torch.concatenate, another name of `cat` (numpy's `axis=` too).

    >>> import fusegrad as fg
    >>> fg.concatenate([fg.tensor([1]), fg.tensor([2, 3])], axis=0).tolist()
    [1, 2, 3]
    """
    return cat(tensors, dim if axis is None else axis)


def real(input):  # noqa: A002
    """`input.real`: the tensor itself, as torch.real of a real tensor (fusegrad has no
    complex dtypes)."""
    return input.real


def hstack(tensors):
    """Join along the first axis of 1-d tensors, else the second (torch.hstack)."""
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


def vstack(tensors):
    """Join as rows: 1-d tensors become rows of a matrix (torch.vstack)."""
    return cat([t.reshape(1, -1) if t.ndim < 2 else t for t in tensors], 0)


def row_stack(tensors):
    """torch.row_stack, another name of `vstack`."""
    return vstack(tensors)


class Size(tuple):
    """torch.Size: a shape, a tuple (`t.shape == fg.Size([2, 3])`)."""

    def __repr__(self) -> str:
        return f"fusegrad.Size({list(self)})"


def _legacy(dtype, name: str):
    def make(*args):
        return _legacy_constructor(dtype, *args)

    make.__name__ = make.__qualname__ = name
    make.__doc__ = f"torch's legacy `{name}(data)` / `{name}(*sizes)` constructor ({dtype.name})."
    return make


FloatTensor = _legacy(float32, "FloatTensor")
DoubleTensor = _legacy(float64, "DoubleTensor")
LongTensor = _legacy(int64, "LongTensor")
IntTensor = _legacy(int32, "IntTensor")
BoolTensor = _legacy(bool_, "BoolTensor")
ByteTensor = _legacy(uint8, "ByteTensor")
dtype = DType  # torch.dtype: the class of every dtype (isinstance checks, annotations)


def compile(model=None, **options):  # noqa: A001
    """torch.compile's habit, `model = fg.compile(model)`: returns `model` itself, since
    fusegrad compiles every graph it runs already (fused kernels, cached by shape); the
    options (mode=, fullgraph=, dynamic=, backend=) are accepted and change nothing. Used
    as a decorator with options (`@fg.compile(mode=...)`) it returns the decorator."""
    if model is None:
        return lambda fn: fn
    return model


def set_num_threads(n: int) -> None:
    """How many CPU threads run kernels (as torch.set_num_threads; `fg.config.threads`)."""
    n = _builtins.int(n)  # (`int` here is fg.int, the dtype)
    if n < 1:
        raise ValueError(f"set_num_threads expects a positive integer, got {n}")
    config.threads = n


def get_num_threads() -> int:
    """How many CPU threads run kernels (`fg.config.threads`)."""
    return config.threads


def pow(input, exponent):  # noqa: A001, A002
    """input ** exponent, elementwise; either may be a number (`fg.pow(2, t)`), as torch.pow."""
    if isinstance(input, Tensor):
        return input.pow(exponent)
    if isinstance(exponent, Tensor):
        return exponent.__rpow__(input)
    raise TypeError(f"pow(): argument 'input' must be Tensor, not {type(input).__name__}")


def __getattr__(name: str):
    """torch's function forms of tensor methods: `fg.mul(a, b)` is `a.mul(b)`, for every
    public method of Tensor (`fg.pow`, `fg.numel`, `fg.narrow`, `fg.argmin`, ...)."""
    method = None if name.startswith("_") else getattr(Tensor, name, None)
    if not callable(method) or isinstance(method, type):
        raise AttributeError(f"module 'fusegrad' has no attribute '{name}'")

    def function(input, *args, **kwargs):  # noqa: A002
        if not isinstance(input, Tensor):
            raise TypeError(
                f"{name}(): argument 'input' must be Tensor, not {type(input).__name__}"
            )
        return getattr(input, name)(*args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"`fg.{name}(t, ...)` is `t.{name}(...)`."
    return _with_out(function, name)


try:
    from importlib.metadata import version as _version

    __version__ = _version("fusegrad")
except Exception:  # not installed (a source tree on sys.path)
    __version__ = "0.1.0"

__all__ = [n for n in dir() if not n.startswith("_")]

# torch-style homes for the optimizers and data loading of nn/ (fusegrad.optim, fusegrad.data)
import sys as _sys  # noqa: E402
import types as _types  # noqa: E402

# (fusegrad.distributed imports mpi4py by init_process_group only)
from . import (  # noqa: E402
    activation_checkpoint,  # torch.utils.checkpoint's home (fusegrad.utils.checkpoint)
    distributed,
    distributions,
    func,  # torch.func's home: transforms, vmap, functional_call
    tensorboard,
)
from .nn import data, optim  # noqa: E402
from .nn import toplevel as _toplevel  # noqa: E402

# torch's top-level forms of nn.functional ops (fg.conv2d, fg.dropout(x, p, train),
# fg.batch_norm in torch's top-level order, ...): nn/toplevel.py's adapters over F
globals().update({_name: getattr(_toplevel, _name) for _name in _toplevel.__all__})
__all__ += _toplevel.__all__

# torch's `out=` keyword on every top-level function (fusegrad/out_arguments.py)
from .out_arguments import with_out as _with_out  # noqa: E402

for _name in __all__:
    if isinstance(globals()[_name], _types.FunctionType):
        globals()[_name] = _with_out(globals()[_name], _name)
_autograd_api.share_top_level(globals())  # (fg.autograd.no_grad is fg.no_grad)

_sys.modules[__name__ + ".optim"] = optim
_sys.modules[__name__ + ".optim.lr_scheduler"] = optim.lr_scheduler
_sys.modules[__name__ + ".optim.swa_utils"] = optim.swa_utils
_sys.modules[__name__ + ".data"] = data
# torch's spelling of the same homes: `from fusegrad.utils.data import DataLoader`,
# `from fusegrad.utils.tensorboard import SummaryWriter`
utils = _types.ModuleType(
    __name__ + ".utils", "torch.utils's home here: utils.data, utils.tensorboard"
)
utils.data, utils.tensorboard = data, tensorboard
utils.checkpoint = activation_checkpoint
_sys.modules[__name__ + ".utils"] = utils
_sys.modules[__name__ + ".utils.checkpoint"] = activation_checkpoint
_sys.modules[__name__ + ".utils.data"] = data
_sys.modules[__name__ + ".utils.tensorboard"] = tensorboard

# what importing made (fusegrad's modules, numpy's, llvmlite's: some 40,000 objects) lives
# as long as the program: collected once and left out of the cyclic collector's later
# scans, which a model's first step sets off (runtime/engine.py's `settle_collector`)
from .runtime.engine import settle_collector as _settle  # noqa: E402

if config.gc_freeze:
    _settle()
