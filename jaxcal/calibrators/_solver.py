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
   in one data pass; the trial is accepted by the Armijo test (its derivatives are then
   already computed) or the step is halved. The loop (a ``lax.while_loop``) stops when half
   the squared Newton decrement falls below ``tol * sum(w)`` or after ``max_iter`` steps.
3. **Data passes.** The features are never stored: a pass reads the raw rows (the scores)
   in cache-sized blocks (a ``fori_loop`` of dynamic slices of at most 4,096 rows; one
   block up to 16,384 rows) and
   recomputes the standardised features inside the block, where ``softplus`` and
   ``sigmoid`` share one ``exp`` and the Hessian entries are one matrix-vector product
   with the products :math:`x_j x_k`.
4. **Active set.** The unconstrained problem is solved first; if its optimum is feasible
   it is the answer. Otherwise the rows it violates are the guessed active set, solved
   warm-started from the unconstrained optimum. If that candidate satisfies the KKT
   conditions (converged, feasible in the other rows, multipliers :math:`\mu \ge 0`) it is
   the constrained optimum (convexity). Otherwise all :math:`2^k \le 4` active sets are
   enumerated and the feasible candidate with the lowest objective is taken (the optimum
   is the minimiser over the subspace of its own active set, and it is feasible). The
   stages are ``lax.cond`` s, so the usual case costs two Newton solves.
5. **Sketch, then polish** (``n >= 4096``, :func:`sketch_stride`). Steps 1-4 run first on
   the deterministic subsample ``rows[::k]`` (about :math:`16\sqrt n` rows, weights
   rescaled to the full total), which also supplies the standardisation. From the
   sketch's optimum, Newton runs on the full data on the sketch's active set (at most 10
   steps; from a start :math:`O(n^{-1/4})` away it converges quadratically, typically in
   2-3 steps, i.e. 3-4 full passes instead of ~12). The full-data KKT test then certifies
   the exact optimum; if it fails (the sketch chose the wrong face, or did not converge),
   steps 2-4 run on the full data, warm-started from the polished point. The result is
   the same optimum either way; only the cost differs.

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
import math
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
    "sketch_stride",
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
# Data passes: problems of up to _SINGLE_BLOCK_ROWS rows are one block (XLA then hoists
# the feature computation out of the Newton loop); larger ones run in blocks of at most
# _BLOCK_ROWS rows, whose working set (features, their products) stays in L2 cache.
_SINGLE_BLOCK_ROWS = 16384
_BLOCK_ROWS = 4096
# smallest sketch stride worth a sketch (below it: n < 4096, solve directly)
_SKETCH_MIN_STRIDE = 4
# Newton steps allowed on the full data from the sketch's optimum before falling back
_POLISH_ITER = 10


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
    Q: jax.Array  # [p, p] l2 * A^T D A
    A: jax.Array  # [p, p]
    eta0: jax.Array  # [p] starting point (intercept at logit of the mean target)


class _Candidate(NamedTuple):
    eta: jax.Array
    objective: jax.Array
    code: jax.Array
    n_iter: jax.Array
    grad: jax.Array  # [p] gradient in eta coordinates


