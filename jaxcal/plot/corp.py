"""CORP reliability diagrams (Dimitriadis, Gneiting & Jordan, PNAS 2021): the PAV-recalibrated
probabilities against the forecasts, with a consistency band and the score decomposition."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxcal.metrics.corp import CorpDecomposition, CorpReliability, corp_decomposition
from jaxcal.metrics.corp import corp_reliability as corp_curve
from jaxcal.plot._figure import new_figure, png_doc, save_figure

__all__ = ["corp_reliability_diagram"]

CURVE_COLOR = "#d9534f"
BAND_COLOR = "#3b6fb6"
COUNT_COLOR = "#7f7f7f"


@png_doc
def corp_reliability_diagram(
    probs: ArrayLike,
    labels: ArrayLike,
    path: str | os.PathLike,
    *,
    key: jax.Array | None = None,
    n_resamples: int = 1000,
    level: float = 0.9,
    score: str = "brier",
    sample_weight: ArrayLike | None = None,
    title: str | None = None,
    dpi: int = 110,
) -> Path:
    """Draw a CORP reliability diagram and write it as a PNG.

    The CORP curve (``jaxcal.metrics.corp_reliability``: the PAV-recalibrated probability, a
    step function of the forecast), its consistency band under calibration (shaded, drawn
    when ``n_resamples > 0``), the diagonal, and underneath a histogram of the forecasts.
    The title gives the CORP decomposition of the mean score (``score``): MCB, DSC, UNC.

    Args:
        probs: ``[n]`` forecast probabilities.
        labels: ``[n]`` 0/1 labels.
        path: output PNG path (parent folders are created).
        key: ``jax.random`` key of the band's resamples (needed unless ``n_resamples=0``).
        n_resamples: label vectors drawn under calibration for the band (0: no band).
        level: coverage of the pointwise band.
        score: ``"brier"`` or ``"log"``, for the decomposition in the title.
        sample_weight: optional ``[n]`` weights.
        title: figure title.
        dpi: resolution of the PNG.

    {png_returns_raises}
        ValueError: invalid data or arguments (as in ``jaxcal.metrics.corp_reliability``).

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import jax, numpy as np
        >>> from jaxcal.plot import corp_reliability_diagram
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(size=1000); y = rng.uniform(size=1000) < p ** 1.5
        >>> out = corp_reliability_diagram(p, y, "corp.png", key=jax.random.key(0), n_resamples=200)
        >>> out.name
        'corp.png'
    """
    curve = corp_curve(
        probs, labels, key=key, n_resamples=n_resamples, level=level, sample_weight=sample_weight
    )
    parts = corp_decomposition(probs, labels, score=score, sample_weight=sample_weight)
    fig = new_figure((4.6, 5.4))  # validated data first, then the figure
    grid = fig.add_gridspec(2, 1, height_ratios=(3, 1), hspace=0.05)
    ax, ax_count = fig.add_subplot(grid[0]), fig.add_subplot(grid[1])
    _draw(ax, ax_count, curve, np.asarray(probs, np.float64), level, n_resamples > 0)
    name = {"brier": "Brier", "log": "log"}[score]
    ax.set_title(_decomposition_text(parts, name), fontsize=9)
    if title:
        fig.suptitle(title, fontsize=11)
    return save_figure(fig, path, dpi=dpi)


def _decomposition_text(parts: CorpDecomposition, name: str) -> str:
    mcb, dsc, unc = (float(v) for v in parts)
    return f"{name} {mcb - dsc + unc:.4f} = MCB {mcb:.4f} - DSC {dsc:.4f} + UNC {unc:.4f}"


def _draw(ax: Any, ax_count: Any, curve: CorpReliability, probs, level: float, band: bool):
    x = np.asarray(curve.forecast)
    # a step function of the forecast, extended to the edge of the last step
    xs = np.r_[x, x[-1]]
    if band:
        lo, hi = np.asarray(curve.lower), np.asarray(curve.upper)
        ax.fill_between(xs, np.r_[lo, lo[-1]], np.r_[hi, hi[-1]], step="post",
                        color=BAND_COLOR, alpha=0.25, linewidth=0,
                        label=f"{level:.0%} consistency band")  # fmt: skip
    recal = np.asarray(curve.recalibrated)
    ax.plot(xs, np.r_[recal, recal[-1]], drawstyle="steps-post", color=CURVE_COLOR,
            linewidth=1.5, label="CORP (PAV-recalibrated)")  # fmt: skip
    ax.plot([0, 1], [0, 1], "--", color="black", linewidth=0.8)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("conditional event probability")
    ax.tick_params(labelbottom=False)
    ax.legend(loc="upper left", fontsize=7, frameon=False)
    ax.grid(alpha=0.25)
    ax_count.hist(probs, bins=50, range=(0, 1), color=COUNT_COLOR, edgecolor="white",
                  linewidth=0.4)  # fmt: skip
    ax_count.set_xlim(0, 1)
    ax_count.set_xlabel("forecast probability")
    ax_count.set_ylabel("count", fontsize=8)
    ax_count.grid(alpha=0.25)
