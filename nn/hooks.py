"""A module's backward hooks (`register_full_backward_hook`, `..._pre_hook`), as torch's.

A call to a module with backward hooks passes its tensor arguments, and then its
outputs, through `tensor_hooks.hooked_together`: each group becomes one node whose
gradient runs a function while the backward graph is built. The outputs' node is
reached first (it is downstream): its function runs the backward pre-hooks and keeps
grad_output; the inputs' node runs the full backward hooks with grad_input and that
grad_output. Only the tensors the hooks return enter the graph, so what they compute
fuses with the rest of the backward pass.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> lin = nn.Linear(2, 1)
>>> seen = []
>>> h = lin.register_full_backward_hook(lambda m, gi, go: seen.append(go[0].shape))
>>> lin(fg.ones(3, 2, requires_grad=True)).sum().backward()
>>> seen
[(3, 1)]
"""

from __future__ import annotations

from ..nnapi import Tensor, grad_enabled, hooked_together, zeros_like


def wrap_call(module, hooks: list, args: tuple):
    """(args to call forward with, a function that wraps its output) for one call of
    `module`, whose backward hooks are `hooks`: (kind, hook) pairs."""
    full = [hook for kind, hook in hooks if kind == "backward"]
    pre = [hook for kind, hook in hooks if kind == "backward_pre"]
    if not grad_enabled():
        return args, _unchanged
    positions = [
        i
        for i, a in enumerate(args)
        if isinstance(a, Tensor) and a.requires_grad and a.dtype.is_float
    ]
    grad_output: list = [()]
    # the closures below keep counts, not the wrapped tensors: those would keep their
    # own hooked node alive (CUSTOM_VJP is keyed weakly by it)
    n_args = len(args)
    # torch gives the other tensor arguments zeros in grad_input (its hook wraps them all)
    absent = {
        i: zeros_like(a)
        for i, a in enumerate(args)
        if isinstance(a, Tensor) and i not in positions and positions and full
    }

    def run_full(grad_input: tuple):
        changed = None
        for hook in full:
            result = hook(module, grad_input, grad_output[0])
            if result is not None:
                result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
                if len(result) != len(grad_input):
                    raise RuntimeError(
                        "Backward hook returned an invalid number of grad_input, got "
                        f"{len(result)}, but expected {len(grad_input)}"
                    )
                grad_input = changed = result
        return changed

    def on_input_grads(grads: list):
        grad_input = [absent.get(i) for i in range(n_args)]
        for i, g in zip(positions, grads):
            grad_input[i] = g
        changed = run_full(tuple(grad_input))
        if changed is None:
            return None
        return [changed[i] for i in positions]  # a None: no gradient, as torch

    if positions and full:
        wrapped = hooked_together([args[i] for i in positions], on_input_grads)
        args = list(args)
        for i, w in zip(positions, wrapped):
            args[i] = w
        args = tuple(args)

    def wrap_outputs(out):
        outs = (out,) if isinstance(out, Tensor) else out
        if not isinstance(outs, (tuple, list)):
            return out
        idx = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.requires_grad]
        if not idx:
            return out
        n_outs = len(outs)
        like = {k: zeros_like(outs[k]) for k in idx} if pre else {}

        def on_output_grads(grads: list):
            given = [None] * n_outs
            for k, g in zip(idx, grads):
                given[k] = g
            given, changed = tuple(given), False
            for hook in pre:
                result = hook(module, given)
                if result is not None:
                    result = tuple(result) if isinstance(result, (tuple, list)) else (result,)
                    if len(result) != len(given):
                        raise RuntimeError(
                            "Backward pre hook returned an invalid number of grad_output, "
                            f"got {len(result)}, but expected {len(given)}"
                        )
                    given, changed = result, True
            grad_output[0] = given
            if full and not positions:  # no input needs a gradient: torch calls it now
                run_full((None,) * n_args)
            # a None from a pre hook: zeros, as torch's (its input side materializes them)
            return [_or_zeros(given[k], like[k]) for k in idx] if changed else None

        # an output that gets no gradient is None in grad_output, as torch's
        wrapped = hooked_together([outs[k] for k in idx], on_output_grads, materialize=False)
        outs = list(outs)
        for k, w in zip(idx, wrapped):
            outs[k] = w
        return outs[0] if isinstance(out, Tensor) else type(out)(outs)

    return args, wrap_outputs


def _unchanged(out):
    return out


def _or_zeros(g, like: Tensor) -> Tensor:
    return zeros_like(like) if g is None else g
