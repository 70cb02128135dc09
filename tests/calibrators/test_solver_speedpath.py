"""The solver's fast paths: sketch-then-polish warm start, blocked data passes, lock-step
batches, and the fast paths of the eager validation.

Oracles: scipy SLSQP on the same weighted (IPS) constrained objective and an independent
KKT check (features and constraints re-derived here in NumPy); a direct NumPy evaluation
of the objective, gradient and Hessian; looped single fits for batches; the validation
error messages for every bad input.

The sketch is used from n = 65,536 rows on (``sketch_stride``); these tests lower that
threshold to 4096, so that problems of n = 5000 (stride 4) take the sketch path and compile
fast, and fit at their exact size (``exact_shapes``), so that the sketch is the one the
tests build.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from jaxcal._shapes import exact_shapes
from jaxcal._validation import check_batch_inputs, check_fit_inputs
from jaxcal.calibrators.gaussian import GaussianCalibration
from jaxcal.calibrators.platt import PlattScaling
from jaxcal.fitting import newton as _newton
from jaxcal.fitting import solver as _solver
from jaxcal.fitting.linear import _solve_jit, fit_linear

N = 5000  # >= 4096 (lowered threshold): the estimators take the sketch path (stride 4)
OBJ_RTOL = 1e-6  # objective vs scipy (relative)
EXACT_RTOL = 1e-9  # jaxcal (exact Newton) may not be worse than scipy by more than this
KKT_TOL = 1e-6  # stationarity residual relative to the gradient scale
LOOP_TOL = 1e-10  # batched vs looped (same float64 algorithm)
PASS_RTOL = 1e-12  # blocked data pass vs direct NumPy sums


@pytest.fixture(autouse=True)
def sketch_from_4096(monkeypatch):
    monkeypatch.setattr(_newton, "_SKETCH_MIN_ROWS", 4096)
    with exact_shapes():
        yield


# --- independent NumPy oracle --------------------------------------------------------------


def gaussian_design(s, w):
    pos = s[w > 0]
    lo, hi = pos.min(), pos.max()
    X = np.column_stack([s**2, s, np.ones_like(s)])
    return X, np.array([[2 * lo, 1.0, 0.0], [2 * hi, 1.0, 0.0]]), 2


def objective(theta, X, t, w, l2, icpt):
    z = X @ theta
    pen = np.ones_like(theta)
    pen[icpt] = 0.0
    return np.sum(w * (np.logaddexp(0.0, z) - t * z)) + 0.5 * l2 * np.sum(pen * theta**2)


def gradient(theta, X, t, w, l2, icpt):
    pen = np.ones_like(theta)
    pen[icpt] = 0.0
    return X.T @ (w * (1 / (1 + np.exp(-(X @ theta))) - t)) + l2 * pen * theta


def scipy_fit(X, t, w, C, l2, icpt):
    """SLSQP on the same problem (columns scaled for conditioning), restarted until stable."""
    scale = np.abs(X).max(axis=0)
    Xs, Cs = X / scale, C / scale
    args = (Xs, t, w, 0.0, icpt)
    pen = l2 / scale**2
    pen[icpt] = 0.0

    def f(u):
        return objective(u, *args) + 0.5 * np.sum(pen * u**2)

    def g(u):
        return gradient(u, *args) + pen * u

    cons = [{"type": "ineq", "fun": lambda u: Cs @ u, "jac": lambda u: Cs}]
    x, best = np.zeros(X.shape[1]), None
    for _ in range(3):
        res = optimize.minimize(
            f, x, jac=g, method="SLSQP", constraints=cons, options={"ftol": 1e-15, "maxiter": 2000}
        )
        x = res.x
        if best is None or res.fun < best.fun:
            best = res
    theta = best.x / scale
    # SLSQP may end slightly outside the feasible set (~1e-8 on a binding row), where the
    # objective is lower: project onto the rows it violates before comparing objectives
    bad = C @ theta < 0
    if bad.any():
        Cb = C[bad]
        theta = theta - Cb.T @ np.linalg.solve(Cb @ Cb.T, Cb @ theta)
    return theta, objective(theta, X, t, w, l2, icpt)


def assert_optimal(theta, X, t, w, C, l2, icpt):
    """Objective equals scipy's, and the KKT conditions hold; returns the active rows."""
    ref_theta, ref = scipy_fit(X, t, w, C, l2, icpt)
    ours = objective(theta, X, t, w, l2, icpt)
    assert abs(ours - ref) <= OBJ_RTOL * abs(ref), (ours, ref)
    assert ours <= ref + EXACT_RTOL * abs(ref)
    g = gradient(theta, X, t, w, l2, icpt)
    scale = np.sum(np.abs(X) * w[:, None], axis=0).max()
    slack = C @ theta
    cscale = np.abs(C) @ np.abs(theta)
    assert np.all(slack >= -1e-9 * cscale)
    active = slack <= 1e-7 * cscale
    mu = np.zeros(C.shape[0])
    if active.any():
        mu[active] = np.linalg.lstsq(C[active].T, g, rcond=None)[0]
    assert np.max(np.abs(g - C.T @ mu)) <= KKT_TOL * scale
    assert np.all(mu >= -KKT_TOL * scale)
    return active


