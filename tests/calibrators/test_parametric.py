"""Parametric calibrators (Platt, temperature, beta, Gaussian, Gamma, exponential).

Oracles: scipy SLSQP on the same weighted, L2-penalised, constrained objective (features
and constraints re-derived here in NumPy, not taken from the library); an independent KKT
check; scikit-learn's LogisticRegression; dense-grid monotonicity (hypothesis); looped fits
for batched / grouped fits; exact save / load.

All problems have n = 400 (or [3, 400] batches) so each family compiles once per path.
"""

from __future__ import annotations

import warnings

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from scipy import optimize
from sklearn.linear_model import LogisticRegression

import jaxcal
from jaxcal.calibrators.beta import BetaCalibration
from jaxcal.calibrators.exponential import ExponentialCalibration
from jaxcal.calibrators.gamma import GammaCalibration
from jaxcal.calibrators.gaussian import GaussianCalibration
from jaxcal.calibrators.platt import PlattScaling
from jaxcal.calibrators.temperature import TemperatureScaling
from jaxcal.fitting.linear import _solve_batch_jit, _solve_jit, _solve_native_jit
from jaxcal.fitting.solver import DIVERGED, ConvergenceWarning, SeparableDataWarning

N = 400
OBJ_RTOL = 1e-6  # objective vs scipy (relative)
EXACT_RTOL = 1e-9  # jaxcal (exact Newton) may not be worse than scipy by more than this
KKT_TOL = 1e-6  # stationarity residual relative to the gradient scale; multipliers >= -tol
COEF_TOL = 1e-6  # coefficients vs scikit-learn (lbfgs at tol 1e-12), relative
LOOP_TOL = 1e-10  # batched vs looped (same float64 algorithm, different batching)

FAMILIES = ["platt", "temperature", "beta", "gaussian", "gamma", "exponential"]
ESTIMATORS = {
    "platt": PlattScaling,
    "temperature": TemperatureScaling,
    "beta": BetaCalibration,
    "gaussian": GaussianCalibration,
    "gamma": GammaCalibration,
    "exponential": ExponentialCalibration,
}


# --- independent NumPy re-derivation of each family ------------------------------------


def oracle_design(name, s, lo, hi):
    """Features X (n x p), constraint rows C (k x p), intercept index; from the formulas."""
    r = hi - lo
    if name == "platt":
        return np.column_stack([s, np.ones_like(s)]), np.array([[1.0, 0.0]]), 1
    if name == "temperature":
        return s[:, None], np.array([[1.0]]), None
    if name == "beta":
        m = 0.01
        x = np.clip((s - lo + m * r) / ((1 + 2 * m) * r), 1e-300, 1.0)
        X = np.column_stack([np.log(x), -np.log1p(-x), np.ones_like(s)])
        return X, np.array([[1.0, 0, 0], [0, 1.0, 0]]), 2
    if name == "gaussian":
        X = np.column_stack([s**2, s, np.ones_like(s)])
        return X, np.array([[2 * lo, 1.0, 0], [2 * hi, 1.0, 0]]), 2
    if name == "gamma":
        d = 0.01 * r
        x = s - lo + d
        X = np.column_stack([np.log(x), x, np.ones_like(s)])
        return X, np.array([[1 / d, 1.0, 0], [1 / (r + d), 1.0, 0]]), 2
    if name == "exponential":
        return np.column_stack([s - lo, np.ones_like(s)]), np.array([[1.0, 0.0]]), 1
    raise AssertionError(name)


def objective(theta, X, t, w, l2, icpt):
    z = X @ theta
    pen = np.ones_like(theta)
    if icpt is not None:
        pen[icpt] = 0.0
    return np.sum(w * (np.logaddexp(0.0, z) - t * z)) + 0.5 * l2 * np.sum(pen * theta**2)


def gradient(theta, X, t, w, l2, icpt):
    pen = np.ones_like(theta)
    if icpt is not None:
        pen[icpt] = 0.0
    return X.T @ (w * (1 / (1 + np.exp(-(X @ theta))) - t)) + l2 * pen * theta


