"""The containers torch.func's transforms flatten (frontend/func_pytree.py)."""

from __future__ import annotations

import collections

import pytest

from fusegrad.func_pytree import broadcast_prefix, tree_flatten, tree_map, tree_unflatten


def test_flatten_and_rebuild_nested_containers():
    Pair = collections.namedtuple("Pair", "a b")
    tree = {"x": (1, [2, 3]), "p": Pair(4, {"z": 5}), "n": None}
    leaves, spec = tree_flatten(tree)
    assert leaves == [1, 2, 3, 4, 5, None]
    assert spec.num_leaves == 6
    rebuilt = tree_unflatten(leaves, spec)
    assert rebuilt == tree and type(rebuilt["p"]) is Pair
    assert tree_map(lambda v: v, (1, [2])) == (1, [2])
    assert repr(tree_flatten((1, [2], {"k": 3}))[1]) == "(*, [*], {'k': *})"
    assert repr(tree_flatten((1,))[1]) == "(*,)"


def test_a_prefix_spreads_over_the_leaves_below_it():
    tree = ({"a": 1, "b": [2, 3]}, 4)
    assert broadcast_prefix(0, tree, None) == [0, 0, 0, 0]
    assert broadcast_prefix((None, 1), tree, None) == [None, None, None, 1]
    assert broadcast_prefix(({"b": 2, "a": 1}, 0), tree, None) == [1, 2, 2, 0]

    def mismatch(p, t):
        raise ValueError(f"{p} vs {t}")

    with pytest.raises(ValueError, match=r"\(\*, \*, \*\) vs"):
        broadcast_prefix((0, 0, 0), tree, mismatch)
    with pytest.raises(ValueError, match="{'c': \\*}"):
        broadcast_prefix(({"c": 0}, 0), tree, mismatch)
