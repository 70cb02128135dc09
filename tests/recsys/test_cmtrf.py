"""CMTRF estimator: grid = loop, early stopping, validation, save / load, eager errors,
compile reuse, the estimator = its pure core, and recovery of planted transforms and
segments."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

import jaxcal
from jaxcal.data import Interactions
from jaxcal.recsys import CMTRF, CMTRFModel, CMTRFSolver, Search
from jaxcal.recsys._cmtrf_fitted import _MEMBER_FIELDS

TOL = 1e-8


def _one(fitted, name):
    """Field ``name`` of the only member of a one-member fit (NumPy)."""
    assert fitted.n_members == 1
    return np.asarray(getattr(fitted, name))[0]


def _random_ratings(n_users=30, n_items=25, density=0.5, seed=0):
    rng = np.random.default_rng(seed)
    dense = np.where(
        rng.random((n_users, n_items)) < density, rng.integers(1, 6, (n_users, n_items)), 0
    )
    dense[:, 0] = rng.integers(1, 6, n_users)  # every user rated
    return Interactions.from_dense(dense)


def _subset(data, idx):
    return Interactions(
        data.user[idx], data.item[idx], data.rating[idx], data.n_users, data.n_items
    )


def _split(data, fraction, seed):
    pick = np.random.default_rng(seed).random(data.rating.size) < fraction
    return _subset(data, ~pick), _subset(data, pick)


@pytest.fixture(scope="module")
def data():
    return _split(_random_ratings(), 0.2, 0)


def test_grid_equals_looped_single_fits(data):
    train, valid = data
    key = jax.random.key(1)
    model = CMTRF(transform="global", rank=3, max_iter=6)
    search = Search(l2_user=[0.3, 3.0], l2_item=[1.0, 2.0], n_replicates=2)
    fitted = model.fit(train, key=key, validation=valid, search=search)
    mse = np.asarray(fitted.grid_validation_mse)
    assert mse.shape == (2, 2, 2)
    best = np.unravel_index(np.argmin(mse), mse.shape)
    for a, lu in enumerate([0.3, 3.0]):
        for b, li in enumerate([1.0, 2.0]):
            single = dataclasses.replace(model, l2_user=lu, l2_item=li)
            single = single.fit(train, key=key, validation=valid)
            np.testing.assert_allclose(mse[a, b, 0], single.grid_validation_mse[0, 0, 0], rtol=TOL)
            if best == (a, b, 0):
                np.testing.assert_allclose(fitted.transforms, single.transforms, rtol=TOL)
                np.testing.assert_allclose(fitted.user_factors, single.user_factors, rtol=1e-6)
    # the second replicate: fold_in(key, 1), whatever the grid around it
    two = dataclasses.replace(model, l2_user=3.0, l2_item=2.0).fit(
        train, key=key, validation=valid, search=Search(n_replicates=2)
    )
    np.testing.assert_allclose(mse[1, 1, :], two.grid_validation_mse[0, 0, :], rtol=TOL)
    assert float(fitted.l2_user) == [0.3, 3.0][best[0]]
    assert float(fitted.l2_item) == [1.0, 2.0][best[1]]


def test_early_stopping_keeps_the_best_validation_sweep(data):
    train, valid = data
    model = CMTRF(transform="per_user", rank=4, l2_user=0.01, l2_item=0.01, max_iter=30, patience=3)
    fitted = model.fit(train, key=jax.random.key(0), validation=valid)
    history = _one(fitted, "validation_mse")
    ran = np.flatnonzero(~np.isnan(history))
    best = int(_one(fitted, "best_sweep"))
    assert best == int(np.nanargmin(history))
    if ran[-1] < 29:  # stopped early: exactly `patience` sweeps after the best one
        assert ran[-1] == best + 3
    # the reported MSE is that of the kept parameters on the validation ratings (oracle: numpy)
    pred = np.asarray(fitted.predict(valid.user, valid.item))
    np.testing.assert_allclose(np.mean((pred - valid.rating) ** 2), history[best], rtol=1e-10)
    # one member: the mean's validation MSE is the member's, the grid's only point
    assert float(fitted.mean_validation_mse) == history[best] == fitted.grid_validation_mse.item()


def test_validation_is_held_out_from_train_by_key(data):
    train, _ = data
    model = CMTRF(transform="global", rank=2, max_iter=3)
    a = model.fit(train, key=jax.random.key(3))
    b = model.fit(train, key=jax.random.key(3))
    np.testing.assert_array_equal(a.transforms, b.transforms)
    # the same hold-out passed explicitly gives the same model
    n = train.rating.size
    k_split, _ = jax.random.split(jax.random.key(3))
    seed = int(jax.random.randint(k_split, (), 0, np.iinfo(np.int32).max))
    perm = np.random.default_rng(seed).permutation(n)
    n_val = round(0.1 * n)
    c = model.fit(
        _subset(train, np.sort(perm[n_val:])),
        key=jax.random.key(3),
        validation=_subset(train, np.sort(perm[:n_val])),
    )
    np.testing.assert_allclose(a.transforms, c.transforms, rtol=TOL)


def test_save_load_round_trip(data, tmp_path):
    train, valid = data
    fitted = CMTRF(transform="clustered", n_clusters=2, rank=2, max_iter=3, biases=True).fit(
        train, key=jax.random.key(0), validation=valid
    )
    path = tmp_path / "cmtrf.npz"
    jaxcal.save(fitted, path)
    back = jaxcal.load(path)
    assert isinstance(back, CMTRFModel) and back.transform == "clustered" and back.anchor
    assert back.objective == "squared" and back.min_gap == 0.5
    for a, b in zip(jax.tree.leaves(fitted), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.predict([0, 1], [2, 3]), fitted.predict([0, 1], [2, 3]))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"transform": "cluster"}, "transform must be one of"),
        ({"objective": "logistic"}, "objective must be one of"),
        ({"min_gap": 0.0}, "min_gap must be a finite number and > 0"),
        ({"min_gap": 1.5}, "min_gap must be <= 1 with anchor=True"),
        ({"rank": 0}, "rank must be an integer"),
        ({"n_clusters": 0}, "n_clusters must be an integer"),
        ({"max_iter": 0}, "max_iter must be an integer"),
        ({"l2_user": -1.0}, "l2_user must be a finite number and > 0"),
        ({"l2_item": [1.0, 2.0]}, r"l2_item must be a number > 0; .*search=Search\(l2_item"),
        ({"validation_fraction": 1.0}, "validation_fraction must lie in"),
        ({"anchor": 1}, "anchor must be True or False"),
        ({"patience": 0}, "patience must be an integer"),
        ({"n_levels": 1}, "n_levels must be an integer >= 2"),
    ],
)
def test_bad_hyperparameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CMTRF(**kwargs)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        (lambda: Search(l2_user=[1.0, -1.0]), "l2_user must be finite and > 0"),
        (lambda: Search(l2_item=[]), "l2_item must be a positive number or a non-empty"),
        (lambda: Search(n_replicates=0), "n_replicates must be an integer"),
        (lambda: Search(ensemble=0), "ensemble must be an integer"),
        (lambda: Search(refit=1), "refit must be True or False"),
        (lambda: Search(warm_start="yes"), "warm_start must be True or False"),
        (lambda: Search(warm_start=True, n_replicates=2), "needs n_replicates=1"),
        (lambda: CMTRFSolver(grid_batch_size=0), "grid_batch_size must be an integer"),
        (lambda: CMTRFSolver(dense=1), "dense must be None, True or False"),
        (lambda: CMTRFSolver(n_newton=0), "n_newton must be an integer"),
        (lambda: CMTRFSolver(init_scale=0.0), "init_scale must be a finite number and > 0"),
    ],
)
def test_bad_search_and_solver_options_raise(options, match):
    with pytest.raises(ValueError, match=match):
        options()


def test_search_grids_are_stored_as_tuples_of_floats():
    search = Search(l2_user=np.array([0.5, 2]), l2_item=3)
    assert search.l2_user == (0.5, 2.0) and search.l2_item == (3.0,)
    assert hash(search) == hash(Search(l2_user=[0.5, 2.0], l2_item=(3.0,)))


def test_bad_data_raise(data):
    train, valid = data
    model = CMTRF(max_iter=2)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="search must be a jaxcal.recsys.Search"):
        model.fit(train, key=key, search={"l2_user": [1.0]})
    with pytest.raises(ValueError, match="solver must be a jaxcal.recsys.CMTRFSolver"):
        model.fit(train, key=key, solver=Search())
    with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
        model.fit(train, key=0)
    with pytest.raises(ValueError, match="must be jaxcal.data.Interactions"):
        model.fit(np.ones((3, 3)), key=key)
    bad = train._replace(rating=np.where(np.arange(train.rating.size) == 0, 0, train.rating))
    with pytest.raises(ValueError, match=r"ratings must lie in 1\.\.5"):
        model.fit(bad, key=key)
    with pytest.raises(ValueError, match=r"ratings must lie in 1\.\.4"):
        CMTRF(n_levels=4).fit(train, key=key)
    with pytest.raises(ValueError, match="holds no ratings"):
        model.fit(Interactions(np.zeros(0, int), np.zeros(0, int), np.zeros(0, int), 3, 3), key=key)
    with pytest.raises(ValueError, match="item ids must lie in"):
        model.fit(train._replace(n_items=2), key=key)
    with pytest.raises(ValueError, match="validation is"):
        model.fit(train, key=key, validation=valid._replace(n_users=valid.n_users + 1))
    with pytest.raises(ValueError, match="n_clusters=50 exceeds"):
        CMTRF(transform="clustered", n_clusters=50).fit(train, key=key, validation=valid)


def test_second_data_size_in_the_bucket_compiles_nothing(compiles):
    model = CMTRF(transform="global", rank=2, max_iter=2)
    first = _split(_random_ratings(seed=1), 0.2, 1)
    second = _split(_random_ratings(density=0.45, seed=2), 0.2, 2)
    assert first[0].rating.size != second[0].rating.size
    fitted = model.fit(first[0], key=jax.random.key(0), validation=first[1])
    fitted.predict(first[1].user, first[1].item)
    with compiles() as c:
        fitted = model.fit(second[0], key=jax.random.key(0), validation=second[1])
        fitted.predict(second[1].user, second[1].item)  # 83 and 75 pairs: one bucket
        # new penalties and min_gap are traced values: no new program either
        CMTRF(transform="global", rank=2, max_iter=2, l2_user=0.3, min_gap=0.25).fit(
            second[0], key=jax.random.key(1), validation=second[1]
        )
    assert c.count == 0


def _planted(n_users=80, n_items=60, density=0.8, seed=0):
    """Scores = item quality + a small rank-2 interaction; segment 0 rates through a convex
    transform, segment 1 through a concave one (rating = the level whose score is nearest)."""
    rng = np.random.default_rng(seed)
    s = rng.normal(size=n_items)[None, :] + 0.3 * rng.normal(size=(n_users, 2)) @ rng.normal(
        size=(2, n_items)
    )
    truth = np.array([[-1.5, -1.0, -0.5, 0.5, 1.5], [-1.5, -0.5, 0.5, 1.0, 1.5]])
    segment = np.arange(n_users) % 2
    mids = (truth[segment][:, 1:] + truth[segment][:, :-1]) / 2
    rating = 1 + np.sum(s[:, :, None] > mids[:, None, :], axis=-1)
    observed = rng.random((n_users, n_items)) < density
    return Interactions.from_dense(np.where(observed, rating, 0)), truth, segment


def _normalised(z):
    z = np.asarray(z)
    return (z - z[..., :1]) / (z[..., -1:] - z[..., :1])


@pytest.fixture(scope="module")
def planted():
    return _planted()


def test_clustered_recovers_planted_segments_and_shapes(planted):
    train, truth, segment = planted
    model = CMTRF(
        transform="clustered",
        n_clusters=2,
        rank=3,
        min_gap=0.1,
        l2_user=0.1,
        l2_item=0.1,
        max_iter=40,
    )
    fitted = model.fit(train, key=jax.random.key(0))
    group = _one(fitted, "group")
    assert adjusted_rand_score(segment, group) > 0.8
    for s in (0, 1):
        cluster = np.bincount(group[segment == s], minlength=2).argmax()
        # up to the affine gauge, within 0.15 of the truth (the joint least squares pulls
        # interior levels a little toward the middle)
        np.testing.assert_allclose(
            _normalised(_one(fitted, "transforms")[cluster]), _normalised(truth[s]), atol=0.15
        )


def test_anchoring_prevents_the_collapse_to_the_margin(planted):
    train, _, _ = planted
    kwargs = {"transform": "global", "rank": 3, "l2_user": 0.1, "l2_item": 0.1, "max_iter": 30}
    gap = 0.5
    anchored = CMTRF(min_gap=gap, **kwargs).fit(train, key=jax.random.key(0))
    gaps = np.diff(_one(anchored, "transforms")[0])
    assert np.all(gaps >= gap - 1e-9) and np.max(gaps) > gap + 0.2
    # the authors' unanchored formulation: every gap ends at exactly min_gap (a free offset)
    free = CMTRF(min_gap=gap, anchor=False, **kwargs).fit(train, key=jax.random.key(0))
    np.testing.assert_allclose(np.diff(_one(free, "transforms")[0]), gap, atol=1e-6)


def test_dense_and_pairs_half_steps_fit_the_same_model(data):
    train, valid = data
    model = CMTRF(transform="per_user", rank=2, max_iter=3, biases=True)
    kw = {"key": jax.random.key(0), "validation": valid}
    a = model.fit(train, solver=CMTRFSolver(dense=True), **kw)
    b = model.fit(train, solver=CMTRFSolver(dense=False), **kw)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-7, atol=1e-9)


def test_poisson_items_are_stationary_after_the_last_half_step(data):
    """KKT oracle: with transform="none" a sweep ends with the item half-step, so the kept
    item factors zero the gradient of the training objective (numpy) given the users and the
    global offset (refitted at the start of each sweep)."""
    train, valid = data
    l2_item = 0.7
    model = CMTRF(transform="none", objective="poisson", rank=2, l2_item=l2_item, max_iter=4)
    fitted = model.fit(train, key=jax.random.key(0), validation=valid)
    x, y = _one(fitted, "user_factors"), _one(fitted, "item_factors")
    theta = np.sum(x[train.user] * y[train.item], axis=1) + float(_one(fitted, "offset"))
    residual = np.exp(theta) - train.rating  # z = r: the identity transform
    grad = np.zeros_like(y)
    np.add.at(grad, train.item, residual[:, None] * x[train.user])
    grad += l2_item * y
    assert np.max(np.abs(grad)) < 1e-8


@pytest.mark.parametrize("loss", ["squared", "poisson"])
def test_the_refitted_offset_minimises_the_loss_given_the_rest(loss):
    """The offset step is exact: the objective over mu (numpy, a fine grid around it) is
    smallest at the refitted offset; with squared loss the mean residual becomes 0."""
    from jaxcal.recsys import _cmtrf_core as core
    from jaxcal.recsys.cmtrf import _pairs

    with jax.enable_x64(True):
        rng = np.random.default_rng(0)
        user, item = rng.integers(0, 7, 40), rng.integers(0, 5, 40)
        rating = rng.integers(1, 6, 40)
        pairs = _pairs(user, item, rating, 64, sort=True)
        cfg = core.Config(n_users=7, n_items=5, n_levels=5, rank=2, loss=loss)
        z = np.sort(rng.uniform(0.5, 6.0, size=(1, 5)), axis=1)
        state = core.State(
            jnp.asarray(0.3 * rng.normal(size=(7, 2))), jnp.asarray(0.3 * rng.normal(size=(5, 2))),
            jnp.zeros(7), jnp.zeros(5), jnp.asarray(z), jnp.zeros(7, jnp.int32),
            jnp.asarray(0.2),
        )  # fmt: skip
        problem = core.Problem(pairs, pairs, pairs)
        mu = float(core._refit_offset(state, problem, cfg).offset)
        theta = np.sum(
            np.asarray(state.user_factors)[user] * np.asarray(state.item_factors)[item], 1
        )
        t = z[0, rating - 1]

        def objective(m):
            th = theta + m
            return np.sum((t - th) ** 2) if loss == "squared" else np.sum(np.exp(th) - t * th)

        grid = mu + np.linspace(-0.05, 0.05, 101)
        assert np.argmin([objective(m) for m in grid]) == 50
        if loss == "squared":
            assert abs(np.mean(t - theta - mu)) < 1e-12


def test_ridge_mf_with_the_offset_beats_it_without(data):
    train, valid = data
    kw = {"transform": "none", "rank": 2, "l2_user": 1.0, "l2_item": 1.0, "max_iter": 6}
    with_mu = CMTRF(**kw).fit(train, key=jax.random.key(0), validation=valid)
    without = CMTRF(offset=False, **kw).fit(train, key=jax.random.key(0), validation=valid)
    assert float(_one(without, "offset")) == 0.0 and float(_one(with_mu, "offset")) > 1.0
    assert float(np.nanmin(with_mu.validation_mse)) < float(np.nanmin(without.validation_mse))


def _propensity(data, seed=1):
    return np.random.default_rng(seed).uniform(0.05, 1.0, (data.n_users, data.n_items))


def test_ips_items_are_stationary_under_the_weighted_loss(data):
    """KKT oracle for inverse propensity scoring: the kept item factors zero the gradient of
    the weighted squared loss (weights 1 / p scaled to mean 1 over the training ratings)
    given the users and the offset; the unweighted gradient is far from 0."""
    train, valid = data
    p = _propensity(train)
    l2_item = 0.7
    model = CMTRF(transform="none", rank=2, l2_item=l2_item, max_iter=4)
    fitted = model.fit(train, key=jax.random.key(0), validation=valid, propensity=p)
    x, y = _one(fitted, "user_factors"), _one(fitted, "item_factors")
    w = 1.0 / p[train.user, train.item]
    w = w / w.mean()
    theta = np.sum(x[train.user] * y[train.item], axis=1) + float(_one(fitted, "offset"))

    def grad(weight):
        g = l2_item * y.copy()
        np.add.at(g, train.item, (weight * (theta - train.rating))[:, None] * x[train.user])
        return np.max(np.abs(g))

    assert grad(w) < 1e-8
    assert grad(np.ones_like(w)) > 1e-3


def test_ips_validation_mse_is_the_self_normalised_weighted_error(data):
    """The chosen model's validation MSE is sum w e^2 / sum w with w = 1 / p (numpy, from its
    own predictions), and every other grid point's is no smaller."""
    train, valid = data
    p = _propensity(train)
    model = CMTRF(transform="global", rank=2, max_iter=6)
    search = Search(l2_user=(0.3, 3.0), l2_item=(0.3, 3.0))
    fitted = model.fit(train, key=jax.random.key(0), validation=valid, propensity=p, search=search)
    pred = np.asarray(fitted.predict(valid.user, valid.item))
    w = 1.0 / p[valid.user, valid.item]
    want = np.sum(w * (pred - valid.rating) ** 2) / np.sum(w)
    grid = np.asarray(fitted.grid_validation_mse)
    assert float(np.nanmin(grid)) == pytest.approx(want, rel=1e-6)
    assert float(np.nanmin(fitted.validation_mse)) == pytest.approx(want, rel=1e-6)


