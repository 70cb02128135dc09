"""Exact E-steps and predictions equal brute-force enumeration of all hidden states."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal.clicks import Sessions
from jaxcal.clicks._em import Batch
from jaxcal.clicks.ccm import ccm_posteriors
from jaxcal.clicks.dbn import dbn_posteriors
from jaxcal.clicks.pbm import pbm_stats
from jaxcal.clicks.simulator import MODELS
from jaxcal.clicks.ubm import ubm_stats

from ._bruteforce import click_probabilities, posterior

EXACT = 1e-12  # float64 agreement with enumeration


def _random_problem(rng, name, n):
    alpha = rng.uniform(0.05, 0.95, n)
    theta = {
        "sigma": rng.uniform(0.05, 0.95, n),
        "lambda": rng.uniform(0.05, 0.95, n),
        "tau": rng.uniform(0.05, 0.95, 3),
    }
    if name == "PBM":
        theta["gamma"] = rng.uniform(0.05, 0.95, n)
    elif name == "UBM":
        theta["gamma"] = rng.uniform(0.05, 0.95, (n, n))
    else:
        theta["gamma"] = rng.uniform(0.3, 0.95)
    return alpha, theta


def _sessions_for(rng, n_sessions, n):
    """Random click vectors; lengths vary (prefix masks) to exercise padding."""
    lengths = rng.integers(1, n + 1, n_sessions)
    lengths[0] = n
    mask = np.arange(n)[None, :] < lengths[:, None]
    clicks = (rng.random((n_sessions, n)) < 0.4) & mask
    clicks[1] = False  # a no-click session
    return clicks.astype(float), mask


@pytest.mark.parametrize("n", [3, 4])
def test_dbn_posteriors_equal_bruteforce(n):
    rng = np.random.default_rng(10 + n)
    clicks, mask = _sessions_for(rng, 12, n)
    for _ in range(3):
        alpha, theta = _random_problem(rng, "DBN", n)
        post = jax.jit(dbn_posteriors)(
            jnp.broadcast_to(alpha, clicks.shape),
            jnp.broadcast_to(theta["sigma"], clicks.shape),
            theta["gamma"],
            jnp.asarray(clicks),
            jnp.asarray(mask),
        )
        for s in range(clicks.shape[0]):
            k = int(mask[s].sum())
            bf = posterior("DBN", alpha[:k], {**theta, "sigma": theta["sigma"][:k]}, clicks[s, :k])
            c = clicks[s, :k] > 0
            np.testing.assert_allclose(post["p_attr"][s, :k], bf["p_attr"], atol=EXACT)
            np.testing.assert_allclose(post["p_sat"][s, :k][c], bf["p_x"][c], atol=EXACT)
            np.testing.assert_allclose(post["gamma_num"][s, :k], bf["gamma_num"], atol=EXACT)
            np.testing.assert_allclose(post["gamma_den"][s, :k], bf["gamma_den"], atol=EXACT)
            cond = np.where(c, post["cond"][s, :k], 1 - post["cond"][s, :k])
            np.testing.assert_allclose(np.log(cond).sum(), bf["loglik"], atol=EXACT)
            assert np.all(np.asarray(post["gamma_num"][s, k:]) == 0)


@pytest.mark.parametrize("n", [3, 4])
def test_ccm_posteriors_equal_bruteforce(n):
    rng = np.random.default_rng(20 + n)
    clicks, mask = _sessions_for(rng, 12, n)
    for _ in range(3):
        alpha, theta = _random_problem(rng, "CCM", n)
        post = jax.jit(ccm_posteriors)(
            jnp.broadcast_to(alpha, clicks.shape),
            jnp.asarray(theta["tau"]),
            jnp.asarray(clicks),
            jnp.asarray(mask),
        )
        for s in range(clicks.shape[0]):
            k = int(mask[s].sum())
            bf = posterior("CCM", alpha[:k], theta, clicks[s, :k])
            c = clicks[s, :k] > 0
            np.testing.assert_allclose(post["p_attr"][s, :k], bf["p_attr"], atol=EXACT)
            np.testing.assert_allclose(post["p_rel"][s, :k][c], bf["p_x"][c], atol=EXACT)
            np.testing.assert_allclose(post["tau_num"][:, s, :k], bf["tau_num"], atol=EXACT)
            np.testing.assert_allclose(post["tau_den"][:, s, :k], bf["tau_den"], atol=EXACT)
            cond = np.where(c, post["cond"][s, :k], 1 - post["cond"][s, :k])
            np.testing.assert_allclose(np.log(cond).sum(), bf["loglik"], atol=EXACT)


@pytest.mark.parametrize("name", ["PBM", "UBM"])
def test_pbm_ubm_estep_equal_bruteforce(name):
    """One session per problem with distinct pair ids: the alpha / gamma numerators are the
    posteriors P(A_r = 1 | C) and P(E_r = 1 | C)."""
    rng = np.random.default_rng(3)
    n = 4
    stats_fn = jax.jit(pbm_stats if name == "PBM" else ubm_stats)
    for trial in range(16):
        alpha, theta = _random_problem(rng, name, n)
        clicks = (rng.random(n) < 0.4).astype(float)
        if trial == 0:
            clicks[:] = 0
        batch = Batch(
            qd=jnp.arange(n)[None, :],
            clicks=jnp.asarray(clicks)[None, :],
            mask=jnp.ones((1, n), bool),
            weight=jnp.ones(1),
        )
        params = {"alpha": jnp.asarray(np.append(alpha, 0.5)), "gamma": jnp.asarray(theta["gamma"])}
        stats, ll = stats_fn(params, batch)
        bf = posterior(name, alpha, theta, clicks)
        np.testing.assert_allclose(stats["alpha"][0][:n], bf["p_attr"], atol=EXACT)
        np.testing.assert_allclose(float(ll), bf["loglik"], atol=EXACT)
        if name == "PBM":
            np.testing.assert_allclose(stats["gamma"][0], bf["p_exam"], atol=EXACT)
        else:
            prev = 0
            for r in range(n):
                assert abs(float(stats["gamma"][0][r, prev]) - bf["p_exam"][r]) < EXACT
                assert float(stats["gamma"][1][r, prev]) == 1.0
                prev = r + 1 if clicks[r] else prev


def _fitted_from(name, alpha, theta, n):
    """A fitted model over one query whose documents 0..n-1 carry ``alpha`` / ``sigma``."""
    params = {"alpha": jnp.asarray(np.append(alpha, 0.5))}
    if name in ("DBN", "SDBN"):
        params["sigma"] = jnp.asarray(np.append(theta["sigma"], 0.5))
    if name in ("PBM", "UBM", "DBN"):
        params["gamma"] = jnp.asarray(theta["gamma"])
    if name == "DCM":
        params["lambda"] = jnp.asarray(theta["lambda"])
    if name == "CCM":
        params["tau"] = jnp.asarray(theta["tau"])
    return MODELS[name].fitted_class(
        pair_query=np.zeros(n, np.int32),
        pair_doc=np.arange(n, dtype=np.int32),
        params=params,
        n_iter=jnp.asarray(0),
        history=jnp.zeros(0),
        n_results=n,
    )


@pytest.mark.parametrize("name", ["PBM", "UBM", "CM", "DCM", "DBN", "SDBN", "CCM"])
def test_predictions_equal_bruteforce(name):
    """predict_conditional / predict_marginal (jitted public path) equal enumeration."""
    rng = np.random.default_rng(7)
    n = 4
    alpha, theta = _random_problem(rng, name, n)
    fitted = _fitted_from(name, alpha, theta, n)
    all_clicks = np.array(list(np.ndindex(*(2,) * n)), float)
    log = Sessions.from_arrays(
        np.zeros(len(all_clicks)), np.tile(np.arange(n), (16, 1)), all_clicks
    )
    cond = np.asarray(fitted.predict_conditional(log))
    marg = np.asarray(fitted.predict_marginal(log))
    for s, clicks in enumerate(all_clicks):
        bf_cond, bf_marg = click_probabilities(name, alpha, theta, clicks)
        np.testing.assert_allclose(marg[s], bf_marg, atol=EXACT)
        ok = np.isfinite(bf_cond)  # a prefix of probability 0 (CM) has no conditional
        np.testing.assert_allclose(cond[s][ok], bf_cond[ok], atol=EXACT)


@pytest.mark.parametrize("name", ["DBN", "CCM"])
def test_rank_major_copies_equal_on_the_fly_transposes(name):
    """The E-step reads the rank-major copies stored by make_batch; a Batch without them
    (transposed inside the jitted E-step) gives the same statistics."""
    from jaxcal.clicks._em import make_batch

    rng = np.random.default_rng(5)
    n, S, n_pairs = 4, 30, 7
    clicks, mask = _sessions_for(rng, S, n)
    qd = np.where(mask, rng.integers(0, n_pairs - 1, (S, n)), n_pairs - 1)
    weight = rng.integers(1, 4, S).astype(float)
    full = make_batch(qd, clicks, mask, weight, None)
    bare = Batch(full.qd, full.clicks, full.mask, full.weight)
    assert full.qd_t is not None and bare.qd_t is None
    params = {"alpha": jnp.asarray(rng.uniform(0.1, 0.9, n_pairs))}
    if name == "DBN":
        params |= {"sigma": jnp.asarray(rng.uniform(0.1, 0.9, n_pairs)), "gamma": jnp.asarray(0.7)}
    else:
        params["tau"] = jnp.asarray(rng.uniform(0.1, 0.9, 3))
    stats_fn = jax.jit(MODELS[name]._stats)
    a, b = stats_fn(params, full), stats_fn(params, bare)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=EXACT, atol=EXACT)


def test_ccm_stats_equal_bruteforce():
    """The CCM E-step sums its posteriors inside the forward scan: its pair sums, transition
    sums and log-likelihood equal the weighted sums of the enumerated posteriors (sessions
    of several lengths and weights, pairs shared between sessions and ranks)."""
    from jaxcal.clicks._em import make_batch
    from jaxcal.clicks.ccm import ccm_stats

    rng = np.random.default_rng(31)
    n, S, n_pairs = 4, 24, 6
    clicks, mask = _sessions_for(rng, S, n)
    qd = np.where(mask, rng.integers(0, n_pairs - 1, (S, n)), n_pairs - 1)
    weight = rng.integers(1, 4, S).astype(float)
    alpha, tau = rng.uniform(0.05, 0.95, n_pairs), rng.uniform(0.05, 0.95, 3)
    params = {"alpha": jnp.asarray(alpha), "tau": jnp.asarray(tau)}
    stats, ll = jax.jit(ccm_stats)(params, make_batch(qd, clicks, mask, weight, None))
    num, den = np.zeros(n_pairs), np.zeros(n_pairs)
    tau_num, tau_den, loglik = np.zeros(3), np.zeros(3), 0.0
    for s in range(S):
        k = int(mask[s].sum())
        ids, c = qd[s, :k], clicks[s, :k]
        bf = posterior("CCM", alpha[ids], {"tau": tau}, c)
        np.add.at(num, ids, weight[s] * (bf["p_attr"] + c * bf["p_x"]))  # P(R = 1 | C) on clicks
        np.add.at(den, ids, weight[s] * (1 + c))
        tau_num += weight[s] * bf["tau_num"].sum(axis=1)
        tau_den += weight[s] * bf["tau_den"].sum(axis=1)
        loglik += weight[s] * bf["loglik"]
    np.testing.assert_allclose(stats["alpha"][0], num, atol=EXACT)
    np.testing.assert_allclose(stats["alpha"][1], den, atol=EXACT)
    np.testing.assert_allclose(stats["tau"][0], tau_num, atol=EXACT)
    np.testing.assert_allclose(stats["tau"][1], tau_den, atol=EXACT)
    np.testing.assert_allclose(float(ll), loglik, atol=EXACT)
