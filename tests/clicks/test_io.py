"""Readers: Yandex (files written here, expected arrays worked out by hand from the format),
TianGong-ST demo (against a plain-Python parse of the same file), npz, chunked streaming,
malformed input."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from jaxcal.clicks import (
    RunOptions,
    Sessions,
    iter_tiangong,
    iter_yandex,
    read_npz,
    read_tiangong,
    read_yandex,
)
from jaxcal.clicks.io import UnshownClickWarning

# Two search sessions. Session 7: SERP A (query 5, URLs 11 12 13), clicks on 12 twice and on
# 99 (not shown: left out and counted), then SERP B (query 6, URLs 13 14) and a click on 13,
# which belongs to the latest SERP showing it (B). Session 8: one SERP without clicks,
# 2 results.
YANDEX = """\
7\t0\tQ\t5\t1\t11\t12\t13
7\t3\tC\t12
7\t4\tC\t12
7\t5\tC\t99
7\t9\tQ\t6\t1\t13\t14
7\t12\tC\t13
8\t0\tQ\t5\t2\t12\t11
"""


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_read_yandex_by_hand(tmp_path):
    path = _write(tmp_path, "y.txt", YANDEX)
    with pytest.warns(UnshownClickWarning, match=r"y\.txt: 1 of 4 clicks .* lines \[4\]"):
        log = read_yandex(path)
    np.testing.assert_array_equal(log.query, [5, 6, 5])
    np.testing.assert_array_equal(log.mask, [[1, 1, 1], [1, 1, 0], [1, 1, 0]])
    np.testing.assert_array_equal(log.doc[log.mask], [11, 12, 13, 13, 14, 12, 11])
    # repeated click on 12 counted once; click on 13 goes to SERP B; 99 left out
    np.testing.assert_array_equal(log.clicks, [[0, 1, 0], [1, 0, 0], [0, 0, 0]])
    np.testing.assert_array_equal(log.weight, [1, 1, 1])
    again, report = read_yandex(path, on_unshown_click="count", return_report=True)
    np.testing.assert_array_equal(again.clicks, log.clicks)
    assert (report.lines, report.serps, report.search_sessions) == (7, 3, 2)
    assert (report.click_lines, report.clicks, report.repeated_clicks) == (4, 2, 1)
    assert (report.unshown_clicks, report.unshown_click_lines) == (1, [4])


def test_iter_yandex_chunks_keep_sessions_whole(tmp_path):
    path = _write(tmp_path, "y.txt", YANDEX)
    chunks = list(iter_yandex(path, chunk_sessions=1, on_unshown_click="count"))
    assert [c.n_sessions for c in chunks] == [2, 1]  # session 7's two SERPs stay together
    whole = read_yandex(path, on_unshown_click="count")
    joined = Sessions.concatenate(chunks)
    for f in ("query", "doc", "clicks", "mask"):
        np.testing.assert_array_equal(getattr(joined, f), getattr(whole, f))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("7\t0\tQ\n", "at least 4 fields"),
        ("7\t0\tX\t5\t1\t11\n", "Q or C"),
        ("7\t0\tQ\tabc\t1\t11\n", "QueryID"),
        ("7\t0\tQ\t5\n", "QueryID, RegionID and URLs"),
        ("7\t0\tQ\t5\t1\t11\n7\t1\tC\t11\t3\n", "4 fields"),
        ("7\t0\tC\t11\n", "bad.txt:1: a click before the first query line"),
        ("", "no query"),
    ],
)
def test_malformed_yandex_raises(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        read_yandex(_write(tmp_path, "bad.txt", text))


def test_missing_file_raises(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_yandex(tmp_path / "absent.txt")
    with pytest.raises(ValueError, match="no such file"):
        read_tiangong(tmp_path / "absent.txt")
    with pytest.raises(ValueError, match="chunk_sessions"):
        next(iter_tiangong(tmp_path / "absent.txt", chunk_sessions=0))


def _plain_parse(path):
    rows = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                f = line.rstrip("\n").split("\t")
                rows.append((int(f[1]), ast.literal_eval(f[2]), ast.literal_eval(f[4])))
    return rows


@pytest.mark.parametrize(
    "fname", ["train_per_query_quid.txt", "human_label_for_NCM_per_query_quid.txt"]
)
def test_read_tiangong_demo(data_dir, fname):
    path = data_dir / "tiangong-st-demo" / fname
    rows = _plain_parse(path)
    log = read_tiangong(path)
    assert log.n_sessions == len(rows)
    np.testing.assert_array_equal(log.query, [q for q, _, _ in rows])
    for s in (0, len(rows) // 2, len(rows) - 1):
        k = len(rows[s][1])
        np.testing.assert_array_equal(log.doc[s, :k], rows[s][1])
        np.testing.assert_array_equal(log.clicks[s, :k], rows[s][2])
    assert int(log.clicks.sum()) == sum(sum(c) for _, _, c in rows)
    if fname.startswith("train"):
        assert log.n_sessions == 2872  # data/README.md
        # streaming in chunks gives the same log
        joined = Sessions.concatenate(list(iter_tiangong(path, chunk_sessions=1000)))
        np.testing.assert_array_equal(joined.doc, log.doc)
        np.testing.assert_array_equal(joined.clicks, log.clicks)


def test_tiangong_short_serps_are_masked(tmp_path):
    text = (
        "1\t4\t[10, 11, 12]\t[1, 1, 1]\t[0, 1, 0]\n"
        "2\t5\t[13]\t[1]\t[1]\n"
        "3\t4\t[10, 11]\t[1, 1]\t[0, 0]\n"
    )
    log = read_tiangong(_write(tmp_path, "t.txt", text))
    np.testing.assert_array_equal(log.mask, [[1, 1, 1], [1, 0, 0], [1, 1, 0]])
    np.testing.assert_array_equal(log.clicks, [[0, 1, 0], [1, 0, 0], [0, 0, 0]])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1\t4\t[10, 11]\t[1, 1]\n", "5 or 6"),
        ("1\t4\t[10, 11]\t[1, 1]\t[0]\n", "2 documents but 1 clicks"),
        ("1\t4\t[10, 11]\t[1, 1]\t[0, 2]\n", "0/1"),
        ("1\t4\t[10, 11\t[1, 1]\t[0, 0]\n", "list"),
        ("1\t4\t[]\t[]\t[]\n", "empty SERP"),
        ("1\tq\t[10]\t[1]\t[0]\n", "query id"),
        ("1\t4\t[-3]\t[1]\t[0]\n", "non-negative"),
        ("\n", "no SERPs"),
    ],
)
def test_malformed_tiangong_raises(tmp_path, line, message):
    with pytest.raises(ValueError, match=message):
        read_tiangong(_write(tmp_path, "bad.txt", line))


def test_npz_round_trip_and_errors(tmp_path):
    log = Sessions.from_arrays(
        [3, 4], [[1, 2, 3], [4, 5, 0]], [[0, 1, 0], [1, 0, 0]], [[1, 1, 1], [1, 1, 0]], [2.0, 1.0]
    )
    log.to_npz(tmp_path / "log.npz")
    back = read_npz(tmp_path / "log.npz")
    for f in ("query", "doc", "clicks", "mask", "weight"):
        np.testing.assert_array_equal(getattr(back, f), getattr(log, f))
    np.savez(tmp_path / "bad.npz", query=np.zeros(2), doc=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="lacks arrays"):
        read_npz(tmp_path / "bad.npz")
    np.savez(tmp_path / "bad2.npz", query=[0], doc=[[1, 2]], clicks=[[3, 0]])
    with pytest.raises(ValueError, match="0/1"):
        read_npz(tmp_path / "bad2.npz")


# ---------------------------------------------------------------------------- Parquet
# Oracle: the same SERPs written out by hand as padded arrays and built with
# Sessions.from_arrays (independent of the Arrow conversion in read_parquet).
PARQUET_ROWS = [
    # query, SERP, clicks
    (5, [11, 12, 13, 14], [0, 1, 0, 1]),
    (5, [11, 12, 13, 14], [0, 0, 0, 0]),  # no click
    (6, [21], [1]),  # a one-result SERP
    (7, [31, 32], [0, 0]),  # short SERP without clicks
    (5, [12, 11, 13], [1, 0, 0]),
]
PARQUET_EXPECTED = Sessions.from_arrays(
    query=[5, 5, 6, 7, 5],
    doc=[[11, 12, 13, 14], [11, 12, 13, 14], [21, 0, 0, 0], [31, 32, 0, 0], [12, 11, 13, 0]],
    clicks=[[0, 1, 0, 1], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]],
    mask=[[1, 1, 1, 1], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0]],
    weight=[1.0, 3.0, 1.0, 2.0, 1.0],
)
FIELDS = ("query", "doc", "clicks", "mask", "weight")


def _parquet(tmp_path, columns, name="log.parquet", **kwargs):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / name
    table = columns if isinstance(columns, pa.Table) else pa.table(columns)
    pq.write_table(table, path, **kwargs)
    return path


def _assert_same(got, want):
    for f in FIELDS:
        np.testing.assert_array_equal(getattr(got, f), getattr(want, f), err_msg=f)


def _columns(rows=PARQUET_ROWS, weight=(1.0, 3.0, 1.0, 2.0, 1.0)):
    cols = {
        "query": [q for q, _, _ in rows],
        "doc": [d for _, d, _ in rows],
        "clicks": [c for _, _, c in rows],
    }
    if weight is not None:
        cols["weight"] = list(weight)
    return cols


def test_read_parquet_equals_arrays(tmp_path):
    from jaxcal.clicks import read_parquet

    _assert_same(read_parquet(_parquet(tmp_path, _columns())), PARQUET_EXPECTED)
    # without weights: all 1; boolean clicks and an extra column are accepted
    cols = _columns(weight=None)
    cols["clicks"] = [[bool(v) for v in c] for c in cols["clicks"]]
    cols["region"] = [1, 2, 3, 4, 5]
    log = read_parquet(_parquet(tmp_path, cols, "b.parquet"))
    np.testing.assert_array_equal(log.weight, np.ones(5))
    np.testing.assert_array_equal(log.clicks, PARQUET_EXPECTED.clicks)


def test_iter_parquet_chunks_equal_one_shot(tmp_path):
    """Chunked reading (several row groups, chunk sizes that do and do not divide them)
    gives the same log; deduplicating chunk by chunk and merging gives the same weighted
    log, and the same fit: iterative EM (DBN, a fixed number of iterations) on the merged
    weighted log equals EM on the raw log, whose E-step sums the same statistics."""
    from jaxcal.clicks import DBN, iter_parquet, read_parquet

    rng = np.random.default_rng(0)
    S = 600
    query = rng.integers(0, 3, S)
    doc = np.stack([rng.permutation(6)[:5] for _ in range(S)])
    mask = np.arange(5) < rng.integers(1, 6, S)[:, None]  # 1..5 results
    clicks = (rng.random((S, 5)) < 0.3) & mask
    log = Sessions.from_arrays(query, doc, clicks.astype(int), mask)
    rows = [
        (int(q), d[m].tolist(), c[m].tolist())
        for q, d, c, m in zip(log.query, log.doc, log.clicks, log.mask, strict=True)
    ]
    path = _parquet(tmp_path, _columns(rows, weight=None), row_group_size=128)
    whole = read_parquet(path)
    _assert_same(whole, log)
    for chunk in (1, 97, 128, 1000):
        parts = list(iter_parquet(path, chunk_sessions=chunk))
        assert all(p.n_sessions <= chunk for p in parts)
        assert sum(p.n_sessions for p in parts) == log.n_sessions
        _assert_same(Sessions.concatenate(parts), log)
    merged = Sessions.concatenate(
        [p.deduplicate() for p in iter_parquet(path, chunk_sessions=97)]
    ).deduplicate()
    assert merged.n_sessions < log.n_sessions
    _assert_same(merged, log.deduplicate())
    one = DBN().fit(whole, max_iter=20, tol=0.0, run=RunOptions(dedup=False))
    streamed = DBN().fit(merged, max_iter=20, tol=0.0, run=RunOptions(dedup=False))
    assert int(one.n_iter) == int(streamed.n_iter) == 20
    for k in one.params:  # the same sums in another order: float64 rounding only
        np.testing.assert_allclose(streamed.params[k], one.params[k], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"query": None}, "lacks columns"),
        ({"query": ["a", "b", "c", "d", "e"]}, "'query' must hold integer"),
        ({"query": [5.0, 5.0, 6.0, 7.0, 5.0]}, "'query' must hold integer"),
        ({"doc": [1, 2, 3, 4, 5]}, "'doc' must hold lists of integers"),
        ({"clicks": [[0.5], [0.0], [1.0], [0.0], [1.0]]}, "'clicks' must hold lists"),
        ({"weight": ["x"] * 5}, "'weight' must be numeric"),
        ({"clicks": [[0, 1, 0, 1], [0, 0, 0, 0], [1, 0], [0, 0], [1, 0, 0]]}, "row 2 has 1"),
        ({"doc": [[11, 12, 13, 14], [11, 12, 13, 14], [21], [], [12, 11, 13]]}, "row 3 has 0"),
        ({"query": [5, None, 6, 7, 5]}, "row 1 has a missing"),
        ({"clicks": [[0, 1, 0, 2], [0, 0, 0, 0], [1], [0, 0], [1, 0, 0]]}, "0/1"),
        ({"query": [5, -5, 6, 7, 5]}, "query ids must lie"),
        ({"weight": [1.0, -1.0, 1.0, 1.0, 1.0]}, "weight must be finite and non-negative"),
    ],
)
def test_malformed_parquet_raises(tmp_path, change, message):
    from jaxcal.clicks import iter_parquet, read_parquet

    cols = _columns()
    for k, v in change.items():
        if v is None:
            del cols[k]
        else:
            cols[k] = v
    path = _parquet(tmp_path, cols)
    with pytest.raises(ValueError, match=message):
        read_parquet(path)
    with pytest.raises(ValueError, match=message):
        list(iter_parquet(path, chunk_sessions=2))


def test_parquet_file_errors(tmp_path):
    pa = pytest.importorskip("pyarrow")
    from jaxcal.clicks import iter_parquet, read_parquet

    with pytest.raises(ValueError, match="no such file"):
        read_parquet(tmp_path / "absent.parquet")
    not_parquet = _write(tmp_path, "x.parquet", "not a parquet file\n")
    with pytest.raises(ValueError, match="not a readable Parquet file"):
        read_parquet(not_parquet)
    empty = _parquet(tmp_path, pa.table(_columns()).slice(0, 0), "e.parquet")
    with pytest.raises(ValueError, match="holds no SERPs"):
        read_parquet(empty)
    with pytest.raises(ValueError, match="chunk_sessions"):
        next(iter_parquet(_parquet(tmp_path, _columns()), chunk_sessions=0))
