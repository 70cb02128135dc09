r"""Calibration metrics: ECE, MCE, NLL, Brier score and reliability tables.

All binned metrics are computed from four per-bin sums (:class:`BinStats`): the number of
samples, the total weight :math:`W_b = \sum_{i \in b} w_i`, the weighted confidence sum
:math:`P_b = \sum_{i \in b} w_i p_i` and the weighted positive sum
:math:`Y_b = \sum_{i \in b} w_i y_i`. Then, with :math:`W = \sum_b W_b`,

.. math::

    \mathrm{ECE} = \sum_b \frac{W_b}{W}\,\Bigl|\frac{Y_b}{W_b} - \frac{P_b}{W_b}\Bigr|
                 = \frac{1}{W}\sum_b |Y_b - P_b|,
    \qquad
    \mathrm{MCE} = \max_{b:\ n_b \ge n_{\min}} \Bigl|\frac{Y_b}{W_b} - \frac{P_b}{W_b}\Bigr|

(Naeini, Cooper and Hauskrecht, AAAI 2015; Guo et al., ICML 2017). The sums are computed
with ``jax.ops.segment_sum`` over bin ids; they are additive over any partition of the data,
so :func:`binned_stats` also runs data-parallel: call it inside ``shard_map`` with
``axis_name=...`` (per-shard partial sums followed by ``psum``), or simply ``jit`` it over
``NamedSharding``-sharded inputs.

Bins. ``strategy="uniform"`` uses ``n_bins`` equal-width bins on [0, 1];
``strategy="quantile"`` uses equal-mass bins whose edges are the (unweighted) quantiles of
``probs`` (outer edges fixed at 0 and 1; tied quantiles give empty bins, which are skipped).
Bin ``b`` is the half-open interval :math:`[e_b, e_{b+1})`, except the last, which is closed,
so ``p = 1.0`` lands in the last bin. (scikit-learn's ``calibration_curve`` closes bins on the
right instead; the two agree unless a probability sits exactly on an inner edge.)

Symmetric variant (Kweon, Kang and Yu, AAAI 2022). With ``symmetric=True``, bins whose
midpoint is below 0.5 are scored on the *negative* class: their confidence is
:math:`1 - P_b/W_b` and their accuracy the share of negatives :math:`1 - Y_b/W_b`. This is
how the paper draws reliability diagrams. Because
:math:`|(1 - a) - (1 - c)| = |a - c|`, ECE and MCE are the same number with or without it;
the flag changes what :func:`reliability` reports (and what the diagrams show).

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) every metric runs its
pure core without validation on the host: invalid values give NaN (docs/metrics.md,
"Inside jit, vmap and grad"). ECE, NLL and Brier are differentiable in ``probs`` (ECE within
its bins: the bin of each probability is piecewise constant); MCE is too, almost everywhere.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_probs
from jaxcal.metrics._inputs import metric_inputs
from jaxcal.metrics._pure import quantile_edges

__all__ = [
    "BinStats",
    "Reliability",
    "bin_edges",
    "binned_stats",
    "ece_from_stats",
    "mce_from_stats",
    "ece",
    "mce",
    "nll",
    "brier",
    "reliability",
]

STRATEGIES = ("uniform", "quantile")


class BinStats(NamedTuple):
    """Additive per-bin sums (each ``[n_bins]``); sum two of them to merge data shards."""

    count: jax.Array  #: number of samples in the bin
    weight: jax.Array  #: :math:`W_b`, total sample weight
    sum_probs: jax.Array  #: :math:`P_b`, weighted sum of predicted probabilities
    sum_labels: jax.Array  #: :math:`Y_b`, weighted sum of 0/1 labels


class Reliability(NamedTuple):
    """A reliability table: per-bin occupancy, mean confidence and accuracy.

    ``confidence`` and ``accuracy`` are NaN for bins with zero weight. With
    ``symmetric=True``, bins flagged in ``negative`` report the negative class
    (``1 - mean p`` and the share of negatives).
    """

    edges: jax.Array  #: ``[n_bins + 1]`` bin edges, from 0 to 1
    count: jax.Array  #: ``[n_bins]`` number of samples per bin
    weight: jax.Array  #: ``[n_bins]`` total sample weight per bin
    confidence: jax.Array  #: ``[n_bins]`` weighted mean predicted probability
    accuracy: jax.Array  #: ``[n_bins]`` weighted share of positives
    negative: jax.Array  #: ``[n_bins]`` bool, bin scored on the negative class


# --------------------------------------------------------------------------- pure core


def binned_stats(
    probs: ArrayLike,
    labels: ArrayLike,
    edges: ArrayLike,
    sample_weight: ArrayLike | None = None,
    *,
    axis_name: str | None = None,
) -> BinStats:
    """Per-bin sums over (a shard of) the data; pure and ``jit``/``shard_map``-friendly.

    No validation happens here (call the public metrics for checked inputs). Bin ``b`` holds
    ``edges[b] <= p < edges[b + 1]``; values below ``edges[1]`` go to bin 0 and values at or
    above ``edges[-2]`` to the last bin, so 0 and 1 are always binned.

    Args:
        probs: ``[n]`` predicted probabilities.
        labels: ``[n]`` 0/1 labels.
        edges: ``[n_bins + 1]`` increasing bin edges (see :func:`bin_edges`).
        sample_weight: ``[n]`` non-negative weights, or ``None`` for ones.
        axis_name: inside ``shard_map`` / ``pmap``, the mapped axis to ``psum`` over, so
            that every device gets the sums over the whole data set.

    Returns:
        :class:`BinStats` with ``[n_bins]`` arrays.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.metrics.calibration import bin_edges, binned_stats, ece_from_stats
        >>> edges = bin_edges(n_bins=10)
        >>> s = binned_stats(jnp.array([0.05, 0.95]), jnp.array([0.0, 1.0]), edges)
        >>> round(float(ece_from_stats(s)), 6)  # |0 - 0.05| / 2 + |1 - 0.95| / 2
        0.05
    """
    p, y, w = weighted_arrays(probs, labels, sample_weight)
    edges = jnp.asarray(edges, p.dtype)
    return class_sums(p, y, w, bin_ids(p, edges), edges.shape[0] - 1, axis_name=axis_name)


def weighted_arrays(probs: ArrayLike, labels: ArrayLike, sample_weight: ArrayLike | None):
    """``(p, y, w)`` of the pure cores: probabilities, labels and weights (ones for
    ``None``) as arrays of the probabilities' dtype; no validation."""
    p = jnp.asarray(probs)
    y = jnp.asarray(labels, p.dtype)
    w = jnp.ones_like(p) if sample_weight is None else jnp.asarray(sample_weight, p.dtype)
    return p, y, w


