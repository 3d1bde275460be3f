"""A character-level transformer language model on the movie-review sentences, PyTorch-style.

Run:  python examples/char_transformer.py [--steps 150] [--layers 2] [--dim 64] [--heads 4]
                                          [--block 64] [--batch 32] [--lr 3e-3] [--sample 300]
                                          [--no-jit] [--amp bf16]

The text is the 10,605 Rotten Tomatoes sentences the repository ships
(examples/data/sentiment, read by `fusegrad.datasets.text.read_ratings`), joined by
newlines; the first 90% of the characters train, the rest validate. The
model is a GPT-style decoder written as one would in PyTorch:

- token embedding + learned position embedding (nn.Embedding),
- `--layers` pre-norm blocks: LayerNorm -> multi-head causal self-attention
  (one Linear to q, k, v; F.scaled_dot_product_attention(is_causal=True);
  an output Linear) -> residual; LayerNorm -> Linear(d, 4d) -> GELU ->
  Linear(4d, d) -> residual,
- a final LayerNorm and a Linear to the character logits,

trained with cross-entropy on random windows of `--block` characters, AdamW
(weight decay on matrices only), a cosine learning-rate schedule
(optim.lr_scheduler.CosineAnnealingLR) and gradient clipping
(nn.utils.clip_grad_norm_ at 1.0). It prints the training loss as it falls
(it starts near ln(vocabulary) ~ 4.4 nats), the validation loss, and a
sample drawn character by character from the trained model.

`--amp bf16` runs the forward pass and the loss under `fg.autocast("cpu")` (the linear
layers and attention in bfloat16; parameters, gradients and AdamW in float32), and
validates under it too.

Every step has the same graph structure, so the step's kernels are compiled
once (the first step) and reused, and `fg.jit` replays the step without
re-running its Python (`--no-jit`: plain eager steps, same losses); sampling
runs the model on a fixed-size window, so it compiles once too. The default
run (150 steps) takes about a minute on two cores, the loss falling from
~4.6 to ~2.4 nats.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time

import numpy as np

import fusegrad as fg
from fusegrad import nn
from fusegrad.datasets import text
from fusegrad.nn import functional as F


def load_text() -> str:
    """The movie-review sentences, one per line."""
    return "\n".join(sentence for _, _, sentence in text.read_ratings()) + "\n"


class CharData:
    """The text as character ids, split 90/10, with random training windows."""

    def __init__(self, corpus: str, split: float = 0.9):
        self.chars = sorted(set(corpus))
        self.index = {c: i for i, c in enumerate(self.chars)}
        ids = np.array([self.index[c] for c in corpus], dtype=np.int64)
        cut = int(len(ids) * split)
        self.train, self.val = ids[:cut], ids[cut:]

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def batch(self, rng: np.random.Generator, batch: int, block: int, split: str = "train"):
        """(inputs, targets): `batch` windows of `block` ids, targets shifted by one."""
        data = self.train if split == "train" else self.val
        start = rng.integers(0, len(data) - block - 1, size=batch)
        rows = start[:, None] + np.arange(block + 1)[None, :]
        window = data[rows]
        return window[:, :-1], window[:, 1:]

    def encode(self, s: str) -> list[int]:
        return [self.index[c] for c in s if c in self.index]

    def decode(self, ids) -> str:
        return "".join(self.chars[int(i)] for i in ids)


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention: one projection to q, k, v, SDPA, one back."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, d = x.shape
        h = self.heads
        qkv = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)  # (3, B, H, T, Dh)
        q, k, v = qkv[0], qkv[1], qkv[2]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, H, T, Dh)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class CharTransformer(nn.Module):
    """Embeddings, `layers` blocks, a final LayerNorm and the logits over the characters."""

    def __init__(self, vocab: int, block: int, dim: int = 64, heads: int = 4, layers: int = 2):
        super().__init__()
        self.block = block
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(block, dim)
        self.blocks = nn.ModuleList([Block(dim, heads) for _ in range(layers)])
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab)
        for name, p in self.named_parameters():  # GPT-2's small initialisation
            if name.endswith("weight") and p.ndim == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and "ln" not in name:
                nn.init.zeros_(p)

    def forward(self, ids):
        t = ids.shape[1]
        x = self.tokens(ids) + self.positions(fg.arange(t))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))  # (B, T, vocab)


def make_optimizer(model: nn.Module, lr: float, weight_decay: float = 0.1):
    """AdamW with decay on the matrices only (not on biases, LayerNorm or nothing else)."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return fg.optim.AdamW(groups, lr=lr, betas=(0.9, 0.99))


