r"""Exact solver for monotone (linearly constrained) weighted logistic regression.

Every parametric calibrator in jaxcal fits a *linear-logit* map :math:`z = \phi(s)^\top
\theta` by minimising the convex objective

.. math::

    L(\theta) = \sum_i w_i \,[\operatorname{softplus}(x_i^\top\theta) - t_i\, x_i^\top\theta]
        + \tfrac{\lambda_2}{2}\,\lVert \theta_{\setminus 0} \rVert^2
    \quad\text{subject to}\quad C\theta \ge 0,

where :math:`x_i = \phi(s_i)`, :math:`(t, w)` come from ``jaxcal.losses``, the
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
5. **Sketch, then polish** (``n >= 65536``, :func:`sketch_stride`). Steps 1-4 run first on
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
\sum_i w_i` sends the intercept to :math:`+\infty`) have no minimiser: the solver stops
with ``converged = False`` (code ``DIVERGED`` or ``MAX_ITER``) and returns its last finite
iterate, never NaN. The estimator shells turn this into a :class:`ConvergenceWarning`.
Data separable by a monotone map with ``l2 = 0`` have no minimiser either (the infimum of
the objective is approached only by a diverging step); the fits of a family detect them
exactly beforehand and solve a uniquely solvable problem instead (code ``SEPARABLE``, a
:class:`SeparableDataWarning`; :mod:`jaxcal.fitting.linear`). A Newton step whose
decrement is negative beyond the tolerance (a numerically singular Hessian: saturated
logits far from any optimum) ends its loop as ``DIVERGED``, never as converged. The
unconstrained problem may have no minimiser while the constrained one has (a quadratic
logit that separates the classes is not monotone): the constrained stages then restart
from the intercept-only point when the unconstrained iterate is no usable warm start (see
``_active_set_solve``).
"""

from __future__ import annotations

import itertools
import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._pytree import pytree_dataclass
from jaxcal._vma import varying_like
from jaxcal.fitting.newton import (
    CONVERGED,
    DIVERGED,
    MAX_ITER,
    SEPARABLE,
    _Candidate,
    _newton,
    _phi,
    _Problem,
    _projector,
    _row_gram_solve,
    _setup,
    logistic_objective,
    sketch_stride,
)

__all__ = [
    "SolverStatus",
    "ConvergenceWarning",
    "SeparableDataWarning",
    "CONVERGED",
    "MAX_ITER",
    "DIVERGED",
    "SEPARABLE",
    "STATUS_MESSAGES",
    "solve",
    "solve_batch",
    "sketch_stride",
    "logistic_objective",
    "warn_if_not_converged",
]

STATUS_MESSAGES = {
    CONVERGED: "converged",
    MAX_ITER: "reached max_iter before the Newton decrement fell below tol (separable data? "
    "try l2 > 0 or a larger max_iter)",
    DIVERGED: "diverged: the objective is unbounded below or has no minimiser (IPS targets "
    "t > 1 can make the logistic loss unbounded; try loss='snips' or 'ips_positive')",
    SEPARABLE: "separable: a threshold of the score puts every positive above every "
    "negative, so no finite fit exists (the likelihood reaches its supremum only as the map "
    "becomes a step); the map returned is the unique fit with a vanishing ridge (sqrt(eps) "
    "on the standardised slopes), a near-step. Pass l2 > 0 for a penalised fit, or fit on "
    "more data",
}
_POLISH_ITER = 10


class ConvergenceWarning(RuntimeWarning):
    """A calibrator's solver did not converge; its ``status`` says why."""


class SeparableDataWarning(UserWarning):
    """The training data are separable by a monotone map, so the maximum-likelihood fit
    does not exist (``status.code == SEPARABLE``); the fitted map is the near-step of
    :mod:`jaxcal.fitting.linear`.

    Example:
        >>> import warnings, jaxcal, numpy as np
        >>> from jaxcal.fitting.solver import SEPARABLE, SeparableDataWarning
        >>> scores, labels = np.arange(6.0), np.array([0, 0, 0, 1, 1, 1])
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     fitted = jaxcal.PlattScaling().fit(scores, labels)
        >>> [w.category.__name__ for w in caught]
        ['SeparableDataWarning']
        >>> int(fitted.status.code) == SEPARABLE, bool(fitted.status.converged)
        (True, False)
    """


