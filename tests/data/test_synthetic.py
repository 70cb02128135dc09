"""The preference simulator: its stated generative model, reproducibility and the IPS effect."""

from __future__ import annotations

import importlib.util

import jax
import numpy as np
import pytest

import jaxcal
from jaxcal.data import SyntheticData, simulate_preferences
from jaxcal.metrics import auc, ece

TOL = 1e-10
Z = 4.5  # z-score bound for statistical checks at fixed seeds (two-sided p ~ 7e-6)


# Two grid shapes only: every new (n_users, n_items) compiles the simulator once.
BIG = {"n_users": 120, "n_items": 200}
SMALL = {"n_users": 20, "n_items": 300}
KEY = jax.random.key(0)


@pytest.fixture(scope="module")
def data() -> SyntheticData:
    return simulate_preferences(**BIG, key=jax.random.key(0))


def _np(x):
    return np.asarray(x)


def test_shapes_and_pair_indices(data):
    n = 120 * 200
    assert data.n_pairs == n
    for name in ("users", "items", "true_prob", "relevance", "propensity", "exposure",
                 "clicks", "scores"):  # fmt: skip
        assert getattr(data, name).shape == (n,), name
    # pair k is (k // n_items, k % n_items)
    np.testing.assert_array_equal(_np(data.users), np.arange(n) // 200)
    np.testing.assert_array_equal(_np(data.items), np.arange(n) % 200)
    assert data.item_popularity.shape == data.item_counts.shape == (200,)


def test_identities(data):
    np.testing.assert_array_equal(_np(data.clicks), _np(data.exposure) * _np(data.relevance))
    for name in ("relevance", "exposure"):
        assert set(np.unique(_np(getattr(data, name)))) <= {0.0, 1.0}
    counts = np.bincount(_np(data.items), weights=_np(data.clicks), minlength=200)
    np.testing.assert_array_equal(_np(data.item_counts), counts)
    # the offsets are solved so that the stated means hold on the realised factors
    assert abs(float(data.true_prob.mean()) - 0.1) < 1e-9
    assert abs(float(data.propensity.mean()) - 0.2) < 1e-9
    assert float(data.propensity.min()) >= 0.02 - 1e-15
    assert float(data.propensity.max()) <= 1.0


@pytest.mark.parametrize(("draw", "prob"), [("relevance", "true_prob"), ("exposure", "propensity")])
def test_bernoulli_draws_follow_their_probabilities(data, draw, prob):
    x, p = _np(getattr(data, draw)), _np(getattr(data, prob))
    # overall and within deciles of p: sum(x - p) / sqrt(sum p(1-p)) is ~N(0, 1)
    order = np.argsort(p)
    for part in [order, *np.array_split(order, 10)]:
        z = (x[part] - p[part]).sum() / np.sqrt((p[part] * (1 - p[part])).sum())
        assert abs(z) < Z, (draw, z)


def test_exposure_is_popularity_driven_closed_form():
    d = simulate_preferences(**SMALL, key=jax.random.key(3), exposure_relevance=0.0,
                             popularity_power=1.2, min_propensity=0.01)  # fmt: skip
    omega = _np(d.propensity).reshape(20, 300)
    # without the relevance term, the propensity depends on the item only ...
    np.testing.assert_allclose(omega, np.broadcast_to(omega[0], omega.shape), rtol=0, atol=0)
    # ... and logit(omega_i) - log q_i is one constant c_o wherever the floor is not active
    q = _np(d.item_popularity)
    free = omega[0] > 0.01 + 1e-9
    c = np.log(omega[0][free] / (1 - omega[0][free])) - np.log(q[free])
    assert free.sum() > 50 and np.ptp(c) < 1e-8
    # q is a Zipf law over a permutation of ranks 1..n_items
    np.testing.assert_allclose(np.sort(q)[::-1], np.arange(1, 301) ** -1.2, rtol=1e-12)


def test_exposure_correlates_with_relevance_when_asked(data):
    omega = _np(data.propensity)
    ranks = np.argsort(np.argsort(-_np(data.item_popularity)))[_np(data.items)]
    logit = np.log(omega / (1 - omega))
    free = omega > 0.02 + 1e-9
    # logit(omega) + alpha log(rank) = c_o + gamma * x, and x is an affine map of logit(r)
    residual = logit[free] + 1.0 * np.log(ranks[free] + 1.0)
    x = np.log(_np(data.true_prob) / (1 - _np(data.true_prob)))[free]
    slope = np.polyfit(x, residual, 1)[0]
    assert abs(slope - 0.5 / 2.0) < 1e-8  # gamma / beta
    # MNAR: clicked pairs sit on more popular items than relevant pairs do
    pop = _np(data.item_popularity)[_np(data.items)]
    clicked, relevant = _np(data.clicks) == 1, _np(data.relevance) == 1
    assert pop[clicked].mean() > 1.5 * pop[relevant].mean()


def test_scores_are_the_stated_distortion_of_the_true_logit():
    d = simulate_preferences(**SMALL, key=jax.random.key(4), score_noise=0.0,
                             score_distortion=0.8, score_scale=2.5, score_shift=-1.0)  # fmt: skip
    r = _np(d.true_prob)
    logit = np.log(r) - np.log1p(-r)
    np.testing.assert_allclose(_np(d.scores), 2.5 * np.arcsinh(0.8 * logit) / 0.8 - 1.0,
                               rtol=1e-9, atol=1e-9)  # fmt: skip
    # monotone: the noiseless scores rank pairs exactly like the truth
    assert abs(float(auc(d.scores, d.relevance)) - float(auc(d.true_prob, d.relevance))) < TOL
    plain = simulate_preferences(**SMALL, key=jax.random.key(4), score_noise=0.0,
                                 score_distortion=0.0)  # fmt: skip
    np.testing.assert_allclose(_np(plain.scores), logit, rtol=1e-9, atol=1e-9)


def _expected_auc(true_prob, noise, rng, n_draws=2_000_000):
    """Oracle: AUC the simulator's scores should reach, from the generative model alone.

    s is a strictly increasing map of l + tau * eps (l the true logit), so for a random
    positive i and negative j, P(s_i > s_j) = Phi((l_i - l_j) / (sqrt(2) tau)). Averaged over
    pairs weighted by P(R_i = 1, R_j = 0) = r_i (1 - r_j) (Monte Carlo over random pairs):
    E[AUC] ~ E[r_i (1 - r_j) Phi(...)] / E[r_i (1 - r_j)].
    """
    from scipy.stats import norm

    r = np.asarray(true_prob)
    logit = np.log(r) - np.log1p(-r)
    i, j = rng.integers(0, r.size, (2, n_draws))
    pair = r[i] * (1 - r[j])
    return (pair * norm.cdf((logit[i] - logit[j]) / (np.sqrt(2) * noise))).mean() / pair.mean()


@pytest.mark.parametrize("noise", [0.7, 2.0])
def test_score_auc_matches_the_configured_noise(data, noise):
    d = data if noise == 0.7 else simulate_preferences(**BIG, key=KEY, score_noise=noise)
    expected = _expected_auc(d.true_prob, noise, np.random.default_rng(0))
    got = float(auc(d.scores, d.relevance))
    # sampling sd of an AUC at ~2,400 positives is ~0.005; the Monte Carlo error ~3e-4
    assert abs(got - expected) < 0.02, (got, expected)


def test_noisy_scores_discriminate_less_than_truth(data):
    a_truth = float(auc(data.true_prob, data.relevance))
    a_scores = float(auc(data.scores, data.relevance))
    assert 0.6 < a_scores < a_truth


def test_reproducible_from_the_key():
    """The same key (typed or legacy raw) gives the same data; another key other data."""
    a = simulate_preferences(**SMALL, key=jax.random.key(7))
    b = simulate_preferences(**SMALL, key=jax.random.PRNGKey(7))
    c = simulate_preferences(**SMALL, key=jax.random.key(8))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(_np(a.scores), _np(c.scores))


def test_save_load_round_trip(tmp_path, data):
    data.save(tmp_path / "sim.npz")
    back = jaxcal.load(tmp_path / "sim.npz")
    assert type(back) is SyntheticData and back.settings == data.settings
    assert (back.n_users, back.n_items) == (120, 200)
    for x, y in zip(jax.tree.leaves(data), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(x, y)


def test_split(data):
    s1 = data.split(validation_fraction=0.3, key=jax.random.key(5))
    s2 = data.split(validation_fraction=0.3, key=jax.random.key(5))
    s3 = data.split(validation_fraction=0.3, key=jax.random.key(6))
    np.testing.assert_array_equal(s1.validation, s2.validation)
    assert not np.array_equal(s1.validation, s3.validation)
    assert s1.validation.size == round(0.3 * data.n_pairs)
    both = np.concatenate([s1.validation, s1.test])
    np.testing.assert_array_equal(np.sort(both), np.arange(data.n_pairs))
    # the documented draw: the first 30% of NumPy's permutation seeded by the key's integer
    perm = np.random.default_rng(5).permutation(data.n_pairs)
    np.testing.assert_array_equal(s1.validation, np.sort(perm[: s1.validation.size]))
    with pytest.raises(ValueError, match="validation_fraction"):
        data.split(validation_fraction=1.0, key=jax.random.key(0))
    with pytest.raises(ValueError, match="empty"):
        data.split(validation_fraction=1e-6, key=jax.random.key(0))
    with pytest.raises(TypeError, match="key"):
        data.split(validation_fraction=0.5)  # key is required
    with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
        data.split(validation_fraction=0.5, key=0)


def _fit_ece(cal, data, split, loss):
    v, t = split
    kw = {} if loss == "naive" else {"propensity": _np(data.propensity)[v]}
    fitted = cal.fit(_np(data.scores)[v], _np(data.clicks)[v], loss=loss, **kw)
    return float(ece(fitted.predict(_np(data.scores)[t]), _np(data.relevance)[t]))


_CALIBRATORS = [("PlattScaling", "platt")]
if importlib.util.find_spec("jaxcal.calibrators.gaussian") is not None:
    _CALIBRATORS.append(("GaussianCalibration", "gaussian"))


@pytest.mark.parametrize(("name", "module"), _CALIBRATORS)
def test_ips_with_true_propensities_beats_naive(data, name, module):
    split = data.split(validation_fraction=0.5, key=jax.random.key(0))
    cal = getattr(jaxcal, name)()
    naive = _fit_ece(cal, data, split, "naive")
    ips = _fit_ece(cal, data, split, "ips")
    # naive fits P(click | s) = E[omega r | s], about exposure_rate times too low
    assert naive > 0.04
    assert ips < 0.5 * naive, (naive, ips)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"n_users": 5, "n_items": 5, "key": None}, "key is required"),
        ({"n_users": 5, "n_items": 5, "key": 0}, "key must be a JAX PRNG key"),
        ({"n_users": 5, "n_items": 5, "key": jax.random.split(KEY)}, "a single PRNG key"),
        ({"n_users": 0, "n_items": 5}, "n_users"),
        ({"n_users": 5, "n_items": 1}, "n_items"),
        ({"n_users": 5, "n_items": 5, "base_rate": 1.5}, "base_rate"),
        ({"n_users": 5, "n_items": 5, "exposure_rate": 0.01}, "exposure_rate"),
        ({"n_users": 5, "n_items": 5, "min_propensity": 0.0}, "min_propensity"),
        ({"n_users": 5, "n_items": 5, "score_noise": -1.0}, "score_noise"),
        ({"n_users": 5, "n_items": 5, "score_scale": 0.0}, "score_scale"),
    ],
)
def test_bad_parameters_raise(kwargs, match):
    kwargs = {"key": KEY, **kwargs}
    with pytest.raises(ValueError, match=match):
        simulate_preferences(**kwargs)


def test_seed_is_not_a_keyword():
    with pytest.raises(TypeError, match="seed"):
        simulate_preferences(n_users=5, n_items=5, seed=0)
