r"""Metrics of explicit-rating predictions: squared and absolute error, and Kendall's
:math:`\tau_b` per user.

* ``rating_mse``: :math:`\frac{1}{W}\sum_i w_i (r_i - \hat r_i)^2`; ``rating_mae``:
  :math:`\frac{1}{W}\sum_i w_i |r_i - \hat r_i|` (:math:`W = \sum_i w_i`).
* ``kendall_tau_per_user``: for each user, Kendall's :math:`\tau_b` between the true
  ratings and the predictions over the items the user rated,

  .. math:: \tau_b = \frac{n_c - n_d}{\sqrt{(n_0 - n_1)(n_0 - n_2)}},

  with :math:`n_c, n_d` the concordant and discordant pairs, :math:`n_0 = n(n - 1)/2`,
  :math:`n_1, n_2` the pairs tied in the ratings and in the predictions (the definition of
  ``scipy.stats.kendalltau(variant="b")``). It is undefined (NaN) for a user with fewer
  than two rated items or with all ratings or all predictions tied; the mean is over the
  users where it is defined.

  Complexity: :math:`O(n \log n + nK)` time and :math:`O(nK)` memory for :math:`n`
  ratings taking :math:`K` distinct values (``K = L`` for rating levels 1..L), whatever the
  users' sizes: one sort by (user, prediction), then for each rating the number of the
  user's items with a lower prediction at each rating level, read off running counts per
  level (no per-user pair enumeration, so a user with thousands of rated items costs
  what thousands of users with a few items cost).

Everything is validated eagerly; the cores are jitted and padded to size buckets
(``jaxcal._shapes``), so a new test set of a similar size compiles nothing.

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) the metrics run in the
program, and invalid data (non-finite values, bad weights, user ids that are negative, not
integers or ``>= n_users``) gives NaN. ``rating_mse`` and ``rating_mae`` are differentiable
in the predictions; Kendall's tau is piecewise constant. ``kendall_tau_per_user`` of traced
user ids needs ``n_users`` (the length of its result), and there counts the pairs of each
user directly, in :math:`O(n^2)` time and :math:`O(n)` memory (blocks of rows): the sort and
running counts above need the number of distinct ratings, which a trace does not know.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import (
    check_sample_weight,
    check_scores,
    float_array,
    nan_where,
    pure_1d,
    pure_weights_invalid,
)

__all__ = ["rating_mse", "rating_mae", "kendall_tau_per_user"]


def _check_pair(ratings: ArrayLike, predictions: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    r = check_scores(ratings, name="ratings")
    p = check_scores(predictions, name="predictions")
    if r.shape != p.shape:
        raise ValueError(f"length mismatch: {r.shape[0]} ratings but {p.shape[0]} predictions.")
    return r, p


@partial(jit, static_argnames="absolute")
def _error_core(ratings, predictions, weight, absolute: bool):
    err = ratings - predictions
    loss = jnp.abs(err) if absolute else err * err
    return jnp.sum(weight * loss) / jnp.sum(weight)


def _pure_pair(ratings, predictions):
    """Traced ratings and predictions as one float dtype, and whether one is not finite."""
    dtype = jnp.result_type(
        float_array(ratings, "ratings").dtype, float_array(predictions, "predictions").dtype
    )
    r = pure_1d(ratings, "ratings", dtype=dtype)
    p = pure_1d(predictions, "predictions", dtype=dtype)
    if r.shape != p.shape:
        raise ValueError(f"length mismatch: {r.shape[0]} ratings but {p.shape[0]} predictions.")
    return r, p, ~jnp.all(jnp.isfinite(r) & jnp.isfinite(p))


def _mean_error(ratings, predictions, sample_weight, *, absolute: bool) -> jax.Array:
    if _shapes.is_traced(ratings, predictions, sample_weight):
        r, p, invalid = _pure_pair(ratings, predictions)
        if sample_weight is None:
            w = jnp.ones_like(r)
        else:
            w = pure_1d(sample_weight, "sample_weight", n=r.shape[0], dtype=r.dtype)
            invalid = invalid | pure_weights_invalid(w)
        return nan_where(invalid, _error_core(r, p, w, absolute=absolute))
    r, p = _check_pair(ratings, predictions)
    w = check_sample_weight(sample_weight, r.shape[0])
    size = _shapes.padded_size(r.shape[0])
    return _error_core(*_shapes.pad_rows(size, r, p, w), absolute=absolute)


def rating_mse(
    ratings: ArrayLike, predictions: ArrayLike, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""Weighted mean squared error of rating predictions,
    :math:`\frac{1}{W}\sum_i w_i (r_i - \hat r_i)^2`.

    Args:
        ratings: ``[n]`` true ratings.
        predictions: ``[n]`` predicted ratings (real numbers).
        sample_weight: ``[n]`` non-negative weights (default: all ones).

    Returns:
        The scalar MSE.

    Raises:
        ValueError: empty, non-finite or non-numeric input, a length mismatch, or weights
            that are negative or all zero.

    Example:
        >>> from jaxcal.metrics import rating_mse
        >>> float(rating_mse([5, 3, 1], [4.0, 3.0, 2.0]))
        0.666...
    """
    return _mean_error(ratings, predictions, sample_weight, absolute=False)


