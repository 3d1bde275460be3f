"""Which user line and user-level op each kernel reports, and why a line recompiles.

Oracles: the lines of this file and of examples/lenet_mnist.py, found by their text.
"""

from __future__ import annotations

import gc
import os
import re
import sys
import warnings

import numpy as np
import pytest
from _files import load_file

import fusegrad as fg
import fusegrad.nn as nn
import fusegrad.nn.functional as F
from fusegrad.ir import node as N
from fusegrad.ir import sites
from fusegrad.ir.dtypes import float32
from fusegrad.ir.ops import Ops
from fusegrad.runtime.engine import engine
from fusegrad.runtime.recompile import RecompileWarning

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "lenet_mnist.py")
HERE = os.path.basename(__file__)


def line_in(path: str, text: str) -> int:
    """The 1-based number of the one line of `path` ending with `text`."""
    with open(path) as f:
        (number,) = [i + 1 for i, line in enumerate(f) if line.rstrip().endswith(text)]
    return number


@pytest.fixture(scope="module")
def lenet():
    sys.path.insert(0, os.path.dirname(EXAMPLE))  # its examples/minitorch_ops.py
    module = load_file("lenet_mnist_example", EXAMPLE)
    return module.LeNet5


@pytest.fixture
def ran():
    """The records of every kernel run while the test runs."""
    records = []

    def observe(plan, recs):
        records.extend(recs)

    engine.observers.append(observe)
    yield records
    engine.observers.remove(observe)


def test_a_lenet_step_names_only_the_examples_lines(lenet, ran):
    fg.manual_seed(0)
    model = lenet()
    opt = fg.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = fg.from_numpy(np.random.default_rng(0).standard_normal((2, 1, 28, 28), np.float32))
    y = fg.tensor([3, 7])
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)  # LOSS
    loss.backward()
    opt.step()  # STEP
    loss.item()
    assert ran
    lines = {line for r in ran for line in r.lines}
    files = {line.rsplit(":", 1)[0] for line in lines}
    assert files == {"lenet_mnist.py", HERE}, sorted(lines)
    loss_line = line_in(__file__, "# LOSS")
    step_line = line_in(__file__, "# STEP")
    assert {line for line in lines if line.startswith(HERE)} == {
        f"{HERE}:{loss_line}",
        f"{HERE}:{step_line}",
    }
    conv1 = line_in(EXAMPLE, "x = self.pool(self.conv1(x).relu())")
    forward = range(conv1, line_in(EXAMPLE, "return self.fc3(x)") + 1)  # LeNet5.forward
    for line in lines - {f"{HERE}:{loss_line}", f"{HERE}:{step_line}"}:
        assert int(line.rsplit(":", 1)[1]) in forward, line

    ops = {op for r in ran for op in r.user_ops}
    fc1 = line_in(EXAMPLE, "x = self.fc1(x).relu()")
    for expected in (
        f"conv2d (lenet_mnist.py:{conv1})",
        f"conv2d backward (lenet_mnist.py:{conv1})",
        f"relu (lenet_mnist.py:{conv1})",
        f"linear (lenet_mnist.py:{fc1})",
        f"linear backward (lenet_mnist.py:{fc1})",
        f"cross_entropy ({HERE}:{loss_line})",
        f"sgd update ({HERE}:{step_line})",
    ):
        assert expected in ops, (expected, sorted(ops))
    # the update is tagged with the opt.step() line, and only the update is
    updates = [r for r in ran if "optimizer" in r.roles]
    assert updates and all(f"sgd update ({HERE}:{step_line})" in r.user_ops for r in updates)
    assert all(op.endswith(f"({HERE}:{step_line})") == op.startswith("sgd update") for op in ops), (
        sorted(ops)
    )
    # each user-level op lists its primitives, one level down
    for r in ran:
        assert sum(len(p) for _, p in r.op_groups) == len(r.ops), (r.name, r.op_groups, r.ops)
        for op, prims in r.op_groups:
            assert prims and all(p.isupper() for p in prims), (op, prims)


def test_a_with_block_is_not_the_users_line():
    """contextlib's frames (a `with` statement inside fusegrad) are library frames."""
    x = fg.randn(8, requires_grad=True)
    with fg.no_grad():
        y = x * 3  # WITH
    (k,) = fg.kernels(y)
    assert k.lines == [f"{HERE}:{line_in(__file__, '# WITH')}"]
    assert k.user_ops[-1] == f"mul ({HERE}:{line_in(__file__, '# WITH')})"


