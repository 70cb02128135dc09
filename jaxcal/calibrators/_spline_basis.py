r"""The basis of spline calibration: a natural cubic spline written in B-spline
coefficients, its evaluation by interval, and its roughness penalty (the solver that fits
it is :mod:`jaxcal.calibrators._spline_core`).

**Basis.** Knots :math:`\xi_1 < \dots < \xi_K` are mapped to :math:`[0, 1]`
(:math:`x = (u - \xi_1) / R`, :math:`R = \xi_K - \xi_1`). A cubic spline with these knots,
clamped at the ends, has :math:`K + 2` B-spline coefficients :math:`c_0, \dots, c_{K+1}`; it
is *natural* (:math:`f'' = 0` at :math:`\xi_1` and :math:`\xi_K`, linear beyond them) iff

.. math::  c_1 = \frac{c_0 + a_L c_2}{1 + a_L}, \quad
           c_K = \frac{c_{K+1} + a_R c_{K-1}}{1 + a_R}, \quad
           a_L = \frac{\xi_2 - \xi_1}{\xi_3 - \xi_1}, \;
           a_R = \frac{\xi_K - \xi_{K-1}}{\xi_K - \xi_{K-2}},

so the free coefficients are :math:`\gamma = (c_0, c_2, \dots, c_{K-1}, c_{K+1})` (``K`` of
them; :math:`c_1` and :math:`c_K` are convex combinations of their neighbours). The solver's
parameters are their differences, :math:`\theta_0 = \gamma_0`,
:math:`\theta_k = \gamma_k - \gamma_{k-1}`.

**Monotonicity.** A spline whose B-spline coefficients are non-decreasing is non-decreasing
(its derivative is a quadratic spline with coefficients
:math:`3 (c_j - c_{j-1}) / (t_{j+3} - t_j) \ge 0`), and the natural end conditions keep
:math:`c` non-decreasing when :math:`\gamma` is. So :math:`\theta_{1..K-1} \ge 0` makes
:math:`f` non-decreasing on the whole line (also where it extrapolates linearly). The
condition is sufficient, not necessary: a few non-decreasing splines have a decreasing
coefficient pair, and the constrained fit excludes them.

**Evaluation.** On interval :math:`[\xi_j, \xi_{j+1}]` (width :math:`\Delta_j`, local
:math:`s \in [0, 1]`), with values :math:`v` and second derivatives :math:`M` at the knots
(both linear in :math:`\gamma`),

.. math::  f = (1 - s) v_j + s v_{j+1}
           + \tfrac{\Delta_j^2}{6}\big[((1-s)^3 - (1-s)) M_j + (s^3 - s) M_{j+1}\big],

four *slots* per interval times four local features :math:`\phi(s)`; beyond the end knots
:math:`f` continues along its tangent. Each data row touches one interval, so the
gradient and Hessian of the loss are sums of 4 and 10 numbers per row by interval
(``segment_sum``), mapped to :math:`\theta` by a ``[K-1, 4, K]`` table: a Newton step costs
:math:`O(n + K^3)`, not :math:`O(n K^2)`.

**Penalty.** :math:`f''` is linear on each interval, so
:math:`R^3 \int f''(u)^2\,du = \int (d^2 f / dx^2)^2 dx =
\sum_j \tfrac{\Delta_j}{3}(M_j^2 + M_j M_{j+1} + M_{j+1}^2)` exactly (in :math:`x` units).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

__all__ = [
    "SplineBasis",
    "bspline_matrix",
    "natural_spline_basis",
    "local_features",
    "spline_logit",
    "penalised_objective",
]


class SplineBasis(NamedTuple):
    r"""The linear maps of one knot vector (all traced; ``K`` knots).

    Attributes:
        slots: ``[K + 1, 4, K]``: rows 0..K-2 map :math:`\theta` to the four slots of each
            interval, row K-1 to (value, slope) at the left end, row K at the right end.
        omega: ``[K, K]`` roughness penalty :math:`\theta^\top \Omega \theta` (x units),
            :math:`\Omega = C^\top Q C`.
        curvature: ``[K, K]`` :math:`C`: the map :math:`\theta \mapsto f''` at the knots.
        gram: ``[K, K]`` :math:`Q`, tridiagonal: :math:`\int f''^2 = M^\top Q M`.
        gamma: ``[K, K]`` the map :math:`\theta \mapsto \gamma` (cumulative sums).
        coef: ``[K + 2, K]`` the map :math:`\gamma \mapsto c` (natural end conditions).
    """

    slots: jax.Array
    omega: jax.Array
    curvature: jax.Array
    gram: jax.Array
    gamma: jax.Array
    coef: jax.Array


def _safe_div(a, b):
    ok = b != 0
    return jnp.where(ok, a / jnp.where(ok, b, 1), 0)


def bspline_matrix(t: jax.Array, x: jax.Array) -> jax.Array:
    """``[p, m - 4]`` cubic B-spline basis on knot vector ``t`` (``[m]``, clamped) at ``x``
    (``[p]`` in ``[t[0], t[-1]]``; the right end belongs to the last interval)."""
    m = t.shape[0]
    x = x[:, None]
    B = ((x >= t[None, :-1]) & (x < t[None, 1:])).astype(t.dtype)
    last = jnp.zeros(m - 1, bool).at[m - 5].set(True)
    B = jnp.where((x == t[-1]) & last[None, :], 1.0, B)
    for p in range(1, 4):
        left = _safe_div(x - t[None, : m - p - 1], (t[p : m - 1] - t[: m - p - 1])[None])
        right = _safe_div(t[None, p + 1 :] - x, (t[p + 1 :] - t[1 : m - p])[None])
        B = left * B[:, :-1] + right * B[:, 1:]
    return B


def natural_spline_basis(knots: jax.Array) -> SplineBasis:
    """The maps of :class:`SplineBasis` for ``[K]`` strictly increasing knots in x units
    (``knots[0] = 0``, ``knots[-1] = 1``; ``K >= 3``); traceable."""
    xi = jnp.asarray(knots)
    K = xi.shape[0]
    dt = xi.dtype
    t = jnp.concatenate([jnp.repeat(xi[:1], 3), xi, jnp.repeat(xi[-1:], 3)])
    aL = (xi[1] - xi[0]) / (xi[2] - xi[0])
    aR = (xi[-1] - xi[-2]) / (xi[-1] - xi[-3])
    # gamma -> c (K + 2 coefficients)
    T = jnp.zeros((K + 2, K), dt)
    T = T.at[0, 0].set(1.0).at[K + 1, K - 1].set(1.0)
    T = T.at[jnp.arange(2, K), jnp.arange(1, K - 1)].set(1.0)
    T = T.at[1, 0].set(1 / (1 + aL)).at[1, 1].set(aL / (1 + aL))
    T = T.at[K, K - 1].set(1 / (1 + aR)).at[K, K - 2].set(aR / (1 + aR))
    # values at the knots, and second derivatives (differences of the coefficients)
    V = bspline_matrix(t, xi) @ T
    j1 = jnp.arange(1, K + 2)
    D1 = (jnp.eye(K + 2, dtype=dt)[j1] - jnp.eye(K + 2, dtype=dt)[j1 - 1]) * (
        3 / (t[j1 + 3] - t[j1])
    )[:, None]
    j2 = jnp.arange(2, K + 2)
    D2 = (jnp.eye(K + 1, dtype=dt)[j2 - 1] - jnp.eye(K + 1, dtype=dt)[j2 - 2]) * (
        2 / (t[j2 + 2] - t[j2])
    )[:, None]
    Mg = D2 @ D1 @ T  # [K, K]: gamma -> f'' at the knots
    G = jnp.tril(jnp.ones((K, K), dt))  # theta -> gamma
    Vt, Mt = V @ G, Mg @ G
    d = jnp.diff(xi)  # [K - 1]
    c6 = (d**2 / 6)[:, None]
    inner = jnp.stack([Vt[:-1], Vt[1:], c6 * Mt[:-1], c6 * Mt[1:]], axis=1)  # [K-1, 4, K]
    zero = jnp.zeros((K,), dt)
    slope_l = (Vt[1] - Vt[0]) / d[0] - d[0] / 6 * (2 * Mt[0] + Mt[1])
    slope_r = (Vt[-1] - Vt[-2]) / d[-1] + d[-1] / 6 * (Mt[-2] + 2 * Mt[-1])
    ends = jnp.stack(
        [jnp.stack([Vt[0], slope_l, zero, zero]), jnp.stack([Vt[-1], slope_r, zero, zero])]
    )
    slots = jnp.concatenate([inner, ends], axis=0)
    # R^3 * integral of f''^2: f'' linear on each interval
    Q = jnp.zeros((K, K), dt)
    Q = Q.at[jnp.arange(K - 1), jnp.arange(K - 1)].add(d / 3)
    Q = Q.at[jnp.arange(1, K), jnp.arange(1, K)].add(d / 3)
    Q = Q.at[jnp.arange(K - 1), jnp.arange(1, K)].add(d / 6)
    Q = Q.at[jnp.arange(1, K), jnp.arange(K - 1)].add(d / 6)
    omega = Mt.T @ Q @ Mt
    return SplineBasis(
        slots=slots, omega=(omega + omega.T) / 2, curvature=Mt, gram=Q, gamma=G, coef=T
    )


def local_features(knots: jax.Array, x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Interval index (``[n]`` int32; ``K - 1`` left of the knots, ``K`` right of them) and
    local features ``[n, 4]`` of points ``x`` (x units) for the slot table."""
    knots = jnp.asarray(knots)
    K = knots.shape[0]
    j = jnp.clip(jnp.searchsorted(knots, x, side="right") - 1, 0, K - 2)
    d = knots[j + 1] - knots[j]
    s = (x - knots[j]) / d
    r = 1 - s
    inner = jnp.stack([r, s, r**3 - r, s**3 - s], axis=-1)
    one, zero = jnp.ones_like(x), jnp.zeros_like(x)
    left = jnp.stack([one, x - knots[0], zero, zero], axis=-1)
    right = jnp.stack([one, x - knots[-1], zero, zero], axis=-1)
    below, above = x < knots[0], x > knots[-1]
    phi = jnp.where(below[:, None], left, jnp.where(above[:, None], right, inner))
    j = jnp.where(below, K - 1, jnp.where(above, K, j)).astype(jnp.int32)
    return j, phi


def spline_logit(knots: jax.Array, theta: jax.Array, x: jax.Array) -> jax.Array:
    """:math:`f(x)` of points ``x`` (x units, any shape); traceable."""
    basis = natural_spline_basis(knots)
    table = basis.slots @ theta  # [K + 1, 4]
    flat = jnp.ravel(x)
    j, phi = local_features(knots, flat)
    return jnp.sum(phi * table[j], axis=-1).reshape(jnp.shape(x))


def penalised_objective(knots, theta, x, targets, weights, penalty) -> jax.Array:
    r""":math:`\sum_i w_i[\operatorname{softplus}(z_i) - t_i z_i] / \sum_i w_i +
    \tfrac{\lambda}{2}\theta^\top\Omega\theta` (the objective the solver minimises)."""
    z = spline_logit(knots, theta, x)
    basis = natural_spline_basis(knots)
    loss = jnp.sum(weights * (jax.nn.softplus(z) - targets * z)) / jnp.sum(weights)
    M = basis.curvature @ theta
    return loss + 0.5 * penalty * M @ basis.gram @ M
