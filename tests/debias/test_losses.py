"""Loss weightings: IPS is unbiased for the ideal log-loss by exact expectation over all
exposure patterns; the other weightings equal their formulas; stable log-space losses."""

from __future__ import annotations

import itertools

import jax
import numpy as np
import pytest
from scipy import special

from jaxcal.losses import (
    LOSSES,
    check_loss,
    loss_targets_weights,
    weighted_logistic_loss,
)

EXACT = 1e-12  # exact enumeration, float64


def loss_value(z, t, w):
    return float(weighted_logistic_loss(z, t, w))


def expected_loss(loss, z, relevance, omega, v):
    """E_O[L] by enumerating all 2^n exposure patterns O ~ Bernoulli(omega), Y = O R."""
    n = relevance.size
    total = 0.0
    for pattern in itertools.product([0, 1], repeat=n):
        o = np.array(pattern, float)
        prob = np.prod(np.where(o == 1, omega, 1 - omega))
        y = o * relevance
        if loss == "snips" and y.sum() == 0:  # kappa is 0/0: no positives to normalise
            t, w = y, v
        else:
            t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss=loss)
        total += prob * loss_value(z, np.asarray(t), np.asarray(w))
    return total


def ideal_loss(z, relevance, v):
    """sum v [-(R log p + (1 - R) log(1 - p))], p = sigmoid(z), via scipy."""
    p = special.expit(z)
    return float(np.sum(v * -(relevance * np.log(p) + (1 - relevance) * np.log1p(-p))))


@pytest.mark.parametrize("seed", range(4))
def test_ips_loss_is_unbiased_for_the_ideal_loss_by_exact_expectation(seed):
    rng = np.random.default_rng(seed)
    n = 6
    relevance = rng.integers(0, 2, n).astype(float)
    relevance[:2] = [0, 1]
    omega = rng.uniform(0.1, 1.0, n)
    v = rng.uniform(0.5, 2.0, n)
    z = rng.normal(0, 2, n)
    ideal = ideal_loss(z, relevance, v)
    assert abs(expected_loss("ips", z, relevance, omega, v) - ideal) <= EXACT * abs(ideal)
    # the naive and positives-only weightings are biased on the same example
    assert abs(expected_loss("naive", z, relevance, omega, v) - ideal) > 1e-3
    assert abs(expected_loss("ips_positive", z, relevance, omega, v) - ideal) > 1e-3


def test_ips_expected_gradient_equals_ideal_gradient():
    """Unbiasedness carries over to the gradient in z (the loss is linear in the label)."""
    rng = np.random.default_rng(9)
    relevance = np.array([1.0, 0.0, 1.0, 1.0, 0.0])
    omega = rng.uniform(0.2, 1.0, 5)
    z = rng.normal(0, 1, 5)
    expected = np.zeros(5)
    for pattern in itertools.product([0, 1], repeat=5):
        o = np.array(pattern, float)
        prob = np.prod(np.where(o == 1, omega, 1 - omega))
        t, w = loss_targets_weights(o * relevance, propensity=omega, loss="ips")
        expected += prob * np.asarray(jax.grad(weighted_logistic_loss)(z, t, w))
    np.testing.assert_allclose(expected, special.expit(z) - relevance, atol=EXACT)


def test_weightings_equal_their_formulas():
    rng = np.random.default_rng(1)
    y = rng.integers(0, 2, 50).astype(float)
    omega = rng.uniform(0.1, 1.0, 50)
    v = rng.uniform(0.0, 2.0, 50)
    t, w = loss_targets_weights(y, sample_weight=v)
    np.testing.assert_array_equal(np.asarray(t), y)
    np.testing.assert_array_equal(np.asarray(w), v)
    t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss="ips")
    np.testing.assert_allclose(np.asarray(t), y / omega, rtol=EXACT)
    np.testing.assert_allclose(np.asarray(w), v, rtol=EXACT)
    t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss="ips_positive")
    np.testing.assert_array_equal(np.asarray(t), y)
    np.testing.assert_allclose(np.asarray(w), np.where(y == 1, v / omega, v), rtol=EXACT)
    t, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss="snips")
    w = np.asarray(w)
    pos = y == 1
    # positives keep their observed total weight; their relative weights are v / omega
    np.testing.assert_allclose(w[pos].sum(), v[pos].sum(), rtol=EXACT)
    np.testing.assert_allclose(
        w[pos] / (v[pos] / omega[pos]), (w[pos] / (v[pos] / omega[pos]))[0], rtol=1e-10
    )
    np.testing.assert_array_equal(w[~pos], v[~pos])


def test_snips_ignores_zero_weight_padding():
    y = np.array([1.0, 0.0, 1.0, 1.0])
    omega = np.array([0.5, 0.3, 0.25, 0.01])
    v = np.array([1.0, 1.0, 1.0, 0.0])
    _, w = loss_targets_weights(y, propensity=omega, sample_weight=v, loss="snips")
    _, w3 = loss_targets_weights(y[:3], propensity=omega[:3], loss="snips")
    np.testing.assert_allclose(np.asarray(w)[:3], np.asarray(w3), rtol=EXACT)
    assert float(w[3]) == 0.0


def test_weighted_logistic_loss_is_the_cross_entropy_and_stable():
    rng = np.random.default_rng(2)
    z = rng.normal(0, 3, 30)
    t = rng.uniform(0, 1, 30)
    w = rng.uniform(0, 2, 30)
    p = special.expit(z)
    ref = np.sum(w * -(t * np.log(p) + (1 - t) * np.log1p(-p)))
    np.testing.assert_allclose(loss_value(z, t, w), ref, rtol=1e-12)
    big = np.array([800.0, -800.0])
    val = loss_value(big, np.array([1.0, 0.0]), np.ones(2))
    assert np.isfinite(val) and val < 1e-300  # log-space: no overflow, no log(0)
    np.testing.assert_allclose(loss_value(big, np.array([0.0, 1.0]), np.ones(2)), 1600.0)


def test_jit_and_vmap_equal_a_loop():
    rng = np.random.default_rng(3)
    y = rng.integers(0, 2, (4, 20)).astype(float)
    y[:, 0] = 1
    omega = rng.uniform(0.1, 1, (4, 20))
    for loss in LOSSES:
        f = jax.jit(
            jax.vmap(lambda a, b, loss=loss: loss_targets_weights(a, propensity=b, loss=loss))
        )
        tb, wb = f(y, omega)
        for i in range(4):
            t, w = loss_targets_weights(y[i], propensity=omega[i], loss=loss)
            np.testing.assert_allclose(np.asarray(tb[i]), np.asarray(t), rtol=EXACT)
            np.testing.assert_allclose(np.asarray(wb[i]), np.asarray(w), rtol=EXACT)


def test_check_loss_errors():
    with pytest.raises(ValueError, match="loss must be one of"):
        check_loss("ipw", np.ones(3))
    for loss in ("ips", "ips_positive", "snips"):
        with pytest.raises(ValueError, match="needs per-pair propensities"):
            check_loss(loss, None)
    check_loss("naive", None)
    with pytest.raises(ValueError, match="needs propensity"):
        loss_targets_weights(np.ones(3), loss="ips")
    with pytest.raises(ValueError, match="loss must be one of"):
        loss_targets_weights(np.ones(3), propensity=np.ones(3), loss="bogus")