# --- data --------------------------------------------------------------------------------


def make_data(kind, seed, n=N):
    """``hump``: logit peaking inside the range (the upper monotonicity row binds);
    ``free``: increasing truth (interior optimum); ``convex``: increasing and convex."""
    rng = np.random.default_rng(seed)
    s = rng.uniform(-2.0, 2.0, n)
    z = {
        "hump": 1.0 - 1.5 * (s - 0.3) ** 2,
        "free": 1.3 * s - 0.4,
        "convex": 0.8 * s**2 + 3.5 * s - 1.0,
    }[kind]
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(float)
    return s, y, rng.uniform(0.5, 2.0, n)


def interleaved(seed, sketch_kind, stride=4, n=N):
    """Rows ``i % stride == 0`` (exactly the sketch) from ``sketch_kind`` with weight 1e-3,
    the others from the other kind: the sketch alone fits ``sketch_kind`` (its weights are
    rescaled), the full problem barely sees it, so the sketch's active set is wrong."""
    other = "free" if sketch_kind == "hump" else "hump"
    (s1, y1, _), (s2, y2, w2) = make_data(sketch_kind, seed, n), make_data(other, seed + 1, n)
    on_sketch = np.arange(n) % stride == 0
    return np.where(on_sketch, s1, s2), np.where(on_sketch, y1, y2), np.where(on_sketch, 1e-3, w2)


def sketch_active_set(s, t, w, stride):
    """The active set the sketch alone selects (the solver's internals, one problem)."""
    fam = GaussianCalibration().family

    @jax.jit
    def run(s, t, w):
        ctx = fam.context(s, w)
        phi = _newton._phi(fam.features, ctx)
        C = fam.constraints(ctx)
        _, sketch = _newton._setup(s, t, w, C, 0.0, 2, phi, stride)
        return _solver._active_set_solve(sketch, phi, 100, 1e-18)[1]

    return np.asarray(run(*(jnp.asarray(a) for a in (s, t, w))))


# --- tests ---------------------------------------------------------------------------------


def test_sketch_stride_rule(monkeypatch):
    monkeypatch.setattr(_newton, "_SKETCH_MIN_ROWS", 1 << 16)  # the library's threshold
    assert _solver.sketch_stride(10_000) == 1
    assert _solver.sketch_stride(65_535) == 1
    assert _solver.sketch_stride(65_536) == 16
    assert _solver.sketch_stride(1_000_000) == 62
    monkeypatch.setattr(_newton, "_SKETCH_MIN_ROWS", 4096)  # these tests' threshold
    assert _solver.sketch_stride(400) == 1
    assert _solver.sketch_stride(4095) == 1
    assert _solver.sketch_stride(4096) == 4
    assert _solver.sketch_stride(N) == 4
    assert _solver.sketch_stride(10_000) == 6
    assert _solver.sketch_stride(1_000_000) == 62


