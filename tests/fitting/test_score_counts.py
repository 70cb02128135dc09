"""Counts by distinct score and isotonic calibration from them. Oracles: a dictionary loop
over the samples (the counts), the in-memory fit on the raw data and scikit-learn's weighted
IsotonicRegression on it (the exact fit), scikit-learn on bin ids (the bin-constant fit), and
the single-process computation on the union of the data of real processes."""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.calibrators.isotonic import FittedIsotonic
from jaxcal.calibrators.isotonic_counts import FittedIsotonicCounts
from jaxcal.fitting.score_counts import ScoreCounts, merge, quantize, score_counts
from jaxcal.fitting.streamed_counts import from_chunks, from_order_keys, order_keys
from jaxcal.metrics import auc, auc_from_counts
from tests._multiprocess import run_processes

TOL = 1e-12  # float64, up to the order of the sums


def _data(rng, n, *, ties=True, fractional=False):
    s = np.round(rng.normal(size=n), 2) if ties else rng.normal(size=n)
    p = 1 / (1 + np.exp(-2 * s))
    y = rng.uniform(size=n) if fractional else (rng.uniform(size=n) < p).astype(float)
    w = rng.uniform(0.1, 3.0, n)
    return s, y, w


def _assert_same_counts(a: ScoreCounts, b: ScoreCounts, *, tol=TOL):
    np.testing.assert_array_equal(a.scores, b.scores)  # bit for bit
    np.testing.assert_array_equal(a.count, b.count)
    for name in ("weight", "label_sum", "label_variance"):
        np.testing.assert_allclose(getattr(a, name), getattr(b, name), rtol=tol, atol=tol)
    for name in ("score_max", "edges"):
        x, y = getattr(a, name), getattr(b, name)
        assert (x is None) == (y is None)
        if x is not None:
            np.testing.assert_array_equal(x, y)


# ----------------------------------------------------------------------- the counts


def test_counts_are_the_sums_by_distinct_score():
    rng = np.random.default_rng(0)
    s, y, w = _data(rng, 500, fractional=True)
    s[:4] = [-0.0, 0.0, 0.0, -0.0]  # -0.0 ties 0.0
    w[10] = 0.0
    got = score_counts(s, y, w)
    sums = defaultdict(lambda: [0, 0.0, 0.0])
    for si, yi, wi in zip(s.tolist(), y.tolist(), w.tolist(), strict=True):
        row = sums[si + 0.0]
        row[0] += 1
        row[1] += wi
        row[2] += wi * yi
    keys = sorted(sums)
    np.testing.assert_array_equal(got.scores, keys)
    assert not np.any(np.signbit(got.scores) & (got.scores == 0))  # one key, +0.0
    np.testing.assert_array_equal(got.count, [sums[k][0] for k in keys])
    np.testing.assert_allclose(got.weight, [sums[k][1] for k in keys], rtol=TOL)
    np.testing.assert_allclose(got.label_sum, [sums[k][2] for k in keys], rtol=TOL, atol=TOL)
    np.testing.assert_allclose(got.label_variance, np.sum(w * y * (1 - y)), rtol=TOL)
    assert got.quantization_bound == 0.0 and not got.quantized


def test_merge_and_chunks_give_the_counts_of_the_union():
    """Any split, in any order, through merge, concatenate or from_chunks (a list, a
    generator, a callable): the counts of all the data. Integer weights: bit for bit."""
    rng = np.random.default_rng(1)
    s, y, w = _data(rng, 900)
    w = np.round(w * 4)  # integer weights: every sum exact
    whole = score_counts(s, y, w)
    cuts = np.sort(rng.choice(np.arange(1, 900), 6, replace=False))
    parts = [(a, b, c) for a, b, c in zip(*(np.split(v, cuts) for v in (s, y, w)), strict=True)]
    counts = [score_counts(*p) for p in parts]
    for got in (
        merge(*counts[::-1]),
        counts[2].merge(*counts[:2], *counts[3:]),
        ScoreCounts.concatenate(counts),
        from_chunks(parts),
        from_chunks(lambda: iter(parts)),
        from_chunks(p for p in parts),
        from_chunks([*parts[:3], (np.zeros(0), np.zeros(0)), *parts[3:]]),  # empty chunk
    ):
        _assert_same_counts(got, whole, tol=0)


