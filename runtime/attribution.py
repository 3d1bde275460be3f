"""User-line attribution: which line of the user's code asked for an op (its `Site`).

ir/sites.py keeps the side table from nodes to sites and the block-wide `fixed` site;
this module says what a site is and finds the current one (`capture`), and installs
`capture` in `ir/hooks.py` for the table to call (ir imports nothing of the runtime).
The frontend names errors after sites, the runtime names kernels and its warnings
after them.

A site is cheap to take (`capture`: the innermost frame outside the registered
library folders): a code object, a line number and the code object of the
library function the user called. Names are worked out only when printed:

>>> site = Site(compile("y = x @ w", "train.py", "exec"), 12)
>>> str(site), site.backward().role
('train.py:12', 'backward')
"""

from __future__ import annotations

import functools
import os
import re
import sys
import sysconfig
import threading

from ..ir.hooks import hooks
from ..ir.sites import ambient, fixed  # noqa: F401  (fixed: for the frontend, with capture)

_LIBRARY_DIRS: tuple[str, ...] = ()
# id(code object) -> (the code object, its kind): 0, the user's; 1, a library function whose
# name labels an op; 2, a library frame that only passes calls on (Module.__call__,
# contextlib, containers). Keyed by id, the entry holding its code: a code object's own hash
# walks its constants and names on every lookup, and `capture` looks up a frame's each time.
_kind: dict[int, tuple] = {}
_PASS_THROUGH = {"__call__", "_call_impl", "__enter__", "__exit__", "helper", "inner", "wrapper"}
_CONTAINERS = {"Sequential", "ModuleList", "ModuleDict", "_NoParamModule"}


def _dirs(*keys: str) -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple({os.path.abspath(paths[k]) + os.sep for k in keys if paths.get(k)})


_STDLIB = _dirs("stdlib", "platstdlib")
_SITE_PACKAGES = _dirs("purelib", "platlib")  # inside the stdlib folder outside a venv


def is_stdlib(name: str) -> bool:
    """Whether a file is part of the standard library (site-packages are not)."""
    return (name.startswith(_STDLIB) and not name.startswith(_SITE_PACKAGES)) or (
        name[:7] == "<frozen"
    )


def register_library_dirs(dirs) -> None:
    """The folders whose frames are fusegrad's own, not the user's (the frontend says which)."""
    global _LIBRARY_DIRS
    _LIBRARY_DIRS = tuple(os.path.abspath(d) + os.sep for d in dirs)
    _kind.clear()
    _sites.clear()  # a site's library call depends on which frames are the library's


def library_dirs() -> tuple[str, ...]:
    return _LIBRARY_DIRS


def _kind_of(code) -> int:
    name = code.co_filename
    stdlib = is_stdlib(name)
    if not (stdlib or name.startswith(_LIBRARY_DIRS)):
        k = 0
    elif stdlib or code.co_name in _PASS_THROUGH:
        k = 2
    else:
        qual = getattr(code, "co_qualname", code.co_name)
        k = 2 if qual.rpartition(".")[0] in _CONTAINERS else 1
    _kind[id(code)] = (code, k)
    return k


class Site:
    """A user's source line, and the library call made on it (the op's label).

    `str(site)` is `file:line`; `site.label` the user-level op (`linear`, `conv2d`,
    `cross_entropy`, `sgd update`); `site.role` is "forward", "backward" (a gradient
    of the op at that line) or "optimizer"; `site.module` the path of the innermost
    `nn.Module` whose forward made the op (`module_scope`), or None outside any.
    """

    __slots__ = ("code", "line", "api", "_label", "role", "_backward", "_text", "module")

    def __init__(
        self, code, line: int, api=None, label: str | None = None, role="forward", module=None
    ):
        self.code, self.line, self.api, self._label, self.role = code, line, api, label, role
        self.module: str | None = module  # the path of the module running: "ResNet.layer1.0"
        self._backward: Site | None = None
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = f"{os.path.basename(self.code.co_filename)}:{self.line}"
        return self._text

    __repr__ = __str__

    @property
    def path(self) -> str:
        """The full file name."""
        return self.code.co_filename

    @property
    def label(self) -> str:
        if self._label is None:
            self._label = _label_of(self.api) if self.api is not None else "op"
            if self.role == "backward":
                self._label += " backward"
        return self._label

    def with_label(self, label: str, role: str) -> Site:
        return Site(self.code, self.line, self.api, label, role, self.module)

    def backward(self) -> Site:
        """The site of gradients of this site's op: the same line, role "backward"."""
        if self.role == "backward":
            return self
        if self._backward is None:
            self._backward = Site(self.code, self.line, self.api, None, "backward", self.module)
            if self._label is not None:  # an explicit label (an optimizer's) carries over
                self._backward._label = self._label + " backward"
        return self._backward

    def describe(self) -> str:
        """`label (file:line)`, as kernels list their ops."""
        return f"{self.label} ({self})"