def sketch_stride(n: int) -> int:
    """Stride ``k`` of the deterministic subsample ``rows[::k]`` that warm-starts a fit of
    ``n`` rows, or 1 (no sketch) below ``n = 4096``.

    ``k = floor(sqrt(n) / 16)``, so the sketch has about ``16 sqrt(n)`` rows: its optimum
    is then within ``O(n^{-1/4})`` of the full one in standardised coordinates, close enough
    for three quadratically convergent Newton steps on the full data (e.g. ``k = 62`` at
    ``n = 10^6``, ``k = 6`` at ``n = 10^4``).
    """
    k = math.isqrt(max(int(n), 0)) // 16
    return k if k >= _SKETCH_MIN_STRIDE else 1


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
    dtype = t.dtype
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
    p = centre.shape[0]
    A = jnp.diag(1.0 / sd)
    if intercept is not None:
        A = A.at[intercept].add(jnp.where(slope, -centre / sd, 0.0))
    Q = l2 * (A.T @ jnp.diag(slope.astype(dtype)) @ A)
    eta0 = jnp.zeros(p, dtype)
    if intercept is not None:
        tbar = jnp.clip(jnp.sum(w * t) / W, 1e-6, 1 - 1e-6)
        eta0 = eta0.at[intercept].set(jnp.log(tbar) - jnp.log1p(-tbar))

    def problem(r, t, w):
        return _Problem(r, t, w, centre, 1.0 / sd, jnp.sum(w), C @ A, C, Q, A, eta0)

    return problem(rows, t, w), (problem(rs, ts, ws) if stride > 1 else None)


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
        softplus = jnp.maximum(z, 0.0) + jnp.log1p(e)
        mu = jnp.where(z >= 0, 1.0, e) / (1.0 + e)
        f = jnp.sum(w * (softplus - t * z))
        g = Xt @ (w * (mu - t))
        h = (Xt[j] * Xt[k]) @ (w * mu * (1.0 - mu))
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


def _projector(C, active):
    """Orthogonal projector onto ``{eta : C_S eta = 0}`` for the rows ``S`` in ``active``.

    Built from the SVD of the masked rows (the right singular vectors past the rank
    ``|S|`` span the subspace), so coordinates the active rows pin are zeroed exactly.
    """
    p = C.shape[1]
    _, _, vt = jnp.linalg.svd(C * active[:, None], full_matrices=True)
    keep = jnp.arange(p) >= jnp.sum(active)
    return vt.T @ (keep[:, None] * vt)


def _newton(prob: _Problem, phi, active, max_iter, tol) -> _Candidate:
    """Damped Newton on ``{eta : C_S eta = 0}`` (``S`` = the ``active`` rows).

    The step solves ``(P H P + I - P) d = -P g`` with ``P`` the projector onto the
    subspace, i.e. the Newton step of the problem restricted to it (``d = P d``). Each loop
    iteration evaluates the objective, gradient and Hessian at one trial point in a single
    data pass; the trial is accepted by the Armijo test (then it is the next iterate and its
    derivatives are already at hand) or the step is halved.
    """
    dtype = prob.t.dtype
    eps = jnp.finfo(dtype).eps
    p = prob.C.shape[1]
    eye = jnp.eye(p, dtype=dtype)
    W = prob.W
    P = _projector(prob.C, active)

    def newton_step(g, H):
        Hs = P @ H @ P
        ridge = eps * jnp.trace(Hs) / jnp.maximum(jnp.trace(P), 1.0)
        gs = P @ g  # the gradient within the subspace
        d = P @ -jnp.linalg.solve(Hs + ridge * P + (eye - P), gs)
        return d, -(gs @ d)

    # The loop's first trial is the start itself (alpha * d = 0, accepted against f = inf),
    # so the data pass is traced once; n_iter counts the Newton steps after it.
    zero, one = jnp.zeros((), dtype), jnp.ones((), dtype)
    start = (P @ prob.eta0, jnp.asarray(jnp.inf, dtype), jnp.zeros(p, dtype), jnp.zeros(p, dtype))
    # state: eta, f, g, d, dec, alpha, halvings, it, code, done
    init = (*start, zero, one, jnp.int32(0), jnp.int32(0), jnp.int32(MAX_ITER), jnp.asarray(False))

    def cond(state):
        it, done = state[7], state[9]
        return (~done) & (it <= max_iter)

    def body(state):
        eta, f, g, d, dec, alpha, halvings, it, code, done = state
        trial = eta + alpha * d
        f_t, g_t, H_t = _value_grad_hess(prob, phi, trial)
        slack = 8 * eps * jnp.abs(f)
        ok = jnp.isfinite(f_t) & (f_t <= f - _ARMIJO_C * alpha * dec + slack)
        d_t, dec_t = newton_step(g_t, H_t)
        out_of_range = jnp.max(jnp.abs(trial)) > _DIVERGENCE_BOUND
        bad_step = ok & (out_of_range | ~jnp.all(jnp.isfinite(d_t)))
        # f = inf until the start is accepted: a non-finite objective there is final
        gave_up = (~ok) & ((halvings + 1 >= _MAX_HALVINGS) | jnp.isinf(f))
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
    return _Candidate(eta, f, code, jnp.maximum(it - 1, 0), g)


