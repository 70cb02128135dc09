r"""The multicalibration error (MCE): the cumulative calibration error
(:mod:`jaxcal.metrics.cumulative`) of every segment that a table of features defines, its
worst value.

MCE (Guy, Haimovich, Linder, Okati, Perini, Tax and Tygert, 2025, arXiv 2506.11251; the
metric of MCGrad, Tax et al., KDD 2026). Segments :math:`S` are generated from the features
(see :func:`segment_masks`); each has :math:`\mathrm{ECCE}_S` and :math:`\sigma_S` over its
own rows, and

.. math::

    \mathrm{MCE}_\sigma = \max_S \mathrm{ECCE}_S / \sigma_S,\qquad
    \mathrm{MCE} = \mathrm{MCE}_\sigma \cdot \sigma_{\text{all rows}},

the worst segment in units of its own noise, put back on the probability scale with the
whole data's :math:`\sigma` (so segments count by signal-to-noise, not by size). The
p-value is that of the worst segment, not adjusted for the number of segments (as Guy et
al. and MCGrad report it: the segments overlap and their tests are strongly correlated);
``p_value_bonferroni`` multiplies it by the number of segments, a valid, conservative bound.

Segments and defaults follow MCGrad 0.1.5 (``max_depth=3``, three values per feature,
segments of at least 10 rows, at most 1000 segments, enumerated in its order), so that on
data without tied probabilities the numbers equal its ``MulticalibrationError`` (``mce``,
``mce_sigma``, ``mce_pvalue``, every segment's ECCE and sigma) in float64
(benchmarks/compare_mcgrad_metrics.py); ties are read as in
:mod:`jaxcal.metrics.cumulative`.

The report of the worst segments, with intervals, is :func:`jaxcal.metrics.segment_report`
(:mod:`jaxcal.metrics.mce_report`).
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._features import feature_columns
from jaxcal._jit import jit
from jaxcal._validation import check_probs, check_pure, nan_where
from jaxcal.metrics import _ecce, _segments
from jaxcal.metrics.cumulative import checked_inputs, padded_sorted

__all__ = [
    "MulticalibrationResult",
    "Segments",
    "multicalibration_error",
    "segment_masks",
]

MAX_DEPTH = 3
MAX_VALUES_PER_FEATURE = 3
MIN_SAMPLES = 10
MAX_SEGMENTS = 1000
#: the options of the segments and their defaults (MCGrad 0.1.5's)
SEGMENT_OPTIONS = {
    "categorical": None,
    "numeric": None,
    "max_depth": MAX_DEPTH,
    "max_values_per_feature": MAX_VALUES_PER_FEATURE,
    "min_samples": MIN_SAMPLES,
    "max_segments": MAX_SEGMENTS,
}


class MulticalibrationResult(NamedTuple):
    """The multicalibration error and its segments (``[S]`` arrays, in enumeration order:
    the first segment is all rows when segments come from features).

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics import MulticalibrationResult, multicalibration_error
        >>> rng = np.random.default_rng(0); n = 2000
        >>> web = rng.random(n) < 0.5; p = rng.uniform(0.1, 0.5, n)
        >>> y = rng.random(n) < np.where(web, p + 0.2, p)  # web is under-predicted
        >>> masks = np.stack([np.ones(n, bool), ~web, web])  # all rows, ios, web
        >>> res = multicalibration_error(p, y, segments=masks)
        >>> isinstance(res, MulticalibrationResult), int(res.worst_segment)
        (True, 2)
        >>> bool(res.p_value_bonferroni < 0.01), res.segment_ecce.shape
        (True, (3,))
    """

    mce: jax.Array  #: :math:`\mathrm{MCE}_\sigma \cdot \sigma_{\text{all rows}}`
    mce_sigma: jax.Array  #: the largest ``segment_ecce_sigma``
    p_value: jax.Array  #: p-value of ``mce_sigma`` (not adjusted for the segments)
    p_value_bonferroni: jax.Array  #: ``min(1, n_segments * p_value)``
    global_ecce: jax.Array  #: ECCE of all rows
    global_ecce_sigma: jax.Array  #: ECCE / sigma of all rows
    n_segments: jax.Array  #: number of segments
    worst_segment: jax.Array  #: index of the segment with the largest ECCE / sigma
    segment_ecce: jax.Array  #: ``[S]`` ECCE of each segment
    segment_ecce_sigma: jax.Array  #: ``[S]`` ECCE / sigma of each segment
    segment_p_value: jax.Array  #: ``[S]`` p-value of each segment's ECCE
    segment_size: jax.Array  #: ``[S]`` rows in each segment
    segment_weight: jax.Array  #: ``[S]`` total weight of each segment
    segment_observed: jax.Array  #: ``[S]`` weighted share of positives
    segment_predicted: jax.Array  #: ``[S]`` weighted mean probability


class Segments(NamedTuple):
    """Segments generated from a feature table (:func:`segment_masks`).

    Example:
        >>> from jaxcal.metrics import Segments, segment_masks
        >>> seg = segment_masks({"device": ["ios", "web", "ios"]}, min_samples=1)
        >>> isinstance(seg, Segments), seg.masks.shape, seg.descriptions[0]
        (True, (3, 3), 'all')
    """

    masks: np.ndarray  #: ``[S, n]`` bool, row ``i`` of segment ``s``
    descriptions: tuple  #: ``[S]`` readable definitions (``"country=fr & age > 40"``)


# --------------------------------------------------------------------------- pure core
def _summary(stats: _ecce.SegmentStats, glob: _ecce.SegmentStats, keep) -> MulticalibrationResult:
    ecce_s = _ecce.segment_ecce(stats)
    sigma_s = _ecce.segment_sigma(stats)
    log_p = _ecce.range_log_sf(sigma_s)
    n_kept = jnp.sum(keep, dtype=jnp.int32)
    masked = jnp.where(keep, sigma_s, -jnp.inf)
    worst = jnp.argmax(masked).astype(jnp.int32)
    found = n_kept > 0
    mce_sigma = jnp.where(found, masked[worst], jnp.nan)
    log_p_worst = jnp.where(found, log_p[worst], jnp.nan)
    bonferroni = jnp.exp(jnp.minimum(log_p_worst + jnp.log(n_kept.astype(log_p.dtype)), 0.0))
    has_weight = stats.weight > 0
    safe = jnp.where(has_weight, stats.weight, 1.0)
    return MulticalibrationResult(
        mce=mce_sigma * _ecce.segment_std(glob),
        mce_sigma=mce_sigma,
        p_value=jnp.exp(log_p_worst),
        p_value_bonferroni=bonferroni,
        global_ecce=_ecce.segment_ecce(glob),
        global_ecce_sigma=_ecce.segment_sigma(glob),
        n_segments=n_kept,
        worst_segment=worst,
        segment_ecce=ecce_s,
        segment_ecce_sigma=sigma_s,
        segment_p_value=jnp.exp(log_p),
        segment_size=stats.count,
        segment_weight=stats.weight,
        segment_observed=jnp.where(has_weight, stats.sum_labels / safe, jnp.nan),
        segment_predicted=jnp.where(has_weight, stats.sum_probs / safe, jnp.nan),
    )


@partial(jit, static_argnames="presorted")
def _masks_core(p, y, w, real, masks, *, presorted: bool) -> MulticalibrationResult:
    everything = jnp.ones((1, p.shape[0]), masks.dtype)
    stats = _ecce.masked_stats(
        p, y, w, real, jnp.concatenate([everything, masks]), presorted=presorted
    )
    glob = jax.tree.map(lambda a: a[0], stats)
    segs = jax.tree.map(lambda a: a[1:], stats)
    return _summary(segs, glob, jnp.ones(segs.count.shape, bool))


def _finish(stats: _ecce.SegmentStats, min_samples, max_segments):
    """The result over ``[P, num_cells]`` cell sums (partition 0 is all rows), and which
    cells are kept: at least ``min_samples`` rows, the first ``max_segments`` of them."""
    glob = jax.tree.map(lambda a: a[0, 0], stats)
    flat = jax.tree.map(jnp.ravel, stats)
    valid = flat.count >= min_samples
    keep = valid & (jnp.cumsum(valid, dtype=jnp.int32) <= max_segments)
    return _summary(flat, glob, keep), keep


@partial(jit, static_argnames="num_cells")
def _cells_core(p, y, w, real, cells, order, min_samples, max_segments, *, num_cells: int):
    stats = _ecce.cell_stats(p, y, w, real, cells, num_cells, order)
    return _finish(stats, min_samples, max_segments)


@jit
def _finish_core(stats, min_samples, max_segments):
    return _finish(stats, min_samples, max_segments)


# --------------------------------------------------------------------------- eager shell
def _check_masks(segments: Any, n: int) -> np.ndarray:
    m = np.asarray(segments)
    if m.ndim == 1:
        m = m[None, :]
    if m.ndim != 2 or m.shape[1] != n:
        raise ValueError(
            f"segments must be a [n_segments, n] boolean mask with n = {n} rows; got shape "
            f"{m.shape}."
        )
    if m.shape[0] == 0:
        raise ValueError("segments holds no segment; pass at least one mask row.")
    if m.dtype != bool:
        if m.dtype.kind not in "biuf" or not np.isin(m, (0, 1)).all():
            raise ValueError("segments must be boolean (or 0/1) masks.")
        m = m.astype(bool)
    return m


def _segment_options(max_depth, max_values_per_feature, min_samples, max_segments):
    _segments.check_segment_options(max_depth, max_values_per_feature, min_samples, max_segments)


def _from_features(p, y, w, features, options):
    """Eager: the partitions, their cell sums (NumPy on CPU, the jitted core elsewhere),
    the result and the kept cells."""
    parts = _segments.partitions(
        features,
        p.shape[0],
        probs=p,
        categorical=options["categorical"],
        numeric=options["numeric"],
        max_depth=options["max_depth"],
        max_values=options["max_values_per_feature"],
    )
    limits = (
        options["min_samples"],
        np.iinfo(np.int32).max if options["max_segments"] is None else options["max_segments"],
    )
    if jax.default_backend() == "cpu":  # sums in NumPy float64: one radix sort per partition
        order = np.argsort(p, kind="stable")
        sums = _segments.host_cell_stats(
            p[order], y[order], w[order], parts.cells[:, order], parts.num_cells
        )
        result, keep = _finish_core(_ecce.SegmentStats(*sums), *limits)
    else:  # the portable core: sorts on the device
        _, rows, (cells,) = padded_sorted(p, y, w, parts.cells)
        result, keep = _cells_core(*rows, cells, None, *limits, num_cells=parts.num_cells)
    return result, np.asarray(keep), parts


def _compress(result: MulticalibrationResult, keep: np.ndarray) -> MulticalibrationResult:
    """The result with only the kept segments (host slicing; ``worst_segment`` renumbered)."""
    host = {k: np.asarray(v) for k, v in result._asdict().items()}
    index = np.flatnonzero(keep)
    out = {k: (v[index] if k.startswith("segment_") else v) for k, v in host.items()}
    out["worst_segment"] = np.int32(np.searchsorted(index, host["worst_segment"]))
    return MulticalibrationResult(**{k: jax.device_put(v) for k, v in out.items()})


def multicalibration_error(
    probs: ArrayLike,
    labels: ArrayLike,
    features: Any = None,
    *,
    segments: ArrayLike | None = None,
    sample_weight: ArrayLike | None = None,
    categorical: Any = None,
    numeric: Any = None,
    max_depth: int = MAX_DEPTH,
    max_values_per_feature: int = MAX_VALUES_PER_FEATURE,
    min_samples: int = MIN_SAMPLES,
    max_segments: int | None = MAX_SEGMENTS,
) -> MulticalibrationResult:
    r"""The multicalibration error (Guy et al. 2025): the largest ECCE / sigma over the
    segments of a feature table, and the ECCE, sigma and p-value of every segment.

    Give either ``features`` (segments generated as :func:`segment_masks` does, computed
    one partition of the rows at a time: one sort per combination of features, however many
    segments it holds) or ``segments`` (your own ``[S, n]`` masks; with array inputs this
    path also runs inside ``jit``, ``vmap`` and ``jax.export``, vectorised over segments).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        features: a table of features (dict of 1-D arrays, structured array or DataFrame).
        segments: ``[S, n]`` boolean masks instead of ``features``.
        sample_weight: ``[n]`` non-negative weights (IPS weights included).
        categorical, numeric: columns to treat as categorical / numeric against their dtype
            (integers, bools and strings are categorical, floats numeric).
        max_depth: most features a segment fixes (0: all rows only).
        max_values_per_feature: levels per feature (categorical: the most frequent values
            and "other"; numeric: quantile bins), plus a level for missing values.
        min_samples: fewest rows a segment needs.
        max_segments: most segments kept, in enumeration order (``None``: all).

    Returns:
        A :class:`MulticalibrationResult`.

    Raises:
        ValueError: bad probabilities, labels or weights (as :func:`ecce`); neither or both
            of ``features`` and ``segments``; a bad table or masks; no segment with
            ``min_samples`` rows.

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics import multicalibration_error
        >>> rng = np.random.default_rng(0)
        >>> n = 20000
        >>> country = rng.integers(0, 4, n)
        >>> p = rng.uniform(0.05, 0.6, n)
        >>> truth = np.where(country == 2, np.minimum(1.5 * p, 1.0), p)  # country 2 is off
        >>> res = multicalibration_error(p, rng.random(n) < truth, {"country": country})
        >>> int(res.n_segments), float(res.mce_sigma) > 10, float(res.p_value) < 1e-6
        (4, True, True)
    """
    if (features is None) == (segments is None):
        raise ValueError("pass either features (a table) or segments ([S, n] masks), not both.")
    if segments is not None:
        if _shapes.is_traced(probs, labels, sample_weight, segments):
            p, y, w, invalid = check_pure(probs, labels, sample_weight)
            m = jnp.asarray(segments)
            m = m[None, :] if m.ndim == 1 else m
            if m.ndim != 2 or m.shape[1] != p.shape[0]:
                raise ValueError(f"segments must be [n_segments, {p.shape[0]}]; got {m.shape}.")
            invalid = invalid | jnp.any((m != 0) & (m != 1))
            res = _masks_core(p, y, w, jnp.ones_like(p), m, presorted=False)
            return nan_where(invalid, res)
        p, y, w = checked_inputs(probs, labels, sample_weight)
        masks = _check_masks(segments, p.shape[0])
        presorted, rows, (m,) = padded_sorted(p, y, w, masks)
        return _masks_core(*rows, m, presorted=presorted)
    p, y, w = checked_inputs(probs, labels, sample_weight)
    given = locals()  # the keyword arguments, named as in SEGMENT_OPTIONS
    options = {name: given[name] for name in SEGMENT_OPTIONS}
    return _feature_result(p, y, w, features, options)[0]


def _feature_result(p, y, w, features, options):
    """``(result, kept, partitions)``: the result on the kept segments, their positions in
    the ``[P * num_cells]`` cells, and the partitions."""
    _segment_options(
        options["max_depth"],
        options["max_values_per_feature"],
        options["min_samples"],
        options["max_segments"],
    )
    result, keep, parts = _from_features(p, y, w, features, options)
    if not keep.any():
        raise ValueError(
            f"no segment has min_samples={options['min_samples']} rows (the data has "
            f"{p.shape[0]}); lower min_samples."
        )
    return _compress(result, keep), np.flatnonzero(keep), parts


def segment_masks(
    features: Any,
    *,
    probs: ArrayLike | None = None,
    categorical: Any = None,
    numeric: Any = None,
    max_depth: int = MAX_DEPTH,
    max_values_per_feature: int = MAX_VALUES_PER_FEATURE,
    min_samples: int = MIN_SAMPLES,
    max_segments: int | None = MAX_SEGMENTS,
) -> Segments:
    """The segments of a feature table, as boolean masks with readable descriptions (the
    segments :func:`multicalibration_error` uses for the same arguments).

    Each feature is reduced to ``max_values_per_feature`` levels (categorical: the most
    frequent values, the others pooled as "other"; numeric: right-closed quantile bins, or
    its values if it has that few), plus a level for missing values; a segment fixes the
    levels of up to ``max_depth`` features (depth 0 is all rows) and has at least
    ``min_samples`` rows. Segments are enumerated by depth, then by combination of features
    (categorical first, in the table's order), then by levels; with ``probs``, each
    feature's levels in the order in which they first appear along increasing
    probability (MCGrad's order, which decides the segments kept beyond
    ``max_segments``), without, by code.

    Args:
        features: a dict of 1-D arrays, a structured array or a DataFrame-like table.
        probs: ``[n]`` probabilities that order the levels (optional).
        categorical, numeric, max_depth, max_values_per_feature, min_samples, max_segments:
            as in :func:`multicalibration_error`.

    Returns:
        :class:`Segments` (``masks`` ``[S, n]`` bool, ``descriptions``).

    Example:
        >>> from jaxcal.metrics import segment_masks
        >>> seg = segment_masks({"device": ["ios", "web", "ios", "web"]}, min_samples=2)
        >>> seg.descriptions, seg.masks.astype(int).tolist()
        (('all', 'device=ios', 'device=web'), [[1, 1, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1]])
    """
    _segment_options(max_depth, max_values_per_feature, min_samples, max_segments)
    cols = feature_columns(features)
    n = next(iter(cols.values())).shape[0]
    p = None if probs is None else check_probs(probs)
    if p is not None and p.shape[0] != n:
        raise ValueError(f"length mismatch: {p.shape[0]} probs but {n} rows of features.")
    parts = _segments.partitions(
        cols,
        n,
        probs=p,
        categorical=categorical,
        numeric=numeric,
        max_depth=max_depth,
        max_values=max_values_per_feature,
    )
    found = [
        (part, int(cell))
        for part, cells in enumerate(parts.cells)
        for cell in np.flatnonzero(np.bincount(cells) >= min_samples)
    ][:max_segments]
    masks = [parts.cells[part] == cell for part, cell in found]
    descriptions = tuple(parts.describe(part, cell) for part, cell in found)
    if not masks:
        raise ValueError(f"no segment has min_samples={min_samples} rows (the data has {n}).")
    return Segments(np.stack(masks), descriptions)
