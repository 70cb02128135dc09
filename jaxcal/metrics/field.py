r"""Field-level calibration metrics: PCOC, Cal-N, GC-N, Field-ECE and Field-RCE.

A model can be calibrated on the whole data set and still be badly off on every *field
value* (every age group, every item category), with the errors cancelling. These metrics
measure calibration per field value. With sample weights :math:`w_i`, a field value
:math:`z` has total weight :math:`W_z = \sum_{i: z_i = z} w_i`, predicted mass
:math:`P_z = \sum_{i: z_i = z} w_i p_i` and observed mass :math:`Y_z = \sum_{i: z_i = z} w_i
y_i`; :math:`W = \sum_z W_z`.

Field-ECE and Field-RCE (Pan, Lee, Tian, Sun, Yang. "Field-aware Calibration: A Simple and
Empirically Strong Method for Reliable Probabilistic Predictions", WWW 2020):

.. math::

    \mathrm{Field\text{-}ECE} = \frac{1}{W}\sum_z |Y_z - P_z|, \qquad
    \mathrm{Field\text{-}RCE} = \frac{1}{W}\sum_z W_z\,\frac{|Y_z - P_z|}{Y_z + \epsilon W_z}

(unweighted, :math:`Y_z + \epsilon W_z = \sum_{i: z_i = z}(y_i + \epsilon)` as in the paper:
Field-RCE is the field-weighted *relative* error, each field value's error divided by its
positive rate plus :math:`\epsilon`).

PCOC, Cal-N and GC-N (Deng et al., "Calibrating User Response Predictions in Online
Advertising", ECML-PKDD 2020, where they are used to evaluate SIR):
:math:`\mathrm{PCOC} = \sum_i w_i p_i / \sum_i w_i y_i` (predicted over observed clicks; 1 is
calibrated in aggregate). Cal-N splits the data into :math:`N` bins by the predicted
probability and takes the root mean square of the per-bin PCOC errors

.. math::

    \mathrm{Cal\text{-}N} = \sqrt{\tfrac{1}{N'}\textstyle\sum_b e_b^2},\qquad
    e_b = \max(\mathrm{PCOC}_b, 1/\mathrm{PCOC}_b) - 1
        = \begin{cases}\mathrm{PCOC}_b - 1 & \mathrm{PCOC}_b \ge 1\\
                       1/\mathrm{PCOC}_b - 1 & \mathrm{PCOC}_b < 1\end{cases}

over the :math:`N'` non-empty bins, and GC-N averages Cal-N over groups (field values):
:math:`\mathrm{GC\text{-}N} = \sum_j v_j \mathrm{Cal\text{-}N}_j / \sum_j v_j` with group
weights :math:`v_j` (default the group's total sample weight). A bin holding predictions but
no positives (or positives but zero predictions) has an undefined PCOC and an infinite error,
so Cal-N is ``inf`` there: choose ``n_bins`` so that every bin holds positives.

Every metric is a function of additive per-segment sums (:func:`segment_stats`), computed with
``jax.ops.segment_sum``; they run data-parallel inside ``shard_map`` (``axis_name=``) or under
``jit`` over ``NamedSharding``-sharded inputs, exactly as :mod:`jaxcal.metrics.calibration`.

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) the field values and
groups are re-coded in the program (one segment slot per sample, so ``n`` slots: exact,
empty slots add nothing) and invalid data gives NaN (docs/metrics.md). PCOC, Field-ECE and
Field-RCE are differentiable in ``probs``; Cal-N and GC-N too, within their bins.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_groups, nan_where
from jaxcal.metrics._inputs import metric_inputs, padded_rows
from jaxcal.metrics._pure import dense_ranks, quantile_edges
from jaxcal.metrics.calibration import (
    STRATEGIES,
    BinStats,
    bin_edges,
    bin_ids,
    class_sums,
    weighted_arrays,
)

__all__ = [
    "segment_stats",
    "field_ece_from_stats",
    "field_rce_from_stats",
    "cal_n_from_stats",
    "encode_fields",
    "pcoc",
    "cal_n",
    "gc_n",
    "field_ece",
    "field_rce",
]


# --------------------------------------------------------------------------- pure core


def segment_stats(
    probs: ArrayLike,
    labels: ArrayLike,
    segment_ids: ArrayLike,
    n_segments: int,
    sample_weight: ArrayLike | None = None,
    *,
    axis_name: str | None = None,
) -> BinStats:
    """Per-segment sums (count, weight, weighted probs, weighted labels) of (a shard of) data.

    Pure and ``jit`` / ``shard_map`` friendly; no validation. Segment ids outside
    ``[0, n_segments)`` are dropped (``segment_sum`` semantics).

    Args:
        probs: ``[n]`` predicted probabilities.
        labels: ``[n]`` 0/1 labels.
        segment_ids: ``[n]`` integer segment (field value / bin) ids.
        n_segments: number of segments (static).
        sample_weight: ``[n]`` non-negative weights, or ``None`` for ones.
        axis_name: inside ``shard_map``, the mapped axis to ``psum`` the sums over.

    Returns:
        :class:`jaxcal.metrics.calibration.BinStats` with ``[n_segments]`` arrays.
    """
    p, y, w = weighted_arrays(probs, labels, sample_weight)
    return class_sums(p, y, w, segment_ids, n_segments, axis_name=axis_name)


def field_ece_from_stats(stats: BinStats) -> jax.Array:
    r"""Field-ECE :math:`\sum_z |Y_z - P_z| / W` from per-field-value sums."""
    return jnp.sum(jnp.abs(stats.sum_labels - stats.sum_probs)) / jnp.sum(stats.weight)


def field_rce_from_stats(stats: BinStats, eps: ArrayLike) -> jax.Array:
    r"""Field-RCE :math:`\sum_z W_z |Y_z - P_z| / (Y_z + \epsilon W_z) / W`."""
    gap = jnp.abs(stats.sum_labels - stats.sum_probs)
    denom = stats.sum_labels + eps * stats.weight
    safe = jnp.where(stats.weight > 0, denom, 1.0)
    term = jnp.where(stats.weight > 0, stats.weight * gap / safe, 0.0)
    return jnp.sum(term) / jnp.sum(stats.weight)


def _pcoc_error(stats: BinStats) -> jax.Array:
    """Per-segment ``max(P/Y, Y/P) - 1`` (inf where exactly one of P, Y is zero)."""
    p, y = stats.sum_probs, stats.sum_labels
    both_zero = (p <= 0) & (y <= 0)
    hi = jnp.maximum(p, y)
    lo = jnp.minimum(p, y)
    ratio = jnp.where(lo > 0, hi / jnp.where(lo > 0, lo, 1.0), jnp.inf)
    return jnp.where(both_zero, 0.0, ratio - 1.0)


def cal_n_from_stats(stats: BinStats) -> jax.Array:
    """Cal-N from per-bin sums (bins on the last axis; leading axes are groups).

    Empty bins (zero weight) are skipped; the mean is over the non-empty bins. A group with
    no non-empty bin gives NaN.
    """
    nonempty = stats.weight > 0
    err = jnp.where(nonempty, _pcoc_error(stats), 0.0)
    n_nonempty = jnp.sum(nonempty, axis=-1)
    mean_sq = jnp.sum(err**2, axis=-1) / jnp.where(n_nonempty > 0, n_nonempty, 1)
    return jnp.where(n_nonempty > 0, jnp.sqrt(mean_sq), jnp.nan)


@partial(jit, static_argnames="n_segments")
def _field_stats_core(p, y, w, ids, *, n_segments):
    # ids: [F, n] (one row per field column) -> stats with [F, n_segments] arrays
    return jax.vmap(lambda i: segment_stats(p, y, i, n_segments, w))(ids)


@jit
def _field_ece_core(stats):
    return jax.vmap(field_ece_from_stats)(stats)


@jit
def _field_rce_core(stats, eps):
    return jax.vmap(lambda s: field_rce_from_stats(s, eps))(stats)


@partial(jit, static_argnames="n_segments")
def _cal_n_core(p, y, w, ids, *, n_segments):
    return cal_n_from_stats(segment_stats(p, y, ids, n_segments, w))


@partial(jit, static_argnames=("n_slots", "n_bins", "group_weight"))
def _gc_n_core(p, y, w, ids, n_groups, *, n_slots, n_bins, group_weight):
    """GC-N over ``n_groups`` groups held in ``n_slots`` slots (the others are empty)."""
    stats = segment_stats(p, y, ids, n_slots * n_bins, w)
    stats = BinStats(*(a.reshape(n_slots, n_bins) for a in stats))
    per_group = cal_n_from_stats(stats)
    v = {
        "weight": stats.weight.sum(-1),
        "count": stats.count.sum(-1),
        "uniform": jnp.ones(n_slots, per_group.dtype),
    }[group_weight]
    real = jnp.arange(n_slots) < n_groups
    return jnp.sum(jnp.where(real, v * per_group, 0.0)) / jnp.sum(jnp.where(real, v, 0.0))


def _padded_rows(n, p, y, w, ids, n_segments):
    """Rows padded to the bucket size of ``n``: zero weight (:func:`padded_rows`) and segment
    id ``n_segments`` (out of range: ``segment_sum`` drops them), as device arrays."""
    ids = _shapes.pad_axis(ids, _shapes.padded_size(n), n_segments, axis=ids.ndim - 1)
    return [*padded_rows(n, p, y, w), jax.device_put(ids)]


# ------------------------------------------------------------- traced inputs (pure path)


def _pure_codes(values, n: int, name: str):
    """``[F, n]`` codes ``0..G_f - 1`` of ``[n]`` or ``[n, F]`` field values (possibly traced)
    and whether some value is not an integer (the NaN policy)."""
    v = jnp.asarray(values)
    if v.ndim not in (1, 2) or v.shape[0] != n:
        raise ValueError(f"{name} must be [n] or [n, F] with n = {n}; got shape {v.shape}.")
    if v.dtype.kind not in "biuf":
        raise ValueError(f"{name} must hold integer ids; got dtype {v.dtype}.")
    cols = v.reshape(n, -1).T
    if cols.shape[0] == 0:
        raise ValueError(f"{name} has no columns; pass at least one field.")
    invalid = jnp.zeros((), bool)
    if v.dtype.kind == "f":
        invalid = jnp.any(~jnp.isfinite(cols) | (cols != jnp.round(cols)))
    codes, _ = jax.vmap(dense_ranks)(cols)
    return codes, invalid


def _pure_group_bins(p, codes, n_bins: int, strategy: str):
    """The bin of each prediction among its own group's (``codes``, ``0..G - 1``): uniform
    bins, or quantile bins of the group's predictions, with ``n`` group slots."""
    if strategy == "uniform":
        return bin_ids(p, jnp.asarray(np.linspace(0.0, 1.0, n_bins + 1), p.dtype))
    g_sorted, p_sorted = jax.lax.sort((codes, p), num_keys=2)
    slots = jnp.arange(p.shape[0], dtype=codes.dtype)
    start = jnp.searchsorted(g_sorted, slots, side="left")
    count = jnp.searchsorted(g_sorted, slots, side="right") - start

    def edges_of(c, s0):
        return quantile_edges(p_sorted, n_bins, count=c, start=s0)

    inner = jax.vmap(edges_of)(count, start)[codes, 1:-1]  # [n, n_bins - 1]
    return jnp.sum(inner <= p[:, None], axis=1, dtype=jnp.int32)


