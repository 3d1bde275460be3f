"""Regenerate tests/frontend/special_points_expected.py: PyTorch's values and gradients
of every differentiable op at its special points (0, -0.0, +-1, ties, kinks, the
boundaries of its domain, +-inf, NaN, empty and 0-d inputs).

    .venv/bin/pip install torch==2.13.0
    .venv/bin/python scripts/special_points_table.py      # rewrites the table

Each case is an expression in `x`, `y`, `z` (the inputs), `lib` (torch or fusegrad) and
`F` (its nn.functional), run once on torch here; the table records the inputs, torch's
outputs and the gradients of the sum of its float outputs, or "error" where torch
raises. tests/frontend/test_special_points.py runs the same expressions on fusegrad and
compares; it needs no torch.
"""

from __future__ import annotations

import itertools
import math
import pathlib
import pprint

inf, nan = math.inf, math.nan

# the points every elementwise op is tried at: signed zeros, +-1 (domain ends of acos,
# atanh, ...), the kinks of the hard activations (+-3, 6, 20), tiny and huge values
POINTS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 6.0, 20.0, -20.0]
POINTS += [50.0, -50.0, 1e-8, -1e-8, inf, -inf, nan]

# name -> expression; the name is what the sweep covers (Tensor.x, fg.x, F.x)
UNARY = {
    "abs": "x.abs()",
    "acos": "x.acos()",
    "acosh": "x.acosh()",
    "asin": "x.asin()",
    "asinh": "x.asinh()",
    "atan": "x.atan()",
    "atanh": "x.atanh()",
    "ceil": "x.ceil()",
    "cos": "x.cos()",
    "cosh": "x.cosh()",
    "erf": "x.erf()",
    "erfc": "x.erfc()",
    "exp": "x.exp()",
    "exp2": "x.exp2()",
    "expm1": "x.expm1()",
    "fix": "x.fix()",
    "floor": "x.floor()",
    "frac": "x.frac()",
    "log": "x.log()",
    "log10": "x.log10()",
    "log1p": "x.log1p()",
    "log2": "x.log2()",
    "neg": "x.neg()",
    "negative": "x.negative()",
    "absolute": "x.absolute()",
    "reciprocal": "x.reciprocal()",
    "relu": "x.relu()",
    "round": "x.round()",
    "rsqrt": "x.rsqrt()",
    "sgn": "x.sgn()",
    "sign": "x.sign()",
    "sigmoid": "x.sigmoid()",
    "sin": "x.sin()",
    "sinh": "x.sinh()",
    "sqrt": "x.sqrt()",
    "square": "x.square()",
    "tan": "x.tan()",
    "tanh": "x.tanh()",
    "trunc": "x.trunc()",
    "nan_to_num": "x.nan_to_num()",
    "clone": "x.clone()",
    "clamp": "x.clamp(-1.0, 1.0)",
    "clamp_min": "x.clamp(min=0.0)",
    "clamp_max": "x.clamp(max=0.0)",
    "clip": "x.clip(-2.0, 3.0)",
    "pow_0": "x.pow(0)",
    "pow_1": "x ** 1",
    "pow_2": "x ** 2",
    "pow_3": "x ** 3",
    "pow_m1": "x ** -1",
    "pow_m2": "x ** -2",
    "pow_half": "x ** 0.5",
    "pow_2_5": "x ** 2.5",
    "pow_m0_5": "x ** -0.5",
    "pow_0_0": "x ** 0.0",
    "rpow_2": "2.0 ** x",
    "rpow_0": "0.0 ** x",
    "rpow_m1": "(-1.0) ** x",
    "round_decimals": "x.round(decimals=1)",
    "sqrt_abs": "x.abs().sqrt()",
    "log_abs": "x.abs().log()",
    "sign_mul": "x.sign() * x",
    "arccos": "x.arccos()",
    "arccosh": "x.arccosh()",
    "arcsin": "x.arcsin()",
    "arcsinh": "x.arcsinh()",
    "arctan": "x.arctan()",
    "arctanh": "x.arctanh()",
    "fg.abs": "lib.abs(x)",
    "fg.acos": "lib.acos(x)",
    "fg.acosh": "lib.acosh(x)",
    "fg.asin": "lib.asin(x)",
    "fg.asinh": "lib.asinh(x)",
    "fg.atan": "lib.atan(x)",
    "fg.atanh": "lib.atanh(x)",
    "fg.ceil": "lib.ceil(x)",
    "fg.cos": "lib.cos(x)",
    "fg.cosh": "lib.cosh(x)",
    "fg.erf": "lib.erf(x)",
    "fg.erfc": "lib.erfc(x)",
    "fg.exp": "lib.exp(x)",
    "fg.exp2": "lib.exp2(x)",
    "fg.expm1": "lib.expm1(x)",
    "fg.floor": "lib.floor(x)",
    "fg.frac": "lib.frac(x)",
    "fg.log": "lib.log(x)",
    "fg.log10": "lib.log10(x)",
    "fg.log1p": "lib.log1p(x)",
    "fg.log2": "lib.log2(x)",
    "fg.relu": "lib.relu(x)",
    "fg.round": "lib.round(x)",
    "fg.sign": "lib.sign(x)",
    "fg.sigmoid": "lib.sigmoid(x)",
    "fg.sin": "lib.sin(x)",
    "fg.sinh": "lib.sinh(x)",
    "fg.sqrt": "lib.sqrt(x)",
    "fg.tan": "lib.tan(x)",
    "fg.tanh": "lib.tanh(x)",
    "fg.trunc": "lib.trunc(x)",
    "fg.nan_to_num": "lib.nan_to_num(x)",
    "fg.clone": "lib.clone(x)",
    "fg.clamp": "lib.clamp(x, -3.0, 3.0)",
    "F.relu": "F.relu(x)",
    "F.sigmoid": "F.sigmoid(x)",
    "F.tanh": "F.tanh(x)",
    "F.gelu": "F.gelu(x)",
    "F.gelu_tanh": "F.gelu(x, approximate='tanh')",
    "F.silu": "F.silu(x)",
    "F.mish": "F.mish(x)",
    "F.leaky_relu": "F.leaky_relu(x)",
    "F.leaky_relu_0_2": "F.leaky_relu(x, 0.2)",
    "F.elu": "F.elu(x)",
    "F.elu_0_5": "F.elu(x, 0.5)",
    "F.selu": "F.selu(x)",
    "F.celu": "F.celu(x)",
    "F.celu_2": "F.celu(x, 2.0)",
    "F.softplus": "F.softplus(x)",
    "F.softplus_beta": "F.softplus(x, beta=2.0, threshold=1.0)",
    "F.hardshrink": "F.hardshrink(x)",
    "F.hardshrink_2": "F.hardshrink(x, 2.0)",
    "F.softshrink": "F.softshrink(x)",
    "F.softshrink_0": "F.softshrink(x, 0.0)",
    "F.tanhshrink": "F.tanhshrink(x)",
    "F.threshold": "F.threshold(x, 1.0, -5.0)",
    "F.threshold_neg0": "F.threshold(x, -0.0, 7.0)",
    "F.hardtanh": "F.hardtanh(x)",
    "F.hardtanh_range": "F.hardtanh(x, -2.0, 3.0)",
    "F.relu6": "F.relu6(x)",
    "F.hardsigmoid": "F.hardsigmoid(x)",
    "F.hardswish": "F.hardswish(x)",
    "F.logsigmoid": "F.logsigmoid(x)",
    "F.softsign": "F.softsign(x)",
    "logit": "x.logit()",
    "logit_eps": "x.logit(0.25)",
    "logit_eps0": "x.logit(eps=0.0)",
    "fg.logit": "lib.logit(x, 1e-6)",
    "sinc": "x.sinc()",
    "fg.sinc": "lib.sinc(x)",
    "lgamma": "x.lgamma()",
    "fg.lgamma": "lib.lgamma(x)",
    "digamma": "x.digamma()",
    "fg.digamma": "lib.digamma(x)",
    "polygamma": "x.polygamma(1)",
    "fg.polygamma": "lib.polygamma(2, x)",
    "fg.polygamma_0": "lib.polygamma(0, x)",
    "erfinv": "x.erfinv()",
    "fg.erfinv": "lib.erfinv(x)",
    "i0": "x.i0()",
    "fg.i0": "lib.i0(x)",
    "mvlgamma": "x.mvlgamma(2)",
    "fg.mvlgamma": "lib.mvlgamma(x, 3)",
    "special.i0e": "lib.special.i0e(x)",
    "special.i1": "lib.special.i1(x)",
    "special.i1e": "lib.special.i1e(x)",
    "special.erfcx": "lib.special.erfcx(x)",
    "special.log_ndtr": "lib.special.log_ndtr(x)",
    "special.ndtri": "lib.special.ndtri(x)",
}

