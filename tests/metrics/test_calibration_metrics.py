"""Calibration metrics against a direct numpy loop, scikit-learn and hypothesis properties."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from sklearn.calibration import calibration_curve
from sklearn.metrics import brier_score_loss, log_loss

from jaxcal.metrics import brier, ece, mce, nll, reliability
from jaxcal.metrics import calibration as cal

TOL = 1e-10  # float64, exact up to summation order


# ----------------------------------------------------------------- the numpy reference


def loop_reference(p, y, w, edges, *, symmetric=False, min_count=1):
    """Straight loop over bins: [e_b, e_{b+1}), last bin closed."""
    n_bins = len(edges) - 1
    total = w.sum()
    ece_sum, mce_val = 0.0, np.nan
    rows = []
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        inside = (p >= lo) & ((p < hi) if b < n_bins - 1 else (p <= hi))
        if b == 0:
            inside |= p < lo
        wb = w[inside].sum()
        if wb <= 0:
            rows.append((inside.sum(), 0.0, np.nan, np.nan))
            continue
        conf = (w[inside] * p[inside]).sum() / wb
        acc = (w[inside] * y[inside]).sum() / wb
        if symmetric and (lo + hi) / 2 < 0.5:
            conf, acc = 1 - conf, 1 - acc
        gap = abs(acc - conf)
        ece_sum += wb / total * gap
        if inside.sum() >= min_count:
            mce_val = gap if np.isnan(mce_val) else max(mce_val, gap)
        rows.append((inside.sum(), wb, conf, acc))
    return ece_sum, mce_val, np.array(rows, dtype=float)


def sample(rng, n, *, skew=1.0):
    p = rng.uniform(size=n) ** skew
    y = (rng.uniform(size=n) < np.clip(p * 1.2 - 0.05, 0, 1)).astype(float)
    w = rng.uniform(0.1, 3.0, size=n)
    return p, y, w


@pytest.mark.parametrize("strategy", ["uniform", "quantile"])
@pytest.mark.parametrize("symmetric", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_matches_numpy_loop(strategy, symmetric, weighted):
    rng = np.random.default_rng(0)
    p, y, w = sample(rng, 2000, skew=2.0)
    w = w if weighted else np.ones_like(p)
    kw = dict(n_bins=15, strategy=strategy, sample_weight=w if weighted else None)
    edges = cal.bin_edges(p, n_bins=15, strategy=strategy)
    ref_ece, ref_mce, rows = loop_reference(p, y, w, edges, symmetric=symmetric, min_count=5)
    assert abs(float(ece(p, y, symmetric=symmetric, **kw)) - ref_ece) < TOL
    assert abs(float(mce(p, y, min_count=5, symmetric=symmetric, **kw)) - ref_mce) < TOL
    r = reliability(p, y, symmetric=symmetric, **kw)
    got = np.stack([r.count, r.weight, r.confidence, r.accuracy], axis=1)
    np.testing.assert_allclose(got, rows, rtol=TOL, atol=TOL, equal_nan=True)
    if strategy == "quantile":  # equal mass: every bin holds n / n_bins samples
        counts = np.asarray(r.count)
        assert counts.sum() == 2000 and counts.max() - counts.min() <= 1


def test_uniform_bins_match_sklearn_calibration_curve():
    rng = np.random.default_rng(1)
    p, y, _ = sample(rng, 5000)
    prob_true, prob_pred = calibration_curve(y, p, n_bins=10, strategy="uniform")
    r = reliability(p, y, n_bins=10)
    keep = np.asarray(r.count) > 0
    np.testing.assert_allclose(np.asarray(r.accuracy)[keep], prob_true, rtol=TOL)
    np.testing.assert_allclose(np.asarray(r.confidence)[keep], prob_pred, rtol=TOL)


def test_edges_and_boundary_values():
    # p = 1.0 lands in the last bin, p = 0.0 in the first, an inner edge opens its bin.
    r = reliability([0.0, 0.5, 1.0, 1.0], [0, 1, 1, 0], n_bins=4)
    np.testing.assert_array_equal(np.asarray(r.count), [1, 0, 1, 2])
    np.testing.assert_array_equal(np.asarray(r.edges), [0, 0.25, 0.5, 0.75, 1.0])
    # closed form: bins {0}, {0.5: y=1}, {1, 1: y = 1, 0} -> (0 + 0.5 + 2 * 0.5) / 4
    assert abs(float(ece([0.0, 0.5, 1.0, 1.0], [0, 1, 1, 0], n_bins=4)) - 1.5 / 4) < TOL
    assert abs(float(mce([0.0, 0.5, 1.0, 1.0], [0, 1, 1, 0], n_bins=4)) - 0.5) < TOL


def test_quantile_bins_with_tied_probabilities():
    # 60% of the mass sits on one value: tied quantiles give empty bins, skipped by ECE/MCE
    rng = np.random.default_rng(7)
    p = np.where(rng.uniform(size=1000) < 0.6, 0.2, rng.uniform(size=1000))
    y = (rng.uniform(size=1000) < p).astype(float)
    edges = cal.bin_edges(p, n_bins=10, strategy="quantile")
    assert (np.diff(edges) == 0).sum() >= 4  # several zero-width bins
    ref_ece, ref_mce, rows = loop_reference(p, y, np.ones_like(p), edges)
    assert abs(float(ece(p, y, n_bins=10, strategy="quantile")) - ref_ece) < TOL
    assert abs(float(mce(p, y, n_bins=10, strategy="quantile")) - ref_mce) < TOL
    r = reliability(p, y, n_bins=10, strategy="quantile")
    assert int(np.asarray(r.count).sum()) == 1000
    # the tie lands in the last of the bins whose left edge is 0.2, with no other bin
    k = int(np.flatnonzero(edges == 0.2).max())
    assert int(r.count[k]) == int(((p >= 0.2) & (p < edges[k + 1])).sum()) > (p == 0.2).sum()


def test_symmetric_reliability_flips_negative_bins():
    rng = np.random.default_rng(2)
    p, y, _ = sample(rng, 1000)
    plain = reliability(p, y, n_bins=10)
    sym = reliability(p, y, n_bins=10, symmetric=True)
    neg = np.asarray(sym.negative)
    np.testing.assert_array_equal(neg, np.arange(10) < 5)
    np.testing.assert_allclose(
        np.asarray(sym.confidence)[neg], 1 - np.asarray(plain.confidence)[neg]
    )
    np.testing.assert_allclose(np.asarray(sym.accuracy)[~neg], np.asarray(plain.accuracy)[~neg])
    # with 15 bins the middle bin straddles 0.5; its midpoint is 0.5, so it is positive
    assert not bool(reliability(p, y, n_bins=15, symmetric=True).negative[7])


def test_mce_min_fraction_and_count():
    # 10_000 samples, one stray in bin [0.9, 1) with a gap of 0.95
    p = np.r_[np.full(9999, 0.3), 0.95]
    y = np.r_[np.tile([1.0, 0.0, 0.0], 3333), 0.0]
    mean_y = y[:-1].mean()
    assert abs(float(mce(p, y, n_bins=10)) - 0.95) < TOL
    assert abs(float(mce(p, y, n_bins=10, min_fraction=2e-4)) - abs(mean_y - 0.3)) < TOL
    assert abs(float(mce(p, y, n_bins=10, min_count=2)) - abs(mean_y - 0.3)) < TOL
    # 1e-4 of 10_000 = 1 sample: the paper's setting keeps a bin with exactly one
    assert abs(float(mce(p, y, n_bins=10, min_fraction=1e-4)) - 0.95) < TOL
    assert np.isnan(float(mce(p, y, n_bins=10, min_count=20_000)))


def test_nll_and_brier_match_sklearn():
    rng = np.random.default_rng(3)
    p, y, w = sample(rng, 3000)
    p = np.clip(p, 1e-6, 1 - 1e-6)
    assert abs(float(nll(p, y)) - log_loss(y, p)) < TOL
    assert abs(float(nll(p, y, sample_weight=w)) - log_loss(y, p, sample_weight=w)) < TOL
    assert abs(float(brier(p, y)) - brier_score_loss(y, p)) < TOL
    assert abs(float(brier(p, y, sample_weight=w)) - brier_score_loss(y, p, sample_weight=w)) < TOL


def test_nll_clipping():
    eps64 = np.finfo(np.float64).eps
    # a confident mistake costs -log(eps), a confident hit ~ eps
    assert abs(float(nll([0.0, 1.0], [1, 1])) - (-np.log(eps64) - np.log1p(-eps64)) / 2) < 1e-12
    assert abs(float(nll([0.0], [1], eps=1e-3)) + np.log(1e-3)) < TOL
    with pytest.raises(ValueError, match="eps"):
        nll([0.5], [1], eps=0.7)


def test_weights_equal_repetition():
    rng = np.random.default_rng(4)
    p, y, _ = sample(rng, 300)
    k = rng.integers(0, 4, size=300)
    for metric in (ece, mce, nll, brier):
        a = float(metric(p, y, sample_weight=k.astype(float)))
        b = float(metric(np.repeat(p, k), np.repeat(y, k)))
        if metric is mce:  # counts differ (weight-0 samples still occupy bins), gaps do not
            continue
        assert abs(a - b) < TOL, metric.__name__


def test_jitted_core_does_not_recompile():
    rng = np.random.default_rng(5)
    p, y, _ = sample(rng, 500)
    ece(p, y)
    before = cal._ece_core._cache_size()
    ece(rng.uniform(size=500), y, n_bins=15)
    ece(p, y, strategy="quantile")  # edges are data, not static
    assert cal._ece_core._cache_size() == before
    mce(p, y, min_count=1)
    before = cal._mce_core._cache_size()
    mce(p, y, min_count=7)
    assert cal._mce_core._cache_size() == before


def test_binned_stats_inside_jit_and_merge():
    rng = np.random.default_rng(6)
    p, y, w = sample(rng, 1000)
    edges = cal.bin_edges(n_bins=12)
    full = jax.jit(cal.binned_stats)(p, y, edges, w)
    halves = [cal.binned_stats(p[s], y[s], edges, w[s]) for s in (slice(0, 400), slice(400, None))]
    merged = jax.tree.map(jnp.add, *halves)
    for a, b in zip(full, merged, strict=True):
        np.testing.assert_allclose(a, b, rtol=TOL)
    assert (
        abs(float(cal.ece_from_stats(merged)) - float(ece(p, y, n_bins=12, sample_weight=w))) < TOL
    )


_SHARDED = textwrap.dedent(
    """
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from functools import partial
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from jaxcal.metrics import calibration as cal
    assert jax.device_count() == 4, jax.devices()
    rng = np.random.default_rng(0)
    n = 4 * 2501
    p = rng.uniform(size=n) ** 2
    y = (rng.uniform(size=n) < p).astype(float)
    w = rng.uniform(0.1, 2.0, size=n)
    edges = cal.bin_edges(n_bins=15)
    one = cal.binned_stats(p, y, edges, w)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    f = jax.jit(jax.shard_map(
        partial(cal.binned_stats, axis_name="data"), mesh=mesh,
        in_specs=(P("data"), P("data"), P(), P("data")), out_specs=P()))
    four = f(p, y, edges, w)
    shard = NamedSharding(mesh, P("data"))
    auto = jax.jit(cal.binned_stats)(*(jax.device_put(a, shard) for a in (p, y)), edges,
                                     jax.device_put(w, shard))
    assert len(jax.device_put(p, shard).addressable_shards) == 4
    for a, b, c in zip(one, four, auto):
        np.testing.assert_allclose(a, b, rtol=1e-12)
        np.testing.assert_allclose(a, c, rtol=1e-12)
    e1 = float(cal.ece_from_stats(one)); e4 = float(cal.ece_from_stats(four))
    m1 = float(cal.mce_from_stats(one)); m4 = float(cal.mce_from_stats(four))
    assert abs(e1 - e4) < 1e-12 and abs(m1 - m4) < 1e-12, (e1, e4, m1, m4)
    # the jitted cores of every metric on NamedSharding-sharded inputs equal one device
    from jaxcal.metrics import auc, brier, ece, mce, nll, reliability
    from jaxcal.metrics import discrimination as disc
    ps, ys, ws = (jax.device_put(a, shard) for a in (p, y, w))
    eps = np.finfo(np.float64).eps
    for name, f, args in [
        ("ece", cal._ece_core, (edges,)), ("mce", cal._mce_core, (edges, 5)),
        ("nll", cal._nll_core, (eps,)), ("brier", cal._brier_core, ()),
    ]:
        a, b = float(f(p, y, w, *args)), float(f(ps, ys, ws, *args))
        assert abs(a - b) < 1e-12, (name, a, b)
    s = np.round(rng.normal(size=n) + 2 * y, 1)  # ties across shard boundaries
    a = float(disc._auc_core(s, y, w))
    b = float(disc._auc_core(jax.device_put(s, shard), ys, ws))
    assert abs(a - b) < 1e-12, ("auc", a, b)
    # the public API accepts sharded jax Arrays and gives the one-device numbers
    for metric in (ece, mce, nll, brier):
        one, four = metric(p, y, sample_weight=w), metric(ps, ys, sample_weight=ws)
        assert abs(float(one) - float(four)) < 1e-12, metric.__name__
    assert abs(float(auc(jax.device_put(s, shard), ys)) - float(auc(s, y))) < 1e-12
    r1, r4 = reliability(p, y, strategy="quantile"), reliability(ps, ys, strategy="quantile")
    for a, b in zip(r1, r4):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    print("OK", e1)
    """
)


def test_sharded_binned_stats_four_devices_equal_one():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK")


# ---------------------------------------------------------------- hypothesis properties

probs_st = hnp.arrays(np.float64, st.integers(1, 60), elements=st.floats(0.0, 1.0, allow_nan=False))


@settings(max_examples=40, deadline=None)
@given(probs_st, st.integers(1, 20), st.randoms(use_true_random=False))
def test_properties(p, n_bins, rnd):
    y = np.array([float(rnd.random() < 0.5) for _ in p])
    e = float(ece(p, y, n_bins=n_bins))
    m = float(mce(p, y, n_bins=n_bins))
    ref_e, ref_m, _ = loop_reference(p, y, np.ones_like(p), cal.bin_edges(n_bins=n_bins))
    assert abs(e - ref_e) < 1e-9 and abs(m - ref_m) < 1e-9
    assert 0.0 <= e <= m + 1e-12 <= 1.0 + 1e-12  # ECE is a weighted mean of bin gaps
    assert float(brier(p, y)) <= 1.0
    # one bin: ECE is the gap between the mean prediction and the base rate
    assert abs(float(ece(p, y, n_bins=1)) - abs(p.mean() - y.mean())) < 1e-9
    # perfect labels for 0/1 predictions give zero error
    hard = (p > 0.5).astype(float)
    assert float(ece(hard, hard, n_bins=n_bins)) == 0.0
    # scaling all weights by a constant changes nothing
    assert abs(float(ece(p, y, n_bins=n_bins, sample_weight=np.full(p.shape, 3.7))) - e) < 1e-9


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: ece([0.2, 1.2], [0, 1]), r"\[0, 1\]"),
        (lambda: ece([0.2, np.nan], [0, 1]), "NaN"),
        (lambda: ece([0.2, 0.3], [0, 2]), "0/1"),
        (lambda: ece([0.2, 0.3], [0, 1, 1]), "length mismatch"),
        (lambda: ece([], []), "empty"),
        (lambda: ece([0.2, 0.3], [0, 1], sample_weight=[1, -1]), "non-negative"),
        (lambda: ece([0.2, 0.3], [0, 1], sample_weight=[0, 0]), "sum to zero"),
        (lambda: ece([0.2, 0.3], [0, 1], n_bins=0), "n_bins"),
        (lambda: ece([0.2, 0.3], [0, 1], strategy="kmeans"), "strategy"),
        (lambda: mce([0.2, 0.3], [0, 1], min_count=0), "min_count"),
        (lambda: mce([0.2, 0.3], [0, 1], min_fraction=1.5), "min_fraction"),
        (lambda: nll([0.2, 0.3], [[0, 1]]), "1-D"),
        (lambda: brier([0.2, 0.3], [0, 1], sample_weight=[1.0]), "length mismatch"),
        (lambda: reliability(["a"], [1]), "numeric"),
    ],
)
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
