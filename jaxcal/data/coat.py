"""The Coat shopping data set (Schnabel et al., ICML 2016): loader and verified download.

Coat has 290 users and 300 items. ``train.ascii`` holds 24 *self-selected* ratings per user
(missing not at random), ``test.ascii`` 16 ratings per user on items shown *uniformly at
random* (missing at random: an unbiased test set), ``propensities.ascii`` the authors'
learned exposure probabilities, and ``user_item_features/`` one-hot user (14) and item (33)
features with ``*_features_map.txt`` naming each column.

Reference: T. Schnabel, A. Swaminathan, A. Singh, N. Chandak, T. Joachims. Recommendations as
Treatments: Debiasing Learning and Evaluation. ICML 2016. Research use; cite the paper.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxcal.data._download import DataSource, data_folder, fetch_archive

__all__ = ["CoatData", "load_coat", "fetch_coat", "COAT_URL", "COAT_SHAPE", "URL_ENV"]

COAT_URL = "https://www.cs.cornell.edu/~schnabts/mnar/coat.zip"
"""The authors' archive (linked from https://www.cs.cornell.edu/~schnabts/mnar/)."""

COAT_SHAPE = (290, 300)
_N_USER_FEATURES = 14
_N_ITEM_FEATURES = 33
_ENV = "JAXCAL_DATA_DIR"
URL_ENV = "JAXCAL_COAT_URL"
"""Environment variable that replaces :data:`COAT_URL` for the download of ``load_coat()``
(e.g. a mirror)."""
_SOURCE = DataSource("coat", "coat", "train.ascii", COAT_URL, URL_ENV, "Coat")


class CoatData(NamedTuple):
    """The Coat data set as NumPy arrays.

    Attributes:
        train: ``[290, 300]`` int64 ratings 0..5 (0 = unrated); self-selected (MNAR).
        test: ``[290, 300]`` int64 ratings 0..5 on uniformly random items (MAR).
        propensities: ``[290, 300]`` float64 exposure probabilities learned by the authors
            (absolute, not relative: they are P(O = 1) per user-item pair).
        user_features: ``[290, 14]`` int64 one-hot user features.
        item_features: ``[300, 33]`` int64 one-hot item features.
        user_feature_names: 14 column names, e.g. ``"gender:men"``.
        item_feature_names: 33 column names, e.g. ``"jackettype:bomber"``.

    Made by :func:`load_coat`.

    Example:
        >>> from jaxcal.data import CoatData
        >>> CoatData._fields[:3]
        ('train', 'test', 'propensities')
    """

    train: np.ndarray
    test: np.ndarray
    propensities: np.ndarray
    user_features: np.ndarray
    item_features: np.ndarray
    user_feature_names: list[str]
    item_feature_names: list[str]


def _hint(path: Path | None = None) -> str:
    return (
        f"Point load_coat(path=...) or ${_ENV} (currently "
        f"{os.environ.get(_ENV, 'unset')!r}) at the Coat data, or download it with "
        "jaxcal.data.fetch_coat(cache_dir)."
    )


def _read_matrix(path: Path, shape: tuple[int, int], what: str, root: Path) -> np.ndarray:
    """Read a whitespace-separated numeric matrix of the given shape (float64)."""
    if not path.is_file():
        raise ValueError(f"Coat file {path} is missing ({what}). {_hint(root)}")
    try:
        arr = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except ValueError as exc:
        raise ValueError(f"Coat file {path} is malformed ({what}): {exc}. {_hint(root)}") from exc
    if arr.shape != shape:
        raise ValueError(
            f"Coat file {path} is malformed ({what}): expected shape {shape}, got {arr.shape}."
        )
    if not np.isfinite(arr).all():
        raise ValueError(f"Coat file {path} is malformed ({what}): non-finite values.")
    return arr


def _read_ratings(path: Path, root: Path) -> np.ndarray:
    arr = _read_matrix(path, COAT_SHAPE, "ratings", root)
    bad = (arr != np.round(arr)) | (arr < 0) | (arr > 5)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(
            f"Coat file {path} is malformed (ratings): ratings must be integers 0..5; "
            f"got {arr[r, c]!r} at line {r + 1}, column {c + 1}."
        )
    return arr.astype(np.int64)


def _read_binary(path: Path, shape: tuple[int, int], root: Path) -> np.ndarray:
    arr = _read_matrix(path, shape, "one-hot features", root)
    if not np.isin(arr, (0.0, 1.0)).all():
        raise ValueError(f"Coat file {path} is malformed (one-hot features): values must be 0/1.")
    return arr.astype(np.int64)


def _read_names(path: Path, n: int, root: Path) -> list[str]:
    if not path.is_file():
        raise ValueError(f"Coat file {path} is missing (feature names). {_hint(root)}")
    names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    names = [name for name in names if name]
    if len(names) != n:
        raise ValueError(
            f"Coat file {path} is malformed (feature names): expected {n} names, got {len(names)}."
        )
    return names


