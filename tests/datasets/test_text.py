"""fusegrad.datasets.text and the sentiment example's model.

Oracles: GloVe's own vocabulary (the tokens a tokenizer must produce to find
vectors), the raw data file parsed independently here, numpy scatter-adds for
embedding gradients, and the model itself run one sentence at a time (what a
padded batch must reproduce).
"""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest
from _files import load_file

import fusegrad as fg
import fusegrad.nn.functional as F
from fusegrad import nn
from fusegrad.datasets import text

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sentiment.py")


@pytest.fixture(scope="module")
def glove():
    return text.load_glove()


@pytest.fixture(scope="module")
def data(glove):
    return text.load_sentiment(known=glove)


@pytest.fixture(scope="module")
def example():
    module = load_file("sentiment_example", EXAMPLE)
    return module


# ---------------------------------------------------------------- tokenizer


@pytest.mark.parametrize(
    "sentence, tokens",
    [
        ("Don't", ["do", "n't"]),
        (
            "I can't, he won't, they ain't",
            ["i", "ca", "n't", ",", "he", "wo", "n't", ",", "they", "ai", "n't"],
        ),
        (
            "It's what you're after: we'll see, I'd say, I'm sure they've",
            "it 's what you 're after : we 'll see , i 'd say , i 'm sure they 've".split(),
        ),
        ("The FILM's Director", ["the", "film", "'s", "director"]),
        ("''Conan'' (2002)!?", ["''", "conan", "''", "(", "2002", ")", "!", "?"]),
        ("slow... then -- bang", ["slow", "...", "then", "--", "bang"]),
        ("fun!...In", ["fun", "!", "...", "in"]),
        (
            "co writer/director Mr. Jackson of the U.S.",
            ["co", "writer", "/", "director", "mr.", "jackson", "of", "the", "u.s."],
        ),
        ("the critics' darling", ["the", "critics", "'", "darling"]),
        ("It’s “fine”", ["it", "'s", '"', "fine", '"']),
    ],
)
def test_tokenize_splits_as_glove_does(sentence, tokens):
    assert text.tokenize(sentence) == tokens


def test_tokenize_lower_cases_everything():
    assert text.tokenize("SHOUTING Is Rude") == ["shouting", "is", "rude"]
    assert text.tokenize("ÉCLAIR") == ["éclair"]


def test_split_off_pieces_are_glove_tokens(glove):
    """Every clitic, quote and punctuation token the tokenizer makes has a GloVe vector."""
    sentence = (
        "Isn't it ''great''? You're right -- I'd say it's (mostly) fun; we'll see: "
        "they've won... I'm sure, can't lose, won't stop & ain't $5!"
    )
    tokens = text.tokenize(sentence)
    words = {"great", "right", "mostly", "fun", "sure", "lose", "stop", "5"}
    pieces = [t for t in tokens if t not in words]
    assert set(pieces) >= {"n't", "'s", "'re", "'d", "'ll", "'ve", "'m", "''", "--", "..."}
    missing = [t for t in tokens if t not in glove]
    assert missing == []


def test_known_words_stay_whole(glove):
    assert text.tokenize("rock 'n' roll and/or o'brien") == [
        "rock", "'", "n", "'", "roll", "and", "/", "or", "o'brien",
    ]  # fmt: skip
    assert text.tokenize("rock 'n' roll and/or o'brien", known=glove) == [
        "rock", "'n'", "roll", "and/or", "o'brien",
    ]  # fmt: skip


def test_glove_knows_nearly_every_corpus_token(glove):
    """The point of GloVe-style tokens: a naive whitespace split finds far fewer vectors."""
    rows = text.read_ratings()
    ours = [t for _, _, s in rows for t in text.tokenize(s, known=glove)]
    naive = [t for _, _, s in rows for t in s.lower().split()]
    ours_known = np.mean([t in glove for t in ours])
    naive_known = np.mean([t in glove for t in naive])
    assert ours_known > 0.99
    assert naive_known < ours_known - 0.05


# ---------------------------------------------------------------- GloVe reader


