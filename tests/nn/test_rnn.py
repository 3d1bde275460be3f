"""Recurrent layers and sequence packing against PyTorch's semantics.

The expected values were computed with torch 2.13 in float64 from the same
weights (`fill`, loaded into both through a state_dict in torch's layout, so
the parameter names and shapes are checked too) and are written here, so the
tests need no torch; where torch imports, it is asked as well. Shapes stay
tiny: what is tested is the arithmetic, the layouts and the gradients.
"""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn.utils import rnn as rnn_utils
from fusegrad.pipeline import compiler

TOL = 2e-5


def fill(shape, k):
    n = int(np.prod(shape))
    return (0.4 * np.sin(np.arange(n) * 0.7 + k)).reshape(shape)


def load(module):
    """Weights from `fill`, by torch's state_dict keys in order, loaded strictly."""
    state = {name: fill(t.shape, k) for k, (name, t) in enumerate(module.state_dict().items())}
    module.load_state_dict({name: fg.tensor(v.astype(np.float32)) for name, v in state.items()})
    return state


def close(actual, expected, tol=TOL):
    np.testing.assert_allclose(np.asarray(actual.numpy()), expected, atol=tol, rtol=0)


TORCH_LSTM_KEYS = [
    "weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0",
    "weight_ih_l0_reverse", "weight_hh_l0_reverse", "bias_ih_l0_reverse", "bias_hh_l0_reverse",
    "weight_ih_l1", "weight_hh_l1", "bias_ih_l1", "bias_hh_l1",
    "weight_ih_l1_reverse", "weight_hh_l1_reverse", "bias_ih_l1_reverse", "bias_hh_l1_reverse",
]  # fmt: skip


def test_parameter_names_shapes_and_repr_are_torchs():
    lstm = nn.LSTM(3, 4, num_layers=2, bidirectional=True)
    assert list(lstm.state_dict()) == TORCH_LSTM_KEYS
    shapes = {k: tuple(v.shape) for k, v in lstm.state_dict().items()}
    assert shapes["weight_ih_l0"] == (16, 3) and shapes["weight_ih_l1_reverse"] == (16, 8)
    assert shapes["weight_hh_l1"] == (16, 4) and shapes["bias_hh_l0_reverse"] == (16,)
    assert nn.GRU(3, 4).weight_ih_l0.shape == (12, 3)
    assert repr(lstm) == "LSTM(3, 4, num_layers=2, bidirectional=True)"
    gru = nn.GRU(3, 4, 2, batch_first=True, dropout=0.5)
    assert repr(gru) == "GRU(3, 4, num_layers=2, batch_first=True, dropout=0.5)"
    assert repr(nn.RNN(3, 4, nonlinearity="relu")) == "RNN(3, 4)"
    cell = nn.RNNCell(3, 4, bias=False, nonlinearity="relu")
    assert repr(cell) == "RNNCell(3, 4, bias=False, nonlinearity=relu)"
    assert [n for n, _ in nn.LSTMCell(3, 4).named_parameters()] == [
        "weight_ih", "weight_hh", "bias_ih", "bias_hh"
    ]  # fmt: skip
    # torch's init: every parameter within 1/sqrt(hidden)
    assert all(np.abs(p.numpy()).max() <= 0.5 for p in lstm.parameters())


LSTM_OUT = np.array([
    [[0.084885, 0.120612, -0.266319, -0.305657], [0.122026, 0.166979, -0.234668, -0.262498],
     [0.132501, 0.190577, -0.164684, -0.177938]],
    [[0.090729, 0.111836, -0.262635, -0.306172], [0.112892, 0.174029, -0.233132, -0.267223],
     [0.121989, 0.205364, -0.166577, -0.180810]],
])  # fmt: skip
LSTM_H_N = np.array([
    [[-0.224886, -0.159428], [-0.297016, -0.032874]], [[0.013679, -0.300344], [0.106242, 0.015865]],
    [[0.132501, 0.190577], [0.121989, 0.205364]], [[-0.266319, -0.305657], [-0.262635, -0.306172]],
])  # fmt: skip
LSTM_C_N = np.array([
    [[-0.475338, -0.216523], [-0.514897, -0.053416]], [[0.038465, -0.664473], [0.360224, 0.077998]],
    [[0.213522, 0.365835], [0.201110, 0.383788]], [[-0.627851, -0.543340], [-0.627304, -0.530586]],
])  # fmt: skip
LSTM_X_GRAD = np.array([
    [[-0.207386, -0.431044], [-0.276296, -0.216285], [-1.076196, -0.556029]],
    [[-1.361707, -1.405120], [-0.709529, -0.497014], [0.156010, 0.789377]],
])  # fmt: skip
LSTM_W_HH_L1_REVERSE_GRAD = np.array([
    [0.310923, 0.348075], [0.398149, 0.445841], [0.275232, 0.308929], [0.255797, 0.287332],
    [-0.979631, -1.095616], [-0.795814, -0.890605], [0.133377, 0.150424], [0.134890, 0.151378],
])  # fmt: skip
LSTM_B_IH_L0_GRAD = np.array(
    [-1.707153, -0.910299, -1.080744, -0.166608, 5.265792, 5.913884, -0.577613, -0.138149]
)


