r"""Deterministic cross-validation folds, stratified by label.

Within each problem (``group``), the rows are sorted by (zero weight last, label, order key,
position) and the ``i``-th row in that order goes to fold :math:`i \bmod K`. The order key
within a label is either

* the **score** (``scores=``): the folds take turns along the sorted scores, so they are
  *balanced in score*: below any threshold :math:`c`, each fold holds within one row of a
  :math:`K`-th of each label's rows at or below :math:`c`; or
* a **fixed scramble of the row positions** (no ``scores``): a bijective integer hash of
  each row's position, the same for every call, so the folds split each label like a
  random permutation would, without a seed.

Either way, no randomness: the folds are a function of the data (and of the row order),
the same on the host (NumPy) and inside a trace (``jit``, ``vmap``: the same sort). For
every problem the folds' sizes differ by at most one row, and so do the counts of each label
(rows of positive weight first): each fold's share of positives is within one row of the
whole problem's, :math:`|P_k - n_k P / n| < 1`.

Which key: folds balanced in score give every fold the same empirical joint distribution of
(score, label), up to a row: right for folds whose models are merged
(:class:`jaxcal.VennAbers`'s cross folds: each fold's predictor spans the score range), wrong
for choosing a hyperparameter by held-out loss, because a held-out fold then shares the
training folds' local label fractions (their noise) and the held-out loss rewards fitting
that noise. For :class:`jaxcal.SplineCalibration` on 10,000 rows of a known curve
(``tests/calibrators/test_spline.py``), folds balanced in score chose the smallest penalty
of the grid on 19 of 20 simulated data sets, while the penalty of the best population log
loss, and the choice of scrambled or random folds, was 100 to 10 times larger; scrambled
folds (stratified by label only) are used there.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxcal._shapes import is_traced
from jaxcal._validation import check_int

__all__ = ["stratified_folds"]


def _scramble(position, xp):
    """A bijective hash of uint32 positions (Wellons' ``lowbias32``): the same pseudo-random
    order in NumPy and JAX (wrapping uint32 products)."""
    x = position.astype(xp.uint32)
    x = (x ^ (x >> 16)) * xp.uint32(0x7FEB352D)
    x = (x ^ (x >> 15)) * xp.uint32(0x846CA68B)
    return x ^ (x >> 16)


def stratified_folds(
    labels: ArrayLike,
    n_folds: int,
    *,
    scores: ArrayLike | None = None,
    weights: ArrayLike | None = None,
    group: ArrayLike | None = None,
):
    r"""Fold ids in ``[0, n_folds)``, stratified by label (module docstring): within each
    ``group``, row ``i`` of the order (zero weight last, label, score or scrambled position,
    position) is in fold ``i mod n_folds``.

    Args:
        labels: ``[n]`` labels (0/1; any values sort as numbers).
        n_folds: ``K >= 1``.
        scores: optional ``[n]`` scores (only their order matters): the folds are
            interleaved in score order within each label (balanced in score). Without
            them, in a fixed scramble of the row positions.
        weights: optional ``[n]`` weights: rows of weight ``<= 0`` are dealt after the
            others of their problem (so they change no fold of the others).
        group: optional ``[n]`` integer problem ids; each problem is dealt on its own,
            starting with fold 0 (its folds are those it would get alone).

    Returns:
        ``[n]`` int32 fold ids: a NumPy array for concrete inputs, a JAX array for traced
        ones (the same ids).

    Raises:
        ValueError: ``n_folds`` not an integer ``>= 1``, or inputs that are not ``[n]``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.fitting.folds import stratified_folds
        >>> y = np.array([0, 1, 0, 1, 0, 1, 0, 0])
        >>> s = np.array([0.9, 0.8, 0.1, 0.3, 0.5, 0.6, 0.2, 0.4])
        >>> stratified_folds(y, 2, scores=s)  # label 0 by score: rows 2, 6, 7, 4, 0; then 1
        array([0, 1, 0, 1, 1, 0, 1, 0], dtype=int32)
        >>> np.bincount(stratified_folds(y, 2), weights=y).tolist()  # positives per fold
        [1.0, 2.0]
    """
    k = check_int(n_folds, "n_folds", minimum=1)
    traced = is_traced(labels, scores, weights, group)
    xp = jnp if traced else np
    y = xp.asarray(labels)
    n = y.shape[0] if y.ndim == 1 else -1
    for name, a in (("labels", y), ("scores", scores), ("weights", weights), ("group", group)):
        if a is not None and xp.shape(a) != (n,):
            raise ValueError(
                f"stratified_folds needs 1-D labels and {name} of the same length; got "
                f"labels of shape {y.shape} and {name} of shape {xp.shape(a)}."
            )
    position = xp.arange(max(n, 0), dtype=xp.int32)
    if scores is None:
        key = _scramble(position, xp)
    else:  # ``+ 0.0``: -0.0 ties 0.0 in both sorts
        key = xp.asarray(scores)
        key = key + 0.0 if xp.issubdtype(key.dtype, xp.floating) else key
    keys = [key, y]  # the primary key last (np.lexsort's order)
    if weights is not None:
        keys.append((xp.asarray(weights) <= 0).astype(xp.int32))
    if group is not None:
        keys.append(xp.asarray(group))
    if traced:  # lax.sort with the position as the last key: a total, stable order
        order = lax.sort((*keys[::-1], position), num_keys=len(keys) + 1)[-1]
    else:  # np.lexsort is stable
        order = np.lexsort(keys).astype(np.int32)
    rank = position
    if group is not None:  # the rank within the problem: deal each problem from fold 0
        g = keys[-1][order]
        new = xp.concatenate([xp.ones(min(n, 1), bool), g[1:] != g[:-1]])
        start = xp.where(new, position, 0)
        start = lax.cummax(start) if traced else np.maximum.accumulate(start)
        rank = position - start
    deal = (rank % k).astype(xp.int32)
    if traced:
        return jnp.zeros(n, jnp.int32).at[order].set(deal)
    fold = np.empty(n, np.int32)
    fold[order] = deal
    return fold