def test_constant_propensity_is_the_unweighted_fit(data):
    train, valid = data
    model = CMTRF(transform="per_user", rank=2, max_iter=5)
    plain = model.fit(train, key=jax.random.key(0), validation=valid)
    const = np.full((train.n_users, train.n_items), 0.3)
    ips = model.fit(train, key=jax.random.key(0), validation=valid, propensity=const)
    for a, b in zip(jax.tree.leaves(plain), jax.tree.leaves(ips), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-9)


def test_bad_propensity_raises(data):
    train, valid = data
    model = CMTRF(transform="none", rank=2, max_iter=2)
    with pytest.raises(ValueError, match="propensity must be"):
        model.fit(train, key=jax.random.key(0), validation=valid, propensity=np.ones((3, 3)))
    p = _propensity(train)
    p[train.user[0], train.item[0]] = 0.0
    with pytest.raises(ValueError, match=r"\(0, 1\] at every train rating.*user"):
        model.fit(train, key=jax.random.key(0), validation=valid, propensity=p)


def _stop_after(history, patience, tol):
    """The number of sweeps the early-stopping rule runs (numpy re-implementation)."""
    ref, ref_t = np.inf, -1
    for t, mse in enumerate(history):
        if mse < ref * (1 - tol):
            ref, ref_t = mse, t
        if t - ref_t >= patience:
            return t + 1
    return len(history)


