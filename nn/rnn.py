"""Recurrent layers: `RNN`, `LSTM`, `GRU` and their cells, as torch.nn's.

Parameters have PyTorch's names and layouts (`weight_ih_l0` of shape
(gates * hidden, input), `weight_hh_l1_reverse`, `bias_ih_l0`, ...; gate order
LSTM i, f, g, o and GRU r, z, n), so a state_dict moves between the two.

A recurrent layer is a graph builder like the others: the input projection of
every time step is one matmul, and each step adds the hidden projection and
its gate arithmetic, which the scheduler fuses. The steps must also share
their kernels: a step that read `x[t]` as a slice would carry the offset t in
its kernel's code and compile anew for every t. So a step reads its row of a
sequence through a gather whose index is *data* (a one-element table holding
t), and the stacked outputs' gradient is read back the same way
(`_time_step`, `_stack_steps`): a 50-step sequence compiles the kernels of a
step once, plus the few that read or write the whole sequence.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> fg.manual_seed(0)
>>> lstm = nn.LSTM(4, 8, num_layers=2, batch_first=True, bidirectional=True)
>>> out, (h, c) = lstm(fg.ones(3, 5, 4))
>>> out.shape, h.shape, c.shape
((3, 5, 16), (4, 3, 8), (4, 3, 8))
>>> [name for name, _ in lstm.named_parameters()][:5]
['weight_ih_l0', 'weight_hh_l0', 'bias_ih_l0', 'bias_hh_l0', 'weight_ih_l0_reverse']
"""

from __future__ import annotations

import math
import warnings
import weakref

import numpy as np

from ..nnapi import (
    ShapeError,
    Tensor,
    cat,
    composite,
    custom_gradient,
    fail,
    gather_rows,
    host_table,
    in_memory,
    index_arange,
    materialize,
    register_composite,
    shared_weight_linear,
    stack,
    where,
    zeros,
)
from . import init
from .dense import dropout, linear
from .module import Module, place, placeholder_parameter
from .utils_rnn import PackedSequence, pack_rows, pad_packed_sequence

__all__ = ["GRU", "GRUCell", "LSTM", "LSTMCell", "RNN", "RNNBase", "RNNCell"]

GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


# ---------------------------------------------------------------- steps that share kernels


def _step_index(t: int) -> Tensor:
    """A one-element table holding t: data, so kernels reading through it do not depend on t."""
    return index_arange(t, t + 1)


STEP_GRADIENT = "a time step's gradient, stacked with the others"  # (one stored node a value)


def _time_step(seq: Tensor, t: int, index: Tensor | None = None) -> Tensor:
    """`seq[t]` of a (T, ...) tensor, read through a data index (see the module docstring):
    `index`, the one-element table holding t (`_step_index(t)` where not given).

    Its gradient is the row padded into the sequence's shape; the steps' padded
    rows add up to the stacked gradient in one kernel, as `cat` does.
    """
    steps, rest = seq.shape[0], tuple(seq.shape[1:])
    table = seq.reshape(steps, math.prod(rest))
    index = _step_index(t) if index is None else index
    row = gather_rows(table, index).reshape(rest)
    if not seq.requires_grad:
        return row

    def rule(grad, _seq):
        # stored, so the kernel adding up the steps' rows reads each instead of recomputing it
        grad = materialize(grad, STEP_GRADIENT)
        return [grad.reshape(1, *rest).pad([0, 0] * len(rest) + [t, steps - 1 - t])]

    return custom_gradient(row, [seq], rule)


def _stack_steps(states: list[Tensor], tables: list[Tensor]) -> Tensor:
    """`stack(states)`, whose gradient for each step is read through a data index (step t's
    through `tables[t]`: in a macro's expansion a source, as all data it reads must be)."""
    out = stack(states)
    if not any(s.requires_grad for s in states):
        return out

    count = len(states)  # (the rule keeps no tensor: see _RecurrentProjection)

    def rule(grad, *_states):
        return [_time_step(grad, t, tables[t]) for t in range(count)]

    return custom_gradient(out, states, rule, own_node=True)


