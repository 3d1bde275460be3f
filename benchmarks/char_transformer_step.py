"""One training step of examples/char_transformer.py, fusegrad (eager and jit) vs PyTorch eager.

Run:  .venv/bin/python benchmarks/char_transformer_step.py [--quick] [--steps 30]
                       [--batch 32] [--block 64] [--dim 64] [--heads 4] [--layers 2]

The step is the example's: embeddings, pre-norm blocks with causal
multi-head attention (scaled_dot_product_attention) and a GELU MLP, final
LayerNorm and logits, cross-entropy, backward, clip_grad_norm_(1.0), AdamW,
and reading the loss (`loss.item()`), on windows of the shipped movie-review
text. A timed step is everything the training loop does.

How the numbers are taken (as in the other step benchmarks here):
- both systems start from the same weights, and before anything is timed the
  first step's loss and the clipped gradient norm must agree;
- the systems alternate in blocks of steps, the order rotating each round,
  with a 0.2 s pause after PyTorch (its OpenMP workers spin after a call);
  each figure is the median ms per step over all timed steps;
- PyTorch gets `torch.set_num_threads(fg.config.threads)`.

PyTorch is optional: without it only fusegrad's columns are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import time

import numpy as np
from core_ops import source_version  # same folder; prints the commit measured

import fusegrad as fg

try:
    import torch
except ImportError:  # PyTorch is optional: its column is left empty
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "char_transformer.py")
PAUSE_AFTER_TORCH_S = 0.2
BLOCK_STEPS = 5


def load_example():
    spec = importlib.util.spec_from_file_location("char_transformer_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def first_batch_step():
    """(example module, model, optimizer, x, y): the example's model (dim 64, 4 heads, 2
    layers, block 64), seeded, its optimizer, and one batch of 32 as tensors: the step that
    cold_start.py and kernel_counts.py time and count."""
    ct = load_example()
    data = ct.CharData(ct.load_text())
    x, y = data.batch(np.random.default_rng(0), 32, 64)
    fg.manual_seed(0)
    model = ct.CharTransformer(data.vocab_size, 64, 64, 4, 2)
    return ct, model, ct.make_optimizer(model, 3e-3), fg.tensor(x), fg.tensor(y)


def torch_model(ct, fg_model, args, vocab: int):
    """The same architecture in PyTorch, with fusegrad's initial weights copied in."""
    tnn, tF = torch.nn, torch.nn.functional

    class Attention(tnn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = tnn.Linear(args.dim, 3 * args.dim)
            self.proj = tnn.Linear(args.dim, args.dim)

        def forward(self, x):
            b, t, d = x.shape
            h = args.heads
            qkv = self.qkv(x).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
            y = tF.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(tnn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = tnn.LayerNorm(args.dim)
            self.attn = Attention()
            self.ln2 = tnn.LayerNorm(args.dim)
            d = args.dim
            self.mlp = tnn.Sequential(tnn.Linear(d, 4 * d), tnn.GELU(), tnn.Linear(4 * d, d))

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.mlp(self.ln2(x))

    class Model(tnn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = tnn.Embedding(vocab, args.dim)
            self.positions = tnn.Embedding(args.block, args.dim)
            self.blocks = tnn.ModuleList([Block() for _ in range(args.layers)])
            self.ln = tnn.LayerNorm(args.dim)
            self.head = tnn.Linear(args.dim, vocab)

        def forward(self, ids):
            x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln(x))

    model = Model()
    state = {k: torch.tensor(np.array(v.numpy())) for k, v in fg_model.state_dict().items()}
    model.load_state_dict(state)
    return model


def torch_optimizer(model, lr: float):
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
        lr=lr,
        betas=(0.9, 0.99),
    )


def torch_step(model, opt, x, y):
    logits = model(x)
    b, t, v = logits.shape
    loss = torch.nn.functional.cross_entropy(logits.reshape(b * t, v), y.reshape(b * t))
    opt.zero_grad()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    return loss.item(), float(norm)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smoke run: few steps")
    ap.add_argument("--steps", type=int, default=30, help="timed steps per system")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--block", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    args = ap.parse_args()
    steps = 5 if args.quick else args.steps
    ct = load_example()
    data = ct.CharData(ct.load_text())
    rng = np.random.default_rng(0)
    batches = [data.batch(rng, args.batch, args.block) for _ in range(8)]
    print(
        f"fusegrad {source_version()}, {fg.config.threads} threads; step: batch {args.batch} x "
        f"{args.block} chars, dim {args.dim}, {args.heads} heads, {args.layers} layers"
    )

    fg.manual_seed(0)
    model = ct.CharTransformer(data.vocab_size, args.block, args.dim, args.heads, args.layers)
    systems = {}
    if torch is not None:
        torch.set_num_threads(fg.config.threads)
        tmodel = torch_model(ct, model, args, data.vocab_size)
        topt = torch_optimizer(tmodel, 3e-3)
        tbatches = [(torch.tensor(x), torch.tensor(y)) for x, y in batches]
        systems["pytorch eager"] = lambda i: torch_step(tmodel, topt, *tbatches[i % 8])[0]

    opt = ct.make_optimizer(model, 3e-3)
    fg_batches = [(fg.tensor(x), fg.tensor(y)) for x, y in batches]

    # the first step, checked against PyTorch's before any timing
    x, y = fg_batches[0]
    logits = model(x)
    b, t, v = logits.shape
    loss = ct.F.cross_entropy(logits.reshape(b * t, v), y.reshape(b * t))
    opt.zero_grad()
    loss.backward()
    norm = ct.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    first = (loss.item(), norm.item())
    if torch is not None:
        want = torch_step(tmodel, topt, *tbatches[0])
        print(f"first step: loss {first[0]:.6f} vs {want[0]:.6f}, grad norm {first[1]:.6f} "
              f"vs {want[1]:.6f}")  # fmt: skip
        if not np.allclose(first, want, rtol=1e-3):
            raise SystemExit("fusegrad and PyTorch disagree on the first step: not timing")
    else:
        print(f"first step: loss {first[0]:.6f}, grad norm {first[1]:.6f} (PyTorch not installed)")

    def eager(i):
        return ct.train_step(model, opt, *fg_batches[i % 8]).item()

    jitted = fg.jit(lambda x, y: ct.train_step(model, opt, x, y))

    def jit(i):
        return jitted(*fg_batches[i % 8]).item()

    systems = {"fusegrad eager": eager, "fusegrad jit": jit, **systems}
    for fn in systems.values():  # warm up: compile, record the jit
        for i in range(3):
            fn(i)
    times: dict[str, list[float]] = {name: [] for name in systems}
    names = list(systems)
    rounds = max(1, steps // BLOCK_STEPS)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            for i in range(BLOCK_STEPS):
                start = time.perf_counter()
                systems[name](i)
                times[name].append(time.perf_counter() - start)
            if name == "pytorch eager":
                time.sleep(PAUSE_AFTER_TORCH_S)
    base = statistics.median(times["pytorch eager"]) if torch is not None else None
    print(f"{'system':<16} {'ms/step':>9} {'vs PyTorch':>11}")
    for name in names:
        ms = statistics.median(times[name]) * 1e3
        ratio = f"{ms / (base * 1e3):.2f}x" if base else "-"
        print(f"{name:<16} {ms:9.1f} {ratio:>11}")
    if torch is None:
        print(f"{'pytorch eager':<16} {'-':>9} {'-':>11}")


if __name__ == "__main__":
    main()
