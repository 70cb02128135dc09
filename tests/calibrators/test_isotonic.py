"""Isotonic regression: oracles are scikit-learn's IsotonicRegression (float64), brute-force
enumeration of block partitions, and monotonicity / rank properties (hypothesis)."""

from __future__ import annotations

import dataclasses
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial import ConvexHull
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import roc_auc_score, roc_curve

import jaxcal
from jaxcal._native import ENV, pav_cpu_available
from jaxcal.calibrators.isotonic import FittedIsotonic, check_increasing, isotonic_regression

EXACT = 1e-9  # the acceptance tolerance against scikit-learn (float64)


@pytest.fixture(params=["native", "portable"])
def pav_path(request, monkeypatch):
    """Runs a test of ``isotonic_regression`` on both implementations: the compiled CPU
    kernel (``jaxcal._native``) and the pure-JAX merge tree that GPU / TPU programs use."""
    if request.param == "portable":
        monkeypatch.setenv(ENV, "0")
    elif not pav_cpu_available():
        pytest.skip("compiled CPU kernel not built")
    return request.param


def _data(rng, n, *, ties=True):
    x = rng.integers(0, max(2, n // 3), n).astype(float) if ties else rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-(x - x.mean())))).astype(float)
    y[:2] = [0.0, 1.0]
    w = rng.uniform(0.1, 3.0, n)
    return x, y, w


@pytest.mark.usefixtures("pav_path")
@pytest.mark.parametrize("increasing", [True, False])
def test_equals_sklearn_weighted_with_ties(increasing):
    rng = np.random.default_rng(0)
    for n in (7, 30, 64, 60, 33):
        x, y, w = _data(rng, n)
        y = y + rng.normal(size=n) * 0.3  # real-valued targets too
        ours = np.asarray(isotonic_regression(x, y, sample_weight=w, increasing=increasing))
        ref = IsotonicRegression(increasing=increasing).fit(x, y, sample_weight=w).predict(x)
        np.testing.assert_allclose(ours, ref, rtol=0, atol=EXACT)


@pytest.mark.usefixtures("pav_path")
@pytest.mark.parametrize("interpolation", ["linear", "step"])
def test_calibrator_predict_matches_sklearn_off_grid(interpolation):
    rng = np.random.default_rng(1)
    x, y, w = _data(rng, 50)
    cal = jaxcal.IsotonicCalibration(interpolation=interpolation).fit(x, y, sample_weight=w)
    q = rng.uniform(x.min() - 2, x.max() + 2, 300)
    ir = IsotonicRegression(out_of_bounds="clip").fit(x, y, sample_weight=w)
    if interpolation == "linear":
        ref = ir.predict(q)
    else:  # right-continuous step: value of the last training score <= q
        xs = np.unique(x)
        ref = ir.predict(xs)[np.clip(np.searchsorted(xs, q, side="right") - 1, 0, None)]
    np.testing.assert_allclose(np.asarray(cal.predict(q)), ref, rtol=0, atol=EXACT)


def _brute_force(x, y, w):
    """Best monotone fit by enumerating all partitions of the sorted tie classes into
    consecutive blocks (block value = weighted mean), keeping monotone ones."""
    xs = np.unique(x)
    sy = np.array([np.sum((w * y)[x == v]) for v in xs])
    sw = np.array([np.sum(w[x == v]) for v in xs])
    k = xs.size
    best, best_val = None, np.inf
    for cuts in itertools.product([0, 1], repeat=k - 1):
        edges = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [k]
        means = [sy[a:b].sum() / sw[a:b].sum() for a, b in zip(edges[:-1], edges[1:], strict=True)]
        if np.any(np.diff(means) < -1e-15):
            continue
        f = np.concatenate(
            [[m] * (b - a) for m, a, b in zip(means, edges[:-1], edges[1:], strict=True)]
        )
        fx = f[np.searchsorted(xs, x)]
        val = np.sum(w * (y - fx) ** 2)
        if val < best_val:
            best, best_val = fx, val
    return best


@pytest.mark.usefixtures("pav_path")
def test_brute_force_small():
    rng = np.random.default_rng(2)
    for _ in range(15):
        n = int(rng.integers(2, 9))
        x = rng.integers(0, 6, n).astype(float)
        y = rng.normal(size=n)
        w = rng.uniform(0.2, 2.0, n)
        ours = np.asarray(isotonic_regression(x, y, sample_weight=w))
        np.testing.assert_allclose(ours, _brute_force(x, y, w), atol=EXACT)


@pytest.mark.usefixtures("pav_path")
def test_clipping_solves_bounded_problem():
    rng = np.random.default_rng(3)
    x, y, w = _data(rng, 40)
    y = y * 3 - 1
    ours = np.asarray(isotonic_regression(x, y, sample_weight=w, y_min=-0.2, y_max=0.9))
    ref = IsotonicRegression(y_min=-0.2, y_max=0.9).fit(x, y, sample_weight=w).predict(x)
    np.testing.assert_allclose(ours, ref, atol=EXACT)


@pytest.mark.usefixtures("pav_path")
def test_batched_by_group_equals_loop_and_vmap():
    rng = np.random.default_rng(4)
    G, n = 4, 16
    xs, ys, ws = zip(*[_data(rng, n) for _ in range(G)], strict=True)
    x, y, w = np.concatenate(xs), np.concatenate(ys), np.concatenate(ws)
    group = np.repeat(np.array([7, -3, 100, 0]), n)  # arbitrary integer ids
    perm = rng.permutation(G * n)  # interleaved groups
    grouped = np.empty(G * n)
    grouped[perm] = np.asarray(
        isotonic_regression(x[perm], y[perm], sample_weight=w[perm], group=group[perm])
    )
    looped = np.concatenate(
        [
            IsotonicRegression().fit(a, b, sample_weight=c).predict(a)
            for a, b, c in zip(xs, ys, ws, strict=True)
        ]
    )
    np.testing.assert_allclose(grouped, looped, atol=EXACT)
    vm = jax.vmap(lambda a, b, c: isotonic_regression(a, b, sample_weight=c))(
        jnp.stack(xs), jnp.stack(ys), jnp.stack(ws)
    )
    np.testing.assert_allclose(np.asarray(vm).ravel(), looped, atol=EXACT)


@pytest.mark.usefixtures("pav_path")
@pytest.mark.parametrize(("tie_class", "grouped"), [(2, True), (3, False)])
def test_sort_resolves_keys_equal_in_all_but_the_last_bits(tie_class, grouped):
    """Scores 1 ulp apart share every bit the first packed sort pass sees (position bits take
    the rest of the 63), so only a further pass can order them: the order must be exactly
    np.lexsort's and the fit scikit-learn's, with classes of two and three such scores."""
    from jaxcal.fitting.pav import _sorted_runs

    rng = np.random.default_rng(tie_class)
    base = rng.uniform(-1e3, 1e3, 700)  # keys span ~63 bits: the low ones are left over
    x = np.concatenate([base] + [np.nextafter(base, np.inf)] * (tie_class - 1))
    for _ in range(tie_class - 2):  # tie_class - 1 distinct successors: 1, 2, ... ulp
        x[-700:] = np.nextafter(x[-700:], np.inf)
    twins = rng.uniform(-1e3, 1e3, 50)
    x = np.concatenate([x, twins, twins])  # exact ties (classes of two) too
    perm = rng.permutation(x.size)
    x = x[perm]
    y = rng.uniform(size=x.size)
    w = rng.uniform(0.5, 2.0, x.size)
    group = rng.integers(0, 3, x.size) if grouped else None
    order, run, _ = jax.jit(_sorted_runs)(
        jnp.asarray(x), None if group is None else jnp.asarray(group)
    )
    keys = (x,) if group is None else (x, group)
    ref = np.lexsort(keys)
    np.testing.assert_array_equal(x[np.asarray(order)], x[ref])
    if group is not None:
        np.testing.assert_array_equal(group[np.asarray(order)], group[ref])
    pairs = zip(x, group if grouped else 0 * x, strict=True)
    assert int(run[-1]) + 1 == len(set(pairs))  # runs = distinct (score, group) pairs
    ours = np.asarray(isotonic_regression(x, y, sample_weight=w, group=group))
    if group is None:
        ref_fit = IsotonicRegression().fit(x, y, sample_weight=w).predict(x)
    else:
        ref_fit = np.empty_like(x)
        for g in range(3):
            m = group == g
            ref_fit[m] = IsotonicRegression().fit(x[m], y[m], sample_weight=w[m]).predict(x[m])
    np.testing.assert_allclose(ours, ref_fit, atol=EXACT)


@pytest.mark.usefixtures("pav_path")
def test_jit_path_and_no_recompile():
    rng = np.random.default_rng(5)
    f = jax.jit(lambda a, b: isotonic_regression(a, b, y_min=0.0, y_max=1.0))
    x, y, _ = _data(rng, 32)
    first = f(x, y)
    np.testing.assert_allclose(first, IsotonicRegression().fit(x, y).predict(x), atol=EXACT)
    x2, y2, _ = _data(rng, 32)
    before = f._cache_size()
    f(x2, y2).block_until_ready()
    assert f._cache_size() == before


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-5, 5), st.floats(-3, 3), st.floats(0.01, 5)),
        min_size=2,
        max_size=16,
    ),
    st.booleans(),
)
def test_monotone_and_tie_pooled(points, increasing):
    x, y, w = (np.array(c, float) for c in zip(*points, strict=True))
    f = np.asarray(isotonic_regression(x, y, sample_weight=w, increasing=increasing))
    order = np.argsort(x, kind="stable")
    d = np.diff(f[order])
    assert np.all(d >= -1e-12) if increasing else np.all(d <= 1e-12)
    for v in np.unique(x):  # ties share one value
        assert np.ptp(f[x == v]) <= 1e-12
    # weighted mean is preserved (a KKT condition of the projection)
    assert abs(np.sum(w * f) - np.sum(w * y)) <= 1e-9 * (1 + np.sum(w * np.abs(y)))


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.booleans())
def test_elementwise_first_merge_level_equals_general_level(seed, n_groups, zero_weights):
    """The element-wise level 0 of the merge tree equals the general (gather-based) merge
    of that level, with groups, ties in the means and zero-weight runs."""
    from jaxcal.fitting.pav import _first_level, _merge_level

    rng = np.random.default_rng(seed)
    size = 64
    sw = rng.integers(1, 4, size).astype(float)
    if zero_weights:
        sw[rng.uniform(size=size) < 0.2] = 0.0
    sy = sw * rng.integers(0, 3, size) / 2  # many equal means
    grp = np.sort(rng.integers(0, n_groups, size)).astype(np.int32)
    pos = np.arange(size)
    state = tuple(jnp.asarray(a) for a in (sy, sw, grp, pos, pos, np.ones(size, bool)))
    ours = jax.jit(_first_level)(state)  # jitted: compiled once for all examples
    ref = jax.jit(_merge_level, static_argnums=(1, 2, 3))(state, 0, size, size // 2)
    is_start = np.asarray(ref[5])
    np.testing.assert_array_equal(np.asarray(ours[5]), is_start)
    starts = np.flatnonzero(is_start)
    for k in (0, 1, 4):  # sums and block end at block starts
        np.testing.assert_array_equal(np.asarray(ours[k])[starts], np.asarray(ref[k])[starts])
    ends = np.asarray(ref[4])[starts]
    np.testing.assert_array_equal(np.asarray(ours[3])[ends], np.asarray(ref[3])[ends])


def _auc(s, y):
    return roc_auc_score(y, s)


@pytest.mark.usefixtures("pav_path")
def test_centered_variant_is_strict_between_its_flat_ends_and_keeps_auc():
    rng = np.random.default_rng(6)
    n = 64
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * s))).astype(float)
    plain = jaxcal.IsotonicCalibration().fit(s, y)
    step = jaxcal.IsotonicCalibration(interpolation="step").fit(s, y)
    cir = jaxcal.IsotonicCalibration(centered=True).fit(s, y)
    # CIR is flat only from the training minimum to the last knot with the first value and
    # from the first knot with the last value to the maximum: a strictly increasing function
    # of the clipped score there, which ties no two distinct clipped scores
    kx, ky = np.asarray(cir.knots_x), np.asarray(cir.knots_y)
    a, b = kx[ky == ky[0]].max(), kx[ky == ky[-1]].min()
    assert s.min() < a < b < s.max()
    inside = np.sort(s[(s > a) & (s < b)])
    p_cir = np.asarray(cir.predict(inside))
    assert np.all(np.diff(p_cir) > 0)  # strictly increasing between the flat ends
    clipped = np.clip(s, a, b)
    assert np.unique(np.asarray(cir.predict(s))).size == np.unique(clipped).size
    assert np.unique(np.asarray(step.predict(s))).size < n // 3  # PAV steps tie a lot
    assert _auc(np.asarray(cir.predict(s)), y) == pytest.approx(_auc(clipped, y), abs=1e-12)
    # PAV's ROC is the ROC convex hull of the scores (Fawcett & Niculescu-Mizil 2007): the
    # step map's training AUC (ties count 1/2) is the area under the hull, never below AUC
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    hull = ConvexHull(np.c_[np.r_[fpr, 1.0], np.r_[tpr, 0.0]])
    assert _auc(np.asarray(step.predict(s)), y) == pytest.approx(hull.volume, abs=1e-12)
    assert hull.volume >= _auc(s, y)
    fresh = rng.normal(size=n)  # off the training points, interpolation breaks the steps
    assert np.unique(np.asarray(plain.predict(fresh))).size > np.unique(step.predict(fresh)).size


