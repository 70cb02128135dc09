"""Verified downloads of public data sets: fetch once, check the SHA-256, unpack, cache.

The machinery behind :func:`jaxcal.data.fetch_coat` and :func:`jaxcal.data.fetch_movielens`
(standard library only: ``urllib``, ``hashlib``, ``zipfile`` / ``tarfile``).

Cache layout, for an archive named ``<name>`` (the last part of the URL) of a data set whose
folder is ``<tag>``: ``cache_dir/<name>`` (the archive), ``cache_dir/<name>.sha256`` (its
digest) and ``cache_dir/<tag>_unpacked/`` (the unpacked copy). The default cache folder is
``$JAXCAL_CACHE_DIR``, else ``~/.cache/jaxcal``.

Checksum policy: ``sha256=None`` means *trust on first use*: the digest of the first download
is recorded and printed, and every later call re-verifies the cached archive against that
record. A pinned ``sha256=`` (hex) is checked instead: a download that does not match raises
``ValueError`` and leaves nothing in the cache, and a cached archive that does not match is
discarded and downloaded again. Archive members with absolute paths or ``..`` (and tar
members that are not plain files or folders) are refused.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tempfile
import urllib.request
import zipfile
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import Any, NamedTuple

from jaxcal._progress import log
from jaxcal.data._paths import default_data_dir

__all__ = [
    "default_cache_dir",
    "fetch_archive",
    "find_data_dir",
    "data_folder",
    "DataSource",
    "CACHE_ENV",
]

CACHE_ENV = "JAXCAL_CACHE_DIR"


class DataSource(NamedTuple):
    """What the loader and the fetcher of one data set share.

    Attributes:
        name: the set's short name (``fetch_<name>`` is its fetcher, for messages).
        folder: its folder in the data directory; the cache unpacks it into
            ``<folder>_unpacked``.
        marker: a file name that marks the data folder (inside an archive too).
        url: the default download address.
        url_env: an environment variable that replaces ``url`` for the loader's download.
        title: the set's name in messages.
    """

    name: str
    folder: str
    marker: str
    url: str
    url_env: str
    title: str


def default_cache_dir() -> Path:
    """Where downloaded data sets are kept: ``$JAXCAL_CACHE_DIR``, else ``~/.cache/jaxcal``.

    Example:
        >>> import os
        >>> from unittest import mock
        >>> from jaxcal.data import default_cache_dir
        >>> with mock.patch.dict(os.environ, {"JAXCAL_CACHE_DIR": "downloads"}):
        ...     print(default_cache_dir().as_posix())
        downloads
    """
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path("~/.cache/jaxcal").expanduser()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_digest(sha256: str | None) -> str | None:
    if sha256 is None:
        return None
    sha256 = sha256.strip().lower()
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"sha256 must be 64 hex digits; got {sha256!r}.")
    return sha256


def _safe_member(name: str) -> bool:
    p = PurePosixPath(name.replace("\\", "/"))
    return not p.is_absolute() and ".." not in p.parts


def _unpack(archive: Path, dest: Path) -> None:
    """Unpack a zip or tar archive into ``dest``, refusing paths that escape it."""
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            bad = [n for n in zf.namelist() if not _safe_member(n)]
            if bad:
                raise ValueError(f"archive {archive} has unsafe member paths, e.g. {bad[0]!r}.")
            zf.extractall(dest)
    elif tarfile.is_tarfile(archive):
        with tarfile.open(archive) as tf:
            members = tf.getmembers()
            bad = [
                m.name for m in members if not _safe_member(m.name) or not (m.isfile() or m.isdir())
            ]
            if bad:
                raise ValueError(f"archive {archive} has unsafe members, e.g. {bad[0]!r}.")
            if hasattr(tarfile, "data_filter"):  # Python >= 3.11.4 / 3.10.12
                tf.extractall(dest, members=members, filter="data")
            else:  # pragma: no cover - members were checked above
                tf.extractall(dest, members=members)
    else:
        raise ValueError(f"{archive} is neither a zip nor a tar archive.")


def find_data_dir(root: Path, marker: str) -> Path:
    """The first folder (in path order) under ``root`` that holds the file ``marker``.

    Raises:
        ValueError: no such folder.
    """
    hits = sorted(p.parent for p in root.rglob(marker))
    if not hits:
        raise ValueError(f"the downloaded archive has no {marker} (unpacked in {root}).")
    return hits[0]


def _download(url: str, cache: Path, archive: Path, sha256: str | None, timeout: float) -> str:
    """Stream ``url`` into ``archive`` (through a temporary file in ``cache``); its digest."""
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(dir=cache, prefix=".download-")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    for block in iter(lambda: response.read(1 << 16), b""):
                        digest.update(block)
                        out.write(block)
            except OSError as exc:  # URLError, HTTPError, timeouts are OSErrors
                raise ValueError(f"could not download {url}: {exc}") from exc
        actual = digest.hexdigest()
        if sha256 is not None and actual != sha256:
            raise ValueError(
                f"checksum mismatch for {url}: expected SHA-256 {sha256}, got {actual}. "
                "The file was not cached."
            )
        os.replace(tmp, archive)
    finally:
        tmp.unlink(missing_ok=True)
    return actual


def fetch_archive(
    source: DataSource,
    cache_dir: str | os.PathLike | None,
    url: str,
    *,
    validate: Callable[[Path], Any],
    sha256: str | None = None,
    timeout: float = 60.0,
    quiet: bool = False,
) -> Path:
    """Download ``url`` once into ``cache_dir``, verify, unpack and validate it (module
    docstring: layout and checksum policy).

    Args:
        source: the data set (its folder names the unpacked copy, its marker file the data
            folder inside the archive).
        cache_dir: the cache folder (created if needed); ``None``: :func:`default_cache_dir`.
        url: the archive's address.
        validate: called on the data folder; raises ``ValueError`` if the data is unusable
            (a fresh download that fails it is removed from the cache).
        sha256: expected hex SHA-256 of the archive, or ``None`` (trust on first use).
        timeout: socket timeout in seconds.
        quiet: suppress progress lines.

    Returns:
        The data folder (the one holding ``source.marker``).

    Raises:
        ValueError: a malformed ``sha256``, a checksum mismatch (with both digests), a
            download error, an archive that is not zip / tar, has unsafe members or lacks
            the marker file, or data that ``validate`` rejects.
    """
    marker, caller = source.marker, f"fetch_{source.name}"
    sha256 = _check_digest(sha256)
    cache = (Path(cache_dir) if cache_dir is not None else default_cache_dir()).expanduser()
    cache.mkdir(parents=True, exist_ok=True)
    name = PurePosixPath(urllib.request.urlparse(url).path).name or f"{source.folder}.zip"
    archive = cache / name
    record = cache / f"{name}.sha256"
    unpacked = cache / f"{source.folder}_unpacked"

    if archive.is_file():
        expected = sha256 or (record.read_text().strip() if record.is_file() else None)
        actual = _sha256(archive)
        if expected is None or actual == expected:
            if not unpacked.is_dir() or not any(unpacked.rglob(marker)):
                shutil.rmtree(unpacked, ignore_errors=True)
                _unpack(archive, unpacked)
            if expected is None:
                record.write_text(actual + "\n")
            data_dir = find_data_dir(unpacked, marker)
            validate(data_dir)  # the cached copy
            return data_dir
        log(
            f"{caller}: cached {archive} has SHA-256 {actual}, expected {expected}; "
            "downloading again.",
            quiet=quiet,
        )
        archive.unlink()
        shutil.rmtree(unpacked, ignore_errors=True)

    log(f"{caller}: downloading {url}", quiet=quiet)
    actual = _download(url, cache, archive, sha256, timeout)
    record.write_text(actual + "\n")
    log(f"{caller}: SHA-256 {actual} ({'verified' if sha256 else 'recorded'})", quiet=quiet)
    shutil.rmtree(unpacked, ignore_errors=True)
    try:
        _unpack(archive, unpacked)
        data_dir = find_data_dir(unpacked, marker)
        validate(data_dir)
    except ValueError:
        shutil.rmtree(unpacked, ignore_errors=True)
        archive.unlink(missing_ok=True)
        record.unlink(missing_ok=True)
        raise
    return data_dir


def data_folder(
    source: DataSource,
    path: str | os.PathLike | None,
    fetch: Callable[..., Path],
    *,
    download: bool,
    hint: str,
) -> Path:
    """The folder a loader reads: ``path`` if given; else the data directory's
    ``source.folder`` if it holds the marker file (or if ``download`` is false: the loader
    then reports what is missing); else the cached download, ``fetch(url=...)`` from
    ``$<source.url_env>`` or ``source.url`` (it touches the network only when the cache is
    empty or stale).

    Raises:
        ValueError: the download failed; the message names the data folder and ``hint``.
    """
    if path is not None:
        return Path(path)
    local = default_data_dir() / source.folder
    if (local / source.marker).is_file() or not download:
        return local
    try:
        return fetch(url=os.environ.get(source.url_env) or source.url)
    except ValueError as exc:
        raise ValueError(
            f"{source.title} is not in {local} and could not be downloaded into the cache "
            f"({default_cache_dir()}): {exc} {hint}"
        ) from exc
