"""Debiased ECE (Kumar et al. 2019) and smooth ECE (Blasiok & Nakkiran) against direct
numpy / scipy references and simulations with known calibration error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, optimize
from scipy.stats import norm

from jaxcal.metrics import debiased_ece, smooth_ece
from jaxcal.metrics import ece_estimators as ee
from jaxcal.metrics.calibration import bin_edges

TOL = 1e-10  # float64, exact formulas
GRID_TOL = 2e-3  # smooth ECE: grid (spacing 1e-3) vs exact integral, relative
Z = 4.0  # statistical checks: |mean - truth| < 4 standard errors (fixed seeds)


# ------------------------------------------------------------------- numpy references


def ref_bins(p, edges):
    n_bins = len(edges) - 1
    ids = []
    for v in p:
        b = 0
        while b < n_bins - 1 and v >= edges[b + 1]:
            b += 1
        ids.append(b)
    return np.array(ids)


def ref_debiased_sq(p, y, w, edges):
    """Kumar et al.'s unbiased squared CE, written out bin by bin (weighted)."""
    ids = ref_bins(p, edges)
    total = w.sum()
    out = 0.0
    for b in np.unique(ids):
        m = ids == b
        wb = w[m]
        pbar = np.sum(wb * p[m]) / wb.sum()
        ybar = np.sum(wb * y[m]) / wb.sum()
        n_eff = wb.sum() ** 2 / np.sum(wb**2)
        out += wb.sum() / total * ((ybar - pbar) ** 2 - ybar * (1 - ybar) / (n_eff - 1))
    return out


def ref_kernel(t, f, s):
    shifts = 2.0 * np.arange(-3, 4)
    return norm.pdf(t - f[:, None] - shifts, scale=s).sum(-1) + norm.pdf(
        t + f[:, None] - shifts, scale=s
    ).sum(-1)


def ref_smece(p, y, w, s):
    """The defining integral, by adaptive quadrature on the raw (un-gridded) predictions."""
    r = w * (y - p) / w.sum()

    def integrand(t):
        return abs(np.dot(ref_kernel(t, p, s), r))

    return integrate.quad(integrand, 0, 1, limit=400, epsabs=1e-10)[0]


# ---------------------------------------------------------------------- debiased ECE


@pytest.mark.parametrize("strategy", ["quantile", "uniform"])
def test_debiased_sq_equals_numpy_reference(strategy):
    rng = np.random.default_rng(0)
    n = 600
    p = rng.uniform(size=n) ** 1.5
    y = (rng.uniform(size=n) < np.clip(p + 0.08, 0, 1)).astype(float)
    w = rng.uniform(0.2, 2.0, size=n)
    edges = bin_edges(p, n_bins=8, strategy=strategy)
    want = ref_debiased_sq(p, y, w, edges)
    assert want > 0
    got = float(debiased_ece(p, y, n_bins=8, strategy=strategy, sample_weight=w))
    assert abs(got - np.sqrt(want)) < TOL
    # unit weights: n_eff = n_b, the paper's ybar (1 - ybar) / (n_b - 1)
    got1 = float(debiased_ece(p, y, n_bins=8, strategy=strategy))
    assert abs(got1 - np.sqrt(max(ref_debiased_sq(p, y, np.ones(n), edges), 0))) < TOL


@pytest.mark.parametrize("shift, truth_sq", [(0.0, 0.0), (0.05, 0.05**2)])
def test_debiased_sq_is_unbiased_plugin_is_not(shift, truth_sq):
    """Bins holding one prediction value each: E[estimate] = true squared CE exactly.

    4,000 label draws (vmap over the pure core) give a standard error ~1e-5.
    """
    levels = np.array([0.1, 0.3, 0.5, 0.7, 0.9])
    p = np.repeat(levels, 40)
    edges = bin_edges(n_bins=5)
    q = p + shift
    keys = jax.random.split(jax.random.key(0), 4000)
    labels = jax.vmap(lambda k: jax.random.bernoulli(k, q).astype(jnp.float64))(keys)

    def both(y):
        stats = ee.debias_stats(p, y, edges)
        plugin = jnp.sum(stats.weight * ((stats.sum_labels - stats.sum_probs) / 40) ** 2)
        return ee.debiased_sq_ce_from_stats(stats), plugin / stats.weight.sum()

    est, plugin = (np.asarray(a) for a in jax.jit(jax.vmap(both))(labels))
    se = est.std() / np.sqrt(est.size)
    assert abs(est.mean() - truth_sq) < Z * se
    # the plug-in estimate is biased up by mean(q (1 - q)) / 40
    bias = np.mean(q * (1 - q)) / 40
    assert abs(plugin.mean() - truth_sq - bias) < Z * plugin.std() / np.sqrt(plugin.size)
    assert plugin.mean() - truth_sq > 20 * se
    # batched == looped
    for i in (0, 17):
        one = float(ee.debiased_sq_ce_from_stats(ee.debias_stats(p, labels[i], edges)))
        assert abs(one - est[i]) < TOL


