r"""Exact solver for monotone (linearly constrained) weighted logistic regression.

Every parametric calibrator in jaxcal fits a *linear-logit* map :math:`z = \phi(s)^\top
\theta` by minimising the convex objective

.. math::

    L(\theta) = \sum_i w_i \,[\operatorname{softplus}(x_i^\top\theta) - t_i\, x_i^\top\theta]
        + \tfrac{\lambda_2}{2}\,\lVert \theta_{\setminus 0} \rVert^2
    \quad\text{subject to}\quad C\theta \ge 0,

where :math:`x_i = \phi(s_i)`, :math:`(t, w)` come from ``jaxcal.debias.losses``, the
penalty omits the intercept, and the :math:`k \le 2` homogeneous rows of :math:`C` encode
monotonicity on the training score range.

Method (exact for this convex problem):

1. **Conditioning.** Non-intercept feature columns are standardised internally,
   :math:`\tilde X = X A` (weighted centring into the intercept, scaling by the weighted
   standard deviation), i.e. :math:`\theta = A\eta`. The objective is unchanged: the
   penalty becomes :math:`\tfrac{\lambda_2}{2}\eta^\top A^\top D A\,\eta` and the
   constraints :math:`C A\,\eta \ge 0`.
2. **Active-set enumeration.** With :math:`k` constraints there are :math:`2^k \le 4`
   candidate active sets :math:`S`. For each, the problem restricted to the null space of
   the active rows (:math:`\eta = N_S\zeta`) is solved by damped Newton: one data pass gives
   the gradient and the :math:`p\times p` Hessian :math:`\tilde X^\top \operatorname{diag}(w
   \sigma(1-\sigma))\tilde X`, the step is accepted by backtracking Armijo line search, and
   the loop (a ``lax.while_loop``) stops when half the squared Newton decrement falls below
   ``tol * sum(w)`` or after ``max_iter`` steps.
   The constrained candidates start from the unconstrained optimum projected onto their
   subspace (a warm start: usually 2-3 Newton steps).
3. **Selection.** The solution is the feasible candidate with the lowest objective. For a
   convex problem this is the constrained optimum: the optimum is the minimiser over the
   subspace of its own active set, and it is feasible. The unconstrained candidate is
   solved first; the others are solved only when it is infeasible (``lax.cond``; in the
   batched solver the condition is "any problem in the batch").

The returned :class:`SolverStatus` reports convergence, the active set, the Lagrange
multipliers :math:`\mu \ge 0` of :math:`\nabla L = C^\top\mu` and the KKT residual.

Unbounded objectives (possible with IPS targets :math:`t > 1`, where :math:`\sum_i w_i t_i >
\sum_i w_i` sends the intercept to :math:`+\infty`) and separable data with
``l2 = 0`` have no minimiser: the solver stops with ``converged = False`` (code
``DIVERGED`` or ``MAX_ITER``) and returns its last finite iterate, never NaN. The estimator
shells turn this into a :class:`ConvergenceWarning`.
"""

from __future__ import annotations

import itertools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._pytree import pytree_dataclass

__all__ = [
    "SolverStatus",
    "ConvergenceWarning",
    "CONVERGED",
    "MAX_ITER",
    "DIVERGED",
    "STATUS_MESSAGES",
    "solve",
    "solve_batch",
    "logistic_objective",
    "warn_if_not_converged",
]

CONVERGED, MAX_ITER, DIVERGED = 0, 1, 2
STATUS_MESSAGES = {
    CONVERGED: "converged",
    MAX_ITER: "reached max_iter before the Newton decrement fell below tol (separable data? "
    "try l2 > 0 or a larger max_iter)",
    DIVERGED: "diverged: the objective is unbounded below or has no minimiser (IPS targets "
    "t > 1 can make the logistic loss unbounded; try loss='snips' or 'ips_positive')",
}
# |eta|_inf in standardised coordinates beyond which no calibration map is meaningful.
_DIVERGENCE_BOUND = 1e8
_ARMIJO_C = 1e-4
_MAX_HALVINGS = 40


