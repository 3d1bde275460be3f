"""torch.func's differentiation transforms over fusegrad's symbolic autodiff: `grad`,
`grad_and_value`, `vjp`, `jvp`, `jacrev`, `jacfwd`, `hessian`.

A transform calls the function on *variables*: each differentiated input `x` becomes a
node of its own, `contiguous(x)` tagged with the transform's nesting level and the
input's place (`_variable`). The function's graph reads x only through it, so the
gradient (`ir.autodiff.gradients`) is taken with respect to that input alone: a tensor
the function captures from outside is a constant to it, even if it is x itself, as in
torch.func. The variable's own derivative is the identity, so every result stays a graph
in x: it can be differentiated again, by an enclosing transform (`grad(grad(f))`) or by
`backward()` when x requires grad (`requires_grad` of a result says whether it depends
on a leaf that requires grad or on an enclosing transform's variable).

Forward mode is not separate: `jvp` is the derivative of a vector-Jacobian product in
its cotangent (linear, so exact), and `jacfwd` one such product per input element
(`jacrev`: one vector-Jacobian product per output element). torch's values, not its cost:
every result is a lazy graph, fused when realized.

>>> import fusegrad as fg
>>> from fusegrad.func import grad
>>> x = fg.tensor(2.0, dtype=fg.float64)
>>> grad(lambda x: x ** 3)(x).item(), grad(grad(lambda x: x ** 3))(x).item()
(12.0, 12.0)
"""

from __future__ import annotations

import functools
import threading

from .autograd import _live_leaves, _reached_leaves
from .creation_nodes import _seed
from .errors import fail
from .func_pytree import TransformError, tree_flatten, tree_unflatten
from .ir import node as N
from .ir.autodiff import gradients
from .movement import stack
from .tensor_base import TensorBase


class _Levels(threading.local):
    """The variables of the transforms running on this thread, outermost first: one
    list of nodes per transform."""

    def __init__(self):
        self.stack: list[list] = []


_levels = _Levels()


def _variable(x, tag: str, index: int):
    """A tensor equal to x whose node is the transform's own (see the module docstring)."""
    level = len(_levels.stack)
    node = N.contiguous(x.node, (f"fusegrad.func {tag}", level, index))
    return x._plain(node, requires_grad=True, leaf=False)


def _outer_grad(nodes) -> bool:
    """Whether any of `nodes` depends on a leaf that requires grad or on a variable of a
    transform that is still running (torch's result is then differentiable)."""
    by_node = {id(leaf.node): leaf for leaf in _live_leaves()}
    for level in _levels.stack:
        by_node.update((id(n), n) for n in level)
    seen: set = set()
    return any(_reached_leaves(n, by_node, seen) for n in nodes)


def _as_result(t):
    """`t`, made by the function inside a transform, as the transform returns it."""
    if not isinstance(t, TensorBase):
        return t
    needs = _outer_grad([t.node])
    if needs == t.requires_grad:
        return t
    return t._plain(t.node, requires_grad=needs, leaf=not needs)


def _pullback(outputs: list, cotangents: list, inputs: list) -> list:
    """sum_k d<outputs[k], cotangents[k]>/d(input) for each input, as tensors (zeros
    where no output depends on it; outputs that are not float have no derivative)."""
    total: list = [None] * len(inputs)
    targets = [x.node for x in inputs]
    for o, c in zip(outputs, cotangents):
        if not o.dtype.is_float:
            continue
        for i, g in enumerate(gradients(o.node, N.cast(c.node, o.dtype), targets)):
            if g is not None:
                total[i] = g if total[i] is None else N.add(total[i], g)
    out = []
    for x, g in zip(inputs, total):
        if g is None:
            g = N.const(0, x.shape, x.dtype, x.node.device)
        out.append(x._plain(g, requires_grad=True, leaf=False))
    return out


def _finish(tensors: list) -> list:
    """Results of a transform, flagged `requires_grad` as torch's would be."""
    return [_as_result(t) for t in tensors]


# ---------------------------------------------------------------- arguments


