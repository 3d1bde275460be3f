"""Containers: `Sequential` chains modules, `ModuleList` holds them for a custom forward.

>>> from fusegrad import nn
>>> net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
>>> len(net), type(net[1]).__name__
(3, 'ReLU')
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator

from .module import Module, Parameter


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

    def __setitem__(self, index: int, module: Module) -> None:
        """`model[-1] = nn.Linear(...)`: replace a layer in place (its name and order kept)."""
        names = list(self._modules)
        setattr(self, names[_index(index, len(names))], module)

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

    def __setitem__(self, index: int, module: Module) -> None:
        names = list(self._modules)
        setattr(self, names[_index(index, len(names))], module)

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


class ModuleDict(Module):
    """Modules by name, registered as children (as torch.nn.ModuleDict); keeps insertion order.

    >>> from fusegrad import nn
    >>> heads = nn.ModuleDict({"cls": nn.Linear(4, 2), "reg": nn.Linear(4, 1)})
    >>> list(heads), sorted(n for n, _ in heads.named_parameters())[:2]
    (['cls', 'reg'], ['cls.bias', 'cls.weight'])
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key: str) -> Module:
        return self._modules[key]

    def __setitem__(self, key: str, module: Module) -> None:
        self.add_module(key, module)

    def __delitem__(self, key: str) -> None:
        del self._modules[key]

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[str]:
        return iter(self._modules)

    def __contains__(self, key: str) -> bool:
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def clear(self) -> None:
        self._modules.clear()

    def pop(self, key: str) -> Module:
        module = self[key]
        del self[key]
        return module

    def update(self, modules) -> None:
        items = modules.items() if hasattr(modules, "items") else modules
        for key, module in items:
            self[key] = module


class ParameterList(Module):
    """Parameters in a list, registered as this module's (as torch.nn.ParameterList).

    Tensors that are not Parameters are wrapped into one, as in torch.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> ps = nn.ParameterList([fg.zeros(2), fg.ones(3)])
    >>> [n for n, _ in ps.named_parameters()], ps[1].requires_grad
    (['0', '1'], True)
    """

    def __init__(self, values=None):
        super().__init__()
        for v in values or []:
            self.append(v)

    def __len__(self) -> int:
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __getitem__(self, index):
        items = list(self._parameters.values())
        if isinstance(index, slice):
            return ParameterList(items[index])
        return items[_index(index, len(items))]

    def __setitem__(self, index: int, value) -> None:
        index = _index(index, len(self))
        self.register_parameter(str(index), _as_parameter(value))

    def append(self, value) -> ParameterList:
        self.register_parameter(str(len(self)), _as_parameter(value))
        return self

    def extend(self, values) -> ParameterList:
        for v in values:
            self.append(v)
        return self

    def extra_repr(self) -> str:
        return "\n".join(
            f"({i}): Parameter containing: [{p.dtype.name} of size {'x'.join(map(str, p.shape))}]"
            for i, p in enumerate(self)
        )


def _as_parameter(value):
    return value if isinstance(value, Parameter) else Parameter(value)
