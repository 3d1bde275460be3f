#!/usr/bin/env bash
# Set up a virtual environment (first run only) and run the whole test suite.
#   bash scripts/test.sh            the full suite, with the nvcc sweep where nvcc exists (CI's)
#   bash scripts/test.sh --quick    every module's tests but those marked slow, emulator or mpi,
#                                   without the nvcc sweep (docs/TESTING.md)
# Other arguments go to pytest (bash scripts/test.sh --quick tests/ir -x).
# The tests run in pytest-xdist workers, one a core up to 4 (on one core, in this process;
# `-n 0` asks for that, `-n N` for N workers); each takes a contiguous share of the tests
# and steals from another's when done (--dist worksteal), so a file's kernels are mostly
# compiled by one worker.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=0
workers=""
args=()
for arg in "$@"; do
  case "$arg" in
    --quick) quick=1 ;;
    -n | -n* | --numprocesses*) workers=given; args+=("$arg") ;;
    *) args+=("$arg") ;;
  esac
done
cores=$(nproc 2>/dev/null || echo 1)
if [ -z "$workers" ] && [ "$cores" -gt 1 ]; then
  args=(-n "$((cores < 4 ? cores : 4))" --dist worksteal ${args[@]+"${args[@]}"})
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# mpi4py (the .[mpi] extra) where MPI is installed: the distributed tests then run (.ci/run
# installs it); --quick leaves those tests out, and so the extra
extras=dev
if [ "$quick" = 0 ] && command -v mpiexec >/dev/null 2>&1; then extras=dev,mpi; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]"
.venv/bin/python -m ruff check frontend ir pipeline runtime nn datasets tests examples benchmarks scripts
if [ "$quick" = 1 ]; then
  echo "scripts/test.sh --quick: no nvcc sweep, and not the tests marked slow, emulator or mpi"
  exec .venv/bin/python -m pytest -q -m "not slow and not emulator and not mpi" ${args[@]+"${args[@]}"}
fi
# every CUDA kernel the tests generate is compiled with nvcc for sm_80 and sm_90 where nvcc
# exists (in the background while the tests run: tests/_nvcc_all.py); say so where it does not
nvcc_all=""
if command -v nvcc >/dev/null 2>&1; then
  nvcc_all=--nvcc-all
else
  echo "scripts/test.sh: nvcc is not on PATH: the CUDA kernels are NOT compiled with nvcc"
fi
.venv/bin/python -m pytest -q $nvcc_all ${args[@]+"${args[@]}"}
