r"""Simulated scores with planted segment effects: data for multicalibration with known truth.

A base model scores each impression with a logit :math:`z`; the truth departs from it in
segments of the features, the errors a global calibrator cannot fix:

.. math::

    \operatorname{logit} p = a_d\, z + \delta_c + \gamma\, [c = c^*, d = d^*] + \eta\,
        \sin\!\big((\text{age} - 18) / 10\big)

with a country ``c`` (``n_countries`` levels, offsets :math:`\delta_c \sim
\mathcal N(0, \sigma_c^2)`), a device ``d`` (``n_devices`` levels; device 0's slope
:math:`a_0 = ` ``overconfidence`` < 1 makes the base model over-confident there, the others
have slope 1), one country x device cell with an extra offset :math:`\gamma` (country 0,
device 1) and a numeric age effect of amplitude :math:`\eta`. The score given to the
calibrator is :math:`\sigma(z)`; the label is Bernoulli(:math:`p`). The true probability
is returned, so the error of a corrected probability to the truth can be measured.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxcal._validation import check_int, check_key, check_real

__all__ = ["SegmentData", "simulate_segments"]


class SegmentData(NamedTuple):
    """Simulated impressions: scores, labels, a feature table and the true probabilities.

    Made by :func:`simulate_segments`.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import simulate_segments
        >>> data = simulate_segments(500, key=jax.random.key(0), n_devices=3)
        >>> sorted(set(data.features["device"].tolist())), data.true_probs.shape
        ([0, 1, 2], (500,))
    """

    scores: np.ndarray  # (n,) the base model's probabilities sigma(z)
    labels: np.ndarray  # (n,) 0/1 outcomes drawn from true_probs
    features: dict[str, np.ndarray]  # "country", "device" (int codes), "age" (float)
    true_probs: np.ndarray  # (n,) the probability the labels were drawn from


def simulate_segments(
    n: int,
    *,
    key: jax.Array,
    n_countries: int = 20,
    n_devices: int = 4,
    country_scale: float = 0.6,
    overconfidence: float = 0.5,
    cell_effect: float = 1.0,
    age_effect: float = 0.5,
    base_mean: float = -1.0,
    base_scale: float = 1.5,
) -> SegmentData:
    """Simulate ``n`` impressions whose base scores miss planted segment effects.

    Args:
        n: number of impressions (>= 1).
        key: a ``jax.random`` key. The segments' effects are drawn from ``key`` alone and the
            rows from ``key`` and ``n``: for a train and a test set with the same truth, call
            once with the two sizes added and split the rows.
        n_countries: levels of the categorical feature ``"country"`` (>= 2).
        n_devices: levels of ``"device"`` (>= 2).
        country_scale: standard deviation of the per-country logit offsets (>= 0).
        overconfidence: slope of the true logit on the base logit on device 0 (> 0; 1 = none).
        cell_effect: extra logit offset of the cell country 0 x device 1.
        age_effect: amplitude of the numeric age effect on the logit.
        base_mean, base_scale: mean and standard deviation (> 0) of the base logits.

    Returns:
        A :class:`SegmentData` in float64 NumPy arrays (features: int32 codes and float64
        ages in [18, 80)).

    Example:
        >>> import jax
        >>> from jaxcal.data import simulate_segments
        >>> data = simulate_segments(1000, key=jax.random.key(0))
        >>> sorted(data.features), data.scores.shape
        (['age', 'country', 'device'], (1000,))
    """
    key = check_key(key)
    n = check_int(n, "n")
    n_countries = check_int(n_countries, "n_countries", minimum=2)
    n_devices = check_int(n_devices, "n_devices", minimum=2)
    country_scale = check_real(country_scale, "country_scale", minimum=0.0)
    overconfidence = check_real(overconfidence, "overconfidence", minimum=0.0, strict=True)
    base_scale = check_real(base_scale, "base_scale", minimum=0.0, strict=True)
    cell_effect = check_real(cell_effect, "cell_effect")
    age_effect = check_real(age_effect, "age_effect")
    base_mean = check_real(base_mean, "base_mean")

    k_offsets, k_rows = jax.random.split(key)
    k_country, k_device, k_age, k_base, k_label = jax.random.split(jax.random.fold_in(k_rows, n), 5)
    with jax.default_device(jax.devices("cpu")[0]):
        offsets = np.asarray(jax.random.normal(k_offsets, (n_countries,)), np.float64)
        country = np.asarray(jax.random.randint(k_country, (n,), 0, n_countries), np.int32)
        device = np.asarray(jax.random.randint(k_device, (n,), 0, n_devices), np.int32)
        age = np.asarray(jax.random.uniform(k_age, (n,), minval=18.0, maxval=80.0), np.float64)
        z = np.asarray(jax.random.normal(k_base, (n,)), np.float64) * base_scale + base_mean
        uniform = np.asarray(jax.random.uniform(k_label, (n,)), np.float64)

    slope = np.where(device == 0, float(overconfidence), 1.0)
    cell = (country == 0) & (device == 1)
    true_logit = (
        slope * z
        + country_scale * offsets[country]
        + cell_effect * cell
        + age_effect * np.sin((age - 18.0) / 10.0)
    )
    true_probs = np.exp(-np.logaddexp(0.0, -true_logit))
    scores = np.exp(-np.logaddexp(0.0, -z))
    labels = (uniform < true_probs).astype(np.float64)
    features = {"country": country, "device": device, "age": age}
    return SegmentData(scores, labels, features, true_probs)
