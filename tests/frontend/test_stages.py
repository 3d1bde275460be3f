"""fg.debug.stages: the IR after each compiler stage, for tensors and for a step function.

Oracles: the graph walks themselves (`toposort`, `expand_all`), the kernels fusegrad runs
for the same graph (`fg.kernels`, with and without rules), numpy for what a step computed,
and a second process for the files' stability."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.ir.macro import expand_all
from fusegrad.ir.node import toposort
from fusegrad.pipeline import lower as lowering
from fusegrad.pipeline.schedule import RULES
from fusegrad.runtime.engine import engine
from fusegrad.stages import APPLIED_ORDER

NODE = re.compile(r"^%\d+ = ", re.M)
KERNEL = re.compile(r"^kernel %\d+", re.M)


def kernel_count(text: str) -> int:
    return len(KERNEL.findall(text))


def test_the_rules_are_turned_on_in_the_order_the_scheduler_applies_them():
    assert sorted(APPLIED_ORDER) == sorted(RULES)
    assert len(APPLIED_ORDER) == len(set(APPLIED_ORDER))


def test_graph_stages_list_every_node_with_and_without_macros():
    x = fg.randn(8, 4).realize()
    y = x.softmax(1)
    st = fg.debug.stages(y)
    names = st.names()
    rules = [f"rule_{r}" for r in APPLIED_ORDER]
    assert names[:12] == ["graph", "autodiff", "expanded", "rules_none", *rules, "schedule"]
    assert all(n.startswith("k00.") for n in names[12:])
    has_value = engine.has_value_predicate()
    assert len(NODE.findall(st["graph"])) == len(toposort([y.node], stop=has_value))
    expanded = toposort(expand_all([y.node], has_value), stop=has_value)
    assert len(NODE.findall(st["expanded"])) == len(expanded)
    assert "MACRO softmax" in st["graph"] and "MACRO" not in st["expanded"]
    for op in ("REDUCE_MAX", "EXP", "SUM", "DIV"):
        assert f"= {op}" in st["expanded"]
    assert "none here" in st["autodiff"]  # no backward: the same graph
    assert st["graph"].splitlines()[3:] == st["autodiff"].splitlines()[3:]


def test_a_node_rebuilt_by_expansion_keeps_its_number():
    x = fg.randn(8, 4).realize()
    st = fg.debug.stages(x.softmax(1) * 2)
    graph, expanded = st["graph"], st["expanded"]
    (macro,) = re.findall(r"^(%\d+) = MACRO softmax", graph, re.M)
    (mul,) = re.findall(r"^(%\d+) = MUL\(", graph, re.M)
    # the MUL is built again on the softmax's expansion, whose root is the macro's number
    assert re.search(rf"^{mul} = MUL\({macro}, %\d+\)", expanded, re.M)
    assert re.search(rf"^{macro} = DIV\(", expanded, re.M)


def test_each_rule_stage_schedules_as_the_engine_does_with_those_rules():
    x = fg.randn(8, 4).realize()
    st = fg.debug.stages(x.softmax(1))
    assert kernel_count(st["schedule"]) == len(fg.kernels(x.softmax(1))) == len(st.kernels)
    with fg.debug.disable_rule(*RULES):
        assert kernel_count(st["rules_none"]) == len(fg.kernels(x.softmax(1)))
    # a softmax's max and sum are stored by kernels of their own until row fusion
    before, after = st["rule_store_for_reuse"], st["rule_row_fusion"]
    assert kernel_count(before) == 3 and kernel_count(after) == 1
    assert "changes (3 -> 1 kernels)" in after
    assert len(re.findall(r"no longer stored: computed inside kernel %\d+", after)) == 2
    assert "no change" in st["rule_extra_outputs"]
    with fg.debug.disable_rule("row_fusion"):
        off = fg.debug.stages(x.softmax(1))
    assert "(turned off" in off["rule_row_fusion"]
    assert kernel_count(off["schedule"]) == 3


@pytest.mark.cpu_device  # (the CPU's lowering: its register tile)
def test_kernels_come_with_each_lowering_step_and_their_code():
    a, b = fg.randn(64, 64).realize(), fg.randn(64, 64).realize()
    st = fg.debug.stages(a @ b)  # a contraction: the CPU's register tile
    (kernel,) = st.kernels
    titles = [s.title for s in st.stages if s.kind == "code"]
    assert any("loops merged" in t for t in titles)
    assert any("register tile" in t for t in titles)
    loops = [s for s in st.stages if s.language == "loop"]
    (record,) = fg.kernels(a @ b)
    assert record.name == kernel.name
    # the last loop stage is what was compiled (up to the name's hash)
    assert loops[-1].text.split("(", 1)[1] == record.loop_ir.split("(", 1)[1]
    assert st["k00.ll_raw"] == record.llvm_ir and st["k00.ll"] == record.llvm_ir_optimized
    assert st["k00.s"] == record.asm
    assert lowering._step_log.steps is None  # recording is off again


def test_a_step_function_shows_its_gradients_even_from_a_cached_step():
    fg.manual_seed(0)
    model = nn.Linear(4, 3)
    opt = fg.optim.SGD(model.parameters(), lr=0.5)
    calls = []

    def train_step(x):
        calls.append(1)
        loss = (model(x) ** 2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step = fg.jit(train_step)
    x = fg.randn(5, 4).realize()
    for _ in range(2):  # the optimizer's step cache now hits for this structure
        step(x)
    w0, b0, xs = model.weight.numpy(), model.bias.numpy(), x.numpy()
    st = fg.debug.stages(step, x)
    assert len(calls) == 3  # the function's Python ran once, not a replay
    # the step ran: numpy's SGD step from the same weights
    h = xs @ w0.T + b0
    np.testing.assert_allclose(model.weight.numpy(), w0 - 0.5 * (2 * h).T @ xs, rtol=1e-5)
    np.testing.assert_allclose(model.bias.numpy(), b0 - 0.5 * (2 * h).sum(0), rtol=1e-5)
    graph, autodiff = st["graph"], st["autodiff"]
    placeholders = re.findall(r"^(%\d+) = gradient ", graph, re.M)
    assert placeholders  # the weight's and the bias's gradients
    for key in placeholders:  # each is a real op once autodiff has run
        (line,) = re.findall(rf"^{key} = .*$", autodiff, re.M)
        assert "= gradient" not in line and "(backward)" in line
    assert len(NODE.findall(autodiff)) > len(NODE.findall(graph))
    assert "built when backward()" in autodiff
    roles = {
        r
        for k in st.kernels
        for r in re.findall(r"\((forward|backward|optimizer)\)", str(k.sources))
    }
    assert roles == {"forward", "backward", "optimizer"}


def test_kernels_name_the_users_source_lines():
    x = fg.randn(16).realize()
    y = (x * 3).exp()  # the line the kernel shows
    st = fg.debug.stages(y)
    (kernel,) = st.kernels
    texts = [text for _, _, text in kernel.sources]
    assert any("# the line the kernel shows" in t for t in texts)


def test_the_same_graph_gives_the_same_text():
    def build():
        return fg.debug.stages((fg.randn(6, 5).realize() * 2).log_softmax(1))

    first, second = build(), build()  # other data, other nodes, one line
    assert list(first) == list(second)


def test_write_gives_one_file_per_stage_and_an_index(tmp_path):
    x = fg.randn(8, 4).realize()
    st = fg.debug.stages(x.softmax(1), dump_dir=str(tmp_path))
    files = sorted(f for f in os.listdir(tmp_path) if f.endswith(".txt"))
    assert len(files) == len(st)
    assert files[0] == "000_graph.txt" and files[3] == "003_rules_none.txt"
    index = json.loads((tmp_path / "stages.json").read_text())
    assert [s["name"] for s in index["stages"]] == st.names()
    for s, (_, text) in zip(index["stages"], st):
        assert (tmp_path / s["file"]).read_text().rstrip("\n") == text.rstrip("\n")
    (tmp_path / "999_stale.txt").write_text("left by an earlier write")
    fg.debug.stages((x * 2).exp(), dump_dir=str(tmp_path))
    assert not (tmp_path / "999_stale.txt").exists()


def test_bad_arguments_say_what_stages_takes():
    with pytest.raises(TypeError, match="takes tensors"):
        fg.debug.stages()
    with pytest.raises(TypeError, match="got float"):
        fg.debug.stages(fg.ones(2) * 2, 1.5)
    with pytest.raises(ValueError, match="data in memory"):
        fg.debug.stages(fg.randn(3).realize())
    with pytest.raises(ValueError, match="computed nothing"):
        fg.debug.stages(lambda: fg.ones(2) * 2)
    assert engine.plan_observer is None


@pytest.mark.slow
def test_two_processes_write_identical_files(tmp_path):
    script = (
        "import sys, fusegrad as fg\n"
        "fg.manual_seed(1)\n"
        "x = fg.randn(16, 8).realize()\n"
        "w = fg.randn(8, 4).realize()\n"
        "fg.debug.stages(((x @ w).relu() + 1).log_softmax(1), dump_dir=sys.argv[1])\n"
    )
    for run in ("a", "b"):
        subprocess.run([sys.executable, "-c", script, str(tmp_path / run)], check=True)
    a, b = sorted(os.listdir(tmp_path / "a")), sorted(os.listdir(tmp_path / "b"))
    assert a == b and len(a) > 12
    for name in a:
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name
