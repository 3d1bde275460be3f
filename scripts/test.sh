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
.venv/bin/python -m ruff check frontend ir codegen runtime nn tests examples benchmarks
.venv/bin/python -m pytest -q "$@"
