r"""Histogram binning (Zadrozny & Elkan 2001): one probability per score bin.

The training scores are cut into ``n_bins`` bins, either of equal width over
``[min s, max s]`` (``strategy="uniform"``) or of equal mass (``strategy="quantile"``: edges
at the ``k / n_bins`` quantiles of the scores; tied scores always share a bin, so a heavily
tied sample can leave some bins empty). Bin :math:`b` predicts the weighted mean target

.. math::  \hat p_b = \frac{\sum_{i \in b} w_i t_i}{\sum_{i \in b} w_i}

(clipped to [0, 1]; ``t``, ``w`` from the loss weighting, ``jaxcal.losses``).

**Empty-bin rule.** A bin with no training weight takes the value of the nearest non-empty
bin (by bin index; a tie between left and right goes to the left one). Unlike a global
prior (the base rate) this keeps a monotone histogram monotone, and it equals the
limit of the weighted mean as the bin is widened to its neighbour. Scores beyond the
training range fall in the first or last bin.

**Inside jit.** On traced inputs (inside a caller's ``jit``, ``vmap`` or ``grad``),
``fit`` is the pure fit (:meth:`~jaxcal.calibrators.Calibrator.fit_pure`): the same edges
and bin values from the same program, on the caller's shapes and dtype, with no host work.
The bin values are smooth functions of the targets and weights (a weighted mean per bin),
so ``jvp`` / ``grad`` with respect to the labels, propensities and weights are exact (a
filled empty bin follows the bin it copies; a value clipped at 0 or 1, as under IPS
targets, is where the map has a kink). The dependence on the training scores is piecewise constant
(which bin a score falls in): its derivative is zero, and so is the derivative of
``predict`` with respect to its scores.

Example:
    >>> import jaxcal, numpy as np
    >>> s = np.array([0.1, 0.2, 0.6, 0.9]); y = np.array([0, 1, 1, 1])
    >>> jaxcal.HistogramBinning(n_bins=2, strategy="uniform").fit(s, y).predict(s)
    Array([0.5, 0.5, 1. , 1. ], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import FitData, PureFitData, maybe_check_scores
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass
from jaxcal._scan import presort, searchsorted
from jaxcal._validation import check_int
from jaxcal.calibrators._base import Calibrator, FittedCalibrator, check_choice
from jaxcal.calibrators._scaling import (
    ORDER,
    ScoreScaling,
    fit_scaling,
    identity_scaling,
    pure_identity_scaling,
)

__all__ = ["HistogramBinning", "FittedHistogram", "histogram_edges", "fill_empty_bins"]

_STRATEGIES = ("uniform", "quantile")


def histogram_edges(
    scores: jax.Array,
    n_bins: int,
    strategy: str,
    *,
    n: ArrayLike | None = None,
    presorted: bool = False,
) -> jax.Array:
    """``[n_bins - 1]`` inner bin edges; bin ``b`` is ``edges[b-1] <= s < edges[b]``.

    ``n``: the number of real scores (traced, default all); the scores after them are
    padding, which must not lie below any real score (copies of the largest one), so that
    the edges are those of the first ``n`` scores. ``presorted``: the scores are sorted
    (the quantile edges then need no sort in the program).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators.histogram import histogram_edges
        >>> histogram_edges(jnp.array([0.0, 1.0, 2.0, 4.0]), 2, "uniform")
        Array([2.], dtype=float32)
        >>> histogram_edges(jnp.array([0.0, 1.0, 2.0, 4.0]), 2, "quantile")
        Array([2.], dtype=float32)
    """
    n = scores.shape[0] if n is None else n
    if strategy == "uniform":
        lo, hi = jnp.min(scores), jnp.max(scores)
        return lo + (hi - lo) * jnp.arange(1, n_bins, dtype=scores.dtype) / n_bins
    ss = scores if presorted else jnp.sort(scores)
    pos = (jnp.arange(1, n_bins) * n) // n_bins
    return ss[pos]


def fill_empty_bins(value: jax.Array, filled: jax.Array) -> jax.Array:
    """Replace entries where ``filled`` is False by the nearest filled entry (left on ties).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators.histogram import fill_empty_bins
        >>> value = jnp.array([0.1, 0.0, 0.0, 0.0, 0.9])
        >>> fill_empty_bins(value, jnp.array([True, False, False, False, True]))
        Array([0.1, 0.1, 0.1, 0.9, 0.9], dtype=float32)
    """
    idx = jnp.arange(value.shape[0])
    left = jax.lax.cummax(jnp.where(filled, idx, -1))
    right = jax.lax.cummin(jnp.where(filled, idx, value.shape[0]), reverse=True)
    dl = jnp.where(left >= 0, idx - left, jnp.iinfo(jnp.int32).max)
    dr = jnp.where(right < value.shape[0], right - idx, jnp.iinfo(jnp.int32).max)
    src = jnp.where(dl <= dr, left, right)
    return jnp.where(filled, value, value[jnp.clip(src, 0, value.shape[0] - 1)])


def padded_steps(edges: ArrayLike, values: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """Host copies of a step map's table (``[K]`` sorted edges, ``[K + 1]`` values) padded to
    the bucket size of ``K`` (``jaxcal._shapes``): edges with ``+inf`` (never at or below a
    finite score), values with the last value. A predict program then compiles once per
    bucket of table sizes.

    Example:
        >>> import numpy as np
        >>> from jaxcal.calibrators.histogram import padded_steps
        >>> e, v = padded_steps(np.array([0.5]), np.array([0.2, 0.8]))
        >>> bool(np.all(e[1:] == np.inf)), float(v[-1])
        (True, 0.8)
    """
    e, v = np.asarray(edges), np.asarray(values)
    size = _shapes.padded_size(e.shape[0])
    return _shapes.pad_axis(e, size, np.inf), _shapes.pad_axis(v, size + 1, v[-1])


@jit
def _step_map_core(scores, edges, values):
    return values[searchsorted(edges, scores.astype(edges.dtype))]


def step_map(scores: ArrayLike, edges: jax.Array, values: jax.Array) -> jax.Array:
    """The right-continuous step map ``values[#(edges <= s)]`` at validated ``scores`` (any
    shape): one jitted program on scores and table padded to their bucket sizes; traced
    inputs (inside a caller's ``jit``) go straight through, and a non-finite traced score
    gives NaN (it cannot raise there).

    Example:
        >>> import jax.numpy as jnp, numpy as np
        >>> from jaxcal.calibrators.histogram import step_map
        >>> step_map(np.array([0.1, 0.5, 0.9]), jnp.array([0.5]), jnp.array([0.2, 0.8]))
        Array([0.2, 0.8, 0.8], dtype=float32)
    """
    s = maybe_check_scores(scores)
    if _shapes.is_traced(s, edges, values):
        s = jnp.asarray(s)
        out = _step_map_core(s, edges, values)
        return jnp.where(jnp.isfinite(s), out, jnp.nan)
    e, v = padded_steps(edges, values)
    return _shapes.map_padded(lambda x: _step_map_core(x, e, v), s)


@functools.partial(jit, static_argnames=("n_bins", "strategy", "presorted"))
def _fit_histogram(s, t, w, n, *, n_bins: int, strategy: str, presorted: bool):
    """Edges, filled bin values and bin weights; ``presorted``: the points come sorted by
    score (on CPU the caller sorts them: NumPy's sort takes a tenth of the time of XLA's
    comparator sort)."""
    edges = histogram_edges(s, n_bins, strategy, n=n, presorted=presorted)
    b = searchsorted(edges, s)
    W = jax.ops.segment_sum(w, b, num_segments=n_bins)
    T = jax.ops.segment_sum(w * t, b, num_segments=n_bins)
    value = jnp.clip(T / jnp.where(W > 0, W, 1.0), 0.0, 1.0)
    return edges, fill_empty_bins(value, W > 0), W


@pytree_dataclass
class FittedHistogram(FittedCalibrator):
    """Fitted histogram binning.

    Attributes:
        edges: ``[B - 1]`` inner bin edges (non-decreasing), in the transformed score
            :math:`s' = s\\,2^{-k} - c` (``scaling``; the identity unless the working
            precision could not hold the training scores, ``jaxcal.calibrators._scaling``).
        values: ``[B]`` probability of each bin (empty bins filled, see module docstring).
        bin_weight: ``[B]`` total training weight per bin (0 marks a filled empty bin).
        scaling: the :class:`~jaxcal.calibrators._scaling.ScoreScaling` of the scores.

    Every float leaf has the dtype of the training scores.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.1, 0.2, 0.6, 0.9]), np.array([0, 1, 1, 1])
        >>> fitted = jaxcal.HistogramBinning(n_bins=2, strategy="uniform").fit(s, y)
        >>> fitted.values, fitted.bin_weight
        (Array([0.5, 1. ], dtype=float32), Array([2., 2.], dtype=float32))
    """

    edges: jax.Array
    values: jax.Array
    bin_weight: jax.Array
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """The value of the bin each score falls in (ends extend to +-infinity)."""
        return step_map(self.scaling.apply(scores), self.edges, self.values)


@dataclasses.dataclass(frozen=True, kw_only=True)
class HistogramBinning(Calibrator[FittedHistogram]):
    """Histogram binning estimator; ``fit`` returns a :class:`FittedHistogram`.

    Args:
        n_bins: number of bins ``B >= 1``.
        strategy: ``"uniform"`` (equal width) or ``"quantile"`` (equal mass).

    Raises:
        ValueError: ``n_bins`` not an integer >= 1, or an unknown ``strategy``, when it is
            made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> p = rng.uniform(size=2000)
        >>> y = (rng.uniform(size=2000) < p).astype(int)
        >>> cal = jaxcal.HistogramBinning(n_bins=10).fit(p, y)
        >>> cal.values.shape
        (10,)
        >>> jaxcal.HistogramBinning(n_bins=0)
        Traceback (most recent call last):
        ...
        ValueError: n_bins must be an integer >= 1; got 0.
    """

    n_bins: int = 15
    strategy: str = "quantile"

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        check_int(self.n_bins, "n_bins", minimum=1)
        check_choice(self.strategy, "strategy", _STRATEGIES)

    def _fit_in(self, d: FitData, dtype: np.dtype) -> FittedHistogram:
        """Fit on one problem (validated eagerly, jitted core), in ``dtype``."""
        n = d.scores.shape[0]
        scaling, s = fit_scaling(
            d.scores, d.weights, shift=True, kind=ORDER, what="HistogramBinning", dtype=dtype
        )
        # the quantile edges need sorted scores; the bin sums do not depend on the order
        presorted, s, t, w = presort(s, d.targets, d.weights, when=self.strategy == "quantile")
        padded = _shapes.pad_rows(_shapes.padded_size(n), s, t, w, fills=(s.max(), 0, 0))
        edges, values, W = _fit_histogram(
            *(np.asarray(a, dtype) for a in padded),  # copied in by the call
            n,
            n_bins=int(self.n_bins),
            strategy=self.strategy,
            presorted=presorted,
        )
        return FittedHistogram(edges=edges, values=values, bin_weight=W, scaling=scaling)

    def _fit_pure(self, d: PureFitData) -> FittedHistogram:
        """The pure fit: the core of :meth:`_fit` on the caller's arrays (no presort, no
        padding, no score transform)."""
        edges, values, W = _fit_histogram(
            d.scores,
            d.targets,
            d.weights,
            d.scores.shape[0],
            n_bins=int(self.n_bins),
            strategy=self.strategy,
            presorted=False,
        )
        return FittedHistogram(
            edges=edges, values=values, bin_weight=W, scaling=pure_identity_scaling(d.scores.dtype)
        )
