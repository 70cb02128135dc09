"""Propensity models against hand counts, scikit-learn, brute-force enumeration, and a
simulator with known exposure (implied base rates match the truth within sampling error)."""

from __future__ import annotations

from collections import Counter

import jax
import numpy as np
import pytest
from scipy import optimize
from sklearn.linear_model import LogisticRegression

import jaxcal
from jaxcal.data import load_coat
from jaxcal.debias import (
    exposure_rate,
    holdout_propensity,
    implied_base_rate,
    logistic_propensity,
    matrix_propensity,
    naive_bayes_propensity,
    popularity_propensity,
    rescale_propensity,
)
from jaxcal.debias import propensity_models as pm

EXACT = 1e-12
COEF_TOL = 1e-9  # exact Newton vs scikit-learn's exact Newton-Cholesky solver, float64
Z_MAX = 4.0  # statistical checks: |estimate - truth| < 4 standard errors


@pytest.fixture(scope="module")
def coat(data_dir):
    return load_coat(data_dir / "coat")


# ------------------------------------------------------------------ matrix / rescaling


def test_matrix_propensity(coat):
    m = matrix_propensity(coat.propensities)
    np.testing.assert_array_equal(m, coat.propensities)
    users, items = np.array([0, 5, 289]), np.array([299, 7, 0])
    got = matrix_propensity(coat.propensities, users, items)
    assert got.tolist() == [coat.propensities[u, i] for u, i in zip(users, items, strict=True)]
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        matrix_propensity(coat.propensities * 10)
    with pytest.raises(ValueError, match="out of range"):
        matrix_propensity(coat.propensities, [290], [0])
    assert exposure_rate(coat.train) == pytest.approx(24 / 300, abs=EXACT)


@pytest.mark.parametrize("target", [0.01, 0.08, 0.5, 0.9])
def test_rescale_propensity_mean_ranking_and_scipy(target):
    rng = np.random.default_rng(0)
    rel = popularity_propensity(rng.poisson(rng.gamma(0.5, 40, 300)) + 1)
    weights = rng.integers(1, 5, 300).astype(float)
    for w in (None, weights):
        out = rescale_propensity(rel, target, weights=w)
        ww = np.ones(300) if w is None else w
        assert np.sum(ww * out) / np.sum(ww) == pytest.approx(target, rel=1e-12)
        assert (out > 0).all() and (out <= 1).all()
        # ranking kept: the map is non-decreasing, strictly where not clipped at 1
        order = np.argsort(rel, kind="stable")
        assert (np.diff(out[order]) >= 0).all()
        free = out < 1
        assert np.array_equal(
            np.argsort(rel[free], kind="stable"), np.argsort(out[free], kind="stable")
        )
        # scipy oracle on the scale c
        c = optimize.brentq(
            lambda c, ww=ww: np.sum(ww * np.minimum(1, c * rel)) / ww.sum() - target,
            1e-9,
            1e9,
            xtol=1e-15,
            rtol=1e-15,
        )
        np.testing.assert_allclose(out, np.minimum(1, c * rel), rtol=1e-10)
    assert np.all(rescale_propensity(rel, 1.0) == 1.0)
    with pytest.raises(ValueError, match="target_rate"):
        rescale_propensity(rel, 0.0)
    with pytest.raises(ValueError, match="> 0"):
        rescale_propensity(np.r_[0.0, 1.0], 0.5)


def test_holdout_propensity_by_enumeration():
    """P(V=1 | R=1, not in train) by enumerating exposure O and hold-out H."""
    for omega in (0.01, 0.3, 0.9, 1.0):
        for h in (0.05, 0.1, 0.5, 1.0):
            outcomes = {  # (O, H): probability; V = O H, in train = O (1 - H)
                (o, hh): (omega if o else 1 - omega) * (h if hh else 1 - h)
                for o in (0, 1)
                for hh in (0, 1)
            }
            p_v = sum(p for (o, hh), p in outcomes.items() if o and hh)
            p_not_train = sum(p for (o, hh), p in outcomes.items() if not (o and not hh))
            assert holdout_propensity(omega, h) == pytest.approx(p_v / p_not_train, rel=EXACT)
            assert holdout_propensity(omega, h, unseen_only=False) == pytest.approx(p_v, rel=EXACT)
    per_user = holdout_propensity(np.full((3, 4), 0.2), np.array([[0.1], [0.2], [0.5]]))
    assert per_user.shape == (3, 4)
    with pytest.raises(ValueError, match="holdout_rate"):
        holdout_propensity(0.5, 0.0)


