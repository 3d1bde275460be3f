"""`Optimizer`, the base class of fusegrad.optim's optimizers: parameter groups, state,
and the step that builds every update as graph and realizes it at once (see
nn/optim.py for the optimizers and the design).

>>> import fusegrad as fg
>>> from fusegrad.nn.optimizer import Optimizer
>>> from fusegrad.optim import SGD
>>> isinstance(SGD([fg.zeros(2, requires_grad=True)], lr=0.1), Optimizer)
True
"""

from __future__ import annotations

import functools
from collections import defaultdict

import numpy as np

from ..nnapi import (
    StepCache,
    Tensor,
    at_callers_site,
    enable_grad,
    from_numpy,
    guard,
    jit_recording,
    no_grad,
    on_replay,
    shared_optimizer_step,
    take_pending_outputs,
    track,
    zeros_like,
)


def zeros_state(p: Tensor) -> Tensor:
    """A realized zero tensor shaped, typed and placed as `p`: a state tensor's start."""
    return from_numpy(np.zeros(p.shape, dtype=p.dtype.np), device=p.device)


class Optimizer:
    """Base class: parameter groups, per-parameter state, zero_grad and the fused step.

    A subclass creates its state in `_init_state`, lists each step's scalars
    in `_group_scalars` and `_param_scalars` (host floats, which reach the
    graph as realized 0-d tensors) and builds the update from them in `_update`.
    """

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self._slots: dict = {}  # the step's scalars as 0-d tensors (see _write_scalars)
        self._steps = StepCache()  # steps seen before run without building graphs
        self._step_count = 0  # step() calls so far (a scheduler warns if it comes first)
        self.state: defaultdict = defaultdict(dict)  # keyed by the parameter (hashed by identity)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors "
                "or dicts, but got a Tensor"
            )
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, param_group: dict) -> None:
        group = dict(param_group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if id(p) in seen:
                raise ValueError("some parameters appear in more than one parameter group")
            seen.add(id(p))
        for name, default in self.defaults.items():
            group.setdefault(name, default)
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (or set it to zeros with set_to_none=False)."""
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad = None if set_to_none else zeros_like(p)

    # ---------------------------------------------------------------- the fused step
    def step(self, closure=None, *, with_outputs=()):
        """Update every parameter that has a gradient; realize it all in one schedule.

        The schedule also computes the tensors `backward()` was called on and any
        in `with_outputs` (say, the batch's predictions), so reading them after
        the step costs nothing: the forward pass runs once.
        """
        self._step_count += 1
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        pending = take_pending_outputs()
        active = [(g, p) for g in self.param_groups for p in g["params"] if p.grad is not None]
        for group, p in active:
            if not self.state[p]:
                self._init_state(p, self.state[p], group)
        scalars = self._write_scalars(active)
        shape = self._graph_options()
        if jit_recording():  # (the hooks' arguments cost a plain step for nothing)
            on_replay(functools.partial(self._write_scalars, active))
            track(
                [p for _, p in active]
                + [t for _, p in active for t in self.state[p].values() if isinstance(t, Tensor)]
            )
            guard(lambda: self._graph_options() == shape)

        def build():
            outputs = []
            with no_grad(), at_callers_site(f"{type(self).__name__.lower()} update", "optimizer"):
                for group, p in active:
                    state = self.state[p]
                    self._update(p, p.grad, group, state, scalars[id(p)])
                    outputs.append(p)
                    outputs.extend(t for t in state.values() if isinstance(t, Tensor))
            return outputs

        extra = [t for t in with_outputs if not t._has_value()] if with_outputs else []
        params = [p for _, p in active]
        state = self.state
        states = [[t for t in state[p].values() if isinstance(t, Tensor)] for p in params]
        opt_key = (type(self), shape, tuple(map(id, params)))
        with shared_optimizer_step(params):  # (parameters in shared memory: Hogwild)
            self._steps.step(
                opt_key, params, states, [scalars[id(p)] for p in params], pending, extra, build
            )
        return loss

    def _write_scalars(self, active: list) -> dict[int, list[Tensor]]:
        """Compute this step's scalars on the host and write them into their 0-d tensors.

        Each group (per dtype) and each parameter keeps the same tensors from
        step to step; a step writes new values into their buffers. The graph
        reads them as data, so a new learning rate or Adam's next bias
        correction changes no graph structure and nothing recompiles; and
        `fusegrad.jit` replays a step by calling this function alone.
        """
        out, shared, slots, state = {}, {}, self._slots, self.state
        for group, p in active:
            key = (id(group), p.dtype)
            held = shared.get(key)
            if held is None:  # once per group and dtype, not per parameter
                held = shared[key] = _scalar_slots(slots, key, self._group_scalars(group), p)
            own = _scalar_slots(slots, id(p), self._param_scalars(group, state[p]), p)
            out[id(p)] = held + own
        return out

    def _graph_options(self) -> tuple:
        """What in the groups decides the update's graph (not its scalars): the parameters,
        and options that add or remove terms. A jitted step is recorded for these."""
        return tuple(
            (tuple(map(id, g["params"])),)
            + tuple((k, g[k] if isinstance(g[k], bool) else g[k] != 0) for k in self._switches)
            for g in self.param_groups
        )

    _switches: tuple[str, ...] = ()  # options whose being zero / False changes the graph

    def _init_state(self, p: Tensor, state: dict, group: dict) -> None:
        """Create a parameter's state tensors (realized zeros) before its first update."""
        raise NotImplementedError

    def _group_scalars(self, group: dict) -> list[float]:
        """This step's scalars shared by the group's parameters (the lr, ...), as host floats."""
        raise NotImplementedError

    def _param_scalars(self, group: dict, state: dict) -> list[float]:
        """This step's scalars of one parameter (bias corrections, ...); advances its step."""
        raise NotImplementedError

    def _update(self, p: Tensor, grad: Tensor, group: dict, state: dict, h: list) -> None:
        """Build the update from `h` (group scalars, then the parameter's) and assign_ it."""
        raise NotImplementedError

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict:
        """{'state': {index: {name: value}}, 'param_groups': [...]} with parameters as indices."""
        index = {}
        groups = []
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = []
            for p in group["params"]:
                index[id(p)] = len(index)
                packed["params"].append(index[id(p)])
            groups.append(packed)
        state = {}
        for p, s in self.state.items():
            if id(p) in index:
                state[index[id(p)]] = {
                    k: (v.detach() if isinstance(v, Tensor) else v) for k, v in s.items()
                }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        params = []
        for mine, theirs in zip(self.param_groups, groups):
            if len(mine["params"]) != len(theirs["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group "
                    "that doesn't match the size of optimizer's group"
                )
            mine.update({k: v for k, v in theirs.items() if k != "params"})
            params.extend(zip(theirs["params"], mine["params"]))
        self.state = defaultdict(dict)
        for idx, p in params:
            if idx not in state_dict["state"]:
                continue
            entry = {}
            for k, v in state_dict["state"][idx].items():
                if isinstance(v, (Tensor, np.ndarray)):
                    v = from_numpy(np.array(v, dtype=p.dtype.np), device=p.device)
                entry[k] = v
            self.state[p] = entry

    # ---------------------------------------------------------------- copy and pickle
    def __getstate__(self) -> dict:
        """Everything but the compiled steps and the scalar slots, which are keyed by the
        ids of these parameters: a copy (`copy.deepcopy`, pickle) starts them afresh.
        Its parameters are the copied ones when the model is copied in the same call,
        `copy.deepcopy((model, opt))`, as in torch."""
        state = dict(self.__dict__)
        del state["_steps"], state["_slots"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._steps, self._slots = StepCache(), {}

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for k in sorted(group):
                if k != "params":
                    lines.append(f"    {k}: {group[k]}")
        return "\n".join(lines) + "\n)"


def _scalar_slots(slots: dict, key, values: list[float], like: Tensor) -> list[Tensor]:
    """`values` written into the realized 0-d tensors kept under `key` (made on first use)."""
    entry = slots.get(key)
    if entry is None or len(entry[0]) != len(values):
        held = [from_numpy(np.zeros((), like.dtype.np), device=like.device) for _ in values]
        entry = slots[key] = (held, [None] * len(values))
    held, written = entry
    for k, v in enumerate(values):
        # the very float object written last time is that value still (a learning rate
        # left alone): no write. Anything else is written, equal or not (-0.0, NaN, a
        # tensor learning rate changed in place).
        if v is not written[k] or type(v) is not float:
            # (realized 0-d buffer tensors, made above and never reassigned: no
            # `_write_scalar` check, a step writes dozens)
            held[k].node.arg.write_scalar(v)
            written[k] = v
    return held
