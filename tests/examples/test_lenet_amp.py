"""examples/lenet_mnist.py --amp bf16 / fp16: a short run under fg.autocast learns as the
float32 run does (the full runs' accuracies are in the README: within 0.3 points)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "lenet_mnist.py")


def _accuracy(*flags: str) -> tuple[float, str]:
    args = ["--limit", "1280", "--test-limit", "500", "--no-progress", *flags]
    out = subprocess.run(
        [sys.executable, EXAMPLE, *args], capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return float(re.search(r"test accuracy ([\d.]+)%", out.stdout).group(1)), out.stdout


def test_short_mixed_precision_runs_learn_as_float32():
    full, _ = _accuracy()
    assert full > 50.0  # 20 steps of 64 images: far above chance (10%)
    for amp in ("bf16", "fp16"):
        mixed, stdout = _accuracy("--amp", amp)
        assert f"autocast {amp}" in stdout
        assert abs(mixed - full) <= 3.0, (amp, mixed, full)
