"""Row-local fusion (pipeline/schedule.py, rule 6): a softmax, a log-softmax or a layer norm is one
kernel that computes its row statistics once per row, before the loop over the row's
elements, and reads the row from memory once; their backward passes fuse the same way.

The oracles: numpy's formulas in float64, and the reference evaluator
(`fusegrad.ir.reference`) of the very same graph, at special points (NaN, +-inf, a row of
-inf, huge magnitudes, rows of length 1). Expected kernel counts were 3 for each forward
before this rule (statistics, then the elementwise pass)."""

from __future__ import annotations

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.ir.reference import evaluate_many
from fusegrad.nn import functional as F
from fusegrad.pipeline.schedule import ROW_CACHE_BYTES

RNG = np.random.default_rng(32)


def special_rows(rows: int = 8, n: int = 24) -> np.ndarray:
    """Normal rows, and rows with NaN, +inf, one -inf, all -inf, +-inf, huge values."""
    x = (3 * RNG.standard_normal((rows, n))).astype(np.float32)
    x[1, 3] = np.nan
    x[2, 0] = np.inf
    x[3, n - 1] = -np.inf
    x[4, :] = -np.inf
    x[5, 1], x[5, 2] = np.inf, -np.inf
    x[6] *= np.float32(1e30)
    return x


