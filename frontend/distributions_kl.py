"""torch's KL pairs across families and for the families added after the first ones
(torch.distributions.kl's formulas, term by term), registered with `register_kl` when
distributions.py imports this module.

>>> import fusegrad as fg
>>> from fusegrad.distributions import Exponential, Gamma, Normal, kl_divergence
>>> kl_divergence(Exponential(fg.tensor(1.0)), Gamma(fg.tensor(1.0), fg.tensor(1.0))).item()
0.0
>>> kl_divergence(Normal(0.0, 1.0), Exponential(fg.tensor(1.0))).item()  # support left
inf

Where p's support is not inside q's, the answer is inf, as torch's (`_infinite_like`).
Two of one exponential family without a pair of their own (Wishart's) take the Bregman
divergence of its log normalizer, through autograd, as torch's.
"""

from __future__ import annotations

import math

from .autograd import grad as _grad
from .autograd_state import enable_grad
from .distribution import ExponentialFamily, _sum_rightmost, kl_divergence, register_kl
from .distribution_transforms_matrix import _diag_matrix
from .distributions_basic import Bernoulli, Normal, Uniform
from .distributions_bounded import ContinuousBernoulli
from .distributions_categorical import Binomial, Geometric, OneHotCategorical
from .distributions_gamma import Beta, Exponential, Gamma, Laplace, Poisson
from .distributions_location import Cauchy, Gumbel, HalfNormal
from .distributions_mvn import (
    LowRankMultivariateNormal,
    MultivariateNormal,
    _batch_lowrank_logdet,
    _batch_lowrank_mahalanobis,
    _batch_mahalanobis,
    _TrilInverse,
)
from .distributions_tails import Pareto
from .distributions_transformed import TransformedDistribution
from .tensor import Tensor, where

_EULER = 0.57721566490153286060


def _infinite_like(t: Tensor) -> Tensor:
    return t.new_full(tuple(t.shape), math.inf)


def _x_log_x(t: Tensor) -> Tensor:
    return t.xlogy(t)


def _batch_trace_xxt(bmat: Tensor) -> Tensor:
    """trace(X X^T) of each matrix: the sum of its squared entries."""
    return bmat.pow(2).flatten(-2).sum(-1)


# ------------------------------------------------------------ same family
@register_kl(Binomial, Binomial)
def _kl_binomial_binomial(p, q):
    if bool((p.total_count < q.total_count).any()):
        raise NotImplementedError(
            "KL between Binomials where q.total_count > p.total_count is not implemented"
        )
    kl = p.total_count * (p.probs * (p.logits - q.logits) + (-p.probs).log1p() - (-q.probs).log1p())
    return where(p.total_count > q.total_count, math.inf, kl)


@register_kl(ContinuousBernoulli, ContinuousBernoulli)
def _kl_continuous_bernoulli_continuous_bernoulli(p, q):
    t1 = p.mean * (p.logits - q.logits)
    t2 = p._cont_bern_log_norm() + (-p.probs).log1p()
    t3 = -q._cont_bern_log_norm() - (-q.probs).log1p()
    return t1 + t2 + t3


@register_kl(Gumbel, Gumbel)
def _kl_gumbel_gumbel(p, q):
    ct1 = p.scale / q.scale
    ct2 = q.loc / q.scale
    ct3 = p.loc / q.scale
    t1 = -ct1.log() - ct2 + ct3
    t2 = ct1 * _EULER
    t3 = (ct2 + (1 + ct1).lgamma() - ct3).exp()
    return t1 + t2 + t3 - (1 + _EULER)


@register_kl(Geometric, Geometric)
def _kl_geometric_geometric(p, q):
    return -p.entropy() - (-q.probs).log1p() / p.probs - q.logits


@register_kl(HalfNormal, HalfNormal)
def _kl_halfnormal_halfnormal(p, q):
    """Normal(0, scale)'s pair, as torch's (of its base distributions)."""
    var_ratio = (p.scale / q.scale).pow(2)
    return 0.5 * (var_ratio - 1 - var_ratio.log())


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return kl_divergence(p._categorical, q._categorical)


@register_kl(Pareto, Pareto)
def _kl_pareto_pareto(p, q):
    scale_ratio = p.scale / q.scale
    alpha_ratio = q.alpha / p.alpha
    result = q.alpha * scale_ratio.log() - alpha_ratio.log() + alpha_ratio - 1
    return where(p.scale < q.scale, math.inf, result)


