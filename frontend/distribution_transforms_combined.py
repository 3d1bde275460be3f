"""The transforms of `fusegrad.distributions.transforms` (torch's) built from others or
from a distribution: IndependentTransform (batch dims read as event dims),
ReshapeTransform, CatTransform and StackTransform (a transform per piece of a dim), and
CumulativeDistributionTransform (a distribution's cdf), with torch's shapes, event dims,
log |det Jacobian|s and errors.

>>> import fusegrad as fg
>>> from fusegrad.distribution_transforms import ExpTransform, StackTransform
>>> from fusegrad.distribution_transforms import AffineTransform
>>> t = StackTransform([ExpTransform(), AffineTransform(1.0, 2.0)], dim=0)
>>> t(fg.tensor([0.0, 3.0])).tolist(), t.log_abs_det_jacobian(fg.zeros(2), fg.zeros(2)).shape
([1.0, 7.0], (2,))
"""

from __future__ import annotations

from . import distribution_constraints as constraints
from .distribution import _sum_rightmost, lazy_property
from .distribution_transform import Transform
from .movement import cat, stack

__all__ = [
    "CatTransform",
    "CumulativeDistributionTransform",
    "IndependentTransform",
    "ReshapeTransform",
    "StackTransform",
]


class IndependentTransform(Transform):
    """`base_transform` with its `reinterpreted_batch_ndims` rightmost batch dims read as
    event dims: its log |det| summed over them.

    >>> import fusegrad as fg
    >>> from fusegrad.distribution_transforms import ExpTransform
    >>> t = IndependentTransform(ExpTransform(), 1)
    >>> t.event_dim, t.log_abs_det_jacobian(fg.ones(2, 3), fg.ones(2, 3)).tolist()
    (1, [3.0, 3.0])
    """

    def __init__(self, base_transform: Transform, reinterpreted_batch_ndims: int, cache_size=0):
        super().__init__(cache_size=cache_size)
        self.base_transform = base_transform.with_cache(cache_size)
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return IndependentTransform(
            self.base_transform, self.reinterpreted_batch_ndims, cache_size=cache_size
        )

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return constraints.independent(self.base_transform.domain, self.reinterpreted_batch_ndims)

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return constraints.independent(self.base_transform.codomain, self.reinterpreted_batch_ndims)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return self.base_transform.bijective

    @property
    def sign(self):
        return self.base_transform.sign

    def _call(self, x):
        if x.dim() < self.domain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform(x)

    def _inverse(self, y):
        if y.dim() < self.codomain.event_dim:
            raise ValueError("Too few dimensions on input")
        return self.base_transform.inv(y)

    def log_abs_det_jacobian(self, x, y):
        result = self.base_transform.log_abs_det_jacobian(x, y)
        return _sum_rightmost(result, self.reinterpreted_batch_ndims)

    def __repr__(self) -> str:
        return (
            f"{self.__class__.__name__}({self.base_transform!r}, {self.reinterpreted_batch_ndims})"
        )

    def forward_shape(self, shape):
        return self.base_transform.forward_shape(shape)

    def inverse_shape(self, shape):
        return self.base_transform.inverse_shape(shape)


class ReshapeTransform(Transform):
    """Events of `in_shape` reshaped to `out_shape` (the same number of elements); log |det|
    0.

    >>> import fusegrad as fg
    >>> ReshapeTransform((4,), (2, 2))(fg.arange(8.0).reshape(2, 4)).shape
    (2, 2, 2)
    """

    bijective = True

    def __init__(self, in_shape, out_shape, cache_size: int = 0):
        self.in_shape = tuple(in_shape)
        self.out_shape = tuple(out_shape)
        if _numel(self.in_shape) != _numel(self.out_shape):
            raise ValueError("in_shape, out_shape have different numbers of elements")
        super().__init__(cache_size=cache_size)

    @constraints.dependent_property
    def domain(self):
        return constraints.independent(constraints.real, len(self.in_shape))

    @constraints.dependent_property
    def codomain(self):
        return constraints.independent(constraints.real, len(self.out_shape))

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ReshapeTransform(self.in_shape, self.out_shape, cache_size=cache_size)

    def _call(self, x):
        batch_shape = tuple(x.shape[: x.dim() - len(self.in_shape)])
        return x.reshape(batch_shape + self.out_shape)

    def _inverse(self, y):
        batch_shape = tuple(y.shape[: y.dim() - len(self.out_shape)])
        return y.reshape(batch_shape + self.in_shape)

    def log_abs_det_jacobian(self, x, y):
        return x.new_zeros(tuple(x.shape[: x.dim() - len(self.in_shape)]))

    def forward_shape(self, shape):
        shape = tuple(shape)
        if len(shape) < len(self.in_shape):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(self.in_shape)
        if shape[cut:] != self.in_shape:
            raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {self.in_shape}")
        return shape[:cut] + self.out_shape

    def inverse_shape(self, shape):
        shape = tuple(shape)
        if len(shape) < len(self.out_shape):
            raise ValueError("Too few dimensions on input")
        cut = len(shape) - len(self.out_shape)
        if shape[cut:] != self.out_shape:
            raise ValueError(f"Shape mismatch: expected {shape[cut:]} but got {self.out_shape}")
        return shape[:cut] + self.in_shape


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _check_dim(dim: int, t, name: str, size: int, what: str) -> None:
    """torch's AssertionErrors of Cat/StackTransform: `dim` in range, its size `size`."""
    if not -t.dim() <= dim < t.dim():
        raise AssertionError(f"dim {dim} out of range for {name} with {t.dim()} dimensions")
    if t.shape[dim] != size:
        raise AssertionError(f"{name[0]}.size({dim}) = {t.shape[dim]} must equal {what} {size}")


