"""The cuda device end to end, on the CPU emulator of the generated CUDA C (or on a real
GPU, when the whole suite runs there: `FUSEGRAD_TEST_DEVICE=cuda` with PyCUDA).

Every test here runs with `FUSEGRAD_CUDA=emulate` (set through `fg.config`), so the
engine renders each kernel as CUDA C, compiles it with the host C++ compiler against
the emulator's header and runs it with real threads per block: the same path as a
GPU, minus PyCUDA. The answers are checked against the CPU device, numpy and the
reference evaluator (`ir/reference.py`). The whole suite runs on the device with
`FUSEGRAD_TEST_DEVICE=cuda FUSEGRAD_CUDA=emulate` (tests/conftest.py); this module
is the representative subset CI runs every time. Where the suite runs on a real GPU
(`scripts/gpu.sh`), these tests run there instead of switching to the emulator.
"""

from __future__ import annotations

import os
import re
import sys

import ml_dtypes
import numpy as np
import pytest
from _emulated import ON_GPU, emulated  # noqa: F401  (a fixture)
from hypothesis import given, settings
from hypothesis import strategies as st

import fusegrad as fg
from fusegrad.ir.reference import evaluate_many
from fusegrad.nn import functional as F
from fusegrad.runtime import cuda as runtime_cuda

HERE = os.path.basename(__file__)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# every test here on the cuda device that `_emulated.emulated` sets up
pytestmark = pytest.mark.usefixtures("emulated")


def host(t: fg.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy()


# ---------------------------------------------------------------- the device API


def test_cuda_is_available_under_the_emulator():
    assert fg.cuda.is_available()
    assert fg.cuda.device_count() >= 1 if ON_GPU else fg.cuda.device_count() == 1
    assert fg.cuda.why_unavailable() is None
    assert ("emulator" in fg.cuda.get_device_name()) != ON_GPU


def test_creation_ops_put_their_tensors_on_the_device():
    x = fg.ones(2, 3, device="cuda")
    made = {
        "zeros": fg.zeros(2, device="cuda"),
        "ones": x,
        "full": fg.full((2,), 3.0, device=fg.device("cuda:0")),
        "empty": fg.empty(2, device="cuda"),
        "arange": fg.arange(4, device="cuda"),
        "rand": fg.rand(3, device="cuda"),
        "randn": fg.randn(3, device="cuda"),
        "eye": fg.eye(2, device="cuda"),
        "linspace": fg.linspace(0, 1, 3, device="cuda"),
        "tensor": fg.tensor([1, 2], device="cuda"),
        "from_numpy": fg.from_numpy(np.zeros(2), device="cuda"),
        "zeros_like": fg.zeros_like(x),
        "full_like": fg.full_like(x, 2),
        "rand_like": fg.rand_like(x),
        "randn_like": fg.randn_like(x),
        "randint": fg.randint(0, 5, (3,), device="cuda"),
        "op": x * 2 + 1,
        "reduction": x.sum(1),
    }
    for name, t in made.items():
        assert t.device == "cuda:0" and t.device == "cuda" and t.is_cuda, name
        assert t.device.type == "cuda" and t.device.index == 0, name
    assert fg.zeros_like(x, device="cpu").device == "cpu"
    assert made["arange"].tolist() == [0, 1, 2, 3]
    assert made["full"].tolist() == [3.0, 3.0] and made["eye"].tolist() == [[1, 0], [0, 1]]


def test_random_numbers_are_the_same_on_both_devices():
    fg.manual_seed(3)
    cpu = fg.randn(1000).numpy()
    fg.manual_seed(3)
    gpu = host(fg.randn(1000, device="cuda"))
    np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)


