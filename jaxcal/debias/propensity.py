"""Propensity (exposure-probability) estimators for unbiased calibration."""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_1d

__all__ = ["popularity_propensity", "uniform_propensity"]


def popularity_propensity(
    item_counts: ArrayLike, *, power: float = 0.5, clip: float = 0.1
) -> np.ndarray:
    r"""Item-popularity propensities :math:`\omega_i = \max(c, (n_i / \max_j n_j)^{p})`.

    The estimator used by Saito et al. (2020) and Kweon et al. (AAAI 2022): ``n_i`` is the
    number of observed positives of item ``i`` in the training data. These are *relative*
    propensities (the most popular item gets 1): they fix the shape of a calibration map
    but not its level (see ``jaxcal.debias`` docs on base rates).

    Args:
        item_counts: ``[n_items]`` non-negative interaction counts.
        power: exponent ``p`` (default 0.5).
        clip: lower clip ``c`` in (0, 1] (default 0.1), which bounds the IPS weights by 1/c.

    Returns:
        ``[n_items]`` float64 propensities in ``[clip, 1]``.

    Raises:
        ValueError: negative or non-finite counts, all-zero counts, ``clip`` outside (0, 1]
            or ``power`` <= 0.
    """
    counts = check_1d(item_counts, "item_counts")
    if not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("item_counts must be finite and non-negative.")
    if counts.max() <= 0:
        raise ValueError("item_counts are all zero; no item was ever observed.")
    if not 0 < clip <= 1:
        raise ValueError(f"clip must be in (0, 1]; got {clip}.")
    if not power > 0:
        raise ValueError(f"power must be > 0; got {power}.")
    return np.maximum((counts / counts.max()) ** power, clip)


def uniform_propensity(n: int, value: float = 1.0) -> np.ndarray:
    """Constant propensities (``value`` in (0, 1]); with 1.0, IPS equals the naive loss."""
    if not 0 < value <= 1:
        raise ValueError(f"value must be in (0, 1]; got {value}.")
    return np.full(int(n), float(value))
