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

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export``: :func:`score_counts` of traced data
returns :class:`ScoreCounts` of fixed shape ``[n]`` (``n`` samples): the first :math:`m`
entries are the counts of the :math:`m` distinct scores (or bins), the others padding of
count and weight 0 that repeats the largest score; every metric here reads such counts
exactly (padding adds nothing to a sum), in the program, and returns a ``jax.Array``
scalar. Invalid data or counts (NaN, labels outside [0, 1], scores outside [0, 1] for the
metrics of probabilities, one class for the AUC, zero total weight) give NaN.
``bins=`` must be the edges of a grid there (a number of bins places data-dependent edges:
``ValueError``). Brier, NLL and ECE from counts are differentiable in the counted
probabilities (their ``scores``) and in the sums; the AUC is piecewise constant.

Example:
    >>> from jaxcal.fitting.score_counts import score_counts
    >>> from jaxcal.metrics import auc, auc_from_counts
    >>> s, y = [0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1]
    >>> auc_from_counts(score_counts(s, y)), float(auc(s, y))
    (0.875, 0.875)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._validation import check_pure, check_two_classes, float_array, nan_where, pure_1d
from jaxcal.fitting import score_counts as _counts
from jaxcal.fitting.score_counts import ScoreCounts, check_counts
from jaxcal.losses import check_loss
from jaxcal.metrics.calibration import STRATEGIES, _min_count, bin_edges

__all__ = [
    "score_counts",
    "auc_from_counts",
    "brier_from_counts",
    "nll_from_counts",
    "ece_from_counts",
    "mce_from_counts",
]


def score_counts(
    scores: ArrayLike,
    labels: ArrayLike,
    sample_weight: ArrayLike | None = None,
    *,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
    bins: int | ArrayLike | None = None,
) -> ScoreCounts:
    """Counts by distinct score (:func:`jaxcal.fitting.score_counts.score_counts`, same
    arguments), also inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export``.

    Concrete inputs are counted on the host exactly as there. Traced inputs give
    fixed-shape ``[n]`` counts: the first ``m`` entries are the distinct scores (or bins), in
    increasing order, the others padding of count and weight 0 repeating the largest score
    (module docstring); invalid data gives NaN sums.

    Raises:
        ValueError: as :func:`jaxcal.fitting.score_counts.score_counts`; inside a trace,
            only for shapes, dtypes, the loss, and ``bins`` given as a number of bins.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxcal.metrics import auc_from_counts, score_counts
        >>> s, y = jnp.array([0.1, 0.4, 0.4, 0.8]), jnp.array([0, 0, 1, 1])
        >>> float(jax.jit(lambda s, y: auc_from_counts(score_counts(s, y)))(s, y))
        0.875
    """
    if not _shapes.is_traced(scores, labels, sample_weight, propensity, bins):
        return _counts.score_counts(
            scores, labels, sample_weight, propensity=propensity, loss=loss, bins=bins
        )
    check_loss(loss, propensity)
    if loss == "snips":
        raise ValueError(
            'counts cannot hold loss="snips": its normaliser is a sum over all the data, '
            'which a chunk does not see. Use loss="ips" or "ips_positive", or fit in memory.'
        )
    if isinstance(bins, int | np.integer) and not isinstance(bins, bool):
        raise ValueError(
            f"bins={bins!r}: a number of bins places its edges from the data, which a traced "
            "program cannot size; pass the edges of a grid (e.g. np.linspace(0, 1, 4097))."
        )
    # the shapes and dtypes of check_pure; the value checks of counts (fractional labels,
    # weights that may all be 0) below
    s, y, w, _ = check_pure(scores, labels, sample_weight, name="scores", probabilities=False)
    s = s + 0.0  # -0.0 -> 0.0
    n = s.shape[0]
    invalid = (
        ~jnp.all(jnp.isfinite(s))
        | jnp.any(~((y >= 0) & (y <= 1)))
        | jnp.any(~jnp.isfinite(w) | (w < 0))
    )
    t = None
    if loss != "naive":
        omega = pure_1d(propensity, "propensity", n=n, dtype=s.dtype)
        invalid = invalid | jnp.any(~((omega > 0) & (omega <= 1)))
        if loss == "ips":
            t = y / omega
        else:  # ips_positive
            w = w * (y / omega + 1.0 - y)
    edges = None
    key = s
    if bins is not None:
        edges = float_array(bins, "bins", dtype=s.dtype)
        if edges.ndim != 1 or edges.shape[0] < 2:
            raise ValueError(f"bins must hold at least two edges; got shape {edges.shape}.")
        invalid = invalid | ~jnp.all(jnp.isfinite(edges)) | jnp.any(edges[1:] < edges[:-1])
        key = jnp.searchsorted(edges[1:-1], s, side="right")
    counts = _reduce_pure(s, key, y, w, t, edges)
    return nan_where(invalid, counts)


