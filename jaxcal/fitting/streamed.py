r"""Exact linear-logit fits from data read in chunks, on one process or across the processes
of a ``jax.distributed`` job.

The objective of :mod:`jaxcal.fitting.solver`,

.. math::

    L(\theta) = \sum_i w_i \,[\operatorname{softplus}(x_i^\top\theta) - t_i\, x_i^\top\theta]
        + \tfrac{\lambda_2}{2}\,\lVert \theta_{\setminus 0} \rVert^2
    \quad\text{subject to}\quad C\theta \ge 0,

is a sum over rows, and so are its gradient and Hessian and the moments that standardise the
features. :func:`fit_linear_streamed` runs the in-memory solver's method with every data pass
replaced by a pass over the chunks:

1. **Standardisation.** One pass sums :math:`\sum w`, :math:`\sum w t`, :math:`\sum w\phi`
   and :math:`\sum w\phi^2`; a family with an intercept takes a second one for
   :math:`\sum w(\phi - c)^2` about the weighted centre :math:`c`. The coordinates
   :math:`\theta = A\eta`, the penalty and the intercept-only start are then those of the
   in-memory fit (``newton._coordinates``).
2. **Newton.** The loop of ``newton._newton`` runs on the host: ``_newton_start``, then, for
   each trial point, one pass in which every chunk's objective, gradient and Hessian
   (``newton._value_grad_hess`` on the chunk, padded to one fixed size with zero weights: one
   compiled program per chunk size bucket, ``jaxcal._shapes``) are added up on the device;
   :func:`jaxcal.distributed.process_sum` adds the processes' sums; ``_newton_update`` takes
   the step (the same Armijo test, step and stopping rule).
3. **Active set.** The stages of ``solver._active_set_solve``, as Python control flow: the
   unconstrained problem; if its optimum is infeasible, the violated rows, warm-started,
   accepted by the same KKT test; otherwise every active set, the feasible candidate with the
   lowest objective winning. A constrained stage that does not converge from the
   unconstrained iterate runs again from the intercept-only start, as in memory.

So the result is the in-memory fit's optimum, up to the rounding of the sums (their order
differs). There is no sketch (``solver.sketch_stride``): a streamed fit reads its source once
per pass, typically 8-20 passes with the standardisation. Every process runs the same host
control flow on the same summed values, so every process ends with the same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal import distributed
from jaxcal._jit import jit
from jaxcal.families.linear import LinearLogitFamily, ScoreRange
from jaxcal.fitting.newton import (
    CONVERGED,
    _coordinates,
    _newton_candidate,
    _newton_running,
    _newton_start,
    _newton_trial,
    _newton_update,
    _phi,
    _Problem,
    _value_grad_hess,
)
from jaxcal.fitting.solver import SolverStatus, _feasible, _finish, _kkt_ok, _subsets

__all__ = ["Chunks", "fit_linear_streamed"]

#: a zero-argument callable returning an iterator of ``(scores, targets, weights)`` chunks
#: (1-D arrays of equal length, scores already in the working dtype's range), called once
#: per pass; it may raise on a bad chunk (see :class:`_Passes`)
Chunks = Callable[[], Iterable[tuple[np.ndarray, np.ndarray, np.ndarray]]]


@functools.partial(jit, static_argnames=("family",))
def _chunk_moments(family: LinearLogitFamily, ctx, centre, scores, targets, weights, acc):
    """``acc`` plus one chunk's ``(sum w, sum w t, w @ (phi - centre), w @ (phi - centre)**2)``."""
    s = jnp.where(weights > 0, scores, ctx.lo)  # zero weight (padding): any finite features
    F = family.features(s, ctx) - centre
    sums = (jnp.sum(weights), jnp.sum(weights * targets), weights @ F, weights @ F**2)
    return jax.tree.map(jnp.add, acc, sums)


@functools.partial(jit, static_argnames=("family",))
def _chunk_derivatives(family: LinearLogitFamily, ctx, prob, eta, scores, targets, weights, acc):
    """``acc`` plus one chunk's objective, gradient and Hessian at ``eta`` (without the
    penalty, which the step adds once)."""
    s = jnp.where(weights > 0, scores, ctx.lo)
    chunk = prob._replace(rows=s, t=targets, w=weights, Q=jnp.zeros_like(prob.Q))
    return jax.tree.map(jnp.add, acc, _value_grad_hess(chunk, _phi(family.features, ctx), eta))


@functools.partial(jit, static_argnames=("family",))
def _constraints(family: LinearLogitFamily, ctx) -> jax.Array:
    return family.constraints(ctx)


