"""The CUDA kernels fusegrad renders compute the right numbers, run in the CUDA emulator.

Each case builds a fusegrad graph (forward, and backward where it says so),
schedules, lowers and renders its kernels as the engine does (the plan's loop
IR, through `cuda_kernel`), runs them in `runtime/cuda_emulator.py` on the
plan's input buffers, and compares every output with the CPU device's answer
and with the numpy reference evaluator (`ir/reference.py`).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.ir.ops import Ops
from fusegrad.ir.reference import evaluate_many
from fusegrad.nn import functional as F
from fusegrad.pipeline.cuda import PRELUDE, cuda_kernel
from fusegrad.pipeline.gpu import map_to_gpu
from fusegrad.pipeline.lower import base_name, lower
from fusegrad.pipeline.schedule import schedule
from fusegrad.runtime.cuda import _EmulatedBackend
from fusegrad.runtime.cuda_emulator import EmulatedModule
from fusegrad.runtime.engine import engine

RNG = np.random.default_rng(12)


def f32(*shape, grad=False):
    return fg.tensor(RNG.standard_normal(shape).astype(np.float32), requires_grad=grad)


def f64(*shape):
    return fg.from_numpy(RNG.standard_normal(shape))


def i64(*shape):
    return fg.from_numpy(RNG.integers(-50, 50, shape))


def boolean(*shape):
    return fg.from_numpy(RNG.random(shape) > 0.5)


LOWERINGS = ("gpu", "cpu_tiles")


def prepare(tensors, lowering="gpu"):
    """The plan computing `tensors`, its input nodes and its kernels rendered for the GPU:
    from the GPU's loop nests (`lower(item, tile=False)`: shared-memory tiles), or from the
    CPU's register-tiled ones that the plan holds (a kernel must be right from either)."""
    nodes = [t.node for t in tensors]
    has_value = engine.has_value_predicate()
    assert all(not has_value(n) for n in nodes), "the case must compute its outputs"
    plan, leaves, _ = engine.plan_for(nodes, has_value)
    if lowering == "gpu":
        items = schedule(nodes, has_value)  # the plan's kernels, in its order
        loops = [lower(item, tile=False) for item in items]
    else:
        loops = [s.record.loop for s in plan.steps]
    # the plan's kernels, in its order (a compiled kernel's name also has its code's hash)
    assert [base_name(k.name) for k in loops] == [base_name(s.record.name) for s in plan.steps]
    kernels = [
        cuda_kernel(k, f"{s.record.compiled.symbol}_{lowering}") for k, s in zip(loops, plan.steps)
    ]
    return nodes, plan, leaves, kernels


def compile_together(prepared) -> EmulatedModule:
    """One module for the kernels of many plans: the prelude once, each distinct kernel once
    (one g++ run instead of one per case)."""
    bodies = {}
    for _, _, _, kernels in prepared:
        for k in kernels:
            bodies.setdefault(k.symbol, k.source[k.source.index('extern "C"') :])
    return EmulatedModule(PRELUDE + "\n".join(bodies.values()))


EMULATED = _EmulatedBackend()


def run(prepared, module):
    """Run a prepared plan's kernels in the emulator: its outputs as numpy arrays."""
    nodes, plan, leaves, kernels = prepared
    outs = run_plan(plan, kernels, [engine.value(n).numpy() for n in leaves], module)
    return [out.reshape(n.shape) for out, n in zip(outs, nodes)]


def run_plan(plan, kernels, leaf_arrays, module):
    """Run `kernels` (a plan's, in its order) on `leaf_arrays`: the plan's flat outputs."""
    slots: list = [None] * plan.slots
    for step, k in zip(plan.steps, kernels):
        outs = [np.full(size, 7, dtype=dtype.np) for _, size, dtype in step.outs]  # not zeros
        ins = [leaf_arrays[i] if kind == "leaf" else slots[i] for kind, i in step.inputs]
        scratch = [np.full(count, 7, dtype=dtype.np) for dtype, count in k.scratch]
        args = outs + ins + scratch  # launched as the runtime's emulated backend does
        EMULATED.launch(EMULATED.functions(module, k, len(args)), k.launches, args)
        for (g, _, _), out in zip(step.outs, outs):
            slots[g] = out
    return [slots[j] for j in plan.outputs]


