"""SplineCalibration against oracles: scipy's minimiser on the same penalised objective
(basis and penalty built independently from scipy.interpolate.BSpline), the defining
properties of a natural cubic spline, brute-force cross-validation, and simulated data with
a known calibration curve."""

import jax
import numpy as np
import pytest
from numpy.polynomial.legendre import leggauss
from scipy.interpolate import BSpline, CubicSpline
from scipy.optimize import minimize

import jaxcal
from jaxcal.calibrators._spline_core import natural_spline_basis, spline_logit
from jaxcal.fitting.folds import stratified_folds

RTOL64 = 1e-10


def _truth(s):
    return s + 0.6 * s**2 - 1.0  # a non-linear, non-monotone logit


def _data(n, seed=0, truth=_truth):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n)
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-truth(s)))).astype(float)
    return s, y


# ---------------------------------------------------------------- independent oracle
def _oracle_design(knots, u):
    """Natural cubic spline design (free B-spline coefficients, then differences) and the
    roughness penalty R^3 int f''^2, built from scipy's BSpline and Gauss-Legendre."""
    K = knots.size
    lo, R = knots[0], knots[-1] - knots[0]
    xi, x = (knots - lo) / R, (u - lo) / R
    t = np.r_[[xi[0]] * 3, xi, [xi[-1]] * 3]
    aL = (xi[1] - xi[0]) / (xi[2] - xi[0])
    aR = (xi[-1] - xi[-2]) / (xi[-1] - xi[-3])
    T = np.zeros((K + 2, K))
    T[0, 0] = T[K + 1, K - 1] = 1
    T[np.arange(2, K), np.arange(1, K - 1)] = 1
    T[1, :2] = 1 / (1 + aL), aL / (1 + aL)
    T[K, K - 2 : K] = aR / (1 + aR), 1 / (1 + aR)
    T = T @ np.tril(np.ones((K, K)))  # theta (differences) -> B-spline coefficients
    X = BSpline.design_matrix(np.clip(x, 0, 1), t, 3).toarray() @ T
    nodes, wq = leggauss(3)  # f''^2 is quadratic on each interval: exact
    pts = ((xi[:-1, None] + xi[1:, None]) + np.diff(xi)[:, None] * nodes) / 2
    wts = (np.diff(xi)[:, None] / 2 * wq).ravel()
    D2 = np.stack([BSpline(t, T[:, k], 3).derivative(2)(pts.ravel()) for k in range(K)], 1)
    return X, (D2 * wts[:, None]).T @ D2


def _oracle_fit(knots, u, t, w, lam, monotone=False):
    X, Omega = _oracle_design(knots, u)
    W = w.sum()

    def f(th):
        z = X @ th
        F = np.sum(w * (np.logaddexp(0, z) - t * z)) / W + 0.5 * lam * th @ Omega @ th
        g = X.T @ (w * (1 / (1 + np.exp(-z)) - t)) / W + lam * Omega @ th
        return F, g

    bounds = [(None, None)] + [(0, None) if monotone else (None, None)] * (knots.size - 1)
    opts = {"ftol": 1e-16, "gtol": 1e-11, "maxiter": 20000, "maxcor": 50}
    r = minimize(f, np.zeros(knots.size), jac=True, method="L-BFGS-B", bounds=bounds, options=opts)
    return r.x, f(r.x)[0]


