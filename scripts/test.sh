#!/usr/bin/env bash
# Set up a virtual environment (first run only) and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
# mpi4py (the .[mpi] extra) where MPI is installed: the distributed tests then run (.ci/run installs it)
extras=dev
if command -v mpiexec >/dev/null 2>&1; then extras=dev,mpi; fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[$extras]"
.venv/bin/python -m ruff check frontend ir codegen runtime nn datasets tests examples benchmarks scripts
# every CUDA kernel the tests generate is compiled with nvcc for sm_80 and sm_90 where nvcc
# exists (in the background while the tests run: tests/_nvcc_all.py); say so where it does not
nvcc_all=""
if command -v nvcc >/dev/null 2>&1; then
  nvcc_all=--nvcc-all
else
  echo "scripts/test.sh: nvcc is not on PATH: the CUDA kernels are NOT compiled with nvcc"
fi
.venv/bin/python -m pytest -q $nvcc_all "$@"
