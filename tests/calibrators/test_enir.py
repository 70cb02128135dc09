"""ENIR / near-isotonic path: KKT certificates and scipy on the near-isotonic objective at
fixed lambdas, the isotonic limit against scikit-learn, and the BIC ensemble against a
direct list-based implementation of the modified PAV path (Tibshirani et al. 2011)."""

from __future__ import annotations

import warnings

import jax
import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.calibrators.enir import FittedENIR, near_isotonic_regression

KKT_TOL = 1e-9
EXACT = 1e-9


def _objective(b, y, w, lam):
    return 0.5 * np.sum(w * (y - b) ** 2) + lam * np.sum(np.maximum(b[:-1] - b[1:], 0))


def _kkt_residual(b, y, w, lam):
    """Stationarity w_i (b_i - y_i) + lam (g_i - g_{i-1}) = 0 with g_i in the subdifferential
    of (b_i - b_{i+1})_+ (1 if b_i > b_{i+1}, 0 if <, [0, 1] if equal), g_0 = g_n = 0.
    Returns the largest violation (0 for the exact minimiser)."""
    g = np.cumsum(-w * (b - y)) / lam  # g_i for i = 1..n (g_n must be 0)
    worst = abs(g[-1])
    for i in range(b.size - 1):
        if b[i] > b[i + 1] + 1e-12:
            worst = max(worst, abs(g[i] - 1))
        elif b[i] < b[i + 1] - 1e-12:
            worst = max(worst, abs(g[i]))
        else:
            worst = max(worst, -g[i], g[i] - 1)
    return worst


