"""A word-level recurrent language model in the common shape of such scripts: a vocabulary
built from text lines, the token stream cut into `--batch` columns (`batchify`), windows
of `--bptt` steps whose targets are the next tokens, an embedding, `nn.LSTM` or `nn.GRU`
and a linear decoder (weights tied with `--tied`), the hidden state carried from window
to window through `detach()`, `clip_grad_norm_` and a hand-written SGD update
(`p.data.add_(p.grad, alpha=-lr)`), and an evaluation under `torch.no_grad()` that
carries its hidden state the same way with no optimizer step, its loss read by `.item()`
each window. Runs unchanged under `python -m fusegrad` and under PyTorch.

Reads sentences from a gzipped tab-separated file (its third column), lowercased.
Prints `vocab V` (the words known), then `epoch E train_loss L valid_loss L` after each
epoch."""

import argparse
import gzip
import math

import torch
import torch.nn as nn


def read_lines(path, count):
    with gzip.open(path, "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n").split("\t")[2].lower() for line in f]
    return lines[:count]


class Vocabulary:
    def __init__(self):
        self.index = {}

    def encode(self, lines):
        ids = []
        for line in lines:
            for word in line.split() + ["<eos>"]:
                ids.append(self.index.setdefault(word, len(self.index)))
        return torch.tensor(ids, dtype=torch.long)


def batchify(stream, columns):
    rows = stream.size(0) // columns
    return stream[: rows * columns].view(columns, rows).t().contiguous()


def window(source, start, bptt):
    length = min(bptt, source.size(0) - 1 - start)
    return source[start : start + length], source[start + 1 : start + 1 + length].reshape(-1)


class RecurrentLM(nn.Module):
    def __init__(self, kind, vocab, emsize, nhid, layers, dropout, tied):
        super().__init__()
        self.kind, self.nhid, self.layers = kind, nhid, layers
        self.drop = nn.Dropout(dropout)
        self.embed = nn.Embedding(vocab, emsize)
        rnn = {"LSTM": nn.LSTM, "GRU": nn.GRU}[kind]
        self.rnn = rnn(emsize, nhid, layers, dropout=dropout)
        self.decode = nn.Linear(nhid, vocab)
        if tied:
            if nhid != emsize:
                raise ValueError("--tied needs --nhid equal to --emsize")
            self.decode.weight = self.embed.weight
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.zeros_(self.decode.bias)

    def forward(self, tokens, hidden):
        out, hidden = self.rnn(self.drop(self.embed(tokens)), hidden)
        logits = self.decode(self.drop(out))
        return logits.view(-1, logits.size(-1)), hidden

    def initial_state(self, batch):
        weight = next(self.parameters())
        zeros = weight.new_zeros(self.layers, batch, self.nhid)
        return (zeros, zeros.clone()) if self.kind == "LSTM" else zeros


def detached(hidden):
    if isinstance(hidden, torch.Tensor):
        return hidden.detach()
    return tuple(detached(h) for h in hidden)


def main():
    parser = argparse.ArgumentParser(description="a word-level LSTM/GRU language model")
    parser.add_argument("--data", required=True, help="a .tsv.gz of sentences")
    parser.add_argument("--lines", type=int, default=400, help="training sentences")
    parser.add_argument("--model", choices=["LSTM", "GRU"], default="LSTM")
    parser.add_argument("--emsize", type=int, default=32)
    parser.add_argument("--nhid", type=int, default=32)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=20.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--bptt", type=int, default=12)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--seed", type=int, default=1111)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    lines = read_lines(args.data, args.lines + args.lines // 4)
    vocab = Vocabulary()
    train = batchify(vocab.encode(lines[: args.lines]), args.batch)
    eval_batch = 5
    valid = batchify(vocab.encode(lines[args.lines :]), eval_batch)
    print(f"vocab {len(vocab.index)}")
    model = RecurrentLM(args.model, len(vocab.index), args.emsize, args.nhid, args.layers,
                        args.dropout, args.tied)  # fmt: skip
    criterion = nn.CrossEntropyLoss()

    def evaluate(source):
        model.eval()
        total, hidden = 0.0, model.initial_state(eval_batch)
        with torch.no_grad():
            for start in range(0, source.size(0) - 1, args.bptt):
                tokens, targets = window(source, start, args.bptt)
                logits, hidden = model(tokens, hidden)
                hidden = detached(hidden)
                total += len(tokens) * criterion(logits, targets).item()
        return total / (source.size(0) - 1)

    lr = args.lr
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden, total, windows = model.initial_state(args.batch), 0.0, 0
        for start in range(0, train.size(0) - 1, args.bptt):
            tokens, targets = window(train, start, args.bptt)
            hidden = detached(hidden)
            model.zero_grad()
            logits, hidden = model(tokens, hidden)
            loss = criterion(logits, targets)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            total, windows = total + loss.item(), windows + 1
        valid_loss = evaluate(valid)
        print(f"epoch {epoch} train_loss {total / windows:.4f} valid_loss {valid_loss:.4f}"
              f" valid_ppl {math.exp(valid_loss):.2f}")  # fmt: skip
        lr /= 2


if __name__ == "__main__":
    main()