# ops taking two tensors: tried on every pair of these points
PAIR_POINTS = [0.0, -0.0, 1.0, -1.0, 2.0, -0.5, inf, -inf, nan]
POW_POINTS = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, inf, -inf, nan]
BINARY = {
    "add": "x.add(y)",
    "add_alpha": "x.add(y, alpha=2)",
    "sub": "x.sub(y)",
    "subtract": "x.subtract(y)",
    "mul": "x.mul(y)",
    "multiply": "x.multiply(y)",
    "div": "x.div(y)",
    "divide": "x.divide(y)",
    "true_divide": "x.true_divide(y)",
    "div_trunc": "x.div(y, rounding_mode='trunc')",
    "div_floor": "x.div(y, rounding_mode='floor')",
    "floor_divide": "x.floor_divide(y)",
    "fmod": "x.fmod(y)",
    "remainder": "x.remainder(y)",
    "atan2": "x.atan2(y)",
    "arctan2": "x.arctan2(y)",
    "copysign": "x.copysign(y)",
    "maximum": "x.maximum(y)",
    "minimum": "x.minimum(y)",
    "logaddexp": "x.logaddexp(y)",
    "logaddexp2": "x.logaddexp2(y)",
    "lerp_half": "x.lerp(y, 0.5)",
    "lerp_t": "x.lerp(y, y * 0.0 + 0.25)",
    "where": "lib.where(x > y, x, y)",
    "where_method": "x.where(x > y, y)",
    "where_static": ("lib.where(x > y, x, y)", "x.where_(x > y, x, y)"),  # fusegrad only
    "hypot_like": "(x * x + y * y).sqrt()",
    "clamp_tensors": "x.clamp(y, y + 1.0)",
    "clamp_min_tensor": "x.clamp(min=y)",
    "clamp_min": "x.clamp_min(y)",
    "clamp_max": "x.clamp_max(y)",
    "addcmul": "x.addcmul(y, y, value=0.5)",
    "addcdiv": "x.addcdiv(x, y, value=0.5)",
    "clamp_max_tensor": "x.clamp(max=y)",
    "fg.atan2": "lib.atan2(x, y)",
    "fg.copysign": "lib.copysign(x, y)",
    "fg.div": "lib.div(x, y)",
    "fg.floor_divide": "lib.floor_divide(x, y)",
    "fg.fmod": "lib.fmod(x, y)",
    "fg.remainder": "lib.remainder(x, y)",
    "fg.maximum": "lib.maximum(x, y)",
    "fg.minimum": "lib.minimum(x, y)",
    "fg.logaddexp": "lib.logaddexp(x, y)",
    "fg.lerp": "lib.lerp(x, y, 0.75)",
    "F.mse_loss": "F.mse_loss(x, y, reduction='none')",
    "max_other": "x.max(y)",
    "min_other": "x.min(y)",
    "F.hinge_embedding_loss": "F.hinge_embedding_loss(x, y, reduction='none')",
    "F.hinge_embedding_loss_mean": "F.hinge_embedding_loss(x, y, margin=0.5)",
    "F.poisson_nll_loss": "F.poisson_nll_loss(x, y, reduction='none')",
    "F.poisson_nll_loss_full": (
        "F.poisson_nll_loss(x, y, log_input=False, full=True, reduction='none')"
    ),
    "F.poisson_nll_loss_sum": "F.poisson_nll_loss(x, y, full=True, reduction='sum')",
    "F.gaussian_nll_loss": "F.gaussian_nll_loss(x, x * 0.5, y.abs(), reduction='none')",
    "F.gaussian_nll_loss_full": "F.gaussian_nll_loss(y, x, y.abs() + 1.0, full=True)",
}
POW = {"pow": "x.pow(y)", "pow_op": "x ** y"}