def _reduce_pure(s, key, y, w, t, edges) -> ScoreCounts:
    """Sums per run of equal ``key`` in score order, in ``[n]`` slots (module docstring)."""
    n = s.shape[0]
    order = jnp.argsort(s)
    s_sorted, k_sorted = s[order], key[order]
    new = jnp.concatenate([jnp.ones((1,), bool), k_sorted[1:] != k_sorted[:-1]])
    seg = jnp.cumsum(new) - 1
    m = seg[-1] + 1
    real = jnp.arange(n) < m
    top = s_sorted[-1]

    def total(a):
        return jax.ops.segment_sum(a[order], seg, num_segments=n)

    wy = w * y
    lowest = jnp.where(real, jax.ops.segment_min(s_sorted, seg, num_segments=n), top)
    upper = None
    if edges is not None:
        upper = jnp.where(real, jax.ops.segment_max(s_sorted, seg, num_segments=n), top)
    target_sum = target_max = None
    if t is not None:
        target_sum = total(w * t)
        target_max = jnp.max(jnp.where(w > 0, t, 0.0))
    return ScoreCounts(
        scores=lowest,
        count=jax.ops.segment_sum(jnp.ones(n, int), seg, num_segments=n),
        weight=total(w),
        label_sum=total(wy),
        label_variance=jnp.sum(wy * (1.0 - y)),
        score_max=upper,
        edges=edges,
        target_sum=target_sum,
        target_max=target_max,
    )


def _exact_pure(counts: ScoreCounts, what: str, *, probabilities: bool):
    """:func:`_exact`'s checks of traced counts: the static ones raise, the others are
    returned as ``invalid``."""
    if not isinstance(counts, ScoreCounts):
        raise ValueError(
            f"{what} needs a ScoreCounts (from score_counts or from_chunks); got "
            f"{type(counts).__name__}."
        )
    if counts.quantized:
        raise ValueError(
            f"{what} needs exact counts; these are quantised to bins, whose scores are not "
            "the samples' scores. Count without bins= for metrics."
        )
    if not jnp.shape(counts.scores)[0]:
        raise ValueError(f"{what}: the counts are empty.")
    s = jnp.asarray(counts.scores)
    invalid = ~(jnp.sum(counts.weight) > 0) | ~jnp.all(jnp.isfinite(s))
    if probabilities:
        invalid = invalid | jnp.any((s < 0) | (s > 1))
    return s, invalid


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
    if _shapes.is_traced(counts):
        _, invalid = _exact_pure(counts, "auc_from_counts", probabilities=False)
        pos = counts.label_sum
        neg = jnp.maximum(counts.weight - pos, 0.0)
        invalid = invalid | ~(jnp.sum(pos) > 0) | ~(jnp.sum(neg) > 0)
        below = jnp.cumsum(neg) - neg
        value = jnp.dot(pos, below + 0.5 * neg) / (jnp.sum(pos) * jnp.sum(neg))
        return nan_where(invalid, value)
    counts = _exact(counts, "auc_from_counts", probabilities=False)
    pos, neg = counts.label_sum, _negatives(counts)
    check_two_classes(np.r_[np.ones_like(pos), np.zeros_like(neg)], np.r_[pos, neg])
    below = np.cumsum(neg) - neg
    return float(np.dot(pos, below + 0.5 * neg) / (pos.sum() * neg.sum()))


