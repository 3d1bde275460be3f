"""fg.debug's steering: cut and fuse requests, no_fusion blocks, rules disabled by name.

Each request changes the schedule as asked (kernel counts), never the values (numpy is the
oracle), and says in the kernels' reasons what became of it, at the line it was made."""

from __future__ import annotations

import os
import re

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.runtime.config import ConfigError, rule_names
from fusegrad.runtime.engine import engine

HERE = os.path.basename(__file__)


def line_of(marker: str) -> int:
    """The line of this file holding `marker` (a comment on the request's line)."""
    with open(__file__) as f:
        for k, text in enumerate(f, 1):
            if marker in text and "line_of" not in text:
                return k
    raise AssertionError(marker)


def test_cut_stores_the_value_in_a_kernel_of_its_own():
    x = fg.randn(16, 8).realize()
    xs = x.numpy()
    fused = fg.kernels(((x * 3).exp() * 2).sum(1))
    assert len(fused) == 1
    h = (x * 3).exp()
    assert fg.debug.cut(h) is h  # marks the value and hands the tensor back
    y = (h * 2).sum(1)  # the same structure as `fused`: a new plan all the same
    ks = fg.kernels(y)
    assert len(ks) == 2
    assert ks[0].reason.startswith(f"cut requested at {HERE}:")
    assert ks[0].ops[-1] == "EXP" and "SUM" in ks[1].ops and "EXP" not in ks[1].ops
    np.testing.assert_allclose(y.numpy(), (np.exp(xs * 3) * 2).sum(1), rtol=1e-5)


def test_cut_line_marker():
    x = fg.randn(5).realize()
    h = x.sin()
    fg.debug.cut(h)  # cut-here
    (k, _) = fg.kernels(h + 1)
    assert k.reason == f"cut requested at {HERE}:{line_of('# cut-here')}"


def test_a_cut_view_stores_the_value_under_it():
    x = fg.randn(4, 6).realize()
    h = x.exp()
    fg.debug.cut(h.T)
    y = h.T.sum(1)
    ks = fg.kernels(y)
    assert len(ks) == 2 and ks[0].shape == (4, 6)
    np.testing.assert_allclose(y.numpy(), np.exp(x.numpy()).sum(0), rtol=1e-5)


def test_a_value_in_memory_has_nothing_to_cut():
    x = fg.randn(3).realize()
    with pytest.warns(UserWarning, match=r"in memory already, nothing to cut"):
        fg.debug.cut(x)
    assert len(fg.kernels(x * 2)) == 1


