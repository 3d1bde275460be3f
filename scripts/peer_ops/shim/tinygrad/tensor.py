"""The peer's `Tensor`, as fusegrad's Tensor under the peer's spellings.

Each entry of `ALIASES` is a peer name and the fusegrad/PyTorch op it means. Where the
peer uses a name that PyTorch also uses with other semantics (`x.max(1)` is torch's
`amax`, `cond.where(a, b)` is `torch.where(cond, a, b)`), the alias applies only to
calls made from outside fusegrad, so fusegrad's own code keeps PyTorch's meaning.

Two defaults differ and are mapped here, not in fusegrad: the peer's integer
default is int32 (Python ints at creation, arange, argmax's result), torch's int64.
"""

import builtins
import sys

import numpy as np

import fusegrad as fg
from fusegrad.nn import functional as F

_TORCH_TENSOR = fg.Tensor
INT = fg.int32


def _to_np_dtype(dtype):
    """numpy's dtype for a fusegrad dtype."""
    return np.dtype(dtype.np)


def _dtype(dtype):
    if isinstance(dtype, str):
        return getattr(fg, dtype)
    return dtype


def _all_int(values) -> bool:
    flat = np.asarray(values, dtype=object).ravel()
    return flat.size > 0 and all(isinstance(v, int) and not isinstance(v, bool) for v in flat)


def _int_default(dtype, *values):
    """The peer's int32 default where every value is a Python int and no dtype is given."""
    if dtype is None and all(_all_int(v) for v in values):
        return INT
    return _dtype(dtype)


def _shape(args):
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return args


class _Meta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _TORCH_TENSOR)

    def __getattr__(cls, name):
        return getattr(_TORCH_TENSOR, name)


class Tensor(metaclass=_Meta):
    """`Tensor(data, dtype=..., requires_grad=...)` is `fusegrad.tensor(...)`."""

    def __new__(cls, data, device=None, dtype=None, requires_grad=False):
        if isinstance(data, _TORCH_TENSOR):
            out = data.detach().to(_dtype(dtype)) if dtype is not None else data.detach()
            return out.requires_grad_(requires_grad)
        if not isinstance(data, np.ndarray):
            dtype = _int_default(dtype, data)
        return fg.tensor(data, dtype=_dtype(dtype), requires_grad=requires_grad)

    # creation: torch spells these as module functions
    @staticmethod
    def zeros(*shape, **kw):
        return fg.zeros(*_shape(shape), **_kw(kw))

    @staticmethod
    def ones(*shape, **kw):
        return fg.ones(*_shape(shape), **_kw(kw))

    @staticmethod
    def empty(*shape, **kw):
        return fg.empty(*_shape(shape), **_kw(kw))

    @staticmethod
    def rand(*shape, **kw):
        return fg.rand(*_shape(shape), **_kw(kw))

    @staticmethod
    def randn(*shape, **kw):
        return fg.randn(*_shape(shape), **_kw(kw))

    @staticmethod
    def full(shape, fill_value, **kw):
        kw = _kw(kw)
        kw["dtype"] = _int_default(kw.get("dtype"), fill_value)
        return fg.full(
            tuple(shape) if isinstance(shape, (tuple, list)) else (shape,), fill_value, **kw
        )

    @staticmethod
    def full_like(t, fill_value, **kw):
        return fg.full_like(t, fill_value, **_kw(kw))

    @staticmethod
    def zeros_like(t, **kw):
        return fg.zeros_like(t, **_kw(kw))

    @staticmethod
    def ones_like(t, **kw):
        return fg.ones_like(t, **_kw(kw))

    @staticmethod
    def eye(n, m=None, **kw):
        return fg.eye(n, m, **_kw(kw)) if m is not None else fg.eye(n, **_kw(kw))

    @staticmethod
    def arange(start, stop=None, step=1, **kw):
        kw = _kw(kw)
        kw["dtype"] = _int_default(kw.get("dtype"), start, stop if stop is not None else 0, step)
        return fg.arange(start, stop, step, **kw)

    @staticmethod
    def linspace(start, stop, steps, **kw):
        return fg.linspace(start, stop, steps, **_kw(kw))

    @staticmethod
    def randint(*shape, low=0, high=10, **kw):
        return fg.randint(low, high, _shape(shape), **_kw(kw))

    @staticmethod
    def manual_seed(seed=0):
        return fg.manual_seed(seed)

    @staticmethod
    def stack(*tensors, dim=0):
        if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
            tensors = tensors[0]
        return fg.stack(list(tensors), dim=dim)

    @staticmethod
    def einsum(equation, *operands):
        if len(operands) == 1 and isinstance(operands[0], (tuple, list)):
            operands = operands[0]
        return fg.einsum(equation, *operands)

    # the peer's N-d conv/pool names are torch's per-rank functions
    conv2d = staticmethod(lambda x, *a, **kw: _by_rank(x, "conv{}d")(x, *a, **kw))
    conv_transpose2d = staticmethod(
        lambda x, *a, **kw: _by_rank(x, "conv_transpose{}d")(x, *a, **kw)
    )
    max_pool2d = staticmethod(lambda x, *a, **kw: _max_pool(x, *a, **kw))
    avg_pool2d = staticmethod(lambda x, *a, **kw: _by_rank(x, "avg_pool{}d")(x, *a, **kw))
    max_unpool2d = staticmethod(lambda x, *a, **kw: _by_rank(x, "max_unpool{}d")(x, *a, **kw))
    scaled_dot_product_attention = staticmethod(
        lambda *a, **kw: F.scaled_dot_product_attention(*a, **kw)
    )

    @staticmethod
    def interpolate(x, size=None, scale_factor=None, mode="linear", align_corners=False):
        # the peer's "linear" is torch's linear/bilinear/trilinear by spatial rank
        if mode == "linear":
            mode = {1: "linear", 2: "bilinear", 3: "trilinear"}[x.ndim - 2]
        kw = {"align_corners": align_corners} if "linear" in mode else {}
        return F.interpolate(x, size=size, scale_factor=scale_factor, mode=mode, **kw)