def lstm_case():
    lstm = nn.LSTM(2, 2, num_layers=2, bidirectional=True, batch_first=True)
    load(lstm)
    x = fg.tensor(np.cos(np.arange(12) * 0.5).reshape(2, 3, 2).astype(np.float32))
    return lstm, x.requires_grad_()


def test_bidirectional_two_layer_batch_first_lstm_values_and_gradients():
    lstm, x = lstm_case()
    out, (h, c) = lstm(x)
    loss = (out * fg.tensor(fill(out.shape, 9).astype(np.float32))).sum()
    (loss + (h * 2).sum() + (c * 3).sum()).backward()
    close(out, LSTM_OUT)
    close(h, LSTM_H_N)
    close(c, LSTM_C_N)
    close(x.grad, LSTM_X_GRAD)
    close(lstm.weight_hh_l1_reverse.grad, LSTM_W_HH_L1_REVERSE_GRAD)
    close(lstm.bias_ih_l0.grad, LSTM_B_IH_L0_GRAD)


def test_lstm_gradient_against_float64_central_differences():
    lstm = nn.LSTM(2, 2, dtype="float64")
    load64 = {k: fg.tensor(v) for k, v in load(lstm).items()}
    lstm.load_state_dict(load64)
    x = fg.tensor(np.cos(np.arange(6) * 0.5).reshape(3, 1, 2), requires_grad=True)

    def loss():
        out, (h, c) = lstm(x)
        return (out * out).sum() + c.sum()

    loss().backward()
    w = lstm.weight_hh_l0
    analytic = w.grad.numpy().copy()
    base, eps = w.numpy().copy(), 1e-6
    for index in [(0, 0), (5, 1), (7, 0)]:  # an i, a g and an o gate weight
        values = []
        for sign in (1, -1):
            moved = base.copy()
            moved[index] += sign * eps
            with fg.no_grad():
                w.copy_(fg.tensor(moved))
                values.append(loss().item())
        assert abs((values[0] - values[1]) / (2 * eps) - analytic[index]) < 1e-7
    with fg.no_grad():
        w.copy_(fg.tensor(base))


GRU_OUT = np.array([
    [[-0.554162, 0.138196], [-0.316607, 0.071454]],
    [[-0.455678, -0.258043], [-0.278974, -0.303683]],
    [[-0.416173, -0.410100], [-0.454480, -0.075914]],
])  # fmt: skip
GRU_X_GRAD = np.array([
    [[0.082042, 0.164555], [0.039542, 0.081958]], [[-0.094174, 0.056087], [-0.202415, 0.009241]],
    [[-0.142917, 0.251369], [0.170555, 0.474487]],
])  # fmt: skip
GRU_H0_GRAD = np.array([[[0.327178, 0.211736], [0.109608, 0.123011]]])
GRU_W_HH_GRAD = np.array([
    [0.087737, 0.038722], [0.033028, 0.021957], [-0.008360, -0.038652], [-0.218163, 0.057286],
    [-0.678841, -0.240562], [-0.518038, -0.280681],
])  # fmt: skip
GRU_B_HH_GRAD = np.array([-0.225084, -0.073695, 0.104015, 0.469143, 1.804264, 1.567889])


def test_gru_with_an_initial_state_values_and_gradients():
    gru = nn.GRU(2, 2)
    load(gru)
    x = fg.tensor(np.cos(np.arange(12) * 0.5).reshape(3, 2, 2).astype(np.float32))
    x.requires_grad_()
    h0 = fg.tensor(fill((1, 2, 2), 5).astype(np.float32), requires_grad=True)
    out, h = gru(x, h0)
    ((out * fg.tensor(fill(out.shape, 9).astype(np.float32))).sum() + (h * 2).sum()).backward()
    close(out, GRU_OUT)
    close(h, GRU_OUT[-1:])
    close(x.grad, GRU_X_GRAD)
    close(h0.grad, GRU_H0_GRAD)
    close(gru.weight_hh_l0.grad, GRU_W_HH_GRAD)
    close(gru.bias_hh_l0.grad, GRU_B_HH_GRAD)


def test_unbatched_relu_rnn_without_bias():
    rnn = nn.RNN(2, 2, nonlinearity="relu", bias=False)
    assert list(rnn.state_dict()) == ["weight_ih_l0", "weight_hh_l0"]
    load(rnn)
    x = fg.tensor(np.cos(np.arange(6) * 0.5).reshape(3, 2).astype(np.float32))
    out, h = rnn(x)
    (out * fg.tensor(fill(out.shape, 9).astype(np.float32))).sum().backward()
    close(out, [[0.226142, 0.697195], [0.370898, 0.310097], [0.041400, 0.0]])
    close(h, [[0.041400, 0.0]])
    close(rnn.weight_ih_l0.grad, [[-0.229169, 0.091074], [-0.559935, -0.286507]])


