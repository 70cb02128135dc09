"""Scores that JAX's working precision cannot hold (``jaxcal.calibrators._scaling``).

Validation sees float64 scores; fits compute in float32 unless x64 is enabled. The oracle
is equivariance: a map family closed under ``s -> a s + c`` (Platt, Gaussian, exponential,
Gamma and beta with their range-relative shifts, and every map of the order of the scores)
must fit, on ``s * 1e300``, ``s * 1e-300``, ``s * 1e20`` or ``s + 1e8``, the map it fits on
``s``; temperature scaling (no intercept) only under scaling. Where a calibrator cannot
transform the scores it must say so (``ValueError`` naming the dtype) or warn
(``PrecisionWarning``), and ``predict`` never returns NaN for finite scores.

All problems have n = 400 (as in test_parametric.py), so the programs are those compiled
there.
"""

from __future__ import annotations

import functools
import warnings

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.calibrators import PrecisionWarning

N = 400
F32_ATOL = 1e-4  # float32 fits of one problem in two coordinate systems (solver tolerance)
F64_ATOL = 1e-8

AFFINE = {
    "PlattScaling": jaxcal.PlattScaling,
    "GaussianCalibration": jaxcal.GaussianCalibration,
    "ExponentialCalibration": jaxcal.ExponentialCalibration,
    "GammaCalibration": jaxcal.GammaCalibration,
    "BetaCalibration": jaxcal.BetaCalibration,
    "IsotonicCalibration": jaxcal.IsotonicCalibration,
    "HistogramBinning": jaxcal.HistogramBinning,
    "ENIR": jaxcal.ENIR,
    "SmoothedIsotonic": jaxcal.SmoothedIsotonic,
    "BBQ": jaxcal.BBQ,  # scores outside [0, 1]: its "rank" prior reads their order alone
}
SCALE_ONLY = {"TemperatureScaling": jaxcal.TemperatureScaling}
SCALINGS = {"x1e20": 1e20, "x1e300": 1e300, "x1e-300": 1e-300}
FAR = np.array([-1e300, -1e30, 1e30, 1e300])


def _data(seed: int = 0):
    rng = np.random.default_rng(seed)
    y = (np.arange(N) % 2).astype(float)
    s = rng.normal(y, 1.0)
    probes = np.linspace(-6.0, 6.0, 100)  # predicted with the training scores: 500 <= 512
    return s, y, np.concatenate([s, probes])


def _transforms(name):
    out = {k: (lambda x, f=f: x * f) for k, f in SCALINGS.items()}
    if name in AFFINE:
        out["+1e8"] = lambda x: x + 1e8
    return out


@pytest.mark.parametrize("name", sorted(AFFINE) + sorted(SCALE_ONLY))
def test_float32_fit_on_extreme_scores_is_the_fit_on_the_scores(name):
    """x64 off: the fit on transformed scores predicts, at the transformed points, what the
    fit on the scores predicts (the map is equivariant and the transform exact), without a
    PrecisionWarning; far outside the training range predictions are finite."""
    cal = {**AFFINE, **SCALE_ONLY}[name]()
    s, y, x = _data()
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        base = np.asarray(cal.fit(s, y).predict(x), np.float64)
        for label, t in _transforms(name).items():
            fitted = cal.fit(t(s), y)
            p = np.asarray(fitted.predict(t(x)), np.float64)
            np.testing.assert_allclose(p, base, atol=F32_ATOL, err_msg=label)
            far = np.asarray(fitted.predict(FAR))
            assert np.all((far >= 0) & (far <= 1)), (label, far)


def test_float64_fit_beyond_the_range_of_squares_is_the_fit_on_the_scores():
    """x64 on: float64 holds 1e300, but not its square (a Gaussian feature); the fit
    rescales exactly."""
    s, y, x = _data()
    cal = jaxcal.GaussianCalibration()
    base = np.asarray(cal.fit(s, y).predict(x))
    for f in (1e300, 1e-300):
        p = np.asarray(cal.fit(s * f, y).predict(x * f))
        np.testing.assert_allclose(p, base, atol=F64_ATOL, err_msg=str(f))


