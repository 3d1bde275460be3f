"""Text for the sentiment example: GloVe vectors, a GloVe-style tokenizer, the sentence data.

GloVe's 6B vectors were trained on text tokenized the Penn Treebank way, so a
sentence must be cut the same way for its words to find their vectors:
lower-cased, "don't" as `do n't`, "film's" as `film 's`, punctuation as tokens
of its own, "..." and "--" whole, abbreviations ("u.s.", "mr.") keeping their
periods.

>>> tokenize("It doesn't work -- the film's a mess...")
['it', 'does', "n't", 'work', '--', 'the', 'film', "'s", 'a', 'mess', '...']

`load_sentiment()` reads the bundled movie-review sentences as a binary task
like SST-2 (drop |rating| < 0.5, label by the rating's sign) and splits them
with a fixed seed; `Vocab` maps tokens to the rows of an embedding table, with
row 0 for padding and row 1 the one shared vector of every unknown word.

>>> data = load_sentiment()                                  # doctest: +SKIP
>>> len(data.train), len(data.validation), len(data.test)    # doctest: +SKIP
(8058, 1007, 1007)
"""

from __future__ import annotations

import gzip
import os
import re
from collections import Counter
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

# ---------------------------------------------------------------- files


def data_root() -> str:
    """`$FUSEGRAD_DATA` if set, else the data shipped in the repository's examples/data."""
    env = os.environ.get("FUSEGRAD_DATA")
    if env:
        return env
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.join(repo, "examples", "data")


def default_glove_path() -> str:
    return os.path.join(data_root(), "glove", "glove.6B.50d.subset.txt.gz")


def default_sentiment_path() -> str:
    return os.path.join(data_root(), "sentiment", "movie_review_snippets.tsv.gz")


def _open_text(path: str):
    """A text reader for a plain or gzipped UTF-8 file (newlines left as they are)."""
    with open(path, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    if gz:
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


# ---------------------------------------------------------------- word vectors


@dataclass
class WordVectors:
    """Words and their vectors: `vectors[i]` belongs to `words[i]`.

    >>> wv = WordVectors(["a", "b"], np.eye(2, dtype=np.float32))
    >>> "b" in wv, wv["b"].tolist(), wv.dim
    (True, [0.0, 1.0], 2)
    """

    words: list[str]
    vectors: np.ndarray

    def __post_init__(self):
        self.index = {w: i for i, w in enumerate(self.words)}

    @property
    def dim(self) -> int:
        return self.vectors.shape[1]

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word) -> bool:
        return word in self.index

    def __getitem__(self, word: str) -> np.ndarray:
        return self.vectors[self.index[word]]


def load_glove(path: str | None = None, vocab: Iterable[str] | None = None) -> WordVectors:
    """Read vectors in the GloVe text format: one word a line, then its numbers, space-separated.

    `path` may be plain text or gzipped (the bundled 28,228-word subset by
    default; the full `glove.6B.50d.txt` works too). With `vocab`, only those
    words are kept, so reading the full 400,000-word file stays small. The
    dimension is read from the first line; a line with another count raises.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
    ...     _ = f.write("the 0.5 -1\\nfilm 2 0.25\\n")
    >>> wv = load_glove(f.name)
    >>> wv.words, wv["film"].tolist()
    (['the', 'film'], [2.0, 0.25])
    """
    path = path or default_glove_path()
    keep = set(vocab) if vocab is not None else None
    words, rows, dim = [], [], None
    with _open_text(path) as f:
        for number, line in enumerate(f, 1):
            parts = line.rstrip("\r\n").rstrip(" ").split(" ")
            if len(parts) < 2:
                if not line.strip():
                    continue
                raise ValueError(f"{path}:{number}: expected a word and its numbers")
            if dim is None:
                dim = len(parts) - 1
            if len(parts) - 1 < dim:
                raise ValueError(
                    f"{path}:{number}: {len(parts) - 1} fields after the word, expected {dim}"
                )
            # a word never holds a space in 6B, but the 840B vectors have a few that do
            word = " ".join(parts[: len(parts) - dim])
            if keep is not None and word not in keep:
                continue
            try:
                rows.append(np.array(parts[len(parts) - dim :], dtype=np.float32))
            except ValueError:
                raise ValueError(f"{path}:{number}: not a number among the values") from None
            words.append(word)
    if dim is None:
        raise ValueError(f"{path}: no vectors in the file")
    vectors = np.stack(rows) if rows else np.zeros((0, dim), dtype=np.float32)
    return WordVectors(words, vectors)


