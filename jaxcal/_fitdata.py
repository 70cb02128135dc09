"""Validated fit inputs: the eager checks every ``fit`` runs before anything is compiled,
and the loss weighting (:mod:`jaxcal.losses`) applied to them.

* :func:`prepare_fit`: one problem, ``[n]`` scores and labels -> :class:`FitData`.
* :func:`prepare_fit_batch`: ``B`` problems (``[B, n]`` with a mask, or 1-D with group ids,
  :func:`group_to_batch`) -> ``[B, n]`` scores, targets and weights.
* :func:`maybe_check_scores`: the scores of ``predict`` (tracers pass through).
* :func:`prepare_fit_pure`: the same problem as :func:`prepare_fit`, in JAX (no host work:
  it runs on tracers, inside ``jit``, ``vmap`` and ``grad``) -> :class:`PureFitData`, whose
  ``invalid`` flag carries the checks that cannot raise under a trace (the NaN policy of
  ``jaxcal.calibrators._base``).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import (
    check_batch_inputs,
    check_finite_array,
    check_fit_inputs,
    check_groups,
    check_propensity,
    check_scores,
    check_two_classes,
    nan_where,
)
from jaxcal.losses import check_loss, loss_targets_weights

__all__ = [
    "FitData",
    "PureFitData",
    "prepare_fit",
    "prepare_fit_pure",
    "poison",
    "maybe_check_scores",
    "group_to_batch",
    "prepare_fit_batch",
]


class FitData(NamedTuple):
    """Validated float64 inputs of one calibration problem.

    ``targets`` and ``weights`` already encode the loss weighting: the objective is
    ``sum(weights * (softplus(z) - targets * z))`` (see ``jaxcal.losses``).
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


class PureFitData(NamedTuple):
    """One calibration problem as JAX arrays (possibly tracers), for the pure fits.

    ``scores``, ``labels``, ``targets`` and ``weights`` are ``[n]`` arrays of one float dtype
    (the scores', or JAX's default float for integer scores); the objective is
    ``sum(weights * (softplus(z) - targets * z))`` as in :class:`FitData`. ``invalid`` is a
    scalar bool: the data would have been refused by :func:`prepare_fit` (a non-finite
    score, a label not 0/1, a negative or non-finite weight, a propensity outside (0, 1],
    no weight on one of the classes).
    """

    scores: jax.Array
    labels: jax.Array
    targets: jax.Array
    weights: jax.Array
    invalid: jax.Array


def prepare_fit_pure(
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    sample_weight: ArrayLike | None = None,
    propensity: ArrayLike | None = None,
    loss: str = "naive",
) -> PureFitData:
    """:func:`prepare_fit` in JAX: shapes and the loss name are checked eagerly (they are
    static under a trace); the checks of values become ``invalid`` (never raised)."""
    check_loss(loss, propensity)
    s = jnp.asarray(scores)
    if not jnp.issubdtype(s.dtype, jnp.floating):
        s = s.astype(jnp.result_type(float))
    if s.ndim != 1 or s.shape[0] == 0:
        raise ValueError(f"scores must be a non-empty 1-D array; got shape {s.shape}.")
    n = s.shape[0]
    y = jnp.asarray(labels)
    if y.shape != (n,):
        raise ValueError(f"length mismatch: scores have shape {s.shape} but labels {y.shape}.")
    y = y.astype(s.dtype)
    v = jnp.ones_like(s) if sample_weight is None else jnp.asarray(sample_weight).astype(s.dtype)
    if v.shape != (n,):
        raise ValueError(f"shape mismatch: scores {s.shape} but sample_weight {v.shape}.")
    omega = None
    if propensity is not None:
        omega = jnp.asarray(propensity).astype(s.dtype)
        if omega.shape != (n,):
            raise ValueError(f"shape mismatch: scores {s.shape} but propensity {omega.shape}.")
    t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss=loss)
    invalid = (
        ~jnp.all(jnp.isfinite(s))
        | jnp.any((y != 0) & (y != 1))
        | jnp.any(~jnp.isfinite(v) | (v < 0))
        | ~(jnp.sum(v * y) > 0)
        | ~(jnp.sum(v * (1 - y)) > 0)
    )
    if omega is not None:
        invalid = invalid | jnp.any(~(omega > 0) | ~(omega <= 1))
    return PureFitData(s, y, t.astype(s.dtype), w.astype(s.dtype), invalid)


