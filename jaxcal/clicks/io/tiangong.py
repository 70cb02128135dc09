"""The TianGong-ST click log (see :mod:`jaxcal.clicks.io`)."""

from __future__ import annotations

import json
from collections.abc import Iterator

from jaxcal.clicks.io._common import (
    _MAX_INT64,
    _SCAN_JSON,
    LogChunks,
    ReadReport,
    _decode,
    _error,
    _numbered,
    _pack,
    _short,
    _uint,
)
from jaxcal.clicks.sessions import _MAX_ID, Sessions


def _int_list(token: str, what: str, path: str, lineno: int) -> list[int]:
    """A JSON list of integers (JSON booleans, floats, strings and nesting are rejected)."""
    try:  # the C scanner of the json module, without json.loads' Python wrapper
        values, end = _SCAN_JSON(token, 0)
    except (StopIteration, ValueError, RecursionError):
        end = -1
    if end != len(token):  # the JSON parser names the problem (or allows white space)
        values = _parse_json_list(token, what, path, lineno)
    if type(values) is not list or (values and set(map(type, values)) != {int}):
        raise _error(path, lineno, f"{what} must be a list of integers; got {token[:80]!r}.")
    return values


def _parse_json_list(token: str, what: str, path: str, lineno: int) -> object:
    try:
        values = json.loads(token)
    except RecursionError:
        raise _error(path, lineno, f"{what} are nested too deeply to be a list.") from None
    except ValueError:  # not JSON, or an integer of thousands of digits
        raise _error(
            path, lineno, f"{what} must be a list like [1, 2, 3]; got {token[:80]!r}."
        ) from None
    return values


def _tiangong_chunks(path: str, chunk_sessions: int, report: ReadReport) -> Iterator[Sessions]:
    rows: list[tuple[int, list[int], list[int]]] = []
    for lineno, raw in _numbered(path):
        report.lines = lineno
        line = raw.decode("utf-8") if raw.isascii() else _decode(raw, path, lineno)
        line = line.rstrip("\r\n")
        if not line.strip():
            report.blank_lines += 1
            continue
        parts = line.split("\t")
        if len(parts) not in (5, 6):
            raise _error(
                path,
                lineno,
                "expected 5 or 6 tab-separated fields (sid qid [docs] [vtypes] [clicks] "
                f"[labels]); got {len(parts)}.",
            )
        _uint(parts[0], "session id", _MAX_INT64, path, lineno)
        q = _uint(parts[1], "query id", _MAX_ID, path, lineno)
        docs = _int_list(parts[2], "documents", path, lineno)
        n = len(docs)
        if not n:
            raise _error(path, lineno, "empty SERP.")
        if min(docs) < 0 or max(docs) > _MAX_ID:
            raise _error(
                path,
                lineno,
                f"document ids must be non-negative integers below 2**31; got {_short(docs)}.",
            )
        vtypes = _int_list(parts[3], "vertical types", path, lineno)
        if len(vtypes) != n:
            raise _error(path, lineno, f"{n} documents but {len(vtypes)} vertical types.")
        if min(vtypes) < 0 or max(vtypes) > _MAX_INT64:
            raise _error(
                path, lineno, f"vertical types must be non-negative integers; got {_short(vtypes)}."
            )
        clicks = _int_list(parts[4], "clicks", path, lineno)
        if len(clicks) != n:
            raise _error(path, lineno, f"{n} documents but {len(clicks)} clicks.")
        if not set(clicks) <= {0, 1}:
            raise _error(path, lineno, f"clicks must be 0/1; got {_short(clicks)}.")
        if len(parts) == 6:
            labels = _int_list(parts[5], "labels", path, lineno)
            if len(labels) != n:
                raise _error(path, lineno, f"{n} documents but {len(labels)} labels.")
            if min(labels) < -_MAX_INT64 - 1 or max(labels) > _MAX_INT64:
                raise _error(path, lineno, f"labels must be 64-bit integers; got {_short(labels)}.")
        rows.append((q, docs, clicks))
        report.serps += 1
        report.clicks += sum(clicks)
        if len(rows) >= chunk_sessions:
            yield _pack(rows)
            rows = []
    if not report.serps:
        raise ValueError(f"{path} holds no SERPs.")
    if rows:
        yield _pack(rows)


def iter_tiangong(path, *, chunk_sessions: int = 100_000) -> LogChunks:
    """Stream a TianGong-ST demo file in chunks of ``chunk_sessions`` SERPs.

    The module docstring lists what is rejected and what is ignored.

    Returns:
        An iterator of chunks; its ``report`` (:class:`ReadReport`) counts what has been
        read so far.

    Raises:
        ValueError: on a missing file, an invalid argument, a malformed line (with its
            line number), or a file without any SERP.

    Example:
        >>> from jaxcal.clicks import Sessions, iter_tiangong
        >>> lines = [f"{i}\\t{i % 2}\\t[1, 2]\\t[0, 0]\\t[1, 0]\\n" for i in range(6)]
        >>> with open("log.txt", "w") as f:
        ...     _ = f.write("".join(lines))
        >>> chunks = iter_tiangong("log.txt", chunk_sessions=4)
        >>> log = Sessions.concatenate([c.deduplicate() for c in chunks]).deduplicate()
        >>> log.n_sessions, log.total_weight  # two distinct SERPs, six sessions
        (2, 6.0)
    """
    return LogChunks._of_file(_tiangong_chunks, path, chunk_sessions)


def read_tiangong(path, *, return_report: bool = False) -> Sessions | tuple[Sessions, ReadReport]:
    """Read a TianGong-ST demo file (``sid qid [docs] [vtypes] [clicks] ([labels])``;
    rejected and ignored records: see the module docstring).

    Args:
        path: the file.
        return_report: also return the :class:`ReadReport` of the file.

    Returns:
        The log, or ``(log, report)`` with ``return_report=True``.

    Example:
        >>> from jaxcal.data import default_data_dir
        >>> from jaxcal.clicks import read_tiangong
        >>> log = read_tiangong(default_data_dir() / "tiangong-st-demo/train_per_query_quid.txt")
        >>> log.n_sessions
        2872
    """
    return LogChunks._of_file(_tiangong_chunks, path, 1 << 62)._concatenate(return_report)
