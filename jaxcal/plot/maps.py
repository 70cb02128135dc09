"""Fitted calibration maps over the score distribution, and class-conditional histograms.

matplotlib is imported lazily and figures are drawn on an Agg canvas (no ``pyplot``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_labels, check_sample_weight, check_scores
from jaxcal.plot._figure import new_figure, plain_log_labels, png_doc, save_figure

__all__ = ["calibration_map", "score_histograms"]

POSITIVE_COLOR = "#d9534f"
NEGATIVE_COLOR = "#3b6fb6"


def _check_range(scores_range: Sequence[float]) -> tuple[float, float]:
    try:
        lo, hi = (float(v) for v in scores_range)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"scores_range must be a pair (lo, hi); got {scores_range!r}.") from exc
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError(f"scores_range must be finite with lo < hi; got ({lo}, {hi}).")
    return lo, hi


def _binned_means(x: np.ndarray, t: np.ndarray, lo: float, hi: float, n_bins: int):
    edges = np.linspace(lo, hi, n_bins + 1)
    inside = (x >= lo) & (x <= hi)
    ids = np.clip(np.searchsorted(edges, x[inside], side="right") - 1, 0, n_bins - 1)
    count = np.bincount(ids, minlength=n_bins)
    total = np.bincount(ids, weights=t[inside], minlength=n_bins)
    keep = count > 0
    return (edges[:-1] + np.diff(edges) / 2)[keep], total[keep] / count[keep], count[keep]


@png_doc
def calibration_map(
    fitted_calibrators: Mapping[str, Any],
    scores_range: Sequence[float],
    path: str | os.PathLike,
    *,
    scores: ArrayLike | None = None,
    labels: ArrayLike | None = None,
    reference: tuple[ArrayLike, ArrayLike] | None = None,
    reference_label: str = "binned mean of reference",
    n_points: int = 400,
    n_reference_bins: int = 30,
    title: str | None = None,
    dpi: int = 110,
) -> Path:
    """Plot fitted maps ``s -> P(y = 1 | s)`` over the score histogram; write a PNG.

    Args:
        fitted_calibrators: ``name -> fitted calibrator`` (anything with
            ``.predict(scores)``); one curve each.
        scores_range: ``(lo, hi)`` range of scores on the x axis.
        path: output PNG path.
        scores: optional ``[n]`` scores drawn as a histogram behind the curves (class-
            conditional when ``labels`` are given too).
        labels: optional ``[n]`` 0/1 labels for ``scores``.
        reference: optional ``(scores, targets)``; the mean of ``targets`` in
            ``n_reference_bins`` equal-width score bins is drawn as dots, e.g.
            ``(scores, true_prob)`` on simulated data shows the ideal map
            :math:`E[r \\mid s]`, or ``(scores, labels)`` the empirical frequency.
        reference_label: legend label of the reference dots.
        n_points: grid size of each curve.
        n_reference_bins: number of bins for the reference dots.
        title: axes title.
        dpi: resolution of the PNG.

    {png_returns_raises}
        ValueError: empty mapping, bad range, invalid scores / labels, or a calibrator
            without ``predict``.

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import jaxcal, numpy as np
        >>> from jaxcal.plot import calibration_map
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=500); y = (rng.random(500) < 1 / (1 + np.exp(-2 * s))).astype(int)
        >>> fitted = {"Platt": jaxcal.PlattScaling().fit(s, y)}
        >>> calibration_map(fitted, (-3, 3), "map.png", scores=s, labels=y).name
        'map.png'
    """
    if not fitted_calibrators:
        raise ValueError("fitted_calibrators is empty; pass at least one fitted calibrator.")
    for name, fitted in fitted_calibrators.items():
        if not callable(getattr(fitted, "predict", None)):
            raise ValueError(f"fitted_calibrators[{name!r}] has no predict(scores) method.")
    lo, hi = _check_range(scores_range)
    grid = np.linspace(lo, hi, int(n_points))
    curves = {name: np.asarray(f.predict(grid)) for name, f in fitted_calibrators.items()}
    hist = None
    if scores is not None:
        s = check_scores(scores)
        y = None if labels is None else check_labels(labels, s.shape[0])
        hist = (s, y)
    ref = None
    if reference is not None:
        rs = check_scores(reference[0], name="reference scores")
        rt = check_scores(reference[1], name="reference targets")
        if rt.shape != rs.shape:
            raise ValueError(f"length mismatch: {rs.size} reference scores, {rt.size} targets.")
        ref = _binned_means(rs, rt, lo, hi, int(n_reference_bins))

    # margins in inches, set by hand: constrained layout would measure every tick label
    fig = new_figure((7.0, 4.6), layout=None)
    fig.subplots_adjust(left=0.8 / 7.0, right=1 - 0.85 / 7.0, bottom=0.6 / 4.6, top=1 - 0.4 / 4.6)
    ax = fig.add_subplot()
    if hist is not None:
        axh = ax.twinx()
        s, y = hist
        bins = np.linspace(lo, hi, 60)
        # one filled step patch per histogram (hist draws a patch per bin)
        if y is None:
            axh.stairs(np.histogram(s, bins)[0], bins, fill=True, color="0.75", alpha=0.6,
                       label="scores")  # fmt: skip
        else:
            axh.stairs(np.histogram(s[y == 0], bins)[0], bins, fill=True, color=NEGATIVE_COLOR,
                       alpha=0.18, label="y = 0")  # fmt: skip
            axh.stairs(np.histogram(s[y == 1], bins)[0], bins, fill=True, color=POSITIVE_COLOR,
                       alpha=0.25, label="y = 1")  # fmt: skip
        axh.set_yscale("log")
        plain_log_labels(axh.yaxis)
        axh.set_ylabel("count (histogram, log scale)", color="0.4")
        axh.tick_params(axis="y", colors="0.4")
        ax.set_zorder(axh.get_zorder() + 1)
        ax.patch.set_visible(False)
        axh.legend(loc="lower right", fontsize=8, frameon=False)
    for name, p in curves.items():
        ax.plot(grid, p, linewidth=1.8, label=name)
    if ref is not None:
        centers, means, _ = ref
        ax.plot(centers, means, "o", color="black", markersize=3.5, label=reference_label)
    ax.set_xlim(lo, hi)
    ax.set_ylim(-0.01, 1.01)
    ax.set_xlabel("score s")
    ax.set_ylabel("calibrated probability P(y = 1 | s)")
    ax.grid(alpha=0.25)
    ncols = 2 if len(curves) + (ref is not None) > 6 else 1
    ax.legend(loc="upper left", fontsize=8, frameon=False, ncols=ncols)
    if title:
        ax.set_title(title)
    return save_figure(fig, path, dpi=dpi)


@png_doc
def score_histograms(
    scores: ArrayLike,
    labels: ArrayLike,
    path: str | os.PathLike,
    *,
    bins: int = 60,
    sample_weight: ArrayLike | None = None,
    density: bool = True,
    log: bool = False,
    title: str | None = None,
    dpi: int = 110,
) -> Path:
    """Class-conditional score histograms (what score-distribution calibrators model).

    Args:
        scores: ``[n]`` finite scores.
        labels: ``[n]`` 0/1 labels.
        path: output PNG path.
        bins: number of equal-width bins over the score range.
        sample_weight: optional ``[n]`` weights.
        density: normalise each class separately (default) to compare shapes.
        log: log-scale y axis.
        title: axes title.
        dpi: resolution of the PNG.

    {png_returns_raises}
        ValueError: invalid scores, labels or weights.

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import numpy as np
        >>> from jaxcal.plot import score_histograms
        >>> rng = np.random.default_rng(0)
        >>> y = rng.random(500) < 0.3; s = rng.normal(np.where(y, 1.0, 0.0))
        >>> score_histograms(s, y, "histograms.png").name
        'histograms.png'
    """
    s = check_scores(scores)
    y = check_labels(labels, s.shape[0])
    w = check_sample_weight(sample_weight, s.shape[0])
    edges = np.linspace(s.min(), s.max(), int(bins) + 1) if s.min() < s.max() else int(bins)
    fig = new_figure((6.4, 4.2), layout=None)  # margins by hand, as in calibration_map
    fig.subplots_adjust(left=0.85 / 6.4, right=1 - 0.2 / 6.4, bottom=0.6 / 4.2, top=1 - 0.4 / 4.2)
    ax = fig.add_subplot()
    for cls, color, name in ((0, NEGATIVE_COLOR, "y = 0"), (1, POSITIVE_COLOR, "y = 1")):
        mask = (y == cls) & (w > 0)
        if not mask.any():
            continue
        heights, at = np.histogram(s[mask], bins=edges, weights=w[mask], density=density)
        # one filled step patch per class (hist draws a patch per bin)
        ax.stairs(heights, at, fill=True, color=color, alpha=0.45,
                  label=f"{name} (n = {int(mask.sum())})")  # fmt: skip
    if log:
        ax.set_yscale("log")
        plain_log_labels(ax.yaxis)
    ax.set_xlabel("score s")
    ax.set_ylabel("density" if density else "weighted count")
    ax.legend(loc="upper right", frameon=False)  # "best" searches the bars: slow, warns
    ax.grid(alpha=0.25)
    if title:
        ax.set_title(title)
    return save_figure(fig, path, dpi=dpi)
