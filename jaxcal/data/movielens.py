"""The MovieLens-100K rating data (GroupLens): reader and verified download.

MovieLens-100K holds 100,000 explicit ratings 1..5 by 943 users of 1,682 movies, each with
a timestamp (seconds since 1970), collected 1997-1998; every user rated at least 20 movies.
``u.data`` lists them one per line: ``user <tab> item <tab> rating <tab> timestamp`` with
1-based ids.

Source: GroupLens' archive https://files.grouplens.org/datasets/movielens/ml-100k.zip
(4,924,029 bytes, SHA-256 :data:`MOVIELENS_100K_SHA256`; described on
https://grouplens.org/datasets/movielens/100k/).
Licence (the archive's README): research use only; no redistribution and no commercial use
without GroupLens' permission; acknowledge the data set (the paper below); no implied
endorsement by the University of Minnesota. So jaxcal ships no copy:
:func:`fetch_movielens` downloads the archive from GroupLens on the user's machine and
checks it against the pinned digest (or :func:`load_movielens` reads a copy the user placed
in the data directory).

Reference: F. M. Harper, J. A. Konstan. The MovieLens Datasets: History and Context.
ACM Transactions on Interactive Intelligent Systems 5(4), 2015. Cite it when you use the data.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxcal.data._download import DataSource, data_folder, fetch_archive
from jaxcal.data._paths import default_data_dir
from jaxcal.data.triples import Interactions

__all__ = [
    "MovieLensData",
    "load_movielens",
    "fetch_movielens",
    "MOVIELENS_100K_URL",
    "MOVIELENS_100K_SHA256",
    "URL_ENV",
]

MOVIELENS_100K_URL = "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
"""GroupLens' archive of MovieLens-100K (https://grouplens.org/datasets/movielens/100k/)."""

MOVIELENS_100K_SHA256 = "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229"
"""SHA-256 of GroupLens' ``ml-100k.zip`` (4,924,029 bytes; its published MD5 is
``0e33842e24a9c977be4e0107933c0723``), the digest every download is checked against."""

URL_ENV = "JAXCAL_MOVIELENS_URL"
"""Environment variable that replaces :data:`MOVIELENS_100K_URL` for the download of
``load_movielens()`` (e.g. a mirror)."""

_N_LEVELS = 5
_SOURCE = DataSource(
    "movielens", "ml-100k", "u.data", MOVIELENS_100K_URL, URL_ENV, "MovieLens-100K"
)


class MovieLensData(NamedTuple):
    """MovieLens ratings as NumPy arrays.

    Attributes:
        ratings: :class:`~jaxcal.data.Interactions` with 0-based ids (the file's id minus
            one), int64 ratings 1..5, in the file's order; ``n_users`` / ``n_items`` are the
            largest ids in the file (943 and 1,682 for MovieLens-100K).
        timestamp: ``[n]`` int64 seconds since 1970, one per rating (for chronological
            splits: :func:`jaxcal.data.split_ratings`).

    Made by :func:`load_movielens`.

    Example:
        >>> import numpy as np
        >>> from jaxcal.data import Interactions, MovieLensData
        >>> ratings = Interactions.create([0, 1], [2, 0], [5, 3])
        >>> ml = MovieLensData(ratings, np.array([881250949, 874965758]))
        >>> ml.ratings.rating[np.argsort(ml.timestamp)]  # oldest first
        array([3, 5])
    """

    ratings: Interactions
    timestamp: np.ndarray


def _hint() -> str:
    return (
        "Point load_movielens(path=...) at the folder holding u.data, place it in "
        f"$JAXCAL_DATA_DIR/ml-100k (data directory: {default_data_dir()}), or download it "
        "with jaxcal.data.fetch_movielens()."
    )


