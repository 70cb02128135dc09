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
2. **Newton on a face.** For an active set :math:`S` the problem restricted to
   :math:`\{\eta : C_S\eta = 0\}` is solved by damped Newton with the projector :math:`P_S`
   onto that subspace (step :math:`(P H P + I - P)\,d = -P g`, so one code path serves every
   :math:`S` and ``vmap`` s over data-dependent active sets). Each loop iteration evaluates
   the objective, the gradient and the :math:`p\times p` Hessian
   :math:`\tilde X^\top \operatorname{diag}(w \sigma(1-\sigma))\tilde X` at one trial point
   in one fused data pass (softplus and sigmoid share one ``exp``); the trial is accepted
   by the Armijo test (its derivatives are then already computed) or the step is halved.
   The loop (a ``lax.while_loop``) stops when half the squared Newton decrement falls below
   ``tol * sum(w)`` or after ``max_iter`` steps.
3. **Active set.** The unconstrained problem is solved first; if its optimum is feasible
   it is the answer. Otherwise the rows it violates are the guessed active set, solved
   warm-started from the unconstrained optimum. If that candidate satisfies the KKT
   conditions (converged, feasible in the other rows, multipliers :math:`\mu \ge 0`) it is
   the constrained optimum (convexity). Otherwise all :math:`2^k \le 4` active sets are
   enumerated and the feasible candidate with the lowest objective is taken (the optimum
   is the minimiser over the subspace of its own active set, and it is feasible). The
   stages are ``lax.cond`` s, so the usual case costs two Newton solves.

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

    Xt: jax.Array  # [p, n] standardised features, transposed (rows contiguous per feature)
    XX: jax.Array  # [p (p + 1) / 2, n] products x_j x_k (j <= k) of the rows of Xt
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
    Xt = X.T
    mean = Xt @ w / W
    if intercept is not None:
        centre = jnp.where(slope, mean, 0.0)
        sd = jnp.sqrt(((Xt - centre[:, None]) ** 2) @ w / W)
    else:
        centre = jnp.zeros(p, dtype)
        sd = jnp.sqrt((Xt**2) @ w / W)
    sd = jnp.where(slope & (sd > 0), sd, 1.0)
    Xt = jnp.where(slope[:, None], (Xt - centre[:, None]) / sd[:, None], Xt)
    A = jnp.diag(1.0 / sd)
    if intercept is not None:
        A = A.at[intercept].add(jnp.where(slope, -centre / sd, 0.0))
    D = jnp.diag(slope.astype(dtype))
    Q = l2 * (A.T @ D @ A)
    eta0 = jnp.zeros(p, dtype)
    if intercept is not None:
        tbar = jnp.clip(jnp.sum(w * t) / W, 1e-6, 1 - 1e-6)
        eta0 = eta0.at[intercept].set(jnp.log(tbar) - jnp.log1p(-tbar))
    j, k = np.triu_indices(p)
    return _Problem(Xt, Xt[j] * Xt[k], t, w, C @ A, C, Q, A, eta0)


def _value_grad_hess(prob: _Problem, eta):
    """Objective, gradient and Hessian at ``eta`` from one pass over the data.

    ``softplus`` and ``sigmoid`` share one ``exp(-|z|)``, so XLA fuses the whole evaluation
    (one transcendental pair per row) instead of making a pass per quantity; the Hessian
    is a matrix-vector product with the precomputed feature products (no ``[p, n]``
    temporary, no skinny matrix-matrix product).
    """
    Xt, t, w, Q = prob.Xt, prob.t, prob.w, prob.Q
    p = Xt.shape[0]
    z = eta @ Xt
    e = jnp.exp(-jnp.abs(z))
    softplus = jnp.maximum(z, 0.0) + jnp.log1p(e)
    mu = jnp.where(z >= 0, 1.0, e) / (1.0 + e)
    f = jnp.sum(w * (softplus - t * z)) + 0.5 * eta @ Q @ eta
    g = Xt @ (w * (mu - t)) + Q @ eta
    # Hessian entries j <= k as one matrix-vector product with the precomputed x_j x_k
    upper = prob.XX @ (w * mu * (1.0 - mu))
    j, k = np.triu_indices(p)
    H = jnp.zeros((p, p), Xt.dtype).at[j, k].set(upper).at[k, j].set(upper)
    return f, g, H + Q


