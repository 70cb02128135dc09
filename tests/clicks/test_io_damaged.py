"""Damaged and garbage input to the click-log readers: every reader keeps every record or
raises one ValueError naming the file (and the 1-based line of a text file, the row and
column of a Parquet file); the clicks a Yandex log may hold on URLs that were not shown
are counted, warned about, or rejected on request. Expected values are worked out by hand
from the files written here."""

from __future__ import annotations

import io
import re
import zipfile

import numpy as np
import pytest

from jaxcal.clicks import (
    iter_parquet,
    iter_tiangong,
    iter_yandex,
    read_npz,
    read_parquet,
    read_tiangong,
    read_yandex,
)
from jaxcal.clicks.io import ReadReport, UnshownClickWarning


def _write(tmp_path, name, text, mode="w"):
    path = tmp_path / name
    if mode == "wb":
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _at(path, line):
    """The ``path:line:`` prefix of a text reader's error, as a regex."""
    return re.escape(f"{path}:{line}:")


# ---------------------------------------------------------------------------- Yandex
# Session 1: SERP (query 10: URLs 21 22 23), a click on 22, a click on 99 (not shown),
# a second click on 22 (repeat). Session 2: SERP (query 11: URLs 23 24), a click on 21,
# which session 2 never showed (SERPs of session 1 do not count), and a click on 24.
UNSHOWN = """\
1\t0\tQ\t10\t5\t21\t22\t23
1\t2\tC\t22
1\t3\tC\t99

1\t4\tC\t22
2\t0\tQ\t11\t5\t23\t24
2\t1\tC\t21
2\t2\tC\t24
"""


def test_unshown_clicks_warn_by_default_with_count_and_lines(tmp_path):
    path = _write(tmp_path, "u.txt", UNSHOWN)
    with pytest.warns(UnshownClickWarning, match=r"2 of 5 clicks .*lines \[3, 7\]") as rec:
        log = read_yandex(path)
    assert str(path) in str(rec[0].message)
    np.testing.assert_array_equal(log.query, [10, 11])
    np.testing.assert_array_equal(log.clicks, [[0, 1, 0], [0, 1, 0]])
    np.testing.assert_array_equal(log.mask, [[1, 1, 1], [1, 1, 0]])


def test_unshown_clicks_counted_in_the_report(tmp_path):
    path = _write(tmp_path, "u.txt", UNSHOWN)
    log, report = read_yandex(path, on_unshown_click="count", return_report=True)
    assert report == ReadReport(
        path=str(path),
        lines=8,
        blank_lines=1,
        serps=2,
        clicks=2,
        search_sessions=2,
        click_lines=5,
        repeated_clicks=1,
        unshown_clicks=2,
        unshown_click_lines=[3, 7],
    )
    # every line and every click line is accounted for
    assert report.lines == report.blank_lines + report.serps + report.click_lines
    assert report.click_lines == report.clicks + report.repeated_clicks + report.unshown_clicks
    assert int(log.clicks.sum()) == report.clicks
    # streaming: the report fills as the chunks are read, the same totals at the end
    chunks = iter_yandex(path, chunk_sessions=1, on_unshown_click="count")
    assert [c.n_sessions for c in chunks] == [1, 1]
    assert chunks.report == report


def test_unshown_click_as_an_error_names_the_line(tmp_path):
    path = _write(tmp_path, "u.txt", UNSHOWN)
    with pytest.raises(ValueError, match=_at(path, 3) + " a click on URL 99"):
        read_yandex(path, on_unshown_click="error")
    with pytest.raises(ValueError, match=_at(path, 3)):
        list(iter_yandex(path, on_unshown_click="error"))
    with pytest.raises(ValueError, match="on_unshown_click must be one of"):
        read_yandex(path, on_unshown_click="drop")


