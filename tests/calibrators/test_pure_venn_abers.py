"""Venn-Abers inside jit: the pure fit (portable sweeps in the program) against the eager
estimator (host runs, possibly the compiled kernel), vmap against a loop, jvp / grad against
central finite differences, jax.export round trips and the NaN policy of predict and
interval (``tests/_composition.py``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal._fitdata import PureFitData
from jaxcal.calibrators.venn_abers import FittedVennAbers
from jaxcal.fitting.folds import stratified_folds
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

CALIBRATORS = {"ivap": jaxcal.VennAbers(), "cvap": jaxcal.VennAbers(n_folds=3)}
IDS = list(CALIBRATORS)


def _weighted_problem(n=200, seed=0):
    """Ties (scores rounded), uneven and some zero weights."""
    s, y = problem(n, seed)
    s = np.round(s, 1)
    w = np.random.default_rng(seed + 10).uniform(0.3, 2.0, n)
    w[5:9] = 0.0
    return s, y, w


def _assert_interval_matches(eager, traced):
    for a, b in zip(eager, traced, strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=PURE_RTOL, atol=PURE_ATOL)


@pytest.mark.parametrize("name", IDS)
def test_jit_matches_eager(name):
    cal = CALIBRATORS[name]
    s, y = problem()
    assert_jit_matches_eager(cal, s, y)
    s, y, w = _weighted_problem()
    assert_jit_matches_eager(cal, s, y, sample_weight=w)
    om = np.random.default_rng(1).uniform(0.2, 1.0, s.shape[0])
    assert_jit_matches_eager(cal, s, y, propensity=om, loss="snips")


@pytest.mark.parametrize("name", IDS)
def test_interval_jit_matches_eager(name):
    cal = CALIBRATORS[name]
    s, y, w = _weighted_problem()
    grid = np.r_[grid_of(s), s[:20]]  # also at the calibration scores (ties with edges)
    eager = cal.fit(s, y, sample_weight=w).interval(grid)
    traced = jax.jit(lambda s, y, w: cal.fit(s, y, sample_weight=w).interval(grid))(s, y, w)
    _assert_interval_matches(eager, traced)


def test_fold_ids_concrete_and_traced_match_eager():
    s, y, w = _weighted_problem()
    fold = np.random.default_rng(5).integers(0, 4, s.shape[0])
    cal = jaxcal.VennAbers(n_folds=4)
    grid = grid_of(s)
    eager = cal.fit(s, y, sample_weight=w, fold=fold).interval(grid)
    concrete = jax.jit(lambda s, y: cal.fit(s, y, sample_weight=w, fold=fold).interval(grid))
    traced = jax.jit(lambda s, y, f: cal.fit(s, y, sample_weight=w, fold=f).interval(grid))
    _assert_interval_matches(eager, concrete(s, y))
    _assert_interval_matches(eager, traced(s, y, fold))
    bad = fold.copy()
    bad[0] = 4  # outside [0, K): refused eagerly, NaN under a trace
    with pytest.raises(ValueError, match="fold"):
        cal.fit(s, y, fold=bad)
    assert np.all(np.isnan(np.asarray(traced(s, y, bad)[1])))


def test_pure_fit_returns_the_eager_type_without_the_native_kernel_and_does_not_recompile():
    s, y = problem()
    cal = CALIBRATORS["cvap"]
    run = jax.jit(lambda s, y: cal.fit(s, y))
    fitted = run(s, y)
    assert isinstance(fitted, FittedVennAbers) and fitted.n_folds == 3
    run(s + 1.0, y)
    assert run._cache_size() == 1
    program = str(jax.make_jaxpr(lambda s, y: cal.fit(s, y).predict(s))(s, y))
    assert "ffi_call" not in program and "custom_call" not in program


@pytest.mark.parametrize("name", IDS)
def test_vmap_matches_loop(name):
    S, Y = (np.stack(a) for a in zip(*(problem(120, seed) for seed in range(3)), strict=True))
    assert_vmap_matches_loop(CALIBRATORS[name], S, Y)


@pytest.mark.parametrize("name", IDS)
def test_jvp_in_weights_matches_fd(name):
    cal = CALIBRATORS[name]
    s, y, w = _weighted_problem(120)
    grid = grid_of(s, 23)
    v = np.random.default_rng(2).normal(size=s.shape[0]) * (w > 0)
    tangent = assert_jvp_matches_fd(lambda w: cal.fit(s, y, sample_weight=w).predict(grid), w, v)
    assert np.abs(tangent).max() > 0  # predict merges p0 and p1: both tables checked


@pytest.mark.parametrize("name", IDS)
def test_jvp_in_labels_matches_fd(name):
    """The isotonic fits as functions of the labels, off the 0/1 labels the public fit
    accepts: finite differences of the pure tables (same folds); the public fit's jvp at 0/1
    labels is theirs."""
    cal = CALIBRATORS[name]
    s, y, w = _weighted_problem(120)
    grid = grid_of(s, 23)
    v = np.random.default_rng(3).normal(size=s.shape[0])
    fold = _folds(cal, s, y, w)

    def tables(labels):
        data = PureFitData(jnp.asarray(s), labels, labels, jnp.asarray(w), jnp.bool_(False))
        return cal._tables_pure(data, jnp.asarray(fold)).predict(grid)

    y_mid = np.where(y > 0, 0.8, 0.2)  # soft labels: the same bridges, generic slopes
    assert_jvp_matches_fd(tables, y_mid, v)
    _, public = jax.jvp(lambda y: cal.fit(s, y, sample_weight=w).predict(grid), (y,), (v,))
    _, direct = jax.jvp(tables, (jnp.asarray(y),), (jnp.asarray(v),))
    np.testing.assert_allclose(np.asarray(public), np.asarray(direct), rtol=1e-12, atol=1e-14)


def _folds(cal, s, y, w):
    """The default folds of a fit: none for an IVAP, else the deterministic folds."""
    if cal.n_folds == 1:
        return np.zeros(y.shape[0], np.int32)
    return stratified_folds(y, cal.n_folds, scores=s, weights=w)


def test_default_folds_inside_jit_are_the_eager_ones():
    """Traced data: the CVAP's default folds are computed in the program, and are those of
    the eager fit (given to it as fold ids)."""
    s, y, w = _weighted_problem()
    grid = grid_of(s)
    for k in (2, 5):
        cal = jaxcal.VennAbers(n_folds=k)
        eager = cal.fit(s, y, sample_weight=w, fold=_folds(cal, s, y, w)).interval(grid)
        traced = jax.jit(lambda s, y, w, cal=cal: cal.fit(s, y, sample_weight=w).interval(grid))
        _assert_interval_matches(eager, traced(s, y, w))


def test_ivap_matches_brute_force_isotonic_fits():
    """Oracle: p0 / p1 at a test score are isotonic fits with the test point added (scikit-
    learn-free PAV in NumPy), for a few scores, through the jitted pure fit."""
    s, y = problem(40, 3)
    t = np.array([-1.3, 0.05, 0.7, 2.2])
    lo, hi = jax.jit(lambda s, y: jaxcal.VennAbers().fit(s, y).interval(t))(s, y)
    for j, tj in enumerate(t):
        for label, got in ((0, lo[j]), (1, hi[j])):
            ss, yy = np.r_[s, tj], np.r_[y, label]
            order = np.argsort(ss, kind="stable")
            fit = _pav(yy[order])
            np.testing.assert_allclose(float(got), fit[np.flatnonzero(order == s.shape[0])[0]])


def _pav(y):
    blocks = []  # [mean, count]
    for v in y:
        blocks.append([float(v), 1])
        while len(blocks) > 1 and blocks[-2][0] >= blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return np.concatenate([np.full(c, m) for m, c in blocks])


@pytest.mark.parametrize("name", IDS)
def test_export_round_trip(name):
    s, y = problem()
    assert_exports(CALIBRATORS[name], s, y)


@pytest.mark.parametrize("name", IDS)
def test_nan_policy_of_predict_and_interval(name):
    cal = CALIBRATORS[name]
    s, y = problem()
    assert_nan_policy(cal, s, y)
    grid = grid_of(s, 7)
    run = jax.jit(lambda s, y: cal.fit(s, y).interval(grid))
    bad = s.copy()
    bad[3] = np.inf
    assert all(np.all(np.isnan(np.asarray(end))) for end in run(bad, y))
    fitted = cal.fit(s, y)
    lo, hi = jax.jit(fitted.interval)(np.array([np.nan, np.inf, 0.1]))
    assert np.all(np.isnan(lo[:2])) and np.all(np.isnan(hi[:2]))
    assert np.isfinite(lo[2]) and np.isfinite(hi[2])


def test_ips_targets_are_refused_eagerly_and_nan_under_jit():
    s, y = problem()
    om = np.full(s.shape[0], 0.5)
    cal = jaxcal.VennAbers()
    with pytest.raises(ValueError, match="0/1 labels"):
        cal.fit(s, y, propensity=om, loss="ips")
    out = jax.jit(lambda s, y: cal.fit(s, y, propensity=om, loss="ips").predict(s[:4]))(s, y)
    assert np.all(np.isnan(np.asarray(out)))


def test_fit_batch_refuses_traced_inputs():
    s, y = problem(50)
    with pytest.raises(ValueError, match="vmap"):
        jax.jit(lambda s: jaxcal.VennAbers().fit_batch(s[None], y[None]))(s)
