"""`Module` and `Parameter`: PyTorch's model-building API over lazy fusegrad tensors.

A module is a tree: each attribute that is a `Parameter`, a `Module` or a
registered buffer is recorded, so `parameters()`, `state_dict()` and `train()`
walk the whole tree. A module's `forward` only builds graph; nothing runs until
a value is read or an optimizer step realizes it.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> class Net(nn.Module):
...     def __init__(self):
...         super().__init__()
...         self.fc = nn.Linear(2, 3)
...         self.scale = nn.Parameter(fg.ones(3))
...     def forward(self, x):
...         return self.fc(x) * self.scale
>>> [name for name, _ in Net().named_parameters()]
['scale', 'fc.weight', 'fc.bias']
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections import OrderedDict, namedtuple
from collections.abc import Callable, Iterator

import numpy as np

from ..nnapi import (
    Tensor,
    computed_now,
    default_float,
    empty,
    from_numpy,
    host_copy,
    module_scope,
    note_module,
    note_parameter,
    note_write,
    rebuild_tensor,
    tensor,
    to_arguments,
    to_dtype,
    value_copy,
    zeros,
    zeros_like,
)
from ..nnapi import realize as _realize
from . import hooks as backward_hooks
from .npz import load, save

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


class Parameter(Tensor):
    """A tensor that is a module's learnable state: a leaf that requires grad.

    `Parameter(data)` takes a tensor (or anything `fusegrad.tensor` accepts),
    computes its value and makes it a leaf of its own, so `backward()` fills
    its `.grad` and optimizers update it in place with `assign_`.

    >>> import fusegrad as fg
    >>> p = Parameter(fg.zeros(2))
    >>> p.requires_grad, p.is_leaf
    (True, True)
    """

    __slots__ = ()

    def __init__(self, data=None, requires_grad: bool = True):
        if data is None:
            data = empty(0)
        t = data.detach() if isinstance(data, Tensor) else tensor(data)
        _realize(t)  # a parameter is always data, never a pending graph
        super().__init__(t.node, requires_grad=False, leaf=True)
        note_parameter(self)
        if requires_grad:
            self.requires_grad_()

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo):
        """A Parameter of the same class with its own copy of the value and the same
        requires_grad; as torch's, its `.grad` is not copied (a plain tensor's is)."""
        if id(self) in memo:
            return memo[id(self)]
        out = type(self)(value_copy(self), self.requires_grad)
        memo[id(self)] = out
        return out

    def __reduce_ex__(self, protocol):
        """Pickled as its value (a numpy array), class and requires_grad, as torch's."""
        args = (type(self), host_copy(self), self.dtype.name, str(self.device))
        return (_rebuild_parameter, args + (self.requires_grad,))


def _rebuild_parameter(cls, array, dtype: str, device: str, requires_grad: bool) -> Parameter:
    """A Parameter from what `Parameter.__reduce_ex__` stored (pickle calls this)."""
    data = rebuild_tensor(Tensor, array, dtype, device, False, None, None)
    return cls(data, requires_grad)


class Buffer(Tensor):
    """A tensor that is a module's state but not a parameter (as torch.nn.Buffer, torch
    2.5+): assigned to a module's attribute, it is registered as a buffer, in
    `state_dict()` unless `persistent=False`.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> class Counter(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.steps = nn.Buffer(fg.zeros(()))
    ...         self.scratch = nn.Buffer(fg.zeros(3), persistent=False)
    >>> [n for n, _ in Counter().named_buffers()], list(Counter().state_dict())
    (['steps', 'scratch'], ['steps'])

    `data` is detached and keeps its `requires_grad`, as torch's. Where fusegrad differs:
    torch's Buffer is a plain `torch.Tensor` marked as a buffer, fusegrad's a Tensor
    subclass (`isinstance(b, nn.Buffer)` is True in both; `type(b)` differs), and it stays
    one through `module.to(...)`, which moves tensors in place here.
    """

    def __init__(self, data=None, *, persistent: bool = True):
        if data is None:
            data = empty(0)
        if not isinstance(data, Tensor):
            raise AttributeError(
                f"'{type(data).__name__}' object has no attribute 'detach' "
                "(nn.Buffer takes a tensor)"
            )
        super().__init__(data.detach().node, requires_grad=False, leaf=True)
        self.persistent = persistent
        if data.requires_grad:
            self.requires_grad_()


