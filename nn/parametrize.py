"""`nn.utils.parametrize`, as torch.nn.utils.parametrize: a module's parameter or buffer
computed from tensors of its own by a module (a parametrization) at each read.

`register_parametrization(m, "weight", P())` moves `m.weight` to
`m.parametrizations.weight.original` (the same Parameter object, so an optimizer built
before still updates it) and makes `m.weight` a property of a class made for `m`
(`ParametrizedLinear`, a subclass of `m`'s class, as torch's), whose getter returns
`P()(original)`. Each read builds that graph anew: it is lazy, so it fuses into the
kernels of the layer that reads it, and `backward()` differentiates through it to
`original`. A `right_inverse` returning several tensors gives `original0`, `original1`,
...; assigning a tensor to `m.weight` runs the right inverses and writes the originals.
The state dict has torch's keys (`parametrizations.weight.original`).

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> from fusegrad.nn.utils import parametrize as P
>>> class Symmetric(nn.Module):
...     def forward(self, X):
...         return X.triu() + X.triu(1).transpose(0, 1)
>>> m = P.register_parametrization(nn.Linear(3, 3), "weight", Symmetric())
>>> type(m).__name__, list(m.state_dict())
('ParametrizedLinear', ['bias', 'parametrizations.weight.original'])
>>> bool((m.weight == m.weight.T).all())
True
>>> P.type_before_parametrizations(m).__name__
'Linear'
"""

from __future__ import annotations

import collections.abc
import copy
from contextlib import contextmanager

from ..nnapi import Tensor, no_grad
from .containers import ModuleDict, ModuleList
from .module import Module, Parameter

__all__ = [
    "ParametrizationList",
    "cached",
    "is_parametrized",
    "register_parametrization",
    "remove_parametrizations",
    "transfer_parametrizations_and_params",
    "type_before_parametrizations",
]

_cache_enabled = 0
_cache: dict = {}  # (id(module), tensor name) -> the parametrized tensor, inside `cached()`


@contextmanager
def cached():
    """Inside, each parametrized tensor is computed once, at its first read, and that
    tensor is returned by every later read (an RNN's parametrized recurrent weight, a
    weight shared by two layers); the values are forgotten on leaving the outermost
    `cached()`. (Reads outside build the same lazy graph again each time; this keeps
    them one tensor, as torch's cache does.)

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> from fusegrad.nn.utils import parametrize as P
    >>> class Double(nn.Module):
    ...     def forward(self, X):
    ...         return 2 * X
    >>> m = P.register_parametrization(nn.Linear(2, 2), "weight", Double())
    >>> with P.cached():
    ...     m.weight is m.weight
    True
    >>> m.weight is m.weight
    False
    """
    global _cache_enabled, _cache
    _cache_enabled += 1
    try:
        yield
    finally:
        _cache_enabled -= 1
        if not _cache_enabled:
            _cache = {}


def _register_parameter_or_buffer(module: Module, name: str, value) -> None:
    if isinstance(value, Parameter):
        module.register_parameter(name, value)
    else:
        module.register_buffer(name, value)