def test_iter_yandex_warns_once_per_file(tmp_path):
    path = _write(tmp_path, "u.txt", UNSHOWN)
    with pytest.warns(UnshownClickWarning) as rec:
        chunks = list(iter_yandex(path, chunk_sessions=1))
    assert len(rec) == 1 and len(chunks) == 2


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        # a session resumed after another one: its lines are not contiguous
        ("1\t0\tQ\t10\t5\t21\n2\t0\tQ\t11\t5\t22\n1\t5\tC\t21\n", 3, "search session 1 continues"),
        # a click before the first query line of its session (not the first line)
        ("1\t0\tQ\t10\t5\t21\n2\t0\tC\t21\n2\t1\tQ\t11\t5\t21\n", 2, "before the first query"),
        # time going backwards inside a session
        ("1\t0\tQ\t10\t5\t21\n1\t9\tC\t21\n1\t4\tQ\t11\t5\t21\n", 3, "TimePassed 4 is smaller"),
        ("1\tx\tQ\t10\t5\t21\n", 1, "TimePassed must be a non-negative integer"),
        ("1\t-1\tQ\t10\t5\t21\n", 1, "TimePassed must be a non-negative integer"),
        ("1\t1.5\tQ\t10\t5\t21\n", 1, "TimePassed must be a non-negative integer"),
        ("1\t0\tQ\t10\tmoscow\t21\n", 1, "RegionID must be a non-negative integer"),
        ("1\t0\tQ\t10\t-3\t21\n", 1, "RegionID must be a non-negative integer"),
        ("s1\t0\tQ\t10\t5\t21\n", 1, "SessionID must be a non-negative integer"),
        ("1\t0\tQ\t10\t5\t21\t+22\n", 1, "URL id must be a non-negative integer"),
        ("1\t0\tQ\t10\t5\t21\t2_2\n", 1, "URL id must be a non-negative integer"),
        ("1\t0\tQ\t10\t5\t21\t\u0662\u0662\n", 1, "URL id must be a non-negative integer"),
        ("1\t0\tQ\t10\t5\t21\n1\t1\tC\tx\n", 2, "URLID must be a non-negative integer"),
        ("1\t0\tQ\t10\t5\t21\t22\t21\n", 1, "URL 21 is shown twice"),
        # ids beyond the ranges: 2**31 for query and URL ids, 2**63 for the others
        ("1\t0\tQ\t2147483648\t5\t21\n", 1, "QueryID 2147483648 is too large"),
        ("1\t0\tQ\t10\t5\t21\t2147483648\n", 1, "URL id 2147483648 is too large"),
        ("1\t0\tQ\t10\t5\t21\n1\t1\tC\t99999999999\n", 2, "URLID 99999999999 is too large"),
        (f"{2**63}\t0\tQ\t10\t5\t21\n", 1, "SessionID 9223372036854775808 is too large"),
        (f"1\t0\tQ\t10\t{2**64}\t21\n", 1, "RegionID 18446744073709551616 is too large"),
        ("1\t0\tQ\t10\t5\t" + "9" * 5000 + "\n", 1, "URL id 9999.* is too large"),
        ("1\t0\tQ\t10\t5\t21\n1\t1\tX\t21\n", 2, "record type must be Q or C"),
        ("1\t0\tM\t10\t5\n", 1, "record type must be Q or C"),
    ],
)
def test_malformed_yandex_lines_name_file_and_line(tmp_path, text, line, message):
    path = _write(tmp_path, "bad.txt", text)
    with pytest.raises(ValueError, match=_at(path, line) + ".*" + message):
        read_yandex(path)


def test_yandex_large_ids_within_range_are_kept(tmp_path):
    """Session ids, times and regions up to 2**63 - 1 and query / URL ids up to 2**31 - 1
    are valid; lines may end in CRLF, and the file may start with a byte-order mark."""
    big = 2**63 - 1
    text = (
        f"\ufeff{big}\t{big}\tQ\t2147483647\t{big}\t2147483646\t0\r\n"
        f"{big}\t{big}\tC\t0\r\n"
        f"5\t0\tQ\t0\t0\t7\r\n"
    )
    path = tmp_path / "big.txt"
    path.write_bytes(text.encode("utf-8"))
    log = read_yandex(path)
    np.testing.assert_array_equal(log.query, [2147483647, 0])
    np.testing.assert_array_equal(log.doc, [[2147483646, 0], [7, 0]])
    np.testing.assert_array_equal(log.clicks, [[0, 1], [0, 0]])
    np.testing.assert_array_equal(log.mask, [[1, 1], [1, 0]])


def test_yandex_undecodable_bytes_name_the_line(tmp_path):
    path = _write(tmp_path, "bin.txt", b"1\t0\tQ\t10\t5\t21\n1\t1\tC\t2\xff\xfe\n", "wb")
    with pytest.raises(ValueError, match=_at(path, 2) + " not UTF-8 text \\(byte 0xff"):
        read_yandex(path)
    # valid UTF-8 that is not a number is a field error on its line
    path = _write(tmp_path, "utf.txt", "1\t0\tQ\t10\t5\t21\n1\t1\tC\t21é\n")
    with pytest.raises(ValueError, match=_at(path, 2) + " URLID must be"):
        read_yandex(path)


