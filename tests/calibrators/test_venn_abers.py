"""Venn-Abers predictors. Oracles: a brute-force IVAP (two weighted isotonic fits per test
point with scikit-learn's IsotonicRegression, the test point added with label 0 and 1) on
small data with ties; MAPIE's VennAbersCalibrator (IVAP) and VennAbersCV (CVAP, its
StratifiedKFold folds) on the same split; Python loops over problems for the batched fits."""

from __future__ import annotations

import os
import warnings

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.calibrators.venn_abers import FittedVennAbers
from jaxcal.fitting.folds import stratified_folds

EXACT = 1e-10  # float64 against the oracles


def _brute_ivap(s, y, w, t, omega):
    """p0, p1 at each test score: isotonic regression of the calibration set plus (t, l)
    with weight omega, evaluated at t (scikit-learn pools tied scores)."""
    out = np.empty((2, len(t)))
    for j, tj in enumerate(t):
        for label in (0, 1):
            ir = IsotonicRegression(out_of_bounds="clip")
            ir.fit(np.r_[s, tj], np.r_[y, label], sample_weight=np.r_[w, omega])
            out[label, j] = ir.predict([tj])[0]
    return out


def _tied_problem(rng, n):
    s = rng.integers(0, 6, n).astype(float)
    y = (rng.uniform(size=n) < (s + 1) / 8).astype(float)
    y[:2] = [0.0, 1.0]
    return s, y


# test scores below, between, on and above the calibration scores
_GRID = np.r_[np.arange(-1, 7) + 0.5, np.arange(6.0)]


@pytest.mark.parametrize("weighted", [False, True])
def test_ivap_equals_brute_force_with_ties(weighted):
    rng = np.random.default_rng(0)
    for n in (2, 5, 9, 17, 24):
        s, y = _tied_problem(rng, n)
        w = rng.uniform(0.2, 3.0, n) if weighted else np.ones(n)
        fitted = jaxcal.VennAbers().fit(s, y, sample_weight=w if weighted else None)
        p0, p1 = fitted.interval(_GRID)
        ref = _brute_ivap(s, y, w, _GRID, omega=w.mean())  # the test point's weight
        np.testing.assert_allclose(np.asarray(p0), ref[0], rtol=0, atol=EXACT)
        np.testing.assert_allclose(np.asarray(p1), ref[1], rtol=0, atol=EXACT)
        merged = ref[1] / (1 - ref[0] + ref[1])
        np.testing.assert_allclose(np.asarray(fitted.predict(_GRID)), merged, atol=EXACT)


def test_zero_weights_drop_points_and_weight_scale_is_irrelevant():
    rng = np.random.default_rng(1)
    s, y = _tied_problem(rng, 30)
    w = rng.uniform(0.5, 2.0, 30)
    w[::4] = 0.0
    keep = w > 0
    ref = jaxcal.VennAbers().fit(s[keep], y[keep], sample_weight=w[keep]).interval(_GRID)
    for scale in (1.0, 1e-200, 1e200):
        got = jaxcal.VennAbers().fit(s, y, sample_weight=w * scale).interval(_GRID)
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=0, atol=EXACT)


def test_interval_properties():
    """p0 <= p <= p1, all non-decreasing in the score; p1 = 1 above and p0 = 0 below all
    calibration scores."""
    rng = np.random.default_rng(2)
    s = rng.normal(size=200)
    y = (rng.uniform(size=200) < 1 / (1 + np.exp(-2 * s))).astype(int)
    fitted = jaxcal.VennAbers().fit(s, y)
    t = np.linspace(-4, 4, 301)
    p0, p1 = (np.asarray(a) for a in fitted.interval(t))
    p = np.asarray(fitted.predict(t))
    assert np.all(p0 <= p + 1e-15) and np.all(p <= p1 + 1e-15)
    for a in (p0, p1, p):
        assert np.all(np.diff(a) >= -1e-15)
    assert p1[-1] == 1.0 and p0[0] == 0.0