# ---------------------------------------------------------------- one step of each kind


def _stored(t: Tensor, what: str) -> Tensor:
    return materialize(t, what)


# Each step function takes the step's input projection `xw`, the state, and `project`: the
# hidden state's projection, h @ w_hh.T + b_hh (`_recurrent_projection`).


def _rnn_tanh_step(xw, h, project):
    return _stored((xw + project(h)).tanh(), "RNN hidden state")


def _rnn_relu_step(xw, h, project):
    return _stored((xw + project(h)).relu(), "RNN hidden state")


def _lstm_step(xw, state, project):
    h, c = state
    gates = _stored(xw + project(h), "LSTM gates")
    # each of the step's two stored values is one macro node (ir/macro.py), not the 4
    # slices and 9 gate ops a plain-loop step would build and key again every time step
    c = _stored(_one_node("lstm_cell", (gates, c)), "LSTM cell state")
    return _stored(_one_node("lstm_hidden", (gates, c)), "LSTM hidden state"), c


def _one_node(kind: str, tensors: tuple) -> Tensor:
    """The step's composite `kind` on `tensors` (the projections or gates, the state last)
    as one macro node of the state's shape and dtype, where every tensor has that dtype (a
    float) and the state's batch shape; else composed as before (a state broadcast, or of
    another dtype), whose shape and dtype the macro could not declare."""
    state = tensors[-1]
    shape, dt = state.shape, state.dtype
    if dt.is_float and all(t.dtype == dt and t.shape[:-1] == shape[:-1] for t in tensors):
        return composite(kind, tensors, (), shape, dt)
    return _STEP_RULES[kind](tensors, ())


def _lstm_cell(tensors, params) -> Tensor:
    """c' = sigmoid(f) c + sigmoid(i) tanh(g), from the gates (i, f, g, o) and c."""
    gates, c = tensors
    i, f, g, _ = gates.chunk(4, -1)
    return f.sigmoid() * c + i.sigmoid() * g.tanh()


def _lstm_hidden(tensors, params) -> Tensor:
    """h' = sigmoid(o) tanh(c'), from the gates (i, f, g, o) and the new cell state c'."""
    gates, c = tensors
    return gates.chunk(4, -1)[3].sigmoid() * c.tanh()


def _gru_step(xw, h, project):
    hp = _stored(project(h), "GRU hidden projection")
    # one macro node, not the 6 slices and 8 gate ops a plain-loop step would build
    return _stored(_one_node("gru_hidden", (xw, hp, h)), "GRU hidden state")


def _gru_hidden(tensors, params) -> Tensor:
    """h' = (1 - z) n + z h, from the input's and the hidden state's projections."""
    xw, hp, h = tensors
    x_r, x_z, x_n = xw.chunk(3, -1)
    h_r, h_z, h_n = hp.chunk(3, -1)
    r, z = (x_r + h_r).sigmoid(), (x_z + h_z).sigmoid()
    n = (x_n + r * h_n).tanh()
    return n + z * (h - n)  # (1 - z) n + z h


_STEP_RULES = {"lstm_cell": _lstm_cell, "lstm_hidden": _lstm_hidden, "gru_hidden": _gru_hidden}
for _kind, _rule in _STEP_RULES.items():
    register_composite(_kind, _rule)

STEPS = {
    "RNN_TANH": _rnn_tanh_step,
    "RNN_RELU": _rnn_relu_step,
    "LSTM": _lstm_step,
    "GRU": _gru_step,
}


def _hidden_of(mode: str, state):
    return state[0] if mode == "LSTM" else state