@register_kl(Cauchy, Cauchy)
def _kl_cauchy_cauchy(p, q):
    t1 = ((p.scale + q.scale).pow(2) + (p.loc - q.loc).pow(2)).log()
    return t1 - (4 * p.scale * q.scale).log()


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    """The Bregman divergence of the log normalizer F between q's and p's natural
    parameters (one family only): F(t_q) - F(t_p) - <t_q - t_p, grad F(t_p)>."""
    if type(p) is not type(q):
        raise NotImplementedError(
            "The cross KL-divergence between different exponential families cannot "
            "be computed using Bregman divergences"
        )
    p_nparams = [nparam.detach().requires_grad_() for nparam in p._natural_params]
    q_nparams = q._natural_params
    with enable_grad():
        lg_normal = p._log_normalizer(*p_nparams)
        gradients = _grad(lg_normal.sum(), p_nparams, create_graph=True)
    result = q._log_normalizer(*q_nparams) - lg_normal
    for pnp, qnp, g in zip(p_nparams, q_nparams, gradients):
        result = result - _sum_rightmost((qnp - pnp) * g, len(q.event_shape))
    return result


@register_kl(TransformedDistribution, TransformedDistribution)
def _kl_transformed_transformed(p, q):
    if p.transforms != q.transforms:
        raise NotImplementedError
    if p.event_shape != q.event_shape:
        raise NotImplementedError
    return kl_divergence(p.base_dist, q.base_dist)


# ------------------------------------------------------------ (low rank) multivariate normals
def _lowrank_a(q) -> Tensor:
    """L^-1 W^T D^-1 of q's capacitance factor L (torch's triangular solve)."""
    qwt_qdinv = q._unbroadcasted_cov_factor.mT / q._unbroadcasted_cov_diag.unsqueeze(-2)
    return _TrilInverse.apply(q._capacitance_tril) @ qwt_qdinv


def _same_event_shape(p, q, what: str) -> None:
    if p.event_shape != q.event_shape:
        raise ValueError(
            f"KL-divergence between two {what} with different event shapes cannot be computed"
        )


@register_kl(LowRankMultivariateNormal, LowRankMultivariateNormal)
def _kl_lowrank_lowrank(p, q):
    _same_event_shape(p, q, "Low Rank Multivariate Normals")
    term1 = _batch_lowrank_logdet(q._unbroadcasted_cov_diag, q._capacitance_tril)
    term1 = term1 - _batch_lowrank_logdet(p._unbroadcasted_cov_diag, p._capacitance_tril)
    term3 = _batch_lowrank_mahalanobis(
        q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q.loc - p.loc, q._capacitance_tril
    )
    a = _lowrank_a(q)
    p_w, p_d, q_d = (
        p._unbroadcasted_cov_factor,
        p._unbroadcasted_cov_diag,
        q._unbroadcasted_cov_diag,
    )
    term21 = (p_d / q_d).sum(-1)
    term22 = _batch_trace_xxt(p_w * q_d.rsqrt().unsqueeze(-1))
    term23 = _batch_trace_xxt(a * p_d.sqrt().unsqueeze(-2))
    term24 = _batch_trace_xxt(a @ p_w)
    term2 = term21 + term22 - term23 - term24
    return 0.5 * (term1 + term2 + term3 - p.event_shape[0])


@register_kl(MultivariateNormal, LowRankMultivariateNormal)
def _kl_multivariatenormal_lowrank(p, q):
    _same_event_shape(p, q, "(Low Rank) Multivariate Normals")
    term1 = _batch_lowrank_logdet(q._unbroadcasted_cov_diag, q._capacitance_tril)
    term1 = term1 - 2 * p._half_log_det()
    term3 = _batch_lowrank_mahalanobis(
        q._unbroadcasted_cov_factor, q._unbroadcasted_cov_diag, q.loc - p.loc, q._capacitance_tril
    )
    p_l = p._unbroadcasted_scale_tril
    term21 = _batch_trace_xxt(p_l * q._unbroadcasted_cov_diag.rsqrt().unsqueeze(-1))
    term22 = _batch_trace_xxt(_lowrank_a(q) @ p_l)
    return 0.5 * (term1 + term21 - term22 + term3 - p.event_shape[0])


