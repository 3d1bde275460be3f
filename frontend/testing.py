"""Checking gradients against central differences, MiniTorch-style.

>>> import fusegrad as fg
>>> x = fg.tensor([0.5, -1.0, 2.0], dtype=fg.float64)
>>> fg.testing.gradcheck(lambda t: (t.sin() * t).sum(), [x])
True
"""

from __future__ import annotations

import collections.abc as abc
import numbers

import numpy as np

from .autograd import grad
from .creation import from_numpy
from .errors import FusegradError
from .ir.dtypes import promote
from .tensor import Tensor


class GradcheckError(FusegradError, AssertionError):
    """Analytic and numerical gradients disagree."""


def central_difference(f, *vals: float, arg: int = 0, epsilon: float = 1e-6) -> float:
    """(f(..., x + eps, ...) - f(..., x - eps, ...)) / (2 eps) for Python scalars (as MiniTorch)."""
    up = list(vals)
    down = list(vals)
    up[arg] += epsilon
    down[arg] -= epsilon
    return (f(*up) - f(*down)) / (2 * epsilon)


def numerical_gradients(fn, arrays: list[np.ndarray], weights: np.ndarray | None, eps: float):
    """Central differences of sum(fn(*arrays) * weights) in float64, one element at a time."""

    def value(arrs) -> float:
        out = fn(*[from_numpy(a) for a in arrs]).numpy().astype(np.float64)
        return float((out * weights).sum()) if weights is not None else float(out.sum())

    grads = []
    for i, a in enumerate(arrays):
        g = np.zeros_like(a, dtype=np.float64)
        for idx in np.ndindex(a.shape):
            up = [x.copy() for x in arrays]
            down = [x.copy() for x in arrays]
            up[i][idx] += eps
            down[i][idx] -= eps
            g[idx] = (value(up) - value(down)) / (2 * eps)
        grads.append(g)
    return grads


def gradcheck(
    fn,
    inputs,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    seed: int = 0,
    raise_exception: bool = True,
) -> bool:
    """Compare fusegrad's gradients of `fn(*inputs)` with float64 central differences.

    The output is projected on a fixed random vector, so every output element
    is checked. On a mismatch the report names the input, the worst element and
    both values.
    """
    arrays = [np.asarray(t.numpy(), dtype=np.float64).copy() for t in inputs]
    leaves = [from_numpy(a, requires_grad=True) for a in arrays]
    out = fn(*leaves)
    rng = np.random.default_rng(seed)
    weights = rng.uniform(0.5, 1.5, size=out.shape)
    projected = (out * from_numpy(weights)).sum()
    analytic = [
        g.numpy() if g is not None else np.zeros_like(a)
        for g, a in zip(grad(projected, leaves, allow_unused=True), arrays)
    ]
    numeric = numerical_gradients(fn, arrays, weights, eps)
    for i, (ga, gn) in enumerate(zip(analytic, numeric)):
        bad = np.abs(ga - gn) > atol + rtol * np.abs(gn)
        if bad.any():
            err = np.abs(ga - gn) - rtol * np.abs(gn)
            worst = np.unravel_index(np.argmax(err), err.shape)
            msg = (
                f"gradcheck: input {i} (shape {arrays[i].shape}): {int(bad.sum())} element(s) "
                f"differ; worst at index {tuple(int(k) for k in worst)}: analytic "
                f"{ga[worst]:.8g}, central difference {gn[worst]:.8g}"
            )
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True


def grad_check(f, *vals, samples: int = 100) -> None:
    """MiniTorch's `grad_check(f, *vals)`: backward through `f(*vals).sum()` and compare each
    input's `.grad` with central differences (rtol = atol = 1e-2, as MiniTorch), raising
    AssertionError on a mismatch. The inputs become leaves that require grad (their `.grad`
    is replaced), as in MiniTorch. Up to `samples` elements per input are checked.

    >>> import fusegrad as fg
    >>> x = fg.tensor([[0.5, -1.0], [2.0, 0.1]], dtype=fg.float64)
    >>> fg.testing.grad_check(lambda t: (t * t).relu().sum(1), x)
    """
    for x in vals:
        if not x.is_leaf:
            raise GradcheckError("grad_check: inputs must be leaf tensors (use detach())")
        x.requires_grad_(True)
        x.grad = None
    out = f(*vals)
    out.sum().backward()
    rng = np.random.default_rng(10)
    arrays = [np.asarray(x.numpy(), dtype=np.float64) for x in vals]
    for i, x in enumerate(vals):
        grad = x.grad.numpy() if x.grad is not None else np.zeros(x.shape)
        places = list(np.ndindex(x.shape))
        if len(places) > samples:
            places = [places[k] for k in rng.choice(len(places), samples, replace=False)]
        for ind in places:

            def total(v, i=i, ind=ind):
                moved = [a.copy() for a in arrays]
                moved[i][ind] = v
                ts = [from_numpy(a.astype(t.dtype.np)) for a, t in zip(moved, vals)]
                return float(np.asarray(f(*ts).numpy(), dtype=np.float64).sum())

            check = central_difference(total, float(arrays[i][ind]))
            if not np.allclose(grad[ind], check, 1e-2, 1e-2):
                raise GradcheckError(
                    f"grad_check: derivative check at arg {i}, index {ind}: "
                    f"backward gives {grad[ind]:.8g}, central difference {check:.8g}"
                )


