"""The pipeline's driver (pipeline/driver.py): `compile_plan` turns a graph into a plan
whose steps, slots and records say what each kernel computes, and the plan computes
numpy's answer when the engine runs it."""

from __future__ import annotations

import numpy as np

import fusegrad as fg
import fusegrad.pipeline as pipeline
from fusegrad.ir.ops import Ops
from fusegrad.pipeline.driver import NO_LINE, compile_plan, kernel_names, lowering_steps
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.buffer import Buffer
from fusegrad.runtime.engine import engine


def _only_buffers(n) -> bool:
    return n.op is Ops.BUFFER


def test_the_package_reexports_compile_plan():
    assert pipeline.compile_plan is compile_plan
    assert "compile_plan" in pipeline.__all__


def test_a_plan_computes_numpys_answer_kernel_by_kernel():
    a = np.linspace(-1.0, 1.0, 24, dtype=np.float32).reshape(4, 6)
    x = fg.tensor(a)
    y = (x.exp() * 2).sum(1)
    z = x.exp() - y.reshape(4, 1)  # reads y, a kernel of its own
    plan = compile_plan([z.node, y.node], [x.node], _only_buffers)
    assert plan.nleaves == 1 and len(plan.outputs) == 2
    assert len(plan.steps) >= 2
    # what a run through the native program reports: each step's record, nothing compiled
    assert [r.name for r in plan.records] == [s.record.name for s in plan.steps]
    assert all(r.cache == "memory" and r.compile_seconds == 0.0 for r in plan.records)
    assert isinstance(x.node.arg, Buffer)
    outs, _ = engine.execute(plan, [x.node.arg])
    want_y = (np.exp(a) * 2).sum(1)
    np.testing.assert_allclose(outs[1].numpy().reshape(4), want_y, rtol=1e-5)
    np.testing.assert_allclose(
        outs[0].numpy().reshape(4, 6), np.exp(a) - want_y[:, None], rtol=1e-5
    )


def test_records_name_kernels_as_kernel_names_does_and_say_their_places():
    x = fg.tensor(np.ones((3, 5), np.float32))
    y = x.exp().sum()
    items = schedule([y.node], _only_buffers)
    plan = compile_plan([y.node], [x.node], _only_buffers)
    assert [s.record.name for s in plan.steps] == kernel_names(items)
    for step in plan.steps:
        assert step.record.cache == "memory" or step.record.compile_seconds >= 0
        assert sum(count for _, _, count in step.record.places) >= 1
        assert all(line != "" for line, _, _ in step.record.places)
    assert NO_LINE.startswith("(")


def test_lowering_steps_end_in_the_kernel_the_plan_compiles():
    x = fg.tensor(np.ones(64, np.float32))
    (item,) = schedule([x.exp().node], _only_buffers)
    steps = lowering_steps(item)
    assert steps and all(isinstance(name, str) and text for name, text in steps)
    (symbol,) = kernel_names([item])  # the kernel's name and a hash of its source
    last = steps[-1][1].split("(")[0].removeprefix("kernel ")
    assert symbol.startswith(last + "_") and last.startswith("e_exp_64")
