"""torch's deprecated overloads that old programs still use, number first:
`add(alpha, other)`, `sub(alpha, other)` and their in-place forms (the classic
hand-written SGD `p.data.add_(-lr, p.grad.data)`), `addcmul(value, t1, t2)` and
`addcdiv(value, t1, t2)` (old optimizers' `exp_avg_sq.mul_(b2).addcmul_(1 - b2, g, g)`).
Values as torch 2.14 gives them, with its UserWarning."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg
from fusegrad import nn

A, B = [1.0, 1.0, 1.0], [0.0, 1.0, 2.0]

CASES = {  # torch 2.14's values
    "add_": (lambda a, b: a.clone().add_(2, b), [1.0, 3.0, 5.0]),
    "sub_": (lambda a, b: a.clone().sub_(2, b), [1.0, -1.0, -3.0]),
    "fg.add": (lambda a, b: fg.add(a, 2, b), [1.0, 3.0, 5.0]),
    "add": (lambda a, b: a.add(2, b), [1.0, 3.0, 5.0]),
    "sub": (lambda a, b: a.sub(2, b), [1.0, -1.0, -3.0]),
    "fg.sub": (lambda a, b: fg.sub(a, 2, b), [1.0, -1.0, -3.0]),
    "addcmul_": (lambda a, b: a.clone().addcmul_(0.5, b, b), [1.0, 1.5, 3.0]),
    "addcdiv_": (lambda a, b: a.clone().addcdiv_(0.5, b, b + 1), [1.0, 1.25, 1.3333333730697632]),
    "fg.addcmul": (lambda a, b: fg.addcmul(a, 0.5, b, b), [1.0, 1.5, 3.0]),
    "addcdiv": (lambda a, b: a.addcdiv(0.5, b, b + 1), [1.0, 1.25, 1.3333333730697632]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_number_first_overloads_give_torchs_values_and_warning(name):
    fn, want = CASES[name]
    with pytest.warns(UserWarning, match="This overload of .* is deprecated"):
        got = fn(fg.tensor(A), fg.tensor(B))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-7)


def test_the_usual_forms_do_not_warn(recwarn):
    a, b = fg.tensor(A), fg.tensor(B)
    assert a.add(b, alpha=2).tolist() == [1.0, 3.0, 5.0]
    assert a.clone().addcmul_(b, b, value=0.5).tolist() == [1.0, 1.5, 3.0]
    assert a.add(2).tolist() == [3.0, 3.0, 3.0] and (a + 2 * b).tolist() == [1.0, 3.0, 5.0]
    assert not [w for w in recwarn if "deprecated" in str(w.message)]


def test_a_wrong_positional_call_still_raises():
    a, b = fg.tensor(A), fg.tensor(B)
    with pytest.raises(TypeError, match="positional"):
        a.addcmul(b, b, b)


def test_the_old_hand_written_sgd_trains_as_the_new_spelling():
    def losses(old: bool) -> list[float]:
        fg.manual_seed(0)
        m = nn.Linear(3, 1)
        x, y = fg.tensor(np.eye(3, dtype=np.float32)), fg.tensor([[1.0], [2.0], [3.0]])
        out = []
        for _ in range(4):
            m.zero_grad()
            loss = ((m(x) - y) ** 2).mean()
            loss.backward()
            for p in m.parameters():
                if old:
                    p.data.add_(-0.1, p.grad.data)
                else:
                    p.data.add_(p.grad.data, alpha=-0.1)
            out.append(loss.item())
        return out

    with pytest.warns(UserWarning, match="deprecated"):
        old = losses(True)
    assert old == losses(False)
