"""The scheduler's cuts: how many kernels an expression becomes, and the reason for each.

Counts are pinned (fusion is the point of fusegrad); every result is also
checked against numpy, so a schedule that fuses too much is caught as well.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg

RNG = np.random.default_rng(1234)


def realized(a: np.ndarray) -> fg.Tensor:
    return fg.from_numpy(np.ascontiguousarray(a))


def matrix(rows: int = 64, cols: int = 128) -> np.ndarray:
    return RNG.standard_normal((rows, cols)).astype(np.float32)


def chain(x):
    """The README's activation chain; works on tensors and numpy arrays alike."""
    e = np.exp(x * 0.5 + 1.0) if isinstance(x, np.ndarray) else (x * 0.5 + 1.0).exp()
    r = e * x - 3.0
    r = np.maximum(r, 0) if isinstance(x, np.ndarray) else r.relu()
    return r / (1 + x * x)


def test_elementwise_chain_is_one_kernel():
    a = RNG.standard_normal(4096).astype(np.float32)
    y = chain(realized(a))
    ks = fg.kernels(y)
    assert len(ks) == 1, [k.name for k in ks]
    assert ks[0].reason == "output requested"
    assert ks[0].shape == (4096,)
    assert {"EXP", "MUL", "ADD", "DIV"} <= set(ks[0].ops)
    np.testing.assert_allclose(y.numpy(), chain(a.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_kernel_lines_point_at_the_users_source():
    x = realized(RNG.standard_normal(64).astype(np.float32))
    y = (x * 2).exp()
    z = y + 1
    (k,) = fg.kernels(z)
    here = __file__.rsplit("/", 1)[-1]
    assert k.lines and all(line.startswith(here + ":") for line in k.lines), k.lines
    assert len(k.lines) == 2


def test_elementwise_chain_on_random_input_is_one_kernel():
    # randn is a counter-based generator: it is computed inside the kernel, not stored
    y = chain(fg.randn(4096))
    ks = fg.kernels(y)
    assert len(ks) == 1, [(k.name, k.reason) for k in ks]
    assert np.isfinite(y.numpy()).all()


def test_row_softmax_is_three_kernels_and_only_the_last_is_full_size():
    a = matrix()
    y = realized(a).softmax(1)
    ks = fg.kernels(y)
    assert len(ks) <= 3, [(k.name, k.reason) for k in ks]
    for k in ks[:-1]:
        assert int(np.prod(k.shape)) < a.size, f"{k.name} writes {k.shape} ({k.reason})"
    assert ks[-1].shape == a.shape
    e = np.exp(a - a.max(1, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_column_softmax_cuts_the_same_way():
    a = matrix()
    y = realized(a).softmax(0)
    ks = fg.kernels(y)
    assert len(ks) <= 3
    assert all(int(np.prod(k.shape)) < a.size for k in ks[:-1])
    e = np.exp(a - a.max(0, keepdims=True))
    np.testing.assert_allclose(y.numpy(), e / e.sum(0, keepdims=True), rtol=1e-5, atol=1e-7)


def test_matmul_is_one_kernel():
    a, b = matrix(64, 64), matrix(64, 64)
    y = realized(a) @ realized(b)
    ks = fg.kernels(y)
    assert len(ks) == 1, [(k.name, k.reason) for k in ks]
    assert ks[0].shape == (64, 64)
    assert "SUM" in ks[0].ops and "MUL" in ks[0].ops
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_matmul_of_a_transposed_operand_is_one_kernel():
    a, b = matrix(48, 32), matrix(48, 16)
    y = realized(a).T @ realized(b)
    ks = fg.kernels(y)
    assert len(ks) == 1
    np.testing.assert_allclose(y.numpy(), a.T.astype(np.float64) @ b, rtol=1e-4, atol=1e-4)


def test_reduction_absorbs_its_elementwise_epilogue():
    a = matrix()
    y = realized(a).sum(1) * 2 + 1
    ks = fg.kernels(y)
    assert len(ks) == 1, [(k.name, k.reason) for k in ks]
    assert ks[0].shape == (64,)
    assert {"SUM", "MUL", "ADD"} <= set(ks[0].ops)
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64).sum(1) * 2 + 1, rtol=1e-5, atol=1e-4)


def test_reduction_absorbs_its_elementwise_prologue():
    a = matrix()
    y = (realized(a) * 3).exp().sum(1)
    ks = fg.kernels(y)
    assert len(ks) == 1
    np.testing.assert_allclose(y.numpy(), np.exp(a.astype(np.float64) * 3).sum(1), rtol=1e-5)


def test_mean_of_everything_is_one_kernel():
    a = matrix()
    y = realized(a).mean()
    assert len(fg.kernels(y)) == 1
    np.testing.assert_allclose(y.item(), a.astype(np.float64).mean(), rtol=1e-5, atol=1e-6)


# each: (expression, numpy equivalent, axis of the broadcast)
BROADCAST_BACK = {
    "x - amax(1)": (
        lambda x: x - x.amax(1, keepdim=True),
        lambda a: a - a.max(1, keepdims=True),
        1,
    ),
    "x - max(1).values": (
        lambda x: x - x.max(1, keepdim=True).values,
        lambda a: a - a.max(1, keepdims=True),
        1,
    ),
    "x / sum(1)": (lambda x: x / x.sum(1, keepdim=True), lambda a: a / a.sum(1, keepdims=True), 1),
    "x - sum(0)": (lambda x: x - x.sum(0, keepdim=True), lambda a: a - a.sum(0, keepdims=True), 0),
    "x - mean(1)": (
        lambda x: x - x.mean(1, keepdim=True),
        lambda a: a - a.mean(1, keepdims=True),
        1,
    ),
    "x - log(sum(exp, 1))": (
        lambda x: x - x.exp().sum(1, keepdim=True).log(),
        lambda a: a - np.log(np.exp(a).sum(1, keepdims=True)),
        1,
    ),
}


@pytest.mark.parametrize("case", list(BROADCAST_BACK))
def test_reduction_broadcast_back_is_cut_with_that_reason(case):
    build, reference, axis = BROADCAST_BACK[case]
    a = matrix()
    y = build(realized(a))
    ks = fg.kernels(y)
    if axis == 1:  # a row statistic: computed inside the row's kernel (schedule rule 6)
        assert len(ks) == 1, [(k.name, k.reason) for k in ks]
        assert any(op in ks[0].ops for op in ("SUM", "REDUCE_MAX")), ks[0].ops
        np.testing.assert_allclose(y.numpy(), reference(a.astype(np.float64)), rtol=1e-4, atol=1e-5)
        return
    assert len(ks) == 2, [(k.name, k.reason) for k in ks]
    first, last = ks
    assert "broadcast" in first.reason and str(axis) in first.reason, first.reason
    assert last.reason == "output requested"
    assert int(np.prod(first.shape)) == a.shape[1 - axis]
    np.testing.assert_allclose(y.numpy(), reference(a.astype(np.float64)), rtol=1e-4, atol=1e-5)


def test_contiguous_on_a_transposed_view_is_materialized():
    """The transposed copy is stored, as asked; `t + 1`, which reads nothing else, is
    stored by the same loop nest as a second output instead of reading t back."""
    a = matrix()
    t = realized(a).T.contiguous()
    y = t + 1
    ks = fg.kernels(y)
    assert len(ks) == 1, [(k.name, k.reason) for k in ks]
    assert ks[0].reason == "user called contiguous()"
    assert ks[0].shape == (128, 64)
    assert "store out0[" in ks[0].loop_ir and "store out1[" in ks[0].loop_ir
    np.testing.assert_array_equal(y.numpy(), a.T + 1)


def test_transposed_view_without_contiguous_fuses():
    a = matrix()
    y = realized(a).T + 1
    assert len(fg.kernels(y)) == 1
    np.testing.assert_array_equal(y.numpy(), a.T + 1)


@pytest.mark.parametrize("keepdim", [False, True])
def test_sum_of_a_sum_is_two_kernels(keepdim):
    a = matrix()
    y = realized(a).sum(1, keepdim=keepdim).sum()
    ks = fg.kernels(y)
    assert len(ks) == 2, [(k.name, k.reason) for k in ks]
    assert ks[0].shape[0] == 64 and int(np.prod(ks[0].shape)) == 64
    # the inner sum is materialized because the outer one reduces it, whatever view lies between
    assert "another reduction" in ks[0].reason, ks[0].reason
    np.testing.assert_allclose(y.item(), a.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)


def test_cheap_value_read_by_two_kernels_is_recomputed():
    a = matrix()
    x = realized(a)
    shared = x * 2 + 1  # two ALU ops: cheaper to recompute than to store
    s, m = shared.sum(1), shared.amax(1)
    ks = fg.kernels(s, m)
    assert len(ks) == 2 and all(k.reason == "output requested" for k in ks)
    ref = a.astype(np.float64) * 2 + 1
    np.testing.assert_allclose(s.numpy(), ref.sum(1), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(m.numpy(), ref.max(1), rtol=1e-6)


def test_costly_value_read_by_two_kernels_is_materialized_with_its_cost():
    a = matrix() * 0.1
    x = realized(a)
    shared = x
    for _ in range(5):  # 5 exps at 8 units each: over the recompute limit of 32
        shared = shared.exp() * 0.5
    s, m = shared.sum(1), shared.amax(1)
    ks = fg.kernels(s, m)
    # stored by the sum's loops (rule 8), which say why it is stored
    assert len(ks) == 2, [(k.name, k.reason) for k in ks]
    assert f"stores {a.shape} from inside its loops, read by 2 kernels" in ks[0].reason
    assert ks[0].shape == (a.shape[0],), ks[0].reason
    ref = a.astype(np.float64)
    for _ in range(5):
        ref = np.exp(ref) * 0.5
    np.testing.assert_allclose(s.numpy(), ref.sum(1), rtol=1e-5)
    np.testing.assert_allclose(m.numpy(), ref.max(1), rtol=1e-5)


def test_a_value_every_stage_reads_counts_once_toward_the_kernel_length():
    """A Horner polynomial of 150 stages in t = 1 / (1 + |x|/2): the kernel computes t once
    and each stage in two ops (about 310 ops, under MAX_KERNEL_OPS = 500), though summing
    the sources' counts counts t's ops once per stage (about 1200)."""
    a = RNG.standard_normal(4096).astype(np.float32)
    x = realized(a)
    t = 1.0 / (1.0 + 0.5 * x.abs())
    poly = t * 0.0 + 1.0
    for k in range(150):
        poly = (1.0 / (k + 2)) + t * poly
    (k,) = fg.kernels(poly)
    assert k.reason == "output requested"
    tv = 1.0 / (1.0 + 0.5 * np.abs(a.astype(np.float64)))
    want = np.ones_like(tv)
    for j in range(150):
        want = 1.0 / (j + 2) + tv * want
    # 150 float32 roundings where t is near 1 (the sum is then harmonic, ~5)
    np.testing.assert_allclose(poly.numpy(), want, rtol=5e-5)


def long_chain(x, stages: int, start: float):
    """2 distinct ops a stage (each stage's constant differs: no node is shared)."""
    for k in range(stages):
        x = x * 0.999 + (start + k * 1e-4)
    return x


def np_long_chain(x, stages: int, start: float):
    for k in range(stages):
        x = x * 0.999 + (start + k * 1e-4)
    return x


def test_a_chain_of_more_distinct_ops_than_the_limit_is_cut():
    a = matrix(8, 64)
    y = long_chain(realized(a), 400, 0.0)  # 800 ops
    ks = fg.kernels(y)
    # (the output, elementwise over the one value stored, is then that kernel's extra
    # output: `_siblings`, which does not count ops)
    assert any(k.reason == "kernel too long: more than 500 ops inlined" for k in ks), [
        (k.name, k.reason) for k in ks
    ]
    want = np_long_chain(a.astype(np.float64), 400, 0.0)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5)


def test_a_cheap_value_over_a_value_stored_for_length_is_recomputed():
    """v = two chains of 300 ops added: stored as too long. w = 2 v + 1 costs its own two
    ops (reading v costs nothing more), so the two reductions of w recompute it: before,
    w's cost counted v's ops too and w was stored as well."""
    a, b = matrix(), matrix()
    v = long_chain(realized(a), 150, 0.0) + long_chain(realized(b), 150, 1.0)
    w = v * 2.0 + 1.0
    s, m = w.sum(1), w.amax(1)
    ks = fg.kernels(s, m)
    assert [k.reason for k in ks] == [
        "kernel too long: more than 500 ops inlined",
        "output requested",
        "output requested",
    ], [(k.name, k.reason) for k in ks]
    ref = np_long_chain(a.astype(np.float64), 150, 0.0) + np_long_chain(b, 150, 1.0)
    ref = ref * 2 + 1
    np.testing.assert_allclose(s.numpy(), ref.sum(1), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(m.numpy(), ref.max(1), rtol=1e-5)


LEAVES = {
    "zeros": (lambda: fg.zeros(3), np.zeros(3, np.float32)),
    "full int": (lambda: fg.full((2, 3), 7), np.full((2, 3), 7, np.int64)),
    "ones bool": (lambda: fg.ones(4, dtype=fg.bool), np.ones(4, bool)),
}


@pytest.mark.parametrize("case", list(LEAVES))
def test_a_constant_alone_is_computed_by_at_most_one_kernel(case):
    build, want = LEAVES[case]
    t = build()
    assert len(fg.kernels(t)) <= 1
    got = t.numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_rand_alone_is_computed_by_one_kernel():
    t = fg.rand(4096)
    assert len(fg.kernels(t)) <= 1
    v = t.numpy()
    assert v.dtype == np.float32 and ((v >= 0) & (v < 1)).all()
    assert 0.45 < v.mean() < 0.55 and len(np.unique(v)) > 4000


def test_sgd_momentum_stores_parameter_and_momentum_in_one_kernel():
    """p - lr * m reads only m among the values the step computes: it rides in m's kernel."""
    w = fg.nn.Parameter(fg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)))
    opt = fg.optim.SGD([w], lr=0.1, momentum=0.9)
    want_w, want_m = w.numpy().astype(np.float64), np.zeros((4, 3))
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
        want_m = 0.9 * want_m + 2 * want_w if _ else 2 * want_w
        want_w = want_w - 0.1 * want_m
    ks = fg.kernels(w)
    assert len(ks) == 1 and "store out1[" in ks[0].loop_ir, [k.name for k in ks]
    np.testing.assert_allclose(w.numpy(), want_w, rtol=1e-5)
    np.testing.assert_allclose(opt.state[w]["momentum_buffer"].numpy(), want_m, rtol=1e-5)


def test_adam_stores_its_state_in_the_parameter_kernel():
    """Adam's new m and v are read only by the new parameter's kernel: it stores all three."""
    w = fg.nn.Parameter(fg.tensor(np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)))
    x = fg.tensor(np.linspace(0.5, 2, 20, dtype=np.float32).reshape(5, 4))
    opt = fg.optim.Adam([w], lr=0.1)
    p, m, v = w.numpy().astype(np.float64), np.zeros((4, 3)), np.zeros((4, 3))
    for t in range(1, 4):
        opt.zero_grad()
        ((x @ w) ** 2).sum().backward()
        opt.step()
        g = 2 * x.numpy().T.astype(np.float64) @ (x.numpy() @ p)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        p = p - 0.1 / (1 - 0.9**t) * m / (np.sqrt(v) / np.sqrt(1 - 0.999**t) + 1e-8)
    ks = fg.kernels(w)
    update = [k for k in ks if "store out2[" in k.loop_ir]
    assert len(update) == 1, [k.name for k in ks]
    np.testing.assert_allclose(w.numpy(), p, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(opt.state[w]["exp_avg"].numpy(), m, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(opt.state[w]["exp_avg_sq"].numpy(), v, rtol=1e-4, atol=1e-6)


def test_relu_after_a_matmul_stores_only_its_output_for_the_backward():
    """relu's gradient reads its output (as torch's threshold_backward), so a layer's
    matmul stores relu(x @ w + b) in its epilogue and nothing else: no pre-activation
    array, no separate relu kernel. Values and gradients at relu's kink and special
    inputs (0, -0.0, NaN, inf: the gradient 0 at and below 0, 1 at NaN) are torch's."""
    xn = matrix(16, 32)
    xn[0, :] = 0.0  # every pre-activation of row 0 is the bias alone
    wn = matrix(32, 24)
    bn = np.zeros(24, np.float32)
    bn[:6] = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf]
    gn = matrix(16, 24)
    x, w = realized(xn).requires_grad_(), realized(wn).requires_grad_()
    b = realized(bn).requires_grad_()
    z = x @ w + b
    y = z.relu()
    gx, gw, gb = fg.grad(y, [x, w, b], grad_outputs=realized(gn))
    ks = fg.kernels(y, gx, gw, gb)
    shapes = [k.shape for k in ks]
    assert shapes.count((16, 24)) == 1, [(k.name, k.reason) for k in ks]
    (mm,) = [k for k in ks if k.shape == (16, 24)]
    assert "SUM" in mm.ops and "WHERE" in mm.ops
    zn = xn.astype(np.float64) @ wn + bn
    with np.errstate(invalid="ignore"):
        keep = ~(zn <= 0)  # NaN keeps its gradient
        yn = np.where(zn < 0, 0.0, zn)
    np.testing.assert_allclose(y.numpy(), yn, rtol=1e-5, atol=1e-5)
    gz = np.where(keep, gn, 0.0)
    # row 0's pre-activations are +0, -0, 1, -1, NaN, inf: gradients 0, 0, g, 0, g, g
    np.testing.assert_array_equal(keep[0, :6], [False, False, True, False, True, True])
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(gx.numpy(), gz @ wn.T.astype(np.float64), rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(gb.numpy(), gz.sum(0), rtol=1e-4, atol=1e-4)
    with np.errstate(invalid="ignore"):
        np.testing.assert_allclose(gw.numpy(), xn.T.astype(np.float64) @ gz, rtol=1e-4, atol=1e-3)


def test_a_gather_by_a_computed_index_stores_the_index_first():
    # a sampling loop's context: cat(tokens, multinomial(probs)) read as embedding rows, then
    # a linear layer (a contraction whose tiles are vector lanes): the rows must be loaded
    # numbers, so the index is stored by a kernel of its own (it failed to compile before)
    import fusegrad.nn.functional as F

    fg.manual_seed(0)
    emb, lin = fg.nn.Embedding(15, 16), fg.nn.Linear(16, 14)
    idx = fg.zeros(5, 1, dtype=fg.long)
    with fg.no_grad():
        idx = fg.cat((idx, fg.multinomial(F.softmax(lin(emb(idx))[:, -1, :], -1), 1)), 1)
        out = lin(emb(idx))
        reasons = [k.reason for k in fg.kernels(out)]
        got = out.numpy()
    assert any("gather's computed index" in r for r in reasons), reasons
    rows = idx.numpy()
    assert rows.shape == (5, 2) and (rows >= 0).all() and (rows < 15).all()
    want = emb.weight.numpy()[rows] @ lin.weight.numpy().T + lin.bias.numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_computed_index_at_the_tables_first_and_last_rows_and_empty():
    # cat of two index tensors (computed, not loaded): rows 0 and 14 of a 15-row table,
    # values and the table's gradient (rows summed where repeated); an empty index
    emb = fg.nn.Embedding(15, 4)
    idx = fg.cat((fg.tensor([[0], [14]]), fg.tensor([[14], [0]])), 1)  # [[0, 14], [14, 0]]
    out = emb(idx) * fg.tensor([1.0, -0.0, -1.0, 2.0])
    w = emb.weight.numpy()
    want = w[[[0, 14], [14, 0]]] * np.array([1.0, -0.0, -1.0, 2.0], np.float32)
    np.testing.assert_array_equal(out.numpy(), want)
    out.sum().backward()
    grad = np.zeros((15, 4), np.float32)
    grad[[0, 14]] = 2 * np.array([1.0, -0.0, -1.0, 2.0], np.float32)
    np.testing.assert_array_equal(emb.weight.grad.numpy(), grad)
    none = fg.cat((fg.zeros(0, 1, dtype=fg.long), fg.zeros(0, 1, dtype=fg.long)), 1)
    assert emb(none).shape == (0, 2, 4)


def test_a_copy_at_other_sizes_has_them_in_its_shapes_views_and_means():
    """`without_values(item, sizes)`: the kernel's item with each size of `sizes` replaced
    in its nodes' shapes, its views' shapes and bounds, and a float constant of that size
    or 1 over it (a mean's); other numbers, and the original, as they were."""
    from fusegrad.ir.ops import Ops
    from fusegrad.pipeline.schedule import schedule, without_values

    x = fg.tensor(np.ones((12, 5), np.float32))
    y = ((x[:12, :3].reshape(12 * 3) * 2).reshape(12, 3) / 12).sum(0) / 12.0
    (item,) = schedule([y.node], lambda n: n is x.node)
    copy = without_values(item, {12: 20})
    assert [n.shape for n in copy.inputs] == [(20, 5)]
    shapes = {n.shape for n in copy.nodes}
    assert (20, 3) in shapes and (12, 3) not in shapes
    assert copy.root.shape == item.root.shape == (3,)
    bounds = [n.arg for n in copy.nodes if n.op is Ops.SHRINK]
    assert bounds and all(b[0] == (0, 20) for b in bounds)
    consts = {n.arg for n in copy.nodes if n.op is Ops.CONST}
    assert 20.0 in consts and 12.0 not in consts
    assert all(n.shape != (20, 3) for n in item.nodes)  # the original is untouched
