"""Isotonic regression as a function: weighted PAV per group, the fitted values at every point
(:func:`isotonic_regression`) and the knots of the fitted map (:func:`isotonic_knots`).
:class:`jaxcal.IsotonicCalibration` is the estimator built on them.

Eager calls (concrete arrays) run the compiled CPU kernel where the program is compiled
for a CPU and the kernel is built, else the pure-JAX merge tree. Calls on tracers (inside a
caller's ``jit``, ``vmap``, ``grad``, ``jax.export``) always run the merge tree with its
derivative (``jaxcal.fitting.pav.pav_differentiable``), so that they differentiate, export
as a portable artifact and do not depend on whether the kernel is built;
:func:`isotonic_knots_pure` and :func:`cir_knots_pure` are the knots of the pure fits.
:func:`isotonic_regression_in_program` keeps the kernel for jaxcal's own programs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._native import pav_cpu_available, pav_fitted_cpu, pav_runs_cpu
from jaxcal._validation import check_groups, check_sample_weight, check_scores
from jaxcal._weights import normalize_weights_host
from jaxcal.fitting._isotonic_eager import (
    bound,
    interpolate_zero_weight,
    kernel_inputs,
    order_keys,
    pad_top,
)
from jaxcal.fitting.pav import pav, pav_differentiable

__all__ = [
    "isotonic_regression",
    "isotonic_regression_in_program",
    "isotonic_knots",
    "cir_knots",
    "cir_knots_pure",
    "isotonic_knots_pure",
    "compact",
    "pav_runs",
    "eager_kernel",
    "is_float32",
]


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
    between the clipped values of their neighbours (``jaxcal.fitting.pav``).

    ``kernel``: ``"cpu"`` (the compiled sequential PAV of ``jaxcal._native``),
    ``"portable"`` (the merge tree) or ``"auto"`` (the kernel in programs compiled for a CPU,
    the merge tree elsewhere)."""
    u = jnp.where(increasing, x, -x)
    g = group if has_group else None

    def portable(u, y, w, g, lo, hi):
        return pav_differentiable(u, y, w, g, lo, hi).fitted

    return _pav_or_kernel(kernel, pav_fitted_cpu, portable, u, y, w, g, lo, hi)