TIES = [[1.0, 3.0, 3.0, 2.0], [0.0, -0.0, 0.0], [2.0, nan, 1.0], [1.0, inf, 2.0], [inf, -inf]]
TIES += [[-inf, -inf], [5.0], [0.0, 0.0, 0.0, 0.0]]
ROWS = [[[1.0, 1.0, 0.0], [0.0, 2.0, 2.0]], [[nan, 1.0, 1.0], [0.0, 0.0, 0.0]]]
ROWS += [[[inf, 1.0, inf], [-inf, -inf, 0.0]]]
ROWS += [[[0.0, -0.0, inf], [nan, nan, -inf]], [[2.0, 0.0, 0.0], [-1.0, 3.0, -1.0]]]
# reductions and scans: tried on ties, zeros, NaN, infinities, 0-d and empty inputs
REDUCE = {
    "sum": "x.sum()",
    "mean": "x.mean()",
    "prod": "x.prod()",
    "amax": "x.amax()",
    "amin": "x.amin()",
    "max": "x.max()",
    "min": "x.min()",
    "std": "x.std()",
    "var": "x.var()",
    "std_0": "x.std(correction=0)",
    "var_0": "x.var(correction=0)",
    "std_mean": ("lib.std_mean(x)", "x.std_mean()"),  # a method in fusegrad only
    "var_mean": ("lib.var_mean(x)", "x.var_mean()"),
    "norm": "x.norm()",
    "norm_1": "x.norm(p=1)",
    "norm_inf": "x.norm(p=float('inf'))",
    "logsumexp": "x.logsumexp(0)",
    "softmax": "x.softmax(0)",
    "log_softmax": "x.log_softmax(0)",
    "cumsum": "x.cumsum(0)",
    "cumprod": "x.cumprod(0)",
    "cummax": "x.cummax(0)",
    "cummin": "x.cummin(0)",
    "logcumsumexp": "x.logcumsumexp(0)",
    "median": "x.median()",
    "sort": "x.sort()",
    "sort_desc": "x.sort(descending=True)",
    "msort": "x.msort()",
    "max_dim": "x.max(0)",
    "min_dim": "x.min(0)",
    "kthvalue": "x.kthvalue(1)",
    "topk": "x.topk(1)",
    "dot": "x.dot(x)",
    "outer": "x.outer(x)",
    "fg.prod": "lib.prod(x)",
    "fg.sum": "lib.sum(x)",
    "fg.mean": "lib.mean(x)",
    "fg.norm": "lib.norm(x)",
    "fg.median": "lib.median(x)",
    "fg.sort": "lib.sort(x)",
    "fg.softmax": "lib.softmax(x, 0)",
    "fg.log_softmax": "lib.log_softmax(x, 0)",
    "fg.cumsum": "lib.cumsum(x, 0)",
    "fg.cumprod": "lib.cumprod(x, 0)",
    "fg.cummax": "lib.cummax(x, 0)",
    "fg.cummin": "lib.cummin(x, 0)",
    "fg.logcumsumexp": "lib.logcumsumexp(x, 0)",
    "fg.kthvalue": "lib.kthvalue(x, 1)",
    "fg.topk": "lib.topk(x, 1)",
    "fg.std_mean": "lib.std_mean(x)",
    "fg.var_mean": "lib.var_mean(x)",
    "F.softmax": "F.softmax(x, 0)",
    "F.log_softmax": "F.log_softmax(x, 0)",
    "F.softmin": "F.softmin(x, 0)",
    "F.normalize": "F.normalize(x, dim=0)",
    "norm_3": "x.norm(p=3)",
    "norm_ninf": "x.norm(p=float('-inf'))",
    "norm_0": "x.norm(p=0)",
    "F.mse_loss_mean": "F.mse_loss(x, x * 0.5 + 1.0)",
    "F.mse_loss_sum": "F.mse_loss(x, x * 0.5 + 1.0, reduction='sum')",
    "F.normalize_inf": "F.normalize(x, p=float('inf'), dim=0)",
    "F.normalize_1": "F.normalize(x, p=1.0, dim=0)",
    "max_keepdim": "x.max(0, keepdim=True)",
    "aminmax_like": "x.amax() - x.amin()",
    "diff": "x.diff()",
    "diff_2": "x.diff(n=2)",
    "fg.diff": "lib.diff(x, prepend=x[:1] * 2.0, append=x[-1:])",
    "dist": "x.dist(x.flip(0) * 0.5)",
    "dist_1": "x.dist(x.flip(0) * 0.5, p=1)",
    "dist_inf": "x.dist(x.flip(0) * 0.5, p=float('inf'))",
    "dist_3": "x.dist(x.flip(0) * 0.5, 3)",
    "fg.dist": "lib.dist(x, x * 0.0 + 1.0)",
}
_IDX = "lib.tensor([0, 0, 1, 1, 2, 2])"  # scatter_reduce's: pairs of elements
ROW_REDUCE = {
    "sum_dim": "x.sum(1)",
    "mean_dim": "x.mean(1)",
    "prod_dim": "x.prod(1)",
    "amax_dim": "x.amax(1)",
    "amin_dim": "x.amin(1)",
    "max_dim1": "x.max(1)",
    "min_dim1": "x.min(1)",
    "std_dim": "x.std(1)",
    "var_dim": "x.var(1)",
    "norm_dim": "x.norm(dim=1)",
    "logsumexp_dim": "x.logsumexp(1)",
    "median_dim": "x.median(1)",
    "kthvalue_dim": "x.kthvalue(2, 1)",
    "topk_dim": "x.topk(2, 1)",
    "sort_dim": "x.sort(1)",
    "matmul": "x.matmul(x.mT)",
    "fg.matmul": "lib.matmul(x, x.T)",
    "bmm": "x.unsqueeze(0).bmm(x.mT.unsqueeze(0))",
    "trace": "x[:, :2].trace()",
    "kron": "x.kron(x)",
    "F.layer_norm": "F.layer_norm(x, (3,))",
    "F.group_norm": "F.group_norm(x.unsqueeze(-1), 1)",
    "F.batch_norm": "F.batch_norm(x, None, None, training=True)",
    "F.normalize_rows": "F.normalize(x)",
    "F.glu": "F.glu(x[:, :2])",
    "F.linear": "F.linear(x, x)",
    "F.max_pool1d": "F.max_pool1d(x.unsqueeze(0), 2, 1)",
    "F.max_pool2d": "F.max_pool2d(x.reshape(1, 1, 2, 3), 2, 1)",
    # windows that overlap (kernel past stride): the gradient summed back by F.fold's sum
    "F.max_pool2d_overlap": "F.max_pool2d(x.reshape(1, 1, 2, 3), 3, 2, 1)",
    "F.cross_entropy": "F.cross_entropy(x, lib.tensor([0, 2]))",
    "F.cross_entropy_smooth": "F.cross_entropy(x, lib.tensor([0, 2]), label_smoothing=0.1)",
    "F.nll_loss": "F.nll_loss(x, lib.tensor([0, 2]))",
    "F.scaled_dot_product_attention": "F.scaled_dot_product_attention(x, x, x)",
    "F.binary_cross_entropy_with_logits": "F.binary_cross_entropy_with_logits(x, x * 0 + 1)",
    "scatter_reduce_amax": f"x.reshape(-1).scatter_reduce(0, {_IDX}, x.reshape(-1), 'amax')",
    "fg.scatter_reduce_amin": f"lib.scatter_reduce(x.view(-1), 0, {_IDX}, x.view(-1), 'amin')",
    "fg.einsum": "lib.einsum('ij,ij->i', x, x)",
    "masked_scatter": "x.masked_scatter(x > 0, x * 2)",
    "masked_scatter_": "x.clone().masked_scatter_(x > 0, x * 2)",
    "tril_": "x.clone().tril_()",
    "triu_": "x.clone().triu_()",
    "cumsum_": "x.clone().cumsum_(1)",
    "cumprod_": "x.clone().cumprod_(1)",
    "cumprod_dim": "x.cumprod(1)",
    "logcumsumexp_dim": "x.logcumsumexp(1)",
    "cummax_dim": "x.cummax(1)",
    "softmax_dim": "x.softmax(1)",
    "log_softmax_dim": "x.log_softmax(1)",
    "std_mean_dim": ("lib.std_mean(x, 1)", "x.std_mean(1)"),
    "var_mean_dim0": ("lib.var_mean(x, 0)", "x.var_mean(0)"),
    "prod_dim0": "x.prod(0)",
    "amax_dims": "x.amax((0, 1))",
    "norm_inf_dim": "x.norm(p=float('inf'), dim=1)",
    "kthvalue_dim_1": "x.kthvalue(1, 1)",
    "kthvalue_dim_3": "x.kthvalue(3, 1, keepdim=True)",
    "topk_dim_1": "x.topk(1, 1)",
    "topk_smallest": "x.topk(2, 1, largest=False)",
    "median_dim0": "x.median(0)",
    "F.mse_loss_rows": "F.mse_loss(x, x.flip(1))",
    "F.cross_entropy_none": "F.cross_entropy(x, lib.tensor([1, 0]), reduction='none')",
    "F.nll_loss_sum": "F.nll_loss(x, lib.tensor([1, 2]), reduction='sum')",
    "F.layer_norm_affine": "F.layer_norm(x, (3,), x[0] * 0 + 2.0, x[0] * 0 + 0.5)",
    "scatter_reduce_amax_excl": (
        f"x.reshape(-1).scatter_reduce(0, {_IDX}, x.reshape(-1).flip(0), 'amax', "
        "include_self=False)"
    ),
    "scatter_reduce_prod": f"x.reshape(-1).scatter_reduce(0, {_IDX}, x.reshape(-1), 'prod')",
    "scatter_reduce_mean": f"x.reshape(-1).scatter_reduce(0, {_IDX}, x.reshape(-1), 'mean')",
    "diff_dim0": "x.diff(dim=0)",
    "diff_append": "x.diff(n=2, dim=1, append=x[:, :1])",
    "dist_rows": "x.dist(x[0])",
    "F.instance_norm": "F.instance_norm(x.unsqueeze(0))",
    "F.instance_norm_affine": (
        "F.instance_norm(x.unsqueeze(0), weight=lib.tensor([2.0, -1.0], dtype=x.dtype), "
        "bias=lib.tensor([0.5, 0.0], dtype=x.dtype), eps=1e-3)"
    ),
    "F.instance_norm_running": (
        "F.instance_norm(x.unsqueeze(0), lib.tensor([1.0, -1.0], dtype=x.dtype), "
        "lib.tensor([4.0, 0.5], dtype=x.dtype), use_input_stats=False)"
    ),
    "F.lp_pool1d": "F.lp_pool1d(x.unsqueeze(0), 2, 2, 1)",
    "F.lp_pool1d_1": "F.lp_pool1d(x.unsqueeze(0), 1, 2, 1)",
    "F.lp_pool1d_inf": "F.lp_pool1d(x.unsqueeze(0), float('inf'), 2)",
    "F.lp_pool1d_3": "F.lp_pool1d(x.unsqueeze(0), 3, 2, 2, ceil_mode=True)",
    "F.lp_pool2d": "F.lp_pool2d(x.reshape(1, 1, 2, 3), 2, 2, 1)",
    "F.lp_pool2d_half": "F.lp_pool2d(x.reshape(1, 1, 2, 3), 1.5, (1, 2), ceil_mode=True)",
    "F.lp_pool2d_ninf": "F.lp_pool2d(x.reshape(1, 1, 2, 3), float('-inf'), (2, 1))",
}
PROBS = [0.0, 1.0, 0.5, 1e-12, 1.0 - 1e-12]
SPECIAL_PROBS = {
    "F.binary_cross_entropy": "F.binary_cross_entropy(x, y, reduction='none')",
    "F.binary_cross_entropy_mean": "F.binary_cross_entropy(x, y)",
}
# sums of negative zeros (torch's accumulators start at +0.0)
NEG_ZEROS = {"sum_neg0": "x.sum()", "mean_neg0": "x.mean()", "cumsum_neg0": "x.cumsum(0)"}
# logits at special points against probability targets
LOGIT_POINTS = [0.0, -0.0, 1.0, -1.0, 20.0, -20.0, 50.0, -50.0, inf, -inf, nan]
LOGITS = {
    "F.binary_cross_entropy_with_logits_none": (
        "F.binary_cross_entropy_with_logits(x, y, reduction='none')"
    ),
    "F.binary_cross_entropy_with_logits_mean": "F.binary_cross_entropy_with_logits(x, y)",
}

