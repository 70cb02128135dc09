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
log-likelihood). All models are evaluated at once, one entry per (model, bin) pair, from one
sort and two cumulative sums: ``O(N log N + \sum_B B)``. The weighted average of the models
is one step map over the union of their edges (every edge is a sorted training score, so a
difference array over sorted positions and a cumulative sum build it without another sort):
prediction is one binary search per score, ``O(log N)``.

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

from jaxcal import _shapes
from jaxcal._fitdata import FitData
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._knots import cummax, cumsum
from jaxcal.calibrators._scaling import (
    ORDER,
    ScoreScaling,
    _ldexp_traced,
    fit_scaling,
    identity_scaling,
)
from jaxcal.calibrators.histogram import step_map

__all__ = ["BBQ", "FittedBBQ", "bbq_bin_counts"]


def bbq_bin_counts(n: int, c: float) -> np.ndarray:
    r"""The bin counts :math:`B` of the BBQ models for ``n`` training points."""
    root = n ** (1.0 / 3.0)
    lo = max(1, int(np.floor(root / c)))
    hi = max(lo, min(n, int(np.ceil(c * root))))
    return np.arange(lo, hi + 1)


def _slots(n_bins: np.ndarray, size: int, c: float) -> tuple[int, int]:
    """How many models and (model, bin) pairs the program holds: bounds that hold for every
    ``n`` of the bucket of ``size`` points (no model has more bins than ``B_top``, the
    largest count at ``size`` points), so that one program serves the whole bucket; the
    exact counts when padding is off."""
    if not _shapes.padding_enabled():
        return n_bins.shape[0], int(n_bins.sum())
    top = int(bbq_bin_counts(size, c)[-1])
    return _shapes.padded_size(top), _shapes.padded_size(top * (top + 1) // 2)


def _model_layout(n_bins: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Host arrays of the (model, bin) pairs, model by model, padded to ``size`` pairs:
    each pair's model index (``M`` on padding) and bin index (0 on padding)."""
    model = np.repeat(np.arange(n_bins.shape[0]), n_bins)
    first = np.repeat(np.cumsum(n_bins) - n_bins, n_bins)
    bin_index = np.arange(model.shape[0]) - first
    return _shapes.pad_axis(model, size, n_bins.shape[0]), _shapes.pad_axis(bin_index, size, 0)


@functools.partial(jit, static_argnames=("logit_scale",))
def _fit_bbq(s, t, w, n, n_bins, m, model, bin_index, ess, scaling, unit, *, logit_scale: bool):
    """Every model's score and bins, and their posterior-weighted average as a step map.

    The scores are transformed, :math:`s' = s\\,2^{-k} - c` (``scaling``,
    ``jaxcal.calibrators._scaling``): bins are cut in :math:`s'`, and the bin mid scores of
    the prior are mapped back to scores, :math:`(s'_{mid} + c)\\,2^k`. ``unit``: the ends 0
    and 1 of the probability scale, transformed.

    ``s, t, w`` hold ``n`` real points, then padding (copies of the largest score with zero
    weight, so the first ``n`` sorted scores are the real ones). ``n_bins`` holds the bin
    counts of the ``m`` models, then padding; the pairs ``(model, bin_index)`` list every
    bin of every model, model by model, then padding pairs of model ``m``.

    Returns per pair its bin's lower edge (the data minimum or 0 for the first bin) and
    ``theta``; per model the log marginal likelihood and the normalised log weight; the
    sorted scores with the cumulative average right of each position and whether an edge
    sits there (see ``_ensemble_table``); and the average left of every edge.
    """
    order = jnp.argsort(s)
    ss = s[order]
    tt = t[order]  # IPS targets may exceed 1; m_b is clipped per bin below
    ww = w[order]
    cw = jnp.concatenate([jnp.zeros(1, w.dtype), cumsum(ww)])
    cm = jnp.concatenate([jnp.zeros(1, w.dtype), cumsum(ww * tt)])
    # points below ss[i]: the first position of its tie run
    new_run = jnp.concatenate([jnp.ones(1, bool), ss[1:] != ss[:-1]])
    run_start = cummax(jnp.where(new_run, jnp.arange(ss.shape[0]), 0))
    lo_all = ss[0] if logit_scale else unit[0]
    hi_all = ss[n - 1] if logit_scale else unit[1]

    n_slots = n_bins.shape[0]
    real = model < m
    B = n_bins[jnp.minimum(model, n_slots - 1)]
    has_lo, has_hi = bin_index > 0, bin_index + 1 < B
    pos_lo = jnp.minimum((bin_index * n) // B, n - 1)  # the bin's lower edge is ss[pos_lo]
    pos_hi = jnp.minimum(((bin_index + 1) * n) // B, n - 1)
    cut_lo = jnp.where(has_lo, run_start[pos_lo], 0)  # points below each edge
    cut_hi = jnp.where(has_hi, run_start[pos_hi], n)
    N_b = cw[cut_hi] - cw[cut_lo]
    m_b = jnp.clip(cm[cut_hi] - cm[cut_lo], 0.0, N_b)
    lo = jnp.where(has_lo, ss[pos_lo], lo_all)
    mid = 0.5 * (lo + jnp.where(has_hi, ss[pos_hi], hi_all))
    mid = _ldexp_traced(mid + scaling.shift.astype(s.dtype), scaling.exponent)  # a score
    p = jax.nn.sigmoid(mid) if logit_scale else mid
    p = jnp.clip(p, 1e-6, 1.0 - 1e-6)  # keep the Beta prior proper at 0 / 1
    a0 = ess / B
    alpha, beta = a0 * p, a0 * (1.0 - p)
    # one gammaln of all six arguments: a single copy of its long expansion to compile
    args = jnp.stack([a0, N_b + a0, m_b + alpha, alpha, N_b - m_b + beta, beta])
    lg = gammaln(args)
    term = lg[0] - lg[1] + lg[2] - lg[3] + lg[4] - lg[5]
    log_ml = jax.ops.segment_sum(
        jnp.where(real, term, 0.0), model, num_segments=n_slots, indices_are_sorted=True
    )
    log_ml = jnp.where(jnp.arange(n_slots) < m, log_ml, -jnp.inf)
    log_weight = log_ml - jax.nn.logsumexp(log_ml)
    theta = (m_b + alpha) / (N_b + a0)
    weight = jnp.where(real, jnp.exp(log_weight[jnp.minimum(model, n_slots - 1)]), 0.0)
    table, is_edge, base = _ensemble_table(theta, weight, has_lo & real, pos_lo, ss.shape[0])
    return lo, theta, log_ml, log_weight, ss, table, is_edge, base


def _ensemble_table(theta, weight, is_lower_edge, position, size):
    r"""The posterior-weighted average of the models as one step map over sorted positions.

    Model :math:`m` jumps by :math:`\theta_{m,k} - \theta_{m,k-1}` at the lower edge of its
    bin :math:`k \ge 1`, which is the sorted training score at some position. The average at
    a score :math:`s` is :math:`\sum_m w_m \theta_{m,0}` plus the weighted jumps of every
    edge :math:`\le s`: a difference array over the positions and one cumulative sum give it
    right of every position (``[size]``), with a flag for the positions that carry an edge.
    Pairs are model by model, so a pair's predecessor is the same model's previous bin.
    """
    jump = weight * (theta - jnp.concatenate([theta[:1], theta[:-1]]))
    at = jnp.where(is_lower_edge, position, size)
    diff = jnp.zeros(size, theta.dtype).at[at].add(jump, mode="drop")
    is_edge = jnp.zeros(size, bool).at[at].set(True, mode="drop")
    base = jnp.sum(jnp.where(is_lower_edge, 0.0, weight * theta))
    return base + cumsum(diff), is_edge, base


def _compact_table(ss, table, is_edge, base) -> tuple[np.ndarray, np.ndarray]:
    """Host-side: the sorted distinct edges and the average left of the first one and right
    of each (the last of tied edge positions holds the value right of their score)."""
    at = np.flatnonzero(is_edge)
    e = ss[at]
    last = np.r_[e[1:] != e[:-1], True] if at.size else np.zeros(0, bool)
    return e[last], np.r_[base, table[at[last]]]


@pytree_dataclass
class FittedBBQ(FittedCalibrator):
    """Fitted BBQ: an ensemble of equal-frequency histograms with posterior weights.

    Attributes:
        edges: ``[M, B_max - 1]`` inner edges of each model (padded with ``+inf``), like
            every edge here in the transformed score :math:`s' = s\\,2^{-k} - c`
            (``scaling``; the identity unless the working precision could not hold the
            training scores, ``jaxcal.calibrators._scaling``).
        theta: ``[M, B_max]`` posterior-mean probability of each bin (0 on padding).
        log_marginal_likelihood: ``[M]`` BDeu log marginal likelihood of each model.
        log_weight: ``[M]`` normalised log posterior weight of each model.
        n_bins: ``[M]`` bin count of each model.
        table_edges: ``[T]`` the distinct edges of all models, sorted, then ``+inf`` (the
            ``K <= N`` edges padded to the bucket size of the ``N`` training points, see
            ``jaxcal._shapes``, so that ``predict`` compiles once per bucket).
        table_values: ``[T + 1]`` the posterior-weighted average of the models between
            consecutive table edges (``table_values[j]`` right of the first ``j`` edges; the
            last value repeated over the padding): what ``predict`` evaluates, in
            ``O(log T)`` per score.
    """

    edges: jax.Array
    theta: jax.Array
    log_marginal_likelihood: jax.Array
    log_weight: jax.Array
    n_bins: jax.Array
    table_edges: jax.Array
    table_values: jax.Array
    logit_scale: bool = static_field(default=False)
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Posterior-weighted average of the models' bin probabilities (one search of the
        ensemble's table per score)."""
        return step_map(self.scaling.apply(scores), self.table_edges, self.table_values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class BBQ(Calibrator):
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

    def _check_hyperparameters(self) -> None:
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

    def _fit(self, d: FitData) -> FittedBBQ:
        """Score all binning models and store them with their posterior weights."""
        in_unit = bool((d.scores >= 0).all() and (d.scores <= 1).all())
        if self.score_scale == "probability" and not in_unit:
            raise ValueError("score_scale='probability' needs scores in [0, 1].")
        logit = self.score_scale == "logit" or (self.score_scale == "auto" and not in_unit)
        n = d.scores.shape[0]
        n_bins = bbq_bin_counts(n, float(self.c))
        m, b_max, n_pairs = n_bins.shape[0], int(n_bins[-1]), int(n_bins.sum())
        size = _shapes.padded_size(n)
        # bins depend on the order of the scores only; the prior reads the bin mid scores
        # back in score units (_fit_bbq)
        scaling, s = fit_scaling(d.scores, d.weights, shift=True, kind=ORDER, what="BBQ")
        padded = _shapes.pad_rows(size, s, d.targets, d.weights, fills=(s.max(), 0, 0))
        model_slots, pair_slots = _slots(n_bins, size, float(self.c))
        model, bin_index = _model_layout(n_bins, pair_slots)
        dtype = jnp.result_type(float)
        out = _fit_bbq(
            *(jax.device_put(np.asarray(a, dtype)) for a in padded),
            n,
            _shapes.pad_axis(n_bins, model_slots, n_bins[-1]),
            m,
            model,
            bin_index,
            np.asarray(self.equivalent_sample_size, dtype),
            scaling,
            np.asarray(scaling.apply(np.array([0.0, 1.0])), dtype),
            logit_scale=logit,
        )
        lo, theta, log_ml, log_w, ss, table, is_edge, base = jax.device_get(out)
        model, bin_index = model[:n_pairs], bin_index[:n_pairs]
        theta_mb = np.zeros((m, b_max), theta.dtype)
        theta_mb[model, bin_index] = theta[:n_pairs]
        edges_mb = np.full((m, b_max - 1), np.inf, lo.dtype)
        inner = bin_index > 0
        edges_mb[model[inner], bin_index[inner] - 1] = lo[:n_pairs][inner]
        table_e, table_v = _compact_table(ss[:n], table[:n], is_edge[:n], base)
        # padded as the points were (K <= n distinct edges): predict compiles once per bucket
        table_e = _shapes.pad_axis(table_e, size, np.inf)
        table_v = _shapes.pad_axis(table_v, size + 1, table_v[-1])
        return FittedBBQ(
            edges=jax.device_put(edges_mb),
            theta=jax.device_put(theta_mb),
            log_marginal_likelihood=jax.device_put(log_ml[:m]),
            log_weight=jax.device_put(log_w[:m]),
            n_bins=jax.device_put(n_bins),
            table_edges=jax.device_put(table_e),
            table_values=jax.device_put(table_v),
            logit_scale=logit,
            scaling=scaling,
        )
