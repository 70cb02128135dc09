"""The calibrator contract shared by every calibrator in jaxcal.

* A *calibrator* (:class:`Calibrator`) is a frozen dataclass of hyperparameters, the thin
  estimator shell: ``fitted = Cal(...).fit(scores, labels, *, sample_weight=None,
  propensity=None, loss="naive")``. ``fit`` checks the hyperparameters and the data eagerly
  (``jaxcal._fitdata.prepare_fit``), then calls the calibrator's jitted core (``_fit``).
* A *fitted calibrator* (:class:`FittedCalibrator`) is an immutable pytree
  (``@pytree_dataclass``), usable inside ``jit``: ``fitted.predict(scores) ->
  probabilities``, ``fitted.save(path)``, and ``jaxcal.load(path)`` returns an equal object.
"""

from __future__ import annotations

from typing import Any

import jax
from jax.typing import ArrayLike

from jaxcal._fitdata import FitData, prepare_fit

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
                a single class), before anything is compiled.
        """
        self._check_hyperparameters()
        data = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        return self._fit(data)

    def _check_hyperparameters(self) -> None:
        """Raise ``ValueError`` for invalid hyperparameters (default: nothing to check)."""

    def _fit(self, data: FitData) -> Any:  # pragma: no cover - interface
        raise NotImplementedError


class FittedCalibrator:
    """Mixin documenting the fitted-calibrator interface (subclasses are pytrees)."""

    def predict(self, scores: ArrayLike) -> jax.Array:  # pragma: no cover - interface
        """Calibrated probabilities P(y = 1 | s) for ``scores`` (any shape)."""
        raise NotImplementedError
