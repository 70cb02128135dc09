"""Rating simulators (against the design's formulas, re-implemented here and inverted
numerically) and rating splits (exact partitions, fractions, chronological order)."""

from __future__ import annotations

import math

import jax
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import chi2_contingency

from jaxcal.data import Interactions, RatingSimulation, simulate_ratings, split_ratings

SMALL = dict(n_users=90, n_items=120, density=0.15)
KEY3 = jax.random.key(3)


def _h(t: float, shape: str, k: float) -> float:
    """The segment shapes of the module docstring, written out again."""
    if shape == "concave":
        return (1 - math.exp(-k * t)) / (1 - math.exp(-k))
    if shape == "convex":
        return (math.exp(k * t) - 1) / (math.exp(k) - 1)
    sig = lambda x: 1 / (1 + math.exp(-x))  # noqa: E731
    s_curve = lambda t: (sig(k * (t - 0.5)) - sig(-k / 2)) / (sig(k / 2) - sig(-k / 2))  # noqa: E731
    if shape == "s":
        return s_curve(t)
    return brentq(lambda v: s_curve(v) - t, 0.0, 1.0, xtol=1e-15)  # inverse_s


def _continuous_rating(x: float, shape: str, k: float, n_levels: int, noise: float) -> float:
    tau = math.sqrt(1 + noise**2)
    t = min(1.0, max(0.0, (x + 1.2 * tau) / (2.4 * tau)))
    return 1 + (n_levels - 1) * _h(t, shape, k)


def _invert(value: float, shape: str, k: float, n_levels: int, noise: float) -> float:
    tau = math.sqrt(1 + noise**2)
    f = lambda x: _continuous_rating(x, shape, k, n_levels, noise) - value  # noqa: E731
    return brentq(f, -1.2 * tau, 1.2 * tau, xtol=1e-14)


@pytest.mark.parametrize(
    "design, n_segments, n_levels, noise",
    [("sd1", None, 5, 0.1), ("sd2", 3, 5, 0.3), ("sd2", 6, 7, 0.0), ("sd2", 2, 3, 0.1)],
)
def test_truth_reproduces_the_ratings(design, n_segments, n_levels, noise):
    sim = simulate_ratings(
        design, n_segments=n_segments, n_levels=n_levels, noise=noise, key=KEY3, **SMALL
    )
    assert isinstance(sim, RatingSimulation)
    n_seg = 1 if n_segments is None else n_segments
    x = sim.ratings
    assert sim.scores.shape == (90, 120) and sim.segment.shape == (90,)
    assert sim.level_scores.shape == (n_seg, n_levels)
    assert sim.thresholds.shape == (n_seg, n_levels - 1) and sim.latent.shape == (x.size,)
    assert x.rating.dtype == np.int64 and (x.n_users, x.n_items) == (90, 120)
    # level_scores and thresholds: the continuous rating of the docstring, inverted numerically
    for s, (shape, k) in enumerate(sim.transforms):
        want = [_invert(r, shape, k, n_levels, noise) for r in range(1, n_levels + 1)]
        np.testing.assert_allclose(sim.level_scores[s], want, atol=1e-10)
        cuts = [_invert(r + 0.5, shape, k, n_levels, noise) for r in range(1, n_levels)]
        np.testing.assert_allclose(sim.thresholds[s], cuts, atol=1e-10)
    # each rating is the nearest level of the continuous rating of its noisy latent score
    seg = sim.segment[x.user]
    c = np.array(
        [
            _continuous_rating(v, *sim.transforms[s], n_levels, noise)
            for v, s in zip(sim.latent, seg, strict=True)
        ]
    )
    np.testing.assert_array_equal(x.rating, np.round(c).astype(np.int64))
    for s in range(n_seg):
        m = seg == s
        np.testing.assert_allclose(sim.continuous_rating(sim.latent[m], s), c[m], atol=1e-12)
        assert set(x.rating[m].tolist()) == set(range(1, n_levels + 1))  # every level used
    # the noise: latent - score has the requested spread (n ~ 1,600: 5 sd ~ 9%)
    resid = sim.latent - sim.scores[x.user, x.item]
    if noise == 0:
        assert np.all(resid == 0)
    else:
        assert abs(resid.std() / noise - 1) < 0.1


