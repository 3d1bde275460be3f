"""Lazy values carried from one training step to the next are computed with the step
(`fusegrad.carried`), so a program's cost per step stays flat over a run: recurrent state
through detach(), a running metric kept as a tensor, an EMA copy of the weights, a GAN's
detached fake batch kept for the next step. Each loop runs 50 steps; the kernels and the
graph nodes each step schedules are counted (after two warm-up steps, the last ten steps
equal the first ten), and the values equal those of the same loop that realizes the
carried values by hand after every step."""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.carried import from_constants
from fusegrad.ir.ops import Ops
from fusegrad.nn import functional as F
from fusegrad.runtime.engine import engine

STEPS = 50


@pytest.fixture
def counted(monkeypatch):
    """Per step: [kernels run, graph nodes scheduled]; call `.new_step()` before each."""
    steps: list[list[int]] = []
    run = engine.run

    def counting(plan, leaves, nodes, targets, timed=False):
        seen, stack = set(), list(nodes)
        while stack:  # the graph the plan computes: down to the values it reads
            n = stack.pop()
            if id(n) in seen or n.op in (Ops.BUFFER, Ops.CONST) or engine.value(n) is not None:
                continue
            seen.add(id(n))
            stack.extend(n.srcs)
        steps[-1][0] += len(plan.steps)
        steps[-1][1] += len(seen)
        return run(plan, leaves, nodes, targets, timed)

    monkeypatch.setattr(engine, "run", counting)

    class Counts(list):
        def new_step(self):
            steps.append([0, 0])

    counts = Counts()
    counts.steps = steps
    return counts


def assert_flat(counted):
    steps = counted.steps[:STEPS]  # (then the reads after the loop)
    # (the first steps settle: how many depends on what the process ran before, whose
    # graphs' constants the engine may already read from buffers, `lift_constants`: after
    # the module's doctest, one more than in a fresh process)
    first, last = steps[5:15], steps[-10:]
    assert first == last, str(steps)
    assert all(k > 0 for k, _ in steps), steps  # something ran every step


def _rng():
    return np.random.default_rng(3)


# ---------------------------------------------------------------- recurrent state
V, E, H, T, B = 7, 4, 5, 3, 2


def _lstm_run(by_hand: bool, update: str, counted=None):
    """`update`: "sgd" (optim.SGD), "manual" (`p.data.add_(p.grad, alpha=-lr)`), or
    "clipped" (that after `clip_grad_norm_`, as PyTorch's word language model does)."""
    fg.manual_seed(0)
    emb, rnn, dec = nn.Embedding(V, E), nn.LSTM(E, H), nn.Linear(H, V)
    params = [*emb.parameters(), *rnn.parameters(), *dec.parameters()]
    opt = optim.SGD(params, lr=0.5)
    rng, losses = _rng(), []
    hidden = (fg.zeros(1, B, H), fg.zeros(1, B, H))
    for _ in range(STEPS):
        if counted is not None:
            counted.new_step()
        x = fg.tensor(rng.integers(0, V, (T, B)))
        y = fg.tensor(rng.integers(0, V, (T * B,)))
        hidden = tuple(h.detach() for h in hidden)  # as PyTorch's word language model
        out, hidden = rnn(emb(x), hidden)
        loss = F.cross_entropy(dec(out).reshape(-1, V), y)
        opt.zero_grad()
        loss.backward()
        if update == "sgd":
            opt.step()
        else:
            if update == "clipped":
                nn.utils.clip_grad_norm_(params, 0.25)
            for p in params:
                p.data.add_(p.grad, alpha=-0.5)
        if by_hand:
            fg.realize(*hidden)
        losses.append(loss.item())
    if counted is not None:
        counted.new_step()
    return losses, [h.numpy().copy() for h in hidden]


@pytest.mark.parametrize("update", ["sgd", "manual", "clipped"])
def test_recurrent_state_carried_through_detach(counted, update):
    losses, hidden = _lstm_run(False, update, counted)
    assert_flat(counted)
    want_losses, want_hidden = _lstm_run(True, update)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for h, w in zip(hidden, want_hidden):
        np.testing.assert_allclose(h, w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- running metric, EMA
def _mlp():
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))


