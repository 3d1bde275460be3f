"""fg.graph_dot: the graph as Graphviz DOT, with the scheduler's kernels as clusters."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import fusegrad as fg
import fusegrad.nn as nn
import fusegrad.nn.functional as F

HERE = os.path.basename(__file__)


def render(dot: str) -> None:
    """Graphviz, where installed, must accept it."""
    if shutil.which("dot"):
        subprocess.run(["dot", "-Tsvg"], input=dot, text=True, check=True, capture_output=True)


def test_one_cluster_per_kernel_named_as_it_runs_with_its_reason():
    x = fg.randn(8, 5).realize()
    y = x.softmax(0)  # column statistics: three kernels
    dot = fg.graph_dot(y)
    clusters = re.findall(r'subgraph cluster_\d+ \{\n    label="([^"\\]*)\\n([^"]*)"', dot)
    kernels = fg.kernels(y)  # the same schedule, now run
    assert len(clusters) == len(kernels) == 3
    assert clusters == [(k.name, k.reason) for k in kernels]
    assert dot.count("{") == dot.count("}")
    assert "shape=box" in dot  # the realized input
    for op in ("REDUCE_MAX", "EXP", "SUM", "DIV"):
        assert op in dot


def test_backward_graphs_render_too():
    w = fg.randn(4, 3, requires_grad=True)
    x = fg.randn(2, 4).realize()
    (g,) = fg.grad(((x @ w).tanh() ** 2).sum(), w)
    dot = fg.graph_dot(g, collapse=False)
    assert dot.startswith("digraph fusegrad {") and dot.rstrip().endswith("}")
    edges = re.findall(r"(n\d+) -> (n\d+);", dot)
    declared = set(re.findall(r"^\s*(n\d+) \[", dot, flags=re.M))
    assert edges and {a for a, _ in edges} | {b for _, b in edges} <= declared
    render(dot)


def test_a_realized_tensor_is_a_single_box():
    t = fg.ones(3).realize()
    dot = fg.graph_dot(t)
    assert "cluster_" not in dot and "shape=box" in dot


def line_of(marker: str) -> int:
    with open(__file__) as f:
        (n,) = [i + 1 for i, line in enumerate(f) if line.rstrip().endswith(marker)]
    return n


def test_parameters_are_named_and_ops_carry_their_user_line():
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU())
    x = fg.randn(5, 4).realize()
    out = model(x).sum()  # MODEL
    dot = fg.graph_dot(out, params=model, collapse=False)
    assert '[label="0.weight\\n3x4 float32", shape=box]' in dot
    assert '[label="0.bias\\n3 float32", shape=box]' in dot
    assert '[label="input\\n5x4 float32", shape=box]' in dot  # x has no name
    line = f"{HERE}:{line_of('# MODEL')}"
    for op in ("linear", "relu", "sum"):
        assert f"\\n{op} @ {line}" in dot, op
    render(dot)


def test_a_large_graph_is_drawn_one_box_per_kernel():
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt_x = fg.randn(4, 6).realize()
    loss = F.cross_entropy(model(opt_x), fg.tensor([0, 1, 2, 1]))  # LOSS
    grads = fg.grad(loss, list(model.parameters()))
    full = fg.graph_dot(*grads, params=model, collapse=False)
    dot = fg.graph_dot(*grads, params=model)  # large: collapsed on its own
    assert full.count("\n    n") > fg.debug.COLLAPSE_OVER and "cluster_" in full
    assert "cluster_" not in dot
    kernels = fg.kernels(*grads)
    boxes = re.findall(r'^  k(\d+) \[label="([^"\\]*)\\n', dot, flags=re.M)
    assert [name for _, name in boxes] == [k.name for k in kernels]
    edges = re.findall(r"^  (k\d+|n\d+) -> (k\d+);", dot, flags=re.M)
    assert any(a.startswith("k") for a, _ in edges)  # kernel -> kernel
    assert {"0.weight", "0.bias", "2.weight", "2.bias"} <= set(
        re.findall(r'label="([\w.]+)\\n', dot)
    )
    assert f"cross_entropy backward @ {HERE}:{line_of('# LOSS')}" in dot
    assert len(dot) < len(full) / 2
    render(dot)
    render(full)
