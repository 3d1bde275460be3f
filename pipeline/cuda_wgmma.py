"""A contraction on Hopper's warpgroup tensor cores (`wgmma`), fed by the Tensor Memory
Accelerator (TMA) or by `cp.async`, where a kernel is built for sm_90a.

A `gpu.wgmma_tile` contraction renders this pipeline under
`#if defined(__CUDA_ARCH_FEAT_SM90_ALL)`, beside the `mma.sync` one (`cuda_mma.py`) that
other GPUs and the emulator compile. The block's two warpgroups each own 64 x 256 fp32
accumulators; each step is four `wgmma.mma_async` products on operands in shared memory,
laid out in the 128-byte swizzle's canonical layouts (`WgmmaPipeline.wgmma_offset`) and
named by descriptors (`fg_wgmma_desc`, in `cuda_prelude.WGMMA_PRELUDE`). Where the sides
allow (`tma_maps`) thread 0 stages the steps by the TMA onto mbarriers; else every thread
copies them (`WgmmaPipeline.copy_steps`). TF32 sides are read K-major only: a side
contiguous along its outputs is first copied K-major by a launch of its own
(`transpose_kernel`).

A K-major side's step `kk` of row `at` sits in 128-byte rows, its 16-byte chunks
swizzled with the row:

    >>> from types import SimpleNamespace
    >>> c = SimpleNamespace(mma="bfloat16", kc=64, k_inner=lambda side: True)
    >>> WgmmaPipeline.wgmma_offset(c, "a", "at", "kk")
    '(at) * 128 + ((((kk) >> 3) ^ ((at) & 7)) << 4) + ((kk) & 7) * 2'
"""

from __future__ import annotations

import functools

from . import gpu as gpu_map
from .cuda_simt import stage_count
from .cuda_text import index, mem_type
from .cuda_types import CudaLaunch, TensorMap
from .gpu import TILE_THREADS, VECTOR, Contraction
from .loopir import Kernel

# an MN-major wgmma operand's two descriptor offsets the other way round (a check on a GPU)
WGMMA_MN_SWAPPED = False
# the wgmma pipeline's steps copied by the Tensor Memory Accelerator where the sides allow
# (`tma_maps`), else by every thread's cp.async (slower: every thread computes addresses).
# Its kernels launch through `runtime/tensor_map.py`'s ParamsLaunch
WGMMA_TMA = True
# wgmma groups a warpgroup leaves running when it goes on to the next step: 1 (the tensor
# cores never wait for the barrier; steps staged WGMMA_STAGES - 2 ahead) or 0 (staged one
# step further ahead)
WGMMA_IN_FLIGHT = 1


