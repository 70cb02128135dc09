"""Histogram binning and BBQ inside jit: the pure fit against the eager estimator, vmap
against a loop of single fits, jvp / grad against central finite differences, jax.export
round trips and the NaN policy (``tests/_composition.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal._fitdata import PureFitData
from jaxcal.calibrators.bbq import FittedBBQ
from jaxcal.calibrators.histogram import FittedHistogram
from tests._composition import (
    PURE_ATOL,
    assert_exports,
    assert_jit_matches_eager,
    assert_jvp_matches_fd,
    assert_nan_policy,
    assert_vmap_matches_loop,
    finite_difference,
    grid_of,
    problem,
)

CALIBRATORS = {
    "histogram-quantile": jaxcal.HistogramBinning(n_bins=10),
    "histogram-uniform": jaxcal.HistogramBinning(n_bins=7, strategy="uniform"),
    "bbq": jaxcal.BBQ(),
}
IDS = list(CALIBRATORS)
#: one program per calibrator for the derivative checks (compiling BBQ's jvp is the cost)
DERIVATIVE_IDS = ["histogram-quantile", "bbq"]


def _weighted_problem(n=200, seed=0):
    """Ties (scores rounded), uneven and some zero weights, propensities in (0, 1]."""
    s, y = problem(n, seed)
    s = np.round(s, 1)
    rng = np.random.default_rng(seed + 10)
    w = rng.uniform(0.3, 2.0, n)
    w[5:9] = 0.0
    return s, y, w, rng.uniform(0.3, 1.0, n)


@pytest.mark.parametrize("name", IDS)
def test_jit_matches_eager(name):
    cal = CALIBRATORS[name]
    s, y = problem()
    assert_jit_matches_eager(cal, s, y)
    s, y, w, om = _weighted_problem()
    assert_jit_matches_eager(cal, s, y, sample_weight=w)
    assert_jit_matches_eager(cal, s, y, propensity=om, loss="ips")


def test_bbq_hyperparameters_and_snips_jit_matches_eager():
    s, y, w, om = _weighted_problem()
    cal = jaxcal.BBQ(c=3.0, equivalent_sample_size=5.0)
    assert_jit_matches_eager(cal, s, y, sample_weight=w, propensity=om, loss="snips")


@pytest.mark.parametrize("scale", ["auto", "probability", "logit"])
def test_bbq_probability_scores_jit_matches_eager(scale):
    s, y = problem()
    p = 1 / (1 + np.exp(-s))
    assert_jit_matches_eager(jaxcal.BBQ(score_scale=scale), p, y)


def test_pure_fit_returns_the_eager_type_and_does_not_recompile():
    s, y = problem()
    for cal, kind in ((jaxcal.HistogramBinning(), FittedHistogram), (jaxcal.BBQ(), FittedBBQ)):
        run = jax.jit(lambda s, y, cal=cal: cal.fit(s, y))
        assert isinstance(run(s, y), kind)
        run(s + 0.5, y)
        assert run._cache_size() == 1


@pytest.mark.parametrize("name", IDS)
def test_vmap_matches_loop(name):
    S, Y = (np.stack(a) for a in zip(*(problem(120, seed) for seed in range(3)), strict=True))
    assert_vmap_matches_loop(CALIBRATORS[name], S, Y)


def test_bbq_auto_scale_is_chosen_per_problem_under_vmap():
    """One problem of probabilities, one of logits: the traced choice of scale matches the
    eager one of each problem."""
    s, y = problem(150)
    S = np.stack([1 / (1 + np.exp(-s)), s])
    assert_vmap_matches_loop(jaxcal.BBQ(), S, np.stack([y, y]), grid=np.linspace(-0.5, 1.5, 31))


@pytest.mark.parametrize("name", DERIVATIVE_IDS)
def test_jvp_in_weights_and_propensities_matches_fd(name):
    cal = CALIBRATORS[name]
    s, y, w, om = _weighted_problem(120)
    grid = grid_of(s, 23)
    v = np.random.default_rng(2).normal(size=s.shape[0]) * (w > 0)
    assert_jvp_matches_fd(lambda w: cal.fit(s, y, sample_weight=w).predict(grid), w, v)
    # IPS targets y / propensity: the derivative with respect to the targets
    tangent = assert_jvp_matches_fd(
        lambda om: cal.fit(s, y, propensity=om, loss="ips").predict(grid), om, 0.1 * v
    )
    assert np.abs(tangent).max() > 0


@pytest.mark.parametrize("name", DERIVATIVE_IDS)
def test_jvp_in_labels_matches_fd(name):
    """The map from targets to the fitted values, off the 0/1 labels the public fit accepts:
    finite differences of the pure hook; the public fit's jvp at 0/1 labels is the hook's."""
    cal = CALIBRATORS[name]
    s, y, w, _ = _weighted_problem(120)
    grid = grid_of(s, 23)
    v = np.random.default_rng(3).normal(size=s.shape[0])
    y_mid = np.clip(y, 0.1, 0.9)  # interior: no bin mean at the clip

    def hook(t):
        data = PureFitData(jnp.asarray(s), t, t, jnp.asarray(w), jnp.bool_(False))
        return cal._fit_pure(data).predict(grid)

    assert_jvp_matches_fd(hook, y_mid, v)
    _, public = jax.jvp(lambda y: cal.fit(s, y, sample_weight=w).predict(grid), (y,), (v,))
    _, direct = jax.jvp(hook, (jnp.asarray(y),), (jnp.asarray(v),))
    np.testing.assert_allclose(np.asarray(public), np.asarray(direct), rtol=1e-12, atol=1e-14)


def test_histogram_bin_means_have_the_closed_form_derivative():
    """d(bin mean)/d(t_i) = w_i / W_b for the points of bin b: the derivative of predict at
    a training score with respect to the labels."""
    s, y = problem(90)
    cal = jaxcal.HistogramBinning(n_bins=5)
    fitted = cal.fit(s, y)
    g = jax.jacfwd(lambda y: cal.fit(s, y).predict(s))(y)
    b = np.searchsorted(np.asarray(fitted.edges), s, side="right")
    expected = (b[:, None] == b[None, :]) / np.bincount(b)[b][:, None]
    np.testing.assert_allclose(np.asarray(g), expected, rtol=1e-12, atol=1e-14)


def test_histogram_derivative_in_scores_is_zero():
    """Which bin a score falls in is piecewise constant: zero derivative (documented)."""
    s, y = problem(100)
    grid = grid_of(s, 12)  # no grid point on an edge
    v = np.random.default_rng(4).normal(size=s.shape[0])
    for strategy in ("quantile", "uniform"):
        cal = jaxcal.HistogramBinning(n_bins=6, strategy=strategy)
        _, tangent = jax.jvp(lambda s, cal=cal: cal.fit(s, y).predict(grid), (s,), (v,))
        np.testing.assert_array_equal(np.asarray(tangent), 0.0)
        fd = finite_difference(jax.jit(lambda s, cal=cal: cal.fit(s, y).predict(grid)), s, v, 1e-9)
        np.testing.assert_allclose(fd, 0.0, atol=PURE_ATOL)


@pytest.mark.parametrize("name", IDS)
def test_export_round_trip(name):
    s, y = problem()
    assert_exports(CALIBRATORS[name], s, y)


@pytest.mark.parametrize("name", IDS)
def test_nan_policy(name):
    s, y = problem()
    assert_nan_policy(CALIBRATORS[name], s, y)


def test_bbq_probability_scale_refuses_scores_outside_unit_interval_with_nan():
    s, y = problem()
    cal = jaxcal.BBQ(score_scale="probability")
    with pytest.raises(ValueError, match="probability"):
        cal.fit(s, y)
    out = jax.jit(lambda s, y: cal.fit(s, y).predict(s[:5]))(s, y)
    assert np.all(np.isnan(np.asarray(out)))


def test_pure_fit_in_float32():
    """float32 scores give a float32 fit whose numbers are the float64 fit's to float32
    rounding."""
    s, y = problem()
    grid = grid_of(s)
    for cal in (jaxcal.HistogramBinning(), jaxcal.BBQ()):
        out = jax.jit(lambda s, y, cal=cal: cal.fit(s, y).predict(grid.astype(np.float32)))(
            s.astype(np.float32), y.astype(np.float32)
        )
        assert out.dtype == np.float32
        ref = np.asarray(cal.fit(s.astype(np.float32), y).predict(grid.astype(np.float32)))
        np.testing.assert_allclose(np.asarray(out), ref, rtol=1e-5, atol=1e-6)
