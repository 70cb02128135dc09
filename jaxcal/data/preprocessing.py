r"""Preprocessing of feedback data for calibration: binarisation, hold-outs, negative sampling,
and the calibration-data builder with an explicit negative-sampling ratio.

All functions take either a dense ``[n_users, n_items]`` integer matrix (0 = no interaction)
or :class:`~jaxcal.data.Interactions` triples, and return the same kind. They run once, in
NumPy, before any model is fitted. Randomness comes from ``key``, a JAX PRNG key
(``jax.random.key(seed)``) whose bits seed a NumPy generator (:func:`jaxcal._rng.numpy_rng`),
so every random split and sample is reproducible; the deterministic variants need no key.

The calibration set of the seed paper (Kweon et al., AAAI 2022, public code) is the
validation positives plus ``r = 57`` negatives per positive drawn uniformly from the user's
items without a known positive. The ratio is a hidden modelling choice: under the naive loss
a constant calibrator fitted on such data predicts

.. math::  \pi_\text{naive}(r) = \frac{1}{1 + r},

whatever the real base rate. :func:`calibration_pairs` makes ``r`` an explicit parameter,
reports the base rate it implies under each loss (:mod:`jaxcal.debias.base_rate`), and
returns the negative weights that undo the subsampling (see ``docs/debias.md``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import numpy as np
from jax.typing import ArrayLike

from jaxcal._rng import numpy_rng
from jaxcal.data.triples import Interactions, as_matrix
from jaxcal.losses import implied_base_rate

__all__ = [
    "binarize",
    "holdout_split",
    "holdout_rate",
    "sample_negatives",
    "calibration_pairs",
    "CalibrationPairs",
]

HOLDOUT_METHODS = ("random", "per_user_last")


def binarize(
    ratings: ArrayLike | Interactions, *, threshold: float = 4, keep_negatives: bool = False
) -> np.ndarray | Interactions:
    """Binary preference labels ``rating >= threshold`` (Coat / Yahoo! R3 convention: 4).

    Args:
        ratings: a dense matrix (0 = unrated) or :class:`Interactions`.
        threshold: smallest rating that counts as positive; must be > 0 so that the
            unrated 0 of a dense matrix is never positive.
        keep_negatives: for :class:`Interactions` only: keep observed ratings below the
            threshold as rating-0 triples (explicit negatives). Default: positives only
            (implicit feedback).

    Returns:
        A dense int64 0/1 matrix, or :class:`Interactions` with ratings 0/1.

    Raises:
        ValueError: ``threshold <= 0`` or malformed input.

    Example:
        >>> import numpy as np
        >>> from jaxcal.data import Interactions, binarize
        >>> binarize(np.array([[5, 0, 3], [4, 1, 0]]))
        array([[1, 0, 0],
               [1, 0, 0]])
        >>> x = Interactions.create([0, 0, 1], [0, 2, 1], [5, 3, 4])
        >>> binarize(x).item, binarize(x, keep_negatives=True).rating
        (array([0, 1]), array([1, 0, 1]))
    """
    if not threshold > 0:
        raise ValueError(f"threshold must be > 0 (0 marks unrated pairs); got {threshold}.")
    if isinstance(ratings, Interactions):
        positive = ratings.rating >= threshold
        out = ratings._replace(rating=positive.astype(np.int64))
        return out if keep_negatives else out.select(positive)
    m = as_matrix(ratings, "ratings")
    return (m >= threshold).astype(np.int64)


def _per_user_last(user: np.ndarray, item: np.ndarray, fraction: float, min_count: int):
    order = np.lexsort((item, user))
    u_sorted = user[order]
    counts = np.bincount(u_sorted)
    start = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(u_sorted.size) - start[u_sorted]  # position within the user (by item)
    n = counts[u_sorted]
    # Python's round (half to even), as in the authors' code: max(round(0.1 n), 1)
    k = np.maximum(np.round(fraction * n), 1)
    take = (n > min_count) & (rank >= n - k)
    valid = np.zeros(user.size, bool)
    valid[order[take]] = True
    return valid


def holdout_split(
    data: ArrayLike | Interactions,
    *,
    fraction: float = 0.1,
    method: str = "random",
    key: jax.Array | None = None,
    min_count: int = 4,
) -> tuple[Any, Any]:
    """Split interactions into training and validation parts.

    ``method="random"``: ``round(fraction * n)`` of the ``n`` interactions chosen uniformly
    without replacement (reproducible from ``key``); each interaction is held out with
    probability ``fraction`` (up to rounding).

    ``method="per_user_last"``: the deterministic split of the seed paper's code (Kweon et
    al., AAAI 2022): for every user with more than ``min_count`` interactions, the last
    ``max(round(fraction * n_u), 1)`` of them in item-id order (``round`` halves to even,
    as Python's). Users with ``n_u <= min_count`` keep everything in training.

    Args:
        data: a dense matrix (every non-zero entry is an interaction) or
            :class:`Interactions` (every triple). Pass positives only for implicit feedback.
        fraction: share held out, in (0, 1).
        method: ``"random"`` or ``"per_user_last"``.
        key: a JAX PRNG key (``jax.random.key(seed)``), required for ``"random"``;
            unused by ``"per_user_last"``.
        min_count: for ``"per_user_last"``: users need more than this many interactions.

    Returns:
        ``(train, valid)``, of the same kind as ``data`` (dense matrices with zeros where
        the other part holds the entry, or triples).

    Raises:
        ValueError: unknown method, ``fraction`` outside (0, 1), no interactions, or no
            valid ``key`` for ``"random"``.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import holdout_split
        >>> positives = np.ones((4, 10), int)
        >>> train, valid = holdout_split(positives, fraction=0.1, key=jax.random.key(0))
        >>> int(train.sum()), int(valid.sum()), bool((train + valid == positives).all())
        (36, 4, True)
        >>> _, last = holdout_split(positives, method="per_user_last")  # no key: no draw
        >>> last[0]  # the last max(round(0.1 * 10), 1) = 1 item of every user
        array([0, 0, 0, 0, 0, 0, 0, 0, 0, 1])
    """
    if method not in HOLDOUT_METHODS:
        raise ValueError(f"method must be one of {HOLDOUT_METHODS}; got {method!r}.")
    if not 0 < fraction < 1:
        raise ValueError(f"fraction must lie in (0, 1); got {fraction}.")
    dense = not isinstance(data, Interactions)
    x = Interactions.from_dense(as_matrix(data, "data")) if dense else data
    if x.size == 0:
        raise ValueError("no interactions to split.")
    if method == "random":
        n_valid = int(round(fraction * x.size))
        if key is None:
            raise ValueError(
                "key is required for method='random': pass key=jax.random.key(seed) (or "
                "method='per_user_last', which draws nothing)."
            )
        idx = numpy_rng(key).choice(x.size, size=n_valid, replace=False)
        valid = np.zeros(x.size, bool)
        valid[idx] = True
    else:
        valid = _per_user_last(x.user, x.item, fraction, min_count)
    train, val = x.select(~valid), x.select(valid)
    if dense:
        return train.to_dense(), val.to_dense()
    return train, val


def holdout_rate(
    train: ArrayLike | Interactions, valid: ArrayLike | Interactions, *, per_user: bool = False
) -> float | np.ndarray:
    r"""Share of interactions that went to validation: :math:`h = n_V / (n_T + n_V)`.

    A pair's chance of appearing as a validation positive is :math:`h\,\omega` (see
    :func:`jaxcal.debias.holdout_propensity`). For ``method="per_user_last"`` the share
    differs per user (``per_user=True`` returns ``[n_users]`` shares, 0 for users with
    nothing held out or no interactions).

    Example:
        >>> import numpy as np
        >>> from jaxcal.data import holdout_rate
        >>> train, valid = np.array([[1, 1, 0], [0, 0, 0]]), np.array([[0, 0, 1], [0, 0, 0]])
        >>> round(holdout_rate(train, valid), 4), holdout_rate(train, valid, per_user=True)
        (0.3333, array([0.33333333, 0.        ]))
    """
    t = as_matrix(train, "train") != 0
    v = as_matrix(valid, "valid") != 0
    if t.shape != v.shape:
        raise ValueError(f"shape mismatch: train {t.shape} but valid {v.shape}.")
    if per_user:
        n = t.sum(1) + v.sum(1)
        return np.divide(v.sum(1), n, out=np.zeros(n.shape), where=n > 0)
    total = t.sum() + v.sum()
    if total == 0:
        raise ValueError("no interactions in train or valid.")
    return float(v.sum() / total)


def _known(known: ArrayLike | Interactions) -> np.ndarray:
    return as_matrix(known, "known_positives") != 0


def sample_negatives(
    known_positives: ArrayLike | Interactions,
    users: ArrayLike,
    *,
    key: jax.Array,
    n_per_row: int = 1,
    replace: bool = True,
) -> np.ndarray:
    """Items drawn uniformly from each user's items without a known positive.

    Exact: every row ``k`` draws from the ``n_items - |positives of users[k]|`` allowed
    items with equal probability (inverse-CDF on the running count of allowed items, no
    rejection loop). ``replace=False`` draws distinct items within a row (uniform over
    subsets).

    Args:
        known_positives: ``[n_users, n_items]`` matrix (non-zero = known positive, never
            drawn) or :class:`Interactions`.
        users: ``[m]`` user ids, one row of draws each (repeat a user to draw more rows).
        key: a JAX PRNG key (``jax.random.key(seed)``); the draws are made by NumPy from
            it (:func:`jaxcal._rng.numpy_rng`).
        n_per_row: draws per row.
        replace: draw with replacement within a row (default, independent draws).

    Returns:
        ``[m, n_per_row]`` int64 item ids.

    Raises:
        ValueError: user ids out of range, ``n_per_row < 1``, a user without enough
            allowed items, or ``key`` not a JAX PRNG key.

    Example:
        >>> import jax, numpy as np
        >>> from jaxcal.data import sample_negatives
        >>> known = np.array([[1, 0, 1, 0], [0, 1, 1, 1]])
        >>> draws = sample_negatives(known, [0, 1], n_per_row=5, key=jax.random.key(0))
        >>> sorted(set(draws[0].tolist())) <= [1, 3], set(draws[1].tolist())
        (True, {0})
    """
    rng = numpy_rng(key)
    pos = _known(known_positives)
    n_users, n_items = pos.shape
    u = np.asarray(users)
    if u.ndim != 1 or u.dtype.kind not in "iu":
        raise ValueError("users must be a 1-D array of integer ids.")
    if u.size and (u.min() < 0 or u.max() >= n_users):
        raise ValueError(f"user ids must lie in [0, {n_users}); got range [{u.min()}, {u.max()}].")
    if n_per_row < 1:
        raise ValueError(f"n_per_row must be >= 1; got {n_per_row}.")
    allowed = n_items - pos.sum(1)
    need = 1 if replace else n_per_row
    short = u[allowed[u] < need]
    if short.size:
        raise ValueError(
            f"user {int(short[0])} has {int(allowed[short[0]])} items without a positive; "
            f"cannot draw {need} negative(s){'' if replace else ' without replacement'}."
        )
    if u.size == 0:
        return np.zeros((0, n_per_row), np.int64)
    if replace:
        # j ~ U{0..allowed_u - 1}; the item is where the running count of allowed items
        # in the flattened matrix first exceeds (allowed items before row u) + j.
        cum = np.cumsum(~pos.ravel(), dtype=np.int64)
        before = np.concatenate([[0], cum[n_items - 1 :: n_items][:-1]])
        j = np.floor(rng.random((u.size, n_per_row)) * allowed[u][:, None]).astype(np.int64)
        j = np.minimum(j, allowed[u][:, None] - 1)
        flat = np.searchsorted(cum, before[u][:, None] + j + 1, side="left")
        return (flat - u[:, None] * n_items).astype(np.int64)
    out = np.empty((u.size, n_per_row), np.int64)
    chunk = max(1, (1 << 22) // n_items)
    for s in range(0, u.size, chunk):
        rows = u[s : s + chunk]
        keys = rng.random((rows.size, n_items))
        keys[pos[rows]] = np.inf  # known positives last
        out[s : s + chunk] = np.argpartition(keys, n_per_row - 1, axis=1)[:, :n_per_row]
    return out


class CalibrationPairs(NamedTuple):
    r"""Calibration data: validation positives plus sampled negatives.

    Attributes:
        user, item: ``[N]`` int64 ids (positives first, then negatives, per the input order).
        labels: ``[N]`` float64 0/1.
        propensity: ``[N]`` float64 propensities of the pairs (``None`` if not given).
        negative_weight: ``[N]`` float64 weights that undo the negative subsampling: 1 for
            positives, :math:`C_u / (r\,k_u)` for a negative of user ``u`` (``C_u`` allowed
            items, ``k_u`` validation positives). With ``sample_weight=negative_weight`` the
            calibration set stands for *all* pairs of these users without a training
            positive.
        n_negatives: the ratio ``r`` (``None`` = every allowed pair is a negative).
        base_rate: the base rate a constant calibrator fitted on these pairs implies, per
            loss (``"naive"``, ``"snips"``, and with propensities ``"ips"``,
            ``"ips_positive"``), with unit sample weights (the seed paper's protocol).
        population_base_rate: the same with ``sample_weight=negative_weight``.

    Made by :func:`calibration_pairs`.

    Example:
        >>> import numpy as np
        >>> from jaxcal.data import calibration_pairs
        >>> valid, train = np.array([[0, 1, 0, 0]]), np.array([[1, 0, 0, 0]])
        >>> cp = calibration_pairs(valid, train, n_negatives=None)  # every allowed pair
        >>> cp.item, cp.labels, round(cp.base_rate["naive"], 4)
        (array([1, 2, 3]), array([1., 0., 0.]), 0.3333)
    """

    user: np.ndarray
    item: np.ndarray
    labels: np.ndarray
    propensity: np.ndarray | None
    negative_weight: np.ndarray
    n_negatives: int | None
    base_rate: dict[str, float]
    population_base_rate: dict[str, float]


def _pair_propensity(propensity: Any, user: np.ndarray, item: np.ndarray, shape) -> np.ndarray:
    p = np.asarray(propensity, dtype=np.float64)
    if p.shape == shape:
        out = p[user, item]
    elif p.shape == (shape[1],):
        out = p[item]
    else:
        raise ValueError(
            f"propensity must be [n_users, n_items] {shape} or [n_items] ({shape[1]},); "
            f"got shape {p.shape}."
        )
    if not np.isfinite(out).all() or (out <= 0).any() or (out > 1).any():
        raise ValueError("propensity must lie in (0, 1] for every calibration pair.")
    return out


def calibration_pairs(
    valid: ArrayLike | Interactions,
    train: ArrayLike | Interactions,
    *,
    n_negatives: int | None = 57,
    key: jax.Array | None = None,
    propensity: ArrayLike | None = None,
    replace: bool = True,
    all_users: bool = False,
) -> CalibrationPairs:
    r"""Build a calibration set: validation positives + ``n_negatives`` negatives per positive.

    For each validation positive of user ``u``, ``n_negatives`` items are drawn uniformly
    from the items that are neither a training nor a validation positive of ``u``
    (:func:`sample_negatives`). The ratio ``r = n_negatives`` fixes the level of any
    calibrator fitted on the result (see :attr:`CalibrationPairs.base_rate`); the seed
    paper's code uses ``r = 57`` without saying so. Closed forms, with
    :math:`m = \overline{1/\omega}` the mean inverse propensity of the positives:

    .. math::
        \pi_\text{naive} = \pi_\text{snips} = \frac{1}{1 + r}, \qquad
        \pi_\text{ips} = \frac{m}{1 + r}, \qquad
        \pi_\text{ips\_positive} = \frac{m}{m + r}.

    ``n_negatives=None`` uses every allowed pair of the validation users as a negative
    (no subsampling), which estimates the population base rate directly. With a *random*
    hold-out every user could have drawn a validation positive, so the population is every
    user's pairs without a training positive: pass ``all_users=True`` (otherwise users with
    many positives, likelier to have one held out, are over-represented).

    Args:
        valid: validation positives (matrix or :class:`Interactions`).
        train: training positives (never drawn as negatives).
        n_negatives: negatives per validation positive (``r``), or ``None`` for all.
        key: a JAX PRNG key (``jax.random.key(seed)``) for the negatives' draws, required
            unless ``n_negatives=None`` (which draws nothing).
        propensity: optional ``[n_users, n_items]`` or ``[n_items]`` propensities in (0, 1]
            to attach to the pairs and to report the IPS base rates. For validation data
            these should already include the hold-out factor
            (:func:`jaxcal.debias.holdout_propensity`).
        replace: sample a user's negatives with replacement (default; independent draws).
        all_users: with ``n_negatives=None``, take the negatives from every user, not only
            the users with a validation positive.

    Returns:
        :class:`CalibrationPairs`.

    Raises:
        ValueError: shape mismatch, no validation positives, ``n_negatives < 1``, a user
            without enough allowed items, or no valid ``key`` when negatives are drawn.

    Example (the naive base rate is ``1 / (1 + r)`` whatever the data):
        >>> import jax, numpy as np
        >>> from jaxcal.data import calibration_pairs
        >>> valid = np.zeros((3, 50), int); valid[:, 0] = 1
        >>> train = np.zeros((3, 50), int); train[:, 1] = 1
        >>> cp = calibration_pairs(valid, train, n_negatives=4, key=jax.random.key(0))
        >>> cp.labels.size, round(cp.base_rate["naive"], 4)
        (15, 0.2)
    """
    v = as_matrix(valid, "valid") != 0
    t = as_matrix(train, "train") != 0
    if v.shape != t.shape:
        raise ValueError(f"shape mismatch: valid {v.shape} but train {t.shape}.")
    if not v.any():
        raise ValueError("valid holds no positives; nothing to calibrate on.")
    if n_negatives is not None and n_negatives < 1:
        raise ValueError(f"n_negatives must be >= 1 or None; got {n_negatives}.")
    if n_negatives is not None and key is None:
        raise ValueError(
            "key is required to draw the negatives: pass key=jax.random.key(seed) (or "
            "n_negatives=None to take every allowed pair)."
        )
    known = v | t
    pu, pi = np.nonzero(v)
    k_u = v.sum(1)
    allowed = v.shape[1] - known.sum(1)
    if n_negatives is None:
        users = np.arange(v.shape[0]) if all_users else np.flatnonzero(k_u > 0)
        nu, ni = np.nonzero(~known[users])
        nu = users[nu]
        neg_w = np.ones(nu.size)
    else:
        items = sample_negatives(known, pu, n_per_row=n_negatives, key=key, replace=replace)
        nu = np.repeat(pu, n_negatives)
        ni = items.ravel()
        neg_w = allowed[nu] / (n_negatives * k_u[nu])
    user = np.concatenate([pu, nu]).astype(np.int64)
    item = np.concatenate([pi, ni]).astype(np.int64)
    labels = np.concatenate([np.ones(pu.size), np.zeros(nu.size)])
    weight = np.concatenate([np.ones(pu.size), neg_w.astype(np.float64)])
    omega = None
    if propensity is not None:
        omega = _pair_propensity(propensity, user, item, v.shape)
    losses = ("naive",) if omega is None else ("naive", "ips", "ips_positive", "snips")
    base = {loss: implied_base_rate(labels, propensity=omega, loss=loss) for loss in losses}
    pop = {
        loss: implied_base_rate(labels, propensity=omega, sample_weight=weight, loss=loss)
        for loss in losses
    }
    return CalibrationPairs(user, item, labels, omega, weight, n_negatives, base, pop)
