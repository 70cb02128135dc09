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


# ------------------------------------------------------------------- sample weights


def _ips_weights(rng, n, zeros=0.0):
    """Inverse propensities in [1, 5], a fraction ``zeros`` of them 0."""
    w = 1 / rng.uniform(0.2, 1.0, n)
    w[rng.uniform(size=n) < zeros] = 0.0
    return w


def _weighted_linear_oracle(p, y, w, bandwidth, kernel):
    """Pairs of the positive-weight points in order, pair weights w_a w_b, the ratio
    estimator and its normal p-value with the sandwich variance (plain NumPy)."""
    keep = w > 0
    p, y, w = p[keep], y[keep], w[keep]
    m = p.size // 2
    a, b = slice(0, 2 * m, 2), slice(1, 2 * m, 2)
    h = _h(p[a], y[a], p[b], y[b], bandwidth, kernel)
    omega = w[a] * w[b]
    mean = np.sum(omega * h) / omega.sum()
    var = m / (m - 1) * np.sum(omega**2 * (h - mean) ** 2) / omega.sum() ** 2
    return mean, stats.norm.sf(mean / np.sqrt(var))


def _weighted_z(p, y, w):
    """Weighted Spiegelhalter z of each row of ``y`` (the formula, vectorised)."""
    num = ((y - p) * (1 - 2 * p)) @ w
    return num / np.sqrt(np.sum(w**2 * (1 - 2 * p) ** 2 * p * (1 - p)))


