"""The CPU kernels are vectorized at the host's widest vector width and call no libm.

Reads the optimized LLVM IR and the assembly that llvmlite emits for a few
kernels, and checks them against what the host CPU offers (from the flags in
/proc/cpuinfo, and LLVM's own vector width for the CPU): the arithmetic runs as
packed instructions on zmm registers where the CPU has AVX-512 and LLVM uses it
(ymm on CPUs LLVM tunes for 256-bit vectors), ymm with AVX/AVX2, xmm otherwise,
and exp/log/sin are inline polynomials, not calls. Each kernel's result is also
checked against numpy.
"""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

import fusegrad as fg
from fusegrad.pipeline import llvm_math

pytestmark = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"),
    reason="register names and mnemonics checked here are x86's",
)

N = 1 << 16
RNG = np.random.default_rng(7)


def cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def widest_register() -> tuple[str, int]:
    """The widest vector register the host has, and its width in bits."""
    flags = cpu_flags()
    if "avx512f" in flags:
        return "zmm", 512
    if "avx2" in flags or "avx" in flags:
        return "ymm", 256
    return "xmm", 128


def preferred_register() -> tuple[str, int]:
    """The register LLVM's loop vectorizer fills on this host.

    The widest one, except where LLVM's tuning for the CPU prefers narrower vectors:
    on Skylake-SP and Cascade Lake (AVX-512, with 256-bit vectors preferred, as clang
    does there) loops vectorized by LLVM use ymm, while fusegrad's explicit 16-lane
    vectors (tiles, sums) still use zmm. Found by vectorizing a plain float loop
    through fusegrad's own compile pipeline, independently of fusegrad's lowering.
    """
    reg, bits = widest_register()
    if reg == "zmm" and "zmm" not in _probe_registers():
        return "ymm", 256
    return reg, bits