def _by_rank(x, pattern):
    name = pattern.format(x.ndim - 2)
    fn = getattr(F, name, None)
    if fn is None:
        raise NotImplementedError(f"fusegrad has no F.{name}")
    return fn


def _max_pool(x, *args, return_indices=False, **kw):
    out = _by_rank(x, "max_pool{}d")(x, *args, return_indices=return_indices, **kw)
    return (out[0], out[1].to(INT)) if return_indices else out


def _kw(kw):
    kw = dict(kw)
    if "dtype" in kw:
        kw["dtype"] = _dtype(kw["dtype"])
    kw.pop("device", None)
    return kw


def _axis(kw):
    if "axis" in kw:
        kw["dim"] = kw.pop("axis")
    return kw


def _flip(x, axis=None, **kw):
    axis = _axis(dict(kw, axis=axis)).get("dim") if axis is not None else kw.get("dims")
    return _ORIGINAL["flip"](x, axis if isinstance(axis, (tuple, list)) else (axis,))


def _pad(x, padding, value=0.0, mode="constant", **kw):
    # the peer takes one (before, after) pair per dim from the first; torch a flat
    # tuple from the last
    if builtins.all(isinstance(p, (tuple, list)) or p is None for p in padding):
        flat = []
        for p in reversed(padding):
            flat.extend(p if p is not None else (0, 0))
        padding = tuple(flat)
    return F.pad(x, padding, mode=mode, value=value)


def _cat(x, *others, dim=0):
    return fg.cat([x, *others], dim=dim)


def _where(cond, a, b):
    out = fg.where(cond, a, b)
    return out.to(INT) if _all_int([a, b]) else out


def _reduce_values(name):
    def run(x, axis=None, keepdim=False, **kw):
        kw = _axis(dict(kw))
        dim = kw.pop("dim", axis)
        if dim is None:
            return getattr(fg, "a" + name)(x) if False else _ORIGINAL[name](x)
        return getattr(_TORCH_TENSOR, "a" + name)(x, dim=dim, keepdim=keepdim)

    return run


def _cum_values(name):
    def run(x, axis=0, **kw):
        return _ORIGINAL[name](x, _axis(dict(kw, axis=axis))["dim"]).values

    return run


def _arg(name):
    def run(x, axis=None, keepdim=False, **kw):
        dim = _axis(dict(kw)).get("dim", axis)
        return _ORIGINAL[name](x, dim=dim, keepdim=keepdim).to(INT)

    return run


def _index_int(name):
    # the peer's index results are int32 (its default int), torch's int64
    def run(x, *args, **kw):
        values, indices = _ORIGINAL[name](x, *args, **_axis(kw))
        return values, indices.to(INT)

    return run


def _dim_kw(name):
    def run(x, *args, **kw):
        return _ORIGINAL[name](x, *args, **_axis(kw))

    return run


def _softmax_like(name, default_dim):
    def run(x, axis=default_dim, *args, **kw):
        kw = _axis(dict(kw))
        dim = kw.pop("dim", axis)
        return _ORIGINAL[name](x, dim, *args, **kw)

    return run


def _cast(x, dtype):
    return _ORIGINAL["cast"](x, _dtype(dtype))


def _scatter(x, dim, index, src=None, reduce=None, **kw):
    if reduce is not None:
        reduce = {"add": "add", "multiply": "multiply"}.get(reduce, reduce)
    if isinstance(src, (int, float)):
        return _ORIGINAL["scatter"](x, dim, index, value=src, reduce=reduce, **kw)
    return _ORIGINAL["scatter"](x, dim, index, src=src, reduce=reduce, **kw)


def _sparse_cce(x, y, **kw):
    # the peer's class axis is the last; torch's is 1
    if x.ndim > 2:
        x = x.movedim(-1, 1)
    return F.cross_entropy(x, y, **kw)