def _maybe_set(dest: Tensor, src: Tensor) -> None:
    """`dest.set_(src)` (torch's): dest, the same object, takes src's value, shape and
    dtype, with no history."""
    if src is not dest:
        with no_grad():
            dest.data = src.detach()


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, in registration order, and its originals: the
    type of `module.parametrizations[tensor_name]` (as torch's; not made by users).

    It holds `original` where the first parametrization's `right_inverse` returns one
    tensor (or where there is none: the identity), `original0`, `original1`, ... where
    it returns a sequence; `unsafe` lets the parametrizations change the shape and dtype.
    """

    def __init__(self, modules, original: Tensor, unsafe: bool = False) -> None:
        if len(modules) == 0:
            raise ValueError("ParametrizationList requires one or more modules.")
        super().__init__(modules)
        self.unsafe = unsafe
        original_shape, original_dtype = original.shape, original.dtype
        with no_grad():
            new = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass
        if not isinstance(new, (Tensor, collections.abc.Sequence)):
            raise ValueError(
                "'right_inverse' must return a Tensor or a Sequence of tensors (list, "
                f"tuple...). Got {type(new).__name__}"
            )
        self.is_tensor = isinstance(new, Tensor)
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            if original.dtype != new.dtype:
                raise ValueError(
                    "When `right_inverse` outputs one tensor, it may not change the dtype.\n"
                    f"original.dtype: {original.dtype}\n"
                    f"right_inverse(original).dtype: {new.dtype}"
                )
            if original.device != new.device:
                raise ValueError(
                    "When `right_inverse` outputs one tensor, it may not change the device.\n"
                    f"original.device: {original.device}\n"
                    f"right_inverse(original).device: {new.device}"
                )
            _maybe_set(original, new)  # the same object: an optimizer holding it still does
            _register_parameter_or_buffer(self, "original", original)
        else:
            for i, originali in enumerate(new):
                if not isinstance(originali, Tensor):
                    raise ValueError(
                        "'right_inverse' must return a Tensor or a Sequence of tensors "
                        "(list, tuple...). "
                        f"Got element {i} of the sequence with type {type(originali).__name__}."
                    )
                if isinstance(original, Parameter):
                    originali = Parameter(originali, original.requires_grad)
                else:
                    originali = originali.detach()
                    originali.requires_grad_(original.requires_grad)
                _register_parameter_or_buffer(self, f"original{i}", originali)
        if not self.unsafe:
            Z = self()
            if not isinstance(Z, Tensor):
                raise ValueError(f"A parametrization must return a tensor. Got {type(Z).__name__}.")
            if Z.dtype != original_dtype:
                raise ValueError(
                    "Registering a parametrization may not change the dtype of the tensor, "
                    "unless `unsafe` flag is enabled.\n"
                    f"unparametrized dtype: {original_dtype}\n"
                    f"parametrized dtype: {Z.dtype}"
                )
            if Z.shape != original_shape:
                raise ValueError(
                    "Registering a parametrization may not change the shape of the tensor, "
                    "unless `unsafe` flag is enabled.\n"
                    f"unparametrized shape: {original_shape}\n"
                    f"parametrized shape: {Z.shape}"
                )

    def right_inverse(self, value: Tensor) -> None:
        """Run the parametrizations' `right_inverse`s, last registered first, on `value`
        and write the result into `original` (or `original0`, `original1`, ...): what
        assigning to the parametrized attribute does."""
        with no_grad():
            for module in reversed(list(self)):
                if not hasattr(module, "right_inverse"):
                    raise RuntimeError(
                        f"parametrization {type(module).__name__} does not implement right_inverse."
                    )
                value = module.right_inverse(value)
            if self.is_tensor:
                if not isinstance(value, Tensor):
                    raise ValueError(
                        f"`right_inverse` should return a tensor. Got {type(value).__name__}"
                    )
                if value.dtype != self.original.dtype:
                    raise ValueError(
                        f"The tensor returned by `right_inverse` has dtype {value.dtype} "
                        f"while `original` has dtype {self.original.dtype}"
                    )
                _maybe_set(self.original, value)
                return
            if not isinstance(value, collections.abc.Sequence):
                raise ValueError(
                    "'right_inverse' must return a sequence of tensors. "
                    f"Got {type(value).__name__}."
                )
            if len(value) != self.ntensors:
                raise ValueError(
                    "'right_inverse' must return a sequence of tensors of length "
                    f"{self.ntensors}. Got a sequence of length {len(value)}."
                )
            for i, tensor in enumerate(value):
                original_i = getattr(self, f"original{i}")
                if not isinstance(tensor, Tensor):
                    raise ValueError(
                        "'right_inverse' must return a sequence of tensors or reference-type "
                        f"opaques. Got element {i} of type {type(tensor).__name__}."
                    )
                if original_i.dtype != tensor.dtype:
                    raise ValueError(
                        f"Tensor {i} returned by `right_inverse` has dtype {tensor.dtype} "
                        f"while `original{i}` has dtype {original_i.dtype}"
                    )
                _maybe_set(original_i, tensor)

    def forward(self) -> Tensor:
        """The parametrized tensor: the first parametrization of the original(s), then
        each later one of the result."""
        modules = list(self)
        if self.is_tensor:
            x = modules[0](self.original)
        else:
            x = modules[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in modules[1:]:
            x = module(x)
        return x


def _inject_new_class(module: Module) -> None:
    """Give `module` a class of its own, `Parametrized<Class>`, a subclass of its class
    (where the parametrized tensors' properties go), as torch's."""
    cls = module.__class__

    def default_deepcopy(self, memo):
        obj = memo.get(id(self))
        if obj is not None:
            return obj
        replica = self.__new__(self.__class__)
        memo[id(self)] = replica
        replica.__setstate__(copy.deepcopy(self.__dict__, memo))
        return replica

    def getstate(self):
        raise RuntimeError(
            "Serialization of parametrized modules is only supported through state_dict()."
        )

    namespace = {"__getstate__": getstate}
    if not hasattr(cls, "__deepcopy__"):
        namespace["__deepcopy__"] = default_deepcopy
    module.__class__ = type(f"Parametrized{cls.__name__}", (cls,), namespace)


def _inject_property(module: Module, tensor_name: str) -> None:
    """Make `module.<tensor_name>` a property of its class: its parametrizations' output
    when read (cached inside `cached()`), their right inverses when assigned."""
    if hasattr(module, tensor_name):
        raise AssertionError(f"Module already has an attribute named '{tensor_name}'")

    def get_parametrized(self) -> Tensor:
        parametrization = self.parametrizations[tensor_name]
        if not _cache_enabled:
            return parametrization()
        key = (id(self), tensor_name)
        tensor = _cache.get(key)
        if tensor is None:
            tensor = _cache[key] = parametrization()
        return tensor

    def set_original(self, value: Tensor) -> None:
        self.parametrizations[tensor_name].right_inverse(value)

    setattr(module.__class__, tensor_name, property(get_parametrized, set_original))


def register_parametrization(
    module: Module, tensor_name: str, parametrization: Module, *, unsafe: bool = False
) -> Module:
    """Parametrize `module.<tensor_name>` (a parameter or a buffer) by `parametrization`:
    each read returns `parametrization(original)`, as torch's. A second parametrization
    of the same tensor applies to the first's output. Returns `module`.

    `parametrization.right_inverse(X)`, where it has one, gives the original(s) from the
    unparametrized tensor at registration and from a tensor assigned later (one tensor:
    `original`; a sequence: `original0`, `original1`, ..., new parameters, to be added to
    an optimizer built before). Unless `unsafe`, the parametrization is called once here
    to check that it keeps the tensor's shape and dtype. The parametrization takes the
    module's training mode.
    """
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        if not unsafe:
            _check_stacked(module, tensor_name, parametrization)
        entry = module.parametrizations[tensor_name]
        entry.append(parametrization)
        entry.unsafe |= unsafe
    elif tensor_name in module._buffers or tensor_name in module._parameters:
        original = getattr(module, tensor_name)
        parametrizations = ParametrizationList([parametrization], original, unsafe=unsafe)
        delattr(module, tensor_name)
        if not is_parametrized(module):
            _inject_new_class(module)
            module.parametrizations = ModuleDict()
        _inject_property(module, tensor_name)
        module.parametrizations[tensor_name] = parametrizations
    else:
        raise ValueError(
            f"Module '{module}' does not have a parameter, a buffer, or a "
            f"parametrized element with name '{tensor_name}'"
        )
    return module


def _check_stacked(module: Module, tensor_name: str, parametrization: Module) -> None:
    """A parametrization registered on a parametrized tensor keeps its shape and dtype,
    and so does its right inverse (torch's checks)."""
    Y = getattr(module, tensor_name)
    X = parametrization(Y)
    if not isinstance(X, Tensor):
        raise ValueError(f"A parametrization must return a tensor. Got {type(X).__name__}.")
    if X.dtype != Y.dtype:
        raise ValueError(
            "Registering a parametrization may not change the dtype of the tensor, unless "
            "the `unsafe` flag is enabled.\n"
            f"module.{tensor_name}.dtype: {Y.dtype}\n"
            f"parametrization(module.{tensor_name}).dtype: {X.dtype}"
        )
    if X.shape != Y.shape:
        raise ValueError(
            "Registering a parametrization may not change the shape of the tensor, unless "
            "the `unsafe` flag is enabled.\n"
            f"module.{tensor_name}.shape: {Y.shape}\n"
            f"parametrization(module.{tensor_name}).shape: {X.shape}"
        )
    if not hasattr(parametrization, "right_inverse"):
        return
    try:
        Z = parametrization.right_inverse(X)
    except NotImplementedError:
        return
    if not isinstance(Z, Tensor):
        raise ValueError(
            f"parametrization.right_inverse must return a tensor. Got: {type(Z).__name__}"
        )
    if Z.dtype != Y.dtype:
        raise ValueError(
            "The tensor returned by parametrization.right_inverse must have the same dtype "
            f"as module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
            f"module.{tensor_name}.dtype: {Y.dtype}\n"
            f"returned dtype: {Z.dtype}"
        )
    if Z.shape != Y.shape:
        raise ValueError(
            "The tensor returned by parametrization.right_inverse must have the same shape "
            f"as module.{tensor_name}, unless the `unsafe` flag is enabled.\n"
            f"module.{tensor_name}.shape: {Y.shape}\n"
            f"returned shape: {Z.shape}"
        )


def is_parametrized(module: Module, tensor_name: str | None = None) -> bool:
    """Whether `module` has a parametrization on `tensor_name` (on any tensor: None)."""
    parametrizations = getattr(module, "parametrizations", None)
    if parametrizations is None or not isinstance(parametrizations, ModuleDict):
        return False
    if tensor_name is None:
        return len(parametrizations) > 0
    return tensor_name in parametrizations


def remove_parametrizations(
    module: Module, tensor_name: str, leave_parametrized: bool = True
) -> Module:
    """Take the parametrizations off `module.<tensor_name>`, which becomes a parameter
    (or buffer) again, as torch's: holding the parametrized value with
    `leave_parametrized` (the same Parameter object as `original`, where there is one),
    else the original (only where there is one original). The module gets its class
    back when no tensor of it is parametrized any more. Returns `module`."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    parametrizations = module.parametrizations[tensor_name]
    if parametrizations.is_tensor:
        original = parametrizations.original
        if leave_parametrized:
            with no_grad():
                t = getattr(module, tensor_name)
            _maybe_set(original, t)
    else:
        if not leave_parametrized:
            raise ValueError(
                "Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                "that is parametrized in terms of a sequence of tensors."
            )
        t = getattr(module, tensor_name)
        original = Parameter(t) if t.requires_grad else t.detach()
    delattr(module.__class__, tensor_name)
    del module.parametrizations[tensor_name]
    _register_parameter_or_buffer(module, tensor_name, original)
    if not is_parametrized(module):
        delattr(module, "parametrizations")
        module.__class__ = module.__class__.__bases__[0]
    return module


def type_before_parametrizations(module: Module) -> type:
    """The module's class before it was parametrized (its class where it is not)."""
    if is_parametrized(module):
        return module.__class__.__bases__[0]
    return type(module)


def transfer_parametrizations_and_params(
    from_module: Module, to_module: Module, tensor_name: str | None = None
) -> Module:
    """Register `from_module`'s parametrizations of `tensor_name` (of every parametrized
    tensor: None) on `to_module` too, sharing their originals (a parameter `to_module`
    lacks is made from `from_module`'s value first). Returns `to_module`."""
    if not is_parametrized(from_module):
        return to_module
    names = list(from_module.parametrizations) if tensor_name is None else [tensor_name]
    for name in names:
        if not hasattr(to_module, name):
            setattr(to_module, name, Parameter(getattr(from_module, name)))
        source = from_module.parametrizations[name]
        for parametrization in source:
            register_parametrization(to_module, name, parametrization)
        target = to_module.parametrizations[name]
        if hasattr(source, "original"):
            target.original = source.original
        else:
            i = 0
            while hasattr(source, f"original{i}"):
                setattr(target, f"original{i}", getattr(source, f"original{i}"))
                i += 1
    return to_module
