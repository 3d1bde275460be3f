"""torchvision.models' ResNets for a script run by `python -m fusegrad`: `resnet18`,
`resnet34`, `resnet50`, `resnet101`, `resnet152`, `resnext50_32x4d`, `wide_resnet50_2`,
and `ResNet`, `BasicBlock`, `Bottleneck` to build others.

The modules are torchvision's architecture under torchvision's names, in its order, so a
torchvision state dict loads into them (and theirs into torchvision), `children()` lists
what torchvision's does (`conv1, bn1, relu, maxpool, layer1 ... layer4, avgpool, fc`), and
the forward pass computes what torchvision's computes from the same weights. The initial
weights are drawn as torchvision draws them (He-normal convolutions with fan-out, batch
norms at weight 1 and bias 0, `zero_init_residual` zeroing each block's last batch norm;
the linear layer's torch default), from fusegrad's random stream.

Nothing is downloaded: `weights=None` (and the deprecated `pretrained=False`) only; any
pretrained weights are refused, naming the weights asked for.

>>> model = resnet18(num_classes=10)
>>> [name for name, _ in model.named_children()][:4]
['conv1', 'bn1', 'relu', 'maxpool']
"""

from __future__ import annotations

from collections.abc import Callable

import fusegrad.nn as nn
from fusegrad import flatten


def conv3x3(in_planes: int, out_planes: int, stride=1, groups=1, dilation=1) -> nn.Conv2d:
    """A 3 x 3 convolution, padded to keep the size at stride 1, without bias."""
    return nn.Conv2d(
        in_planes,
        out_planes,
        kernel_size=3,
        stride=stride,
        padding=dilation,
        groups=groups,
        bias=False,
        dilation=dilation,
    )


def conv1x1(in_planes: int, out_planes: int, stride=1) -> nn.Conv2d:
    """A 1 x 1 convolution without bias."""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class _Residual(nn.Module):
    """What torchvision's two blocks share: their arguments (`ResNet` passes them in this
    order), the input added back (through `downsample` where the shapes change), and a
    ReLU after; each block builds its own layers (`_layers`, in torchvision's order) and
    computes the branch the input is added to (`_branch`)."""

    expansion = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: nn.Module | None = None,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm_layer: Callable[..., nn.Module] | None = None,
    ):
        super().__init__()
        norm_layer = norm_layer or nn.BatchNorm2d
        self._layers(inplanes, planes, stride, groups, base_width, dilation, norm_layer)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        return self.relu(self._branch(x) + identity)


class BasicBlock(_Residual):
    """Two 3 x 3 convolutions with batch norms, and the input added back (ResNet-18/34)."""

    expansion = 1

    def _layers(self, inplanes, planes, stride, groups, base_width, dilation, norm_layer):
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)

    def _branch(self, x):
        return self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))


class Bottleneck(_Residual):
    """1 x 1, 3 x 3 (strided, grouped) and 1 x 1 convolutions with batch norms, widening by
    4, and the input added back (ResNet-50 and deeper; torchvision's stride on the 3 x 3)."""

    expansion = 4

    def _layers(self, inplanes, planes, stride, groups, base_width, dilation, norm_layer):
        width = int(planes * (base_width / 64.0)) * groups
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)

    def _branch(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.bn3(self.conv3(out))


class ResNet(nn.Module):
    """torchvision's ResNet: a 7 x 7 stride-2 stem and max pool, four stages of `block`s
    (`layers` of them each; stages 2-4 halve the size, or dilate instead where
    `replace_stride_with_dilation` says), global average pooling, a linear classifier."""

    def __init__(
        self,
        block: type[BasicBlock] | type[Bottleneck],
        layers: list[int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
        groups: int = 1,
        width_per_group: int = 64,
        replace_stride_with_dilation: list[bool] | None = None,
        norm_layer: Callable[..., nn.Module] | None = None,
    ):
        super().__init__()
        self._norm_layer = norm_layer or nn.BatchNorm2d
        self.inplanes, self.dilation = 64, 1
        if replace_stride_with_dilation is None:
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError(
                "replace_stride_with_dilation should be None "
                f"or a 3-element tuple, got {replace_stride_with_dilation}"
            )
        self.groups, self.base_width = groups, width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = self._norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        dilate = replace_stride_with_dilation
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=dilate[0])
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=dilate[1])
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=dilate[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:  # each block starts as the identity
            for m in self.modules():
                if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock) and m.bn2.weight is not None:
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes: int, blocks: int, stride=1, dilate=False):
        norm_layer, previous_dilation = self._norm_layer, self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )
        first = block(
            self.inplanes,
            planes,
            stride,
            downsample,
            self.groups,
            self.base_width,
            previous_dilation,
            norm_layer,
        )
        self.inplanes = planes * block.expansion
        rest = [
            block(
                self.inplanes,
                planes,
                groups=self.groups,
                base_width=self.base_width,
                dilation=self.dilation,
                norm_layer=norm_layer,
            )
            for _ in range(1, blocks)
        ]
        return nn.Sequential(first, *rest)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(flatten(self.avgpool(x), 1))


def _resnet(name: str, block, layers: list[int], weights, progress, kwargs) -> ResNet:
    pretrained = kwargs.pop("pretrained", False)
    if weights is not None or pretrained:
        asked = weights if weights is not None else "pretrained=True"
        raise NotImplementedError(
            f"torchvision.models.{name}(weights={asked!r}): fusegrad downloads no pretrained "
            "weights; build it with weights=None and load a state dict (fg.load reads "
            "torch's files)"
        )
    return ResNet(block, layers, **kwargs)


def resnet18(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-18 (BasicBlocks 2, 2, 2, 2)."""
    return _resnet("resnet18", BasicBlock, [2, 2, 2, 2], weights, progress, kwargs)


def resnet34(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-34 (BasicBlocks 3, 4, 6, 3)."""
    return _resnet("resnet34", BasicBlock, [3, 4, 6, 3], weights, progress, kwargs)


def resnet50(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-50 (Bottlenecks 3, 4, 6, 3)."""
    return _resnet("resnet50", Bottleneck, [3, 4, 6, 3], weights, progress, kwargs)


def resnet101(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-101 (Bottlenecks 3, 4, 23, 3)."""
    return _resnet("resnet101", Bottleneck, [3, 4, 23, 3], weights, progress, kwargs)


def resnet152(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNet-152 (Bottlenecks 3, 8, 36, 3)."""
    return _resnet("resnet152", Bottleneck, [3, 8, 36, 3], weights, progress, kwargs)


def resnext50_32x4d(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """ResNeXt-50 32x4d (ResNet-50's blocks, 32 groups of width 4)."""
    kwargs.setdefault("groups", 32)
    kwargs.setdefault("width_per_group", 4)
    return _resnet("resnext50_32x4d", Bottleneck, [3, 4, 6, 3], weights, progress, kwargs)


def wide_resnet50_2(*, weights=None, progress: bool = True, **kwargs) -> ResNet:
    """Wide ResNet-50-2 (ResNet-50 with its blocks' inner width doubled)."""
    kwargs.setdefault("width_per_group", 64 * 2)
    return _resnet("wide_resnet50_2", Bottleneck, [3, 4, 6, 3], weights, progress, kwargs)


__all__ = [
    "ResNet",
    "BasicBlock",
    "Bottleneck",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "resnext50_32x4d",
    "wide_resnet50_2",
]