def test_to_moves_values_both_ways_with_dtypes():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    t = fg.tensor(a)
    c = t.to("cuda")
    assert c.device == "cuda:0" and c.to("cuda") is c and c.cuda() is c
    assert t.cuda().device == "cuda" and t.cuda(0).device == "cuda:0"
    assert t.to(c).device == "cuda"  # another tensor's device (and dtype)
    d = c.to("cpu", fg.float64)
    assert d.device == "cpu" and d.dtype is fg.float64
    np.testing.assert_array_equal(d.numpy(), a.astype(np.float64))
    np.testing.assert_array_equal(c.to(fg.int64).cpu().numpy(), a.astype(np.int64))
    e = t.to(device="cuda", dtype=fg.float64)
    assert e.device == "cuda" and e.dtype is fg.float64
    np.testing.assert_array_equal(c.cpu().numpy(), a)
    lazy = t.exp() * 2  # a pending graph is computed on its own device, then copied
    np.testing.assert_allclose(host(lazy.to("cuda")), np.exp(a) * 2, rtol=1e-6)


def test_a_device_buffer_is_written_whole_from_the_host():
    buf = runtime_cuda.DeviceBuffer.from_numpy(np.zeros(4), fg.float32)
    buf.write(np.arange(4))
    np.testing.assert_array_equal(buf.numpy(), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="3 elements into a buffer of 4"):
        buf.write(np.ones(3))


def test_a_language_models_batches_cut_at_new_offsets_compile_nothing_new():
    # `source[i : i + bptt]` of a device tensor is a view of its memory at an offset that
    # is data (runtime/cuda.py DeviceBufferView), not a SHRINK naming the offset, so each
    # batch runs the plan of the first; odd offsets leave the views' addresses off 16-byte
    # alignment, where the kernels take their one-at-a-time paths
    from fusegrad.runtime.engine import engine

    data = np.arange(-3000.0, 3000.0, dtype=np.float32).reshape(1500, 4) / 7
    data[5, 1], data[6, 2], data[7, 3] = -0.0, np.inf, np.nan
    source = fg.tensor(data, device="cuda").realize()
    tokens = fg.tensor(np.arange(1500) % 50, device="cuda").realize()
    w = fg.tensor(np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2), device="cuda")
    table = fg.tensor(np.linspace(-2, 2, 50, dtype=np.float32), device="cuda")

    def batch(i, n=300):
        x = source[i : i + n]
        return (x @ w).sum(0), (x * 2 + 1).amax(1), table[tokens[i : i + n]].sum()

    def want(i, n=300):
        x = data[i : i + n].astype(np.float64)
        t = np.linspace(-2, 2, 50, dtype=np.float32)[np.arange(i, i + n) % 50]
        wt = np.linspace(-1, 1, 8).reshape(4, 2)
        return (x @ wt).sum(0), (x * 2 + 1).max(1), t.sum()

    for i in (0, 1):
        [host(r) for r in batch(i)]  # the plans, compiled
    before = engine.stats["scheduled"]
    for i in (2, 3, 5, 8, 13, 1000, 1200):  # 1200: the last 300 rows
        for got, ref in zip(batch(i), want(i)):
            np.testing.assert_allclose(host(got), ref, rtol=1e-5, atol=1e-4)
    assert engine.stats["scheduled"] == before
    view = source[3:5].node.arg
    assert isinstance(view, runtime_cuda.DeviceBufferView) and view.base is source.node.arg
    assert view.ptr == source.node.arg.ptr + 3 * 4 * 4 and view.size == 8


def test_a_block_view_keeps_its_device_memory_alive_and_reads_back_exactly():
    a = np.array([[0.0, -0.0], [np.nan, np.inf], [-np.inf, 1.0], [-1.0, 0.5]], np.float32)
    x = fg.tensor(a, device="cuda").realize()
    rows = [x[k] for k in range(4)]
    del x
    for _ in range(3):  # allocations that would reuse freed memory of that size
        fg.tensor(np.zeros((4, 2), np.float32), device="cuda").realize()
    for k, row in enumerate(rows):
        assert host(row).tobytes() == a[k].tobytes()


