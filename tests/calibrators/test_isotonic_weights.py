"""Isotonic regression with weights of any scale, and zero-weight points.

Oracles: a brute-force PAV in NumPy (float64, on exactly normalised weights, pooling by
comparing block means, so no product can underflow), scikit-learn's IsotonicRegression
(``fit`` + ``transform``, which drops zero-weight points and interpolates at them) and
``np.ldexp`` for the weight normalisation. Both PAV paths (the compiled CPU kernel and the
pure-JAX merge tree) are checked, with x64 (float64) and without (float32).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal._native import ENV, pav_cpu_available
from jaxcal._weights import normalize_weights
from jaxcal.calibrators.isotonic import isotonic_regression

RTOL64 = 1e-10
RTOL32 = 1e-5
PATHS = ["native", "portable"]


@contextmanager
def _path(name: str):
    """The PAV implementation eager calls use: the compiled kernel or the merge tree."""
    if name == "native" and not pav_cpu_available():
        pytest.skip("compiled CPU kernel not built")
    before = os.environ.get(ENV)
    os.environ[ENV] = "1" if name == "native" else "0"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV)
        else:
            os.environ[ENV] = before


def _normalised(w: np.ndarray, dtype) -> np.ndarray:
    """``w / 2**floor(log2(max w))`` (exact in float64), weights below the dtype's smallest
    normal number then 0: the documented rule."""
    w = np.asarray(w, np.float64)
    w = np.ldexp(w, -(np.frexp(w.max())[1] - 1))
    return np.where(w >= np.finfo(dtype).tiny, w, 0.0)


def _reference(x, y, w, *, increasing=True, lo=-np.inf, hi=np.inf, dtype=np.float64):
    """Brute-force weighted isotonic regression of one problem: tie runs, stack PAV that
    pools while mean(left) >= mean(right) (means, not cross products), values clipped;
    zero-weight runs get ``np.interp`` of the clipped values of the runs with weight
    (constant beyond them)."""
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    w = _normalised(w, dtype)
    u = x if increasing else -x
    xs, inv = np.unique(u, return_inverse=True)
    sw = np.bincount(inv, w, xs.size)
    sy = np.bincount(inv, w * y, xs.size)
    pos = sw > 0
    blocks = []  # [sum wy, sum w, number of runs]
    for a, b in zip(sy[pos], sw[pos], strict=True):
        blocks.append([a, b, 1])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] >= blocks[-1][0] / blocks[-1][1]:
            (a1, b1, k1), (a2, b2, k2) = blocks[-2:]
            blocks[-2:] = [[a1 + a2, b1 + b2, k1 + k2]]
    values = np.concatenate([[a / b] * k for a, b, k in blocks])
    run_value = np.interp(xs, xs[pos], np.clip(values, lo, hi))
    return run_value[inv]


POINTS = st.lists(
    st.tuples(
        st.integers(-4, 4),  # scores with ties
        st.floats(-3, 3, allow_nan=False),
        st.one_of(st.floats(0.05, 20), st.sampled_from([0.0, 1.0, 3.0])),
    ),
    min_size=1,
    max_size=14,
)


def _arrays(points):
    x, y, w = (np.array(c, np.float64) for c in zip(*points, strict=True))
    return x, y, w


@settings(max_examples=40, deadline=None)
@given(
    POINTS,
    st.integers(-1060, 1010),  # 2**k times weights up to 60: the float64 range, and sums
    st.sampled_from([1.0, 1.0, 1.7, 3.0]),  # not only powers of two
    st.booleans(),
)
def test_float64_fit_does_not_depend_on_the_weight_scale(points, k, factor, increasing):
    x, y, base = _arrays(points)
    assume(base.max() > 0)
    w = base * factor * 2.0**k  # subnormal at the low end: rounded, as a user's would be
    assume(w.max() > 0)
    ref = _reference(x, y, w, increasing=increasing)
    tol = RTOL64 * (1 + np.abs(y).max())
    for name in PATHS:
        with _path(name):
            ours = np.asarray(isotonic_regression(x, y, sample_weight=w, increasing=increasing))
            np.testing.assert_allclose(ours, ref, rtol=0, atol=tol, err_msg=name)
            if factor == 1.0 and w.min(initial=np.inf, where=w > 0) >= np.finfo(float).tiny:
                # a power of two that keeps every weight normal: bit-identical
                plain = isotonic_regression(x, y, sample_weight=base, increasing=increasing)
                np.testing.assert_array_equal(ours, np.asarray(plain), err_msg=name)
    # scikit-learn on the same weights, rescaled exactly into its safe range (subnormal
    # inputs keep their rounding)
    sk = IsotonicRegression(increasing=increasing, out_of_bounds="clip")
    sk = sk.fit(x, y, sample_weight=_normalised(w, np.float64)).transform(x)
    np.testing.assert_allclose(ref, sk, rtol=0, atol=tol)


@settings(max_examples=25, deadline=None)
@given(POINTS, st.integers(-140, 120), st.booleans())
def test_float32_fit_does_not_depend_on_the_weight_scale(points, k, increasing):
    """x64 off: float32 weights across the float32 range (subnormal ones too), eagerly and
    inside jit, on both paths."""
    x, y, base = _arrays(points)
    w = (base * 2.0**k).astype(np.float32)
    assume(w.max() > 0)
    ref = _reference(x, y, w, increasing=increasing, dtype=np.float32)
    tol = RTOL32 * (1 + np.abs(y).max())
    x32, y32 = x.astype(np.float32), y.astype(np.float32)
    with jax.enable_x64(False):
        for name in PATHS:
            with _path(name):
                eager = isotonic_regression(x32, y32, sample_weight=w, increasing=increasing)
                assert eager.dtype == jnp.float32
                np.testing.assert_allclose(np.asarray(eager), ref, rtol=0, atol=tol)
        # inside jit (the kernel on CPU, weights normalised in the program), at one size:
        # padded with zero-weight copies of the top score, which change no real point
        top = x32[np.argmax(x32 if increasing else -x32)]
        pad = lambda a, v: np.r_[a, np.full(16 - a.size, v, np.float32)]  # noqa: E731
        inside = _JITTED32(pad(x32, top), pad(y32, 0), pad(w, 0), increasing)
        np.testing.assert_allclose(np.asarray(inside)[: x.size], ref, rtol=0, atol=tol)


_JITTED32 = jax.jit(
    lambda a, b, c, d: isotonic_regression(a, b, sample_weight=c, increasing=d),
    static_argnums=3,
)


def test_examples_of_tiny_huge_and_subnormal_weights():
    x, y = np.arange(3.0), np.array([1.0, 2.0, 3.0])
    s, lab = np.array([0.0, 1, 2, 3]), np.array([0, 0, 1, 1])
    inside = jax.jit(lambda a, b, c: isotonic_regression(a, b, sample_weight=c))
    for scale in (1e-160, 1e-200, 1e-310, 5e-324, 1e160, 1e300):
        w = np.full(3, scale)
        np.testing.assert_array_equal(np.asarray(inside(x, y, w)), y, err_msg=str(scale))
        for name in PATHS:
            with _path(name):
                ours = np.asarray(isotonic_regression(x, y, sample_weight=w))
                np.testing.assert_array_equal(ours, y, err_msg=f"{name} {scale}")
                cal = jaxcal.IsotonicCalibration().fit(s, lab, sample_weight=np.full(4, scale))
                np.testing.assert_array_equal(np.asarray(cal.predict(s)), [0, 0, 1, 1])
    with jax.enable_x64(False):  # float32: 1e-200 and 1e200 are not float32 numbers
        cal = jaxcal.IsotonicCalibration().fit(s, lab, sample_weight=np.full(4, 1e-200))
        np.testing.assert_array_equal(np.asarray(cal.predict(s)), [0, 0, 1, 1])
        ours = isotonic_regression(x, y, sample_weight=np.full(3, 1e200))
        np.testing.assert_array_equal(np.asarray(ours), y)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_normalize_weights_equals_ldexp(dtype):
    """The integer normalisation against NumPy's ldexp: normal, subnormal, zero and -0.0
    weights, rows of different scales (each row one problem), inside jit (where XLA's CPU
    programs would flush subnormal floats)."""
    info = np.finfo(dtype)
    rng = np.random.default_rng(0)
    rows = [
        rng.uniform(0.1, 10.0, 9),
        rng.uniform(0.1, 10.0, 9) * float(info.tiny) * 2.0**-10,  # all subnormal
        np.r_[rng.uniform(0.1, 10.0, 5), np.zeros(3), -0.0] * (float(info.max) / 16),
        np.r_[
            float(info.tiny),
            float(info.tiny) / 8,
            float(info.smallest_subnormal),
            0.0,
            1.0,
            np.zeros(4),
        ],
        np.zeros(9),
    ]
    w = np.stack(rows).astype(dtype)
    ours = np.asarray(jax.jit(normalize_weights)(jnp.asarray(w)))
    assert ours.dtype == dtype
    for row, got in zip(w, ours, strict=True):
        ref = _normalised(row, dtype) if row.max() > 0 else row
        np.testing.assert_array_equal(got, ref.astype(dtype))
        if row.max() > 0:
            assert 1.0 <= got.max() < 2.0


def test_smoothed_isotonic_and_calibrator_knots_do_not_depend_on_the_weight_scale():
    rng = np.random.default_rng(3)
    s = rng.normal(size=300)
    y = (rng.uniform(size=300) < 1 / (1 + np.exp(-2 * s))).astype(float)
    w = rng.uniform(0.1, 5.0, 300)
    w[::17] = 0.0
    for make in (
        lambda: jaxcal.IsotonicCalibration(),
        lambda: jaxcal.IsotonicCalibration(centered=True),
        lambda: jaxcal.SmoothedIsotonic(n_buckets=30),
    ):
        base = make().fit(s, y, sample_weight=w)
        for scale in (2.0**-1000, 2.0**900, 2.0**-1070):
            scaled = make().fit(s, y, sample_weight=w * scale)
            if scale == 2.0**-1070:  # subnormal inputs are rounded; the fit is close
                # weights of 2**-1070 keep 2-3 bits (each off by up to 16%): the maps move by
                # up to 1.5e-3 (measured)
                np.testing.assert_allclose(
                    np.asarray(scaled.predict(s)), np.asarray(base.predict(s)), atol=5e-3
                )
                continue
            np.testing.assert_array_equal(np.asarray(scaled.knots_x), np.asarray(base.knots_x))
            np.testing.assert_array_equal(np.asarray(scaled.knots_y), np.asarray(base.knots_y))


# ---------------------------------------------------------------------- zero-weight points


def _sklearn_fit_transform(x, y, w, group=None, **kw):
    """scikit-learn's map at every point (``fit`` + ``transform``), per group; a group
    without weight gets 0, clipped (jaxcal's rule; scikit-learn cannot fit it)."""
    group = np.zeros(x.size, int) if group is None else group
    out = np.empty(x.size)
    for g in np.unique(group):
        m = group == g
        if not np.any(w[m] > 0):
            out[m] = np.clip(0.0, kw.get("y_min", -np.inf), kw.get("y_max", np.inf))
            continue
        ir = IsotonicRegression(out_of_bounds="clip", **kw).fit(x[m], y[m], sample_weight=w[m])
        out[m] = ir.transform(x[m])
    return out


@pytest.mark.parametrize("name", PATHS)
def test_zero_weight_point_gets_the_interpolated_map(name):
    x, y, w = np.arange(4.0), np.array([0.0, 5.0, 1.0, 2.0]), np.array([1.0, 0.0, 1.0, 1.0])
    with _path(name):
        ours = np.asarray(isotonic_regression(x, y, sample_weight=w))
        np.testing.assert_allclose(ours, [0.0, 0.5, 1.0, 2.0], rtol=0, atol=1e-15)
        np.testing.assert_allclose(ours, _sklearn_fit_transform(x, y, w), atol=RTOL64)
        labels = np.array([0, 1, 1, 1])
        cal = jaxcal.IsotonicCalibration().fit(x, labels, sample_weight=w)
        fitted = np.asarray(isotonic_regression(x, labels, sample_weight=w))
        np.testing.assert_allclose(fitted, np.asarray(cal.predict(x)), atol=RTOL64)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-3, 3),
            st.floats(-2, 2, allow_nan=False),
            st.sampled_from([0.0, 0.0, 0.5, 1.0, 2.5]),
            st.integers(0, 2),
        ),
        min_size=1,
        max_size=24,
    ),
    st.booleans(),
    st.sampled_from([(None, None), (-0.5, 0.7), (0.2, None)]),
)
def test_zero_weights_equal_sklearn_fit_transform(points, increasing, bounds):
    """Zero-weight points (between, at and beyond the points with weight; tied with them or
    alone; whole groups without weight), both directions, with bounds: scikit-learn's map
    at every point, on both paths."""
    x, y, w, g = (np.array(c) for c in zip(*points, strict=True))
    x, y, w = x.astype(float), y.astype(float), w.astype(float)
    assume(w.max() > 0)
    lo, hi = bounds
    kw = {k: v for k, v in (("y_min", lo), ("y_max", hi)) if v is not None}
    ref = _sklearn_fit_transform(x, y, w, g, increasing=increasing, **kw)
    for name in PATHS:
        with _path(name):
            ours = isotonic_regression(x, y, sample_weight=w, group=g, increasing=increasing, **kw)
            np.testing.assert_allclose(np.asarray(ours), ref, rtol=0, atol=RTOL64, err_msg=name)