def test_quantised_counts_merge_on_one_grid():
    """Quantising then merging chunks equals quantising the merged exact counts: per bin the
    sums, the smallest and the largest score."""
    rng = np.random.default_rng(2)
    s, y, w = _data(rng, 800, ties=False)
    edges = np.linspace(-2, 2, 41)  # scores beyond +-2 fall in the end bins
    parts = [(s[i : i + 100], y[i : i + 100], w[i : i + 100]) for i in range(0, 800, 100)]
    want = quantize(score_counts(s, y, w), edges)
    _assert_same_counts(from_chunks(parts, bins=edges), want)
    # quantised counts merge with exact ones, which are quantised to their grid
    mixed = [score_counts(*parts[0], bins=edges), *(score_counts(*p) for p in parts[1:])]
    _assert_same_counts(merge(*mixed), want)
    ids = np.searchsorted(edges[1:-1], s, side="right")
    for k, b in enumerate(np.unique(ids)):
        inside = ids == b
        assert want.scores[k] == s[inside].min() and want.score_max[k] == s[inside].max()
        np.testing.assert_allclose(want.weight[k], w[inside].sum(), rtol=TOL)
    assert quantize(want, edges).scores.shape == want.scores.shape  # idempotent


def test_order_keys_sort_like_the_floats_and_invert():
    x = np.array([-np.inf, -1e300, -1.5, -5e-324, -0.0, 0.0, 5e-324, 2.0, 1e308, np.inf])
    k = order_keys(x)
    assert np.all(np.diff(k) >= 0) and k[4] == k[5]  # -0.0 keys as 0.0
    assert np.all(np.diff(np.r_[k[:4], k[5:]]) > 0)
    back = from_order_keys(k)
    np.testing.assert_array_equal(back, np.r_[x[:4], 0.0, x[5:]])
    assert not np.signbit(back[4])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([0.1, np.nan], [0, 1]), "non-finite"),
        (([0.1, np.inf], [0, 1]), "non-finite"),
        (([0.1, 0.2], [0, 2]), r"labels must lie in \[0, 1\]"),
        (([0.1, 0.2], [0, np.nan]), r"labels must lie in \[0, 1\]"),
        (([0.1, 0.2], [0, 1], [1.0, -1.0]), "non-negative"),
        (([0.1, 0.2], [0, 1], [1.0, np.inf]), "non-negative"),
        (([0.1, 0.2], [0, 1, 1]), "length mismatch"),
        (([], []), "empty"),
    ],
)
def test_score_counts_rejects_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        score_counts(*args)


def test_chunks_grids_and_merges_reject_bad_input():
    good = (np.array([0.1, 0.2]), np.array([0, 1]))
    with pytest.raises(ValueError, match="chunk 1 of the source must be a tuple"):
        from_chunks([good, np.zeros(3)])
    with pytest.raises(ValueError, match=r"chunk 1 of the source: labels must lie"):
        from_chunks([good, (np.array([0.3]), np.array([3]))])
    with pytest.raises(ValueError, match="no data"):
        from_chunks([])
    with pytest.raises(ValueError, match="iterable"):
        from_chunks(3)
    with pytest.raises(ValueError, match="fixed grid"):
        from_chunks([good], bins=16)
    with pytest.raises(ValueError, match="non-decreasing"):
        score_counts(*good, bins=[0.0, 1.0, 0.5])
    a = score_counts(*good, bins=[0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="different grids"):
        merge(a, score_counts(*good, bins=[0.0, 0.4, 1.0]))
    with pytest.raises(ValueError, match="straddle"):
        quantize(score_counts([0.1, 0.2, 0.3], [0, 1, 1], bins=[0, 1]), [0.0, 0.15, 1.0])
    with pytest.raises(ValueError, match="not a ScoreCounts"):
        merge(a, good)


# ------------------------------------------------------------------- the exact fit


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"increasing": False},
        {"increasing": "auto", "interpolation": "step"},
        {"trim": 0.05, "out_of_bounds": "nan"},
        {"centered": True},
    ],
)
def test_fit_counts_is_the_fit_of_the_raw_data(options):
    """The same knots as ``fit`` on the raw data (to float64 rounding), and at every
    score the same values as scikit-learn's weighted IsotonicRegression."""
    rng = np.random.default_rng(3)
    s, y, w = _data(rng, 600)
    if options.get("increasing") is False:
        y = 1.0 - y
    cal = jaxcal.IsotonicCalibration(**options)
    want = cal.fit(s, y, sample_weight=w)
    got = cal.fit_counts(score_counts(s, y, w))
    assert isinstance(got, FittedIsotonic) and got.quantization_bound == 0.0
    assert got.increasing == want.increasing
    np.testing.assert_allclose(got.knots_x, want.knots_x, rtol=0, atol=TOL)
    np.testing.assert_allclose(got.knots_y, want.knots_y, rtol=0, atol=TOL)
    if options.get("centered") or options.get("trim"):
        return
    grid = np.linspace(s.min(), s.max(), 301)
    iso = IsotonicRegression(increasing=want.increasing).fit(s, y, sample_weight=w)
    if options.get("interpolation") != "step":
        np.testing.assert_allclose(got.predict(grid), iso.predict(grid), atol=1e-10)
    np.testing.assert_allclose(got.predict(s), iso.predict(s), atol=1e-10)


