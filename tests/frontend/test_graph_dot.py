"""fg.graph_dot: the graph as Graphviz DOT, with the scheduler's kernels as clusters."""

from __future__ import annotations

import re
import shutil
import subprocess

import fusegrad as fg


def test_one_cluster_per_kernel_with_its_reason():
    x = fg.randn(8, 5).realize()
    y = x.softmax(1)
    dot = fg.graph_dot(y)
    clusters = re.findall(r'label="kernel (\d+): ([^"]*)"', dot)
    kernels = fg.kernels(y)  # the same schedule, now run
    assert len(clusters) == len(kernels) == 3
    assert [reason for _, reason in clusters] == [k.reason for k in kernels]
    assert dot.count("{") == dot.count("}")
    assert "shape=box" in dot  # the realized input
    for op in ("REDUCE_MAX", "EXP", "SUM", "DIV"):
        assert op in dot


def test_backward_graphs_render_too():
    w = fg.randn(4, 3, requires_grad=True)
    x = fg.randn(2, 4).realize()
    (g,) = fg.grad(((x @ w).tanh() ** 2).sum(), w)
    dot = fg.graph_dot(g)
    assert dot.startswith("digraph fusegrad {") and dot.rstrip().endswith("}")
    edges = re.findall(r"(n\d+) -> (n\d+);", dot)
    declared = set(re.findall(r"^\s*(n\d+) \[", dot, flags=re.M))
    assert edges and {a for a, _ in edges} | {b for _, b in edges} <= declared
    if shutil.which("dot"):  # Graphviz, where installed, must accept it
        subprocess.run(["dot", "-Tsvg"], input=dot, text=True, check=True, capture_output=True)


def test_a_realized_tensor_is_a_single_box():
    t = fg.ones(3).realize()
    dot = fg.graph_dot(t)
    assert "cluster_" not in dot and "shape=box" in dot
