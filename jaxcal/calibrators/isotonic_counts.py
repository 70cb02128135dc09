r"""Isotonic calibration from counts by distinct score (:mod:`jaxcal.fitting.score_counts`):
``IsotonicCalibration(...).fit_counts(counts)``, for data that streams or is spread over the
processes of a ``jax.distributed`` job.

**Exact counts.** The weighted isotonic fit depends on the data only through the distinct
scores :math:`v`, their weights :math:`W_v` and label sums :math:`Y_v` (tied scores share a
value), so the fit of the distinct scores with targets :math:`Y_v / W_v` and weights
:math:`W_v` is ``IsotonicCalibration(...).fit(scores, labels, sample_weight=w)``: the same
knots up to the float64 rounding of the sums, through the same weighted PAV
(:func:`jaxcal.calibrators.isotonic.isotonic_map`). Every option of the calibrator applies;
``increasing="auto"`` uses the Spearman correlation of the 0/1 data that the counts describe
(each score with a label-1 weight :math:`Y_v` and a label-0 weight :math:`W_v - Y_v`), which
is that of the raw data for 0/1 labels (its warning uses the effective sample size of those
pooled points).

**IPS targets.** Counts built with ``loss="ips"`` hold the target sums :math:`T_v` of
:math:`t = Y / \omega` (:mod:`jaxcal.fitting.score_counts`): the fit is then the PAV of
:math:`T_v / W_v`, clipped to the probability range afterwards, which is
``fit(scores, labels, propensity=omega, loss="ips")`` (the clipped isotonic solution is the
bounded one). ``increasing="auto"`` ranks the targets one by one, which counts cannot do:
pass the direction.

**Quantised counts.** Each bin :math:`k` enters as its range :math:`[\min_k, \max_k]` of
scores with one target :math:`Y_k / W_k` (two points, at its smallest and largest score, each
with half its weight: two neighbours with equal targets always share a level of the isotonic
fit, so the fit is the bin-constant one). The fitted map is flat on each bin's range and
interpolates only across the gaps between bins, where no training score lies: at every
training score it gives the bin-constant fit :math:`g` of the bound in
:mod:`jaxcal.fitting.score_counts`, with ``interpolation="linear"`` or ``"step"``. The
result's ``quantization_bound`` holds that bound: the weighted mean squared difference
between :math:`g` and the exact fit at the training points, and :math:`g`'s excess weighted
mean squared error, are at most ``quantization_bound``. ``centered=True`` needs exact counts
(centred isotonic regression moves knots to the blocks' mean scores, which a bin's range does
not give).

Example:
    >>> import jaxcal, numpy as np
    >>> from jaxcal.fitting.score_counts import score_counts
    >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
    >>> fitted = jaxcal.IsotonicCalibration().fit_counts(score_counts(s, y))
    >>> fitted.predict(s), fitted.quantization_bound
    (Array([0. , 0.5, 0.5, 1. ], dtype=float32), 0.0)
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_two_classes
from jaxcal.calibrators.isotonic import (
    FittedIsotonic,
    IsotonicCalibration,
    check_increasing,
    isotonic_map,
)
from jaxcal.fitting.score_counts import ScoreCounts, check_counts

__all__ = ["FittedIsotonicCounts", "fit_counts"]


@pytree_dataclass
class FittedIsotonicCounts(FittedIsotonic):
    """A :class:`~jaxcal.calibrators.isotonic.FittedIsotonic` fitted on counts, with the bound
    of its quantisation.

    Attributes:
        quantization_bound: a bound on the weighted mean squared difference, at the training
            points, between this fit and the exact isotonic fit of the raw data, and on its
            excess weighted mean squared error (:mod:`jaxcal.fitting.score_counts`); 0 for
            exact counts.

    The float leaves have the dtype of JAX's default float (the counts hold float64 sums).

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.fitting.score_counts import score_counts
        >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
        >>> fitted = jaxcal.IsotonicCalibration().fit_counts(score_counts(s, y))
        >>> type(fitted).__name__, fitted.quantization_bound
        ('FittedIsotonicCounts', 0.0)
    """

    quantization_bound: float = 0.0


def _means(sums: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Weighted means ``sums / w`` per entry (0 where the weight is 0)."""
    return np.where(w > 0, sums / np.where(w > 0, w, 1.0), 0.0)


