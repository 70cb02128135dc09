r"""Gamma class-conditional score model: :math:`s \mid y=k \sim \text{Gamma}(\alpha_k, \beta_k)`.

Shape :math:`\alpha_k`, rate :math:`\beta_k`, scores :math:`s > 0` (``GammaCalibration``
fits it on shifted scores :math:`s' = s - s_{\min} + \text{shift}`). Posterior logit
(Kweon et al. 2022): :math:`a \log s + b s + c` with :math:`a = \alpha_1 - \alpha_0`,
:math:`b = \beta_0 - \beta_1`,
:math:`c = \log\frac{\pi_1 \beta_1^{\alpha_1}\Gamma(\alpha_0)}{\pi_0 \beta_0^{\alpha_0}
\Gamma(\alpha_1)}`.

Weighted MLE: the rate profiles out as :math:`\beta = \alpha / \bar s`; the shape solves
:math:`\log\alpha - \psi(\alpha) = \log \bar s - \overline{\log s}` (weighted means), by
Newton's method on :math:`1/\alpha` (Minka 2002, "Estimating a Gamma distribution") from
Minka's closed-form start, with digamma/trigamma; quadratically convergent.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.scipy.special import digamma, gammaln, polygamma
from jax.typing import ArrayLike

from jaxcal._lazy import lazy_module
from jaxcal._pytree import pytree_dataclass
from jaxcal.scoremodels._base import ScoreModel, class_prior, logit_prior
from jaxcal.scoremodels._sites import class_sites, observe_scores, prior_site

numpyro = lazy_module("numpyro")  # imported by the Bayesian methods only
dist = lazy_module("numpyro.distributions")

__all__ = ["GammaParams", "GammaScoreModel", "gamma_mle"]


@pytree_dataclass
class GammaParams:
    """Class-conditional Gamma shapes ``alpha_k``, rates ``beta_k`` and prior ``pi1``.

    ``n_iter`` / ``converged`` report the shape Newton iterations (max over the classes).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import GammaParams, GammaScoreModel
        >>> params = GammaScoreModel().fit(s, y)
        >>> isinstance(params, GammaParams), round(float(params.alpha0), 3)
        (True, 2.445)
    """

    alpha0: jax.Array
    beta0: jax.Array
    alpha1: jax.Array
    beta1: jax.Array
    pi1: jax.Array
    n_iter: jax.Array
    converged: jax.Array


def gamma_mle(x: jax.Array, w: jax.Array, *, max_iter: int = 50, tol: float = 1e-13):
    r"""Weighted Gamma MLE ``(alpha, beta, n_iter, converged)`` for ``x > 0`` (``w = 0`` rows
    are ignored and may hold any positive ``x``).

    Differentiable (``jvp`` and ``grad``) in ``x`` and ``w``: the shape solves
    :math:`\log\alpha - \psi(\alpha) = s` (:math:`s = \log\bar x - \overline{\log x}`)
    by Newton iterations on constant inputs, and carries the implicit derivative
    :math:`\dot\alpha = \dot s / (1/\alpha - \psi'(\alpha))`, never the iterations'.

    Args:
        x: ``[n]`` positive values.
        w: ``[n]`` non-negative weights.
        max_iter: cap on the Newton iterations.
        tol: stop when an iteration changes the shape by at most ``tol`` (relative), or
            when a step no longer shrinks while within the square root of the dtype's
            epsilon (Newton's steps are rounding noise there: in float32, the profile
            equation ``log a - digamma(a)`` cancels to a few digits at large shapes).

    Returns:
        ``(alpha, beta, n_iter, converged)``: shape, rate, iterations done, and whether the
        last change was within ``tol``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.scoremodels import gamma_mle
        >>> x = jnp.array([0.5, 1.0, 2.0, 4.0])
        >>> alpha, beta, n_iter, converged = gamma_mle(x, jnp.ones(4))
        >>> round(float(alpha), 3), round(float(alpha / beta), 4)  # the mean is alpha / beta
        (1.923, 1.875)
    """
    total = jnp.sum(w)
    mean = jnp.sum(w * x) / total
    mean_log = jnp.sum(w * jnp.log(x)) / total
    s_in = jnp.maximum(jnp.log(mean) - mean_log, jnp.finfo(x.dtype).tiny)  # > 0 by Jensen
    s = jax.lax.stop_gradient(s_in)
    alpha0 = (3.0 - s + jnp.sqrt((s - 3.0) ** 2 + 24.0 * s)) / (12.0 * s)

    def step(alpha):
        f = jnp.log(alpha) - digamma(alpha) - s
        df = 1.0 / alpha - polygamma(1, alpha)
        inv = 1.0 / alpha + f / (alpha**2 * df)  # Newton on 1/alpha (Minka)
        return 1.0 / inv

    noise = jnp.sqrt(jnp.finfo(x.dtype).eps)

    def done(alpha, prev, last):
        change = jnp.abs(alpha - prev)
        stalled = (change >= last) & (change <= noise * alpha)  # rounding noise
        return (change <= tol * alpha) | stalled

    def cond(state):
        alpha, prev, last, it = state
        return ~done(alpha, prev, last) & (it < max_iter)

    def body(state):
        alpha, prev, _, it = state
        return step(alpha), alpha, jnp.abs(alpha - prev), it + 1

    inf = jnp.asarray(jnp.inf, alpha0.dtype)
    alpha, prev, last, it = jax.lax.while_loop(
        cond, body, (step(alpha0), alpha0, inf, jnp.int32(1))
    )
    converged = done(alpha, prev, last)
    # the value of alpha, the derivative of the implicit function theorem
    alpha = alpha + (s_in - s) / (1.0 / alpha - polygamma(1, alpha))
    return alpha, alpha / mean, it, converged


@dataclasses.dataclass(frozen=True, kw_only=True)
class GammaScoreModel(ScoreModel[GammaParams]):
    """Gamma scores per class (the model behind Gamma calibration); scores must be > 0.

    Priors of :meth:`model` (weakly informative): :math:`\\alpha_k \\sim
    \\text{LogNormal}(0, \\text{shape\\_scale})`, :math:`\\beta_k \\sim \\text{LogNormal}(0,
    \\text{rate\\_scale})`, :math:`\\pi_1 \\sim \\text{Beta}(1, 1)`.

    Args:
        shape_scale: prior scale of the log shapes (> 0).
        rate_scale: prior scale of the log rates (> 0).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import GammaScoreModel
        >>> model = GammaScoreModel()
        >>> params = model.fit(s, y)
        >>> model.predict(params, [0.5, 2.0]).round(2).tolist()
        [0.06, 0.94]
        >>> model.calibration_map(params).round(2).tolist()  # [a, b, c] of a log s + b s + c
        [4.19, -0.2, 0.34]
    """

    shape_scale: float = 2.0
    rate_scale: float = 3.0
    support = "positive"
    fitted_class: ClassVar[type[GammaParams]] = GammaParams

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``scores | y ~ Gamma(alpha_y, beta_y)``, ``alpha`` and ``beta`` per
        class."""
        alpha, beta = class_sites(
            alpha=dist.LogNormal(0.0, self.shape_scale), beta=dist.LogNormal(0.0, self.rate_scale)
        )
        observe_scores(dist.Gamma(alpha[labels], beta[labels]), scores, sample_weight, n)

    def monotone_bound(self, alpha0, alpha1, beta1, lo, hi) -> jax.Array:
        r"""Smallest ``beta0`` for which the map is non-decreasing on ``[lo, hi]`` (``lo > 0``).

        The logit's derivative :math:`a/s + b` (:math:`a = \alpha_1 - \alpha_0`,
        :math:`b = \beta_0 - \beta_1`) is monotone in :math:`s`, so it is :math:`\ge 0` on the
        interval iff it is at both ends: :math:`\beta_0 \ge \beta_1 - \min(a/lo, a/hi)`.
        The rate must also be positive, so the bound is
        :math:`\max(0, \beta_1 - \min(a/lo, a/hi))`: a monotone :math:`\beta_0` exists for
        every :math:`(\alpha_0, \alpha_1, \beta_1)`.
        """
        a = alpha1 - alpha0
        return jnp.maximum(0.0, beta1 - jnp.minimum(a / lo, a / hi))

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> GammaParams:
        """Priors of :meth:`model`; ``monotone``: ``beta0 = monotone_bound + excess`` (the
        negative-class rate enters :math:`b` linearly). Induced prior: :meth:`model`'s,
        conditioned on the map being non-decreasing on the training range ``[lo, hi]``."""
        shape_prior = dist.LogNormal(0.0, self.shape_scale)
        rate_prior = dist.LogNormal(0.0, self.rate_scale)
        alpha0 = numpyro.sample("alpha0", shape_prior)
        alpha1 = numpyro.sample("alpha1", shape_prior)
        beta1 = numpyro.sample("beta1", rate_prior)
        bound = self.monotone_bound(alpha0, alpha1, beta1, lo, hi)
        beta0 = prior_site("beta0", rate_prior, bound, monotone=monotone)
        zero = jnp.zeros(jnp.shape(pi1), jnp.int32)
        return GammaParams(alpha0, beta0, alpha1, beta1, pi1, zero, zero == 0)

    def class_log_density(self, params: GammaParams, scores, labels) -> jax.Array:
        r"""``[n]`` :math:`\log f_{y_i}(s_i)`."""
        p = params
        alpha = jnp.where(labels == 1, p.alpha1, p.alpha0)
        beta = jnp.where(labels == 1, p.beta1, p.beta0)
        return dist.Gamma(alpha, beta).log_prob(scores)

    def fit_weighted(self, scores, w1, w0) -> GammaParams:
        """Weighted MLE per class (Newton on the shape; pure, jit/vmap-able)."""
        # both classes in one (vmapped) Newton loop: one copy of the digamma / trigamma code
        # to compile; a batched while loop keeps each class's converged iterate unchanged
        alpha, beta, it, conv = jax.vmap(gamma_mle, in_axes=(None, 0))(scores, jnp.stack([w0, w1]))
        return GammaParams(
            alpha[0], beta[0], alpha[1], beta[1], class_prior(w1, w0), jnp.max(it), jnp.all(conv)
        )

    def calibration_map(self, params: GammaParams) -> jax.Array:
        """``[a, b, c]`` of the posterior logit ``a log s + b s + c``."""
        p = params
        a = p.alpha1 - p.alpha0
        b = p.beta0 - p.beta1
        c = (
            logit_prior(p.pi1)
            + p.alpha1 * jnp.log(p.beta1)
            - p.alpha0 * jnp.log(p.beta0)
            + gammaln(p.alpha0)
            - gammaln(p.alpha1)
        )
        return jnp.stack([a, b, c], axis=-1)

    def log_odds(self, params: GammaParams, scores: ArrayLike) -> jax.Array:
        s = jnp.asarray(scores)
        a, b, c = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return a * jnp.log(s) + b * s + c

    def is_monotone(self, params: GammaParams, lo: ArrayLike, hi: ArrayLike) -> jax.Array:
        """Non-decreasing on ``[lo, hi]`` (``0 < lo``) iff ``a / s + b >= 0`` at both ends
        (``a / s + b`` is monotone in ``s``)."""
        a, b, _ = jnp.moveaxis(self.calibration_map(params), -1, 0)
        return (a / lo + b >= 0) & (a / hi + b >= 0)
