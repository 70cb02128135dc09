"""The pure core (jaxcal.clicks.core) against oracles: the estimators on the same log, M-steps
on posteriors from enumerating every hidden state, a Python loop over logs (vmap), the
program before and after export, finite differences (gradients), and the stationarity of
the log posterior at a fixed point of exact EM."""

from __future__ import annotations

import dataclasses
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal.clicks import (
    DBN,
    GCTR,
    MODELS,
    PBM,
    SDBN,
    PairIndex,
    SessionArrays,
    Sessions,
    click_log_likelihood,
    em_step,
    encode_sessions,
    example_params,
    fit_arrays,
    init_params,
    log_posterior,
    predict_conditional,
    predict_marginal,
    relevance,
    simulate,
)

from .test_fitting import _bruteforce_em_step, _init, _small_log

EXACT = 1e-12  # float64 rounding of the same arithmetic
CLOSE = 1e-10  # float64, the same iterates summed in another order (50 EM iterations)
FD = 1e-6  # central finite differences with step 1e-5 (error O(h^2) + rounding / h)
EM_MODELS = ["PBM", "UBM", "DBN", "CCM"]


def _log(name, seed, n_sessions=300, n_queries=3, n_results=5):
    params = example_params(name, n_queries=n_queries, n_results=n_results, key=jax.random.key(0))
    return simulate(name, params, n_sessions, key=jax.random.key(seed))


def _max_gap(a: dict, b: dict) -> float:
    return max(float(np.max(np.abs(np.asarray(a[k]) - np.asarray(b[k])))) for k in a)


# ----------------------------------------------------------------- the estimator as oracle
@pytest.mark.parametrize("name", sorted(MODELS))
def test_jitted_core_equals_the_estimator(name):
    """fit_arrays under jit gives the estimator's parameters, iteration count and objective
    trace; the pure predictions on a test log (with pairs unseen in training) equal the
    fitted model's."""
    model = MODELS[name]()
    log, test = _log(name, 0), _log(name, 1, n_sessions=100)
    # half of the test SERPs for queries never seen in training: pairs unseen in training
    test = Sessions(test.query + 1000 * (np.arange(100) % 2), *dataclasses.astuple(test)[1:])
    fitted = model.fit(log, prior=(2.0, 5.0), max_iter=30, tol=1e-8)
    arrays, pairs = encode_sessions(log.deduplicate())
    np.testing.assert_array_equal(pairs.query, fitted.pair_query)
    np.testing.assert_array_equal(pairs.doc, fitted.pair_doc)
    result = jax.jit(partial(fit_arrays, model, prior=(2.0, 5.0), max_iter=30, tol=1e-8))(arrays)
    assert _max_gap(fitted.params, result.params) < CLOSE
    assert int(result.n_iter) == int(fitted.n_iter)
    np.testing.assert_allclose(result.history, fitted.history, rtol=CLOSE, equal_nan=True)

    test_arrays, _ = encode_sessions(test, pairs=pairs)
    assert (test_arrays.pair_ids[test_arrays.mask] == len(pairs.query)).any()  # unseen pairs
    for pure, method in (
        (predict_conditional, fitted.predict_conditional),
        (predict_marginal, fitted.predict_marginal),
    ):
        got = jax.jit(partial(pure, model))(result.params, test_arrays)
        np.testing.assert_allclose(got, method(test), rtol=CLOSE, atol=EXACT)
    if name not in ("GCTR", "RCTR"):
        rel = np.asarray(relevance(model, result.params, test_arrays))
        q = np.broadcast_to(test.query[:, None], test.doc.shape)
        want = fitted.pair_value("alpha", q, test.doc)
        if "sigma" in fitted.params:  # DBN, SDBN: a satisfied click
            want = want * fitted.pair_value("sigma", q, test.doc)
        np.testing.assert_allclose(rel, np.where(test.mask, want, 0.0), rtol=CLOSE, atol=EXACT)