def scipy_fit(X, t, w, C, l2, icpt):
    """SLSQP on the same problem, restarted from its own solution until it stops moving."""
    args = (X, t, w, l2, icpt)
    cons = [{"type": "ineq", "fun": lambda th: C @ th, "jac": lambda th: C}]
    x = np.zeros(X.shape[1])
    best = None
    for _ in range(3):
        res = optimize.minimize(
            objective,
            x,
            args=args,
            jac=gradient,
            method="SLSQP",
            constraints=cons,
            options={"ftol": 1e-15, "maxiter": 2000},
        )
        x = res.x
        if best is None or res.fun < best.fun:
            best = res
    return best


def kkt_check(theta, X, t, w, C, l2, icpt):
    """Primal feasibility, stationarity with non-negative multipliers; returns (mu, active)."""
    g = gradient(theta, X, t, w, l2, icpt)
    scale = np.sum(np.abs(X) * w[:, None], axis=0).max()
    slack = C @ theta
    cscale = np.abs(C) @ np.abs(theta) + 1e-300
    assert np.all(slack >= -1e-9 * cscale), slack
    active = slack <= 1e-7 * cscale
    mu = np.zeros(C.shape[0])
    if active.any():
        CA = C[active]
        mu[active] = np.linalg.lstsq(CA.T, g, rcond=None)[0]
    resid = g - C.T @ mu
    assert np.max(np.abs(resid)) <= KKT_TOL * scale, (resid, scale)
    assert np.all(mu >= -KKT_TOL * scale), mu
    return mu, active


# --- data -------------------------------------------------------------------------------