def test_a_cut_keeps_its_kernel_from_sibling_reductions():
    g, a = fg.randn(64, 32).realize(), fg.randn(64, 32).realize()
    merged = fg.kernels((g * a).sum(0, keepdim=True), g.sum(0, keepdim=True))
    assert len(merged) == 1 and "sibling reduction" in merged[0].reason
    s1, s2 = (g * a + 1).sum(0, keepdim=True), (g + 1).sum(0, keepdim=True)
    fg.debug.cut(s2)  # an output: stored anyway, and now by a kernel of its own
    ks = fg.kernels(s1, s2)
    assert len(ks) == 2
    assert ks[1].reason.startswith("output requested; cut requested at ")
    gs, as_ = g.numpy(), a.numpy()
    np.testing.assert_allclose(
        s1.numpy(), (gs * as_ + 1).sum(0, keepdims=True), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(s2.numpy(), (gs + 1).sum(0, keepdims=True), rtol=1e-4, atol=1e-4)


def test_fuse_recomputes_a_value_rule_4_would_store():
    x, w = fg.randn(32, 24).realize(), fg.randn(24, 16).realize()
    e = (x * 0.5).exp()
    before = fg.kernels(((x * 0.5).exp() @ w) * 1)
    assert len(before) == 2 and "evaluated 16 times per element" in before[0].reason
    fg.debug.fuse(e)  # fuse-here
    y = (e @ w) * 1
    ks = fg.kernels(y)
    assert len(ks) == 1
    where = f"{HERE}:{line_of('# fuse-here')}"
    assert f"merge requested at {where}: value computed in here" in ks[0].reason
    want = np.exp(x.numpy() * 0.5) @ w.numpy()
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_a_refused_merge_says_why():
    x = fg.randn(6, 5).realize()
    m = x.sum(0, keepdim=True)  # broadcast back over the rows: stored
    fg.debug.fuse(m)  # refused-here
    ks = fg.kernels(x - m)
    assert len(ks) == 2
    where = f"{HERE}:{line_of('# refused-here')}"
    assert ks[0].reason == (
        "reduction broadcast back over axis 0; "
        f"merge requested at {where} could not be honoured: reduction broadcast back over axis 0"
    )
    np.testing.assert_allclose((x - m).numpy(), x.numpy() - x.numpy().sum(0), rtol=1e-5)


def test_a_merge_of_an_output_is_refused():
    x = fg.randn(5).realize()
    y = x.exp()
    fg.debug.fuse(y)
    (k,) = fg.kernels(y)
    assert k.reason.endswith("could not be honoured: it is an output you asked for")


def test_no_fusion_makes_a_kernel_of_every_op():
    x = fg.randn(8, 4).realize()
    with fg.debug.no_fusion():
        y = ((x * 2).exp() + 1).sum(1)  # no-fusion-here
    ks = fg.kernels(y)
    assert [k.ops[-1] for k in ks[:3]] == ["MUL", "EXP", "ADD"] and len(ks) == 4
    assert ks[3].ops[0] == "SUM"  # (and its view: sum(1) is a sum that keeps dims, reshaped)
    where = f"{HERE}:{line_of('# no-fusion-here')}"
    assert ks[0].reason == f"cut requested at {where} (no_fusion)"
    np.testing.assert_allclose(y.numpy(), (np.exp(x.numpy() * 2) + 1).sum(1), rtol=1e-5)
    w = ((x * 5).exp() + 1).sum(1)  # outside the block: fused
    assert len(fg.kernels(w)) == 1


def test_a_disabled_rule_schedules_without_it_and_the_cached_plan_comes_back():
    g, a = fg.randn(64, 32).realize(), fg.randn(64, 32).realize()

    def todo():
        return [((g * a).sum(0) * 1).node, (g.sum(0) * 1).node]

    def plan():
        nodes = todo()
        return engine.plan_for(nodes)[0], nodes  # (the nodes kept alive with the plan)

    with_rule, _ = plan()
    assert len(with_rule.steps) == 1
    with fg.debug.disable_rule("sibling_reductions"):
        assert fg.config.disable_rules == {"sibling_reductions"}
        without, _ = plan()
        assert plan()[0] is without  # cached under the rule's absence
        s1, s2 = (g * a).sum(0) * 2, g.sum(0) * 2
        ks = fg.kernels(s1, s2)
    assert len(without.steps) == 2 and len(ks) == 2
    assert fg.config.disable_rules == frozenset()
    assert plan()[0] is with_rule  # turned back on: the plan cached before
    gs, as_ = g.numpy(), a.numpy()
    np.testing.assert_allclose(s2.numpy(), gs.sum(0) * 2, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(s1.numpy(), (gs * as_).sum(0) * 2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rule", list(fg.debug.schedule_rules()))
def test_every_rule_can_be_disabled_and_values_stay(rule):
    x = fg.randn(16, 8).realize()
    w = fg.randn(8, 8).realize()
    with fg.debug.disable_rule(rule):
        y = ((x @ w).tanh().softmax(1) * x.exp()).sum(0)
        got = y.numpy()
    h = np.tanh(x.numpy() @ w.numpy())
    s = np.exp(h - h.max(1, keepdims=True))
    want = (s / s.sum(1, keepdims=True) * np.exp(x.numpy())).sum(0)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_disabling_reduction_epilogues_stores_every_reduction():
    x = fg.randn(8, 4).realize()
    assert len(fg.kernels(x.sum(1) * 2)) == 1
    with fg.debug.disable_rule("reduction_epilogues"):
        ks = fg.kernels(x.sum(1) * 2)
    assert len(ks) == 2 and "reduction_epilogues off" in ks[0].reason


def test_unknown_rule_names_are_refused_with_the_list():
    with pytest.raises(ValueError, match=r"no scheduling rule fusion_magic; the rules are "):
        with fg.debug.disable_rule("fusion_magic"):
            pass
    with pytest.raises(TypeError, match="rule names"):
        with fg.debug.disable_rule():
            pass
    with pytest.raises(ConfigError, match=r"FUSEGRAD_DISABLE_RULES='row_fusion,nope'"):
        rule_names("row_fusion,nope")
    assert rule_names(" row_fusion , sibling_reductions,") == {"row_fusion", "sibling_reductions"}


def test_schedule_rules_describe_each_rule_in_one_line():
    rules = fg.debug.schedule_rules()
    assert {"sibling_reductions", "stored_by_readers", "row_fusion"} <= set(rules)
    assert all(text and "\n" not in text for text in rules.values())


def test_debug_2_lists_the_requests(capsys):
    x = fg.randn(7).realize()
    h = (x * 4).cos()
    fg.debug.cut(h)  # debug-cut-here
    with fg.config.override(debug=2), fg.debug.disable_rule("row_fusion"):
        (h + 1).numpy()
    err = capsys.readouterr().err
    assert re.search(r"schedule: 2 kernel\(s\), without rules row_fusion", err)
    assert f"(cut requested at {HERE}:{line_of('# debug-cut-here')})" in err