# ----------------------------------------------------------------- enumeration as oracle
@pytest.mark.parametrize("name", EM_MODELS)
def test_em_steps_equal_bruteforce_m_steps(name):
    """Two em_step calls from init_params equal two M-steps on posteriors from enumerating
    every hidden state; the objective each returns is log_posterior of its input."""
    prior = (2.0, 7.0)
    model = MODELS[name]()
    log = _small_log(3)
    arrays, pairs = encode_sessions(log)
    params = init_params(model, arrays)
    theta = _init(name, log.n_results)
    step = jax.jit(partial(em_step, model, prior=prior))
    objective = jax.jit(partial(log_posterior, model, prior=prior))
    for _ in range(2):
        before = params
        params, value = step(params, arrays)
        theta = _bruteforce_em_step(name, log, theta, prior)
        np.testing.assert_allclose(float(value), float(objective(before, arrays)), rtol=CLOSE)
        keys = list(zip(pairs.query.tolist(), pairs.doc.tolist(), strict=True))
        want = [theta["alpha"][k] for k in keys]
        np.testing.assert_allclose(params["alpha"][:-1], want, atol=EXACT)
        if name == "DBN":
            want = [theta["sigma"][k] for k in keys]
            np.testing.assert_allclose(params["sigma"][:-1], want, atol=EXACT)
        key = "tau" if name == "CCM" else "gamma"
        got, want = np.asarray(params[key]), np.asarray(theta[key])
        used = np.tril(np.ones_like(want, bool)) if name == "UBM" else np.ones_like(want, bool)
        np.testing.assert_allclose(got[used], want[used], atol=EXACT)


def test_fixed_iterations_equal_the_while_loop_and_a_loop_of_em_steps():
    """tol=None (a scan) runs the iterates of tol=0 (the while loop) and of em_step in a
    Python loop, with the same objective trace."""
    model, n_iter = DBN(), 7
    arrays, _ = encode_sessions(_log("DBN", 2))
    scan = fit_arrays(model, arrays, max_iter=n_iter, tol=None)
    loop = fit_arrays(model, arrays, max_iter=n_iter, tol=0.0)
    assert int(scan.n_iter) == int(loop.n_iter) == n_iter
    assert _max_gap(scan.params, loop.params) < EXACT
    np.testing.assert_allclose(scan.history, loop.history, rtol=EXACT)
    params, trace = init_params(model, arrays), []
    step = jax.jit(partial(em_step, model))
    for _ in range(n_iter):
        params, value = step(params, arrays)
        trace.append(float(value))
    assert _max_gap(params, scan.params) < EXACT
    np.testing.assert_allclose(scan.history, trace, rtol=EXACT)


# ----------------------------------------------------------------- vmap: a loop as oracle
@pytest.mark.parametrize("name", ["DBN", "SDBN"])  # a while loop; a closed form
def test_vmap_over_logs_equals_a_loop(name):
    """Three logs of different sizes, padded to one shape and stacked: the vmapped fit (and
    its marginal predictions) equals a Python loop of fits on the unpadded logs."""
    model = MODELS[name]()
    logs = [_log(name, seed, n_sessions=150 + 60 * seed) for seed in range(3)]
    encoded = [encode_sessions(log, n_sessions=300, n_pairs=64)[0] for log in logs]
    stacked = jax.tree.map(lambda *x: np.stack(x), *encoded)

    def fit_predict(arrays, prior):
        result = fit_arrays(model, arrays, prior=prior, max_iter=40, tol=1e-9)
        return result, predict_marginal(model, result.params, arrays)

    priors = np.array([[1.0, 2.0], [2.0, 5.0], [1.0, 3.0]])
    batched, probs = jax.jit(jax.vmap(fit_predict))(stacked, priors)
    pair_params = model.fitted_class.pair_params()
    for i, log in enumerate(logs):
        arrays, pairs = encode_sessions(log)  # its own shapes: no padding
        alone = fit_arrays(model, arrays, prior=tuple(priors[i]), max_iter=40, tol=1e-9)
        P1 = len(pairs.query) + 1
        for k, v in alone.params.items():
            got = batched.params[k][i][:P1] if k in pair_params else batched.params[k][i]
            np.testing.assert_allclose(got, v, rtol=CLOSE, atol=EXACT)
        assert int(batched.n_iter[i]) == int(alone.n_iter)
        np.testing.assert_allclose(batched.history[i], alone.history, rtol=CLOSE, equal_nan=True)
        S, n = log.n_sessions, log.n_results
        want = predict_marginal(model, alone.params, arrays)
        np.testing.assert_allclose(probs[i][:S, :n], want, rtol=CLOSE, atol=EXACT)