def make_data(kind, seed=0, n=N):
    """Scores, labels, weights. ``free``: increasing truth (interior optimum); ``hump``:
    logit peaking inside the range (Gaussian/Gamma/beta constraints bind); ``anti``:
    decreasing truth (slope constraints bind)."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-2.0, 2.0, n) if kind != "free" else rng.normal(0.0, 1.0, n)
    if kind == "free":
        z = 1.3 * s - 0.4
    elif kind == "hump":
        z = 1.0 - 1.5 * (s - 0.3) ** 2
    else:
        z = -1.2 * s
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(float)
    w = rng.uniform(0.5, 2.0, n)
    return s, y, w


ACTIVE_KIND = {
    "platt": "anti",
    "temperature": "anti",
    "beta": "anti",
    "gaussian": "hump",
    "gamma": "hump",
    "exponential": "anti",
}


@pytest.mark.parametrize("l2", [0.0, 1.0])
@pytest.mark.parametrize("kind", ["free", "active"])
@pytest.mark.parametrize("name", FAMILIES)
def test_constrained_fit_equals_scipy_and_satisfies_kkt(name, kind, l2):
    data_kind = "free" if kind == "free" else ACTIVE_KIND[name]
    s, y, w = make_data(data_kind, seed=FAMILIES.index(name))
    fitted = ESTIMATORS[name](l2=l2).fit(s, y, sample_weight=w)
    assert bool(fitted.status.converged)
    theta = np.asarray(fitted.theta)
    X, C, icpt = oracle_design(name, s, s.min(), s.max())
    ours = objective(theta, X, y, w, l2, icpt)
    ref = scipy_fit(X, y, w, C, l2, icpt)
    assert np.all(C @ ref.x >= -1e-8)
    assert abs(ours - ref.fun) <= OBJ_RTOL * abs(ref.fun)
    assert ours <= ref.fun + EXACT_RTOL * abs(ref.fun)
    np.testing.assert_allclose(float(fitted.status.objective), ours, rtol=1e-9)
    mu, active = kkt_check(theta, X, y, w, C, l2, icpt)
    if kind == "active":  # the data were built so that monotonicity binds
        assert active.any()
    else:
        assert not active.any()
    np.testing.assert_array_equal(np.asarray(fitted.status.active), active)
    scale = np.sum(np.abs(X) * w[:, None], axis=0).max()
    np.testing.assert_allclose(np.asarray(fitted.status.multipliers), mu, atol=1e-6 * scale)


def test_active_constraint_gives_the_constant_map_for_anti_correlated_platt():
    s, y, w = make_data("anti")
    fitted = PlattScaling().fit(s, y, sample_weight=w)
    assert float(fitted.a) == 0.0  # projected exactly onto the active constraint
    base = np.sum(w * y) / np.sum(w)  # the weighted base rate is the optimum of sigma(b)
    np.testing.assert_allclose(np.asarray(fitted.predict(s)), base, rtol=1e-9)


F32_OBJ_RTOL = 1e-5  # float32 fit vs the float64 scipy optimum: float32 sums of 400 terms
F32_PROB_ATOL = 1e-4  # float32 vs float64 predictions


@pytest.mark.parametrize("kind", ["free", "active"])
@pytest.mark.parametrize("name", FAMILIES)
def test_float32_fit_is_the_optimum_to_float32_precision(name, kind):
    """JAX's default precision (x64 off, as in a user's script): float32 parameters whose
    objective (evaluated in float64) is the scipy optimum to float32 precision, feasible,
    and predictions close to the float64 fit's."""
    data_kind = "free" if kind == "free" else ACTIVE_KIND[name]
    s, y, w = make_data(data_kind, seed=FAMILIES.index(name))
    with jax.enable_x64(False):
        fitted = ESTIMATORS[name]().fit(s, y, sample_weight=w)
        p32 = np.asarray(fitted.predict(s))
        assert fitted.theta.dtype == jnp.float32 and p32.dtype == np.float32
        assert bool(fitted.status.converged)
    theta = np.asarray(fitted.theta, np.float64)
    X, C, icpt = oracle_design(name, s, s.min(), s.max())
    ref = scipy_fit(X, y, w, C, 0.0, icpt)
    ours = objective(theta, X, y, w, 0.0, icpt)
    assert abs(ours - ref.fun) <= F32_OBJ_RTOL * abs(ref.fun), (ours, ref.fun)
    assert np.all(C @ theta >= -1e-5 * (np.abs(C) @ np.abs(theta) + 1e-30))
    p64 = np.asarray(ESTIMATORS[name]().fit(s, y, sample_weight=w).predict(s))
    np.testing.assert_allclose(p32, p64, atol=F32_PROB_ATOL)


@pytest.mark.parametrize("l2", [0.0, 2.0])
def test_platt_equals_sklearn_logistic_regression(l2):
    s, y, w = make_data("free", seed=3)
    fitted = PlattScaling(l2=l2).fit(s, y, sample_weight=w)
    C = np.inf if l2 == 0 else 1.0 / l2  # sklearn: C * sum(loss) + ||coef||^2 / 2
    lr = LogisticRegression(C=C, solver="newton-cholesky", tol=1e-14, max_iter=1000).fit(
        s[:, None], y, sample_weight=w
    )
    np.testing.assert_allclose(float(fitted.a), lr.coef_[0, 0], rtol=COEF_TOL)
    np.testing.assert_allclose(float(fitted.b), lr.intercept_[0], rtol=COEF_TOL, atol=COEF_TOL)
    np.testing.assert_allclose(
        np.asarray(fitted.predict(s)), lr.predict_proba(s[:, None])[:, 1], atol=1e-8
    )


def test_gaussian_equals_sklearn_on_quadratic_features():
    s, y, w = make_data("free", seed=4)
    fitted = GaussianCalibration(l2=1.0).fit(s, y, sample_weight=w)
    assert not np.asarray(fitted.status.active).any()
    lr = LogisticRegression(C=1.0, solver="newton-cholesky", tol=1e-14, max_iter=1000)
    lr.fit(np.column_stack([s**2, s]), y, sample_weight=w)
    np.testing.assert_allclose(np.asarray(fitted.theta[:2]), lr.coef_[0], rtol=COEF_TOL)
    np.testing.assert_allclose(float(fitted.c), lr.intercept_[0], rtol=COEF_TOL)


