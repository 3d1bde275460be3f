"""`fusegrad.distributions` (torch.distributions under `python -m fusegrad`): torch's
families, transforms, constraints and KL pairs, gathered here from the files that define
them; the base class, Independent and the KL registry are `distribution.py`'s. Bernoulli,
Normal and Uniform are `distributions_basic.py`'s; Categorical,
OneHotCategorical(StraightThrough), Multinomial, Binomial, Geometric and NegativeBinomial
`distributions_categorical.py`'s; Cauchy, HalfCauchy, HalfNormal, Gumbel, Weibull, StudentT
and Chi2 `distributions_location.py`'s; Gamma, Beta, Dirichlet, Exponential, Poisson, Laplace
and LogNormal `distributions_gamma.py`'s; Pareto, InverseGamma, Kumaraswamy,
GeneralizedPareto and FisherSnedecor `distributions_tails.py`'s; ContinuousBernoulli and
VonMises `distributions_bounded.py`'s; MultivariateNormal and LowRankMultivariateNormal
`distributions_mvn.py`'s; LKJCholesky and Wishart `distributions_matrix.py`'s;
TransformedDistribution, LogisticNormal, RelaxedBernoulli,
RelaxedOneHotCategorical and MixtureSameFamily `distributions_transformed.py`'s (the
transforms `distribution_transforms*.py`'s); the KL pairs across families
`distributions_kl.py`'s (the same-family ones sit with their families).

>>> import fusegrad as fg
>>> from fusegrad.distributions import Categorical, Normal, kl_divergence
>>> m = Categorical(fg.tensor([0.25, 0.75]))
>>> int(m.sample()) in (0, 1), round(m.log_prob(fg.tensor(1)).item(), 4)
(True, -0.2877)
>>> loc = fg.tensor(0.0, requires_grad=True)
>>> x = Normal(loc, 2.0).rsample((3,))  # loc + eps * scale: differentiable in loc
>>> x.sum().backward(); loc.grad.item()
3.0
>>> kl_divergence(Normal(0.0, 1.0), Normal(1.0, 1.0)).item()
0.5

Draws come from fusegrad's own generator (`fg.manual_seed` repeats them; `rand` and
`randn` computed in the kernels that read them), so they are not torch's numbers for the
same seed. Categorical draws by inverting the cumulative probabilities (one uniform per
draw; torch calls multinomial).
"""

from __future__ import annotations

import math

from . import distribution_constraints as constraints
from . import distribution_transforms as transforms
from . import distributions_kl  # noqa: F401  (registers torch's cross-family KL pairs)
from .distribution import (
    Distribution,
    ExponentialFamily,
    Independent,
    _sum_rightmost,
    kl_divergence,
    register_kl,
)
from .distribution_constraint_registry import biject_to, transform_to
from .distribution_transforms import (
    AbsTransform,
    AffineTransform,
    CatTransform,
    ComposeTransform,
    CorrCholeskyTransform,
    CumulativeDistributionTransform,
    ExpTransform,
    IndependentTransform,
    LowerCholeskyTransform,
    PositiveDefiniteTransform,
    PowerTransform,
    ReshapeTransform,
    SigmoidTransform,
    SoftmaxTransform,
    SoftplusTransform,
    StackTransform,
    StickBreakingTransform,
    TanhTransform,
    Transform,
    identity_transform,
)
from .distributions_basic import Bernoulli, Normal, Uniform
from .distributions_bounded import ContinuousBernoulli, VonMises
from .distributions_categorical import (
    Binomial,
    Categorical,
    Geometric,
    Multinomial,
    NegativeBinomial,
    OneHotCategorical,
    OneHotCategoricalStraightThrough,
)
from .distributions_gamma import Beta, Dirichlet, Exponential, Gamma, Laplace, LogNormal, Poisson
from .distributions_location import (
    Cauchy,
    Chi2,
    Gumbel,
    HalfCauchy,
    HalfNormal,
    StudentT,
    Weibull,
)
from .distributions_matrix import LKJCholesky, Wishart
from .distributions_mvn import LowRankMultivariateNormal, MultivariateNormal
from .distributions_tails import (
    FisherSnedecor,
    GeneralizedPareto,
    InverseGamma,
    Kumaraswamy,
    Pareto,
)

# the relaxed distributions' bases: torch.distributions.relaxed_bernoulli's and
# relaxed_categorical's names (read through this module under the shim), not in torch's
# torch.distributions namespace, so not in __all__
from .distributions_transformed import (  # noqa: F401
    ExpRelaxedCategorical,
    LogisticNormal,
    LogitRelaxedBernoulli,
    MixtureSameFamily,
    RelaxedBernoulli,
    RelaxedOneHotCategorical,
    TransformedDistribution,
)
from .tensor import where

__all__ = [
    "AbsTransform",
    "AffineTransform",
    "Bernoulli",
    "Beta",
    "Binomial",
    "CatTransform",
    "Categorical",
    "Cauchy",
    "Chi2",
    "ComposeTransform",
    "ContinuousBernoulli",
    "CorrCholeskyTransform",
    "CumulativeDistributionTransform",
    "Dirichlet",
    "Distribution",
    "ExpTransform",
    "Exponential",
    "ExponentialFamily",
    "FisherSnedecor",
    "Gamma",
    "GeneralizedPareto",
    "Geometric",
    "Gumbel",
    "HalfCauchy",
    "HalfNormal",
    "Independent",
    "LKJCholesky",
    "IndependentTransform",
    "InverseGamma",
    "Kumaraswamy",
    "Laplace",
    "LogNormal",
    "LogisticNormal",
    "LowRankMultivariateNormal",
    "LowerCholeskyTransform",
    "MixtureSameFamily",
    "Multinomial",
    "MultivariateNormal",
    "NegativeBinomial",
    "Normal",
    "OneHotCategorical",
    "OneHotCategoricalStraightThrough",
    "Pareto",
    "Poisson",
    "PositiveDefiniteTransform",
    "PowerTransform",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "ReshapeTransform",
    "SigmoidTransform",
    "SoftmaxTransform",
    "SoftplusTransform",
    "StackTransform",
    "StickBreakingTransform",
    "StudentT",
    "TanhTransform",
    "Transform",
    "TransformedDistribution",
    "Uniform",
    "VonMises",
    "Weibull",
    "Wishart",
    "biject_to",
    "constraints",
    "identity_transform",
    "kl_divergence",
    "register_kl",
    "transform_to",
    "transforms",
]


# ------------------------------------------------------------- KL pairs (torch's formulas)
@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    t = p.probs * (p.logits - q.logits)
    t = where(p.probs == 0, 0.0, where(q.probs == 0, math.inf, t))
    return t.sum(-1)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    result = kl_divergence(p.base_dist, q.base_dist)
    return _sum_rightmost(result, p.reinterpreted_batch_ndims)
