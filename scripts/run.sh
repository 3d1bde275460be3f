#!/usr/bin/env bash
# Set up a virtual environment (first run only) and run the main job: LeNet-5 on MNIST.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e .
.venv/bin/python examples/lenet_mnist.py "$@"
