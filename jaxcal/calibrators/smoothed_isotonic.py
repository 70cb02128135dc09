r"""Smoothed isotonic regression (SIR) and the negative-downsampling correction.

SIR (as used for ads CTR calibration, e.g. in the field-aware calibration work of Pan et al.,
WWW 2020, and the industrial practice it describes): sort the scores into ``n_buckets``
equal-frequency buckets, take each bucket's weighted mean score :math:`\bar s_b` and
weighted mean target :math:`\bar t_b`, run weighted isotonic regression across buckets
(weights = bucket weights :math:`W_b`),

.. math::  \hat v = \arg\min_{v_1 \le \dots \le v_B} \sum_b W_b (\bar t_b - v_b)^2,

and predict by linear interpolation of the points :math:`(\bar s_b, \hat v_b)` of the
buckets with positive weight (a bucket left empty by tied scores, or holding only
zero-weight points, has no knot), with
constant extrapolation beyond the first and last bucket. Only the ratios of the weights
matter (they are normalised first, as in ``isotonic_regression``). Bucketing makes the map smooth
and cheap to store (``B`` knots); interpolation between bucket centres removes the
plateaus *between* buckets. Inside a PAV-pooled run of buckets the map is flat; set
``centered=True`` for centred isotonic regression on the buckets (CIR, Oron & Flournoy
2017, as ``jaxcal.IsotonicCalibration(centered=True)``): one knot per level set of the
bucket fit (ties pooled) at its weighted mean score, flat only from the first / last bucket
centre to the first / last such knot and where the fitted value is exactly 0 or 1, strictly
increasing in between.

``negative_downsampling_correction(p, rate)``: a model trained on data in which negatives
were kept with probability ``rate`` predicts :math:`p` = odds-inflated probabilities; the
unbiased probability is (He et al., "Practical lessons from predicting clicks on ads at
Facebook", ADKDD 2014)

.. math::  q = \frac{p}{p + (1 - p)/\mathrm{rate}}.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> s = rng.normal(size=2000)
    >>> y = (rng.uniform(size=2000) < 1 / (1 + np.exp(-s))).astype(int)
    >>> cal = jaxcal.SmoothedIsotonic(n_buckets=50).fit(s, y)
    >>> p = cal.predict(s)
    >>> q = jaxcal.negative_downsampling_correction(0.5, 0.1)   # 0.5 / (0.5 + 5) = 1/11
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import FitData, PureFitData
from jaxcal._jit import jit
from jaxcal._native import pav_cpu_available
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._scan import presort, searchsorted
from jaxcal._validation import check_int, check_probs
from jaxcal._weights import normalize_weights_host
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._knots import knot_map, traced_identity_scaling
from jaxcal.calibrators._scaling import ORDER, ScoreScaling, fit_scaling, identity_scaling
from jaxcal.fitting.isotonic import (
    check_centered,
    cir_knots,
    cir_knots_pure,
    compact,
    eager_kernel,
    pav_runs,
)
from jaxcal.fitting.pav import (
    clip_to_bounds,
    normalize_weights_differentiable,
    pav_differentiable,
)

__all__ = ["SmoothedIsotonic", "FittedSmoothedIsotonic", "negative_downsampling_correction"]


def negative_downsampling_correction(probs: ArrayLike, rate: ArrayLike) -> jax.Array:
    r"""Undo negative downsampling: :math:`q = p / (p + (1 - p) / \mathrm{rate})`.

    Args:
        probs: probabilities predicted by a model trained on downsampled data (any shape).
        rate: the probability with which negatives were kept, in (0, 1] (broadcasts).

    Returns:
        The corrected probabilities, same shape as ``probs``.

    Raises:
        ValueError: if (concrete) ``probs`` lie outside [0, 1] or ``rate`` outside (0, 1].

    Example:
        >>> from jaxcal import negative_downsampling_correction
        >>> negative_downsampling_correction(0.5, 0.1)   # 1/11
        Array(0.0909091, dtype=float32)
    """
    if not isinstance(probs, jax.core.Tracer):
        arr = np.asarray(probs, dtype=np.float64)
        check_probs(arr.reshape(-1), name="probs")
    if not isinstance(rate, jax.core.Tracer):
        r = np.asarray(rate, dtype=np.float64)
        if not np.all(np.isfinite(r)) or np.any(r <= 0) or np.any(r > 1):
            raise ValueError(f"rate must lie in (0, 1] (the negatives' keep rate); got {rate!r}.")
    dtype = jnp.result_type(float)
    if _shapes.is_traced(probs, rate):
        p = jnp.asarray(probs, dtype=dtype)
        rate = jnp.asarray(rate, p.dtype)
    else:  # elementwise: on the host, so that no program is compiled per input shape
        p, rate = np.asarray(probs, dtype), np.asarray(rate, dtype)
    # q = p * rate / (p * rate + 1 - p): the same formula, no division by a small rate
    q = p * rate / (p * rate + 1.0 - p)
    return q if _shapes.is_traced(q) else jax.device_put(np.asarray(q, dtype))


@functools.partial(jit, static_argnames=("n_buckets", "kernel", "presorted"))
def _bucket_stats(s, t, w, n, n_used, *, n_buckets: int, kernel: str, presorted: bool):
    """Equal-frequency buckets (ties kept together) and their weighted statistics.

    ``s, t, w`` hold ``n`` real points, then padding (copies of the largest score with zero
    weight, so the first ``n`` sorted scores are the real ones). The first ``n_used``
    (traced, ``<= n_buckets``) buckets are cut; the others stay empty. The isotonic fit
    across buckets runs on ``kernel`` (see ``jaxcal.calibrators.isotonic``). ``presorted``:
    the points come sorted by score (on CPU the caller sorts them: NumPy's sort takes a
    tenth of the time of XLA's comparator sort)."""
    ss = s if presorted else jnp.sort(s)
    k = jnp.arange(1, n_buckets)
    pos = jnp.minimum((k * n) // n_used, n - 1)
    edges = jnp.where(k < n_used, ss[pos], jnp.inf)  # bucket b: edges[b-1] <= s < edges[b]
    b = searchsorted(edges, s)
    seg = functools.partial(jax.ops.segment_sum, segment_ids=b, num_segments=n_buckets)
    W = seg(w)
    safe = jnp.where(W > 0, W, 1.0)
    ms, mt = seg(w * s) / safe, seg(w * t) / safe
    # isotonic across buckets: bucket index is the order key; buckets without weight move
    # nothing (their values are dropped by the caller)
    _, _, value, _, _ = pav_runs(jnp.arange(n_buckets, dtype=s.dtype), mt, W, True, kernel=kernel)
    return ms, value[:n_buckets], W


def _bucket_stats_pure(s, t, w, n_buckets: int, n_used: int):
    """:func:`_bucket_stats` on ``n`` points without padding (the pure fit): the same
    equal-frequency buckets, their weighted mean scores and targets, and the isotonic fit
    across them (:func:`~jaxcal.fitting.pav.pav_differentiable`)."""
    n = s.shape[0]
    ss = jnp.sort(s)
    k = jnp.arange(1, n_buckets)
    pos = jnp.minimum((k * n) // n_used, n - 1)
    edges = lax.stop_gradient(jnp.where(k < n_used, ss[pos], jnp.inf))
    b = searchsorted(edges, lax.stop_gradient(s))
    seg = functools.partial(jax.ops.segment_sum, segment_ids=b, num_segments=n_buckets)
    W = seg(w)
    safe = jnp.where(W > 0, W, 1.0)
    ms, mt = seg(w * s) / safe, seg(w * t) / safe
    r = pav_differentiable(jnp.arange(n_buckets, dtype=s.dtype), mt, W)
    return ms, r.run_value[:n_buckets], W


@pytree_dataclass
class FittedSmoothedIsotonic(FittedCalibrator):
    """Fitted SIR: a monotone piecewise-linear map through ``(knots_x, knots_y)``.

    Attributes:
        knots_x: ``[K]`` strictly increasing knot scores (bucket or pooled-run centres) of
            the transformed score :math:`s' = s\\,2^{-k} - c` (``scaling``; the identity
            unless the working precision could not hold the training scores,
            ``jaxcal.calibrators._scaling``).
        knots_y: ``[K]`` non-decreasing probabilities at the knots.
        increasing: whether the map is non-decreasing in the score (else knots are in -s').
        scaling: the :class:`~jaxcal.calibrators._scaling.ScoreScaling` of the scores.

    The float leaves have the dtype of the scores the map was fitted on (float32 scores:
    float32, also with x64 enabled).

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 1, 0, 0, 1, 1])
        >>> fitted = jaxcal.SmoothedIsotonic(n_buckets=3).fit(s, y)
        >>> fitted.knots_x.tolist(), fitted.knots_y.tolist()  # bucket means, PAV across them
        ([0.15, 0.35, 0.55], [0.25, 0.25, 1.0])
    """

    knots_x: jax.Array
    knots_y: jax.Array
    increasing: bool = static_field(default=True)
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Linear interpolation between knots; constant beyond the first / last knot.

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 1, 0, 0, 1, 1])
            >>> fitted = jaxcal.SmoothedIsotonic(n_buckets=3).fit(s, y)
            >>> fitted.predict(np.array([0.0, 0.45, 0.9])).tolist()
            [0.25, 0.625, 1.0]
        """
        s = self.scaling.apply(scores)
        return knot_map(s, self.knots_x, self.knots_y, increasing=self.increasing)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SmoothedIsotonic(Calibrator[FittedSmoothedIsotonic]):
    """Smoothed isotonic regression (bucketed PAV + linear interpolation); ``fit`` returns
    a :class:`FittedSmoothedIsotonic`.

    Args:
        n_buckets: number of equal-frequency score buckets (fewer if scores are tied).
        increasing: non-decreasing (True) or non-increasing (False) map.
        centered: centred isotonic regression on the buckets (CIR; module docstring):
            one knot per level set of the bucket fit at its weighted mean score, so the map
            is strictly monotone between its flat ends.

    Raises:
        ValueError: an invalid hyperparameter, when the calibrator is made.

    On tracers ``fit`` is the pure fit (``jaxcal.calibrators._base``): knots
    ``[n_buckets]`` (``[2 n_buckets + 2]`` centred) padded by repeating the last one,
    differentiable for fixed buckets (in the scores through the bucket means, in the
    labels, weights and propensities through the isotonic fit across buckets).

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]); y = np.array([0, 1, 0, 0, 1, 1])
        >>> jaxcal.SmoothedIsotonic(n_buckets=3, centered=True).fit(s, y).knots_x.tolist()
        [0.15, 0.25, 0.55]
        >>> jaxcal.SmoothedIsotonic(n_buckets=0)
        Traceback (most recent call last):
        ...
        ValueError: n_buckets must be an integer >= 1; got 0.
    """

    n_buckets: int = 100
    increasing: bool = True
    centered: bool = False

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _check_hyperparameters(self) -> None:
        check_int(self.n_buckets, "n_buckets", minimum=1)
        if not isinstance(self.increasing, bool | np.bool_):
            raise ValueError(f"increasing must be True or False; got {self.increasing!r}.")
        check_centered(self.centered)

    def _fit_pure(self, d: PureFitData) -> FittedSmoothedIsotonic:
        """The pure fit (``jaxcal.calibrators._base``): the buckets of :meth:`_fit` cut from
        the sorted scores in JAX, the isotonic fit across them by the merge tree with its
        derivatives (``jaxcal.fitting.pav.pav_differentiable``); knots ``[n_buckets]``
        (``[2 n_buckets + 2]`` centred), padded by repeating the last one. Differentiable in
        the scores (through the bucket centres), targets and weights for fixed buckets."""
        u = d.scores if self.increasing else -d.scores
        n = u.shape[0]
        n_buckets = int(self.n_buckets)
        w = normalize_weights_differentiable(d.weights)
        ms, v, W = _bucket_stats_pure(u, d.targets, w, n_buckets, min(n_buckets, n))
        (kx, kv, kw), k = compact(W > 0, n_buckets, ms, v, W)
        if self.centered:
            kx, kv = cir_knots_pure(kx, kw, kv, k)
        return FittedSmoothedIsotonic(
            knots_x=kx,
            knots_y=clip_to_bounds(kv, 0.0, 1.0),
            increasing=bool(self.increasing),
            scaling=traced_identity_scaling(kx.dtype),
        )

    def _fit_in(self, d: FitData, dtype: np.dtype) -> FittedSmoothedIsotonic:
        """Fit SIR on one problem (validated eagerly; bucketing and PAV jitted), in ``dtype``
        (the scores')."""
        scaling, s = fit_scaling(
            d.scores, d.weights, shift=True, kind=ORDER, what="SmoothedIsotonic", dtype=dtype
        )
        u = s if self.increasing else -s
        n = u.shape[0]
        # only the ratios of the weights matter: normalised (largest in [1, 2)) before the
        # bucket sums and a float32 cast can underflow or overflow them
        w = normalize_weights_host(d.weights)
        # the bucket sums do not depend on the order
        presorted, u, t, w = presort(u, d.targets, w)
        padded = _shapes.pad_rows(_shapes.padded_size(n), u, t, w, fills=(u.max(), 0, 0))
        out = _bucket_stats(
            *(np.asarray(a, dtype) for a in padded),  # copied in by the call
            n,
            min(int(self.n_buckets), n),
            n_buckets=int(self.n_buckets),
            kernel=eager_kernel(pav_cpu_available()),
            presorted=presorted,
        )
        ms, v, W = (np.asarray(a) for a in jax.device_get(out))
        # buckets without weight (empty through ties, or of zero-weight points only) have
        # no centre and no target: no knot
        keep = W > 0
        ms, v, W = ms[keep], v[keep], W[keep]
        if self.centered:
            ms, v = cir_knots(ms, np.asarray(W, np.float64), v)
        v = np.clip(v, 0.0, 1.0)
        return FittedSmoothedIsotonic(
            knots_x=jax.device_put(np.asarray(ms, dtype)),
            knots_y=jax.device_put(np.asarray(v, dtype)),
            increasing=bool(self.increasing),
            scaling=scaling,
        )
