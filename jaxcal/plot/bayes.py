"""Plots of Bayesian calibration posteriors: reliability diagram with credible bands, and the
fitted map with a posterior band over the score histogram.

matplotlib is imported lazily (``jaxcal.plot._figure.new_figure``) on an Agg canvas, so
plotting never changes the caller's backend.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_labels, check_scores
from jaxcal.plot._figure import new_figure, png_doc, save_figure

__all__ = ["posterior_reliability_diagram", "posterior_map"]

BAND_COLOR = "#3b6fb6"
POINT_COLOR = "#d9534f"
HIST_COLORS = ("#9e9e9e", "#f0ad4e")


def _checked_level(posterior, level: float) -> float:
    """``level`` as a float in (0, 1), for an unbatched ``posterior``."""
    if posterior.batch_shape:
        raise ValueError("plot one posterior; index a batched one first (post[b]).")
    if not 0.0 < float(level) < 1.0:
        raise ValueError(f"level must be in (0, 1); got {level!r}.")
    return float(level)


@png_doc
def posterior_reliability_diagram(
    posterior,
    scores: ArrayLike,
    labels: ArrayLike,
    path: str | os.PathLike,
    *,
    n_bins: int = 10,
    level: float = 0.9,
    title: str | None = None,
    dpi: int = 110,
) -> Path:
    """Reliability diagram of a posterior on test data, with credible bands.

    Test pairs are binned by their posterior-mean probability (``n_bins`` equal-width bins).
    Per bin: the observed frequency of positives (red dots, size ~ count) against the
    bin's posterior-mean confidence, and the ``level`` credible interval, over the posterior
    draws, of the bin's mean calibrated probability (blue band). Dots outside the band are
    bins where the data disagree with the calibrated map beyond its uncertainty.

    Args:
        posterior: an unbatched :class:`~jaxcal.bayes.Posterior`.
        scores: ``[m]`` test scores.
        labels: ``[m]`` 0/1 test labels.
        path: PNG file to write.
        n_bins: number of equal-width bins.
        level: credible level of the band.
        title: optional figure title.
        dpi: resolution.

    {png_returns_raises}
        ValueError: invalid data, ``level`` or a batched posterior.

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import SVI, fit_bayes
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
        >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
        ...                  method=SVI(n_steps=200, n_samples=100))
        >>> from jaxcal.plot import posterior_reliability_diagram
        >>> posterior_reliability_diagram(post, s, y, "posterior_reliability.png").name
        'posterior_reliability.png'
    """
    level = _checked_level(posterior, level)
    s = check_scores(scores)
    y = check_labels(labels, s.shape[0])
    if int(n_bins) < 1:
        raise ValueError(f"n_bins must be >= 1; got {n_bins!r}.")
    draws = np.asarray(posterior.probability_draws(s))  # [D, m]
    mean = draws.mean(0)
    idx = np.minimum((mean * n_bins).astype(int), n_bins - 1)
    rows = []
    for b in range(n_bins):
        m = idx == b
        if not m.any():
            continue
        per_draw = draws[:, m].mean(1)
        lo, hi = np.quantile(per_draw, [(1 - level) / 2, (1 + level) / 2])
        rows.append((mean[m].mean(), y[m].mean(), lo, hi, m.sum()))
    conf, freq, lo, hi, count = map(np.asarray, zip(*rows, strict=True))
    fig = new_figure((4.6, 4.4))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot([0, 1], [0, 1], color="k", lw=0.8, ls="--", label="perfect calibration")
    ax.fill_between(conf, lo, hi, color=BAND_COLOR, alpha=0.3, label=f"{level:.0%} credible")
    ax.plot(conf, conf, color=BAND_COLOR, lw=1.2)
    sizes = 15 + 85 * count / count.max()
    ax.scatter(conf, freq, s=sizes, color=POINT_COLOR, zorder=3, label="observed frequency")
    ax.set(xlim=(0, 1), ylim=(0, 1), xlabel="posterior mean probability",
           ylabel="fraction of positives", title=title or "")  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    return save_figure(fig, path, dpi=dpi)


@png_doc
def posterior_map(
    posterior,
    path: str | os.PathLike,
    *,
    scores: ArrayLike | None = None,
    labels: ArrayLike | None = None,
    level: float = 0.9,
    n_grid: int = 200,
    n_hist_bins: int = 40,
    true_map=None,
    title: str | None = None,
    dpi: int = 110,
) -> Path:
    """The fitted calibration map with its posterior band, over the score histogram.

    Draws the posterior mean of :math:`P(y=1\\mid s)` on a grid over the training score
    range, the equal-tailed ``level`` credible band, optionally the true map (simulations),
    and underneath (right axis) the histogram of ``scores`` (by class when ``labels`` are
    given), which shows where the band is wide because data are scarce.

    Args:
        posterior: an unbatched :class:`~jaxcal.bayes.Posterior`.
        path: PNG file to write.
        scores: optional ``[n]`` scores for the histogram.
        labels: optional ``[n]`` 0/1 labels (histogram by class).
        level: credible level of the band.
        n_grid: grid points over the training range.
        n_hist_bins: histogram bins.
        true_map: optional callable ``scores -> probabilities`` drawn as a dashed line.
        title: optional title.
        dpi: resolution.

    {png_returns_raises}
        ValueError: invalid inputs, ``level`` or a batched posterior.

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import jax, jaxcal, numpy as np
        >>> from jaxcal.bayes import SVI, fit_bayes
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=200); y = rng.random(200) < 1 / (1 + np.exp(-2 * s))
        >>> post = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0),
        ...                  method=SVI(n_steps=200, n_samples=100))
        >>> from jaxcal.plot import posterior_map
        >>> posterior_map(post, "posterior_map.png", scores=s, labels=y).name
        'posterior_map.png'
    """
    level = _checked_level(posterior, level)
    if int(n_grid) < 2:
        raise ValueError(f"n_grid must be >= 2; got {n_grid!r}.")
    lo_s, hi_s = float(posterior.context.lo), float(posterior.context.hi)
    grid = np.linspace(lo_s, hi_s, int(n_grid))
    mean = np.asarray(posterior.predict(grid))
    lo, hi = (np.asarray(v) for v in posterior.interval(grid, level=level))
    fig = new_figure((5.4, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    if scores is not None:
        s = check_scores(scores)
        hx = ax.twinx()
        bins = np.linspace(lo_s, hi_s, int(n_hist_bins) + 1)
        if labels is not None:
            y = check_labels(labels, s.shape[0])
            for c, color in zip((0, 1), HIST_COLORS, strict=True):
                hx.hist(s[y == c], bins=bins, color=color, alpha=0.35, label=f"y = {c}")
            hx.legend(loc="center right", fontsize=8)
        else:
            hx.hist(s, bins=bins, color=HIST_COLORS[0], alpha=0.35)
        hx.set_ylabel("count")
        ax.set_zorder(hx.get_zorder() + 1)
        ax.patch.set_visible(False)
    ax.fill_between(grid, lo, hi, color=BAND_COLOR, alpha=0.3, label=f"{level:.0%} credible")
    ax.plot(grid, mean, color=BAND_COLOR, lw=1.6, label="posterior mean")
    if true_map is not None:
        ax.plot(grid, np.asarray(true_map(grid)), color="k", ls="--", lw=1.0, label="true map")
    ax.set(xlim=(lo_s, hi_s), ylim=(0, 1), xlabel="score", ylabel="P(y = 1 | score)",
           title=title or "")  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    return save_figure(fig, path, dpi=dpi)
