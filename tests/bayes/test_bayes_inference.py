"""Bayesian calibration: NUTS / SVI posteriors against simulations with known ground truth,
scipy point fits, brute-force numpy summaries and independent diagnostics formulas."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import constrain_fn, potential_energy
from scipy.optimize import minimize
from scipy.special import expit, log_expit

import jaxcal
from jaxcal.bayes import NUTS, SVI, fit_bayes, fit_bayes_batch, fit_hierarchical, nuts_chains
from jaxcal.bayes.inference import _fit_single, design_of
from jaxcal.bayes.linear import check_prior, linear_logit_model, theta_from_standardised
from jaxcal.bayes.posterior import Posterior

RTOL64 = 1e-10
COVERAGE_MIN = 0.85  # 90% intervals must cover the truth at >= 85% of the grid
MEAN_SD_TOL = 2.0  # NUTS vs SVI: means within 2 posterior sd
SD_RTOL = 0.30  # NUTS vs SVI: sd within 30%

A_TRUE, B_TRUE = 1.5, -0.5


def simulate_platt(n, seed, a=A_TRUE, b=B_TRUE):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.random(n) < expit(a * s + b)).astype(float)
    return s, y


def scipy_platt(s, y, w=None):
    """Unconstrained weighted logistic MLE by BFGS (independent of jaxcal's solver)."""
    w = np.ones_like(s) if w is None else w

    def f(th):
        z = th[0] * s + th[1]
        return -np.sum(w * (y * log_expit(z) + (1 - y) * log_expit(-z)))

    return minimize(f, np.zeros(2), method="BFGS", options={"gtol": 1e-10}).x


@pytest.fixture(scope="module")
def data():
    return simulate_platt(2000, 0)


@pytest.fixture(scope="module")
def nuts(data):
    s, y = data
    method = NUTS(n_samples=500, n_warmup=300, n_chains=4)
    return fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0), method=method)


@pytest.fixture(scope="module")
def svi(data):
    s, y = data
    method = SVI(n_steps=1500, n_samples=4000)
    return fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(1), method=method)


def _mean_sd(post):
    th = np.asarray(post.theta).reshape(-1, post.theta.shape[-1])
    return th.mean(0), th.std(0)


def test_nuts_converges_and_matches_truth(nuts):
    d = nuts.diagnostics()
    assert d["divergences"] == 0
    for name in ("a", "b"):
        assert d["r_hat"][name] < 1.01
        assert d["ess"][name] > 400
    mean, sd = _mean_sd(nuts)
    # the truth lies within 4 posterior sd of the posterior mean
    assert np.all(np.abs(mean - [A_TRUE, B_TRUE]) < 4 * sd)
    assert bool(nuts.is_monotone())


def test_nuts_and_svi_agree(nuts, svi):
    m1, s1 = _mean_sd(nuts)
    m2, s2 = _mean_sd(svi)
    assert np.all(np.abs(m1 - m2) < MEAN_SD_TOL * s1)
    assert np.all(np.abs(s2 / s1 - 1) < SD_RTOL)


@pytest.mark.slow
def test_svi_minibatch_matches_full_batch(data, svi):
    """The minibatch log-likelihood is scaled by n / batch: same posterior as full batch.
    Without the scaling the sd would be sqrt(10) ~ 3.2x too large (netcal's bug)."""
    s, y = data
    method = SVI(n_steps=3000, n_samples=4000, subsample_size=200, learning_rate=0.02)
    mb = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(2), method=method)
    m1, s1 = _mean_sd(svi)
    m2, s2 = _mean_sd(mb)
    assert np.all(np.abs(m1 - m2) < 0.5 * s1)
    assert np.all(np.abs(s2 / s1 - 1) < SD_RTOL)


@pytest.mark.slow
def test_coverage_of_90_percent_intervals():
    """Simulated from a known Platt map: the 90% interval of P(y=1|s) covers the truth at
    >= 85% of a grid, averaged over 48 seeds (one vectorised call). Intervals must not be
    needlessly wide either: coverage <= 97%."""
    B, n = 48, 150
    S, Y = zip(*(simulate_platt(n, 100 + b, a=2.0, b=-1.0) for b in range(B)), strict=True)
    post = fit_bayes_batch(
        jaxcal.PlattScaling(), np.stack(S), np.stack(Y), key=jax.random.key(3),
        method=NUTS(n_samples=250, n_warmup=200, n_chains=2),
    )  # fmt: skip
    grid = np.linspace(-1.5, 1.5, 13)
    lo, hi = post.interval(np.tile(grid, (B, 1)), level=0.9)
    truth = expit(2.0 * grid - 1.0)
    covered = (np.asarray(lo) <= truth) & (truth <= np.asarray(hi))
    assert COVERAGE_MIN <= covered.mean() <= 0.97
    assert bool(np.all(post.is_monotone()))