def _subsets(k: int) -> list[tuple[int, ...]]:
    return [s for r in range(k + 1) for s in itertools.combinations(range(k), r)]


def _multipliers(prob: _Problem, c: _Candidate, active):
    """Multipliers of the active rows (``grad = C_S^T mu_S``, least squares; 0 elsewhere)."""
    Ca = prob.C * active[:, None]
    G = Ca @ Ca.T + jnp.diag(jnp.where(active, 0.0, 1.0))
    return jnp.linalg.solve(G, Ca @ c.grad)


def _kkt_ok(prob: _Problem, c: _Candidate, active):
    """Converged, feasible in the inactive rows and multipliers >= 0: the optimum."""
    mu = _multipliers(prob, c, active)
    feasible = jnp.all(active | (prob.C @ c.eta >= 0))
    scale = jnp.max(jnp.abs(prob.C), axis=1) * prob.W
    dual = jnp.all(mu >= -jnp.sqrt(jnp.finfo(mu.dtype).eps) * 1e-4 * scale)
    return feasible & dual & (c.code == CONVERGED)


def _finish(prob: _Problem, c: _Candidate, active) -> tuple[jax.Array, SolverStatus]:
    """Coefficients and status of the selected candidate (KKT quantities in theta scale)."""
    mu = _multipliers(prob, c, active)
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


def _enumerate(prob: _Problem, phi, first: _Candidate, max_iter, tol):
    """Fallback: every active set; the feasible candidate with the lowest objective."""
    k = prob.C.shape[0]
    warm = prob._replace(eta0=first.eta)  # start from the unconstrained optimum
    best = None
    for S in _subsets(k)[1:]:
        active = jnp.asarray([j in S for j in range(k)])
        c = _newton(warm, phi, active, max_iter, tol)
        feasible = jnp.all(active | (prob.C @ c.eta >= 0))
        obj = jnp.where(feasible & ~jnp.isnan(c.objective), c.objective, jnp.inf)
        entry = (obj, c, active)
        best = entry if best is None else _select(obj < best[0], entry, best)
    first_ok = jnp.all(prob.C @ first.eta >= 0) & ~jnp.isnan(first.objective)
    first_obj = jnp.where(first_ok, first.objective, jnp.inf)
    none = jnp.zeros(k, bool)
    _, c, active = _select(first_obj <= best[0], (first_obj, first, none), best)
    return c, active


def _project_active(theta, C, active):
    """Remove the rounding residue of ``C_S theta = 0`` (e.g. ``b = -1e-16`` in beta
    calibration): orthogonal projection of ``theta`` onto the active rows' null space."""
    Ca = C * active[:, None]
    G = Ca @ Ca.T + jnp.diag(jnp.where(active, 0.0, 1.0))
    return theta - Ca.T @ jnp.linalg.solve(G, Ca @ theta)


def _active_set_solve(prob: _Problem, phi, max_iter, tol) -> tuple[_Candidate, jax.Array]:
    """Stages 2-3 of the method from ``prob.eta0``: ``(candidate, active set)``.

    Unconstrained Newton; if infeasible, Newton on the violated rows (warm-started) and the
    KKT test; if that fails, every active set (``lax.cond`` s: only what is needed runs).
    """
    k = prob.C.shape[0]
    none = jnp.zeros(k, bool)
    first = _newton(prob, phi, none, max_iter, tol)
    if k == 0:
        return first, none

    def constrained(_):
        active = prob.C @ first.eta < 0  # the rows the unconstrained optimum violates
        c = _newton(prob._replace(eta0=first.eta), phi, active, max_iter, tol)
        return jax.lax.cond(
            _kkt_ok(prob, c, active),
            lambda _: (c, active),
            lambda _: _enumerate(prob, phi, first, max_iter, tol),
            None,
        )

    return jax.lax.cond(_kkt_ok(prob, first, none), lambda _: (first, none), constrained, None)


