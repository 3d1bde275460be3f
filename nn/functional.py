"""`fusegrad.nn.functional`: layers and losses as functions, as torch.nn.functional.

Every function composes frontend ops (so it is differentiable and fuses with
its neighbours); none computes anything when called.

>>> import fusegrad as fg
>>> import fusegrad.nn.functional as F
>>> logits = fg.tensor([[2.0, 0.5, -1.0]])
>>> round(F.cross_entropy(logits, fg.tensor([0])).item(), 4)
0.2413
"""

from __future__ import annotations

# This module only gathers: each function lives with its concept (dense.py,
# activations.py, loss_functions.py, conv.py, ...), and nn's own modules import it
# from there, so that nothing inside nn depends on this list.
from .activations import (  # noqa: F401
    celu,
    celu_,
    elu,
    elu_,
    gelu,
    glu,
    hardshrink,
    hardsigmoid,
    hardswish,
    hardtanh,
    hardtanh_,
    leaky_relu,
    leaky_relu_,
    log_softmax,
    logsigmoid,
    mish,
    prelu,
    relu,
    relu6,
    relu_,
    selu,
    selu_,
    sigmoid,
    silu,
    softmax,
    softmin,
    softplus,
    softshrink,
    softsign,
    tanh,
    tanhshrink,
    threshold,
    threshold_,
)
from .adaptive import (  # noqa: F401
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
)
from .attention import scaled_dot_product_attention  # noqa: F401
from .bilinear import bilinear  # noqa: F401
from .channel_ops import channel_shuffle, local_response_norm  # noqa: F401
from .conv import (  # noqa: F401
    avg_pool1d,
    avg_pool2d,
    conv1d,
    conv2d,
    max_pool1d,
    max_pool2d,
)
from .conv3d import avg_pool3d, conv3d, conv_transpose3d, max_pool3d  # noqa: F401
from .conv_transpose import conv_transpose1d, conv_transpose2d  # noqa: F401
from .ctc import ctc_loss  # noqa: F401
from .dense import (  # noqa: F401
    ClassIndexError,
    alpha_dropout,
    dropout,
    dropout1d,
    dropout2d,
    dropout3d,
    embedding,
    feature_alpha_dropout,
    linear,
    one_hot,
)
from .embedding_bag import embedding_bag  # noqa: F401
from .fold import fold, max_unpool1d, max_unpool2d, max_unpool3d, unfold  # noqa: F401
from .fractional_pool import (  # noqa: F401
    fractional_max_pool2d,
    fractional_max_pool2d_with_indices,
    fractional_max_pool3d,
    fractional_max_pool3d_with_indices,
)
from .grid_sample import affine_grid, grid_sample  # noqa: F401
from .loss_functions import (  # noqa: F401
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cosine_similarity,
    cross_entropy,
    huber_loss,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    smooth_l1_loss,
)
from .losses_margin import (  # noqa: F401
    multi_margin_loss,
    multilabel_margin_loss,
    multilabel_soft_margin_loss,
    soft_margin_loss,
    triplet_margin_with_distance_loss,
)
from .losses_more import (  # noqa: F401
    cosine_embedding_loss,
    gaussian_nll_loss,
    hinge_embedding_loss,
    margin_ranking_loss,
    pairwise_distance,
    poisson_nll_loss,
    triplet_margin_loss,
)
from .lp_pool import lp_pool1d, lp_pool2d, lp_pool3d  # noqa: F401
from .multihead_attention import multi_head_attention_forward  # noqa: F401
from .normalization import (  # noqa: F401
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    normalize,
    rms_norm,
)
from .padding import pad  # noqa: F401
from .pdist import pdist  # noqa: F401
from .pool_indices import (  # noqa: F401
    adaptive_max_pool1d_with_indices,
    adaptive_max_pool2d_with_indices,
    adaptive_max_pool3d_with_indices,
    max_pool1d_with_indices,
    max_pool2d_with_indices,
    max_pool3d_with_indices,
)
from .random_activations import gumbel_softmax, rrelu, rrelu_  # noqa: F401
from .upsample import (  # noqa: F401
    interpolate,
    pixel_shuffle,
    pixel_unshuffle,
    upsample,
    upsample_bilinear,
    upsample_nearest,
)
