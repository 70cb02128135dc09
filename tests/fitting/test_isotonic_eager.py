"""The eager path of ``isotonic_regression`` (concrete arrays): inputs padded to their size
bucket on the host and handed to the compiled kernel as they are (scores already oriented,
weights already normalised), in buffers that ``jax.device_put`` takes without a copy.

Oracles: scikit-learn's ``IsotonicRegression`` per group, the unpadded call
(``_shapes.exact_shapes``), the traced fit (the merge tree, which normalises the weights in
its own program), and the device buffer's address.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal import _shapes
from jaxcal._native import pav_cpu_available
from jaxcal._weights import normalize_weights_host

EXACT = 1e-12  # float64: the same block means, up to the order of the sums
FLOAT32 = 1e-6  # float32 outputs (x64 off); the kernel sums in float64


def _problem(rng, groups: int, n: int, *, ties: bool = False):
    x = rng.normal(size=groups * n)
    if ties:
        x = np.round(x, 1)
    y = (rng.uniform(size=x.shape) < 1 / (1 + np.exp(-2 * x))).astype(np.float64)
    return x, y, np.repeat(np.arange(groups), n)


def _sklearn(x, y, w, gid, increasing, y_min=None, y_max=None):
    out = np.empty_like(x)
    for g in np.unique(gid):
        at = gid == g
        iso = IsotonicRegression(increasing=increasing, y_min=y_min, y_max=y_max)
        out[at] = iso.fit(x[at], y[at], sample_weight=None if w is None else w[at]).predict(x[at])
    return out


@pytest.mark.parametrize("increasing", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("shuffled", [False, True])
def test_grouped_fit_equals_scikit_learn(increasing, weighted, shuffled):
    rng = np.random.default_rng(11)
    x, y, gid = _problem(rng, 7, 157, ties=True)  # 1099 points: a padded bucket
    if shuffled:  # groups not contiguous: the kernel sorts by group first
        order = rng.permutation(x.shape[0])
        x, y, gid = x[order], y[order], gid[order]
    w = rng.uniform(0.1, 3.0, x.shape) if weighted else None
    fitted = jaxcal.isotonic_regression(
        x, y, sample_weight=w, group=gid, increasing=increasing, y_min=0.05, y_max=0.9
    )
    expected = _sklearn(x, y, w, gid, increasing, y_min=0.05, y_max=0.9)
    np.testing.assert_allclose(np.asarray(fitted), expected, rtol=0, atol=EXACT)


@pytest.mark.parametrize("last_weight", [0.0, 1.0])
@pytest.mark.parametrize("increasing", [True, False])
def test_padding_is_exact(last_weight, increasing):
    """The padding points join the last point's run with zero weight: the result equals the
    unpadded call's bit for bit, whether that run has weight or not (then the kernel gives
    its points the interpolated map)."""
    rng = np.random.default_rng(5)
    x, y, gid = _problem(rng, 3, 333)  # 999 points, padded to 1024
    w = rng.uniform(0.5, 2.0, x.shape)
    w[::9] = 0.0
    w[-1] = last_weight
    lo = rng.uniform(0.0, 0.2, x.shape)  # bounds per point, padded with their last value
    padded = jaxcal.isotonic_regression(
        x, y, sample_weight=w, group=gid, increasing=increasing, y_min=lo
    )
    with _shapes.exact_shapes():
        exact = jaxcal.isotonic_regression(
            x, y, sample_weight=w, group=gid, increasing=increasing, y_min=lo
        )
    assert _shapes.padded_size(x.shape[0]) > x.shape[0]
    np.testing.assert_array_equal(np.asarray(padded), np.asarray(exact))


def test_weights_below_the_smallest_normal_count_as_zero():
    """Weights normalised on the host reach the kernel as they are; those below
    ``2**-1022`` times the largest count as zero, as in the traced fit, which normalises
    them in its own program (and as zero weights do: the interpolated map)."""
    rng = np.random.default_rng(8)
    x, y, gid = _problem(rng, 4, 200)
    w = rng.uniform(0.5, 2.0, x.shape) * 2.0**600
    tiny = rng.random(x.shape) < 0.2
    w[tiny] = 2.0**-440  # about 2**-1041 once normalised: subnormal, not zero
    assert np.all(normalize_weights_host(w)[tiny] > 0)  # the kernel sees them
    fitted = np.asarray(jaxcal.isotonic_regression(x, y, sample_weight=w, group=gid))
    zeroed = np.asarray(
        jaxcal.isotonic_regression(x, y, sample_weight=np.where(tiny, 0.0, w), group=gid)
    )
    traced = jax.jit(
        lambda *a: jaxcal.isotonic_regression(a[0], a[1], sample_weight=a[2], group=a[3])
    )
    np.testing.assert_array_equal(fitted, zeroed)
    np.testing.assert_allclose(fitted, np.asarray(traced(x, y, w, gid)), rtol=0, atol=EXACT)


def test_float32_fit_with_weights_whose_largest_rounds_up():
    """Without x64 the host-normalised weights are cast to float32, where the largest may
    round up to 2: normalised again, the fit is scikit-learn's (to float32 rounding)."""
    rng = np.random.default_rng(3)
    x, y, gid = _problem(rng, 3, 100)
    w = rng.uniform(0.5, 1.0, x.shape)
    w[7] = 2.0 - 2.0**-40  # in [1, 2) in float64, 2.0 in float32
    with jax.enable_x64(False):
        fitted = jaxcal.isotonic_regression(x, y, sample_weight=w, group=gid, increasing=False)
    assert fitted.dtype == np.float32
    expected = _sklearn(x, y, w, gid, increasing=False)
    np.testing.assert_allclose(np.asarray(fitted), expected, rtol=0, atol=FLOAT32)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.float32])
def test_host_buffer_is_taken_by_the_device_without_a_copy(dtype):
    buf = _shapes.host_buffer(1000, dtype)
    assert buf.shape == (1000,) and buf.dtype == dtype and buf.ctypes.data % 64 == 0
    buf[:] = np.arange(1000)
    if jax.default_backend() == "cpu":
        assert jax.device_put(buf).unsafe_buffer_pointer() == buf.ctypes.data


@pytest.mark.skipif(not pav_cpu_available(), reason="the compiled PAV kernel is not built")
def test_eager_program_is_the_kernel_call_alone():
    """The program of an eager call on a CPU is one kernel call: no fusion of XLA's passes
    over the points (the orientation and the weights' normalisation are done on the host),
    and it is never promoted to another tier."""
    from jaxcal.fitting import isotonic

    rng = np.random.default_rng(1)
    x, y, gid = _problem(rng, 2, 40)
    for _ in range(20):
        jaxcal.isotonic_regression(x, y, group=gid, increasing=False)
    jax.block_until_ready(jaxcal.isotonic_regression(x, y, group=gid))
    f = isotonic._pav_fitted_kernel
    tiers = {p.tier for p in f._programs.values()}  # the program cache on, or off:
    tiers |= {key[1] for key in f._jitted if key != "nested"}
    assert tiers == {"classic-o0"}
    u, yy, w, g = (np.zeros(128), np.zeros(128), np.ones(128), np.zeros(128, np.int64))
    lo, hi = np.asarray(-np.inf), np.asarray(np.inf)
    text = isotonic._pav_fitted_kernel.lower(u, yy, w, g, lo, hi, has_group=True).as_text()
    assert text.count("stablehlo.custom_call") == 1 and "jaxcal_pav_cpu" in text
    assert "stablehlo.select" not in text and "stablehlo.negate" not in text
