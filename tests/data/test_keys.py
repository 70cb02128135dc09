"""The key convention of jaxcal.data: every simulator and random splitter takes one required
``key`` (a JAX PRNG key, typed or legacy raw), refuses anything else with a ValueError naming
``key``, and gives the same data for the same key; ``jaxcal._rng.numpy_rng`` is the one way
a key seeds NumPy (against NumPy's own integer seeding)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal._rng import numpy_rng
from jaxcal.data import (
    Interactions,
    calibration_pairs,
    holdout_split,
    sample_negatives,
    simulate_preferences,
    simulate_ratings,
    simulate_segments,
    split_ratings,
)

_POS = (np.arange(12 * 20).reshape(12, 20) % 3 == 0).astype(np.int64)
_X = Interactions.from_dense(np.where(_POS == 1, 4, 0))


def _valid_train():
    return holdout_split(_POS, method="per_user_last")  # deterministic: no key


# name -> f(key): every public function of jaxcal.data whose result depends on randomness
DRAWS = {
    "simulate_preferences": lambda key: simulate_preferences(n_users=6, n_items=7, key=key),
    "SyntheticData.split": lambda key: simulate_preferences(
        n_users=6, n_items=7, key=jax.random.key(0)
    ).split(key=key),
    "simulate_ratings": lambda key: simulate_ratings("sd2", n_users=20, n_items=30, key=key),
    "split_ratings": lambda key: split_ratings(_X, validation=0.2, test=0.3, key=key),
    "simulate_segments": lambda key: simulate_segments(50, key=key),
    "holdout_split": lambda key: holdout_split(_POS, fraction=0.2, key=key),
    "sample_negatives": lambda key: sample_negatives(_POS, [0, 3, 5], n_per_row=4, key=key),
    "calibration_pairs": lambda key: calibration_pairs(*_valid_train(), n_negatives=2, key=key),
}


def _leaves(out) -> list[np.ndarray]:
    leaves = jax.tree.leaves(out, is_leaf=lambda x: isinstance(x, np.ndarray))
    return [np.asarray(x) for x in leaves if isinstance(x, np.ndarray | jax.Array)]


def _same(a, b) -> bool:
    la, lb = _leaves(a), _leaves(b)
    return len(la) == len(lb) and all(np.array_equal(x, y) for x, y in zip(la, lb, strict=True))


@pytest.mark.parametrize("name", sorted(DRAWS))
def test_same_key_same_data_other_key_other_data(name):
    draw = DRAWS[name]
    a = draw(jax.random.key(3))
    assert _leaves(a), name
    assert _same(a, draw(jax.random.key(3)))
    assert _same(a, draw(jax.random.PRNGKey(3)))  # a legacy raw key is the same key
    assert not _same(a, draw(jax.random.key(4)))


@pytest.mark.parametrize("name", sorted(DRAWS))
@pytest.mark.parametrize(
    ("bad", "match"),
    [
        (None, "key is required"),
        (3, "key must be a JAX PRNG key"),
        (np.random.default_rng(3), "key must be a JAX PRNG key"),
        ("3", "key must be a JAX PRNG key"),
        (jax.random.split(jax.random.key(0), 2), "key must be a single PRNG key"),
    ],
)
def test_anything_but_a_key_is_refused(name, bad, match):
    with pytest.raises(ValueError, match=match):
        DRAWS[name](bad)


@pytest.mark.parametrize("seed", [0, 1, 7, 2**31, 2**32 - 1])
def test_numpy_rng_of_key_s_is_numpys_generator_of_s(seed):
    """jax.random.key(s) has data [0, s]: read as one integer it is s (the docstring)."""
    want = np.random.default_rng(seed).random(5)
    np.testing.assert_array_equal(numpy_rng(jax.random.key(seed)).random(5), want)
    np.testing.assert_array_equal(numpy_rng(jax.random.PRNGKey(seed)).random(5), want)


def test_numpy_rng_of_split_keys_is_the_big_integer_of_their_data():
    """Keys with a non-zero first word (any split or folded key): the integer is
    hi * 2**32 + lo, and different keys give different streams."""
    keys = jax.random.split(jax.random.key(0), 3)
    draws = []
    for k in keys:
        hi, lo = (int(w) for w in np.asarray(jax.random.key_data(k)))
        want = np.random.default_rng(hi * 2**32 + lo).random(4)
        got = numpy_rng(k).random(4)
        np.testing.assert_array_equal(got, want)
        draws.append(got)
    assert len({d.tobytes() for d in draws}) == 3


def test_numpy_rng_refuses_a_traced_key():
    with pytest.raises(ValueError, match="concrete JAX PRNG key"):
        jax.jit(lambda k: numpy_rng(k).random())(jax.random.key(0))
    with pytest.raises(ValueError, match="my_key must be a JAX PRNG key"):
        numpy_rng(0, name="my_key")
