"""Neural calibration inside jit: the pure fit (knots, initialisation and the Adam scan in
the program) against the eager estimator, vmap over problems and over keys against loops,
jvp / grad through the optimiser loop against central finite differences, jax.export round
trips and the NaN policy (``tests/_composition.py``)."""

from __future__ import annotations

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal.calibrators._neural_core import quantile_knots
from jaxcal.calibrators.neural import FittedNeuralCalibration
from tests._composition import (
    PURE_ATOL,
    PURE_RTOL,
    assert_exports,
    assert_jit_matches_eager,
    assert_jvp_matches_fd,
    assert_nan_policy,
    assert_vmap_matches_loop,
    grid_of,
    problem,
)

#: few steps and knots: the checks are of the program, not of the optimum
SMALL = {"n_steps": 40, "n_knots": 6, "hidden": (4,), "rank": 2}
KEY = jax.random.key(0)  # the initialisation's key (fit requires one)


def _keyed(cal):
    """``cal`` with its key bound, for the shared helpers that call ``fit(s, y)``."""
    return types.SimpleNamespace(fit=functools.partial(cal.fit, key=KEY))


def _fields(n, seed=0):
    return np.random.default_rng(seed).integers(0, 3, (n, 2))


def _assert_close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=PURE_RTOL, atol=PURE_ATOL)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"monotone": "hard"},
        {"batch_size": 64},
    ],
    ids=["penalty", "hard", "minibatch"],
)
def test_jit_matches_eager_with_fields(options):
    cal = jaxcal.NeuralCalibration(**SMALL, **options)
    s, y = problem(200)
    s = np.round(s, 0)  # heavy ties: duplicate quantiles merged into fewer knots
    x = _fields(200)
    grid = grid_of(s, 21)
    eager = cal.fit(s, y, x, key=KEY).predict(grid, x[:21])
    traced = jax.jit(lambda s, y: cal.fit(s, y, x, key=KEY).predict(grid, x[:21]))(s, y)
    _assert_close(traced, eager)
    # traced fields need the cardinalities (the embedding tables' shapes)
    run = jax.jit(
        lambda s, y, x: cal.fit(s, y, x, cardinalities=(3, 3), key=KEY).predict(grid, x[:21])
    )
    _assert_close(run(s, y, x), eager)
    with pytest.raises(ValueError, match="cardinalities"):
        jax.jit(lambda s, y, x: cal.fit(s, y, x, key=KEY).predict(grid, x[:21]))(s, y, x)


def test_jit_matches_eager_probability_scores_and_weights():
    cal = jaxcal.NeuralCalibration(**SMALL, score_type="probability")
    s, y = problem(200)
    p = 1 / (1 + np.exp(-s))
    w = np.random.default_rng(1).uniform(0.2, 2.0, 200)
    w[:3] = 0.0
    grid = np.linspace(0.01, 0.99, 21)
    assert_jit_matches_eager(cal, p, y, grid=grid, sample_weight=w, key=KEY)


def test_knots_equal_numpy_quantiles():
    rng = np.random.default_rng(2)
    logits = np.round(rng.normal(size=97), 1)
    w = rng.uniform(size=97)
    w[::7] = 0.0
    for n_knots in (2, 7, 20):
        expected = np.unique(np.quantile(logits[w > 0], np.linspace(0, 1, n_knots)))
        knots, count = jax.jit(quantile_knots, static_argnums=2)(logits, w, n_knots)
        assert int(count) == expected.shape[0]
        np.testing.assert_array_equal(np.asarray(knots)[: int(count)], expected)
        np.testing.assert_array_equal(np.asarray(knots)[int(count) :], expected[-1])


def test_pure_fit_returns_the_eager_type_and_does_not_recompile():
    cal = jaxcal.NeuralCalibration(**SMALL)
    s, y = problem(100)
    run = jax.jit(lambda s, y: cal.fit(s, y, key=KEY))
    assert isinstance(run(s, y), FittedNeuralCalibration)
    run(s + 1.0, y)
    assert run._cache_size() == 1


def test_vmap_over_problems_matches_loop():
    S, Y = (np.stack(a) for a in zip(*(problem(100, seed) for seed in range(3)), strict=True))
    assert_vmap_matches_loop(_keyed(jaxcal.NeuralCalibration(**SMALL)), S, Y)


def test_vmap_over_keys_matches_loop():
    cal = jaxcal.NeuralCalibration(**SMALL, batch_size=32)
    s, y = problem(100)
    x = _fields(100)
    keys = jax.random.split(jax.random.key(3), 3)
    batched = jax.vmap(lambda k: cal.fit(s, y, x, key=k).predict(s[:10], x[:10]))(keys)
    loop = [cal.fit(s, y, x, key=k).predict(s[:10], x[:10]) for k in keys]
    _assert_close(batched, np.stack(loop))


def test_jvp_in_weights_and_propensities_through_the_optimiser_matches_fd():
    cal = jaxcal.NeuralCalibration(**SMALL)
    s, y = problem(100)
    x = _fields(100)
    grid, gx = grid_of(s, 11), x[:11]
    rng = np.random.default_rng(4)
    w, om, v = rng.uniform(0.5, 2.0, 100), rng.uniform(0.3, 0.9, 100), rng.normal(size=100)
    tangent = assert_jvp_matches_fd(
        lambda w: cal.fit(s, y, x, sample_weight=w, key=KEY).predict(grid, gx), w, v
    )
    assert np.abs(tangent).max() > 0
    # IPS targets y / propensity: the derivative with respect to the targets
    assert_jvp_matches_fd(
        lambda om: cal.fit(s, y, x, propensity=om, loss="ips", key=KEY).predict(grid, gx),
        om,
        0.1 * v,
    )


def test_export_round_trip():
    s, y = problem(100)
    assert_exports(_keyed(jaxcal.NeuralCalibration(**SMALL)), s, y)


def test_nan_policy():
    cal = jaxcal.NeuralCalibration(**SMALL)
    s, y = problem(100)
    assert_nan_policy(_keyed(cal), s, y)
    # constant scores (no knots), field ids beyond the cardinalities: NaN under a trace
    x = _fields(100)
    grid = grid_of(s, 5)
    run = jax.jit(
        lambda s, y, x: cal.fit(s, y, x, cardinalities=(3, 3), key=KEY).predict(grid, x[:5])
    )
    assert np.all(np.isnan(np.asarray(run(np.zeros_like(s), y, x))))
    bad = x.copy()
    bad[7, 1] = 3
    assert np.all(np.isnan(np.asarray(run(s, y, bad))))
    prob = jaxcal.NeuralCalibration(**SMALL, score_type="probability")
    fitted = prob.fit(1 / (1 + np.exp(-s)), y, key=KEY)
    out = jax.jit(fitted.predict)(jnp.array([1.5, -0.1, 0.5]))
    assert np.all(np.isnan(np.asarray(out[:2]))) and np.isfinite(out[2])
