r"""Isotonic regression in native JAX: the functional core and ``IsotonicCalibration``.

Stable public signatures (other modules build on them; do not change):

.. code-block:: python

    isotonic_regression(x, y, *, sample_weight=None, group=None, increasing=True,
                        y_min=None, y_max=None) -> jax.Array    # [n] fitted values
    IsotonicCalibration(*, increasing=True, interpolation="linear",
                        centered=False, trim=0.0, out_of_bounds="clip",
                        y_min=None, y_max=None).fit(
        scores, labels, *, sample_weight=None, propensity=None, loss="naive")
        -> FittedIsotonic                                    # .predict(scores), .save(path)

``isotonic_regression`` solves, for every group :math:`g` separately,

.. math::  \min_f \sum_i w_i (y_i - f(x_i))^2 \quad \text{s.t. } f \text{ monotone in } x
    \text{ within each group,}\quad y_{\min} \le f \le y_{\max},

exactly, by the weighted pool-adjacent-violators algorithm (Ayer et al. 1955; Barlow et al.
1972): called eagerly on a CPU, the compiled sequential kernel of ``jaxcal._native`` (an
XLA FFI handler), elsewhere and on tracers the pure-JAX merge tree of
``jaxcal.fitting.pav``, which runs inside ``jit`` (on CPU, GPU, TPU), under ``vmap``,
differentiates (a ``jax.custom_jvp``: the tangent of a block's value is the weighted
block average of the targets' tangents) and exports with ``jax.export``. Tied
scores are pooled (one fitted value per tie class, as in scikit-learn). Clipping after PAV
solves the bounded problem exactly (the clipped isotonic solution is the bounded isotonic
solution). Many independent problems (per field, per rank, per user) are one call with
integer ``group`` ids; PAV never pools across groups.

The fit does not depend on the scale of the weights: both PAV paths first divide them by
``2**floor(log2(max w))``, exactly (``jaxcal._weights.normalize_weights``), so
inverse-propensity weights of any size give the same fit as their rescaled copies; weights
below ``2**-1022`` (float32: ``2**-126``) times the largest count as zero. Zero-weight
points do not move the fit, and their fitted value is the fitted map's value at their
score: the linear interpolation between the fitted values of the nearest points with
weight (in the same group), constant beyond the first / last of them, which is what
``IsotonicCalibration``'s ``predict`` (and scikit-learn's ``fit`` + ``transform``) give.
Only equal scores are tied (``-0.0`` ties ``0.0``); scikit-learn also pools scores closer
than its float resolution.

``IsotonicCalibration`` is the calibrator (Zadrozny & Elkan 2002): isotonic regression of the
loss-weighting targets ``t`` with weights ``w`` (``jaxcal.losses``; ``t = Y`` for the
naive loss, ``Y / omega`` for IPS), clipped to [0, 1]; optional trimming to
``[delta, 1 - delta]`` (Borisov et al. 2018 use ``delta = 0.01``). Prediction is the step
function of the fitted blocks or the linear interpolation between block end points
(scikit-learn's ``IsotonicRegression.predict``); scores outside the training range get the
end values (``out_of_bounds="clip"``), NaN (``"nan"``) or raise (``"raise"``).
``increasing="auto"`` picks the direction by the sign of the (weighted) Spearman
correlation of scores and targets (:func:`check_increasing`).

``centered=True`` is centred isotonic regression (CIR; Oron & Flournoy, "Centered isotonic
regression: point and interval estimation for dose-response studies", Statistics in
Biopharmaceutical Research 9, 2017), as the authors' R package ``cir`` computes it
(``cirPAVA`` with its defaults): PAV pools strict violators *and ties*, so every level set
of the isotonic fit (a maximal stretch of scores with one fitted value) is one block; each
block becomes one knot :math:`(\bar s_B, \bar t_B)` at its weighted mean score

.. math::  \bar s_B = \frac{\sum_{i \in B} w_i s_i}{\sum_{i \in B} w_i},

and the map interpolates linearly between the knots. Two exceptions keep flat stretches:
a block whose value is exactly 0 or 1 (a bound of the probability) keeps knots at its first
and last score rather than its centre, and the map is extended flat from the first block's
knot down to the training minimum and from the last block's knot up to the training maximum
(knots there with the end values). So the map is strictly increasing between those flat
ends and never ties two distinct scores there; at the training points it is no longer the
least-squares fit. Knot values are then clipped to the probability range (``trim``,
``y_min``, ``y_max``); scores outside the training range follow ``out_of_bounds`` (the
package refuses them; ``"clip"`` gives its constant extension).

On tracers ``IsotonicCalibration.fit`` is the pure fit (``jaxcal.calibrators._base``):
knots ``[n]`` (``[2 n + 2]`` centred) padded by repeating the last one, differentiable in
the scores, labels, weights and propensities; ``out_of_bounds="raise"`` gives NaN there
for scores outside the training range, and ``increasing="auto"`` computes the sign of the
weighted Spearman correlation in the program (:func:`increasing_pure`) and fits in that
direction: the fitted map's ``increasing`` is then ``"auto"`` and its ``sign`` leaf (+1 or
-1) holds the direction (docs/nonparametric.md, "Inside jit, vmap and grad").

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> scores = rng.normal(size=1000)
    >>> labels = (rng.uniform(size=1000) < 1 / (1 + np.exp(-2 * scores))).astype(int)
    >>> cal = jaxcal.IsotonicCalibration().fit(scores, labels)
    >>> probs = cal.predict(scores)
    >>> fitted = jaxcal.isotonic_regression(scores, labels, group=np.arange(1000) % 3)
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxcal._fitdata import FitData, PureFitData
from jaxcal._lazy import lazy_method
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._shapes import is_traced
from jaxcal._validation import check_sample_weight, check_scores
from jaxcal._weights import normalize_weights, normalize_weights_host
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._knots import knot_map, traced_identity_scaling
from jaxcal.calibrators._scaling import (
    ORDER,
    ScoreScaling,
    fit_scaling,
    identity_scaling,
    working_dtype,
)
from jaxcal.fitting.isotonic import (
    check_centered,
    is_float32,
    isotonic_knots,
    isotonic_knots_pure,
    isotonic_regression,
)
from jaxcal.fitting.pav import clip_to_bounds

__all__ = [
    "isotonic_regression",
    "IsotonicCalibration",
    "FittedIsotonic",
    "isotonic_knots",
    "check_increasing",
    "increasing_pure",
]

_INTERPOLATIONS = ("linear", "step")
_OUT_OF_BOUNDS = ("clip", "nan", "raise")


@pytree_dataclass
class FittedIsotonic(FittedCalibrator):
    """A fitted isotonic calibrator: a monotone piecewise-constant / -linear map.

    Attributes:
        knots_x: ``[K]`` strictly increasing knot positions in ``u`` = ``s'`` (or ``-s'`` when
            ``increasing=False``, ``sign * s'`` when ``increasing="auto"``),
            :math:`s' = s\\,2^{-k} - c` the transformed score (``scaling``: the identity
            unless the working precision could not hold the training scores, see
            ``jaxcal.calibrators._scaling``).
        knots_y: ``[K]`` non-decreasing probabilities at the knots (clipped / trimmed).
        increasing: whether the map is non-decreasing in the score (``"auto"`` resolved by
            an eager fit); ``"auto"`` for a fit of ``increasing="auto"`` inside a trace,
            whose direction is data: ``sign``.
        interpolation: ``"linear"`` (between knots) or ``"step"`` (value of the last knot at
            or below the score).
        out_of_bounds: scores outside the training range (the first and last knot) get the
            end values (``"clip"``), NaN (``"nan"``) or raise ``ValueError`` (``"raise"``;
            inside ``jit`` they get NaN).
        scaling: the :class:`~jaxcal.calibrators._scaling.ScoreScaling` applied to the
            scores before the knots are looked up.
        sign: ``None``, or with ``increasing="auto"`` a scalar: +1 where the map is
            non-decreasing, -1 where it is non-increasing (the sign of the weighted
            Spearman correlation, computed in the program).

    The float leaves have the dtype of the scores the map was fitted on (float32 scores:
    float32, also with x64 enabled).

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.4, 0.35, 0.8], np.float32); y = np.array([0, 0, 1, 1])
        >>> fitted = jaxcal.IsotonicCalibration().fit(s, y)
        >>> fitted.knots_x.tolist(), fitted.knots_y.tolist(), fitted.knots_y.dtype
        ([0.1..., 0.35, 0.4..., 0.8...], [0.0, 0.5, 0.5, 1.0], dtype('float32'))
    """

    knots_x: jax.Array
    knots_y: jax.Array
    increasing: bool | str = static_field(default=True)
    interpolation: str = static_field(default="linear")
    out_of_bounds: str = static_field(default="clip")
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)
    sign: jax.Array | None = None

    def _check_loaded(self) -> None:
        if (self.increasing == "auto") != (self.sign is not None):
            raise ValueError("FittedIsotonic has a sign exactly when increasing is 'auto'.")

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Calibrated probabilities (any shape of ``scores``; float32 when the scores are
        float32, else the knots' dtype). Scores outside the training range: see
        ``out_of_bounds``.

        Raises:
            ValueError: on non-finite scores, or scores outside the training range with
                ``out_of_bounds="raise"``.

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
            >>> fitted = jaxcal.IsotonicCalibration(out_of_bounds="nan").fit(s, y)
            >>> fitted.predict(np.array([0.0, 0.6, 1.0])).tolist()
            [nan, 0.75, nan]
        """
        u, increasing = self.scaling.apply(scores), self.increasing
        if self.sign is not None:  # the knots lie in u = sign * s'
            if is_traced(scores, self.sign):
                u, increasing = jnp.asarray(u) * self.sign, True
            else:
                increasing = bool(np.asarray(self.sign) > 0)
        return knot_map(
            u,
            self.knots_x,
            self.knots_y,
            increasing=increasing,
            interpolation=self.interpolation,
            out_of_bounds=self.out_of_bounds,
            float32_out=is_float32(scores),
        )

    @property
    def n_distinct_values(self) -> int:
        """Number of distinct fitted levels (the step function's number of blocks).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
            >>> jaxcal.IsotonicCalibration().fit(s, y).n_distinct_values
            3
        """
        return int(np.unique(np.asarray(self.knots_y)).size)


