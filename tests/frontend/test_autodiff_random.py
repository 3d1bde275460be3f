"""Random differentiable programs: compiled gradients against two oracles.

Hypothesis draws a small program over float64 leaves: elementwise math (+ - *
/ exp log sin cos sqrt tanh sigmoid relu maximum where), broadcasting against
fresh leaves, softmax and log_softmax, every view (reshape, permute,
transpose, expand, slicing with steps, pad, cat, stack, flatten, squeeze,
unsqueeze), the reductions sum, mean and amax with and without keepdim,
matmul, a sample of the wider tensor API (log1p, expm1, atan, asinh, sinh,
atan2, logaddexp, tensor indices, gather, scatter_add, flip, cumsum, cumprod,
prod, norm, tril, roll, repeat, einsum), and (in a second test) conv1d/conv2d
with random stride, padding, dilation and groups, max_pool2d and avg_pool2d.
Its output is projected on a random weight and differentiated with
`fusegrad.grad`. The gradients are computed three ways and must agree:

- compiled: the gradient graph realized into fused kernels;
- reference: the same gradient graph evaluated op by op by
  `fusegrad.ir.reference` (no compilation);
- numeric: central differences of the forward graph, evaluated by the
  reference, with each leaf element moved by +-EPS in place.

Central differences are wrong across a kink, so ops with one (relu, maximum,
where on a comparison, amax, max_pool2d, tanh's switch between its series and
its closed form) are drawn only where their arguments are further than GAP
from it. Exact ties are allowed: they come from one value read twice
(maximum(x, x), amax over a broadcast axis), which moves as one, so the even
split of the gradient is what a central difference sees too.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fusegrad as fg
import fusegrad.ir.autodiff as autodiff
from fusegrad.ir.reference import evaluate, evaluate_many
from fusegrad.nn.conv import avg_pool2d, conv1d, conv2d, max_pool2d
from fusegrad.runtime.engine import engine

EPS = 1e-6
GAP = 1e-3  # distance from a kink below which an op is not drawn
MAX_NUMEL = 96
MAX_ABS = 1e3
NUMERIC_RTOL, NUMERIC_ATOL = 1e-5, 1e-6
COMPILED_RTOL, COMPILED_ATOL = 1e-9, 1e-10  # polynomial exp/log/sin, reordered sums

SETTINGS = dict(
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def value(t: fg.Tensor) -> np.ndarray:
    return evaluate(t.node)


# ---------------------------------------------------------------- the program


class Program:
    """Leaves and the values built from them, drawn one op at a time."""

    def __init__(self, data):
        self.data = data
        self.rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
        self.leaves: list[fg.Tensor] = []
        self.trace: list[str] = []
        self.last = ""  # the name of the op drawn last, for the trace

    def pick(self, names: list[str]) -> str:
        """Which op: uniform over `names` (hypothesis would favour the first ones)."""
        self.last = names[int(self.rng.integers(len(names)))]
        return self.last

    def draw(self, strategy, label=None):
        return self.data.draw(strategy, label=label)

    def leaf(self, shape) -> fg.Tensor:
        t = fg.from_numpy(self.rng.uniform(-2, 2, size=tuple(shape)), requires_grad=True)
        self.leaves.append(t)
        return t

    def broadcastable(self, shape) -> tuple[int, ...]:
        """A shape that broadcasts against `shape`: some axes 1, maybe fewer leading axes."""
        drop = self.draw(st.integers(0, len(shape)))
        kept = shape[drop:]
        return tuple(s if self.draw(st.booleans()) else 1 for s in kept)

    def other(self, t: fg.Tensor) -> fg.Tensor:
        """A second operand for t: itself, a function of it, or a fresh broadcastable leaf."""
        kind = self.draw(st.sampled_from(["self", "sin", "fresh", "fresh"]))
        if kind == "self":
            return t
        if kind == "sin":
            return (t * 1.3).sin()
        return self.leaf(self.broadcastable(t.shape))


def shift_away(v: np.ndarray, kink: float = 0.0) -> float | None:
    """A shift s such that v - s stays GAP away from `kink`, or None."""
    for s in (0.0, 0.137, -0.291, 0.53, -0.77):
        if np.all(np.abs(v - s - kink) > GAP):
            return s
    return None


def far_from_ties(v: np.ndarray, axes: tuple[int, ...]) -> bool:
    """Every element of each group reduced by amax either ties its max or is GAP below it."""
    m = np.max(v, axis=axes, keepdims=True)
    d = m - v
    return bool(np.all((d < 1e-12) | (d > GAP)))


def factorizations(n: int, rng) -> tuple[int, ...]:
    primes, k = [], 2
    while n > 1:
        while n % k == 0:
            primes.append(k)
            n //= k
        k += 1
    rng.shuffle(primes)
    dims = int(rng.integers(1, 4))
    out = [1] * dims
    for p in primes:
        out[int(rng.integers(dims))] *= p
    return tuple(out)


# Each op takes (program, tensor) and returns a new tensor, or None where it does not apply.


def op_unary(p: Program, t):
    name = p.pick(["neg", "exp", "log", "sin", "cos", "sqrt", "tanh", "sigmoid", "relu"])
    v = value(t)
    if name == "neg":
        return -t
    if name == "exp":
        return t.exp() if np.abs(v).max() < 4 else None
    if name == "log":
        return (t * t + 0.5).log()
    if name == "sqrt":
        return (t * t + 0.25).sqrt()
    if name == "tanh":  # tanh switches formulas at |x| = 0.25
        return t.tanh() if np.all(np.abs(np.abs(v) - 0.25) > GAP) else None
    if name == "relu":
        s = shift_away(v)
        return None if s is None else (t - s).relu() if s else t.relu()
    return getattr(t, name)()


def op_binary(p: Program, t):
    name = p.pick(["add", "sub", "mul", "div", "maximum", "pow", "scalar"])
    if name == "pow":
        return t ** p.draw(st.sampled_from([2, 3]))
    if name == "scalar":
        c = p.draw(st.sampled_from([-1.5, 0.5, 2.0]))
        how = p.draw(st.sampled_from(["add", "rsub", "mul", "div", "rdiv"]))
        return {
            "add": lambda: c + t,
            "rsub": lambda: c - t,
            "mul": lambda: t * c,
            "div": lambda: t / c,
            "rdiv": lambda: c / (t * t + 0.5),
        }[how]()
    o = p.other(t)
    a, b = (t, o) if p.draw(st.booleans()) else (o, t)
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div":
        return a / (b * b + 0.5)
    va, vb = np.broadcast_arrays(value(a), value(b))
    d = va - vb
    if a is b or np.all(np.abs(d) > GAP):
        return a.maximum(b)
    s = shift_away(d)
    return None if s is None else a.maximum(b + s)


def op_where(p: Program, t):
    p.last = "where"
    o = p.other(t)
    d = np.subtract(*np.broadcast_arrays(value(t), value(o)))
    s = shift_away(d)
    if s is None:
        return None
    branch = p.draw(st.sampled_from(["leaf", "exp", "const"]))
    other = {
        "leaf": lambda: p.leaf(p.broadcastable(t.shape)),
        "exp": lambda: (o * 0.5).exp(),
        "const": lambda: 0.25,
    }[branch]()
    a, b = (t, other) if p.draw(st.booleans()) else (other, t)
    return fg.where(t < o + s, a, b)


def op_softmax(p: Program, t):
    if t.ndim == 0:
        return None
    name = p.pick(["softmax", "log_softmax"])
    return getattr(t, name)(p.draw(st.integers(-t.ndim, t.ndim - 1)))


VIEWS = [
    "reshape",
    "permute",
    "transpose",
    "expand",
    "slice",
    "pad",
    "cat",
    "stack",
    "flatten",
    "squeeze",
    "unsqueeze",
]


def op_view(p: Program, t):
    name = p.pick(VIEWS)
    n = t.ndim
    if name == "reshape":
        return t.reshape(factorizations(t.numel(), p.rng))
    if name == "unsqueeze":
        return t.unsqueeze(p.draw(st.integers(-n - 1, n)))
    if name == "squeeze":
        ones = [i for i, s in enumerate(t.shape) if s == 1]
        if not ones:
            return None
        return t.squeeze(p.draw(st.sampled_from(ones))) if p.draw(st.booleans()) else t.squeeze()
    if n == 0:
        return None
    if name == "permute":
        return t.permute(tuple(p.rng.permutation(n).tolist()))
    if name == "transpose":
        return t.transpose(p.draw(st.integers(0, n - 1)), p.draw(st.integers(-n, n - 1)))
    if name == "flatten":
        a = p.draw(st.integers(0, n - 1))
        return t.flatten(a, p.draw(st.integers(a, n - 1)))
    if name == "expand":
        dim = p.draw(st.integers(0, n))
        u = t.unsqueeze(dim)
        shape = list(u.shape)
        shape[dim] = p.draw(st.integers(2, 3))
        return u.expand(shape)
    if name == "slice":
        index = []
        for s in t.shape:
            if s > 1 and p.draw(st.booleans()):
                if p.draw(st.integers(0, 3)) == 0 and n > 1:
                    index.append(p.draw(st.integers(-s, s - 1)))  # an int drops the axis
                    continue
                start = p.draw(st.integers(0, s - 1))
                stop = p.draw(st.integers(start + 1, s))
                index.append(slice(start, stop, p.draw(st.integers(1, 3))))
            else:
                index.append(slice(None))
        return t[tuple(index)]
    if name == "pad":
        k = p.draw(st.integers(1, min(n, 2)))
        pads = []
        for s in reversed(t.shape[n - k :]):
            before = p.draw(st.integers(-1 if s > 2 else 0, 2))
            after = p.draw(st.integers(-1 if s - max(-before, 0) > 1 else 0, 2))
            pads += [before, after]
        return t.pad(pads, value=p.draw(st.sampled_from([0.0, 0.0, -0.5])))
    if name == "cat":
        dim = p.draw(st.integers(0, n - 1))
        shape = list(t.shape)
        shape[dim] = p.draw(st.integers(1, 3))
        parts = [t, p.leaf(shape)] if p.draw(st.booleans()) else [t, t.sin()]
        return fg.cat(parts if p.draw(st.booleans()) else parts[::-1], dim)
    # stack
    other = p.leaf(t.shape) if p.draw(st.booleans()) else t
    return fg.stack([t, other], p.draw(st.integers(-n - 1, n)))


def op_reduce(p: Program, t):
    if t.ndim == 0:
        return None
    name = p.pick(["sum", "mean", "amax", "amax_tied"])
    if name == "amax_tied":  # every element of a group ties: the gradient splits k ways
        d = p.draw(st.integers(0, t.ndim))
        copies = t.unsqueeze(d).expand(*t.shape[:d], p.draw(st.integers(2, 3)), *t.shape[d:])
        return copies.amax(d, keepdim=p.draw(st.booleans()))
    if p.draw(st.booleans()):
        dims = None
        axes = tuple(range(t.ndim))
    else:
        first = p.draw(st.integers(0, t.ndim - 1))
        axes = tuple(i for i in range(t.ndim) if i == first or p.draw(st.booleans()))
        dims = axes if len(axes) > 1 or p.draw(st.booleans()) else axes[0]
    keepdim = p.draw(st.booleans())
    if name == "amax" and not far_from_ties(value(t), axes):
        return None
    return getattr(t, name)(dims, keepdim)


def op_matmul(p: Program, t):
    if t.ndim == 0:
        return None
    k = t.shape[-1]
    n = p.draw(st.integers(1, 4))
    form = p.pick(["matmul", "matmul_vector", "matmul_left", "matmul_batched"])
    if form == "matmul":
        return t @ p.leaf((k, n))
    if form == "matmul_vector":
        return t @ p.leaf((k,))
    if form == "matmul_left":
        if t.ndim < 2:
            return p.leaf((n, k)) @ t
        return p.leaf((n, t.shape[-2])) @ t
    # batched: the leaf's extra leading axis broadcasts against t's batch axes
    return t @ p.leaf((2,) + (1,) * max(t.ndim - 2, 0) + (k, n))


API_OPS = [
    "log1p",
    "expm1",
    "atan",
    "asinh",
    "sinh",
    "atan2",
    "logaddexp",
    "index",
    "gather",
    "scatter_add",
    "flip",
    "cumsum",
    "cumprod",
    "prod",
    "norm",
    "tril",
    "roll",
    "repeat",
    "einsum",
]


def op_api(p: Program, t):
    """Differentiable ops of the wider tensor API (frontend/indexing, mathops, shapeops)."""
    name = p.pick(API_OPS)
    v = value(t)
    if name == "log1p":
        return (t * t).log1p()
    if name in ("expm1", "sinh"):
        return getattr(t, name)() if np.abs(v).max() < 4 else None
    if name in ("atan", "asinh"):
        return getattr(t, name)()
    if name == "atan2":
        return fg.atan2(t, p.leaf(p.broadcastable(t.shape)) + 2.5)  # x > 0: away from the cut
    if name == "logaddexp":
        return fg.logaddexp(t, p.other(t))
    if t.ndim == 0:
        return None
    d = int(p.draw(st.integers(0, t.ndim - 1)))
    n = t.shape[d]
    if name == "index":  # integer tensor indices, repeats included, with a slice beside them
        rows = fg.tensor(p.rng.integers(-n, n, size=int(p.rng.integers(1, 4))))
        return t[(slice(None),) * d + (rows,)]
    if name == "gather":
        shape = list(t.shape)
        shape[d] = int(p.rng.integers(1, 4))
        return t.gather(d, fg.tensor(p.rng.integers(0, n, size=shape)))
    if name == "scatter_add":
        shape = list(t.shape)
        shape[d] = int(p.rng.integers(1, 4))
        src = p.leaf(shape)
        return t.scatter_add(d, fg.tensor(p.rng.integers(0, n, size=shape)), src)
    if name == "flip":
        return t.flip(d)
    if name == "cumsum":
        return t.cumsum(d)
    if name == "cumprod":
        return t.cumprod(d) if np.abs(v).max() < 3 else None
    if name == "prod":
        return t.prod(d, keepdim=p.draw(st.booleans())) if np.abs(v).max() < 3 else None
    if name == "norm":  # the 2-norm has a kink only at 0
        out = t.norm(dim=d)
        return out if np.all(value(out) > GAP) else None
    if name == "tril":
        return t.tril(int(p.draw(st.integers(-1, 1)))) if t.ndim >= 2 else None
    if name == "roll":
        return t.roll(int(p.draw(st.integers(-3, 3))), d)
    if name == "repeat":
        return t.repeat(*[int(p.draw(st.integers(1, 2))) for _ in range(t.ndim)])
    # einsum: a contraction with a fresh leaf over axis d
    letters = "abcde"[: t.ndim]
    other = p.leaf((n, 2))
    out = letters.replace(letters[d], "") + "z"
    return fg.einsum(f"{letters},{letters[d]}z->{out}", t, other)


OPS = [op_unary, op_binary, op_where, op_softmax, op_view, op_reduce, op_matmul, op_api]
WEIGHTS = [4, 4, 1, 1, 5, 2, 1, 3]


def grow(p: Program, t: fg.Tensor, steps: int) -> fg.Tensor:
    """Apply `steps` random ops to t, skipping any that does not apply or grows too large."""
    choices = [op for op, w in zip(OPS, WEIGHTS) for _ in range(w)]
    for _ in range(steps):
        op = choices[int(p.rng.integers(len(choices)))]
        out = op(p, t)
        if out is None or out.numel() > MAX_NUMEL or out.numel() == 0 or out.ndim > 5:
            continue
        v = value(out)
        if not np.all(np.isfinite(v)) or np.abs(v).max() > MAX_ABS:
            continue
        p.trace.append(f"{p.last} -> {out.shape}")
        t = out
    return t


# ---------------------------------------------------------------- the three gradients


def gradient_graphs(p: Program, out: fg.Tensor):
    """fusegrad.grad of <out, w> for a random w, by grad_outputs or by projecting."""
    w = fg.from_numpy(p.rng.uniform(0.5, 1.5, size=out.shape))
    projected = (out * w).sum()
    if p.draw(st.booleans(), label="grad_outputs"):
        grads = fg.grad(out, p.leaves, grad_outputs=w, allow_unused=True)
    else:
        grads = fg.grad(projected, p.leaves, allow_unused=True)
    return projected, list(grads)


def central_differences(projected: fg.Tensor, leaves: list[fg.Tensor]) -> list[np.ndarray]:
    """Move each leaf element by +-EPS in its buffer and re-evaluate the forward graph."""
    out = []
    for t in leaves:
        buf = engine.value(t.node)
        on_host = getattr(buf, "array", None) is not None  # else a device buffer: a copy
        flat = buf.array if on_host else buf.numpy()
        g = np.zeros(flat.size)

        def set_element(i, value, flat=flat, buf=buf, on_host=on_host):
            flat[i] = value
            if not on_host:
                buf.write(flat)

        for i in range(flat.size):
            keep = flat[i]
            set_element(i, keep + EPS)
            up = float(evaluate(projected.node))
            set_element(i, keep - EPS)
            down = float(evaluate(projected.node))
            set_element(i, keep)
            g[i] = (up - down) / (2 * EPS)
        out.append(g.reshape(t.shape))
    return out


def check_gradients(p: Program, out: fg.Tensor, compare=None):
    projected, grads = gradient_graphs(p, out)
    live = [g for g in grads if g is not None]
    # the oracles run before anything is compiled: realizing rewrites nodes to buffers
    reference = dict(zip(map(id, live), evaluate_many([g.node for g in live])))
    numeric = central_differences(projected, p.leaves)
    extra = compare(projected) if compare else None
    fg.realize(*live)
    trace = " | ".join(p.trace)
    for i, (t, g, n) in enumerate(zip(p.leaves, grads, numeric)):
        if g is None:
            np.testing.assert_array_equal(n, 0, err_msg=f"leaf {i} unused: {trace}")
            continue
        assert g.shape == t.shape and g.dtype is t.dtype
        ref = reference[id(g)]
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(
            ref, n, rtol=NUMERIC_RTOL, atol=NUMERIC_ATOL * scale, err_msg=f"leaf {i}: {trace}"
        )
        np.testing.assert_allclose(
            g.numpy(),
            ref,
            rtol=COMPILED_RTOL,
            atol=COMPILED_ATOL * scale,
            err_msg=f"compiled vs reference, leaf {i}: {trace}",
        )
    return grads, extra


# ---------------------------------------------------------------- the tests


@settings(max_examples=200, **SETTINGS)
@given(st.data())
def test_random_graph_gradients(data):
    p = Program(data)
    ndim = data.draw(st.integers(0, 3), label="ndim")
    shape = tuple(data.draw(st.lists(st.integers(1, 4), min_size=ndim, max_size=ndim)))
    t = p.leaf(shape)
    out = grow(p, t, data.draw(st.integers(1, 6), label="steps"))
    check_gradients(p, out)


def conv_geometry(p: Program, n: int):
    """(input shape, weight shape, stride, padding, dilation, groups), valid for conv{n}d."""
    groups = p.draw(st.integers(1, 2))
    cin, cout = groups * p.draw(st.integers(1, 2)), groups * p.draw(st.integers(1, 2))
    kernel = tuple(p.draw(st.integers(1, 3)) for _ in range(n))
    stride = tuple(p.draw(st.integers(1, 3)) for _ in range(n))
    dilation = tuple(p.draw(st.integers(1, 2)) for _ in range(n))
    same = all(s == 1 for s in stride) and p.draw(st.booleans())
    padding = "same" if same else tuple(p.draw(st.integers(0, 2)) for _ in range(n))
    spatial = []
    for i in range(n):
        reach = dilation[i] * (kernel[i] - 1) + 1
        lo = max(1, reach - (0 if same else 2 * padding[i]))
        spatial.append(p.draw(st.integers(lo, lo + 4)))
    batch = p.draw(st.integers(1, 2))
    return (batch, cin, *spatial), (cout, cin // groups, *kernel), stride, padding, dilation, groups


def op_conv(p: Program):
    n = p.draw(st.sampled_from([1, 2]))
    x_shape, w_shape, stride, padding, dilation, groups = conv_geometry(p, n)
    x, w = p.leaf(x_shape), p.leaf(w_shape)
    if p.draw(st.booleans()):
        x = x.sin()  # the input is a computed value, not only a leaf
    bias = p.leaf((w_shape[0],)) if p.draw(st.booleans()) else None
    conv = conv1d if n == 1 else conv2d
    p.trace.append(f"conv{n}d x{x_shape} w{w_shape} s{stride} p{padding} d{dilation} g{groups}")
    return conv(x, w, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)


def op_pool(p: Program):
    shape = (p.draw(st.integers(1, 2)), p.draw(st.integers(1, 2)))
    shape += (p.draw(st.integers(3, 6)), p.draw(st.integers(3, 6)))
    kernel = (p.draw(st.integers(1, 3)), p.draw(st.integers(1, 3)))
    stride = p.draw(st.sampled_from([None, 1, 2, (1, 2)]))
    padding = tuple(p.draw(st.integers(0, k // 2)) for k in kernel)
    x = p.leaf(shape)
    if p.draw(st.booleans()):
        include = p.draw(st.booleans())
        p.trace.append(f"avg_pool2d {shape} k{kernel} s{stride} p{padding} incl{include}")
        return avg_pool2d(x, kernel, stride, padding, count_include_pad=include)
    dilation = p.draw(st.integers(1, 2))
    reach = tuple(dilation * (k - 1) + 1 for k in kernel)
    if any(r > s + 2 * q for r, s, q in zip(reach, shape[2:], padding)):
        dilation = 1
    if p.draw(st.booleans()):
        x = x.tanh()
    p.trace.append(f"max_pool2d {shape} k{kernel} s{stride} p{padding} d{dilation}")
    # the kink of a max pool is a tie inside a window: keep every two inputs GAP apart
    if not all_apart(value(x)):
        return None
    return max_pool2d(x, kernel, stride, padding, dilation)


def all_apart(v: np.ndarray) -> bool:
    return bool(np.all(np.diff(np.sort(v.reshape(-1))) > GAP))


def derived_gradients(leaves):
    """The same gradients with the conv's own VJP switched off: derived through its views."""

    def run(projected):
        autodiff.use_custom_vjp = False
        try:
            grads = fg.grad(projected, leaves, allow_unused=True)
        finally:
            autodiff.use_custom_vjp = True
        live = [g for g in grads if g is not None]
        return grads, evaluate_many([g.node for g in live])

    return run