# --------------------------------------------------------------------- eager public API


def encode_fields(fields: ArrayLike, n: int, *, name: str = "fields") -> tuple[np.ndarray, int]:
    """Re-code field values column by column to ``0..G_f - 1`` (eager, NumPy).

    Args:
        fields: ``[n]`` (one field) or ``[n, F]`` integer field values (any integers).
        n: the expected number of rows.
        name: the argument name used in error messages.

    Returns:
        ``(ids, n_segments)``: ``[F, n]`` int32 ids and ``max_f G_f``.

    Raises:
        ValueError: wrong shape or length, non-integer values, no columns.
    """
    arr = np.asarray(fields)
    if arr.ndim not in (1, 2):
        raise ValueError(f"{name} must be [n] or [n, F]; got shape {arr.shape}.")
    cols = arr.reshape(arr.shape[0], -1)
    if cols.shape[1] == 0:
        raise ValueError(f"{name} has no columns; pass at least one field.")
    ids = []
    for f in range(cols.shape[1]):
        col = check_groups(cols[:, f], n, name=name)
        ids.append(np.unique(col, return_inverse=True)[1].reshape(-1))
    ids = np.stack(ids).astype(np.int32)
    return ids, int(ids.max()) + 1


def pcoc(
    probs: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""Predicted over observed clicks, :math:`\sum_i w_i p_i / \sum_i w_i y_i`.

    PCOC = 1 means calibrated in aggregate; > 1 over-prediction. Deng et al. (ECML-PKDD 2020).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        sample_weight: ``[n]`` non-negative weights (default ones).

    Returns:
        Scalar PCOC.

    Raises:
        ValueError: bad probabilities, labels or weights, or no positive label (PCOC is
            undefined without observed clicks).

    Example:
        >>> from jaxcal.metrics import pcoc
        >>> round(float(pcoc([0.2, 0.4, 0.6], [0, 1, 0])), 6)  # (0.2 + 0.4 + 0.6) / 1
        1.2
    """
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight)
    if invalid is not None:  # traced inputs
        observed = jnp.sum(w * y)
        invalid = invalid | ~(observed > 0)
        return nan_where(invalid, jnp.sum(w * p) / jnp.where(observed > 0, observed, 1.0))
    observed = np.dot(w, y)
    if observed <= 0:
        raise ValueError("pcoc is undefined without positive labels (sum of w * y is 0).")
    return jax.device_put(np.asarray(np.dot(w, p) / observed, jnp.result_type(float)))


def _bin_ids(p: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    edges = bin_edges(p, n_bins=n_bins, strategy=strategy)
    return np.searchsorted(edges[1:-1], p, side="right").astype(np.int32)


def _grouped_bin_ids(p: np.ndarray, g: np.ndarray, n_bins: int, strategy: str) -> np.ndarray:
    """Bins of each group's own predictions (quantile edges per group)."""
    if strategy == "uniform":
        return _bin_ids(p, n_bins, strategy)
    out = np.empty(p.shape[0], np.int32)
    order = np.argsort(g, kind="stable")  # one sort, then contiguous slices per group
    starts = np.flatnonzero(np.diff(g[order], prepend=-1))
    for idx in np.split(order, starts[1:]):
        out[idx] = _bin_ids(p[idx], n_bins, strategy)
    return out


def cal_n(
    probs: ArrayLike,
    labels: ArrayLike,
    *,
    n_bins: int = 10,
    strategy: str = "quantile",
    sample_weight: ArrayLike | None = None,
) -> jax.Array:
    r"""Cal-N: RMS of the per-bin PCOC errors :math:`\max(\mathrm{PCOC}_b, 1/\mathrm{PCOC}_b)-1`.

    Deng et al. (ECML-PKDD 2020). Bins are those of :func:`jaxcal.metrics.ece`
    (``"quantile"``: equal-mass bins of the predictions, the default; ``"uniform"``: equal
    width); empty bins are skipped.

    Args:
        probs, labels, sample_weight: as in :func:`pcoc`.
        n_bins: the N of Cal-N (default 10).
        strategy: ``"quantile"`` or ``"uniform"`` bins.

    Returns:
        Scalar Cal-N (0 is perfect; ``inf`` if a bin has predictions but no positives).

    Raises:
        ValueError: bad probabilities, labels, weights, ``n_bins`` or ``strategy``.

    Example:
        >>> from jaxcal.metrics import cal_n
        >>> float(cal_n([0.2, 0.8], [0, 1], n_bins=1))  # PCOC = 1.0
        0.0
    """
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight)
    if invalid is not None:  # traced inputs
        ids = bin_ids(p, bin_edges(p, n_bins=n_bins, strategy=strategy))
        return nan_where(invalid, _cal_n_core(p, y, w, ids, n_segments=int(n_bins)))
    ids = _bin_ids(p, n_bins, strategy)
    n_bins = int(n_bins)
    return _cal_n_core(*_padded_rows(p.shape[0], p, y, w, ids, n_bins), n_segments=n_bins)