def test_debiased_l1_equals_reference_with_same_draws():
    rng = np.random.default_rng(1)
    n = 500
    p = rng.uniform(size=n)
    y = (rng.uniform(size=n) < p**1.3).astype(float)
    key = jax.random.key(3)
    got = float(debiased_ece(p, y, p=1, n_bins=6, key=key, n_resamples=300))
    edges = bin_edges(p, n_bins=6, strategy="quantile")
    ids = ref_bins(p, edges)
    nb = np.array([np.sum(ids == b) for b in range(6)])
    pbar = np.array([p[ids == b].mean() for b in range(6)])
    ybar = np.array([y[ids == b].mean() for b in range(6)])
    plugin = np.sum(nb / n * np.abs(ybar - pbar))
    draws = ybar + np.sqrt(ybar * (1 - ybar) / nb) * np.asarray(
        jax.random.normal(key, (300, 6), jnp.float64)
    )
    want = 2 * plugin - np.mean(np.abs(draws - pbar) @ (nb / n))
    assert abs(got - want) < TOL


def test_debiased_near_zero_when_calibrated_and_near_truth_when_not():
    rng = np.random.default_rng(2)
    n = 50_000
    p = rng.uniform(0.2, 0.8, size=n)
    y_cal = rng.uniform(size=n) < p
    y_mis = rng.uniform(size=n) < p + 0.1  # true L1 and L2 calibration error: 0.1
    key = jax.random.key(0)
    assert float(debiased_ece(p, y_cal)) < 0.01
    assert float(debiased_ece(p, y_cal, p=1, key=key)) < 0.01
    assert abs(float(debiased_ece(p, y_mis)) - 0.1) < 0.01
    assert abs(float(debiased_ece(p, y_mis, p=1, key=key)) - 0.1) < 0.01


# ------------------------------------------------------------------------ smooth ECE


def test_smooth_ece_fixed_bandwidth_equals_quadrature():
    rng = np.random.default_rng(3)
    n = 150
    p = rng.uniform(size=n) ** 2
    y = (rng.uniform(size=n) < np.sqrt(p)).astype(float)
    w = rng.uniform(0.5, 1.5, size=n)
    for s in (0.05, 0.2, 0.6):
        got = float(smooth_ece(p, y, sigma=s, sample_weight=w))
        want = ref_smece(p, y, w, s)
        assert abs(got - want) < GRID_TOL * want, (s, got, want)


def test_smooth_ece_fixed_point_equals_brentq():
    rng = np.random.default_rng(4)
    n = 150
    p = rng.uniform(size=n)
    y = (rng.uniform(size=n) < p**2).astype(float)
    w = np.ones(n)
    sigma_ref = optimize.brentq(lambda s: ref_smece(p, y, w, s) - s, 0.005, 1.0, xtol=1e-8)
    value, sigma = smooth_ece(p, y, return_sigma=True)
    assert abs(float(sigma) - sigma_ref) < GRID_TOL * sigma_ref
    assert abs(float(value) - float(sigma)) < 1e-8  # value at the fixed point is sigma*