class ConvergenceWarning(RuntimeWarning):
    """A calibrator's solver did not converge; its ``status`` says why."""


@pytree_dataclass
class SolverStatus:
    """Outcome of a constrained fit (leaves gain leading batch dimensions in batched fits).

    Attributes:
        converged: ``bool``; the selected candidate met the Newton-decrement tolerance.
        code: ``int32``; ``CONVERGED`` (0), ``MAX_ITER`` (1) or ``DIVERGED`` (2).
        n_iter: ``int32``; Newton iterations of the selected candidate.
        objective: the objective :math:`L(\\theta)` at the solution.
        active: ``bool[k]``; which monotonicity constraints are active (held with equality).
        multipliers: ``[k]``; Lagrange multipliers :math:`\\mu` (0 where inactive);
            KKT requires :math:`\\mu \\ge 0`.
        kkt_residual: :math:`\\max_j |\\nabla L(\\theta) - C^\\top\\mu|_j` (original scale).
    """

    converged: jax.Array
    code: jax.Array
    n_iter: jax.Array
    objective: jax.Array
    active: jax.Array
    multipliers: jax.Array
    kkt_residual: jax.Array

    @property
    def message(self) -> str:
        """Human-readable summary (worst case over a batch)."""
        code = int(np.max(np.asarray(self.code)))
        return STATUS_MESSAGES[code]


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
    """A standardised problem: theta = A @ eta, objective in eta."""

    X: jax.Array  # [n, p] standardised features
    t: jax.Array
    w: jax.Array
    C: jax.Array  # [k, p] constraints in eta coordinates
    C0: jax.Array  # [k, p] constraints in theta coordinates
    Q: jax.Array  # [p, p] l2 * A^T D A
    A: jax.Array  # [p, p]
    eta0: jax.Array  # [p] starting point (intercept at logit of the mean target)


class _Candidate(NamedTuple):
    eta: jax.Array
    objective: jax.Array
    code: jax.Array
    n_iter: jax.Array
    grad: jax.Array  # [p] gradient in eta coordinates


def _standardise(X, t, w, C, l2, intercept):
    dtype = X.dtype
    p = X.shape[-1]
    W = jnp.sum(w)
    slope = np.ones(p, bool)
    if intercept is not None:
        slope[intercept] = False
    slope = jnp.asarray(slope)
    mean = jnp.sum(w[:, None] * X, axis=0) / W
    if intercept is not None:
        centre = jnp.where(slope, mean, 0.0)
        sd = jnp.sqrt(jnp.sum(w[:, None] * (X - centre) ** 2, axis=0) / W)
    else:
        centre = jnp.zeros(p, dtype)
        sd = jnp.sqrt(jnp.sum(w[:, None] * X**2, axis=0) / W)
    sd = jnp.where(slope & (sd > 0), sd, 1.0)
    Xs = jnp.where(slope, (X - centre) / sd, X)
    A = jnp.diag(1.0 / sd)
    if intercept is not None:
        A = A.at[intercept].add(jnp.where(slope, -centre / sd, 0.0))
    D = jnp.diag(slope.astype(dtype))
    Q = l2 * (A.T @ D @ A)
    eta0 = jnp.zeros(p, dtype)
    if intercept is not None:
        tbar = jnp.clip(jnp.sum(w * t) / W, 1e-6, 1 - 1e-6)
        eta0 = eta0.at[intercept].set(jnp.log(tbar) - jnp.log1p(-tbar))
    return _Problem(Xs, t, w, C @ A, C, Q, A, eta0)


def _null_space(C_S, p):
    """Orthonormal basis [p, p - |S|] of {eta : C_S eta = 0} (C_S has full row rank)."""
    m = C_S.shape[0]
    if m == 0:
        return jnp.eye(p, dtype=C_S.dtype)
    _, _, vt = jnp.linalg.svd(C_S, full_matrices=True)
    return vt[m:].T


