"""The input check shared by the binary metrics: probabilities, labels and sample weights.

Concrete inputs are checked on the host (``jaxcal._validation``: a ``ValueError`` that names
the problem) and handed to the jitted cores padded to a bucket size (``jaxcal._shapes``: one
program per bucket of sizes). Traced inputs (inside a caller's ``jit``, ``vmap``, ``grad`` or
``jax.export``) are checked by :func:`jaxcal._validation.check_pure`: shapes and dtypes still
raise, bad values set ``invalid`` and the metric is NaN (docs/metrics.md, "Inside jit, vmap
and grad").
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np

from jaxcal import _shapes
from jaxcal._validation import (
    check_labels,
    check_probs,
    check_pure,
    check_sample_weight,
    nan_where,
)

__all__ = ["MetricInputs", "metric_inputs", "padded_rows"]


def padded_rows(n: int, p: np.ndarray, y: np.ndarray, w: np.ndarray, fill_p: float = 0.0):
    """``p, y, w`` padded to the bucket size of ``n`` with zero-weight entries of probability
    ``fill_p`` (exact for every weighted sum; counts use the number of real entries), as
    device arrays."""
    size = _shapes.padded_size(n)
    return [jax.device_put(a) for a in _shapes.pad_rows(size, p, y, w, fills=(fill_p, 0, 0))]


class MetricInputs(NamedTuple):
    """Checked ``(probs, labels, weights)`` of a metric, from :func:`metric_inputs`."""

    probs: Any  #: ``[n]`` probabilities (NumPy float64 on the host, else traced)
    labels: Any  #: ``[n]`` 0/1 labels
    weights: Any  #: ``[n]`` sample weights (ones for ``None``)
    invalid: Any  #: traced scalar bool of the value checks; ``None`` for concrete inputs

    @property
    def traced(self) -> bool:
        """Whether the inputs are traced (checked by ``check_pure``)."""
        return self.invalid is not None

    @property
    def n(self) -> int | None:
        """The number of real entries of the :meth:`padded` arrays; ``None`` when traced
        (no padding: every entry is real)."""
        return None if self.traced else self.probs.shape[0]

    def padded(self, fill_p: float = 0.0) -> tuple:
        """``(p, y, w)`` as the jitted cores take them: :func:`padded_rows` of concrete
        inputs, traced ones as they are."""
        if self.traced:
            return self.probs, self.labels, self.weights
        return tuple(padded_rows(self.n, self.probs, self.labels, self.weights, fill_p))

    def result(self, value: Any) -> Any:
        """``value``; for traced inputs NaN (every float leaf) where they are invalid."""
        return nan_where(self.invalid, value) if self.traced else value


def metric_inputs(probs: Any, labels: Any, sample_weight: Any = None, *others: Any):
    """Check a metric's probabilities, labels and sample weights, on the host or traced.

    Args:
        probs: ``[n]`` probabilities in [0, 1].
        labels: ``[n]`` 0/1 labels.
        sample_weight: ``[n]`` non-negative weights, or ``None``.
        *others: further arguments of the metric (a key, a bandwidth...): when one of them
            is traced, the inputs take the traced path too.

    Returns:
        :class:`MetricInputs` (``invalid`` is ``None`` for concrete inputs).

    Raises:
        ValueError: concrete inputs: probabilities outside [0, 1] or non-finite, labels not
            0/1, a length mismatch, empty input, negative or all-zero weights; traced
            inputs: a wrong shape or dtype.
    """
    if _shapes.is_traced(probs, labels, sample_weight, *others):
        return MetricInputs(*check_pure(probs, labels, sample_weight))
    p = check_probs(probs)
    y = check_labels(labels, p.shape[0])
    return MetricInputs(p, y, check_sample_weight(sample_weight, p.shape[0]), None)