def _scipy(y, w, lam):
    n = y.size
    A = np.zeros((n - 1, 2 * n - 1))
    for i in range(n - 1):
        A[i, i], A[i, i + 1], A[i, n + i] = -1, 1, 1
    res = minimize(
        lambda z: 0.5 * np.sum(w * (y - z[:n]) ** 2) + lam * z[n:].sum(),
        np.r_[y, np.maximum(y[:-1] - y[1:], 0)],
        jac=lambda z: np.r_[-w * (y - z[:n]), lam * np.ones(n - 1)],
        constraints=[{"type": "ineq", "fun": lambda z: A @ z, "jac": lambda z: A}],
        bounds=[(None, None)] * n + [(0, None)] * (n - 1),
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    return res.x[:n]


def test_path_is_optimal_at_several_lambdas():
    rng = np.random.default_rng(0)
    for _ in range(6):
        n = 7
        y = rng.normal(size=n)
        w = rng.uniform(0.5, 2.0, n)
        for lam in (0.05, 0.3, 1.0, 3.0):
            b = np.asarray(near_isotonic_regression(y, lam=lam, sample_weight=w))
            assert _kkt_residual(b, y, w, lam) < KKT_TOL
            ref = _scipy(y, w, lam)
            # never worse than a general-purpose solver; strong convexity then bounds the gap
            assert _objective(b, y, w, lam) <= _objective(ref, y, w, lam) + 1e-12
            np.testing.assert_allclose(b, ref, atol=1e-4)


def test_endpoints_of_path():
    rng = np.random.default_rng(1)
    y = rng.normal(size=12)
    w = rng.uniform(0.5, 2.0, 12)
    np.testing.assert_allclose(near_isotonic_regression(y, lam=0.0, sample_weight=w), y)
    iso = IsotonicRegression().fit(np.arange(12), y, sample_weight=w).predict(np.arange(12))
    np.testing.assert_allclose(
        near_isotonic_regression(y, lam=np.inf, sample_weight=w), iso, atol=EXACT
    )


def _direct_enir(s, y, eps):
    """List-based modified PAV path + BIC averaging (one group object per fused block)."""
    xs, inv = np.unique(s, return_inverse=True)
    W = np.bincount(inv).astype(float)
    m = np.bincount(inv, y)
    groups = [[W[i], m[i] / W[i], m[i], W[i] - m[i], [i]] for i in range(xs.size)]
    lam, models = 0.0, []
    while True:
        vals = [g[1] for g in groups]
        k = len(groups)
        slopes = []
        for i in range(k):
            up = i > 0 and vals[i - 1] > vals[i]
            down = i < k - 1 and vals[i] > vals[i + 1]
            slopes.append((float(up) - float(down)) / groups[i][0])
        ts = []
        for i in range(k - 1):
            den = slopes[i + 1] - slopes[i]
            if vals[i] == vals[i + 1]:  # equal neighbours fuse at once
                ts.append(0.0)
                continue
            t = (vals[i] - vals[i + 1]) / den if den != 0 else np.inf
            ts.append(t if t > 0 else np.inf)
        d = min(ts, default=np.inf)
        if d > 0 and (lam > 0 or d == np.inf):
            fit = np.empty(xs.size)
            ll = 0.0
            for g in groups:
                fit[g[4]] = g[1]
                p = min(max(g[1], eps), 1 - eps)
                ll += g[2] * np.log(p) + g[3] * np.log(1 - p)
            models.append((ll - 0.5 * len(groups) * np.log(s.size), fit))
        if d == np.inf:
            break
        for i, g in enumerate(groups):
            g[1] += slopes[i] * d
        lam += d
        merged = [groups[0]]
        for i in range(1, k):
            if ts[i - 1] <= d * (1 + 1e-12) + 1e-15:
                a, b = merged[-1], groups[i]
                merged[-1] = [a[0] + b[0], (a[0] * a[1] + b[0] * b[1]) / (a[0] + b[0]),
                              a[2] + b[2], a[3] + b[3], a[4] + b[4]]  # fmt: skip
            else:
                merged.append(groups[i])
        groups = merged
    lw = np.array([mm[0] for mm in models])
    wt = np.exp(lw - lw.max())
    wt /= wt.sum()
    return xs, sum(wi * mm[1] for wi, mm in zip(wt, models, strict=True)), len(models)


def test_enir_matches_direct_path_average():
    rng = np.random.default_rng(2)
    s = rng.uniform(size=150)
    y = (rng.uniform(size=150) < s).astype(float)
    cal = jaxcal.ENIR().fit(s, y)
    xs, avg, n_models = _direct_enir(s, y, 1e-3)
    assert int(cal.n_models) == n_models
    np.testing.assert_allclose(np.asarray(cal.knots_x), xs)
    np.testing.assert_allclose(np.asarray(cal.knots_y), np.clip(avg, 0, 1), atol=EXACT)
    q = rng.uniform(-0.1, 1.1, 50)
    np.testing.assert_allclose(np.asarray(cal.predict(q)), np.interp(q, xs, avg), atol=EXACT)


def test_save_load_jit(tmp_path):
    rng = np.random.default_rng(3)
    s = rng.normal(size=60)
    y = (s + rng.normal(size=60) > 0).astype(int)
    cal = jaxcal.ENIR().fit(s, y)
    cal.save(tmp_path / "enir.npz")
    back = jaxcal.load(tmp_path / "enir.npz")
    assert isinstance(back, FittedENIR) and int(back.n_models) == int(cal.n_models)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda c, x: c.predict(x))(back, s)), np.asarray(cal.predict(s))
    )


def test_bad_inputs():
    with pytest.raises(ValueError, match="eps"):
        jaxcal.ENIR(eps=0.0).fit([0.1, 0.2], [0, 1])
    with pytest.raises(ValueError, match="one class"):
        jaxcal.ENIR().fit([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="lam"):
        near_isotonic_regression([0.1, 0.2], lam=-1.0)
    with pytest.raises(ValueError, match="non-finite"):
        near_isotonic_regression([0.1, np.nan], lam=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        near_isotonic_regression([0.3], lam=1.0)  # a single point is fine