@pytest.mark.parametrize("kind, l2", [("hump", 0.0), ("free", 1.0)])
def test_sketch_path_fit_is_the_constrained_optimum(kind, l2):
    s, y, w = make_data(kind, seed=1)
    fitted = GaussianCalibration(l2=l2).fit(s, y, sample_weight=w)
    assert bool(fitted.status.converged)
    X, C, icpt = gaussian_design(s, w)
    active = assert_optimal(np.asarray(fitted.theta), X, y, w, C, l2, icpt)
    assert active.any() == (kind == "hump")
    np.testing.assert_array_equal(np.asarray(fitted.status.active), active)
    np.testing.assert_allclose(
        float(fitted.status.objective),
        objective(np.asarray(fitted.theta), X, y, w, l2, icpt),
        rtol=1e-9,
    )


@pytest.mark.parametrize("sketch_kind", ["free", "hump"])
def test_wrong_sketch_active_set_falls_back_to_the_exact_optimum(sketch_kind):
    """The sketch rows come from another distribution than the rest: its active set is
    wrong (interior vs binding, and vice versa), the full-data KKT test must reject the
    polished candidate and the fallback must still find scipy's optimum."""
    s, y, w = interleaved(seed=2, sketch_kind=sketch_kind)
    guess = sketch_active_set(s, y, w, _solver.sketch_stride(N))
    fitted = GaussianCalibration().fit(s, y, sample_weight=w)
    assert bool(fitted.status.converged)
    X, C, icpt = gaussian_design(s, w)
    active = assert_optimal(np.asarray(fitted.theta), X, y, w, C, 0.0, icpt)
    assert guess.any() == (sketch_kind == "hump")  # the sketch's own optimum
    assert not np.array_equal(guess, active)  # ... is on the wrong face
    np.testing.assert_array_equal(np.asarray(fitted.status.active), active)


@pytest.mark.parametrize("loss", ["ips", "snips"])
def test_sketch_path_with_ips_targets_and_weights(loss):
    s, y, w = make_data("hump", seed=3)
    rng = np.random.default_rng(4)
    omega = rng.uniform(0.3, 1.0, N)
    y = y * (rng.uniform(size=N) < omega)  # clicks: observed and preferred
    fitted = GaussianCalibration(l2=0.1).fit(s, y, sample_weight=w, propensity=omega, loss=loss)
    assert bool(fitted.status.converged)
    if loss == "ips":  # t = Y / omega, w = v
        t, v = y / omega, w
    else:  # snips: t = Y, w = v (kappa Y / omega + 1 - Y)
        kappa = np.sum(w * y) / np.sum(w * y / omega)
        t, v = y, w * (kappa * y / omega + 1 - y)
    X, C, icpt = gaussian_design(s, w)
    assert_optimal(np.asarray(fitted.theta), X, t, v, C, 0.1, icpt)


def test_sketch_path_with_zero_weights_equals_leaving_rows_out():
    """Zero weights on every sketch row: the sketch is empty, the fit still exact."""
    s, y, w = make_data("hump", seed=5)
    w0 = np.where(np.arange(N) % 4 == 0, 0.0, w)
    fitted = GaussianCalibration().fit(s, y, sample_weight=w0)
    keep = w0 > 0
    X, C, icpt = gaussian_design(s[keep], w0[keep])
    assert_optimal(np.asarray(fitted.theta), X, y[keep], w0[keep], C, 0.0, icpt)


def test_sketch_path_no_recompilation():
    est = GaussianCalibration()
    est.fit(*make_data("hump", seed=6)[:2])
    before = _solve_jit._cache_size()
    s, y, w = make_data("free", seed=7)
    est.fit(s, y, sample_weight=w)
    GaussianCalibration(l2=2.0).fit(s, y)
    assert _solve_jit._cache_size() == before


def batch_data(seed=8):
    rows = [
        make_data("hump", seed),
        make_data("free", seed + 1),
        interleaved(seed + 2, "free"),  # this problem's sketch guess is wrong
    ]
    s, y, w = (np.stack(a) for a in zip(*rows, strict=True))
    mask = np.random.default_rng(seed).uniform(size=s.shape) < 0.9
    return s, y, w, mask


