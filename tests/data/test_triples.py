"""Interactions container and the triples reader: round trips and malformed input."""

from __future__ import annotations

import numpy as np
import pytest

from jaxcal.data import Interactions, load_triples


def _random_matrix(rng, shape=(7, 11), density=0.3):
    m = rng.integers(1, 6, size=shape)
    return np.where(rng.random(shape) < density, m, 0)


def test_dense_triples_round_trip():
    rng = np.random.default_rng(0)
    for _ in range(5):
        m = _random_matrix(rng)
        x = Interactions.from_dense(m)
        assert (x.n_users, x.n_items) == m.shape
        assert x.size == int((m != 0).sum())
        np.testing.assert_array_equal(x.to_dense(), m)
        # every triple is an entry of the matrix (independent check, by loop)
        for u, i, r in zip(x.user, x.item, x.rating, strict=True):
            assert m[u, i] == r != 0
        # and back again through the validated constructor, in shuffled order
        perm = rng.permutation(x.size)
        y = Interactions.create(x.user[perm], x.item[perm], x.rating[perm], n_users=7, n_items=11)
        np.testing.assert_array_equal(y.to_dense(), m)


def test_file_round_trip(tmp_path):
    rng = np.random.default_rng(1)
    m = _random_matrix(rng, (20, 9))
    u, i = np.nonzero(m)
    order = rng.permutation(u.size)
    path = tmp_path / "r.tsv"
    lines = ["# a comment", ""] + [f"{u[k] + 1}\t{i[k] + 1}\t{m[u[k], i[k]]}\t123" for k in order]
    path.write_text("\n".join(lines) + "\n")
    x = load_triples(path, sep="\t", one_based=True, n_users=20, n_items=9)
    np.testing.assert_array_equal(x.to_dense(), m)
    np.testing.assert_array_equal(x.user, u[order])  # file order is kept
    # whitespace-separated, 0-based
    path2 = tmp_path / "r.txt"
    path2.write_text("\n".join(f"{u[k]} {i[k]}  {m[u[k], i[k]]}" for k in order))
    np.testing.assert_array_equal(load_triples(path2, n_users=20, n_items=9).to_dense(), m)


@pytest.mark.parametrize(
    "text, match",
    [
        ("1 2 3\n4 5\n", "line 2: expected"),
        ("1 2 3\n1 x 3\n", "line 2: .*integers"),
        ("1 2 3\n1 2.5 3\n", "line 2: .*integers"),
        ("1 2 3\n1 2 4\n", r"pair \(1, 2\) occurs 2 times"),
        ("-1 2 3\n", "user id -1 below 0"),
        ("# only a comment\n", "no \\(user, item, rating\\) lines"),
    ],
)
def test_malformed_triples(tmp_path, text, match):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_triples(path)


def test_out_of_range_and_missing(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("0 5 1\n")
    with pytest.raises(ValueError, match="item id 5 out of range"):
        load_triples(path, n_items=5)
    with pytest.raises(ValueError, match="does not exist"):
        load_triples(tmp_path / "missing.txt")
    with pytest.raises(ValueError, match="length mismatch"):
        Interactions.create([0, 1], [0], [1, 1])
    with pytest.raises(ValueError, match="2-D"):
        Interactions.from_dense(np.ones(3))


def test_select_and_empty():
    x = Interactions.create([0, 1, 2], [2, 1, 0], [5, 4, 1])
    y = x.select(x.rating >= 4)
    assert y.size == 2 and y.n_users == 3 and y.n_items == 3
    np.testing.assert_array_equal(y.to_dense(), [[0, 0, 5], [0, 4, 0], [0, 0, 0]])
    empty = Interactions.from_dense(np.zeros((2, 3), int))
    assert empty.size == 0 and empty.to_dense().shape == (2, 3)


def test_concat_of_a_partition_rebuilds_the_matrix():
    rng = np.random.default_rng(0)
    dense = np.where(rng.random((6, 7)) < 0.6, rng.integers(1, 6, (6, 7)), 0)
    x = Interactions.from_dense(dense)
    keep = rng.random(x.size) < 0.5
    y = x.select(keep).concat(x.select(~keep))
    assert y.size == x.size and (y.n_users, y.n_items) == (6, 7)
    np.testing.assert_array_equal(y.to_dense(), dense)
    np.testing.assert_array_equal(y.rating[: keep.sum()], x.rating[keep])  # order: self first
    with pytest.raises(ValueError, match="cannot concatenate a 6 x 8"):
        x.concat(Interactions.from_dense(np.ones((6, 8), int)))
    with pytest.raises(ValueError, match="must be Interactions"):
        x.concat(dense)


@pytest.mark.parametrize(
    "content, match",
    [
        (b"1 2 3\n" + str(2**70).encode() + b" 2 3\n", "line 2: .*fit in int64"),
        (b"1 2 3\n1 " + str(-(2**64)).encode() + b" 3\n", "line 2: .*fit in int64"),
        (b"1 2 3\n\x80\x81\x82 4 5\n", "line 2: not UTF-8 text \\(byte 0x80 at column 1\\)"),
        (b"\x00\x01\x02\x03\n", "line 1: expected"),
        (b"1 2 3\n4 5 6\n\n7 8 \xc3\n", "line 4: not UTF-8 text \\(byte 0xc3 at column 5\\)"),
    ],
)
def test_unreadable_lines_name_the_file_and_the_line(tmp_path, content, match):
    path = tmp_path / "bad.bin"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match) as info:
        load_triples(path)
    assert str(path) in str(info.value)


def test_random_bytes_give_triples_or_one_value_error(tmp_path):
    """Fuzz: any bytes are read as triples or refused with a ValueError naming the file,
    never another exception (a decoding or overflow error from inside NumPy or Python)."""
    rng = np.random.default_rng(0)
    path = tmp_path / "fuzz.bin"
    alphabet = np.frombuffer(b"0123456789 \t\n-#", np.uint8)
    for k in range(300):
        n = int(rng.integers(0, 60))
        if k % 2:  # arbitrary bytes
            content = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        else:  # digits, separators and the odd stray byte: some files parse
            content = rng.choice(alphabet, n).tobytes()
            if k % 4 == 0 and n:
                content += bytes([int(rng.integers(128, 256))])
        path.write_bytes(content)
        try:
            x = load_triples(path)
        except ValueError as exc:
            assert str(path) in str(exc)
        else:
            assert x.size > 0 and x.n_users > int(x.user.max())


def test_ids_beyond_a_pair_key_still_find_duplicates(tmp_path):
    """Ids whose matrix has more than 2**63 cells (no int64 key per pair): duplicate pairs are
    still found, and distinct ones kept (oracle: a Python set of the pairs)."""
    big = 2**62
    pairs = [(big, 1), (1, big), (big, 1)]
    path = tmp_path / "big.txt"
    path.write_text("".join(f"{u} {i} 1\n" for u, i in pairs))
    with pytest.raises(ValueError, match=rf"pair \({big}, 1\) occurs 2 times"):
        load_triples(path)
    path.write_text("".join(f"{u} {i} 1\n" for u, i in pairs[:2]))
    x = load_triples(path)
    assert set(zip(x.user.tolist(), x.item.tolist(), strict=True)) == set(pairs[:2])
    assert (x.n_users, x.n_items) == (big + 1, big + 1)