def test_temperature_recovers_known_temperature():
    rng = np.random.default_rng(5)
    logits = rng.normal(0.0, 3.0, 20 * N)
    y = rng.uniform(size=logits.size) < 1 / (1 + np.exp(-logits / 2.0))
    fitted = TemperatureScaling().fit(logits, y)
    # MLE standard error of beta = 1/T at n = 8000 is about 0.01; 5 sigma
    assert abs(float(fitted.temperature) - 2.0) < 0.2


# --- monotone on the training range (hypothesis) -----------------------------------------


@settings(max_examples=8, deadline=None)
@given(
    name=st.sampled_from(FAMILIES),
    seed=st.integers(0, 2**31 - 1),
    curvature=st.floats(-3.0, 3.0),
    slope=st.floats(-3.0, 3.0),
    spread=st.floats(0.2, 5.0),
    l2=st.sampled_from([0.0, 0.5]),
)
def test_every_fitted_map_is_monotone_on_the_training_range(
    name, seed, curvature, slope, spread, l2
):
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, spread, N)
    u = s / spread
    y = (rng.uniform(size=N) < 1 / (1 + np.exp(-(curvature * u**2 + slope * u)))).astype(float)
    y[:2] = [0.0, 1.0]  # both classes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        warnings.simplefilter("ignore", SeparableDataWarning)  # separable draws (l2 = 0)
        fitted = ESTIMATORS[name](l2=l2).fit(s, y)
    grid = np.linspace(s.min(), s.max(), 4001)
    z = np.asarray(fitted.predict_logit(grid))
    assert np.all(np.isfinite(z))
    assert np.all(np.diff(z) >= -1e-9 * (1 + np.abs(z[1:])))
    assert bool(fitted.is_monotone())


# --- batched and grouped fits -------------------------------------------------------------


def batch_data(seed=10, b=3):
    rows = [make_data(k, seed=seed + i) for i, k in enumerate(["free", "hump", "anti"][:b])]
    s, y, w = (np.stack(a) for a in zip(*rows, strict=True))
    rng = np.random.default_rng(seed)
    mask = rng.uniform(size=s.shape) < 0.85
    return s, y, w, mask


SLOW_BATCH = {"temperature", "beta", "exponential"}  # same solver code path as the others


@pytest.mark.parametrize(
    "name", [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_BATCH else f for f in FAMILIES]
)
def test_fit_batch_with_mask_equals_looped_fits(name):
    s, y, w, mask = batch_data()
    s_pad = np.where(mask, s, np.nan)  # padding may hold anything; it must be ignored
    y_pad = np.where(mask, y, 7.0)
    est = ESTIMATORS[name]()
    batch = est.fit_batch(s_pad, y_pad, mask=mask, sample_weight=w)
    assert batch.batch_shape == (3,)
    for b in range(3):
        # zero weight == left out (checked against a real subset fit below)
        one = est.fit(s[b], y[b], sample_weight=np.where(mask[b], w[b], 0.0))
        np.testing.assert_allclose(
            np.asarray(batch.theta[b]), np.asarray(one.theta), rtol=1e-9, atol=LOOP_TOL
        )
        assert bool(batch.status.converged[b]) == bool(one.status.converged)
        grid = np.linspace(-3, 3, 7)
        np.testing.assert_allclose(
            np.asarray(batch.predict(np.tile(grid, (3, 1)))[b]),
            np.asarray(one.predict(grid)),
            rtol=1e-9,
        )


@pytest.mark.slow  # compiles a fit for a new n
def test_zero_weights_equal_leaving_entries_out():
    s, y, w = make_data("hump", seed=20)
    keep = np.arange(N) < 300
    a = GaussianCalibration().fit(s, y, sample_weight=np.where(keep, w, 0.0))
    b = GaussianCalibration().fit(s[keep], y[keep], sample_weight=w[keep])
    np.testing.assert_allclose(np.asarray(a.theta), np.asarray(b.theta), rtol=1e-9)
    np.testing.assert_allclose(float(a.context.hi), s[keep].max())