_EQUIVARIANT = sorted(AFFINE) + sorted(SCALE_ONLY)


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    name=st.sampled_from(_EQUIVARIANT),
    mantissa=st.floats(1.0, 2.0, exclude_max=True),
    exponent=st.integers(-990, 990),
    offset=st.one_of(st.none(), st.integers(3, 24)),
    sign=st.sampled_from([-1.0, 1.0]),
)
def test_property_scores_across_the_float64_range(name, mantissa, exponent, offset, sign):
    """x64 off, scores ``s * m * 2**e (+ c)`` anywhere in float64's range (far beyond
    float32's), shifted by up to 2**24 times their spread where the map allows: the fit
    predicts what the fit on ``s`` predicts, and finite probabilities everywhere."""
    s, y, x = _data()
    labels = y if sign > 0 else 1 - y  # a negative scale: the scores of the other class
    scale = sign * np.ldexp(mantissa, exponent)
    shift = 0.0
    if offset is not None and name in AFFINE:
        shift = np.ldexp(1.0, offset) * np.ptp(s) * abs(scale)
    cal = {**AFFINE, **SCALE_ONLY}[name]()
    with jax.enable_x64(False):
        base = np.asarray(cal.fit(sign * s, labels).predict(sign * x), np.float64)
        fitted = cal.fit(s * scale + shift, labels)
        p = np.asarray(fitted.predict(x * scale + shift), np.float64)
        far = np.asarray(fitted.predict(FAR))
    np.testing.assert_allclose(p, base, atol=F32_ATOL)
    assert np.all(np.isfinite(far) & (far >= 0) & (far <= 1))


def test_neural_calibration_beyond_the_working_range():
    """Neural calibration is not scale-equivariant (it starts from the identity map of the
    logit), but rescaling by powers of two beyond the working range is exact: fits on
    ``l * 2**600`` and ``l * 2**-600`` are the same fit, finite. (The problem of
    test_neural.py's ``test_probability_scores_equal_logit_scores``: its programs.)"""
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 1.5, size=2000)
    labels = (rng.uniform(size=2000) < 1 / (1 + np.exp(-logits))).astype(float)
    cal = jaxcal.NeuralCalibration(n_knots=5, n_steps=200)
    key = jax.random.key(0)
    p = [
        np.asarray(cal.fit(np.ldexp(logits, e), labels, key=key).predict(np.ldexp(logits, e)))
        for e in (600, -600)
    ]
    np.testing.assert_array_equal(p[0], p[1])
    assert np.all(np.isfinite(p[0])) and np.ptp(p[0]) > 0.5


def test_float32_bbq_on_extreme_scores():
    """BBQ on scores outside [0, 1] depends on their order alone (its "rank" prior); its
    float32 fit on scores beyond float32's range is its float64 fit, and bins far beyond
    the training range hold the last bin's value, however far."""
    s, y, x = _data()
    with jax.enable_x64(False):
        p1, p2 = (
            np.asarray(jaxcal.BBQ().fit(np.ldexp(s, e), y).predict(np.ldexp(x, e)))
            for e in (600, 700)  # the same order: the same fit
        )
        np.testing.assert_array_equal(p1, p2)
        p32 = np.asarray(jaxcal.BBQ().fit(s * 1e300, y).predict(x * 1e300), np.float64)
        # beyond the last edge, however far: the last bin's value
        edge = np.asarray(jaxcal.BBQ().fit(s, y).predict(np.array([s.max(), 1e30, 1e300])))
    p64 = np.asarray(jaxcal.BBQ().fit(s * 1e300, y).predict(x * 1e300))
    np.testing.assert_allclose(p32, p64, atol=1e-3)  # float32 log marginal likelihoods
    assert np.all(edge == edge[0])


def test_gaussian_predict_far_outside_is_the_limit():
    """Near the float64 limit ``a s**2`` and ``b s`` overflow with opposite signs
    (inf - inf); predict gives the map's limit there, 0 for a quadratic coefficient a < 0."""
    s, y, _ = _data()
    y = (np.abs(s - 1.0) < 0.8).astype(float)  # a bump at 1: a < 0 < b
    fitted = jaxcal.GaussianCalibration(method="generative").fit(s, y)
    assert float(fitted.a) < 0 < float(fitted.b) and float(fitted.b) > 1
    p = np.asarray(fitted.predict(np.array([-1.7e308, -1e300, 1e300, 1.7e308])))
    np.testing.assert_array_equal(p, 0.0)


@pytest.mark.parametrize("name", ["IsotonicCalibration", "HistogramBinning", "ENIR", "BBQ"])
def test_float32_a_single_score_beyond_the_range(name):
    """Maps of the order of the scores: one training score of 1e300 (beyond float32) is the
    largest score, as 1e30 would be; the other scores keep their float32 values, no
    warning, and predictions up to 1e300 are those of the fit with 1e30."""
    s, y, x = _data()
    cal = getattr(jaxcal, name)()
    with jax.enable_x64(False), warnings.catch_warnings():
        warnings.simplefilter("error", PrecisionWarning)
        p = [
            np.asarray(cal.fit(np.r_[s[:-1], big], y).predict(np.r_[x, big]))
            for big in (1e30, 1e300)
        ]
    np.testing.assert_array_equal(p[0], p[1])


