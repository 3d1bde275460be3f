"""Seeing what fusegrad compiled: `kernels()` returns every kernel behind some tensors.

>>> import fusegrad as fg
>>> x = fg.randn(1000)
>>> ks = fg.kernels((x * 2).exp())
>>> len(ks), ks[0].ops[-1]
(1, 'EXP')

Each record has `name`, `ops` (the fused ops), `lines` (your file:lines they
came from), `reason` (why the kernel's output is materialized), `loop_ir`,
`llvm_ir`, `llvm_ir_optimized`, `asm` and `cuda_c`, plus `seconds`, `bytes`,
`flops` and `cache` ("compiled", "disk" or "memory").
"""

from __future__ import annotations

from .tensor import Tensor, realize


def kernels(*tensors: Tensor) -> list:
    """Realize `tensors` and return the kernels that computed them, in launch order."""
    fresh = realize(*tensors)
    if fresh:
        return fresh
    out: list = []
    for t in tensors:
        for rec in getattr(t.node.realized, "kernels", []):
            if all(rec is not r for r in out):
                out.append(rec)
    return out
