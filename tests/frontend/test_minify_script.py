"""The minifier's repro script: it builds exactly the graph it was written for, with its
inputs inline or in an .npz beside it, and its check passes where nothing is wrong."""

from __future__ import annotations

import numpy as np

import fusegrad as fg
from fusegrad.ir import node as N
from fusegrad.ir.dtypes import float32, int64
from fusegrad.ir.ops import Ops
from fusegrad.minify_case import Failure, record
from fusegrad.minify_script import builds, emit, same_graph


def test_the_script_builds_the_graph_it_was_written_for(tmp_path):
    rng = np.random.default_rng(2)
    a = fg.tensor(rng.standard_normal((3, 4)).astype(np.float32)).node
    big = fg.tensor(rng.standard_normal((10, 10)).astype(np.float32)).node  # > INLINE: .npz
    idx = fg.tensor(np.array([0, 2, 1])).node
    s = N.reduce(Ops.REDUCE_MAX, N.unary(Ops.EXP, a), (1,))
    p = N.pad(N.shrink(a, ((0, 2), (1, 3))), ((1, 0), (0, 2)))
    g = N.gather(N.reshape(big, (100,)), idx)
    c = N.cast(N.binary(Ops.CMPLT, a, N.const(float("inf"), a.shape, float32)), int64)
    roots = [N.add(s, N.expand(N.reduce(Ops.SUM, a, (0, 1)), (3, 1))), p, g, c]
    case = record(roots, lambda n: n.op is Ops.BUFFER, lambda n: n.arg.numpy().reshape(n.shape))
    path = tmp_path / "repro.py"
    failure = Failure("mismatch", "", 'output 0: made up, with \\x and """ in it')
    text = emit(case, failure, str(path), "demo.py")
    assert (tmp_path / "repro.npz").exists() and 'DATA["v' in text
    assert ".exp()" in text and "N.pad(" in text and 'float("inf")' in text
    again = builds(str(path))
    assert same_graph(again, case)
    for k, value in case.values.items():
        np.testing.assert_array_equal(again.values[k], value)
    namespace = {"__name__": "repro_test", "__file__": str(path)}
    exec(compile(text, str(path), "exec"), namespace)
    assert namespace["main"]() == 0  # nothing is wrong with this graph here
