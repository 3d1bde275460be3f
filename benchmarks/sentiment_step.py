"""One training step of the sentiment CNN (examples/sentiment.py), fusegrad against PyTorch eager.

Run:  .venv/bin/python benchmarks/sentiment_step.py [--quick] [--only finetune|static] [--batch 10]

The headline is the example's default: Kim's CNN with *fine-tuned* 50-d
GloVe vectors (15,459 words; the embedding table is a parameter, its gradient
a SCATTER_ADD into the rows read, and Adam updates it); the row beside it
keeps the vectors frozen (`--static`, MiniTorch's setting). The step: batch
10 (`--batch`), sentences padded to 52 tokens (real training sentences of the
bundled data, cycled), three Conv1d(50 -> 100, k = 3, 4, 5) with ReLU and a
length-masked max over time, dropout 0.25, linear, sigmoid, binary
cross-entropy, Adam. A timed step is everything a training loop does: look up
the vectors, build the graph, backward, the optimizer step, and read the loss
(`loss.item()`), so fusegrad's scheduling, launch and Python overhead are
inside the time, as PyTorch's are.

fusegrad runs it two ways: **plain** (the step written as an ordinary loop
body: every call builds the graph, differentiates it and looks its schedule
up) and **fg.jit** (the example's own step, `make_train_step`, which replays
the recorded native programs without the Python). PyTorch runs it eagerly,
with the same number of threads; PyTorch is optional (its columns print `-`).

How the numbers are taken (see ../../shared/BENCHMARKS.md and README.md here):
- all systems start from the same weights; before anything is timed, one step
  without dropout is checked: logits, loss and every gradient must agree;
- the systems alternate in blocks of steps, the order rotating each round,
  with a 0.2 s pause after PyTorch (its OpenMP workers spin after a call);
  each figure is the median over all timed steps;
- PyTorch gets `torch.set_num_threads(fg.config.threads)`;
- the first step is timed in fresh subprocesses: once against an empty compile
  cache (a new FUSEGRAD_CACHE folder: schedule + compile), once against the
  cache that run filled (schedule + load compiled kernels from disk).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from core_ops import source_version  # same folder; prints the commit measured
from machine import load_average  # same folder

import fusegrad as fg
from fusegrad.datasets import text
from fusegrad.nn import functional as F

try:
    import torch
except ImportError:  # PyTorch is optional: its column is left empty
    torch = None

BATCH, LENGTH = 10, 52  # MiniTorch's batch; 52 tokens holds nearly every sentence
PAUSE_AFTER_TORCH_S = 0.2
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "sentiment.py")


def load_example():
    spec = importlib.util.spec_from_file_location("sentiment_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_batches(count: int, seed: int = 0, batch: int = BATCH):
    """`count` batches of real training sentences (at most LENGTH tokens), padded to LENGTH."""
    glove = text.load_glove()
    data = text.load_sentiment(known=glove)
    encoded = [s for s in data.train.encode(data.vocab) if len(s) <= LENGTH]
    labels = data.train.labels[[len(s) <= LENGTH for s in data.train.tokens]]
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        index = rng.choice(len(encoded), batch, replace=False)
        ids, lengths = text.pad_batch([encoded[i] for i in index], length=LENGTH)
        batches.append((ids, lengths, labels[index].astype(np.float32)))
    return data.vocab.vectors(glove), batches


# ---------------------------------------------------------------- the two systems


class FusegradStep:
    """The step as written plainly (`eager`), or the example's own training step, which
    runs under `fg.jit` (see examples/sentiment.py, make_train_step)."""

    def __init__(self, example, table, finetune: bool, dropout: float, eager: bool = True):
        fg.manual_seed(0)
        self.model = example.KimCNN(table, finetune=finetune, dropout=dropout)
        self.opt = fg.optim.Adam([p for p in self.model.parameters() if p.requires_grad], lr=1e-3)
        self.example_step = None if eager else example.make_train_step(self.model, self.opt)

    def __call__(self, ids, lengths, y) -> float:
        if self.example_step is not None:
            return self.example_step(ids, lengths, y)[0]
        probs = F.sigmoid(self.model(ids, lengths))
        loss = F.binary_cross_entropy(probs, fg.tensor(y))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


class TorchKim(torch.nn.Module if torch is not None else object):
    """The same model in PyTorch, holding a copy of the fusegrad model's weights."""

    def __init__(self, fg_model, finetune: bool, dropout: float):
        super().__init__()
        table = torch.from_numpy(np.array(fg_model.embedding.weight.numpy()))
        self.embedding = torch.nn.Embedding.from_pretrained(
            table, freeze=not finetune, padding_idx=0
        )
        self.kernel_sizes = fg_model.kernel_sizes
        self.convs = torch.nn.ModuleList()
        for conv in fg_model.convs:
            c = torch.nn.Conv1d(conv.in_channels, conv.out_channels, conv.kernel_size[0])
            c.weight.data = torch.from_numpy(np.array(conv.weight.numpy()))
            c.bias.data = torch.from_numpy(np.array(conv.bias.numpy()))
            self.convs.append(c)
        self.dropout = torch.nn.Dropout(dropout)
        self.fc = torch.nn.Linear(fg_model.fc.in_features, 1)
        self.fc.weight.data = torch.from_numpy(np.array(fg_model.fc.weight.numpy()))
        self.fc.bias.data = torch.from_numpy(np.array(fg_model.fc.bias.numpy()))

    def forward(self, ids, lengths):
        x = self.embedding(ids).permute(0, 2, 1)
        pooled = []
        for conv, k in zip(self.convs, self.kernel_sizes):
            h = conv(x).relu()
            n = h.shape[2]
            valid = torch.arange(n)[None, None] < (lengths - (k - 1)).clamp(min=1)[:, None, None]
            pooled.append(torch.where(valid, h, -1e9).amax(2))
        return self.fc(self.dropout(torch.cat(pooled, 1))).reshape(-1)


