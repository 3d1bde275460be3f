"""CUDA C kernels the same up to their sizes run one generic kernel
(pipeline/cuda_templates.py): on the cuda device a plan of a graph met before with other
sizes builds only what differs in more than its literals, and computes what kernels built
for its own sizes compute. Values on the CPU emulator of the CUDA C; what a launch passes
through runtime/cuda_stub.py's stand-in driver."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from _emulated import emulated  # noqa: F401  (a fixture)

import fusegrad as fg
from fusegrad.pipeline import cuda_templates as ct
from fusegrad.runtime import cuda as runtime_cuda
from fusegrad.runtime.cuda_stub import StubDriver

KERNEL = """// kernel e_37: 37 values, 0.1f and 2.5f (the comment is not read)
__device__ float helper(float v) { return v * 3LL; }
extern "C" __global__ void __launch_bounds__(256, 2) FG_KERNEL(float* out0, const float* in0) {
  for (long long i = threadIdx.x; i < 37LL; i += 256LL) out0[i] = in0[i] * 2.5f + 0.1f;
}
extern "C" __global__ void FG_KERNEL_final(float* out0, const float* in0) {
  out0[0] = 37.0f;
}
"""


def test_the_literals_read_are_sizes_and_exact_floats_inside_the_kernels():
    shape = ct.shape_of(KERNEL)
    # the helper's 3LL and the comment's numbers are not read; 0.1f (not a float32's
    # value exactly: C rounds the decimal) stays in the text
    assert shape.literals == ("37", "256", "2.5", "37.0")
    assert shape.types == ("i64", "i64", "float", "float")
    other = ct.shape_of(KERNEL.replace("37", "53"))
    assert other.text == shape.text and other.literals == ("53", "256", "2.5", "53.0")
    assert ct.shape_of(KERNEL.replace("0.1f", "0.2f")).text != shape.text


def test_the_generic_source_reads_each_group_from_a_parameter_of_every_kernel():
    shape = ct.shape_of(KERNEL)
    code = ct.generic_source(KERNEL, shape, ((0, 3), (2,)))
    assert "i < ((long long)fg_l0)" in code and "i += 256LL" in code
    assert "* ((float)__longlong_as_double((long long)fg_l1)) + 0.1f" in code
    assert "out0[0] = ((float)__longlong_as_double((long long)fg_l0));" in code
    heads = [line for line in code.splitlines() if line.startswith('extern "C"')]
    assert len(heads) == 2
    assert all(h.endswith("unsigned long long fg_l0, unsigned long long fg_l1) {") for h in heads)
    assert "v * 3LL" in code  # (the helper's)
    # a float literal's word is its double's bits; an integer's, itself
    words = ct.words(shape, ((0,), (2,)))
    assert words == (37, struct.unpack("<Q", struct.pack("<d", 2.5))[0])


def test_a_kernel_with_tensor_maps_is_built_for_its_own_sizes():
    assert ct.code_of("void k(float* a FG_TMAP_PARAMS) {}".replace("k(", "x("), "x") is None
    assert ct.code_of("#define FG_TMAP_PARAMS\nvoid x(float* a) {}", "x") is not None


def _graph(x: fg.Tensor, w: fg.Tensor, ids: fg.Tensor, table: fg.Tensor):
    # a product, a max and a mean over the varying axis (a count and its reciprocal as
    # literals), a gather, and a sum long enough to split (scratch of another count)
    h = (x @ w).relu()
    return h.amax(1), x.mean(1), table[ids].sum(), (x * x).sum()


def _want(x, w, ids, table):
    x64 = x.astype(np.float64)
    h = np.maximum(x64 @ w, 0)
    return h.max(1), x64.mean(1), table[ids].astype(np.float64).sum(), (x64 * x64).sum()


def _run(rng, w, table, n: int) -> tuple[set[str], list]:
    """The graph at size `n` on the cuda device, its values checked against numpy: the
    functions its kernels launched (a generic kernel's are named by its code), and its
    kernels' compiled forms."""
    x = rng.standard_normal((4, n, 32)).astype(np.float32)
    x[0, 0, :3] = [np.nan, np.inf, -0.0]
    ids = rng.integers(0, 40, (4, n))
    wd, td = fg.tensor(w, device="cuda"), fg.tensor(table, device="cuda")
    outs = _graph(fg.tensor(x, device="cuda"), wd, fg.tensor(ids, device="cuda"), td)
    compiled = [r.compiled for r in fg.realize(*outs)]
    for got, want in zip(outs, _want(x, w, ids, table)):
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=2e-5, atol=2e-5)
    return {ln.symbol for c in compiled for ln in c.kernel.launches}, compiled


