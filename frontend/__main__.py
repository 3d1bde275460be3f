"""`python -m fusegrad script.py [args]`: run an unchanged PyTorch script on fusegrad.

`import torch` (and torch.nn, torch.optim, torch.utils.data, ...) resolves to fusegrad's
modules (and `import torchvision` to MNIST, the tensor transforms and save_image)
through the import hook of `fusegrad/torch_shim.py`, installed here only; the
script runs as `__main__` with `sys.argv` = [script, args...] and its folder first on
`sys.path`, as `python script.py` runs it. `python -m fusegrad -m package.module [args]`
runs a module the same way. At exit, stderr lists every torch name the script asked for
that fusegrad lacks. docs/TORCH_SCRIPTS.md says what is mapped.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys

from . import torch_shim

USAGE = "usage: python -m fusegrad script.py [args ...] | -m module [args ...]"


def main(argv: list[str] | None = None) -> int:
    """Run the script (or `-m module`) that `argv` names with the torch hook installed;
    the exit status is 2 for a bad command line, else what the script's own would be."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE + "\n\n" + __doc__.split("\n\n", 1)[1].strip(), file=sys.stderr)
        return 0 if argv else 2
    as_module = argv[0] == "-m"
    if as_module and len(argv) < 2:
        print(USAGE, file=sys.stderr)
        return 2
    target = argv[1] if as_module else argv[0]
    if not as_module and not os.path.isfile(target):
        print(f"python -m fusegrad: can't open file {target!r}: no such file", file=sys.stderr)
        return 2
    shim = torch_shim.install()
    atexit.register(_report, shim)
    if as_module:
        sys.argv = [target] + argv[2:]  # runpy puts the module's path in sys.argv[0]
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target] + argv[1:]
        sys.path[0] = os.path.dirname(os.path.abspath(target))
        runpy.run_path(target, run_name="__main__")
    return 0


def _report(shim: torch_shim.TorchShim) -> None:
    text = torch_shim.summary(shim.missing)
    if text:
        sys.stderr.flush()
        print(text, file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