def _projector(C, active):
    """Orthogonal projector onto ``{eta : C_S eta = 0}`` for the rows ``S`` in ``active``.

    Built from the SVD of the masked rows (the right singular vectors past the rank
    ``|S|`` span the subspace), so coordinates the active rows pin are zeroed exactly.
    """
    p = C.shape[1]
    _, _, vt = jnp.linalg.svd(C * active[:, None], full_matrices=True)
    keep = jnp.arange(p) >= jnp.sum(active)
    return vt.T @ (keep[:, None] * vt)


def _newton(prob: _Problem, active, max_iter, tol) -> _Candidate:
    """Damped Newton on ``{eta : C_S eta = 0}`` (``S`` = the ``active`` rows).

    The step solves ``(P H P + I - P) d = -P g`` with ``P`` the projector onto the
    subspace, i.e. the Newton step of the problem restricted to it (``d = P d``). Each loop
    iteration evaluates the objective, gradient and Hessian at one trial point in a single
    data pass; the trial is accepted by the Armijo test (then it is the next iterate and its
    derivatives are already at hand) or the step is halved.
    """
    dtype = prob.Xt.dtype
    eps = jnp.finfo(dtype).eps
    p = prob.Xt.shape[0]
    eye = jnp.eye(p, dtype=dtype)
    W = jnp.sum(prob.w)
    P = _projector(prob.C, active)

    def newton_step(g, H):
        Hs = P @ H @ P
        ridge = eps * jnp.trace(Hs) / jnp.maximum(jnp.trace(P), 1.0)
        gs = P @ g  # the gradient within the subspace
        d = P @ -jnp.linalg.solve(Hs + ridge * P + (eye - P), gs)
        return d, -(gs @ d)

    eta0 = P @ prob.eta0
    f0, g0, H0 = _value_grad_hess(prob, eta0)
    d0, dec0 = newton_step(g0, H0)
    done0 = dec0 <= 2 * tol * W
    code0 = jnp.where(done0, CONVERGED, MAX_ITER).astype(jnp.int32)
    one = jnp.ones((), dtype)
    # state: eta, f, g, d, dec, alpha, halvings, it, code, done
    init = (eta0, f0, g0, d0, dec0, one, jnp.int32(0), jnp.int32(0), code0, done0)

    def cond(state):
        it, done = state[7], state[9]
        return (~done) & (it < max_iter)

    def body(state):
        eta, f, g, d, dec, alpha, halvings, it, code, done = state
        trial = eta + alpha * d
        f_t, g_t, H_t = _value_grad_hess(prob, trial)
        slack = 8 * eps * jnp.abs(f)
        ok = jnp.isfinite(f_t) & (f_t <= f - _ARMIJO_C * alpha * dec + slack)
        d_t, dec_t = newton_step(g_t, H_t)
        out_of_range = jnp.max(jnp.abs(trial)) > _DIVERGENCE_BOUND
        bad_step = ok & (out_of_range | ~jnp.all(jnp.isfinite(d_t)))
        gave_up = (~ok) & (halvings + 1 >= _MAX_HALVINGS)
        diverged = bad_step | gave_up
        accept = ok & ~bad_step
        converged = accept & (dec_t <= 2 * tol * W)
        pick = lambda old, new: jnp.where(accept, new, old)  # noqa: E731
        code = jnp.where(diverged, DIVERGED, jnp.where(converged, CONVERGED, MAX_ITER))
        return (
            pick(eta, trial),
            pick(f, f_t),
            pick(g, g_t),
            pick(d, d_t),
            pick(dec, dec_t),
            jnp.where(accept, one, 0.5 * alpha),
            jnp.where(accept, 0, halvings + 1),
            jnp.where(accept | diverged, it + 1, it),
            code.astype(jnp.int32),
            diverged | converged,
        )

    eta, f, g, _, _, _, _, it, code, _ = jax.lax.while_loop(cond, body, init)
    return _Candidate(eta, f, code, it, g)