def poison(fitted: Any, invalid: ArrayLike) -> Any:
    """``fitted`` with every floating-point leaf replaced by NaN where ``invalid`` is true
    (the NaN policy of the pure fits: invalid data never gives a plausible map)."""
    return nan_where(invalid, fitted)


def maybe_check_scores(scores: ArrayLike) -> Any:
    """Validate concrete scores for ``predict``; pass tracers through (inside ``jit``)."""
    if isinstance(scores, jax.core.Tracer):
        return scores
    arr = np.asarray(scores)
    if arr.ndim == 1:
        return check_scores(arr)
    return check_finite_array(arr)


def group_to_batch(group: ArrayLike, *arrays: Any):
    """Pad 1-D per-entry arrays into ``[G, n_max]`` rows by integer group id.

    Returns ``(ids, mask, padded...)``: ``ids`` are the sorted unique group ids (row ``g`` of
    the batch is group ``ids[g]``); ``None`` arrays stay ``None``.
    """
    first = next(a for a in arrays if a is not None)
    n = np.asarray(first).shape[0]
    g = check_groups(group, n)
    ids, code = np.unique(g, return_inverse=True)
    counts = np.bincount(code, minlength=ids.size)
    order = np.argsort(code, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pos = np.empty(n, np.int64)
    pos[order] = np.arange(n) - np.repeat(starts, counts)
    shape = (ids.size, int(counts.max()))
    mask = np.zeros(shape, bool)
    mask[code, pos] = True
    out = []
    for a in arrays:
        if a is None:
            out.append(None)
            continue
        a = np.asarray(a)
        if a.ndim != 1 or a.shape[0] != n:
            raise ValueError(f"grouped inputs must be 1-D of length {n}; got shape {a.shape}.")
        padded = np.zeros(shape, np.float64)
        padded[code, pos] = a
        out.append(padded)
    return (ids, mask, *out)


def prepare_fit_batch(scores, labels, *, mask, group, sample_weight, propensity, loss):
    """Validate ``B`` problems (``[B, n]`` with ``mask``, or 1-D with ``group`` ids) and turn
    them into the loss-weighting targets and weights (``jaxcal.losses``).

    Returns ``(s, t, w)``, ``[B, n]`` float64 arrays (masked entries have weight 0).
    """
    check_loss(loss, propensity)
    if group is not None:
        if mask is not None:
            raise ValueError("pass either mask (for [B, n] inputs) or group, not both.")
        _, mask, scores, labels, sample_weight, propensity = group_to_batch(
            group, scores, labels, sample_weight, propensity
        )
    s, y, v, m = check_batch_inputs(scores, labels, mask=mask, sample_weight=sample_weight)
    omega = None
    if propensity is not None:
        omega = np.asarray(propensity, np.float64)
        if omega.shape != s.shape:
            raise ValueError(f"shape mismatch: scores {s.shape} but propensity {omega.shape}.")
        check_propensity(omega[m], int(m.sum()))
        omega = np.where(m, omega, 1.0)
    if loss == "naive":  # t = Y, w = v (jaxcal.losses), without a device round trip
        return s, y, v
    tw = jax.vmap(functools.partial(loss_targets_weights, loss=loss))
    t, w = tw(
        jnp.asarray(y),
        propensity=None if omega is None else jnp.asarray(omega),
        sample_weight=jnp.asarray(v),
    )
    return s, np.asarray(t, np.float64), np.asarray(w, np.float64)


def working_dtype() -> np.dtype:
    """JAX's default float dtype: float64 iff x64 is enabled.

    Example:
        >>> from jaxcal._fitdata import working_dtype
        >>> working_dtype().name  # JAX's default (x64 off)
        'float32'
    """
    return np.dtype(jnp.result_type(float))


def fit_dtype(scores: Any) -> np.dtype:
    """The dtype a calibrator fitted on ``scores`` computes in and stores (docs/api.md: a
    fitted calibrator's float leaves have the dtype of its scores): the scores' own float
    dtype as JAX holds it (float32 scores give float32 even with x64 enabled; float64 scores
    give float64 with x64, float32 without), and JAX's default float for anything else
    (integer, boolean or half-precision scores, Python sequences).

    Example:
        >>> import numpy as np
        >>> from jaxcal._fitdata import fit_dtype
        >>> fit_dtype(np.zeros(3, np.float32)).name
        'float32'
        >>> fit_dtype([0, 1, 2]).name  # JAX's default float (x64 off)
        'float32'
    """
    dtype = getattr(scores, "dtype", None)
    if dtype is not None and np.dtype(dtype) in (np.float32, np.float64):
        return np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    return working_dtype()
