"""Score models fitted inside ``jit`` and ``vmap``: the same parameters as the eager
``fit`` (the oracle: validated, padded, fitted on the host's inputs), and NaN parameters for
data ``fit`` refuses (the NaN policy of the pure fits)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal import scoremodels

RTOL = 1e-8  # float64, the same closed forms or iterations on unpadded data
ATOL = 1e-10

MODELS = [
    "GaussianScoreModel",
    "EqualVarianceGaussianScoreModel",
    "GammaScoreModel",
    "ExponentialScoreModel",
    "ManmathaScoreModel",
    "KanoulasScoreModel",
    "GaussianMixtureScoreModel",
]


def _data(n=200, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, n).astype(float)
    y[:2] = (0.0, 1.0)
    s = rng.gamma(2.0 + 2.0 * y, 0.5)  # positive: in every model's support
    w = rng.uniform(0.5, 1.5, n)
    return s, y, w


def _floats(params):
    return {
        f.name: np.asarray(getattr(params, f.name))
        for f in dataclasses.fields(params)
        if np.issubdtype(np.asarray(getattr(params, f.name)).dtype, np.floating)
    }


@pytest.mark.parametrize("name", MODELS)
def test_jit_matches_eager(name):
    model = getattr(scoremodels, name)()
    s, y, w = _data()
    eager = _floats(model.fit(s, y, sample_weight=w))
    traced = _floats(jax.jit(lambda s, y, w: model.fit(s, y, sample_weight=w))(s, y, w))
    assert eager.keys() == traced.keys()
    for k in eager:
        np.testing.assert_allclose(traced[k], eager[k], rtol=RTOL, atol=ATOL, err_msg=k)


def test_vmap_matches_loop():
    model = scoremodels.GammaScoreModel()
    data = [_data(100, seed) for seed in range(3)]
    S, Y = (np.stack([d[i] for d in data]) for i in range(2))
    batched = jax.vmap(model.fit)(S, Y)
    for b, (s, y, _) in enumerate(data):
        eager = _floats(model.fit(s, y))
        for k, v in eager.items():
            np.testing.assert_allclose(np.asarray(getattr(batched, k))[b], v, rtol=RTOL, atol=ATOL)


def test_gamma_shape_derivative_matches_finite_differences():
    """The Gamma shape solves log a - digamma(a) = s by Newton iterations; its derivative is
    the implicit one (forward and reverse mode), checked against central differences."""
    model = scoremodels.GammaScoreModel()
    s, y, _ = _data(120, seed=3)
    v = np.random.default_rng(4).normal(size=120)

    def shapes(x):
        p = model.fit(x, y)
        return jnp.stack([p.alpha0, p.alpha1, p.beta0, p.beta1])

    _, tangent = jax.jvp(jax.jit(shapes), (s,), (v,))
    eps = 1e-6
    fd = (np.asarray(jax.jit(shapes)(s + eps * v)) - np.asarray(jax.jit(shapes)(s - eps * v))) / (
        2 * eps
    )
    np.testing.assert_allclose(np.asarray(tangent), fd, rtol=1e-5, atol=1e-8)
    r = np.array([1.0, -2.0, 0.5, 3.0])
    g = jax.jit(jax.grad(lambda x: jnp.sum(shapes(x) * r)))(s)
    np.testing.assert_allclose(float(g @ v), float(tangent @ r), rtol=1e-6)


def test_nan_policy():
    s, y, _ = _data(50, seed=5)
    run = jax.jit(lambda s, y: scoremodels.GammaScoreModel().fit(s, y))
    negative = s.copy()
    negative[3] = -1.0
    with pytest.raises(ValueError):
        scoremodels.GammaScoreModel().fit(negative, y)
    bad_label = y.copy()
    bad_label[3] = 2.0
    for s_, y_ in ((negative, y), (s, bad_label), (s, np.ones_like(y))):
        params = _floats(run(s_, y_))
        assert all(np.all(np.isnan(v)) for v in params.values())
    assert all(np.all(np.isfinite(v)) for v in _floats(run(s, y)).values())