def _subsets(k: int) -> list[tuple[int, ...]]:
    return [s for r in range(k + 1) for s in itertools.combinations(range(k), r)]


def _multipliers(prob: _Problem, c: _Candidate, active):
    """Multipliers of the active rows (``grad = C_S^T mu_S``, least squares; 0 elsewhere)."""
    Ca = prob.C * active[:, None]
    G = Ca @ Ca.T + jnp.diag(jnp.where(active, 0.0, 1.0))
    return jnp.linalg.solve(G, Ca @ c.grad)


def _kkt_ok(prob: _Problem, c: _Candidate, active, mu):
    """Converged, feasible in the inactive rows and multipliers >= 0: the optimum."""
    feasible = jnp.all(active | (prob.C @ c.eta >= 0))
    scale = jnp.max(jnp.abs(prob.C), axis=1) * jnp.sum(prob.w)
    dual = jnp.all(mu >= -jnp.sqrt(jnp.finfo(mu.dtype).eps) * 1e-4 * scale)
    return feasible & dual & (c.code == CONVERGED)


def _status(prob: _Problem, c: _Candidate, active, mu) -> tuple[jax.Array, SolverStatus]:
    resid = jnp.linalg.solve(prob.A.T, c.grad - prob.C.T @ mu)  # to theta coordinates
    theta = _project_active(prob.A @ c.eta, prob.C0, active)
    status = SolverStatus(
        converged=c.code == CONVERGED,
        code=c.code,
        n_iter=c.n_iter,
        objective=c.objective,
        active=active,
        multipliers=mu,
        kkt_residual=jnp.max(jnp.abs(resid)),
    )
    return theta, status


def _select(ok, a, b):
    return jax.tree.map(lambda x, y: jnp.where(ok, x, y), a, b)


def _enumerate(prob: _Problem, first: _Candidate, max_iter, tol):
    """Fallback: every active set; the feasible candidate with the lowest objective."""
    k = prob.C.shape[0]
    warm = prob._replace(eta0=first.eta)  # start from the unconstrained optimum
    best = None
    for S in _subsets(k)[1:]:
        active = jnp.asarray([j in S for j in range(k)])
        c = _newton(warm, active, max_iter, tol)
        feasible = jnp.all(active | (prob.C @ c.eta >= 0))
        obj = jnp.where(feasible & ~jnp.isnan(c.objective), c.objective, jnp.inf)
        entry = (obj, c, active)
        best = entry if best is None else _select(obj < best[0], entry, best)
    first_ok = jnp.all(prob.C @ first.eta >= 0) & ~jnp.isnan(first.objective)
    first_obj = jnp.where(first_ok, first.objective, jnp.inf)
    none = jnp.zeros(k, bool)
    _, c, active = _select(first_obj <= best[0], (first_obj, first, none), best)
    return c, active


def _guess(prob: _Problem, first: _Candidate, max_iter, tol):
    """Solve on the active set guessed from the unconstrained optimum's violated rows."""
    active = prob.C @ first.eta < 0
    c = _newton(prob._replace(eta0=first.eta), active, max_iter, tol)
    return c, active


def _finish(prob, c, active):
    mu = _multipliers(prob, c, active)
    return _status(prob, c, active, mu), _kkt_ok(prob, c, active, mu)