def segment_sums(values, segment_ids, n_segments: int, *, axis_name: str | None = None):
    """``segment_sum`` of each array of ``values`` by ``segment_ids`` (a tuple); inside
    ``shard_map``, ``psum``-ed over ``axis_name``."""
    seg = partial(jax.ops.segment_sum, segment_ids=segment_ids, num_segments=n_segments)
    sums = tuple(seg(v) for v in values)
    return sums if axis_name is None else jax.lax.psum(sums, axis_name)


def class_sums(p, y, w, segment_ids, n_segments: int, *, axis_name=None) -> BinStats:
    """:class:`BinStats` of ``(p, y, w)`` by segment: count, weight, weighted probabilities
    and weighted labels (:func:`segment_sums`)."""
    values = (jnp.ones_like(p), w, w * p, w * y)
    return BinStats(*segment_sums(values, segment_ids, n_segments, axis_name=axis_name))


_COMPARE_ALL = 64  # up to this many bins, bin ids come from one comparison per edge


def bin_ids(probs: jax.Array, edges: jax.Array) -> jax.Array:
    """The bin of each probability, ``searchsorted(edges[1:-1], p, side="right")``: by
    comparing with every inner edge when there are few (cheap to compile and to run), by
    binary search otherwise."""
    inner = edges[1:-1]
    if inner.shape[0] <= _COMPARE_ALL:
        return jnp.sum(inner <= probs[:, None], axis=1, dtype=jnp.int32)
    return jnp.searchsorted(inner, probs, side="right")


