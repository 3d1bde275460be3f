"""torchvision.models' ResNets (datasets/torchvision_models.py): torchvision's parameter
counts, state dict names and children; its initialization; its errors for what it refuses;
and, where torch and torchvision are installed, the same outputs and input gradients as
torchvision's from the same weights, in training and in evaluation."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn
from fusegrad.datasets import torchvision_models as models

# torchvision 0.29's figures: (state dict entries, parameters) at 1000 classes
SIZES = {
    "resnet18": (122, 11_689_512),
    "resnet34": (218, 21_797_672),
    "resnet50": (320, 25_557_032),
    "resnext50_32x4d": (320, 25_028_904),
    "wide_resnet50_2": (320, 68_883_240),
}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_sizes_and_names_are_torchvisions(name):
    model = getattr(models, name)()
    state = model.state_dict()
    assert (len(state), sum(p.numel() for p in model.parameters())) == SIZES[name]
    assert [n for n, _ in model.named_children()] == [
        "conv1", "bn1", "relu", "maxpool", "layer1", "layer2", "layer3", "layer4",
        "avgpool", "fc",
    ]  # fmt: skip
    assert state["conv1.weight"].shape == (64, 3, 7, 7)
    assert state["layer2.0.downsample.0.weight"].shape[2:] == (1, 1)
    assert "layer2.0.downsample.1.num_batches_tracked" in state


def test_the_initial_weights_are_drawn_as_torchvisions():
    fg.manual_seed(0)
    model = models.resnet50(num_classes=10)
    conv = model.layer3[1].conv2.weight.numpy()  # 256 x 256 x 3 x 3: fan-out 2304
    assert abs(conv.mean()) < 2e-3 and abs(conv.std() / np.sqrt(2 / 2304) - 1) < 0.02
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            assert (m.weight.numpy() == 1).all() and (m.bias.numpy() == 0).all()
    zero = models.resnet18(zero_init_residual=True)
    assert (zero.layer1[0].bn2.weight.numpy() == 0).all()
    assert (zero.layer1[0].bn1.weight.numpy() == 1).all()
    assert (models.resnet50(zero_init_residual=True).layer4[2].bn3.weight.numpy() == 0).all()


def test_a_stage_can_dilate_instead_of_striding():
    model = models.resnet50(replace_stride_with_dilation=[False, True, True], num_classes=4)
    x = fg.tensor(np.random.default_rng(0).standard_normal((1, 3, 64, 64), np.float32))
    features = nn.Sequential(*list(model.children())[:-2])(x)
    assert features.shape == (1, 2048, 8, 8)  # 64 / 8: stages 3 and 4 keep the size
    assert model.layer4[1].conv2.dilation == (4, 4)


def test_what_torchvision_refuses_is_refused():
    with pytest.raises(NotImplementedError, match="resnet18\\(weights='IMAGENET1K_V1'\\)"):
        models.resnet18(weights="IMAGENET1K_V1")
    with pytest.raises(NotImplementedError, match="pretrained=True"):
        models.resnet50(pretrained=True)
    with pytest.raises(ValueError, match="BasicBlock only supports groups=1"):
        models.resnet18(groups=2)
    with pytest.raises(NotImplementedError, match="Dilation > 1 not supported in BasicBlock"):
        models.resnet18(replace_stride_with_dilation=[False, True, True])
    with pytest.raises(ValueError, match="3-element tuple"):
        models.resnet50(replace_stride_with_dilation=[True])


@pytest.mark.parametrize("name", ["resnet18", "resnext50_32x4d"])
@pytest.mark.parametrize("training", [True, False])
def test_the_same_weights_compute_torchvisions_outputs_and_gradients(name, training):
    # in float64: a training step's batch norms over 2 x 2 x 2 values make float32's input
    # gradient ill-conditioned (torchvision's own float32 one is 0.24 from its float64 one
    # where the gradient reaches 20; fusegrad's float64 one is within 1e-11 of it)
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    theirs = getattr(torchvision.models, name)(num_classes=7).train(training).double()
    ours = getattr(models, name)(num_classes=7).train(training).double()
    state = {k: v.detach().numpy() for k, v in theirs.state_dict().items()}
    ours.load_state_dict({k: fg.tensor(v) for k, v in state.items()})
    x = np.random.default_rng(1).standard_normal((2, 3, 48, 48))
    tx = torch.tensor(x, requires_grad=True)
    want = theirs(tx)
    (want * want).sum().backward()
    fx = fg.tensor(x, requires_grad=True)
    got = ours(fx)
    (got * got).sum().backward()
    np.testing.assert_allclose(got.numpy(), want.detach().numpy(), rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(fx.grad.numpy(), tx.grad.numpy(), rtol=1e-8, atol=1e-9)
    if training:  # the batch norms' running statistics moved as torchvision's
        key = "layer1.0.bn1.running_var"
        np.testing.assert_allclose(
            ours.state_dict()[key].numpy(), theirs.state_dict()[key].numpy(), rtol=1e-12
        )


def test_float32_evaluation_matches_torchvisions():
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    theirs = torchvision.models.resnet18(num_classes=7).eval()
    ours = models.resnet18(num_classes=7).eval()
    ours.load_state_dict({k: fg.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    x = np.random.default_rng(1).standard_normal((2, 3, 48, 48)).astype(np.float32)
    want = theirs(torch.tensor(x)).detach().numpy()
    np.testing.assert_allclose(ours(fg.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-4)


def test_torchvisions_module_paths_resolve_under_the_shim():
    from fusegrad.torch_shim import TorchShim

    shim = TorchShim()
    assert shim.module("torchvision.models").resnet18 is models.resnet18
    assert shim.module("torchvision.models.resnet").BasicBlock is models.BasicBlock
