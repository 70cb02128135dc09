r"""Isotonic regression in native JAX: the functional core and ``IsotonicCalibration``.

Stable public signatures (other modules build on them; do not change):

.. code-block:: python

    isotonic_regression(x, y, *, sample_weight=None, group=None, increasing=True,
                        y_min=None, y_max=None) -> jax.Array    # [n] fitted values
    IsotonicCalibration(*, increasing=True, interpolation="linear",
                        rank_preserving=False, trim=0.0).fit(
        scores, labels, *, sample_weight=None, propensity=None, loss="naive")
        -> FittedIsotonic                                    # .predict(scores), .save(path)

``isotonic_regression`` solves, for every group :math:`g` separately,

.. math::  \min_f \sum_i w_i (y_i - f(x_i))^2 \quad \text{s.t. } f \text{ monotone in } x
    \text{ within each group,}\quad y_{\min} \le f \le y_{\max},

exactly, by the weighted pool-adjacent-violators algorithm (Ayer et al. 1955; Barlow et al.
1972): in CPU programs the compiled sequential kernel of ``jaxcal._native`` (an XLA FFI
handler), elsewhere the pure-JAX merge tree of ``jaxcal.calibrators._pav``. Neither is a
host callback, so it runs inside ``jit`` (on CPU, GPU, TPU) and under ``vmap``. Tied
scores are pooled (one fitted value per tie class, as in scikit-learn). Clipping after PAV
solves the bounded problem exactly (the clipped isotonic solution is the bounded isotonic
solution). Many independent problems (per field, per rank, per user) are one call with
integer ``group`` ids; PAV never pools across groups.

``IsotonicCalibration`` is the calibrator (Zadrozny & Elkan 2002): isotonic regression of the
loss-weighting targets ``t`` with weights ``w`` (``jaxcal.debias.losses``; ``t = Y`` for the
naive loss, ``Y / omega`` for IPS), clipped to [0, 1]; optional trimming to
``[delta, 1 - delta]`` (Borisov et al. 2018 use ``delta = 0.01``). Prediction is the step
function of the fitted blocks or the linear interpolation between block end points
(scikit-learn's ``IsotonicRegression.predict``); scores outside the training range get the
end values. ``rank_preserving=True`` uses centred isotonic regression (CIR, Oron & Flournoy
2017): one knot per PAV block at the block's weighted mean score (the first and last block at
the training minimum / maximum), linearly interpolated, so the map is *strictly* increasing
on the training range and never ties two distinct scores there.

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
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

import jaxcal.debias.losses  # noqa: F401  (import order: debias before calibrators._base)
from jaxcal._native import pav_cpu_available, pav_fitted_cpu, pav_runs_cpu
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_groups, check_sample_weight, check_scores
from jaxcal.calibrators._base import FittedCalibrator, maybe_check_scores, prepare_fit
from jaxcal.calibrators._pav import pav

__all__ = ["isotonic_regression", "IsotonicCalibration", "FittedIsotonic", "isotonic_knots"]

_INTERPOLATIONS = ("linear", "step")


def _bucket(n: int) -> int:
    """Padded length (next power of two, at least 64): few shapes, so few compilations."""
    return max(64, 1 << max(int(n - 1).bit_length(), 0))


def _pad(x, y, w, group=None):
    """Pad to ``_bucket(n)`` with zero-weight copies of the largest score (exact: a zero
    weight point tied with the top run changes no run sum and no run count)."""
    n = x.shape[0]
    m = _bucket(n) - n
    top = int(np.argmax(x))
    x = np.concatenate([x, np.full(m, x[top])])
    y = np.concatenate([y, np.zeros(m)])
    w = np.concatenate([w, np.zeros(m)])
    if group is not None:
        group = np.concatenate([group, np.full(m, group[top])])
    return x, y, w, group


def _is_traced(*xs) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in xs)


def _check_bounds(y_min, y_max) -> None:
    for name, v in (("y_min", y_min), ("y_max", y_max)):
        if v is not None and not _is_traced(v) and not np.all(np.isfinite(np.asarray(v))):
            raise ValueError(f"{name} must be finite or None; got {v!r}.")
    if (
        y_min is not None
        and y_max is not None
        and not _is_traced(y_min, y_max)
        and np.any(np.asarray(y_min) > np.asarray(y_max))
    ):
        raise ValueError(f"y_min must be <= y_max; got y_min={y_min!r} > y_max={y_max!r}.")


def _unpadded(native: bool) -> bool:
    """Eager calls skip the power-of-two padding when the compiled CPU kernel will run
    (it compiles in well under a second per length; the merge tree takes seconds)."""
    return native and jax.default_backend() == "cpu"


@functools.partial(jax.jit, static_argnames=("has_group", "native"))
def _pav_fitted(x, y, w, group, increasing, lo, hi, *, has_group: bool, native: bool):
    """The fitted values only, clipped to ``[lo, hi]`` (XLA then drops the run-level
    outputs that ``isotonic_regression`` does not return: ~25% less time at 1e6 points).
    ``increasing`` is traced, so both directions share one compilation per shape.

    With ``native``, a program compiled for CPU calls the compiled sequential PAV
    (``jaxcal._native``) and programs for other backends the merge tree."""
    u = jnp.where(increasing, x, -x)
    g = group if has_group else None

    def portable(u, y, w, g):
        return pav(u, y, w, g).fitted

    args = (u, y, w, g)
    fitted = (
        lax.platform_dependent(*args, cpu=pav_fitted_cpu, default=portable)
        if native
        else portable(*args)
    )
    return jnp.clip(fitted, lo, hi)


@functools.partial(jax.jit, static_argnames=("native",))
def _pav_runs(x, y, w, increasing, *, native: bool):
    """The run-level result of one problem, what the knots of a fitted calibrator need:
    ``(run_x, run_weight, run_value, block_start, n_runs)`` (no per-point outputs). With
    ``native``, CPU programs take it from the compiled kernel."""
    u = jnp.where(increasing, x, -x)

    def portable(u, y, w):
        r = pav(u, y, w)
        return r.run_x, r.run_weight, r.run_value, r.block_start, r.n_runs.astype(jnp.int32)

    def cpu(u, y, w):  # padded to the merge tree's power-of-two run arrays
        *runs, n_runs = pav_runs_cpu(u, y, w)
        extra = (1 << max(int(u.shape[0] - 1).bit_length(), 0)) - u.shape[0]
        runs = [jnp.pad(a, (0, extra), constant_values=i == 3) for i, a in enumerate(runs)]
        return (*runs, n_runs)

    args = (u, y, w)
    return lax.platform_dependent(*args, cpu=cpu, default=portable) if native else portable(*args)


def isotonic_regression(
    x: ArrayLike,
    y: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    group: ArrayLike | None = None,
    increasing: bool = True,
    y_min: ArrayLike | None = None,
    y_max: ArrayLike | None = None,
) -> jax.Array:
    r"""Exact weighted isotonic regression of ``y`` on ``x``, per group (functional, jittable).

    Solves :math:`\min_f \sum_i w_i (y_i - f_i)^2` subject to :math:`f_i \le f_j` whenever
    :math:`x_i < x_j` in the same group (:math:`\ge` if ``increasing=False``), tied ``x``
    sharing one value, then clips to ``[y_min, y_max]`` (exact for the bounded problem).
    Weighted PAV, ``O(n log n)``: in CPU programs the compiled sequential kernel
    (``jaxcal._native``, if built), elsewhere the pure-JAX merge tree
    (``jaxcal.calibrators._pav``); ``jax.lax.platform_dependent`` picks per program.

    Called with concrete arrays it validates eagerly (``ValueError``); called on tracers
    (inside ``jit`` or ``vmap``) it trusts its inputs. Under ``vmap`` every batch row is an
    independent problem; grouping by ``group`` is usually faster than ``vmap`` for ragged
    problems (one sort of all points).

    Args:
        x: ``[n]`` finite scores.
        y: ``[n]`` finite targets (any real values, e.g. 0/1 labels or IPS targets).
        sample_weight: ``[n]`` non-negative weights (default ones). Zero-weight points do not
            influence the fit and receive the value of an adjacent block.
        group: ``[n]`` integer group ids (any integers); PAV never pools across groups.
        increasing: fit a non-decreasing (True) or non-increasing (False) function.
        y_min: optional lower bound on the fitted values.
        y_max: optional upper bound on the fitted values.

    Returns:
        ``[n]`` fitted values, in the order of the inputs.

    Raises:
        ValueError: on non-finite / empty / mismatched inputs, negative weights, non-integer
            group ids or ``y_min > y_max`` (concrete inputs only).

    Example:
        >>> import jax.numpy as jnp
        >>> isotonic_regression(jnp.array([1.0, 2.0, 3.0]), jnp.array([1.0, 3.0, 2.0]))
        Array([1. , 2.5, 2.5], dtype=float32)
    """
    if not isinstance(increasing, bool | np.bool_):
        raise ValueError(f"increasing must be True or False; got {increasing!r}.")
    _check_bounds(y_min, y_max)
    n = None
    native = pav_cpu_available()
    if not _is_traced(x, y, sample_weight, group):
        x = check_scores(x, name="x")
        n = x.shape[0]
        y = check_scores(y, name="y")
        if y.shape[0] != n:
            raise ValueError(f"length mismatch: {n} x values but {y.shape[0]} y values.")
        w = check_sample_weight(sample_weight, n)
        if group is not None:
            group = check_groups(group, n)
        if _unpadded(native):
            pass
        elif not increasing:  # pad with the minimum, which is the top of -x
            x, y, w, group = _pad(-x, y, w, group)
            x = -x
        else:
            x, y, w, group = _pad(x, y, w, group)
        dtype = jnp.result_type(float)
        x, y, w = (jax.device_put(np.asarray(a, dtype)) for a in (x, y, w))
        if group is not None:
            group = jax.device_put(group)
    else:
        x = jnp.asarray(x)
        y = jnp.asarray(y, x.dtype)
        w = jnp.ones_like(y) if sample_weight is None else jnp.asarray(sample_weight, y.dtype)
    lo = -jnp.inf if y_min is None else y_min
    hi = jnp.inf if y_max is None else y_max
    lo, hi = jnp.asarray(lo, y.dtype), jnp.asarray(hi, y.dtype)
    has_group = group is not None
    g = group if has_group else jnp.zeros((), jnp.int32)
    out = _pav_fitted(
        x, y, w, g, jnp.asarray(bool(increasing)), lo, hi, has_group=has_group, native=native
    )
    return out if n is None or out.shape[0] == n else out[:n]


def isotonic_knots(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, *, increasing: bool = True, centred: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(u, v)`` of the fitted isotonic map, ``u = x`` (or ``-x`` if decreasing).

    Runs the jitted PAV, then (on the host, eagerly) keeps each block's first and last score
    (the thresholds scikit-learn keeps) or, with ``centred=True``, one knot per block at its
    weighted mean score with the first / last block at the data minimum / maximum (CIR).
    ``u`` is strictly increasing and ``v`` non-decreasing.
    """
    keep = w > 0  # as scikit-learn: zero-weight points neither move the fit nor add knots
    x, y, w = x[keep], y[keep], w[keep]
    native = pav_cpu_available()
    if not _unpadded(native):
        x, y, w, _ = _pad(x if increasing else -x, y, w)
        x = x if increasing else -x
    dtype = jnp.result_type(float)
    run_x, run_w, run_v, run_start, n_runs = jax.device_get(
        _pav_runs(
            *(jnp.asarray(a, dtype) for a in (x, y, w)),
            jnp.asarray(bool(increasing)),
            native=native,
        )
    )
    k = int(n_runs)
    rx = np.asarray(run_x)[:k]
    rv = np.asarray(run_v)[:k]
    rw = np.asarray(run_w)[:k]
    start = np.asarray(run_start)[:k].copy()
    start[0] = True
    block = np.cumsum(start) - 1
    nb = int(block[-1]) + 1
    first = np.flatnonzero(start)
    last = np.r_[first[1:] - 1, k - 1]
    bv = rv[first]
    if not centred:
        u = np.stack([rx[first], rx[last]], 1).ravel()
        v = np.repeat(bv, 2)
        keep = np.r_[True, u[1:] != u[:-1]]
        return u[keep], v[keep]
    bw = np.bincount(block, rw, nb)
    bsum = np.bincount(block, rw * rx, nb)
    plain = np.bincount(block, rx, nb) / np.bincount(block, None, nb)
    centre = np.where(bw > 0, bsum / np.where(bw > 0, bw, 1.0), plain)
    centre = np.clip(centre, rx[first], rx[last])  # rounding guard
    if nb == 1:
        return np.array([rx[0], rx[-1]])[: 1 + (k > 1)], np.repeat(bv, 1 + (k > 1))
    centre[0], centre[-1] = rx[0], rx[-1]
    return centre, bv


