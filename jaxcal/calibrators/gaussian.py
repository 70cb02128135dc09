r"""Gaussian calibration: :math:`P(y=1 \mid s) = \sigma(a s^2 + b s + c)`, monotone on the
training range.

Kweon, Kang & Yu (AAAI 2022), "Obtaining Calibrated Probabilities with Personalized Ranking
Models". The quadratic logit is the exact posterior of class-conditional Gaussians with
unequal variances (``jaxcal.scoremodels.GaussianScoreModel``).

* ``method="discriminative"`` (default): minimise the weighted logistic loss subject to
  :math:`2 a s_{\min} + b \ge 0` and :math:`2 a s_{\max} + b \ge 0` (the derivative is linear
  in :math:`s`, so this is exactly "non-decreasing on :math:`[s_{\min}, s_{\max}]`"), solved
  exactly by ``jaxcal.fitting.solver``.
* ``method="generative"``: weighted Gaussian MLE per class (weights :math:`w t` and
  :math:`w (1 - t)`) and the closed-form map; not constrained (``is_monotone()`` tells).

Outside the training range the quadratic is extrapolated as is (it may turn down there).

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, 1000)
    >>> scores = np.where(labels == 1, rng.normal(1.0, 0.7, 1000), rng.normal(0.0, 1.2, 1000))
    >>> cal = jaxcal.GaussianCalibration().fit(scores, labels)
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
from jaxcal.scoremodels.gaussian import GaussianScoreModel

__all__ = ["GaussianCalibration", "FittedGaussian", "GaussianFamily"]


@family_dataclass
class GaussianFamily(LinearLogitFamily):
    r""":math:`z = a s^2 + b s + c`; :math:`\phi = [s^2, s, 1]`; rows
    :math:`[2s_{\min}, 1, 0]`, :math:`[2s_{\max}, 1, 0]`.

    Example:
        >>> from jaxcal.calibrators.gaussian import GaussianFamily
        >>> GaussianFamily().param_names
        ('a', 'b', 'c')
    """

    param_names: ClassVar[tuple[str, ...]] = ("a", "b", "c")
    intercept_index: ClassVar[int | None] = 2
    shift_equivariant: ClassVar[bool] = True  # a quadratic of s - c is a quadratic of s
    scale_equivariant: ClassVar[bool] = True

    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        s = jnp.asarray(scores)
        return jnp.stack([s * s, s, jnp.ones_like(s)], axis=-1)

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        dtype = jnp.result_type(ctx.lo, float)
        lo, hi = jnp.asarray(lo, dtype), jnp.asarray(hi, dtype)
        one, zero = jnp.ones((), dtype), jnp.zeros((), dtype)
        return jnp.stack([jnp.stack([2 * lo, one, zero]), jnp.stack([2 * hi, one, zero])])

    def generative(self, scores, targets, weights, ctx):
        model = GaussianScoreModel()
        params = model.fit_weighted(scores, weights * targets, weights * (1.0 - targets))
        return model.calibration_map(params), jnp.int32(0), jnp.asarray(True)


@pytree_dataclass
class FittedGaussian(LinearLogitCalibrator):
    """Fitted Gaussian calibration: ``predict(s) = sigmoid(a s^2 + b s + c)``.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([-1.0, -0.5, 0.2, 0.4, 1.0, 1.5]), np.array([0, 1, 0, 1, 0, 1])
        >>> fitted = jaxcal.GaussianCalibration().fit(s, y)
        >>> z = fitted.a * s**2 + fitted.b * s + fitted.c
        >>> bool(np.allclose(fitted.predict(s), 1 / (1 + np.exp(-z)), atol=1e-6))
        True
    """

    a = coefficient(0, "Quadratic coefficient a.")
    b = coefficient(1, "Linear coefficient b.")
    c = coefficient(2, "Intercept c.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GaussianCalibration(LinearCalibratorEstimator[FittedGaussian]):
    """Gaussian calibration estimator: ``l2`` (on :math:`a, b`), ``method``
    (``"discriminative"`` or ``"generative"``), ``max_iter`` and ``tol`` as in
    :class:`~jaxcal.calibrators._linear.LinearCalibratorEstimator`. ``fit`` returns a
    :class:`FittedGaussian`.

    Raises:
        ValueError: an invalid hyperparameter (e.g. an unknown ``method``), when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> labels = rng.integers(0, 2, 500)
        >>> scores = np.where(labels == 1, rng.normal(1.0, 0.7, 500), rng.normal(0.0, 1.2, 500))
        >>> gen = jaxcal.GaussianCalibration(method="generative").fit(scores, labels)
        >>> gen.method
        'generative'
        >>> jaxcal.GaussianCalibration(method="bayes")
        Traceback (most recent call last):
        ...
        ValueError: method must be one of ('discriminative', 'generative'); got 'bayes'.
    """

    fitted_class: ClassVar[type[FittedGaussian]] = FittedGaussian
    methods: ClassVar[tuple[str, ...]] = ("discriminative", "generative")

    @property
    def family(self) -> GaussianFamily:
        return GaussianFamily()