@pytest.mark.slow
def test_posterior_mean_approaches_point_fit():
    """|E[p(s)] - p_MLE(s)| shrinks with n (posterior mean and MLE differ by O(1/n)); the
    MLE is scipy's. The three sizes are masked rows of one batch (one compile)."""
    sizes = (100, 1000, 4000)
    nmax = sizes[-1]
    S = np.zeros((3, nmax))
    Y = np.zeros((3, nmax))
    M = np.zeros((3, nmax), bool)
    for i, n in enumerate(sizes):
        s, y = simulate_platt(n, 7 + i)
        S[i, :n], Y[i, :n], M[i, :n] = s, y, True
    post = fit_bayes_batch(
        jaxcal.PlattScaling(), S, Y, mask=M, key=jax.random.key(4),
        method=NUTS(n_samples=500, n_warmup=300, n_chains=2),
    )  # fmt: skip
    grid = np.linspace(-1.5, 1.5, 7)
    mean = np.asarray(post.predict(np.tile(grid, (3, 1))))
    gaps = []
    for i, n in enumerate(sizes):
        a, b = scipy_platt(S[i, :n], Y[i, :n])
        gaps.append(np.max(np.abs(mean[i] - expit(a * grid + b))))
    assert gaps[2] < gaps[0]
    assert gaps[2] < 0.003  # 0.0004-0.0006 over seeds 4-6 (NUTS noise included)


@pytest.mark.slow
def test_batch_equals_loop():
    S, Y = zip(*(simulate_platt(120, 20 + b) for b in range(3)), strict=True)
    kw = dict(method=NUTS(n_samples=60, n_warmup=60, n_chains=2))
    cal = jaxcal.PlattScaling()
    batch = fit_bayes_batch(cal, np.stack(S), np.stack(Y), key=jax.random.key(5), **kw)
    keys = jax.random.split(jax.random.key(5), 3)
    for b in range(3):
        one = fit_bayes(cal, S[b], Y[b], key=keys[b], **kw)
        np.testing.assert_allclose(batch.theta[b], one.theta, rtol=1e-8, atol=1e-8)
        np.testing.assert_allclose(batch[b].predict(S[b]), one.predict(S[b]), rtol=1e-8)


def test_second_call_does_not_recompile(data):
    s, y = data
    kw = dict(method=NUTS(n_samples=20, n_warmup=20, n_chains=2))
    fit_bayes(jaxcal.PlattScaling(), s[:300], y[:300], key=jax.random.key(0), **kw)
    size = _fit_single._cache_size()
    fit_bayes(jaxcal.PlattScaling(), s[300:600], y[300:600], key=jax.random.key(1), **kw)
    assert _fit_single._cache_size() == size


def test_predict_interval_probability_draws_vs_numpy(nuts):
    th = np.asarray(nuts.theta).reshape(-1, 2)
    grid = np.linspace(-3, 3, 11)
    p = expit(th[:, :1] * grid + th[:, 1:])  # [D, m]
    np.testing.assert_allclose(nuts.predict(grid), p.mean(0), rtol=RTOL64)
    lo, hi = nuts.interval(grid, level=0.8)
    np.testing.assert_allclose(lo, np.quantile(p, 0.1, axis=0), rtol=RTOL64)
    np.testing.assert_allclose(hi, np.quantile(p, 0.9, axis=0), rtol=RTOL64)
    np.testing.assert_allclose(nuts.probability_draws(grid), p, rtol=RTOL64)
    # jit-able: a posterior passes through jit as a pytree
    np.testing.assert_allclose(jax.jit(lambda q: q.predict(grid))(nuts), p.mean(0), rtol=RTOL64)


