r"""Personalised ranking metrics over a ``[n_users, n_items]`` score matrix.

All metrics evaluate, for each user, only the entries where ``mask`` is true (e.g. the rated
entries of a missing-at-random test set such as Coat's ``test.ascii``), then average over
the users for which the metric is defined.

* ``auc``: per-user AUC as in the BPR paper (Rendle et al. 2009, Sec. 6.2),
  :math:`\frac{1}{|U|}\sum_u \frac{1}{|E(u)|}\sum_{(i, j) \in E(u)} \delta(\hat x_{ui} >
  \hat x_{uj})`, with :math:`E(u)` the (positive, negative) pairs of user ``u``; ties count
  one half (the Mann-Whitney statistic, computed with mid-ranks in
  :math:`O(n \log n)`). Users without both a positive and a negative are skipped.
* ``ndcg_at_k``: :math:`\mathrm{DCG@k}/\mathrm{IDCG@k}` with
  :math:`\mathrm{DCG@k} = \sum_{r=1}^{k} g_r / \log_2(r + 1)`, gains ``g`` = the labels
  (0/1 or graded, >= 0), linear gains as in scikit-learn's ``ndcg_score``. Users with no
  positive gain are skipped.
* ``recall_at_k``: (number of positives in the top ``k``) / (number of positives), the
  definition of the LightGCN and NGCF evaluation code. Users without positives are skipped.

Ties in the top-``k`` metrics are broken by item index (lower first, ``lax.top_k``);
continuous scores make this immaterial. Everything is jitted and vectorised over users, so
it also runs on inputs sharded over the user axis (``jax.sharding``).

Inside ``jit`` / ``vmap`` / ``grad`` / ``jax.export`` (traced inputs) nothing is padded or
checked on the host: invalid data (non-finite scores or bad labels on evaluated entries, a
mask that is not 0/1 or selects nothing) and a mean over no defined user give NaN. The
metrics are piecewise constant in the scores (their gradient is 0 almost everywhere).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxcal import _shapes
from jaxcal._jit import jit
from jaxcal._validation import check_mask, float_array, nan_where

__all__ = ["auc", "ndcg_at_k", "recall_at_k"]


def _check(
    scores: Any, labels: Any, mask: Any, *, graded: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = np.asarray(scores)
    if s.ndim == 1:
        s = s[None, :]
    if s.ndim != 2 or s.size == 0:
        raise ValueError(
            f"scores must be a non-empty [n_users, n_items] matrix; got shape {np.shape(scores)}."
        )
    if s.dtype.kind not in "biuf":
        raise ValueError(f"scores must be numeric; got dtype {s.dtype}.")
    y = np.asarray(labels)
    if y.ndim == 1:
        y = y[None, :]
    if y.shape != s.shape:
        raise ValueError(f"shape mismatch: scores {s.shape} but labels {y.shape}.")
    if y.dtype.kind not in "biuf":
        raise ValueError(f"labels must be numeric; got dtype {y.dtype}.")
    if mask is not None and np.ndim(mask) == 1:
        mask = np.asarray(mask)[None, :]
    m = check_mask(mask, s.shape, like="scores")
    if not m.any():
        raise ValueError("mask selects no entry; nothing to evaluate.")
    if not np.isfinite(s[m]).all():
        raise ValueError("scores contain NaN or inf on evaluated (masked-in) entries.")
    yv = y[m].astype(np.float64)
    if np.isnan(yv).any():
        raise ValueError("labels contain NaN on evaluated entries.")
    if graded:
        if (yv < 0).any() or not np.isfinite(yv).all():
            raise ValueError("labels (gains) must be finite and >= 0.")
    elif not np.isin(yv, (0.0, 1.0)).all():
        bad = np.unique(yv[~np.isin(yv, (0.0, 1.0))])[:5]
        raise ValueError(f"labels must be 0/1; got values {set(bad.tolist())}. Binarise first.")
    return s.astype(np.float64), np.where(m, y, 0).astype(np.float64), m


def _matrix(x: Any, name: str, dtype=None):
    a = float_array(x, name, dtype=dtype)
    return a[None, :] if a.ndim == 1 else a


def _check_pure(scores: Any, labels: Any, mask: Any, *, graded: bool = False):
    """:func:`_check` for traced inputs: shapes raise, values set ``invalid``."""
    s = _matrix(scores, "scores")
    if s.ndim != 2 or s.size == 0:
        raise ValueError(
            f"scores must be a non-empty [n_users, n_items] matrix; got shape {s.shape}."
        )
    y = _matrix(labels, "labels", s.dtype)
    if y.shape != s.shape:
        raise ValueError(f"shape mismatch: scores {s.shape} but labels {y.shape}.")
    invalid = jnp.zeros((), bool)
    if mask is None:
        m = jnp.ones(s.shape, bool)
    else:
        m = jnp.asarray(mask)
        m = m[None, :] if m.ndim == 1 else m
        if m.shape != s.shape:
            raise ValueError(f"shape mismatch: scores {s.shape} but mask {m.shape}.")
        if m.dtype != bool:
            invalid = jnp.any((m != 0) & (m != 1))
            m = m != 0
    invalid = invalid | ~jnp.any(m) | jnp.any(m & ~jnp.isfinite(s))
    if graded:
        invalid = invalid | jnp.any(m & ~(jnp.isfinite(y) & (y >= 0)))
    else:
        invalid = invalid | jnp.any(m & (y != 0) & (y != 1))
    return s, jnp.where(m, y, 0.0), m, invalid


def _finish_pure(out, per_user: bool, invalid) -> jax.Array:
    per, mean, any_defined = out
    return nan_where(invalid | ~any_defined, per if per_user else mean)


def _check_k(k: Any, n_items: int) -> int:
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise ValueError(f"k must be a positive integer; got {k!r}.")
    return int(min(k, n_items))


def _padded(s: np.ndarray, y: np.ndarray, m: np.ndarray) -> list[jax.Array]:
    """The ``[n_users, n_items]`` inputs padded on both axes to their bucket sizes with
    masked-out entries (padding users have no evaluated entry: every metric skips them)."""
    shape = _shapes.padded_shape(s.shape)
    out = []
    for a in (s, y, m):
        for axis, size in enumerate(shape):
            a = _shapes.pad_axis(a, size, axis=axis)
        out.append(jax.device_put(a))
    return out


def _summary(values: jax.Array, defined: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-user values (NaN where undefined), the mean over defined users, and whether any
    user is defined (jitted with the metric, so the eager shell only slices)."""
    n_defined = jnp.sum(defined)
    mean = jnp.sum(jnp.where(defined, values, 0.0)) / jnp.maximum(n_defined, 1)
    return jnp.where(defined, values, jnp.nan), mean, n_defined > 0


