"""The oblivious tree learner (jaxcal.fitting.trees) against brute-force enumeration of
splits, hand-computed Newton leaf values, and loops of single trees."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxcal.fitting.trees import (
    TreeOptions,
    fit_tree,
    grow_tree,
    grow_trees,
    predict_tree,
    predict_trees,
    tree_leaves,
)

GAIN_RTOL = 1e-9  # float64 sums of the same numbers in another order


def _problem(seed, n=80, n_bins=5, d=3):
    rng = np.random.default_rng(seed)
    codes = rng.integers(0, n_bins, (n, d)).astype(np.int32)
    g = rng.normal(size=n) + 0.8 * (codes[:, 0] == 2) - 0.6 * (codes[:, 1] >= 3)
    h = rng.uniform(0.2, 1.0, n)
    return codes, g, h


def _score(G, H, l2):
    return G * G / (H + l2) if H + l2 > 0 else 0.0


def _gain(g, h, left, l2):
    """Newton gain of splitting rows by the boolean ``left`` (a plain sum over rows)."""
    G, H = g.sum(), h.sum()
    GL, HL = g[left].sum(), h[left].sum()
    return _score(GL, HL, l2) + _score(G - GL, H - HL, l2) - _score(G, H, l2)


def _candidate_lefts(codes_j, n_bins, categorical):
    """Every split of one column: thresholds of a numeric column, every subset of the
    categories of a categorical one (each partition once)."""
    if not categorical:
        for r in range(n_bins - 1):
            yield codes_j <= r
        return
    for size in range(1, n_bins):
        for subset in itertools.combinations(range(n_bins), size):
            if 0 in subset:  # a partition and its mirror image give the same gain
                yield np.isin(codes_j, subset)


def _grow(codes, g, h, *, depth, categorical, n_bins=5, **options):
    """``grow_tree`` on NumPy inputs: ``(tree, leaf of every row)``."""
    return grow_tree(
        jnp.asarray(codes),
        jnp.asarray(g),
        jnp.asarray(h),
        depth=depth,
        n_bins=n_bins,
        categorical=jnp.asarray(categorical),
        options=TreeOptions(**options),
    )


def _route(tree, codes):
    """Leaf of each row, walking the stored splits (the oracle of tree_leaves)."""
    leaf = np.zeros(codes.shape[0], int)
    for f, left in zip(np.asarray(tree.features), np.asarray(tree.left), strict=True):
        leaf = 2 * leaf + (~left[codes[:, f]]).astype(int)
    return leaf


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_root_split_is_the_best_of_all_splits(seed):
    """Depth 1, l2 = 0: the chosen split's gain is the largest over every threshold of the
    numeric columns and every subset of the categorical column's categories (the gradient
    ratio order finds the best partition, Fisher 1958)."""
    codes, g, h = _problem(seed)
    cat = np.array([True, False, True])
    tree, _ = _grow(codes, g, h, depth=1, categorical=cat, l2=0.0, min_samples=1.0)
    best = max(
        _gain(g, h, left, 0.0)
        for j in range(3)
        for left in _candidate_lefts(codes[:, j], 5, cat[j])
        if 0 < left.sum() < len(left)
    )
    chosen = _route(tree, codes) == 0
    np.testing.assert_allclose(_gain(g, h, chosen, 0.0), best, rtol=GAIN_RTOL)


def test_second_level_is_the_best_split_given_the_first():
    """Level 2 of an oblivious tree: the split (the same for both nodes) maximises the
    summed gain of the two nodes over its candidates, enumerated here independently: every
    threshold of a numeric column; for the categorical column, every threshold of the order
    of its categories by G / (H + l2) over all rows, and every category against the rest."""
    codes, g, h = _problem(3, n=120)
    cat = np.array([True, False, False])
    l2 = 0.5
    tree, _ = _grow(codes, g, h, depth=2, categorical=cat, l2=l2, min_samples=1.0)
    ratio = [g[codes[:, 0] == k].sum() / (h[codes[:, 0] == k].sum() + l2) for k in range(5)]
    order = np.argsort(ratio, kind="stable")
    candidates = [(0, np.isin(codes[:, 0], order[: r + 1])) for r in range(4)]
    candidates += [(0, codes[:, 0] == k) for k in range(5)]
    candidates += [(j, left) for j in (1, 2) for left in _candidate_lefts(codes[:, j], 5, False)]
    first = np.asarray(tree.left)[0][codes[:, int(tree.features[0])]]

    def level_gain(left):
        return sum(
            _gain(g[m], h[m], left[m], l2)
            for m in (first, ~first)
            if 0 < left[m].sum() < m.sum() and _gain(g[m], h[m], left[m], l2) > 0
        )

    best = max(level_gain(left) for _, left in candidates)
    second = np.asarray(tree.left)[1][codes[:, int(tree.features[1])]]
    np.testing.assert_allclose(level_gain(second), best, rtol=GAIN_RTOL)


def test_leaf_values_are_newton_steps():
    """Each leaf's value is -G/(H + l2) of the rows routed to it (computed by hand), or of
    its parent's rows where the parent's split gains nothing (with l2 > 0 a split's gain
    can be negative: that node is a leaf)."""
    codes, g, h = _problem(4, n=200)
    l2 = 0.3
    cat = np.array([True, False, False])
    tree, leaf = _grow(codes, g, h, depth=2, categorical=cat, l2=l2, min_samples=1.0)
    rows = _route(tree, codes)
    np.testing.assert_array_equal(np.asarray(leaf), rows)
    np.testing.assert_array_equal(np.asarray(tree_leaves(tree, jnp.asarray(codes))), rows)
    values = np.asarray(tree.values)
    n_own = 0
    for node in range(2):
        m = (rows >> 1) == node
        right = (rows[m] & 1) == 1
        if 0 < right.sum() < m.sum() and _gain(g[m], h[m], ~right, l2) > 0:
            for k in (2 * node, 2 * node + 1):
                mk = rows == k
                np.testing.assert_allclose(values[k], -g[mk].sum() / (h[mk].sum() + l2), rtol=1e-12)
                n_own += 1
        elif m.any():
            want = -g[m].sum() / (h[m].sum() + l2)
            np.testing.assert_allclose(values[2 * node : 2 * node + 2], want, rtol=1e-12)
    assert n_own >= 2  # the problem exercises the own-value case
    np.testing.assert_allclose(
        np.asarray(predict_tree(tree, jnp.asarray(codes))), values[rows], rtol=1e-15
    )


def test_small_children_stop_a_node():
    """No valid split leaves a child under min_samples rows or min_child_weight Hessian; a
    node that cannot split is one leaf: its descendants share its Newton value."""
    rng = np.random.default_rng(5)
    n = 300
    codes = np.stack([rng.integers(0, 4, n), np.where(rng.uniform(size=n) < 0.1, 1, 0)], 1)
    codes = codes.astype(np.int32)
    g = rng.normal(size=n) + 2.0 * codes[:, 1]
    h = np.ones(n)
    tree, _ = _grow(
        codes,
        g,
        h,
        depth=3,
        n_bins=4,
        categorical=np.array([True, True]),
        l2=1.0,
        min_child_weight=5.0,
        min_samples=25.0,
    )
    rows = _route(tree, codes)
    values = np.asarray(tree.values)
    # walk down from the root: a node either splits into children of >= 25 rows, or it
    # stopped, and all its rows hold its own Newton value
    done = np.zeros(n, bool)
    for level in range(4):
        shift = 3 - level
        for node in np.unique(rows[~done] >> shift):
            m = ((rows >> shift) == node) & ~done
            if level == 3 or np.ptp(values[rows[m]]) == 0:
                np.testing.assert_allclose(values[rows[m]], -g[m].sum() / (m.sum() + 1.0))
                done |= m
            else:
                child = (rows[m] >> (shift - 1)) & 1
                assert min((child == 0).sum(), (child == 1).sum()) >= 25
    assert np.unique(values).size >= 3  # some nodes split, some stopped


def test_vmap_of_trees_is_a_loop():
    """vmap over problems (and nested vmap) equals a loop of single trees: the batched
    histogram sums fold the problem axis into the segment ids."""
    codes, _, _ = _problem(6, n=150)
    rng = np.random.default_rng(6)
    G, H = rng.normal(size=(2, 3, 150)), rng.uniform(0.1, 1, (2, 3, 150))
    cat = jnp.array([True, False, True])

    def one(g, h):
        return grow_tree(
            jnp.asarray(codes),
            g,
            h,
            depth=3,
            n_bins=5,
            categorical=cat,
            options=TreeOptions(l2=1.0, min_samples=3.0),
        )

    batched = jax.jit(jax.vmap(jax.vmap(one)))(G, H)
    for i, j in itertools.product(range(2), range(3)):
        single = one(jnp.asarray(G[i, j]), jnp.asarray(H[i, j]))
        for b, s in zip(jax.tree.leaves(batched), jax.tree.leaves(single), strict=True):
            np.testing.assert_allclose(np.asarray(b)[i, j], np.asarray(s), rtol=1e-12)


def test_side_by_side_trees_equal_single_trees():
    """grow_trees (the models of a cross-validation in one set of sums, rows of zero weight
    in some models) gives each model's grow_tree to the last bit: every sum adds the same
    numbers in the same order."""
    codes, _, _ = _problem(8, n=400)
    rng = np.random.default_rng(8)
    g, h = rng.normal(size=(3, 400)), rng.uniform(0.1, 1, (3, 400))
    count = (rng.uniform(size=(3, 400)) < 0.8).astype(float)
    g, h = g * count, h * count
    cat = jnp.array([True, False, True])
    options = TreeOptions(l2=1.0, min_samples=3.0)
    trees, leaf = grow_trees(
        jnp.asarray(codes.T), g, h, count, depth=3, n_bins=5, categorical=cat, options=options
    )
    for m in range(3):
        one, one_leaf = grow_tree(
            jnp.asarray(codes),
            jnp.asarray(g[m]),
            jnp.asarray(h[m]),
            depth=3,
            n_bins=5,
            categorical=cat,
            count=jnp.asarray(count[m]),
            options=options,
        )
        np.testing.assert_array_equal(np.asarray(leaf)[m], np.asarray(one_leaf))
        for b, s in zip(trees, one, strict=True):
            np.testing.assert_array_equal(np.asarray(b)[m], np.asarray(s))


@pytest.mark.parametrize("n_bins", [40, 300])
def test_rows_follow_the_splits_with_many_bins(n_bins):
    """With many bins a row's side of a split is read from the bits of the split's table
    (40 bins: two 32-bit words) or gathered (300): both agree with walking the stored
    splits, for the training rows, tree_leaves and the sum of several trees."""
    rng = np.random.default_rng(n_bins)
    n = 2000
    codes = rng.integers(0, n_bins, (n, 2)).astype(np.int32)
    g = rng.normal(size=n) + np.sin(codes[:, 0] / 7.0) - 0.5 * (codes[:, 1] % 3 == 0)
    cat = np.array([True, False])
    tree, leaf = _grow(codes, g, np.ones(n), depth=3, n_bins=n_bins, categorical=cat, l2=1.0)
    rows = _route(tree, codes)
    assert np.unique(rows).size >= 4  # the tree splits the rows
    np.testing.assert_array_equal(np.asarray(leaf), rows)
    np.testing.assert_array_equal(np.asarray(tree_leaves(tree, jnp.asarray(codes))), rows)
    values = np.asarray(tree.values)
    stack = jax.tree.map(lambda a: jnp.stack([a, a]), tree)
    np.testing.assert_allclose(
        np.asarray(predict_trees(stack, jnp.asarray(codes))), 2 * values[rows], rtol=1e-15
    )


def test_no_gain_leaves_one_leaf():
    """Gradients that no split can separate (all zero) give a tree of zeros."""
    codes, _, h = _problem(7)
    tree = fit_tree(
        jnp.asarray(codes),
        jnp.zeros(80),
        jnp.asarray(h),
        depth=2,
        n_bins=5,
        categorical=jnp.zeros(3, bool),
    )
    np.testing.assert_array_equal(np.asarray(tree.values), 0.0)
    assert np.asarray(tree.left).all()  # no split: every row goes left
