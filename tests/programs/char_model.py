"""A makemore-style character-level name model: words made up from syllables (no data
file), a Dataset of (context, next characters) with -1 where a word has ended, an endless
loader over `RandomSampler(replacement=True, num_samples=int(1e10))`, an MLP over the
embeddings of the last characters (the context shifted with `torch.roll` and its first
column set by index assignment), `cross_entropy(..., ignore_index=-1)`, AdamW, an
evaluation under `torch.inference_mode()`, and sampling with `topk` and `multinomial`.
Runs unchanged under `python -m fusegrad` and under PyTorch.

Prints `step S loss L` every --log-every steps, `eval train_loss L test_loss L` at the
end, and the sampled words."""

import argparse
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, RandomSampler

SYLLABLES = "ka lo mi ra ne to sa li an el or is us ma de".split()


def make_words(count, rng):
    return ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(count)]


class WordDataset(Dataset):
    def __init__(self, words, chars, max_length):
        self.words, self.max_length = words, max_length
        self.stoi = {ch: i + 1 for i, ch in enumerate(chars)}  # 0: the start and end token
        self.itos = {i: ch for ch, i in self.stoi.items()}

    def __len__(self):
        return len(self.words)

    def vocab_size(self):
        return len(self.stoi) + 1

    def encode(self, word):
        return torch.tensor([self.stoi[ch] for ch in word], dtype=torch.long)

    def decode(self, indices):
        return "".join(self.itos[i] for i in indices)

    def __getitem__(self, index):
        encoded = self.encode(self.words[index])
        x = torch.zeros(self.max_length + 1, dtype=torch.long)
        y = torch.zeros(self.max_length + 1, dtype=torch.long)
        x[1 : 1 + len(encoded)] = encoded
        y[: len(encoded)] = encoded
        y[len(encoded) + 1 :] = -1  # no loss past the end token
        return x, y


class EndlessLoader:
    """Batches forever: a sampler with replacement that never runs out."""

    def __init__(self, dataset, **kwargs):
        sampler = RandomSampler(dataset, replacement=True, num_samples=int(1e10))
        self.batches = iter(DataLoader(dataset, sampler=sampler, **kwargs))

    def next(self):
        return next(self.batches)


class ContextMLP(nn.Module):
    def __init__(self, vocab_size, context, embed, hidden):
        super().__init__()
        self.vocab_size, self.context = vocab_size, context
        self.embed = nn.Embedding(vocab_size + 1, embed)  # + 1: "before the start"
        self.mlp = nn.Sequential(
            nn.Linear(context * embed, hidden), nn.Tanh(), nn.Linear(hidden, vocab_size)
        )

    def forward(self, idx, targets=None):
        embeddings = []
        for _ in range(self.context):
            embeddings.append(self.embed(idx))
            idx = torch.roll(idx, 1, 1)
            idx[:, 0] = self.vocab_size
        logits = self.mlp(torch.cat(embeddings, -1))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        return logits, loss


@torch.inference_mode()
def evaluate(model, dataset, batch_size, max_batches):
    model.eval()
    losses = []
    for i, (x, y) in enumerate(DataLoader(dataset, shuffle=True, batch_size=batch_size)):
        losses.append(model(x, y)[1].item())
        if i + 1 >= max_batches:
            break
    model.train()
    return torch.tensor(losses).mean().item()


@torch.no_grad()
def sample(model, dataset, count, top_k):
    idx = torch.zeros(count, 1, dtype=torch.long)
    for _ in range(dataset.max_length):
        logits = model(idx)[0][:, -1, :]
        if top_k is not None:
            values, _ = torch.topk(logits, top_k)
            logits[logits < values[:, [-1]]] = -float("Inf")
        idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), 1)
    words = []
    for row in idx[:, 1:].tolist():
        row = row[: row.index(0)] if 0 in row else row
        words.append(dataset.decode(row))
    return words


def main():
    parser = argparse.ArgumentParser(description="makemore-style character model")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--words", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--samples", type=int, default=5, help="words to sample at the end")
    parser.add_argument(
        "--top-k", type=int, default=-1, help="sample from the k likeliest; -1: all"
    )
    parser.add_argument("--seed", type=int, default=3407)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    words = make_words(args.words, random.Random(args.seed))
    chars = sorted(set("".join(words)))
    max_length = max(len(w) for w in words)
    order = torch.randperm(len(words)).tolist()
    test_count = max(8, len(words) // 10)
    train_set = WordDataset([words[i] for i in order[test_count:]], chars, max_length)
    test_set = WordDataset([words[i] for i in order[:test_count]], chars, max_length)

    model = ContextMLP(train_set.vocab_size(), context=3, embed=16, hidden=64)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=5e-3, weight_decay=0.01, betas=(0.9, 0.99), eps=1e-8
    )
    loader = EndlessLoader(train_set, batch_size=args.batch_size, pin_memory=True)
    for step in range(args.steps):
        x, y = loader.next()
        _, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % args.log_every == 0:
            print(f"step {step} loss {loss.item():.4f}")
    train_loss = evaluate(model, train_set, args.batch_size, max_batches=4)
    test_loss = evaluate(model, test_set, args.batch_size, max_batches=4)
    top_k = args.top_k if args.top_k != -1 else None
    print(f"eval train_loss {train_loss:.4f} test_loss {test_loss:.4f}")
    if args.samples:
        print("samples:", " ".join(sample(model, train_set, args.samples, top_k)))


if __name__ == "__main__":
    main()