def test_fit_counts_refuses_what_it_cannot_fit():
    c = score_counts([0.1, 0.2, 0.3], [1, 1, 1])
    with pytest.raises(ValueError, match="one class"):
        jaxcal.IsotonicCalibration().fit_counts(c)
    with pytest.raises(ValueError, match="needs a ScoreCounts"):
        jaxcal.IsotonicCalibration().fit_counts(([0.1], [1]))
    with pytest.raises(ValueError, match="total weight"):
        jaxcal.IsotonicCalibration().fit_counts(score_counts([0.1, 0.2], [0, 1], [0.0, 0.0]))
    q = score_counts([0.1, 0.2, 0.3], [0, 1, 1], bins=[0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="needs exact counts"):
        jaxcal.IsotonicCalibration(centered=True).fit_counts(q)
    with pytest.raises(ValueError, match="trim"):
        jaxcal.IsotonicCalibration(trim=0.7).fit_counts(c)


def test_fit_counts_of_a_new_size_in_its_bucket_compiles_nothing(compiles):
    rng = np.random.default_rng(4)
    cal = jaxcal.IsotonicCalibration()
    cal.fit_counts(score_counts(*_data(rng, 300)))
    with compiles() as c:
        cal.fit_counts(score_counts(*_data(rng, 280)))  # fewer distinct scores, same bucket
    assert c.count == 0


def test_fitted_counts_save_and_load(tmp_path):
    rng = np.random.default_rng(5)
    s, y, w = _data(rng, 300, ties=False)
    q = score_counts(s, y, w, bins=32)
    fitted = jaxcal.IsotonicCalibration().fit_counts(q)
    fitted.save(tmp_path / "iso.npz")
    back = jaxcal.load(tmp_path / "iso.npz")
    assert type(back) is FittedIsotonicCounts
    assert back.quantization_bound == fitted.quantization_bound > 0
    np.testing.assert_array_equal(back.predict(s), fitted.predict(s))
    q.save(tmp_path / "counts.npz")
    _assert_same_counts(jaxcal.load(tmp_path / "counts.npz"), q, tol=0)


# --------------------------------------------------------------- the quantised fit


def _bin_ids(counts, s):
    return np.searchsorted(counts.edges[1:-1], s, side="right")


@pytest.mark.parametrize(
    ("n", "n_bins", "fractional", "options"),
    [
        (100_000, 4096, False, {}),
        (20_000, 256, True, {"increasing": False, "interpolation": "step"}),
        (20_000, 64, False, {"trim": 0.02}),
    ],
)
def test_quantised_fit_is_within_its_bound(n, n_bins, fractional, options):
    """On continuous scores, the fit on counts quantised to equal-weight bins is the best
    bin-constant monotone fit (scikit-learn on bin ids, at every training score, with either
    interpolation), and (1/W) sum w (g - f)^2 <= (L(g) - L(f)) / W <= quantization_bound
    against scikit-learn's exact fit f; with 4096 bins on 1e5 scores the bound is < 0.01."""
    rng = np.random.default_rng(6)
    s, y, w = _data(rng, n, ties=False, fractional=fractional)
    if options.get("increasing") is False:
        y = 1.0 - y
    counts = quantize(score_counts(s, y, w), n_bins)
    cal = jaxcal.IsotonicCalibration(**options)
    fitted = cal.fit_counts(counts)
    bound = fitted.quantization_bound
    assert bound == counts.quantization_bound
    assert 0 < bound <= 2.5 / n_bins  # equal-weight bins: about 2 / n_bins
    lo, hi = options.get("trim", 0.0), 1 - options.get("trim", 0.0)
    increasing = options.get("increasing", True)
    exact = IsotonicRegression(increasing=increasing, y_min=lo, y_max=hi)
    f = exact.fit(s, y, sample_weight=w).predict(s)
    g = np.asarray(fitted.predict(s), np.float64)
    ids = _bin_ids(counts, s).astype(float)
    by_bin = IsotonicRegression(increasing=increasing, y_min=lo, y_max=hi)
    np.testing.assert_allclose(g, by_bin.fit(ids, y, sample_weight=w).predict(ids), atol=1e-10)
    total = w.sum()
    gap = np.dot(w, (g - f) ** 2) / total
    excess = (np.dot(w, (y - g) ** 2) - np.dot(w, (y - f) ** 2)) / total
    assert 0 < gap <= excess + 1e-12
    assert excess <= bound
    if n_bins == 4096:
        assert bound < 0.01


def test_discrete_scores_quantise_exactly():
    """Every bin holds one distinct score: the bound is 0 and the fit is the exact one."""
    rng = np.random.default_rng(7)
    s, y, w = _data(rng, 400)
    edges = np.arange(-5.0, 5.0, 0.01) - 0.005  # one distinct score (0.01 steps) per bin
    q = score_counts(s, y, w, bins=edges)
    assert q.quantization_bound == 0.0 and q.quantized
    got = jaxcal.IsotonicCalibration().fit_counts(q)
    want = jaxcal.IsotonicCalibration().fit(s, y, sample_weight=w)
    np.testing.assert_allclose(got.knots_x, want.knots_x, atol=TOL)
    np.testing.assert_allclose(got.knots_y, want.knots_y, atol=TOL)


# ------------------------------------------------------------------------ IPS losses


def _ips_data(rng, n, *, ties=True):
    """Clicks ``Y = O R`` with exposure ``O ~ Bernoulli(omega)``, omega in [0.1, 1]: IPS
    targets ``Y / omega`` up to 10."""
    s, _, w = _data(rng, n, ties=ties)
    relevant = rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))
    omega = rng.uniform(0.1, 1.0, n)
    y = (relevant & (rng.uniform(size=n) < omega)).astype(float)
    return s, y, w, omega