# ------------------------------------------------------------------------------ basis
def test_basis_is_a_natural_cubic_spline():
    """Through its knot values it is scipy's natural CubicSpline; linear beyond the end
    knots; C2 at the knots (finite differences); it reproduces any line."""
    rng = np.random.default_rng(1)
    xi = np.r_[0.0, np.sort(rng.uniform(size=6)), 1.0]
    theta = rng.normal(size=xi.size)
    fj = jax.jit(spline_logit)  # knots and coefficients as arguments: no constant folding

    def f(x, theta=theta):  # one shape, one compile
        x = np.asarray(x, float)
        return np.asarray(fj(xi, theta, np.pad(x, (0, 2048 - x.size))))[: x.size]

    grid = np.linspace(0, 1, 2001)
    cs = CubicSpline(xi, f(xi), bc_type="natural")
    np.testing.assert_allclose(f(grid), cs(grid), atol=1e-12)
    for a, b in ((-3.0, 0.0), (1.0, 4.0)):  # linear outside: second differences vanish
        x = np.linspace(a, b, 7)
        np.testing.assert_allclose(np.diff(f(x), 2), 0, atol=1e-11)

    def one_sided(k, h, side):  # slope and curvature from one side, error O(h^2)
        v = f(k + side * h * np.arange(4))
        slope = side * (-11 * v[0] + 18 * v[1] - 9 * v[2] + 2 * v[3]) / (6 * h)
        return slope, (2 * v[0] - 5 * v[1] + 4 * v[2] - v[3]) / h**2

    h = 1e-5  # well below the knot spacing: each stencil stays on one piece
    for k in xi[1:-1]:  # value, slope and curvature agree from both sides of each knot
        (sl, cl), (sr, cr) = one_sided(k, h, -1), one_sided(k, h, 1)
        assert abs(sl - sr) < 1e-4 * (1 + abs(sl))
        assert abs(cl - cr) < 1e-2 * (1 + abs(cl))
        # a cubic with a kink (C0 only) would fail: the test has power
        assert abs(cl) + abs(cr) > 0
    # the spline through the knot values of a line is the line, with zero roughness
    basis = jax.jit(natural_spline_basis)(xi)
    slots = np.asarray(basis.slots)
    values = np.vstack([slots[: xi.size - 1, 0], slots[xi.size - 2, 1]])  # theta -> f(knots)
    line = np.linalg.solve(values, 0.3 + 2.0 * xi)
    np.testing.assert_allclose(f(grid, line), 0.3 + 2.0 * grid, atol=1e-10)
    assert abs(line @ np.asarray(basis.omega) @ line) < 1e-9


# ----------------------------------------------------------------- fit vs the oracle
@pytest.mark.parametrize("monotone", [False, True])
def test_fixed_penalty_fit_is_the_oracles_optimum(monotone):
    s, y = _data(600)
    lam = 1e-4
    cal = jaxcal.SplineCalibration(n_knots=8, penalties=[lam], monotone=monotone).fit(s, y)
    knots = np.asarray(cal.knots)
    theta, F = _oracle_fit(knots, s, y, np.ones_like(s), lam, monotone)
    X, Omega = _oracle_design(knots, s)
    th = np.asarray(cal.theta)
    z = X @ th
    ours = np.mean(np.logaddexp(0, z) - y * z) + 0.5 * lam * th @ Omega @ th
    assert ours <= F + 1e-13  # at least as low as scipy's optimum
    np.testing.assert_allclose(th, theta, atol=2e-5)  # L-BFGS-B's own accuracy
    np.testing.assert_allclose(np.asarray(cal.predict_logit(s)), z, rtol=RTOL64, atol=1e-12)
    assert bool(cal.status.converged) and float(cal.status.kkt_residual) < 1e-9
    if monotone:
        assert np.all(th[1:] >= 0) and bool(cal.is_monotone())
        assert np.any(th[1:] == 0)  # the truth dips: the constraint is active
        p = np.asarray(cal.predict(np.linspace(-6, 6, 501)))
        assert np.all(np.diff(p) >= 0)


def test_monotone_fit_equals_unconstrained_when_that_is_monotone():
    s, y = _data(600, truth=lambda s: 1.5 * s)
    kw = dict(n_knots=8, penalties=[1e-2])
    free = jaxcal.SplineCalibration(**kw).fit(s, y)
    assert bool(free.is_monotone())
    mono = jaxcal.SplineCalibration(monotone=True, **kw).fit(s, y)
    np.testing.assert_allclose(
        np.asarray(mono.theta), np.asarray(free.theta), rtol=1e-9, atol=1e-12
    )


