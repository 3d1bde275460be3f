"""torch.autograd.functional: `jacobian`, `hessian`, `vjp`, `jvp`, `hvp`, `vhp`, with
torch's signatures, result structures and errors, over `fusegrad.autograd.grad`.

As torch's (its algorithm, not torch.func's): the inputs are detached copies that
require grad (or, with `create_graph=True`, aliases of inputs that require grad, so the
results stay differentiable with respect to them), the function is called once, and the
results come from `grad()`: a Jacobian one row per output element, `jvp` and `hvp` by
torch's double-backward trick (exact: fusegrad's gradients are symbolic). An input the
output does not depend on gets zeros, or raises with `strict=True`.

>>> import fusegrad as fg
>>> x = fg.tensor([1.0, 2.0], dtype=fg.float64)
>>> jacobian(lambda t: t ** 2, x).tolist()
[[2.0, 0.0], [0.0, 4.0]]
"""

from __future__ import annotations

from .autograd import grad
from .movement import stack
from .tensor_base import TensorBase


def _as_tuple(x, arg: str, fn: str) -> tuple[bool, tuple]:
    """(whether `x` was a tuple or list, its tensors as a tuple), checked as torch's."""
    is_tuple = isinstance(x, (tuple, list))
    items = tuple(x) if is_tuple else (x,)
    for i, t in enumerate(items):
        if not isinstance(t, TensorBase):
            if is_tuple:
                raise TypeError(  # torch's words
                    f"The {arg} given to {fn} must be either a Tensor or a tuple of Tensors "
                    f"but the value at index {i} has type {type(t)}."
                )
            raise TypeError(
                f"The {arg} given to {fn} must be either a Tensor or a tuple of Tensors but "
                f"the given {arg} has type {type(t)}."
            )
    return is_tuple, items


def _prepare(inputs: tuple, create_graph: bool) -> tuple:
    """torch's `_grad_preprocess`: fresh leaves, or differentiable aliases."""
    if create_graph:
        return tuple(
            x.view_as(x) if x.requires_grad else x.detach().requires_grad_() for x in inputs
        )
    return tuple(x.detach().requires_grad_() for x in inputs)


def _finish(tensors, create_graph: bool):
    """torch's `_grad_postprocess`: detached unless the graph is kept."""
    if create_graph:
        return tensors
    return tuple(None if t is None else t.detach() for t in tensors)


def _unpack(is_tuple: bool, values: tuple):
    return values if is_tuple else values[0]


def _call(func, inputs: tuple, fn: str) -> tuple[bool, tuple]:
    out = func(*inputs)
    is_tuple = isinstance(out, (tuple, list))
    outs = tuple(out) if is_tuple else (out,)
    for i, o in enumerate(outs):
        if not isinstance(o, TensorBase):
            if is_tuple:
                raise TypeError(
                    f"The outputs of the user-provided function given to {fn} must be either "
                    f"a Tensor or a tuple of Tensors but the value at index {i} has type "
                    f"{type(o)}."
                )
            raise TypeError(
                f"The outputs of the user-provided function given to {fn} must be either a "
                f"Tensor or a tuple of Tensors but the given outputs of the user-provided "
                f"function has type {type(o)}."
            )
    return is_tuple, outs


def _grads(outputs, inputs, grad_outputs, create_graph: bool) -> tuple:
    """`grad()` with None for inputs unused, and for outputs that do not require grad."""
    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        return (None,) * len(inputs)
    return grad(
        [o for o, _ in pairs],
        inputs,
        [g for _, g in pairs],
        retain_graph=True,
        create_graph=create_graph,
        allow_unused=True,
    )


def _fill(grads: tuple, inputs: tuple, strict: bool, create_graph: bool, stage: str) -> tuple:
    """torch's `_fill_in_zeros`: zeros for None, or its strict-mode error."""
    out = []
    for i, (g, x) in enumerate(zip(grads, inputs)):
        if g is None:
            if strict:
                raise RuntimeError(_STRICT[stage].format(i=i))
            g = x.new_zeros(x.shape)
        out.append(g)
    return tuple(out)


