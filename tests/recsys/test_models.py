"""Estimator shells: BPR-MF beats popularity on Coat's MAR test set, fits are jitted once,
every accepted input form gives the same model, fitted models save / load losslessly, and
bad inputs raise ValueError before anything is traced."""

from __future__ import annotations

import inspect

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxcal
from jaxcal.data import Interactions, binarize, load_coat
from jaxcal.debias import popularity_propensity
from jaxcal.metrics.ranking import auc
from jaxcal.recsys import (
    BPRMF,
    CML,
    NCF,
    UBPR,
    WRMF,
    DistanceModel,
    FactorModel,
    LightGCN,
    NeuMFModel,
    Popularity,
    sweep,
)
from jaxcal.recsys._train import _fit_jit

COAT_SEEDS = (0, 1, 2)
# Small, strongly regularised BPR-MF: Coat has only 1,905 training positives (rating >= 4).
COAT_BPR = BPRMF(rank=16, learning_rate=0.01, l2=0.1, n_steps=1000, batch_size=256)


@pytest.fixture(scope="module")
def coat(data_dir):
    c = load_coat(data_dir / "coat")
    return binarize(c.train), binarize(c.test), c.test > 0


@pytest.fixture(scope="module")
def coat_bpr(coat):
    train, _, _ = coat
    return [COAT_BPR.fit(train, key=jax.random.key(s)) for s in COAT_SEEDS]


def test_bprmf_beats_popularity_on_coat_mar_test_auc(coat, coat_bpr):
    train, test_labels, test_mask = coat
    pop = Popularity().fit(train)
    pop_auc = float(auc(pop.predict_all(), test_labels, mask=test_mask))
    bpr_aucs = []
    for fitted in coat_bpr:
        bpr_aucs.append(float(auc(fitted.predict_all(), test_labels, mask=test_mask)))
        assert bpr_aucs[-1] > pop_auc, (bpr_aucs, pop_auc)
        # BPR-Opt was actually optimised: late mini-batch losses well below the start
        losses = np.asarray(fitted.train_loss)
        assert losses[-100:].mean() < 0.8 * losses[:10].mean()
    assert np.mean(bpr_aucs) > pop_auc + 0.01, (bpr_aucs, pop_auc)


def test_fit_is_jitted_once_for_new_seeds_and_hyperparameters(coat, coat_bpr):
    train, _, _ = coat
    before = _fit_jit._cache_size()
    other = COAT_BPR.__class__(rank=16, learning_rate=0.02, l2=0.05, n_steps=1000, batch_size=256)
    other.fit(train, key=jax.random.key(7))
    assert _fit_jit._cache_size() == before  # learning_rate / l2 / key are traced, not static


def test_interactions_pairs_and_matrix_inputs_give_the_same_model(coat, coat_bpr):
    train, _, _ = coat
    triples = Interactions.from_dense(train)
    from_triples = COAT_BPR.fit(triples, key=jax.random.key(COAT_SEEDS[0]))
    users, items = np.nonzero(train)
    from_pairs = COAT_BPR.fit(
        (users, items), key=jax.random.key(COAT_SEEDS[0]), n_users=290, n_items=300
    )
    for other in (from_triples, from_pairs):
        np.testing.assert_array_equal(other.user_factors, coat_bpr[0].user_factors)
        np.testing.assert_array_equal(other.item_factors, coat_bpr[0].item_factors)


def test_scores_are_inner_products_and_distances():
    rng = np.random.default_rng(0)
    w, h = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    users, items = np.array([0, 3, 1]), np.array([4, 0, 2])
    loss = jnp.zeros(1)
    np.testing.assert_allclose(
        FactorModel(w, h, loss).predict(users, items), np.sum(w[users] * h[items], 1), atol=1e-12
    )
    np.testing.assert_allclose(FactorModel(w, h, loss).predict_all(), w @ h.T, atol=1e-12)
    d2 = ((w[:, None, :] - h[None, :, :]) ** 2).sum(-1)
    np.testing.assert_allclose(DistanceModel(w, h, loss).predict_all(), -d2, atol=1e-12)
    np.testing.assert_allclose(
        DistanceModel(w, h, loss).predict(users, items), -d2[users, items], atol=1e-12
    )
    # predict works inside jit on traced ids
    f = jax.jit(lambda m, u, i: m.predict(u, i))
    np.testing.assert_allclose(
        f(FactorModel(w, h, loss), users, items), np.sum(w[users] * h[items], 1), atol=1e-12
    )


