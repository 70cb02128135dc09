r"""Exact metrics from counts by distinct score (:mod:`jaxcal.fitting.score_counts`): for
scores larger than memory, streamed in chunks (``from_chunks``) and summed across processes
(``across_processes``).

Each metric equals the in-memory metric of :mod:`jaxcal.metrics` of the same name on the
data the counts describe (same definitions, bins and clipping), up to the float64 rounding
of the sums, and is computed in float64 on the host in :math:`O(m)` for :math:`m` distinct
scores :math:`v` with weights :math:`W_v`, label sums :math:`Y_v`, negative weights
:math:`N_v = W_v - Y_v`, totals :math:`W`, :math:`P = \sum_v Y_v`, :math:`N = \sum_v N_v`
and :math:`V = \sum_i w_i y_i (1 - y_i)` (0 for 0/1 labels):

.. math::

    \mathrm{AUC} &= \frac{1}{P N} \sum_v Y_v \Bigl(\sum_{u < v} N_u + \tfrac12 N_v\Bigr),
    \qquad
    \mathrm{Brier} = \frac{1}{W} \Bigl(\sum_v \bigl[N_v v^2 + Y_v (1 - v)^2\bigr] - V\Bigr),

    \mathrm{NLL} &= -\frac{1}{W} \sum_v \bigl[Y_v \log \bar v + N_v \log(1 - \bar v)\bigr],
    \qquad
    \mathrm{ECE} = \frac{1}{W} \sum_b \Bigl|\sum_{v \in b} (Y_v - W_v v)\Bigr|,

with :math:`\bar v` the score clipped to :math:`[\epsilon, 1 - \epsilon]` and bins as in
:func:`jaxcal.metrics.calibration.bin_edges` (quantile edges from the sample counts, as
``np.quantile`` places them on the samples). Labels may be fractions in [0, 1] (the
in-memory metrics take 0/1 labels; fractions weigh a sample as :math:`y` positive and
:math:`1 - y` negative). Brier, NLL, ECE and MCE need the scores to be probabilities.
Quantised counts are refused: their scores are bins, not the scores.

Each returns a Python ``float`` (float64, whatever JAX's precision).

Example:
    >>> from jaxcal.fitting.score_counts import score_counts
    >>> from jaxcal.metrics import auc, auc_from_counts
    >>> s, y = [0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1]
    >>> auc_from_counts(score_counts(s, y)), float(auc(s, y))
    (0.875, 0.875)
"""

from __future__ import annotations

import numpy as np

from jaxcal._validation import check_two_classes
from jaxcal.fitting.score_counts import ScoreCounts, check_counts
from jaxcal.metrics.calibration import STRATEGIES, _min_count, bin_edges

__all__ = [
    "auc_from_counts",
    "brier_from_counts",
    "nll_from_counts",
    "ece_from_counts",
    "mce_from_counts",
]


def _exact(counts: ScoreCounts, what: str, *, probabilities: bool) -> ScoreCounts:
    """Validated exact counts (of probabilities, if asked)."""
    counts = check_counts(counts, what=what)
    if counts.quantized:
        raise ValueError(
            f"{what} needs exact counts; these are quantised to bins, whose scores are not "
            "the samples' scores. Count without bins= for metrics."
        )
    s = counts.scores
    if probabilities and (s[0] < 0 or s[-1] > 1):
        raise ValueError(
            f"{what}: the counted scores must be probabilities in [0, 1]; got min "
            f"{s[0]:.6g}, max {s[-1]:.6g}. Count calibrated probabilities, not scores or logits."
        )
    return counts


def _negatives(counts: ScoreCounts) -> np.ndarray:
    """:math:`N_v = W_v - Y_v` (clipped at 0 against rounding)."""
    return np.maximum(counts.weight - counts.label_sum, 0.0)


def auc_from_counts(counts: ScoreCounts) -> float:
    """Weighted ROC AUC (ties count 1/2) from counts; :func:`jaxcal.metrics.auc`'s value.

    Raises:
        ValueError: counts that are not exact ``ScoreCounts``, empty, or with one class only.

    Example:
        >>> from jaxcal.fitting.score_counts import score_counts
        >>> auc_from_counts(score_counts([0.2, 0.2, 0.7], [0, 1, 1]))
        0.75
    """
    counts = _exact(counts, "auc_from_counts", probabilities=False)
    pos, neg = counts.label_sum, _negatives(counts)
    check_two_classes(np.r_[np.ones_like(pos), np.zeros_like(neg)], np.r_[pos, neg])
    below = np.cumsum(neg) - neg
    return float(np.dot(pos, below + 0.5 * neg) / (pos.sum() * neg.sum()))