@pytest.mark.parametrize("name", ["platt", "gaussian", "gamma"])
def test_grouped_fit_equals_looped_fits(name):
    s, y, w, _ = batch_data(seed=30)
    ids = np.array([7, -2, 40])
    group = np.repeat(ids, N)
    perm = np.random.default_rng(0).permutation(3 * N)
    flat = [a.reshape(-1)[perm] for a in (s, y, w)]
    est = ESTIMATORS[name]()
    batch = est.fit_batch(flat[0], flat[1], sample_weight=flat[2], group=group[perm])
    for row, gid in enumerate(np.sort(ids)):
        sel = group[perm] == gid
        one = est.fit(flat[0][sel], flat[1][sel], sample_weight=flat[2][sel])
        np.testing.assert_allclose(
            np.asarray(batch.theta[row]), np.asarray(one.theta), rtol=1e-9, atol=LOOP_TOL
        )


@pytest.mark.parametrize(
    "name", ["gaussian", pytest.param("gamma", marks=pytest.mark.slow), "exponential"]
)
def test_generative_fit_batch_equals_looped_fits(name):
    s, y, w, mask = batch_data(seed=40)
    est = ESTIMATORS[name](method="generative")
    batch = est.fit_batch(s, y, mask=mask, sample_weight=w)
    for b in range(3):
        one = est.fit(s[b][mask[b]], y[b][mask[b]], sample_weight=w[b][mask[b]])
        np.testing.assert_allclose(np.asarray(batch.theta[b]), np.asarray(one.theta), rtol=1e-9)


@pytest.mark.slow  # compiles the batched solver for a new shape (~1 min on 2 loaded cores)
def test_batched_ips_losses_equal_looped_fits():
    s, y, w, mask = batch_data(seed=50)
    rng = np.random.default_rng(1)
    omega = rng.uniform(0.3, 1.0, s.shape)
    est = GaussianCalibration()
    for loss in ("ips_positive", "snips"):
        batch = est.fit_batch(s, y, mask=mask, sample_weight=w, propensity=omega, loss=loss)
        for b in range(3):
            one = est.fit(
                s[b][mask[b]],
                y[b][mask[b]],
                sample_weight=w[b][mask[b]],
                propensity=omega[b][mask[b]],
                loss=loss,
            )
            np.testing.assert_allclose(
                np.asarray(batch.theta[b]), np.asarray(one.theta), rtol=1e-9, atol=LOOP_TOL
            )


# --- losses through fit -------------------------------------------------------------------


def test_ips_fit_minimises_the_ips_objective():
    """loss='ips' fits t = Y/omega: the scipy oracle on softplus(z) - (Y/omega) z agrees."""
    s, y, _ = make_data("free", seed=60)
    rng = np.random.default_rng(2)
    y = y * (rng.uniform(size=N) < 0.3)  # sparse clicks: sum(Y/omega) < n, bounded problem
    y[0] = 1.0
    omega = rng.uniform(0.4, 1.0, N)
    fitted = GaussianCalibration(l2=0.1).fit(s, y, propensity=omega, loss="ips")
    X, C, icpt = oracle_design("gaussian", s, s.min(), s.max())
    t = y / omega
    ref = scipy_fit(X, t, np.ones(N), C, 0.1, icpt)
    ours = objective(np.asarray(fitted.theta), X, t, np.ones(N), 0.1, icpt)
    assert abs(ours - ref.fun) <= OBJ_RTOL * abs(ref.fun)


def test_unbounded_ips_objective_reports_divergence():
    s, y, _ = make_data("free", seed=61)
    omega = np.full(N, 0.2)  # sum(Y / omega) > n: the intercept runs to +inf
    with pytest.warns(ConvergenceWarning, match="unbounded"):
        fitted = PlattScaling().fit(s, y, propensity=omega, loss="ips")
    assert not bool(fitted.status.converged)
    assert int(fitted.status.code) == DIVERGED
    assert np.all(np.isfinite(np.asarray(fitted.theta)))