PACKED_DATA = np.array([
    [-0.221257, -0.009047, 0.037792, -0.185964], [-0.283684, 0.137126, 0.044531, -0.141734],
    [-0.124371, -0.150957, 0.067990, 0.004850], [-0.186557, -0.140366, 0.044589, -0.067718],
    [-0.147314, -0.063192, 0.087651, 0.041694], [-0.335560, -0.023437, -0.010935, -0.159621],
])  # fmt: skip
PACKED_H_N = np.array([
    [[-0.147314, -0.063192], [-0.335560, -0.023437], [-0.124371, -0.150957]],
    [[0.044531, -0.141734], [0.037792, -0.185964], [0.067990, 0.004850]],
])  # fmt: skip
PACKED_X_GRAD = np.array([
    [[0.106111, 0.111051], [-0.172172, -0.190400], [-0.286659, -0.105867]],
    [[-0.542424, -0.354666], [-0.155615, -0.131711], [0.0, 0.0]],
    [[0.0, 0.0], [0.017965, 0.186430], [0.0, 0.0]],
])  # fmt: skip


def test_packed_unsorted_bidirectional_lstm():
    lstm = nn.LSTM(2, 2, bidirectional=True)
    load(lstm)
    x = fg.tensor(np.cos(np.arange(18) * 0.5).reshape(3, 3, 2).astype(np.float32))
    x.requires_grad_()
    packed = rnn_utils.pack_padded_sequence(x, [2, 3, 1], enforce_sorted=False)
    assert packed.batch_sizes.tolist() == [3, 2, 1]
    assert packed.sorted_indices.tolist() == [1, 0, 2]
    assert packed.unsorted_indices.tolist() == [1, 0, 2]
    out, (h, _) = lstm(packed)
    assert isinstance(out, rnn_utils.PackedSequence) and out.batch_sizes is packed.batch_sizes
    data = fg.tensor(fill(out.data.shape, 9).astype(np.float32))
    ((out.data * data).sum() + (h * 2).sum()).backward()
    close(out.data, PACKED_DATA)
    close(h, PACKED_H_N)
    close(x.grad, PACKED_X_GRAD)
    padded, lengths = rnn_utils.pad_packed_sequence(out, batch_first=True)
    assert lengths.tolist() == [2, 3, 1]
    expected = np.zeros((3, 3, 4))
    for b, n in enumerate([2, 3, 1]):  # row t of sequence b lies in the packed data ...
        for t in range(n):  # ... after the rows of steps before t, at b's rank
            before = [3, 2, 1][:t]
            expected[b, t] = PACKED_DATA[sum(before) + [1, 0, 2][b]]
    close(padded, expected)


def test_cells_one_step():
    x = fg.tensor(np.cos(np.arange(4) * 0.5).reshape(2, 2).astype(np.float32))
    h = fg.tensor(fill((2, 3), 7).astype(np.float32))
    lstm = nn.LSTMCell(2, 3)
    load(lstm)
    h1, c1 = lstm(x, (h, h * 0.5))
    close(h1, [[0.396784, 0.009026, 0.031594], [0.128326, 0.188844, 0.020228]])
    close(c1, [[0.609491, 0.015067, 0.089229], [0.223906, 0.332034, 0.054030]])
    gru = nn.GRUCell(2, 3)
    load(gru)
    close(gru(x, h), [[0.597593, 0.009911, 0.133574], [0.236965, 0.222540, -0.042996]])
    cell = nn.RNNCell(2, 3)
    load(cell)
    close(cell(x, h), [[0.754754, 0.405472, -0.523667], [0.316846, 0.355746, -0.452164]])
    assert cell(x[0]).shape == (3,)  # unbatched, zero state


def test_pad_sequence_and_pack_sequence():
    a, b = fg.tensor([1.0, 2.0, 3.0]), fg.tensor([4.0])
    assert rnn_utils.pad_sequence([a, b]).tolist() == [[1.0, 4.0], [2.0, 0.0], [3.0, 0.0]]
    left = rnn_utils.pad_sequence([a, b], batch_first=True, padding_value=-1, padding_side="left")
    assert left.tolist() == [[1.0, 2.0, 3.0], [-1.0, -1.0, 4.0]]
    packed = rnn_utils.pack_sequence([b, a], enforce_sorted=False)
    assert packed.data.tolist() == [1.0, 4.0, 2.0, 3.0]
    padded, lengths = rnn_utils.pad_packed_sequence(packed, total_length=4)
    assert padded.shape == (4, 2) and lengths.tolist() == [1, 3]


def test_refusals_are_torchs():
    with pytest.raises(RuntimeError, match="must be sorted in decreasing order"):
        rnn_utils.pack_padded_sequence(fg.zeros(3, 2), [1, 3])
    with pytest.raises(ValueError, match="proj_size has to be smaller than hidden_size"):
        nn.LSTM(2, 3, proj_size=3)
    with pytest.raises(ValueError, match="proj_size should be a positive integer or zero"):
        nn.LSTM(2, 3, proj_size=-1)
    with pytest.raises(
        RuntimeError, match=r"Expected hidden\[1\] size \(1, 2, 3\), got \[1, 2, 2\]"
    ):
        nn.LSTM(2, 3, proj_size=2)(fg.zeros(4, 2, 2), (fg.zeros(1, 2, 2), fg.zeros(1, 2, 2)))
    with pytest.raises(
        RuntimeError, match=r"Expected hidden\[0\] size \(1, 2, 3\), got \[1, 3, 3\]"
    ):
        nn.LSTM(2, 3)(fg.zeros(4, 2, 2), (fg.zeros(1, 3, 3), fg.zeros(1, 3, 3)))
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        nn.GRU(2, 3)(fg.zeros(4, 2, 5))
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        nn.GRU(2, 3, dropout=0.5)


