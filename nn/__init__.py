"""`fusegrad.nn`: modules, layers, losses, initialisation, optimizers and data, as torch.nn.

Layers are graph builders: calling a model builds the forward graph, and
`loss.backward()` builds the backward graph symbolically; an optimizer step
realizes forward, backward and update together as one cached schedule.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> fg.manual_seed(0)
>>> model = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 1), nn.Sigmoid())
>>> opt = fg.optim.SGD(model.parameters(), lr=0.5)
>>> x, y = fg.rand(16, 2), fg.ones(16, 1)
>>> loss = nn.BCELoss()(model(x), y)
>>> loss.backward()
>>> opt.step()                 # forward + backward + update: one realize
>>> loss.item() > 0            # already computed by the step
True
"""

from . import clip_grad, data, functional, init, optim, parallel, utils
from .activations import (
    CELU,
    ELU,
    GELU,
    GLU,
    SELU,
    Hardshrink,
    Hardsigmoid,
    Hardswish,
    Hardtanh,
    LeakyReLU,
    LogSigmoid,
    Mish,
    PReLU,
    ReLU6,
    SiLU,
    Softmin,
    Softplus,
    Softshrink,
    Softsign,
    Tanhshrink,
    Threshold,
)
from .adaptive import (
    AdaptiveAvgPool1d,
    AdaptiveAvgPool2d,
    AdaptiveAvgPool3d,
    AdaptiveMaxPool1d,
    AdaptiveMaxPool2d,
    AdaptiveMaxPool3d,
)
from .attention import MultiheadAttention
from .containers import ModuleDict, ModuleList, ParameterList, Sequential
from .conv import AvgPool1d, AvgPool2d, Conv1d, Conv2d, MaxPool1d, MaxPool2d
from .conv3d import AvgPool3d, Conv3d, ConvTranspose3d, MaxPool3d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .fold import Fold, MaxUnpool1d, MaxUnpool2d, MaxUnpool3d, Unfold
from .layers import (
    CosineSimilarity,
    Dropout,
    Dropout2d,
    Embedding,
    Flatten,
    Identity,
    Linear,
    LogSoftmax,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from .losses import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    HuberLoss,
    KLDivLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .losses_more import (
    CosineEmbeddingLoss,
    MarginRankingLoss,
    PairwiseDistance,
    TripletMarginLoss,
)
from .module import Module, Parameter, load, save
from .normalization import BatchNorm1d, BatchNorm2d, GroupNorm, LayerNorm, RMSNorm
from .padding import (
    CircularPad1d,
    CircularPad2d,
    CircularPad3d,
    ConstantPad1d,
    ConstantPad2d,
    ConstantPad3d,
    ReflectionPad1d,
    ReflectionPad2d,
    ReflectionPad3d,
    ReplicationPad1d,
    ReplicationPad2d,
    ReplicationPad3d,
    ZeroPad1d,
    ZeroPad2d,
    ZeroPad3d,
)
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell
from .transformer import (
    Transformer,
    TransformerDecoder,
    TransformerDecoderLayer,
    TransformerEncoder,
    TransformerEncoderLayer,
)
from .upsample import PixelShuffle, PixelUnshuffle, Upsample

__all__ = [
    "AdaptiveAvgPool1d",
    "AdaptiveAvgPool2d",
    "AdaptiveMaxPool1d",
    "AdaptiveMaxPool2d",
    "AdaptiveAvgPool3d",
    "AdaptiveMaxPool3d",
    "AvgPool3d",
    "Conv3d",
    "ConvTranspose3d",
    "MaxPool3d",
    "Fold",
    "Unfold",
    "MaxUnpool1d",
    "MaxUnpool2d",
    "MaxUnpool3d",
    "CosineEmbeddingLoss",
    "MarginRankingLoss",
    "PairwiseDistance",
    "TripletMarginLoss",
    "ModuleDict",
    "ParameterList",
    "MultiheadAttention",
    "Transformer",
    "TransformerDecoder",
    "TransformerDecoderLayer",
    "TransformerEncoder",
    "TransformerEncoderLayer",
    "BatchNorm1d",
    "BatchNorm2d",
    "GroupNorm",
    "LayerNorm",
    "RMSNorm",
    "CELU",
    "ELU",
    "GELU",
    "GLU",
    "Hardsigmoid",
    "Hardswish",
    "Hardtanh",
    "Hardshrink",
    "Softshrink",
    "Tanhshrink",
    "Threshold",
    "LeakyReLU",
    "LogSigmoid",
    "Mish",
    "ReLU6",
    "SELU",
    "SiLU",
    "Softmin",
    "Softplus",
    "Softsign",
    "AvgPool1d",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "Conv1d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Dropout2d",
    "PReLU",
    "Embedding",
    "Flatten",
    "Identity",
    "Linear",
    "LogSoftmax",
    "MSELoss",
    "L1Loss",
    "SmoothL1Loss",
    "HuberLoss",
    "KLDivLoss",
    "CosineSimilarity",
    "MaxPool1d",
    "MaxPool2d",
    "Module",
    "ModuleList",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Softmax",
    "Tanh",
    "CircularPad1d",
    "CircularPad2d",
    "CircularPad3d",
    "ConstantPad3d",
    "ReflectionPad3d",
    "ReplicationPad3d",
    "ZeroPad3d",
    "ConstantPad1d",
    "ConstantPad2d",
    "ConvTranspose1d",
    "ConvTranspose2d",
    "ReflectionPad1d",
    "ReflectionPad2d",
    "ReplicationPad1d",
    "ReplicationPad2d",
    "Upsample",
    "PixelShuffle",
    "PixelUnshuffle",
    "RNN",
    "LSTM",
    "GRU",
    "RNNBase",
    "RNNCell",
    "LSTMCell",
    "GRUCell",
    "ZeroPad1d",
    "ZeroPad2d",
    "data",
    "functional",
    "init",
    "load",
    "optim",
    "parallel",
    "save",
    "clip_grad",
    "utils",
]
