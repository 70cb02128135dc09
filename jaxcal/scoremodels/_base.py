"""Shared machinery of the score models: weighted class statistics and the eager ``fit``.

A *score model* describes the class-conditional score densities :math:`f_0, f_1` and the
class prior :math:`\\pi_1`. Bayes' rule turns it into a calibration map,

.. math::  \\operatorname{logit} P(y = 1 \\mid s) = \\log\\frac{\\pi_1}{\\pi_0}
    + \\log f_1(s) - \\log f_0(s),

which for the families below is a linear-logit map with closed-form coefficients
(formulas: Kweon et al. 2022; checked against scipy log-densities in the tests).

Weighted fits take per-score class weights ``w1`` (towards the positive class) and ``w0``
(towards the negative class): with 0/1 labels and sample weights ``v`` these are
``v * y`` and ``v * (1 - y)``; with soft targets ``t`` in [0, 1] they are ``w t`` and
``w (1 - t)`` (the expected complete-data log-likelihood).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_fit_inputs

__all__ = ["ScoreModel", "class_prior", "weighted_moments"]


def class_prior(w1: jax.Array, w0: jax.Array) -> jax.Array:
    """:math:`\\pi_1 = \\sum w_1 / (\\sum w_1 + \\sum w_0)`."""
    return jnp.sum(w1) / (jnp.sum(w1) + jnp.sum(w0))


def weighted_moments(x: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Weighted mean and (maximum-likelihood, divide-by-sum-of-weights) variance."""
    total = jnp.sum(w)
    mean = jnp.sum(w * x) / total
    var = jnp.sum(w * (x - mean) ** 2) / total
    return mean, var


@functools.partial(jax.jit, static_argnums=0)
def _fit_jit(model, scores, w1, w0):
    return model.fit_weighted(scores, w1, w0)


class ScoreModel:
    """Base class: eager validated ``fit`` on top of a pure ``fit_weighted``.

    Subclasses (frozen dataclasses holding the prior hyperparameters) implement
    ``model`` (NumPyro), ``fit_weighted(scores, w1, w0) -> params`` (pure, jit/vmap-able),
    ``log_odds(params, scores)`` and ``is_monotone(params, lo, hi)``.
    """

    support: str = "real"  # "real" or "positive" (scores must be > 0) or "nonnegative"

    def _check_support(self, s: np.ndarray) -> None:
        name = type(self).__name__
        if self.support == "positive" and (s <= 0).any():
            raise ValueError(
                f"{name} needs positive scores (its densities live on s > 0); got min "
                f"{s.min():.6g}. Shift the scores (GammaCalibration does s - s_min + shift)."
            )
        if self.support == "nonnegative" and (s < 0).any():
            raise ValueError(
                f"{name} needs non-negative scores; got min {s.min():.6g}. Shift them first."
            )

    def fit(self, scores: ArrayLike, labels: ArrayLike, *, sample_weight: ArrayLike | None = None):
        """Weighted maximum-likelihood fit of the class-conditional densities and prior.

        Args:
            scores: ``[n]`` scores (in the model's support).
            labels: ``[n]`` 0/1 labels.
            sample_weight: optional ``[n]`` non-negative weights.

        Returns:
            The fitted parameters (a pytree dataclass, savable with ``save``).

        Raises:
            ValueError: on invalid inputs or scores outside the support.
        """
        s, y, w = check_fit_inputs(scores, labels, sample_weight)
        self._check_support(s)
        dtype = jnp.asarray(0.0).dtype
        return _fit_jit(
            self,
            jnp.asarray(s, dtype),
            jnp.asarray(w * y, dtype),
            jnp.asarray(w * (1.0 - y), dtype),
        )

    def predict(self, params, scores: ArrayLike) -> jax.Array:
        """Posterior :math:`P(y=1 \\mid s)` = ``sigmoid(log_odds(params, scores))``."""
        return jax.nn.sigmoid(self.log_odds(params, scores))