def _run_direction(mode, x, state, weights, reverse: bool, lengths, w_hr=None):
    """One layer in one direction over a (T, B, I) sequence: (T, B, H) outputs, last state.

    With `lengths` (a (B, 1) host table), a sequence's state stops changing after
    its last step and its outputs there are zero, as a packed sequence's are; run
    backwards, its state is still the initial one when its last real step comes.

    Where the input, states and weights share one float dtype, the whole direction is one
    macro node (ir/macro.py: `_direction_rule` builds the steps), its outputs and last
    state stacked, (T + 1 or 2, B, H), and taken apart by views: a 50-step LSTM's plain
    loop built its forward graph, a dozen nodes a step, in 7.6 ms of Python every step;
    a step whose plan is cached never expands the macro. An LSTM with projections
    (`w_hr`: h = w_hr (o * tanh(c))) runs the steps composed.
    """
    if w_hr is not None:
        return _direction_steps(mode, x, state, weights, reverse, lengths, w_hr=w_hr)
    w_ih, w_hh, b_ih, b_hh = weights
    states = tuple(state) if mode == "LSTM" else (state,)
    steps = x.shape[0]
    tensors = [x, *states, w_ih, w_hh, *(b for b in (b_ih, b_hh) if b is not None)]
    dt = x.dtype
    one_dtype = dt.is_float and all(t.dtype == dt for t in tensors)
    if not one_dtype or steps == 0 or any(s.shape != states[0].shape for s in states):
        return _direction_steps(mode, x, state, weights, reverse, lengths)
    # the steps' index tables (data, one element each) and the lengths are sources too:
    # an expansion reads no data but its sources
    tables = [_step_index(t) for t in range(steps)]
    extra = [lengths] if lengths is not None else []
    params = (mode, reverse, b_ih is not None, b_hh is not None, lengths is not None)
    shape = (steps + len(states), *states[0].shape)
    packed = composite("rnn_direction", [*tensors, *extra, *tables], params, shape, dt)
    finals = tuple(packed[k] for k in range(len(states)))
    return packed[len(states) :], finals if mode == "LSTM" else finals[0]


def _direction_rule(tensors, params) -> Tensor:
    """The expansion of an `rnn_direction` macro: `_direction_steps` on its sources, its
    outputs and last state stacked along time."""
    mode, reverse, has_b_ih, has_b_hh, has_lengths = params
    k = 2 if mode == "LSTM" else 1
    x, states, rest = tensors[0], tensors[1 : 1 + k], list(tensors[1 + k :])
    w_ih, w_hh = rest.pop(0), rest.pop(0)
    b_ih = rest.pop(0) if has_b_ih else None
    b_hh = rest.pop(0) if has_b_hh else None
    lengths = rest.pop(0) if has_lengths else None
    state = tuple(states) if mode == "LSTM" else states[0]
    out, last = _direction_steps(
        mode, x, state, (w_ih, w_hh, b_ih, b_hh), reverse, lengths, tables=rest
    )
    finals = list(last) if mode == "LSTM" else [last]
    return cat([*(f.unsqueeze(0) for f in finals), out], 0)


def _direction_steps(mode, x, state, weights, reverse: bool, lengths, tables=None, w_hr=None):
    """`_run_direction` composed: the time loop, step by step (`tables`: the steps' index
    tables, made here where not given; `w_hr`: an LSTM's projection of its hidden state)."""
    w_ih, w_hh, b_ih, b_hh = weights
    step = STEPS[mode]
    steps = x.shape[0]
    tables = [_step_index(t) for t in range(steps)] if tables is None else tables
    xw = linear(x, w_ih, b_ih)  # every step's input projection: one matmul
    outputs = [None] * steps
    projection = _RecurrentProjection(w_hh, b_hh, steps)
    for t in reversed(range(steps)) if reverse else range(steps):
        new = step(_time_step(xw, t, tables[t]), state, projection.at(t))
        if w_hr is not None:  # h = w_hr h, the cell state as it was
            new = (linear(new[0], w_hr), new[1])
        if lengths is None:
            state, out = new, _hidden_of(mode, new)
        else:
            running = lengths > tables[t]  # data against data: no t in the kernel
            if mode == "LSTM":
                state = tuple(where(running, n, s) for n, s in zip(new, state))
            else:
                state = where(running, new, state)
            out = where(running, _hidden_of(mode, new), 0.0)
        outputs[t] = out
    return _stack_steps(outputs, tables), state


