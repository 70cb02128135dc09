"""Readers for click logs: Yandex Relevance Prediction, TianGong-ST demo, NumPy, Parquet.

All readers return :class:`~jaxcal.clicks.Sessions` (one row per SERP; shorter SERPs are
padded and masked). The ``iter_*`` variants stream a file in chunks of whole sessions, for
logs larger than memory: deduplicate each chunk (``chunk.deduplicate()``) and concatenate,
since real logs repeat head queries heavily.

Yandex Relevance Prediction Challenge (tab-separated, one action per line)::

    SessionID  TimePassed  Q  QueryID  RegionID  URL_1 ... URL_n
    SessionID  TimePassed  C  URLID

A click belongs to the latest SERP of its session (so far) that contains the URL. Repeated
clicks on the same result of the same SERP are counted once (click models have binary
clicks). Clicks on a URL that no SERP of the session shows are dropped. Lines of a session
must be contiguous (as in the published log).

TianGong-ST demo (``../shared/data/tiangong-st-demo``), tab-separated::

    session_id  query_id  [d_1, ..., d_n]  [vtype_1, ...]  [c_1, ..., c_n]  ([labels])
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator

import numpy as np

from jaxcal.clicks.sessions import Sessions

__all__ = [
    "read_yandex",
    "iter_yandex",
    "read_tiangong",
    "iter_tiangong",
    "read_npz",
    "read_parquet",
    "iter_parquet",
]


def _pack(rows: list[tuple[int, list[int], list[int]]]) -> Sessions:
    n = max(len(d) for _, d, _ in rows)
    S = len(rows)
    query = np.empty(S, np.int64)
    doc = np.zeros((S, n), np.int64)
    clicks = np.zeros((S, n), np.int8)
    mask = np.zeros((S, n), bool)
    for i, (q, d, c) in enumerate(rows):
        query[i] = q
        k = len(d)
        doc[i, :k] = d
        clicks[i, :k] = c
        mask[i, :k] = True
    return Sessions.from_arrays(query, doc, clicks, mask)


def _check_chunk(chunk_sessions: int) -> int:
    if isinstance(chunk_sessions, bool) or int(chunk_sessions) < 1:
        raise ValueError(f"chunk_sessions must be a positive integer; got {chunk_sessions!r}.")
    return int(chunk_sessions)


def _open(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    return open(path, encoding="utf-8")


def _int(token: str, what: str, where: str) -> int:
    try:
        v = int(token)
    except ValueError:
        raise ValueError(f"{where}: {what} must be an integer; got {token!r}.") from None
    if v < 0:
        raise ValueError(f"{where}: {what} must be non-negative; got {v}.")
    return v


# ---------------------------------------------------------------------------- Yandex
def iter_yandex(path, *, chunk_sessions: int = 100_000) -> Iterator[Sessions]:
    """Stream a Yandex Relevance Prediction log as :class:`Sessions` chunks of SERPs from
    about ``chunk_sessions`` search sessions each (sessions are never split).

    Raises:
        ValueError: on a missing file, a malformed line (with its line number), or a file
            without any SERP.
    """
    chunk_sessions = _check_chunk(chunk_sessions)
    rows: list[tuple[int, list[int], list[int]]] = []
    current: str | None = None
    serps: list[tuple[int, list[int], list[int]]] = []  # SERPs of the current session
    n_sessions = 0
    any_serp = False

    def flush():
        nonlocal serps
        rows.extend(serps)
        serps = []

    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            parts = line.split()
            if not parts:
                continue
            where = f"{os.fspath(path)}:{lineno}"
            if len(parts) < 4:
                raise ValueError(f"{where}: expected at least 4 fields; got {len(parts)}.")
            sid, kind = parts[0], parts[2]
            if sid != current:
                flush()
                current = sid
                n_sessions += 1
                if n_sessions > chunk_sessions and rows:
                    yield _pack(rows)
                    rows = []
                    n_sessions = 1
            if kind == "Q":
                if len(parts) < 6:
                    raise ValueError(f"{where}: a query line needs QueryID, RegionID and URLs.")
                q = _int(parts[3], "QueryID", where)
                urls = [_int(u, "URL id", where) for u in parts[5:]]
                serps.append((q, urls, [0] * len(urls)))
                any_serp = True
            elif kind == "C":
                if len(parts) != 4:
                    raise ValueError(f"{where}: a click line has 4 fields; got {len(parts)}.")
                url = _int(parts[3], "URL id", where)
                for _, urls, clicks in reversed(serps):
                    if url in urls:
                        clicks[urls.index(url)] = 1  # repeated clicks count once
                        break
            else:
                raise ValueError(f"{where}: action type must be Q or C; got {kind!r}.")
        flush()
    if not any_serp:
        raise ValueError(f"{os.fspath(path)} holds no query (Q) lines.")
    if rows:
        yield _pack(rows)


def read_yandex(path) -> Sessions:
    """Read a whole Yandex Relevance Prediction log (see the module docstring).

    Example:
        >>> from jaxcal.clicks import read_yandex
        >>> log = read_yandex("YandexRelPredChallenge.txt")  # doctest: +SKIP
    """
    return Sessions.concatenate(list(iter_yandex(path, chunk_sessions=1 << 62)))


# ---------------------------------------------------------------------------- TianGong
def _parse_list(token: str, what: str, where: str) -> list[int]:
    try:
        values = json.loads(token)
    except json.JSONDecodeError:
        raise ValueError(f"{where}: {what} must be a list like [1, 2, 3]; got {token!r}.") from None
    if not isinstance(values, list) or not all(isinstance(v, int) for v in values):
        raise ValueError(f"{where}: {what} must be a list of integers; got {token!r}.")
    return values


def iter_tiangong(path, *, chunk_sessions: int = 100_000) -> Iterator[Sessions]:
    """Stream a TianGong-ST demo file in chunks of ``chunk_sessions`` SERPs."""
    chunk_sessions = _check_chunk(chunk_sessions)
    rows: list[tuple[int, list[int], list[int]]] = []
    any_row = False
    with _open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            where = f"{os.fspath(path)}:{lineno}"
            parts = line.rstrip("\n").split("\t")
            if len(parts) not in (5, 6):
                raise ValueError(
                    f"{where}: expected 5 or 6 tab-separated fields "
                    f"(sid qid [docs] [vtypes] [clicks] [labels]); got {len(parts)}."
                )
            _int(parts[0], "session id", where)
            q = _int(parts[1], "query id", where)
            docs = _parse_list(parts[2], "documents", where)
            clicks = _parse_list(parts[4], "clicks", where)
            if not docs:
                raise ValueError(f"{where}: empty SERP.")
            if len(clicks) != len(docs):
                raise ValueError(f"{where}: {len(docs)} documents but {len(clicks)} clicks.")
            if any(c not in (0, 1) for c in clicks):
                raise ValueError(f"{where}: clicks must be 0/1; got {clicks}.")
            if any(d < 0 for d in docs):
                raise ValueError(f"{where}: document ids must be non-negative.")
            rows.append((q, docs, clicks))
            any_row = True
            if len(rows) >= chunk_sessions:
                yield _pack(rows)
                rows = []
    if not any_row:
        raise ValueError(f"{os.fspath(path)} holds no SERPs.")
    if rows:
        yield _pack(rows)


def read_tiangong(path) -> Sessions:
    """Read a TianGong-ST demo file (``sid qid [docs] [vtypes] [clicks] ([labels])``).

    Example:
        >>> from jaxcal.data import default_data_dir
        >>> from jaxcal.clicks import read_tiangong
        >>> log = read_tiangong(default_data_dir() / "tiangong-st-demo/train_per_query_quid.txt")
        >>> log.n_sessions
        2872
    """
    return Sessions.concatenate(list(iter_tiangong(path, chunk_sessions=1 << 62)))


# ---------------------------------------------------------------------------- arrays
def read_npz(path) -> Sessions:
    """Read plain arrays ``query, doc, clicks`` (+ optional ``mask, weight``) from a
    NumPy ``.npz`` file (as written by :meth:`Sessions.to_npz`); validated."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    with np.load(path, allow_pickle=False) as data:
        missing = [k for k in ("query", "doc", "clicks") if k not in data.files]
        if missing:
            raise ValueError(f"{path} lacks arrays {missing}; found {data.files}.")
        return Sessions.from_arrays(
            data["query"],
            data["doc"],
            data["clicks"],
            data["mask"] if "mask" in data.files else None,
            data["weight"] if "weight" in data.files else None,
        )


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading Parquet needs pyarrow (pip install pyarrow, or the dev extra); or "
            "convert the log to NumPy arrays and use read_npz."
        ) from exc
    return pa, pc, pq