def emulate(tensors):
    """Run the kernels computing `tensors` in the emulator: (outputs as numpy, kernels)."""
    prepared = prepare(tensors)
    return run(prepared, compile_together([prepared])), prepared[3]


def compare(got, tensors, rtol=1e-4, atol=1e-4):
    """The emulated GPU's outputs `got` agree with the CPU's and the reference evaluator's."""
    reference = evaluate_many([t.node for t in tensors])
    for g, t, ref in zip(got, tensors, reference):
        cpu = t.numpy()
        assert g.dtype == cpu.dtype and g.shape == cpu.shape
        if cpu.dtype.kind in "fc":
            np.testing.assert_allclose(g, cpu, rtol=rtol, atol=atol)
            np.testing.assert_allclose(g, ref, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, cpu)
            np.testing.assert_array_equal(g, ref)


def chain(x):
    return (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)


def grads(loss_of, *params):
    loss_of(*params).backward()
    return [p.grad for p in params]


def _softmax_backward():
    x = f32(6, 40, grad=True)
    w = f32(6, 40)
    return grads(lambda x: (x.softmax(1) * w).sum(), x)


def _matmul_backward():
    a, b = f32(12, 20, grad=True), f32(20, 28, grad=True)
    return grads(lambda a, b: ((a @ b).relu() * f32(12, 28)).sum(), a, b)


def _conv_backward():
    x, w, b = f32(2, 3, 9, 9, grad=True), f32(4, 3, 3, 3, grad=True), f32(4, grad=True)
    return grads(lambda x, w, b: (F.conv2d(x, w, b, padding=1) ** 2).mean(), x, w, b)


def _embedding_backward():
    w = f32(30, 7, grad=True)
    idx = fg.from_numpy(RNG.integers(0, 30, (4, 5)).astype(np.int32))
    return grads(lambda w: (F.embedding(idx, w) * f32(4, 5, 7)).sum(), w)


def _cross_entropy_backward():
    x = f32(8, 10, grad=True)
    target = fg.from_numpy(RNG.integers(0, 10, (8,)))
    return [F.cross_entropy(x, target)] + grads(lambda x: F.cross_entropy(x, target), x)


def _layer_norm_backward():
    x, w, b = f32(6, 40, grad=True), f32(40, grad=True), f32(40, grad=True)
    return grads(lambda x, w, b: (F.layer_norm(x, (40,), w, b) * f32(6, 40)).sum(), x, w, b)


def _batch_norm_backward():
    x, w, b = f32(300, 5, grad=True), f32(5, grad=True), f32(5, grad=True)
    loss = lambda x, w, b: (F.batch_norm(x, None, None, w, b, training=True) * f32(300, 5)).sum()  # noqa: E731
    return grads(loss, x, w, b)


def _sibling_reductions():
    """Reductions over the same input and axes realized together: one kernel with several
    outputs (pipeline/schedule.py, rule 7), short and long (a block's threads) columns."""
    x, y, z, w = f32(7, 9), f32(1025, 6), i64(40, 3), f32(5, 3000)
    return [x.sum(0), (x * x).sum(0), y.sum(0), (y * 2 - 1).sum(0), (y * y).sum(0)] + [
        z.amax(0),
        (z * 3).amax(0),
        w.sum(1),  # rows: a block's threads each, one loop per sibling
        (w * w).sum(1),
        w.amax(1),
        (-w).amax(1),
    ]


