"""Yahoo! R3 loader on small files written in the Webscope format (tab-separated, 1-based)."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal.data import load_yahoo_r3
from jaxcal.data.yahoo import YAHOO_TEST_FILE, YAHOO_TRAIN_FILE


def _write(path, rows):
    path.write_text("".join(f"{u}\t{i}\t{r}\n" for u, i, r in rows))


@pytest.fixture
def yahoo_dir(tmp_path):
    rng = np.random.default_rng(3)
    n_users, n_items = 40, 25
    train = np.where(
        rng.random((n_users, n_items)) < 0.2, rng.integers(1, 6, (n_users, n_items)), 0
    )
    test = np.where(rng.random((n_users, n_items)) < 0.1, rng.integers(1, 6, (n_users, n_items)), 0)
    test[20:] = 0  # only some users have random ratings, as in R3
    d = tmp_path / "ydata" / "nested"
    d.mkdir(parents=True)
    for name, m in ((YAHOO_TRAIN_FILE, train), (YAHOO_TEST_FILE, test)):
        u, i = np.nonzero(m)
        _write(d / name, [(a + 1, b + 1, m[a, b]) for a, b in zip(u, i, strict=True)])
    return tmp_path / "ydata", train, test


def test_load_from_directory_and_files(yahoo_dir):
    root, train, test = yahoo_dir
    data = load_yahoo_r3(root, n_users=40, n_items=25)
    np.testing.assert_array_equal(data.train.to_dense(), train)
    np.testing.assert_array_equal(data.test.to_dense(), test)
    nested = root / "nested"
    data2 = load_yahoo_r3(
        (nested / YAHOO_TRAIN_FILE, nested / YAHOO_TEST_FILE), n_users=40, n_items=25
    )
    np.testing.assert_array_equal(data2.train.user, data.train.user)
    # default id space is the published one
    full = load_yahoo_r3(root)
    assert (full.train.n_users, full.train.n_items) == (15_400, 1_000)
    assert full.train.size == int((train > 0).sum())


@pytest.mark.parametrize(
    "line, match",
    [
        ("3\t4\n", "line 3: expected"),
        ("3\tx\t4\n", "line 3: .*integers"),
        ("0\t4\t4\n", "user id 0 below 1"),
        ("3\t4\t9\n", "ratings must be 1..5"),
        ("41\t4\t4\n", "user id 40 out of range"),
    ],
)
def test_malformed_lines(tmp_path, line, match):
    d = tmp_path / "y"
    d.mkdir()
    (d / YAHOO_TRAIN_FILE).write_text("1\t1\t5\n2\t3\t1\n" + line)
    _write(d / YAHOO_TEST_FILE, [(1, 2, 3)])
    with pytest.raises(ValueError, match=match):
        load_yahoo_r3(d, n_users=40, n_items=25)


def test_missing_files(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_yahoo_r3(tmp_path / "none")
    (tmp_path / YAHOO_TRAIN_FILE).write_text("1\t1\t5\n")
    with pytest.raises(ValueError, match="test.txt not found"):
        load_yahoo_r3(tmp_path)
    with pytest.raises(ValueError, match="pair"):
        load_yahoo_r3((tmp_path / YAHOO_TRAIN_FILE,))