@pytest.mark.parametrize("tol", [1e-3, 1e-2])
def test_tol_stops_where_the_rule_says_and_keeps_the_best_sweep(data, tol):
    """The same sweeps as tol=0 up to the stop, which falls where the rule (numpy, on the
    tol=0 history) puts it; the kept sweep is the lowest validation MSE among those run."""
    train, valid = data
    kw = {"transform": "global", "rank": 2, "max_iter": 40, "patience": 3}
    full = CMTRF(**kw).fit(train, key=jax.random.key(0), validation=valid)
    early = CMTRF(tol=tol, **kw).fit(train, key=jax.random.key(0), validation=valid)
    h0, h = _one(full, "validation_mse"), _one(early, "validation_mse")
    ran = int(np.sum(~np.isnan(h)))
    assert ran == _stop_after(h0[~np.isnan(h0)], 3, tol)
    np.testing.assert_allclose(h[:ran], h0[:ran], rtol=1e-6)
    assert int(_one(early, "best_sweep")) == int(np.argmin(h[:ran]))
    assert ran <= int(np.sum(~np.isnan(h0)))


def test_bad_tol_raises():
    with pytest.raises(ValueError, match="tol must be"):
        CMTRF(tol=1.0)
    with pytest.raises(ValueError, match="tol must be"):
        CMTRF(tol=-0.1)


