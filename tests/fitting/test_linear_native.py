"""The compiled CPU kernel of the linear-logit fit (``jaxcal._native.linear_logit_cpu``)
against the pure-JAX solver (``jaxcal.fitting.solver``), the same method in other code.

Both stop when half the squared Newton decrement is below ``tol * sum(w)`` (``1e-18`` in
float64), which leaves each within about 1e-9 (relative) of the optimum, so the two agree to
1e-7 in the coefficients, not to rounding: the same steps summed in another order take a
different last step. The status must be the same (code, active set), the objective equal to
1e-12 and the multipliers close. The parametric calibrators' oracle tests (scipy, KKT
conditions, closed forms) run on this kernel wherever it is built, as ``fit`` uses it on a
CPU; these tests keep the pure-JAX solver's single fits covered as well.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np
import pytest

from jaxcal._native import linear_logit_cpu, linear_logit_cpu_available
from jaxcal.calibrators import (
    BetaCalibration,
    ExponentialCalibration,
    GammaCalibration,
    GaussianCalibration,
    PlattScaling,
    TemperatureScaling,
)
from jaxcal.fitting import linear, solver
from jaxcal.fitting.linear import default_tol, fit_linear
from jaxcal.fitting.solver import CONVERGED, DIVERGED

FAMILIES = {
    "platt": (PlattScaling, "real"),
    "temperature": (TemperatureScaling, "real"),
    "beta": (BetaCalibration, "unit"),
    "gaussian": (GaussianCalibration, "real"),
    "gamma": (GammaCalibration, "positive"),
    "exponential": (ExponentialCalibration, "positive"),
}


@pytest.fixture(autouse=True)
def _kernel():
    if not linear_logit_cpu_available():
        if os.environ.get("JAXCAL_REQUIRE_NATIVE") == "1":  # set by .ci/run
            raise RuntimeError("the compiled linear-logit kernel was not built (see setup.py)")
        pytest.skip("the compiled linear-logit kernel is not built here")


def _scores(rng, n, domain, y, direction):
    s = rng.normal(size=n) * rng.uniform(0.3, 2.0) + direction * rng.uniform(0.3, 1.5) * y
    if domain == "unit":
        return 1.0 / (1.0 + np.exp(-s))
    if domain == "positive":
        return np.exp(s)
    return s


def _problem(name, case, seed, dtype=np.float64):
    """A problem of family ``name``: ``case`` "plain" (a signal the map can follow), "reversed"
    (labels anti-correlated with the scores: the monotonicity constraints become active),
    "l2" (a penalty), "ips" (inverse-propensity targets, some above 1) or "unbounded" (IPS
    targets whose weighted sum exceeds the total weight: no minimiser)."""
    cls, domain = FAMILIES[name]
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 3000))
    y = (rng.random(n) < rng.uniform(0.2, 0.7)).astype(float)
    s = _scores(rng, n, domain, y, -1.0 if case == "reversed" else 1.0)
    w = rng.uniform(0.2, 2.0, n)
    t = y.copy()
    if case == "ips":
        propensity = rng.uniform(0.3, 1.0, n)
        t, w = y / propensity * rng.uniform(0.2, 0.9), np.ones(n)
    if case == "unbounded":
        t, w = y / rng.uniform(0.05, 0.2, n), np.ones(n)
    l2 = 3.0 if case == "l2" else 0.0
    tol = default_tol(dtype)
    arrays = (np.asarray(a, dtype) for a in (s, t, w))
    return cls().family, (*arrays, np.asarray(l2, dtype), np.int32(100), np.asarray(tol, dtype))


def _fit(family, args, *, native):
    before = os.environ.get("JAXCAL_NATIVE")
    os.environ["JAXCAL_NATIVE"] = "1" if native else "0"
    try:
        return jax.tree.map(np.asarray, fit_linear(family, *args))
    finally:
        if before is None:
            del os.environ["JAXCAL_NATIVE"]
        else:
            os.environ["JAXCAL_NATIVE"] = before


@pytest.mark.parametrize("case", ["plain", "reversed", "l2", "ips", "unbounded"])
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_kernel_equals_the_portable_solver(name, case):
    for seed in range(4):
        family, args = _problem(name, case, seed)
        theta, ctx, status = _fit(family, args, native=True)
        ref_theta, ref_ctx, ref = _fit(family, args, native=False)
        assert int(status.code) == int(ref.code), (seed, status, ref)
        np.testing.assert_array_equal(status.active, ref.active)
        np.testing.assert_array_equal(ctx.lo, ref_ctx.lo)
        if int(ref.code) == DIVERGED:
            continue  # no minimiser: each returns its last finite iterate
        assert int(ref.code) == CONVERGED
        scale = max(1.0, float(np.max(np.abs(ref_theta))))
        np.testing.assert_allclose(theta, ref_theta, rtol=0, atol=1e-7 * scale)
        np.testing.assert_allclose(status.objective, ref.objective, rtol=1e-12)
        W = float(np.sum(args[2]))
        np.testing.assert_allclose(status.multipliers, ref.multipliers, rtol=1e-6, atol=1e-9 * W)
        assert status.kkt_residual < 1e-6 * W and ref.kkt_residual < 1e-6 * W


def test_cases_reach_every_stage():
    """The problems above do exercise the constraints: some fits end with an active
    constraint (non-negative multipliers) and some IPS fits diverge."""
    active, diverged = 0, 0
    for name in FAMILIES:
        for case in ("reversed", "unbounded"):
            for seed in range(4):
                family, args = _problem(name, case, seed)
                _, _, status = _fit(family, args, native=True)
                active += bool(np.any(status.active))
                diverged += int(status.code) == DIVERGED
                if int(status.code) == CONVERGED:
                    assert np.all(status.multipliers >= -1e-9 * float(np.sum(args[2])))
    assert active >= 10 and diverged >= 10


def test_padding_is_exact():
    """Zero-weight rows (the size buckets' padding) change no sum: the same bits."""
    family, (s, t, w, *rest) = _problem("gamma", "plain", 3)
    pad = 1000
    padded = (np.r_[s, np.full(pad, 7.0)], np.r_[t, np.zeros(pad)], np.r_[w, np.zeros(pad)])
    a = _fit(family, (s, t, w, *rest), native=True)
    b = _fit(family, (*padded, *rest), native=True)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_float32_inputs():
    """float32 arrays: the kernel works in double precision inside and rounds the result;
    with float64's tolerance (float32's default, 1e-9, stops about 3e-5 from the optimum) it
    agrees with the float64 fit of the same (rounded) data to float32 precision."""
    for name in FAMILIES:
        family, args = _problem(name, "plain", 5, dtype=np.float32)
        args = (*args[:5], np.float32(1e-18))
        theta, _, status = _fit(family, args, native=True)
        assert theta.dtype == np.float32 and status.objective.dtype == np.float32
        wide = tuple(np.asarray(a, np.float64) for a in args[:4]) + (args[4], 1e-18)
        ref_theta, _, _ = _fit(family, wide, native=True)
        scale = max(1.0, float(np.max(np.abs(ref_theta))))
        # the float32 result is the float64 optimum rounded (a few ulps of float32)
        np.testing.assert_allclose(theta, ref_theta, rtol=0, atol=1e-6 * scale)


def test_fit_uses_the_kernel_on_cpu_and_not_when_turned_off(monkeypatch):
    """``fit`` on concrete CPU arrays compiles the kernel's program, not the solver's loops;
    ``JAXCAL_NATIVE=0`` and a caller's ``jit`` take the pure-JAX solver."""
    rng = np.random.default_rng(0)
    s = rng.normal(size=777)
    y = rng.random(777) < 1 / (1 + np.exp(-s))
    native, portable = linear._solve_native_jit, linear._solve_jit
    n0, p0 = native._cache_size(), portable._cache_size()
    PlattScaling().fit(s, y)
    assert native._cache_size() == n0 + 1 and portable._cache_size() == p0
    monkeypatch.setenv("JAXCAL_NATIVE", "0")
    PlattScaling().fit(s, y)
    assert portable._cache_size() == p0 + 1
    monkeypatch.delenv("JAXCAL_NATIVE")
    family, args = _problem("platt", "plain", 0)
    n1 = native._cache_size()
    traced = jax.jit(lambda *a: fit_linear(family, *a))(*args)
    assert native._cache_size() == n1  # the caller's trace ran the solver's loops
    eager = fit_linear(family, *args)
    np.testing.assert_allclose(traced[0], eager[0], rtol=0, atol=1e-7)


def test_families_beyond_the_kernel_sizes_run_the_solver_loops(monkeypatch):
    """A family with more coefficients or constraint rows than the kernel takes is solved by
    the pure-JAX solver inside the same program: the portable fit's result."""
    family, args = _problem("gaussian", "reversed", 11)
    args = tuple(a[:1234] if np.ndim(a) else a for a in args)  # a size no other test uses
    monkeypatch.setattr(linear, "_KERNEL_MAX_ROWS", 0)
    theta, _, status, retry = jax.tree.map(np.asarray, linear._solve_native_jit(family, *args))
    assert not retry
    ref_theta, _, ref = _fit(family, args, native=False)
    np.testing.assert_allclose(theta, ref_theta, rtol=1e-12, atol=1e-12)
    assert int(status.n_iter) == int(ref.n_iter) and np.any(status.active)


def _middle_positives(seed):
    """Scores and 0/1 labels: positives in the middle of the range, negatives at both ends."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 30))
    s = rng.normal(size=n) * 10 ** rng.uniform(-1, 1)
    y = (np.abs(s - np.median(s)) < np.std(s) * 0.5).astype(float)
    y[:2] = [0.0, 1.0]
    return s, y


@pytest.mark.parametrize(("name", "seed"), [("gaussian", 18), ("gamma", 51)])
def test_a_kernel_answer_that_fails_its_kkt_certificate_is_solved_again(name, seed):
    """Positives in the middle of the range and negatives at both ends: the unconstrained
    quadratic separates them, and the kernel, warm-started on a constraint's face at
    saturated logits, once stopped there on a negative Newton decrement and reported
    "converged" at an objective 1,000 times the optimum. ``fit`` now takes only a certified
    kernel answer: its result is the constrained optimum (the KKT conditions and scipy's
    SLSQP, on features re-derived in NumPy)."""
    from tests.calibrators.test_parametric import kkt_check, objective, oracle_design, scipy_fit

    s, y = _middle_positives(seed)
    n = s.size
    fitted = FAMILIES[name][0]().fit(s, y)
    assert int(fitted.status.code) == CONVERGED
    theta = np.asarray(fitted.theta)
    X, C, icpt = oracle_design(name, s, s.min(), s.max())
    kkt_check(theta, X, y, np.ones(n), C, 0.0, icpt)
    ref = scipy_fit(X, y, np.ones(n), C, 0.0, icpt)
    assert objective(theta, X, y, np.ones(n), 0.0, icpt) <= ref.fun * (1 + 1e-9)


@pytest.mark.parametrize(("name", "seed"), [("gaussian", 18), ("gamma", 51)])
def test_the_kernel_itself_rejects_a_negative_newton_decrement(name, seed):
    """The problems above, on the kernel alone (no second solve): at saturated logits a
    Newton decrement below ``-tol`` marks a numerically singular Hessian, no optimum, and
    the kernel's face search goes on from there as the pure-JAX solver's does. Its answer is
    certified (``retry`` false) and is the solver's optimum."""
    s, y = _middle_positives(seed)
    family = FAMILIES[name][0]().family
    tol = np.asarray(default_tol(np.float64))
    args = (s, y, np.ones(s.size), np.asarray(0.0), np.int32(100), tol)
    theta, _, status, retry = jax.tree.map(np.asarray, linear._solve_native_jit(family, *args))
    ref_theta, _, ref = _fit(family, args, native=False)
    assert not retry and int(status.code) == CONVERGED == int(ref.code)
    np.testing.assert_array_equal(status.active, ref.active)
    scale = max(1.0, float(np.max(np.abs(ref_theta))))
    np.testing.assert_allclose(theta, ref_theta, rtol=0, atol=1e-7 * scale)
    np.testing.assert_allclose(status.objective, ref.objective, rtol=1e-12)


def _entropy(t):
    """Binary cross-entropy of targets with themselves: the least log-loss of one point."""
    t = np.asarray(t, float)
    return float(-np.sum(t * np.log(t) + (1 - t) * np.log1p(-t)))


def _logit(t):
    return np.log(t) - np.log1p(-t)


# (scores, targets) -> (theta = (slope, intercept), slope constraint active)
TINY = {
    # one point: the slope's standardised feature is 0, the intercept fits the target
    "one point": (([0.7], [0.3]), ([0.0, _logit(0.3)], False)),
    # two points, increasing targets: the line through both logits
    "two points": (
        ([-1.0, 1.0], [0.2, 0.6]),
        ([(_logit(0.6) - _logit(0.2)) / 2, (_logit(0.6) + _logit(0.2)) / 2], False),
    ),
    # two points, decreasing labels: slope >= 0 binds, the intercept fits the mean 1/2
    "two points, constrained": (([-1.0, 1.0], [1.0, 0.0]), ([0.0, 0.0], True)),
}


def _platt_design(s):
    """Features ``[s, 1]`` and the constraint row ``slope >= 0``."""
    s = np.asarray(s, float)
    return np.stack([s, np.ones(s.size)], axis=1), np.array([[1.0, 0.0]])


def _kernel_fit(s, t):
    (X, C), t = _platt_design(s), np.asarray(t, float)
    fit = jax.jit(functools.partial(linear_logit_cpu, intercept=1))
    return jax.tree.map(np.asarray, fit(X, t, np.ones(t.size), C, 0.0, 1e-18, np.int32(100)))


def _solver_fit(s, t):
    (X, C), t = _platt_design(s), np.asarray(t, float)
    solve = jax.jit(functools.partial(solver.solve, intercept=1))
    theta, status = solve(X, t, np.ones(t.size), C, 0.0, max_iter=100, tol=1e-18)
    return np.asarray(theta), status


@pytest.mark.parametrize("case", sorted(TINY))
def test_kernel_on_one_and_two_rows_gives_the_closed_form(case):
    """A Platt design ``[s, 1]`` with ``slope >= 0`` on one or two rows: the kernel's theta,
    objective (the targets' entropy, or 2 log 2 where the constraint binds) and active set
    are the closed-form optimum's."""
    (s, t), (expected, active) = TINY[case]
    theta, info = _kernel_fit(s, t)
    assert info[0] == CONVERGED
    # tol = 1e-18 stops within about 1e-9 (relative) of the optimal objective: 1e-7 in theta
    np.testing.assert_allclose(theta, expected, rtol=0, atol=1e-7)
    least = 2 * np.log(2.0) if active else _entropy(t)
    np.testing.assert_allclose(info[2], least, rtol=1e-12)
    assert bool(info[4] > 0.5) == active
    if active:
        assert info[5] >= 0  # the multiplier of a binding constraint


def test_kernel_on_no_rows_returns_nan_not_a_fit():
    """No rows (total weight 0): no objective to minimise. The kernel reports "diverged"
    with NaN coefficients, as the pure-JAX solver does, never a plausible number."""
    theta, info = _kernel_fit([], [])
    ref_theta, ref = _solver_fit([], [])
    assert info[0] == int(ref.code) == DIVERGED
    assert np.all(np.isnan(theta)) and np.all(np.isnan(ref_theta))


@pytest.mark.parametrize("n", [1, 2])
def test_kernel_at_saturated_logits_stops_where_the_solver_stops(n):
    """Every target 1: no minimiser, the objective falls to 0 as the intercept grows. The
    kernel sums each row's loss as the solver does, ``log1p(exp(-|z|))`` on its label's
    side (``softplus(z) - z`` would cancel to 0 at z ~ 34 and stop Newton there), so both
    take the same steps: the same status, iterations and coefficients."""
    s = np.linspace(-1.0, 1.0, n)
    theta, info = _kernel_fit(s, np.ones(n))
    ref_theta, ref = _solver_fit(s, np.ones(n))
    assert info[0] == int(ref.code) == CONVERGED and info[1] == int(ref.n_iter)
    # the same steps, their sums rounded in another order (the old formula: 33.8 vs 40.8)
    np.testing.assert_allclose(theta, ref_theta, rtol=1e-9, atol=1e-12)