def _argnums(argnums, nargs: int, api: str):
    """argnums checked and made non-negative, as torch.func checks them."""
    if isinstance(argnums, tuple):
        if not argnums:
            fail(TransformError, api, "argnums must be non-empty")
        if not all(isinstance(a, int) and not isinstance(a, bool) for a in argnums):
            fail(TransformError, api, f"argnums must be int or Tuple[int, ...], got: {argnums}")
        if len(set(argnums)) != len(argnums):
            fail(TransformError, api, f"argnums elements must be unique, got {argnums}")
        return tuple(_argnum(a, nargs, api) for a in argnums)
    if not isinstance(argnums, int) or isinstance(argnums, bool):
        fail(TransformError, api, f"argnums must be int or Tuple[int, ...], got: {type(argnums)}")
    return _argnum(argnums, nargs, api)


def _argnum(a: int, nargs: int, api: str) -> int:
    if not -nargs <= a < nargs:
        fail(TransformError, api, f"Got argnum={a}, but only {nargs} positional inputs")
    return a % nargs


def _tensor_leaves(tree, api: str) -> tuple[list, object]:
    """The leaves of a differentiated argument: float tensors, as torch requires."""
    leaves, spec = tree_flatten(tree)
    for x in leaves:
        if not isinstance(x, TensorBase):
            fail(
                TransformError, api, f"Thing passed to transform API must be Tensor, got {type(x)}"
            )
        if not x.dtype.is_float:
            fail(
                TransformError,
                api,
                f"only Tensors of floating point dtype can require gradients, got {x.dtype.name}",
            )
    return leaves, spec


class _Call:
    """One call of a function on variables in place of some of its arguments.

    `variables`: the flat list of them; `trees`: (position, spec, first, count) per
    differentiated argument, to put their gradients back in its shape."""

    def __init__(self, func, args: tuple, kwargs: dict, nums, tag: str, api: str):
        args = list(args)
        self.variables, self.trees = [], []
        for pos in nums if isinstance(nums, tuple) else (nums,):
            leaves, spec = _tensor_leaves(args[pos], api)
            first = len(self.variables)
            self.variables += [_variable(x, tag, first + k) for k, x in enumerate(leaves)]
            self.trees.append((pos, spec, first, len(leaves)))
            args[pos] = tree_unflatten(self.variables[first:], spec)
        self.nums = nums
        _levels.stack.append([v.node for v in self.variables])
        try:
            self.output = func(*args, **kwargs)
        finally:
            _levels.stack.pop()

    def shaped(self, flat: list):
        """`flat` (one entry per variable) in the shape of the differentiated arguments:
        one argument's tree for an int argnums, a tuple of them for a tuple."""
        trees = [tree_unflatten(flat[f : f + n], spec) for _, spec, f, n in self.trees]
        return tuple(trees) if isinstance(self.nums, tuple) else trees[0]


def _split_aux(output, has_aux: bool, api: str, what: str):
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        fail(TransformError, api, f"output of function f should be a tuple: {what}")
    return output


def _aux_tensors(aux) -> tuple[list, object]:
    """The leaves of `aux` (tensors only, as torch requires) and its tree."""
    leaves, spec = tree_flatten(aux)
    for x in leaves:
        if not isinstance(x, TensorBase):
            fail(TransformError, "has_aux", f"Expected tensors, got unsupported type {type(x)}")
    return leaves, spec


# ---------------------------------------------------------------- grad


def grad_and_value(func, argnums=0, has_aux: bool = False):
    """torch.func.grad_and_value: a function returning `(gradient, value)` of scalar
    `func` with respect to the arguments `argnums` names (an int: that argument's tree of
    tensors; a tuple: a tuple of them), `(gradient, (value, aux))` with `has_aux`.

    >>> import fusegrad as fg
    >>> g, v = grad_and_value(lambda x, y: (x * y).sum(), argnums=(0, 1))(
    ...     fg.tensor([1.0, 2.0]), fg.tensor([3.0, 4.0]))
    >>> [t.tolist() for t in g], v.item()
    ([[3.0, 4.0], [1.0, 2.0]], 11.0)
    """
    api = "grad_and_value(f)(*args)"

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args), api)
        call = _Call(func, args, kwargs, nums, "grad", api)
        output, aux = _split_aux(call.output, has_aux, api, "(output, aux) if has_aux is True")
        if not isinstance(output, TensorBase):
            fail(TransformError, api, f"Expected f(*args) to return a Tensor, got {type(output)}")
        if output.ndim != 0:
            fail(
                TransformError,
                api,
                f"Expected f(*args) to return a scalar Tensor, got tensor with {output.ndim} "
                "dims. Maybe you wanted to use the vjp or jacrev APIs instead?",
            )
        one = output._plain(N.const(1, (), output.dtype, output.node.device))
        grads = _finish(_pullback([output], [one], call.variables))
        value = _as_result(output)
        if has_aux:
            aux_leaves, aux_spec = _aux_tensors(aux)
            return call.shaped(grads), (value, tree_unflatten(_finish(aux_leaves), aux_spec))
        return call.shaped(grads), value

    return wrapper