# --- fitted objects: jit, recompilation, save / load ---------------------------------------


@pytest.mark.parametrize("name", FAMILIES)
def test_save_load_round_trip_is_exact(name, tmp_path):
    s, y, w = make_data("free", seed=70)
    fitted = ESTIMATORS[name]().fit(s, y, sample_weight=w)
    path = tmp_path / f"{name}.npz"
    fitted.save(path)
    back = jaxcal.load(path)
    assert type(back) is type(fitted)
    assert back.family == fitted.family and back.method == fitted.method
    la, ta = jax.tree_util.tree_flatten(fitted)
    lb, tb = jax.tree_util.tree_flatten(back)
    assert ta == tb
    for a, b in zip(la, lb, strict=True):
        assert np.asarray(a).dtype == np.asarray(b).dtype
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    grid = np.linspace(-4, 4, 11)
    np.testing.assert_array_equal(np.asarray(back.predict(grid)), np.asarray(fitted.predict(grid)))


def test_batched_save_load_and_gamma_shift_round_trip(tmp_path):
    s, y, w, mask = batch_data()
    fitted = GammaCalibration(shift=0.5, relative_shift=False).fit_batch(s, y, mask=mask)
    fitted.save(tmp_path / "g")
    back = jaxcal.load(tmp_path / "g.npz")
    assert back.family.shift == 0.5 and back.family.relative_shift is False
    np.testing.assert_array_equal(np.asarray(back.theta), np.asarray(fitted.theta))


def test_predict_inside_jit_and_no_recompilation():
    s, y, w = make_data("free", seed=80)
    est = GaussianCalibration()
    fitted = est.fit(s, y, sample_weight=w)
    grid = jnp.linspace(-3.0, 3.0, 13)
    inside = jax.jit(lambda cal, x: cal.predict(x))(fitted, grid)
    np.testing.assert_allclose(np.asarray(inside), np.asarray(fitted.predict(grid)), rtol=1e-12)
    single = (_solve_jit, _solve_native_jit)  # the solver's loops, the CPU kernel
    before = [f._cache_size() for f in single]
    s2, y2, w2 = make_data("hump", seed=81)
    est.fit(s2, y2, sample_weight=w2)
    GaussianCalibration(l2=3.0).fit(s2, y2)  # l2 is traced, not static
    assert [f._cache_size() for f in single] == before
    before = _solve_batch_jit._cache_size()
    sb, yb, _, mb = batch_data()
    est.fit_batch(sb, yb, mask=mb)
    est.fit_batch(sb, yb, mask=mb, sample_weight=np.ones_like(sb))
    assert _solve_batch_jit._cache_size() <= before + 1  # at most the first batch call


def test_predicted_probabilities_equal_the_formula_of_each_map():
    """Each family's documented map, evaluated here from its coefficients."""
    s, y, w = make_data("free", seed=90)
    lo, hi = s.min(), s.max()
    x = np.linspace(lo - 0.5, hi + 0.5, 9)
    sig = lambda z: 1 / (1 + np.exp(-z))  # noqa: E731
    g = GaussianCalibration().fit(s, y)
    np.testing.assert_allclose(g.predict(x), sig(g.a * x**2 + g.b * x + g.c), rtol=1e-12)
    e = ExponentialCalibration().fit(s, y)
    np.testing.assert_allclose(e.predict(x), sig(e.a * (x - lo) + e.b), rtol=1e-12)
    gm = GammaCalibration().fit(s, y)
    xp = np.maximum(x - lo + 0.01 * (hi - lo), 1e-5 * (hi - lo))
    np.testing.assert_allclose(gm.predict(x), sig(gm.a * np.log(xp) + gm.b * xp + gm.c), rtol=1e-12)
    bt = BetaCalibration().fit(s, y)
    xb = np.clip((x - lo + 0.01 * (hi - lo)) / (1.02 * (hi - lo)), 2**-52, 1 - 2**-52)
    ref = sig(bt.a * np.log(xb) - bt.b * np.log1p(-xb) + bt.c)
    np.testing.assert_allclose(bt.predict(x), ref, rtol=1e-12)
    tp = TemperatureScaling().fit(s, y)
    np.testing.assert_allclose(tp.predict(x), sig(x / tp.temperature), rtol=1e-12)