def test_cross_validation_choice_is_brute_force():
    s, y = _data(300, seed=3)
    grid = [1e-6, 1e-4, 1e-2, 1.0]
    cal = jaxcal.SplineCalibration(n_knots=6, penalties=grid, n_folds=3).fit(s, y)
    folds = stratified_folds(y, 3)  # the deterministic folds (tests/fitting/test_folds.py)
    knots = np.asarray(cal.knots)
    X, _ = _oracle_design(knots, s)
    cv = []
    for lam in grid:
        loss = 0.0
        for f in range(3):
            tr = folds != f
            th, _ = _oracle_fit(knots, s[tr], y[tr], np.ones(tr.sum()), lam)
            z = X[~tr] @ th
            loss += np.sum(np.logaddexp(0, z) - y[~tr] * z)
        cv.append(loss / s.size)
    np.testing.assert_allclose(np.asarray(cal.cv_loss), cv, rtol=1e-7)
    assert float(cal.penalty) == grid[int(np.argmin(cv))]
    # the same folds on every fit: the same choice and losses
    again = jaxcal.SplineCalibration(n_knots=6, penalties=grid, n_folds=3).fit(s, y)
    np.testing.assert_array_equal(np.asarray(again.cv_loss), np.asarray(cal.cv_loss))


def test_recovers_a_known_calibration_curve():
    """The cross-validated penalty is the one of the best population log loss (computed
    from the known curve by quadrature over the score density) to within one grid step,
    and the fit follows the curve. Folds balanced in score would choose the smallest
    penalty here (``jaxcal.fitting.folds``): this checks that they are not."""
    s, y = _data(10_000, seed=5)
    grid = np.logspace(-8, 0, 9)
    cal = jaxcal.SplineCalibration(n_knots=12, penalties=grid, n_folds=3).fit(s, y)
    assert grid[0] < float(cal.penalty) < grid[-1]  # an interior choice: neither extreme
    # population log loss of the fit at each penalty: E_s[KL(truth || fit)] + const
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)  # s ~ N(0, 1)
    q = 1 / (1 + np.exp(-_truth(nodes)))
    population = []
    for lam in grid:
        z = np.asarray(
            jaxcal.SplineCalibration(n_knots=12, penalties=[lam]).fit(s, y).predict_logit(nodes)
        )
        population.append(weights @ (np.logaddexp(0, z) - q * z) / weights.sum())
    best = int(np.argmin(population))
    assert abs(int(np.flatnonzero(grid == float(cal.penalty))[0]) - best) <= 1, population
    grid = np.linspace(-2, 2, 81)
    p = np.asarray(cal.predict(grid))
    truth = 1 / (1 + np.exp(-_truth(grid)))
    assert np.max(np.abs(p - truth)) < 0.04
    # Platt scaling (a line in the score) cannot follow the curve
    platt = np.asarray(jaxcal.PlattScaling().fit(s, y).predict(grid))
    assert np.max(np.abs(platt - truth)) > 3 * np.max(np.abs(p - truth))


