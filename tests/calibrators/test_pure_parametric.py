"""The parametric calibrators as JAX functions: ``fit`` inside ``jit``, ``vmap``, ``jvp`` /
``grad`` and ``jax.export``, against independent oracles (the eager estimator, a loop of
eager fits, central finite differences in float64) and the NaN policy of the pure fit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _composition import (
    PURE_ATOL,
    PURE_RTOL,
    assert_exports,
    assert_jit_matches_eager,
    assert_jvp_matches_fd,
    assert_nan_policy,
    assert_vmap_matches_loop,
    check_derivative,
    grid_of,
    problem,
    quick_jit,
)

import jaxcal
from jaxcal.fitting import linear
from jaxcal.fitting.linear import fit_linear_differentiable

# finite differences in float64: step 1e-6, agreement to ~1e-5 relative (the FD error is
# O(eps^2 f''') plus rounding O(1e-16 / eps))

CALIBRATORS = {
    "platt": jaxcal.PlattScaling(),
    "platt_l2": jaxcal.PlattScaling(l2=3.0),
    "temperature": jaxcal.TemperatureScaling(),
    "beta": jaxcal.BetaCalibration(),
    "gaussian": jaxcal.GaussianCalibration(),
    "gamma": jaxcal.GammaCalibration(),
    "exponential": jaxcal.ExponentialCalibration(),
    "gaussian_generative": jaxcal.GaussianCalibration(method="generative"),
    "gamma_generative": jaxcal.GammaCalibration(method="generative"),
    "exponential_generative": jaxcal.ExponentialCalibration(method="generative"),
}
DISCRIMINATIVE = [k for k, c in CALIBRATORS.items() if c.method == "discriminative"]


def _weights(n, seed=2):
    return np.random.default_rng(seed).uniform(0.5, 1.5, n)


@pytest.mark.parametrize("name", list(CALIBRATORS))
def test_jit_matches_eager(name):
    s, y = problem(300, seed=0)
    assert_jit_matches_eager(CALIBRATORS[name], s, y, sample_weight=_weights(300))


def test_jit_matches_eager_with_propensity():
    s, y = problem(300, seed=4)
    omega = np.random.default_rng(4).uniform(0.2, 1.0, 300)
    assert_jit_matches_eager(jaxcal.GaussianCalibration(), s, y, propensity=omega, loss="snips")
    assert_jit_matches_eager(
        jaxcal.BetaCalibration(rescale="none"),
        1 / (1 + np.exp(-s)),
        y,
        propensity=omega,
        loss="ips_positive",
    )


def test_jit_does_not_recompile(compiles):
    s, y = problem(200, seed=1)
    run = jax.jit(lambda s, y: jaxcal.PlattScaling().fit(s, y).predict(s))
    run(s, y)
    with compiles() as c:
        run(s + 0.5, y)
    assert c.count == 0


@pytest.mark.parametrize("name", ["platt", "beta", "gaussian", "gamma_generative"])
def test_vmap_matches_loop(name):
    problems = [problem(80, seed=k) for k in range(3)]
    S = np.stack([p[0] for p in problems])
    Y = np.stack([p[1] for p in problems])
    assert_vmap_matches_loop(CALIBRATORS[name], S, Y)


@pytest.mark.parametrize("name", list(CALIBRATORS))
def test_derivative_in_scores_and_weights(name):
    """The fitted map's predictions, as a function of the training scores and weights."""
    cal = CALIBRATORS[name]
    s, y = problem(150, seed=3)
    w = _weights(150)
    grid = grid_of(s, 9)
    rng = np.random.default_rng(5)
    v = (rng.normal(size=150), rng.normal(size=150))
    check_derivative(lambda x: cal.fit(x[0], y, sample_weight=x[1]).predict(grid), (s, w), v)


def test_shared_jvp_check_platt(monkeypatch):
    """The shared check (eager ``jvp`` and ``grad``) on one calibrator. Outside ``jit`` the
    solver sees concrete primal arrays, yet the pure fit still takes the portable solver,
    never the compiled kernel."""
    s, y = problem(150, seed=3)
    grid = grid_of(s, 9)
    v = np.random.default_rng(6).normal(size=150)
    cal = jaxcal.PlattScaling()

    def no_kernel(*args, **kwargs):
        raise AssertionError("the pure fit called the compiled kernel")

    monkeypatch.setattr(linear, "_solve_native_jit", no_kernel)
    assert_jvp_matches_fd(lambda x: cal.fit(x, y).predict(grid), s, v)


