"""fg.autocast's op policy (issue 30): the dtype each op's result has under autocast, for
float32 and for 16-bit inputs, pinned as a literal table of torch 2.13's answers, on the
cpu (checked live against torch when it is installed) and on the emulated cuda device
(torch's documented CUDA lists: aten/src/ATen/autocast_mode.h; a CPU-only torch cannot run
cuda autocast). Ops outside the policy follow their inputs (a sweep of unlisted ones)."""

from __future__ import annotations

import pytest
from _emulated import emulated  # noqa: F401  (the fixture)

import fusegrad as fg
from fusegrad.nn import functional as F

L, H, S = "lower", "fp32", "same"  # result dtype: the region's, float32, the inputs'


def _t(lib, shape, dtype, device="cpu", lo=0.5):
    """A tensor of positive values in [lo, lo + 1) (log, pow and the losses accept them)."""
    n = 1
    for s in shape:
        n *= s
    values = [lo + ((7 * i) % 11) / 11 for i in range(n)]
    return lib.tensor(values, dtype=dtype, device=device).reshape(shape)


def _idx(lib, values, device):
    return lib.tensor(values, dtype=lib.int64, device=device)


# name -> f(lib, F, make(shape), idx(values)) with `make` building floating inputs of the
# dtype under test: the same code runs on fusegrad and on torch
CASES = {
    # lower
    "matmul": lambda m, F, t, i: t(3, 4) @ t(4, 2),
    "mm": lambda m, F, t, i: m.mm(t(3, 4), t(4, 2)),
    "bmm": lambda m, F, t, i: m.bmm(t(2, 3, 4), t(2, 4, 2)),
    "addmm": lambda m, F, t, i: m.addmm(t(2), t(3, 4), t(4, 2)),
    "addmv": lambda m, F, t, i: m.addmv(t(3), t(3, 4), t(4)),
    "baddbmm": lambda m, F, t, i: m.baddbmm(t(2, 1, 2), t(2, 3, 4), t(2, 4, 2)),
    "addbmm": lambda m, F, t, i: m.addbmm(t(3, 2), t(2, 3, 4), t(2, 4, 2)),
    "linear": lambda m, F, t, i: F.linear(t(3, 4), t(2, 4), t(2)),
    "conv1d": lambda m, F, t, i: F.conv1d(t(1, 2, 5), t(3, 2, 3)),
    "conv2d": lambda m, F, t, i: F.conv2d(t(1, 2, 5, 5), t(3, 2, 3, 3), t(3)),
    "conv3d": lambda m, F, t, i: F.conv3d(t(1, 1, 3, 3, 3), t(2, 1, 2, 2, 2)),
    "conv_transpose1d": lambda m, F, t, i: F.conv_transpose1d(t(1, 2, 4), t(2, 3, 3)),
    "conv_transpose2d": lambda m, F, t, i: F.conv_transpose2d(t(1, 2, 3, 3), t(2, 1, 2, 2)),
    "conv_transpose3d": lambda m, F, t, i: F.conv_transpose3d(t(1, 1, 2, 2, 2), t(1, 1, 2, 2, 2)),
    "prelu": lambda m, F, t, i: F.prelu(t(2, 3), t(3)),
    "scaled_dot_product_attention": lambda m, F, t, i: F.scaled_dot_product_attention(
        t(1, 3, 4), t(1, 3, 4), t(1, 3, 4)
    ),
    "einsum": lambda m, F, t, i: m.einsum("ij,jk->ik", t(3, 4), t(4, 2)),
    # fp32 on cuda (and some on the cpu)
    "exp": lambda m, F, t, i: t(4).exp(),
    "log": lambda m, F, t, i: m.log(t(4)),
    "log1p": lambda m, F, t, i: t(4).log1p(),
    "expm1": lambda m, F, t, i: t(4).expm1(),
    "erfinv": lambda m, F, t, i: (t(4) * 0.5).erfinv(),
    "log2": lambda m, F, t, i: t(4).log2(),
    "log10": lambda m, F, t, i: t(4).log10(),
    "reciprocal": lambda m, F, t, i: t(4).reciprocal(),
    "rsqrt": lambda m, F, t, i: t(4).rsqrt(),
    "sinh": lambda m, F, t, i: t(4).sinh(),
    "cosh": lambda m, F, t, i: t(4).cosh(),
    "tan": lambda m, F, t, i: t(4).tan(),
    "acos": lambda m, F, t, i: (t(4) - 0.9).acos(),
    "asin": lambda m, F, t, i: (t(4) - 0.9).asin(),
    "pow": lambda m, F, t, i: t(4) ** 2,
    "pow_tensor": lambda m, F, t, i: m.pow(t(4), t(4)),
    "softplus": lambda m, F, t, i: F.softplus(t(4)),
    "layer_norm": lambda m, F, t, i: F.layer_norm(t(2, 4), (4,), t(4), t(4)),
    "group_norm": lambda m, F, t, i: F.group_norm(t(2, 4, 3), 2, t(4), t(4)),
    "cosine_similarity": lambda m, F, t, i: F.cosine_similarity(t(2, 4), t(2, 4)),
    "mse_loss": lambda m, F, t, i: F.mse_loss(t(4), t(4)),
    "l1_loss": lambda m, F, t, i: F.l1_loss(t(4), t(4)),
    "smooth_l1_loss": lambda m, F, t, i: F.smooth_l1_loss(t(4), t(4)),
    "huber_loss": lambda m, F, t, i: F.huber_loss(t(4), t(4)),
    "kl_div": lambda m, F, t, i: F.kl_div(t(4), t(4), reduction="batchmean"),
    "nll_loss": lambda m, F, t, i: F.nll_loss(t(3, 4), i([0, 3, 1])),
    "cross_entropy": lambda m, F, t, i: F.cross_entropy(t(3, 4), i([0, 3, 1])),
    "binary_cross_entropy": lambda m, F, t, i: F.binary_cross_entropy(t(4) - 0.45, t(4) - 0.5),
    "binary_cross_entropy_with_logits": lambda m, F, t, i: F.binary_cross_entropy_with_logits(
        t(4), t(4) - 0.5
    ),
    "margin_ranking_loss": lambda m, F, t, i: F.margin_ranking_loss(t(4), t(4), t(4)),
    "cosine_embedding_loss": lambda m, F, t, i: F.cosine_embedding_loss(
        t(2, 4), t(2, 4), i([1, -1])
    ),
    "triplet_margin_loss": lambda m, F, t, i: F.triplet_margin_loss(t(2, 4), t(2, 4), t(2, 4)),
    "hinge_embedding_loss": lambda m, F, t, i: F.hinge_embedding_loss(t(4), t(4)),
    "poisson_nll_loss": lambda m, F, t, i: F.poisson_nll_loss(t(4), t(4)),
    "soft_margin_loss": lambda m, F, t, i: F.soft_margin_loss(t(4), t(4)),
    "multi_margin_loss": lambda m, F, t, i: F.multi_margin_loss(t(2, 3), i([2, 0])),
    "multilabel_margin_loss": lambda m, F, t, i: F.multilabel_margin_loss(
        t(2, 3), i([[2, -1, 0], [0, 1, -1]])
    ),
    "multilabel_soft_margin_loss": lambda m, F, t, i: F.multilabel_soft_margin_loss(
        t(2, 3), t(2, 3)
    ),
    "triplet_margin_with_distance_loss": lambda m, F, t, i: F.triplet_margin_with_distance_loss(
        t(2, 4), t(2, 4), t(2, 4)
    ),
    "gaussian_nll_loss": lambda m, F, t, i: F.gaussian_nll_loss(t(4), t(4), t(4)),
    "cdist": lambda m, F, t, i: m.cdist(t(3, 2), t(4, 2)),
    "dist": lambda m, F, t, i: m.dist(t(3), t(3)),
    "logsumexp": lambda m, F, t, i: t(2, 4).logsumexp(1),
    "norm": lambda m, F, t, i: t(2, 4).norm(),
    "vector_norm": lambda m, F, t, i: m.linalg.vector_norm(t(2, 4)),
    "matrix_norm": lambda m, F, t, i: m.linalg.matrix_norm(t(2, 4)),
    "prod": lambda m, F, t, i: t(2, 4).prod(1),
    "sum": lambda m, F, t, i: t(2, 4).sum(),
    "sum_dtype": lambda m, F, t, i: t(2, 4).sum(1, dtype=m.float64),
    "cumsum": lambda m, F, t, i: t(2, 4).cumsum(1),
    "cumprod": lambda m, F, t, i: t(2, 4).cumprod(1),
    "softmax": lambda m, F, t, i: t(2, 4).softmax(1),
    "log_softmax": lambda m, F, t, i: F.log_softmax(t(2, 4), dim=1),
    "trace": lambda m, F, t, i: t(3, 3).trace(),
    "max_pool3d": lambda m, F, t, i: F.max_pool3d(t(1, 1, 2, 2, 2), 2),
    "avg_pool3d": lambda m, F, t, i: F.avg_pool3d(t(1, 1, 2, 2, 2), 2),
    "adaptive_avg_pool3d": lambda m, F, t, i: F.adaptive_avg_pool3d(t(1, 1, 2, 2, 2), 1),
    "adaptive_max_pool3d": lambda m, F, t, i: F.adaptive_max_pool3d(t(1, 1, 2, 2, 2), 1),
    "fractional_max_pool2d": lambda m, F, t, i: F.fractional_max_pool2d(t(1, 1, 3, 3), 2, 2),
    "fractional_max_pool3d": lambda m, F, t, i: F.fractional_max_pool3d(t(1, 1, 4, 4, 4), 2, 2),
    "max_unpool2d": lambda m, F, t, i: F.max_unpool2d(
        *F.max_pool2d(t(1, 1, 2, 2), 2, return_indices=True), 2
    ),
    "max_unpool3d": lambda m, F, t, i: F.max_unpool3d(
        *F.max_pool3d(t(1, 1, 2, 2, 2), 2, return_indices=True), 2
    ),
    # promote (one input of each: the region's dtype and float32 give float32)
    "cat": lambda m, F, t, i: m.cat([t(2), t(3)]),
    "stack": lambda m, F, t, i: m.stack([t(2), t(2)]),
    "index_copy": lambda m, F, t, i: t(3, 2).index_copy(0, i([2, 0]), t(2, 2)),
    "index_put": lambda m, F, t, i: t(3).index_put((i([1]),), t(1)),
    "scatter_add": lambda m, F, t, i: t(3).scatter_add(0, i([0, 2]), t(2)),
    "addcmul": lambda m, F, t, i: m.addcmul(t(3), t(3), t(3)),
    "addcdiv": lambda m, F, t, i: m.addcdiv(t(3), t(3), t(3)),
    "atan2": lambda m, F, t, i: m.atan2(t(3), t(3)),
    "dot": lambda m, F, t, i: m.dot(t(3), t(3)),
    # outside every list: the inputs' dtype
    "add": lambda m, F, t, i: t(3) + t(3),
    "mul_scalar": lambda m, F, t, i: t(3) * 0.1,
    "sqrt": lambda m, F, t, i: t(3).sqrt(),
    "sin": lambda m, F, t, i: t(3).sin(),
    "relu": lambda m, F, t, i: F.relu(t(3)),
    "sigmoid": lambda m, F, t, i: t(3).sigmoid(),
    "tanh": lambda m, F, t, i: t(3).tanh(),
    "gelu": lambda m, F, t, i: F.gelu(t(3)),
    "gelu_tanh": lambda m, F, t, i: F.gelu(t(3), approximate="tanh"),
    "silu": lambda m, F, t, i: F.silu(t(3)),
    "mish": lambda m, F, t, i: F.mish(t(3)),
    "elu": lambda m, F, t, i: F.elu(t(3)),
    "selu": lambda m, F, t, i: F.selu(t(3)),
    "logsigmoid": lambda m, F, t, i: F.logsigmoid(t(3)),
    "softsign": lambda m, F, t, i: F.softsign(t(3)),
    "hardswish": lambda m, F, t, i: F.hardswish(t(3)),
    "softmin": lambda m, F, t, i: F.softmin(t(2, 3), dim=1),
    "mean": lambda m, F, t, i: t(2, 3).mean(),
    "var": lambda m, F, t, i: t(2, 3).var(1),
    "std": lambda m, F, t, i: t(2, 3).std(),
    "amax": lambda m, F, t, i: t(2, 3).amax(1),
    "outer": lambda m, F, t, i: m.outer(t(2), t(3)),
    "batch_norm": lambda m, F, t, i: F.batch_norm(t(2, 3), None, None, training=True),
    "instance_norm": lambda m, F, t, i: F.instance_norm(t(2, 3, 4)),
    "normalize": lambda m, F, t, i: F.normalize(t(2, 3)),
    "pairwise_distance": lambda m, F, t, i: F.pairwise_distance(t(2, 3), t(2, 3)),
    "max_pool2d": lambda m, F, t, i: F.max_pool2d(t(1, 1, 2, 2), 2),
    "avg_pool2d": lambda m, F, t, i: F.avg_pool2d(t(1, 1, 2, 2), 2),
    "interpolate": lambda m, F, t, i: F.interpolate(t(1, 1, 2), scale_factor=2),
    "pad_constant": lambda m, F, t, i: F.pad(t(1, 2), (1, 1)),
    "dropout": lambda m, F, t, i: F.dropout(t(3), 0.5, training=False),
    "embedding": lambda m, F, t, i: F.embedding(i([1, 0]), t(3, 2)),
}

