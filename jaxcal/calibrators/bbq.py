r"""Bayesian Binning into Quantiles (BBQ; Naeini, Cooper & Hauskrecht, AAAI 2015).

BBQ averages equal-frequency histogram models :math:`M_B` over a range of bin counts
:math:`B \in \{\lfloor N^{1/3} / C \rfloor, \dots, \lceil C N^{1/3} \rceil\}` (clipped to
``[1, N]``; the paper uses :math:`C = 10`). Each model is scored by its Bayesian (BDeu)
marginal likelihood with equivalent sample size :math:`N'` (default 2) and a Beta prior per
bin centred on the bin's mid score :math:`p_b`, :math:`\alpha_b = \tfrac{N'}{B} p_b`,
:math:`\beta_b = \tfrac{N'}{B}(1 - p_b)`:

.. math::  \log P(D \mid M_B) = \sum_{b=1}^{B} \Big[
    \log\Gamma(\tfrac{N'}{B}) - \log\Gamma(N_b + \tfrac{N'}{B})
    + \log\Gamma(m_b + \alpha_b) - \log\Gamma(\alpha_b)
    + \log\Gamma(n_b + \beta_b) - \log\Gamma(\beta_b) \Big],

with :math:`N_b` the (weighted) count in bin :math:`b`, :math:`m_b` its positives and
:math:`n_b = N_b - m_b`. With a uniform prior over models the prediction is

.. math::  P(y = 1 \mid s) = \sum_B \frac{e^{\ell_B}}{\sum_{B'} e^{\ell_{B'}}}\,
    \frac{m_{b(s)} + \alpha_{b(s)}}{N_{b(s)} + N'/B},
    \qquad \ell_B = \log P(D \mid M_B),

where the normalised weights are computed by ``logsumexp`` (never exponentiating a summed
log-likelihood). All models are evaluated at once (``vmap`` over :math:`B`, bins padded to
the largest :math:`B`) from one sort and two cumulative sums: ``O(N log N + M B_max)``.

Choices: bins are equal-frequency in the *sorted training scores* with ties kept in one bin
(a tied sample can give empty bins, which contribute a factor 1). The bin's mid score
:math:`p_b` is the midpoint of its score interval, the outer bins reaching to 0 and 1 when
all scores lie in [0, 1]; otherwise scores are treated as logits and
:math:`p_b = \sigma(\text{midpoint})`, the outer bins reaching to the training min / max.
Loss-weighted targets enter the Beta-binomial counts as weighted sums: bin :math:`b` has
:math:`N_b = \sum w_i` and :math:`m_b = \min(\sum w_i t_i, N_b)`, so under the IPS loss
(:math:`t_i = Y_i / \omega_i`) a click counts :math:`1/\omega_i` times; the clip acts per
bin, not per sample (a per-sample clip would turn IPS back into the naive fit).

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.uniform(size=5000)
    >>> y = (rng.uniform(size=5000) < p ** 2).astype(int)
    >>> cal = jaxcal.BBQ().fit(p, y)
    >>> probs = cal.predict(np.array([0.1, 0.5, 0.9]))  # close to 0.01, 0.25, 0.81
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from jax.typing import ArrayLike

import jaxcal.debias.losses  # noqa: F401  (import order: debias before calibrators._base)
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.calibrators._base import FittedCalibrator, maybe_check_scores, prepare_fit

__all__ = ["BBQ", "FittedBBQ", "bbq_bin_counts"]


def bbq_bin_counts(n: int, c: float) -> np.ndarray:
    r"""The bin counts :math:`B` of the BBQ models for ``n`` training points."""
    root = n ** (1.0 / 3.0)
    lo = max(1, int(np.floor(root / c)))
    hi = max(lo, min(n, int(np.ceil(c * root))))
    return np.arange(lo, hi + 1)


@functools.partial(jax.jit, static_argnames=("b_max", "logit_scale"))
def _fit_bbq(s, t, w, n_bins, ess, *, b_max: int, logit_scale: bool):
    n = s.shape[0]
    order = jnp.argsort(s)
    ss = s[order]
    tt = t[order]  # IPS targets may exceed 1; m_b is clipped per bin below
    ww = w[order]
    cw = jnp.concatenate([jnp.zeros(1, w.dtype), jnp.cumsum(ww)])
    cm = jnp.concatenate([jnp.zeros(1, w.dtype), jnp.cumsum(ww * tt)])
    lo_all = ss[0] if logit_scale else jnp.zeros((), s.dtype)
    hi_all = ss[-1] if logit_scale else jnp.ones((), s.dtype)
    k = jnp.arange(1, b_max)

    def one(B):
        valid_edge = k < B
        pos = jnp.minimum((k * n) // B, n - 1)
        edges = jnp.where(valid_edge, ss[pos], jnp.inf)  # [b_max - 1], padded with +inf
        cut = jnp.searchsorted(ss, edges, side="left")  # points below each edge
        bounds = jnp.concatenate([jnp.zeros(1, cut.dtype), cut, jnp.full(1, n, cut.dtype)])
        bounds = jnp.where(jnp.arange(b_max + 1) >= B, n, bounds)
        N_b = cw[bounds[1:]] - cw[bounds[:-1]]
        m_b = jnp.clip(cm[bounds[1:]] - cm[bounds[:-1]], 0.0, N_b)
        lo = jnp.concatenate([lo_all[None], edges])
        hi = jnp.concatenate([edges, hi_all[None]])
        hi = jnp.where(jnp.arange(b_max) == B - 1, hi_all, hi)
        mid = 0.5 * (lo + jnp.where(jnp.isfinite(hi), hi, lo))
        p = jax.nn.sigmoid(mid) if logit_scale else mid
        p = jnp.clip(p, 1e-6, 1.0 - 1e-6)  # keep the Beta prior proper at 0 / 1
        a0 = ess / B
        alpha, beta = a0 * p, a0 * (1.0 - p)
        term = (
            gammaln(a0)
            - gammaln(N_b + a0)
            + gammaln(m_b + alpha)
            - gammaln(alpha)
            + gammaln(N_b - m_b + beta)
            - gammaln(beta)
        )
        used = jnp.arange(b_max) < B
        log_ml = jnp.sum(jnp.where(used, term, 0.0))
        theta = jnp.where(used, (m_b + alpha) / (N_b + a0), 0.0)
        return edges, theta, log_ml

    edges, theta, log_ml = jax.vmap(one)(n_bins)
    log_weight = log_ml - jax.nn.logsumexp(log_ml)
    return edges, theta, log_ml, log_weight


@pytree_dataclass
class FittedBBQ(FittedCalibrator):
    """Fitted BBQ: an ensemble of equal-frequency histograms with posterior weights.

    Attributes:
        edges: ``[M, B_max - 1]`` inner edges of each model (padded with ``+inf``).
        theta: ``[M, B_max]`` posterior-mean probability of each bin (0 on padding).
        log_marginal_likelihood: ``[M]`` BDeu log marginal likelihood of each model.
        log_weight: ``[M]`` normalised log posterior weight of each model.
        n_bins: ``[M]`` bin count of each model.
    """

    edges: jax.Array
    theta: jax.Array
    log_marginal_likelihood: jax.Array
    log_weight: jax.Array
    n_bins: jax.Array
    logit_scale: bool = static_field(default=False)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Posterior-weighted average of the models' bin probabilities."""
        s = jnp.asarray(maybe_check_scores(scores)).astype(self.edges.dtype)
        flat = s.reshape(-1)

        def one(e, th):
            return th[jnp.searchsorted(e, flat, side="right")]

        per_model = jax.vmap(one)(self.edges, self.theta)  # [M, n]
        return jnp.sum(jnp.exp(self.log_weight)[:, None] * per_model, axis=0).reshape(s.shape)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BBQ:
    """Bayesian Binning into Quantiles estimator (Naeini et al. 2015).

    Args:
        c: model range constant :math:`C` (bin counts from :math:`N^{1/3}/C` to
            :math:`C N^{1/3}`).
        equivalent_sample_size: BDeu prior strength :math:`N'`.
        score_scale: ``"auto"`` (probability if all training scores lie in [0, 1], else
            logit), ``"probability"`` or ``"logit"``: how bin mid scores become prior means.
    """

    c: float = 10.0
    equivalent_sample_size: float = 2.0
    score_scale: str = "auto"

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> FittedBBQ:
        """Score all binning models and store them with their posterior weights.

        Raises:
            ValueError: on bad inputs or hyperparameters.
        """
        if not (np.isfinite(self.c) and self.c >= 1):
            raise ValueError(f"c must be >= 1; got {self.c!r}.")
        if not (np.isfinite(self.equivalent_sample_size) and self.equivalent_sample_size > 0):
            raise ValueError(
                f"equivalent_sample_size must be > 0; got {self.equivalent_sample_size!r}."
            )
        if self.score_scale not in ("auto", "probability", "logit"):
            raise ValueError(
                f"score_scale must be 'auto', 'probability' or 'logit'; got {self.score_scale!r}."
            )
        d = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        in_unit = bool((d.scores >= 0).all() and (d.scores <= 1).all())
        if self.score_scale == "probability" and not in_unit:
            raise ValueError("score_scale='probability' needs scores in [0, 1].")
        logit = self.score_scale == "logit" or (self.score_scale == "auto" and not in_unit)
        n_bins = bbq_bin_counts(d.scores.shape[0], float(self.c))
        dtype = jnp.result_type(float)
        edges, theta, log_ml, log_w = _fit_bbq(
            *(jnp.asarray(a, dtype) for a in (d.scores, d.targets, d.weights)),
            jnp.asarray(n_bins),
            jnp.asarray(self.equivalent_sample_size, dtype),
            b_max=int(n_bins[-1]),
            logit_scale=logit,
        )
        return FittedBBQ(
            edges=edges,
            theta=theta,
            log_marginal_likelihood=log_ml,
            log_weight=log_w,
            n_bins=jnp.asarray(n_bins),
            logit_scale=logit,
        )
