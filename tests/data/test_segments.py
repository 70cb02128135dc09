"""simulate_segments: the planted truth follows its formula, labels are Bernoulli(truth),
the segments' effects depend on the key only, bad arguments raise ValueError."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal.data import simulate_segments


def test_labels_are_bernoulli_of_the_truth_and_the_effects_are_planted():
    d = simulate_segments(200_000, key=jax.random.key(3), country_scale=0.0, age_effect=0.0)
    # with no country and age effect the truth is sigma(slope * z + cell offset)
    z = np.log(d.scores) - np.log1p(-d.scores)
    country, device = d.features["country"], d.features["device"]
    slope = np.where(device == 0, 0.5, 1.0)
    expected = 1 / (1 + np.exp(-(slope * z + 1.0 * ((country == 0) & (device == 1)))))
    np.testing.assert_allclose(d.true_probs, expected, rtol=1e-10, atol=1e-12)
    # labels: the mean of Bernoulli(p) within 4 standard errors, overall and in the cell
    for rows in (np.ones_like(d.labels, bool), (country == 0) & (device == 1)):
        p = d.true_probs[rows]
        se = np.sqrt(np.sum(p * (1 - p))) / rows.sum()
        assert abs(d.labels[rows].mean() - p.mean()) < 4 * se


def test_effects_depend_on_the_key_only():
    a = simulate_segments(
        5000, key=jax.random.key(1), age_effect=0.0, cell_effect=0.0, overconfidence=1.0
    )
    b = simulate_segments(
        7000, key=jax.random.key(1), age_effect=0.0, cell_effect=0.0, overconfidence=1.0
    )
    offset = {}
    for d in (a, b):
        z = np.log(d.scores) - np.log1p(-d.scores)
        t = np.log(d.true_probs) - np.log1p(-d.true_probs)
        for c in range(20):
            rows = d.features["country"] == c
            offset.setdefault(c, []).append(np.unique(np.round(t[rows] - z[rows], 9)))
    for c, (first, second) in offset.items():
        assert first.size == 1 and np.array_equal(first, second), c
    assert not np.array_equal(a.scores[:5000], b.scores[:5000])  # the rows differ


@pytest.mark.parametrize(
    "bad", [{"n": 0}, {"n_countries": 1}, {"overconfidence": 0.0}, {"country_scale": -1.0}]
)
def test_bad_arguments_raise(bad):
    kwargs = {"n": 10, **bad}
    with pytest.raises(ValueError, match=next(iter(bad))):
        simulate_segments(kwargs.pop("n"), key=jax.random.key(0), **kwargs)


def test_key_is_required_to_be_a_key():
    with pytest.raises(ValueError, match="key"):
        simulate_segments(10, key=3)
