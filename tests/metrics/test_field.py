"""Field metrics (Pan et al. 2020; Deng et al. 2020) against direct Python-loop references."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import hypothesis.extra.numpy as hnp
import hypothesis.strategies as st
import jax
import numpy as np
import pytest
from hypothesis import given, settings

from jaxcal.metrics import cal_n, field_ece, field_rce, gc_n, pcoc
from jaxcal.metrics import field as fm

TOL = 1e-10  # float64, exact up to summation order


# ----------------------------------------------------------------- the loop references


def ref_field_ece(p, y, z, w):
    total = sum(w)
    out = 0.0
    for v in set(z.tolist()):
        out += abs(
            sum(wi * (yi - pi) for pi, yi, zi, wi in zip(p, y, z, w, strict=True) if zi == v)
        )
    return out / total


def ref_field_rce(p, y, z, w, eps):
    total = sum(w)
    out = 0.0
    for v in set(z.tolist()):
        rows = [(pi, yi, wi) for pi, yi, zi, wi in zip(p, y, z, w, strict=True) if zi == v]
        wz = sum(r[2] for r in rows)
        gap = abs(sum(r[2] * (r[1] - r[0]) for r in rows))
        out += wz * gap / sum(r[2] * (r[1] + eps) for r in rows)
    return out / total


def ref_pcoc_error(pred, obs):
    r = pred / obs if obs > 0 else np.inf
    if r >= 1:
        return r - 1
    return 1 / r - 1 if r > 0 else np.inf


def ref_cal_n(p, y, w, n_bins):
    """Equal-mass bins as in jaxcal.metrics.ece (quantile edges, [e_b, e_b+1), last closed)."""
    edges = np.quantile(p, np.linspace(0, 1, n_bins + 1))
    edges[0], edges[-1] = 0.0, 1.0
    edges = np.maximum.accumulate(edges)
    errs = []
    for b in range(n_bins):
        lo, hi = edges[b], edges[b + 1]
        inside = [
            i for i in range(len(p)) if (p[i] >= lo or b == 0) and (p[i] < hi or (b == n_bins - 1))
        ]
        if not inside or sum(w[i] for i in inside) == 0:
            continue
        pred = sum(w[i] * p[i] for i in inside)
        obs = sum(w[i] * y[i] for i in inside)
        errs.append(ref_pcoc_error(pred, obs))
    return float(np.sqrt(np.mean(np.square(errs))))


def sample(rng, n, n_values=6):
    p = rng.uniform(0.05, 0.95, size=n)
    z = rng.integers(0, n_values, size=n) * 7 - 3  # arbitrary integer values
    offset = np.where(z % 2 == 0, 0.1, -0.1)
    y = (rng.uniform(size=n) < np.clip(p + offset, 0, 1)).astype(float)
    w = rng.uniform(0.2, 2.0, size=n)
    return p, y, z, w


# ----------------------------------------------------------------------- oracle tests


@pytest.mark.parametrize("weighted", [False, True])
def test_field_ece_rce_equal_loop(weighted):
    rng = np.random.default_rng(1)
    p, y, z, w = sample(rng, 400)
    w = w if weighted else np.ones_like(p)
    sw = w if weighted else None
    assert abs(float(field_ece(p, y, z, sample_weight=sw)) - ref_field_ece(p, y, z, w)) < TOL
    for eps in (1e-6, 0.05):
        got = float(field_rce(p, y, z, eps=eps, sample_weight=sw))
        assert abs(got - ref_field_rce(p, y, z, w, eps)) < TOL * max(1.0, got)


def test_multi_column_fields_equal_columns():
    rng = np.random.default_rng(2)
    p, y, z, w = sample(rng, 300)
    z2 = rng.integers(0, 40, size=p.shape[0])
    fields = np.stack([z, z2, np.zeros_like(z)], axis=1)
    got = np.asarray(field_ece(p, y, fields, sample_weight=w))
    want = [ref_field_ece(p, y, fields[:, f], w) for f in range(3)]
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
    # one constant field: Field-ECE is the aggregate |sum w (y - p)| / W
    assert abs(got[2] - abs(np.sum(w * (y - p))) / w.sum()) < TOL
    got_rce = np.asarray(field_rce(p, y, fields, sample_weight=w))
    want_rce = [ref_field_rce(p, y, fields[:, f], w, 1e-6) for f in range(3)]
    np.testing.assert_allclose(got_rce, want_rce, rtol=1e-10)


def test_field_ece_sees_cancelling_errors_that_ece_misses():
    """Two field values miscalibrated in opposite directions: global bias 0, Field-ECE 0.1."""
    n = 1000
    p = np.full(n, 0.5)
    z = np.repeat([0, 1], n // 2)
    y = np.zeros(n)
    y[:300] = 1  # field 0: rate 0.6
    y[500:700] = 1  # field 1: rate 0.4
    assert abs(float(pcoc(p, y)) - 1.0) < TOL
    assert abs(float(field_ece(p, y, z)) - 0.1) < TOL
    # Field-RCE: each field's |gap| / (rate + eps), weighted by field share
    want = 0.5 * 0.1 / (0.6 + 1e-6) + 0.5 * 0.1 / (0.4 + 1e-6)
    assert abs(float(field_rce(p, y, z)) - want) < TOL


def test_pcoc_equals_ratio():
    rng = np.random.default_rng(3)
    p, y, _, w = sample(rng, 200)
    assert abs(float(pcoc(p, y, sample_weight=w)) - np.sum(w * p) / np.sum(w * y)) < TOL


@pytest.mark.parametrize("n_bins", [1, 4, 10])
def test_cal_n_equals_loop(n_bins):
    rng = np.random.default_rng(4)
    p, y, _, w = sample(rng, 500)
    got = float(cal_n(p, y, n_bins=n_bins, sample_weight=w))
    assert abs(got - ref_cal_n(p, y, w, n_bins)) < TOL * max(1, got)
    if n_bins == 1:  # one bin: Cal-1 = |PCOC error|
        assert abs(got - ref_pcoc_error(np.sum(w * p), np.sum(w * y))) < TOL


def test_gc_n_equals_loop_over_groups():
    rng = np.random.default_rng(5)
    p, y, z, w = sample(rng, 900, n_values=4)
    for group_weight in ("weight", "count", "uniform"):
        got = float(gc_n(p, y, z, n_bins=3, sample_weight=w, group_weight=group_weight))
        num = den = 0.0
        for v in np.unique(z):
            m = z == v
            c = ref_cal_n(p[m], y[m], w[m], 3)
            vj = {"weight": w[m].sum(), "count": m.sum(), "uniform": 1.0}[group_weight]
            num, den = num + vj * c, den + vj
        assert abs(got - num / den) < TOL, group_weight


def test_cal_n_infinite_when_a_bin_has_no_positives():
    p = np.array([0.1, 0.2, 0.8, 0.9])
    y = np.array([0.0, 0.0, 1.0, 1.0])
    assert np.isinf(float(cal_n(p, y, n_bins=2)))
    assert np.isfinite(float(cal_n(p, y, n_bins=1)))


def test_calibrated_simulation_small_vs_miscalibrated():
    """Known ground truth: y ~ Bernoulli(p) gives Field-ECE ~ noise; a field offset does not."""
    rng = np.random.default_rng(6)
    n = 40_000
    p = rng.uniform(0.1, 0.9, size=n)
    z = rng.integers(0, 4, size=n)
    y_cal = (rng.uniform(size=n) < p).astype(float)
    shift = np.array([-0.1, -0.05, 0.05, 0.1])[z]
    y_mis = (rng.uniform(size=n) < p + shift).astype(float)
    # noise level: sum_z sd(sum (y - p)) / n ~ 4 * sqrt(n/4 * 0.2) / n ~ 0.0045
    assert float(field_ece(p, y_cal, z)) < 0.012
    # truth: mean |shift| = 0.075
    assert abs(float(field_ece(p, y_mis, z)) - 0.075) < 0.012
    assert abs(float(pcoc(p, y_cal)) - 1) < 0.02
    assert float(cal_n(p, y_cal)) < 0.05


# ------------------------------------------------------------------ jit / shards / errors


def test_jitted_core_does_not_recompile():
    rng = np.random.default_rng(7)
    p, y, z, w = sample(rng, 128)
    field_ece(p, y, z, sample_weight=w)
    before = fm._field_stats_core._cache_size()
    p2, y2, z2, w2 = sample(rng, 128)
    field_ece(p2, y2, z2 * 0 + np.arange(128) % 6, sample_weight=w2)
    assert fm._field_stats_core._cache_size() == before


_SHARDED = textwrap.dedent(
    """
    import jax, numpy as np
    jax.config.update("jax_enable_x64", True)
    from functools import partial
    from jax.sharding import Mesh, PartitionSpec as P
    from jaxcal.metrics import field as fm
    assert jax.device_count() == 4
    rng = np.random.default_rng(0)
    n = 4 * 1001
    p = rng.uniform(size=n); y = (rng.uniform(size=n) < p).astype(float)
    w = rng.uniform(0.1, 2.0, size=n); ids = rng.integers(0, 7, size=n).astype(np.int32)
    one = fm.segment_stats(p, y, ids, 7, w)
    mesh = Mesh(np.array(jax.devices()), ("data",))
    f = jax.jit(jax.shard_map(
        lambda p, y, i, w: fm.segment_stats(p, y, i, 7, w, axis_name="data"), mesh=mesh,
        in_specs=(P("data"),) * 4, out_specs=P()))
    four = f(p, y, ids, w)
    for a, b in zip(one, four):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    for fn in (fm.field_ece_from_stats, lambda s: fm.field_rce_from_stats(s, 1e-6),
               fm.cal_n_from_stats):
        assert abs(float(fn(one)) - float(fn(four))) < 1e-12
    print("OK")
    """
)


@pytest.mark.slow  # a fresh 4-device process: ~15 s of imports and compilation
def test_sharded_segment_stats_four_devices_equal_one():
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
        (lambda: field_ece([0.1, np.nan], [0, 1], [0, 1]), "non-finite"),
        (lambda: field_ece([0.1, 0.2], [0, 2], [0, 1]), "0/1"),
        (lambda: field_ece([0.1, 0.2], [0, 1], [0, 1, 2]), "length mismatch"),
        (lambda: field_ece([0.1, 0.2], [0, 1], [0.5, 1]), "integer"),
        (lambda: field_ece([0.1, 0.2], [0, 1], np.zeros((2, 2, 2), int)), r"\[n\] or \[n, F\]"),
        (lambda: field_ece([], [], []), "empty"),
        (lambda: field_ece([0.1, 1.2], [0, 1], [0, 1]), r"\[0, 1\]"),
        (lambda: field_rce([0.1, 0.2], [0, 1], [0, 1], eps=0.0), "eps"),
        (lambda: field_rce([0.1, 0.2], [0, 1], [0, 1], sample_weight=[1, -1]), "non-negative"),
        (lambda: pcoc([0.1, 0.2], [0, 0]), "positive labels"),
        (lambda: cal_n([0.1, 0.2], [0, 1], n_bins=0), "n_bins"),
        (lambda: gc_n([0.1, 0.2], [0, 1], [0, 1], strategy="x"), "strategy"),
        (lambda: gc_n([0.1, 0.2], [0, 1], [0, 1], group_weight="x"), "group_weight"),
    ],
)
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ---------------------------------------------------------------- hypothesis properties


@settings(max_examples=15, deadline=None)  # every new n compiles once
@given(
    hnp.arrays(np.float64, st.integers(1, 40), elements=st.floats(0.0, 1.0)),
    st.integers(1, 5),
    st.randoms(use_true_random=False),
)
def test_properties(p, n_values, rnd):
    y = np.array([float(rnd.random() < 0.5) for _ in p])
    z = np.array([rnd.randrange(n_values) for _ in p])
    fe = float(field_ece(p, y, z))
    # Field-ECE >= |global bias| (triangle inequality), <= mean |y - p|, and splitting a
    # field further never lowers it
    assert abs(np.mean(y - p)) - 1e-12 <= fe <= np.mean(np.abs(y - p)) + 1e-12
    finer = z * len(p) + np.arange(len(p))  # every sample its own value
    assert fe <= float(field_ece(p, y, finer)) + 1e-12
    assert abs(fe - ref_field_ece(p, y, z, np.ones_like(p))) < 1e-10


def test_field_ece_inside_jit_over_stats():
    """The pure core composes under jit with traced inputs."""
    rng = np.random.default_rng(8)
    p, y, z, w = sample(rng, 64)
    ids = np.unique(z, return_inverse=True)[1].astype(np.int32)
    f = jax.jit(lambda p, y, i, w: fm.field_ece_from_stats(fm.segment_stats(p, y, i, 6, w)))
    assert abs(float(f(p, y, ids, w)) - ref_field_ece(p, y, z, w)) < TOL
