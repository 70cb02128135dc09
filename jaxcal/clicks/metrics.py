"""Evaluation metrics of click models: log-likelihood, perplexity, CTR error, reliability.

* Log-likelihood of a log under a model: ``sum_s w_s sum_r log P(C_r = c_r | C_<r)`` from the
  *conditional* probabilities (the exact probability of the whole click vector).
* Perplexity at rank ``k`` (Borisov et al., CIKM 2018, Eq. 6; Dupret & Piwowarski 2008):
  ``2 ** (-(1 / N) sum_s log2 P(C_k = c_k^s))`` over the ``N`` sessions that have rank ``k``;
  the *average perplexity* is the mean over ranks. With unconditional (marginal) probabilities
  this is the standard metric; with conditional ones it is the conditional perplexity.
* CTR error: per rank, the difference between the mean predicted click probability and the
  observed click-through rate.
* Reliability by rank (Borisov et al. 2018, Fig. 1): per rank, the observed click-through
  rate in equal-width buckets of the predicted probability.

All functions take ``[S, n]`` arrays, an optional ``[S, n]`` mask (padding) and optional
``[S]`` session weights (the multiplicities of a deduplicated log). They are jitted and
sum over sessions, so they run sharded when the inputs are.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal.clicks._base import check_click_arrays
from jaxcal.metrics.calibration import binned_stats

__all__ = [
    "perplexity",
    "log_likelihood",
    "ctr_error",
    "reliability_by_rank",
    "PerplexityResult",
    "ReliabilityByRank",
]


class PerplexityResult(NamedTuple):
    """``average`` (mean over ranks) and ``by_rank`` (``[n]``) perplexity.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import perplexity
        >>> result = perplexity([[0.5, 0.5]], [[1, 0]], [[True, False]])
        >>> float(result.average), np.asarray(result.by_rank).tolist()  # rank 2: no session
        (2.0, [2.0, nan])
    """

    average: jax.Array
    by_rank: jax.Array


def _check(probs, clicks, mask, sample_weight, eps):
    """Validate eagerly; return NumPy arrays with the sessions padded to their bucket (masked
    rows of weight 0, which add nothing to any sum) and the number of real sessions."""
    p, c, m, w = check_click_arrays(probs, clicks, mask, sample_weight)
    eps = float(eps)
    if not 0 <= eps < 0.5:
        raise ValueError(f"eps must lie in [0, 0.5); got {eps}.")
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    S = p.shape[0]
    rows = _shapes.padded_size(S, total=p.size)
    # padded (and masked) entries: a valid probability and no click, so every term is finite
    p = np.where(m, p, 0.5)
    c = np.where(m, c, 0)
    arrays = _shapes.pad_rows(rows, p.astype(dtype), c.astype(dtype), m, w.astype(dtype))
    return (*arrays, np.asarray(eps, dtype)), S


def _log2_prob(p, c, eps):
    # clipping is the last step, applied to the observed outcome's probability; with the
    # default eps = 0 it changes nothing (probabilities lie in [0, 1])
    q = jnp.where(c > 0, p, 1.0 - p)
    return jnp.log2(jnp.clip(q, eps, 1.0))


@jit
def _perplexity(p, c, m, w, eps):
    lp = jnp.where(m, _log2_prob(p, c, eps), 0.0)
    wm = jnp.where(m, w[:, None], 0.0)
    total = jnp.sum(wm, axis=0)
    by_rank = jnp.exp2(-jnp.sum(wm * lp, axis=0) / jnp.where(total > 0, total, 1.0))
    present = total > 0
    by_rank = jnp.where(present, by_rank, jnp.nan)
    average = jnp.sum(jnp.where(present, by_rank, 0.0)) / jnp.sum(present)
    return average, by_rank


def perplexity(
    probs: ArrayLike,
    clicks: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    sample_weight: ArrayLike | None = None,
    eps: float = 0.0,
) -> PerplexityResult:
    """Perplexity at each rank and averaged over ranks (Borisov et al. 2018, Eq. 6).

    ``Perplexity@k = 2 ** (-sum_s w_s log2 P(C_k = c_k^s) / sum_s w_s)`` over sessions with
    a result at rank ``k``. Pass marginal probabilities for the standard (unconditional)
    metric, conditional ones for the conditional variant. 1 is perfect; 2 is a coin flip.

    Args:
        probs: ``[S, n]`` predicted ``P(C_r = 1)``.
        clicks: ``[S, n]`` observed clicks.
        mask: ``[S, n]`` real results (default all).
        sample_weight: ``[S]`` session multiplicities (default 1).
        eps: clip the probability of the observed outcome below at ``eps`` (default 0: no
            clipping; a zero probability of an observed event gives infinite perplexity).

    Returns:
        :class:`PerplexityResult` ``(average, by_rank)``; ranks no session reaches are NaN
        in ``by_rank`` and left out of the average.

    Raises:
        ValueError: on shape mismatches, probabilities outside [0, 1], clicks not 0/1, bad
            weights.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import perplexity
        >>> float(perplexity(np.full((4, 2), 0.5), np.eye(4, 2)).average)
        2.0
    """
    args, _ = _check(probs, clicks, mask, sample_weight, eps)
    return PerplexityResult(*_perplexity(*args))


@jit
def _loglik(p, c, m, w, eps):
    """Per-session log-likelihoods ``[S]`` and the ``sum``, ``mean`` and ``per_result``
    reductions."""
    lp = jnp.where(m, _log2_prob(p, c, eps), 0.0) * jnp.log(2.0)
    per_session = jnp.sum(lp, axis=1)
    total = jnp.sum(w * per_session)
    mean, per_result = total / jnp.sum(w), total / jnp.sum(w[:, None] * m)
    reduced = {"sum": total, "mean": mean, "per_result": per_result}
    return per_session, reduced


def log_likelihood(
    probs: ArrayLike,
    clicks: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    sample_weight: ArrayLike | None = None,
    reduction: str = "sum",
    eps: float = 0.0,
) -> jax.Array:
    """Log-likelihood (natural log) of the clicks under *conditional* probabilities.

    ``log P(C^s) = sum_r log P(C_r = c_r^s | C_<r = c_<r^s)`` per session.

    Args:
        probs: ``[S, n]`` conditional click probabilities ``P(C_r = 1 | C_<r)``.
        clicks, mask, sample_weight, eps: as in :func:`perplexity`.
        reduction: ``"sum"`` (weighted total), ``"mean"`` (per session), ``"per_result"``
            (per shown result), or ``"none"`` (``[S]`` per-session values, unweighted).

    Returns:
        A scalar, or ``[S]`` for ``reduction="none"``.

    Raises:
        ValueError: on an unknown ``reduction``, or the inputs :func:`perplexity` rejects.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import log_likelihood
        >>> probs, clicks = np.array([[0.5, 0.25]]), np.array([[1, 0]])
        >>> float(log_likelihood(probs, clicks))  # log(0.5) + log(0.75)
        -0.9808...
    """
    if reduction not in ("sum", "mean", "per_result", "none"):
        raise ValueError(f"reduction must be sum, mean, per_result or none; got {reduction!r}.")
    args, S = _check(probs, clicks, mask, sample_weight, eps)
    per_session, reduced = _loglik(*args)
    return _shapes.unpad(per_session, S) if reduction == "none" else reduced[reduction]


def ctr_error(
    probs: ArrayLike,
    clicks: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    sample_weight: ArrayLike | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Per-rank CTR error: mean predicted ``P(C_r = 1)`` minus observed CTR at rank ``r``.

    Args:
        probs: ``[S, n]`` predicted ``P(C_r = 1)``.
        clicks, mask, sample_weight: as in :func:`perplexity`.

    Returns:
        ``(rmse, by_rank)``: the root-mean-square of the per-rank errors over the ranks
        present, and the ``[n]`` signed errors (NaN for ranks with no session).

    Raises:
        ValueError: on the inputs :func:`perplexity` rejects.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import ctr_error
        >>> rmse, by_rank = ctr_error(np.full((2, 2), 0.5), np.array([[1, 0], [1, 0]]))
        >>> float(rmse), np.asarray(by_rank).tolist()  # predicted minus observed CTR
        (0.5, [-0.5, 0.5])
    """
    (p, c, m, w, _), _ = _check(probs, clicks, mask, sample_weight, 0.0)
    return _ctr_error(p, c, m, w)


