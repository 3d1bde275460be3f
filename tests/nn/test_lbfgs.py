"""optim.LBFGS against a numpy re-implementation of torch.optim.LBFGS's algorithm
(torch/optim/lbfgs.py: two-loop recursion, first step min(1, 1/|g|_1) * lr, stopping
tests, strong Wolfe line search with cubic interpolation), on a small quadratic and on
Rosenbrock, with and without the line search; and the quadratic's minimum from
np.linalg.solve."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import optim

# ---------------------------------------------------------------- the numpy reference


def cubic_min(x1, f1, g1, x2, f2, g2, bounds=None):
    lo, hi = bounds if bounds is not None else (min(x1, x2), max(x1, x2))
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    disc = d1 * d1 - g1 * g2
    if disc < 0:
        return (lo + hi) / 2
    d2 = np.sqrt(disc)
    if x1 <= x2:
        m = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
    else:
        m = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
    return min(max(m, lo), hi)


def strong_wolfe(fg_at, t, d, f, g, gtd, c1=1e-4, c2=0.9, tol=1e-9, max_ls=25):
    """(f, g, t, evaluations) of torch's `_strong_wolfe`; fg_at(t) = (f, g) at x + t d."""
    evals, it = 1, 0
    fn, gn = fg_at(t)
    gtdn = gn @ d
    tp, fp, gp, gtdp = 0.0, f, g, gtd
    found = None
    while it < max_ls:
        if fn > f + c1 * t * gtd or (it > 1 and fn >= fp):
            found = ([tp, t], [fp, fn], [gp, gn], [gtdp, gtdn])
            break
        if abs(gtdn) <= -c2 * gtd:
            return fn, gn, t, evals
        if gtdn >= 0:
            found = ([tp, t], [fp, fn], [gp, gn], [gtdp, gtdn])
            break
        t_new = cubic_min(tp, fp, gtdp, t, fn, gtdn, (t + 0.01 * (t - tp), 10 * t))
        tp, fp, gp, gtdp = t, fn, gn, gtdn
        t = t_new
        fn, gn = fg_at(t)
        gtdn = gn @ d
        evals, it = evals + 1, it + 1
    if found is None:  # max_ls reached while extrapolating
        ts, fs, gs = [0.0, t], [f, fn], [g, gn]
        low = 0 if fs[0] <= fs[-1] else 1
        return fs[low], gs[low], ts[low], evals
    ts, fs, gs, gtds = found
    low, high = (0, 1) if fs[0] <= fs[1] else (1, 0)
    stuck = False
    while it < max_ls:
        if abs(ts[1] - ts[0]) * np.abs(d).max() < tol:
            break
        t = cubic_min(ts[0], fs[0], gtds[0], ts[1], fs[1], gtds[1])
        a, b = min(ts), max(ts)
        eps = 0.1 * (b - a)
        if min(b - t, t - a) < eps:
            if stuck or t >= b or t <= a:
                t = b - eps if abs(t - b) < abs(t - a) else a + eps
                stuck = False
            else:
                stuck = True
        else:
            stuck = False
        fn, gn = fg_at(t)
        gtdn = gn @ d
        evals, it = evals + 1, it + 1
        if fn > f + c1 * t * gtd or fn >= fs[low]:
            ts[high], fs[high], gs[high], gtds[high] = t, fn, gn, gtdn
            low, high = (0, 1) if fs[0] <= fs[1] else (1, 0)
            continue
        wolfe = abs(gtdn) <= -c2 * gtd
        if not wolfe and gtdn * (ts[high] - ts[low]) >= 0:
            ts[high], fs[high], gs[high], gtds[high] = ts[low], fs[low], gs[low], gtds[low]
        ts[low], fs[low], gs[low], gtds[low] = t, fn, gn, gtdn
        if wolfe:
            break
    return fs[low], gs[low], ts[low], evals


