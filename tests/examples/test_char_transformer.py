"""examples/char_transformer.py: a few training steps on the shipped sentences lower the loss."""

from __future__ import annotations

import math
import os

import numpy as np
from _files import load_file

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "char_transformer.py")


def load_example():
    module = load_file("char_transformer_example", EXAMPLE)
    return module


def test_loss_falls_and_a_sample_is_drawn():
    ct = load_example()
    data = ct.CharData(ct.load_text())
    assert 90 <= data.vocab_size <= 120 and len(data.train) > 1_000_000
    model, losses = ct.train(
        data, steps=25, block=16, batch=16, dim=32, heads=2, layers=1, lr=1e-2, log=None
    )
    assert abs(losses[0] - math.log(data.vocab_size)) < 0.2  # starts at the uniform guess
    assert np.mean(losses[-5:]) < losses[0] - 1.0
    assert ct.evaluate(model, data, block=16, batch=8, batches=1) < losses[0] - 0.8
    out = ct.sample(model, data, "the film", 20)
    assert out.startswith("the film") and len(out) == len("the film") + 20


def test_eager_and_jit_steps_agree():
    ct = load_example()
    data = ct.CharData(ct.load_text())
    common = dict(steps=4, block=8, batch=4, dim=16, heads=2, layers=1, log=None)
    _, eager = ct.train(data, jit=False, **common)
    _, jitted = ct.train(data, jit=True, **common)
    np.testing.assert_allclose(eager, jitted, rtol=1e-5)


def test_under_autocast_the_loss_falls_as_in_float32_and_parameters_stay_float32():
    import fusegrad as fg

    ct = load_example()
    data = ct.CharData(ct.load_text())
    common = dict(steps=25, block=16, batch=16, dim=32, heads=2, layers=1, lr=1e-2, log=None)
    _, full = ct.train(data, **common)
    model, mixed = ct.train(data, amp=fg.autocast("cpu"), **common)
    assert all(p.dtype is fg.float32 for p in model.parameters())
    with fg.autocast("cpu"), fg.no_grad():
        logits = model(fg.tensor(np.zeros((1, 16), dtype=np.int64)))
    assert logits.dtype is fg.bfloat16  # the last Linear ran in bfloat16
    # same data and initial weights: the curves differ by bfloat16's rounding only
    assert abs(mixed[0] - full[0]) < 0.02 and abs(np.mean(mixed[-5:]) - np.mean(full[-5:])) < 0.1