# ---------------------------------------------------------------- tokenizer

_CLITICS = ("'s", "'re", "'ve", "'ll", "'d", "'m")
_TITLES = {"mr.", "mrs.", "ms.", "dr.", "vs.", "st.", "jr.", "sr.", "bros.", "prof."}
_INITIALS = re.compile(r"(?:[^\W\d_]\.)+")  # u.s., e.t., j.
# curly quotes become straight ones first (_TYPOGRAPHIC), so they need no entries here
_OPENERS = ("``", "''", '"', "'", "(", "[", "{", "`", "$", "#", "*")
_CLOSERS = ("''", '"', "'", ")", "]", "}", ".", ",", "!", "?", ";", ":", "*", "%")
_SEPARATORS = re.compile(r"(--|–|—|/|\.{2,}|…)")
_TYPOGRAPHIC = str.maketrans({"’": "'", "‘": "'", "“": '"', "”": '"'})


def tokenize(sentence: str, known: Container[str] | None = None) -> list[str]:
    """Lower-cased tokens cut as GloVe's (Penn Treebank) tokens are.

    Punctuation becomes tokens of its own, a run of dots is one "...",
    "n't" and the clitics 's 're 've 'll 'd 'm are split off ("can't" is
    `ca n't`, as in the Treebank), quotes '' and `` stay whole, and "/" and
    dashes split compounds. Abbreviations keep their periods ("u.s.", "mr.").

    `known` (a set of words, or a `WordVectors`) keeps whole any word, with or
    without its outer punctuation, that it holds: "o'brien", "and/or", "'n'".

    >>> tokenize("Don't miss it -- it's ''great''!")
    ['do', "n't", 'miss', 'it', '--', 'it', "'s", "''", 'great', "''", '!']
    >>> tokenize("Mr. Jackson's writer/director debut... in the U.S.")
    ['mr.', 'jackson', "'s", 'writer', '/', 'director', 'debut', '...', 'in', 'the', 'u.s.']
    """
    out: list[str] = []
    for chunk in sentence.lower().translate(_TYPOGRAPHIC).split():
        _tokenize_chunk(chunk, known, out)
    return out


def _is_abbreviation(word: str) -> bool:
    return word in _TITLES or _INITIALS.fullmatch(word) is not None


def _tokenize_chunk(chunk: str, known, out: list[str]) -> None:
    """Cut one whitespace-free chunk: leading punctuation, the core, trailing punctuation."""
    trailing: list[str] = []
    while chunk:
        if known is not None and chunk in known:
            break
        lead = next((p for p in _OPENERS if chunk.startswith(p) and len(chunk) > len(p)), None)
        if lead is not None and not (lead == "'" and chunk in _CLITICS):
            out.append(lead)
            chunk = chunk[len(lead) :]
            continue
        dots = re.search(r"(?:\.{2,}|…)$", chunk)
        if dots and dots.start() > 0:
            trailing.append("...")
            chunk = chunk[: dots.start()]
            continue
        tail = next((p for p in _CLOSERS if chunk.endswith(p) and len(chunk) > len(p)), None)
        if tail == "." and _is_abbreviation(chunk):
            tail = None
        if tail is None:
            break
        trailing.append(tail)
        chunk = chunk[: -len(tail)]
    if chunk:
        out.extend(_split_core(chunk, known))
    out.extend(reversed(trailing))


def _split_core(word: str, known) -> list[str]:
    """A word without outer punctuation: compounds split at / and dashes, then clitics."""
    if known is not None and word in known:
        return [word]
    if word in ("...", "…"):
        return ["..."]
    pieces = [p for p in _SEPARATORS.split(word) if p]
    if len(pieces) > 1:
        out: list[str] = []
        for p in pieces:
            if re.fullmatch(r"\.{2,}|…", p):
                out.append("...")
            else:
                _tokenize_chunk(p, known, out)  # "is!...in": each piece may carry punctuation
        return out
    if word.endswith("n't") and len(word) > 3:
        return [word[:-3], "n't"]
    for clitic in _CLITICS:
        if word.endswith(clitic) and len(word) > len(clitic):
            return [*_split_core(word[: -len(clitic)], known), clitic]
    if word.endswith("'") and len(word) > 1 and not word.endswith("n'"):
        return [word[:-1], "'"]  # the possessive of a plural: "critics'"
    return [word]