def distinct_kernels(steps: int) -> int:
    """Distinct kernels an LSTM's forward and backward over `steps` steps compiles or loads."""
    symbols = set()
    real_many, real_one = compiler.compile_kernels, compiler.compile_kernel

    def spy_many(jobs, *rest):  # (rest: objects the forked copies made, by job)
        symbols.update(symbol for _, symbol, _, _ in jobs)
        return real_many(jobs, *rest)

    def spy_one(source, symbol, nparams, opt=3):
        symbols.add(symbol)
        return real_one(source, symbol, nparams, opt)

    fg.manual_seed(0)
    lstm = nn.LSTM(2, 3)
    x = fg.randn(steps, 2, 2, requires_grad=True).realize()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("fusegrad.runtime.cpu_backend.compile_kernels", spy_many)
        mp.setattr("fusegrad.runtime.program.compile_kernel", spy_one)
        out, _ = lstm(x)
        out.sum().backward()
        fg.realize(x.grad, *[p.grad for p in lstm.parameters()])
    return len(symbols)


def test_the_time_steps_share_their_kernels():
    # a step reads its row through a data index: 3x the steps, not 3x the kernels (what
    # differs is what has the steps in its shape: the stacks of the steps' gradients, each
    # a kernel of its own past AT_SOURCE_MAX_PIECES pieces, and the sums over them; and
    # where the longer backward chain is cut at 500 ops, the kernel beside the cut)
    assert distinct_kernels(24) <= distinct_kernels(8) + 5


def test_dropout_acts_between_layers_in_training_only():
    lstm, x = lstm_case()
    lstm.dropout = 1.0  # every output of layer 0 dropped: layer 1 never sees the input
    out, _ = lstm(x)
    out.sum().backward()
    assert np.abs(x.grad.numpy()).max() == 0.0
    lstm.eval()
    close(lstm(x)[0], LSTM_OUT)