def _sklearn_loss_fit(s, y, w, omega, loss, at):
    """scikit-learn's bounded isotonic fit of the loss-weighted targets, at ``at``."""
    if loss == "ips":
        t, v = y / omega, w
    else:  # ips_positive
        t, v = y, w * (y / omega + 1 - y)
    return IsotonicRegression(y_min=0.0, y_max=1.0).fit(s, t, sample_weight=v).predict(at)


@pytest.mark.parametrize("loss", ["ips", "ips_positive"])
@pytest.mark.parametrize("ties", [True, False])
def test_ips_counts_fit_is_the_ips_fit_of_the_raw_data(loss, ties):
    """Counts built with an IPS loss fit what the in-memory IPS fit and scikit-learn's
    bounded isotonic regression of the loss-weighted targets give (``loss="ips"``: targets
    up to 10, fitted before the clip to [0, 1])."""
    rng = np.random.default_rng(21)
    s, y, w, omega = _ips_data(rng, 3000, ties=ties)
    counts = score_counts(s, y, w, propensity=omega, loss=loss)
    if loss == "ips":
        assert counts.target_max == (y / omega).max() > 5
        np.testing.assert_allclose(counts.targets.sum(), np.dot(w, y / omega), rtol=TOL)
    else:
        assert counts.target_sum is None
    cal = jaxcal.IsotonicCalibration(increasing=True)
    got = cal.fit_counts(counts)
    want = cal.fit(s, y, sample_weight=w, propensity=omega, loss=loss)
    np.testing.assert_allclose(got.knots_x, want.knots_x, atol=TOL)
    np.testing.assert_allclose(got.knots_y, want.knots_y, atol=1e-10)
    oracle = _sklearn_loss_fit(s, y, w, omega, loss, s)
    np.testing.assert_allclose(np.asarray(got.predict(s), np.float64), oracle, atol=1e-10)
    assert np.ptp(oracle) > 0.5  # a real map, not a constant


