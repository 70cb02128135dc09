r"""Exponential calibration: Platt's form on shifted scores, :math:`\sigma(a s' + b)`,
:math:`s' = s - s_{\min}`, with :math:`a \ge 0`.

The exact posterior of exponential class-conditional score densities
(``jaxcal.scoremodels.ExponentialScoreModel``; Kweon et al. 2022):
:math:`a = \lambda_0 - \lambda_1`, :math:`b = \log\frac{\pi_1\lambda_1}{\pi_0\lambda_0}`.

* ``method="discriminative"`` (default): constrained weighted logistic regression on
  :math:`s'` (the same map as ``PlattScaling``, with the intercept referred to
  :math:`s_{\min}`).
* ``method="generative"``: weighted exponential MLE per class on :math:`s' \ge 0`.

Scores below the training minimum give :math:`s' < 0`, where the linear logit is simply
extrapolated.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, 1000)
    >>> scores = rng.exponential(np.where(labels == 1, 2.0, 1.0))
    >>> cal = jaxcal.ExponentialCalibration().fit(scores, labels)
    >>> bool(cal.is_monotone())
    True
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal.calibrators._linear import (
    LinearCalibratorEstimator,
    LinearLogitCalibrator,
    coefficient,
)
from jaxcal.families.linear import LinearLogitFamily, ScoreRange, family_dataclass
from jaxcal.scoremodels.exponential import ExponentialScoreModel

__all__ = ["ExponentialCalibration", "FittedExponential", "ExponentialFamily"]


@family_dataclass
class ExponentialFamily(LinearLogitFamily):
    r""":math:`z = a (s - s_{\min}) + b`; :math:`\phi = [s', 1]`; constraint :math:`a \ge 0`.

    Example:
        >>> from jaxcal.calibrators.exponential import ExponentialFamily
        >>> ExponentialFamily().param_names
        ('a', 'b')
    """

    param_names: ClassVar[tuple[str, ...]] = ("a", "b")
    intercept_index: ClassVar[int | None] = 1
    shift_equivariant: ClassVar[bool] = True
    scale_equivariant: ClassVar[bool] = True

    def transform(self, scores: ArrayLike, ctx: ScoreRange) -> jax.Array:
        """:math:`s' = s - s_{\\min}`."""
        return jnp.asarray(scores) - ctx.lo

    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        s = self.transform(scores, ctx)
        return jnp.stack([s, jnp.ones_like(s)], axis=-1)

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        return jnp.array([[1.0, 0.0]], dtype=jnp.result_type(ctx.lo, float))

    def generative(self, scores, targets, weights, ctx):
        model = ExponentialScoreModel()
        s = self.transform(scores, ctx)
        params = model.fit_weighted(s, weights * targets, weights * (1.0 - targets))
        return model.calibration_map(params), jnp.int32(0), jnp.asarray(True)


@pytree_dataclass
class FittedExponential(LinearLogitCalibrator):
    """Fitted exponential calibration: ``predict(s) = sigmoid(a (s - s_min) + b)``.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.1, 0.5, 0.7, 1.2, 2.0, 3.0]), np.array([0, 1, 0, 0, 1, 1])
        >>> fitted = jaxcal.ExponentialCalibration().fit(s, y)
        >>> z = fitted.a * (s - s.min()) + fitted.b
        >>> bool(np.allclose(fitted.predict(s), 1 / (1 + np.exp(-z)), atol=1e-6))
        True
    """

    a = coefficient(0, "Slope a on s' = s - s_min.")
    b = coefficient(1, "Intercept b (logit at s_min).")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ExponentialCalibration(LinearCalibratorEstimator[FittedExponential]):
    """Exponential calibration estimator: ``l2`` (on :math:`a`), ``method``
    (``"discriminative"`` or ``"generative"``), ``max_iter`` and ``tol`` as in
    :class:`~jaxcal.calibrators._linear.LinearCalibratorEstimator`. ``fit`` returns a
    :class:`FittedExponential`.

    Raises:
        ValueError: an invalid hyperparameter (e.g. ``tol <= 0``), when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([0.1, 0.5, 0.7, 1.2, 2.0, 3.0]), np.array([0, 1, 0, 0, 1, 1])
        >>> gen = jaxcal.ExponentialCalibration(method="generative").fit(s, y)
        >>> bool(gen.a >= 0)
        True
        >>> jaxcal.ExponentialCalibration(tol=0.0)
        Traceback (most recent call last):
        ...
        ValueError: tol must be a finite number and > 0; got 0.0.
    """

    fitted_class: ClassVar[type[FittedExponential]] = FittedExponential
    methods: ClassVar[tuple[str, ...]] = ("discriminative", "generative")

    @property
    def family(self) -> ExponentialFamily:
        return ExponentialFamily()
