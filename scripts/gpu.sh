#!/usr/bin/env bash
# The cuda device's checks on a real NVIDIA GPU: fusegrad's CUDA tests, then the GPU
# benchmarks next to PyTorch CUDA (benchmarks/gpu.py). For a machine that has the driver,
# nvcc, PyTorch with CUDA, numpy, llvmlite, pytest and hypothesis, but may reach no package
# registry: PyCUDA and its pure-Python dependencies come as wheels from WHEELS.
#
#   bash scripts/gpu.sh WHEELS OUT [tests|bench|all] [pytest args...]
#
# WHEELS: a folder of wheels (`bash scripts/pycuda_wheel.sh WHEELS` builds them: pycuda built for this Python, pytools, platformdirs, mako,
# siphash24, typing_extensions; ml_dtypes for bfloat16; pycuda's sdist as well, built here if its wheel won't load); OUT: where logs go (gpu-tests.log, gpu-bench.log).
# The tests run with pytest-xdist over the CPU's cores where it is installed; FG_BENCH_ARGS
# are gpu.py's arguments (e.g. --quick); the bench part then runs gpu_models.py (real models'
# training steps) with FG_MODELS_ARGS (default: --rounds 3; "skip" leaves it out), each model
# in a process of its own; FG_BENCH_TIMEOUT, FG_MODELS_TIMEOUT (per model) and
# FG_TESTS_TIMEOUT (seconds) bound the parts (failing tests are written to OUT/gpu-failures.txt
# as they fail, so a cut run still names them); FG_BENCH_AB: gpu.py once more with these
# arguments added (an A/B in one call: FG_BENCH_ARGS="--quick --only conv"
# FG_BENCH_AB=--no-gather); FG_TESTS names other test paths, FG_WORKERS
# pytest-xdist's workers (0: one process, where the tests' tracebacks are wanted).
set -uo pipefail
cd "$(dirname "$0")/.."
wheels=$1
out=$2
what=${3:-all}
shift 3 2>/dev/null || shift $#
mkdir -p "$out"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fg-site \
  "$wheels"/*.whl || exit 1
export PYTHONPATH=/tmp/fg-site PYTHONUNBUFFERED=1 FUSEGRAD_CUDA=pycuda
if ! python3 -c "import pycuda.driver" 2>"$out/pycuda-import.txt"; then
  # the carried pycuda wheel does not load here: build pycuda from its sdist, if carried
  cat "$out/pycuda-import.txt"
  python3 -m pip install -q --no-index --no-deps --no-build-isolation --target /tmp/fg-site \
    "$wheels"/pycuda-*.tar.gz || exit 1
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
python3 - <<'EOF' 2>&1 | tee -a "$out/gpu.txt" || exit 1
import fusegrad as fg
print("fusegrad cuda:", fg.cuda.is_available(), fg.cuda.why_unavailable() or fg.cuda.get_device_name())
x = fg.arange(1000, dtype=fg.float32, device="cuda")
print("smoke: sum of 0..999 on the GPU =", (x * 2).sum().item(), "(want 999000.0)")
EOF
if [ "$what" != tests ]; then
  timeout "${FG_BENCH_TIMEOUT:-900}" python3 benchmarks/gpu.py ${FG_BENCH_ARGS:-} 2>&1 | tee "$out/gpu-bench.log"
  if [ -n "${FG_BENCH_AB:-}" ]; then  # the same rows again with these arguments added
    timeout "${FG_BENCH_TIMEOUT:-900}" python3 benchmarks/gpu.py ${FG_BENCH_ARGS:-} $FG_BENCH_AB 2>&1 \
      | tee "$out/gpu-bench-ab.log"
  fi
  if [ "${FG_MODELS_ARGS:-}" != skip ]; then
    for model in resnet18 gpt vit; do
      timeout "${FG_MODELS_TIMEOUT:-120}" python3 benchmarks/gpu_models.py --model $model \
        ${FG_MODELS_ARGS:---rounds 3} 2>&1 | grep -v Warning | tee -a "$out/gpu-models.log"
    done
  fi
fi
if [ "$what" != bench ]; then
  workers=""  # FG_WORKERS: pytest-xdist's workers (0: none), else the cores less two
  if python3 -c "import xdist" 2>/dev/null && [ "${FG_WORKERS:-}" != 0 ]; then
    workers="-n ${FG_WORKERS:-$(($(nproc) - 2))}"
  fi
  # each failure written as it is reported: a run cut by its time limit has no summary
  export FUSEGRAD_TEST_FAILURES="$out/gpu-failures.txt"
  tests=${FG_TESTS:-tests/frontend tests/ir tests/nn tests/runtime/test_cuda_device.py tests/pipeline/test_cuda.py}
  FUSEGRAD_TEST_DEVICE=cuda timeout "${FG_TESTS_TIMEOUT:-3600}" python3 -m pytest -q -p no:cacheprovider $workers \
    $tests "$@" 2>&1 | tee "$out/gpu-tests.log" | tail -60
  if [ "${PIPESTATUS[0]}" = 5 ] && [ -n "$workers" ]; then
    # pytest-xdist has collected nothing on a GPU machine ("no tests ran", no error
    # shown): the same tests again in one process
    echo "no tests ran under pytest-xdist: again without it"
    FUSEGRAD_TEST_DEVICE=cuda timeout "${FG_TESTS_TIMEOUT:-3600}" python3 -m pytest -q -p no:cacheprovider \
      -p no:xdist $tests "$@" 2>&1 | tee "$out/gpu-tests.log" | tail -60
  fi
fi