def test_warm_path_visits_every_point_once_down_each_row():
    from jaxcal.recsys.cmtrf import _warm_path

    l2u, l2i = np.array([0.1, 1.0, 10.0]), np.array([5.0, 0.5, 50.0, 2.0])
    path, restart = _warm_path(l2u, l2i)
    assert sorted(path.tolist()) == list(range(12))
    u, i = np.divmod(path, 4)
    # rows of l2_user from the largest down, each from its largest l2_item down
    np.testing.assert_array_equal(l2u[u], np.repeat([10.0, 1.0, 0.1], 4))
    np.testing.assert_array_equal(l2i[i], np.tile([50.0, 5.0, 2.0, 0.5], 3))
    np.testing.assert_array_equal(restart, np.tile([True, False, False, False], 3))


@pytest.mark.parametrize("transform", ["none", "global", "clustered"])
def test_warm_start_chains_the_single_fits(data, transform):
    """The first point of each l2_user row (its largest l2_item) is the single fit with its
    penalties; the others start from the previous point and differ from their single fits,
    and each is a fit of its own penalties (transform="none": the chosen point's item
    factors zero the gradient of its own objective, numpy)."""

    train, valid = data
    grid = (0.3, 3.0)
    kw = {"transform": transform, "rank": 2, "max_iter": 8, "n_clusters": 2, "patience": 2}
    warm = CMTRF(**kw).fit(
        train,
        key=jax.random.key(0),
        validation=valid,
        search=Search(l2_user=grid, l2_item=grid, warm_start=True),
    )
    gm = np.asarray(warm.grid_validation_mse)[..., 0]

    def single(lu, li):
        fit = CMTRF(l2_user=lu, l2_item=li, **kw).fit(
            train, key=jax.random.key(0), validation=valid
        )
        return float(fit.grid_validation_mse.ravel()[0])

    for a, lu in enumerate(grid):
        assert gm[a, 1] == pytest.approx(single(lu, 3.0), rel=1e-6)  # row start
        assert gm[a, 0] != pytest.approx(single(lu, 0.3), rel=1e-6)  # from (lu, 3.0)
    assert np.all(np.isfinite(gm))
    if transform == "none":
        x, y = _one(warm, "user_factors"), _one(warm, "item_factors")
        theta = np.sum(x[train.user] * y[train.item], axis=1) + float(_one(warm, "offset"))
        g = float(warm.l2_item) * y
        np.add.at(g, train.item, (theta - train.rating)[:, None] * x[train.user])
        assert np.max(np.abs(g)) < 1e-8