def test_yandex_sessions_in_any_order_but_contiguous(tmp_path):
    """Session ids need not be sorted; a session that comes back after thousands of other
    sessions (beyond the in-memory set of recent ids) is still found."""
    rng = np.random.default_rng(1)
    ids = rng.permutation(np.arange(10, 10 + 3 * 5000, 3))  # 5000 distinct, shuffled
    lines = [f"{s}\t0\tQ\t{i % 7}\t1\t{i % 5}\t{5 + i % 3}" for i, s in enumerate(ids)]
    path = _write(tmp_path, "order.txt", "\n".join(lines) + "\n")
    log = read_yandex(path)
    np.testing.assert_array_equal(log.query, np.arange(5000) % 7)
    np.testing.assert_array_equal(log.doc[:, 0], np.arange(5000) % 5)
    again = lines + [f"{ids[17]}\t1\tC\t{17 % 5}"]  # session of line 18 again, at line 5001
    path = _write(tmp_path, "resumed.txt", "\n".join(again) + "\n")
    with pytest.raises(ValueError, match=_at(path, 5001) + f" search session {ids[17]} continues"):
        read_yandex(path)


# ---------------------------------------------------------------------------- TianGong
GOOD = "1\t4\t[10, 11]\t[1, 1]\t[0, 1]"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("1\t4\t[true, false]\t[1, 1]\t[0, 1]", "documents must be a list of integers"),
        ("1\t4\t[10.0, 11]\t[1, 1]\t[0, 1]", "documents must be a list of integers"),
        ('1\t4\t["10", 11]\t[1, 1]\t[0, 1]', "documents must be a list of integers"),
        ("1\t4\t[[10], 11]\t[1, 1]\t[0, 1]", "documents must be a list of integers"),
        ("1\t4\t{}\t[1, 1]\t[0, 1]", "documents must be a list of integers"),
        ("1\t4\t[10, 11]\t[1, 1]\t[true, false]", "clicks must be a list of integers"),
        ("1\t4\t[10, 11]\t[1]\t[0, 1]", "2 documents but 1 vertical types"),
        ("1\t4\t[10, 11]\t[1, x]\t[0, 1]", "vertical types must be a list like"),
        ("1\t4\t[10, 11]\t[1, -1]\t[0, 1]", "vertical types must be non-negative"),
        ("1\t4\t[10, 11]\t[1, null]\t[0, 1]", "vertical types must be a list of integers"),
        ("1\t4\t[10, 11]\t[1, 1]\t[0, 1]\t[3]", "2 documents but 1 labels"),
        ("1\t4\t[10, 11]\t[1, 1]\t[0, 1]\t[3, 1.5]", "labels must be a list of integers"),
        ("1\t4\t[10, 11]\t[1, 1]\t[0, 1]\t", "labels must be a list like"),
        (f"1\t4\t[10, 11]\t[1, 1]\t[0, 1]\t[3, {2**63}]", "labels must be 64-bit integers"),
        (f"1\t4\t[10, {2**64}]\t[1, 1]\t[0, 1]", "document ids must be non-negative"),
        (f"1\t4\t[10, {2**31}]\t[1, 1]\t[0, 1]", "document ids must be non-negative"),
        (f"1\t4\t[10, 11]\t[1, {2**63}]\t[0, 1]", "vertical types must be non-negative"),
        (f"1\t{2**31}\t[10, 11]\t[1, 1]\t[0, 1]", "query id 2147483648 is too large"),
        (f"{2**63}\t4\t[10, 11]\t[1, 1]\t[0, 1]", "session id 9223372036854775808 is too"),
        ("x\t4\t[10, 11]\t[1, 1]\t[0, 1]", "session id must be a non-negative integer"),
        ("1\t4\t[10, " + "9" * 5000 + "]\t[1, 1]\t[0, 1]", "documents must be a list like"),
        ("1\t4\t" + "[" * 10**5 + "]" * 10**5 + "\t[1]\t[0]", "documents are nested too deep"),
    ],
)
def test_malformed_tiangong_lines_name_file_and_line(tmp_path, line, message):
    path = _write(tmp_path, "bad.txt", f"{GOOD}\n\n{line}\n")
    with pytest.raises(ValueError, match=_at(path, 3) + " " + message):
        read_tiangong(path)


