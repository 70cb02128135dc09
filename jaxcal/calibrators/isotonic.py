r"""Isotonic regression in native JAX: the functional core and ``IsotonicCalibration``.

Stable public signatures (other modules build on them; do not change):

.. code-block:: python

    isotonic_regression(x, y, *, sample_weight=None, group=None, increasing=True,
                        y_min=None, y_max=None) -> jax.Array    # [n] fitted values
    IsotonicCalibration(*, increasing=True, interpolation="linear",
                        rank_preserving=False, trim=0.0, out_of_bounds="clip",
                        y_min=None, y_max=None).fit(
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
correlation of scores and targets (:func:`check_increasing`). ``rank_preserving=True`` uses
centred isotonic regression (CIR, Oron & Flournoy 2017): one knot per PAV block at the
block's weighted mean score (the first and last block at the training minimum / maximum),
linearly interpolated, so the map is *strictly* increasing on the training range and never
ties two distinct scores there.

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
import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import FitData, maybe_check_scores
from jaxcal._jit import jit
from jaxcal._native import pav_cpu_available, pav_fitted_cpu, pav_runs_cpu
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._validation import check_groups, check_sample_weight, check_scores
from jaxcal._weights import normalize_weights_host
from jaxcal.calibrators._base import Calibrator, FittedCalibrator
from jaxcal.calibrators._pav import pav

__all__ = [
    "isotonic_regression",
    "IsotonicCalibration",
    "FittedIsotonic",
    "isotonic_knots",
    "check_increasing",
]

_INTERPOLATIONS = ("linear", "step")
_OUT_OF_BOUNDS = ("clip", "nan", "raise")
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
    Both paths normalise the weights and give zero-weight points the interpolated map
    between the clipped values of their neighbours (``jaxcal.calibrators._pav``).

    ``kernel``: ``"cpu"`` (the compiled sequential PAV of ``jaxcal._native``),
    ``"portable"`` (the merge tree) or ``"auto"`` (the kernel in programs compiled for a CPU,
    the merge tree elsewhere)."""
    u = jnp.where(increasing, x, -x)
    g = group if has_group else None

    def portable(u, y, w, g, lo, hi):
        return pav(u, y, w, g, lo, hi).fitted

    return _pav_or_kernel(kernel, pav_fitted_cpu, portable, u, y, w, g, lo, hi)


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
        sample_weight: ``[n]`` non-negative weights (default ones). Only their ratios matter
            (the fit is invariant to multiplying them all by a positive constant; weights
            below ``2**-1022``, float32 ``2**-126``, times the largest count as zero).
            Zero-weight points do not influence the fit; their fitted value is the fitted
            map's value at their score: the linear interpolation between the fitted values
            of the nearest points with weight in their group, constant beyond the first and
            last of them (as ``IsotonicCalibration(...).fit(...).predict`` and
            scikit-learn's ``fit`` + ``transform``), 0 in a group without weight.
        group: ``[n]`` integer group ids (any integers); PAV never pools across groups.
        increasing: fit a non-decreasing (True) or non-increasing (False) function.
        y_min: optional lower bound on the fitted values (a scalar or one per point).
        y_max: optional upper bound on the fitted values (a scalar or one per point).

    Returns:
        ``[n]`` fitted values, in the order of the inputs: float32 when ``x`` is float32
        (with or without x64, as inside ``jit``, where ``y`` takes ``x``'s dtype), else
        JAX's default float dtype.

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
    float32_in = _is_float32(x)
    x = check_scores(x, name="x")
    n = x.shape[0]
    y = check_scores(y, name="y")
    if y.shape[0] != n:
        raise ValueError(f"length mismatch: {n} x values but {y.shape[0]} y values.")
    # normalised on the host too: a cast to float32 (x64 off) would flush or overflow them
    w = normalize_weights_host(check_sample_weight(sample_weight, n))
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
    host = np.asarray(out)[:n]  # sliced (and cast) on the host: no program per size
    return jax.device_put(host.astype(np.float32) if float32_in else host)


def _is_float32(a) -> bool:
    """Whether an input array (NumPy, JAX or a tracer) is float32; lists are not."""
    return getattr(a, "dtype", None) == np.float32


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
    dtype = jnp.result_type(float)
    # only the ratios of the weights matter (normalised, as inside the PAV); as in
    # scikit-learn, zero-weight points (and those below the dtype's smallest normal number
    # after normalising, which PAV treats as zero) neither move the fit nor add knots
    w = normalize_weights_host(np.asarray(w, np.float64))
    keep = w >= np.finfo(dtype).tiny
    x, y, w = x[keep], y[keep], w[keep]
    x, y, w, _ = _pad_top(x, y, w, None, _shapes.padded_size(x.shape[0]), increasing)
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


@functools.partial(
    jit, static_argnames=("increasing", "interpolation", "out_of_bounds", "float32_out")
)
def _knot_map_core(
    scores,
    knots_x,
    knots_y,
    *,
    increasing: bool,
    interpolation: str,
    out_of_bounds: str,
    float32_out: bool,
):
    u = (scores if increasing else -scores).astype(knots_x.dtype)
    if interpolation == "linear":
        f = interpolate(u, knots_x, knots_y)
    else:
        idx = searchsorted(knots_x, u) - 1
        f = knots_y[jnp.clip(idx, 0, knots_x.shape[0] - 1)]
    if out_of_bounds != "clip":  # "nan"; "raise" has raised eagerly, or gives NaN in jit
        f = jnp.where((u < knots_x[0]) | (u > knots_x[-1]), jnp.nan, f)
    return f.astype(jnp.float32) if float32_out else f


def knot_map(
    scores: ArrayLike,
    knots_x: jax.Array,
    knots_y: jax.Array,
    *,
    increasing: bool = True,
    interpolation: str = "linear",
    out_of_bounds: str = "clip",
    float32_out: bool = False,
) -> jax.Array:
    """A monotone map through knots at validated ``scores`` (any shape): linear between the
    knots (:func:`interpolate`) or the value of the last knot at or below the score
    (``"step"``), in ``u = s`` (or ``-s`` when not ``increasing``). One jitted program on
    scores and knots padded to their bucket sizes (shared by every calibrator whose map is
    given by knots); traced inputs (inside a caller's ``jit``) go straight through.

    Scores beyond the first / last knot get the end values (``out_of_bounds="clip"``), NaN
    (``"nan"``), or raise ``ValueError`` (``"raise"``; NaN for traced scores, which cannot
    raise). ``float32_out`` rounds the result to float32."""
    s = maybe_check_scores(scores)
    if out_of_bounds == "raise" and not _shapes.is_traced(s, knots_x):
        _check_in_range(s, knots_x, increasing)
    core = functools.partial(
        _knot_map_core,
        increasing=increasing,
        interpolation=interpolation,
        out_of_bounds=out_of_bounds,
        float32_out=bool(float32_out),
    )
    if _shapes.is_traced(s, knots_x, knots_y):
        return core(jnp.asarray(s), knots_x, knots_y)
    kx, ky = padded_knots(knots_x, knots_y)
    return _shapes.map_padded(lambda u: core(u, kx, ky), s)


def _check_in_range(s, knots_x, increasing: bool) -> None:
    """``ValueError`` if a concrete score lies outside the knots' range (in score space)."""
    kx = np.asarray(knots_x)
    lo, hi = (kx[0], kx[-1]) if increasing else (-kx[-1], -kx[0])
    flat = np.asarray(s).reshape(-1)
    bad = (flat < lo) | (flat > hi)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        side = "below" if flat[i] < lo else "above"
        raise ValueError(
            f"scores hold {int(bad.sum())} value(s) outside the training range "
            f"[{lo:.6g}, {hi:.6g}] (out_of_bounds='raise'): the first, {flat[i]:.6g} at index "
            f"{i}, is {side} it. Use out_of_bounds='clip' or 'nan' to predict there."
        )


@pytree_dataclass
class FittedIsotonic(FittedCalibrator):
    """A fitted isotonic calibrator: a monotone piecewise-constant / -linear map.

    Attributes:
        knots_x: ``[K]`` strictly increasing knot positions in ``u`` = ``s`` (or ``-s`` when
            ``increasing=False``).
        knots_y: ``[K]`` non-decreasing probabilities at the knots (clipped / trimmed).
        increasing: whether the map is non-decreasing in the score (``"auto"`` resolved).
        interpolation: ``"linear"`` (between knots) or ``"step"`` (value of the last knot at
            or below the score).
        out_of_bounds: scores outside the training range (the first and last knot) get the
            end values (``"clip"``), NaN (``"nan"``) or raise ``ValueError`` (``"raise"``;
            inside ``jit`` they get NaN).
    """

    knots_x: jax.Array
    knots_y: jax.Array
    increasing: bool = static_field(default=True)
    interpolation: str = static_field(default="linear")
    out_of_bounds: str = static_field(default="clip")

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Calibrated probabilities (any shape of ``scores``; float32 when the scores are
        float32, else the knots' dtype). Scores outside the training range: see
        ``out_of_bounds``.

        Raises:
            ValueError: on non-finite scores, or scores outside the training range with
                ``out_of_bounds="raise"``.
        """
        return knot_map(
            scores,
            self.knots_x,
            self.knots_y,
            increasing=self.increasing,
            interpolation=self.interpolation,
            out_of_bounds=self.out_of_bounds,
            float32_out=_is_float32(scores),
        )

    @property
    def n_distinct_values(self) -> int:
        """Number of distinct fitted levels (the step function's number of blocks)."""
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


def isotonic_map(
    scores: np.ndarray,
    targets: np.ndarray,
    weights: np.ndarray,
    *,
    increasing: bool | str = True,
    interpolation: str = "linear",
    rank_preserving: bool = False,
    out_of_bounds: str = "clip",
    lo: float = -np.inf,
    hi: float = np.inf,
) -> FittedIsotonic:
    """The fitted isotonic map of real-valued ``targets`` (validated float64 host arrays),
    knots clipped to ``[lo, hi]``: ``IsotonicCalibration.fit`` after its input checks and
    loss weighting (which then clips to probabilities). ``increasing="auto"`` is resolved
    here (:func:`check_increasing`)."""
    if isinstance(increasing, str):
        increasing = check_increasing(scores, targets, weights)
    u, v = isotonic_knots(
        scores, targets, weights, increasing=bool(increasing), centred=rank_preserving
    )
    v = np.clip(v, lo, hi)
    dtype = jnp.result_type(float)
    return FittedIsotonic(
        knots_x=jax.device_put(np.asarray(u, dtype)),
        knots_y=jax.device_put(np.asarray(v, dtype)),
        increasing=bool(increasing),
        interpolation=interpolation,
        out_of_bounds=out_of_bounds,
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class IsotonicCalibration(Calibrator):
    """Isotonic-regression calibration (Zadrozny & Elkan 2002), exact weighted PAV in JAX.

    Args:
        increasing: map non-decreasing (True) or non-increasing (False) in the score, or
            ``"auto"``: the sign of the weighted Spearman correlation of scores and targets
            (:func:`check_increasing`; warns when its confidence interval spans zero).
        interpolation: ``"linear"`` (scikit-learn's prediction) or ``"step"``.
        rank_preserving: centred isotonic regression (Oron & Flournoy 2017): strictly
            increasing on the training range, so no two distinct scores in it are tied. Its
            training-point fit is no longer the least-squares optimum.
        trim: clip probabilities to ``[trim, 1 - trim]`` (0 = only to [0, 1]); Borisov et
            al. (2018) use 0.01 so that log-likelihoods stay finite.
        out_of_bounds: what ``predict`` does with scores outside the training range (of the
            points with positive weight): ``"clip"`` (the end values; the default),
            ``"nan"`` or ``"raise"`` (``ValueError``; NaN inside ``jit``). scikit-learn's
            default is ``"nan"``.
        y_min: optional lower bound of the probabilities (with ``trim`` and 0, the
            largest applies).
        y_max: optional upper bound of the probabilities (with ``1 - trim`` and 1, the
            smallest applies).

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.array([0.1, 0.4, 0.35, 0.8]); y = np.array([0, 0, 1, 1])
        >>> jaxcal.IsotonicCalibration(interpolation="step").fit(s, y).predict(s)
        Array([0. , 0.5, 0.5, 1. ], dtype=float32)
    """

    increasing: bool | str = True
    interpolation: str = "linear"
    rank_preserving: bool = False
    trim: float = 0.0
    out_of_bounds: str = "clip"
    y_min: float | None = None
    y_max: float | None = None

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
        if not (np.isfinite(self.trim) and 0.0 <= self.trim < 0.5):
            raise ValueError(f"trim must lie in [0, 0.5); got {self.trim!r}.")
        if self.rank_preserving and self.interpolation == "step":
            raise ValueError(
                "rank_preserving=True needs interpolation='linear' (a step map ties scores)."
            )
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

    def _fit(self, d: FitData) -> FittedIsotonic:
        """PAV of the loss-weighting targets ``t`` with weights ``w`` (only their ratios
        matter), jitted; the map's knots."""
        lo, hi = self._bounds()
        return isotonic_map(
            d.scores,
            d.targets,
            d.weights,
            increasing=self.increasing,
            interpolation=self.interpolation,
            rank_preserving=self.rank_preserving,
            out_of_bounds=self.out_of_bounds,
            lo=lo,
            hi=hi,
        )
