#!/usr/bin/env bash
# Build the wheels scripts/gpu.sh carries to a GPU machine that reaches no registry, on a
# machine that does (no GPU needed): PyCUDA for the GPU machine's Python (3.12 on the
# device tool's image), its pure-Python needs, and PyCUDA's sdist as a fallback.
#
#   bash scripts/pycuda_wheel.sh OUT [PYTHON]      (PYTHON: a python3.12; pyenv's by default)
#
# PyCUDA links -lcuda. With no driver here, a stub libcuda.so stands in. A stub with no
# symbols is dropped from the module's needs by the linker (--as-needed), and the module
# then cannot find the real driver on the GPU machine. So the first build only lists the
# cu* symbols PyCUDA uses; the stub is rebuilt defining them, and the modules are linked
# again. curand is off: this toolkit may have no curand headers, and fusegrad does not
# use it. Session 20 built pycuda 2026.1 this way; it ran on an H100.
set -euo pipefail
out=$(realpath -m "$1")
py=${2:-$(ls -d /root/.pyenv/versions/3.12*/bin/python3.12 2>/dev/null | head -1)}
cuda=${CUDA_ROOT:-$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")}
[ -x "$py" ] || { echo "no python3.12 (give one as the second argument)" >&2; exit 1; }
[ -f "$cuda/include/cuda.h" ] || cuda=/usr/local/cuda-13.0
work=$(mktemp -d)
mkdir -p "$out"
"$py" -m venv "$work/venv"
"$work/venv/bin/pip" install -q wheel setuptools numpy
python3 -m pip download -q --no-deps --no-binary pycuda -d "$out" pycuda
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$out" pytools platformdirs mako siphash24
tar xzf "$out"/pycuda-*.tar.gz -C "$work"
src=$(ls -d "$work"/pycuda-*/)
mkdir "$work/stub"
echo 'void fg_stub(void) {}' > "$work/stub/s.c"
stub() { gcc -shared -fPIC -Wl,-soname,libcuda.so.1 -o "$work/stub/libcuda.so" "$work/stub/s.c"; }
stub
cd "$src"
"$work/venv/bin/python" configure.py --cuda-root="$cuda" --cudadrv-lib-dir="$work/stub" \
  --cudart-lib-dir="$cuda/lib64" --no-cuda-enable-curand >/dev/null
"$work/venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$work/first" .
mkdir "$work/unpacked"
(cd "$work/unpacked" && unzip -q "$work"/first/pycuda-*.whl)
nm -D --undefined-only "$work"/unpacked/pycuda/*.so | awk '$2 ~ /^cu[A-Z]/ {print $2}' \
  | sort -u | awk '{print "void " $1 "(void) {}"}' > "$work/stub/s.c"
stub
find build -name '*.so' -delete  # link again, against the stub that defines the symbols
"$work/venv/bin/pip" wheel -q --no-deps --no-build-isolation -w "$out" .
rm -rf "$work"
ls "$out"