register_composite("rnn_direction", _direction_rule, deferred_grad=True)


class _RecurrentProjection:
    """The hidden projections h_t @ w_hh.T + b_hh of a direction's steps, whose weight and
    bias gradients are one product over every step rather than one per step.

    Derived step by step, each step's projection gives w_hh a (gates, hidden) gradient of
    its own, a batch-deep product, and the steps' are added one after another: an LSTM
    language model's backward spent most of its time there (256 such kernels a step of
    a 2-layer, 64-step model). Here a step's projection gives its gradient to h alone
    (`own`: g @ w_hh, by a rule of its own), plus a carrier of value -0.0 (adding it
    changes no value, not even a zero's sign) whose gradient is the projection's,
    placed at the step's row of one (steps, batch, gates) sink; the sink's rule is the
    weight's gradient, rows.T @ stack(h), one product over steps x batch rows (the bias's
    stays each step's sum of its rows). Every rule is built of differentiable ops on the tensors
    themselves, so a gradient of these gradients is right too. The same sums, in another
    order: within rounding of the step-by-step gradient.

    The rules keep nodes, not tensors: a lazy tensor kept alive by a rule would be
    computed by every optimizer step as a value carried between steps (carried.py)."""

    def __init__(self, w_hh: Tensor, b_hh: Tensor | None, steps: int):
        self.w, self.b, self.steps = w_hh, b_hh, steps
        # the h each step projects, by step: weak references to their nodes, which reach
        # the sink through their sources (its rule holding them would keep it forever)
        self.previous: list = [None] * steps
        self.sink = None

    def at(self, t: int):
        """Step t's `project(h)`."""
        if self.steps < 2:
            return lambda h: linear(h, self.w, self.b)
        return lambda h: self._project(h, t)

    def _project(self, h: Tensor, t: int) -> Tensor:
        w, b = self.w, self.b
        if self.sink is None:
            self.sink = self._sink(h)
        self.previous[t] = weakref.ref(h.node)
        # (every step reads w: packed once for all, `shared_weight_linear`)
        if b is None:
            own = custom_gradient(
                shared_weight_linear(h, w, b),
                [h, w],
                lambda g, _h, w: [g @ w, None],
                own_node=True,
            )
        else:  # (the bias's gradient stays the step's: summed from the stacked rows, it
            # was a kernel reading every step's rows through its pads)
            own = custom_gradient(
                shared_weight_linear(h, w, b),
                [h, w, b],
                lambda g, _h, w, _b: [g @ w, None, g.reshape(-1, g.shape[-1]).sum(0)],
                own_node=True,
            )
        steps = self.steps

        def into_row(g, _sink):
            # stored, so the kernel adding up the steps' rows reads each (as `_time_step`),
            # under `_time_step`'s words: an LSTM step's gate gradient, which both stack, is
            # then one stored node, and the two stacks one (not a copy and a stack each)
            g = materialize(g, STEP_GRADIENT)
            return [g.unsqueeze(0).pad([0, 0] * g.ndim + [t, steps - 1 - t])]

        return own + custom_gradient(self.sink[t], [self.sink], into_row, own_node=True)

    def _sink(self, h: Tensor) -> Tensor:
        """The (steps, *batch, gates) node whose gradient is every step's projection's."""
        w, previous = self.w, self.previous

        def rule(g, _w):
            g = materialize(g, "the steps' hidden projection gradients, stacked")
            rows = g.reshape(-1, g.shape[-1])
            hs = stack([Tensor(n(), requires_grad=True, leaf=False) for n in previous])
            return [rows.t() @ hs.reshape(rows.shape[0], -1)]

        # its value is -0.0 everywhere, but read from w (a rule needs a node built from its
        # inputs): one element of w, tested so that it is never taken, a NaN neither
        first = w.reshape(-1)[:1]
        never = (first != first) & (first == first)
        value = where(never, first, -0.0)
        shape = (self.steps, *h.shape[:-1], w.shape[0])
        value = value.reshape(*([1] * len(shape))).expand(*shape)
        return custom_gradient(value, [w], rule, own_node=True)