_STRICT = {  # torch's words
    "back": "The output of the user-provided function is independent of input {i}. This is "
    "not allowed in strict mode.",
    "double_back": "The gradient with respect to input {i} is independent of the inputs of "
    "the user-provided function. This is not allowed in strict mode.",
    "back_trick": "The output of the user-provided function is independent of input {i}. "
    "This is not allowed in strict mode when create_graph=True.",
    "double_back_trick": "The gradient with respect to input {i} is independent of the inputs "
    "of the user-provided function. This is not allowed in strict mode when "
    "create_graph=True.",
}


def _check_requires_grad(outputs: tuple, what: str, strict: bool) -> None:
    if not strict:
        return
    for i, o in enumerate(outputs):
        if not o.requires_grad:
            if what == "outputs":
                raise RuntimeError(
                    f"Output {i} of the user-provided function does not require gradients. "
                    "The outputs must be computed in a differentiable manner from the input "
                    "when running in strict mode."
                )
            raise RuntimeError(
                f"The jacobian of the user-provided function with respect to input {i} is "
                "independent of the input. This is not allowed in strict mode."
            )


def _validate_v(v: tuple, other: tuple, is_other_tuple: bool) -> None:
    if len(other) != len(v):
        if is_other_tuple:
            raise RuntimeError(
                f"v is a tuple of invalid length: should be {len(other)} but got {len(v)}."
            )
        raise RuntimeError("The given v should contain a single Tensor.")
    for i, (a, b) in enumerate(zip(v, other)):
        if tuple(a.shape) != tuple(b.shape):
            prepend = f"Entry {i} in " if is_other_tuple else ""
            raise RuntimeError(
                f"{prepend}v has invalid size: should be {b.shape} but got {a.shape}."
            )


def _ones_for(tensors: tuple, what: str) -> tuple:
    """The `v` a product takes when given None: ones for a single one-element tensor (torch's
    error, naming `what` of the product's side, otherwise)."""
    if len(tensors) != 1 or tensors[0].numel() != 1:
        raise RuntimeError(
            f"The vector v can only be None if {what} a single Tensor with a single element."
        )
    return (tensors[0].new_ones(tensors[0].shape),)


def vjp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """torch.autograd.functional.vjp: (func(*inputs), v^T J), the vector-Jacobian product
    of the outputs with `v` (None for one single-element output)."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "vjp")
    inputs = _prepare(inputs, create_graph)
    is_outputs_tuple, outputs = _call(func, inputs, "vjp")
    _check_requires_grad(outputs, "outputs", strict)
    if v is None:
        v = _ones_for(outputs, "the user-provided function returns")
    else:
        _, v = _as_tuple(v, "v", "vjp")
        _validate_v(v, outputs, is_outputs_tuple)
    grads = _grads(outputs, inputs, v, create_graph)
    result = _fill(grads, inputs, strict, create_graph, "back")
    outputs = _finish(outputs, create_graph)
    return _unpack(is_outputs_tuple, outputs), _unpack(
        is_inputs_tuple, _finish(result, create_graph)
    )


def jvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """torch.autograd.functional.jvp: (func(*inputs), J v), the Jacobian-vector product
    with `v` (None for one single-element input), by torch's double-backward trick."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jvp")
    inputs = _prepare(inputs, create_graph)
    if v is None:
        v = _ones_for(inputs, "the input to the user-provided function is")
    else:
        _, v = _as_tuple(v, "v", "jvp")
        _validate_v(v, inputs, is_inputs_tuple)
    is_outputs_tuple, outputs = _call(func, inputs, "jvp")
    _check_requires_grad(outputs, "outputs", strict)
    # the trick: d/du (u^T J) v = J v, with u a dummy cotangent that requires grad
    dummies = tuple(o.new_zeros(o.shape).requires_grad_() for o in outputs)
    grad_inputs = _grads(outputs, inputs, dummies, create_graph=True)
    _fill(grad_inputs, inputs, strict, create_graph, "back_trick" if create_graph else "back")
    pairs = [(g, w) for g, w in zip(grad_inputs, v) if g is not None and g.requires_grad]
    if pairs:
        res = grad(
            [g for g, _ in pairs],
            list(dummies),
            [w for _, w in pairs],
            create_graph=create_graph,
            allow_unused=True,
        )
    else:
        res = (None,) * len(dummies)
    stage = "double_back_trick" if create_graph else "double_back"
    result = _fill(res, outputs, strict, create_graph, stage)
    outputs = _finish(outputs, create_graph)
    return _unpack(is_outputs_tuple, outputs), _unpack(
        is_outputs_tuple, _finish(result, create_graph)
    )


