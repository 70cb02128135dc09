"""Popularity and uniform propensities: closed forms, clipping, errors; with IPS, a uniform
propensity of 1 reproduces the naive fit."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal.debias.propensity import popularity_propensity, uniform_propensity
from jaxcal.losses import loss_targets_weights


def test_popularity_propensity_closed_form():
    counts = np.array([0, 1, 4, 9, 16, 100, 3])
    got = popularity_propensity(counts)
    ref = np.maximum(np.sqrt(counts / 100.0), 0.1)
    np.testing.assert_allclose(got, ref, rtol=1e-15)
    assert got[5] == 1.0 and got[0] == 0.1  # most popular item: 1; unseen: the clip
    got = popularity_propensity(counts, power=1.0, clip=0.05)
    np.testing.assert_allclose(got, np.maximum(counts / 100.0, 0.05), rtol=1e-15)
    got = popularity_propensity(counts.astype(float) * 3.5, power=0.25, clip=1e-3)
    np.testing.assert_allclose(got, np.maximum((counts / 100.0) ** 0.25, 1e-3), rtol=1e-14)


def test_popularity_propensity_bounds_ips_weights_by_one_over_clip():
    rng = np.random.default_rng(0)
    counts = rng.poisson(rng.gamma(0.3, 20.0, 500))
    counts[0] = max(counts.max(), 1)
    omega = popularity_propensity(counts, clip=0.2)
    assert omega.min() >= 0.2 and omega.max() == 1.0
    _, w = loss_targets_weights(np.ones(500), propensity=omega, loss="ips_positive")
    assert float(np.max(np.asarray(w))) <= 5.0 + 1e-12


@pytest.mark.parametrize(
    "counts, kw, match",
    [
        ([1, -2, 3], {}, "non-negative"),
        ([1, np.nan, 3], {}, "finite"),
        ([0, 0, 0], {}, "all zero"),
        ([1, 2], {"clip": 0.0}, "clip"),
        ([1, 2], {"clip": 1.5}, "clip"),
        ([1, 2], {"power": 0.0}, "power"),
        ([], {}, "empty"),
        ([[[1, 2]]], {}, "matrix or"),
    ],
)
def test_popularity_propensity_errors(counts, kw, match):
    with pytest.raises(ValueError, match=match):
        popularity_propensity(np.asarray(counts, float), **kw)


def test_uniform_propensity():
    np.testing.assert_array_equal(uniform_propensity(4), np.ones(4))
    np.testing.assert_array_equal(uniform_propensity(3, 0.25), np.full(3, 0.25))
    for bad in (0.0, -1.0, 1.5):
        with pytest.raises(ValueError, match="value"):
            uniform_propensity(3, bad)
    y = np.array([0.0, 1.0, 1.0])
    for loss in ("ips", "ips_positive", "snips"):
        t, w = loss_targets_weights(y, propensity=uniform_propensity(3), loss=loss)
        np.testing.assert_array_equal(np.asarray(t), y)
        np.testing.assert_array_equal(np.asarray(w), np.ones(3))