def _costly(t):
    for _ in range(5):  # over the recompute limit: a value two kernels read is stored
        t = t.exp() * 0.5
    return t


# (shape, axes summed, axis of the max), one per GPU mapping of the sum storing its source
STORED_INSIDE = {
    "block": ((300, 5), 0, 1),
    "thread": ((200, 3), 1, 0),
    "warp": ((128, 100), 1, 0),
    "block, vector": ((6, 4096), 1, 0),
    "block, three axes": ((3, 4, 5, 7), (0, 2, 3), 1),
    "split": ((2**16,), 0, 0),
}


def _stored_inside_reductions():
    """Values stored by the sum that reads them (pipeline/schedule.py, rule 8), each also a
    requested output (so every element is compared) and read by a max."""
    out = []
    for shape, axes, other in STORED_INSIDE.values():
        v = _costly(f32(*shape) * 0.1)
        out += [v, v.sum(axes), v.amax(other)]
    return out


CASES = {
    "elementwise_float32": lambda: [chain(f32(33, 47))],
    "elementwise_float64": lambda: [chain(f64(5, 7, 3))],
    "elementwise_int_bool": lambda: [
        (lambda a: a * 3 - a.maximum(a * 2) + (-a))(i64(9, 13)),
        (lambda b: (b & ~b) | (f32(9, 13) > 0))(boolean(9, 13)),
        fg.where(boolean(16, 3), i64(16, 3), 7),
    ],
    "casts": lambda: [f32(8, 8).int() + i64(8, 8).float().long(), f64(8, 8).bool()],
    "row_reductions": lambda: [f32(32, 1025).sum(1), f32(7, 300).amax(1), i64(5, 64).sum(1)],
    "column_reductions": lambda: [f32(1025, 6).sum(0), f64(40, 3).amax(0), boolean(50, 4).amax(0)],
    "short_reductions": lambda: [f32(300, 3).sum(1), i64(200, 2).amax(1)],
    "full_reductions_of_every_dtype": lambda: [
        f64(1000).sum(),
        i64(700).amax(),
        boolean(333).sum(),
        boolean(100).amax(),
        f32(3, 5, 7).sum((0, 2)),
    ],
    # split over blocks, finished by a second launch: bool, integer and float64 accumulators
    "long_reductions": lambda: [boolean(2**17).amax(), i64(3, 40000).amax(1), f64(2**17).sum()],
    "mean_var_std": lambda: [f32(32, 48).mean(1), f32(32, 48).var(0), f32(100).std()],
    "softmax": lambda: [f32(32, 48).softmax(1), f64(9, 300).log_softmax(0)],
    "softmax_backward": _softmax_backward,
    "argmax": lambda: [f32(32, 48).argmax(1), f32(32, 48).argmin(0)],
    # positions past 64K are an INDEX node, computed in the kernel: no table is read
    "long_argmax": lambda: [f32(70001).argmax(), f32(2, 70000).argmin(1)],
    "matmul": lambda: [f32(32, 48) @ f32(48, 64), f32(6, 20) @ f32(20, 28), f32(24) @ f32(24)],
    "matmul_backward": _matmul_backward,
    # ragged tiles on both sides and along the reduction, a transposed operand, a batch
    "matmul_shapes": lambda: [
        f32(65, 31) @ f32(31, 70),
        f32(40, 5).T @ f32(40, 66),
        f32(3, 17, 33) @ f32(3, 33, 9),
        (f32(20, 33).exp() @ f32(33, 18)).relu() + f32(18),
        # values both sides read: each side computes its own copy
        (f32(16, 32) + f32(32)) @ (f32(32, 24) + f32(32, 1)),
        (f32(4, 16, 32) + f32(4, 1, 32)) @ (f32(4, 32, 24) + f32(4, 32, 1)),
    ],
    "conv2d": lambda: [F.conv2d(f32(2, 3, 10, 10), f32(5, 3, 3, 3), f32(5), padding=1)],
    "conv2d_backward": _conv_backward,
    "gather_scatter": _embedding_backward,
    "cross_entropy_backward": _cross_entropy_backward,
    "layer_norm_backward": _layer_norm_backward,
    "batch_norm_backward": _batch_norm_backward,
    "sibling_reductions": _sibling_reductions,
    "stored_inside_reductions": _stored_inside_reductions,
    "pad_and_slices": lambda: [
        f32(16, 24).pad((1, 2, 3, 4)) + 1,
        f32(16, 24)[2:10:3, 1::2] * 2,
        fg.cat([f32(4, 6), f32(4, 3)], 1) + 0.5,
    ],
    "random": lambda: [fg.rand(64, 3) * 2, fg.randint(0, 10, (16,))],
}