class TorchStep:
    def __init__(self, fg_model, finetune: bool, dropout: float):
        torch.manual_seed(0)
        self.model = TorchKim(fg_model, finetune, dropout)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.Adam(params, lr=1e-3)

    def __call__(self, ids, lengths, y) -> float:
        probs = torch.sigmoid(self.model(torch.from_numpy(ids), torch.from_numpy(lengths)))
        loss = torch.nn.functional.binary_cross_entropy(probs, torch.from_numpy(y))
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()


def check_answers(example, table, batch, finetune: bool) -> float:
    """Logits, loss and gradients of one batch without dropout, fusegrad against PyTorch."""
    ids, lengths, y = batch
    mine = FusegradStep(example, table, finetune, dropout=0.0)
    theirs = TorchStep(mine.model, finetune, dropout=0.0)
    logits = mine.model(ids, lengths)
    loss = F.binary_cross_entropy(F.sigmoid(logits), fg.tensor(y))
    loss.backward()
    t_logits = theirs.model(torch.from_numpy(ids), torch.from_numpy(lengths))
    t_loss = torch.nn.functional.binary_cross_entropy(torch.sigmoid(t_logits), torch.from_numpy(y))
    t_loss.backward()
    pairs = [("logits", logits, t_logits), ("loss", loss, t_loss)]
    for (name, p), tp in zip(mine.model.named_parameters(), theirs.model.parameters()):
        if p.requires_grad:
            pairs.append((f"{name}.grad", p.grad, tp.grad))
    worst = 0.0
    for name, a, b in pairs:
        a, b = np.asarray(a.numpy(), np.float64), b.detach().numpy().astype(np.float64)
        err = float(np.abs(a - b).max() / (np.abs(b).max() + 1e-12))
        if not err < 1e-3:
            raise SystemExit(f"{name}: fusegrad and PyTorch differ by {err:.2e} (relative)")
        worst = max(worst, err)
    return worst


# ---------------------------------------------------------------- timing


def alternate(steps: dict, batches, rounds: int, per_block: int) -> dict[str, list[float]]:
    """Blocks of `per_block` steps per system, the order rotating every round."""
    names = list(steps)
    times: dict[str, list[float]] = {n: [] for n in names}
    k = 0
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            gc.collect()
            for _ in range(per_block):
                ids, lengths, y = batches[k % len(batches)]
                k += 1
                t0 = time.perf_counter()
                steps[name](ids, lengths, y)
                times[name].append(time.perf_counter() - t0)
            if name == "torch":
                time.sleep(PAUSE_AFTER_TORCH_S)
    return times


def first_step_child(finetune: bool, batch: int) -> None:
    """Run in a subprocess: time the first two steps of a fresh process, print JSON."""
    example = load_example()
    table, batches = make_batches(2, batch=batch)
    step = FusegradStep(example, table, finetune, dropout=0.25)
    out = {}
    for name, one in zip(("first", "second"), batches):
        t0 = time.perf_counter()
        step(*one)
        out[name] = time.perf_counter() - t0
    print(json.dumps(out))


