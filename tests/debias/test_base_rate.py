"""Base rates on the simulator with known exposure (``jaxcal.data.simulate_preferences``):
implied base rates of each propensity estimator against the realised truth (sampling
error from the known exposure), negative-sampling base rates against their closed form and
a scipy constant fit, rescaled propensities keep their ranking, and the MAR prior-shift
correction against a scipy root and the true-preference ECE."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import optimize, special

import jaxcal
from jaxcal.calibrators import PlattScaling
from jaxcal.data import calibration_pairs, holdout_split, simulate_preferences
from jaxcal.debias import (
    BaseRateCorrected,
    exposure_rate,
    holdout_propensity,
    implied_base_rate,
    logistic_propensity,
    matrix_propensity,
    naive_bayes_propensity,
    negative_sampling_base_rate,
    popularity_propensity,
    prior_shift_correction,
    rescale_propensity,
)
from jaxcal.metrics import ece

EXACT = 1e-10
Z_MAX = 4.0  # statistical checks: |estimate - truth| < 4 standard errors (fixed seeds)
N_USERS, N_ITEMS = 300, 200


@pytest.fixture(scope="module")
def sim():
    """Exposure depends on the item only (exposure_relevance=0), so a per-item propensity
    model is well specified; the relevant pairs are still MNAR through popularity."""
    d = simulate_preferences(
        n_users=N_USERS,
        n_items=N_ITEMS,
        key=jax.random.key(0),
        exposure_relevance=0.0,
        base_rate=0.15,
    )
    shape = (N_USERS, N_ITEMS)
    return {
        "omega": np.asarray(d.propensity).reshape(shape),
        "r": np.asarray(d.relevance).reshape(shape).astype(int),
        "o": np.asarray(d.exposure).reshape(shape).astype(int),
        "y": np.asarray(d.clicks).reshape(shape).astype(int),
        "scores": np.asarray(d.scores).reshape(shape),
        "true_prob": np.asarray(d.true_prob).reshape(shape),
    }


def _ips_rate(y, r, omega_hat):
    """IPS implied base rate over all pairs, the realised truth mean(R), and the standard
    error of the difference given the exposure draw: sd(Y/omega - R)/sqrt(n) (Y = O R)."""
    est = implied_base_rate(y.ravel(), propensity=omega_hat.ravel(), loss="ips")
    return est, r.mean()


def test_true_propensity_implied_base_rate(sim):
    y, r, omega = sim["y"], sim["r"], sim["omega"]
    est, truth = _ips_rate(y, r, matrix_propensity(omega))
    # the estimate is the mean of Y/omega: check it by hand, and its error against truth
    assert est == pytest.approx(np.mean(y / omega), rel=EXACT)
    se = np.std(y / omega - r) / np.sqrt(y.size)
    assert abs(est - truth) < Z_MAX * se
    # power: the naive level (the click rate) is far off
    assert abs(implied_base_rate(y.ravel()) - truth) > 20 * se


def _per_item_se(y, o, r):
    """Standard error of sum_i n_u k_i / e_i / N (per-item exposure-rate propensities):
    given the exposures, k_i is the number of relevant pairs among e_i exposed draws without
    replacement from the n_u pairs of item i (finite-population binomial variance)."""
    n_u = y.shape[0]
    e = o.sum(0)
    rbar = r.mean(0)
    var_k = e * rbar * (1 - rbar) * (1 - e / n_u) * n_u / max(n_u - 1, 1)
    return np.sqrt(np.sum((n_u / e) ** 2 * var_k)) / y.size


def test_per_item_estimators_implied_base_rate(sim):
    """Logistic regression on one-hot item features and popularity rescaled to the
    exposure rate both estimate omega_i by the item's exposure share e_i / n_u."""
    y, r, o = sim["y"], sim["r"], sim["o"]
    se = _per_item_se(y, o, r)
    xi = np.eye(N_ITEMS)
    xu = np.zeros((N_USERS, 1))
    logistic = logistic_propensity(o, xu, xi, l2=0.0)
    omega_lr = np.asarray(logistic.predict(xu, xi))
    rel = popularity_propensity(o.sum(0), power=1.0, clip=1e-6)  # relative: max item = 1
    omega_pop = np.broadcast_to(rescale_propensity(rel, exposure_rate(o)), o.shape)
    # both equal the exposure share (oracle: counting)
    np.testing.assert_allclose(omega_lr, np.broadcast_to(o.mean(0), o.shape), rtol=1e-8)
    np.testing.assert_allclose(omega_pop, np.broadcast_to(o.mean(0), o.shape), rtol=1e-10)
    for omega_hat in (omega_lr, omega_pop):
        est, truth = _ips_rate(y, r, omega_hat)
        assert abs(est - truth) < Z_MAX * se
    # power: the seed paper's relative propensities (click popularity ** 0.5, clip 0.1,
    # the most popular item gets 1) put the level far too low
    paper = popularity_propensity(y.sum(0))
    est, truth = _ips_rate(y, r, np.broadcast_to(paper, o.shape))
    assert truth - est > 20 * se


