"""NeuralCalibration (Pan et al., WWW 2020): scipy on the same objective, known-offset
simulations, monotonicity (hypothesis), save/load, jit, bad inputs."""

from __future__ import annotations

import hypothesis.strategies as st
import jax
import numpy as np
import pytest
from hypothesis import given, settings
from scipy import optimize
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal.calibrators import NeuralCalibration
from jaxcal.calibrators import _neural_core as core
from jaxcal.calibrators import neural as nm
from jaxcal.metrics import field_ece

KEY = jax.random.key(0)  # the initialisation's key (fit requires one)
B_TOL = 1e-4  # Adam (3000 cosine-decayed steps) vs SLSQP on the same convex problem
OBJ_TOL = 1e-6  # objective values, relative
OFFSET_TOL = 0.2  # recovered field offsets (n = 10,000: standard error ~0.07), in logits


def sigmoid(z):
    return 1 / (1 + np.exp(-z))


def knot_basis(logits, knots):
    """Hat-function basis: eta(l) = basis @ b (clamped beyond the end knots)."""
    k_max = len(knots) - 1
    lc = np.clip(logits, knots[0], knots[-1])
    k = np.clip(np.searchsorted(knots, lc, side="right") - 1, 0, k_max - 1)
    frac = (lc - knots[k]) / (knots[k + 1] - knots[k])
    basis = np.zeros((len(logits), k_max + 1))
    basis[np.arange(len(logits)), k] = 1 - frac
    basis[np.arange(len(logits)), k + 1] += frac
    return basis


def scipy_ilps(logits, labels, knots, lam, weights):
    """min mean_w logloss(B b) + lam * sum s_k  s.t. s_k >= b_k - b_{k+1}, s_k >= 0 (SLSQP)."""
    basis = knot_basis(logits, knots)
    k = len(knots)
    wn = weights / weights.sum()

    def fun(v):
        z = basis @ v[:k]
        return np.sum(wn * (np.logaddexp(0, z) - labels * z)) + lam * v[k:].sum()

    def jac(v):
        z = basis @ v[:k]
        g = np.empty_like(v)
        g[:k] = basis.T @ (wn * (sigmoid(z) - labels))
        g[k:] = lam
        return g

    diff = np.eye(k - 1, k) - np.eye(k - 1, k, 1)
    eye = np.eye(k - 1)
    cons = [
        {
            "type": "ineq",
            "fun": lambda v: v[k:] - diff @ v[:k],
            "jac": lambda v: np.hstack([-diff, eye]),
        },
        {"type": "ineq", "fun": lambda v: v[k:], "jac": lambda v: np.hstack([0 * diff, eye])},
    ]
    v0 = np.concatenate([knots, np.maximum(diff @ knots, 0)])
    res = optimize.minimize(
        fun, v0, jac=jac, constraints=cons, method="SLSQP", options={"ftol": 1e-15, "maxiter": 2000}
    )
    assert res.success, res.message
    return res.x[:k], res.fun


@pytest.fixture(scope="module")
def dip_data():
    """Logits whose true map dips on [0, 1] (so the isotonic penalty is active)."""
    rng = np.random.default_rng(0)
    n = 2000
    logits = rng.normal(0, 1.5, size=n)
    truth = sigmoid(logits - 1.5 * ((logits > 0) & (logits < 1)))
    labels = (rng.uniform(size=n) < truth).astype(float)
    weights = rng.uniform(0.5, 1.5, size=n)
    return logits, labels, weights


@pytest.mark.parametrize("lam", [0.0, 0.02])
def test_no_fields_matches_scipy_on_same_objective(dip_data, lam):
    logits, labels, weights = dip_data
    cal = NeuralCalibration(n_knots=8, isotonic_penalty=lam, n_steps=3000, learning_rate=0.05)
    fit = cal.fit(logits, labels, sample_weight=weights, key=KEY)
    b_ref, f_ref = scipy_ilps(logits, labels, np.asarray(fit.knots), lam, weights)
    np.testing.assert_allclose(np.asarray(fit.values), b_ref, atol=B_TOL)
    f = float(nm.objective(fit, logits, labels, sample_weight=weights, isotonic_penalty=lam))
    assert f <= f_ref * (1 + OBJ_TOL)
    # predictions are the piecewise-linear map of the scipy solution
    np.testing.assert_allclose(
        np.asarray(fit.predict(logits)),
        sigmoid(knot_basis(logits, np.asarray(fit.knots)) @ b_ref),
        atol=B_TOL,
    )
    if lam > 0:  # the penalty is active: the dip is flattened into a tie
        assert np.min(np.diff(b_ref)) > -1e-6
        assert np.min(np.diff(np.asarray(fit.values))) > -B_TOL


