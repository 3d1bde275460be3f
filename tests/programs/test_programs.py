"""Acceptance programs: PyTorch scripts in the shapes real programs have (tests/programs/*.py),
each run unchanged by `python -m fusegrad script.py --small-flags` in a subprocess. A run
passes when it exits 0, asks for no torch name fusegrad lacks, and prints losses that are
finite and go down. Where torch (and torchvision) are installed, the same script runs
under them too, and the same checks hold; where both start from the same numpy-drawn
weights, their first losses agree."""

from __future__ import annotations

import gzip
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

PROGRAMS = Path(__file__).resolve().parent
MNIST = PROGRAMS.parents[1] / "examples" / "data" / "mnist"


def run_program(cwd: Path, script: str, *args: str, on_fusegrad: bool = True):
    """The finished run of tests/programs/`script` (on fusegrad, or else on the installed
    PyTorch) in folder `cwd`."""
    launcher = ["-m", "fusegrad"] if on_fusegrad else []
    return subprocess.run(
        [sys.executable, *launcher, str(PROGRAMS / script), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )


def printed(done, key: str) -> list[float]:
    """The numbers printed after `key` ('loss 0.25' -> 0.25), in order; the run must have
    succeeded without asking for a missing torch name."""
    assert done.returncode == 0, done.stderr[-3000:]
    assert "asked for" not in done.stderr, done.stderr[-3000:]
    values = [float(v) for v in re.findall(rf"\b{key} (\S+)", done.stdout)]
    assert values, f"no {key!r} in:\n{done.stdout}"
    assert all(math.isfinite(v) for v in values), (key, values)
    return values


def needs_torch(with_torchvision: bool = False):
    """PyTorch, where it is installed (and torchvision with it); else the test skips."""
    torch = pytest.importorskip("torch")
    if with_torchvision:
        pytest.importorskip("torchvision")
    return torch


def mean(values) -> float:
    return sum(values) / len(values)


def torchvision_root(folder: Path) -> Path:
    """A torchvision root holding MNIST as torchvision keeps it (MNIST/raw, unzipped), for
    runs under the real torchvision, which would otherwise download it."""
    raw = folder / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    for packed in MNIST.glob("*.gz"):
        (raw / packed.name[: -len(".gz")]).write_bytes(gzip.decompress(packed.read_bytes()))
    return folder / "data"


# ---------------------------------------------------------------- (a) MNIST CNN

MNIST_ARGS = ("--epochs", "3", "--limit", "512", "--test-limit", "256")


def check_mnist_cnn(done):
    train = printed(done, "train_loss")
    assert len(train) == 3 and train[-1] < train[0] < math.log(10) + 0.1
    assert printed(done, "accuracy")[-1] > 0.5  # chance is a tenth


def test_mnist_cnn_with_adadelta_and_steplr(tmp_path):
    """torchvision's MNIST (--data names a folder without it: the shipped copy is read)."""
    check_mnist_cnn(run_program(tmp_path, "mnist_cnn.py", *MNIST_ARGS, "--data", "absent"))


def test_mnist_cnn_under_torch(tmp_path):
    needs_torch(with_torchvision=True)
    root = torchvision_root(tmp_path)
    check_mnist_cnn(run_program(tmp_path, "mnist_cnn.py", *MNIST_ARGS, "--data", str(root),
                                on_fusegrad=False))  # fmt: skip


# ---------------------------------------------------------------- (b) VAE


def check_vae(done, out: Path):
    train, test = printed(done, "train_loss"), printed(done, "test_loss")
    assert train[-1] < train[0] and test[-1] < test[0]
    assert train[0] < 784 * math.log(2) * 1.2  # near the loss of predicting 1/2 everywhere
    grid = (out / "reconstruction_3.png").read_bytes()
    assert grid.startswith(b"\x89PNG\r\n\x1a\n")


def test_vae_on_mnist_writes_its_reconstructions(tmp_path):
    done = run_program(tmp_path, "vae.py", "--epochs", "3", "--limit", "512", "--out", "out")
    check_vae(done, tmp_path / "out")


def test_vae_under_torch(tmp_path):
    needs_torch(with_torchvision=True)
    root = torchvision_root(tmp_path)
    done = run_program(tmp_path, "vae.py", "--epochs", "3", "--limit", "512", "--out", "out",
                       "--data", str(root), on_fusegrad=False)  # fmt: skip
    check_vae(done, tmp_path / "out")


# ---------------------------------------------------------------- (c) DCGAN


def check_dcgan(done, steps: int):
    loss_d, loss_g = printed(done, "loss_D"), printed(done, "loss_G")
    d_x, d_g_z = printed(done, "D_x"), printed(done, "D_G_z")
    assert len(loss_d) == len(loss_g) == steps
    assert all(0 < p < 1 for p in d_x + d_g_z)
    # the discriminator tells real from generated better than chance (2 ln 2) once trained
    assert mean(loss_d[steps // 2 :]) < 2 * math.log(2)


def test_dcgan_on_fake_data_with_a_detached_fake_batch(tmp_path):
    done = run_program(tmp_path, "dcgan.py", "--steps", "20")
    check_dcgan(done, 20)
    # and the generator, trained against it, gains on it: its loss falls, D(x) rises
    loss_g, d_x = printed(done, "loss_G"), printed(done, "D_x")
    assert mean(loss_g[-5:]) < mean(loss_g[:5]) and mean(d_x[-5:]) > mean(d_x[:5])


def test_dcgan_under_torch(tmp_path):
    needs_torch(with_torchvision=True)
    check_dcgan(run_program(tmp_path, "dcgan.py", "--steps", "20", on_fusegrad=False), 20)


# ---------------------------------------------------------------- (d) LSTMCell + LBFGS

SINE_ARGS = ("--steps", "3", "--max-iter", "4", "--waves", "6", "--length", "24",
             "--hidden", "8", "--future", "4", "--numpy-init")  # fmt: skip


def sine_first_loss(waves=6, length=24, hidden=8, period=20, seed=0) -> float:
    """The script's first loss with --numpy-init, computed in numpy: two LSTM cells
    (gates i, f, g, o) and a linear read-out over the waves but the first three."""
    rng = np.random.default_rng(seed)
    shifts = rng.integers(-4 * period, 4 * period, waves)
    data = np.sin((np.arange(length) + shifts[:, None]) / period)
    shapes = [(4 * hidden, 1), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    shapes += [(4 * hidden, hidden), (4 * hidden, hidden), (4 * hidden,), (4 * hidden,)]
    shapes += [(1, hidden), (1,)]
    p = [rng.uniform(-0.3, 0.3, s) for s in shapes]
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731

    def cell(x, h, c, w_ih, w_hh, b_ih, b_hh):
        i, f, g, o = np.split(x @ w_ih.T + b_ih + h @ w_hh.T + b_hh, 4, axis=1)
        c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
        return sigmoid(o) * np.tanh(c), c

    series, target = data[3:, :-1], data[3:, 1:]
    h1 = c1 = h2 = c2 = np.zeros((len(series), hidden))
    outputs = []
    for t in range(series.shape[1]):
        h1, c1 = cell(series[:, t : t + 1], h1, c1, *p[0:4])
        h2, c2 = cell(h1, h2, c2, *p[4:8])
        outputs.append(h2 @ p[8].T + p[9])
    return float(np.mean((np.concatenate(outputs, axis=1) - target) ** 2))


def check_sine(done):
    losses = printed(done, "loss")
    assert len(losses) == 3 and losses[0] > losses[1] > losses[2]
    printed(done, "test_loss")
    return losses


def test_lstm_cells_with_lbfgs_on_sine_waves(tmp_path):
    losses = check_sine(run_program(tmp_path, "sine_lstm.py", *SINE_ARGS))
    assert losses[0] == pytest.approx(sine_first_loss(), rel=1e-6)  # printed to 8 digits


def test_lstm_cells_with_lbfgs_under_torch(tmp_path):
    needs_torch()
    ours = check_sine(run_program(tmp_path, "sine_lstm.py", *SINE_ARGS))
    theirs = check_sine(run_program(tmp_path, "sine_lstm.py", *SINE_ARGS, on_fusegrad=False))
    assert ours[0] == pytest.approx(theirs[0], rel=1e-6)


# ---------------------------------------------------------------- (e) makemore-style

CHAR_ARGS = ("--steps", "60", "--words", "300", "--log-every", "10")


def check_char_model(done):
    losses = printed(done, "loss")
    assert losses[0] < math.log(30)  # about uniform over its ~20 characters at the start
    assert mean(losses[-2:]) < losses[0] - 0.5
    train, test = printed(done, "train_loss"), printed(done, "test_loss")
    assert train[0] < losses[0] and test[0] < losses[0]


def test_character_model_with_an_endless_random_sampler(tmp_path):
    check_char_model(run_program(tmp_path, "char_model.py", *CHAR_ARGS, "--samples", "0"))


def test_character_model_under_torch(tmp_path):
    needs_torch()
    done = run_program(tmp_path, "char_model.py", *CHAR_ARGS, on_fusegrad=False)
    check_char_model(done)
    assert "samples:" in done.stdout


def test_character_model_samples_words(tmp_path):
    # (an embedding of cat(context, multinomial(...)): a gather by a computed index)
    done = run_program(tmp_path, "char_model.py", *CHAR_ARGS, "--samples", "3")
    check_char_model(done)
    assert len(re.search(r"samples: (.*)", done.stdout).group(1).split()) == 3


# ---------------------------------------------------------------- (f) nanoGPT-style

GPT_ARGS = ("--max-iters", "20", "--eval-interval", "10", "--out", "out")


def check_nanogpt(done):
    train, val = printed(done, "train_loss"), printed(done, "val_loss")
    assert len(train) == 3 and train[2] < train[1] < train[0] and val[2] < val[0]
    assert train[0] == pytest.approx(math.log(32), abs=0.2)  # uniform over 32 tokens at first
    assert len(printed(done, "loss")) == 20


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_nanogpt_style_trainer_with_autocast_scaler_and_accumulation(tmp_path, dtype):
    """float16 turns the GradScaler on (its scale multiplies every backward, and
    `unscale_` takes it off before the gradients are clipped)."""
    import fusegrad as fg

    check_nanogpt(run_program(tmp_path, "nanogpt.py", *GPT_ARGS, "--dtype", dtype))
    checkpoint = fg.load(tmp_path / "out" / "ckpt.pt")
    assert checkpoint["iter_num"] == 20 and checkpoint["config"]["dtype"] == dtype
    assert "lm_head.weight" in checkpoint["model"] and checkpoint["optimizer"]["state"]


def test_nanogpt_style_trainer_under_torch(tmp_path):
    needs_torch()
    check_nanogpt(run_program(tmp_path, "nanogpt.py", *GPT_ARGS, on_fusegrad=False))


# ---------------------------------------------------------------- (g) word-level LM

SENTENCES = PROGRAMS.parents[1] / "examples" / "data" / "sentiment" / "movie_review_snippets.tsv.gz"
WORD_LM_ARGS = ("--data", str(SENTENCES), "--lines", "300", "--epochs", "2")


def check_word_lm(done):
    (vocab,) = printed(done, "vocab")
    train, valid = printed(done, "train_loss"), printed(done, "valid_loss")
    assert len(train) == len(valid) == 2
    assert train[1] < train[0] < math.log(vocab) + 0.5 and valid[1] < valid[0]
    return train, valid


def test_word_level_lstm_lm_with_clipping_manual_sgd_and_a_no_grad_evaluation(tmp_path):
    """Its evaluation carries the hidden state under no_grad with no optimizer step: each
    window's `.item()` computes the state with the loss (`carried.read_along`), so the
    windows run one cached plan instead of each recomputing all before it."""
    check_word_lm(run_program(tmp_path, "word_lm.py", *WORD_LM_ARGS))


def test_word_level_lm_under_torch(tmp_path):
    needs_torch()
    ours, _ = check_word_lm(run_program(tmp_path, "word_lm.py", *WORD_LM_ARGS))
    theirs, _ = check_word_lm(run_program(tmp_path, "word_lm.py", *WORD_LM_ARGS,
                                          on_fusegrad=False))  # fmt: skip
    # different random streams (dropout, initial weights): the same loss, roughly
    assert ours[0] == pytest.approx(theirs[0], rel=0.05)


# ---------------------------------------------------------------- (h) spectrally normalized GAN

SNGAN_STEPS = 30


def check_sngan(done):
    loss_d, loss_g = printed(done, "loss_D"), printed(done, "loss_G")
    assert len(loss_d) == len(loss_g) == SNGAN_STEPS
    # the hinge loss of a discriminator that outputs 0 is 2: it learns to beat that
    assert mean(loss_d[SNGAN_STEPS // 2 :]) < 2
    # each spectrally normalized weight's largest singular value is near 1 (the power
    # iteration's estimate, one step per forward, trails weights that Adam moves); the
    # last layer's, a row, exactly: one step finds a rank-one matrix's singular vectors
    sigmas = printed(done, "sigma")
    assert len(sigmas) == 3 and all(0.9 < s < 1.3 for s in sigmas), sigmas
    assert sigmas[2] == pytest.approx(1, abs=1e-3)
    # the state dicts (weight_orig, weight_u, weight_v; parametrizations.*.original0/1)
    # load into fresh networks that compute the same
    assert printed(done, "reload") == [0.0]


def test_sngan_with_hook_based_spectral_norm_and_weight_norm_parametrizations(tmp_path):
    check_sngan(run_program(tmp_path, "sngan.py", "--steps", str(SNGAN_STEPS)))


def test_sngan_under_torch(tmp_path):
    needs_torch()
    check_sngan(run_program(tmp_path, "sngan.py", "--steps", str(SNGAN_STEPS), on_fusegrad=False))
