"""The loop-merge search of `pipeline/lower.py` lowers each grouping it tries once: the
grouping it ends on is the kernel it returns, not lowered a second time."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import lower as lower_module
from fusegrad.pipeline.llvm import render_llvm
from fusegrad.pipeline.loop_nest import Lowerer
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.engine import engine


@pytest.mark.parametrize(
    "make",
    [
        lambda x: x.reshape(4, 6, 5) * 2.0 + 1.0,  # output axes merged
        lambda x: x.reshape(4, 6, 5).sum((1, 2)),  # reduction axes merged
        lambda x: x.reshape(4, 6, 5).permute(2, 0, 1).exp(),  # axes that do not merge
    ],
)
def test_each_grouping_is_lowered_once(make, monkeypatch):
    x = fg.tensor(np.linspace(-1, 1, 120, dtype=np.float32))
    (item,) = schedule([make(x).node], engine.has_value_predicate())
    tried = []
    real = Lowerer.lower

    def lower_and_note(self):
        kernel = real(self)
        tried.append(((tuple(self.out_groups), tuple(self.red_groups), self.tile), kernel))
        return kernel

    monkeypatch.setattr(Lowerer, "lower", lower_and_note)
    kernel = lower_module.lower(item)
    groupings = [g for g, _ in tried]
    assert len(groupings) == len(set(groupings)), groupings
    monkeypatch.undo()
    # the kernel returned is one the search lowered, the same as its grouping lowered afresh
    ((out_groups, red_groups, tile),) = [g for g, k in tried if k is kernel]
    again = Lowerer(item, list(out_groups), list(red_groups), tile).lower()
    assert render_llvm(kernel, "k") == render_llvm(again, "k")
