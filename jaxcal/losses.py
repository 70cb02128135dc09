r"""Loss weightings for calibration on implicit, missing-not-at-random feedback.

Every calibrator in jaxcal minimises a weighted logistic loss

.. math::  L(z) = \sum_i w_i \, [\operatorname{softplus}(z_i) - t_i z_i],

where :math:`z_i` is the calibrated logit of pair *i*. With :math:`t_i \in \{0, 1\}` this is the
weighted log-loss; a *target* :math:`t_i` outside {0, 1} is a soft label (the loss stays
convex in :math:`z`). A loss weighting maps (click label :math:`Y`, propensity
:math:`\omega`, sample weight :math:`v`) to :math:`(t, w)`:

``"naive"``
    :math:`t = Y`, :math:`w = v`. Treats every unobserved pair as a true negative: biased
    towards popular items and towards a too-low base rate.
``"ips"``
    :math:`t = Y / \omega`, :math:`w = v`. The unbiased estimator of the ideal log-loss
    :math:`-[R \log p + (1 - R)\log(1 - p)]` under :math:`Y = O R`, :math:`P(O = 1) = \omega`
    (Schnabel et al. 2016; Saito et al. 2020): :math:`E[Y/\omega] = R`, and the loss is linear
    in the label. This is the form the AAAI 2022 paper states.
``"ips_positive"``
    :math:`t = Y`, :math:`w = v\,(Y/\omega + 1 - Y)`. What the seed paper's public code does:
    positives weighted by :math:`1/\omega`, negatives by 1. Not unbiased for the ideal loss
    (negatives are not corrected), kept for reproducing the authors' numbers.
``"snips"``
    :math:`t = Y`, :math:`w = v\,(Y \kappa/\omega + 1 - Y)` with
    :math:`\kappa = \sum v Y / \sum v Y/\omega`: the positives' inverse-propensity weights
    normalised to mean 1 (self-normalised IPS, as in Yang et al. 2018 for implicit
    feedback). Lower variance than ``"ips_positive"``; the positives keep their observed
    total weight, so the level (base rate) is that of ``"naive"`` and only the shape of the
    map is re-weighted towards rarely exposed items.

**Implied base rate.** The best *constant* calibrator :math:`z_i \equiv z` solves
:math:`\sum_i w_i(\sigma(z) - t_i) = 0`, so its probability is

.. math::  \pi = \frac{\sum_i w_i t_i}{\sum_i w_i},

the level that any calibration map fitted on the same data inherits (a flexible map is
level-consistent: its weighted mean prediction on the fitting data equals :math:`\pi` for
Platt-type maps with an intercept, exactly, by the same score equation). Under IPS
:math:`\pi` can exceed 1 when the propensities are too small; it is reported as is
(:func:`implied_base_rate`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal._validation import check_labels, check_propensity, check_sample_weight

__all__ = [
    "LOSSES",
    "check_loss",
    "implied_base_rate",
    "loss_targets_weights",
    "weighted_logistic_loss",
]

LOSSES = ("naive", "ips", "ips_positive", "snips")


def check_loss(loss: str, propensity: object) -> None:
    """Eager check of a loss name and whether it needs propensities.

    Raises:
        ValueError: ``loss`` not one of :data:`LOSSES`, or a loss other than ``"naive"``
            without ``propensity``.

    Example:
        >>> from jaxcal.losses import check_loss
        >>> check_loss("ips", [0.5, 0.25])  # fine: returns None
        >>> check_loss("ips", None)
        Traceback (most recent call last):
        ...
        ValueError: loss="ips" needs per-pair propensities: pass propensity=...
    """
    if loss not in LOSSES:
        raise ValueError(f"loss must be one of {LOSSES}; got {loss!r}.")
    if loss != "naive" and propensity is None:
        raise ValueError(f'loss="{loss}" needs per-pair propensities: pass propensity=...')


def loss_targets_weights(
    labels: ArrayLike,
    *,
    propensity: ArrayLike | None = None,
    sample_weight: ArrayLike | None = None,
    loss: str = "naive",
) -> tuple[jax.Array, jax.Array]:
    """Targets and weights ``(t, w)`` of a loss weighting (see the module docstring).

    Pure and jit/vmap-friendly (``loss`` is static). Entries with ``sample_weight == 0``
    (e.g. masked padding) do not affect the ``"snips"`` normaliser.

    Args:
        labels: ``[n]`` observed 0/1 labels (clicks).
        propensity: ``[n]`` propensities in (0, 1]; required unless ``loss == "naive"``.
        sample_weight: ``[n]`` non-negative weights (default ones).
        loss: one of ``"naive"``, ``"ips"``, ``"ips_positive"``, ``"snips"``.

    Returns:
        ``(targets, weights)``, both ``[n]``, in the labels' float dtype (JAX's default float
        for integer or boolean labels).

    Example:
        >>> from jaxcal.losses import loss_targets_weights
        >>> t, w = loss_targets_weights([1, 0, 1], propensity=[0.5, 1.0, 0.25], loss="ips")
        >>> t.tolist(), w.tolist()  # t = Y / propensity
        ([2.0, 0.0, 4.0], [1.0, 1.0, 1.0])
        >>> t, w = loss_targets_weights([1, 0, 1], propensity=[0.5, 1.0, 0.25], loss="snips")
        >>> t.tolist(), w.tolist()  # positives 1/omega, normalised to mean 1: kappa = 2 / 6
        ([1.0, 0.0, 1.0], [0.666667, 1.0, 1.333333])
    """
    y = jnp.asarray(labels)
    if not jnp.issubdtype(y.dtype, jnp.floating):  # propensities are cast to the labels' dtype
        y = y.astype(jnp.result_type(float))
    v = jnp.ones_like(y) if sample_weight is None else jnp.asarray(sample_weight, y.dtype)
    if loss == "naive":
        return y, v
    if propensity is None:
        raise ValueError(f'loss="{loss}" needs propensity')
    inv = 1.0 / jnp.asarray(propensity, y.dtype)
    if loss == "ips":
        return y * inv, v
    if loss == "ips_positive":
        return y, v * (y * inv + 1.0 - y)
    if loss == "snips":
        kappa = jnp.sum(v * y) / jnp.sum(v * y * inv)
        return y, v * (y * inv * kappa + 1.0 - y)
    raise ValueError(f"loss must be one of {LOSSES}; got {loss!r}.")


def weighted_logistic_loss(z: ArrayLike, targets: ArrayLike, weights: ArrayLike) -> jax.Array:
    r"""``sum_i w_i [softplus(z_i) - t_i z_i]``, computed stably in log space.

    Args:
        z: ``[n]`` logits.
        targets, weights: ``[n]`` targets and weights (:func:`loss_targets_weights`).

    Returns:
        The scalar loss (the weighted log-loss in nats for 0/1 targets).

    Example:
        >>> import math
        >>> from jaxcal.losses import weighted_logistic_loss
        >>> value = float(weighted_logistic_loss([0.0, 2.0], [1.0, 0.0], [1.0, 2.0]))
        >>> math.isclose(value, math.log(2) + 2 * math.log1p(math.exp(2)), rel_tol=1e-6)
        True
    """
    z, targets, weights = (jnp.asarray(a) for a in (z, targets, weights))
    return jnp.sum(weights * (jax.nn.softplus(z) - targets * z))


def implied_base_rate(
    labels: ArrayLike,
    *,
    propensity: ArrayLike | None = None,
    sample_weight: ArrayLike | None = None,
    loss: str = "naive",
) -> float:
    r"""The base rate :math:`\sum_i w_i t_i / \sum_i w_i` a calibrator fitted with ``loss``
    inherits from these labels (see the module docstring).

    Args:
        labels: ``[n]`` 0/1 labels of the calibration pairs.
        propensity: ``[n]`` propensities in (0, 1] (required unless ``loss="naive"``).
        sample_weight: ``[n]`` non-negative weights (e.g. ``CalibrationPairs.negative_weight``).
        loss: ``"naive"``, ``"ips"``, ``"ips_positive"`` or ``"snips"``.

    Returns:
        The implied base rate (may exceed 1 under ``"ips"`` with too small propensities).

    Raises:
        ValueError: bad labels, weights or propensities, unknown loss.

    Example:
        >>> import numpy as np
        >>> from jaxcal.losses import implied_base_rate
        >>> implied_base_rate(np.r_[1, 0, 0, 0])
        0.25
    """
    y = check_labels(labels)
    check_loss(loss, propensity)
    v = check_sample_weight(sample_weight, y.shape[0])
    omega = None if propensity is None else check_propensity(propensity, y.shape[0])
    t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss=loss)
    t, w = np.asarray(t), np.asarray(w)
    return float(np.sum(w * t) / np.sum(w))