@functools.partial(jit, static_argnames=("has_group",), kernel_call=True)
def _pav_fitted_kernel(u, y, w, group, lo, hi, *, has_group: bool):
    """``_pav_fitted`` of an eager call on a CPU with the kernel, on the inputs that
    ``jaxcal.fitting._isotonic_eager.kernel_inputs`` makes (oriented scores ``u``, weights
    normalised on the host): the program is the kernel's call alone, no pass of XLA's."""
    g = group if has_group else None
    return pav_fitted_cpu(u, y, w, g, lo, hi, normalized=True)


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
    Weighted PAV, ``O(n log n)``: called with concrete arrays, the compiled sequential CPU
    kernel (``jaxcal._native``, if built and the default backend is a CPU), else the
    pure-JAX merge tree (``jaxcal.fitting.pav``).

    Called with concrete arrays it validates eagerly (``ValueError``); called on tracers
    (inside ``jit``, ``vmap``, ``grad`` / ``jvp``, ``jax.export``) it trusts its inputs and
    runs the merge tree (never the kernel: the program exports as a portable artifact, and
    its numbers do not depend on whether the kernel is built), with a ``jax.custom_jvp``
    (``jaxcal.fitting.pav.pav_differentiable``): the tangent in ``y`` is the weighted block
    average of ``dy``, in the weights :math:`\sum_B \dot w_i (y_i - f_B) / \sum_B w_i`,
    in ``x`` zero (zero-weight points: the derivative of their interpolated value), zero
    in ``y`` and the weights where a bound clips (the bound's tangent there). Under
    ``vmap`` every batch row is an independent problem; grouping by ``group`` is usually
    faster than ``vmap`` for ragged problems (one sort of all points).

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
        >>> from jaxcal import isotonic_regression
        >>> isotonic_regression(jnp.array([1.0, 2.0, 3.0]), jnp.array([1.0, 3.0, 2.0]))
        Array([1. , 2.5, 2.5], dtype=float32)
    """
    if not isinstance(increasing, bool | np.bool_):
        raise ValueError(f"increasing must be True or False; got {increasing!r}.")
    _check_bounds(y_min, y_max)
    native = pav_cpu_available()
    if _shapes.is_traced(x, y, sample_weight, group, y_min, y_max):
        return _traced_fit(x, y, sample_weight, group, increasing, y_min, y_max, "portable")
    float32_in = is_float32(x)
    x = check_scores(x, name="x")
    n = x.shape[0]
    y = check_scores(y, name="y")
    if y.shape[0] != n:
        raise ValueError(f"length mismatch: {n} x values but {y.shape[0]} y values.")
    w = None  # unit weights, written into the kernel's input without a pass of their own
    if sample_weight is not None:  # normalised on the host: a cast to float32 would flush them
        w = normalize_weights_host(check_sample_weight(sample_weight, n))
    if group is not None:
        group = check_groups(group, n)
    dtype = jnp.result_type(float)
    x_in, w_in, group_in = x, w, group
    ranks = order_keys(x, dtype)
    if ranks is not None:  # the cast would merge or overflow distinct scores
        x = ranks
    size = _shapes.padded_size(n)
    lo, hi = (bound(v, fill, n, size, dtype) for v, fill in ((y_min, -np.inf), (y_max, np.inf)))
    has_group = group is not None
    no_group = np.zeros((), np.int32)
    if eager_kernel(native) == "cpu":
        u, y, w, group = kernel_inputs(x, y, w, group, size, bool(increasing), dtype)
        out = _pav_fitted_kernel(
            u, y, w, no_group if group is None else group, lo, hi, has_group=has_group
        )
    else:
        w = np.ones(n) if w is None else w
        x, y, w, group = pad_top(x, y, w, group, size, bool(increasing))
        out = _pav_fitted(
            *(jax.device_put(np.asarray(a, dtype)) for a in (x, y, w)),
            jax.device_put(group) if has_group else no_group,
            np.asarray(bool(increasing)),
            lo,
            hi,
            has_group=has_group,
            kernel="portable",
        )
    host = np.asarray(out)[:n]  # sliced (and cast) on the host: no program per size
    if ranks is not None and w_in is not None:
        zero = w_in < np.finfo(dtype).tiny  # what the PAV treats as zero weight
        if zero.any():
            host = interpolate_zero_weight(x_in, host, zero, group_in).astype(host.dtype)
    return jax.device_put(host.astype(np.float32) if float32_in else host)


def _traced_fit(x, y, sample_weight, group, increasing, y_min, y_max, kernel: str):
    """``isotonic_regression`` on tracers (no validation, no padding): ``_pav_fitted``."""
    x = jnp.asarray(x)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        x = x.astype(jnp.result_type(float))
    y = jnp.asarray(y).astype(x.dtype)
    w = jnp.ones_like(y) if sample_weight is None else jnp.asarray(sample_weight).astype(y.dtype)
    lo = jnp.asarray(-jnp.inf if y_min is None else y_min).astype(y.dtype)
    hi = jnp.asarray(jnp.inf if y_max is None else y_max).astype(y.dtype)
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
        kernel=kernel,
    )


def isotonic_regression_in_program(
    x: jax.Array,
    y: jax.Array,
    *,
    sample_weight: jax.Array | None = None,
    group: jax.Array | None = None,
    increasing: bool = True,
    y_min: jax.Array | None = None,
    y_max: jax.Array | None = None,
) -> jax.Array:
    """:func:`isotonic_regression` for jaxcal's own jitted programs, which are neither
    differentiated nor exported (metrics, alternating fits): the compiled CPU kernel in
    programs compiled for a CPU (where it is built), the merge tree elsewhere, picked by
    ``jax.lax.platform_dependent``. The public function takes the merge tree on tracers, so
    that a caller's program differentiates and exports; the numbers are the same to rounding.
    Inputs are trusted (as the public function's on tracers)."""
    kernel = "auto" if pav_cpu_available() else "portable"
    return _traced_fit(x, y, sample_weight, group, increasing, y_min, y_max, kernel)


def is_float32(a) -> bool:
    """Whether an input array (NumPy, JAX or a tracer) is float32; lists are not."""
    return getattr(a, "dtype", None) == np.float32


def check_centered(centered, *, name: str = "centered") -> None:
    """``ValueError`` unless ``centered`` is True or False."""
    if not isinstance(centered, bool | np.bool_):
        raise ValueError(f"{name} must be True or False; got {centered!r}.")


def cir_knots(
    x: np.ndarray, w: np.ndarray, v: np.ndarray, *, flat_values: tuple[float, ...] = (0.0, 1.0)
) -> tuple[np.ndarray, np.ndarray]:
    r"""Knots ``(u, v)`` of centred isotonic regression (CIR, Oron & Flournoy 2017) from an
    isotonic fit on distinct positions. Host-side (NumPy), exact.

    ``x``: ``[k]`` strictly increasing positions (the distinct scores, or bucket centres)
    with positive weights ``w``; ``v``: ``[k]`` their non-decreasing isotonic fitted values.
    As the reference implementation (``cirPAVA`` of the R package ``cir``, default
    settings): every *level set* of the fit (a maximal stretch of positions with one fitted
    value: PAV blocks, with ties pooled as well as strict violators) becomes one knot at its
    weighted mean position, except a level set whose value is in ``flat_values`` (the
    bounds ``{0, 1}`` of a probability: a flat stretch there is kept), which keeps its
    first and last position; knots at ``x[0]`` and ``x[-1]`` with the first and last values
    extend the map flat to the ends of the range. ``u`` is strictly increasing (in ``x``'s
    dtype), ``v`` is strictly increasing except on those flat stretches.
    """
    start = np.r_[True, v[1:] != v[:-1]]
    block = np.cumsum(start) - 1
    nb = int(block[-1]) + 1
    first = np.flatnonzero(start)
    last = np.r_[first[1:] - 1, x.shape[0] - 1]
    xf = np.asarray(x, np.float64)
    bw = np.bincount(block, w, nb)
    centre = np.bincount(block, w * xf, nb) / bw
    centre = np.clip(centre, xf[first], xf[last])  # rounding guard
    bv = v[first]
    flat = np.isin(bv, flat_values)
    left, right = np.where(flat, xf[first], centre), np.where(flat, xf[last], centre)
    u = np.r_[xf[0], np.stack([left, right], 1).ravel(), xf[-1]].astype(x.dtype)
    vals = np.r_[bv[0], np.repeat(bv, 2), bv[-1]]
    keep = np.r_[True, u[1:] != u[:-1]]  # equal positions lie in one level set
    return u[keep], vals[keep]


def isotonic_knots(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, *, increasing: bool = True, centred: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Knots ``(u, v)`` of the fitted isotonic map, ``u = x`` (or ``-x`` if decreasing).

    Runs the jitted PAV (on the points padded to their bucket size, see ``jaxcal._shapes``),
    then (on the host, eagerly) keeps each block's first and last score
    (the thresholds scikit-learn keeps) or, with ``centred=True``, the knots of centred
    isotonic regression (:func:`cir_knots`) on the distinct scores.
    ``u`` is strictly increasing and ``v`` non-decreasing.
    """
    dtype = jnp.result_type(float)
    # only the ratios of the weights matter (normalised, as inside the PAV); as in
    # scikit-learn, zero-weight points (and those below the dtype's smallest normal number
    # after normalising, which PAV treats as zero) neither move the fit nor add knots
    w = normalize_weights_host(np.asarray(w, np.float64))
    keep = w >= np.finfo(dtype).tiny
    x, y, w = x[keep], y[keep], w[keep]
    x, y, w, _ = pad_top(x, y, w, None, _shapes.padded_size(x.shape[0]), increasing)
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
    if centred:
        return cir_knots(rx, np.asarray(run_w, np.float64)[:k], rv)
    start = np.asarray(run_start)[:k].copy()
    start[0] = True
    first = np.flatnonzero(start)
    last = np.r_[first[1:] - 1, k - 1]
    u = np.stack([rx[first], rx[last]], 1).ravel()
    v = np.repeat(rv[first], 2)
    keep = np.r_[True, u[1:] != u[:-1]]
    return u[keep], v[keep]


def compact(keep: jax.Array, size: int, *arrays: jax.Array) -> tuple[list[jax.Array], jax.Array]:
    """The entries of ``arrays`` where ``keep`` (in order), then copies of the last kept
    one, as ``[size]`` arrays (``size >= keep.sum()``), and the number kept: a knot table of
    fixed size for a traced fit (padded as ``jaxcal.calibrators._knots.padded_knots``
    pads). Pure JAX; differentiable in ``arrays``."""
    dest = jnp.where(keep, jnp.cumsum(keep) - 1, size)
    k = jnp.sum(keep)
    last = jnp.minimum(jnp.arange(size), jnp.maximum(k - 1, 0))
    out = [jnp.zeros(size, a.dtype).at[dest].set(a, mode="drop")[last] for a in arrays]
    return out, k


def cir_knots_pure(
    x: jax.Array, w: jax.Array, v: jax.Array, n_valid: jax.Array, *, flat_values=(0.0, 1.0)
) -> tuple[jax.Array, jax.Array]:
    """:func:`cir_knots` in JAX, on tracers: the same knots, as ``[2 m + 2]`` arrays padded
    by repeating the last knot (``x, w, v`` are ``[m]``; their first ``n_valid`` entries are
    the positions, weights and fitted values, the rest copies of the last position and
    value, as :func:`compact` leaves them). Knots of equal position are kept (they carry
    equal values, and ``interpolate`` never interpolates across them)."""
    m = x.shape[0]
    idx = jnp.arange(m)
    valid = idx < n_valid
    start = valid & jnp.concatenate([jnp.ones(1, bool), v[1:] != v[:-1]])
    is_last = valid & jnp.concatenate([start[1:] | ~valid[1:], jnp.ones(1, bool)])
    block = jnp.where(valid, jnp.cumsum(start) - 1, m)
    seg = lambda a: jax.ops.segment_sum(a, block, num_segments=m)  # noqa: E731
    zero = jnp.zeros((), x.dtype)
    first_x = seg(jnp.where(start, x, zero))
    last_x = seg(jnp.where(is_last, x, zero))
    bv = seg(jnp.where(start, v, zero))
    bw = seg(w)
    centre = seg(w * x) / jnp.where(bw > 0, bw, 1)
    centre = jnp.clip(centre, first_x, last_x)  # rounding guard
    flat = jnp.zeros(m, bool)
    for f in flat_values:
        flat = flat | (bv == f)
    real = idx < jnp.sum(start)
    left = jnp.where(real, jnp.where(flat, first_x, centre), x[-1])
    right = jnp.where(real, jnp.where(flat, last_x, centre), x[-1])
    bv = jnp.where(real, bv, v[-1])
    u = jnp.concatenate([x[:1], jnp.stack([left, right], 1).reshape(-1), x[-1:]])
    vals = jnp.concatenate([v[:1], jnp.repeat(bv, 2), v[-1:]])
    return u, vals


def isotonic_knots_pure(
    u: jax.Array, t: jax.Array, w: jax.Array, *, centred: bool = False
) -> tuple[jax.Array, jax.Array]:
    """:func:`isotonic_knots` in JAX, on tracers (``jit``, ``vmap``, ``grad``, export):
    the knots ``(u, v)`` of the isotonic map of ``t`` on the positions ``u`` (``-x`` for a
    decreasing map), by the merge tree with its derivatives (:func:`pav_differentiable`).

    The table has a fixed size: ``[n]`` (every run of positive weight is a knot with its
    block's value: the same map as the block ends :func:`isotonic_knots` keeps, linearly
    interpolated or as a step) or ``[2 n + 2]`` for ``centred=True`` (:func:`cir_knots_pure`),
    padded by repeating the last knot. Zero-weight points add no knots."""
    n = u.shape[0]
    r = pav_differentiable(u, t, w)
    has_w = r.run_weight > 0  # padding runs of the merge tree have none
    if not centred:
        (kx, kv), _ = compact(has_w, n, r.run_x, r.run_value)
        return kx, kv
    (rx, rw, rv), k = compact(has_w, n, r.run_x, r.run_weight, r.run_value)
    return cir_knots_pure(rx, rw, rv, k)
