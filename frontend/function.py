"""`fusegrad.autograd.Function`: an op with a gradient written by hand, as torch's.

A subclass gives `forward(ctx, *args)` and `backward(ctx, *grad_outputs)` as static
methods and is called through `apply`. There is no tape here either: `forward` runs
on the lazy inputs and builds graph; its outputs get a gradient rule of their own
(`ir/autodiff.py` `with_vjp`) that calls `backward` when a backward pass is *built*,
on lazy tensors, so the hand-written gradient is graph like any other: it fuses with
its neighbours, can be differentiated again, and is recorded by `fusegrad.jit`.

>>> import fusegrad as fg
>>> class Cube(fg.autograd.Function):
...     @staticmethod
...     def forward(ctx, x):
...         ctx.save_for_backward(x)
...         return x ** 3
...     @staticmethod
...     def backward(ctx, grad):
...         (x,) = ctx.saved_tensors
...         return grad * 3 * x ** 2
>>> x = fg.tensor([1.0, 2.0], requires_grad=True)
>>> Cube.apply(x).sum().backward()
>>> x.grad.tolist()
[3.0, 12.0]
"""

from __future__ import annotations

import inspect
import itertools
import sys

from . import autograd, autograd_state
from .ir import macro
from .ir import node as N
from .ir.autodiff import GRAD_HOOKS, reaches, with_vjp
from .movement import cat
from .tensor import Tensor
from .tensor_hooks import fresh_node