@pytree_dataclass
class SolverStatus:
    """Outcome of a constrained fit (leaves gain leading batch dimensions in batched fits).

    Attributes:
        converged: ``bool``; the selected candidate met the Newton-decrement tolerance
            (false for ``SEPARABLE``: that objective has no optimum to converge to).
        code: ``int32``; ``CONVERGED`` (0), ``MAX_ITER`` (1), ``DIVERGED`` (2) or
            ``SEPARABLE`` (3: no finite fit exists; the returned map is the unique optimum
            with a vanishing ridge, and ``objective``, ``multipliers`` and
            ``kkt_residual`` are those of that problem).
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


def _subsets(k: int) -> np.ndarray:
    """``[2^k - 1, k]`` bool: every non-empty subset of the ``k`` constraint rows."""
    subs = [S for r in range(1, k + 1) for S in itertools.combinations(range(k), r)]
    return np.array([[j in S for j in range(k)] for S in subs], bool).reshape(len(subs), k)


def _multipliers(prob: _Problem, c: _Candidate, active):
    """Multipliers of the active rows (``grad = C_S^T mu_S``, least squares; 0 elsewhere)."""
    if prob.C.shape[0] == 0:
        return jnp.zeros(0, c.grad.dtype)
    Ca = prob.C * active[:, None]
    return _row_gram_solve(prob.C, active, Ca @ c.grad)[0]


def _feasible(prob: _Problem, c: _Candidate, active):
    return jnp.all(active | (prob.C @ c.eta >= 0))


def _kkt_ok(prob: _Problem, c: _Candidate, active):
    """Converged, feasible in the inactive rows and multipliers >= 0: the optimum."""
    mu = _multipliers(prob, c, active)
    scale = jnp.max(jnp.abs(prob.C), axis=1) * prob.W
    dual = jnp.all(mu >= -jnp.sqrt(jnp.finfo(mu.dtype).eps) * 1e-4 * scale)
    return _feasible(prob, c, active) & dual & (c.code == CONVERGED)


def _finish(prob: _Problem, c: _Candidate, active) -> tuple[jax.Array, SolverStatus]:
    """Coefficients and status of the selected candidate (KKT quantities in theta scale)."""
    mu = _multipliers(prob, c, active)
    resid = prob.A_inv.T @ (c.grad - prob.C.T @ mu)  # to theta coordinates
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


def _project_active(theta, C, active):
    """Remove the rounding residue of ``C_S theta = 0`` (e.g. ``b = -1e-16`` in beta
    calibration): orthogonal projection of ``theta`` onto the active rows' null space. When
    the active rows pin every coordinate they involve (as many active rows as non-zero
    columns of ``C``, e.g. every slope of a family), those coordinates are exactly 0."""
    if C.shape[0] == 0:
        return theta
    involved = jnp.any(C != 0, axis=0)
    pinned = involved & (jnp.sum(active) == jnp.sum(involved))
    return jnp.where(pinned, 0.0, _projector(C, active) @ theta)


# Stages of the active-set search (one Newton solve each, in this order):
_POLISH, _UNCONSTRAINED, _VIOLATED, _ENUMERATE = 0, 1, 2, 3


class _Search(NamedTuple):
    stage: jax.Array  # int32: the next stage; _ENUMERATE + j enumerates subset j
    result: jax.Array  # the answer once done (a packed candidate, see _pack)
    best: jax.Array  # stage 3: the feasible candidate with the lowest objective so far
    unconstrained: jax.Array  # warm start of the later stages
    restart: jax.Array  # [p] start of the unconstrained stage
    done: jax.Array
    cold: jax.Array  # bool: the stage runs again, from prob.eta0 (see body)


def _pack(c: _Candidate, active) -> jax.Array:
    """A candidate and its active set as one vector ``[eta, grad, objective, code, n_iter,
    active]``: choosing between candidates is then one select, not one per field."""
    dtype = c.eta.dtype
    scalars = jnp.stack([c.objective, c.code.astype(dtype), c.n_iter.astype(dtype)])
    return jnp.concatenate([c.eta, c.grad, scalars, active.astype(dtype)])


def _unpack(v: jax.Array, p: int) -> tuple[_Candidate, jax.Array]:
    c = _Candidate(
        eta=v[:p],
        objective=v[2 * p],
        code=v[2 * p + 1].astype(jnp.int32),
        n_iter=v[2 * p + 2].astype(jnp.int32),
        grad=v[p : 2 * p],
    )
    return c, v[2 * p + 3 :] > 0.5


def _active_set_solve(
    prob: _Problem, phi, max_iter, tol, *, guess=None, guess_start=None
) -> tuple[_Candidate, jax.Array]:
    """Stages 2-4 of the method: ``(candidate, active set)``, one Newton solve per stage.

    The stages run in one ``lax.while_loop`` whose body is a single Newton solve (traced,
    and so compiled, once), each stage choosing its active set, start and iteration cap:

    0. (with ``guess``) the polish: Newton on the ``guess`` rows from ``guess_start``, at
       most ``_POLISH_ITER`` steps; done if it passes the KKT test.
    1. Unconstrained, from ``prob.eta0`` (from the polished point if that converged);
       done if its optimum is feasible (the KKT test with no active row).
    2. The rows the unconstrained optimum violates, warm-started from it; done if KKT.
    3. Every non-empty active set, warm-started from the unconstrained optimum; the
       feasible candidate with the lowest objective wins, the unconstrained one included.

    A solve of stage 2 or 3 that does not converge from the unconstrained iterate is run
    once more from ``prob.eta0`` before its stage counts.

    Under ``vmap`` every problem walks its own stages in the same loop.
    """
    k, p = prob.C.shape
    dtype = prob.t.dtype
    subsets = _subsets(k)
    n_sub = subsets.shape[0]
    subsets = jnp.asarray(subsets if n_sub else np.zeros((1, k), bool))
    none = jnp.zeros(k, bool)
    polish = guess is not None
    guess = none if guess is None else guess
    guess_start = prob.eta0 if guess_start is None else guess_start
    inf = jnp.asarray(jnp.inf, dtype)
    blank = _pack(
        _Candidate(prob.eta0, inf, jnp.int32(MAX_ITER), jnp.int32(0), jnp.zeros(p, dtype)), none
    )

    def feasible_objective(v):
        """The candidate's objective if it is feasible (and not NaN), else +inf."""
        c, active = _unpack(v, p)
        return jnp.where(_feasible(prob, c, active) & ~jnp.isnan(c.objective), c.objective, inf)

    def body(st: _Search) -> _Search:
        stage = st.stage
        is_polish, is_unc = stage == _POLISH, stage == _UNCONSTRAINED
        enumerating = stage >= _ENUMERATE
        unc = _unpack(st.unconstrained, p)[0]
        subset = subsets[jnp.clip(stage - _ENUMERATE, 0, subsets.shape[0] - 1)]
        violated = prob.C @ unc.eta < 0
        active = jnp.select(
            [is_polish, is_unc, stage == _VIOLATED], [guess, none, violated], subset
        )
        eta0 = jnp.select(
            [is_polish, is_unc, st.cold], [guess_start, st.restart, prob.eta0], unc.eta
        )
        iters = jnp.where(is_polish, jnp.minimum(max_iter, _POLISH_ITER), max_iter)
        c = _newton(prob._replace(eta0=eta0), phi, active, iters, tol)
        v = _pack(c, active)

        unconstrained = jnp.where(is_unc, v, st.unconstrained)
        better = enumerating & (feasible_objective(v) < feasible_objective(st.best))
        best = jnp.where(better, v, st.best)
        # stages 0-2 end the search with a candidate that passes the KKT test; the last
        # enumerated set ends it with the best feasible candidate, or the unconstrained
        # one if it is as good; without constraints the unconstrained solve is the answer
        found = (~enumerating) & _kkt_ok(prob, c, active)
        last = (stage >= _ENUMERATE + n_sub - 1) | (k == 0)
        take_unc = (k == 0) | (feasible_objective(unconstrained) <= feasible_objective(best))
        result = jnp.where(found, v, jnp.where(take_unc, unconstrained, best))
        new = _Search(
            stage=jnp.where(is_polish, _UNCONSTRAINED, stage + 1).astype(jnp.int32),
            result=result,
            best=best,
            unconstrained=unconstrained,
            restart=jnp.where(is_polish & (c.code == CONVERGED), c.eta, st.restart),
            done=found | (last & ~is_polish),
            cold=jnp.asarray(False),
        )
        # A constrained stage that did not converge from the unconstrained iterate runs
        # once more from prob.eta0 (the intercept-only start, on the face). The warm start
        # is far out when the unconstrained problem has no minimiser although the
        # constrained one has (a quadratic logit that separates the classes, which only
        # the monotonicity constraint rules out, with the top score a negative): there the
        # logits saturate, the Hessian vanishes and Newton on the face fails.
        retry = (
            ~is_polish & ~is_unc & ~st.cold & (c.code != CONVERGED) & jnp.any(unc.eta != prob.eta0)
        )
        return jax.tree.map(lambda old, x: jnp.where(retry, old, x), st._replace(cold=retry), new)

    init = _Search(
        stage=jnp.int32(_POLISH if polish else _UNCONSTRAINED),
        result=blank,
        best=blank,
        unconstrained=blank,
        restart=prob.eta0,
        done=jnp.asarray(False),
        cold=jnp.asarray(False),
    )
    init = varying_like(init, prob)  # inside shard_map the carry varies as the data does
    return _unpack(jax.lax.while_loop(lambda st: ~st.done, body, init).result, p)


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
        l2: penalty strength :math:`\\lambda_2 \\ge 0` on the non-intercept coefficients, or
            ``[p]`` strengths, one per coefficient (the intercept's is ignored).
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
    start = jnp.where(sketched.code == DIVERGED, full.eta0, sketched.eta)
    c, active = _active_set_solve(full, phi, max_iter, tol, guess=guess, guess_start=start)
    return _finish(full, c, active)


def solve_batch(rows, targets, weights, C, l2, *, aux=None, lockstep=None, **options):
    """:func:`solve` for ``B`` problems (leading axis ``B`` on ``rows``, ``targets``,
    ``weights``, ``C`` (``[B, k, p]``) and the leaves of ``aux``); ``options`` as in
    :func:`solve` (``intercept``, ``max_iter``, ``tol``, ``features``, ``stride``). ``l2``
    is a scalar shared by the problems, or ``[B, p]`` strengths (one row per problem).

    ``lockstep=False`` (default on CPU) solves the problems one after another (``lax.map``
    of :func:`solve`: memory-bound work on a small cache-resident problem beats a lock-step
    batch). ``lockstep=True`` (default on accelerators) is ``vmap(solve)``: every problem
    walks its own stages of the active-set search in one batched loop, which runs until
    the slowest problem is done.
    """
    if lockstep is None:
        lockstep = jax.default_backend() != "cpu"

    l2 = jnp.asarray(l2)
    if l2.ndim == 0:
        l2 = jnp.broadcast_to(l2, targets.shape[:1])

    def one(args):
        r, t, w, c, a, pen = args
        return solve(r, t, w, c, pen, aux=a, **options)

    args = (rows, targets, weights, C, aux, l2)
    if not lockstep:
        return jax.lax.map(one, args)
    return jax.vmap(lambda *args: one(args))(*args)


def warn_if_not_converged(status: SolverStatus, what: str, *, stacklevel: int = 3) -> None:
    """Emit a :class:`SeparableDataWarning` when any problem in ``status`` is ``SEPARABLE``,
    and a :class:`ConvergenceWarning` when any other did not converge."""
    conv = np.asarray(status.converged)
    if conv.all():
        return
    codes = np.asarray(status.code)
    sep = codes == SEPARABLE

    def where(mask):
        return "" if conv.ndim == 0 else f" in {int(mask.sum())} of {conv.size} problems"

    if sep.any():
        warnings.warn(
            f"{what}{where(sep)}: {STATUS_MESSAGES[SEPARABLE]}.",
            SeparableDataWarning,
            stacklevel=stacklevel,
        )
    bad = ~conv & ~sep
    if not bad.any():
        return
    msgs = "; ".join(sorted({STATUS_MESSAGES[int(c)] for c in np.unique(codes[bad])}))
    warnings.warn(
        f"{what} did not converge{where(bad)}: {msgs}.", ConvergenceWarning, stacklevel=stacklevel
    )