class _ScoreColumn:
    """A prefitted scikit-learn classifier whose probability is the score itself."""

    @staticmethod
    def make():
        from sklearn.base import BaseEstimator, ClassifierMixin

        class ScoreColumn(ClassifierMixin, BaseEstimator):
            def fit(self, X, y, sample_weight=None):
                self.classes_ = np.array([0, 1])
                self.n_features_in_ = 1
                return self

            def predict_proba(self, X):
                p = np.asarray(X)[:, 0]
                return np.c_[1 - p, p]

        return ScoreColumn()


def _probability_problem(rng, n, ties):
    s = rng.uniform(size=n)
    if ties:
        s = np.round(s, 1)
    y = (rng.uniform(size=n) < s).astype(int)
    t = rng.uniform(size=150)
    t[:50] = np.round(t[:50], 1)  # on calibration scores
    return s, y, t


@pytest.mark.parametrize("ties", [False, True])
def test_ivap_equals_mapie(ties):
    calibration = pytest.importorskip("mapie.calibration")
    rng = np.random.default_rng(3)
    s, y, t = _probability_problem(rng, 300, ties)
    est = _ScoreColumn.make().fit(s[:, None], y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # MAPIE's 0/0 slopes
        va = calibration.VennAbersCalibrator(estimator=est, cv="prefit").fit(s[:, None], y)
        p, p01 = va.predict_proba(t[:, None], p0_p1_output=True)
    fitted = jaxcal.VennAbers().fit(s, y)
    p0, p1 = (np.asarray(a) for a in fitted.interval(t))
    # above the largest calibration score p1 = 1 (the brute-force test checks it); MAPIE
    # 1.6.0 keeps its previous slope there, so compare below it
    inside = t <= s.max()
    assert inside.sum() > 100 and np.all(p1[~inside] == 1.0)
    np.testing.assert_allclose(p0[inside], p01[inside, 0], rtol=0, atol=EXACT)
    np.testing.assert_allclose(p1[inside], p01[inside, 1], rtol=0, atol=EXACT)
    np.testing.assert_allclose(
        np.asarray(fitted.predict(t))[inside], p[inside, 1], rtol=0, atol=EXACT
    )


@pytest.mark.parametrize("ties", [False, True])
def test_cvap_equals_mapie_on_its_folds(ties):
    va_module = pytest.importorskip("mapie._venn_abers")
    from sklearn.model_selection import StratifiedKFold

    rng = np.random.default_rng(4)
    s, y, t = _probability_problem(rng, 300, ties)
    k = 4
    cv = va_module.VennAbersCV(
        _ScoreColumn.make(), inductive=False, n_splits=k, random_state=7, shuffle=True
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cv.fit(s[:, None], y)
        p, p01 = cv.predict_proba(t[:, None], p0_p1_output=True)
    fold = np.empty(s.size, int)
    splits = StratifiedKFold(k, shuffle=True, random_state=7).split(s[:, None], y)
    for f, (_, calib) in enumerate(splits):
        fold[calib] = f
    fitted = jaxcal.VennAbers(n_folds=k).fit(s, y, fold=fold)
    inside = t <= min(s[fold == f].max() for f in range(k))  # as in the IVAP test
    got = np.asarray(fitted.predict(t))
    np.testing.assert_allclose(got[inside], p[inside, 1], rtol=0, atol=EXACT)
    lo, hi = (np.asarray(a)[inside] for a in fitted.interval(t))
    gm1 = np.exp(np.log(p01[inside, k:]).mean(axis=1))
    gm0 = np.exp(np.log1p(-p01[inside, :k]).mean(axis=1))
    np.testing.assert_allclose(hi, gm1, rtol=0, atol=EXACT)
    np.testing.assert_allclose(lo, 1 - gm0, rtol=0, atol=EXACT)


def test_cvap_per_fold_scores_merge_the_folds_ivaps():
    """With a scoring model per fold, row k of the test scores goes to fold k's IVAP (the
    IVAP of fold k's calibration points alone), merged by geometric means."""
    rng = np.random.default_rng(5)
    s, y = rng.normal(size=120), rng.integers(0, 2, 120)
    fold = np.arange(120) % 3
    t = rng.normal(size=(3, 9))
    fitted = jaxcal.VennAbers(n_folds=3).fit(s, y, fold=fold)
    lo, hi = (np.asarray(a) for a in fitted.interval(t, per_fold_scores=True))
    p0, p1 = np.empty((3, 9)), np.empty((3, 9))
    for f in range(3):
        m = fold == f
        p0[f], p1[f] = _brute_ivap(s[m], y[m], np.ones(m.sum()), t[f], 1.0)
    np.testing.assert_allclose(hi, np.exp(np.log(p1).mean(0)), atol=EXACT)
    np.testing.assert_allclose(lo, 1 - np.exp(np.log1p(-p0).mean(0)), atol=EXACT)
    same = fitted.predict(np.broadcast_to(t[0], (3, 9)), per_fold_scores=True)
    np.testing.assert_allclose(np.asarray(same), np.asarray(fitted.predict(t[0])), atol=EXACT)


@pytest.mark.parametrize("n_folds", [1, 3])
@pytest.mark.parametrize("given_folds", [False, True])
def test_batched_fits_equal_a_loop(n_folds, given_folds):
    """Batched fits (group ids, or [B, n] with a mask) equal a loop of single fits, with
    fold ids given or the default deterministic folds (each problem dealt on its own)."""
    rng = np.random.default_rng(6)
    n, groups = 240, np.array([7, -2, 30, 5])
    s = np.round(rng.normal(size=n), 1)
    g = groups[rng.integers(0, 4, n)]
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-s))).astype(int)
    fold = rng.integers(0, 3, n) if n_folds > 1 and given_folds else None
    t = rng.normal(size=(4, 11))
    va = jaxcal.VennAbers(n_folds=n_folds)
    batch = va.fit_batch(s, y, group=g, fold=fold)
    assert batch.batch_shape == (4,)
    lo, hi = (np.asarray(a) for a in batch.interval(t))
    for row, gid in enumerate(np.sort(groups)):  # rows in sorted-id order
        m = g == gid
        one = va.fit(s[m], y[m], fold=None if fold is None else fold[m])
        ref = np.asarray(one.interval(t[row]))
        np.testing.assert_allclose(np.stack([lo[row], hi[row]]), ref, rtol=0, atol=EXACT)
    # [B, n] with a mask: the same problems, padded
    width = np.bincount(np.searchsorted(np.sort(groups), g)).max()
    S, Y, M = np.zeros((4, width)), np.zeros((4, width), int), np.zeros((4, width), bool)
    F = np.zeros((4, width), int)
    for row, gid in enumerate(np.sort(groups)):
        m = g == gid
        S[row, : m.sum()], Y[row, : m.sum()], M[row, : m.sum()] = s[m], y[m], True
        if fold is not None:
            F[row, : m.sum()] = fold[m]
    masked = va.fit_batch(S, Y, mask=M, fold=None if fold is None else F)
    np.testing.assert_allclose(np.asarray(masked.predict(t)), np.asarray(batch.predict(t)))


