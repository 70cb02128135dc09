r"""The pure core of spline calibration: a natural cubic spline basis written in B-spline
coefficients, its roughness penalty, and an exact (projected) Newton solver batched over a
grid of penalties and cross-validation folds.

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

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg
from jax import lax

from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass
from jaxcal._vma import varying_like

__all__ = [
    "SplineStatus",
    "SplineBasis",
    "natural_spline_basis",
    "local_features",
    "spline_logit",
    "penalised_objective",
    "fit_spline_cv",
    "fit_spline_cv_jit",
    "fit_spline_cv_differentiable",
    "penalised_tangent",
]

_ARMIJO = 1e-4
_MAX_HALVINGS = 20


@pytree_dataclass
class SplineStatus:
    r"""The solver's report on the final (refit) problem, and on the cross-validation batch.

    Attributes:
        converged: whether the final fit met the tolerance (bool).
        iterations: Newton iterations of the final fit (int32).
        kkt_residual: the largest violation of the final fit's KKT conditions, in units of
            the mean loss: :math:`\max_k |g_k|` over free coefficients, :math:`\max(0, -g_k)`
            over coefficients held at their bound 0 (``monotone``).
        cv_converged: whether every (penalty, fold) problem of the cross-validation met the
            tolerance (bool; ``True`` when no cross-validation ran).
    """

    converged: jax.Array
    iterations: jax.Array
    kkt_residual: jax.Array
    cv_converged: jax.Array


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


# ------------------------------------------------------------------------------- solver
#: rows of the subsample that estimates the Hessian (all rows up to twice this)
SKETCH_ROWS = 4096


class _Problems(NamedTuple):
    """``B`` penalised fits that share their rows (a grid of penalties times folds)."""

    X: jax.Array  # [n, K] design in theta coordinates (shared)
    t: jax.Array  # [n] targets
    W: jax.Array  # [n, B] weights of each problem
    Wsum: jax.Array  # [B]
    Xs: jax.Array  # [m, K] every stride-th row: the Hessian's rows
    Ws: jax.Array  # [m, B] their weights, scaled to the problem's total weight
    lam: jax.Array  # [B]
    basis: SplineBasis


def _problems(X, t, W, lam, basis) -> _Problems:
    n = X.shape[0]
    stride = max(1, n // SKETCH_ROWS) if n > 2 * SKETCH_ROWS else 1
    Wsum = jnp.sum(W, axis=0)
    Ws = W[::stride]
    Ws = Ws * (Wsum / jnp.maximum(jnp.sum(Ws, axis=0), jnp.finfo(W.dtype).tiny))
    return _Problems(X, t, W, Wsum, X[::stride], Ws, lam, basis)


def _evaluate(pb: _Problems, Th: jax.Array):
    """Objectives ``[B]``, gradients ``[B, K]`` (exact, all rows) and Hessians ``[B, K, K]``
    (the loss part from the row subsample: exact when ``n <= 2 * SKETCH_ROWS``)."""
    Z = pb.X @ Th.T  # [n, B]
    P = jax.nn.sigmoid(Z)
    loss = jnp.sum(pb.W * (jax.nn.softplus(Z) - pb.t[:, None] * Z), axis=0) / pb.Wsum
    # the penalty through f'' at the knots (small at a smooth optimum): its gradient then
    # carries far less rounding than Omega @ theta (entries ~ K^4) would
    M = Th @ pb.basis.curvature.T
    QM = M @ pb.basis.gram
    F = loss + 0.5 * pb.lam * jnp.sum(M * QM, axis=1)
    G = (pb.X.T @ (pb.W * (P - pb.t[:, None]))).T / pb.Wsum[:, None]
    G = G + pb.lam[:, None] * (QM @ pb.basis.curvature)
    Ps = jax.nn.sigmoid(pb.Xs @ Th.T)
    Hd = jnp.einsum("ik,ib,il->bkl", pb.Xs, pb.Ws * Ps * (1 - Ps), pb.Xs)
    H = Hd / pb.Wsum[:, None, None] + pb.lam[:, None, None] * pb.basis.omega[None]
    return F, G, H


def spd_solve(A: jax.Array, b: jax.Array) -> jax.Array:
    """``A^{-1} b`` for a symmetric positive definite ``A`` (Cholesky)."""
    return jax.scipy.linalg.cho_solve(jax.scipy.linalg.cho_factor(A), b)


def _direction(theta, g, H, bounded):
    """Projected Newton direction of one problem and its decrement: coordinates at (or
    within epsilon of) their bound whose gradient points out of the feasible set are held;
    a Jacobi-scaled solve on the others."""
    # Bertsekas' epsilon-active set: a coordinate near its bound whose gradient pushes it
    # out is held at the bound, not left free to be clipped by the projection each step
    eps = jnp.minimum(
        1e-3, jnp.max(jnp.abs(theta - jnp.where(bounded, jnp.maximum(theta - g, 0), theta - g)))
    )
    free = ~bounded | (theta > eps) | (g < 0)
    both = free[:, None] & free[None, :]
    Hr = jnp.where(both, H, 0) + jnp.diag(jnp.where(free, 0.0, 1.0))
    scale = 1 / jnp.sqrt(jnp.maximum(jnp.diag(Hr), jnp.finfo(Hr.dtype).tiny))
    gf = jnp.where(free, g, 0)
    d = -scale * spd_solve(Hr * scale[:, None] * scale[None, :], gf * scale)
    d = jnp.where(free, d, 0)
    return d, -(gf @ d)


class _State(NamedTuple):
    Th: jax.Array
    F: jax.Array
    G: jax.Array
    H: jax.Array
    it: jax.Array
    done: jax.Array
    converged: jax.Array


def _newton(pb: _Problems, Th0, bounded, max_iter, tol):
    """Projected Newton (Bertsekas 1982) on ``B`` problems at once, ``min F_b(theta)``
    s.t. ``theta[bounded] >= 0``: a Newton step on the free coordinates, projected onto the
    bounds and halved (per problem) until the Armijo test, up to the rounding of ``F``,
    holds. A problem stops when half its Newton decrement is below ``tol`` (converged) or
    no step decreases ``F``; the batch stops when all have, or after ``max_iter`` steps.
    Convexity makes the stopping point the optimum; :func:`kkt_residual` reports it."""
    F0, G0, H0 = _evaluate(pb, Th0)
    eps = jnp.finfo(F0.dtype).eps
    B = Th0.shape[0]
    direction = jax.vmap(_direction, in_axes=(0, 0, 0, None))

    def project(Th):
        return jnp.where(bounded[None], jnp.maximum(Th, 0), Th)

    def body(s: _State):
        D, dec = direction(s.Th, s.G, s.H, bounded)
        small = dec / 2 <= tol
        D = jnp.where((s.done | small)[:, None], 0, D)

        def trial(alpha):
            Th = project(s.Th + alpha[:, None] * D)
            F, G, H = _evaluate(pb, Th)
            slack = _ARMIJO * jnp.sum(s.G * (Th - s.Th), axis=1) + 8 * eps * jnp.abs(s.F)
            return Th, F, G, H, F <= s.F + slack

        def cond(c):
            return jnp.any(~c[1][-1]) & (c[2] < _MAX_HALVINGS)

        def halve(c):
            alpha, out, k = c
            alpha = jnp.where(out[-1], alpha, alpha / 2)
            return alpha, trial(alpha), k + 1

        ones = jnp.ones(B, F0.dtype)
        start = varying_like((ones, trial(ones), jnp.int32(0)), F0, s.F)  # inside shard_map
        _, (Th, F, G, H, ok), _ = lax.while_loop(cond, halve, start)
        keep = lambda new, old: jnp.where(  # noqa: E731
            ok.reshape((B,) + (1,) * (new.ndim - 1)), new, old
        )
        done = s.done | small | ~ok
        return _State(
            keep(Th, s.Th),
            keep(F, s.F),
            keep(G, s.G),
            keep(H, s.H),
            s.it + 1,
            done,
            s.converged | (small & ~s.done),
        )

    def cond(s: _State):
        return jnp.any(~s.done) & (s.it < max_iter)

    false = jnp.zeros(B, bool)
    start = _State(Th0, F0, G0, H0, jnp.int32(0), false, false)
    s = lax.while_loop(cond, body, varying_like(start, Th0, F0, G0, H0))  # inside shard_map
    _, dec = direction(s.Th, s.G, s.H, bounded)
    converged = s.converged | (dec / 2 <= tol)
    return s.Th, s.it, converged, jax.vmap(kkt_residual, in_axes=(0, 0, None))(s.Th, s.G, bounded)


def kkt_residual(theta, g, bounded) -> jax.Array:
    """Largest violation of the KKT conditions of ``min F`` s.t. ``theta[bounded] >= 0``:
    :math:`|g_k|` where the coordinate is free or off its bound, :math:`\\max(0, -g_k)` at
    the bound."""
    at_bound = bounded & (theta <= 0)
    return jnp.max(jnp.where(at_bound, jnp.maximum(-g, 0), jnp.abs(g)))


def fit_spline_cv(
    knots: jax.Array,
    x: jax.Array,
    targets: jax.Array,
    weights: jax.Array,
    folds: jax.Array,
    penalties: jax.Array,
    max_iter: jax.Array,
    tol: jax.Array,
    *,
    n_folds: int,
    monotone: bool,
    cross_validate: bool,
):
    """The whole fit in one program: every (penalty, fold) problem in one batched Newton
    solve (the rows' design matrix shared, the problems' linear algebra ``vmap`` ped), the
    cross-validated mean loss per penalty, and the refit on all rows at the penalty with the
    lowest one (ties: the first in the grid).

    Args:
        knots: ``[K]`` knots in x units (``0 = knots[0] < ... < knots[-1] = 1``).
        x: ``[n]`` rows in x units, sorted (padding: zero weight).
        targets, weights: ``[n]`` loss-weighting targets and weights (``jaxcal.losses``).
        folds: ``[n]`` int32 fold of each row (``0..n_folds - 1``).
        penalties: ``[L]`` the grid of :math:`\\lambda`.
        max_iter, tol: Newton iterations; tolerance on half the Newton decrement.
        n_folds, monotone, cross_validate: static (``cross_validate=False``: the refit at
            ``penalties[0]`` only).

    Returns:
        ``(theta [K], cv_loss [L], best index, SplineStatus)``.
    """
    K = knots.shape[0]
    dt = x.dtype
    basis = natural_spline_basis(knots)
    j, phi = local_features(knots, x)
    j = jnp.clip(j, 0, K - 2)  # every training row lies within the knots
    X = jnp.einsum("ir,irk->ik", phi, basis.slots[j])  # [n, K]
    bounded = jnp.arange(K) > 0 if monotone else jnp.zeros(K, bool)
    # start: the constant map at the weighted mean target (theta_0 = its logit)
    rate = jnp.clip(jnp.sum(weights * targets) / jnp.sum(weights), 1e-6, 1 - 1e-6)
    theta0 = jnp.zeros(K, dt).at[0].set(jnp.log(rate) - jnp.log1p(-rate))
    L = penalties.shape[0]
    if cross_validate:
        lam = jnp.repeat(penalties, n_folds)
        fold = jnp.tile(jnp.arange(n_folds), L)
        W = jnp.where(folds[:, None] == fold[None, :], 0, weights[:, None])  # [n, B]
        pb = _problems(X, targets, W, lam, basis)
        Th, _, conv, _ = _newton(pb, jnp.tile(theta0, (L * n_folds, 1)), bounded, max_iter, tol)
        Z = X @ Th.T  # [n, B]
        held = weights[:, None] - W
        loss = jnp.sum(held * (jax.nn.softplus(Z) - targets[:, None] * Z), axis=0)
        cv_loss = loss.reshape(L, n_folds).sum(1) / jnp.sum(weights)
        best = jnp.argmin(cv_loss)
        start = jnp.mean(Th.reshape(L, n_folds, K)[best], axis=0)
        cv_conv = jnp.all(conv)
    else:
        cv_loss = jnp.full((L,), jnp.nan, dt)
        best = jnp.int32(0)
        start, cv_conv = theta0, jnp.asarray(True)
    pb = _problems(X, targets, weights[:, None], penalties[best][None], basis)
    theta, it, conv, kkt = _newton(pb, start[None], bounded, max_iter, tol)
    return theta[0], cv_loss, best, SplineStatus(conv[0], it, kkt[0], cv_conv)


_STATIC = ("n_folds", "monotone", "cross_validate")
#: batches of at least this many (row, problem) pairs compile with XLA's default options
#: (full LLVM optimisation: 3x faster at n = 1e4 with 85 problems, but a compile twice as
#: long); smaller ones with jaxcal's quick-compiling CPU options (``jaxcal._jit``)
LARGE_BATCH = 1 << 20
_fit_quick = jit(fit_spline_cv, static_argnames=_STATIC)
_fit_optimised = jit(fit_spline_cv, static_argnames=_STATIC, xla_defaults=True)


def fit_spline_cv_jit(*args, n_folds: int, monotone: bool, cross_validate: bool):
    """:func:`fit_spline_cv` compiled: with XLA's default options for large batches
    (``n * penalties * folds >= LARGE_BATCH``), else with jaxcal's quick-compiling ones."""
    n, L = args[1].shape[0], args[5].shape[0]
    work = n * L * (n_folds if cross_validate else 1)
    fn = _fit_optimised if work >= LARGE_BATCH else _fit_quick
    return fn(*args, n_folds=n_folds, monotone=monotone, cross_validate=cross_validate)


