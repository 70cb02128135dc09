"""A report of the worst segments of the multicalibration error, with an interval for each
one's calibration gap (observed minus predicted rate), which MCGrad does not give.

The intervals invert the score test of a logit offset in the segment
(:mod:`jaxcal.metrics._intervals`): pointwise, or simultaneous over all segments
(Bonferroni), which keeps them valid for segments picked as the worst.
"""

from __future__ import annotations

from statistics import NormalDist
from typing import Any, NamedTuple

import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal.metrics import _intervals
from jaxcal.metrics.cumulative import checked_inputs
from jaxcal.metrics.multicalibration import (
    SEGMENT_OPTIONS,
    _check_masks,
    _feature_result,
    multicalibration_error,
)

__all__ = ["SegmentReport", "segment_report"]


class SegmentReport(NamedTuple):
    """The worst segments, worst first (host arrays; ``[k]`` each). ``to_markdown()``
    prints it; ``pandas.DataFrame(report._asdict())`` makes a table of it.

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics import SegmentReport, segment_report
        >>> rng = np.random.default_rng(0); n = 2000
        >>> device = rng.choice(["ios", "web"], n); p = rng.uniform(0.1, 0.5, n)
        >>> y = rng.random(n) < np.where(device == "web", p + 0.2, p)  # web under-predicted
        >>> rep = segment_report(p, y, {"device": device}, k=1)
        >>> isinstance(rep, SegmentReport), rep.segment
        (True, ('device=web',))
        >>> print(rep.to_markdown().splitlines()[2])
        | device=web | 1043 | 0.1962 | 14.36 | 0 | 0.4919 | 0.2956 | +0.1962 [+0.1608, +0.2316] |
    """

    segment: tuple  #: readable definitions (``"country=fr & age > 40"``)
    index: np.ndarray  #: position in the :class:`MulticalibrationResult` segment arrays
    size: np.ndarray  #: rows
    weight: np.ndarray  #: total weight
    ecce: np.ndarray  #: ECCE of the segment
    ecce_sigma: np.ndarray  #: ECCE / sigma
    p_value: np.ndarray  #: p-value of the segment's ECCE (not adjusted)
    observed: np.ndarray  #: weighted share of positives
    predicted: np.ndarray  #: weighted mean probability
    gap: np.ndarray  #: observed - predicted
    gap_lower: np.ndarray  #: lower end of the gap's interval
    gap_upper: np.ndarray  #: upper end of the gap's interval
    level: float  #: confidence level of the intervals
    simultaneous: bool  #: whether the level holds for all segments at once

    def to_markdown(self) -> str:
        """The report as a markdown table."""
        kind = "simultaneous" if self.simultaneous else "pointwise"
        lines = [
            f"| segment | rows | ECCE | sigma | p | observed | predicted | gap "
            f"[{self.level:.0%} {kind}] |",
            "|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for i, name in enumerate(self.segment):
            lines.append(
                f"| {name} | {int(self.size[i])} | {self.ecce[i]:.4f} | {self.ecce_sigma[i]:.2f}"
                f" | {self.p_value[i]:.2g} | {self.observed[i]:.4f} | {self.predicted[i]:.4f}"
                f" | {self.gap[i]:+.4f} [{self.gap_lower[i]:+.4f}, {self.gap_upper[i]:+.4f}] |"
            )
        return "\n".join(lines)


@jit
def _intervals_core(p, y, w, masks, z):
    return _intervals.gap_intervals(p, y, w, masks, z)


def _normal_quantile(level: float, n_tests: int) -> float:
    return NormalDist().inv_cdf(1.0 - (1.0 - level) / (2.0 * n_tests))


def segment_report(
    probs: ArrayLike,
    labels: ArrayLike,
    features: Any = None,
    *,
    segments: ArrayLike | None = None,
    descriptions: Any = None,
    sample_weight: ArrayLike | None = None,
    k: int = 10,
    level: float = 0.95,
    simultaneous: bool = True,
    **segment_options: Any,
) -> SegmentReport:
    r"""The ``k`` segments with the largest ECCE / sigma, with their rates and an interval
    for each one's calibration gap (observed - predicted rate).

    The interval inverts the score test of a logit offset in the segment (a Wilson-type
    interval; :mod:`jaxcal.metrics._intervals` has the formula). With
    ``simultaneous=True`` (default) the level holds for all segments at once (Bonferroni
    over the ``S`` segments), so it stays valid for the segments the report picks as the
    worst; with ``False`` each interval has the level on its own, valid for a segment
    chosen before looking at the data.

    Args:
        probs, labels, features, segments, sample_weight: as in
            :func:`multicalibration_error`.
        descriptions: names of the ``segments`` masks (default ``"segment i"``).
        k: number of segments reported.
        level: confidence level of the intervals, in (0, 1).
        simultaneous: whether the level holds for all segments at once.
        **segment_options: ``categorical``, ``numeric``, ``max_depth``,
            ``max_values_per_feature``, ``min_samples``, ``max_segments``.

    Returns:
        A :class:`SegmentReport`, worst segment first.

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics import segment_report
        >>> rng = np.random.default_rng(0)
        >>> n = 20000
        >>> device = rng.choice(["ios", "web"], n)
        >>> p = rng.uniform(0.1, 0.5, n)
        >>> truth = np.where(device == "web", p + 0.1, p)  # web is under-predicted by 0.1
        >>> rep = segment_report(p, rng.random(n) < truth, {"device": device}, k=2)
        >>> rep.segment[0], bool(rep.gap_lower[0] < 0.1 < rep.gap_upper[0])
        ('device=web', True)
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive integer; got {k!r}.")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must lie in (0, 1); got {level!r}.")
    unknown = set(segment_options) - set(SEGMENT_OPTIONS)
    if unknown:
        raise ValueError(f"segment_report got unexpected options {sorted(unknown)}.")
    options = {**SEGMENT_OPTIONS, **segment_options}
    p, y, w = checked_inputs(probs, labels, sample_weight)
    if segments is not None:
        if features is not None:
            raise ValueError("pass either features (a table) or segments ([S, n] masks), not both.")
        masks = _check_masks(segments, p.shape[0])
        names = tuple(f"segment {i}" for i in range(masks.shape[0]))
        if descriptions is not None:
            names = tuple(str(d) for d in descriptions)
            if len(names) != masks.shape[0]:
                raise ValueError(f"{len(names)} descriptions for {masks.shape[0]} segments.")
        result = multicalibration_error(p, y, segments=masks, sample_weight=w)
        pick_masks = lambda idx: masks[idx]  # noqa: E731
        describe = lambda idx: [names[i] for i in idx]  # noqa: E731
    elif features is not None:
        result, kept, parts = _feature_result(p, y, w, features, options)
        part_cell = np.divmod(kept, parts.num_cells)

        def pick_masks(idx):
            return parts.cells[part_cell[0][idx]] == part_cell[1][idx][:, None]

        def describe(idx):
            return [parts.describe(int(part_cell[0][i]), int(part_cell[1][i])) for i in idx]

    else:
        raise ValueError("pass either features (a table) or segments ([S, n] masks).")
    host = {key: np.asarray(v) for key, v in result._asdict().items()}
    sigma = host["segment_ecce_sigma"]
    idx = np.argsort(-sigma, kind="stable")[: int(k)]
    z = _normal_quantile(float(level), sigma.shape[0] if simultaneous else 1)
    size = _shapes.padded_size(p.shape[0])
    rows = _shapes.pad_rows(size, p, y, w, fills=(0.5, 0, 0))
    picked = _shapes.pad_axis(pick_masks(idx), size, False, axis=1)
    picked = _shapes.pad_axis(picked, _shapes.padded_size(idx.size, minimum=1), False)
    lower, upper = (np.asarray(b)[: idx.size] for b in _intervals_core(*rows, picked, z))
    observed, predicted = host["segment_observed"][idx], host["segment_predicted"][idx]
    return SegmentReport(
        segment=tuple(describe(idx)),
        index=idx,
        size=host["segment_size"][idx],
        weight=host["segment_weight"][idx],
        ecce=host["segment_ecce"][idx],
        ecce_sigma=sigma[idx],
        p_value=host["segment_p_value"][idx],
        observed=observed,
        predicted=predicted,
        gap=observed - predicted,
        gap_lower=lower,
        gap_upper=upper,
        level=float(level),
        simultaneous=bool(simultaneous),
    )