def test_a_device_buffer_collected_at_interpreter_exit_is_quiet(monkeypatch):
    """At exit a module's globals are None before its last objects go: a GPU buffer's
    finalizer then leaves the count alone instead of raising (seen on an H200)."""

    class Owner:
        def free(self, mem, size, dtype):
            pass

    buf = object.__new__(runtime_cuda.DeviceBuffer)
    buf.counted, buf.owner, buf.mem, buf.size, buf.dtype = True, Owner(), "mem", 4, fg.float32
    monkeypatch.setattr(runtime_cuda, "live_buffers", None)
    try:
        buf.__del__()
    finally:
        buf.counted = False  # its collection later must not count it again
    assert runtime_cuda.live_buffers is None


def test_numpy_of_a_device_tensor_is_refused_as_in_pytorch():
    c = fg.tensor([1.5, -2.0], device="cuda")
    with pytest.raises(TypeError, match=r"can't convert cuda:0 device type tensor to numpy"):
        c.numpy()
    with pytest.raises(TypeError, match="Tensor.cpu()"):
        np.asarray(c)
    assert c.tolist() == [1.5, -2.0] and c[0].item() == 1.5 and float(c.sum()) == -0.5
    assert repr(c) == "tensor([ 1.5000, -2.0000], device='cuda:0')"  # torch's printing
    assert bool(c[0] > 0) and int(c[1]) == -2


def _mixing_error(op_name: str) -> str:
    return (
        rf"{op_name}: Expected all tensors to be on the same device, but found at least two "
        rf"devices, (cuda:0 and cpu|cpu and cuda:0)! at {HERE}:\d+"
    )


def test_mixing_devices_raises_at_the_users_line_naming_both():
    c, x = fg.ones(3, device="cuda"), fg.ones(3)
    with pytest.raises(fg.DeviceError, match=_mixing_error("add")) as info:
        c + x  # noqa: B018
    assert isinstance(info.value, RuntimeError)  # what PyTorch raises
    with pytest.raises(fg.DeviceError, match=_mixing_error("mul")):
        x * c  # noqa: B018
    with pytest.raises(fg.DeviceError, match=_mixing_error(r"\w+")):
        fg.ones(2, 3, device="cuda") @ fg.ones(3, 2)  # noqa: B018
    with pytest.raises(fg.DeviceError, match=_mixing_error(r"\w+")):
        fg.where(c > 0, x, c)
    with pytest.raises(fg.DeviceError, match=_mixing_error(r"\w+")):
        fg.cat([c, x])
    with pytest.raises(fg.DeviceError, match=_mixing_error(r"\w+")):
        fg.zeros(3, device="cuda") + fg.zeros(3)  # two constants: still two devices
    assert (c + 2).device == "cuda" and (2 * c - c.sum()).device == "cuda"


def test_mixing_devices_in_a_macro_names_the_library_op():
    """linear and cross_entropy are one macro node each (ir/macro.py): the error names them."""
    from fusegrad.nn import functional as F

    with pytest.raises(fg.DeviceError, match=_mixing_error("linear")):
        F.linear(fg.ones(4, 5, device="cuda"), fg.ones(3, 5))
    with pytest.raises(fg.DeviceError, match=_mixing_error("cross_entropy")):
        F.cross_entropy(fg.ones(4, 3, device="cuda"), fg.tensor([0, 1, 2, 1]))
    out = F.cross_entropy(
        F.linear(fg.ones(4, 5, device="cuda"), fg.ones(3, 5, device="cuda")),
        fg.tensor([0, 1, 2, 1], device="cuda"),
    )
    assert out.device == "cuda" and abs(out.item() - np.log(3.0)) < 1e-6


def test_the_error_names_the_line_that_mixed_the_devices():
    c, x = fg.ones(3, device="cuda"), fg.ones(3)
    try:
        c - x
    except fg.DeviceError as e:
        where = int(re.search(rf"{HERE}:(\d+)", str(e)).group(1))
    assert where == sys._getframe().f_lineno - 3


def test_moving_to_the_device_is_differentiable():
    x = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = (x * x).cuda()
    assert y.device == "cuda" and y.requires_grad and not y.is_leaf
    (y * 3).sum().backward()
    # d/dx sum(3 x^2) = 6x, moved back to the CPU where x lives
    assert x.grad.device == "cpu" and x.grad.tolist() == [6.0, 12.0, 18.0]