def _gradient(self, *targets):
    return list(fg.autograd.grad(self, targets))


def _realize(self, *others):
    for t in (self, *others):
        _ORIGINAL["realize"](t)
    return self


def _meshgrid(self, *others, indexing="ij"):
    return fg.meshgrid(self, *others, indexing=indexing)


def _isinf(x, detect_positive=True, detect_negative=True):
    if detect_positive and detect_negative:
        return _ORIGINAL["isinf"](x)
    if detect_positive:
        return x.isposinf()
    if detect_negative:
        return x.isneginf()
    return fg.zeros_like(x, dtype=fg.bool)


# peer name -> the op it means, for names PyTorch's Tensor also has (with other semantics)
CONFLICTS = {
    "max": _reduce_values("max"),
    "min": _reduce_values("min"),
    "cummax": _cum_values("cummax"),
    "cummin": _cum_values("cummin"),
    "argmax": _arg("argmax"),
    "argmin": _arg("argmin"),
    "where": _where,
    "pad": _pad,
    "flip": _flip,
    "realize": _realize,
    "isinf": _isinf,
    "softmax": _softmax_like("softmax", -1),
    "log_softmax": _softmax_like("log_softmax", -1),
    "logcumsumexp": _softmax_like("logcumsumexp", 0),
    "dot": lambda x, y: x.matmul(y),
    "sort": _index_int("sort"),
    "topk": _index_int("topk"),
    "argsort": lambda x, *a, **kw: _ORIGINAL["argsort"](x, *a, **_axis(kw)).to(INT),
    "cast": _cast,
    "scatter": _scatter,
    **{
        n: _dim_kw(n)
        for n in (
            "sum",
            "mean",
            "prod",
            "std",
            "var",
            "cumsum",
            "cumprod",
            "logsumexp",
            "any",
            "all",
            "std_mean",
            "var_mean",
            "squeeze",
            "unsqueeze",
        )
    },
}

# peer name -> the op it means, for names fusegrad's Tensor lacks
ADDED = {
    "gradient": _gradient,
    "cat": _cat,
    "meshgrid": _meshgrid,
    "idiv": lambda x, y: x.div(y, rounding_mode="trunc"),
    "mod": lambda x, y: x.remainder(y),
    "lshift": lambda x, y: x.bitwise_left_shift(y),
    "rshift": lambda x, y: x.bitwise_right_shift(y),
    "swish": F.silu,
    "gelu": lambda x: F.gelu(x, approximate="tanh"),
    "full_like": lambda x, fill_value, **kw: fg.full_like(x, fill_value, **_kw(kw)),
    "binary_crossentropy": lambda x, y, **kw: F.binary_cross_entropy(x, y, **kw),
    "binary_crossentropy_logits": lambda x, y, **kw: F.binary_cross_entropy_with_logits(x, y, **kw),
    "cross_entropy": lambda x, y, **kw: F.cross_entropy(x, y, **kw),
    "sparse_categorical_crossentropy": _sparse_cce,
    "nll_loss": lambda x, y, *a, **kw: F.nll_loss(x, y, *a, **kw),
    "one_hot": lambda x, num_classes=-1: F.one_hot(x.long(), num_classes).to(INT),
    "bitcast": lambda x, dtype: x.view(_dtype(dtype)),
    "conv2d": lambda x, *a, **kw: Tensor.conv2d(x, *a, **kw),
    "conv_transpose2d": lambda x, *a, **kw: Tensor.conv_transpose2d(x, *a, **kw),
    "max_pool2d": lambda x, *a, **kw: Tensor.max_pool2d(x, *a, **kw),
    "avg_pool2d": lambda x, *a, **kw: Tensor.avg_pool2d(x, *a, **kw),
    "interpolate": lambda x, *a, **kw: Tensor.interpolate(x, *a, **kw),
}
for _name in (
    "relu6",
    "silu",
    "leaky_relu",
    "elu",
    "celu",
    "selu",
    "softplus",
    "mish",
    "hardswish",
    "hardsigmoid",
    "logsigmoid",
    "softsign",
    "hardtanh",
    "glu",
):
    ADDED[_name] = getattr(F, _name)

_ORIGINAL = {}


def _install(name, peer_fn):
    original = getattr(_TORCH_TENSOR, name)
    _ORIGINAL[name] = original

    def dispatch(*args, **kwargs):
        caller = sys._getframe(1).f_globals.get("__name__", "")
        if caller.startswith("fusegrad"):
            return original(*args, **kwargs)
        return peer_fn(*args, **kwargs)

    dispatch.__name__ = name
    setattr(_TORCH_TENSOR, name, dispatch)


for _name, _fn in CONFLICTS.items():
    if hasattr(_TORCH_TENSOR, _name):
        _install(_name, _fn)
for _name, _fn in ADDED.items():
    if not hasattr(_TORCH_TENSOR, _name):
        setattr(_TORCH_TENSOR, _name, _fn)