_REVERSED = {"radd", "rsub", "rmul", "rtruediv", "rfloordiv", "rmatmul", "rpow", "rmod"}
_DUNDER = {"truediv": "div", "getitem": "index", "setitem": "index_put", "neg": "neg"}


def _snake(name: str) -> str:
    """`MaxPool2d` -> `max_pool2d`; a base class's `_PoolNd` -> `pool`."""
    name = name.lstrip("_")
    name = name[:-2] if name.endswith("Nd") else name
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z][a-z])", "_", name).lower()  # ReLU -> relu


def _label_of(code) -> str:
    """The user-level name of the library function `code` (`Linear.forward` -> `linear`)."""
    qual = getattr(code, "co_qualname", code.co_name)
    owner, _, name = qual.rpartition(".")
    owner = owner.rpartition(".")[2]
    if name == "forward" and owner:
        return _snake(owner)
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
        if name in _REVERSED:
            name = name[1:]
        if name.startswith("i") and name[1:] in ("add", "sub", "mul", "truediv"):
            name = name[1:]
        return _DUNDER.get(name, name)
    return name.rstrip("_") or name


# (id(code), line, id(library code), module path) -> its Site (whose code and api say which
# objects the ids were: `capture` checks them)
_sites: dict[tuple, Site] = {}


class _ModuleScope(threading.local):
    """The `nn.Module` whose forward is running on this thread: `top` is `(path, weak
    reference to the module)` or None. `Module.__call__` sets it around its forward (a
    path is `ResNet.layer1.0.conv1`: the outermost module's class, then the names each
    parent gives its child, as `named_modules()` spells them), and `capture` puts the
    path on the sites it makes."""

    top = None  # (a class default: a thread that never set it reads None)


module_scope = _ModuleScope()


class _Hints(threading.local):
    """The last few walks of `capture` on this thread, most recent first, each
    `(skip, id(user frame), its code, its instruction, api skip, api code, module scope,
    site)`: the user frame was `skip` frames above the walk's start, and the library
    function it called (the site's `api`) `api skip` frames above. A tensor op makes
    several tensors from one user line (`(x * 2 + 1).sum()`: four), each through a stack
    of library frames that `capture` would otherwise walk, materializing each frame, a
    third of the op's cost. A hint is taken when the frame that far up is that very frame
    object, suspended at that very instruction (a frame object lives as long as its call,
    and an instruction is one call expression), the frame `api skip` up runs that very
    library function and the module scope is the same: then the walk would find the same
    user line, library call and module."""

    recent: tuple = ()  # (a class default: a thread that never walked has none)


_hints = _Hints()
HINTS_KEPT = 4


def capture(depth: int = 1, api=None) -> Site | None:
    """The site of the innermost frame outside the library, `depth` frames above the caller
    (`api`: the library function being entered there, if the walk finds no outer one).

    Inside `fixed(site)` it is that site, without walking the stack.
    """
    site = ambient.site
    if site is not None:
        return site
    start = depth + 1  # (from here: this function's frame is 0)
    scope = module_scope.top
    if api is None:
        getframe = sys._getframe
        for skip, key, code, lasti, api_skip, api_code, hscope, hsite in _hints.recent:
            try:
                f = getframe(start + skip)
            except ValueError:  # (a shallower stack)
                continue
            if (
                id(f) == key
                and f.f_code is code
                and f.f_lasti == lasti
                and hscope is scope
                and getframe(start + api_skip).f_code is api_code
            ):
                return hsite
    f = sys._getframe(start)
    kind = _kind
    skip, api_skip, given = 0, -1, api
    while f is not None:
        code = f.f_code
        e = kind.get(id(code))
        k = e[1] if e is not None and e[0] is code else _kind_of(code)
        if k == 0:  # one Site per (line, call, module): nodes share it, its text is made once
            module = scope[0] if scope is not None else None
            key = (id(code), f.f_lineno, id(api), module)
            site = _sites.get(key)
            if site is None or site.code is not code or site.api is not api:
                site = _sites[key] = Site(code, f.f_lineno, api, module=module)
            if given is None and api_skip >= 0:
                hint = (skip, id(f), code, f.f_lasti, api_skip, api, scope, site)
                _hints.recent = (hint, *_hints.recent[: HINTS_KEPT - 1])
            return site
        if k == 1:
            api, api_skip = code, skip
        f = f.f_back
        skip += 1
    return None


def one_site(fn):
    """Decorator for a library op that makes many tensors (`cross_entropy`, `linear`,
    `log_softmax`): the user's line is found once, on entry, instead of once per tensor
    the op makes. The site is the same either way (the user's line, labelled by the
    outermost library call made on it)."""
    api = fn.__code__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if ambient.site is not None:
            return fn(*args, **kwargs)
        ambient.site = capture(1, api)
        try:
            return fn(*args, **kwargs)
        finally:
            ambient.site = None

    return wrapper


# ir/sites.py's note_new finds a new node's user line through this
hooks.capture = capture
