r"""Pure cores of the cumulative calibration error (ECCE) and its segment sums.

For probabilities :math:`p_i`, labels :math:`y_i` and weights :math:`w_i` of a segment
:math:`S`, ordered by increasing :math:`p`, the cumulative differences are
:math:`C_k = \frac{1}{W_S}\sum_{i \le k,\ i \in S} w_i (y_i - p_i)` with :math:`C_0 = 0`
and :math:`W_S = \sum_{i \in S} w_i`, and

.. math::

    \mathrm{ECCE}_S = \max_k C_k - \min_k C_k, \qquad
    \sigma_S = \frac{\sqrt{\sum_{i \in S} w_i^2\, p_i (1 - p_i)}}{W_S}

(Arrieta-Ibarra et al., JMLR 2022: the range of the cumulative differences, Kuiper's
statistic, and its scale under perfect calibration). Under perfect calibration
:math:`\mathrm{ECCE}_S / \sigma_S` tends to the range of a standard Brownian motion on
[0, 1], whose tail :func:`range_log_sf` gives the p-value.

Ties: :math:`C_k` is read only at the end of each run of equal probabilities (and at
:math:`k = 0`), so the statistic does not depend on the order of tied rows, and a row of
weight ``k`` gives the same :math:`C` as ``k`` copies of it. With distinct probabilities
every :math:`k` counts.

Every function here is pure and traceable; the public shell (``multicalibration.py``)
validates inputs and may pass rows presorted on the host.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import log_ndtr

from jaxcal import _scan

__all__ = [
    "SegmentStats",
    "range_log_sf",
    "masked_stats",
    "cell_stats",
    "segmented_cumsum",
    "segment_ecce",
    "segment_std",
    "segment_sigma",
]

#: terms of the two series of :func:`range_log_sf` (enough for float64 on either side of
#: the switch: the neglected terms are below exp(-40))
_TERMS = 12
#: below this the theta-function series is used, above it the Gaussian-tail series
_SWITCH = 1.5
#: below this the range's CDF is 0 to double precision (exp(-pi^2 / (2 x^2)) < 1e-800)
_TINY = 0.05


class SegmentStats(NamedTuple):
    """Sums of one or more segments (each leaf has the segments' shape)."""

    count: jax.Array  #: number of rows (padding excluded)
    weight: jax.Array  #: :math:`W_S = \sum w_i`
    sum_labels: jax.Array  #: :math:`\sum w_i y_i`
    sum_probs: jax.Array  #: :math:`\sum w_i p_i`
    sum_variance: jax.Array  #: :math:`\sum w_i^2 p_i (1 - p_i)`
    spread: jax.Array  #: :math:`W_S \cdot \mathrm{ECCE}_S`, the range of the unnormalised sums


def range_log_sf(x: jax.Array) -> jax.Array:
    r"""Log of :math:`P(R \ge x)`, :math:`R` the range (max - min) of a standard Brownian
    motion on [0, 1] (Feller 1951).

    For :math:`x \ge 1.5` the Gaussian-tail series
    :math:`P(R \ge x) = 8 \sum_{k \ge 1} (-1)^{k-1} k\, \bar\Phi(k x)`, summed in log space
    (accurate for tiny p-values); below, :math:`1 - F(x)` with the theta-function series
    :math:`F(x) = 8 \sum_{m \text{ odd}} (x^{-2} + (m \pi)^{-2}) e^{-m^2 \pi^2 / (2 x^2)}`.
    ``x <= 0`` gives 0 (p-value 1), ``x = inf`` gives ``-inf``, NaN stays NaN.
    """
    x = jnp.asarray(x)
    dtype = x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.result_type(float)
    x = x.astype(dtype)
    k = jnp.arange(1, _TERMS + 1, dtype=dtype)
    # tail series: 8 Q(x) (1 + sum_{k>=2} (-1)^{k-1} k Q(kx) / Q(x)), in logs
    xt = jnp.maximum(x, _SWITCH)[..., None]
    log_q = log_ndtr(-k * xt)
    sign = jnp.where(k % 2 == 1, 1.0, -1.0).astype(dtype)
    ratio = jnp.sum((sign * k * jnp.exp(log_q - log_q[..., :1]))[..., 1:], axis=-1)
    log_tail = math.log(8.0) + log_q[..., 0] + jnp.log1p(ratio)
    # theta series for the CDF
    xs = jnp.clip(x, _TINY, _SWITCH)[..., None]
    m = 2.0 * k - 1.0
    terms = (1.0 / xs**2 + 1.0 / (m * math.pi) ** 2) * jnp.exp(-((m * math.pi) ** 2) / (2 * xs**2))
    cdf = 8.0 * jnp.sum(terms, axis=-1)
    log_body = jnp.where(x < _TINY, 0.0, jnp.log1p(-jnp.minimum(cdf, 1.0)))
    out = jnp.where(x >= _SWITCH, log_tail, log_body)
    out = jnp.where(jnp.isposinf(x), -jnp.inf, out)
    return jnp.where(jnp.isnan(x), jnp.nan, out)


def _run_ends(*keys: jax.Array) -> jax.Array:
    """``[n]`` bool: the last row of each run of equal (key, ...) tuples in sorted rows."""
    n = keys[0].shape[-1]
    change = jnp.zeros(keys[0].shape[:-1] + (n - 1,), bool)
    for key in keys:
        change = change | (key[..., 1:] != key[..., :-1])
    return jnp.concatenate([change, jnp.ones(keys[0].shape[:-1] + (1,), bool)], axis=-1)


def _spread(sums: jax.Array, ends: jax.Array) -> jax.Array:
    """Range of the prefix sums ``sums`` read at ``ends``, with the empty prefix (0)."""
    hi = jnp.max(jnp.where(ends, sums, -jnp.inf), axis=-1)
    lo = jnp.min(jnp.where(ends, sums, jnp.inf), axis=-1)
    return jnp.maximum(hi, 0.0) - jnp.minimum(lo, 0.0)


def _sums(p, y, w, real, member):
    """The additive sums of :class:`SegmentStats` of the rows where ``member`` (any shape
    broadcasting against ``[n]``), summed over the last axis."""
    wm = w * member
    return (
        jnp.sum((real * member) > 0, axis=-1, dtype=jnp.int32),
        jnp.sum(wm, axis=-1),
        jnp.sum(wm * y, axis=-1),
        jnp.sum(wm * p, axis=-1),
        jnp.sum(wm * w * p * (1.0 - p), axis=-1),
    )


#: segments per vectorised batch of :func:`masked_stats` (memory: this many ``[n]`` rows)
MASK_BATCH = 64


def masked_stats(p, y, w, real, masks, *, presorted: bool = False) -> SegmentStats:
    """:class:`SegmentStats` of ``[S, n]`` boolean (or 0/1) segment masks, vectorised over
    segments in batches of :data:`MASK_BATCH` (one sort of the rows for all of them;
    working memory ``MASK_BATCH x n`` besides the masks).

    ``real`` marks rows that count (0 for padding); ``presorted`` says the rows (and the
    masks' columns) are already ordered by increasing ``p``.
    """
    masks = jnp.asarray(masks)
    if not presorted:
        order = jnp.argsort(p)
        p, y, w, real, masks = p[order], y[order], w[order], real[order], masks[:, order]
    ends = _run_ends(p)
    d = w * (y - p)

    def one(mask):
        mask = mask.astype(p.dtype)
        spread = _spread(_scan.cumsum(d * mask), ends)
        return SegmentStats(*_sums(p, y, w, real, mask), spread)

    return lax.map(one, masks, batch_size=min(MASK_BATCH, masks.shape[0]))


def _segmented_cumsum_sequential(x: jax.Array, start: jax.Array) -> jax.Array:
    def step(c, v):
        c = jnp.where(v[1], 0.0, c) + v[0]
        return c, c

    return lax.scan(step, jnp.zeros((), x.dtype), (x, start))[1]


def _segmented_cumsum_parallel(x: jax.Array, start: jax.Array) -> jax.Array:
    def op(a, b):
        return a[0] | b[0], jnp.where(b[0], b[1], a[1] + b[1])

    return lax.associative_scan(op, (start, x))[1]


def segmented_cumsum(x: jax.Array, start: jax.Array) -> jax.Array:
    """Prefix sums of ``x`` restarted at every ``start`` row (no cancellation between
    segments): one sequential scan on CPU, a parallel scan elsewhere."""
    return lax.platform_dependent(
        x, start, cpu=_segmented_cumsum_sequential, default=_segmented_cumsum_parallel
    )


def cell_stats(p, y, w, real, cells, num_cells: int, order=None) -> SegmentStats:
    """:class:`SegmentStats` ``[P, num_cells]`` of ``P`` partitions of the rows into cells
    (``cells``: ``[P, n]`` ids in ``0..num_cells - 1``), vectorised over partitions.

    Each partition costs one sort (rows by cell, then probability) and one segmented scan,
    however many cells it has. ``order`` (``[P, n]``, optional) is that sort, done on the
    host; without it the program sorts.
    """
    d = w * (y - p)

    def one(g, perm):
        if perm is None:
            perm = jnp.lexsort((p, g))
        gs, ps = g[perm], p[perm]
        start = jnp.concatenate([jnp.ones((1,), bool), gs[1:] != gs[:-1]])
        sums = segmented_cumsum(d[perm], start)
        ends = _run_ends(gs, ps)
        hi = jax.ops.segment_max(jnp.where(ends, sums, -jnp.inf), gs, num_segments=num_cells)
        lo = jax.ops.segment_min(jnp.where(ends, sums, jnp.inf), gs, num_segments=num_cells)
        spread = jnp.maximum(hi, 0.0) - jnp.minimum(lo, 0.0)

        def seg(v):
            return jax.ops.segment_sum(v, g, num_segments=num_cells)

        totals = (
            seg((real > 0).astype(jnp.int32)),
            seg(w),
            seg(w * y),
            seg(w * p),
            seg(w * w * p * (1 - p)),
        )
        return SegmentStats(*totals, spread)

    if order is None:
        return jax.vmap(lambda g: one(g, None))(cells)
    return jax.vmap(one)(cells, order)


def _safe_div(a, b):
    return jnp.where(b > 0, a / jnp.where(b > 0, b, 1.0), 0.0)


def segment_ecce(stats: SegmentStats) -> jax.Array:
    """ECCE of each segment (0 for a segment without weight)."""
    return _safe_div(stats.spread, stats.weight)


def segment_std(stats: SegmentStats) -> jax.Array:
    """:math:`\\sigma_S`, the standard deviation of the ECCE under perfect calibration."""
    return _safe_div(jnp.sqrt(stats.sum_variance), stats.weight)


def segment_sigma(stats: SegmentStats) -> jax.Array:
    """ECCE / sigma of each segment: ``inf`` where sigma is 0 but the ECCE is not (all
    probabilities 0 or 1 and a label disagrees), 0 where both are 0."""
    ecce, std = segment_ecce(stats), segment_std(stats)
    return jnp.where(
        std > 0, ecce / jnp.where(std > 0, std, 1.0), jnp.where(ecce > 0, jnp.inf, 0.0)
    )
