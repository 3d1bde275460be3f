"""In-place operators with PyTorch's rules: the SGD idiom trains, leaves are guarded,
graphs that outlived an update of a leaf raise at backward()."""

from __future__ import annotations

import numpy as np
import pytest

import fusegrad as fg


def test_hand_written_sgd_trains():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], np.float32)
    w = fg.zeros(3, requires_grad=True)
    xt, yt = fg.tensor(x), fg.tensor(y)
    ident = id(w)
    for _ in range(200):
        loss = ((xt @ w - yt) ** 2).mean()
        loss.backward()
        with fg.no_grad():
            w -= 0.1 * w.grad
        w.grad = None
    assert id(w) == ident and w.is_leaf and w.requires_grad
    np.testing.assert_allclose(w.numpy(), [1.0, -2.0, 0.5], atol=1e-4)
    assert w._version == 200


@pytest.mark.parametrize(
    "update, want",
    [
        (lambda t: t.__iadd__(2), [3.0, 4.0]),
        (lambda t: t.__isub__(2), [-1.0, 0.0]),
        (lambda t: t.__imul__(fg.tensor([2.0, 3.0])), [2.0, 6.0]),
        (lambda t: t.__itruediv__(4), [0.25, 0.5]),
        (lambda t: t.add_(fg.tensor([1.0, 1.0]), alpha=3), [4.0, 5.0]),
        (lambda t: t.sub_(1), [0.0, 1.0]),
        (lambda t: t.mul_(-1), [-1.0, -2.0]),
        (lambda t: t.div_(fg.tensor([2.0, 8.0])), [0.5, 0.25]),
        (lambda t: t.zero_(), [0.0, 0.0]),
        (lambda t: t.fill_(7), [7.0, 7.0]),
        (lambda t: t.copy_(fg.tensor([5, 6])), [5.0, 6.0]),
        (lambda t: t.copy_(fg.tensor(9.0)), [9.0, 9.0]),
    ],
)
def test_inplace_ops_change_the_tensor_itself(update, want):
    t = fg.tensor([1.0, 2.0])
    out = update(t)
    assert out is t and t.tolist() == want and t._version == 1 and t.dtype == fg.float32


def test_augmented_assignment_keeps_the_object():
    t = fg.tensor([1.0, 2.0])
    alias = t
    t += 1
    t *= 2
    assert alias is t and alias.tolist() == [4.0, 6.0]


def test_leaf_requiring_grad_is_refused_outside_no_grad():
    w = fg.ones(2, requires_grad=True)
    for update in (lambda: w.__isub__(1), lambda: w.zero_(), lambda: w.copy_(fg.zeros(2))):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            update()
    assert w.tolist() == [1.0, 1.0] and w._version == 0
    with fg.no_grad():
        w.zero_()
        w += 2
    assert w.tolist() == [2.0, 2.0] and w.requires_grad and w.is_leaf


def test_backward_after_the_leaf_was_updated_raises():
    w = fg.ones(3, requires_grad=True)
    loss = (w * w).sum()
    with fg.no_grad():
        w -= 0.5
    with pytest.raises(RuntimeError, match="modified by an inplace operation.*version 1"):
        loss.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        fg.grad(loss, [w])
    loss = (w * w).sum()  # built after the update: fine
    loss.backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0, 1.0])


def test_differentiable_update_of_a_non_leaf():
    x = fg.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    y += x * x  # y = 2x + x^2, still differentiable
    y *= 3
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * (2 + 2 * np.array([1.0, 2.0])))
    assert not y.is_leaf


def test_plain_tensor_plus_a_tensor_requiring_grad_becomes_differentiable():
    a = fg.zeros(2)
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    a += w * w
    assert a.requires_grad and not a.is_leaf
    a.sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), [2.0, 4.0])