def _weighted_ranks(v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Mid-ranks in cumulative weight: the weight below ``v_i`` plus half the weight tied
    with it (for equal weights, the usual mid-ranks less 1/2, which no correlation sees)."""
    _, inv = np.unique(v, return_inverse=True)
    total = np.bincount(inv, w)
    return (np.cumsum(total) - total / 2)[inv]


def check_increasing(x: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> bool:
    """Whether ``y`` increases with ``x``: the sign of their Spearman correlation.

    scikit-learn's ``check_increasing`` with weights: the weighted Pearson correlation of
    the weighted mid-ranks (each point's rank is the weight below it plus half the weight
    tied with it), which for equal weights is the Spearman correlation. ``rho >= 0`` means
    increasing, and so does an undefined ``rho`` (``x`` or ``y`` constant: both directions
    fit the same constant; scikit-learn returns False there). As in scikit-learn, a
    ``UserWarning`` says when the 95% confidence interval of ``rho`` from the Fisher
    transform (standard error ``1 / sqrt(n - 3)``) spans zero, with ``n`` the effective
    sample size ``(sum w)^2 / sum w^2`` (the number of points for equal weights; checked
    when ``n > 3`` and ``|rho| < 1``). Zero-weight points do not count.

    Args:
        x: ``[n]`` finite scores.
        y: ``[n]`` finite targets.
        sample_weight: ``[n]`` non-negative weights (default ones).

    Returns:
        True for an increasing relation, False for a decreasing one.

    Raises:
        ValueError: on non-finite, empty or mismatched inputs, or bad weights.

    Example:
        >>> from jaxcal.calibrators.isotonic import check_increasing
        >>> check_increasing([1.0, 2.0, 3.0, 4.0], [0.1, 0.2, 0.3, 0.9])
        True
    """
    xv = check_scores(x, name="x")
    yv = check_scores(y, name="y")
    if yv.shape[0] != xv.shape[0]:
        raise ValueError(f"length mismatch: {xv.shape[0]} x values but {yv.shape[0]} y values.")
    w = normalize_weights_host(check_sample_weight(sample_weight, xv.shape[0]))
    keep = w > 0
    xv, yv, w = xv[keep], yv[keep], w[keep]
    rx, ry = _weighted_ranks(xv, w), _weighted_ranks(yv, w)
    total = w.sum()
    dx = rx - np.dot(w, rx) / total
    dy = ry - np.dot(w, ry) / total
    sxx, syy = np.dot(w, dx * dx), np.dot(w, dy * dy)
    if not (sxx > 0 and syy > 0):
        return True
    rho = float(np.clip(np.dot(w, dx * dy) / math.sqrt(sxx * syy), -1.0, 1.0))
    n_eff = total**2 / np.dot(w, w)
    if abs(rho) < 1.0 and n_eff > 3:
        f = math.atanh(rho)
        se = 1.0 / math.sqrt(n_eff - 3)
        lo, hi = math.tanh(f - 1.96 * se), math.tanh(f + 1.96 * se)
        if np.sign(lo) != np.sign(hi):
            warnings.warn(
                f"the 95% confidence interval [{lo:.3g}, {hi:.3g}] of the Spearman "
                f"correlation ({rho:.3g}) spans zero, so increasing='auto' may have picked "
                f"the wrong direction (increasing={rho >= 0}); pass increasing=True or False.",
                UserWarning,
                stacklevel=2,
            )
    return rho >= 0


def _weighted_ranks_pure(v: jax.Array, w: jax.Array) -> jax.Array:
    """:func:`_weighted_ranks` in JAX (fixed shape: zero weights add nothing to a rank)."""
    n = v.shape[0]
    order = jnp.argsort(v)
    vs = v[order]
    tie_class = jnp.cumsum(jnp.concatenate([jnp.ones(1, bool), vs[1:] != vs[:-1]])) - 1
    total = jax.ops.segment_sum(w[order], tie_class, num_segments=n)
    return jnp.zeros_like(v).at[order].set((jnp.cumsum(total) - total / 2)[tie_class])


def increasing_pure(
    x: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None
) -> jax.Array:
    """:func:`check_increasing` in JAX, for possibly traced inputs: a boolean scalar, True
    where the weighted Spearman correlation of ``x`` and ``y`` is ``>= 0`` or undefined.

    The same ranks, sums and rule as :func:`check_increasing` (so the same direction, but
    for correlations within rounding of zero, where the order of the sums decides), without
    the warning about its confidence interval (nothing can warn inside a trace) and without
    input checks: non-finite inputs give a meaningless direction (the pure fits make such
    data NaN). The direction is piecewise constant in the data: no derivative flows
    through it.

    Args:
        x: ``[n]`` scores.
        y: ``[n]`` targets.
        sample_weight: ``[n]`` non-negative weights (default ones; zero weights do not count).

    Returns:
        A boolean scalar (batched under ``vmap``).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from jaxcal.calibrators.isotonic import increasing_pure
        >>> x = jnp.array([0.1, 0.4, 0.35, 0.8]); y = jnp.array([1.0, 0.0, 1.0, 0.0])
        >>> bool(jax.jit(increasing_pure)(x, y))
        False
    """
    x = lax.stop_gradient(jnp.asarray(x))
    y = lax.stop_gradient(jnp.asarray(y)).astype(x.dtype)
    w = jnp.ones_like(x) if sample_weight is None else jnp.asarray(sample_weight).astype(x.dtype)
    w = normalize_weights(lax.stop_gradient(w))
    rx, ry = _weighted_ranks_pure(x, w), _weighted_ranks_pure(y, w)
    total = jnp.sum(w)
    dx = rx - jnp.dot(w, rx) / total
    dy = ry - jnp.dot(w, ry) / total
    sxx, syy = jnp.dot(w, dx * dx), jnp.dot(w, dy * dy)
    defined = (sxx > 0) & (syy > 0)
    rho = jnp.dot(w, dx * dy) / jnp.sqrt(jnp.where(defined, sxx * syy, 1.0))
    return ~defined | (rho >= 0)


def isotonic_map(
    scores: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    *,
    increasing: bool | str = True,
    interpolation: str = "linear",
    centered: bool = False,
    out_of_bounds: str = "clip",
    lo: float = -np.inf,
    hi: float = np.inf,
    what: str = "IsotonicCalibration",
    dtype=None,
) -> FittedIsotonic:
    """The fitted isotonic map of real-valued ``targets`` (validated float64 host arrays),
    knots clipped to ``[lo, hi]``: ``IsotonicCalibration.fit`` after its input checks and
    loss weighting (which then clips to probabilities). ``increasing="auto"`` is resolved
    here (:func:`check_increasing`). The scores are first transformed exactly into what
    ``dtype`` holds (default: JAX's default float; ``jaxcal.calibrators._scaling``), the
    dtype of the fitted leaves.

    Example:
        >>> import numpy as np
        >>> from jaxcal.calibrators.isotonic import isotonic_map
        >>> s, t = np.array([0.1, 0.4, 0.35, 0.8]), np.array([0.0, 0.0, 1.0, 1.0])
        >>> isotonic_map(s, t, np.ones(4), interpolation="step").predict(s).tolist()
        [0.0, 0.5, 0.5, 1.0]
    """
    scaling, scores = fit_scaling(scores, weights, shift=True, kind=ORDER, what=what, dtype=dtype)
    if isinstance(increasing, str):
        increasing = check_increasing(scores, targets, weights)
    u, v = isotonic_knots(scores, targets, weights, increasing=bool(increasing), centred=centered)
    v = np.clip(v, lo, hi)
    dtype = working_dtype() if dtype is None else dtype
    return FittedIsotonic(
        knots_x=jax.device_put(np.asarray(u, dtype)),
        knots_y=jax.device_put(np.asarray(v, dtype)),
        increasing=bool(increasing),
        interpolation=interpolation,
        out_of_bounds=out_of_bounds,
        scaling=scaling,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class IsotonicCalibration(Calibrator[FittedIsotonic]):
    """Isotonic-regression calibration (Zadrozny & Elkan 2002), exact weighted PAV in JAX;
    ``fit`` returns a :class:`FittedIsotonic`.

    Args:
        increasing: map non-decreasing (True) or non-increasing (False) in the score, or
            ``"auto"``: the sign of the weighted Spearman correlation of scores and targets
            (:func:`check_increasing`; warns when its confidence interval spans zero;
            inside a trace :func:`increasing_pure`, the same sign without the warning).
        interpolation: ``"linear"`` (scikit-learn's prediction) or ``"step"``.
        centered: centred isotonic regression (CIR, Oron & Flournoy 2017; module
            docstring): one knot per PAV level set at its weighted mean score, linearly
            interpolated, so the map is strictly increasing between its flat ends and no
            two distinct scores there are tied. Its training-point fit is no longer the
            least-squares optimum. Needs ``interpolation="linear"``.
        trim: clip probabilities to ``[trim, 1 - trim]`` (0 = only to [0, 1]); Borisov et
            al. (2018) use 0.01 so that log-likelihoods stay finite.
        out_of_bounds: what ``predict`` does with scores outside the training range (of the
            points with positive weight): ``"clip"`` (the end values; the default),
            ``"nan"`` or ``"raise"`` (``ValueError``; NaN inside ``jit``, where nothing can
            raise). scikit-learn's default is ``"nan"``.
        y_min: optional lower bound of the probabilities (with ``trim`` and 0, the
            largest applies).
        y_max: optional upper bound of the probabilities (with ``1 - trim`` and 1, the
            smallest applies).

    Raises:
        ValueError: an invalid hyperparameter, or bounds that leave no probability, when
            the calibrator is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
        >>> jaxcal.IsotonicCalibration(interpolation="step").fit(s, y).predict(s)
        Array([0. , 0.5, 0.5, 1. ], dtype=float32)
        >>> jaxcal.IsotonicCalibration(trim=0.5)
        Traceback (most recent call last):
        ...
        ValueError: trim must lie in [0, 0.5); got 0.5.
    """

    increasing: bool | str = True
    interpolation: str = "linear"
    centered: bool = False
    trim: float = 0.0
    out_of_bounds: str = "clip"
    y_min: float | None = None
    y_max: float | None = None
    # the fit from counts by distinct score, for data that streams or spans processes
    fit_counts = lazy_method("jaxcal.calibrators.isotonic_counts", "fit_counts")

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _bounds(self) -> tuple[float, float]:
        """The probability range ``[lo, hi]`` of the knots (checked non-empty)."""
        lo = max(float(self.trim), -np.inf if self.y_min is None else float(self.y_min))
        hi = min(1.0 - float(self.trim), np.inf if self.y_max is None else float(self.y_max))
        lo, hi = max(lo, 0.0), min(hi, 1.0)
        if lo > hi:
            raise ValueError(
                f"y_min={self.y_min!r}, y_max={self.y_max!r} and trim={self.trim!r} leave no "
                f"probability: the bounds are [{lo:.6g}, {hi:.6g}]."
            )
        return lo, hi

    def _check_hyperparameters(self) -> None:
        if not (isinstance(self.increasing, bool | np.bool_) or self.increasing == "auto"):
            raise ValueError(f"increasing must be True, False or 'auto'; got {self.increasing!r}.")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {_INTERPOLATIONS}; got {self.interpolation!r}."
            )
        trim = self.trim
        if not (isinstance(trim, int | float | np.number) and not isinstance(trim, bool)):
            trim = np.nan
        if not (np.isfinite(trim) and 0.0 <= trim < 0.5):
            raise ValueError(f"trim must lie in [0, 0.5); got {self.trim!r}.")
        check_centered(self.centered)
        if self.centered and self.interpolation == "step":
            raise ValueError("centered=True needs interpolation='linear' (a step map ties scores).")
        if self.out_of_bounds not in _OUT_OF_BOUNDS:
            raise ValueError(
                f"out_of_bounds must be one of {_OUT_OF_BOUNDS}; got {self.out_of_bounds!r}."
            )
        for name in ("y_min", "y_max"):
            v = getattr(self, name)
            if v is not None and (
                isinstance(v, bool)
                or not isinstance(v, int | float | np.number)
                or not np.isfinite(v)
            ):
                raise ValueError(f"{name} must be a finite number or None; got {v!r}.")
        if self.y_min is not None and self.y_max is not None and self.y_min > self.y_max:
            raise ValueError(f"y_min must be <= y_max; got {self.y_min!r} > {self.y_max!r}.")
        self._bounds()

    def _fit_pure(self, d: PureFitData) -> FittedIsotonic:
        """The pure fit (``jaxcal.calibrators._base``): the merge tree with its derivatives
        (``jaxcal.fitting.pav.pav_differentiable``); knots ``[n]`` (``[2 n + 2]`` centred),
        padded by repeating the last one. ``increasing="auto"``: the direction of
        :func:`increasing_pure` (that of the eager fit), one fit on ``u = sign * s``; the
        fitted map keeps ``increasing="auto"`` and the ``sign`` (a static direction cannot
        come from traced data)."""
        lo, hi = self._bounds()
        sign, increasing = None, self.increasing
        if isinstance(increasing, str):
            up = increasing_pure(d.scores, d.targets, d.weights)
            sign = jnp.where(up, 1.0, -1.0).astype(d.scores.dtype)
            u = d.scores * sign
        else:
            increasing = bool(increasing)
            u = d.scores if increasing else -d.scores
        kx, kv = isotonic_knots_pure(u, d.targets, d.weights, centred=self.centered)
        return FittedIsotonic(
            knots_x=kx,
            knots_y=clip_to_bounds(kv, lo, hi),
            increasing=increasing,
            interpolation=self.interpolation,
            out_of_bounds=self.out_of_bounds,
            scaling=traced_identity_scaling(kx.dtype),
            sign=sign,
        )

    def _fit_in(self, d: FitData, dtype: np.dtype) -> FittedIsotonic:
        """PAV of the loss-weighting targets ``t`` with weights ``w`` (only their ratios
        matter), jitted; the map's knots, in ``dtype`` (the scores')."""
        lo, hi = self._bounds()
        return isotonic_map(
            d.scores,
            d.targets,
            d.weights,
            increasing=self.increasing,
            interpolation=self.interpolation,
            centered=self.centered,
            out_of_bounds=self.out_of_bounds,
            lo=lo,
            hi=hi,
            dtype=dtype,
        )
