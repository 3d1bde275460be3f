"""fusegrad.cuda (torch.cuda's stand-in): the answers torch gives on a machine without a
GPU, and the memory statistics refused on a GPU, naming themselves."""

from __future__ import annotations

import pytest

import fusegrad as fg


def test_without_a_gpu_the_answers_are_torchs(monkeypatch):
    monkeypatch.setattr(fg.cuda, "is_available", lambda: False)
    assert fg.cuda.is_bf16_supported() is False
    assert fg.cuda.memory_allocated() == 0 and fg.cuda.memory_reserved() == 0
    assert fg.cuda.max_memory_allocated() == 0
    assert fg.cuda.reset_peak_memory_stats() is None


def test_on_a_device_memory_statistics_are_refused_naming_them(monkeypatch):
    monkeypatch.setattr(fg.cuda, "is_available", lambda: True)
    with pytest.raises(NotImplementedError, match="torch.cuda.memory_allocated on a GPU"):
        fg.cuda.memory_allocated()
    with pytest.raises(NotImplementedError, match="reset_peak_memory_stats"):
        fg.cuda.reset_peak_memory_stats()
