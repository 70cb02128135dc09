r"""Spline calibration: :math:`\operatorname{logit} P(y=1 \mid s) = f(u)` with :math:`f` a
penalised natural cubic spline (Lucena 2018, "Spline-based probability calibration",
arXiv:1809.07751; the smoothing-spline penalty of Green & Silverman 1994).

:math:`u = s` (``on="score"``) or :math:`u = \operatorname{logit}(p)` (``on="logit"``, for
probabilities; :math:`p` is clipped to :math:`[10^{-15}, 1 - 10^{-15}]` first, so 0 and 1
are allowed). The knots :math:`\xi_1 < \dots < \xi_K` are the :math:`k / (K - 1)`
weighted quantiles (inverted CDF; weights: the loss weights) of the training :math:`u`
(distinct values; the smallest and largest training :math:`u` are the end knots), and
:math:`f` minimises

.. math::

    \frac{\sum_i w_i[\operatorname{softplus}(f(u_i)) - t_i f(u_i)]}{\sum_i w_i}
    + \frac{\lambda}{2}\, R^3 \int f''(u)^2\,du, \qquad R = \xi_K - \xi_1,

over natural cubic splines (linear beyond the end knots), with :math:`(t, w)` from the loss
weighting (``jaxcal.losses``: ``sample_weight``, ``propensity``, ``loss="ips"``...).
Among all functions this penalised problem is solved by a natural cubic spline with a
knot at every distinct :math:`u` (Green & Silverman, Thm 2.4): the quantile knots are a
low-rank version of that solution. The roughness penalty is chosen over a ridge on the
coefficients (as in ml-insights' ``SplineCalib``) because it does not depend on the
basis or on where the knots fall, penalises only departures from a line (so
:math:`\lambda \to \infty` gives Platt scaling on :math:`u`, and :math:`\lambda \to 0` the
unpenalised spline), and, with the mean loss and the :math:`R^3` factor, makes
:math:`\lambda` dimensionless: an affine change of the scores changes nothing.

:math:`\lambda` is chosen from ``penalties`` by ``n_folds``-fold cross-validated weighted
log loss (deterministic folds, stratified by label, each label's rows dealt in a fixed
scramble of their positions: :func:`jaxcal.fitting.folds.stratified_folds` without
scores; folds balanced in score would share the training folds' label noise and pick too
small a penalty); every (penalty, fold) problem is solved exactly in one batched, compiled
Newton solve, then the model is refitted on all rows at the chosen :math:`\lambda`.

``monotone=True`` constrains the B-spline coefficients of :math:`f` to be non-decreasing
(``jaxcal.calibrators._spline_basis``): then :math:`f` is non-decreasing everywhere. This is
a *sufficient* condition (a linear inequality per coefficient pair), so the constrained fit
is the exact optimum over that convex set (projected Newton, KKT conditions checked in the
tests), which contains every fit whose coefficients are already ordered but not every
non-decreasing spline.

On tracers (inside a caller's ``jit``, ``vmap``, ``grad``) ``fit`` is the pure fit
(:meth:`SplineCalibration._fit_pure`): the same folds, knots and solver in JAX alone; the
coefficients are differentiated implicitly at the chosen penalty (the cross-validated choice
is piecewise constant in the data); invalid data gives NaN.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> s = rng.normal(size=2000)
    >>> labels = (rng.uniform(size=2000) < 1 / (1 + np.exp(-(s + 0.5 * s**2 - 1)))).astype(int)
    >>> cal = jaxcal.SplineCalibration(n_knots=10).fit(s, labels)
    >>> cal.knots.shape
    (10,)
    >>> probs = cal.predict(np.array([-2.0, 0.0, 2.0]))
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._fitdata import FitData, PureFitData, maybe_check_scores, poison
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._shapes import is_traced, map_padded, padded_size
from jaxcal._validation import check_int, check_probs, check_real
from jaxcal.calibrators._base import Calibrator, FittedCalibrator, check_choice
from jaxcal.calibrators._linear import _logit_jit, _predict_jit  # call cal._logit_core
from jaxcal.calibrators._scaling import (
    ScoreScaling,
    fit_scaling,
    identity_scaling,
    pure_identity_scaling,
)
from jaxcal.calibrators._spline_basis import spline_logit
from jaxcal.calibrators._spline_core import (
    SplineStatus,
    fit_spline_cv_differentiable,
    fit_spline_cv_jit,
)
from jaxcal.fitting.folds import stratified_folds
from jaxcal.fitting.solver import ConvergenceWarning

__all__ = ["SplineCalibration", "FittedSpline", "DEFAULT_PENALTIES"]

#: the default grid of :math:`\lambda`: 17 values, :math:`10^{-8}` to :math:`10^{0}`
DEFAULT_PENALTIES = tuple(float(x) for x in np.logspace(-8, 0, 17))
_ONS = ("score", "logit")
_PROB_CLIP = 1e-15


def _to_u(scores, on: str, name: str = "scores"):
    """The spline's input :math:`u` of validated concrete scores (float64, host)."""
    if on == "score":
        return scores
    p = check_probs(scores, name=name) if np.ndim(scores) == 1 else np.asarray(scores)
    if np.ndim(scores) != 1 and ((p < 0).any() or (p > 1).any()):
        raise ValueError(f"{name} must lie in [0, 1] for on='logit'; got values outside.")
    p = np.clip(np.asarray(p, np.float64), _PROB_CLIP, 1 - _PROB_CLIP)
    return np.log(p) - np.log1p(-p)


