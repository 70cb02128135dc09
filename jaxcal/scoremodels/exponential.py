r"""Exponential class-conditional score model: :math:`s \mid y=k \sim \text{Exp}(\lambda_k)`.

For scores :math:`s \ge 0` (``ExponentialCalibration`` uses :math:`s' = s - s_{\min}`).
Posterior logit: Platt's form :math:`a s + b` with :math:`a = \lambda_0 - \lambda_1`,
:math:`b = \log\frac{\pi_1 \lambda_1}{\pi_0 \lambda_0}` (Kweon et al. 2022). Weighted MLE:
:math:`\lambda_k = \sum w_k / \sum w_k s`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._lazy import lazy_module
from jaxcal._pytree import pytree_dataclass
from jaxcal.scoremodels._base import ScoreModel, class_prior, logit_prior
from jaxcal.scoremodels._sites import class_sites, observe_scores, prior_site

numpyro = lazy_module("numpyro")  # imported by the Bayesian methods only
dist = lazy_module("numpyro.distributions")

__all__ = ["ExponentialParams", "ExponentialScoreModel"]


@pytree_dataclass
class ExponentialParams:
    """Class-conditional exponential rates ``rate_k`` and prior ``pi1``.

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import ExponentialParams, ExponentialScoreModel
        >>> params = ExponentialScoreModel().fit(s, y)
        >>> isinstance(params, ExponentialParams), round(float(params.rate1), 4)  # 3 / 4.9
        (True, 0.6122)
    """

    rate0: jax.Array
    rate1: jax.Array
    pi1: jax.Array


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExponentialScoreModel(ScoreModel[ExponentialParams]):
    """Exponential scores per class; scores must be >= 0.

    Prior of :meth:`model`: :math:`\\lambda_k \\sim \\text{LogNormal}(0, \\text{rate\\_scale})`,
    :math:`\\pi_1 \\sim \\text{Beta}(1, 1)`.

    Args:
        rate_scale: prior scale of the log rates (> 0).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import ExponentialScoreModel
        >>> model = ExponentialScoreModel()
        >>> params = model.fit(s, y)
        >>> model.predict(params, [0.5, 2.0]).round(2).tolist()
        [0.39, 0.73]
    """

    rate_scale: float = 3.0
    support = "nonnegative"
    fitted_class: ClassVar[type[ExponentialParams]] = ExponentialParams

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``scores | y ~ Exponential(rate_y)``, ``rate`` per class."""
        (rate,) = class_sites(rate=dist.LogNormal(0.0, self.rate_scale))
        observe_scores(dist.Exponential(rate[labels]), scores, sample_weight, n)

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> ExponentialParams:
        r"""Priors of :meth:`model`, on the log rates :math:`\ell_k = \log\lambda_k \sim
        \mathcal N(0, \text{rate\_scale}^2)`; ``monotone``: :math:`\ell_1 = \ell_0 -
        \text{excess}` (the map is monotone everywhere iff :math:`\lambda_1 \le
        \lambda_0`; the log rate enters the slope :math:`a = \lambda_0 - \lambda_1`
        monotonically). Induced prior: :meth:`model`'s, conditioned on
        :math:`\lambda_1 < \lambda_0`."""
        del lo, hi
        log_prior = dist.Normal(0.0, self.rate_scale)
        log_rate0 = numpyro.sample("log_rate0", log_prior)
        log_rate1 = prior_site("log_rate1", log_prior, log_rate0, monotone=monotone, upper=True)
        rate0 = numpyro.deterministic("rate0", jnp.exp(log_rate0))
        rate1 = numpyro.deterministic("rate1", jnp.exp(log_rate1))
        return ExponentialParams(rate0, rate1, pi1)

    def class_log_density(self, params: ExponentialParams, scores, labels) -> jax.Array:
        r"""``[n]`` :math:`\log f_{y_i}(s_i)`."""
        rate = jnp.where(labels == 1, params.rate1, params.rate0)
        return dist.Exponential(rate).log_prob(scores)

    def fit_weighted(self, scores, w1, w0) -> ExponentialParams:
        """Closed-form weighted MLE."""
        rate1 = jnp.sum(w1) / jnp.sum(w1 * scores)
        rate0 = jnp.sum(w0) / jnp.sum(w0 * scores)
        return ExponentialParams(rate0, rate1, class_prior(w1, w0))

    def calibration_map(self, params: ExponentialParams) -> jax.Array:
        """``[a, b]`` of the posterior logit ``a s + b``."""
        p = params
        a = p.rate0 - p.rate1
        b = logit_prior(p.pi1) + jnp.log(p.rate1) - jnp.log(p.rate0)
        return jnp.stack([a, b], axis=-1)

    def log_odds(self, params: ExponentialParams, scores: ArrayLike) -> jax.Array:
        a, b = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return a * jnp.asarray(scores) + b

    def is_monotone(self, params: ExponentialParams, lo: ArrayLike, hi: ArrayLike) -> jax.Array:
        """Monotone iff ``rate0 >= rate1`` (positives have the heavier tail)."""
        del lo, hi
        return params.rate0 >= params.rate1