# ---------------------------------------------------------------- assert_close

# (rtol, atol) by dtype when neither is given, as torch.testing.assert_close's
_TOLERANCES = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}


def _tolerances(dtype_name: str, rtol, atol) -> tuple[float, float]:
    if (rtol is None) != (atol is None):
        raise ValueError(
            "Both 'rtol' and 'atol' must be either specified or omitted, but got no "
            f"{'rtol' if rtol is None else 'atol'}."
        )
    if rtol is not None:
        return float(rtol), float(atol)
    return _TOLERANCES.get(dtype_name, (0.0, 0.0))


def _where(path: list) -> str:
    return (
        "" if not path else "\n\nThe failure occurred for item " + "".join(f"[{p!r}]" for p in path)
    )


def _fail(text: str, msg, path: list) -> None:
    if callable(msg):
        text = msg(text)
    elif msg is not None:
        text = msg
    else:
        text += _where(path)
    raise AssertionError(text)


def _index(flat_position: int, shape: tuple) -> str:
    index = np.unravel_index(flat_position, shape) if shape else ()
    return "(" + ", ".join(str(int(i)) for i in index) + ("," if len(index) == 1 else "") + ")"


def _compare_values(a, e, exact, rtol, atol, equal_nan, scalar, msg, path):
    """Fail where a and e (numpy arrays of one dtype) are not close: torch's report."""
    if exact:
        bad = a != e
    else:
        with np.errstate(invalid="ignore", over="ignore"):
            close = np.abs(a - e) <= atol + rtol * np.abs(e)
        close |= a == e  # (equal infinities)
        if equal_nan:
            close |= np.isnan(a) & np.isnan(e)
        bad = ~close
    if not bad.any():
        return
    kind = "equal" if exact else "close"
    # (as torch's: integers' differences in int64, their ratios in float32 for tensors;
    # a scalar's in float64; a float tensor's in its dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if exact:
            diff = np.abs(a.astype(np.int64) - e.astype(np.int64))
            ratio = np.float64 if scalar else np.float32
            rel = diff.astype(ratio) / np.abs(e.astype(ratio))
        else:
            wide = np.float64 if scalar else a.dtype
            diff = np.abs(a.astype(wide) - e.astype(wide))
            rel = diff / np.abs(e.astype(wide))
    up_abs = "" if exact else f" (up to {atol} allowed)"
    up_rel = "" if exact else f" (up to {rtol} allowed)"
    if scalar:
        d, r = diff.reshape(-1)[0], rel.reshape(-1)[0]
        got, want = a.reshape(-1)[0].item(), e.reshape(-1)[0].item()
        text = (
            f"Scalars are not {kind}!\n\nExpected {want} but got {got}.\n"
            f"Absolute difference: {d.item()}{up_abs}\nRelative difference: {r.item()}{up_rel}"
        )
        _fail(text, msg, path)
    # the greatest differences among the mismatched elements (NaN first, as torch's)
    masked_diff = np.where(bad, diff, -np.inf).reshape(-1)
    masked_rel = np.where(bad, rel, -np.inf).reshape(-1)
    at_abs = int(np.nanargmax(np.where(np.isnan(masked_diff), np.inf, masked_diff)))
    at_rel = int(np.nanargmax(np.where(np.isnan(masked_rel), np.inf, masked_rel)))
    total = a.size
    count = int(bad.sum())
    text = (
        f"Tensor-likes are not {kind}!\n\nMismatched elements: {count} / {total} "
        f"({100.0 * count / total:.1f}%)\n"
        f"Greatest absolute difference: {diff.reshape(-1)[at_abs].item()} at index "
        f"{_index(at_abs, a.shape)}{up_abs}\n"
        f"Greatest relative difference: {rel.reshape(-1)[at_rel].item()} at index "
        f"{_index(at_rel, a.shape)}{up_rel}"
    )
    _fail(text, msg, path)


def _mismatch(attribute: str, actual, expected, msg, path: list) -> None:
    _fail(
        f"The values for attribute '{attribute}' do not match: {actual} != {expected}.",
        msg,
        path,
    )


def _tensor_pair(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, path):
    """Two tensors, or two numpy arrays (as torch, which takes them as tensors)."""
    tensors = isinstance(actual, Tensor)
    if actual.shape != expected.shape:
        _mismatch("shape", actual.shape, expected.shape, msg, path)
    if tensors and check_device and str(actual.device) != str(expected.device):
        _mismatch("device", actual.device, expected.device, msg, path)
    if check_dtype and actual.dtype != expected.dtype:
        _mismatch("dtype", actual.dtype, expected.dtype, msg, path)
    if tensors:
        name = actual.dtype.name if check_dtype else _wider(actual.dtype, expected.dtype)
        a, e = actual.detach().numpy(), expected.detach().numpy()
    else:
        name = str(np.promote_types(actual.dtype, expected.dtype))
        a, e = actual, expected
    common = np.promote_types(a.dtype, e.dtype)
    if common.kind == "V" or str(common) == "bfloat16":  # (ml_dtypes' bfloat16: as float32)
        common = np.dtype(np.float32)
    a, e = np.asarray(a, dtype=common), np.asarray(e, dtype=common)
    exact = common.kind in "iub"
    rtol, atol = _tolerances(name, rtol, atol)
    _compare_values(a, e, exact, rtol, atol, equal_nan, actual.ndim == 0, msg, path)