def test_a_stale_entry_of_a_dead_code_objects_id_is_not_taken_for_a_new_one():
    """`capture` keys its tables by a code object's id (hashing a code object walks its
    constants): an entry whose code object died, its id now another's, is recomputed."""
    from fusegrad.runtime import attribution

    x = fg.randn(4)
    user = compile("y = x * 2", "user_script.py", "exec")
    library = compile("y = x * 2", fg.nn.__file__, "exec")  # a library file's code
    attribution._kind_of(library)
    attribution._kind[id(user)] = attribution._kind.pop(id(library))  # as if id reused
    scope = {"x": x}
    exec(user, scope)
    assert str(sites.site_of(scope["y"].node)) == "user_script.py:1"
    del library
    gc.collect()


def test_sites_are_a_side_table_not_part_of_nodes():
    assert "site" not in N.Node.__slots__
    a = N.const(1.0, (3,), float32)
    b = N.unary(Ops.EXP, N.buffer(fg.zeros(3).realize().node.arg, (3,), float32))
    assert sites.site_of(b) is None  # built below the frontend: no user line
    t = fg.Tensor(b)  # WRAP (wrapping it notes the user's line, once)
    wrap = line_in(__file__, "# WRAP (wrapping it notes the user's line, once)")
    assert str(sites.site_of(b)) == f"{HERE}:{wrap}"
    first = sites.site_of(b)
    fg.Tensor(b)  # equal nodes are one node: the first line stays
    assert sites.site_of(b) is first
    del t, b
    gc.collect()
    assert a is N.const(1.0, (3,), float32)  # hash-consing knows nothing of sites


def test_modules_in_a_sequential_are_labelled_by_their_own_op(ran):
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    model(fg.randn(5, 4)).realize()  # SEQUENTIAL
    labels = {op.split(" (")[0] for r in ran for op in r.user_ops}
    assert {"linear", "relu"} <= labels, labels
    assert "sequential" not in labels


def test_one_line_calling_several_layers_labels_each_by_its_own_op(ran):
    """One user line, one call instruction, several library calls: `capture`'s hints
    (the frame it found last time) must not give the relu's tensors the linear's site."""
    x = fg.randn(5, 4)
    for layer in (nn.Linear(4, 3), nn.ReLU(), nn.Tanh(), nn.Sigmoid()):
        x = layer(x)  # LAYERS  # noqa: E701, E501
    for f in (fg.exp, fg.sin, fg.cos, fg.sqrt, fg.abs):
        x = f(x)  # FUNCTIONS  # noqa: E701
    x.realize()
    labels = {op for r in ran for op in r.user_ops}
    layers = f"{HERE}:{line_in(__file__, '# LAYERS  # noqa: E701, E501')}"
    functions = f"{HERE}:{line_in(__file__, '# FUNCTIONS  # noqa: E701')}"
    want = {f"{name} ({layers})" for name in ("linear", "relu", "tanh", "sigmoid")}
    want |= {f"{name} ({functions})" for name in ("exp", "sin", "cos", "sqrt", "abs")}
    assert want <= labels, sorted(labels)


def test_a_hooks_ops_are_the_hooks_lines_not_the_callers(ran):
    """A user function called from inside the library (a forward hook) is the innermost
    user frame for the ops it makes, though the caller's frame is suspended at the same
    instruction as for the layer's own ops."""
    layer = nn.Linear(4, 3)
    layer.register_forward_hook(lambda m, i, out: out * 3.0)  # HOOK
    layer(fg.randn(5, 4)).realize()  # CALLER
    lines = {line for r in ran for line in r.lines}
    assert f"{HERE}:{line_in(__file__, '# HOOK')}" in lines, lines
    assert f"{HERE}:{line_in(__file__, '# CALLER')}" in lines, lines


def mlp_steps(temps):
    engine.recompiles.clear()  # count this call's schedules only
    fg.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    x = fg.randn(4, 6).realize()
    y = fg.tensor([0, 1, 2, 1])
    for temp in temps:
        opt.zero_grad()
        loss = F.cross_entropy(model(x) * temp, y)  # TEMP
        loss.backward()
        opt.step()  # RECOMPILES
        loss.item()


def test_a_changing_python_float_is_reported_with_its_line(capfd):
    capfd.readouterr()
    with fg.config.override(debug=1):
        mlp_steps([0.5, 0.625])
    err = capfd.readouterr().err
    said = [line for line in err.splitlines() if "recompiling at" in line]
    step, temp = line_in(__file__, "# RECOMPILES"), line_in(__file__, "# TEMP")
    assert said, err[-2000:]
    assert f"recompiling at {HERE}:{step} (2nd schedule here)" in said[0]
    assert f"the Python number 0.625 at {HERE}:{temp} (mul) was 0.5" in said[0]
    assert "0-d tensor (fg.tensor(0.625))" in said[0]