# ---------------------------------------------------------------- the layers


class RNNBase(Module):
    """What RNN, LSTM and GRU share: parameters per layer and direction, and the time loop."""

    def __init__(
        self,
        mode: str,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        device=None,
        dtype=None,
    ):
        super().__init__()
        if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1 or dropout is True:
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of "
                "an element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}",
                stacklevel=3,
            )
        if not isinstance(hidden_size, int) or isinstance(hidden_size, bool):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError(
                "proj_size should be a positive integer or zero to disable projections"
            )
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if proj_size and mode != "LSTM":
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        self.mode = mode
        self.input_size, self.hidden_size = input_size, hidden_size
        self.num_layers, self.bias = num_layers, bias
        self.batch_first, self.dropout = batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        gate_size = GATES[mode] * hidden_size
        directions = 2 if bidirectional else 1
        real_hidden = proj_size or hidden_size  # what h holds: projected, with proj_size
        self._flat_weights_names = []
        for layer in range(num_layers):
            layer_input = input_size if layer == 0 else real_hidden * directions
            for direction in range(directions):
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                shapes = [("weight_ih", (gate_size, layer_input))]
                shapes.append(("weight_hh", (gate_size, real_hidden)))
                if bias:
                    shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
                if proj_size:
                    shapes.append(("weight_hr", (proj_size, hidden_size)))
                for name, shape in shapes:
                    setattr(self, name + suffix, placeholder_parameter(*shape, dtype=dtype))
                    self._flat_weights_names.append(name + suffix)
        self.reset_parameters()
        place(self, device)

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden), 1/sqrt(hidden)), as torch's."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self) -> None:
        """A no-op, as torch's is off cuDNN: the weights are never copied into one buffer."""

    @property
    def all_weights(self) -> list[list[Tensor]]:
        per = (4 if self.bias else 2) + (self.proj_size > 0)
        flat = [getattr(self, n) for n in self._flat_weights_names]
        return [flat[i : i + per] for i in range(0, len(flat), per)]

    def _weights(self, layer: int, direction: int):
        suffix = f"_l{layer}" + ("_reverse" if direction else "")
        w_ih, w_hh = getattr(self, "weight_ih" + suffix), getattr(self, "weight_hh" + suffix)
        if not self.bias:
            return w_ih, w_hh, None, None
        return w_ih, w_hh, getattr(self, "bias_ih" + suffix), getattr(self, "bias_hh" + suffix)

    def _check_hidden(self, hx: Tensor, expected: tuple, what: str) -> None:
        if tuple(hx.shape) != expected:
            fail(
                ShapeError,
                type(self).__name__,
                f"Expected {what} size {expected}, got {list(hx.shape)}",
            )

    def forward(self, input, hx=None):
        """`input` (T, B, I) ((B, T, I) with batch_first; (T, I) unbatched; or a
        PackedSequence) -> (output, h_n), or (output, (h_n, c_n)) for an LSTM."""
        name = type(self).__name__
        packed = isinstance(input, PackedSequence)
        lengths = None
        if packed:
            padded, lens = pad_packed_sequence(input)
            x, lengths = padded, host_table(lens.numpy().reshape(-1, 1))
            batched = True
        else:
            if input.ndim not in (2, 3):
                raise ValueError(
                    f"{name}: Expected input to be 2D or 3D, got {input.ndim}D instead"
                )
            batched = input.ndim == 3
            x = input if batched else input.unsqueeze(1)
            if batched and self.batch_first:
                x = x.transpose(0, 1)
        if x.shape[-1] != self.input_size:
            fail(
                ShapeError,
                name,
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                f"got {x.shape[-1]}",
            )
        directions = 2 if self.bidirectional else 1
        batch = x.shape[1]
        expected = (self.num_layers * directions, batch, self.proj_size or self.hidden_size)
        states = self._initial_states(hx, batched, expected, x)
        layer_input = x
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for direction in range(directions):
                k = layer * directions + direction
                state = tuple(s[k] for s in states) if self.mode == "LSTM" else states[0][k]
                suffix = f"_l{layer}" + ("_reverse" if direction else "")
                out, last = _run_direction(
                    self.mode, layer_input, state, self._weights(layer, direction),
                    direction == 1, lengths, getattr(self, "weight_hr" + suffix, None),
                )  # fmt: skip
                outs.append(out)
                finals.append(last)
            layer_input = outs[0] if directions == 1 else cat(outs, 2)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = dropout(layer_input, self.dropout, True)
        if self.mode == "LSTM":
            h_n = stack([f[0] for f in finals])
            hidden = (h_n, stack([f[1] for f in finals]))
        else:
            hidden = stack(finals)
        output = layer_input
        if packed:  # the padded output packed in the input's order
            order = input.sorted_indices
            order = np.arange(batch) if order is None else order.numpy()
            data = pack_rows(output, lens.numpy(), order, batch_first=False)
            output = input._replace(data=data)
        elif not batched:
            output = output.squeeze(1)
            hidden = (
                tuple(h.squeeze(1) for h in hidden) if self.mode == "LSTM" else hidden.squeeze(1)
            )
        elif self.batch_first:
            output = output.transpose(0, 1)
        return output, hidden

    def _initial_states(self, hx, batched: bool, expected: tuple, x: Tensor) -> tuple:
        """(h0,) or (h0, c0), each (layers * directions, B, H) (h0's H the projection's
        size where the LSTM has one); zeros where `hx` is None."""
        count = 2 if self.mode == "LSTM" else 1
        shapes = [expected, (*expected[:2], self.hidden_size)][:count]
        if hx is None:
            return tuple(zeros(*shape, dtype=x.dtype, device=x.device) for shape in shapes)
        given = tuple(hx) if self.mode == "LSTM" else (hx,)
        if self.mode == "LSTM" and (not isinstance(hx, tuple) or len(hx) != 2):
            raise TypeError("LSTM: hx must be a tuple (h_0, c_0) of two tensors")
        out = []
        for k, h in enumerate(given):
            if not batched:
                if h.ndim != 2:
                    raise RuntimeError(
                        f"For unbatched 2-D input, hx should also be 2-D but got {h.ndim}-D tensor"
                    )
                h = h.unsqueeze(1)
            elif h.ndim != 3:
                raise RuntimeError(
                    f"For batched 3-D input, hx should also be 3-D but got {h.ndim}-D tensor"
                )
            what = f"hidden[{k}]" if self.mode == "LSTM" else "hidden"
            self._check_hidden(h, shapes[k], what)
            # zeros given (`init_hidden`) are an input, as the states carried later are
            out.append(in_memory(h))
        return tuple(out)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        return s