@pytest.fixture(scope="module")
def cases():
    """Every case's tensors and prepared plans, and one module with all their kernels."""
    built = {name: build() for name, build in CASES.items()}
    prepared = {(name, how): prepare(built[name], how) for name in CASES for how in LOWERINGS}
    return built, prepared, compile_together(list(prepared.values()))


@pytest.mark.parametrize("lowering", LOWERINGS)
@pytest.mark.parametrize("case", list(CASES))
def test_emulated_kernels_match_the_cpu(cases, case, lowering):
    built, prepared, module = cases
    compare(run(prepared[case, lowering], module), built[case])


@pytest.mark.parametrize(
    "case", ["matmul", "matmul_backward", "matmul_shapes", "conv2d", "conv2d_backward"]
)
def test_contractions_go_through_shared_memory(cases, case):
    _, prepared, _ = cases
    kernels = prepared[case, "gpu"][3]
    tiled = [k for k in kernels if "__shared__" in k.source and k.block[1] > 1]
    assert tiled, f"no kernel of {case} is tiled through shared memory"
    for k in tiled:
        assert "__syncthreads" in k.source and "_tile[" in k.source
    if case == "matmul_shapes":  # the batched one too: a batch per grid z index
        assert any(k.grid[2] == 3 for k in tiled)


LENGTHS = [1, 31, 1024, 1025, 2**20]


@pytest.fixture(scope="module")
def full_reductions():
    """A sum and a max over each length, all compiled into one module."""
    data = {n: RNG.standard_normal(n).astype(np.float32) for n in LENGTHS}
    prepared = {}
    for n, x in data.items():
        t = fg.from_numpy(x)
        prepared[n] = prepare([t.sum(), t.amax()])
    return data, prepared, compile_together(list(prepared.values()))


@pytest.mark.parametrize("n", LENGTHS)
def test_full_reductions_of_any_length(full_reductions, n):
    data, prepared, module = full_reductions
    x = data[n]
    total, peak = run(prepared[n], module)
    np.testing.assert_allclose(total, x.sum(dtype=np.float64), rtol=1e-5, atol=1e-4)
    assert peak == x.max()
    kernels = prepared[n][3]
    if n == 2**20:  # long enough to be split over blocks and finished by a second pass
        assert all(len(k.launches) == 2 and k.scratch for k in kernels)


@pytest.mark.parametrize("shape, axis", [((1025, 6), 0), ((5, 3000), 1)])
def test_sibling_reductions_are_one_kernel_of_block_reductions(shape, axis):
    # rule 7 (pipeline/schedule.py): one kernel; the GPU lowering gives each sibling a loop of its
    # own, which the mapping splits over a block's threads like any reduction
    x = f32(*shape)
    outs = [x.sum(axis), (x * x).sum(axis)]
    (item,) = schedule([t.node for t in outs], lambda n: n.op is Ops.BUFFER)
    gpu = map_to_gpu(lower(item, tile=False))
    assert gpu.mode == "block" and len(gpu.reductions) == 2
    got, _ = emulate(outs)
    compare(got, outs)


