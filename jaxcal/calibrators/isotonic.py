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
from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._native import pav_cpu_available, pav_fitted_cpu, pav_runs_cpu
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_groups, check_sample_weight, check_scores
from jaxcal.calibrators._base import FittedCalibrator, maybe_check_scores, prepare_fit
from jaxcal.calibrators._pav import pav

__all__ = ["isotonic_regression", "IsotonicCalibration", "FittedIsotonic", "isotonic_knots"]

_INTERPOLATIONS = ("linear", "step")
_UNROLL_STEPS = 5  # binary searches over fewer than 32 edges are unrolled (faster to compile)
MIN_KNOTS = 1024  # knot tables of predict programs hold at least this many entries


def _pad_top(x, y, w, group, size: int, increasing: bool):
    """Pad to ``size`` with zero-weight copies of the top score (the largest, or the smallest
    for a decreasing fit): exact, since a zero-weight point tied with the top run changes no
    run sum and no run count. Host-side (NumPy)."""
    top = int(np.argmax(x) if increasing else np.argmin(x))
    fills = [x[top], 0.0, 0.0] + ([] if group is None else [group[top]])
    arrays = [x, y, w] + ([] if group is None else [group])
    out = _shapes.pad_rows(size, *arrays, fills=fills)
    return (*out[:3], None if group is None else out[3])


def _check_bounds(y_min, y_max) -> None:
    for name, v in (("y_min", y_min), ("y_max", y_max)):
        if v is not None and not _shapes.is_traced(v) and not np.all(np.isfinite(np.asarray(v))):
            raise ValueError(f"{name} must be finite or None; got {v!r}.")
    if (
        y_min is not None
        and y_max is not None
        and not _shapes.is_traced(y_min, y_max)
        and np.any(np.asarray(y_min) > np.asarray(y_max))
    ):
        raise ValueError(f"y_min must be <= y_max; got y_min={y_min!r} > y_max={y_max!r}.")


def eager_kernel(native: bool) -> str:
    """The PAV implementation for a program compiled by an eager call (arrays on the default
    device): ``"cpu"`` (the compiled kernel alone: the merge tree is not even traced) where
    the kernel is available and the default backend is a CPU, else ``"portable"``."""
    return "cpu" if native and jax.default_backend() == "cpu" else "portable"


def _pav_or_kernel(kernel: str, cpu, portable, *args):
    """``cpu(*args)`` or ``portable(*args)``; ``"auto"`` lets ``platform_dependent`` pick per
    program (inside a caller's ``jit``, whose backend is known only at lowering)."""
    if kernel == "cpu":
        return cpu(*args)
    if kernel == "auto":
        return lax.platform_dependent(*args, cpu=cpu, default=portable)
    return portable(*args)


@functools.partial(jit, static_argnames=("has_group", "kernel"))
def _pav_fitted(x, y, w, group, increasing, lo, hi, *, has_group: bool, kernel: str):
    """The fitted values only, clipped to ``[lo, hi]`` (XLA then drops the run-level
    outputs that ``isotonic_regression`` does not return: ~25% less time at 1e6 points).
    ``increasing`` and the bounds are traced, so they share one compilation per shape.

    ``kernel``: ``"cpu"`` (the compiled sequential PAV of ``jaxcal._native``),
    ``"portable"`` (the merge tree) or ``"auto"`` (the kernel in programs compiled for a CPU,
    the merge tree elsewhere)."""
    u = jnp.where(increasing, x, -x)
    g = group if has_group else None

    def portable(u, y, w, g):
        return pav(u, y, w, g).fitted

    fitted = _pav_or_kernel(kernel, pav_fitted_cpu, portable, u, y, w, g)
    return jnp.clip(fitted, lo, hi)