def test_smooth_ece_reflected_kernel_conserves_mass():
    """A uniform shift of 0.1 (same sign everywhere): smECE_sigma = 0.1 for every sigma."""
    p = np.linspace(0.0, 1.0, 201)
    shift = 0.1
    # expected labels p + shift expressed through weights: y=1 with weight p + shift,
    # y=0 with weight 1 - p - shift, both at prediction p (exact population residual)
    q = np.clip(p + shift, 0.0, 1.0)
    probs = np.concatenate([p, p])
    labels = np.concatenate([np.ones_like(p), np.zeros_like(p)])
    weights = np.concatenate([q, 1 - q])
    keep = weights > 0
    residual = np.sum(weights[keep] * (labels[keep] - probs[keep])) / weights[keep].sum()
    for s in (0.02, 0.1, 0.5):
        got = float(smooth_ece(probs[keep], labels[keep], sigma=s, sample_weight=weights[keep]))
        assert abs(got - residual) < 1e-6, (s, got, residual)


def test_smooth_ece_near_zero_when_calibrated_and_near_truth_when_not():
    rng = np.random.default_rng(5)
    n = 50_000
    p = rng.uniform(0.2, 0.8, size=n)
    assert float(smooth_ece(p, rng.uniform(size=n) < p)) < 0.02
    assert abs(float(smooth_ece(p, rng.uniform(size=n) < p + 0.1)) - 0.1) < 0.01


def test_smooth_ece_second_call_does_not_recompile():
    rng = np.random.default_rng(6)
    p = rng.uniform(size=300)
    smooth_ece(p, rng.uniform(size=300) < p)
    before = ee._smooth_core._cache_size()
    p2 = rng.uniform(size=300)
    smooth_ece(p2, rng.uniform(size=300) < p2)
    assert ee._smooth_core._cache_size() == before


# ------------------------------------------------------------------- shards and errors

_SHARDED = textwrap.dedent(
    """
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from jax.sharding import Mesh, PartitionSpec as P
    from jaxcal.metrics import ece_estimators as ee
    from jaxcal.metrics.calibration import bin_edges
    assert jax.device_count() == 4
    rng = np.random.default_rng(0)
    n = 4 * 1001
    p = rng.uniform(size=n); y = (rng.uniform(size=n) < p ** 1.2).astype(float)
    w = rng.uniform(0.1, 2.0, size=n); edges = bin_edges(n_bins=12)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    d = jax.jit(jax.shard_map(
        lambda p, y, w: ee.debias_stats(p, y, edges, w, axis_name="data"), mesh=mesh,
        in_specs=(P("data"),) * 3, out_specs=P()))(p, y, w)
    one = ee.debias_stats(p, y, edges, w)
    for a, b in zip(one, d):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    g = jax.jit(jax.shard_map(
        lambda p, y, w: ee.grid_residuals(p, y, 501, w, axis_name="data"), mesh=mesh,
        in_specs=(P("data"),) * 3, out_specs=P()))(p, y, w)
    g1 = ee.grid_residuals(p, y, 501, w)
    np.testing.assert_allclose(g[0], g1[0], rtol=1e-10, atol=1e-12)
    a = float(ee.smooth_ece_from_grid(*g, 0.1)); b = float(ee.smooth_ece_from_grid(*g1, 0.1))
    assert abs(a - b) < 1e-12
    print("OK")
    """
)


@pytest.mark.slow  # a fresh 4-device process: ~15 s of imports and compilation
def test_sharded_sums_four_devices_equal_one():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4")
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run(
        [sys.executable, "-c", _SHARDED], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("OK")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: debiased_ece([0.1, np.nan, 0.3], [0, 1, 1]), "non-finite"),
        (lambda: debiased_ece([0.1, 0.2], [0, 3]), "0/1"),
        (lambda: debiased_ece([0.1, 0.2, 0.3], [0, 1]), "length mismatch"),
        (lambda: debiased_ece([0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1], p=3), "p must be"),
        (lambda: debiased_ece([0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1], p=1), "key"),
        (lambda: debiased_ece([0.1, 0.2, 0.3, 0.4], [0, 1, 0, 1], n_bins=4), "single"),
        (lambda: debiased_ece([], []), "empty"),
        (lambda: smooth_ece([0.1, 0.2], [0, 1], sigma=0.0), "sigma"),
        (lambda: smooth_ece([0.1, 0.2], [0, 1], n_grid=2), "n_grid"),
        (lambda: smooth_ece([0.1, 1.5], [0, 1]), r"\[0, 1\]"),
        (lambda: smooth_ece([0.1, 0.2], [0, 1], sample_weight=[-1, 1]), "non-negative"),
    ],
)
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
