"""SplineCalibration as a JAX function: ``fit`` inside ``jit``, ``vmap``, ``jvp`` / ``grad``
and ``jax.export``, against the eager estimator, a loop of eager fits and central finite
differences (float64), and the NaN policy of the pure fit."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from _composition import (
    assert_exports,
    assert_jit_matches_eager,
    assert_nan_policy,
    assert_vmap_matches_loop,
    check_derivative,
    grid_of,
    problem,
    quick_jit,
)

import jaxcal
from jaxcal.calibrators._spline_core import spd_solve
from jaxcal.calibrators.spline import quantile_knots, quantile_knots_pure

# small problems, a short grid of penalties: every (penalty, fold) problem is compiled once
SMALL = {"n_knots": 6, "penalties": (1e-4, 1e-2, 1.0), "n_folds": 3}


def _weights(n, seed=2):
    return np.random.default_rng(seed).uniform(0.5, 1.5, n)


def test_knots_match_the_eager_rule():
    """(The folds are jaxcal.fitting.folds', the same traced and eager:
    tests/fitting/test_folds.py.)"""
    s, y = problem(101, seed=3)
    w = _weights(101)
    order = np.argsort(s, kind="stable")
    w[order[:3]] = 0.0  # zero weights at the low end: the range is over positive weights
    knots, distinct = jax.jit(lambda u, w: quantile_knots_pure(u, w, 9))(s[order], w[order])
    pos = w[order] > 0
    expected = quantile_knots(s[order][pos], w[order][pos], 9, np.float64)
    assert bool(distinct)
    np.testing.assert_array_equal(np.asarray(knots), expected)


def test_spd_solve_is_numpys_solve_under_vmap():
    """The Newton steps' solver (JAX loops, no LAPACK call) against NumPy's LU solve, on a
    batch of random positive definite systems with condition numbers up to 1e8, and NaN
    for a matrix that is not positive definite."""
    rng = np.random.default_rng(5)
    K, B = 12, 6
    Q = np.linalg.qr(rng.normal(size=(B, K, K)))[0]
    eig = np.logspace(0, np.arange(B) * 8 / (B - 1), K, axis=-1)  # row b: condition 10^(8b/5)
    A = Q @ (eig[..., None] * np.swapaxes(Q, 1, 2))
    A = (A + np.swapaxes(A, 1, 2)) / 2
    b = rng.normal(size=(B, K))
    x = np.asarray(jax.jit(jax.vmap(spd_solve))(A, b))
    ref = np.linalg.solve(A, b[..., None])[..., 0]
    # backward stable: the error is the condition number times float64 rounding
    cond = eig[:, -1] / eig[:, 0]
    err = np.linalg.norm(x - ref, axis=1) / np.linalg.norm(ref, axis=1)
    assert np.all(err < 1e-14 * cond), err
    indefinite = np.diag(np.r_[1.0, -1.0, np.ones(K - 2)])
    assert np.isnan(np.asarray(jax.jit(spd_solve)(indefinite, b[0]))).any()


@pytest.mark.parametrize(
    "kw",
    [
        SMALL,
        {**SMALL, "monotone": True},
        {"n_knots": 5, "penalties": (1e-3,)},
    ],
    ids=["cv", "monotone", "one_penalty"],
)
def test_jit_matches_eager(kw):
    s, y = problem(200, seed=0)
    cal = jaxcal.SplineCalibration(**kw)
    assert_jit_matches_eager(cal, s, y, sample_weight=_weights(200))
    fitted = jax.jit(lambda s, y: cal.fit(s, y))(s, y)
    eager = cal.fit(s, y)
    assert float(fitted.penalty) == float(eager.penalty)
    np.testing.assert_allclose(fitted.knots, eager.knots, rtol=1e-12)


def test_jit_matches_eager_on_logit():
    s, y = problem(200, seed=1)
    p = 1 / (1 + np.exp(-s))
    cal = jaxcal.SplineCalibration(on="logit", **SMALL)
    assert_jit_matches_eager(cal, p, y, grid=np.linspace(0.05, 0.95, 11))


def test_vmap_matches_loop():
    problems = [problem(90, seed=k) for k in range(3)]
    S = np.stack([p[0] for p in problems])
    Y = np.stack([p[1] for p in problems])
    assert_vmap_matches_loop(jaxcal.SplineCalibration(**SMALL), S, Y)


@pytest.mark.parametrize("monotone", [False, True])
def test_derivative_in_scores_and_weights(monotone):
    """Predictions of the fitted map as a function of the training scores and weights: the
    coefficients by the KKT derivative at the chosen penalty, the knots (training scores)
    as those scores. (Non-uniform weights: with equal weights the quantile levels fall on
    the steps of the cumulative weight, where the knots jump.)"""
    cal = jaxcal.SplineCalibration(monotone=monotone, **SMALL)
    rng = np.random.default_rng(4)
    s = rng.normal(size=150)
    y = (rng.uniform(size=150) < 1 / (1 + np.exp(-(1.5 * s**2 - 1.0)))).astype(float)
    w = _weights(150)
    fitted = cal.fit(s, y, sample_weight=w)
    if monotone:  # a U-shaped truth: coefficients at their bound (the constrained derivative)
        assert np.any(np.asarray(fitted.theta[1:]) == 0.0)
    grid = grid_of(s, 9)
    rng = np.random.default_rng(5)
    v = (rng.normal(size=150), rng.normal(size=150))
    check_derivative(lambda x: cal.fit(x[0], y, sample_weight=x[1]).predict(grid), (s, w), v)


def test_penalty_choice_carries_no_derivative():
    """The chosen penalty is an argmin over the grid: piecewise constant in the data."""
    cal = jaxcal.SplineCalibration(**SMALL)
    s, y = problem(150, seed=4)
    g = quick_jit(jax.grad(lambda s: cal.fit(s, y).penalty))(s)
    np.testing.assert_array_equal(np.asarray(g), 0.0)


def test_exports():
    s, y = problem(120, seed=6)
    assert_exports(jaxcal.SplineCalibration(**SMALL), s, y)


def test_nan_policy():
    s, y = problem(120, seed=7)
    assert_nan_policy(jaxcal.SplineCalibration(**SMALL), s, y)


def test_nan_policy_spline_specific():
    """Inside ``jit``: fewer distinct quantiles than knots (the eager fit drops repeated
    knots, a shape a trace cannot change) and probabilities outside [0, 1] for
    ``on="logit"`` give NaN."""
    s, y = problem(60, seed=8)
    grid = np.linspace(-1.0, 1.0, 5)
    few = np.round(s)  # a handful of distinct scores for 6 knots
    cal = jaxcal.SplineCalibration(**SMALL)
    out = jax.jit(lambda s, y: cal.fit(s, y).predict(grid))(few, y)
    assert np.all(np.isnan(np.asarray(out)))
    p = 1 / (1 + np.exp(-s))
    p[4] = 1.2
    logit = jaxcal.SplineCalibration(on="logit", **SMALL)
    with pytest.raises(ValueError):
        logit.fit(p, y)
    out = jax.jit(lambda s, y: logit.fit(s, y).predict(np.array([0.3, 0.6])))(p, y)
    assert np.all(np.isnan(np.asarray(out)))
    fitted = logit.fit(1 / (1 + np.exp(-s)), y)
    out = jax.jit(fitted.predict)(np.array([0.5, 1.5, np.nan]))
    assert np.isfinite(out[0]) and np.all(np.isnan(out[1:]))