# which of these also run in float32 (the ones every training step uses)
FLOAT32 = {"abs", "relu", "sigmoid", "tanh", "exp", "log", "sqrt", "rsqrt", "clamp"}
FLOAT32 |= {"F.gelu", "F.silu", "F.softplus", "F.elu", "F.leaky_relu", "F.logsigmoid"}
FLOAT32 |= {"F.sigmoid", "F.tanh", "F.mish", "F.hardswish", "sqrt_abs", "log_abs", "pow_2"}
FLOAT32 |= {"div", "maximum", "minimum", "atan2", "pow", "std", "var", "softmax", "log_softmax"}
FLOAT32 |= {"amax", "max", "logsumexp", "norm", "F.layer_norm", "F.cross_entropy", "mul"}
FLOAT32 |= {"F.binary_cross_entropy_with_logits_none", "softmax_dim", "log_softmax_dim"}
FLOAT32 |= {"F.mse_loss_mean", "F.max_pool2d", "F.hardsigmoid", "F.relu6", "F.hardtanh"}
FLOAT32 |= {"logit", "sinc", "dist"}
# float32 computed to float32's need, apart from float64's (frontend/mathops.py)
FLOAT32 |= {"erf", "erfc", "erfinv", "exp2", "expm1", "round", "round_ties", "floor", "ceil"}
FLOAT32 |= {"trunc", "lgamma", "digamma", "F.max_pool2d_overlap"}

