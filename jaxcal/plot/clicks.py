"""Reliability diagrams of click models per rank (Borisov, Kiseleva, Markov & de Rijke,
CIKM 2018, Figure 1): observed click-through rate against the predicted click probability.

matplotlib is imported lazily and figures are drawn on an Agg canvas (no ``pyplot``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from jaxcal.clicks.metrics import ReliabilityByRank
from jaxcal.plot._figure import new_figure, png_doc, save_figure

__all__ = ["reliability_by_rank_diagram"]

DIAGONAL_COLOR = "#999999"
_PANEL = 4.0  # inches per (square) panel


def _as_diagrams(
    diagrams: Mapping[str, ReliabilityByRank] | ReliabilityByRank,
) -> dict[str, ReliabilityByRank]:
    if isinstance(diagrams, ReliabilityByRank):
        return {"model": diagrams}
    if not diagrams:
        raise ValueError("diagrams is an empty mapping; pass at least one diagram.")
    return dict(diagrams)


@png_doc
def reliability_by_rank_diagram(
    diagrams: Mapping[str, ReliabilityByRank] | ReliabilityByRank,
    path: str | os.PathLike,
    *,
    ranks: Sequence[int] = (1, 3, 5),
    title: str | None = None,
    dpi: int = 100,
) -> Path:
    """Draw one panel per rank: observed CTR against the mean predicted probability of each
    non-empty bucket, for one or several named diagrams, with the diagonal; write a PNG.

    Args:
        diagrams: a :class:`jaxcal.clicks.metrics.ReliabilityByRank`
            (``jaxcal.clicks.reliability_by_rank``), or a mapping ``name -> diagram`` drawn
            in the same panels (e.g. ``{"uncalibrated": ..., "calibrated": ...}``).
        path: output PNG path (parent folders are created).
        ranks: the 1-based ranks to draw, one panel each.
        title: figure title.
        dpi: resolution of the PNG.

    {png_returns_raises}
        ValueError: an empty mapping, or ranks outside the diagrams.

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import numpy as np
        >>> from jaxcal.clicks import reliability_by_rank
        >>> from jaxcal.plot import reliability_by_rank_diagram
        >>> rng = np.random.default_rng(0)
        >>> probs = rng.uniform(size=(2000, 3)) / np.arange(1, 4)  # [sessions, ranks]
        >>> clicks = (rng.uniform(size=probs.shape) < probs).astype(int)
        >>> d = reliability_by_rank(probs, clicks, n_bins=10)
        >>> reliability_by_rank_diagram({"model": d}, "rel_by_rank.png", ranks=(1, 2)).name
        'rel_by_rank.png'
    """
    diagrams = _as_diagrams(diagrams)
    n = min(d.ctr.shape[0] for d in diagrams.values())
    bad = [r for r in ranks if not 1 <= r <= n]
    if bad or not ranks:
        raise ValueError(f"ranks must be a non-empty sequence in 1..{n}; got {list(ranks)}.")
    fig = new_figure((_PANEL * len(ranks), _PANEL))  # validated data first, then the figure
    for i, r in enumerate(ranks):
        ax = fig.add_subplot(1, len(ranks), i + 1)
        ax.plot([0, 1], [0, 1], color=DIAGONAL_COLOR, lw=1, ls="--")
        for name, d in diagrams.items():
            ok = d.count[r - 1] > 0
            ax.plot(d.mean_pred[r - 1][ok], d.ctr[r - 1][ok], marker="o", ms=3, lw=1, label=name)
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("predicted click probability")
        ax.set_ylabel("observed CTR" if i == 0 else "")
        ax.set_title(f"rank {r}")
        if i == 0:
            ax.legend(loc="upper left", fontsize=8)
    if title:
        fig.suptitle(title)
    return save_figure(fig, path, dpi=dpi)
