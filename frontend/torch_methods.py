"""torch's smaller Tensor methods: queries of a tensor's type and storage, the identities
torch keeps for real tensors, and method forms of fusegrad's functions.

>>> import fusegrad as fg
>>> x = fg.arange(6.0).reshape(2, 3)
>>> x.ndimension(), x.nbytes, x.itemsize, x.get_device(), x.is_signed()
(2, 24, 4, -1, True)
>>> x.select(1, -1).tolist(), x[1].storage_offset()
([2.0, 5.0], 3)
>>> x.conj() is x, x.real is x, x.positive() is x
(True, True, True)

fusegrad has no complex dtypes, so `conj`, `resolve_conj`, `resolve_neg`, `real` and
`positive` return the tensor itself, as torch does for a real tensor (a write through
them reaches it), and `is_conj`/`is_neg` are False.
"""

from __future__ import annotations

import math

import numpy as np

from . import mathops, shapeops, shared_memory, torch_functions
from .creation_nodes import _shape, data_node, finish, full_node, host_rng, index_arange
from .errors import (
    ArgumentError,
    DeviceError,
    DTypeError,
    DTypeNotImplementedError,
    ShapeError,
    fail,
    warn_user,
)
from .runtime.backend import get_backend
from .runtime.engine import engine
from .tensor_base import TensorBase, where
from .torch_settings import strided


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _storage(x: TensorBase):
    """The tensor whose storage `x` views (x itself where it is no view)."""
    link = getattr(x, "_base", None)
    while link is not None:
        base, redo = link
        if redo is None:  # a detached tensor: its owner's storage
            base = base()
            if base is None:
                return x
        x = base
        link = getattr(x, "_base", None)
    return x


def _same_dims(x: TensorBase, n: int, op: str) -> None:
    if x.ndim < n:
        fail(
            ShapeError,
            op,
            f"requires a tensor with at least {n} dimension, but got a tensor with "
            f"{x.ndim} dimensions!",
        )


