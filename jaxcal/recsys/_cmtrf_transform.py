r"""The transforms of CMTRF (:mod:`jaxcal.recsys._cmtrf_core`): the exact transform step
and the map from scores back to ratings.

A group's transform :math:`z_1 < \dots < z_L` of the rating scale, given the natural
parameters of its ratings, minimises the Bregman loss :math:`\sum_r n_r \phi(z_r) - z_r
s_r` with gaps :math:`\ge \varepsilon` (:func:`transform_step`: an isotonic regression on
:math:`y_r = z_r - \varepsilon (r - 1)`, solved by its min-max formula);
:func:`inverse_transform` maps a score back to a rating. Pure functions of arrays.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from jaxcal.recsys._cmtrf_als import Pairs

__all__ = [
    "phi",
    "link",
    "level_stats",
    "initial_transform",
    "transform_step",
    "inverse_transform",
]

_BISECTION_STEPS = 64


def phi(z: jax.Array, loss: str) -> jax.Array:
    r"""The Bregman generator :math:`\phi(z)`: :math:`z^2/2` or :math:`z \log z - z`."""
    if loss == "squared":
        return 0.5 * z**2
    return jnp.where(z > 0, z * jnp.log(jnp.where(z > 0, z, 1.0)) - z, jnp.inf)


def link(theta: jax.Array, loss: str) -> jax.Array:
    r"""The regression function :math:`f = (\nabla\phi)^{-1}`: identity or :math:`\exp`."""
    return theta if loss == "squared" else jnp.exp(theta)


def level_stats(theta: jax.Array, pairs: Pairs, n_rows: int, n_levels: int):
    r"""Per row (user) and level: rating count :math:`n_{ur}` and score sum
    :math:`s_{ur} = \sum \theta` over the row's ratings of that level (``[n_rows, L]`` each)."""
    idx = pairs.row * n_levels + pairs.level
    size = n_rows * n_levels
    count = jax.ops.segment_sum(pairs.weight, idx, num_segments=size)
    total = jax.ops.segment_sum(pairs.weight * theta, idx, num_segments=size)
    return count.reshape(n_rows, n_levels), total.reshape(n_rows, n_levels)


def initial_transform(n_levels: int, epsilon: jax.Array, dtype=None) -> jax.Array:
    r"""The starting transform :math:`z_r = 1 + \max(1, \varepsilon)(r - 1)` (the identity
    :math:`z_r = r` when :math:`\varepsilon \le 1`), ``[L]``."""
    r0 = jnp.arange(n_levels, dtype=dtype)
    return 1.0 + jnp.maximum(1.0, epsilon) * r0


def _block_values(count, total, epsilon, loss: str):
    """``[G, L, L]`` optimal common value :math:`t` of ``y`` on each block ``[a, b]`` of
    levels (``inf`` where the block is empty or ``a > b``)."""
    n_levels = count.shape[-1]
    r0 = jnp.arange(n_levels, dtype=total.dtype)
    idx = jnp.arange(n_levels)
    in_block = (idx[:, None, None] <= idx[None, None, :]) & (
        idx[None, None, :] <= idx[None, :, None]
    )
    in_block = in_block.astype(total.dtype)  # [a, b, j]: a <= j <= b
    n_block = jnp.einsum("abj,gj->gab", in_block, count)
    s_block = jnp.einsum("abj,gj->gab", in_block, total)
    valid = (n_block > 0) & (idx[:, None] <= idx[None, :])[None]
    safe_n = jnp.where(valid, n_block, 1.0)
    if loss == "squared":  # weighted mean of (mean theta - eps r0) over the block
        shift = jnp.einsum("abj,gj->gab", in_block, count * r0[None, :])
        value = (s_block - epsilon * shift) / safe_n
    else:
        # sum_j n_j log(t + eps r0_j) = S (increasing in t): bisection on a bracket of width
        # eps (b - a), exact to rounding after 64 halvings
        c = epsilon * r0
        expm = jnp.exp(s_block / safe_n)
        lo = jnp.maximum(expm - c[None, None, :], -c[:, None][None])  # c_b = max, c_a = min
        hi = expm - c[:, None][None]

        def g(t):
            arg = t[..., None] + c
            logs = jnp.log(jnp.where(arg > 0, arg, 1.0))
            logs = jnp.where(arg > 0, logs, -jnp.inf)
            terms = jnp.where(count[:, None, None, :] > 0, count[:, None, None, :] * logs, 0.0)
            return jnp.sum(terms * in_block[None], axis=-1) - s_block

        def bisect(_, bounds):
            lo, hi = bounds
            mid = 0.5 * (lo + hi)
            up = g(mid) < 0
            return jnp.where(up, mid, lo), jnp.where(up, hi, mid)

        lo, hi = lax.fori_loop(0, _BISECTION_STEPS, bisect, (lo, jnp.maximum(lo, hi)))
        value = 0.5 * (lo + hi)
    return jnp.where(valid, value, jnp.inf)


