"""(user, item, rating) triples: a small container, dense <-> triples conversion, a reader."""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np
from jax.typing import ArrayLike

__all__ = ["Interactions", "as_matrix", "load_triples"]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


class Interactions(NamedTuple):
    """Observed (user, item, rating) triples with 0-based ids: the one interaction type of
    jaxcal (data sets, preprocessing, propensities and the ranking models).

    Attributes:
        user: ``[n]`` integer user ids in ``[0, n_users)``.
        item: ``[n]`` integer item ids in ``[0, n_items)``.
        rating: ``[n]`` ratings: int64 from the readers and :meth:`create` (explicit 1..5,
            or 0/1 after binarisation); float64 interaction strengths in the positives the
            ranking models train on (``jaxcal.recsys``, which sums duplicate pairs and keeps
            int32 ids, sorted by ``(user, item)``).
        n_users: number of users (rows of the dense matrix).
        n_items: number of items (columns of the dense matrix).

    Each (user, item) pair occurs at most once (checked by :meth:`create`).

    Example:
        >>> import numpy as np
        >>> from jaxcal.data import Interactions
        >>> x = Interactions.from_dense(np.array([[0, 5], [3, 0]]))
        >>> x.user, x.item, x.rating
        (array([0, 1]), array([1, 0]), array([5, 3]))
        >>> x.to_dense()
        array([[0, 5],
               [3, 0]])
    """

    user: np.ndarray
    item: np.ndarray
    rating: np.ndarray
    n_users: int
    n_items: int

    @classmethod
    def create(
        cls,
        user: ArrayLike,
        item: ArrayLike,
        rating: ArrayLike | None = None,
        *,
        n_users: int | None = None,
        n_items: int | None = None,
    ) -> Interactions:
        """Validated constructor: integer ids in range, no duplicate pairs.

        Args:
            user, item: ``[n]`` integer ids (0-based).
            rating: ``[n]`` integer ratings; default all ones (implicit positives).
            n_users, n_items: matrix size; default ``max id + 1``.

        Raises:
            ValueError: non-integer or negative ids, ids out of range, length mismatch,
                non-integer ratings, or a (user, item) pair listed twice.

        Example:
            >>> from jaxcal.data import Interactions
            >>> x = Interactions.create([0, 2], [1, 0], n_items=3)
            >>> x.rating, x.n_users, x.n_items
            (array([1, 1]), 3, 3)
            >>> Interactions.create([0, 0], [1, 1])
            Traceback (most recent call last):
            ...
            ValueError: (user, item) pair (0, 1) occurs 2 times; each pair may be listed once.
        """
        u = _int_array(user, "user")
        i = _int_array(item, "item")
        r = np.ones_like(u) if rating is None else _int_array(rating, "rating", signed=True)
        if not (u.shape == i.shape == r.shape):
            raise ValueError(f"length mismatch: {u.size} users, {i.size} items, {r.size} ratings.")
        n_users = int(u.max(initial=-1)) + 1 if n_users is None else int(n_users)
        n_items = int(i.max(initial=-1)) + 1 if n_items is None else int(n_items)
        for ids, n, name in ((u, n_users, "user"), (i, n_items, "item")):
            if ids.size and ids.max() >= n:
                raise ValueError(f"{name} id {int(ids.max())} out of range for n_{name}s={n}.")
        if n_users * max(n_items, 1) < 2**63:  # one int64 key per pair (Python ints: exact)
            key = u * max(n_items, 1) + i
            uniq, counts = np.unique(key, return_counts=True)
            pairs = np.stack([uniq // max(n_items, 1), uniq % max(n_items, 1)], axis=1)
        else:  # a matrix too large for such a key: the pairs themselves
            pairs, counts = np.unique(np.stack([u, i], axis=1), axis=0, return_counts=True)
        if (counts > 1).any():
            k = int(np.argmax(counts > 1))
            raise ValueError(
                f"(user, item) pair ({int(pairs[k, 0])}, {int(pairs[k, 1])}) occurs "
                f"{int(counts.max())} times; each pair may be listed once."
            )
        return cls(u, i, r, n_users, n_items)

    @classmethod
    def from_dense(cls, matrix: ArrayLike, *, missing: int = 0) -> Interactions:
        """Triples of the entries of a ``[n_users, n_items]`` matrix that differ from ``missing``
        (row-major order: sorted by user, then item).

        Example:
            >>> import numpy as np
            >>> from jaxcal.data import Interactions
            >>> x = Interactions.from_dense(np.array([[-1, 2], [3, -1]]), missing=-1)
            >>> x.user, x.item, x.rating
            (array([0, 1]), array([1, 0]), array([2, 3]))
        """
        m = np.asarray(matrix)
        if m.ndim != 2:
            raise ValueError(f"matrix must be 2-D [n_users, n_items]; got shape {m.shape}.")
        if m.dtype.kind == "f":
            if not np.isfinite(m).all() or (m != np.round(m)).any():
                raise ValueError("matrix must hold integer ratings.")
        elif m.dtype.kind not in "biu":
            raise ValueError(f"matrix must be numeric; got dtype {m.dtype}.")
        u, i = np.nonzero(m != missing)
        return cls(u.astype(np.int64), i.astype(np.int64), m[u, i].astype(np.int64), *m.shape)

    def to_dense(self, *, fill: int = 0) -> np.ndarray:
        """The ``[n_users, n_items]`` rating matrix, in the ratings' dtype (``fill`` where no
        triple).

        Example:
            >>> from jaxcal.data import Interactions
            >>> Interactions.create([0, 1], [1, 0], [4, 2]).to_dense(fill=-1)
            array([[-1,  4],
                   [ 2, -1]])
        """
        out = np.full((self.n_users, self.n_items), fill, dtype=self.rating.dtype)
        out[self.user, self.item] = self.rating
        return out

    @property
    def degrees(self) -> tuple[np.ndarray, np.ndarray]:
        """Number of triples per user ``[n_users]`` and per item ``[n_items]``.

        Example:
            >>> from jaxcal.data import Interactions
            >>> Interactions.create([0, 0, 1], [0, 1, 1], n_items=3).degrees
            (array([2, 1]), array([1, 2, 0]))
        """
        return (
            np.bincount(self.user, minlength=self.n_users),
            np.bincount(self.item, minlength=self.n_items),
        )

    @property
    def size(self) -> int:
        """Number of triples.

        Example:
            >>> from jaxcal.data import Interactions
            >>> Interactions.create([0, 0, 1], [0, 1, 1]).size
            3
        """
        return int(self.user.shape[0])

    def select(self, mask: ArrayLike) -> Interactions:
        """The triples where the boolean ``mask`` (length ``size``) is true.

        Example:
            >>> from jaxcal.data import Interactions
            >>> x = Interactions.create([0, 0, 1], [0, 1, 1], [5, 2, 4])
            >>> x.select(x.rating >= 4).item
            array([0, 1])
        """
        m = np.asarray(mask, dtype=bool)
        return Interactions(self.user[m], self.item[m], self.rating[m], self.n_users, self.n_items)

    def concat(self, other: Interactions) -> Interactions:
        """These triples followed by ``other``'s (a matrix of the same size; the two are
        assumed to hold different pairs, as the parts of a split do).

        Raises:
            ValueError: ``other`` is not Interactions or its matrix has another size.

        Example:
            >>> from jaxcal.data import Interactions
            >>> x = Interactions.create([0, 0, 1], [0, 1, 1], [5, 2, 4])
            >>> high = x.rating >= 4
            >>> x.select(high).concat(x.select(~high)).rating
            array([5, 4, 2])
        """
        if not isinstance(other, Interactions):
            raise ValueError(f"other must be Interactions; got {type(other).__name__}.")
        if (other.n_users, other.n_items) != (self.n_users, self.n_items):
            raise ValueError(
                f"cannot concatenate a {other.n_users} x {other.n_items} matrix's triples to a "
                f"{self.n_users} x {self.n_items} one's."
            )
        cat = (
            np.concatenate([getattr(self, f), getattr(other, f)])
            for f in ("user", "item", "rating")
        )
        return Interactions(*cat, self.n_users, self.n_items)


def as_matrix(x: ArrayLike | Interactions, name: str) -> np.ndarray:
    """A user-item matrix given as :class:`Interactions` (made dense) or as a non-empty,
    numeric, finite ``[n_users, n_items]`` array.

    Raises:
        ValueError: naming ``name``, on any other input.

    Example:
        >>> from jaxcal.data import Interactions
        >>> from jaxcal.data.triples import as_matrix
        >>> as_matrix(Interactions.create([1], [0], [3]), "ratings")
        array([[0],
               [3]])
        >>> as_matrix([1.0, 2.0], "ratings")
        Traceback (most recent call last):
        ...
        ValueError: ratings must be a non-empty [n_users, n_items] matrix or Interactions.
    """
    if isinstance(x, Interactions):
        return x.to_dense()
    m = np.asarray(x)
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"{name} must be a non-empty [n_users, n_items] matrix or Interactions.")
    if m.dtype.kind not in "biuf":
        raise ValueError(f"{name} must be numeric; got dtype {m.dtype}.")
    if not np.isfinite(m).all():
        raise ValueError(f"{name} contains non-finite values.")
    return m


def _int_array(x: ArrayLike, name: str, *, signed: bool = False) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D; got shape {arr.shape}.")
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or (arr != np.round(arr)).any():
            raise ValueError(f"{name} must hold integers.")
    elif arr.dtype.kind not in "biu" and arr.size:
        raise ValueError(f"{name} must hold integers; got dtype {arr.dtype}.")
    arr = arr.astype(np.int64)
    if not signed and (arr < 0).any():
        raise ValueError(f"{name} ids must be >= 0; got {int(arr.min())}.")
    return arr


def load_triples(
    path: str | os.PathLike,
    *,
    sep: str | None = None,
    one_based: bool = False,
    n_users: int | None = None,
    n_items: int | None = None,
    comment: str = "#",
) -> Interactions:
    """Read a text file of ``user item rating`` lines (integers) into :class:`Interactions`.

    Blank lines and lines starting with ``comment`` are skipped. Extra columns (e.g. a
    timestamp) are ignored.

    Args:
        path: the file.
        sep: field separator; ``None`` splits on any whitespace (``"\\t"`` for TSV).
        one_based: ids in the file start at 1 (they are shifted to 0-based).
        n_users, n_items: matrix size; default ``max id + 1``. Ids beyond raise.
        comment: prefix of lines to skip.

    Returns:
        The triples, in file order.

    Raises:
        ValueError: missing file, a line that is not UTF-8 text, has fewer than 3 fields,
            non-integer fields or integers beyond int64 (each naming the file and the line),
            ids below the base, ids out of range, or duplicate pairs.

    Example:
        >>> import pathlib, tempfile
        >>> from jaxcal.data import load_triples
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "u.data"
        >>> _ = path.write_text("1 1 5\\n1 2 3\\n2 1 4\\n")
        >>> load_triples(path, one_based=True).to_dense()
        array([[5, 3],
               [4, 0]])
        >>> _ = path.write_bytes(b"1 1 5\\n\\xff\\xfe 2 3\\n")
        >>> load_triples(path)
        Traceback (most recent call last):
        ...
        ValueError: .../u.data, line 2: not UTF-8 text (byte 0xff at column 1); ...
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"triples file {p} does not exist.")
    rows: list[tuple[int, int, int]] = []
    with open(p, "rb") as fh:  # decoded line by line, so that an error names its line
        for lineno, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(
                    f"{p}, line {lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at "
                    f"column {exc.start + 1}); a triples file holds lines of 'user item "
                    "rating' integers."
                ) from None
            text = line.strip()
            if not text or (comment and text.startswith(comment)):
                continue
            fields = text.split(sep)
            if len(fields) < 3:
                raise ValueError(
                    f"{p}, line {lineno}: expected 'user item rating', got {text[:80]!r}."
                )
            try:
                u, i, r = (int(f) for f in fields[:3])
            except ValueError:
                raise ValueError(
                    f"{p}, line {lineno}: user, item and rating must be integers; "
                    f"got {text[:80]!r}."
                ) from None
            if not all(_INT64_MIN <= v <= _INT64_MAX for v in (u, i, r)):
                raise ValueError(
                    f"{p}, line {lineno}: user, item and rating must fit in int64 "
                    f"([-2**63, 2**63 - 1]); got {text[:80]!r}."
                )
            rows.append((u, i, r))
    if not rows:
        raise ValueError(f"triples file {p} holds no (user, item, rating) lines.")
    arr = np.array(rows, dtype=np.int64)
    base = 1 if one_based else 0
    for col, name in ((0, "user"), (1, "item")):
        if arr[:, col].min() < base:
            raise ValueError(
                f"{p}: {name} id {int(arr[:, col].min())} below {base} "
                f"({'1-based' if one_based else '0-based'} ids expected)."
            )
    try:
        return Interactions.create(
            arr[:, 0] - base, arr[:, 1] - base, arr[:, 2], n_users=n_users, n_items=n_items
        )
    except ValueError as exc:
        raise ValueError(f"{p}: {exc}") from None
