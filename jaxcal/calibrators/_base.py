"""The calibrator contract shared by every calibrator in jaxcal.

* A *calibrator* (:class:`Calibrator`) is a frozen dataclass of hyperparameters, the thin
  estimator shell: ``fitted = Cal(...).fit(scores, labels, *, sample_weight=None,
  propensity=None, loss="naive")``. ``fit`` checks the hyperparameters and the data eagerly
  (``jaxcal._fitdata.prepare_fit``), then calls the calibrator's jitted core (``_fit``).
* A *fitted calibrator* (:class:`FittedCalibrator`) is an immutable pytree
  (``@pytree_dataclass``), usable inside ``jit``: ``fitted.predict(scores) ->
  probabilities``, ``fitted.save(path)``, and ``jaxcal.load(path)`` returns an equal object.
* The *pure fit* (:meth:`Calibrator.fit_pure`, :func:`jaxcal.functional.fit`): the same map
  computed in JAX alone, with no host work (no NumPy, no padding, no compiled kernels), so
  that it runs inside a caller's ``jit``, under ``vmap`` (many problems) and ``grad`` /
  ``jvp``, and exports with ``jax.export``. ``fit`` takes it by itself when any input is a
  tracer. Subclasses implement ``_fit_pure(data: PureFitData) -> FittedCalibrator``.

The NaN policy of the pure fit: a check that depends on values cannot raise under a trace,
so data that ``fit`` would refuse (a non-finite score, a label not 0/1, a negative weight, a
propensity outside (0, 1], a single class) gives a fitted calibrator whose every
floating-point leaf is NaN, and so NaN predictions: never a plausible number. Likewise a
traced ``predict`` gives NaN for a non-finite score.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.typing import ArrayLike

from jaxcal._fitdata import FitData, PureFitData, poison, prepare_fit, prepare_fit_pure
from jaxcal._shapes import is_traced

__all__ = ["Calibrator", "FittedCalibrator"]


class Calibrator:
    """Base class of the calibrators: the one ``fit`` of a single calibration problem.

    Subclasses implement ``_fit(data: FitData) -> FittedCalibrator`` (the validated,
    loss-weighted data of :func:`jaxcal._fitdata.prepare_fit`) and, if they have
    hyperparameters to check, ``_check_hyperparameters()``.
    """

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> Any:
        """Fit the calibration map on one problem.

        Args:
            scores: ``[n]`` finite scores (the calibrator's domain: see its class).
            labels: ``[n]`` 0/1 labels (clicks, or relevance).
            sample_weight: optional ``[n]`` non-negative weights (default ones).
            propensity: optional ``[n]`` propensities in (0, 1], needed unless
                ``loss="naive"``.
            loss: the loss weighting (:mod:`jaxcal.losses`): ``"naive"``, ``"ips"``,
                ``"ips_positive"`` or ``"snips"``.

        Returns:
            The fitted calibrator: an immutable pytree with ``predict(scores)``.

        Raises:
            ValueError: invalid hyperparameters, or invalid data (non-finite scores, labels
                not 0/1, a length mismatch, negative weights, propensities outside (0, 1],
                a single class), before anything is compiled. On traced inputs (inside
                ``jit``, ``vmap``, ``grad``) ``fit`` is :meth:`fit_pure`, whose invalid data
                gives NaN instead (the module's NaN policy).
        """
        if is_traced(scores, labels, sample_weight, propensity):
            return self.fit_pure(
                scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
            )
        self._check_hyperparameters()
        data = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        return self._fit(data)

    def fit_pure(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> Any:
        """The pure fit: the map of :meth:`fit`, computed in JAX alone.

        Runs inside ``jit``, under ``vmap`` (a batch axis on the inputs: one problem per
        row) and ``grad`` / ``jvp`` (with respect to the scores, labels, weights and
        propensities, where the map is differentiable), and exports with ``jax.export``.
        The shapes are the caller's (nothing is padded), the dtype is the scores' (float32
        unless x64 is on and the scores are float64), and the numbers are those of
        :meth:`fit` up to that dtype's rounding. Invalid data gives NaN (the module's NaN
        policy); invalid hyperparameters and shapes raise ``ValueError``.

        Args:
            scores, labels, sample_weight, propensity, loss: as in :meth:`fit`.

        Returns:
            The fitted calibrator (the same type as :meth:`fit`'s), a pytree of arrays.
        """
        self._check_hyperparameters()
        data = prepare_fit_pure(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        return poison(self._fit_pure(data), data.invalid)

    def _fit_pure(self, data: PureFitData) -> Any:  # pragma: no cover - interface
        raise NotImplementedError(f"{type(self).__name__} has no pure fit yet.")

    def _check_hyperparameters(self) -> None:
        """Raise ``ValueError`` for invalid hyperparameters (default: nothing to check)."""

    def _fit(self, data: FitData) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class FittedCalibrator:
    """Mixin documenting the fitted-calibrator interface (subclasses are pytrees)."""

    def predict(self, scores: ArrayLike) -> jax.Array:  # pragma: no cover - interface
        """Calibrated probabilities P(y = 1 | s) for ``scores`` (any shape)."""
        raise NotImplementedError