@pytest.mark.usefixtures("pav_path")
def test_trim_and_ips_targets_clipped():
    rng = np.random.default_rng(7)
    s = rng.normal(size=60)
    y = (s > 0).astype(float)
    cal = jaxcal.IsotonicCalibration(trim=0.01).fit(s, y)
    p = np.asarray(cal.predict(s))
    assert p.min() == pytest.approx(0.01) and p.max() == pytest.approx(0.99)
    prop = rng.uniform(0.2, 1.0, 60)
    ips = jaxcal.IsotonicCalibration().fit(s, y, propensity=prop, loss="ips")
    ref = np.clip(IsotonicRegression().fit(s, y / prop).predict(s), 0, 1)
    np.testing.assert_allclose(np.asarray(ips.predict(s)), ref, atol=EXACT)


def test_predict_inside_jit_and_save_load(tmp_path):
    rng = np.random.default_rng(8)
    x, y, w = _data(rng, 40)
    for kw in ({}, {"increasing": False}, {"centered": True}, {"interpolation": "step"}):
        cal = jaxcal.IsotonicCalibration(**kw).fit(x, y, sample_weight=w)
        q = rng.uniform(-1, 15, 50)
        inside = jax.jit(lambda c, s: c.predict(s))(cal, q)
        # a user's jit compiles its own program, with XLA's default options: the linear
        # interpolation may round differently in the last bit (fused multiply-adds)
        np.testing.assert_allclose(np.asarray(inside), np.asarray(cal.predict(q)), rtol=4e-16)
        cal.save(tmp_path / "iso.npz")
        back = jaxcal.load(tmp_path / "iso.npz")
        assert type(back) is FittedIsotonic
        assert jax.tree.structure(back) == jax.tree.structure(cal)  # static fields included
        for field in dataclasses.fields(cal):  # every field, array or setting, as fitted
            a, b = getattr(cal, field.name), getattr(back, field.name)
            for old, new in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
                assert np.asarray(new).dtype == np.asarray(old).dtype, field.name
                np.testing.assert_array_equal(np.asarray(new), np.asarray(old), field.name)
            if not jax.tree.leaves(a):
                assert b == a, field.name
        np.testing.assert_array_equal(np.asarray(back.predict(q)), np.asarray(cal.predict(q)))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"x": [0.0, np.nan], "y": [0.0, 1.0]}, "non-finite"),
        ({"x": [0.0, 1.0], "y": [0.0]}, "length mismatch"),
        ({"x": [], "y": []}, "empty"),
        ({"x": [0.0, 1.0], "y": [0.0, 1.0], "sample_weight": [1.0, -1.0]}, "non-negative"),
        ({"x": [0.0, 1.0], "y": [0.0, 1.0], "group": [0.5, 1.0]}, "integer"),
        ({"x": [0.0, 1.0], "y": [0.0, 1.0], "y_min": 1.0, "y_max": 0.0}, "y_min"),
        ({"x": [0.0, 1.0], "y": [0.0, 1.0], "increasing": "yes"}, "increasing"),
    ],
)
def test_functional_bad_inputs(kwargs, match):
    x, y = kwargs.pop("x"), kwargs.pop("y")
    with pytest.raises(ValueError, match=match):
        isotonic_regression(x, y, **kwargs)