def test_naive_bayes_implied_base_rate_is_the_mar_rate(sim):
    """With binary ratings (1 = exposed, not liked; 2 = exposed, liked) the Naive Bayes
    propensity of a positive is P(O=1 | R=1) = P(R=1 | O=1) P(O=1) / P_MAR(R=1), so the
    implied IPS base rate equals the MAR sample's positive share exactly."""
    y, r, o = sim["y"], sim["r"], sim["o"]
    rng = np.random.default_rng(1)
    mar_mask = rng.random(r.shape) < 0.05
    observed = np.where(o == 1, r + 1, 0)
    mar = np.where(mar_mask, r + 1, 0)
    nb = naive_bayes_propensity(observed, mar)
    omega_hat = np.asarray(nb.predict(np.where(y == 1, 2, 1)))  # per-pair, rating known for Y
    est, truth = _ips_rate(y, r, omega_hat)
    p_mar = r[mar_mask].mean()
    assert est == pytest.approx(p_mar, rel=1e-9)
    se = np.sqrt(p_mar * (1 - p_mar) / mar_mask.sum())
    assert abs(est - truth) < Z_MAX * se


def test_holdout_propensity_implied_base_rate(sim):
    """A 20% validation hold-out: IPS with h omega / (1 - (1 - h) omega) on the pairs not in
    training recovers their relevance rate; the relative popularity does not."""
    y, r, omega = sim["y"], sim["r"], sim["omega"]
    h = 0.2
    rng = np.random.default_rng(2)
    valid = y * (rng.random(y.shape) < h)
    keep = (y - valid) == 0
    prop = holdout_propensity(omega, h)[keep]
    labels = valid[keep]
    est = implied_base_rate(labels, propensity=prop, loss="ips")
    truth = r[keep].mean()
    # variance of the hold-out + exposure draws given R: sum R (1 - w) / w / n^2
    se = np.sqrt(np.sum(r[keep] * (1 - prop) / prop)) / keep.sum()
    assert abs(est - truth) < Z_MAX * se
    # ignoring the conditioning on "not in training" (h omega) overstates the level by
    # exactly (1 - h) / h * (validation positives) / n, since 1/(h w) - 1/w_V = (1 - h)/h
    wrong = holdout_propensity(omega, h, unseen_only=False)[keep]
    est_wrong = implied_base_rate(labels, propensity=wrong, loss="ips")
    bias = (1 - h) / h * labels.sum() / keep.sum()
    assert est_wrong - est == pytest.approx(bias, rel=1e-9)


