"""LightGCN propagation against the dense normalised adjacency; WR-MF's ALS step against the
normal equations solved in NumPy over the full dense matrix; WR-MF's objective against its
dense definition."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal.recsys import propagate
from jaxcal.recsys._data import as_interactions
from jaxcal.recsys.lightgcn import build_graph
from jaxcal.recsys.wrmf import _padded, als_half_step, wrmf_objective

TOL = 1e-10  # float64


def _small_graph():
    rng = np.random.default_rng(0)
    train = rng.uniform(size=(6, 8)) < 0.4
    train[5] = False  # an isolated user
    train[0, 7] = True
    train[:, 6] = False  # an isolated item
    return train


@pytest.mark.parametrize("n_layers", [0, 1, 3])
def test_lightgcn_propagation_equals_dense_reference(n_layers):
    train = _small_graph()
    n_users, n_items = train.shape
    rng = np.random.default_rng(1)
    e_u, e_i = rng.normal(size=(n_users, 4)), rng.normal(size=(n_items, 4))
    # dense (n_users + n_items)^2 bipartite adjacency, D^-1/2 A D^-1/2 (isolated nodes: 0)
    a = np.zeros((n_users + n_items,) * 2)
    a[:n_users, n_users:] = train
    a[n_users:, :n_users] = train.T
    deg = a.sum(1)
    d = np.where(deg > 0, 1.0 / np.sqrt(np.where(deg > 0, deg, 1.0)), 0.0)
    norm = d[:, None] * a * d[None, :]
    e = np.concatenate([e_u, e_i])
    layers, cur = [e], e
    for _ in range(n_layers):
        cur = norm @ cur
        layers.append(cur)
    expected = np.mean(layers, axis=0)
    got_u, got_i = propagate(e_u, e_i, build_graph(as_interactions(train)), n_layers)
    np.testing.assert_allclose(got_u, expected[:n_users], rtol=0, atol=TOL)
    np.testing.assert_allclose(got_i, expected[n_users:], rtol=0, atol=TOL)


def _weighted_problem():
    rng = np.random.default_rng(2)
    counts = rng.poisson(0.6, size=(7, 9)).astype(float)  # interaction strengths r_ui
    counts[3] = 0.0  # a user with no positive: x_u = 0 solves its system
    return counts


@pytest.mark.parametrize("alpha", [0.0, 2.5])
def test_als_half_step_equals_normal_equations(alpha):
    counts = _weighted_problem()
    data = as_interactions(counts)
    l2, d = 0.3, 3
    y = np.random.default_rng(3).normal(size=(counts.shape[1], d))
    pref = (counts > 0).astype(float)
    conf = 1.0 + alpha * counts
    expected = np.zeros((counts.shape[0], d))
    for u in range(counts.shape[0]):
        c = np.diag(conf[u])
        expected[u] = np.linalg.solve(y.T @ c @ y + l2 * np.eye(d), y.T @ c @ pref[u])
    by_user = _padded(data.user, data.item, data.rating, data.n_users)
    got = als_half_step(y, by_user, l2, alpha)
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)
    # the item half-step is the same problem transposed
    x = expected
    expected_items = np.zeros((counts.shape[1], d))
    for i in range(counts.shape[1]):
        c = np.diag(conf[:, i])
        expected_items[i] = np.linalg.solve(x.T @ c @ x + l2 * np.eye(d), x.T @ c @ pref[:, i])
    by_item = _padded(data.item, data.user, data.rating, data.n_items)
    np.testing.assert_allclose(als_half_step(x, by_item, l2, alpha), expected_items, atol=TOL)


def test_wrmf_objective_equals_dense_sum():
    counts = _weighted_problem()
    data = as_interactions(counts)
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(7, 3)), rng.normal(size=(9, 3))
    l2, alpha = 0.2, 1.5
    pref, conf = (counts > 0).astype(float), 1.0 + alpha * counts
    dense = np.sum(conf * (pref - x @ y.T) ** 2) + l2 * (np.sum(x**2) + np.sum(y**2))
    got = wrmf_objective(x, y, data.user, data.item, data.rating, l2, alpha)
    assert abs(float(got) - dense) < TOL * dense
