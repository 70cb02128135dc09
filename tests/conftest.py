"""Test configuration: float64 everywhere (oracle comparisons at ~1e-10), real-data paths."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import pytest

jax.config.update("jax_enable_x64", True)
# CLI tests must not write to the user's compilation cache (or time a warm one)
os.environ.setdefault("JAXCAL_COMPILATION_CACHE", "0")

# Named tolerances (see docs/STYLE): float64 oracle comparisons, float32 paths.
RTOL64 = 1e-10
RTOL32 = 1e-5


def _data_dir() -> Path:
    env = os.environ.get("JAXCAL_DATA_DIR")
    if env:
        return Path(env)
    return (Path(__file__).resolve().parents[1] / ".." / "shared" / "data").resolve()


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The shared real data (Coat, TianGong-ST demo); skips where it is absent."""
    d = _data_dir()
    if not d.is_dir():
        pytest.skip(f"shared data not found at {d} (set JAXCAL_DATA_DIR)")
    return d
