"""Coat loader and verified download, against the published files read by NumPy directly."""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest

from jaxcal.data import CoatData, fetch_coat, load_coat

FILES = ("train.ascii", "test.ascii", "propensities.ascii")


@pytest.fixture(scope="module")
def coat_dir(data_dir) -> Path:
    d = data_dir / "coat"
    if not (d / "train.ascii").is_file():
        pytest.skip("Coat not in the shared data")
    return d


def _oracle(coat_dir: Path) -> dict[str, np.ndarray]:
    """The published matrices, parsed independently (plain split + float)."""

    def parse(path):
        rows = [[float(v) for v in line.split()] for line in path.read_text().splitlines()]
        return np.array([r for r in rows if r])

    out = {f: parse(coat_dir / f) for f in FILES}
    feat = coat_dir / "user_item_features"
    out["user"] = parse(feat / "user_features.ascii")
    out["item"] = parse(feat / "item_features.ascii")
    return out


def test_load_coat_matches_published_files(coat_dir):
    coat = load_coat(coat_dir)
    assert isinstance(coat, CoatData)
    ref = _oracle(coat_dir)
    assert coat.train.shape == coat.test.shape == coat.propensities.shape == (290, 300)
    assert coat.train.dtype == np.int64 and coat.propensities.dtype == np.float64
    np.testing.assert_array_equal(coat.train, ref["train.ascii"])
    np.testing.assert_array_equal(coat.test, ref["test.ascii"])
    np.testing.assert_array_equal(coat.propensities, ref["propensities.ascii"])
    np.testing.assert_array_equal(coat.user_features, ref["user"])
    np.testing.assert_array_equal(coat.item_features, ref["item"])
    assert coat.user_features.shape == (290, 14) and coat.item_features.shape == (300, 33)
    # the published design: 24 self-selected and 16 random ratings per user
    assert ((coat.train > 0).sum(1) == 24).all()
    assert ((coat.test > 0).sum(1) == 16).all()
    assert len(coat.user_feature_names) == 14 and len(coat.item_feature_names) == 33
    assert coat.user_feature_names[0] == "gender:men"
    assert coat.item_feature_names[2] == "jackettype:bomber"
    # one-hot blocks: every user has exactly one gender, age, location, interest
    assert (coat.user_features.sum(1) == 4).all()


def test_default_path_uses_env_var(coat_dir, monkeypatch):
    monkeypatch.setenv("JAXCAL_DATA_DIR", str(coat_dir.parent))
    coat = load_coat()
    np.testing.assert_array_equal(coat.train, load_coat(coat_dir).train)


def _copy(coat_dir: Path, dest: Path) -> Path:
    shutil.copytree(coat_dir, dest)
    for p in dest.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    dest.chmod(0o755)
    return dest