@register_kl(LowRankMultivariateNormal, MultivariateNormal)
def _kl_lowrank_multivariatenormal(p, q):
    _same_event_shape(p, q, "(Low Rank) Multivariate Normals")
    term1 = 2 * q._half_log_det()
    term1 = term1 - _batch_lowrank_logdet(p._unbroadcasted_cov_diag, p._capacitance_tril)
    term3 = _batch_mahalanobis(q._unbroadcasted_scale_tril, q.loc - p.loc)
    q_inv = _TrilInverse.apply(q._unbroadcasted_scale_tril)
    term21 = _batch_trace_xxt(q_inv @ p._unbroadcasted_cov_factor)
    term22 = _batch_trace_xxt(q_inv @ _diag_matrix(p._unbroadcasted_cov_diag.sqrt()))
    return 0.5 * (term1 + term21 + term22 + term3 - p.event_shape[0])


# ------------------------------------------------------------ across families
def _infinite(p_param: str):
    """A KL function answering inf of the shape of p's `p_param` (q's support is narrower
    than p's)."""

    def kl(p, q):
        return _infinite_like(getattr(p, p_param))

    return kl


_INFINITE_PAIRS = [
    ([(Beta, Pareto)], "concentration1"),
    ([(ContinuousBernoulli, Pareto)], "probs"),
    ([(Exponential, t) for t in (Beta, ContinuousBernoulli, Pareto, Uniform)], "rate"),
    ([(Gamma, t) for t in (Beta, ContinuousBernoulli, Pareto, Uniform)], "concentration"),
    (
        [(Gumbel, t) for t in (Beta, ContinuousBernoulli, Exponential, Gamma, Pareto, Uniform)],
        "loc",
    ),
    (
        [(Laplace, t) for t in (Beta, ContinuousBernoulli, Exponential, Gamma, Pareto, Uniform)],
        "loc",
    ),
    ([(Normal, t) for t in (Beta, ContinuousBernoulli, Exponential, Gamma, Pareto)], "loc"),
    ([(Pareto, t) for t in (Beta, ContinuousBernoulli, Uniform)], "scale"),
    ([(Poisson, Bernoulli), (Poisson, Binomial)], "rate"),
]  # (pairs, the parameter of p whose shape the inf takes)
for pairs, param in _INFINITE_PAIRS:
    for p_type, q_type in pairs:
        register_kl(p_type, q_type)(_infinite(param))


@register_kl(Bernoulli, Poisson)
def _kl_bernoulli_poisson(p, q):
    return -p.entropy() - (p.probs * q.rate.log() - q.rate)


@register_kl(Beta, ContinuousBernoulli)
def _kl_beta_continuous_bernoulli(p, q):
    return -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()


@register_kl(Beta, Exponential)
def _kl_beta_exponential(p, q):
    mean = p.concentration1 / (p.concentration1 + p.concentration0)
    return -p.entropy() - q.rate.log() + q.rate * mean


@register_kl(Beta, Gamma)
def _kl_beta_gamma(p, q):
    total = p.concentration1 + p.concentration0
    t1 = -p.entropy()
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (q.concentration - 1) * (p.concentration1.digamma() - total.digamma())
    t4 = q.rate * p.concentration1 / total
    return t1 + t2 - t3 + t4


@register_kl(Beta, Normal)
def _kl_beta_normal(p, q):
    total = p.concentration1 + p.concentration0
    e_beta = p.concentration1 / total
    var_normal = q.scale.pow(2)
    t1 = -p.entropy()
    t2 = 0.5 * (var_normal * 2 * math.pi).log()
    t3 = (e_beta * (1 - e_beta) / (total + 1) + e_beta.pow(2)) * 0.5
    t4 = q.loc * e_beta
    t5 = q.loc.pow(2) * 0.5
    return t1 + t2 + (t3 - t4 + t5) / var_normal


@register_kl(Beta, Uniform)
def _kl_beta_uniform(p, q):
    result = -p.entropy() + (q.high - q.low).log()
    return where((q.low > 0.0) | (q.high < 1.0), math.inf, result)


@register_kl(ContinuousBernoulli, Exponential)
def _kl_continuous_bernoulli_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.mean


@register_kl(ContinuousBernoulli, Normal)
def _kl_continuous_bernoulli_normal(p, q):
    t1 = -p.entropy()
    t2 = 0.5 * (math.log(2.0 * math.pi) + (q.loc / q.scale).square()) + q.scale.log()
    t3 = (p.variance + p.mean.square() - 2.0 * q.loc * p.mean) / (2.0 * q.scale.square())
    return t1 + t2 + t3


@register_kl(ContinuousBernoulli, Uniform)
def _kl_continuous_bernoulli_uniform(p, q):
    """inf where q.low >= 0 or q.high <= 1 (torch's test, as it is)."""
    result = -p.entropy() + (q.high - q.low).log()
    return where((q.low >= 0.0) | (q.high <= 1.0), math.inf, result)


