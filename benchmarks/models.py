"""Real models' training steps, fusegrad beside PyTorch on the same weights and batches.

Run:  python benchmarks/models.py [--model resnet18|gpt|vit|lstm|all] [--rounds 6]
                                  [--no-first] [--compile] [--quick]

The models (float32, on the CPU), each written once against a torch-like namespace, so
that fusegrad and PyTorch run the same code:

- resnet18: the CIFAR ResNet-18 (3x3 stem, BasicBlocks of 64-128-256-512 channels with
  BatchNorm, strided and 1x1 shortcut convolutions), batch 16 of 3 x 32 x 32, SGD with
  momentum 0.9 and weight decay;
- gpt: a GPT-style decoder (4 blocks, d 256, 4 heads, context 128, a character
  vocabulary of 256), batch 8, causal `scaled_dot_product_attention`, AdamW;
- vit: a small ViT (4 x 4 patches of 32 x 32 images by a strided convolution, d 192,
  4 blocks, 3 heads, mean-pooled), batch 16, AdamW;
- lstm: a 2-layer `nn.LSTM` language model (vocabulary 5000, 256 wide), sequence 64,
  batch 16, SGD with gradients clipped to norm 0.25.

fusegrad's model is built first (`fg.manual_seed(0)`) and its weights copied into
PyTorch's, so both start from the same weights; the first losses of both are printed
side by side. The systems (fusegrad's plain loop, the same step under `fg.jit`, PyTorch
eager, and with `--compile` PyTorch's step under `torch.compile`) alternate in blocks of
`BLOCK` steps, the order rotating each round, with a pause after each block
(shared/BENCHMARKS.md), on the same batches; `torch.set_num_threads` is fusegrad's
thread count. Each step ends with `loss.item()`. Reported: each system's median ms a
step, and fusegrad's time over PyTorch eager's as the median of the rounds' ratios with
a 95% bootstrap interval (below 1: fusegrad is faster).

The first step (without `--no-first`): each system's first step in a fresh process (the
model built, then one step timed), fusegrad's with an empty `FUSEGRAD_CACHE` ("cold")
and again on the folder it filled ("warm", the disk cache only: the median of
`WARM_RUNS` processes, and its ratio to the plain loop's steady step), with the kernels
compiled and the CPU time of the process and its compile children. The cold process goes
on for `AFTER_FIRST` more steps, untimed, so that the folder holds what a run of the
training loop leaves there: its plans are tuned at their tenth run
(`FUSEGRAD_AUTOTUNE_AFTER`) and only then kept on disk. The warm processes run one command,
so the first leaves in the folder what the next two read and make ahead at import (the
plans it used, the sizes of its buffers: docs/pipeline/6-compiling.md), as a program run
a second time does; the cold process's command is another (its step count differs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
BLOCK = 5  # steps a system runs back to back before the next one's turn
PAUSE = 0.2  # seconds after each block: spinning worker threads park before the next
MODELS = ("resnet18", "gpt", "vit", "lstm")


# ---------------------------------------------------------------- the models


def cifar_batch(seed: int, images: int = 16):
    """`images` random CIFAR-shaped images (3 x 32 x 32) and labels of 10 classes."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((images, 3, 32, 32), dtype=np.float32)
    return x, rng.integers(0, 10, images).astype(np.int64)


