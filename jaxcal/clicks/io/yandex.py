"""The Yandex relevance-prediction click log (see :mod:`jaxcal.clicks.io`)."""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator
from typing import Literal

from jaxcal.clicks.io._common import (
    _KEEP_LINES,
    _MAX_INT64,
    LogChunks,
    ReadReport,
    UnshownClickWarning,
    _check_policy,
    _decode,
    _error,
    _numbered,
    _pack,
    _SeenIds,
    _uint,
)
from jaxcal.clicks.sessions import _MAX_ID, Sessions


def _yandex_values(parts: list[bytes], kind: bytes, path: str, lineno: int) -> list[int]:
    """The integers of a Yandex line (the record type replaced by 0), each checked."""
    if kind == b"Q":
        names = ["SessionID", "TimePassed", "", "QueryID", "RegionID"]
        names += ["URL id"] * (len(parts) - 5)
    else:
        names = ["SessionID", "TimePassed", "", "URLID"]
    big = ("SessionID", "TimePassed", "RegionID")
    return [
        _uint(token.decode("utf-8"), name, _MAX_INT64 if name in big else _MAX_ID, path, lineno)
        for token, name in zip(parts, names, strict=True)
    ]


def _yandex_chunks(
    path: str, chunk_sessions: int, report: ReadReport, *, policy: str
) -> Iterator[Sessions]:
    rows: list[tuple[int, list[int], list[int]]] = []
    serps: list[tuple[int, list[int], list[int]]] = []  # SERPs of the current session
    current = -1  # id of the current session
    last_time = 0
    seen = _SeenIds()
    n_sessions = 0
    # counts kept in locals (fast), copied to the report at each chunk and at the end
    n_lines = n_serps = n_click_lines = n_clicks = n_search_sessions = 0
    report.search_sessions = 0
    for lineno, raw in _numbered(path):
        n_lines = lineno
        # fields stay bytes (int() reads ASCII digits from bytes); other lines are decoded
        # first, to name undecodable bytes (their fields then fail the checks below)
        if raw.isascii():
            parts = raw.split()
        else:
            parts = [p.encode("utf-8") for p in _decode(raw, path, lineno).split()]
        n = len(parts)
        if not n:
            report.blank_lines += 1
            continue
        if n < 4:
            raise _error(path, lineno, f"expected at least 4 fields; got {n}.")
        kind = parts[2]
        if kind == b"Q":
            if n < 6:
                raise _error(path, lineno, "a query line needs QueryID, RegionID and URLs.")
        elif kind == b"C":
            if n != 4:
                raise _error(path, lineno, f"a click line has 4 fields; got {n}.")
        else:
            got = kind.decode("utf-8")[:20]
            raise _error(path, lineno, f"record type must be Q or C; got {got!r}.")
        parts[2] = b"0"
        values = None
        if b"".join(parts).isdigit():  # fast path: ASCII digits, all < 2**31
            try:
                values = list(map(int, parts))
            except ValueError:  # thousands of digits
                pass
        if values is None or max(values) > _MAX_ID:
            values = _yandex_values(parts, kind, path, lineno)  # each field checked
        sid = values[0]
        t = values[1]
        if sid != current:
            if sid in seen:
                raise _error(
                    path,
                    lineno,
                    f"search session {sid} continues here after lines of other sessions; the "
                    "lines of a session must be contiguous (sort the log by SessionID, keeping "
                    "the order of lines within each session).",
                )
            seen.add(sid)
            rows.extend(serps)
            serps = []
            current = sid
            last_time = t
            n_search_sessions += 1
            n_sessions += 1
            if n_sessions > chunk_sessions and rows:
                report.lines, report.serps, report.clicks = lineno - 1, n_serps, n_clicks
                report.click_lines, report.search_sessions = n_click_lines, n_search_sessions - 1
                yield _pack(rows)
                rows = []
                n_sessions = 1
        elif t < last_time:
            raise _error(
                path,
                lineno,
                f"TimePassed {t} is smaller than {last_time} on the previous line of search "
                f"session {sid}; the lines of a session must be in the order of its actions.",
            )
        last_time = t
        if kind == b"Q":
            urls = values[5:]
            if len(set(urls)) != len(urls):
                twice = next(u for u in urls if urls.count(u) > 1)
                raise _error(
                    path,
                    lineno,
                    f"URL {twice} is shown twice on this result page; a click on it would be "
                    "ambiguous.",
                )
            serps.append((values[3], urls, [0] * len(urls)))
            n_serps += 1
        else:
            url = values[3]
            n_click_lines += 1
            if not serps:
                raise _error(
                    path,
                    lineno,
                    f"a click before the first query line of search session {sid}.",
                )
            for _, urls, clicks in reversed(serps):
                if url in urls:
                    i = urls.index(url)
                    if clicks[i]:
                        report.repeated_clicks += 1  # clicks are binary: counted once
                    else:
                        clicks[i] = 1
                        n_clicks += 1
                    break
            else:
                if policy == "error":
                    raise _error(
                        path,
                        lineno,
                        f"a click on URL {url}, which no result page of search session {sid} "
                        "has shown so far (on_unshown_click='error').",
                    )
                report.unshown_clicks += 1
                if len(report.unshown_click_lines) < _KEEP_LINES:
                    report.unshown_click_lines.append(lineno)
    rows.extend(serps)
    report.lines, report.serps, report.clicks = n_lines, n_serps, n_clicks
    report.click_lines, report.search_sessions = n_click_lines, n_search_sessions
    if not n_serps:
        raise ValueError(f"{path} holds no query (Q) lines.")
    if report.unshown_clicks and policy == "warn":
        warnings.warn(
            f"{path}: {report.unshown_clicks} of {report.click_lines} clicks are on URLs that "
            "no result page of their search session showed; they are left out (first at "
            f"lines {report.unshown_click_lines}). Pass on_unshown_click='count' to silence "
            "this (the count stays in the report) or 'error' to reject such files.",
            UnshownClickWarning,
            stacklevel=3,  # the caller of read_yandex / of next() on the chunks
        )
    if rows:
        yield _pack(rows)


