r"""Platt scaling: :math:`P(y=1 \mid s) = \sigma(a s + b)` with :math:`a \ge 0`.

Platt (1999), "Probabilistic outputs for support vector machines". Fitted by the exact
constrained Newton solver of ``jaxcal.fitting.solver`` on the weighted logistic loss
(``jaxcal.losses``); the monotonicity constraint :math:`a \ge 0` is active only when
scores are anti-correlated with the labels (then the map is the constant base rate).
Platt's form is also the exact posterior of two equal-variance Gaussian score
distributions (``jaxcal.scoremodels.EqualVarianceGaussianScores``).

Example:
    >>> import jaxcal, numpy as np
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, 500)
    >>> scores = rng.normal(labels.astype(float), 1.0)
    >>> cal = jaxcal.PlattScaling().fit(scores, labels)
    >>> probs = cal.predict(scores)
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

__all__ = ["PlattScaling", "FittedPlatt", "PlattFamily"]


@family_dataclass
class PlattFamily(LinearLogitFamily):
    r""":math:`z = a s + b`; :math:`\phi = [s, 1]`; constraint :math:`a \ge 0` (``u = a``).

    Example:
        >>> from jaxcal.calibrators.platt import PlattFamily
        >>> PlattFamily().param_names
        ('a', 'b')
    """

    param_names: ClassVar[tuple[str, ...]] = ("a", "b")
    intercept_index: ClassVar[int | None] = 1
    shift_equivariant: ClassVar[bool] = True
    scale_equivariant: ClassVar[bool] = True

    def features(self, scores: jax.Array, ctx: ScoreRange) -> jax.Array:
        s = jnp.asarray(scores)
        return jnp.stack([s, jnp.ones_like(s)], axis=-1)

    def monotone_rows(self, lo: ArrayLike, hi: ArrayLike, ctx: ScoreRange) -> jax.Array:
        return jnp.array([[1.0, 0.0]], dtype=jnp.result_type(ctx.lo, float))


@pytree_dataclass
class FittedPlatt(LinearLogitCalibrator):
    """Fitted Platt scaling: ``predict(s) = sigmoid(a * s + b)``.

    Example:
        >>> import jaxcal, numpy as np
        >>> s, y = np.array([-1.0, -0.5, 0.2, 0.4, 1.0]), np.array([0, 1, 0, 1, 1])
        >>> fitted = jaxcal.PlattScaling().fit(s, y)
        >>> type(fitted).__name__, bool(fitted.a >= 0)
        ('FittedPlatt', True)
        >>> p = fitted.predict(s)
        >>> bool(np.allclose(p, 1 / (1 + np.exp(-(fitted.a * s + fitted.b)))))
        True
    """

    a = coefficient(0, "Slope a >= 0.")
    b = coefficient(1, "Intercept b.")


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlattScaling(LinearCalibratorEstimator[FittedPlatt]):
    """Platt scaling estimator: ``l2`` (on :math:`a`), ``method``, ``max_iter`` and ``tol``
    as in :class:`~jaxcal.calibrators._linear.LinearCalibratorEstimator`. ``method`` is
    only ``"discriminative"`` (for the generative equal-variance Gaussian fit use
    ``GaussianCalibration`` / ``jaxcal.scoremodels``). ``fit`` returns a
    :class:`FittedPlatt`.

    Raises:
        ValueError: an invalid hyperparameter (e.g. ``l2 < 0``), when it is made.

    Example:
        >>> import jaxcal, numpy as np
        >>> rng = np.random.default_rng(0)
        >>> labels = rng.integers(0, 2, 500)
        >>> scores = rng.normal(labels.astype(float), 1.0)
        >>> fitted = jaxcal.PlattScaling(l2=0.1).fit(scores, labels)
        >>> fitted.predict(np.array([-2.0, 0.5, 3.0])).shape
        (3,)
        >>> jaxcal.PlattScaling(l2=-1.0)
        Traceback (most recent call last):
        ...
        ValueError: l2 must be a finite number and >= 0; got -1.0.
    """

    fitted_class: ClassVar[type[FittedPlatt]] = FittedPlatt

    @property
    def family(self) -> PlattFamily:
        return PlattFamily()
