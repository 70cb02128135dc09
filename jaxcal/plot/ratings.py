"""Monotone rating transforms (Hiranandani, Somani, Koyejo & Acharyya, WSDM 2019): the
learned transform of each group of users against the truth, on one axis.

A transform ``z[r]`` puts rating level ``r`` on the score scale. Transforms are drawn
normalised by their end levels, ``(z[r] - z[1]) / (z[L] - z[1])``, which removes the affine
freedom (offset and scale) between a transform and the scores it is fitted to: what is left
is the transform's shape, which is what the model can identify.

matplotlib is imported lazily and figures are drawn on an Agg canvas (no ``pyplot``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from jax.typing import ArrayLike

from jaxcal.plot._figure import new_figure, png_doc, save_figure

__all__ = ["rating_transforms", "normalised_transforms"]

DIAGONAL_COLOR = "#999999"


def normalised_transforms(transforms: ArrayLike) -> np.ndarray:
    """``(z - z[:, :1]) / (z[:, -1:] - z[:, :1])`` of ``[G, L]`` transforms (rows whose end
    levels coincide give NaN rows).

    Raises:
        ValueError: not a 2-D array with at least two levels, or non-finite values.
    """
    z = np.asarray(transforms, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] < 2:
        raise ValueError(f"transforms must be [groups, levels] with levels >= 2; got {z.shape}.")
    if not np.isfinite(z).all():
        raise ValueError("transforms hold non-finite values.")
    span = z[:, -1:] - z[:, :1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(span != 0, (z - z[:, :1]) / np.where(span != 0, span, 1.0), np.nan)


@png_doc
def rating_transforms(
    transforms: ArrayLike,
    path: str | os.PathLike,
    *,
    truth: ArrayLike | None = None,
    labels: Sequence[str] | None = None,
    truth_labels: Sequence[str] | None = None,
    title: str | None = None,
    dpi: int = 100,
) -> Path:
    """Draw learned rating transforms (solid) and, optionally, the true ones (dashed), each
    normalised by its end levels, against the rating level; write a PNG.

    Args:
        transforms: ``[G, L]`` learned transforms (one row per group: cluster, segment...).
        path: output PNG path (parent folders are created).
        truth: ``[S, L]`` true transforms on the same levels, or ``None``.
        labels, truth_labels: legend names (default ``group g`` / ``truth s``).
        title: figure title.
        dpi: resolution of the PNG.

    {png_returns_raises}
        ValueError: malformed transforms, truth with another number of levels, or labels of
            the wrong length.

    Example (needs matplotlib: ``pip install jaxcal[plot]``):
        >>> import numpy as np
        >>> from jaxcal.plot import rating_transforms
        >>> z = np.array([[1.0, 1.5, 2.0, 3.5, 5.0], [1.0, 3.0, 4.0, 4.5, 5.0]])
        >>> rating_transforms(z, "transforms.png").name
        'transforms.png'
    """
    z = normalised_transforms(transforms)
    t = None if truth is None else normalised_transforms(truth)
    if t is not None and t.shape[1] != z.shape[1]:
        raise ValueError(f"truth has {t.shape[1]} levels, transforms have {z.shape[1]}.")
    labels = [f"group {g}" for g in range(z.shape[0])] if labels is None else list(labels)
    if len(labels) != z.shape[0]:
        raise ValueError(f"{len(labels)} labels for {z.shape[0]} transforms.")
    if t is not None:
        n = t.shape[0]
        truth_labels = [f"truth {s}" for s in range(n)] if truth_labels is None else truth_labels
        if len(truth_labels) != n:
            raise ValueError(f"{len(truth_labels)} truth labels for {n} true transforms.")
    levels = np.arange(1, z.shape[1] + 1)
    fig = new_figure((5.0, 4.0))
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(levels[[0, -1]], [0, 1], color=DIAGONAL_COLOR, lw=1, ls=":", label="linear")
    colors = [f"C{g % 10}" for g in range(max(z.shape[0], 0 if t is None else t.shape[0]))]
    for g, row in enumerate(z):
        ax.plot(levels, row, color=colors[g], marker="o", lw=1.5, label=labels[g])
    if t is not None:
        for s, row in enumerate(t):
            ax.plot(levels, row, color=colors[s], ls="--", lw=1.2, label=truth_labels[s])
    ax.set(xticks=levels, xlabel="rating level r", ylabel="(z[r] - z[1]) / (z[L] - z[1])",
           title=title or "")  # fmt: skip
    ax.legend(loc="upper left", fontsize=8)
    return save_figure(fig, path, dpi=dpi)