def _metric_and_ema_run(by_hand: bool, counted=None):
    fg.manual_seed(1)
    model, ema = _mlp(), _mlp()
    ema.load_state_dict(model.state_dict())
    opt = optim.Adam(model.parameters(), lr=0.01)
    rng = _rng()
    running = fg.zeros(())
    for _ in range(STEPS):
        if counted is not None:
            counted.new_step()
        x = fg.tensor(rng.standard_normal((5, 6)).astype(np.float32))
        y = fg.tensor(rng.integers(0, 3, (5,)))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        running = 0.9 * running + 0.1 * loss.detach()
        with fg.no_grad():
            for e, p in zip(ema.parameters(), model.parameters()):
                e.mul_(0.9).add_(p, alpha=0.1)
        if by_hand:
            fg.realize(running, *ema.parameters())
    if counted is not None:
        counted.new_step()
    return running.item(), [e.numpy().copy() for e in ema.parameters()]


def test_a_running_metric_and_an_ema_of_the_weights(counted):
    running, ema = _metric_and_ema_run(False, counted)
    assert_flat(counted)
    want_running, want_ema = _metric_and_ema_run(True)
    np.testing.assert_allclose(running, want_running, rtol=1e-5)
    for e, w in zip(ema, want_ema):
        np.testing.assert_allclose(e, w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- GAN
def _gan_run(by_hand: bool, counted=None):
    fg.manual_seed(2)
    gen = nn.Sequential(nn.Linear(3, 6), nn.Tanh(), nn.Linear(6, 4))
    disc = nn.Sequential(nn.Linear(4, 6), nn.Tanh(), nn.Linear(6, 1))
    g_opt, d_opt = optim.Adam(gen.parameters(), lr=0.01), optim.SGD(disc.parameters(), lr=0.05)
    rng = _rng()
    kept = fg.zeros(4, 4)  # last step's fake batch, shown to the discriminator again
    ones, zeros = fg.ones(4, 1), fg.zeros(4, 1)
    losses = []
    for _ in range(STEPS):
        if counted is not None:
            counted.new_step()
        real = fg.tensor(rng.standard_normal((4, 4)).astype(np.float32))
        fake = gen(fg.tensor(rng.standard_normal((4, 3)).astype(np.float32)))
        d_loss = (
            F.binary_cross_entropy_with_logits(disc(real), ones)
            + F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros)
            + F.binary_cross_entropy_with_logits(disc(kept), zeros)
        )
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        kept = fake.detach()
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        if by_hand:
            fg.realize(kept)
        losses += [d_loss.item(), g_loss.item()]
    if counted is not None:
        counted.new_step()
    return losses, kept.numpy().copy()


def test_a_gan_s_detached_fake_batch_kept_for_the_next_step(counted):
    losses, kept = _gan_run(False, counted)
    assert_flat(counted)
    want_losses, want_kept = _gan_run(True)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    np.testing.assert_allclose(kept, want_kept, rtol=1e-5, atol=1e-6)


def _macros_under(t) -> list:
    seen, stack, out = set(), list(t.node.srcs), []
    while stack:
        n = stack.pop()
        if id(n) in seen or n.op in (Ops.BUFFER, Ops.DETACH):
            continue
        seen.add(id(n))
        out += [n] if n.op is Ops.MACRO else []
        stack.extend(n.srcs)
    return out


def _generator_steps(keep: bool, monkeypatch) -> list[float]:
    """A GAN's step as pytorch/examples' DCGAN writes it; `keep` False: without the
    contractions' values kept by the discriminator's step (`_kept_for_backward`)."""
    from fusegrad import carried

    if not keep:
        monkeypatch.setattr(carried, "_kept_for_backward", lambda lazy, seen: [])
    fg.manual_seed(5)
    gen = nn.Sequential(nn.Linear(3, 16), nn.ReLU(), nn.Linear(16, 8))
    disc = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    g_opt, d_opt = optim.Adam(gen.parameters(), lr=0.01), optim.Adam(disc.parameters(), lr=0.01)
    rng, losses = _rng(), []
    ones, zeros = fg.ones(6, 1), fg.zeros(6, 1)
    for _ in range(4):
        real = fg.tensor(rng.standard_normal((6, 8)).astype(np.float32))
        fake = gen(fg.tensor(rng.standard_normal((6, 3)).astype(np.float32)))
        d_opt.zero_grad()
        F.binary_cross_entropy_with_logits(disc(real), ones).backward()
        d_fake = F.binary_cross_entropy_with_logits(disc(fake.detach()), zeros)
        d_fake.backward()
        d_opt.step()
        macros = _macros_under(fake)
        assert len(macros) == 2
        assert all(engine.value(n) is not None for n in macros) == keep
        g_opt.zero_grad()
        g_loss = F.binary_cross_entropy_with_logits(disc(fake), ones)
        g_loss.backward()
        g_opt.step()
        losses += [d_fake.item(), g_loss.item()]
    monkeypatch.undo()
    return losses + [p.numpy() for p in gen.parameters()]