# ---------------------------------------------------------------- vocabulary


class Vocab:
    """Tokens to row numbers of an embedding table: 0 is padding, 1 every unknown word.

    >>> v = Vocab(["film", "good"])
    >>> v.encode(["good", "film", "zzz"]), len(v), v.itos[:2]
    ([3, 2, 1], 4, ['<pad>', '<unk>'])
    """

    PAD, UNK = "<pad>", "<unk>"
    pad_index, unk_index = 0, 1

    def __init__(self, words: Iterable[str]):
        self.itos = [self.PAD, self.UNK]
        for w in words:
            if w not in (self.PAD, self.UNK):
                self.itos.append(w)
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("Vocab words must be distinct")

    @classmethod
    def build(
        cls,
        token_lists: Iterable[Sequence[str]],
        known: Iterable[str] | None = None,
        min_freq: int = 1,
    ) -> Vocab:
        """The words seen at least `min_freq` times, most frequent first (ties by first sight).

        With `known`, words outside it are left to the shared unknown row.
        """
        counts = Counter(t for tokens in token_lists for t in tokens)
        words = [w for w, c in counts.most_common() if c >= min_freq]
        if known is not None:
            words = [w for w in words if w in known]
        return cls(words)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, word) -> bool:
        return word in self.stoi

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self.stoi.get(t, self.unk_index) for t in tokens]

    def vectors(self, glove: WordVectors, seed: int = 0) -> np.ndarray:
        """The embedding table (len(self), dim): GloVe's vector for each word, zeros for
        padding, and for every unknown word one shared random vector, as MiniTorch draws it:
        0.1 * (U[0, 1) - 0.5) in each coordinate."""
        rng = np.random.default_rng(seed)
        table = np.zeros((len(self), glove.dim), dtype=np.float32)
        unk = (0.1 * (rng.random(glove.dim) - 0.5)).astype(np.float32)
        table[self.unk_index] = unk
        for i, w in enumerate(self.itos[2:], start=2):
            table[i] = glove[w] if w in glove else unk
        return table


# ---------------------------------------------------------------- the sentiment task


@dataclass
class SentimentSplit:
    """One split: the file's ids, raw sentences, their tokens, 0/1 labels and mean ratings."""

    ids: list[str]
    sentences: list[str]
    tokens: list[list[str]]
    labels: np.ndarray  # int64, 1 = positive
    ratings: np.ndarray  # float32, the mean rating on -4..+4

    def __len__(self) -> int:
        return len(self.sentences)

    def encode(self, vocab: Vocab) -> list[list[int]]:
        return [vocab.encode(t) for t in self.tokens]


@dataclass
class SentimentData:
    train: SentimentSplit
    validation: SentimentSplit
    test: SentimentSplit
    vocab: Vocab


def read_ratings(path: str | None = None) -> list[tuple[str, float, str]]:
    """The rows of the movie-review file: (id, mean rating, sentence)."""
    path = path or default_sentiment_path()
    rows = []
    with _open_text(path) as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            fields = line.split("\t")
            if len(fields) != 3:
                raise ValueError(
                    f"{path}:{number}: expected id, rating, sentence separated by tabs"
                )
            rows.append((fields[0], float(fields[1]), fields[2]))
    return rows


