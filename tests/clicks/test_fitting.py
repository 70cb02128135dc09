"""Fitting equals independent oracles: hand counting (closed forms), brute-force M-steps
(EM), and invariances (deduplication, priors); save / load; bad input."""

from __future__ import annotations

from collections import defaultdict

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal.clicks import MODELS, RunOptions, Sessions, example_params, simulate

from ._bruteforce import posterior

EXACT = 1e-12
PRIORS = [(1.0, 2.0), (2.0, 7.0), (3.0, 4.0)]


def _small_log(seed=0, n_sessions=40, n=3, n_queries=2, n_docs=4):
    """A random log with repeated SERPs, no-click sessions and short (masked) SERPs."""
    rng = np.random.default_rng(seed)
    query = rng.integers(0, n_queries, n_sessions)
    doc = np.stack([rng.permutation(n_docs)[:n] for _ in range(n_sessions)])
    lengths = rng.integers(1, n + 1, n_sessions)
    lengths[:3] = n
    mask = np.arange(n)[None, :] < lengths[:, None]
    clicks = (rng.random((n_sessions, n)) < 0.4) & mask
    clicks[0] = False
    return Sessions.from_arrays(query, doc, clicks.astype(int), mask)


def _rows(log):
    for s in range(log.n_sessions):
        k = int(log.mask[s].sum())
        q = int(log.query[s])
        yield q, [int(d) for d in log.doc[s, :k]], [int(c) for c in log.clicks[s, :k]]


# ----------------------------------------------------------------- closed forms by counting
def _count_closed_form(name, log, prior):
    a, b = prior
    num, den = defaultdict(float), defaultdict(float)
    rnum, rden = defaultdict(float), defaultdict(float)  # rank / second parameter
    for q, docs, clicks in _rows(log):
        k = len(docs)
        first = next((r for r in range(k) if clicks[r]), k - 1)
        last = max((r for r in range(k) if clicks[r]), default=k - 1)
        for r in range(k):
            key = (q, docs[r])
            if name == "GCTR":
                num["g"] += clicks[r]
                den["g"] += 1
            elif name == "RCTR":
                num[r] += clicks[r]
                den[r] += 1
            elif name == "DCTR":
                num[key] += clicks[r]
                den[key] += 1
            elif name == "CM" and r <= first:
                num[key] += clicks[r]
                den[key] += 1
            elif name in ("DCM", "SDBN") and r <= last:
                num[key] += clicks[r]
                den[key] += 1
            if name == "DCM" and clicks[r]:
                rnum[r] += r < last
                rden[r] += 1
            if name == "SDBN" and clicks[r]:
                rnum[key] += r == last
                rden[key] += 1
    first_param = {kk: (a + num[kk]) / (b + den[kk]) for kk in den}
    second = {kk: (a + rnum[kk]) / (b + rden[kk]) for kk in rden}
    return first_param, second


@pytest.mark.parametrize("prior", PRIORS)
@pytest.mark.parametrize("name", ["GCTR", "RCTR", "DCTR", "CM", "DCM", "SDBN"])
def test_closed_form_equals_counting(name, prior):
    log = _small_log(1)
    fitted = MODELS[name]().fit(log, prior=prior)
    first, second = _count_closed_form(name, log, prior)
    a, b = prior
    if name == "GCTR":
        assert abs(float(fitted.params["rho"]) - first["g"]) < EXACT
    elif name == "RCTR":
        for r, v in first.items():
            assert abs(float(fitted.params["rho"][r]) - v) < EXACT
    else:
        pairs = np.array(sorted({(q, d) for q, docs, _ in _rows(log) for d in docs}))
        got = fitted.pair_value("alpha", pairs[:, 0], pairs[:, 1])
        want = [first.get((q, d), a / b) for q, d in pairs]  # never examined -> prior mean
        np.testing.assert_allclose(got, want, atol=EXACT)
        if name == "DCM":
            lam = np.asarray(fitted.params["lambda"])
            for r in range(3):
                assert abs(lam[r] - second.get(r, a / b)) < EXACT
        if name == "SDBN":
            got = fitted.pair_value("sigma", pairs[:, 0], pairs[:, 1])
            want = [second.get((q, d), a / b) for q, d in pairs]
            np.testing.assert_allclose(got, want, atol=EXACT)


def test_unseen_pairs_predict_the_prior_mean():
    log = _small_log(2)
    fitted = MODELS["DCTR"]().fit(log, prior=(2, 7))
    assert abs(float(fitted.pair_value("alpha", 123, 456)[0]) - 2 / 7) < EXACT