def test_missing_file_error_names_file_and_env(coat_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("JAXCAL_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(ValueError, match="JAXCAL_DATA_DIR"):
        load_coat(download=False)
    d = _copy(coat_dir, tmp_path / "coat")
    (d / "test.ascii").unlink()
    with pytest.raises(ValueError, match=r"test\.ascii.*missing.*JAXCAL_DATA_DIR"):
        load_coat(d)


@pytest.mark.parametrize(
    "fname, corrupt, msg",
    [
        ("train.ascii", lambda t: t.replace("0", "x", 1), "malformed"),
        ("train.ascii", lambda t: "\n".join(t.splitlines()[:-1]), r"shape \(290, 300\)"),
        ("train.ascii", lambda t: t.replace(" 2 ", " 7 ", 1), "integers 0..5"),
        ("test.ascii", lambda t: t.replace(" 0", "", 1), "malformed"),
        ("propensities.ascii", lambda t: t.replace("5.6", "-5.6", 1), r"\(0, 1\]"),
        ("user_item_features/user_features.ascii", lambda t: t.replace("1", "3", 1), "0/1"),
        ("user_item_features/item_features_map.txt", lambda t: t + "\nextra:one", "33 names"),
    ],
)
def test_malformed_files_raise(coat_dir, tmp_path, fname, corrupt, msg):
    d = _copy(coat_dir, tmp_path / "coat")
    path = d / fname
    path.write_text(corrupt(path.read_text()))
    with pytest.raises(ValueError, match=msg):
        load_coat(d)


# ----------------------------------------------------------------- fetch_coat over HTTP


@pytest.fixture
def server(coat_dir, tmp_path, http_root):
    """A local HTTP server (tests/data/conftest.py) serving coat.zip built from the shared
    copy."""
    root = tmp_path / "www"
    root.mkdir()
    with zipfile.ZipFile(root / "coat.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(coat_dir.rglob("*")):
            if p.is_file():
                zf.write(p, Path("coat") / p.relative_to(coat_dir))
    base, hits = http_root(root)
    digest = hashlib.sha256((root / "coat.zip").read_bytes()).hexdigest()
    return f"{base}/coat.zip", digest, hits


def test_fetch_coat_downloads_verifies_and_caches(server, coat_dir, tmp_path):
    url, digest, hits = server
    cache = tmp_path / "cache"
    path = fetch_coat(cache, url=url, sha256=digest, timeout=5, quiet=True)
    assert hits == ["/coat.zip"]
    np.testing.assert_array_equal(load_coat(path).train, load_coat(coat_dir).train)
    # second call: served from the cache, no request
    again = fetch_coat(cache, url=url, sha256=digest, timeout=5, quiet=True)
    assert again == path and hits == ["/coat.zip"]


def test_fetch_coat_trust_on_first_use(server, tmp_path):
    url, digest, hits = server
    cache = tmp_path / "cache"
    path = fetch_coat(cache, url=url, timeout=5, quiet=True)
    assert (cache / "coat.zip.sha256").read_text().strip() == digest
    assert fetch_coat(cache, url=url, timeout=5, quiet=True) == path
    assert len(hits) == 1
    # a corrupted cached archive no longer matches the recorded digest -> downloaded again
    (cache / "coat.zip").write_bytes(b"garbage")
    assert fetch_coat(cache, url=url, timeout=5, quiet=True) == path
    assert len(hits) == 2
    assert hashlib.sha256((cache / "coat.zip").read_bytes()).hexdigest() == digest


def test_fetch_coat_checksum_mismatch(server, tmp_path):
    url, digest, hits = server
    cache = tmp_path / "cache"
    wrong = ("0" if digest[0] != "0" else "1") + digest[1:]
    with pytest.raises(ValueError, match="checksum mismatch"):
        fetch_coat(cache, url=url, sha256=wrong, timeout=5, quiet=True)
    assert not (cache / "coat.zip").exists()
    assert not any(p.name.startswith(".download") for p in cache.iterdir())
    with pytest.raises(ValueError, match="64 hex"):
        fetch_coat(cache, url=url, sha256="abc", timeout=5, quiet=True)


def test_fetch_coat_bad_url_and_bad_archive(server, tmp_path):
    url, _, _ = server
    with pytest.raises(ValueError, match="could not download"):
        fetch_coat(tmp_path / "c1", url=url.replace("coat.zip", "nope.zip"), quiet=True)
    www = Path(tmp_path / "www")
    (www / "notzip.zip").write_bytes(b"plain bytes")
    with pytest.raises(ValueError, match="neither a zip nor a tar"):
        fetch_coat(tmp_path / "c2", url=url.replace("coat.zip", "notzip.zip"), quiet=True)
    with zipfile.ZipFile(www / "evil.zip", "w") as zf:
        zf.writestr("../escape.txt", "x")
    with pytest.raises(ValueError, match="unsafe"):
        fetch_coat(tmp_path / "c3", url=url.replace("coat.zip", "evil.zip"), quiet=True)
    assert not (tmp_path / "escape.txt").exists()


# ------------------------------------------------- load_coat() on a machine without Coat


def test_load_coat_fetches_into_the_cache_when_the_data_dir_has_none(
    server, coat_dir, tmp_path, monkeypatch
):
    url, digest, hits = server
    monkeypatch.setenv("JAXCAL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("JAXCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAXCAL_COAT_URL", url)
    coat = load_coat()
    assert hits == ["/coat.zip"]
    np.testing.assert_array_equal(coat.train, load_coat(coat_dir).train)
    assert (tmp_path / "cache" / "coat.zip.sha256").read_text().strip() == digest
    # the second call reads the cached copy: no request
    np.testing.assert_array_equal(load_coat().test, coat.test)
    assert hits == ["/coat.zip"]
    # an explicit path is never replaced by a download
    with pytest.raises(ValueError, match="does not exist"):
        load_coat(tmp_path / "empty" / "coat")
    assert hits == ["/coat.zip"]


def test_load_coat_failed_download_names_the_data_dir(server, tmp_path, monkeypatch):
    url, _, hits = server
    monkeypatch.setenv("JAXCAL_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("JAXCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("JAXCAL_COAT_URL", url.replace("coat.zip", "missing.zip"))
    with pytest.raises(ValueError, match=r"(?s)could not be downloaded.*JAXCAL_DATA_DIR"):
        load_coat()
    assert hits == ["/missing.zip"]
