"""`functional_call`: call a module with some of its parameters and buffers replaced by
given tensors for that call only, as torch.func.functional_call (also
`fusegrad.func.functional_call`) and torch.nn.utils.stateless.functional_call.

The given tensors stand in the module's parameter and buffer tables while it runs (they
need not be Parameters), so the graph the call builds reads them: gradients flow to them,
and not to the module's own parameters, which are back in place when the call returns.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> lin = nn.Linear(2, 1)
>>> w = fg.ones(1, 2, requires_grad=True)
>>> y = fg.func.functional_call(lin, {"weight": w, "bias": fg.zeros(1)}, fg.tensor([[1.0, 2.0]]))
>>> y.item()
3.0
>>> y.sum().backward()
>>> w.grad.tolist(), lin.weight.grad is None
([[1.0, 2.0]], True)
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Sequence

from ..nnapi import Tensor
from .module import Module

__all__ = ["functional_call"]  # (torch's stateless module: the deprecated form)

_MISSING = object()


def func_functional_call(
    module: Module,
    parameter_and_buffer_dicts,
    args=None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """torch.func.functional_call (`fusegrad.func.functional_call`):
    `module(*args, **kwargs)` with the parameters and buffers named (by their dotted
    names, `state_dict`'s) in `parameter_and_buffer_dicts` (a dict, or a sequence of dicts
    with distinct keys) replaced for the call, as torch.func.functional_call. `args` not
    a tuple is the one positional argument. `tie_weights`: a tensor the module holds under
    several names (tied weights) is replaced under all of them (different values given
    for them raise). `strict`: every parameter and buffer must be given, and nothing else.
    Tensors the module assigns to those names during the call are written back into the
    dict (a buffer updated in place, say); the module's own are restored."""
    if isinstance(parameter_and_buffer_dicts, dict):
        parameters_and_buffers = parameter_and_buffer_dicts
    elif isinstance(parameter_and_buffer_dicts, Sequence):
        if not all(isinstance(d, dict) for d in parameter_and_buffer_dicts):
            raise ValueError(
                "Expected all elements of parameter_and_buffer_dicts to be dictionaries"
            )
        counts: dict = {}
        for d in parameter_and_buffer_dicts:
            for k in d:
                counts[k] = counts.get(k, 0) + 1
        repeated = [k for k, n in counts.items() if n > 1]
        if repeated:
            raise ValueError(
                f"{repeated} appeared in multiple dictionaries; behavior of functional call "
                "is ambiguous"
            )
        parameters_and_buffers = {k: v for d in parameter_and_buffer_dicts for k, v in d.items()}
    else:
        raise ValueError(
            "Expected parameter_and_buffer_dicts to be a dict, or a list/tuple of dicts, "
            f"but got {type(parameter_and_buffer_dicts)}"
        )
    return _functional_call(
        module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict
    )


def functional_call(
    module: Module,
    parameters_and_buffers: dict,
    args=None,
    kwargs: dict | None = None,
    *,
    tie_weights: bool = True,
    strict: bool = False,
):
    """torch.nn.utils.stateless.functional_call: torch.func.functional_call
    (`func_functional_call`, `fusegrad.func.functional_call`) with one dict, deprecated
    in torch 2.0 (a FutureWarning)."""
    warnings.warn(
        "`torch.nn.utils.stateless.functional_call` is deprecated as of PyTorch 2.0 and will "
        "be removed in a future version of PyTorch. Please use "
        "`torch.func.functional_call` instead which is a drop-in replacement.",
        FutureWarning,
        stacklevel=2,
    )
    return _functional_call(
        module, parameters_and_buffers, args, kwargs, tie_weights=tie_weights, strict=strict
    )


def _functional_call(module, parameters_and_buffers, args, kwargs, *, tie_weights, strict):
    if kwargs is None:
        kwargs = {}
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    with _reparametrize_module(module, parameters_and_buffers, tie_weights, strict):
        return module(*args, **kwargs)


def _named_tensors(module: Module):
    yield from module.named_parameters(remove_duplicate=False)
    yield from module.named_buffers(remove_duplicate=False)


