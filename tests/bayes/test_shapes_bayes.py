"""Shape policy of the Bayesian fits: the data are padded to bucket sizes with entries of
weight 0, which add exactly 0 to the log-likelihood.

Why the posteriors are not compared draw by draw: the padded log-density sums run over more
(zero) terms, which can change their last bit, and NUTS is a long deterministic recursion
whose U-turn and acceptance decisions amplify any difference (measured: padded and unpadded
chains with the same key part within the warm-up). So the tests check that (1) the log
density and its gradient at fixed parameter values equal the unpadded ones to float64
rounding, for every model the fits sample, (2) padded and unpadded posterior means agree
within Monte Carlo error, and (3) a new data size inside a bucket, and new values of the
numeric settings, compile nothing."""

from __future__ import annotations

import functools

import jax
import numpy as np
import numpyro.distributions as dist
import pytest
from numpyro.infer.util import potential_energy
from scipy.special import expit

import jaxcal
from jaxcal import _shapes
from jaxcal.bayes import NUTS, SVI, fit_bayes, fit_bayes_batch
from jaxcal.bayes._sampling import (
    padded_data,
)
from jaxcal.bayes.hierarchical import fit_hierarchical, hierarchical_model
from jaxcal.bayes.inference import family_of
from jaxcal.bayes.linear import check_prior, linear_logit_model, make_design
from jaxcal.bayes.scoremodel import ScoreData, _unconstrained_init, scoremodel_bayes_model
from jaxcal.scoremodels import (
    GammaScoreModel,
    GaussianMixtureScoreModel,
    GaussianScoreModel,
)

EXACT = 1e-12  # float64: padding adds exact zeros; only the order of the sums changes
NUTS_KW = dict(method=NUTS(n_samples=300, n_warmup=300, n_chains=4))


def _platt_data(n, seed):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.random(n) < expit(1.5 * s - 0.5)).astype(float)
    return s, y


def _sm_data(sm, n, seed):
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.35).astype(float)
    y[:2] = [0, 1]
    if sm.support == "real":
        return rng.normal(np.where(y == 1, 1.5, 0.0), 1.0), y
    return rng.gamma(np.where(y == 1, 5.0, 2.0), 1.0), y


def _assert_value_and_grad_equal(potential, pad_args, exact_args, params):
    for z in params:
        (v1, g1), (v2, g2) = (jax.value_and_grad(potential)(z, *a) for a in (pad_args, exact_args))
        np.testing.assert_allclose(v1, v2, rtol=EXACT)
        for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(g2), strict=True):
            np.testing.assert_allclose(a, b, rtol=EXACT, atol=EXACT)


# ---------------------------------------------------------------- (1) the log density
@pytest.mark.parametrize("calibrator", [jaxcal.PlattScaling(), jaxcal.GammaCalibration()])
def test_linear_model_potential_is_unchanged_by_padding(calibrator):
    """The potential (negative log joint, unconstrained coordinates) of the design built from
    the padded data equals the unpadded one, value and gradient, at random parameters."""
    family = family_of(calibrator)
    s, y = _platt_data(300, 0)
    s = s - s.min() + 0.5  # positive scores for the Gamma family
    w = np.random.default_rng(1).uniform(0.5, 2.0, s.size)
    padded = padded_data((s, y, w), (s[0], 0.0, 0.0))
    assert padded[0].shape == (512,)
    kw = {"prior": check_prior(None, len(family.slope_indices)), "has_intercept": True}

    @jax.jit
    def potential(z, s, t, w):
        design = make_design(family, s, t, w)
        return potential_energy(linear_logit_model, (design,), kw, z)

    rng = np.random.default_rng(2)
    k = len(family.slope_indices)
    params = [{"slope": rng.normal(size=k), "intercept": rng.normal()} for _ in range(3)]
    _assert_value_and_grad_equal(potential, padded, (s, y, w), params)


@pytest.mark.parametrize(
    "sm", [GaussianScoreModel(), GammaScoreModel(), GaussianMixtureScoreModel()]
)
def test_scoremodel_potential_is_unchanged_by_padding(sm):
    s, y = _sm_data(sm, 300, 3)
    w = np.random.default_rng(4).uniform(0.5, 2.0, s.size)
    padded = padded_data((s, y, w), (s[0], y[0], 0.0))
    monotone = sm.monotone_parameterisation
    kw = {"lo": s.min(), "hi": s.max(), "monotone": monotone}

    @jax.jit
    def potential(z, s, y, w):
        return potential_energy(scoremodel_bayes_model, (sm, ScoreData(s, y, w)), kw, z)

    prior_fn = functools.partial(scoremodel_bayes_model, sm, None, **kw)
    params = [_unconstrained_init(prior_fn, jax.random.key(i)) for i in range(3)]
    _assert_value_and_grad_equal(potential, padded, (s, y, w), params)