def test_an_lstm_steps_stored_values_are_one_macro_node_each_at_special_points():
    """A step's cell and hidden state are one macro node each (the composed gates: 4 slices,
    3 sigmoid, 2 tanh, 3 products and a sum), what a plain-loop step builds and keys per
    time step; their values and gradients are the composed form's, torch's, at gates of
    -0.0, 0, +-1, +-inf and NaN (in float64), and where the state broadcasts or has
    another dtype than the gates the step is composed as before."""
    from fusegrad.ir.ops import Ops
    from fusegrad.nn import rnn as R

    special = [-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 30.0]
    gates_np = np.array(special * 4, np.float64).reshape(4, 8).T.reshape(2, 16).copy()
    c_np = np.array([[-0.0, 1.0, -2.0, np.inf], [0.5, np.nan, -np.inf, 0.0]], np.float64)
    gates = fg.tensor(gates_np, requires_grad=True)
    c = fg.tensor(c_np, requires_grad=True)
    new_c = R._one_node("lstm_cell", (gates, c))
    new_h = R._one_node("lstm_hidden", (gates, new_c))
    assert new_c.node.op is Ops.MACRO and new_h.node.op is Ops.MACRO
    wc = R._lstm_cell((gates, c), ())
    wh = R._lstm_hidden((gates, wc), ())
    assert wc.node.op is not Ops.MACRO
    gy = fg.tensor(np.linspace(-1, 1, 8).reshape(2, 4))
    got = fg.grad((new_h * gy).sum() + new_c.sum(), [gates, c])
    want = fg.grad((wh * gy).sum() + wc.sum(), [gates, c])
    for a, b in zip([new_c, new_h, *got], [wc, wh, *want]):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    with np.errstate(all="ignore"):
        i, f, g, o = np.split(gates_np, 4, -1)
        cn = sig(f) * c_np + sig(i) * np.tanh(g)
        hn = sig(o) * np.tanh(cn)
    np.testing.assert_allclose(new_c.detach().numpy(), cn, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(new_h.detach().numpy(), hn, rtol=1e-12, atol=1e-300)
    # a broadcast state, a state of another dtype: composed, the same values
    row = fg.tensor(c_np[:1].astype(np.float32))
    mixed = R._one_node("lstm_cell", (gates.detach().float(), row))
    assert mixed.node.op is not Ops.MACRO and mixed.shape == (2, 4)
    other = R._one_node("lstm_cell", (gates.detach(), fg.tensor(c_np.astype(np.float32))))
    assert other.node.op is not Ops.MACRO and other.dtype == fg.float64


def test_a_gru_steps_hidden_state_is_one_macro_node_at_special_points():
    """A GRU step's new hidden state is one macro node (6 slices and 8 gate ops composed);
    its values and gradients are the composed form's at projections of -0.0, 0, +-1,
    +-inf and NaN (float64), and torch's formula's values."""
    from fusegrad.ir.ops import Ops
    from fusegrad.nn import rnn as R

    special = np.array([-0.0, 0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 30.0])
    xw_np = np.tile(special, 3).reshape(2, 12)
    hp_np = np.roll(xw_np, 5)
    h_np = np.array([[-0.0, 1.0, -2.0, np.inf], [0.5, np.nan, -np.inf, 0.0]])
    xw, hp, h = (fg.tensor(a, requires_grad=True) for a in (xw_np, hp_np, h_np))
    new = R._one_node("gru_hidden", (xw, hp, h))
    assert new.node.op is Ops.MACRO
    want = R._gru_hidden((xw, hp, h), ())
    gy = fg.tensor(np.linspace(-1, 1, 8).reshape(2, 4))
    got = fg.grad((new * gy).sum(), [xw, hp, h])
    exp = fg.grad((want * gy).sum(), [xw, hp, h])
    for a, b in zip([new, *got], [want, *exp]):
        np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    with np.errstate(all="ignore"):
        (x_r, x_z, x_n), (h_r, h_z, h_n) = np.split(xw_np, 3, -1), np.split(hp_np, 3, -1)
        r, z = sig(x_r + h_r), sig(x_z + h_z)
        n = np.tanh(x_n + r * h_n)
        ref = n + z * (h_np - n)
    np.testing.assert_allclose(new.detach().numpy(), ref, rtol=1e-12, atol=1e-300)


# ---------------------------------------------------------------- a direction as one node


@pytest.mark.parametrize("mode", ["LSTM", "GRU", "RNN_TANH"])
@pytest.mark.parametrize("packed", [False, True])
def test_a_direction_is_one_macro_node_with_the_composed_values(mode, packed):
    """Each layer direction is one `rnn_direction` macro node (its steps are built only
    when a new plan is scheduled); its outputs, last states and gradients are the
    step-by-step composed form's, in float64, with bias=False and packed lengths too."""
    from fusegrad.ir.ops import Ops
    from fusegrad.nn import rnn as R

    rng = np.random.default_rng(3)
    xs = rng.standard_normal((5, 3, 2))
    xs[0, 0] = [0.0, -0.0]
    gates = R.GATES[mode]
    w_ih, w_hh = rng.standard_normal((gates * 4, 2)), rng.standard_normal((gates * 4, 4))
    b_ih = rng.standard_normal(gates * 4)
    h0 = rng.standard_normal((3, 4))
    lengths = fg.tensor(np.array([[5], [3], [1]], np.int64)) if packed else None

    def run(composed: bool):
        x, wi, wh, bi = (fg.tensor(a, requires_grad=True) for a in (xs, w_ih, w_hh, b_ih))
        h = fg.tensor(h0, requires_grad=True)
        state = (h, h * 0.5) if mode == "LSTM" else h
        weights = (wi, wh, bi, None)
        if composed:
            out, last = R._direction_steps(mode, x, state, weights, True, lengths)
        else:
            out, last = R._run_direction(mode, x, state, weights, True, lengths)
            base = out.node
            while base.op is not Ops.MACRO:
                base = base.srcs[0]
            assert base.arg[0] == "rnn_direction"
        finals = list(last) if mode == "LSTM" else [last]
        loss = (out * out).sum() + sum((f * f.sin()).sum() for f in finals)
        grads = fg.grad(loss, [x, wi, wh, bi, h])
        return [t.detach().numpy() for t in (out, *finals, *grads)]

    for got, want in zip(run(False), run(True)):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)


def test_a_weight_broadcast_in_every_step_sums_its_gradient_per_step():
    """A weight read through one broadcast node by many steps (hash-consing makes every
    step's `expand` of it one node) gets each step's gradient summed to its own shape at
    once: no kernel adds the steps' products at the broadcast's (batch, out, in) shape;
    the gradient is torch's."""
    rng = np.random.default_rng(4)
    ws, xs = rng.standard_normal((6, 5)), rng.standard_normal((24, 8, 5))

    def loss_of(lib, w, x):  # x[t] @ w.T written as a broadcast product and a sum
        h = (x[0][:, None, :] * w[None]).sum(-1)
        for t in range(1, x.shape[0]):
            h = ((x[t][:, None, :] * w[None]).sum(-1) + h).tanh()
        return (h * h).sum()

    w = fg.tensor(ws, requires_grad=True)
    (g,) = fg.grad(loss_of(fg, w, fg.tensor(xs)), [w])
    shapes = [rec.loop.name for rec in fg.kernels(fg.grad(loss_of(fg, w, fg.tensor(xs)), [w])[0])]
    assert not any("8x6x5" in name for name in shapes), shapes
    torch = pytest.importorskip("torch")
    wt = torch.tensor(ws, requires_grad=True)
    (gt,) = torch.autograd.grad(loss_of(torch, wt, torch.tensor(xs)), [wt])
    np.testing.assert_allclose(g.numpy(), gt.numpy(), rtol=1e-12, atol=1e-12)


