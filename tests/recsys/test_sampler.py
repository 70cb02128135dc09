"""On-device LearnBPR sampling: the exact r-th-non-positive search against enumeration,
negatives never known positives, and the joint law of (u, i, j) against its closed form by
chi-square tests (fixed seeds)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import chisquare

from jaxcal.recsys._data import as_interactions, nth_non_positive, sample_triples, sampler_tables
from jaxcal.recsys.ubpr import is_positive

P_MIN = 1e-3  # chi-square p-value floor; a correct sampler fails with probability 0.1%
N_DRAWS = 200_000


def _train():
    rng = np.random.default_rng(0)
    train = rng.uniform(size=(6, 11)) < 0.35
    train[:, 0] = True
    train[0] = True  # user 0 has every item but one
    train[0, 5] = False
    train[1] = False  # user 1: a single positive (at the last item)
    train[1, 10] = True
    return train


@pytest.mark.parametrize("tight", [False, True])
def test_nth_non_positive_enumerates_the_complement(tight):
    train = _train()
    bound = int(train.sum(1).max()) if tight else train.shape[1]
    data = as_interactions(train)
    tables = sampler_tables(data)
    users, ranks, expected = [], [], []
    for u in range(train.shape[0]):
        free = np.flatnonzero(~train[u])
        users += [u] * free.size
        ranks += list(range(free.size))
        expected += list(free)
    got = jax.jit(partial(nth_non_positive, bound=bound))(
        tables, jnp.asarray(users, jnp.int32), jnp.asarray(ranks, jnp.int32)
    )
    np.testing.assert_array_equal(got, expected)


def test_is_positive_matches_dense_lookup():
    train = _train()
    tables = sampler_tables(as_interactions(train))
    uu, ii = np.meshgrid(np.arange(train.shape[0]), np.arange(train.shape[1]), indexing="ij")
    got = is_positive(tables, jnp.asarray(uu.ravel()), jnp.asarray(ii.ravel()), train.shape[1])
    np.testing.assert_array_equal(np.asarray(got), train.ravel())


def _draw(train, negatives, seed=0):
    data = as_interactions(train)
    tables = sampler_tables(data, need_negatives=negatives == "non_positive")
    fn = jax.jit(
        partial(sample_triples, n_items=train.shape[1], batch_size=N_DRAWS, negatives=negatives)
    )
    return [np.asarray(a) for a in fn(jax.random.key(seed), tables)]


def test_negatives_are_never_positives_and_pairs_are_positives():
    train = _train()
    u, i, j = _draw(train, "non_positive")
    assert train[u, i].all()
    assert not train[u, j].any()


def test_learnbpr_triples_follow_the_uniform_law():
    # P(u, i, j) = 1/|P| * 1/(n_items - deg(u)) for (u, i) positive, j non-positive of u
    train = _train()
    u, i, j = _draw(train, "non_positive", seed=1)
    n_items = train.shape[1]
    deg = train.sum(1)
    cells, probs = [], []
    for uu, ii in zip(*np.nonzero(train), strict=True):
        for jj in np.flatnonzero(~train[uu]):
            cells.append((uu * n_items + ii) * n_items + jj)
            probs.append(1.0 / train.sum() / (n_items - deg[uu]))
    cells, probs = np.asarray(cells), np.asarray(probs)
    assert abs(probs.sum() - 1.0) < 1e-12
    observed = np.bincount((u * n_items + i) * n_items + j, minlength=cells.max() + 1)
    assert observed.sum() == observed[cells].sum()  # no draw outside the support
    assert chisquare(observed[cells], probs * N_DRAWS).pvalue > P_MIN


def test_all_items_negatives_are_uniform_and_independent():
    # UBPR's sampler: (u, i) uniform over positives, j uniform over all items, independent
    train = _train()
    u, i, j = _draw(train, "all", seed=2)
    n_items = train.shape[1]
    pair = u * n_items + i
    support = np.flatnonzero(train.ravel())
    table = np.zeros((support.size, n_items))
    np.add.at(table, (np.searchsorted(support, pair), j), 1)
    expected = np.full(table.shape, N_DRAWS / table.size)
    assert chisquare(table.ravel(), expected.ravel()).pvalue > P_MIN
    assert train[u, i].all() and train[u, j].any() and (~train[u, j]).any()


def test_a_biased_sampler_is_detected():
    # power check of the same test: rejection-free but skewed negatives must fail it
    train = _train()
    u, i, _ = _draw(train, "non_positive", seed=3)
    data = as_interactions(train)
    tables = sampler_tables(data)
    n_items = train.shape[1]
    n_free = n_items - train.sum(1)[u]
    rng = np.random.default_rng(4)
    r = np.floor(n_free * rng.uniform(size=u.size) ** 1.2).astype(np.int32)  # skewed to 0
    j = np.asarray(nth_non_positive(tables, jnp.asarray(u), jnp.asarray(r), n_items))
    counts = np.zeros((train.shape[0], n_items))
    np.add.at(counts, (u, j), 1)
    obs, exp = [], []
    for uu in range(train.shape[0]):
        free = np.flatnonzero(~train[uu])
        obs += list(counts[uu, free])
        exp += [counts[uu].sum() / free.size] * free.size
    assert chisquare(obs, exp).pvalue < 1e-6
