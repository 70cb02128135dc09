"""Oracle tests of the CMTRF core: ALS half-steps (numpy closed form, scipy), the exact
transform step (scipy SLSQP on the same constrained problem), k-means (scikit-learn) and the
inverse transform (numpy interpolation)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import minimize

from jaxcal.recsys import _cmtrf_core as core

# jitted once per test module: eager calls would compile every small operation
half_step = jax.jit(core.half_step, static_argnames=("loss", "n_newton"))
half_step_dense = jax.jit(core.half_step_dense, static_argnames=("loss", "n_newton"))
transform_step = jax.jit(core.transform_step, static_argnames=("loss", "anchor"))
kmeans_plus_plus = jax.jit(core.kmeans_plus_plus, static_argnums=3)

TOL = 1e-8  # float64 closed forms
OPT_TOL = 1e-5  # against scipy's iterative optimisers


def _pairs(rows, cols, levels):
    order = np.lexsort((cols, rows))
    return core.Pairs(
        jnp.asarray(rows[order], jnp.int32),
        jnp.asarray(cols[order], jnp.int32),
        jnp.asarray(levels[order], jnp.int32),
        jnp.ones(rows.size),
    )


def _random_half_problem(seed, n_rows=6, n_cols=9, k=3):
    rng = np.random.default_rng(seed)
    mask = rng.random((n_rows, n_cols)) < 0.6
    mask[0, :2] = True
    rows, cols = np.nonzero(mask)
    feats_other = rng.normal(size=(n_cols, k)) * 0.5
    target = rng.uniform(0.5, 4.0, rows.size)
    offset = rng.normal(size=rows.size) * 0.1
    pairs = _pairs(rows, cols, np.zeros(rows.size, int))
    order = np.lexsort((cols, rows))
    return pairs, feats_other, target[order], offset[order], rows[order], cols[order]


@pytest.mark.parametrize("seed", [0, 1])
def test_half_step_squared_is_the_ridge_closed_form(seed):
    pairs, other, target, offset, rows, cols = _random_half_problem(seed)
    l2 = 0.7
    feats = jnp.asarray(other[cols])
    x0 = jnp.zeros((6, 3))
    got = half_step(x0, feats, jnp.asarray(offset), jnp.asarray(target), pairs, l2, loss="squared")
    for n in range(6):
        f = other[cols[rows == n]]
        t = target[rows == n] - offset[rows == n]
        want = np.linalg.solve(f.T @ f + l2 * np.eye(3), f.T @ t)  # lambda not scaled by count
        np.testing.assert_allclose(got[n], want, rtol=TOL, atol=TOL)


def test_half_step_poisson_matches_scipy():
    pairs, other, target, offset, rows, cols = _random_half_problem(2)
    l2 = 0.5
    feats = jnp.asarray(other[cols])
    got = half_step(
        jnp.zeros((6, 3)),
        feats,
        jnp.asarray(offset),
        jnp.asarray(target),
        pairs,
        l2,
        loss="poisson",
        n_newton=20,
    )
    for n in range(6):
        f, t, o = other[cols[rows == n]], target[rows == n], offset[rows == n]

        def objective(x, f=f, t=t, o=o):
            theta = f @ x + o
            return np.sum(np.exp(theta) - t * theta) + 0.5 * l2 * x @ x

        def gradient(x, f=f, t=t, o=o):
            return f.T @ (np.exp(f @ x + o) - t) + l2 * x

        ref = minimize(objective, np.zeros(3), jac=gradient, method="BFGS", options={"gtol": 1e-12})
        np.testing.assert_allclose(got[n], ref.x, atol=OPT_TOL)
        assert np.linalg.norm(gradient(np.asarray(got[n]))) < 1e-9  # Newton: stationary


def _transform_objective(z, count, total, loss):
    return float(np.sum(count * np.asarray(core.phi(jnp.asarray(z), loss)) - z * total))


def _slsqp(count, total, eps, loss, anchor):
    n_levels = count.size
    cons = [
        {"type": "ineq", "fun": lambda z, r=r: z[r + 1] - z[r] - eps} for r in range(n_levels - 1)
    ]
    start = 1.0 + np.arange(n_levels) * max(1.0, eps)
    if anchor:
        cons += [
            {"type": "eq", "fun": lambda z: z[0] - 1.0},
            {"type": "eq", "fun": lambda z: z[-1] - n_levels},
        ]
    bounds = [(1e-9, None)] * n_levels if loss == "poisson" else None
    res = minimize(
        lambda z: _transform_objective(z, count, total, loss),
        start,
        method="SLSQP",
        constraints=cons,
        bounds=bounds,
        options={"ftol": 1e-14, "maxiter": 500},
    )
    return res.x


@pytest.mark.parametrize("loss", ["squared", "poisson"])
@pytest.mark.parametrize("anchor", [True, False])
def test_transform_step_matches_slsqp(loss, anchor):
    rng = np.random.default_rng(3)
    n_levels, eps = 5, 0.5
    cases = []
    for _ in range(6):
        count = rng.integers(0, 6, n_levels).astype(float)
        count[rng.integers(0, n_levels)] = 0.0  # at least one missing level
        count[rng.integers(0, n_levels)] += 1.0
        means = (
            rng.uniform(0.0, 1.8, n_levels) if loss == "poisson" else rng.normal(3, 1.5, n_levels)
        )
        cases.append((count, count * means))
    count = np.stack([c for c, _ in cases])
    total = np.stack([t for _, t in cases])
    z = np.asarray(
        transform_step(jnp.asarray(count), jnp.asarray(total), eps, loss=loss, anchor=anchor)
    )
    for g in range(len(cases)):
        assert np.all(np.diff(z[g]) >= eps - 1e-12), z[g]
        if anchor:
            assert z[g, 0] == 1.0 and z[g, -1] == n_levels
        ref = _slsqp(count[g], total[g], eps, loss, anchor)
        got_obj = _transform_objective(z[g], count[g], total[g], loss)
        ref_obj = _transform_objective(ref, count[g], total[g], loss)
        assert got_obj <= ref_obj + 1e-7 * (1 + abs(ref_obj))
        # the optimum is unique on levels with ratings (strictly convex there)
        has = count[g] > 0
        if anchor:
            has[[0, -1]] = False
        np.testing.assert_allclose(z[g, has], ref[has], atol=1e-4)


def test_missing_levels_are_interpolated_and_keep_the_gap():
    # levels 2 and 4 missing, ratings pull level 3 down and level 5 up (unanchored)
    count = jnp.asarray([[3.0, 0.0, 2.0, 0.0, 4.0]])
    total = count * jnp.asarray([[0.0, 0.0, 0.2, 0.0, 4.0]])
    z = np.asarray(transform_step(count, total, 0.5, loss="squared", anchor=False))[0]
    assert np.all(np.diff(z) >= 0.5 - 1e-12)
    np.testing.assert_allclose(z[1], (z[0] + z[2]) / 2, atol=TOL)
    np.testing.assert_allclose(z[3], (z[2] + z[4]) / 2, atol=TOL)
    # the first and last levels missing: extrapolated with gap eps
    count = jnp.asarray([[0.0, 2.0, 1.0, 1.0, 0.0]])
    total = count * jnp.asarray([[0.0, 1.0, 3.0, 2.0, 0.0]])
    z = np.asarray(transform_step(count, total, 0.5, loss="squared", anchor=False))[0]
    np.testing.assert_allclose([z[1] - z[0], z[4] - z[3]], [0.5, 0.5], atol=TOL)


def test_transform_step_equals_jaxcal_isotonic_regression():
    """The squared-loss step on y = z - eps*(r-1) is weighted isotonic regression (jaxcal's PAV)."""
    from jaxcal.fitting.isotonic import isotonic_regression

    rng = np.random.default_rng(4)
    count = rng.integers(1, 5, (8, 6)).astype(float)
    means = rng.normal(3, 2, (8, 6))
    eps = 0.3
    z = transform_step(
        jnp.asarray(count), jnp.asarray(count * means), eps, loss="squared", anchor=False
    )
    r0 = np.arange(6)
    y = isotonic_regression(
        np.tile(r0, 8).astype(float),
        (means - eps * r0).ravel(),
        sample_weight=count.ravel(),
        group=np.repeat(np.arange(8), 6),
    )
    np.testing.assert_allclose(np.asarray(z), np.asarray(y).reshape(8, 6) + eps * r0, atol=TOL)


def test_kmeans_matches_sklearn():
    from sklearn.cluster import KMeans

    rng = np.random.default_rng(5)
    x = np.concatenate([rng.normal(c, 0.6, (30, 4)) for c in (0.0, 2.0, 4.0)])
    start = x[[0, 1, 2]]
    centres, labels = core.kmeans(jnp.asarray(x), jnp.ones(90), jnp.asarray(start))
    ref = KMeans(3, init=start, n_init=1, algorithm="lloyd", tol=0.0).fit(x)
    np.testing.assert_allclose(centres, ref.cluster_centers_, atol=TOL)
    np.testing.assert_array_equal(labels, ref.labels_)


def test_kmeans_plus_plus_picks_distinct_weighted_points():
    x = jnp.asarray([[0.0], [0.0], [5.0], [10.0], [100.0]])
    weight = jnp.asarray([1.0, 1.0, 1.0, 1.0, 0.0])  # the far point has no weight
    for s in range(5):
        centres = np.asarray(kmeans_plus_plus(jax.random.key(s), x, weight, 3))[:, 0]
        assert len(set(centres)) == 3 and 100.0 not in centres


def test_inverse_transform_is_piecewise_linear_interpolation():
    z = np.array([0.5, 1.5, 1.8, 3.0, 6.0])
    s = np.linspace(0.6, 5.9, 50)
    np.testing.assert_allclose(
        core.inverse_transform(jnp.asarray(s), jnp.asarray(z)),
        np.interp(s, z, np.arange(1, 6)),
        atol=TOL,
    )
    # linear beyond the ends, by the end segments
    np.testing.assert_allclose(
        core.inverse_transform(jnp.asarray([0.0, 7.5]), jnp.asarray(z)), [0.5, 5.5], atol=TOL
    )


@pytest.mark.parametrize("loss", ["squared", "poisson"])
def test_dense_half_step_equals_pairs_half_step(loss):
    pairs, other, target, offset_pairs, rows, cols = _random_half_problem(6)
    rng = np.random.default_rng(7)
    bias = rng.normal(size=9) * 0.1  # the other side's offsets, per column
    weight = np.zeros((6, 9))
    weight[rows, cols] = 1.0
    dense_target = np.zeros((6, 9))
    dense_target[rows, cols] = target
    x0 = jnp.asarray(rng.normal(size=(6, 3)) * 0.1)
    a = half_step(
        x0,
        jnp.asarray(other[cols]),
        jnp.asarray(bias[cols]),
        jnp.asarray(target),
        pairs,
        0.4,
        loss=loss,
    )
    b = half_step_dense(
        x0,
        jnp.asarray(other),
        jnp.asarray(bias),
        jnp.asarray(dense_target),
        jnp.asarray(weight),
        0.4,
        loss=loss,
    )
    np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-10)
