r"""One problem of the linear-logit solver (:mod:`jaxcal.fitting.solver`): its data in
standardised coordinates (:class:`_Problem`), blocked data passes for the value, gradient and
Hessian of the weighted logistic objective, and damped Newton steps on the subspace where a
given set of constraints is active (:func:`_newton`). The active-set search that calls it,
and the solver's status, are in :mod:`jaxcal.fitting.solver`.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._vma import varying_like

__all__ = [
    "CONVERGED",
    "MAX_ITER",
    "DIVERGED",
    "SEPARABLE",
    "logistic_objective",
    "sketch_stride",
]

# the solver's status codes (jaxcal.fitting.solver.STATUS_MESSAGES); SEPARABLE is set by
# the fits of a family (jaxcal.fitting.linear), never by a Newton loop
CONVERGED, MAX_ITER, DIVERGED, SEPARABLE = 0, 1, 2, 3

# |eta|_inf in standardised coordinates beyond which no calibration map is meaningful.
_DIVERGENCE_BOUND = 1e8
_ARMIJO_C = 1e-4
_MAX_HALVINGS = 40
# Data passes: problems of up to _SINGLE_BLOCK_ROWS rows are one block (XLA then hoists
# the feature computation out of the Newton loop); larger ones run in blocks of at most
# _BLOCK_ROWS rows, whose working set (features, their products) stays in L2 cache.
_SINGLE_BLOCK_ROWS = 16384
_BLOCK_ROWS = 4096
# smallest problem worth a sketch: below it a full pass costs less than compiling the
# sketch's own Newton loop (the sketch is a second problem shape in the program)
_SKETCH_MIN_ROWS = 1 << 16
# Newton steps allowed on the full data from the sketch's optimum before falling back


def logistic_objective(theta, X, targets, weights, l2, *, intercept: int | None):
    """The documented objective ``sum w [softplus(X theta) - t X theta] + l2/2 |theta_-0|^2``."""
    z = X @ theta
    pen = jnp.ones(theta.shape[-1], theta.dtype)
    if intercept is not None:
        pen = pen.at[intercept].set(0.0)
    return jnp.sum(weights * (jax.nn.softplus(z) - targets * z)) + 0.5 * l2 * jnp.sum(
        pen * theta**2
    )


class _Problem(NamedTuple):
    """A standardised problem in blocks of rows: theta = A @ eta, objective in eta.

    The features are never stored: each data pass recomputes them block by block from the
    raw per-row data (``phi(rows[i])``, e.g. the scores), so a pass reads ``rows``, ``t``
    and ``w`` once and the work of a block stays in cache.
    """

    rows: jax.Array  # [n, ...] raw per-row data; phi(rows[i:j]) -> [j - i, p] features
    t: jax.Array  # [n] targets
    w: jax.Array  # [n] weights
    centre: jax.Array  # [p] standardised feature = (phi - centre) * inv_scale
    inv_scale: jax.Array  # [p]
    W: jax.Array  # total weight
    C: jax.Array  # [k, p] constraints in eta coordinates
    C0: jax.Array  # [k, p] constraints in theta coordinates
    Q: jax.Array  # [p, p] A^T diag(l2 * D) A (l2 a scalar or one weight per coefficient)
    A: jax.Array  # [p, p]
    A_inv: jax.Array  # [p, p] its inverse (closed form)
    eta0: jax.Array  # [p] starting point (intercept at logit of the mean target)


class _Candidate(NamedTuple):
    eta: jax.Array
    objective: jax.Array
    code: jax.Array
    n_iter: jax.Array
    grad: jax.Array  # [p] gradient in eta coordinates


def sketch_stride(n: int) -> int:
    """Stride ``k`` of the deterministic subsample ``rows[::k]`` that warm-starts a fit of
    ``n`` rows, or 1 (no sketch) below ``n = 65,536``.

    ``k = floor(sqrt(n) / 16)``, so the sketch has about ``16 sqrt(n)`` rows: its optimum
    is then within ``O(n^{-1/4})`` of the full one in standardised coordinates, close enough
    for three quadratically convergent Newton steps on the full data (e.g. ``k = 62`` at
    ``n = 10^6``). Smaller problems are solved directly: a full data pass then costs
    microseconds, less than compiling the sketch's Newton loop.
    """
    n = max(int(n), 0)
    return math.isqrt(n) // 16 if n >= _SKETCH_MIN_ROWS else 1


def _blocking(n: int) -> tuple[int, int]:
    """``(number of blocks, rows per block)`` covering ``n`` rows in near-equal blocks."""
    if n <= _SINGLE_BLOCK_ROWS:
        return 1, n
    nb = -(-n // _BLOCK_ROWS)
    return nb, -(-n // nb)


def _identity(x, aux):
    return x


def _phi(features, aux):
    features = _identity if features is None else features
    return lambda x: features(x, aux)


def _standardisation(F, w, intercept):
    """Weighted centre (slopes only, into the intercept) and scale of the feature columns,
    and whether they are usable (else the caller standardises on other rows)."""
    p = F.shape[-1]
    W = jnp.sum(w)
    slope = np.ones(p, bool)
    if intercept is not None:
        slope[intercept] = False
    slope = jnp.asarray(slope)
    if intercept is not None:
        centre = jnp.where(slope, w @ F / W, 0.0)
        sd = jnp.sqrt(w @ (F - centre) ** 2 / W)
    else:
        centre = jnp.zeros(p, F.dtype)
        sd = jnp.sqrt(w @ F**2 / W)
    # usable: positive weight, and every slope column spreads beyond rounding of its centre
    spread = sd > jnp.sqrt(jnp.finfo(F.dtype).eps) * jnp.abs(centre)
    usable = (W > 0) & jnp.all(~slope | spread)
    sd = jnp.where(slope & (sd > 0), sd, 1.0)  # NaN (no weight) -> 1 as well
    return slope, centre, sd, usable


def _setup(rows, t, w, C, l2, intercept, phi, stride: int):
    """The standardised full problem and, if ``stride > 1``, its sketch ``rows[::stride]``.

    With a sketch, the standardisation (conditioning only: any centre and scale give the
    same optimum) is taken from the sketch, and the sketch's weights are rescaled to the
    full total weight so that the penalty keeps its relative strength.
    """
    W = jnp.sum(w)
    slope, centre, sd, usable = _standardisation(phi(rows[::stride]), w[::stride], intercept)
    if stride > 1:
        rs, ts, ws = rows[::stride], t[::stride], w[::stride]
        Ws = jnp.sum(ws)
        ws = ws * jnp.where(Ws > 0, W / Ws, 0.0)
        # A sketch without weight, or whose rows do not spread (e.g. all masked), gives no
        # usable scale: then standardise on the full data (one more pass, rare).
        centre, sd = jax.lax.cond(
            usable,
            lambda: (centre, sd),
            lambda: _standardisation(phi(rows), w, intercept)[1:3],
        )
    else:
        rs, ts, ws = rows, t, w
    coords = _coordinates(slope, centre, sd, C, l2, intercept, jnp.sum(w * t) / W)

    def problem(r, t, w):
        return _Problem(r, t, w, centre, 1.0 / sd, jnp.sum(w), *coords)

    return problem(rows, t, w), (problem(rs, ts, ws) if stride > 1 else None)


def _coordinates(slope, centre, sd, C, l2, intercept, tbar):
    """The fields ``(C, C0, Q, A, A_inv, eta0)`` of a :class:`_Problem` standardised by
    ``centre`` and ``sd`` (``slope``: the non-intercept columns), with the mean target
    ``tbar`` for the intercept-only start. ``l2``: a scalar, or ``[p]`` penalty weights (the
    penalty :math:`\\tfrac12\\sum_j l_{2,j}\\theta_j^2` over the slopes)."""
    dtype = sd.dtype
    p = centre.shape[0]
    A = jnp.diag(1.0 / sd)
    if intercept is not None:
        A = A.at[intercept].add(jnp.where(slope, -centre / sd, 0.0))
    A_inv = jnp.diag(sd)  # eta = A_inv theta: eta_j = sd_j theta_j, eta_0 += centre . theta
    if intercept is not None:
        A_inv = A_inv.at[intercept].add(jnp.where(slope, centre, 0.0))
    Q = (A.T * (l2 * slope.astype(dtype))) @ A
    eta0 = jnp.zeros(p, dtype)
    if intercept is not None:
        tbar = jnp.clip(tbar, 1e-6, 1 - 1e-6)
        eta0 = eta0.at[intercept].set(jnp.log(tbar) - jnp.log1p(-tbar))
    return C @ A, C, Q, A, A_inv, eta0


def _value_grad_hess(prob: _Problem, phi, eta):
    """Objective, gradient and Hessian at ``eta`` from one pass over the data.

    Block by block (a ``lax.scan`` when there is more than one): the standardised features
    are recomputed from the raw rows, ``softplus`` and ``sigmoid`` share one ``exp(-|z|)``,
    and the Hessian's ``p (p + 1) / 2`` entries are one matrix-vector product with the
    feature products ``x_j x_k``, all on cache-resident block data.
    """
    p = eta.shape[0]
    j, k = np.triu_indices(p)

    def block(x, t, w):
        Xt = ((phi(x) - prob.centre) * prob.inv_scale).T  # [p, b]
        z = eta @ Xt
        e = jnp.exp(-jnp.abs(z))
        q = e / (1.0 + e)  # sigmoid(-|z|)
        # softplus(z) - t z = (1 - t) softplus(z) + t softplus(-z), and sigmoid(z) - t,
        # written so that a saturated logit on its label's side (t = 1, z >> 0) costs
        # exactly log1p(e) and pulls by -q: no cancellation of z against t z, whose
        # rounding (an ulp of z per row) would stall Newton near a near-step optimum
        f = jnp.sum(w * ((1.0 - t) * jnp.maximum(z, 0.0) + t * jnp.maximum(-z, 0.0)))
        f = f + jnp.sum(w * jnp.log1p(e))
        g = Xt @ (w * jnp.where(z >= 0, (1.0 - t) - q, q - t))
        h = (Xt[j] * Xt[k]) @ (w * q * (1.0 - q))
        return f, g, h

    n = prob.t.shape[0]
    nb, b = _blocking(n)
    if nb == 1:
        f, g, h = block(prob.rows, prob.t, prob.w)
    else:

        def body(i, acc):
            # block i is rows [i b, (i + 1) b); the last one is shifted back to end at n
            # and the rows it shares with block i - 1 get weight 0 (no padded copies)
            start = jnp.minimum(i * b, n - b)
            x, t, w = (jax.lax.dynamic_slice_in_dim(a, start, b) for a in prob[:3])
            w = jnp.where(jnp.arange(b) + start >= i * b, w, 0.0)
            return jax.tree.map(jnp.add, acc, block(x, t, w))

        zero = jnp.zeros((), eta.dtype)
        init = (zero, jnp.zeros(p, eta.dtype), jnp.zeros(j.size, eta.dtype))
        f, g, h = jax.lax.fori_loop(0, nb, body, init)
    H = jnp.zeros((p, p), eta.dtype).at[j, k].set(h).at[k, j].set(h)
    return f + 0.5 * eta @ prob.Q @ eta, g + prob.Q @ eta, H + prob.Q


def _spd_solve(M, b):
    """``M^{-1} b`` for a small symmetric positive definite ``M`` (``[p, p]``) and ``b`` of
    shape ``[p]`` or ``[p, m]``: Gauss-Jordan elimination on ``[M | b]``, unrolled over the
    ``p`` (static, tiny) pivots.

    Without pivoting, which a positive definite matrix does not need (the pivots are the
    ones of its Cholesky factorisation, squared). A few whole-matrix operations per pivot:
    XLA fuses them into a handful of kernels, where LAPACK's pivoted LU and triangular
    solves add a dozen kernels per call site to the solver's programs.
    """
    p = M.shape[-1]
    vec = b.ndim == 1
    A = jnp.concatenate([M, b[:, None] if vec else b], axis=1)  # [p, p + m]
    rows = np.arange(p)[:, None]
    for j in range(p):
        pivot_row = A[j] / A[j, j]
        A = jnp.where(rows == j, pivot_row[None, :], A - A[:, j : j + 1] * pivot_row[None, :])
    x = A[:, p:]
    return x[:, 0] if vec else x


def _row_gram_solve(C, active, b):
    """``G^{-1} b`` with ``G = C_S C_S^T + diag(not active)`` (identity on inactive rows)."""
    Ca = C * active[:, None]
    G = Ca @ Ca.T + jnp.diag(jnp.where(active, 0.0, 1.0))
    return _spd_solve(G, b), Ca


def _projector(C, active):
    """Orthogonal projector onto ``{eta : C_S eta = 0}`` for the rows ``S`` in ``active``:
    ``I - C_S^T (C_S C_S^T)^{-1} C_S`` (the rows are linearly independent)."""
    p = C.shape[1]
    if C.shape[0] == 0:
        return jnp.eye(p, dtype=C.dtype)
    GinvCa, Ca = _row_gram_solve(C, active, C * active[:, None])
    return jnp.eye(p, dtype=C.dtype) - Ca.T @ GinvCa


def _newton(prob: _Problem, phi, active, max_iter, tol) -> _Candidate:
    """Damped Newton on ``{eta : C_S eta = 0}`` (``S`` = the ``active`` rows).

    The step solves ``(P H P + I - P) d = -P g`` with ``P`` the projector onto the
    subspace, i.e. the Newton step of the problem restricted to it (``d = P d``). Each loop
    iteration evaluates the objective, gradient and Hessian at one trial point in a single
    data pass; the trial is accepted by the Armijo test (then it is the next iterate and its
    derivatives are already at hand) or the step is halved.

    The loop is :func:`_newton_start`, then :func:`_newton_update` after each data pass at
    :func:`_newton_trial` while :func:`_newton_running`: the pieces a streamed fit
    (``jaxcal.fitting.streamed``) runs with its passes over chunks instead.
    """
    P, init = _newton_start(prob, active)
    init = varying_like(init, prob)  # inside shard_map the carry varies as the data does

    def body(state):
        f_t, g_t, H_t = _value_grad_hess(prob, phi, _newton_trial(state))
        return _newton_update(P, prob.W, tol, state, f_t, g_t, H_t)

    state = jax.lax.while_loop(lambda state: _newton_running(state, max_iter), body, init)
    return _newton_candidate(state)


# The loop's first trial is the start itself (alpha * d = 0, accepted against f = inf),
# so the data pass is traced once; n_iter counts the Newton steps after it.
# The iterate's vectors and values travel packed in one array x = [eta, g, d, f, dec],
# so accepting a trial is one select (a kernel per leaf would double the compile time).
# The loop state is (x, alpha, halvings, it, code, done).
def _unpack_iterate(x):
    p = (x.shape[0] - 2) // 3
    return x[:p], x[p : 2 * p], x[2 * p : 3 * p], x[3 * p], x[3 * p + 1]


def _pack_iterate(eta, g, d, f, dec):
    return jnp.concatenate([eta, g, d, jnp.stack([f, dec])])


def _newton_start(prob: _Problem, active):
    """The projector onto the face of the ``active`` rows and the loop's initial state."""
    dtype = prob.t.dtype
    p = prob.C.shape[1]
    P = _projector(prob.C, active)
    zero = jnp.zeros(p, dtype)
    inf = jnp.asarray(jnp.inf, dtype)
    x0 = _pack_iterate(P @ prob.eta0, zero, zero, inf, jnp.zeros((), dtype))
    init = (x0, jnp.ones((), dtype), jnp.int32(0), jnp.int32(0), jnp.int32(MAX_ITER), False)
    return P, init