def _numpy_als(data, v, l2_user, l2_item, n_sweeps):
    """Ridge ALS without offset or biases (numpy): every user's solve from the same item
    factors, then every item's from the new users."""
    u = np.zeros((data.n_users, v.shape[1]))
    for _ in range(n_sweeps):
        for rows, other, out, l2, ids, oth in (
            (data.n_users, v, u, l2_user, data.user, data.item),
            (data.n_items, u, v, l2_item, data.item, data.user),
        ):
            for n in range(rows):
                f = other[oth[ids == n]]
                a = f.T @ f + l2 * np.eye(f.shape[1])
                out[n] = np.linalg.solve(a, f.T @ data.rating[ids == n])
    return u, v


@pytest.mark.parametrize("transform", ["none", "clustered"])
def test_replay_runs_the_given_sweeps_from_the_same_start(data, transform):
    """core.replay: transform="none" equals numpy ridge ALS from core.initial_state's start
    for the given number of sweeps; "clustered" equals the early-stopped fit_one when told
    the sweeps that fit chose (its best state)."""
    from jaxcal.recsys import _cmtrf_core as core
    from jaxcal.recsys.cmtrf import _chosen_sweeps, _pairs, _training_problem

    train, valid = data
    cfg = core.Config(
        n_users=train.n_users, n_items=train.n_items, n_levels=5, rank=2,
        transform=transform, offset=False, n_clusters=2, n_sweeps=12,
    )  # fmt: skip
    key = jax.random.key_data(jax.random.key(3))
    problem = _training_problem(
        train, None, _pairs(valid.user, valid.item, valid.rating, valid.rating.size, False)
    )
    eps = jnp.asarray(0.5)
    if transform == "none":
        state = core.replay(problem, key, 0.4, 2.0, eps, None, (np.int32(3), np.int32(0)), cfg=cfg)
        v0 = np.asarray(core.initial_state(key, eps, cfg).item_factors)
        u, v = _numpy_als(train, v0.copy(), 0.4, 2.0, 3)
        np.testing.assert_allclose(state.user_factors, u, atol=1e-10)
        np.testing.assert_allclose(state.item_factors, v, atol=1e-10)
        return
    out, _ = core.fit_one(problem, key, 0.4, 2.0, eps, 2, jnp.asarray(0.0), cfg)
    sweeps = _chosen_sweeps(out.pretrain_history, out.best_sweep, transform)
    state = core.replay(problem, key, 0.4, 2.0, eps, None, sweeps, cfg=cfg)
    for a, b in zip(state, out.state, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-10)


