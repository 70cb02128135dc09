r"""Temperature scaling for binary logits: :math:`P(y=1 \mid s) = \sigma(s / T)`.

Guo, Pleiss, Sun & Weinberger (ICML 2017), "On Calibration of Modern Neural Networks", in
its binary form: the score :math:`s` is a logit, the map has no intercept, and
:math:`\beta = 1/T \ge 0` (the constraint keeps the map monotone; :math:`\beta = 0`, i.e.
:math:`T = \infty`, is the constant 1/2). Fitted exactly (one-dimensional Newton) on the
weighted logistic loss; ``l2`` penalises :math:`\beta^2`.

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> logits = rng.normal(0.0, 3.0, 5000)
    >>> labels = (rng.uniform(size=5000) < 1 / (1 + np.exp(-logits / 2))).astype(int)
    >>> cal = jaxcal.TemperatureScaling().fit(logits, labels)
    >>> round(float(cal.temperature), 2)  # the MLE; the labels were drawn with T = 2
    1.99
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

__all__ = ["TemperatureScaling", "FittedTemperature", "TemperatureFamily"]


@family_dataclass
class TemperatureFamily(LinearLogitFamily):
    r""":math:`z = \beta s`; :math:`\phi = [s]`; constraint :math:`\beta \ge 0`.

    Example:
        >>> from jaxcal.calibrators.temperature import TemperatureFamily
        >>> TemperatureFamily().param_names
        ('inv_temperature',)
    """

    param_names: ClassVar[tuple[str, ...]] = ("inv_temperature",)
    intercept_index: ClassVar[int | None] = None
    scale_equivariant: ClassVar[bool] = True  # no intercept: not shift-equivariant

    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        return jnp.asarray(scores)[..., None]

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        return jnp.ones((1, 1), jnp.result_type(ctx.lo, float))

    def check_scores(self, scores, weights) -> None:
        if not (scores[weights > 0] != 0).any():
            raise ValueError("all training logits are 0; temperature scaling is not identified.")

    def invalid_scores(self, scores: jax.Array, weights: jax.Array) -> jax.Array:
        return ~jnp.any((scores != 0) & (weights > 0))


@pytree_dataclass
class FittedTemperature(LinearLogitCalibrator):
    """Fitted temperature scaling: ``predict(s) = sigmoid(s / temperature)``.

    Example:
        >>> import jaxcal, numpy as np
        >>> z, y = np.array([-3.0, -1.0, 0.5, 1.0, 2.0, 4.0]), np.array([0, 1, 0, 1, 1, 1])
        >>> fitted = jaxcal.TemperatureScaling().fit(z, y)
        >>> p = fitted.predict(z)
        >>> bool(np.allclose(p, 1 / (1 + np.exp(-z / fitted.temperature)), atol=1e-6))
        True
    """

    inv_temperature = coefficient(0, "beta = 1 / T >= 0.")

    @property
    def temperature(self) -> jax.Array:
        """:math:`T = 1/\\beta` (``inf`` when the constraint is active)."""
        return 1.0 / self.theta[..., 0]


@dataclasses.dataclass(frozen=True, kw_only=True)
class TemperatureScaling(LinearCalibratorEstimator[FittedTemperature]):
    """Binary temperature scaling (scores are logits): ``l2`` (on :math:`\\beta`),
    ``method`` (only ``"discriminative"``), ``max_iter`` and ``tol`` as in
    :class:`~jaxcal.calibrators._linear.LinearCalibratorEstimator`. ``fit`` returns a
    :class:`FittedTemperature`.

    Raises:
        ValueError: an invalid hyperparameter (e.g. ``max_iter < 1``), when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> z, y = np.array([-3.0, -1.0, 0.5, 1.0, 2.0, 4.0]), np.array([0, 1, 0, 1, 1, 1])
        >>> bool(jaxcal.TemperatureScaling().fit(z, y).temperature > 0)
        True
        >>> jaxcal.TemperatureScaling(max_iter=0)
        Traceback (most recent call last):
        ...
        ValueError: max_iter must be an integer >= 1; got 0.
    """

    fitted_class: ClassVar[type[FittedTemperature]] = FittedTemperature

    @property
    def family(self) -> TemperatureFamily:
        return TemperatureFamily()
