"""`python -m fusegrad script.py`: unchanged PyTorch scripts run on fusegrad.

Small scripts run in a subprocess under `python -m fusegrad` (the hook is installed by
that command only); the mapping itself (every torch module of the table resolves, a
missing name raises the AttributeError / ImportError subclass and is recorded) is
checked in-process with a hook installed and taken off around each test.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import torch_shim


def run_script(tmp_path, source: str, *args: str, module: bool = False):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    target = ["-m", "script"] if module else [str(path)]
    return subprocess.run(
        [sys.executable, "-m", "fusegrad", *target, *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture
def shim():
    hook = torch_shim.install()
    try:
        yield hook
    finally:
        torch_shim.uninstall(hook)


# ---------------------------------------------------------------- scripts, in a subprocess

TRAINING_SCRIPT = """
import json, sys
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset, RandomSampler
import torch.backends.cudnn as cudnn
from torch.nn.modules.linear import NonDynamicallyQuantizableLinear
import fusegrad

cudnn.benchmark = True
use_accel = torch.accelerator.is_available()
device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
torch.manual_seed(0)
x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(16, 2)
w_true = np.array([[1.5], [-2.0]], np.float32)
data = TensorDataset(x, x @ w_true)
loader = DataLoader(data, batch_size=16, shuffle=True)
endless = DataLoader(data, batch_size=4, sampler=RandomSampler(data, True, 10**10))
model = nn.Linear(2, 1, False, device, torch.float32)
with torch.no_grad():
    model.weight.zero_()
opt = optim.SGD(model.parameters(), lr=0.5)
sched = StepLR(opt, step_size=1, gamma=0.5)
scaler = torch.cuda.amp.GradScaler(enabled=False)
for _ in range(3):
    xb, yb = next(iter(loader))
    opt.zero_grad()
    loss = F.mse_loss(model(xb.to(device)), yb.to(device))
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()
print(json.dumps({
    "argv": sys.argv[1:],
    "name": __name__,
    "same_linear": torch.nn.Linear is fusegrad.nn.Linear,
    "same_optim": optim.SGD is fusegrad.optim.SGD,
    "out_proj": isinstance(nn.MultiheadAttention(4, 2).out_proj, NonDynamicallyQuantizableLinear),
    "accel": [use_accel, torch.accelerator.device_count(), str(device)],
    "cuda": torch.cuda.is_available(),
    "xpu_mps": [torch.zeros(1).is_xpu, torch.zeros(1).is_mps, torch.backends.mps.is_available()],
    "cudnn": fusegrad.backends.cudnn.benchmark,
    "weight": model.weight.tolist()[0],
    "endless": [len(endless), tuple(next(iter(endless))[0].shape)],
    "has_missing": hasattr(torch, "no_such_function"),
}))
"""


def test_a_training_script_runs_unchanged(tmp_path):
    done = run_script(tmp_path, TRAINING_SCRIPT, "--epochs", "3")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["argv"] == ["--epochs", "3"] and out["name"] == "__main__"
    assert out["same_linear"] and out["same_optim"] and out["out_proj"]
    assert out["accel"] == [fg.cuda.is_available(), fg.accelerator.device_count(), "cuda"
                            if fg.cuda.is_available() else "cpu"]  # fmt: skip
    assert out["cuda"] == fg.cuda.is_available()
    assert out["xpu_mps"] == [False, False, False] and out["cudnn"] is True
    assert out["has_missing"] is False
    assert out["endless"] == [10**10 // 4, [4, 2]]
    # the reference: full-batch gradient descent on the mean squared error, lr halved
    # each step (StepLR), from zero weights; shuffling cannot change a full batch's mean
    x = np.linspace(-1, 1, 32).reshape(16, 2)
    y = x @ np.array([[1.5], [-2.0]])
    w, lr = np.zeros((2, 1)), 0.5
    for _ in range(3):
        w = w - lr * (2 * x.T @ (x @ w - y) / len(x))
        lr *= 0.5
    np.testing.assert_allclose(out["weight"], w[:, 0], rtol=1e-5)
    # a probe with hasattr is listed at exit, nothing is printed besides
    assert "torch.no_such_function" in done.stderr


def test_a_missing_name_names_the_torch_name_and_the_exit_lists_every_gap(tmp_path):
    source = """
    import torch
    try:
        import torch.fx
    except ImportError as e:
        print("caught:", type(e).__mro__[1].__name__, e)
    print(getattr(torch, "_inductor", "default"))
    layer = torch.nn.CrossMapLRN2d(3)
    """
    done = run_script(tmp_path, source)
    assert done.returncode == 1
    assert "caught: ModuleNotFoundError torch.fx is not in fusegrad" in done.stdout
    assert "default" in done.stdout  # getattr with a default keeps working
    assert "TorchGapError: torch.nn.CrossMapLRN2d is not in fusegrad" in done.stderr
    assert "fusegrad.nn has no 'CrossMapLRN2d'" in done.stderr
    summary = done.stderr[done.stderr.index("fusegrad: the script asked for") :]
    assert summary.split("\n", 1)[0].startswith("fusegrad: the script asked for 3 torch")
    listed = [line.strip() for line in summary.splitlines()[1:]]
    assert listed == ["torch.fx", "torch._inductor", "torch.nn.CrossMapLRN2d"]


POLICY_GRADIENT_SCRIPT = """
import torch
import torch.distributions as D
from torch.distributions import Categorical

