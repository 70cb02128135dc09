"""The calibrator contract shared by every calibrator in jaxcal.

* A *calibrator* is a frozen dataclass of hyperparameters (the thin estimator shell):
  ``fitted = Cal(...).fit(scores, labels, *, sample_weight=None, propensity=None,
  loss="naive")``. ``fit`` validates eagerly (``prepare_fit``), then calls the jitted core.
* A *fitted calibrator* is an immutable pytree (``@pytree_dataclass``), usable inside
  ``jit``: ``fitted.predict(scores) -> probabilities``, ``fitted.save(path)``, and
  ``jaxcal.load(path)`` returns an equal object.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import (
    check_fit_inputs,
    check_propensity,
    check_scores,
    check_two_classes,
)
from jaxcal.debias.losses import check_loss, loss_targets_weights

__all__ = ["FitData", "prepare_fit", "maybe_check_scores", "FittedCalibrator"]


class FitData(NamedTuple):
    """Validated float64 inputs of one calibration problem.

    ``targets`` and ``weights`` already encode the loss weighting: the objective is
    ``sum(weights * (softplus(z) - targets * z))`` (see ``jaxcal.debias.losses``).
    """

    scores: np.ndarray
    labels: np.ndarray
    targets: np.ndarray
    weights: np.ndarray


def prepare_fit(
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
) -> FitData:
    """Validate a single calibration problem and apply the loss weighting (eagerly)."""
    s, y, v = check_fit_inputs(scores, labels, sample_weight)
    check_loss(loss, propensity)
    if loss == "naive" and propensity is None:  # t = Y, w = v, without a device round trip
        return FitData(s, y, y, v)
    omega = None if propensity is None else check_propensity(propensity, s.shape[0])
    t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss=loss)
    t, w = np.asarray(t, np.float64), np.asarray(w, np.float64)
    check_two_classes(y, w)
    return FitData(s, y, t, w)


def maybe_check_scores(scores: ArrayLike) -> Any:
    """Validate concrete scores for ``predict``; pass tracers through (inside ``jit``)."""
    if isinstance(scores, jax.core.Tracer):
        return scores
    arr = np.asarray(scores)
    if arr.ndim == 1:
        return check_scores(arr)
    if not np.isfinite(arr).all():
        raise ValueError("scores contain non-finite values (NaN or inf).")
    return arr


class FittedCalibrator:
    """Mixin documenting the fitted-calibrator interface (subclasses are pytrees)."""

    def predict(self, scores: ArrayLike) -> jax.Array:  # pragma: no cover - interface
        """Calibrated probabilities P(y = 1 | s) for ``scores`` (any shape)."""
        raise NotImplementedError