def _probe_registers() -> set[str]:
    from fusegrad.pipeline.compiler import _optimized, _target

    source = """
define void @probe(ptr noalias %out, ptr noalias %a, ptr noalias %b) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %pa = getelementptr float, ptr %a, i64 %i
  %pb = getelementptr float, ptr %b, i64 %i
  %po = getelementptr float, ptr %out, i64 %i
  %x = load float, ptr %pa, align 4
  %y = load float, ptr %pb, align 4
  %m = fmul float %x, %y
  %s = fadd float %m, %x
  store float %s, ptr %po, align 4
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, 65536
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""
    tm, _, _ = _target()
    with _optimized(source) as mod:
        return set(re.findall(r"%([xyz]mm)\d", tm.emit_assembly(mod)))


REG, BITS = widest_register()
PREFERRED_REG, PREFERRED_BITS = preferred_register()

# (i)ntrinsics that LLVM lowers to libm calls, and any call that is not an intrinsic
LIBM_INTRINSIC = re.compile(r"@llvm\.(exp|exp2|exp10|log|log2|log10|sin|cos|tan|pow)\.")
NON_INTRINSIC_CALL = re.compile(r"\bcall\b[^@\n]*@(?!llvm\.)([\w.$]+)")
ASM_CALL = re.compile(r"^\s*(call\w*|jmp\w*)\s+([^\s%*.][^\s]*)\s*$", re.M)
LIBM_NAME = re.compile(r"\b(expf?|logf?|sinf?|cosf?|__\w+_finite|sincosf?)(@PLT)?\b")


def packed_ops(asm: str, reg: str, suffix: str) -> set[str]:
    """Mnemonics of packed float instructions (`...ps`/`...pd`) that name a `reg` register."""
    pattern = re.compile(rf"^\s*(v?\w+{suffix})\s[^\n]*%{reg}\d", re.M)
    return set(pattern.findall(asm))


def vector_lanes(ir: str, ty: str) -> int:
    """The widest `<N x ty>` vector type in the IR (0 if none)."""
    return max((int(n) for n in re.findall(rf"<(\d+) x {ty}>", ir)), default=0)


# what a kernel may call: the C library for a rare lane (`llvm_math._rare_lanes`: a sine of
# |x| >= 2^50, a remainder of a huge ratio), in a function of its own, and a branching
# function's scalar form, in the loop's remainder after its vector iterations
_RARE_IR = re.compile(
    r"^define internal [^\n]*@fg_\w+_rare_\w+\(.*?^}\n|^declare [^\n]*\n", re.M | re.S
)  # (and the declarations those functions need)
_RARE_ASM = re.compile(r"^fg_\w+_rare_\w+:.*?^\.Lfunc_end\d+:", re.M | re.S)
_SCALAR_FORM = re.compile(r"fg_(\w+)_(float|double)$")


def _may_call(name: str) -> bool:
    m = _SCALAR_FORM.match(name)
    return "_rare_" in name or (m is not None and m.group(1) in llvm_math._BRANCHING)


def check_vectorized(k, dtype, kinds: list[tuple[str, ...]]) -> None:
    """The kernel computes in full-width packed instructions of each kind, with no calls
    (but for a rare lane's, `_may_call`)."""
    asm, ir = _RARE_ASM.sub("", k.asm), _RARE_IR.sub("", k.llvm_ir_optimized)
    suffix, ty, bits = ("ps", "float", 32) if dtype == np.float32 else ("pd", "double", 64)
    # the widest register, or the one LLVM prefers on this CPU where that is narrower
    regs = sorted({REG, PREFERRED_REG})
    ops = set().union(*(packed_ops(asm, r, suffix) for r in regs))
    for kind in kinds:
        names = [op for op in ops if any(op.lstrip("v").startswith(k_) for k_ in kind)]
        assert names, (
            f"{k.name}: no packed {'/'.join(kind)}{suffix} on {'/'.join(regs)}; packed ops: {ops}"
        )
    assert vector_lanes(ir, ty) >= PREFERRED_BITS // bits, (
        f"{k.name}: widest vector in the optimized IR is <{vector_lanes(ir, ty)} x {ty}>"
    )
    calls = [c for c in NON_INTRINSIC_CALL.findall(ir) if not _may_call(c)]
    assert not calls, f"{k.name} calls {calls}"
    assert not LIBM_INTRINSIC.findall(ir), f"{k.name} uses {LIBM_INTRINSIC.findall(ir)}"
    calls = [c for c in ASM_CALL.findall(asm) if not _may_call(c[1].removesuffix("@PLT"))]
    assert not calls, f"{k.name} asm calls {calls}"
    assert not LIBM_NAME.findall(asm), f"{k.name} asm names {LIBM_NAME.findall(asm)}"


def one_kernel(t):
    ks = fg.kernels(t)
    assert len(ks) == 1, [(k.name, k.reason) for k in ks]
    return ks[0]


MUL = ("mul", "fmadd", "fmsub", "fnmadd", "fnmsub")
ADD = ("add", "fmadd", "fmsub", "fnmadd", "fnmsub")
FMA = ("fmadd", "fmsub", "fnmadd", "fnmsub") if REG != "xmm" else ("mul",)


def chain(x):
    if isinstance(x, np.ndarray):
        return np.maximum(np.exp(x * 0.5 + 1.0) * x - 3.0, 0) / (1 + x * x)
    return (((x * 0.5 + 1.0).exp() * x - 3.0).relu()) / (1 + x * x)