def _untie_named_tensors_map(module: Module, parameters_and_buffers: dict) -> dict:
    """`parameters_and_buffers` with each given tensor also under the other names of the
    module's tensor it replaces (tied weights), as torch's."""
    names_of: dict = {}  # id(tensor) -> its names
    for name, tensor in dict(_named_tensors(module)).items():
        names_of.setdefault(id(tensor), set()).add(name)
    tied = {n: names for names in names_of.values() if len(names) > 1 for n in names}
    given = [name for name in parameters_and_buffers if name in tied]
    for name in given:
        together = sorted(tied[name] & set(given))
        if len(together) > 1 and len({id(parameters_and_buffers[n]) for n in together}) != 1:
            raise ValueError(
                f"functional_call got multiple values for keys {sorted(tied[name])}, "
                "which are tied. Consider using tie_weights=False"
            )
    untied = dict(parameters_and_buffers)
    for name in given:
        for tied_name in tied[name]:
            untied[tied_name] = parameters_and_buffers[name]
    return untied


def _submodule(module: Module, path: str) -> Module:
    for attr in path.split(".") if path else []:
        try:
            child = getattr(module, attr)
        except AttributeError as e:
            raise AttributeError(f"{type(module).__name__} has no attribute `{attr}`") from e
        if not isinstance(child, Module):
            raise TypeError(f"submodule `{path}`: {child} is not an instance of torch.nn.Module")
        module = child
    return module


def _swap_tensor(module: Module, name: str, tensor):
    """Put `tensor` (or `_MISSING`: take it away) at `module.<name>`; the one there before."""
    if tensor is not _MISSING and tensor is not None and not isinstance(tensor, Tensor):
        raise TypeError(f"{tensor} is not an instance of torch.Tensor")
    for store in (module._parameters, module._buffers):
        if name in store:
            orig = store[name]
            if tensor is _MISSING:
                del store[name]
            else:
                store[name] = tensor
            return orig
    orig = getattr(module, name, _MISSING)
    if orig is not _MISSING and orig is not None and not isinstance(orig, Tensor):
        raise TypeError(f"attribute `{name}`: {orig} is not an instance of torch.Tensor")
    if tensor is not _MISSING:
        setattr(module, name, tensor)
    elif hasattr(module, name):
        delattr(module, name)
    return orig


def _swap_all(module: Module, named: dict) -> dict:
    """Swap every dotted name's tensor in; the ones there before (all swapped back where
    one swap fails)."""
    originals: dict = {}
    try:
        for name, tensor in named.items():
            path, _, attr = name.rpartition(".")
            originals[name] = _swap_tensor(_submodule(module, path), attr, tensor)
    except Exception:
        _swap_back(module, originals)
        raise
    return originals


def _swap_back(module: Module, originals: dict) -> dict:
    current = {}
    for name, tensor in originals.items():
        path, _, attr = name.rpartition(".")
        current[name] = _swap_tensor(_submodule(module, path), attr, tensor)
    return current


@contextlib.contextmanager
def _reparametrize_module(module: Module, parameters_and_buffers: dict, tie_weights, strict):
    named = (
        _untie_named_tensors_map(module, parameters_and_buffers)
        if tie_weights
        else parameters_and_buffers
    )
    if strict:
        valid = {name for name, _ in _named_tensors(module)}
        missing, unexpected = sorted(valid - set(named)), sorted(set(named) - valid)
        errors = []
        if unexpected:
            errors.append(f"Unexpected key(s): {', '.join(map(repr, unexpected))}.")
        if missing:
            errors.append(f"Missing key(s): {', '.join(map(repr, missing))}.")
        if errors:
            raise RuntimeError(
                f"Error(s) in reparametrizing for {type(module).__name__}:\n\t"
                + "\n\t".join(errors)
            )
    originals: dict = {}
    try:
        originals = _swap_all(module, named)
        yield
    finally:
        now = _swap_back(module, originals)
        parameters_and_buffers.update(
            {k: v for k, v in now.items() if k in parameters_and_buffers and v is not _MISSING}
        )