def _split_args(name, args, kwargs, names):
    """torch's recurrent layers take their options positionally too: map them to keywords."""
    if len(args) > len(names):
        raise TypeError(f"{name}() takes at most {len(names) + 2} positional arguments")
    for key, value in zip(names, args):
        if key in kwargs:
            raise TypeError(f"{name}() got multiple values for argument '{key}'")
        kwargs[key] = value
    return kwargs


_OPTIONS = ("num_layers", "bias", "batch_first", "dropout", "bidirectional")


class RNN(RNNBase):
    """Elman RNN: h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh) (or relu)."""

    def __init__(self, input_size, hidden_size, *args, nonlinearity: str = "tanh", **kwargs):
        if args:  # torch's order: num_layers, nonlinearity, bias, batch_first, ...
            names = ("num_layers", "nonlinearity") + _OPTIONS[1:]
            kwargs = _split_args("RNN", args, kwargs, names)
            nonlinearity = kwargs.pop("nonlinearity", nonlinearity)
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        self.nonlinearity = nonlinearity
        super().__init__("RNN_" + nonlinearity.upper(), input_size, hidden_size, **kwargs)


class LSTM(RNNBase):
    """Long short-term memory, gates i, f, g, o as torch.nn.LSTM:
    c_t = f * c_{t-1} + i * g, h_t = o * tanh(c_t). Returns (output, (h_n, c_n))."""

    def __init__(self, input_size, hidden_size, *args, **kwargs):
        kwargs = _split_args("LSTM", args, kwargs, _OPTIONS + ("proj_size",))
        super().__init__("LSTM", input_size, hidden_size, **kwargs)


