r"""Manmatha et al. (SIGIR 2001) score model: negatives exponential, positives Gaussian.

:math:`s \mid y=0 \sim \text{Exp}(\lambda)`, :math:`s \mid y=1 \sim \mathcal N(\mu, \sigma^2)`,
scores :math:`s \ge 0`. Posterior logit :math:`a s^2 + b s + c` with
:math:`a = -\frac{1}{2\sigma^2} < 0`, :math:`b = \frac{\mu}{\sigma^2} + \lambda`,
:math:`c = \log\frac{\pi_1}{\pi_0} - \frac{\mu^2}{2\sigma^2} - \log\sigma
- \tfrac12\log 2\pi - \log\lambda`.

The logit is concave and peaks at :math:`s^* = \mu + \lambda\sigma^2`: the posterior
*decreases* for :math:`s > s^*`, so the map is **never monotone on** :math:`[0, \infty)`
(the well-known flaw that motivates the constrained calibrators; Kweon et al. 2022).
``is_monotone(params, 0, inf)`` is therefore always ``False``.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal.scoremodels._base import ScoreModel, class_prior, logit_prior, weighted_moments
from jaxcal.scoremodels._sites import observe_log_density, prior_site

__all__ = ["ManmathaParams", "ManmathaScoreModel"]

_HALF_LOG_2PI = 0.5 * jnp.log(2 * jnp.pi)


@pytree_dataclass
class ManmathaParams:
    """Negative-class exponential ``rate0``; positive-class ``N(mu1, sd1^2)``; prior ``pi1``.

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import ManmathaParams, ManmathaScoreModel
        >>> params = ManmathaScoreModel().fit(s, y)
        >>> isinstance(params, ManmathaParams), round(float(params.rate0), 4)  # 3 / 1.9
        (True, 1.5789)
    """

    rate0: jax.Array
    mu1: jax.Array
    sd1: jax.Array
    pi1: jax.Array


def _log_density(rate0, mu1, sd1, scores, labels) -> jax.Array:
    """``[n]`` :math:`\\log f_{y_i}(s_i)`: exponential negatives, Gaussian positives."""
    return jnp.where(
        labels == 1,
        dist.Normal(mu1, sd1).log_prob(scores),
        dist.Exponential(rate0).log_prob(jnp.maximum(scores, 0.0)),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class ManmathaScoreModel(ScoreModel[ManmathaParams]):
    """Exponential negatives, Gaussian positives (Manmatha, Rath & Feng 2001).

    Priors of :meth:`model`: :math:`\\lambda \\sim \\text{LogNormal}(0, \\text{rate\\_scale})`,
    :math:`\\mu \\sim \\mathcal N(0, \\text{loc\\_scale}^2)`,
    :math:`\\sigma \\sim \\text{HalfNormal}(\\text{scale\\_scale})`, :math:`\\pi_1 \\sim
    \\text{Beta}(1, 1)`.

    Args:
        rate_scale: prior scale of the negatives' log rate (> 0).
        loc_scale: prior standard deviation of the positives' mean (> 0).
        scale_scale: prior scale of the positives' standard deviation (> 0).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import ManmathaScoreModel
        >>> model = ManmathaScoreModel()
        >>> params = model.fit(s, y)
        >>> round(float(model.peak(params)), 3)  # the posterior decreases beyond this score
        2.226
        >>> bool(model.is_monotone(params, 0.2, 2.4))
        False
    """

    rate_scale: float = 3.0
    loc_scale: float = 10.0
    scale_scale: float = 10.0
    support = "nonnegative"
    fitted_class: ClassVar[type[ManmathaParams]] = ManmathaParams

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``s | 0 ~ Exp(rate0)``, ``s | 1 ~ N(mu1, sd1^2)``."""
        rate0 = numpyro.sample("rate0", dist.LogNormal(0.0, self.rate_scale))
        mu1 = numpyro.sample("mu1", dist.Normal(0.0, self.loc_scale))
        sd1 = numpyro.sample("sd1", dist.HalfNormal(self.scale_scale))
        if scores is not None:
            logp = _log_density(rate0, mu1, sd1, jnp.asarray(scores), labels)
            observe_log_density(logp, sample_weight)

    def monotone_bound(self, rate0, sd1, lo, hi) -> jax.Array:
        r"""Smallest ``mu1`` for which the map is non-decreasing on ``[lo, hi]``.

        The derivative :math:`2as + b = (\mu - s)/\sigma^2 + \lambda` decreases in
        :math:`s`, so it is :math:`\ge 0` on the interval iff at ``hi``:
        :math:`\mu \ge hi - \lambda\sigma^2` (the peak :math:`s^*` at or beyond ``hi``).
        """
        del lo
        return hi - rate0 * sd1**2

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> ManmathaParams:
        r"""Priors of :meth:`model`; ``monotone``: ``mu1 = monotone_bound + excess``. Induced
        prior: :meth:`model`'s, conditioned on the map being non-decreasing on the training
        range (never on :math:`[0, \infty)`: every draw turns down above its peak
        :math:`s^* \ge hi`). Forcing the peak beyond the largest score is a strong
        assumption when positives are centred inside the range; pass ``monotone=False``
        for Manmatha's original model."""
        rate0 = numpyro.sample("rate0", dist.LogNormal(0.0, self.rate_scale))
        sd1 = numpyro.sample("sd1", dist.HalfNormal(self.scale_scale))
        bound = self.monotone_bound(rate0, sd1, lo, hi)
        mu1 = prior_site("mu1", dist.Normal(0.0, self.loc_scale), bound, monotone=monotone)
        return ManmathaParams(rate0, mu1, sd1, pi1)

    def class_log_density(self, params: ManmathaParams, scores, labels) -> jax.Array:
        r"""``[n]`` :math:`\log f_{y_i}(s_i)`."""
        p = params
        return _log_density(p.rate0, p.mu1, p.sd1, scores, labels)

    def fit_weighted(self, scores, w1, w0) -> ManmathaParams:
        """Closed-form weighted MLE."""
        rate0 = jnp.sum(w0) / jnp.sum(w0 * scores)
        mu1, v1 = weighted_moments(scores, w1)
        return ManmathaParams(rate0, mu1, jnp.sqrt(v1), class_prior(w1, w0))

    def calibration_map(self, params: ManmathaParams) -> jax.Array:
        """``[a, b, c]`` of the posterior logit ``a s^2 + b s + c`` (``a < 0``)."""
        p = params
        var = p.sd1**2
        a = -0.5 / var
        b = p.mu1 / var + p.rate0
        c = (
            logit_prior(p.pi1)
            - 0.5 * p.mu1**2 / var
            - jnp.log(p.sd1)
            - _HALF_LOG_2PI
            - jnp.log(p.rate0)
        )
        return jnp.stack([a, b, c], axis=-1)

    def log_odds(self, params: ManmathaParams, scores: ArrayLike) -> jax.Array:
        s = jnp.asarray(scores)
        a, b, c = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return (a * s + b) * s + c

    def peak(self, params: ManmathaParams) -> jax.Array:
        """:math:`s^* = \\mu + \\lambda\\sigma^2`, where the posterior starts to decrease."""
        return params.mu1 + params.rate0 * params.sd1**2

    def is_monotone(self, params: ManmathaParams, lo: ArrayLike, hi: ArrayLike) -> jax.Array:
        """``2 a s + b >= 0`` at both ends; always ``False`` for ``hi = inf``."""
        a, b, _ = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return (2 * a * lo + b >= 0) & (2 * a * jnp.asarray(hi, a.dtype) + b >= 0)
