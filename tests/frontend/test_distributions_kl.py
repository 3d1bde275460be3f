"""torch's KL pairs across families and for the families added with them
(frontend/distributions_kl.py): kl_divergence against torch 2.14.1's values (literals),
inf where p leaves q's support, Monte Carlo estimates E_p[log p - log q] for a few cross
pairs (independent of torch), gradients flowing to both sides, and the pairs' errors."""

import math

import pytest

import fusegrad as fg
from fusegrad.distributions import (
    Bernoulli,
    Beta,
    Binomial,
    Cauchy,
    ContinuousBernoulli,
    Exponential,
    Gamma,
    Geometric,
    Gumbel,
    HalfNormal,
    Kumaraswamy,
    Laplace,
    LowRankMultivariateNormal,
    MultivariateNormal,
    Normal,
    OneHotCategorical,
    Pareto,
    Poisson,
    Uniform,
    kl_divergence,
)


def t(values, grad=False):
    return fg.tensor(values, dtype=fg.float64, requires_grad=grad)


FAMILIES = {
    "Bernoulli": lambda: Bernoulli(t(0.3)),
    "Poisson": lambda: Poisson(t(2.0)),
    "Beta": lambda: Beta(t(2.0), t(3.0)),
    "CB": lambda: ContinuousBernoulli(t(0.2)),
    "Exponential": lambda: Exponential(t(1.5)),
    "Gamma": lambda: Gamma(t(2.0), t(1.5)),
    "Normal": lambda: Normal(t(0.3), t(1.2)),
    "Pareto": lambda: Pareto(t(1.0), t(3.0)),
    "Pareto2": lambda: Pareto(t(0.7), t(2.0)),
    "Uniform": lambda: Uniform(t(-1.0), t(2.0)),
    "Uniform01": lambda: Uniform(t(0.1), t(0.6)),
    "UniformBig": lambda: Uniform(t(-0.5), t(1.5)),
    "Gumbel": lambda: Gumbel(t(0.3), t(1.0)),
    "Laplace": lambda: Laplace(t(-1.0), t(0.5)),
    "Binomial": lambda: Binomial(7, t(0.3)),
    "Binomial2": lambda: Binomial(5, t(0.5)),
    "Geometric": lambda: Geometric(t(0.3)),
    "Geometric2": lambda: Geometric(t(0.6)),
    "HalfNormal": lambda: HalfNormal(t(1.0)),
    "HalfNormal2": lambda: HalfNormal(t(2.0)),
    "OneHot": lambda: OneHotCategorical(t([0.2, 0.3, 0.5])),
    "OneHot2": lambda: OneHotCategorical(t([0.4, 0.4, 0.2])),
    "Cauchy": lambda: Cauchy(t(0.3), t(1.0)),
    "Cauchy2": lambda: Cauchy(t(-1.0), t(2.0)),
    "Kumaraswamy": lambda: Kumaraswamy(t(2.0), t(3.0)),
    "Kumaraswamy2": lambda: Kumaraswamy(t(2.0), t(3.0)),  # the same: equal transforms
    "CB2": lambda: ContinuousBernoulli(t(0.7)),
    "Gumbel2": lambda: Gumbel(t(-1.0), t(2.0)),
    "LowRank": lambda: LowRankMultivariateNormal(
        t([0.1, -0.2, 0.3]), t([[1.0, 0.5], [0.2, -0.3], [0.0, 0.4]]), t([0.5, 1.5, 2.0])
    ),
    "LowRank2": lambda: LowRankMultivariateNormal(
        t([0.0, 0.2, 0.1]), t([[0.3], [0.2], [-0.5]]), t([1.0, 0.5, 1.0])
    ),
    "MVN": lambda: MultivariateNormal(
        t([0.3, 0.2, -0.5]), scale_tril=t([[1.0, 0.0, 0.0], [0.3, 0.8, 0.0], [-0.2, 0.1, 1.5]])
    ),
}

