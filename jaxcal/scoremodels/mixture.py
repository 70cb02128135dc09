r"""K-component Gaussian mixture per class.

:math:`s \mid y=k \sim \sum_{j=1}^K \rho_{kj}\,\mathcal N(\mu_{kj}, \sigma_{kj}^2)`. The
posterior logit :math:`\log\frac{\pi_1}{\pi_0} + \operatorname{logsumexp}_j(\log\rho_{1j} +
\log\mathcal N(s; \mu_{1j}, \sigma_{1j}^2)) - \operatorname{logsumexp}_j(\ldots)_0` is not a
linear-logit map; it is computed in log space.

Weighted EM per class (responsibilities times the class weights), from components placed
at weighted quantiles with the pooled standard deviation, for a fixed number of
iterations or until the weighted log-likelihood changes by less than ``tol`` (relative).
Standard deviations are floored at ``min_sd_fraction`` times the class standard deviation
to avoid EM's collapse onto single points.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import logsumexp
from jax.typing import ArrayLike
from numpyro.distributions import constraints

from jaxcal._pytree import pytree_dataclass
from jaxcal.scoremodels._base import ScoreModel, class_prior, logit_prior, weighted_moments
from jaxcal.scoremodels._sites import class_sites, observe_scores

__all__ = ["GaussianMixtureParams", "GaussianMixtureScoreModel", "weighted_gmm_em"]


@pytree_dataclass
class GaussianMixtureParams:
    """Per-class mixture weights ``rho_k`` ``[K]``, means ``mu_k`` ``[K]``, sds ``sd_k`` ``[K]``,
    class prior ``pi1``, and the EM iteration counts / convergence (max over classes).

    Example:
        >>> import numpy as np
        >>> s = np.array([0.2, 0.6, 0.9, 1.1, 1.6, 2.4]); y = np.array([0, 0, 1, 0, 1, 1])
        >>> from jaxcal.scoremodels import GaussianMixtureParams, GaussianMixtureScoreModel
        >>> params = GaussianMixtureScoreModel(n_components=2).fit(s, y)
        >>> isinstance(params, GaussianMixtureParams), params.mu1.shape  # K means per class
        (True, (2,))
    """

    rho0: jax.Array
    mu0: jax.Array
    sd0: jax.Array
    rho1: jax.Array
    mu1: jax.Array
    sd1: jax.Array
    pi1: jax.Array
    n_iter: jax.Array
    converged: jax.Array


def _component_logpdf(s, rho, mu, sd):
    """``[n, K]`` log(rho_j N(s; mu_j, sd_j^2))."""
    z = (s[:, None] - mu) / sd
    return jnp.log(rho) - 0.5 * z**2 - jnp.log(sd) - 0.5 * jnp.log(2 * jnp.pi)


def _weighted_quantiles(x, w, qs):
    order = jnp.argsort(x)
    xs, ws = x[order], w[order]
    cdf = jnp.cumsum(ws) / jnp.sum(ws)
    idx = jnp.clip(jnp.searchsorted(cdf, qs), 0, x.shape[0] - 1)
    return xs[idx]


def weighted_gmm_em(
    x,
    w,
    n_components: int,
    *,
    max_iter: int = 500,
    tol: float = 1e-10,
    min_sd_fraction: float = 1e-3,
):
    """Weighted EM for a 1-D Gaussian mixture: ``(rho, mu, sd, n_iter, converged)``.

    Args:
        x: ``[n]`` values.
        w: ``[n]`` non-negative weights.
        n_components: number of components ``K`` (static).
        max_iter: cap on the EM iterations.
        tol: stop when an iteration changes the weighted log-likelihood by at most ``tol``
            (relative).
        min_sd_fraction: floor on the component sds, as a fraction of the overall sd.

    Returns:
        ``[K]`` weights ``rho``, means ``mu`` and sds ``sd``; the iterations done and
        whether the last change was within ``tol``.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.scoremodels import weighted_gmm_em
        >>> x = jnp.array([-2.1, -1.9, -2.0, 2.0, 2.1, 1.9])
        >>> rho, mu, sd, n_iter, converged = weighted_gmm_em(x, jnp.ones(6), 2)
        >>> mu.round(3).tolist(), rho.round(3).tolist()
        ([-2.0, 2.0], [0.5, 0.5])
    """
    K = n_components
    mean, var = weighted_moments(x, w)
    sd_all = jnp.sqrt(var)
    floor = min_sd_fraction * sd_all
    mu = _weighted_quantiles(x, w, (jnp.arange(K) + 0.5) / K)
    sd = jnp.full(K, sd_all / K)
    rho = jnp.full(K, 1.0 / K)
    W = jnp.sum(w)

    def loglik(rho, mu, sd):
        return jnp.sum(w * logsumexp(_component_logpdf(x, rho, mu, sd), axis=1))

    def em(params):
        rho, mu, sd = params
        lp = _component_logpdf(x, rho, mu, sd)
        r = jnp.exp(lp - logsumexp(lp, axis=1, keepdims=True)) * w[:, None]
        nk = jnp.maximum(jnp.sum(r, axis=0), jnp.finfo(x.dtype).tiny)
        mu = jnp.sum(r * x[:, None], axis=0) / nk
        sd = jnp.sqrt(jnp.sum(r * (x[:, None] - mu) ** 2, axis=0) / nk)
        return nk / W, mu, jnp.maximum(sd, floor)

    def cond(state):
        _, ll, prev, it = state
        return (jnp.abs(ll - prev) > tol * jnp.abs(ll)) & (it < max_iter)

    def body(state):
        params, ll, _, it = state
        params = em(params)
        return params, loglik(*params), ll, it + 1

    p1 = em((rho, mu, sd))
    init = (p1, loglik(*p1), loglik(rho, mu, sd), jnp.int32(1))
    (rho, mu, sd), ll, prev, it = jax.lax.while_loop(cond, body, init)
    return rho, mu, sd, it, jnp.abs(ll - prev) <= tol * jnp.abs(ll)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianMixtureScoreModel(ScoreModel[GaussianMixtureParams]):
    """A ``n_components``-Gaussian mixture per class.

    Priors of :meth:`model`: :math:`\\rho_k \\sim \\text{Dirichlet}(\\mathbf 1)`,
    :math:`\\mu_{kj} \\sim \\mathcal N(0, \\text{loc\\_scale}^2)`,
    :math:`\\sigma_{kj} \\sim \\text{HalfNormal}(\\text{scale\\_scale})`, :math:`\\pi_1 \\sim
    \\text{Beta}(1, 1)` (components are exchangeable: expect label switching in MCMC).

    Args:
        n_components: number of components ``K`` per class.
        loc_scale: prior standard deviation of the component means (> 0).
        scale_scale: prior scale of the component standard deviations (> 0).
        max_iter, tol: EM stopping rule (at most ``max_iter`` iterations; stop when the
            weighted log-likelihood changes by at most ``tol``, relative).
        min_sd_fraction: floor on component sds (fraction of the class sd, > 0).

    Example:
        >>> import numpy as np
        >>> from jaxcal.scoremodels import GaussianMixtureScoreModel
        >>> s = np.array([-2.1, -1.9, -2.0, 2.0, 2.1, 1.9, 0.1, 0.3])
        >>> y = np.array([0, 0, 0, 0, 0, 0, 1, 1])
        >>> model = GaussianMixtureScoreModel(n_components=2)
        >>> params = model.fit(s, y)
        >>> params.mu0.round(3).tolist()  # the negatives' two clusters
        [-2.0, 2.0]
        >>> model.predict(params, [-2.0, 0.1, 2.0]).round(2).tolist()
        [0.0, 1.0, 0.0]
    """

    n_components: int = 2
    loc_scale: float = 10.0
    scale_scale: float = 10.0
    max_iter: int = 500
    tol: float = 1e-10
    min_sd_fraction: float = 1e-3
    fitted_class: ClassVar[type[GaussianMixtureParams]] = GaussianMixtureParams
    monotone_parameterisation = False  # no parameterisation makes every mixture map monotone

    def _observe_scores(self, scores, labels, sample_weight, n: int) -> None:
        """:meth:`model`'s ``scores | y ~ mixture_y``: mixture weights ``rho`` per class,
        component means ``mu`` and sds ``sd`` ``[2, K]``."""
        K = self.n_components
        (rho,) = class_sites(rho=dist.Dirichlet(jnp.ones(K)))
        mu = numpyro.sample("mu", dist.Normal(0.0, self.loc_scale).expand([2, K]).to_event(2))
        sd = numpyro.sample("sd", dist.HalfNormal(self.scale_scale).expand([2, K]).to_event(2))
        d = dist.MixtureSameFamily(
            dist.Categorical(probs=rho[labels]), dist.Normal(mu[labels], sd[labels])
        )
        if scores is not None:
            observe_scores(d, scores, sample_weight, n, plate="data_scores")

    def bayes_prior(self, pi1, *, lo, hi, monotone: bool) -> GaussianMixtureParams:
        r"""Priors of :meth:`model` with the component means *ordered* within each class.

        ``mu`` is sampled on ``constraints.ordered_vector`` with the factor of the i.i.d.
        :math:`\mathcal N(0, \text{loc\_scale}^2)` prior: the induced prior is that prior
        restricted to :math:`\mu_{k1} < \dots < \mu_{kK}` (times :math:`K!`), which removes
        label switching (so R-hat and ESS of the component parameters are meaningful); the
        calibration map is invariant to the order, so its posterior is unchanged. There is no
        monotone parameterisation (``monotone`` must be ``False``): the log-density ratio of
        two mixtures is not monotone in general, and the set of monotone maps is not a simple
        bound on one parameter. ``diagnostics()`` reports the share of monotone draws.
        """
        del lo, hi
        if monotone:
            raise ValueError("Gaussian mixtures have no monotone parameterisation.")
        K = self.n_components
        (rho,) = class_sites(rho=dist.Dirichlet(jnp.ones(K)))
        ordered = dist.ImproperUniform(constraints.ordered_vector, (2,), (K,))
        mu = numpyro.sample("mu", ordered)
        numpyro.factor("mu_prior", jnp.sum(dist.Normal(0.0, self.loc_scale).log_prob(mu)))
        sd = numpyro.sample("sd", dist.HalfNormal(self.scale_scale).expand([2, K]).to_event(2))
        names = ("rho0", "mu0", "sd0", "rho1", "mu1", "sd1")
        values = (rho[0], mu[0], sd[0], rho[1], mu[1], sd[1])
        p = {n: numpyro.deterministic(n, v) for n, v in zip(names, values, strict=True)}
        zero = jnp.zeros(jnp.shape(pi1), jnp.int32)
        return GaussianMixtureParams(**p, pi1=pi1, n_iter=zero, converged=zero == 0)

    def class_log_density(self, params: GaussianMixtureParams, scores, labels) -> jax.Array:
        r"""``[n]`` :math:`\log f_{y_i}(s_i)` (log-sum-exp over components)."""
        p = params
        l1 = logsumexp(_component_logpdf(scores, p.rho1, p.mu1, p.sd1), axis=1)
        l0 = logsumexp(_component_logpdf(scores, p.rho0, p.mu0, p.sd0), axis=1)
        return jnp.where(labels == 1, l1, l0)

    def fit_weighted(self, scores, w1, w0) -> GaussianMixtureParams:
        """Weighted EM per class (pure; jit/vmap-able)."""
        kw = dict(max_iter=self.max_iter, tol=self.tol, min_sd_fraction=self.min_sd_fraction)
        # both classes in one (vmapped) EM loop: half the program to compile; a batched while
        # loop keeps each class's converged iterate unchanged
        em = lambda w: weighted_gmm_em(scores, w, self.n_components, **kw)  # noqa: E731
        rho, mu, sd, it, conv = jax.vmap(em)(jnp.stack([w0, w1]))
        return GaussianMixtureParams(
            rho[0], mu[0], sd[0], rho[1], mu[1], sd[1], class_prior(w1, w0), jnp.max(it),
            jnp.all(conv),
        )  # fmt: skip

    def log_odds(self, params: GaussianMixtureParams, scores: ArrayLike) -> jax.Array:
        s = jnp.asarray(scores)
        flat = jnp.reshape(s, (-1,))
        p = params
        l1 = logsumexp(_component_logpdf(flat, p.rho1, p.mu1, p.sd1), axis=1)
        l0 = logsumexp(_component_logpdf(flat, p.rho0, p.mu0, p.sd0), axis=1)
        return jnp.reshape(logit_prior(p.pi1) + l1 - l0, s.shape)

    def is_monotone(
        self, params: GaussianMixtureParams, lo: ArrayLike, hi: ArrayLike, *, n_grid: int = 4097
    ) -> jax.Array:
        """Numerical check on a uniform grid of ``n_grid`` points (no closed form for
        mixtures): ``log_odds`` non-decreasing between consecutive grid points."""
        grid = jnp.linspace(lo, hi, n_grid)
        z = self.log_odds(params, grid)
        return jnp.all(jnp.diff(z) >= -1e-12 * (1 + jnp.abs(z[1:])))