def grad(func, argnums=0, has_aux: bool = False):
    """torch.func.grad: a function returning the gradient of scalar `func` with respect
    to the arguments `argnums` names (`(gradient, aux)` with `has_aux`). Differentiable
    itself: `grad(grad(f))` is a second derivative, `vmap(grad(loss))` per-example
    gradients. An argument the output does not depend on gets zeros, as torch's.

    >>> import fusegrad as fg
    >>> grad(lambda x: (x.sin() * 2).sum())(fg.tensor([0.0])).tolist()
    [2.0]
    """
    inner = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g

    return wrapper


# ---------------------------------------------------------------- vjp, jvp


def _output_tensors(output, api: str, what: str) -> tuple[list, object]:
    leaves, spec = tree_flatten(output)
    for o in leaves:
        if not isinstance(o, TensorBase):
            fail(
                TransformError,
                api,
                f"expected {what} to return only tensors, got unsupported type {type(o)}",
            )
    return leaves, spec


def vjp(func, *primals, has_aux: bool = False):
    """torch.func.vjp: `(func(*primals), vjp_fn)` (and `aux` third with `has_aux`), where
    `vjp_fn(cotangents)` (cotangents in the output's tree) returns the tuple of
    vector-Jacobian products, one tree per primal. vjp_fn can be called many times.

    >>> import fusegrad as fg
    >>> out, vjp_fn = vjp(lambda x: x * x, fg.tensor([1.0, 3.0]))
    >>> vjp_fn(fg.tensor([1.0, 10.0]))[0].tolist()
    [2.0, 60.0]
    """
    api = "vjp(f, *primals)"
    call = _Call(func, primals, {}, tuple(range(len(primals))), "vjp", api)
    output, aux = _split_aux(call.output, has_aux, api, "(output, aux) if has_aux is True")
    outs, out_spec = _output_tensors(output, api, "f(*primals)")

    def vjp_fn(cotangents, retain_graph: bool = True, create_graph: bool | None = None):
        cots, cot_spec = tree_flatten(cotangents)
        if cot_spec != out_spec:
            fail(
                TransformError,
                "vjp_fn",
                "Expected pytree structure of cotangents to be the same as pytree structure "
                f"of outputs to the function. cotangents: {cot_spec}, primal output: {out_spec}",
            )
        for i, (c, o) in enumerate(zip(cots, outs)):
            if not isinstance(c, TensorBase) or c.shape != o.shape:
                shape = getattr(c, "shape", type(c))
                fail(
                    TransformError,
                    "vjp_fn",
                    f"Mismatch in shape: grad_output[{i}] has a shape of {shape} and "
                    f"output[{i}] has a shape of {o.shape}.",
                )
        return call.shaped(_finish(_pullback(outs, cots, call.variables)))

    result = (tree_unflatten(_finish(outs), out_spec), vjp_fn)
    if has_aux:
        aux_leaves, aux_spec = _aux_tensors(aux)
        return (*result, tree_unflatten(_finish(aux_leaves), aux_spec))
    return result