def test_a_gan_s_generator_step_reads_the_forward_pass_its_discriminator_step_computed(
    monkeypatch,
):
    """The fake batch is alive and lazy at the discriminator's step, which computes it; no
    gradient pass has gone through its graph (the discriminator saw it detached), so that
    step stores the generator's contractions too, and the generator's backward reads them
    instead of running the generator's forward pass again (a DCGAN ran its transposed
    convolutions twice a step). The values are the same either way."""
    kept, again = _generator_steps(True, monkeypatch), _generator_steps(False, monkeypatch)
    for a, b in zip(kept, again):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_plain_step_keeps_no_contractions_of_the_logits_it_computes():
    # the backward went through the logits' graph before the step: nothing to keep for it
    fg.manual_seed(6)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = fg.tensor(_rng().standard_normal((5, 6)).astype(np.float32))
    out = model(x)
    F.cross_entropy(out, fg.tensor([0, 1, 2, 3, 0])).backward()
    opt.step()
    assert out._has_value()
    assert not any(engine.value(n) is not None for n in _macros_under(out))


# ---------------------------------------------------------------- what it costs a plain step
@pytest.mark.parametrize("conv", [False, True], ids=["mlp", "conv"])
def test_the_plain_step_runs_the_same_kernels_with_the_rule(monkeypatch, conv):
    """The logits (and, with a convolution, the pooled activations max-pooling's gradient
    holds) are alive at the step: the step returns them, but computes them anyway, so it
    runs as many kernels as without the rule."""
    from fusegrad import carried

    def kernels_per_step(rule: bool) -> list[int]:
        if not rule:
            monkeypatch.setattr(carried, "carried", lambda device, taken: [])
        fg.manual_seed(4)
        if conv:
            model = nn.Sequential(
                nn.Conv2d(1, 3, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(27, 4)
            )
            shape = (2, 1, 8, 8)
        else:
            model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 4))
            shape = (5, 6)
        opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        rng, counts = _rng(), []
        observe = lambda plan, records: counts.append(len(records))  # noqa: E731
        engine.observers.append(observe)
        try:
            for _ in range(3):
                x = fg.tensor(rng.standard_normal(shape).astype(np.float32))
                y = fg.tensor(rng.integers(0, 4, (shape[0],)))
                out = model(x)
                loss = F.cross_entropy(out, y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                loss.item()
        finally:
            engine.observers.remove(observe)
            monkeypatch.undo()
        return counts

    assert kernels_per_step(True) == kernels_per_step(False)


def test_the_record_of_lazy_values_stays_bounded_in_a_loop_with_no_step():
    # an evaluation loop makes lazy tensors and drops them, and no optimizer step ever
    # takes the record: the references of tensors gone are dropped as it grows
    from fusegrad import carried

    x = fg.ones(4)
    kept = [x * 3.0]  # one lives on: it stays noted
    for k in range(6 * carried.COMPACT_AT):
        y = x * float(k)  # noqa: F841 (made and dropped)
    assert len(carried._lazy.refs) <= 2 * carried.COMPACT_AT + 1
    assert any(r() is kept[0] for r in carried._lazy.refs)


# ---------------------------------------------------------------- loops with no step
def _eval_run(by_hand: bool, counted=None):
    """PyTorch's word language model's `evaluate`: the hidden state carried through
    detach() under no_grad, the loss read with `.item()` each batch, no optimizer."""
    fg.manual_seed(0)
    emb, rnn, dec = nn.Embedding(V, E), nn.LSTM(E, H, 2), nn.Linear(H, V)
    rng, losses = _rng(), []
    hidden = (fg.zeros(2, B, H), fg.zeros(2, B, H))
    with fg.no_grad():
        for _ in range(STEPS):
            if counted is not None:
                counted.new_step()
            x = fg.tensor(rng.integers(0, V, (T, B)))
            y = fg.tensor(rng.integers(0, V, (T * B,)))
            out, hidden = rnn(emb(x), hidden)
            hidden = tuple(h.detach() for h in hidden)
            if by_hand:
                fg.realize(*hidden)
            losses.append(F.cross_entropy(dec(out).reshape(-1, V), y).item())
    if counted is not None:
        counted.new_step()
    return losses, [h.numpy().copy() for h in hidden]


def test_recurrent_state_carried_by_an_evaluation_loop_s_reads(counted):
    # without an optimizer step the host read ends the step: the hidden state shares the
    # recurrence with the loss, so it is computed with it, not again by the next batch
    losses, hidden = _eval_run(False, counted)
    assert_flat(counted)
    want_losses, want_hidden = _eval_run(True)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
    for h, w in zip(hidden, want_hidden):
        np.testing.assert_allclose(h, w, rtol=1e-5, atol=1e-6)


@fg.no_grad()
def test_a_read_computes_only_the_lazy_values_that_share_work_with_it():
    x = fg.tensor([1.0, -0.0, 2.0])
    shared = x.exp()
    a = shared * 2.0  # shares `shared`, still to compute, with the value read
    unrelated = x * 5.0  # shares only x, which has a value: nothing to share
    later = shared.sum()  # (made before the read: in its window)
    big = fg.ones(1).expand(10**12)  # shares only a constant with the read below
    on_way = shared + 1.0
    assert on_way.sum().item() == pytest.approx(float(np.exp([1.0, 0.0, 2.0]).sum() + 3))
    assert a._has_value() and later._has_value()
    # computed on the read's way, not carried past it: left lazy (a 16-bit value stored
    # would round what later kernels compute from it)
    assert not shared._has_value() and not on_way._has_value()
    assert not unrelated._has_value() and not big._has_value()
    assert (fg.ones(1) * 3.0).sum().item() == 3.0 and not big._has_value()
    np.testing.assert_allclose(a.numpy(), np.exp(np.float32([1.0, -0.0, 2.0])) * 2, rtol=1e-6)
    got = unrelated.numpy()
    assert got.tolist() == [5.0, 0.0, 10.0] and np.signbit(got[1])  # -0.0 * 5 is -0.0
    b = shared * 3.0  # `shared` has a value now: b reads it, shares nothing to compute
    assert x.sum().item() == 3.0 and not b._has_value()


def test_a_read_looks_at_each_lazy_tensor_once():
    # the window of a read is what was noted since the last one: a tensor left lazy by
    # one read is not walked again by every later read
    from fusegrad import carried

    x = fg.tensor([1.0, 2.0])
    with fg.no_grad():
        y = x * 2.0  # shares nothing with the reads below
        for _ in range(3):
            (x + 1.0).sum().item()
            assert carried._lazy.read_from == len(carried._lazy.refs)
        assert not y._has_value()
        assert y.tolist() == [2.0, 4.0]


def test_with_gradients_on_a_read_computes_only_what_it_reads():
    # a training loop's reads (and a test comparing two forms' bits) are as before: its
    # optimizer step carries its state; a 16-bit value stored because something else was
    # read would round what later kernels compute from it
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    e = x.exp()
    a = e * 2.0
    assert (e + 1.0).sum().item() == pytest.approx(float(np.exp([1.0, 2.0]).sum() + 2), rel=1e-6)
    assert not a._has_value()


def _word_model_steps(by_hand: bool, steps: int = 3) -> tuple[list[float], list[int]]:
    """pytorch/examples' word language model in small: the corpus batched lazily
    (`view(b, -1).t().contiguous()`, a validation set likewise, unused), the hidden state
    started from `new_zeros` and carried through `detach()`, a hand-written SGD update,
    `loss.item()` ending each step. Its losses and the plans scheduled after each step;
    `by_hand`: the data and the first state realized by the program itself."""
    fg.manual_seed(0)
    emb, lstm, out = nn.Embedding(50, 8), nn.LSTM(8, 8), nn.Linear(8, 50)
    params = [*emb.parameters(), *lstm.parameters(), *out.parameters()]
    data = fg.tensor(np.arange(600) * 7 % 50).view(4, -1).t().contiguous()
    valid = fg.tensor(np.arange(200) * 3 % 50).view(4, -1).t().contiguous()
    weight = params[0]
    hidden = (weight.new_zeros(1, 4, 8), weight.new_zeros(1, 4, 8))
    if by_hand:
        data, valid = data.realize(), valid.realize()
        hidden = tuple(h.realize() for h in hidden)
    losses, plans = [], []
    for i in range(0, 10 * steps, 10):
        x, y = data[i : i + 10], data[i + 1 : i + 11].reshape(-1)
        hidden = tuple(h.detach() for h in hidden)
        output, hidden = lstm(emb(x), hidden)
        loss = F.cross_entropy(out(output).view(-1, 50), y)
        for p in params:
            p.grad = None
        loss.backward()
        for p in params:
            p.data.add_(p.grad, alpha=-0.5)
        losses.append(loss.item())
        plans.append(engine.stats["scheduled"])
    assert valid._has_value()  # (computed along, apart from the steps' plan)
    np.testing.assert_array_equal(valid.numpy(), (np.arange(200) * 3 % 50).reshape(4, -1).T)
    return losses, plans


def test_a_first_step_builds_the_graph_of_the_later_ones_from_lazy_data_and_zero_state():
    """Data batched lazily and a recurrent state started from zeros are computed apart
    from the first step (the data when sliced, `movement.copied_data`, or with the step's
    carried values, `carried._computed_apart`; the zeros given to the LSTM put in memory,
    `tensor.in_memory`): the second step runs the first step's plan, where it compiled
    a plan of its own (the first held the data's copy and the zeros), and the losses are
    those of the program that realizes the data and the state itself."""
    losses, plans = _word_model_steps(by_hand=False)
    want, _ = _word_model_steps(by_hand=True)
    assert plans[1] == plans[2] == plans[0]
    assert losses == want


class _Encoding(nn.Module):
    """pytorch/examples' PositionalEncoding in small: a table written into `zeros` when
    the module is built, registered as a buffer through a view of it."""

    def __init__(self, d: int, max_len: int = 40):
        super().__init__()
        pe = fg.zeros(max_len, d)
        position = fg.arange(0, max_len, dtype=fg.float32).unsqueeze(1)
        div_term = fg.exp(fg.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe[:, 0::2] = fg.sin(position * div_term)
        pe[:, 1::2] = fg.cos(position * div_term)
        self.register_buffer("pe", pe.unsqueeze(0).transpose(0, 1))

    def forward(self, x):
        return x + self.pe[: x.size(0), :]


class _MaskedModel(nn.Module):
    """An embedding, the encoding, one causal self-attention and a decoder: the causal mask
    made by the first forward (`triu(full(..., -inf))`) and kept on `self`, as the word
    language model's Transformer keeps `src_mask`."""

    def __init__(self):
        super().__init__()
        self.emb, self.pos, self.out = nn.Embedding(20, 8), _Encoding(8), nn.Linear(8, 20)
        self.src_mask = None

    def forward(self, src):
        if self.src_mask is None or self.src_mask.size(0) != len(src):
            self.src_mask = fg.triu(fg.full((len(src), len(src)), float("-inf")), diagonal=1)
        h = self.pos(self.emb(src)).permute(1, 0, 2)  # (batch, time, 8)
        att = h @ h.transpose(1, 2) + self.src_mask
        return self.out((att.softmax(-1) @ h).permute(1, 0, 2))


def _masked_model_steps(by_hand: bool, steps: int = 3) -> tuple[list[float], list[int]]:
    """The losses of `_MaskedModel` trained by SGD and the plans scheduled after each step;
    `by_hand`: the table and the mask computed by the program itself."""
    fg.manual_seed(0)
    model = _MaskedModel()
    if by_hand:
        model.pos.pe.realize()
    opt = fg.optim.SGD(model.parameters(), lr=0.1)
    losses, plans = [], []
    for i in range(steps):
        x = fg.tensor(np.arange(48).reshape(12, 4) * (7 + i) % 20)
        out = model(x)
        if by_hand:
            model.src_mask.realize()
        loss = F.cross_entropy(out.reshape(-1, 20), fg.tensor(np.arange(48) * 3 % 20))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
        plans.append(engine.stats["scheduled"])
    return losses, plans


def test_a_first_step_builds_the_graph_of_the_later_ones_from_tables_a_model_builds():
    """A table registered as a buffer when the model is built (computed then:
    `Module.register_buffer`, `tensor.computed_now`) and a causal mask the first forward
    keeps on `self` (computed apart from the first step: `carried.from_constants`) are
    read from memory by the first step as by the later ones: the second step runs the first
    step's plan, and the losses are those of the program that computes them itself."""
    losses, plans = _masked_model_steps(by_hand=False)
    want, _ = _masked_model_steps(by_hand=True)
    assert plans[0] == plans[1] == plans[2]
    assert losses == want


def test_values_that_read_a_step_s_inputs_are_not_computed_apart():
    """`from_constants` takes tables, constants and views of data, never a value computed
    from a step's inputs through an op (an EMA of a weight, a recurrent state), which
    every step computes anew with its own outputs; nor one that needs a gradient."""
    w = fg.randn(3, 3).realize()
    assert from_constants(fg.triu(fg.full((4, 4), float("-inf")), diagonal=1))
    assert from_constants(fg.arange(5).float() * 2)
    assert from_constants(w.t())
    assert not from_constants(w * 0.9 + 0.1)
    assert not from_constants(fg.zeros(3, requires_grad=True) * 2)