# ----------------------------------------------------------------- export
def test_export_round_trip(tmp_path):
    """A fit and its predictions exported, serialized to bytes, read back and called on a
    log the export never saw give the numbers of the function itself."""
    model = DBN()
    logs = [_log("DBN", seed, n_sessions=200) for seed in (3, 4)]
    first, second = (encode_sessions(log, n_sessions=256, n_pairs=64)[0] for log in logs)

    def fit_predict(arrays):
        result = fit_arrays(model, arrays, max_iter=25, tol=1e-8)
        return result, predict_conditional(model, result.params, arrays)

    exported = jax.export.export(jax.jit(fit_predict))(first)
    path = tmp_path / "dbn_fit.bin"
    path.write_bytes(exported.serialize())
    restored = jax.export.deserialize(bytearray(path.read_bytes()))
    (result, probs), (want, want_probs) = restored.call(second), fit_predict(second)
    assert isinstance(result.params, dict) and set(result.params) == set(want.params)
    assert _max_gap(result.params, want.params) < EXACT
    assert int(result.n_iter) == int(want.n_iter)
    np.testing.assert_allclose(probs, want_probs, rtol=EXACT, atol=EXACT)


# ----------------------------------------------------------------- gradients
def _interior_params(model, arrays, seed):
    rng = np.random.default_rng(seed)
    return {
        k: rng.uniform(0.2, 0.8, np.shape(v)).astype(v.dtype)
        for k, v in init_params(model, arrays).items()
    }


def _finite_differences(f, params, h=1e-5):
    out = {}
    for k, v in params.items():
        flat = np.asarray(v, np.float64).reshape(-1)
        g = np.zeros_like(flat)
        for i in range(flat.size):
            up, down = flat.copy(), flat.copy()
            up[i] += h
            down[i] -= h
            plus = f({**params, k: up.reshape(np.shape(v))})
            minus = f({**params, k: down.reshape(np.shape(v))})
            g[i] = (float(plus) - float(minus)) / (2 * h)
        out[k] = g.reshape(np.shape(v))
    return out


@pytest.mark.parametrize("name", EM_MODELS)
def test_gradient_of_the_log_likelihood_equals_finite_differences(name):
    model = MODELS[name]()
    arrays, _ = encode_sessions(_small_log(4, n_sessions=30).deduplicate())
    params = _interior_params(model, arrays, 0)
    loglik = jax.jit(partial(click_log_likelihood, model))
    grad = jax.jit(jax.grad(partial(click_log_likelihood, model)))(params, arrays)
    numeric = _finite_differences(lambda p: loglik(p, arrays), params)
    for k in params:
        np.testing.assert_allclose(grad[k], numeric[k], rtol=FD, atol=FD)


# exact EM (and the exact closed-form MAP estimates) stop where the log posterior is flat
STATIONARY = ["PBM", "UBM", "DBN", "CCM", "GCTR", "RCTR", "DCTR", "CM"]


@pytest.mark.parametrize("name", STATIONARY)
def test_the_fitted_parameters_are_a_stationary_point(name):
    """At a fixed point of exact EM the gradient of the log posterior is 0: the gradient of
    the log-likelihood is cancelled by the prior's, ``a / theta - (b - a) / (1 - theta)``
    (a closed form), entry by entry. DCM's and SDBN's published closed forms are
    approximate and are not stationary, so they are not in the list."""
    a, b = prior = (2.0, 5.0)
    model = MODELS[name]()
    arrays, _ = encode_sessions(_log(name, 5, n_sessions=200, n_results=4).deduplicate())
    result = fit_arrays(model, arrays, prior=prior, max_iter=5000, tol=1e-14)
    assert not model.uses_em or int(result.n_iter) < 5000
    params = result.params
    grad_ll = jax.jit(jax.grad(partial(click_log_likelihood, model)))(params, arrays)
    grad_post = jax.jit(jax.grad(partial(log_posterior, model, prior=prior)))(params, arrays)
    scale = 1e-8 * float(np.sum(arrays.weight))  # the gradient of a sum over sessions
    for k, theta in params.items():
        theta = np.asarray(theta)
        prior_grad = a / theta - (b - a) / (1.0 - theta)
        np.testing.assert_allclose(grad_ll[k], -prior_grad, atol=scale)
        np.testing.assert_allclose(grad_post[k], 0.0, atol=scale)


