"""Layers: modules whose `forward` builds graph from their parameters and input.

Each initialises itself as torch does (`reset_parameters`), from the
`fg.manual_seed` stream, and prints as torch prints it.

>>> import fusegrad as fg
>>> from fusegrad import nn
>>> fg.manual_seed(0)
>>> layer = nn.Linear(3, 2)
>>> layer
Linear(in_features=3, out_features=2, bias=True)
>>> layer(fg.ones(5, 3)).shape
(5, 2)
"""

from __future__ import annotations

from ..nnapi import (
    from_numpy,
    guard,
)
from . import activations, dense, init, loss_functions
from .module import Module, Parameter, place, placeholder_parameter


class Identity(Module):
    """Returns its input; takes (and ignores) any arguments, as torch's does."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    """y = x @ W.T + b, W of shape (out_features, in_features).

    Initialised as torch.nn.Linear: W by kaiming_uniform(a=sqrt(5)), i.e.
    U(-1/sqrt(in), 1/sqrt(in)), and b by U(-1/sqrt(in), 1/sqrt(in)).
    """

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None
    ):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = placeholder_parameter(out_features, in_features, dtype=dtype)
        if bias:
            self.bias = placeholder_parameter(out_features, dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()
        place(self, device)

    def reset_parameters(self) -> None:
        init.torch_default_(self.weight, self.bias, self.in_features)

    def forward(self, input):
        return dense.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"bias={self.bias is not None}"
        )


class NonDynamicallyQuantizableLinear(Linear):
    """`MultiheadAttention.out_proj`'s class, as torch's (`torch.nn.modules.linear`): a
    Linear that torch's quantization leaves alone; here a Linear and nothing more."""


class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace  # as torch's: the input itself is overwritten with the result

    def forward(self, input):
        return input.relu_() if self.inplace else input.relu()

    def extra_repr(self) -> str:
        return "inplace=True" if self.inplace else ""


class Sigmoid(Module):
    def forward(self, input):
        return activations.sigmoid(input)


class Tanh(Module):
    def forward(self, input):
        return activations.tanh(input)


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return activations.softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, input):
        return activations.log_softmax(input, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Dropout(Module):
    """Inverted dropout in train(); the identity in eval(). See `functional.dropout`."""

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        mode = (self.training, self.p)
        guard(lambda: (self.training, self.p) == mode)  # a jitted step records this mode
        return dense.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zero whole channels in train() (`functional.dropout1d`); the identity in eval()."""

    _fn = staticmethod(dense.dropout1d)

    def forward(self, input):
        mode = (self.training, self.p)
        guard(lambda: (self.training, self.p) == mode)
        return self._fn(input, self.p, self.training, self.inplace)


class Dropout2d(Dropout1d):
    """Zero whole channels in train() (`functional.dropout2d`); the identity in eval()."""

    _fn = staticmethod(dense.dropout2d)


class Dropout3d(Dropout1d):
    """Zero whole channels in train() (`functional.dropout3d`); the identity in eval()."""

    _fn = staticmethod(dense.dropout3d)


class AlphaDropout(Dropout1d):
    """Alpha dropout in train() (`functional.alpha_dropout`, for SELU networks); the
    identity in eval()."""

    _fn = staticmethod(dense.alpha_dropout)


class FeatureAlphaDropout(Dropout1d):
    """Alpha dropout of whole channels in train() (`functional.feature_alpha_dropout`);
    the identity in eval()."""

    _fn = staticmethod(dense.feature_alpha_dropout)


class CosineSimilarity(Module):
    """Cosine similarity along `dim` (F.cosine_similarity)."""

    def __init__(self, dim: int = 1, eps: float = 1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return loss_functions.cosine_similarity(x1, x2, self.dim, self.eps)


class Flatten(Module):
    """Flatten dims start_dim..end_dim into one (by default all but the batch dim)."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    """Split axis `dim` into `unflattened_size` (a tuple or list of ints; one may be -1),
    as torch.nn.Unflatten: Flatten's inverse in a Sequential.

    >>> import fusegrad as fg
    >>> Unflatten(1, (2, 5))(fg.zeros(3, 10)).shape
    (3, 2, 5)

    torch's named-tensor form (a str `dim`, sizes as `(name, size)` pairs) is not
    supported: fusegrad has no named tensors, so its sizes are refused as torch refuses
    sizes that are not ints.
    """

    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        _require_tuple_of_ints(unflattened_size)
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, unflattened_size={self.unflattened_size}"


def _require_tuple_of_ints(sizes) -> None:
    """torch's check of Unflatten's sizes, with its TypeError messages."""
    if not isinstance(sizes, (tuple, list)):
        raise TypeError(
            f"unflattened_size must be a tuple of ints, but found type {type(sizes).__name__}"
        )
    for i, size in enumerate(sizes):
        if not isinstance(size, int):
            raise TypeError(
                "unflattened_size must be tuple of ints, but found element of type "
                f"{type(size).__name__} at pos {i}"
            )


class Embedding(Module):
    """A lookup table of `num_embeddings` vectors of size `embedding_dim`, indexed by integers.

    Initialised from N(0, 1), with the `padding_idx` row zero, as torch.nn.Embedding.

    >>> import fusegrad as fg
    >>> emb = Embedding.from_pretrained(fg.tensor([[0.0, 1.0], [2.0, 3.0]]))
    >>> emb(fg.tensor([1, 0, 1])).tolist()
    [[2.0, 3.0], [0.0, 1.0], [2.0, 3.0]]
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        _weight=None,
        _freeze: bool = False,
        device=None,
        dtype=None,
    ):
        super().__init__()
        dense.refuse_embedding_options("Embedding", False, sparse)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is None:
            self.weight = placeholder_parameter(num_embeddings, embedding_dim, dtype=dtype)
            self.weight.requires_grad = not _freeze
            self.reset_parameters()
            place(self, device)
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("Shape of weight does not match num_embeddings and embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)  # as it is, as torch

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            w = self.weight.numpy().copy()
            w[self.padding_idx] = 0
            self.weight.assign_(from_numpy(w))

    def forward(self, input):
        return dense.embedding(
            input,
            self.weight,
            self.padding_idx,
            self.max_norm,
            self.norm_type,
            self.scale_grad_by_freq,
        )

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ):
        """An Embedding holding `embeddings` (a 2-D tensor); frozen (no grad) by default."""
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(
            rows,
            cols,
            padding_idx,
            max_norm,
            norm_type,
            scale_grad_by_freq,
            sparse,
            _weight=embeddings,
            _freeze=freeze,
        )

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            s += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            s += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            s += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            s += f", scale_grad_by_freq={self.scale_grad_by_freq}"
        return s
