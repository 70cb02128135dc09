"""Click-model metrics equal direct NumPy formulas (Borisov et al. 2018, Eq. 6) and
brute-force likelihoods."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal.clicks import MODELS, Sessions, ctr_error, log_likelihood, perplexity

from ._bruteforce import click_probabilities, posterior

EXACT = 1e-12


def _data(seed=0, S=50, n=5):
    rng = np.random.default_rng(seed)
    probs = rng.uniform(0.01, 0.99, (S, n))
    clicks = (rng.random((S, n)) < 0.3).astype(int)
    lengths = rng.integers(1, n + 1, S)
    lengths[0] = n
    mask = np.arange(n)[None, :] < lengths[:, None]
    clicks = clicks * mask
    weight = rng.integers(1, 4, S).astype(float)
    return probs, clicks, mask, weight


def test_perplexity_equals_eq6():
    probs, clicks, mask, weight = _data()
    res = perplexity(probs, clicks, mask, sample_weight=weight)
    by_rank = []
    for k in range(probs.shape[1]):
        sel = mask[:, k]
        q = np.where(clicks[sel, k] == 1, probs[sel, k], 1 - probs[sel, k])
        # Eq. 6 over the logged sessions: each row repeated `weight` times
        log2 = np.repeat(np.log2(q), weight[sel].astype(int))
        by_rank.append(2.0 ** (-log2.mean()))
    np.testing.assert_allclose(res.by_rank, by_rank, rtol=1e-12)
    assert abs(float(res.average) - np.mean(by_rank)) < EXACT


def test_perplexity_bounds():
    probs, clicks, mask, _ = _data(1)
    assert abs(float(perplexity(np.full_like(probs, 0.5), clicks, mask).average) - 2.0) < EXACT
    assert abs(float(perplexity(clicks.astype(float), clicks).average) - 1.0) < EXACT


def test_log_likelihood_equals_direct_formula():
    probs, clicks, mask, weight = _data(2)
    per = np.array(
        [
            np.sum(np.where(clicks[s] == 1, np.log(probs[s]), np.log1p(-probs[s]))[mask[s]])
            for s in range(len(probs))
        ]
    )
    kw = {"sample_weight": weight}
    np.testing.assert_allclose(log_likelihood(probs, clicks, mask, reduction="none"), per)
    total = float(log_likelihood(probs, clicks, mask, **kw))
    assert abs(total - weight @ per) < 1e-10
    mean = float(log_likelihood(probs, clicks, mask, reduction="mean", **kw))
    assert abs(mean - weight @ per / weight.sum()) < EXACT
    per_result = float(log_likelihood(probs, clicks, mask, reduction="per_result", **kw))
    assert abs(per_result - weight @ per / (weight @ mask.sum(1))) < EXACT


def test_ctr_error_equals_direct_formula():
    probs, clicks, mask, weight = _data(3)
    rmse, err = ctr_error(probs, clicks, mask, sample_weight=weight)
    want = [
        np.average(probs[mask[:, k], k] - clicks[mask[:, k], k], weights=weight[mask[:, k]])
        for k in range(probs.shape[1])
    ]
    np.testing.assert_allclose(err, want, atol=EXACT)
    assert abs(float(rmse) - np.sqrt(np.mean(np.square(want)))) < EXACT


@pytest.mark.parametrize("name", ["DBN", "CCM", "UBM"])
def test_model_loglik_and_perplexity_equal_enumeration(name):
    """log P(C) of every session, and the marginal perplexity, from a fitted model equal
    enumeration of hidden states with the fitted parameters."""
    rng = np.random.default_rng(4)
    n, S = 3, 30
    doc = np.stack([rng.permutation(5)[:n] for _ in range(S)])
    clicks = (rng.random((S, n)) < 0.4).astype(int)
    log = Sessions.from_arrays(np.zeros(S), doc, clicks)
    fitted = MODELS[name]().fit(log, max_iter=5, prior=(1, 3))
    cond = fitted.predict_conditional(log)
    marg = np.asarray(fitted.predict_marginal(log))
    ll = np.asarray(log_likelihood(cond, clicks, reduction="none"))
    bf_marg = np.zeros((S, n))
    for s in range(S):
        alpha = fitted.pair_value("alpha", 0, doc[s])
        theta = {"sigma": fitted.pair_value("sigma", 0, doc[s]) if name == "DBN" else None}
        if name == "CCM":
            theta["tau"] = np.asarray(fitted.params["tau"])
        else:
            theta["gamma"] = np.asarray(fitted.params["gamma"])
        bf = posterior(name, alpha, theta, clicks[s])
        assert abs(ll[s] - bf["loglik"]) < 1e-10
        bf_marg[s] = click_probabilities(name, alpha, theta, clicks[s])[1]
    np.testing.assert_allclose(marg, bf_marg, atol=EXACT)
    np.testing.assert_allclose(
        perplexity(marg, clicks).by_rank, perplexity(bf_marg, clicks).by_rank, rtol=1e-10
    )


def test_metrics_reject_bad_input():
    probs, clicks, mask, _ = _data()
    with pytest.raises(ValueError, match="shape mismatch"):
        perplexity(probs[:, :3], clicks)
    with pytest.raises(ValueError, match="probabilities"):
        perplexity(probs * 2, clicks)
    with pytest.raises(ValueError, match="probabilities"):
        perplexity(np.where(probs > 0.5, np.nan, probs), clicks)
    with pytest.raises(ValueError, match="0/1"):
        perplexity(probs, clicks * 2 + 0 * mask)
    with pytest.raises(ValueError, match="sample_weight"):
        perplexity(probs, clicks, sample_weight=-np.ones(len(probs)))
    with pytest.raises(ValueError, match="reduction"):
        log_likelihood(probs, clicks, reduction="median")
    with pytest.raises(ValueError, match="non-empty"):
        perplexity(np.zeros((0, 3)), np.zeros((0, 3)))