@pytest.mark.parametrize("lockstep", [False, True])
def test_batched_sketch_fits_equal_looped_fits_and_scipy(lockstep):
    """Problem by problem (CPU default) and lock-step (accelerator default, batch-level
    conditionals with a per-problem fallback) both equal single fits and scipy."""
    s, y, w, mask = batch_data()
    fam = GaussianCalibration().family
    vw = np.where(mask, w, 0.0)
    theta, _, status = fit_linear(
        fam,
        *(jnp.asarray(a) for a in (s, y, vw)),
        jnp.asarray(0.0),
        jnp.asarray(100),
        jnp.asarray(1e-18),
        lockstep=lockstep,
    )
    assert np.asarray(status.converged).all()
    for b in range(3):
        one = GaussianCalibration().fit(s[b], y[b], sample_weight=vw[b])  # zero = masked
        np.testing.assert_allclose(
            np.asarray(theta[b]), np.asarray(one.theta), rtol=1e-9, atol=LOOP_TOL
        )
        keep = mask[b]
        X, C, icpt = gaussian_design(s[b][keep], w[b][keep])
        assert_optimal(np.asarray(theta[b]), X, y[b][keep], w[b][keep], C, 0.0, icpt)


def test_estimator_fit_batch_takes_the_sketch_path():
    s, y, w, mask = batch_data(seed=12)
    batch = GaussianCalibration().fit_batch(s, y, mask=mask, sample_weight=w)
    for b in range(3):
        one = GaussianCalibration().fit(s[b], y[b], sample_weight=np.where(mask[b], w[b], 0.0))
        np.testing.assert_allclose(
            np.asarray(batch.theta[b]), np.asarray(one.theta), rtol=1e-9, atol=LOOP_TOL
        )


def test_blocked_pass_equals_numpy(monkeypatch):
    """Several blocks with a shifted, partly masked last block: objective, gradient and
    Hessian equal direct NumPy sums."""
    n = 2500
    assert _newton._blocking(n) == (1, n)
    monkeypatch.setattr(_newton, "_SINGLE_BLOCK_ROWS", 1000)
    monkeypatch.setattr(_newton, "_BLOCK_ROWS", 700)
    assert _newton._blocking(n) == (4, 625)
    monkeypatch.setattr(_newton, "_BLOCK_ROWS", 1000)
    assert _newton._blocking(n) == (3, 834)  # last block starts at 1666, not 1668
    s, y, w = make_data("hump", seed=9, n=n)
    eta = np.array([0.3, -0.7, 0.2])
    Q = np.diag([0.5, 0.25, 0.0])

    @jax.jit
    def run(s, t, w, eta):
        prob = _newton._Problem(
            s,
            t,
            w,
            jnp.zeros(3),
            jnp.ones(3),
            jnp.sum(w),
            *(jnp.zeros((2, 3)),) * 2,
            jnp.asarray(Q),
            jnp.eye(3),
            jnp.eye(3),
            jnp.zeros(3),
        )
        phi = _newton._phi(lambda x, aux: jnp.stack([x * x, x, jnp.ones_like(x)], -1), None)
        return _newton._value_grad_hess(prob, phi, eta)

    f, g, H = run(*(jnp.asarray(a) for a in (s, y, w, eta)))
    X = np.column_stack([s**2, s, np.ones(n)])
    z = X @ eta
    p = 1 / (1 + np.exp(-z))
    np.testing.assert_allclose(
        float(f), np.sum(w * (np.logaddexp(0, z) - y * z)) + 0.5 * eta @ Q @ eta, rtol=PASS_RTOL
    )
    np.testing.assert_allclose(np.asarray(g), X.T @ (w * (p - y)) + Q @ eta, rtol=PASS_RTOL)
    np.testing.assert_allclose(
        np.asarray(H), X.T @ (X * (w * p * (1 - p))[:, None]) + Q, rtol=PASS_RTOL
    )