def _wider(a, b) -> str:
    return promote(a, b).name


def _pair(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, path):
    both = isinstance(actual, Tensor) and isinstance(expected, Tensor)
    if both or (isinstance(actual, np.ndarray) and isinstance(expected, np.ndarray)):
        return _tensor_pair(
            actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, path
        )
    scalars = (numbers.Number, np.number, np.bool_)
    if isinstance(actual, scalars) and isinstance(expected, scalars):
        if check_dtype and type(actual) is not type(expected):
            _fail(f"The (d)types do not match: {type(actual)} != {type(expected)}.", msg, path)
        a, e = np.asarray(actual), np.asarray(expected)
        common = np.promote_types(a.dtype, e.dtype)
        exact = common.kind in "iub"
        rtol, atol = _tolerances("float64" if not exact else "int64", rtol, atol)
        a, e = a.astype(common), e.astype(common)
        return _compare_values(a, e, exact, rtol, atol, equal_nan, True, msg, path)
    strings = (str, bytes)
    if (
        isinstance(actual, abc.Sequence)
        and isinstance(expected, abc.Sequence)
        and not isinstance(actual, strings)
        and not isinstance(expected, strings)
    ):
        if len(actual) != len(expected):
            _fail(
                f"The length of the sequences mismatch: {len(actual)} != {len(expected)}",
                msg,
                path,
            )
        for i, (a, e) in enumerate(zip(actual, expected)):
            _pair(a, e, rtol, atol, equal_nan, check_device, check_dtype, msg, [*path, i])
        return None
    if isinstance(actual, abc.Mapping) and isinstance(expected, abc.Mapping):
        if set(actual) != set(expected):
            missing = sorted(set(expected) - set(actual), key=repr)
            extra = sorted(set(actual) - set(expected), key=repr)
            _fail(
                "The keys of the mappings do not match:\n"
                f"Missing keys in the actual mapping: {missing}\n"
                f"Extra keys in the actual mapping: {extra}",
                msg,
                path,
            )
        for k in expected:
            _pair(actual[k], expected[k], rtol, atol, equal_nan, check_device, check_dtype, msg,
                  [*path, k])  # fmt: skip
        return None
    if actual is None and expected is None:
        return None
    raise TypeError(
        f"No comparison pair was able to handle inputs of type {type(actual)} and {type(expected)}."
    )


def assert_close(
    actual,
    expected,
    *,
    allow_subclasses: bool = True,
    rtol: float | None = None,
    atol: float | None = None,
    equal_nan: bool = False,
    check_device: bool = True,
    check_dtype: bool = True,
    check_layout: bool = True,
    check_stride: bool = False,
    msg=None,
) -> None:
    """torch.testing.assert_close: `actual` and `expected` (tensors, numpy arrays, Python
    numbers, or sequences and mappings of them, compared item by item) are close: for
    floats |actual - expected| <= atol + rtol * |expected| elementwise (rtol and atol by
    dtype where neither is given: float32 1.3e-6 and 1e-5, float64 1e-7 and 1e-7, float16
    1e-3 and 1e-5, bfloat16 1.6e-2 and 1e-5), integers and bools equal; shape, dtype and
    device equal (`check_dtype=False`: compared in the wider dtype). NaN matches NaN only
    with `equal_nan`. An AssertionError says how many elements differ and where the
    greatest differences are, as torch's (`msg` replaces it, or a callable rewrites it);
    inputs of types that cannot be compared raise TypeError.

    >>> import fusegrad as fg
    >>> assert_close(fg.tensor([1.0, 2.0]), fg.tensor([1.0, 2.0 + 1e-7]))
    >>> assert_close(fg.tensor([1.0, 2.0]), fg.tensor([1.0, 2.5]))
    Traceback (most recent call last):
      ...
    AssertionError: Tensor-likes are not close!
    <BLANKLINE>
    Mismatched elements: 1 / 2 (50.0%)
    Greatest absolute difference: 0.5 at index (1,) (up to 1e-05 allowed)
    Greatest relative difference: 0.20000000298023224 at index (1,) (up to 1.3e-06 allowed)
    """
    _pair(actual, expected, rtol, atol, equal_nan, check_device, check_dtype, msg, [])


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan: bool = True, msg=""):
    """torch.testing.assert_allclose (deprecated in torch for `assert_close`): the same
    comparison with NaN matching NaN by default and the dtypes not checked."""
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan,
                 check_dtype=False, msg=msg or None)  # fmt: skip