def _item_gradient(model, data, weight=None):
    x, y = _one(model, "user_factors"), _one(model, "item_factors")
    w = np.ones(data.rating.size) if weight is None else weight
    theta = np.sum(x[data.user] * y[data.item], axis=1) + float(_one(model, "offset"))
    g = float(model.l2_item) * y
    np.add.at(g, data.item, (w * (theta - data.rating))[:, None] * x[data.user])
    return np.max(np.abs(g))


@pytest.mark.parametrize("warm_start", [False, True])
@pytest.mark.parametrize("ips", [False, True])
def test_refit_learns_from_training_and_validation_ratings(data, warm_start, ips):
    """KKT oracle (numpy): after refit=True the item factors zero the gradient of the loss over
    train + validation (inverse-propensity weighted, scaled to mean 1, with ``propensity``),
    not over train alone; the choice (penalties, validation MSEs) is the one without refit."""
    train, valid = data
    both = train.concat(valid)
    p = _propensity(train) if ips else None
    grid = {"l2_user": (0.3, 3.0), "l2_item": (0.5, 5.0), "warm_start": warm_start}
    fit = lambda refit: CMTRF(transform="none", rank=2, max_iter=10).fit(  # noqa: E731
        train,
        key=jax.random.key(0),
        validation=valid,
        propensity=p,
        search=Search(refit=refit, **grid),
    )
    plain, refitted = fit(False), fit(True)
    w = None
    if ips:
        w = 1.0 / p[both.user, both.item]
        w = w / w.mean()
    assert _item_gradient(refitted, both, w) < 1e-8
    assert _item_gradient(refitted, train) > 1e-3
    assert _item_gradient(plain, both, w) > 1e-3
    for f in ("l2_user", "l2_item", "best_sweep", "grid_validation_mse", "validation_mse"):
        np.testing.assert_array_equal(getattr(plain, f), getattr(refitted, f))


def test_refit_clustered_keeps_the_clusters_shape(data):
    train, valid = data
    model = CMTRF(transform="clustered", rank=2, n_clusters=3, max_iter=6)
    plain = model.fit(train, key=jax.random.key(0), validation=valid)
    refitted = model.fit(train, key=jax.random.key(0), validation=valid, search=Search(refit=True))
    assert refitted.transforms.shape == plain.transforms.shape == (1, 3, 5)
    assert np.all(np.diff(np.asarray(refitted.transforms), axis=-1) >= 0.5 - 1e-9)
    assert not np.allclose(refitted.user_factors, plain.user_factors)


