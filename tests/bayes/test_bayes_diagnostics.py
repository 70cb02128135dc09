"""Posterior diagnostics against a direct numpy implementation of split-R-hat and bulk ESS
(BDA3 ch. 11; Vehtari et al. 2021 without rank-normalisation, Geyer's initial monotone
sequence) and against the known ESS of AR(1) chains."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal.bayes.posterior import Posterior
from jaxcal.families.linear import ScoreRange

RTOL = 1e-8


def split_rhat_np(x):
    """x: [C, N] -> split-R-hat (BDA3 eq. 11.4 on half-chains)."""
    n = x.shape[1] // 2
    halves = np.concatenate([x[:, :n], x[:, -n:]], axis=0)
    means = halves.mean(1)
    W = halves.var(1, ddof=1).mean()
    B = n * means.var(ddof=1)
    var_plus = (n - 1) / n * W + B / n
    return np.sqrt(var_plus / W)


def ess_np(x):
    """x: [C, N] -> ESS with the multi-chain autocorrelation and Geyer's initial monotone
    positive sequence (Stan's definition)."""
    C, N = x.shape
    acov = []
    for c in range(C):
        y = x[c] - x[c].mean()
        full = np.correlate(y, y, mode="full")[N - 1 :] / N
        acov.append(full)
    acov = np.array(acov)
    chain_var = acov[:, 0] * N / (N - 1)
    W = chain_var.mean()
    var_plus = W * (N - 1) / N + (x.mean(1).var(ddof=1) if C > 1 else 0.0)
    rho = 1 - (W - acov.mean(0)) / var_plus
    rho[0] = 1.0
    # Geyer: sums of adjacent pairs, truncated at the first negative, made monotone
    pairs = rho[: 2 * (N // 2)].reshape(-1, 2).sum(1)
    k = np.argmax(pairs < 0) if np.any(pairs < 0) else len(pairs)
    pairs = np.minimum.accumulate(pairs[:k])
    tau = -1 + 2 * pairs.sum()
    return C * N / tau


def ar1(rng, C, N, phi):
    x = np.zeros((C, N))
    x[:, 0] = rng.normal(size=C) / np.sqrt(1 - phi**2)
    for t in range(1, N):
        x[:, t] = phi * x[:, t - 1] + rng.normal(size=C)
    return x


def make_posterior(theta, **stats):
    ctx = ScoreRange(jnp.asarray(0.0), jnp.asarray(1.0))
    return Posterior(
        theta=jnp.asarray(theta), context=ctx, stats=stats,
        family=jaxcal.PlattScaling().family, method="nuts",
    )  # fmt: skip


@pytest.mark.parametrize("phi", [0.0, 0.5, 0.9])
def test_rhat_ess_match_numpy_and_ar1_theory(phi):
    rng = np.random.default_rng(0)
    C, N = 4, 2000
    a = ar1(rng, C, N, phi)
    b = rng.normal(size=(C, N)) + np.arange(C)[:, None] * 0.5  # chains disagree
    div = np.zeros((C, N), bool)
    div[1, 5] = div[3, 7] = True
    post = make_posterior(np.stack([a, b], -1), diverging=jnp.asarray(div))
    d = post.diagnostics()
    np.testing.assert_allclose(d["r_hat"]["a"], split_rhat_np(a), rtol=RTOL)
    np.testing.assert_allclose(d["r_hat"]["b"], split_rhat_np(b), rtol=RTOL)
    np.testing.assert_allclose(d["ess"]["a"], ess_np(a), rtol=1e-6)
    # AR(1): ESS = C N (1 - phi) / (1 + phi)
    theory = C * N * (1 - phi) / (1 + phi)
    assert abs(d["ess"]["a"] / theory - 1) < 0.2
    assert d["r_hat"]["a"] < 1.01 and d["r_hat"]["b"] > 1.1  # mixing detected
    assert d["divergences"] == 2
    assert d["n_chains"] == C and d["n_samples"] == N
    assert post.n_chains == C and post.n_samples == N


def test_batched_diagnostics_match_per_problem():
    rng = np.random.default_rng(1)
    th = np.stack([np.stack([ar1(rng, 2, 500, 0.3), ar1(rng, 2, 500, 0.7)], -1)] * 1)
    th = np.concatenate([th, th[:, ::-1]], 0)  # [2, C, N, 2]
    post = Posterior(
        theta=jnp.asarray(th),
        context=ScoreRange(jnp.zeros(2), jnp.ones(2)),
        stats={"diverging": jnp.zeros(th.shape[:3], bool)},
        family=jaxcal.PlattScaling().family,
    )
    d = post.diagnostics()
    for b in range(2):
        np.testing.assert_allclose(d["r_hat"]["a"][b], split_rhat_np(th[b, ..., 0]), rtol=RTOL)
        np.testing.assert_allclose(d["ess"]["b"][b], ess_np(th[b, ..., 1]), rtol=1e-6)
