"""`fusegrad.func`, torch.func's home here: the function transforms `grad`,
`grad_and_value`, `vjp`, `jvp`, `jacrev`, `jacfwd`, `hessian` (func_transforms.py, over
the symbolic autodiff) and `vmap` (func_vmap.py, a loop over the examples), and
`functional_call` (nn/stateless.py), a module called with some of its parameters and
buffers replaced for the call, with `stack_module_state` for ensembles of modules.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> lin = nn.Linear(2, 1, bias=False)
>>> fg.func.functional_call(lin, {"weight": fg.ones(1, 2)}, fg.tensor([[1.0, 2.0]])).item()
3.0
"""

from .errors import fail
from .func_pytree import TransformError
from .func_transforms import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from .func_vmap import vmap
from .movement import stack
from .nn.stateless import func_functional_call as functional_call

__all__ = [
    "functional_call",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jvp",
    "stack_module_state",
    "vjp",
    "vmap",
]


def stack_module_state(models) -> tuple[dict, dict]:
    """torch.func.stack_module_state: the parameters and buffers of modules of one class,
    each stacked along a new first dimension (`(params, buffers)`, dicts by name), for
    `vmap` over `functional_call` (an ensemble run as one model). Stacked parameters are
    new leaves that require grad, as torch's.

    >>> import fusegrad as fg
    >>> from fusegrad import nn
    >>> models = [nn.Linear(3, 2) for _ in range(4)]
    >>> params, buffers = stack_module_state(models)
    >>> params["weight"].shape, params["weight"].requires_grad
    ((4, 2, 3), True)
    """
    models = list(models)
    op = "stack_module_state"
    if not models:
        fail(TransformError, op, "Expected at least one model, got 0.")
    if len({m.training for m in models}) != 1:
        fail(TransformError, op, "Expected all models to have the same training/eval mode.")
    if len({type(m) for m in models}) != 1:
        fail(TransformError, op, "Expected all models to be of the same class.")
    params = _stacked_leaves([dict(m.named_parameters()) for m in models])
    buffers = _stacked_leaves([dict(m.named_buffers()) for m in models])
    return params, buffers


def _stacked_leaves(tables: list[dict]) -> dict:
    out = {}
    for name in tables[0]:
        tensors = [t[name] for t in tables]
        flags = {t.requires_grad for t in tensors}
        if len(flags) != 1:
            fail(
                TransformError,
                "stack_module_state",
                f"Expected {name} from each model to have the same .requires_grad",
            )
        result = stack(tensors)
        out[name] = result.detach().requires_grad_() if flags.pop() else result
    return out