def build(T, name: str, images: int = 16):
    """(model, batch(seed) -> numpy (x, y), loss(model, x, y), optimizer(params), clip)
    of `name`, written against `T` (torch, or fusegrad); the CIFAR models' batches hold
    `images` images."""
    nn, F = T.nn, T.nn.functional

    def cifar(seed: int):
        return cifar_batch(seed, images)

    def classify(model, x, y):  # (ResNet's and ViT's loss)
        return F.cross_entropy(model(x), y)

    if name == "resnet18":

        class Block(nn.Module):
            def __init__(self, cin, cout, stride):
                super().__init__()
                self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(cout)
                self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
                self.bn2 = nn.BatchNorm2d(cout)
                self.shortcut = nn.Sequential()
                if stride != 1 or cin != cout:
                    self.shortcut = nn.Sequential(
                        nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
                    )

            def forward(self, x):
                out = F.relu(self.bn1(self.conv1(x)))
                out = self.bn2(self.conv2(out))
                return F.relu(out + self.shortcut(x))

        class ResNet18(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
                self.bn1 = nn.BatchNorm2d(64)
                layers, cin = [], 64
                for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
                    layers += [Block(cin, cout, stride), Block(cout, cout, 1)]
                    cin = cout
                self.layers = nn.Sequential(*layers)
                self.fc = nn.Linear(512, 10)

            def forward(self, x):
                out = self.layers(F.relu(self.bn1(self.conv1(x))))
                return self.fc(F.adaptive_avg_pool2d(out, 1).flatten(1))

        def optimizer(params):
            return T.optim.SGD(params, lr=0.05, momentum=0.9, weight_decay=5e-4)

        return ResNet18(), cifar, classify, optimizer, None

    if name in ("gpt", "vit"):
        causal = name == "gpt"
        d, heads, depth = (256, 4, 4) if causal else (192, 3, 4)

        class Attention(nn.Module):
            def __init__(self):
                super().__init__()
                self.qkv = nn.Linear(d, 3 * d)
                self.proj = nn.Linear(d, d)

            def forward(self, x):
                b, t, _ = x.shape
                q, k, v = self.qkv(x).split(d, dim=2)
                q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
                y = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                return self.proj(y.transpose(1, 2).reshape(b, t, d))

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln1, self.attn = nn.LayerNorm(d), Attention()
                self.ln2 = nn.LayerNorm(d)
                self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

            def forward(self, x):
                x = x + self.attn(self.ln1(x))
                return x + self.mlp(self.ln2(x))

        if causal:

            class GPT(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.tok = nn.Embedding(256, d)
                    self.pos = nn.Embedding(128, d)
                    self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
                    self.ln = nn.LayerNorm(d)
                    self.head = nn.Linear(d, 256, bias=False)

                def forward(self, idx):
                    t = idx.shape[1]
                    pos = T.arange(t)
                    x = self.blocks(self.tok(idx) + self.pos(pos))
                    return self.head(self.ln(x))

            def batch(seed):
                rng = np.random.default_rng(seed)
                seq = rng.integers(0, 256, (8, 129)).astype(np.int64)
                return seq[:, :-1].copy(), seq[:, 1:].copy()

            def loss(model, x, y):
                return F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))

            model = GPT()
        else:

            class ViT(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.patch = nn.Conv2d(3, d, 4, 4)
                    self.pos = nn.Parameter(T.zeros(1, 64, d))
                    self.blocks = nn.Sequential(*[Block() for _ in range(depth)])
                    self.ln = nn.LayerNorm(d)
                    self.head = nn.Linear(d, 10)

                def forward(self, x):
                    x = self.patch(x).flatten(2).transpose(1, 2) + self.pos
                    return self.head(self.ln(self.blocks(x)).mean(dim=1))

            batch, loss, model = cifar, classify, ViT()

        def optimizer(params):
            return T.optim.AdamW(params, lr=3e-4, weight_decay=0.01)

        return model, batch, loss, optimizer, None

    if name == "lstm":
        vocab, width = 5000, 256

        class LanguageModel(nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = nn.Embedding(vocab, width)
                self.rnn = nn.LSTM(width, width, num_layers=2)
                self.out = nn.Linear(width, vocab)

            def forward(self, x):
                h, _ = self.rnn(self.emb(x))
                return self.out(h)

        def batch(seed):
            rng = np.random.default_rng(seed)
            seq = rng.integers(0, vocab, (65, 16)).astype(np.int64)
            return seq[:-1].copy(), seq[1:].copy()

        def loss(model, x, y):
            return F.cross_entropy(model(x).reshape(-1, vocab), y.reshape(-1))

        def optimizer(params):
            return T.optim.SGD(params, lr=1.0)

        return LanguageModel(), batch, loss, optimizer, 0.25
    raise ValueError(f"no model {name!r} (one of {', '.join(MODELS)})")


# ---------------------------------------------------------------- the steps


def train_step(T, model, opt, loss_of, clip, cast=contextlib.nullcontext):
    """The loop body, the same for both systems: zero the gradients, the loss (inside
    `cast()`: an autocast region, where the caller gives one), backward, the gradients
    clipped (where the model asks), the optimizer's step; returns the loss."""

    def train(x, y):
        opt.zero_grad()
        with cast():
            loss = loss_of(model, x, y)
        loss.backward()
        if clip is not None:
            T.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss

    return train


def fusegrad_step(name: str, jit: bool = False):
    """(model, batch, step): step(x, y) on numpy arrays trains one batch on fusegrad and
    returns the loss as a float."""
    import fusegrad as fg

    fg.manual_seed(0)
    model, batch, loss_of, optimizer, clip = build(fg, name)
    model.train()
    train = train_step(fg, model, optimizer(model.parameters()), loss_of, clip)
    run = fg.jit(train) if jit else train

    def step(x, y):
        return run(fg.tensor(x), fg.tensor(y)).item()

    return model, batch, step


def torch_step(name: str, weights: dict | None, compiled: bool = False):
    """(model, step) of PyTorch from `weights` (a state dict of numpy arrays: fusegrad's)."""
    import torch

    torch.manual_seed(0)
    model, _, loss_of, optimizer, clip = build(torch, name)
    if weights is not None:
        model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in weights.items()})
    model.train()
    train = train_step(torch, model, optimizer(model.parameters()), loss_of, clip)
    run = torch.compile(train) if compiled else train

    def step(x, y):
        return run(torch.from_numpy(x), torch.from_numpy(y)).item()

    return model, step