def test_values_stored_inside_reductions_in_every_mapping():
    # rule 8 (pipeline/schedule.py): each thread of a block, a warp or a split stores the source
    # elements of its own share, vector stores where aligned
    outs = _stored_inside_reductions()
    # as the GPU schedules: a sum of few outputs splits over blocks, so it takes large values
    items = schedule([t.node for t in outs], engine.has_value_predicate(), splits_reductions=True)
    mapped = [map_to_gpu(lower(it, tile=False)) for it in items if it.at_source]
    modes = [(g.mode, g.split > 1, any(r.vector for r in g.reductions.values())) for g in mapped]
    assert len(modes) == len(STORED_INSIDE), modes
    assert {m for m, _, _ in modes} == {"block", "thread", "warp"}
    assert any(split for _, split, _ in modes) and any(vector for _, _, vector in modes)
    got, _ = emulate(outs)
    compare(got, outs)


def test_a_long_reduction_is_split_over_many_threads():
    # one output, 2^20 terms: no thread adds up more than a small share of them
    x = fg.from_numpy(np.ones(2**20, np.float32))
    (item,) = schedule([x.sum().node], engine.has_value_predicate())
    gpu = map_to_gpu(lower(item, tile=False))  # the GPU's loop nest (the CPU's is cascaded)
    assert gpu.mode == "block" and gpu.split > 1
    assert 2**20 / (gpu.grid * gpu.block) <= 64


def test_nan_propagates_through_a_block_max():
    x = np.arange(2000, dtype=np.float32)
    x[1500] = np.nan
    (peak,), _ = emulate([fg.from_numpy(x).amax()])
    assert np.isnan(peak)


def random_program(seed: int):
    """A reduction over random axes of a random shape, with ops fused before and after it,
    and its gradient: every GPU mapping (thread, block, split, tile) is drawn somewhere."""
    rng = np.random.default_rng(seed)
    ndim = int(rng.integers(1, 5))
    shape = (2**20,)
    while math.prod(shape) > 5000:  # the emulator is slow: small tensors
        shape = tuple(int(s) for s in rng.choice([1, 2, 3, 5, 8, 17, 33, 64], ndim))
    x = fg.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
    axes = tuple(int(a) for a in np.flatnonzero(rng.random(ndim) < 0.5)) or (ndim - 1,)
    keep = bool(rng.integers(2))
    pre = [lambda t: t.exp(), lambda t: t * t + 1, lambda t: t.relu(), lambda t: t][seed % 4]
    red = [
        lambda t: t.sum(axes, keepdim=keep),
        lambda t: t.amax(axes, keepdim=keep),
        lambda t: t.mean(axes, keepdim=keep),
    ][int(rng.integers(3))]
    y = red(pre(x)) * 0.5 - 1
    (y * y).sum().backward()
    return [y, x.grad]


SEEDS = range(24)


@pytest.fixture(scope="module")
def programs():
    built = {seed: random_program(seed) for seed in SEEDS}
    prepared = {seed: prepare(tensors) for seed, tensors in built.items()}
    return built, prepared, compile_together(list(prepared.values()))


@pytest.mark.parametrize("seed", SEEDS)
def test_random_reductions_and_their_gradients(programs, seed):
    built, prepared, module = programs
    compare(run(prepared[seed], module), built[seed])


def catch_plans(monkeypatch, fn):
    """Call `fn`, catching every plan the engine runs meanwhile with what it needs to run it
    again: (plan, its kernels' schedule items, copies of its inputs, copies of its outputs).
    A plan replayed from the cache has no items (nothing was scheduled for it)."""
    caught = []
    real_run = engine.run

    def run_and_catch(plan, leaves, nodes, targets, timed=False):
        items = schedule(list(nodes), engine.has_value_predicate())
        inputs = [b.numpy().copy() for b in leaves]
        outs = real_run(plan, leaves, nodes, targets, timed)
        caught.append((plan, items, inputs, [b.numpy().copy() for b in outs]))
        return outs

    with monkeypatch.context() as m:
        m.setattr(engine, "run", run_and_catch)
        fn()
    return [c for c in caught if len(c[1]) == len(c[0].steps)]


