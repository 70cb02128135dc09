"""ENIR / near-isotonic path: KKT certificates and scipy on the near-isotonic objective at
fixed lambdas, the isotonic limit against scikit-learn, and the BIC ensemble against a
direct list-based implementation of the modified PAV path (Tibshirani et al. 2011);
``near_isotonic_regression`` on tracers against the eager fit, finite differences and its
NaN policy."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal._fitdata import prepare_fit
from jaxcal.calibrators import _enir_path as enir_path
from jaxcal.calibrators import enir
from jaxcal.calibrators.enir import FittedENIR, near_isotonic_regression
from tests._composition import check_derivative
from tests._enir_path_oracle import breakpoint_models

KKT_TOL = 1e-9
EXACT = 1e-9


def _objective(b, y, w, lam):
    return 0.5 * np.sum(w * (y - b) ** 2) + lam * np.sum(np.maximum(b[:-1] - b[1:], 0))


def _kkt_residual(b, y, w, lam):
    """Stationarity w_i (b_i - y_i) + lam (g_i - g_{i-1}) = 0 with g_i in the subdifferential
    of (b_i - b_{i+1})_+ (1 if b_i > b_{i+1}, 0 if <, [0, 1] if equal), g_0 = g_n = 0.
    Returns the largest violation (0 for the exact minimiser)."""
    g = np.cumsum(-w * (b - y)) / lam  # g_i for i = 1..n (g_n must be 0)
    worst = abs(g[-1])
    for i in range(b.size - 1):
        if b[i] > b[i + 1] + 1e-12:
            worst = max(worst, abs(g[i] - 1))
        elif b[i] < b[i + 1] - 1e-12:
            worst = max(worst, abs(g[i]))
        else:
            worst = max(worst, -g[i], g[i] - 1)
    return worst


def _scipy(y, w, lam):
    n = y.size
    A = np.zeros((n - 1, 2 * n - 1))
    for i in range(n - 1):
        A[i, i], A[i, i + 1], A[i, n + i] = -1, 1, 1
    res = minimize(
        lambda z: 0.5 * np.sum(w * (y - z[:n]) ** 2) + lam * z[n:].sum(),
        np.r_[y, np.maximum(y[:-1] - y[1:], 0)],
        jac=lambda z: np.r_[-w * (y - z[:n]), lam * np.ones(n - 1)],
        constraints=[{"type": "ineq", "fun": lambda z: A @ z, "jac": lambda z: A}],
        bounds=[(None, None)] * n + [(0, None)] * (n - 1),
        method="SLSQP",
        options={"ftol": 1e-15, "maxiter": 1000},
    )
    return res.x[:n]


def test_path_is_optimal_at_several_lambdas():
    rng = np.random.default_rng(0)
    for _ in range(6):
        n = 7
        y = rng.normal(size=n)
        w = rng.uniform(0.5, 2.0, n)
        for lam in (0.05, 0.3, 1.0, 3.0):
            b = np.asarray(near_isotonic_regression(y, lam=lam, sample_weight=w))
            assert _kkt_residual(b, y, w, lam) < KKT_TOL
            ref = _scipy(y, w, lam)
            # never worse than a general-purpose solver; strong convexity then bounds the gap
            assert _objective(b, y, w, lam) <= _objective(ref, y, w, lam) + 1e-12
            np.testing.assert_allclose(b, ref, atol=1e-4)


def test_endpoints_of_path():
    rng = np.random.default_rng(1)
    y = rng.normal(size=12)
    w = rng.uniform(0.5, 2.0, 12)
    np.testing.assert_allclose(near_isotonic_regression(y, lam=0.0, sample_weight=w), y)
    iso = IsotonicRegression().fit(np.arange(12), y, sample_weight=w).predict(np.arange(12))
    np.testing.assert_allclose(
        near_isotonic_regression(y, lam=np.inf, sample_weight=w), iso, atol=EXACT
    )


def _direct_models(s, y, eps, w=None):
    """Every breakpoint model of the list-based path with its -BIC/2, on the distinct
    scores of ``s``. ``y`` may be any non-negative target (IPS), ``w`` weights."""
    w = np.ones(s.size) if w is None else w
    xs, inv = np.unique(s, return_inverse=True)
    W = np.bincount(inv, w)
    m = np.bincount(inv, w * y)
    s1 = np.bincount(inv, w * np.clip(y, 0, 1))
    models = breakpoint_models(W, m / W, s1, W - s1, s.size, eps)
    return xs, [(ll, fit) for ll, fit, _ in models]


def _direct_enir(s, y, eps, w=None):
    """The BIC average over every breakpoint model (no pruning)."""
    xs, models = _direct_models(s, y, eps, w)
    lw = np.array([mm[0] for mm in models])
    wt = np.exp(lw - lw.max())
    wt /= wt.sum()
    return xs, sum(wi * mm[1] for wi, mm in zip(wt, models, strict=True)), len(models)


def test_enir_matches_direct_path_average():
    rng = np.random.default_rng(2)
    s = rng.uniform(size=150)
    y = (rng.uniform(size=150) < s).astype(float)
    cal = jaxcal.ENIR().fit(s, y)
    xs, avg, n_models = _direct_enir(s, y, 1e-3)
    assert int(cal.n_models) == n_models
    np.testing.assert_allclose(np.asarray(cal.knots_x), xs)
    np.testing.assert_allclose(np.asarray(cal.knots_y), np.clip(avg, 0, 1), atol=EXACT)
    q = rng.uniform(-0.1, 1.1, 50)
    np.testing.assert_allclose(np.asarray(cal.predict(q)), np.interp(q, xs, avg), atol=EXACT)


def _ips_problem(n, seed):
    """Logit scores, Bernoulli labels, IPS targets y / propensity (up to 20)."""
    rng = np.random.default_rng(seed)
    z = np.round(rng.normal(size=n), 2)  # ties
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-2 * z))).astype(int)
    prop = rng.uniform(0.05, 1.0, n)
    d = prepare_fit(z, y, propensity=prop, loss="ips")
    return d.scores, d.targets, d.weights, (z, y, prop)


@pytest.mark.parametrize("kind", ["labels", "ips"])
def test_pruned_average_equals_the_full_average(kind):
    """At a size where most breakpoints are skipped by the BIC bound, the average still
    equals the unpruned average over every breakpoint model (list-based path)."""
    if kind == "labels":
        rng = np.random.default_rng(5)
        s = rng.uniform(size=1500)
        y = (rng.uniform(size=1500) < s).astype(float)
        w, cal = None, jaxcal.ENIR().fit(s, y)
    else:
        s, y, w, (z, labels, prop) = _ips_problem(1200, 6)
        cal = jaxcal.ENIR().fit(z, labels, propensity=prop, loss="ips")
    xs, avg, n_models = _direct_enir(s, y, 1e-3, w)
    assert int(cal.n_models) == n_models
    assert int(cal.n_scored) < n_models - 50  # the bound really skipped many of them
    np.testing.assert_allclose(np.asarray(cal.knots_x), xs)
    np.testing.assert_allclose(np.asarray(cal.knots_y), np.clip(avg, 0, 1), atol=EXACT)


@jax.jit
def _path_bounds(w, y, s1, s0, real, n):
    path = enir_path.trace_path(w, y, s1, s0, real, jnp.inf)
    bound = enir_path._breakpoint_bounds(path, y, s1, s0, real, jnp.log(n), 1e-3)
    return bound, path.bp_lam


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bic_bound_never_exceeds_the_exact_bic(seed):
    """The per-breakpoint lower bound (least log-loss of every group over the values it
    takes while alive, plus K log N) is at most the exact BIC of that breakpoint model
    (every model but the final one, which is scored exactly)."""
    if seed == 0:
        rng = np.random.default_rng(7)
        s = rng.uniform(size=400)
        y, w = (rng.uniform(size=400) < s).astype(float), np.ones(400)
    else:
        s, y, w, _ = _ips_problem(300, seed)
    xs, W, yr, s1, s0, real = enir._runs_host(s, y, w)
    bound, bp_lam = _path_bounds(*(jnp.asarray(v) for v in (W, yr, s1, s0, real)), s.size)
    bound = np.asarray(bound)[~np.isnan(np.asarray(bp_lam))]
    _, models = _direct_models(s, y, 1e-3, w)
    exact = np.array([-2 * mm[0] for mm in models])[:-1]  # the final model is scored exactly
    assert bound.size == exact.size
    assert np.all(bound <= exact * (1 + 1e-12) + 1e-9)


_tree_set = jax.jit(enir_path._tree_set)


_UPDATES = st.lists(
    st.tuples(st.integers(0, 2999), st.floats(0, 1e3, allow_subnormal=False)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([1, 7, 33, 1100, 3000]), _UPDATES)
def test_tournament_tree_root_is_the_first_minimum(n, updates):
    rng = np.random.default_rng(n)
    leaves = rng.uniform(0, 1e3, n)
    levels = enir_path._tree_build(jnp.asarray(leaves))
    for i, t in updates:
        i = i % n
        leaves[i] = t
        idx = jnp.asarray([i, i, (i + 1) % n])  # repeated leaves, as a merge may give
        vals = jnp.asarray([t, t, leaves[(i + 1) % n]])
        levels = _tree_set(levels, idx, vals)
        assert float(levels[-1][0][0]) == leaves.min()
        assert int(levels[-1][1][0]) == int(np.argmin(leaves))


def test_path_takes_one_merge_per_iteration():
    """The path makes exactly R - (number of isotonic blocks) merges (each an O(log R)
    iteration), ending at the isotonic regression's blocks (scikit-learn)."""
    rng = np.random.default_rng(8)
    y = rng.normal(size=700)
    w = rng.uniform(0.5, 2.0, 700)
    real = np.ones(700, bool)
    a = [jnp.asarray(v) for v in (w, y, np.zeros(700), np.zeros(700))] + [jnp.asarray(real)]
    path = enir_path.trace_path(*a, jnp.asarray(jnp.inf))
    iso = IsotonicRegression().fit(np.arange(700), y, sample_weight=w).predict(np.arange(700))
    n_blocks = 1 + int(np.sum(np.abs(np.diff(iso)) > 1e-9))
    assert int(path.n_events) == 700 - n_blocks == 700 - int(path.n_groups)