def _lstm_grads(deferred: bool, create_graph: bool = False, detach_h0: bool = False):
    """(loss, the input's and every parameter's gradient) of a 2-layer bidirectional LSTM,
    with the directions' gradients deferred (one macro node each) or derived at once."""
    from fusegrad.ir import autodiff

    kept = set(autodiff.DEFERRED_GRADS)
    if not deferred:
        autodiff.DEFERRED_GRADS.clear()
    try:
        fg.manual_seed(0)
        lstm = nn.LSTM(4, 8, num_layers=2, bidirectional=True)
        rng = np.random.default_rng(8)
        x = fg.tensor(rng.standard_normal((3, 3, 4)).astype(np.float32), requires_grad=True)
        h0 = fg.tensor(rng.standard_normal((4, 3, 8)).astype(np.float32), requires_grad=True)
        c0 = fg.zeros(4, 3, 8)
        out, (h, c) = lstm(x, (h0.detach() if detach_h0 else h0, c0))
        loss = (out * out).sum() + (h * h.sin()).sum() + 0.5 * c.sum()
        params = list(lstm.parameters())
        grads = fg.grad(loss, [x, h0, *params], create_graph=create_graph, allow_unused=True)
        if create_graph:  # a penalty on the gradients, differentiated again
            penalty = sum((g * g).sum() for g in grads if g is not None)
            grads = fg.grad(penalty, [x, *params])
        return [loss.detach().numpy()] + [None if g is None else g.detach().numpy() for g in grads]
    finally:
        autodiff.DEFERRED_GRADS.update(kept)


@pytest.mark.parametrize(
    "create_graph",
    [False, pytest.param(True, marks=pytest.mark.slow)],  # (18 s on 2 cores: its compile)
    ids=["grad", "grad_of_grad"],
)
def test_a_directions_gradient_is_one_deferred_macro_node_with_the_derived_values(
    create_graph,
):
    # its backward is one "macro_grad" node per direction, expanded and derived only when
    # the plan is compiled; the values are those derived at once, and a gradient of the
    # gradients goes through the derived form
    from fusegrad.ir.node import toposort
    from fusegrad.ir.ops import Ops

    fg.manual_seed(0)
    lstm = nn.LSTM(4, 8)
    x = fg.randn(5, 2, 4, requires_grad=True)
    (gx,) = fg.grad(lstm(x)[0].sum(), [x])
    nodes = toposort([gx.node])
    assert [n.arg[0] for n in nodes if n.op is Ops.MACRO] == ["macro_grad"]
    assert len(nodes) < 40  # (the derived gradient of 5 steps: hundreds)
    # (the same sums, but fused otherwise where the plans differ: within float32 rounding)
    for got, want in zip(_lstm_grads(True, create_graph), _lstm_grads(False, create_graph)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6 * np.abs(want).max())


def test_a_deferred_gradient_skips_a_detached_initial_state():
    # a state carried through detach() wants no gradient: the deferred node packs none
    # for it, and the others are the derived ones
    got, want = _lstm_grads(True, detach_h0=True), _lstm_grads(False, detach_h0=True)
    assert got[2] is None and want[2] is None
    for a, b in zip(got, want):
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_a_gradient_penalty_through_a_recurrent_layer_matches_central_differences(mode):
    # second derivatives through the steps' shared weight gradient (_RecurrentProjection)
    # and the stacked outputs' rule (whose gradient was detached: they came out wrong):
    # d/dw of a penalty on the input's and the recurrent weight's gradients, against
    # float64 central differences
    from fusegrad.nn import rnn as R

    gates = R.GATES[mode]
    rng = np.random.default_rng(9)
    x0 = rng.standard_normal((4, 2, 3))
    w_hh0 = rng.standard_normal((gates * 2, 2)) / 2
    w_ih0 = rng.standard_normal((gates * 2, 3)) / 2
    b0 = rng.standard_normal(gates * 2) / 2

    def penalty(w_hh, w_ih, b):
        # (the central differences call it on plain tensors: grad() wants them to need it)
        w_hh, w_ih, b = (
            t if t.requires_grad else t.detach().requires_grad_() for t in (w_hh, w_ih, b)
        )
        x = fg.tensor(x0, requires_grad=True)
        h0 = fg.zeros(2, 2, dtype=fg.float64) + 0.25
        state = (h0, h0 + 0.25) if mode == "LSTM" else h0
        out, last = R._run_direction(mode, x, state, (w_ih, w_hh, None, b), False, None)
        final = last[1] if mode == "LSTM" else last
        loss = (out * out.sin()).sum() + (final * final).sum()
        dx, dw = fg.grad(loss, [x, w_hh], create_graph=True)
        return (dx * dx).sum() + (dw * dw).sum()

    args = [fg.tensor(a, requires_grad=True) for a in (w_hh0, w_ih0, b0)]
    assert fg.testing.gradcheck(penalty, args)


