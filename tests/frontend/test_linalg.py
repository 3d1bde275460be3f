"""fusegrad.linalg's inverses, determinants and products (inv, det, slogdet, logdet, solve,
matrix_power, multi_dot, vecdot, diagonal, vander) against torch 2.14.1's values and
gradients, written in below (its norms: test_linalg_norms.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import fusegrad as fg

# ---------------------------------------------------------------- inverses and determinants

# torch 2.14.1's [values, [grad A, grad S, grad B, grad R]] of each op's sum (float64)
LINALG_TORCH = json.loads(
    '{"det":[[14.592472824369066],[[5.316295792865363,0.2306415251425591,-3.1141383446278197,0.'
    "9098798433459565,6.342393003989575,-3.1325843359690784,-1.6259816169043448,-1.063068179869"
    '5412,7.716690530712086],null,null,null]],"slogdet":[[1.0,2.680505835792829],[[0.3643176764'
    "3844987,0.015805513425894032,-0.213407171088048,0.062352683763541424,0.4346345599080327,-0"
    ".21467124685939049,-0.11142605070944493,-0.07285044780719027,0.5288130821683221],null,null"
    ',null]],"inv":[[0.36431767643844987,0.06235268376354143,-0.11142605070944493,0.01580551342'
    "589403,0.4346345599080327,-0.07285044780719027,-0.213407171088048,-0.21467124685939049,0.5"
    "288130821683221],[[-0.05255627622047979,-0.06295023909904993,-0.016794082171672695,-0.0889"
    "9851147375674,-0.10659959151651975,-0.028439007143059365,-0.10861319740819697,-0.130093439"
    '60130157,-0.03470677706596306],null,null,null]],"solve":[[0.2160698147913062,0.42584133416'
    "992614,-0.0008998448499808143,0.5847820421951526,-0.412015857470619,-0.3299371224258493],["
    "[-0.10701687116293448,-0.09734251537574258,0.1236954469275483,-0.18122178588384438,-0.1648"
    "392845643903,0.2094651951072415,-0.2211618742710321,-0.20116877752834555,0.255629944923717"
    "93],null,[0.1667160187762959,0.1667160187762959,0.2823159968121836,0.2823159968121836,0.34"
    '453658365168693,0.34453658365168693],null]],"matrix_power":[[37.55783045808962,1.519043289'
    "294382,14.599078387470296,6.310606303019216,17.32966175524712,7.099347286628691,31.2765459"
    "87573126,15.848245118536482,20.971448990670712],[[49.18215646745416,41.35723668008886,57.3"
    "9596163826792,36.407248465769584,29.465100153710406,43.474569347563296,37.53380833591565,3"
    '0.57831586003224,44.61845972124574],null,null,null]],"matrix_power_neg":[[0.15749200381329'
    "226,0.07373678537350065,-0.10406045413283731,0.028174658277252355,0.20553161331184894,-0.0"
    "719487381045265,-0.193993497880383,-0.2201310164599959,0.31906129060481114],[[-0.018576010"
    "935780124,-0.023823445181913983,0.016687363200545948,-0.0545443784985316,-0.06799640131668"
    "068,0.020880684427713406,-0.08891050367946868,-0.10974637622007705,0.018342453241630845],n"
    'ull,null,null]],"multi_dot":[[1.5716623593037298,0.750100205349718,-0.8185583112978043,-3.'
    "93220594587016,-0.6013970537222387,-4.639866891506457,-0.03102691843002079,3.7899906924559"
    "16],[[-0.7082084978225969,-0.6029057356281786,0.15277312023301262,-0.5209179426931678,-0.4"
    "434632123265111,0.11237122928526608,-0.47573252421940787,-0.404996365277447,0.102623933975"
    "34747],null,[-1.9865078546846167,-1.9865078546846167,-1.1283019955099283,-1.12830199550992"
    "83,-1.1926755948579295,-1.1926755948579295],[4.180834411228705,3.0897789391179495,2.348319"
    "6243608617,4.180834411228705,3.0897789391179495,2.3483196243608617,4.180834411228705,3.089"
    "7789391179495,2.3483196243608617,4.180834411228705,3.0897789391179495,2.3483196243608617]]"
    '],"vecdot":[[1.3778878150539078,1.1075764931215626,1.0884359014372338,0.46488224767969805]'
    ",[null,null,null,[1.8069403633036172,0.18802459552174913,-1.4869984987076168,-1.8434507525"
    "168389,-0.9154516513346783,0.4403902469400988,-2.019236367077472,-0.41835114974342613,-0.3"
    '1845001982895543,1.0816911693716154,0.4293182450126818,0.7107454180798428]]],"diagonal":[['
    "3.1257302210933933,2.464330626838889,2.2962647641930074],[[1.0,0.0,0.0,0.0,1.0,0.0,0.0,0.0"
    ',1.0],null,null,null]],"vander":[[1.0,3.1257302210933933,9.770189415056553,1.0,-0.13210486'
    "32913019,0.01745169490521356,1.0,0.6404226504432821,0.41014117120079824],[[7.2514604421867"
    "865,0.7357902734173962,2.280845300886564,0.0,0.0,0.0,0.0,0.0,0.0],null,null,null]]}"
)


def _linalg_inputs():
    """The sweep's inputs, as it drew them (numpy's default_rng(0))."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 3)) + 3 * np.eye(3)
    m = rng.standard_normal((3, 3))
    s = m @ m.T + np.eye(3)
    b, r = rng.standard_normal((3, 2)), rng.standard_normal((4, 3))
    return [fg.tensor(v, requires_grad=True) for v in (a, s, b, r)]


