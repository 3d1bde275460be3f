"""The nested containers torch.func's transforms take and return (torch's "pytrees"):
tuples (named ones too), lists and dicts of leaves, flattened to a list of leaves and a
`TreeSpec` that rebuilds them, and a prefix tree (vmap's `in_dims`, `out_dims`) spread
over the leaves below each of its own leaves.

>>> leaves, spec = tree_flatten({"a": 1, "b": (2, [3])})
>>> leaves, spec
([1, 2, 3], {'a': *, 'b': (*, [*])})
>>> tree_unflatten([x * 10 for x in leaves], spec)
{'a': 10, 'b': (20, [30])}
>>> broadcast_prefix((0, None), (1, {"k": 2, "j": 3}), mismatch=print)
[0, None, None]
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import FusegradError


@dataclass(frozen=True)
class TreeSpec:
    """The shape of a container tree: `kind` is "leaf", "tuple", "list" or "dict";
    `context` the dict's keys or the named tuple's class; `children` one spec per item."""

    kind: str
    context: object = None
    children: tuple = ()

    @property
    def num_leaves(self) -> int:
        if self.kind == "leaf":
            return 1
        return sum(c.num_leaves for c in self.children)

    def __repr__(self) -> str:  # torch's treespec_pprint: (*, *), [*], {'a': *}
        if self.kind == "leaf":
            return "*"
        items = [repr(c) for c in self.children]
        if self.kind == "dict":
            return "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(self.context, items)) + "}"
        if self.kind == "list":
            return "[" + ", ".join(items) + "]"
        name = "" if self.context is None else self.context.__name__
        return f"{name}({', '.join(items)}{',' if len(items) == 1 and not name else ''})"


LEAF = TreeSpec("leaf")


def _children(tree):
    """(kind, context, items) of a container, or None for a leaf."""
    if isinstance(tree, tuple):
        named = type(tree) if hasattr(tree, "_fields") else None
        return "tuple", named, list(tree)
    if isinstance(tree, list):
        return "list", None, list(tree)
    if isinstance(tree, dict):
        keys = tuple(tree)
        return "dict", keys, [tree[k] for k in keys]
    return None


def tree_flatten(tree) -> tuple[list, TreeSpec]:
    """The leaves of `tree` in order (a dict's in its key order), and its spec."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves: list) -> TreeSpec:
    node = _children(tree)
    if node is None:
        leaves.append(tree)
        return LEAF
    kind, context, items = node
    return TreeSpec(kind, context, tuple(_flatten(x, leaves) for x in items))


def tree_unflatten(leaves, spec: TreeSpec):
    """The tree of `spec` with `leaves` in its places."""
    it = iter(leaves)
    return _build(spec, it)


def _build(spec: TreeSpec, it):
    if spec.kind == "leaf":
        return next(it)
    items = [_build(c, it) for c in spec.children]
    if spec.kind == "dict":
        return dict(zip(spec.context, items))
    if spec.kind == "list":
        return items
    return tuple(items) if spec.context is None else spec.context(*items)


def tree_map(fn, tree):
    """`tree` with each leaf x replaced by fn(x)."""
    leaves, spec = tree_flatten(tree)
    return tree_unflatten([fn(x) for x in leaves], spec)


def broadcast_prefix(prefix, tree, mismatch) -> list:
    """One entry of `prefix` per leaf of `tree`: a leaf of `prefix` (anything but a tuple,
    list or dict) stands for every leaf of the subtree at its place, as torch's vmap reads
    in_dims and out_dims. Where the two trees differ above a leaf of `prefix`, calls
    `mismatch(prefix_spec, tree_spec)`, which raises."""
    out: list = []
    if not _spread(prefix, tree, out):
        mismatch(tree_flatten(prefix)[1], tree_flatten(tree)[1])
    return out


def _spread(prefix, tree, out: list) -> bool:
    p = _children(prefix)
    if p is None:
        out.extend([prefix] * tree_flatten(tree)[1].num_leaves)
        return True
    t = _children(tree)
    if t is None or p[0] != t[0] or len(p[2]) != len(t[2]):
        return False
    if p[0] == "dict" and set(p[1]) != set(t[1]):
        return False
    if p[0] == "dict":  # (the tree's key order: its leaves' order)
        pitems = [prefix[k] for k in t[1]]
    else:
        pitems = p[2]
    return all(_spread(a, b, out) for a, b in zip(pitems, t[2]))


class TransformError(FusegradError, ValueError, RuntimeError):
    """Bad arguments to a torch.func transform: torch raises ValueError for some
    (vmap's in_dims, batch sizes) and RuntimeError for others; both catch it."""