def test_scores_density_segments_and_determinism():
    sim = simulate_ratings("sd2", rank=4, key=jax.random.key(5), **SMALL)
    assert np.linalg.matrix_rank(sim.scores) == 4
    assert abs(sim.scores.var() - 1) < 0.25  # about standard normal by construction
    counts = np.bincount(sim.segment)
    assert counts.max() - counts.min() <= 1  # balanced segments
    per_user = np.bincount(sim.ratings.user, minlength=90)
    assert per_user.min() >= 2
    # Bernoulli(0.15) over 10,800 pairs: sd ~ 0.0034; the two forced per user add <= 2/120
    assert abs(sim.ratings.size / (90 * 120) - 0.15) < 0.02
    pairs = sim.ratings.user * 120 + sim.ratings.item
    assert np.all(np.diff(pairs) > 0)  # sorted by (user, item), no duplicate
    again = simulate_ratings("sd2", rank=4, key=jax.random.key(5), **SMALL)
    for name in ("scores", "segment", "level_scores", "thresholds", "latent"):
        np.testing.assert_array_equal(getattr(sim, name), getattr(again, name))
    np.testing.assert_array_equal(sim.ratings.rating, again.ratings.rating)
    other = simulate_ratings("sd2", rank=4, key=jax.random.key(6), **SMALL)
    assert not np.array_equal(other.scores, sim.scores)
    assert np.all(simulate_ratings("sd1", key=jax.random.key(5), **SMALL).segment == 0)


def _affine_residual(a: np.ndarray, b: np.ndarray) -> float:
    """Root mean squared residual of the best affine map a -> b, relative to b's spread."""
    design = np.stack([a, np.ones_like(a)], axis=1)
    coef, *_ = np.linalg.lstsq(design, b, rcond=None)
    return float(np.sqrt(np.mean((design @ coef - b) ** 2)) / b.std())


