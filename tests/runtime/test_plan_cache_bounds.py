"""The plan cache's bounds never break a running program: a plan larger than
FUSEGRAD_KERNEL_CACHE is kept (and said once), a step's big and small plans do not evict
each other, and a plan evicted while something holds it comes back as the same plan."""

from __future__ import annotations

import warnings

import numpy as np

import fusegrad as fg
from fusegrad import nn, optim
from fusegrad.nn import functional as F
from fusegrad.runtime.engine import engine

V, E, H, T, B = 11, 6, 5, 4, 3  # vocabulary, embedding, hidden, length, batch


class _LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.rnn, self.dec = nn.Embedding(V, E), nn.LSTM(E, H, 2), nn.Linear(H, V)

    def forward(self, x, state):
        out, state = self.rnn(self.emb(x), state)
        return self.dec(out).reshape(-1, V), state


def _train(jitted: bool, steps: int, bound: int):
    """A 2-layer LSTM language model's steps, the hidden state carried by detach();
    the losses, and the step (for its replay count)."""
    fg.manual_seed(0)
    model = _LanguageModel()
    opt = optim.Adam(model.parameters(), lr=0.01)

    def step(x, y, h, c):
        logits, (h, c) = model(x, (h, c))
        loss = F.cross_entropy(logits, y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss, h.detach(), c.detach()

    run = fg.jit(step) if jitted else step
    rng = np.random.default_rng(1)
    h, c, losses = fg.zeros(2, B, H), fg.zeros(2, B, H), []
    with fg.config.override(kernel_cache_size=bound):
        for _ in range(steps):
            x = fg.tensor(rng.integers(0, V, (T, B)))
            y = fg.tensor(rng.integers(0, V, (T, B)))
            loss, h, c = run(x, y, h, c)
            losses.append(loss.item())
    return losses, run


def test_jit_of_an_lstm_language_model_step_whose_plan_exceeds_the_kernel_bound():
    """The step's plan (hundreds of kernels) is larger than the bound: before, storing it
    evicted the call's other plans and they evicted it, so the two recorded calls ran
    different plans and jit raised 'computed different graphs on two calls'."""
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        losses, step = _train(jitted=True, steps=6, bound=97)
    assert step.replays == 3
    expected, _ = _train(jitted=False, steps=6, bound=1 << 20)
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    texts = [str(w.message) for w in said if "FUSEGRAD_KERNEL_CACHE=97" in str(w.message)]
    assert len(texts) == 1, texts  # said once, however many times the plan is stored
    assert "raise FUSEGRAD_KERNEL_CACHE" in texts[0]


def _chain(x, n):
    for k in range(n):  # 2n kernels: a contraction ends each
        x = (x @ x.T).tanh() @ x + k
    return x


def test_a_big_plan_and_small_ones_alternate_without_compiling_again():
    with fg.config.override(kernel_cache_size=5, cache=None):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for _ in range(3):
                _chain(fg.ones(4, 3) * 0.01, 4).numpy()  # larger than the bound alone
                _chain(fg.ones(4, 2) * 0.01, 1).numpy()
                _chain(fg.ones(4, 5) * 0.01, 1).numpy()
                if _ == 0:
                    scheduled = engine.stats["scheduled"]
        assert engine.stats["scheduled"] == scheduled  # every plan stayed cached
        kept = [len(p.steps) for p in engine.plans.values()]
        assert max(kept) > 5 and sum(kept) - max(kept) <= 5, kept


def test_an_evicted_plan_still_held_comes_back_as_the_same_plan():
    with fg.config.override(plan_cache_size=1, cache=None):
        y = _chain(fg.ones(3, 3) * 0.01, 1)
        held, _, _ = engine.plan_for([y.node])
        _chain(fg.ones(3, 4) * 0.01, 1).numpy()  # evicts it from the cache
        assert all(p is not held for p in engine.plans.values())
        again, _, fresh = engine.plan_for([_chain(fg.ones(3, 3) * 0.01, 1).node])
        assert again is held and not fresh