def _parse(path: Path) -> np.ndarray:
    """The ``[n, 4]`` int64 table of ``u.data``; a malformed line raises ``ValueError``
    naming the file and the line."""
    rows = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, start=1):
            fields = line.split()
            try:
                if len(fields) != 4:
                    raise ValueError(f"expected 4 fields, got {len(fields)}")
                row = [int(f) for f in fields]
            except ValueError as exc:
                raise ValueError(
                    f"MovieLens file {path} is malformed at line {number} ({line.rstrip()!r}): "
                    f"{exc}; each line must be 'user item rating timestamp' (integers)."
                ) from None
            user, item, rating, stamp = row
            problem = (
                "ids must be >= 1"
                if user < 1 or item < 1
                else f"ratings must be 1..{_N_LEVELS}"
                if not 1 <= rating <= _N_LEVELS
                else "timestamps must be >= 0"
                if stamp < 0
                else None
            )
            if problem:
                raise ValueError(
                    f"MovieLens file {path} is malformed at line {number} "
                    f"({line.rstrip()!r}): {problem}."
                )
            rows.append(row)
    if not rows:
        raise ValueError(f"MovieLens file {path} holds no ratings.")
    return np.asarray(rows, dtype=np.int64)


def _read_ratings(path: Path) -> MovieLensData:
    table = _parse(path)
    user, item = table[:, 0] - 1, table[:, 1] - 1
    n_items = int(item.max()) + 1
    key = user * n_items + item
    order = np.argsort(key, kind="stable")
    dup = np.flatnonzero(key[order][1:] == key[order][:-1])
    if dup.size:
        first, second = sorted(order[dup[0] : dup[0] + 2] + 1)
        raise ValueError(
            f"MovieLens file {path} is malformed: lines {first} and {second} rate the same "
            f"(user, item) pair ({int(table[first - 1, 0])}, {int(table[first - 1, 1])})."
        )
    ratings = Interactions(user, item, table[:, 2].copy(), int(user.max()) + 1, n_items)
    return MovieLensData(ratings, table[:, 3].copy())


def load_movielens(
    path: str | os.PathLike | None = None, *, download: bool = True
) -> MovieLensData:
    """Load MovieLens-100K's ratings (``u.data``) from a folder.

    Without ``path``, the data directory's ``ml-100k`` folder is read if it holds
    ``u.data``; otherwise, with ``download=True``, the archive is fetched once from GroupLens
    into the user cache (:func:`fetch_movielens`: ``$JAXCAL_CACHE_DIR``, else
    ``~/.cache/jaxcal``; from ``$JAXCAL_MOVIELENS_URL`` if set, a mirror of the same file:
    it must match :data:`MOVIELENS_100K_SHA256`) and read from there; later
    calls read the cached copy without touching the network. An explicit ``path`` is
    never replaced by a download.

    Args:
        path: the folder holding ``u.data`` (or the file itself).
        download: without ``path``, fetch the data into the user cache when the data
            directory has none (``False``: raise instead).

    Returns:
        A :class:`MovieLensData`: ratings with 0-based ids and their timestamps.

    Raises:
        ValueError: the folder or ``u.data`` is missing, a line is malformed (not four
            integers, an id < 1, a rating outside 1..5, a negative timestamp; the message
            names the file and the line number), a (user, item) pair is rated twice, or the
            download failed. Nothing is dropped silently.

    Example (a two-line file in the format of ``u.data``):
        >>> import tempfile, pathlib
        >>> from jaxcal.data import load_movielens
        >>> folder = pathlib.Path(tempfile.mkdtemp())
        >>> lines = ["196\\t242\\t3\\t881250949", "1\\t2\\t5\\t874965758"]
        >>> _ = (folder / "u.data").write_text("\\n".join(lines) + "\\n")
        >>> ml = load_movielens(folder)
        >>> ml.ratings.user, ml.ratings.item, ml.ratings.rating, ml.timestamp
        (array([195,   0]), array([241,   1]), array([3, 5]), array([881250949, 874965758]))
        >>> ml.ratings.n_users, ml.ratings.n_items
        (196, 242)
    """
    root = data_folder(_SOURCE, path, fetch_movielens, download=download, hint=_hint())
    file = root if root.is_file() else root / "u.data"
    if not file.is_file():
        where = "does not exist" if not root.exists() else "has no u.data"
        raise ValueError(f"MovieLens folder {root} {where}. {_hint()}")
    return _read_ratings(file)


