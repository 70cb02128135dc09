"""Shape policy of the ranking models: the per-interaction arrays (sampler tables, LightGCN's
edges, WR-MF's pairs and adjacency widths) are padded to bucket sizes.

The padding is never read (samplers draw the pair index below the traced count), so a fit
with the same key draws the same triples and equals the unpadded fit; a new number of
interactions inside a bucket compiles nothing."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal import _shapes
from jaxcal.recsys import BPRMF, CML, NCF, UBPR, WRMF, LightGCN, Popularity
from jaxcal.recsys._data import as_interactions, sample_triples, sampler_tables

EXACT = 1e-12  # float64: the same draws and arithmetic; only some sums see extra zeros

MODELS = {
    "BPRMF-adam": BPRMF(rank=4, n_steps=30, batch_size=32),
    "BPRMF-sgd": BPRMF(rank=4, n_steps=30, batch_size=32, optimizer="sgd", learning_rate=0.05),
    "UBPR": UBPR(rank=4, n_steps=30, batch_size=32),
    "NCF": NCF(rank=4, hidden=(8,), n_negatives=2, n_steps=20, batch_size=16),
    "CML": CML(rank=4, n_steps=30, batch_size=32),
    "LightGCN": LightGCN(rank=4, n_steps=20, batch_size=32),
    "WRMF": WRMF(rank=4, n_steps=3),
}


def _train(seed, density, n_users=40, n_items=50):
    """A 0/1 matrix (fixed shape) with about ``density * n_users * n_items`` positives."""
    rng = np.random.default_rng(seed)
    train = rng.random((n_users, n_items)) < density
    train[:, 0] = False  # every user keeps a non-positive item
    train[np.arange(n_users), 1 + np.arange(n_users) % (n_items - 1)] = True  # and a positive
    return train


def _assert_trees_equal(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.shape(x) == np.shape(y)
        np.testing.assert_allclose(x, y, rtol=EXACT, atol=EXACT)


@pytest.mark.parametrize("name", MODELS)
def test_padded_fit_equals_unpadded(name):
    """170-odd positives pad to 256: same key, same draws, same fitted model."""
    train = _train(0, 0.06)
    assert 128 < train.sum() < 256
    padded = MODELS[name].fit(train, key=jax.random.key(3))
    with _shapes.exact_shapes():
        exact = MODELS[name].fit(train, key=jax.random.key(3))
    _assert_trees_equal(padded, exact)


@pytest.mark.parametrize("negatives", ["non_positive", "all"])
@pytest.mark.parametrize("bitmap", [True, False])
def test_padding_does_not_change_the_sampled_stream(negatives, bitmap):
    data = as_interactions(_train(1, 0.1))
    kw = {"need_negatives": negatives == "non_positive"}
    if not bitmap:
        kw["max_bitmap_bytes"] = 0
    tables = sampler_tables(data, **kw)
    with _shapes.exact_shapes():
        exact = sampler_tables(data, **kw)
    assert tables.users.shape[0] > exact.users.shape[0] == data.user.size

    def draw(t):
        fn = jax.jit(
            lambda k, t: sample_triples(
                k, t, n_items=data.n_items, batch_size=512, negatives=negatives
            )
        )
        return [np.asarray(x) for x in fn(jax.random.key(9), t)]

    for x, y in zip(draw(tables), draw(exact), strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", [*MODELS, "Popularity"])
def test_new_interaction_count_in_bucket_does_not_compile(compiles, name):
    """About 160, 140 and 200 positives (all pad to 256, the bucket of the test above, whose
    programs this one reuses when run after it; the largest degrees stay within WR-MF's
    adjacency bucket): after the first fit, new data and new hyperparameter values compile
    nothing."""
    model = Popularity() if name == "Popularity" else MODELS[name]
    trains = [_train(seed, density) for seed, density in ((0, 0.06), (3, 0.05), (4, 0.08))]
    assert all(128 < t.sum() <= 256 for t in trains)
    if name == "Popularity":  # counts: no key
        model.fit(trains[0])
    else:
        model.fit(trains[0], key=jax.random.key(0))
    with compiles() as c:
        for k, train in enumerate(trains[1:]):
            if name == "Popularity":
                model.fit(train)
                continue
            changed = {"l2": 0.01 * (k + 1)}
            if name != "WRMF":
                changed["learning_rate"] = 0.02 * (k + 1)
            type(model)(**{**model.__dict__, **changed}).fit(train, key=jax.random.key(k))
    assert c.count == 0