class GRU(RNNBase):
    """Gated recurrent unit, gates r, z, n as torch.nn.GRU:
    n = tanh(W_in x + b_in + r * (W_hn h + b_hn)), h_t = (1 - z) * n + z * h_{t-1}."""

    def __init__(self, input_size, hidden_size, *args, **kwargs):
        kwargs = _split_args("GRU", args, kwargs, _OPTIONS)
        super().__init__("GRU", input_size, hidden_size, **kwargs)


# ---------------------------------------------------------------- cells: one step


class RNNCellBase(Module):
    """One step of a recurrent layer, as torch.nn.RNNCellBase(input_size, hidden_size, bias,
    num_chunks): parameters weight_ih (num_chunks * hidden_size, input_size), weight_hh
    (num_chunks * hidden_size, hidden_size), bias_ih and bias_hh (or None), each from
    U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)); a subclass writes its `forward`."""

    mode = "RNN_TANH"

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool,
        num_chunks: int,
        device=None,
        dtype=None,
    ):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        gate_size = num_chunks * hidden_size
        self.weight_ih = placeholder_parameter(gate_size, input_size, dtype=dtype)
        self.weight_hh = placeholder_parameter(gate_size, hidden_size, dtype=dtype)
        if bias:
            self.bias_ih = placeholder_parameter(gate_size, dtype=dtype)
            self.bias_hh = placeholder_parameter(gate_size, dtype=dtype)
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()
        place(self, device)

    def reset_parameters(self) -> None:
        """Every weight and bias from U(-1/sqrt(hidden), 1/sqrt(hidden)), as torch's."""
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0.0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def _step(self, input, state):
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if x.shape[1] != self.input_size:
            fail(
                ShapeError,
                name,
                f"input has inconsistent input_size: got {x.shape[1]} expected {self.input_size}",
            )
        expected = (x.shape[0], self.hidden_size)
        if state is None:
            zero = zeros(*expected, dtype=x.dtype, device=x.device)
            state = (zero, zero) if self.mode == "LSTM" else zero
        else:
            parts = state if self.mode == "LSTM" else (state,)
            parts = tuple(p if batched else p.unsqueeze(0) for p in parts)
            for k, p in enumerate(parts):
                if tuple(p.shape) != expected:
                    what = f"hidden[{k}]" if self.mode == "LSTM" else "hidden"
                    fail(ShapeError, name, f"Expected {what} size {expected}, got {list(p.shape)}")
            state = parts if self.mode == "LSTM" else parts[0]
        xw = linear(x, self.weight_ih, self.bias_ih)
        new = STEPS[self.mode](xw, state, lambda h: linear(h, self.weight_hh, self.bias_hh))
        if batched:
            return new
        return tuple(s.squeeze(0) for s in new) if self.mode == "LSTM" else new.squeeze(0)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s


class RNNCell(RNNCellBase):
    """h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh) (or relu), as torch.nn.RNNCell."""

    def __init__(
        self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None, dtype=None
    ):
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.mode, self.nonlinearity = "RNN_" + nonlinearity.upper(), nonlinearity

    def forward(self, input, hx=None):
        return self._step(input, hx)


class LSTMCell(RNNCellBase):
    """One LSTM step: (input, (h, c)) -> (h', c'), as torch.nn.LSTMCell."""

    mode = "LSTM"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, GATES["LSTM"], device, dtype)

    def forward(self, input, hx=None):
        return self._step(input, hx)


class GRUCell(RNNCellBase):
    """One GRU step: (input, h) -> h', as torch.nn.GRUCell."""

    mode = "GRU"

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, GATES["GRU"], device, dtype)

    def forward(self, input, hx=None):
        return self._step(input, hx)
