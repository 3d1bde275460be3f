"""torch.func.vmap (also `fg.vmap`): a function mapped over a batch dimension of its
inputs, by a loop.

torch runs the function once on batched tensors, through a batching rule per op. Here the
function is called once per example, on the inputs sliced at that index, and the outputs
are stacked: the same values, for any function, with no rules to write. The loop only
builds graphs (fusegrad is lazy): the per-example graphs are computed together when the
result is realized, fused into a few kernels. The common use, per-example gradients, is
`vmap(grad(loss), in_dims=(None, 0, 0))(params, xs, ys)`.

>>> import fusegrad as fg
>>> vmap(lambda row: row.sum())(fg.tensor([[1.0, 2.0], [3.0, 4.0]])).tolist()
[3.0, 7.0]
"""

from __future__ import annotations

import functools

from .creation_nodes import _seed
from .errors import DimError, fail
from .func_pytree import TransformError, broadcast_prefix, tree_flatten, tree_unflatten
from .func_transforms import RANDOM_IN_ERROR_MODE, check_randomness
from .ir import node as N
from .movement import stack
from .tensor_base import TensorBase


def vmap(func, in_dims=0, out_dims=0, randomness: str = "error", *, chunk_size=None):
    """torch.func.vmap: `func` mapped over dimension `in_dims` of its inputs, its outputs
    stacked along `out_dims`.

    - `in_dims`: an int (every input's dimension) or a tuple with one entry per positional
      argument, each an int, None (not mapped: passed whole to every call) or a nested
      tuple / list / dict matching that argument's tree (torch's pytree prefix rules).
      Keyword arguments are never mapped. Every mapped tensor must have the same size
      there (else ValueError naming the sizes).
    - `out_dims`: an int or a tree matching the outputs; None returns that output as the
      first example gives it, and refuses one that reads the mapped inputs, as torch does
      (one the function computed on the host, through `.item()`, is not seen).
    - `randomness`: "error" raises torch's RuntimeError when `func` draws from fusegrad's
      generator (`fg.rand`, dropout, ...; a draw from an explicit `fg.Generator` is not
      seen); "different" gives each example its own draws; "same" gives every example
      the draws of the first.
    - `chunk_size`: checked as torch's; the loop is the same either way.

    It loops where torch batches (see the module docstring): a Python call per example,
    so large batches cost graph-building time, not kernel time. Transforms compose:
    `vmap(grad(f))`, `vmap(vmap(f))`, `vmap(jacrev(f))`, and `fg.func.functional_call`
    over `stack_module_state`'s stacked parameters (model ensembling).

    >>> import fusegrad as fg
    >>> from fusegrad.func import grad
    >>> w = fg.tensor([1.0, -1.0])
    >>> xs = fg.tensor([[1.0, 2.0], [3.0, 5.0]])
    >>> per_example = vmap(grad(lambda w, x: (w * x).sum() ** 2), in_dims=(None, 0))(w, xs)
    >>> per_example.tolist()
    [[-2.0, -4.0], [-12.0, -20.0]]
    """
    check_randomness(randomness, "vmap")
    if chunk_size is not None and not (isinstance(chunk_size, int) and chunk_size > 0):
        fail(
            TransformError,
            "vmap",
            f"chunk_size should be None or greater than 0. (got {chunk_size})",
        )
    name = getattr(func, "__name__", repr(func))

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        api = f"vmap({name}, in_dims={in_dims}, ...)(<inputs>)"
        if not args:
            fail(
                TransformError,
                f"vmap({name})(<inputs>)",
                "got no inputs. Maybe you forgot to add inputs, or you are trying to vmap "
                "over a function with no inputs. The latter is unsupported.",
            )
        leaves, spec, dims, size = _mapped_inputs(args, in_dims, api)
        if size == 0:
            return _empty_batch(func, leaves, spec, dims, kwargs, out_dims, name)
        start = _seed["counter"]
        results = []
        for b in range(size):
            if randomness == "same":
                _seed["counter"] = start  # each example draws what the first drew
            example = [x if d is None else x.select(d, b) for x, d in zip(leaves, dims)]
            if b == 0:  # (the first example's own inputs: what an unmapped output must not read)
                mapped = [e.node for e, d in zip(example, dims) if d is not None]
            results.append(func(*tree_unflatten(example, spec), **kwargs))
            if randomness == "error" and _seed["counter"] != start:
                fail(TransformError, "vmap", RANDOM_IN_ERROR_MODE)
        return _stacked(results, out_dims, name, mapped)

    return wrapper


