"""Each training loss: its value against an independent NumPy formula, its gradient (the one
the shared training loop takes, through gathers and segment sums) against central finite
differences over every parameter coordinate, in float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree

from jaxcal.recsys import BPRMF, CML, NCF, UBPR, LightGCN
from jaxcal.recsys._data import as_interactions
from jaxcal.recsys.bpr import bpr_loss
from jaxcal.recsys.cml import cml_loss

VALUE_TOL = 1e-12  # float64: the same formula computed two ways
FD_EPS = 1e-6  # central differences: truncation O(eps^2) ~ 1e-12, rounding ~1e-16 / eps
FD_TOL = 1e-7  # absolute tolerance on each gradient coordinate


def _softplus(x):
    return np.logaddexp(0.0, x)


def _fd_gradient(f, params):
    """Central finite differences of ``f`` over every coordinate of the pytree ``params``."""
    flat, unravel = ravel_pytree(params)
    f_flat = jax.jit(jax.vmap(lambda v: f(unravel(v))))
    eye = jnp.eye(flat.size, dtype=flat.dtype) * FD_EPS
    return (f_flat(flat + eye) - f_flat(flat - eye)) / (2 * FD_EPS), flat


def _check_gradient(f, params):
    fd, flat = _fd_gradient(f, params)
    auto, _ = ravel_pytree(jax.jit(jax.grad(f))(params))
    assert flat.size > 0 and np.abs(auto).max() > 1e-3  # a non-trivial gradient
    np.testing.assert_allclose(auto, fd, rtol=0, atol=FD_TOL)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(0)
    train = rng.uniform(size=(7, 9)) < 0.35
    train[:, 0] = True  # every user has a positive and a non-positive
    train[:, 1] = False
    data = as_interactions(train)
    # a fixed batch of triples (u, i, j): i a positive of u, j any item (some positives)
    b = 12
    idx = rng.integers(0, data.user.size, size=b)
    u, i = data.user[idx], data.item[idx]
    j = rng.integers(0, 9, size=b).astype(np.int32)
    return train, data, (jnp.asarray(u), jnp.asarray(i), jnp.asarray(j))


def _factor_params(model, data, key=1, scale=0.5):
    k_u, k_i = jax.random.split(jax.random.key(key))
    return {
        "user": scale * jax.random.normal(k_u, (data.n_users, model.rank)),
        "item": scale * jax.random.normal(k_i, (data.n_items, model.rank)),
    }


def test_bpr_loss_value_and_gradient(problem):
    train, data, (u, i, j) = problem
    model = BPRMF(rank=3, l2=0.3)
    aux = model._prepare(data)
    hp = model._hp()
    params = _factor_params(model, data)
    w, h = np.asarray(params["user"]), np.asarray(params["item"])
    x = np.sum(w[u] * h[i], 1) - np.sum(w[u] * h[j], 1)
    sq = np.sum(w[u] ** 2, 1) + np.sum(h[i] ** 2, 1) + np.sum(h[j] ** 2, 1)
    expected = np.mean(-np.log(1.0 / (1.0 + np.exp(-x))) + 0.5 * 0.3 * sq)
    f = lambda p: model._loss(p, (u, i, j), aux, hp)  # noqa: E731
    assert abs(float(f(params)) - expected) < VALUE_TOL
    _check_gradient(f, params)


def test_bpr_loss_gradient_matches_learnbpr_update():
    # Rendle et al. 2009, Fig. 4: d/dw_u of -ln sigma(x) = -(1 - sigma(x)) (h_i - h_j), etc.
    rng = np.random.default_rng(1)
    wu, hi, hj = (rng.normal(size=(1, 4)) for _ in range(3))
    g = jax.grad(lambda a, b, c: bpr_loss(a, b, c, 0.0), argnums=(0, 1, 2))(wu, hi, hj)
    x = np.sum(wu * (hi - hj))
    coef = -(1.0 - 1.0 / (1.0 + np.exp(-x)))
    np.testing.assert_allclose(g[0], coef * (hi - hj), rtol=0, atol=VALUE_TOL)
    np.testing.assert_allclose(g[1], coef * wu, rtol=0, atol=VALUE_TOL)
    np.testing.assert_allclose(g[2], -coef * wu, rtol=0, atol=VALUE_TOL)


@pytest.mark.parametrize("per_pair", [False, True])
def test_ubpr_loss_value_and_gradient(problem, per_pair):
    train, data, (u, i, j) = problem
    rng = np.random.default_rng(2)
    shape = train.shape if per_pair else (train.shape[1],)
    omega = rng.uniform(0.2, 1.0, size=shape)
    model = UBPR(rank=3, l2=0.1)
    aux = model._prepare(data, propensity=omega)
    hp = model._hp()
    params = _factor_params(model, data, key=2)
    w, h = np.asarray(params["user"]), np.asarray(params["item"])
    un, inn, jn = np.asarray(u), np.asarray(i), np.asarray(j)
    om = omega if per_pair else np.broadcast_to(omega, train.shape)
    y = train.astype(float)  # Y_uj read from the dense matrix (the oracle for is_positive)
    assert 0 < y[un, jn].sum() < jn.size  # the batch has sampled positives among the j's
    weight = (1.0 / om[un, inn]) * (1.0 - y[un, jn] / om[un, jn])
    x = np.sum(w[un] * (h[inn] - h[jn]), 1)
    sq = np.sum(w[un] ** 2 + h[inn] ** 2 + h[jn] ** 2, 1)
    expected = np.mean(weight * _softplus(-x) + 0.5 * 0.1 * sq)
    f = lambda p: model._loss(p, (u, i, j), aux, hp)  # noqa: E731
    assert abs(float(f(params)) - expected) < VALUE_TOL
    _check_gradient(f, params)


def test_cml_hinge_value_and_gradient(problem):
    train, data, (u, i, j) = problem
    model = CML(rank=3, margin=0.7, l2=0.05)
    aux = model._prepare(data)
    hp = model._hp()
    params = _factor_params(model, data, key=3, scale=0.4)
    w, h = np.asarray(params["user"]), np.asarray(params["item"])
    d_pos = np.sum((w[u] - h[i]) ** 2, 1)
    d_neg = np.sum((w[u] - h[j]) ** 2, 1)
    hinge = 0.7 + d_pos - d_neg
    # finite differences need every hinge away from its kink; both sides must occur
    assert np.abs(hinge).min() > 1e-3 and (hinge > 0).any() and (hinge < 0).any()
    sq = np.sum(w[u] ** 2 + h[i] ** 2 + h[j] ** 2, 1)
    expected = np.mean(np.maximum(hinge, 0.0) + 0.5 * 0.05 * sq)
    f = lambda p: model._loss(p, (u, i, j), aux, hp)  # noqa: E731
    assert abs(float(f(params)) - expected) < VALUE_TOL
    assert abs(float(cml_loss(w[u], h[i], h[j], 0.7, 0.05)) - expected) < VALUE_TOL
    _check_gradient(f, params)


def _numpy_neumf(params, users, items):
    p = jax.tree_util.tree_map(np.asarray, params)
    gmf = p["gmf_user"][users] * p["gmf_item"][items]
    h = np.concatenate([p["mlp_user"][users], p["mlp_item"][items]], axis=1)
    for w, b in zip(p["weights"], p["biases"], strict=True):
        h = np.maximum(h @ w + b, 0.0)
    return np.concatenate([gmf, h], axis=1) @ p["out_w"] + p["out_b"]


def test_ncf_bce_value_and_gradient(problem):
    train, data, (u, i, _) = problem
    model = NCF(rank=3, hidden=(5, 4), n_negatives=2, l2=0.2)
    aux = model._prepare(data)
    hp = model._hp()
    params = model._init(jax.random.key(4), aux, hp, model.rank)
    params["biases"] = [b + 0.1 for b in params["biases"]]  # keep ReLUs off their kinks
    params["out_b"] = params["out_b"] + 0.3
    uu = jnp.repeat(u, 2)
    jj = jnp.asarray(np.random.default_rng(5).integers(0, 9, size=uu.size), jnp.int32)
    batch = (u, i, uu, jj)
    z_pos, z_neg = _numpy_neumf(params, u, i), _numpy_neumf(params, uu, jj)
    n = z_pos.size + z_neg.size
    p = jax.tree_util.tree_map(np.asarray, params)
    sq = sum(
        np.sum(p[f"{br}_user"][us] ** 2) + np.sum(p[f"{br}_item"][its] ** 2)
        for br in ("gmf", "mlp")
        for us, its in ((u, i), (uu, jj))
    )
    expected = (_softplus(-z_pos).sum() + _softplus(z_neg).sum()) / n + 0.5 * 0.2 * sq / n
    f = lambda q: model._loss(q, batch, aux, hp)  # noqa: E731
    assert abs(float(f(params)) - expected) < VALUE_TOL
    _check_gradient(f, params)


def _dense_propagation(w0, h0, train, n_layers):
    a = train.astype(float)
    deg_u, deg_i = a.sum(1), a.sum(0)
    inv_u = np.where(deg_u > 0, 1.0 / np.sqrt(np.maximum(deg_u, 1)), 0.0)
    inv_i = np.where(deg_i > 0, 1.0 / np.sqrt(np.maximum(deg_i, 1)), 0.0)
    norm = inv_u[:, None] * a * inv_i[None, :]
    e_u, e_i, s_u, s_i = w0, h0, w0.copy(), h0.copy()
    for _ in range(n_layers):
        e_u, e_i = norm @ e_i, norm.T @ e_u
        s_u, s_i = s_u + e_u, s_i + e_i
    return s_u / (n_layers + 1), s_i / (n_layers + 1)


def test_lightgcn_bpr_value_and_gradient(problem):
    train, data, (u, i, j) = problem
    model = LightGCN(rank=3, n_layers=2, l2=0.15)
    aux = model._prepare(data)
    hp = model._hp()
    params = _factor_params(model, data, key=6)
    w0, h0 = np.asarray(params["user"]), np.asarray(params["item"])
    w, h = _dense_propagation(w0, h0, train, 2)
    x = np.sum(w[u] * (h[i] - h[j]), 1)
    sq = np.sum(w0[u] ** 2 + h0[i] ** 2 + h0[j] ** 2, 1)
    expected = np.mean(_softplus(-x) + 0.5 * 0.15 * sq)
    f = lambda p: model._loss(p, (u, i, j), aux, hp)  # noqa: E731
    assert abs(float(f(params)) - expected) < VALUE_TOL
    _check_gradient(f, params)
