"""exp's two ways to scale by 2^n (`pipeline/llvm_math.py`) give the same bits.

On an AVX-512 host exp clamps its argument and scales with `vscalefps` (AVX-512's own
intrinsic for whole registers, `llvm.ldexp` otherwise); elsewhere it scales in integer
arithmetic and selects its special cases. A host runs only one of them through the public
API (tests/pipeline/test_math.py measures that one's ulps), so here both are compiled side
by side and run on the same arguments, scalar and at several vector widths: every special
value, the subnormal results, the overflow edge, and a dense sweep of the range.
"""

from __future__ import annotations

import ctypes
import platform

import numpy as np
import pytest

from fusegrad.pipeline import llvm_math

llvm = pytest.importorskip("llvmlite.binding")

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not llvm_math.host_scales_in_one_instruction(),
    reason="the scalef path needs an AVX-512 host",
)

# scalar; a half register (llvm.ldexp), one register and four (AVX-512's scalef, the
# vector cut into registers: a cascade's 64 lanes)
WIDTHS = {"float": [None, 8, 16, 64], "double": [None, 4, 8, 32]}
NP = {"float": np.float32, "double": np.float64}


def arguments(elem: str) -> np.ndarray:
    rng = np.random.default_rng(32)
    lo, hi = (-750.0, 712.0) if elem == "double" else (-110.0, 95.0)
    edges = {
        "float": [88.72283935546875, 88.72284698486328, -103.97, -104.0, -104.00001, -87.3],
        "double": [709.782712893384, 709.79, -745.13, -745.2, -745.3, -708.4],
    }[elem]
    special = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 3e38, -3e38, 1e300]
    x = np.concatenate(
        [
            np.linspace(lo, hi, 1 << 20),
            rng.uniform(lo, hi, 1 << 18),
            rng.uniform(-1, 1, 1 << 16),
            np.array(special + edges),
        ]
    )
    with np.errstate(over="ignore"):
        x = x.astype(NP[elem])
    pad = -len(x) % 64
    return np.concatenate([x, np.zeros(pad, x.dtype)])


def compiled_exp(elem: str, width: int | None, scalef: bool, monkeypatch):
    """A function (x, y, n) that writes exp(x[i]) to y[i], through one path."""
    monkeypatch.setattr(llvm_math, "host_scales_in_one_instruction", lambda: scalef)
    text, decls = llvm_math.math_functions({("exp", elem, width)})
    ty = llvm_math.vector_type(elem, width)
    fn = llvm_math.function_name("exp", elem, width)
    source = "\n".join(
        [
            *sorted(decls),
            text,
            f"""define void @run(ptr %x, ptr %y, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [0, %entry], [%next, %loop]
  %px = getelementptr {ty}, ptr %x, i64 %i
  %v = load {ty}, ptr %px, align 8
  %r = call {ty} {fn}({ty} %v)
  %py = getelementptr {ty}, ptr %y, i64 %i
  store {ty} %r, ptr %py, align 8
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}}""",
        ]
    )
    assert ("llvm.ldexp" in source or "scalef" in source) == scalef
    source += FLAGS_IR
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    machine = llvm.Target.from_default_triple().create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(source), machine)
    engine.finalize_object()
    asm = machine.emit_assembly(llvm.parse_assembly(source))
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("run")
    )

    flags = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("flags")
    )

    def apply(x: np.ndarray) -> np.ndarray:
        y = np.empty_like(x)
        run(x.ctypes.data, y.ctypes.data, len(x) // (width or 1))
        return y

    def raised(x: np.ndarray) -> int:
        """The MXCSR exception flags the run over x raised."""
        y = np.empty_like(x)
        return flags(x.ctypes.data, y.ctypes.data, len(x) // (width or 1))

    apply.raised = raised
    return apply, asm, engine


# @flags(x, y, n): @run between clearing MXCSR's six sticky exception flags and reading them
FLAGS_IR = """
declare void @llvm.x86.sse.stmxcsr(ptr)
declare void @llvm.x86.sse.ldmxcsr(ptr)
define i32 @flags(ptr %x, ptr %y, i64 %n) {
entry:
  %m = alloca i32, align 4
  call void @llvm.x86.sse.stmxcsr(ptr %m)
  %before = load i32, ptr %m
  %cleared = and i32 %before, -64
  store i32 %cleared, ptr %m
  call void @llvm.x86.sse.ldmxcsr(ptr %m)
  call void @run(ptr %x, ptr %y, i64 %n)
  call void @llvm.x86.sse.stmxcsr(ptr %m)
  %after = load i32, ptr %m
  %raised = and i32 %after, 63
  ret i32 %raised
}
"""
UNDERFLOW = 0x10  # MXCSR's UE flag


@pytest.mark.parametrize("scalef", [True, False])
@pytest.mark.parametrize("elem", ["float", "double"])
def test_arguments_whose_result_is_zero_underflow_no_scale(elem, scalef, monkeypatch):
    # below lo, exp is +0: those lanes compute exp(0) and are replaced, because a scale
    # that underflows takes a microcode assist on Intel cores (a causal mask's -inf lanes
    # made a masked softmax 4x slower). MXCSR's underflow flag says whether any scale did;
    # a subnormal result (that of -90 in float) must still raise it (the probe works).
    lo, subnormal = (-745.2, -740.0) if elem == "double" else (-104.0, -90.0)
    zeros = np.array([-np.inf, -1e4, lo * 1.01, -3e38] * 16, dtype=NP[elem])
    for width in WIDTHS[elem]:
        run, _, keep = compiled_exp(elem, width, scalef, monkeypatch)
        assert (run(zeros) == 0).all() and not np.signbit(run(zeros)).any()
        assert not run.raised(zeros) & UNDERFLOW, width
        assert run.raised(np.full(64, subnormal, NP[elem])) & UNDERFLOW, width


@pytest.mark.parametrize("elem", ["float", "double"])
@pytest.mark.parametrize("k", range(4))
def test_scalef_and_integer_scaling_give_the_same_bits(elem, k, monkeypatch):
    width = WIDTHS[elem][k]
    x = arguments(elem)
    scalef, asm, keep1 = compiled_exp(elem, width, True, monkeypatch)
    integer, _, keep2 = compiled_exp(elem, width, False, monkeypatch)
    assert "vscalef" in asm and "ldexp" not in asm  # one instruction, not a library call
    a, b = scalef(x), integer(x)
    bits = np.uint32 if elem == "float" else np.uint64
    same = (a.view(bits) == b.view(bits)) | (np.isnan(a) & np.isnan(b))
    assert same.all(), (x[~same][:5], a[~same][:5], b[~same][:5])
    # and they are exp: the special values exactly, the rest near numpy's
    with np.errstate(over="ignore", invalid="ignore"):
        want = np.exp(x.astype(np.float64))
        finite = np.isfinite(want.astype(x.dtype))
    np.testing.assert_array_equal(np.isnan(a), np.isnan(want))
    assert (a[~finite & ~np.isnan(want)] == np.inf).all()
    assert (a[x == -np.inf] == 0).all()
    info = np.finfo(x.dtype)
    atol = 2 * info.smallest_subnormal  # subnormal results: a step of the grid
    np.testing.assert_allclose(a[finite], want[finite], rtol=4 * info.eps, atol=atol)