def placeholder_parameter(*shape: int, dtype=None) -> Parameter:
    """A parameter of this shape whose values a layer's `reset_parameters` sets next:
    zeros from the host, so no kernel runs for values that are overwritten at once.

    >>> placeholder_parameter(2, 3).shape
    (2, 3)
    """
    dt = to_dtype(dtype or default_float())  # torch.set_default_dtype
    return Parameter(from_numpy(np.zeros(shape, dtype=dt.np)))


def place(module: Module, device=None, dtype=None) -> None:
    """torch's factory keywords of a layer, `device=` and `dtype=`: move the new layer's
    parameters and buffers to `device` and cast the floating ones to `dtype` (nothing
    when both are None). A bad device or dtype raises here, at the layer's line.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> nn.LayerNorm(3, dtype=fg.float64).weight.dtype
    fusegrad.float64
    """
    if device is not None or dtype is not None:
        module.to(device=device, dtype=dtype)


class RemovableHandle:
    """What `register_forward_hook` returns: `remove()` takes the hook off (also on leaving
    a `with` block)."""

    _next_id = 0

    def __init__(self, hooks: dict):
        self.hooks, self.id = hooks, RemovableHandle._next_id
        RemovableHandle._next_id += 1

    def remove(self) -> None:
        self.hooks.pop(self.id, None)

    def __enter__(self) -> RemovableHandle:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


def _is_parameter(value) -> bool:
    return isinstance(value, Parameter)


