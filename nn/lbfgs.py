"""`LBFGS`: torch.optim.LBFGS, step by step the same algorithm (its two-loop recursion,
its first step length, its stopping tests, and its strong Wolfe line search with cubic
interpolation), on the host.

L-BFGS reads a handful of scalars per iteration (dot products, a maximum, the loss) and
decides what to do next from them, so its vector arithmetic runs in numpy on the flat
gradient, in the parameters' dtype as torch's runs in theirs; the closure (the model's
forward and backward) runs on fusegrad, and each step's parameters are written back
into the same Parameter objects.

>>> import fusegrad as fg
>>> from fusegrad import optim
>>> x = fg.tensor([1.5, -0.5], dtype=fg.float64, requires_grad=True)
>>> opt = optim.LBFGS([x], line_search_fn="strong_wolfe")
>>> def closure():
...     opt.zero_grad()
...     loss = ((x - fg.tensor([3.0, 2.0], dtype=fg.float64)) ** 2).sum()
...     loss.backward()
...     return loss
>>> _ = opt.step(closure)
>>> [round(v, 6) for v in x.tolist()]
[3.0, 2.0]
"""

from __future__ import annotations

import numpy as np

from ..nnapi import Tensor, enable_grad, from_numpy, no_grad, realize, take_pending_outputs
from .optimizer import Optimizer


def _cubic_interpolate(x1, f1, g1, x2, f2, g2, bounds=None):
    """The minimizer of the cubic through (x1, f1, g1) and (x2, f2, g2), kept in `bounds`
    (default: between x1 and x2); their middle when the cubic has none."""
    if bounds is not None:
        xmin_bound, xmax_bound = bounds
    else:
        xmin_bound, xmax_bound = (x1, x2) if x1 <= x2 else (x2, x1)
    d1 = g1 + g2 - 3 * (f1 - f2) / (x1 - x2)
    d2_square = d1**2 - g1 * g2
    if d2_square >= 0:
        d2 = np.sqrt(d2_square)
        if x1 <= x2:
            min_pos = x2 - (x2 - x1) * ((g2 + d2 - d1) / (g2 - g1 + 2 * d2))
        else:
            min_pos = x1 - (x1 - x2) * ((g1 + d2 - d1) / (g1 - g2 + 2 * d2))
        return min(max(min_pos, xmin_bound), xmax_bound)
    return (xmin_bound + xmax_bound) / 2.0


def _strong_wolfe(obj_func, x, t, d, f, g, gtd, c1=1e-4, c2=0.9, tolerance_change=1e-9, max_ls=25):
    """A step length `t` along `d` meeting the strong Wolfe conditions (Nocedal & Wright,
    algorithms 3.5 and 3.6: bracket, then zoom), as torch's `_strong_wolfe`. Returns
    (loss, flat gradient, t, evaluations)."""
    d_norm = np.abs(d).max()
    g = g.copy()
    f_new, g_new = obj_func(x, t, d)
    ls_func_evals = 1
    gtd_new = g_new.dot(d)

    # bracket an interval containing a point satisfying the Wolfe criteria
    t_prev, f_prev, g_prev, gtd_prev = 0, f, g, gtd
    done = False
    ls_iter = 0
    while ls_iter < max_ls:
        if f_new > (f + c1 * t * gtd) or (ls_iter > 1 and f_new >= f_prev):
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        if abs(gtd_new) <= -c2 * gtd:
            bracket, bracket_f, bracket_g = [t], [f_new], [g_new]
            done = True
            break
        if gtd_new >= 0:
            bracket, bracket_f = [t_prev, t], [f_prev, f_new]
            bracket_g, bracket_gtd = [g_prev, g_new.copy()], [gtd_prev, gtd_new]
            break
        # extrapolate: a cubic step between 1.01 t and 10 t
        min_step = t + 0.01 * (t - t_prev)
        max_step = t * 10
        tmp = t
        t = _cubic_interpolate(
            t_prev, f_prev, gtd_prev, t, f_new, gtd_new, bounds=(min_step, max_step)
        )
        t_prev, f_prev, g_prev, gtd_prev = tmp, f_new, g_new.copy(), gtd_new
        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1

    if ls_iter == max_ls:
        bracket, bracket_f, bracket_g = [0, t], [f, f_new], [g, g_new]

    # zoom: shrink the bracket until a point meets the criteria
    insuf_progress = False
    low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[-1] else (1, 0)
    while not done and ls_iter < max_ls:
        if abs(bracket[1] - bracket[0]) * d_norm < tolerance_change:
            break  # the bracket is too small
        t = _cubic_interpolate(
            bracket[0], bracket_f[0], bracket_gtd[0], bracket[1], bracket_f[1], bracket_gtd[1]
        )
        # a trial point near an end of the bracket twice in a row (or outside it) moves
        # to a tenth of the bracket's length from that end
        eps = 0.1 * (max(bracket) - min(bracket))
        if min(max(bracket) - t, t - min(bracket)) < eps:
            if insuf_progress or t >= max(bracket) or t <= min(bracket):
                if abs(t - max(bracket)) < abs(t - min(bracket)):
                    t = max(bracket) - eps
                else:
                    t = min(bracket) + eps
                insuf_progress = False
            else:
                insuf_progress = True
        else:
            insuf_progress = False

        f_new, g_new = obj_func(x, t, d)
        ls_func_evals += 1
        gtd_new = g_new.dot(d)
        ls_iter += 1

        if f_new > (f + c1 * t * gtd) or f_new >= bracket_f[low_pos]:
            # not enough decrease, or not below the lowest point: the new high end
            bracket[high_pos], bracket_f[high_pos] = t, f_new
            bracket_g[high_pos], bracket_gtd[high_pos] = g_new.copy(), gtd_new
            low_pos, high_pos = (0, 1) if bracket_f[0] <= bracket_f[1] else (1, 0)
        else:
            if abs(gtd_new) <= -c2 * gtd:
                done = True  # the strong Wolfe conditions hold
            elif gtd_new * (bracket[high_pos] - bracket[low_pos]) >= 0:
                # the old high end becomes the low end
                bracket[high_pos], bracket_f[high_pos] = bracket[low_pos], bracket_f[low_pos]
                bracket_g[high_pos] = bracket_g[low_pos]
                bracket_gtd[high_pos] = bracket_gtd[low_pos]
            bracket[low_pos], bracket_f[low_pos] = t, f_new
            bracket_g[low_pos], bracket_gtd[low_pos] = g_new.copy(), gtd_new

    return bracket_f[low_pos], bracket_g[low_pos], bracket[low_pos], ls_func_evals