def brier_from_counts(counts: ScoreCounts) -> float:
    """Weighted Brier score from counts of probabilities; :func:`jaxcal.metrics.brier`'s.

    Raises:
        ValueError: counts that are not exact ``ScoreCounts`` of probabilities, or empty.

    Example:
        >>> from jaxcal.metrics import brier, brier_from_counts, score_counts
        >>> p, y = [0.8, 0.4, 0.4, 0.1], [1, 0, 1, 0]
        >>> round(brier_from_counts(score_counts(p, y)), 6)  # (0.04 + 0.16 + 0.36 + 0.01) / 4
        0.1425
        >>> round(float(brier(p, y)), 6)  # the same from the samples
        0.1425
    """
    if _shapes.is_traced(counts):
        p, invalid = _exact_pure(counts, "brier_from_counts", probabilities=True)
        y_sum = counts.label_sum
        neg = jnp.maximum(counts.weight - y_sum, 0.0)
        total = jnp.dot(neg, p * p) + jnp.dot(y_sum, (1.0 - p) ** 2)
        value = (total - counts.label_variance) / jnp.sum(counts.weight)
        return nan_where(invalid, value)
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

    Example:
        >>> import math
        >>> from jaxcal.metrics import nll_from_counts, score_counts
        >>> value = nll_from_counts(score_counts([0.8, 0.4, 0.4], [1, 0, 1]))
        >>> math.isclose(value, -(math.log(0.8) + math.log(0.6) + math.log(0.4)) / 3)
        True
    """
    if _shapes.is_traced(counts, eps):
        p, invalid = _exact_pure(counts, "nll_from_counts", probabilities=True)
        if eps is None:
            eps = float(jnp.finfo(p.dtype).eps)
        elif not _shapes.is_traced(eps) and not 0.0 < eps < 0.5:
            raise ValueError(f"eps must be in (0, 0.5); got {eps!r}.")
        p = jnp.clip(p, eps, 1.0 - eps)
        neg = jnp.maximum(counts.weight - counts.label_sum, 0.0)
        ll = jnp.dot(counts.label_sum, jnp.log(p)) + jnp.dot(neg, jnp.log1p(-p))
        return nan_where(invalid, -ll / jnp.sum(counts.weight))
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


def _quantile_edges_pure(counts: ScoreCounts, p, n_bins: int):
    """:func:`_quantile_edges` of traced counts (padding entries have count 0, so the
    order statistics never land on them)."""
    n = jnp.sum(counts.count)
    virtual = (n - 1).astype(p.dtype) * jnp.asarray(np.linspace(0.0, 1.0, n_bins + 1), p.dtype)
    prev = jnp.floor(virtual)
    gamma = virtual - prev
    lo = prev.astype(n.dtype)
    hi = jnp.minimum(lo + 1, n - 1)
    cum = jnp.cumsum(counts.count)
    last = p.shape[0] - 1
    a = p[jnp.minimum(jnp.searchsorted(cum, lo, side="right"), last)]
    b = p[jnp.minimum(jnp.searchsorted(cum, hi, side="right"), last)]
    diff = b - a
    edges = jnp.where(gamma >= 0.5, b - diff * (1 - gamma), a + diff * gamma)
    return jax.lax.cummax(edges.at[0].set(0.0).at[-1].set(1.0))


def _bin_sums_pure(counts: ScoreCounts, p, n_bins: int, strategy: str):
    """:func:`_bin_sums` of traced counts."""
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}.")
    edges = jnp.asarray(bin_edges(n_bins=n_bins), p.dtype)  # checks n_bins
    if strategy == "quantile":
        edges = _quantile_edges_pure(counts, p, int(n_bins))
    ids = jnp.searchsorted(edges[1:-1], p, side="right")
    k = edges.shape[0] - 1

    def per_bin(a):
        return jax.ops.segment_sum(a, ids, num_segments=k)

    w = counts.weight
    return per_bin(counts.count), per_bin(w), per_bin(w * p), per_bin(counts.label_sum)


def ece_from_counts(counts: ScoreCounts, *, n_bins: int = 15, strategy: str = "uniform") -> float:
    """Binned ECE from counts of probabilities; :func:`jaxcal.metrics.ece`'s value.

    Args:
        counts: exact counts of probabilities.
        n_bins, strategy: as in :func:`jaxcal.metrics.ece` (``"uniform"`` or
            ``"quantile"``, the unweighted quantiles of the samples).

    Raises:
        ValueError: counts that are not exact ``ScoreCounts`` of probabilities, empty, or
            bad ``n_bins`` / ``strategy``.

    Example:
        >>> from jaxcal.metrics import ece_from_counts, score_counts
        >>> counts = score_counts([0.8, 0.4, 0.4, 0.1], [1, 0, 1, 0])
        >>> round(ece_from_counts(counts, n_bins=5), 6)  # (0.1 + 2 * 0.1 + 0.2) / 4
        0.125
    """
    if _shapes.is_traced(counts):
        p, invalid = _exact_pure(counts, "ece_from_counts", probabilities=True)
        _, weight, sum_p, sum_y = _bin_sums_pure(counts, p, n_bins, strategy)
        return nan_where(invalid, jnp.sum(jnp.abs(sum_y - sum_p)) / jnp.sum(weight))
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

    Example:
        >>> from jaxcal.metrics import mce_from_counts, score_counts
        >>> counts = score_counts([0.8, 0.4, 0.4, 0.1], [1, 0, 1, 0])
        >>> round(mce_from_counts(counts, n_bins=5), 6)  # bin [0.8, 1]: |1 - 0.8|
        0.2
        >>> round(mce_from_counts(counts, n_bins=5, min_count=2), 6)  # bin [0.4, 0.6)
        0.1
    """
    if _shapes.is_traced(counts):
        p, invalid = _exact_pure(counts, "mce_from_counts", probabilities=True)
        _min_count(1, min_count, min_fraction)  # checks both
        n = jnp.sum(counts.count)
        threshold = jnp.maximum(int(min_count), jnp.ceil(min_fraction * n))
        count, weight, sum_p, sum_y = _bin_sums_pure(counts, p, n_bins, strategy)
        keep = (count >= threshold) & (weight > 0)
        gap = jnp.abs(sum_y - sum_p) / jnp.where(keep, weight, 1.0)
        best = jnp.max(jnp.where(keep, gap, -jnp.inf))
        return nan_where(invalid | ~jnp.any(keep), best)
    counts = _exact(counts, "mce_from_counts", probabilities=True)
    threshold = _min_count(int(counts.count.sum()), min_count, min_fraction)
    count, weight, sum_p, sum_y = _bin_sums(counts, n_bins, strategy)
    keep = (count >= threshold) & (weight > 0)
    if not keep.any():
        return float("nan")
    return float(np.max(np.abs(sum_y[keep] - sum_p[keep]) / weight[keep]))
