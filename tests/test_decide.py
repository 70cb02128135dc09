"""jaxcal.decide against independent oracles: enumeration of every label vector, scipy's
Poisson-binomial, Monte Carlo, a brute-force Python loop over groups, cut-offs and draws,
and simulations with known true probabilities."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import scipy.stats

import jaxcal
from jaxcal import _shapes, decide

TOL = 1e-10  # float64 (tests/conftest.py), exact recursions


# ------------------------------------------------------------------------------ oracles
def _enumerated_pmf(p):
    """P(H = j) by summing the probability of each of the 2^k label vectors."""
    pmf = np.zeros(len(p) + 1)
    for y in itertools.product((0, 1), repeat=len(p)):
        y = np.array(y)
        pmf[y.sum()] += np.prod(np.where(y == 1, p, 1 - p))
    return pmf


def _brute_force(group, draws, rank_by, *, target, credibility, guarantee, min_k=1,
                 max_k=None, all_prefixes=False):  # fmt: skip
    """(k, credibility of the chosen k, curves) by loops over groups, cut-offs and draws;
    the realised precision by enumeration of label vectors."""
    ks, achieved, curves = [], [], []
    for g in sorted(set(group.tolist())):
        items = sorted(np.flatnonzero(group == g), key=lambda i: (-rank_by[i], i))
        size = len(items) if max_k is None else min(len(items), max_k)
        curve = []
        for k in range(1, size + 1):
            per_draw = []
            for d in range(draws.shape[0]):
                p = draws[d, items[:k]]
                if guarantee == "expected":
                    per_draw.append(float(p.sum() >= k * target))
                else:
                    pmf = _enumerated_pmf(p)
                    per_draw.append(pmf[np.arange(k + 1) >= k * target - 1e-9].sum())
            curve.append(np.mean(per_draw))
        chosen, passed_all = 0, True
        for k in range(min_k, size + 1):
            ok = curve[k - 1] >= credibility
            passed_all &= ok
            if ok and (passed_all or not all_prefixes):
                chosen = k
        allowed = curve[min_k - 1 :]
        ks.append(chosen)
        achieved.append(curve[chosen - 1] if chosen else max(allowed, default=0.0))
        curves.append(curve)
    return np.array(ks), np.array(achieved), curves


def _random_problem(seed, n_groups=5, max_size=7, n_draws=4):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, max_size + 1, size=n_groups)
    group = np.repeat(rng.permutation(100)[:n_groups], sizes)
    perm = rng.permutation(group.size)
    group = group[perm]
    base = rng.beta(2, 2, size=group.size)
    draws = np.clip(base + 0.15 * rng.normal(size=(n_draws, group.size)), 0, 1)
    return group, draws


# ------------------------------------------------------------------------------ the DP
def test_poisson_binomial_matches_enumeration_and_scipy():
    rng = np.random.default_rng(0)
    rows = rng.uniform(size=(3, 10))
    rows[1, :3] = (0.0, 1.0, 1.0)  # degenerate trials: support shrinks to [2, 9]
    got = np.exp(np.asarray(decide.poisson_binomial_logpmf(rows)))
    for r in range(3):
        np.testing.assert_allclose(got[r], _enumerated_pmf(rows[r]), rtol=0, atol=TOL)
        want = scipy.stats.poisson_binom.pmf(np.arange(11), rows[r])
        np.testing.assert_allclose(got[r], want, rtol=0, atol=TOL)
    one = np.exp(np.asarray(decide.poisson_binomial_logpmf(rows[0])))
    np.testing.assert_allclose(one, got[0], rtol=0, atol=TOL)


def test_poisson_binomial_matches_monte_carlo():
    """Empirical frequencies of 40,000 simulated sums within 4.5 standard errors."""
    rng = np.random.default_rng(1)
    p = rng.uniform(size=12)
    n = 40_000
    hits = (rng.uniform(size=(n, p.size)) < p).sum(axis=1)
    freq = np.bincount(hits, minlength=p.size + 1) / n
    pmf = np.exp(np.asarray(decide.poisson_binomial_logpmf(p)))
    se = np.sqrt(pmf * (1 - pmf) / n)
    assert np.all(np.abs(freq - pmf) <= 4.5 * se + 1e-4)


def test_poisson_binomial_log_space_does_not_underflow():
    """200 trials of probability 1e-3: P(H = 200) = 1e-600, far below float64's range,
    and P(H = 0) = 0.999^200 (closed forms)."""
    logpmf = np.asarray(decide.poisson_binomial_logpmf(np.full(200, 1e-3)))
    assert abs(logpmf[200] - 200 * np.log(1e-3)) < 1e-9 * 1400
    assert abs(logpmf[0] - 200 * np.log1p(-1e-3)) < TOL
    assert np.all(np.isfinite(logpmf))


# ------------------------------------------------------------------------------ the rule
@pytest.mark.parametrize("guarantee", decide.GUARANTEES)
@pytest.mark.parametrize("all_prefixes", [False, True])
def test_top_k_matches_a_brute_force_loop(guarantee, all_prefixes):
    group, draws = _random_problem(seed=2)
    settings = dict(target=0.55, credibility=0.6, guarantee=guarantee, min_k=2, max_k=6,
                    all_prefixes=all_prefixes)  # fmt: skip
    d = decide.top_k(group, draws=draws, **settings)
    ks, achieved, curves = _brute_force(group, draws, draws.mean(0), **settings)
    np.testing.assert_array_equal(np.asarray(d.k), ks)
    np.testing.assert_allclose(np.asarray(d.credibility), achieved, rtol=0, atol=TOL)
    for g, curve in enumerate(curves):
        row = np.asarray(d.credibility_at_k)[g]
        np.testing.assert_allclose(row[: len(curve)], curve, rtol=0, atol=TOL)
        assert np.all(np.isnan(row[len(curve) :]))
    np.testing.assert_array_equal(np.asarray(d.groups), np.unique(group))
    code = np.searchsorted(np.unique(group), group)
    np.testing.assert_array_equal(np.asarray(d.shown), np.asarray(d.rank) < ks[code])
    np.testing.assert_array_equal(np.asarray(d.abstain), ks == 0)


def test_groups_in_chunks_and_without_padding_agree(monkeypatch):
    """Few groups per lax.map step (a remainder chunk) and exact shapes: the same result."""
    group, draws = _random_problem(seed=3, n_groups=7, max_size=5, n_draws=3)
    settings = dict(target=0.5, credibility=0.7, guarantee="realised")
    monkeypatch.setattr(decide, "_CHUNK_ELEMENTS", 40)  # 2 groups per step
    with _shapes.exact_shapes():
        d = decide.top_k(group, draws=draws, **settings)
    ks, achieved, _ = _brute_force(group, draws, draws.mean(0), **settings)
    np.testing.assert_array_equal(np.asarray(d.k), ks)
    np.testing.assert_allclose(np.asarray(d.credibility), achieved, rtol=0, atol=TOL)


def test_scores_rank_and_point_probabilities_are_one_draw():
    group, draws = _random_problem(seed=4)
    scores = np.random.default_rng(5).normal(size=group.size)
    settings = dict(target=0.5, credibility=0.8, guarantee="realised")
    d = decide.top_k(group, probs=draws[0], scores=scores, **settings)
    ks, achieved, _ = _brute_force(group, draws[:1], scores, **settings)
    np.testing.assert_array_equal(np.asarray(d.k), ks)
    np.testing.assert_allclose(np.asarray(d.credibility), achieved, rtol=0, atol=TOL)
    # identical draws are one draw
    same = decide.top_k(group, draws=np.repeat(draws[:1], 3, 0), scores=scores, **settings)
    np.testing.assert_array_equal(np.asarray(same.k), ks)


def test_venn_abers_interval_uses_its_lower_end_and_ranks_by_the_merged_probability():
    rng = np.random.default_rng(6)
    s = rng.normal(size=300)
    y = rng.uniform(size=300) < 1 / (1 + np.exp(-2 * s))
    s_test = rng.normal(size=40)
    group = np.arange(40) % 4
    p0, p1 = (np.asarray(v, np.float64) for v in jaxcal.VennAbers().fit(s, y).interval(s_test))
    assert np.all(p0 <= p1)
    merged = p1 / (1 - p0 + p1)
    for guarantee in decide.GUARANTEES:
        settings = dict(target=0.6, credibility=0.7, guarantee=guarantee)
        d = decide.top_k(group, interval=(p0, p1), **settings)
        ks, achieved, _ = _brute_force(group, p0[None, :], merged, **settings)
        np.testing.assert_array_equal(np.asarray(d.k), ks)
        np.testing.assert_allclose(np.asarray(d.credibility), achieved, rtol=0, atol=TOL)


def test_abstains_where_no_cut_off_qualifies():
    group = np.array([0, 0, 0, 1, 1, 2])
    p = np.array([0.3, 0.2, 0.1, 0.9, 0.8, 0.4])
    d = decide.top_k(group, probs=p, target=0.5, credibility=0.9)
    # group 0: at most 0.3 per item; group 1: P(1 hit of 1) = 0.9 >= 0.9; group 2: 0.4
    np.testing.assert_array_equal(np.asarray(d.abstain), [True, False, True])
    assert int(d.k[1]) == 2  # P(>= 1 hit of 2) = 0.98
    assert not np.asarray(d.shown)[[0, 1, 2, 5]].any()
    # an abstaining group reports its best credibility: at k = 2 one hit is needed,
    # P = 1 - 0.7 * 0.8 (k = 1: 0.3; k = 3 needs two hits)
    assert abs(float(d.credibility[0]) - (1 - 0.7 * 0.8)) < TOL
    # min_k above every group's size: all abstain with credibility 0
    d = decide.top_k(group, probs=p, target=0.5, credibility=0.9, min_k=4)
    assert np.asarray(d.abstain).all() and not np.asarray(d.credibility).any()


@pytest.mark.parametrize("guarantee", decide.GUARANTEES)
def test_a_higher_target_or_credibility_never_shows_more(guarantee):
    group, draws = _random_problem(seed=7, n_groups=8, max_size=8, n_draws=6)
    for all_prefixes in (False, True):
        ks = [np.asarray(decide.top_k(group, draws=draws, target=t, credibility=0.7,
                                      guarantee=guarantee, all_prefixes=all_prefixes).k)
              for t in (0.2, 0.4, 0.5, 0.6, 0.8, 1.0)]  # fmt: skip
        assert all(np.all(a >= b) for a, b in itertools.pairwise(ks))
        assert ks[0].sum() > ks[-1].sum()  # the grid is not trivially flat
        ks = [np.asarray(decide.top_k(group, draws=draws, target=0.5, credibility=c,
                                      guarantee=guarantee, all_prefixes=all_prefixes).k)
              for c in (0.1, 0.3, 0.5, 0.7, 0.9, 0.99)]  # fmt: skip
        assert all(np.all(a >= b) for a, b in itertools.pairwise(ks))


def test_true_probabilities_keep_the_promise_on_a_simulator():
    """Known truth: 400 users with 12 items each, true probabilities p ~ Beta(2, 3) and
    labels y ~ Bernoulli(p). Given the true probabilities, the share of shown users whose
    realised precision reaches the target is at least the credibility ("realised"), and the
    mean realised precision at least the target ("expected"), each up to 3 binomial
    standard errors (a 0.13% false alarm rate)."""
    rng = np.random.default_rng(10)
    users = np.repeat(np.arange(400), 12)
    p = rng.beta(2, 3, size=users.size)
    y = (rng.uniform(size=users.size) < p).astype(np.float64)
    target, credibility = 0.6, 0.8
    d = decide.top_k(users, probs=p, target=target, credibility=credibility)
    k, shown = np.asarray(d.k), np.asarray(d.shown)
    hits = np.bincount(users[shown], weights=y[shown], minlength=400)
    met = hits[k > 0] >= target * k[k > 0] - 1e-9
    n_shown = met.size
    assert 50 < n_shown < 400  # some users shown, some abstain
    assert met.mean() >= credibility - 3 * np.sqrt(credibility * (1 - credibility) / n_shown)

    d = decide.top_k(users, probs=p, target=target, credibility=credibility,
                     guarantee="expected")  # fmt: skip
    k, shown = np.asarray(d.k), np.asarray(d.shown)
    hits = np.bincount(users[shown], weights=y[shown], minlength=400)
    precision = hits[k > 0] / k[k > 0]
    se = precision.std() / np.sqrt(precision.size)
    assert precision.mean() >= target - 3 * se
    # the expected-precision rule shows more than the realised one at this credibility
    assert k.sum() > np.asarray(decide.top_k(users, probs=p, target=target,
                                             credibility=credibility).k).sum()  # fmt: skip


def test_new_sizes_and_settings_in_a_bucket_compile_nothing(compiles):
    group, draws = _random_problem(seed=8, n_groups=5, max_size=7, n_draws=3)
    decide.top_k(group, draws=draws, target=0.5, credibility=0.8)
    group, draws = _random_problem(seed=9, n_groups=7, max_size=6, n_draws=4)
    with compiles() as c:
        d = decide.top_k(group, draws=draws, target=0.7, credibility=0.6, min_k=2, max_k=5,
                         all_prefixes=True)  # fmt: skip
    assert c.count == 0
    ks, _, _ = _brute_force(group, draws, draws.mean(0), target=0.7, credibility=0.6,
                            guarantee="realised", min_k=2, max_k=5, all_prefixes=True)  # fmt: skip
    np.testing.assert_array_equal(np.asarray(d.k), ks)


# ------------------------------------------------------------------------------ bad input
_P = np.array([0.2, 0.7, 0.5])
_G = np.array([0, 0, 1])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(), "exactly one of probs=, draws= and interval="),
        (dict(probs=_P, draws=_P[None]), "exactly one of"),
        (dict(probs=[0.2, 1.5, 0.1]), "probs must lie in"),
        (dict(probs=[0.2, np.nan, 0.1]), "non-finite"),
        (dict(draws=_P), r"draws must be a non-empty \[n_draws, n_items\]"),
        (dict(draws=np.array([_P, _P + 0.5])), "draws must lie in"),
        (dict(draws=np.array([_P, [0.1, np.inf, 0.2]])), "draws contain non-finite"),
        (dict(interval=(_P - 0.3, _P)), "p0 must lie in"),
        (dict(interval=(_P, _P[:2])), "shape mismatch"),
        (dict(interval=(_P + 0.1, _P)), "interval needs p0 <= p1"),
        (dict(interval=_P), "interval must be a pair"),
        (dict(probs=_P[:2]), "length mismatch: 2 items but 3 group ids"),
        (dict(probs=_P, scores=[1.0, 2.0]), "length mismatch"),
        (dict(probs=_P, target=0.0), r"target must be in \(0, 1\]"),
        (dict(probs=_P, target=1.2), r"target must be in \(0, 1\]"),
        (dict(probs=_P, credibility=1.0), r"credibility must be in \(0, 1\)"),
        (dict(probs=_P, credibility=0.0), r"credibility must be in \(0, 1\)"),
        (dict(probs=_P, credibility="high"), "credibility must be a number"),
        (dict(probs=_P, guarantee="worst"), "guarantee must be one of"),
        (dict(probs=_P, min_k=0), "min_k must be an integer >= 1"),
        (dict(probs=_P, max_k=2.5), "max_k must be an integer >= 1"),
        (dict(probs=_P, min_k=3, max_k=2), r"max_k \(2\) must be >= min_k \(3\)"),
    ],
)
def test_bad_input_is_a_value_error_naming_the_problem(kwargs, message):
    settings = {"target": 0.5, **kwargs}
    with pytest.raises(ValueError, match=message):
        decide.top_k(_G, **settings)


def test_bad_group_ids_and_logpmf_input():
    with pytest.raises(ValueError, match="group must hold integer ids"):
        decide.top_k(np.array([0.5, 1.5, 2.0]), probs=_P, target=0.5)
    with pytest.raises(ValueError, match="probs must lie in"):
        decide.poisson_binomial_logpmf([0.5, -0.1])
    with pytest.raises(ValueError, match="non-empty"):
        decide.poisson_binomial_logpmf(np.zeros((2, 2, 2)))