def jvp(func, primals, tangents, *, strict: bool = False, has_aux: bool = False):
    """torch.func.jvp: `(func(*primals), J @ tangents)` (and `aux` with `has_aux`): the
    output and its directional derivative along `tangents` (the primals' tree, tensors of
    their shapes). Computed in reverse mode: the vector-Jacobian product J^T u with a
    cotangent variable u, differentiated in u along the tangents (exact: it is linear).

    >>> import fusegrad as fg
    >>> out, t = jvp(lambda x: x ** 2, (fg.tensor([1.0, 3.0]),), (fg.tensor([1.0, 1.0]),))
    >>> t.tolist()
    [2.0, 6.0]
    """
    api = "jvp(f, primals, tangents)"
    if not isinstance(primals, tuple):
        fail(
            TransformError,
            api,
            "Expected primals to be a tuple. E.g. it should be valid to call f(*primals).",
        )
    if not isinstance(tangents, tuple):
        fail(TransformError, api, "Expected tangents to be a tuple.")
    p_leaves, p_spec = tree_flatten(primals)
    t_leaves, t_spec = tree_flatten(tangents)
    if p_spec != t_spec:
        fail(
            TransformError,
            api,
            "Expected primals and tangents to have the same python structure. For example, "
            "if primals is a tuple of 3 tensors, tangents also must be. Got primals with "
            f"structure {p_spec} and tangents with structure {t_spec}",
        )
    for p, t in zip(p_leaves, t_leaves):
        if isinstance(p, TensorBase) and isinstance(t, TensorBase) and p.shape != t.shape:
            fail(
                TransformError,
                api,
                "Trying to set a forward gradient that has a different size than that of the "
                f"original Tensor, this is not supported. Tensor is of size {list(p.shape)} "
                f"while the given forward gradient is of size {list(t.shape)}.",
            )
    call = _Call(func, primals, {}, tuple(range(len(primals))), "jvp", api)
    output, aux = _split_aux(call.output, has_aux, api, "(output, aux) if has_aux is True")
    outs, out_spec = _output_tensors(output, api, "f(*args)")
    cotangents = [
        _variable(o._plain(N.const(0, o.shape, o.dtype, o.node.device)), "cotangent", k)
        for k, o in enumerate(outs)
    ]
    vjps = _pullback(outs, cotangents, call.variables)  # J^T u, linear in u
    tangent_outs = _pullback(vjps, t_leaves, cotangents)  # d<J^T u, t>/du = J t
    result = (
        tree_unflatten(_finish(outs), out_spec),
        tree_unflatten(_finish(tangent_outs), out_spec),
    )
    if has_aux:
        aux_leaves, aux_spec = _aux_tensors(aux)
        return (*result, tree_unflatten(_finish(aux_leaves), aux_spec))
    return result


# ---------------------------------------------------------------- Jacobians


def _one_hot(k: int, like) -> object:
    """The tensor of `like`'s shape and dtype with 1 at flat index k, 0 elsewhere."""
    n = like.numel()
    one = N.const(1, (1,), like.dtype, like.node.device)
    return like._plain(N.reshape(N.pad(one, ((k, n - k - 1),)), like.shape))


