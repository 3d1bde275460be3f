"""torch's module paths resolved to fusegrad's, for `python -m fusegrad script.py`.

An import hook (a `sys.meta_path` finder) answers `import torch`, `import torch.nn`,
`from torch.utils.data import DataLoader`, ... with modules named as torch's whose
attributes are fusegrad's: `torch.nn.Linear` *is* `fusegrad.nn.Linear`. `TORCH_MODULES`
is the one table of what is mapped; docs/TORCH_SCRIPTS.md lists it for users. Only
`python -m fusegrad` installs the hook (`install`); `import fusegrad` never does.
`torchvision` and its `datasets`, `transforms`, `utils` and `models` are answered the same
way, from fusegrad.datasets.torchvision_shim (MNIST over the shipped copy, the tensor
transforms, the ResNets).

A name fusegrad lacks raises `TorchGapError` (an AttributeError, so `hasattr` and
`getattr(torch, name, default)` keep working) or, for a module, `TorchModuleGap` (a
ModuleNotFoundError, so `try: import ... except ImportError` keeps working); both name
the torch name and say it is fusegrad's gap. Every such name is recorded, and
`python -m fusegrad` lists them on stderr at exit (`missing_names`).

>>> shim = TorchShim()
>>> shim.module("torch.nn").Linear.__module__
'fusegrad.nn.layers'
>>> hasattr(shim.module("torch.nn"), "NoSuchLayer")  # (TorchGapError, recorded)
False
>>> shim.missing
['torch.nn.NoSuchLayer']
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

# torch's layer files (torch.nn.modules.<file>): each reads as fusegrad.nn, whose
# namespace holds every layer; names torch keeps in one file only are added below
_NN_MODULE_FILES = (
    "activation adaptive batchnorm channelshuffle container conv distance dropout "
    "flatten fold instancenorm lazy linear loss module normalization padding "
    "pixelshuffle pooling rnn sparse transformer upsampling utils"
).split()

# torch's distribution files (torch.distributions.<file>) that fusegrad.distributions holds
_DISTRIBUTION_FILES = (
    "bernoulli beta binomial categorical cauchy chi2 continuous_bernoulli dirichlet "
    "exponential fishersnedecor gamma generalized_pareto geometric gumbel half_cauchy "
    "half_normal independent inverse_gamma kumaraswamy laplace lkj_cholesky log_normal "
    "logistic_normal lowrank_multivariate_normal mixture_same_family multinomial "
    "multivariate_normal negative_binomial normal one_hot_categorical pareto poisson "
    "relaxed_bernoulli relaxed_categorical studentT transformed_distribution uniform "
    "von_mises weibull wishart"
).split()

# the stand-in of torchvision's modules (datasets/ reads the data; imported by name, on
# request, so the frontend does not import it)
_TORCHVISION = "fusegrad.datasets.torchvision_shim"
# the packages whose modules the hook answers
ROOTS = ("torch", "torchvision")

# torch module -> what it reads as: "module" or "module:attribute" (an object, such as
# fusegrad.backends.cudnn, standing in for torch's module)
TORCH_MODULES: dict[str, str] = {
    "torch": "fusegrad",
    "torch._dynamo": "fusegrad.dynamo",
    "torch.accelerator": "fusegrad.accelerator",
    "torch.amp": "fusegrad.amp",
    "torch.autograd": "fusegrad.autograd",
    "torch.autograd.anomaly_mode": "fusegrad.autograd:anomaly_mode",
    "torch.autograd.forward_ad": "fusegrad.autograd:forward_ad",
    "torch.autograd.function": "fusegrad.function",
    "torch.autograd.functional": "fusegrad.autograd_functional",
    "torch.autograd.grad_mode": "fusegrad.autograd:grad_mode",
    "torch.autograd.profiler": "fusegrad.autograd_profiler",
    "torch.autograd.graph": "fusegrad.autograd:graph",
    "torch.autograd.variable": "fusegrad.autograd:variable",
    "torch.backends": "fusegrad.backends",
    "torch.backends.cuda": "fusegrad.backends:cuda",
    "torch.backends.cudnn": "fusegrad.backends:cudnn",
    "torch.backends.mps": "fusegrad.backends:mps",
    "torch.cuda": "fusegrad.cuda",
    "torch.cuda.amp": "fusegrad.cuda_amp",
    "torch.distributed": "fusegrad.distributed",
    "torch.distributions": "fusegrad.distributions",
    "torch.distributions.constraint_registry": "fusegrad.distribution_constraint_registry",
    "torch.distributions.constraints": "fusegrad.distribution_constraints",
    "torch.distributions.distribution": "fusegrad.distribution",
    "torch.distributions.exp_family": "fusegrad.distribution",
    "torch.distributions.kl": "fusegrad.distribution",
    "torch.distributions.transforms": "fusegrad.distribution_transforms",
    "torch.distributions.utils": "fusegrad.distribution",
    **{f"torch.distributions.{name}": "fusegrad.distributions" for name in _DISTRIBUTION_FILES},
    "torch.func": "fusegrad.func",
    "torch.linalg": "fusegrad.linalg",
    "torch.multiprocessing": "fusegrad.multiprocessing",
    "torch.nn": "fusegrad.nn",
    "torch.nn.functional": "fusegrad.nn.functional",
    "torch.nn.init": "fusegrad.nn.init",
    "torch.nn.modules": "fusegrad.nn",
    "torch.nn.parallel": "fusegrad.nn.parallel",
    "torch.nn.parameter": "fusegrad.nn",
    "torch.nn.utils": "fusegrad.nn.utils",
    "torch.nn.utils.clip_grad": "fusegrad.nn.clip_grad",
    "torch.nn.utils.fusion": "fusegrad.nn.fusion",
    "torch.nn.utils.parametrizations": "fusegrad.nn.parametrizations",
    "torch.nn.utils.parametrize": "fusegrad.nn.parametrize",
    "torch.nn.utils.rnn": "fusegrad.nn.utils_rnn",
    "torch.nn.utils.stateless": "fusegrad.nn.stateless",
    "torch.optim": "fusegrad.optim",
    "torch.optim.lr_scheduler": "fusegrad.optim.lr_scheduler",
    "torch.optim.optimizer": "fusegrad.nn.optimizer",
    "torch.optim.swa_utils": "fusegrad.optim.swa_utils",
    "torch.profiler": "fusegrad.torch_profiler",
    "torch.serialization": "fusegrad.serialization",
    "torch.special": "fusegrad.special",
    "torch.testing": "fusegrad.testing",
    "torch.utils": "fusegrad.utils",
    "torch.utils.checkpoint": "fusegrad.utils.checkpoint",
    "torch.utils.data": "fusegrad.data",
    "torch.utils.data.dataloader": "fusegrad.data",
    "torch.utils.data.dataset": "fusegrad.data",
    "torch.utils.data.distributed": "fusegrad.data",
    "torch.utils.data.sampler": "fusegrad.data",
    "torch.utils.tensorboard": "fusegrad.tensorboard",
    "torch.utils.tensorboard.writer": "fusegrad.tensorboard",
    "torch.version": "fusegrad.torch_version",
    **{f"torch.nn.modules.{name}": "fusegrad.nn" for name in _NN_MODULE_FILES},
    # torchvision: MNIST over the shipped copy, the tensor transforms, save_image, ResNets
    "torchvision": f"{_TORCHVISION}:torchvision",
    "torchvision.datasets": f"{_TORCHVISION}:datasets",
    "torchvision.transforms": f"{_TORCHVISION}:transforms",
    "torchvision.utils": f"{_TORCHVISION}:utils",
    "torchvision.models": f"{_TORCHVISION}:models",
    "torchvision.models.resnet": "fusegrad.datasets.torchvision_models",
}

# names a torch module has that its fusegrad stand-in keeps elsewhere
EXTRA_NAMES: dict[str, dict[str, str]] = {
    # a script's torch.save writes torch's own format, which torch.load reads back
    "torch": {"save": "fusegrad.serialization:save_for_torch"},
    "torch.serialization": {"save": "fusegrad.serialization:save_for_torch"},
    "torch.nn.modules.linear": {
        "NonDynamicallyQuantizableLinear": "fusegrad.nn.layers:NonDynamicallyQuantizableLinear"
    },
    "torch.nn.modules.lazy": {"LazyModuleMixin": "fusegrad.nn.lazy:LazyModuleMixin"},
}

# fusegrad names that mean something else than torch's of the same name: gaps, not maps
# (fusegrad.jit records and replays steps; torch.jit scripts and traces models)
NOT_TORCH: frozenset[str] = frozenset({"torch.jit"})

# torch modules that programs import at the top but use only on request (the word language
# model's `import torch.onnx`, for its --onnx-export flag): the import works, and each name
# read from them is a gap, raised at the line that uses it
GAP_MODULES: frozenset[str] = frozenset({"torch.onnx"})

DOC = "docs/TORCH_SCRIPTS.md"
_ABSENT = object()


class TorchGapError(AttributeError):
    """A torch name (an attribute) that fusegrad does not have."""


class TorchModuleGap(ModuleNotFoundError):
    """A torch module that fusegrad does not have."""


def _resolve(target: str):
    module, _, attribute = target.partition(":")
    value = importlib.import_module(module)
    return getattr(value, attribute) if attribute else value


class TorchModule(types.ModuleType):
    """A torch module's stand-in: its own name and import attributes, every other
    attribute read from (and written to) the fusegrad module or object it reads as."""

    def __init__(self, name: str, target, shim: TorchShim):
        super().__init__(name, getattr(target, "__doc__", None))
        d = self.__dict__
        d["_fusegrad_target"], d["_fusegrad_shim"] = target, shim
        d["__path__"] = []  # a package: `import torch.nn.functional` finds its children
        d["__file__"] = getattr(target, "__file__", None) or type(target).__module__
        if isinstance(target, types.ModuleType):
            # its functions and classes in the module's own dict too, for scripts that read
            # it (`models.__dict__[args.arch]()`, pytorch/examples' imagenet); settings and
            # other values stay the target's, read and written through it
            extra, prefix = EXTRA_NAMES.get(name, {}), name + "."
            for key, value in list(vars(target).items()):
                torch_name = prefix + key
                if (
                    key.startswith("_")
                    or isinstance(value, types.ModuleType)
                    or not callable(value)
                    or key in extra
                    or torch_name in NOT_TORCH
                    or torch_name in TORCH_MODULES
                ):
                    continue
                d[key] = value

    def __getattr__(self, name: str):
        shim, target = self.__dict__["_fusegrad_shim"], self.__dict__["_fusegrad_target"]
        torch_name = f"{self.__name__}.{name}"
        if torch_name in TORCH_MODULES:
            return shim.module(torch_name)  # the one sys.modules holds once imported
        extra = EXTRA_NAMES.get(self.__name__, {}).get(name)
        if extra is not None:
            return _resolve(extra)
        if torch_name not in NOT_TORCH:
            value = getattr(target, name, _ABSENT)
            # a module of fusegrad's that the table does not map (fusegrad.profiler) is
            # fusegrad's own, not torch's of that name
            if value is not _ABSENT and not isinstance(value, types.ModuleType):
                return value
        if name.startswith("__") and name.endswith("__"):  # Python's own probes
            raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")
        raise TorchGapError(shim.gap(torch_name, target, name), name=name, obj=self)

    def __setattr__(self, name: str, value) -> None:
        # the import system's own attributes, and child modules it binds on import, stay
        # here; anything a script sets (`torch.backends.cudnn.benchmark = True`) goes to
        # fusegrad's module or object
        if (name.startswith("__") and name.endswith("__")) or isinstance(value, TorchModule):
            self.__dict__[name] = value
        else:
            setattr(self.__dict__["_fusegrad_target"], name, value)

    def __dir__(self) -> list[str]:
        prefix = self.__name__ + "."
        children = {n[len(prefix) :] for n in TORCH_MODULES if n.startswith(prefix)}
        children = {n for n in children if "." not in n}
        return sorted(set(dir(self.__dict__["_fusegrad_target"])) | children)


class TorchShim(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The finder and loader of `torch` and its submodules, and the record of the torch
    names a script asked for that fusegrad lacks (`missing`, in the order first asked)."""

    def __init__(self):
        self._missing: dict[str, None] = {}
        self._modules: dict[str, TorchModule] = {}
        # the real torch or torchvision modules `install` took out of sys.modules, which
        # `uninstall` puts back: imported anew beside its loaded extension, torch fails
        self.displaced: dict[str, types.ModuleType] = {}

    @property
    def missing(self) -> list[str]:
        return list(self._missing)

    def gap(self, torch_name: str, target=None, name: str | None = None) -> str:
        """Record `torch_name` as missing and say so, as an error's message."""
        self._missing.setdefault(torch_name)
        where = ""
        if target is not None:
            owner = getattr(target, "__name__", None) or type(target).__name__
            where = f": {owner} has no {name!r}"
        if torch_name in NOT_TORCH:
            where = ": fusegrad's name of it means something else"
        return (
            f"{torch_name} is not in fusegrad (a gap in fusegrad's torch names{where}; see {DOC})"
        )

    def module(self, torch_name: str) -> TorchModule:
        """The stand-in of torch module `torch_name` (made once, outside sys.modules)."""
        found = self._modules.get(torch_name)
        if found is None:
            if torch_name in GAP_MODULES:
                target = types.ModuleType(torch_name, "A torch module fusegrad does not have.")
            else:
                target = _resolve(TORCH_MODULES[torch_name])
            found = self._modules[torch_name] = TorchModule(torch_name, target, self)
        return found

    # ---------------------------------------------------------------- the import protocol
    def find_spec(self, fullname: str, path=None, target=None):
        if not _is_mapped_package(fullname):
            return None
        if fullname not in TORCH_MODULES and fullname not in GAP_MODULES:
            raise TorchModuleGap(self.gap(fullname), name=fullname)
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec) -> TorchModule:
        return self.module(spec.name)

    def exec_module(self, module) -> None:
        pass  # a stand-in has nothing to run: its attributes are fusegrad's


