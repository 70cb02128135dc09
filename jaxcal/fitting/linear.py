r"""Exact fits of a linear-logit family (:mod:`jaxcal.families.linear`): the discriminative
fit by the active-set Newton solver (:mod:`jaxcal.fitting.solver`) and the generative fits
of the families that have one, for one problem or a batch of ``[B, n]`` problems.

**Separable data.** With ``l2 = 0`` and targets in :math:`[0, 1]` the objective has no
finite minimiser exactly when the data are *separable* by the family's monotone maps
(:func:`separable`): its infimum is approached only as the coefficients diverge towards a
step. Such a fit reports ``status.code == SEPARABLE`` (``converged`` false) and returns the
one finite minimiser of the objective plus the vanishing ridge

.. math::  \tfrac{\varepsilon}{2}\, W \sum_{j \ne 0} \sigma_j^2\,\theta_j^2,
    \qquad \varepsilon = \sqrt{\text{eps}},

(:math:`W` the total weight, :math:`\sigma_j` the weighted standard deviation of feature
:math:`j` over all the data: the ridge is :math:`\tfrac{\varepsilon}{2} W\lVert\eta\rVert^2`
on the standardised slopes :math:`\eta_j = \sigma_j\theta_j`, so the map does not depend
on the units of the scores, nor on their origin where the features only move by constants
under a shift: every family but the Gaussian, whose :math:`s^2` takes up a multiple of
:math:`s`). As
:math:`\varepsilon \to 0` its direction tends to the maximum-margin separator (Rosset, Zhu &
Hastie, JMLR 2004, "Boosting as a regularized path to a maximum margin classifier"), and
its errors at the training points shrink with :math:`\varepsilon`: on a dozen points in
float64 the entries next to the threshold get probabilities about 1e-4 to 1e-3 off their
labels, the others far less. The step is softer where the gap between the classes is small
against the spread of the scores, and in float32 (:math:`\varepsilon` = 3.5e-4: the ridge
keeps the Hessian's condition number near :math:`1/\sqrt{\text{eps}}`), where the entries
next to a narrow gap can get probabilities near 1/2. The optimum is unique, so single,
batched, pure and differentiated fits all return this map (to the solver's tolerance), and
not the arbitrary point where Newton's iterates towards the step happened to stop.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._jit import jit
from jaxcal._native import linear_logit_cpu, linear_logit_cpu_available
from jaxcal._shapes import is_traced
from jaxcal.families.linear import LinearLogitFamily, ScoreRange
from jaxcal.fitting.newton import _standardisation
from jaxcal.fitting.solver import (
    CONVERGED,
    MAX_ITER,
    SEPARABLE,
    SolverStatus,
    logistic_objective,
    sketch_stride,
    solve,
    solve_batch,
)

__all__ = [
    "fit_linear",
    "fit_linear_differentiable",
    "kkt_tangent",
    "default_tol",
    "separable",
    "separable_ridge",
]

# the largest problems the compiled kernel takes (jaxcal/_native/linear_logit_cpu.cc)
_KERNEL_MAX_PARAMS, _KERNEL_MAX_ROWS = 16, 8


def _prepared(family: LinearLogitFamily, scores, weights):
    ctx = family.context(scores, weights)
    # zero-weight (masked) entries must still give finite features
    s = jnp.where(weights > 0, scores, ctx.lo)
    return ctx, s


def _fit_inputs(family: LinearLogitFamily, scores, weights):
    """Context, masked scores and constraint rows of one problem."""
    ctx, s = _prepared(family, scores, weights)
    return ctx, s, family.constraints(ctx)


def _solver_options(family: LinearLogitFamily, ctx, max_iter, tol, stride) -> dict:
    """The keyword arguments of ``solve`` / ``solve_batch`` for a family's fit: its
    features built inside every data pass from the context ``ctx``."""
    return {
        "intercept": family.intercept_index,
        "max_iter": max_iter,
        "tol": tol,
        "features": family.features,
        "aux": ctx,
        "stride": stride,
    }


def separable(family: LinearLogitFamily, scores, targets, weights, ctx: ScoreRange) -> jax.Array:
    r"""Whether the data of one problem are separable by the family's monotone maps: then,
    with ``l2 = 0``, the objective has no finite minimiser (scalar ``bool``, traceable).

    Criterion (exact for the six built-in families). Only entries of positive weight count;
    call a target 0 *negative*, 1 *positive*, in (0, 1) *soft*; a target above 1 (IPS) makes
    the answer ``False`` (that objective may instead be unbounded below:
    ``DIVERGED``). The objective has no minimiser iff some feasible direction :math:`d`
    (:math:`C d \ge 0`) gives logits :math:`g_i = \phi(s_i)^\top d` that are :math:`\le 0`
    on the negatives, :math:`\ge 0` on the positives, :math:`0` on the soft targets and not
    all 0: along :math:`d` the loss then decreases strictly, for ever (Albert & Anderson,
    Biometrika 1984, for the unconstrained case). A feasible :math:`g` is non-decreasing on
    the training range, and for these families a non-constant one is 0 at one point at
    most, while every threshold is reached (:math:`g = s - c`, or :math:`\log s' - \log c'`);
    without an intercept (temperature) the threshold is the score 0. So the test is a
    threshold :math:`c` in the features' order: every negative at or below :math:`c`, every
    positive at or above, every soft target at :math:`c`, and some entry off :math:`c`.
    Entries with equal feature rows (e.g. probabilities that beta calibration clips to the
    same value) are the same point. O(n), no linear program.

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators.platt import PlattFamily
        >>> fam, s, w = PlattFamily(), jnp.array([0.0, 1.0, 1.0, 2.0]), jnp.ones(4)
        >>> bool(separable(fam, s, jnp.array([0.0, 0.0, 1.0, 1.0]), w, fam.context(s, w)))
        True
        >>> bool(separable(fam, s, jnp.array([1.0, 0.0, 0.0, 1.0]), w, fam.context(s, w)))
        False
    """
    pos = weights > 0
    neg, one = pos & (targets == 0), pos & (targets == 1)
    soft = pos & (targets > 0) & (targets < 1)
    has_neg, has_one, has_soft = jnp.any(neg), jnp.any(one), jnp.any(soft)
    inf = jnp.asarray(jnp.inf, scores.dtype)
    a = jnp.max(jnp.where(neg, scores, -inf))  # the top negative
    b = jnp.min(jnp.where(one, scores, inf))  # the bottom positive
    lo_soft = jnp.min(jnp.where(soft, scores, inf))
    hi_soft = jnp.max(jnp.where(soft, scores, -inf))
    points = jnp.stack([a, b, lo_soft, hi_soft, ctx.lo, ctx.hi])
    F = family.features(jnp.where(jnp.isfinite(points), points, ctx.lo), ctx)
    A, B, LS, HS, LO, HI = range(6)

    def same(i, j):
        return jnp.all(F[i] == F[j])

    def at_most(i, j):  # point i is at or below point j in the features' order
        return (points[i] <= points[j]) | same(i, j)

    if family.intercept_index is not None:  # any threshold
        ordered = ~has_neg | ~has_one | at_most(A, B)
        soft_ok = ~has_soft | (
            same(LS, HS) & (~has_neg | at_most(A, LS)) & (~has_one | at_most(HS, B))
        )
        strict = ~same(LO, HI)
    elif family.n_params == 1:  # z = theta phi(s), theta >= 0: the threshold phi = 0
        x = F[:, 0]
        ordered = (~has_neg | (x[A] <= 0)) & (~has_one | (x[B] >= 0))
        soft_ok = ~has_soft | ((x[LS] == 0) & (x[HS] == 0))
        strict = (x[LO] != 0) | (x[HI] != 0)
    else:  # pragma: no cover - no such built-in family
        raise NotImplementedError(f"{type(family).__name__}: no separability test")
    over = jnp.any(pos & (targets > 1))
    return ordered & soft_ok & strict & ~over


def separable_ridge(dtype) -> float:
    r""":math:`\varepsilon` of the ridge that a separable fit adds (module docstring):
    ``sqrt(eps)`` of ``dtype``, i.e. about 1.5e-8 in float64 and 3.5e-4 in float32.

    Example:
        >>> import numpy as np
        >>> bool(separable_ridge(np.float64) == np.sqrt(np.finfo(np.float64).eps))
        True
    """
    return float(np.sqrt(np.finfo(dtype).eps))


def _penalty(family: LinearLogitFamily, l2, scores, targets, weights, ctx):
    """``([p] penalty weights, separable)`` of one problem (scores masked as by
    :func:`_prepared`): ``l2`` on every slope, plus, where the problem is separable and
    ``l2 = 0``, the vanishing ridge ``eps W sd_j^2`` of the module docstring."""
    sep = separable(family, scores, targets, weights, ctx) & (l2 <= 0)
    F = family.features(scores, ctx)
    slope, _, sd, _ = _standardisation(F, weights, family.intercept_index)
    W = jnp.sum(weights)
    ridge = separable_ridge(scores.dtype) * W * sd**2 * slope
    return l2 + jnp.where(sep, ridge, 0.0), sep


def _mark_separable(status: SolverStatus, sep, *, always: bool = False) -> SolverStatus:
    """The status of a separable problem's fit: ``SEPARABLE`` where the (ridged) solve
    converged (``always``: whatever its code), not ``converged`` (there is no optimum of
    the objective to converge to)."""
    code = jnp.where(sep & (always | (status.code == CONVERGED)), SEPARABLE, status.code)
    return dataclasses.replace(status, code=code.astype(jnp.int32), converged=code == CONVERGED)


def _solve_family(family: LinearLogitFamily, s, targets, weights, ctx, C, l2, options):
    """``solve`` of one problem with its penalty (:func:`_penalty`), status marked."""
    pen, sep = _penalty(family, l2, s, targets, weights, ctx)
    theta, status = solve(s, targets, weights, C, pen, **options)
    return theta, _mark_separable(status, sep)


@functools.partial(jit, static_argnames=("family", "stride"))
def _solve_jit(family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol, *, stride):
    """Discriminative fit of one problem, features built inside every data pass."""
    ctx, s, C = _fit_inputs(family, scores, weights)
    options = _solver_options(family, ctx, max_iter, tol, stride)
    theta, status = _solve_family(family, s, targets, weights, ctx, C, l2, options)
    return theta, ctx, status


@functools.partial(jit, static_argnames=("family",))
def _solve_native_jit(family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol):
    """:func:`_solve_jit` by the compiled CPU kernel: the features of every row, then one
    call (``jaxcal._native.linear_logit_cpu``) that runs the solver's method without the
    sketch. A small program: it compiles in a tenth of the time of the solver's loops. A
    family beyond the kernel's sizes (more than 16 coefficients or 8 constraint rows) runs
    the solver's loops in this program instead.

    Returns ``(theta, ctx, status, retry)``: ``retry`` says that :func:`fit_linear` must
    solve the problem again by the solver's loops (:func:`_solve_jit`). The kernel knows no
    separable ridge (a separable problem: its status says ``SEPARABLE``), and its answer is
    taken only with a certificate: a "converged" status whose KKT residual exceeds
    ``1e3 sqrt(tol)`` times the gradient's scale (``max_j sum_i w_i |x_ij|``) is no optimum
    (a safeguard: the kernel rejects negative Newton decrements and sums the loss without
    cancellation, as the solver does, so a failed certificate should not occur)."""
    ctx, s, C = _fit_inputs(family, scores, weights)
    k = C.shape[0]
    if k > _KERNEL_MAX_ROWS or family.n_params > _KERNEL_MAX_PARAMS:  # the solver's loops
        options = _solver_options(family, ctx, max_iter, tol, 1)
        theta, status = _solve_family(family, s, targets, weights, ctx, C, l2, options)
        return theta, ctx, status, jnp.asarray(False)
    X = family.features(s, ctx)
    intercept = family.intercept_index
    theta, info = linear_logit_cpu(X, targets, weights, C, l2, tol, max_iter, intercept=intercept)
    code = info[0].astype(jnp.int32)
    status = SolverStatus(
        converged=code == CONVERGED,
        code=code,
        n_iter=info[1].astype(jnp.int32),
        objective=info[2],
        active=info[4 : 4 + k] > 0.5,
        multipliers=info[4 + k :],
        kkt_residual=info[3],
    )
    sep = separable(family, s, targets, weights, ctx) & (l2 <= 0)
    scale = jnp.max(jnp.abs(X).T @ weights)
    uncertified = (code == CONVERGED) & ~(info[3] <= 1e3 * jnp.sqrt(tol) * scale)
    return theta, ctx, _mark_separable(status, sep, always=True), sep | uncertified


def _native_solver(*arrays) -> bool:
    """Whether a single fit runs on the compiled CPU kernel: it is available (built, passing
    its self-test, not turned off), the default backend is a CPU, the arrays are concrete (a
    caller's ``jit`` or ``vmap`` traces the pure-JAX solver) and the problem is small
    enough to need no sketch."""
    return (
        not is_traced(*arrays) and jax.default_backend() == "cpu" and linear_logit_cpu_available()
    )


@functools.partial(jit, static_argnames=("family", "stride", "lockstep"))
def _solve_batch_jit(
    family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol, *, stride, lockstep
):
    """Discriminative fit of ``B`` problems (``[B, n]`` arrays)."""
    ctx, s, C = jax.vmap(functools.partial(_fit_inputs, family))(scores, weights)
    penalty = functools.partial(_penalty, family, l2)
    pen, sep = jax.vmap(penalty)(s, targets, weights, ctx)
    options = _solver_options(family, ctx, max_iter, tol, stride)
    theta, status = solve_batch(s, targets, weights, C, pen, lockstep=lockstep, **options)
    return theta, ctx, jax.vmap(_mark_separable)(status, sep)


@functools.partial(jit, static_argnames=("family",))
def _generative_jit(family: LinearLogitFamily, scores, targets, weights, l2):
    ctx, s = _prepared(family, scores, weights)
    X, C = family.features(s, ctx), family.constraints(ctx)
    return _generative(family, X, s, targets, weights, ctx, C, l2)


@functools.partial(jit, static_argnames=("family",))
def _generative_batch_jit(family: LinearLogitFamily, scores, targets, weights, l2):
    one = functools.partial(_generative_jit.__wrapped__, family)
    return jax.vmap(one, in_axes=(0, 0, 0, None))(scores, targets, weights, l2)


def fit_linear(
    family: LinearLogitFamily,
    scores,
    targets,
    weights,
    l2,
    max_iter,
    tol,
    *,
    method="discriminative",
    stride: int | None = None,
    lockstep: bool | None = None,
    portable: bool = False,
) -> tuple[jax.Array, ScoreRange, SolverStatus]:
    """Pure fit of one problem (``[n]`` arrays) or of ``B`` problems (``[B, n]`` arrays, zero
    weight = masked): ``(theta, ctx, status)`` (see ``_solver.solve``).

    One compiled function per family: the family's features are computed inside every
    data pass of the solver (the ``[n, p]`` design is never stored). Problems of
    ``n >= 65536`` rows are warm-started from a strided sketch (``stride``, default
    ``_solver.sketch_stride(n)``; 1 disables it); the result is the exact optimum either
    way (KKT-checked). ``lockstep`` (batches) as in ``_solver.solve_batch``: by default
    problem by problem on CPU, lock-step elsewhere. Traceable as a whole (usable inside a
    user's ``jit``).

    A single problem without a sketch, on concrete arrays and a CPU, runs on the compiled
    kernel where it is available (:func:`_native_solver`): the same method, a program that
    compiles in a tenth of the time; the two agree to the solver's tolerance. A separable
    problem (``status.code == SEPARABLE``, module docstring), or a kernel answer that fails
    its KKT certificate, is then solved again by the solver's loops (which add the ridge
    that makes a separable map unique). ``portable=True`` never
    takes the kernel (the pure fits: exported programs and derivatives do not depend on
    it).
    """
    batch = jnp.ndim(scores) == 2
    if method == "generative":
        fit = _generative_batch_jit if batch else _generative_jit
        return fit(family, scores, targets, weights, l2)
    stride = sketch_stride(jnp.shape(scores)[-1]) if stride is None else int(stride)
    if not batch:
        args = (scores, targets, weights, l2, max_iter, tol)
        if stride == 1 and not portable and _native_solver(*args):
            *out, retry = _solve_native_jit(family, *args)
            if not bool(retry):
                return tuple(out)
        return _solve_jit(family, *args, stride=stride)
    if lockstep is None:
        lockstep = jax.default_backend() != "cpu"
    return _solve_batch_jit(
        family, scores, targets, weights, l2, max_iter, tol, stride=stride, lockstep=lockstep
    )


def _generative(family, X, s, t, w, ctx, C, l2):
    theta, n_iter, converged = family.generative(s, t, w, ctx)
    k = C.shape[0]
    obj = logistic_objective(theta, X, t, w, l2, intercept=family.intercept_index)
    status = SolverStatus(
        converged=jnp.asarray(converged),
        code=jnp.where(converged, CONVERGED, MAX_ITER).astype(jnp.int32),
        n_iter=jnp.asarray(n_iter, jnp.int32),
        objective=obj,
        active=jnp.zeros(k, bool),
        multipliers=jnp.zeros(k, theta.dtype),
        kkt_residual=jnp.full((), jnp.nan, theta.dtype),
    )
    return theta, ctx, status


def default_tol(dtype) -> float:
    """Default Newton-decrement tolerance: ``1e-18`` in float64, ``1e-9`` in float32.

    The fit stops when half the squared Newton decrement is below ``tol * sum(w)``; the
    remaining error in the coefficients is then about ``sqrt(tol / curvature)`` (relative),
    i.e. ~1e-9 in float64. Rounding of the gradient sums leaves a decrement of order
    ``eps^2 * sum(w)``, far below these thresholds, so they are reachable.
    """
    return 1e-18 if jnp.dtype(dtype) == jnp.float64 else 1e-9


# ----------------------------------------------------------------- derivatives of the fit
# The discriminative fit theta*(s, t, w) is the solution of a convex problem, so its
# derivative with respect to the data follows from the KKT conditions at the solution
# (implicit differentiation), not from the solver's iterations: with the active rows A,
#
#     F(theta, mu; s, t, w) = [grad_theta L(theta; s, t, w) - C_A(ctx)^T mu ;  C_A(ctx) theta] = 0
#
# (ctx: the score range, itself a function of the scores), so that
#
#     d(theta, mu) = -J^{-1} (dF/d(s, t, w)) . d(s, t, w),   J = dF/d(theta, mu).
#
# Inactive rows contribute mu_j = 0 (the row of F for them is mu_j itself).


def _slope_mask(family: LinearLogitFamily, dtype) -> jax.Array:
    pen = jnp.ones(family.n_params, dtype)
    if family.intercept_index is not None:
        pen = pen.at[family.intercept_index].set(0.0)
    return pen


def _objective_gradient(family: LinearLogitFamily, l2, theta, scores, targets, weights):
    """``grad_theta L`` and the constraint rows ``C(ctx)`` of one problem (in JAX, so that
    ``jax.jvp`` carries the dependence on the data, through the context as well), with
    the penalty of the fit (:func:`_penalty`: the ridge of a separable problem too)."""
    ctx, s = _prepared(family, scores, weights)
    X = family.features(s, ctx)
    z = X @ theta
    pen, _ = _penalty(family, l2, s, targets, weights, ctx)
    grad = (
        X.T @ (weights * (jax.nn.sigmoid(z) - targets))
        + pen * _slope_mask(family, theta.dtype) * theta
    )
    return grad, family.constraints(ctx)


def _kkt_map(family: LinearLogitFamily, l2, active, theta, mu, scores, targets, weights):
    """``F(theta, mu; data)`` of the module's comment: ``[p + k]``."""
    grad, C = _objective_gradient(family, l2, theta, scores, targets, weights)
    a = active.astype(theta.dtype)
    Ca = C * a[:, None]
    return jnp.concatenate([grad - Ca.T @ mu, Ca @ theta + (1.0 - a) * mu])


def kkt_tangent(
    family: LinearLogitFamily,
    l2,
    theta: jax.Array,
    active: jax.Array,
    primals: tuple,
    tangents: tuple,
) -> jax.Array:
    r"""The derivative of the constrained optimum ``theta`` along ``tangents`` of the data
    ``primals = (scores, targets, weights)``, by the implicit function theorem at the KKT
    point with the ``active`` rows held with equality:

    .. math::

        \begin{bmatrix} \nabla^2_\theta L & -C_A^\top \\ C_A & 0 \end{bmatrix}
        \begin{bmatrix} \dot\theta \\ \dot\mu_A \end{bmatrix}
        = -\begin{bmatrix} \partial_d (\nabla_\theta L - C_A^\top\mu_A)\,\dot d \\
        \partial_d (C_A\theta)\,\dot d \end{bmatrix},

    where :math:`d = (s, t, w)` and :math:`C_A` depends on the scores through the context
    (the score range). The multipliers :math:`\mu_A` are the least-squares solution of
    :math:`\nabla_\theta L = C_A^\top\mu_A` at the solution. Without active rows this is the
    classic :math:`\dot\theta = -H^{-1}\,\partial_d\nabla_\theta L\,\dot d`. The Jacobian is
    ``jax.jacobian`` of the KKT map (``p + k <= 6`` unknowns), the right side ``jax.jvp`` of
    it in the data; both linear in the tangents, so reverse mode transposes it.
    """
    dtype = theta.dtype
    theta = jax.lax.stop_gradient(theta)
    grad, C = _objective_gradient(family, l2, theta, *primals)
    a = active.astype(dtype)
    Ca = C * a[:, None]
    G = Ca @ Ca.T + jnp.diag(1.0 - a)
    mu = jnp.linalg.solve(G, Ca @ grad)  # 0 on the inactive rows
    p = theta.shape[0]

    def in_unknowns(z):
        return _kkt_map(family, l2, active, z[:p], z[p:], *primals)

    J = jax.jacobian(in_unknowns)(jnp.concatenate([theta, mu]))
    _, rhs = jax.jvp(
        lambda s, t, w: _kkt_map(family, l2, active, theta, mu, s, t, w), primals, tangents
    )
    return -jnp.linalg.solve(J, rhs)[:p]


def _pack_status(status: SolverStatus) -> jax.Array:
    dtype = status.objective.dtype
    head = jnp.stack(
        [
            status.converged.astype(dtype),
            status.code.astype(dtype),
            status.n_iter.astype(dtype),
            status.objective,
            status.kkt_residual,
        ]
    )
    return jnp.concatenate([head, status.active.astype(dtype), status.multipliers])


def _unpack_status(v: jax.Array, k: int) -> SolverStatus:
    v = jax.lax.stop_gradient(v)
    return SolverStatus(
        converged=v[0] > 0.5,
        code=v[1].astype(jnp.int32),
        n_iter=v[2].astype(jnp.int32),
        objective=v[3],
        active=v[5 : 5 + k] > 0.5,
        multipliers=v[5 + k :],
        kkt_residual=v[4],
    )


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _solve_differentiable(spec, scores, targets, weights):
    family, l2, max_iter, tol = spec
    dtype = scores.dtype
    theta, _, status = fit_linear(
        family,
        scores,
        targets,
        weights,
        jnp.asarray(l2, dtype),
        jnp.asarray(max_iter, jnp.int32),
        jnp.asarray(tol, dtype),
        portable=True,
    )
    return theta, _pack_status(status)


@_solve_differentiable.defjvp
def _solve_differentiable_jvp(spec, primals, tangents):
    family, l2 = spec[0], spec[1]
    theta, packed = _solve_differentiable(spec, *primals)
    k = (packed.shape[0] - 5) // 2
    active = _unpack_status(packed, k).active
    dtheta = kkt_tangent(family, l2, theta, active, primals, tangents)
    return (theta, packed), (dtheta, jnp.zeros_like(packed))


def fit_linear_differentiable(
    family: LinearLogitFamily,
    scores: jax.Array,
    targets: jax.Array,
    weights: jax.Array,
    *,
    l2: float,
    max_iter: int,
    tol: float,
) -> tuple[jax.Array, ScoreRange, SolverStatus]:
    """The discriminative fit of one problem (``[n]`` arrays of one float dtype, possibly
    tracers) with derivatives: ``(theta, ctx, status)`` as :func:`fit_linear` (its portable
    path: never the compiled kernel), differentiable (``jvp``, ``grad``, any order of
    ``jit`` / ``vmap``) in ``scores``, ``targets`` and ``weights``.

    ``theta`` is differentiated implicitly at the KKT point (:func:`kkt_tangent`), never
    through the Newton iterations; ``ctx`` (the score range) by JAX (the derivative of a
    minimum is that of the score attaining it); ``status`` carries no derivative. The
    derivative is that of the optimum on its active set: where a constraint is about to
    become active or inactive (a multiplier or a constraint value at 0) the map is not
    differentiable and this is the derivative from the side of the current active set.

    The hyperparameters ``l2``, ``max_iter`` and ``tol`` are Python numbers (static).
    """
    spec = (family, float(l2), int(max_iter), float(tol))
    theta, packed = _solve_differentiable(spec, scores, targets, weights)
    ctx = family.context(scores, weights)
    k = (packed.shape[0] - 5) // 2
    return theta, ctx, _unpack_status(packed, k)
