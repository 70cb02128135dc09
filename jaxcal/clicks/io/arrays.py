"""Click logs stored as arrays: jaxcal's npz format and Parquet (see :mod:`jaxcal.clicks.io`)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from jaxcal._archive import NpzArchive
from jaxcal.clicks.io._common import (
    _check_chunk,
    _check_file,
)
from jaxcal.clicks.sessions import _MAX_ID, Sessions

_NPZ_ARRAYS = ("query", "doc", "clicks", "mask", "weight")


def read_npz(path) -> Sessions:
    """Read plain arrays ``query, doc, clicks`` (+ optional ``mask, weight``) from a
    NumPy ``.npz`` file (as written by :meth:`Sessions.to_npz`); validated.

    Raises:
        ValueError: naming the file, on a missing file; a file that is not a ``.npz``
            archive or is damaged (truncated, an array whose header declares more data
            than the archive holds, a failed checksum); pickled (object) or non-numeric
            arrays; missing arrays; arrays other than the five above (a misspelt
            ``weights`` would otherwise be lost); anything :meth:`Sessions.from_arrays`
            rejects. Nothing is ignored.

    Example:
        >>> import numpy as np
        >>> from jaxcal.clicks import read_npz
        >>> np.savez("log.npz", query=[4], doc=[[1, 2]], clicks=[[1, 0]], weight=[3.0])
        >>> log = read_npz("log.npz")
        >>> log.doc.tolist(), log.total_weight
        ([[1, 2]], 3.0)
    """

    path = _check_file(path)
    with NpzArchive(path) as archive:
        names = set(archive.members)
        missing = [k for k in ("query", "doc", "clicks") if k not in names]
        if missing:
            raise ValueError(f"{path} lacks arrays {missing}; found {sorted(names)}.")
        unknown = sorted(names - set(_NPZ_ARRAYS))
        if unknown:
            raise ValueError(
                f"{path} holds arrays {unknown}, which read_npz does not read (it reads "
                f"{', '.join(_NPZ_ARRAYS)}); rename or remove them."
            )
        arrays = {k: archive.read(k) for k in _NPZ_ARRAYS if k in names}
    try:
        return Sessions.from_arrays(
            *(arrays[k] for k in ("query", "doc", "clicks")),
            arrays.get("mask"),
            arrays.get("weight"),
        )
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading Parquet needs pyarrow (pip install 'jaxcal[parquet]' or pyarrow); or "
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
    flat = {}
    for name, lists in (("doc", doc), ("clicks", clicks)):
        values = pc.list_flatten(lists)
        if values.null_count:
            parent = np.asarray(pc.list_parent_indices(lists))
            i = int(np.flatnonzero(np.asarray(values.is_null()))[0])
            raise ValueError(
                f"{where}: row {first_row + int(parent[i])} has a missing (null) value in its "
                f"{name!r} list."
            )
        flat[name] = values.to_numpy(zero_copy_only=False)

    def first_bad(column, values, bad, message):
        """Raise on the first value flagged in ``bad`` (flattened list values map back to
        their rows)."""
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            lists = {"doc": doc, "clicks": clicks}.get(column)
            row = i if lists is None else int(np.asarray(pc.list_parent_indices(lists))[i])
            raise ValueError(
                f"{where}: row {first_row + row}, column {column!r}: {message}; "
                f"got {values[i].item()!r}."
            )

    query = table.column("query").to_numpy()
    first_bad(
        "query", query, (query < 0) | (query > _MAX_ID), "query ids must lie in [0, 2**31 - 1]"
    )
    ids = flat["doc"]
    first_bad("doc", ids, (ids < 0) | (ids > _MAX_ID), "doc ids must lie in [0, 2**31 - 1]")
    first_bad("clicks", flat["clicks"], ~np.isin(flat["clicks"], (0, 1)), "clicks must be 0/1")
    S, n = n_doc.shape[0], int(n_doc.max())
    row = np.repeat(np.arange(S), n_doc)
    col = np.arange(row.shape[0]) - np.repeat(np.cumsum(n_doc) - n_doc, n_doc)
    doc_arr = np.zeros((S, n), np.int64)
    click_arr = np.zeros((S, n), np.int64)
    mask = np.zeros((S, n), bool)
    doc_arr[row, col] = flat["doc"]
    click_arr[row, col] = flat["clicks"]
    mask[row, col] = True
    weight = None
    if "weight" in table.column_names:
        weight = table.column("weight").to_numpy().astype(np.float64)
        bad = ~np.isfinite(weight) | (weight < 0)
        first_bad("weight", weight, bad, "weight must be finite and non-negative")
    try:
        return Sessions.from_arrays(query.astype(np.int64), doc_arr, click_arr, mask, weight)
    except ValueError as exc:  # pragma: no cover - every case is checked above
        raise ValueError(f"{where}: {exc}") from None


def _parquet_file(path):
    _, _, pq = _pyarrow()
    path = _check_file(path)
    try:
        return pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises ArrowInvalid / OSError subclasses
        raise ValueError(f"{path} is not a readable Parquet file: {exc}") from exc


def _damaged(where: str, exc: Exception) -> ValueError:
    return ValueError(f"{where}: the Parquet data cannot be read (damaged file?): {exc}")


def iter_parquet(path, *, chunk_sessions: int = 100_000) -> Iterator[Sessions]:
    """Stream a Parquet click log (layout of :func:`read_parquet`) in chunks of at most
    ``chunk_sessions`` SERPs, reading one record batch at a time (logs larger than memory:
    deduplicate each chunk, then concatenate).

    Raises:
        ImportError: when ``pyarrow`` is not installed.
        ValueError: as :func:`read_parquet` (row numbers count from the file's start).

    Example (needs ``pyarrow``):
        >>> import pyarrow as pa, pyarrow.parquet as pq
        >>> from jaxcal.clicks import iter_parquet
        >>> table = pa.table({"query": [1, 2, 3], "doc": [[7, 8], [7], [9]],
        ...                   "clicks": [[0, 1], [1], [0]]})
        >>> pq.write_table(table, "log.parquet")
        >>> [c.n_sessions for c in iter_parquet("log.parquet", chunk_sessions=2)]
        [2, 1]
    """
    chunk_sessions = _check_chunk(chunk_sessions)
    pa, _, _ = _pyarrow()
    pf = _parquet_file(path)
    where = os.fspath(path)
    _parquet_schema(pf.schema_arrow, where)
    if pf.metadata.num_rows == 0:
        raise ValueError(f"{where} holds no SERPs.")
    first = 0
    batches = pf.iter_batches(batch_size=chunk_sessions)
    while True:
        try:
            batch = next(batches, None)
        except (pa.ArrowException, OSError) as exc:
            raise _damaged(where, exc) from None
        if batch is None:
            return
        table = pa.Table.from_batches([batch])
        yield _sessions_from_table(table, where, first)
        first += table.num_rows


def read_parquet(path) -> Sessions:
    """Read a Parquet table with columns ``query`` (integer), ``doc`` and ``clicks`` (lists
    of integers, one SERP per row; lists may differ in length: shorter SERPs are padded and
    masked; ``clicks`` may also be booleans) and optional ``weight`` (numeric, session
    multiplicities). Other columns are ignored (not read).

    Requires ``pyarrow`` (the ``dev`` extra; not a runtime dependency of jaxcal).

    Example (needs ``pyarrow``):
        >>> import pyarrow as pa, pyarrow.parquet as pq
        >>> from jaxcal.clicks import read_parquet
        >>> pq.write_table(pa.table({"query": [3], "doc": [[7, 8]], "clicks": [[0, 1]]}),
        ...                "log.parquet")
        >>> read_parquet("log.parquet").clicks
        array([[0, 1]], dtype=int8)

    Raises:
        ImportError: when ``pyarrow`` is not installed.
        ValueError: naming the file, and the row (0-based) and column where there is one:
            a missing, unreadable or damaged file, missing columns, columns of the wrong
            type, nulls (a null ``query``, ``doc``, ``clicks`` or ``weight``, and nulls
            inside ``doc`` / ``clicks`` lists), a row whose ``doc`` and ``clicks`` lists
            differ in length or are empty, ids outside ``[0, 2**31 - 1]``, clicks not 0/1,
            weights that are negative or not finite, a file without rows.
    """
    pa, _, _ = _pyarrow()
    pf = _parquet_file(path)
    where = os.fspath(path)
    _parquet_schema(pf.schema_arrow, where)
    try:
        table = pf.read()
    except (pa.ArrowException, OSError) as exc:
        raise _damaged(where, exc) from None
    if table.num_rows == 0:
        raise ValueError(f"{where} holds no SERPs.")
    return _sessions_from_table(table, where, 0)