def _project_active(theta, C, active):
    """Remove the rounding residue of ``C_S theta = 0`` (e.g. ``b = -1e-16`` in beta
    calibration): orthogonal projection of ``theta`` onto the active rows' null space."""
    Ca = C * active[:, None]
    G = Ca @ Ca.T + jnp.diag(jnp.where(active, 0.0, 1.0))
    return theta - Ca.T @ jnp.linalg.solve(G, Ca @ theta)


def solve(X, targets, weights, C, l2, *, intercept: int | None, max_iter, tol):
    """Minimise the constrained objective for one problem (traceable; call under ``jit``).

    The unconstrained problem is solved first. If its optimum violates constraints, the
    problem restricted to the violated rows is solved next (warm-started); when that
    candidate satisfies the KKT conditions (converged, feasible, multipliers
    :math:`\\ge 0`) it is the optimum, otherwise every active set is enumerated.

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
    k = C.shape[0]
    none = jnp.zeros(k, bool)
    first = _newton(prob, none, max_iter, tol)
    out_first, ok_first = _finish(prob, first, none)
    if k == 0:
        return out_first

    def constrained(_):
        c, active = _guess(prob, first, max_iter, tol)
        out, ok = _finish(prob, c, active)

        def enumerate_all(_):
            return _finish(prob, *_enumerate(prob, first, max_iter, tol))[0]

        return jax.lax.cond(ok, lambda _: out, enumerate_all, None)

    return jax.lax.cond(ok_first, lambda _: out_first, constrained, None)


def solve_batch(X, targets, weights, C, l2, *, intercept: int | None, max_iter, tol):
    """:func:`solve` for ``B`` problems (``X`` is ``[B, n, p]``, ``C`` is ``[B, k, p]``).

    On CPU the problems are solved one after another (``lax.map`` of :func:`solve`:
    memory-bound work on a small cache-resident problem beats a lock-step batch). On
    accelerators it is equivalent to ``vmap(solve)``, but the stages are batch-level
    ``lax.cond`` s (a plain ``vmap`` of :func:`solve` would evaluate every branch for every
    problem): the guessed
    active set is solved only if some problem's unconstrained optimum is infeasible (the
    others start at their optimum and take no step), and the enumeration only if some
    problem's guess fails the KKT test; each problem keeps its own result.
    """
    if jax.default_backend() == "cpu":
        # One problem at a time: each stays cache-resident and its lax.conds really skip
        # work; on 2 CPU cores this is ~2x faster than the lock-step vmap below.
        def one(args):
            return solve(*args, l2, intercept=intercept, max_iter=max_iter, tol=tol)

        return jax.lax.map(one, (X, targets, weights, C))
    std = jax.vmap(lambda X, t, w, C: _standardise(X, t, w, C, l2, intercept))
    prob = std(X, targets, weights, C)
    k = C.shape[1]
    none = jnp.zeros(k, bool)
    first = jax.vmap(lambda pr: _newton(pr, none, max_iter, tol))(prob)
    out_first, ok_first = jax.vmap(lambda pr, c: _finish(pr, c, none))(prob, first)
    if k == 0:
        return out_first

    def constrained(_):
        c, active = jax.vmap(lambda pr, c0: _guess(pr, c0, max_iter, tol))(prob, first)
        out, ok = jax.vmap(_finish)(prob, c, active)
        ok = ok | ok_first
        out = _select_batch(ok_first, out_first, out)

        def enumerate_all(_):
            def one(pr, c0):
                return _finish(pr, *_enumerate(pr, c0, max_iter, tol))[0]

            return _select_batch(ok, out, jax.vmap(one)(prob, first))

        return jax.lax.cond(jnp.all(ok), lambda _: out, enumerate_all, None)

    return jax.lax.cond(jnp.all(ok_first), lambda _: out_first, constrained, None)


def _select_batch(ok, a, b):
    def sel(x, y):
        return jnp.where(ok.reshape(ok.shape + (1,) * (x.ndim - 1)), x, y)

    return jax.tree.map(sel, a, b)


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
