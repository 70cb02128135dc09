"""Yahoo! R3 (Webscope "Yahoo! Music ratings for user selected and randomly selected songs").

The licence forbids redistribution, so the loader takes the path of a user's own copy.
The train file holds ratings of songs the users chose themselves (missing not at random);
the test file holds, for 5,400 of the users, ratings of 10 songs shown uniformly at random
(missing at random). Both are tab-separated ``user_id<TAB>item_id<TAB>rating`` lines with
1-based ids; 15,400 users, 1,000 songs, ratings 1..5.

Reference: B. Marlin, R. Zemel. Collaborative Prediction and Ranking with Non-Random Missing
Data. RecSys 2009.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple

import numpy as np

from jaxcal.data.triples import Interactions, load_triples

__all__ = ["YahooR3Data", "load_yahoo_r3", "YAHOO_TRAIN_FILE", "YAHOO_TEST_FILE"]

YAHOO_TRAIN_FILE = "ydata-ymusic-rating-study-v1_0-train.txt"
YAHOO_TEST_FILE = "ydata-ymusic-rating-study-v1_0-test.txt"
YAHOO_N_USERS = 15_400
YAHOO_N_ITEMS = 1_000


class YahooR3Data(NamedTuple):
    """Yahoo! R3 as 0-based triples.

    Attributes:
        train: self-selected ratings (MNAR), :class:`~jaxcal.data.Interactions`.
        test: ratings of uniformly random songs (MAR), same id space.

    Made by :func:`load_yahoo_r3`.

    Example:
        >>> from jaxcal.data import Interactions, YahooR3Data
        >>> train = Interactions.create([0, 1], [0, 2], [5, 1], n_users=2, n_items=3)
        >>> test = Interactions.create([0], [1], [4], n_users=2, n_items=3)
        >>> YahooR3Data(train, test).test.to_dense()
        array([[0, 4, 0],
               [0, 0, 0]])
    """

    train: Interactions
    test: Interactions


def _find(directory: Path, name: str) -> Path:
    direct = directory / name
    if direct.is_file():
        return direct
    hits = sorted(directory.rglob(name))
    if not hits:
        raise ValueError(
            f"Yahoo! R3 file {name} not found under {directory}. Download the Webscope data "
            "set R3 and pass its directory (or the train and test file paths)."
        )
    return hits[0]


def load_yahoo_r3(
    path: str | os.PathLike | tuple[str | os.PathLike, str | os.PathLike],
    *,
    n_users: int = YAHOO_N_USERS,
    n_items: int = YAHOO_N_ITEMS,
) -> YahooR3Data:
    """Load Yahoo! R3 from a directory or from the two files.

    Args:
        path: a directory holding ``ydata-ymusic-rating-study-v1_0-train.txt`` and
            ``...-test.txt`` (searched recursively), or a ``(train_file, test_file)`` pair.
        n_users, n_items: id space (default 15,400 and 1,000, the published sizes).

    Returns:
        :class:`YahooR3Data` with 0-based ids.

    Raises:
        ValueError: missing files, malformed lines (with the line number), ids outside
            ``1..n``, ratings outside 1..5, or duplicate (user, item) pairs.

    Example (the Webscope files are licensed and not redistributed; two small files in
    their format here):
        >>> import pathlib, tempfile
        >>> from jaxcal.data import binarize, load_yahoo_r3
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "train.txt").write_text("1\\t1\\t5\\n1\\t3\\t2\\n2\\t3\\t4\\n")
        >>> _ = (d / "test.txt").write_text("1\\t2\\t4\\n")
        >>> data = load_yahoo_r3((d / "train.txt", d / "test.txt"))
        >>> data.train.user, data.train.item, data.train.n_users
        (array([0, 0, 1]), array([0, 2, 2]), 15400)
        >>> binarize(data.train).item  # rating >= 4
        array([0, 2])
    """
    if isinstance(path, tuple | list):
        if len(path) != 2:
            raise ValueError("pass a directory or a (train_file, test_file) pair.")
        train_file, test_file = (Path(p).expanduser() for p in path)
    else:
        directory = Path(path).expanduser()
        if not directory.is_dir():
            raise ValueError(f"Yahoo! R3 directory {directory} does not exist.")
        train_file = _find(directory, YAHOO_TRAIN_FILE)
        test_file = _find(directory, YAHOO_TEST_FILE)
    out = []
    for f in (train_file, test_file):
        x = load_triples(f, sep="\t", one_based=True, n_users=n_users, n_items=n_items)
        bad = (x.rating < 1) | (x.rating > 5)
        if bad.any():
            raise ValueError(
                f"{f}: ratings must be 1..5; got {int(x.rating[np.argmax(bad)])} "
                f"(triple {int(np.argmax(bad)) + 1})."
            )
        out.append(x)
    return YahooR3Data(*out)