def test_tiangong_undecodable_bytes_name_the_line(tmp_path):
    path = _write(tmp_path, "bin.txt", GOOD.encode() + b"\n\x00\x81binary\n", "wb")
    with pytest.raises(ValueError, match=_at(path, 2) + " not UTF-8 text \\(byte 0x81 at column 2"):
        read_tiangong(path)
    with pytest.raises(ValueError, match=_at(path, 2)):
        list(iter_tiangong(path, chunk_sessions=1))


def test_tiangong_keeps_every_line_and_reports_it(tmp_path):
    """White space inside the JSON lists, CRLF line ends, a byte-order mark, negative
    labels (the human-label file uses -2) and blank lines are all fine."""
    text = (
        "\ufeff7\t4\t[10, 11, 12]\t[1, 2, 0]\t[0, 1, 1]\t[-2, 0, 4]\r\n"
        "\r\n"
        "8\t5\t[ 13 ,14 ]\t[ 1, 1 ]\t[1,0]\r\n"
    )
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode("utf-8"))
    log, report = read_tiangong(path, return_report=True)
    np.testing.assert_array_equal(log.query, [4, 5])
    np.testing.assert_array_equal(log.doc, [[10, 11, 12], [13, 14, 0]])
    np.testing.assert_array_equal(log.clicks, [[0, 1, 1], [1, 0, 0]])
    assert report == ReadReport(path=str(path), lines=3, blank_lines=1, serps=2, clicks=3)


def test_tiangong_demo_report(data_dir):
    path = data_dir / "tiangong-st-demo" / "human_label_for_NCM_per_query_quid.txt"
    log, report = read_tiangong(path, return_report=True)
    with open(path, encoding="utf-8") as fh:
        lines = fh.read().splitlines()
    assert report.lines == len(lines)
    assert report.serps == log.n_sessions == sum(1 for line in lines if line.strip())
    assert report.clicks == int(log.clicks.sum())


# ---------------------------------------------------------------------------- npz
def _npy_bytes(arr, allow_pickle=False):
    buf = io.BytesIO()
    np.lib.format.write_array(buf, arr, allow_pickle=allow_pickle)
    return buf.getvalue()


def _zip(path, members):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name + ".npy", data)
    return path


GOOD_ARRAYS = {
    "query": np.array([3, 4]),
    "doc": np.array([[1, 2], [4, 5]]),
    "clicks": np.array([[0, 1], [1, 0]]),
}


def test_npz_truncated_or_not_an_archive(tmp_path):
    good = tmp_path / "good.npz"
    np.savez(good, **GOOD_ARRAYS)
    data = good.read_bytes()
    for name, content in [
        ("half.npz", data[: len(data) // 2]),
        ("tail.npz", data[:-10]),
        ("plain.npz", _npy_bytes(np.arange(3))),
        ("empty.npz", b""),
    ]:
        path = _write(tmp_path, name, content, "wb")
        with pytest.raises(ValueError, match=re.escape(str(path))):
            read_npz(path)


def test_npz_huge_declared_array_is_rejected_before_reading(tmp_path):
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<i8", "fortran_order": False, "shape": (2**40,)}
    )
    members = {k: _npy_bytes(v) for k, v in GOOD_ARRAYS.items()}
    members["doc"] = header.getvalue() + bytes(16)
    path = _zip(tmp_path / "huge.npz", members)
    with pytest.raises(ValueError, match=re.escape(f"{path}: array 'doc'") + ".*declares shape"):
        read_npz(path)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("doc", np.array([[{"a": 1}, 2]], dtype=object), "array 'doc'.*Python objects"),
        ("query", np.array(["a", "b"]), "array 'query'.*not numeric"),
        ("weights", np.array([1.0, 2.0]), r"holds arrays \['weights'\]"),
        ("clicks", np.array([[0, 3], [1, 0]]), "clicks must be 0/1"),
        ("query", np.array([3, 2**40]), "query ids must lie"),
        ("weight", np.array([1.0, np.nan]), "weight must be finite"),
    ],
)
def test_npz_bad_arrays_name_the_file(tmp_path, name, value, message):
    members = {k: _npy_bytes(v) for k, v in GOOD_ARRAYS.items()}
    members[name] = _npy_bytes(value, allow_pickle=value.dtype == object)
    path = _zip(tmp_path / "bad.npz", members)
    with pytest.raises(ValueError, match=re.escape(str(path)) + ".*" + message):
        read_npz(path)


