"""torch.autograd's `gradcheck` and `gradgradcheck`: analytic Jacobians (fusegrad's
symbolic autodiff, one `grad()` per output element) against central differences.

As torch's slow mode: the numerical Jacobian perturbs each element of each input that
requires grad by +-eps (in the input's dtype) and calls the function again; the
analytic Jacobian is the gradient of each output element. Both are compared per (output,
input) pair with `allclose(analytical, numerical, rtol, atol)`, laid out as torch prints
them (a row per input element, a column per output element).

>>> import fusegrad as fg
>>> x = fg.tensor([0.5, -1.0, 2.0], dtype=fg.float64, requires_grad=True)
>>> gradcheck(lambda t: t.sin() * t, (x,))
True
"""

from __future__ import annotations

import warnings

import numpy as np

from .autograd import grad, realize
from .creation import tensor as _tensor
from .tensor_base import TensorBase
from .testing import GradcheckError as _TestingGradcheckError


class GradcheckError(_TestingGradcheckError, RuntimeError):
    """Analytic and numerical gradients disagree: torch's `GradcheckError` (a
    RuntimeError); also `fusegrad.testing.GradcheckError`."""


def _tuple(x) -> tuple:
    return (x,) if isinstance(x, TensorBase) else tuple(x)


def _float(t) -> bool:
    return isinstance(t, TensorBase) and t.dtype.is_float


def _outputs(func, inputs: tuple) -> tuple:
    return _tuple(func(*inputs))


def _fail(msg: str, raise_exception: bool) -> bool:
    if raise_exception:
        raise GradcheckError(msg)
    return False


def _numerical(func, inputs: tuple, wrt: list[int], eps: float) -> list[list[np.ndarray]]:
    """[output][input] -> the central-difference Jacobian, (input numel, output numel)."""
    arrays = [x.numpy() if isinstance(x, TensorBase) else None for x in inputs]

    def call(i: int, flat: int, delta: float) -> list[np.ndarray]:
        moved = list(inputs)
        a = arrays[i].copy()
        a.reshape(-1)[flat] += delta  # (in the input's dtype, as torch perturbs in place)
        moved[i] = _tensor(a, dtype=inputs[i].dtype, requires_grad=inputs[i].requires_grad)
        outs = _outputs(func, tuple(moved))
        return [np.asarray(o.detach().numpy(), dtype=np.float64).reshape(-1) for o in outs]

    sizes = [o.numel() for o in _outputs(func, inputs)]
    jac = [[np.zeros((inputs[i].numel(), n)) for i in wrt] for n in sizes]
    for col, i in enumerate(wrt):
        for flat in range(inputs[i].numel()):
            up, down = call(i, flat, eps), call(i, flat, -eps)
            for k in range(len(sizes)):
                if up[k].dtype.kind == "f":
                    jac[k][col][flat] = (up[k] - down[k]) / (2 * eps)
    return jac


def _analytical(outs: tuple, inputs: tuple, wrt: list[int], scale: float = 1.0):
    """[output][input] -> the Jacobian from fusegrad's gradients (zeros where undefined),
    and the dtypes of the gradients (None where undefined). `scale` multiplies the
    one-hot gradient outputs (0: the check of zero gradient outputs)."""
    diff = [inputs[i] for i in wrt]
    jac, dtypes, pending = [], [], []
    for o in outs:
        per = [np.zeros((x.numel(), o.numel())) for x in diff]
        jac.append(per)
        if not (_float(o) and o.requires_grad):
            continue  # (no gradient: zeros, which the numerical Jacobian must match)
        for j in range(o.numel()):
            one_hot = np.zeros(o.numel(), dtype=np.float64)
            one_hot.reshape(-1)[j] = scale
            go = _tensor(one_hot.reshape(o.shape), dtype=o.dtype)
            gs = grad(o, diff, go, retain_graph=True, allow_unused=True)
            pending.append((per, j, gs))
    computed = [g for _, _, gs in pending for g in gs if g is not None]
    if computed:
        realize(*computed)  # (every gradient in one plan, not one kernel set each)
    for per, j, gs in pending:
        for col, g in enumerate(gs):
            if g is not None:
                per[col][:, j] = np.asarray(g.numpy(), dtype=np.float64).reshape(-1)
                dtypes.append((col, g.dtype))
    return jac, dtypes


def _show(a: np.ndarray):
    return _tensor(a)  # printed as a tensor, as torch's message prints them