def _mapped_inputs(args: tuple, in_dims, api: str):
    """The inputs' leaves, tree, mapped dimension per leaf (None: not mapped), batch size."""
    if not isinstance(in_dims, (int, tuple)) or isinstance(in_dims, bool):
        fail(
            TransformError,
            api,
            "expected `in_dims` to be int or a (potentially nested) tuple matching the "
            f"structure of inputs, got: {type(in_dims)}.",
        )
    leaves, spec = tree_flatten(args)

    def mismatch(p_spec, t_spec):
        fail(
            TransformError,
            api,
            "in_dims is not compatible with the structure of `inputs`. in_dims has structure "
            f"{p_spec} but inputs has structure {t_spec}.",
        )

    prefix = in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args)
    dims = broadcast_prefix(prefix, args, mismatch)
    sizes = []
    out_dims = []
    for x, d in zip(leaves, dims):
        if d is None:
            out_dims.append(None)
            continue
        if not isinstance(d, int) or isinstance(d, bool):
            fail(
                TransformError,
                api,
                f"Got in_dim={d} for an input but in_dim must be either an integer "
                "dimension or None.",
            )
        if not isinstance(x, TensorBase):
            fail(
                TransformError,
                api,
                f"Got in_dim={d} for an input but the input is of type {type(x)}. We cannot "
                "vmap over non-Tensor arguments, please use None as the respective in_dim",
            )
        if not -x.ndim <= d < x.ndim:
            fail(
                TransformError,
                api,
                f"Got in_dim={d} for some input, but that input is a Tensor of dimensionality "
                f"{x.ndim} so expected in_dim to satisfy -{x.ndim} <= in_dim < {x.ndim}.",
            )
        d %= x.ndim
        out_dims.append(d)
        sizes.append(x.shape[d])
    if not sizes:
        fail(TransformError, "vmap", "Expected at least one Tensor to vmap over")
    if any(s != sizes[0] for s in sizes):
        fail(
            TransformError,
            "vmap",
            "Expected all tensors to have the same size in the mapped dimension, got sizes "
            f"{sizes} for the mapped dimension",
        )
    return leaves, spec, out_dims, sizes[0]


def _stacked(results: list, out_dims, name: str, mapped: list | None = None):
    """The examples' outputs stacked along `out_dims` (a tree prefix of the outputs). An
    output of out_dim None is the first example's, and must not depend on the mapped
    inputs (`mapped`: their nodes), as torch refuses a batched one there."""
    flat = [tree_flatten(r) for r in results]
    leaves0, spec = flat[0]
    for _, s in flat[1:]:
        if s != spec:
            fail(
                TransformError,
                f"vmap({name}, ...)",
                f"the outputs of `{name}` differ in structure between examples: {spec} and {s}",
            )

    def mismatch(p_spec, t_spec):
        fail(
            TransformError,
            f"vmap({name}, ..., out_dims={out_dims})(<inputs>)",
            "out_dims is not compatible with the structure of `outputs`. out_dims has "
            f"structure {p_spec} but outputs has structure {t_spec}.",
        )

    if isinstance(out_dims, (tuple, list, dict)):
        dims = broadcast_prefix(out_dims, results[0], mismatch)
    else:
        dims = [out_dims] * len(leaves0)
    out = []
    for i, d in enumerate(dims):
        if d is None:
            if mapped and isinstance(leaves0[i], TensorBase) and _reads(leaves0[i], mapped):
                fail(
                    TransformError,
                    f"vmap({name}, ...)",
                    f"`{name}` can not return a BatchedTensor when out_dim is None",
                )
            out.append(leaves0[i])
            continue
        column = [f[0][i] for f in flat]
        if not isinstance(column[0], TensorBase):
            fail(
                TransformError,
                f"vmap({name}, ...)",
                f"`{name}` must only return Tensors, got type {type(column[0])}. Did you mean "
                "to set out_dims= to None for output?",
            )
        ndim = column[0].ndim + 1
        if not -ndim <= d < ndim:
            fail(
                DimError,
                "vmap",
                "Dimension out of range (expected to be in range of "
                f"[{-ndim}, {ndim - 1}], but got {d})",
            )
        out.append(stack(column, d))
    return tree_unflatten(out, spec)


def _reads(t, nodes: list) -> bool:
    """Whether t's graph reads any of `nodes` (a mapped input: t varies with the example)."""
    wanted = {id(n) for n in nodes}
    return any(id(n) in wanted for n in N.toposort([t.node]))


def _empty_batch(func, leaves, spec, dims, kwargs, out_dims, name: str):
    """A batch of size 0: `func` called once on zeros of an example's shapes (its random
    draws undone), for the outputs' shapes and structure; each output empty along its
    out_dim."""
    start = _seed["counter"]
    example = []
    for x, d in zip(leaves, dims):
        if d is not None:
            shape = x.shape[:d] + x.shape[d + 1 :]
            x = x._plain(N.const(0, shape, x.dtype, x.node.device))
        example.append(x)
    result = func(*tree_unflatten(example, spec), **kwargs)
    _seed["counter"] = start
    stacked = _stacked([result], out_dims, name)  # (checks out_dims as for a batch)
    leaves_out, out_spec = tree_flatten(stacked)
    dims_out = tree_flatten(_stacked_dims(result, out_dims))[0]
    empty = []
    for t, d in zip(leaves_out, dims_out):
        if d is not None and isinstance(t, TensorBase):
            d %= t.ndim
            shape = t.shape[:d] + (0,) + t.shape[d + 1 :]
            t = t._plain(N.const(0, shape, t.dtype, t.node.device))
        empty.append(t)
    return tree_unflatten(empty, out_spec)


def _stacked_dims(result, out_dims):
    """The out_dim of each output leaf, in the outputs' tree."""
    leaves, spec = tree_flatten(result)
    if isinstance(out_dims, (tuple, list, dict)):
        dims = broadcast_prefix(out_dims, result, lambda p, t: None)
    else:
        dims = [out_dims] * len(leaves)
    return tree_unflatten(dims, spec)