def test_popularity_scores_are_item_counts():
    rng = np.random.default_rng(1)
    train = rng.uniform(size=(6, 8)) < 0.4
    train[0, 0] = True
    fitted = Popularity().fit(train)
    np.testing.assert_array_equal(fitted.predict_all(), np.broadcast_to(train.sum(0), (6, 8)))
    np.testing.assert_array_equal(
        fitted.predict(np.array([2, 5]), np.array([1, 7])), train.sum(0)[[1, 7]]
    )


def test_popularity_propensity_closed_form():
    train = np.zeros((3, 4))
    train[:, 0] = 1
    train[0, 1] = 1
    omega = popularity_propensity(train, power=0.5, clip=0.1)
    np.testing.assert_allclose(omega, [1.0, np.sqrt(1 / 3), 0.1, 0.1], atol=1e-15)
    # the same from the item counts and from triples (ratings 0 are not positives)
    np.testing.assert_array_equal(popularity_propensity(train.sum(0)), omega)
    triples = Interactions.from_dense(train + 2 * (train == 0))  # every entry: 1 or 2
    triples = triples._replace(rating=np.where(triples.rating == 2, 0, 1))
    np.testing.assert_array_equal(popularity_propensity(triples), omega)


def _round_trip(obj, tmp_path, name):
    path = tmp_path / f"{name}.npz"
    obj.save(path)
    back = jaxcal.load(path)
    assert type(back) is type(obj)
    assert jax.tree.structure(back) == jax.tree.structure(obj)
    for a, b in zip(jax.tree.leaves(back), jax.tree.leaves(obj), strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    return back


def test_fitted_models_save_and_load_losslessly(tmp_path, coat_bpr):
    fitted = coat_bpr[0]
    back = _round_trip(fitted, tmp_path, "bpr")
    assert back.trainer == "BPRMF"
    u, i = np.arange(10), np.arange(10)
    np.testing.assert_array_equal(back.predict(u, i), fitted.predict(u, i))
    rng = np.random.default_rng(0)
    w, h = rng.normal(size=(4, 3)), rng.normal(size=(5, 3))
    _round_trip(DistanceModel(w, h, jnp.zeros(2)), tmp_path, "cml")
    _round_trip(Popularity().fit(np.eye(3, 4)), tmp_path, "pop")
    # NeuMF: the real parameter structure (embeddings, lists of MLP weights)
    ncf = NCF(rank=3, hidden=(4, 2))
    data = np.eye(4, 5)
    aux = ncf._prepare(jaxcal.recsys._data.as_interactions(data))
    model = NeuMFModel(ncf._init(jax.random.key(0), aux, ncf._hp(), 3), jnp.zeros(3))
    back = _round_trip(model, tmp_path, "ncf")
    np.testing.assert_array_equal(back.predict_all(), model.predict_all())


def test_sweep_result_saves_and_loads(tmp_path):
    train = np.random.default_rng(0).uniform(size=(8, 9)) < 0.3
    train[:, 0] = True
    result = sweep(WRMF(rank=2, n_steps=2), train, key=jax.random.key(0), grid={"l2": [0.1, 1.0]})
    back = _round_trip(result, tmp_path, "sweep")
    assert back.configs == result.configs and back.names == ("l2",)
    np.testing.assert_array_equal(back.select(1).predict_all(), result.select(1).predict_all())


BAD_TRAIN = [
    (np.array([[1.0, np.nan], [0.0, 1.0]]), "NaN"),
    (np.array([[1.0, -1.0], [0.0, 1.0]]), ">= 0"),
    (np.zeros((3, 3)), "no positive"),
    (np.ones(4), "matrix"),
    (([0, 1], [0]), "length mismatch"),
    (([0, 1.5], [0, 1]), "integer ids"),
    (([0, -1], [0, 1]), ">= 0"),
    (([], []), "empty"),
    (None, "required"),
    (np.array([[1, 1], [1, 0]]), "every item"),  # user 0 has no negative to sample
]


@pytest.mark.parametrize(("train", "match"), BAD_TRAIN)
def test_bad_training_data_raises(train, match):
    with pytest.raises(ValueError, match=match):
        BPRMF(rank=2, n_steps=1).fit(train, key=jax.random.key(0))


def test_ids_out_of_range_raise():
    with pytest.raises(ValueError, match="out of range"):
        BPRMF(rank=2).fit(([0, 5], [0, 1]), key=jax.random.key(0), n_users=3)
    with pytest.raises(ValueError, match="does not match"):
        BPRMF(rank=2).fit(np.eye(3), key=jax.random.key(0), n_items=4)


@pytest.mark.parametrize(
    ("model_cls", "kwargs", "match"),
    [
        (BPRMF, {"rank": 0}, "rank must be an integer >= 1"),
        (BPRMF, {"learning_rate": -0.1}, "learning_rate must be a finite number and > 0"),
        (BPRMF, {"l2": float("nan")}, "l2 must be a finite number"),
        (BPRMF, {"n_steps": 1.5}, "n_steps must be an integer"),
        (BPRMF, {"batch_size": 0}, "batch_size must be an integer"),
        (BPRMF, {"init_scale": 0.0}, "init_scale must be a finite number and > 0"),
        (BPRMF, {"optimizer": "lbfgs"}, "optimizer must be one of"),
        (UBPR, {"rank": True}, "rank must be an integer"),
        (CML, {"margin": 0.0}, "margin must be a finite number and > 0"),
        (LightGCN, {"n_layers": -1}, "n_layers must be an integer >= 0"),
        (NCF, {"hidden": ()}, "hidden must be a non-empty tuple"),
        (NCF, {"n_negatives": 0}, "n_negatives must be an integer"),
        (WRMF, {"l2": 0.0}, "l2 must be a finite number and > 0"),
        (WRMF, {"alpha": -1.0}, "alpha must be a finite number and >= 0"),
        (WRMF, {"n_steps": 0}, "n_steps must be an integer"),
    ],
)
def test_bad_hyperparameters_raise_when_built(model_cls, kwargs, match):
    with pytest.raises(ValueError, match=match):
        model_cls(**kwargs)


def test_fit_takes_the_key_only_where_the_result_is_random():
    train = np.eye(3, 4)
    with pytest.raises(TypeError, match="key"):
        Popularity().fit(train, key=jax.random.key(0))  # counts: nothing random
    for model_cls, fitted_cls in ((BPRMF, FactorModel), (CML, DistanceModel), (NCF, NeuMFModel)):
        assert model_cls.fitted_class is fitted_cls
        annotation = inspect.signature(model_cls.fit).return_annotation
        assert annotation in (fitted_cls, fitted_cls.__name__)


def test_bad_keys_and_propensities_raise():
    train = np.eye(3, 4)
    with pytest.raises(ValueError, match="key is required"):
        BPRMF().fit(train, key=None)
    with pytest.raises(ValueError, match="PRNG key"):
        BPRMF().fit(train, key=0)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        UBPR().fit(train, key=jax.random.key(0), propensity=np.array([0.5, 0.0, 0.5, 0.5]))
    with pytest.raises(ValueError, match="shape"):
        UBPR().fit(train, key=jax.random.key(0), propensity=np.ones(3))
    with pytest.raises(ValueError, match="NaN"):
        UBPR().fit(train, key=jax.random.key(0), propensity=np.array([0.5, np.nan, 0.5, 1]))
    with pytest.raises(ValueError, match="clip"):
        popularity_propensity(train, clip=0.0)


def test_bad_predict_ids_raise():
    model = FactorModel(jnp.ones((3, 2)), jnp.ones((4, 2)), jnp.zeros(1))
    with pytest.raises(ValueError, match=r"items ids must lie in \[0, 4\)"):
        model.predict(np.array([0]), np.array([4]))
    with pytest.raises(ValueError, match="integer ids"):
        model.predict(np.array([0.5]), np.array([1]))
    with pytest.raises(ValueError, match="broadcast"):
        model.predict(np.array([0, 1]), np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="must lie"):
        Popularity().fit(np.eye(3, 4)).predict(np.array([3]), np.array([0]))


@pytest.mark.parametrize(
    "model_cls",
    [BPRMF, pytest.param(UBPR, marks=pytest.mark.slow), pytest.param(CML, marks=pytest.mark.slow)],
)
def test_sparse_sgd_path_equals_dense_optax_sgd(model_cls):
    # oracle: the generic loop (autodiff of the full loss -> dense gradient -> optax.sgd)
    dense_cls = type(f"Dense{model_cls.__name__}", (model_cls,), {"SPARSE_SGD": False})
    train = np.random.default_rng(3).uniform(size=(9, 12)) < 0.3
    train[:, 0] = True
    kw = dict(rank=3, optimizer="sgd", learning_rate=0.5, l2=0.01, n_steps=30, batch_size=32)
    sparse = model_cls(**kw).fit(train, key=jax.random.key(0))
    dense = dense_cls(**kw).fit(train, key=jax.random.key(0))
    np.testing.assert_allclose(sparse.user_factors, dense.user_factors, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sparse.item_factors, dense.item_factors, rtol=0, atol=1e-12)
    np.testing.assert_allclose(sparse.train_loss, dense.train_loss, rtol=1e-12, atol=0)