@pytest.mark.parametrize("name", ["DCM", "SDBN"])
def test_the_approximate_closed_forms_are_not_stationary(name):
    """DCM's and SDBN's published closed forms take the last click for the end of the
    session; on logs of their own models, whose users go on after a click, the log
    posterior is not flat at their estimates (the oracle above would catch a wrong one)."""
    prior = (2.0, 5.0)
    model = MODELS[name]()
    arrays, _ = encode_sessions(_log(name, 5, n_sessions=200, n_results=4).deduplicate())
    params = fit_arrays(model, arrays, prior=prior).params
    grad = jax.grad(partial(log_posterior, model, prior=prior))(params, arrays)
    largest = max(float(np.max(np.abs(g))) for g in grad.values())
    assert largest > 1e-3 * float(np.sum(arrays.weight))


def test_gradient_through_the_fit_equals_finite_differences():
    """The fitted click probabilities differentiated through EM (tol=None: reverse mode)
    with respect to the session weights and the prior, and through the while loop
    (forward mode), equal central finite differences."""
    model = DBN()
    train, _ = encode_sessions(_log("DBN", 6, n_sessions=120, n_results=4).deduplicate())
    test, _ = encode_sessions(_log("DBN", 7, n_sessions=40, n_results=4))
    test = test._replace(pair_ids=np.minimum(test.pair_ids, train.pair_mask.size - 1))

    def mean_click(weight, prior, tol=None):
        arrays = train._replace(weight=weight)
        params = fit_arrays(model, arrays, prior=prior, max_iter=6, tol=tol).params
        return jnp.mean(predict_marginal(model, params, test))

    weight, prior = jnp.asarray(train.weight), jnp.array([1.5, 4.0])
    grad_w, grad_p = jax.jit(jax.grad(mean_click, argnums=(0, 1)))(weight, prior)
    f = jax.jit(mean_click)
    h = 1e-5
    for i in (0, 3, 7):
        e = np.zeros(weight.shape)
        e[i] = h
        numeric = (f(weight + e, prior) - f(weight - e, prior)) / (2 * h)
        np.testing.assert_allclose(grad_w[i], numeric, rtol=FD, atol=FD)
    for j in (0, 1):
        e = np.zeros(2)
        e[j] = h
        numeric = (f(weight, prior + e) - f(weight, prior - e)) / (2 * h)
        np.testing.assert_allclose(grad_p[j], numeric, rtol=FD, atol=FD)
    # forward mode through the while loop: it runs the same 6 iterations at tol=0
    direction = np.zeros(weight.shape)
    direction[:5] = 1.0
    _, tangent = jax.jvp(lambda w: mean_click(w, prior, tol=0.0), (weight,), (direction,))
    numeric = (f(weight + h * direction, prior) - f(weight - h * direction, prior)) / (2 * h)
    np.testing.assert_allclose(tangent, numeric, rtol=FD, atol=FD)


# ----------------------------------------------------------------- compiles
def test_another_log_of_the_same_shape_and_another_prior_compile_nothing(compiles):
    model = PBM()
    first, second = (
        encode_sessions(_log("PBM", 8, n_sessions=n), n_sessions=160, n_pairs=64)[0]
        for n in (100, 130)
    )
    fit_arrays(model, first, max_iter=10)
    predict_marginal(model, fit_arrays(model, first, max_iter=10).params, first)
    with compiles() as c:
        result = fit_arrays(model, second, prior=(3.0, 10.0), max_iter=10)
        predict_marginal(model, result.params, second)
    assert c.count == 0