def _real_stats(p, y, w, n, edges) -> BinStats:
    """:func:`binned_stats` of the first ``n`` entries (default all; the others carry zero
    weight and are left out of the counts)."""
    stats = binned_stats(p, y, edges, w)
    if n is None:
        return stats
    real = (jnp.arange(p.shape[0]) < n).astype(p.dtype)
    count = jax.ops.segment_sum(real, bin_ids(p, edges), num_segments=edges.shape[0] - 1)
    return stats._replace(count=count)


def _negative_bins(edges: jax.Array) -> jax.Array:
    return 0.5 * (edges[:-1] + edges[1:]) < 0.5


def _bin_means(stats: BinStats) -> tuple[jax.Array, jax.Array]:
    nonempty = stats.weight > 0
    safe = jnp.where(nonempty, stats.weight, 1.0)
    conf = jnp.where(nonempty, stats.sum_probs / safe, jnp.nan)
    acc = jnp.where(nonempty, stats.sum_labels / safe, jnp.nan)
    return conf, acc


def ece_from_stats(stats: BinStats) -> jax.Array:
    r"""ECE :math:`= \sum_b |Y_b - P_b| / W` from (possibly merged) :class:`BinStats`."""
    return jnp.sum(jnp.abs(stats.sum_labels - stats.sum_probs)) / jnp.sum(stats.weight)


def mce_from_stats(stats: BinStats, min_count: ArrayLike = 1) -> jax.Array:
    """MCE over bins holding at least ``min_count`` samples (and positive weight)."""
    conf, acc = _bin_means(stats)
    keep = (stats.count >= min_count) & (stats.weight > 0)
    gap = jnp.where(keep, jnp.abs(acc - conf), -jnp.inf)
    best = jnp.max(gap)
    return jnp.where(jnp.isfinite(best), best, jnp.nan)


@jit
def _ece_core(p, y, w, edges):
    return ece_from_stats(binned_stats(p, y, edges, w))


@jit
def _mce_core(p, y, w, edges, min_count, n=None):
    return mce_from_stats(_real_stats(p, y, w, n, edges), min_count)


@partial(jit, static_argnames="symmetric")
def _reliability_core(p, y, w, edges, n=None, *, symmetric: bool) -> Reliability:
    stats = _real_stats(p, y, w, n, edges)
    conf, acc = _bin_means(stats)
    negative = _negative_bins(edges) & symmetric
    conf = jnp.where(negative, 1.0 - conf, conf)
    acc = jnp.where(negative, 1.0 - acc, acc)
    return Reliability(edges, stats.count, stats.weight, conf, acc, negative)


@jit
def _nll_core(p, y, w, eps):
    p = jnp.clip(p, eps, 1.0 - eps)
    ll = y * jnp.log(p) + (1.0 - y) * jnp.log1p(-p)
    return -jnp.sum(w * ll) / jnp.sum(w)


@jit
def _brier_core(p, y, w):
    return jnp.sum(w * (p - y) ** 2) / jnp.sum(w)


# --------------------------------------------------------------------- eager public API


def bin_edges(
    probs: ArrayLike | None = None,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
) -> np.ndarray:
    """Bin edges on [0, 1]: equal width (``"uniform"``) or equal mass (``"quantile"``).

    Args:
        probs: the probabilities; needed only for ``strategy="quantile"``.
        n_bins: number of bins (>= 1).
        strategy: ``"uniform"`` or ``"quantile"``.

    Returns:
        ``[n_bins + 1]`` non-decreasing edges with ``edges[0] = 0`` and ``edges[-1] = 1``
        (a ``jax.Array`` for traced ``probs``: their quantiles, unchecked).

    Raises:
        ValueError: bad ``n_bins`` or ``strategy``, or ``probs`` missing for quantile bins.
    """
    if isinstance(n_bins, bool) or not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer; got {n_bins!r}.")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}.")
    if strategy == "uniform":
        return np.linspace(0.0, 1.0, int(n_bins) + 1)
    if probs is None:
        raise ValueError('strategy="quantile" needs the probabilities to place the edges.')
    if _shapes.is_traced(probs):
        return quantile_edges(jnp.sort(jnp.ravel(probs)), int(n_bins))
    edges = np.quantile(check_probs(probs), np.linspace(0.0, 1.0, int(n_bins) + 1))
    edges[0], edges[-1] = 0.0, 1.0
    return np.maximum.accumulate(edges)