# ------------------------------------------------------------------ Naive Bayes


def test_naive_bayes_hand_counts(coat):
    nb = naive_bayes_propensity(coat.train, coat.test)
    obs = Counter(coat.train[coat.train > 0].tolist())
    mar = Counter(coat.test[coat.test > 0].tolist())
    n_obs, n_mar = sum(obs.values()), sum(mar.values())
    p_o = n_obs / (290 * 300)
    assert float(nb.observed_rate) == pytest.approx(p_o, rel=EXACT)
    for y, got in zip(np.asarray(nb.levels), np.asarray(nb.propensity), strict=True):
        hand = (obs[int(y)] / n_obs) * p_o / (mar[int(y)] / n_mar)
        assert got == pytest.approx(hand, rel=EXACT)
    # Laplace smoothing, by hand, on a tiny example; level 3 never occurs in the MAR sample
    observed = np.array([[1, 0, 3], [0, 2, 2]])
    mar_vals = np.array([1, 2, 2, 1, 1])
    with pytest.raises(ValueError, match="never in the MAR sample"):
        naive_bayes_propensity(observed, mar_vals)
    nb2 = naive_bayes_propensity(observed, mar_vals, alpha=1.0)
    expect = [((1 + 1) / 7) * (4 / 6) / ((3 + 1) / 8), ((2 + 1) / 7) * (4 / 6) / ((2 + 1) / 8)]
    expect.append(min(1.0, ((1 + 1) / 7) * (4 / 6) / (1 / 8)))
    np.testing.assert_allclose(np.asarray(nb2.propensity), expect, rtol=EXACT)
    np.testing.assert_allclose(np.asarray(nb2.predict(np.array([3, 1]))), [expect[2], expect[0]])
    with pytest.raises(ValueError, match="not among the levels"):
        nb2.predict(np.array([4]))
    # jit path, and save / load
    rated = coat.test[coat.test > 0]
    np.testing.assert_array_equal(jax.jit(nb.predict)(rated), nb.predict(rated))
    nb.save(tmp := __import__("tempfile").mkdtemp() + "/nb.npz")
    back = jaxcal.load(tmp)
    np.testing.assert_array_equal(back.propensity, nb.propensity)
    np.testing.assert_array_equal(back.levels, nb.levels)


def _simulate_value_mnar(seed, n_users=400, n_items=300):
    """Exposure depends on the rating value only (Naive Bayes is well specified)."""
    rng = np.random.default_rng(seed)
    p_rating = np.array([0.3, 0.25, 0.2, 0.15, 0.1])
    omega_by_rating = np.array([0.02, 0.04, 0.08, 0.2, 0.35])
    ratings = rng.choice(np.arange(1, 6), size=(n_users, n_items), p=p_rating)
    exposed = rng.random((n_users, n_items)) < omega_by_rating[ratings - 1]
    return rng, ratings, exposed, omega_by_rating


def test_naive_bayes_recovers_known_exposure():
    rng, ratings, exposed, omega = _simulate_value_mnar(1)
    observed = np.where(exposed, ratings, 0)
    mar = np.where(rng.random(ratings.shape) < 0.05, ratings, 0)  # 5% uniform sample
    nb = naive_bayes_propensity(observed, mar)
    got = np.asarray(nb.propensity)
    # delta-method standard error of the ratio of three counts
    n_mar = (mar > 0).sum()
    p_y = np.bincount(mar[mar > 0], minlength=6)[1:] / n_mar
    se = got * np.sqrt((1 - p_y) / (p_y * n_mar) + 1 / np.bincount(observed[observed > 0])[1:])
    assert (np.abs(got - omega) < Z_MAX * se).all()


# ------------------------------------------------------------------ logistic


