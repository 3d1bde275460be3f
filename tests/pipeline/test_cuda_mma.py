"""The warp-level tensor-core primitives of the 16-bit contractions, lane by lane.

`fg_ldmatrix_x4` and `fg_mma_16816` (pipeline/cuda_prelude.py) run on the emulator as
runtime/cuda_emu.h reads the PTX ISA; here each lane's registers are checked against the
ISA's tables, written out again in Python below (not taken from the header): a matrix of
distinct values, so that a lane or half given the wrong element shows. On a GPU the same
kernels run the real instructions (nvcc's PTX: test_cuda_sgemm.py).

The tables, for lane l in group g = l // 4 at t = l % 4 of it:
- ldmatrix .m8n8.x4.b16: lanes 8j..8j+7 address rows 0..7 of matrix j; lane l receives of
  matrix j the pair (row g, columns 2t, 2t+1), with .trans (rows 2t, 2t+1, column g), the
  first of the pair in the register's low 16 bits;
- mma.m16n8k16 (.row.col, 16-bit inputs): a[r] = A(g + 8 (r % 2), 2t + 8 (r // 2) + {0, 1}),
  b[r] = B(2t + 8 r + {0, 1}, g), c[r] = d[r] = C(g + 8 (r // 2), 2t + r % 2).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusegrad.pipeline.cuda import HALF_PRELUDE, PRELUDE
from fusegrad.runtime.cuda_emulator import EmulatedModule

SOURCE = r"""
// one warp per 16x16 matrix: its four 8x8 quadrants (rows 0-7, columns 0-7), (8-15, 0-7),
// (0-7, 8-15), (8-15, 8-15) through one ldmatrix.x4, each lane's 4 registers to out
extern "C" __global__ void load_quadrants(unsigned* out, const unsigned short* m, int trans) {
  __shared__ __align__(16) unsigned short tile[2][16][24];  // rows padded, as the kernels'
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  for (int i = lane; i < 256; i += 32) tile[warp][i / 16][i % 16] = m[warp * 256 + i];
  __syncthreads();
  const int q = lane >> 3, r = lane & 7;
  const void* row = &tile[warp][(q & 1) * 8 + r][(q >> 1) * 8];
  unsigned* o = out + threadIdx.x * 4;
  if (trans)
    fg_ldmatrix_x4<true>(o[0], o[1], o[2], o[3], row);
  else
    fg_ldmatrix_x4<false>(o[0], o[1], o[2], o[3], row);
}
// one mma per warp from each lane's registers: a[4], b[2] (two 16-bit values each), c[4]
extern "C" __global__ void mma(float* d, const unsigned* a, const unsigned* b, const float* c,
                               int bf16) {
  const int t = threadIdx.x;
  float acc[4] = {c[t * 4], c[t * 4 + 1], c[t * 4 + 2], c[t * 4 + 3]};
  const unsigned frag[4] = {a[t * 4], a[t * 4 + 1], a[t * 4 + 2], a[t * 4 + 3]};
  if (bf16)
    fg_mma_16816<true>(acc, frag, b[t * 2], b[t * 2 + 1]);
  else
    fg_mma_16816<false>(acc, frag, b[t * 2], b[t * 2 + 1]);
  for (int r = 0; r < 4; ++r) d[t * 4 + r] = acc[r];
}
// where fg_swizzle keeps each value of a 64-row tile of 8 * CHUNKS columns
template <int CHUNKS> __device__ void swizzle_table(int* out) {
  for (int row = 0; row < 64; ++row)
    for (int col = 0; col < 8 * CHUNKS; ++col)
      out[row * 8 * CHUNKS + col] = fg_swizzle<CHUNKS>(row, col);
}
extern "C" __global__ void swizzles(int* c2, int* c4, int* c8, int* c16) {
  swizzle_table<2>(c2);
  swizzle_table<4>(c4);
  swizzle_table<8>(c8);
  swizzle_table<16>(c16);
}
"""


@pytest.fixture(scope="module")
def module():
    return EmulatedModule(PRELUDE + HALF_PRELUDE + SOURCE)


def pair(low: int, high: int) -> int:
    return int(low) | int(high) << 16


def expected_ldmatrix(m: np.ndarray, trans: bool) -> np.ndarray:
    """Lane l's 4 registers of `ldmatrix.x4` over the quadrants of the 16x16 `m`, per the ISA."""
    out = np.zeros((32, 4), np.uint32)
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for j in range(4):
            q = m[(j & 1) * 8 : (j & 1) * 8 + 8, (j >> 1) * 8 : (j >> 1) * 8 + 8]
            if trans:
                out[lane, j] = pair(q[2 * t, g], q[2 * t + 1, g])
            else:
                out[lane, j] = pair(q[g, 2 * t], q[g, 2 * t + 1])
    return out


