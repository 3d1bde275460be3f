"""A contraction's steps on warp-level tensor cores: 16-bit `mma.sync`, TF32 `nvcuda::wmma`.

The block's 8 warps are 2 x 4 (`gpu.MMA_WARPS`), each owning a piece of the output tile
as accumulator fragments in registers. 16-bit sides (float16, bfloat16): per 16 reduction
steps, `ldmatrix.x4` reads A fragments (16 x 16) and B fragments (16 x 8, two a load)
from the swizzled staging, and `mma.sync...m16n8k16` adds every pair (`fg_ldmatrix_x4`,
`fg_mma_16816` in `cuda_prelude.HALF_PRELUDE`); each lane runs the epilogue of the
outputs its registers hold. TF32 (fp32 sides with `allow_tf32`): WMMA m16n16k8, each
fragment's values rounded to TF32, and the outputs passed through a warp's slice of
shared memory to the epilogue (WMMA does not say which lane holds which).

A warp's piece of a 128 x 256 16-bit tile (ra 8, rb 16) is 64 x 64 outputs: 4 A and 8 B
fragments.

    >>> from types import SimpleNamespace
    >>> MmaSteps.warp_fragments(SimpleNamespace(ra=8, rb=16))
    (4, 8)
"""

from __future__ import annotations

from .cuda_simt import PAD
from .gpu import MMA, MMA_WARPS, TILE_THREADS, Contraction

WMMA = "nvcuda::wmma::"