@pytree_dataclass
class FittedIsotonic(FittedCalibrator):
    """A fitted isotonic calibrator: a monotone piecewise-constant / -linear map.

    Attributes:
        knots_x: ``[K]`` strictly increasing knot positions in ``u`` = ``s`` (or ``-s`` when
            ``increasing=False``).
        knots_y: ``[K]`` non-decreasing probabilities at the knots (clipped / trimmed).
        increasing: whether the map is non-decreasing in the score.
        interpolation: ``"linear"`` (between knots) or ``"step"`` (value of the last knot at
            or below the score).
    """

    knots_x: jax.Array
    knots_y: jax.Array
    increasing: bool = static_field(default=True)
    interpolation: str = static_field(default="linear")

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Calibrated probabilities; scores outside the knots get the end values."""
        s = jnp.asarray(maybe_check_scores(scores))
        u = s if self.increasing else -s
        u = u.astype(self.knots_x.dtype)
        if self.interpolation == "linear":
            return jnp.interp(u, self.knots_x, self.knots_y)
        idx = jnp.searchsorted(self.knots_x, u, side="right") - 1
        return self.knots_y[jnp.clip(idx, 0, self.knots_x.shape[0] - 1)]

    @property
    def n_distinct_values(self) -> int:
        """Number of distinct fitted levels (the step function's number of blocks)."""
        return int(np.unique(np.asarray(self.knots_y)).size)


@dataclasses.dataclass(frozen=True, kw_only=True)
class IsotonicCalibration:
    """Isotonic-regression calibration (Zadrozny & Elkan 2002), exact weighted PAV in JAX.

    Args:
        increasing: map non-decreasing (True) or non-increasing (False) in the score.
        interpolation: ``"linear"`` (scikit-learn's prediction) or ``"step"``.
        rank_preserving: centred isotonic regression (Oron & Flournoy 2017): strictly
            increasing on the training range, so no two distinct scores in it are tied. Its
            training-point fit is no longer the least-squares optimum.
        trim: clip probabilities to ``[trim, 1 - trim]`` (0 = only to [0, 1]); Borisov et
            al. (2018) use 0.01 so that log-likelihoods stay finite.

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
        >>> jaxcal.IsotonicCalibration(interpolation="step").fit(s, y).predict(s)
        Array([0. , 0.5, 0.5, 1. ], dtype=float32)
    """

    increasing: bool = True
    interpolation: str = "linear"
    rank_preserving: bool = False
    trim: float = 0.0

    def _check_hyper(self) -> None:
        if not isinstance(self.increasing, bool | np.bool_):
            raise ValueError(f"increasing must be True or False; got {self.increasing!r}.")
        if self.interpolation not in _INTERPOLATIONS:
            raise ValueError(
                f"interpolation must be one of {_INTERPOLATIONS}; got {self.interpolation!r}."
            )
        if not (np.isfinite(self.trim) and 0.0 <= self.trim < 0.5):
            raise ValueError(f"trim must lie in [0, 0.5); got {self.trim!r}.")
        if self.rank_preserving and self.interpolation == "step":
            raise ValueError(
                "rank_preserving=True needs interpolation='linear' (a step map ties scores)."
            )

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> FittedIsotonic:
        """Fit on one problem (validated eagerly; PAV runs jitted).

        Args:
            scores: ``[n]`` finite scores.
            labels: ``[n]`` 0/1 labels.
            sample_weight: ``[n]`` non-negative weights.
            propensity: ``[n]`` propensities in (0, 1] for the IPS-type losses.
            loss: loss weighting (``jaxcal.debias.losses``): targets ``t`` and weights ``w``
                of the isotonic regression.

        Returns:
            A :class:`FittedIsotonic`.

        Raises:
            ValueError: on bad inputs or hyperparameters.
        """
        self._check_hyper()
        d = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        u, v = isotonic_knots(
            d.scores,
            d.targets,
            d.weights,
            increasing=bool(self.increasing),
            centred=self.rank_preserving,
        )
        v = np.clip(v, self.trim, 1.0 - self.trim)
        dtype = jnp.result_type(float)
        return FittedIsotonic(
            knots_x=jnp.asarray(u, dtype),
            knots_y=jnp.asarray(v, dtype),
            increasing=bool(self.increasing),
            interpolation=self.interpolation,
        )
