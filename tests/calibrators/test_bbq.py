"""BBQ: the BDeu scores and the averaged prediction against a direct NumPy / scipy.special
computation (explicit per-model loops, ``gammaln``, normalisation in float64)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy.special import gammaln, logsumexp

import jaxcal
from jaxcal.calibrators.bbq import FittedBBQ, bbq_bin_counts, log_gamma

TOL = 1e-9


def _direct(s, y, w, c=10.0, ess=2.0, logit=False):
    """Direct BBQ: loop over models and bins; returns (log_ml [M], predict function)."""
    n = s.size
    order = np.argsort(s, kind="stable")
    ss = s[order]
    models = []
    for B in bbq_bin_counts(n, c):
        inner = np.array([ss[(k * n) // B] for k in range(1, B)])
        b = np.searchsorted(inner, s, side="right")
        lo_all, hi_all = (ss[0], ss[-1]) if logit else (0.0, 1.0)
        lo = np.r_[lo_all, inner]
        hi = np.r_[inner, hi_all]
        a0 = ess / B
        total, theta = 0.0, np.empty(B)
        for j in range(B):
            p = 0.5 * (lo[j] + hi[j])
            p = 1 / (1 + np.exp(-p)) if logit else p
            p = min(max(p, 1e-6), 1 - 1e-6)
            N = w[b == j].sum()
            m = min((w * y)[b == j].sum(), N)
            al, be = a0 * p, a0 * (1 - p)
            total += gammaln(a0) - gammaln(N + a0) + gammaln(m + al) - gammaln(al)
            total += gammaln(N - m + be) - gammaln(be)
            theta[j] = (m + al) / (N + a0)
        models.append((inner, theta, total))
    log_ml = np.array([m[2] for m in models])
    wts = np.exp(log_ml - logsumexp(log_ml))

    def predict(q):
        return sum(
            wt * th[np.searchsorted(inner, q, side="right")]
            for wt, (inner, th, _) in zip(wts, models, strict=True)
        )

    return log_ml, predict


def test_ips_counts_clicks_by_inverse_propensity():
    """IPS targets Y / omega count 1/omega clicks in their bin (clipped per bin), so the fit
    equals the direct computation on those counts and differs from the naive fit."""
    rng = np.random.default_rng(3)
    n = 400
    s = rng.uniform(size=n)
    omega = rng.uniform(0.2, 1.0, n)
    y = (rng.uniform(size=n) < 0.3 * s * omega).astype(float)
    ips = jaxcal.BBQ().fit(s, y, propensity=omega, loss="ips")
    naive = jaxcal.BBQ().fit(s, y)
    log_ml, predict = _direct(s, y / omega, np.ones(n))
    np.testing.assert_allclose(np.asarray(ips.log_marginal_likelihood), log_ml, rtol=TOL)
    q = rng.uniform(size=50)
    np.testing.assert_allclose(np.asarray(ips.predict(q)), predict(q), rtol=TOL, atol=TOL)
    assert np.mean(np.asarray(ips.predict(s))) > 1.5 * np.mean(np.asarray(naive.predict(s)))


@pytest.mark.parametrize("logit", [False, True])
def test_scores_and_prediction_match_direct_gammaln(logit):
    rng = np.random.default_rng(0)
    n = 300
    p = rng.uniform(size=n)
    y = (rng.uniform(size=n) < p**2).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    s = np.log(p / (1 - p)) if logit else p
    s[:20] = s[0]  # ties
    cal = jaxcal.BBQ().fit(s, y, sample_weight=w)
    log_ml, predict = _direct(s, y, w, logit=logit)
    assert cal.logit_scale == logit
    np.testing.assert_allclose(np.asarray(cal.log_marginal_likelihood), log_ml, rtol=TOL)
    q = np.r_[s[:50], rng.uniform(s.min() - 1, s.max() + 1, 50)]
    np.testing.assert_allclose(np.asarray(cal.predict(q)), predict(q), rtol=TOL, atol=TOL)


def test_brute_force_marginal_likelihood_by_sequence_enumeration():
    """For one bin, the BDeu marginal likelihood of a label sequence is the Beta-binomial
    sequence probability; summing it over all 2**n sequences must give 1."""
    rng = np.random.default_rng(1)
    s = np.sort(rng.uniform(size=6))
    totals = []
    for bits in range(1, 2**6 - 1):  # both classes present
        y = np.array([(bits >> i) & 1 for i in range(6)], float)
        cal = jaxcal.BBQ(c=1.0).fit(s, y)  # n=6: B from 1 to 2
        one_bin = int(np.flatnonzero(np.asarray(cal.n_bins) == 1)[0])
        totals.append(np.exp(float(cal.log_marginal_likelihood[one_bin])))
    # the two single-class sequences (all 0 / all 1), computed in closed form
    a = 2.0 * 0.5  # ess / B * p with p = 0.5 (bin [0, 1])
    single = np.exp(gammaln(2.0) - gammaln(8.0) + gammaln(6 + a) - gammaln(a))
    assert sum(totals) + 2 * single == pytest.approx(1.0, abs=1e-12)


def test_weights_normalised_and_prediction_bounded():
    rng = np.random.default_rng(2)
    s = rng.normal(size=500)
    y = (rng.uniform(size=500) < 1 / (1 + np.exp(-2 * s))).astype(int)
    cal = jaxcal.BBQ().fit(s, y)
    assert float(jax.nn.logsumexp(cal.log_weight)) == pytest.approx(0.0, abs=1e-12)
    p = np.asarray(cal.predict(np.linspace(-4, 4, 101)))
    assert np.all((p > 0) & (p < 1))
    assert p[-1] > 0.8 and p[0] < 0.2  # follows the true map sigma(2 s)


def test_save_load_and_jit(tmp_path):
    rng = np.random.default_rng(3)
    s = rng.uniform(size=200)
    y = (rng.uniform(size=200) < s).astype(int)
    cal = jaxcal.BBQ().fit(s, y)
    cal.save(tmp_path / "bbq.npz")
    back = jaxcal.load(tmp_path / "bbq.npz")
    assert isinstance(back, FittedBBQ) and back.logit_scale == cal.logit_scale
    for f in ("edges", "theta", "log_marginal_likelihood", "log_weight", "n_bins"):
        np.testing.assert_array_equal(np.asarray(getattr(back, f)), np.asarray(getattr(cal, f)))
    q = rng.uniform(size=30)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda c, x: c.predict(x))(back, q)), np.asarray(cal.predict(q))
    )


@pytest.mark.parametrize(
    ("hyper", "scores", "labels", "match"),
    [
        ({}, [0.1, 0.2], [1, 1], "one class"),
        ({}, [0.1, np.nan], [0, 1], "non-finite"),
        ({"c": 0.5}, [0.1, 0.2], [0, 1], "c must"),
        ({"equivalent_sample_size": 0.0}, [0.1, 0.2], [0, 1], "equivalent_sample_size"),
        ({"score_scale": "probability"}, [0.1, 2.0], [0, 1], "probability"),
        ({"score_scale": "odds"}, [0.1, 0.2], [0, 1], "score_scale"),
    ],
)
def test_bad_inputs(hyper, scores, labels, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.BBQ(**hyper).fit(scores, labels)


def test_log_gamma_matches_scipy_on_positive_arguments():
    """The recurrence + Stirling log-gamma against scipy's, from 1e-10 to 1e6 (relative to
    max(1, |log Gamma|): near its zeros at 1 and 2 the error is absolute), in float64 and
    float32."""
    x = np.concatenate([np.logspace(-10, 6, 4001), np.linspace(0.01, 20.0, 4001)])
    ref = gammaln(x)
    got = np.asarray(jax.jit(log_gamma)(x))
    assert np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1.0)) < 1e-12
    x32 = x.astype(np.float32)
    got32 = np.asarray(jax.jit(log_gamma)(x32))
    assert got32.dtype == np.float32
    ref32 = gammaln(x32.astype(np.float64))
    # float32 arithmetic: a few ulps of the result (XLA's own gammaln is within 2e-6)
    assert np.max(np.abs(got32 - ref32) / np.maximum(np.abs(ref32), 1.0)) < 1e-5