@pytest.mark.parametrize("r_neg", [1, 4, 57])
def test_negative_sampling_base_rate_closed_form(sim, r_neg):
    y = sim["y"]
    train, valid = holdout_split(y, fraction=0.1, key=jax.random.key(3))
    omega = holdout_propensity(sim["omega"], 0.1)
    cp = calibration_pairs(valid, train, n_negatives=r_neg, key=jax.random.key(4), propensity=omega)
    pos = cp.labels == 1
    m = np.mean(1 / cp.propensity[pos])
    for loss in ("naive", "ips", "ips_positive", "snips"):
        closed = negative_sampling_base_rate(r_neg, loss=loss, mean_inverse_propensity=m)
        assert cp.base_rate[loss] == pytest.approx(closed, rel=EXACT)
    # oracle: the best constant probability under each loss, by scipy on the loss itself
    for loss in ("naive", "ips_positive"):
        t, w = jaxcal.debias.loss_targets_weights(cp.labels, propensity=cp.propensity, loss=loss)
        t, w = np.asarray(t), np.asarray(w)

        def score(z, t=t, w=w):
            return np.sum(w * (special.expit(z) - t))

        z = optimize.brentq(score, -30, 30, xtol=1e-14)
        assert special.expit(z) == pytest.approx(cp.base_rate[loss], rel=1e-9)
    # a fitted Platt map inherits the level: by the intercept's score equation its
    # loss-weighted mean prediction on the fitting data is the implied base rate
    s_cal = sim["scores"][cp.user, cp.item]
    for loss in ("naive", "ips_positive"):
        fit = PlattScaling(tol=1e-20).fit(s_cal, cp.labels, propensity=cp.propensity, loss=loss)
        _, w = jaxcal.debias.loss_targets_weights(cp.labels, propensity=cp.propensity, loss=loss)
        mean_p = float(np.average(fit.predict(s_cal), weights=np.asarray(w)))
        assert mean_p == pytest.approx(cp.base_rate[loss], rel=1e-9)


def test_rescaled_popularity_keeps_ranking(sim):
    rel = popularity_propensity(sim["y"].sum(0))  # click popularity, power 0.5, clip 0.1
    target = exposure_rate(sim["o"])
    out = rescale_propensity(rel, target)
    assert out.mean() == pytest.approx(target, rel=1e-12)
    # same order: strictly increasing map where not clipped, ties only at the clip value
    for i, j in zip(*np.nonzero(rel[:, None] < rel[None, :]), strict=True):
        assert out[i] < out[j] or out[i] == out[j] == 1.0
    assert np.all((rel[:, None] == rel[None, :]) <= (out[:, None] == out[None, :]))


def _true_ece(probs, true_prob, n_bins=15):
    """Binned ECE against the known preference probabilities (no label noise)."""
    edges = np.linspace(0, 1, n_bins + 1)
    ids = np.clip(np.searchsorted(edges, probs, side="right") - 1, 0, n_bins - 1)
    total = 0.0
    for b in range(n_bins):
        sel = ids == b
        if sel.any():
            total += sel.sum() * abs(probs[sel].mean() - true_prob[sel].mean())
    return total / probs.size