def _min_max(value: jax.Array) -> jax.Array:
    r"""Isotonic regression by its min-max formula :math:`y_i = \max_{a \le i} \min_{b \ge i}
    t_{ab}` (exact for separable convex losses; ``[G, L]``; garbage at levels whose blocks
    are all empty, which the caller fills)."""
    n_levels = value.shape[-1]
    idx = jnp.arange(n_levels)
    # [G, a, i]: min over b >= i of t[a, b] (a <= i)
    upper = jnp.where((idx[None, :] >= idx[:, None])[None, None], value[:, :, None, :], jnp.inf)
    inner = jnp.min(upper, axis=-1)  # [G, a, i]
    inner = jnp.where((idx[:, None] <= idx[None, :])[None] & jnp.isfinite(inner), inner, -jnp.inf)
    return jnp.max(inner, axis=1)


def _fill(y: jax.Array, known: jax.Array, default: jax.Array) -> jax.Array:
    """Levels not ``known`` get the linear interpolation of their nearest known neighbours,
    the nearest one's value beyond them, ``default`` in a row with none (``[G, L]``)."""
    n_levels = y.shape[-1]
    idx = jnp.arange(n_levels)
    left = lax.cummax(jnp.where(known, idx, -1), axis=1)
    right = lax.cummin(jnp.where(known, idx, n_levels), axis=1, reverse=True)
    lc, rc = jnp.maximum(left, 0), jnp.minimum(right, n_levels - 1)
    yl, yr = jnp.take_along_axis(y, lc, 1), jnp.take_along_axis(y, rc, 1)
    has_l, has_r = left >= 0, right < n_levels
    span = jnp.where(has_l & has_r & (rc > lc), rc - lc, 1)
    inner = yl + (idx - lc) / span * (yr - yl)
    out = jnp.where(has_l & has_r, inner, jnp.where(has_l, yl, jnp.where(has_r, yr, default)))
    return jnp.where(known, y, out)


def transform_step(
    count: jax.Array, total: jax.Array, epsilon: jax.Array, *, loss: str, anchor: bool
) -> jax.Array:
    r"""The exact transform of each group given its level statistics.

    Group :math:`g` solves :math:`\min_z \sum_r n_{gr}\,\phi(z_r) - z_r s_{gr}` (its ratings'
    loss up to constants; for squared loss the least squares fit to the level means
    :math:`s_{gr}/n_{gr}` with weights :math:`n_{gr}`) subject to :math:`z_{r+1} - z_r \ge
    \varepsilon` and, with ``anchor``, :math:`z_1 = 1, z_L = L`. With :math:`y_r = z_r -
    \varepsilon (r - 1)` the gaps become :math:`y` non-decreasing: a separable convex
    isotonic regression, solved exactly by the min-max formula over the :math:`L(L+1)/2`
    blocks of levels (each block's value in closed form or by bisection); the anchors bound
    the interior :math:`y` to :math:`[1, L - \varepsilon (L-1)]`, and clipping the unbounded
    solution to constant bounds is exact. Levels without ratings are filled by linear
    interpolation between their nearest neighbours with ratings (or anchors), which keeps
    every gap :math:`\ge \varepsilon`; beyond the last one (unanchored) the gap is
    :math:`\varepsilon`.

    Args:
        count: ``[G, L]`` rating counts :math:`n_{gr}`.
        total: ``[G, L]`` sums of the natural parameters :math:`s_{gr}`.
        epsilon: the smallest gap (> 0; ``<= 1`` with ``anchor``).
        loss: ``"squared"`` or ``"poisson"``.
        anchor: fix :math:`z_1 = 1` and :math:`z_L = L`.

    Returns:
        ``[G, L]`` transforms (a group without ratings gets :func:`initial_transform`).
    """
    n_levels = count.shape[-1]
    r0 = jnp.arange(n_levels, dtype=total.dtype)
    known = count > 0
    if anchor:
        interior = (r0 > 0) & (r0 < n_levels - 1)
        count = jnp.where(interior, count, 0.0)
        total = jnp.where(interior, total, 0.0)
        known = (count > 0) | ~interior
    y = _min_max(_block_values(count, total, epsilon, loss))
    start = initial_transform(n_levels, epsilon, total.dtype)
    if anchor:
        lo, hi = 1.0, n_levels - epsilon * (n_levels - 1)
        y = jnp.clip(y, lo, hi)
        y = y.at[:, 0].set(lo).at[:, -1].set(hi)
    y = _fill(jnp.where(known, y, 0.0), known, 1.0)
    z = y + epsilon * r0
    return jnp.where(jnp.any(count > 0, axis=1, keepdims=True), z, start)


def inverse_transform(s: jax.Array, z: jax.Array) -> jax.Array:
    r"""Rating of score ``s`` through the piecewise-linear map :math:`z_r \mapsto r`
    (``z``: ``[..., L]`` increasing, broadcast with ``s``), extended linearly beyond
    :math:`z_1` and :math:`z_L` by the end segments."""
    s = jnp.asarray(s)
    z = jnp.broadcast_to(z, jnp.broadcast_shapes(s.shape, z.shape[:-1]) + z.shape[-1:])
    s = jnp.broadcast_to(s, z.shape[:-1])
    seg = jnp.sum(s[..., None] > z[..., 1:-1], axis=-1)  # 0 .. L-2
    z0 = jnp.take_along_axis(z, seg[..., None], -1)[..., 0]
    z1 = jnp.take_along_axis(z, seg[..., None] + 1, -1)[..., 0]
    return seg + 1.0 + (s - z0) / (z1 - z0)