def brier_from_counts(counts: ScoreCounts) -> float:
    """Weighted Brier score from counts of probabilities; :func:`jaxcal.metrics.brier`'s.

    Raises:
        ValueError: counts that are not exact ``ScoreCounts`` of probabilities, or empty.
    """
    counts = _exact(counts, "brier_from_counts", probabilities=True)
    p = counts.scores
    total = np.dot(_negatives(counts), p * p) + np.dot(counts.label_sum, (1.0 - p) ** 2)
    return float((total - float(counts.label_variance)) / counts.total_weight)


def nll_from_counts(counts: ScoreCounts, *, eps: float | None = None) -> float:
    """Weighted log loss from counts of probabilities; :func:`jaxcal.metrics.nll`'s.

    Args:
        counts: exact counts of probabilities.
        eps: clipping constant in (0, 0.5), or ``None`` for the machine epsilon of JAX's
            working dtype (as :func:`jaxcal.metrics.nll`).

    Raises:
        ValueError: counts that are not exact ``ScoreCounts`` of probabilities, empty, or
            ``eps`` outside (0, 0.5).
    """
    import jax.numpy as jnp

    counts = _exact(counts, "nll_from_counts", probabilities=True)
    if eps is None:
        eps = float(jnp.finfo(jnp.result_type(float)).eps)
    if not 0.0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5); got {eps!r}.")
    p = np.clip(counts.scores, eps, 1.0 - eps)
    ll = np.dot(counts.label_sum, np.log(p)) + np.dot(_negatives(counts), np.log1p(-p))
    return float(-ll / counts.total_weight)


def _quantile_edges(counts: ScoreCounts, n_bins: int) -> np.ndarray:
    """``bin_edges(probs, strategy="quantile")`` of the samples the counts describe: the
    order statistics from the cumulative sample counts, interpolated as ``np.quantile``'s
    default (linear) method does."""
    n = int(counts.count.sum())
    virtual = (n - 1) * np.linspace(0.0, 1.0, int(n_bins) + 1)
    prev = np.floor(virtual)
    gamma = virtual - prev
    lo = prev.astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    cum = np.cumsum(counts.count)
    a = counts.scores[np.searchsorted(cum, lo, side="right")]
    b = counts.scores[np.searchsorted(cum, hi, side="right")]
    diff = b - a
    edges = np.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    edges[0], edges[-1] = 0.0, 1.0
    return np.maximum.accumulate(edges)


def _bin_sums(counts: ScoreCounts, n_bins: int, strategy: str):
    """Per-bin ``(count, weight, sum of w p, sum of w y)`` of the metrics' bins."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}.")
    edges = bin_edges(n_bins=n_bins)  # checks n_bins
    if strategy == "quantile":
        edges = _quantile_edges(counts, n_bins)
    p = counts.scores
    ids = np.searchsorted(edges[1:-1], p, side="right")
    k = edges.shape[0] - 1
    w = counts.weight
    return (
        np.bincount(ids, counts.count, k),
        np.bincount(ids, w, k),
        np.bincount(ids, w * p, k),
        np.bincount(ids, counts.label_sum, k),
    )


def ece_from_counts(counts: ScoreCounts, *, n_bins: int = 15, strategy: str = "uniform") -> float:
    """Binned ECE from counts of probabilities; :func:`jaxcal.metrics.ece`'s value.

    Args:
        counts: exact counts of probabilities.
        n_bins, strategy: as in :func:`jaxcal.metrics.ece` (``"uniform"`` or
            ``"quantile"``, the unweighted quantiles of the samples).

    Raises:
        ValueError: counts that are not exact ``ScoreCounts`` of probabilities, empty, or
            bad ``n_bins`` / ``strategy``.
    """
    counts = _exact(counts, "ece_from_counts", probabilities=True)
    _, weight, sum_p, sum_y = _bin_sums(counts, n_bins, strategy)
    return float(np.sum(np.abs(sum_y - sum_p)) / np.sum(weight))


def mce_from_counts(
    counts: ScoreCounts,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    min_count: int = 1,
    min_fraction: float = 0.0,
) -> float:
    """Maximum calibration error from counts of probabilities; :func:`jaxcal.metrics.mce`'s
    value (bins with at least ``max(min_count, ceil(min_fraction n))`` samples; NaN if none).

    Raises:
        ValueError: as :func:`ece_from_counts`, or bad ``min_count`` / ``min_fraction``.
    """
    counts = _exact(counts, "mce_from_counts", probabilities=True)
    threshold = _min_count(int(counts.count.sum()), min_count, min_fraction)
    count, weight, sum_p, sum_y = _bin_sums(counts, n_bins, strategy)
    keep = (count >= threshold) & (weight > 0)
    if not keep.any():
        return float("nan")
    return float(np.max(np.abs(sum_y[keep] - sum_p[keep]) / weight[keep]))