def test_cast_that_merges_scores_warns_once():
    """x64 off: scores spanning zero with a cluster at 1e8 cannot be shifted exactly, so the
    cast merges the cluster: one PrecisionWarning; the fit is still finite."""
    s, y, x = _data()
    merged = np.where(np.arange(N) < N // 2, s, s + 1e8)
    with jax.enable_x64(False), pytest.warns(PrecisionWarning) as record:
        p = np.asarray(jaxcal.IsotonicCalibration().fit(merged, y).predict(merged))
    assert len([r for r in record if r.category is PrecisionWarning]) == 1
    assert "merged" in str(record[0].message) and "float32" in str(record[0].message)
    assert np.all(np.isfinite(p))


def test_scores_the_working_dtype_cannot_resolve_raise_clear_errors():
    """x64 off: no exact transform helps a map that is not shift-equivariant (or not
    scale-equivariant) when the cast makes every score equal, or overflows it."""
    s, y, _ = _data()
    narrow = s * 1e-3 + 1e8  # distinct in float64, one float32 value
    with jax.enable_x64(False):
        neural = functools.partial(jaxcal.NeuralCalibration().fit, key=jax.random.key(0))
        for fit in (jaxcal.TemperatureScaling().fit, neural):
            with pytest.raises(ValueError, match="equal after rounding to float32"):
                fit(narrow, y)
        with pytest.raises(ValueError, match="beyond the range of float32"):
            jaxcal.GammaCalibration(relative_shift=False).fit(s * 1e300, y)
        p = 1 / (1 + np.exp(-s))
        with pytest.raises(ValueError, match="clips probabilities"):
            jaxcal.BetaCalibration(rescale="none").fit(p * 1e-300, y)


def test_fit_batch_rescales_each_problem():
    """One transform per problem: every row fits the map of the plain scores, and scaled
    rows reuse the program of plain ones (the exponent is traced)."""
    s, y, x = _data()
    rows = np.stack([s, s * 1e300, s * 1e-300])
    probe = np.stack([x, x * 1e300, x * 1e-300])
    base = np.asarray(jaxcal.PlattScaling().fit(s, y).predict(x))
    fitted = jaxcal.PlattScaling().fit_batch(rows, np.tile(y, (3, 1)))
    got = np.asarray(fitted.predict(probe))
    np.testing.assert_allclose(got, np.tile(base, (3, 1)), atol=F64_ATOL)
    assert np.asarray(fitted.scaling.exponent).tolist()[0] == 0
    assert bool(np.all(fitted.is_monotone()))


def test_rescaled_fits_compile_nothing_new_and_round_trip(compiles, tmp_path):
    s, y, x = _data()
    for cal in (jaxcal.PlattScaling(), jaxcal.IsotonicCalibration()):
        cal.fit(s, y).predict(x)
        with compiles() as c:
            fitted = cal.fit(s * 1e300, y)
            p = np.asarray(fitted.predict(x * 1e300))
        assert c.count == 0, type(cal).__name__
        path = tmp_path / f"{type(cal).__name__}.npz"
        fitted.save(path)
        back = jaxcal.load(path)
        assert int(back.scaling.exponent) == int(fitted.scaling.exponent) != 0
        np.testing.assert_array_equal(np.asarray(back.predict(x * 1e300)), p)
        # inside a caller's jit the transform is traced (exact powers of two)
        traced = jax.jit(lambda f, v: f.predict(v))(fitted, x * 1e300)
        np.testing.assert_allclose(np.asarray(traced), p, atol=F64_ATOL)


def test_grouped_isotonic_regression_is_sklearn_per_group_in_float32():
    """Groups at 0, 1e8 and beyond float32's range, some zero weights: the fit depends on
    the order of the scores only, so the float32 result is scikit-learn's per group."""
    rng = np.random.default_rng(3)
    g = np.arange(3 * N) % 3
    x = rng.normal(size=3 * N) * np.array([1.0, 1.0, 1e299])[g] + np.array([0.0, 1e8, 5e299])[g]
    y = (rng.uniform(size=3 * N) < 0.5).astype(float)
    w = np.where(rng.uniform(size=3 * N) < 0.1, 0.0, rng.uniform(0.5, 2.0, 3 * N))
    with jax.enable_x64(False):
        got = np.asarray(jaxcal.isotonic_regression(x, y, sample_weight=w, group=g), np.float64)
    for k in range(3):
        m = g == k
        ir = IsotonicRegression(out_of_bounds="clip").fit(x[m], y[m], sample_weight=w[m])
        np.testing.assert_allclose(got[m], ir.predict(x[m]), atol=1e-6, err_msg=str(k))
