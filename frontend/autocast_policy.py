"""Which ops autocast runs in 16 bits, which in float32, which in their widest input type:
PyTorch 2.13's per-device policy (aten/src/ATen/autocast_mode.{h,cpp}), as one table.

`frontend/autocast.py` reads it; each op joins it where it is defined, with
`@autocast_op("name")`. The names are torch's (`conv2d`, `mse_loss`); an op of fusegrad's
that is a composite in fusegrad but one kernel in torch (`cross_entropy`) carries the
category torch's result has. An op in no row runs in its inputs' types.

- LOWER: floating inputs (not float64) are cast to the region's dtype (bfloat16 on the
  cpu, float16 on cuda by default): matmuls and convolutions, where 16 bits pay.
- FP32: floating inputs are cast to float32 (ops whose range or precision 16 bits would
  ruin: exp, log, pow, norms, most losses).
- FP32_SET_OPT_DTYPE: as FP32 when the first input is an eligible floating tensor and the
  op's `dtype=` is not given (torch passes dtype=float32); with `dtype=` the op is left alone.
- PROMOTE: floating inputs are cast to the widest among them (float32 over 16 bits;
  float64 inputs are neither counted nor cast); a float16 input meeting a bfloat16 region
  raises, as torch's `prioritize`.
- BANNED: raises (torch's binary_cross_entropy under cuda autocast).

>>> POLICY["cpu"]["linear"], POLICY["cuda"]["exp"], POLICY["cpu"].get("exp")
('lower', 'fp32', None)
"""

from __future__ import annotations

LOWER = "lower"
FP32 = "fp32"
FP32_SET_OPT_DTYPE = "fp32_set_opt_dtype"
PROMOTE = "promote"
BANNED = "banned"

# torch's AT_FORALL_LOWER_PRECISION_FP (cuda) and the CPU's lower_precision_fp kernels, as
# far as fusegrad has the op (mv, addr, chain_matmul, ... are not fusegrad API)
_LOWER_BOTH = [
    "matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear", "conv1d", "conv2d",
    "conv3d", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d", "prelu",
    "scaled_dot_product_attention",
]  # fmt: skip
_CUDA_LOWER = ["addmv"]  # (torch's cpu autocast leaves addmv in its inputs' dtype)

# torch's AT_FORALL_FP32 (cuda); `norm` is its fp32_append_dtype, which gives float32 too;
# cross_entropy is log_softmax (fp32_set_opt_dtype) then nll_loss (fp32) in torch;
# interpolate's modes here (nearest, nearest-exact, linear, bilinear, trilinear) are all
# torch's upsample_* kernels of that list
_CUDA_FP32 = [
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm", "group_norm",
    "cosine_similarity", "cosine_embedding_loss", "nll_loss", "kl_div", "l1_loss",
    "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss", "triplet_margin_loss",
    "binary_cross_entropy_with_logits", "cdist", "logsumexp", "norm", "cross_entropy",
    "interpolate", "dist", "poisson_nll_loss", "hinge_embedding_loss", "soft_margin_loss",
    "multi_margin_loss", "multilabel_margin_loss",
]  # fmt: skip

# torch's AT_FORALL_FP32_SET_OPT_DTYPE (cuda)
_CUDA_FP32_SET_OPT_DTYPE = [
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "vector_norm", "matrix_norm", "sum",
]  # fmt: skip

# torch's AT_FORALL_PROMOTE (cuda) that fusegrad has (cat and stack are not in it since 2.x)
_CUDA_PROMOTE = ["addcdiv", "addcmul", "atan2", "dot", "index_put", "scatter_add"]

# torch's AutocastCPU fp32 kernels that fusegrad has
_CPU_FP32 = [
    "avg_pool3d", "binary_cross_entropy", "prod", "cdist", "trace", "max_pool3d",
    "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d", "mse_loss",
    "cosine_embedding_loss", "nll_loss", "smooth_l1_loss", "cross_entropy", "l1_loss",
    "huber_loss", "margin_ranking_loss", "triplet_margin_loss", "kl_div",
    "binary_cross_entropy_with_logits", "poisson_nll_loss", "hinge_embedding_loss",
    "soft_margin_loss", "multi_margin_loss", "multilabel_margin_loss",
    "fractional_max_pool2d", "fractional_max_pool3d",
]  # fmt: skip

_CPU_PROMOTE = ["cat", "stack", "index_copy"]


def _rows(**groups: list[str]) -> dict[str, str]:
    return {name: category for category, names in groups.items() for name in names}


# device type -> op name -> category: the one place the policy lives
POLICY: dict[str, dict[str, str]] = {
    # einsum: torch's cpu einsum is a composite of bmm, which autocast casts
    "cpu": _rows(lower=_LOWER_BOTH + ["einsum"], fp32=_CPU_FP32, promote=_CPU_PROMOTE),
    "cuda": {
        **_rows(
            lower=_LOWER_BOTH + _CUDA_LOWER + ["einsum"],
            fp32=_CUDA_FP32,
            fp32_set_opt_dtype=_CUDA_FP32_SET_OPT_DTYPE,
            promote=_CUDA_PROMOTE,
        ),
        "binary_cross_entropy": BANNED,
    },
}

# ops in no row of POLICY that are one kernel in torch and composites in fusegrad: they carry
# `@autocast_op` too, so that their inner ops (exp in sigmoid, sum in mean) run without
# autocast, as inside torch's kernel, and their result keeps their inputs' dtype
NATIVE = [
    "sigmoid", "tanh", "gelu", "silu", "mish", "elu", "selu", "celu", "logsigmoid", "glu",
    "logaddexp", "logaddexp2", "logcumsumexp", "mean", "var", "std", "var_mean", "std_mean",
    "nansum", "nanmean", "batch_norm", "instance_norm", "avg_pool1d", "avg_pool2d",
]  # fmt: skip

# the dtype a region runs LOWER ops in when `dtype=` is not given, and the dtypes allowed
DEFAULT_DTYPE = {"cpu": "bfloat16", "cuda": "float16"}
SUPPORTED_DTYPES = {"cpu": ("bfloat16", "float16"), "cuda": ("float16", "bfloat16")}
