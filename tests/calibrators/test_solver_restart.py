"""A well-posed constrained fit whose unconstrained problem has no minimiser.

Twelve scores whose two positives sit just below the top score, a negative: a concave
quadratic logit separates the classes, so the unconstrained Gaussian fit runs off to
infinity, but a map that is non-decreasing on the range cannot, and the constrained problem
has a unique optimum (with the derivative at the top score active). Warm-started from the
runaway unconstrained iterate, Newton on that face saturated and diverged (one of the 200
per-field fits of docs/parametric.md); the solver now runs such a face once more from the
intercept-only start.

Oracle: scipy SLSQP on the same objective and constraints, written here in NumPy, and the
KKT conditions (stationarity, feasibility, multipliers >= 0).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

from jaxcal.calibrators.gaussian import GaussianCalibration
from jaxcal.fitting.linear import fit_linear

S = np.array(
    [-2.167, -1.239, -1.088, -1.069, -1.056, -0.918, 0.328, 0.461, 0.735, 1.264, 1.577, 2.584]
)
Y = np.array([0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 0], float)


def _objective(theta, s, y):
    z = theta[0] * s**2 + theta[1] * s + theta[2]
    return np.sum(np.logaddexp(0.0, z) - y * z)


def _constraints(s):
    lo, hi = s.min(), s.max()
    return np.array([[2 * lo, 1.0, 0.0], [2 * hi, 1.0, 0.0]])  # slope at both ends >= 0


def scipy_optimum(s, y):
    C = _constraints(s)
    res = optimize.minimize(
        _objective, np.zeros(3), args=(s, y), method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda th: C @ th, "jac": lambda th: C}],
        options={"ftol": 1e-14, "maxiter": 1000},
    )  # fmt: skip
    assert res.success, res.message
    return res.x, res.fun


def assert_optimal(theta, s, y):
    theta = np.asarray(theta, float)
    ref, ref_f = scipy_optimum(s, y)
    f = _objective(theta, s, y)
    assert f <= ref_f * (1 + 1e-9), (f, ref_f)  # at least as good as scipy
    np.testing.assert_allclose(theta, ref, rtol=1e-4, atol=1e-4)  # the optimum is unique
    # KKT: grad = C_S^T mu, mu >= 0, on the active rows
    C = _constraints(s)
    X = np.column_stack([s**2, s, np.ones_like(s)])
    grad = X.T @ (1 / (1 + np.exp(-(X @ theta))) - y)
    slack = C @ theta
    assert np.all(slack >= -1e-9)
    active = np.abs(slack) < 1e-7
    assert active.tolist() == [False, True]
    mu = np.linalg.lstsq(C[active].T, grad, rcond=None)[0]
    assert np.all(mu >= 0)
    np.testing.assert_allclose(grad, C[active].T @ mu, atol=1e-7)


@pytest.mark.parametrize("order", ["sorted", "reversed"])
def test_fit_converges_to_the_constrained_optimum(order):
    s, y = (S, Y) if order == "sorted" else (S[::-1].copy(), Y[::-1].copy())
    fitted = GaussianCalibration().fit(s, y)  # no ConvergenceWarning (an error in the tests)
    assert bool(fitted.status.converged)
    assert np.asarray(fitted.status.active).tolist() == [False, True]
    assert_optimal(fitted.theta, s, y)


def test_lockstep_batch_converges_next_to_an_ordinary_problem():
    """In a lock-step batch (``vmap``, the accelerator default) the restart is per problem;
    docs/parametric.md's per-field example covers the CPU default (one after another)."""
    rng = np.random.default_rng(0)
    s2 = rng.normal(size=S.size)
    y2 = (rng.uniform(size=S.size) < 1 / (1 + np.exp(-2 * s2))).astype(float)
    y2[:2] = [0.0, 1.0]
    s, y = np.stack([S, s2]), np.stack([Y, y2])
    theta, _, status = fit_linear(
        GaussianCalibration().family,
        jnp.asarray(s),
        jnp.asarray(y),
        jnp.ones_like(jnp.asarray(y)),
        jnp.asarray(0.0),
        jnp.asarray(100),
        jnp.asarray(1e-18),
        lockstep=True,
    )
    assert np.asarray(status.converged).all()
    assert_optimal(theta[0], S, Y)
    one = GaussianCalibration().fit(s2, y2)
    np.testing.assert_allclose(np.asarray(theta[1]), np.asarray(one.theta), rtol=1e-9, atol=1e-10)
