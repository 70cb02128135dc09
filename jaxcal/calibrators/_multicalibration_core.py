r"""The pure core of :class:`jaxcal.MulticalibrationBoosting`: boosted logit corrections by
oblivious trees over the feature codes and the binned score, cross-validated early stopping
with the folds in the same program, and the final rescaling.

Everything here is JAX on fixed shapes (no host work), so the eager estimator and the pure
fit (inside a caller's ``jit`` or ``vmap``) run the same program:

1. The score column: the logits :math:`F_0 = \operatorname{logit}(s)` binned at the
   ``n_bins``-quantiles of the training rows (those of positive weight) — an extra
   numeric column of codes, so that trees split on the score as on any feature.
2. Folds: the rows of positive weight sorted by (label, logit) and dealt to the folds in
   turn, so each fold has the same share of labels and of scores; no randomness, and rows
   of zero weight (padding) go last, so they change no fold.
3. Boosting: ``n_folds + 1`` models side by side (``grow_trees``), model ``k < n_folds`` trained
   without fold ``k`` and the last on all rows; round ``r`` fits a tree to the gradients
   :math:`g = w(\sigma(F) - t)` and Hessians :math:`h = w \sigma(F)(1 - \sigma(F))` of the
   weighted loss (``jaxcal.losses``) and adds ``learning_rate`` times it to :math:`F`. The
   held-out loss of the folds after each round is recorded; the loop (a
   ``lax.while_loop``) stops ``patience`` rounds after the last improvement or at
   ``n_rounds``. The all-rows model truncated at the best number of rounds is exactly the
   refit on all rows with that number (a tree depends only on the rounds before it).
4. Rescaling: :math:`(a, b)` of :math:`\sigma(a F + b)` by damped Newton on the training
   loss, from :math:`(1, 0)`, so it never raises the loss.
5. The guarantee: if the training loss of the result exceeds that of the input logits,
   the correction is the identity (no trees, :math:`a = 1, b = 0`).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxcal.fitting.trees import Tree, TreeOptions, grow_trees, predict_trees

__all__ = [
    "Boosted",
    "score_edges",
    "score_codes",
    "fold_ids",
    "boost",
    "predict_logit",
    "rescale",
]


class Boosted(NamedTuple):
    """The fitted correction (a pytree of arrays).

    Attributes:
        trees: ``T`` stacked :class:`~jaxcal.fitting.trees.Tree`, leaf values already
            multiplied by the learning rate; trees from ``n_rounds`` on have zero values.
        edges: ``[n_bins - 1]`` logit edges of the score column.
        a, b: the final rescaling :math:`\\sigma(a F + b)`.
        n_rounds: the number of trees used (int32).
        cv_loss: ``[T + 1]`` mean held-out loss after each round (NaN where not run, and
            everywhere without early stopping).
    """

    trees: Tree
    edges: jax.Array
    a: jax.Array
    b: jax.Array
    n_rounds: jax.Array
    cv_loss: jax.Array


def score_edges(logits: jax.Array, weights: jax.Array, n_bins: int) -> jax.Array:
    """``[n_bins - 1]`` edges at the ``k / n_bins`` quantiles (lower order statistics) of
    the logits of the rows of positive weight."""
    keep = weights > 0
    m = jnp.sum(keep)
    ordered = jnp.sort(jnp.where(keep, logits, jnp.inf))
    k = jnp.arange(1, n_bins)
    pos = jnp.clip((k * m) // n_bins, 0, jnp.maximum(m - 1, 0))
    return ordered[pos]


def score_codes(logits: jax.Array, edges: jax.Array) -> jax.Array:
    """The bin of each logit: the number of edges at or below it (int32)."""
    return jnp.searchsorted(edges, logits, side="right").astype(jnp.int32)


def fold_ids(targets: jax.Array, logits: jax.Array, weights: jax.Array, n_folds: int):
    """Deterministic, stratified folds: rows sorted by (zero weight last, positive target,
    logit), the ``i``-th in that order in fold ``i mod n_folds`` (the target is positive
    exactly where the label is 1, under every loss weighting of ``jaxcal.losses``)."""
    order = jnp.lexsort((logits, targets > 0, weights <= 0))
    n = logits.shape[0]
    return jnp.zeros(n, jnp.int32).at[order].set(jnp.arange(n, dtype=jnp.int32) % n_folds)


def _rounded(x):
    """``x``, computed apart from its consumers (a sum into zeros, a scatter, which XLA
    never fuses into them): a product stays rounded before it is added, not contracted
    into a fused multiply-add (XLA's CPU code contracts where it can), so the boosting
    sums do not depend on how the compiler fuses them."""
    flat = x.reshape(-1)
    index = jax.lax.iota(jnp.int32, flat.shape[0])
    return jax.ops.segment_sum(flat, index, num_segments=flat.shape[0]).reshape(x.shape)


def _loss(z, t, w):
    return w * (jax.nn.softplus(z) - t * z)


def rescale(F: jax.Array, t: jax.Array, w: jax.Array, *, max_iter: int = 50):
    """``(a, b)`` minimising ``sum w [softplus(aF + b) - t(aF + b)]`` by damped Newton from
    ``(1, 0)``: a step is halved (at most 30 times) while it raises the loss by more than
    its rounding, and the loop stops after a step below ``1e-8`` (relative: Newton then
    converges to rounding) or at ``max_iter`` steps. The loss never rises by more than
    rounding, so it stays at most the loss at ``(1, 0)`` up to rounding."""
    dtype = F.dtype
    eps = jnp.finfo(dtype).eps

    def objective(theta):
        return jnp.sum(_loss(theta[0] * F + theta[1], t, w))

    def step(state):
        theta, f, it, _ = state
        z = theta[0] * F + theta[1]
        p = jax.nn.sigmoid(z)
        r, q = w * (p - t), w * p * (1 - p)
        g0, g1 = jnp.sum(r * F), jnp.sum(r)
        h00, h01, h11 = jnp.sum(q * F * F), jnp.sum(q * F), jnp.sum(q)
        ridge = 1e-12 * (h00 + h11) + jnp.finfo(dtype).tiny
        det = (h00 + ridge) * (h11 + ridge) - h01 * h01
        delta = jnp.stack([(h11 + ridge) * g0 - h01 * g1, (h00 + ridge) * g1 - h01 * g0])
        delta = jnp.where(det > 0, delta / jnp.where(det > 0, det, 1), 0)
        slack = 16 * eps * (jnp.abs(f) + 1)  # the rounding of the loss

        def halve(s):
            return s[0] * 0.5, objective(theta - 0.5 * s[0] * delta), s[2] + 1

        def rises(s):
            return (s[1] > f + slack) & (s[2] < 30)

        start = (jnp.ones((), dtype), objective(theta - delta), 0)
        size, f_new, _ = jax.lax.while_loop(rises, halve, start)
        move = jnp.where(f_new <= f + slack, size * delta, 0)
        done = jnp.max(jnp.abs(move)) <= 1e-8 * (1 + jnp.max(jnp.abs(theta)))
        return theta - move, jnp.minimum(f, f_new), it + 1, done

    theta0 = jnp.array([1.0, 0.0], dtype)
    state = (theta0, objective(theta0), 0, False)
    theta, *_ = jax.lax.while_loop(lambda s: (s[2] < max_iter) & ~s[3], step, state)
    return theta[0], theta[1]


def _columns(codes, logits, edges):
    return jnp.concatenate([codes, score_codes(logits, edges)[:, None]], axis=1)


def boost(
    codes: jax.Array,
    logits: jax.Array,
    targets: jax.Array,
    weights: jax.Array,
    categorical: jax.Array,
    learning_rate,
    options: TreeOptions,
    patience,
    *,
    n_bins: int,
    width: int,
    depth: int,
    n_rounds: int,
    n_folds: int,
) -> Boosted:
    """Fit the boosted correction (module docstring) on one problem.

    Args:
        codes: ``[n, d]`` int32 feature codes, each ``< width`` (``d`` may be 0).
        logits: ``[n]`` the input logits :math:`F_0`.
        targets, weights: ``[n]`` the loss weighting's :math:`(t, w)`.
        categorical: ``[d]`` bool, which feature columns are categorical.
        learning_rate: the shrinkage of every tree.
        options: the trees' :class:`~jaxcal.fitting.trees.TreeOptions`.
        patience: rounds without a better held-out loss before the loop stops.
        n_bins: quantile bins of the score (static).
        width: bins of the histograms, at least ``n_bins`` and every column's codes.
        depth, n_rounds: the trees' depth and the largest number of rounds (static).
        n_folds: folds of the early stopping; 0 fits ``n_rounds`` rounds on all rows.

    Returns:
        The :class:`Boosted` correction.
    """
    dtype = logits.dtype
    edges = score_edges(logits, weights, n_bins)
    x = _columns(codes, logits, edges)
    cat = jnp.concatenate([jnp.asarray(categorical, bool), jnp.zeros(1, bool)])
    n = logits.shape[0]
    n_models = n_folds + 1 if n_folds else 1
    if n_folds:
        fold = fold_ids(targets, logits, weights, n_folds)
        train = fold[None, :] != jnp.arange(n_models)[:, None]  # the last model: all rows
        W = jnp.where(train, weights[None, :], 0)
    else:
        fold = jnp.zeros(n, jnp.int32)
        W = weights[None, :]
    count = (W > 0).astype(dtype)
    total_w = jnp.sum(weights)
    lr = jnp.asarray(learning_rate, dtype)
    columns = x.T  # once: every tree reads the codes by column

    def grow(g, h, c):
        return grow_trees(
            columns, g, h, c, depth=depth, n_bins=width, categorical=cat, options=options
        )

    def held_out(F):
        if not n_folds:
            return jnp.asarray(jnp.nan, dtype)
        mine = jnp.take_along_axis(F[:n_folds], fold[None, :], axis=0)[0]
        return jnp.sum(_loss(mine, targets, weights)) / total_w

    def body(state):
        r, F, trees, cv, best_r, best, F_best = state
        p = jax.nn.sigmoid(F)
        tree, leaf = grow(W * (p - targets), W * p * (1 - p), count)
        step = _rounded(lr * tree.values)
        F = F + jnp.take_along_axis(step, leaf, axis=1)
        last = Tree(tree.features[-1], tree.left[-1], step[-1])
        trees = jax.tree.map(lambda s, v: s.at[r].set(v), trees, last)
        loss = held_out(F)
        cv = cv.at[r + 1].set(loss)
        improved = (loss < best) if n_folds else True
        best_r = jnp.where(improved, r + 1, best_r)
        best = jnp.where(improved, loss, best)
        F_best = jnp.where(improved, F[-1], F_best)
        return r + 1, F, trees, cv, best_r, best, F_best

    def running(state):
        r, best_r = state[0], state[4]
        return (r < n_rounds) & ((r - best_r < patience) if n_folds else True)

    empty = Tree(
        jnp.zeros((n_rounds, depth), jnp.int32),
        jnp.ones((n_rounds, depth, width), bool),
        jnp.zeros((n_rounds, 1 << depth), dtype),
    )
    F0 = jnp.broadcast_to(logits, (n_models, n))
    loss0 = held_out(F0)
    cv0 = jnp.full(n_rounds + 1, jnp.nan, dtype).at[0].set(loss0)
    state = (0, F0, empty, cv0, 0, loss0, logits)
    _, _, trees, cv, best_r, _, F_best = jax.lax.while_loop(running, body, state)
    used = jnp.arange(n_rounds) < best_r
    trees = trees._replace(values=jnp.where(used[:, None], trees.values, 0))
    a, b = rescale(F_best, targets, weights)
    # the guarantee: never a higher training loss than the input logits'
    worse = jnp.sum(_loss(a * F_best + b, targets, weights)) > jnp.sum(
        _loss(logits, targets, weights)
    )
    trees = trees._replace(values=jnp.where(worse, 0, trees.values))
    return Boosted(
        trees=trees,
        edges=edges,
        a=jnp.where(worse, 1, a).astype(dtype),
        b=jnp.where(worse, 0, b).astype(dtype),
        n_rounds=jnp.where(worse, 0, best_r).astype(jnp.int32),
        cv_loss=cv,
    )


def predict_logit(model: Boosted, codes: jax.Array, logits: jax.Array) -> jax.Array:
    """The corrected logits :math:`a (F_0 + \\sum_t f_t(x, s)) + b` at ``[n]`` input logits
    and ``[n, d]`` feature codes."""
    x = _columns(codes, logits, model.edges)
    return model.a * (logits + predict_trees(model.trees, x)) + model.b
