"""The encoded click log of the pure core (:mod:`jaxcal.clicks.core`): the
:class:`SessionArrays` pytree, :func:`encode_sessions` (host-side, NumPy) and the checks of
an encoded log (eager ``ValueError`` on concrete arrays; inside a trace, the validity flag
that turns the core's results into NaN)."""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxcal._shapes import is_traced
from jaxcal.clicks._base import check_sessions
from jaxcal.clicks.sessions import PairIndex, Sessions, encode_pairs, lookup_pairs

__all__ = [
    "SessionArrays",
    "check_arrays",
    "encode_sessions",
    "float_dtype",
    "positive_int",
    "valid_arrays",
]


class SessionArrays(NamedTuple):
    """An encoded click log: the input of the pure core (arrays only, a pytree).

    ``S`` sessions (rows), ``n`` ranks, ``T`` entries per pair parameter table. Make it with
    :func:`encode_sessions`; stack several of one shape (``jax.tree.map(np.stack, ...)``)
    to ``vmap`` over logs.

    Attributes:
        pair_ids: ``[S, n]`` int32, the id of the (query, document) pair shown at each rank:
            ``0 .. P - 1`` for the ``P`` pairs of the pair index, ``P`` (the slot whose
            value is the prior mean) on unseen pairs and padded ranks.
        clicks: ``[S, n]`` float, 0/1 (0 on padded ranks).
        mask: ``[S, n]`` bool, ``True`` on real results (a prefix of each row; padding rows
            are all ``False``).
        weight: ``[S]`` float, session multiplicities (0 on padding rows).
        pair_mask: ``[T]`` bool, ``True`` on the ``P + 1`` entries of a pair table that are
            parameters (the pairs and the unseen-pair slot), ``False`` on the padding entries
            that give several logs one table size (no session uses them; they stay at the
            prior mean and are left out of the objective).

    Example:
        >>> from jaxcal.clicks import SessionArrays, Sessions, encode_sessions
        >>> log = Sessions.from_arrays([0, 1], [[1, 2], [1, 3]], [[1, 0], [0, 0]])
        >>> arrays, _ = encode_sessions(log, n_sessions=4, n_pairs=8)
        >>> isinstance(arrays, SessionArrays), arrays.pair_ids.shape, arrays.weight.tolist()
        (True, (4, 2), [1.0, 1.0, 0.0, 0.0])
    """

    pair_ids: jax.Array
    clicks: jax.Array
    mask: jax.Array
    weight: jax.Array
    pair_mask: jax.Array


# the serialized form of an exported program names its input and output pytrees
jax.export.register_namedtuple_serialization(
    SessionArrays, serialized_name="jaxcal.clicks.SessionArrays"
)


def float_dtype() -> np.dtype:
    """JAX's default float dtype (float32 unless x64 is enabled)."""
    return jax.dtypes.canonicalize_dtype(np.float64)