torch.manual_seed(0)
logits = torch.zeros(3, requires_grad=True)
opt = torch.optim.SGD([logits], lr=0.5)
reward = torch.tensor([0.0, 0.2, 1.0])
for step in range(40):
    m = Categorical(logits=logits)
    action = m.sample((16,))
    loss = -(m.log_prob(action) * reward[action]).mean() - 0.01 * m.entropy()
    opt.zero_grad()
    loss.backward()
    opt.step()
print("best", Categorical(logits=logits).probs[2].item())
mu = torch.zeros(2, requires_grad=True)
z = D.Normal(mu, torch.ones(2)).rsample((4,))
kl = D.kl_divergence(D.Normal(mu, torch.ones(2)), D.Normal(torch.ones(2), torch.ones(2)))
(z.sum() + kl.sum()).backward()
print("grad", mu.grad.tolist())
"""


def test_a_policy_gradient_script_with_torch_distributions_learns(tmp_path):
    # REINFORCE on a 3-armed bandit (pytorch/examples' reinforce.py in small), and a
    # reparameterized Normal with a KL term, as a VAE's
    done = run_script(tmp_path, POLICY_GRADIENT_SCRIPT)
    assert done.returncode == 0, done.stderr
    lines = dict(line.split(" ", 1) for line in done.stdout.splitlines())
    assert float(lines["best"]) > 0.8  # from 1/3: the best arm's probability grew
    assert json.loads(lines["grad"]) == [3.0, 3.0]  # 4 draws' d/dloc + KL's (mu - 1)
    assert "asked for" not in done.stderr


def test_a_script_with_no_gap_prints_no_summary_and_keeps_its_exit_status(tmp_path):
    done = run_script(tmp_path, "import sys, torch\nprint(torch.ones(2).sum().item())\n"
                      "sys.exit(3)\n")  # fmt: skip
    assert done.returncode == 3
    assert done.stdout.strip() == "2.0" and "asked for" not in done.stderr


def test_a_module_runs_with_dash_m(tmp_path):
    done = run_script(tmp_path, "import sys, torch.nn\nprint(__name__, sys.argv[1:])\n",
                      "a", module=True)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "__main__ ['a']"


def test_a_bad_command_line_says_how_to_call():
    done = subprocess.run(
        [sys.executable, "-m", "fusegrad", "no/such/script.py"], capture_output=True, text=True
    )
    assert done.returncode == 2 and "no such file" in done.stderr
    done = subprocess.run([sys.executable, "-m", "fusegrad"], capture_output=True, text=True)
    assert done.returncode == 2 and "usage: python -m fusegrad script.py" in done.stderr


def test_pytorch_examples_mnist_with_adadelta_and_steplr_runs(tmp_path):
    """pytorch/examples' MNIST CNN (Adadelta, StepLR, torch.accelerator), unchanged but
    for its data reader, on 512 training images for two epochs."""
    script = Path(__file__).parent / "torch_scripts" / "mnist_adadelta.py"
    args = ["--epochs", "2", "--train-limit", "512", "--test-limit", "256"]
    args += ["--test-batch-size", "256", "--log-interval", "4"]
    done = subprocess.run(
        [sys.executable, "-m", "fusegrad", str(script), *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "asked for" not in done.stderr  # no torch name is missing
    found = re.findall(r"Average loss: ([0-9.]+), Accuracy: (\d+)/256", done.stdout)
    assert len(found) == 2
    (loss1, _), (loss2, correct) = [(float(a), int(b)) for a, b in found]
    assert loss2 < loss1 < math.log(10)  # below chance's loss, and falling
    assert correct > 256 // 2  # chance is a tenth


# ---------------------------------------------------------------- the mapping, in-process


def test_import_fusegrad_installs_no_hook():
    assert not any(isinstance(f, torch_shim.TorchShim) for f in sys.meta_path)


@pytest.mark.parametrize("name", sorted(torch_shim.TORCH_MODULES))
def test_every_mapped_torch_module_imports(shim, name):
    import importlib

    module = importlib.import_module(name)
    assert module.__name__ == name and sys.modules[name] is module
    assert module.__dict__["_fusegrad_target"] is torch_shim._resolve(
        torch_shim.TORCH_MODULES[name]
    )


def test_attributes_are_fusegrads_objects(shim):
    import torch
    import torch.backends.cudnn
    import torch.nn.functional as F  # noqa: N812  (torch's habit)
    from torch.distributions import Categorical, constraints
    from torch.distributions.kl import kl_divergence
    from torch.distributions.normal import Normal
    from torch.nn.modules.linear import NonDynamicallyQuantizableLinear
    from torch.optim import LBFGS, Adadelta
    from torch.utils.data import WeightedRandomSampler

    assert torch.Tensor is fg.Tensor and torch.float32 is fg.float32
    assert torch.nn.functional is F and F.relu is fg.nn.functional.relu
    assert torch.nn.modules.conv.Conv2d is fg.nn.Conv2d
    assert issubclass(NonDynamicallyQuantizableLinear, fg.nn.Linear)
    assert (LBFGS, Adadelta) == (fg.optim.LBFGS, fg.optim.Adadelta)
    assert WeightedRandomSampler is fg.data.WeightedRandomSampler
    assert torch.cuda.amp.GradScaler is fg.cuda.amp.GradScaler
    assert torch.amp.GradScaler is fg.amp.GradScaler
    assert (Categorical, Normal) == (fg.distributions.Categorical, fg.distributions.Normal)
    assert kl_divergence is torch.distributions.kl_divergence is fg.distributions.kl_divergence
    assert constraints.simplex is torch.distributions.constraints.simplex
    assert {"nn", "cuda", "accelerator"} <= set(dir(torch))
    before = fg.backends.cudnn.deterministic
    torch.backends.cudnn.deterministic = not before  # written through to fusegrad's
    try:
        assert fg.backends.cudnn.deterministic is (not before)
    finally:
        fg.backends.cudnn.deterministic = before


def test_missing_names_raise_subclasses_and_are_recorded(shim):
    import torch

    with pytest.raises(AttributeError) as info:
        torch.nn.CrossMapLRN2d  # noqa: B018
    assert isinstance(info.value, torch_shim.TorchGapError)
    assert "torch.nn.CrossMapLRN2d is not in fusegrad" in str(info.value)
    with pytest.raises(ImportError, match="torch.fx is not in fusegrad"):
        import torch.fx  # noqa: F401
    with pytest.raises(ImportError):
        from torch.nn import NoSuchLayer  # noqa: F401
    with pytest.raises(AttributeError, match="means something else"):
        torch.jit.script  # noqa: B018  (fusegrad.jit is not torch.jit)
    assert not hasattr(torch, "hub")
    from fusegrad import torch_profiler

    assert torch.profiler.profile is torch_profiler.profile  # (not fg.profile)
    assert shim.missing == [
        "torch.nn.CrossMapLRN2d",
        "torch.fx",
        "torch.nn.NoSuchLayer",
        "torch.jit",
        "torch.hub",
    ]
    assert "  torch.fx" in torch_shim.summary(shim.missing).splitlines()


def test_torchvision_reads_as_fusegrads_stand_in_and_its_missing_names_are_gaps(shim):
    import torchvision
    import torchvision.transforms as transforms
    from torchvision import datasets
    from torchvision.utils import save_image

    from fusegrad.datasets import torchvision_shim

    assert datasets.MNIST is torchvision_shim.MNIST and save_image is torchvision_shim.save_image
    assert transforms.Normalize is torchvision_shim.Normalize
    assert torchvision.datasets is datasets
    with pytest.raises(AttributeError, match="torchvision.datasets.FashionMNIST is not in"):
        datasets.FashionMNIST  # noqa: B018
    with pytest.raises(ImportError, match="torchvision.ops is not in fusegrad"):
        import torchvision.ops  # noqa: F401
    assert shim.missing == ["torchvision.datasets.FashionMNIST", "torchvision.ops"]
    torch_shim.uninstall(shim)
    assert not any(
        isinstance(m, torch_shim.TorchModule)
        for n, m in sys.modules.items()
        if n.startswith("torchvision")
    )


def test_uninstall_takes_the_torch_modules_away(shim):
    import torch  # noqa: F401

    torch_shim.uninstall(shim)
    # (a real torch imported before the shim, by an earlier test, is back in its place)
    assert not isinstance(sys.modules.get("torch"), torch_shim.TorchModule)
    assert shim not in sys.meta_path


def test_uninstall_puts_back_the_torch_modules_install_set_aside(monkeypatch):
    """A torch imported before the shim (stood for by plain modules here) is set aside while
    the shim is in, then back as it was: imported anew, a real torch would start its
    extension a second time, and fail."""
    before = {n: m for n, m in sys.modules.items() if n.split(".")[0] in ("torch", "torchvision")}
    for name in before:
        monkeypatch.delitem(sys.modules, name)
    real = {n: types.ModuleType(n) for n in ("torch", "torch._C", "torchvision")}
    for name, module in real.items():
        monkeypatch.setitem(sys.modules, name, module)
    hook = torch_shim.install()
    try:
        import torch

        assert torch is not real["torch"] and torch.Tensor is fg.Tensor
        assert not any(sys.modules.get(n) is m for n, m in real.items())
    finally:
        torch_shim.uninstall(hook)
    assert all(sys.modules[n] is m for n, m in real.items())
    assert not hook.displaced and hook not in sys.meta_path


# ---------------------------------------------------------------- the names added


def test_accelerator_is_the_cuda_device():
    assert fg.accelerator.is_available() is fg.cuda.is_available()
    assert fg.accelerator.current_accelerator() == fg.device("cuda")
    expected = None if not fg.cuda.is_available() else fg.device("cuda")
    assert fg.accelerator.current_accelerator(check_available=True) == expected
    assert fg.accelerator.device_count() == (fg.cuda.device_count() if expected else 0)
    assert fg.accelerator.current_device_index() == 0
    with pytest.raises(fg.DeviceError, match="cuda:1"):
        fg.accelerator.set_device_index(1)


def test_tensor_device_kind_properties():
    t = fg.zeros(2, device="cpu")
    assert (t.is_cpu, t.is_cuda, t.is_xpu, t.is_mps) == (True, False, False, False)
    assert fg.backends.mps.is_available() is False and fg.backends.mps.is_built() is False


@pytest.mark.cpu_device  # (it plays a machine without the cuda device)
def test_cuda_amp_spellings_take_torch_cuda_amps_arguments(monkeypatch):
    from fusegrad.runtime.backend import get_backend

    cuda = type(get_backend("cuda"))
    monkeypatch.setattr(cuda, "why_unavailable", lambda self: None)  # (a scaler, no device)
    scaler = fg.cuda.amp.GradScaler(1024.0, 3.0, 0.25, 7)
    assert isinstance(scaler, fg.amp.GradScaler) and scaler.device == "cuda"
    assert (scaler.get_scale(), scaler.get_growth_factor()) == (1024.0, 3.0)
    assert (scaler.get_backoff_factor(), scaler.get_growth_interval()) == (0.25, 7)
    assert fg.cuda.amp.GradScaler(enabled=False).get_scale() == 1.0
    # without the cuda device torch's cuda scaler warns and turns itself off (nanoGPT's
    # float16 run on the CPU): scale, unscale_ and update pass through, step steps
    monkeypatch.setattr(cuda, "why_unavailable", lambda self: "no device")
    with pytest.warns(UserWarning, match="CUDA is not available.  Disabling."):
        off = fg.cuda.amp.GradScaler(1024.0)
    assert not off.is_enabled() and off.get_scale() == 1.0
    assert fg.amp.GradScaler("cpu", 1024.0).is_enabled()  # a cpu scaler works on the CPU
    w = fg.tensor([1.0, -2.0], requires_grad=True)
    opt = fg.optim.SGD([w], lr=0.25)
    loss = (w * w).sum()
    assert off.scale(loss) is loss
    loss.backward()
    off.unscale_(opt)
    off.step(opt)
    off.update()
    assert w.tolist() == [0.5, -1.0]  # w - 0.25 * 2w: the gradient as it was, unscaled
    region = fg.cuda.amp.autocast(dtype=fg.bfloat16, enabled=False)
    assert isinstance(region, fg.autocast) and region.device == "cuda"
    assert region.fast_dtype == fg.bfloat16
    with region:
        assert not fg.is_autocast_enabled("cuda")


def test_a_module_imported_for_an_option_imports_and_its_names_are_gaps(shim):
    # the word language model imports torch.onnx at the top, for --onnx-export only
    import torch.onnx

    assert shim.missing == []  # the import alone is no gap: a run without the option works
    with pytest.raises(AttributeError, match=r"torch\.onnx\.export is not in fusegrad"):
        torch.onnx.export  # noqa: B018
    assert shim.missing == ["torch.onnx.export"]


def test_a_mapped_modules_functions_and_classes_are_in_its_dict(shim):
    """pytorch/examples' imagenet lists `models.__dict__`'s callables for its --arch choices
    and builds `models.__dict__[args.arch]()`; settings stay the target's (a write reaches
    fusegrad's, a read sees it)."""
    import torch
    import torchvision.models as models

    names = sorted(
        n
        for n in models.__dict__
        if n.islower() and not n.startswith("__") and callable(models.__dict__[n])
    )
    assert "resnet18" in names
    assert type(models.__dict__["resnet18"]()).__name__ == "ResNet"
    assert "tensor" in torch.__dict__ and "jit" not in torch.__dict__
    before = torch.backends.cudnn.benchmark
    try:
        torch.backends.cudnn.benchmark = not before
        assert torch.backends.cudnn.benchmark is (not before)
    finally:
        torch.backends.cudnn.benchmark = before


def test_torch_version_and_the_autograd_profilers_record_function(shim):
    """`torch.version` answers as a torch built without CUDA; `torch.autograd.profiler`
    has torch.profiler's `record_function`, and its legacy `profile` is a named gap."""
    import torch

    assert torch.version.cuda is None and torch.version.hip is None
    assert torch.version.__version__ == fg.__version__
    with torch.autograd.profiler.record_function("region"):
        pass
    with pytest.raises(AttributeError, match="torch.autograd.profiler.profile is not in fusegrad"):
        torch.autograd.profiler.profile  # noqa: B018