def ece(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    sample_weight: ArrayLike | None = None,
    symmetric: bool = False,
) -> jax.Array:
    r"""Expected calibration error :math:`\sum_b \frac{W_b}{W} |\mathrm{acc}_b - \mathrm{conf}_b|`.

    Args:
        probs: ``[n]`` predicted probabilities P(y = 1) in [0, 1].
        labels: ``[n]`` 0/1 labels (or bools).
        n_bins: number of bins (default 15, as in Kweon et al. 2022's code).
        strategy: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass) bins.
        sample_weight: ``[n]`` non-negative weights (default ones).
        symmetric: score bins below 0.5 on the negative class (AAAI 2022 variant). ECE is
            invariant to it (see the module docstring); accepted for symmetry with
            :func:`reliability`.

    Returns:
        Scalar ECE in [0, 1].

    Raises:
        ValueError: probabilities outside [0, 1] or non-finite, labels not 0/1, length
            mismatch, empty input, negative or all-zero weights, bad ``n_bins``/``strategy``.

    Example:
        >>> from jaxcal.metrics import ece
        >>> round(float(ece([0.2, 0.8], [0, 1], n_bins=10)), 6)  # (0.2 + 0.2) / 2
        0.2
    """
    del symmetric  # |(1 - a) - (1 - c)| = |a - c|: same value either way
    x = metric_inputs(probs, labels, sample_weight)
    edges = bin_edges(x.probs, n_bins=n_bins, strategy=strategy)
    return x.result(_ece_core(*x.padded(), edges))


def _min_count(n: int, min_count: int, min_fraction: float) -> int:
    if isinstance(min_count, bool) or not isinstance(min_count, (int, np.integer)):
        raise ValueError(f"min_count must be an integer; got {min_count!r}.")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1; got {min_count}.")
    if not (0.0 <= min_fraction < 1.0):
        raise ValueError(f"min_fraction must be in [0, 1); got {min_fraction!r}.")
    return max(int(min_count), math.ceil(min_fraction * n))


def mce(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    sample_weight: ArrayLike | None = None,
    symmetric: bool = False,
    min_count: int = 1,
    min_fraction: float = 0.0,
) -> jax.Array:
    r"""Maximum calibration error :math:`\max_b |\mathrm{acc}_b - \mathrm{conf}_b|`.

    Only bins with at least ``max(min_count, ceil(min_fraction * n))`` samples count, so a
    bin holding one stray prediction does not decide the metric. The defaults keep every
    non-empty bin; Kweon et al. (AAAI 2022)'s code ignores bins with under 0.01% of the
    samples, i.e. ``min_fraction=1e-4``.

    Args:
        probs, labels, n_bins, strategy, sample_weight, symmetric: as in :func:`ece`.
        min_count: minimum number of samples in a bin (default 1: non-empty bins).
        min_fraction: minimum share of all samples in a bin (default 0.0).

    Returns:
        Scalar MCE in [0, 1]; NaN if no bin qualifies.

    Raises:
        ValueError: as in :func:`ece`, or ``min_count < 1``, ``min_fraction`` outside [0, 1).

    Example:
        >>> from jaxcal.metrics import mce
        >>> p, y = [0.05, 0.15, 0.12, 0.6], [0, 1, 0, 0]
        >>> round(float(mce(p, y, n_bins=10)), 6)  # bin [0.6, 0.7): |0 - 0.6|
        0.6
        >>> round(float(mce(p, y, n_bins=10, min_count=2)), 6)  # bin [0.1, 0.2): |1/2 - 0.135|
        0.365
    """
    del symmetric  # invariant, see ece
    x = metric_inputs(probs, labels, sample_weight)
    threshold = _min_count(x.probs.shape[0], min_count, min_fraction)
    edges = bin_edges(x.probs, n_bins=n_bins, strategy=strategy)
    return x.result(_mce_core(*x.padded(), edges, threshold, x.n))