class ReferenceLBFGS:
    """torch.optim.LBFGS on one flat float64 vector; `fun(x) = (f, grad)`."""

    def __init__(self, x, lr=1.0, max_iter=20, line_search=None, history=100):
        self.x = np.array(x, np.float64)
        self.lr, self.max_iter, self.max_eval = lr, max_iter, max_iter * 5 // 4
        self.line_search, self.history = line_search, history
        self.tol_grad, self.tol_change = 1e-7, 1e-9
        self.n_iter, self.func_evals = 0, 0
        self.pairs: list[tuple[np.ndarray, np.ndarray, float]] = []  # (y, s, 1 / y.s)
        self.d = self.t = self.prev_g = None
        self.h = 1.0

    def step(self, fun):
        f0, g = fun(self.x)
        f, evals = f0, 1
        self.func_evals += 1
        if np.abs(g).max() <= self.tol_grad:
            return f0
        for k in range(1, self.max_iter + 1):
            self.n_iter += 1
            if self.n_iter == 1:
                d = -g
                self.pairs, self.h = [], 1.0
            else:
                y, s = g - self.prev_g, self.d * self.t
                if y @ s > 1e-10:
                    self.pairs = (self.pairs + [(y, s, 1.0 / (y @ s))])[-self.history :]
                    self.h = (y @ s) / (y @ y)
                q, alphas = -g, []
                for y_i, s_i, rho in reversed(self.pairs):
                    alphas.append(rho * (s_i @ q))
                    q = q - alphas[-1] * y_i
                d = self.h * q
                for (y_i, s_i, rho), a in zip(self.pairs, reversed(alphas)):
                    d = d + (a - rho * (y_i @ d)) * s_i
            self.d, self.prev_g, f_prev = d, g.copy(), f
            self.t = min(1.0, 1.0 / np.abs(g).sum()) * self.lr if self.n_iter == 1 else self.lr
            gtd = g @ d
            if gtd > -self.tol_change:
                break
            converged = False
            if self.line_search:
                f, g, self.t, n = strong_wolfe(
                    lambda t, x=self.x, d=d: fun(x + t * d), self.t, d, f, g, gtd
                )
                self.x = self.x + self.t * d
                converged = np.abs(g).max() <= self.tol_grad
            else:
                self.x = self.x + self.t * d
                n = 0
                if k != self.max_iter:
                    f, g = fun(self.x)
                    n, converged = 1, np.abs(g).max() <= self.tol_grad
            evals += n
            self.func_evals += n
            if k == self.max_iter or evals >= self.max_eval or converged:
                break
            if np.abs(d * self.t).max() <= self.tol_change or abs(f - f_prev) < self.tol_change:
                break
        return f0


# ---------------------------------------------------------------- the problems

A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
B = np.array([1.0, -2.0, 0.5])


def quadratic_np(x):
    return 0.5 * x @ A @ x - B @ x, A @ x - B


def quadratic_fg(x):
    a, b = fg.tensor(A, dtype=fg.float64), fg.tensor(B, dtype=fg.float64)
    return 0.5 * (x * (a @ x)).sum() - (b * x).sum()


