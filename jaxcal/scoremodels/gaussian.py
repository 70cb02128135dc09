r"""Gaussian class-conditional score models (unequal and equal variances).

* :class:`GaussianScoreModel`: :math:`s \mid y=k \sim \mathcal N(\mu_k, \sigma_k^2)`.
  Posterior logit :math:`a s^2 + b s + c` with (Kweon et al. 2022)
  :math:`a = \frac{1}{2\sigma_0^2} - \frac{1}{2\sigma_1^2}`,
  :math:`b = \frac{\mu_1}{\sigma_1^2} - \frac{\mu_0}{\sigma_0^2}`,
  :math:`c = \log\frac{\pi_1}{\pi_0} + \log\frac{\sigma_0}{\sigma_1} + \frac{\mu_0^2}{2\sigma_0^2}
  - \frac{\mu_1^2}{2\sigma_1^2}` (``GaussianCalibration``).
* :class:`EqualVarianceGaussianScoreModel`: a shared :math:`\sigma^2`; the logit is Platt's
  :math:`a s + b` with :math:`a = (\mu_1 - \mu_0)/\sigma^2`,
  :math:`b = \log\frac{\pi_1}{\pi_0} + \frac{\mu_0^2 - \mu_1^2}{2\sigma^2}` (``PlattScaling``).

Weighted MLEs are closed form (weighted means; divide-by-total-weight variances, pooled for
the equal-variance model).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._lazy import lazy_module
from jaxcal._pytree import pytree_dataclass
from jaxcal.scoremodels._base import ScoreModel, class_prior, logit_prior, weighted_moments
from jaxcal.scoremodels._sites import class_sites, observe_scores, prior_site

numpyro = lazy_module("numpyro")  # imported by the Bayesian methods only
dist = lazy_module("numpyro.distributions")

__all__ = [
    "GaussianParams",
    "GaussianScoreModel",
    "EqualVarianceGaussianParams",
    "EqualVarianceGaussianScoreModel",
]


@pytree_dataclass
class GaussianParams:
    """Class-conditional Gaussians ``N(mu_k, sd_k^2)`` and the class prior ``pi1``.

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import GaussianParams, GaussianScoreModel
        >>> params = GaussianScoreModel().fit(s, y)
        >>> isinstance(params, GaussianParams), round(float(params.mu1), 4)  # mean of 0.9, 1.6, 2.4
        (True, 1.6333)
    """

    mu0: jax.Array
    sd0: jax.Array
    mu1: jax.Array
    sd1: jax.Array
    pi1: jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianScoreModel(ScoreModel[GaussianParams]):
    """Unequal-variance Gaussian scores per class (the model behind Gaussian calibration).

    Priors of :meth:`model` (weakly informative, in score units):
    :math:`\\mu_k \\sim \\mathcal N(0, \\text{loc\\_scale}^2)`,
    :math:`\\sigma_k \\sim \\text{HalfNormal}(\\text{scale\\_scale})`,
    :math:`\\pi_1 \\sim \\text{Beta}(1, 1)`. Standardise scores first if they are far
    from unit scale.

    Args:
        loc_scale: prior standard deviation of the class means (> 0).
        scale_scale: prior scale of the class standard deviations (> 0).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import GaussianScoreModel
        >>> model = GaussianScoreModel()
        >>> params = model.fit(s, y)
        >>> model.predict(params, [0.5, 2.0]).round(2).tolist()  # P(y = 1 | s)
        [0.1, 1.0]
        >>> model.calibration_map(params).round(2).tolist()  # [a, b, c] of a s^2 + b s + c
        [2.36, -0.32, -2.58]
    """

    loc_scale: float = 10.0
    scale_scale: float = 10.0
    fitted_class: ClassVar[type[GaussianParams]] = GaussianParams

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``scores | labels ~ N(mu_y, sd_y^2)``, ``mu`` and ``sd`` per class."""
        mu, sd = class_sites(
            mu=dist.Normal(0.0, self.loc_scale), sd=dist.HalfNormal(self.scale_scale)
        )
        observe_scores(dist.Normal(mu[labels], sd[labels]), scores, sample_weight, n)

    def monotone_bound(self, mu0, sd0, sd1, lo, hi) -> jax.Array:
        r"""Smallest ``mu1`` for which the map is non-decreasing on ``[lo, hi]``.

        The logit's derivative :math:`2as + b = s(\sigma_0^{-2} - \sigma_1^{-2})
        + \mu_1/\sigma_1^2 - \mu_0/\sigma_0^2` is linear in :math:`s`, so it is
        :math:`\ge 0` on the interval iff it is at both ends; at an end :math:`s` this reads
        :math:`\mu_1 \ge s + (\sigma_1/\sigma_0)^2(\mu_0 - s)` (multiply by
        :math:`\sigma_1^2 > 0`). Hence, for given :math:`(\mu_0, \sigma_0, \sigma_1)`, the
        monotone set is :math:`\mu_1 \ge \max_{s \in \{lo, hi\}}[s + r^2(\mu_0 - s)]`,
        :math:`r = \sigma_1/\sigma_0`.
        """
        r2 = (sd1 / sd0) ** 2
        return jnp.maximum(lo + r2 * (mu0 - lo), hi + r2 * (mu0 - hi))

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> GaussianParams:
        """Priors of :meth:`model`; ``monotone``: ``mu1 = monotone_bound + excess``.

        The induced prior is the prior of :meth:`model` conditioned on the map being
        non-decreasing on the training range ``[lo, hi]`` (see
        :func:`~jaxcal.scoremodels._sites.bounded_site`).
        """
        mu0 = numpyro.sample("mu0", dist.Normal(0.0, self.loc_scale))
        sd0 = numpyro.sample("sd0", dist.HalfNormal(self.scale_scale))
        sd1 = numpyro.sample("sd1", dist.HalfNormal(self.scale_scale))
        bound = self.monotone_bound(mu0, sd0, sd1, lo, hi)
        mu1 = prior_site("mu1", dist.Normal(0.0, self.loc_scale), bound, monotone=monotone)
        return GaussianParams(mu0, sd0, mu1, sd1, pi1)

    def class_log_density(self, params: GaussianParams, scores, labels) -> jax.Array:
        r"""``[n]`` :math:`\log f_{y_i}(s_i)`."""
        p = params
        return jnp.where(
            labels == 1,
            dist.Normal(p.mu1, p.sd1).log_prob(scores),
            dist.Normal(p.mu0, p.sd0).log_prob(scores),
        )

    def fit_weighted(self, scores, w1, w0) -> GaussianParams:
        """Closed-form weighted MLE (pure; jit/vmap-able)."""
        m1, v1 = weighted_moments(scores, w1)
        m0, v0 = weighted_moments(scores, w0)
        return GaussianParams(m0, jnp.sqrt(v0), m1, jnp.sqrt(v1), class_prior(w1, w0))

    def calibration_map(self, params: GaussianParams) -> jax.Array:
        """``[a, b, c]`` of the posterior logit ``a s^2 + b s + c``."""
        p = params
        a = 0.5 / p.sd0**2 - 0.5 / p.sd1**2
        b = p.mu1 / p.sd1**2 - p.mu0 / p.sd0**2
        c = (
            logit_prior(p.pi1)
            + jnp.log(p.sd0 / p.sd1)
            + 0.5 * p.mu0**2 / p.sd0**2
            - 0.5 * p.mu1**2 / p.sd1**2
        )
        return jnp.stack([a, b, c], axis=-1)

    def log_odds(self, params: GaussianParams, scores: ArrayLike) -> jax.Array:
        """Posterior logit at ``scores`` via the closed-form map."""
        s = jnp.asarray(scores)
        a, b, c = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return (a * s + b) * s + c

    def is_monotone(self, params: GaussianParams, lo: ArrayLike, hi: ArrayLike) -> jax.Array:
        """Whether the posterior is non-decreasing on ``[lo, hi]``: ``2 a s + b >= 0`` at both
        ends (the derivative is linear in ``s``)."""
        a, b, _ = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return (2 * a * lo + b >= 0) & (2 * a * hi + b >= 0)