def write_glove(path, lines, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


@pytest.mark.parametrize("gz", [False, True])
def test_load_glove_reads_the_text_format(tmp_path, gz):
    path = str(tmp_path / ("v.txt.gz" if gz else "v.txt"))
    write_glove(path, ["the 0.5 -1 2", "n't 1e-3 0 -0.25", "café 3 4 5"], gz=gz)
    wv = text.load_glove(path)
    assert wv.words == ["the", "n't", "café"] and wv.dim == 3 and len(wv) == 3
    assert wv.vectors.dtype == np.float32 and wv.vectors.shape == (3, 3)
    np.testing.assert_array_equal(wv["n't"], np.array([1e-3, 0, -0.25], np.float32))
    np.testing.assert_array_equal(wv.vectors[2], [3, 4, 5])
    assert "café" in wv and "cafe" not in wv


def test_load_glove_keeps_only_the_vocab_asked_for(tmp_path):
    path = str(tmp_path / "v.txt")
    write_glove(path, ["a 1 2", "b 3 4", "c 5 6"])
    wv = text.load_glove(path, vocab=["c", "a", "zzz"])
    assert wv.words == ["a", "c"]
    np.testing.assert_array_equal(wv.vectors, [[1, 2], [5, 6]])


def test_load_glove_rejects_a_short_line(tmp_path):
    path = str(tmp_path / "v.txt")
    write_glove(path, ["a 1 2 3", "b 4 5"])
    with pytest.raises(ValueError, match=":2: 2 fields"):
        text.load_glove(path)


def test_bundled_glove_subset(glove):
    assert glove.dim == 50 and len(glove) == 28228
    assert glove.words[0] == "the"  # GloVe's files are ordered by frequency


# ---------------------------------------------------------------- the task and its split


def raw_rows():
    """The data file parsed here, independently of text.read_ratings."""
    with gzip.open(text.default_sentiment_path(), "rb") as f:
        lines = f.read().decode("utf-8").split("\r\n")
    return [tuple(line.split("\t")) for line in lines if line]


def test_label_rule_and_split_sizes(data):
    rows = raw_rows()
    kept = [(float(r), s) for _, r, s in rows if abs(float(r)) >= 0.5]
    assert len(rows) == 10605 and len(kept) == 10072  # the counts the data README states
    splits = (data.train, data.validation, data.test)
    assert [len(s) for s in splits] == [8058, 1007, 1007]
    by_id = {i: (float(r), s) for i, r, s in rows}
    for split in splits:
        assert np.all(np.abs(split.ratings) >= 0.5)
        np.testing.assert_array_equal(split.labels, (split.ratings > 0).astype(np.int64))
        for i, sentence, rating in zip(split.ids, split.sentences, split.ratings):
            assert by_id[i][1] == sentence and np.isclose(by_id[i][0], rating)
    ids = [i for split in splits for i in split.ids]
    assert sorted(ids) == sorted(i for i, r, _ in rows if abs(float(r)) >= 0.5)  # each once
    positives = sum(int(split.labels.sum()) for split in splits)
    assert positives == sum(r > 0 for r, _ in kept)


def test_split_is_deterministic_and_follows_the_seed(data, glove):
    again = text.load_sentiment(known=glove)
    for name in ("train", "validation", "test"):
        assert getattr(again, name).ids == getattr(data, name).ids
        assert getattr(again, name).tokens == getattr(data, name).tokens
    other = text.load_sentiment(seed=1, known=glove)
    assert other.train.ids != data.train.ids
    assert sorted(other.test.ids + other.train.ids + other.validation.ids) == (
        sorted(data.test.ids + data.train.ids + data.validation.ids)
    )


def test_vocab_comes_from_the_training_split(data, glove):
    vocab = data.vocab
    assert vocab.itos[:2] == ["<pad>", "<unk>"] and vocab.pad_index == 0 and vocab.unk_index == 1
    train_words = {t for tokens in data.train.tokens for t in tokens}
    assert set(vocab.itos[2:]) == {w for w in train_words if w in glove}
    test_only = {t for tokens in data.test.tokens for t in tokens} - train_words
    assert test_only and all(vocab.encode([w]) == [1] for w in test_only)
    table = vocab.vectors(glove)
    assert table.shape == (len(vocab), 50)
    np.testing.assert_array_equal(table[0], 0)
    assert np.abs(table[1]).max() <= 0.05 and np.abs(table[1]).min() > 0
    for w in ("film", "n't", "..."):
        np.testing.assert_array_equal(table[vocab.stoi[w]], glove[w])


def test_vocab_without_known_shares_the_unknown_row_for_missing_vectors():
    wv = text.WordVectors(["good"], np.ones((1, 3), np.float32))
    vocab = text.Vocab.build([["good", "zork", "good"]])
    assert vocab.itos == ["<pad>", "<unk>", "good", "zork"]
    table = vocab.vectors(wv, seed=3)
    np.testing.assert_array_equal(table[3], table[1])  # no vector: the shared unknown one
    np.testing.assert_array_equal(table[2], 1)


# ---------------------------------------------------------------- batches


def test_pad_batch_and_lengths():
    ids, lengths = text.pad_batch([[4, 5, 6], [7], [8, 9, 10, 11, 12, 13, 14, 15, 16]])
    assert ids.shape == (3, 16) and ids.dtype == np.int64
    assert lengths.tolist() == [3, 1, 9]
    assert ids[0, :3].tolist() == [4, 5, 6] and not ids[0, 3:].any()
    assert text.pad_batch([[1]], minimum=5)[0].shape == (1, 8)
    assert text.pad_batch([[1]], multiple=1, minimum=5)[0].shape == (1, 5)


def test_bucket_batches_cover_every_index_once_with_similar_lengths():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 60, 1003)
    batches = text.bucket_batches(lengths, 10, np.random.default_rng(1), pool=20)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == list(range(1003))
    assert [len(b) for b in batches[:-1]] == [10] * 100 and len(batches[-1]) == 3
    spread = np.mean([np.ptp(lengths[b]) for b in batches])
    assert spread < 0.25 * np.mean([np.ptp(lengths[rng.permutation(1003)[:10]]) for _ in range(50)])