@pytest.mark.parametrize("name", DISCRIMINATIVE)
def test_derivative_in_targets(name):
    """Labels enter the loss as targets; the derivative in soft targets (finite differences
    need targets off {0, 1}, which ``fit`` refuses as labels) is checked on the core, and
    the public fit's derivative in the labels is that derivative at t = y."""
    cal = CALIBRATORS[name]
    s, y = problem(150, seed=7)
    w = jnp.asarray(_weights(150))
    t = np.clip(0.8 * y + 0.1 + 0.05 * np.random.default_rng(8).normal(size=150), 0.0, 1.0)
    v = np.random.default_rng(9).normal(size=150)

    def core(t):
        return fit_linear_differentiable(
            cal.family, jnp.asarray(s), t, w, l2=cal.l2, max_iter=100, tol=1e-18
        )[0]

    check_derivative(core, t, v)
    public = quick_jit(
        lambda y, v: jax.jvp(lambda y: cal.fit(s, y, sample_weight=w).theta, (y,), (v,))[1]
    )
    core_at_labels = quick_jit(lambda y, v: jax.jvp(core, (y,), (v,))[1])
    np.testing.assert_allclose(public(y, v), core_at_labels(y, v), rtol=1e-10, atol=1e-12)


def _anti_correlated():
    s, y = problem(200, seed=10)
    return -s, y


def _gaussian_binding():
    """A logit that rises then falls on the range: the fit's right-end constraint binds."""
    rng = np.random.default_rng(5)
    s = rng.uniform(-2.0, 2.0, 400)
    p = 1 / (1 + np.exp(-(2 * s - 1.5 * s**2)))
    return s, (rng.uniform(size=400) < p).astype(float)


@pytest.mark.parametrize(
    "name, data, active",
    [
        ("platt", _anti_correlated, [True]),
        ("temperature", _anti_correlated, [True]),
        ("exponential", _anti_correlated, [True]),
        ("gaussian", _gaussian_binding, [False, True]),
    ],
)
def test_derivative_with_active_constraint(name, data, active):
    """Where the monotonicity constraint binds, the KKT derivative (theta on the face,
    including the moving constraint row of the Gaussian family) equals finite differences
    of the refitted coefficients, in scores, targets and weights together."""
    cal = CALIBRATORS[name]
    s, y = data()
    n = s.shape[0]
    fitted = cal.fit(s, y)
    np.testing.assert_array_equal(np.asarray(fitted.status.active), active)
    assert np.all(np.asarray(fitted.status.multipliers)[np.asarray(active)] > 1e-3)
    w = _weights(n)
    t = np.clip(0.9 * y + 0.05, 0.0, 1.0)
    rng = np.random.default_rng(11)
    v = tuple(rng.normal(size=n) for _ in range(3))

    def coefficients(x):
        theta, ctx, _ = fit_linear_differentiable(
            cal.family, x[0], x[1], x[2], l2=cal.l2, max_iter=100, tol=1e-18
        )
        return jnp.concatenate([theta, jnp.stack([ctx.lo, ctx.hi])])

    check_derivative(coefficients, (s, t, w), v)
    grid = grid_of(s, 9)
    check_derivative(lambda x: cal.fit(x[0], y, sample_weight=x[1]).predict(grid), (s, w), v[::2])


def test_kkt_derivative_against_closed_form():
    """Platt with the slope at its bound is the constant base rate: b = logit(sum w y /
    sum w), so db/dw and db/ds (zero) are known in closed form."""
    s, y = _anti_correlated()
    w = _weights(s.shape[0])

    def b(s, w):
        return jaxcal.PlattScaling().fit(s, y, sample_weight=w).b

    gs, gw = quick_jit(jax.grad(b, argnums=(0, 1)))(s, w)
    rate = np.sum(w * y) / np.sum(w)
    np.testing.assert_allclose(gs, 0.0, atol=1e-12)
    np.testing.assert_allclose(gw, (y - rate) / (np.sum(w) * rate * (1 - rate)), rtol=1e-8)


@pytest.mark.parametrize("name", ["platt", "gamma", "gaussian_generative"])
def test_exports(name):
    s, y = problem(120, seed=12)
    assert_exports(CALIBRATORS[name], s, y)