def jacobian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    strategy: str = "reverse-mode",
):
    """torch.autograd.functional.jacobian: d output / d input, shape `output.shape +
    input.shape`; a tuple over inputs (tuple inputs), over outputs (tuple outputs), or a
    tuple of tuples (both). One `grad()` per output element; `vectorize` and `strategy`
    change nothing but torch's checks of them (the values are the same)."""
    if strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError(  # torch asserts it
            'Expected strategy to be either "forward-mode" or "reverse-mode". Hint: If your '
            'function has more outputs than inputs, "forward-mode" tends to be more '
            'performant. Otherwise, prefer to use "reverse-mode".'
        )
    if strategy == "forward-mode":
        if create_graph:
            raise NotImplementedError(
                "torch.autograd.functional.jacobian: `create_graph=True` and "
                '`strategy="forward-mode"` are not supported together (yet). Please either '
                'set `create_graph=False` or `strategy="reverse-mode"`.'
            )
        if not vectorize:
            raise NotImplementedError(
                "Computing Jacobian using forward-AD or forward-over-reverse Hessian is only "
                "implemented for `vectorize=True`."
            )
    if vectorize and strict:
        raise RuntimeError(
            "torch.autograd.functional.jacobian: `strict=True` and `vectorized=True` are "
            "not supported together. Please either set `strict=False` or `vectorize=False`."
        )
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "jacobian")
    inputs = _prepare(inputs, create_graph)
    is_outputs_tuple, outputs = _call(func, inputs, "jacobian")
    _check_requires_grad(outputs, "outputs", strict)
    jac = []
    for i, out in enumerate(outputs):
        rows: list[list] = [[] for _ in inputs]
        flat = out.reshape(-1)
        for j in range(flat.numel()):
            one = flat.new_zeros(flat.shape)
            one[j] = 1
            gs = _grads((flat,), inputs, (one,), create_graph) if out.requires_grad else None
            for k, x in enumerate(inputs):
                g = None if gs is None else gs[k]
                if g is None:
                    if strict and create_graph and not x.requires_grad:
                        raise RuntimeError(
                            "The jacobian of the user-provided function is independent of "
                            f"input {k}. This is not allowed in strict mode when "
                            "create_graph=True."
                        )
                    if strict:
                        raise RuntimeError(
                            f"Output {i} of the user-provided function is independent of "
                            f"input {k}. This is not allowed in strict mode."
                        )
                    g = x.new_zeros(x.shape)
                rows[k].append(g)
        per_input = []
        for k, x in enumerate(inputs):
            if rows[k]:
                block = stack(rows[k]).reshape(tuple(out.shape) + tuple(x.shape))
            else:  # an empty output
                block = x.new_zeros(tuple(out.shape) + tuple(x.shape))
            per_input.append(block)
        jac.append(_finish(tuple(per_input), create_graph))
    result = tuple(_unpack(is_inputs_tuple, j) for j in jac)
    return _unpack(is_outputs_tuple, result)