# round's ties, to even on both sides, and the last halves below 2^23 (float32's integers)
ROUND_TIES = [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 4194304.5, -4194304.5, 8388607.0, 0.49999997]


def _inplace_variants(table: dict) -> dict:
    """`x.op(args)` -> `x.clone().op_(args)` for each method of `table` that has an in-place
    variant in torch: the variants compute the same value through the in-place path
    (`Tensor._inplace`), whose gradient must be the op's."""
    import re

    import torch

    out = {}
    for expr in table.values():
        m = re.fullmatch(r"x\.(\w+)\((.*)\)", expr) if isinstance(expr, str) else None
        if m and hasattr(torch.Tensor, m.group(1) + "_"):
            out.setdefault(m.group(1) + "_", f"x.clone().{m.group(1)}_({m.group(2)})")
    return out


def cases() -> list[dict]:
    """Every case: name, expr (fg_expr where fusegrad's spelling differs), dtype, inputs
    (nested values of float tensors that require grad)."""
    out = []

    def add(name, expr, inputs):
        expr, fg_expr = expr if isinstance(expr, tuple) else (expr, expr)
        for dt in ["float64", "float32"] if name in FLOAT32 else ["float64"]:
            case = {"name": name, "expr": expr, "dtype": dt, "inputs": inputs}
            if fg_expr != expr:
                case["fg_expr"] = fg_expr
            out.append(case)

    for name, expr in UNARY.items():
        add(name, expr, [POINTS])
        if not name.startswith("fg."):  # (fg.x is x.x's alias)
            add(name, expr, [-0.0])  # 0-d
            add(name, expr, [[]])  # empty
    for name, expr in BINARY.items():
        xs, ys = zip(*itertools.product(PAIR_POINTS, PAIR_POINTS))
        add(name, expr, [list(xs), list(ys)])
        if not name.startswith("fg."):
            add(name, expr, [-0.0, 0.0])  # 0-d
            add(name, expr, [[], []])  # empty
            add(name, expr, [[1.0, -0.0, nan], 2.0])  # a 0-d second operand, broadcast
    for name, expr in _inplace_variants(UNARY).items():
        add(name, expr, [POINTS])
    for name, expr in _inplace_variants({**BINARY, **POW}).items():
        xs, ys = zip(*itertools.product(PAIR_POINTS, PAIR_POINTS))
        add(name, expr, [list(xs), list(ys)])
    for name, expr in POW.items():
        xs, ys = zip(*itertools.product(POW_POINTS, POW_POINTS))
        add(name, expr, [list(xs), list(ys)])
    for name, expr in SPECIAL_PROBS.items():
        xs, ys = zip(*itertools.product(PROBS, PROBS))
        add(name, expr, [list(xs), list(ys)])
    for name, expr in NEG_ZEROS.items():
        for values in [[-0.0, -0.0], -0.0, [-0.0]]:
            add(name, expr, [values])
    for name, expr in LOGITS.items():
        xs, ys = zip(*itertools.product(LOGIT_POINTS, PROBS))
        add(name, expr, [list(xs), list(ys)])
    for name, expr in REDUCE.items():
        for values in TIES + [2.0, []]:
            add(name, expr, [values])
    for name, expr in ROW_REDUCE.items():
        for values in ROWS:
            add(name, expr, [values])
    add("round_ties", "x.round()", [ROUND_TIES])
    return out


