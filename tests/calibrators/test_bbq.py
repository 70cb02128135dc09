"""BBQ: the BDeu scores and the averaged prediction against a direct NumPy / scipy.special
computation (explicit per-model loops, ``gammaln``, normalisation in float64), and the
invariance of the ``"rank"`` prior to strictly increasing transforms of the scores."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import gammaln, logsumexp

import jaxcal
from jaxcal.calibrators.bbq import FittedBBQ, bbq_bin_counts, log_gamma

TOL = 1e-9


def _direct(s, y, w, c=10.0, ess=2.0, scale="probability"):
    """Direct BBQ: loop over models and bins; returns (log_ml [M], predict function).
    ``scale``: the prior means (bin midpoints, their sigmoid, or the base rate)."""
    logit = scale != "probability"
    rate = np.sum(w * y) / np.sum(w)
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
            if scale != "probability":
                p = rate if scale == "rank" else 0.5 * (1 + np.tanh(p / 2))  # sigmoid
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


@pytest.mark.parametrize(
    ("hyper", "scale"),
    [({}, "probability"), ({}, "rank"), ({"score_scale": "logit"}, "logit")],
)
def test_scores_and_prediction_match_direct_gammaln(hyper, scale):
    """``"auto"`` reads scores in [0, 1] as probabilities and others by rank; ``"logit"``
    reads them as logits."""
    rng = np.random.default_rng(0)
    n = 300
    p = rng.uniform(size=n)
    y = (rng.uniform(size=n) < p**2).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    s = p if scale == "probability" else np.log(p / (1 - p))
    s[:20] = s[0]  # ties
    cal = jaxcal.BBQ(**hyper).fit(s, y, sample_weight=w)
    log_ml, predict = _direct(s, y, w, scale=scale)
    assert cal.score_scale == scale
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
    assert isinstance(back, FittedBBQ) and back.score_scale == cal.score_scale
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


def _transforms():
    """Strictly increasing maps of the scores: scales far beyond 1 and far below it, and
    large offsets (each checked below to keep the order and the ties of the scores)."""
    return {
        "x1e20": lambda x: x * 1e20,
        "x1e-20": lambda x: x * 1e-20,
        "x1e300": lambda x: x * 1e300,
        "+1e6": lambda x: x + 1e6,
        "-1e9": lambda x: x - 1e9,
        "cube": lambda x: x**3,
    }


def _resolved(x, f):
    """Whether ``f`` keeps the order and the ties of the points ``x`` in float64."""
    order = np.argsort(x, kind="stable")
    a, b = x[order], f(x[order])
    return np.all(np.isfinite(b)) and np.array_equal(np.diff(a) > 0, np.diff(b) > 0)


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(5, 400),
    spread=st.floats(1e-3, 1e3),
    shift=st.floats(-10.0, 10.0),
    weighted=st.booleans(),
)
def test_rank_prior_fit_is_invariant_to_increasing_transforms(seed, n, spread, shift, weighted):
    """Scores outside [0, 1] (``"auto"`` -> ``"rank"``): a fit on ``f(s)`` predicts at
    ``f(x)`` exactly what the fit on ``s`` predicts at ``x``, for the training scores and
    points between and beyond them, whenever float64 resolves ``f`` on those points. The
    oracle of the numbers themselves is the direct computation (``_direct``)."""
    rng = np.random.default_rng(seed)
    s = shift + spread * rng.normal(size=n)
    s[: n // 4] = s[0]  # ties
    s[0] = -spread  # a negative score: neither s nor f(s) is read as probabilities
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(s - shift) / spread))).astype(float)
    y[:2] = [0.0, 1.0]
    w = rng.uniform(0.2, 3.0, n) if weighted else np.ones(n)
    u = np.unique(s)
    x = np.r_[s, 0.5 * (u[1:] + u[:-1]), u[0] - spread, u[-1] + spread]
    base = jaxcal.BBQ().fit(s, y, sample_weight=w)
    assert base.score_scale == "rank"
    ref = np.asarray(base.predict(x))
    _, predict = _direct(s, y, w, scale="rank")
    np.testing.assert_allclose(ref, predict(x), rtol=TOL, atol=TOL)
    for name, f in _transforms().items():
        if not _resolved(np.r_[s, x], f):
            continue
        got = np.asarray(jaxcal.BBQ().fit(f(s), y, sample_weight=w).predict(f(x)))
        np.testing.assert_array_equal(got, ref, err_msg=name)


def test_logit_prior_reads_the_units_of_the_scores():
    """The contrast: with ``score_scale="logit"`` the prior means are sigmoid(bin mid), so
    doubling logits changes the fit (by the direct computation's amount)."""
    rng = np.random.default_rng(4)
    s = rng.normal(size=60)
    y = (rng.uniform(size=60) < 1 / (1 + np.exp(-s))).astype(float)
    cal = jaxcal.BBQ(score_scale="logit")
    p1, p2 = (np.asarray(cal.fit(k * s, y).predict(k * s)) for k in (1.0, 2.0))
    d1, d2 = (_direct(k * s, y, np.ones(60), scale="logit")[1](k * s) for k in (1.0, 2.0))
    np.testing.assert_allclose(p1, d1, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(p2, d2, rtol=TOL, atol=TOL)
    assert np.max(np.abs(p1 - p2)) > 1e-3


@pytest.mark.parametrize("scale", ["auto", "rank"])
def test_rank_prior_inside_jit_is_the_eager_fit(scale):
    """The pure fit (inside ``jit``) chooses the rank prior in the program for ``"auto"``
    (its static ``score_scale`` then reads ``"auto"``) and predicts the eager fit's numbers."""
    rng = np.random.default_rng(6)
    s = rng.normal(size=120)
    y = (rng.uniform(size=120) < 1 / (1 + np.exp(-s))).astype(float)
    q = np.linspace(-3, 3, 25)
    cal = jaxcal.BBQ(score_scale=scale)
    eager = np.asarray(cal.fit(s, y).predict(q))
    fitted = jax.jit(lambda s, y: cal.fit(s, y))(s, y)
    assert fitted.score_scale == scale
    np.testing.assert_allclose(np.asarray(fitted.predict(q)), eager, rtol=0, atol=1e-12)
