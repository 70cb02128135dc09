"""ECCE, the multicalibration error, its segments and the worst-segment report, against
oracles written from the definitions (Arrieta-Ibarra et al. 2022; Guy et al. 2025):
brute-force sums over thresholds and over enumerated segments in float64, closed forms,
duplicated rows, permutations, the Brownian-range law by simulation and by its other
series, and interval coverage in simulations with known truth."""

import itertools
import math
from statistics import NormalDist

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxcal.metrics import (
    _ecce,
    _intervals,
    ecce,
    ecce_pvalue,
    ecce_sigma,
    multicalibration_error,
    segment_masks,
    segment_report,
)

TOL = 1e-10  # float64 (conftest enables x64)


# ------------------------------------------------------------------------------ oracles
def brute_ecce(p, y, w=None):
    """(ECCE, sigma) from the definition: cumulative sums at every threshold t (rows with
    p <= t), plus the empty sum."""
    w = np.ones_like(p) if w is None else w
    total = w.sum()
    thresholds = np.unique(p)
    sums = [0.0] + [np.sum((w * (y - p))[p <= t]) / total for t in thresholds]
    sd = math.sqrt(np.sum(w**2 * p * (1 - p))) / total
    return max(sums) - min(sums), sd


def brute_levels(values, kind, order, max_values):
    """[(label, mask)] of one feature as MCGrad's segmentation defines it."""
    n = values.shape[0]
    if kind == "categorical":
        missing = np.array([v is None or (isinstance(v, float) and np.isnan(v)) for v in values])
        keys = np.array(
            ["<missing>" if m else str(v) for v, m in zip(values, missing, strict=True)]
        )
        distinct = list(dict.fromkeys(keys[order]))  # first appearance along increasing p
        if len(distinct) > max_values:
            counts = {k: int(np.sum(keys == k)) for k in distinct}
            ranked = sorted(distinct, key=lambda k: (-counts[k], distinct.index(k)))
            kept = set(ranked[: max_values - 1])
            keys = np.array([k if k in kept else "<other>" for k in keys])
            distinct = list(dict.fromkeys(keys[order]))
        return [(k, keys == k) for k in distinct]
    x = values.astype(float)
    missing = np.isnan(x)
    ok = x[~missing]
    if np.unique(ok).size <= max_values:
        bins = [(f"={v}", x == v) for v in np.unique(ok)]
    else:
        e = np.unique(np.quantile(ok, np.linspace(0, 1, max_values + 1)))
        bins = [(f"bin{0}", (x >= e[0]) & (x <= e[1]))]
        bins += [(f"bin{j}", (x > e[j]) & (x <= e[j + 1])) for j in range(1, e.size - 1)]
    if missing.any():
        bins.append(("nan", missing))
    first = [np.flatnonzero(m[order])[0] if m.any() else n for _, m in bins]
    return [bins[i] for i in np.argsort(first, kind="stable") if bins[i][1].any()]


def brute_segments(table, kinds, probs, *, max_depth=3, max_values=3, min_samples=10, limit=1000):
    names = [c for c in table if kinds[c] == "categorical"]
    names += [c for c in table if kinds[c] != "categorical"]
    order = np.argsort(probs, kind="stable")
    levels = [brute_levels(np.asarray(table[c]), kinds[c], order, max_values) for c in names]
    n = probs.shape[0]
    masks = []
    for depth in range(max_depth + 1):
        for combo in itertools.combinations(range(len(names)), depth):
            for prod in itertools.product(*(levels[j] for j in combo)):
                mask = np.ones(n, bool)
                for _, m in prod:
                    mask &= m
                if mask.sum() >= min_samples:
                    masks.append(mask)
    return np.array(masks[:limit])


def brute_mce(p, y, w, masks):
    rows = [brute_ecce(p[m], y[m], w[m]) for m in masks]
    sigmas = np.array([e / s if s > 0 else (np.inf if e > 0 else 0.0) for e, s in rows])
    _, global_sd = brute_ecce(p, y, w)
    return sigmas.max() * global_sd, sigmas.max(), np.array([e for e, _ in rows]), sigmas