@functools.partial(jit, static_argnames=("kernel",))
def pav_runs(x, y, w, increasing, *, kernel: str):
    """The run-level result of one problem, what the knots of a fitted calibrator need:
    ``(run_x, run_weight, run_value, block_start, n_runs)`` (no per-point outputs), valid
    for the first ``n_runs`` entries. ``kernel`` as in ``_pav_fitted``."""
    u = jnp.where(increasing, x, -x)

    def portable(u, y, w):
        r = pav(u, y, w)
        return r.run_x, r.run_weight, r.run_value, r.block_start, r.n_runs.astype(jnp.int32)

    def cpu(u, y, w):
        *runs, n_runs = pav_runs_cpu(u, y, w)
        if kernel == "auto":  # both branches must return the merge tree's run arrays
            extra = (1 << max(int(u.shape[0] - 1).bit_length(), 0)) - u.shape[0]
            runs = [jnp.pad(a, (0, extra), constant_values=i == 3) for i, a in enumerate(runs)]
        return (*runs, n_runs)

    return _pav_or_kernel(kernel, cpu, portable, u, y, w)


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
    native = pav_cpu_available()
    if _shapes.is_traced(x, y, sample_weight, group):
        x = jnp.asarray(x)
        y = jnp.asarray(y, x.dtype)
        w = jnp.ones_like(y) if sample_weight is None else jnp.asarray(sample_weight, y.dtype)
        lo = jnp.asarray(-jnp.inf if y_min is None else y_min, y.dtype)
        hi = jnp.asarray(jnp.inf if y_max is None else y_max, y.dtype)
        has_group = group is not None
        return _pav_fitted(
            x,
            y,
            w,
            group if has_group else jnp.zeros((), jnp.int32),
            jnp.asarray(bool(increasing)),
            lo,
            hi,
            has_group=has_group,
            kernel="auto" if native else "portable",
        )
    x = check_scores(x, name="x")
    n = x.shape[0]
    y = check_scores(y, name="y")
    if y.shape[0] != n:
        raise ValueError(f"length mismatch: {n} x values but {y.shape[0]} y values.")
    w = check_sample_weight(sample_weight, n)
    if group is not None:
        group = check_groups(group, n)
    size = _shapes.padded_size(n)
    x, y, w, group = _pad_top(x, y, w, group, size, bool(increasing))
    dtype = jnp.result_type(float)
    lo, hi = (_bound(v, fill, n, size, dtype) for v, fill in ((y_min, -np.inf), (y_max, np.inf)))
    has_group = group is not None
    out = _pav_fitted(
        *(jax.device_put(np.asarray(a, dtype)) for a in (x, y, w)),
        jax.device_put(group) if has_group else np.zeros((), np.int32),
        np.asarray(bool(increasing)),
        lo,
        hi,
        has_group=has_group,
        kernel=eager_kernel(native),
    )
    return _shapes.unpad(out, n)


def _bound(v, default: float, n: int, size: int, dtype):
    """A clipping bound for the padded eager call: a scalar of ``dtype``, a per-point bound
    padded to ``size`` (its last value), or a tracer passed through."""
    if v is None:
        return np.asarray(default, dtype)
    if _shapes.is_traced(v):
        return v
    arr = np.asarray(v, dtype)
    if arr.ndim == 0:
        return arr
    arr = np.broadcast_to(arr, (n,))
    return _shapes.pad_axis(arr, size, arr[-1])