def _newton(prob: _Problem, N, max_iter, tol) -> _Candidate:
    """Damped Newton on zeta with eta = N zeta (one data pass per gradient + Hessian)."""
    X, t, w, Q = prob.X, prob.t, prob.w, prob.Q
    dtype = X.dtype
    eps = jnp.finfo(dtype).eps
    q = N.shape[1]
    W = jnp.sum(w)

    def value(z, eta):
        return jnp.sum(w * (jax.nn.softplus(z) - t * z)) + 0.5 * eta @ Q @ eta

    def derivatives(z, eta):
        mu = jax.nn.sigmoid(z)
        g = X.T @ (w * (mu - t)) + Q @ eta
        H = (X * (w * mu * (1.0 - mu))[:, None]).T @ X + Q
        return N.T @ g, N.T @ H @ N

    zeta0 = N.T @ prob.eta0
    eta0 = N @ zeta0
    z0 = X @ eta0
    f0 = value(z0, eta0)
    g0, H0 = derivatives(z0, eta0)

    def newton_step(g, H):
        ridge = eps * jnp.trace(H) / q
        d = -jnp.linalg.solve(H + ridge * jnp.eye(q, dtype=dtype), g)
        return d, -(g @ d)

    d0, dec0 = newton_step(g0, H0)
    done0 = dec0 <= 2 * tol * W
    code0 = jnp.where(done0, CONVERGED, MAX_ITER).astype(jnp.int32)
    # state: zeta, z, f, g, H, d, dec, it, code, done
    init = (zeta0, z0, f0, g0, H0, d0, dec0, jnp.int32(0), code0, done0)

    def cond(state):
        it, done = state[7], state[9]
        return (~done) & (it < max_iter)

    def body(state):
        zeta, z, f, g, H, d, dec, it, code, done = state
        eta_d = N @ d
        dz = X @ eta_d
        eta = N @ zeta
        slack = 8 * eps * jnp.abs(f)

        def ls_cond(ls):
            alpha, f_new, k = ls
            ok = jnp.isfinite(f_new) & (f_new <= f - _ARMIJO_C * alpha * dec + slack)
            return (~ok) & (k < _MAX_HALVINGS)

        def ls_body(ls):
            alpha, _, k = ls
            alpha = 0.5 * alpha
            e = eta + alpha * eta_d
            return alpha, value(z + alpha * dz, e), k + 1

        one = jnp.ones((), dtype)
        alpha, f_new, k = jax.lax.while_loop(
            ls_cond, ls_body, (one, value(z + dz, eta + eta_d), jnp.int32(0))
        )
        ok = jnp.isfinite(f_new) & (f_new <= f - _ARMIJO_C * alpha * dec + slack)
        zeta_new = zeta + alpha * d
        eta_new = N @ zeta_new
        diverged = (~ok) | (jnp.max(jnp.abs(eta_new)) > _DIVERGENCE_BOUND)
        z_new = z + alpha * dz
        g_new, H_new = derivatives(z_new, eta_new)
        d_new, dec_new = newton_step(g_new, H_new)
        bad = diverged | ~jnp.all(jnp.isfinite(d_new))
        converged = (~bad) & (dec_new <= 2 * tol * W)
        keep = lambda old, new: jnp.where(bad, old, new)  # noqa: E731
        new_state = (
            keep(zeta, zeta_new),
            keep(z, z_new),
            keep(f, f_new),
            keep(g, g_new),
            keep(H, H_new),
            keep(d, d_new),
            keep(dec, dec_new),
            it + 1,
            jnp.where(bad, DIVERGED, jnp.where(converged, CONVERGED, MAX_ITER)).astype(jnp.int32),
            bad | converged,
        )
        return new_state

    zeta, z, f, g, H, d, dec, it, code, done = jax.lax.while_loop(cond, body, init)
    eta = N @ zeta
    mu = jax.nn.sigmoid(z)
    grad = X.T @ (w * (mu - t)) + Q @ eta
    return _Candidate(eta, f, code, it, grad)