def test_export_has_no_compiled_kernel():
    """The pure fit never calls the compiled CPU kernel: the exported program is portable."""
    s, y = problem(120, seed=12)
    exp = jax.export.export(jax.jit(lambda s, y: jaxcal.PlattScaling().fit(s, y).theta))(s, y)
    assert "linear_logit" not in exp.mlir_module()
    assert set(exp.platforms) == {jax.default_backend()}


@pytest.mark.parametrize("name", ["platt", "beta", "gaussian", "gamma", "gamma_generative"])
def test_nan_policy(name):
    s, y = problem(100, seed=13)
    assert_nan_policy(CALIBRATORS[name], s, y)


_NAN_PROGRAMS: dict = {}


def _nan_fit(cal, s, y, sample_weight=None, propensity=None, loss="naive"):
    """``fit + predict`` in one program per calibrator and loss (the NaN policy does not
    depend on compiler options: quick compiles)."""
    key = (cal, loss, propensity is None)
    if key not in _NAN_PROGRAMS:
        grid = np.linspace(0.2, 0.8, 5)
        _NAN_PROGRAMS[key] = quick_jit(
            lambda s, y, w, omega: cal.fit(
                s, y, sample_weight=w, propensity=omega, loss=loss
            ).predict(grid)
        )
    w = np.ones_like(s) if sample_weight is None else sample_weight
    return np.asarray(_NAN_PROGRAMS[key](s, y, w, propensity))


def test_nan_policy_family_domains():
    """Data outside a family's domain (which ``fit`` refuses) gives NaN inside ``jit``."""
    s, y = problem(60, seed=14)
    p = 1 / (1 + np.exp(-s))
    beta = jaxcal.BetaCalibration(rescale="none")
    assert np.all(np.isfinite(_nan_fit(beta, p, y)))
    for bad in (1.5, 0.0, -0.2):
        q = p.copy()
        q[5] = bad
        with pytest.raises(ValueError):
            beta.fit(q, y)
        assert np.all(np.isnan(_nan_fit(beta, q, y)))
    # all scores equal: no calibration map of the score
    assert np.all(np.isnan(_nan_fit(jaxcal.PlattScaling(), np.full(60, 0.3), y)))
    # temperature scaling of all-zero logits is not identified
    assert np.all(np.isnan(_nan_fit(jaxcal.TemperatureScaling(), np.zeros(60), y)))
    # the Gamma shift s - s_min + shift * range overflows
    huge = s.copy()
    huge[:2] = (-1e308, 1e308)
    with pytest.raises(ValueError):
        jaxcal.GammaCalibration().fit(huge, y)
    assert np.all(np.isnan(_nan_fit(jaxcal.GammaCalibration(), huge, y)))
    # a generative fit needs targets in [0, 1]: loss="ips" gives y / propensity > 1
    omega = np.full(60, 0.5)
    gen = jaxcal.GaussianCalibration(method="generative")
    with pytest.raises(ValueError):
        gen.fit(s, y, propensity=omega, loss="ips")
    assert np.all(np.isnan(_nan_fit(gen, s, y, propensity=omega, loss="ips")))
    # a zero weight hides a bad score from the domain check, as in the eager fit
    q = p.copy()
    q[5] = 1.5
    w = np.ones(60)
    w[5] = 0.0
    eager = np.asarray(beta.fit(q, y, sample_weight=w).predict(np.linspace(0.2, 0.8, 5)))
    np.testing.assert_allclose(
        _nan_fit(beta, q, y, sample_weight=w), eager, rtol=PURE_RTOL, atol=PURE_ATOL
    )


def test_traced_predict_of_infinite_score_is_nan():
    s, y = problem(60, seed=15)
    fitted = jaxcal.PlattScaling().fit(s, y)
    out = jax.jit(fitted.predict)(np.array([np.inf, -np.inf, np.nan, 0.0]))
    assert np.all(np.isnan(out[:3])) and np.isfinite(out[3])


def test_float32_scores_fit_in_float32():
    s, y = problem(200, seed=16)
    fitted = jax.jit(lambda s, y: jaxcal.GaussianCalibration().fit(s, y))(
        s.astype(np.float32), y.astype(np.float32)
    )
    assert fitted.theta.dtype == jnp.float32
    eager = jaxcal.GaussianCalibration().fit(s, y).theta
    np.testing.assert_allclose(fitted.theta, eager, rtol=1e-3, atol=1e-4)
