"""The base of `fusegrad.distributions.transforms` (torch.distributions.transforms):
`Transform` (an invertible map between constraint regions with its log |det Jacobian|),
the inverse it hands out, `ComposeTransform` and `identity_transform`; the concrete
transforms build on it in `distribution_transforms.py` (elementwise ones),
`distribution_transforms_matrix.py` and `distribution_transforms_combined.py`.

>>> import fusegrad as fg
>>> from fusegrad.distribution_transforms import ExpTransform
>>> t = ComposeTransform([ExpTransform(), ExpTransform()])
>>> round(t(fg.tensor(0.0)).item(), 4), round(t.inv(t(fg.tensor(0.5))).item(), 4)
(2.7183, 0.5)

A transform made with `cache_size=1` keeps its last (x, y) pair: called again on the same
tensor object, or inverted on the `y` it returned, it answers the kept tensor without
computing (TanhTransform's inverse of a sampled action is then the pre-tanh draw itself, as
SAC's `log_prob(rsample())` relies on). Names, reprs, event dims and errors are torch's.
"""

from __future__ import annotations

import weakref

from . import distribution_constraints as constraints
from .distribution import _sum_rightmost, lazy_property
from .tensor import Tensor
from .tensor_base import broadcast_shapes as _broadcast_two
from .typeinfo import finfo

__all__ = ["ComposeTransform", "Transform", "identity_transform"]