def test_moving_to_the_cpu_is_differentiable():
    w = fg.tensor([1.0, -2.0], device="cuda", requires_grad=True)
    for move in (lambda t: t.cpu(), lambda t: t.to("cpu")):
        w.grad = None
        z = move(w.exp())
        assert z.device == "cpu" and z.requires_grad
        (z * fg.tensor([1.0, 2.0])).sum().backward()
        assert w.grad.device == "cuda"
        np.testing.assert_allclose(host(w.grad), [np.e, 2 * np.exp(-2.0)], rtol=1e-6)


def test_a_move_there_and_back_and_second_derivatives():
    a = fg.tensor([2.0], requires_grad=True)
    b = (a.cuda() ** 3).cpu().sum()
    (g,) = fg.grad(b, a, create_graph=True)
    assert g.device == "cpu" and g.tolist() == [12.0]  # 3 a^2
    (g2,) = fg.grad(g.sum(), a)
    assert g2.tolist() == [12.0]  # 6 a


def test_a_differentiable_move_inside_jit_is_refused_at_the_users_line():
    w = fg.tensor([1.0, 2.0], requires_grad=True)

    @fg.jit
    def f(x):
        return (w.cuda() * x).sum()

    with pytest.raises(fg.FusegradError, match=rf"inside a jitted function cannot be.*{HERE}"):
        for _ in range(4):  # the first calls run eagerly; a later one records
            f(fg.ones(2, device="cuda"))


def test_moves_under_no_grad_or_detached_are_leaves():
    w = fg.randn(3, requires_grad=True)
    assert w.detach().to("cuda").device == "cuda"
    with fg.no_grad():
        c = w.cuda()
    assert c.device == "cuda" and not c.requires_grad and c.is_leaf


def test_a_cpu_model_trained_on_device_inputs_through_a_move():
    fg.manual_seed(0)
    lin = fg.nn.Linear(3, 1)
    opt = fg.optim.SGD(lin.parameters(), lr=0.1)
    x = fg.tensor([[1.0, 2.0, 3.0]], device="cuda")
    before = lin.weight.numpy().copy()
    for _ in range(2):  # the second step takes the step cache's path
        opt.zero_grad()
        loss = (lin.weight.cuda() * x).sum() + lin.bias.cuda().sum()
        loss.backward()
        assert lin.weight.grad.device == "cpu" and lin.weight.grad.tolist() == [[1.0, 2.0, 3.0]]
        opt.step()
    np.testing.assert_allclose(lin.weight.numpy(), before - 0.2 * np.array([[1.0, 2.0, 3.0]]))


def test_default_device_makes_creation_ops_use_it():
    fg.set_default_device("cuda")
    assert fg.get_default_device() == "cuda:0"
    assert fg.zeros(2).device == "cuda" and fg.tensor([1.0]).device == "cuda"
    assert fg.randn(2).device == "cuda" and fg.arange(3).device == "cuda"
    fg.set_default_device("cpu")
    assert fg.zeros(2).device == "cpu"
    with pytest.raises(fg.DeviceError, match=rf"cuda:1 does not exist: 1 CUDA device.*{HERE}"):
        fg.set_default_device("cuda:1")


def test_graph_dot_names_a_device_graphs_kernels_as_they_run():
    x = fg.randn(8, 5, device="cuda").realize()
    y = x.softmax(0)  # column statistics: three kernels
    drawn = re.findall(r'subgraph cluster_\d+ \{\n    label="([^"\\]*)\\n', fg.graph_dot(y))
    assert drawn == [k.name for k in fg.kernels(y)] and len(drawn) == 3


def test_kernels_of_a_device_tensor_are_cuda_c():
    y = (fg.randn(64, device="cuda") * 2).exp().sum()
    (k,) = fg.kernels(y)
    assert "__global__" in k.cuda_c and k.cuda_c == k.compiled.source


