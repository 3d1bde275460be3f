"""Containers: `Sequential` chains modules, `ModuleList` holds them for a custom forward,
`ModuleDict` holds them by name; `ParameterList` and `ParameterDict` hold parameters.

>>> from fusegrad import nn
>>> net = nn.Sequential(nn.Linear(2, 4), nn.ReLU(), nn.Linear(4, 1))
>>> len(net), type(net[1]).__name__
(3, 'ReLU')
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping

from ..nnapi import Tensor, is_host_device
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


class ParameterDict(Module):
    """Parameters by name, registered as this module's (as torch.nn.ParameterDict); keeps
    insertion order.

    A tensor stored in it becomes a Parameter (a leaf that requires grad; an existing
    Parameter is kept as it is); any other value is stored as it is, as in torch.
    `named_parameters()` and `state_dict()` name each entry by its key, so a model's
    `self.params = nn.ParameterDict(...)` gives `params.<key>`. A plain dict passed to the
    constructor or `update` is taken in sorted key order, as torch takes it; an
    OrderedDict, a ParameterDict or a list of pairs keeps its order.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> pd = nn.ParameterDict({"scale": fg.ones(2), "bias": fg.zeros(2)})
    >>> list(pd), [n for n, _ in pd.named_parameters()], pd["scale"].requires_grad
    (['bias', 'scale'], ['bias', 'scale'], True)
    """

    def __init__(self, parameters=None):
        super().__init__()
        self._keys: dict[str, None] = {}
        if parameters is not None:
            self.update(parameters)

    def __getitem__(self, key: str):
        return getattr(self, _checked_key(key))

    def __setitem__(self, key: str, value) -> None:
        key = _checked_key(key)
        if isinstance(value, Tensor) and not isinstance(value, Parameter):
            value = Parameter(value)
        if isinstance(value, Parameter) and key not in self._parameters:
            _check_parameter_name(self, key)
        self._keys[key] = None
        setattr(self, key, value)

    def __delitem__(self, key: str) -> None:
        del self._keys[key]
        delattr(self, key)

    def __len__(self) -> int:
        return len(self._keys)

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __reversed__(self) -> Iterator[str]:
        return reversed(self._keys)

    def __contains__(self, key) -> bool:
        return key in self._keys

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((k, self[k]) for k in self._keys)

    def values(self):
        return (self[k] for k in self._keys)

    def get(self, key: str, default=None):
        """The entry at `key`, or `default` where there is none."""
        return self[key] if key in self else default

    def setdefault(self, key: str, default=None):
        """The entry at `key`; where there is none, `default` stored there first (a tensor
        made a Parameter) and returned."""
        if key not in self:
            self[key] = default
        return self[key]

    def pop(self, key: str):
        """Remove the entry at `key` and return it (KeyError where there is none)."""
        value = self[key]
        del self[key]
        return value

    def popitem(self) -> tuple:
        """Remove the last entry inserted and return it as `(key, value)`."""
        if not self._keys:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(self._keys))
        value = self[key]
        del self[key]
        return key, value

    def clear(self) -> None:
        for key in list(self._keys):
            del self[key]

    def copy(self) -> ParameterDict:
        """A new ParameterDict holding the same Parameters (not copies of them)."""
        return ParameterDict(OrderedDict((k, self[k]) for k in self._keys))

    def fromkeys(self, keys, default=None) -> ParameterDict:
        """A new ParameterDict with `keys`, each holding `default` (a tensor that is not a
        Parameter becomes a Parameter of its own for each key, as torch's)."""
        return ParameterDict((k, default) for k in keys)

    def update(self, parameters) -> None:
        """Add or replace entries from a mapping or an iterable of `(key, value)` pairs."""
        if not isinstance(parameters, Iterable):
            raise TypeError(
                "ParametersDict.update should be called with an iterable of key/value pairs, "
                f"but got {type(parameters).__name__}"
            )
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = list(parameters.items())
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = []
            for j, pair in enumerate(parameters):
                if not isinstance(pair, Iterable):
                    raise TypeError(
                        f"ParameterDict update sequence element #{j} should be Iterable; "
                        f"is {type(pair).__name__}"
                    )
                pair = tuple(pair)
                if len(pair) != 2:
                    raise ValueError(
                        f"ParameterDict update sequence element #{j} has length {len(pair)}; "
                        "2 is required"
                    )
                pairs.append(pair)
        for key, value in pairs:
            self[key] = value

    def __or__(self, other) -> ParameterDict:
        out = self.copy()
        out.update(other)
        return out

    def __ror__(self, other):
        out = other.copy()
        out.update(self)
        return out

    def __ior__(self, other) -> ParameterDict:
        self.update(other)
        return self

    def extra_repr(self) -> str:
        lines = []
        for key, value in self.items():
            if isinstance(value, Tensor):
                kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
                size = "x".join(map(str, value.shape))
                where = "" if is_host_device(str(value.device)) else f" ({value.device})"
                described = f"{kind} containing: [{value.type()} of size {size}{where}]"
                lines.append(f"  ({key}): {described}")
            else:
                lines.append(f"  ({key}): Object of type: {type(value).__name__}")
        return "\n".join(lines)


def _checked_key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(
            "Index given to ParameterDict cannot be used as a key as it is not a string "
            f"(type is '{type(key).__name__}')"
        )
    return key


def _check_parameter_name(module: Module, name: str) -> None:
    """torch's register_parameter checks, which fusegrad's Module leaves out: a name that
    could not be read back as an attribute is refused."""
    if "." in name:
        raise KeyError('parameter name can\'t contain "."')
    if name == "":
        raise KeyError('parameter name can\'t be empty string ""')
    if hasattr(type(module), name):
        raise KeyError(f"attribute '{name}' already exists")