class Transform:
    """A map x -> y between `domain` and `codomain` (constraints), with `inv` (its inverse,
    lazily made and weakly kept), `log_abs_det_jacobian(x, y)`, `bijective`, `sign` (of the
    derivative, for monotone maps) and `event_dim`; `cache_size` 0 or 1 (keep the last
    pair)."""

    bijective = False
    domain: constraints.Constraint
    codomain: constraints.Constraint

    def __init__(self, cache_size: int = 0):
        if cache_size == 0:
            pass
        elif cache_size == 1:
            self._cached_x_y = None, None
        else:
            raise ValueError("cache_size must be 0 or 1")
        self._cache_size = cache_size
        self._inv = None

    def __getstate__(self):
        state = self.__dict__.copy()
        state["_inv"] = None
        return state

    @property
    def event_dim(self) -> int:
        if self.domain.event_dim == self.codomain.event_dim:
            return self.domain.event_dim
        raise ValueError("Please use either .domain.event_dim or .codomain.event_dim")

    @property
    def inv(self) -> Transform:
        """The inverse transform, such that `t.inv(t(x))` is x."""
        inv = None
        if self._inv is not None:
            inv = self._inv()
        if inv is None:
            inv = _InverseTransform(self)
            self._inv = weakref.ref(inv)
        return inv

    @property
    def sign(self):
        """The sign of the derivative (bijective univariate transforms only)."""
        raise NotImplementedError

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        if type(self).__init__ is Transform.__init__:
            return type(self)(cache_size=cache_size)
        raise NotImplementedError(f"{type(self)}.with_cache is not implemented")

    def __eq__(self, other) -> bool:
        return self is other

    def __ne__(self, other) -> bool:
        return not self.__eq__(other)

    __hash__ = object.__hash__

    def __call__(self, x: Tensor) -> Tensor:
        if self._cache_size == 0:
            return self._call(x)
        x_old, y_old = self._cached_x_y
        if x is x_old:
            return y_old
        y = self._call(x)
        self._cached_x_y = x, y
        return y

    def _inv_call(self, y: Tensor) -> Tensor:
        if self._cache_size == 0:
            return self._inverse(y)
        x_old, y_old = self._cached_x_y
        if y is y_old:
            return x_old
        x = self._inverse(y)
        self._cached_x_y = x, y
        return x

    def _call(self, x):
        raise NotImplementedError

    def _inverse(self, y):
        raise NotImplementedError

    def log_abs_det_jacobian(self, x: Tensor, y: Tensor) -> Tensor:
        """log |dy/dx| at the pair (x, y), elementwise over the transform's batch."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return self.__class__.__name__ + "()"

    def forward_shape(self, shape):
        """The output shape for an input of `shape`."""
        return shape

    def inverse_shape(self, shape):
        """The input shape for an output of `shape`."""
        return shape


class _InverseTransform(Transform):
    """The inverse of `transform` (what `transform.inv` returns)."""

    def __init__(self, transform: Transform):
        super().__init__(cache_size=transform._cache_size)
        self._inv = transform  # a strong reference here (the forward's is weak)

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        return self._inv.codomain

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        return self._inv.domain

    @property
    def bijective(self) -> bool:  # type: ignore[override]
        return self._inv.bijective

    @property
    def sign(self):
        return self._inv.sign

    @property
    def inv(self) -> Transform:
        return self._inv

    def with_cache(self, cache_size: int = 1) -> Transform:
        return self.inv.with_cache(cache_size).inv

    def __eq__(self, other) -> bool:
        return isinstance(other, _InverseTransform) and self._inv == other._inv

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        return f"{self.__class__.__name__}({self._inv!r})"

    def __call__(self, x):
        return self._inv._inv_call(x)

    def log_abs_det_jacobian(self, x, y):
        return -self._inv.log_abs_det_jacobian(y, x)

    def forward_shape(self, shape):
        return self._inv.inverse_shape(shape)

    def inverse_shape(self, shape):
        return self._inv.forward_shape(shape)


class ComposeTransform(Transform):
    """`parts` applied in order; its log |det| sums each part's over the event dims the
    composition has beyond that part's."""

    def __init__(self, parts: list, cache_size: int = 0):
        if cache_size:
            parts = [part.with_cache(cache_size) for part in parts]
        super().__init__(cache_size=cache_size)
        self.parts = parts

    def __eq__(self, other) -> bool:
        return isinstance(other, ComposeTransform) and self.parts == other.parts

    __hash__ = object.__hash__

    @constraints.dependent_property(is_discrete=False)
    def domain(self):
        if not self.parts:
            return constraints.real
        domain = self.parts[0].domain
        event_dim = self.parts[-1].codomain.event_dim
        for part in reversed(self.parts):
            event_dim += part.domain.event_dim - part.codomain.event_dim
            event_dim = max(event_dim, part.domain.event_dim)
        if event_dim > domain.event_dim:
            domain = constraints.independent(domain, event_dim - domain.event_dim)
        return domain

    @constraints.dependent_property(is_discrete=False)
    def codomain(self):
        if not self.parts:
            return constraints.real
        codomain = self.parts[-1].codomain
        event_dim = self.parts[0].domain.event_dim
        for part in self.parts:
            event_dim += part.codomain.event_dim - part.domain.event_dim
            event_dim = max(event_dim, part.codomain.event_dim)
        if event_dim > codomain.event_dim:
            codomain = constraints.independent(codomain, event_dim - codomain.event_dim)
        return codomain

    @lazy_property
    def bijective(self) -> bool:  # type: ignore[override]
        return all(p.bijective for p in self.parts)

    @lazy_property
    def sign(self):
        sign = 1
        for p in self.parts:
            sign = sign * p.sign
        return sign

    @property
    def inv(self) -> Transform:
        inv = None
        if self._inv is not None:
            inv = self._inv()
        if inv is None:
            inv = ComposeTransform([p.inv for p in reversed(self.parts)])
            self._inv = weakref.ref(inv)
            inv._inv = weakref.ref(self)
        return inv

    def with_cache(self, cache_size: int = 1) -> Transform:
        if self._cache_size == cache_size:
            return self
        return ComposeTransform(self.parts, cache_size=cache_size)

    def __call__(self, x):
        for part in self.parts:
            x = part(x)
        return x

    def log_abs_det_jacobian(self, x, y):
        if not self.parts:
            return x.new_zeros(tuple(x.shape))
        xs = [x]
        for part in self.parts[:-1]:
            xs.append(part(xs[-1]))
        xs.append(y)
        total = None
        event_dim = self.domain.event_dim
        for part, x_, y_ in zip(self.parts, xs[:-1], xs[1:]):
            term = _sum_rightmost(
                part.log_abs_det_jacobian(x_, y_), event_dim - part.domain.event_dim
            )
            total = term if total is None else total + term
            event_dim += part.codomain.event_dim - part.domain.event_dim
        return total

    def forward_shape(self, shape):
        for part in self.parts:
            shape = part.forward_shape(shape)
        return shape

    def inverse_shape(self, shape):
        for part in reversed(self.parts):
            shape = part.inverse_shape(shape)
        return shape

    def __repr__(self) -> str:
        return (
            self.__class__.__name__
            + "(\n    "
            + ",\n    ".join(repr(p) for p in self.parts)
            + "\n)"
        )


identity_transform = ComposeTransform([])


class _Fixed(Transform):
    """A transform without parameters: every two of one class are equal (torch's `__eq__`
    of Exp, Sigmoid, Tanh, Abs and Softmax transforms)."""

    def __eq__(self, other) -> bool:
        return isinstance(other, type(self))

    __hash__ = object.__hash__


def _broadcast_shapes(*shapes) -> tuple[int, ...]:
    """The shape these shapes broadcast to."""
    out: tuple[int, ...] = ()
    for s in shapes:
        out = _broadcast_two(out, tuple(s), "broadcast_shapes")
    return out


def _clipped_sigmoid(x: Tensor) -> Tensor:
    """sigmoid(x) clamped to [tiny, 1 - eps] of x's dtype, as torch's."""
    fi = finfo(x.dtype)
    return x.sigmoid().clamp(min=fi.tiny, max=1.0 - fi.eps)