def test_blocked_solve_equals_scipy(monkeypatch):
    """A solve whose every data pass runs in several blocks (last one shifted)."""
    monkeypatch.setattr(_newton, "_SINGLE_BLOCK_ROWS", 1000)
    monkeypatch.setattr(_newton, "_BLOCK_ROWS", 1000)
    n = 2500
    s, y, w = make_data("hump", seed=10, n=n)
    fam = PlattScaling().family  # a hump: Platt's slope is free here
    ctx = fam.context(jnp.asarray(s), jnp.asarray(w))
    solve = functools.partial(
        _solver.solve, intercept=1, max_iter=100, tol=1e-18, features=fam.features
    )
    theta, status = jax.jit(solve)(
        jnp.asarray(s), jnp.asarray(y), jnp.asarray(w), fam.constraints(ctx), 0.0, aux=ctx
    )
    assert bool(status.converged)
    X = np.column_stack([s, np.ones(n)])
    assert_optimal(np.asarray(theta), X, y, w, np.array([[1.0, 0.0]]), 0.0, 1)


# --- eager validation: the fast paths keep every error ------------------------------------


def test_fit_input_fast_paths_keep_their_errors():
    s, y = np.array([0.1, 0.5, 0.9, 0.3]), np.array([0.0, 1.0, 1.0, 0.0])
    huge = np.array([1e308, 1e308, -1.0, 2.0])  # finite, but their sum overflows
    out = check_fit_inputs(huge, y)[0]
    np.testing.assert_array_equal(out, huge)
    with pytest.raises(ValueError, match=r"1 non-finite value\(s\) \(NaN\), first at index 2"):
        check_fit_inputs(np.array([0.1, 0.5, np.nan, 0.3]), y)
    with pytest.raises(ValueError, match="contain NaN; labels must be 0/1"):
        check_fit_inputs(s, np.array([0.0, np.nan, 1.0, 0.0]))
    with pytest.raises(ValueError, match=r"must be 0/1; got values \{0.5, 2.0\}"):
        check_fit_inputs(s, np.array([0.0, 2.0, 1.0, 0.5]))
    with pytest.raises(ValueError, match="1 negative value"):
        check_fit_inputs(s, y, np.array([1.0, 1.0, -0.5, 1.0]))
    bool_labels = check_fit_inputs(s, y.astype(bool))[1]
    np.testing.assert_array_equal(bool_labels, y)


def test_batch_input_fast_paths_keep_their_errors():
    s = np.array([[0.1, 0.5, 0.9, 0.3], [1e308, 1e308, 0.2, 0.4]])
    y = np.array([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 1.0, 0.0]])
    mask = np.array([[1, 1, 1, 0], [1, 1, 1, 1]], bool)
    junk = np.where(mask, s, np.nan)  # masked entries may hold anything
    w = np.where(mask, 1.0, -3.0)
    out_s, out_y, out_w, out_m = check_batch_inputs(
        junk, np.where(mask, y, 5.0), mask=mask, sample_weight=w
    )
    np.testing.assert_array_equal(out_s, np.where(mask, s, 0.0))
    np.testing.assert_array_equal(out_y, np.where(mask, y, 0.0))
    np.testing.assert_array_equal(out_w, mask.astype(float))
    np.testing.assert_array_equal(out_m, mask)
    out_s, _, out_w, out_m = check_batch_inputs(s, y)  # no mask: ones, all kept
    np.testing.assert_array_equal(out_s, s)
    assert out_w.min() == out_w.max() == 1.0 and out_m.all()
    with pytest.raises(ValueError, match=r"scores contain non-finite values \(first at \[0, 3\]\)"):
        check_batch_inputs(junk, y, mask=mask | True)
    with pytest.raises(ValueError, match=r"labels must be 0/1; got values \{5.0\}"):
        check_batch_inputs(s, np.where(mask, y, 5.0))
    with pytest.raises(ValueError, match="sample_weight must be non-negative"):
        check_batch_inputs(s, y, sample_weight=w)
    with pytest.raises(
        ValueError, match=r"sample_weight contain non-finite values \(first at \[1, 2\]\)"
    ):
        check_batch_inputs(s, y, sample_weight=np.where([[1, 1, 1, 1], [1, 1, 0, 1]], 1.0, np.inf))
    with pytest.raises(ValueError, match="problem 1: all training scores are equal"):
        GaussianCalibration().fit_batch(np.array([[0.1, 0.5, 0.9, 0.3], [2.0] * 4]), y)