LINALG_OPS = {
    "det": lambda a, s, b, r: fg.linalg.det(a),
    "slogdet": lambda a, s, b, r: fg.stack(list(fg.linalg.slogdet(a))),
    "inv": lambda a, s, b, r: fg.linalg.inv(a),
    "solve": lambda a, s, b, r: fg.linalg.solve(a, b),
    "matrix_power": lambda a, s, b, r: fg.linalg.matrix_power(a, 3),
    "matrix_power_neg": lambda a, s, b, r: fg.linalg.matrix_power(a, -2),
    "multi_dot": lambda a, s, b, r: fg.linalg.multi_dot([r, a, b]),
    "vecdot": lambda a, s, b, r: fg.linalg.vecdot(r, r),
    "diagonal": lambda a, s, b, r: fg.linalg.diagonal(a),
    "vander": lambda a, s, b, r: fg.linalg.vander(a[0]),
}


@pytest.mark.parametrize("name", list(LINALG_OPS))
def test_inverses_determinants_and_products_as_torchs(name):
    inputs = _linalg_inputs()
    out = LINALG_OPS[name](*inputs)
    want, want_grads = LINALG_TORCH[name]
    np.testing.assert_allclose(out.detach().numpy().reshape(-1), want, rtol=1e-9, atol=1e-12)
    out.sum().backward()
    for x, g in zip(inputs, want_grads):
        if g is None:
            assert x.grad is None or not np.any(x.grad.numpy())
        else:
            np.testing.assert_allclose(x.grad.numpy().reshape(-1), g, rtol=1e-8, atol=1e-12)


def test_torch_level_forms_and_a_singular_matrix():
    a = fg.tensor([[2.0, 1.0], [1.0, 3.0]], dtype=fg.float64)
    assert fg.det(a).item() == pytest.approx(5.0)
    assert fg.logdet(a).item() == pytest.approx(np.log(5.0))
    np.testing.assert_allclose(fg.inverse(a).numpy(), np.linalg.inv(a.numpy()))
    sign, logabs = fg.slogdet(-a)
    assert sign.item() == 1.0 and logabs.item() == pytest.approx(np.log(5.0))
    assert fg.linalg.slogdet(a).logabsdet.item() == pytest.approx(np.log(5.0))
    assert np.isnan(fg.logdet(fg.tensor([[0.0, 1.0], [1.0, 0.0]])).item())  # det -1
    with pytest.raises(RuntimeError, match="input matrix is singular"):
        fg.linalg.inv(fg.tensor([[1.0, 2.0], [2.0, 4.0]]))
    with pytest.raises(RuntimeError, match="square matrices"):
        fg.linalg.det(fg.ones(2, 3))