def test_default_folds_are_the_shared_deterministic_folds():
    """Without fold ids, CVAP fold k is the IVAP of the calibration points that
    ``jaxcal.fitting.folds.stratified_folds`` puts in fold k (read back from the fitted
    tables: all scores distinct, so a fold's runs are its points), and the predictor equals
    the brute-force merge of those folds' IVAPs (scikit-learn isotonic fits); the folds are
    stratified (each fold's positives within one row of its share) and the same on every
    fit."""
    rng = np.random.default_rng(8)
    s = rng.normal(size=101)
    t = np.linspace(-2.5, 2.5, 9)
    for rate, k in [(0.5, 4), (0.3, 3), (0.1, 5), (0.7, 2), (0.25, 7)]:
        y = (rng.uniform(size=101) < rate).astype(int)
        y[:2] = [0, 1]
        fitted = jaxcal.VennAbers(n_folds=k).fit(s, y)
        fold = stratified_folds(y, k, scores=s)
        edges = np.asarray(fitted.edges)
        start, count = np.asarray(fitted.run_start)[:k], np.asarray(fitted.run_count)[:k]
        for f, (a, c) in enumerate(zip(start, count, strict=True)):
            np.testing.assert_array_equal(edges[a : a + c], np.sort(s[fold == f]))
            positives = y[fold == f].sum()
            assert abs(positives - c * y.mean()) < 1, (rate, k, positives, c)
        p0, p1 = np.empty((k, t.size)), np.empty((k, t.size))
        for f in range(k):
            m = fold == f
            p0[f], p1[f] = _brute_ivap(s[m], y[m], np.ones(m.sum()), t, 1.0)
        lo, hi = (np.asarray(a) for a in fitted.interval(t))
        np.testing.assert_allclose(hi, np.exp(np.log(p1).mean(0)), rtol=0, atol=EXACT)
        np.testing.assert_allclose(lo, 1 - np.exp(np.log1p(-p0).mean(0)), rtol=0, atol=EXACT)
        again = jaxcal.VennAbers(n_folds=k).fit(s, y)
        np.testing.assert_array_equal(np.asarray(again.predict(t)), np.asarray(fitted.predict(t)))


