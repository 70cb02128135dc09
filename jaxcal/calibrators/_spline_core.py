r"""The pure core of spline calibration: an exact (projected) Newton solver batched over a
grid of penalties and cross-validation folds, and the derivative of its fit.

The spline (:mod:`jaxcal.calibrators._spline_basis`) is linear in its coefficients
:math:`\theta`: with the design :math:`X` (``[n, K]``, each row the slot table of its
interval applied to its local features) the logits are :math:`z = X\theta`, the objective
the mean weighted log loss plus :math:`\tfrac{\lambda}{2}\theta^\top\Omega\theta`. Every
(penalty, fold) problem shares :math:`X` and has its own weights, so the cross-validation is
one batched solve (:func:`fit_spline_cv`); the refit on all rows at the chosen penalty is
one more. The small linear systems of the Newton steps are solved in JAX
(:func:`spd_solve`), never by LAPACK.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass
from jaxcal._vma import varying_like
from jaxcal.calibrators._spline_basis import (
    SplineBasis,
    local_features,
    natural_spline_basis,
    penalised_objective,
    spline_logit,
)

__all__ = [
    "SplineStatus",
    "SplineBasis",
    "natural_spline_basis",
    "local_features",
    "spline_logit",
    "penalised_objective",
    "spd_solve",
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
    """``A^{-1} b`` for a symmetric positive definite ``A`` (``[K, K]``, ``b`` ``[K]``): the
    Cholesky factor column by column, then the two triangular solves, each a
    ``lax.fori_loop`` over the ``K`` columns (a matrix that is not positive definite gives
    NaN).

    In JAX rather than LAPACK's: on CPU, LAPACK's batched factorisation (``cho_factor``
    under ``vmap``) splits a large batch over the thread pool and blocks a pool thread until
    the pieces finish, so under ``shard_map`` over as many CPU devices as pool threads every
    thread waits and the program never ends."""
    K = A.shape[-1]
    idx = jnp.arange(K)

    def factor(j, c):  # right-looking: column j of L, then the trailing update
        R, L = c
        col = jnp.where(idx >= j, R[:, j], 0.0) / jnp.sqrt(R[j, j])
        return R - col[:, None] * col[None, :], L.at[:, j].set(col)

    zero_L, zero_b = varying_like((jnp.zeros_like(A), jnp.zeros_like(b)), A, b)  # shard_map
    _, L = lax.fori_loop(0, K, factor, (A, zero_L))

    def forward(j, y):  # L y = b; y[j:] is still 0
        return y.at[j].set((b[j] - L[j] @ y) / L[j, j])

    y = lax.fori_loop(0, K, forward, zero_b)

    def backward(i, x):  # L^T x = y; x[:j + 1] is still 0
        j = K - 1 - i
        return x.at[j].set((y[j] - L[:, j] @ x) / L[j, j])

    return lax.fori_loop(0, K, backward, zero_b)


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
    return -spd_solve(Hf, jnp.where(held, 0.0, rhs))


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
