"""Rating metrics against NumPy (MSE, MAE) and scipy.stats.kendalltau(variant="b") per user
(random data with ties in both variables, users of every size)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import kendalltau

from jaxcal.metrics import kendall_tau_per_user, rating_mae, rating_mse

RTOL64 = 1e-10


def _data(n: int, n_users: int, seed: int):
    rng = np.random.default_rng(seed)
    users = rng.integers(0, n_users, n)
    ratings = rng.integers(1, 6, n)
    # predictions on a coarse grid: many ties within a user
    predictions = np.round(ratings + rng.normal(scale=1.5, size=n), 0)
    return users, ratings, predictions


def test_mse_mae_are_numpys():
    rng = np.random.default_rng(0)
    r, p, w = rng.integers(1, 6, 300), rng.normal(3, 1, 300), rng.uniform(0, 2, 300)
    np.testing.assert_allclose(float(rating_mse(r, p)), np.mean((r - p) ** 2), rtol=RTOL64)
    np.testing.assert_allclose(float(rating_mae(r, p)), np.mean(np.abs(r - p)), rtol=RTOL64)
    np.testing.assert_allclose(
        float(rating_mse(r, p, w)), np.average((r - p) ** 2, weights=w), rtol=RTOL64
    )
    np.testing.assert_allclose(
        float(rating_mae(r, p, sample_weight=w)), np.average(np.abs(r - p), weights=w), rtol=RTOL64
    )


@pytest.mark.parametrize("seed, n, n_users", [(0, 400, 60), (1, 3000, 25), (2, 50, 40)])
def test_kendall_tau_b_is_scipys_per_user(seed, n, n_users):
    users, ratings, predictions = _data(n, n_users, seed)
    mean, per_user = kendall_tau_per_user(users, ratings, predictions, n_users=n_users + 3)
    per_user = np.asarray(per_user)
    assert per_user.shape == (n_users + 3,)
    want = np.full(n_users + 3, np.nan)
    for u in range(n_users):
        m = users == u
        if m.sum() >= 2 and np.ptp(ratings[m]) > 0 and np.ptp(predictions[m]) > 0:
            want[u] = kendalltau(ratings[m], predictions[m], variant="b").statistic
    np.testing.assert_array_equal(np.isnan(per_user), np.isnan(want))
    np.testing.assert_allclose(per_user, want, rtol=RTOL64, atol=RTOL64)
    np.testing.assert_allclose(float(mean), np.nanmean(want), rtol=RTOL64)


def test_undefined_users_are_nan():
    users = np.array([0, 1, 1, 2, 2, 2, 3, 3, 4, 4])
    ratings = np.array([5, 3, 3, 1, 2, 3, 4, 2, 2, 4])
    predictions = np.array([1.0, 0.2, 0.9, 0.5, 0.5, 0.5, 0.1, 0.7, 0.0, 0.3])
    # 0: one item; 1: ratings tied; 2: predictions tied; 3: tau = -1; 4: tau = 1
    mean, per_user = kendall_tau_per_user(users, ratings, predictions)
    np.testing.assert_array_equal(np.asarray(per_user), [np.nan, np.nan, np.nan, -1.0, 1.0])
    assert float(mean) == 0.0
    mean, per_user = kendall_tau_per_user([0, 0], [1, 1], [0.1, 0.2])
    assert np.isnan(float(mean)) and np.isnan(np.asarray(per_user)).all()


def test_large_users_and_near_ties():
    """Users with hundreds of items (MovieLens-like), predictions that differ only in the
    last float64 digits (kept distinct, as scipy does: the metric ranks them exactly)."""
    rng = np.random.default_rng(5)
    sizes = [700, 350, 3, 2]
    users = np.repeat(np.arange(4), sizes)
    ratings = rng.integers(1, 6, users.size)
    predictions = 3.0 + rng.integers(0, 40, users.size) * 1e-13
    _, per_user = kendall_tau_per_user(users, ratings, predictions)
    for u in range(4):
        m = users == u
        want = kendalltau(ratings[m], predictions[m], variant="b").statistic
        np.testing.assert_allclose(float(per_user[u]), want, rtol=RTOL64, atol=RTOL64)


def test_new_sizes_in_a_bucket_compile_nothing(compiles):
    users, ratings, predictions = _data(900, 50, 7)
    kendall_tau_per_user(users[:700], ratings[:700], predictions[:700], n_users=50)
    rating_mse(ratings[:700], predictions[:700])
    with compiles() as c:
        kendall_tau_per_user(users[:900], ratings[:900], predictions[:900], n_users=50)
        rating_mse(ratings[:900], predictions[:900])
        rating_mae(ratings[:800], predictions[:800])  # the first compile of the MAE program
    assert (c.traces, c.backend_compiles) == (1, 1)


@pytest.mark.parametrize(
    "call, msg",
    [
        (lambda: rating_mse([1, 2], [1.0]), "length mismatch"),
        (lambda: rating_mse([1, 2], [1.0, np.nan]), "predictions contain 1 non-finite"),
        (lambda: rating_mae([], []), "ratings is empty"),
        (lambda: rating_mse([1, 2], [1.0, 2.0], [-1, 1]), "non-negative"),
        (lambda: kendall_tau_per_user([0, 1], [1, 2, 3], [1, 2, 3]), "length mismatch"),
        (lambda: kendall_tau_per_user([0, -1], [1, 2], [1, 2]), "users must be >= 0"),
        (lambda: kendall_tau_per_user([0, 0.5], [1, 2], [1, 2]), "integer ids"),
        (lambda: kendall_tau_per_user([0, 3], [1, 2], [1, 2], n_users=2), "n_users must be"),
        (lambda: kendall_tau_per_user([0, 0], [1, np.inf], [1, 2]), "ratings contain"),
    ],
)
def test_validation(call, msg):
    with pytest.raises(ValueError, match=msg):
        call()
