"""Exact fits of a linear-logit family (:mod:`jaxcal.families.linear`): the discriminative
fit by the active-set Newton solver (:mod:`jaxcal.fitting.solver`) and the generative fits
of the families that have one, for one problem or a batch of ``[B, n]`` problems.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxcal._jit import jit
from jaxcal._native import linear_logit_cpu, linear_logit_cpu_available
from jaxcal._shapes import is_traced
from jaxcal.families.linear import LinearLogitFamily, ScoreRange
from jaxcal.fitting.solver import (
    CONVERGED,
    MAX_ITER,
    SolverStatus,
    logistic_objective,
    sketch_stride,
    solve,
    solve_batch,
)

__all__ = ["fit_linear", "default_tol"]

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


@functools.partial(jit, static_argnames=("family", "stride"))
def _solve_jit(family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol, *, stride):
    """Discriminative fit of one problem, features built inside every data pass."""
    ctx, s, C = _fit_inputs(family, scores, weights)
    options = _solver_options(family, ctx, max_iter, tol, stride)
    theta, status = solve(s, targets, weights, C, l2, **options)
    return theta, ctx, status


@functools.partial(jit, static_argnames=("family",))
def _solve_native_jit(family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol):
    """:func:`_solve_jit` by the compiled CPU kernel: the features of every row, then one
    call (``jaxcal._native.linear_logit_cpu``) that runs the solver's method without the
    sketch. A small program: it compiles in a tenth of the time of the solver's loops. A
    family beyond the kernel's sizes (more than 16 coefficients or 8 constraint rows) runs
    the solver's loops in this program instead."""
    ctx, s, C = _fit_inputs(family, scores, weights)
    k = C.shape[0]
    if k > _KERNEL_MAX_ROWS or family.n_params > _KERNEL_MAX_PARAMS:  # the solver's loops
        options = _solver_options(family, ctx, max_iter, tol, 1)
        theta, status = solve(s, targets, weights, C, l2, **options)
        return theta, ctx, status
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
    return theta, ctx, status


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
    options = _solver_options(family, ctx, max_iter, tol, stride)
    theta, status = solve_batch(s, targets, weights, C, l2, lockstep=lockstep, **options)
    return theta, ctx, status


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
    compiles in a tenth of the time; the two agree to the solver's tolerance.
    """
    batch = jnp.ndim(scores) == 2
    if method == "generative":
        fit = _generative_batch_jit if batch else _generative_jit
        return fit(family, scores, targets, weights, l2)
    stride = sketch_stride(jnp.shape(scores)[-1]) if stride is None else int(stride)
    if not batch:
        args = (scores, targets, weights, l2, max_iter, tol)
        if stride == 1 and _native_solver(*args):
            return _solve_native_jit(family, *args)
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
