r"""Discrimination: the (weighted) area under the ROC curve.

.. math::

    \mathrm{AUC} = \frac{\sum_{i: y_i = 1}\sum_{j: y_j = 0} w_i w_j
        \bigl([s_i > s_j] + \tfrac12 [s_i = s_j]\bigr)}{W_+ W_-},

the probability that a random positive outranks a random negative, ties counting one half
(the Mann-Whitney statistic). AUC depends on the scores only through their order, so a
strictly increasing calibration map leaves it unchanged.

Computed in :math:`O(n \log n)`: sort, group tied scores with ``segment_sum``, and for each
tie group add its positive weight times (negative weight strictly below + half the negative
weight tied with it). For XLA's CPU backend the sort runs in NumPy before the jitted sums
(XLA's comparator sort costs about 5 ms at ``n = 1e4``, NumPy's about 0.5 ms); other
backends sort inside the program.

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) the program sorts
itself and invalid data (non-finite scores, labels not 0/1, bad weights, one class) gives
NaN. AUC is piecewise constant in the scores: its gradient is 0 almost everywhere.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._scan import cummax, cumsum, presort
from jaxcal._validation import (
    check_labels,
    check_pure,
    check_sample_weight,
    check_scores,
    check_two_classes,
    nan_where,
)

__all__ = ["auc"]


@jit
def _auc_core(s, y, w):
    order = jnp.argsort(s)
    return _auc_sorted(s[order], y[order], w[order])


@jit
def _auc_sorted(s, y, w):
    r"""AUC of scores sorted in non-decreasing order.

    With :math:`C_j` the negative weight of the first :math:`j` points and :math:`[a_i,
    b_i)` the positions of point :math:`i`'s tie run, the negatives below it weigh
    :math:`C_{a_i}` and those tied with it :math:`C_{b_i} - C_{a_i}`, so the numerator is
    :math:`\tfrac12 \sum_i w_i y_i (C_{a_i} + C_{b_i})`: prefix scans and gathers, no
    scatter (XLA's CPU scatter is the slow part of a segment sum).
    """
    n = s.shape[0]
    index = jnp.arange(n)
    new_run = jnp.concatenate([jnp.ones((1,), bool), s[1:] != s[:-1]])
    run_ends = jnp.concatenate([s[1:] != s[:-1], jnp.ones((1,), bool)])
    start = cummax(jnp.where(new_run, index, 0))
    end = n - cummax(jnp.where(run_ends, n - 1 - index, 0), reverse=True)
    neg = w * (1.0 - y)
    C = jnp.concatenate([jnp.zeros((1,), w.dtype), cumsum(neg)])
    pos = w * y
    return 0.5 * jnp.sum(pos * (C[start] + C[end])) / (jnp.sum(pos) * C[n])


def auc(
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
) -> jax.Array:
    """Weighted ROC AUC of real-valued scores (ties count 1/2).

    Args:
        scores: ``[n]`` finite scores or probabilities (only their order matters).
        labels: ``[n]`` 0/1 labels.
        sample_weight: ``[n]`` non-negative weights (default ones).

    Returns:
        Scalar AUC in [0, 1].

    Raises:
        ValueError: non-finite scores, labels not 0/1, length mismatch, empty input,
            negative weights, or only one class carrying positive weight.

    Example:
        >>> from jaxcal.metrics import auc
        >>> float(auc([0.1, 0.4, 0.4, 0.8], [0, 0, 1, 1]))  # (1 + 0.5 + 1 + 1) / 4
        0.875
    """
    if _shapes.is_traced(scores, labels, sample_weight):
        s, y, w, invalid = check_pure(
            scores, labels, sample_weight, name="scores", probabilities=False, two_classes=True
        )
        return nan_where(invalid, _auc_core(s, y, w))
    s = check_scores(scores)
    y = check_labels(labels, s.shape[0])
    w = check_sample_weight(sample_weight, s.shape[0])
    check_two_classes(y, w)
    presorted, s, y, w = presort(s, y, w)  # any order within a tie group
    core = _auc_sorted if presorted else _auc_core
    # zero-weight copies of the largest score: they join its tie group and add nothing
    size = _shapes.padded_size(s.shape[0])
    padded = _shapes.pad_rows(size, s, y, w, fills=(s.max(), 0, 0))
    return core(*padded)  # NumPy arrays: the call copies them in (cheaper than device_put)