@register_kl(Exponential, Gamma)
def _kl_exponential_gamma(p, q):
    ratio = q.rate / p.rate
    t1 = -q.concentration * ratio.log()
    return t1 + ratio + q.concentration.lgamma() + q.concentration * _EULER - (1 + _EULER)


@register_kl(Exponential, Gumbel)
def _kl_exponential_gumbel(p, q):
    scale_rate_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = scale_rate_prod.log() - 1
    t2 = loc_scale_ratio.exp() * scale_rate_prod / (scale_rate_prod + 1)
    t3 = scale_rate_prod.reciprocal()
    return t1 - loc_scale_ratio + t2 + t3


@register_kl(Exponential, Normal)
def _kl_exponential_normal(p, q):
    var_normal = q.scale.pow(2)
    rate_sqr = p.rate.pow(2)
    t1 = 0.5 * (rate_sqr * var_normal * 2 * math.pi).log()
    t2 = rate_sqr.reciprocal()
    t3 = q.loc / p.rate
    t4 = q.loc.pow(2) * 0.5
    return t1 - 1 + (t2 - t3 + t4) / var_normal


@register_kl(Gamma, Exponential)
def _kl_gamma_exponential(p, q):
    return -p.entropy() - q.rate.log() + q.rate * p.concentration / p.rate


@register_kl(Gamma, Gumbel)
def _kl_gamma_gumbel(p, q):
    a = p.concentration
    beta_scale_prod = p.rate * q.scale
    loc_scale_ratio = q.loc / q.scale
    t1 = (a - 1) * a.digamma() - a.lgamma() - a
    t2 = beta_scale_prod.log() + a / beta_scale_prod
    t3 = loc_scale_ratio.exp() * (1 + beta_scale_prod.reciprocal()).pow(-a) - loc_scale_ratio
    return t1 + t2 + t3


@register_kl(Gamma, Normal)
def _kl_gamma_normal(p, q):
    a = p.concentration
    var_normal = q.scale.pow(2)
    beta_sqr = p.rate.pow(2)
    t1 = 0.5 * (beta_sqr * var_normal * 2 * math.pi).log() - a - a.lgamma()
    t2 = 0.5 * (a.pow(2) + a) / beta_sqr
    t3 = q.loc * a / p.rate
    t4 = 0.5 * q.loc.pow(2)
    return t1 + (a - 1) * a.digamma() + (t2 - t3 + t4) / var_normal


@register_kl(Gumbel, Normal)
def _kl_gumbel_normal(p, q):
    param_ratio = p.scale / q.scale
    t1 = (param_ratio / math.sqrt(2 * math.pi)).log()
    t2 = (math.pi * param_ratio * 0.5).pow(2) / 3
    t3 = ((p.loc + p.scale * _EULER - q.loc) / q.scale).pow(2) * 0.5
    return -t1 + t2 + t3 - (_EULER + 1)


@register_kl(Laplace, Normal)
def _kl_laplace_normal(p, q):
    var_normal = q.scale.pow(2)
    scale_sqr_var_ratio = p.scale.pow(2) / var_normal
    t1 = 0.5 * (2 * scale_sqr_var_ratio / math.pi).log()
    t2 = 0.5 * p.loc.pow(2)
    t3 = p.loc * q.loc
    t4 = 0.5 * q.loc.pow(2)
    return -t1 + scale_sqr_var_ratio + (t2 - t3 + t4) / var_normal - 1


@register_kl(Normal, Gumbel)
def _kl_normal_gumbel(p, q):
    mean_scale_ratio = p.loc / q.scale
    var_scale_sqr_ratio = (p.scale / q.scale).pow(2)
    loc_scale_ratio = q.loc / q.scale
    t1 = var_scale_sqr_ratio.log() * 0.5
    t2 = mean_scale_ratio - loc_scale_ratio
    t3 = (-mean_scale_ratio + 0.5 * var_scale_sqr_ratio + loc_scale_ratio).exp()
    return -t1 + t2 + t3 - 0.5 * (1 + math.log(2 * math.pi))


@register_kl(Normal, Laplace)
def _kl_normal_laplace(p, q):
    loc_diff = p.loc - q.loc
    scale_ratio = p.scale / q.scale
    loc_diff_scale_ratio = loc_diff / p.scale
    t1 = scale_ratio.log()
    t2 = math.sqrt(2 / math.pi) * p.scale * (-0.5 * loc_diff_scale_ratio.pow(2)).exp()
    t3 = loc_diff * (math.sqrt(0.5) * loc_diff_scale_ratio).erf()
    return -t1 + (t2 + t3) / q.scale - 0.5 * (1 + math.log(0.5 * math.pi))