# ---------------------------------------------------------------- the model: masking


def small_model(example, finetune, vocab_size=23, dim=6, maps=5, seed=0):
    fg.manual_seed(seed)
    table = np.random.default_rng(seed).standard_normal((vocab_size, dim)).astype(np.float32)
    table[0] = 0  # the padding row, as Vocab.vectors makes it
    model = example.KimCNN(table, finetune=finetune, feature_maps=maps, dropout=0.25)
    return model.eval()


@pytest.mark.parametrize("finetune", [False, True])
def test_padded_batch_gives_the_logits_of_each_sentence_alone(example, finetune):
    model = small_model(example, finetune)
    rng = np.random.default_rng(5)
    sentences = [rng.integers(2, 23, n).tolist() for n in (2, 5, 7, 11)]
    with fg.no_grad():
        alone = []
        for s in sentences:
            ids, lengths = text.pad_batch([s], multiple=1, minimum=5)  # no padding beyond 5
            alone.append(model(ids, lengths).numpy()[0])
        ids, lengths = text.pad_batch(sentences, multiple=8, minimum=5)
        garbage = ids.copy()
        for row, n in zip(garbage, lengths):
            start = max(n, 5)  # a short sentence's first window must read zero padding
            row[start:] = rng.integers(2, 23, len(row) - start)
        batched = model(ids, lengths).numpy()
        batched_garbage = model(garbage, lengths).numpy()
    np.testing.assert_allclose(batched, alone, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batched_garbage, alone, rtol=1e-5, atol=1e-5)


def test_without_the_mask_padding_would_change_the_logits(example, monkeypatch):
    """The test above has teeth: with every window counted, padding wins some maxima."""
    model = small_model(example, False)
    rng = np.random.default_rng(5)
    sentences = [rng.integers(2, 23, n).tolist() for n in (5, 7)]
    ids, lengths = text.pad_batch(sentences, multiple=8, minimum=5)
    ids[:, 7:] = rng.integers(2, 23, (2, ids.shape[1] - 7))
    with fg.no_grad():
        masked = model(ids, lengths).numpy()
        monkeypatch.setattr(example, "window_mask", lambda lengths, n, k: fg.ones(1, 1, n) > 0)
        unmasked = model(ids, lengths).numpy()
    assert np.abs(masked - unmasked).max() > 1e-3


def test_window_mask_counts_windows_inside_each_sentence(example):
    mask = example.window_mask(fg.tensor([6, 3, 1]), 6, 3).numpy()[:, 0]
    assert mask.sum(1).tolist() == [4, 1, 1]
    assert mask[0].tolist() == [True] * 4 + [False] * 2


# ---------------------------------------------------------------- embedding gradients


def test_frozen_embedding_gets_no_gradient():
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    emb = nn.Embedding.from_pretrained(fg.tensor(table), freeze=True)
    w = nn.Parameter(fg.ones(3))
    ids = fg.tensor([[1, 3], [3, 0]])
    out = emb(ids)
    np.testing.assert_array_equal(out.numpy(), table[[[1, 3], [3, 0]]])
    (out * w).sum().backward()
    assert not emb.weight.requires_grad and emb.weight.grad is None
    np.testing.assert_allclose(w.grad.numpy(), table[[1, 3, 3, 0]].sum(0))