def _polish(full: _Problem, phi, sketched: _Candidate, active, max_iter, tol):
    """Newton on the full data from the sketch's optimum, on the sketch's active set.

    Returns ``(candidate, ok, start)``: ``ok`` is the full-data KKT test (then the
    candidate is the exact optimum); otherwise ``start`` is where the fallback begins (the
    polished point if it converged on its face, else the default start).
    """
    start = jnp.where(sketched.code == DIVERGED, full.eta0, sketched.eta)
    polish_iter = jnp.minimum(max_iter, _POLISH_ITER)
    c = _newton(full._replace(eta0=start), phi, active, polish_iter, tol)
    ok = _kkt_ok(full, c, active)
    return c, ok, jnp.where(c.code == CONVERGED, c.eta, full.eta0)


def solve(
    rows,
    targets,
    weights,
    C,
    l2,
    *,
    intercept: int | None,
    max_iter,
    tol,
    features=None,
    aux=None,
    stride: int = 1,
):
    """Minimise the constrained objective for one problem (traceable; call under ``jit``).

    With ``stride > 1`` the problem is first solved on the deterministic sketch
    ``rows[::stride]`` (weights rescaled to the same total); a few Newton steps on the full
    data from that optimum, on the sketch's active set, then pass the full-data KKT test
    (converged, feasible, multipliers :math:`\\ge 0`), which certifies the exact optimum.
    Only if the test fails does the full active-set method run (warm-started). Without a
    sketch: the unconstrained problem first; if its optimum violates constraints, the
    problem restricted to the violated rows (warm-started); when that candidate passes the
    KKT test it is the optimum, otherwise every active set is enumerated.

    Args:
        rows: ``[n, ...]`` per-row data; the features are ``features(rows[i:j], aux)``
            (``[j - i, p]``), or ``rows`` itself (``[n, p]``) when ``features`` is ``None``.
            Zero-weight rows are ignored but must give finite features.
        targets: ``[n]`` targets :math:`t_i`.
        weights: ``[n]`` non-negative weights :math:`w_i` with a positive sum.
        C: ``[k, p]`` constraint rows (``C @ theta >= 0``), full row rank, zero in the
            intercept column.
        l2: penalty strength :math:`\\lambda_2 \\ge 0` on the non-intercept coefficients.
        intercept: index of the intercept column of the features (all ones), or ``None``.
        max_iter: maximum Newton iterations per candidate active set.
        tol: stop when half the squared Newton decrement is below ``tol * sum(weights)``.
        features: optional ``(rows_block, aux) -> [b, p]`` feature map, applied block by
            block inside every data pass (the ``[n, p]`` design is never stored).
        aux: pytree passed to ``features`` (e.g. a family's score range).
        stride: sketch stride (static); 1 disables the sketch (see :func:`sketch_stride`).

    Returns:
        ``(theta, status)``: ``[p]`` coefficients and a :class:`SolverStatus`.
    """
    phi = _phi(features, aux)
    full, sketch = _setup(rows, targets, weights, C, l2, intercept, phi, stride)
    if sketch is None:
        return _finish(full, *_active_set_solve(full, phi, max_iter, tol))
    sketched, guess = _active_set_solve(sketch, phi, max_iter, tol)
    c, ok, start = _polish(full, phi, sketched, guess, max_iter, tol)

    def fallback(_):
        return _active_set_solve(full._replace(eta0=start), phi, max_iter, tol)

    return _finish(full, *jax.lax.cond(ok, lambda _: (c, guess), fallback, None))