@pytest.mark.parametrize(
    ("scores", "labels", "hyper", "match"),
    [
        ([0.0, 1.0], [0, 2], {}, "0/1"),
        ([0.0, 1.0], [1, 1], {}, "one class"),
        ([0.0, np.inf], [0, 1], {}, "non-finite"),
        ([0.0, 1.0], [0, 1], {"interpolation": "cubic"}, "interpolation"),
        ([0.0, 1.0], [0, 1], {"trim": 0.7}, "trim"),
        ([0.0, 1.0], [0, 1], {"centered": True, "interpolation": "step"}, "centered"),
    ],
)
def test_calibrator_bad_inputs(scores, labels, hyper, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.IsotonicCalibration(**hyper).fit(scores, labels)


@pytest.mark.parametrize(
    ("hyper", "match"),
    [
        ({"increasing": "up"}, "increasing"),
        ({"interpolation": "cubic"}, "interpolation"),
        ({"trim": 0.5}, "trim"),
        ({"trim": "0.1"}, "trim"),
        ({"centered": True, "interpolation": "step"}, "centered"),
        ({"out_of_bounds": "wrap"}, "out_of_bounds"),
        ({"y_min": 0.9, "y_max": 0.1}, "y_min"),
        ({"y_max": 0.2, "trim": 0.3}, "no probability"),
    ],
)
def test_bad_hyperparameters_raise_when_made(hyper, match):
    """Every hyperparameter is checked when the calibrator is made (before any data)."""
    with pytest.raises(ValueError, match=match):
        jaxcal.IsotonicCalibration(**hyper)


def test_fit_counts_leaves_are_the_working_dtype():
    """Counts hold float64 sums: the fit from counts is in JAX's default float (float64
    here), whatever the scores' dtype was."""
    from jaxcal.fitting.score_counts import score_counts

    rng = np.random.default_rng(15)
    s = rng.normal(size=50).astype(np.float32)
    y = _labels(rng, s)
    fitted = jaxcal.IsotonicCalibration().fit_counts(score_counts(s, y))
    assert fitted.knots_x.dtype == fitted.knots_y.dtype == jnp.float64
    direct = jaxcal.IsotonicCalibration().fit(s.astype(float), y)
    np.testing.assert_allclose(np.asarray(fitted.predict(s)), direct.predict(s), atol=EXACT)


# ------------------------------------------------------------ scikit-learn's options


def _labels(rng, s, slope=2.0):
    y = (rng.uniform(size=s.size) < 1 / (1 + np.exp(-slope * s))).astype(float)
    y[:2] = [0.0, 1.0]
    return y


def _recorded(fn, *args):
    """``fn(*args)`` and whether it warned (any UserWarning)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args)
    return out, any(issubclass(w.category, UserWarning) for w in caught)


def test_auto_direction_equals_sklearn_check_increasing():
    """Equal weights: the decision and the confidence-interval warning are scikit-learn's;
    integer weights: the decision of scikit-learn on the repeated data (frequency
    weights); zero-weight points do not count."""
    from sklearn.isotonic import check_increasing as sk_check

    rng = np.random.default_rng(10)
    for _ in range(40):
        n = int(rng.integers(4, 40))
        x = np.round(rng.normal(size=n), 1)
        y = rng.normal(size=n) + rng.normal() * x
        assert _recorded(check_increasing, x, y) == _recorded(sk_check, x, y)
        k = rng.integers(1, 4, n)
        ours, _ = _recorded(check_increasing, x, y, k.astype(float))
        assert ours == _recorded(sk_check, np.repeat(x, k), np.repeat(y, k))[0]
        w = np.r_[k, 0.0]
        zeros = _recorded(check_increasing, np.r_[x, 9.0], np.r_[y, -99.0 if ours else 99.0], w)
        assert zeros[0] == ours
    with pytest.warns(UserWarning, match="interval"):
        assert not check_increasing([0, 1, 2, 3, 4, 5], [0, -1, 2, -3, 4, -5])
    assert check_increasing([0.0, 1.0, 2.0], [1.0, 1.0, 1.0])  # undefined rho: increasing


@pytest.mark.usefixtures("pav_path")
def test_auto_and_out_of_bounds_equal_sklearn():
    rng = np.random.default_rng(11)
    s = np.round(rng.normal(size=60), 1)
    q = np.r_[s, rng.uniform(s.min() - 1, s.max() + 1, 40)]
    for slope in (2.0, -2.0):
        y = _labels(rng, s, slope)
        for oob in ("clip", "nan"):
            cal = jaxcal.IsotonicCalibration(increasing="auto", out_of_bounds=oob).fit(s, y)
            ir = IsotonicRegression(increasing="auto", out_of_bounds=oob).fit(s, y)
            assert cal.increasing == ir.increasing_ == (slope > 0)
            np.testing.assert_allclose(np.asarray(cal.predict(q)), ir.predict(q), atol=EXACT)
        cal = jaxcal.IsotonicCalibration(increasing=slope > 0, out_of_bounds="raise").fit(s, y)
        np.testing.assert_allclose(np.asarray(cal.predict(s)), ir.predict(s), atol=EXACT)
        for outside in (s.min() - 0.5, s.max() + 0.5):
            with pytest.raises(ValueError, match="outside the training range"):
                cal.predict(np.r_[s[:3], outside])
        inside_jit = np.asarray(jax.jit(lambda c, v: c.predict(v))(cal, q))  # cannot raise
        np.testing.assert_allclose(inside_jit, ir.predict(q), atol=EXACT)  # NaN outside
    step = jaxcal.IsotonicCalibration(interpolation="step", out_of_bounds="nan").fit(s, y)
    p = np.asarray(step.predict(q))
    assert np.array_equal(np.isnan(p), (q < s.min()) | (q > s.max()))


@pytest.mark.usefixtures("pav_path")
def test_bounds_equal_sklearn():
    rng = np.random.default_rng(12)
    s = rng.normal(size=50)
    y = _labels(rng, s)
    w = rng.uniform(0.2, 2.0, 50)
    q = rng.uniform(s.min() - 1, s.max() + 1, 60)
    for hyper, (lo, hi) in (
        ({"y_min": 0.2, "y_max": 0.7}, (0.2, 0.7)),
        ({"y_min": -3.0, "y_max": 0.9, "trim": 0.05}, (0.05, 0.9)),
        ({"y_min": 0.1, "trim": 0.2}, (0.2, 0.8)),
        ({"y_max": 0.4}, (0.0, 0.4)),
    ):
        cal = jaxcal.IsotonicCalibration(**hyper).fit(s, y, sample_weight=w)
        ir = IsotonicRegression(y_min=lo, y_max=hi, out_of_bounds="clip")
        ref = ir.fit(s, y, sample_weight=w).predict(q)
        np.testing.assert_allclose(np.asarray(cal.predict(q)), ref, atol=EXACT)


def test_float32_in_float32_out():
    rng = np.random.default_rng(13)
    s = rng.normal(size=40)
    y = _labels(rng, s)
    s32 = s.astype(np.float32)
    ref = IsotonicRegression(out_of_bounds="clip").fit(s32.astype(float), y)
    fitted = isotonic_regression(s32, y)
    assert fitted.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(fitted), ref.predict(s32.astype(float)), rtol=1e-6)
    assert isotonic_regression(s, y).dtype == jnp.float64
    assert isotonic_regression(s.astype(int), y).dtype == jnp.float64
    cal = jaxcal.IsotonicCalibration().fit(s32, y)
    # a fit on float32 scores is float32 (x64 is on here), and so are its predictions
    assert {a.dtype for a in jax.tree.leaves(cal)} == {np.dtype(np.float32), np.dtype(np.int32)}
    assert cal.predict(s32).dtype == cal.predict(s).dtype == jnp.float32
    assert jax.jit(lambda c, v: c.predict(v))(cal, s32).dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(cal.predict(s32)), ref.predict(s32), rtol=1e-6)
    cal64 = jaxcal.IsotonicCalibration().fit(s, y)
    assert cal64.knots_y.dtype == cal64.scaling.shift.dtype == jnp.float64
    assert cal64.predict(s).dtype == cal64.predict(list(s)).dtype == jnp.float64
    assert cal64.predict(s32).dtype == jnp.float32  # float32 scores in, float32 out
    with jax.enable_x64(False):  # no float64 at all: float32 for every input
        assert isotonic_regression(s, y).dtype == jnp.float32
        cal = jaxcal.IsotonicCalibration().fit(s, y)
        assert cal.knots_x.dtype == cal.predict(s).dtype == jnp.float32


def test_new_options_round_trip_and_compile_nothing(tmp_path, compiles):
    rng = np.random.default_rng(14)
    s = rng.normal(size=100)
    y = _labels(rng, 3 * s)
    q = np.r_[s[:20], s.max() + 1.0]
    cal = jaxcal.IsotonicCalibration(increasing="auto", out_of_bounds="nan", y_max=0.8)
    fitted = cal.fit(s, y)
    assert fitted.increasing is True and fitted.out_of_bounds == "nan"
    fitted.save(tmp_path / "iso.npz")
    back = jaxcal.load(tmp_path / "iso.npz")
    assert (back.increasing, back.out_of_bounds) == (True, "nan")
    np.testing.assert_array_equal(np.asarray(back.predict(q)), np.asarray(fitted.predict(q)))
    assert np.isnan(np.asarray(back.predict(q))[-1])
    with compiles() as c:  # new bounds and "auto" are resolved on the host
        for y_min, y_max in ((0.1, 0.9), (0.05, None), (None, None)):
            again = jaxcal.IsotonicCalibration(
                increasing="auto", out_of_bounds="nan", y_min=y_min, y_max=y_max
            ).fit(s[::-1], y[::-1])
            jax.block_until_ready(again.predict(q))
    assert c.count == 0


@pytest.mark.parametrize(
    ("hyper", "match"),
    [
        ({"increasing": "yes"}, "increasing"),
        ({"out_of_bounds": "extrapolate"}, "out_of_bounds"),
        ({"y_min": float("nan")}, "y_min"),
        ({"y_max": "1"}, "y_max"),
        ({"y_min": 0.6, "y_max": 0.4}, "y_min"),
        ({"y_min": 1.5}, "no probability"),
        ({"y_max": 0.2, "trim": 0.3}, "no probability"),
    ],
)
def test_new_options_bad_values(hyper, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.IsotonicCalibration(**hyper).fit([0.0, 1.0], [0, 1])
