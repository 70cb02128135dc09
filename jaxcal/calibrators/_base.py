"""The calibrator contract shared by every calibrator in jaxcal.

* A *calibrator* (:class:`Calibrator`) is a frozen dataclass of hyperparameters, the thin
  estimator shell: ``fitted = Cal(...).fit(scores, labels, *, sample_weight=None,
  propensity=None, loss="naive")``. ``fit`` checks the hyperparameters and the data eagerly
  (``jaxcal._fitdata.prepare_fit``), then calls the calibrator's jitted core (``_fit_in``,
  in the dtype of the scores, or ``_fit``, in JAX's working precision).
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

from collections.abc import Collection
from typing import Any, Generic, TypeVar

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxcal._fitdata import FitData, PureFitData, poison, prepare_fit, prepare_fit_pure
from jaxcal._shapes import is_traced
from jaxcal.calibrators._scaling import fit_dtype

__all__ = ["Calibrator", "FittedCalibrator", "check_choice"]


def check_choice(value: Any, name: str, choices: Collection[str]) -> str:
    """``value`` if it is one of ``choices``; else a ``ValueError`` naming ``name``.

    Example:
        >>> from jaxcal.calibrators._base import check_choice
        >>> check_choice("uniform", "strategy", ("uniform", "quantile"))
        'uniform'
        >>> check_choice("equal", "strategy", ("uniform", "quantile"))
        Traceback (most recent call last):
        ...
        ValueError: strategy must be one of ('uniform', 'quantile'); got 'equal'.
    """
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}; got {value!r}.")
    return value


class FittedCalibrator:
    """Mixin documenting the fitted-calibrator interface (subclasses are pytrees).

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.calibrators import FittedCalibrator
        >>> s, y = np.array([0.1, 0.4, 0.6, 0.9]), np.array([0, 1, 0, 1])
        >>> isinstance(jaxcal.PlattScaling().fit(s, y), FittedCalibrator)
        True
    """

    def predict(self, scores: ArrayLike) -> jax.Array:  # pragma: no cover - interface
        """Calibrated probabilities P(y = 1 | s) for ``scores`` (any shape)."""
        raise NotImplementedError


#: the fitted type of a calibrator (``FittedPlatt`` for ``PlattScaling``, ...)
FittedT = TypeVar("FittedT", bound=FittedCalibrator)


class Calibrator(Generic[FittedT]):
    """Base class of the calibrators: the one ``fit`` of a single calibration problem,
    generic in the fitted type it returns (``PlattScaling`` is a
    ``Calibrator[FittedPlatt]``).

    Subclasses implement ``_fit(data: FitData) -> FittedCalibrator`` (the validated,
    loss-weighted data of :func:`jaxcal._fitdata.prepare_fit`), or ``_fit_in(data, dtype)``
    to fit in the dtype of the scores (see :meth:`_fit_in`), and, if they have
    hyperparameters to check, ``_check_hyperparameters()`` (subclasses call it from
    ``__post_init__``, so that a bad hyperparameter raises when the calibrator is made).

    Example:
        >>> import jaxcal, numpy as np
        >>> from jaxcal.calibrators._base import Calibrator
        >>> isinstance(jaxcal.HistogramBinning(n_bins=4), Calibrator)
        True
    """

    def fit(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> FittedT:
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
            The fitted calibrator: an immutable pytree with ``predict(scores)``, whose float
            leaves have the dtype of ``scores`` (float32 scores give float32 leaves, also
            with x64 enabled: :func:`~jaxcal.calibrators._scaling.fit_dtype`).

        Raises:
            ValueError: invalid hyperparameters, or invalid data (non-finite scores, labels
                not 0/1, a length mismatch, negative weights, propensities outside (0, 1],
                a single class), before anything is compiled. On traced inputs (inside
                ``jit``, ``vmap``, ``grad``) ``fit`` is :meth:`fit_pure`, whose invalid data
                gives NaN instead (the module's NaN policy).

        Example:
            >>> import jaxcal, numpy as np
            >>> s = np.array([0.1, 0.4, 0.35, 0.8], np.float32)
            >>> fitted = jaxcal.HistogramBinning(n_bins=2).fit(s, np.array([0, 0, 1, 1]))
            >>> fitted.values.dtype  # the scores' dtype
            dtype('float32')
        """
        if is_traced(scores, labels, sample_weight, propensity):
            return self.fit_pure(
                scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
            )
        self._check_hyperparameters()
        dtype = fit_dtype(scores)
        data = prepare_fit(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        return self._fit_in(data, dtype)

    def fit_pure(
        self,
        scores: ArrayLike,
        labels: ArrayLike,
        *,
        sample_weight: ArrayLike | None = None,
        propensity: ArrayLike | None = None,
        loss: str = "naive",
    ) -> FittedT:
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

        Example:
            >>> import jax, jaxcal, jax.numpy as jnp
            >>> s, y = jnp.array([0.1, 0.4, 0.35, 0.8]), jnp.array([0.0, 0.0, 1.0, 1.0])
            >>> fit = jax.jit(lambda s, y: jaxcal.PlattScaling().fit_pure(s, y).predict(s))
            >>> fit(s, y).shape
            (4,)
        """
        self._check_hyperparameters()
        data = prepare_fit_pure(
            scores, labels, sample_weight=sample_weight, propensity=propensity, loss=loss
        )
        return poison(self._fit_pure(data), data.invalid)

    def _fit_pure(self, data: PureFitData) -> FittedT:  # pragma: no cover - interface
        raise NotImplementedError(f"{type(self).__name__} has no pure fit yet.")

    def _check_hyperparameters(self) -> None:
        """Raise ``ValueError`` for invalid hyperparameters (default: nothing to check)."""

    def _fit_in(self, data: FitData, dtype: np.dtype) -> FittedT:
        """The eager fit of validated data whose fitted float leaves have ``dtype`` (the
        scores' dtype, :func:`~jaxcal.calibrators._scaling.fit_dtype`). The default is
        :meth:`_fit`, which computes in JAX's working precision; calibrators override this
        to compute in ``dtype``."""
        return self._fit(data)

    def _fit(self, data: FitData) -> FittedT:  # pragma: no cover - interface
        raise NotImplementedError
