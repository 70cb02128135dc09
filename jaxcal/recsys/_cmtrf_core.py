r"""The pure core of CMTRF (clustered monotone transforms for rating factorisation).

Hiranandani, Somani, Koyejo and Acharyya, "Clustered Monotone Transforms for Rating
Factorization", WSDM 2019. A rating :math:`r_{ui} \in \{1, \dots, L\}` is modelled through a
monotone transform :math:`z_g` of the rating scale, shared by a group :math:`g(u)` of users
(one group, one per user, or one per cluster), and a low-rank natural parameter
:math:`\theta_{ui} = \langle x_u, y_i \rangle (+ b_u + c_i)`:

.. math::
    \min_{X, Y, b, c, z} \sum_{(u, i)} D_\phi\big(z_{g(u)}[r_{ui}] \,\|\, f(\theta_{ui})\big)
    + \tfrac{\lambda_u}{2} \sum_u \lVert (x_u, b_u) \rVert^2
    + \tfrac{\lambda_i}{2} \sum_i \lVert (y_i, c_i) \rVert^2,
    \quad z_g[r + 1] - z_g[r] \ge \varepsilon,

with :math:`D_\phi` the squared loss (:math:`\phi = z^2/2`, :math:`f = \mathrm{id}`) or the
generalised I-divergence (:math:`\phi = z \log z - z`, :math:`f = \exp`) and, when anchored,
:math:`z_g[1] = 1`, :math:`z_g[L] = L`.

Everything here is a pure function of arrays (jittable, ``vmap``-able, float32 or float64):

* :func:`half_step`: one side's factors given the other's (ridge closed form / damped Newton;
  with ``Config.native``, CPU programs solve the per-row systems and score the pairs with
  the compiled kernels ``jaxcal._native.ridge_rows_cpu`` / ``pair_scores_cpu``, other
  programs with ``segment_sum`` and gathers);
* :func:`level_stats`, :func:`transform_step`: the exact transform step (min-max formula of
  isotonic regression on :math:`y_r = z_r - \varepsilon (r - 1)`, clipped to the anchors);
* :func:`kmeans_plus_plus`, :func:`kmeans`: k-means over per-user transforms;
* :func:`inverse_transform`, :func:`predict_ratings`: ratings from scores;
* :func:`fit_one`: one model with early stopping on validation; :func:`fit_grid`: many;
  :func:`replay`: a chosen one again, on more ratings.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcal._jit import jit
from jaxcal._native import pair_scores_cpu, ridge_rows_cpu

__all__ = [
    "Config",
    "Pairs",
    "Problem",
    "State",
    "FitOutput",
    "phi",
    "link",
    "half_step",
    "half_step_dense",
    "level_stats",
    "transform_step",
    "initial_transform",
    "kmeans_plus_plus",
    "kmeans",
    "inverse_transform",
    "predict_ratings",
    "initial_state",
    "fit_one",
    "fit_grid",
    "replay",
]

_BISECTION_STEPS = 64
_LINE_SEARCH = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.0)


@jax.tree_util.register_static
@dataclasses.dataclass(frozen=True)
class Config:
    """Static settings of a fit (part of the compiled program's key)."""

    n_users: int
    n_items: int
    n_levels: int
    rank: int
    transform: str = "global"  # "none" | "global" | "per_user" | "clustered"
    loss: str = "squared"  # "squared" | "poisson"
    anchor: bool = True
    biases: bool = False
    n_clusters: int = 5
    n_sweeps: int = 50
    n_newton: int = 8
    kmeans_iters: int = 100
    init_scale: float = 0.1
    batch_size: int | None = None  # grid points per vmap chunk (None: one after another)
    dense: bool = False  # half-steps on dense [n_users, n_items] masks (small matrices)
    native: bool = False  # ridge systems and pair scores by the compiled CPU kernels (_native)
    offset: bool = True  # a global offset mu in theta (unpenalised, refitted every sweep)
    warm_start: bool = False  # grid points in order, each from the previous one's factors


class Pairs(NamedTuple):
    """Ratings of one ordering: ``row`` sorted (the side being solved), padded entries at the
    end with ``weight`` 0."""

    row: jax.Array  # [P] int32
    col: jax.Array  # [P] int32
    level: jax.Array  # [P] int32, rating - 1
    weight: jax.Array  # [P] float, 1 (0 on padding)


class Problem(NamedTuple):
    """The training ratings sorted by user and by item, and the validation ratings
    (``row`` = user, ``col`` = item)."""

    by_user: Pairs
    by_item: Pairs
    validation: Pairs


class State(NamedTuple):
    """Parameters of one model: factors, biases, transforms ``[G, L]`` and groups."""

    user_factors: jax.Array  # [n_users, d]
    item_factors: jax.Array  # [n_items, d]
    user_bias: jax.Array  # [n_users]
    item_bias: jax.Array  # [n_items]
    transforms: jax.Array  # [G, L]
    group: jax.Array  # [n_users] int32
    offset: jax.Array  # [] global offset mu of theta (unpenalised; 0 unless cfg.offset)


class FitOutput(NamedTuple):
    """One fit: the best-validation state, its sweep, the per-sweep validation MSEs (nan
    after stopping) and, for ``clustered``, those of the per-user pre-training phase."""

    state: State
    best_sweep: jax.Array
    best_mse: jax.Array
    history: jax.Array  # [n_sweeps]
    pretrain_history: jax.Array  # [n_sweeps] (nan unless clustered)


# ----------------------------------------------------------------------------- losses


def phi(z: jax.Array, loss: str) -> jax.Array:
    r"""The Bregman generator :math:`\phi(z)`: :math:`z^2/2` or :math:`z \log z - z`."""
    if loss == "squared":
        return 0.5 * z**2
    return jnp.where(z > 0, z * jnp.log(jnp.where(z > 0, z, 1.0)) - z, jnp.inf)


def link(theta: jax.Array, loss: str) -> jax.Array:
    r"""The regression function :math:`f = (\nabla\phi)^{-1}`: identity or :math:`\exp`."""
    return theta if loss == "squared" else jnp.exp(theta)


# ----------------------------------------------------------------------------- ALS


def _step_size(values: jax.Array, steps: jax.Array) -> jax.Array:
    """Per row, the largest step whose objective (``[n, S]``, steps decreasing) is the
    smallest up to rounding: near the optimum every trial ties, and the full Newton step
    keeps the convergence quadratic."""
    values = jnp.where(jnp.isnan(values), jnp.inf, values)
    best = jnp.min(values, axis=1, keepdims=True)
    tol = 64 * jnp.finfo(values.dtype).eps * (jnp.abs(best) + 1.0)
    return steps[jnp.argmax(values <= best + tol, axis=1)]


def _pair_dots(a, b, row, col, *, native: bool) -> jax.Array:
    """``a[row[j]] . b[col[j]]`` for every pair (``col`` None: ``b`` is ``[P, k]``, one row
    per pair); the compiled kernel in CPU programs when ``native`` (XLA's CPU gathers of
    factor rows are slow), else gathers."""

    def portable(a, b):
        return jnp.sum(a[row] * (b if col is None else b[col]), axis=-1)

    if not native:
        return portable(a, b)
    cols = jnp.arange(row.shape[0], dtype=jnp.int32) if col is None else col

    def cpu(a, b):
        return pair_scores_cpu(a, b, row, cols)

    return lax.platform_dependent(a, b, cpu=cpu, default=portable)


def half_step(
    x: jax.Array,
    feats: jax.Array,
    offset: jax.Array,
    target: jax.Array,
    pairs: Pairs,
    l2: jax.Array,
    *,
    loss: str,
    n_newton: int = 8,
    native: bool = False,
) -> jax.Array:
    r"""Each row's parameters minimising its ratings' loss plus ridge, the other side fixed.

    Row :math:`n` solves :math:`\min_x \sum_{j} w_j\, C(t_j \,\|\, x^\top F_j + o_j) +
    \tfrac{\lambda}{2} \lVert x \rVert^2` over its pairs (``pairs.row == n``), with
    :math:`C` the squared loss :math:`(t - \theta)^2/2` (closed form :math:`x = (F^\top W F
    + \lambda I)^{-1} F^\top W (t - o)`; :math:`\lambda` is not scaled by the count) or the
    I-divergence :math:`e^\theta - t\theta` (+ const), solved by ``n_newton`` damped Newton
    steps from ``x`` (the step size is the best of 1, 1/2, ..., 1/16, 0 per row, so the
    objective never increases; convergence is quadratic near the optimum).

    Args:
        x: ``[n, k]`` current parameters (the Newton start; unused for squared loss).
        feats: ``[P, k]`` features of each pair (the other side's factors).
        offset: ``[P]`` fixed part of each pair's :math:`\theta` (the other side's bias).
        target: ``[P]`` transformed ratings :math:`t = z_{g(u)}[r]`.
        pairs: the pairs (``row`` sorted; ``weight`` 0 on padding).
        l2: ridge :math:`\lambda > 0`.
        loss: ``"squared"`` or ``"poisson"``.
        n_newton: Newton steps (poisson).
        native: solve the ridge systems (the closed form, each Newton direction) by the
            compiled kernel (``jaxcal._native.ridge_rows_cpu``) in programs compiled for a
            CPU; other programs keep the ``segment_sum`` path. Needs the kernel
            (``ridge_cpu_available()``).

    Returns:
        ``[n, k]`` new parameters.
    """
    return _half_step(
        x, feats, None, offset, target, pairs, l2, loss=loss, n_newton=n_newton, native=native
    )


def _ridge_rows(other, col, c, r, extra, l2, pairs: Pairs, *, native: bool) -> jax.Array:
    r"""Every row's :math:`x_n = (\sum_j c_j f_j f_j^\top + \lambda I)^{-1} (\sum_j r_j
    f_j + e_n)` over its pairs, :math:`f_j` = ``other[col[j]]`` (``col`` None: ``other`` is
    ``[P, k]``, one row per pair); ``extra``: ``[n, k]`` :math:`e`. The compiled kernel in
    CPU programs when ``native``, else the Gram matrices by ``segment_sum`` (the upper
    triangle only: half the scattered sums, the bulk of the time) and ``solve``."""
    n, k = extra.shape

    def portable(other, c, r, extra, l2):
        feats = other if col is None else other[col]
        seg = functools.partial(
            jax.ops.segment_sum, segment_ids=pairs.row, num_segments=n, indices_are_sorted=True
        )
        upper_i, upper_j = np.triu_indices(k)
        eye = jnp.eye(k, dtype=feats.dtype)
        upper = seg(c[:, None] * feats[:, upper_i] * feats[:, upper_j])
        full = jnp.zeros((n, k, k), upper.dtype).at[:, upper_i, upper_j].set(upper)
        gram = full + jnp.swapaxes(full, 1, 2) * (1 - eye) + l2 * eye
        b = seg(r[:, None] * feats) + extra
        return jnp.linalg.solve(gram, b[..., None])[..., 0]

    if not native:
        return portable(other, c, r, extra, l2)
    cols = jnp.arange(c.shape[0], dtype=jnp.int32) if col is None else col
    row_start = jnp.searchsorted(pairs.row, jnp.arange(n + 1, dtype=pairs.row.dtype))

    def cpu(other, c, r, extra, l2):
        return ridge_rows_cpu(other, cols, row_start.astype(jnp.int32), c, r, extra, l2)

    return lax.platform_dependent(other, c, r, extra, l2, cpu=cpu, default=portable)


def _half_step(x, other, col, offset, target, pairs: Pairs, l2, *, loss, n_newton, native):
    """:func:`half_step` with the features ``other[col]`` (``col`` None: ``other`` is
    ``[P, k]`` already); the kernel gathers them itself, the ``segment_sum`` path here."""
    n, k = x.shape
    w = pairs.weight
    ridge = functools.partial(_ridge_rows, col=col, pairs=pairs, native=native)

    if loss == "squared":
        extra = jnp.zeros((n, k), x.dtype)
        return ridge(other, c=w, r=w * (target - offset), extra=extra, l2=l2)

    dots = functools.partial(_pair_dots, b=other, row=pairs.row, col=col, native=native)
    seg = functools.partial(
        jax.ops.segment_sum, segment_ids=pairs.row, num_segments=n, indices_are_sorted=True
    )
    steps = jnp.asarray(_LINE_SEARCH, x.dtype)

    def objective(theta, xs):  # [P, S], [n, S, k] -> [n, S]
        terms = jnp.where(w[:, None] > 0, jnp.exp(theta) - target[:, None] * theta, 0.0)
        return seg(terms) + 0.5 * l2 * jnp.sum(xs**2, axis=-1)

    def newton(_, x):
        theta = dots(x) + offset
        mu = jnp.exp(theta)
        # the Newton direction -(F^T W M F + l2 I)^{-1} (F^T W (mu - t) + l2 x)
        direction = ridge(other, c=w * mu, r=-(w * (mu - target)), extra=-l2 * x, l2=l2)
        dtheta = dots(direction)
        xs = x[:, None, :] + steps[None, :, None] * direction[:, None, :]
        values = objective(theta[:, None] + steps[None, :] * dtheta[:, None], xs)
        return x + _step_size(values, steps)[:, None] * direction

    return lax.fori_loop(0, n_newton, newton, x)


def half_step_dense(
    x: jax.Array,
    other: jax.Array,
    offset: jax.Array,
    target: jax.Array,
    weight: jax.Array,
    l2: jax.Array,
    *,
    loss: str,
    n_newton: int = 8,
) -> jax.Array:
    r""":func:`half_step` with the ratings as dense ``[n, m]`` matrices (``weight`` 0 where
    unrated): the Gram matrices are one matrix product :math:`W (F \otimes F)`, which on
    small, dense-enough matrices (MovieLens-100K: 1.6M cells) is much faster than
    scattering per-pair outer products. Same solution as :func:`half_step`.

    Args:
        x: ``[n, k]`` current parameters (the Newton start; unused for squared loss).
        other: ``[m, k]`` features of the other side.
        offset: ``[m]`` fixed part of :math:`\theta` contributed by the other side.
        target: ``[n, m]`` transformed ratings (any value where unrated).
        weight: ``[n, m]`` 1 where rated, 0 elsewhere.
        l2, loss, n_newton: as in :func:`half_step`.
    """
    n, k = x.shape
    eye = jnp.eye(k, dtype=x.dtype)
    outer = (other[:, :, None] * other[:, None, :]).reshape(other.shape[0], k * k)

    def gram(c):
        return (c @ outer).reshape(n, k, k) + l2 * eye

    if loss == "squared":
        b = (weight * (target - offset[None, :])) @ other
        return jnp.linalg.solve(gram(weight), b[..., None])[..., 0]

    steps = jnp.asarray(_LINE_SEARCH, x.dtype)
    safe_target = jnp.where(weight > 0, target, 0.0)

    def newton(_, x):
        theta = x @ other.T + offset[None, :]
        mu = jnp.exp(theta)
        grad = (weight * (mu - safe_target)) @ other + l2 * x
        direction = -jnp.linalg.solve(gram(weight * mu), grad[..., None])[..., 0]
        dtheta = direction @ other.T
        trial = theta[..., None] + steps * dtheta[..., None]  # [n, m, S]
        terms = jnp.where(
            weight[..., None] > 0, jnp.exp(trial) - safe_target[..., None] * trial, 0.0
        )
        xs = x[:, None, :] + steps[None, :, None] * direction[:, None, :]
        values = jnp.sum(terms, axis=1) + 0.5 * l2 * jnp.sum(xs**2, axis=-1)
        return x + _step_size(values, steps)[:, None] * direction

    return lax.fori_loop(0, n_newton, newton, x)


# ----------------------------------------------------------------------------- transforms


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


# ----------------------------------------------------------------------------- k-means


def _sq_distances(x: jax.Array, centres: jax.Array) -> jax.Array:
    return jnp.sum((x[:, None, :] - centres[None, :, :]) ** 2, axis=-1)


def kmeans_plus_plus(key: jax.Array, x: jax.Array, weight: jax.Array, k: int) -> jax.Array:
    """k-means++ centres (Arthur and Vassilvitskii 2007): the first drawn by ``weight``, each
    next one with probability proportional to ``weight`` times the squared distance to the
    nearest centre so far. ``[k, dim]``."""
    keys = jax.random.split(key, k)
    logw = jnp.log(jnp.where(weight > 0, weight, 0.0))
    first = jax.random.categorical(keys[0], logw)
    centres = jnp.broadcast_to(x[first], (k, x.shape[1]))

    def body(j, centres):
        d2 = jnp.min(jnp.where(jnp.arange(k)[None, :] < j, _sq_distances(x, centres), jnp.inf), 1)
        logits = logw + jnp.log(jnp.maximum(d2, 0.0))
        logits = jnp.where(jnp.all(jnp.isneginf(logits)), logw, logits)  # all points covered
        return centres.at[j].set(x[jax.random.categorical(keys[j], logits)])

    return lax.fori_loop(1, k, body, centres)


def kmeans(x: jax.Array, weight: jax.Array, centres: jax.Array, n_iters: int = 100):
    """Lloyd's k-means from ``centres`` until the centres stop moving (or ``n_iters``); an
    empty cluster keeps its centre. Returns ``(centres [k, dim], labels [n])``."""
    k = centres.shape[0]

    def step(centres):
        labels = jnp.argmin(_sq_distances(x, centres), axis=1)
        mass = jax.ops.segment_sum(weight, labels, num_segments=k)
        sums = jax.ops.segment_sum(weight[:, None] * x, labels, num_segments=k)
        return jnp.where(mass[:, None] > 0, sums / jnp.where(mass > 0, mass, 1)[:, None], centres)

    def cond(carry):
        i, old, new = carry
        return (i < n_iters) & jnp.any(old != new)

    def body(carry):
        i, _, new = carry
        return i + 1, new, step(new)

    _, _, centres = lax.while_loop(cond, body, (1, centres, step(centres)))
    return centres, jnp.argmin(_sq_distances(x, centres), axis=1).astype(jnp.int32)


# ----------------------------------------------------------------------------- prediction


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


def scores(state: State, users: jax.Array, items: jax.Array, *, native: bool = False) -> jax.Array:
    r"""Natural parameters :math:`\theta_{ui}` of ``(users, items)`` (``native``: 1-D ids,
    the products by the compiled kernel in CPU programs)."""
    if native:
        theta = _pair_dots(state.user_factors, state.item_factors, users, items, native=True)
    else:
        theta = jnp.sum(state.user_factors[users] * state.item_factors[items], axis=-1)
    return theta + state.user_bias[users] + state.item_bias[items] + state.offset


def predict_ratings(state: State, users, items, *, loss: str, native: bool = False) -> jax.Array:
    """Predicted ratings: :func:`inverse_transform` of :math:`f(\\theta)` through each user's
    group transform (no clipping; ``native`` as in :func:`scores`)."""
    s = link(scores(state, users, items, native=native), loss)
    return inverse_transform(s, state.transforms[state.group[users]])


# ----------------------------------------------------------------------------- fitting


def _dense_ratings(problem: Problem, cfg: Config):
    """``[n_users, n_items]`` weights and levels of the training ratings (dense path)."""
    pu = problem.by_user
    shape = (cfg.n_users, cfg.n_items)
    weight = jnp.zeros(shape, pu.weight.dtype).at[pu.row, pu.col].add(pu.weight)
    level = jnp.zeros(shape, jnp.int32).at[pu.row, pu.col].max(pu.level)
    return weight, level


def _half_steps(state: State, problem: Problem, l2_user, l2_item, cfg: Config, dense=None) -> State:
    """The global offset (``cfg.offset``), the user half-step (every user from the same item
    side), then the item half-step: exact coordinate minimisation, so the item factors that
    come out are stationary."""
    if cfg.offset:
        state = _refit_offset(state, problem, cfg)
    tr = state.transforms
    if dense is None:
        solver = functools.partial(_half_step, native=cfg.native)
    else:
        solver = half_step_dense
    solver = functools.partial(solver, loss=cfg.loss, n_newton=cfg.n_newton)

    def solve(x, bias, other, other_bias, data, l2):
        start = jnp.concatenate([x, bias[:, None]], 1) if cfg.biases else x
        if cfg.biases:
            other = jnp.concatenate([other, jnp.ones_like(other[:, :1])], axis=1)
        else:
            other_bias = jnp.zeros_like(other_bias)
        other_bias = other_bias + state.offset
        if dense is None:
            pairs, target = data
            new = solver(start, other, pairs.col, other_bias[pairs.col], target, pairs, l2)
        else:
            new = solver(start, other, other_bias, *data, l2)
        return (new[:, :-1], new[:, -1]) if cfg.biases else (new, bias)

    if dense is None:
        pu, pi = problem.by_user, problem.by_item
        data_u = (pu, tr[state.group[pu.row], pu.level])
    else:
        weight, level = dense
        target = jnp.take_along_axis(tr[state.group], level, axis=1)  # [n_users, n_items]
        data_u = (target, weight)
    u, bu = solve(
        state.user_factors, state.user_bias, state.item_factors, state.item_bias, data_u, l2_user
    )
    data_i = (pi, tr[state.group[pi.col], pi.level]) if dense is None else (target.T, weight.T)
    v, bi = solve(state.item_factors, state.item_bias, u, bu, data_i, l2_item)
    return state._replace(user_factors=u, user_bias=bu, item_factors=v, item_bias=bi)


def _refit_offset(state: State, problem: Problem, cfg: Config) -> State:
    r"""The global offset :math:`\mu` minimising the loss with everything else fixed (exact:
    the mean residual for squared loss, :math:`\log \sum t - \log \sum e^{\theta - \mu}`
    for the I-divergence)."""
    pu = problem.by_user
    theta = scores(state, pu.row, pu.col, native=cfg.native)
    target = state.transforms[state.group[pu.row], pu.level]
    w = pu.weight
    if cfg.loss == "squared":
        shift = jnp.sum(w * (target - theta)) / jnp.sum(w)
    else:
        shift = jnp.log(jnp.sum(w * target)) - jnp.log(jnp.sum(w * jnp.exp(theta)))
    return state._replace(offset=state.offset + shift)


def _user_stats(state: State, problem: Problem, cfg: Config):
    pu = problem.by_user
    theta = scores(state, pu.row, pu.col, native=cfg.native)
    return level_stats(theta, pu, cfg.n_users, cfg.n_levels)


def _refit_transforms(state, count_u, total_u, n_groups, epsilon, cfg: Config) -> State:
    """Transforms of the groups in ``state.group`` from per-user level statistics; a group
    without ratings keeps its transform."""
    count = jax.ops.segment_sum(count_u, state.group, num_segments=n_groups)
    total = jax.ops.segment_sum(total_u, state.group, num_segments=n_groups)
    new = transform_step(count, total, epsilon, loss=cfg.loss, anchor=cfg.anchor)
    keep = jnp.any(count > 0, axis=1, keepdims=True)
    return state._replace(transforms=jnp.where(keep, new, state.transforms))


def _reassign(state: State, count_u, total_u, cfg: Config) -> State:
    r"""Each user to the cluster whose transform gives its training ratings the smallest
    loss: :math:`\arg\min_c \sum_r n_{ur}\phi(z_{cr}) - z_{cr} s_{ur}`."""
    z = state.transforms
    loss = count_u @ phi(z, cfg.loss).T - total_u @ z.T
    return state._replace(group=jnp.argmin(loss, axis=1).astype(jnp.int32))


def validation_mse(state: State, problem: Problem, cfg: Config) -> jax.Array:
    """Weighted mean squared error of the predicted ratings on the validation pairs."""
    pv = problem.validation
    pred = predict_ratings(state, pv.row, pv.col, loss=cfg.loss, native=cfg.native)
    err = jnp.where(pv.weight > 0, (pred - (pv.level + 1.0)) ** 2, 0.0)
    return jnp.sum(pv.weight * err) / jnp.maximum(jnp.sum(pv.weight), 1.0)


def _early_stopping(step, state: State, evaluate, n_sweeps: int, patience, tol):
    """Run ``step`` up to ``n_sweeps`` times, stopping after ``patience`` sweeps without
    progress: a validation MSE more than ``tol`` (relative) below the one of the last
    progress; returns the best state (lowest validation MSE), its sweep, MSE and the
    history."""
    dtype = state.user_factors.dtype
    history = jnp.full(n_sweeps, jnp.nan, dtype)

    def cond(c):
        t, _, _, _, _, _, ref_t, _ = c
        return (t < n_sweeps) & (t - 1 - ref_t < patience)

    def body(c):
        t, cur, best, best_mse, best_t, ref_mse, ref_t, history = c
        cur = step(cur)
        mse = evaluate(cur)
        better = mse < best_mse
        progress = mse < ref_mse * (1 - tol)
        best = jax.tree.map(lambda a, b: jnp.where(better, a, b), cur, best)
        return (
            t + 1,
            cur,
            best,
            jnp.where(better, mse, best_mse),
            jnp.where(better, t, best_t),
            jnp.where(progress, mse, ref_mse),
            jnp.where(progress, t, ref_t),
            history.at[t].set(mse),
        )

    inf = jnp.asarray(jnp.inf, dtype)
    init = (jnp.int32(0), state, state, inf, jnp.int32(-1), inf, jnp.int32(-1), history)
    _, _, best, best_mse, best_t, _, _, history = lax.while_loop(cond, body, init)
    return best, best_t, best_mse, history


def initial_state(key: jax.Array, epsilon, cfg: Config) -> State:
    """The random start of a fit (``key``: raw key data, as :func:`fit_one`'s): zero user
    factors, item factors drawn with standard deviation ``cfg.init_scale``, the evenly
    spaced transform."""
    k_init, _ = jax.random.split(jax.random.wrap_key_data(key))
    dtype = jnp.result_type(float)
    g = {"none": 1, "global": 1, "per_user": cfg.n_users, "clustered": cfg.n_users}[cfg.transform]
    return State(
        user_factors=jnp.zeros((cfg.n_users, cfg.rank), dtype),
        item_factors=cfg.init_scale * jax.random.normal(k_init, (cfg.n_items, cfg.rank), dtype),
        user_bias=jnp.zeros(cfg.n_users, dtype),
        item_bias=jnp.zeros(cfg.n_items, dtype),
        transforms=jnp.broadcast_to(
            initial_transform(cfg.n_levels, epsilon, dtype), (g, cfg.n_levels)
        ),
        group=jnp.zeros(cfg.n_users, jnp.int32)
        if g == 1
        else jnp.arange(cfg.n_users, dtype=jnp.int32),
        offset=jnp.zeros((), dtype),
    )


def fit_one(
    problem: Problem,
    key: jax.Array,
    l2_user,
    l2_item,
    epsilon,
    patience,
    tol,
    cfg: Config,
    start: State | None = None,
    sweeps: tuple[jax.Array, jax.Array] | None = None,
) -> tuple[FitOutput, State]:
    """One CMTRF fit (module docstring) with early stopping on the validation MSE.

    ``transform="clustered"``: the per-user fit first (early-stopped), k-means++ and Lloyd
    over its transforms (users with training ratings), then sweeps of (ALS half-steps,
    reassignment of every user by training loss, refit of each cluster's transform), again
    early-stopped. ``key``: raw key data (``jax.random.key_data``). ``start``: a state whose
    factors, biases, offset and transforms replace the random ones of
    :func:`initial_state` (warm start; for ``clustered``, of the per-user phase).
    ``sweeps``: ``(first, second)`` numbers of sweeps of the first and (``clustered``) the
    second phase, run without early stopping (a replay of a chosen fit; the validation MSEs
    are then ``nan``). Returns the fit and the state a next warm-started fit starts from
    (the best state; for ``clustered``, of its per-user phase)."""
    dtype = jnp.result_type(float)
    state = initial_state(key, epsilon, cfg)
    _, k_means = jax.random.split(jax.random.wrap_key_data(key))
    if start is not None:
        state = state._replace(
            user_factors=start.user_factors,
            item_factors=start.item_factors,
            user_bias=start.user_bias,
            item_bias=start.item_bias,
            offset=start.offset,
            transforms=start.transforms,
        )
    evaluate = functools.partial(validation_mse, problem=problem, cfg=cfg)
    dense = _dense_ratings(problem, cfg) if cfg.dense else None

    def sweep(state, reassign=False):
        state = _half_steps(state, problem, l2_user, l2_item, cfg, dense)
        if cfg.transform == "none":
            return state
        count_u, total_u = _user_stats(state, problem, cfg)
        if reassign:
            state = _reassign(state, count_u, total_u, cfg)
        return _refit_transforms(state, count_u, total_u, state.transforms.shape[0], epsilon, cfg)

    def phase(step, state, n_fixed):
        if sweeps is None:
            return _early_stopping(step, state, evaluate, cfg.n_sweeps, patience, tol)
        nan = jnp.full(cfg.n_sweeps, jnp.nan, dtype)
        end = lax.fori_loop(0, n_fixed, lambda _, s: step(s), state)
        return end, n_fixed - 1, jnp.asarray(jnp.nan, dtype), nan

    first, second = (None, None) if sweeps is None else sweeps
    best, best_t, best_mse, history = phase(sweep, state, first)
    pre = jnp.full(cfg.n_sweeps, jnp.nan, dtype)
    carry = best
    if cfg.transform == "clustered":
        pre = history
        count_u, _ = _user_stats(best, problem, cfg)
        rated = (jnp.sum(count_u, axis=1) > 0).astype(dtype)
        per_user = best.transforms
        centres = kmeans_plus_plus(k_means, per_user, rated, cfg.n_clusters)
        centres, labels = kmeans(per_user, rated, centres, cfg.kmeans_iters)
        state = best._replace(transforms=centres, group=labels)
        best, best_t, best_mse, history = phase(
            functools.partial(sweep, reassign=True), state, second
        )
    return FitOutput(best, best_t, best_mse, history, pre), carry


@functools.partial(jit, static_argnames=("cfg",))
def fit_grid(
    problem: Problem, keys, l2_user, l2_item, epsilon, patience, tol, restart=None, *, cfg: Config
):
    """:func:`fit_one` for every grid point (``keys`` ``[P, 2]`` raw key data, ``l2_user``,
    ``l2_item`` ``[P]``), ``vmap``-ped in chunks of ``cfg.batch_size`` points (``None``:
    one point after another). With ``cfg.warm_start``, one after another in the given
    order, each starting from the state :func:`fit_one` returns for the previous point, or,
    where ``restart`` (``[P]`` bool; the first point always) is set, from its own random
    start. Returns the fits and, with ``cfg.warm_start``, the state each point started
    from (``None`` otherwise: the random start of its key)."""
    if cfg.warm_start:

        def chain(prev, args):
            key, lu, li, fresh = args
            start = jax.tree.map(
                lambda a, b: jnp.where(fresh, a, b), initial_state(key, epsilon, cfg), prev
            )
            out, carry = fit_one(problem, key, lu, li, epsilon, patience, tol, cfg, start)
            return carry, (out, start)

        first = initial_state(keys[0], epsilon, cfg)
        fresh = jnp.zeros(keys.shape[0], bool) if restart is None else jnp.asarray(restart)
        _, (out, starts) = lax.scan(chain, first, (keys, l2_user, l2_item, fresh))
        return out, starts

    def one(args):
        key, lu, li = args
        return fit_one(problem, key, lu, li, epsilon, patience, tol, cfg)[0]

    return lax.map(one, (keys, l2_user, l2_item), batch_size=cfg.batch_size), None


@functools.partial(jit, static_argnames=("cfg",))
def replay(problem: Problem, key, l2_user, l2_item, epsilon, start, sweeps, *, cfg: Config):
    """A chosen grid point's fit run again on ``problem`` (typically its training and
    validation ratings together): the same random start (``key``) or warm ``start``, the
    same penalties and the given ``sweeps`` (:func:`fit_one`) per phase, no early
    stopping."""
    zero = jnp.zeros((), jnp.result_type(float))
    out, _ = fit_one(problem, key, l2_user, l2_item, epsilon, 0, zero, cfg, start, sweeps)
    return out.state


@functools.partial(jit, static_argnames=("cfg",))
def replay_starts(problem: Problem, keys, l2_user, l2_item, epsilon, sweeps, *, cfg: Config):
    """:func:`replay` from several random starts (``keys`` ``[S, 2]`` raw key data, ``sweeps``
    a pair of ``[S]`` sweep counts) at the same penalties, in chunks of ``cfg.batch_size``
    (as :func:`fit_grid`); returns the states stacked along a leading ``[S]`` axis."""

    def one(args):
        key, first, second = args
        zero = jnp.zeros((), jnp.result_type(float))
        out, _ = fit_one(
            problem, key, l2_user, l2_item, epsilon, 0, zero, cfg, None, (first, second)
        )
        return out.state

    return lax.map(one, (keys, *sweeps), batch_size=cfg.batch_size)