@pytree_dataclass
class EqualVarianceGaussianParams:
    """Class-conditional Gaussians with a shared standard deviation ``sd``.

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import EqualVarianceGaussianParams
        >>> from jaxcal.scoremodels import EqualVarianceGaussianScoreModel
        >>> params = EqualVarianceGaussianScoreModel().fit(s, y)
        >>> isinstance(params, EqualVarianceGaussianParams), round(float(params.sd), 3)
        (True, 0.506)
    """

    mu0: jax.Array
    mu1: jax.Array
    sd: jax.Array
    pi1: jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class EqualVarianceGaussianScoreModel(ScoreModel[EqualVarianceGaussianParams]):
    """Equal-variance Gaussian scores per class: the generative model behind Platt scaling.

    Priors as :class:`GaussianScoreModel`, with one shared ``sd``.

    Args:
        loc_scale: prior standard deviation of the class means (> 0).
        scale_scale: prior scale of the shared standard deviation (> 0).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import EqualVarianceGaussianScoreModel
        >>> model = EqualVarianceGaussianScoreModel()
        >>> params = model.fit(s, y)
        >>> model.calibration_map(params).round(2).tolist()  # Platt's [a, b]
        [3.91, -4.43]
        >>> bool(model.is_monotone(params, 0.0, 3.0))  # mu1 >= mu0
        True
    """

    loc_scale: float = 10.0
    scale_scale: float = 10.0
    fitted_class: ClassVar[type[EqualVarianceGaussianParams]] = EqualVarianceGaussianParams

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``scores | labels ~ N(mu_y, sd^2)``, ``mu`` per class, one ``sd``."""
        (mu,) = class_sites(mu=dist.Normal(0.0, self.loc_scale))
        sd = numpyro.sample("sd", dist.HalfNormal(self.scale_scale))
        observe_scores(dist.Normal(mu[labels], sd), scores, sample_weight, n)

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> EqualVarianceGaussianParams:
        r"""Priors of :meth:`model`; ``monotone``: ``mu1 = mu0 + excess`` (the map is Platt's
        with slope :math:`(\mu_1 - \mu_0)/\sigma^2`, monotone everywhere iff
        :math:`\mu_1 \ge \mu_0`). Induced prior: :meth:`model`'s, conditioned on
        :math:`\mu_1 > \mu_0`."""
        del lo, hi
        mu0 = numpyro.sample("mu0", dist.Normal(0.0, self.loc_scale))
        sd = numpyro.sample("sd", dist.HalfNormal(self.scale_scale))
        mu1 = prior_site("mu1", dist.Normal(0.0, self.loc_scale), mu0, monotone=monotone)
        return EqualVarianceGaussianParams(mu0, mu1, sd, pi1)

    def class_log_density(self, params: EqualVarianceGaussianParams, scores, labels):
        r"""``[n]`` :math:`\log f_{y_i}(s_i)`."""
        mu = jnp.where(labels == 1, params.mu1, params.mu0)
        return dist.Normal(mu, params.sd).log_prob(scores)

    def fit_weighted(self, scores, w1, w0) -> EqualVarianceGaussianParams:
        """Closed-form weighted MLE with the pooled variance."""
        m1, v1 = weighted_moments(scores, w1)
        m0, v0 = weighted_moments(scores, w0)
        n1, n0 = jnp.sum(w1), jnp.sum(w0)
        var = (n1 * v1 + n0 * v0) / (n1 + n0)
        return EqualVarianceGaussianParams(m0, m1, jnp.sqrt(var), class_prior(w1, w0))

    def calibration_map(self, params: EqualVarianceGaussianParams) -> jax.Array:
        """``[a, b]`` of Platt's logit ``a s + b``."""
        p = params
        var = p.sd**2
        a = (p.mu1 - p.mu0) / var
        b = logit_prior(p.pi1) + (p.mu0**2 - p.mu1**2) / (2 * var)
        return jnp.stack([a, b], axis=-1)

    def log_odds(self, params: EqualVarianceGaussianParams, scores: ArrayLike) -> jax.Array:
        a, b = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return a * jnp.asarray(scores) + b

    def is_monotone(self, params, lo: ArrayLike, hi: ArrayLike) -> jax.Array:
        """Monotone (anywhere) iff ``mu1 >= mu0``."""
        del lo, hi
        return params.mu1 >= params.mu0