def _finish(out, n_users: int, per_user: bool, what: str) -> jax.Array:
    per, mean, any_defined = out
    if not bool(any_defined):
        raise ValueError(f"{what} is undefined for every user (see the docstring).")
    return _shapes.unpad(per, n_users) if per_user else mean


@jit
def _auc_per_user(scores: jax.Array, labels: jax.Array, mask: jax.Array):
    def one(s, y, m):
        # masked-out entries go to +inf: they never count as "below" a valid score
        s_valid = jnp.where(m, s, jnp.inf)
        ordered = jnp.sort(s_valid)
        below = jnp.searchsorted(ordered, s, side="left")
        at_or_below = jnp.searchsorted(ordered, s, side="right")
        midrank = 0.5 * (below + at_or_below + 1)  # 1-based mid-rank among valid entries
        pos = m & (y > 0)
        n_pos = jnp.sum(pos)
        n_neg = jnp.sum(m) - n_pos
        u_stat = jnp.sum(jnp.where(pos, midrank, 0.0)) - n_pos * (n_pos + 1) / 2
        defined = (n_pos > 0) & (n_neg > 0)
        return u_stat / jnp.maximum(n_pos * n_neg, 1), defined

    return _summary(*jax.vmap(one)(scores, labels, mask))


def auc(
    scores: ArrayLike, labels: ArrayLike, *, mask: ArrayLike | None = None, per_user: bool = False
) -> jax.Array:
    """Mean per-user AUC (Rendle et al. 2009), ties counted one half.

    Args:
        scores: ``[n_users, n_items]`` ranking scores (a 1-D array is one user).
        labels: ``[n_users, n_items]`` 0/1 relevance labels.
        mask: ``[n_users, n_items]`` booleans, the entries to evaluate (default: all).
        per_user: return the ``[n_users]`` AUCs (NaN where undefined) instead of the mean.

    Returns:
        The mean AUC over users with at least one positive and one negative evaluated entry.

    Raises:
        ValueError: on shape mismatches, non-finite scores or non-0/1 labels on evaluated
            entries, an empty mask, or no user with both classes.

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics.ranking import auc
        >>> float(auc(np.array([[0.9, 0.1, 0.5]]), np.array([[1, 0, 0]])))
        1.0
    """
    if _shapes.is_traced(scores, labels, mask):
        s, y, m, invalid = _check_pure(scores, labels, mask)
        return _finish_pure(_auc_per_user(s, y, m), per_user, invalid)
    s, y, m = _check(scores, labels, mask)
    out = _auc_per_user(*_padded(s, y, m))
    return _finish(out, s.shape[0], per_user, "AUC (needs a positive and a negative)")


