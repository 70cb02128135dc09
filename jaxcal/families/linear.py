r"""Linear-logit calibration families: what a parametric calibration map is.

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
* ``check_scores(scores, weights)`` (eager, raises ``ValueError``) and its JAX twin
  ``invalid_scores(scores, weights) -> bool`` (the pure fits' NaN policy).

A fitted calibrator (:class:`LinearLogitCalibrator`) holds ``theta`` (``[..., p]``), the
``context`` (leaves ``[...]``), a :class:`~jaxcal.fitting.solver.SolverStatus` and the
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
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal._serialization import register_serializable

__all__ = ["ScoreRange", "score_range", "family_dataclass", "LinearLogitFamily"]


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
    #: whether fitting on ``s - c`` gives the same map (then the calibrators may shift scores
    #: that the working precision cannot resolve, ``jaxcal.calibrators._scaling``)
    shift_equivariant: ClassVar[bool] = False
    #: whether fitting on ``s * 2**-k`` gives the same map (with ``l2 = 0``)
    scale_equivariant: ClassVar[bool] = False

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
        # one multiply-add per feature: fuses with the features (a dot or a row reduction
        # materialises the [n, p] feature matrix first)
        f = self.features(scores, ctx)
        return sum(f[..., i] * theta[..., i] for i in range(f.shape[-1]))

    def check_scores(self, scores: np.ndarray, weights: np.ndarray) -> None:
        """Eager family-specific checks of the training scores (raise ``ValueError``)."""
        pos = scores[weights > 0]
        if pos.size and pos.min() == pos.max():
            raise ValueError(_equal_scores_message(pos.min()))

    def invalid_scores(self, scores: jax.Array, weights: jax.Array) -> jax.Array:
        """:meth:`check_scores` in JAX (scalar bool, for tracers): whether the training
        scores would be refused. The pure fits poison their result with NaN where it is
        true (``jaxcal.calibrators._base``)."""
        ctx = score_range(scores, weights)
        return ~(ctx.lo < ctx.hi)

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
