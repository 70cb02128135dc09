r"""The shell shared by the parametric calibrators: the fitted calibrator
(:class:`LinearLogitCalibrator`, a pytree holding ``theta``, the training score range and the
solver's status) and the estimator (:class:`LinearCalibratorEstimator`: eager validation,
padding to size buckets, then the exact fit of :mod:`jaxcal.fitting.linear` or a Bayesian fit
of :mod:`jaxcal.bayes`). The families themselves (what a map is) live in
:mod:`jaxcal.families.linear`.

On tracers (inside a caller's ``jit``, ``vmap``, ``grad``, or ``jax.export``) ``fit`` is the
pure fit (:meth:`LinearCalibratorEstimator._fit_pure`): the same solver in JAX alone, with
derivatives by implicit differentiation at the KKT point
(:func:`jaxcal.fitting.linear.kkt_tangent`) and invalid data giving NaN (docs/parametric.md,
"Inside jit, vmap and grad").
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._fitdata import FitData, PureFitData, maybe_check_scores, poison, prepare_fit_batch
from jaxcal._jit import jit
from jaxcal._lazy import lazy_method
from jaxcal._pytree import pytree_dataclass, static_field
from jaxcal._shapes import is_traced, map_padded, padded_shape, unpad
from jaxcal._validation import check_int, check_real
from jaxcal.calibrators._base import Calibrator, FittedCalibrator, check_choice
from jaxcal.calibrators._linear_chunks import fit_chunks
from jaxcal.calibrators._scaling import (
    ScoreScaling,
    fit_dtype,
    fit_scaling,
    identity_scaling,
    pure_identity_scaling,
)
from jaxcal.families.linear import LinearLogitFamily, ScoreRange
from jaxcal.fitting.linear import default_tol, fit_linear, fit_linear_differentiable
from jaxcal.fitting.solver import SolverStatus, warn_if_not_converged

__all__ = ["LinearLogitCalibrator", "LinearCalibratorEstimator", "coefficient"]


def _expand(x: jax.Array, batch_ndim: int, ndim: int) -> jax.Array:
    """Reshape a ``batch``-shaped leaf so that it broadcasts against ``batch + (m...)``."""
    return jnp.reshape(x, x.shape + (1,) * (ndim - batch_ndim))


@pytree_dataclass
class LinearLogitCalibrator(FittedCalibrator):
    """A fitted linear-logit calibrator (base class of ``FittedPlatt``, ``FittedGaussian``...).

    Attributes:
        theta: ``[..., p]`` coefficients, named by ``family.param_names``, of the map of the
            transformed score :math:`s' = s\\,2^{-k} - c` (``scaling``; the identity unless
            the scores were beyond what the working precision holds, see
            ``jaxcal.calibrators._scaling``).
        context: the training :class:`ScoreRange` of :math:`s'` (leaves ``[...]``).
        status: the solver's :class:`~jaxcal.fitting.solver.SolverStatus`.
        family: the (static) family with its hyperparameters.
        method: ``"discriminative"`` or ``"generative"``.
        scaling: the :class:`~jaxcal.calibrators._scaling.ScoreScaling` :math:`(c, k)`
            (leaves ``[...]``), applied to the scores by ``predict`` and ``predict_logit``.

    Every float leaf has the dtype of the scores the map was fitted on (float32 scores give
    float32 leaves, also with x64 enabled).

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> labels = rng.integers(0, 2, 200)
        >>> scores = rng.normal(labels.astype(float), 1.0)
        >>> fitted = jaxcal.PlattScaling().fit(scores, labels)
        >>> sorted(fitted.coefficients)
        ['a', 'b']
        >>> bool(fitted.is_monotone())
        True
    """

    theta: jax.Array
    context: ScoreRange
    status: SolverStatus
    family: LinearLogitFamily = static_field()
    method: str = static_field(default="discriminative")
    scaling: ScoreScaling = dataclasses.field(default_factory=identity_scaling)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """Leading batch dimensions (``()`` for a single calibrator)."""
        return tuple(self.theta.shape[:-1])

    @property
    def coefficients(self) -> dict[str, jax.Array]:
        """The coefficients by name (each with the batch shape)."""
        return {n: self.theta[..., i] for i, n in enumerate(self.family.param_names)}

    def predict_logit(self, scores: ArrayLike) -> jax.Array:
        """Calibrated logits. Scores of any shape; a batched calibrator (batch shape ``B``)
        takes ``B + (m...)`` scores. Scores outside the training range extrapolate the
        fitted formula (see each family for clipping of transformed scores).

        Example:
            >>> import jaxcal, numpy as np
            >>> s, y = np.array([-1.0, -0.5, 0.2, 0.4, 1.0]), np.array([0, 1, 0, 1, 1])
            >>> fitted = jaxcal.PlattScaling().fit(s, y)
            >>> z = fitted.predict_logit(s)
            >>> bool(np.allclose(1 / (1 + np.exp(-z)), fitted.predict(s)))
            True
        """
        return self._apply(scores, _logit_jit)

    def predict(self, scores: ArrayLike) -> jax.Array:
        """Calibrated probabilities :math:`\\sigma(z)` (same shape as ``scores``).

        Concrete non-finite scores raise ``ValueError``; traced scores (inside ``jit``) give
        NaN where they are not finite."""
        return self._apply(scores, _predict_jit)

    def _apply(self, scores: ArrayLike, fn) -> jax.Array:
        """``fn(self, s')`` through one jitted program per size bucket (``_shapes``), where
        ``s'`` are the transformed scores (``scaling``; in float64 on the host for concrete
        scores, clipped to the working dtype's finite range). Traced: in the trace, NaN for
        non-finite scores."""
        nb = self.theta.ndim - 1
        if is_traced(scores, self):
            s = jnp.asarray(scores, self.theta.dtype)
            out = fn(self, self.scaling.apply(s, batch_ndim=nb).astype(self.theta.dtype))
            return jnp.where(jnp.isfinite(s), out, jnp.nan)
        s = self.scaling.apply(maybe_check_scores(scores), batch_ndim=nb)
        s = np.asarray(s, np.dtype(self.theta.dtype))
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
        scaling = jax.tree.map(lambda x: np.broadcast_to(x, self.batch_shape), self.scaling)
        this = dataclasses.replace(self, scaling=scaling)  # files saved before it had a scaling
        flat = jax.tree.map(lambda x: np.asarray(x).reshape((B,) + np.shape(x)[nb:]), this)
        cal = jax.tree.map(
            lambda x: np.pad(x, [(0, B_pad - B)] + [(0, 0)] * (x.ndim - 1), mode="edge"), flat
        )
        out = np.asarray(fn(cal, rows))[:B, :m]
        return jax.device_put(out.reshape(s.shape))

    def _logit_core(self, s: jax.Array) -> jax.Array:
        """Logits of transformed scores ``s`` (``batch_shape + (m...)``), traceable.

        Far outside the training range a formula can meet ``inf - inf`` (a quadratic at
        ``s = 1e30``: ``a s**2`` and ``b s`` overflow with opposite signs); there the logit at
        ``2**20`` training ranges beyond the range's end is used instead: the map's limit,
        never NaN."""
        nb = self.theta.ndim - 1
        if nb == 0:
            ctx, theta = self.context, self.theta
            logit = lambda x: self.family.logit(theta, x, ctx)  # noqa: E731
        else:
            ctx = jax.tree_util.tree_map(lambda x: _expand(x, nb, s.ndim), self.context)
            theta = jnp.reshape(self.theta, self.batch_shape + (1,) * (s.ndim - nb) + (-1,))
            logit = lambda x: _weighted_features(self.family.features(x, ctx), theta)  # noqa: E731
        z = logit(s)
        reach = 2.0**20 * (ctx.hi - ctx.lo)

        def with_far():
            far = logit(jnp.clip(s, ctx.lo - reach, ctx.hi + reach))
            return jnp.where(jnp.isnan(z), far, z)

        return jax.lax.cond(jnp.any(jnp.isnan(z)), with_far, lambda: z)

    def is_monotone_on(self, lo: ArrayLike, hi: ArrayLike, *, rtol: float = 1e-9) -> jax.Array:
        """Whether the map is non-decreasing on ``[lo, hi]`` (scores; exact, via
        ``monotone_rows``; ``rtol`` allows rounding on constraints held with equality).
        Batched: ``bool[B]``."""
        return self._monotone_on(lo, hi, rtol=rtol, transformed=False)

    def _monotone_on(self, lo, hi, *, rtol: float, transformed: bool) -> jax.Array:
        dtype = self.theta.dtype

        def one(theta, ctx, scaling):
            a, b = jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)
            if not transformed:
                a, b = (scaling.apply(x).astype(dtype) for x in (a, b))
            R = self.family.monotone_rows(a, b, ctx)
            scale = jnp.abs(R) @ jnp.abs(theta)
            return jnp.all(R @ theta >= -rtol * scale)

        f = one
        for _ in range(self.theta.ndim - 1):
            f = jax.vmap(f)
        scaling = self.scaling
        if not is_traced(scaling):  # files saved before it had a scaling hold scalars
            scaling = jax.tree.map(lambda x: np.broadcast_to(x, self.batch_shape), scaling)
        return f(self.theta, self.context, scaling)

    def is_monotone(self, *, rtol: float = 1e-9) -> jax.Array:
        """Whether the map is non-decreasing on its training range."""
        return self._monotone_on(self.context.lo, self.context.hi, rtol=rtol, transformed=True)


def _weighted_features(f: jax.Array, theta: jax.Array) -> jax.Array:
    """``sum_i f[..., i] theta[..., i]`` as one multiply-add per feature, which XLA fuses
    with the features (a dot or a row reduction materialises ``f`` first)."""
    return sum(f[..., i] * theta[..., i] for i in range(f.shape[-1]))


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


#: the fitted type of a parametric estimator (``FittedPlatt`` for ``PlattScaling``, ...)
LinearFittedT = TypeVar("LinearFittedT", bound=LinearLogitCalibrator)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LinearCalibratorEstimator(Calibrator[LinearFittedT]):
    r"""Shared ``fit`` / ``fit_batch`` / ``fit_bayes`` of the parametric estimators (frozen
    dataclasses), and the hyperparameters they share (keyword-only).

    Args:
        l2: L2 penalty :math:`\tfrac{l_2}{2}\lVert\theta_{\text{slopes}}\rVert^2` (the
            intercept is not penalised; each calibrator names its slopes).
        method: ``"discriminative"`` (the constrained logistic fit, default) or, where the
            family has one (``methods``), ``"generative"``.
        max_iter: Newton iterations per candidate active set.
        tol: Newton-decrement tolerance relative to the total weight (default ``1e-18`` in
            float64, ``1e-9`` in float32).

    Raises:
        ValueError: an invalid hyperparameter (``l2`` negative or not finite, ``method``
            not one of ``methods``, ``max_iter`` not an integer >= 1, ``tol`` not > 0, or one
            of the subclass's), when the estimator is made.

    Subclasses define ``family`` (property), ``fitted_class`` and their own hyperparameters.

    ``fit`` on traced inputs is the pure fit (``_fit_pure``): it runs inside ``jit``, under
    ``vmap`` (one problem per row) and ``jvp`` / ``grad`` (in the scores, labels, weights and
    propensities), and exports with ``jax.export``; the same numbers as the eager fit.

    Example:
        >>> import jax, jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> labels = rng.integers(0, 2, 400).astype(float)
        >>> scores = rng.normal(labels, 1.0)
        >>> def slope(s):
        ...     return jaxcal.PlattScaling().fit(s, labels).a
        >>> grad = jax.grad(slope)(scores)  # implicit derivative at the optimum
        >>> grad.shape
        (400,)
    """

    l2: float = 0.0
    method: str = "discriminative"
    max_iter: int = 100
    tol: float | None = None

    fitted_class: ClassVar[type[LinearLogitCalibrator]]
    methods: ClassVar[tuple[str, ...]] = ("discriminative",)

    def __post_init__(self) -> None:
        self._check_hyperparameters()

    @property
    def family(self) -> LinearLogitFamily:  # pragma: no cover - interface
        raise NotImplementedError

    def _check_hyperparameters(self) -> None:
        check_choice(self.method, "method", self.methods)
        check_real(self.l2, "l2", minimum=0.0)
        check_int(self.max_iter, "max_iter", minimum=1)
        if self.tol is not None:
            check_real(self.tol, "tol", minimum=0.0, strict=True)
        self.family  # noqa: B018 - a family checks its own hyperparameters when it is made

    def _check_scores(self, scores: np.ndarray, weights: np.ndarray, dtype: np.dtype) -> None:
        """The family's eager checks of validated training scores (``[n]``, or ``[B, n]``
        problems) for a fit in ``dtype``; ``ValueError`` (naming the problem of a batch)."""
        if scores.ndim == 2:
            self.family.check_scores_batch(scores, weights)
        else:
            self.family.check_scores(scores, weights)

    def _check_targets(self, targets: np.ndarray, weights: np.ndarray) -> None:
        if self.method == "generative" and np.any((targets > 1) & (weights > 0)):
            raise ValueError(
                "a generative fit needs targets in [0, 1] (class-conditional weights w*t and "
                "w*(1-t) must be >= 0), but loss='ips' gives t = Y/propensity > 1. Use "
                "loss='ips_positive' or 'snips', or method='discriminative'."
            )

    def _make(self, theta, ctx, status, scaling: ScoreScaling) -> LinearFittedT:
        return self.fitted_class(
            theta=theta,
            context=ctx,
            status=status,
            family=self.family,
            method=self.method,
            scaling=scaling,
        )

    def _scaled(self, scores: np.ndarray, weights: np.ndarray, what: str, dtype: np.dtype):
        """The exact transform of the training scores into ``dtype`` (the fit's,
        ``jaxcal.calibrators._scaling``): a power of two where the family is
        scale-equivariant, a shift where it is shift-equivariant (and the cast would merge
        scores); ``(scaling, s')``."""
        return fit_scaling(
            scores,
            weights,
            shift=self.family.shift_equivariant,
            scale=self.family.scale_equivariant,
            need_spread=True,
            what=what,
            dtype=dtype,
        )

    def _run(self, s, t, w, dtype: np.dtype):
        """``fit_linear`` on ``(s, t, w)`` (``[n]`` or ``[B, n]``) in ``dtype``, padded to their
        size bucket (``jaxcal._shapes``): zero-weight entries, and copies of the first
        problem as extra problems, sliced off the result."""
        s, t, w = (np.asarray(a, dtype) for a in (s, t, w))
        shape = s.shape
        s, t, w = _pad_problems(padded_shape(shape), s, t, w)
        # NumPy arrays: the jitted call copies them in, in a tenth of the time of a
        # device_put each
        out = fit_linear(
            self.family,
            s,
            t,
            w,
            np.asarray(self.l2, dtype),
            np.asarray(int(self.max_iter), np.int32),
            np.asarray(default_tol(dtype) if self.tol is None else self.tol, dtype),
            method=self.method,
        )
        if len(shape) == 2 and s.shape[0] != shape[0]:
            out = jax.tree.map(lambda x: unpad(x, shape[0]), out)
        return out

    def _fit_in(self, data: FitData, dtype: np.dtype) -> LinearFittedT:
        """The exact fit, in ``dtype`` (the scores'); a
        :class:`~jaxcal.fitting.solver.SeparableDataWarning` when no finite fit exists
        (separable data, ``l2 = 0``: the map is the near-step of :mod:`jaxcal.fitting.linear`),
        a :class:`~jaxcal.fitting.solver.ConvergenceWarning` when the solver did not converge
        (``fitted.status`` says which)."""
        self._check_scores(data.scores, data.weights, dtype)
        self._check_targets(data.targets, data.weights)
        scaling, s = self._scaled(data.scores, data.weights, type(self).__name__, dtype)
        theta, ctx, status = self._run(s, data.targets, data.weights, dtype)
        warn_if_not_converged(status, type(self).__name__)
        return self._make(theta, ctx, status, scaling)

    def _fit_pure(self, data: PureFitData) -> LinearFittedT:
        """The pure fit (``Calibrator.fit_pure``): the exact fit of :meth:`_fit` in JAX, in
        the scores' dtype, with no score transform (the identity ``scaling``) and never the
        compiled kernel.

        The discriminative coefficients are differentiated implicitly at the KKT point
        (:func:`jaxcal.fitting.linear.fit_linear_differentiable`); the generative ones by
        JAX through their closed forms. The checks of :meth:`_fit` that depend on values
        (the family's domain, e.g. scores in (0, 1) for ``BetaCalibration(rescale="none")``;
        at least two distinct scores; targets in [0, 1] for a generative fit) poison the
        result with NaN instead of raising."""
        family = self.family
        s, t, w = data.scores, data.targets, data.weights
        dtype = s.dtype
        invalid = family.invalid_scores(s, w)
        if self.method == "generative":
            invalid = invalid | jnp.any((t > 1) & (w > 0))
            theta, ctx, status = fit_linear(
                family, s, t, w, jnp.asarray(self.l2, dtype), None, None, method="generative"
            )
        else:
            tol = default_tol(dtype) if self.tol is None else self.tol
            theta, ctx, status = fit_linear_differentiable(
                family, s, t, w, l2=self.l2, max_iter=int(self.max_iter), tol=tol
            )
        fitted = self._make(theta, ctx, status, pure_identity_scaling(dtype))
        return poison(fitted, invalid)

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
    ) -> LinearFittedT:
        """Fit ``B`` independent calibrators in one compiled call.

        Either ``[B, n]`` arrays with an optional boolean ``mask`` (ragged problems), or
        1-D arrays with integer ``group`` ids (row ``g`` of the result is the ``g``-th
        smallest id, ``np.unique(group)[g]``).

        Returns:
            A fitted calibrator with batch shape ``(B,)``; ``predict`` takes ``[B, m]``. Its
            float leaves have the dtype of ``scores``, as :meth:`fit`'s.

        Raises:
            ValueError: on invalid inputs (per problem: one class only, all scores equal...).

        Warns:
            SeparableDataWarning: problems whose data are separable (``status.code ==
                SEPARABLE``; each row's map is the one :meth:`fit` returns on that row).
            ConvergenceWarning: problems whose solver did not converge.

        Example:
            >>> import jaxcal, numpy as np
            >>> rng = np.random.default_rng(0)
            >>> labels = rng.integers(0, 2, (3, 200))
            >>> scores = rng.normal(labels.astype(float), 1.0)
            >>> fitted = jaxcal.PlattScaling().fit_batch(scores, labels)
            >>> fitted.batch_shape, fitted.predict(scores).shape
            ((3,), (3, 200))
        """
        self._check_hyperparameters()
        dtype = fit_dtype(scores)
        s, t, w = prepare_fit_batch(
            scores,
            labels,
            mask=mask,
            group=group,
            sample_weight=sample_weight,
            propensity=propensity,
            loss=loss,
        )
        self._check_scores(s, w, dtype)
        self._check_targets(t, w)
        scaling, s = self._scaled(s, w, type(self).__name__ + ".fit_batch", dtype)
        theta, ctx, status = self._run(s, t, w, dtype)
        warn_if_not_converged(status, type(self).__name__ + ".fit_batch")
        return self._make(theta, ctx, status, scaling)

    def fit_chunks(self, source: Any, *, loss: str = "naive") -> LinearFittedT:
        """Fit on data read in chunks, on one process or across the processes of a
        ``jax.distributed`` job: the same calibrator as :meth:`fit` on all the rows.

        The source is read once per pass (a scan, one or two passes for the standardisation,
        then one per Newton step: typically 8-20), so only one chunk need be in memory. With
        ``jax.distributed`` (:func:`jaxcal.distributed.initialize`) every process passes its
        own chunks; the sums of each pass are added across processes and every process ends
        with the same fitted calibrator. Only ``method="discriminative"``; in float32 the
        score transform may differ from :meth:`fit`'s (``jaxcal.calibrators._linear_chunks``).

        Args:
            source: a list of chunks, or a zero-argument callable returning an iterator of
                chunks (called once per pass). A chunk is ``(scores, labels)``,
                ``(scores, labels, sample_weight)`` or ``(scores, labels, sample_weight,
                propensity)`` of 1-D arrays (``sample_weight`` may be ``None``), or a mapping
                with those keys (``jaxcal._chunks``).
            loss: the loss weighting, as in :meth:`fit` (all but ``"naive"`` need every
                chunk's propensities).

        Returns:
            The fitted calibrator, of the type :meth:`fit` returns; its float leaves have
            the dtype of the chunks' scores (float64 if any chunk's are, with x64 enabled).

        Raises:
            ValueError: invalid hyperparameters or a generative ``method``; a source of
                another type (an iterator, which can be read only once); a bad chunk (named
                by its position: not a tuple of the above form, scores not 1-D or not
                finite, labels not 0/1, lengths that differ, negative weights, propensities
                outside (0, 1]); a source with no rows, no positive weight or one class; one
                that returns other rows on a later pass. With several processes, an error
                on one is raised on every one.

        Example:
            >>> import jaxcal, numpy as np
            >>> rng = np.random.default_rng(0)
            >>> labels = rng.integers(0, 2, 3000)
            >>> scores = rng.normal(labels.astype(float), 1.0)
            >>> chunks = [(scores[i : i + 1000], labels[i : i + 1000]) for i in (0, 1000, 2000)]
            >>> streamed = jaxcal.PlattScaling().fit_chunks(chunks)
            >>> in_memory = jaxcal.PlattScaling().fit(scores, labels)
            >>> bool(np.allclose(streamed.theta, in_memory.theta, rtol=1e-5))
            True
        """
        return fit_chunks(self, source, loss=loss)

    #: ``jaxcal.bayes.fit_bayes`` with this estimator as the calibrator: a posterior over
    #: its map (NUTS or SVI) whose every draw is monotone on the training range; only the
    #: family is used (``l2`` is replaced by the prior).
    fit_bayes = lazy_method("jaxcal.bayes.inference", "fit_bayes")
    #: ``jaxcal.bayes.fit_bayes_batch`` with this estimator: ``B`` posteriors in one
    #: compiled call (inputs as in :meth:`fit_batch`).
    fit_bayes_batch = lazy_method("jaxcal.bayes.inference", "fit_bayes_batch")


def coefficient(index: int, doc: str) -> property:
    """A read-only property for ``theta[..., index]``.

    Example:
        >>> from jaxcal.calibrators._linear import coefficient
        >>> coefficient(0, "Slope a.").__doc__
        'Slope a.'
    """
    return property(lambda self: self.theta[..., index], doc=doc)