def softmax64(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def layer_norm64(x, w, b, eps=1e-5):
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    return xhat * w + b


def assert_same(got: np.ndarray, want: np.ndarray, rtol=2e-5, atol=2e-6) -> None:
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(np.nan_to_num(got), np.nan_to_num(want), rtol=rtol, atol=atol)


# ---------------------------------------------------------------- kernel counts


@pytest.mark.parametrize(
    "build",
    [
        lambda x: x.softmax(-1),
        lambda x: x.log_softmax(-1),
        lambda x: F.layer_norm(x, (x.shape[-1],), fg.ones(x.shape[-1]), fg.zeros(x.shape[-1])),
        lambda x: x - x.amax(-1, keepdim=True),
    ],
    ids=["softmax", "log_softmax", "layer_norm", "x - amax"],
)
def test_a_row_op_is_one_kernel_that_hoists_its_statistics(build):
    x = fg.from_numpy(RNG.standard_normal((16, 40)).astype(np.float32))
    (k,) = fg.kernels(build(x))
    assert k.name.startswith("r_"), k.name
    lines = k.loop_ir.splitlines()
    row = next(i for i, s in enumerate(lines) if s.strip().startswith("for o1 in"))
    # every statistic is computed before the loop over the row's elements, not inside it
    assert all(i < row for i, s in enumerate(lines) if s.strip().startswith("acc")), k.loop_ir


def test_column_statistics_and_rows_too_long_for_cache_keep_their_kernels():
    x = fg.from_numpy(RNG.standard_normal((16, 40)).astype(np.float32))
    ks = fg.kernels(x - x.sum(0, keepdim=True))
    assert len(ks) == 2 and "broadcast back over axis 0" in ks[0].reason
    n = ROW_CACHE_BYTES // 4  # four arrays of the row no longer fit
    long = fg.from_numpy(RNG.standard_normal((2, n)).astype(np.float32))
    y = long.softmax(-1)
    assert len(fg.kernels(y)) == 3
    assert_same(y.numpy(), softmax64(long.numpy().astype(np.float64)), rtol=1e-4, atol=1e-9)


def _step_kernels(kind: str) -> int:
    g = fg.from_numpy(RNG.standard_normal((32, 64)).astype(np.float32))
    if kind == "cross_entropy":
        x = fg.from_numpy(RNG.standard_normal((32, 10)).astype(np.float32)).requires_grad_()
        loss = F.cross_entropy(x, fg.tensor(np.arange(32) % 10))
        loss.backward()
        return len(fg.kernels(loss, x.grad))
    x = fg.from_numpy(RNG.standard_normal((32, 64)).astype(np.float32)).requires_grad_()
    if kind == "softmax":
        loss = (x.softmax(-1) * g).sum()
        loss.backward()
        return len(fg.kernels(loss, x.grad))
    w, b = fg.ones(64).requires_grad_(), fg.zeros(64).requires_grad_()
    loss = (F.layer_norm(x, (64,), w, b) * g).sum()
    loss.backward()
    return len(fg.kernels(loss, x.grad, w.grad, b.grad))


# (cross-entropy: its loss sums the log-probabilities over the batch, a reduction that
# does not hoist the row statistics, so one of them is stored: 6, from 7 before rule 6)
# (layer norm: 7 with rule 6; 6 with rule 7, its weight and bias gradients, sum(g * xhat, 0)
# and sum(g, 0), are one kernel)
@pytest.mark.parametrize("kind, kernels", [("softmax", 4), ("layer_norm", 6), ("cross_entropy", 6)])
def test_forward_and_backward_kernel_counts(kind, kernels):
    # before row fusion: 5, 11 and 7. The forward statistics are still stored where the
    # loss's full sum also reads them; the backward's row sums fuse into the gradient
    assert _step_kernels(kind) == kernels


# ---------------------------------------------------------------- values and gradients


def _row_programs(x, w, b, g, target, every: bool = True):
    """Forward values and gradients of softmax and layer norm, and with `every` of
    log-softmax and cross-entropy too."""
    out = []
    for f in (lambda t: t.softmax(-1), lambda t: t.log_softmax(-1))[: 2 if every else 1]:
        y = f(x)
        (dx,) = fg.grad((y * g).sum(), [x])
        out += [y, dx]
    y = F.layer_norm(x, (x.shape[-1],), w, b)
    dx, dw, db = fg.grad((y * g).sum(), [x, w, b])
    out += [y, dx, dw, db]
    if every:
        loss = F.cross_entropy(x, target)
        out += [loss, *fg.grad(loss, [x])]
    return out


def _arrays(x: np.ndarray) -> tuple[np.ndarray, ...]:
    n = x.shape[-1]
    w = (1 + RNG.standard_normal(n)).astype(np.float32)
    b = RNG.standard_normal(n).astype(np.float32)
    g = RNG.standard_normal(x.shape).astype(np.float32)
    return x, w, b, g, np.arange(x.shape[0]) % n


def _inputs(arrays, device: str = "cpu"):
    x, w, b, g, t = (fg.tensor(a, device=device) for a in arrays)
    return x.requires_grad_(), w.requires_grad_(), b.requires_grad_(), g, t


@pytest.mark.parametrize("n", [1, 24])
def test_values_and_gradients_match_the_reference_at_special_points(n):
    x = special_rows(8, n) if n > 1 else (3 * RNG.standard_normal((8, 1))).astype(np.float32)
    tensors = _row_programs(*_inputs(_arrays(x)))
    want = evaluate_many([t.node for t in tensors])
    for t, w in zip(tensors, want):
        assert_same(t.numpy(), w, rtol=1e-4, atol=1e-5)


def test_finite_rows_match_numpy_in_float64():
    x = (3 * RNG.standard_normal((8, 24))).astype(np.float32)
    xt, wt, bt, gt, _ = _inputs(_arrays(x))
    x64, w64, b64, g64 = (t.numpy().astype(np.float64) for t in (xt, wt, bt, gt))
    y = xt.softmax(-1)
    (dx,) = fg.grad((y * gt).sum(), [xt])
    s = softmax64(x64)
    assert_same(y.numpy(), s)
    assert_same(dx.numpy(), s * (g64 - (g64 * s).sum(-1, keepdims=True)), atol=1e-5)
    z = F.layer_norm(xt, (24,), wt, bt)
    dx, dw, db = fg.grad((z * gt).sum(), [xt, wt, bt])
    assert_same(z.numpy(), layer_norm64(x64, w64, b64), rtol=1e-4, atol=1e-5)
    xhat = layer_norm64(x64, 1.0, 0.0)
    rstd = 1 / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
    dh = g64 * w64
    want = rstd * (dh - dh.mean(-1, keepdims=True) - xhat * (dh * xhat).mean(-1, keepdims=True))
    assert_same(dx.numpy(), want, rtol=1e-4, atol=1e-5)
    assert_same(dw.numpy(), (g64 * xhat).sum(0), rtol=1e-4, atol=1e-5)
    assert_same(db.numpy(), g64.sum(0), rtol=1e-4, atol=1e-5)


def test_torch_values_at_the_edges():
    # torch.softmax([[-inf, 0], [-inf, -inf]], -1) = [[0, 1], [nan, nan]];
    # torch.layer_norm of rows of one element = 0 (then the bias)
    x = fg.tensor([[-np.inf, 0.0], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(x.softmax(-1).numpy(), [[0.0, 1.0], [np.nan, np.nan]])
    np.testing.assert_array_equal(x.log_softmax(-1).numpy(), [[-np.inf, 0.0], [np.nan, np.nan]])
    one = fg.tensor([[5.0], [-2.0]])
    np.testing.assert_array_equal(F.layer_norm(one, (1,)).numpy(), [[0.0], [0.0]])
    assert fg.zeros(3, 0).softmax(-1).shape == (3, 0)


@pytest.mark.usefixtures("emulated")
def test_the_emulated_device_computes_the_same_row_kernels():
    arrays = _arrays(special_rows(8, 24))
    cpu = [t.detach().numpy() for t in _row_programs(*_inputs(arrays), every=False)]
    got = [t.detach().cpu().numpy() for t in _row_programs(*_inputs(arrays, "cuda"), every=False)]
    for a, b in zip(got, cpu):
        assert_same(a, b, rtol=2e-4, atol=2e-5)


def test_a_broadcast_read_by_another_reduction_is_not_counted_as_hoisted():
    """A value broadcast over trailing axes is computed once per row only in a kernel that
    loops over the broadcast shape; a reduction over other axes (a convolution's weight
    gradient reading the output gradient across the kernel's positions) evaluates it at
    every element, so an expensive producer is stored, not recomputed per position (it
    was inlined 9 times here, and LeNet's step took twice as long)."""
    from fusegrad.pipeline.schedule import schedule
    from fusegrad.runtime.engine import engine

    x = fg.from_numpy(RNG.standard_normal((64, 32)).astype(np.float32))
    w = fg.from_numpy(RNG.standard_normal((64, 32, 9)).astype(np.float32))
    y = ((x * 0.5).exp() * 2.0 + 1.0).sqrt()  # transcendental: dear to recompute
    z = (y.reshape(64, 32, 1).expand(64, 32, 9) * w).sum((0, 1))
    items = schedule([z.node], engine.has_value_predicate())
    assert any(item.root.shape == (64, 32) for item in items), [i.root.shape for i in items]
    want = (np.sqrt(np.exp(x.numpy() * 0.5) * 2 + 1)[..., None] * w.numpy()).sum((0, 1))
    np.testing.assert_allclose(z.numpy(), want, rtol=1e-4)


def test_a_value_hoisted_to_a_hoisted_reductions_level_follows_what_it_reads():
    """The gradient of |grad |x|_3^2|^2: the norm's sum is hoisted out of the loop, and a
    value computed from it inside its own loop is hoisted to the same level. It must land
    in the reduction's block after what it reads (placed at the level itself it came first,
    and the LLVM render failed on an undefined name). Against central differences of the
    closed form in float64."""
    x0 = np.array([0.3, -1.2, 2.0, 0.7])

    def squared_gradient(x):  # grad of |x|_3^2 is 2 |x| x / |x|_3, squared and summed
        n = (np.abs(x) ** 3).sum() ** (1 / 3)
        return ((2 * np.abs(x) * x / n) ** 2).sum()

    want = np.zeros_like(x0)
    for i in range(x0.size):
        e = np.zeros_like(x0)
        e[i] = 1e-6
        want[i] = (squared_gradient(x0 + e) - squared_gradient(x0 - e)) / 2e-6
    x = fg.tensor(x0, requires_grad=True)
    (g,) = fg.grad((x.norm(p=3) ** 2).sum(), [x], create_graph=True)
    (h,) = fg.grad((g * g).sum(), [x])
    np.testing.assert_allclose(h.numpy(), want, rtol=1e-6, atol=1e-9)