def load_coat(path: str | os.PathLike | None = None, *, download: bool = True) -> CoatData:
    """Load the Coat data set from a directory.

    The directory holds ``train.ascii``, ``test.ascii``, ``propensities.ascii`` (each 290 x
    300, whitespace-separated) and ``user_item_features/{user,item}_features{.ascii,_map.txt}``,
    as in the authors' archive.

    Without ``path``, the data directory's ``coat`` folder is read if it holds Coat;
    otherwise (a fresh machine), with ``download=True``, Coat is fetched once into the user
    cache (:func:`fetch_coat`: ``$JAXCAL_CACHE_DIR``, else ``~/.cache/jaxcal``; from
    ``$JAXCAL_COAT_URL`` if set, else :data:`COAT_URL`) and read from there; later calls
    read the cached copy without touching the network. An explicit ``path`` is never
    replaced by a download.

    Args:
        path: the Coat directory; default ``default_data_dir() / "coat"`` (the data
            directory is ``$JAXCAL_DATA_DIR``; see :func:`jaxcal.data.default_data_dir`),
            then the user cache.
        download: without ``path``, fetch Coat into the user cache when the data directory
            has none (``False``: raise instead).

    Returns:
        A :class:`CoatData` of NumPy arrays.

    Raises:
        ValueError: a file is missing, has the wrong shape, holds non-numeric or non-finite
            values, ratings outside the integers 0..5, propensities outside (0, 1], or
            features that are not 0/1. The message names the file and ``$JAXCAL_DATA_DIR``.
            Also a failed download (no ``path``, no Coat in the data directory).

    Example (reads ``$JAXCAL_DATA_DIR/coat``):
        >>> import jaxcal
        >>> coat = jaxcal.data.load_coat()
        >>> coat.train.shape, int((coat.train > 0).sum(1)[0])
        ((290, 300), 24)
    """
    root = data_folder(_SOURCE, path, fetch_coat, download=download, hint=_hint())
    if not root.is_dir():
        raise ValueError(f"Coat directory {root} does not exist. {_hint(root)}")
    train = _read_ratings(root / "train.ascii", root)
    test = _read_ratings(root / "test.ascii", root)
    prop = _read_matrix(root / "propensities.ascii", COAT_SHAPE, "propensities", root)
    if (prop <= 0).any() or (prop > 1).any():
        raise ValueError(
            f"Coat file {root / 'propensities.ascii'} is malformed (propensities): values must "
            f"lie in (0, 1]; got min {prop.min():.6g}, max {prop.max():.6g}."
        )
    feat = root / "user_item_features"
    user_features = _read_binary(
        feat / "user_features.ascii", (COAT_SHAPE[0], _N_USER_FEATURES), root
    )
    item_features = _read_binary(
        feat / "item_features.ascii", (COAT_SHAPE[1], _N_ITEM_FEATURES), root
    )
    user_names = _read_names(feat / "user_features_map.txt", _N_USER_FEATURES, root)
    item_names = _read_names(feat / "item_features_map.txt", _N_ITEM_FEATURES, root)
    return CoatData(train, test, prop, user_features, item_features, user_names, item_names)


# --------------------------------------------------------------------------- download


def fetch_coat(
    cache_dir: str | os.PathLike | None = None,
    *,
    url: str = COAT_URL,
    sha256: str | None = None,
    timeout: float = 60.0,
    quiet: bool = False,
) -> Path:
    """Download the Coat archive once, verify its SHA-256, unpack it and cache it.

    The archive is stored as ``cache_dir/<name of the URL>`` and unpacked into
    ``cache_dir/coat_unpacked``; a later call with a valid cache returns at once without
    touching the network.

    Checksum policy: this library cannot know the digest of the authors' archive (it was
    written without network access to their page), so ``sha256=None`` means
    *trust on first use*: the digest of the first download is recorded in
    ``cache_dir/<name>.sha256`` and printed, and every later call re-verifies the cached
    archive against that record. Pass ``sha256=`` (hex) to pin a known digest: a download
    that does not match raises ``ValueError`` and leaves nothing in the cache, and a cached
    archive that does not match is discarded and downloaded again.

    Only the standard library is used (``urllib``, ``hashlib``, ``zipfile`` / ``tarfile``).
    Archive members with absolute paths or ``..`` are refused.

    Args:
        cache_dir: directory for the archive and its unpacked copy (created if needed);
            default ``$JAXCAL_CACHE_DIR``, else ``~/.cache/jaxcal``.
        url: where to download from; default the authors' ``coat.zip``
            (https://www.cs.cornell.edu/~schnabts/mnar/coat.zip).
        sha256: expected hex SHA-256 of the archive, or ``None`` (trust on first use).
        timeout: socket timeout in seconds.
        quiet: suppress progress lines.

    Returns:
        The directory holding ``train.ascii`` etc., ready for :func:`load_coat`.

    Raises:
        ValueError: checksum mismatch (with both digests), an archive that is not zip/tar
            or lacks the Coat files, or a download error.

    Example (``fetch_coat()`` downloads the authors' archive; here the archive is a zip of
    the data directory's Coat folder behind a local ``file://`` URL):
        >>> import pathlib, shutil, tempfile
        >>> from jaxcal.data import default_data_dir, fetch_coat, load_coat
        >>> www = pathlib.Path(tempfile.mkdtemp())
        >>> zipped = shutil.make_archive(str(www / "coat"), "zip", default_data_dir(), "coat")
        >>> url = pathlib.Path(zipped).as_uri()
        >>> path = fetch_coat(www / "cache", url=url, quiet=True)  # digest recorded
        >>> load_coat(path).train.shape
        (290, 300)
        >>> (www / "cache" / "coat.zip.sha256").is_file()
        True
    """
    return fetch_archive(
        _SOURCE, cache_dir, url, validate=load_coat, sha256=sha256, timeout=timeout, quiet=quiet
    )