def test_recompiles_become_a_warning_after_n_at_one_line():
    # (constants kept in the code: each new value compiles, as a new size or graph does)
    warn_at_3 = fg.config.override(recompile_warning=3, lift_constants=False)
    with warn_at_3, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        mlp_steps([0.25, 0.375, 0.4375, 0.46875])
    ours = [w for w in got if issubclass(w.category, RecompileWarning)]
    assert len(ours) == 2  # the 3rd and 4th schedules at that line
    assert ours[0].filename == __file__ and ours[0].lineno == line_in(__file__, "# RECOMPILES")
    assert "3rd schedule here" in str(ours[0].message)
    with fg.config.override(recompile_warning=0), warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        mlp_steps([0.1875, 0.21875, 0.234375])
    assert not [w for w in got if issubclass(w.category, RecompileWarning)]


def test_a_changed_shape_is_named(capfd):
    capfd.readouterr()
    with fg.config.override(debug=1):
        for n in (3, 5):
            w = fg.from_numpy(np.ones((n, 2), np.float32))
            (w * 2.5).sum().item()  # SHAPES
    said = [line for line in capfd.readouterr().err.splitlines() if "recompiling at" in line]
    assert len(said) == 1, said
    assert f"{HERE}:{line_in(__file__, '# SHAPES')}" in said[0]
    assert re.search(r"input 0 .*has shape \(5, 2\), was \(3, 2\)", said[0]), said[0]


def test_nodes_are_noted_when_the_table_is_read_and_dead_graphs_never_are(monkeypatch):
    """A tensor's subgraph is noted when something reads the table, in the order the
    tensors were made (the first to ask for a node gives it its site); graphs that die
    first are never walked, and the queue of tensors to note stays bounded (a full queue
    is noted then and there)."""
    walked = []
    real = sites._note_walk
    monkeypatch.setattr(sites, "_note_walk", lambda n, s: (walked.append(n), real(n, s)))
    x = fg.randn(3, 4).realize()
    walked.clear()  # (realizing read the table)
    y = (x * 2.0).exp()  # written here
    y_line = line_in(__file__, "# written here")
    z = y + 1.0
    inner = y.node.srcs[0]  # x * 2.0, noted under y's site
    assert walked == []  # nothing walked yet
    assert str(sites.site_of(inner)) == f"{HERE}:{y_line}"
    assert str(sites.site_of(z.node)) == f"{HERE}:{y_line + 2}"
    walked.clear()
    for _ in range(3 * sites.PENDING_MAX):
        (x * 3.0).exp()  # dies at once
    # the dead entries are dropped unwalked as the queue grows (`_compact`): it stays short
    assert len(sites._pending) <= 2 * sites.PENDING_COMPACT
    assert walked == []
    kept = [(x * 4.0 + float(k)).exp() for k in range(sites.PENDING_MAX)]  # all alive
    assert len(sites._pending) <= sites.PENDING_MAX  # a full queue is noted then and there
    assert len(walked) >= sites.PENDING_MAX // 2 and str(sites.site_of(kept[0].node))


def test_the_queue_of_live_entries_stays_bounded_whatever_it_held_before():
    x = fg.randn(3, 4).realize()
    sites.site_of(x.node)  # (reading the table notes what was queued)
    assert len(sites._pending) == 0
    half = [x + float(k) for k in range(sites.PENDING_MAX // 2 + 1)]  # an entry each
    sites._compact()  # all alive: the next compaction is due when they have doubled...
    more = [x + float(k) for k in range(-sites.PENDING_MAX // 2, 0)]
    # ... but never past the bound: one entry more than it and the queue is noted
    assert len(half) + len(more) == sites.PENDING_MAX + 1
    assert len(sites._pending) <= sites.PENDING_MAX
    assert sites.noted(half[0].node) and sites.noted(more[-1].node)


@pytest.mark.parametrize(
    "op",
    [
        lambda x: F.layer_norm(x, (6,)),
        lambda x: F.group_norm(x, 2),
        lambda x: F.batch_norm(x, None, None, training=True),
        lambda x: F.normalize(x),
    ],
    ids=["layer_norm", "group_norm", "batch_norm", "normalize"],
)
def test_a_normalization_walks_the_stack_once_and_labels_its_kernels(op, monkeypatch, request):
    """The composite normalizations find the user's line once, on entry (`one_site`), not
    once per tensor they make (a layer norm made 14: a sixth of its host time)."""
    from fusegrad.runtime import attribution

    x = fg.randn(4, 6)
    walks = []
    real = attribution.capture

    def counted(depth=1, api=None):
        walks.append(getattr(attribution.ambient, "site", None) is None)
        return real(depth + 1, api)

    monkeypatch.setattr(attribution, "capture", counted)
    monkeypatch.setattr(attribution.hooks, "capture", counted)
    y = op(x)
    assert sum(walks) <= 2  # the entry's walk (and one for autocast's wrapper at most)
    name = request.node.callspec.id
    (record,) = fg.kernels(y)[-1:]  # the user's line is the lambda's, above
    assert any(u.startswith(f"{name} ({HERE}:") for u in record.user_ops), record.user_ops
