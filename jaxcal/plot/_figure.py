"""The figure shell shared by every plot: a matplotlib ``Figure`` on an Agg canvas (no
``pyplot``, so plotting never changes the caller's backend or global state), imported only
when a plot is drawn, and written as a PNG."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

__all__ = ["new_figure", "save_figure", "plain_log_labels", "png_doc", "INSTALL_HINT"]

INSTALL_HINT = "plotting needs matplotlib: pip install 'jaxcal[plot]' (or pip install matplotlib)"

#: what every plot returns and raises, put into its docstring by :func:`png_doc`
_PNG_RETURNS_RAISES = """Returns:
        ``path`` as a ``pathlib.Path``.

    Raises:
        ImportError: matplotlib is not installed (``pip install jaxcal[plot]``)."""


def png_doc(plot: Any) -> Any:
    """Decorator of the plots: write the Returns section (the PNG's path) and the
    ImportError (no matplotlib) that every plot shares where its docstring says
    ``{png_returns_raises}``; the plot's own errors follow in the Raises section."""
    if plot.__doc__:  # None under python -OO
        plot.__doc__ = plot.__doc__.replace("{png_returns_raises}", _PNG_RETURNS_RAISES)
    return plot


def new_figure(figsize: tuple[float, float], *, layout: str | None = "constrained") -> Any:
    """A matplotlib ``Figure`` on an Agg canvas; ImportError with an install hint.

    Args:
        figsize: width and height in inches.
        layout: matplotlib's layout engine (``"constrained"``, the default, or ``None`` for
            a figure that places its axes itself: constrained layout measures every tick
            label, which costs seconds on a grid of many axes).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(INSTALL_HINT) from exc
    fig = Figure(figsize=figsize, layout=layout)
    FigureCanvasAgg(fig)
    return fig


def save_figure(fig: Any, path: str | os.PathLike, *, dpi: int) -> Path:
    """Write ``fig`` as a PNG (parent folders created) and return the path. At zlib's
    fastest level: a figure of nine panels is written about 0.15 s sooner (a fifth of its
    drawing time), in a file about 1.3x larger."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png", pil_kwargs={"compress_level": 1})
    return path


def plain_log_labels(axis: Any) -> None:
    """Label a log-scaled axis with plain numbers (0.01, 100), not mathtext powers of ten,
    whose typesetting is a large share of a small figure's drawing time."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())