@pytree_dataclass
class FittedSpline(FittedCalibrator):
    r"""A fitted spline calibration map.

    Attributes:
        knots: ``[K]`` knots in transformed score units :math:`u' = u\,2^{-k} - c`
            (``scaling``; the identity for ordinary scores).
        theta: ``[K]`` the solver's coefficients: :math:`\gamma_0` and the differences
            :math:`\gamma_k - \gamma_{k-1}` of the free B-spline coefficients (all
            :math:`\ge 0` for a monotone fit).
        penalties: ``[L]`` the grid of :math:`\lambda`.
        cv_loss: ``[L]`` the cross-validated mean log loss of each (NaN without
            cross-validation).
        penalty: the chosen :math:`\lambda`.
        status: the solver's :class:`~jaxcal.calibrators._spline_core.SplineStatus`.
        scaling: the exact transform of the scores (``jaxcal.calibrators._scaling``).
        on: ``"score"`` or ``"logit"`` (static).
        monotone: whether the fit was constrained (static).

    The float leaves have the dtype of the scores the map was fitted on (float32 scores:
    float32, also with x64 enabled).

    Example:
        >>> import jaxcal, numpy as np
        >>> s = np.linspace(-2, 2, 40, dtype=np.float32); y = (np.arange(40) % 3 == 0) | (s > 1)
        >>> fitted = jaxcal.SplineCalibration(n_knots=4, penalties=[1e-2]).fit(s, y)
        >>> type(fitted).__name__, fitted.knots.shape, fitted.theta.dtype
        ('FittedSpline', (4,), dtype('float32'))
    """

    knots: jax.Array
    theta: jax.Array
    penalties: jax.Array
    cv_loss: jax.Array
    penalty: jax.Array
    status: SplineStatus
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)
    on: str = static_field(default="score")
    monotone: bool = static_field(default=False)

    def _u(self, scores: ArrayLike):
        if is_traced(scores, self):
            s = jnp.asarray(scores, self.knots.dtype)
            if self.on == "logit":
                p = jnp.clip(s, _PROB_CLIP, 1 - _PROB_CLIP)
                s = jnp.log(p) - jnp.log1p(-p)
            return self.scaling.apply(s).astype(self.knots.dtype)
        u = _to_u(np.asarray(maybe_check_scores(scores), np.float64), self.on)
        return np.asarray(self.scaling.apply(u), np.dtype(self.knots.dtype))

    def _apply(self, scores: ArrayLike, fn) -> jax.Array:
        out = map_padded(lambda flat: fn(self, flat), self._u(scores))
        if is_traced(scores, self):  # in the trace: NaN for scores fit would refuse
            s = jnp.asarray(scores, self.knots.dtype)
            ok = jnp.isfinite(s)
            if self.on == "logit":
                ok = ok & (s >= 0) & (s <= 1)
            out = jnp.where(ok, out, jnp.nan)
        return out

    def predict_logit(self, scores: ArrayLike) -> jax.Array:
        """Calibrated logits :math:`f(u)` (same shape as ``scores``). Traced scores (inside
        ``jit``) give NaN where concrete ones would raise (not finite; for ``on="logit"``,
        outside [0, 1]).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.linspace(-2, 2, 40); y = (np.arange(40) % 3 == 0) | (s > 1)
            >>> cal = jaxcal.SplineCalibration(n_knots=4, penalties=[1e-2]).fit(s, y)
            >>> bool(np.allclose(cal.predict(s), 1 / (1 + np.exp(-cal.predict_logit(s)))))
            True
        """
        return self._apply(scores, _logit_jit)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Calibrated probabilities :math:`\\sigma(f(u))` (same shape as ``scores``; NaN for
        invalid traced scores, as :meth:`predict_logit`).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.linspace(-2, 2, 40); y = (np.arange(40) % 3 == 0) | (s > 1)
            >>> cal = jaxcal.SplineCalibration(n_knots=4, penalties=[1e-2]).fit(s, y)
            >>> p = cal.predict(np.array([-2.0, 2.0]))
            >>> bool(p[0] < p[1])
            True
        """
        return self._apply(scores, _predict_jit)

    def _logit_core(self, u: jax.Array) -> jax.Array:
        lo, hi = self.knots[0], self.knots[-1]
        R = hi - lo
        return spline_logit((self.knots - lo) / R, self.theta, (u - lo) / R)

    def is_monotone(self, *, atol: float = 0.0) -> jax.Array:
        """Whether the B-spline coefficients are non-decreasing (``theta[1:] >= -atol``):
        then the map is non-decreasing everywhere (a sufficient condition).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.linspace(-2, 2, 40); y = (np.arange(40) % 3 == 0) | (s > 1)
            >>> cal = jaxcal.SplineCalibration(n_knots=4, monotone=True, penalties=[1e-2])
            >>> bool(cal.fit(s, y).is_monotone())
            True
        """
        return jnp.all(self.theta[1:] >= -atol)


def quantile_knots(u: np.ndarray, w: np.ndarray, n_knots: int, dtype) -> np.ndarray:
    """``n_knots`` knots at the ``k / (n_knots - 1)`` weighted quantiles (inverted CDF) of
    sorted ``u`` with weights ``w > 0`` (host; integer weights act as repeated rows), cast to
    ``dtype`` and made distinct (fewer when ``u`` has fewer distinct values).

    Example:
        >>> import numpy as np
        >>> from jaxcal.calibrators.spline import quantile_knots
        >>> quantile_knots(np.arange(9.0), np.ones(9), 3, np.float64)
        array([0., 4., 8.])
    """
    cw = np.cumsum(w)
    idx = np.searchsorted(cw, np.linspace(0.0, 1.0, n_knots) * cw[-1], side="left")
    q = u[np.clip(idx, 0, u.size - 1)]
    q[0], q[-1] = u[0], u[-1]
    return np.unique(q.astype(dtype))


def quantile_knots_pure(u: jax.Array, w: jax.Array, n_knots: int):
    """:func:`quantile_knots` in JAX for sorted ``u`` (weights ``w >= 0``, zero weights
    allowed): ``(knots [n_knots], distinct)``, the same quantiles while they are distinct
    (the fixed shape of a trace cannot drop repeated ones, so ``distinct`` says whether the
    eager fit would keep all ``n_knots``).

    Example:
        >>> import jax.numpy as jnp
        >>> from jaxcal.calibrators.spline import quantile_knots_pure
        >>> knots, distinct = quantile_knots_pure(jnp.arange(9.0), jnp.ones(9), 3)
        >>> knots.tolist(), bool(distinct)
        ([0.0, 4.0, 8.0], True)
    """
    pos = w > 0
    cw = jnp.cumsum(jnp.where(pos, w, 0.0))
    levels = jnp.linspace(0.0, 1.0, n_knots, dtype=u.dtype) * cw[-1]
    idx = jnp.searchsorted(cw, levels, side="left")
    q = u[jnp.clip(idx, 0, u.shape[0] - 1)]
    lo = jnp.min(jnp.where(pos, u, jnp.inf))
    hi = jnp.max(jnp.where(pos, u, -jnp.inf))
    q = q.at[0].set(lo).at[-1].set(hi)
    return q, jnp.all(jnp.diff(q) > 0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class SplineCalibration(Calibrator[FittedSpline]):
    r"""Spline calibration estimator (module docstring for the model and the fit);
    ``fit`` returns a :class:`FittedSpline`.

    Args:
        n_knots: number of knots :math:`K` (>= 3; default 30, about what ml-insights'
            ``SplineCalib`` uses). Fewer when the training :math:`u` have fewer distinct
            values (each distinct :math:`K` compiles its own program).
        on: ``"score"`` (:math:`u = s`, any real scores) or ``"logit"``
            (:math:`u = \operatorname{logit}(p)` for probabilities in [0, 1]).
        monotone: constrain :math:`f` to be non-decreasing (ordered B-spline coefficients).
        penalties: the grid of :math:`\lambda > 0` (default :data:`DEFAULT_PENALTIES`,
            :math:`10^{-8}, 10^{-7.5}, \dots, 1`); one value: no cross-validation.
        n_folds: number of cross-validation folds (>= 2): deterministic, stratified by
            label (:func:`jaxcal.fitting.folds.stratified_folds`, rows in a fixed scramble
            of their positions).
        max_iter: Newton iterations per problem.
        tol: tolerance on half the Newton decrement, in units of the mean loss (default
            ``1e-18`` with float64, ``1e-7`` with float32: about the
            rounding of the mean loss in float32).

    Raises:
        ValueError: an invalid hyperparameter, when the estimator is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> s = rng.normal(size=500); y = rng.uniform(size=500) < 1 / (1 + np.exp(-s * s))
        >>> cal = jaxcal.SplineCalibration(n_knots=6, penalties=[1e-4, 1e-2], n_folds=3)
        >>> fitted = cal.fit(s, y)
        >>> fitted.cv_loss.shape, bool(fitted.penalty == fitted.penalties[fitted.cv_loss.argmin()])
        ((2,), True)
        >>> jaxcal.SplineCalibration(n_folds=1)
        Traceback (most recent call last):
        ...
        ValueError: n_folds must be an integer >= 2; got 1.
    """

    n_knots: int = 30
    on: str = "score"
    monotone: bool = False
    penalties: Sequence[float] | None = None
    n_folds: int = 5
    max_iter: int = 100
    tol: float | None = None

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    def _grid(self) -> np.ndarray:
        return np.asarray(DEFAULT_PENALTIES if self.penalties is None else self.penalties, float)

    def _check_hyperparameters(self) -> None:
        check_int(self.n_knots, "n_knots", minimum=3)
        check_choice(self.on, "on", _ONS)
        if not isinstance(self.monotone, bool | np.bool_):
            raise ValueError(f"monotone must be True or False; got {self.monotone!r}.")
        try:
            grid = self._grid()
        except (TypeError, ValueError):
            grid = np.zeros(0)
        if grid.ndim != 1 or grid.size == 0 or not np.all(np.isfinite(grid) & (grid > 0)):
            raise ValueError(
                "penalties must be a non-empty 1-D sequence of finite values > 0; got "
                f"{self.penalties!r}."
            )
        check_int(self.n_folds, "n_folds", minimum=2)
        check_int(self.max_iter, "max_iter", minimum=1)
        if self.tol is not None:
            check_real(self.tol, "tol", minimum=0.0, strict=True)

    def _fit_pure(self, data: PureFitData) -> FittedSpline:
        """The pure fit (``Calibrator.fit_pure``): :meth:`_fit_in` in JAX, in the scores'
        dtype, with no score transform and no padding; the same folds (the same
        deterministic rule) and knots, so the same numbers.

        Derivatives: the coefficients at the chosen penalty by the implicit function theorem
        (``_spline_core.penalised_tangent``), the knots (training scores at weighted
        quantiles) as those scores. The penalty chosen by cross-validation is piecewise
        constant in the data: its derivative is zero and ``cv_loss`` carries none.

        NaN policy: besides the checks of ``fit_pure``, the fit is NaN where :meth:`_fit_in`
        would raise (a fold without rows of positive weight; for ``on="logit"`` a score
        outside [0, 1]) and where the ``n_knots`` weighted quantiles are not distinct (the
        eager fit would use fewer knots, a shape a trace cannot change: use fewer knots).
        """
        dtype = data.scores.dtype
        s, t, w = data.scores, data.targets, data.weights
        invalid = jnp.zeros((), bool)
        if self.on == "logit":
            invalid = invalid | jnp.any((s < 0) | (s > 1))
            p = jnp.clip(s, _PROB_CLIP, 1 - _PROB_CLIP)
            u = jnp.log(p) - jnp.log1p(-p)
        else:
            u = s
        folds = jnp.asarray(stratified_folds(data.labels, int(self.n_folds), weights=w))
        order = jnp.argsort(u, stable=True)
        u, t, w, folds = (a[order] for a in (u, t, w, folds))
        knots, distinct = quantile_knots_pure(u, w, int(self.n_knots))
        invalid = invalid | ~distinct
        grid = self._grid()
        cross_validate = grid.size > 1
        if cross_validate:
            per_fold = jnp.zeros(int(self.n_folds)).at[folds].add(jnp.where(w > 0, 1.0, 0.0))
            invalid = invalid | jnp.any(per_fold == 0)
        lo = knots[0]
        R = knots[-1] - lo
        tol = self.tol if self.tol is not None else (1e-18 if dtype == jnp.float64 else 1e-7)
        penalties = jnp.asarray(grid, dtype)
        theta, cv_loss, best, status = fit_spline_cv_differentiable(
            (knots - lo) / R,
            (u - lo) / R,
            t,
            w,
            folds,
            penalties,
            max_iter=int(self.max_iter),
            tol=float(tol),
            n_folds=int(self.n_folds),
            monotone=bool(self.monotone),
            cross_validate=cross_validate,
        )
        fitted = FittedSpline(
            knots=knots,
            theta=theta,
            penalties=penalties,
            cv_loss=cv_loss,
            penalty=penalties[best],
            status=status,
            scaling=pure_identity_scaling(dtype),
            on=self.on,
            monotone=bool(self.monotone),
        )
        return poison(fitted, invalid)

    def _fit_in(self, data: FitData, dtype: np.dtype) -> FittedSpline:
        """The eager fit in ``dtype`` (the scores'): knots, folds, the batched solve."""
        what = type(self).__name__
        u = _to_u(data.scores, self.on)
        scaling, u = fit_scaling(
            u, data.weights, shift=True, need_spread=True, what=what, dtype=dtype
        )
        folds = stratified_folds(data.labels, int(self.n_folds), weights=data.weights)
        order = np.argsort(u, kind="stable")
        u, t, w, folds = (a[order] for a in (u, data.targets, data.weights, folds))
        pos = w > 0
        knots = quantile_knots(u[pos], w[pos], int(self.n_knots), dtype)
        if knots.size < 3:
            raise ValueError(
                f"{what}: the training scores (of positive weight) have {knots.size} distinct "
                "value(s); a spline needs at least 3."
            )
        grid = self._grid()
        cross_validate = grid.size > 1
        k = int(self.n_folds)
        if cross_validate and np.any(np.bincount(folds[w > 0], minlength=k) == 0):
            raise ValueError(
                f"{what}: n_folds={k} folds need at least {k} rows of positive weight."
            )
        lo, R = float(knots[0]), float(knots[-1]) - float(knots[0])
        x = (u - lo) / R
        n = x.shape[0]
        size = padded_size(n)
        pad = size - n
        x = np.pad(x, (0, pad), mode="edge")  # sorted: repeats of the largest row, weight 0
        t, w = (np.pad(a, (0, pad)) for a in (t, w))
        folds = np.pad(folds, (0, pad))
        tol = self.tol if self.tol is not None else (1e-18 if dtype == np.float64 else 1e-7)
        theta, cv_loss, best, status = fit_spline_cv_jit(
            jax.device_put(((knots - lo) / R).astype(dtype)),
            *jax.device_put(tuple(a.astype(dtype) for a in (x, t, w))),
            jax.device_put(folds),
            jax.device_put(grid.astype(dtype)),
            np.asarray(int(self.max_iter), np.int32),
            np.asarray(tol, dtype),
            n_folds=k,
            monotone=bool(self.monotone),
            cross_validate=cross_validate,
        )
        if not (bool(status.converged) and bool(status.cv_converged)):
            warnings.warn(
                f"{what} did not converge (final fit converged: {bool(status.converged)}, "
                f"cross-validation problems converged: {bool(status.cv_converged)}); raise "
                "max_iter, or check for separable data (labels a step function of the score).",
                ConvergenceWarning,
                stacklevel=3,  # the caller of fit (Calibrator.fit -> _fit_in)
            )
        penalties = jax.device_put(grid.astype(dtype))
        return FittedSpline(
            knots=jax.device_put(knots),
            theta=theta,
            penalties=penalties,
            cv_loss=cv_loss,
            penalty=jax.device_put(grid.astype(dtype)[int(best)]),
            status=status,
            scaling=scaling,
            on=self.on,
            monotone=bool(self.monotone),
        )