def _host(value):
    """A state value as numpy (load_state_dict turns arrays into tensors)."""
    return value.numpy() if isinstance(value, Tensor) else value


class LBFGS(Optimizer):
    """L-BFGS, as torch.optim.LBFGS: `step(closure)` runs up to `max_iter` iterations,
    calling `closure` (which zeroes the gradients, computes the loss, calls `backward()`
    and returns the loss) at most `max_eval` times, and returns the first loss.

    Each iteration's direction is the two-loop recursion over the last `history_size`
    pairs of steps and gradient changes; its step is `lr` (on the very first iteration
    min(1, 1 / |g|_1) * lr), or with `line_search_fn="strong_wolfe"` a step that meets
    the strong Wolfe conditions. It stops when the largest gradient entry is at most
    `tolerance_grad`, or the step or the loss changes less than `tolerance_change`.
    One parameter group only, as torch's.
    """

    def __init__(
        self,
        params,
        lr: float = 1.0,
        max_iter: int = 20,
        max_eval: int | None = None,
        tolerance_grad: float = 1e-7,
        tolerance_change: float = 1e-9,
        history_size: int = 100,
        line_search_fn: str | None = None,
    ):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if max_eval is None:
            max_eval = max_iter * 5 // 4
        if line_search_fn not in (None, "strong_wolfe"):
            raise ValueError(
                f"only 'strong_wolfe' is supported, got line_search_fn={line_search_fn!r}"
            )
        defaults = dict(
            lr=lr,
            max_iter=max_iter,
            max_eval=max_eval,
            tolerance_grad=tolerance_grad,
            tolerance_change=tolerance_change,
            history_size=history_size,
            line_search_fn=line_search_fn,
        )
        super().__init__(params, defaults)
        if len(self.param_groups) != 1:
            raise ValueError("LBFGS doesn't support per-parameter options (parameter groups)")
        self._params = self.param_groups[0]["params"]
        self._dtype = np.result_type(*[p.dtype.np for p in self._params])

    # ---------------------------------------------------------------- flat vectors
    def _evaluate(self, closure) -> tuple[float, np.ndarray]:
        """The closure's loss and the parameters' gradients as one flat host vector
        (zeros for a parameter without one), computed in one realize."""
        with enable_grad():
            loss = closure()
        take_pending_outputs()  # realized below, with the gradients
        grads = [p.grad for p in self._params if p.grad is not None]
        if grads or isinstance(loss, Tensor):
            realize(*([loss] if isinstance(loss, Tensor) else []), *grads)
        flat = [
            np.zeros(p.numel(), self._dtype) if p.grad is None else p.grad.numpy().reshape(-1)
            for p in self._params
        ]
        return loss, np.concatenate(flat).astype(self._dtype, copy=False)

    def _values(self) -> list[np.ndarray]:
        return [p.numpy().astype(self._dtype) for p in self._params]

    def _set(self, values: list[np.ndarray]) -> None:
        with no_grad():
            for p, v in zip(self._params, values):
                p.copy_(from_numpy(np.ascontiguousarray(v, p.dtype.np), device=p.device))

    def _add_grad(self, x: list[np.ndarray], t, d: np.ndarray) -> list[np.ndarray]:
        """The parameters `x` plus t * d (d flat), written into the parameters."""
        out, offset = [], 0
        for v in x:
            n = v.size
            out.append(v + t * d[offset : offset + n].reshape(v.shape))
            offset += n
        self._set(out)
        return out

    # ---------------------------------------------------------------- the step
    def step(self, closure):
        """Up to `max_iter` L-BFGS iterations; returns the loss `closure` gave first."""
        if closure is None:
            raise RuntimeError("LBFGS requires a closure: opt.step(closure)")
        self._step_count += 1
        group = self.param_groups[0]
        lr, max_iter, max_eval = group["lr"], group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        line_search_fn, history_size = group["line_search_fn"], group["history_size"]

        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss, flat_grad = self._evaluate(closure)
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        if np.abs(flat_grad).max() <= tolerance_grad:
            return orig_loss

        d, t = _host(state.get("d")), state.get("t")
        old_dirs, old_stps, ro = state.get("old_dirs"), state.get("old_stps"), state.get("ro")
        H_diag = state.get("H_diag")  # (torch's names)
        prev_flat_grad, prev_loss = _host(state.get("prev_flat_grad")), state.get("prev_loss")
        x = self._values()

        n_iter = 0
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1

            # the direction
            if state["n_iter"] == 1:
                d = -flat_grad
                old_dirs, old_stps, ro = [], [], []
                H_diag = 1
            else:
                y = flat_grad - prev_flat_grad
                s = d * t
                ys = y.dot(s)
                if ys > 1e-10:  # a pair only where the curvature is positive
                    if len(old_dirs) == history_size:
                        del old_dirs[0], old_stps[0], ro[0]
                    old_dirs.append(y)
                    old_stps.append(s)
                    ro.append(1.0 / ys)
                    H_diag = ys / y.dot(y)
                al = [None] * len(old_dirs)
                q = -flat_grad
                for i in range(len(old_dirs) - 1, -1, -1):
                    al[i] = old_stps[i].dot(q) * ro[i]
                    q = q - al[i] * old_dirs[i]
                d = r = q * H_diag
                for i in range(len(old_dirs)):
                    be_i = old_dirs[i].dot(r) * ro[i]
                    r += (al[i] - be_i) * old_stps[i]  # (d is r)

            prev_flat_grad = flat_grad.copy()
            prev_loss = loss

            # the step length
            if state["n_iter"] == 1:
                t = min(1.0, 1.0 / np.abs(flat_grad).sum()) * lr
            else:
                t = lr
            gtd = flat_grad.dot(d)
            if gtd > -tolerance_change:
                break  # not a descent direction

            ls_func_evals = 0
            if line_search_fn is not None:

                def obj_func(x0, step, direction):
                    self._add_grad(x0, step, direction)
                    value, grad = self._evaluate(closure)
                    self._set(x0)
                    return float(value), grad

                loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                    obj_func, x, t, d, loss, flat_grad, gtd
                )
                x = self._add_grad(x, t, d)
                opt_cond = np.abs(flat_grad).max() <= tolerance_grad
            else:
                x = self._add_grad(x, t, d)
                opt_cond = False
                if n_iter != max_iter:
                    value, flat_grad = self._evaluate(closure)
                    loss = float(value)
                    opt_cond = np.abs(flat_grad).max() <= tolerance_grad
                    ls_func_evals = 1
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals

            # the stopping tests
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if np.abs(d * t).max() <= tolerance_change:
                break
            if abs(loss - prev_loss) < tolerance_change:
                break

        state.update(
            d=d,
            t=t,
            old_dirs=old_dirs,
            old_stps=old_stps,
            ro=ro,
            H_diag=H_diag,
            prev_flat_grad=prev_flat_grad,
            prev_loss=prev_loss,
        )
        return orig_loss