def gradcheck(
    func,
    inputs,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_batched_forward_grad: bool = False,
    check_forward_ad: bool = False,
    check_backward_ad: bool = True,
    fast_mode: bool = False,
    masked: bool | None = None,
) -> bool:
    """torch.autograd.gradcheck: whether the gradients fusegrad computes for `func(*inputs)`
    match central differences (per output and input that requires grad, `allclose` with
    `rtol`, `atol`). Returns True, or raises GradcheckError with torch's message ("Jacobian
    mismatch for output i with respect to input j, numerical: ... analytical: ...") or
    returns False with `raise_exception=False`. Inputs should be float64, as torch warns.

    Also as torch's: the analytic Jacobian is computed twice and must agree within
    `nondet_tol`; `check_undefined_grad` checks that zero gradient outputs give zero
    gradients (fusegrad never passes an undefined gradient: a Function's backward gets
    zeros, so this is what torch's check amounts to); `check_grad_dtypes` that each gradient
    has its input's dtype. Differs: `fast_mode` runs the full check (fusegrad has no fast
    mode); `masked` is ignored (no sparse tensors); `check_batched_grad`,
    `check_batched_forward_grad` and `check_forward_ad` raise NotImplementedError.
    """
    for name, on in (
        ("check_batched_grad", check_batched_grad),
        ("check_batched_forward_grad", check_batched_forward_grad),
        ("check_forward_ad", check_forward_ad),
    ):
        if on:
            raise NotImplementedError(f"gradcheck({name}=True) is not supported by fusegrad")
    inputs = _tuple(inputs)
    wrt = [i for i, x in enumerate(inputs) if isinstance(x, TensorBase) and x.requires_grad]
    if not wrt:
        raise ValueError(  # torch's words
            "gradcheck expects at least one input tensor to require gradient, "
            "but none of them have requires_grad=True."
        )
    for n, i in enumerate(wrt):
        if inputs[i].dtype.name != "float64":
            warnings.warn(  # torch's words
                f"Input #{n} requires gradient and is not a double precision floating point "
                "or complex. This check will likely fail if all the inputs are not of double "
                "precision floating point or complex. ",
                stacklevel=2,
            )
    if not check_backward_ad:
        return True
    outs = _outputs(func, inputs)
    numerical = _numerical(func, inputs, wrt, eps)
    analytical, dtypes = _analytical(outs, inputs, wrt)
    # as torch's: the outputs that require grad are checked (numbered among themselves);
    # where none does, every numerical gradient must be zero
    differentiable = [k for k, o in enumerate(outs) if _float(o) and o.requires_grad]
    if not differentiable:
        for k, o in enumerate(outs):
            for n in numerical[k] if _float(o) else ():
                if np.any(n != 0):
                    return _fail(
                        "Numerical gradient for function expected to be zero\n"
                        f"numerical:{_show(n)}\n",
                        raise_exception,
                    )
        return True
    for number, k in enumerate(differentiable):
        for col in range(len(wrt)):
            n, a = numerical[k][col], analytical[k][col]
            if not np.allclose(a, n, rtol=rtol, atol=atol):
                return _fail(
                    f"Jacobian mismatch for output {number} with respect to input {col},\n"
                    f"numerical:{_show(n)}\nanalytical:{_show(a)}\n",
                    raise_exception,
                )
    if check_grad_dtypes:
        for col, dtype in dtypes:
            if dtype != inputs[wrt[col]].dtype:
                return _fail("Gradient has dtype mismatch", raise_exception)
    again, _ = _analytical(outs, inputs, wrt)
    for k in range(len(outs)):
        for col in range(len(wrt)):
            if np.abs(again[k][col] - analytical[k][col]).max(initial=0.0) > nondet_tol:
                return _fail(
                    "Backward is not reentrant, i.e., running backward with same input and "
                    "grad_output multiple times gives different values, although analytical "
                    "gradient matches numerical gradient. The tolerance for nondeterminism "
                    f"was {nondet_tol}.",
                    raise_exception,
                )
    if check_undefined_grad:
        zero, _ = _analytical(outs, inputs, wrt, scale=0.0)
        if any(np.any(j != 0) for per in zero for j in per):
            return _fail(
                "Expected backward function to handle undefined output grads. Please look "
                "at 'Notes about undefined output gradients' in "
                "'tools/autograd/derivatives.yaml' (fusegrad passes zeros for them: a "
                "backward given zero gradient outputs returned a nonzero gradient)",
                raise_exception,
            )
    return True


def gradgradcheck(
    func,
    inputs,
    grad_outputs=None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    gen_non_contig_grad_outputs: bool = False,
    raise_exception: bool = True,
    nondet_tol: float = 0.0,
    check_undefined_grad: bool = True,
    check_grad_dtypes: bool = False,
    check_batched_grad: bool = False,
    check_fwd_over_rev: bool = False,
    check_rev_over_rev: bool = True,
    fast_mode: bool = False,
    masked: bool = False,
) -> bool:
    """torch.autograd.gradgradcheck: `gradcheck` of the gradient of `func` (its
    vector-Jacobian product with `grad_outputs`, built with `create_graph=True`), with
    respect to the inputs and `grad_outputs` together, as torch's. Without `grad_outputs`,
    random ones in [-1, 1) that require grad are drawn (numpy's generator, seed 0, where
    torch draws from its own). `gen_non_contig_grad_outputs` changes nothing (fusegrad's
    tensors are laid out by the compiler); `check_fwd_over_rev=True` raises
    NotImplementedError."""
    if check_fwd_over_rev:
        raise NotImplementedError("gradgradcheck(check_fwd_over_rev=True) is not supported")
    if not check_rev_over_rev:
        return True
    inputs = _tuple(inputs)
    wrt = {i for i, x in enumerate(inputs) if isinstance(x, TensorBase) and x.requires_grad}
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        outs = [o for o in _outputs(func, inputs) if _float(o) and o.requires_grad]
        grad_outputs = tuple(
            _tensor(rng.uniform(-1, 1, o.shape), dtype=o.dtype, requires_grad=True) for o in outs
        )
    grad_outputs = _tuple(grad_outputs)
    count = len(grad_outputs)

    def vjp(*args):
        given = args[:-count] if count else args
        outs = [o for o in _outputs(func, given) if _float(o) and o.requires_grad]
        diff = [x for i, x in enumerate(given) if i in wrt]
        gs = grad(outs, diff, list(args[-count:]), create_graph=True, allow_unused=True)
        return tuple(g for g in gs if g is not None)

    return gradcheck(
        vjp,
        inputs + grad_outputs,
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
        nondet_tol=nondet_tol,
        check_undefined_grad=check_undefined_grad,
        check_grad_dtypes=check_grad_dtypes,
        check_batched_grad=check_batched_grad,
        fast_mode=fast_mode,
        masked=masked,
    )