def test_ece_posterior_vs_brute_force(nuts):
    s, y = simulate_platt(400, 99)
    ece = np.asarray(nuts.ece_posterior(s, y, n_bins=10))
    th = np.asarray(nuts.theta).reshape(-1, 2)
    assert ece.shape == (th.shape[0],)
    for d in (0, 17, 999):
        p = expit(th[d, 0] * s + th[d, 1])
        idx = np.minimum((p * 10).astype(int), 9)
        tot = sum(abs(p[idx == k].sum() - y[idx == k].sum()) for k in range(10) if np.any(idx == k))
        np.testing.assert_allclose(ece[d], tot / len(s), rtol=1e-9)


# ------------------------------------------------------------------- likelihood and weights


def test_sample_weights_equal_replicated_data():
    """Integer sample weights are frequency weights: the potential energy equals that of the
    replicated data set at any parameter value (exact)."""
    s, y = simulate_platt(50, 3)
    w = np.random.default_rng(0).integers(1, 4, 50).astype(float)
    cal = jaxcal.PlattScaling()
    prior = check_prior(None, 1)
    kw = {"prior": prior, "has_intercept": True}
    d_w = design_of(cal, s, y, w)
    reps = w.astype(int)
    d_r = design_of(cal, np.repeat(s, reps), np.repeat(y, reps), np.ones(reps.sum()))
    for x in ([0.3, -0.2], [-1.0, 1.0]):
        # same map theta in both designs: express it in each design's standardised coords
        theta = np.array([np.exp(x[0]), x[1]])
        vals = []
        for d in (d_w, d_r):
            beta = theta[0] * d.scale[0]
            alpha = theta[1] + d.mean[0] * theta[0]
            z = {"slope": jnp.log(jnp.array([beta])), "intercept": jnp.asarray(alpha)}
            vals.append(potential_energy(linear_logit_model, (d,), kw, z))
        # the standardisation (and so the prior) differs; compare likelihood terms only
        lik = [_loglik(d, theta) for d in (d_w, d_r)]
        np.testing.assert_allclose(lik[0], lik[1], rtol=RTOL64)
        assert np.isfinite(vals).all()


def _loglik(design, theta):
    u = np.array([theta[0]])
    z = np.asarray(design.basis) @ (u * np.asarray(design.scale)) + theta[1]
    z = z + np.asarray(design.mean) @ u
    t, w = np.asarray(design.targets), np.asarray(design.weights)
    return -np.sum(w * (np.logaddexp(0, z) - t * z))


def test_ips_likelihood_and_log_joint_vs_numpy():
    """The potential is -[IPS log-likelihood + log prior + log Jacobian] computed by hand:
    t = Y / propensity (loss="ips"), HalfNormal(5) on beta, Normal(0, 5) on alpha."""
    s, y = simulate_platt(60, 4)
    omega = np.random.default_rng(1).uniform(0.2, 1.0, 60)
    from jaxcal.losses import loss_targets_weights

    t, w = loss_targets_weights(jnp.asarray(y), propensity=jnp.asarray(omega), loss="ips")
    d = design_of(jaxcal.PlattScaling(), s, t, w)
    kw = {"prior": check_prior(None, 1), "has_intercept": True}
    log_beta, alpha = 0.4, -0.3
    pe = potential_energy(
        linear_logit_model, (d,), kw, {"slope": jnp.array([log_beta]), "intercept": alpha}
    )
    beta = np.exp(log_beta)
    z = alpha + beta * np.asarray(d.basis[:, 0])
    tn = y / omega
    loglik = -np.sum(np.logaddexp(0, z) - tn * z)
    lp = np.log(2) - 0.5 * np.log(2 * np.pi * 25) - beta**2 / 50 + log_beta  # + Jacobian
    lp += -0.5 * np.log(2 * np.pi * 25) - alpha**2 / 50
    np.testing.assert_allclose(pe, -(loglik + lp), rtol=RTOL64)
    # and the draw maps back to theta: logit = a s + b on the raw scores
    th = theta_from_standardised(jaxcal.PlattScaling().family, jnp.array([beta]), alpha, d)
    np.testing.assert_allclose(np.asarray(th)[0] * s + np.asarray(th)[1], z, rtol=1e-9)