def test_save_load_jit_and_no_recompile(tmp_path, compiles):
    rng = np.random.default_rng(9)
    s, y = rng.normal(size=300), rng.integers(0, 2, 300)
    q = rng.normal(size=(5, 7))
    for va in (jaxcal.VennAbers(), jaxcal.VennAbers(n_folds=3)):
        fitted = va.fit(s, y)
        p = np.asarray(fitted.predict(q))
        assert p.shape == q.shape and np.asarray(fitted.interval(q)[0]).shape == q.shape
        fitted.save(tmp_path / "va.npz")
        back = jaxcal.load(tmp_path / "va.npz")
        assert isinstance(back, FittedVennAbers) and back.n_folds == fitted.n_folds
        np.testing.assert_array_equal(np.asarray(back.predict(q)), p)
        inside = jax.jit(lambda f, x: f.predict(x))(fitted, q)
        np.testing.assert_allclose(np.asarray(inside), p, rtol=0, atol=1e-15)
        with compiles() as c:  # new sizes in the same buckets
            again = va.fit(s[:290] * 2.0, y[:290])
            jax.block_until_ready(again.interval(rng.normal(size=(6, 7))))  # 42 -> 64, as 35
            jax.block_until_ready(again.predict(rng.normal(size=50)))
        assert c.count == 0


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda s, y: jaxcal.VennAbers(n_folds=0), "n_folds"),
        (lambda s, y: jaxcal.VennAbers(n_folds=True), "n_folds"),
        (lambda s, y: jaxcal.VennAbers(n_folds=2.0), "n_folds"),
        (lambda s, y: jaxcal.VennAbers().fit(s, y, fold=np.zeros(40, int)), "n_folds"),
        (lambda s, y: jaxcal.VennAbers(n_folds=3).fit(s, y, fold=np.full(40, 3)), r"\[0, 3\)"),
        (lambda s, y: jaxcal.VennAbers(n_folds=3).fit(s, y, fold=np.zeros(3, int)), "fold"),
        (
            lambda s, y: jaxcal.VennAbers().fit(s, y, propensity=np.full(40, 0.5), loss="ips"),
            "0/1 labels",
        ),
        (lambda s, y: jaxcal.VennAbers().fit(s, y).predict(s, per_fold_scores=True), "cross"),
        (
            lambda s, y: jaxcal.VennAbers(n_folds=2).fit(s, y).predict(s, per_fold_scores=True),
            "leading",
        ),
        (
            lambda s, y: jaxcal.VennAbers().fit_batch(s, y, group=np.arange(40) // 20).predict(s),
            "leading",
        ),
        (
            lambda s, y: jaxcal.VennAbers().fit_batch(s, y, group=np.arange(40) % 2, mask=s > 0),
            "either",
        ),
        (
            lambda s, y: jaxcal.VennAbers().fit_batch(s, y, group=np.isin(np.arange(40), [1, 3])),
            "one class",
        ),
        (lambda s, y: jaxcal.VennAbers().fit(np.r_[s[:-1], np.nan], y), "non-finite"),
    ],
)
def test_invalid_inputs_raise(make, match):
    rng = np.random.default_rng(10)
    s, y = rng.normal(size=40), np.arange(40) % 2
    with pytest.raises(ValueError, match=match):
        make(s, y)