def _values(t):
    """Nested lists of a tensor's values (an expanded zero gradient has no storage of its own)."""
    import torch

    return torch.empty_like(t).copy_(t.detach()).tolist()


def _torch_run(case: dict) -> dict:
    import torch
    import torch.nn.functional as F

    dtype = getattr(torch, case["dtype"])
    xs = [torch.tensor(v, dtype=dtype, requires_grad=True) for v in case["inputs"]]
    env = dict(zip("xyz", xs), lib=torch, F=F)
    try:
        res = eval(case["expr"], env)
        outs = list(res) if isinstance(res, tuple) else [res]
        floats = [o for o in outs if o.dtype.is_floating_point]
        total = sum(o.sum() for o in floats)
        grads = torch.autograd.grad(total, xs, allow_unused=True) if total.requires_grad else []
    except (RuntimeError, IndexError, ValueError, TypeError) as e:
        return {"error": type(e).__name__}
    grads = [None if g is None else _values(g) for g in grads] or [None] * len(xs)
    return {"outputs": [_values(o) for o in outs], "grads": grads}


def main() -> None:
    import warnings

    import torch

    warnings.simplefilter("ignore")  # torch's degrees-of-freedom warnings
    rows = []
    for case in cases():
        rows.append({**case, **_torch_run(case)})
    path = pathlib.Path(__file__).parents[1] / "tests" / "frontend" / "special_points_expected.py"
    body = pprint.pformat(rows, width=100, compact=True, sort_dicts=False)
    path.write_text(
        f'"""PyTorch {torch.__version__}\'s values and gradients at special points.\n\n'
        "Generated by scripts/special_points_table.py: do not edit by hand.\n"
        '"""\n\n'
        "# ruff: noqa: E501\n"
        'inf, nan = float("inf"), float("nan")\n\n'
        "# fmt: off\n"
        f"CASES = {body}\n"
        "# fmt: on\n"
    )
    print(f"{len(rows)} cases -> {path}")


if __name__ == "__main__":
    main()