def test_hierarchical_potential_is_unchanged_by_padding():
    family = family_of(jaxcal.PlattScaling())
    s, y = _platt_data(300, 5)
    g = np.random.default_rng(6).integers(0, 4, s.size)
    w = np.ones(s.size)
    *padded, rows = padded_data((s, y, w, g), (s[0], 0.0, 0.0, 0))

    @jax.jit
    def potential(z, s, t, w, rows):
        design = make_design(family, s, t, w)
        args = (design, rows.astype(np.int32), 4)
        return potential_energy(hierarchical_model, args, {"has_intercept": True}, z)

    rng = np.random.default_rng(7)
    shapes = {"mu_slope": (1,), "tau_slope": (1,), "eps_slope": (4, 1)}
    shapes |= {"mu_intercept": (), "tau_intercept": (), "eps_intercept": (4,)}
    params = [{k: rng.normal(size=v) for k, v in shapes.items()} for _ in range(3)]
    _assert_value_and_grad_equal(potential, (*padded, rows), (s, y, w, g), params)


# ---------------------------------------------------------------- (2) the posterior
def _assert_means_agree(a, b):
    """Posterior means within 4 Monte Carlo standard errors (ESS-based) of each other."""
    from numpyro.diagnostics import effective_sample_size

    for name in a:
        x, z = np.asarray(a[name]), np.asarray(b[name])
        x, z = x.reshape(*x.shape[:2], -1), z.reshape(*z.shape[:2], -1)
        for j in range(x.shape[-1]):
            se2 = sum(np.var(v[..., j]) / effective_sample_size(v[..., j]) for v in (x, z))
            assert abs(x[..., j].mean() - z[..., j].mean()) < 4 * np.sqrt(se2), (name, j)


@pytest.mark.slow
def test_padded_posteriors_agree_with_unpadded():
    s, y = _platt_data(300, 8)
    padded = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0), **NUTS_KW)
    sm = GaussianScoreModel()
    sm_padded = sm.fit_bayes(s, y, key=jax.random.key(0), **NUTS_KW)
    with _shapes.exact_shapes():
        exact = fit_bayes(jaxcal.PlattScaling(), s, y, key=jax.random.key(0), **NUTS_KW)
        sm_exact = sm.fit_bayes(s, y, key=jax.random.key(0), **NUTS_KW)
    assert padded.diagnostics()["divergences"] == exact.diagnostics()["divergences"] == 0
    _assert_means_agree(padded.draws, exact.draws)
    _assert_means_agree(sm_padded.draws, sm_exact.draws)


# ---------------------------------------------------------------- (3) compile counts
def test_fit_bayes_new_size_in_bucket_does_not_compile(compiles):
    """300, 400 and 500 points pad to 512: after the first NUTS and SVI fits, new sizes, a
    new target_accept_prob / learning_rate and a new prior compile nothing."""
    cal = jaxcal.PlattScaling()
    nuts, svi = NUTS(n_samples=300, n_warmup=300), SVI(n_steps=200, n_samples=100)
    fit_bayes(cal, *_platt_data(300, 0), key=jax.random.key(0), method=nuts)
    fit_bayes(cal, *_platt_data(300, 0), key=jax.random.key(0), method=svi)
    priors = [{"slope": dist.HalfNormal(v), "intercept": dist.Normal(0.0, v)} for v in (2.0, 3.0)]
    with compiles() as c:
        for k, n in enumerate((400, 500)):
            data = _platt_data(n, k + 1)
            key = jax.random.key(k)
            tap = NUTS(n_samples=300, n_warmup=300, target_accept_prob=0.85 + 0.05 * k)
            fit_bayes(cal, *data, key=key, method=tap)
            fit_bayes(cal, *data, key=key, prior=priors[k], method=nuts)
            lr = SVI(n_steps=200, n_samples=100, learning_rate=0.02 * (k + 1))
            fit_bayes(cal, *data, key=key, method=lr)
    assert c.count == 0