@pytest.mark.parametrize("name", PATHS)
def test_zero_weights_with_per_point_bounds_and_vmap(name):
    """Per-point bounds clip the neighbours' values with the zero-weight point's own
    bounds; under vmap each row is its own problem."""
    x = np.arange(5.0)
    y = np.array([0.0, 9.0, 1.0, 9.0, 3.0])
    w = np.array([1.0, 0.0, 1.0, 0.0, 1.0])
    lo = np.array([0.0, 0.5, 0.0, 0.0, 0.0])
    hi = np.array([5.0, 5.0, 5.0, 2.0, 5.0])
    with _path(name):
        ours = np.asarray(isotonic_regression(x, y, sample_weight=w, y_min=lo, y_max=hi))
    # fit at x = 0, 2, 4: 0, 1, 3; x = 1: clip to [0.5, 5] of 0 and 1 -> 0.5, 1 -> 0.75;
    # x = 3: clip to [0, 2] of 1 and 3 -> 1, 2 -> 1.5
    np.testing.assert_allclose(ours, [0.0, 0.75, 1.0, 1.5, 3.0], atol=1e-15)
    # inside jit (the kernel on CPU), one problem per vmapped row, and by group
    rows = np.stack([y, y[::-1]])
    vm = jax.jit(jax.vmap(lambda b: isotonic_regression(x, b, sample_weight=w, y_min=0.5)))(rows)
    for row, got in zip(rows, np.asarray(vm), strict=True):
        ref = _sklearn_fit_transform(x, row, w, y_min=0.5)
        np.testing.assert_allclose(got, ref, atol=RTOL64)
    g = np.array([0, 1, 0, 1, 1])
    inside = jax.jit(lambda b, c: isotonic_regression(x, b, sample_weight=w, group=c))(y, g)
    np.testing.assert_allclose(np.asarray(inside), _sklearn_fit_transform(x, y, w, g))


