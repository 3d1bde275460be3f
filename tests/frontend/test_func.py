"""fusegrad.func, torch.func's home: functional_call (nn/stateless.py, tested in
tests/nn/test_stateless.py) under torch's name, and torch.func mapped to it."""

from __future__ import annotations

import importlib

import fusegrad as fg
from fusegrad import nn
from fusegrad.nn import stateless
from fusegrad.torch_shim import TORCH_MODULES


def test_functional_call_is_torch_funcs():
    assert fg.func.functional_call is stateless.func_functional_call
    assert importlib.import_module("fusegrad.func") is fg.func
    lin = nn.Linear(2, 1, bias=False)
    y = fg.func.functional_call(lin, {"weight": fg.tensor([[1.0, -1.0]])}, fg.tensor([[3.0, 1.0]]))
    assert y.tolist() == [[2.0]]


def test_torch_func_reads_as_fusegrad_func():
    assert TORCH_MODULES["torch.func"] == "fusegrad.func"