# ----------------------------------------------------------------- EM vs brute-force M-step
def _init(name, n):
    theta = {"alpha": defaultdict(lambda: 0.5), "sigma": defaultdict(lambda: 0.5)}
    if name == "PBM":
        theta["gamma"] = np.full(n, 0.5)
    elif name == "UBM":
        theta["gamma"] = np.full((n, n), 0.5)
    elif name == "DBN":
        theta["gamma"] = 0.5
    elif name == "CCM":
        theta["tau"] = np.full(3, 0.5)
    return theta


def _bruteforce_em_step(name, log, theta, prior):
    """One EM iteration with posteriors from enumerating every hidden state."""
    a, b = prior
    n = log.n_results
    an, ad = defaultdict(float), defaultdict(float)
    sn, sd = defaultdict(float), defaultdict(float)
    gn, gd = np.zeros((n, n)), np.zeros((n, n))
    tn, td = np.zeros(3), np.zeros(3)
    for q, docs, clicks in _rows(log):
        k = len(docs)
        keys = [(q, d) for d in docs]
        alpha = np.array([theta["alpha"][kk] for kk in keys])
        local = {"sigma": np.array([theta["sigma"][kk] for kk in keys])}
        for p in ("gamma", "tau"):
            if p in theta:
                local[p] = theta[p][:k, :k] if name == "UBM" else theta[p]
        if name == "PBM":
            local["gamma"] = theta["gamma"][:k]
        post = posterior(name, alpha, local, clicks)
        prev = 0
        for r, kk in enumerate(keys):
            an[kk] += post["p_attr"][r]
            ad[kk] += 1
            if name == "CCM" and clicks[r]:
                an[kk] += post["p_x"][r]
                ad[kk] += 1
            if name == "DBN" and clicks[r]:
                sn[kk] += post["p_x"][r]
                sd[kk] += 1
            if name == "PBM":
                gn[0, r] += post["p_exam"][r]
                gd[0, r] += 1
            if name == "UBM":
                gn[r, prev] += post["p_exam"][r]
                gd[r, prev] += 1
                prev = r + 1 if clicks[r] else prev
        if name == "DBN":
            tn[0] += post["gamma_num"].sum()
            td[0] += post["gamma_den"].sum()
        if name == "CCM":
            tn += post["tau_num"].sum(axis=1)
            td += post["tau_den"].sum(axis=1)
    new = _init(name, n)
    new["alpha"].update({kk: (a + an[kk]) / (b + ad[kk]) for kk in ad})
    new["sigma"].update({kk: (a + sn[kk]) / (b + sd[kk]) for kk in sd})
    if name == "PBM":
        new["gamma"] = (a + gn[0]) / (b + gd[0])
    elif name == "UBM":
        new["gamma"] = (a + gn) / (b + gd)
    elif name == "DBN":
        new["gamma"] = (a + tn[0]) / (b + td[0])
    elif name == "CCM":
        new["tau"] = (a + tn) / (b + td)
    return new


@pytest.mark.parametrize("name", ["PBM", "UBM", "DBN", "CCM"])
def test_em_iterations_equal_bruteforce(name):
    """Two EM iterations from the 0.5 start equal two M-steps on enumerated posteriors
    (checks the E-step, the segment sums by pair / rank id, and a non-default prior)."""
    prior = (2.0, 7.0)
    log = _small_log(3)
    theta = _init(name, log.n_results)
    for n_iter in (1, 2):
        theta = _bruteforce_em_step(name, log, theta, prior)
        fitted = MODELS[name]().fit(log, prior=prior, max_iter=n_iter, tol=0.0)
        assert int(fitted.n_iter) == n_iter
        pairs = sorted(theta["alpha"])
        q, d = np.array(pairs).T
        np.testing.assert_allclose(
            fitted.pair_value("alpha", q, d), [theta["alpha"][p] for p in pairs], atol=EXACT
        )
        if name == "DBN":
            np.testing.assert_allclose(
                fitted.pair_value("sigma", q, d), [theta["sigma"][p] for p in pairs], atol=EXACT
            )
        key = "tau" if name == "CCM" else "gamma"
        got = np.asarray(fitted.params[key])
        want = np.asarray(theta[key])
        if name == "UBM":  # only cells r' < r exist; the others keep the prior mean
            used = np.tril(np.ones_like(want, bool))
            np.testing.assert_allclose(got[used], want[used], atol=EXACT)
        else:
            np.testing.assert_allclose(got, want, atol=EXACT)


