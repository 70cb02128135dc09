"""The shape policy (``jaxcal._shapes``) in the metrics.

Every metric on inputs padded to their bucket size equals the metric without padding
(``exact_shapes``) to float64 rounding, bins placed by the data (equal-mass edges) are those
of the real data, and new sizes inside a bucket, or new values of numeric hyperparameters,
compile nothing.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal import _shapes
from jaxcal.metrics import (
    auc,
    brier,
    cal_n,
    debiased_ece,
    ece,
    field_ece,
    field_rce,
    gc_n,
    mce,
    nll,
    pcoc,
    ranking,
    reliability,
    smooth_ece,
)
from jaxcal.metrics.calibration import bin_edges

EXACT = 1e-12  # padded vs unpadded in float64: padding adds exact zeros to every sum

SIZES = (700, 900)  # both pad to 1024, like the warm-up size 600


def _data(n, seed=0):
    rng = np.random.default_rng(seed + n)
    s = rng.normal(size=n)
    p = np.round(1 / (1 + np.exp(-s)), 2)  # ties, and probabilities on bin edges
    y = (rng.uniform(size=n) < p).astype(float)
    w = rng.uniform(0.2, 2.0, n)
    w[rng.uniform(size=n) < 0.05] = 0.0
    g = rng.integers(0, 7, n)
    fields = np.stack([g, rng.integers(0, 3, n)], axis=1)
    return s, p, y, w, g, fields


def _matrix(n, seed=0):
    """A ``[n_users, n_items]`` problem with a ragged mask (users of every kind)."""
    rng = np.random.default_rng(seed + n)
    users, items = 13, n // 13
    s = np.round(rng.normal(size=(users, items)), 1)
    y = (rng.uniform(size=s.shape) < 1 / (1 + np.exp(-s))).astype(float)
    m = rng.uniform(size=s.shape) < 0.6
    y[0] = 0.0  # a user without positives
    return s, y, m


# name -> metric(data, hyper); hyper: one value per call of the compile test
METRICS = {
    "ece": lambda d, h: ece(d[1], d[2], sample_weight=d[3]),
    "ece-quantile": lambda d, h: ece(d[1], d[2], strategy="quantile", n_bins=10),
    "mce": lambda d, h: mce(d[1], d[2], sample_weight=d[3], min_count=h),
    "mce-quantile": lambda d, h: mce(d[1], d[2], strategy="quantile", min_fraction=h / 1e3),
    "nll": lambda d, h: nll(d[1], d[2], sample_weight=d[3], eps=h * 1e-7),
    "brier": lambda d, h: brier(d[1], d[2], sample_weight=d[3]),
    "reliability": lambda d, h: reliability(d[1], d[2], sample_weight=d[3]),
    "reliability-quantile": lambda d, h: reliability(
        d[1], d[2], strategy="quantile", symmetric=True
    ),
    "auc": lambda d, h: auc(d[0], d[2], sample_weight=d[3]),
    "pcoc": lambda d, h: pcoc(d[1], d[2], sample_weight=d[3]),
    "cal_n": lambda d, h: cal_n(d[1], d[2], sample_weight=d[3], n_bins=5),
    "cal_n-uniform": lambda d, h: cal_n(d[1], d[2], strategy="uniform", n_bins=4),
    "gc_n": lambda d, h: gc_n(d[1], d[2], d[4], n_bins=3),
    "gc_n-count": lambda d, h: gc_n(d[1], d[2], d[4], n_bins=3, group_weight="count"),
    "field_ece": lambda d, h: field_ece(d[1], d[2], d[4], sample_weight=d[3]),
    "field_ece-columns": lambda d, h: field_ece(d[1], d[2], d[5]),
    "field_rce": lambda d, h: field_rce(d[1], d[2], d[5], eps=h * 1e-4, sample_weight=d[3]),
    "debiased_ece": lambda d, h: debiased_ece(d[1], d[2], n_bins=5, sample_weight=d[3]),
    "debiased_ece-l1": lambda d, h: debiased_ece(
        d[1], d[2], n_bins=5, p=1, key=jax.random.key(h), n_resamples=50
    ),
    "smooth_ece": lambda d, h: smooth_ece(d[1], d[2], sample_weight=d[3], n_grid=101),
    "smooth_ece-sigma": lambda d, h: smooth_ece(d[1], d[2], sigma=0.05 * h, return_sigma=True),
}

RANKING = {
    "auc": lambda d, h: ranking.auc(*d[:2], mask=d[2]),
    "auc-per-user": lambda d, h: ranking.auc(*d[:2], mask=d[2], per_user=True),
    "ndcg": lambda d, h: ranking.ndcg_at_k(*d[:2], mask=d[2], k=5),
    "ndcg-per-user": lambda d, h: ranking.ndcg_at_k(*d[:2], mask=d[2], k=5, per_user=True),
    "recall": lambda d, h: ranking.recall_at_k(*d[:2], mask=d[2], k=5),
}


def _leaves(out):
    return [np.asarray(a) for a in jax.tree.leaves(out)]


def _assert_equal(a, b):
    for x, z in zip(_leaves(a), _leaves(b), strict=True):
        assert x.shape == z.shape
        np.testing.assert_allclose(x, z, rtol=0, atol=EXACT, equal_nan=True)


@pytest.mark.parametrize("name", sorted(METRICS))
def test_padded_equals_unpadded(name):
    d = _data(700)
    padded = METRICS[name](d, 1)
    with _shapes.exact_shapes():
        exact = METRICS[name](d, 1)
    _assert_equal(padded, exact)


@pytest.mark.parametrize("name", sorted(RANKING))
def test_ranking_padded_equals_unpadded(name):
    d = _matrix(700)
    padded = RANKING[name](d, 1)
    with _shapes.exact_shapes():
        exact = RANKING[name](d, 1)
    _assert_equal(padded, exact)


def test_quantile_bins_are_those_of_the_data():
    """Padding happens after the equal-mass edges are placed: the reported edges and counts
    are those of the real points."""
    _, p, y, _, _, _ = _data(700)
    r = reliability(p, y, strategy="quantile", n_bins=8)
    edges = bin_edges(p, n_bins=8, strategy="quantile")
    np.testing.assert_array_equal(np.asarray(r.edges), edges)
    inner = np.searchsorted(edges[1:-1], p, side="right")
    np.testing.assert_array_equal(np.asarray(r.count), np.bincount(inner, minlength=8))


@pytest.mark.parametrize("name", sorted(METRICS))
def test_new_sizes_in_a_bucket_compile_nothing(name, compiles):
    metric = METRICS[name]
    jax.block_until_ready(metric(_data(600), 1))  # warm-up
    inputs = [_data(n, seed=1) for n in SIZES]
    with compiles() as c:
        for d, h in zip(inputs, (2, 3), strict=True):
            jax.block_until_ready(metric(d, h))
    assert c.count == 0


@pytest.mark.parametrize("name", sorted(RANKING))
def test_ranking_new_sizes_in_a_bucket_compile_nothing(name, compiles):
    metric = RANKING[name]
    jax.block_until_ready(metric(_matrix(600), 1))  # 13 x 46 users x items -> 32 x 64
    inputs = [_matrix(n, seed=1) for n in SIZES]  # 13 x 53 -> 32 x 64
    inputs[1] = tuple(a[:, :60] for a in inputs[1])  # 13 x 69 would pad to 32 x 128
    with compiles() as c:
        for d, h in zip(inputs, (2, 3), strict=True):
            jax.block_until_ready(metric(d, h))
    assert c.count == 0