def _table(rng, n):
    device = rng.choice(np.array(["android", "ios", "web", "tv"], dtype=object), n)
    device[rng.random(n) < 0.05] = None
    age = rng.normal(40, 10, n)
    age[rng.random(n) < 0.05] = np.nan
    return {
        "country": rng.integers(0, 6, n),
        "device": device,
        "member": rng.random(n) < 0.4,
        "age": age,
        "visits": rng.integers(0, 3, n).astype(float),  # few distinct: one level per value
    }


KINDS = {"country": "categorical", "device": "categorical", "member": "categorical"}
KINDS |= {"age": "numeric", "visits": "numeric"}


def _data(rng, n, ties=False):
    p = rng.uniform(0.05, 0.9, n)
    if ties:
        p = np.round(p, 1)
    y = (rng.random(n) < np.clip(p * 1.2, 0, 1)).astype(float)
    return p, y, rng.uniform(0.2, 3.0, n)


# -------------------------------------------------------------------------------- ECCE
def test_closed_forms():
    # C = 0, -0.1, 0: range 0.1; sigma = sqrt(2 * 0.16) / 2
    assert float(ecce([0.2, 0.8], [0, 1])) == pytest.approx(0.1, abs=TOL)
    assert float(ecce_sigma([0.2, 0.8], [0, 1])) == pytest.approx(0.1 / (0.32**0.5 / 2), abs=TOL)
    # one row: C = 0, 0.7
    assert float(ecce([0.3], [1])) == pytest.approx(0.7, abs=TOL)
    # a tie of 0.5 and 0.5 with labels 0, 1: read after the tie only, C = 0, 0
    assert float(ecce([0.5, 0.5], [0, 1])) == 0.0
    assert float(ecce_pvalue([0.5, 0.5], [0, 1])) == 1.0
    # all probabilities 0/1: sigma 0; a wrong label gives inf, right labels 0
    assert float(ecce_sigma([0.0, 1.0], [1, 1])) == np.inf
    assert float(ecce_sigma([0.0, 1.0], [0, 1])) == 0.0


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_ecce_and_sigma_match_brute_force(ties, weighted):
    rng = np.random.default_rng(1 + ties + 2 * weighted)
    p, y, w = _data(rng, 500, ties)
    w = w if weighted else None
    e, sd = brute_ecce(p, y, w)
    assert float(ecce(p, y, sample_weight=w)) == pytest.approx(e, abs=TOL)
    assert float(ecce_sigma(p, y, sample_weight=w)) == pytest.approx(e / sd, rel=TOL)
    logp = float(_ecce.range_log_sf(jnp.asarray(e / sd)))
    assert float(ecce_pvalue(p, y, sample_weight=w)) == pytest.approx(math.exp(logp), rel=1e-12)


def test_integer_weights_equal_duplicated_rows():
    rng = np.random.default_rng(2)
    p, y, _ = _data(rng, 300)
    k = rng.integers(0, 4, 300)
    k[0] = 1
    pd_, yd = np.repeat(p, k), np.repeat(y, k)
    assert float(ecce(p, y, sample_weight=k)) == pytest.approx(float(ecce(pd_, yd)), abs=TOL)
    # segments: rows of weight >= 1 (a row of weight 0 is a row, not 0 copies, for the
    # segment sizes and the order of levels)
    k = rng.integers(1, 4, 300)
    pd_, yd = np.repeat(p, k), np.repeat(y, k)
    feats = {"g": rng.integers(0, 3, 300)}
    a = multicalibration_error(p, y, feats, sample_weight=k, min_samples=1)
    b = multicalibration_error(pd_, yd, {"g": np.repeat(feats["g"], k)}, min_samples=1)
    np.testing.assert_allclose(a.segment_ecce, b.segment_ecce, atol=TOL)
    np.testing.assert_allclose(a.segment_observed, b.segment_observed, atol=TOL)
    # sigma counts a weighted row once, scaled by its weight (IPS variance: w^2), not k rows
    sd_weighted = math.sqrt(np.sum(k**2 * p * (1 - p))) / k.sum()
    assert float(ecce_sigma(p, y, sample_weight=k)) == pytest.approx(
        float(ecce(p, y, sample_weight=k)) / sd_weighted, rel=TOL
    )