def test_logit_input_weights_ips_and_affine_invariance(tmp_path):
    s, y = _data(400, seed=2)
    kw = dict(n_knots=6, penalties=[1e-3])
    p = 1 / (1 + np.exp(-s))
    on_logit = jaxcal.SplineCalibration(on="logit", **kw).fit(p, y)
    on_score = jaxcal.SplineCalibration(**kw).fit(s, y)
    np.testing.assert_allclose(on_logit.predict(p[:50]), on_score.predict(s[:50]), rtol=1e-9)
    moved = jaxcal.SplineCalibration(**kw).fit(3 * s + 5, y)
    np.testing.assert_allclose(moved.predict(3 * s[:50] + 5), on_score.predict(s[:50]), rtol=1e-8)
    # integer sample weights are repeated rows
    reps = np.random.default_rng(0).integers(1, 4, size=s.size)
    weighted = jaxcal.SplineCalibration(**kw).fit(s, y, sample_weight=reps.astype(float))
    repeated = jaxcal.SplineCalibration(**kw).fit(np.repeat(s, reps), np.repeat(y, reps))
    np.testing.assert_allclose(weighted.predict(s), repeated.predict(s), rtol=1e-6)
    # IPS with propensity 1 is the naive loss
    ips = jaxcal.SplineCalibration(**kw).fit(s, y, propensity=np.ones_like(s), loss="ips")
    np.testing.assert_allclose(ips.predict(s), on_score.predict(s), rtol=1e-12)
    path = tmp_path / "spline.npz"
    on_logit.save(path)
    back = jaxcal.load(path)
    assert type(back) is type(on_logit) and back.on == "logit"
    np.testing.assert_array_equal(np.asarray(back.predict(p)), np.asarray(on_logit.predict(p)))


def test_new_size_in_bucket_and_new_penalties_compile_nothing(compiles):
    s, y = _data(700, seed=4)
    kw = dict(n_knots=6, n_folds=3)
    jaxcal.SplineCalibration(penalties=[1e-5, 1e-3], **kw).fit(s[:600], y[:600]).predict(s)
    with compiles() as c:
        cal = jaxcal.SplineCalibration(penalties=[1e-4, 1e-1], **kw).fit(s[:650], y[:650])
        cal.predict(s[:700])
    assert c.count == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_knots": 2}, "n_knots"),
        ({"n_knots": 5.5}, "n_knots"),
        ({"on": "probability"}, "on must be"),
        ({"monotone": "yes"}, "monotone"),
        ({"penalties": [1e-3, -1.0]}, "penalties"),
        ({"penalties": []}, "penalties"),
        ({"penalties": "abc"}, "penalties"),
        ({"n_folds": 1}, "n_folds"),
        ({"n_folds": True}, "n_folds"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": 0.0}, "tol"),
    ],
)
def test_bad_hyperparameters_raise_when_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        jaxcal.SplineCalibration(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "scores", "match"),
    [
        ({"on": "logit"}, "scores", r"\[0, 1\]"),
        ({}, "two", "distinct"),
        ({"n_folds": 5}, "few", "n_folds=5"),
    ],
)
def test_bad_input_raises_value_error(kwargs, scores, match):
    s, y = _data(60)
    w = None
    if scores == "two":
        s = np.where(s > 0, 1.0, 0.0)
    if scores == "few":  # 4 rows of positive weight for 5 folds
        w = np.zeros(60)
        w[[np.argmin(y), np.argmax(y), 10, 11]] = 1.0
    with pytest.raises(ValueError, match=match):
        jaxcal.SplineCalibration(**kwargs).fit(s, y, sample_weight=w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fitted_leaves_have_the_scores_dtype(dtype):
    """float32 scores give a float32 map (x64 is on in the tests) that is the float64 map
    to float32's accuracy; float64 scores a float64 map."""
    s, y = _data(400, seed=6)
    cal = jaxcal.SplineCalibration(n_knots=6, penalties=[1e-4, 1e-2], n_folds=3)
    fitted = cal.fit(s.astype(dtype), y)
    floats = {a.dtype for a in jax.tree.leaves(fitted) if a.dtype.kind == "f"}
    assert floats == {np.dtype(dtype)}
    ref = cal.fit(s, y)
    assert int(np.argmin(fitted.cv_loss)) == int(np.argmin(ref.cv_loss))  # the same choice
    grid = np.linspace(-2, 2, 21)
    # float32: the solver's float32 tolerance (1e-7 in units of the mean loss)
    tol = 1e-4 if dtype == np.float32 else 0.0
    np.testing.assert_allclose(np.asarray(fitted.predict(grid)), ref.predict(grid), atol=tol)
