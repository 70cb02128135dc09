"""Separable data: the parametric fits say that no finite fit exists, and every path returns
the same map.

With ``l2 = 0`` the weighted logistic loss of a monotone family has no minimiser exactly when
some feasible direction ``d`` (``C d >= 0``) makes the logits ``<= 0`` on the negatives,
``>= 0`` on the positives and not all 0. Oracles:

* that condition as a linear program (scipy's HiGHS), on features and constraint rows
  re-derived in NumPy (``test_parametric.oracle_design``);
* brute force over thresholds of the score (every distinct score, every midpoint, below and
  above the range; the score 0 for temperature scaling, which has no intercept);
* for the map returned: the KKT conditions of the objective plus the documented vanishing
  ridge, in NumPy (strictly convex, so the KKT point is the unique optimum), and scipy;
* near cases made non-separable by one label: scikit-learn / scipy on the plain objective.

Scores lie on a grid of quarters, so ties (the quasi-complete case) are common and no two
classes are separated by a rounding error.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize
from sklearn.linear_model import LogisticRegression

from jaxcal.calibrators.beta import BetaCalibration
from jaxcal.fitting import newton
from jaxcal.fitting.linear import separable, separable_ridge
from jaxcal.fitting.solver import (
    CONVERGED,
    SEPARABLE,
    ConvergenceWarning,
    SeparableDataWarning,
)
from tests.calibrators.test_parametric import (
    ESTIMATORS,
    FAMILIES,
    kkt_check,
    objective,
    oracle_design,
    scipy_fit,
)

N_MAX = 14  # every problem in the 32-row size bucket: one program per family and path
MAP_ATOL = 1e-9  # one unique optimum reached by two paths, each to the solver's tolerance
EPS64 = separable_ridge(np.float64)


def grid_problem(seed, *, kind, name=None):
    """Scores on a grid of quarters (ties), labels and weights (some zero). ``kind``:
    ``"separable"`` (labels a threshold of the score, mixed at a tied threshold),
    ``"near"`` (those labels with the two end points' swapped: a positive at the lowest
    score, a negative at the highest, so no threshold and no monotone map separates them)
    or ``"random"``. Temperature scaling (``name``) has no intercept: its threshold is 0."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, N_MAX + 1))
    s = rng.integers(-8, 9, n) / 4.0
    s[:2] = [-2.0, 2.0]  # a spread
    w = rng.uniform(0.3, 2.0, n)
    w[rng.uniform(size=n) < 0.15] = 0.0
    w[:2] = 1.0
    if kind == "random":
        y = (rng.uniform(size=n) < 0.5).astype(float)
    else:
        c = rng.choice(np.unique(s)[1:-1]) if np.unique(s).size > 2 else 0.0
        c = 0.0 if name == "temperature" else c
        y = (s > c).astype(float)
        at = s == c
        y[at] = rng.uniform(size=int(at.sum())) < 0.5  # quasi-complete: mixed at c
    y[:2] = [1.0, 0.0] if kind == "near" else [0.0, 1.0]  # both classes
    return s, y, w


def separating_thresholds(s, y, w, *, temperature):
    """Brute force: the thresholds ``c`` with every negative at or below it, every positive
    at or above it and some score off it (``c = 0`` without an intercept), among every
    distinct score, every midpoint, and points below and above the range."""
    s, y = s[w > 0], y[w > 0]
    u = np.unique(s)
    if temperature:
        candidates = np.array([0.0])
    else:
        candidates = np.r_[u, 0.5 * (u[1:] + u[:-1]), u[0] - 1, u[-1] + 1]
    return [
        c
        for c in candidates
        if np.all(s[y == 0] <= c) and np.all(s[y == 1] >= c) and np.any(s != c)
    ]


def threshold_separable(s, y, w, *, temperature):
    return bool(separating_thresholds(s, y, w, temperature=temperature))


def infimum(s, y, w, *, temperature):
    """The infimum of the plain objective on separable data: 0 away from the threshold,
    and at it the tied rows' best constant (logit 0 without an intercept), minimised over
    the separating thresholds."""

    def at(c):
        tied = (s == c) & (w > 0)
        W, p = w[tied].sum(), (w * y)[tied].sum() / max(w[tied].sum(), 1e-300)
        if temperature:
            return W * np.log(2.0)
        return -W * sum(q * np.log(q) for q in (p, 1 - p) if q > 0)

    return min(at(c) for c in separating_thresholds(s, y, w, temperature=temperature))


