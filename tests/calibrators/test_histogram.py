"""Histogram binning against a direct NumPy computation (explicit per-bin loops)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal.calibrators.histogram import FittedHistogram

TOL = 1e-12


def _direct(s, y, w, n_bins, strategy):
    if strategy == "uniform":
        edges = np.array([s.min() + (s.max() - s.min()) * k / n_bins for k in range(1, n_bins)])
    else:
        ss = np.sort(s)
        edges = np.array([ss[(k * s.size) // n_bins] for k in range(1, n_bins)])
    b = np.searchsorted(edges, s, side="right")
    vals, filled = np.zeros(n_bins), np.zeros(n_bins, bool)
    for j in range(n_bins):
        if w[b == j].sum() > 0:
            vals[j] = np.clip((w * y)[b == j].sum() / w[b == j].sum(), 0, 1)
            filled[j] = True
    full = np.flatnonzero(filled)
    for j in np.flatnonzero(~filled):  # nearest filled bin, left on ties
        d = np.abs(full - j)
        vals[j] = vals[full[np.flatnonzero(d == d.min())[0]]]
    return lambda q: vals[np.searchsorted(edges, q, side="right")], vals


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
def test_matches_direct(strategy):
    rng = np.random.default_rng(0)
    s = np.r_[rng.normal(size=150), np.full(40, 0.3), rng.normal(5, 0.1, 10)]  # ties, gaps
    y = (rng.uniform(size=s.size) < 0.4).astype(float)
    y[:2] = [0, 1]
    w = rng.uniform(0.1, 2, s.size)
    cal = jaxcal.HistogramBinning(n_bins=12, strategy=strategy).fit(s, y, sample_weight=w)
    pred, vals = _direct(s, y, w, 12, strategy)
    q = np.r_[s, rng.uniform(-6, 8, 100)]
    np.testing.assert_allclose(np.asarray(cal.predict(q)), pred(q), atol=TOL)
    np.testing.assert_allclose(np.asarray(cal.values), vals, atol=TOL)
    if strategy == "uniform":
        assert np.any(np.asarray(cal.bin_weight) == 0)  # the gap leaves empty bins


def test_empty_bin_rule_keeps_monotone_histogram_monotone():
    s = np.array([0.0, 0.05, 0.1, 0.9, 0.95, 1.0])
    y = np.array([0, 0, 1, 1, 1, 1])
    cal = jaxcal.HistogramBinning(n_bins=10, strategy="uniform").fit(s, y)
    v = np.asarray(cal.values)
    assert np.all(np.diff(v) >= 0)
    assert v[4] == v[1] and v[5] == v[9]  # bins 2..4 take bin 1's value, 5..8 bin 9's


def test_save_load_jit(tmp_path):
    rng = np.random.default_rng(1)
    s = rng.normal(size=80)
    y = (s + rng.normal(size=80) > 0).astype(int)
    cal = jaxcal.HistogramBinning(n_bins=5).fit(s, y)
    cal.save(tmp_path / "h.npz")
    back = jaxcal.load(tmp_path / "h.npz")
    assert isinstance(back, FittedHistogram)
    q = rng.normal(size=20)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda c, x: c.predict(x))(back, q)), np.asarray(cal.predict(q))
    )


@pytest.mark.parametrize(
    ("hyper", "scores", "labels", "match"),
    [
        ({"n_bins": 0}, [0.1, 0.2], [0, 1], "n_bins"),
        ({"strategy": "kmeans"}, [0.1, 0.2], [0, 1], "strategy"),
        ({}, [0.1, 0.2], [0, 0], "one class"),
        ({}, [0.1, 0.2, 0.3], [0, 1], "length mismatch"),
    ],
)
def test_bad_inputs(hyper, scores, labels, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.HistogramBinning(**hyper).fit(scores, labels)


def test_presort_sorts_rows_by_key_on_cpu_only_when_asked():
    """``jaxcal._scan.presort``: rows reordered with their key (checked against a lexsort
    of the pairs, ties in any order), or returned as given with ``when=False``."""
    from jaxcal._scan import presort

    rng = np.random.default_rng(0)
    key = rng.integers(0, 20, 500).astype(float)
    row = rng.normal(size=500)
    done, k, r = presort(key, row)
    assert done == (jax.default_backend() == "cpu")
    if done:
        assert np.all(np.diff(k) >= 0)
        ref = np.lexsort((row, key))
        np.testing.assert_array_equal(
            np.sort(np.c_[k, r].view("f8,f8"), axis=0).ravel(),
            np.c_[key[ref], row[ref]].view("f8,f8").ravel(),
        )
    same = presort(key, row, when=False)
    assert same[0] is False and same[1] is key and same[2] is row