@pytest.mark.parametrize("trans", [False, True])
def test_ldmatrix_gives_each_lane_its_elements(module, trans):
    # two warps, two matrices of distinct values (the second warp reads its own table)
    m = np.arange(512, dtype=np.uint16).reshape(2, 16, 16) * np.uint16(3) + np.uint16(1)
    out = np.zeros((64, 4), np.uint32)
    run = module.get_function("load_quadrants")
    run(out, m, np.int32(trans), grid=(1, 1, 1), block=(64, 1, 1))
    for warp in range(2):
        want = expected_ldmatrix(m[warp], trans)
        np.testing.assert_array_equal(out[32 * warp : 32 * warp + 32], want)


def test_ldmatrix_trans_of_a_transposed_matrix_is_the_plain_load(module):
    m = np.arange(256, dtype=np.uint16).reshape(16, 16)
    plain, trans = np.zeros((32, 4), np.uint32), np.zeros((32, 4), np.uint32)
    run = module.get_function("load_quadrants")
    run(plain, m, np.int32(0), grid=(1, 1, 1), block=(32, 1, 1))
    run(trans, np.ascontiguousarray(m.T), np.int32(1), grid=(1, 1, 1), block=(32, 1, 1))
    # quadrants 1 and 2 trade places under a transpose
    np.testing.assert_array_equal(trans[:, [0, 2, 1, 3]], plain)


def fragments(a: np.ndarray, b: np.ndarray, c: np.ndarray):
    """Each lane's registers of mma.m16n8k16 for A (16x16), B (16x8), C (16x8), per the ISA:
    16-bit values as their bits, two to a register."""
    bits = lambda x: int(x.view(np.uint16))  # noqa: E731
    ra, rb, rc = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(4):
            row, k = g + 8 * (r % 2), 2 * t + 8 * (r // 2)
            ra[lane, r] = pair(bits(a[row, k]), bits(a[row, k + 1]))
            rc[lane, r] = c[g + 8 * (r // 2), 2 * t + r % 2]
        for r in range(2):
            k = 2 * t + 8 * r
            rb[lane, r] = pair(bits(b[k, g]), bits(b[k + 1, g]))
    return ra, rb, rc.astype(np.float32)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_mma_m16n8k16_lane_by_lane(module, dtype):
    # distinct integers, exact in both 16-bit types and in every fp32 partial sum
    a = np.arange(256).reshape(16, 16).astype(dtype)
    b = (np.arange(128).reshape(16, 8) - 64).astype(dtype)
    c = np.arange(128).reshape(16, 8) + 0.5
    ra, rb, rc = fragments(a, b, c)
    d = np.zeros((32, 4), np.float32)
    module.get_function("mma")(
        d, ra, rb, rc, np.int32(dtype is ml_dtypes.bfloat16), grid=(1, 1, 1), block=(32, 1, 1)
    )
    want = a.astype(np.float64) @ b.astype(np.float64) + c
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(4):
            assert d[lane, r] == want[g + 8 * (r // 2), 2 * t + r % 2], (lane, r)


def test_mma_of_identities_moves_b_to_where_c_is(module):
    # A = I: D = B + C, each output from one B element (a wrong k order or lane shows at once)
    a = np.eye(16, dtype=np.float16)
    b = np.arange(128).reshape(16, 8).astype(np.float16)
    ra, rb, rc = fragments(a, b, np.zeros((16, 8)))
    d = np.zeros((32, 4), np.float32)
    module.get_function("mma")(d, ra, rb, rc, np.int32(0), grid=(1, 1, 1), block=(32, 1, 1))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        for r in range(4):
            assert d[lane, r] == b[g + 8 * (r // 2), 2 * t + r % 2], (lane, r)


def test_the_swizzle_keeps_chunks_whole_and_ldmatrix_rows_on_distinct_banks(module):
    tables = {c: np.zeros((64, 8 * c), np.int32) for c in (2, 4, 8, 16)}
    module.get_function("swizzles")(*tables.values(), grid=(1, 1, 1), block=(1, 1, 1))
    for chunks, where in tables.items():
        for row in range(64):  # a permutation of the row that moves 16-byte chunks whole
            assert sorted(where[row]) == list(range(8 * chunks)), chunks
            assert all(where[row, 8 * k + e] == where[row, 8 * k] + e for k in range(chunks)
                       for e in range(8))  # fmt: skip
        # an ldmatrix phase: 8 rows from a multiple of 8, 16 bytes each at one logical chunk;
        # a bank group is 16 bytes of a 128-byte line of shared memory (2-byte values)
        for first in range(0, 64, 8):
            for k in range(chunks):
                rows = range(first, first + 8)
                groups = {(r * 8 * chunks + where[r, 8 * k]) // 8 % 8 for r in rows}
                assert len(groups) == 8, (chunks, first, k)