def test_host_register_detection_agrees_with_llvm():
    import llvmlite.binding as llvm

    llvm.initialize_native_target()
    features = llvm.get_host_cpu_features()
    want = {"zmm": "avx512f", "ymm": "avx"}.get(REG)
    if want:
        assert features.get(want), f"/proc/cpuinfo has {want} but LLVM does not see it"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_elementwise_chain_is_vectorized_without_libm(dtype):
    a = RNG.standard_normal(N).astype(dtype)
    y = chain(fg.from_numpy(a))
    k = one_kernel(y)
    check_vectorized(k, dtype, [MUL, ADD, FMA, ("div",)])
    np.testing.assert_allclose(y.numpy(), chain(a.astype(np.float64)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_log_kernel_is_vectorized_without_libm(dtype):
    a = np.abs(RNG.standard_normal(N)).astype(dtype) + dtype(1e-3)
    y = fg.from_numpy(a).log()
    check_vectorized(one_kernel(y), dtype, [MUL, FMA])
    np.testing.assert_allclose(y.numpy(), np.log(a.astype(np.float64)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_sin_kernel_is_vectorized_without_libm(dtype):
    a = (RNG.standard_normal(N) * 100).astype(dtype)
    y = fg.from_numpy(a).sin()
    k = one_kernel(y)
    if dtype == np.float32:
        # float32 sin may reduce its argument in double: full-width packed doubles count too
        try:
            check_vectorized(k, np.float32, [FMA])
        except AssertionError:
            check_vectorized(k, np.float64, [FMA])
    else:
        check_vectorized(k, dtype, [FMA])
    np.testing.assert_allclose(y.numpy(), np.sin(a.astype(np.float64)), rtol=1e-5, atol=1e-6)


def test_an_elementwise_kernel_is_left_to_the_vectorizer_and_a_sum_to_the_unroller_too():
    # a ResNet BatchNorm backward's transposing kernel: LLVM unrolled its short inner loop
    # fully, then vectorized the loop around it as interleaved groups of strided stores,
    # a second's compile; its loops are marked not to unroll, and it is still vectorized
    a = RNG.standard_normal((16, 16, 512)).astype(np.float32)
    y = (fg.from_numpy(a).permute(0, 2, 1) * 2.0 + 1.0).relu()
    k = one_kernel(y)
    assert '!"llvm.loop.unroll.disable"' in k.llvm_ir
    assert "llvm.loop.unroll.disable" in k.llvm_ir_optimized  # (kept on the vector loop)
    np.testing.assert_array_equal(y.numpy(), np.maximum(a.transpose(0, 2, 1) * 2 + 1, 0))
    x = fg.from_numpy(RNG.standard_normal(N).astype(np.float32))
    check_vectorized(one_kernel(chain(x)), np.float32, [MUL])
    assert "llvm.loop.unroll.disable" in one_kernel(chain(x)).llvm_ir
    s = fg.from_numpy(a.reshape(256 * 512 // 4, 4)).sum(1)  # (its short loop: unrolled)
    assert "unroll.disable" not in one_kernel(s).llvm_ir


def test_a_reductions_long_loops_are_not_unrolled_and_a_windows_are():
    # a BatchNorm's statistics: 64 rows of 32-lane vectors summed, which O3 unrolled into
    # 60 KB of code (0.1 s of LLVM) for no faster a kernel; a 3 x 3 window's loops are
    # still the unroller's (their offsets become constants)
    a = RNG.standard_normal((16, 64, 256)).astype(np.float32)
    s = fg.from_numpy(a).sum((0, 1))
    k = one_kernel(s)
    assert '!"llvm.loop.unroll.disable"' in k.llvm_ir
    np.testing.assert_allclose(s.numpy(), a.astype(np.float64).sum((0, 1)), rtol=1e-5, atol=1e-4)
    assert max(k.llvm_ir_optimized.count("\n"), 1) < 4 * k.llvm_ir.count("\n")
    x = fg.from_numpy(RNG.standard_normal((2, 3, 8, 8)).astype(np.float32))
    w = fg.from_numpy(RNG.standard_normal((4, 3, 3, 3)).astype(np.float32))
    y = fg.nn.functional.conv2d(x, w, padding=1).realize()
    (conv,) = [k for k in fg.kernels(y) if k.name.startswith("r_sum")]
    assert re.search(r"icmp slt i64 %r\d\.\d+, 3\n", conv.llvm_ir)  # (a window's loop of 3)
    assert "unroll.disable" not in conv.llvm_ir


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_row_sum_reduction_is_vectorized(dtype):
    a = RNG.standard_normal((256, 256)).astype(dtype)
    y = fg.from_numpy(a).sum(1)
    check_vectorized(one_kernel(y), dtype, [("add",)])
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64).sum(1), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_column_sum_reduction_is_vectorized(dtype):
    a = RNG.standard_normal((256, 256)).astype(dtype)
    y = fg.from_numpy(a).sum(0)
    check_vectorized(one_kernel(y), dtype, [("add",)])
    np.testing.assert_allclose(y.numpy(), a.astype(np.float64).sum(0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("hw", [32, 8, 7])
def test_a_per_channel_sum_over_images_and_planes_is_cascaded_in_vector_lanes(hw):
    """A batch norm's statistics: a sum over N, H and W of N x C x H x W for each channel.
    H and W, adjacent, are one loop over each image's plane (never merged with N, the
    channels between), so a plane of 32 x 32 is summed in cascaded vector lanes, not as
    one scalar chain per channel (ResNet-18's batch norms: 2-3x faster), and so is one of
    8 x 8 (two vectors of 32 lanes); a plane of 7 x 7 (49 values, under
    `CASCADE_MIN_ROW`) is one loop too."""
    a = RNG.standard_normal((16, 24, hw, hw)).astype(np.float32)
    y = fg.from_numpy(a).sum((0, 2, 3))
    k = one_kernel(y)
    if hw == 32:  # 16 images x 16 runs of 64 lanes each
        assert "vector for t in 0..64" in k.loop_ir and "add over acc" in k.loop_ir, k.loop_ir
        check_vectorized(k, np.float32, [("add",)])
    elif hw == 8:  # 16 images x 2 runs of 32 lanes
        assert "vector for t in 0..32" in k.loop_ir and "add over acc" in k.loop_ir, k.loop_ir
    else:
        assert "for r1 in 0..49:" in k.loop_ir, k.loop_ir
    want = a.astype(np.float64).sum((0, 2, 3))
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(REG != "zmm", reason="the 16-lane output pass is AVX-512's")
def test_a_cross_entropy_gradient_row_kernel_fills_whole_registers():
    """A classifier's gradient, `softmax(x) - onehot(t)`, is one row kernel whose output
    pass compares each class with the 64-bit target: LLVM alone fills a register's 4
    int64s and so runs the floats 4 lanes at a time. The output pass asks for 16 lanes
    (one AVX-512 register of floats): 1.6x the speed on 1024 x 5000 logits."""
    x = RNG.standard_normal((64, 300)).astype(np.float32)
    t = RNG.integers(0, 300, size=64)
    xt = fg.from_numpy(x).requires_grad_()
    fg.nn.functional.cross_entropy(xt, fg.from_numpy(t)).backward()
    ks = [k for k in fg.kernels(xt.grad) if "(16 lanes)" in k.loop_ir]
    assert ks, [k.loop_ir for k in fg.kernels(xt.grad)]
    check_vectorized(ks[0], np.float32, [MUL])
    e = np.exp(x - x.max(1, keepdims=True))
    want = e / e.sum(1, keepdims=True)
    want[np.arange(64), t] -= 1
    np.testing.assert_allclose(xt.grad.numpy(), want / 64, rtol=1e-5, atol=1e-7)


def test_a_sum_over_a_transposed_view_is_vectorized():
    """A full sum of a transposed view (the squared norm of a weight gradient that a
    product stored transposed, as `clip_grad_norm_` takes it) loops over the contiguous
    axis innermost, in vector lanes, not down each column one element at a time (3x
    faster on 5000 x 256; and one scalar chain of 1.3M additions lost 4 digits)."""
    a = RNG.standard_normal((256, 520)).astype(np.float32)
    v = fg.from_numpy(a)[:, :500].T
    y = (v * v).sum()
    check_vectorized(one_kernel(y), np.float32, [ADD])
    want = (a[:, :500].astype(np.float64) ** 2).sum()
    assert abs(y.item() - want) <= 1e-6 * want


def test_row_max_reduction_is_vectorized():
    a = RNG.standard_normal((256, 256)).astype(np.float32)
    y = fg.from_numpy(a).amax(1)
    check_vectorized(one_kernel(y), np.float32, [("max",)])
    np.testing.assert_array_equal(y.numpy(), a.max(1))


def test_matmul_is_vectorized():
    a = RNG.standard_normal((128, 128)).astype(np.float32)
    b = RNG.standard_normal((128, 128)).astype(np.float32)
    y = fg.from_numpy(a) @ fg.from_numpy(b)
    check_vectorized(one_kernel(y), np.float32, [MUL, ADD])
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-4, atol=1e-4)


def test_the_checks_see_a_scalar_kernel():
    """The helpers must tell a scalar loop from a vector one, or the tests above prove nothing."""
    scalar = "\tvmulss\t%xmm1, %xmm0, %xmm0\n\tcallq\texpf@PLT\n"
    vector = "\tvmulps\t%zmm1, %zmm0, %zmm0\n\tvfmadd213ps\t(%rax), %zmm2, %zmm0\n"
    assert packed_ops(scalar, "zmm", "ps") == set()
    assert packed_ops(vector, "zmm", "ps") == {"vmulps", "vfmadd213ps"}
    assert ASM_CALL.findall(scalar) and not ASM_CALL.findall(vector)
    assert LIBM_NAME.findall(scalar)
    ir = "%1 = call float @expf(float %x)\n%2 = call <16 x float> @llvm.fma.v16f32(<16 x float>"
    assert NON_INTRINSIC_CALL.findall(ir) == ["expf"]
    assert vector_lanes(ir, "float") == 16


# ---------------------------------------------------------------- vector indices


def _vindex_both_ways(e, width: int = 8):
    """vindex's text through its affine shortcut and lane by lane, each from a fresh renderer
    inside a vector loop over `v` with an outer loop variable `i`."""
    from fusegrad.ir.symbolic import Var
    from fusegrad.pipeline.llvm import _Renderer
    from fusegrad.pipeline.loopir import Kernel

    texts = []
    for way in ("vindex", "vindex_lane_by_lane"):
        r = _Renderer(Kernel("k", [], [], 1, 0), "k")
        r.width, r.vec_var = width, Var("v", 0, width - 1)
        r.loop_names["i"] = "i.1"
        value = getattr(r, way)(e)
        texts.append((value, list(r.lines)))
    return texts


@pytest.mark.parametrize(
    "make",
    [
        lambda i, v: i * 64 + v,  # contiguous
        lambda i, v: i * 64 - v * 2 + 7,  # a negative stride
        lambda i, v: (i // 3) * 16 + (i % 3) + v * 4,  # divisions of another variable
    ],
)
def test_an_affine_vector_index_is_rendered_as_lane_by_lane(make):
    from fusegrad.ir.symbolic import Var, lin

    i, v = Var("i", 0, 99), Var("v", 0, 7)
    e = make(lin(i), lin(v))
    fast, slow = _vindex_both_ways(e)
    assert fast == slow


@pytest.mark.parametrize(
    "make, offsets",
    [
        (lambda v: v * 3 + 5, "<i64 0, i64 3, i64 6, i64 9, i64 12, i64 15, i64 18, i64 21>"),
        (lambda v: v * 0 + 9, None),  # the vector variable absent: the splat alone
    ],
)
def test_a_constant_vector_index_keeps_its_base_a_scalar_literal(make, offsets):
    """Lane k of `3k + 5` is the splat of 5 plus the lanes' offsets, not the constant
    vector <5, 8, ..., 26>: LLVM folds it the same, and the text keeps the base one scalar
    literal, which a kernel of other sizes reads from its literals (a ragged vector's
    bound: pipeline/templates.py)."""
    from fusegrad.ir.symbolic import Var, lin

    (value, lines), (lanes, _) = _vindex_both_ways(make(lin(Var("v", 0, 7))))
    base = 5 if offsets else 9
    assert lanes.startswith(f"<i64 {base},")  # (lane by lane: the constant vector)
    assert f"insertelement <8 x i64> poison, i64 {base}, i64 0" in lines[0]
    assert len(lines) == (3 if offsets else 2)
    if offsets:
        assert lines[2] == f"  {value} = add <8 x i64> {lines[1].split()[0]}, {offsets}"


def test_a_vector_index_through_a_division_goes_lane_by_lane():
    from fusegrad.ir.symbolic import Var, lin

    i, v = Var("i", 0, 99), Var("v", 0, 7)
    e = (lin(i) * 8 + lin(v)) // 3
    fast, slow = _vindex_both_ways(e)
    assert fast == slow and "insertelement" in "\n".join(fast[1])
