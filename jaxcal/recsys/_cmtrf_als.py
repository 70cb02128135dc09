r"""The ALS half-steps of CMTRF (:mod:`jaxcal.recsys._cmtrf_core`): each row's factors
given the other side's, minimising its ratings' loss plus ridge.

The squared loss has a closed form; the I-divergence takes damped Newton steps whose step
size is the best of a few trial steps per row. The ratings come as pairs (:class:`Pairs`:
per-row systems summed by ``segment_sum``, or in CPU programs by the compiled kernels
``jaxcal._native.ridge_rows_cpu`` / ``pair_scores_cpu``) or as dense matrices
(:func:`half_step_dense`). Pure functions of arrays (jittable, ``vmap``-able).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxcal._native import pair_scores_cpu, ridge_rows_cpu

__all__ = ["Pairs", "half_step", "half_step_dense", "pair_dots"]

_LINE_SEARCH = (1.0, 0.5, 0.25, 0.125, 0.0625, 0.0)


class Pairs(NamedTuple):
    """Ratings of one ordering: ``row`` sorted (the side being solved), padded entries at the
    end with ``weight`` 0."""

    row: jax.Array  # [P] int32
    col: jax.Array  # [P] int32
    level: jax.Array  # [P] int32, rating - 1
    weight: jax.Array  # [P] float, 1 (0 on padding)


def _step_size(values: jax.Array, steps: jax.Array) -> jax.Array:
    """Per row, the largest step whose objective (``[n, S]``, steps decreasing) is the
    smallest up to rounding: near the optimum every trial ties, and the full Newton step
    keeps the convergence quadratic."""
    values = jnp.where(jnp.isnan(values), jnp.inf, values)
    best = jnp.min(values, axis=1, keepdims=True)
    tol = 64 * jnp.finfo(values.dtype).eps * (jnp.abs(best) + 1.0)
    return steps[jnp.argmax(values <= best + tol, axis=1)]


def pair_dots(a, b, row, col, *, native: bool) -> jax.Array:
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

    dots = functools.partial(pair_dots, b=other, row=pairs.row, col=col, native=native)
    seg = functools.partial(
        jax.ops.segment_sum, segment_ids=pairs.row, num_segments=n, indices_are_sorted=True
    )

    def direction_and_loss(x, steps):
        theta = dots(x) + offset
        mu = jnp.exp(theta)
        # the Newton direction -(F^T W M F + l2 I)^{-1} (F^T W (mu - t) + l2 x)
        direction = ridge(other, c=w * mu, r=-(w * (mu - target)), extra=-l2 * x, l2=l2)
        trial = theta[:, None] + steps[None, :] * dots(direction)[:, None]  # [P, S]
        terms = jnp.where(w[:, None] > 0, jnp.exp(trial) - target[:, None] * trial, 0.0)
        return direction, seg(terms)

    return _damped_newton(x, l2, n_newton, direction_and_loss)


def _damped_newton(x, l2, n_newton: int, direction_and_loss) -> jax.Array:
    """``n_newton`` damped Newton steps from ``x`` (``[n, k]``) on the I-divergence plus
    ridge: ``direction_and_loss(x, steps)`` gives each row's Newton direction (``[n, k]``)
    and its ratings' loss at every trial step ``x + s * direction`` (``[n, S]``, ``s`` in
    ``steps``); each row moves by the step :func:`_step_size` picks."""
    steps = jnp.asarray(_LINE_SEARCH, x.dtype)

    def newton(_, x):
        direction, data = direction_and_loss(x, steps)
        xs = x[:, None, :] + steps[None, :, None] * direction[:, None, :]
        values = data + 0.5 * l2 * jnp.sum(xs**2, axis=-1)
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

    safe_target = jnp.where(weight > 0, target, 0.0)

    def direction_and_loss(x, steps):
        theta = x @ other.T + offset[None, :]
        mu = jnp.exp(theta)
        grad = (weight * (mu - safe_target)) @ other + l2 * x
        direction = -jnp.linalg.solve(gram(weight * mu), grad[..., None])[..., 0]
        dtheta = direction @ other.T
        trial = theta[..., None] + steps * dtheta[..., None]  # [n, m, S]
        terms = jnp.where(
            weight[..., None] > 0, jnp.exp(trial) - safe_target[..., None] * trial, 0.0
        )
        return direction, jnp.sum(terms, axis=1)

    return _damped_newton(x, l2, n_newton, direction_and_loss)
