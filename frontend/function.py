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
import weakref

from . import autograd, autograd_state
from .ir import macro
from .ir import node as N
from .ir.autodiff import (
    GRAD_HOOKS,
    leave_without_gradient,
    own_node,
    reaches,
    received_gradient,
    with_vjp,
)
from .ir.dtypes import float32, float64
from .jithooks import note_write
from .movement import cat
from .tensor import Tensor
from .tensor_hooks import call_with_none, fresh_node


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
        self._dirty: set[int] = set()
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
        `backward` receives zeros for them (None with `set_materialize_grads(False)`)."""
        self._non_differentiable.update(id(t) for t in outputs)

    def set_materialize_grads(self, value: bool) -> None:
        """Whether `backward` receives zeros (True, the default) or None for an output that
        got no gradient (one the loss does not use, or a non-differentiable one).

        >>> import fusegrad as fg
        >>> class Two(fg.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         ctx.set_materialize_grads(False)
        ...         return x * 2, x * 3
        ...     @staticmethod
        ...     def backward(ctx, g1, g2):
        ...         print(g2)
        ...         return g1 * 2
        >>> x = fg.tensor([1.0], requires_grad=True)
        >>> Two.apply(x)[0].sum().backward()
        None
        """
        self.materialize_grads = bool(value)

    def mark_dirty(self, *tensors) -> None:
        """These input tensors were modified in place by `forward`, which returns them: each
        stays the same tensor object, its value now the output of this Function (gradients
        reaching it go through `backward`), its version counter bumped, as torch's.

        >>> import fusegrad as fg
        >>> class AddOne(fg.autograd.Function):
        ...     @staticmethod
        ...     def forward(ctx, x):
        ...         x.add_(1)
        ...         ctx.mark_dirty(x)
        ...         return x
        ...     @staticmethod
        ...     def backward(ctx, grad):
        ...         return grad
        >>> b = fg.tensor([1.0, 2.0], requires_grad=True) * 2
        >>> AddOne.apply(b) is b, b.tolist()
        (True, [3.0, 5.0])
        """
        self._dirty.update(id(t) for t in tensors)


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
        # the inputs' nodes as forward receives them: an in-place forward (mark_dirty)
        # rebinds its input, and the gradient must reach the value it had before
        before = [a.node if isinstance(a, Tensor) else None for a in args]
        if with_setup:
            output = cls.forward(*args, **kwargs)
            cls.setup_context(ctx, args, output)
        else:
            output = cls.forward(ctx, *args, **kwargs)
        if ctx._dirty:
            _check_dirty(cls.__name__, ctx, args, output)
        if not any(needs) or not autograd_state.enabled():
            _bump_dirty(ctx, output)
            return output
        return _attach(cls, ctx, args, before, output)


def once_differentiable(backward):
    """Accepted for torch's API (`@staticmethod @once_differentiable def backward`). torch
    runs such a backward without recording it, so differentiating it again raises; here
    backward builds graph of differentiable ops, which can be differentiated again."""
    return backward


def _check_dirty(name: str, ctx: FunctionCtx, args: tuple, output) -> None:
    """torch's checks of `ctx.mark_dirty`: every dirty tensor is an input that forward
    returns, not a leaf that requires grad; a view is refused (torch would route its base's
    gradient through backward too, which this does not do)."""
    outputs = output if isinstance(output, tuple) else (output,)
    if not ctx._dirty <= {id(o) for o in outputs if isinstance(o, Tensor)}:
        raise RuntimeError(
            f"autograd.Function {name}: some elements marked as dirty during the forward "
            "method were not returned as output. The inputs that are modified inplace must "
            "all be outputs of the Function."
        )
    if not ctx._dirty <= {id(a) for a in args if isinstance(a, Tensor)}:
        raise RuntimeError(
            f"autograd.Function {name}: ctx.mark_dirty was given a tensor that is not an "
            "input of forward"
        )
    for a in args:
        if not isinstance(a, Tensor) or id(a) not in ctx._dirty:
            continue
        if a.requires_grad and a._is_leaf and autograd_state.enabled():
            raise RuntimeError(
                f"autograd.Function {name}: a leaf Variable that requires grad has been used "
                f"in an in-place operation (ctx.mark_dirty on a {a.dtype.name} {a.shape} leaf)"
            )
        link = getattr(a, "_base", None)
        if link is not None and link[1] is not None and any(ctx.needs_input_grad):
            raise NotImplementedError(
                f"autograd.Function {name}: ctx.mark_dirty on a view ({a.dtype.name} "
                f"{a.shape}) is not supported: its base's gradient would not pass through "
                "backward; apply the Function to the base, or clone() the view first"
            )


def _bump_dirty(ctx: FunctionCtx, output) -> None:
    """torch counts the Function's in-place write on each dirty tensor's version."""
    for o in output if isinstance(output, tuple) else (output,):
        if isinstance(o, Tensor) and id(o) in ctx._dirty:
            o._version += 1
            ctx._dirty.discard(id(o))  # (returned twice: counted once)


def _common_float(dtypes: list):
    """The dtype that holds each of `dtypes` exactly (the joint node of mixed outputs)."""
    if len(set(dtypes)) == 1:
        return dtypes[0]
    return float64 if any(d.itemsize >= 8 for d in dtypes) else float32


def _attach(cls, ctx: FunctionCtx, args: tuple, before: list, output):
    """`output` with `cls.backward` as the gradient of its differentiable tensors.

    Several differentiable outputs are one joint node (their concatenation, in a dtype that
    holds each exactly), so that backward gets every gradient at once; each output is a
    node of its own above it, so that the rule can tell which received a gradient (an
    output the loss does not use gets zeros, or None with `set_materialize_grads(False)`).
    A dirty input (`mark_dirty`) is rebound to its output's node, as an in-place op."""
    name = cls.__name__
    single = not isinstance(output, tuple)
    returned = (output,) if single else output
    grad_outs = [
        k
        for k, o in enumerate(returned)
        if isinstance(o, Tensor) and o.dtype.is_float and id(o) not in ctx._non_differentiable
    ]
    outputs = tuple(
        o.detach() if isinstance(o, Tensor) and k not in grad_outs else o
        for k, o in enumerate(returned)
    )
    if not grad_outs:
        dirty = set(ctx._dirty)
        _bump_dirty(ctx, returned)
        outputs = tuple(r if id(r) in dirty else o for r, o in zip(returned, outputs))
        return outputs[0] if single else outputs
    inputs = [(i, a) for i, a in enumerate(args) if ctx.needs_input_grad[i]]
    shapes = [outputs[k].shape for k in grad_outs]
    dtypes = [outputs[k].dtype for k in grad_outs]
    sizes = [outputs[k].numel() for k in grad_outs]
    if len(grad_outs) == 1:
        joint = outputs[grad_outs[0]]
    else:
        joint_dtype = _common_float(dtypes)
        joint = cat([outputs[k].reshape(-1).cast(joint_dtype) for k in grad_outs])
    # (fresh: the same op again is one node)
    node = fresh_node(_connected(joint, [before[i] for i, _ in inputs]))
    # the rule keeps descriptions, not tensors: an output's tensor would keep the rule's
    # own node alive (CUSTOM_VJP is keyed weakly by it), an input's its old graph
    sources = [(i, before[i]) for i, _ in inputs]
    zeros = [(o.shape, o.dtype) if isinstance(o, Tensor) else None for o in outputs]
    given = [(a.shape, a.dtype, a.requires_grad) if isinstance(a, Tensor) else None for a in args]

    def split(t: Tensor) -> dict:  # the joint node's value or gradient, per output
        if len(grad_outs) == 1:
            return {grad_outs[0]: t}
        starts = itertools.accumulate(sizes[:-1], initial=0)
        return {
            k: t[start : start + size].reshape(shape).cast(dtype)
            for k, start, size, shape, dtype in zip(grad_outs, starts, sizes, shapes, dtypes)
        }

    pieces = split(joint._make(node, *[a for _, a in inputs]))
    if len(grad_outs) > 1:  # nodes of their own, to see which receive a gradient
        pieces = {k: p._make(own_node(p.node), p) for k, p in pieces.items()}
    piece_refs = {k: weakref.ref(p.node) for k, p in pieces.items()}

    def received(k: int) -> bool:
        if len(grad_outs) == 1:
            return True  # (the rule runs: its one output received a gradient)
        piece = piece_refs[k]()
        return piece is not None and received_gradient(piece)

    def rule(g: N.Node):
        parts = split(Tensor(g))
        grads = []
        for k, z in enumerate(zeros):
            if k in parts and received(k):
                grads.append(parts[k])
                continue
            if k in parts and (piece := piece_refs[k]()) is not None:
                call_with_none(piece)  # its tensor hooks get None, as torch's
            if z is None or not ctx.materialize_grads:
                grads.append(None)
            else:
                grads.append(_zeros(*z))
        result = _checked(name, cls.backward(ctx, *grads), given)
        pairs = []
        for i, s in sources:
            if result[i] is None:
                leave_without_gradient(s)  # torch's None, not a zero gradient
            else:
                pairs.append((s, result[i].node))
        return pairs

    with_vjp(node, rule)
    # listed, doing nothing, so that backward() builds the gradient at once: backward's
    # errors raise there
    GRAD_HOOKS[node] = {"autograd.Function": _keep}
    finished = []
    for k, o in enumerate(outputs):
        if k in pieces and id(returned[k]) in ctx._dirty:
            finished.append(_rebind(returned[k], pieces[k]))
        elif id(returned[k]) in ctx._dirty:
            finished.append(returned[k])  # (a dirty output without gradient keeps its value)
        else:
            finished.append(pieces.get(k, o))
    _bump_dirty(ctx, tuple(finished))
    return finished[0] if single else tuple(finished)


def _rebind(t: Tensor, value: Tensor) -> Tensor:
    """A dirty input, the same tensor object, made the Function's output `value` (as an
    in-place op rebinds a tensor)."""
    t.node, t.requires_grad, t._is_leaf, t._strides = value.node, True, False, None
    note_write(t)  # (for fg.jit, as an in-place op's)
    return t


def _keep(g: N.Node) -> None:
    return None


def _zeros(shape, dtype) -> Tensor:
    return Tensor(N.const(False if dtype.is_bool else 0, shape, dtype))


def _connected(joint: Tensor, sources: list) -> N.Node:
    """`joint`'s node, made to depend on every input that requires grad.

    A forward may compute an output without a graph path from an input (through
    numpy, or a detach): backward() would then never reach the rule. Such outputs
    get a macro node over the output and those inputs whose value is the output
    alone (the scheduler sees only the output), so the gradient reaches the rule."""
    targets = {id(n): n for n in sources}
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
