"""The array container of a click log: one SERP ("query session") per row.

A log of ``S`` sessions with at most ``n`` results each is five arrays:

* ``query``  ``[S]`` int32 query ids,
* ``doc``    ``[S, n]`` int32 document ids (the SERP, top to bottom),
* ``clicks`` ``[S, n]`` int8 clicks (0/1),
* ``mask``   ``[S, n]`` bool, ``True`` on real results; shorter SERPs are padded at the end
  (the mask of every row is a prefix: ``True ... True False ... False``),
* ``weight`` ``[S]`` float64 multiplicities (1 per logged session; identical sessions are
  merged into one row with their count by :meth:`Sessions.deduplicate`).

Ids are any non-negative integers below ``2**31`` (the readers re-code string ids).
Parameters of click models are indexed by (query, document) pairs; :func:`encode_pairs`
maps the pairs of a log to contiguous ids ``0..P-1`` (padding goes to the extra slot ``P``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from jax.typing import ArrayLike

from jaxcal._pytree import pytree_dataclass
from jaxcal._validation import check_mask

__all__ = ["Sessions", "PairIndex", "encode_pairs", "lookup_pairs"]

_MAX_ID = 2**31 - 1


@pytree_dataclass
class Sessions:
    """A click log as arrays (see the module docstring for the layout).

    Build it with :meth:`Sessions.from_arrays` (which validates), or with the readers
    :func:`jaxcal.clicks.read_tiangong`, :func:`jaxcal.clicks.read_yandex`,
    :func:`jaxcal.clicks.read_npz`, or :func:`jaxcal.clicks.simulate`.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import Sessions
        >>> s = Sessions.from_arrays(query=[0, 0], doc=[[1, 2], [2, 1]], clicks=[[1, 0], [0, 0]])
        >>> s.n_sessions, s.n_results
        (2, 2)
    """

    query: np.ndarray
    doc: np.ndarray
    clicks: np.ndarray
    mask: np.ndarray
    weight: np.ndarray

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_arrays(
        cls,
        query: ArrayLike,
        doc: ArrayLike,
        clicks: ArrayLike,
        mask: ArrayLike | None = None,
        weight: ArrayLike | None = None,
    ) -> Sessions:
        """Validate and pack arrays into :class:`Sessions`.

        Args:
            query: ``[S]`` non-negative integer query ids.
            doc: ``[S, n]`` non-negative integer document ids.
            clicks: ``[S, n]`` clicks, 0/1 (or bool).
            mask: ``[S, n]`` bool, ``True`` on real results; must be a prefix per row
                (default: all ``True``). Padded entries of ``doc`` / ``clicks`` are ignored.
            weight: ``[S]`` non-negative multiplicities (default 1).

        Returns:
            The validated container (NumPy arrays).

        Raises:
            ValueError: on empty input, shape mismatches, ids that are negative, non-integer
                or too large, clicks not 0/1, a mask that is not a prefix, a session without
                results, clicks on padded positions, or negative / non-finite weights.

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> s = Sessions.from_arrays([7], [[3, 4, 0]], [[0, 1, 0]], mask=[[1, 1, 0]])
            >>> s.doc.tolist(), s.mask.tolist()  # a SERP of 2 results, padded to 3
            ([[3, 4, 0]], [[True, True, False]])
        """
        q = _as_ids(query, "query")
        if q.ndim != 1:
            raise ValueError(f"query must be 1-D [S]; got shape {q.shape}.")
        d = _as_ids(doc, "doc")
        if d.ndim != 2:
            raise ValueError(f"doc must be 2-D [S, n]; got shape {d.shape}.")
        S, n = d.shape
        if S == 0 or n == 0:
            raise ValueError(f"the log is empty (doc has shape {d.shape}); need >= 1 session.")
        if q.shape[0] != S:
            raise ValueError(f"length mismatch: {q.shape[0]} query ids but {S} SERPs in doc.")
        c = np.asarray(clicks)
        if c.shape != d.shape:
            raise ValueError(f"shape mismatch: doc {d.shape} but clicks {c.shape}.")
        if c.dtype.kind not in "biuf":
            raise ValueError(f"clicks must be numeric 0/1; got dtype {c.dtype}.")
        m = check_mask(mask, d.shape, like="doc")
        bad = m & ~np.isin(c, (0, 1))
        if bad.any():
            vals = np.unique(c[bad])[:5]
            raise ValueError(f"clicks must be 0/1; got values {vals.tolist()}.")
        if (np.diff(m.astype(np.int8), axis=1) > 0).any():
            row = int(np.flatnonzero((np.diff(m.astype(np.int8), axis=1) > 0).any(1))[0])
            raise ValueError(
                f"mask must be a prefix per row (results first, padding last); row {row} is not."
            )
        if not m[:, 0].all():
            row = int(np.flatnonzero(~m[:, 0])[0])
            raise ValueError(f"session {row} has no results (its mask is all False).")
        if (~m & (c != 0)).any():
            row = int(np.flatnonzero((~m & (c != 0)).any(1))[0])
            raise ValueError(f"session {row} has a click on a padded (masked) position.")
        c = np.where(m, c, 0).astype(np.int8)
        d = np.where(m, d, 0).astype(np.int32)
        if weight is None:
            w = np.ones(S)
        else:
            w = np.asarray(weight, dtype=np.float64)
            if w.shape != (S,):
                raise ValueError(f"weight must have shape ({S},); got {w.shape}.")
            if not np.isfinite(w).all() or (w < 0).any():
                raise ValueError("weight must be finite and non-negative.")
        return cls(query=q.astype(np.int32), doc=d, clicks=c, mask=m, weight=w)

    # ------------------------------------------------------------------ properties
    @property
    def n_sessions(self) -> int:
        """Number of rows ``S`` (distinct sessions after deduplication).

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> Sessions.from_arrays([0, 0, 1], [[1], [1], [2]], [[1], [1], [0]]).n_sessions
            3
        """
        return int(self.doc.shape[0])

    @property
    def n_results(self) -> int:
        """Maximum SERP length ``n``.

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> Sessions.from_arrays([0], [[1, 2, 3]], [[0, 0, 1]]).n_results
            3
        """
        return int(self.doc.shape[1])

    @property
    def total_weight(self) -> float:
        """Number of logged sessions (sum of weights).

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> Sessions.from_arrays([0, 1], [[1], [2]], [[1], [0]], weight=[3, 2]).total_weight
            5.0
        """
        return float(np.sum(self.weight))

    def __len__(self) -> int:
        return self.n_sessions

    def __getitem__(self, index: Any) -> Sessions:
        """Select rows (slice, integer array or boolean mask); returns new Sessions."""
        if isinstance(index, int | np.integer):
            index = slice(int(index), int(index) + 1)
        return Sessions(
            query=np.asarray(self.query)[index],
            doc=np.asarray(self.doc)[index],
            clicks=np.asarray(self.clicks)[index],
            mask=np.asarray(self.mask)[index],
            weight=np.asarray(self.weight)[index],
        )

    # ------------------------------------------------------------------ transforms
    def deduplicate(self) -> Sessions:
        """Merge identical sessions (same query, SERP, clicks and length) into one row.

        The weight of a merged row is the sum of the weights it replaces; every click
        model likelihood and metric in :mod:`jaxcal.clicks` is a weighted sum over rows,
        so results are unchanged while the work shrinks (real logs repeat head queries).

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> s = Sessions.from_arrays([0, 0, 1], [[1], [1], [2]], [[1], [1], [0]])
            >>> d = s.deduplicate()
            >>> d.n_sessions, d.weight.tolist()
            (2, [2.0, 1.0])
        """
        query = np.asarray(self.query, np.int32)
        doc = np.asarray(self.doc, np.int32)
        clicks = np.asarray(self.clicks, np.int8)
        mask = np.asarray(self.mask, bool)
        columns = [query, *doc.T, *clicks.T, *mask.T]
        # lexicographic order of the rows (first column primary), then runs of equal rows;
        # a stable multi-key sort of 1-D columns is ~20x faster than np.unique(axis=0)
        order = np.lexsort(columns[::-1])
        new_row = np.zeros(order.shape[0], bool)
        new_row[0] = True
        for col in columns:
            sorted_col = col[order]
            new_row[1:] |= sorted_col[1:] != sorted_col[:-1]
        group = np.cumsum(new_row) - 1
        inverse = np.empty_like(group)
        inverse[order] = group
        first = order[new_row]
        w = np.bincount(inverse, weights=np.asarray(self.weight), minlength=first.shape[0])
        return Sessions(
            query=query[first],
            doc=doc[first],
            clicks=clicks[first],
            mask=mask[first],
            weight=w,
        )

    def pad_to(self, n_results: int) -> Sessions:
        """Pad SERPs with masked positions up to ``n_results`` (never truncates).

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> Sessions.from_arrays([0], [[1, 2]], [[1, 0]]).pad_to(4).mask.tolist()
            [[True, True, False, False]]
        """
        n = self.n_results
        if n_results < n:
            raise ValueError(f"cannot pad {n} results down to {n_results}.")
        extra = n_results - n
        if extra == 0:
            return self

        def pad(a, value):
            return np.pad(np.asarray(a), ((0, 0), (0, extra)), constant_values=value)

        return Sessions(
            query=np.asarray(self.query),
            doc=pad(self.doc, 0),
            clicks=pad(self.clicks, 0),
            mask=pad(self.mask, False),
            weight=np.asarray(self.weight),
        )

    @staticmethod
    def concatenate(parts: list[Sessions]) -> Sessions:
        """Stack logs row-wise (SERPs padded to the longest).

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> a = Sessions.from_arrays([0], [[1, 2, 3]], [[1, 0, 0]])
            >>> b = Sessions.from_arrays([1], [[4]], [[0]])
            >>> Sessions.concatenate([a, b]).mask.tolist()
            [[True, True, True], [True, False, False]]
        """
        if not parts:
            raise ValueError("nothing to concatenate: got an empty list of Sessions.")
        n = max(p.n_results for p in parts)
        parts = [p.pad_to(n) for p in parts]
        return Sessions(
            query=np.concatenate([np.asarray(p.query) for p in parts]),
            doc=np.concatenate([np.asarray(p.doc) for p in parts]),
            clicks=np.concatenate([np.asarray(p.clicks) for p in parts]),
            mask=np.concatenate([np.asarray(p.mask) for p in parts]),
            weight=np.concatenate([np.asarray(p.weight) for p in parts]),
        )

    def expand(self) -> Sessions:
        """Undo deduplication: repeat each row ``weight`` times (weights must be integers).

        Example:
            >>> from jaxcal.clicks import Sessions
            >>> s = Sessions.from_arrays([0, 1], [[1], [2]], [[1], [0]], weight=[2, 1])
            >>> s.expand().query.tolist()
            [0, 0, 1]
        """
        w = np.asarray(self.weight)
        if not np.all(w == np.round(w)):
            raise ValueError("expand needs integer weights.")
        idx = np.repeat(np.arange(self.n_sessions), w.astype(np.int64))
        out = self[idx]
        return Sessions(out.query, out.doc, out.clicks, out.mask, np.ones(idx.shape[0]))

    def to_npz(self, path) -> None:
        """Write plain NumPy arrays (``query, doc, clicks, mask, weight``) to ``path``.

        Example:
            >>> from jaxcal.clicks import Sessions, read_npz
            >>> Sessions.from_arrays([0], [[1, 2]], [[0, 1]]).to_npz("log.npz")
            >>> read_npz("log.npz").clicks.tolist()
            [[0, 1]]
        """
        np.savez(
            path,
            query=np.asarray(self.query),
            doc=np.asarray(self.doc),
            clicks=np.asarray(self.clicks),
            mask=np.asarray(self.mask),
            weight=np.asarray(self.weight),
        )


def _as_ids(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype.kind == "f":
        if not (np.isfinite(a).all() and (a == np.round(a)).all()):
            raise ValueError(f"{name} ids must be integers; got non-integer floats.")
        a = a.astype(np.int64)
    if a.dtype.kind not in "biu":
        raise ValueError(f"{name} ids must be integers; got dtype {a.dtype}.")
    if a.size and (a.min() < 0 or a.max() > _MAX_ID):
        raise ValueError(
            f"{name} ids must lie in [0, 2**31 - 1]; got range [{a.min()}, {a.max()}]. "
            "Re-code them (e.g. with numpy.unique(..., return_inverse=True))."
        )
    return a


class PairIndex(NamedTuple):
    """The (query, document) pairs of a training log, sorted lexicographically.

    Example:
        >>> from jaxcal.clicks import DCTR, PairIndex, Sessions
        >>> fitted = DCTR().fit(Sessions.from_arrays([3, 1], [[5, 4], [9, 8]], [[1, 0], [0, 0]]))
        >>> pairs = PairIndex(fitted.pair_query, fitted.pair_doc)
        >>> pairs.query.tolist(), pairs.doc.tolist()
        ([1, 1, 3, 3], [8, 9, 4, 5])
    """

    query: np.ndarray  # [P] int32
    doc: np.ndarray  # [P] int32


def _keys(query: np.ndarray, doc: np.ndarray) -> np.ndarray:
    return query.astype(np.int64) * np.int64(2**31) + doc.astype(np.int64)


def encode_pairs(sessions: Sessions) -> tuple[PairIndex, np.ndarray]:
    """Contiguous ids for the (query, document) pairs shown in ``sessions``.

    Returns:
        ``(index, qd)``: the ``P`` distinct pairs and ``[S, n]`` int32 ids in ``0..P-1``;
        padded positions get the extra id ``P``.

    Example:
        >>> from jaxcal.clicks import Sessions
        >>> from jaxcal.clicks.sessions import encode_pairs
        >>> s = Sessions.from_arrays([0, 0], [[5, 3], [3, 0]], [[0, 0], [0, 0]],
        ...                          mask=[[1, 1], [1, 0]])
        >>> index, qd = encode_pairs(s)
        >>> index.doc.tolist(), qd.tolist()  # the padded position gets id P = 2
        ([3, 5], [[1, 0], [0, 2]])
    """
    q = np.broadcast_to(np.asarray(sessions.query)[:, None], sessions.doc.shape)
    m = np.asarray(sessions.mask)
    keys = _keys(q[m], np.asarray(sessions.doc)[m])
    uniq, inv = np.unique(keys, return_inverse=True)
    qd = np.full(m.shape, uniq.shape[0], np.int32)
    qd[m] = inv.reshape(-1)
    index = PairIndex(
        query=(uniq // np.int64(2**31)).astype(np.int32),
        doc=(uniq % np.int64(2**31)).astype(np.int32),
    )
    return index, qd


def lookup_pairs(index: PairIndex, sessions: Sessions) -> np.ndarray:
    """Ids of the pairs of ``sessions`` in a fitted ``index``; unseen / padded -> ``P``.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import PairIndex, Sessions
        >>> from jaxcal.clicks.sessions import lookup_pairs
        >>> index = PairIndex(np.array([0, 0], np.int32), np.array([3, 5], np.int32))
        >>> lookup_pairs(index, Sessions.from_arrays([0], [[5, 4]], [[0, 0]])).tolist()
        [[1, 2]]
    """
    keys_fit = _keys(np.asarray(index.query), np.asarray(index.doc))
    P = keys_fit.shape[0]
    q = np.broadcast_to(np.asarray(sessions.query)[:, None], sessions.doc.shape)
    keys = _keys(q, np.asarray(sessions.doc))
    pos = np.searchsorted(keys_fit, keys)
    pos_c = np.minimum(pos, max(P - 1, 0))
    found = (pos < P) & (keys_fit[pos_c] == keys) if P else np.zeros(keys.shape, bool)
    return np.where(found & np.asarray(sessions.mask), pos_c, P).astype(np.int32)