def _is_mapped_package(name: str) -> bool:
    """Whether module `name` is torch's or torchvision's (the hook's to answer)."""
    return name.split(".", 1)[0] in ROOTS


def install() -> TorchShim:
    """Put a `TorchShim` first on `sys.meta_path` (so it wins over an installed torch or
    torchvision, whose modules already imported are set aside until `uninstall`) and
    return it."""
    shim = TorchShim()
    for name in [n for n in sys.modules if _is_mapped_package(n)]:
        shim.displaced[name] = sys.modules.pop(name)
    sys.meta_path.insert(0, shim)
    return shim


def uninstall(shim: TorchShim) -> None:
    """Take `shim` off `sys.meta_path` and its torch modules out of `sys.modules`, and put
    back the modules `install` set aside (a real torch imported before: importing it
    again would run its extension's start a second time)."""
    if shim in sys.meta_path:
        sys.meta_path.remove(shim)
    for name in [n for n in sys.modules if _is_mapped_package(n)]:
        if isinstance(sys.modules[name], TorchModule):
            del sys.modules[name]
    for name, module in shim.displaced.items():
        sys.modules.setdefault(name, module)
    shim.displaced.clear()


def summary(missing: list[str]) -> str:
    """The lines `python -m fusegrad` prints at exit for the names in `missing` ('' if none)."""
    if not missing:
        return ""
    lines = [
        f"fusegrad: the script asked for {len(missing)} torch name(s) that fusegrad does not "
        f"have (gaps in fusegrad; a name a script only probed with hasattr or try/except "
        f"is listed too; see {DOC}):"
    ]
    return "\n".join(lines + [f"  {name}" for name in missing])