def test_ips_counts_stream_and_merge():
    """IPS counts from chunks (with their propensities) equal the counts of all the data;
    merged with counts of labels, the labels are their targets."""
    rng = np.random.default_rng(22)
    s, y, w, omega = _ips_data(rng, 2000)
    chunks = [(s[i : i + 300], y[i : i + 300], w[i : i + 300], omega[i : i + 300])
              for i in range(0, 2000, 300)]  # fmt: skip
    whole = score_counts(s, y, w, propensity=omega, loss="ips")
    streamed = from_chunks(chunks, loss="ips")
    _assert_same_counts(streamed, whole)
    np.testing.assert_allclose(streamed.target_sum, whole.target_sum, rtol=TOL, atol=TOL)
    assert streamed.target_max == whole.target_max
    ips_part = score_counts(s[:1000], y[:1000], w[:1000], propensity=omega[:1000], loss="ips")
    label_part = score_counts(s[1000:], y[1000:], w[1000:])
    mixed = merge(ips_part, label_part)
    t = np.r_[y[:1000] / omega[:1000], y[1000:]]
    cal = jaxcal.IsotonicCalibration(increasing=True)
    want = IsotonicRegression(y_min=0.0, y_max=1.0).fit(s, t, sample_weight=w).predict(s)
    np.testing.assert_allclose(cal.fit_counts(mixed).predict(s), want, atol=1e-10)
    assert mixed.target_max == ips_part.target_max


def test_ips_quantised_fit_is_within_its_bound():
    """Quantised IPS counts: the bound grows with the largest target T,
    2 max(1, T) max W_k / W, and (1/W) sum w (g - f)^2 <= (L(g) - L(f)) / W <= bound
    against scikit-learn's exact bounded fit f of the targets."""
    rng = np.random.default_rng(23)
    s, y, w, omega = _ips_data(rng, 20_000, ties=False)
    labels_only = quantize(score_counts(s, y, w), 64)
    counts = quantize(score_counts(s, y, w, propensity=omega, loss="ips"), 64)
    T = float(counts.target_max)
    assert T > 5
    np.testing.assert_allclose(counts.quantization_bound, T * labels_only.quantization_bound)
    fitted = jaxcal.IsotonicCalibration(increasing=True).fit_counts(counts)
    t = y / omega
    f = IsotonicRegression(y_min=0.0, y_max=1.0).fit(s, t, sample_weight=w).predict(s)
    g = np.asarray(fitted.predict(s), np.float64)
    total = w.sum()
    gap = np.dot(w, (g - f) ** 2) / total
    excess = (np.dot(w, (t - g) ** 2) - np.dot(w, (t - f) ** 2)) / total
    assert 0 < gap <= excess + 1e-12
    assert excess <= counts.quantization_bound


def test_ips_counts_refuse_what_they_cannot_hold():
    rng = np.random.default_rng(24)
    s, y, w, omega = _ips_data(rng, 200)
    with pytest.raises(ValueError, match="snips"):
        score_counts(s, y, w, propensity=omega, loss="snips")
    with pytest.raises(ValueError, match="needs per-pair propensities"):
        score_counts(s, y, w, loss="ips")
    with pytest.raises(ValueError, match="propensity must be > 0"):
        score_counts(s, y, w, propensity=np.zeros(200), loss="ips")
    with pytest.raises(ValueError, match="chunk 1 of the source: .*propensity must be <= 1"):
        from_chunks([(s, y, w, omega), (s, y, w, omega + 1)], loss="ips")
    counts = score_counts(s, y, w, propensity=omega, loss="ips")
    with pytest.raises(ValueError, match="increasing=True or False"):
        jaxcal.IsotonicCalibration(increasing="auto").fit_counts(counts)
    only_positive = score_counts(s, np.ones(200), w, propensity=omega, loss="ips")
    with pytest.raises(ValueError, match="only one class"):
        jaxcal.IsotonicCalibration(increasing=True).fit_counts(only_positive)


