"""python -m fusegrad.minify: a script's first failing graph, shrunk to a small repro script.

The end-to-end tests plant a wrong lowering rule in the LLVM renderer (EXP computed as
exp(x) + 0.5, or raising, in a kernel that also multiplies), run the minifier on a small
MLP's training steps in a subprocess (a planted kernel must not reach this process's
kernel cache), and check the repro: a handful of nodes, the faulty op among them, failing
with the rule planted and passing without it. The search itself is tested in process with
a stand-in compiler whose failure is a pattern of the graph."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import minify as M
from fusegrad import minify_case
from fusegrad.ir import node as N
from fusegrad.ir.dtypes import float32
from fusegrad.ir.ops import Ops
from fusegrad.runtime.engine import Engine, engine

# a wrong lowering rule, installed by `install(mode)`: in a kernel that also has a MUL,
# EXP renders as exp(x) + 0.5 ("wrong") or raises NotImplementedError ("raise")
PLANTED = """
from fusegrad.pipeline import llvm
from fusegrad.pipeline.loopir import Alu
from fusegrad.ir.ops import Ops

_original = llvm._Renderer.stmt_Alu


def _ops(body):
    for s in body:
        if isinstance(s, Alu):
            yield s.op
        yield from _ops(getattr(s, "body", None) or ())


def install(mode):
    def planted(self, s):
        faulty = s.op is Ops.EXP and Ops.MUL in set(_ops(self.k.body))
        if faulty and mode == "raise":
            raise NotImplementedError("planted: EXP next to a MUL")
        _original(self, s)
        if faulty:
            v, varying = self.lookup(s.dst)
            half = self.const(0.5, s.dtype, varying)
            t = self.ty(s.dtype.llvm, varying)
            self.bind(s.dst, self.emit(f"fadd {t} {v}, {half}"), s.dtype, varying)

    llvm._Renderer.stmt_Alu = planted
"""

MLP = """
import numpy as np
import fusegrad as fg
import fusegrad.nn as nn
import fusegrad.nn.functional as F

rng = np.random.default_rng(0)
x = fg.tensor(rng.standard_normal((8, 6)).astype(np.float32))
y = fg.tensor(rng.integers(0, 3, 8))
model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
opt = fg.optim.SGD(model.parameters(), lr=0.1)
for _ in range(2):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
print("loss", loss.item())
"""


def run(folder, code: str, planted: str | None = None) -> subprocess.CompletedProcess:
    """`code` in a fresh python in `folder`, with the rule planted first if asked."""
    if planted is not None:
        code = f"import planted\nplanted.install({planted!r})\n" + code
    env = dict(os.environ, FUSEGRAD_CACHE="off", FUSEGRAD_COMPILE_WORKERS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(folder), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def run_script(folder, script: str, planted: str | None = None) -> subprocess.CompletedProcess:
    return run(folder, f"import runpy\nrunpy.run_path({script!r}, run_name='__main__')", planted)


@pytest.fixture
def project(tmp_path):
    (tmp_path / "planted.py").write_text(PLANTED)
    (tmp_path / "mlp.py").write_text(MLP)
    return tmp_path


def minify_in_subprocess(folder, planted: str) -> subprocess.CompletedProcess:
    code = (
        "import sys\nfrom fusegrad.minify import main\n"
        "sys.exit(main(['mlp.py', '--out', 'repro.py', '--time-limit', '60']))"
    )
    return run(folder, code, planted)


def test_a_wrong_lowering_rule_is_minified_to_a_few_nodes(project):
    done = minify_in_subprocess(project, "wrong")
    assert done.returncode == 1, done.stderr
    assert "minify: wrote repro.py" in done.stdout
    case = M.builds(str(project / "repro.py"))  # (built here, not run: nothing planted here)
    assert len(case) <= 6 and "EXP" in case.ops(), case.entries
    text = (project / "repro.py").read_text()
    assert ".exp()" in text and "differs from the reference evaluator" in text
    failing = run_script(project, "repro.py", planted="wrong")
    assert failing.returncode == 1 and "elements differ" in failing.stdout, failing.stderr
    fixed = run_script(project, "repro.py")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "matches the reference evaluator" in fixed.stdout


def test_an_exception_in_the_compiler_is_minified(project):
    done = minify_in_subprocess(project, "raise")
    assert done.returncode == 1, done.stderr
    case = M.builds(str(project / "repro.py"))
    assert len(case) <= 6 and "EXP" in case.ops(), case.entries
    assert "raises NotImplementedError" in (project / "repro.py").read_text()
    failing = run_script(project, "repro.py", planted="raise")
    assert failing.returncode == 1 and "planted: EXP next to a MUL" in failing.stderr
    assert run_script(project, "repro.py").returncode == 0


def test_a_script_that_computes_right_has_nothing_to_minify(project):
    done = run(
        project,
        "import runpy, sys\nsys.argv[1:] = ['mlp.py']\n"
        "runpy.run_module('fusegrad.minify', run_name='__main__')",
    )
    assert done.returncode == 0, done.stderr
    assert "nothing to minify" in done.stdout
    assert not (project / "repro.py").exists()


def test_recording_leaves_the_engine_as_it_was(tmp_path):
    script = tmp_path / "fine.py"
    script.write_text("import fusegrad as fg\nprint((fg.ones(4) * 3).exp().sum().item())\n")
    assert M.minify(str(script), out=str(tmp_path / "r.py"), log=None) is None
    assert engine.plan_for.__func__ is Engine.plan_for and engine.run.__func__ is Engine.run


def test_an_error_of_the_script_itself_is_said(tmp_path):
    script = tmp_path / "broken.py"
    script.write_text("import fusegrad as fg\n(fg.ones(2) * 2).realize()\nraise KeyError('x')\n")
    with pytest.raises(ValueError, match="raised KeyError .* outside the compiler"):
        M.minify(str(script), log=None)


def test_a_bad_command_line_is_refused(capsys):
    assert M.main([]) == 2
    assert M.main(["no_such_script.py"]) == 2
    assert "can't open file" in capsys.readouterr().err
    assert M.main(["--help"]) == 0


# ---------------------------------------------------------------- the search, in process


def mlp_graph(batch=8, features=6, hidden=5):
    """A small MLP's forward as IR nodes: matmul (MUL, SUM), bias, relu (MAX), exp."""
    rng = np.random.default_rng(1)

    def leaf(*shape):
        return fg.tensor(rng.standard_normal(shape).astype(np.float32)).node

    x, w, b = leaf(batch, 1, features), leaf(1, hidden, features), leaf(1, hidden)
    h = N.reduce(
        Ops.SUM,
        N.mul(N.expand(x, (batch, hidden, features)), N.expand(w, (batch, hidden, features))),
        (2,),
    )
    h = N.add(N.reshape(h, (batch, hidden)), N.expand(b, (batch, hidden)))
    relu = N.binary(Ops.MAX, h, N.const(0.0, h.shape, float32))
    return [N.unary(Ops.EXP, relu), N.reduce(Ops.SUM, h, (0,))]