def test_custom_prior_is_used():
    """A very tight slope prior pulls the posterior to it (prior can be replaced)."""
    s, y = simulate_platt(200, 5)
    tight = {"slope": dist.LogNormal(np.log(0.1), 0.01)}
    post = fit_bayes(
        jaxcal.PlattScaling(), s, y, key=jax.random.key(6), prior=tight,
        method=NUTS(n_samples=100, n_warmup=100, n_chains=2),
    )  # fmt: skip
    d = design_of(jaxcal.PlattScaling(), s, y, np.ones_like(s))
    beta = np.asarray(post.theta[..., 0]) * float(d.scale[0])
    # the prior's sd is 1% (log-scale 0.01) and 200 points barely move it (measured: 3e-4)
    np.testing.assert_allclose(np.median(beta), 0.1, rtol=0.01)


# ------------------------------------------------------------------- serialisation, arviz


def test_save_load_roundtrip(nuts, tmp_path):
    path = tmp_path / "post.npz"
    nuts.save(path)
    back = jaxcal.load(path)
    assert isinstance(back, Posterior)
    assert back.family == nuts.family and back.method == nuts.method
    np.testing.assert_array_equal(back.theta, nuts.theta)
    for k in nuts.stats:
        np.testing.assert_array_equal(back.stats[k], nuts.stats[k])
    grid = np.linspace(-2, 2, 5)
    np.testing.assert_array_equal(back.predict(grid), nuts.predict(grid))


def test_arviz_export(nuts):
    import arviz as az  # in the dev extra

    idata = nuts.to_arviz()
    np.testing.assert_array_equal(idata.posterior["a"].values, nuts.draws["a"])
    summ = az.rhat(idata)
    assert float(summ["a"]) < 1.01


def test_to_arviz_without_arviz_raises(nuts, monkeypatch):
    monkeypatch.setitem(sys.modules, "arviz", None)  # an import of arviz now fails
    with pytest.raises(ImportError, match="pip install arviz"):
        nuts.to_arviz()


# ------------------------------------------------------------------- monotonicity