def _subsets(k: int) -> list[tuple[int, ...]]:
    return [s for r in range(k + 1) for s in itertools.combinations(range(k), r)]


def _candidate(prob: _Problem, S: tuple[int, ...], max_iter, tol) -> _Candidate:
    p = prob.X.shape[1]
    if len(S) == p:  # every coefficient pinned to zero by the active rows
        eta = jnp.zeros(p, prob.X.dtype)
        z = jnp.zeros_like(prob.t)
        f = jnp.sum(prob.w * jax.nn.softplus(z))
        grad = prob.X.T @ (prob.w * (0.5 - prob.t))
        return _Candidate(eta, f, jnp.int32(CONVERGED), jnp.int32(0), grad)
    N = _null_space(prob.C[np.array(S, dtype=int)], p)
    return _newton(prob, N, max_iter, tol)


def _finish(prob: _Problem, cands: list[_Candidate], subsets) -> tuple[jax.Array, SolverStatus]:
    """Pick the feasible candidate with the lowest objective; multipliers and KKT residual."""
    k = prob.C.shape[0]
    objs, etas, mus, actives, kkts = [], [], [], [], []
    for S, c in zip(subsets, cands, strict=True):
        inactive = np.array([j not in S for j in range(k)], bool)
        slack = prob.C @ c.eta
        feasible = jnp.all(jnp.where(inactive, slack >= 0, True))
        # multipliers of the active rows: grad = C_S^T mu_S (least squares)
        mu = jnp.zeros(k, prob.X.dtype)
        if S:
            C_S = prob.C[np.array(S, dtype=int)]
            mu_S = jnp.linalg.solve(C_S @ C_S.T, C_S @ c.grad)
            mu = mu.at[np.array(S, dtype=int)].set(mu_S)
        resid_eta = c.grad - prob.C.T @ mu
        # back to original coordinates: grad_theta = A^{-T} grad_eta
        resid = jnp.linalg.solve(prob.A.T, resid_eta)
        obj = jnp.where(jnp.isnan(c.objective), jnp.inf, c.objective)
        objs.append(jnp.where(feasible, obj, jnp.inf))
        etas.append(c.eta)
        mus.append(mu)
        actives.append(jnp.asarray(~inactive))
        kkts.append(jnp.max(jnp.abs(resid)))
    best = jnp.argmin(jnp.stack(objs))
    pick = lambda xs: jnp.stack(xs)[best]  # noqa: E731
    eta = pick(etas)
    active = pick(actives)
    theta = _project_active(prob.A @ eta, prob.C0, active)
    status = SolverStatus(
        converged=pick([c.code for c in cands]) == CONVERGED,
        code=pick([c.code for c in cands]),
        n_iter=pick([c.n_iter for c in cands]),
        objective=pick([c.objective for c in cands]),
        active=active,
        multipliers=pick(mus),
        kkt_residual=pick(kkts),
    )
    return theta, status


def _project_active(theta, C, active):
    """Remove the rounding residue of ``C_S theta = 0`` (e.g. ``b = -1e-16`` in beta
    calibration): orthogonal projection of ``theta`` onto the active rows' null space."""
    Ca = C * active[:, None]
    G = Ca @ Ca.T + jnp.diag(jnp.where(active, 0.0, 1.0))
    return theta - Ca.T @ jnp.linalg.solve(G, Ca @ theta)


def _feasible_converged(prob: _Problem, c: _Candidate):
    return jnp.all(prob.C @ c.eta >= 0) & (c.code == CONVERGED)


