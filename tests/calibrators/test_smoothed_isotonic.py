"""SIR against a direct NumPy + scikit-learn computation; the downsampling correction
against Bayes' rule and a simulation."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression
from test_isotonic_centered import cir_oracle

import jaxcal
from jaxcal.calibrators.smoothed_isotonic import FittedSmoothedIsotonic

TOL = 1e-10


def _buckets(s, y, w, B):
    """Each non-empty equal-frequency bucket's weighted mean score, mean target and weight."""
    ss = np.sort(s)
    n = s.size
    edges = np.array([ss[(k * n) // B] for k in range(1, B)])
    b = np.searchsorted(edges, s, side="right")
    xs, ts, ws = [], [], []
    for j in range(B):
        m = b == j
        if m.any():
            xs.append(np.sum(w[m] * s[m]) / w[m].sum())
            ts.append(np.sum(w[m] * y[m]) / w[m].sum())
            ws.append(w[m].sum())
    return np.array(xs), np.array(ts), np.array(ws)


def _direct_sir(s, y, w, B):
    xs, ts, ws = _buckets(s, y, w, B)
    v = (
        IsotonicRegression()
        .fit(np.arange(len(xs)), ts, sample_weight=ws)
        .predict(np.arange(len(xs)))
    )
    return lambda q: np.interp(q, xs, np.clip(v, 0, 1))


def test_matches_direct():
    rng = np.random.default_rng(0)
    s = np.r_[rng.normal(size=300), np.zeros(30)]
    y = (rng.uniform(size=s.size) < 1 / (1 + np.exp(-1.5 * s))).astype(float)
    w = rng.uniform(0.2, 2.0, s.size)
    cal = jaxcal.SmoothedIsotonic(n_buckets=20).fit(s, y, sample_weight=w)
    q = np.r_[s, np.linspace(-5, 5, 101)]
    np.testing.assert_allclose(np.asarray(cal.predict(q)), _direct_sir(s, y, w, 20)(q), atol=TOL)


def test_decreasing_mirrors_increasing():
    rng = np.random.default_rng(1)
    s = rng.normal(size=200)
    y = (rng.uniform(size=200) < 1 / (1 + np.exp(s))).astype(float)
    dec = jaxcal.SmoothedIsotonic(n_buckets=15, increasing=False).fit(s, y)
    q = np.linspace(-3, 3, 41)
    assert np.all(np.diff(np.asarray(dec.predict(q))) <= 1e-15)


def test_centered_strictly_monotone_and_more_distinct_values():
    rng = np.random.default_rng(2)
    s = rng.normal(size=600)
    y = (rng.uniform(size=600) < 1 / (1 + np.exp(-s))).astype(float)
    plain = jaxcal.SmoothedIsotonic(n_buckets=60).fit(s, y)
    cir = jaxcal.SmoothedIsotonic(n_buckets=60, centered=True).fit(s, y)
    kx, ky = np.asarray(cir.knots_x), np.asarray(cir.knots_y)
    a, b = kx[ky == ky[0]].max(), kx[ky == ky[-1]].min()  # the ends of the flat stretches
    q = np.sort(s[(s > a) & (s < b)])
    assert np.all(np.diff(np.asarray(cir.predict(q))) > 0)
    assert np.unique(np.asarray(cir.predict(s))).size >= np.unique(plain.predict(s)).size


@pytest.mark.parametrize("increasing", [True, False])
def test_centered_is_cir_of_the_buckets(increasing):
    """CIR on the buckets: the definition's loop (``cir_oracle``) on the buckets' weighted
    mean scores, mean targets and weights, then clipped to [0, 1]."""
    rng = np.random.default_rng(5)
    sign = 1.0 if increasing else -1.0
    s = np.r_[np.round(rng.normal(size=300), 1), np.zeros(20)]
    y = (rng.uniform(size=s.size) < 1 / (1 + np.exp(-2 * sign * s))).astype(float)
    w = rng.uniform(0.2, 2.0, s.size)
    cal = jaxcal.SmoothedIsotonic(n_buckets=25, increasing=increasing, centered=True)
    fitted = cal.fit(s, y, sample_weight=w)
    px, py = cir_oracle(*_buckets(sign * s, y, w, 25))
    q = np.r_[s, np.linspace(-5, 5, 101)]
    ref = np.interp(sign * q, px, np.clip(py, 0, 1))
    np.testing.assert_allclose(np.asarray(fitted.predict(q)), ref, atol=TOL)


def test_save_load_jit(tmp_path):
    rng = np.random.default_rng(3)
    s = rng.normal(size=100)
    y = (s > 0).astype(int)
    cal = jaxcal.SmoothedIsotonic(n_buckets=10).fit(s, y)
    cal.save(tmp_path / "sir.npz")
    back = jaxcal.load(tmp_path / "sir.npz")
    assert isinstance(back, FittedSmoothedIsotonic)
    np.testing.assert_array_equal(np.asarray(back.knots_x), np.asarray(cal.knots_x))
    np.testing.assert_array_equal(np.asarray(back.knots_y), np.asarray(cal.knots_y))
    np.testing.assert_array_equal(np.asarray(back.predict(s)), np.asarray(cal.predict(s)))
    # inside a user's jit: XLA's default options may fuse the interpolation's a * b + c
    # into one multiply-add, which jaxcal's own program does not (1 ulp apart)
    np.testing.assert_allclose(
        np.asarray(jax.jit(lambda c, x: c.predict(x))(back, s)), np.asarray(cal.predict(s)),
        rtol=4 * np.finfo(float).eps, atol=0,
    )  # fmt: skip


def test_negative_downsampling_correction_inverts_bayes_rule():
    p = np.linspace(0.0, 1.0, 101)
    for rate in (1.0, 0.5, 0.01):
        # Bayes' rule: keeping negatives with probability `rate` gives p' = p / (p + (1-p) rate)
        downsampled = p / (p + (1 - p) * rate)
        back = np.asarray(jaxcal.negative_downsampling_correction(downsampled, rate))
        np.testing.assert_allclose(back, p, atol=1e-12)
    assert float(jaxcal.negative_downsampling_correction(0.5, 0.1)) == pytest.approx(1 / 11)


def test_negative_downsampling_correction_simulation():
    rng = np.random.default_rng(4)
    n, p, rate = 400_000, 0.03, 0.1
    y = rng.uniform(size=n) < p
    kept = y | (rng.uniform(size=n) < rate)
    observed = y[kept].mean()
    q = float(jaxcal.negative_downsampling_correction(observed, rate))
    se = np.sqrt(p * (1 - p) / n) * 4  # generous: the estimate's sd is about sqrt(p/n)
    assert abs(q - p) < 5 * se


@pytest.mark.parametrize(("probs", "rate", "match"), [([1.2], 0.5, "probs"), ([0.2], 0.0, "rate")])
def test_correction_bad_inputs(probs, rate, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.negative_downsampling_correction(probs, rate)


@pytest.mark.parametrize(
    ("hyper", "match"),
    [
        ({"n_buckets": 0}, "n_buckets"),
        ({"n_buckets": 2.0}, "n_buckets"),
        ({"increasing": "yes"}, "increasing"),
        ({"centered": None}, "centered"),
    ],
)
def test_bad_hyper_raises_when_made(hyper, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.SmoothedIsotonic(**hyper)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fitted_leaves_have_the_scores_dtype(dtype):
    """float32 scores give float32 knots (x64 is on in the tests), float64 float64; the
    float32 knots are the float64 fit's rounded (bucket means of float32 scores)."""
    rng = np.random.default_rng(16)
    s = rng.normal(size=500)
    y = (rng.uniform(size=500) < 1 / (1 + np.exp(-s))).astype(int)
    s = s.astype(dtype)
    for centered in (False, True):
        cal = jaxcal.SmoothedIsotonic(n_buckets=20, centered=centered)
        fitted = cal.fit(s, y)
        floats = {a.dtype for a in jax.tree.leaves(fitted) if a.dtype.kind == "f"}
        assert floats == {np.dtype(dtype)}
        ref = cal.fit(s.astype(np.float64), y)
        tol = 1e-6 if dtype == np.float32 else 0  # float32 bucket sums
        np.testing.assert_allclose(np.asarray(fitted.knots_x), ref.knots_x, rtol=tol, atol=tol)
        np.testing.assert_allclose(np.asarray(fitted.knots_y), ref.knots_y, rtol=tol, atol=tol)
        assert fitted.predict(s.astype(np.float64)).dtype == dtype