def _jacobian(func, argnums, has_aux: bool, api: str, forward: bool):
    """jacrev's (`forward` False: one vector-Jacobian product per output element, the
    Jacobian's rows) or jacfwd's (one Jacobian-vector product per input element, as `jvp`
    computes it: its columns). The values agree but where a NaN spreads: as in torch, a
    NaN derivative fills its column in reverse mode and its row in forward mode."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        nums = _argnums(argnums, len(args), api)
        call = _Call(func, args, kwargs, nums, "jacobian", api)
        output, aux = _split_aux(call.output, has_aux, api, "(output, aux) if has_aux is True")
        outs, out_spec = _output_tensors(output, api, "f(*args)")
        blocks = _columns(outs, call.variables) if forward else _rows(outs, call.variables)
        jacobians = [call.shaped(_finish(per_input)) for per_input in blocks]
        jac = tree_unflatten(jacobians, out_spec)
        if has_aux:
            aux_leaves, aux_spec = _aux_tensors(aux)
            return jac, tree_unflatten(_finish(aux_leaves), aux_spec)
        return jac

    return wrapper


def _rows(outs: list, variables: list) -> list[list]:
    """[output][input] Jacobian blocks of shape output.shape + input.shape, by rows."""
    blocks = []
    for o in outs:
        rows = [_pullback([o], [_one_hot(k, o)], variables) for k in range(o.numel())]
        per_input = []
        for i, v in enumerate(variables):
            per_input.append(_joined([r[i] for r in rows], o, v))
        blocks.append(per_input)
    return blocks


def _columns(outs: list, variables: list) -> list[list]:
    """The same blocks, by columns: J e_j for each input element j, as `jvp` computes it."""
    cotangents = [
        _variable(o._plain(N.const(0, o.shape, o.dtype, o.node.device)), "cotangent", k)
        for k, o in enumerate(outs)
    ]
    vjps = _pullback(outs, cotangents, variables)  # J^T u for each input, linear in u
    columns = [  # [input][j][output]
        [_pullback([g], [_one_hot(j, v)], cotangents) for j in range(v.numel())]
        for g, v in zip(vjps, variables)
    ]
    blocks = []
    for k, o in enumerate(outs):
        per_input = []
        for v, cols in zip(variables, columns):
            block = _joined([c[k] for c in cols], v, o)
            n = o.ndim + v.ndim
            order = tuple(range(v.ndim, n)) + tuple(range(v.ndim))  # input axes last
            per_input.append(block.permute(*order))
        blocks.append(per_input)
    return blocks


def _joined(pieces: list, first, second):
    """`pieces` (tensors of `second`'s size, one per element of `first`) stacked into a
    tensor of shape `first.shape + second.shape`."""
    shape = first.shape + second.shape
    if not pieces or not second.numel():  # (an empty output or input: an empty Jacobian)
        node = N.const(0, shape, second.dtype, second.node.device)
        return second._plain(node, requires_grad=True, leaf=False)
    return stack([p.reshape(second.shape) for p in pieces]).reshape(shape)


def _check_chunk_size(chunk_size, api: str) -> None:
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        fail(TransformError, api, "`chunk_size` should be greater than 0.")


def jacrev(func, argnums=0, *, has_aux: bool = False, chunk_size=None, _preallocate_and_copy=False):
    """torch.func.jacrev: a function returning the Jacobian of `func` with respect to the
    arguments `argnums` names: for each output tensor (in the output's tree), a tensor of
    shape `output.shape + input.shape` (one argument's tree of them for an int argnums, a
    tuple of trees for a tuple); `(jacobian, aux)` with `has_aux`. One vector-Jacobian
    product per output element; `chunk_size` (checked as torch's) changes nothing here.

    >>> import fusegrad as fg
    >>> jacrev(lambda x: x * x)(fg.tensor([1.0, 2.0])).tolist()
    [[2.0, 0.0], [0.0, 4.0]]
    """
    _check_chunk_size(chunk_size, "jacrev")
    return _jacobian(func, argnums, has_aux, "jacrev(f, argnums)(*args)", forward=False)


def check_randomness(randomness, api: str) -> None:
    """vmap's and jacfwd's `randomness` checked as torch checks it."""
    if randomness not in ("error", "different", "same"):
        fail(
            TransformError,
            api,
            "Only allowed values for randomness are 'error', 'different', or 'same'. "
            f"Got {randomness}",
        )


def jacfwd(func, argnums=0, has_aux: bool = False, *, randomness: str = "error"):
    """torch.func.jacfwd: the Jacobian as `jacrev` gives it (same shapes and values), by
    columns: one Jacobian-vector product per input element, each as `jvp` computes it (a
    vector-Jacobian product differentiated in its cotangent: reverse mode twice, where torch
    pushes tangents forward; a NaN derivative fills its row, as in torch, where jacrev's
    fills its column). `randomness` is checked as torch's; a function that draws random
    numbers under "error" raises as in torch (draws with an explicit generator are not
    seen).

    >>> import fusegrad as fg
    >>> jacfwd(lambda x: x.sum(0))(fg.ones(2, 2)).shape
    (2, 2, 2)
    """
    check_randomness(randomness, "jacfwd")
    jac = _jacobian(func, argnums, has_aux, "jacfwd(f, argnums)(*args)", forward=True)
    if randomness != "error":
        return jac

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        draws = _seed["counter"]
        out = jac(*args, **kwargs)
        if _seed["counter"] != draws:
            fail(TransformError, "vmap", RANDOM_IN_ERROR_MODE)  # (torch's words: vmap inside)
        return out

    return wrapper


RANDOM_IN_ERROR_MODE = (
    "called random operation while in randomness error mode. Please either use the "
    "'same' or 'different' randomness flags on vmap or perform the randomness operation "
    "out of vmap"
)


def hessian(func, argnums=0):
    """torch.func.hessian: `jacfwd(jacrev(func, argnums), argnums)`, the matrix of second
    derivatives of a scalar function (shape `input.shape * 2`).

    >>> import fusegrad as fg
    >>> hessian(lambda x: (x ** 3).sum())(fg.tensor([1.0, 2.0])).tolist()
    [[6.0, 0.0], [0.0, 12.0]]
    """
    return jacfwd(jacrev(func, argnums), argnums)