def test_padding_rows_do_not_change_zero_weight_points():
    """Eager calls pad with zero-weight copies of the top score; a top score whose own
    points have zero weight (and a bottom one) still gives every real point scikit-learn's
    value, in each group and in both directions."""
    rng = np.random.default_rng(9)
    n = 27  # pads to 32
    x = np.round(rng.normal(size=n), 1)
    y = rng.uniform(size=n)
    w = rng.uniform(0.5, 2.0, n)
    w[x == x.max()] = 0.0
    w[x == x.min()] = 0.0
    g = rng.integers(0, 3, n)
    for name in PATHS:
        with _path(name):
            for increasing in (True, False):
                ours = isotonic_regression(x, y, sample_weight=w, group=g, increasing=increasing)
                ref = _sklearn_fit_transform(x, y, w, g, increasing=increasing)
                np.testing.assert_allclose(np.asarray(ours), ref, rtol=0, atol=RTOL64)


def test_weights_whose_sum_overflows_are_accepted():
    """Weights near the float64 maximum (their sum is inf): the same fit as unit weights,
    and no overflow warning from the input checks (warnings are errors in the tests)."""
    x, y = np.arange(4.0), np.array([1.0, 3.0, 2.0, 4.0])
    got = np.asarray(isotonic_regression(x, y, sample_weight=np.full(4, 1e308)))
    np.testing.assert_array_equal(got, np.asarray(isotonic_regression(x, y)))