# ----------------------------------------------------------------- encoding and bad input
def test_encode_sessions_layout():
    log = _small_log(6)
    arrays, pairs = encode_sessions(log, n_sessions=50, n_results=5, n_pairs=20)
    S, n, P = log.n_sessions, log.n_results, len(pairs.query)
    assert arrays.pair_ids.shape == (50, 5) and arrays.pair_mask.shape == (20,)
    assert arrays.pair_mask.sum() == P + 1 and arrays.pair_mask[: P + 1].all()
    q = np.broadcast_to(log.query[:, None], log.doc.shape)
    ids = arrays.pair_ids[:S, :n]
    np.testing.assert_array_equal(pairs.query[ids[log.mask]], q[log.mask])
    np.testing.assert_array_equal(pairs.doc[ids[log.mask]], log.doc[log.mask])
    assert (ids[~log.mask] == P).all() and (arrays.pair_ids[S:] == P).all()
    assert (arrays.pair_ids[:, n:] == P).all() and not arrays.mask[:, n:].any()
    assert not arrays.mask[S:].any() and (arrays.weight[S:] == 0).all()
    np.testing.assert_array_equal(arrays.clicks[:S, :n], log.clicks)
    other, same = encode_sessions(log[:5], pairs=pairs)
    assert same is not pairs and np.array_equal(same.query, pairs.query)
    np.testing.assert_array_equal(other.pair_ids, arrays.pair_ids[:5, :n])


def _arrays():
    return encode_sessions(_small_log(7))[0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: fit_arrays(DBN(), a, prior=(2, 1)), "prior"),
        (lambda a: fit_arrays(DBN(), a, prior={"beta": (1, 2)}), "beta"),
        (lambda a: fit_arrays(DBN(), a, max_iter=0), "max_iter"),
        (lambda a: fit_arrays(DBN(), a, tol=-1.0), "tol"),
        (lambda a: fit_arrays("DBN", a), "click model"),
        (lambda a: fit_arrays(DBN(), a._replace(pair_ids=a.pair_ids + 100)), "pair_ids"),
        (lambda a: fit_arrays(DBN(), a._replace(clicks=2 * a.clicks)), "0/1"),
        (lambda a: fit_arrays(DBN(), a._replace(weight=-a.weight)), "weight"),
        (lambda a: fit_arrays(DBN(), a._replace(weight=a.weight[:3])), "weight"),
        (lambda a: fit_arrays(DBN(), tuple(a)), "SessionArrays"),
        (lambda a: em_step(SDBN(), init_params(SDBN(), a), a), "closed form"),
        (lambda a: relevance(GCTR(), {"rho": 0.5}, a), "no query-document"),
        (lambda a: encode_sessions(_small_log(7), n_pairs=3), "n_pairs"),
        (lambda a: encode_sessions(_small_log(7), n_sessions=2), "n_sessions"),
        (lambda a: encode_sessions(_small_log(7), pairs=PairIndex([1, 0], [0, 0])), "sorted"),
    ],
)
def test_bad_input_raises_eagerly(call, message):
    with pytest.raises(ValueError, match=message):
        call(_arrays())


def test_bad_input_inside_a_trace_gives_nan():
    """Where nothing can raise, an invalid log or prior gives NaN, not a plausible fit."""
    arrays = _arrays()
    fit = jax.jit(lambda a, prior: fit_arrays(DBN(), a, prior=prior, max_iter=5))
    good = fit(arrays, jnp.array([1.0, 2.0]))
    assert all(np.isfinite(v).all() for v in good.params.values())
    bad = [
        (arrays._replace(pair_ids=arrays.pair_ids + 100), [1.0, 2.0]),
        (arrays._replace(weight=-arrays.weight), [1.0, 2.0]),
        (arrays._replace(clicks=2 * arrays.clicks), [1.0, 2.0]),
        (arrays, [2.0, 1.0]),
    ]
    for a, prior in bad:
        result = fit(a, jnp.array(prior))
        assert all(np.isnan(v).all() for v in result.params.values())
        assert np.isnan(result.history).all()


def test_session_arrays_is_a_pytree_of_five_arrays():
    arrays = _arrays()
    assert isinstance(arrays, SessionArrays) and len(jax.tree.leaves(arrays)) == 5
    assert isinstance(encode_sessions(_small_log(7))[1], PairIndex)
