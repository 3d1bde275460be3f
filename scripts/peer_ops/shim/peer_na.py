"""pytest plugin: the peer tests that exercise API PyTorch does not have, skipped with why.

Loaded by scripts/peer_ops/run.sh (`-p peer_na`). Each entry is a test name and the
reason; README.md lists the same table. A skipped test is counted neither as a pass
nor as applicable.
"""

import pytest

NOT_APPLICABLE = {
    "test_negative_dims": "Tensor.normal/uniform/scaled_uniform/glorot_uniform: peer-only",
    "test_negative_dims_kaiming": "Tensor.kaiming_uniform(shape, a): peer-only signature",
    "test_quick_gelu": "Tensor.quick_gelu: no PyTorch op",
    "test_quick_gelu_extreme": "Tensor.quick_gelu: no PyTorch op",
    "test_pow_const_direct": "gradient of a tensor made without requires_grad (torch raises)",
    "test_sigmoid_extreme": "gradient of a tensor made without requires_grad (torch raises)",
    "test_sigmoid_alt_extreme": "gradient of a tensor made without requires_grad (torch raises)",
    # padding as one (before, after) pair per side, or negative: torch's conv/pool take
    # one symmetric int per spatial dim
    "test_simple_padding_conv1d": "conv padding (1, 1) as per-side pairs: peer-only",
    "test_asymmetric_padding_conv1d": "asymmetric conv padding: peer-only",
    "test_simple_padding_conv2d": "conv padding (1, 1, 1, 1) as per-side pairs: peer-only",
    "test_asymmetric_padding_conv2d": "asymmetric conv padding: peer-only",
    "test_negative_padding_conv2d": "negative conv padding: peer-only",
    "test_padded_conv3d": "conv padding as 6 per-side values: peer-only",
    "test_max_pool2d_asymmetric_padding": "asymmetric pool padding: peer-only",
    "test_reshape": "reshape((None, None, 6, 6)): None keeps a dim, peer-only",
    "test_sum_dtype_arg": "expects the peer's AttributeError for dtype=''; torch raises TypeError",
    "test_prod_dtype_arg": "expects the peer's AttributeError for dtype=''; torch raises TypeError",
    "test_scatter_no_reduce_tensor_src": "expects the peer's TypeError; torch accepts the call",
    "test_slice_errors": "expects a TypeError for x[:Tensor([3])]; torch accepts it",
    "test_stack": "Tensor.stack(tuple, tensor) and its peer-specific ValueError",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        reason = NOT_APPLICABLE.get(item.name)
        if reason:
            item.add_marker(pytest.mark.skip(reason="not applicable: " + reason))
