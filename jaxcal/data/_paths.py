"""Where the shared reference data lives: ``$JAXCAL_DATA_DIR``, else ``../shared/data``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_data_dir"]


def default_data_dir() -> Path:
    """``$JAXCAL_DATA_DIR`` if set; else ``../shared/data`` from the working directory; else
    ``../shared/data`` next to the source checkout (editable installs). Never copied into
    the package."""
    env = os.environ.get("JAXCAL_DATA_DIR")
    if env:
        return Path(env)
    candidates = [
        Path.cwd() / ".." / "shared" / "data",
        Path(__file__).resolve().parents[2] / ".." / "shared" / "data",
    ]
    for c in candidates:
        if c.is_dir():
            return c.resolve()
    return candidates[0]
