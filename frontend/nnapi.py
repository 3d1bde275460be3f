"""`fusegrad.nnapi`: everything `fusegrad.nn` takes from the frontend, in one place.

`nn` is built on the frontend as a user's own library would be, with one difference:
a few things it needs are not (yet) public API, such as the jit's hooks that let a
module's parameters and an optimizer's state be recorded and replayed, the fused
`linear` and class cross-entropy reductions, and the step cache of an optimizer.
This module names them. `nn` imports the frontend only from here
(tests/test_layering.py checks it), so what `nn` depends on is this file's list, and
the frontend may move a name between its modules by changing one import line below.

Nothing here is meant for users: the public homes of these names are `fusegrad`,
`fusegrad.extend` and `fusegrad.jit`, where they have them.

>>> from fusegrad.nnapi import Tensor, zeros
>>> zeros(2).tolist()
[0.0, 0.0]
"""

from __future__ import annotations

# the cuda module, for DataParallel's device checks; the distributed package, for
# DistributedDataParallel and DistributedSampler
from . import cuda, distributed

# autocast: nn's ops join torch's policy where they are defined (frontend/autocast_policy.py)
from .autocast import autocast_op

# autograd: the grad mode and the outputs a backward pass left to realize
from .autograd import take_pending_outputs
from .autograd_state import enable_grad, no_grad
from .autograd_state import enabled as grad_enabled

# checkpoints: Module.save replaces its file as fg.save does; Module.load refuses a
# malformed file as fg.load does
from .checkpoint_files import PLAIN_DTYPES, SerializationError, write_atomically

# copies of tensors and their values (Module.to, state dicts, deep copies)
from .copying import host_copy, rebuild_tensor, value_copy

# creation
from .creation import _next_seed as next_seed
from .creation import (
    default_float,
    empty,
    eye,
    from_numpy,
    full,
    host_rng,
    host_table,
    index_arange,
    manual_seed,
    ones,
    ones_like,
    rand,
    randn,
    randperm,
    tensor,
    to_dtype,
    zeros,
    zeros_like,
)

# devices: the arguments of Module.to, parsed as Tensor.to parses them
from .devices import default_name as default_device_name
from .devices import device, set_default_device, to_arguments
from .devices import is_host as is_host_device

# errors, raised at the user's line
from .errors import (
    DeviceError,
    DimError,
    DTypeError,
    DTypeNotImplementedError,
    FusegradError,
    JitError,
    ShapeError,
    at_callers_site,
    checked_dtype,
    fail,
    one_site,
)

# ops beyond Tensor's methods (see fusegrad.extend)
from .extend import (
    custom_gradient,
    gather_rows,
    gradient_wanted,
    host_data,
    materialize,
    reads_out_of_order,
    reads_stored_values,
)

# the values of a small index tensor, read on the host (fold's checks)
from .indexing import host_values

# the layout a macro's expansion is built for (ir/layout.py): a convolution's padded copies
# and blocked sums are the CPU's choices, made when a plan is compiled
from .ir.layout import current as expansion_layout

# the jit's hooks: what a module or an optimizer tells a recording
from .jit import guard, note_module, note_parameter, note_write, on_replay, track
from .jit import recording as jit_recording

# linear algebra of nn.utils.parametrizations.orthogonal (fusegrad.linalg is a module, which
# nn does not take from fusegrad's public names)
from .linalg import qr as linalg_qr
from .linalg import solve as linalg_solve

# a composite op's result with its own gradient rule (a hand-written derivative)
from .mathops import _with_grad as with_grad

# the views that convolution and pooling read
from .movement import cat, sliding_windows, stack

# the cache size the lowering's tiles assume: what a convolution's gradient keeps in cache;
# the lane steps its vector loads read without a gather: strided windows read in place
from .pipeline.tiling import PANEL_CACHE_BYTES, SHUFFLED_LANE_STEPS, rows_merge

# fused ops: one macro node for a linear layer, a layer norm and a classifier's loss
from .reduce import (
    class_cross_entropy,
    fits_class_cross_entropy,
    fused_layer_norm,
    shared_weight_linear,
)
from .reduce import linear as fused_linear

# the module whose forward is running: Module.__call__ names it on the sites of its ops
from .runtime.attribution import module_scope

# parameters in memory shared between processes (Hogwild): an optimizer step's change
# added to it
from .shared_memory import optimizer_step as shared_optimizer_step

# an optimizer's cached, compiled step
from .stepcache import StepCache

# Tensor and the functions on tensors nn's layers use; library ops as one macro node
from .tensor import (
    Tensor,
    clip_when_built,
    composite,
    computed_now,
    hardtanh_values,
    in_memory,
    realize,
    register_composite,
    where,
)

# gradient hooks on a module's inputs and outputs (nn/hooks.py)
from .tensor_hooks import hooked_together

# the machine epsilon of a dtype (nn.utils.parametrizations.orthogonal's tolerance)
from .typeinfo import finfo

__all__ = [
    "PANEL_CACHE_BYTES",
    "PLAIN_DTYPES",
    "SerializationError",
    "write_atomically",
    "SHUFFLED_LANE_STEPS",
    "expansion_layout",
    "autocast_op",
    "stack",
    "host_table",
    "set_default_device",
    "manual_seed",
    "is_host_device",
    "host_values",
    "default_device_name",
    "device",
    "checked_dtype",
    "DTypeError",
    "DTypeNotImplementedError",
    "DimError",
    "DeviceError",
    "FusegradError",
    "JitError",
    "ShapeError",
    "StepCache",
    "shared_optimizer_step",
    "Tensor",
    "composite",
    "computed_now",
    "in_memory",
    "register_composite",
    "at_callers_site",
    "cat",
    "class_cross_entropy",
    "custom_gradient",
    "gradient_wanted",
    "rows_merge",
    "default_float",
    "cuda",
    "distributed",
    "empty",
    "eye",
    "finfo",
    "enable_grad",
    "fail",
    "fits_class_cross_entropy",
    "from_numpy",
    "full",
    "fused_layer_norm",
    "fused_linear",
    "shared_weight_linear",
    "gather_rows",
    "grad_enabled",
    "guard",
    "clip_when_built",
    "hardtanh_values",
    "host_copy",
    "host_data",
    "hooked_together",
    "host_rng",
    "index_arange",
    "jit_recording",
    "linalg_qr",
    "linalg_solve",
    "materialize",
    "module_scope",
    "reads_out_of_order",
    "reads_stored_values",
    "next_seed",
    "no_grad",
    "note_module",
    "note_parameter",
    "note_write",
    "on_replay",
    "one_site",
    "ones",
    "ones_like",
    "randn",
    "rand",
    "randperm",
    "realize",
    "rebuild_tensor",
    "sliding_windows",
    "take_pending_outputs",
    "tensor",
    "to_arguments",
    "to_dtype",
    "track",
    "value_copy",
    "where",
    "with_grad",
    "zeros",
    "zeros_like",
]
