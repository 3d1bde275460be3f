"""CUDA C kernels that are the same up to their sizes: one build, the sizes passed in.

`pipeline/templates.py` does this for the CPU's LLVM IR; here it is done for the cuda
device's CUDA C, where it matters more: a new sentence length, batch or image size
otherwise costs nvcc (or the emulator's g++) a build of each new kernel, about a second.

A kernel's CUDA C is read as a *shape* and its *literals*. The literals cut out are
those the renderer writes for sizes and strides in index arithmetic, `1234LL` (64-bit
integers, `cuda_text.literal` and `index`), and float constants written `37.0f` whose
value is a float32 exactly (a mean's count, its reciprocal); a float constant that is
not stays in the text, since C reads `0.1f` from the decimal, not from the double. The
comments and the kernel's symbol (which names its sizes) are not part of the shape. Two
kernels with the same shape differ only in those literals.

In a plan whose sizes vary (`templates.active()`, the engine's `varying`), a kernel whose
shape was built before with other literals (the registry of `pipeline/templates.py`,
under level `CUDA`) is not built itself: its *generic* form is, in which each literal
that differed is read from a parameter `unsigned long long fg_l<k>` after the buffers
and scratch arrays (every `__global__` function of the source takes all of them), the
others kept as they were. The kernel then launches that code with its own launches
(grid, block, shared memory, scratch: its own rendering's) and its literals' words as
those parameters (`CudaKernel.lits`); nothing is built for it. A 64-bit literal is read
as `(long long)fg_l<k>`, the type `1234LL` has; a float one as the float of the double
whose bits the word holds, exactly the constant's value. The generic code computes what
the kernel's own code computes; it can be slower where nvcc no longer knows a trip
count or a divisor. A generic form that does not build (a literal where C wants a
constant) is never tried again for that shape; its kernels build on their own.

Kernels with tensor maps (`FG_TMAP_PARAMS`, sm_90a) pass those after their buffers and
are always built for their own sizes.

>>> code = 'extern "C" __global__ void k(int* o) { o[3LL] = 2.0f; }'
>>> s = shape_of(code)
>>> s.literals, s.types
(('3', '2.0'), ('i64', 'float'))
>>> print(generic_source(code, s, ((0,),)))
extern "C" __global__ void k(int* o, unsigned long long fg_l0) { o[((long long)fg_l0)] = 2.0f; }
"""

from __future__ import annotations

import hashlib
import re
import struct

import numpy as np

from .cuda_types import KERNEL_HEAD
from .templates import Groups, Shape

CUDA = "cuda"  # the templates registry's level for CUDA C shapes (LLVM's are O levels)
SYMBOL = "FG_KERNEL"  # stands for the kernel's symbol in the code shapes are read from
GENERIC_PREFIX = "fg_generic_"  # a generic kernel's symbol: this and its code's digest

_TOKEN = re.compile(
    r"//[^\n]*"  # a comment
    r"|(?<![\w.])(\d+)LL\b"  # a 64-bit integer literal
    r"|(?<![\w.])((?:\d+\.\d*|\.\d+)(?:e[-+]?\d+)?|\d+e[-+]?\d+)f\b"  # a float literal
)


def code_of(source: str, symbol: str) -> str | None:
    """A kernel's CUDA C with its symbol replaced by `SYMBOL`, or None for a kernel that
    cannot run generic (tensor maps after its buffers)."""
    if " FG_TMAP_PARAMS)" in source:  # (a head's, not the prelude's definition)
        return None
    return source.replace(symbol, SYMBOL)


def shape_of(code: str) -> Shape:
    """`code` (as `code_of` gives it) as a shape and its literals (the module docstring
    says which); comments are left out of the shape's text, and what comes before the
    first kernel (the prelude, a few KB the same in most kernels) is there as its digest."""
    literals, spans, types = [], [], []
    bodies = _bodies(code)
    start = bodies[0][0] if bodies else 0
    prelude = re.sub(r"//[^\n]*", "", code[:start])
    pieces = [hashlib.sha1(prelude.encode()).hexdigest(), "\n"]
    at = start
    for m in _TOKEN.finditer(code, start):
        if m.group(0)[:2] != "//" and not any(a <= m.start() < b for a, b in bodies):
            continue  # (the prelude's helpers take no literals)
        if m.group(1) is not None:
            tok, ty = m.group(1), "i64"
        elif m.group(2) is not None:
            tok, ty = m.group(2), "float"
            value = float(tok)
            if float(np.float32(value)) != value:  # (C reads it from the decimal)
                continue
        else:  # a comment: out of the text
            pieces.append(code[at : m.start()])
            at = m.end()
            continue
        pieces.append(code[at : m.start()] + "\x00")
        at = m.end()
        literals.append(tok)
        spans.append((m.start(), at))
        types.append(ty)
    pieces.append(code[at:])
    return Shape("".join(pieces), tuple(literals), tuple(spans), tuple(types))


def _bodies(code: str) -> list[tuple[int, int]]:
    """Where each `__global__` function of `code` is, from its head to its closing brace
    (the literals of those only are cut: the helpers before them see no parameters)."""
    out = []
    for m in KERNEL_HEAD.finditer(code):
        depth, at = 0, code.find("{", m.end())
        while 0 <= at < len(code):
            c = code[at]
            depth += c == "{"
            depth -= c == "}"
            at += 1
            if depth == 0:
                break
        out.append((m.start(), at))
    return out


def generic_source(code: str, shape: Shape, groups: Groups) -> str:
    """`code` with the literals at each group's positions read from parameter
    `fg_l<group>`, those parameters added after every `__global__` function's own."""
    slot = {p: k for k, group in enumerate(groups) for p in group}
    out, at = [], 0
    for p, (start, end) in enumerate(shape.spans):
        k = slot.get(p)
        if k is None:
            continue
        read = f"((long long)fg_l{k})"
        if shape.types[p] == "float":
            read = f"((float)__longlong_as_double((long long)fg_l{k}))"
        out.append(code[at:start] + read)
        at = end
    out.append(code[at:])
    text = "".join(out)
    extra = ", ".join(f"unsigned long long fg_l{k}" for k in range(len(groups)))

    def widen(m: re.Match) -> str:
        params = m.group(2).strip()
        head = m.group(0)
        close = head.rindex(")")
        return head[:close] + (", " if params else "") + extra + head[close:]

    return KERNEL_HEAD.sub(widen, text) if extra else text


def words(shape: Shape, groups: Groups) -> tuple[int, ...]:
    """What a kernel of `shape` passes its generic kernel: each group's literal as the
    64 bits of an `unsigned long long` (a float's: the bits of its double)."""
    out = []
    for group in groups:
        tok = shape.literals[group[0]]
        if shape.types[group[0]] == "float":
            out.append(struct.unpack("<Q", struct.pack("<d", float(tok)))[0])
        else:
            out.append(int(tok))
    return tuple(out)


def named(code: str) -> tuple[str, str]:
    """(symbol, source) of a generic kernel's code: `SYMBOL` replaced by a name of its own,
    from the code's digest (the module cache keys modules by symbol)."""
    symbol = GENERIC_PREFIX + hashlib.sha1(code.encode()).hexdigest()[:12]
    return symbol, code.replace(SYMBOL, symbol)