def test_permutation_invariance_with_ties():
    rng = np.random.default_rng(3)
    p, y, w = _data(rng, 400, ties=True)
    feats = _table(rng, 400)
    perm = rng.permutation(400)
    assert float(ecce(p[perm], y[perm], sample_weight=w[perm])) == pytest.approx(
        float(ecce(p, y, sample_weight=w)), abs=TOL
    )
    a = multicalibration_error(p, y, feats, sample_weight=w, categorical=["country"])
    b = multicalibration_error(
        p[perm], y[perm], {k: v[perm] for k, v in feats.items()}, sample_weight=w[perm]
    )
    assert float(a.mce_sigma) == pytest.approx(float(b.mce_sigma), rel=TOL)
    # same segments, possibly enumerated in another order (levels by first appearance)
    np.testing.assert_allclose(np.sort(a.segment_ecce), np.sort(b.segment_ecce), atol=TOL)


def test_range_law_series_agree_with_each_other():
    """The implemented p-value (tail series above 1.5, theta series below) against each
    series summed with many terms over the whole range."""
    x = np.linspace(0.3, 6.0, 58)
    k = np.arange(1, 200)[:, None]
    tail = 8 * np.sum((-1.0) ** (k - 1) * k * stats.norm.sf(k * x), axis=0)
    m = 2 * k - 1
    theta = 1 - 8 * np.sum(
        (1 / x**2 + 1 / (m * np.pi) ** 2) * np.exp(-((m * np.pi) ** 2) / (2 * x**2)), 0
    )
    got = np.exp(np.asarray(jax.jit(_ecce.range_log_sf)(x)))
    np.testing.assert_allclose(got, tail, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(got[x < 3], theta[x < 3], rtol=1e-9, atol=1e-15)
    big = np.asarray(jax.jit(_ecce.range_log_sf)(np.array([10.0, 40.0, np.inf, 0.0, -1.0])))
    # far tail: 8 * Q(x) dominates (log space keeps it, 1 - CDF would give 0)
    np.testing.assert_allclose(big[:2], np.log(8) + stats.norm.logsf([10.0, 40.0]), rtol=1e-9)
    assert big[2] == -np.inf and big[3] == 0.0 and big[4] == 0.0


def test_pvalue_is_uniform_under_perfect_calibration():
    """ECCE p-values of calibrated data (distinct probabilities): Kolmogorov-Smirnov against
    U(0, 1). With 600 draws of n = 2000 the test detects a shift of the CDF by ~0.07."""
    rng = np.random.default_rng(4)
    n, draws = 2000, 600
    p = rng.uniform(0.02, 0.98, n)
    labels = (rng.random((draws, n)) < p).astype(float)
    pvals = np.asarray(jax.jit(jax.vmap(lambda y: ecce_pvalue(jnp.asarray(p), y)))(labels))
    assert stats.kstest(pvals, "uniform").pvalue > 1e-3
    # the Brownian range is the n -> infinity law: check the 5% level as well
    assert abs(np.mean(pvals < 0.05) - 0.05) < 3 * math.sqrt(0.05 * 0.95 / draws)


# ------------------------------------------------------------------------------ segments
@pytest.mark.parametrize("max_depth", [1, 3])
def test_segments_match_brute_force_enumeration(max_depth):
    rng = np.random.default_rng(5)
    n = 700
    p, y, w = _data(rng, n)
    table = _table(rng, n)
    seg = segment_masks(table, probs=p, max_depth=max_depth)
    expect = brute_segments(table, KINDS, p, max_depth=max_depth)
    np.testing.assert_array_equal(seg.masks, expect)
    assert seg.descriptions[0] == "all" and len(seg.descriptions) == len(expect)
    # without probabilities: the same set of segments, levels by code
    plain = segment_masks(table, max_depth=max_depth)
    assert {m.tobytes() for m in plain.masks} == {m.tobytes() for m in expect}


def test_max_segments_keeps_the_first_in_enumeration_order():
    rng = np.random.default_rng(6)
    p, _, _ = _data(rng, 500)
    table = _table(rng, 500)
    seg = segment_masks(table, probs=p, max_segments=37)
    np.testing.assert_array_equal(seg.masks, brute_segments(table, KINDS, p, limit=37))


def test_mce_matches_brute_force_over_segments():
    rng = np.random.default_rng(7)
    n = 600
    p, y, w = _data(rng, n)
    table = _table(rng, n)
    res = multicalibration_error(p, y, table, sample_weight=w)
    masks = brute_segments(table, KINDS, p)
    mce, mce_sigma, eccs, sigmas = brute_mce(p, y, w, masks)
    assert int(res.n_segments) == len(masks)
    np.testing.assert_allclose(res.segment_ecce, eccs, atol=TOL)
    np.testing.assert_allclose(res.segment_ecce_sigma, sigmas, rtol=1e-9)
    assert float(res.mce_sigma) == pytest.approx(mce_sigma, rel=1e-9)
    assert float(res.mce) == pytest.approx(mce, rel=1e-9)
    assert int(res.worst_segment) == int(np.argmax(sigmas))
    s = len(masks)
    p_worst = float(res.p_value)
    assert float(res.p_value_bonferroni) == pytest.approx(min(1.0, s * p_worst), rel=1e-9)
    assert float(res.global_ecce) == pytest.approx(brute_ecce(p, y, w)[0], abs=TOL)
    obs = [np.sum((w * y)[m]) / np.sum(w[m]) for m in masks]
    np.testing.assert_allclose(res.segment_observed, obs, rtol=1e-12)
    np.testing.assert_array_equal(res.segment_size, masks.sum(axis=1))


def test_masks_path_equals_features_path_and_runs_under_jit_and_vmap():
    rng = np.random.default_rng(8)
    n = 400
    p, y, w = _data(rng, n)
    table = _table(rng, n)
    res = multicalibration_error(p, y, table, sample_weight=w)
    seg = segment_masks(table, probs=p)
    eager = multicalibration_error(p, y, segments=seg.masks, sample_weight=w)
    fn = jax.jit(lambda p, y, w, m: multicalibration_error(p, y, segments=m, sample_weight=w))
    traced = fn(p, y, w, seg.masks)
    for a, b in ((res, eager), (res, traced)):
        for field in a._fields:
            np.testing.assert_allclose(
                np.asarray(getattr(a, field), float), np.asarray(getattr(b, field), float),
                rtol=1e-9, atol=TOL, err_msg=field,
            )  # fmt: skip
    # a batch of problems under vmap equals a loop
    labels = (rng.random((3, n)) < p).astype(float)
    batch = jax.vmap(lambda y: multicalibration_error(p, y, segments=seg.masks).mce_sigma)(labels)
    loop = [float(multicalibration_error(p, yy, table).mce_sigma) for yy in labels]
    np.testing.assert_allclose(batch, loop, rtol=1e-9)
    # the traced path gives NaN, never a number, for invalid values
    bad = jax.jit(lambda p: multicalibration_error(p, y, segments=seg.masks).mce)(p + 1.0)
    assert np.isnan(float(bad))
    assert np.isnan(float(jax.jit(ecce)(p, y * 2)))


def test_mce_pvalue_bonferroni_is_conservative_under_perfect_calibration():
    """Under perfect multicalibration the Bonferroni p-value rejects at most its level
    (300 draws: bound + 3 standard errors); the unadjusted one rejects more often."""
    rng = np.random.default_rng(9)
    n, draws = 1000, 300
    p = rng.uniform(0.05, 0.9, n)
    masks = segment_masks(_table(rng, n), probs=p, max_depth=2).masks
    labels = (rng.random((draws, n)) < p).astype(float)
    fn = jax.jit(jax.vmap(lambda y: multicalibration_error(p, y, segments=masks)))
    res = fn(labels)
    bonf = np.asarray(res.p_value_bonferroni)
    assert np.mean(bonf < 0.1) <= 0.1 + 3 * math.sqrt(0.1 * 0.9 / draws)
    assert np.mean(np.asarray(res.p_value) < 0.1) >= np.mean(bonf < 0.1)


def test_sizes_in_a_bucket_compile_nothing(compiles):
    rng = np.random.default_rng(10)
    p, y, w = _data(rng, 300)
    table = _table(rng, 300)
    multicalibration_error(p, y, table, sample_weight=w)
    ecce(p, y)
    with compiles() as c:
        multicalibration_error(p[:280], y[:280], {k: v[:280] for k, v in table.items()})
        ecce(p[:290], y[:290], sample_weight=w[:290])
    assert c.count == 0


# -------------------------------------------------------------------------------- report
def _coverage(seed, n_seg, lo, hi, delta, *, level, weighted=False, draws=2000):
    """Share of draws whose interval holds the true gap of a fixed segment whose truth is a
    logit offset ``delta`` (other rows calibrated)."""
    rng = np.random.default_rng(seed)
    n = n_seg + 200
    p = rng.uniform(lo, hi, n)
    seg = np.arange(n) < n_seg
    truth = np.where(seg, 1 / (1 + np.exp(-(np.log(p / (1 - p)) + delta))), p)
    w = 1 / rng.uniform(0.3, 1.0, n) if weighted else np.ones(n)
    gap = np.sum((w * (truth - p))[seg]) / np.sum(w[seg])
    labels = (rng.random((draws, n)) < truth).astype(float)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    core = jax.vmap(lambda y: _intervals.gap_intervals(p, y, w, seg[None], z))
    lower, upper = (np.asarray(b)[:, 0] for b in jax.jit(core)(labels))
    return np.mean((lower <= gap) & (gap <= upper))


@pytest.mark.parametrize(
    ("seed", "n_seg", "lo", "hi", "delta", "level", "weighted"),
    [
        (11, 300, 0.05, 0.6, 0.6, 0.9, False),
        (12, 150, 0.05, 0.95, -0.4, 0.95, False),
        (13, 300, 0.1, 0.5, 0.3, 0.9, True),  # IPS weights
    ],
)
def test_gap_interval_coverage_with_known_truth(seed, n_seg, lo, hi, delta, level, weighted):
    draws = 2000
    cover = _coverage(seed, n_seg, lo, hi, delta, level=level, weighted=weighted, draws=draws)
    assert abs(cover - level) <= 3 * math.sqrt(level * (1 - level) / draws), cover


def test_report_lists_worst_segments_with_intervals():
    rng = np.random.default_rng(14)
    n = 6000
    device = rng.choice(np.array(["ios", "web", "tv"]), n)
    country = rng.integers(0, 4, n)
    p = rng.uniform(0.05, 0.5, n)
    logit = np.log(p / (1 - p)) + 0.8 * (device == "web")
    y = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(float)
    table = {"device": device, "country": country}
    rep = segment_report(p, y, table, k=4, level=0.9)
    res = multicalibration_error(p, y, table)
    order = np.argsort(-np.asarray(res.segment_ecce_sigma), kind="stable")[:4]
    np.testing.assert_array_equal(rep.index, order)
    np.testing.assert_allclose(rep.ecce_sigma, np.asarray(res.segment_ecce_sigma)[order])
    assert rep.segment[0] == "device=web"
    web = device == "web"
    assert rep.observed[0] == pytest.approx(y[web].mean(), rel=1e-12)
    assert rep.gap[0] == pytest.approx(y[web].mean() - p[web].mean(), rel=1e-12)
    assert np.all((rep.gap_lower <= rep.gap) & (rep.gap <= rep.gap_upper))
    # simultaneous intervals are wider than pointwise ones, both from the same core
    point = segment_report(p, y, table, k=4, level=0.9, simultaneous=False)
    assert np.all(point.gap_upper - point.gap_lower < rep.gap_upper - rep.gap_lower)
    masks = segment_masks(table, probs=p).masks[order]
    z = NormalDist().inv_cdf(0.95)
    lower, _ = _intervals.gap_intervals(p, y, np.ones(n), masks, z)
    np.testing.assert_allclose(point.gap_lower, lower, rtol=1e-12)
    assert "| device=web |" in rep.to_markdown()


def test_simultaneous_intervals_cover_all_segments():
    """Joint coverage over 6 segments (disjoint, each with its own offset) of the
    simultaneous 90% intervals: at least nominal, minus 3 standard errors."""
    rng = np.random.default_rng(15)
    n, draws = 1200, 400
    group = rng.integers(0, 6, n)
    p = rng.uniform(0.05, 0.7, n)
    offsets = np.array([0.0, 0.3, -0.3, 0.6, 0.0, -0.6])
    truth = 1 / (1 + np.exp(-(np.log(p / (1 - p)) + offsets[group])))
    masks = group[None, :] == np.arange(6)[:, None]
    gaps = np.array([np.mean((truth - p)[m]) for m in masks])
    labels = (rng.random((draws, n)) < truth).astype(float)
    z = NormalDist().inv_cdf(1 - 0.1 / (2 * 6))
    core = jax.jit(jax.vmap(lambda y: _intervals.gap_intervals(p, y, np.ones(n), masks, z)))
    lower, upper = (np.asarray(b) for b in core(labels))
    joint = np.mean(np.all((lower <= gaps) & (gaps <= upper), axis=1))
    assert joint >= 0.9 - 3 * math.sqrt(0.9 * 0.1 / draws), joint


# -------------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda p, y, t: multicalibration_error(p, y), "either features"),
        (lambda p, y, t: multicalibration_error(p, y, t, segments=np.ones((1, 50))), "not both"),
        (lambda p, y, t: multicalibration_error(p, y, segments=np.ones((2, 49))), r"\[n_segments"),
        (lambda p, y, t: multicalibration_error(p, y, segments=np.full((1, 50), 2)), "boolean"),
        (lambda p, y, t: multicalibration_error(p, y, t, min_samples=51), "min_samples=51"),
        (lambda p, y, t: multicalibration_error(p, y, t, max_depth=-1), "max_depth"),
        (lambda p, y, t: multicalibration_error(p, y, t, max_segments=0), "max_segments"),
        (lambda p, y, t: multicalibration_error(p, y, {"g": np.ones(49)}), "49 rows"),
        (lambda p, y, t: multicalibration_error(p * 2, y, t), r"\[0, 1\]"),
        (lambda p, y, t: segment_report(p, y, t, k=0), "k must"),
        (lambda p, y, t: segment_report(p, y, t, level=1.0), "level"),
        (lambda p, y, t: segment_report(p, y, t, depth=2), "unexpected options"),
        (lambda p, y, t: segment_masks(t, probs=p[:10]), "length mismatch"),
        (lambda p, y, t: ecce(p, y[:10]), "length mismatch"),
    ],
)
def test_bad_inputs_raise(call, match):
    rng = np.random.default_rng(16)
    p, y, _ = _data(rng, 50)
    with pytest.raises(ValueError, match=match):
        call(p, y, {"g": rng.integers(0, 2, 50)})