def gc_n(
    probs: ArrayLike,
    labels: ArrayLike,
    groups: ArrayLike,
    *,
    n_bins: int = 10,
    strategy: str = "quantile",
    sample_weight: ArrayLike | None = None,
    group_weight: str = "weight",
) -> jax.Array:
    r"""Grouped Cal-N: :math:`\sum_j v_j \mathrm{Cal\text{-}N}_j / \sum_j v_j` over groups.

    Each group's Cal-N uses its own bins (equal-mass bins of the group's predictions for
    ``strategy="quantile"``). Deng et al. (ECML-PKDD 2020).

    Args:
        probs, labels, sample_weight: as in :func:`pcoc`.
        groups: ``[n]`` integer group (field value) ids.
        n_bins, strategy: as in :func:`cal_n`.
        group_weight: ``"weight"`` (total sample weight of the group, default), ``"count"``
            (number of samples) or ``"uniform"`` (every group counts the same).

    Returns:
        Scalar GC-N.

    Raises:
        ValueError: bad inputs, ``groups`` of the wrong length or not integers, unknown
            ``group_weight``.

    Example:
        >>> from jaxcal.metrics import gc_n
        >>> p, y, g = [0.2, 0.4, 0.5, 0.5], [0, 1, 1, 0], [0, 0, 1, 1]
        >>> # group 0: PCOC 0.6, Cal-N 1/0.6 - 1 = 2/3; group 1: PCOC 1, Cal-N 0
        >>> round(float(gc_n(p, y, g, n_bins=1)), 4)
        0.3333
    """
    if group_weight not in ("weight", "count", "uniform"):
        raise ValueError(
            f'group_weight must be "weight", "count" or "uniform"; got {group_weight!r}.'
        )
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}.")
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight, groups)
    if invalid is not None:  # traced inputs
        bin_edges(n_bins=n_bins)  # checks n_bins
        n = p.shape[0]
        if jnp.ndim(groups) != 1:
            raise ValueError(f"groups must be 1-D; got shape {jnp.shape(groups)}.")
        codes, bad = _pure_codes(groups, n, "groups")
        codes = codes[0]
        n_bins = int(n_bins)
        ids = codes * n_bins + _pure_group_bins(p, codes, n_bins, strategy)
        value = _gc_n_core(
            p, y, w, ids, jnp.max(codes) + 1, n_slots=n, n_bins=n_bins, group_weight=group_weight
        )
        return nan_where(invalid | bad, value)
    g = np.unique(check_groups(groups, p.shape[0], name="groups"), return_inverse=True)[1]
    g = g.reshape(-1)
    n_groups = int(g.max()) + 1
    n_slots = _shapes.padded_size(n_groups)  # group slots: one program per bucket of groups
    n_bins = int(n_bins)
    bins = _grouped_bin_ids(p, g, n_bins, strategy)
    ids = (g * n_bins + bins).astype(np.int32)
    return _gc_n_core(
        *_padded_rows(p.shape[0], p, y, w, ids, n_slots * n_bins),
        n_groups,
        n_slots=n_slots,
        n_bins=n_bins,
        group_weight=group_weight,
    )


