"""Piecewise maps on knots, shared by the non-parametric calibrators: linear interpolation
between knots, and knot tables padded to size buckets so that predicting compiles once per
bucket (the sorted search they use is in ``jaxcal._scan``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._fitdata import maybe_check_scores
from jaxcal._jit import jit
from jaxcal._scan import searchsorted
from jaxcal.calibrators._scaling import ScoreScaling

__all__ = ["interpolate", "padded_knots", "knot_map", "traced_identity_scaling"]

MIN_KNOTS = 1024  # knot tables of predict programs hold at least this many entries


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
    # traced scores are not validated: a non-finite one gets NaN, never an end value
    f = jnp.where(jnp.isfinite(u), f, jnp.nan)
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
    raise). Traced scores are not validated: a non-finite one gets NaN (concrete ones raise
    ``ValueError``). ``float32_out`` rounds the result to float32."""
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


def traced_identity_scaling(dtype) -> ScoreScaling:
    """The identity :class:`~jaxcal.calibrators._scaling.ScoreScaling` of a pure fit (the
    scores of a traced fit are used as they are, in their dtype: ``c = 0``, ``k = 0``)."""
    return ScoreScaling(shift=jnp.zeros((), dtype), exponent=jnp.zeros((), jnp.int32))


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
