"""Where the reference data sets (Coat, the TianGong-ST demo log) are read from."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_data_dir"]


def default_data_dir() -> Path:
    """The data directory: ``$JAXCAL_DATA_DIR`` if set. Without it, a development checkout
    finds the data in a ``shared/data`` folder beside it (looked up from the working
    directory, then from the source tree). The data is never copied into the package.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> from jaxcal.data import default_data_dir
        >>> with mock.patch.dict(os.environ, {"JAXCAL_DATA_DIR": "datasets"}):
        ...     print(default_data_dir().as_posix())
        datasets
    """
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
