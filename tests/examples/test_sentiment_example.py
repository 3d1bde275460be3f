"""examples/sentiment.py as a command: its variants, its refusals and its last line.

The model and its batches are tested in tests/nn/test_text.py; here the
command line is: which variant each flag picks, that a sentence the model
cannot read is refused before anything is built or trained, and that a run
ends with the test accuracy of its best-validation epoch (read back from the
run's own per-epoch lines). The one training run is a smoke run on 40
sentences per split, so it stays a few seconds.
"""

from __future__ import annotations

import os
import re

import pytest
from _files import load_file

from fusegrad.datasets import text

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "sentiment.py")


@pytest.fixture(scope="module")
def example():
    module = load_file("sentiment_cli_example", EXAMPLE)
    return module


@pytest.fixture(scope="module")
def files():
    glove = text.load_glove()
    return glove, text.load_sentiment(known=glove)


@pytest.fixture(autouse=True)
def read_once(files, monkeypatch):
    """main() reads GloVe and the sentences once per module, not once per test (~2 s)."""
    glove, data = files
    monkeypatch.setattr(text, "load_glove", lambda path=None: glove)
    monkeypatch.setattr(text, "load_sentiment", lambda path=None, seed=0, known=None: data)


def parse(example, *argv):
    return example.parse_args(example.build_parser(), list(argv))


def test_fine_tuning_is_the_default_and_finetune_a_no_op_alias(example):
    default, alias = parse(example), parse(example, "--finetune")
    for args in (default, alias):
        assert args.finetune and not args.static
        assert (args.epochs, args.dropout) == (example.FINETUNE_EPOCHS, example.FINETUNE_DROPOUT)
    assert vars(default) == vars(alias) | {"finetune": True}


def test_static_keeps_the_vectors_frozen_with_minitorchs_settings(example):
    args = parse(example, "--static")
    assert not args.finetune
    assert (args.epochs, args.dropout) == (example.STATIC_EPOCHS, example.STATIC_DROPOUT)
    args = parse(example, "--static", "--epochs", "3", "--dropout", "0.1")
    assert (args.epochs, args.dropout) == (3, 0.1)  # explicit values win


def test_static_and_finetune_together_are_refused(example, capsys):
    with pytest.raises(SystemExit) as e:
        parse(example, "--static", "--finetune")
    assert e.value.code == 2
    assert "not allowed with" in capsys.readouterr().err


def test_predicting_from_saved_weights_trains_nothing_by_default(example):
    assert parse(example, "--load", "w.npz", "--predict", "fine").epochs == 0
    assert parse(example, "--predict", "").epochs == example.FINETUNE_EPOCHS  # no --load


class Stop(Exception):
    """Raised by a stand-in model: main() got as far as building it."""


def recording_model(built: list):
    """A stand-in for a model class that records its keyword arguments, then stops main()."""

    def fake_model(table, **kwargs):
        built.append(kwargs)
        raise Stop

    return fake_model


def test_main_builds_the_variant_asked_for(example, monkeypatch):
    built = []
    monkeypatch.setattr(example, "KimCNN", recording_model(built))
    for argv in ([], ["--static"], ["--finetune"]):
        with pytest.raises(Stop):
            example.main(argv)
    variants = [(b["finetune"], b["dropout"]) for b in built]
    assert variants == [(True, 0.5), (False, 0.25), (True, 0.5)]


@pytest.mark.parametrize(
    "sentence, complaint",
    [("", "has no tokens"), ("   ", "has no tokens"), ("zzqxv blorfk", "none of its tokens")],
)
def test_a_sentence_the_model_cannot_read_is_refused_before_training(
    example, monkeypatch, capsys, sentence, complaint
):
    def must_not_run(*args, **kwargs):
        raise AssertionError("the example went on to build or train a model")

    monkeypatch.setattr(example, "KimCNN", must_not_run)
    monkeypatch.setattr(example, "train", must_not_run)
    with pytest.raises(SystemExit) as e:
        example.main(["--predict", sentence])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert complaint in err and "nothing was trained" in err


def test_one_known_word_is_enough_to_classify(example):
    vocab = text.Vocab(["good"])
    assert example.unknown_sentence("zzqxv good", vocab, None) is None
    assert "none of its tokens (zzqxv)" in example.unknown_sentence("zzqxv", vocab, None)
    with pytest.raises(ValueError, match="cannot classify"):
        example.predict_sentence(None, vocab, "zzqxv", None)


def test_a_run_ends_with_the_best_validation_epochs_test_accuracy(example, capsys):
    example.main(["--subset", "40", "--batch", "40", "--epochs", "3", "--seed", "1"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert "40 train / 40 validation / 40 test" in lines[0] and "fine-tuned" in lines[0]
    epochs = [
        re.match(r"epoch (\d+): .* validation (\d+\.\d\d)%, test (\d+\.\d\d)%", line)
        for line in lines
        if line.startswith("epoch ")
    ]
    assert len(epochs) == 3 and all(epochs)
    validation = [float(m.group(2)) for m in epochs]
    best = validation.index(max(validation))  # the first best epoch is the one kept
    last = re.fullmatch(r"test accuracy: (\d{1,3}\.\d\d)%", lines[-1])
    assert last, lines[-1]
    assert last.group(1) == epochs[best].group(3)


def test_arch_lstm_builds_the_bidirectional_lstm(example, monkeypatch):
    built = []
    monkeypatch.setattr(example, "BiLSTM", recording_model(built))
    monkeypatch.setattr(example, "KimCNN", lambda *a, **k: pytest.fail("built the CNN"))
    with pytest.raises(Stop):
        example.main(["--arch", "lstm", "--static"])
    assert built == [{"finetune": False, "dropout": 0.25, "seed": 0}]
    assert parse(example).arch == "cnn"  # the CNN stays the default