@functools.partial(jit, static_argnames=("intercept",))
def _standardised(C, W, WT, mean, var, l2, *, intercept: int | None) -> _Problem:
    """The standardised problem, without its data (empty ``rows``, ``t``, ``w``), from the
    weighted moments: ``mean`` of the features, ``var`` about the centre (``_standardisation``
    of the in-memory fit); ``C``: the constraint rows."""
    slope = np.ones(mean.shape[0], bool)
    if intercept is not None:
        slope[intercept] = False
    centre = jnp.where(slope, mean, 0.0) if intercept is not None else jnp.zeros_like(mean)
    sd = jnp.sqrt(var)
    sd = jnp.where(slope & (sd > 0), sd, 1.0)
    coords = _coordinates(jnp.asarray(slope), centre, sd, C, l2, intercept, WT / W)
    empty = jnp.zeros(0, W.dtype)
    return _Problem(empty, empty, empty, centre, 1.0 / sd, W, *coords)


@jit
def _start(prob: _Problem, active, max_iter):
    """Newton's initial state on the face of ``active``, its first trial point, and whether
    the loop runs."""
    P, state = _newton_start(prob, active)
    return P, state, _newton_trial(state), _newton_running(state, max_iter)


@jit
def _step(prob: _Problem, P, tol, max_iter, state, f, g, H):
    """The state after the pass at its trial point (the penalty added here, as in
    ``_value_grad_hess``), the next trial point, and whether the loop goes on."""
    eta = _newton_trial(state)
    f, g, H = f + 0.5 * eta @ prob.Q @ eta, g + prob.Q @ eta, H + prob.Q
    state = _newton_update(P, prob.W, tol, state, f, g, H)
    return state, _newton_trial(state), _newton_running(state, max_iter)


@jit
def _judge(prob: _Problem, state, active):
    """The candidate of a finished Newton loop, whether it passes the KKT test, its
    objective if it is feasible (``inf`` otherwise), as the in-memory search judges them,
    the constraint rows it violates, and its ``(theta, status)`` should it be the answer."""
    c = _newton_candidate(state)
    usable = _feasible(prob, c, active) & ~jnp.isnan(c.objective)
    objective = jnp.where(usable, c.objective, jnp.inf)
    return c, _kkt_ok(prob, c, active), objective, prob.C @ c.eta < 0, _finish(prob, c, active)


class _Passes:
    """Passes over the chunks of every process, each summed on the device, then across
    processes (float64 on the host, the same bits on every process).

    An error raised while one process reads its chunks (a bad chunk's ``ValueError``, a
    missing file) is raised there and, as a ``ValueError`` naming how many failed, on every
    other process, so that no process waits for the others' sums.
    """

    def __init__(self, chunks: Chunks, *, chunk_rows: int, rows: int, dtype):
        self.chunks = chunks
        self.size = chunk_rows
        self.rows = rows
        self.dtype = np.dtype(dtype)
        self.count = 0

    def run(self, program: Callable, args: tuple, zeros: Any) -> Any:
        """``program(*args, s, t, w, acc)`` over every chunk, summed over processes."""
        self.count += 1
        read, error = 0, None
        try:
            acc = zeros
            for chunk in self.chunks():
                read += len(chunk[0])
                s, t, w = self._padded(chunk)
                previous, acc = acc, program(*args, s, t, w, acc)
                # at most two chunks in flight: reading the next overlaps this one's program
                jax.block_until_ready(previous)
            local = jax.tree.map(lambda x: np.asarray(x, np.float64), acc)
        except Exception as exc:  # raised below on every process, not only on this one
            error, local = exc, jax.tree.map(lambda x: np.zeros(np.shape(x)), zeros)
        total, counts = distributed.process_sum((local, np.array([read, error is not None])))
        failed, read = int(counts[1]), int(counts[0])
        if failed:
            if error is not None:
                raise error
            raise ValueError(
                f"{failed} process(es) failed to read their chunks (see their errors)."
            )
        if read != self.rows:
            raise ValueError(
                f"the source returned {read} rows on pass {self.count} but {self.rows} on the "
                "first: a callable source must return the same chunks on every call."
            )
        return jax.tree.map(lambda x: np.asarray(x, self.dtype), total)

    def _padded(self, chunk) -> list[np.ndarray]:
        """The chunk's arrays in the working dtype, padded with zeros to the chunk size (zero
        weight)."""
        n = len(chunk[0])
        if n > self.size:
            raise ValueError(
                f"a chunk of {n} rows on pass {self.count}, more than any on the first pass: "
                "a callable source must return the same chunks on every call."
            )
        if n == self.size:
            return [np.asarray(a, self.dtype) for a in chunk]
        out = np.empty((3, self.size), self.dtype)
        for row, a in zip(out, chunk, strict=True):
            row[:n] = a
        out[:, n:] = 0.0
        return list(out)