def test_a_bias_gradient_stores_the_output_gradient_on_the_device():
    # rule 8 (pipeline/schedule.py) on the device: g = c * (1 - tanh(y)^2), read by the weight
    # gradient, is stored by the bias gradient's sum; the values are the CPU's
    rng = np.random.default_rng(19)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in [(64, 32), (16, 32), (16,)]]
    c = rng.standard_normal((64, 16)).astype(np.float32)
    c[0, 0], c[1, 1], c[2, 2] = -0.0, np.inf, np.nan
    results = {}
    for device in ("cpu", "cuda"):
        x, w, b = (fg.tensor(a, device=device, requires_grad=True) for a in arrays)
        y = F.linear(x, w, b).realize()
        gw, gb = fg.grad((y.tanh() * fg.tensor(c, device=device)).sum(), [w, b])
        ks = fg.kernels(gw, gb)
        assert len(ks) == 2 and "from inside its loops" in ks[0].reason, ks[0].reason
        results[device] = [host(gw), host(gb)]
    for got, want in zip(results["cuda"], results["cpu"]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize("n", [1, 31, 1024, 1025, 1 << 20])
def test_reductions_of_every_length(n):
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    c = fg.tensor(a, device="cuda")
    tol = dict(rtol=1e-5, atol=1e-6 * np.sqrt(n))
    np.testing.assert_allclose(c.sum().item(), a.astype(np.float64).sum(), **tol)
    np.testing.assert_allclose(c.mean().item(), a.astype(np.float64).mean(), rtol=1e-5, atol=1e-6)
    assert c.amax().item() == a.max() and c.amin().item() == a.min()
    if n <= 1025:  # along an axis too: rows of a matrix, and columns
        m = rng.standard_normal((3, n)).astype(np.float32)
        cm = fg.tensor(m, device="cuda")
        np.testing.assert_allclose(host(cm.sum(1)), m.astype(np.float64).sum(1), **tol)
        np.testing.assert_allclose(host(cm.amax(0)), m.max(0))
        np.testing.assert_allclose(host(cm.softmax(1)), host(fg.tensor(m).softmax(1)), rtol=1e-5)


def test_matmul_and_integer_ops_match_numpy():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((37, 70)).astype(np.float32)
    b = rng.standard_normal((70, 45)).astype(np.float32)
    got = host(fg.tensor(a, device="cuda") @ fg.tensor(b, device="cuda"))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    i = rng.integers(-100, 100, (5, 7))
    ci = fg.tensor(i, device="cuda")
    np.testing.assert_array_equal(host(ci * 3 - ci.sum(0)), i * 3 - i.sum(0))
    np.testing.assert_array_equal(host(ci.argmax(1)), i.argmax(1))
    np.testing.assert_array_equal(host(ci[[0, 2], 1:5:2]), i[[0, 2], 1:5:2])


# the random programs of the autodiff tests, on the device, forward and backward
sys.path.insert(0, os.path.join(ROOT, "tests", "frontend"))
import test_autodiff_random as programs  # noqa: E402


@settings(max_examples=20, **programs.SETTINGS)
@given(st.data())
def test_random_programs_forward_and_backward_match_the_reference(data):
    fg.set_default_device("cuda")  # the program's leaves and weights are made there
    p = programs.Program(data)
    ndim = data.draw(st.integers(0, 3), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    out = programs.grow(p, p.leaf(shape), data.draw(st.integers(1, 5), label="steps"))
    assert out.device == "cuda"
    projected, grads = programs.gradient_graphs(p, out)
    live = [g for g in grads if g is not None]
    wanted = [out, projected, *live]
    reference = evaluate_many([t.node for t in wanted])  # numpy, op by op
    fg.realize(*wanted)  # compiled kernels, run in the emulator
    trace = " | ".join(p.trace)
    for i, (t, ref) in enumerate(zip(wanted, reference)):
        assert t.device == "cuda"
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(
            host(t), ref, rtol=1e-9, atol=1e-10 * scale, err_msg=f"value {i}: {trace}"
        )


# ---------------------------------------------------------------- modules


def test_module_to_moves_parameters_and_buffers_in_place():
    m = fg.nn.Sequential(fg.nn.Linear(3, 4), fg.nn.BatchNorm1d(4), fg.nn.ReLU())
    params = list(m.parameters())
    assert m.to("cuda") is m
    assert all(a is b for a, b in zip(params, m.parameters()))  # the same objects
    assert all(p.device == "cuda" and p.requires_grad and p.is_leaf for p in m.parameters())
    assert all(b.device == "cuda" for b in m.buffers())
    m.to(fg.float64)
    assert all(p.dtype is fg.float64 and p.device == "cuda" for p in m.parameters())
    assert m[1].num_batches_tracked.dtype is fg.int64  # only floating tensors are cast
    m.cpu()
    assert all(t.device == "cpu" for t in [*m.parameters(), *m.buffers()])
    m.cuda()
    assert all(t.device == "cuda" for t in [*m.parameters(), *m.buffers()])


def _train(device: str, steps: int, make_model, make_opt, batch, jit=False):
    fg.manual_seed(0)
    model = make_model().to(device)
    opt = make_opt(model.parameters())  # built after the move, as in PyTorch
    x, y = batch

    def step(x, y):
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    step = fg.jit(step) if jit else step
    losses = [step(fg.tensor(x, device=device), fg.tensor(y, device=device)).item()]
    for _ in range(steps - 1):
        losses.append(step(fg.tensor(x, device=device), fg.tensor(y, device=device)).item())
    return losses, [host(p) for p in model.parameters()], [host(b) for b in model.buffers()]


def test_small_model_trains_the_same_on_both_devices_under_jit():
    """BatchNorm's running statistics, dropout's masks (a new key each step, redrawn by
    the jit's replays) and momentum: five steps, the last two replayed by fg.jit."""
    rng = np.random.default_rng(0)
    batch = rng.standard_normal((16, 5)).astype(np.float32), rng.integers(0, 3, 16)

    def make():
        return fg.nn.Sequential(
            fg.nn.Linear(5, 8),
            fg.nn.BatchNorm1d(8),
            fg.nn.Tanh(),
            fg.nn.Dropout(0.2),
            fg.nn.Linear(8, 3),
        )

    def opt(params):
        return fg.optim.SGD(params, lr=0.1, momentum=0.9)

    cpu = _train("cpu", 5, make, opt, batch, jit=True)
    gpu = _train("cuda", 5, make, opt, batch, jit=True)
    assert len(set(cpu[0])) == 5  # the steps did change the weights
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-5)
    for a, b in zip(gpu[1] + gpu[2], cpu[1] + cpu[2]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_one_lenet_training_step_matches_the_cpu_device():
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    from lenet_mnist import LeNet5

    rng = np.random.default_rng(0)
    batch = rng.standard_normal((8, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, 8)

    def opt(params):
        return fg.optim.Adam(params, lr=1e-3)

    cpu = _train("cpu", 1, LeNet5, opt, batch)
    gpu = _train("cuda", 1, LeNet5, opt, batch)
    np.testing.assert_allclose(gpu[0], cpu[0], rtol=1e-4)
    for a, b in zip(gpu[1], cpu[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_emulated_kernels_say_where_they_came_from_and_the_module_cache_is_bounded(tmp_path):
    """g++ ran ("compiled"), the library came from the disk cache ("disk"), or the module
    was loaded already ("memory"); loaded modules are kept up to the kernel cache's size,
    the least recently used dropped first."""
    from fusegrad.pipeline.driver import _compile_item
    from fusegrad.pipeline.schedule import schedule
    from fusegrad.runtime.engine import engine

    x = fg.randn(16, device="cuda").realize()
    has_value = engine.has_value_predicate()
    items = [schedule([(x * k + 1).node], has_value)[0] for k in (2, 3, 4)]

    def origins(items):
        return [_compile_item(item, "cuda")[0].cache for item in items]

    with fg.config.override(cache=str(tmp_path), kernel_cache_size=2):
        runtime_cuda._modules.clear()
        try:
            assert origins(items) == ["compiled"] * 3
            assert len(runtime_cuda._modules) == 2  # the first was dropped
            assert origins(items[::-1]) == ["memory", "memory", "disk"]
        finally:
            runtime_cuda._modules.clear()


def test_a_new_plans_kernels_build_side_by_side_and_load_in_order(tmp_path, monkeypatch):
    """`compile_loops` builds the code of a plan's new kernels on threads (nvcc and g++ are
    processes of their own), each code once, then loads them in the plan's order: the same
    kernels `compile_loop` makes one by one, with each build's own seconds."""
    import threading
    import time

    from fusegrad.pipeline.schedule import schedule
    from fusegrad.runtime.backend_registry import get_backend
    from fusegrad.runtime.engine import engine

    b = runtime_cuda.backend()
    x = fg.randn(64, device="cuda").realize()
    has_value = engine.has_value_predicate()
    items = [schedule([(x * k + 1).node], has_value)[0] for k in (5, 6, 7, 5)]
    loops = [get_backend("cuda").lower(item) for item in items]
    running, peak, sources = [0], [0], []
    lock, build = threading.Lock(), b.build

    def counted_build(source):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
            sources.append(source)
        time.sleep(0.3)  # (long enough that the builds overlap where they run apart)
        try:
            return build(source)
        finally:
            with lock:
                running[0] -= 1

    monkeypatch.setattr(b, "build", counted_build)
    monkeypatch.setattr(runtime_cuda, "COMPILE_THREADS", 4)
    with fg.config.override(cache=str(tmp_path)):
        runtime_cuda._modules.clear()
        try:
            compiled = runtime_cuda.compile_loops(loops)
            assert [k.cache for k in compiled] == ["compiled", "compiled", "compiled", "memory"]
            assert len(sources) == 3 and peak[0] == 3  # each code once, all at once
            assert all(k.compile_seconds >= 0.3 for k in compiled[:3])
            assert compiled[3].symbol == compiled[0].symbol
            assert compiled[3].module is compiled[0].module
            one_by_one = [runtime_cuda.compile_loop(loop) for loop in loops]
            assert [k.symbol for k in one_by_one] == [k.symbol for k in compiled]
            assert [k.cache for k in one_by_one] == ["memory"] * 4 and len(sources) == 3
            # and they run: x * 6 + 1 through the second kernel as a plan would (a GPU
            # fuses it into one rounding: within an ulp of numpy's two)
            want = host(x) * np.float32(6) + np.float32(1)
            np.testing.assert_allclose(host(x * 6 + 1), want, rtol=2**-22)
        finally:
            runtime_cuda._modules.clear()


# ---------------------------------------------------------------- found on an H100


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_nan_rounded_to_16_bits_has_the_cpus_bits(dtype):
    """The GPU's own conversions give every NaN the bits 0x7fff (the emulator now does the
    same); the kernels round as the CPU's do: the sign and the top of the payload kept."""
    raw = np.array([0x7FC00000, 0x7F800001, 0xFFC12345, 0x7FFFFFFF, 0xFF800001, 0x3F800000])
    x = raw.astype(np.uint32).view(np.float32)
    dt = getattr(fg, dtype)
    on_cpu = fg.tensor(x, device="cpu").to(dt)._host().view(np.uint16)
    stored = fg.tensor(x, device="cuda").to(dt)._host().view(np.uint16)  # a store
    inside = (fg.tensor(x, device="cuda").to(dt).float() * 1).to(dt)  # a cast in a kernel
    assert stored.tolist() == on_cpu.tolist()
    assert inside._host().view(np.uint16).tolist() == on_cpu.tolist()
    assert (on_cpu[:5] >> 15).tolist() == [0, 0, 1, 0, 1]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_16bit_nan_widened_has_the_cpus_bits(dtype):
    """The GPU's widening of a float16 NaN (cvt.f32.f16) gives 0x7fffffff whatever its sign
    and payload (the emulator does the same; an H200 showed it, as every NaN rounded back
    to float16 came out 0x7fff); the kernels widen as the CPU does: sign and payload kept,
    a signaling NaN quieted. Infinities, -0.0 and the largest finite value as they are."""
    bits = {
        "float16": [0x7C01, 0xFE05, 0x7E00, 0x7FFF, 0xFC00, 0x8000, 0x7BFF, 0x0001],
        "bfloat16": [0x7F81, 0xFFC5, 0x7FC0, 0x7FFF, 0xFF80, 0x8000, 0x7F7F, 0x0001],
    }[dtype]
    h = np.array(bits, np.uint16).view(np.float16 if dtype == "float16" else ml_dtypes.bfloat16)
    on_cpu = fg.tensor(h, device="cpu").float()._host().view(np.uint32)
    on_gpu = fg.tensor(h, device="cuda").float()._host().view(np.uint32)
    assert on_gpu.tolist() == on_cpu.tolist()
    assert (on_cpu[:5] >> 31).tolist() == [0, 1, 0, 0, 1]  # the signs


def test_profile_times_each_kernel_of_a_cached_plan(monkeypatch):
    """On the cuda device a cached plan runs from its launch list without waiting; inside
    `fg.profile()` each kernel is launched alone and waited for, so each has its own time
    (on an H100 every kernel read 0 s; on an H200 a kernel's launch was timed, not its
    run: 0.09 ms for a 17.5 ms weight gradient)."""
    launch, waits = runtime_cuda.launch, []

    def watched(compiled, buffers, wait=False):
        waits.append(wait)
        return launch(compiled, buffers, wait)

    def step():
        x = fg.randn(64, 32, device="cuda").realize()  # a new input: nothing to reuse
        return (x.softmax(1) * 2).sum(0).realize()

    step(), step()  # compiled and cached outside the profile
    monkeypatch.setattr(runtime_cuda, "launch", watched)
    with fg.profile() as prof:
        for _ in range(3):
            step()
    assert prof.kernels
    for k in prof.kernels:
        assert k.calls == 3 and k.seconds > 0, k
    assert waits and all(waits)  # each kernel's time is its run's, not its launch's


def test_a_long_float_sum_keeps_an_accumulator_per_vector_lane():
    """Each thread of a vectorized sum adds into four accumulators, one per lane of its
    16-byte groups: a quarter of the rounding error of one chain. On an H100 the mean of
    20,000,000 tenths was 1.5e-6 off with one (the CPU device, and PyTorch, within 1e-6);
    4,000,000 tenths show the same (1.5e-6 with one accumulator, 3e-7 with four)."""
    n = 4_000_000
    got = fg.tensor(np.full(n, 0.1, np.float32), device="cuda").sum().item()
    assert abs(got - 0.1 * n) / (0.1 * n) < 1e-6
    x = fg.tensor(np.full(64, 0.5, np.float32), device="cuda")
    (record,) = fg.kernels(x.sum())
    source = record.compiled.kernel.source
    assert "acc1_l1 += " in source and "acc1 = (acc1 + acc1_l1) + (acc1_l2 + acc1_l3);" in source
    assert "acc1_l1" not in next(r for r in fg.kernels(x.max())).compiled.kernel.source


def test_under_the_guard_every_value_of_a_cached_plan_has_its_own_pages():
    """FUSEGRAD_EMU_GUARD: no arena (an overrun from one value into the next would go
    unseen), the outputs end at a guard page, and the answers are the same."""
    import mmap

    from fusegrad.runtime.engine import engine

    if ON_GPU:
        pytest.skip("the guard is the emulator's")
    x = np.random.default_rng(3).standard_normal((37, 29)).astype(np.float32)
    want = (np.exp(x) / np.exp(x).sum(1, keepdims=True) * 2).sum(0)
    engine.plans.clear()  # every launch list below is made under the guard
    with fg.config.override(emu_guard=True):
        for _ in range(3):  # compiled, then from the cached plan's launch list
            got = (fg.tensor(x, device="cuda").softmax(1) * 2).sum(0).realize()
            np.testing.assert_allclose(host(got), want, rtol=1e-5)
        buf = engine.value(got.node)
        assert -(buf.ptr + buf.size * 4) % mmap.PAGESIZE < 16
        lists = [p.launch_list for p in engine.plans.values() if "launch_list" in p.__dict__]
        assert lists and all(ll.arena_bytes == 0 for ll in lists)