@jit
def _ctr_error(p, c, m, w):
    wm = jnp.where(m, w[:, None], 0.0)
    total = jnp.sum(wm, axis=0)
    present = total > 0
    denom = jnp.where(present, total, 1.0)
    err = (jnp.sum(wm * p, axis=0) - jnp.sum(wm * c, axis=0)) / denom
    err = jnp.where(present, err, jnp.nan)
    rmse = jnp.sqrt(jnp.sum(jnp.where(present, err**2, 0.0)) / jnp.sum(present))
    return rmse, err


class ReliabilityByRank(NamedTuple):
    """Per-rank reliability diagram: ``[n, n_bins]`` arrays.

    ``mean_pred``: weighted mean predicted probability in the bucket; ``ctr``: observed
    click-through rate; ``count``: total weight (NaN means where a bucket is empty).

    Example:
        >>> from jaxcal.clicks import reliability_by_rank
        >>> diagram = reliability_by_rank([[0.1], [0.2], [0.9]], [[0], [1], [1]], n_bins=2)
        >>> diagram.count.tolist(), diagram.ctr.tolist()  # [ranks, buckets]
        ([[2.0, 1.0]], [[0.5, 1.0]])
    """

    mean_pred: np.ndarray
    ctr: np.ndarray
    count: np.ndarray


