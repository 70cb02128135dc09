"""The deterministic folds of ``jaxcal.fitting.folds``, against their defining properties
checked by brute force: stratified (each fold's count of each label within one row of a
K-th, so its positive share within one row of the whole set's), balanced in score with
``scores`` (below every threshold, each fold holds within one row of a K-th of each label's
rows), scrambled without (the folds independent of the row order's structure), zero
weights dealt last, each group dealt on its own; the same ids on the host and traced, and
on every call."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxcal.fitting.folds import stratified_folds


def _problem(rng, n):
    rate = rng.uniform(0.05, 0.95)
    y = (rng.uniform(size=n) < rate).astype(float)
    s = rng.normal(size=n)
    if rng.uniform() < 0.5:
        s = np.round(s, 1)  # ties
    return y, s


def _assert_stratified(fold, y, k):
    assert fold.dtype == np.int32 and fold.min() >= 0 and fold.max() < k
    sizes = np.bincount(fold, minlength=k)
    assert sizes.max() - sizes.min() <= 1
    for f in range(k):
        m = fold == f
        # the fold's positive share is the whole set's, to within one row
        assert abs(y[m].sum() - m.sum() * y.mean()) < 1
    for label in (0.0, 1.0):
        counts = np.bincount(fold[y == label], minlength=k)
        assert counts.max() - counts.min() <= 1


@pytest.mark.parametrize("k", [2, 3, 5, 7])
def test_folds_are_stratified_and_balanced_in_score(k):
    rng = np.random.default_rng(k)
    for n in (k, 13, 100, 257):
        y, s = _problem(rng, n)
        _assert_stratified(stratified_folds(y, k), y, k)  # scrambled
        fold = stratified_folds(y, k, scores=s)
        _assert_stratified(fold, y, k)
        for label in (0.0, 1.0):
            of_label = y == label
            # balanced in score: every threshold (each distinct score, and below all)
            for c in np.r_[-np.inf, np.unique(s[of_label])]:
                below = of_label & (s <= c)
                per_fold = np.bincount(fold[below], minlength=k)
                assert np.all(np.abs(per_fold - below.sum() / k) < 1), (label, c, per_fold)


def test_balance_in_score_has_power():
    """A split by score (the first half of the sorted rows in fold 0) is stratified yet
    fails the score check above: the check can fail."""
    rng = np.random.default_rng(0)
    y, s = _problem(rng, 200)
    fold = np.zeros(200, np.int32)
    for label in (0.0, 1.0):
        idx = np.flatnonzero(y == label)
        idx = idx[np.argsort(s[idx])]
        fold[idx[idx.size // 2 :]] = 1
    c = np.median(s[y == 0])
    below = (y == 0) & (s <= c)
    per_fold = np.bincount(fold[below], minlength=2)
    assert np.any(np.abs(per_fold - below.sum() / 2) >= 1)
    assert not np.array_equal(fold, stratified_folds(y, 2, scores=s))


def test_scrambled_folds_do_not_follow_the_row_order():
    """Without scores, rows sorted by score (a common layout) are not dealt in score order:
    the folds of consecutive same-label rows look random (a run test: about half of the
    neighbours share a fold with K = 2, where dealing in order gives none), and the scores
    of a fold are not interleaved (the balance in score fails somewhere)."""
    rng = np.random.default_rng(4)
    n = 2000
    s = np.sort(rng.normal(size=n))
    y = (rng.uniform(size=n) < 1 / (1 + np.exp(-s))).astype(float)
    fold = stratified_folds(y, 2)
    _assert_stratified(fold, y, 2)
    for label in (0.0, 1.0):
        f = fold[y == label]
        same = np.mean(f[1:] == f[:-1])
        assert 0.45 < same < 0.55, same  # 1000 pairs: 5 standard errors is 0.08
    interleaved = stratified_folds(y, 2, scores=s)
    assert np.all(interleaved[y == 0][1:] != interleaved[y == 0][:-1])


def test_interleaved_in_score_order_within_each_label():
    """The rule itself: within a label, sorted by score (ties by position), consecutive rows
    are in consecutive folds (the first label's rows from fold 0)."""
    rng = np.random.default_rng(1)
    y, s = _problem(rng, 60)
    s = np.round(s, 1)
    k = 4
    fold = stratified_folds(y, k, scores=s)
    negatives = np.flatnonzero(y == 0)
    negatives = negatives[np.lexsort((negatives, s[negatives]))]
    np.testing.assert_array_equal(fold[negatives], np.arange(negatives.size) % k)
    positives = np.flatnonzero(y == 1)
    positives = positives[np.lexsort((positives, s[positives]))]
    first = negatives.size % k  # dealing continues where the negatives stopped
    np.testing.assert_array_equal(fold[positives], (first + np.arange(positives.size)) % k)


def test_zero_weights_are_dealt_last_and_groups_on_their_own():
    rng = np.random.default_rng(2)
    y, s = _problem(rng, 150)
    w = rng.uniform(0.5, 2.0, 150)
    w[rng.uniform(size=150) < 0.3] = 0.0
    g = rng.integers(0, 3, 150) * 7 - 5  # ids -5, 2, 9
    k = 3
    fold = stratified_folds(y, k, scores=s, weights=w, group=g)
    for gid in np.unique(g):
        m = g == gid
        # a problem's folds are those it gets alone
        alone = stratified_folds(y[m], k, scores=s[m], weights=w[m])
        np.testing.assert_array_equal(fold[m], alone)
        # its rows of positive weight are dealt as if the zero-weight rows were absent
        pos = m & (w > 0)
        np.testing.assert_array_equal(fold[pos], stratified_folds(y[pos], k, scores=s[pos]))


def test_traced_folds_equal_the_host_ones_and_are_deterministic():
    rng = np.random.default_rng(3)
    y, s = _problem(rng, 97)
    s[:4] = [0.0, -0.0, 0.0, -0.0]  # signed zeros tie in both sorts
    w = np.where(rng.uniform(size=97) < 0.2, 0.0, 1.0)
    g = rng.integers(0, 2, 97)
    host = stratified_folds(y, 5, scores=s, weights=w, group=g)
    traced = jax.jit(lambda y, s, w, g: stratified_folds(y, 5, scores=s, weights=w, group=g))
    np.testing.assert_array_equal(np.asarray(traced(y, s, w, g)), host)
    np.testing.assert_array_equal(stratified_folds(y, 5, scores=s, weights=w, group=g), host)
    host = stratified_folds(y, 5, weights=w, group=g)  # scrambled
    traced = jax.jit(lambda y, w, g: stratified_folds(y, 5, weights=w, group=g))
    np.testing.assert_array_equal(np.asarray(traced(y, w, g)), host)
    np.testing.assert_array_equal(stratified_folds(y, 5, weights=w, group=g), host)
    batched = jax.vmap(lambda y, s: stratified_folds(y, 5, scores=s))(
        np.stack([y, y]), np.stack([s, -s])
    )
    np.testing.assert_array_equal(np.asarray(batched[1]), stratified_folds(y, 5, scores=-s))
    scrambled = jax.vmap(lambda y: stratified_folds(y, 5))(np.stack([y, y[::-1]]))
    np.testing.assert_array_equal(np.asarray(scrambled[1]), stratified_folds(y[::-1], 5))


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: stratified_folds(np.zeros(3), 0), "n_folds"),
        (lambda: stratified_folds(np.zeros(3), 2.0), "n_folds"),
        (lambda: stratified_folds(np.zeros(4), 2, scores=np.zeros(3)), "scores"),
        (lambda: stratified_folds(np.zeros(3), 2, weights=np.ones(2)), "weights"),
        (lambda: stratified_folds(np.zeros(3), 2, group=np.ones(4, int)), "group"),
        (lambda: stratified_folds(np.zeros((3, 1)), 2), "1-D"),
    ],
)
def test_bad_inputs_raise(call, match):
    with pytest.raises(ValueError, match=match):
        call()