@pytest.mark.parametrize("kernel", ["laplace", "gaussian"])
def test_weighted_statistics_equal_direct_sums(kernel):
    rng = np.random.default_rng(10)
    for n in (5, 9, 300):
        p, y = _calibrated(rng, n)
        y[: n // 3] = 1 - y[: n // 3]
        w = _ips_weights(rng, n, zeros=0.2)
        w[:4] = [1.0, 2.0, 3.0, 4.0]  # at least four positive weights
        bw = 0.3
        h = _h(p[:, None], y[:, None], p[None, :], y[None, :], bw, kernel)
        ww = np.outer(w, w)
        np.fill_diagonal(ww, 0.0)
        got = skce(p, y, kernel=kernel, bandwidth=bw, n_resamples=0, sample_weight=w)
        np.testing.assert_allclose(float(got.statistic), np.sum(ww * h) / ww.sum(),
                                   rtol=1e-10, atol=EXACT)  # fmt: skip
        lin = skce(p, y, estimator="linear", kernel=kernel, bandwidth=bw, sample_weight=w)
        mean, p_value = _weighted_linear_oracle(p, y, w, bw, kernel)
        np.testing.assert_allclose(float(lin.statistic), mean, rtol=1e-10, atol=EXACT)
        np.testing.assert_allclose(float(lin.p_value), p_value, rtol=1e-9)
    z = spiegelhalter_z(p, y, sample_weight=w)
    np.testing.assert_allclose(float(z.statistic), _weighted_z(p, y, w), rtol=1e-12)
    np.testing.assert_allclose(float(z.p_value), 2 * stats.norm.sf(abs(float(z.statistic))))


def test_equal_weights_are_the_unweighted_tests_and_zero_weights_absent_points():
    rng = np.random.default_rng(11)
    p, y = _calibrated(rng, 301)
    y[:60] = 1 - y[:60]
    key = jax.random.key(1)
    calls = {
        "unbiased": lambda p, y, **kw: skce(p, y, key=key, n_resamples=50, **kw),
        "linear": lambda p, y, **kw: skce(p, y, estimator="linear", **kw),
        "spiegelhalter": lambda p, y, **kw: spiegelhalter_z(p, y, **kw),
    }
    mask = rng.uniform(size=p.size) < 0.7
    for name, call in calls.items():
        plain = call(p, y)
        equal = call(p, y, sample_weight=np.full(p.size, 3.7))
        np.testing.assert_allclose(np.asarray(equal), np.asarray(plain), rtol=1e-12)
        masked = call(p, y, sample_weight=mask.astype(float))
        subset = call(p[mask], y[mask])
        # the unbiased p-value draws labels for every point (the Monte Carlo sample differs)
        got, want = (np.asarray(t)[: 1 if name == "unbiased" else 2] for t in (masked, subset))
        np.testing.assert_allclose(got, want, rtol=1e-12, err_msg=name)


def test_weighted_unbiased_p_value_resamples_labels_with_the_weights_fixed():
    rng = np.random.default_rng(12)
    p, y = _calibrated(rng, 60)
    w = _ips_weights(rng, 60, zeros=0.1)
    key, b, bw = jax.random.key(13), 30, 0.25
    got = skce(p, y, bandwidth=bw, key=key, n_resamples=b, sample_weight=w)
    pp = np.r_[p, np.full(256 - 60, 0.5)]  # the padded draw of the implementation
    draws = np.asarray(jax.random.bernoulli(key, pp, (b, 256)), float)[:, :60]
    ww = np.outer(w, w)
    np.fill_diagonal(ww, 0.0)

    def stat(labels):
        h = _h(p[:, None], labels[:, None], p[None, :], labels[None, :], bw, "laplace")
        return np.sum(ww * h) / ww.sum()

    observed = stat(y)
    null = np.array([stat(d) for d in draws])
    np.testing.assert_allclose(float(got.statistic), observed, rtol=1e-10, atol=EXACT)
    assert float(got.p_value) == pytest.approx((1 + np.sum(null >= observed)) / (1 + b))


def test_weighted_null_distributions_by_simulation():
    """Calibrated labels, IPS weights in [1, 5] held fixed: the weighted z exceeds 1.96 in
    absolute value in 5% of 20,000 label draws, and the weighted linear SKCE rejects at 5%
    in 5% of 4,000 draws, each within four binomial standard deviations (the statistics of
    the first draws are jaxcal's own, checked against the vectorised formulas)."""
    rng = np.random.default_rng(14)
    n, draws = 400, 20_000
    p = rng.uniform(0.05, 0.95, n)
    w = _ips_weights(rng, n)
    y = (rng.uniform(size=(draws, n)) < p).astype(float)
    z = _weighted_z(p, y, w)
    for row in range(5):
        got = float(spiegelhalter_z(p, y[row], sample_weight=w).statistic)
        assert got == pytest.approx(z[row], rel=1e-12)
    level = np.mean(np.abs(z) > 1.96)
    assert abs(level - 0.05) < 4 * np.sqrt(0.05 * 0.95 / draws), level

    n, draws, bw = 2000, 4000, 0.2
    p = rng.uniform(0.05, 0.95, n)
    w = _ips_weights(rng, n)
    y = (rng.uniform(size=(draws, n)) < p).astype(float)
    a, b = slice(0, n, 2), slice(1, n, 2)
    h = _h(p[a], y[:, a], p[b], y[:, b], bw, "laplace")  # [draws, m]
    omega, m = w[a] * w[b], n // 2
    mean = h @ omega / omega.sum()
    var = m / (m - 1) * ((h - mean[:, None]) ** 2 @ omega**2) / omega.sum() ** 2
    p_values = stats.norm.sf(mean / np.sqrt(var))
    for row in range(3):
        got = skce(p, y[row], estimator="linear", bandwidth=bw, sample_weight=w)
        assert float(got.p_value) == pytest.approx(p_values[row], rel=1e-9)
    level = np.mean(p_values < 0.05)
    assert abs(level - 0.05) < 4 * np.sqrt(0.05 * 0.95 / draws), level


def test_new_weights_and_sizes_in_a_bucket_compile_nothing(compiles):
    rng = np.random.default_rng(15)
    p, y = _calibrated(rng, 300)
    key = jax.random.key(0)
    calls = (
        lambda n, w: skce(p[:n], y[:n], key=key, n_resamples=20, sample_weight=w),
        lambda n, w: skce(p[:n], y[:n], estimator="linear", sample_weight=w),
        lambda n, w: spiegelhalter_z(p[:n], y[:n], sample_weight=w),
    )
    for call in calls:
        call(300, _ips_weights(rng, 300))  # compiles (or loads) the program once
        with compiles() as c:
            call(300, _ips_weights(rng, 300))
            call(290, _ips_weights(rng, 290, zeros=0.1))
            call(300, None)
        assert c.count == 0


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p, y: skce(p, y, n_resamples=0, sample_weight=[1.0, -1.0, 1.0, 1.0]), "non-neg"),
        (lambda p, y: skce(p, y, n_resamples=0, sample_weight=[1.0, 1.0]), "length"),
        (lambda p, y: skce(p, y, n_resamples=0, sample_weight=[0.0, 0.0, 0.0, 2.0]), "weight"),
        (
            lambda p, y: skce(p, y, estimator="linear", sample_weight=[1.0, 1.0, 1.0, 0.0]),
            "positive weight; got n = 3",
        ),
        (lambda p, y: spiegelhalter_z(p, y, sample_weight=[0.0, 0.0, np.nan, 1.0]), "finite"),
        (
            lambda p, y: spiegelhalter_z([0.2, 0.5, 0.7, 0.9], y, sample_weight=[0, 1, 0, 0]),
            "positive weight",
        ),
    ],
)
def test_invalid_weights_raise(call, match):
    p, y = np.array([0.2, 0.4, 0.7, 0.9]), np.array([0, 1, 0, 1])
    with pytest.raises(ValueError, match=match):
        call(p, y)