def _top_k(scores: jax.Array, labels: jax.Array, mask: jax.Array, k: int):
    masked = jnp.where(mask, scores, -jnp.inf)
    _, idx = jax.lax.top_k(masked, k)
    gains = jnp.take_along_axis(labels, idx, axis=-1)
    valid = jnp.take_along_axis(mask, idx, axis=-1)
    return jnp.where(valid, gains, 0.0)


def _discounts(k: int, dtype) -> jax.Array:
    return 1.0 / jnp.log2(jnp.arange(2, k + 2, dtype=dtype))


@partial(jit, static_argnames="k")
def _ndcg_per_user(scores, labels, mask, k: int):
    disc = _discounts(k, labels.dtype)
    dcg = _top_k(scores, labels, mask, k) @ disc
    ideal = jax.lax.top_k(jnp.where(mask, labels, 0.0), k)[0] @ disc
    return _summary(dcg / jnp.where(ideal > 0, ideal, 1.0), ideal > 0)


def ndcg_at_k(
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    k: int,
    mask: ArrayLike | None = None,
    per_user: bool = False,
) -> jax.Array:
    """Mean per-user NDCG@k with linear gains (the labels; 0/1 or graded >= 0).

    Args:
        scores: ``[n_users, n_items]`` ranking scores.
        labels: ``[n_users, n_items]`` gains (0/1 relevance or graded, >= 0).
        k: cut-off (clipped to the number of items).
        mask: ``[n_users, n_items]`` booleans, the entries to evaluate (default: all).
        per_user: return ``[n_users]`` values (NaN where undefined) instead of the mean.

    Returns:
        The mean NDCG@k over users with a positive gain among evaluated entries.

    Raises:
        ValueError: on bad shapes, non-finite scores, negative gains, ``k < 1``, an empty
            mask, or no user with a positive gain.

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics.ranking import ndcg_at_k
        >>> round(float(ndcg_at_k(np.array([[0.9, 0.1, 0.5]]), np.array([[0, 0, 1]]), k=2)), 6)
        0.63093
    """
    if _shapes.is_traced(scores, labels, mask):
        s, y, m, invalid = _check_pure(scores, labels, mask, graded=True)
        out = _ndcg_per_user(s, y, m, k=_check_k(k, s.shape[1]))
        return _finish_pure(out, per_user, invalid)
    s, y, m = _check(scores, labels, mask, graded=True)
    k = _check_k(k, s.shape[1])
    out = _ndcg_per_user(*_padded(s, y, m), k=k)
    return _finish(out, s.shape[0], per_user, "NDCG@k (needs a positive gain)")


@partial(jit, static_argnames="k")
def _recall_per_user(scores, labels, mask, k: int):
    hits = jnp.sum(_top_k(scores, labels, mask, k), axis=-1)
    n_pos = jnp.sum(jnp.where(mask, labels, 0.0), axis=-1)
    return _summary(hits / jnp.where(n_pos > 0, n_pos, 1.0), n_pos > 0)


def recall_at_k(
    scores: ArrayLike,
    labels: ArrayLike,
    *,
    k: int,
    mask: ArrayLike | None = None,
    per_user: bool = False,
) -> jax.Array:
    """Mean per-user Recall@k = (positives in the top k) / (positives).

    Args:
        scores: ``[n_users, n_items]`` ranking scores.
        labels: ``[n_users, n_items]`` 0/1 relevance labels.
        k: cut-off (clipped to the number of items).
        mask: ``[n_users, n_items]`` booleans, the entries to evaluate (default: all).
        per_user: return ``[n_users]`` values (NaN where undefined) instead of the mean.

    Returns:
        The mean Recall@k over users with at least one evaluated positive.

    Raises:
        ValueError: on bad shapes, non-finite scores, non-0/1 labels, ``k < 1``, an empty
            mask, or no user with a positive.

    Example:
        >>> import numpy as np
        >>> from jaxcal.metrics.ranking import recall_at_k
        >>> float(recall_at_k(np.array([[0.9, 0.1, 0.5]]), np.array([[1, 0, 1]]), k=1))
        0.5
    """
    if _shapes.is_traced(scores, labels, mask):
        s, y, m, invalid = _check_pure(scores, labels, mask)
        out = _recall_per_user(s, y, m, k=_check_k(k, s.shape[1]))
        return _finish_pure(out, per_user, invalid)
    s, y, m = _check(scores, labels, mask)
    k = _check_k(k, s.shape[1])
    out = _recall_per_user(*_padded(s, y, m), k=k)
    return _finish(out, s.shape[0], per_user, "Recall@k (needs a positive)")