def rosenbrock_np(x):
    f = (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2
    g = np.array([-2 * (1 - x[0]) - 400 * x[0] * (x[1] - x[0] ** 2), 200 * (x[1] - x[0] ** 2)])
    return f, g


def rosenbrock_fg(x):
    return (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2


PROBLEMS = {
    "quadratic": (quadratic_np, quadratic_fg, [0.3, -0.7, 1.1]),
    "rosenbrock": (rosenbrock_np, rosenbrock_fg, [-1.2, 1.0]),
}


def run_fusegrad(fg_fun, x0, steps, **options):
    x = fg.tensor(x0, dtype=fg.float64, requires_grad=True)
    opt = optim.LBFGS([x], **options)
    calls = [0]

    def closure():
        calls[0] += 1
        opt.zero_grad()
        loss = fg_fun(x)
        loss.backward()
        return loss

    losses = [float(opt.step(closure)) for _ in range(steps)]
    return np.array(x.tolist()), losses, calls[0], opt


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_lbfgs_matches_the_reference_iterate_by_iterate(name, line_search):
    np_fun, fg_fun, x0 = PROBLEMS[name]
    max_iter, steps = 4, 6  # several step() calls: the history carries over
    ref = ReferenceLBFGS(x0, max_iter=max_iter, line_search=line_search, lr=1.0)
    ref_losses = [ref.step(np_fun) for _ in range(steps)]
    x, losses, calls, opt = run_fusegrad(
        fg_fun, x0, steps, max_iter=max_iter, line_search_fn=line_search
    )
    # float64 both; the compiled loss and gradient round differently from numpy's, and
    # Rosenbrock without a line search amplifies that to ~1e-8 over 24 iterations
    np.testing.assert_allclose(x, ref.x, rtol=1e-7, atol=1e-12)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-7, atol=1e-12)
    state = opt.state[opt.param_groups[0]["params"][0]]
    assert (state["n_iter"], state["func_evals"]) == (ref.n_iter, ref.func_evals)
    assert calls == ref.func_evals  # the closure runs once per evaluation


@pytest.mark.parametrize("line_search", [None, "strong_wolfe"])
def test_lbfgs_reaches_the_quadratic_minimum(line_search):
    x, *_ = run_fusegrad(quadratic_fg, [0.3, -0.7, 1.1], 5, line_search_fn=line_search)
    np.testing.assert_allclose(x, np.linalg.solve(A, B), atol=1e-6)


def test_lbfgs_solves_rosenbrock_with_strong_wolfe():
    x, losses, *_ = run_fusegrad(rosenbrock_fg, [-1.2, 1.0], 10, line_search_fn="strong_wolfe")
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-4)  # stops as |f change| < 1e-9
    assert losses[0] == pytest.approx(24.2)  # f(-1.2, 1): the first loss is returned


def test_lbfgs_float32_parameters_stay_float32():
    x = fg.tensor([0.3, -0.7, 1.1], requires_grad=True)
    opt = optim.LBFGS([x])

    def closure():
        opt.zero_grad()
        loss = quadratic_fg(x.double())
        loss.backward()
        return loss

    opt.step(closure)
    assert x.dtype == fg.float32
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(A, B), atol=1e-4)


def test_lbfgs_refuses_what_torch_refuses():
    w = fg.zeros(2, requires_grad=True)
    with pytest.raises(ValueError, match="only 'strong_wolfe'"):
        optim.LBFGS([w], line_search_fn="armijo")
    with pytest.raises(ValueError, match="Invalid learning rate"):
        optim.LBFGS([w], lr=-1.0)
    with pytest.raises(ValueError, match="parameter groups"):
        optim.LBFGS([{"params": [w]}, {"params": [fg.zeros(1, requires_grad=True)]}])
    with pytest.raises(RuntimeError, match="closure"):
        optim.LBFGS([w]).step(None)


def test_lbfgs_at_special_points():
    # a zero gradient: optimal at once (torch: max |g| <= tolerance_grad), one evaluation,
    # the loss returned and nothing moved
    q = fg.tensor([3.0, -2.0], requires_grad=True)
    opt = optim.LBFGS([q])
    calls = []

    def flat():
        calls.append(1)
        opt.zero_grad()
        loss = (q * 0.0).sum() + 5.0
        loss.backward()
        return loss

    assert opt.step(flat).item() == 5.0 and q.tolist() == [3.0, -2.0] and len(calls) == 1
    # a parameter the loss does not use has no gradient: torch counts it as zeros, so it
    # stays where it was while the used one reaches its minimum
    r, s = fg.tensor([1.0, 2.0], requires_grad=True), fg.tensor([1.0], requires_grad=True)
    opt = optim.LBFGS([r, s], max_iter=5)

    def bowl():
        opt.zero_grad()
        loss = ((r - 3.0) ** 2).sum()
        loss.backward()
        return loss

    opt.step(bowl)
    np.testing.assert_allclose(r.numpy(), [3.0, 3.0], rtol=1e-6)
    assert s.tolist() == [1.0] and s.grad is None
