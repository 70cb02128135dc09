"""Reliability diagrams (Guo et al., ICML 2017; Kweon, Kang and Yu, AAAI 2022, Figure 1)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from jax.typing import ArrayLike

from jaxcal.metrics.calibration import ece, reliability
from jaxcal.plot._figure import new_figure, plain_log_labels, png_doc, save_figure

__all__ = ["reliability_diagram"]

ACCURACY_COLOR = "#3b6fb6"
GAP_COLOR = "#d9534f"
COUNT_COLOR = "#7f7f7f"

# The panel grid is laid out by hand (inches), not by constrained layout: measuring the
# tick labels of 2 x panels axes costs seconds.
_PANEL_W, _PANEL_H = 3.6, 4.1
_LEFT, _RIGHT, _BOTTOM, _TOP, _TITLE = 0.75, 0.2, 0.55, 0.35, 0.35


def _as_panels(probs: ArrayLike | Mapping[str, ArrayLike]) -> dict[str, ArrayLike]:
    if isinstance(probs, Mapping):
        if not probs:
            raise ValueError("probs is an empty mapping; pass at least one calibrator.")
        return dict(probs)
    return {"": probs}


@png_doc
def reliability_diagram(
    probs: ArrayLike | Mapping[str, ArrayLike],
    labels: ArrayLike,
    path: str | os.PathLike,
    *,
    n_bins: int = 10,
    strategy: str = "uniform",
    sample_weight: ArrayLike | None = None,
    symmetric: bool = False,
    ece_bins: int = 15,
    title: str | None = None,
    ncols: int = 3,
    dpi: int = 110,
) -> Path:
    """Draw a reliability diagram (one panel per calibrator) and write it as a PNG.

    Each panel shows, per bin, the accuracy (blue bars), the gap to the mean confidence
    (translucent red bars, from accuracy to confidence; not hatched, which would cost a
    fifth of the drawing time), the diagonal of perfect calibration,
    and underneath the share of samples per bin (grey, log scale). The panel title gives
    the ECE (``ece_bins`` equal-width bins, as in ``jaxcal.metrics.ece``).

    Args:
        probs: ``[n]`` predicted probabilities, or a mapping ``name -> [n] probabilities``
            (one panel each, e.g. several calibrators on the same test pairs).
        labels: ``[n]`` 0/1 labels shared by every panel.
        path: output PNG path (parent folders are created).
        n_bins: bins of the diagram (default 10, as in Kweon et al. 2022).
        strategy: ``"uniform"`` or ``"quantile"`` bins (see ``jaxcal.metrics.reliability``).
        sample_weight: optional ``[n]`` weights.
        symmetric: draw bins below 0.5 on the negative class (the AAAI 2022 figures).
        ece_bins: number of bins for the ECE in the panel titles (default 15).
        title: figure title.
        ncols: panels per row.
        dpi: resolution of the PNG.

    {png_returns_raises}
        ValueError: invalid probabilities / labels / weights (as in ``jaxcal.metrics``).

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import numpy as np
        >>> from jaxcal.plot import reliability_diagram
        >>> rng = np.random.default_rng(0)
        >>> p_ips = rng.uniform(size=2000)  # calibrated
        >>> relevance = (rng.uniform(size=2000) < p_ips).astype(float)
        >>> p_naive = 0.5 * p_ips  # too low, as a naive fit on missing-not-at-random clicks
        >>> reliability_diagram({"naive": p_naive, "IPS": p_ips}, relevance, "rel.png").name
        'rel.png'
    """
    panels = _as_panels(probs)
    tables = {
        name: (
            reliability(p, labels, n_bins=n_bins, strategy=strategy,
                        sample_weight=sample_weight, symmetric=symmetric),
            float(ece(p, labels, n_bins=ece_bins, sample_weight=sample_weight)),
        )
        for name, p in panels.items()
    }  # fmt: skip
    ncols = max(1, min(int(ncols), len(panels)))
    nrows = math.ceil(len(panels) / ncols)
    width, height = _PANEL_W * ncols, _PANEL_H * nrows + (_TITLE if title else 0.0)
    fig = new_figure((width, height), layout=None)  # validated data first, then the figure
    outer = fig.add_gridspec(
        nrows, ncols, left=_LEFT / width, right=1 - _RIGHT / width, bottom=_BOTTOM / height,
        top=1 - (_TOP + (_TITLE if title else 0.0)) / height, wspace=0.3, hspace=0.35,
    )  # fmt: skip
    for k, (name, (table, err)) in enumerate(tables.items()):
        inner = outer[k // ncols, k % ncols].subgridspec(2, 1, height_ratios=(3, 1), hspace=0.05)
        ax = fig.add_subplot(inner[0])
        ax_count = fig.add_subplot(inner[1], sharex=ax)
        _draw_panel(ax, ax_count, table, symmetric=symmetric, legend=k == 0)
        label = f"{name}: ECE = {err:.4f}" if name else f"ECE = {err:.4f}"
        ax.set_title(label, fontsize=10, y=1.0, pad=4)  # a fixed place: no measuring
        if k % ncols:
            ax.set_ylabel("")
            ax_count.set_ylabel("")
    if title:
        fig.suptitle(title, fontsize=12, y=1 - 0.12 / height, va="top")
    return save_figure(fig, path, dpi=dpi)


def _bars(ax: Any, left, width, bottom, top, **style) -> Any:
    """Bars as one collection of rectangles (``ax.bar`` makes an artist per bar, which
    costs most of the drawing time of a grid of panels)."""
    from matplotlib.collections import PolyCollection

    right = left + width
    verts = np.stack(
        [np.stack([left, bottom], -1), np.stack([left, top], -1),
         np.stack([right, top], -1), np.stack([right, bottom], -1)], axis=1,
    )  # fmt: skip
    return ax.add_collection(PolyCollection(verts, **style), autolim=False)


def _draw_panel(
    ax: Any, ax_count: Any, table: Any, *, symmetric: bool, legend: bool = True
) -> None:
    from matplotlib.patches import Patch
    from matplotlib.ticker import LogLocator, NullLocator

    edges = np.asarray(table.edges)
    left, width = edges[:-1], np.diff(edges)
    center = left + width / 2
    acc, conf = np.asarray(table.accuracy), np.asarray(table.confidence)
    full = np.asarray(table.weight) > 0
    accuracy = {"facecolor": ACCURACY_COLOR, "edgecolor": "white", "linewidth": 0.6}
    gap = {"facecolor": GAP_COLOR, "alpha": 0.35, "edgecolor": GAP_COLOR, "linewidth": 0.6}
    _bars(ax, left[full], width[full], np.zeros(int(full.sum())), acc[full], **accuracy)
    _bars(ax, left[full], width[full], acc[full], conf[full], **gap)
    ax.plot(center[full], conf[full], "o", color=GAP_COLOR, markersize=3, label="confidence")
    ax.plot([0, 1], [0, 1], "--", color="black", linewidth=0.8)
    if symmetric:
        ax.plot([0, 0.5], [1, 0.5], "--", color="black", linewidth=0.8)
        ax.set_ylabel("accuracy (negatives below 0.5)")
    else:
        ax.set_ylabel("accuracy (share of positives)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.tick_params(labelbottom=False)
    if legend:  # one legend per figure: every panel draws the same three artists
        handles = [Patch(label="accuracy", **accuracy), Patch(label="gap to confidence", **gap)]
        handles += ax.get_legend_handles_labels()[0]
        ax.legend(handles=handles, loc="upper left", fontsize=7, frameon=False)
    ax.grid(alpha=0.25)
    share = np.asarray(table.count) / max(float(np.sum(table.count)), 1.0)
    some = share > 0
    floor = max(share[some].min() / 2, 1e-7) if some.any() else 0.0  # the log axis' bottom
    _bars(ax_count, left[some], width[some], np.full(int(some.sum()), floor), share[some],
          facecolor=COUNT_COLOR, edgecolor="white", linewidth=0.6)  # fmt: skip
    ax_count.set_xlim(0, 1)
    if some.any():
        ax_count.set_yscale("log")
        ax_count.set_ylim(floor, 1.5)
        ax_count.yaxis.set_major_locator(LogLocator(numticks=4))
        ax_count.yaxis.set_minor_locator(NullLocator())
        plain_log_labels(ax_count.yaxis)
    ax_count.set_ylabel("share", fontsize=8)
    ax_count.set_xlabel("predicted probability (confidence)")
    ax_count.grid(alpha=0.25)
