"""Checking gradients against central differences, MiniTorch-style.

>>> import fusegrad as fg
>>> x = fg.tensor([0.5, -1.0, 2.0], dtype=fg.float64)
>>> fg.testing.gradcheck(lambda t: (t.sin() * t).sum(), [x])
True
"""

from __future__ import annotations

import numpy as np

from .autograd import grad
from .creation import from_numpy
from .errors import FusegradError


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
