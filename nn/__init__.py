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

from . import data, datasets, functional, init, optim, parallel
from .containers import ModuleList, Sequential
from .conv import AvgPool1d, AvgPool2d, Conv1d, Conv2d, MaxPool1d, MaxPool2d
from .layers import (
    Dropout,
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
from .losses import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from .module import Module, Parameter, load, save

__all__ = [
    "AvgPool1d",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "Conv1d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "Identity",
    "Linear",
    "LogSoftmax",
    "MSELoss",
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
    "data",
    "datasets",
    "functional",
    "init",
    "load",
    "optim",
    "parallel",
    "save",
]