def test_constrained_parameterisation_is_monotone_for_every_family():
    """Any unconstrained point maps to a monotone calibration map (dense-grid check), for
    every parametric family: the constraint is part of the parameterisation."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    cals = [
        jaxcal.PlattScaling(),
        jaxcal.TemperatureScaling(),
        jaxcal.BetaCalibration(),
        jaxcal.GaussianCalibration(),
        jaxcal.GammaCalibration(),
        jaxcal.ExponentialCalibration(),
    ]

    @settings(max_examples=30, deadline=None)
    @given(
        ci=st.integers(0, len(cals) - 1),
        seed=st.integers(0, 2**31 - 1),
        spread=st.floats(0.5, 8.0),
    )
    def check(ci, seed, spread):
        cal = cals[ci]
        fam = cal.family
        rng = np.random.default_rng(seed)
        s = expit(rng.normal(size=40))  # in (0, 1): valid for every family
        y = (rng.random(40) < s).astype(float)
        y[:2] = [0.0, 1.0]
        d = design_of(cal, s, y, np.ones(40))
        k = len(fam.slope_indices)
        z = {"slope": jnp.asarray(rng.normal(0, spread, k))}
        if fam.intercept_index is not None:
            z["intercept"] = jnp.asarray(rng.normal(0, spread))
        kw = {"prior": check_prior(None, k), "has_intercept": fam.intercept_index is not None}
        draw = constrain_fn(linear_logit_model, (d,), kw, z)
        alpha = draw.get("intercept", jnp.zeros(()))
        theta = theta_from_standardised(fam, draw["slope"], alpha, d)
        grid = np.linspace(s.min(), s.max(), 2001)
        logit = np.asarray(fam.logit(theta, jnp.asarray(grid), d.context))
        scale = np.max(np.abs(logit)) + 1.0
        assert np.all(np.diff(logit) >= -1e-9 * scale)

    check()


@pytest.mark.slow
@pytest.mark.parametrize(
    "cal",
    [jaxcal.TemperatureScaling(), jaxcal.BetaCalibration(), jaxcal.GaussianCalibration(),
     jaxcal.GammaCalibration(), jaxcal.ExponentialCalibration()],
    ids=lambda c: type(c).__name__,
)  # fmt: skip
def test_every_nuts_draw_monotone_all_families(cal):
    rng = np.random.default_rng(11)
    s = expit(rng.normal(size=300))
    y = (rng.random(300) < s**2).astype(float)
    post = fit_bayes(cal, s, y, key=jax.random.key(7), method=NUTS(n_samples=100, n_warmup=100))
    assert bool(post.is_monotone())
    grid = np.linspace(s.min(), s.max(), 501)
    p = np.asarray(post.probability_draws(grid))
    assert np.all(np.diff(p, axis=1) >= -1e-12)


# ------------------------------------------------------------------- bad inputs


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"scores": [0.1, np.nan, 0.3, 0.4]}, "NaN|non-finite"),
        ({"labels": [0, 2, 1, 0]}, "0/1|labels"),
        ({"labels": [1, 1, 1, 1]}, "class"),
        ({"labels": [0, 1, 1]}, "length|shape|mismatch"),
        ({"sample_weight": [1.0, -1.0, 1.0, 1.0]}, "negative|weight"),
        ({"propensity": [0.5, 0.0, 0.5, 0.5], "loss": "ips"}, "propensit"),
        ({"method": "mcmc"}, "method must be jaxcal.bayes.NUTS"),
        ({"method": "svi"}, "method must be jaxcal.bayes.NUTS"),  # the old string form
        ({"method": SVI(subsample_size=10)}, r"subsample_size \(10\) exceeds the data size \(4\)"),
        ({"prior": {"slope": dist.Normal(0.0, 1.0)}}, "slope"),
        ({"prior": {"bias": dist.Normal(0.0, 1.0)}}, "unknown prior"),
        ({"key": None}, "key is required"),
        ({"key": 3}, "key must be a JAX PRNG key.*got int 3"),
        ({"key": "abc"}, "key must be a JAX PRNG key.*got str 'abc'"),
        ({"key": [0, 1]}, "key must be a JAX PRNG key"),
        ({"key": jax.random.split(jax.random.key(0), 2)}, "single PRNG key"),
        ({"calibrator": jaxcal.IsotonicCalibration()}, "parametric"),
        ({"scores": [0.5, 0.5, 0.5, 0.5]}, "equal"),
    ],
)
def test_bad_inputs_raise(kwargs, match):
    args = {
        "calibrator": jaxcal.PlattScaling(),
        "scores": [0.1, 0.2, 0.3, 0.4],
        "labels": [0, 1, 0, 1],
        "key": jax.random.key(0),
    }
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        fit_bayes(args.pop("calibrator"), args.pop("scores"), args.pop("labels"), **args)


def test_bad_predict_inputs_raise(nuts):
    with pytest.raises(ValueError, match="level"):
        nuts.interval([0.0], level=1.2)
    with pytest.raises(ValueError, match="non-finite|NaN"):
        nuts.predict([0.0, np.inf])
    with pytest.raises(ValueError, match="batched"):
        nuts[0]


def test_sampler_settings_are_method_objects_only():
    """The flat sampler keywords are gone (the settings live in NUTS / SVI); a string or
    another object as ``method`` is refused before anything runs."""
    s = np.tile(np.linspace(-1.0, 1.0, 20), (2, 1))
    y = np.tile([0.0, 1.0] * 10, (2, 1))
    cal, key = jaxcal.PlattScaling(), jax.random.key(0)
    with pytest.raises(TypeError, match="num_samples"):
        fit_bayes_batch(cal, s, y, key=key, num_samples=10)
    with pytest.raises(TypeError, match="num_warmup"):
        fit_bayes(cal, s[0], y[0], key=key, num_warmup=10)
    with pytest.raises(ValueError, match="method"):
        fit_bayes_batch(cal, s, y, key=key, method="mcmc")
    with pytest.raises(ValueError, match="method"):
        fit_bayes_batch(cal, s, y, key=key, method={"n_samples": 10})
    with pytest.raises(ValueError, match="fit_hierarchical supports method=NUTS"):
        fit_hierarchical(cal, s.ravel(), y.ravel(), group=np.arange(40) % 2, key=key,
                         method=SVI())  # fmt: skip
    with pytest.raises(ValueError, match="nuts_chains needs method=jaxcal.bayes.NUTS"):
        nuts_chains(lambda z: z @ z, jnp.zeros((4, 2)), key=key, method=SVI())


# ------------------------------------------------------------------- the method objects


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: NUTS(n_samples=0), "n_samples must be an integer >= 1; got 0"),
        (lambda: NUTS(n_samples=10.0), "n_samples must be an integer"),
        (lambda: NUTS(n_warmup=-1), "n_warmup must be an integer >= 0"),
        (lambda: NUTS(n_chains=1.5), "n_chains must be an integer"),
        (lambda: NUTS(n_chains=True), "n_chains must be an integer"),
        (lambda: NUTS(target_accept_prob=1.5), r"target_accept_prob must be a number in \(0, 1\)"),
        (lambda: NUTS(target_accept_prob=0.0), "target_accept_prob"),
        (lambda: NUTS(target_accept_prob="high"), "target_accept_prob"),
        (lambda: NUTS(max_tree_depth=0), "max_tree_depth"),
        (lambda: NUTS(dense_mass="yes"), "dense_mass must be True or False"),
        (lambda: SVI(n_steps=0), "n_steps must be an integer >= 1"),
        (lambda: SVI(learning_rate=0.0), "learning_rate must be a finite number and > 0"),
        (lambda: SVI(learning_rate=np.inf), "learning_rate"),
        (lambda: SVI(n_samples=-3), "n_samples"),
        (lambda: SVI(subsample_size=0), "subsample_size must be an integer >= 1"),
        (lambda: SVI(subsample_size=2.5), "subsample_size"),
        (lambda: SVI(guide="laplace"), "guide must be one of"),
    ],
)
def test_method_objects_validate_when_made(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_method_objects_defaults_and_value_semantics():
    """The documented defaults; frozen, hashable values (NumPy numbers normalised, so that
    equal settings are equal objects and share a compiled program)."""
    import dataclasses

    nuts, svi = NUTS(), SVI()
    assert dataclasses.asdict(nuts) == dict(
        n_samples=1000, n_warmup=500, n_chains=4, target_accept_prob=0.8, max_tree_depth=10,
        dense_mass=False,
    )  # fmt: skip
    assert dataclasses.asdict(svi) == dict(
        n_steps=3000, learning_rate=0.05, n_samples=1000, subsample_size=None, guide="mvn"
    )
    same = NUTS(n_samples=np.int64(1000), target_accept_prob=np.float32(0.5))
    assert same == NUTS(target_accept_prob=float(np.float32(0.5)))
    assert type(same.n_samples) is int and type(same.target_accept_prob) is float
    assert hash(same) == hash(NUTS(target_accept_prob=float(np.float32(0.5))))
    with pytest.raises(dataclasses.FrozenInstanceError):
        nuts.n_samples = 10


def test_nuts_chains_samples_a_known_gaussian():
    """The public chain runner on a correlated 2-D Gaussian potential: the draws' mean and
    covariance match the closed form within Monte Carlo error; the statistics have one
    entry per draw; the chains have keys of their own."""
    cov = np.array([[1.0, 0.8], [0.8, 1.0]])
    prec = jnp.asarray(np.linalg.inv(cov))
    mean = jnp.array([1.0, -2.0])

    def potential(z):
        d = z["x"] - mean
        return 0.5 * d @ prec @ d

    method = NUTS(n_samples=1000, n_warmup=300, n_chains=2)
    key = jax.random.key(11)
    z, stats = nuts_chains(potential, {"x": jnp.zeros((2, 2))}, key=key, method=method)
    x = np.asarray(z["x"])
    assert x.shape == (2, 1000, 2)
    assert set(stats) == {"diverging", "n_steps", "accept_prob"}
    assert all(v.shape == (2, 1000) for v in stats.values())
    flat = x.reshape(-1, 2)
    # 2,000 draws, ESS several hundred per coordinate: 5 sd of the mean is ~0.25
    np.testing.assert_allclose(flat.mean(0), mean, atol=0.25)
    np.testing.assert_allclose(np.cov(flat.T), cov, atol=0.25)
    # started at the same point, the two chains differ: each has its own key
    assert not np.allclose(x[0, :10], x[1, :10])


def test_nuts_chains_bad_inputs_raise():
    pot = lambda z: jnp.sum(z**2)  # noqa: E731
    with pytest.raises(ValueError, match="key is required"):
        nuts_chains(pot, jnp.zeros((4, 2)), key=None)
    with pytest.raises(ValueError, match="single PRNG key"):
        nuts_chains(pot, jnp.zeros((4, 2)), key=jax.random.split(jax.random.key(0), 4))
    with pytest.raises(ValueError, match="leading chain axis of size n_chains=4"):
        nuts_chains(pot, jnp.zeros((2, 2)), key=jax.random.key(0))