@pytest.mark.usefixtures("emulated")
def test_from_the_third_size_on_nothing_is_built_and_each_size_computes_its_values():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 8)).astype(np.float32)
    table = rng.standard_normal(40).astype(np.float32)
    seen, first = _run(rng, w, table, 9)
    assert all(c.own is None for c in first)  # (a first size: its own kernels)
    second, compiled = _run(rng, w, table, 13)
    generic = [c for c in compiled if c.own is not None]
    assert generic and all(c.kernel.lits for c in generic)
    # what a dump shows is the kernel's own code, at its own sizes
    assert all("13" in c.own.source and c.source == c.own.source for c in generic)
    assert all(ln.symbol.startswith(ct.GENERIC_PREFIX) for c in generic for ln in c.kernel.launches)
    seen |= second
    # sizes whose kernels take the same forms (a product's tiles are chosen by a size
    # class: 5 and 31 rows take other forms, built once each, then generic in turn)
    for n in (10, 12, 15, 11):
        symbols, _ = _run(rng, w, table, n)
        assert symbols <= seen, n
    for n in (5, 31, 300, 2, 29, 250):  # (300: the long sum splits over more blocks)
        _run(rng, w, table, n)


@pytest.mark.usefixtures("emulated")
def test_size_templates_off_builds_every_size_for_its_own():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((32, 6)).astype(np.float32)  # (plans of their own: not the
    table = rng.standard_normal(40).astype(np.float32)  # test's above, cached)
    with fg.config.override(size_templates=False):
        for n in (9, 13, 10):
            _, compiled = _run(rng, w, table, n)
            assert all(c.own is None for c in compiled)


@pytest.mark.usefixtures("emulated")
def test_a_generic_kernel_that_does_not_build_leaves_its_kernels_to_build_on_their_own(
    monkeypatch,
):
    made, right = [], ct.generic_source

    def broken(code, shape, groups):
        made.append(code)
        return right(code, shape, groups) + "\nthis does not compile;\n"

    monkeypatch.setattr(ct, "generic_source", broken)
    rng = np.random.default_rng(2)
    w = rng.standard_normal((32, 5)).astype(np.float32)
    table = rng.standard_normal(40).astype(np.float32)
    for n in (9, 13, 10, 12, 15, 11):
        _, compiled = _run(rng, w, table, n)  # (the values checked: right all the same)
        assert all(c.own is None for c in compiled)
    shapes = [ct.shape_of(code).text for code in made]
    assert shapes and len(set(shapes)) == len(shapes)  # a shape refused is not tried again


def test_a_generic_kernels_launch_passes_its_literals_after_its_buffers():
    # through the stand-in driver: the words are packed after the pointers, in every
    # launch, the plain one and the cached plan's bound one alike
    drv = StubDriver(log=True)
    with runtime_cuda.use_driver(drv):
        for n in (5, 9, 13, 13, 13):
            x = fg.ones(4, n, device="cuda")
            drv.ran.clear()
            records = fg.realize(y := (x * 2).sum(1))
            del y
            generic = [r.compiled for r in records if r.compiled.own is not None]
            if n == 5:
                assert not generic
                continue
            (c,) = generic
            (name, _, _, packed, _) = drv.ran[-1]
            assert name.startswith(ct.GENERIC_PREFIX)
            words = struct.unpack(f"<{len(packed) // 8}Q", packed)
            assert words[-len(c.kernel.lits) :] == c.kernel.lits
            assert n in c.kernel.lits
