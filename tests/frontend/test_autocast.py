"""fg.autocast (issue 30): the context manager and decorator, nesting, per-thread state,
torch's errors and warnings, values and gradients against float32 and against explicit
casts, special points, the jit, and the cast cache. The op policy itself (which op gives
which dtype) is tests/frontend/test_autocast_policy.py."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.autocast import _state as autocast_state
from fusegrad.nn import functional as F

# fg.autocast("cpu") regions: their tensors on the CPU whatever FUSEGRAD_TEST_DEVICE says
pytestmark = pytest.mark.cpu_device

EPS = {"bfloat16": 2.0**-8, "float16": 2.0**-11}  # half an ulp at 1: one rounding's error


def _f32(t):
    return t.float().numpy().astype(np.float64)


def _data(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- the API


def test_a_region_turns_autocast_on_and_restores_it():
    assert not fg.is_autocast_enabled("cpu") and not fg.is_autocast_enabled()
    assert fg.get_autocast_dtype("cpu") is fg.bfloat16
    assert fg.get_autocast_dtype("cuda") is fg.float16
    with fg.autocast("cpu"):
        assert fg.is_autocast_enabled("cpu") and not fg.is_autocast_enabled("cuda")
        with fg.autocast("cpu", dtype=fg.float16):
            assert fg.get_autocast_dtype("cpu") is fg.float16
            assert (fg.ones(2, 2) @ fg.ones(2, 2)).dtype is fg.float16
        with fg.autocast("cpu", enabled=False):  # an inner enabled=False turns it off
            assert not fg.is_autocast_enabled("cpu")
            assert fg.get_autocast_dtype("cpu") is fg.bfloat16  # the dtype stays (torch's)
            assert (fg.ones(2, 2) @ fg.ones(2, 2)).dtype is fg.float32
        assert (fg.ones(2, 2) @ fg.ones(2, 2)).dtype is fg.bfloat16
    assert not fg.is_autocast_enabled("cpu")
    assert (fg.ones(2, 2) @ fg.ones(2, 2)).dtype is fg.float32


def test_the_state_is_restored_when_the_region_raises():
    with pytest.raises(ZeroDivisionError), fg.autocast("cpu"):
        raise ZeroDivisionError
    assert not fg.is_autocast_enabled("cpu")


def test_decorator_and_amp_spelling():
    assert fg.amp.autocast is fg.autocast

    @fg.amp.autocast("cpu")
    def f(a, b):
        return a @ b, fg.is_autocast_enabled("cpu")

    out, on = f(fg.ones(2, 3), fg.ones(3, 2))
    assert out.dtype is fg.bfloat16 and on
    assert not fg.is_autocast_enabled("cpu")
    region = fg.autocast("cpu")  # one object entered again and again (and nested)
    with region, region:
        assert fg.is_autocast_enabled("cpu")
    assert not fg.is_autocast_enabled("cpu")


def test_autocast_state_is_per_thread():
    seen = {}

    def worker():
        seen["inherited"] = fg.is_autocast_enabled("cpu")
        with fg.autocast("cpu", dtype=fg.float16):
            seen["own"] = (fg.ones(2, 2) @ fg.ones(2, 2)).dtype
            barrier.wait()  # the main thread checks while this region is open
            barrier.wait()

    barrier = threading.Barrier(2)
    with fg.autocast("cpu"):
        t = threading.Thread(target=worker)
        t.start()
        barrier.wait()
        assert fg.get_autocast_dtype("cpu") is fg.bfloat16  # the worker's region is its own
        assert (fg.ones(2, 2) @ fg.ones(2, 2)).dtype is fg.bfloat16
        barrier.wait()
        t.join()
    assert seen == {"inherited": False, "own": fg.float16}


def test_one_region_object_entered_by_two_threads_restores_each():
    region, barrier, seen = fg.autocast("cpu", dtype=fg.float16), threading.Barrier(2), []

    def worker():
        with fg.autocast("cpu"):  # an outer bfloat16 region of the worker's own
            barrier.wait()  # (1) the main thread is inside `region` already
            with region:
                barrier.wait()  # (2) both inside; the main thread leaves first
                barrier.wait()  # (3)
            seen.append((fg.is_autocast_enabled("cpu"), fg.get_autocast_dtype("cpu")))

    t = threading.Thread(target=worker)
    t.start()
    with region:
        barrier.wait()  # (1)
        barrier.wait()  # (2)
    # what this thread had before, not what the worker had before its entry
    assert not fg.is_autocast_enabled("cpu") and fg.get_autocast_dtype("cpu") is fg.bfloat16
    barrier.wait()  # (3)
    t.join()
    assert seen == [(True, fg.bfloat16)]


def test_errors_and_warnings_are_torchs():
    with pytest.raises(ValueError, match="device_type"):
        fg.autocast(0)
    with pytest.raises(RuntimeError, match="xyz"):
        fg.autocast("xyz")
    with pytest.raises(RuntimeError, match="mps"):  # a device type torch has, fusegrad not
        fg.autocast("mps")
    with pytest.raises(RuntimeError):
        fg.is_autocast_enabled("xyz")
    with pytest.raises(TypeError, match="bool"):
        fg.autocast("cpu", enabled=1)
    for dtype in (fg.float32, fg.float64):
        with pytest.warns(UserWarning, match="Disabling autocast"), fg.autocast("cpu", dtype):
            assert not fg.is_autocast_enabled("cpu")
            assert fg.get_autocast_dtype("cpu") is dtype  # as torch: set, though disabled
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with fg.autocast("cpu", enabled=False, dtype=fg.float32):  # disabled: no warning
            pass
    with fg.autocast("cpu:0"):  # an index is accepted and ignored, as torch
        assert fg.is_autocast_enabled("cpu")


def test_binary_cross_entropy_is_banned_under_cuda_autocast_only_on_cuda_tensors():
    p, y = fg.tensor([0.25, 0.75]), fg.tensor([0.0, 1.0])
    with fg.autocast("cpu"):
        assert F.binary_cross_entropy(p, y).dtype is fg.float32  # the cpu's fp32 list


# ---------------------------------------------------------------- values and gradients


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_region_equals_explicit_casts_bit_for_bit_with_gradients(dtype):
    low = getattr(fg, dtype)
    xs, ws, bs = _data(0, 5, 7), _data(1, 3, 7), _data(2, 3)
    outs, grads = [], []
    for explicit in (False, True):
        x = fg.tensor(xs, requires_grad=True)
        w, b = fg.tensor(ws, requires_grad=True), fg.tensor(bs, requires_grad=True)
        if explicit:
            y = F.linear(x.to(low), w.to(low), b.to(low))
            loss = F.mse_loss(y.float(), fg.zeros(5, 3))
        else:
            with fg.autocast("cpu", dtype=low):
                y = F.linear(x, w, b)
                loss = F.mse_loss(y, fg.zeros(5, 3))
        assert y.dtype is low and loss.dtype is fg.float32
        loss.backward()
        outs.append((_f32(y), float(loss)))
        grads.append([_f32(t.grad) for t in (x, w, b)])
        assert all(t.grad.dtype is fg.float32 for t in (x, w, b))  # float32 leaves
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    assert outs[0][1] == outs[1][1]
    for a, e in zip(grads[0], grads[1]):
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_small_convnet_is_float32s_to_the_16_bit_precision(dtype):
    fg.manual_seed(0)
    net = fg.nn.Sequential(
        fg.nn.Conv2d(1, 4, 3), fg.nn.ReLU(), fg.nn.Flatten(), fg.nn.Linear(4 * 6 * 6, 5)
    )
    x, target = fg.tensor(_data(3, 8, 1, 8, 8)), fg.tensor(np.arange(8) % 5)
    results = []
    for region in (fg.autocast("cpu", enabled=False), fg.autocast("cpu", getattr(fg, dtype))):
        net.zero_grad()
        with region:
            logits = net(x)
            loss = F.cross_entropy(logits, target)
        loss.backward()
        results.append((_f32(logits), float(loss), [_f32(p.grad) for p in net.parameters()]))
        assert all(p.grad.dtype is fg.float32 for p in net.parameters())
    (ref, ref_loss, ref_grads), (low, low_loss, low_grads) = results
    eps = EPS[dtype]
    # each product is of rounded operands (2 roundings), the sum of K = 9 or 144 of them in
    # float32, then one rounding of the output: within a few eps of the scale
    scale = np.abs(ref).max()
    assert np.abs(low - ref).max() <= 8 * eps * scale
    assert abs(low_loss - ref_loss) <= 8 * eps * abs(ref_loss)
    for g, r in zip(low_grads, ref_grads):
        assert np.abs(g - r).max() <= 16 * eps * np.abs(r).max()


def test_gradients_of_16_bit_leaves_stay_16_bit():
    w = fg.tensor(_data(4, 3, 2), requires_grad=True)
    h = fg.tensor(_data(5, 4, 3), dtype=fg.bfloat16, requires_grad=True)
    with fg.autocast("cpu", dtype=fg.float16):
        y = h @ w  # both cast to float16
        assert y.dtype is fg.float16
    y.float().sum().backward()
    assert h.grad.dtype is fg.bfloat16 and w.grad.dtype is fg.float32
    expected = np.ones((4, 2), np.float32) @ _f32(w.to(fg.float16)).T
    np.testing.assert_allclose(_f32(h.grad), expected, rtol=2 * EPS["bfloat16"])


def test_float64_is_never_cast():
    a = fg.ones(2, 2, dtype=fg.float64)
    with fg.autocast("cpu"):
        assert (a @ a).dtype is fg.float64
        assert F.linear(a, a).dtype is fg.float64
        assert (fg.ones(2, 2) @ fg.ones(2, 2, dtype=fg.int64).float()).dtype is fg.bfloat16


def test_integer_and_bool_inputs_are_not_cast():
    i = fg.tensor([[1, 2], [3, 4]])
    with fg.autocast("cpu"):
        assert (i @ i).dtype is fg.int64
        assert fg.cat([i, i]).dtype is fg.int64


# ---------------------------------------------------------------- special points


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_special_points_round_as_the_explicit_cast_does(dtype):
    low = getattr(fg, dtype)
    special = [0.0, -0.0, 1.0, -1.0, 0.5, float("inf"), float("-inf"), float("nan"), 1e-40]
    special += [70000.0, 65504.0, 3.0e38, 1.0 + 2.0**-9]  # float16 overflow, a tie
    col = fg.tensor(special).reshape(-1, 1)
    one = fg.ones(1, 1, requires_grad=True)
    with fg.autocast("cpu", dtype=low):
        y = col @ one  # each value times 1: the cast is all that happens
    expected = col.to(low)
    np.testing.assert_array_equal(_f32(y), _f32(expected))  # NaN == NaN here, -0.0 sign:
    assert np.array_equal(np.signbit(_f32(y)), np.signbit(_f32(expected)))
    y.float().sum().backward()  # d/d one of sum(col * one): sum of col as 16-bit values
    assert one.grad.dtype is fg.float32


def test_empty_and_zero_dim_inputs():
    with fg.autocast("cpu"):
        e = fg.ones(0, 3) @ fg.ones(3, 2)
        assert e.dtype is fg.bfloat16 and e.shape == (0, 2)
        d = fg.tensor([1.0, 2.0]).dot(fg.tensor([3.0, 4.0]))  # dot: not on the cpu's list
        assert d.dtype is fg.float32 and d.shape == ()
        m = fg.tensor([1.0, 2.0]) @ fg.tensor([3.0, 4.0])  # matmul of 1-d: 0-d, 16 bits
        assert m.dtype is fg.bfloat16 and m.shape == () and m.item() == 11.0
        loss = F.mse_loss(fg.tensor(2.0, dtype=fg.bfloat16), fg.tensor(1.0))  # 0-d, fp32
        assert loss.dtype is fg.float32 and loss.item() == 1.0
        c = fg.cat([fg.ones(0, dtype=fg.bfloat16), fg.ones(2)])  # promote: float32
        assert c.dtype is fg.float32 and c.tolist() == [1.0, 1.0]


def test_float32_ops_at_special_points_are_the_explicit_casts():
    bad = [float("inf"), -0.0, float("nan"), 1.0, -1.0, 0.0]
    a = fg.tensor(bad, dtype=fg.bfloat16, requires_grad=True)
    b = fg.tensor([1.0, 0.0, 0.0, 1.0, 1.0, -0.0])
    with fg.autocast("cpu"):
        got = F.mse_loss(a, b, reduction="none")  # on the cpu's float32 list
    assert got.dtype is fg.float32
    a2 = fg.tensor(bad, dtype=fg.bfloat16, requires_grad=True)
    want = F.mse_loss(a2.float(), b, reduction="none")
    np.testing.assert_array_equal(_f32(got), _f32(want))
    got.sum().backward()
    want.sum().backward()
    assert a.grad.dtype is fg.bfloat16  # the 16-bit leaf's gradient: 16 bits
    np.testing.assert_array_equal(_f32(a.grad), _f32(a2.grad))
    assert _f32(a.grad).tolist()[:1] + _f32(a.grad).tolist()[3:] == [np.inf, 0.0, -4.0, 0.0]


def test_cuda_autocast_without_a_cuda_device_warns_and_disables():
    from fusegrad.runtime.backend import get_backend

    with fg.config.override(cuda="pycuda"):
        if get_backend("cuda").why_unavailable() is None:  # a GPU: the region is on
            with fg.autocast("cuda"):
                assert fg.is_autocast_enabled("cuda")
        else:
            with pytest.warns(UserWarning, match="Disabling autocast"), fg.autocast("cuda"):
                assert not fg.is_autocast_enabled("cuda")


# ---------------------------------------------------------------- the jit and the cache


def test_jit_records_a_region_apart_from_float32():
    @fg.jit
    def step(x, w):
        return x @ w

    x, w = fg.ones(2, 3), fg.ones(3, 2)
    for _ in range(4):  # past the recording: replays
        assert step(x, w).dtype is fg.float32
        with fg.autocast("cpu"):
            assert step(x, w).dtype is fg.bfloat16
        with fg.autocast("cpu", dtype=fg.float16):
            assert step(x, w).dtype is fg.float16


def test_a_jitted_training_step_under_autocast_matches_eager():
    losses = {}
    for jit in (False, True):
        fg.manual_seed(0)
        lin = fg.nn.Linear(4, 3)
        opt = fg.optim.SGD(lin.parameters(), lr=0.1)
        x = fg.tensor(_data(6, 8, 4))
        y = fg.tensor(np.arange(8) % 3)

        def step(x, y, lin=lin, opt=opt):
            with fg.autocast("cpu"):
                loss = F.cross_entropy(lin(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            return loss

        run = fg.jit(step) if jit else step
        losses[jit] = [float(run(x, y)) for _ in range(6)]
        assert lin.weight.dtype is fg.float32
    assert losses[True] == losses[False]


def test_a_parameter_is_cast_once_per_region_until_it_changes():
    w = fg.tensor(_data(7, 3, 3), requires_grad=True)
    x = fg.ones(2, 3)
    with fg.autocast("cpu"):
        x @ w
        first = autocast_state.cache[id(w)][3]
        x @ w
        assert autocast_state.cache[id(w)][3] is first  # reused
        with fg.no_grad():
            w += 1.0  # an update: the old cast is stale
        y = x @ w
        assert autocast_state.cache[id(w)][3] is not first
        np.testing.assert_array_equal(_f32(y), _f32(x.bfloat16() @ w.bfloat16()))
    assert not autocast_state.cache  # cleared when the outermost region ends
    with fg.autocast("cpu", cache_enabled=False):
        x @ w
        assert not autocast_state.cache


# ---------------------------------------------------------------- live torch (cpu)


def test_values_and_gradient_dtypes_are_live_torchs():
    torch = pytest.importorskip("torch")
    xs, ws, bs = _data(8, 6, 5), _data(9, 4, 5), _data(10, 4)
    target = np.arange(6) % 4
    got = {}
    for name, lib, Fm in (("fg", fg, F), ("torch", torch, torch.nn.functional)):
        x = lib.tensor(xs)
        w, b = lib.tensor(ws, requires_grad=True), lib.tensor(bs, requires_grad=True)
        with (fg.autocast if lib is fg else torch.autocast)("cpu"):
            y = Fm.linear(x, w, b)
            loss = Fm.cross_entropy(y, lib.tensor(target))
        loss.backward()
        got[name] = (
            str(y.dtype).split(".")[-1],
            str(loss.dtype).split(".")[-1],
            str(w.grad.dtype).split(".")[-1],
            y.float().detach().numpy(),
            w.grad.float().numpy(),
        )
    f, t = got["fg"], got["torch"]
    assert f[:3] == t[:3] == ("bfloat16", "float32", "float32")
    np.testing.assert_allclose(f[3], t[3], atol=4 * EPS["bfloat16"] * np.abs(t[3]).max())
    np.testing.assert_allclose(f[4], t[4], atol=8 * EPS["bfloat16"] * np.abs(t[4]).max())