def test_dtype_and_shape_rules():
    i = fg.tensor([1, 2])
    with pytest.raises(TypeError, match="can't be cast"):
        i /= 2
    with pytest.raises(TypeError, match="can't be cast"):
        i += 0.5
    i += 3  # int stays int
    assert i.dtype == fg.int64 and i.tolist() == [4, 5]
    f = fg.ones(2)
    f += fg.tensor([1, 2])  # ints into a float tensor are fine
    assert f.tolist() == [2.0, 3.0]
    with pytest.raises(ValueError, match="doesn't match the broadcast shape"):
        f += fg.ones(3, 2)
    with pytest.raises(ValueError):
        f.copy_(fg.ones(3))


# ---------------------------------------------------------------- every in-place variant

# dir(torch.Tensor) of PyTorch 2.13: every public name ending in "_"
TORCH_INPLACE = """
abs_ absolute_ acos_ acosh_ add_ addbmm_ addcdiv_ addcmul_ addmm_ addmv_ addr_ apply_
arccos_ arccosh_ arcsin_ arcsinh_ arctan2_ arctan_ arctanh_ as_strided_ asin_ asinh_ atan2_
atan_ atanh_ baddbmm_ bernoulli_ bitwise_and_ bitwise_left_shift_ bitwise_not_ bitwise_or_
bitwise_right_shift_ bitwise_xor_ cauchy_ ceil_ clamp_ clamp_max_ clamp_min_ clip_
conj_physical_ copy_ copysign_ cos_ cosh_ cumprod_ cumsum_ deg2rad_ detach_ digamma_ div_
divide_ eq_ erf_ erfc_ erfinv_ exp2_ exp_ expm1_ exponential_ fill_ fill_diagonal_ fix_
float_power_ floor_ floor_divide_ fmod_ frac_ gcd_ ge_ geometric_ greater_ greater_equal_
gt_ heaviside_ hypot_ i0_ igamma_ igammac_ index_add_ index_copy_ index_fill_ index_put_
index_reduce_ lcm_ ldexp_ le_ lerp_ less_ less_equal_ lgamma_ log10_ log1p_ log2_ log_
log_normal_ logical_and_ logical_not_ logical_or_ logical_xor_ logit_ lt_ map2_ map_
masked_fill_ masked_scatter_ mul_ multiply_ mvlgamma_ nan_to_num_ ne_ neg_ negative_
nextafter_ normal_ not_equal_ polygamma_ pow_ put_ rad2deg_ random_ reciprocal_ relu_
remainder_ renorm_ requires_grad_ resize_ resize_as_ resize_as_sparse_ round_ rsqrt_
scatter_ scatter_add_ scatter_reduce_ set_ sgn_ share_memory_ sigmoid_ sign_ sin_ sinc_
sinh_ sparse_resize_ sparse_resize_and_clear_ sqrt_ square_ squeeze_ sub_ subtract_
swapaxes_ swapdims_ t_ tan_ tanh_ transpose_ tril_ triu_ true_divide_ trunc_ uniform_
unsqueeze_ xlogy_ zero_
""".split()


def test_every_inplace_variant_of_an_op_we_have_exists():
    missing = [n for n in TORCH_INPLACE if hasattr(fg.Tensor, n[:-1]) and not hasattr(fg.Tensor, n)]
    assert missing == []
    asked = "clamp_ clamp_min_ clamp_max_ exp_ log_ abs_ neg_ relu_ sigmoid_ tanh_ sqrt_ rsqrt_"
    asked += " pow_ masked_fill_ floor_ ceil_ round_ sign_ reciprocal_ lerp_ addcmul_ addcdiv_"
    asked += " fmod_ remainder_ index_fill_ scatter_ scatter_add_ index_add_ index_copy_"
    asked += " masked_scatter_ unsqueeze_ squeeze_ t_ transpose_ sin_ normal_ uniform_"
    asked += " bernoulli_ exponential_ random_ detach_ eq_ lt_ cumsum_ tril_"
    assert [n for n in asked.split() if not hasattr(fg.Tensor, n)] == []


P = [0.5, 1.5, 2.0, 4.0, 0.25]  # "P": this tensor as an argument
X = [-2.5, -0.5, 0.0, 0.75, 3.0]
POSITIVE = [1.5, 2.0, 4.0, 8.0, 1.25]
SMALL = [-0.5, 0.0, 0.25, 0.5, 0.75]

