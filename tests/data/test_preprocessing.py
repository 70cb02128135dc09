"""Binarisation, hold-outs, negative sampling and the calibration-data builder, against
brute-force loops, exact counts, chi-square uniformity tests and closed forms."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import optimize, stats

from jaxcal.data import (
    Interactions,
    binarize,
    calibration_pairs,
    holdout_rate,
    holdout_split,
    load_coat,
    sample_negatives,
)
from jaxcal.debias import negative_sampling_base_rate

EXACT = 1e-12
ALPHA = 1e-3  # significance level of the statistical checks (fixed seeds)


@pytest.fixture(scope="module")
def coat(data_dir):
    return load_coat(data_dir / "coat")


def _ratings(seed, shape=(30, 40), density=0.3):
    rng = np.random.default_rng(seed)
    return np.where(rng.random(shape) < density, rng.integers(1, 6, shape), 0)


def test_binarize_dense_and_triples():
    m = _ratings(0)
    b = binarize(m)
    for (u, i), r in np.ndenumerate(m):
        assert b[u, i] == (1 if r >= 4 else 0)
    x = Interactions.from_dense(m)
    pos = binarize(x)
    assert set(pos.rating.tolist()) == {1}
    np.testing.assert_array_equal(pos.to_dense(), b)
    both = binarize(x, keep_negatives=True)
    assert both.size == x.size and both.rating.sum() == b.sum()
    np.testing.assert_array_equal(binarize(m, threshold=5), (m == 5).astype(int))
    with pytest.raises(ValueError, match="threshold must be > 0"):
        binarize(m, threshold=0)


def test_random_holdout_partition_size_and_reproducibility():
    pos = binarize(_ratings(1))
    n = int(pos.sum())
    train, valid = holdout_split(pos, fraction=0.1, key=jax.random.key(7))
    assert int(valid.sum()) == round(0.1 * n)
    assert not (train & valid).any()
    np.testing.assert_array_equal(train + valid, pos)
    again = holdout_split(pos, fraction=0.1, key=jax.random.key(7))
    np.testing.assert_array_equal(again[1], valid)
    other = holdout_split(pos, fraction=0.1, key=jax.random.key(8))
    assert not np.array_equal(other[1], valid)
    legacy = holdout_split(pos, fraction=0.1, key=jax.random.PRNGKey(7))  # the same key
    np.testing.assert_array_equal(legacy[1], valid)
    # the documented draw: NumPy's choice from default_rng(7), the key's integer
    idx = np.random.default_rng(7).choice(n, size=round(0.1 * n), replace=False)
    flat = np.zeros(n, bool)
    flat[idx] = True
    u, i = np.nonzero(pos)  # the interactions in row-major order
    np.testing.assert_array_equal(np.argwhere(valid), np.stack([u[flat], i[flat]], 1))
    assert holdout_rate(train, valid) == pytest.approx(round(0.1 * n) / n, abs=EXACT)
    # triples in, triples out
    x = binarize(Interactions.from_dense(_ratings(1)))
    tr, va = holdout_split(x, fraction=0.1, key=jax.random.key(7))
    assert tr.size + va.size == x.size and va.size == round(0.1 * x.size)


def test_random_holdout_is_uniform_over_interactions():
    """Each interaction is held out with probability k/n: chi-square over 600 seeds."""
    pos = binarize(_ratings(2, (6, 8), 0.5))
    n = int(pos.sum())
    k = round(0.25 * n)
    counts = sum(holdout_split(pos, fraction=0.25, key=jax.random.key(s))[1] for s in range(600))
    observed = counts[pos == 1]
    assert observed.sum() == 600 * k
    assert stats.chisquare(observed).pvalue > ALPHA


def _per_user_last_oracle(pos, fraction=0.1, min_count=4):
    valid = np.zeros_like(pos)
    for u in range(pos.shape[0]):
        items = sorted(np.flatnonzero(pos[u]).tolist())
        if len(items) > min_count:
            k = max(round(fraction * len(items)), 1)  # Python's round, as the authors'
            valid[u, items[-k:]] = 1
    return valid


def test_per_user_last_matches_seed_paper_rule(coat):
    rng = np.random.default_rng(3)
    # users with 0..40 positives, including n = 15, 25, 35 where 0.1 n rounds half to even
    pos = np.zeros((45, 60), np.int64)
    for u in range(45):
        pos[u, rng.choice(60, size=u % 41, replace=False)] = 1
    for m in (pos, binarize(coat.train)):
        train, valid = holdout_split(m, method="per_user_last")
        np.testing.assert_array_equal(valid, _per_user_last_oracle(m))
        np.testing.assert_array_equal(train + valid, m)
    rate = holdout_rate(*holdout_split(pos, method="per_user_last"), per_user=True)
    oracle = [(max(round(0.1 * n), 1) / n if n > 4 else 0.0) for n in pos.sum(1)]
    np.testing.assert_allclose(rate, oracle, atol=EXACT)


def test_holdout_errors():
    with pytest.raises(ValueError, match="method"):
        holdout_split(np.eye(3), method="last")
    with pytest.raises(ValueError, match="fraction"):
        holdout_split(np.eye(3), fraction=1.5)
    with pytest.raises(ValueError, match="no interactions"):
        holdout_split(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
        holdout_split(np.eye(3), key="seed")
    with pytest.raises(ValueError, match="key is required for method='random'"):
        holdout_split(np.eye(3))
    with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
        holdout_split(np.eye(3), key=7)


def test_sample_negatives_uniform_over_allowed_items():
    rng = np.random.default_rng(4)
    known = (rng.random((5, 12)) < 0.4).astype(int)
    known[0] = 0
    known[1] = 1
    known[1, 11] = 0  # a single allowed item
    users = np.repeat(np.arange(5), 3)
    draws = sample_negatives(known, users, n_per_row=2000, key=jax.random.key(0))
    assert draws.shape == (15, 2000)
    for row, u in enumerate(users):
        allowed = np.flatnonzero(known[u] == 0)
        assert np.isin(draws[row], allowed).all()
        counts = np.bincount(draws[row], minlength=12)[allowed]
        if allowed.size > 1:
            assert stats.chisquare(counts).pvalue > ALPHA
    # without replacement: distinct items per row, uniform marginals
    d2 = sample_negatives(
        known, np.zeros(3000, np.int64), n_per_row=4, key=jax.random.key(1), replace=False
    )
    assert all(len(set(r)) == 4 for r in d2.tolist())
    assert stats.chisquare(np.bincount(d2.ravel(), minlength=12)).pvalue > ALPHA
    key = jax.random.key(2)
    with pytest.raises(ValueError, match="user 1 has 1 items"):
        sample_negatives(known, [1], n_per_row=2, replace=False, key=key)
    full = np.ones((2, 3))
    with pytest.raises(ValueError, match="user 0 has 0 items"):
        sample_negatives(full, [0], key=key)
    with pytest.raises(ValueError, match="range"):
        sample_negatives(known, [9], key=key)
    with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
        sample_negatives(known, [0], key=0)
    np.testing.assert_array_equal(  # the same key, the same draws
        sample_negatives(known, users, n_per_row=5, key=key),
        sample_negatives(known, users, n_per_row=5, key=jax.random.key(2)),
    )


def _constant_fit(labels, targets, weights):
    """Level of the best constant logit under sum w [softplus(z) - t z] (scipy)."""
    res = optimize.minimize_scalar(
        lambda z: np.sum(weights * (np.logaddexp(0, z) - targets * z)),
        bounds=(-30, 30),
        method="bounded",
        options={"xatol": 1e-12},
    )
    return 1 / (1 + np.exp(-res.x))


@pytest.mark.parametrize("r", [1, 4, 57])
def test_calibration_pairs_base_rate_closed_form(coat, r):
    pos = binarize(coat.train)
    train, valid = holdout_split(pos, method="per_user_last")
    omega = np.clip(coat.propensities * 5, 0.05, 1.0)
    cp = calibration_pairs(valid, train, n_negatives=r, key=jax.random.key(0), propensity=omega)
    n_pos = int(valid.sum())
    assert cp.labels.sum() == n_pos and cp.labels.size == n_pos * (1 + r)
    # negatives are never known positives; positives are exactly the validation pairs
    neg = cp.labels == 0
    assert not (pos[cp.user[neg], cp.item[neg]]).any()
    assert (valid[cp.user[~neg], cp.item[~neg]] == 1).all()
    # each positive's user gets r negatives of its own
    np.testing.assert_array_equal(np.bincount(cp.user[neg], minlength=290), r * valid.sum(1))
    m = float(np.mean(1 / omega[valid == 1]))
    for loss in ("naive", "ips", "ips_positive", "snips"):
        closed = negative_sampling_base_rate(r, loss=loss, mean_inverse_propensity=m)
        assert cp.base_rate[loss] == pytest.approx(closed, rel=EXACT)
    assert cp.base_rate["naive"] == pytest.approx(1 / (1 + r), rel=EXACT)
    # the meaning of "implied": a constant calibrator fitted by scipy lands there
    y, w_pos = cp.labels, np.where(cp.labels == 1, 1 / cp.propensity, 1.0)
    assert _constant_fit(y, y, np.ones_like(y)) == pytest.approx(cp.base_rate["naive"], rel=1e-7)
    assert _constant_fit(y, y, w_pos) == pytest.approx(cp.base_rate["ips_positive"], rel=1e-7)
    # with the negative weights, the level is that of all non-training pairs of these users
    users = np.flatnonzero(valid.sum(1) > 0)
    allowed = (300 - pos[users].sum(1)).sum()
    assert cp.population_base_rate["naive"] == pytest.approx(n_pos / (n_pos + allowed), rel=1e-10)


def test_calibration_pairs_all_negatives_and_errors():
    pos = binarize(_ratings(5))
    train, valid = holdout_split(pos, key=jax.random.key(0))
    cp = calibration_pairs(valid, train, n_negatives=None)
    users = np.flatnonzero(valid.sum(1) > 0)
    # exactly the non-training pairs of the validation users
    expected = {(u, i) for u in users for i in range(pos.shape[1]) if train[u, i] == 0}
    assert set(zip(cp.user.tolist(), cp.item.tolist(), strict=True)) == expected
    assert cp.base_rate["naive"] == pytest.approx(valid.sum() / len(expected), rel=EXACT)
    assert cp.propensity is None and set(cp.base_rate) == {"naive"}
    # all_users: every user's non-training pairs (a random hold-out could hit any user)
    cp_all = calibration_pairs(valid, train, n_negatives=None, all_users=True)
    every = {(u, i) for u in range(pos.shape[0]) for i in range(pos.shape[1]) if not train[u, i]}
    assert set(zip(cp_all.user.tolist(), cp_all.item.tolist(), strict=True)) == every
    assert len(every) > len(expected)  # the fixture has users without validation positives
    assert cp_all.base_rate["naive"] == pytest.approx(valid.sum() / len(every), rel=EXACT)
    with pytest.raises(ValueError, match="no positives"):
        calibration_pairs(np.zeros_like(pos), train)
    with pytest.raises(ValueError, match="shape mismatch"):
        calibration_pairs(valid, train[:, :3])
    with pytest.raises(ValueError, match="n_negatives"):
        calibration_pairs(valid, train, n_negatives=0)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="propensity must be"):
        calibration_pairs(valid, train, propensity=np.ones(3), key=key)
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        calibration_pairs(valid, train, propensity=np.zeros(pos.shape[1]), key=key)
    with pytest.raises(ValueError, match="key is required to draw the negatives"):
        calibration_pairs(valid, train, n_negatives=3)
    with pytest.raises(ValueError, match="key must be a JAX PRNG key"):
        calibration_pairs(valid, train, n_negatives=3, key=0)
    a = calibration_pairs(valid, train, n_negatives=3, key=key)
    b = calibration_pairs(valid, train, n_negatives=3, key=jax.random.key(0))
    np.testing.assert_array_equal(a.item, b.item)  # the same key, the same negatives