def emulate_caught(plan, items, inputs, lowering):
    """Run a caught plan's kernels again in the emulator: its flat outputs."""
    assert [lower(item).name for item in items] == [base_name(s.record.name) for s in plan.steps]
    if lowering == "gpu":
        loops = [lower(item, tile=False) for item in items]
    else:
        loops = [s.record.loop for s in plan.steps]
    symbols = [f"{s.record.compiled.symbol}_{lowering}" for s in plan.steps]
    kernels = [cuda_kernel(k, symbol) for k, symbol in zip(loops, symbols)]
    module = compile_together([(None, plan, None, kernels)])
    return run_plan(plan, kernels, inputs, module)


def test_an_optimizer_step_with_its_multi_output_kernels(monkeypatch):
    """Adam's fused step: kernels that store a parameter and its state together. The step
    realizes inside `opt.step()`, so its plan is caught as the engine runs it. Its values
    come from a generator of its own: where the second step's gradient nearly cancels the
    first's in Adam's moment, the update magnifies the last bit in which the two lowerings'
    sums of the gradient may differ, and the module's generator gave each test other
    values depending on which tests ran before it in the process (one draw of pytest-xdist's
    order landed 1.7e-6 from the CPU's, past the tolerance)."""
    rng = np.random.default_rng(21)

    def data(*shape):
        return fg.tensor(rng.standard_normal(shape).astype(np.float32))

    w = fg.nn.Parameter(data(6, 40))
    opt = fg.optim.Adam([w], lr=0.1)

    def steps():
        for _ in range(2):  # the first makes Adam's state, then the plan is replayed
            opt.zero_grad()
            (data(4, 6) @ w).relu().sum().backward()
            opt.step()

    (plan, items, inputs, expected), *_ = catch_plans(monkeypatch, steps)
    assert any(len(s.outs) > 1 for s in plan.steps), "no kernel stores several outputs"
    for lowering in LOWERINGS:
        got = emulate_caught(plan, items, inputs, lowering)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


class LeNet5(fg.nn.Module):
    """examples/lenet_mnist.py's network."""

    def __init__(self):
        super().__init__()
        self.conv1 = fg.nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = fg.nn.Conv2d(6, 16, 5)
        self.pool = fg.nn.MaxPool2d(2)
        self.fc1 = fg.nn.Linear(16 * 5 * 5, 120)
        self.fc2 = fg.nn.Linear(120, 84)
        self.fc3 = fg.nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(self.conv1(x).relu())
        x = self.pool(self.conv2(x).relu())
        x = self.fc2(self.fc1(x.flatten(1)).relu()).relu()
        return self.fc3(x)


def test_a_lenet_training_step_matches_the_cpu(monkeypatch):
    """Forward, backward and SGD-momentum update of LeNet-5 on 4 images: every kernel of the
    step, GPU-lowered (shared-memory tiles for the convolutions and linears) and emulated,
    gives the CPU's new parameters, momenta and loss to 1e-4."""
    fg.manual_seed(0)
    model = LeNet5()
    opt = fg.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = fg.from_numpy(RNG.standard_normal((4, 1, 28, 28)).astype(np.float32))
    labels = fg.from_numpy(RNG.integers(0, 10, (4,)))

    def step():
        opt.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        opt.step()

    caught = catch_plans(monkeypatch, step)
    assert caught
    tiled = 0
    for plan, items, inputs, expected in caught:
        got = emulate_caught(plan, items, inputs, "gpu")
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
        tiled += sum(map_to_gpu(lower(item, tile=False)).mode == "tile" for item in items)
    assert tiled >= 4  # the convolutions and the linear layers, forward and backward