def positive_int(value: Any, name: str, *, minimum: int = 1) -> int | None:
    """``value`` as an ``int`` (``None`` stays ``None``); ``ValueError`` naming ``name``
    unless it is an integer ``>= minimum``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}.")
    return int(value)


def encode_sessions(
    sessions: Sessions,
    *,
    pairs: PairIndex | None = None,
    n_sessions: int | None = None,
    n_results: int | None = None,
    n_pairs: int | None = None,
) -> tuple[SessionArrays, PairIndex]:
    """Encode a log for the pure core, eagerly, on the host (NumPy).

    Maps every (query, document) pair to an id and pads, with entries that change no
    result, to the sizes given, so that logs of different sizes share one shape (``vmap``
    over logs, one compiled program for all). Identical sessions are kept as they are:
    encode ``sessions.deduplicate()`` for the same fit with less work (the estimators'
    ``fit`` deduplicates by default).

    Args:
        sessions: the log, a :class:`~jaxcal.clicks.Sessions`.
        pairs: the pair index to encode against, e.g. a training log's (the second result
            of this function, or ``PairIndex(fitted.pair_query, fitted.pair_doc)`` of a
            fitted model): pairs outside it get the unseen-pair id ``P``. Default: the pairs
            of ``sessions`` (sorted by query, then document).
        n_sessions: pad to this many rows (weight 0, fully masked; default: no padding).
        n_results: pad SERPs to this many ranks (masked; default: the log's ``n``).
        n_pairs: the size ``T`` of the pair parameter tables, at least ``P + 1`` (default
            ``P + 1``).

    Returns:
        ``(arrays, pairs)``: the :class:`SessionArrays` (NumPy arrays; clicks and weights
        in JAX's default float dtype) and the :class:`~jaxcal.clicks.PairIndex` of the
        ``P`` pairs, whose id is their position.

    Raises:
        ValueError: if ``sessions`` is not a non-empty log, ``pairs`` is not sorted, or a
            size is smaller than the log's.

    Example:
        >>> from jaxcal.clicks import Sessions, encode_sessions
        >>> train = Sessions.from_arrays([0, 1], [[1, 2], [1, 3]], [[1, 0], [0, 0]])
        >>> arrays, pairs = encode_sessions(train)
        >>> arrays.pair_ids.tolist(), pairs.doc.tolist()  # pairs (0, 1), (0, 2), (1, 1), (1, 3)
        ([[0, 1], [2, 3]], [1, 2, 1, 3])
        >>> test = Sessions.from_arrays([0], [[2, 7]], [[0, 1]])
        >>> encode_sessions(test, pairs=pairs)[0].pair_ids.tolist()  # 4: an unseen pair
        [[1, 4]]
    """
    sessions = check_sessions(sessions)
    S, n = sessions.n_sessions, sessions.n_results
    rows = positive_int(n_sessions, "n_sessions") or S
    ranks = positive_int(n_results, "n_results") or n
    if rows < S:
        raise ValueError(f"n_sessions={rows} is smaller than the log's {S} sessions.")
    if ranks < n:
        raise ValueError(f"n_results={ranks} is smaller than the log's {n} results per SERP.")
    if pairs is None:
        pairs, ids = encode_pairs(sessions)
    else:
        pairs = PairIndex(np.asarray(pairs.query, np.int32), np.asarray(pairs.doc, np.int32))
        keys = pairs.query.astype(np.int64) * 2**31 + pairs.doc
        if pairs.query.shape != pairs.doc.shape or (np.diff(keys) <= 0).any():
            raise ValueError(
                "pairs must be a PairIndex of distinct (query, document) pairs sorted by "
                "query, then document (as encode_sessions and fit return them)."
            )
        ids = lookup_pairs(pairs, sessions)
    P = pairs.query.shape[0]
    table = positive_int(n_pairs, "n_pairs") or P + 1
    if table < P + 1:
        raise ValueError(
            f"n_pairs={table} is too small: the log's pair index has {P} pairs, and the "
            f"tables need one more entry (the prior mean of unseen pairs): n_pairs >= {P + 1}."
        )
    dtype = float_dtype()
    pair_ids = np.full((rows, ranks), P, np.int32)
    pair_ids[:S, :n] = ids
    clicks = np.zeros((rows, ranks), dtype)
    clicks[:S, :n] = np.asarray(sessions.clicks)
    mask = np.zeros((rows, ranks), bool)
    mask[:S, :n] = np.asarray(sessions.mask)
    weight = np.zeros(rows, dtype)
    weight[:S] = np.asarray(sessions.weight)
    arrays = SessionArrays(pair_ids, clicks, mask, weight, np.arange(table) <= P)
    return arrays, pairs


def check_arrays(arrays: Any) -> SessionArrays:
    """Shapes always; values too where the arrays are concrete (``ValueError``)."""
    if not isinstance(arrays, SessionArrays):
        raise ValueError(
            f"arrays must be a jaxcal.clicks.SessionArrays (see encode_sessions); "
            f"got {type(arrays).__name__}."
        )
    shape = np.shape(arrays.pair_ids)
    if len(shape) != 2 or 0 in shape:
        raise ValueError(f"pair_ids must be a non-empty [S, n] array; got shape {shape}.")
    for name in ("clicks", "mask"):
        if np.shape(getattr(arrays, name)) != shape:
            raise ValueError(
                f"shape mismatch: pair_ids {shape} but {name} {np.shape(getattr(arrays, name))}."
            )
    if np.shape(arrays.weight) != shape[:1]:
        raise ValueError(f"weight must have shape ({shape[0]},); got {np.shape(arrays.weight)}.")
    if np.ndim(arrays.pair_mask) != 1 or np.size(arrays.pair_mask) == 0:
        raise ValueError(
            f"pair_mask must be a non-empty [T] array; got shape {np.shape(arrays.pair_mask)}."
        )
    if is_traced(arrays):
        return arrays
    ids = np.asarray(arrays.pair_ids)
    clicks = np.asarray(arrays.clicks)
    mask = np.asarray(arrays.mask)
    weight = np.asarray(arrays.weight)
    T = np.size(arrays.pair_mask)
    if ids.dtype.kind not in "iu" or ids.min() < 0 or ids.max() >= T:
        raise ValueError(f"pair_ids must be integers in [0, {T}) (the pair table size T).")
    if mask.dtype != bool:
        raise ValueError(f"mask must be boolean; got dtype {mask.dtype}.")
    if (np.diff(mask.astype(np.int8), axis=1) > 0).any():
        raise ValueError("mask must be a prefix per row (results first, padding last).")
    if not np.isin(clicks, (0, 1)).all() or (clicks[~mask] != 0).any():
        raise ValueError("clicks must be 0/1 on real results and 0 on padded ranks.")
    if not np.isfinite(weight).all() or (weight < 0).any():
        raise ValueError("weight must be finite and non-negative.")
    if not (weight[:, None] * mask).sum() > 0:
        raise ValueError("the log has zero total weight on its real results.")
    return arrays


def valid_arrays(arrays: SessionArrays) -> jax.Array:
    """Inside the program: whether the log is valid (the eager checks' traced form)."""
    T = arrays.pair_mask.shape[0]
    ids_ok = jnp.all((arrays.pair_ids >= 0) & (arrays.pair_ids < T))
    clicks_ok = jnp.all((arrays.clicks == 0) | (arrays.mask & (arrays.clicks == 1)))
    weight_ok = jnp.all(jnp.isfinite(arrays.weight) & (arrays.weight >= 0))
    return ids_ok & clicks_ok & weight_ok