def k_padded(c: Contraction) -> int:
    """The values of a row of a transposed side's K-major copy: the reduction's steps,
    rounded up to 16 bytes (a tensor map's strides are multiples of 16 bytes)."""
    return -(-c.red.loops[0].extent // VECTOR) * VECTOR


def wgmma_k_major(c: Contraction, side: str) -> bool:
    """Whether the wgmma pipeline stages `side` K-major: as it is laid out (`k_inner`), or
    always for TF32 (a side along its outputs is read from its K-major copy)."""
    return c.mma == "tf32" or c.k_inner(side)


def transpose_kernel(kernel: Kernel, c: Contraction, side: str, symbol: str, head: str) -> tuple:
    """(source, launch) of the launch that copies TF32 `side` (one plain load contiguous
    along its outputs) K-major into its scratch buffer `fg_t<side>` before the contraction:
    element (batch, position, step) at ((batch * n + position) * `_k_padded` + step), steps
    past the reduction 0. 32 x 32 tiles through shared memory, so that both the reads (along
    the positions) and the writes (along the steps) are coalesced. `head` is the kernel's
    parameter list; built for sm_90a alone (elsewhere the launch does nothing: the
    contraction reads the side as it is)."""
    (load,) = c.a_stmts if side == "a" else c.b_stmts
    (loop,) = c.a_loops if side == "a" else c.b_loops
    red, n, k4 = c.red.loops[0], loop.extent, k_padded(c)
    nc = c.nc
    names = [f"const long long {loop.var.name} = fg_m, {red.var.name} = fg_k;"]
    names += [f"const long long {lp.var.name} = ic;" for lp in c.c_loops]
    grid = (-(-k4 // 32), min(-(-n // 32), 65535), min(nc, 65535))
    src = f"""extern "C" __global__ void {symbol}({head}) {{
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __shared__ float fg_tile[32][33];
  for (long long ic = blockIdx.z; ic < {nc}LL; ic += gridDim.z)
  for (long long m0 = blockIdx.y * 32LL; m0 < {n}LL; m0 += gridDim.y * 32LL) {{
    const long long k0 = blockIdx.x * 32LL;
    for (int i = threadIdx.y; i < 32; i += 8) {{
      const long long fg_k = k0 + i, fg_m = m0 + threadIdx.x;
      float v = 0.0f;
      if (fg_k < {red.extent}LL && fg_m < {n}LL) {{
        {" ".join(names)}
        v = {load.param.name}[{index(load.index)}];
      }}
      fg_tile[i][threadIdx.x] = v;
    }}
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {{
      const long long fg_m = m0 + i, fg_k = k0 + threadIdx.x;
      if (fg_m < {n}LL && fg_k < {k4}LL)
        fg_t{side}[(ic * {n}LL + fg_m) * {k4}LL + fg_k] = fg_tile[threadIdx.x][i];
    }}
    __syncthreads();
  }}
#endif
}}"""
    return src, CudaLaunch(symbol, grid, (32, 8, 1)), nc * n * k4


def wgmma_item(c: Contraction) -> int:
    """The bytes of one staged value in the wgmma pipeline: 4 (fp32 read as TF32) or 2."""
    return 4 if c.mma == "tf32" else 2


def tma_maps(kernel: Kernel, c: Contraction, transposed: tuple = ()) -> tuple[TensorMap, ...]:
    """The two sides' tensor maps for `tma_steps`, or () where a side's load is not one
    the Tensor Memory Accelerator can copy: its buffer seen as rows along the side's
    contiguous axis (the reduction for a K-major side, its outputs for an MN-major one),
    the other axis next, then at most one batch loop, each step a positive stride that
    leaves the rows apart (16-byte multiples: `gpu._vector_side` saw to those). A side in
    `transposed` is read from its K-major copy instead, the scratch buffer after the
    kernel's parameters that `transpose_kernel` fills (rows of `_k_padded` values)."""
    maps = []
    red = c.red.loops[0]
    for side, loops, stmts in (("a", c.a_loops, c.a_stmts), ("b", c.b_loops, c.b_stmts)):
        (load,) = stmts
        (loop,) = loops
        if len(c.c_loops) > 1 or load.index.has_divmod():
            return ()
        rows = TILE_THREADS * (c.ra if side == "a" else c.rb)
        if side in transposed:
            k4 = k_padded(c)
            batch = tuple(lp.extent for lp in c.c_loops)
            param = len(kernel.params) + transposed.index(side)
            strides = (k4 * 4,) + ((loop.extent * k4 * 4,) if batch else ())
            dims = (red.extent, loop.extent, *batch)
            maps.append(
                TensorMap(param, "float32", 0, dims, strides, (c.kc, rows) + (1,) * len(batch))
            )
            continue
        axes = [red, loop] if c.k_inner(side) else [loop, red]
        axes += c.c_loops
        coefs = [load.index.coef(lp.var) for lp in axes]
        if coefs[0] != 1 or len(load.index.terms) != sum(1 for k in coefs if k):
            return ()
        dims = [lp.extent for lp in axes]
        size = load.dtype.itemsize
        for i in range(1, len(axes)):  # each axis outside the one before it
            if coefs[i] < dims[i - 1] * coefs[i - 1] or coefs[i] * size % 16:
                return ()
        box = (c.kc, rows) if c.k_inner(side) else (64, c.kc)
        box += (1,) * len(c.c_loops)
        param = kernel.params.index(load.param)
        strides = tuple(k * size for k in coefs[1:])
        realign = c.mma == "tf32"  # (`tma_stage` adds the shift to its steps)
        maps.append(
            TensorMap(param, load.dtype.name, load.index.const, tuple(dims), strides, box, realign)
        )
    return tuple(maps)


class WgmmaPipeline:
    """The wgmma pipeline of a contraction: whether it has one (`plan_wgmma`), its steps
    and its epilogue; a mixin of the CUDA renderer (`cuda._Renderer`), whose `line`
    prints, and whose `stage`, `stages_ahead` and `output` `TiledContraction` gives. It
    sets the renderer's `wgmma`, `tensor_maps` and `transposes`."""

    def plan_wgmma(self, c: Contraction) -> None:
        """Whether `c` takes the wgmma pipeline (`gpu.wgmma_tile`; TF32 only through the
        TMA), its sides' tensor maps and the TF32 sides it transposes first; room to align
        its buffers to 1024 bytes, and each buffer's barriers where the TMA copies: its
        copies landed (`fg_full`), its readers are done (`fg_empty`)."""
        self.wgmma = gpu_map.wgmma_tile(c, self.shared_limit)
        if self.wgmma and c.mma == "tf32":  # TF32 through the TMA pipeline alone
            sides = (("a", c.a_vector), ("b", c.b_vector))
            self.transposes = [side for side, vector in sides if vector == "m"]
            self.tensor_maps = tma_maps(self.k, c, tuple(self.transposes)) if WGMMA_TMA else ()
            if not self.tensor_maps:
                self.wgmma, self.transposes = False, []
        elif self.wgmma:
            self.tensor_maps = tma_maps(self.k, c) if WGMMA_TMA else ()
        if self.wgmma:
            self.dynamic_bytes += 1024
        if self.tensor_maps:
            stages = stage_count(c, self.shared_limit)
            self.shared.append("#if defined(__CUDA_ARCH_FEAT_SM90_ALL)")
            self.shared.append(f"  __shared__ __align__(8) unsigned long long fg_full[{stages}], "
                               f"fg_empty[{stages}];")  # fmt: skip
            self.shared.append("#endif")
            self.shared_bytes += 16 * stages

    def wgmma_pipeline(self, c: Contraction) -> None:
        """One output tile on Hopper's warpgroup tensor cores (sm_90a): the block's two
        warpgroups each own 64 of the tile's 128 a-side rows and all 256 b-side columns, a
        64 x 256 fp32 accumulator (128 registers a thread). Steps are staged in
        `WGMMA_STAGES` buffers laid out as `wgmma` reads them (`wgmma_offset`): by every
        thread's `cp.async` (`copy_steps`), or, where `WGMMA_TMA` is on and the sides have
        tensor maps and the buffers are 16-byte aligned, by the Tensor Memory Accelerator
        (`tma_steps`). Each step
        is four m64n256k16 products (`wgmma_products`), left running while the next is
        prepared; each lane then runs the epilogue of the outputs it holds."""
        red, kc, d = c.red, c.kc, 3
        stages = stage_count(c, self.shared_limit)
        self.line(d, "unsigned char* const fg_sa = fg_dynamic + ((1024u - ((unsigned)"
                     "__cvta_generic_to_shared(fg_dynamic) & 1023u)) & 1023u);")  # fmt: skip
        self.line(d, f"unsigned char* const fg_sb = fg_sa + {stages * self.wgmma_bytes(c, 'a')};")
        self.line(d, "const int fg_g = tid >> 7;  // this warpgroup's rows: 64 fg_g ...")
        self.line(d, "float fg_d[128];")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int i = 0; i < 128; ++i) fg_d[i] = 0.0f;")
        self.line(d, f"const int fg_steps = (int)(({red.length}LL + {kc - 1}) / {kc});")
        if c.mma == "tf32":  # any alignment (`TensorMap.realign`, `transpose_kernel`)
            for side, m in zip("ab", self.tensor_maps):
                if m.realign:  # values the side's map starts before its view
                    ref = f"{self.k.params[m.param].name} + {m.offset}"
                    self.line(d, f"const int fg_shift_{side} = (int)(((unsigned long long)({ref}) "
                                 "& 15ull) >> 2);")  # fmt: skip
            self.tma_steps(c, stages, d)
        elif self.tensor_maps:
            self.line(d, "if (fg_vec) {  // the Tensor Memory Accelerator's copies")
            self.tma_steps(c, stages, d + 1)
            self.line(d, "} else {  // a buffer is not 16-byte aligned")
            self.copy_steps(c, stages, d + 1)
            self.line(d, "}")
        else:
            self.copy_steps(c, stages, d)
        self.line(d, "const int fg_w4 = (tid >> 5) & 3, fg_ln = tid & 31;")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int j = 0; j < 32; ++j)")
        self.line(d, f"#pragma unroll\n{'  ' * d}for (int r = 0; r < 4; ++r) {{")
        self.line(d + 1, "const long long ia = tile_a + fg_g * 64 + fg_w4 * 16 + (fg_ln >> 2) + "
                         "(r >> 1) * 8;")  # fmt: skip
        self.line(d + 1, "const long long ib = tile_b + j * 8 + (fg_ln & 3) * 2 + (r & 1);")
        self.line(d + 1, f"if (ia < {c.na}LL && ib < {c.nb}LL) {{")
        self.output(c, "fg_d[j * 4 + r]", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")

    def wgmma_products(self, c: Contraction, buf: str, d: int) -> None:
        """The warpgroup's four m64n256k16 products of the step in buffer `buf`, issued
        together as one group (left running)."""
        self.line(d, "fg_wgmma_fence();")
        bf16 = "true" if c.mma == "bfloat16" else "false"
        ta, tb = (int(not c.k_inner(side)) for side in "ab")
        call = (
            "fg_wgmma_64x256_tf32(" if c.mma == "tf32" else f"fg_wgmma_64x256<{bf16}, {ta}, {tb}>("
        )
        for ks in range(0, c.kc, 32 // wgmma_item(c)):  # 32 bytes of steps a product
            descs = []
            for side, base in (("a", "fg_sa"), ("b", "fg_sb")):
                at = "fg_g * 64" if side == "a" else "0"
                start = f"{base} + {buf} * {self.wgmma_bytes(c, side)} + "
                start += self.wgmma_offset(c, side, at, str(ks))
                lbo, sbo = self.wgmma_strides(c, side)
                descs.append(f"fg_wgmma_desc({start}, {lbo}, {sbo})")
            self.line(d, f"{call}fg_d, {descs[0]},")
            self.line(d + 2, f"{descs[1]});")
        self.line(d, "fg_wgmma_commit();")

    def tma_steps(self, c: Contraction, stages: int, d: int) -> None:
        """The tile's steps through the Tensor Memory Accelerator: thread 0 issues each
        step's copies (`tma_stage`) `stages` - 1 steps ahead into the buffer the step before
        was read from, once all 8 warps have said they are done with it (`fg_empty`: each
        warp's lane 0 arrives once the warpgroup's products of that step are complete); the
        copies' bytes complete `fg_full`, which every thread waits on before its products.
        No barrier across the block: the barriers' phases count the block's steps over all
        its tiles (`fg_t0`), so a buffer's parity is that count / stages."""
        self.line(d, "if (fg_t0 == 0) {  // the block's first tile: the barriers, once")
        self.line(d + 1, "if (tid == 0) {")
        self.line(d + 2, f"for (int s = 0; s < {stages}; ++s) {{")
        self.line(d + 3, "fg_mbar_init(&fg_full[s], 1);")
        self.line(d + 3, f"fg_mbar_init(&fg_empty[s], {TILE_THREADS * TILE_THREADS // 32});")
        self.line(d + 2, "}")
        self.line(d + 2, "fg_mbar_init_fence();")
        self.line(d + 1, "}")
        self.line(d + 1, "__syncthreads();")
        self.line(d, "}")
        self.line(d, "if (tid == 0) {")
        self.line(d + 1, f"for (int p = 0; p < {stages - 1} && p < fg_steps; ++p) {{")
        self.tma_stage(c, stages, "p", d + 2)
        self.line(d + 1, "}")
        self.line(d, "}")
        self.line(d, "__syncwarp();")
        self.line(d, "for (int kt = 0; kt < fg_steps; ++kt) {")
        self.line(d + 1, "const unsigned fg_n = fg_t0 + kt;")
        self.line(d + 1, f"fg_mbar_wait(&fg_full[fg_n % {stages}], fg_n / {stages} & 1u);")
        self.wgmma_products(c, f"(fg_n % {stages})", d + 1)
        self.line(d + 1, "fg_wgmma_wait<1>();  // step kt - 1's products are complete")
        self.line(d + 1, "if (kt > 0 && (tid & 31) == 0) "
                         f"fg_mbar_arrive(&fg_empty[(fg_n - 1) % {stages}]);")  # fmt: skip
        self.line(d + 1, f"if (tid == 0 && kt + {stages - 1} < fg_steps) {{")
        self.tma_stage(c, stages, f"kt + {stages - 1}", d + 2)
        self.line(d + 1, "}")
        self.line(d + 1, "__syncwarp();")
        self.line(d, "}")
        self.line(d, "fg_wgmma_wait<0>();")
        self.line(d, "fg_wgmma_pin(fg_d);")
        self.line(d, "if (fg_steps > 0 && (tid & 31) == 0) "
                     f"fg_mbar_arrive(&fg_empty[(fg_t0 + fg_steps - 1) % {stages}]);")  # fmt: skip
        self.line(d, "fg_t0 += fg_steps;")

    def tma_stage(self, c: Contraction, stages: int, step: str, d: int) -> None:
        """Thread 0 issues the copies of the tile's step `step` (wgmma_offset's layouts: a
        K-major side is one box of its rows x 64 steps, an MN-major one 64 x 64 boxes side by
        side), once its buffer's last readers are done."""
        self.line(d, "{")
        self.line(d + 1, f"const unsigned fg_p = fg_t0 + {step}, fg_s = fg_p % {stages};")
        self.line(d + 1, f"fg_mbar_wait(&fg_empty[fg_s], (fg_p / {stages} & 1u) ^ 1u);")
        total = self.wgmma_bytes(c, "a") + self.wgmma_bytes(c, "b")
        self.line(d + 1, f"fg_mbar_expect(&fg_full[fg_s], {total});")
        self.line(d + 1, f"const int fg_k = (int)({step}) * {c.kc};")
        for side, tmap, m in zip("ab", ("fg_tma", "fg_tmb"), self.tensor_maps):
            base = f"fg_s{side} + fg_s * {self.wgmma_bytes(c, side)}"
            batch = ", (int)ic" if len(m.dims) == 3 else ""
            call = "fg_tma_3d" if batch else "fg_tma_2d"
            if wgmma_k_major(c, side):
                k = f"fg_k + fg_shift_{side}" if m.realign else "fg_k"
                self.line(d + 1, f"{call}({base}, &{tmap}, {k}, (int)tile_{side}{batch}, "
                                 f"&fg_full[fg_s]);")  # fmt: skip
                continue
            for i in range(16 * (c.ra if side == "a" else c.rb) // 64):
                self.line(d + 1, f"{call}({base} + {i * c.kc * 128}, &{tmap}, (int)tile_{side} + "
                                 f"{64 * i}, fg_k{batch}, &fg_full[fg_s]);")  # fmt: skip
        self.line(d, "}")

    def copy_steps(self, c: Contraction, stages: int, d: int) -> None:
        """The tile's steps staged by every thread's `cp.async` copies (`stage`),
        `stages` - 1 - `WGMMA_IN_FLIGHT` steps ahead, one barrier a step (`stages_ahead`:
        the copies fenced for the tensor cores' proxy before it), each step's products left
        running while the next is staged."""
        ahead = stages - 1 - WGMMA_IN_FLIGHT
        self.stages_ahead(c, d, stages, ahead, functools.partial(self.stage, wgmma=True), True)
        self.wgmma_products(c, "fg_buf", d + 1)
        self.line(d + 1, f"fg_wgmma_wait<{WGMMA_IN_FLIGHT}>();  // all but the newest in flight")
        self.line(d, "}")
        self.line(d, "fg_wgmma_wait<0>();")
        self.line(d, "fg_wgmma_pin(fg_d);")
        self.line(d, "__syncthreads();  // the buffers are free for the block's next tile")

    @staticmethod
    def wgmma_bytes(c: Contraction, side: str) -> int:
        """The bytes of one buffer of `side` in the wgmma pipeline: kc steps of its tile."""
        return wgmma_item(c) * TILE_THREADS * (c.ra if side == "a" else c.rb) * c.kc

    @staticmethod
    def wgmma_offset(c: Contraction, side: str, at: str, kk: str) -> str:
        """The byte offset in a wgmma buffer of `side`'s value at tile position `at`, step
        `kk`, in the 128-byte swizzle's canonical layouts: K-major (a side contiguous along
        the reduction: rows of the kc steps, 128 bytes: 64 16-bit ones or 32 fp32 ones) or
        MN-major (16-bit only: 64-wide column blocks of kc rows of 128 bytes, one block after
        another)."""
        if wgmma_k_major(c, side):
            e = wgmma_item(c)
            shift = {2: 3, 4: 2}[e]  # a 16-byte chunk's steps: 8 or 4
            return (
                f"({at}) * 128 + (((({kk}) >> {shift}) ^ (({at}) & 7)) << 4) + "
                f"(({kk}) & {16 // e - 1}) * {e}"
            )
        return (
            f"(({at}) >> 6) * {c.kc * 128} + ({kk}) * 128 + "
            f"((((({at}) & 63) >> 3) ^ (({kk}) & 7)) << 4) + (({at}) & 7) * 2"
        )

    @staticmethod
    def wgmma_strides(c: Contraction, side: str) -> tuple[int, int]:
        """(leading, stride) byte offsets of a side's wgmma descriptor: K-major, the 8-row
        groups 1024 bytes apart (the leading offset unused); MN-major, the 64-wide column
        blocks kc * 128 bytes apart (leading), their 8-row groups 1024 (stride)."""
        if wgmma_k_major(c, side):
            return 16, 1024
        if WGMMA_MN_SWAPPED:
            return 1024, c.kc * 128
        return c.kc * 128, 1024

    def wgmma_cell(self, c: Contraction, side: str, name: str, buf: str, kk: str, at: str) -> str:
        """The shared-memory cell of `side`'s value at step `kk`, tile position `at` in wgmma
        buffer `buf` (`wgmma_offset`'s layouts): what `stage` copies into for the wgmma
        pipeline."""
        (_, t), base = (c.a_exports if side == "a" else c.b_exports)[0], f"fg_s{side}"
        offset = self.wgmma_offset(c, side, at, kk)
        return f"*({mem_type(t)}*)({base} + ({buf}) * {self.wgmma_bytes(c, side)} + {offset})"