def test_prior_shift_correction_fixes_the_level(sim, tmp_path):
    """Fit Platt naively on clicks (level = click rate, far too low), correct with a 5% MAR
    sample of relevance labels kept apart, evaluate on the rest."""
    scores, y, r = sim["scores"].ravel(), sim["y"].ravel(), sim["r"].ravel()
    tp = sim["true_prob"].ravel()
    rng = np.random.default_rng(5)
    part = rng.permutation(scores.size)
    fit_idx, mar_idx, eval_idx = part[:20_000], part[20_000:23_000], part[23_000:]
    naive = PlattScaling().fit(scores[fit_idx], y[fit_idx])
    corrected = prior_shift_correction(naive, scores[mar_idx], r[mar_idx])
    # oracle for the shift: scipy root of the MAR score equation
    z = np.asarray(naive.predict_logit(scores[mar_idx]))

    def score_eq(d):
        return np.sum(special.expit(z + d) - r[mar_idx])

    d_star = optimize.brentq(score_eq, -20, 20, xtol=1e-14)
    assert float(corrected.shift) == pytest.approx(d_star, abs=1e-9)
    assert float(np.mean(corrected.predict(scores[mar_idx]))) == pytest.approx(
        r[mar_idx].mean(), rel=1e-9
    )
    p_before = np.asarray(naive.predict(scores[eval_idx]))
    p_after = np.asarray(corrected.predict(scores[eval_idx]))
    before, after = _true_ece(p_before, tp[eval_idx]), _true_ece(p_after, tp[eval_idx])
    assert after < 0.5 * before, (before, after)
    e_before = float(ece(p_before, r[eval_idx]))
    e_after = float(ece(p_after, r[eval_idx]))
    assert e_after < 0.5 * e_before
    # ranking unchanged (a logit shift is increasing)
    order = np.argsort(p_before, kind="stable")
    assert (np.diff(p_after[order]) >= -1e-15).all()
    # a second correction of the same shapes does not recompile the solver
    from jaxcal.debias import base_rate

    size = base_rate._solve_shift._cache_size()
    prior_shift_correction(naive, scores[mar_idx][::-1], r[mar_idx])
    assert base_rate._solve_shift._cache_size() == size
    # jit, save / load
    np.testing.assert_allclose(
        jax.jit(corrected.predict)(scores[:50]), corrected.predict(scores[:50]), rtol=1e-12
    )
    corrected.save(tmp_path / "c.npz")
    back = jaxcal.load(tmp_path / "c.npz")
    assert isinstance(back, BaseRateCorrected)
    np.testing.assert_array_equal(back.predict(scores[:50]), corrected.predict(scores[:50]))


def test_prior_shift_correction_errors(sim):
    scores, r = sim["scores"].ravel()[:100], sim["r"].ravel()[:100]
    fit = PlattScaling().fit(scores, np.r_[1, np.zeros(99)])
    with pytest.raises(ValueError, match="predict"):
        prior_shift_correction(object(), scores, r)
    with pytest.raises(ValueError):
        prior_shift_correction(fit, scores, r * 2)
    with pytest.raises(ValueError):
        prior_shift_correction(fit, scores[:10], r)
    with pytest.raises(ValueError):
        prior_shift_correction(fit, np.r_[np.nan, scores[1:]], r)
    with pytest.raises(ValueError, match="propensit"):
        implied_base_rate(r, loss="ips")
    with pytest.raises(ValueError):
        implied_base_rate(r, propensity=np.zeros(r.size), loss="ips")
    with pytest.raises(ValueError, match="loss"):
        negative_sampling_base_rate(57, loss="bogus")
    with pytest.raises(ValueError, match="mean_inverse_propensity"):
        negative_sampling_base_rate(57, loss="ips", mean_inverse_propensity=0.5)


def test_prior_shift_new_sizes_compile_nothing_and_padding_is_exact(compiles):
    from jaxcal._shapes import exact_shapes

    rng = np.random.default_rng(11)

    def sample(m):
        s = rng.normal(size=m)
        return s, (rng.random(m) < 1 / (1 + np.exp(-(s + 0.5)))).astype(np.float64)

    fitted = jaxcal.PlattScaling().fit(*sample(2000))
    s, y = sample(700)
    prior_shift_correction(fitted, s, y).predict(s)  # warm: bucket 1024
    with compiles() as c:
        for m in (800, 1000):
            s, y = sample(m)
            corrected = prior_shift_correction(fitted, s, y, tol=1e-11)
            p = corrected.predict(s)
    assert c.count == 0
    with exact_shapes():
        exact = prior_shift_correction(fitted, s, y, tol=1e-11)
        np.testing.assert_allclose(exact.predict(s), p, rtol=1e-12)
    np.testing.assert_allclose(exact.shift, corrected.shift, rtol=1e-12, atol=1e-12)
