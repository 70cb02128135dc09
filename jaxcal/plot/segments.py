"""Reliability in the worst segments of a feature table: one panel per segment, one curve
per set of probabilities (for example before and after a multicalibration fit)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_int
from jaxcal.plot._figure import new_figure, png_doc, save_figure

__all__ = ["segment_reliability"]


def _binned_curve(p: np.ndarray, y: np.ndarray, w: np.ndarray, n_bins: int):
    """Equal-mass bins of ``p``: (mean probability, observed rate) per non-empty bin."""
    order = np.argsort(p, kind="stable")
    edges = np.linspace(0, len(p), n_bins + 1).astype(int)
    mean_p, rate = [], []
    for lo, hi in zip(edges[:-1], edges[1:], strict=True):
        rows = order[lo:hi]
        weight = w[rows].sum()
        if hi > lo and weight > 0:
            mean_p.append(float(np.dot(w[rows], p[rows]) / weight))
            rate.append(float(np.dot(w[rows], y[rows]) / weight))
    return np.asarray(mean_p), np.asarray(rate)


@png_doc
def segment_reliability(
    probs: ArrayLike | Mapping[str, ArrayLike],
    labels: ArrayLike,
    features: Any,
    path: str | os.PathLike,
    *,
    k: int = 6,
    n_bins: int = 10,
    sample_weight: ArrayLike | None = None,
    title: str | None = None,
    dpi: int = 110,
    **segment_options: Any,
) -> Path:
    """Reliability curves in the ``k`` worst segments of a feature table, as a PNG.

    The segments are generated from ``features`` as :func:`jaxcal.metrics.segment_masks`
    generates them (``segment_options``: ``categorical``, ``numeric``, ``max_depth``, ...)
    and ranked by the ECCE sigma of the *first* set of probabilities
    (:func:`jaxcal.metrics.segment_report`): with ``{"before": p0, "after": p1}`` the panels
    show where the input was worst, and what the correction made of it there. Each panel has
    the segment's definition, its size, and per set of probabilities its equal-mass binned
    reliability curve with the segment's ECCE sigma in the legend.

    Args:
        probs: ``[n]`` probabilities, or a mapping ``{label: [n] probabilities}``.
        labels: ``[n]`` 0/1 outcomes.
        features: the feature table (a dict of columns, a structured array, a DataFrame).
        path: where to write the PNG.
        k: number of segments (panels; >= 1).
        n_bins: equal-mass bins per curve (>= 2).
        sample_weight: optional ``[n]`` non-negative weights.
        title: optional figure title.
        dpi: resolution.
        **segment_options: passed to the segment generation.

    {png_returns_raises}
        ValueError: ``k`` or ``n_bins`` out of range, or the inputs as the metrics reject
            them.

    Example:
        >>> import jax, tempfile, os
        >>> from jaxcal.data import simulate_segments
        >>> from jaxcal.plot import segment_reliability
        >>> d = simulate_segments(4000, key=jax.random.key(0))
        >>> out = segment_reliability(d.scores, d.labels, d.features,
        ...                           os.path.join(tempfile.mkdtemp(), "seg.png"), k=4)
        >>> out.suffix
        '.png'
    """
    from jaxcal.metrics import multicalibration_error, segment_masks, segment_report

    k = check_int(k, "k")
    n_bins = check_int(n_bins, "n_bins", minimum=2)
    panels = dict(probs) if isinstance(probs, Mapping) else {"probabilities": probs}
    if not panels:
        raise ValueError("probs is an empty mapping; give at least one set of probabilities.")
    first = next(iter(panels.values()))
    segments = segment_masks(features, probs=first, **segment_options)
    report = segment_report(
        first,
        labels,
        segments=segments.masks,
        descriptions=segments.descriptions,
        sample_weight=sample_weight,
        k=k,
    )
    sigmas = {
        name: np.asarray(
            multicalibration_error(
                p, labels, segments=segments.masks, sample_weight=sample_weight
            ).segment_ecce_sigma
        )
        for name, p in panels.items()
    }
    y = np.asarray(labels, np.float64)
    w = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, np.float64)
    n_panels = len(report.segment)
    cols = min(3, max(n_panels, 1))
    rows = max(1, -(-n_panels // cols))
    fig = new_figure((3.6 * cols, 3.3 * rows + (0.4 if title else 0.0)))
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, j in zip(axes, range(n_panels), strict=False):
        seg = int(report.index[j])
        rows_j = segments.masks[seg]
        ax.plot([0, 1], [0, 1], color="0.6", lw=0.8, ls="--")
        for name, p in panels.items():
            p_j = np.asarray(p, np.float64)[rows_j]
            x, r = _binned_curve(p_j, y[rows_j], w[rows_j], n_bins)
            ax.plot(x, r, marker="o", ms=3, lw=1.2, label=f"{name} ({sigmas[name][seg]:.1f}σ)")
        ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="predicted", ylabel="observed")
        ax.set_title(f"{report.segment[j]}\n{int(report.size[j]):,} rows", fontsize=8)
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[n_panels:]:
        ax.set_visible(False)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=dpi)