def first_steps(finetune: bool, batch: int) -> tuple[dict, dict]:
    """The first step against an empty compile cache, then against the cache it filled."""
    with tempfile.TemporaryDirectory(prefix="fusegrad-sentiment-cache-") as cache:
        env = dict(os.environ, FUSEGRAD_CACHE=cache)
        cmd = [sys.executable, os.path.abspath(__file__), "--batch", str(batch)]
        cmd += ["--first-step-child", "finetune" if finetune else "static"]
        runs = []
        for _ in range(2):
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return runs[0], runs[1]


def run_case(example, table, batches, finetune: bool, rounds: int, per_block: int) -> dict:
    err = check_answers(example, table, batches[0], finetune) if torch is not None else None
    steps = {
        "plain": FusegradStep(example, table, finetune, dropout=0.25),
        "jit": FusegradStep(example, table, finetune, dropout=0.25, eager=False),
    }
    if torch is not None:
        steps["torch"] = TorchStep(steps["plain"].model, finetune, dropout=0.25)
    alternate(steps, batches, 1, 3)  # warm-up: compile, record, fill pools, let PyTorch settle
    times = alternate(steps, batches, rounds, per_block)
    cold, warm = first_steps(finetune, len(batches[0][2]))
    return {"times": times, "err": err, "cold": cold, "warm": warm}


CASES = {"finetune": "fine-tuned GloVe", "static": "frozen (--static)"}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    ap.add_argument(
        "--only",
        choices=list(CASES),
        help="time one variant (default: fine-tuned, the headline, then frozen)",
    )
    ap.add_argument("--batch", type=int, default=BATCH, help="sentences per step")
    ap.add_argument("--finetune", action="store_true", help=argparse.SUPPRESS)  # old flag: no-op
    ap.add_argument("--first-step-child", choices=list(CASES), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.first_step_child:
        first_step_child(args.first_step_child == "finetune", args.batch)
        return

    if torch is not None:
        torch.set_num_threads(fg.config.threads)
    rounds, per_block = (4, 5) if args.quick else (10, 20)
    print(
        f"sentiment CNN training step, batch {args.batch}, length {LENGTH} | fusegrad "
        f"{source_version()}, {fg.config.threads} threads | torch "
        f"{torch.__version__ + f', {torch.get_num_threads()} threads' if torch else '-'}"
    )
    print(f"load average before: {load_average()}")
    example = load_example()
    table, batches = make_batches(64, batch=args.batch)
    cases = [args.only] if args.only else list(CASES)
    head = (
        f"{'embeddings':<19}{'plain ms':>9}{'jit ms':>8}{'torch ms':>10}{'torch/plain':>12}"
        f"{'torch/jit':>10}{'steps':>7}{'max err':>9}{'1st step, empty cache':>23}"
        f"{'1st, warm cache':>17}{'2nd step':>10}"
    )
    lines, means = [], []
    for case in cases:
        r = run_case(example, table, batches, case == "finetune", rounds, per_block)
        means.append(
            f"  {CASES[case]}: "
            + ", ".join(f"{k} {statistics.mean(v) * 1e3:.2f}" for k, v in r["times"].items())
        )
        plain_ms = statistics.median(r["times"]["plain"]) * 1e3
        jit_ms = statistics.median(r["times"]["jit"]) * 1e3
        t_ms = statistics.median(r["times"]["torch"]) * 1e3 if torch is not None else None
        lines.append(
            f"{CASES[case]:<19}{plain_ms:>9.2f}{jit_ms:>8.2f}"
            + (
                f"{t_ms:>10.2f}{t_ms / plain_ms:>12.2f}{t_ms / jit_ms:>10.2f}"
                if t_ms
                else f"{'-':>10}{'-':>12}{'-':>10}"
            )
            + f"{len(r['times']['plain']):>7}"
            + (f"{r['err']:>9.1e}" if r["err"] is not None else f"{'-':>9}")
            + f"{r['cold']['first'] * 1e3:>20.0f} ms{r['warm']['first'] * 1e3:>14.0f} ms"
            + f"{r['cold']['second'] * 1e3:>7.0f} ms"
        )
    print("\nmedian ms per training step (look-up, graph, backward, Adam, loss.item());")
    print("'plain': the step written as a plain loop body; 'jit': the example's step under")
    print("fg.jit; PyTorch eager; torch/... above 1 means fusegrad is faster\n")
    print(head)
    print("-" * len(head))
    print("\n".join(lines))
    print(
        "\n'max err': largest difference of logits, loss and gradients from PyTorch's (one step,"
        "\nno dropout), relative to the largest magnitude; '1st step': a fresh process, compile"
        "\ncache empty / filled by the previous process; '2nd step': the next step of the first."
    )
    # (a median leaves out the steps that ran a full garbage collection: the mean has them)
    print("\nmean ms per training step, the same steps:")
    print("\n".join(means))
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