@settings(max_examples=80, **SETTINGS)
@given(st.data())
def test_random_conv_and_pool_gradients(data):
    p = Program(data)
    first = op_conv(p) if p.rng.integers(3) else op_pool(p)  # two convolutions to a pooling
    if first is None:
        return
    out = grow(p, first, data.draw(st.integers(0, 3), label="steps"))
    custom, (derived, derived_ref) = check_gradients(p, out, derived_gradients(p.leaves))
    # the conv's own rule and the derivation through its window view are the same function
    assert [g is None for g in custom] == [g is None for g in derived]
    fg.realize(*[g for g in derived if g is not None])
    live = [(c, d) for c, d in zip(custom, derived) if c is not None]
    for (c, d), ref in zip(live, derived_ref):
        scale = max(1.0, float(np.abs(ref).max()))
        np.testing.assert_allclose(ref, c.numpy(), rtol=1e-9, atol=1e-10 * scale)
        np.testing.assert_allclose(d.numpy(), ref, rtol=1e-9, atol=1e-10 * scale)


def test_conv_custom_vjp_is_used_and_matches_the_derived_one():
    """The switch matters: the two gradient graphs differ, and their values agree."""
    rng = np.random.default_rng(4)
    x = fg.from_numpy(rng.standard_normal((2, 4, 7, 6)), requires_grad=True)
    w = fg.from_numpy(rng.standard_normal((6, 2, 3, 2)), requires_grad=True)
    out = conv2d(x, w, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    v = fg.from_numpy(rng.standard_normal(out.shape))
    custom = fg.grad(out, [x, w], grad_outputs=v)
    autodiff.use_custom_vjp = False
    try:
        derived = fg.grad(out, [x, w], grad_outputs=v)
    finally:
        autodiff.use_custom_vjp = True
    assert autodiff.use_custom_vjp is True
    assert all(c.node is not d.node for c, d in zip(custom, derived))
    for c, d in zip(custom, derived):
        np.testing.assert_allclose(evaluate(c.node), evaluate(d.node), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(c.numpy(), d.numpy(), rtol=1e-10, atol=1e-10)
    # and both are the convolution's gradient: central differences on a few elements
    xs, ws, vs = x.numpy().copy(), w.numpy().copy(), v.numpy()

    def f(xa, wa):
        y = conv2d(
            fg.from_numpy(xa),
            fg.from_numpy(wa),
            stride=(2, 1),
            padding=(1, 2),
            dilation=(1, 2),
            groups=2,
        )
        return float((evaluate(y.node) * vs).sum())

    for idx in [(0, 0, 0, 0), (1, 3, 6, 5), (0, 2, 3, 1)]:
        up, down = xs.copy(), xs.copy()
        up[idx] += EPS
        down[idx] -= EPS
        want = (f(up, ws) - f(down, ws)) / (2 * EPS)
        np.testing.assert_allclose(custom[0].numpy()[idx], want, rtol=1e-6, atol=1e-7)
    for idx in [(0, 0, 0, 0), (5, 1, 2, 1), (3, 0, 1, 0)]:
        up, down = ws.copy(), ws.copy()
        up[idx] += EPS
        down[idx] -= EPS
        want = (f(xs, up) - f(xs, down)) / (2 * EPS)
        np.testing.assert_allclose(custom[1].numpy()[idx], want, rtol=1e-6, atol=1e-7)


ALL_NAMES = (
    ["neg", "exp", "log", "sin", "cos", "sqrt", "tanh", "sigmoid", "relu"]
    + ["add", "sub", "mul", "div", "maximum", "pow", "scalar", "where"]
    + ["softmax", "log_softmax", "sum", "mean", "amax", "amax_tied"]
    + ["matmul", "matmul_vector", "matmul_left", "matmul_batched"]
    + VIEWS
    + API_OPS
)


def test_the_generator_draws_every_op():
    """Guards against kinks must not starve an op: each one is drawn and kept in a fixed run."""
    kept: set[str] = set()

    # hypothesis replays and mutates earlier inputs, so far fewer than max_examples of the
    # seeds that pick the ops are new, and which ones it tries depends on more than this
    # code: a change to the thread pool alone, every value computed the same, once left
    # 200 examples without a cumsum
    @settings(max_examples=500, **SETTINGS)
    @given(st.data())
    def collect(data):
        p = Program(data)
        grow(p, p.leaf((2, 3)), 8)
        kept.update(line.split(" ")[0] for line in p.trace)

    collect()
    assert kept == set(ALL_NAMES), set(ALL_NAMES) - kept