def fetch_movielens(
    cache_dir: str | os.PathLike | None = None,
    *,
    url: str = MOVIELENS_100K_URL,
    sha256: str = MOVIELENS_100K_SHA256,
    timeout: float = 60.0,
    quiet: bool = False,
) -> Path:
    """Download MovieLens-100K from GroupLens once, verify its SHA-256, unpack and cache it.

    The file is GroupLens' https://files.grouplens.org/datasets/movielens/ml-100k.zip
    (research use only; no redistribution and no commercial use without GroupLens'
    permission; acknowledge the data set; module docstring). It is stored as
    ``cache_dir/ml-100k.zip`` and unpacked into ``cache_dir/ml-100k_unpacked``; a later
    call with a valid cache returns at once without touching the network.

    Checksum policy: the archive must match ``sha256``, by default the pinned digest of
    GroupLens' file (:data:`MOVIELENS_100K_SHA256`); there is no trust on first use. A
    download that does not match raises and caches nothing; a cached archive that does not
    match is discarded and downloaded again. A different archive (say, a modified copy
    behind ``url``) is used only if its own digest is passed as ``sha256``. Archive members
    with absolute paths or ``..`` are refused.

    Args:
        cache_dir: folder for the archive and its unpacked copy (created if needed);
            default ``$JAXCAL_CACHE_DIR``, else ``~/.cache/jaxcal``.
        url: where to download from (``http(s)://`` or ``file://``); default GroupLens'
            ``ml-100k.zip``.
        sha256: expected hex SHA-256 of the archive; default GroupLens' (pinned).
        timeout: socket timeout in seconds.
        quiet: suppress progress lines.

    Returns:
        The folder holding ``u.data``, ready for :func:`load_movielens`.

    Raises:
        ValueError: ``sha256`` is not 64 hex digits (``None`` included), a checksum
            mismatch (with both digests), a download error, an archive that is not zip /
            tar, has unsafe members or no valid ``u.data``.

    Example (``fetch_movielens()`` downloads GroupLens' archive; here a stand-in archive
    comes from a local ``file://`` URL, accepted with its own digest and refused without):
        >>> import hashlib, pathlib, tempfile, zipfile
        >>> from jaxcal.data import fetch_movielens, load_movielens
        >>> www = pathlib.Path(tempfile.mkdtemp())
        >>> with zipfile.ZipFile(www / "ml-100k.zip", "w") as zf:
        ...     zf.writestr("ml-100k/u.data", "196\\t242\\t3\\t881250949\\n")
        >>> digest = hashlib.sha256((www / "ml-100k.zip").read_bytes()).hexdigest()
        >>> url = (www / "ml-100k.zip").as_uri()
        >>> path = fetch_movielens(www / "cache", url=url, sha256=digest, quiet=True)
        >>> load_movielens(path).ratings.rating
        array([3])
        >>> fetch_movielens(www / "other", url=url, quiet=True)
        Traceback (most recent call last):
        ...
        ValueError: checksum mismatch for file://...: expected SHA-256 50d2a982..., got ...
    """
    if sha256 is None:
        raise ValueError(
            "sha256 must be the archive's SHA-256 (64 hex digits); got None. The default "
            "is GroupLens' ml-100k.zip (MOVIELENS_100K_SHA256); pass another archive's own "
            "digest to use it."
        )
    return fetch_archive(
        _SOURCE,
        cache_dir,
        url,
        validate=load_movielens,
        sha256=sha256,
        timeout=timeout,
        quiet=quiet,
    )