def _field_stats(probs, labels, fields, sample_weight):
    """Per-field-value sums (``[F, S]``, ``S`` segments padded to a bucket size: empty
    segments add nothing to either metric), whether ``fields`` is one column, and whether
    the data is invalid (traced inputs: the NaN policy; ``False`` otherwise)."""
    p, y, w, invalid = metric_inputs(probs, labels, sample_weight, fields)
    if invalid is not None:  # traced inputs
        ids, bad = _pure_codes(fields, p.shape[0], "fields")
        stats = _field_stats_core(p, y, w, ids, n_segments=p.shape[0])
        return stats, jnp.ndim(fields) == 1, invalid | bad
    ids, n_segments = encode_fields(fields, p.shape[0])
    n_segments = _shapes.padded_size(n_segments)
    rows = _padded_rows(p.shape[0], p, y, w, ids, n_segments)
    stats = _field_stats_core(*rows, n_segments=n_segments)
    return stats, np.asarray(fields).ndim == 1, False


def _per_column(out: jax.Array, one: bool, invalid) -> jax.Array:
    """``[F]`` metrics, or the scalar of a single ``[n]`` field (sliced on the host; in the
    program for traced inputs, where ``invalid`` makes them NaN)."""
    if _shapes.is_traced(out):
        return nan_where(invalid, out[0] if one else out)
    return jax.device_put(np.asarray(out)[0]) if one else out