def fake_compiler(nodes, want):
    """A stand-in compiler that is wrong wherever a MAX reads a MUL's value, at any depth."""
    below = set()
    for n in N.toposort(nodes):
        if n.op is Ops.MAX and any(s.op is Ops.MUL or id(s) in below for s in n.srcs):
            return ["output 0: MAX over a MUL"]
        if n.op is Ops.MUL or any(id(s) in below for s in n.srcs):
            below.add(id(n))
    return []


def test_the_search_shrinks_nodes_and_sizes(monkeypatch):
    monkeypatch.setattr(minify_case, "_compiled_against", fake_compiler)
    roots = mlp_graph()
    case = M.record(roots, lambda n: n.op is Ops.BUFFER, lambda n: n.arg.numpy().reshape(n.shape))
    failure, case = M.failure_of(case)
    assert failure.kind == "mismatch" and len(case) > 12
    small, failure, _ = M.shrink(case, failure, time_limit=30)
    assert failure.kind == "mismatch" and {"MUL", "MAX"} <= set(small.ops())
    # an input, a constant, MUL, the reshape from the matmul's 3 axes to 2, 0.0, MAX
    assert len(small) <= 6, small.entries
    assert all(d == 1 for e in small.entries for d in e.shape), "sizes shrink to 1"


def test_a_failure_that_needs_a_size_keeps_it(monkeypatch):
    def wrong_from_four_rows(nodes, want):  # wrong only where the MAX has 4 rows or more
        bad = fake_compiler(nodes, want)
        big = any(n.op is Ops.MAX and n.shape[0] >= 4 for n in N.toposort(nodes))
        return bad if big else []

    monkeypatch.setattr(minify_case, "_compiled_against", wrong_from_four_rows)
    case = M.record(mlp_graph(), lambda n: n.op is Ops.BUFFER, lambda n: n.arg.numpy())
    failure, case = M.failure_of(case)
    small, _, _ = M.shrink(case, failure, time_limit=30)
    (max_node,) = [e for e in small.entries if e.op is Ops.MAX]
    assert max_node.shape[0] == 4 and len(small) <= 6, small.entries  # 8 -> 4 (half), not 2


def test_the_search_stops_at_its_step_limit(monkeypatch):
    monkeypatch.setattr(minify_case, "_compiled_against", fake_compiler)
    roots = mlp_graph()
    case = M.record(roots, lambda n: n.op is Ops.BUFFER, lambda n: n.arg.numpy().reshape(n.shape))
    failure, case = M.failure_of(case)
    shrinker = M._Shrinker(case, failure, time_limit=30, max_steps=3, log=None)
    shrinker.run()
    assert shrinker.steps == 3


def test_resizing_slices_inputs_and_view_shapes():
    x = fg.tensor(np.arange(24, dtype=np.float32).reshape(4, 6)).node
    y = N.expand(N.reduce(Ops.SUM, x, (1,)), (4, 6))
    case = M.record(
        [N.mul(x, y)], lambda n: n.op is Ops.BUFFER, lambda n: n.arg.numpy().reshape(4, 6)
    )
    small = M._resized(case, 6, 2)
    built = M.build(small)
    assert built.roots[0].shape == (4, 2)
    (value,) = small.values.values()
    np.testing.assert_array_equal(value, np.arange(24, dtype=np.float32).reshape(4, 6)[:, :2])