# ----------------------------------------------------------------- derivatives of the fit
def _pack_status(best, status: SplineStatus, dtype) -> jax.Array:
    return jnp.stack(
        [
            jnp.asarray(best).astype(dtype),
            status.converged.astype(dtype),
            jnp.reshape(status.iterations, ()).astype(dtype),
            status.kkt_residual.astype(dtype),
            status.cv_converged.astype(dtype),
        ]
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _fit_differentiable(spec, knots, x, targets, weights, folds, penalties):
    n_folds, monotone, cross_validate, max_iter, tol = spec
    dt = x.dtype
    theta, cv_loss, best, status = fit_spline_cv(
        knots,
        x,
        targets,
        weights,
        folds,
        penalties,
        jnp.asarray(max_iter, jnp.int32),
        jnp.asarray(tol, dt),
        n_folds=n_folds,
        monotone=monotone,
        cross_validate=cross_validate,
    )
    return theta, cv_loss, _pack_status(best, status, dt)


@_fit_differentiable.defjvp
def _fit_differentiable_jvp(spec, primals, tangents):
    knots, x, targets, weights, _, penalties = primals
    theta, cv_loss, packed = _fit_differentiable(spec, *primals)
    penalty = penalties[packed[0].astype(jnp.int32)]
    monotone = spec[1]
    dtheta = penalised_tangent(theta, penalty, monotone, (knots, x, targets, weights), tangents[:4])
    return (theta, cv_loss, packed), (dtheta, jnp.zeros_like(cv_loss), jnp.zeros_like(packed))


def penalised_tangent(theta, penalty, monotone: bool, primals: tuple, tangents: tuple):
    r"""The derivative of the optimum ``theta`` of :func:`penalised_objective` at a fixed
    ``penalty`` along ``tangents`` of ``primals = (knots, x, targets, weights)`` (knots and
    rows in x units), by the implicit function theorem at the KKT point: the coefficients at
    their bound (``monotone``: :math:`\theta_k = 0`, ``k >= 1``) stay there, the free ones
    solve :math:`H_{FF}\dot\theta_F = -\partial_d g_F\,\dot d` with :math:`g` the gradient
    and :math:`H` the Hessian of the objective in :math:`\theta`."""
    theta = lax.stop_gradient(theta)
    K = theta.shape[0]

    def grad(th, knots, x, t, w):
        return jax.grad(penalised_objective, argnums=1)(knots, th, x, t, w, penalty)

    H = jax.jacfwd(grad)(theta, *primals)
    _, rhs = jax.jvp(lambda *d: grad(theta, *d), primals, tangents)
    held = (jnp.arange(K) > 0) & (theta <= 0) if monotone else jnp.zeros(K, bool)
    both = ~held[:, None] & ~held[None, :]
    Hf = jnp.where(both, H, 0.0) + jnp.diag(jnp.where(held, 1.0, 0.0))
    return -jnp.linalg.solve(Hf, jnp.where(held, 0.0, rhs))


def fit_spline_cv_differentiable(
    knots,
    x,
    targets,
    weights,
    folds,
    penalties,
    *,
    max_iter: int,
    tol: float,
    n_folds: int,
    monotone: bool,
    cross_validate: bool,
):
    """:func:`fit_spline_cv` (one program in the caller's trace) with derivatives in
    ``knots``, ``x``, ``targets`` and ``weights``: ``(theta, cv_loss, best, status)``.

    ``theta`` is differentiated implicitly at the KKT point of the refit, at the chosen
    penalty (:func:`penalised_tangent`), never through the Newton iterations. The choice of
    the penalty by cross-validation is piecewise constant in the data (an ``argmin`` over the
    grid): the derivative is the one at the chosen penalty, and ``cv_loss`` and the status
    carry none. ``max_iter`` and ``tol`` are Python numbers (static).
    """
    spec = (int(n_folds), bool(monotone), bool(cross_validate), int(max_iter), float(tol))
    theta, cv_loss, packed = _fit_differentiable(spec, knots, x, targets, weights, folds, penalties)
    packed = lax.stop_gradient(packed)
    status = SplineStatus(
        converged=packed[1] > 0.5,
        iterations=packed[2].astype(jnp.int32),
        kkt_residual=packed[3],
        cv_converged=packed[4] > 0.5,
    )
    return theta, lax.stop_gradient(cv_loss), packed[0].astype(jnp.int32), status
