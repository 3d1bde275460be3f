"""A nanoGPT-style trainer: token ids in a uint16 `.bin` file read through `np.memmap`,
batches drawn with `torch.randint` and `torch.stack`, a small GPT (causal self-attention
through `F.scaled_dot_product_attention`, GELU MLPs, LayerNorm, tied embedding and output
weights, scaled init of the residual projections), AdamW over decay and no-decay parameter
groups (`fused` passed only if its signature has it), a warmup-then-cosine learning rate
set on each param group, `torch.autocast` and `GradScaler`, gradient accumulation with
clipping after `unscale_`, an `estimate_loss` under no_grad, and a checkpoint saved with
`torch.save`. Runs unchanged under `python -m fusegrad` and under PyTorch.

Prints `iter I loss L` each iteration and `eval I train_loss L val_loss L` every
--eval-interval iterations."""

import argparse
import inspect
import math
import os
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.n_head, self.dropout = n_head, dropout
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(self, x):
        batch, steps, channels = x.size()
        q, k, v = self.c_attn(x).split(channels, dim=2)
        heads = (batch, steps, self.n_head, channels // self.n_head)
        q, k, v = (t.view(*heads).transpose(1, 2) for t in (q, k, v))
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(batch, steps, channels)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, n_embd, n_head, dropout):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, dropout)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd),
            nn.GELU(),
            nn.Linear(4 * n_embd, n_embd),
            nn.Dropout(dropout),
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer, n_head, n_embd, dropout):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                drop=nn.Dropout(dropout),
                h=nn.ModuleList([Block(n_embd, n_head, dropout) for _ in range(n_layer)]),
                ln_f=nn.LayerNorm(n_embd),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(parameter, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        steps = idx.size(1)
        pos = torch.arange(0, steps, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters
        extra = dict(fused=True) if fused and device_type == "cuda" else dict()
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)


def write_tokens(folder, vocab_size, count, seed):
    """train.bin and val.bin: a noisy counting sequence, learnable from the last token."""
    rng = np.random.default_rng(seed)
    steps = np.where(rng.random(count) < 0.9, 1, rng.integers(2, vocab_size, count))
    tokens = (np.cumsum(steps) % vocab_size).astype(np.uint16)
    split = int(0.9 * count)
    tokens[:split].tofile(os.path.join(folder, "train.bin"))
    tokens[split:].tofile(os.path.join(folder, "val.bin"))


def main():
    parser = argparse.ArgumentParser(description="nanoGPT-style trainer")
    parser.add_argument("--out", default="out")
    parser.add_argument("--max-iters", type=int, default=100)
    parser.add_argument("--eval-interval", type=int, default=20)
    parser.add_argument("--eval-iters", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--grad-accum", type=int, default=2)
    parser.add_argument("--n-layer", type=int, default=2)
    parser.add_argument("--n-head", type=int, default=2)
    parser.add_argument("--n-embd", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=32)
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup-iters", type=int, default=5)
    parser.add_argument("--grad-clip", type=float, default=1.0)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--seed", type=int, default=1337)
    args = parser.parse_args()

    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(args.seed)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    device_type = "cuda" if "cuda" in device else "cpu"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
        args.dtype
    ]
    ctx = (
        nullcontext()
        if args.dtype == "float32"
        else torch.autocast(device_type=device_type, dtype=ptdtype)
    )
    write_tokens(args.out, args.vocab_size, 20_000, args.seed)

    def get_batch(split):
        data = np.memmap(os.path.join(args.out, f"{split}.bin"), dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
        x = torch.stack(
            [torch.from_numpy(data[i : i + args.block_size].astype(np.int64)) for i in ix]
        )
        y = torch.stack(
            [torch.from_numpy(data[i + 1 : i + 1 + args.block_size].astype(np.int64)) for i in ix]
        )
        return x.to(device), y.to(device)

    model = GPT(
        args.vocab_size, args.block_size, args.n_layer, args.n_head, args.n_embd, args.dropout
    )
    model.to(device)
    scaler = torch.amp.GradScaler(device_type, enabled=(args.dtype == "float16"))
    optimizer = model.configure_optimizers(0.1, args.lr, (0.9, 0.95), device_type)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(args.eval_iters)
            for k in range(args.eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        model.train()
        return out

    def get_lr(it):
        if it < args.warmup_iters:
            return args.lr * (it + 1) / (args.warmup_iters + 1)
        ratio = (it - args.warmup_iters) / max(1, args.max_iters - args.warmup_iters)
        return args.lr / 10 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.lr - args.lr / 10)

    X, Y = get_batch("train")
    best_val_loss = 1e9
    for iter_num in range(args.max_iters + 1):
        lr = get_lr(iter_num)
        for param_group in optimizer.param_groups:
            param_group["lr"] = lr
        if iter_num % args.eval_interval == 0:
            losses = estimate_loss()
            print(f"eval {iter_num} train_loss {losses['train']:.4f} val_loss {losses['val']:.4f}")
            if losses["val"] < best_val_loss:
                best_val_loss = losses["val"].item()
                checkpoint = {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "iter_num": iter_num,
                    "best_val_loss": best_val_loss,
                    "config": vars(args),
                }
                torch.save(checkpoint, os.path.join(args.out, "ckpt.pt"))
        if iter_num == args.max_iters:
            break
        for _ in range(args.grad_accum):
            with ctx:
                _, loss = model(X, Y)
                loss = loss / args.grad_accum
            X, Y = get_batch("train")  # the next batch, while the step runs on an accelerator
            scaler.scale(loss).backward()
        if args.grad_clip != 0.0:
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        print(f"iter {iter_num} loss {loss.item() * args.grad_accum:.4f}")


if __name__ == "__main__":
    main()
