"""Per-rank isotonic calibration (Borisov et al. 2018) vs scikit-learn and the optimality of
the isotonic fit on its own data."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.clicks import (
    DBN,
    RankCalibration,
    Sessions,
    calibrate_click_model,
    example_params,
    perplexity,
    reliability_by_rank,
    simulate,
)

EXACT = 1e-10
TRIM = 0.01


def _dev(seed=0, S=400, n=4):
    rng = np.random.default_rng(seed)
    probs = rng.uniform(0, 1, (S, n)).round(2)  # rounding creates ties
    # miscalibrated: true CTR is probs ** 2 at rank 1, sqrt(probs) below
    true = np.where(np.arange(n) == 0, probs**2, np.sqrt(probs))
    clicks = (rng.random((S, n)) < true).astype(int)
    lengths = rng.integers(2, n + 1, S)
    mask = np.arange(n)[None, :] < lengths[:, None]
    clicks = clicks * mask
    weight = rng.integers(1, 4, S).astype(float)
    return probs, clicks, mask, weight


def test_per_rank_fit_equals_sklearn():
    probs, clicks, mask, weight = _dev()
    fitted = RankCalibration(trim=TRIM).fit(probs, clicks, mask, sample_weight=weight)
    grid = np.linspace(-0.1, 1.1, 241)
    got_grid = np.asarray(fitted.predict(np.tile(grid[:, None], (1, probs.shape[1]))))
    got_dev = np.asarray(fitted.predict(probs))
    for r in range(probs.shape[1]):
        sel = mask[:, r]
        iso = IsotonicRegression(y_min=TRIM, y_max=1 - TRIM, out_of_bounds="clip")
        iso.fit(probs[sel, r], clicks[sel, r], sample_weight=weight[sel])
        np.testing.assert_allclose(got_dev[sel, r], iso.predict(probs[sel, r]), atol=EXACT)
        np.testing.assert_allclose(got_grid[:, r], iso.predict(grid), atol=EXACT)


def test_one_class_and_empty_ranks():
    """A rank whose clicks are all 0 (or all 1) gets the constant fit, trimmed, as in
    scikit-learn; a rank without data gets the identity, trimmed."""
    probs, clicks, mask, weight = _dev(3)
    clicks[:, 1] = 0
    clicks[:, 2] = mask[:, 2]
    mask[:, 3] = False
    fitted = RankCalibration(trim=TRIM).fit(probs, clicks, mask, sample_weight=weight)
    grid = np.linspace(-0.1, 1.1, 241)
    got = np.asarray(fitted.predict(np.tile(grid[:, None], (1, probs.shape[1]))))
    for r in (1, 2):
        sel = mask[:, r]
        iso = IsotonicRegression(y_min=TRIM, y_max=1 - TRIM, out_of_bounds="clip")
        iso.fit(probs[sel, r], clicks[sel, r], sample_weight=weight[sel])
        np.testing.assert_allclose(got[:, r], iso.predict(grid), atol=EXACT)
    np.testing.assert_allclose(got[:, 3], np.clip(grid, TRIM, 1 - TRIM), atol=EXACT)


def test_calibrated_perplexity_on_dev_never_worse():
    """PAV is the isotonic Bernoulli MLE: on the data it was fitted to, its log-likelihood at
    each rank is >= that of every monotone map into [delta, 1 - delta], in particular of the
    model's probabilities clipped to that range."""
    probs, clicks, mask, weight = _dev(1)
    fitted = RankCalibration(trim=TRIM).fit(probs, clicks, mask, sample_weight=weight)
    cal = perplexity(fitted.predict(probs), clicks, mask, sample_weight=weight).by_rank
    raw = perplexity(np.clip(probs, TRIM, 1 - TRIM), clicks, mask, sample_weight=weight).by_rank
    assert np.all(np.asarray(cal) <= np.asarray(raw) + 1e-12)
    assert np.all(np.asarray(cal) < np.asarray(raw) - 1e-3)  # and here strictly better
    # trimmed range
    out = np.asarray(fitted.predict(probs))
    assert out.min() >= TRIM - 1e-15 and out.max() <= 1 - TRIM + 1e-15