@pytest.fixture(scope="module")
def offset_sim():
    """Field 0 shifts the true logit by a known offset; field 1 is noise."""
    rng = np.random.default_rng(1)
    n = 10_000
    offsets = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])

    def draw(m):
        fields = np.stack([rng.integers(0, 5, m), rng.integers(0, 3, m)], axis=1)
        logits = rng.normal(0, 1.5, m)
        p = sigmoid(0.8 * logits + 0.3 + offsets[fields[:, 0]])
        return logits, (rng.uniform(size=m) < p).astype(float), fields, p

    return offsets, draw(n), draw(n)


def test_recovers_field_offsets_and_beats_global_isotonic(offset_sim):
    offsets, (logits, labels, fields), test = offset_sim[0], offset_sim[1][:3], offset_sim[2]
    fit = NeuralCalibration(n_steps=500).fit(logits, labels, fields, key=KEY)
    grid = np.stack([np.arange(5), np.zeros(5, int)], axis=1)
    g = np.asarray(fit.field_offset(grid))
    np.testing.assert_allclose(g - g[2], offsets - offsets[2], atol=OFFSET_TOL)
    # the noise field gets (almost) no offset
    g1 = np.asarray(fit.field_offset(np.stack([np.zeros(3, int), np.arange(3)], axis=1)))
    assert np.ptp(g1) < OFFSET_TOL
    # held-out Field-ECE: neural < global isotonic (scikit-learn), and near the truth's
    t_logits, t_labels, t_fields, t_p = test
    iso = IsotonicRegression(out_of_bounds="clip").fit(logits, labels)
    fe_iso = float(field_ece(np.clip(iso.predict(t_logits), 0, 1), t_labels, t_fields[:, 0]))
    fe_nc = float(field_ece(fit.predict(t_logits, t_fields), t_labels, t_fields[:, 0]))
    fe_true = float(field_ece(t_p, t_labels, t_fields[:, 0]))
    assert fe_nc < 0.5 * fe_iso, (fe_nc, fe_iso)
    assert fe_nc < fe_true + 0.01


@pytest.mark.slow
def test_minibatch_recovers_offsets_too(offset_sim):
    offsets, (logits, labels, fields) = offset_sim[0], offset_sim[1][:3]
    full = NeuralCalibration(n_steps=500).fit(logits, labels, fields, key=KEY)
    mini = NeuralCalibration(n_steps=500, batch_size=1024).fit(
        logits, labels, fields, key=jax.random.key(3)
    )
    g = np.asarray(mini.field_offset(np.stack([np.arange(5), np.zeros(5, int)], axis=1)))
    np.testing.assert_allclose(g - g[2], offsets - offsets[2], atol=OFFSET_TOL)
    f_full = float(nm.objective(full, logits, labels, fields))
    f_mini = float(nm.objective(mini, logits, labels, fields))
    assert f_full <= f_mini < 1.02 * f_full


