"""The ratings of a CMTRF fit (:mod:`jaxcal.recsys.cmtrf`): checked, the validation share
held out, weighted by inverse propensities, and padded to the pairs of the pure core.
Private helpers of :class:`jaxcal.recsys.CMTRF`."""

from __future__ import annotations

import jax
import numpy as np

from jaxcal import _shapes
from jaxcal.data.triples import Interactions
from jaxcal.recsys import _cmtrf_core as core


def _check_ratings(data, name: str, n_levels: int | None) -> Interactions:
    if not isinstance(data, Interactions):
        raise ValueError(
            f"{name} must be jaxcal.data.Interactions (explicit ratings 1..L); got "
            f"{type(data).__name__}. Build it with Interactions.create or .from_dense."
        )
    r = np.asarray(data.rating)
    if r.size == 0:
        raise ValueError(f"{name} holds no ratings.")
    if r.dtype.kind not in "iu" and not np.all(r == np.round(r)):
        raise ValueError(f"{name} ratings must be integers 1..L; got non-integer values.")
    top = n_levels if n_levels is not None else int(r.max())
    if r.min() < 1 or r.max() > top:
        raise ValueError(
            f"{name} ratings must lie in 1..{top}; got range [{int(r.min())}, {int(r.max())}]."
        )
    for ids, n, side in ((data.user, data.n_users, "user"), (data.item, data.n_items, "item")):
        ids = np.asarray(ids)
        if ids.size and (ids.min() < 0 or ids.max() >= n):
            raise ValueError(f"{name} {side} ids must lie in [0, {n}).")
    return data


def _check_validation(validation, train: Interactions, n_levels: int | None) -> Interactions:
    """``validation`` checked as ratings (:func:`_check_ratings`) of ``train``'s matrix."""
    validation = _check_ratings(validation, "validation", n_levels)
    if (validation.n_users, validation.n_items) != (train.n_users, train.n_items):
        raise ValueError(
            f"validation is {validation.n_users} x {validation.n_items} but train is "
            f"{train.n_users} x {train.n_items}."
        )
    return validation


def _holdout(train: Interactions, fraction: float, key) -> tuple[Interactions, Interactions]:
    """``train`` split in two: a random share ``fraction`` (at least one rating, drawn with
    ``key``) held out for validation, the rest kept for training, each in ``train``'s
    order."""
    seed = int(jax.random.randint(key, (), 0, np.iinfo(np.int32).max))
    n = train.rating.size
    n_val = max(1, int(round(fraction * n)))
    if n_val >= n:
        raise ValueError(
            f"train holds {n} rating(s): too few to hold out a validation share; pass "
            "validation= explicitly."
        )
    held = np.zeros(n, bool)
    held[np.random.default_rng(seed).permutation(n)[:n_val]] = True
    return train.select(~held), train.select(held)


def _ips_weights(propensity, train: Interactions, validation: Interactions):
    """Inverse-propensity weights ``1 / p`` of the training and of the validation ratings
    (:meth:`CMTRF.fit`)."""
    p = np.asarray(propensity, np.float64)
    if p.shape != (train.n_users, train.n_items):
        raise ValueError(
            f"propensity must be [n_users, n_items] = [{train.n_users}, {train.n_items}]; "
            f"got shape {p.shape}."
        )
    weights = []
    for name, data in (("train", train), ("validation", validation)):
        at = p[np.asarray(data.user), np.asarray(data.item)]
        bad = ~(np.isfinite(at) & (at > 0) & (at <= 1))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"propensity must lie in (0, 1] at every {name} rating; got {at[k]!r} at "
                f"user {int(data.user[k])}, item {int(data.item[k])}."
            )
        weights.append(1.0 / at)
    return tuple(weights)


def _fit_ratings(train, validation, propensity, *, n_levels, fraction, key):
    """The ratings of a fit: ``train`` checked, ``validation`` checked against it (None: a
    share ``fraction`` of ``train`` held out with ``key``), and the inverse-propensity
    weights of each (None without ``propensity``): ``(train, validation, train_weight,
    validation_weight)``."""
    train = _check_ratings(train, "train", n_levels)
    if validation is None:
        train, validation = _holdout(train, fraction, key)
    else:
        validation = _check_validation(validation, train, n_levels)
    if propensity is None:
        return train, validation, None, None
    return train, validation, *_ips_weights(propensity, train, validation)


def _pairs(rows, cols, ratings, size: int, sort: bool, weight=None) -> core.Pairs:
    """Pairs sorted by ``rows`` (if ``sort``), padded to ``size`` with zero weights (row and
    column ids of the padding: the largest row id, so the rows stay sorted); ``weight``:
    each rating's weight (default 1)."""
    rows, cols, ratings = (np.asarray(a, np.int64) for a in (rows, cols, ratings))
    weight = np.ones(rows.size) if weight is None else np.asarray(weight, np.float64)
    if sort:
        order = np.lexsort((cols, rows))
        rows, cols, ratings, weight = rows[order], cols[order], ratings[order], weight[order]
    fill_row = int(rows.max(initial=0))
    dtype = jax.dtypes.canonicalize_dtype(np.float64)
    out = _shapes.pad_rows(
        size,
        rows.astype(np.int32),
        cols.astype(np.int32),
        (ratings - 1).astype(np.int32),
        weight.astype(dtype),
        fills=[fill_row, 0, 0, 0],
    )
    return core.Pairs(*(jax.device_put(a) for a in out))


def _training_problem(train: Interactions, weight, validation: core.Pairs) -> core.Problem:
    """The training ratings sorted both ways (``weight``: inverse propensities, scaled here to
    mean 1 so that the penalties keep their meaning; None: 1 each)."""
    weight = None if weight is None else weight / weight.mean()
    size = _shapes.padded_size(train.rating.size)
    return core.Problem(
        by_user=_pairs(train.user, train.item, train.rating, size, True, weight),
        by_item=_pairs(train.item, train.user, train.rating, size, True, weight),
        validation=validation,
    )