class FunctionCtx:
    """What `forward` leaves for `backward`: saved tensors, flags and any attribute.

    `needs_input_grad[i]` says whether forward's i-th argument is a tensor that
    requires grad (so `backward` may skip the others and return None for them).
    """

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self.materialize_grads = True
        self._saved: tuple = ()
        self._non_differentiable: set[int] = set()
        self._backward_nodes = None  # the saved tensors' nodes, while backward runs

    def save_for_backward(self, *tensors) -> None:
        """Keep these tensors (or None) for `backward`'s `ctx.saved_tensors`.

        What is kept is each tensor's value as it is now: an optimizer step that
        updates a saved parameter before the gradient is built does not change it."""
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    "save_for_backward can only save variables, but argument "
                    f"{tensors.index(t)} is of type {type(t).__name__}"
                )
        self._saved = tuple(None if t is None else (t.node, t.requires_grad) for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        """The tensors `save_for_backward` kept, as tensors of the backward graph."""
        return tuple(
            None if s is None else Tensor(s[0], requires_grad=s[1], leaf=not s[1])
            for s in self._saved
        )

    def mark_non_differentiable(self, *outputs) -> None:
        """These outputs get no gradient (an index, a mask): they do not require grad and
        `backward` receives zeros for them."""
        self._non_differentiable.update(id(t) for t in outputs)

    def set_materialize_grads(self, value: bool) -> None:
        """Accepted for torch's API. Gradients are always materialized here (zeros for an
        output that gets none), which torch's backward must accept anyway."""
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        raise NotImplementedError(
            "autograd.Function: in-place forwards (ctx.mark_dirty) are not supported; "
            "return a new tensor instead"
        )


class Function:
    """Base class of a differentiable op with a hand-written gradient (see the module
    docstring). Subclasses define static `forward(ctx, *args)` and
    `backward(ctx, *grad_outputs)` (one gradient or None per forward argument), or
    torch's other form: `forward(*args)` with `setup_context(ctx, inputs, output)`.
    """

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError(
            "You must implement the forward function for custom autograd.Function."
        )

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD."
        )

    vjp = backward

    def __init__(self, *args, **kwargs):
        # torch deprecated instances: an op is a class, called through apply
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. "
            "Please use new-style autograd function with static forward method."
        )

    @classmethod
    def apply(cls, *args, **kwargs):
        """Run `forward` on `args` and give its outputs `backward` as their gradient.

        backward returns one gradient per positional argument (with `setup_context`, per
        parameter of forward, defaults included, as torch binds them)."""
        with_setup = cls.setup_context is not Function.setup_context
        if with_setup:
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        needs = tuple(isinstance(a, Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        if with_setup:
            output = cls.forward(*args, **kwargs)
            cls.setup_context(ctx, args, output)
        else:
            output = cls.forward(ctx, *args, **kwargs)
        if not any(needs) or not autograd_state.enabled():
            return output
        return _attach(cls, ctx, args, output)


def once_differentiable(backward):
    """Accepted for torch's API (`@staticmethod @once_differentiable def backward`). torch
    runs such a backward without recording it, so differentiating it again raises; here
    backward builds graph of differentiable ops, which can be differentiated again."""
    return backward


def _attach(cls, ctx: FunctionCtx, args: tuple, output):
    """`output` with `cls.backward` as the gradient of its differentiable tensors."""
    name = cls.__name__
    single = not isinstance(output, tuple)
    outputs = (output,) if single else output
    grad_outs = [
        k
        for k, o in enumerate(outputs)
        if isinstance(o, Tensor) and o.dtype.is_float and id(o) not in ctx._non_differentiable
    ]
    outputs = tuple(
        o.detach() if isinstance(o, Tensor) and k not in grad_outs else o
        for k, o in enumerate(outputs)
    )
    if not grad_outs:
        return outputs[0] if single else outputs
    dtypes = {outputs[k].dtype for k in grad_outs}
    if len(dtypes) > 1:
        raise NotImplementedError(
            f"autograd.Function {name}: differentiable outputs of different dtypes "
            f"({', '.join(sorted(d.name for d in dtypes))}) are not supported"
        )
    inputs = [(i, a) for i, a in enumerate(args) if ctx.needs_input_grad[i]]
    shapes = [outputs[k].shape for k in grad_outs]
    sizes = [outputs[k].numel() for k in grad_outs]
    if len(grad_outs) == 1:
        joint = outputs[grad_outs[0]]
    else:  # one node for all outputs, so that backward gets every gradient at once
        joint = cat([outputs[k].reshape(-1) for k in grad_outs])
    node = fresh_node(_connected(joint, inputs))  # (fresh: the same op again is one node)
    # the rule keeps descriptions, not tensors: an output's tensor would keep the rule's
    # own node alive (CUSTOM_VJP is keyed weakly by it), an input's its old graph
    sources = [(i, a.node) for i, a in inputs]
    zeros = [(o.shape, o.dtype) if isinstance(o, Tensor) else None for o in outputs]
    given = [(a.shape, a.dtype, a.requires_grad) if isinstance(a, Tensor) else None for a in args]

    def split(t: Tensor) -> dict:  # the joint node's value or gradient, per output
        if len(grad_outs) == 1:
            return {grad_outs[0]: t}
        starts = itertools.accumulate(sizes[:-1], initial=0)
        return {
            k: t[start : start + size].reshape(shape)
            for k, start, size, shape in zip(grad_outs, starts, sizes, shapes)
        }

    def rule(g: N.Node):
        pieces = split(Tensor(g))
        grads = [
            pieces[k] if k in pieces else None if z is None else _zeros(*z)
            for k, z in enumerate(zeros)
        ]
        result = _checked(name, cls.backward(ctx, *grads), given)
        return [(s, d.node) for i, s in sources if (d := result[i]) is not None]

    with_vjp(node, rule)
    # listed, doing nothing, so that backward() builds the gradient at once: backward's
    # errors raise there
    GRAD_HOOKS[node] = {"autograd.Function": _keep}
    pieces = split(joint._make(node, *[a for _, a in inputs]))
    outputs = tuple(pieces.get(k, o) for k, o in enumerate(outputs))
    return outputs[0] if single else outputs


def _keep(g: N.Node) -> None:
    return None


def _zeros(shape, dtype) -> Tensor:
    return Tensor(N.const(False if dtype.is_bool else 0, shape, dtype))


def _connected(joint: Tensor, inputs) -> N.Node:
    """`joint`'s node, made to depend on every input that requires grad.

    A forward may compute an output without a graph path from an input (through
    numpy, or a detach): backward() would then never reach the rule. Such outputs
    get a macro node over the output and those inputs whose value is the output
    alone (the scheduler sees only the output), so the gradient reaches the rule."""
    targets = {id(a.node): a.node for _, a in inputs}
    live = reaches([joint.node], set(targets))
    cut = [n for i, n in targets.items() if i not in live]
    if not cut:
        return joint.node
    return macro.macro("function_output", (joint.node, *cut), (), joint.shape, joint.dtype)


macro.register("function_output", lambda srcs, params: srcs[0])


def _checked(name: str, result, given: list) -> list:
    """backward's gradients, checked as torch checks them: one per forward argument
    (extra trailing Nones dropped), a tensor's gradient of its shape (or one that sums
    to it) in its dtype. `given`: each argument's (shape, dtype, requires_grad), or None
    for one that is not a tensor."""
    result = list(result) if isinstance(result, tuple) else [result]
    if len(result) > len(given) and all(r is None for r in result[len(given) :]):
        result = result[: len(given)]
    if len(result) != len(given):
        raise RuntimeError(
            f"function {name}Backward returned an incorrect number of gradients "
            f"(expected {len(given)}, got {len(result)})"
        )
    out = []
    for i, (g, a) in enumerate(zip(result, given)):
        if g is not None and a is None:
            raise RuntimeError(
                f"function {name}Backward returned a gradient different than None at position "
                f"{i + 1}, but the corresponding forward input was not a Variable"
            )
        if g is None or not a[2]:
            out.append(None)
            continue
        shape, dtype, _ = a
        if not isinstance(g, Tensor):
            raise TypeError(
                f"function {name}Backward returned a gradient of type {type(g).__name__} at "
                f"index {i}; expected a Tensor or None"
            )
        if g.shape != shape:
            if not _sums_to(g.shape, shape):
                raise RuntimeError(
                    f"Function {name}Backward returned an invalid gradient at index {i} - "
                    f"got {list(g.shape)} but expected shape compatible with {list(shape)}"
                )
            g = _sum_to(g, shape)
        out.append(g.to(dtype=dtype) if g.dtype != dtype else g)
    return out


def _sum_to(g: Tensor, shape) -> Tensor:
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(tuple(range(lead)))
    axes = tuple(i for i, (s, t) in enumerate(zip(shape, g.shape)) if s != t)
    return g.sum(axes, keepdim=True) if axes else g


def _sums_to(grad_shape, shape) -> bool:
    """Whether `shape` broadcasts to `grad_shape` (so the gradient sums down to it)."""
    if len(shape) > len(grad_shape):
        return False
    tail = grad_shape[len(grad_shape) - len(shape) :]
    return all(s == t or s == 1 for s, t in zip(shape, tail))


# fusegrad.autograd.Function, as torch.autograd.Function: autograd.py sits below tensor.py,
# which this module needs, so this module puts its names there (fusegrad/__init__ imports it)
autograd.Function, autograd.FunctionCtx = Function, FunctionCtx
autograd.function = sys.modules[__name__]