def solve(X, targets, weights, C, l2, *, intercept: int | None, max_iter, tol):
    """Minimise the constrained objective for one problem (traceable; call under ``jit``).

    Args:
        X: ``[n, p]`` features :math:`\\phi(s_i)` (zero-weight rows are ignored; they must
            be finite).
        targets: ``[n]`` targets :math:`t_i`.
        weights: ``[n]`` non-negative weights :math:`w_i` with a positive sum.
        C: ``[k, p]`` constraint rows (``C @ theta >= 0``), full row rank, zero in the
            intercept column.
        l2: penalty strength :math:`\\lambda_2 \\ge 0` on the non-intercept coefficients.
        intercept: index of the intercept column of ``X`` (all ones), or ``None``.
        max_iter: maximum Newton iterations per candidate active set.
        tol: stop when half the squared Newton decrement is below ``tol * sum(weights)``.

    Returns:
        ``(theta, status)``: ``[p]`` coefficients and a :class:`SolverStatus`.
    """
    prob = _standardise(X, targets, weights, C, l2, intercept)
    subsets = _subsets(C.shape[0])
    first = _candidate(prob, subsets[0], max_iter, tol)

    def only_first(_):
        return _finish(prob, [first], subsets[:1])

    def all_candidates(_):
        warm = prob._replace(eta0=first.eta)  # start from the unconstrained optimum
        rest = [_candidate(warm, S, max_iter, tol) for S in subsets[1:]]
        theta, status = _finish(prob, [first, *rest], subsets)
        return theta, status

    if len(subsets) == 1:
        return only_first(None)
    # only_first reports a k-vector of zero multipliers; shapes match all_candidates.
    return jax.lax.cond(_feasible_converged(prob, first), only_first, all_candidates, None)


def solve_batch(X, targets, weights, C, l2, *, intercept: int | None, max_iter, tol):
    """:func:`solve` for ``B`` problems (``X`` is ``[B, n, p]``, ``C`` is ``[B, k, p]``).

    Equivalent to ``vmap(solve)``, but the constrained candidates are computed only if at
    least one problem's unconstrained optimum is infeasible (a batch-level ``lax.cond``;
    a plain ``vmap`` of :func:`solve` would evaluate both branches for every problem).
    """
    std = jax.vmap(lambda X, t, w, C: _standardise(X, t, w, C, l2, intercept))
    prob = std(X, targets, weights, C)
    subsets = _subsets(C.shape[1])
    first = jax.vmap(lambda pr: _candidate(pr, subsets[0], max_iter, tol))(prob)
    finish_first = jax.vmap(lambda pr, c: _finish(pr, [c], subsets[:1]))
    if len(subsets) == 1:
        return finish_first(prob, first)

    def all_candidates(_):
        def one(pr, c0):
            warm = pr._replace(eta0=c0.eta)  # start from the unconstrained optimum
            rest = [_candidate(warm, S, max_iter, tol) for S in subsets[1:]]
            return _finish(pr, [c0, *rest], subsets)

        return jax.vmap(one)(prob, first)

    def only_first(_):
        return finish_first(prob, first)

    need = ~jnp.all(jax.vmap(_feasible_converged)(prob, first))
    return jax.lax.cond(need, all_candidates, only_first, None)


def warn_if_not_converged(status: SolverStatus, what: str, *, stacklevel: int = 3) -> None:
    """Emit a :class:`ConvergenceWarning` when any problem in ``status`` did not converge."""
    conv = np.asarray(status.converged)
    if conv.all():
        return
    codes = np.asarray(status.code)
    bad = int((~conv).sum())
    where = "" if conv.ndim == 0 else f" in {bad} of {conv.size} problems"
    msgs = "; ".join(sorted({STATUS_MESSAGES[int(c)] for c in np.unique(codes[~conv])}))
    warnings.warn(
        f"{what} did not converge{where}: {msgs}.", ConvergenceWarning, stacklevel=stacklevel
    )