def test_gamma_absolute_shift_is_the_papers_s_minus_smin_plus_shift():
    s, y, w = make_data("hump", seed=91)
    fitted = GammaCalibration(shift=0.7, relative_shift=False).fit(s, y, sample_weight=w)
    x = s - s.min() + 0.7
    X = np.column_stack([np.log(x), x, np.ones(N)])
    C = np.array([[1 / 0.7, 1.0, 0], [1 / x.max(), 1.0, 0]])
    ref = scipy_fit(X, y, w, C, 0.0, 2)
    ours = objective(np.asarray(fitted.theta), X, y, w, 0.0, 2)
    assert abs(ours - ref.fun) <= OBJ_RTOL * abs(ref.fun)


def test_gaussian_generative_fit_is_not_constrained_and_says_so():
    """Unequal variances with positives wider: the posterior is U-shaped on the range."""
    rng = np.random.default_rng(92)
    y = (rng.uniform(size=N) < 0.5).astype(float)
    s = np.where(y == 1, rng.normal(0.5, 2.0, N), rng.normal(0.0, 0.5, N))
    gen = GaussianCalibration(method="generative").fit(s, y)
    disc = GaussianCalibration().fit(s, y)
    grid = np.linspace(s.min(), s.max(), 2001)
    zg = np.asarray(gen.predict_logit(grid))
    assert np.any(np.diff(zg) < 0) and not bool(gen.is_monotone())
    assert bool(disc.is_monotone())
    assert np.all(np.diff(np.asarray(disc.predict_logit(grid))) >= -1e-9)


# --- bad input ------------------------------------------------------------------------------


def _base():
    s, y, w = make_data("free", seed=99, n=20)
    return s, y, w


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda s, y, w: (np.where(np.arange(20) == 3, np.nan, s), y, {}), "non-finite"),
        (lambda s, y, w: (np.where(np.arange(20) == 3, np.inf, s), y, {}), "inf"),
        (lambda s, y, w: (s, np.where(y == 1, 2.0, y), {}), "0/1"),
        (lambda s, y, w: (s, y[:-1], {}), "length mismatch"),
        (lambda s, y, w: (s[:0], y[:0], {}), "empty"),
        (lambda s, y, w: (s, np.ones_like(y), {}), "one class"),
        (lambda s, y, w: (s, y, {"sample_weight": -w}), "non-negative"),
        (lambda s, y, w: (s, y, {"propensity": np.zeros(20), "loss": "ips"}), "> 0"),
        (lambda s, y, w: (s, y, {"propensity": np.full(20, 2.0), "loss": "ips"}), "<= 1"),
        (lambda s, y, w: (s, y, {"loss": "ips"}), "propensit"),
        (lambda s, y, w: (s, y, {"loss": "bogus"}), "loss must be"),
        (lambda s, y, w: (np.full(20, 1.5), y, {}), "equal"),
        (lambda s, y, w: (s, y, {"sample_weight": np.where(y == 1, 0.0, w)}), "one class"),
    ],
)
@pytest.mark.parametrize("name", FAMILIES)
def test_bad_input_raises_value_error(name, mutate, match):
    if name == "temperature" and match == "equal":
        pytest.skip("temperature scaling is identified by equal non-zero logits (no error)")
    s, y, kw = mutate(*_base())
    with pytest.raises(ValueError, match=match):
        ESTIMATORS[name]().fit(s, y, **kw)