def reliability(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 15,
    strategy: str = "uniform",
    sample_weight: ArrayLike | None = None,
    symmetric: bool = False,
) -> Reliability:
    """Per-bin weight, mean confidence and accuracy: the data of a reliability diagram.

    Args:
        probs, labels, n_bins, strategy, sample_weight: as in :func:`ece`.
        symmetric: report bins with midpoint below 0.5 on the negative class
            (confidence ``1 - mean p``, accuracy = share of negatives), as in the
            reliability diagrams of Kweon et al. (AAAI 2022).

    Returns:
        A :class:`Reliability` NamedTuple (a pytree of ``jax.Array``).

    Raises:
        ValueError: as in :func:`ece`.

    Example:
        >>> from jaxcal.metrics import reliability
        >>> r = reliability([0.05, 0.15, 0.9], [0, 1, 1], n_bins=10)
        >>> r.count.tolist()[:2], r.accuracy.tolist()[1]
        ([1.0, 1.0], 1.0)
    """
    x = metric_inputs(probs, labels, sample_weight)
    edges = bin_edges(x.probs, n_bins=n_bins, strategy=strategy)
    return x.result(_reliability_core(*x.padded(), edges, x.n, symmetric=bool(symmetric)))


def nll(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    eps: float | None = None,
) -> jax.Array:
    r"""Weighted mean binary cross-entropy (log-loss).

    .. math:: \mathrm{NLL} = -\frac{1}{W}\sum_i w_i [y_i \log p_i + (1 - y_i)\log(1 - p_i)]

    Probabilities are clipped to :math:`[\epsilon, 1 - \epsilon]` first so that a confident
    mistake costs :math:`-\log\epsilon` instead of infinity. The default ``eps=None`` uses the
    machine epsilon of the computation dtype (2.2e-16 in float64, 1.2e-7 in float32), as
    scikit-learn's ``log_loss`` does since 1.3.

    Args:
        probs, labels, sample_weight: as in :func:`ece`.
        eps: clipping constant in (0, 0.5), or ``None`` for the dtype's machine epsilon
            (inside a trace: the machine epsilon of the probabilities' dtype).

    Returns:
        Scalar NLL (nats per sample).

    Raises:
        ValueError: as in :func:`ece`, or ``eps`` outside (0, 0.5).

    Example:
        >>> import math
        >>> from jaxcal.metrics import nll
        >>> value = float(nll([0.8, 0.4], [1, 0]))  # -(log 0.8 + log 0.6) / 2
        >>> math.isclose(value, -(math.log(0.8) + math.log(0.6)) / 2, rel_tol=1e-6)
        True
    """
    x = metric_inputs(probs, labels, sample_weight, eps)
    dtype = x.probs.dtype if x.traced else jnp.result_type(float)
    if eps is None:
        eps = float(jnp.finfo(dtype).eps)
    elif not _shapes.is_traced(eps) and not 0.0 < eps < 0.5:
        raise ValueError(f"eps must be in (0, 0.5); got {eps!r}.")
    return x.result(_nll_core(*x.padded(fill_p=0.5), jnp.asarray(eps, dtype)))


def brier(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
) -> jax.Array:
    r"""Weighted Brier score :math:`\frac{1}{W}\sum_i w_i (p_i - y_i)^2`.

    Args:
        probs, labels, sample_weight: as in :func:`ece`.

    Returns:
        Scalar Brier score in [0, 1].

    Raises:
        ValueError: as in :func:`ece`.

    Example:
        >>> from jaxcal.metrics import brier
        >>> round(float(brier([0.8, 0.4], [1, 0])), 6)  # (0.2^2 + 0.4^2) / 2
        0.1
        >>> round(float(brier([0.8, 0.4], [1, 0], sample_weight=[3, 1])), 6)  # (3*0.04 + 0.16) / 4
        0.07
    """
    x = metric_inputs(probs, labels, sample_weight)
    return x.result(_brier_core(*x.padded()))