class Module:
    """Base class of every layer and model; subclasses define `forward`.

    Assigning a `Parameter` or a `Module` to an attribute registers it (in
    that order of assignment), exactly as in PyTorch.
    """

    training: bool

    def __init__(self) -> None:
        note_module(self)
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())

    def __setstate__(self, state: dict) -> None:
        """Restore a deep-copied or unpickled module (its tensors copy themselves)."""
        self.__dict__.update(state)
        note_module(self)

    # ---------------------------------------------------------------- attribute registry
    def __setattr__(self, name: str, value) -> None:
        params = self.__dict__.get("_parameters")
        if _is_parameter(value) or isinstance(value, Module):
            if params is None:
                raise AttributeError(
                    f"cannot assign {type(value).__name__} '{name}' before Module.__init__() call"
                )
            if _is_parameter(value):
                self._refuse_class_attribute(name)
            store = self._parameters if _is_parameter(value) else self._modules
            # a name re-assigned in its own store keeps its place, as in torch: the order
            # of parameters() and state_dict() does not change
            self._forget(name, keep=store)
            store[name] = value
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                    "(fusegrad.nn.Parameter or None expected)"
                )
            params[name] = None
        elif params is not None and name in self._modules:
            if value is not None:
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as child module '{name}' "
                    "(fusegrad.nn.Module or None expected)"
                )
            self._modules[name] = None
        elif isinstance(value, Buffer):
            self._assign_buffer(name, value)
        elif params is not None and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(
                    f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                    "(fusegrad.Tensor or None expected)"
                )
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)
        if isinstance(value, Tensor):
            note_write(self, name)  # (fusegrad.jit: an attribute this thread assigns)

    def _assign_buffer(self, name: str, value: Buffer) -> None:
        """`self.name = nn.Buffer(t)`: registered as a buffer, persistent as the Buffer
        says, as torch's (which refuses a name the module has as a plain attribute)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        if name not in self._buffers and hasattr(self, name):
            raise KeyError(f"attribute '{name}' already exists")
        self.register_buffer(name, value, value.persistent)

    def __getattr__(self, name: str):
        # only called when normal lookup fails: the registered attributes live in these dicts
        for store in ("_parameters", "_buffers", "_modules"):
            entries = self.__dict__.get(store)
            if entries is not None and name in entries:
                return entries[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        if any(name in s for s in (self._parameters, self._buffers, self._modules)):
            self._forget(name)
        else:  # a plain attribute (AttributeError, as torch, where there is none)
            object.__delattr__(self, name)

    def _forget(self, name: str, keep: dict | None = None) -> bool:
        found = False
        for store in (self._parameters, self._buffers, self._modules):
            if name in store and store is not keep:
                del store[name]
                found = True
        self._non_persistent.discard(name)
        self.__dict__.pop(name, None)
        return found

    def _refuse_class_attribute(self, name: str) -> None:
        """A parameter may not take the name of a property of the module's class (a
        parametrized tensor's, nn/parametrize.py): torch's KeyError."""
        if name not in self._parameters and isinstance(getattr(type(self), name, None), property):
            raise KeyError(f"attribute '{name}' already exists")

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is not None and not _is_parameter(param):
            raise TypeError(f"cannot assign '{type(param).__name__}' as parameter '{name}'")
        self._refuse_class_attribute(name)
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Non-learnable state that belongs in `state_dict()` (when persistent).

        A buffer given as a graph still to compute (a positional encoding's table, built by
        writes into `zeros`) that needs no gradient is computed here, as torch's eager
        construction would (`computed_now`): the first step then reads it from memory, as
        every later step does, and its plan is theirs."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' as buffer '{name}'")
        if tensor is not None:
            computed_now(tensor)
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: Module | None) -> None:
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target: str) -> Module:
        mod = self
        for part in target.split(".") if target else []:
            if part not in mod._modules:
                raise AttributeError(f"{type(mod).__name__} has no submodule '{part}'")
            mod = mod._modules[part]
        return mod

    # ---------------------------------------------------------------- walking the tree
    def named_modules(
        self, memo=None, prefix: str = "", remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Module]]:
        """Every module of the tree, this one first, each once (every time it is reached,
        with `remove_duplicate=False`), with its dotted name."""
        memo = set() if memo is None else memo
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(
                    memo, f"{prefix}.{name}" if prefix else name, remove_duplicate
                )

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, Module]]:
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, store: str, prefix: str, recurse: bool, remove_duplicate: bool):
        seen = set()  # ids: a shared (tied) tensor is reported once, unless asked otherwise
        mods = (
            self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
            if recurse
            else [(prefix, self)]
        )
        for mod_prefix, mod in mods:
            for name, value in getattr(mod, store).items():
                if value is None or (remove_duplicate and id(value) in seen):
                    continue
                seen.add(id(value))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), value

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, Parameter]]:
        """(dotted name, parameter) pairs: this module's own first, then each child's; a
        tied parameter under each of its names with `remove_duplicate=False`."""
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn: Callable[[Module], None]) -> Module:
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------- modes and grads
    def train(self, mode: bool = True) -> Module:
        """Set training mode on this module and every descendant (Dropout reads it)."""
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> Module:
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters():
            if p.grad is None:
                continue
            p.grad = None if set_to_none else zeros_like(p)

    # ---------------------------------------------------------------- devices
    def to(self, *args, device=None, dtype=None, non_blocking: bool = False) -> Module:
        """Move every parameter and buffer to `device` and/or cast the floating ones to
        `dtype`, in place, as torch.nn.Module.to: `model.to("cuda")`,
        `model.to(fg.float64)`, `model.to("cuda", fg.float64)`, `model.to(tensor)`.

        The parameters stay the same objects (an optimizer built before or after sees
        them); their gradients move with them.
        """
        if len(args) > 2:
            zeros(()).to(*args)  # the error Tensor.to gives
        device, dtype = to_arguments(args, device, dtype, Tensor)
        zeros(()).to(device=device, dtype=dtype)  # a bad device or dtype fails here

        def moved(t: Tensor) -> Tensor:
            cast = dtype if dtype is not None and t.dtype.is_float else None
            return t.detach().to(device=device, dtype=cast)

        for m in self.modules():
            for store in (m._parameters, m._buffers):
                for t in store.values():
                    if t is None:
                        continue
                    t.data = moved(t)
                    if t.grad is not None:
                        t.grad = moved(t.grad)
        return self

    def share_memory(self) -> Module:
        """Every parameter and buffer moved into memory shared with the processes this one
        forks (`Tensor.share_memory_`), as torch's: Hogwild training, each process's
        optimizer steps landing in the one copy. Returns the module."""
        for t in (*self.parameters(), *self.buffers()):
            t.share_memory_()
        return self

    def cuda(self, device=None) -> Module:
        """`to("cuda")` (or `to(f"cuda:{device}")`)."""
        return self.to(device="cuda" if device is None else device)

    def cpu(self) -> Module:
        """`to("cpu")`."""
        return self.to(device="cpu")

    def double(self) -> Module:
        """Cast the floating parameters and buffers to float64 (`to(fg.float64)`)."""
        return self.to(dtype="float64")

    def float(self) -> Module:
        """Cast the floating parameters and buffers to float32 (`to(fg.float32)`)."""
        return self.to(dtype="float32")

    def half(self) -> Module:
        """Cast the floating parameters and buffers to float16 (`to(fg.float16)`)."""
        return self.to(dtype="float16")

    def bfloat16(self) -> Module:
        """Cast the floating parameters and buffers to bfloat16 (`to(fg.bfloat16)`)."""
        return self.to(dtype="bfloat16")

    # ---------------------------------------------------------------- forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing "forward"')

    def __call__(self, *args, **kwargs):
        # the ops the forward makes carry this module's path (`fg.profile().by_module()`)
        outer = module_scope.top
        module_scope.top = _scope_under(self, outer)
        try:
            if not self.__dict__.get("_hooks"):
                return self.forward(*args, **kwargs)
            hooks = list(self.__dict__["_hooks"].values())
            for kind, hook, with_kwargs, _ in hooks:
                if kind != "pre":
                    continue
                if with_kwargs:
                    changed = hook(self, args, kwargs)
                    if changed is not None:
                        if not (isinstance(changed, tuple) and len(changed) == 2):
                            raise RuntimeError(
                                "forward pre-hook must return None or a tuple of (new_args, "
                                f"new_kwargs), but got {changed}."
                            )
                        args, kwargs = changed
                else:
                    changed = hook(self, args)
                    if changed is not None:
                        args = changed if isinstance(changed, tuple) else (changed,)
            backward = [(kind, hook) for kind, hook, _, _ in hooks if kind.startswith("backward")]
            if backward:
                args, wrap_outputs = backward_hooks.wrap_call(self, backward, args)
            try:
                out = self.forward(*args, **kwargs)
            except Exception:
                _call_always(self, hooks, args, kwargs)
                raise
            for kind, hook, with_kwargs, _ in hooks:
                if kind == "post":
                    changed = (
                        hook(self, args, kwargs, out) if with_kwargs else hook(self, args, out)
                    )
                    if changed is not None:
                        out = changed
            return wrap_outputs(out) if backward else out
        finally:
            module_scope.top = outer

    def register_forward_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False, always_call: bool = False
    ) -> RemovableHandle:
        """Call `hook(module, args, output)` after each forward (a non-None return replaces
        the output), as torch's; with `with_kwargs`, `hook(module, args, kwargs, output)`;
        `prepend` runs it before the hooks already registered; `always_call` runs it (with
        output None) even when forward raises; `handle.remove()` takes it off. (Under
        `fg.jit` it runs when the step is recorded, not on replays.)"""
        return self._add_hook("post", hook, prepend, with_kwargs, always_call)

    def register_forward_pre_hook(
        self, hook, *, prepend: bool = False, with_kwargs: bool = False
    ) -> RemovableHandle:
        """Call `hook(module, args)` before each forward (a non-None return replaces the
        arguments), as torch's; with `with_kwargs`, `hook(module, args, kwargs)` returning
        None or `(new_args, new_kwargs)`."""
        return self._add_hook("pre", hook, prepend, with_kwargs)

    def register_full_backward_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Call `hook(module, grad_input, grad_output)` when the gradients with respect to
        this module's inputs are computed, as torch's: one entry per positional argument
        (None for those that are not tensors requiring grad) and per output tensor. A
        tuple it returns replaces grad_input. See `nn/hooks.py`."""
        return self._add_hook("backward", hook, prepend)

    def register_full_backward_pre_hook(self, hook, prepend: bool = False) -> RemovableHandle:
        """Call `hook(module, grad_output)` when the gradients with respect to this module's
        outputs are computed, before they flow on; a tuple it returns replaces them."""
        return self._add_hook("backward_pre", hook, prepend)

    def _add_hook(
        self,
        kind: str,
        hook,
        prepend: bool = False,
        with_kwargs: bool = False,
        always_call: bool = False,
    ) -> RemovableHandle:
        hooks = self.__dict__.setdefault("_hooks", OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = (kind, hook, with_kwargs, always_call)
        if prepend:
            hooks.move_to_end(handle.id, last=False)
        return handle

    # ---------------------------------------------------------------- state
    def state_dict(
        self, destination=None, prefix: str = "", keep_vars: bool = False
    ) -> OrderedDict:
        """Each parameter and persistent buffer by dotted name: without `keep_vars`, as
        torch's detached tensors sharing the module's memory, each is a view of its
        tensor's value (`t.data`): it reads the module's current values, and a write into
        it lands in the module (`sd["weight"].copy_(w)`, `sd["bias"].zero_()`). Keep a
        snapshot with `copy.deepcopy(model.state_dict())`, as in torch."""
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.data
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.data
        for name, child in self._modules.items():
            if child is not None:
                child.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def load_state_dict(self, state_dict, strict: bool = True) -> IncompatibleKeys:
        """Copy values (tensors or numpy arrays) into the parameters and buffers of the same name.

        With `strict`, missing or unexpected keys raise; a shape mismatch always raises.
        """
        state_dict, missing, unexpected, errors = _run_load_pre_hooks(self, state_dict, strict)
        for name, m in self.named_modules():  # lazy layers take the checkpoint's shapes
            take_shapes = getattr(m, "_take_shapes", None)
            if take_shapes is not None:
                take_shapes(state_dict, f"{name}." if name else "")
        own = self.state_dict(keep_vars=True)
        missing += [k for k in own if k not in state_dict and k not in missing]
        unexpected += [k for k in state_dict if k not in own and k not in unexpected]
        if strict and (missing or unexpected):
            if unexpected:
                errors.append(
                    "Unexpected key(s) in state_dict: " + ", ".join(map(repr, unexpected))
                )
            if missing:
                errors.append("Missing key(s) in state_dict: " + ", ".join(map(repr, missing)))
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            shape = tuple(value.shape)
            if shape != target.shape:
                errors.append(
                    f"size mismatch for {key}: copying a param with shape {shape} from "
                    f"checkpoint, the shape in current model is {target.shape}."
                )
                continue
            data = value.detach() if isinstance(value, Tensor) else None
            if data is None:
                data = from_numpy(np.asarray(value, dtype=target.dtype.np))
            data = data.cast(target.dtype)
            _realize(data)
            target.assign_(data)
        if errors:
            raise RuntimeError(
                f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                + "\n\t".join(errors)
            )
        return IncompatibleKeys(missing, unexpected)

    def register_load_state_dict_pre_hook(self, hook) -> RemovableHandle:
        """Call `hook(module, state_dict, prefix, local_metadata, strict, missing_keys,
        unexpected_keys, error_msgs)` before `load_state_dict` reads the entries of this
        module (`prefix`: its dotted name and a dot), as torch's: it may rename or replace
        entries of `state_dict` (a copy of the caller's) and append to the three lists.
        fusegrad keeps no metadata: `local_metadata` is an empty dict."""
        return self._register_load_state_dict_pre_hook(hook, with_module=True)

    def _register_load_state_dict_pre_hook(self, hook, with_module: bool = False):
        """torch's private form: `hook(state_dict, prefix, ...)`, the module first only
        `with_module` (nn.utils.parametrizations.weight_norm's reader of old checkpoints)."""
        hooks = self.__dict__.setdefault("_load_state_dict_pre_hooks", OrderedDict())
        handle = RemovableHandle(hooks)
        hooks[handle.id] = (hook, with_module)
        return handle

    def save(self, path: str | os.PathLike) -> None:
        """Write `state_dict()` to an `.npz` file, one array per dotted name, replacing
        the file at once (a save that fails leaves the old file whole)."""
        save(self.state_dict(), path)

    def load(self, path: str | os.PathLike, strict: bool = True) -> IncompatibleKeys:
        """Read an `.npz` file written by `save` into this module. Each entry is sized by
        this module's array of its name before it is decompressed, so a zip bomb raises
        `fg.SerializationError`; an entry of no name here is never decompressed."""
        return self.load_state_dict(load(path, like=self.state_dict()), strict=strict)

    # ---------------------------------------------------------------- printing
    def extra_repr(self) -> str:
        """The text inside this module's parentheses, e.g. `in_features=2, out_features=3`."""
        return ""

    def __repr__(self) -> str:
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [
            f"({name}): " + repr(child).replace("\n", "\n  ")
            for name, child in self._modules.items()
        ]
        if len(extra_lines) == 1 and not child_lines:
            return f"{type(self).__name__}({extra_lines[0]})"
        lines = extra_lines + child_lines
        body = "\n  " + "\n  ".join(lines) + "\n" if lines else ""
        return f"{type(self).__name__}({body})"


def _run_load_pre_hooks(root: Module, state_dict, strict: bool) -> tuple:
    """`(state_dict, missing, unexpected, errors)` after each module's load_state_dict
    pre-hooks ran, parents first, on a copy of `state_dict` (the caller's, untouched where
    no module has one)."""
    missing: list = []
    unexpected: list = []
    errors: list = []
    copied = False
    for name, m in root.named_modules():
        hooks = m.__dict__.get("_load_state_dict_pre_hooks")
        if not hooks:
            continue
        if not copied:
            state_dict, copied = OrderedDict(state_dict), True
        prefix = f"{name}." if name else ""
        for hook, with_module in list(hooks.values()):
            args = (state_dict, prefix, {}, strict, missing, unexpected, errors)
            hook(m, *args) if with_module else hook(*args)
    return state_dict, missing, unexpected, errors


def _call_always(module: Module, hooks: list, args: tuple, kwargs: dict) -> None:
    """The forward hooks registered with always_call, after forward raised (as torch: with
    output None, an error of theirs only warned about, the forward's error raised)."""
    for kind, hook, with_kwargs, always_call in hooks:
        if kind == "post" and always_call:
            try:
                hook(module, args, kwargs, None) if with_kwargs else hook(module, args, None)
            except Exception:
                warnings.warn(
                    "forward hook with always_call=True raised an exception that was "
                    "silenced as another error was raised in forward",
                    stacklevel=3,
                )


# module -> (the scope it ran under, the scope it runs in): a module called under the same
# parent as last time (every call but the first) finds its path in one lookup
_scopes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _scope_under(module: Module, outer: tuple | None) -> tuple:
    """`(path, weak reference)` of `module` running inside the scope `outer` (None: at the
    top): its path is `outer`'s path and the name the parent gives it as a child
    (`ResNet.layer1.0`), or its class name at the top or where the parent does not hold
    it as a child."""
    known = _scopes.get(module)
    if known is not None and known[0] is outer:
        return known[1]
    name = type(module).__name__
    if outer is not None:
        parent = outer[1]()
        children = parent.__dict__.get("_modules", {}) if parent is not None else {}
        name = next((k for k, m in children.items() if m is module), name)
        name = f"{outer[0]}.{name}"
    scope = (name, weakref.ref(module))
    _scopes[module] = (outer, scope)
    return scope