def _parquet_schema(schema, where: str) -> None:
    """Check the columns and their types before touching the data."""
    import pyarrow.types as pat

    names = schema.names
    missing = [k for k in ("query", "doc", "clicks") if k not in names]
    if missing:
        raise ValueError(f"{where} lacks columns {missing}; found {names}.")
    qt = schema.field("query").type
    if not pat.is_integer(qt):
        raise ValueError(f"{where}: column 'query' must hold integer ids; got type {qt}.")
    for name in ("doc", "clicks"):
        t = schema.field(name).type
        is_list = pat.is_list(t) or pat.is_large_list(t) or pat.is_fixed_size_list(t)
        ok_values = is_list and (
            pat.is_integer(t.value_type) or (name == "clicks" and pat.is_boolean(t.value_type))
        )
        if not ok_values:
            raise ValueError(
                f"{where}: column {name!r} must hold lists of integers (one SERP per row); "
                f"got type {t}."
            )
    if "weight" in names:
        wt = schema.field("weight").type
        if not (pat.is_integer(wt) or pat.is_floating(wt)):
            raise ValueError(f"{where}: column 'weight' must be numeric; got type {wt}.")


def _sessions_from_table(table, where: str, first_row: int) -> Sessions:
    """Vectorised conversion of one Arrow table (a whole file or a chunk) to Sessions."""
    _, pc, _ = _pyarrow()
    cols = ["query", "doc", "clicks"] + (["weight"] if "weight" in table.column_names else [])
    for name in cols:
        col = table.column(name)
        if col.null_count:
            row = first_row + int(np.flatnonzero(np.asarray(col.is_null()))[0])
            raise ValueError(f"{where}: row {row} has a missing (null) {name!r}.")
    doc = table.column("doc").combine_chunks()
    clicks = table.column("clicks").combine_chunks()
    n_doc = np.asarray(pc.list_value_length(doc), np.int64)
    n_click = np.asarray(pc.list_value_length(clicks), np.int64)
    bad = np.flatnonzero((n_doc != n_click) | (n_doc == 0))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{where}: row {first_row + i} has {n_doc[i]} documents and {n_click[i]} clicks "
            "(need equal, non-empty lists)."
        )
    S, n = n_doc.shape[0], int(n_doc.max())
    row = np.repeat(np.arange(S), n_doc)
    col = np.arange(row.shape[0]) - np.repeat(np.cumsum(n_doc) - n_doc, n_doc)
    flat_doc = np.asarray(pc.list_flatten(doc), np.int64)
    flat_clicks = np.asarray(pc.list_flatten(clicks)).astype(np.int64)
    doc_arr = np.zeros((S, n), np.int64)
    click_arr = np.zeros((S, n), np.int64)
    mask = np.zeros((S, n), bool)
    doc_arr[row, col] = flat_doc
    click_arr[row, col] = flat_clicks
    mask[row, col] = True
    weight = None
    if "weight" in table.column_names:
        weight = np.asarray(table.column("weight"), np.float64)
    return Sessions.from_arrays(
        np.asarray(table.column("query"), np.int64), doc_arr, click_arr, mask, weight
    )


