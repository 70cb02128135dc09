r"""The estimated cumulative calibration error (ECCE) of Arrieta-Ibarra, Gujral, Tannen,
Tygert and Xu (JMLR 2022), its scale and its p-value.

With the rows ordered by increasing probability,
:math:`C_k = \frac{1}{W}\sum_{i \le k} w_i (y_i - p_i)`, :math:`C_0 = 0`,
:math:`W = \sum_i w_i`:

.. math::

    \mathrm{ECCE} = \max_k C_k - \min_k C_k,\qquad
    \sigma = \frac{\sqrt{\sum_i w_i^2 p_i (1 - p_i)}}{W},

and under perfect calibration :math:`\mathrm{ECCE}/\sigma` tends to the range of a
standard Brownian motion on [0, 1], whose tail gives the p-value (Kuiper's test). No bins,
no bandwidth.

Ties: :math:`C_k` is read at the end of each run of tied probabilities, so tied rows may come
in any order and a row of weight ``k`` counts as ``k`` copies of it in the ECCE. MCGrad
reads it after every row, in whatever order its sort leaves tied rows: the same numbers
without ties; with heavy ties (a few distinct probabilities, as histogram or isotonic maps
give) jaxcal's statistic is read at fewer points, so its p-value is conservative.

Weights: the scale :math:`\sigma` treats a weighted row as one observation scaled by its
weight (the variance of an IPS estimate, :math:`w_i^2`), as MCGrad does; for weights that
count duplicated rows, pass the duplicated rows to get their :math:`\sigma`.

Inside ``jit`` / ``vmap`` (traced inputs) the functions run their pure core
(``jaxcal.metrics._ecce``) in the caller's program; invalid inputs give NaN.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _scan, _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_labels, check_probs, check_pure, check_sample_weight, nan_where
from jaxcal.metrics import _ecce

__all__ = ["ecce", "ecce_sigma", "ecce_pvalue"]


@partial(jit, static_argnames="presorted")
def _global_core(p, y, w, real, *, presorted: bool):
    stats = _ecce.masked_stats(
        p, y, w, real, jnp.ones((1, p.shape[0]), p.dtype), presorted=presorted
    )
    stats = jax.tree.map(lambda a: a[0], stats)
    sigma = _ecce.segment_sigma(stats)
    return _ecce.segment_ecce(stats), sigma, jnp.exp(_ecce.range_log_sf(sigma))


# --------------------------------------------------------------------- eager shell
def checked_inputs(probs, labels, sample_weight):
    p = check_probs(probs)
    y = check_labels(labels, p.shape[0])
    w = check_sample_weight(sample_weight, p.shape[0])
    return p, y, w


def padded_sorted(p, y, w, *extra_columns):
    """Rows sorted by probability on the host (CPU backends) and padded to the bucket size
    with zero-weight rows at the end (``real`` marks the rows that count)."""
    n = p.shape[0]
    real = np.ones(n)
    presorted, p, y, w, real, *cols = _scan.presort(p, y, w, real, *(c.T for c in extra_columns))
    size = _shapes.padded_size(n)
    fill = float(p.max())  # pads tie with the largest probability: sorted, and no weight
    p, y, w, real = _shapes.pad_rows(size, p, y, w, real, fills=(fill, 0, 0, 0))
    cols = [_shapes.pad_rows(size, c)[0].T for c in cols]
    return presorted, (p, y, w, real), cols


def _global(probs, labels, sample_weight):
    if _shapes.is_traced(probs, labels, sample_weight):
        p, y, w, invalid = check_pure(probs, labels, sample_weight)
        return nan_where(invalid, _global_core(p, y, w, jnp.ones_like(p), presorted=False))
    presorted, rows, _ = padded_sorted(*checked_inputs(probs, labels, sample_weight))
    return _global_core(*rows, presorted=presorted)


def ecce(
    probs: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""Estimated cumulative calibration error: the range of the cumulative differences
    :math:`C_k = \frac{1}{W}\sum_{i \le k} w_i (y_i - p_i)` over rows sorted by probability
    (Arrieta-Ibarra et al., JMLR 2022; the module docstring has the details).

    Args:
        probs: ``[n]`` predicted probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        sample_weight: ``[n]`` non-negative weights (IPS weights included); default ones.

    Returns:
        Scalar ECCE in [0, 1] (NaN inside ``jit`` for invalid inputs).

    Raises:
        ValueError: probabilities outside [0, 1] or non-finite, labels not 0/1, length
            mismatch, empty input, negative or all-zero weights.

    Example:
        >>> from jaxcal.metrics import ecce
        >>> # C = 0, -0.2, -0.2 + 0.2 = 0: range 0.2 / 2 rows
        >>> round(float(ecce([0.2, 0.8], [0, 1])), 6)
        0.1
    """
    return _global(probs, labels, sample_weight)[0]


def ecce_sigma(
    probs: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""ECCE in units of its standard deviation under perfect calibration,
    :math:`\sigma = \sqrt{\sum_i w_i^2 p_i(1-p_i)} / W` (``inf`` if :math:`\sigma = 0` but
    the ECCE is not, 0 if both are). Values above about 2.5 suggest miscalibration.

    Args:
        probs, labels, sample_weight: as in :func:`ecce`.

    Returns:
        Scalar ECCE / sigma.

    Example:
        >>> from jaxcal.metrics import ecce_sigma
        >>> # ECCE 0.1; sigma = sqrt(0.16 + 0.16) / 2
        >>> round(float(ecce_sigma([0.2, 0.8], [0, 1])), 6)
        0.353553
    """
    return _global(probs, labels, sample_weight)[1]


def ecce_pvalue(
    probs: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""p-value of the ECCE under perfect calibration: :math:`P(R \ge \mathrm{ECCE}/\sigma)`
    for :math:`R` the range of a standard Brownian motion on [0, 1] (Kuiper's test; exact
    in the limit of many rows). Computed in log space, so tiny p-values do not round to 0
    before about :math:`10^{-300}`.

    Args:
        probs, labels, sample_weight: as in :func:`ecce`.

    Returns:
        Scalar p-value in [0, 1].

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics import ecce_pvalue
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(0.1, 0.9, 5000)
        >>> float(ecce_pvalue(p, rng.random(5000) < p)) > 0.01  # calibrated
        True
        >>> float(ecce_pvalue(p, rng.random(5000) < p**2)) < 1e-10  # over-confident
        True
    """
    return _global(probs, labels, sample_weight)[2]