@pytest.mark.parametrize("padding_idx", [None, 0])
def test_trainable_embedding_gradient_is_a_scatter_add(padding_idx):
    rng = np.random.default_rng(2)
    table = rng.standard_normal((6, 4)).astype(np.float32)
    emb = nn.Embedding.from_pretrained(fg.tensor(table), freeze=False, padding_idx=padding_idx)
    ids = np.array([[1, 3, 3, 0], [5, 1, 0, 0]])
    upstream = rng.standard_normal((2, 4, 4)).astype(np.float32)
    (emb(fg.tensor(ids)) * fg.tensor(upstream)).sum().backward()
    want = np.zeros_like(table)
    np.add.at(want, ids.reshape(-1), upstream.reshape(-1, 4))
    if padding_idx is not None:
        want[padding_idx] = 0
    np.testing.assert_allclose(emb.weight.grad.numpy(), want, rtol=1e-5, atol=1e-6)


def test_model_embedding_gradient_frozen_and_finetuned(example):
    """Fine-tuned, the table's gradient is the looked-up vectors' gradients scatter-added
    into their rows (the padding row gets none); frozen, the table gets none at all."""
    sentences = [[3, 4, 5, 6, 7, 3], [8, 3, 9]]
    ids, lengths = text.pad_batch(sentences, multiple=8, minimum=5)
    y = fg.tensor([1.0, 0.0])

    frozen = small_model(example, False)
    F.binary_cross_entropy(F.sigmoid(frozen(ids, lengths)), y).backward()
    assert frozen.embedding.weight.grad is None
    assert all(conv.weight.grad is not None for conv in frozen.convs)

    tuned = small_model(example, True)
    F.binary_cross_entropy(F.sigmoid(tuned(ids, lengths)), y).backward()
    got = tuned.embedding.weight.grad.numpy()

    # the same model with the looked-up vectors as a leaf: their gradient, scattered by hand
    reference = small_model(example, True)
    vectors = fg.tensor(reference.embedding.weight.numpy()[ids], requires_grad=True)
    lens = fg.tensor(np.asarray(lengths, dtype=np.int64))
    F.binary_cross_entropy(F.sigmoid(reference.classify(vectors, lens)), y).backward()
    want = np.zeros_like(got)
    np.add.at(want, ids.reshape(-1), vectors.grad.numpy().reshape(-1, got.shape[1]))
    want[text.Vocab.pad_index] = 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert np.abs(got[[3, 4, 5, 8, 9]]).max(axis=1).min() > 0  # every row read learns
    assert not got[[0, 1, 2, 10, 11]].any()  # unused rows, and the padding row, get nothing


def test_finetuned_step_changes_only_the_rows_it_read(example):
    model = small_model(example, True).train()
    before = model.embedding.weight.numpy().copy()
    opt = fg.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids, lengths = text.pad_batch([[3, 4, 5, 6, 7]], minimum=5)
    F.binary_cross_entropy(F.sigmoid(model(ids, lengths)), fg.tensor([1.0])).backward()
    opt.step()
    changed = np.nonzero(np.abs(model.embedding.weight.numpy() - before).max(axis=1))[0]
    assert changed.tolist() == [3, 4, 5, 6, 7]


@pytest.mark.parametrize("finetune", [False, True])
def test_example_train_step_matches_the_plain_step(example, finetune):
    """The example's step (fg.jit when frozen) trains exactly as the step written plainly."""
    batches = [
        text.pad_batch(s, multiple=8, minimum=5)
        for s in ([[3, 4, 5, 6, 7], [8, 3, 9]], [[5, 6, 7, 8, 9, 3], [4, 4, 4]])
    ]
    labels = np.array([1.0, 0.0], dtype=np.float32)

    def plain(model, opt, ids, lengths):
        probs = F.sigmoid(model(ids, lengths))
        loss = F.binary_cross_entropy(probs, fg.tensor(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    def run(use_example):
        fg.manual_seed(0)
        model = small_model(example, finetune).train()
        model.dropout.p = 0.0  # no random masks: the two runs must agree exactly
        opt = fg.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        step = example.make_train_step(model, opt) if use_example else None
        losses = []
        for i in range(8):
            ids, lengths = batches[i % 2]
            if step:
                losses.append(step(ids, lengths, labels)[0])
            else:
                losses.append(plain(model, opt, ids, lengths))
        return losses, model.embedding.weight.numpy().copy()

    (want, want_table), (got, got_table) = run(False), run(True)
    np.testing.assert_allclose(got, want, rtol=1e-5)
    np.testing.assert_array_equal(got_table == want_table, True)