def solve_batch(
    rows,
    targets,
    weights,
    C,
    l2,
    *,
    intercept: int | None,
    max_iter,
    tol,
    features=None,
    aux=None,
    stride: int = 1,
    lockstep: bool | None = None,
):
    """:func:`solve` for ``B`` problems (leading axis ``B`` on ``rows``, ``targets``,
    ``weights``, ``C`` (``[B, k, p]``) and the leaves of ``aux``).

    ``lockstep=False`` (default on CPU) solves the problems one after another (``lax.map``
    of :func:`solve`: memory-bound work on a small cache-resident problem beats a lock-step
    batch, and its ``lax.cond`` s really skip work). ``lockstep=True`` (default on
    accelerators) is equivalent to ``vmap(solve)``, but the stages are batch-level
    ``lax.cond`` s (a plain ``vmap`` of :func:`solve` would evaluate every branch for every
    problem): the guessed active set is solved only if some problem's unconstrained optimum
    is infeasible, the enumeration only if some problem's guess fails the KKT test, and the
    full-data fallback after a sketch only if some polished sketch fails it; each problem
    keeps its own result.
    """
    kw = dict(intercept=intercept, max_iter=max_iter, tol=tol, features=features, stride=stride)
    if lockstep is None:
        lockstep = jax.default_backend() != "cpu"
    if not lockstep:

        def one(args):
            r, t, w, c, a = args
            return solve(r, t, w, c, l2, aux=a, **kw)

        return jax.lax.map(one, (rows, targets, weights, C, aux))

    def setup(r, t, w, c, a):
        return _setup(r, t, w, c, l2, intercept, _phi(features, a), stride)

    full, sketch = jax.vmap(setup)(rows, targets, weights, C, aux)
    if sketch is None:
        c, active = _active_set_lockstep(full, aux, features, max_iter, tol)
        return jax.vmap(_finish)(full, c, active)
    sketched, guess = _active_set_lockstep(sketch, aux, features, max_iter, tol)

    def polish(pr, a, c0, act):
        return _polish(pr, _phi(features, a), c0, act, max_iter, tol)

    c, ok, start = jax.vmap(polish)(full, aux, sketched, guess)

    def fallback(_):
        alt = _active_set_lockstep(full._replace(eta0=start), aux, features, max_iter, tol)
        return _select_batch(ok, (c, guess), alt)

    c, active = jax.lax.cond(jnp.all(ok), lambda _: (c, guess), fallback, None)
    return jax.vmap(_finish)(full, c, active)


def _active_set_lockstep(prob: _Problem, aux, features, max_iter, tol):
    """:func:`_active_set_solve` for a batch of problems with batch-level ``lax.cond`` s."""
    B, k = prob.C.shape[:2]
    none = jnp.zeros((B, k), bool)

    def newton(pr, a, act):
        return _newton(pr, _phi(features, a), act, max_iter, tol)

    first = jax.vmap(newton)(prob, aux, none)
    if k == 0:
        return first, none
    ok_first = jax.vmap(_kkt_ok)(prob, first, none)

    def constrained(_):
        active = jax.vmap(lambda pr, c: pr.C @ c.eta < 0)(prob, first)
        c = jax.vmap(newton)(prob._replace(eta0=first.eta), aux, active)
        ok = jax.vmap(_kkt_ok)(prob, c, active) | ok_first
        sel = _select_batch(ok_first, (first, none), (c, active))

        def enumerate_all(_):
            def one(pr, a, c0):
                return _enumerate(pr, _phi(features, a), c0, max_iter, tol)

            return _select_batch(ok, sel, jax.vmap(one)(prob, aux, first))

        return jax.lax.cond(jnp.all(ok), lambda _: sel, enumerate_all, None)

    return jax.lax.cond(jnp.all(ok_first), lambda _: (first, none), constrained, None)


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
