"""Calibration tests: SKCE (unbiased and linear estimators) and Spiegelhalter's z. Oracles:
direct O(n^2) double sums in NumPy of the general kernel calibration error with the tensor
kernel k(p, p') * delta(y, y') (its four expectation terms written out); the closed-form
normal distribution (scipy); simulations with known calibrated probabilities, whose
p-values must be close to uniform, and miscalibrated ones, which must be rejected."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from jaxcal.metrics import skce, spiegelhalter_z

EXACT = 1e-12
# Uniformity checks: a Kolmogorov-Smirnov test of the simulated p-values must not reject
# uniformity at this level (fixed seeds; a correct test fails it with probability 1e-3).
KS_LEVEL = 1e-3


def _k(a, b, bandwidth, kernel):
    d = a - b  # broadcast: [n, 1] - [1, n] for the matrix, pairs elementwise
    if kernel == "laplace":
        return np.exp(-np.abs(d) / bandwidth)
    return np.exp(-0.5 * (d / bandwidth) ** 2)


def _h(pi, yi, pj, yj, bandwidth, kernel):
    """The SKCE kernel term E over (label kernel delta) written out for binary labels."""
    same = (yi == yj).astype(float)
    e_left = pi * yj + (1 - pi) * (1 - yj)  # E_{z ~ p_i} delta(z, y_j)
    e_right = pj * yi + (1 - pj) * (1 - yi)
    e_both = pi * pj + (1 - pi) * (1 - pj)
    return _k(pi, pj, bandwidth, kernel) * (same - e_left - e_right + e_both)


def _unbiased_oracle(p, y, bandwidth, kernel):
    n = p.size
    h = _h(p[:, None], y[:, None], p[None, :], y[None, :], bandwidth, kernel)
    return (h.sum() - np.trace(h)) / (n * (n - 1))


def _calibrated(rng, n):
    p = rng.uniform(size=n)
    return p, (rng.uniform(size=n) < p).astype(float)


@pytest.mark.parametrize("kernel", ["laplace", "gaussian"])
def test_skce_estimators_equal_direct_double_sums(kernel):
    rng = np.random.default_rng(0)
    for n in (2, 7, 300, 301):
        p, y = _calibrated(rng, n)
        y[: n // 3] = 1 - y[: n // 3]  # some miscalibration
        bw = 0.3
        got = skce(p, y, kernel=kernel, bandwidth=bw, n_resamples=0)
        np.testing.assert_allclose(float(got.statistic), _unbiased_oracle(p, y, bw, kernel),
                                   rtol=1e-10, atol=EXACT)  # fmt: skip
        assert np.isnan(float(got.p_value))
        if n >= 4:
            m = n // 2
            h = _h(p[: 2 * m : 2], y[: 2 * m : 2], p[1 : 2 * m : 2], y[1 : 2 * m : 2], bw, kernel)
            lin = skce(p, y, estimator="linear", kernel=kernel, bandwidth=bw)
            np.testing.assert_allclose(float(lin.statistic), h.mean(), rtol=1e-10, atol=EXACT)
            z = np.sqrt(m) * h.mean() / h.std(ddof=1)
            np.testing.assert_allclose(float(lin.p_value), stats.norm.sf(z), rtol=1e-9)


def test_default_bandwidth_is_the_median_heuristic():
    rng = np.random.default_rng(1)
    p, y = _calibrated(rng, 101)
    bw = np.median(np.abs(p[:100:2] - p[1:100:2]))
    for est in ("unbiased", "linear"):
        a = skce(p, y, estimator=est, n_resamples=0)
        b = skce(p, y, estimator=est, bandwidth=bw, n_resamples=0)
        assert float(a.statistic) == float(b.statistic)


def test_unbiased_p_value_is_the_rank_among_the_resampled_statistics():
    """The Monte Carlo p-value: the same Bernoulli draws, scored by the NumPy oracle."""
    rng = np.random.default_rng(2)
    p, y = _calibrated(rng, 60)
    key, b, bw = jax.random.key(3), 30, 0.25
    got = skce(p, y, bandwidth=bw, key=key, n_resamples=b)
    pp = np.r_[p, np.full(256 - 60, 0.5)]  # the padded draw of the implementation
    draws = np.asarray(jax.random.bernoulli(key, pp, (b, 256)), float)[:, :60]
    observed = _unbiased_oracle(p, y, bw, "laplace")
    null = np.array([_unbiased_oracle(p, d, bw, "laplace") for d in draws])
    np.testing.assert_allclose(float(got.statistic), observed, rtol=1e-10, atol=EXACT)
    assert float(got.p_value) == pytest.approx((1 + np.sum(null >= observed)) / (1 + b))


def test_p_values_are_uniform_under_calibration():
    """Calibrated data (y ~ Bernoulli(p) with the p given): the p-values of the linear SKCE
    (n = 2000, 200 draws), of Spiegelhalter's z (n = 2000, 200 draws) and of the unbiased
    SKCE (n = 80, 99 resamples, 60 draws) do not fail a KS test of uniformity."""
    rng = np.random.default_rng(4)
    lin, spieg, unb = [], [], []
    for rep in range(200):
        p, y = _calibrated(rng, 2000)
        lin.append(float(skce(p, y, estimator="linear").p_value))
        spieg.append(float(spiegelhalter_z(p, y).p_value))
        if rep < 60:
            q, z = _calibrated(rng, 80)
            unb.append(float(skce(q, z, key=jax.random.key(rep), n_resamples=99).p_value))
    for values in (lin, spieg, unb):
        assert stats.kstest(values, "uniform").pvalue > KS_LEVEL


def test_miscalibration_is_rejected():
    """Overconfident probabilities are rejected at the 1% level in at least 18 of 20 draws:
    true rate p^2 for the stated p (SKCE: linear at n = 50,000, unbiased at n = 400), and
    probabilities too extreme, true logit half the stated one (Spiegelhalter at n = 2000;
    its statistic has no power against p^2, whose bias (p^2 - p)(1 - 2p) cancels between
    p and 1 - p)."""
    rng = np.random.default_rng(5)
    rejected = np.zeros(3)
    for rep in range(20):
        p = rng.uniform(0.001, 0.999, size=50_000)
        y = (rng.uniform(size=p.size) < p**2).astype(float)
        soft = 1 / (1 + np.sqrt((1 - p[:2000]) / p[:2000]))  # logit halved
        y_soft = (rng.uniform(size=2000) < soft).astype(float)
        rejected += [
            float(skce(p, y, estimator="linear").p_value) < 0.01,
            float(skce(p[:400], y[:400], key=jax.random.key(rep), n_resamples=200).p_value) < 0.01,
            float(spiegelhalter_z(p[:2000], y_soft).p_value) < 0.01,
        ]
    assert np.all(rejected >= 18), rejected


def test_spiegelhalter_equals_the_formula():
    rng = np.random.default_rng(6)
    p, y = _calibrated(rng, 500)
    z = np.sum((y - p) * (1 - 2 * p)) / np.sqrt(np.sum((1 - 2 * p) ** 2 * p * (1 - p)))
    got = spiegelhalter_z(p, y)
    np.testing.assert_allclose(float(got.statistic), z, rtol=1e-12)
    np.testing.assert_allclose(float(got.p_value), 2 * stats.norm.sf(abs(z)), rtol=1e-10)


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p, y: skce(p, y, estimator="quadratic"), "estimator"),
        (lambda p, y: skce(p, y, kernel="rbf"), "kernel"),
        (lambda p, y: skce(p, y, bandwidth=0.0, n_resamples=0), "bandwidth"),
        (lambda p, y: skce(p, y), "key"),
        (lambda p, y: skce(p[:3], y[:3], estimator="linear"), "n = 3"),
        (lambda p, y: skce(p, y, n_resamples=1.5), "n_resamples"),
        (lambda p, y: spiegelhalter_z(np.array([0.0, 0.5, 1.0, 0.5]), y), "undefined"),
        (lambda p, y: spiegelhalter_z(p, y[:3]), "length"),
    ],
)
def test_invalid_inputs_raise(call, match):
    p, y = np.array([0.2, 0.4, 0.7, 0.9]), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match=match):
        call(p, y)
