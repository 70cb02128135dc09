r"""Oblivious regression trees on binned features, grown from gradient histograms in JAX.

The learner of :class:`jaxcal.MulticalibrationBoosting`: one Newton step of a boosted model
is a tree fitted to the gradients :math:`g_i` and Hessians :math:`h_i` of the loss at the
current logits. The data are integer *codes* ``[n, d]`` (bin or category of each row in each
column, ``jaxcal._features``); every shape is fixed by ``(n, d, n_bins, depth)``, so a whole
boosting run is one loop in one compiled program; :func:`grow_trees` grows the trees of
several models (the folds of a cross-validation) side by side, and ``vmap`` those of many
problems.

**Oblivious trees** (as CatBoost's): every node of a level splits on the same column and the
same set of bins, so a tree of depth :math:`D` is :math:`D` splits and :math:`2^D` leaf
values, and a row's leaf is the binary number of its :math:`D` decisions. The split search
of a level is one reduction over an array of fixed shape ``[d, nodes, bins]``, a tree is a
few small arrays that ``vmap`` and ``scan`` carry without padding, and prediction is
:math:`D` look-ups per row (the bins that go left, packed in 32-bit words: a shift and a
few selects per row, vector instructions rather than gathers). We also tried level-wise
trees (each node its own split, with the categories ordered per node as LightGBM does) in
the same boosting loop: on simulations with planted segment effects (1e5 rows) they gave a
higher held-out log loss (0.48772 against 0.48666 on one; mean absolute error to the true
probability 0.0175 against 0.0120) and ran 2-3x slower, so the learner is oblivious.

**Histograms.** At each level the sums of :math:`(g, h, c)` over rows (:math:`c`: the row
counts, 1 for rows of positive weight) by (column, node, bin) are one ``segment_sum`` per
column: :math:`O(n d)` work per level, whatever the number of bins. The sums of all models
of :func:`grow_trees`, and under ``vmap`` of all problems, are one ``segment_sum`` (the
model and problem folded into the segment ids), which runs several times faster on CPU
than XLA's batched scatter; a row is 4 numbers (a zero pad), one aligned vector. A scatter
adds each segment's rows in their order, so the sums, and every tree, are the same to the
last bit whatever the number of models grown together.

**Split gain** of a node with sums :math:`(G, H)` split into :math:`(G_L, H_L)` and
:math:`(G_R, H_R)`:

.. math:: \mathrm{gain} = \frac{G_L^2}{H_L + \lambda} + \frac{G_R^2}{H_R + \lambda}
          - \frac{G^2}{H + \lambda}

(twice the decrease of the second-order approximation of the loss). A node's split is
*valid* when both children hold Hessian at least ``min_child_weight`` and at least
``min_samples`` rows, and its gain is positive and exceeds ``min_split_gain``; the level
takes the split of largest total gain over its valid nodes. A node whose split is not valid
stops growing: its descendants share its value, so it is a leaf of the tree. Leaf values are
the Newton steps :math:`-G/(H + \lambda)`.

**Candidate splits.** Numeric columns (and the score) split at thresholds of their bin
order. A categorical column is ordered, once per tree, by the gradient ratio :math:`G_c /
(H_c + \lambda)` of its categories over the whole training set (LightGBM's method): for one
node and :math:`\lambda = 0`, the best two-way partition of the categories is a threshold of
that order (Fisher, 1958), so ``K - 1`` thresholds replace :math:`2^{K-1}` subsets. Deeper
levels split nodes whose own orders differ from the root's, so each category against the
rest is also a candidate: it isolates one category inside a segment (a country on one
device) where no threshold of the root's order does. Every split is stored as a boolean
table over bins ("goes left"), so numeric and categorical splits predict alike.

Example:
    >>> import numpy as np, jax.numpy as jnp
    >>> from jaxcal.fitting.trees import fit_tree, predict_tree
    >>> codes = jnp.asarray(np.random.default_rng(0).integers(0, 4, (1000, 2)), jnp.int32)
    >>> g = jnp.where(codes[:, 0] == 2, -1.0, 0.5)  # squared error: targets 1 and -0.5
    >>> tree = fit_tree(codes, g, jnp.ones(1000), depth=1, n_bins=4,
    ...                 categorical=jnp.array([True, True]))
    >>> np.asarray(predict_tree(tree, jnp.array([[2, 0], [1, 3]], jnp.int32))).round(2).tolist()
    [1.0, -0.5]
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.typing import ArrayLike

__all__ = [
    "Tree",
    "TreeOptions",
    "histograms",
    "bin_order",
    "level_split",
    "fit_tree",
    "grow_tree",
    "grow_trees",
    "tree_leaves",
    "predict_tree",
    "predict_trees",
]


class Tree(NamedTuple):
    """An oblivious tree of depth ``D`` over codes with ``B`` bins per column.

    Attributes:
        features: ``[D]`` int32, the column split at each level.
        left: ``[D, B]`` bool, the bins of that column whose rows go left (level ``l``
            decides bit ``D - 1 - l`` of the leaf index: 0 left, 1 right).
        values: ``[2^D]`` leaf values.
    """

    features: jax.Array
    left: jax.Array
    values: jax.Array


class TreeOptions(NamedTuple):
    """The regularisation of a tree (traced: new values compile nothing).

    Attributes:
        l2: :math:`\\lambda \\ge 0`, added to every Hessian sum in gains and leaf values.
        min_child_weight: the smallest Hessian sum of a child.
        min_samples: the smallest number of rows (of positive weight) in a child.
        min_split_gain: a node's split must gain more than this.
    """

    l2: ArrayLike = 1.0
    min_child_weight: ArrayLike = 0.0
    min_samples: ArrayLike = 1.0
    min_split_gain: ArrayLike = 0.0


#: tables of at most this many columns get one scatter per column in the program
_UNROLLED_COLUMNS = 16
#: splits over at most 32 times this many bins are looked up in packed bits
_PACKED_WORDS = 8


@functools.cache
def _segment_sum(num_segments: int):
    """``segment_sum`` into ``num_segments`` segments, whose ``vmap`` is one ``segment_sum``
    over all the problems (segment ids offset per problem), not XLA's batched scatter, which
    runs several times slower on CPU. Nested ``vmap``s fold every axis the same way. The sum
    is linear in ``stats``: its derivative is the plain ``segment_sum`` of the tangents (so
    ``jvp`` and ``grad`` see an ordinary, transposable scatter)."""

    @custom_vmap
    def fast(seg, stats):
        return jax.ops.segment_sum(stats, seg, num_segments=num_segments)

    @fast.def_vmap
    def batched(axis_size, in_batched, seg, stats):
        if not in_batched[0]:
            seg = jnp.broadcast_to(seg, (axis_size, *seg.shape))
        if not in_batched[1]:
            stats = jnp.broadcast_to(stats, (axis_size, *stats.shape))
        offset = jnp.arange(axis_size, dtype=seg.dtype) * num_segments
        seg = (seg + offset[:, None]).reshape(-1)
        flat = stats.reshape(seg.shape[0], *stats.shape[2:])
        out = _segment_sum(axis_size * num_segments)(seg, flat)
        return out.reshape(axis_size, num_segments, *out.shape[1:]), True

    @jax.custom_jvp
    def segment_sum(seg, stats):
        return fast(seg, stats)

    @segment_sum.defjvp
    def tangent(primals, tangents):
        seg, stats = primals
        return fast(seg, stats), jax.ops.segment_sum(tangents[1], seg, num_segments=num_segments)

    return segment_sum


def histograms(codes: jax.Array, node: jax.Array, stats: jax.Array, n_nodes: int, n_bins: int):
    """Sums of ``stats`` ``[n, S]`` by (column, node, bin): ``[d, n_nodes, n_bins, S]``.

    One ``segment_sum`` per column; rows of zero ``stats`` add nothing.
    """
    return _histograms(codes.T, node * n_bins, stats, n_nodes, n_bins)


def _histograms(columns, base, stats, n_segments: int, n_bins: int):
    """:func:`histograms` of the columns ``[d, n]`` with the rows (``[M, n]`` of them:
    ``M`` models, ``stats`` ``[M n, S]``) at segments ``base + code`` (``base``:
    ``node * n_bins`` plus the model's offset), ``n_segments`` nodes of all models.

    The sums of a few columns are separate ``segment_sum`` s, which XLA may run side by
    side; many columns are a ``lax.scan`` (one scatter in the program whatever ``d`` is).
    """
    d = columns.shape[0]
    sums = _segment_sum(n_segments * n_bins)
    if 0 < d <= _UNROLLED_COLUMNS:
        out = jnp.stack([sums((base + c).reshape(-1), stats) for c in columns])
    else:
        _, out = jax.lax.scan(
            lambda _, c: (None, sums((base + c).reshape(-1), stats)), None, columns
        )
    return out.reshape(d, n_segments, n_bins, stats.shape[-1])


def _ratio(g, h, l2):
    """``g / (h + l2)``, 0 where the denominator is 0 (an empty bin with ``l2 = 0``)."""
    den = h + l2
    return jnp.where(den > 0, g / jnp.where(den > 0, den, 1), 0)


def _score(g, h, l2):
    """``g^2 / (h + l2)``, 0 where the denominator is 0."""
    return g * _ratio(g, h, l2)


def bin_order(totals: jax.Array, categorical: jax.Array, l2) -> jax.Array:
    """The order in which each column's bins are split: ``[d, B]`` permutations.

    Args:
        totals: ``[d, B, S]`` sums of (g, h, ...) over the training rows by column and bin.
        categorical: ``[d]`` bool; a categorical column is ordered by the gradient ratio
            ``G / (H + l2)`` of its bins (ties by bin), a numeric one by its bins.
        l2: the ``l2`` of the tree.

    Returns:
        ``perm``: ``perm[j, r]`` is the bin at position ``r`` of column ``j``'s order.
    """
    d, n_bins = totals.shape[:2]
    natural = jnp.broadcast_to(jnp.arange(n_bins, dtype=totals.dtype), (d, n_bins))
    key = jnp.where(categorical[:, None], _ratio(totals[..., 0], totals[..., 1], l2), natural)
    return jnp.argsort(key, axis=1, stable=True).astype(jnp.int32)


def _gains(left, total, active, options):
    """Gains and validity of splits with left sums ``left`` ``[..., N, B, 3]`` of nodes with
    sums ``total`` ``[..., N, 1, 3]`` (module docstring); invalid splits gain 0."""
    right = total - left
    l2 = options.l2
    gain = (
        _score(left[..., 0], left[..., 1], l2)
        + _score(right[..., 0], right[..., 1], l2)
        - _score(total[..., 0], total[..., 1], l2)
    )
    valid = (
        active[:, None]
        & (left[..., 1] >= options.min_child_weight)
        & (right[..., 1] >= options.min_child_weight)
        & (left[..., 2] >= options.min_samples)
        & (right[..., 2] >= options.min_samples)
        & (gain > options.min_split_gain)
        & (gain > 0)
    )
    return jnp.where(valid, gain, 0), valid


def level_split(
    hist: jax.Array,
    perm: jax.Array,
    categorical: jax.Array,
    active: jax.Array,
    options: TreeOptions,
):
    """The split of one level of an oblivious tree: the largest total gain over the nodes
    among the thresholds of every column's order and, for categorical columns, every
    category against the rest.

    Args:
        hist: ``[d, N, B, 3]`` sums of (g, h, count) by column, node and bin.
        perm: ``[d, B]`` the order of each column's bins (:func:`bin_order`).
        categorical: ``[d]`` bool.
        active: ``[N]`` bool, the nodes still growing.
        options: the :class:`TreeOptions`.

    Returns:
        ``(feature, left, valid)``: the column (int32), the ``[B]`` bins that go left (all
        when no split gains) and the ``[N]`` nodes whose split is valid.
    """
    hist = hist[..., :3]  # (a fourth, padding channel is not read)
    d, _, n_bins, _ = hist.shape
    total = hist.sum(axis=2, keepdims=True)
    ordered = jnp.cumsum(jnp.take_along_axis(hist, perm[:, None, :, None], axis=2), axis=2)
    gain_t, valid_t = _gains(ordered, total, active, options)  # bins perm[:r+1] go left
    gain_c, valid_c = _gains(hist, total, active, options)  # bin r alone goes left
    gain_c = jnp.where(categorical[:, None, None], gain_c, 0)
    gains = jnp.stack([gain_t, gain_c]).sum(axis=2)  # [2, d, B]
    best = jnp.argmax(gains.reshape(-1))
    kind, j, r = best // (d * n_bins), (best // n_bins) % d, best % n_bins
    valid = jnp.where(kind == 0, valid_t[j, :, r], valid_c[j, :, r] & categorical[j])
    ok = gains[kind, j, r] > 0
    bins = jnp.arange(n_bins)
    rank = jnp.zeros(n_bins, jnp.int32).at[perm[j]].set(jnp.arange(n_bins, dtype=jnp.int32))
    goes_left = jnp.where(kind == 0, rank <= r, bins == r) | ~ok
    return j.astype(jnp.int32), goes_left, valid & ok


def _leaf_values(gh, valid_levels, depth: int, l2):
    """Newton values ``-G/(H + l2)`` of the ``2^D`` leaves from their sums ``gh``
    ``[2^D, 2]`` of ``(g, h)``, where a leaf below a node that stopped growing takes that
    node's sums (its whole subtree is one leaf)."""
    n_leaves = 1 << depth
    leaves = jnp.arange(n_leaves)
    sums, grows = [], []
    for level in range(depth + 1):  # node sums at every level, looked up per leaf
        ancestor = leaves >> (depth - level)
        sums.append(_segment_sum(n_leaves)(ancestor, gh)[ancestor])
        stops = jnp.zeros_like(leaves, bool)  # below the last level every node is a leaf
        grows.append(valid_levels[level][ancestor] if level < depth else stops)
    stop = jnp.argmin(jnp.stack(grows), axis=0)  # the first level whose node did not split
    node = jnp.stack(sums)[stop, leaves]  # [2^D, 2]
    return -_ratio(node[:, 0], node[:, 1], l2)


def _route_columns(columns, feature, left):
    """``[M, n]``: whether each row goes right (int32) in each of ``M`` trees, from the codes
    stored by column ``[d, n]``, each tree's column ``feature`` ``[M]`` and bins that go
    left ``left`` ``[M, B]``.

    A tree's ``left`` is packed into 32-bit words, and a row's bit is found by shifts and
    selects over the words (vector instructions on every backend), not by a gather."""
    n_models, n_bins = left.shape
    n_words = -(-n_bins // 32)
    if n_words > _PACKED_WORDS:  # many bins: a gather per row
        return jax.vmap(_route_gather, in_axes=(None, 0, 0))(columns, feature, left)
    bits = jnp.pad(left, ((0, 0), (0, 32 * n_words - n_bins))).reshape(n_models, n_words, 32)
    shift = jnp.arange(32, dtype=jnp.uint32)
    words = jnp.sum(bits.astype(jnp.uint32) << shift, axis=-1, dtype=jnp.uint32)  # [M, W]
    rows = []
    for m in range(n_models):
        bins = jax.lax.dynamic_index_in_dim(columns, feature[m], keepdims=False)
        word = words[m, 0]
        for w in range(1, n_words):
            word = jnp.where(bins >= 32 * w, words[m, w], word)
        goes_left = (word >> (bins & 31).astype(jnp.uint32)) & 1
        rows.append(1 - goes_left.astype(jnp.int32))
    return jnp.stack(rows)


def _route_gather(columns, feature, left):
    return (~left[jnp.take(columns, feature, axis=0)]).astype(jnp.int32)


def fit_tree(
    codes: jax.Array,
    grad: jax.Array,
    hess: jax.Array,
    *,
    depth: int,
    n_bins: int,
    categorical: jax.Array,
    count: jax.Array | None = None,
    options: TreeOptions | None = None,
) -> Tree:
    """Grow one tree of depth ``depth`` on gradients and Hessians.

    Args:
        codes: ``[n, d]`` int32 bins (``0 <= codes < n_bins``).
        grad, hess: ``[n]`` gradients and Hessians (0 for rows outside the training set).
        depth: the number of levels (static).
        n_bins: the number of bins per column (static).
        categorical: ``[d]`` bool, which columns are categorical (:func:`bin_order`).
        count: ``[n]`` row counts for ``min_samples`` (default: 1 where ``hess > 0``).
        options: the :class:`TreeOptions` (default ``TreeOptions()``).

    Returns:
        The :class:`Tree`. A node that no valid split improves sends every row left and
        stops growing.
    """
    tree, _ = grow_tree(
        codes,
        grad,
        hess,
        depth=depth,
        n_bins=n_bins,
        categorical=categorical,
        count=count,
        options=options,
    )
    return tree


def grow_tree(codes, grad, hess, *, depth, n_bins, categorical, count=None, options=None):
    """:func:`fit_tree`, also returning the ``[n]`` leaf of every training row (no second
    pass over the data to apply the tree to its own rows)."""
    count = (hess > 0) if count is None else count
    tree, leaf = grow_trees(
        codes.T,
        grad[None],
        hess[None],
        count[None],
        depth=depth,
        n_bins=n_bins,
        categorical=categorical,
        options=options,
    )
    return jax.tree.map(lambda a: a[0], tree), leaf[0]


def grow_trees(columns, grad, hess, count, *, depth, n_bins, categorical, options=None):
    """``M`` trees side by side on the same codes: :func:`grow_tree` of each row of
    ``grad``, ``hess`` and ``count`` ``[M, n]`` (the models of a cross-validation), on the
    codes stored by column, ``columns`` ``[d, n]`` (a boosting loop transposes them once).

    Returns:
        ``(trees, leaf)``: the :class:`Tree` s (leading axis ``M``) and the ``[M, n]``
        leaf of every row in every tree.

    The histogram sums of all models are one ``segment_sum`` per column and level (the
    model folded into the segment ids; each model's rows keep their order), over rows of
    ``(g, h, count)`` padded to 4 (one aligned vector). The root level is grown apart:
    every row is at node 0, and it fixes the order of the bins. The levels are unrolled
    (``depth`` is small), so that every sum reads the same array of statistics.

    Example:
        >>> import numpy as np, jax.numpy as jnp
        >>> codes = jnp.asarray(np.random.default_rng(0).integers(0, 4, (2, 1000)), jnp.int32)
        >>> g = jnp.stack([jnp.where(codes[0] == 2, -1.0, 0.5), jnp.where(codes[1] < 2, 1.0, -1.0)])
        >>> trees, leaf = grow_trees(codes, g, jnp.ones((2, 1000)), jnp.ones((2, 1000)),
        ...                          depth=1, n_bins=4, categorical=jnp.array([True, True]))
        >>> trees.features.tolist(), leaf.shape
        ([[0], [1]], (2, 1000))
    """
    options = TreeOptions() if options is None else options
    n_models, n = grad.shape
    n_nodes = 1 << max(depth - 1, 0)
    dtype = grad.dtype
    stats = jnp.stack([grad, hess, count.astype(dtype), jnp.zeros_like(grad)], axis=-1)
    stats = stats.reshape(n_models * n, 4)
    model = jnp.arange(n_models, dtype=jnp.int32)[:, None]
    splits = jax.vmap(level_split, in_axes=(0, 0, None, 0, None))
    route = _route_columns

    def sums(base, nodes):  # [M, d, nodes, B, 4]
        out = _histograms(columns, base * n_bins, stats, n_models * nodes, n_bins)
        return out.reshape(-1, n_models, nodes, n_bins, 4).swapaxes(0, 1)

    hist = sums(model, 1)
    # one order of the bins, from the sums over all rows at the root
    perm = jax.vmap(bin_order, in_axes=(0, None, None))(hist[:, :, 0], categorical, options.l2)
    root = jnp.broadcast_to(jnp.arange(n_nodes) == 0, (n_models, n_nodes))
    feature, goes_left, valid = splits(hist, perm, categorical, root[:, :1], options)
    node = route(columns, feature, goes_left)
    valid = jnp.zeros((n_models, n_nodes), bool).at[:, 0].set(valid[:, 0])
    active = jnp.repeat(root & valid, 2, axis=1)[:, :n_nodes]
    features, left, valids = [feature], [goes_left], [valid]
    for _ in range(1, depth):
        hist = sums(model * n_nodes + node, n_nodes)
        feature, goes_left, valid = splits(hist, perm, categorical, active, options)
        node = 2 * node + route(columns, feature, goes_left)
        active = jnp.repeat(active & valid, 2, axis=1)[:, :n_nodes]
        features.append(feature)
        left.append(goes_left)
        valids.append(valid)
    n_leaves = 1 << depth
    gh = _segment_sum(n_models * n_leaves)((model * n_leaves + node).reshape(-1), stats)
    gh = gh.reshape(n_models, n_leaves, 4)[..., :2]
    valids = jnp.stack(valids, axis=1)
    values = jax.vmap(_leaf_values, in_axes=(0, 0, None, None))(gh, valids, depth, options.l2)
    tree = Tree(jnp.stack(features, axis=1), jnp.stack(left, axis=1), values.astype(dtype))
    return tree, node


def tree_leaves(tree: Tree, codes: jax.Array) -> jax.Array:
    """The ``[n]`` leaf index of every row of ``codes`` ``[n, d]``."""
    return _leaves(tree, codes.T)


def _leaves(tree: Tree, columns: jax.Array) -> jax.Array:
    leaf = jnp.zeros(columns.shape[1], jnp.int32)
    for level in range(tree.features.shape[0]):
        split = slice(level, level + 1)
        leaf = 2 * leaf + _route_columns(columns, tree.features[split], tree.left[split])[0]
    return leaf


def predict_tree(tree: Tree, codes: jax.Array) -> jax.Array:
    """The tree's value at every row of ``codes`` ``[n, d]``."""
    return tree.values[tree_leaves(tree, codes)]


def predict_trees(trees: Tree, codes: jax.Array) -> jax.Array:
    """The sum of a stack of trees (leading axis ``T``) at every row of ``codes``."""
    columns = codes.T  # once for all trees

    def add(total, tree):
        tree = Tree(*tree)
        return total + tree.values[_leaves(tree, columns)], None

    start = jnp.zeros(codes.shape[0], trees.values.dtype)
    total, _ = jax.lax.scan(add, start, tuple(trees))
    return total