# ----------------------------------------------------------------- invariances
@pytest.mark.parametrize("name", ["DCM", "UBM", "CCM"])
def test_dedup_equals_no_dedup(name):
    p = example_params(name, n_queries=3, key=jax.random.key(0))
    log = simulate(name, p, 3000, key=jax.random.key(4), shuffle=False)
    assert log.deduplicate().n_sessions < log.n_sessions  # real savings
    fa = MODELS[name]().fit(log, max_iter=15, run=RunOptions(dedup=True))
    fb = MODELS[name]().fit(log, max_iter=15, run=RunOptions(dedup=False))
    for k in fa.params:
        np.testing.assert_allclose(fa.params[k], fb.params[k], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(
        fa.predict_marginal(log), fb.predict_marginal(log), rtol=1e-10, atol=1e-12
    )


def test_weights_equal_repetition():
    """A weighted (deduplicated) log is the same log as its expansion."""
    log = _small_log(5)
    weighted = Sessions.from_arrays(
        log.query, log.doc, log.clicks, log.mask, np.arange(1, log.n_sessions + 1)
    )
    fa = MODELS["DBN"]().fit(weighted, max_iter=10, run=RunOptions(dedup=False))
    fb = MODELS["DBN"]().fit(weighted.expand(), max_iter=10, run=RunOptions(dedup=False))
    for k in fa.params:
        np.testing.assert_allclose(fa.params[k], fb.params[k], rtol=1e-10)


# ----------------------------------------------------------------- save / load, jit
@pytest.mark.parametrize("name", sorted(MODELS))
def test_save_load_round_trip(name, tmp_path):
    log = simulate(
        name, example_params(name, n_queries=2, key=jax.random.key(0)), 300, key=jax.random.key(6)
    )
    fitted = MODELS[name]().fit(log, max_iter=5, prior=(2, 9))
    path = tmp_path / f"{name}.npz"
    fitted.save(path)
    back = jaxcal.load(path)
    assert type(back) is type(fitted) and back.prior == (2.0, 9.0)
    assert back.n_results == fitted.n_results
    for k in fitted.params:
        np.testing.assert_array_equal(back.params[k], fitted.params[k])
        assert back.params[k].dtype == fitted.params[k].dtype
    np.testing.assert_array_equal(back.pair_query, fitted.pair_query)
    if name in ("UBM", "CCM"):  # predictions compile per model; two suffice here
        np.testing.assert_array_equal(
            back.predict_conditional(log), fitted.predict_conditional(log)
        )
    assert jax.tree_util.tree_structure(back) == jax.tree_util.tree_structure(fitted)


def test_fitted_model_is_a_jittable_pytree_and_refit_does_not_recompile():
    from jaxcal.clicks._em import run_em

    log = simulate(
        "DBN", example_params("DBN", n_queries=2, key=jax.random.key(0)), 500, key=jax.random.key(7)
    )
    fitted = MODELS["DBN"]().fit(log, max_iter=5)
    doubled = jax.jit(lambda f: jax.tree_util.tree_map(lambda x: 2 * x, f.params))(fitted)
    np.testing.assert_allclose(doubled["gamma"], 2 * fitted.params["gamma"])
    before = run_em._cache_size()
    MODELS["DBN"]().fit(log, max_iter=5, prior=(3, 10))  # same shapes, other prior
    assert run_em._cache_size() == before


# ----------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"prior": (2, 1)}, "prior"),
        ({"prior": (0, 1)}, "prior"),
        ({"prior": 3}, "prior"),
        ({"max_iter": 0}, "max_iter"),
        ({"tol": -1.0}, "tol"),
        ({"run": "cpu"}, "run"),
    ],
)
def test_bad_options_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MODELS["DBN"]().fit(_small_log(), **kwargs)


def test_bad_sessions_raise():
    with pytest.raises(ValueError, match="Sessions"):
        MODELS["PBM"]().fit(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="0/1"):
        Sessions.from_arrays([0], [[1, 2]], [[2, 0]])
    with pytest.raises(ValueError, match="prefix"):
        Sessions.from_arrays([0], [[1, 2]], [[0, 0]], mask=[[False, True]])
    with pytest.raises(ValueError, match="length mismatch"):
        Sessions.from_arrays([0, 1], [[1, 2]], [[0, 0]])
    with pytest.raises(ValueError, match="empty"):
        Sessions.from_arrays(np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3)))
    with pytest.raises(ValueError, match="non-negative"):
        Sessions.from_arrays([0], [[1, 2]], [[0, 0]], weight=[-1.0])
    with pytest.raises(ValueError, match="padded"):
        Sessions.from_arrays([0], [[1, 2]], [[0, 1]], mask=[[True, False]])
    fitted = MODELS["PBM"]().fit(_small_log(), max_iter=2)
    longer = Sessions.from_arrays([0], [[0, 1, 2, 3]], [[0, 0, 0, 0]])
    with pytest.raises(ValueError, match="results per SERP"):
        fitted.predict_marginal(longer)
