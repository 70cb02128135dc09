r"""Gamma calibration: :math:`P(y=1 \mid s) = \sigma(a \log s' + b s' + c)`, monotone on the
training range, on shifted scores :math:`s' = s - s_{\min} + \delta`.

Kweon, Kang & Yu (AAAI 2022). The logit is the exact posterior of class-conditional Gamma
densities of :math:`s'` (``jaxcal.scoremodels.GammaScoreModel``): :math:`a = \alpha_1 -
\alpha_0`, :math:`b = \beta_0 - \beta_1`.

The shift :math:`\delta` makes every training :math:`s'` positive (:math:`s' \ge \delta`).
By default (``relative_shift=True``) it is a fraction of the training range,
:math:`\delta = \text{shift}\cdot(s_{\max} - s_{\min})` with ``shift=0.01``, so the
calibrator is invariant to rescaling the scores; with ``relative_shift=False`` it is the
absolute :math:`\delta = \text{shift}` (the paper's :math:`s - s_{\min} + \text{shift}`).
Shifted training scores that are not finite and positive (e.g. overflow of
:math:`s - s_{\min}` for scores near the float limits, or an absolute shift lost to rounding
against huge scores) raise ``ValueError``. At ``predict``, scores
far below :math:`s_{\min}` would give :math:`s' \le 0`; :math:`s'` is clipped below at
:math:`10^{-3}\delta` there (the map is then flat).

* ``method="discriminative"`` (default): minimise the weighted logistic loss subject to
  :math:`a / s'_{\min} + b \ge 0` and :math:`a / s'_{\max} + b \ge 0` (the derivative
  :math:`a/s' + b` is monotone in :math:`s'`, so the ends suffice), solved exactly.
* ``method="generative"``: weighted Gamma MLE per class (Newton with digamma/trigamma)
  and the closed-form map; not constrained.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, 1000)
    >>> scores = np.where(labels == 1, rng.gamma(4.0, 0.5, 1000), rng.gamma(2.0, 0.5, 1000))
    >>> cal = jaxcal.GammaCalibration().fit(scores, labels)
    >>> bool(cal.is_monotone())
    True
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_real
from jaxcal.calibrators._linear import (
    LinearCalibratorEstimator,
    LinearLogitCalibrator,
    coefficient,
)
from jaxcal.families.linear import LinearLogitFamily, ScoreRange, family_dataclass
from jaxcal.scoremodels.gamma import GammaScoreModel

__all__ = ["GammaCalibration", "FittedGamma", "GammaFamily"]

_CLIP_FRACTION = 1e-3  # s' is clipped below at _CLIP_FRACTION * delta


@family_dataclass
class GammaFamily(LinearLogitFamily):
    r""":math:`z = a \log s' + b s' + c`; :math:`\phi = [\log s', s', 1]`; rows
    :math:`[1/s'_{\min}, 1, 0]`, :math:`[1/s'_{\max}, 1, 0]`.

    Args:
        shift: :math:`\delta` as a fraction of the training range (``> 0``), or the absolute
            :math:`\delta` when ``relative_shift`` is false.
        relative_shift: whether ``shift`` is relative to the training range.

    Raises:
        ValueError: ``shift`` not a finite number > 0, or ``relative_shift`` not a bool.

    Example:
        >>> from jaxcal.calibrators.gamma import GammaFamily
        >>> GammaFamily(shift=0.5, relative_shift=False).scale_equivariant
        False
    """

    shift: float = 0.01
    relative_shift: bool = True

    param_names: ClassVar[tuple[str, ...]] = ("a", "b", "c")
    intercept_index: ClassVar[int | None] = 2

    def __post_init__(self):
        shift = check_real(self.shift, "shift", minimum=0.0, strict=True)
        if not isinstance(self.relative_shift, bool | np.bool_):
            raise ValueError(f"relative_shift must be True or False; got {self.relative_shift!r}.")
        # Python scalars: hashable, saved as they are
        object.__setattr__(self, "shift", shift)
        object.__setattr__(self, "relative_shift", bool(self.relative_shift))

    shift_equivariant: ClassVar[bool] = True  # s' = s - s_min + delta

    @property
    def scale_equivariant(self) -> bool:
        """A relative shift scales with the scores; an absolute one does not."""
        return self.relative_shift

    def delta(self, ctx: ScoreRange) -> jax.Array:
        """The absolute shift: ``shift * (s_max - s_min)``, or ``shift`` when
        ``relative_shift`` is false."""
        if self.relative_shift:
            return self.shift * (ctx.hi - ctx.lo)
        return jnp.full_like(ctx.hi - ctx.lo, self.shift)

    def transform(self, scores: ArrayLike, ctx: ScoreRange) -> jax.Array:
        """:math:`s' = \\max(s - s_{\\min} + \\delta, 10^{-3}\\delta)`."""
        delta = self.delta(ctx)
        return jnp.maximum(jnp.asarray(scores) - ctx.lo + delta, _CLIP_FRACTION * delta)

    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        s = self.transform(scores, ctx)
        return jnp.stack([jnp.log(s), s, jnp.ones_like(s)], axis=-1)

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        dtype = jnp.result_type(ctx.lo, float)
        x_lo = self.transform(jnp.asarray(lo, dtype), ctx)
        x_hi = self.transform(jnp.asarray(hi, dtype), ctx)
        one, zero = jnp.ones((), dtype), jnp.zeros((), dtype)
        return jnp.stack([jnp.stack([1 / x_lo, one, zero]), jnp.stack([1 / x_hi, one, zero])])

    def check_scores(self, scores: np.ndarray, weights: np.ndarray) -> None:
        super().check_scores(scores, weights)
        s = scores[weights > 0]
        with np.errstate(over="ignore", invalid="ignore"):
            delta = self.shift * (s.max() - s.min()) if self.relative_shift else self.shift
            shifted = s - s.min() + delta
        if not (np.isfinite(shifted).all() and (shifted > 0).all()):
            what = "shift * (s_max - s_min)" if self.relative_shift else "shift"
            raise ValueError(
                f"GammaCalibration needs shifted scores s - s_min + {what} that are finite and "
                f"> 0; got range [{np.min(shifted):.6g}, {np.max(shifted):.6g}]. Rescale the "
                "scores (e.g. standardise them) or use a larger shift."
            )

    def invalid_scores(self, scores: jax.Array, weights: jax.Array) -> jax.Array:
        ctx = self.context(scores, weights)
        shifted = scores - ctx.lo + self.delta(ctx)
        bad = ~(jnp.isfinite(shifted) & (shifted > 0))
        return super().invalid_scores(scores, weights) | jnp.any((weights > 0) & bad)

    def generative(self, scores, targets, weights, ctx):
        model = GammaScoreModel()
        s = self.transform(scores, ctx)
        params = model.fit_weighted(s, weights * targets, weights * (1.0 - targets))
        return model.calibration_map(params), params.n_iter, params.converged


@pytree_dataclass
class FittedGamma(LinearLogitCalibrator):
    """Fitted Gamma calibration: ``predict(s) = sigmoid(a log s' + b s' + c)``.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.2, 0.5, 0.7, 1.2, 2.0, 3.0]), np.array([0, 1, 0, 0, 1, 1])
        >>> fitted = jaxcal.GammaCalibration(shift=1.0, relative_shift=False).fit(s, y)
        >>> x = s - s.min() + 1.0  # s' with the absolute shift
        >>> z = fitted.a * np.log(x) + fitted.b * x + fitted.c
        >>> bool(np.allclose(fitted.predict(s), 1 / (1 + np.exp(-z)), atol=1e-6))
        True
    """

    a = coefficient(0, "Coefficient a of log s'.")
    b = coefficient(1, "Coefficient b of s'.")
    c = coefficient(2, "Intercept c.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GammaCalibration(LinearCalibratorEstimator[FittedGamma]):
    """Gamma calibration estimator.

    Args:
        shift: :math:`\\delta` as a fraction of the training score range (default 0.01).
        relative_shift: whether ``shift`` is relative to the score range (default) or in
            score units.

    ``l2`` (on :math:`a, b`), ``method`` (``"discriminative"`` or ``"generative"``),
    ``max_iter`` and ``tol`` as in :class:`~jaxcal.calibrators._linear.LinearCalibratorEstimator`.
    ``fit`` returns a :class:`FittedGamma`.

    Raises:
        ValueError: an invalid hyperparameter (``shift``, ``relative_shift`` or a shared
            one), when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.2, 0.5, 0.7, 1.2, 2.0, 3.0]), np.array([0, 1, 0, 0, 1, 1])
        >>> fitted = jaxcal.GammaCalibration().fit(s, y)
        >>> bool(fitted.is_monotone()), fitted.predict(s).shape
        (True, (6,))
        >>> jaxcal.GammaCalibration(shift=-0.1)
        Traceback (most recent call last):
        ...
        ValueError: shift must be a finite number and > 0; got -0.1.
    """

    shift: float = 0.01
    relative_shift: bool = True

    fitted_class: ClassVar[type[FittedGamma]] = FittedGamma
    methods: ClassVar[tuple[str, ...]] = ("discriminative", "generative")

    @property
    def family(self) -> GammaFamily:
        return GammaFamily(shift=self.shift, relative_shift=self.relative_shift)