class CatTransform(Transform):
    """The transforms `tseq` applied to consecutive pieces of `lengths` (1 each by default)
    of dim `dim`, the results joined (torch.cat).

    >>> import fusegrad as fg
    >>> from fusegrad.distribution_transforms import ExpTransform, identity_transform
    >>> t = CatTransform([ExpTransform(), identity_transform], dim=0, lengths=[1, 2])
    >>> t(fg.tensor([0.0, 2.0, 3.0])).tolist()
    [1.0, 2.0, 3.0]
    """

    def __init__(self, tseq, dim: int = 0, lengths=None, cache_size: int = 0):
        if not all(isinstance(t, Transform) for t in tseq):
            raise AssertionError("All elements of tseq must be Transform instances")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = list(tseq)
        self.lengths = [1] * len(self.transforms) if lengths is None else list(lengths)
        if len(self.lengths) != len(self.transforms):
            raise AssertionError(
                f"lengths ({len(self.lengths)}) must match transforms ({len(self.transforms)})"
            )
        self.dim = dim

    @lazy_property
    def event_dim(self) -> int:  # type: ignore[override]
        return max(t.event_dim for t in self.transforms)

    @lazy_property
    def length(self) -> int:
        return sum(self.lengths)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CatTransform(self.transforms, self.dim, self.lengths, cache_size)

    def _pieces(self, t):
        start = 0
        for transform, length in zip(self.transforms, self.lengths):
            yield transform, t.narrow(self.dim, start, length)
            start += length

    def _call(self, x):
        _check_dim(self.dim, x, "tensor", self.length, "length")
        return cat([transform(piece) for transform, piece in self._pieces(x)], self.dim)

    def _inverse(self, y):
        _check_dim(self.dim, y, "tensor", self.length, "length")
        return cat([transform.inv(piece) for transform, piece in self._pieces(y)], self.dim)

    def log_abs_det_jacobian(self, x, y):
        _check_dim(self.dim, x, "x", self.length, "length")
        _check_dim(self.dim, y, "y", self.length, "length")
        terms = []
        for (transform, xs), (_, ys) in zip(self._pieces(x), self._pieces(y)):
            term = transform.log_abs_det_jacobian(xs, ys)
            if transform.event_dim < self.event_dim:
                term = _sum_rightmost(term, self.event_dim - transform.event_dim)
            terms.append(term)
        dim = self.dim - x.dim() if self.dim >= 0 else self.dim
        dim = dim + self.event_dim
        if dim < 0:
            return cat(terms, dim)
        return sum(terms)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(t.bijective for t in self.transforms)

    @constraints.dependent_property
    def domain(self):
        return constraints.cat([t.domain for t in self.transforms], self.dim, self.lengths)

    @constraints.dependent_property
    def codomain(self):
        return constraints.cat([t.codomain for t in self.transforms], self.dim, self.lengths)


class StackTransform(Transform):
    """The transforms `tseq` applied to the slices of dim `dim`, one each, the results
    stacked (torch.stack) along it."""

    def __init__(self, tseq, dim: int = 0, cache_size: int = 0):
        if not all(isinstance(t, Transform) for t in tseq):
            raise AssertionError("All elements of tseq must be Transform instances")
        if cache_size:
            tseq = [t.with_cache(cache_size) for t in tseq]
        super().__init__(cache_size=cache_size)
        self.transforms = list(tseq)
        self.dim = dim

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return StackTransform(self.transforms, self.dim, cache_size)

    def _slice(self, z):
        return [z.select(self.dim, i) for i in range(z.shape[self.dim])]

    def _call(self, x):
        _check_dim(self.dim, x, "tensor", len(self.transforms), "len(transforms)")
        parts = zip(self._slice(x), self.transforms)
        return stack([transform(piece) for piece, transform in parts], self.dim)

    def _inverse(self, y):
        _check_dim(self.dim, y, "tensor", len(self.transforms), "len(transforms)")
        parts = zip(self._slice(y), self.transforms)
        return stack([transform.inv(piece) for piece, transform in parts], self.dim)

    def log_abs_det_jacobian(self, x, y):
        _check_dim(self.dim, x, "x", len(self.transforms), "len(transforms)")
        _check_dim(self.dim, y, "y", len(self.transforms), "len(transforms)")
        parts = zip(self._slice(x), self._slice(y), self.transforms)
        return stack([t.log_abs_det_jacobian(xs, ys) for xs, ys, t in parts], self.dim)

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(t.bijective for t in self.transforms)

    @constraints.dependent_property
    def domain(self):
        return constraints.stack([t.domain for t in self.transforms], self.dim)

    @constraints.dependent_property
    def codomain(self):
        return constraints.stack([t.codomain for t in self.transforms], self.dim)


class CumulativeDistributionTransform(Transform):
    """x -> `distribution`.cdf(x), from its support to [0, 1]; the inverse its icdf, the
    log |det| its log_prob (a copula's marginals).

    >>> import fusegrad as fg
    >>> from fusegrad.distributions import Normal
    >>> CumulativeDistributionTransform(Normal(0.0, 1.0))(fg.tensor(0.0)).item()
    0.5
    """

    bijective = True
    codomain = constraints.unit_interval
    sign = +1

    def __init__(self, distribution, cache_size: int = 0):
        super().__init__(cache_size=cache_size)
        self.distribution = distribution

    @property
    def domain(self):  # type: ignore[override]
        return self.distribution.support

    def _call(self, x):
        return self.distribution.cdf(x)

    def _inverse(self, y):
        return self.distribution.icdf(y)

    def log_abs_det_jacobian(self, x, y):
        return self.distribution.log_prob(x)

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return CumulativeDistributionTransform(self.distribution, cache_size=cache_size)