def test_segments_really_differ():
    """No affine map of one segment's level scores is another's, and the segments' rating
    distributions differ (chi-square on the simulated ratings)."""
    sim = simulate_ratings("sd2", n_segments=6, key=jax.random.key(0), n_users=300, n_items=200)
    n_seg = sim.level_scores.shape[0]
    for s in range(n_seg):
        # each transform is non-linear: its level scores are not evenly spaced
        assert _affine_residual(np.arange(5.0), sim.level_scores[s]) > 0.03
        for t in range(s + 1, n_seg):
            assert _affine_residual(sim.level_scores[s], sim.level_scores[t]) > 0.03
    table = np.stack(
        [np.bincount(sim.ratings.rating[sim.segment[sim.ratings.user] == s], minlength=6)[1:]
         for s in range(n_seg)]
    )  # fmt: skip
    assert chi2_contingency(table).pvalue < 1e-12


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(design="sd3"), "design must be one of"),
        (dict(n_users=1), "n_users must be an integer >= 2"),
        (dict(n_items=2.5), "n_items must be an integer"),
        (dict(rank=0), "rank must be an integer >= 1"),
        (dict(density=0.0), r"density must be a number in \(0.0, 1.0\]"),
        (dict(density=1.5), "density"),
        (dict(noise=-0.1), "noise"),
        (dict(noise=float("nan")), "noise"),
        (dict(noise=float("inf")), "noise"),
        (dict(n_levels=1), "n_levels"),
        (dict(key=-1), "key must be a JAX PRNG key"),
        (dict(key=None), "key is required"),
        (dict(design="sd1", n_segments=3), "'sd1' has one segment"),
        (dict(design="sd2", n_segments=1), "'sd2' needs 2..6 segments"),
        (dict(design="sd2", n_segments=7), "'sd2' needs 2..6 segments"),
        (dict(design="sd2", n_segments=2.0), "n_segments must be an integer"),
    ],
)
def test_simulate_validates_arguments(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        simulate_ratings(**{"key": jax.random.key(0), **kwargs})


def test_simulation_from_a_key_is_the_integer_seeds():
    """The documented draw (jaxcal._rng.numpy_rng): the key jax.random.key(s) seeds NumPy
    with the integer s, so the factors are NumPy's draws from default_rng(s)."""
    sim = simulate_ratings("sd1", rank=3, key=jax.random.key(11), **SMALL)
    rng = np.random.default_rng(11)
    u = rng.normal(scale=1.0 / math.sqrt(3), size=(90, 3))
    v = rng.normal(size=(120, 3))
    np.testing.assert_allclose(sim.scores, u @ v.T, rtol=1e-12)


# --------------------------------------------------------------------------- splits


def _keys(x: Interactions) -> np.ndarray:
    return x.user * x.n_items + x.item


def _ratings(n_users=40, n_items=50, n=700, seed=0) -> Interactions:
    rng = np.random.default_rng(seed)
    pairs = rng.choice(n_users * n_items, size=n, replace=False)
    return Interactions(pairs // n_items, pairs % n_items, rng.integers(1, 6, n), n_users, n_items)


def _assert_partition(x, parts):
    keys = np.concatenate([_keys(p) for p in parts])
    assert keys.size == x.size and np.array_equal(np.sort(keys), np.sort(_keys(x)))
    for p in parts:
        assert (p.n_users, p.n_items) == (x.n_users, x.n_items)
        pos = np.searchsorted(np.sort(_keys(x)), _keys(p))
        order = np.argsort(_keys(x))[pos]  # positions in the input
        assert np.all(np.diff(order) > 0)  # the input's order is kept
        np.testing.assert_array_equal(p.rating, x.rating[order])


def test_random_split_partitions_with_the_fractions():
    x = _ratings()
    train, val, test = split_ratings(x, validation=0.1, test=0.25, key=jax.random.key(1))
    _assert_partition(x, (train, val, test))
    assert (val.size, test.size) == (70, 175)  # round(0.1 * 700), round(0.25 * 700)
    again = split_ratings(x, validation=0.1, test=0.25, key=jax.random.key(1))
    assert all(
        np.array_equal(_keys(a), _keys(b)) for a, b in zip(again, (train, val, test), strict=True)
    )
    other = split_ratings(x, validation=0.1, test=0.25, key=jax.random.key(2))
    assert not np.array_equal(_keys(other[2]), _keys(test))
    # no validation part
    train, val, test = split_ratings(x, validation=0.0, test=0.2, key=jax.random.key(1))
    assert val.size == 0 and test.size == 140 and train.size == 560


def test_random_split_is_uniform():
    """Each rating goes to test with probability `test`: over 200 seeds, every rating's
    count is Binomial(200, 0.2) (mean 40, sd 5.7): all within 6 sd."""
    x = _ratings(n=100)
    hits = np.zeros(100)
    index = {k: i for i, k in enumerate(_keys(x))}
    for seed in range(200):
        key = jax.random.key(seed)
        for k in _keys(split_ratings(x, validation=0.1, test=0.2, key=key)[2]):
            hits[index[k]] += 1
    assert np.all(np.abs(hits - 40) < 6 * math.sqrt(200 * 0.2 * 0.8))


def test_chronological_split():
    x = _ratings()
    rng = np.random.default_rng(3)
    stamp = rng.integers(0, 300, x.size)  # many ties in time
    train, val, test = split_ratings(x, validation=0.1, test=0.2, timestamp=stamp)
    _assert_partition(x, (train, val, test))
    assert (val.size, test.size) == (70, 140)
    t = dict(zip(_keys(x).tolist(), stamp.tolist(), strict=True))
    times = [np.array([t[k] for k in _keys(p).tolist()]) for p in (train, val, test)]
    assert times[0].max() <= times[1].min() and times[1].max() <= times[2].min()
    # ties in time keep the input order: the stable sort by time, cut at 490 and 560
    order = np.argsort(stamp, kind="stable")
    np.testing.assert_array_equal(np.sort(_keys(test)), np.sort(_keys(x)[order[560:]]))
    np.testing.assert_array_equal(np.sort(_keys(val)), np.sort(_keys(x)[order[490:560]]))


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        (dict(validation=-0.1), "validation must be a number in"),
        (dict(test=1.0, validation=0.0), "validation \\+ test must be < 1"),
        (dict(validation=0.5, test=0.5), "validation \\+ test must be < 1"),
        (dict(timestamp=np.arange(3)), "one value per rating"),
        (dict(timestamp=np.full(700, np.nan)), "without NaN"),
        (dict(timestamp=np.array(["a"] * 700)), "numeric"),
        (dict(), "key is required for a random split"),
        (dict(key=1), "key must be a JAX PRNG key"),
    ],
)
def test_split_validates(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        split_ratings(_ratings(), **kwargs)
    with pytest.raises(ValueError, match="Interactions"):
        split_ratings(np.ones((3, 3)))
    with pytest.raises(ValueError, match="no ratings"):
        split_ratings(_ratings().select(np.zeros(700, bool)))