# torch 2.13 on the cpu, autocast("cpu") (bfloat16): the result's dtype for float32 inputs
# and for bfloat16 inputs. Measured with torch (test_cpu_table_is_live_torchs re-measures).
CPU = {
    **dict.fromkeys(
        ["matmul", "mm", "bmm", "addmm", "baddbmm", "addbmm", "linear", "conv1d", "conv2d"]
        + ["conv3d", "conv_transpose1d"]
        + ["conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention"]
        + ["einsum"],
        (L, L),
    ),
    **dict.fromkeys(
        ["mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "nll_loss"]
        + ["cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits"]
        + ["margin_ranking_loss", "cosine_embedding_loss", "triplet_margin_loss", "cdist"]
        + ["prod", "trace", "max_pool3d", "avg_pool3d", "adaptive_avg_pool3d"]
        + ["adaptive_max_pool3d", "max_unpool2d", "max_unpool3d", "hinge_embedding_loss"]
        + ["poisson_nll_loss", "soft_margin_loss", "multi_margin_loss"]
        + ["multilabel_margin_loss", "fractional_max_pool2d", "fractional_max_pool3d"],
        (H, H),
    ),
    **dict.fromkeys(["cat", "stack", "index_copy"], (S, S)),
    "sum_dtype": ("float64", "float64"),
}

# torch 2.13's CUDA lists (autocast_mode.h): float16 regions, float32 and float16 inputs
CUDA = {
    **dict.fromkeys(
        ["matmul", "mm", "bmm", "addmm", "addmv", "baddbmm", "addbmm", "linear", "conv1d"]
        + ["conv2d", "conv3d", "conv_transpose1d"]
        + ["conv_transpose2d", "conv_transpose3d", "prelu", "scaled_dot_product_attention"]
        + ["einsum"],
        (L, L),
    ),
    **dict.fromkeys(
        ["exp", "log", "log1p", "expm1", "log2", "log10", "reciprocal", "rsqrt", "sinh"]
        + ["erfinv"]
        + ["cosh", "tan", "acos", "asin", "pow", "pow_tensor", "softplus", "layer_norm"]
        + ["group_norm", "cosine_similarity", "mse_loss", "l1_loss", "smooth_l1_loss"]
        + ["huber_loss", "kl_div", "nll_loss", "cross_entropy"]
        + ["binary_cross_entropy_with_logits", "margin_ranking_loss", "cosine_embedding_loss"]
        + ["triplet_margin_loss", "cdist", "dist", "logsumexp", "norm", "vector_norm"]
        + ["matrix_norm"]
        + ["prod", "sum", "cumsum", "cumprod", "softmax", "log_softmax", "interpolate"]
        + ["hinge_embedding_loss", "poisson_nll_loss", "soft_margin_loss", "multi_margin_loss"]
        + ["multilabel_margin_loss"],
        (H, H),
    ),
    "binary_cross_entropy": ("raises", "raises"),
    "sum_dtype": ("float64", "float64"),
    # composites in torch too, whose inner softmax / norm autocast runs in float32
    **dict.fromkeys(["softmin", "normalize", "pairwise_distance", "gaussian_nll_loss"], (H, H)),
    # torch's composites whose sum over the classes / norm autocast runs in float32
    **dict.fromkeys(["multilabel_soft_margin_loss", "triplet_margin_with_distance_loss"], (H, H)),
}
PROMOTES = {"cpu": ["cat", "stack", "index_copy"]}
PROMOTES["cuda"] = ["index_put", "scatter_add", "addcmul", "addcdiv", "atan2", "dot"]


def _result(lib, Fm, name, dtype, device):
    out = CASES[name](lib, Fm, lambda *s: _t(lib, s, dtype, device), lambda v: _idx(lib, v, device))
    return out[0] if isinstance(out, tuple) else out


def _expected(table, name, lower, inp):
    want = table.get(name, (S, S))[0 if inp == "float32" else 1]
    return {L: lower, H: "float32", S: inp}.get(want, want)


def _run_fg(name, device_type, dtype, inp, device):
    with fg.autocast(device_type, dtype=getattr(fg, dtype)):
        try:
            return _result(fg, F, name, getattr(fg, inp), device).dtype.name
        except fg.errors.FusegradError as e:
            if "unsafe to autocast" in str(e):
                return "raises"
            raise


@pytest.mark.parametrize("inp", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cpu_policy(name, inp):
    assert _run_fg(name, "cpu", "bfloat16", inp, "cpu") == _expected(CPU, name, "bfloat16", inp)


@pytest.mark.parametrize("name", ["matmul", "linear", "conv2d", "mse_loss", "cat"])
def test_cpu_policy_in_a_float16_region(name):
    want = _expected(CPU, name, "float16", "float32")
    assert _run_fg(name, "cpu", "float16", "float32", "cpu") == want


@pytest.mark.parametrize("inp", ["float32", "float16"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_policy(emulated, name, inp):  # noqa: F811  (the fixture)
    assert _run_fg(name, "cuda", "float16", inp, "cuda") == _expected(CUDA, name, "float16", inp)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_promote_takes_the_widest_input(emulated, device):  # noqa: F811
    lower = fg.get_autocast_dtype(device)
    region_lower = fg.ones(2, dtype=lower, device=device)
    wide = fg.ones(2, device=device)
    for name in PROMOTES[device]:
        count = [0]

        def pair(*shape, count=count):  # alternate: the first input 16 bits, the next float32
            count[0] += 1
            return _t(fg, shape, lower if count[0] % 2 else fg.float32, device)

        with fg.autocast(device):
            out = CASES[name](fg, F, pair, lambda v: _idx(fg, v, device))
            assert out.dtype is fg.float32, name
    with fg.autocast(device):  # a float64 input is neither counted nor cast
        mixed = fg.cat([region_lower, wide.double()]) if device == "cpu" else None
        if mixed is not None:
            assert mixed.dtype is fg.float64
        other = fg.bfloat16 if lower is fg.float16 else fg.float16
        with pytest.raises(fg.errors.DTypeError, match="autocast"):
            CASES[PROMOTES[device][0]](
                fg,
                F,
                lambda *s: _t(fg, s, other, device),
                lambda v: _idx(fg, v, device),
            )


def test_every_row_of_the_policy_has_a_case_and_every_decorated_op_a_row():
    import pathlib
    import re

    from fusegrad.autocast_policy import NATIVE, POLICY
    from fusegrad.ir.ops import MATH

    for device, rows in POLICY.items():
        assert sorted(set(rows) - set(CASES)) == [], device
    root = pathlib.Path(__file__).resolve().parents[2]
    named = set()
    known = set(NATIVE).union(*POLICY.values())
    for path in list((root / "frontend").glob("*.py")) + list((root / "nn").glob("*.py")):
        named |= set(re.findall(r'^\s*@autocast_op\("(\w+)"\)', path.read_text(), re.M))
    named |= {op.name for op in MATH.values()} & known  # mathops.PRIMITIVES: exp, log, ...
    assert sorted(named - known) == []  # a misspelt name would silently join no row
    assert sorted(known - named) == []  # a row whose op never asks for its policy


# ---------------------------------------------------------------- live torch (cpu)


def test_cpu_table_is_live_torchs():
    torch = pytest.importorskip("torch")
    TF = torch.nn.functional
    wrong = []
    for name in sorted(CASES):
        for inp in ("float32", "bfloat16"):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                got = _result(torch, TF, name, getattr(torch, inp), "cpu").dtype
            got = str(got).removeprefix("torch.")
            if got != _expected(CPU, name, "bfloat16", inp):
                wrong.append((name, inp, got))
    assert not wrong
