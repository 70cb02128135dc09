r"""Kanoulas et al. (SIGIR 2010) score model: negatives Gamma, positives Gaussian.

:math:`s \mid y=0 \sim \text{Gamma}(\alpha, \beta)` (shape, rate),
:math:`s \mid y=1 \sim \mathcal N(\mu, \sigma^2)`, scores :math:`s > 0`. Posterior logit
:math:`a s^2 + b s + c \log s + d` with :math:`a = -\frac{1}{2\sigma^2}`,
:math:`b = \frac{\mu}{\sigma^2} + \beta`, :math:`c = 1 - \alpha`,
:math:`d = \log\frac{\pi_1}{\pi_0} - \frac{\mu^2}{2\sigma^2} - \log\sigma
- \tfrac12\log 2\pi - \alpha\log\beta + \log\Gamma(\alpha)`.

It is non-decreasing at :math:`s` iff :math:`g(s) = 2 a s^2 + b s + c \ge 0`; :math:`g` is
concave (:math:`a < 0`), so on an interval the ends suffice. Like Manmatha's model it is
never monotone on :math:`[0, \infty)`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import gammaln
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal.scoremodels._base import ScoreModel, class_prior, logit_prior, weighted_moments
from jaxcal.scoremodels._sites import observe_log_density, prior_site
from jaxcal.scoremodels.gamma import gamma_mle

__all__ = ["KanoulasParams", "KanoulasScoreModel"]

_HALF_LOG_2PI = 0.5 * jnp.log(2 * jnp.pi)


@pytree_dataclass
class KanoulasParams:
    """Negative-class ``Gamma(alpha0, beta0)``; positive-class ``N(mu1, sd1^2)``; ``pi1``.

    ``n_iter`` / ``converged`` report the Newton iterations of the Gamma shape.

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import KanoulasParams, KanoulasScoreModel
        >>> params = KanoulasScoreModel().fit(s, y)
        >>> isinstance(params, KanoulasParams), round(float(params.mu1), 4)
        (True, 1.6333)
    """

    alpha0: jax.Array
    beta0: jax.Array
    mu1: jax.Array
    sd1: jax.Array
    pi1: jax.Array
    n_iter: jax.Array
    converged: jax.Array


def _log_density(alpha0, beta0, mu1, sd1, scores, labels) -> jax.Array:
    """``[n]`` :math:`\\log f_{y_i}(s_i)`: Gamma negatives, Gaussian positives."""
    s_neg = jnp.where(labels == 0, scores, 1.0)  # keeps the unused branch finite
    return jnp.where(
        labels == 1,
        dist.Normal(mu1, sd1).log_prob(scores),
        dist.Gamma(alpha0, beta0).log_prob(s_neg),
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class KanoulasScoreModel(ScoreModel[KanoulasParams]):
    """Gamma negatives, Gaussian positives (Kanoulas, Dai, Pavlu & Aslam 2010).

    Priors of :meth:`model`: :math:`\\alpha \\sim \\text{LogNormal}(0, \\text{shape\\_scale})`,
    :math:`\\beta \\sim \\text{LogNormal}(0, \\text{rate\\_scale})`,
    :math:`\\mu \\sim \\mathcal N(0, \\text{loc\\_scale}^2)`,
    :math:`\\sigma \\sim \\text{HalfNormal}(\\text{scale\\_scale})`, :math:`\\pi_1 \\sim
    \\text{Beta}(1, 1)`.

    Args:
        shape_scale: prior scale of the negatives' log shape (> 0).
        rate_scale: prior scale of the negatives' log rate (> 0).
        loc_scale: prior standard deviation of the positives' mean (> 0).
        scale_scale: prior scale of the positives' standard deviation (> 0).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import KanoulasScoreModel
        >>> model = KanoulasScoreModel()
        >>> params = model.fit(s, y)
        >>> model.predict(params, [0.5, 2.0]).round(2).tolist()
        [0.09, 0.96]
        >>> bool(model.is_monotone(params, 0.2, float("inf")))  # never on [0, inf)
        False
    """

    shape_scale: float = 2.0
    rate_scale: float = 3.0
    loc_scale: float = 10.0
    scale_scale: float = 10.0
    support = "positive"
    fitted_class: ClassVar[type[KanoulasParams]] = KanoulasParams

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``s | 0 ~ Gamma(alpha0, beta0)``, ``s | 1 ~ N(mu1, sd1^2)``."""
        alpha0 = numpyro.sample("alpha0", dist.LogNormal(0.0, self.shape_scale))
        beta0 = numpyro.sample("beta0", dist.LogNormal(0.0, self.rate_scale))
        mu1 = numpyro.sample("mu1", dist.Normal(0.0, self.loc_scale))
        sd1 = numpyro.sample("sd1", dist.HalfNormal(self.scale_scale))
        if scores is not None:
            logp = _log_density(alpha0, beta0, mu1, sd1, jnp.asarray(scores), labels)
            observe_log_density(logp, sample_weight)

    def monotone_bound(self, alpha0, beta0, sd1, lo, hi) -> jax.Array:
        r"""Smallest ``mu1`` for which the map is non-decreasing on ``[lo, hi]`` (``lo > 0``).

        :math:`s\,z'(s) = g(s) = 2as^2 + bs + c` with :math:`b = \mu/\sigma^2 + \beta`;
        :math:`g` is concave, so :math:`g \ge 0` on the interval iff at both ends, and at an
        end :math:`s > 0` this reads :math:`\mu \ge s + \sigma^2((\alpha - 1)/s - \beta)`
        (divide by :math:`s/\sigma^2 > 0`). The bound is the max over the two ends.
        """
        var = sd1**2
        end = lambda s: s + var * (alpha0 - 1.0) / s  # noqa: E731
        return jnp.maximum(end(lo), end(hi)) - var * beta0

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> KanoulasParams:
        r"""Priors of :meth:`model`; ``monotone``: ``mu1 = monotone_bound + excess`` (``mu1``
        enters :math:`b` linearly). Induced prior: :meth:`model`'s, conditioned on the map
        being non-decreasing on the training range ``[lo, hi]`` (the model is never monotone
        on :math:`[0, \infty)`; above ``hi`` a draw eventually decreases)."""
        alpha0 = numpyro.sample("alpha0", dist.LogNormal(0.0, self.shape_scale))
        beta0 = numpyro.sample("beta0", dist.LogNormal(0.0, self.rate_scale))
        sd1 = numpyro.sample("sd1", dist.HalfNormal(self.scale_scale))
        bound = self.monotone_bound(alpha0, beta0, sd1, lo, hi)
        mu1 = prior_site("mu1", dist.Normal(0.0, self.loc_scale), bound, monotone=monotone)
        zero = jnp.zeros(jnp.shape(pi1), jnp.int32)
        return KanoulasParams(alpha0, beta0, mu1, sd1, pi1, zero, zero == 0)

    def class_log_density(self, params: KanoulasParams, scores, labels) -> jax.Array:
        r"""``[n]`` :math:`\log f_{y_i}(s_i)`."""
        p = params
        return _log_density(p.alpha0, p.beta0, p.mu1, p.sd1, scores, labels)

    def fit_weighted(self, scores, w1, w0) -> KanoulasParams:
        """Weighted MLE: Newton on the Gamma shape, closed form for the Gaussian."""
        alpha0, beta0, it, conv = gamma_mle(scores, w0)
        mu1, v1 = weighted_moments(scores, w1)
        return KanoulasParams(alpha0, beta0, mu1, jnp.sqrt(v1), class_prior(w1, w0), it, conv)

    def calibration_map(self, params: KanoulasParams) -> jax.Array:
        """``[a, b, c, d]`` of the posterior logit ``a s^2 + b s + c log s + d``."""
        p = params
        var = p.sd1**2
        a = -0.5 / var
        b = p.mu1 / var + p.beta0
        c = 1.0 - p.alpha0
        d = (
            logit_prior(p.pi1)
            - 0.5 * p.mu1**2 / var
            - jnp.log(p.sd1)
            - _HALF_LOG_2PI
            - p.alpha0 * jnp.log(p.beta0)
            + gammaln(p.alpha0)
        )
        return jnp.stack([a, b, c, d], axis=-1)

    def log_odds(self, params: KanoulasParams, scores: ArrayLike) -> jax.Array:
        s = jnp.asarray(scores)
        a, b, c, d = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return (a * s + b) * s + c * jnp.log(s) + d

    def is_monotone(self, params: KanoulasParams, lo: ArrayLike, hi: ArrayLike) -> jax.Array:
        """``2 a s^2 + b s + c >= 0`` at both ends (concave in ``s``); ``False`` for
        ``hi = inf``."""
        a, b, c, _ = jnp.moveaxis(self.calibration_map(params), -1, 0)
        g = lambda s: (2 * a * s + b) * s + c  # noqa: E731
        hi = jnp.asarray(hi, a.dtype)
        g_hi = jnp.where(jnp.isinf(hi), -jnp.inf, g(jnp.where(jnp.isinf(hi), 1.0, hi)))
        return (g(jnp.asarray(lo, a.dtype)) >= 0) & (g_hi >= 0)
