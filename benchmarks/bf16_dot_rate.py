"""The CPU's multiply-add instructions themselves, timed alternately in one process: the
float32 FMA that fusegrad's register tiles run on, AVX512-BF16's `vdpbf16ps` (a pair of
bfloat16 products added into each float32 lane) and AMX's `tdpbf16ps` (a 16x16 float32
tile += a 16x32 by 32x16 bfloat16 product), each in a loop of independent accumulators
(12 vector registers, or 4 tiles), so the figure is the instruction's throughput; and the
AMX loop again with its four operand tiles loaded every iteration from L1 (`AMX + tile
loads`: the matmul kernel's step, pipeline/amx.py, with every load hitting L1: the most its
2 x 2 blocking of the tiles can give, since each product needs one 1 KiB tile load).

Run:  .venv/bin/python benchmarks/bf16_dot_rate.py   (about 20 seconds, one thread)

Each rate is printed over wall time and over the thread's CPU time: on a machine shared
with other processes the first drops (by up to 3x on this project's 2-core machine) while the
second stays the instruction's rate (`tdpbf16ps` here: about 3.3 TFLOP/s of CPU time).

It answers which instruction a bfloat16 contraction should use: a
bfloat16 kernel beats the float32 one only on an instruction whose GFLOP/s here is above
the FMA's. Each round times every instruction once (the order rotating); the table has the
medians and each one's rate over the FMA's, paired round by round. Nothing is run that the
host lacks (LLVM's host features; AMX also needs Linux's permission, asked for here).
"""

from __future__ import annotations

import ctypes
import os
import platform
import statistics
import time

import llvmlite.binding as llvm

ROUNDS = 7
SECONDS = 0.3  # per timed call, about
CHAINS = 12  # independent vector accumulators (of 32 registers)
TILES = 4  # independent AMX accumulator tiles (of 8), fed by 2 + 2 operand tiles


def vector_loop(kind: str) -> tuple[str, int]:
    """LLVM IR of `f(iterations, out, in)` running CHAINS independent 16-lane
    multiply-adds per iteration; and the FLOPs of one iteration."""
    f32, b16 = "<16 x float>", "<32 x bfloat>"
    if kind == "fma":
        decl = f"declare {f32} @llvm.fma.v16f32({f32}, {f32}, {f32})"
        step = f"call {f32} @llvm.fma.v16f32({f32} %x, {f32} %y, {f32} %a{{i}})"
        flops = 32
    else:
        decl = f"declare {f32} @llvm.x86.avx512bf16.dpbf16ps.512({f32}, {b16}, {b16})"
        step = f"call {f32} @llvm.x86.avx512bf16.dpbf16ps.512({f32} %a{{i}}, {b16} %p, {b16} %q)"
        flops = 64
    phis = [f"%a{i} = phi {f32} [zeroinitializer, %entry], [%n{i}, %loop]" for i in range(CHAINS)]
    steps = [f"%n{i} = " + step.format(i=i) for i in range(CHAINS)]
    total = [f"%s0 = fadd {f32} %n0, %n1"]
    total += [f"%s{i - 1} = fadd {f32} %s{i - 2}, %n{i}" for i in range(2, CHAINS)]
    body = "\n  ".join(phis + steps)
    return (
        f"""{decl}
define void @f(i64 %iterations, ptr %out, ptr %in) {{
entry:
  %x = load {f32}, ptr %in, align 4
  %y = load {f32}, ptr %in, align 4
  %p = load {b16}, ptr %in, align 4
  %q = load {b16}, ptr %in, align 4
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %loop]
  {body}
  %k1 = add i64 %k, 1
  %more = icmp slt i64 %k1, %iterations
  br i1 %more, label %loop, label %exit
exit:
  {chr(10).join(total)}
  store {f32} %s{CHAINS - 2}, ptr %out, align 4
  ret void
}}
""",
        flops * CHAINS,
    )