class MmaSteps:
    """The warp-level tensor cores' accumulators, steps and epilogues; a mixin of the CUDA
    renderer (`cuda._Renderer`), whose `line` prints, and whose `staged` (the staged
    layout) and `output` (an output's epilogue) `TiledContraction` gives."""

    def mma16_accumulators(self, c: Contraction, d: int) -> tuple[int, int]:
        """The warp's m16n8 fp32 accumulator fragments, zeroed; its place in the block and
        its lanes' `ldmatrix` rows. Returns (A fragments, B fragments) of the warp."""
        acc = c.red.init.acc
        fa, fb = self.warp_fragments(c)
        self.line(d, f"float {acc}_frag[{fa}][{fb}][4];  // m16n8 C fragments")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int r = 0; r < 4; ++r) "
                     f"{acc}_frag[i][j][r] = 0.0f;")  # fmt: skip
        self.warp_ids(d)
        self.ldmatrix_rows(c, d)
        return fa, fb

    def wmma_accumulators(self, c: Contraction, d: int) -> tuple[int, int]:
        """The warp's 16 x 16 WMMA accumulator fragments, zeroed, and its place in the
        block. Returns (fragments along a, fragments along b) of the warp."""
        acc = c.red.init.acc
        fa, fb = (
            c.ra * TILE_THREADS // MMA_WARPS[0] // MMA,
            c.rb * TILE_THREADS // MMA_WARPS[1] // MMA,
        )
        self.line(d, f"{WMMA}fragment<{WMMA}accumulator, 16, 16, 8, float> "
                     f"{acc}_frag[{fa}][{fb}];")  # fmt: skip
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j) "
                     f"{WMMA}fill_fragment({acc}_frag[i][j], 0.0f);")  # fmt: skip
        self.warp_ids(d)
        return fa, fb

    def wmma_out_buffer(self) -> None:
        """Declare the warps' 16x16 slices of shared memory that TF32 outputs pass through
        on their way to the epilogue (`wmma_epilogue`)."""
        warps = MMA_WARPS[0] * MMA_WARPS[1]
        self.shared.append(f"  __shared__ __align__(32) float fg_out[{warps}][{MMA * MMA}];")
        self.shared_bytes += warps * MMA * MMA * 4

    def warp_ids(self, d: int) -> None:
        """The warp's place in the block's `MMA_WARPS` grid, and the thread's lane in it."""
        self.line(d, "const int fg_warp = tid >> 5, fg_lane = tid & 31;")
        self.line(
            d, f"const int fg_wa = fg_warp / {MMA_WARPS[1]}, fg_wb = fg_warp % {MMA_WARPS[1]};"
        )

    @staticmethod
    def warp_fragments(c: Contraction) -> tuple[int, int]:
        """(16-row A fragments, 8-column B fragments) of a warp's piece of a 16-bit tile:
        its (16 fa) x (8 fb) outputs are fa x fb m16n8 accumulator fragments."""
        wa, wb = c.ra * TILE_THREADS // MMA_WARPS[0], c.rb * TILE_THREADS // MMA_WARPS[1]
        return wa // 16, wb // 8

    def ldmatrix_rows(self, c: Contraction, d: int) -> None:
        """Which row of which 8x8 matrix this lane addresses in an `ldmatrix.x4`: lanes 8q..8q+7
        give matrix q's rows. The A side's four matrices are a 16x16 fragment's registers
        a0..a3: (m 0-7, k 0-7), (m 8-15, k 0-7), (m 0-7, k 8-15), (m 8-15, k 8-15); the B
        side's are two 8-column fragments' b0, b1: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7,
        n 8-15), (k 8-15, n 8-15). A matrix's 8 rows run along the side's outputs where it
        is staged [at][kk] (each row 8 reduction steps: no .trans), else along the reduction
        (each row 8 outputs: .trans). `fg_<side>_at`, `fg_<side>_kk`: the lane's offsets."""
        self.line(d, "const int fg_q = fg_lane >> 3, fg_r = fg_lane & 7;")
        for side, at_bit, kk_bit in (
            ("a", "fg_q & 1", "fg_q >> 1"),
            ("b", "fg_q >> 1", "fg_q & 1"),
        ):
            at, kk = f"({at_bit}) * 8", f"({kk_bit}) * 8"
            if c.k_inner(side):
                at = f"{at} + fg_r"
            else:
                kk = f"{kk} + fg_r"
            self.line(d, f"const int fg_{side}_at = {at}, fg_{side}_kk = {kk};")

    def mma16_step(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """The warp's (16 fa) x (8 fb) outputs from this step on 16-bit tensor cores: per 16
        reduction steps, fa A fragments (16x16) and fb B fragments (16x8) through
        `ldmatrix.x4` (a B load gives two), then every pair through `mma.sync` m16n8k16."""
        acc, kc = c.red.init.acc, c.kc
        (a_name, _), (b_name, _) = c.a_exports[0], c.b_exports[0]
        wa, wb = 16 * fa, 8 * fb
        mma = "fg_mma_16816<true>" if c.mma == "bfloat16" else "fg_mma_16816<false>"
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int ks = 0; ks < {kc}; ks += 16) {{")
        self.line(d + 1, f"unsigned fg_a[{fa}][4], fg_b[{fb}][2];")
        for side, name, count, step, regs, w, who in (
            ("a", a_name, fa, 1, "fg_a[i][0], fg_a[i][1], fg_a[i][2], fg_a[i][3]", wa, "fg_wa"),
            ("b", b_name, fb, 2, "fg_b[i][0], fg_b[i][1], fg_b[i + 1][0], fg_b[i + 1][1]", wb,
             "fg_wb"),
        ):  # fmt: skip
            at = f"{who} * {w} + i * {16 // step} + fg_{side}_at"
            row = self.staged(c, side, name, "fg_buf", f"ks + fg_{side}_kk", at)
            trans = "false" if c.k_inner(side) else "true"
            self.line(d + 1, "#pragma unroll")
            self.line(d + 1, f"for (int i = 0; i < {count}; i += {step})")
            self.line(d + 2, f"fg_ldmatrix_x4<{trans}>({regs}, &{row});")
        self.products(fa, fb, f"{mma}({acc}_frag[i][j], fg_a[i], fg_b[j][0], fg_b[j][1]);", d)

    def products(self, fa: int, fb: int, call: str, d: int) -> None:
        """The warp's fa x fb fragment products of this step, `call` for fragment (i, j),
        unrolled; then the step's loop closes."""
        self.line(d + 1, f"#pragma unroll\n{'  ' * (d + 1)}for (int i = 0; i < {fa}; ++i)")
        self.line(d + 1, f"#pragma unroll\n{'  ' * (d + 1)}for (int j = 0; j < {fb}; ++j) {call}")
        self.line(d, "}")

    def mma16_epilogue(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """Each lane runs the epilogue of the outputs its accumulators hold: register r of
        fragment (i, j) is output (row g + 8 (r / 2), column 2 t + r % 2) of that 16x8
        fragment, for the lane's group g = lane / 4 and t = lane % 4 in it."""
        acc = c.red.init.acc
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int r = 0; r < 4; ++r) {{")
        self.line(d + 1, f"const long long ia = tile_a + fg_wa * {16 * fa} + i * 16 + "
                         "(fg_lane >> 2) + (r >> 1) * 8;")  # fmt: skip
        self.line(d + 1, f"const long long ib = tile_b + fg_wb * {8 * fb} + j * 8 + "
                         "(fg_lane & 3) * 2 + (r & 1);")  # fmt: skip
        self.line(d + 1, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, f"{acc}_frag[i][j][r]", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")

    def wmma_step(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """The warp's (16 fa) x (16 fb) outputs from this step on TF32 tensor cores (WMMA
        m16n16k8): the a side staged [kk][row] is a column-major 16xK matrix, the b side
        [kk][column] a row-major Kx16 one, their fp32 values rounded to TF32 (10-bit
        mantissas) first. (16-bit inputs: `mma16_step`.)"""
        acc, kc = c.red.init.acc, c.kc
        (a_name, _), (b_name, _) = c.a_exports[0], c.b_exports[0]
        wa, wb = c.ra * TILE_THREADS // MMA_WARPS[0], c.rb * TILE_THREADS // MMA_WARPS[1]
        k, t_in = 8, f"{WMMA}precision::tf32"
        self.line(d, "#pragma unroll")
        self.line(d, f"for (int ks = 0; ks < {kc}; ks += {k}) {{")
        # a side staged [kk][at] is a column-major A (a row-major B); one staged [at][kk]
        # (`k_inner`), a row-major A (a column-major B)
        layouts = {}
        for side, matrix, r, inner in (("a", "matrix_a", c.ra, "row_major"),
                                       ("b", "matrix_b", c.rb, "col_major")):  # fmt: skip
            outer = "col_major" if inner == "row_major" else "row_major"
            k_inner = c.k_inner(side)
            layouts[side] = (kc + PAD, k_inner) if k_inner else (TILE_THREADS * r + PAD, k_inner)
            self.line(d + 1, f"{WMMA}fragment<{WMMA}{matrix}, 16, 16, {k}, {t_in}, "
                             f"{WMMA}{inner if k_inner else outer}> fg_{side}"
                             f"[{fa if side == 'a' else fb}];")  # fmt: skip
        for frag, count, src, w, who in (
            ("fg_a", fa, f"a_{a_name}", wa, "fg_wa"),
            ("fg_b", fb, f"b_{b_name}", wb, "fg_wb"),
        ):
            ld, k_inner = layouts[frag[-1]]
            at = f"{who} * {w} + i * 16"
            cell = f"[{at}][ks]" if k_inner else f"[ks][{at}]"
            self.line(d + 1, "#pragma unroll")
            self.line(d + 1, f"for (int i = 0; i < {count}; ++i) {{")
            self.line(d + 2, f"{WMMA}load_matrix_sync({frag}[i], &{src}[fg_buf]{cell}, {ld});")
            self.line(d + 2, "#pragma unroll")
            x = f"{frag}[i].x[t]"
            self.line(d + 2, f"for (int t = 0; t < {frag}[i].num_elements; ++t) "
                             f"{x} = {WMMA}__float_to_tf32({x});")  # fmt: skip
            self.line(d + 1, "}")
        self.products(
            fa, fb, f"{WMMA}mma_sync({acc}_frag[i][j], fg_a[i], fg_b[j], {acc}_frag[i][j]);", d
        )

    def wmma_epilogue(self, c: Contraction, fa: int, fb: int, d: int) -> None:
        """TF32: each 16x16 fragment goes through the warp's slice of shared memory (WMMA
        does not say which lane holds which output), then its lanes run the epilogue 8
        outputs each."""
        acc = c.red.init.acc
        wa, wb = c.ra * TILE_THREADS // MMA_WARPS[0], c.rb * TILE_THREADS // MMA_WARPS[1]
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < {fa}; ++i)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < {fb}; ++j) {{")
        self.line(d + 1, f"{WMMA}store_matrix_sync(fg_out[fg_warp], {acc}_frag[i][j], 16, "
                         f"{WMMA}mem_row_major);")  # fmt: skip
        self.line(d + 1, "__syncwarp();")
        self.line(d + 1, f"for (int e = fg_lane; e < {MMA * MMA}; e += 32) {{")
        self.line(d + 2, f"const long long ia = tile_a + fg_wa * {wa} + i * 16 + e / 16;")
        self.line(d + 2, f"const long long ib = tile_b + fg_wb * {wb} + j * 16 + e % 16;")
        self.line(d + 2, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, "fg_out[fg_warp][e]", d + 3)
        self.line(d + 2, "}")
        self.line(d + 1, "}")
        self.line(d + 1, "__syncwarp();  // read before the next fragment overwrites it")
        self.line(d, "}")