def train_step(model, opt, x, y, clip: float = 1.0, amp=None):
    """One step: forward, cross-entropy, backward, clip, AdamW. Returns the loss tensor.
    `amp`: an fg.autocast region for the forward pass and the loss."""
    with amp or contextlib.nullcontext():
        logits = model(x)
        b, t, v = logits.shape
        loss = F.cross_entropy(logits.reshape(b * t, v), y.reshape(b * t))
    opt.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip)
    opt.step()
    return loss


def train(
    data: CharData,
    steps: int,
    block: int = 64,
    batch: int = 32,
    dim: int = 64,
    heads: int = 4,
    layers: int = 2,
    lr: float = 3e-3,
    seed: int = 0,
    log_every: int = 25,
    log=print,
    jit: bool = True,
    amp=None,
):
    """Train a model; returns (model, the loss of every step). `amp`: an fg.autocast region
    for each step's forward pass and loss (None: float32)."""
    fg.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = CharTransformer(data.vocab_size, block, dim, heads, layers)
    opt = make_optimizer(model, lr)
    sched = fg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=steps, eta_min=lr / 10)

    def one_step(x, y):
        return train_step(model, opt, x, y, amp=amp)

    run_step = fg.jit(one_step) if jit else one_step
    losses = []
    start = time.perf_counter()
    for step in range(1, steps + 1):
        x, y = data.batch(rng, batch, block)
        loss = run_step(fg.tensor(x), fg.tensor(y))
        sched.step()
        losses.append(loss.item())
        if log and (step % log_every == 0 or step == 1):
            recent = np.mean(losses[-log_every:])
            log(
                f"step {step:4d}  loss {recent:.3f}  lr {sched.get_last_lr()[0]:.2e}  "
                f"{time.perf_counter() - start:5.1f} s"
            )
    return model, losses


def evaluate(
    model, data: CharData, block: int, batch: int = 32, batches: int = 4, amp=None
) -> float:
    """Mean cross-entropy on random validation windows (`amp`: an fg.autocast region)."""
    rng = np.random.default_rng(1)
    model.eval()
    total = 0.0
    with fg.no_grad(), amp or contextlib.nullcontext():
        for _ in range(batches):
            x, y = data.batch(rng, batch, block, "val")
            logits = model(fg.tensor(x))
            b, t, v = logits.shape
            total += F.cross_entropy(logits.reshape(b * t, v), fg.tensor(y).reshape(b * t)).item()
    model.train()
    return total / batches


def sample(model, data: CharData, prompt: str, length: int, temperature: float = 0.8, seed=0):
    """Draw `length` characters after `prompt`, one at a time.

    The model always sees a full window of `block` ids (the context, padded on
    the right), so every call has one shape; causal attention means the
    padding after the last real position cannot change its logits.
    """
    rng = np.random.default_rng(seed)
    block = model.block
    ids = data.encode(prompt) or [data.index["\n"]]
    model.eval()
    with fg.no_grad():
        for _ in range(length):
            context = ids[-block:]
            window = np.zeros((1, block), dtype=np.int64)
            window[0, : len(context)] = context
            logits = model(fg.tensor(window))[0, len(context) - 1].numpy().astype(np.float64)
            p = np.exp((logits - logits.max()) / temperature)
            ids.append(int(rng.choice(len(p), p=p / p.sum())))
    model.train()
    return data.decode(ids)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--sample", type=int, default=300, help="characters to sample at the end")
    ap.add_argument("--prompt", default="this movie is ")
    ap.add_argument(
        "--amp", choices=["bf16"], default=None, help="the forward pass under fg.autocast('cpu')"
    )
    ap.add_argument("--no-jit", action="store_true", help="eager steps instead of fg.jit")
    ap.add_argument(
        "--no-progress",
        action="store_true",
        help="accepted as by every example (this one logs lines)",
    )
    args = ap.parse_args(argv)
    data = CharData(load_text())
    print(
        f"{len(data.train):,} training and {len(data.val):,} validation characters, "
        f"{data.vocab_size} distinct (uniform guess: {math.log(data.vocab_size):.2f} nats)"
    )
    amp = fg.autocast("cpu", fg.bfloat16) if args.amp else None
    model, losses = train(
        data, args.steps, args.block, args.batch, args.dim, args.heads, args.layers, args.lr,
        args.seed, jit=not args.no_jit, amp=amp,
    )  # fmt: skip
    params = sum(p.numel() for p in model.parameters())
    val = evaluate(model, data, args.block, amp=amp)
    print(
        f"{params:,} parameters; validation loss {val:.4f} nats"
        + (" (autocast bf16)" if amp else "")
    )
    if args.sample:
        print("--- sample ---")
        print(sample(model, data, args.prompt, args.sample, seed=args.seed))


if __name__ == "__main__":
    main()