def isotonic_knots(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, *, increasing: bool = True, centred: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(u, v)`` of the fitted isotonic map, ``u = x`` (or ``-x`` if decreasing).

    Runs the jitted PAV (on the points padded to their bucket size, see ``jaxcal._shapes``),
    then (on the host, eagerly) keeps each block's first and last score
    (the thresholds scikit-learn keeps) or, with ``centred=True``, one knot per block at its
    weighted mean score with the first / last block at the data minimum / maximum (CIR).
    ``u`` is strictly increasing and ``v`` non-decreasing.
    """
    keep = w > 0  # as scikit-learn: zero-weight points neither move the fit nor add knots
    x, y, w = x[keep], y[keep], w[keep]
    x, y, w, _ = _pad_top(x, y, w, None, _shapes.padded_size(x.shape[0]), increasing)
    dtype = jnp.result_type(float)
    run_x, run_w, run_v, run_start, n_runs = jax.device_get(
        pav_runs(
            *(jax.device_put(np.asarray(a, dtype)) for a in (x, y, w)),
            np.asarray(bool(increasing)),
            kernel=eager_kernel(pav_cpu_available()),
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


def searchsorted(edges: jax.Array, x: jax.Array, *, side: str = "right") -> jax.Array:
    """``jnp.searchsorted(edges, x, side=side)`` for sorted ``edges``: how many edges are
    ``<= x`` (``"right"``) or ``< x`` (``"left"``), for every ``x``. A branch-free binary
    search, ``ceil(log2(K + 1))`` steps of one gather in a ``fori_loop`` (unrolled for small
    tables), which XLA compiles faster than ``jnp.searchsorted`` and runs as fast. Plain
    comparisons (``-0.0`` ties ``0.0``, as in NumPy)."""
    edges = jnp.asarray(edges)
    k = edges.shape[0]
    count = jnp.zeros(jnp.shape(x), jnp.int32)
    if k == 0:
        return count
    below = jnp.less_equal if side == "right" else jnp.less
    top = 1 << (k.bit_length() - 1)

    def body(i, lo):
        cand = lo + jnp.right_shift(top, i)
        ok = (cand <= k) & below(edges[jnp.minimum(cand, k) - 1], x)
        return jnp.where(ok, cand, lo)

    steps = k.bit_length()
    return lax.fori_loop(0, steps, body, count, unroll=steps <= _UNROLL_STEPS)


def _scan_cpu(op, x: jax.Array, init: jax.Array, reverse: bool) -> jax.Array:
    return lax.scan(lambda c, v: (op(c, v),) * 2, init, x, reverse=reverse)[1]


def cumsum(x: jax.Array) -> jax.Array:
    """Inclusive prefix sum of a 1-D array (``jnp.cumsum``). CPU programs add in order
    (``np.cumsum``'s rounding) in one ``lax.scan``, which XLA compiles in a third of the time
    of ``jnp.cumsum``'s window tree and runs at least as fast; other backends keep
    ``jnp.cumsum`` (a sequential loop is slow on an accelerator)."""
    return lax.platform_dependent(
        x, cpu=lambda x: _scan_cpu(jnp.add, x, jnp.zeros((), x.dtype), False), default=jnp.cumsum
    )


def cummax(x: jax.Array, *, reverse: bool = False) -> jax.Array:
    """Inclusive prefix maximum of a 1-D array (``lax.cummax``); as :func:`cumsum`, a
    ``lax.scan`` in CPU programs."""
    return lax.platform_dependent(
        x,
        cpu=lambda x: _scan_cpu(jnp.maximum, x, x[-1 if reverse else 0], reverse),
        default=lambda x: lax.cummax(x, reverse=reverse),
    )


def interpolate(u: jax.Array, knots_x: jax.Array, knots_y: jax.Array) -> jax.Array:
    """Linear interpolation through the knots, constant beyond the first and last one.

    ``knots_x`` is non-decreasing with at least one knot; repeated knots (the padding of
    :func:`padded_knots`) are never interpolated across. At and beyond a knot the value is
    the knot's own (``jnp.interp`` may differ there by one rounding)."""
    hi = jnp.minimum(searchsorted(knots_x, u), knots_x.shape[0] - 1)
    lo = jnp.maximum(hi - 1, 0)
    x0, y0 = knots_x[lo], knots_y[lo]
    dx = knots_x[hi] - x0
    f = jnp.where(dx > 0, y0 + ((u - x0) / jnp.where(dx > 0, dx, 1)) * (knots_y[hi] - y0), y0)
    f = jnp.where(u <= knots_x[0], knots_y[0], f)
    return jnp.where(u >= knots_x[-1], knots_y[-1], f)


def padded_knots(*arrays) -> list:
    """Knot arrays (host copies) padded by repeating the last knot (exact for
    :func:`interpolate` and for a right-continuous step map) to their bucket size, and to at
    least ``MIN_KNOTS``: the knot count depends on the data, and a predict program then
    compiles once for all calibrators with up to ``MIN_KNOTS`` knots (a binary search over
    them takes 10 steps), then once per bucket."""
    host = [np.asarray(a) for a in arrays]
    k = host[0].shape[0]
    size = max(_shapes.padded_size(k), MIN_KNOTS) if _shapes.padding_enabled() else k
    return [_shapes.pad_axis(a, size, a[-1]) for a in host]


@functools.partial(jit, static_argnames=("increasing", "interpolation"))
def _knot_map_core(scores, knots_x, knots_y, *, increasing: bool, interpolation: str):
    u = (scores if increasing else -scores).astype(knots_x.dtype)
    if interpolation == "linear":
        return interpolate(u, knots_x, knots_y)
    idx = searchsorted(knots_x, u) - 1
    return knots_y[jnp.clip(idx, 0, knots_x.shape[0] - 1)]


def knot_map(
    scores: ArrayLike,
    knots_x: jax.Array,
    knots_y: jax.Array,
    *,
    increasing: bool = True,
    interpolation: str = "linear",
) -> jax.Array:
    """A monotone map through knots at validated ``scores`` (any shape): linear between the
    knots (:func:`interpolate`) or the value of the last knot at or below the score
    (``"step"``), in ``u = s`` (or ``-s`` when not ``increasing``). One jitted program on
    scores and knots padded to their bucket sizes (shared by every calibrator whose map is
    given by knots); traced inputs (inside a caller's ``jit``) go straight through."""
    s = maybe_check_scores(scores)
    core = functools.partial(_knot_map_core, increasing=increasing, interpolation=interpolation)
    if _shapes.is_traced(s, knots_x, knots_y):
        return core(jnp.asarray(s), knots_x, knots_y)
    kx, ky = padded_knots(knots_x, knots_y)
    return _shapes.map_padded(lambda u: core(u, kx, ky), s)


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
        return knot_map(
            scores,
            self.knots_x,
            self.knots_y,
            increasing=self.increasing,
            interpolation=self.interpolation,
        )

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
            knots_x=jax.device_put(np.asarray(u, dtype)),
            knots_y=jax.device_put(np.asarray(v, dtype)),
            increasing=bool(self.increasing),
            interpolation=self.interpolation,
        )