def test_an_lstm_layer_equals_its_cell_step_by_step_at_special_points():
    # the layer's steps project h through _RecurrentProjection (its carrier adds -0.0);
    # the cell projects it plainly: outputs and states bit for bit, signs of zero, an
    # infinity and a NaN included, and the gradients equal where both are finite
    fg.manual_seed(0)
    lstm, cell = nn.LSTM(2, 2), nn.LSTMCell(2, 2)
    values = np.array([[0.0, 0.5, -0.5, 1.0], [-1.0, 0.0, 0.5, -0.0]], np.float32)
    w_ih = np.tile(values.reshape(4, 2), (2, 1))  # (8, 2): weights of 0, +-0.5, +-1, -0
    w_hh = -w_ih[:, ::-1].copy()
    bias = np.array([0.0, -0.0, 0.5, -0.5, 1.0, -1.0, 0.0, -0.0], np.float32)
    for module, names in ((lstm, ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")),
                          (cell, ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))):  # fmt: skip
        for name, value in zip(names, (w_ih, w_hh, bias, -bias)):
            getattr(module, name).data = fg.tensor(value)
    x0 = np.array(
        [[[0.0, -0.0], [1.0, -1.0]], [[-0.0, -0.0], [2.0, np.inf]], [[0.5, -0.5], [np.nan, 0.0]]],
        np.float32,
    )
    x1, x2 = fg.tensor(x0, requires_grad=True), fg.tensor(x0, requires_grad=True)
    out, (h, c) = lstm(x1)
    state, outs = None, []
    for t in range(3):
        state = cell(x2[t], state)
        outs.append(state[0])
    got, want = [out, h[0], c[0]], [fg.stack(outs), state[0], state[1]]
    for a, b in zip(got, want):
        a, b = a.detach().numpy(), b.detach().numpy()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(np.signbit(a), np.signbit(b))
    (out.sum() + c.sum()).backward()
    (fg.stack(outs).sum() + state[1].sum()).backward()
    ok = np.isfinite(x1.grad.numpy()) & np.isfinite(x2.grad.numpy())
    np.testing.assert_allclose(x1.grad.numpy()[ok], x2.grad.numpy()[ok], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(np.isnan(x1.grad.numpy()), np.isnan(x2.grad.numpy()))


@pytest.mark.cpu_device  # the CPU's layout packs panels
@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_the_recurrent_weight_is_packed_once_for_every_step(mode):
    # each step's hidden projection h @ w_hh.T has 3 rows, too few to pay for packing
    # w_hh.T alone; read by all 7 steps it is packed in panels once (one copy kernel for
    # it), and the outputs and gradients are those of the step-by-step composed form
    layer = getattr(nn, mode)(5, 64)  # gates 4 x 64 (LSTM) or 3 x 64 (GRU): panels of 32
    load(layer)
    x0 = fill((7, 3, 5), 9).astype(np.float32)
    x = fg.tensor(x0, requires_grad=True)
    out, _ = layer(x)
    packs = [k for k in fg.kernels(out) if "packed in panels of 32 columns" in k.reason]
    assert len(packs) == 1, [k.reason for k in fg.kernels(out)]
    (gx,) = fg.grad((out * out).sum(), [x])
    # the same layer run a step at a time through its cell: no shared weight
    cell = getattr(nn, mode + "Cell")(5, 64)
    cell.load_state_dict(
        {k.replace("_l0", ""): v for k, v in layer.state_dict().items()}, strict=True
    )
    xs = fg.tensor(x0, requires_grad=True)
    state, rows = None, []
    for t in range(7):
        state = cell(xs[t], state)
        rows.append(state[0] if mode == "LSTM" else state)
    composed = fg.stack(rows)
    (gxs,) = fg.grad((composed * composed).sum(), [xs])
    close(out, composed.numpy(), 1e-5)
    close(gx, gxs.numpy(), 1e-5)


def np_lstm_projected(x, params, layers, directions, hidden, proj, h0, c0):
    """torch's LSTM with projections in numpy: h = w_hr (o * tanh(c)); (T, B, I) input."""

    def sig(z):
        return 1 / (1 + np.exp(-z))

    layer_in = x
    hn, cn = [], []
    for layer in range(layers):
        outs = []
        for d in range(directions):
            sfx = f"_l{layer}" + ("_reverse" if d else "")
            w_ih, w_hh = params["weight_ih" + sfx], params["weight_hh" + sfx]
            b = params["bias_ih" + sfx] + params["bias_hh" + sfx]
            w_hr = params["weight_hr" + sfx]
            h, c = h0[layer * directions + d], c0[layer * directions + d]
            out = [None] * x.shape[0]
            order = range(x.shape[0] - 1, -1, -1) if d else range(x.shape[0])
            for t in order:
                i, f, g, o = np.split(layer_in[t] @ w_ih.T + h @ w_hh.T + b, 4, -1)
                c = sig(f) * c + sig(i) * np.tanh(g)
                h = (sig(o) * np.tanh(c)) @ w_hr.T
                out[t] = h
            outs.append(np.stack(out))
            hn.append(h)
            cn.append(c)
        layer_in = np.concatenate(outs, -1)
    return layer_in, np.stack(hn), np.stack(cn)


@pytest.mark.parametrize("layers, bidirectional", [(1, False), (2, True)])
def test_lstm_with_projections_values_and_gradients(layers, bidirectional):
    """proj_size: torch's parameters (weight_hr after each direction's biases, weight_hh
    taking the projection), states (h of the projection's size, c of the hidden size) and
    values; the gradient of weight_hr against float64 central differences."""
    lstm = nn.LSTM(3, 4, num_layers=layers, bidirectional=bidirectional, proj_size=2).double()
    names = [n for n, _ in lstm.named_parameters()]
    assert names[:5] == ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0", "weight_hr_l0"]
    assert lstm.weight_hh_l0.shape == (16, 2) and lstm.weight_hr_l0.shape == (2, 4)
    if layers == 2:
        assert lstm.weight_ih_l1.shape == (16, 4)  # the projections of both directions
    assert "proj_size=2" in repr(lstm) and len(lstm.all_weights[0]) == 5
    params = {k: fill(v.shape, i) for i, (k, v) in enumerate(lstm.state_dict().items())}
    lstm.load_state_dict({k: fg.tensor(v) for k, v in params.items()})
    d = 2 if bidirectional else 1
    x = np.cos(np.arange(5 * 2 * 3) * 0.3).reshape(5, 2, 3)
    h0 = fill((layers * d, 2, 2), 20)
    c0 = fill((layers * d, 2, 4), 21)
    want = np_lstm_projected(x, params, layers, d, 4, 2, h0, c0)
    out, (h, c) = lstm(fg.tensor(x), (fg.tensor(h0), fg.tensor(c0)))
    for got, ref in zip((out, h, c), want):
        np.testing.assert_allclose(got.detach().numpy(), ref, rtol=1e-12, atol=1e-14)
    out_zero, (h_zero, _) = lstm(fg.tensor(x))  # zeros of each state's own size
    want_zero = np_lstm_projected(x, params, layers, d, 4, 2, 0 * h0, 0 * c0)
    np.testing.assert_allclose(out_zero.detach().numpy(), want_zero[0], rtol=1e-12, atol=1e-14)
    weights = fill(out.shape, 30)
    (out * fg.tensor(weights)).sum().backward()
    w = params["weight_hr_l0"]
    for index in [(0, 0), (1, 3)]:
        values = []
        for sign in (1, -1):
            moved = dict(params, weight_hr_l0=w.copy())
            moved["weight_hr_l0"][index] += sign * 1e-6
            o = np_lstm_projected(x, moved, layers, d, 4, 2, h0, c0)[0]
            values.append((o * weights).sum())
        numeric = (values[0] - values[1]) / 2e-6
        assert abs(lstm.weight_hr_l0.grad.numpy()[index] - numeric) < 1e-7


def test_rnn_cell_base_is_torchs_base_of_the_cells():
    assert all(issubclass(c, nn.RNNCellBase) for c in (nn.RNNCell, nn.LSTMCell, nn.GRUCell))

    class Cell(nn.RNNCellBase):  # torch's pattern: num_chunks gates of hidden_size rows
        def __init__(self):
            super().__init__(3, 2, bias=False, num_chunks=5)

        def forward(self, x, h):
            return (x @ self.weight_ih.t() + h @ self.weight_hh.t()).tanh()

    cell = Cell()
    assert repr(cell) == "Cell(3, 2, bias=False)"
    assert [(n, p.shape) for n, p in cell.named_parameters()] == [
        ("weight_ih", (10, 3)),
        ("weight_hh", (10, 2)),
    ]
    assert cell.bias_ih is None and np.abs(cell.weight_ih.numpy()).max() <= 1 / np.sqrt(2)
    assert nn.LSTMCell(3, 2).weight_ih.shape == (8, 3) and nn.GRUCell(3, 2).bias_hh.shape == (6,)
    empty = nn.RNNCellBase(3, 0, True, 4)  # hidden_size 0: nothing to draw, as torch's
    assert empty.weight_hh.shape == (0, 0)


def _under_views(n):
    from fusegrad.ir.ops import MOVEMENT

    while n.op in MOVEMENT:
        n = n.srcs[0]
    return n


@pytest.mark.parametrize("mode", ["LSTM", "GRU"])
def test_a_state_given_as_zeros_is_put_in_memory_with_the_values_of_none(mode):
    """Zeros given as the initial state (`init_hidden`'s `new_zeros`) are an input of the
    layer's graph, a buffer, as a state carried from a step before is (`in_memory`): the
    outputs and gradients are those of no state given, at 0 and -0.0 inputs too."""
    from fusegrad.ir.ops import Ops

    fg.manual_seed(0)
    layer = getattr(nn, mode)(3, 4, num_layers=2)
    x_np = np.random.default_rng(0).standard_normal((5, 2, 3)).astype(np.float32)
    x_np[0, 0] = [0.0, -0.0, 1.0]
    weight = next(layer.parameters())
    zeros = weight.new_zeros(2, 2, 4)
    given = (zeros, weight.new_zeros(2, 2, 4)) if mode == "LSTM" else zeros
    results, states = [], []
    for hx in (given, None):
        x = fg.tensor(x_np, requires_grad=True)
        out, _ = layer(x, hx)
        directions = [n for n in fg.ir.node.toposort([out.node]) if n.op is Ops.MACRO]
        states.append({_under_views(s).op for m in directions for s in m.srcs[1:3]})
        out.sum().backward()
        results.append((out.numpy(), x.grad.numpy(), weight.grad.numpy()))
        layer.zero_grad()
    for got, want in zip(*results):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    assert Ops.CONST not in states[0] and Ops.CONST in states[1]
    assert zeros.node.op is Ops.CONST  # (the caller's tensor is left as it was)