def field_ece(
    probs: ArrayLike,
    labels: ArrayLike,
    fields: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
) -> jax.Array:
    r"""Field-level ECE :math:`\frac{1}{W}\sum_z |Y_z - P_z|` (Pan et al., WWW 2020).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        fields: ``[n]`` integer field values (one field), or ``[n, F]`` (one metric per
            column).
        sample_weight: ``[n]`` non-negative weights (default ones).

    Returns:
        Scalar Field-ECE for ``[n]`` fields, ``[F]`` values for ``[n, F]``.

    Raises:
        ValueError: bad probabilities / labels / weights, ``fields`` of the wrong shape or
            length or not integers.

    Example:
        >>> from jaxcal.metrics import field_ece
        >>> float(field_ece([0.5, 0.5, 0.5, 0.5], [1, 1, 0, 0], [0, 0, 1, 1]))
        0.5
    """
    stats, one, invalid = _field_stats(probs, labels, fields, sample_weight)
    return _per_column(_field_ece_core(stats), one, invalid)


def field_rce(
    probs: ArrayLike,
    labels: ArrayLike,
    fields: ArrayLike,
    *,
    eps: float = 1e-6,
    sample_weight: ArrayLike | None = None,
) -> jax.Array:
    r"""Field-level relative calibration error (Pan et al., WWW 2020).

    .. math:: \mathrm{Field\text{-}RCE} = \frac{1}{W}\sum_z W_z\,\frac{|Y_z - P_z|}{Y_z +
        \epsilon W_z}

    Args:
        probs, labels, fields, sample_weight: as in :func:`field_ece`.
        eps: the :math:`\epsilon > 0` added to every label (default ``1e-6``); a field value
            without positives contributes :math:`|P_z| / \epsilon`-sized error.

    Returns:
        Scalar Field-RCE for ``[n]`` fields, ``[F]`` values for ``[n, F]``.

    Raises:
        ValueError: as in :func:`field_ece`, or ``eps <= 0``.

    Example:
        >>> from jaxcal.metrics import field_rce
        >>> round(float(field_rce([0.25, 0.25], [1, 0], [0, 0])), 4)  # |1 - 0.5| / 1
        0.5
    """
    if not _shapes.is_traced(eps) and not (
        isinstance(eps, (int, float)) and np.isfinite(eps) and eps > 0
    ):
        raise ValueError(f"eps must be a positive finite number; got {eps!r}.")
    stats, one, invalid = _field_stats(probs, labels, fields, sample_weight)
    return _per_column(_field_rce_core(stats, eps), one, invalid)