def _newton_running(state, max_iter):
    it, done = state[3], state[5]
    return (~done) & (it <= max_iter)


def _newton_trial(state):
    """The point the next data pass evaluates."""
    x, alpha = state[0], state[1]
    eta, _, d, _, _ = _unpack_iterate(x)
    return eta + alpha * d


def _newton_direction(P, g, H):
    """The Newton step within the subspace of projector ``P`` and its decrement."""
    dtype = g.dtype
    eps = jnp.finfo(dtype).eps
    eye = jnp.eye(g.shape[0], dtype=dtype)
    Hs = P @ H @ P
    ridge = eps * jnp.trace(Hs) / jnp.maximum(jnp.trace(P), 1.0)
    gs = P @ g  # the gradient within the subspace
    d = P @ -_spd_solve(Hs + ridge * P + (eye - P), gs)
    return d, -(gs @ d)


def _newton_update(P, W, tol, state, f_t, g_t, H_t):
    """The loop state after the data pass at :func:`_newton_trial`: objective ``f_t``,
    gradient ``g_t`` and Hessian ``H_t`` there (``W``: the total weight)."""
    x, alpha, halvings, it, code, done = state
    eta, g, d, f, dec = _unpack_iterate(x)
    dtype = eta.dtype
    eps = jnp.finfo(dtype).eps
    trial = eta + alpha * d
    slack = 8 * eps * jnp.abs(f)
    ok = jnp.isfinite(f_t) & (f_t <= f - _ARMIJO_C * alpha * dec + slack)
    d_t, dec_t = _newton_direction(P, g_t, H_t)
    out_of_range = jnp.max(jnp.abs(trial)) > _DIVERGENCE_BOUND
    # A decrement below -tol is no rounding: the Hessian is numerically singular (saturated
    # logits far from any optimum, e.g. a warm start projected onto a face) and d_t is no
    # descent direction. Such a point is no optimum: the candidate fails (its stage may run
    # again from a cold start), never "converged" because the decrement is below tol.
    indefinite = dec_t < -2 * tol * W
    bad_step = ok & (out_of_range | ~jnp.all(jnp.isfinite(d_t)) | indefinite)
    # f = inf until the start is accepted: a non-finite objective there is final
    gave_up = (~ok) & ((halvings + 1 >= _MAX_HALVINGS) | jnp.isinf(f))
    diverged = bad_step | gave_up
    accept = ok & ~bad_step
    converged = accept & (dec_t <= 2 * tol * W)
    code = jnp.where(diverged, DIVERGED, jnp.where(converged, CONVERGED, MAX_ITER))
    return (
        jnp.where(accept, _pack_iterate(trial, g_t, d_t, f_t, dec_t), x),
        jnp.where(accept, 1.0, 0.5 * alpha).astype(dtype),
        jnp.where(accept, 0, halvings + 1),
        jnp.where(accept | diverged, it + 1, it),
        code.astype(jnp.int32),
        diverged | converged,
    )


def _newton_candidate(state) -> _Candidate:
    """The candidate of a finished loop."""
    x, it, code = state[0], state[3], state[4]
    eta, g, _, f, _ = _unpack_iterate(x)
    return _Candidate(eta, f, code, jnp.maximum(it - 1, 0), g)