def iter_yandex(
    path,
    *,
    chunk_sessions: int = 100_000,
    on_unshown_click: Literal["warn", "count", "error"] = "warn",
) -> LogChunks:
    """Stream a Yandex Relevance Prediction log as :class:`Sessions` chunks of SERPs from
    about ``chunk_sessions`` search sessions each (sessions are never split).

    The module docstring lists what is rejected and what is ignored.

    Args:
        path: the log file.
        chunk_sessions: search sessions per chunk.
        on_unshown_click: what to do with a click on a URL that no result page of its
            session has shown: ``"warn"`` (leave it out, count it, and warn once per file
            with the count: :class:`UnshownClickWarning`), ``"count"`` (leave it out and
            count it) or ``"error"`` (raise ``ValueError`` naming the line).

    Returns:
        An iterator of chunks; its ``report`` (:class:`ReadReport`) counts the lines,
        SERPs, clicks, repeated clicks and left-out clicks read so far.

    Raises:
        ValueError: on a missing file, an invalid argument, a malformed line (with its
            line number), or a file without any SERP.

    Example:
        >>> from jaxcal.clicks import iter_yandex
        >>> with open("log.txt", "w") as f:  # three search sessions of one SERP each
        ...     _ = f.write("".join(f"{s}\\t0\\tQ\\t3\\t0\\t11\\t12\\n{s}\\t5\\tC\\t12\\n"
        ...                         for s in range(3)))
        >>> chunks = iter_yandex("log.txt", chunk_sessions=2)
        >>> [c.n_sessions for c in chunks], chunks.report.search_sessions
        ([2, 1], 3)
    """
    policy = _check_policy(on_unshown_click)
    read_chunks = functools.partial(_yandex_chunks, policy=policy)
    return LogChunks._of_file(read_chunks, path, chunk_sessions)


def read_yandex(
    path,
    *,
    on_unshown_click: Literal["warn", "count", "error"] = "warn",
    return_report: bool = False,
) -> Sessions | tuple[Sessions, ReadReport]:
    """Read a whole Yandex Relevance Prediction log (format, rejected and ignored records:
    see the module docstring).

    Args:
        path: the log file.
        on_unshown_click: ``"warn"`` (default), ``"count"`` or ``"error"``: see
            :func:`iter_yandex`.
        return_report: also return the :class:`ReadReport` of the file.

    Returns:
        The log, or ``(log, report)`` with ``return_report=True``.

    Example (a log of one session: a result page of query 3 with URLs 11, 12, 13, a click
    on URL 12, and a click on URL 99, which no result page of the session has shown):
        >>> from jaxcal.clicks import read_yandex
        >>> with open("log.txt", "w") as f:
        ...     _ = f.write("7\\t0\\tQ\\t3\\t0\\t11\\t12\\t13\\n7\\t5\\tC\\t12\\n7\\t9\\tC\\t99\\n")
        >>> log, report = read_yandex("log.txt", on_unshown_click="count", return_report=True)
        >>> log.doc, log.clicks
        (array([[11, 12, 13]], dtype=int32), array([[0, 1, 0]], dtype=int8))
        >>> report.serps, report.clicks, report.unshown_clicks
        (1, 1, 1)
    """
    policy = _check_policy(on_unshown_click)
    read_chunks = functools.partial(_yandex_chunks, policy=policy)
    return LogChunks._of_file(read_chunks, path, 1 << 62)._concatenate(return_report)