def _features(rng, n, k):
    groups = rng.integers(0, k, n)
    return np.eye(k)[groups] if k > 1 else rng.normal(size=(n, 1))


@pytest.mark.parametrize("l2", [1.0, 0.1])
def test_logistic_propensity_matches_sklearn(l2):
    rng = np.random.default_rng(2)
    nu, ni = 40, 30
    xu = np.c_[_features(rng, nu, 4), rng.normal(size=(nu, 2))]
    xi = np.c_[_features(rng, ni, 3), rng.normal(size=(ni, 1))]
    eta = -2 + (xu @ rng.normal(size=6))[:, None] + (xi @ rng.normal(size=4))[None, :]
    observed = (rng.random((nu, ni)) < 1 / (1 + np.exp(-eta))).astype(int)
    fit = logistic_propensity(observed, xu, xi, l2=l2)
    design = np.c_[np.repeat(xu, ni, axis=0), np.tile(xi, (nu, 1))]
    # Oracle: scikit-learn's second-order solver on the same objective. (Its default lbfgs
    # stops early here: gradient ~1e-5, objective 5e-11 above the optimum, intercept off by
    # 2e-5; the objective comparison below keeps that honest.)
    sk = LogisticRegression(C=1 / l2, tol=1e-12, max_iter=100, solver="newton-cholesky")
    sk = sk.fit(design, observed.ravel())
    np.testing.assert_allclose(fit.intercept, sk.intercept_[0], atol=COEF_TOL)
    np.testing.assert_allclose(np.r_[fit.user_coef, fit.item_coef], sk.coef_[0], atol=COEF_TOL)
    np.testing.assert_allclose(
        np.asarray(fit.predict(xu, xi)).ravel(), sk.predict_proba(design)[:, 1], atol=COEF_TOL
    )
    # first-order optimality of our own solution, exactly (the gradient of the objective),
    # and our objective is no worse than lbfgs's (scipy's quasi-Newton, stopped by its tol)
    theta = np.r_[float(fit.intercept), fit.user_coef, fit.item_coef]
    obs = observed.astype(float)
    grad = jax.grad(pm._objective)(theta, xu, xi, obs, l2, 6)
    assert np.max(np.abs(np.asarray(grad))) < 1e-8
    lb = LogisticRegression(C=1 / l2, tol=1e-12, max_iter=10_000).fit(design, observed.ravel())
    f_lb = pm._objective(np.r_[lb.intercept_[0], lb.coef_[0]], xu, xi, obs, l2, 6)
    assert float(pm._objective(theta, xu, xi, obs, l2, 6)) <= float(f_lb) + 1e-12
    # the fitted pytree saves and loads exactly
    fit.save(tmp := __import__("tempfile").mkdtemp() + "/lp.npz")
    back = jaxcal.load(tmp)
    np.testing.assert_array_equal(back.item_coef, fit.item_coef)


def test_logistic_propensity_no_recompile_and_errors(coat):
    obs = coat.train[:, :50]
    logistic_propensity(obs, coat.user_features, coat.item_features[:50])
    size = pm._fit_logistic._cache_size()
    logistic_propensity(coat.test[:, :50], coat.user_features, coat.item_features[:50], l2=2.0)
    assert pm._fit_logistic._cache_size() == size
    with pytest.raises(ValueError, match="user_features"):
        logistic_propensity(obs, coat.user_features[:5], coat.item_features[:50])
    with pytest.raises(ValueError, match="both observed and unobserved"):
        logistic_propensity(np.ones_like(obs), coat.user_features, coat.item_features[:50])
    with pytest.raises(ValueError, match="non-finite"):
        logistic_propensity(obs, coat.user_features * np.nan, coat.item_features[:50])


def test_logistic_propensity_on_coat_reproduces_exposure_rate(coat):
    """With an unpenalised intercept the score equation makes the fitted mean exposure
    equal the observed density exactly (24/300)."""
    fit = logistic_propensity(coat.train, coat.user_features, coat.item_features)
    p = np.asarray(fit.predict(coat.user_features, coat.item_features))
    assert p.mean() == pytest.approx(exposure_rate(coat.train), rel=1e-9)


# ------------------------------------------------------------ implied base rate on a simulator


