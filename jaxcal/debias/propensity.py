"""Propensity (exposure-probability) estimators for unbiased calibration."""

from __future__ import annotations

import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_1d, check_int, check_real
from jaxcal.data.triples import Interactions

__all__ = ["popularity_propensity", "uniform_propensity"]


def popularity_propensity(
    counts_or_interactions: ArrayLike | Interactions, *, power: float = 0.5, clip: float = 0.1
) -> np.ndarray:
    r"""Item-popularity propensities :math:`\omega_i = \max(c, (n_i / \max_j n_j)^{p})`.

    The estimator used by Saito et al. (2020) and Kweon et al. (AAAI 2022): ``n_i`` is the
    number of observed positives of item ``i`` in the training data. These are *relative*
    propensities (the most popular item gets 1): they fix the shape of a calibration map
    but not its level (see ``jaxcal.debias`` docs on base rates).

    Args:
        counts_or_interactions: ``[n_items]`` non-negative interaction counts :math:`n_i`
            (1-D), or the training interactions they are counted from: a
            ``[n_users, n_items]`` matrix (non-zero entries are positives) or
            :class:`jaxcal.data.Interactions` (non-zero ratings are positives).
        power: exponent ``p`` (default 0.5).
        clip: lower clip ``c`` in (0, 1] (default 0.1), which bounds the IPS weights by 1/c.

    Returns:
        ``[n_items]`` float64 propensities in ``[clip, 1]``.

    Raises:
        ValueError: negative or non-finite counts, all-zero counts, a matrix that is not
            2-D or not finite, ``clip`` outside (0, 1] or ``power`` <= 0.

    Example:
        >>> import numpy as np
        >>> from jaxcal.debias import popularity_propensity
        >>> popularity_propensity(np.array([[1, 1, 0], [1, 0, 0]]))  # counts [2, 1, 0]
        array([1.        , 0.70710678, 0.1       ])
    """
    counts = _item_counts(counts_or_interactions)
    if not np.isfinite(counts).all() or (counts < 0).any():
        raise ValueError("item_counts must be finite and non-negative.")
    if counts.max() <= 0:
        raise ValueError("item_counts are all zero; no item was ever observed.")
    if not 0 < check_real(clip, "clip") <= 1:
        raise ValueError(f"clip must be in (0, 1]; got {clip}.")
    check_real(power, "power", minimum=0.0, strict=True)
    return np.maximum((counts / counts.max()) ** power, clip)


def _item_counts(data: ArrayLike | Interactions) -> np.ndarray:
    """Positives per item of counts (1-D), a matrix or ``Interactions``."""
    if isinstance(data, Interactions):
        return np.bincount(data.item[data.rating != 0], minlength=data.n_items).astype(float)
    arr = np.asarray(data)
    if arr.ndim == 2:
        if arr.dtype.kind not in "biuf" or not np.isfinite(arr).all():
            raise ValueError("the interaction matrix must be finite and numeric.")
        return (arr != 0).sum(axis=0).astype(np.float64)
    if arr.ndim != 1:
        raise ValueError(
            "pass [n_items] counts, a [n_users, n_items] matrix or jaxcal.data.Interactions; "
            f"got an array of shape {arr.shape}."
        )
    return check_1d(arr, "item_counts")


def uniform_propensity(n: int, value: float = 1.0) -> np.ndarray:
    """Constant propensities (``value`` in (0, 1]); with 1.0, IPS equals the naive loss.

    Args:
        n: how many (an integer >= 0).
        value: the propensity, in (0, 1].

    Returns:
        ``[n]`` float64 propensities.

    Raises:
        ValueError: ``n`` not an integer >= 0, ``value`` outside (0, 1].

    Example:
        >>> from jaxcal.debias import uniform_propensity
        >>> uniform_propensity(3, 0.5)
        array([0.5, 0.5, 0.5])
    """
    n = check_int(n, "n", minimum=0)
    if not 0 < check_real(value, "value") <= 1:
        raise ValueError(f"value must be in (0, 1]; got {value}.")
    return np.full(n, float(value))