@settings(max_examples=6, deadline=None)
@given(st.integers(0, 2**31 - 1), st.floats(-3.0, 3.0), st.floats(0.1, 3.0))
def test_hard_monotone_eta_is_increasing(seed, slope, spread):
    """Any data (even anti-monotone labels): monotone='hard' gives increasing eta."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, spread, size=64)
    labels = (rng.uniform(size=64) < sigmoid(slope * logits)).astype(float)
    labels[:2] = [0.0, 1.0]
    fields = rng.integers(0, 3, size=(64, 1))
    fit = NeuralCalibration(monotone="hard", n_knots=6, n_steps=40, hidden=(4,)).fit(
        logits, labels, fields, cardinalities=(3,), key=KEY
    )
    assert np.all(np.diff(np.asarray(fit.values)) > 0)
    grid = np.linspace(-4 * spread, 4 * spread, 101)
    for v in range(3):
        q = np.asarray(fit.predict(grid, np.full((101, 1), v)))
        assert np.all(np.diff(q) >= 0)


def test_save_load_jit_and_no_recompile(tmp_path, offset_sim):
    logits, labels, fields = (a[:2000] for a in offset_sim[1][:3])
    cal = NeuralCalibration(n_steps=50, hidden=(8, 4))
    fit = cal.fit(logits, labels, fields, key=KEY)
    fit.save(tmp_path / "nc.npz")
    back = jaxcal.load(tmp_path / "nc.npz")
    assert isinstance(back, nm.FittedNeuralCalibration)
    assert back.cardinalities == fit.cardinalities
    for a, b in zip(jax.tree.leaves(fit), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    want = np.asarray(fit.predict(logits, fields))
    np.testing.assert_array_equal(np.asarray(back.predict(logits, fields)), want)
    # the fitted object is a pytree usable inside jit
    jitted = jax.jit(lambda f, s, x: f.predict(s, x))
    np.testing.assert_allclose(np.asarray(jitted(fit, logits, fields)), want, rtol=1e-12)
    # a second fit with the same shapes reuses the compiled trainer
    before = core.train._cache_size()
    cal.fit(logits[::-1].copy(), labels[::-1].copy(), fields[::-1].copy(), key=KEY)
    assert core.train._cache_size() == before


def test_probability_scores_equal_logit_scores(dip_data):
    logits, labels, _ = dip_data
    probs = sigmoid(logits)
    a = NeuralCalibration(n_knots=5, n_steps=200).fit(logits, labels, key=KEY)
    b = NeuralCalibration(n_knots=5, n_steps=200, score_type="probability").fit(
        probs, labels, key=KEY
    )
    np.testing.assert_allclose(np.asarray(a.knots), np.asarray(b.knots), atol=1e-8)
    np.testing.assert_allclose(
        np.asarray(a.predict(logits)), np.asarray(b.predict(probs)), atol=1e-6
    )


def test_piecewise_linear_interpolates_and_clamps():
    knots = np.array([-1.0, 0.0, 2.0])
    values = np.array([0.5, 1.0, 3.0])
    x = np.array([-5.0, -1.0, -0.5, 0.0, 1.0, 2.0, 9.0])
    got = np.asarray(nm.piecewise_linear(x, knots, values))
    np.testing.assert_allclose(got, np.interp(x, knots, values), rtol=1e-12)


_L = np.array([0.1, -0.3, 0.5, 1.2])
_Y = np.array([0, 1, 0, 1])
_X = np.array([[0, 1], [1, 0], [2, 1], [0, 0]])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: NeuralCalibration().fit([0.1, np.nan, 0.2, 0.3], _Y, key=KEY), "non-finite"),
        (lambda: NeuralCalibration().fit(_L, [0, 2, 0, 1], key=KEY), "0/1"),
        (lambda: NeuralCalibration().fit(_L, [0, 0, 0, 0], key=KEY), "one class"),
        (lambda: NeuralCalibration().fit(_L, _Y[:3], key=KEY), "length mismatch"),
        (
            lambda: NeuralCalibration().fit(_L, _Y, sample_weight=[1, -1, 1, 1], key=KEY),
            "non-negative",
        ),
        (lambda: NeuralCalibration().fit(_L, _Y, _X[:3], key=KEY), "length mismatch"),
        (lambda: NeuralCalibration().fit(_L, _Y, _X - 1, key=KEY), "non-negative"),
        (lambda: NeuralCalibration().fit(_L, _Y, _X + 0.5, key=KEY), "integer"),
        (lambda: NeuralCalibration().fit(_L, _Y, _X, cardinalities=(2, 2), key=KEY), "cardinality"),
        (lambda: NeuralCalibration().fit(_L, _Y, _X, cardinalities=(3,), key=KEY), "cardinalities"),
        (lambda: NeuralCalibration().fit(np.ones(4), _Y, key=KEY), "constant"),
        (lambda: NeuralCalibration(score_type="probability").fit(_L + 1, _Y, key=KEY), r"\[0, 1\]"),
        (lambda: NeuralCalibration().fit(_L, _Y, loss="ips", key=KEY), "propensit"),
        (lambda: NeuralCalibration().fit(_L, _Y, key=None), "key is required"),
        (lambda: NeuralCalibration().fit(_L, _Y, key=0), "key must be a JAX PRNG key"),
        (lambda: NeuralCalibration().fit_pure(_L, _Y, key=0), "key must be a JAX PRNG key"),
        (lambda: NeuralCalibration().init_params(_L, (2,), key=None), "key is required"),
    ],
)
def test_bad_fit_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_fit_requires_a_key():
    with pytest.raises(TypeError, match="key"):
        NeuralCalibration().fit(_L, _Y)  # keyword-only, no default


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_knots": 1}, "n_knots"),
        ({"n_knots": 3.0}, "n_knots"),
        ({"monotone": "x"}, "monotone"),
        ({"isotonic_penalty": -1.0}, "isotonic_penalty"),
        ({"isotonic_penalty": float("nan")}, "isotonic_penalty"),
        ({"rank": 0}, "rank"),
        ({"hidden": [4]}, "hidden"),
        ({"hidden": (4, 0)}, "hidden"),
        ({"l2": -1e-3}, "l2"),
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"n_steps": 0}, "n_steps"),
        ({"batch_size": 0}, "batch_size"),
        ({"score_type": "odds"}, "score_type"),
    ],
)
def test_bad_hyperparameters_raise_when_made(kwargs, match):
    with pytest.raises(ValueError, match=match):
        NeuralCalibration(**kwargs)


def test_key_types_and_the_result_depend_on_the_key():
    """A typed key and the legacy raw key of the same seed give the same fit; another key
    another initialisation (so other fitted embeddings)."""
    cal = NeuralCalibration(n_knots=3, n_steps=5, hidden=(4,))
    typed = cal.fit(_L, _Y, _X, key=jax.random.key(1))
    raw = cal.fit(_L, _Y, _X, key=jax.random.PRNGKey(1))
    other = cal.fit(_L, _Y, _X, key=jax.random.key(2))
    np.testing.assert_array_equal(np.asarray(typed.embeddings), np.asarray(raw.embeddings))
    assert not np.allclose(np.asarray(typed.embeddings), np.asarray(other.embeddings))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_fitted_leaves_have_the_scores_dtype(dtype, dip_data):
    """float32 logits give a float32 calibrator (x64 is on in the tests), float64 a float64
    one; the float32 fit is the float64 fit to float32's accuracy (the same key, the same
    steps: Adam's rounding differs)."""
    logits, labels, _ = dip_data
    fields = (np.arange(logits.size) % 3)[:, None]
    cal = NeuralCalibration(n_knots=5, n_steps=100, hidden=(4,))
    fitted = cal.fit(logits.astype(dtype), labels, fields, key=KEY)
    floats = {a.dtype for a in jax.tree.leaves(fitted) if a.dtype.kind == "f"}
    assert floats == {np.dtype(dtype)}
    ref = cal.fit(logits, labels, fields, key=KEY)
    np.testing.assert_allclose(
        np.asarray(fitted.predict(logits, fields)),
        np.asarray(ref.predict(logits, fields)),
        # float32: Adam divides each step by the gradients' RMS, which carries their float32
        # rounding into the steps (9e-4 seen after 100 steps)
        atol=3e-3 if dtype == np.float32 else 0,
    )


def test_bad_predict_inputs_raise():
    fit = NeuralCalibration(n_steps=5).fit(_L, _Y, _X, key=KEY)
    with pytest.raises(ValueError, match="fields=None|pass fields"):
        fit.predict(_L)
    with pytest.raises(ValueError, match="cardinality"):
        fit.predict(_L, _X + 5)
    with pytest.raises(ValueError, match="column"):
        fit.predict(_L, _X[:, :1])
    with pytest.raises(ValueError, match="non-finite"):
        fit.predict(np.array([np.nan, 0, 0, 0]), _X)
    plain = NeuralCalibration(n_steps=5).fit(_L, _Y, key=KEY)
    with pytest.raises(ValueError, match="without fields"):
        plain.predict(_L, _X)
