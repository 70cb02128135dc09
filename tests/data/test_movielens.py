"""MovieLens-100K reader and verified download, on files the tests write (the real data is
not redistributable): the reader against the standard library's csv module, every malformed
line named, the download against a local HTTP server (tests/data/conftest.py)."""

from __future__ import annotations

import csv
import functools
import hashlib
import inspect
import io
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from jaxcal.data import MovieLensData, fetch_movielens, load_movielens
from jaxcal.data import movielens as movielens_module


def _u_data(n: int = 60, seed: int = 0) -> str:
    """A u.data-format table: distinct (user, item) pairs, 1-based ids, ratings 1..5."""
    rng = np.random.default_rng(seed)
    pairs = rng.choice(12 * 30, size=n, replace=False)
    rows = [
        (p // 30 + 1, p % 30 + 1, int(rng.integers(1, 6)), int(rng.integers(8e8, 9e8)))
        for p in pairs
    ]
    return "".join("\t".join(map(str, r)) + "\n" for r in rows)


def _oracle(text: str):
    rows = np.array(list(csv.reader(io.StringIO(text), delimiter="\t")), dtype=np.int64)
    return rows[:, 0] - 1, rows[:, 1] - 1, rows[:, 2], rows[:, 3]


@pytest.fixture
def ml_dir(tmp_path) -> Path:
    d = tmp_path / "ml-100k"
    d.mkdir()
    (d / "u.data").write_text(_u_data())
    (d / "README").write_text("a tiny stand-in for MovieLens-100K\n")
    return d


def test_load_movielens_reads_u_data(ml_dir):
    ml = load_movielens(ml_dir)
    assert isinstance(ml, MovieLensData)
    user, item, rating, stamp = _oracle((ml_dir / "u.data").read_text())
    np.testing.assert_array_equal(ml.ratings.user, user)
    np.testing.assert_array_equal(ml.ratings.item, item)
    np.testing.assert_array_equal(ml.ratings.rating, rating)
    np.testing.assert_array_equal(ml.timestamp, stamp)
    assert ml.timestamp.dtype == np.int64 and ml.ratings.rating.dtype == np.int64
    assert ml.ratings.n_users == user.max() + 1 and ml.ratings.n_items == item.max() + 1
    # the file itself may be given, and the default folder is $JAXCAL_DATA_DIR/ml-100k
    np.testing.assert_array_equal(load_movielens(ml_dir / "u.data").timestamp, stamp)


def test_default_folder_is_the_data_dirs(ml_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("JAXCAL_DATA_DIR", str(ml_dir.parent))
    monkeypatch.setenv("JAXCAL_MOVIELENS_URL", "http://127.0.0.1:9/unused.zip")
    monkeypatch.setenv("JAXCAL_CACHE_DIR", str(tmp_path / "cache"))
    np.testing.assert_array_equal(
        load_movielens().ratings.user, load_movielens(ml_dir).ratings.user
    )
    assert not (tmp_path / "cache").exists()  # nothing fetched


@pytest.mark.parametrize(
    "bad_line, msg",
    [
        ("5\t6\t3", "expected 4 fields, got 3"),
        ("5\t6\t3\t881250949\t1", "expected 4 fields, got 5"),
        ("5\tsix\t3\t881250949", "invalid literal"),
        ("5\t6\t3.5\t881250949", "invalid literal"),
        ("5\t6\t6\t881250949", r"ratings must be 1\.\.5"),
        ("5\t6\t0\t881250949", r"ratings must be 1\.\.5"),
        ("0\t6\t3\t881250949", "ids must be >= 1"),
        ("5\t6\t3\t-1", "timestamps must be >= 0"),
        ("", "expected 4 fields, got 0"),
    ],
)
def test_malformed_line_is_named(tmp_path, bad_line, msg):
    lines = _u_data(5).splitlines()
    lines.insert(2, bad_line)
    (tmp_path / "u.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"u\.data is malformed at line 3 .*{msg}"):
        load_movielens(tmp_path)


def test_duplicate_pair_names_both_lines(tmp_path):
    lines = _u_data(5).splitlines()
    user, item = lines[1].split("\t")[:2]
    lines.append(f"{user}\t{item}\t1\t881250949")
    (tmp_path / "u.data").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"lines 2 and 6 rate the same .*\({user}, {item}\)"):
        load_movielens(tmp_path)


def test_missing_and_empty(tmp_path):
    with pytest.raises(ValueError, match="does not exist.*fetch_movielens"):
        load_movielens(tmp_path / "nowhere")
    with pytest.raises(ValueError, match="has no u.data"):
        load_movielens(tmp_path)
    (tmp_path / "u.data").write_text("")
    with pytest.raises(ValueError, match="holds no ratings"):
        load_movielens(tmp_path)


# --------------------------------------------------------------------- download


@pytest.fixture
def server(tmp_path, http_root, ml_dir):
    """ml-100k.zip (ml-100k/u.data, ml-100k/README) served from a local HTTP server."""
    www = tmp_path / "www"
    www.mkdir()
    with zipfile.ZipFile(www / "ml-100k.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(ml_dir.iterdir()):
            zf.write(p, f"ml-100k/{p.name}")
    base, hits = http_root(www)
    digest = hashlib.sha256((www / "ml-100k.zip").read_bytes()).hexdigest()
    return f"{base}/ml-100k.zip", digest, hits, www


def test_fetch_downloads_verifies_and_caches(server, ml_dir, tmp_path):
    url, digest, hits, _ = server
    cache = tmp_path / "cache"
    path = fetch_movielens(cache, url=url, sha256=digest.upper(), timeout=5, quiet=True)
    assert hits == ["/ml-100k.zip"] and path == cache / "ml-100k_unpacked" / "ml-100k"
    np.testing.assert_array_equal(load_movielens(path).timestamp, load_movielens(ml_dir).timestamp)
    assert fetch_movielens(cache, url=url, sha256=digest, timeout=5, quiet=True) == path
    assert hits == ["/ml-100k.zip"]  # the cache, no request


def test_the_pinned_digest_is_grouplens_and_unpinned_files_are_refused(server, tmp_path):
    """By default the archive must be GroupLens' ml-100k.zip (its published SHA-256); any
    other file is refused and nothing is cached: there is no trust on first use."""
    url, digest, hits, _ = server
    pinned = movielens_module.MOVIELENS_100K_SHA256
    assert pinned == "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229"
    assert inspect.signature(fetch_movielens).parameters["sha256"].default == pinned
    assert movielens_module.MOVIELENS_100K_URL == (
        "https://files.grouplens.org/datasets/movielens/ml-100k.zip"
    )
    cache = tmp_path / "cache"
    mismatch = f"checksum mismatch.*expected SHA-256 {pinned}, got {digest}"
    with pytest.raises(ValueError, match=mismatch):
        fetch_movielens(cache, url=url, timeout=5, quiet=True)
    assert list(cache.iterdir()) == [] and hits == ["/ml-100k.zip"]
    with pytest.raises(ValueError, match="sha256 must be .*got None"):
        fetch_movielens(cache, url=url, sha256=None, quiet=True)
    assert hits == ["/ml-100k.zip"]  # refused before any request


def test_fetch_stale_cache_is_downloaded_again(server, tmp_path, monkeypatch):
    url, digest, hits, _ = server
    monkeypatch.setenv("JAXCAL_CACHE_DIR", str(tmp_path / "cache"))
    path = fetch_movielens(url=url, sha256=digest, timeout=5, quiet=True)  # the variable's
    record = tmp_path / "cache" / "ml-100k.zip.sha256"
    assert record.read_text().strip() == digest
    assert fetch_movielens(url=url, sha256=digest, quiet=True) == path and len(hits) == 1
    (tmp_path / "cache" / "ml-100k.zip").write_bytes(b"not the archive")
    assert fetch_movielens(url=url, sha256=digest, quiet=True) == path and len(hits) == 2
    assert record.read_text().strip() == digest
    # a cached archive that is not the pinned one is not used either
    with pytest.raises(ValueError, match="checksum mismatch"):
        fetch_movielens(url=url, quiet=True)
    assert len(hits) == 3 and not (tmp_path / "cache" / "ml-100k.zip").exists()


def test_fetch_checksum_mismatch_caches_nothing(server, tmp_path):
    url, digest, hits, _ = server
    cache = tmp_path / "cache"
    wrong = ("1" if digest[0] == "0" else "0") + digest[1:]
    with pytest.raises(ValueError, match=f"checksum mismatch.*expected SHA-256 {wrong}"):
        fetch_movielens(cache, url=url, sha256=wrong, timeout=5, quiet=True)
    assert sorted(p.name for p in cache.iterdir()) == []
    with pytest.raises(ValueError, match="64 hex digits"):
        fetch_movielens(cache, url=url, sha256="00ff", quiet=True)
    assert hits == ["/ml-100k.zip"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fetch_refuses_bad_archives(server, tmp_path):
    url, _, _, www = server
    # an archive whose u.data is malformed: the reader's error, and nothing is kept
    with zipfile.ZipFile(www / "bad.zip", "w") as zf:
        zf.writestr("ml-100k/u.data", "1\t2\t9\t881250949\n")
    with pytest.raises(ValueError, match=r"line 1 .*ratings must be 1\.\.5"):
        fetch_movielens(
            tmp_path / "c1", url=url.replace("ml-100k.zip", "bad.zip"),
            sha256=_digest(www / "bad.zip"), quiet=True,
        )  # fmt: skip
    assert list((tmp_path / "c1").iterdir()) == []
    # no u.data at all
    with zipfile.ZipFile(www / "empty.zip", "w") as zf:
        zf.writestr("ml-100k/README", "nothing")
    with pytest.raises(ValueError, match="has no u.data"):
        fetch_movielens(
            tmp_path / "c2", url=url.replace("ml-100k.zip", "empty.zip"),
            sha256=_digest(www / "empty.zip"), quiet=True,
        )  # fmt: skip
    # a tar archive with a link member is refused before anything is unpacked
    with tarfile.open(www / "link.tar", "w") as tf:
        info = tarfile.TarInfo("ml-100k/u.data")
        info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tf.addfile(info)
    with pytest.raises(ValueError, match="unsafe members"):
        fetch_movielens(
            tmp_path / "c3", url=url.replace("ml-100k.zip", "link.tar"),
            sha256=_digest(www / "link.tar"), quiet=True,
        )  # fmt: skip
    assert not (tmp_path / "c3" / "ml-100k_unpacked").exists()


def test_load_movielens_fetches_on_a_fresh_machine(server, ml_dir, tmp_path, monkeypatch):
    url, digest, hits, _ = server
    monkeypatch.setenv("JAXCAL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("JAXCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAXCAL_MOVIELENS_URL", url)
    with pytest.raises(ValueError, match="does not exist"):
        load_movielens(download=False)
    assert hits == []
    # the stand-in archive is not GroupLens': refused under the pinned digest ...
    with pytest.raises(ValueError, match=r"could not be downloaded.*checksum mismatch"):
        load_movielens()
    assert hits == ["/ml-100k.zip"]
    hits.clear()
    # ... and read once the fetcher checks the stand-in's own digest
    pinned_to_stand_in = functools.partial(fetch_movielens, sha256=digest)
    monkeypatch.setattr(movielens_module, "fetch_movielens", pinned_to_stand_in)
    ml = load_movielens()
    assert hits == ["/ml-100k.zip"]
    np.testing.assert_array_equal(ml.ratings.rating, load_movielens(ml_dir).ratings.rating)
    np.testing.assert_array_equal(load_movielens().timestamp, ml.timestamp)
    assert hits == ["/ml-100k.zip"]  # read from the cache
    monkeypatch.setenv("JAXCAL_CACHE_DIR", str(tmp_path / "other-cache"))
    monkeypatch.setenv("JAXCAL_MOVIELENS_URL", url.replace("ml-100k.zip", "gone.zip"))
    with pytest.raises(ValueError, match=r"(?s)MovieLens-100K is not in .*could not download"):
        load_movielens()