def rating_mae(
    ratings: ArrayLike, predictions: ArrayLike, sample_weight: ArrayLike | None = None
) -> jax.Array:
    r"""Weighted mean absolute error of rating predictions,
    :math:`\frac{1}{W}\sum_i w_i |r_i - \hat r_i|`.

    Args, Returns, Raises: as in :func:`rating_mse`.

    Example:
        >>> from jaxcal.metrics import rating_mae
        >>> float(rating_mae([5, 3, 1], [4.0, 3.0, 3.0]))
        1.0
    """
    return _mean_error(ratings, predictions, sample_weight, absolute=True)


@partial(jit, static_argnames=("n_levels", "n_segments"))
def _kendall_core(user, level, pred, n_levels: int, n_segments: int):
    """Per-user Kendall tau-b and whether it is defined (module docstring: the algorithm).

    ``user`` [N] ids in [0, n_segments); ``level`` [N] the ratings as 0-based ranks
    (order-preserving, < n_levels); ``pred`` [N] predictions (any ordered dtype).
    """
    user, pred, level = jax.lax.sort((user, pred, level), num_keys=2)
    n = user.shape[0]
    idx = jnp.arange(n)
    first = idx == 0
    new_user = first | (user != jnp.roll(user, 1))
    new_group = new_user | (pred != jnp.roll(pred, 1))  # a run of tied predictions
    user_start = jax.lax.cummax(jnp.where(new_user, idx, 0))
    group_start = jax.lax.cummax(jnp.where(new_group, idx, 0))
    onehot = (level[:, None] == jnp.arange(n_levels)).astype(jnp.int32)
    before = jnp.cumsum(onehot, axis=0) - onehot  # [N, K]: counts strictly before each entry
    # the user's items with a strictly lower prediction, per rating level
    lower = before[group_start] - before[user_start]
    sign = jnp.sign(level[:, None] - jnp.arange(n_levels)).astype(jnp.int32)
    s = jax.ops.segment_sum(jnp.sum(lower * sign, axis=1), user, n_segments)  # n_c - n_d
    count = jax.ops.segment_sum(jnp.ones_like(user), user, n_segments)
    per_level = jax.ops.segment_sum(onehot, user, n_segments)  # [U, K]
    n0 = count * (count - 1) // 2
    n1 = jnp.sum(per_level * (per_level - 1) // 2, axis=1)
    n2 = jax.ops.segment_sum(idx - group_start, user, n_segments)  # sum over runs t(t-1)/2
    fdtype = jnp.result_type(float)
    return _tau_mean(s.astype(fdtype), (n0 - n1).astype(fdtype), (n0 - n2).astype(fdtype))


def _tau_mean(s, a, b):
    """``(mean, tau)``: per-user tau-b ``s / sqrt(a b)`` from ``s = n_c - n_d``,
    ``a = n_0 - n_1``, ``b = n_0 - n_2`` (NaN where undefined) and its mean."""
    defined = (a > 0) & (b > 0)
    tau = s / jnp.sqrt(jnp.where(defined, a * b, 1.0))
    tau = jnp.where(defined, tau, jnp.nan)
    n_defined = jnp.sum(defined)
    mean = jnp.sum(jnp.where(defined, tau, 0.0)) / jnp.maximum(n_defined, 1)
    return jnp.where(n_defined > 0, mean, jnp.nan), tau


_PAIR_BLOCK = 256  # rows of the pair comparisons held at once by the traced path


@partial(jit, static_argnames="n_users")
def _kendall_pairs(user, rating, pred, n_users: int):
    """Per-user tau-b and its mean by direct pair counts (traced inputs; module docstring):
    ``O(n^2)`` time in blocks of rows. ``user`` ids outside ``[0, n_users)`` are dropped."""
    n = user.shape[0]
    fdtype = rating.dtype
    size = -(-n // _PAIR_BLOCK) * _PAIR_BLOCK
    idx = jnp.arange(n)
    rows = (
        jnp.pad(user, (0, size - n), constant_values=-1),
        jnp.pad(rating, (0, size - n)),
        jnp.pad(pred, (0, size - n)),
        jnp.arange(size),
    )

    def block(args):
        ub, rb, pb, ib = args
        same = (ub[:, None] == user[None, :]) & (ib[:, None] != idx[None, :])
        dr = jnp.sign(rb[:, None] - rating[None, :])
        dp = jnp.sign(pb[:, None] - pred[None, :])
        return (
            jnp.sum(jnp.where(same, dr * dp, 0.0), axis=1),
            jnp.sum(same & (dr == 0), axis=1, dtype=fdtype),
            jnp.sum(same & (dp == 0), axis=1, dtype=fdtype),
        )

    blocks = tuple(a.reshape(-1, _PAIR_BLOCK) for a in rows)
    per_row = [a.reshape(-1)[:n] for a in jax.lax.map(block, blocks)]
    # every pair is seen from both of its ends
    s, n1, n2 = (0.5 * jax.ops.segment_sum(a, user, n_users) for a in per_row)
    count = jax.ops.segment_sum(jnp.ones_like(rating), user, n_users)
    n0 = 0.5 * count * (count - 1)
    return _tau_mean(s, n0 - n1, n0 - n2)


def _kendall_pure(users, ratings, predictions, n_users):
    """:func:`kendall_tau_per_user` with a traced input."""
    r, p, invalid = _pure_pair(ratings, predictions)
    if n_users is None:
        if _shapes.is_traced(users):
            raise ValueError(
                "kendall_tau_per_user of traced user ids needs n_users= (the length of the "
                "per-user result, fixed when the program is traced)."
            )
        n_users = int(np.max(np.asarray(users))) + 1
    if isinstance(n_users, bool) or not isinstance(n_users, int | np.integer) or n_users < 1:
        raise ValueError(f"n_users must be a positive integer; got {n_users!r}.")
    u = jnp.asarray(users)
    if u.shape != r.shape:
        raise ValueError(f"length mismatch: {u.size} users but {r.shape[0]} ratings.")
    if u.dtype.kind not in "biuf":
        raise ValueError(f"users must be integer ids; got dtype {u.dtype}.")
    if u.dtype.kind == "f":
        invalid = invalid | jnp.any(~jnp.isfinite(u) | (u != jnp.round(u)))
        u = jnp.where(jnp.isfinite(u), u, -1)
    invalid = invalid | jnp.any((u < 0) | (u >= n_users))
    mean, tau = _kendall_pairs(u.astype(jnp.int32), r, p, n_users=int(n_users))
    return nan_where(invalid, (mean, tau))


def kendall_tau_per_user(
    users: ArrayLike,
    ratings: ArrayLike,
    predictions: ArrayLike,
    *,
    n_users: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    r"""Kendall's :math:`\tau_b` between true ratings and predictions within each user's
    rated items, and its mean over the users where it is defined (module docstring).

    Args:
        users: ``[n]`` integer user ids (>= 0) of the ratings.
        ratings: ``[n]`` true ratings.
        predictions: ``[n]`` predicted ratings or scores (only their order within a user
            matters).
        n_users: length of the per-user result (default ``max(users) + 1``; required
            when ``users`` are traced).

    Returns:
        ``(mean, per_user)``: the mean :math:`\tau_b` over users where it is defined (NaN
        if there is none) and the ``[n_users]`` values, NaN where undefined (fewer than two
        rated items, or all ratings or all predictions of the user tied).

    Raises:
        ValueError: empty, non-finite or non-numeric input, length mismatches, negative or
            non-integer user ids, or ids >= ``n_users``.

    Example:
        >>> from jaxcal.metrics import kendall_tau_per_user
        >>> mean, per_user = kendall_tau_per_user(
        ...     [0, 0, 0, 1, 1, 2], [1, 2, 3, 4, 5, 3], [0.1, 0.3, 0.2, 2.0, 1.0, 0.5])
        >>> [round(float(t), 3) for t in per_user]
        [0.333, -1.0, nan]
        >>> round(float(mean), 3)
        -0.333
    """
    if _shapes.is_traced(users, ratings, predictions):
        return _kendall_pure(users, ratings, predictions, n_users)
    r, p = _check_pair(ratings, predictions)
    u = np.asarray(users)
    if u.shape != r.shape:
        raise ValueError(f"length mismatch: {u.size} users but {r.shape[0]} ratings.")
    if u.dtype.kind == "f" and np.isfinite(u).all() and (u == np.round(u)).all():
        u = u.astype(np.int64)
    if u.dtype.kind not in "iu":
        raise ValueError(f"users must be integer ids; got dtype {u.dtype}.")
    if (u < 0).any():
        raise ValueError(f"users must be >= 0; got min {int(u.min())}.")
    top = int(u.max()) + 1
    if n_users is None:
        n_users = top
    elif isinstance(n_users, bool) or not isinstance(n_users, int | np.integer) or n_users < top:
        raise ValueError(f"n_users must be an integer >= max(users) + 1 = {top}; got {n_users!r}.")
    # exact ties survive any float precision: ratings and predictions as dense ranks
    level_values, level = np.unique(r, return_inverse=True)
    _, pred_rank = np.unique(p, return_inverse=True)
    size = _shapes.padded_size(r.shape[0])
    n_segments = _shapes.padded_size(int(n_users) + 1)  # the padding entries' own user
    u32, lv, pr = _shapes.pad_rows(
        size,
        u.astype(np.int32),
        level.astype(np.int32),
        pred_rank.astype(np.int32),
        fills=[n_users, 0, 0],
    )
    mean, tau = _kendall_core(u32, lv, pr, n_levels=int(level_values.size), n_segments=n_segments)
    return mean, _shapes.unpad(tau, int(n_users))