def test_calibrated_click_model_composes_and_round_trips(tmp_path):
    p = example_params("DBN", n_queries=4, key=jax.random.key(0))
    train = simulate("DBN", p, 2000, key=jax.random.key(0))
    dev = simulate("DBN", p, 1000, key=jax.random.key(1))
    model = DBN().fit(train, prior=(1, 10), max_iter=10)
    cal = calibrate_click_model(model, dev)
    # conditional and marginal are calibrated separately, each equal to a direct fit
    for kind in ("conditional", "marginal"):
        raw = getattr(model, f"predict_{kind}")(dev)
        direct = RankCalibration().fit(raw, dev.clicks, dev.mask)
        np.testing.assert_allclose(
            getattr(cal, f"predict_{kind}")(dev), direct.predict(raw), atol=EXACT
        )
    # calibration on dev beats the prior-(1, 10) model on dev (optimality, marginal)
    ppl_raw = perplexity(np.clip(model.predict_marginal(dev), TRIM, 1 - TRIM), dev.clicks)
    ppl_cal = perplexity(cal.predict_marginal(dev), dev.clicks)
    assert float(ppl_cal.average) <= float(ppl_raw.average)
    # save / load and jit
    cal.save(tmp_path / "cal.npz")
    back = jaxcal.load(tmp_path / "cal.npz")
    assert type(back) is type(cal) and back.marginal.trim == TRIM
    np.testing.assert_array_equal(back.marginal.knots_x, cal.marginal.knots_x)
    np.testing.assert_array_equal(back.predict_marginal(dev), cal.predict_marginal(dev))
    raw = model.predict_marginal(dev)
    np.testing.assert_allclose(
        jax.jit(lambda f, x: f.predict(x))(cal.marginal, raw), cal.marginal.predict(raw), atol=0
    )


def test_reliability_by_rank_equals_direct_bucketing():
    probs, clicks, mask, weight = _dev(2)
    probs[0, 0] = 1.0  # falls into the last bucket
    d = reliability_by_rank(probs, clicks, mask, sample_weight=weight, n_bins=100)
    assert d.ctr.shape == (probs.shape[1], 100)
    for r in range(probs.shape[1]):
        for b in range(100):
            lo, hi = b / 100, (b + 1) / 100
            sel = mask[:, r] & (probs[:, r] >= lo) & ((probs[:, r] < hi) | (b == 99))
            assert abs(d.count[r, b] - weight[sel].sum()) < EXACT
            if sel.any():
                want = np.average(clicks[sel, r], weights=weight[sel])
                assert abs(d.ctr[r, b] - want) < EXACT
            else:
                assert np.isnan(d.ctr[r, b])


def test_bad_input_raises():
    probs, clicks, mask, _ = _dev()
    for trim in (0.6, -0.1, 0.5, float("nan"), "0.1", True):  # checked when made
        with pytest.raises(ValueError, match="trim"):
            RankCalibration(trim=trim)
    with pytest.raises(ValueError, match="trim"):
        calibrate_click_model(DBN().fit(Sessions.from_arrays([0], [[1]], [[1]])), None, trim=1)
    with pytest.raises(ValueError, match="probabilities"):
        RankCalibration().fit(probs + 1, clicks)
    with pytest.raises(ValueError, match="0/1"):
        RankCalibration().fit(probs, clicks + 2)
    with pytest.raises(ValueError, match="shape mismatch"):
        RankCalibration().fit(probs, clicks[:, :2])
    with pytest.raises(ValueError, match="n_bins"):
        reliability_by_rank(probs, clicks, n_bins=0)
    fitted = RankCalibration().fit(probs, clicks)
    with pytest.raises(ValueError, match="ranks"):
        fitted.predict(np.zeros((3, 9)))
    with pytest.raises(ValueError, match="fitted click model"):
        calibrate_click_model(probs, None)