def _zeros(p: int, dtype) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((), dtype), np.zeros(p, dtype), np.zeros((p, p), dtype)


def _moments(family, ctx, passes: _Passes, p: int, dtype):
    """``(W, WT, mean, var)``: the weighted moments of the features (one or two passes)."""
    zeros = (np.zeros((), dtype), np.zeros((), dtype), np.zeros(p, dtype), np.zeros(p, dtype))
    centre = np.zeros(p, dtype)
    W, WT, S1, S2 = passes.run(functools.partial(_chunk_moments, family), (ctx, centre), zeros)
    if family.intercept_index is None:
        return W, WT, S1 / W, S2 / W
    centre = S1 / W
    centre[family.intercept_index] = 0.0
    var = passes.run(functools.partial(_chunk_moments, family), (ctx, centre), zeros)[3] / W
    return W, WT, S1 / W, var


def _search(prob: _Problem, newton: Callable):
    """The active-set search of ``solver._active_set_solve`` (without the sketch's polish
    stage), driven from the host: the selected candidate's ``(theta, status)``.

    ``newton(active, eta0)`` runs Newton on a face and returns :func:`_judge`'s verdict."""
    k = prob.C.shape[0]
    none = np.zeros(k, bool)
    unc, unc_ok, unc_objective, violated, unc_answer = newton(none, prob.eta0)
    if k == 0 or unc_ok:
        return unc_answer
    warm = bool(np.any(np.asarray(unc.eta) != np.asarray(prob.eta0)))

    def on_face(active):
        out = newton(active, unc.eta)
        if int(out[0].code) != CONVERGED and warm:  # once more from the intercept-only start
            out = newton(active, prob.eta0)
        return out

    _, ok, _, _, answer = on_face(np.asarray(violated))
    if ok:
        return answer
    best, best_objective = None, np.inf
    for subset in _subsets(k):
        _, _, objective, _, answer = on_face(subset)
        if float(objective) < best_objective:
            best, best_objective = answer, float(objective)
    return unc_answer if float(unc_objective) <= best_objective else best


def fit_linear_streamed(
    family: LinearLogitFamily,
    chunks: Chunks,
    ctx: ScoreRange,
    l2: float,
    *,
    max_iter: int,
    tol: float,
    chunk_rows: int,
    rows: int,
) -> tuple[jax.Array, SolverStatus, int]:
    """The discriminative fit of ``family`` on the rows of ``chunks`` (of every process).

    Args:
        family: the linear-logit family.
        chunks: this process's chunks (:data:`Chunks`), read once per pass.
        ctx: the context of the whole data (the range of the scores of positive weight,
            over every process), in the working dtype.
        l2: the penalty :math:`\\lambda_2`.
        max_iter: Newton iterations per candidate active set.
        tol: the Newton-decrement tolerance relative to the total weight.
        chunk_rows: the size every chunk is padded to (at least the largest chunk of any
            process; one compiled program per size).
        rows: the rows of every process together, checked on every pass.

    Returns:
        ``(theta, status, passes)``: the coefficients, the solver's status (as the in-memory
        fit reports them), and the number of passes over the chunks.

    Raises:
        ValueError: ``chunks`` failed on another process (it raises its own error), or
            returned other rows than on its first pass.
    """
    dtype = np.dtype(ctx.lo.dtype)
    p = family.n_params
    passes = _Passes(chunks, chunk_rows=chunk_rows, rows=rows, dtype=dtype)
    W, WT, mean, var = _moments(family, ctx, passes, p, dtype)
    C = _constraints(family, ctx)
    prob = _standardised(
        C, W, WT, mean, var, np.asarray(l2, dtype), intercept=family.intercept_index
    )
    tol, max_iter = np.asarray(tol, dtype), np.asarray(max_iter, np.int32)
    derivatives = functools.partial(_chunk_derivatives, family)

    def newton(active, eta0):
        face = prob._replace(eta0=eta0)
        P, state, trial, running = _start(face, active, max_iter)
        while bool(running):
            f, g, H = passes.run(derivatives, (ctx, face, trial), _zeros(p, dtype))
            state, trial, running = _step(face, P, tol, max_iter, state, f, g, H)
        return _judge(face, state, active)

    theta, status = _search(prob, newton)
    return theta, status, passes.count