def _numpy_predict(model, users, items):
    """Predicted ratings of a one-member CMTRFModel in numpy: theta through the
    piecewise-linear inverse of the user's transform, extended linearly beyond the end
    levels."""
    x, y = _one(model, "user_factors"), _one(model, "item_factors")
    theta = np.sum(x[users] * y[items], axis=1) + _one(model, "user_bias")[users]
    theta = theta + _one(model, "item_bias")[items] + float(_one(model, "offset"))
    z = _one(model, "transforms")[_one(model, "group")[users]]
    out = np.empty(theta.size)
    for n, (t, zr) in enumerate(zip(theta, z, strict=True)):
        k = int(np.clip(np.searchsorted(zr, t) - 1, 0, zr.size - 2))
        out[n] = k + 1 + (t - zr[k]) / (zr[k + 1] - zr[k])
    return out


@pytest.mark.parametrize("transform", ["none", "per_user"])
def test_ensemble_members_are_the_replicates_after_the_grid(data, transform):
    """Oracles: the members are the fits of the grid's next replicates (the grid with
    n_replicates=S trains them independently); predict is the mean of the members'
    predictions, in numpy; mean_validation_mse is the numpy MSE of that mean on the
    validation ratings."""
    train, valid = data
    model = CMTRF(transform=transform, rank=2, l2_user=0.5, l2_item=2.0, max_iter=8)
    key = jax.random.key(2)
    ens = model.fit(train, key=key, validation=valid, search=Search(ensemble=3))
    reps = model.fit(train, key=key, validation=valid, search=Search(n_replicates=3))
    assert ens.n_members == 3 and ens.user_factors.shape == (3, train.n_users, 2)
    assert isinstance(ens, CMTRFModel) and isinstance(ens.member(1), CMTRFModel)
    best = [float(np.nanmin(ens.member(k).validation_mse)) for k in range(3)]
    np.testing.assert_allclose(best, np.asarray(reps.grid_validation_mse)[0, 0], rtol=TOL)
    # a member's own record: its best validation MSE
    assert [float(ens.member(k).mean_validation_mse) for k in range(3)] == best
    users, items = np.asarray(valid.user), np.asarray(valid.item)
    each = [_numpy_predict(ens.member(k), users, items) for k in range(3)]
    mean = np.mean(each, axis=0)
    np.testing.assert_allclose(ens.predict(users, items), mean, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ens.predict(users, items, clip=True), np.clip(mean, 1, 5), 1e-6)
    # predict_all: every item's mean prediction, row by row
    all_items = np.asarray(ens.predict_all(np.array([4, 0])))
    for row, u in zip(all_items, (4, 0), strict=True):
        each_u = [
            _numpy_predict(ens.member(k), np.full(train.n_items, u), np.arange(train.n_items))
            for k in range(3)
        ]
        np.testing.assert_allclose(row, np.mean(each_u, axis=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        float(ens.mean_validation_mse), np.mean((mean - valid.rating) ** 2), rtol=1e-6
    )
    # by convexity the mean's error is at most the members' average error
    member_mse = [np.mean((p - valid.rating) ** 2) for p in each]
    assert float(ens.mean_validation_mse) <= np.mean(member_mse) + 1e-12
    assert len({round(m, 8) for m in member_mse}) == 3  # three different local optima


@pytest.mark.parametrize("warm_start", [False, True])
def test_ensemble_member_0_is_the_chosen_fit_and_refits_are_stationary(data, warm_start):
    """Member 0 is the fit without ensemble (warm-started or not); with refit every member's
    item factors zero the gradient of the loss over train + validation (numpy KKT)."""
    train, valid = data
    model = CMTRF(transform="none", rank=2, max_iter=10)
    kw = {"l2_user": (0.3, 3.0), "l2_item": (0.5, 5.0), "warm_start": warm_start, "refit": True}
    key = jax.random.key(0)
    single = model.fit(train, key=key, validation=valid, search=Search(**kw))
    ens = model.fit(train, key=key, validation=valid, search=Search(ensemble=3, **kw))
    for f in _MEMBER_FIELDS:
        np.testing.assert_array_equal(getattr(single, f), getattr(ens.member(0), f))
    both = train.concat(valid)
    for k in range(3):
        assert _item_gradient(ens.member(k), both) < 1e-8
        assert _item_gradient(ens.member(k), train) > 1e-3
    assert float(ens.l2_user) == float(single.l2_user)


def test_ensemble_save_load_and_errors(data, tmp_path):
    train, valid = data
    ens = CMTRF(transform="clustered", n_clusters=2, rank=2, max_iter=3).fit(
        train, key=jax.random.key(0), validation=valid, search=Search(ensemble=2)
    )
    jaxcal.save(ens, tmp_path / "ens.npz")
    back = jaxcal.load(tmp_path / "ens.npz")
    assert isinstance(back, CMTRFModel) and back.transforms.shape == (2, 2, 5)
    for a, b in zip(jax.tree.leaves(ens), jax.tree.leaves(back), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(back.predict([0, 1], [2, 3]), ens.predict([0, 1], [2, 3]))
    with pytest.raises(ValueError, match="member index must lie in"):
        ens.member(2)
    with pytest.raises(ValueError, match="member index must lie in"):
        ens.member(True)


@pytest.mark.parametrize("batch", [None, 3])
def test_vmapped_grid_chunks_equal_the_sequential_grid(data, batch):
    """On a CPU the grid runs point after point; grid_batch_size vmaps chunks of points (3 of
    4: a chunk and a remainder): the same fits either way, and each equals its single fit."""
    train, valid = data
    kw = {"transform": "global", "rank": 2, "max_iter": 6}
    key = jax.random.key(4)
    grid = CMTRF(**kw).fit(
        train,
        key=key,
        validation=valid,
        search=Search(l2_user=[0.3, 3.0], l2_item=[1.0, 2.0]),
        solver=CMTRFSolver(grid_batch_size=batch),
    )
    mse = np.asarray(grid.grid_validation_mse)[..., 0]
    for a, lu in enumerate([0.3, 3.0]):
        for b, li in enumerate([1.0, 2.0]):
            one = CMTRF(l2_user=lu, l2_item=li, **kw).fit(train, key=key, validation=valid)
            np.testing.assert_allclose(mse[a, b], one.grid_validation_mse[0, 0, 0], rtol=TOL)


def test_the_estimator_is_its_pure_core(data):
    """Oracle: the pure core called by hand (core.fit_one at replicate r's key fold_in(k, r)
    with k = split(key)[1], each grid point's penalties, min_gap, patience and tol, and the
    solver's Newton steps and initial scale; the lowest validation MSE chosen; the ensemble's
    further members at the replicates after the grid's). The estimator's Search / CMTRFSolver
    options reach the core unchanged, member by member."""
    from jaxcal._shapes import padded_size
    from jaxcal.recsys import _cmtrf_core as core
    from jaxcal.recsys.cmtrf import _pairs, _training_problem

    train, valid = data
    model = CMTRF(
        transform="per_user", rank=2, objective="poisson", biases=True, min_gap=0.3,
        max_iter=6, patience=2, tol=1e-3,
    )  # fmt: skip
    search = Search(l2_user=(0.5, 2.0), l2_item=(1.0,), n_replicates=2, ensemble=2)
    solver = CMTRFSolver(n_newton=3, init_scale=0.2, dense=False)
    key = jax.random.key(7)
    fitted = model.fit(train, key=key, validation=valid, search=search, solver=solver)

    pairs = _pairs(valid.user, valid.item, valid.rating, padded_size(valid.rating.size), False)
    problem = _training_problem(train, None, pairs)
    cfg = core.Config(
        n_users=padded_size(train.n_users), n_items=padded_size(train.n_items), n_levels=5,
        rank=2, transform="per_user", loss="poisson", biases=True, n_sweeps=6, n_newton=3,
        init_scale=0.2,
    )  # fmt: skip
    fit_one = jax.jit(lambda k, lu, li: core.fit_one(problem, k, lu, li, 0.3, 2, 1e-3, cfg)[0])
    k_grid = jax.random.split(key)[1]

    def run(lu, li, r):
        return fit_one(jax.random.key_data(jax.random.fold_in(k_grid, r)), lu, li)

    grid = {(a, r): run(lu, 1.0, r) for a, lu in enumerate((0.5, 2.0)) for r in range(2)}
    mse = np.array([[float(grid[a, r].best_mse) for r in range(2)] for a in range(2)])
    np.testing.assert_allclose(fitted.grid_validation_mse[:, 0, :], mse, rtol=1e-8)
    a, r = np.unravel_index(np.argmin(mse), mse.shape)
    assert float(fitted.l2_user) == (0.5, 2.0)[a] and float(fitted.l2_item) == 1.0
    members = [grid[a, r], run((0.5, 2.0)[a], 1.0, 2)]  # the next replicate after the grid's
    for k, out in enumerate(members):
        got = fitted.member(k)
        n_u, n_i = train.n_users, train.n_items
        want = {
            "user_factors": out.state.user_factors[:n_u],
            "item_factors": out.state.item_factors[:n_i],
            "user_bias": out.state.user_bias[:n_u],
            "item_bias": out.state.item_bias[:n_i],
            "transforms": out.state.transforms[:n_u],
            "offset": out.state.offset,
            "validation_mse": out.history,
        }
        for name, value in want.items():
            # the compiled ridge kernel or segment sums: equal up to summation order
            np.testing.assert_allclose(_one(got, name), value, rtol=1e-8, atol=1e-10)
        assert int(_one(got, "best_sweep")) == int(out.best_sweep)
