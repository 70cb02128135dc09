"""Metrics from counts by distinct score. Oracles: the in-memory metrics of jaxcal.metrics on
the raw data (float64), and for fractional labels the 0/1 data they stand for (a sample of
label y and weight w is a positive of weight w y and a negative of weight w (1 - y)) or the
direct NumPy sum."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal import metrics
from jaxcal.fitting.score_counts import score_counts
from jaxcal.fitting.streamed_counts import from_chunks

TOL = 1e-12  # float64, up to the order of the sums
NAMES = ["auc", "brier", "nll", "ece", "mce"]


def _sample(rng, n):
    p = np.round(rng.uniform(size=n) ** 2, 3)  # ties
    p[:3] = [0.0, 1.0, 0.5]
    y = (rng.uniform(size=n) < p).astype(float)
    y[3:5] = [0.0, 1.0]
    w = rng.uniform(0.1, 3.0, n)
    w[5] = 0.0
    return p, y, w


def _pair(name):
    return getattr(metrics, name), getattr(metrics, f"{name}_from_counts")


@pytest.mark.parametrize("name", NAMES)
def test_each_metric_equals_the_in_memory_metric(name):
    """Weighted, with ties, zero weights and probabilities 0 and 1; counts streamed in
    chunks give the same."""
    rng = np.random.default_rng(0)
    p, y, w = _sample(rng, 3000)
    direct, from_counts = _pair(name)
    chunks = [(p[i : i + 700], y[i : i + 700], w[i : i + 700]) for i in range(0, 3000, 700)]
    counts = from_chunks(chunks)
    want = float(direct(p, y, sample_weight=w))
    assert abs(from_counts(counts) - want) < TOL
    assert abs(from_counts(score_counts(p, y)) - float(direct(p, y))) < TOL


@pytest.mark.parametrize("n_bins", [7, 15, 40, 100])
@pytest.mark.parametrize("name", ["ece", "mce"])
def test_binned_metrics_with_quantile_bins(name, n_bins):
    """Quantile edges from the sample counts are np.quantile's on the samples."""
    rng = np.random.default_rng(n_bins)
    p, y, w = _sample(rng, 1001 + n_bins)
    direct, from_counts = _pair(name)
    kw = {"n_bins": n_bins, "strategy": "quantile"}
    if name == "mce":
        kw["min_fraction"] = 0.01
    counts = score_counts(p, y, w)
    assert abs(from_counts(counts, **kw) - float(direct(p, y, sample_weight=w, **kw))) < TOL


def test_fractional_labels_are_their_positive_and_negative_parts():
    rng = np.random.default_rng(1)
    p = np.round(rng.uniform(size=500), 2)
    y = rng.uniform(size=500)
    w = rng.uniform(0.5, 2.0, 500)
    counts = score_counts(p, y, w)
    pp, yy, ww = np.r_[p, p], np.r_[np.ones(500), np.zeros(500)], np.r_[w * y, w * (1 - y)]
    for name in ("auc", "nll", "ece", "mce"):
        direct, from_counts = _pair(name)
        assert abs(from_counts(counts) - float(direct(pp, yy, sample_weight=ww))) < TOL
    brier = np.dot(w, (p - y) ** 2) / w.sum()
    assert abs(metrics.brier_from_counts(counts) - brier) < TOL


def test_nll_clipping_follows_eps():
    p, y = np.array([0.0, 1.0, 0.3]), np.array([1.0, 0.0, 1.0])
    counts = score_counts(p, y)
    for eps in (1e-3, 0.1):
        assert (
            abs(metrics.nll_from_counts(counts, eps=eps) - float(metrics.nll(p, y, eps=eps))) < TOL
        )
    with pytest.raises(ValueError, match="eps"):
        metrics.nll_from_counts(counts, eps=0.7)


def test_metrics_reject_what_they_cannot_compute():
    q = score_counts([0.1, 0.2, 0.9], [0, 1, 1], bins=[0.0, 0.5, 1.0])
    for name in NAMES:
        with pytest.raises(ValueError, match="needs exact counts"):
            getattr(metrics, f"{name}_from_counts")(q)
    logits = score_counts([-2.0, 0.5, 3.0], [0, 1, 1])
    assert metrics.auc_from_counts(logits) == 1.0  # any scores
    for name in ("brier", "nll", "ece", "mce"):
        with pytest.raises(ValueError, match="probabilities"):
            getattr(metrics, f"{name}_from_counts")(logits)
    with pytest.raises(ValueError, match="one class"):
        metrics.auc_from_counts(score_counts([0.1, 0.2], [1, 1]))
    with pytest.raises(ValueError, match="strategy"):
        metrics.ece_from_counts(score_counts([0.1], [1]), strategy="x")
    with pytest.raises(ValueError, match="n_bins"):
        metrics.ece_from_counts(score_counts([0.1], [1]), n_bins=0)
    with pytest.raises(ValueError, match="needs a ScoreCounts"):
        metrics.brier_from_counts(([0.1], [1]))
