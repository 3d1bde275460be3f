"""TransformedDistribution (a base distribution pushed through transforms), LogisticNormal,
the relaxed
(Gumbel-softmax / Concrete) distributions built on it, and MixtureSameFamily, as
torch.distributions has them.

>>> import fusegrad as fg
>>> from fusegrad.distributions import Normal, TransformedDistribution
>>> from fusegrad.distribution_transforms import TanhTransform
>>> d = TransformedDistribution(Normal(fg.zeros(2), fg.ones(2)), [TanhTransform(cache_size=1)])
>>> a = d.rsample()  # tanh of a normal draw: differentiable in loc and scale
>>> d.batch_shape, d.log_prob(a).shape, bool((a.abs() < 1).all())
((2,), (2,), True)

RelaxedBernoulli is a SigmoidTransform of LogitRelaxedBernoulli and
RelaxedOneHotCategorical an ExpTransform of ExpRelaxedCategorical, as torch's; their
`temperature` is a tensor (`log_prob` takes its log, as torch's). Draws come from
fusegrad's own stream (not torch's numbers for a seed).
"""

from __future__ import annotations

from . import distribution_constraints as constraints
from .autograd_state import no_grad
from .creation import rand
from .distribution import (
    BinaryParameters,
    Distribution,
    Independent,
    _sum_rightmost,
    broadcast_all,
    clamp_probs,
)
from .distribution_transforms import (
    ComposeTransform,
    ExpTransform,
    SigmoidTransform,
    StickBreakingTransform,
    Transform,
)
from .distributions_basic import Normal
from .distributions_categorical import Categorical
from .tensor import Tensor

__all__ = [
    "ExpRelaxedCategorical",
    "LogisticNormal",
    "LogitRelaxedBernoulli",
    "MixtureSameFamily",
    "RelaxedBernoulli",
    "RelaxedOneHotCategorical",
    "TransformedDistribution",
]
_NUMBER = (int, float)