def test_ips_counts_save_and_load(tmp_path):
    rng = np.random.default_rng(25)
    s, y, w, omega = _ips_data(rng, 300)
    counts = score_counts(s, y, w, propensity=omega, loss="ips", bins=16)
    jaxcal.save(counts, tmp_path / "c")
    back = jaxcal.load(tmp_path / "c.npz")
    _assert_same_counts(back, counts, tol=0)
    np.testing.assert_array_equal(back.target_sum, counts.target_sum)
    assert back.target_max == counts.target_max


# ----------------------------------------------------------------- across processes

_PROCESS_DATA = """
import numpy as np
def process_data(pid):
    rng = np.random.default_rng(100 + pid)
    n = 300 + 50 * pid
    s = np.round(rng.normal(size=n), 2)  # ties within and across processes
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))).astype(float)
    w = np.round(rng.uniform(0.5, 3.0, n) * 4)  # integer weights: exact sums
    return s, y, w
def process_propensity(pid, n):
    return 1.0 / np.random.default_rng(200 + pid).integers(1, 9, n)  # targets Y / omega: exact
"""


_PROCESS_RUN = """
import json
import jaxcal
from jaxcal.fitting.score_counts import score_counts
from jaxcal.metrics import auc_from_counts
s, y, w = process_data(PID)
edges = np.linspace(-2, 2, 17)
exact = score_counts(s, y, w).across_processes()
quantised = score_counts(s, y, w, bins=edges).across_processes()
fitted = jaxcal.IsotonicCalibration().fit_counts(exact)
ips = score_counts(s, y, w, propensity=process_propensity(PID, len(s)), loss="ips")
ips = ips.across_processes()
errors = []
for bad in (score_counts(s, y, w, bins=edges + PID),  # another grid on process 1
            score_counts(s, y, w, bins=edges if PID else None)):  # exact on process 0
    try:
        bad.across_processes()
    except ValueError as exc:
        errors.append(str(exc))
out = {"errors": errors, "auc": auc_from_counts(exact), "q_max": quantised.score_max.tolist(),
       "knots_x": np.asarray(fitted.knots_x).tolist(),
       "knots_y": np.asarray(fitted.knots_y).tolist(),
       "ips_targets": ips.target_sum.tolist(), "ips_max": float(ips.target_max)}
for name, c in (("e", exact), ("q", quantised)):
    for field in ("scores", "count", "weight", "label_sum"):
        out[name + "_" + field] = getattr(c, field).tolist()
print(json.dumps(out))
"""


def test_two_processes_merge_fit_and_score_as_one():
    """Each of two processes counts its own data: the counts it gets back (exact and
    quantised), the isotonic fit and the AUC are those of the union of the data, on both
    processes; mismatched grids or kinds raise on both."""
    outs = [
        json.loads(o.strip().splitlines()[-1])
        for o in run_processes(_PROCESS_DATA + _PROCESS_RUN, 2)
    ]
    namespace: dict = {}
    exec(_PROCESS_DATA, namespace)
    s, y, w = (
        np.concatenate(v) for v in zip(*(namespace["process_data"](p) for p in (0, 1)), strict=True)
    )
    exact = score_counts(s, y, w)
    quantised = score_counts(s, y, w, bins=np.linspace(-2, 2, 17))
    fitted = jaxcal.IsotonicCalibration().fit_counts(exact)
    omega = np.concatenate(
        [namespace["process_propensity"](p, len(namespace["process_data"](p)[0])) for p in (0, 1)]
    )
    ips = score_counts(s, y, w, propensity=omega, loss="ips")
    for out in outs:
        assert out == outs[0]  # identical on every process
        for name, c in (("e", exact), ("q", quantised)):
            for f in ("scores", "count", "weight", "label_sum"):
                assert out[f"{name}_{f}"] == getattr(c, f).tolist()  # bit for bit
        assert out["q_max"] == quantised.score_max.tolist()
        np.testing.assert_allclose(out["knots_x"], fitted.knots_x, atol=TOL)
        np.testing.assert_allclose(out["knots_y"], fitted.knots_y, atol=TOL)
        assert abs(out["auc"] - float(auc(s, y, sample_weight=w))) < TOL
        assert abs(out["auc"] - auc_from_counts(exact)) < TOL
        assert out["ips_targets"] == ips.target_sum.tolist()  # bit for bit
        assert out["ips_max"] == float(ips.target_max)
        assert "different grids" in out["errors"][0]
        assert "exact counts and others quantised" in out["errors"][1]
