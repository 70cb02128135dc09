"""On-device LearnBPR sampling: the exact r-th-non-positive search and the bitmap remap
bijection against enumeration, the bitmap tables against a dense matrix, the integer draws
against ``jax.random.randint``, negatives never known positives, and the joint law of
(u, i, j) against its closed form by chi-square tests (fixed seeds), for both samplers."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import chisquare

from jaxcal.recsys._data import (
    as_interactions,
    nth_non_positive,
    remap_non_positive,
    sample_non_positive,
    sample_triples,
    sampler_tables,
    uniform_below,
)
from jaxcal.recsys.ubpr import is_positive

P_MIN = 1e-3  # chi-square p-value floor; a correct sampler fails with probability 0.1%
N_DRAWS = 200_000
# the two exact samplers: bitmap remap (default) and binary search (no bitmap tables)
SAMPLERS = {"bitmap": {}, "search": {"max_bitmap_bytes": 0}}


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


def _random_trains(n):
    """Random small matrices: empty rows and columns, 31-33 and 70 items (two bitmap
    words), users with every item but one."""
    rng = np.random.default_rng(7)
    for _ in range(n):
        n_users, n_items = int(rng.integers(1, 7)), int(rng.choice([2, 31, 32, 33, 70]))
        train = rng.uniform(size=(n_users, n_items)) < rng.uniform(0.0, 1.0)
        train[:, rng.integers(n_items)] = False  # every user keeps a non-positive
        train[0, :] = True
        train[0, rng.integers(n_items)] = False
        yield train


def test_remap_is_a_bijection_onto_each_users_non_positives():
    # f_u maps {0..I-m_u-1} onto u's non-positive items, one to one (enumeration)
    for train in _random_trains(8):
        tables = sampler_tables(as_interactions(train, n_items=train.shape[1]))
        assert tables.bitmap is not None
        users, ranks = [], []
        for u in range(train.shape[0]):
            n_free = int((~train[u]).sum())
            users += [u] * n_free
            ranks += list(range(n_free))
        got = np.asarray(
            jax.jit(remap_non_positive)(
                tables, jnp.asarray(users, jnp.int32), jnp.asarray(ranks, jnp.int32)
            )
        )
        users = np.asarray(users)
        for u in range(train.shape[0]):
            np.testing.assert_array_equal(np.sort(got[users == u]), np.flatnonzero(~train[u]))


def test_bitmap_is_used_only_below_the_memory_cap():
    data = as_interactions(_train())
    assert sampler_tables(data).bitmap is not None
    assert sampler_tables(data, max_bitmap_bytes=0).bitmap is None
    # 6 users x 1 word x 8 bytes + 4 bytes per positive
    exact = 8 * 6 + 4 * data.user.size
    assert sampler_tables(data, max_bitmap_bytes=exact).bitmap is not None
    assert sampler_tables(data, max_bitmap_bytes=exact - 1).bitmap is None


@pytest.mark.parametrize("span", [1, 2, 3, 11, 300, 216_000, 2**31 - 1, 0])
def test_uniform_below_equals_jax_randint(span):
    # the same integers jax.random.randint draws from the same random words
    key = jax.random.key(span)
    k_hi, k_lo = jax.random.split(key)
    hi = jax.random.bits(k_hi, (4096,), jnp.uint32)
    lo = jax.random.bits(k_lo, (4096,), jnp.uint32)
    expected = jax.random.randint(key, (4096,), 0, span, dtype=jnp.int32)
    np.testing.assert_array_equal(uniform_below(hi, lo, jnp.int32(span)), expected)
    spans = jnp.arange(1, 4097, dtype=jnp.int32)  # per-draw spans (the sampler's case)
    expected = jax.random.randint(key, (4096,), 0, spans, dtype=jnp.int32)
    np.testing.assert_array_equal(uniform_below(hi, lo, spans), expected)


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_is_positive_matches_dense_lookup(sampler):
    for train in [_train(), *_random_trains(3)]:
        tables = sampler_tables(as_interactions(train), **SAMPLERS[sampler])
        uu, ii = np.meshgrid(np.arange(train.shape[0]), np.arange(train.shape[1]), indexing="ij")
        lookup = jax.jit(is_positive, static_argnums=3)
        got = lookup(tables, jnp.asarray(uu.ravel()), jnp.asarray(ii.ravel()), train.shape[1])
        np.testing.assert_array_equal(np.asarray(got), train.ravel())


def _draw(train, negatives, seed=0, sampler="bitmap"):
    data = as_interactions(train)
    tables = sampler_tables(data, need_negatives=negatives == "non_positive", **SAMPLERS[sampler])
    fn = jax.jit(
        partial(sample_triples, n_items=train.shape[1], batch_size=N_DRAWS, negatives=negatives)
    )
    return [np.asarray(a) for a in fn(jax.random.key(seed), tables)]


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_negatives_are_never_positives_and_pairs_are_positives(sampler):
    train = _train()
    u, i, j = _draw(train, "non_positive", sampler=sampler)
    assert train[u, i].all()
    assert not train[u, j].any()


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_learnbpr_triples_follow_the_uniform_law(sampler):
    # P(u, i, j) = 1/|P| * 1/(n_items - deg(u)) for (u, i) positive, j non-positive of u
    train = _train()
    u, i, j = _draw(train, "non_positive", seed=1, sampler=sampler)
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


@pytest.mark.parametrize("sampler", SAMPLERS)
def test_sample_non_positive_is_uniform_per_user(sampler):
    # NCF's negatives: for fixed users, j ~ U(non-positives of u), by chi-square per user
    train = _train()
    tables = sampler_tables(as_interactions(train), **SAMPLERS[sampler])
    users = jnp.repeat(jnp.arange(train.shape[0], dtype=jnp.int32), 20_000)
    j = np.asarray(
        jax.jit(partial(sample_non_positive, n_items=train.shape[1]))(
            jax.random.key(5), tables, users
        )
    )
    users = np.asarray(users)
    for u in range(train.shape[0]):
        free = np.flatnonzero(~train[u])
        counts = np.bincount(j[users == u], minlength=train.shape[1])
        assert counts[train[u]].sum() == 0
        if free.size > 1:
            assert chisquare(counts[free]).pvalue > P_MIN
