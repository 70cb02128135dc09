"""The functional form of the calibrators: pure functions of arrays and hyperparameters.

As optax's and blackjax's functions, these have no state and no host work, so they compose
with JAX's transformations: put them inside your own ``jit``, batch many problems with
``vmap``, differentiate the fitted map with ``grad`` / ``jvp`` (with respect to the scores,
the labels, the weights), and export the program with ``jax.export``. The hyperparameters
are the calibrator (a frozen, hashable dataclass: ``jaxcal.PlattScaling(l2=0.1)``); the
fitted calibrator is a pytree.

* :func:`fit`: ``(calibrator, scores, labels, *, sample_weight, propensity, loss) -> fitted``
  (:meth:`jaxcal.calibrators.Calibrator.fit_pure`, whose further options it passes on).
* :func:`predict`: ``(fitted, scores) -> probabilities``.

The estimator form, ``calibrator.fit(scores, labels).predict(scores)``, gives the same
numbers: on concrete arrays it validates eagerly, pads to size buckets and may call the
compiled CPU kernels; on tracers it *is* this pure fit. Invalid data cannot raise inside a
trace: it gives a fitted calibrator of NaN (see ``jaxcal.calibrators._base``).

Example:
    >>> import jax, jax.numpy as jnp, numpy as np, jaxcal
    >>> from jaxcal import functional as F
    >>> rng = np.random.default_rng(0)
    >>> labels = rng.integers(0, 2, (8, 500)).astype(np.float32)  # 8 problems
    >>> scores = rng.normal(labels, 1.0).astype(np.float32)
    >>> def fit_predict(s, y):
    ...     return F.predict(F.fit(jaxcal.PlattScaling(), s, y), s)
    >>> probs = jax.jit(jax.vmap(fit_predict))(scores, labels)
    >>> probs.shape
    (8, 500)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import jax
from jax.typing import ArrayLike

if TYPE_CHECKING:
    from jaxcal.calibrators._base import FittedCalibrator

__all__ = ["fit", "predict"]


def fit(calibrator: Any, scores: ArrayLike, labels: ArrayLike, **options: Any) -> FittedCalibrator:
    """The pure fit of ``calibrator`` on one problem (``[n]`` arrays): a fitted pytree.

    ``calibrator`` is any jaxcal calibrator (``jaxcal.PlattScaling(...)``,
    ``jaxcal.IsotonicCalibration(...)``, ...). ``options`` are the keyword arguments of its
    ``fit_pure``, passed on as given: ``sample_weight``, ``propensity`` and ``loss`` for every
    calibrator, and a calibrator's own (``fields``, ``cardinalities`` and ``key`` of
    :class:`jaxcal.NeuralCalibration`). See :meth:`jaxcal.calibrators.Calibrator.fit_pure`.

    Example:
        >>> import numpy as np, jaxcal
        >>> from jaxcal import functional as F
        >>> s, y = np.array([-1.0, 0.0, 0.5, 2.0]), np.array([0.0, 1.0, 0.0, 1.0])
        >>> fitted = F.fit(jaxcal.IsotonicCalibration(), s, y, sample_weight=np.ones(4))
        >>> np.asarray(F.predict(fitted, s)).round(2).tolist()
        [0.0, 0.5, 0.5, 1.0]
    """
    return calibrator.fit_pure(scores, labels, **options)


def predict(fitted: FittedCalibrator, scores: ArrayLike) -> jax.Array:
    """Calibrated probabilities of a fitted calibrator (``fitted.predict(scores)``).

    Example:
        >>> import jax, numpy as np, jaxcal
        >>> from jaxcal import functional as F
        >>> s, y = np.array([0.1, 0.3, 0.6, 0.9]), np.array([0.0, 1.0, 0.0, 1.0])
        >>> fitted = F.fit(jaxcal.HistogramBinning(n_bins=2, strategy="uniform"), s, y)
        >>> jax.jit(F.predict)(fitted, np.array([0.2, 0.8]))
        Array([0.5, 0.5], dtype=float32)
    """
    return fitted.predict(scores)