@register_kl(Pareto, Exponential)
def _kl_pareto_exponential(p, q):
    scale_rate_prod = p.scale * q.rate
    t1 = (p.alpha / scale_rate_prod).log()
    t2 = p.alpha.reciprocal()
    t3 = p.alpha * scale_rate_prod / (p.alpha - 1)
    return where(p.alpha <= 1, math.inf, t1 - t2 + t3 - 1)


@register_kl(Pareto, Gamma)
def _kl_pareto_gamma(p, q):
    common_term = p.scale.log() + p.alpha.reciprocal()
    t1 = p.alpha.log() - common_term
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * common_term
    t4 = q.rate * p.alpha * p.scale / (p.alpha - 1)
    return where(p.alpha <= 1, math.inf, t1 + t2 + t3 + t4 - 1)


@register_kl(Pareto, Normal)
def _kl_pareto_normal(p, q):
    var_normal = 2 * q.scale.pow(2)
    common_term = p.scale / (p.alpha - 1)
    t1 = (math.sqrt(2 * math.pi) * q.scale * p.alpha / p.scale).log()
    t2 = p.alpha.reciprocal()
    t3 = p.alpha * common_term.pow(2) / (p.alpha - 2)
    t4 = (p.alpha * common_term - q.loc).pow(2)
    return where(p.alpha <= 2, math.inf, t1 - t2 + (t3 + t4) / var_normal - 1)


@register_kl(Uniform, Beta)
def _kl_uniform_beta(p, q):
    common_term = p.high - p.low
    t1 = common_term.log()
    t2 = (q.concentration1 - 1) * (_x_log_x(p.high) - _x_log_x(p.low) - common_term) / common_term
    t3 = (
        (q.concentration0 - 1)
        * (_x_log_x(1 - p.high) - _x_log_x(1 - p.low) + common_term)
        / common_term
    )
    t4 = (
        q.concentration1.lgamma()
        + q.concentration0.lgamma()
        - (q.concentration1 + q.concentration0).lgamma()
    )
    result = t3 + t4 - t1 - t2
    return where((p.high > 1.0) | (p.low < 0.0), math.inf, result)


@register_kl(Uniform, ContinuousBernoulli)
def _kl_uniform_continuous_bernoulli(p, q):
    """inf where p.high >= 1 or p.low <= 0 (torch's test, as it is)."""
    result = -p.entropy() - p.mean * q.logits - (-q.probs).log1p() - q._cont_bern_log_norm()
    return where((p.high >= 1.0) | (p.low <= 0.0), math.inf, result)


@register_kl(Uniform, Exponential)
def _kl_uniform_exponential(p, q):
    result = q.rate * (p.high + p.low) / 2 - ((p.high - p.low) * q.rate).log()
    return where(p.low < 0.0, math.inf, result)


@register_kl(Uniform, Gamma)
def _kl_uniform_gamma(p, q):
    common_term = p.high - p.low
    t1 = common_term.log()
    t2 = q.concentration.lgamma() - q.concentration * q.rate.log()
    t3 = (1 - q.concentration) * (_x_log_x(p.high) - _x_log_x(p.low) - common_term) / common_term
    t4 = q.rate * (p.high + p.low) / 2
    return where(p.low < 0.0, math.inf, -t1 + t2 + t3 + t4)


@register_kl(Uniform, Gumbel)
def _kl_uniform_gumbel(p, q):
    common_term = q.scale / (p.high - p.low)
    high_loc_diff = (p.high - q.loc) / q.scale
    low_loc_diff = (p.low - q.loc) / q.scale
    t1 = common_term.log() + 0.5 * (high_loc_diff + low_loc_diff)
    t2 = common_term * ((-high_loc_diff).exp() - (-low_loc_diff).exp())
    return t1 - t2


@register_kl(Uniform, Pareto)
def _kl_uniform_pareto(p, q):
    support_uniform = p.high - p.low
    t1 = (q.alpha * q.scale.pow(q.alpha) * support_uniform).log()
    t2 = (_x_log_x(p.high) - _x_log_x(p.low) - support_uniform) / support_uniform
    return where(p.low < q.scale, math.inf, t2 * (q.alpha + 1) - t1)