def lp_separable(X, C, y, w):
    """A feasible direction ``d`` (``C d >= 0``) with logits ``<= 0`` on the negatives,
    ``>= 0`` on the positives and a positive total margin: a linear program."""
    X, y = X[w > 0], y[w > 0]
    sign = np.where(y == 1, 1.0, -1.0)
    A_ub = np.vstack([-C, -(sign[:, None] * X), -(sign @ X)[None, :]])
    b_ub = np.r_[np.zeros(C.shape[0] + X.shape[0]), -1.0]
    res = optimize.linprog(
        np.zeros(X.shape[1]), A_ub=A_ub, b_ub=b_ub, bounds=[(None, None)] * X.shape[1]
    )
    assert res.status in (0, 2), res.message  # solved, or proven infeasible
    return res.status == 0


def padded(*arrays):
    """The arrays padded to ``N_MAX`` entries (zero weight on the padding: the same fit), so
    that one traced program serves every problem."""
    s, y, w = arrays
    extra = N_MAX - s.size
    return np.pad(s, (0, extra), mode="edge"), np.pad(y, (0, extra)), np.pad(w, (0, extra))


def fit_recorded(fit):
    """``fit()`` and the categories of the warnings it emitted."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fitted = fit()
    return fitted, [w.category for w in caught]


@pytest.mark.parametrize("name", FAMILIES)
def test_status_says_separable_exactly_when_the_oracles_do(name):
    """Over separable, near and random problems: ``SEPARABLE`` (and one
    SeparableDataWarning, no ConvergenceWarning) iff the linear program and the brute force
    over thresholds find a separating direction; otherwise ``CONVERGED`` and no warning."""
    cal = ESTIMATORS[name]()
    pure_code = jax.jit(lambda s, y, w: cal.fit(s, y, sample_weight=w).status.code)
    seen = set()
    for seed in range(24):
        kind = ("separable", "near", "random")[seed % 3]
        s, y, w = grid_problem(seed, kind=kind, name=name)
        X, C, _ = oracle_design(name, s, s[w > 0].min(), s[w > 0].max())
        expected = lp_separable(X, C, y, w)
        assert expected == threshold_separable(s, y, w, temperature=name == "temperature")
        fitted, caught = fit_recorded(lambda s=s, y=y, w=w: cal.fit(s, y, sample_weight=w))
        code = int(fitted.status.code)
        assert code == (SEPARABLE if expected else CONVERGED), (seed, kind, code)
        assert caught == ([SeparableDataWarning] if expected else []), (seed, caught)
        assert bool(fitted.status.converged) == (not expected)
        assert int(pure_code(*padded(s, y, w))) == code  # the pure fit reports it too
        seen.add(expected)
    assert seen == {True, False}


@pytest.mark.parametrize("name", FAMILIES)
def test_batch_single_and_pure_fits_of_separable_data_are_one_map(name):
    """Ragged batches of separable problems: each row of ``fit_batch`` predicts what the
    single ``fit`` predicts (the compiled kernel's path) and what the pure fit predicts,
    inside and beyond the training range; the batch warns once, naming how many."""
    cal = ESTIMATORS[name]()
    problems = [grid_problem(seed, kind="separable", name=name) for seed in range(0, 15, 3)]
    n = max(p[0].size for p in problems)
    S, Y, W = (np.zeros((len(problems), n)) for _ in range(3))
    mask = np.zeros((len(problems), n), bool)
    for b, (s, y, w) in enumerate(problems):
        S[b, : s.size], Y[b, : s.size], W[b, : s.size], mask[b, : s.size] = s, y, w, True
    batch, caught = fit_recorded(lambda: cal.fit_batch(S, Y, mask=mask, sample_weight=W))
    assert caught == [SeparableDataWarning]
    np.testing.assert_array_equal(np.asarray(batch.status.code), SEPARABLE)
    grid = np.linspace(-3.0, 3.0, 61)
    rows = np.asarray(batch.predict(np.broadcast_to(grid, (len(problems), grid.size))))
    pure = jax.jit(lambda s, y, w: cal.fit(s, y, sample_weight=w).predict(grid))
    for b, (s, y, w) in enumerate(problems):
        single, caught = fit_recorded(lambda s=s, y=y, w=w: cal.fit(s, y, sample_weight=w))
        assert caught == [SeparableDataWarning]
        p = np.asarray(single.predict(grid))
        np.testing.assert_allclose(rows[b], p, rtol=0, atol=MAP_ATOL, err_msg=str(b))
        p_pure = np.asarray(pure(*padded(s, y, w)))
        np.testing.assert_allclose(p_pure, p, rtol=0, atol=MAP_ATOL, err_msg=str(b))


def _twelve_points(seed):
    """The fuzz case: twelve normal scores, labels a threshold of them."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=12) * 10 ** rng.uniform(-2, 2)
    y = np.zeros(12)
    y[np.argsort(s)[int(rng.integers(1, 12)) :]] = 1.0
    return s, y


@pytest.mark.parametrize("seed", [9, 20, 28, 50, 57])
def test_gaussian_twelve_point_row_predicts_as_its_single_fit(seed):
    """The twelve-point separable rows on which ``fit_batch`` once predicted 1.0 where
    ``fit`` predicted 0.001 (a Newton loop that stopped on a negative decrement, and two
    solvers that stopped at different points of a path to infinity): now one map, a
    near-step that puts each training point on its side."""
    s, y = _twelve_points(seed)
    cal = ESTIMATORS["gaussian"]()
    with pytest.warns(SeparableDataWarning):
        single = cal.fit(s, y)
    with pytest.warns(SeparableDataWarning):
        batch = cal.fit_batch(s[None], y[None])
    grid = np.linspace(s.min() - 1, s.max() + 1, 400)
    p1, p2 = np.asarray(single.predict(grid)), np.asarray(batch.predict(grid[None]))[0]
    np.testing.assert_allclose(p2, p1, rtol=0, atol=MAP_ATOL)
    fitted = np.asarray(single.predict(s))
    assert np.all(np.where(y == 1, fitted > 0.5, fitted < 0.5))


def _ridge_weights(X, w, icpt):
    """The documented ridge ``eps W sd_j^2`` per slope (weighted, centred with an
    intercept), from the NumPy features."""
    W = w.sum()
    centre = (w @ X) / W if icpt is not None else np.zeros(X.shape[1])
    sd2 = (w @ (X - centre) ** 2) / W
    pen = EPS64 * W * sd2
    if icpt is not None:
        pen[icpt] = 0.0
    return pen


@pytest.mark.parametrize("name", FAMILIES)
def test_separable_map_is_the_unique_optimum_with_the_vanishing_ridge(name):
    """The map returned for separable data satisfies the KKT conditions of the objective
    plus the documented ridge (NumPy gradient; strictly convex, so it is the optimum), the
    objective it reports is that one, and it lies just above the infimum of the plain
    objective (brute force over thresholds), which scipy approaches too."""
    for seed in (0, 3, 6):
        s, y, w = grid_problem(seed, kind="separable", name=name)
        with pytest.warns(SeparableDataWarning):
            fitted = ESTIMATORS[name]().fit(s, y, sample_weight=w)
        theta = np.asarray(fitted.theta)
        X, C, icpt = oracle_design(name, s, s[w > 0].min(), s[w > 0].max())
        pen = _ridge_weights(X, w, icpt)
        kkt_check(theta, X, y, w, C, pen, icpt)
        ours = objective(theta, X, y, w, 0.0, icpt) + 0.5 * np.sum(pen * theta**2)
        np.testing.assert_allclose(float(fitted.status.objective), ours, rtol=1e-9)
        low = infimum(s, y, w, temperature=name == "temperature")
        plain = objective(theta, X, y, w, 0.0, icpt)
        assert low < plain < ours < low + 1e-2 * np.sum(w)  # a near-step, at a small cost
        ref = scipy_fit(X, y, w, C, 0.0, icpt)  # a finite point: above the infimum too
        assert ref.fun > low


@pytest.mark.parametrize("name", FAMILIES)
def test_near_separable_problems_equal_the_scipy_optimum_without_warning(name):
    """One label across the threshold: a finite optimum exists; the fit converges with no
    warning, passes the KKT check of the plain objective, and is no worse than scipy."""
    cal = ESTIMATORS[name]()
    for seed in (1, 4, 7):
        s, y, w = grid_problem(seed, kind="near", name=name)
        fitted, caught = fit_recorded(lambda s=s, y=y, w=w: cal.fit(s, y, sample_weight=w))
        assert caught == [] and int(fitted.status.code) == CONVERGED
        theta = np.asarray(fitted.theta)
        X, C, icpt = oracle_design(name, s, s[w > 0].min(), s[w > 0].max())
        kkt_check(theta, X, y, w, C, 0.0, icpt)
        ref = scipy_fit(X, y, w, C, 0.0, icpt)
        assert objective(theta, X, y, w, 0.0, icpt) <= ref.fun * (1 + 1e-9)


def test_near_separable_platt_equals_scikit_learn():
    """Platt scaling on a near case against scikit-learn's unpenalised logistic regression
    (lbfgs to a gradient tolerance of 1e-12; the coefficients are large, so compared
    relatively)."""
    s, y, w = grid_problem(1, kind="near")
    fitted = ESTIMATORS["platt"]().fit(s, y, sample_weight=w)
    ref = LogisticRegression(C=np.inf, tol=1e-12, max_iter=100_000)
    ref.fit(s[:, None], y, sample_weight=w)
    np.testing.assert_allclose(
        [float(fitted.a), float(fitted.b)], [ref.coef_[0, 0], ref.intercept_[0]], rtol=1e-5
    )  # lbfgs's own stopping error (~1e-6 relative), not the Newton fit's


@pytest.mark.parametrize("name", FAMILIES)
def test_penalised_fits_of_separable_data_have_an_optimum(name):
    """With ``l2 > 0`` the objective is coercive in the slopes: no SEPARABLE status, no
    warning, and the plain KKT conditions hold."""
    s, y, w = grid_problem(0, kind="separable", name=name)
    fitted, caught = fit_recorded(lambda: ESTIMATORS[name](l2=0.5).fit(s, y, sample_weight=w))
    assert caught == [] and int(fitted.status.code) == CONVERGED
    X, C, icpt = oracle_design(name, s, s[w > 0].min(), s[w > 0].max())
    kkt_check(np.asarray(fitted.theta), X, y, w, C, 0.5, icpt)


def test_criterion_edge_cases():
    """``separable`` directly: quasi-complete ties, targets above 1 (IPS: left to the
    divergence check), soft targets at the threshold, and probabilities that beta
    calibration clips to one value (the same point, whatever their order)."""
    fam = ESTIMATORS["platt"]().family
    s = jnp.array([0.0, 1.0, 1.0, 2.0])
    ones = jnp.ones(4)

    def sep(family, s, t, w=None):
        w = jnp.ones(s.shape[0]) if w is None else w
        return bool(separable(family, s, t, w, family.context(s, w)))

    assert sep(fam, s, jnp.array([0.0, 0.0, 1.0, 1.0]))  # mixed at the threshold 1
    assert not sep(fam, s, jnp.array([1.0, 0.0, 0.0, 1.0]), ones)  # a positive below
    assert not sep(fam, s, jnp.array([0.0, 0.0, 1.0, 2.0]))  # IPS target 2
    assert sep(fam, s, jnp.array([0.0, 0.5, 0.5, 1.0]))  # soft targets on the threshold
    assert sep(fam, s, jnp.array([0.0, 0.5, 1.0, 1.0]))  # ... next to a positive there
    assert not sep(fam, s, jnp.array([0.5, 0.0, 1.0, 1.0]))  # a soft target below a negative
    zero_w = jnp.array([0.0, 1.0, 1.0, 1.0])  # the stray positive has no weight
    assert sep(fam, s, jnp.array([1.0, 0.0, 1.0, 1.0]), zero_w)
    temp = ESTIMATORS["temperature"]().family
    assert sep(temp, jnp.array([-1.0, 0.0, 2.0]), jnp.array([0.0, 1.0, 1.0]))
    assert not sep(temp, jnp.array([1.0, 2.0, 3.0]), jnp.array([0.0, 1.0, 1.0]))  # c = 0
    beta = BetaCalibration(rescale="none").family
    p = jnp.array([1e-30, 1e-20, 0.5, 0.6])  # the first two clip to eps: one point
    assert sep(beta, p, jnp.array([1.0, 0.0, 1.0, 1.0]))


def test_newton_does_not_converge_on_a_negative_decrement():
    """Newton on a face, started at a saturated point (the unconstrained iterate of a
    separable problem, projected): the Hessian underflows, the computed decrement is
    negative and large, and the loop must fail there (before: "converged" at n_iter 0 with
    the objective 165, a wrong map). From the intercept-only start it makes progress."""
    fam = ESTIMATORS["gaussian"]().family
    rng = np.random.default_rng(0)
    s = jnp.asarray(np.sort(rng.normal(size=12)))
    y = jnp.asarray((np.arange(12) >= 6).astype(float))
    w = jnp.ones(12)
    ctx = fam.context(s, w)
    phi = newton._phi(fam.features, ctx)
    prob, _ = newton._setup(s, y, w, fam.constraints(ctx), 0.0, 2, phi, 1)
    free = newton._newton(prob, phi, jnp.zeros(2, bool), 100, 1e-18)
    face = jnp.array([True, False])
    warm = newton._newton(prob._replace(eta0=free.eta), phi, face, 100, 1e-18)
    assert int(warm.code) != CONVERGED
    f0 = float(newton._value_grad_hess(prob, phi, newton._projector(prob.C, face) @ free.eta)[0])
    assert f0 > 100  # the saturated start is far from the infimum 0
    cold = newton._newton(prob, phi, face, 100, 1e-18)
    assert float(cold.objective) < 1e-6


def test_float32_batch_and_single_agree():
    """x64 off: the ridge is sqrt(eps) of float32; batch and single fits are one map to
    float32 rounding (a few ulps of the probabilities)."""
    s, y = _twelve_points(50)
    cal = ESTIMATORS["platt"]()
    grid = np.linspace(s.min(), s.max(), 50)
    with jax.enable_x64(False):
        with pytest.warns(SeparableDataWarning):
            p1 = np.asarray(cal.fit(s, y).predict(grid))
        with pytest.warns(SeparableDataWarning):
            p2 = np.asarray(cal.fit_batch(s[None], y[None]).predict(grid[None]))[0]
    assert p1.dtype == np.float32
    np.testing.assert_allclose(p2, p1, rtol=0, atol=1e-5)


def test_unbounded_ips_is_still_divergence_not_separation():
    """Targets above 1 whose weighted sum exceeds the total weight: the objective is
    unbounded below, a ConvergenceWarning (DIVERGED), never SEPARABLE."""
    s, y, w = grid_problem(0, kind="separable")
    omega = np.full(s.size, 0.05)
    with pytest.warns(ConvergenceWarning):
        fitted = ESTIMATORS["platt"]().fit(s, y, propensity=omega, loss="ips")
    assert int(fitted.status.code) not in (CONVERGED, SEPARABLE)


@pytest.mark.parametrize("name", FAMILIES)
def test_separable_map_does_not_depend_on_the_units_of_the_scores(name):
    """The ridge acts on standardised slopes: fits of ``s * 2**k * 3`` predict at
    transformed points what the fit of ``s`` predicts, and so do fits of ``s + 7`` for the
    families whose features move by constants under a shift (not temperature scaling, which
    has no intercept, nor the Gaussian family, whose ``s**2`` takes up a multiple of ``s``)."""
    cal = ESTIMATORS[name]()
    s, y, w = grid_problem(2, kind="separable", name=name)
    grid = np.linspace(-2.5, 2.5, 41)
    with pytest.warns(SeparableDataWarning):
        base = np.asarray(cal.fit(s, y, sample_weight=w).predict(grid))
    maps = [lambda x: x * 3.0 * 2.0**40, lambda x: x * 3.0 * 2.0**-40]
    if name not in ("temperature", "gaussian"):
        maps.append(lambda x: x + 7.0)
    for f in maps:
        with pytest.warns(SeparableDataWarning):
            got = np.asarray(cal.fit(f(s), y, sample_weight=w).predict(f(grid)))
        np.testing.assert_allclose(got, base, rtol=0, atol=MAP_ATOL)


# the four kinds of map (exponential is Platt's on shifted scores, Gamma has the Gaussian's
# two end-point constraints); each compiles its own differentiated program
@pytest.mark.parametrize("name", ["platt", "temperature", "gaussian", "beta"])
def test_derivative_of_a_separable_fit_is_that_of_its_unique_map(name):
    """``jvp`` / ``grad`` of the separable map in the scores (implicit differentiation at
    the KKT point of the objective plus the ridge, whose strength moves with the scores'
    spread) against central finite differences of the eager fit."""
    from tests._composition import assert_jvp_matches_fd

    s, y, w = grid_problem(3, kind="separable", name=name)
    s = s + np.random.default_rng(0).normal(size=s.size) * 0.01  # no ties: differentiable
    cal = ESTIMATORS[name]()
    grid = np.linspace(-2.0, 2.0, 9)
    v = np.random.default_rng(1).normal(size=s.size)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SeparableDataWarning)  # the eager fits of the FD
        assert_jvp_matches_fd(lambda x: cal.fit(x, y, sample_weight=w).predict(grid), s, v)
