r"""Linear-logit calibration families: the machinery shared by the parametric calibrators.

Every parametric calibrator in jaxcal (Platt, temperature, beta, Gaussian, Gamma,
exponential) maps a score :math:`s` to the logit

.. math::  z = \phi(s; \mathrm{ctx})^\top \theta, \qquad P(y = 1 \mid s) = \sigma(z),

where :math:`\phi` is a fixed feature map (``[p]`` features) and ``ctx`` a small context
computed once from the training scores (their range; families derive shifts and
rescalings from it). Monotonicity on the training range is a set of :math:`k` homogeneous
linear constraints :math:`C(\mathrm{ctx})\,\theta \ge 0`. The constraint rows are zero in
the intercept column, and restricted to the non-intercept ("slope") coefficients they form
an invertible square matrix :math:`M`:

.. math::  u = M(\mathrm{ctx})\, \theta_{\text{slopes}} \ge 0 .

So a monotone map is exactly a choice of :math:`u \in \mathbb{R}_{\ge 0}^k` and an
intercept; :meth:`LinearLogitFamily.theta_from_u` / :meth:`LinearLogitFamily.u_from_theta`
convert (a Bayesian treatment puts a prior on :math:`u \ge 0` directly).

Interface of a family (a frozen, hashable dataclass; its hyperparameters are static):

* ``param_names``: names of the entries of :math:`\theta`, e.g. ``("a", "b", "c")``.
* ``intercept_index``: position of the intercept in :math:`\theta` (``None`` if absent).
* ``context(scores, weights) -> ScoreRange``: the pytree context (range over the entries
  with positive weight, so masked padding does not count).
* ``features(scores, ctx) -> [..., p]``: :math:`\phi`, elementwise in ``scores`` (any
  shape; ``ctx`` leaves broadcast against ``scores``).
* ``constraints(ctx) -> [k, p]``: :math:`C` imposed by the fit.
* ``monotone_rows(lo, hi, ctx) -> [m, p]``: rows :math:`R` with :math:`R\theta \ge 0` iff the
  map is non-decreasing on ``[lo, hi]`` (exact: each family's derivative has a sign that is
  linear in a monotone transform of :math:`s`, so the interval ends suffice).
* ``slope_map(ctx) -> M`` (``[k, k]``), ``theta_from_u``, ``u_from_theta``, ``logit``.

A fitted calibrator (:class:`LinearLogitCalibrator`) holds ``theta`` (``[..., p]``), the
``context`` (leaves ``[...]``), a :class:`~jaxcal.calibrators._solver.SolverStatus` and the
static family; leading dimensions are batch dimensions (from ``fit_batch``).

Example:
    >>> import jax.numpy as jnp
    >>> from jaxcal.calibrators.gaussian import GaussianFamily
    >>> fam = GaussianFamily()
    >>> ctx = fam.context(jnp.array([0.0, 1.0, 2.0]), jnp.ones(3))
    >>> fam.constraints(ctx)   # rows [2 s_min, 1, 0] and [2 s_max, 1, 0]
    Array([[0., 1., 0.],
           [4., 1., 0.]], dtype=float32)
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

# jaxcal.debias imports calibrators._base; importing it first keeps the import order acyclic.
import jaxcal.debias.losses  # noqa: F401
from jaxcal._jit import jit
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._serialization import register_serializable
from jaxcal._shapes import is_traced, map_padded, padded_shape, unpad
from jaxcal._validation import (
    check_batch_inputs,
    check_groups,
    check_propensity,
)
from jaxcal.calibrators._base import FitData, FittedCalibrator, maybe_check_scores, prepare_fit
from jaxcal.calibrators._solver import (
    SolverStatus,
    sketch_stride,
    solve,
    solve_batch,
    warn_if_not_converged,
)
from jaxcal.debias.losses import check_loss, loss_targets_weights

__all__ = [
    "ScoreRange",
    "LinearLogitFamily",
    "family_dataclass",
    "LinearLogitCalibrator",
    "LinearCalibratorEstimator",
    "fit_linear",
    "fit_linear_batch",
    "group_to_batch",
    "prepare_fit_batch",
]


@pytree_dataclass
class ScoreRange:
    """The context of a linear-logit family: the training score range ``[lo, hi]``."""

    lo: jax.Array
    hi: jax.Array


def score_range(scores: jax.Array, weights: jax.Array) -> ScoreRange:
    """Range of the scores whose weight is positive (masked padding has weight 0)."""
    pos = weights > 0
    lo = jnp.min(jnp.where(pos, scores, jnp.inf))
    hi = jnp.max(jnp.where(pos, scores, -jnp.inf))
    return ScoreRange(lo, hi)


def family_dataclass(cls):
    """Decorator for families: frozen (hashable) dataclass, loadable by ``jaxcal.load``."""
    cls = dataclasses.dataclass(frozen=True)(cls)
    register_serializable(cls)
    return cls


class LinearLogitFamily:
    """Base class of a linear-logit family (see the module docstring for the interface)."""

    param_names: ClassVar[tuple[str, ...]]
    intercept_index: ClassVar[int | None] = None

    # --- to implement -------------------------------------------------------------------
    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        """Feature map :math:`\\phi(s)`: ``scores.shape + (p,)``."""
        raise NotImplementedError

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        """Rows ``R`` (``[m, p]``): non-decreasing on ``[lo, hi]`` iff ``R theta >= 0``."""
        raise NotImplementedError

    # --- defaults -----------------------------------------------------------------------
    def context(self, scores: jax.Array, weights: jax.Array) -> ScoreRange:
        """Context from the training scores (range over positive-weight entries)."""
        return score_range(scores, weights)

    def constraints(self, ctx: ScoreRange) -> jax.Array:
        """Constraint rows ``C`` (``[k, p]``) imposed by the fit: monotone on the range."""
        return self.monotone_rows(ctx.lo, ctx.hi, ctx)

    @property
    def n_params(self) -> int:
        return len(self.param_names)

    @property
    def slope_indices(self) -> tuple[int, ...]:
        """Positions of the non-intercept (penalised, constrained) coefficients."""
        return tuple(i for i in range(self.n_params) if i != self.intercept_index)

    def slope_map(self, ctx: ScoreRange) -> jax.Array:
        """Invertible ``M`` (``[k, k]``) with ``u = M theta[slope_indices] >= 0``."""
        return self.constraints(ctx)[:, np.array(self.slope_indices, dtype=int)]

    def u_from_theta(self, theta: jax.Array, ctx: ScoreRange) -> tuple[jax.Array, jax.Array]:
        """``(u, intercept)`` of coefficients ``theta`` (``intercept`` is 0 if absent)."""
        u = self.slope_map(ctx) @ theta[np.array(self.slope_indices, dtype=int)]
        c = theta[self.intercept_index] if self.intercept_index is not None else 0.0
        return u, jnp.asarray(c, theta.dtype)

    def theta_from_u(self, u: ArrayLike, intercept: ArrayLike, ctx: ScoreRange) -> jax.Array:
        """Coefficients ``theta`` with constraint values ``u`` (``>= 0`` <=> monotone)."""
        u = jnp.asarray(u)
        slopes = jnp.linalg.solve(self.slope_map(ctx), u)
        theta = (
            jnp.zeros(self.n_params, u.dtype)
            .at[np.array(self.slope_indices, dtype=int)]
            .set(slopes)
        )
        if self.intercept_index is not None:
            theta = theta.at[self.intercept_index].set(intercept)
        return theta

    def logit(self, theta: jax.Array, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        """Calibrated logit :math:`\\phi(s)^\\top\\theta` (one problem)."""
        return self.features(scores, ctx) @ theta

    def check_scores(self, scores: np.ndarray, weights: np.ndarray) -> None:
        """Eager family-specific checks of the training scores (raise ``ValueError``)."""
        pos = scores[weights > 0]
        if pos.size and pos.min() == pos.max():
            raise ValueError(_equal_scores_message(pos.min()))

    def check_scores_batch(self, scores: np.ndarray, weights: np.ndarray) -> None:
        """:meth:`check_scores` for each row of ``[B, n]`` arrays; the error names the row.

        Vectorised over rows for the default check; families that override
        :meth:`check_scores` are checked row by row.
        """
        if type(self).check_scores is LinearLogitFamily.check_scores:
            pos = weights > 0
            lo = np.where(pos, scores, np.inf).min(axis=1)
            hi = np.where(pos, scores, -np.inf).max(axis=1)
            equal = np.flatnonzero(pos.any(axis=1) & (lo == hi))
            if equal.size:
                raise ValueError(f"problem {equal[0]}: {_equal_scores_message(lo[equal[0]])}")
            return
        for b in range(scores.shape[0]):
            try:
                self.check_scores(scores[b], weights[b])
            except ValueError as exc:
                raise ValueError(f"problem {b}: {exc}") from None

    def generative(self, scores, targets, weights, ctx):  # pragma: no cover - interface
        """Generative fit ``-> (theta, n_iter, converged)``; families that have one override."""
        raise ValueError(f"{type(self).__name__} has no generative fit.")


def _equal_scores_message(value) -> str:
    return (
        f"all training scores are equal ({value:.6g}); a calibration map of the score needs "
        "at least two distinct scores."
    )


def _prepared(family: LinearLogitFamily, scores, weights):
    ctx = family.context(scores, weights)
    # zero-weight (masked) entries must still give finite features
    s = jnp.where(weights > 0, scores, ctx.lo)
    return ctx, s


def _fit_inputs(family: LinearLogitFamily, scores, weights):
    """Context, masked scores and constraint rows of one problem."""
    ctx, s = _prepared(family, scores, weights)
    return ctx, s, family.constraints(ctx)


@functools.partial(jit, static_argnames=("family", "stride"))
def _solve_jit(family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol, *, stride):
    """Discriminative fit of one problem, features built inside every data pass."""
    ctx, s, C = _fit_inputs(family, scores, weights)
    theta, status = solve(
        s,
        targets,
        weights,
        C,
        l2,
        intercept=family.intercept_index,
        max_iter=max_iter,
        tol=tol,
        features=family.features,
        aux=ctx,
        stride=stride,
    )
    return theta, ctx, status


@functools.partial(jit, static_argnames=("family", "stride", "lockstep"))
def _solve_batch_jit(
    family: LinearLogitFamily, scores, targets, weights, l2, max_iter, tol, *, stride, lockstep
):
    """Discriminative fit of ``B`` problems (``[B, n]`` arrays)."""
    ctx, s, C = jax.vmap(functools.partial(_fit_inputs, family))(scores, weights)
    theta, status = solve_batch(
        s,
        targets,
        weights,
        C,
        l2,
        intercept=family.intercept_index,
        max_iter=max_iter,
        tol=tol,
        features=family.features,
        aux=ctx,
        stride=stride,
        lockstep=lockstep,
    )
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
) -> tuple[jax.Array, ScoreRange, SolverStatus]:
    """Pure fit of one problem: ``(theta, ctx, status)`` (see ``_solver.solve``).

    One compiled function per family: the family's features are computed inside every
    data pass of the solver (the ``[n, p]`` design is never stored). Problems of
    ``n >= 4096`` rows are warm-started from a strided sketch (``stride``, default
    ``_solver.sketch_stride(n)``; 1 disables it); the result is the exact optimum either
    way (KKT-checked). Traceable as a whole (usable inside a user's ``jit``).
    """
    if method == "generative":
        return _generative_jit(family, scores, targets, weights, l2)
    stride = sketch_stride(jnp.shape(scores)[-1]) if stride is None else int(stride)
    return _solve_jit(family, scores, targets, weights, l2, max_iter, tol, stride=stride)


def fit_linear_batch(
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
    """Fit of ``B`` problems given as ``[B, n]`` arrays (zero weight = masked).

    ``stride`` as in :func:`fit_linear` (per problem, from ``n``); ``lockstep`` as in
    ``_solver.solve_batch`` (default: problem by problem on CPU, lock-step elsewhere).
    """
    if method == "generative":
        return _generative_batch_jit(family, scores, targets, weights, l2)
    stride = sketch_stride(jnp.shape(scores)[-1]) if stride is None else int(stride)
    if lockstep is None:
        lockstep = jax.default_backend() != "cpu"
    return _solve_batch_jit(
        family, scores, targets, weights, l2, max_iter, tol, stride=stride, lockstep=lockstep
    )


def _generative(family, X, s, t, w, ctx, C, l2):
    from jaxcal.calibrators._solver import CONVERGED, MAX_ITER, logistic_objective

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


def _expand(x: jax.Array, batch_ndim: int, ndim: int) -> jax.Array:
    """Reshape a ``batch``-shaped leaf so that it broadcasts against ``batch + (m...)``."""
    return jnp.reshape(x, x.shape + (1,) * (ndim - batch_ndim))


@pytree_dataclass
class LinearLogitCalibrator(FittedCalibrator):
    """A fitted linear-logit calibrator (base class of ``FittedPlatt``, ``FittedGaussian``...).

    Attributes:
        theta: ``[..., p]`` coefficients, named by ``family.param_names``.
        context: the training :class:`ScoreRange` (leaves ``[...]``).
        status: the solver's :class:`~jaxcal.calibrators._solver.SolverStatus`.
        family: the (static) family with its hyperparameters.
        method: ``"discriminative"`` or ``"generative"``.
    """

    theta: jax.Array
    context: ScoreRange
    status: SolverStatus
    family: LinearLogitFamily = static_field()
    method: str = static_field(default="discriminative")

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading batch dimensions (``()`` for a single calibrator)."""
        return tuple(self.theta.shape[:-1])

    @property
    def coefficients(self) -> dict[str, jax.Array]:
        """The coefficients by name (each with the batch shape)."""
        return {n: self.theta[..., i] for i, n in enumerate(self.family.param_names)}

    def logit(self, scores: ArrayLike) -> jax.Array:
        """Calibrated logits. Scores of any shape; a batched calibrator (batch shape ``B``)
        takes ``B + (m...)`` scores. Scores outside the training range extrapolate the
        fitted formula (see each family for clipping of transformed scores)."""
        return self._apply(scores, _logit_jit)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Calibrated probabilities :math:`\\sigma(z)` (same shape as ``scores``)."""
        return self._apply(scores, _predict_jit)

    def _apply(self, scores: ArrayLike, fn) -> jax.Array:
        """``fn(self, scores)`` through one jitted program per size bucket (``_shapes``)."""
        if is_traced(scores, self):
            return fn(self, jnp.asarray(scores, self.theta.dtype))
        s = np.asarray(maybe_check_scores(scores), np.dtype(self.theta.dtype))
        nb = self.theta.ndim - 1
        if nb == 0:
            return map_padded(lambda flat: fn(self, flat), s)
        if s.shape[:nb] != self.batch_shape:
            raise ValueError(
                f"a batched calibrator with batch shape {self.batch_shape} needs scores of shape "
                f"{self.batch_shape} + (m, ...); got {s.shape}."
            )
        B = math.prod(self.batch_shape)
        rows = s.reshape(B, -1)  # [B, m]
        m = rows.shape[1]
        B_pad, m_pad = padded_shape((B, m))
        # pad the scores (copies of each row's first score) and the calibrators (copies of
        # the first one), on the host: one program per bucket, not per (B, m)
        rows = np.pad(rows, ((0, B_pad - B), (0, m_pad - m)), mode="edge" if m else "constant")
        flat = jax.tree.map(lambda x: np.asarray(x).reshape((B,) + np.shape(x)[nb:]), self)
        cal = jax.tree.map(
            lambda x: np.pad(x, [(0, B_pad - B)] + [(0, 0)] * (x.ndim - 1), mode="edge"), flat
        )
        out = np.asarray(fn(cal, rows))[:B, :m]
        return jax.device_put(out.reshape(s.shape))

    def _logit_core(self, s: jax.Array) -> jax.Array:
        """Logits of scores ``s`` (``batch_shape + (m...)``), traceable."""
        nb = self.theta.ndim - 1
        if nb == 0:
            return self.family.logit(self.theta, s, self.context)
        ctx = jax.tree_util.tree_map(lambda x: _expand(x, nb, s.ndim), self.context)
        theta = jnp.reshape(self.theta, self.batch_shape + (1,) * (s.ndim - nb) + (-1,))
        return jnp.sum(self.family.features(s, ctx) * theta, axis=-1)

    def is_monotone_on(self, lo: ArrayLike, hi: ArrayLike, *, rtol: float = 1e-9) -> jax.Array:
        """Whether the map is non-decreasing on ``[lo, hi]`` (exact, via ``monotone_rows``;
        ``rtol`` allows rounding on constraints held with equality). Batched: ``bool[B]``."""

        def one(theta, ctx):
            R = self.family.monotone_rows(lo, hi, ctx)
            scale = jnp.abs(R) @ jnp.abs(theta)
            return jnp.all(R @ theta >= -rtol * scale)

        f = one
        for _ in range(self.theta.ndim - 1):
            f = jax.vmap(f)
        return f(self.theta, self.context)

    def is_monotone(self, *, rtol: float = 1e-9) -> jax.Array:
        """Whether the map is non-decreasing on its training range."""
        return self.is_monotone_on(self.context.lo, self.context.hi, rtol=rtol)


@jit
def _logit_jit(cal: LinearLogitCalibrator, scores: jax.Array) -> jax.Array:
    return cal._logit_core(scores)


@jit
def _predict_jit(cal: LinearLogitCalibrator, scores: jax.Array) -> jax.Array:
    return jax.nn.sigmoid(cal._logit_core(scores))


def _pad_problems(target: tuple[int, ...], s, t, w):
    """Pad ``[n]`` or ``[B, n]`` scores, targets and weights to ``target``: entries of zero
    weight (scores repeat the row's first one, a valid score), and extra problems that copy
    the first one (a valid problem whose fit is discarded)."""
    extra = target[-1] - s.shape[-1]
    if extra:
        widths = [(0, 0)] * (s.ndim - 1) + [(0, extra)]
        s = np.pad(s, widths, mode="edge")
        t, w = (np.pad(a, widths) for a in (t, w))
    if s.ndim == 2 and target[0] > s.shape[0]:
        s, t, w = (
            np.concatenate([a, np.repeat(a[:1], target[0] - a.shape[0], 0)]) for a in (s, t, w)
        )
    return s, t, w


def group_to_batch(group: ArrayLike, *arrays: Any):
    """Pad 1-D per-entry arrays into ``[G, n_max]`` rows by integer group id.

    Returns ``(ids, mask, padded...)``: ``ids`` are the sorted unique group ids (row ``g`` of
    the batch is group ``ids[g]``); ``None`` arrays stay ``None``.
    """
    first = next(a for a in arrays if a is not None)
    n = np.asarray(first).shape[0]
    g = check_groups(group, n)
    ids, code = np.unique(g, return_inverse=True)
    counts = np.bincount(code, minlength=ids.size)
    order = np.argsort(code, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n) - np.repeat(starts, counts)
    shape = (ids.size, int(counts.max()))
    mask = np.zeros(shape, bool)
    mask[code, pos] = True
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        a = np.asarray(a)
        if a.ndim != 1 or a.shape[0] != n:
            raise ValueError(f"grouped inputs must be 1-D of length {n}; got shape {a.shape}.")
        padded = np.zeros(shape, np.float64)
        padded[code, pos] = a
        out.append(padded)
    return (ids, mask, *out)


def prepare_fit_batch(scores, labels, *, mask, group, sample_weight, propensity, loss):
    """Validate ``B`` problems (``[B, n]`` with ``mask``, or 1-D with ``group`` ids) and turn
    them into the loss-weighting targets and weights (``jaxcal.debias.losses``).

    Returns ``(s, t, w)``, ``[B, n]`` float64 arrays (masked entries have weight 0).
    """
    check_loss(loss, propensity)
    if group is not None:
        if mask is not None:
            raise ValueError("pass either mask (for [B, n] inputs) or group, not both.")
        _, mask, scores, labels, sample_weight, propensity = group_to_batch(
            group, scores, labels, sample_weight, propensity
        )
    s, y, v, m = check_batch_inputs(scores, labels, mask=mask, sample_weight=sample_weight)
    omega = None
    if propensity is not None:
        omega = np.asarray(propensity, np.float64)
        if omega.shape != s.shape:
            raise ValueError(f"shape mismatch: scores {s.shape} but propensity {omega.shape}.")
        check_propensity(omega[m], int(m.sum()))
        omega = np.where(m, omega, 1.0)
    if loss == "naive":  # t = Y, w = v (jaxcal.debias.losses), without a device round trip
        return s, y, v
    tw = jax.vmap(functools.partial(loss_targets_weights, loss=loss))
    t, w = tw(
        jnp.asarray(y),
        propensity=None if omega is None else jnp.asarray(omega),
        sample_weight=jnp.asarray(v),
    )
    return s, np.asarray(t, np.float64), np.asarray(w, np.float64)


class LinearCalibratorEstimator:
    """Shared ``fit`` / ``fit_batch`` of the parametric estimators (frozen dataclasses).

    Subclasses define ``family`` (property), ``fitted_class`` and the hyperparameters
    ``l2``, ``method``, ``max_iter``, ``tol``.
    """

    fitted_class: ClassVar[type]
    methods: ClassVar[tuple[str, ...]] = ("discriminative",)

    @property
    def family(self) -> LinearLogitFamily:  # pragma: no cover - interface
        raise NotImplementedError

    def _check_hyper(self) -> None:
        if self.method not in self.methods:
            raise ValueError(
                f"{type(self).__name__}: method must be one of {self.methods}; got {self.method!r}."
            )
        if not np.isfinite(self.l2) or self.l2 < 0:
            raise ValueError(f"l2 must be a finite number >= 0; got {self.l2!r}.")
        if int(self.max_iter) < 1:
            raise ValueError(f"max_iter must be >= 1; got {self.max_iter!r}.")
        if self.tol is not None and not self.tol > 0:
            raise ValueError(f"tol must be > 0; got {self.tol!r}.")

    def _check_targets(self, targets: np.ndarray, weights: np.ndarray) -> None:
        if self.method == "generative" and np.any((targets > 1) & (weights > 0)):
            raise ValueError(
                "a generative fit needs targets in [0, 1] (class-conditional weights w*t and "
                "w*(1-t) must be >= 0), but loss='ips' gives t = Y/propensity > 1. Use "
                "loss='ips_positive' or 'snips', or method='discriminative'."
            )

    def _make(self, theta, ctx, status) -> LinearLogitCalibrator:
        return self.fitted_class(
            theta=theta, context=ctx, status=status, family=self.family, method=self.method
        )

    def _run(self, fn, s, t, w):
        """``fn`` on ``(s, t, w)`` (``[n]`` or ``[B, n]``) padded to their size bucket
        (``jaxcal._shapes``): zero-weight entries, and copies of the first problem as extra
        problems, sliced off the result."""
        dtype = np.dtype(jnp.result_type(float))  # float64 iff x64 is enabled
        s, t, w = (np.asarray(a, dtype) for a in (s, t, w))
        shape = s.shape
        s, t, w = _pad_problems(padded_shape(shape), s, t, w)
        # device_put: one copy at most (none for aligned NumPy buffers), unlike jnp.asarray
        out = fn(
            self.family,
            *(jax.device_put(a) for a in (s, t, w)),
            np.asarray(self.l2, dtype),
            np.asarray(int(self.max_iter), np.int32),
            np.asarray(default_tol(dtype) if self.tol is None else self.tol, dtype),
            method=self.method,
        )
        if len(shape) == 2 and s.shape[0] != shape[0]:
            out = jax.tree.map(lambda x: unpad(x, shape[0]), out)
        return out

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> LinearLogitCalibrator:
        """Fit on one problem.

        Args:
            scores: ``[n]`` finite scores.
            labels: ``[n]`` 0/1 labels.
            sample_weight: optional ``[n]`` non-negative weights.
            propensity: optional ``[n]`` propensities in (0, 1] (needed unless
                ``loss="naive"``).
            loss: loss weighting, see ``jaxcal.debias.losses``.

        Returns:
            The fitted calibrator (a pytree). A :class:`ConvergenceWarning` is emitted when
            the solver did not converge (``fitted.status`` says why).

        Raises:
            ValueError: on invalid inputs or hyperparameters.
        """
        self._check_hyper()
        data: FitData = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        self.family.check_scores(data.scores, data.weights)
        self._check_targets(data.targets, data.weights)
        theta, ctx, status = self._run(fit_linear, data.scores, data.targets, data.weights)
        warn_if_not_converged(status, type(self).__name__)
        return self._make(theta, ctx, status)

    def fit_batch(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        group: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> LinearLogitCalibrator:
        """Fit ``B`` independent calibrators in one compiled call.

        Either ``[B, n]`` arrays with an optional boolean ``mask`` (ragged problems), or
        1-D arrays with integer ``group`` ids (row ``g`` of the result is the ``g``-th
        smallest id, ``np.unique(group)[g]``).

        Returns:
            A fitted calibrator with batch shape ``(B,)``; ``predict`` takes ``[B, m]``.

        Raises:
            ValueError: on invalid inputs (per problem: one class only, all scores equal...).
        """
        self._check_hyper()
        s, t, w = prepare_fit_batch(
            scores,
            labels,
            mask=mask,
            group=group,
            sample_weight=sample_weight,
            propensity=propensity,
            loss=loss,
        )
        self.family.check_scores_batch(s, w)
        self._check_targets(t, w)
        theta, ctx, status = self._run(fit_linear_batch, s, t, w)
        warn_if_not_converged(status, type(self).__name__ + ".fit_batch")
        return self._make(theta, ctx, status)

    def fit_bayes(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        method: str = "nuts",
        key: jax.Array,
        **kwargs: Any,
    ):
        """Posterior over this calibrator's map (NUTS or SVI); see ``jaxcal.bayes.fit_bayes``.

        Every posterior draw is monotone on the training range (the prior lives on the
        constraint values ``u >= 0``). Only the family of this estimator is used; ``l2`` is
        replaced by the prior. Extra keyword arguments (``num_samples``, ``num_warmup``,
        ``num_chains``, ``prior``, ...) are passed on.

        Returns:
            A ``jaxcal.bayes.Posterior`` (``predict``, credible intervals, ``save``).

        Example:
            >>> post = jaxcal.GaussianCalibration().fit_bayes(s, y, key=jax.random.key(0))
        """
        from jaxcal.bayes.inference import fit_bayes

        return fit_bayes(
            self,
            scores,
            labels,
            sample_weight=sample_weight,
            propensity=propensity,
            loss=loss,
            method=method,
            key=key,
            **kwargs,
        )

    def fit_bayes_batch(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        mask: ArrayLike | None = None,
        group: ArrayLike | None = None,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
        method: str = "nuts",
        key: jax.Array,
        **kwargs: Any,
    ):
        """``B`` posteriors in one compiled call; see ``jaxcal.bayes.fit_bayes_batch``.

        Inputs as in :meth:`fit_batch` (``[B, n]`` with ``mask``, or 1-D with ``group``).
        """
        from jaxcal.bayes.inference import fit_bayes_batch

        return fit_bayes_batch(
            self,
            scores,
            labels,
            mask=mask,
            group=group,
            sample_weight=sample_weight,
            propensity=propensity,
            loss=loss,
            method=method,
            key=key,
            **kwargs,
        )


def coefficient(index: int, doc: str) -> property:
    """A read-only property for ``theta[..., index]``."""
    return property(lambda self: self.theta[..., index], doc=doc)