def _training_points(counts: ScoreCounts) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(scores, targets, weights)`` of the PAV: the distinct scores, or each bin's smallest
    and largest score with half its weight each (one point where they are equal)."""
    w = counts.weight
    t = _means(counts.targets, w)
    if counts.score_max is None:
        return counts.scores, t, w
    two = counts.score_max > counts.scores
    x = np.stack([counts.scores, counts.score_max], 1)
    half = np.where(two, w / 2, w)
    keep = np.stack([np.ones_like(two), two], 1)
    return x[keep], np.repeat(t, 1 + two), np.repeat(half, 1 + two)


def _direction(calibrator: IsotonicCalibration, counts: ScoreCounts) -> bool:
    """``increasing`` resolved: ``"auto"`` by the Spearman correlation of the pooled 0/1
    points (label 1 with weight ``Y``, label 0 with weight ``W - Y`` at each entry)."""
    if not isinstance(calibrator.increasing, str):
        return bool(calibrator.increasing)
    if counts.target_sum is not None:
        raise ValueError(
            "IsotonicCalibration(increasing='auto').fit_counts cannot pick a direction from "
            "counts with IPS targets: it ranks the targets Y / propensity, which the counts "
            "do not hold one by one. Pass increasing=True or False."
        )
    pos = np.clip(counts.label_sum, 0.0, None)
    neg = np.clip(counts.weight - counts.label_sum, 0.0, None)
    x = np.r_[counts.scores, counts.scores]
    y = np.r_[np.zeros_like(neg), np.ones_like(pos)]
    return check_increasing(x, y, np.r_[neg, pos])


def fit_counts(calibrator: IsotonicCalibration, counts: ScoreCounts) -> FittedIsotonicCounts:
    """``calibrator`` fitted on ``counts`` (module docstring), with the loss weighting the
    counts were built with (``score_counts(..., loss=...)``).

    Args:
        calibrator: an :class:`~jaxcal.calibrators.isotonic.IsotonicCalibration`.
        counts: exact or quantised :class:`~jaxcal.fitting.score_counts.ScoreCounts`.

    Returns:
        A :class:`FittedIsotonicCounts` (a ``FittedIsotonic`` with ``quantization_bound``).

    Raises:
        ValueError: invalid hyperparameters, counts that are not a ``ScoreCounts``, empty or
            of zero weight, a single class (all labels 0 or all 1 where the weight is
            positive), ``centered=True`` with quantised counts, or ``increasing="auto"``
            with IPS targets.

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.calibrators.isotonic_counts import fit_counts
        >>> from jaxcal.fitting.score_counts import score_counts
        >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
        >>> fit_counts(jaxcal.IsotonicCalibration(), score_counts(s, y)).predict(s)
        Array([0. , 0.5, 0.5, 1. ], dtype=float32)
    """
    calibrator._check_hyperparameters()
    counts = check_counts(counts, what="IsotonicCalibration.fit_counts")
    if calibrator.centered and counts.quantized:
        raise ValueError(
            "IsotonicCalibration(centered=True).fit_counts needs exact counts: centred "
            "isotonic regression places knots at the blocks' mean scores, which quantised "
            "counts do not hold. Fit exact counts, or centered=False."
        )
    check_two_classes(_means(counts.label_sum, counts.weight), counts.weight)
    x, t, w = _training_points(counts)
    lo, hi = calibrator._bounds()
    fitted = isotonic_map(
        x,
        t,
        w,
        increasing=_direction(calibrator, counts),
        interpolation=calibrator.interpolation,
        centered=calibrator.centered,
        out_of_bounds=calibrator.out_of_bounds,
        lo=lo,
        hi=hi,
        what="IsotonicCalibration.fit_counts",
    )
    fields = {f.name: getattr(fitted, f.name) for f in dataclasses.fields(fitted)}
    return FittedIsotonicCounts(**fields, quantization_bound=counts.quantization_bound)