# (p, q, torch's kl_divergence(p, q))
TORCH = [
    ("Bernoulli", "Poisson", 1.181191543777123),
    ("Beta", "CB", 0.17510806180589467),
    ("Beta", "Exponential", 0.42944154167983606),
    ("Beta", "Gamma", 1.1073097669050047),
    ("Beta", "Normal", 1.3535278508977389),
    ("Beta", "Pareto", math.inf),
    ("Beta", "UniformBig", 0.9280538303479456),
    ("Binomial", "Binomial2", math.inf),
    ("Cauchy", "Cauchy2", 0.28986718335711803),
    ("CB", "CB2", 0.20103591570967994),
    ("CB", "Exponential", 0.252970625361917),
    ("CB", "Normal", 1.206717701808859),
    ("Exponential", "Beta", math.inf),
    ("Exponential", "Gamma", 0.5772156649015328),
    ("Exponential", "Gumbel", 0.5820470593204328),
    ("Exponential", "Normal", 0.7077282845265448),
    ("Gamma", "Exponential", 0.422784335098467),
    ("Gamma", "Gumbel", 0.3475319472673259),
    ("Gamma", "Normal", 0.608907681353407),
    ("Gamma", "Uniform", math.inf),
    ("Geometric", "Geometric2", 0.612622991289374),
    ("Gumbel", "Gumbel2", 0.5171903717936912),
    ("Gumbel", "Normal", 0.2108888662970756),
    ("Gumbel", "Uniform", math.inf),
    ("HalfNormal", "HalfNormal2", 0.3181471805599453),
    ("Laplace", "Normal", 0.8616767566652941),
    ("Laplace", "Gamma", math.inf),
    ("LowRank", "LowRank2", 0.8415796507406013),
    ("LowRank", "MVN", 0.8173881167027797),
    ("MVN", "LowRank", 0.48553565594752524),
    ("Normal", "Gumbel", 0.4531731206452603),
    ("Normal", "Laplace", 1.339112965850871),
    ("Normal", "Pareto", math.inf),
    ("OneHot", "OneHot2", 0.2332113080895541),
    ("Pareto", "Exponential", 1.609813847226612),
    ("Pareto", "Gamma", 0.8710154057851145),
    ("Pareto", "Normal", 1.6269557120000706),
    ("Pareto", "Pareto2", 0.785481662652296),
    ("Pareto2", "Pareto", math.inf),
    ("Pareto2", "Normal", math.inf),
    ("Poisson", "Binomial", math.inf),
    ("Uniform01", "Beta", 0.2739469460618512),
    ("Uniform", "Beta", math.inf),
    ("Uniform01", "CB", 0.564033874521845),
    ("Uniform01", "Exponential", 0.8126820724517808),
    ("Uniform", "Exponential", math.inf),
    ("Uniform01", "Gamma", 1.5596906942639963),
    ("Uniform", "Gumbel", 0.2635920925207267),
    ("Uniform", "Pareto", math.inf),
    ("UniformBig", "Pareto", math.inf),
    ("Kumaraswamy", "Kumaraswamy2", 0.0),
]


@pytest.mark.parametrize(("p", "q", "want"), TORCH)
def test_kl_equals_torchs(p, q, want):
    got = kl_divergence(FAMILIES[p](), FAMILIES[q]()).item()
    assert got == want if math.isinf(want) else math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)


@pytest.mark.parametrize(
    ("p", "q"),
    [
        (lambda: Gamma(t(2.0), t(1.5)), lambda: Normal(t(0.3), t(1.2))),
        (lambda: Uniform(t(-1.0), t(2.0)), lambda: Gumbel(t(0.3), t(1.0))),
        (lambda: Pareto(t(1.0), t(3.0)), lambda: Exponential(t(1.5))),
        (lambda: Normal(t(0.3), t(1.2)), lambda: Laplace(t(-1.0), t(0.5))),
        (lambda: Beta(t(2.0), t(3.0)), lambda: ContinuousBernoulli(t(0.2))),
    ],
)
def test_kl_is_the_expected_log_ratio(p, q):
    fg.manual_seed(0)
    p, q = p(), q()
    x = p.sample((200000,))
    ratio = (p.log_prob(x) - q.log_prob(x)).numpy()
    se = ratio.std() / math.sqrt(ratio.size)
    assert abs(ratio.mean() - kl_divergence(p, q).item()) < 6 * se


def test_gradients_reach_both_sides():
    a, b, loc, scale = t(2.0, True), t(1.5, True), t(0.3, True), t(1.2, True)
    kl_divergence(Gamma(a, b), Normal(loc, scale)).backward()
    assert all(v.grad is not None and v.grad.isfinite().item() for v in (a, b, loc, scale))
    # d/dloc of the Gaussian cross entropy term: (loc - E[x]) / scale^2
    assert math.isclose(loc.grad.item(), (0.3 - 2.0 / 1.5) / 1.44, rel_tol=1e-12)


def test_pair_errors():
    with pytest.raises(NotImplementedError, match="q.total_count > p.total_count"):
        kl_divergence(Binomial(5, t(0.5)), Binomial(7, t(0.3)))
    with pytest.raises(NotImplementedError):  # different transforms
        kl_divergence(Kumaraswamy(t(2.0), t(3.0)), Kumaraswamy(t(1.0), t(3.0)))
    mvn = MultivariateNormal(t([0.0, 0.0]), scale_tril=t([[1.0, 0.0], [0.0, 1.0]]))
    lowrank = LowRankMultivariateNormal(t([0.0, 0.0, 0.0]), t([[1.0], [0.0], [0.0]]), t([1.0] * 3))
    with pytest.raises(ValueError, match="different event shapes"):
        kl_divergence(mvn, lowrank)
