"""MMC (monotone matrix completion): the iterations against a NumPy / scikit-learn oracle,
recovery of a low-rank matrix seen through a monotone link, errors, save / load, shapes."""

import jax
import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

import jaxcal
from jaxcal._shapes import padded_size
from jaxcal.data import Interactions
from jaxcal.recsys import MMC, MMCModel

RTOL64 = 1e-10


def _monotone_low_rank(m=24, n=20, rank=2, density=0.6, seed=0, link=None):
    """Dense truth ``g(U V^T)`` and a random observed part of it."""
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(m, rank)) @ rng.normal(size=(rank, n))
    x = (link or (lambda t: 1 / (1 + np.exp(-3 * t))))(z)
    observed = rng.random((m, n)) < density
    u, i = np.nonzero(observed)
    return x, observed, Interactions(u, i, x[u, i], m, n)


def _numpy_mmc(x_obs, rows, cols, is_train, shape, rank, step, n_iter):
    """The MMC-c iterations in NumPy: SVD by numpy, the link by scikit-learn's isotonic
    regression (linear between knots, constant beyond). Returns per iterate the dense Z
    and the link's values at the listed entries."""
    m, n = shape
    scale = m * n / is_train.sum()

    def project(a):
        u, s, vt = np.linalg.svd(a, full_matrices=False)
        return (u[:, :rank] * s[:rank]) @ vt[:rank]

    def link_at_entries(z):
        iso = IsotonicRegression(out_of_bounds="clip").fit(
            z[rows[is_train], cols[is_train]], x_obs[is_train]
        )
        return iso.predict(z[rows, cols])

    p = np.zeros(shape)
    p[rows[is_train], cols[is_train]] = x_obs[is_train]
    z = project(scale * p)
    out = [(z, link_at_entries(z))]
    for _ in range(n_iter):
        g = out[-1][1]
        grad = np.zeros(shape)
        grad[rows[is_train], cols[is_train]] = (g - x_obs)[is_train]
        z = project(z - step * scale * grad)
        out.append((z, link_at_entries(z)))
    return out


def test_iterations_match_a_numpy_and_sklearn_oracle():
    """Two iterations: the MSE histories, the chosen iterate's scores and its predictions
    (the isotonic link at the validation entries) equal the oracle's to float64 rounding."""
    x, _, train = _monotone_low_rank()
    rng = np.random.default_rng(1)
    held = rng.random(train.size) < 0.2
    fit_part, val_part = train.select(~held), train.select(held)
    model = MMC(rank=2, max_iter=2, step=1.5).fit(
        fit_part, key=jax.random.key(0), validation=val_part
    )

    rows = np.concatenate([fit_part.user, val_part.user])
    cols = np.concatenate([fit_part.item, val_part.item])
    x_obs = np.concatenate([fit_part.rating, val_part.rating])
    is_train = np.arange(rows.size) < fit_part.size
    oracle = _numpy_mmc(x_obs, rows, cols, is_train, x.shape, rank=2, step=1.5, n_iter=2)
    val_mse = [np.mean((g[~is_train] - x_obs[~is_train]) ** 2) for _, g in oracle]
    train_mse = [np.mean((g[is_train] - x_obs[is_train]) ** 2) for _, g in oracle]
    np.testing.assert_allclose(model.validation_mse, val_mse, rtol=1e-8)
    np.testing.assert_allclose(model.train_mse, train_mse, rtol=1e-8)

    best = int(np.argmin(val_mse))
    assert int(model.best_iteration) == best
    z_best, g_best = oracle[best]
    users, items = np.meshgrid(np.arange(x.shape[0]), np.arange(x.shape[1]), indexing="ij")
    np.testing.assert_allclose(model.predict_latent(users, items), z_best, rtol=1e-8, atol=1e-10)
    # predict_all: every item's prediction, row by row (the pairwise predict as the oracle)
    np.testing.assert_array_equal(
        model.predict_all(np.array([3, 0])), model.predict(np.array([[3], [0]]), items[:1])
    )
    assert model.predict_all().shape == x.shape
    np.testing.assert_allclose(
        model.predict(val_part.user, val_part.item), g_best[~is_train], rtol=1e-8, atol=1e-10
    )


def _ridge_mf(train, rank, l2, sweeps=40):
    """Ridge MF by exact ALS sweeps (NumPy): the linear-link baseline."""
    rng = np.random.default_rng(0)
    u, i, r = train.user, train.item, train.rating.astype(float)
    a = rng.normal(scale=0.3, size=(train.n_users, rank))
    b = rng.normal(scale=0.3, size=(train.n_items, rank))
    eye = l2 * np.eye(rank)
    for _ in range(sweeps):
        for rows, f, g, ids, other in (
            (a, u, b, range(train.n_users), i),
            (b, i, a, range(train.n_items), u),
        ):
            for k in ids:
                s = f == k
                h = g[other[s]]
                rows[k] = np.linalg.solve(h.T @ h + eye, h.T @ r[s])
    return a @ b.T