def test_family_specific_bad_input():
    s, y, _ = _base()
    with pytest.raises(ValueError, match="finite and > 0"):
        GammaCalibration().fit(np.where(np.arange(20) == 0, -1e308, 1e308 * (s > 0)), y)
    with pytest.raises(ValueError, match="finite and > 0"):  # absolute shift, overflow
        GammaCalibration(shift=1.0, relative_shift=False).fit(
            np.where(np.arange(20) == 0, -1e308, 1e308 * (s > 0)), y
        )
    with pytest.raises(ValueError, match=r"strictly inside \(0, 1\)"):
        BetaCalibration(rescale="none").fit(s, y)
    with pytest.raises(ValueError, match="rescale"):
        BetaCalibration(rescale="logit").fit(s, y)
    with pytest.raises(ValueError, match="shift"):
        GammaCalibration(shift=0.0).fit(s, y)
    with pytest.raises(ValueError, match="logits are 0"):
        TemperatureScaling().fit(np.zeros(20), y)
    with pytest.raises(ValueError, match="l2"):
        GaussianCalibration(l2=-1.0).fit(s, y)
    with pytest.raises(ValueError, match="method"):
        PlattScaling(method="generative").fit(s, y)
    with pytest.raises(ValueError, match="generative fit needs targets"):
        GaussianCalibration(method="generative").fit(s, y, propensity=np.full(20, 0.5), loss="ips")


def test_batch_bad_input():
    s, y, w, mask = batch_data()
    est = GaussianCalibration()
    y_one = y.copy()
    y_one[1] = 1.0
    with pytest.raises(ValueError, match="only one class"):
        est.fit_batch(s, y_one)
    with pytest.raises(ValueError, match="either mask"):
        est.fit_batch(s.reshape(-1), y.reshape(-1), mask=mask.reshape(-1), group=np.zeros(3 * N))
    with pytest.raises(ValueError, match="shape mismatch"):
        est.fit_batch(s, y[:, :-1])
    with pytest.raises(ValueError, match="non-finite"):
        est.fit_batch(np.where(mask, np.nan, s), y, mask=~mask | mask)
    with pytest.raises(ValueError, match="> 0"):
        est.fit_batch(s, y, propensity=np.zeros_like(s), loss="ips")
    with pytest.raises(ValueError, match="integer"):
        est.fit_batch(s.reshape(-1), y.reshape(-1), group=np.full(3 * N, 0.5))
    with pytest.raises(ValueError, match="problem 0"):
        est.fit_batch(np.ones_like(s), y)
    fitted = est.fit_batch(s, y, mask=mask)
    with pytest.raises(ValueError, match="batch shape"):
        fitted.predict(np.zeros(5))


def test_predict_rejects_nan_but_extrapolates_outside_the_range():
    s, y, _ = make_data("free", seed=100)
    for name in FAMILIES:
        fitted = ESTIMATORS[name]().fit(s, y)
        far = np.array([s.min() - 100.0, s.max() + 100.0])
        assert np.all(np.isfinite(np.asarray(fitted.predict(far))))
        with pytest.raises(ValueError, match="non-finite"):
            fitted.predict(np.array([0.0, np.nan]))


@pytest.mark.slow  # compiles SVI
def test_fit_bayes_delegates_to_jaxcal_bayes():
    """The method forwards every argument: same key, same draws as the function."""
    from jaxcal.bayes import SVI
    from jaxcal.bayes.inference import fit_bayes

    s, y, w = make_data("free", seed=110)
    kw = dict(sample_weight=w, method=SVI(n_steps=50, n_samples=20))
    key = jax.random.key(0)
    a = GaussianCalibration().fit_bayes(s, y, key=key, **kw)
    b = fit_bayes(GaussianCalibration(), s, y, key=key, **kw)
    np.testing.assert_array_equal(np.asarray(a.theta), np.asarray(b.theta))
    grid = np.linspace(s.min(), s.max(), 201)
    draws = np.asarray(a.theta).reshape(-1, 3)
    z = draws[:, :1] * grid**2 + draws[:, 1:2] * grid + draws[:, 2:]
    assert np.all(np.diff(z, axis=1) >= -1e-9 * (1 + np.abs(z[:, 1:])))  # every draw monotone