def test_propensity_losses_reweight_like_sample_weights():
    """``loss="ips_positive"`` is the weighting ``1/propensity`` on positives, 1 on
    negatives, with the labels kept."""
    rng = np.random.default_rng(11)
    s, y = rng.normal(size=60), rng.integers(0, 2, 60)
    prop = rng.uniform(0.2, 1.0, 60)
    a = jaxcal.VennAbers().fit(s, y, propensity=prop, loss="ips_positive")
    b = jaxcal.VennAbers().fit(s, y, sample_weight=np.where(y == 1, 1 / prop, 1.0))
    np.testing.assert_allclose(np.asarray(a.interval(s)), np.asarray(b.interval(s)), atol=EXACT)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compiled_cpu_tables_equal_the_portable_ones(dtype):
    """The compiled CPU kernel (``jaxcal._native.va_tables_cpu``) against the pure-JAX
    sweeps on the same flat layout: 300 problems of random sizes (1 to 60 runs, some of one
    run), weighted, with test weights per problem; the same operations in the same order,
    so the same tables up to a few ulps."""
    from jaxcal._native import venn_abers_cpu_available
    from jaxcal.calibrators._venn_abers_core import va_tables

    if not venn_abers_cpu_available():
        if os.environ.get("JAXCAL_REQUIRE_NATIVE") == "1":  # set by .ci/run
            raise RuntimeError("the compiled Venn-Abers kernel was not built (see setup.py)")
        pytest.skip("the compiled Venn-Abers kernel is not built here")
    rng = np.random.default_rng(7)
    runs = rng.integers(1, 61, 300)
    runs[:5] = 1
    inc_w, inc_y, omega, first, last = [], [], [], [], []
    for m in runs:
        w = rng.uniform(0.1, 3.0, m)
        inc_w += [0.0, *w]
        inc_y += [0.0, *(w * (rng.uniform(size=m) < rng.uniform()))]
        omega += [float(w.mean())] * (m + 1)
        first += [True] + [False] * m
        last += [False] * m + [True]
    args = [np.asarray(a, dtype) for a in (inc_w, inc_y, omega)]
    args += [np.asarray(first), np.asarray(last)]
    native = va_tables(*args, kernel="cpu")
    portable = va_tables(*args, kernel="portable")
    ulps = 4 * np.finfo(dtype).eps
    for got, ref in zip(native, portable, strict=True):
        assert got.dtype == dtype
        np.testing.assert_allclose(np.asarray(got), np.asarray(ref), rtol=ulps, atol=ulps)
    p0, p1 = (np.asarray(a) for a in native)
    slack = 1e3 * np.finfo(dtype).eps  # the CSD's running sums round (both paths alike)
    assert min(p0.min(), p1.min()) > -slack and max(p0.max(), p1.max()) < 1 + slack
    assert np.ptp(p1) > 0.5 and np.ptp(p0) > 0.5  # not a degenerate layout


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fitted_leaves_have_the_scores_dtype(dtype):
    """float32 scores give float32 tables (x64 is on in the tests), float64 give float64,
    for the IVAP, the CVAP and batched fits; the float32 tables equal the float64 ones to
    float32 rounding (the CSD's sums in float32)."""
    rng = np.random.default_rng(12)
    s = rng.normal(size=300)
    y = (rng.uniform(size=300) < 1 / (1 + np.exp(-s))).astype(int)
    g = rng.integers(0, 3, 300)
    t = np.linspace(-2, 2, 17)
    for va in (jaxcal.VennAbers(), jaxcal.VennAbers(n_folds=3)):
        fits = [va.fit(s.astype(dtype), y), va.fit_batch(s.astype(dtype), y, group=g)]
        refs = [va.fit(s, y), va.fit_batch(s, y, group=g)]
        for fitted, ref in zip(fits, refs, strict=True):
            floats = {a.dtype for a in jax.tree.leaves(fitted) if a.dtype.kind == "f"}
            assert floats == {np.dtype(dtype)}
            q = t if fitted.batch_shape == () else np.broadcast_to(t, (3, t.size))
            got, want = np.asarray(fitted.interval(q)), np.asarray(ref.interval(q))
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 if dtype == np.float32 else 0)