def weights_of(model) -> dict:
    """A fusegrad model's state dict as numpy arrays."""
    return {k: np.array(v.numpy()) for k, v in model.state_dict().items()}


# ---------------------------------------------------------------- measuring


def bootstrap(ratios: list[float], draws: int = 2000) -> tuple[float, float, float]:
    """(median, low, high): the median of `ratios` and a 95% bootstrap interval of it."""
    rng = random.Random(0)
    meds = sorted(float(np.median([rng.choice(ratios) for _ in ratios])) for _ in range(draws))
    return float(np.median(ratios)), meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def alternate(systems: dict, rounds: int, run, pause: float = 0.0) -> dict[str, list]:
    """Each system's step times in blocks of `BLOCK` steps, the systems taking turns block
    by block and their order rotating each round: {system: [[seconds of each step] per
    block]}. `run(step, i)` runs a system's step on the run's i-th batch; `pause`
    seconds follow each block."""
    times: dict[str, list[list[float]]] = {k: [] for k in systems}
    order = list(systems)
    for r in range(rounds):
        for k in order[r % len(order) :] + order[: r % len(order)]:
            block = []
            for i in range(BLOCK):
                t = time.perf_counter()
                run(systems[k], r * BLOCK + i)
                block.append(time.perf_counter() - t)
            times[k].append(block)
            time.sleep(pause)
    return times


def steady(name: str, rounds: int, compiled: bool) -> float:
    """Alternate the systems' steps in blocks and print each one's median and the ratios;
    returns the plain loop's median step in seconds."""
    import fusegrad as fg

    model, batch, plain = fusegrad_step(name)
    _, _, jitted = fusegrad_step(name, jit=True)
    data = [batch(i) for i in range(4)]
    systems = {"fusegrad plain": plain, "fusegrad jit": jitted}
    first: dict[str, float] = {}
    try:
        import torch

        torch.set_num_threads(fg.config.threads)
        weights = weights_of(fusegrad_step(name)[0])  # the weights before any step
        systems["torch eager"] = torch_step(name, weights)[1]
        if compiled:
            systems["torch.compile"] = torch_step(name, weights, compiled=True)[1]
    except ImportError:
        print("  PyTorch is not installed: fusegrad alone")
    for k, step in systems.items():
        first[k] = step(*data[0])  # the first loss, from the same weights and batch
    for i in range(1, 3):  # warm up: the jit records its calls, torch.compile compiles
        for step in systems.values():
            step(*data[i])
    times = alternate(systems, rounds, lambda step, i: step(*data[i % len(data)]), PAUSE)
    print(f"\n{name}: {rounds} rounds of {BLOCK} steps each, threads {fg.config.threads}")
    print("  first losses: " + ", ".join(f"{k} {v:.5f}" for k, v in first.items()))
    for k, blocks in times.items():
        ms = float(np.median([t for b in blocks for t in b])) * 1e3
        print(f"  {k:<16} {ms:9.2f} ms/step (median)")
    if "torch eager" in times:
        base = [float(np.median(b)) for b in times["torch eager"]]
        for k in [k for k in times if k != "torch eager"]:
            ratios = [float(np.median(b)) / t for b, t in zip(times[k], base)]
            med, low, high = bootstrap(ratios)
            print(f"  {k} / torch eager = {med:.2f} [{low:.2f}, {high:.2f}] (below 1: faster)")
    kernels = len(fg.kernels(next(iter(model.parameters()))))
    print(f"  kernels per fusegrad step: {kernels}")
    return float(np.median([t for b in times["fusegrad plain"] for t in b]))