def _simulate_feature_exposure(seed, n_users=400, n_items=300):
    """Explicit feedback; exposure depends on item features, preference on items too."""
    rng = np.random.default_rng(seed)
    xu = _features(rng, n_users, 3)
    xi = _features(rng, n_items, 5)
    gamma = np.array([-3.2, -2.5, -1.8, -1.2, -0.6])
    omega = np.broadcast_to(1 / (1 + np.exp(-(xi @ gamma))), (n_users, n_items))
    # preference correlated with exposure (popular items are liked more): MNAR
    pref = np.broadcast_to(0.1 + 0.6 * omega[0], (n_users, n_items))
    r = (rng.random((n_users, n_items)) < pref).astype(int)
    o = (rng.random((n_users, n_items)) < omega).astype(int)
    return rng, xu, xi, omega, r, o


def _base_rate_check(omega_hat, r, y, h, rng):
    """Hold out h of the positives; return (estimate, se, truth) over non-training pairs."""
    valid = y * (rng.random(y.shape) < h)
    train = y - valid
    keep = train == 0
    labels = valid[keep].astype(float)
    prop = holdout_propensity(omega_hat, h)[keep]
    est = implied_base_rate(labels, propensity=prop, loss="ips")
    se = np.std(labels / prop) / np.sqrt(labels.size)
    return est, se, r[keep].mean()


def test_each_estimator_implied_base_rate_matches_truth():
    rng, xu, xi, omega, r, o = _simulate_feature_exposure(3)
    y = r * o  # implicit positives
    h = 0.2
    item_counts = o.sum(0)  # explicit feedback: exposure counts per item
    estimators = {
        "true matrix": matrix_propensity(omega),
        "logistic": np.asarray(logistic_propensity(o, xu, xi, l2=1e-3).predict(xu, xi)),
        "rescaled popularity": np.broadcast_to(
            rescale_propensity(
                popularity_propensity(item_counts, power=1.0, clip=1e-3), exposure_rate(o)
            ),
            o.shape,
        ),
    }
    for name, omega_hat in estimators.items():
        est, se, truth = _base_rate_check(omega_hat, r, y, h, np.random.default_rng(10))
        assert abs(est - truth) < Z_MAX * se, (name, est, truth, se)
    # power: relative popularity without rescaling, and a constant propensity, miss it
    rel = np.broadcast_to(popularity_propensity(item_counts, power=1.0, clip=1e-3), o.shape)
    est, se, truth = _base_rate_check(rel, r, y, h, np.random.default_rng(10))
    assert abs(est - truth) > 10 * se
    const = np.full(o.shape, exposure_rate(o))
    est, se, truth = _base_rate_check(const, r, y, h, np.random.default_rng(10))
    assert abs(est - truth) > Z_MAX * se
    # and ignoring the hold-out conditioning (h * omega) is detectably off
    rng2 = np.random.default_rng(10)
    valid = y * (rng2.random(y.shape) < h)
    keep = (y - valid) == 0
    naive_h = implied_base_rate(
        valid[keep], propensity=holdout_propensity(omega, h, unseen_only=False)[keep], loss="ips"
    )
    est, se, truth = _base_rate_check(omega, r, y, h, np.random.default_rng(10))
    assert abs(naive_h - truth) > Z_MAX * se


def test_naive_bayes_implied_base_rate_matches_truth():
    rng, ratings, exposed, _ = _simulate_value_mnar(4)
    observed = np.where(exposed, ratings, 0)
    mar = np.where(rng.random(ratings.shape) < 0.05, ratings, 0)
    nb = naive_bayes_propensity(observed, mar)
    r = (ratings >= 4).astype(int)
    y = r * exposed
    # the positives' propensity is P(O=1 | rating) of their rating (known for observed pairs)
    omega_hat = np.asarray(nb.predict(ratings))
    est, se, truth = _base_rate_check(omega_hat, r, y, 0.2, np.random.default_rng(11))
    assert abs(est - truth) < Z_MAX * se * 1.5  # 1.5: the NB estimate adds its own noise
    naive = implied_base_rate(y.ravel())
    assert abs(naive - truth) > 10 * se  # power