def _parquet_file(path):
    _, _, pq = _pyarrow()
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ValueError(f"no such file: {path}")
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError subclasses
        raise ValueError(f"{path} is not a readable Parquet file: {exc}") from exc


def iter_parquet(path, *, chunk_sessions: int = 100_000) -> Iterator[Sessions]:
    """Stream a Parquet click log (layout of :func:`read_parquet`) in chunks of at most
    ``chunk_sessions`` SERPs, reading one record batch at a time (logs larger than memory:
    deduplicate each chunk, then concatenate).

    Raises:
        ImportError: when ``pyarrow`` is not installed.
        ValueError: as :func:`read_parquet` (row numbers count from the file's start).
    """
    chunk_sessions = _check_chunk(chunk_sessions)
    pa, _, _ = _pyarrow()
    pf = _parquet_file(path)
    where = os.fspath(path)
    _parquet_schema(pf.schema_arrow, where)
    if pf.metadata.num_rows == 0:
        raise ValueError(f"{where} holds no SERPs.")
    first = 0
    for batch in pf.iter_batches(batch_size=chunk_sessions):
        table = pa.Table.from_batches([batch])
        yield _sessions_from_table(table, where, first)
        first += table.num_rows


def read_parquet(path) -> Sessions:
    """Read a Parquet table with columns ``query`` (integer), ``doc`` and ``clicks`` (lists
    of integers, one SERP per row; lists may differ in length: shorter SERPs are padded and
    masked; ``clicks`` may also be booleans) and optional ``weight`` (numeric, session
    multiplicities). Other columns are ignored.

    Requires ``pyarrow`` (the ``dev`` extra; not a runtime dependency of jaxcal).

    Example:
        >>> import pyarrow as pa, pyarrow.parquet as pq  # doctest: +SKIP
        >>> pq.write_table(pa.table({"query": [3], "doc": [[7, 8]], "clicks": [[0, 1]]}),
        ...                "log.parquet")  # doctest: +SKIP
        >>> read_parquet("log.parquet").clicks  # doctest: +SKIP
        array([[0, 1]], dtype=int8)

    Raises:
        ImportError: when ``pyarrow`` is not installed.
        ValueError: on a missing or unreadable file, missing columns, columns of the wrong
            type, nulls, a row whose ``doc`` and ``clicks`` lists differ in length or are
            empty (with the row number), clicks not 0/1, negative ids or weights.
    """
    pf = _parquet_file(path)
    where = os.fspath(path)
    _parquet_schema(pf.schema_arrow, where)
    table = pf.read()
    if table.num_rows == 0:
        raise ValueError(f"{where} holds no SERPs.")
    return _sessions_from_table(table, where, 0)
