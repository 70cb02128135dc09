"""Shape policy of the click models: fits, predictions, metrics and calibration pad the
sessions (masked rows of weight 0) and the pair tables (ids no session uses) to bucket sizes.

Padded results equal unpadded ones (``exact_shapes``) to float64 rounding, and a new log size
inside a bucket compiles nothing."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal import _shapes
from jaxcal.clicks import (
    MODELS,
    RankCalibration,
    RunOptions,
    Sessions,
    ctr_error,
    log_likelihood,
    perplexity,
    reliability_by_rank,
)

EXACT = 1e-12  # float64: padding adds exact zeros; only the order of some sums changes


def _log(seed, n_sessions, n=6, n_queries=4, n_docs=8):
    """A NumPy-built log (no JAX work) with repeated SERPs, short SERPs and no-click rows;
    at most ``n_queries * n_docs`` pairs, so logs of any size share a pair-table bucket."""
    rng = np.random.default_rng(seed)
    query = rng.integers(0, n_queries, n_sessions)
    doc = np.argsort(rng.random((n_sessions, n_docs)), axis=1)[:, :n]
    lengths = rng.integers(2, n + 1, n_sessions)
    lengths[0] = n
    mask = np.arange(n)[None, :] < lengths[:, None]
    clicks = (rng.random((n_sessions, n)) < 0.35) & mask
    weight = rng.integers(1, 4, n_sessions).astype(float)
    return Sessions.from_arrays(query, doc, clicks.astype(int), mask, weight)


def _assert_fits_equal(a, b):
    assert int(a.n_iter) == int(b.n_iter)
    np.testing.assert_allclose(a.history, b.history, rtol=EXACT, atol=EXACT)
    assert a.params.keys() == b.params.keys()
    for k in a.params:
        assert a.params[k].shape == b.params[k].shape, k
        np.testing.assert_allclose(a.params[k], b.params[k], rtol=EXACT, atol=EXACT, err_msg=k)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_padded_fit_and_predictions_equal_unpadded(name):
    """75 sessions pad to 128 rows, 25 pair slots to 32: the same fit (parameters, EM
    iterations, objective trace) and the same predictions as the exact shapes."""
    log = _log(0, 75, n_queries=4, n_docs=6)
    fit_kw = {"prior": (2.0, 7.0), "max_iter": 8, "tol": 0.0, "run": RunOptions(dedup=False)}
    padded = MODELS[name]().fit(log, **fit_kw)
    with _shapes.exact_shapes():
        exact = MODELS[name]().fit(log, **fit_kw)
        exact_cond = exact.predict_conditional(log)
        exact_marg = exact.predict_marginal(log)
    _assert_fits_equal(padded, exact)
    np.testing.assert_allclose(padded.predict_conditional(log), exact_cond, atol=EXACT)
    np.testing.assert_allclose(padded.predict_marginal(log), exact_marg, atol=EXACT)
    assert padded.predict_marginal(log).shape == (75, log.n_results)


def test_em_stops_at_the_same_iteration_when_padded():
    """The stopping rule (largest parameter change < tol) is not moved by the padding of the
    pair tables: the padded entries move like the unseen-pair slot."""
    log = _log(1, 300)
    padded = MODELS["DBN"]().fit(log, max_iter=200, tol=1e-7)
    with _shapes.exact_shapes():
        exact = MODELS["DBN"]().fit(log, max_iter=200, tol=1e-7)
    assert 1 < int(exact.n_iter) < 200
    _assert_fits_equal(padded, exact)


@pytest.mark.parametrize("name", ["PBM", "DBN", "SDBN"])
def test_new_log_size_in_bucket_does_not_compile(compiles, name):
    """Logs of 600, 700 and 900 sessions all pad to 1024 rows (64 pair slots): after the
    first fit and predictions, new sizes and new prior / tol values compile nothing."""
    est = MODELS[name]()
    first = est.fit(_log(2, 600), max_iter=10, run=RunOptions(dedup=False))
    first.predict_conditional(_log(3, 600))
    first.predict_marginal(_log(3, 600))
    with compiles() as c:
        for seed, size in ((4, 700), (5, 900)):
            log = _log(seed, size)
            fitted = est.fit(
                log, max_iter=10, prior=(1.0 + seed, 20.0), tol=1e-5, run=RunOptions(dedup=False)
            )
            fitted.predict_conditional(log)
            fitted.predict_marginal(log)
            first.predict_marginal(log)
    assert c.count == 0


def test_metrics_new_size_in_bucket_do_not_compile(compiles):
    rng = np.random.default_rng(6)

    def data(S, n=6):
        probs = rng.uniform(0.01, 0.99, (S, n))
        clicks = (rng.random((S, n)) < 0.3).astype(int)
        mask = np.arange(n)[None, :] < rng.integers(1, n + 1, S)[:, None]
        return probs, clicks * mask, mask, rng.integers(1, 4, S).astype(float)

    def every_metric(probs, clicks, mask, weight, eps):
        kw = {"sample_weight": weight}
        perplexity(probs, clicks, mask, eps=eps, **kw)
        for reduction in ("sum", "mean", "per_result", "none"):
            log_likelihood(probs, clicks, mask, reduction=reduction, eps=eps, **kw)
        ctr_error(probs, clicks, mask, **kw)
        reliability_by_rank(probs, clicks, mask, n_bins=20, **kw)

    every_metric(*data(600), 0.0)
    with compiles() as c:
        every_metric(*data(700), 1e-3)
        every_metric(*data(900), 0.01)
    assert c.count == 0


def test_padded_metrics_equal_unpadded():
    rng = np.random.default_rng(7)
    S, n = 75, 5
    probs = rng.uniform(0.01, 0.99, (S, n))
    mask = np.arange(n)[None, :] < rng.integers(1, n + 1, S)[:, None]
    clicks = (rng.random((S, n)) < 0.3).astype(int) * mask
    kw = {"sample_weight": rng.integers(1, 4, S).astype(float)}

    def every_metric():
        out = [*perplexity(probs, clicks, mask, eps=1e-3, **kw), *ctr_error(probs, clicks, mask)]
        for reduction in ("sum", "mean", "per_result", "none"):
            out.append(log_likelihood(probs, clicks, mask, reduction=reduction, **kw))
        out.extend(reliability_by_rank(probs, clicks, mask, n_bins=10, **kw))
        return [np.asarray(x) for x in out]

    padded = every_metric()
    with _shapes.exact_shapes():
        exact = every_metric()
    assert padded[7].shape == (S,)  # reduction="none"
    for x, y in zip(padded, exact, strict=True):
        np.testing.assert_allclose(x, y, rtol=EXACT, atol=EXACT, equal_nan=True)


def test_rank_calibration_padded_equals_unpadded_and_does_not_compile(compiles):
    """The knots are padded to a bucket above 1 (constant: exact for probabilities), the
    development rows to theirs; a calibration of a new size reuses the compiled programs."""
    rng = np.random.default_rng(8)

    def dev(S, n=4):  # 11 distinct probabilities: at most 11 knots per rank, one bucket
        probs = rng.uniform(0, 1, (S, n)).round(1)
        clicks = (rng.random((S, n)) < probs**2).astype(int)
        return probs, clicks

    probs, clicks = dev(300)
    cal = RankCalibration().fit(probs, clicks)
    out = cal.predict(probs)
    with _shapes.exact_shapes():
        exact = RankCalibration().fit(probs, clicks)
        exact_out = exact.predict(probs)
    assert exact.knots_x.shape[1] < cal.knots_x.shape[1]  # the padded knots
    np.testing.assert_allclose(out, exact_out, rtol=EXACT, atol=EXACT)
    with compiles() as c:
        for S in (400, 500):
            p, y = dev(S)
            RankCalibration(trim=0.02).fit(p, y).predict(p)
            cal.predict(p)
    assert c.count == 0