# (method, data, args, kwargs, torch 2.13's values of the float32 tensor afterwards)
TORCH_VALUES = [
    ("abs_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [2.5, 0.5, 0.0, 0.75, 3.0]),
    ("absolute_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [2.5, 0.5, 0.0, 0.75, 3.0]),
    ("neg_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [2.5, 0.5, -0.0, -0.75, -3.0]),
    ("negative_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [2.5, 0.5, -0.0, -0.75, -3.0]),
    ("sign_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-1.0, -1.0, 0.0, 1.0, 1.0]),
    ("sgn_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-1.0, -1.0, 0.0, 1.0, 1.0]),
    (
        "exp_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [0.08208499848842621, 0.6065306663513184, 1.0, 2.117000102996826, 20.08553695678711],
    ),
    (
        "exp2_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [0.1767766922712326, 0.7071067690849304, 1.0, 1.6817928552627563, 8.0],
    ),
    (
        "expm1_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-0.9179149866104126, -0.39346933364868164, 0.0, 1.1169999837875366, 19.08553695678711],
    ),
    (
        "sin_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-0.5984721183776855, -0.4794255495071411, 0.0, 0.681638777256012, 0.14112000167369843],
    ),
    (
        "cos_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-0.8011435866355896, 0.8775825500488281, 1.0, 0.7316888570785522, -0.9899924993515015],
    ),
    (
        "tan_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [0.7470223307609558, -0.5463024973869324, 0.0, 0.9315964579582214, -0.14254654943943024],
    ),
    (
        "atan_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-1.1902899742126465, -0.46364760398864746, 0.0, 0.6435011029243469, 1.249045729637146],
    ),
    (
        "sinh_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-6.050204753875732, -0.5210952758789062, 0.0, 0.8223167061805725, 10.017874717712402],
    ),
    (
        "cosh_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [6.132289409637451, 1.1276259422302246, 1.0, 1.2946833372116089, 10.067662239074707],
    ),
    (
        "tanh_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-0.9866142868995667, -0.46211716532707214, 0.0, 0.6351489424705505, 0.9950547814369202],
    ),
    (
        "asinh_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-1.6472312211990356, -0.4812118411064148, 0.0, 0.6931471824645996, 1.8184465169906616],
    ),
    (
        "erf_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-0.9995930194854736, -0.5204998850822449, 0.0, 0.7111556529998779, 0.9999778866767883],
    ),
    (
        "erfc_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [1.9995930194854736, 1.5204999446868896, 1.0, 0.28884437680244446, 2.2090496713644825e-05],
    ),
    (
        "sigmoid_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [0.07585817575454712, 0.3775406777858734, 0.5, 0.6791787147521973, 0.9525741338729858],
    ),
    ("relu_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [0.0, 0.0, 0.0, 0.75, 3.0]),
    ("floor_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-3.0, -1.0, 0.0, 0.0, 3.0]),
    ("ceil_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-2.0, -0.0, 0.0, 1.0, 3.0]),
    ("round_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-2.0, -0.0, 0.0, 1.0, 3.0]),
    ("trunc_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-2.0, -0.0, 0.0, 0.0, 3.0]),
    ("fix_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-2.0, -0.0, 0.0, 0.0, 3.0]),
    ("frac_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-0.5, -0.5, 0.0, 0.75, 0.0]),
    ("square_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [6.25, 0.25, 0.0, 0.5625, 9.0]),
    ("logical_not_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [0.0, 0.0, 1.0, 0.0, 0.0]),
    (
        "reciprocal_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (),
        {},
        [-0.4000000059604645, -2.0, float("inf"), 1.3333333730697632, 0.3333333432674408],
    ),
    ("clamp_", [-2.5, -0.5, 0.0, 0.75, 3.0], (-1, 1), {}, [-1.0, -0.5, 0.0, 0.75, 1.0]),
    ("clip_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {"min": 0.0}, [0.0, 0.0, 0.0, 0.75, 3.0]),
    ("clamp_min_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.5,), {}, [0.5, 0.5, 0.5, 0.75, 3.0]),
    ("clamp_max_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.5,), {}, [-2.5, -0.5, 0.0, 0.5, 0.5]),
    ("fmod_", [-2.5, -0.5, 0.0, 0.75, 3.0], (1.5,), {}, [-1.0, -0.5, 0.0, 0.75, 0.0]),
    ("remainder_", [-2.5, -0.5, 0.0, 0.75, 3.0], (1.5,), {}, [0.5, 1.0, 0.0, 0.75, 0.0]),
    ("floor_divide_", [-2.5, -0.5, 0.0, 0.75, 3.0], (2.0,), {}, [-2.0, -1.0, 0.0, 0.0, 1.0]),
    ("divide_", [-2.5, -0.5, 0.0, 0.75, 3.0], (4.0,), {}, [-0.625, -0.125, 0.0, 0.1875, 0.75]),
    ("true_divide_", [-2.5, -0.5, 0.0, 0.75, 3.0], (2.0,), {}, [-1.25, -0.25, 0.0, 0.375, 1.5]),
    ("multiply_", [-2.5, -0.5, 0.0, 0.75, 3.0], (3.0,), {}, [-7.5, -1.5, 0.0, 2.25, 9.0]),
    (
        "subtract_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        (1.0,),
        {"alpha": 2},
        [-4.5, -2.5, -2.0, -1.25, 1.0],
    ),
    ("copysign_", [-2.5, -0.5, 0.0, 0.75, 3.0], (-1.0,), {}, [-2.5, -0.5, -0.0, -0.75, -3.0]),
    ("lerp_", [-2.5, -0.5, 0.0, 0.75, 3.0], ("P", 0.25), {}, [-1.75, 0.0, 0.5, 1.5625, 2.3125]),
    (
        "addcmul_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        ("P", "P"),
        {"value": 2},
        [-2.0, 4.0, 8.0, 32.75, 3.125],
    ),
    (
        "addcdiv_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        ("P", "P"),
        {"value": 0.5},
        [-2.0, 0.0, 0.5, 1.25, 3.5],
    ),
    (
        "atan2_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        ("P",),
        {},
        [-1.3734008073806763, -0.32175055146217346, 0.0, 0.18534794449806213, 1.4876550436019897],
    ),
    (
        "arctan2_",
        [-2.5, -0.5, 0.0, 0.75, 3.0],
        ("P",),
        {},
        [-1.3734008073806763, -0.32175055146217346, 0.0, 0.18534794449806213, 1.4876550436019897],
    ),
    ("eq_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.0,), {}, [0.0, 0.0, 1.0, 0.0, 0.0]),
    ("ne_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.0,), {}, [1.0, 1.0, 0.0, 1.0, 1.0]),
    ("lt_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.0,), {}, [1.0, 1.0, 0.0, 0.0, 0.0]),
    ("le_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.0,), {}, [1.0, 1.0, 1.0, 0.0, 0.0]),
    ("gt_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.0,), {}, [0.0, 0.0, 0.0, 1.0, 1.0]),
    ("ge_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0.0,), {}, [0.0, 0.0, 1.0, 1.0, 1.0]),
    ("logical_and_", [-2.5, -0.5, 0.0, 0.75, 3.0], ("P",), {}, [1.0, 1.0, 0.0, 1.0, 1.0]),
    ("logical_or_", [-2.5, -0.5, 0.0, 0.75, 3.0], ("P",), {}, [1.0, 1.0, 1.0, 1.0, 1.0]),
    ("logical_xor_", [-2.5, -0.5, 0.0, 0.75, 3.0], ("P",), {}, [0.0, 0.0, 1.0, 0.0, 0.0]),
    ("cumsum_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0,), {}, [-2.5, -3.0, -3.0, -2.25, 0.75]),
    ("cumprod_", [-2.5, -0.5, 0.0, 0.75, 3.0], (0,), {}, [-2.5, 1.25, 0.0, 0.0, 0.0]),
    ("nan_to_num_", [-2.5, -0.5, 0.0, 0.75, 3.0], (), {}, [-2.5, -0.5, 0.0, 0.75, 3.0]),
    ("pow_", [-2.5, -0.5, 0.0, 0.75, 3.0], (2,), {}, [6.25, 0.25, 0.0, 0.5625, 9.0]),
    (
        "log_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [
            0.40546512603759766,
            0.6931471824645996,
            1.3862943649291992,
            2.079441547393799,
            0.2231435477733612,
        ],
    ),
    (
        "log2_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [0.5849624872207642, 1.0, 2.0, 3.0, 0.32192808389663696],
    ),
    (
        "log10_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [
            0.1760912537574768,
            0.3010300099849701,
            0.6020600199699402,
            0.9030900001525879,
            0.0969100147485733,
        ],
    ),
    (
        "log1p_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [
            0.9162907600402832,
            1.0986123085021973,
            1.6094379425048828,
            2.1972246170043945,
            0.8109301924705505,
        ],
    ),
    (
        "sqrt_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [1.2247449159622192, 1.4142135381698608, 2.0, 2.8284270763397217, 1.1180340051651],
    ),
    (
        "rsqrt_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [0.8164965510368347, 0.7071067690849304, 0.5, 0.3535533845424652, 0.8944271802902222],
    ),
    (
        "acosh_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (),
        {},
        [
            0.9624236822128296,
            1.316957950592041,
            2.063436985015869,
            2.7686593532562256,
            0.6931471824645996,
        ],
    ),
    (
        "pow_",
        [1.5, 2.0, 4.0, 8.0, 1.25],
        (0.5,),
        {},
        [1.2247449159622192, 1.4142135381698608, 2.0, 2.8284270763397217, 1.1180340051651],
    ),
    (
        "asin_",
        [-0.5, 0.0, 0.25, 0.5, 0.75],
        (),
        {},
        [-0.5235987901687622, 0.0, 0.252680242061615, 0.5235987901687622, 0.8480620980262756],
    ),
    (
        "acos_",
        [-0.5, 0.0, 0.25, 0.5, 0.75],
        (),
        {},
        [
            2.094395160675049,
            1.5707963705062866,
            1.3181160688400269,
            1.0471975803375244,
            0.722734272480011,
        ],
    ),
    (
        "atanh_",
        [-0.5, 0.0, 0.25, 0.5, 0.75],
        (),
        {},
        [-0.5493061542510986, 0.0, 0.2554128170013428, 0.5493061542510986, 0.9729551076889038],
    ),
    (
        "arcsin_",
        [-0.5, 0.0, 0.25, 0.5, 0.75],
        (),
        {},
        [-0.5235987901687622, 0.0, 0.252680242061615, 0.5235987901687622, 0.8480620980262756],
    ),
]


@pytest.mark.parametrize("name, data, args, kwargs, want", TORCH_VALUES, ids=lambda v: str(v))
def test_inplace_variant_values_match_torch(name, data, args, kwargs, want):
    t = fg.tensor(data)
    args = [fg.tensor(P) if a == "P" else a for a in args]
    out = getattr(t, name)(*args, **kwargs)
    assert out is t and t._version == 1 and t.dtype == fg.float32
    np.testing.assert_allclose(t.numpy(), want, rtol=1e-6, atol=1e-7)


def test_generated_variants_follow_the_inplace_rules():
    i = fg.tensor([1, 4])
    with pytest.raises(TypeError, match="can't be cast"):
        i.sqrt_()  # float into an int tensor, as torch
    assert i.logical_not_().tolist() == [0, 0] and i.dtype == fg.int64
    w = fg.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.exp_()
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w.unsqueeze_(0)
    y = w * 1
    y.exp_()  # differentiable through a non-leaf, as torch
    y.sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), np.exp([1.0, 2.0]), rtol=1e-6)


def test_indexed_inplace_variants():
    m = fg.zeros(2, 3)
    mask = fg.tensor([[True, False, True], [False, True, False]])
    assert m.masked_scatter_(mask, fg.arange(6.0).reshape(2, 3)).tolist() == [
        [0.0, 0.0, 1.0],
        [0.0, 2.0, 0.0],
    ]
    t = fg.zeros(3, 2)
    t.index_fill_(0, fg.tensor([0, 2]), 7.0)
    assert t.tolist() == [[7.0, 7.0], [0.0, 0.0], [7.0, 7.0]]
    t = fg.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    assert t.tril_().tolist() == [[1.0, 0.0, 0.0], [4.0, 5.0, 0.0], [7.0, 8.0, 9.0]]


def test_view_variants_change_the_shape_in_place():
    t = fg.arange(6.0).reshape(2, 3)
    alias = t
    t.t_()
    assert alias is t and t.shape == (3, 2) and t.tolist() == [[0, 3], [1, 4], [2, 5]]
    t.unsqueeze_(0)
    assert t.shape == (1, 3, 2)
    t.squeeze_()
    t.transpose_(0, 1)
    assert t.shape == (2, 3) and t.tolist() == [[0, 1, 2], [3, 4, 5]] and t._version == 4
    w = fg.ones(2, 3, requires_grad=True)
    with fg.no_grad():
        w.t_()
    assert w.shape == (3, 2) and w.is_leaf and w._version == 1


def test_random_fills():
    fg.manual_seed(0)
    n = fg.zeros(20000).normal_(2.0, 3.0).numpy()
    assert abs(n.mean() - 2.0) < 0.1 and abs(n.std() - 3.0) < 0.1
    u = fg.zeros(20000).uniform_(-1.0, 3.0).numpy()
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean() - 1.0) < 0.05
    b = fg.zeros(20000).bernoulli_(0.25).numpy()
    assert set(np.unique(b)) <= {0.0, 1.0} and abs(b.mean() - 0.25) < 0.02
    e = fg.zeros(20000).exponential_(2.0).numpy()
    assert e.min() >= 0 and abs(e.mean() - 0.5) < 0.03
    r = fg.zeros(2000).random_(3, 6).numpy()
    assert set(np.unique(r)) == {3.0, 4.0, 5.0}
    k = fg.zeros(2000, dtype=fg.int32).random_(4)
    assert k.dtype == fg.int32 and set(np.unique(k.numpy())) == {0, 1, 2, 3}
    f = fg.zeros(2000).random_().numpy()  # [0, 2^24] for float32, as torch
    assert f.min() >= 0 and f.max() <= 2**24 and (f == np.round(f)).all() and f.max() > 2**20
    w = fg.zeros(3, requires_grad=True)
    with fg.no_grad():
        w.normal_()
    assert w.is_leaf and w.requires_grad and w._version == 1


def test_new_constructors_type_as_and_as_tensor():
    i = fg.ones(2, dtype=fg.int32)
    assert i.new_zeros(2, 3).dtype == fg.int32 and i.new_zeros((2, 3)).shape == (2, 3)
    assert i.new_ones(2).tolist() == [1, 1] and i.new_empty(4).shape == (4,)
    assert i.new_full((2,), 7).tolist() == [7, 7]
    assert i.new_tensor([1.5, 2.5]).dtype == fg.int32  # torch: self's dtype
    assert i.new_zeros(2, dtype=fg.float64).dtype == fg.float64
    assert i.new_ones(2, requires_grad=True, dtype=fg.float32).requires_grad
    assert i.type_as(fg.zeros(1, dtype=fg.float64)).dtype == fg.float64
    a = fg.tensor([1.0, 2.0])
    assert fg.as_tensor(a) is a  # the same tensor: updates of one are updates of the other
    assert fg.as_tensor(a, dtype=fg.float32) is a
    assert fg.as_tensor(a, dtype=fg.float64).dtype == fg.float64
    assert fg.as_tensor([1, 2]).dtype == fg.int64
    assert fg.as_tensor([1, 2], dtype=fg.float64).tolist() == [1.0, 2.0]
    assert fg.as_tensor(np.ones(2)).dtype == fg.float64


def test_inference_mode():
    w = fg.ones(2, requires_grad=True)
    assert not fg.is_inference_mode_enabled()
    with fg.inference_mode():
        assert fg.is_inference_mode_enabled() and not (w * 2).requires_grad
        with fg.inference_mode(False):  # changes nothing
            assert fg.is_inference_mode_enabled()
    assert not fg.is_inference_mode_enabled() and (w * 2).requires_grad

    @fg.inference_mode
    def bare(x):
        return (x * 2).requires_grad, fg.is_inference_mode_enabled()

    @fg.inference_mode()
    def called(x):
        return (x * 2).requires_grad

    assert bare(w) == (False, True) and called(w) is False
    assert (w * 2).requires_grad and bare.__name__ == "bare"


# ---------------------------------------------------------------- writes through detach()


def _detach_habits(lib):
    """Writes PyTorch users make through `detach()`, run on `lib` (torch or fusegrad):
    each lands in the tensor detached from, as torch's shared memory makes it."""
    x = lib.tensor([1.0, -0.0, 2.0, 3.0], requires_grad=True)
    d = x.detach()
    d[0] = 5.0  # an index write, under grad mode, to a leaf that requires grad
    d[1:3].mul_(-2.0)  # a view of the detached tensor
    ema = lib.tensor([0.0, 4.0])
    p = lib.tensor([2.0, -2.0], requires_grad=True)
    for _ in range(2):
        ema.detach().mul_(0.5).add_(p.detach(), alpha=0.5)  # one object, two writes
    y = x * 3  # a result with history: its value changes, its gradient still flows
    y.detach().add_(1.0)
    y.sum().backward()
    w = lib.tensor([1.0, 2.0], requires_grad=True)
    (w * w).sum().backward()
    w.grad.detach().zero_()  # torch's own zero_grad idiom
    w.detach().copy_(lib.tensor([7.0, -0.0]))
    own = w.detach().requires_grad_()  # a leaf of its own ...
    with lib.no_grad():
        own.add_(100.0)  # ... whose writes torch lands in w (shared memory); fusegrad not
    return [v.detach() for v in (x, d, ema, y, x.grad, w.grad)] + [w.detach()]


def test_writes_through_detach_land_in_the_tensor_as_torchs_do():
    torch = pytest.importorskip("torch")
    got, want = _detach_habits(fg), _detach_habits(torch)
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = g.numpy(), w.numpy()
        if i == len(got) - 1:  # the leaf of its own: torch's w moved with it, ours did not
            assert g.tolist() == [7.0, 0.0] and w.tolist() == [107.0, 100.0]
            assert np.signbit(g[1])
            continue
        np.testing.assert_array_equal(g, w, err_msg=str(i))
        np.testing.assert_array_equal(np.signbit(g), np.signbit(w), err_msg=str(i))


def test_a_detached_tensor_reads_the_value_it_was_detached_at():
    """fusegrad's difference from torch (README): a later write to the tensor is not
    seen through a detached tensor taken before it (`.data` sees it)."""
    x = fg.tensor([1.0, 2.0])
    d, data = x.detach(), x.data
    x.add_(1.0)
    assert d.tolist() == [1.0, 2.0] and data.tolist() == [2.0, 3.0]
    # ... and a write through it lands in x, as torch's (under grad mode, on a leaf too)
    w = fg.tensor([1.0, 2.0, 3.0], requires_grad=True)
    dw = w.detach()
    dw[0] = 5.0
    dw[1:].mul_(-0.0)
    assert w.tolist() == [5.0, -0.0, -0.0] and w.requires_grad and w.is_leaf
    assert np.signbit(w.detach().numpy()[1:]).all()


@pytest.mark.parametrize(
    "write, want",
    [
        (lambda p: p.detach().detach().copy_(fg.ones(4)), [1.0, 1.0, 1.0, 1.0]),
        (lambda p: p.detach().detach().detach().add_(1.0), [1.0, 1.0, 1.0, 1.0]),
        (lambda p: p[1:3].detach().fill_(1.0), [0.0, 1.0, 1.0, 0.0]),
        (lambda p: p[1:3].detach().detach().fill_(1.0), [0.0, 1.0, 1.0, 0.0]),
        (lambda p: p.detach().detach()[1:3].fill_(1.0), [0.0, 1.0, 1.0, 0.0]),
        (lambda p: p[1:3].data.fill_(1.0), [0.0, 1.0, 1.0, 0.0]),
        (lambda p: p.detach().data.fill_(1.0), [1.0, 1.0, 1.0, 1.0]),
        (lambda p: p.t()[0].data.fill_(2.0) if p.ndim == 2 else p.data.fill_(2.0), None),
    ],
    ids=[
        "detach-detach",
        "detach x3",
        "view-detach",
        "view-detach-detach",
        "detach-detach-view",
        "view-data",
        "detach-data",
        "transposed view-data",
    ],
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_writes_through_chains_of_detach_data_and_views_land_in_the_source(
    write, want, requires_grad
):
    """torch's detach(), .data and views share memory however they are chained: a write
    through any chain lands in the source. A temporary in the chain (the `p[1:3]` of
    `p[1:3].detach().fill_(1.0)`, the first detach of `p.detach().detach()`) used to take
    the write with it (the source unchanged: a silent wrong answer)."""
    p = fg.zeros(4, requires_grad=requires_grad)
    write(p)
    if want is None:  # (p is 1-D here: the transposed case is checked on its own below)
        want = [2.0, 2.0, 2.0, 2.0]
    assert p.tolist() == want
    assert p.requires_grad == requires_grad and p.is_leaf
    m = fg.zeros(2, 3)
    m.t()[0].data.fill_(5.0)
    assert m.tolist() == [[5.0, 0.0, 0.0], [5.0, 0.0, 0.0]]


def test_a_detached_tensor_does_not_keep_its_source_alive():
    """`losses.append(loss.detach())`: the link is weak, so each step's loss tensor (and
    the history it holds) is freed as in torch; a write after that lands nowhere else."""
    import gc
    import weakref

    x = fg.tensor([1.0, 2.0], requires_grad=True)
    loss = (x * x).sum()
    kept = [loss.detach()]
    alive = weakref.ref(loss)
    del loss
    gc.collect()
    assert alive() is None
    kept[0].add_(1.0)
    assert kept[0].item() == 6.0


def test_the_other_random_fills_draw_torchs_distributions_and_check_its_arguments():
    """cauchy_, log_normal_ and geometric_ (and Tensor.bernoulli) against their
    distributions on 200,000 draws (fixed seed, tolerant bounds), in the tensor's dtype,
    with torch's argument errors."""
    fg.manual_seed(3)
    x = fg.empty(200_000)
    c = x.clone().cauchy_(1.0, 2.0).numpy()
    assert abs(np.median(c) - 1.0) < 0.05 and abs(np.percentile(c, 75) - 3.0) < 0.1
    g = x.clone().geometric_(0.25).numpy()
    assert g.min() == 1.0 and abs(g.mean() - 4.0) < 0.05 and np.all(g == np.round(g))
    assert abs((g == 1).mean() - 0.25) < 0.01
    ints = fg.zeros(1000, dtype=fg.int64).geometric_(0.5)
    assert ints.dtype == fg.int64 and ints.min().item() >= 1
    ln = x.clone().log_normal_(0.5, 0.3).numpy()
    assert (
        ln.min() > 0 and abs(np.log(ln).mean() - 0.5) < 0.01 and abs(np.log(ln).std() - 0.3) < 0.01
    )
    probs = fg.full((100_000,), 0.3)
    b = probs.bernoulli()
    assert b.dtype == fg.float32 and set(np.unique(b.numpy())) <= {0.0, 1.0}
    assert abs(b.numpy().mean() - 0.3) < 0.01 and probs.numpy()[0] == np.float32(0.3)  # kept
    assert abs(fg.zeros(100_000).bernoulli(0.75).numpy().mean() - 0.75) < 0.01
    with pytest.raises(RuntimeError, match="cauchy_ expects sigma > 0.0"):
        x.cauchy_(0.0, 0.0)
    with pytest.raises(RuntimeError, match=r"geometric_ expects p to be in \(0, 1\)"):
        x.geometric_(1.0)
    with pytest.raises(RuntimeError, match="log_normal_ expects std > 0.0"):
        x.log_normal_(1.0, -1.0)
