"""``prior="empirical"``: the attractiveness prior learned by Gamma-Poisson empirical Bayes."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import optimize, stats

import jaxcal
from jaxcal.clicks import (
    DBN,
    MODELS,
    PBM,
    _empirical,
    example_params,
    perplexity,
    read_tiangong,
    simulate,
)
from jaxcal.clicks._em import make_batch
from jaxcal.clicks.sessions import encode_pairs


def test_log_marginal_is_the_negative_binomial_likelihood():
    """Differences between two priors equal those of scipy's negative binomial pmf (the
    terms free of the prior drop out)."""
    rng = np.random.default_rng(0)
    n = rng.uniform(0.1, 30, size=50)
    c = rng.poisson(n * 0.2).astype(float)
    priors = [(2.0, 9.0), (0.7, 3.0)]

    def scipy_ll(a, b):
        return stats.nbinom.logpmf(c, a, b / (b + n)).sum()

    ours = [float(_empirical._value(np.log(np.array(p)), c, n)) for p in priors]
    assert abs((ours[0] - ours[1]) - (scipy_ll(*priors[0]) - scipy_ll(*priors[1]))) < 1e-9
    # pairs never examined add nothing
    padded = float(_empirical._value(np.log(np.array(priors[0])), np.r_[c, 0, 0], np.r_[n, 0, 0]))
    assert abs(padded - ours[0]) < 1e-12


def test_fit_equals_scipy_and_recovers_the_truth():
    """Rates drawn from Gamma(a=3, b=12) (mean 0.25), Poisson clicks over uneven exposure: the
    fit is scipy's maximiser, and the truth lies within 4 standard errors (from the observed
    information)."""
    rng = np.random.default_rng(1)
    m = 20_000
    n = rng.gamma(2.0, 10.0, size=m)
    rate = rng.gamma(3.0, 1 / 12.0, size=m)
    c = rng.poisson(rate * n).astype(float)
    evidence = np.stack([c, n], axis=1)
    a, b = _empirical.learned_prior(evidence, m, np.array([1.0, 2.0]))

    def neg(z):
        return -float(_empirical._value(z, c, n))

    best = optimize.minimize(neg, x0=np.log([1.0, 4.0]), method="Nelder-Mead",
                             options={"xatol": 1e-10, "fatol": 1e-10, "maxiter": 4000})  # fmt: skip
    np.testing.assert_allclose([np.log(a), np.log(b)], best.x, atol=1e-5)
    _, h = _empirical._derivatives(np.log(np.array([a, b])), c, n)
    se = np.sqrt(np.diag(np.linalg.inv(-np.asarray(h))))
    assert np.all(np.abs(np.log([a, b]) - np.log([3.0, 12.0])) < 4 * se), (a, b, se)


def test_no_overdispersion_stops_at_the_bound_at_the_pooled_rate():
    n = np.full(500, 10.0)
    c = np.full(500, 2.0)  # every pair the same rate: the likelihood grows towards a point mass
    a, b = _empirical.learned_prior(np.stack([c, n], 1), 500, np.array([1.0, 2.0]))
    assert max(a, b) > 0.99 * _empirical.BOUNDS[1]  # at the bound (up to the last step)
    assert a / b == pytest.approx(0.2, rel=1e-6)
    # nothing examined: the initial prior
    got = _empirical.learned_prior(np.zeros((3, 2)), 3, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(got, [1.0, 2.0])


def test_pair_evidence_counts_clicks_and_examinations():
    """Clicks and sum of P(C_r = 1 | C_<r) / alpha per pair, against a loop over sessions of
    the fitted model's own predictions."""
    log = simulate("DBN", example_params("DBN", n_queries=5), 300, key=jax.random.key(0))
    fit = DBN().fit(log, max_iter=5)
    index, qd = encode_pairs(log)
    P = len(index.query)
    batch = make_batch(qd, np.asarray(log.clicks), np.asarray(log.mask), log.weight, None,
                       fill_id=P)  # fmt: skip
    params = fit._padded_params()
    got = _empirical.pair_evidence(type(fit)._conditional_fn, params, [batch])
    cond = np.asarray(fit.predict_conditional(log))
    alpha = np.asarray(fit.params["alpha"])
    want = np.zeros((P, 2))
    for s in range(log.n_sessions):
        for r in range(log.n_results):
            if log.mask[s, r]:
                i = qd[s, r]
                want[i] += [log.clicks[s, r], cond[s, r] / alpha[i]]
    np.testing.assert_allclose(got[:P], want, rtol=1e-10)
    assert np.all(got[P:] == 0)


@pytest.fixture(scope="module")
def tiangong(data_dir):
    folder = data_dir / "tiangong-st-demo"
    return (read_tiangong(folder / f"{part}_per_query_quid.txt") for part in ("train", "test"))


def test_on_the_real_log_the_learned_prior_beats_the_default(tiangong, tmp_path):
    """Most test pairs of the TianGong-ST log are unseen: DBN's test perplexity with the
    learned prior is lower than with the default (1, 2), and lower than with (1, 5) too (the
    better of the fixed priors the docs compare). Streamed: the same model."""
    train, test = tiangong

    def ppl(model):
        return perplexity(model.predict_marginal(test), test.clicks, test.mask).average

    learned = DBN().fit(train, prior="empirical")
    a, b = learned.learned_prior["alpha"]
    assert 0 < a < b and learned.prior == (1.0, 2.0)
    assert ppl(learned) < ppl(DBN().fit(train, prior=(1, 5))) < ppl(DBN().fit(train))
    # unseen pairs predict the learned rate
    assert float(learned.params["alpha"][-1]) == pytest.approx(a / b, rel=1e-10)
    streamed = DBN().fit(lambda: iter([train[:1000], train[1000:]]), prior="empirical")
    np.testing.assert_allclose(streamed.learned_prior["alpha"], [a, b], rtol=1e-8)
    np.testing.assert_allclose(streamed.params["alpha"], learned.params["alpha"], rtol=1e-8)
    learned.save(tmp_path / "m.npz")
    np.testing.assert_array_equal(jaxcal.load(tmp_path / "m.npz").learned_prior["alpha"], [a, b])


def test_bad_prior_names_are_refused():
    log = simulate("PBM", example_params("PBM", n_queries=2), 20, key=jax.random.key(0))
    with pytest.raises(ValueError, match='"empirical"'):
        PBM().fit(log, prior="empiric")
    with pytest.raises(ValueError, match="has none"):
        MODELS["GCTR"]().fit(log, prior="empirical")