def test_recovers_a_monotone_low_rank_matrix_where_ridge_mf_cannot():
    """Noise-free ``sigmoid(3 U V^T)`` of rank 2, 60% observed: MMC at the true rank
    completes the held-out entries to < 1e-3 MSE (the isotonic link makes the rank-2 model
    exact), ridge MF at the same rank stays far above it for every l2 tried."""
    x, observed, train = _monotone_low_rank(m=40, n=32)
    model = MMC(rank=2, max_iter=150, step=2.0).fit(train, key=jax.random.key(0))
    hu, hi = np.nonzero(~observed)
    mse = float(np.mean((np.asarray(model.predict(hu, hi)) - x[hu, hi]) ** 2))
    ridge = min(
        float(np.mean((_ridge_mf(train, 2, l2)[hu, hi] - x[hu, hi]) ** 2))
        for l2 in (0.01, 0.1, 1.0)
    )
    assert mse < 1e-3
    assert ridge > 20 * mse
    assert mse < 0.01 * x[hu, hi].var()
    p = np.asarray(model.predict(hu, hi))
    assert p.min() >= train.rating.min() - 1e-12 and p.max() <= train.rating.max() + 1e-12


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 0}, "rank must be an integer >= 1"),
        ({"rank": 2.0}, "rank must be an integer"),
        ({"max_iter": -1}, "max_iter must be an integer >= 0"),
        ({"step": 0.0}, "step must be a finite number and > 0"),
        ({"step": float("nan")}, "step must be a finite number and > 0"),
        ({"validation_fraction": True}, r"validation_fraction must lie in \(0, 1\)"),
        ({"validation_fraction": 1.0}, r"validation_fraction must lie in \(0, 1\)"),
    ],
)
def test_hyperparameters_are_checked_eagerly(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MMC(**kwargs)


def test_fit_inputs_are_checked_eagerly():
    _, _, train = _monotone_low_rank()
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="must be jaxcal.data.Interactions"):
        MMC().fit(np.ones((3, 3)), key=key)
    with pytest.raises(ValueError, match="key is required"):
        MMC().fit(train, key=None)
    with pytest.raises(ValueError, match="rank=30 exceeds min"):
        MMC(rank=30).fit(train, key=key)
    bad = train._replace(rating=np.where(np.arange(train.size) == 3, np.nan, train.rating))
    with pytest.raises(ValueError, match="non-finite"):
        MMC().fit(bad, key=key)
    other = Interactions(train.user, train.item, train.rating, train.n_users + 1, train.n_items)
    with pytest.raises(ValueError, match="both must index the same users and items"):
        MMC().fit(train, key=key, validation=other)
    tiny = train.select(np.arange(train.size) < 3)
    with pytest.raises(ValueError, match="leaves the training or the validation part empty"):
        MMC(validation_fraction=0.1).fit(tiny, key=key)
    model = MMC(rank=2, max_iter=1).fit(train, key=key)
    with pytest.raises(ValueError, match=r"users ids must lie in \[0, 24\)"):
        model.predict(np.array([24]), np.array([0]))


def test_save_load_round_trip_and_no_recompile_in_a_bucket(tmp_path, compiles):
    """A saved model loads to the same predictions; a second data set of another size in
    the same size buckets (ratings, users, items) and new step values compile nothing."""
    x, _, train = _monotone_low_rank()
    model = MMC(rank=2, max_iter=3).fit(train, key=jax.random.key(0))
    assert isinstance(model, MMCModel)
    users, items = np.nonzero(np.ones(x.shape, bool))
    path = tmp_path / "mmc.npz"
    jaxcal.save(model, path)
    loaded = jaxcal.load(path)
    np.testing.assert_array_equal(loaded.predict(users, items), model.predict(users, items))
    np.testing.assert_array_equal(loaded.validation_mse, model.validation_mse)
    assert loaded.rank == 2 and int(loaded.best_iteration) == int(model.best_iteration)

    _, _, other = _monotone_low_rank(m=23, n=19, density=0.64, seed=3)
    # another size, same buckets: all ratings, the training part (the link's knots)
    assert other.size != train.size
    for a, b in ((other.size, train.size), (other.size * 9 // 10, train.size * 9 // 10)):
        assert padded_size(a) == padded_size(b)
    with compiles() as c:
        refit = MMC(rank=2, max_iter=3, step=0.5).fit(other, key=jax.random.key(1))
        refit.predict(users[:300], items[:300] % 19)
    assert c.count == 0
    assert refit.n_users == 23 and refit.n_items == 19


def test_split_follows_the_key():
    """Without validation ratings, the key picks the held-out share: the same key gives the
    same model, another key another split."""
    _, _, train = _monotone_low_rank()
    fit = MMC(rank=2, max_iter=3, validation_fraction=0.25)
    a = fit.fit(train, key=jax.random.key(0))
    b = fit.fit(train, key=jax.random.key(0))
    c = fit.fit(train, key=jax.random.key(5))
    np.testing.assert_array_equal(a.validation_mse, b.validation_mse)
    assert not np.array_equal(np.asarray(a.train_mse), np.asarray(c.train_mse))