def load_sentiment(
    path: str | None = None,
    seed: int = 0,
    fractions: tuple[float, float, float] = (0.8, 0.1, 0.1),
    threshold: float = 0.5,
    known: Iterable[str] | None = None,
) -> SentimentData:
    """The movie-review sentences as a binary task like SST-2, split train/validation/test.

    Sentences whose mean rating r has |r| < `threshold` are dropped as neutral;
    the rest are labelled 1 if r > 0 else 0 (10,072 sentences with the bundled
    file). A permutation drawn from numpy's `default_rng(seed)` orders them, and
    the first 80% (rounded) train, the next 10% validate, the rest test: with the
    defaults, 8,058 / 1,007 / 1,007. `known` (e.g. the GloVe vectors) goes to the
    tokenizer and keeps words without a vector out of the `Vocab`, which is built
    from the training split alone.
    """
    if abs(sum(fractions) - 1.0) > 1e-9 or any(f < 0 for f in fractions):
        raise ValueError(f"fractions must be non-negative and sum to 1, got {fractions}")
    known = set(known) if known is not None and not isinstance(known, (set, WordVectors)) else known
    rows = [r for r in read_ratings(path) if abs(r[1]) >= threshold]
    order = np.random.default_rng(seed).permutation(len(rows))
    n_train = round(fractions[0] * len(rows))
    n_val = round(fractions[1] * len(rows))
    bounds = [(0, n_train), (n_train, n_train + n_val), (n_train + n_val, len(rows))]
    splits = []
    for lo, hi in bounds:
        picked = [rows[i] for i in order[lo:hi]]
        sentences = [s for _, _, s in picked]
        ratings = np.array([r for _, r, _ in picked], dtype=np.float32)
        splits.append(
            SentimentSplit(
                [i for i, _, _ in picked],
                sentences,
                [tokenize(s, known) for s in sentences],
                (ratings > 0).astype(np.int64),
                ratings,
            )
        )
    vocab = Vocab.build(splits[0].tokens, known)
    return SentimentData(*splits, vocab)


# ---------------------------------------------------------------- batches


def padded_length(longest: int, multiple: int = 8, minimum: int = 1) -> int:
    """`longest` rounded up to a multiple of `multiple`, and at least `minimum`.

    Rounding keeps the number of distinct batch shapes, and so of compiled
    schedules, small: lengths 1..64 make at most 8 shapes with multiple=8.

    >>> padded_length(13), padded_length(16), padded_length(2, minimum=5)
    (16, 16, 8)
    """
    n = max(longest, minimum, 1)
    return -(-n // multiple) * multiple


def pad_batch(
    sequences: Sequence[Sequence[int]],
    pad_index: int = Vocab.pad_index,
    multiple: int = 8,
    minimum: int = 1,
    length: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(ids (B, L) int64 padded with `pad_index`, lengths (B,) int64) for a list of sequences.

    L is `length` if given, else `padded_length(longest, multiple, minimum)`.

    >>> ids, lengths = pad_batch([[5, 6, 7], [8]], multiple=4)
    >>> ids.tolist(), lengths.tolist()
    ([[5, 6, 7, 0], [8, 0, 0, 0]], [3, 1])
    """
    lengths = np.array([len(s) for s in sequences], dtype=np.int64)
    longest = int(lengths.max()) if len(lengths) else 0
    if length is None:
        length = padded_length(longest, multiple, minimum)
    elif length < longest:
        raise ValueError(f"length {length} is shorter than the longest sequence ({longest})")
    ids = np.full((len(sequences), length), pad_index, dtype=np.int64)
    for row, s in zip(ids, sequences):
        row[: len(s)] = s
    return ids, lengths


def bucket_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator | None = None, pool: int = 50
) -> list[np.ndarray]:
    """Index batches of similar lengths, so little of each batch is padding.

    Shuffle (when `rng` is given), cut into pools of `pool` batches, sort each
    pool by length, cut it into batches, shuffle the batch order. Every index
    appears once; only the last batch may be short.

    >>> [b.tolist() for b in bucket_batches([5, 1, 4, 2], 2)]
    [[1, 3], [2, 0]]
    """
    lengths = np.asarray(lengths)
    order = rng.permutation(len(lengths)) if rng is not None else np.arange(len(lengths))
    size = batch_size * pool
    batches = []
    for start in range(0, len(order), size):
        chunk = order[start : start + size]
        chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
        batches += [chunk[i : i + batch_size] for i in range(0, len(chunk), batch_size)]
    # keep the one short batch last, so every other batch has the full size
    short = [b for b in batches if len(b) < batch_size]
    full = [b for b in batches if len(b) == batch_size]
    if rng is not None:
        full = [full[i] for i in rng.permutation(len(full))]
    return full + short