def test_save_load_jit(tmp_path):
    rng = np.random.default_rng(3)
    s = rng.normal(size=60)
    y = (s + rng.normal(size=60) > 0).astype(int)
    cal = jaxcal.ENIR().fit(s, y)
    cal.save(tmp_path / "enir.npz")
    back = jaxcal.load(tmp_path / "enir.npz")
    assert isinstance(back, FittedENIR) and int(back.n_models) == int(cal.n_models)
    np.testing.assert_array_equal(
        np.asarray(jax.jit(lambda c, x: c.predict(x))(back, s)), np.asarray(cal.predict(s))
    )


def test_bad_inputs():
    with pytest.raises(ValueError, match="eps"):
        jaxcal.ENIR(eps=0.0).fit([0.1, 0.2], [0, 1])
    with pytest.raises(ValueError, match="one class"):
        jaxcal.ENIR().fit([0.1, 0.2], [0, 0])
    with pytest.raises(ValueError, match="lam"):
        near_isotonic_regression([0.1, 0.2], lam=-1.0)
    with pytest.raises(ValueError, match="non-finite"):
        near_isotonic_regression([0.1, np.nan], lam=1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        near_isotonic_regression([0.3], lam=1.0)  # a single point is fine


# --- near_isotonic_regression on tracers --------------------------------------------------


def _sequence(n=40, seed=9):
    """Values with violations at every scale, a run of ties (equal values fuse at once),
    positive weights."""
    rng = np.random.default_rng(seed)
    y = rng.normal(size=n) + np.linspace(0.0, 2.0, n)
    y[10:14] = y[10]
    return y, rng.uniform(0.5, 2.0, n)


def test_near_isotonic_regression_under_jit_and_vmap_is_the_eager_fit():
    """Traced inputs (``y``, the weights and ``lam`` all traced) take the pure-JAX path,
    which equals the eager one (the compiled kernel where it is built) at the path's ends
    and between them; ``vmap`` over sequences equals a loop of eager fits; the program
    exports without the kernel's custom call."""
    y, w = _sequence()
    program = jax.jit(lambda y, w, lam: near_isotonic_regression(y, lam=lam, sample_weight=w))
    for lam in (0.0, 0.05, 0.4, 3.0, np.inf):
        eager = np.asarray(near_isotonic_regression(y, lam=lam, sample_weight=w))
        np.testing.assert_allclose(np.asarray(program(y, w, lam)), eager, atol=EXACT)
        assert lam == 0.0 or _kkt_residual(np.asarray(program(y, w, lam)), y, w, lam) < KKT_TOL
    Y = np.stack([y, -y, np.sin(np.arange(y.size))])
    batched = jax.vmap(lambda y: near_isotonic_regression(y, lam=0.4, sample_weight=w))(Y)
    loop = np.stack([np.asarray(near_isotonic_regression(r, lam=0.4, sample_weight=w)) for r in Y])
    np.testing.assert_allclose(np.asarray(batched), loop, atol=EXACT)
    exp = jax.export.export(program)(y, w, 0.4)
    assert "jaxcal_near_isotonic" not in exp.mlir_module()  # a portable artifact
    again = jax.export.deserialize(exp.serialize())
    np.testing.assert_allclose(
        np.asarray(again.call(y, w, 0.4)),
        np.asarray(near_isotonic_regression(y, lam=0.4, sample_weight=w)),
        atol=EXACT,
    )


def test_near_isotonic_regression_derivatives_match_finite_differences():
    """``jvp`` and ``grad`` in the values, the weights and ``lam`` at once, against central
    differences (float64), at penalties where no merge happens within the step; at
    ``lam = inf`` (the isotonic fit) against scikit-learn's fit of the perturbed values."""
    y, w = _sequence(30, seed=10)
    n = y.size
    rng = np.random.default_rng(10)
    for lam in (0.07, 0.9):

        def f(z, lam=lam):
            return near_isotonic_regression(z[:n], lam=z[-1], sample_weight=z[n:-1])

        z, dz = np.r_[y, w, lam], rng.normal(size=2 * n + 1)
        check_derivative(f, z, dz)
        # not trivially zero: the fit moves with lam where a group violates a neighbour
        _, in_lam = jax.jvp(f, (z,), (np.r_[np.zeros(2 * n), 1.0],))
        assert np.any(np.abs(np.asarray(in_lam)) > 1e-2)
    dy = rng.normal(size=n)
    _, tangent = jax.jvp(
        lambda y: near_isotonic_regression(y, lam=np.inf, sample_weight=w), (y,), (dy,)
    )

    def iso(y):
        return IsotonicRegression().fit(np.arange(n), y, sample_weight=w).predict(np.arange(n))

    fd = (iso(y + 1e-6 * dy) - iso(y - 1e-6 * dy)) / 2e-6
    np.testing.assert_allclose(np.asarray(tangent), fd, atol=1e-7)


def test_near_isotonic_regression_nan_policy_under_a_trace():
    """What raises eagerly gives NaN inside ``jit``: a non-finite value or weight, a weight
    ``<= 0``, a negative or NaN ``lam``; shapes still raise."""
    y, w = _sequence(12)
    program = jax.jit(lambda y, w, lam: near_isotonic_regression(y, lam=lam, sample_weight=w))
    assert np.all(np.isfinite(np.asarray(program(y, w, 0.5))))
    bad_y, zero_w, inf_w = y.copy(), w.copy(), w.copy()
    bad_y[3], zero_w[3], inf_w[3] = np.nan, 0.0, np.inf
    for args in ((bad_y, w, 0.5), (y, zero_w, 0.5), (y, inf_w, 0.5), (y, w, -1.0), (y, w, np.nan)):
        assert np.all(np.isnan(np.asarray(program(*args))))
    with pytest.raises(ValueError, match="length mismatch"):
        program(y, w[:-1], 0.5)
