"""Metrics whose randomness is optional (docs/api.md, "Randomness"): ``key=None`` computes
the deterministic output, asking for the random one (a resampled band, a resampled p-value,
a parametric bootstrap) without a key raises a ``ValueError`` naming ``key`` (eagerly and
under ``jit``), a key that is not a JAX PRNG key is refused by ``check_key``, and a typed key
and the legacy raw key of the same seed give the same draws."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal.metrics import corp_reliability, debiased_ece, skce

NO_KEY = r"pass key=jax\.random\.key"
NOT_A_KEY = "key must be a"  # check_key: "key must be a JAX PRNG key" / "a single PRNG key"
BAD_KEYS = [0, "abc", np.arange(3), jax.random.split(jax.random.key(0), 2)]


def _data(n=120, seed=0):
    rng = np.random.default_rng(seed)
    p = rng.uniform(0.05, 0.95, n)
    y = (rng.uniform(size=n) < p**1.3).astype(float)
    return p, y


def _check_optional_key(random_call, fixed_call, same):
    """``random_call(key)`` needs a key, ``fixed_call(key)`` does not; ``same(a, b)``
    asserts two results are equal."""
    p, y = _data()
    with pytest.raises(ValueError, match=NO_KEY):
        random_call(p, y, None)
    with pytest.raises(ValueError, match=NO_KEY):
        jax.jit(lambda p, y: random_call(p, y, None))(p, y)
    for bad in BAD_KEYS:
        with pytest.raises(ValueError, match=NOT_A_KEY):
            random_call(p, y, bad)
        with pytest.raises(ValueError, match=NOT_A_KEY):
            fixed_call(p, y, bad)  # a key that is given is checked even where unused
    # the deterministic output needs no key, and a key does not change it
    same(fixed_call(p, y, None), fixed_call(p, y, jax.random.key(3)))
    # a typed key and the legacy raw key of one seed draw the same numbers
    same(random_call(p, y, jax.random.key(4)), random_call(p, y, jax.random.PRNGKey(4)))


def _equal(a, b):
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(u), np.asarray(v))


def test_corp_reliability_band_needs_a_key():
    _check_optional_key(
        lambda p, y, key: corp_reliability(p, y, key=key, n_resamples=20),
        lambda p, y, key: corp_reliability(p, y, key=key, n_resamples=0),
        _equal,
    )
    p, y = _data()
    a, b = (corp_reliability(p, y, key=jax.random.key(k), n_resamples=20) for k in (1, 2))
    assert not np.array_equal(a.lower, b.lower)  # the band does depend on the key


def test_skce_p_value_needs_a_key():
    _check_optional_key(
        lambda p, y, key: skce(p, y, key=key, n_resamples=20),
        lambda p, y, key: skce(p, y, key=key, n_resamples=0),
        _equal,
    )
    p, y = _data()
    linear = skce(p, y, estimator="linear")  # no resamples: no key
    assert np.isfinite(float(linear.p_value))
    a, b = (skce(p, y, key=jax.random.key(k), n_resamples=20) for k in (1, 2))
    assert float(a.statistic) == float(b.statistic)  # only the p-value is random


def test_debiased_ece_bootstrap_needs_a_key():
    _check_optional_key(
        lambda p, y, key: debiased_ece(p, y, n_bins=4, p=1, key=key, n_resamples=50),
        lambda p, y, key: debiased_ece(p, y, n_bins=4, p=2, key=key),
        _equal,
    )
    p, y = _data()
    a, b = (debiased_ece(p, y, n_bins=4, p=1, key=jax.random.key(k)) for k in (1, 2))
    assert float(a) != float(b)