def hessian(
    func,
    inputs,
    create_graph: bool = False,
    strict: bool = False,
    vectorize: bool = False,
    outer_jacobian_strategy: str = "reverse-mode",
):
    """torch.autograd.functional.hessian of a function with one single-element output:
    the Jacobian of its gradient, shape `input.shape + input.shape` (a tuple of tuples for
    tuple inputs), as torch computes it."""
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", "hessian")
    if outer_jacobian_strategy not in ("forward-mode", "reverse-mode"):
        raise AssertionError('Expected strategy to be either "forward-mode" or "reverse-mode".')

    def single(*inp):
        return _scalar_output(func, inp, "hessian")[0].squeeze()

    def jac_func(*inp):
        # torch's: the inner Jacobian with create_graph, so the outer one differentiates it
        return jacobian(single, inp, create_graph=True, strict=strict)

    res = jacobian(
        jac_func,
        inputs,
        create_graph=create_graph,
        strict=strict,
        vectorize=vectorize,
        strategy=outer_jacobian_strategy,
    )
    return res if is_inputs_tuple else res[0][0]  # (jac_func returns a tuple: inp is one)


def _scalar_output(func, inputs: tuple, fn: str):
    is_out_tuple, outputs = _call(func, inputs, fn)
    if is_out_tuple or len(outputs) != 1:
        raise RuntimeError(f"The function given to {fn} should return a single Tensor")
    if outputs[0].numel() != 1:
        raise RuntimeError(
            f"The Tensor returned by the function given to {fn} should contain a single element"
        )
    return outputs


def vhp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """torch.autograd.functional.vhp: (func(*inputs), v^T H) of a function with one
    single-element output."""
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph: bool = False, strict: bool = False):
    """torch.autograd.functional.hvp: (func(*inputs), H v) of a function with one
    single-element output, by torch's double-backward trick (equal to `vhp` for a
    twice-differentiable function, whose Hessian is symmetric)."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(func, inputs, v, create_graph: bool, strict: bool, fn: str):
    is_inputs_tuple, inputs = _as_tuple(inputs, "inputs", fn)
    inputs = _prepare(inputs, create_graph)
    if v is None:
        v = _ones_for(inputs, "the input to the user-provided function is")
    else:
        _, v = _as_tuple(v, "v", fn)
        _validate_v(v, inputs, is_inputs_tuple)
    outputs = _scalar_output(func, inputs, fn)
    _check_requires_grad(outputs, "outputs", strict)
    ones = (outputs[0].new_ones(outputs[0].shape),)
    jac = _grads(outputs, inputs, ones, create_graph=True)
    _check_requires_grad(tuple(j for j in jac if j is not None), "jacobian", strict)
    jac = _fill(jac, inputs, strict, create_graph, "back")
    diff = [(j, w) for j, w in zip(jac, v) if j.requires_grad]
    if fn == "vhp":
        if diff:
            res = grad(
                [j for j, _ in diff],
                inputs,
                [w for _, w in diff],
                create_graph=create_graph,
                allow_unused=True,
            )
        else:
            res = (None,) * len(inputs)
    else:
        dummies = tuple(x.new_zeros(x.shape).requires_grad_() for x in inputs)
        if diff:
            pairs = [(j, d) for j, d in zip(jac, dummies) if j.requires_grad]
            back = grad(
                [j for j, _ in pairs],
                inputs,
                [d for _, d in pairs],
                create_graph=True,
                allow_unused=True,
            )
            back = _fill(back, inputs, strict, create_graph, "double_back_trick")
            kept = [(b, w) for b, w in zip(back, v) if b.requires_grad]
            res = (
                grad(
                    [b for b, _ in kept],
                    list(dummies),
                    [w for _, w in kept],
                    create_graph=create_graph,
                    allow_unused=True,
                )
                if kept
                else (None,) * len(inputs)
            )
        else:
            res = (None,) * len(inputs)
    result = _fill(res, inputs, strict, create_graph, "double_back")
    outputs = _finish(outputs, create_graph)
    return outputs[0], _unpack(is_inputs_tuple, _finish(result, create_graph))