class TorchMethodsMixin:
    """Tensor's methods of this module."""

    __slots__ = ()

    # ---------------------------------------------------------------- about the tensor
    def ndimension(self) -> int:
        """The number of axes (torch's older name of `dim()`)."""
        return self.ndim

    @property
    def nbytes(self) -> int:
        """Bytes the elements take: numel * itemsize (a view counts its own elements)."""
        return self.numel() * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        """Bytes per element (`element_size()`)."""
        return self.dtype.itemsize

    @property
    def layout(self):
        """`fg.strided`, the one layout fusegrad has."""
        return strided

    # torch's flags of layouts and kinds of tensor fusegrad does not have: each is False
    @property
    def is_sparse(self) -> bool:
        """False: fusegrad's tensors are dense (strided), as `layout` says."""
        return False

    @property
    def is_sparse_csr(self) -> bool:
        """False: no tensor here is a compressed sparse one."""
        return False

    @property
    def is_quantized(self) -> bool:
        """False: fusegrad has no quantized dtypes."""
        return False

    @property
    def is_meta(self) -> bool:
        """False: every tensor here has values (no "meta" device of shapes alone)."""
        return False

    @property
    def is_nested(self) -> bool:
        """False: fusegrad has no nested (ragged) tensors."""
        return False

    @property
    def is_mkldnn(self) -> bool:
        """False: no tensor here is in oneDNN's blocked layout."""
        return False

    @property
    def name(self) -> None:
        """None: fusegrad has no named tensors (torch's `name` of an unnamed tensor)."""
        return None

    @property
    def output_nr(self) -> int:
        """0: which output of the op that made it this tensor is. fusegrad's graph nodes
        have one output each, so every tensor is output 0 of its node; torch counts the
        outputs of its multi-output ops (`x.split(2)[1].output_nr` is 1 there when x
        requires grad)."""
        return 0

    def to_dense(self, dtype=None, *, masked_grad=None):
        """This tensor itself, as torch's `to_dense()` of a dense tensor (a conversion when
        `dtype` differs, as `to(dtype)`); `masked_grad` is accepted and changes nothing."""
        return self if dtype is None else self.to(dtype)

    def data_ptr(self) -> int:
        """The address of this tensor's realized buffer, as an int (0 for a tensor of no
        elements, as torch's): the tensor is computed first. A view is computed into a
        buffer of its own, so its address is not its base's plus an offset as in torch; and
        the address changes whenever fusegrad gives the tensor a new buffer (an in-place
        update, an optimizer step): read it again rather than keep it."""
        if self.numel() == 0:
            return 0
        self.realize()
        return int(engine.value(self.node).ptr)

    def is_set_to(self, tensor) -> bool:
        """Whether `tensor` is this tensor or a view of the same storage with this one's
        shape, strides and offset (torch.Tensor.is_set_to)."""
        if not isinstance(tensor, TensorBase):
            raise TypeError(
                f"is_set_to(): argument 'tensor' (position 1) must be Tensor, "
                f"not {type(tensor).__name__}"
            )
        if tensor is self:
            return True
        if _storage(self) is not _storage(tensor):
            return False
        return (tuple(self.shape), self.stride(), self.storage_offset()) == (
            tuple(tensor.shape),
            tensor.stride(),
            tensor.storage_offset(),
        )

    # ---------------------------------------------------------------- adjoints
    @property
    def H(self):
        """The conjugate transpose of a matrix: `T` for fusegrad's real tensors (a 0-d
        tensor itself, with torch's deprecation warning; other sizes raise as torch's)."""
        if self.ndim == 0:
            warn_user("Tensor.H is deprecated on 0-D tensors. Consider using x.conj().")
            return self
        if self.ndim != 2:
            hint = " For batches of matrices, consider using tensor.mH" if self.ndim > 2 else ""
            fail(
                ShapeError,
                "H",
                f"tensor.H is only supported on matrices (2-D tensors). Got {self.ndim}-D "
                f"tensor.{hint}",
            )
        return self.transpose(0, 1)

    @property
    def mH(self):
        """The conjugate transpose of the last two dims: `mT` for real tensors (a 0-d tensor
        itself, with torch's deprecation warning; a 1-d one raises as torch's)."""
        if self.ndim == 0:
            warn_user("Tensor.mH is deprecated on 0-D tensors. Consider using x.conj().")
            return self
        if self.ndim == 1:
            fail(
                ShapeError,
                "mH",
                "tensor.mH is only supported on matrices or batches of matrices. Got 1-D tensor.",
            )
        return self.transpose(-2, -1)

    def adjoint(self):
        """The conjugate transpose of the last two dims (a view): `mT` for real tensors, as
        torch.adjoint; fewer than two dims raise."""
        if self.ndim < 2:
            fail(
                ShapeError,
                "adjoint",
                "tensor.adjoint() is only supported on matrices or batches of matrices. "
                f"Got {self.ndim}-D tensor.",
            )
        return self.transpose(-2, -1)

    def get_device(self) -> int:
        """The cuda device's index (0) for a cuda tensor, -1 on the CPU, as torch's."""
        return -1 if self.is_cpu else (self.device.index or 0)

    # ---------------------------------------------------------------- linear algebra
    # (fusegrad.linalg's functions: LAPACK on the host, with torch's gradients)
    def det(self):
        """torch.det: the determinants of the square matrices in the last two dims."""
        return self._linalg.det(self)

    def logdet(self):
        """torch.logdet: log det (NaN for a negative determinant, -inf for 0)."""
        return self._linalg.logdet(self)

    def slogdet(self):
        """torch.slogdet: (sign, log |det|)."""
        return self._linalg.slogdet(self)

    def inverse(self):
        """torch.inverse: `fg.linalg.inv` (a singular matrix raises)."""
        return self._linalg.inv(self)

    def matrix_power(self, n: int):
        """torch.matrix_power: `fg.linalg.matrix_power`."""
        return self._linalg.matrix_power(self, n)

    def matrix_exp(self):
        """torch.matrix_exp: `fg.linalg.matrix_exp`."""
        return self._linalg.matrix_exp(self)

    def pinverse(self, rcond: float = 1e-15):
        """torch.pinverse: `fg.linalg.pinv` with rtol=rcond."""
        return self._linalg.pinv(self, rtol=rcond)

    def cholesky(self, upper: bool = False):
        """torch.cholesky (older torch's API; torch 2.14 removed it and raises): the
        Cholesky factor, lower (or `upper`), as `fg.linalg.cholesky`."""
        return self._linalg.cholesky(self, upper=upper)

    def qr(self, some: bool = True):
        """torch.qr (older torch's API; torch 2.14 removed it and raises): (Q, R) as
        `fg.linalg.qr` in mode 'reduced' (`some=True`) or 'complete'."""
        return self._linalg.qr(self, "reduced" if some else "complete")

    def svd(self, some: bool = True, compute_uv: bool = True):
        """torch.svd: (U, S, V) with self = U diag(S) V^T (V, not torch.linalg.svd's Vh),
        reduced when `some`; compute_uv=False gives zero U (m x m) and V (n x n), as torch's.
        Gradients as `fg.linalg.svd`'s."""
        linalg = self._linalg
        if not compute_uv:
            m, n = self.shape[-2:]
            zeros = self.new_zeros
            return linalg.SVDVResult(
                zeros(self.shape[:-2] + (m, m)),
                linalg.svdvals(self),
                zeros(self.shape[:-2] + (n, n)),
            )
        u, s, vh = linalg.svd(self, full_matrices=not some)
        return linalg.SVDVResult(u, s, vh.mT)

    def is_signed(self) -> bool:
        """Whether the dtype has negative values: floats and signed integers (not uint8,
        not bool)."""
        return self.dtype.is_signed

    def is_complex(self) -> bool:
        """False: fusegrad has no complex dtypes."""
        return self.dtype.is_complex

    def is_nonzero(self) -> bool:
        """The truth of the one element (NaN is true), as torch.is_nonzero; a tensor of
        none or several elements raises."""
        n = self.numel()
        if n != 1:
            fail(
                ArgumentError,
                "is_nonzero",
                "Boolean value of Tensor with "
                + ("no values" if n == 0 else "more than one value")
                + " is ambiguous",
            )
        return bool(self.item())

    def is_same_size(self, other) -> bool:
        """Whether `other` has this tensor's shape."""
        if not isinstance(other, TensorBase):
            raise TypeError(
                f"is_same_size(): argument 'other' (position 2) must be Tensor, "
                f"not {type(other).__name__}"
            )
        return tuple(self.shape) == tuple(other.shape)

    def is_inference(self) -> bool:
        """False: fusegrad's `inference_mode` makes ordinary tensors (as `no_grad` does)."""
        return False

    def is_conj(self) -> bool:
        """False: no tensor here is a lazily conjugated complex view."""
        return False

    def is_neg(self) -> bool:
        """False: no tensor here is a lazily negated view."""
        return False

    def is_pinned(self) -> bool:
        """False: fusegrad keeps no page-locked host copies (it copies to the cuda device
        itself)."""
        return False

    def storage_offset(self) -> int:
        """Where this view's first element sits in its base's storage, in elements, as
        torch counts it (0 for a tensor that is no view: results of ops, `contiguous()`
        copies). Computed from the view's index into its base (a small kernel, once)."""
        link = getattr(self, "_base", None)
        if link is None:
            return 0
        base, redo = link
        if redo is None:  # a detached tensor: its owner's storage
            owner = base()
            return 0 if owner is None else owner.storage_offset()
        start = base.storage_offset()
        if self.numel() == 0 or base.numel() == 0:
            return start
        positions = index_arange(base, base.numel()).reshape(base.shape)
        first = int(redo(positions).reshape(-1)[0].item())
        coords = np.unravel_index(first, base.shape)
        return start + sum(int(c) * s for c, s in zip(coords, base.stride()))

    # ---------------------------------------------------------------- real tensors' identities
    def conj(self):
        """This tensor itself: a real tensor is its own conjugate (torch returns it too)."""
        return self

    def resolve_conj(self):
        """This tensor itself (nothing is conjugated lazily here)."""
        return self

    def resolve_neg(self):
        """This tensor itself (nothing is negated lazily here)."""
        return self

    @property
    def real(self):
        """This tensor itself, as torch's `real` of a real tensor (writes reach it)."""
        return self

    @property
    def imag(self):
        """Refused, as torch refuses it for real dtypes."""
        fail(
            ArgumentError,
            "imag",
            "imag is not implemented for tensors with non-complex dtypes.",
        )

    def positive(self):
        """This tensor itself (`+t`); bool refused, as torch's."""
        if self.dtype.is_bool:
            fail(
                DTypeNotImplementedError,
                "positive",
                "The `+` operator, on a bool tensor is not supported.",
            )
        return self

    # ---------------------------------------------------------------- memory, as torch's CPU
    def pin_memory(self, device=None):
        """A copy for fast transfers to the cuda device, as torch's: where the cuda device
        is not available torch raises, and so does this; where it is, a copy (fusegrad
        copies to the device itself, so the copy is an ordinary tensor: `is_pinned()` stays
        False)."""
        if not self.is_cpu:
            fail(
                DeviceError,
                "pin_memory",
                f"cannot pin a {self.device.type} tensor: only CPU tensors can be pinned",
            )
        why = get_backend("cuda").why_unavailable()
        if why is not None:
            fail(
                DeviceError,
                "pin_memory",
                f"pinned memory needs the cuda device, which is not available here ({why}); "
                "torch raises too on a machine without a GPU",
            )
        return self.clone()

    def share_memory_(self):
        """This tensor, its values moved into memory shared with the processes it forks
        (`fusegrad.multiprocessing`), as torch's: their optimizer steps and writes land
        in the one copy (frontend/shared_memory.py). A device tensor stays as it is."""
        return shared_memory.share(self)

    def is_shared(self) -> bool:
        """Whether `share_memory_()` moved this tensor into shared memory."""
        return shared_memory.is_shared(self)

    # ---------------------------------------------------------------- pieces
    def select(self, dim: int, index: int):
        """The slice at `index` along `dim`, that axis gone: a view (writes reach this
        tensor), as torch's."""
        return shapeops.select(self, dim, index)

    def narrow_copy(self, dim: int, start: int, length: int):
        """`narrow`, copied: a new tensor, not a view."""
        return shapeops.narrow(self, dim, start, length).clone()

    def split_with_sizes(self, split_sizes, dim: int = 0):
        """Pieces of the given sizes along `dim` (views), which must sum to its size."""
        d = self._dim(dim, "split_with_sizes")
        sizes = [int(s) for s in split_sizes]
        if sum(sizes) != self.shape[d] or any(s < 0 for s in sizes):
            fail(
                ShapeError,
                "split_with_sizes",
                f"split_with_sizes expects split_sizes to sum exactly to {self.shape[d]} "
                f"(input tensor's size at dimension {d}), but got split_sizes={sizes}",
            )
        return shapeops.split(self, sizes, d)

    def hsplit(self, sections):
        """Split along the second axis (the first of a 1-d tensor), as torch.hsplit."""
        return shapeops.hsplit(self, sections)

    def vsplit(self, sections):
        """Split along the first axis of a tensor of at least two, as torch.vsplit."""
        return shapeops.vsplit(self, sections)

    def dsplit(self, sections):
        """Split along the third axis of a tensor of at least three, as torch.dsplit."""
        _same_dims(self, 3, "dsplit")
        return shapeops._split_even(self, sections, 2, "dsplit")

    # ---------------------------------------------------------------- math
    def inner(self, other):
        """Sums of products over the last axes of both, as torch.inner."""
        return shapeops.inner(self, other)

    def mv(self, vec):
        """This matrix times the vector `vec`, as torch.mv."""
        return shapeops.mv(self, vec)

    def deg2rad(self):
        """Degrees to radians, x * pi / 180 (an integer tensor becomes the default float)."""
        return self._float() * (math.pi / 180)

    def rad2deg(self):
        """Radians to degrees, x * 180 / pi (an integer tensor becomes the default float)."""
        return self._float() * (180 / math.pi)

    def put_(self, index, source, accumulate: bool = False):
        """Write `source`'s values at the flat positions `index` (negative ones count from
        the end), in place; with `accumulate`, add them (repeated positions add up), as
        torch's put_."""
        if index.dtype.name != "int64":
            fail(DTypeError, "put_", f"index must be an int64 tensor, got {index.dtype.name}")
        if index.numel() != source.numel():
            fail(
                ShapeError,
                "put_",
                f"source and index should have the same number of elements, got "
                f"{source.numel()} and {index.numel()}",
            )
        flat = self.view(-1) if self.is_contiguous() else None
        if flat is None:
            fail(ShapeError, "put_", "needs a contiguous tensor here (call .contiguous() first)")
        flat.index_put_((index.reshape(-1),), source.reshape(-1).to(self.dtype), accumulate)
        return self

    def put(self, index, source, accumulate: bool = False):
        """`put_` on a copy, as torch.Tensor.put."""
        return self.clone().put_(index, source, accumulate)

    def angle(self):
        """The argument of each element as a complex number, as torch's for a real tensor:
        pi where it is negative (-inf too), 0 at 0 and -0.0, NaN at NaN; a float result
        (an integer tensor becomes the default float) with a zero gradient everywhere."""
        x = self if self.dtype.is_float else self._float()
        pi = x._make(full_node(x.shape, math.pi, x.dtype))
        zero_or_nan = where(x != x, x, 0.0)  # (NaN where x is; the gradient is _flat's 0)
        return mathops._flat(mathops._where(x < 0, pi, zero_or_nan), x)

    def hardshrink(self, lambd: float = 0.5):
        """x outside [-lambd, lambd], else 0 (NaN passes), as torch's; the gradient is 0 at
        and inside the limits (F.hardshrink)."""
        inside = (self >= -lambd) & (self <= lambd)
        return where(inside, 0.0, self)

    def multinomial(self, num_samples: int, replacement: bool = False, *, generator=None):
        """Indices drawn with the probabilities in each row (weights, need not sum to 1),
        with or without replacement (int64; drawn on the host from the manual_seed
        stream), as torch.multinomial."""
        w = np.asarray(self.detach().numpy(), dtype=np.float64)
        rows = w.reshape(1, -1) if w.ndim == 1 else w
        if w.ndim not in (1, 2) or (rows < 0).any() or not np.isfinite(rows).all():
            fail(ArgumentError, "multinomial", "expects 1-d or 2-d finite non-negative weights")
        if not replacement and num_samples > rows.shape[1]:
            fail(
                ArgumentError,
                "multinomial",
                "cannot sample n_sample > prob_dist.size(-1) samples without replacement",
            )
        rng = host_rng(generator)
        out = []
        for r in rows:
            if r.sum() <= 0:
                fail(
                    ArgumentError,
                    "multinomial",
                    "invalid multinomial distribution (sum of probabilities <= 0)",
                )
            if not replacement and np.count_nonzero(r) < num_samples:
                fail(
                    ArgumentError,
                    "multinomial",
                    "invalid multinomial distribution (with replacement=False, not enough "
                    "non-negative category to sample)",
                )
            out.append(rng.choice(r.size, num_samples, replace=replacement, p=r / r.sum()))
        out = np.asarray(out, dtype=np.int64)
        node = data_node(out[0] if w.ndim == 1 else out, None, self.device)
        return finish(self._plain, node, False)

    def fill_diagonal_(self, fill_value, wrap: bool = False):
        """Write `fill_value` on the main diagonal, in place, as torch's: a matrix's (i, i),
        or (i, i, ..., i) of a tensor whose axes are all one size; `wrap=True` starts the
        diagonal again below a tall matrix's square, every columns + 1 rows."""
        if self.ndim < 2:
            fail(ShapeError, "fill_diagonal_", "dimensions must larger than 1")
        if self.ndim > 2 and len(set(self.shape)) != 1:
            fail(ShapeError, "fill_diagonal_", "all dimensions of input must be of equal length")
        cols = self.shape[-1]
        # steps between diagonal places in row-major order: cols + 1 for a matrix
        step = sum(cols**k for k in range(self.ndim))
        k = index_arange(self, self.numel()).reshape(self.shape)
        on = (k % step) == 0
        if not (wrap and self.ndim == 2):
            on = on & (k < min(self.shape) * step)
        return self.masked_fill_(on, fill_value)

    # ---------------------------------------------------------------- torch_functions.py's
    def unique_consecutive(self, return_inverse=False, return_counts=False, dim=None):
        """The first element of each run of equal consecutive elements, with the optional
        inverse and counts: `fg.unique_consecutive`."""
        return torch_functions.unique_consecutive(self, return_inverse, return_counts, dim)

    def diagflat(self, offset: int = 0):
        """The flattened tensor on a diagonal of a square matrix: `fg.diagflat`."""
        return torch_functions.diagflat(self, offset)

    def vdot(self, other):
        """The dot product of two 1-d tensors of one dtype: `fg.vdot`."""
        return torch_functions.vdot(self, other)

    def renorm(self, p, dim: int, maxnorm):
        """Slices along `dim` whose p-norm passes `maxnorm` scaled down to it: `fg.renorm`."""
        return torch_functions.renorm(self, p, dim, maxnorm)

    def ger(self, vec2):
        """torch.ger, the older name of `outer`."""
        return shapeops.outer(self, vec2)

    def addr(self, vec1, vec2, *, beta=1, alpha=1):
        """beta * self + alpha * outer(vec1, vec2): `fg.addr`."""
        return torch_functions.addr(self, vec1, vec2, beta=beta, alpha=alpha)

    def addr_(self, vec1, vec2, *, beta=1, alpha=1):
        """`addr`, in place (self must have the product's shape, as torch's)."""
        out = torch_functions.addr(self, vec1, vec2, beta=beta, alpha=alpha)
        if tuple(out.shape) != tuple(self.shape):
            fail(
                ShapeError,
                "addr_",
                f"size mismatch, input: {list(self.shape)}, v1: {list(vec1.shape)}, "
                f"v2: {list(vec2.shape)}",
            )
        return self._inplace(out, "addr_")

    def frexp(self):
        """(mantissa, exponent): `fg.frexp`."""
        return torch_functions.frexp(self)

    def gcd(self, other):
        """The greatest common divisors of integer tensors: `fg.gcd`."""
        return torch_functions.gcd(self, other)

    def gcd_(self, other):
        """`gcd`, in place."""
        return self._inplace(torch_functions.gcd(self, other), "gcd_")

    def lcm(self, other):
        """The least common multiples of integer tensors: `fg.lcm`."""
        return torch_functions.lcm(self, other)

    def lcm_(self, other):
        """`lcm`, in place."""
        return self._inplace(torch_functions.lcm(self, other), "lcm_")

    def nextafter(self, other):
        """The next float toward `other`: `fg.nextafter`."""
        return torch_functions.nextafter(self, other)

    def nextafter_(self, other):
        """`nextafter`, in place."""
        return self._inplace(torch_functions.nextafter(self, other), "nextafter_")

    def histogram(self, bins=100, *, range=None, weight=None, density=False):  # noqa: A002
        """(hist, bin_edges): `fg.histogram`."""
        return torch_functions.histogram(self, bins, range=range, weight=weight, density=density)

    def index_reduce(self, dim, index, source, reduce, *, include_self=True):
        """source's slices reduced into the slices `index` names: `fg.index_reduce`."""
        return torch_functions.index_reduce(
            self, dim, index, source, reduce, include_self=include_self
        )

    def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
        """`index_reduce`, in place."""
        out = torch_functions.index_reduce(
            self, dim, index, source, reduce, include_self=include_self
        )
        return self._inplace(out, "index_reduce_")

    # ---------------------------------------------------------------- torch's legacy constructor
    def new(self, *args, device=None):
        """torch's legacy `t.new(...)`, in this tensor's dtype and device: `t.new(2, 3)` (zeros
        here; torch's are uninitialized), `t.new(data)`, `t.new()` (empty), `t.new(size)` of
        an `fg.Size`, `t.new(other)` (a tensor of this dtype: `other`, detached). A plain
        tuple of ints is refused: torch reads it as data, and a `torch.Size` as sizes, but
        fusegrad's shapes are plain tuples; write `t.new(*sizes)` or `t.new_zeros(sizes)`."""
        place = device if device is not None else self.device
        if not args:
            return finish(self._plain, full_node((0,), 0, self.dtype, place), False)
        if all(_is_size(a) for a in args):
            return finish(self._plain, full_node(_shape(args), 0, self.dtype, place), False)
        if len(args) > 1:
            raise TypeError(f"new(): expects sizes or one sequence of data, got {args!r}")
        data = args[0]
        if isinstance(data, tuple) and type(data) is not tuple:  # an fg.Size
            return finish(self._plain, full_node(_shape(data), 0, self.dtype, place), False)
        if isinstance(data, tuple) and all(_is_size(a) for a in data):
            raise TypeError(
                f"new({data!r}): a tuple of ints is data in torch, but sizes where it is a "
                "torch.Size, and fusegrad's shapes are plain tuples: write t.new(*sizes) or "
                "t.new_zeros(sizes) for sizes, t.new([...]) for data"
            )
        if isinstance(data, TensorBase):
            if data.dtype is not self.dtype:
                raise TypeError(
                    f"new(): expected a tensor of dtype {self.dtype.name}, got {data.dtype.name}"
                )
            return data.detach()
        if not isinstance(data, (list, tuple, np.ndarray)):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        return finish(self._plain, data_node(data, self.dtype, place), False)