def test_fit_bayes_batch_and_hierarchical_new_size_in_bucket_do_not_compile(compiles):
    cal = jaxcal.PlattScaling()
    kw = dict(method=NUTS(n_samples=100, n_warmup=100, n_chains=2))

    def batch(n, seed):
        s, y = _platt_data(2 * n, seed)
        return s.reshape(2, n), y.reshape(2, n)

    def groups(n, seed):
        s, y = _platt_data(n, seed)
        return s, y, np.arange(n) % 3

    fit_bayes_batch(cal, *batch(300, 0), key=jax.random.key(0), **kw)
    s, y, g = groups(300, 0)
    hier = fit_hierarchical(cal, s, y, group=g, key=jax.random.key(0), **kw)
    mean, (lo, hi) = hier.predict(s, g), hier.interval(s, g)
    with _shapes.exact_shapes():
        np.testing.assert_allclose(mean, hier.predict(s, g), rtol=EXACT)
        for a, b in zip((lo, hi), hier.interval(s, g), strict=True):
            np.testing.assert_allclose(a, b, rtol=EXACT)
    with compiles() as c:
        for k, n in enumerate((400, 500)):
            fit_bayes_batch(cal, *batch(n, k + 1), key=jax.random.key(k), **kw)
            s, y, g = groups(n, k + 1)
            fit_hierarchical(cal, s, y, group=g, key=jax.random.key(k), **kw)
            hier.predict(s, g)
            hier.interval(s, g, level=0.8)
    assert c.count == 0


def test_scoremodel_fit_bayes_new_size_in_bucket_does_not_compile(compiles):
    """New sizes, a new prior scale (a traced field of the score model) and a new
    target_accept_prob compile nothing."""
    kw = dict(n_samples=100, n_warmup=100, n_chains=2)
    GaussianScoreModel().fit_bayes(
        *_sm_data(GaussianScoreModel(), 300, 0), key=jax.random.key(0), method=NUTS(**kw)
    )
    with compiles() as c:
        for k, n in enumerate((400, 500)):
            sm = GaussianScoreModel(loc_scale=5.0 + k)
            tap = NUTS(target_accept_prob=0.9, **kw)
            sm.fit_bayes(*_sm_data(sm, n, k + 1), key=jax.random.key(k), method=tap)
    assert c.count == 0


def test_predictions_new_size_in_bucket_do_not_compile_and_equal_unpadded(compiles):
    """predict / interval / probability_draws of linear, batched and score-model posteriors:
    scores padded to their bucket (copies of the last score, sliced off)."""
    kw = dict(method=NUTS(n_samples=50, n_warmup=50, n_chains=2))
    cal, sm = jaxcal.PlattScaling(), GaussianScoreModel()
    s, y = _platt_data(300, 9)
    posts = [
        (fit_bayes(cal, s, y, key=jax.random.key(0), **kw), 0),
        (
            fit_bayes_batch(cal, s.reshape(2, 150), y.reshape(2, 150), key=jax.random.key(0), **kw),
            1,
        ),
        (sm.fit_bayes(s, y, key=jax.random.key(0), **kw), 0),
    ]
    rng = np.random.default_rng(10)

    def grid(m, nb):  # scores of shape (2,)*nb + (m, 2): trailing axes are flattened
        return rng.normal(size=(2,) * nb + (m, 2))

    for post, nb in posts:
        g = grid(300, nb)
        mean, (lo, hi) = post.predict(g), post.interval(g, level=0.8)
        assert mean.shape == lo.shape == hi.shape == g.shape
        with _shapes.exact_shapes():
            np.testing.assert_allclose(mean, post.predict(g), rtol=EXACT)
            for a, b in zip((lo, hi), post.interval(g, level=0.8), strict=True):
                np.testing.assert_allclose(a, b, rtol=EXACT)
        # probability draws: [draws, m] per problem for 1-D scores per problem
        g = grid(600, nb)[..., 0]
        draws = post.probability_draws(g)
        assert draws.shape == (2,) * nb + (100, 600)
        with _shapes.exact_shapes():
            np.testing.assert_allclose(draws, post.probability_draws(g), rtol=EXACT)
    with compiles() as c:
        for m in (350, 400):  # 700 and 800 scores per problem: the bucket of 600
            for post, nb in posts:
                post.predict(grid(m, nb))
                post.interval(grid(m, nb), level=0.7)
                post.probability_draws(grid(2 * m, nb)[..., 0])
    assert c.count == 0