def reliability_by_rank(
    probs: ArrayLike,
    clicks: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    sample_weight: ArrayLike | None = None,
    n_bins: int = 100,
) -> ReliabilityByRank:
    """Reliability diagram per rank (Borisov et al. 2018, Fig. 1): bucket ``i`` holds the
    predictions in ``[i / N, (i + 1) / N)`` (the last one includes 1), binned at every rank
    by :func:`jaxcal.metrics.calibration.binned_stats` (the core of
    :func:`jaxcal.metrics.reliability`).

    Args:
        probs: ``[S, n]`` predicted ``P(C_r = 1)``.
        clicks, mask, sample_weight: as in :func:`perplexity`.
        n_bins: number of buckets ``N`` (default 100, as in the paper).

    Returns:
        :class:`ReliabilityByRank` of ``[n, n_bins]`` NumPy arrays.

    Raises:
        ValueError: on bad probabilities / clicks / weights, or ``n_bins < 1``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import reliability_by_rank
        >>> probs = np.array([[0.1, 0.7], [0.3, 0.6], [0.8, 0.2]])
        >>> clicks = np.array([[0, 1], [1, 1], [1, 0]])
        >>> diagram = reliability_by_rank(probs, clicks, n_bins=2)
        >>> diagram.mean_pred[0].round(2).tolist()  # rank 1: buckets [0, 0.5), [0.5, 1]
        [0.2, 0.8]
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, int | np.integer) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    edges = np.arange(n_bins + 1) / n_bins  # exactly i / N (np.linspace can be 1 ulp off)
    (p, c, m, w, _), _ = _check(probs, clicks, mask, sample_weight, 0.0)
    out = _reliability_by_rank(p, c, m, w, edges)
    count, psum, csum = (np.asarray(a, np.float64) for a in out)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_pred = np.where(count > 0, psum / count, np.nan)
        ctr = np.where(count > 0, csum / count, np.nan)
    return ReliabilityByRank(mean_pred, ctr, count)


@jit
def _reliability_by_rank(p, c, m, w, edges):
    """Per-rank ``[n, n_bins]`` total weight and weighted sums of predictions and clicks."""
    wm = jnp.where(m, w[:, None], 0.0)
    stats = jax.vmap(binned_stats, in_axes=(1, 1, None, 1))(p, c, edges, wm)
    return stats.weight, stats.sum_probs, stats.sum_labels
