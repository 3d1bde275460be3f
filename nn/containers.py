"""Containers: `Sequential` chains modules, `ModuleList` holds them for a custom forward.

>>> from fusegrad import nn
>>> net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
>>> len(net), type(net[1]).__name__
(3, 'ReLU')
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from .module import Module


class Sequential(Module):
    """Modules applied in order; built from positional modules or an OrderedDict of named ones."""

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index):
        items = list(self._modules.items())
        if isinstance(index, slice):
            return Sequential(OrderedDict(items[index]))
        return items[_index(index, len(items))][1]

    def append(self, module: Module) -> Sequential:
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    """A list of modules whose parameters belong to the parent (as torch.nn.ModuleList)."""

    def __init__(self, modules: Iterable[Module] | None = None):
        super().__init__()
        for m in modules or []:
            self.append(m)

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, index):
        items = list(self._modules.values())
        if isinstance(index, slice):
            return ModuleList(items[index])
        return items[_index(index, len(items))]

    def append(self, module: Module) -> ModuleList:
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules: Iterable[Module]) -> ModuleList:
        for m in modules:
            self.append(m)
        return self


def _index(index: int, n: int) -> int:
    if not -n <= index < n:
        raise IndexError(f"index {index} is out of range for a container of {n} modules")
    return index % n