@pytest.mark.parametrize("ties", [False, True])
def test_portable_cell_core_equals_the_host_sums(ties):
    """The jitted per-partition core (one sort and one segmented scan per partition, used
    off CPU) against the NumPy float64 sums the CPU shell uses, with and without a host
    sort order."""
    from jaxcal.metrics import _segments
    from jaxcal.metrics.multicalibration import _cells_core, _finish_core

    rng = np.random.default_rng(17)
    n = 500
    p, y, w = _data(rng, n, ties)
    parts = _segments.partitions(
        _table(rng, n), n, probs=p, categorical=None, numeric=None, max_depth=2, max_values=3
    )
    order = np.argsort(p, kind="stable")
    sums = _segments.host_cell_stats(
        p[order], y[order], w[order], parts.cells[:, order], parts.num_cells
    )
    want, keep = _finish_core(_ecce.SegmentStats(*sums), 10, 1000)
    cells = parts.cells[:, order]
    by_cell = np.argsort(cells, axis=1, kind="stable").astype(np.int32)
    args = (p[order], y[order], w[order], np.ones(n), cells)
    for host_order in (None, by_cell):
        got, got_keep = _cells_core(*args, host_order, 10, 1000, num_cells=parts.num_cells)
        np.testing.assert_array_equal(got_keep, keep)
        for field in want._fields:
            np.testing.assert_allclose(
                np.asarray(getattr(got, field), float), np.asarray(getattr(want, field), float),
                rtol=1e-9, atol=TOL, err_msg=field,
            )  # fmt: skip


@pytest.mark.parametrize(
    "scan", [_ecce._segmented_cumsum_sequential, _ecce._segmented_cumsum_parallel]
)
def test_segmented_cumsum_both_implementations(scan):
    """The CPU (sequential) and accelerator (parallel) segmented prefix sums against a
    Python loop that restarts the sum at each start flag."""
    rng = np.random.default_rng(18)
    x = rng.normal(size=257)
    start = rng.random(257) < 0.1
    start[0] = True
    want, total = [], 0.0
    for v, s in zip(x, start, strict=True):
        total = v if s else total + v
        want.append(total)
    np.testing.assert_allclose(jax.jit(scan)(x, start), want, rtol=1e-12, atol=1e-12)