class TransformedDistribution(Distribution):
    """`base_distribution` pushed through `transforms` (one Transform or a list, applied in
    order): `rsample` / `sample` transform a base draw; `log_prob(y)` inverts each transform
    and subtracts its log |det Jacobian|, summed over the event dims, from the base's.

    >>> import fusegrad as fg
    >>> from fusegrad.distributions import Normal
    >>> from fusegrad.distribution_transforms import ExpTransform
    >>> d = TransformedDistribution(Normal(0.0, 1.0), ExpTransform())
    >>> round(d.log_prob(fg.tensor(1.0)).item(), 4)  # LogNormal(0, 1) at 1
    -0.9189
    """

    arg_constraints: dict = {}

    def __init__(self, base_distribution, transforms, validate_args: bool | None = None):
        if isinstance(transforms, Transform):
            self.transforms = [transforms]
        elif isinstance(transforms, list):
            if not all(isinstance(t, Transform) for t in transforms):
                raise ValueError("transforms must be a Transform or a list of Transforms")
            self.transforms = transforms
        else:
            raise ValueError(f"transforms must be a Transform or list, but was {transforms}")
        base_shape = base_distribution.batch_shape + base_distribution.event_shape
        base_event_dim = len(base_distribution.event_shape)
        transform = ComposeTransform(self.transforms)
        if len(base_shape) < transform.domain.event_dim:
            raise ValueError(
                f"base_distribution needs to have shape with size at least "
                f"{transform.domain.event_dim}, but got {base_shape}."
            )
        forward_shape = tuple(transform.forward_shape(base_shape))
        expanded_base_shape = tuple(transform.inverse_shape(forward_shape))
        if base_shape != expanded_base_shape:
            cut = len(expanded_base_shape) - base_event_dim
            base_distribution = base_distribution.expand(expanded_base_shape[:cut])
        reinterpreted_batch_ndims = transform.domain.event_dim - base_event_dim
        if reinterpreted_batch_ndims > 0:
            base_distribution = Independent(base_distribution, reinterpreted_batch_ndims)
        self.base_dist = base_distribution
        change = transform.codomain.event_dim - transform.domain.event_dim
        event_dim = max(transform.codomain.event_dim, base_event_dim + change)
        cut = len(forward_shape) - event_dim
        super().__init__(forward_shape[:cut], forward_shape[cut:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(TransformedDistribution, _instance)
        batch_shape = tuple(batch_shape)
        shape = batch_shape + self.event_shape
        for t in reversed(self.transforms):
            shape = tuple(t.inverse_shape(shape))
        cut = len(shape) - len(self.base_dist.event_shape)
        new.base_dist = self.base_dist.expand(shape[:cut])
        new.transforms = self.transforms
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property(is_discrete=False)
    def support(self):
        if not self.transforms:
            return self.base_dist.support
        support = self.transforms[-1].codomain
        if len(self.event_shape) > support.event_dim:
            support = constraints.independent(support, len(self.event_shape) - support.event_dim)
        return support

    @property
    def has_rsample(self) -> bool:  # type: ignore[override]
        return self.base_dist.has_rsample

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            x = self.base_dist.sample(sample_shape)
            for transform in self.transforms:
                x = transform(x)
            return x

    def rsample(self, sample_shape=()) -> Tensor:
        x = self.base_dist.rsample(sample_shape)
        for transform in self.transforms:
            x = transform(x)
        return x

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        event_dim = len(self.event_shape)
        log_prob = 0.0
        y = value
        for transform in reversed(self.transforms):
            x = transform.inv(y)
            event_dim += transform.domain.event_dim - transform.codomain.event_dim
            log_prob = log_prob - _sum_rightmost(
                transform.log_abs_det_jacobian(x, y), event_dim - transform.domain.event_dim
            )
            y = x
        return log_prob + _sum_rightmost(
            self.base_dist.log_prob(y), event_dim - len(self.base_dist.event_shape)
        )

    def _monotonize_cdf(self, value):
        sign = 1
        for transform in self.transforms:
            sign = sign * transform.sign
        if isinstance(sign, int) and sign == 1:
            return value
        return sign * (value - 0.5) + 0.5

    def cdf(self, value: Tensor) -> Tensor:
        for transform in self.transforms[::-1]:
            value = transform.inv(value)
        if self._validate_args:
            self.base_dist._validate_sample(value)
        return self._monotonize_cdf(self.base_dist.cdf(value))

    def icdf(self, value: Tensor) -> Tensor:
        value = self.base_dist.icdf(self._monotonize_cdf(value))
        for transform in self.transforms:
            value = transform(value)
        return value


class LogisticNormal(TransformedDistribution):
    """The logistic normal distribution on the simplex: StickBreakingTransform of a
    Normal(`loc`, `scale`) vector (K + 1 probabilities from K normals), as torch's; a
    0-d base is read as a vector of one.

    >>> import fusegrad as fg
    >>> d = LogisticNormal(fg.zeros(2), fg.ones(2))
    >>> d.event_shape, round(d.log_prob(fg.tensor([0.2, 0.3, 0.5])).item(), 4)
    ((3,), 1.298)
    """

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, loc, scale, validate_args: bool | None = None):
        base_dist = Normal(loc, scale, validate_args=validate_args)
        if not base_dist.batch_shape:
            base_dist = base_dist.expand([1])
        super().__init__(base_dist, StickBreakingTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogisticNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    @property
    def loc(self) -> Tensor:
        return self.base_dist.base_dist.loc

    @property
    def scale(self) -> Tensor:
        return self.base_dist.base_dist.scale


class LogitRelaxedBernoulli(BinaryParameters, Distribution):
    """The logit of a RelaxedBernoulli draw: (logit(u) + logits) / temperature, u uniform.

    >>> import fusegrad as fg
    >>> d = LogitRelaxedBernoulli(fg.tensor(0.5), logits=fg.tensor([0.0, 1.0]))
    >>> [round(v, 4) for v in d.log_prob(fg.tensor([0.0, 0.0])).tolist()]
    [-2.0794, -2.3197]
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.real
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None):
        self.temperature = temperature
        batch_shape, _ = self._take_parameter(probs, logits)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogitRelaxedBernoulli, _instance)
        batch_shape = tuple(batch_shape)
        new.temperature = self.temperature
        self._expand_parameter(new, batch_shape)
        Distribution.__init__(new, batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        probs = clamp_probs(self.probs.expand(shape))
        uniforms = clamp_probs(rand(shape, dtype=probs.dtype, device=probs.device))
        return (
            uniforms.log() - (-uniforms).log1p() + probs.log() - (-probs).log1p()
        ) / self.temperature

    def log_prob(self, value: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        diff = logits - value * self.temperature
        return self.temperature.log() + diff - 2 * diff.exp().log1p()


class _RelaxedParameters:
    """A relaxed distribution's parameters, its base distribution's (torch's properties)."""

    @property
    def temperature(self):
        return self.base_dist.temperature

    @property
    def logits(self) -> Tensor:
        return self.base_dist.logits

    @property
    def probs(self) -> Tensor:
        return self.base_dist.probs


class RelaxedBernoulli(_RelaxedParameters, TransformedDistribution):
    """A relaxed (Concrete) Bernoulli on (0, 1): sigmoid of a LogitRelaxedBernoulli draw;
    `rsample` is differentiable in the probabilities; lower `temperature` draws nearer to
    0 / 1.

    >>> import fusegrad as fg
    >>> d = RelaxedBernoulli(fg.tensor(0.5), probs=fg.tensor([0.3, 0.9]))
    >>> d.batch_shape, bool(((d.sample() > 0) & (d.sample() < 1)).all())
    ((2,), True)
    """

    arg_constraints = {"probs": constraints.unit_interval, "logits": constraints.real}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None):
        base_dist = LogitRelaxedBernoulli(temperature, probs, logits)
        super().__init__(base_dist, SigmoidTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedBernoulli, _instance)
        return super().expand(batch_shape, _instance=new)


class ExpRelaxedCategorical(Distribution):
    """The log of a RelaxedOneHotCategorical draw: log_softmax((logits + gumbels) /
    temperature) over the last dim.

    >>> import fusegrad as fg
    >>> d = ExpRelaxedCategorical(fg.tensor(1.0), probs=fg.tensor([0.5, 0.5]))
    >>> d.event_shape, round(d.log_prob(fg.tensor([0.5, 0.5]).log()).item(), 4)
    ((2,), -1.3863)
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None):
        self._categorical = Categorical(probs, logits)
        self.temperature = temperature
        batch_shape = self._categorical.batch_shape
        event_shape = self._categorical.param_shape[-1:]
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        batch_shape = tuple(batch_shape)
        new.temperature = self.temperature
        new._categorical = self._categorical.expand(batch_shape)
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def param_shape(self) -> tuple[int, ...]:
        return self._categorical.param_shape

    @property
    def logits(self) -> Tensor:
        return self._categorical.logits

    @property
    def probs(self) -> Tensor:
        return self._categorical.probs

    def rsample(self, sample_shape=()) -> Tensor:
        shape = self._extended_shape(sample_shape)
        logits = self.logits
        uniforms = clamp_probs(rand(shape, dtype=logits.dtype, device=logits.device))
        gumbels = -((-(uniforms.log())).log())
        scores = (logits + gumbels) / self.temperature
        return scores - scores.logsumexp(dim=-1, keepdim=True)

    def log_prob(self, value: Tensor) -> Tensor:
        k = self._categorical._num_events
        if self._validate_args:
            self._validate_sample(value)
        logits, value = broadcast_all(self.logits, value)
        t = self.temperature
        log_scale = (t * 0 + float(k)).lgamma() - t.log() * (-(k - 1))
        score = logits - value * t
        score = (score - score.logsumexp(dim=-1, keepdim=True)).sum(-1)
        return score + log_scale


class RelaxedOneHotCategorical(_RelaxedParameters, TransformedDistribution):
    """A relaxed (Concrete / Gumbel-softmax) one-hot categorical on the simplex: exp of an
    ExpRelaxedCategorical draw; `rsample` is differentiable in the probabilities.

    >>> import fusegrad as fg
    >>> d = RelaxedOneHotCategorical(fg.tensor(0.5), logits=fg.zeros(3, 4))
    >>> d.batch_shape, d.event_shape, d.rsample((2,)).shape
    ((3,), (4,), (2, 3, 4))
    """

    arg_constraints = {"probs": constraints.simplex, "logits": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, probs=None, logits=None, validate_args: bool | None = None):
        base_dist = ExpRelaxedCategorical(temperature, probs, logits, validate_args=validate_args)
        super().__init__(base_dist, ExpTransform(), validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(RelaxedOneHotCategorical, _instance)
        return super().expand(batch_shape, _instance=new)


class MixtureSameFamily(Distribution):
    """A mixture of the batch of `component_distribution` along its last batch dim, with
    weights the Categorical `mixture_distribution`: `log_prob` is a logsumexp over the
    components, `sample` draws a component then its value (no `rsample`, as torch's).

    >>> import fusegrad as fg
    >>> from fusegrad.distributions import Normal
    >>> mix = Categorical(fg.tensor([0.5, 0.5]))
    >>> gmm = MixtureSameFamily(mix, Normal(fg.tensor([-1.0, 1.0]), fg.tensor([1.0, 1.0])))
    >>> gmm.batch_shape, gmm.mean.item(), gmm.variance.item()
    ((), 0.0, 2.0)
    """

    arg_constraints: dict = {}
    has_rsample = False

    def __init__(
        self, mixture_distribution, component_distribution, validate_args: bool | None = None
    ):
        self._mixture_distribution = mixture_distribution
        self._component_distribution = component_distribution
        if not isinstance(mixture_distribution, Categorical):
            raise ValueError(
                " The Mixture distribution needs to be an  instance of "
                "torch.distributions.Categorical"
            )
        if not isinstance(component_distribution, Distribution):
            raise ValueError(
                "The Component distribution need to be an instance of "
                "torch.distributions.Distribution"
            )
        mdbs = mixture_distribution.batch_shape
        cdbs = component_distribution.batch_shape[:-1]
        for size1, size2 in zip(reversed(mdbs), reversed(cdbs)):
            if size1 != 1 and size2 != 1 and size1 != size2:
                raise ValueError(
                    f"`mixture_distribution.batch_shape` ({mdbs}) is not compatible with "
                    f"`component_distribution.batch_shape`({cdbs})"
                )
        km = mixture_distribution.logits.shape[-1]
        kc = component_distribution.batch_shape[-1]
        if km != kc:
            raise ValueError(
                f"`mixture_distribution component` ({km}) does not equal "
                f"`component_distribution.batch_shape[-1]` ({kc})"
            )
        self._num_component = km
        event_shape = component_distribution.event_shape
        self._event_ndims = len(event_shape)
        super().__init__(cdbs, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        batch_shape = tuple(batch_shape)
        new = self._get_checked_instance(MixtureSameFamily, _instance)
        new._component_distribution = self._component_distribution.expand(
            batch_shape + (self._num_component,)
        )
        new._mixture_distribution = self._mixture_distribution.expand(batch_shape)
        new._num_component = self._num_component
        new._event_ndims = self._event_ndims
        event_shape = new._component_distribution.event_shape
        Distribution.__init__(new, batch_shape, event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @constraints.dependent_property
    def support(self):
        return constraints.MixtureSameFamilyConstraint(self._component_distribution.support)

    @property
    def mixture_distribution(self):
        return self._mixture_distribution

    @property
    def component_distribution(self):
        return self._component_distribution

    @property
    def mean(self) -> Tensor:
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        return (probs * self.component_distribution.mean).sum(-1 - self._event_ndims)

    @property
    def variance(self) -> Tensor:
        probs = self._pad_mixture_dimensions(self.mixture_distribution.probs)
        dim = -1 - self._event_ndims
        mean_cond_var = (probs * self.component_distribution.variance).sum(dim)
        spread = (self.component_distribution.mean - self._pad(self.mean)).pow(2.0)
        return mean_cond_var + (probs * spread).sum(dim)

    def cdf(self, x: Tensor) -> Tensor:
        cdf_x = self.component_distribution.cdf(self._pad(x))
        return (cdf_x * self.mixture_distribution.probs).sum(-1)

    def log_prob(self, x: Tensor) -> Tensor:
        if self._validate_args:
            self._validate_sample(x)
        log_prob_x = self.component_distribution.log_prob(self._pad(x))  # [S, B, k]
        log_mix_prob = self.mixture_distribution.logits.log_softmax(-1)  # [B, k]
        return (log_prob_x + log_mix_prob).logsumexp(-1)  # [S, B]

    def sample(self, sample_shape=()) -> Tensor:
        with no_grad():
            gather_dim = len(sample_shape) + len(self.batch_shape)
            es = self.event_shape
            mix_sample = self.mixture_distribution.sample(sample_shape)
            mix_shape = tuple(mix_sample.shape)
            comp_samples = self.component_distribution.sample(sample_shape)
            index = mix_sample.reshape(mix_shape + (1,) * (len(es) + 1))
            index = index.repeat((1,) * len(mix_shape) + (1,) + es)
            return comp_samples.gather(gather_dim, index).squeeze(gather_dim)

    def _pad(self, x: Tensor) -> Tensor:
        return x.unsqueeze(-1 - self._event_ndims)

    def _pad_mixture_dimensions(self, x: Tensor) -> Tensor:
        dist_batch_ndims = len(self.batch_shape)
        cat_batch_ndims = len(self.mixture_distribution.batch_shape)
        pad_ndims = 0 if cat_batch_ndims == 1 else dist_batch_ndims - cat_batch_ndims
        xs = tuple(x.shape)
        return x.reshape(xs[:-1] + (1,) * pad_ndims + xs[-1:] + (1,) * self._event_ndims)

    def __repr__(self) -> str:
        args = f"\n  {self.mixture_distribution},\n  {self.component_distribution}"
        return "MixtureSameFamily(" + args + ")"