def test_npz_damaged_data_fails_its_checksum(tmp_path):
    path = tmp_path / "crc.npz"
    np.savez(path, **GOOD_ARRAYS)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("doc.npy")
    data[info.header_offset + 30 + len(info.filename) + 130] ^= 0xFF  # inside doc's data
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=re.escape(f"{path}: array 'doc'") + ".*CRC"):
        read_npz(path)


# ---------------------------------------------------------------------------- Parquet
def _parquet(tmp_path, table, name="log.parquet", **kwargs):
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / name
    pq.write_table(table, path, **kwargs)
    return path


def _table(**columns):
    pa = pytest.importorskip("pyarrow")
    cols = {
        "query": pa.array([5, 6, 7], pa.int64()),
        "doc": pa.array([[11, 12], [13], [14, 15]], pa.list_(pa.int64())),
        "clicks": pa.array([[0, 1], [1], [0, 0]], pa.list_(pa.int8())),
    }
    cols.update(columns)
    return pa.table(cols)


def test_parquet_nulls_inside_lists_name_file_column_and_row(tmp_path):
    pa = pytest.importorskip("pyarrow")
    doc = pa.array([[11, 12], [13], [14, None]], pa.list_(pa.int64()))
    path = _parquet(tmp_path, _table(doc=doc))
    with pytest.raises(
        ValueError, match=re.escape(f"{path}: row 2 has a missing (null) value in its 'doc'")
    ):
        read_parquet(path)
    clicks = pa.array([[False, None], [True], [False, False]], pa.list_(pa.bool_()))
    path = _parquet(tmp_path, _table(clicks=clicks), "c.parquet")
    with pytest.raises(
        ValueError, match=re.escape(f"{path}: row 0 has a missing (null) value in its 'clicks'")
    ):
        read_parquet(path)


def test_parquet_null_in_a_later_batch_counts_rows_from_the_start(tmp_path):
    pa = pytest.importorskip("pyarrow")
    n = 50
    doc = [[i, i + 1] for i in range(n)]
    doc[37] = [1, None]
    table = pa.table(
        {
            "query": pa.array(range(n), pa.int64()),
            "doc": pa.array(doc, pa.list_(pa.int64())),
            "clicks": pa.array([[0, 1]] * n, pa.list_(pa.int8())),
        }
    )
    path = _parquet(tmp_path, table, row_group_size=10)
    with pytest.raises(ValueError, match="row 37 has a missing"):
        list(iter_parquet(path, chunk_sessions=8))


@pytest.mark.parametrize(
    ("column", "values", "message"),
    [
        ("doc", [[11, 2**63 + 5], [13], [14, 15]], "row 0, column 'doc': doc ids must lie"),
        ("doc", [[11, 12], [13], [14, 2**31]], "row 2, column 'doc': doc ids must lie"),
        ("query", [5, 2**64 - 1, 7], "row 1, column 'query': query ids must lie"),
        ("clicks", [[0, 1], [2], [0, 0]], "row 1, column 'clicks': clicks must be 0/1"),
        ("weight", [1.0, 1.0, float("nan")], "row 2, column 'weight': weight must be finite"),
    ],
)
def test_parquet_values_out_of_range_name_file_row_and_column(tmp_path, column, values, message):
    pa = pytest.importorskip("pyarrow")
    types = {
        "doc": pa.list_(pa.uint64()),
        "query": pa.uint64(),
        "clicks": pa.list_(pa.int8()),
        "weight": pa.float64(),
    }
    path = _parquet(tmp_path, _table(**{column: pa.array(values, types[column])}))
    with pytest.raises(ValueError, match=re.escape(f"{path}: {message}")):
        read_parquet(path)
    with pytest.raises(ValueError, match=re.escape(message)):
        list(iter_parquet(path, chunk_sessions=1))


def test_parquet_damaged_file(tmp_path):
    path = _parquet(tmp_path, _table())
    data = path.read_bytes()
    for i, cut in enumerate((data[:-30], data[: len(data) // 2], data[:4] + bytes(len(data) - 4))):
        bad = _write(tmp_path, f"bad{i}.parquet", cut, "wb")
        with pytest.raises(ValueError, match=re.escape(str(bad))):
            read_parquet(bad)