def amx_loop(reload: bool = False) -> tuple[str, int]:
    """The same with AMX: tiles 4, 5 (A) and 6, 7 (B) feed 4 accumulator tiles. `reload`:
    each iteration loads the four operand tiles again (from L1), in pipeline/amx.py's order
    (`LOADS_AND_PRODUCTS`), as the matmul kernel's steps do: the rate of its inner loop
    with every load hitting L1."""
    loads = "\n  ".join(
        f"call void @llvm.x86.tileloadd64(i8 {t}, ptr %data, i64 64)" for t in (4, 5, 6, 7)
    )

    def dot(c: int) -> str:
        return f"call void @llvm.x86.tdpbf16ps(i8 {c}, i8 {4 + c // 2}, i8 {6 + c % 2})"

    def load(t: int) -> str:
        return f"call void @llvm.x86.tileloadd64(i8 {t}, ptr %data, i64 64)"

    step = (4, 6, 0, 7, 1, 5, 2, 3) if reload else range(TILES)
    dots = "\n  ".join(load(t) if t >= TILES else dot(t) for t in step)
    return (
        f"""declare void @llvm.x86.ldtilecfg(ptr)
declare void @llvm.x86.tilerelease()
declare void @llvm.x86.tilezero(i8 immarg)
declare void @llvm.x86.tileloadd64(i8 immarg, ptr, i64)
declare void @llvm.x86.tilestored64(i8 immarg, ptr, i64)
declare void @llvm.x86.tdpbf16ps(i8 immarg, i8 immarg, i8 immarg)
define void @f(i64 %iterations, ptr %out, ptr %in) {{
entry:
  call void @llvm.x86.ldtilecfg(ptr %in)
  {chr(10).join(f"call void @llvm.x86.tilezero(i8 {c})" for c in range(TILES))}
  %data = getelementptr i8, ptr %in, i64 64
  {loads}
  br label %loop
loop:
  %k = phi i64 [0, %entry], [%k1, %loop]
  {dots}
  %k1 = add i64 %k, 1
  %more = icmp slt i64 %k1, %iterations
  br i1 %more, label %loop, label %exit
exit:
  call void @llvm.x86.tilestored64(i8 0, ptr %out, i64 64)
  call void @llvm.x86.tilerelease()
  ret void
}}
""",
        2 * 16 * 16 * 32 * TILES,
    )


def amx_permitted() -> bool:
    """Ask Linux for the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, XTILEDATA)."""
    if platform.system() != "Linux" or platform.machine() != "x86_64":
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(158, 0x1023, 18) == 0


def compile_loop(source: str):
    target = llvm.Target.from_default_triple()
    machine = target.create_target_machine(
        cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(), opt=3
    )
    module = llvm.parse_assembly(source)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, machine)
    engine.finalize_object()
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)
    return engine, fn(engine.get_function_address("f"))


def main() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    features = set(llvm.get_host_cpu_features().flatten().split(","))
    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if "model name" in line),
        platform.processor(),
    )
    print(f"bf16 dot rates | {model} | {llvm.get_host_cpu_name()} | load {os.getloadavg()}")
    loops = {"fp32 FMA (zmm)": vector_loop("fma")}
    if "+avx512bf16" in features:
        loops["vdpbf16ps (zmm)"] = vector_loop("dp")
    else:
        print("  no AVX512-BF16 here: vdpbf16ps not timed")
    if "+amx-bf16" in features and amx_permitted():
        loops["AMX tdpbf16ps"] = amx_loop()
        loops["AMX + tile loads"] = amx_loop(reload=True)
    else:
        print("  no AMX-BF16 here (or Linux refused its tile state): tdpbf16ps not timed")
    # tile config: palette 1, every tile 16 rows of 64 bytes; then 1 KiB of operand data
    buf = (ctypes.c_uint8 * (64 + 1024))()  # (every operand tile loads the same 1 KiB)
    buf[0] = 1
    for t in range(8):
        buf[16 + 2 * t] = 64
        buf[48 + t] = 16
    out = (ctypes.c_float * 256)()
    compiled = {name: (compile_loop(src), flops) for name, (src, flops) in loops.items()}
    iterations = {}
    for name, ((_, fn), _) in compiled.items():  # size each call to about SECONDS
        t0 = time.perf_counter()
        fn(100_000, ctypes.addressof(out), ctypes.addressof(buf))
        iterations[name] = max(1000, int(100_000 * SECONDS / (time.perf_counter() - t0)))
    times = {name: [] for name in compiled}
    cpu = {name: [] for name in compiled}  # the thread's CPU time: what time-sharing leaves out
    names = list(compiled)
    for r in range(ROUNDS):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            (_, fn), _ = compiled[name]
            t0, c0 = time.perf_counter(), time.thread_time()
            fn(iterations[name], ctypes.addressof(out), ctypes.addressof(buf))
            cpu[name].append((time.thread_time() - c0) / iterations[name])
            times[name].append((time.perf_counter() - t0) / iterations[name])
    base = times[names[0]]
    print(
        f"\n{'instruction':<18}{'GFLOP/s':>9}{'over FMA (paired median)':>26}"
        f"{'GFLOP/s of CPU time':>21}   ({ROUNDS} rounds)"
    )
    for name in names:
        flops = compiled[name][1]
        rate = flops / statistics.median(times[name]) / 1e9
        ratio = statistics.median(
            (flops / t) / (compiled[names[0]][1] / b) for t, b in zip(times[name], base)
        )
        cpu_rate = flops / statistics.median(cpu[name]) / 1e9
        print(f"{name:<18}{rate:9.1f}{ratio:26.2f}{cpu_rate:21.1f}")
    print(
        "\n(GFLOP/s is over wall time; over the thread's CPU time the rate leaves out the time\n"
        "other processes had the core: where the two differ, the machine was shared)"
    )
    print(f"\none thread; load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