FIRST = """
import json, resource, sys, time
sys.path.insert(0, {here!r})
import models
name, system = {name!r}, {system!r}
if system == "torch":
    import torch, fusegrad as fg
    torch.set_num_threads(fg.config.threads)
    _, step = models.torch_step(name, None)
    batch = models.build(torch, name)[1]
else:
    _, batch, step = models.fusegrad_step(name)
x, y = batch(0)
t = time.perf_counter()
step(x, y)
first = time.perf_counter() - t
usage = map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
out = {{"first": first, "cpu": sum(r.ru_utime + r.ru_stime for r in usage)}}
if system != "torch":
    from fusegrad.pipeline import compiler
    from fusegrad.runtime import engine
    out.update(compiled=compiler.stats["compiled"], disk=compiler.stats["disk_hits"])
    out.update(plans=engine.stats["plans_from_disk"])
    for i in range({after}):  # the rest of a short run: the cache as a loop leaves it
        step(*batch(1 + i % 3))
print(json.dumps(out))
"""


AFTER_FIRST = 11  # steps a cold process runs after its first (see the module docstring)


def first_step(name: str, system: str, cache: str, after: int = 0) -> dict:
    """The first step of `system` ("fusegrad" or "torch") in a fresh process."""
    code = FIRST.format(here=HERE, name=name, system=system, after=after)
    env = dict(os.environ, FUSEGRAD_CACHE=cache)
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


WARM_RUNS = 3  # warm first-step processes: a first step's fresh memory costs vary run to run


def first_steps(name: str, steady_s: float | None = None) -> None:
    """Print the cold first step and the median of `WARM_RUNS` warm ones, the latter also
    over `steady_s` (the plain loop's steady step) where given."""
    with tempfile.TemporaryDirectory() as cache:
        cold = first_step(name, "fusegrad", cache, after=AFTER_FIRST)
        warms = [first_step(name, "fusegrad", cache) for _ in range(WARM_RUNS)]
    print(
        f"  first step, fusegrad cold: {cold['first']:.2f} s ({cold['compiled']} kernels "
        f"compiled, CPU {cold['cpu']:.2f} s with its compilers)"
    )
    warm = sorted(warms, key=lambda w: w["first"])[len(warms) // 2]
    spread = ", ".join(f"{w['first']:.3f}" for w in warms)
    over = f", {warm['first'] / steady_s:.1f}x the steady step" if steady_s else ""
    print(
        f"  first step, fusegrad warm: {warm['first']:.3f} s (median of {spread}{over}; "
        f"{warm['compiled']} compiled, {warm['disk']} from disk, {warm['plans']} plan(s) "
        "read from disk)"
    )
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    with tempfile.TemporaryDirectory() as cache:
        t = first_step(name, "torch", cache)
    print(f"  first step, torch eager: {t['first']:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="all", choices=[*MODELS, "all"])
    ap.add_argument("--rounds", type=int, default=6, help="rounds of alternating blocks")
    ap.add_argument("--no-first", action="store_true", help="skip the first-step processes")
    ap.add_argument("--compile", action="store_true", help="torch.compile beside (slow)")
    ap.add_argument("--quick", action="store_true", help="2 rounds, no first steps")
    args = ap.parse_args()
    from machine import cpu_name, load_average, source_version

    print(f"CPU: {cpu_name()} | {source_version()} | load {load_average()}")
    for name in MODELS if args.model == "all" else (args.model,):
        plain = steady(name, 2 if args.quick else args.rounds, args.compile)
        if not (args.no_first or args.quick):
            first_steps(name, plain)
    print(f"load after: {load_average()}")
    _ = resource  # (the first-step processes read their own usage)


if __name__ == "__main__":
    main()
