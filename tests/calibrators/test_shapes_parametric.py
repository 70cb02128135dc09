"""The shape policy on the parametric calibrators: new sizes inside a bucket and new
hyperparameter values compile nothing, and padding does not change a fit.

Oracles: the same fit at its exact size (``exact_shapes``, no padding), compared to float64
rounding; the compile counter of ``tests/conftest.py`` (every program JAX traces).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal._shapes import exact_shapes, padded_shape, padded_size

# Padded and exact fits reach the same optimum by different rounding (sums over other
# block lengths); Newton's last step leaves them ~1e-15 apart, far inside this tolerance.
PAD_RTOL = 1e-12
PAD_ATOL = 1e-12

FAMILIES = {
    "platt": (jaxcal.PlattScaling, "normal"),
    "temperature": (jaxcal.TemperatureScaling, "normal"),
    "beta": (jaxcal.BetaCalibration, "unit"),
    "gaussian": (jaxcal.GaussianCalibration, "normal"),
    "gamma": (jaxcal.GammaCalibration, "positive"),
    "exponential": (jaxcal.ExponentialCalibration, "positive"),
}


def make(kind: str, n: int, seed: int):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.random(n) < 1 / (1 + np.exp(-1.5 * s))).astype(np.float64)
    if kind == "unit":
        s = 1 / (1 + np.exp(-s))
    elif kind == "positive":
        s = np.exp(s)
    return s, y


def test_bucket_ladder():
    assert [padded_size(n) for n in (1, 32, 33, 700, 1024, 1025)] == [32, 32, 64, 1024] + [
        1024,
        2048,
    ]
    assert padded_size(65_536) == 65_536
    assert padded_size(65_537) == 81_920  # four steps per octave above 65,536
    # sixteen steps per octave above 262,144 elements: 2**19 < 1e6 <= 2**20, steps of 2**15
    assert padded_size(300_000) == 311_296
    assert padded_size(1_000_000) == 1_015_808
    assert padded_shape((5, 700)) == (8, 1024)  # problems from 1, rows from 32
    assert padded_shape((1000, 10_000)) == (1024, 10_240)
    with exact_shapes():
        assert padded_size(700) == 700


@pytest.mark.parametrize("name", list(FAMILIES))
def test_new_sizes_and_hyperparameters_compile_nothing(name, compiles):
    Cal, kind = FAMILIES[name]
    s, y = make(kind, 700, seed=0)
    Cal().fit(s, y).predict(s)  # warm: n = 700 -> bucket 1024
    with compiles() as c:
        for n, seed in ((800, 1), (1000, 2)):
            s, y = make(kind, n, seed)
            p = Cal(l2=0.1 * seed, max_iter=50 + seed).fit(s, y).predict(s)
            jax.block_until_ready(p)
    assert c.count == 0
    assert p.shape == (1000,)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_padded_fit_equals_exact_size_fit(name):
    Cal, kind = FAMILIES[name]
    s, y = make(kind, 700, seed=3)
    w = np.random.default_rng(4).uniform(0.5, 2.0, size=700)
    padded = Cal(l2=0.01).fit(s, y, sample_weight=w)
    with exact_shapes():
        exact = Cal(l2=0.01).fit(s, y, sample_weight=w)
        p_exact = exact.predict(s)
    np.testing.assert_allclose(padded.theta, exact.theta, rtol=PAD_RTOL, atol=PAD_ATOL)
    np.testing.assert_allclose(padded.predict(s), p_exact, rtol=PAD_RTOL, atol=PAD_ATOL)
    np.testing.assert_array_equal(padded.status.active, exact.status.active)
    np.testing.assert_allclose(
        padded.status.objective, exact.status.objective, rtol=PAD_RTOL, atol=PAD_ATOL
    )


def test_fit_batch_ragged_sizes_compile_nothing(compiles):
    rng = np.random.default_rng(5)

    def problems(B, n):
        s = rng.normal(size=(B, n))
        y = (rng.random((B, n)) < 1 / (1 + np.exp(-s))).astype(np.float64)
        mask = np.arange(n)[None, :] < rng.integers(n // 2, n + 1, size=B)[:, None]
        return s, y, mask

    s, y, _ = problems(5, 300)
    jaxcal.GaussianCalibration().fit_batch(s, y).predict(s[:, :100])  # warm: (8, 512)
    with compiles() as c:
        for B, n in ((6, 400), (7, 500)):
            s, y, mask = problems(B, n)
            fitted = jaxcal.GaussianCalibration(l2=1e-3 * B).fit_batch(s, y, mask=mask)
            p = jax.block_until_ready(fitted.predict(s[:, :100]))
    assert c.count == 0
    assert fitted.batch_shape == (7,) and p.shape == (7, 100)
    # every problem equals its own single fit (looped, exact sizes)
    with exact_shapes():
        for b in range(B):
            one = jaxcal.GaussianCalibration(l2=1e-3 * B).fit(s[b][mask[b]], y[b][mask[b]])
            np.testing.assert_allclose(fitted.theta[b], one.theta, rtol=1e-9, atol=1e-10)


def test_predict_any_shape_and_inside_jit():
    s, y = make("normal", 500, seed=6)
    fitted = jaxcal.PlattScaling().fit(s, y)
    grid = np.linspace(-2, 2, 12).reshape(3, 4)
    expected = 1 / (1 + np.exp(-(fitted.theta[0] * grid + fitted.theta[1])))
    np.testing.assert_allclose(fitted.predict(grid), expected, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(fitted.predict)(grid), expected, rtol=1e-12)
    assert fitted.predict(np.zeros((0, 3))).shape == (0, 3)
